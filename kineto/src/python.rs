//! Kineto `python_function` events (a trace recorded with
//! `torch.profiler.profile(with_stack=True)`) as host stacks.
//!
//! Each such event is one call of a Python function (or of a builtin:
//! `<built-in method view of Tensor object at 0x7f…>`) on one thread,
//! a span `ts .. ts + dur`. The spans of a thread nest: at any time the
//! open ones, outermost to innermost, are the thread's Python stack. Cut at
//! every span's start and end, a thread's time becomes intervals with one
//! stack each, and each interval becomes one [`HostRun`] of a host samples
//! chunk (format 1.4, chunk kind 7), so the host analysis reads an imported
//! trace as it reads a sampled one.
//!
//! What the spans do not say is left unsaid: the runs' state is
//! [`ThreadState::Other`], their CPU time 0, and the chunk's `hz` 0, which
//! marks stacks traced, not sampled (`docs/host.md`). Every thread is
//! given the trace's pid (a Kineto trace is one process); the thread whose
//! tid is that pid is the main thread.
//!
//! Memory is bounded: at most [`MAX_SPANS`] spans are kept, in file order;
//! those past it are counted and written as a loss record.

use gputrace_format::host::{HostFrame, HostRun, HostSamples, HostThread, ThreadState};
use gputrace_format::{Nanos, StringId};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// Spans kept per import (24 bytes each: 48 MiB at most).
pub(crate) const MAX_SPANS: usize = 1 << 21;

/// The loss detail of the spans past [`MAX_SPANS`].
pub(crate) const OVER_CAP: &str = "kineto cat=\"python_function\": Python calls past the importer's cap";

/// One call: its times (as the mapper gives them), thread and frame
/// (indexes into [`PythonSpans::threads`] and [`PythonSpans::names`]).
#[derive(Clone, Copy, Debug)]
struct Span {
    start: u64,
    end: u64,
    thread: u32,
    frame: u32,
}

/// The `python_function` spans of one part of a file, in file order.
#[derive(Debug, Default)]
pub(crate) struct PythonSpans {
    spans: Vec<Span>,
    /// Frame names as written, with any ` at 0x…` address taken out.
    names: Vec<String>,
    name_ids: FxHashMap<String, u32>,
    /// (event pid, event tid) of each thread.
    threads: Vec<(Option<u32>, u32)>,
    /// Spans taken (kept or not).
    pub taken: u64,
    /// Spans not kept: past [`MAX_SPANS`].
    pub over_cap: u64,
}

impl PythonSpans {
    /// Take one `python_function` event: its times (as the mapper gives
    /// them), ids and name.
    pub(crate) fn take(&mut self, (start, end): (Nanos, Nanos), pid: Option<u32>, tid: u32, name: &str) {
        self.taken += 1;
        if self.spans.len() >= MAX_SPANS {
            self.over_cap += 1;
            return;
        }
        let frame = self.name_id(&frame_name(name));
        let thread = match self.threads.iter().position(|&t| t == (pid, tid)) {
            Some(i) => i as u32,
            None => {
                self.threads.push((pid, tid));
                self.threads.len() as u32 - 1
            }
        };
        self.spans.push(Span {
            start: start.0,
            end: end.0,
            thread,
            frame,
        });
    }

    fn name_id(&mut self, name: &str) -> u32 {
        if let Some(&i) = self.name_ids.get(name) {
            return i;
        }
        self.names.push(name.to_string());
        let i = self.names.len() as u32 - 1;
        self.name_ids.insert(name.to_string(), i);
        i
    }

    /// Add the spans of `later`, the part of the file after this one's, up
    /// to the cap: the same spans are kept as when one part took them all.
    pub(crate) fn absorb(&mut self, later: PythonSpans) {
        self.taken += later.taken;
        self.over_cap += later.over_cap;
        let names: Vec<u32> = later.names.iter().map(|n| self.name_id(n)).collect();
        let threads: Vec<u32> = later
            .threads
            .iter()
            .map(|&t| match self.threads.iter().position(|&x| x == t) {
                Some(i) => i as u32,
                None => {
                    self.threads.push(t);
                    self.threads.len() as u32 - 1
                }
            })
            .collect();
        for s in later.spans {
            if self.spans.len() >= MAX_SPANS {
                self.over_cap += 1;
                continue;
            }
            self.spans.push(Span {
                thread: threads[s.thread as usize],
                frame: names[s.frame as usize],
                ..s
            });
        }
    }

    /// The spans as host samples of a trace of process `pid`, times moved
    /// by `shift` ns, frame and file names interned in `strings`; `None`
    /// without spans. Spans that do not nest in the one open around them
    /// (which Kineto does not write) are cut at its end.
    pub(crate) fn into_samples(self, pid: u32, shift: i64, intern: &mut dyn FnMut(&str) -> StringId) -> Option<HostSamples> {
        if self.spans.is_empty() {
            return None;
        }
        // Threads by tid: the main thread's is the pid (Kineto writes some
        // helper threads, e.g. tqdm's monitor, as pid 0 tid 0).
        let mut threads: Vec<HostThread> = Vec::new();
        let thread_of: Vec<u32> = self
            .threads
            .iter()
            .map(|&(_, tid)| match threads.iter().position(|t| t.tid == tid) {
                Some(i) => i as u32,
                None => {
                    threads.push(HostThread {
                        pid,
                        tid,
                        name: String::new(),
                    });
                    threads.len() as u32 - 1
                }
            })
            .collect();
        let mut frames: Vec<HostFrame> = Vec::new();
        let mut frame_of: Vec<Option<u32>> = vec![None; self.names.len()];
        let mut spans = self.spans;
        for s in &mut spans {
            s.thread = thread_of[s.thread as usize];
        }
        // Per thread, by start; of spans starting together the longer (outer) first.
        spans.sort_by_key(|s| (s.thread, s.start, std::cmp::Reverse(s.end), s.frame));
        let mut stacks: Vec<Vec<u32>> = Vec::new();
        let mut stack_ids: FxHashMap<Vec<u32>, u32> = FxHashMap::default();
        let mut runs: Vec<HostRun> = Vec::new();
        let moved = |t: u64| Nanos(u64::try_from(i128::from(t) + i128::from(shift)).unwrap_or(0));
        let mut emit = |thread: u32, open: &[(u64, u32)], from: u64, to: u64, runs: &mut Vec<HostRun>| {
            if open.is_empty() || to <= from {
                return;
            }
            let stack: Vec<u32> = open.iter().rev().map(|&(_, f)| f).collect();
            let id = *stack_ids.entry(stack.clone()).or_insert_with(|| {
                stacks.push(stack);
                stacks.len() as u32 - 1
            });
            runs.push(HostRun {
                start: moved(from),
                end: moved(to),
                thread,
                state: ThreadState::Other,
                cpu_ns: 0,
                stack: Some(id),
                samples: 1,
            });
        };
        let mut i = 0;
        while i < spans.len() {
            let thread = spans[i].thread;
            // Open spans, outermost first: (end, frame index in `frames`).
            let mut open: Vec<(u64, u32)> = Vec::new();
            let mut now = spans[i].start;
            while i < spans.len() && spans[i].thread == thread {
                let s = spans[i];
                i += 1;
                while let Some(&(end, _)) = open.last() {
                    if end > s.start {
                        break;
                    }
                    emit(thread, &open, now, end, &mut runs);
                    now = now.max(end);
                    open.pop();
                }
                emit(thread, &open, now, s.start, &mut runs);
                now = now.max(s.start);
                let end = open.last().map_or(s.end, |&(outer, _)| s.end.min(outer));
                let f = *frame_of[s.frame as usize].get_or_insert_with(|| {
                    let (function, file, line) = split_frame(&self.names[s.frame as usize]);
                    frames.push(HostFrame {
                        function: intern(function),
                        file: intern(file),
                        line,
                    });
                    frames.len() as u32 - 1
                });
                open.push((end, f));
            }
            while let Some(&(end, _)) = open.last() {
                emit(thread, &open, now, end, &mut runs);
                now = now.max(end);
                open.pop();
            }
        }
        runs.sort_by_key(|r| (r.start, r.thread));
        let mut losses = BTreeMap::new();
        if self.over_cap > 0 {
            losses.insert("kineto_python_cap".to_string(), self.over_cap);
        }
        Some(HostSamples {
            hz: 0,
            threads,
            frames,
            stacks,
            runs,
            losses,
        })
    }
}

/// A frame name with the address of a builtin's object taken out
/// (`<built-in method view of Tensor object at 0x7fdc681d0910>` →
/// `<built-in method view of Tensor object>`), so that one method on many
/// objects is one frame.
fn frame_name(name: &str) -> std::borrow::Cow<'_, str> {
    match name.find(" at 0x") {
        Some(i) if name.starts_with('<') && name.ends_with('>') => format!("{}>", &name[..i]).into(),
        _ => name.into(),
    }
}

/// `file(line): function` (how Kineto names a Python function) as its
/// parts; a name of another form (a builtin) is a function without a file.
fn split_frame(name: &str) -> (&str, &str, u32) {
    if let Some(close) = name.find("): ") {
        if let Some(open) = name[..close].rfind('(') {
            if let Ok(line) = name[open + 1..close].parse::<u32>() {
                return (&name[close + 3..], &name[..open], line);
            }
        }
    }
    (name, "", 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_names_split_into_function_file_and_line() {
        assert_eq!(
            split_frame("torch/nn/modules/module.py(1501): _call_impl"),
            ("_call_impl", "torch/nn/modules/module.py", 1501)
        );
        assert_eq!(
            split_frame("<frozen abc>(117): __instancecheck__"),
            ("__instancecheck__", "<frozen abc>", 117)
        );
        assert_eq!(
            split_frame("<built-in function isinstance>"),
            ("<built-in function isinstance>", "", 0)
        );
        assert_eq!(
            frame_name("<built-in method view of Tensor object at 0x7fdc681d0910>"),
            "<built-in method view of Tensor object>"
        );
        assert_eq!(frame_name("a.py(3): f at 0x1"), "a.py(3): f at 0x1");
    }
}
