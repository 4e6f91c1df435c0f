//! The NVTX source: pairs the recorder's records (`nvtx/`) into markers.

use super::source::{to_trace_time, Pass, Source, Steps, Writer};
use crate::nvtx::pair::{Done, Pairer};
use gputrace_format::*;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Starts the NVTX pairer dropped (it runs on the writer thread; read by
/// the loss records, `losses.rs`).
pub(super) static NVTX_OPEN_DROPPED: AtomicU64 = AtomicU64::new(0);

/// Distinct strings a trace may hold before NVTX names are replaced (each
/// at most [`crate::nvtx::MSG_LEN`] bytes plus the payload: under 200 MiB).
const MAX_TRACE_STRINGS: u32 = 1 << 20;

/// The writer thread's side of NVTX: pairs the records and writes markers.
pub(super) struct NvtxSource {
    pairer: Pairer,
    done: Vec<Done>,
    offset: i64,
    /// Marker names replaced because the trace's string table reached
    /// [`MAX_TRACE_STRINGS`].
    renamed: u64,
}

impl NvtxSource {
    /// `offset`: added to a `CLOCK_REALTIME` ns to get the trace's time.
    pub fn new(offset: i64) -> NvtxSource {
        NvtxSource {
            pairer: Default::default(),
            done: Vec::new(),
            offset,
            renamed: 0,
        }
    }

    /// Write the finished markers (and collect the step marks' times).
    fn write(&mut self, w: &mut Writer, steps: &mut Steps) -> Result<(), FormatError> {
        for d in self.done.drain(..) {
            if steps.wanted && crate::flight::is_step_mark(&d.domain, &d.name) {
                steps.push(d.start_ns);
            }
            let mut intern = |s: &str| {
                if w.string_count() >= MAX_TRACE_STRINGS {
                    self.renamed += 1;
                    w.intern("(nvtx: the trace's string table is full)")
                } else {
                    w.intern(s)
                }
            };
            let (name, domain) = (intern(&d.name), intern(&d.domain));
            w.push(Event::Marker(Marker {
                start: to_trace_time(d.start_ns, self.offset),
                end: to_trace_time(d.end_ns, self.offset),
                thread: ThreadId(d.tid),
                name,
                domain,
                kind: if d.instant { MarkerKind::INSTANT } else { MarkerKind::RANGE },
                color: d.color,
            }))?;
        }
        Ok(())
    }
}

impl Source for NvtxSource {
    fn pump(&mut self, w: &mut Writer, pass: &mut Pass) -> Result<(), FormatError> {
        let Some(st) = crate::nvtx::state() else { return Ok(()) };
        // At most one queue's worth per pass: threads that keep marking
        // (at exit, say) cannot hold the writer here.
        for _ in 0..st.queue.capacity() {
            let Some(r) = st.queue.pop() else { break };
            if r.kind == crate::nvtx::RecKind::Request {
                // A request mark is no marker: written as it comes, no string.
                w.push(Event::Request(Request {
                    time: to_trace_time(r.time_ns, self.offset),
                    id: r.range_id,
                    phase: RequestPhase(r.category.min(u8::MAX as u32) as u8),
                    tokens: r.payload,
                }))?;
                continue;
            }
            self.pairer.record(st, &r, &mut self.done);
        }
        NVTX_OPEN_DROPPED.store(self.pairer.too_many_open, Relaxed);
        self.write(w, &mut pass.steps)
    }

    /// Close the ranges still open at the end and note the counts.
    fn finish(&mut self, w: &mut Writer, pass: &mut Pass, trailer: &mut Trailer) -> Result<(), FormatError> {
        let Some(st) = crate::nvtx::state() else { return Ok(()) };
        self.pump(w, pass)?;
        self.pairer.close_all(trailer.end_clock.realtime_ns, &mut self.done);
        self.write(w, &mut pass.steps)?;
        let p = &self.pairer;
        for (k, v) in [
            ("nvtx.ranges_open_at_exit", p.closed_at_exit),
            ("nvtx.unmatched_pops", p.unmatched_pops),
            ("nvtx.unmatched_ends", p.unmatched_ends),
            ("nvtx.truncated_messages", st.losses.truncated.load(Relaxed)),
            ("nvtx.names_replaced", self.renamed),
        ] {
            trailer.extra.insert(k.into(), v.to_string());
        }
        for (tid, name) in st.thread_names() {
            trailer.extra.insert(format!("nvtx.thread.{tid}"), name);
        }
        Ok(())
    }
}
