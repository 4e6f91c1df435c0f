//! The in-memory event model shared by the agent, importers and analyses.
//!
//! Every event carries its own start and end (an instant has `end == start`)
//! and enough identity to derive its [`Track`]. Enumerations that come from
//! CUPTI are newtypes over the raw number, so a value this build does not
//! know survives a round trip instead of turning into "unknown".

use crate::units::*;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Where an event is drawn and in which order it is iterated: a GPU stream,
/// a CPU thread, or the process as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Track {
    /// A (device, context, stream) triple. Kernels, copies, memsets and
    /// stream or context synchronizations live here.
    Gpu {
        /// Device ordinal.
        device: DeviceId,
        /// CUPTI context id.
        context: ContextId,
        /// CUPTI stream id ([`StreamId::UNKNOWN`] for context-wide events).
        stream: StreamId,
    },
    /// A CPU thread: CUDA API calls and NVTX ranges.
    Thread {
        /// OS thread id.
        tid: ThreadId,
    },
    /// Process-wide events: NCCL collective metadata, loss records and
    /// counter samples (which name their device themselves).
    Process,
}

impl fmt::Display for Track {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Track::Gpu { device, context, stream } if *stream == StreamId::UNKNOWN => {
                write!(f, "gpu{device} ctx{context} (no stream)")
            }
            Track::Gpu { device, context, stream } => write!(f, "gpu{device} ctx{context} stream{stream}"),
            Track::Thread { tid } => write!(f, "thread {tid}"),
            Track::Process => f.write_str("process"),
        }
    }
}

/// The kinds of event a trace holds. The numbers are part of the file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum EventKind {
    /// GPU kernel execution.
    Kernel = 1,
    /// Memory copy.
    Memcpy = 2,
    /// Memory set.
    Memset = 3,
    /// GPU-side synchronization (stream/event/context sync as seen by CUPTI).
    Sync = 4,
    /// CUDA runtime or driver API call on a CPU thread.
    Api = 5,
    /// NVTX-style range or instant marker.
    Marker = 6,
    /// NCCL collective or point-to-point operation metadata.
    Collective = 7,
    /// Loss record: data that was dropped, with its source.
    Loss = 8,
    /// One sample of a hardware counter series (format 1.2).
    Counter = 9,
    /// One CUDA graph launch recorded at graph level (format 1.5): the
    /// graph's span on the GPU, in place of its kernels, copies and memsets.
    GraphLaunch = 11,
    /// One moment of a served request (format 1.7): arrived, scheduled,
    /// first token, finished or failed, marked by the server itself.
    Request = 13,
}

impl EventKind {
    /// Every kind, in file-format order.
    pub const ALL: [EventKind; 11] = [
        EventKind::Kernel,
        EventKind::Memcpy,
        EventKind::Memset,
        EventKind::Sync,
        EventKind::Api,
        EventKind::Marker,
        EventKind::Collective,
        EventKind::Loss,
        EventKind::Counter,
        EventKind::GraphLaunch,
        EventKind::Request,
    ];

    /// This kind's position in [`EventKind::ALL`] (for per-kind arrays;
    /// the file-format numbers have gaps).
    #[inline]
    pub const fn index(self) -> usize {
        match self {
            EventKind::GraphLaunch => 9,
            EventKind::Request => 10,
            k => k as usize - 1,
        }
    }

    /// The kind for a file-format number, if this build knows it (the
    /// numbers have gaps: 10 and 12 are assigned to other kinds).
    pub fn from_u8(v: u8) -> Option<EventKind> {
        EventKind::ALL.iter().copied().find(|k| *k as u8 == v)
    }

    /// Whether chunks of this kind can be read as spans
    /// ([`crate::ChunkDecoder::spans`]): every kind with a duration, that
    /// is all but collectives, losses, counter samples and request marks.
    pub fn has_spans(self) -> bool {
        !matches!(
            self,
            EventKind::Collective | EventKind::Loss | EventKind::Counter | EventKind::Request
        )
    }

    /// Lower-case name used in output and JSON.
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Kernel => "kernel",
            EventKind::Memcpy => "memcpy",
            EventKind::Memset => "memset",
            EventKind::Sync => "sync",
            EventKind::Api => "api",
            EventKind::Marker => "marker",
            EventKind::Collective => "collective",
            EventKind::Loss => "loss",
            EventKind::Counter => "counter",
            EventKind::GraphLaunch => "graph_launch",
            EventKind::Request => "request",
        }
    }
}

macro_rules! raw_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $val:expr => $label:expr),* $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub u8);

        impl $name {
            $($(#[$vdoc])* pub const $variant: $name = $name($val);)*

            /// Short name for display; `"?"` for a value this build does not know.
            pub fn name(self) -> &'static str {
                match self.0 {
                    $($val => $label,)*
                    _ => "?",
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

raw_enum!(
    /// Direction of a memory copy; values are CUPTI's `CUpti_ActivityMemcpyKind`.
    CopyKind {
        /// Unknown.
        UNKNOWN = 0 => "unknown",
        /// Host to device.
        HTOD = 1 => "HtoD",
        /// Device to host.
        DTOH = 2 => "DtoH",
        /// Host to array.
        HTOA = 3 => "HtoA",
        /// Array to host.
        ATOH = 4 => "AtoH",
        /// Array to array.
        ATOA = 5 => "AtoA",
        /// Array to device.
        ATOD = 6 => "AtoD",
        /// Device to array.
        DTOA = 7 => "DtoA",
        /// Device to device (same device).
        DTOD = 8 => "DtoD",
        /// Host to host.
        HTOH = 9 => "HtoH",
        /// Peer to peer (between devices).
        PTOP = 10 => "PtoP",
    }
);

raw_enum!(
    /// Kind of memory on either side of a copy or memset; values are CUPTI's
    /// `CUpti_ActivityMemoryKind`.
    MemoryKind {
        /// Unknown.
        UNKNOWN = 0 => "unknown",
        /// Pageable host memory (copies from it are staged and synchronous).
        PAGEABLE = 1 => "pageable",
        /// Pinned (page-locked) host memory.
        PINNED = 2 => "pinned",
        /// Device memory.
        DEVICE = 3 => "device",
        /// CUDA array.
        ARRAY = 4 => "array",
        /// Managed (unified) memory.
        MANAGED = 5 => "managed",
        /// Device static memory.
        DEVICE_STATIC = 6 => "device-static",
        /// Managed static memory.
        MANAGED_STATIC = 7 => "managed-static",
    }
);

raw_enum!(
    /// Kind of GPU synchronization; values are CUPTI's
    /// `CUpti_ActivitySynchronizationType`.
    SyncKind {
        /// Unknown.
        UNKNOWN = 0 => "unknown",
        /// `cudaEventSynchronize`.
        EVENT_SYNCHRONIZE = 1 => "event-sync",
        /// `cudaStreamWaitEvent`.
        STREAM_WAIT_EVENT = 2 => "stream-wait-event",
        /// `cudaStreamSynchronize`.
        STREAM_SYNCHRONIZE = 3 => "stream-sync",
        /// `cudaDeviceSynchronize` / context synchronize.
        CONTEXT_SYNCHRONIZE = 4 => "context-sync",
    }
);

raw_enum!(
    /// Which CUDA API an [`ApiCall`] belongs to.
    ApiDomain {
        /// Unknown.
        UNKNOWN = 0 => "unknown",
        /// CUDA runtime API (`cuda*`).
        RUNTIME = 1 => "runtime",
        /// CUDA driver API (`cu*`).
        DRIVER = 2 => "driver",
    }
);

raw_enum!(
    /// Range or instant, for [`Marker`].
    MarkerKind {
        /// A range with a start and an end (NVTX push/pop or start/end).
        RANGE = 0 => "range",
        /// An instant (NVTX mark).
        INSTANT = 1 => "instant",
    }
);

raw_enum!(
    /// Where a [`Loss`] happened.
    LossSource {
        /// Unknown.
        UNKNOWN = 0 => "unknown",
        /// CUPTI's own dropped-record count (`cuptiActivityGetNumDroppedRecords`).
        CUPTI_DROPPED = 1 => "cupti-dropped",
        /// The agent's buffer pool was empty; CUPTI got a discard buffer.
        BUFFER_POOL_EXHAUSTED = 2 => "buffer-pool-exhausted",
        /// The agent's queue to the writer thread was full.
        QUEUE_OVERFLOW = 3 => "queue-overflow",
        /// Records the decoder could not read (unknown or malformed).
        UNDECODABLE = 4 => "undecodable",
        /// The writer could not write (e.g. disk full).
        WRITE_FAILED = 5 => "write-failed",
        /// The trace ended early (truncated file, killed process).
        TRUNCATED = 6 => "truncated",
        /// NCCL profiler plugin events dropped.
        NCCL_PLUGIN = 7 => "nccl-plugin",
        /// Events dropped by an importer (malformed input entries).
        IMPORT = 8 => "import",
        /// A sampled counter series stopped because its source failed
        /// (`detail` names the series and the call; format 1.2).
        COUNTER_FAILED = 9 => "counter-failed",
        /// Samples a hardware counter sampler lost because its hardware
        /// buffer overflowed (CUPTI PM sampling); `count` is estimated from
        /// the gap in sample times, `detail` names the device (format 1.2).
        COUNTER_OVERFLOW = 10 => "counter-overflow",
    }
);

/// A kernel execution. `Default` is all zeros (no name), to be filled in
/// field by field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kernel {
    /// Start on the GPU.
    pub start: Nanos,
    /// End on the GPU.
    pub end: Nanos,
    /// Device ordinal.
    pub device: DeviceId,
    /// Context.
    pub context: ContextId,
    /// Stream.
    pub stream: StreamId,
    /// Links to the launching [`ApiCall`].
    pub correlation: CorrelationId,
    /// Kernel name (mangled or demangled, as recorded).
    pub name: StringId,
    /// Grid dimensions.
    pub grid: [u32; 3],
    /// Block dimensions.
    pub block: [u32; 3],
    /// Static shared memory per block, bytes.
    pub static_shared_mem: u32,
    /// Dynamic shared memory per block, bytes.
    pub dynamic_shared_mem: u32,
    /// Registers per thread.
    pub registers: u32,
    /// CUDA graph id (0 = not launched from a graph).
    pub graph_id: u32,
    /// CUDA graph node id (0 = not launched from a graph).
    pub graph_node_id: u64,
}

/// A memory copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memcpy {
    /// Start on the GPU.
    pub start: Nanos,
    /// End on the GPU.
    pub end: Nanos,
    /// Device that executed the copy.
    pub device: DeviceId,
    /// Context.
    pub context: ContextId,
    /// Stream.
    pub stream: StreamId,
    /// Links to the launching [`ApiCall`].
    pub correlation: CorrelationId,
    /// Direction.
    pub kind: CopyKind,
    /// Bytes copied.
    pub bytes: u64,
    /// Source memory kind.
    pub src_kind: MemoryKind,
    /// Destination memory kind.
    pub dst_kind: MemoryKind,
    /// Source device (peer copies; otherwise equals `device`).
    pub src_device: DeviceId,
    /// Destination device (peer copies; otherwise equals `device`).
    pub dst_device: DeviceId,
}

/// A memory set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memset {
    /// Start on the GPU.
    pub start: Nanos,
    /// End on the GPU.
    pub end: Nanos,
    /// Device.
    pub device: DeviceId,
    /// Context.
    pub context: ContextId,
    /// Stream.
    pub stream: StreamId,
    /// Links to the launching [`ApiCall`].
    pub correlation: CorrelationId,
    /// Bytes set.
    pub bytes: u64,
    /// Value written.
    pub value: u32,
    /// Memory kind.
    pub memory_kind: MemoryKind,
}

/// A synchronization as CUPTI records it (the span the host waited).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sync {
    /// Start.
    pub start: Nanos,
    /// End.
    pub end: Nanos,
    /// Device.
    pub device: DeviceId,
    /// Context.
    pub context: ContextId,
    /// Stream ([`StreamId::UNKNOWN`] for context synchronization).
    pub stream: StreamId,
    /// Links to the API call that synchronized.
    pub correlation: CorrelationId,
    /// Which synchronization.
    pub kind: SyncKind,
    /// CUDA event id for event synchronizations (0 otherwise).
    pub cuda_event: u32,
}

/// One launch of a CUDA graph, recorded at graph level (CUPTI's
/// GRAPH_TRACE kind): from its first node's start to its last node's end,
/// on the stream it was launched into. Its kernels, copies and memsets are
/// not recorded one by one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphLaunch {
    /// Start of the graph's first node.
    pub start: Nanos,
    /// End of its last node.
    pub end: Nanos,
    /// Device it started on.
    pub device: DeviceId,
    /// Context.
    pub context: ContextId,
    /// Stream it was launched into.
    pub stream: StreamId,
    /// Links to the `cudaGraphLaunch`/`cuGraphLaunch` API call.
    pub correlation: CorrelationId,
    /// CUPTI's id of the graph (the `graph_id` of its kernels at node level).
    pub graph_id: u32,
}

/// A CUDA runtime or driver API call on a CPU thread. `Default` is all
/// zeros (unknown domain, no name), to be filled in field by field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiCall {
    /// Entry.
    pub start: Nanos,
    /// Return.
    pub end: Nanos,
    /// Calling thread.
    pub thread: ThreadId,
    /// Correlation id shared with the GPU work it launched.
    pub correlation: CorrelationId,
    /// Runtime or driver.
    pub domain: ApiDomain,
    /// CUPTI callback id within the domain.
    pub cbid: u32,
    /// Function name (e.g. `cudaLaunchKernel`).
    pub name: StringId,
    /// Return code (0 = success).
    pub return_value: u32,
}

/// An NVTX-style range or instant on a CPU thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    /// Start (or the instant).
    pub start: Nanos,
    /// End (equals `start` for an instant).
    pub end: Nanos,
    /// Thread.
    pub thread: ThreadId,
    /// Message, e.g. `ProfilerStep#12`.
    pub name: StringId,
    /// NVTX domain or category (empty for the default domain).
    pub domain: StringId,
    /// Range or instant.
    pub kind: MarkerKind,
    /// ARGB color (0 = none).
    pub color: u32,
}

/// A communicator rank NCCL did not report (its `-1`): never confused with rank 0.
pub const RANK_UNKNOWN: u32 = u32::MAX;

/// One NCCL collective or point-to-point operation, with what NCCL knows of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Collective {
    /// GPU start when known, else the CPU enqueue time.
    pub start: Nanos,
    /// GPU end when known, else equal to `start`.
    pub end: Nanos,
    /// CPU time when the operation was enqueued (0 = unknown).
    pub enqueue: Nanos,
    /// Communicator.
    pub comm: CommId,
    /// Operation, e.g. `AllReduce`, `Send`.
    pub op: StringId,
    /// Per-communicator, per-operation sequence number.
    pub seq: u64,
    /// Element count.
    pub count: u64,
    /// Data type, e.g. `bf16` (gputrace's short names; see [`datatype_size`];
    /// imported traces keep their own spelling, e.g. PyTorch's `BFloat16`).
    pub datatype: StringId,
    /// Bytes (per rank, as NCCL reports).
    pub bytes: u64,
    /// This process's rank in the communicator ([`RANK_UNKNOWN`] when NCCL did not say).
    pub rank: u32,
    /// Number of ranks in the communicator.
    pub nranks: u32,
    /// Root or peer rank (-1 = none).
    pub root: i32,
    /// Algorithm, e.g. `Ring` (empty = unknown).
    pub algorithm: StringId,
    /// Protocol, e.g. `LL128` (empty = unknown).
    pub protocol: StringId,
    /// Channels used (0 = unknown).
    pub channels: u32,
    /// Device that ran it.
    pub device: DeviceId,
    /// Stream it ran on ([`StreamId::UNKNOWN`] if not known).
    pub stream: StreamId,
    /// Correlation id of the kernel that executed it (0 = not linked).
    pub correlation: CorrelationId,
}

/// Bytes per element of a datatype by gputrace's short name (`i8`, `u8`,
/// `f8e4m3`, `f8e5m2`, `f16`, `bf16`, `i32`, `u32`, `f32`, `i64`, `u64`,
/// `f64`); 0 for a name it does not know.
pub fn datatype_size(short: &str) -> u64 {
    match short {
        "i8" | "u8" | "f8e4m3" | "f8e5m2" => 1,
        "f16" | "bf16" => 2,
        "i32" | "u32" | "f32" => 4,
        "i64" | "u64" | "f64" => 8,
        _ => 0,
    }
}

/// Data that was lost, with where and when, so that no loss is silent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Loss {
    /// When the loss was observed.
    pub time: Nanos,
    /// Where it happened.
    pub source: LossSource,
    /// How many records or events were lost.
    pub count: u64,
    /// Free-form detail (empty if none).
    pub detail: StringId,
}

/// One sample of a hardware counter series: the value a device's counter
/// had at `time`. A series is a (device, metric) pair; the metric's name is
/// a string of the trace (so each name is stored once, in a strings chunk),
/// by convention `<source>.<quantity>_<unit>` (see [`crate::metric`]).
/// Values are unsigned integers in the unit the name ends with; a bit mask
/// (`nvml.throttle_reasons`) is stored as is. Samples of one series come
/// in time order; a series that stops (its source failed) simply has no
/// more samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counter {
    /// When the value was read, in the trace's time domain.
    pub time: Nanos,
    /// Device the counter belongs to (ordinal, as in the header's devices).
    pub device: DeviceId,
    /// Series name, e.g. `nvml.sm_clock_mhz`.
    pub metric: StringId,
    /// The value, in the unit the metric's name ends with.
    pub value: u64,
}

raw_enum!(
    /// Which moment of a served request a [`Request`] mark records.
    RequestPhase {
        /// The request reached the server (its prompt tokens known).
        ARRIVE = 0 => "arrive",
        /// The engine took it from the queue (queue time ends).
        SCHEDULED = 1 => "scheduled",
        /// Its first output token was produced.
        FIRST_TOKEN = 2 => "first_token",
        /// It finished normally (its generated tokens known).
        FINISH = 3 => "finish",
        /// It ended otherwise: aborted, an error.
        FAIL = 4 => "fail",
    }
);

/// One moment in the life of a request a server served, marked by the
/// server itself (`gputrace.request(...)`, format 1.7). A request is its
/// marks with the same `id`; a number, not a string, so that a trace of a
/// million requests adds no strings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// When the moment happened.
    pub time: Nanos,
    /// The server's request id (the Python module hashes a string id).
    pub id: u64,
    /// Which moment.
    pub phase: RequestPhase,
    /// Prompt tokens at `ARRIVE`, generated tokens at `FINISH` or `FAIL`
    /// (0: not given; other phases 0).
    pub tokens: u64,
}

/// Any event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum Event {
    Kernel(Kernel),
    Memcpy(Memcpy),
    Memset(Memset),
    Sync(Sync),
    Api(ApiCall),
    Marker(Marker),
    Collective(Collective),
    Loss(Loss),
    Counter(Counter),
    GraphLaunch(GraphLaunch),
    Request(Request),
}

impl Event {
    /// The kind of this event.
    #[inline]
    pub fn kind(&self) -> EventKind {
        match self {
            Event::Kernel(_) => EventKind::Kernel,
            Event::Memcpy(_) => EventKind::Memcpy,
            Event::Memset(_) => EventKind::Memset,
            Event::Sync(_) => EventKind::Sync,
            Event::Api(_) => EventKind::Api,
            Event::Marker(_) => EventKind::Marker,
            Event::Collective(_) => EventKind::Collective,
            Event::Loss(_) => EventKind::Loss,
            Event::Counter(_) => EventKind::Counter,
            Event::GraphLaunch(_) => EventKind::GraphLaunch,
            Event::Request(_) => EventKind::Request,
        }
    }

    /// Start time.
    #[inline]
    pub fn start(&self) -> Nanos {
        match self {
            Event::Kernel(e) => e.start,
            Event::Memcpy(e) => e.start,
            Event::Memset(e) => e.start,
            Event::Sync(e) => e.start,
            Event::Api(e) => e.start,
            Event::Marker(e) => e.start,
            Event::Collective(e) => e.start,
            Event::Loss(e) => e.time,
            Event::Counter(e) => e.time,
            Event::GraphLaunch(e) => e.start,
            Event::Request(e) => e.time,
        }
    }

    /// End time (equals the start for instants).
    #[inline]
    pub fn end(&self) -> Nanos {
        match self {
            Event::Kernel(e) => e.end,
            Event::Memcpy(e) => e.end,
            Event::Memset(e) => e.end,
            Event::Sync(e) => e.end,
            Event::Api(e) => e.end,
            Event::Marker(e) => e.end,
            Event::Collective(e) => e.end,
            Event::Loss(e) => e.time,
            Event::Counter(e) => e.time,
            Event::GraphLaunch(e) => e.end,
            Event::Request(e) => e.time,
        }
    }

    /// The correlation id a [`crate::Span`] of this event holds: a kernel's,
    /// copy's, memset's, synchronization's or API call's; 0 for markers,
    /// collectives (whose `correlation` is that of their kernel) and losses.
    #[inline]
    pub fn span_correlation(&self) -> u32 {
        match self {
            Event::Kernel(e) => e.correlation.0,
            Event::Memcpy(e) => e.correlation.0,
            Event::Memset(e) => e.correlation.0,
            Event::Sync(e) => e.correlation.0,
            Event::Api(e) => e.correlation.0,
            Event::GraphLaunch(e) => e.correlation.0,
            Event::Marker(_) | Event::Collective(_) | Event::Loss(_) | Event::Counter(_) | Event::Request(_) => 0,
        }
    }

    /// The track this event belongs to.
    #[inline]
    pub fn track(&self) -> Track {
        match self {
            Event::Kernel(e) => gpu_track(e.device, e.context, e.stream),
            Event::Memcpy(e) => gpu_track(e.device, e.context, e.stream),
            Event::Memset(e) => gpu_track(e.device, e.context, e.stream),
            Event::Sync(e) => gpu_track(e.device, e.context, e.stream),
            Event::GraphLaunch(e) => gpu_track(e.device, e.context, e.stream),
            Event::Api(e) => Track::Thread { tid: e.thread },
            Event::Marker(e) => Track::Thread { tid: e.thread },
            Event::Collective(_) | Event::Loss(_) | Event::Counter(_) | Event::Request(_) => Track::Process,
        }
    }
}

fn gpu_track(device: DeviceId, context: ContextId, stream: StreamId) -> Track {
    Track::Gpu { device, context, stream }
}

#[cfg(test)]
mod kind_tests {
    use super::EventKind;

    #[test]
    fn kind_numbers_have_gaps_and_every_kind_has_its_own_index() {
        for (i, k) in EventKind::ALL.iter().enumerate() {
            assert_eq!(k.index(), i, "{k:?}");
            assert_eq!(EventKind::from_u8(*k as u8), Some(*k));
        }
        assert_eq!(EventKind::from_u8(11), Some(EventKind::GraphLaunch));
        assert_eq!(EventKind::from_u8(13), Some(EventKind::Request));
        // 10 and 12 belong to other branches' kinds; 0 and 14+ to none this build knows.
        for unknown in [0, 10, 12, 14, 255] {
            assert_eq!(EventKind::from_u8(unknown), None, "{unknown}");
        }
    }
}
