//! Host samples (format 1.4) as slices the viewers draw: per sampled
//! thread, a track of its Python stacks (a slice per frame, consecutive
//! runs sharing their outer frames share those slices) with a leaf slice
//! per run named by the thread's state (`running`, `sleeping`, `disk wait`;
//! `traced` for the stacks of a Kineto import, which have none) whose
//! arguments carry the run's CPU time and sample count.

use crate::error::Result;
use crate::job::apply_shift;
use gputrace_format::host::{HostSamples, ThreadState};
use gputrace_format::TraceFile;

/// One slice of a host samples track.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct HostSlice {
    /// On the common time line, inside the window.
    pub start: u64,
    pub end: u64,
    /// Nesting depth: 0 for the outermost frame.
    pub depth: u32,
    pub name: String,
    /// For a run's leaf slice: its state, CPU time and samples.
    pub run: Option<(&'static str, u64, u32)>,
}

/// The slices of one sampled thread, ordered by start, outer first.
#[derive(Clone, Debug)]
pub(crate) struct HostTrack {
    /// `host samples · <thread name> tid N` (and its pid for a thread of another process).
    pub name: String,
    pub slices: Vec<HostSlice>,
}

/// The input's host samples as tracks, shifted by `shift` and clipped to
/// the window `from..to`; `None` without samples in it.
pub(crate) fn tracks_in(trace: &TraceFile, shift: i64, window: (u64, u64)) -> Result<Option<Vec<HostTrack>>> {
    let Some(samples) = trace.host_samples()? else { return Ok(None) };
    let tracks = tracks(trace, &samples, shift, window);
    Ok((!tracks.is_empty()).then_some(tracks))
}

/// The tracks of `samples` in the window `from..to` (common time line).
pub(crate) fn tracks(trace: &TraceFile, samples: &HostSamples, shift: i64, (from, to): (u64, u64)) -> Vec<HostTrack> {
    let traced = samples.hz == 0;
    let frame_names: Vec<String> = samples
        .frames
        .iter()
        .map(|f| {
            let file = trace.name(f.file);
            match file.rsplit('/').next() {
                Some(base) if !base.is_empty() => format!("{} ({base}:{})", trace.name(f.function), f.line),
                _ => trace.name(f.function).into_owned(),
            }
        })
        .collect();
    let main_pid = trace.header().pid;
    let mut out = Vec::new();
    for (ti, th) in samples.threads.iter().enumerate() {
        let mut slices = Vec::new();
        // Open frames (frame index, start), outermost first, and where the last run ended.
        let mut open: Vec<(u32, u64)> = Vec::new();
        let mut last_end = 0u64;
        let close = |open: &mut Vec<(u32, u64)>, keep: usize, at: u64, slices: &mut Vec<HostSlice>| {
            while open.len() > keep {
                let (f, s) = open.pop().expect("longer than keep");
                slices.push(HostSlice {
                    start: s,
                    end: at,
                    depth: open.len() as u32,
                    name: frame_names[f as usize].clone(),
                    run: None,
                });
            }
        };
        for r in samples.runs.iter().filter(|r| r.thread as usize == ti) {
            let s = apply_shift(r.start.0, shift).max(from).max(last_end);
            let e = apply_shift(r.end.0, shift).min(to);
            if e <= s {
                continue;
            }
            // Outermost first.
            let frames: Vec<u32> = r
                .stack
                .map(|i| samples.stacks[i as usize].iter().rev().copied().collect())
                .unwrap_or_default();
            let common = if s == last_end {
                open.iter().zip(&frames).take_while(|((f, _), g)| f == *g).count()
            } else {
                0
            };
            close(&mut open, common, last_end, &mut slices);
            open.extend(frames[common..].iter().map(|&f| (f, s)));
            let state = if traced && r.state == ThreadState::Other {
                "traced"
            } else {
                r.state.name()
            };
            slices.push(HostSlice {
                start: s,
                end: e,
                depth: open.len() as u32,
                name: state.to_string(),
                run: Some((state, r.cpu_ns, r.samples)),
            });
            last_end = e;
        }
        close(&mut open, 0, last_end, &mut slices);
        if slices.is_empty() {
            continue;
        }
        slices.sort_by_key(|s| (s.start, s.depth));
        let mut name = format!(
            "host samples · {} tid {}",
            if th.name.is_empty() { "thread" } else { &th.name },
            th.tid
        );
        if th.pid != main_pid {
            name.push_str(&format!(" · pid {}", th.pid));
        }
        out.push(HostTrack { name, slices });
    }
    out
}

/// The slices of a track as begin (`Some(slice)`) and end (`None`) events
/// at their times, in an order that nests (for writers that need it).
pub(crate) fn begin_end(slices: &[HostSlice]) -> Vec<(u64, Option<&HostSlice>)> {
    let mut out = Vec::with_capacity(slices.len() * 2);
    let mut ends: Vec<u64> = Vec::new();
    for s in slices {
        while ends.len() > s.depth as usize {
            out.push((ends.pop().expect("non-empty"), None));
        }
        out.push((s.start, Some(s)));
        ends.push(s.end);
    }
    while let Some(e) = ends.pop() {
        out.push((e, None));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slice(start: u64, end: u64, depth: u32) -> HostSlice {
        HostSlice {
            start,
            end,
            depth,
            name: String::new(),
            run: None,
        }
    }

    #[test]
    fn begins_and_ends_nest() {
        let s = [slice(0, 10, 0), slice(0, 4, 1), slice(4, 10, 1), slice(12, 15, 0)];
        let order: Vec<(u64, bool)> = begin_end(&s).into_iter().map(|(t, b)| (t, b.is_some())).collect();
        assert_eq!(
            order,
            [
                (0, true),
                (0, true),
                (4, false),
                (4, true),
                (10, false),
                (10, false),
                (12, true),
                (15, false)
            ]
        );
    }
}
