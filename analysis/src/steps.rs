//! Steps as the GPU sees them.
//!
//! A `ProfilerStep#N` range or a pair of step marks is a CPU interval: the GPU
//! work launched in it runs later, often past its end. A step's **GPU window**
//! is therefore found from the work launched in it, through correlation ids:
//!
//! 1. the API calls whose start lies in step k's CPU window give its range of
//!    correlation ids `[lo_k, hi_k]` (CUPTI numbers calls in issue order, so a
//!    time window is a range of ids; two numbers per step, not one per call);
//! 2. on each device, the kernels, copies and memsets whose correlation id lies
//!    in that range are step k's work;
//! 3. the device's step windows tile time from the first work of its first
//!    step: step k's window runs from the end of the previous step's window
//!    (the first step: from the start of its own first work) to the end of
//!    the last work launched in it (never before its start). The idle before
//!    a step's first kernel is that step's: its CPU had not launched it yet.
//!
//! Work launched outside every step (before the first, after the last, between
//! steps) belongs to no step; its time, and the device's time before the first
//! step's window and after the last one's, is the device's "outside steps"
//! remainder, so that the steps plus that remainder add up to the device.
//! A step that launched no work on a device has no window there.

use crate::error::Result;
use gputrace_format::*;

/// A step's window on one device (`start`, `end`: its GPU window, [`crate::steps`]; the
/// CPU window when the work cannot be linked to it) and its CPU window.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Window {
    pub step: u64,
    pub start: u64,
    pub end: u64,
    /// The `ProfilerStep` range, or from the previous step mark to this one's (the first:
    /// from the start of the trace); an inferred step's is its GPU window.
    pub cpu_start: u64,
    pub cpu_end: u64,
}

/// The correlation ids of the API calls launched in each step's CPU window.
#[derive(Clone, Debug, Default)]
pub(crate) struct StepLinks {
    /// `(lo, hi, index into the windows)`, sorted by `lo`; steps whose window holds no
    /// call have no entry.
    ranges: Vec<(u32, u32, usize)>,
}

impl StepLinks {
    /// The index of the window whose range holds `corr` (the latest-starting one on overlap).
    fn step_of(&self, corr: u32) -> Option<usize> {
        if corr == 0 {
            return None;
        }
        let i = self.ranges.partition_point(|r| r.0 <= corr);
        self.ranges[..i].iter().rev().find(|r| corr <= r.1).map(|r| r.2)
    }
}

/// Read every API call's start and correlation id (not their ends or names), and give
/// each CPU window (`windows`, sorted by start) the range of ids launched in it. `None`
/// when no call falls in any window (API calls not traced).
pub(crate) fn step_links(file: &TraceFile, windows: &[Window]) -> Result<Option<StepLinks>> {
    if windows.is_empty() {
        return Ok(None);
    }
    let mut lo_hi: Vec<Option<(u32, u32)>> = vec![None; windows.len()];
    let mut block: Vec<Span> = Vec::with_capacity(SPAN_BLOCK);
    let mut dec = file.decoder();
    for (ci, c) in file.chunks().iter().enumerate() {
        if c.kind != EventKind::Api {
            continue;
        }
        let mut cursor = dec.spans(ci)?;
        cursor.skip(true, true);
        loop {
            cursor.fill(&mut block)?;
            if block.is_empty() {
                break;
            }
            for sp in &block {
                if sp.corr == 0 {
                    continue;
                }
                // The latest window starting at or before the call that still holds it.
                let i = windows.partition_point(|w| w.cpu_start <= sp.start);
                let Some(k) = windows[..i].iter().rposition(|w| sp.start < w.cpu_end) else {
                    continue;
                };
                let e = lo_hi[k].get_or_insert((sp.corr, sp.corr));
                e.0 = e.0.min(sp.corr);
                e.1 = e.1.max(sp.corr);
            }
        }
        dec.recycle_spans(cursor);
    }
    let mut ranges: Vec<(u32, u32, usize)> = lo_hi
        .iter()
        .enumerate()
        .filter_map(|(k, r)| r.map(|(lo, hi)| (lo, hi, k)))
        .collect();
    ranges.sort_unstable();
    Ok((!ranges.is_empty()).then_some(StepLinks { ranges }))
}

/// The GPU windows of `device`'s steps (see the module's description), from the CPU
/// `windows` and their `links`.
pub(crate) fn gpu_windows(file: &TraceFile, device: u32, windows: &[Window], links: &StepLinks) -> Result<Vec<Window>> {
    // Per CPU window: first start and last end of the work launched in it.
    let mut work: Vec<Option<(u64, u64)>> = vec![None; windows.len()];
    let mut block: Vec<Span> = Vec::with_capacity(SPAN_BLOCK);
    let mut dec = file.decoder();
    for (ci, c) in file.chunks().iter().enumerate() {
        let on_device = matches!(c.track, Track::Gpu { device: d, .. } if d.0 == device);
        if !on_device || !matches!(c.kind, EventKind::Kernel | EventKind::Memcpy | EventKind::Memset) {
            continue;
        }
        let mut cursor = dec.spans(ci)?;
        cursor.skip(false, true);
        loop {
            cursor.fill(&mut block)?;
            if block.is_empty() {
                break;
            }
            for sp in block.iter().filter(|sp| sp.end > sp.start) {
                if let Some(k) = links.step_of(sp.corr) {
                    let e = work[k].get_or_insert((sp.start, sp.end));
                    e.0 = e.0.min(sp.start);
                    e.1 = e.1.max(sp.end);
                }
            }
        }
        dec.recycle_spans(cursor);
    }
    Ok(tile(windows, &work))
}

/// Windows that tile time from the first step's first work: step k from the previous
/// window's end to the end of its own last work (`work[k]`); steps without work have none.
pub(crate) fn tile(windows: &[Window], work: &[Option<(u64, u64)>]) -> Vec<Window> {
    let mut out: Vec<Window> = Vec::with_capacity(windows.len());
    let mut prev_end: Option<u64> = None;
    for (w, span) in windows.iter().zip(work) {
        let Some((first, last)) = *span else { continue };
        let start = prev_end.unwrap_or(first);
        let end = last.max(start);
        out.push(Window { start, end, ..*w });
        prev_end = Some(end);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(step: u64, start: u64, end: u64) -> Window {
        Window {
            step,
            start,
            end,
            cpu_start: start,
            cpu_end: end,
        }
    }

    #[test]
    fn windows_tile_from_the_first_work_and_skip_steps_without_work() {
        let steps = [cpu(1, 0, 100), cpu(2, 100, 200), cpu(3, 200, 300), cpu(4, 300, 400)];
        // Step 1's work runs past its CPU end; step 2 launched nothing on this device; step
        // 3's work ends before step 1's did (another stream): its window is empty, not negative.
        let work = [Some((30, 180)), None, Some((150, 170)), Some((320, 390))];
        let w = tile(&steps, &work);
        let got: Vec<(u64, u64, u64, u64, u64)> = w.iter().map(|w| (w.step, w.start, w.end, w.cpu_start, w.cpu_end)).collect();
        assert_eq!(got, [(1, 30, 180, 0, 100), (3, 180, 180, 200, 300), (4, 180, 390, 300, 400)]);
    }

    #[test]
    fn correlation_ranges_find_their_step() {
        let links = StepLinks {
            ranges: vec![(1, 10, 0), (11, 20, 1), (30, 40, 3)],
        };
        assert_eq!(links.step_of(0), None, "no correlation");
        assert_eq!(links.step_of(1), Some(0));
        assert_eq!(links.step_of(20), Some(1));
        assert_eq!(links.step_of(25), None, "launched between steps");
        assert_eq!(links.step_of(41), None, "after the last step");
    }
}
