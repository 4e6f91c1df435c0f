//! Engine iterations from a GPU timeline: each forward pass is a run of GPU
//! work; the time the GPU waits between two of them is the bubble (CPU
//! scheduling, sampling, detokenization, Python). Works the same on a
//! gputrace capture and on an imported PyTorch profiler (Kineto) trace.
//!
//! Boundaries: an idle gap of at least [`ITERATION_GAP_NS`] between GPU work
//! (all streams of a device merged), or, with CUDA graphs, a new graph launch
//! when the current iteration already ran one (a decode step is one graph
//! launch, so back-to-back decode steps with no gap still count apart).
//! An iteration that ran a CUDA graph is a decode step (engines capture
//! graphs for decode batches); one without is eager (prefill, mixed batches,
//! or decode without graphs), told apart only by NVTX ranges named
//! `prefill`/`decode` when the engine emits them.

use gputrace_format::{Event, EventKind, TraceFile};
use serde::Serialize;
use std::collections::BTreeMap;

/// An idle gap at least this long ends an iteration (1 ms: launch gaps inside
/// a forward pass are microseconds; engine bubbles are milliseconds).
pub const ITERATION_GAP_NS: u64 = 1_000_000;

/// What kind of forward pass an iteration was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// A decode step (it ran a CUDA graph, or an NVTX range said so).
    Decode,
    /// A prefill (an NVTX range said so).
    Prefill,
    /// Eager work the timeline cannot place.
    Unknown,
}

/// One iteration, realtime ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Iteration {
    /// Device ordinal.
    pub device: u32,
    /// First GPU work.
    pub start: u64,
    /// End of its last GPU work.
    pub end: u64,
    /// GPU busy time inside it (union of its kernels, copies, memsets).
    pub busy: u64,
    /// Idle time since the previous iteration on the device (0 for the first).
    pub bubble_before: u64,
    /// Decode, prefill or unknown.
    pub phase: Phase,
}

struct Work {
    start: u64,
    end: u64,
    graph_launch: Option<u32>,
}

/// NVTX ranges whose name says `prefill` or `decode`, realtime.
fn phase_ranges(file: &TraceFile, shift: i64) -> Vec<(u64, u64, Phase)> {
    let mut out = Vec::new();
    for e in file.events_of(&[EventKind::Marker]).flatten() {
        if let Event::Marker(m) = e {
            let name = file.name(m.name).to_ascii_lowercase();
            let phase = if name.contains("prefill") {
                Phase::Prefill
            } else if name.contains("decode") {
                Phase::Decode
            } else {
                continue;
            };
            out.push((rt(m.start.0, shift), rt(m.end.0, shift), phase));
        }
    }
    out
}

fn rt(t: u64, shift: i64) -> u64 {
    (t as i64).saturating_add(shift).max(0) as u64
}

/// The iterations of every device of `file`, in time order per device.
pub fn iterations(file: &TraceFile) -> Vec<Iteration> {
    let shift = file.header().realtime_shift();
    let mut by_device: BTreeMap<u32, Vec<Work>> = BTreeMap::new();
    for e in file.events_of(&[EventKind::Kernel, EventKind::Memcpy, EventKind::Memset]).flatten() {
        let (device, w) = match e {
            Event::Kernel(k) => (
                k.device.0,
                Work {
                    start: rt(k.start.0, shift),
                    end: rt(k.end.0, shift),
                    graph_launch: (k.graph_id != 0).then_some(k.correlation.0),
                },
            ),
            Event::Memcpy(m) => (
                m.device.0,
                Work {
                    start: rt(m.start.0, shift),
                    end: rt(m.end.0, shift),
                    graph_launch: None,
                },
            ),
            Event::Memset(m) => (
                m.device.0,
                Work {
                    start: rt(m.start.0, shift),
                    end: rt(m.end.0, shift),
                    graph_launch: None,
                },
            ),
            _ => continue,
        };
        by_device.entry(device).or_default().push(w);
    }
    let ranges = phase_ranges(file, shift);
    let mut out = Vec::new();
    for (device, mut work) in by_device {
        work.sort_by_key(|w| (w.start, w.end));
        split(device, &work, &ranges, &mut out);
    }
    out
}

/// One device's work, sorted by start, cut into iterations.
fn split(device: u32, work: &[Work], ranges: &[(u64, u64, Phase)], out: &mut Vec<Iteration>) {
    let mut cur: Option<(Iteration, Option<u32>, u64)> = None; // iteration, its graph launch, covered-until
    let mut prev_end: Option<u64> = None;
    for w in work {
        let new = match &cur {
            None => true,
            Some((it, launch, covered)) => {
                let gap = w.start.saturating_sub(*covered);
                gap >= ITERATION_GAP_NS || matches!((launch, w.graph_launch), (Some(a), Some(b)) if *a != b && w.start >= it.end)
            }
        };
        if new {
            if let Some((it, _, _)) = cur.take() {
                prev_end = Some(it.end);
                out.push(finish(it, ranges));
            }
            cur = Some((
                Iteration {
                    device,
                    start: w.start,
                    end: w.end,
                    busy: w.end - w.start,
                    bubble_before: prev_end.map_or(0, |p| w.start.saturating_sub(p)),
                    phase: Phase::Unknown,
                },
                w.graph_launch,
                w.end,
            ));
            continue;
        }
        let (it, launch, covered) = cur.as_mut().expect("an iteration is open");
        if w.end > *covered {
            it.busy += w.end - w.start.max(*covered);
            *covered = w.end;
        }
        it.end = it.end.max(w.end);
        if launch.is_none() {
            *launch = w.graph_launch;
        }
        if w.graph_launch.is_some() {
            it.phase = Phase::Decode;
        }
    }
    if let Some((it, _, _)) = cur {
        out.push(finish(it, ranges));
    }
}

/// The phase an NVTX range overlapping the iteration names, else what the graphs said.
fn finish(mut it: Iteration, ranges: &[(u64, u64, Phase)]) -> Iteration {
    if let Some(&(_, _, p)) = ranges.iter().find(|r| r.0 < it.end && it.start < r.1) {
        it.phase = p;
    }
    it
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(start: u64, end: u64, graph: Option<u32>) -> Work {
        Work {
            start,
            end,
            graph_launch: graph,
        }
    }

    #[test]
    fn gaps_and_graph_launches_cut_iterations() {
        let ms = 1_000_000;
        let work = [
            w(0, 2 * ms, None),
            w(2 * ms + 10_000, 4 * ms, None),      // launch gap: same iteration
            w(12 * ms, 14 * ms, Some(7)),          // 8 ms bubble: new, a graph
            w(14 * ms, 15 * ms, Some(7)),          // same launch
            w(15 * ms + 500, 16 * ms, Some(8)),    // a new launch: new iteration, no bubble to speak of
            w(15 * ms + 600, 15 * ms + 900, None), // overlapping work on another stream
        ];
        let mut out = Vec::new();
        split(0, &work, &[], &mut out);
        assert_eq!(out.len(), 3);
        assert_eq!(
            (out[0].start, out[0].end, out[0].busy, out[0].bubble_before),
            (0, 4 * ms, 4 * ms - 10_000, 0)
        );
        assert_eq!(out[0].phase, Phase::Unknown);
        assert_eq!((out[1].busy, out[1].bubble_before, out[1].phase), (3 * ms, 8 * ms, Phase::Decode));
        assert_eq!((out[2].busy, out[2].bubble_before), (ms - 500, 500));
        let mut named = Vec::new();
        split(0, &work[..2], &[(0, 10, Phase::Prefill)], &mut named);
        assert_eq!(named[0].phase, Phase::Prefill);
    }
}
