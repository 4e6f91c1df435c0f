//! The NVML source: the sampler thread's GPU counters (`nvml/`).

use super::source::{to_trace_time, Pass, Source, Writer};
use gputrace_format::*;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// The writer thread's side of the NVML sampler: moves its samples into
/// the trace as counter events and its failures as loss records.
pub(super) struct NvmlSource {
    /// The series' names in the trace, interned at their first sample.
    names: [Option<StringId>; crate::nvml::SERIES.len()],
    offset: i64,
    /// Dropped samples already written as a loss record.
    dropped_written: u64,
}

impl NvmlSource {
    /// `offset`: added to a `CLOCK_REALTIME` ns to get the trace's time.
    pub fn new(offset: i64) -> NvmlSource {
        NvmlSource {
            names: [None; crate::nvml::SERIES.len()],
            offset,
            dropped_written: 0,
        }
    }
}

impl Source for NvmlSource {
    fn pump(&mut self, w: &mut Writer, _pass: &mut Pass) -> Result<(), FormatError> {
        let Some(hw) = crate::nvml::state() else { return Ok(()) };
        // At most one queue's worth per pass (see the NVTX source).
        for _ in 0..hw.queue.capacity() {
            let Some(x) = hw.queue.pop() else { break };
            let i = x.series as usize;
            let Some(&name) = crate::nvml::SERIES.get(i) else { continue };
            let metric = *self.names[i].get_or_insert_with(|| w.intern(name));
            w.push(Event::Counter(Counter {
                time: to_trace_time(x.realtime_ns, self.offset),
                device: DeviceId(x.device),
                metric,
                value: x.value,
            }))?;
        }
        for f in hw.take_failures() {
            let detail = w.intern(&f.detail);
            w.push(Event::Loss(Loss {
                time: to_trace_time(f.realtime_ns, self.offset),
                source: LossSource::COUNTER_FAILED,
                count: 1,
                detail,
            }))?;
        }
        let dropped = hw.dropped.load(Relaxed);
        if dropped > self.dropped_written {
            let detail = w.intern("nvml samples (the sampler's queue to the writer was full)");
            w.push(Event::Loss(Loss {
                time: to_trace_time(crate::nvml::realtime_ns(), self.offset),
                source: LossSource::QUEUE_OVERFLOW,
                count: dropped - self.dropped_written,
                detail,
            }))?;
            self.dropped_written = dropped;
        }
        Ok(())
    }

    /// Stop the sampler (waiting for it briefly, so that every sample it
    /// took is written), write what is left and note the counts.
    fn finish(&mut self, w: &mut Writer, pass: &mut Pass, trailer: &mut Trailer) -> Result<(), FormatError> {
        let Some(hw) = crate::nvml::state() else { return Ok(()) };
        let stopped = hw.stop_and_wait(Duration::from_millis(500));
        self.pump(w, pass)?;
        let mut status = hw.status();
        if !stopped {
            status.push_str("; the sampler was still in an NVML call at exit (its last samples may be missing)");
        }
        for (k, v) in [
            ("nvml.status", status),
            ("nvml.samples", hw.taken.load(Relaxed).to_string()),
            ("nvml.samples_dropped", hw.dropped.load(Relaxed).to_string()),
            ("nvml.failed_calls", hw.failed_calls.load(Relaxed).to_string()),
        ] {
            trailer.extra.insert(k.into(), v);
        }
        Ok(())
    }
}
