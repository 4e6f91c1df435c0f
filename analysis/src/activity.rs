//! The GPU activity timeline: each device's span cut into equal bins, each
//! bin split the way the span is (compute, exposed communication, exposed
//! transfer, and idle by cause), so that a data-loader sawtooth, a checkpoint
//! pause or a straggler shows over time and not only in a total.
//!
//! Invariant: for every class, the bins sum exactly (integer ns) to the
//! device's total of that class: `compute_ns`, `exposed_communication_ns`,
//! `exposed_transfer_ns` and the four `idle_causes`. The binner takes the
//! sweep's pieces as they come (in time order) and the idle gaps once their
//! causes are known; it holds at most [`MAX_BINS`] bins, doubling the bin
//! width whenever a piece would fall past the last one (two neighbours
//! merge, so sums are kept), so memory is constant and a device ends with
//! between `MAX_BINS / 2` and `MAX_BINS` bins once its span is longer than
//! `MAX_BINS` µs.

use crate::sweep::{COMM, COMPUTE, TRANSFER};
use serde::{Deserialize, Serialize};

/// Most bins a device's timeline has.
pub const MAX_BINS: usize = 128;
/// Width of the first bins; doubled as the span grows.
const FIRST_BIN_NS: u64 = 1_000;

/// What one bin's time is split into, in drawing order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// A compute kernel ran.
    Compute,
    /// Communication ran and no compute.
    ExposedCommunication,
    /// A copy or memset ran and nothing else.
    ExposedTransfer,
    /// Idle while the CPU was busy before launching the next work.
    HostBound,
    /// Idle after the next work was launched.
    LaunchLatency,
    /// Idle while the CPU waited in a synchronization.
    Synchronization,
    /// Idle the CPU side cannot explain (no launching call found).
    Unattributed,
}

impl Class {
    /// Every class, in drawing order.
    pub const ALL: [Class; 7] = [
        Class::Compute,
        Class::ExposedCommunication,
        Class::ExposedTransfer,
        Class::HostBound,
        Class::LaunchLatency,
        Class::Synchronization,
        Class::Unattributed,
    ];

    /// The class's words for people.
    pub fn label(self) -> &'static str {
        match self {
            Class::Compute => "compute",
            Class::ExposedCommunication => "exposed communication",
            Class::ExposedTransfer => "exposed transfer",
            Class::HostBound => "idle: host-bound",
            Class::LaunchLatency => "idle: launch/dependency latency",
            Class::Synchronization => "idle: synchronization",
            Class::Unattributed => "idle: unattributed",
        }
    }

    /// The field of [`Activity`] holding this class's bins.
    pub fn key(self) -> &'static str {
        match self {
            Class::Compute => "compute_ns",
            Class::ExposedCommunication => "exposed_communication_ns",
            Class::ExposedTransfer => "exposed_transfer_ns",
            Class::HostBound => "host_bound_ns",
            Class::LaunchLatency => "launch_latency_ns",
            Class::Synchronization => "synchronization_ns",
            Class::Unattributed => "unattributed_ns",
        }
    }
}

/// One device's GPU activity over time (`report --json`: `ranks.N.devices.M.activity`).
/// Bin `i` covers `[start_ns + i·bin_ns, start_ns + (i+1)·bin_ns)`, the last one ends at the
/// device's `last_ns`. Each class's bins sum to the device's total of that class, and a
/// bin's classes sum to the traced time in it (its width, unless a duty-cycled capture
/// left part of it unwatched).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activity {
    /// Start of the first bin: the device's first activity.
    pub start_ns: u64,
    /// Width of every bin (the last may be cut short by the span's end).
    pub bin_ns: u64,
    /// Compute per bin.
    pub compute_ns: Vec<u64>,
    /// Exposed communication per bin.
    pub exposed_communication_ns: Vec<u64>,
    /// Exposed transfer per bin.
    pub exposed_transfer_ns: Vec<u64>,
    /// Idle, host-bound, per bin.
    pub host_bound_ns: Vec<u64>,
    /// Idle, launch/dependency latency, per bin.
    pub launch_latency_ns: Vec<u64>,
    /// Idle, synchronization, per bin.
    pub synchronization_ns: Vec<u64>,
    /// Idle, unattributed, per bin.
    pub unattributed_ns: Vec<u64>,
}

impl Activity {
    /// Number of bins.
    pub fn len(&self) -> usize {
        self.compute_ns.len()
    }

    /// Whether there is no bin.
    pub fn is_empty(&self) -> bool {
        self.compute_ns.is_empty()
    }

    /// The bins of one class.
    pub fn class(&self, c: Class) -> &[u64] {
        match c {
            Class::Compute => &self.compute_ns,
            Class::ExposedCommunication => &self.exposed_communication_ns,
            Class::ExposedTransfer => &self.exposed_transfer_ns,
            Class::HostBound => &self.host_bound_ns,
            Class::LaunchLatency => &self.launch_latency_ns,
            Class::Synchronization => &self.synchronization_ns,
            Class::Unattributed => &self.unattributed_ns,
        }
    }

    /// Bin `i` split by class, in [`Class::ALL`] order.
    pub fn bin(&self, i: usize) -> [u64; 7] {
        Class::ALL.map(|c| self.class(c).get(i).copied().unwrap_or(0))
    }

    fn from_bins(start_ns: u64, bin_ns: u64, bins: &[[u64; 7]]) -> Activity {
        let col = |k: usize| bins.iter().map(|b| b[k]).collect();
        Activity {
            start_ns,
            bin_ns,
            compute_ns: col(0),
            exposed_communication_ns: col(1),
            exposed_transfer_ns: col(2),
            host_bound_ns: col(3),
            launch_latency_ns: col(4),
            synchronization_ns: col(5),
            unattributed_ns: col(6),
        }
    }
}

/// Builds one device's [`Activity`] from the sweep's pieces and the idle gaps.
#[derive(Clone, Debug, Default)]
pub(crate) struct Binner {
    /// Start of bin 0 (the first piece's start), once a piece came.
    origin: Option<u64>,
    width: u64,
    bins: Vec<[u64; 7]>,
}

impl Binner {
    /// A piece of the sweep, `[a, b)` with overlap mask `mask`. Idle pieces (mask 0) are
    /// left to [`Binner::gap`], which knows their causes; they still set the origin.
    #[inline]
    pub(crate) fn piece(&mut self, a: u64, b: u64, mask: u8) {
        let class = if mask & COMPUTE != 0 {
            Class::Compute
        } else if mask & COMM != 0 {
            Class::ExposedCommunication
        } else if mask & TRANSFER != 0 {
            Class::ExposedTransfer
        } else {
            self.origin.get_or_insert(a);
            return;
        };
        self.add(class, a, b);
    }

    /// An idle gap `[start, end)` and the entry of the call that launched the work after
    /// it: before the launch, time inside `syncs` (sorted, disjoint) is synchronization and
    /// the rest host-bound; after it, launch latency; without a launch, unattributed. The
    /// same split as the report's idle causes.
    pub(crate) fn gap(&mut self, start: u64, end: u64, launch: Option<u64>, syncs: &[(u64, u64)]) {
        let Some(launch) = launch else {
            self.add(Class::Unattributed, start, end);
            return;
        };
        let launched = launch.clamp(start, end);
        let mut t = start;
        let first = syncs.partition_point(|&(_, e)| e <= start);
        for &(s, e) in &syncs[first..] {
            if s >= launched {
                break;
            }
            let (lo, hi) = (s.max(start), e.min(launched));
            self.add(Class::HostBound, t, lo);
            self.add(Class::Synchronization, lo, hi);
            t = hi;
        }
        self.add(Class::HostBound, t, launched);
        self.add(Class::LaunchLatency, launched, end);
    }

    fn add(&mut self, class: Class, a: u64, b: u64) {
        if b <= a {
            return;
        }
        let origin = *self.origin.get_or_insert(a);
        if self.width == 0 {
            self.width = FIRST_BIN_NS;
        }
        while b - origin.min(b) > self.width.saturating_mul(MAX_BINS as u64) {
            self.coarsen();
        }
        // Time before the origin cannot come from pieces in time order; should it come, it
        // counts in bin 0, so that the sums hold.
        let mut t = a;
        while t < b {
            let i = (t.saturating_sub(origin) / self.width) as usize;
            let bin_end = origin + (i as u64 + 1) * self.width;
            let hi = bin_end.min(b);
            if self.bins.len() <= i {
                self.bins.resize(i + 1, [0; 7]);
            }
            self.bins[i][class as usize] += hi - t;
            t = hi;
        }
    }

    /// Double the bin width: bins 2k and 2k+1 become bin k.
    fn coarsen(&mut self) {
        let merged: Vec<[u64; 7]> = self
            .bins
            .chunks(2)
            .map(|pair| {
                let mut m = pair[0];
                if let Some(b) = pair.get(1) {
                    for (x, y) in m.iter_mut().zip(b) {
                        *x += y;
                    }
                }
                m
            })
            .collect();
        self.bins = merged;
        self.width *= 2;
    }

    /// The timeline, or `None` when nothing ran.
    pub(crate) fn finish(self) -> Option<Activity> {
        let origin = self.origin?;
        if self.bins.is_empty() {
            return None;
        }
        Some(Activity::from_bins(origin, self.width, &self.bins))
    }
}

/// Compute share per column, as block characters: the text report's sparkline of one
/// device. Bins are merged in runs so the line is at most `width` characters; a column
/// without traced time is a space.
pub fn sparkline(a: &Activity, width: usize) -> String {
    const LEVELS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let per = a.len().div_ceil(width.max(1)).max(1);
    let mut s = String::new();
    for start in (0..a.len()).step_by(per) {
        let (mut compute, mut all) = (0u64, 0u64);
        for i in start..(start + per).min(a.len()) {
            let b = a.bin(i);
            compute += b[0];
            all += b.iter().sum::<u64>();
        }
        if all == 0 {
            s.push(' ');
        } else {
            let level = ((compute as f64 / all as f64) * 7.0).round() as usize;
            s.push(LEVELS[level.min(7)]);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sums(a: &Activity) -> [u64; 7] {
        Class::ALL.map(|c| a.class(c).iter().sum())
    }

    #[test]
    fn pieces_and_gaps_land_in_their_bins() {
        let mut b = Binner::default();
        b.piece(0, 1_500, COMPUTE);
        b.piece(1_500, 2_000, COMM);
        b.piece(2_000, 3_000, 0);
        b.piece(3_000, 3_200, TRANSFER | COMM);
        b.gap(2_000, 3_000, Some(2_800), &[(2_100, 2_300), (2_900, 4_000)]);
        let a = b.finish().unwrap();
        assert_eq!((a.start_ns, a.bin_ns, a.len()), (0, 1_000, 4));
        assert_eq!(a.compute_ns, [1_000, 500, 0, 0]);
        assert_eq!(a.exposed_communication_ns, [0, 500, 0, 200]);
        assert_eq!(a.synchronization_ns, [0, 0, 200, 0]);
        assert_eq!(a.host_bound_ns, [0, 0, 600, 0]);
        assert_eq!(a.launch_latency_ns, [0, 0, 200, 0]);
    }

    #[test]
    fn the_width_doubles_and_sums_hold() {
        let mut b = Binner::default();
        b.piece(0, 10, COMPUTE);
        b.piece(1_000_000, 1_000_010, COMPUTE);
        let a = b.finish().unwrap();
        assert!(a.len() <= MAX_BINS && a.len() > MAX_BINS / 2, "{}", a.len());
        assert_eq!(a.compute_ns.iter().sum::<u64>(), 20);
        assert_eq!(a.compute_ns[0], 10);
        assert_eq!(*a.compute_ns.last().unwrap(), 10);
    }

    #[test]
    fn nothing_ran_no_timeline() {
        assert_eq!(Binner::default().finish(), None);
    }

    proptest! {
        /// Whatever the pieces (in time order) and gaps, each class's bins sum to the time
        /// given to it, and there are never more than MAX_BINS bins.
        #[test]
        fn bins_sum_to_what_went_in(
            pieces in proptest::collection::vec((0u64..5_000_000, 0u8..8), 1..60),
            launch in proptest::option::of(0u64..100),
        ) {
            let mut b = Binner::default();
            let (mut t, mut want) = (0u64, [0u64; 7]);
            for (len, mask) in pieces {
                let class = if mask & COMPUTE != 0 { 0 } else if mask & COMM != 0 { 1 } else if mask & TRANSFER != 0 { 2 } else { 9 };
                if class == 9 {
                    b.piece(t, t + len, 0);
                    b.gap(t, t + len, launch.map(|l| t + l), &[(t, t + 10)]);
                    let launched = launch.map(|l| (t + l).min(t + len));
                    match launched {
                        None => want[6] += len,
                        Some(l) => {
                            let sync = (t + 10).min(l) - t;
                            want[5] += sync;
                            want[3] += l - t - sync;
                            want[4] += t + len - l;
                        }
                    }
                } else {
                    b.piece(t, t + len, mask);
                    want[class] += len;
                }
                t += len;
            }
            match b.finish() {
                None => prop_assert_eq!(want, [0; 7]),
                Some(a) => {
                    prop_assert!(a.len() <= MAX_BINS);
                    prop_assert_eq!(sums(&a), want);
                }
            }
        }
    }
}
