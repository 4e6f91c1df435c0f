//! GPU performance metrics from CUPTI PM sampling (`gputrace run
//! --gpu-metrics`, CUPTI 12.6+): SM activity, tensor pipe activity, DRAM
//! read/write throughput and DRAM throughput as a share of peak, sampled by the GPU every interval and decoded on
//! the agent's own thread.
//!
//! Which devices: the same as the NVML sampler (`nvml::choose_devices`).
//! Per device: a profiler host object for the chip builds the config image
//! of the metrics the chip knows (a metric it does not know is one line and
//! an absent series), then `cuptiPmSamplingEnable`, `SetConfig` (GPU time
//! trigger at the chosen rate, hardware buffer of [`HW_BUFFER_BYTES`],
//! oldest records kept so that an overflow is reported) and `Start`.
//!
//! Threads: one sampler thread (`gputrace-pm`), started by the writer once
//! the trace is open; no CUPTI callback path ever touches this module.
//! Every [`DECODE_PERIOD`] it decodes each device's hardware buffer into a
//! fixed counter data image, evaluates each completed sample
//! (`cuptiProfilerHostEvaluateToGpuValues`), pushes the values into a
//! bounded lock-free queue the writer drains (a full queue drops the sample
//! and counts it), and re-initializes the image. At exit it decodes once
//! more, then stops and disables sampling.
//!
//! Time: a sample is written at its `startTimestamp` and covers one
//! interval. The trace's GPU timeline is on CUPTI's timestamp clock
//! (`cuptiGetTimestamp`), and the PM sample timestamps are taken to be on
//! it too. That is checked, not assumed: at a device's first sample the
//! sampler compares the sample's end with `cuptiGetTimestamp`; more than
//! [`CLOCK_TOLERANCE_NS`] apart, it says so in one line and shifts that
//! device's samples by the difference (aligning them to decode time).
//!
//! Failure rules: a CUPTI without these functions (older than 12.6), a
//! device CUPTI cannot sample (pre-Turing, vGPU, CMP), missing privileges
//! (`NVreg_RestrictProfilingToAdminUsers`), counters held by another
//! profiler, or any other failed call: one `gputrace:` line, that device's
//! (or all) metrics off, a `counter-failed` loss record; the job and the rest
//! of the capture go on. A hardware buffer overflow loses the samples of
//! the gap: one `counter-overflow` loss record with the count estimated
//! from the gap between the samples around it.

pub mod api;

use crate::dl::Lib;
use crate::error::CallError;
use crate::sampler::SamplerThread;
use api::{Host, PmApi, Sampler};
use crossbeam::queue::ArrayQueue;
use cupti_sys as sys;
use gputrace_format::{metric, DeviceInfo, Event, FormatError, Loss, LossSource, Nanos, StringId, TraceWriter, Trailer};
use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The series, by index (the `series` of a [`Sample`]).
pub const SERIES: [&str; 5] = [
    metric::PM_SM_ACTIVE_BP,
    metric::PM_TENSOR_ACTIVE_BP,
    metric::PM_DRAM_READ_BYTES_PER_S,
    metric::PM_DRAM_WRITE_BYTES_PER_S,
    metric::PM_DRAM_THROUGHPUT_BP,
];

/// The PM sampling metric behind each series (same order as [`SERIES`]).
pub const METRICS: [&CStr; 5] = [
    c"sm__cycles_active.avg.pct_of_peak_sustained_elapsed",
    c"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
    c"dram__bytes_read.sum.per_second",
    c"dram__bytes_write.sum.per_second",
    c"dram__throughput.avg.pct_of_peak_sustained_elapsed",
];

/// Multiplier from the metric's value to the series' unit: percent to
/// basis points, bytes per second as they are.
const SCALE: [f64; 5] = [100.0, 100.0, 1.0, 1.0, 100.0];

/// How often the hardware buffers are decoded.
pub const DECODE_PERIOD: Duration = Duration::from_millis(50);
/// The hardware buffer CUPTI records into, per device.
pub const HW_BUFFER_BYTES: usize = 32 << 20;
/// Decode calls per device and round at most (each fills one image).
const DECODES_PER_ROUND: usize = 16;
/// Samples the queue to the writer holds (24 bytes each): 1.6 s of five
/// series at 1 kHz on eight devices.
pub const QUEUE_LEN: usize = 64 * 1024;
/// A device's sample end and `cuptiGetTimestamp` may differ by this much
/// (a decode period plus slack) before the samples are realigned.
pub const CLOCK_TOLERANCE_NS: u64 = 5_000_000_000;

/// Samples one counter data image holds: four decode periods' worth, at
/// least 64. Fixed when sampling starts, so memory is bounded.
pub fn image_samples(hz: u32) -> u32 {
    let per_period = (hz as u64 * DECODE_PERIOD.as_millis() as u64).div_ceil(1000);
    (per_period * 4).clamp(64, 1 << 20) as u32
}

/// One value, in the trace's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Trace time (CUPTI's clock), ns.
    pub time: u64,
    /// CUDA device ordinal.
    pub device: u32,
    /// Index into [`SERIES`].
    pub series: u8,
    /// The value in the series' unit.
    pub value: u64,
}

/// A loss for the writer: what and how many.
#[derive(Clone, Debug)]
pub struct LossNote {
    /// Trace time, ns.
    pub time: u64,
    pub source: LossSource,
    pub count: u64,
    pub detail: String,
}

/// State shared by the sampler and the writer.
pub struct Pm {
    pub queue: ArrayQueue<Sample>,
    /// Samples dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Values taken (pushed or dropped).
    pub taken: AtomicU64,
    /// Samples lost to hardware buffer overflows (estimated).
    pub overflowed: AtomicU64,
    /// Decode rounds done (all devices), and the sampler thread's CPU time
    /// in them, ns.
    pub rounds: AtomicU64,
    pub round_cpu_ns: AtomicU64,
    losses: Mutex<Vec<LossNote>>,
    status: Mutex<String>,
    sampler: SamplerThread,
}

static PM: OnceLock<Pm> = OnceLock::new();

/// The sampler's state, once [`start`] was called.
pub fn state() -> Option<&'static Pm> {
    PM.get()
}

impl Pm {
    fn new() -> Pm {
        Pm {
            queue: ArrayQueue::new(QUEUE_LEN),
            dropped: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            overflowed: AtomicU64::new(0),
            rounds: AtomicU64::new(0),
            round_cpu_ns: AtomicU64::new(0),
            losses: Mutex::new(Vec::new()),
            status: Mutex::new("starting".into()),
            sampler: SamplerThread::new(),
        }
    }

    pub fn take_losses(&self) -> Vec<LossNote> {
        std::mem::take(&mut *self.losses.lock().unwrap_or_else(|p| p.into_inner()))
    }

    pub fn status(&self) -> String {
        self.status.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_status(&self, s: String) {
        *self.status.lock().unwrap_or_else(|p| p.into_inner()) = s;
    }

    fn lose(&self, n: LossNote) {
        self.losses.lock().unwrap_or_else(|p| p.into_inner()).push(n);
    }

    /// A failure that turned metrics off: its one line and loss record.
    fn fail(&self, time: u64, what: &str, e: &CallError) {
        crate::say::say(&format!(
            "{what}: GPU metrics (CUPTI PM sampling) off: {}; capture goes on",
            explain(e)
        ));
        self.lose(LossNote {
            time,
            source: LossSource::COUNTER_FAILED,
            count: 1,
            detail: format!("{what} pm.*: {e}"),
        });
    }

    fn push(&self, s: Sample) {
        self.taken.fetch_add(1, Relaxed);
        if self.queue.push(s).is_err() {
            self.dropped.fetch_add(1, Relaxed);
        }
    }

    /// Ask the sampler to stop (it decodes what is left, then stops and
    /// disables sampling) and wait for it, at most `wait`.
    pub fn stop_and_wait(&self, wait: Duration) -> bool {
        self.sampler.stop_and_wait(wait)
    }
}

/// Why a call failed, for a person: the cases with a known cause and fix.
pub fn explain(e: &CallError) -> String {
    match e.code {
        sys::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES | sys::CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES => format!(
            "no permission to read GPU performance counters ({e}); run as root, or load the NVIDIA driver with \
             NVreg_RestrictProfilingToAdminUsers=0"
        ),
        sys::CUPTI_ERROR_NOT_SUPPORTED
        | sys::CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED
        | sys::CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED
        | sys::CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED => format!(
            "this GPU cannot be PM-sampled ({e}); PM sampling needs a Turing or newer GPU, not a vGPU or CMP board, \
             and the GPU time trigger needs Ampere GA10x or newer"
        ),
        sys::CUPTI_ERROR_HARDWARE_BUSY | sys::CUPTI_ERROR_OLD_PROFILER_API_INITIALIZED => format!(
            "the GPU's performance counters are held by another profiler (Nsight Compute, Nsight Systems GPU metrics, \
             DCGM profiling or another CUPTI tool) ({e})"
        ),
        sys::CUPTI_ERROR_INVALID_OPERATION if e.call == "cuptiPmSamplingEnable" => {
            format!("PM sampling is already enabled on this GPU, by another profiler in this process ({e})")
        }
        _ => e.to_string(),
    }
}

/// What to sample, decided before the trace's header is written.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Samples per second (the interval is `1e9 / hz` ns of GPU time).
    pub hz: u32,
    /// CUDA ordinals.
    pub devices: Vec<u32>,
}

/// The devices to sample and the note for the trace header (`None` with
/// the note when off).
pub fn plan(on: bool, hz: u32, devices: &[DeviceInfo], local_rank: Option<u32>) -> (Option<Plan>, String) {
    if !on {
        return (None, "off (gputrace run --gpu-metrics turns it on)".into());
    }
    if devices.is_empty() {
        return (None, "off: no CUDA device known to this process".into());
    }
    let (chosen, why) = crate::nvml::choose_devices(devices, local_rank);
    let devices: Vec<u32> = chosen.iter().map(|d| d.ordinal.0).collect();
    let list: Vec<String> = devices.iter().map(u32::to_string).collect();
    let note = format!("CUPTI PM sampling at {hz} Hz, device {} ({why})", list.join(", "));
    (Some(Plan { hz, devices }), note)
}

/// Start the sampler thread on the libcupti the session loaded (`source`
/// names it in messages). Returns at once.
pub fn start(plan: Plan, lib: Lib, source: String) {
    let pm = PM.get_or_init(Pm::new);
    let spawned = pm.sampler.spawn(
        "gputrace-pm",
        move || run(pm, &plan, lib, &source),
        || {
            crate::say::say("internal error in the PM sampler; GPU metrics stopped, capture goes on");
            pm.set_status("off: internal error".into());
        },
    );
    if let Err(e) = spawned {
        crate::say::say(&format!("could not start the PM sampler: {e}; capture goes on"));
        pm.set_status(format!("off: no sampler thread ({e})"));
    }
}

/// This thread's CPU time, ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

fn run(pm: &'static Pm, plan: &Plan, lib: Lib, source: &str) {
    use crate::say::say;
    let api = match PmApi::resolve(&lib) {
        Ok(a) => a,
        Err(missing) => {
            say(&format!(
                "GPU metrics (CUPTI PM sampling) off: {source} has no {missing} (PM sampling needs CUPTI 12.6 or \
                 newer); capture goes on"
            ));
            pm.set_status(format!("off: {missing} not in {source} (CUPTI older than 12.6)"));
            pm.lose(LossNote {
                time: 0,
                source: LossSource::COUNTER_FAILED,
                count: 1,
                detail: format!("pm.*: {missing} not in {source}"),
            });
            return;
        }
    };
    let now = || api.now().unwrap_or(0);
    if let Err(e) = api.profiler_init() {
        pm.fail(now(), "all devices", &e);
        pm.set_status(format!("off: {e}"));
        return;
    }
    let interval_ns = (1_000_000_000 / plan.hz.max(1) as u64).max(1);
    let mut live: Vec<Device> = Vec::new();
    for &d in &plan.devices {
        match Device::open(&api, d, interval_ns, image_samples(plan.hz)) {
            Ok(dev) => live.push(dev),
            Err(e) => pm.fail(now(), &format!("gpu{d}"), &e),
        }
    }
    if live.is_empty() {
        pm.set_status("off: no device could be sampled (see the loss records)".into());
        let _ = api.profiler_deinit();
        return;
    }
    let list: Vec<String> = live.iter().map(|d| format!("{} ({})", d.device, d.chip)).collect();
    pm.set_status(format!("sampled gpu {} at {} Hz with {source}", list.join(", "), plan.hz));
    let mut next = Instant::now() + DECODE_PERIOD;
    loop {
        pm.sampler.sleep_until(next);
        let stopping = pm.sampler.stop_requested();
        let cpu0 = thread_cpu_ns();
        live.retain_mut(|dev| match dev.drain(&api, pm) {
            Ok(()) => true,
            Err(e) => {
                pm.fail(api.now().unwrap_or(0), &format!("gpu{}", dev.device), &e);
                dev.close(&api, pm);
                false
            }
        });
        pm.round_cpu_ns.fetch_add(thread_cpu_ns().saturating_sub(cpu0), Relaxed);
        pm.rounds.fetch_add(1, Relaxed);
        if stopping || live.is_empty() {
            break;
        }
        next += DECODE_PERIOD;
        let now = Instant::now();
        if next < now {
            next = now + DECODE_PERIOD;
        }
    }
    for mut dev in live {
        dev.finish_overflow(&api, pm);
        dev.close(&api, pm);
    }
    let _ = api.profiler_deinit();
}

/// One device being sampled.
struct Device {
    device: u32,
    chip: String,
    host: Host,
    sampler: Sampler,
    /// The series recorded (indexes into [`SERIES`]) and their metric names.
    series: Vec<u8>,
    names: Vec<*const c_char>,
    /// The counter data image (fixed size).
    image: Vec<u8>,
    values: Vec<f64>,
    interval_ns: u64,
    /// Added to the samples' times (see the module's documentation on time).
    shift: Option<i64>,
    /// End of the last sample seen, and an overflow waiting for the next
    /// sample to say how many were lost.
    last_end: Option<u64>,
    overflow_pending: bool,
}

impl Device {
    /// Set up and start sampling `device`; on failure, whatever was set up
    /// is torn down again.
    fn open(api: &PmApi, device: u32, interval_ns: u64, max_samples: u32) -> Result<Device, CallError> {
        let chip_c = api.chip_name(device)?;
        let chip = chip_c.to_string_lossy().into_owned();
        let availability = api.counter_availability(device)?;
        let host = api.host_init(&chip_c, &availability)?;
        let r = Device::configure(api, device, host, &chip, interval_ns, max_samples);
        if r.is_err() {
            let _ = api.host_deinit(host);
        }
        r
    }

    fn configure(api: &PmApi, device: u32, host: Host, chip: &str, interval_ns: u64, max_samples: u32) -> Result<Device, CallError> {
        let mut series = Vec::new();
        let mut names = Vec::new();
        let mut last_err = None;
        for (i, m) in METRICS.iter().enumerate() {
            match api.add_metric(host, m) {
                Ok(()) => {
                    series.push(i as u8);
                    names.push(m.as_ptr());
                }
                Err(e) => {
                    crate::say::say(&format!(
                        "gpu{device} {}: PM sampling metric {} not available on {chip} ({e}); that series is not \
                         recorded",
                        SERIES[i],
                        m.to_string_lossy()
                    ));
                    last_err = Some(e);
                }
            }
        }
        if series.is_empty() {
            return Err(last_err.expect("every metric was tried"));
        }
        let config = api.config_image(host)?;
        let sampler = api.enable(device)?;
        let started = (|| {
            api.set_config(sampler, &config, HW_BUFFER_BYTES, interval_ns)?;
            let size = api.counter_data_size(sampler, &names, max_samples)?;
            let mut image = vec![0u8; size];
            api.init_counter_data(sampler, &mut image)?;
            api.start(sampler)?;
            Ok(image)
        })();
        match started {
            Ok(image) => Ok(Device {
                device,
                chip: chip.to_string(),
                host,
                sampler,
                values: vec![0.0; series.len()],
                series,
                names,
                image,
                interval_ns,
                shift: None,
                last_end: None,
                overflow_pending: false,
            }),
            Err(e) => {
                let _ = api.disable(sampler);
                Err(e)
            }
        }
    }

    /// Decode what the hardware holds and push its samples.
    fn drain(&mut self, api: &PmApi, pm: &Pm) -> Result<(), CallError> {
        for _ in 0..DECODES_PER_ROUND {
            let decoded = api.decode(self.sampler, &mut self.image)?;
            let n = api.completed_samples(&self.image)?;
            for i in 0..n {
                let (start, end) = api.sample_times(self.sampler, &self.image, i)?;
                api.evaluate(self.host, &self.image, i, &self.names, &mut self.values)?;
                self.take(api, pm, start, end);
            }
            // With the oldest records kept, the ones lost come after those
            // this call decoded: the next sample seen tells how many.
            if decoded.overflow {
                self.overflow_pending = true;
            }
            api.init_counter_data(self.sampler, &mut self.image)?;
            if !decoded.full {
                break;
            }
        }
        Ok(())
    }

    /// One decoded sample: its values into the queue, an overflow before it
    /// into a loss record.
    fn take(&mut self, api: &PmApi, pm: &Pm, start: u64, end: u64) {
        let shift = *self.shift.get_or_insert_with(|| {
            let Some(now) = api.now() else { return 0 };
            if now.abs_diff(end) <= CLOCK_TOLERANCE_NS {
                return 0;
            }
            let shift = now as i128 - end as i128;
            crate::say::say(&format!(
                "gpu{}: PM sample times are {:.1} s from CUPTI's clock; they are aligned to their decode time \
                 (within {} ms)",
                self.device,
                shift as f64 / 1e9,
                DECODE_PERIOD.as_millis()
            ));
            shift.clamp(i64::MIN as i128, i64::MAX as i128) as i64
        });
        let (start, end) = (start.saturating_add_signed(shift), end.saturating_add_signed(shift));
        if self.overflow_pending {
            self.overflow_pending = false;
            let gap = self.last_end.map_or(0, |last| start.saturating_sub(last));
            let lost = ((gap + self.interval_ns / 2) / self.interval_ns).max(1);
            self.lost(pm, self.last_end.unwrap_or(start), lost, "between the samples around it");
        }
        self.last_end = Some(end);
        for (k, &s) in self.series.iter().enumerate() {
            let v = self.values[k];
            if !v.is_finite() {
                continue;
            }
            pm.push(Sample {
                time: start,
                device: self.device,
                series: s,
                value: (v.max(0.0) * SCALE[s as usize]).round() as u64,
            });
        }
    }

    fn lost(&self, pm: &Pm, time: u64, count: u64, how: &str) {
        pm.overflowed.fetch_add(count, Relaxed);
        pm.lose(LossNote {
            time,
            source: LossSource::COUNTER_OVERFLOW,
            count,
            detail: format!(
                "gpu{} pm.*: the PM sampling hardware buffer overflowed ({count} samples estimated from the gap {how})",
                self.device
            ),
        });
    }

    /// An overflow with no sample after it: the loss runs to now.
    fn finish_overflow(&mut self, api: &PmApi, pm: &Pm) {
        if !self.overflow_pending {
            return;
        }
        self.overflow_pending = false;
        let now = api.now().unwrap_or(0).saturating_add_signed(self.shift.unwrap_or(0));
        let last = self.last_end.unwrap_or(now);
        let lost = (now.saturating_sub(last) / self.interval_ns).max(1);
        self.lost(pm, last, lost, "to the end of sampling");
    }

    /// Final decode, then stop, disable and free the host object. Errors
    /// here are only said: the samples are all in.
    fn close(&mut self, api: &PmApi, pm: &Pm) {
        let _ = api.stop(self.sampler);
        if let Err(e) = api.disable(self.sampler) {
            crate::say::say(&format!(
                "gpu{}: {e} (PM sampling may stay on until the process exits)",
                self.device
            ));
        }
        let _ = api.host_deinit(self.host);
        let _ = pm;
    }
}

/// The writer thread's side: samples into counter events, losses into
/// loss records, counts into the trailer.
pub struct WriterSide {
    names: [Option<StringId>; SERIES.len()],
    dropped_written: u64,
}

impl Default for WriterSide {
    fn default() -> Self {
        WriterSide {
            names: [None; SERIES.len()],
            dropped_written: 0,
        }
    }
}

impl WriterSide {
    pub fn pump<W: std::io::Write>(&mut self, w: &mut TraceWriter<W>) -> Result<(), FormatError> {
        let Some(pm) = state() else { return Ok(()) };
        for _ in 0..pm.queue.capacity() {
            let Some(x) = pm.queue.pop() else { break };
            let Some(&name) = SERIES.get(x.series as usize) else { continue };
            let metric = *self.names[x.series as usize].get_or_insert_with(|| w.intern(name));
            w.push(Event::Counter(gputrace_format::Counter {
                time: Nanos(x.time),
                device: gputrace_format::DeviceId(x.device),
                metric,
                value: x.value,
            }))?;
        }
        for l in pm.take_losses() {
            let detail = w.intern(&l.detail);
            w.push(Event::Loss(Loss {
                time: Nanos(l.time),
                source: l.source,
                count: l.count,
                detail,
            }))?;
        }
        let dropped = pm.dropped.load(Relaxed);
        if dropped > self.dropped_written {
            let detail = w.intern("pm samples (the PM sampler's queue to the writer was full)");
            w.push(Event::Loss(Loss {
                time: Nanos(0),
                source: LossSource::QUEUE_OVERFLOW,
                count: dropped - self.dropped_written,
                detail,
            }))?;
            self.dropped_written = dropped;
        }
        Ok(())
    }

    /// Stop the sampler (it decodes what is left), write the rest and note
    /// the counts.
    pub fn finish<W: std::io::Write>(&mut self, w: &mut TraceWriter<W>, trailer: &mut Trailer) -> Result<(), FormatError> {
        let Some(pm) = state() else { return Ok(()) };
        let stopped = pm.stop_and_wait(Duration::from_secs(1));
        self.pump(w)?;
        let mut status = pm.status();
        if !stopped {
            status.push_str("; the sampler was still in a CUPTI call at exit (its last samples may be missing)");
        }
        let rounds = pm.rounds.load(Relaxed);
        for (k, v) in [
            ("pm.status", status),
            ("pm.samples", pm.taken.load(Relaxed).to_string()),
            ("pm.samples_dropped", pm.dropped.load(Relaxed).to_string()),
            ("pm.samples_overflowed", pm.overflowed.load(Relaxed).to_string()),
            ("pm.decode_rounds", rounds.to_string()),
            ("pm.decode_cpu_us", (pm.round_cpu_ns.load(Relaxed) / 1000).to_string()),
        ] {
            trailer.extra.insert(k.into(), v);
        }
        Ok(())
    }
}

/// Stop sampling without waiting (the trace could not be written).
pub fn stop_now() {
    if let Some(pm) = state() {
        pm.stop_and_wait(Duration::ZERO);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_holds_four_decode_periods() {
        assert_eq!(image_samples(1000), 200);
        assert_eq!(image_samples(10), 64);
        assert_eq!(image_samples(20_000), 4000);
    }

    #[test]
    fn known_causes_get_their_fix() {
        let e = |call, code| explain(&CallError::cupti_profiler(call, code));
        assert!(e("cuptiPmSamplingEnable", sys::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES).contains("NVreg_RestrictProfilingToAdminUsers"));
        assert!(e("cuptiPmSamplingEnable", sys::CUPTI_ERROR_NOT_SUPPORTED).contains("Turing"));
        assert!(e("cuptiPmSamplingEnable", sys::CUPTI_ERROR_HARDWARE_BUSY).contains("another profiler"));
        assert!(e("cuptiPmSamplingEnable", sys::CUPTI_ERROR_INVALID_OPERATION).contains("already enabled"));
        assert!(e("cuptiPmSamplingStart", sys::CUPTI_ERROR_UNKNOWN).contains("cuptiPmSamplingStart returned"));
    }

    #[test]
    fn one_device_per_rank_as_nvml() {
        let devs: Vec<DeviceInfo> = (0..4)
            .map(|i| DeviceInfo {
                ordinal: gputrace_format::DeviceId(i),
                ..DeviceInfo::default()
            })
            .collect();
        let (p, note) = plan(true, 1000, &devs, Some(2));
        assert_eq!(p.unwrap().devices, vec![2]);
        assert!(note.contains("1000 Hz"), "{note}");
        let (p, note) = plan(false, 1000, &devs, Some(2));
        assert!(p.is_none() && note.contains("--gpu-metrics"), "{note}");
    }
}
