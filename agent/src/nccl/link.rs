//! Linking NCCL's collectives to the CUPTI kernel records that ran them, on
//! the writer thread.
//!
//! The chain (NCCL ≥ 2.28, profiler interface v5/v6):
//! 1. every collective's `Coll` event descends from a `CollApi` event, which
//!    descends from a `GroupApi` event (the implicit or explicit
//!    `ncclGroupStart/End`): the plugin gives each the group's id;
//! 2. NCCL brackets its `cuLaunchKernelEx` with a `KernelLaunch` event whose
//!    parent is the same `GroupApi` event, one per communicator's plan; the
//!    plugin pushes a CUPTI external correlation id (CUSTOM2) for that
//!    bracket, so CUPTI emits an EXTERNAL_CORRELATION record mapping the id
//!    to the launch's correlation id;
//! 3. the kernel record carries that correlation id.
//!
//! So (group, communicator) → launch → correlation → kernel. The three kinds
//! of input arrive in any order (CUPTI gives no ordering between buffers),
//! so collectives wait here until their kernel is known, at most
//! [`Linker::wait_ns`] of writer time, then are written unlinked (CPU times
//! only). Graph-captured collectives and NCCL < 2.28 (no KernelLaunch
//! events) are never linked. Every map is bounded; overflow writes the
//! oldest collective unlinked rather than dropping anything.

use super::{Rec, RecKind};
use gputrace_format::{ContextId, CorrelationId, DeviceId, Nanos, StreamId};
use std::collections::{HashMap, VecDeque};

/// A CUPTI kernel (or copy) record of a communication kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    pub start: u64,
    pub end: u64,
    pub device: u32,
    pub context: u32,
    pub stream: u32,
    pub correlation: u32,
}

impl KernelInfo {
    /// What the linker keeps of a kernel or copy record.
    pub fn of(start: Nanos, end: Nanos, device: DeviceId, context: ContextId, stream: StreamId, correlation: CorrelationId) -> KernelInfo {
        KernelInfo {
            start: start.0,
            end: end.0,
            device: device.0,
            context: context.0,
            stream: stream.0,
            correlation: correlation.0,
        }
    }
}

/// A collective ready to be written.
#[derive(Clone, Copy, Debug)]
pub struct Ready {
    pub rec: Rec,
    pub kernel: Option<KernelInfo>,
}

/// Most collectives waiting for their kernel at once.
const MAX_PENDING: usize = 1 << 16;
/// Most launches, correlation links and kernels remembered.
const MAX_REMEMBERED: usize = 1 << 16;

/// A bounded map that forgets its oldest entries.
struct Recent<K, V> {
    map: HashMap<K, V>,
    order: VecDeque<K>,
}

impl<K: std::hash::Hash + Eq + Copy, V> Recent<K, V> {
    fn new() -> Self {
        Recent {
            map: HashMap::new(),
            order: VecDeque::new(),
        }
    }
    fn insert(&mut self, k: K, v: V) {
        if self.map.insert(k, v).is_none() {
            self.order.push_back(k);
            while self.order.len() > MAX_REMEMBERED {
                if let Some(old) = self.order.pop_front() {
                    self.map.remove(&old);
                }
            }
        }
    }
    fn get(&self, k: &K) -> Option<&V> {
        self.map.get(k)
    }
}

impl<K: std::hash::Hash + Eq + Copy> Recent<K, Vec<u32>> {
    /// Append to the list under `k` (at most [`MAX_LINKS`] per key).
    fn push(&mut self, k: K, v: u32) {
        match self.map.get_mut(&k) {
            Some(list) if list.len() < MAX_LINKS => list.push(v),
            Some(_) => {}
            None => self.insert(k, vec![v]),
        }
    }
}

/// Most correlation ids remembered per external id (one per CUDA call made
/// inside the bracket: one launch, or a copy-engine collective's copies).
const MAX_LINKS: usize = 64;

/// The linker's state.
pub struct Linker {
    /// (group id, communicator) → external id of its KernelLaunch.
    launches: Recent<(u64, u64), u64>,
    /// External id → CUPTI correlation ids of the calls made under it.
    ext: Recent<u64, Vec<u32>>,
    /// Correlation id → communication kernel.
    kernels: Recent<u32, KernelInfo>,
    /// Collectives waiting, with the writer time they arrived.
    pending: VecDeque<(Rec, u64)>,
    /// How long a collective waits for its kernel (writer-clock ns).
    pub wait_ns: u64,
    /// Whether links can happen at all (CUPTI running with external
    /// correlation); if not, collectives are written at once.
    pub can_link: bool,
    /// Collectives written with / without their kernel.
    pub linked: u64,
    pub unlinked: u64,
    /// Plugin records received (collectives, point-to-point, launches).
    pub received: u64,
    /// A copy-engine collective was seen: the decoder must also hand over
    /// copies (their records are what ran it).
    pub wants_copies: bool,
}

impl Linker {
    pub fn new(can_link: bool, wait_ns: u64) -> Linker {
        Linker {
            launches: Recent::new(),
            ext: Recent::new(),
            kernels: Recent::new(),
            pending: VecDeque::new(),
            wait_ns,
            can_link,
            linked: 0,
            unlinked: 0,
            received: 0,
            wants_copies: false,
        }
    }

    /// A record from the plugin's queue, received at writer time `now`.
    pub fn record(&mut self, r: Rec, now: u64, out: &mut Vec<Ready>) {
        self.received += 1;
        match r.kind {
            RecKind::Launch => self.launches.insert((r.group, r.comm), r.id),
            RecKind::CeColl if self.can_link && !r.d.graph_captured => {
                self.wants_copies = true;
                self.wait(r, now, out);
            }
            _ if !self.can_link || r.group == 0 || r.d.graph_captured => {
                self.unlinked += 1;
                out.push(Ready { rec: r, kernel: None });
            }
            _ => self.wait(r, now, out),
        }
    }

    fn wait(&mut self, r: Rec, now: u64, out: &mut Vec<Ready>) {
        if self.pending.len() >= MAX_PENDING {
            if let Some((old, _)) = self.pending.pop_front() {
                self.unlinked += 1;
                out.push(Ready { rec: old, kernel: None });
            }
        }
        self.pending.push_back((r, now));
    }

    /// An EXTERNAL_CORRELATION record of our kind (CUSTOM2).
    pub fn external(&mut self, ext_id: u64, correlation: u32) {
        self.ext.push(ext_id, correlation);
    }

    /// A communication kernel's record.
    pub fn kernel(&mut self, k: KernelInfo) {
        self.kernels.insert(k.correlation, k);
    }

    /// The kernel of a collective: the first kernel of its group's launch
    /// on its communicator.
    fn kernel_of(&self, r: &Rec) -> Option<KernelInfo> {
        let ext = self.launches.get(&(r.group, r.comm))?;
        self.ext.get(ext)?.iter().find_map(|c| self.kernels.get(c).copied())
    }

    /// The copies of a copy-engine collective (pushed under its own id): from
    /// the first start to the last end, with the first copy's device, stream
    /// and correlation id.
    fn copies_of(&self, r: &Rec) -> Option<KernelInfo> {
        let mut found = self.ext.get(&r.id)?.iter().filter_map(|c| self.kernels.get(c));
        let first = *found.next()?;
        Some(found.fold(first, |a, k| KernelInfo {
            start: a.start.min(k.start),
            end: a.end.max(k.end),
            ..a
        }))
    }

    /// Write out what is linked, and what waited too long (everything when
    /// `final_`), in arrival order per outcome.
    pub fn poll(&mut self, now: u64, final_: bool, out: &mut Vec<Ready>) {
        // In place, in order (no new queue per pass).
        let mut pending = std::mem::take(&mut self.pending);
        pending.retain(|&(r, at)| {
            let expired = final_ || now.saturating_sub(at) >= self.wait_ns;
            // A copy-engine collective's copies are counted only once they
            // all had time to arrive.
            let k = match r.kind {
                RecKind::CeColl if expired => self.copies_of(&r),
                RecKind::CeColl => None,
                _ => self.kernel_of(&r),
            };
            if let Some(k) = k {
                self.linked += 1;
                out.push(Ready { rec: r, kernel: Some(k) });
            } else if expired {
                self.unlinked += 1;
                out.push(Ready { rec: r, kernel: None });
            } else {
                return true;
            }
            false
        });
        self.pending = pending;
    }

    /// Collectives still waiting.
    #[cfg(test)]
    pub fn pending(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Descr, Rec, RecKind};
    use super::*;

    fn rec(kind: RecKind, id: u64, group: u64, comm: u64) -> Rec {
        Rec {
            kind,
            id,
            group,
            comm,
            rank: 0,
            nranks: 2,
            api_ns: 1,
            start_ns: 2,
            stop_ns: 3,
            d: Descr::default(),
        }
    }

    fn k(corr: u32) -> KernelInfo {
        KernelInfo {
            start: 100,
            end: 200,
            device: 0,
            context: 1,
            stream: 13,
            correlation: corr,
        }
    }

    #[test]
    fn links_in_any_arrival_order() {
        // Every permutation of (launch, coll, ext, kernel).
        let perms = [[0, 1, 2, 3], [3, 2, 1, 0], [1, 3, 0, 2], [2, 0, 3, 1], [1, 0, 3, 2], [3, 1, 2, 0]];
        for p in perms {
            let mut l = Linker::new(true, 1_000);
            let mut out = Vec::new();
            for step in p {
                match step {
                    0 => l.record(rec(RecKind::Launch, 50, 7, 0xaa), 0, &mut out),
                    1 => l.record(rec(RecKind::Coll, 51, 7, 0xaa), 0, &mut out),
                    2 => l.external(50, 4242),
                    _ => l.kernel(k(4242)),
                }
                l.poll(10, false, &mut out);
            }
            assert_eq!(out.len(), 1, "{p:?}");
            assert_eq!(out[0].kernel, Some(k(4242)), "{p:?}");
            assert_eq!((l.linked, l.unlinked, l.pending()), (1, 0, 0));
        }
    }

    #[test]
    fn other_communicator_or_group_does_not_link_and_times_out() {
        let mut l = Linker::new(true, 1_000);
        let mut out = Vec::new();
        l.record(rec(RecKind::Launch, 50, 7, 0xaa), 0, &mut out);
        l.external(50, 1);
        l.kernel(k(1));
        l.record(rec(RecKind::Coll, 51, 7, 0xbb), 0, &mut out); // other comm
        l.record(rec(RecKind::Coll, 52, 8, 0xaa), 0, &mut out); // other group
        l.poll(999, false, &mut out);
        assert!(out.is_empty());
        l.poll(1_000, false, &mut out);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|r| r.kernel.is_none()));
        assert_eq!(l.unlinked, 2);
    }

    #[test]
    fn without_cupti_or_for_graphs_writes_at_once() {
        let mut l = Linker::new(false, 1_000);
        let mut out = Vec::new();
        l.record(rec(RecKind::Coll, 1, 7, 0xaa), 0, &mut out);
        assert_eq!(out.len(), 1);
        let mut l = Linker::new(true, 1_000);
        let mut r = rec(RecKind::Coll, 1, 7, 0xaa);
        r.d.graph_captured = true;
        l.record(r, 0, &mut out);
        assert_eq!(out.len(), 2);
        l.poll(0, true, &mut out);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn copy_engine_collectives_span_their_copies_after_the_wait() {
        let mut l = Linker::new(true, 1_000);
        let mut out = Vec::new();
        l.record(rec(RecKind::CeColl, 70, 0, 0xaa), 0, &mut out);
        assert!(l.wants_copies);
        for (corr, s, e) in [(5, 300, 400), (6, 100, 250), (7, 120, 500)] {
            l.external(70, corr);
            l.kernel(KernelInfo {
                start: s,
                end: e,
                correlation: corr,
                ..k(corr)
            });
        }
        l.kernel(k(8)); // someone else's copy
        l.poll(999, false, &mut out);
        assert!(out.is_empty(), "waits for all its copies");
        l.poll(1_000, false, &mut out);
        let got = out[0].kernel.unwrap();
        assert_eq!((got.start, got.end, got.correlation), (100, 500, 5));
        assert_eq!(l.linked, 1);
    }

    #[test]
    fn final_poll_flushes_everything() {
        let mut l = Linker::new(true, u64::MAX);
        let mut out = Vec::new();
        for i in 0..10 {
            l.record(rec(RecKind::Coll, i, 7, 0xaa), 0, &mut out);
        }
        l.poll(0, false, &mut out);
        assert!(out.is_empty());
        l.poll(0, true, &mut out);
        assert_eq!(out.len(), 10);
    }
}
