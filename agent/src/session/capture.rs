//! When capture is on, decided on the writer thread: a duty cycle's
//! windows and `--graphs auto`'s switch to graph-level records.

use super::{CuptiSide, Session};
use crate::decode::{kind, Decoder};
use crate::duty::{Duty, Schedule, Transition};
use crate::error::CallError;
use crate::levers::GraphMode;
use crate::say::say;
use gputrace_format::*;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::time::Instant;

/// The writer's side of a duty-cycled capture (`duty.rs` has the schedule):
/// turns CUPTI off at each window's end and on at the next one's start, and
/// says what to record: each window as it opens ([`CaptureWindow::opened`],
/// so a process killed inside it still says when it began) and as it closes.
pub(super) struct DutySide {
    schedule: Schedule,
    /// When the schedule's time 0 was (capture was on already).
    origin: Instant,
    /// Start of the open window, in trace time (`None`: capture is off).
    open: Option<Nanos>,
    /// EXTERNAL_CORRELATION was on when capture was turned off.
    external: bool,
}

impl DutySide {
    pub fn new(duty: Duty, (start, origin): (Nanos, Instant)) -> DutySide {
        DutySide {
            schedule: Schedule::new(duty),
            origin,
            open: Some(start),
            external: false,
        }
    }

    /// Capture is on (a window is open).
    pub fn is_on(&self) -> bool {
        self.open.is_some()
    }

    /// The record of the window open since capture started.
    pub fn first(&self) -> Option<CaptureWindow> {
        self.open.map(CaptureWindow::opened)
    }

    /// Act on the transitions due now. Returns the window records to write,
    /// in order: a window that closed (its records were flushed into the
    /// pool; the caller writes it once it has written them), one that opened.
    pub fn poll(&mut self, s: &Session, c: &CuptiSide) -> Vec<CaptureWindow> {
        let mut records = Vec::new();
        while let Some(t) = self.schedule.poll(self.origin.elapsed()) {
            match t {
                Transition::Off => {
                    self.external = s.pause_capture();
                    let end = trace_now(c);
                    if let Err(e) = s.flush(0) {
                        say(&format!("{e} during the flush at the end of a capture window"));
                    }
                    if let Some(start) = self.open.take() {
                        records.push(CaptureWindow {
                            start,
                            end: end.max(start),
                        });
                    }
                }
                Transition::On => {
                    let start = trace_now(c);
                    self.open = Some(start);
                    s.resume_capture(self.external);
                    records.push(CaptureWindow::opened(start));
                }
            }
        }
        records
    }

    /// The window open at the end of the trace, closed now.
    pub fn close(&mut self, c: &CuptiSide) -> Option<CaptureWindow> {
        let end = trace_now(c);
        self.open.take().map(|start| CaptureWindow {
            start,
            end: end.max(start),
        })
    }
}

/// `--graphs auto` on the writer thread: switches CUPTI to graph-level
/// graphs (the GRAPH_TRACE kind) once some graph has been launched the
/// configured number of times at node level, while capture is on (never in
/// a duty cycle's off phase). Tried once: CUPTI cannot go back.
#[derive(Default)]
pub(super) struct GraphSwitch {
    /// The switch was tried: when (trace time), or CUPTI's refusal.
    tried: Option<Result<Nanos, CallError>>,
}

impl GraphSwitch {
    pub fn poll(&mut self, s: &Session, c: &CuptiSide, dec: &Decoder, capture_on: bool) {
        let GraphMode::Auto { after } = s.config.graphs else { return };
        if self.tried.is_some() || !capture_on || dec.graphs.most < after {
            return;
        }
        let at = trace_now(c);
        self.tried = Some(c.api.enable(kind::GRAPH_TRACE).map(|()| at));
        if let Some(Ok(_)) = self.tried {
            s.graph_level.store(true, Release);
        }
    }

    /// The trailer's `capture.graph_level`.
    pub fn note(&self, s: &Session) -> Option<String> {
        match (s.config.graphs, &self.tried) {
            (GraphMode::Graph, _) if s.graph_level.load(Acquire) => Some("from the start".into()),
            (GraphMode::Auto { after }, None) => Some(format!("never: no graph was launched {after} times")),
            (GraphMode::Auto { after }, Some(Ok(t))) => {
                Some(format!("from {} ns (trace time): a graph had been launched {after} times", t.0))
            }
            (GraphMode::Auto { .. }, Some(Err(e))) => Some(format!("refused by CUPTI: {e}; graphs recorded node by node")),
            _ => None,
        }
    }
}

/// Now, in the trace's time (CUPTI's clock; the real-time clock if CUPTI
/// cannot say, which is what CUPTI's clock is by default).
fn trace_now(c: &CuptiSide) -> Nanos {
    Nanos(c.api.timestamp().unwrap_or_else(|_| ClockPair::now().realtime_ns))
}
