//! What the writer thread pumps: every producer of trace events (CUPTI
//! activity, NCCL, NVTX, NVML, PM sampling) is a [`Source`], and each writer
//! pass is a loop over them, in a fixed order.

use crate::decode::Decoder;
use crate::flight::Out;
use gputrace_format::{FormatError, Nanos, TraceWriter, Trailer};

/// The trace file the writer thread writes.
pub(super) type Writer = TraceWriter<Out>;

/// Step mark times the NVTX source holds between two flight recorder polls.
const MAX_PENDING_STEPS: usize = 4096;

/// What the sources share from one writer pass to the next.
pub(super) struct Pass {
    /// CUPTI's decoder: the activity source fills it; the NCCL source takes
    /// the kernels and external ids it collected, and says which to collect.
    pub dec: Decoder,
    /// The final pass (the exit handler asked to finish): write everything
    /// still waiting.
    pub last: bool,
    /// Activity records arrived since the flight recorder's last poll (its
    /// hang trigger).
    pub activity: bool,
    /// Activity buffers whose records could not be walked to the end, not
    /// yet written as a loss.
    pub undecodable: u64,
    /// Times of step marks for the flight recorder's slow-step trigger
    /// (collected only when it wants them; at most [`MAX_PENDING_STEPS`]).
    pub steps: Steps,
}

/// Step mark times, bounded.
#[derive(Default)]
pub(super) struct Steps {
    pub wanted: bool,
    pub times: Vec<u64>,
}

impl Steps {
    pub fn push(&mut self, start_ns: u64) {
        if self.wanted && self.times.len() < MAX_PENDING_STEPS {
            self.times.push(start_ns);
        }
    }
}

impl Pass {
    pub fn new(dec: Decoder) -> Pass {
        Pass {
            dec,
            last: false,
            activity: false,
            undecodable: 0,
            steps: Steps::default(),
        }
    }
}

/// One producer of trace events on the writer thread.
pub(super) trait Source {
    /// Before the sources of a pass are pumped (the NCCL source says which
    /// kernels the decoder collects for it before CUPTI's buffers are walked).
    fn prepare(&mut self, _pass: &mut Pass) {}

    /// Move what arrived since the last pass into the trace.
    fn pump(&mut self, w: &mut Writer, pass: &mut Pass) -> Result<(), FormatError>;

    /// After the last pass: write what is left and note in the trailer what
    /// the source recorded and lost (the trailer's `end_clock` is set).
    fn finish(&mut self, _w: &mut Writer, _pass: &mut Pass, _trailer: &mut Trailer) -> Result<(), FormatError> {
        Ok(())
    }

    /// After the trace could not be written: give back what the source holds
    /// (CUPTI's buffers go back to the pool).
    fn abandon(&mut self) {}
}

/// PM sampling: the sampler thread's samples and failures (`pm_sampling`).
impl Source for crate::pm_sampling::WriterSide {
    fn pump(&mut self, w: &mut Writer, _pass: &mut Pass) -> Result<(), FormatError> {
        crate::pm_sampling::WriterSide::pump(self, w)
    }

    fn finish(&mut self, w: &mut Writer, _pass: &mut Pass, trailer: &mut Trailer) -> Result<(), FormatError> {
        crate::pm_sampling::WriterSide::finish(self, w, trailer)
    }
}

/// A plugin time (`CLOCK_REALTIME` ns) in the trace's domain (0 stays 0).
pub(super) fn to_trace_time(realtime_ns: u64, offset: i64) -> Nanos {
    if realtime_ns == 0 {
        return Nanos(0);
    }
    Nanos(realtime_ns.saturating_add_signed(offset))
}
