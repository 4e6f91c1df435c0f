//! Newtypes for times and identifiers, so that a stream id is never passed
//! where a device ordinal was meant.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A point in time or a duration, in nanoseconds.
///
/// Event timestamps are in the trace's time domain (see
/// [`crate::Header::time_domain`]); the header's clock pairs map that domain to
/// `CLOCK_REALTIME` and `CLOCK_MONOTONIC`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Nanos(pub u64);

impl Nanos {
    /// Zero nanoseconds.
    pub const ZERO: Nanos = Nanos(0);

    /// `self - earlier`, or zero if `earlier` is later (CUPTI occasionally
    /// reports an end before its start; durations never go negative here).
    #[inline]
    pub fn saturating_sub(self, earlier: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(earlier.0))
    }

    /// The value in microseconds, as a float (for display).
    pub fn as_micros_f64(self) -> f64 {
        self.0 as f64 / 1e3
    }

    /// The value in seconds, as a float (for display).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
}

impl fmt::Display for Nanos {
    /// Human-readable duration: `1.234 s`, `12.3 ms`, `45.6 µs` or `789 ns`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0 as f64;
        if self.0 >= 1_000_000_000 {
            write!(f, "{:.3} s", n / 1e9)
        } else if self.0 >= 1_000_000 {
            write!(f, "{:.3} ms", n / 1e6)
        } else if self.0 >= 1_000 {
            write!(f, "{:.3} µs", n / 1e3)
        } else {
            write!(f, "{} ns", self.0)
        }
    }
}

macro_rules! id_newtype {
    ($(#[$doc:meta])* $name:ident($inner:ty)) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub $inner);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

id_newtype!(
    /// CUDA device ordinal inside the traced process (CUPTI `deviceId`).
    DeviceId(u32)
);
id_newtype!(
    /// CUPTI context id (process-unique; 0 means unknown).
    ContextId(u32)
);
id_newtype!(
    /// CUPTI stream id (context-unique; not the `CUstream` pointer).
    StreamId(u32)
);
id_newtype!(
    /// Correlation id linking a CUDA API call to the GPU work it launched.
    /// 0 means none.
    CorrelationId(u32)
);
id_newtype!(
    /// Operating-system thread id (`gettid`), not `pthread_self`.
    ThreadId(u32)
);
id_newtype!(
    /// Index into the file's string table. 0 is always the empty string.
    StringId(u32)
);
id_newtype!(
    /// Rank of a process in a distributed job.
    Rank(u32)
);
id_newtype!(
    /// Identity of an NCCL communicator (its 64-bit hash).
    CommId(u64)
);

impl StreamId {
    /// The stream is not known (e.g. a context-wide synchronization).
    pub const UNKNOWN: StreamId = StreamId(u32::MAX);
}

impl StringId {
    /// The empty string, always present.
    pub const EMPTY: StringId = StringId(0);
}
