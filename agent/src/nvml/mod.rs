//! GPU counters from NVML, sampled on the agent's own thread.
//!
//! Which process samples which device: each traced process samples the
//! CUDA devices it uses, so the series belong to the rank's own trace and
//! a node with eight ranks has one sampler per GPU, not eight. A process
//! that sees one device samples it; one that sees several and has a local
//! rank (`LOCAL_RANK` and the like, see `RankInfo`) samples device
//! `local_rank % count` (the device `torch.cuda.set_device(local_rank)`
//! picks); one without a local rank samples every device it sees (a
//! single-process job). Devices are matched to NVML by UUID, so
//! `CUDA_VISIBLE_DEVICES` reordering is followed; a device whose UUID is
//! unknown is taken by index only when `CUDA_VISIBLE_DEVICES` is unset.
//!
//! Threads: one sampler thread (`gputrace-nvml`), started by the writer
//! once the trace is open. It is on no callback path: it calls NVML (which
//! may block: a PCIe reading takes NVML 20 ms), reads the clock and pushes
//! samples into a bounded lock-free queue that the writer drains; a full
//! queue drops the sample and counts it. Failures take a lock (never on a
//! path CUPTI, NVTX or NCCL call).
//!
//! Failure rules: NVML missing, or its initialization failing, is one
//! `gputrace:` line and no sampling; capture goes on. A call that fails
//! stops the series it feeds (one line, one loss record naming it, counted);
//! a device NVML reports lost (`NVML_ERROR_GPU_IS_LOST`) stops all its
//! series at once (one line). A series NVML does not support on this GPU
//! (NVLink on a PCIe-only board, ECC turned off) fails at its first read
//! and is absent, with its one line.
//!
//! XID errors: the sampler registers its devices for
//! `nvmlEventTypeXidCriticalError` in one event set and polls it (timeout
//! 0, never blocking) once a round; each event is one `nvml.xid` sample
//! whose value is the XID. Registration failing (not supported, no
//! permission) is one line and no XID series for that device.

pub mod api;

use crate::error::CallError;
use crate::sampler::SamplerThread;
use api::{Device, Nvml};
use crossbeam::queue::ArrayQueue;
use gputrace_format::{metric, DeviceId, DeviceInfo};
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Samples the queue to the writer holds (24 bytes each): 20 s of sixteen
/// series at 10 Hz on eight devices; the writer drains it every few ms.
pub const QUEUE_LEN: usize = 32 * 1024;

/// The series, by index (the `metric` of a [`Sample`]).
pub const SERIES: [&str; 17] = [
    metric::GPU_UTIL_PCT,
    metric::MEM_UTIL_PCT,
    metric::SM_CLOCK_MHZ,
    metric::MEM_CLOCK_MHZ,
    metric::POWER_MW,
    metric::ENERGY_MJ,
    metric::TEMPERATURE_C,
    metric::THROTTLE_REASONS,
    metric::MEM_USED_BYTES,
    metric::PCIE_TX_KBPS,
    metric::PCIE_RX_KBPS,
    metric::SM_CLOCK_MAX_MHZ,
    metric::NVLINK_TX_KIB,
    metric::NVLINK_RX_KIB,
    metric::ECC_UNCORRECTED_ERRORS,
    metric::ECC_CORRECTED_ERRORS,
    metric::XID,
];

/// The index of [`metric::SM_CLOCK_MAX_MHZ`] in [`SERIES`] (read once, not by a probe).
const SM_CLOCK_MAX: u8 = 11;
/// The index of [`metric::XID`] in [`SERIES`] (from events, not by a probe).
const XID: u8 = 16;

/// XID events taken from the event set per round at most: a storm is read
/// over several rounds (NVML holds the rest), never in an unbounded loop.
const XID_EVENTS_PER_ROUND: usize = 64;

/// One reading, in the sampler's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// `CLOCK_REALTIME` when the call returned, ns.
    pub realtime_ns: u64,
    /// CUDA device ordinal (the trace's device id).
    pub device: u32,
    /// Index into [`SERIES`].
    pub series: u8,
    /// The value, in the series' unit.
    pub value: u64,
}

/// A series that stopped, for the writer's loss record.
#[derive(Clone, Debug)]
pub struct Failure {
    /// When, `CLOCK_REALTIME` ns.
    pub realtime_ns: u64,
    /// What stopped and why (`gpu0 nvml.power_mw: nvmlDeviceGetPowerUsage returned 3 (Not Supported)`).
    pub detail: String,
}

/// State shared by the sampler and the writer.
pub struct Hw {
    /// Samples on their way to the writer.
    pub queue: ArrayQueue<Sample>,
    /// Samples dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Samples taken (pushed or dropped).
    pub taken: AtomicU64,
    /// NVML calls that failed (each stops its series).
    pub failed_calls: AtomicU64,
    failures: Mutex<Vec<Failure>>,
    /// What sampling is doing, for the trailer (`sampling gpu 0 at 10 Hz`,
    /// `off: libnvidia-ml.so.1 not found`).
    status: Mutex<String>,
    sampler: SamplerThread,
}

static HW: OnceLock<Hw> = OnceLock::new();

/// The sampler's state, once [`start`] was called.
pub fn state() -> Option<&'static Hw> {
    HW.get()
}

impl Hw {
    /// Take the failures recorded since the last call.
    pub fn take_failures(&self) -> Vec<Failure> {
        std::mem::take(&mut *self.failures.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The sampler's status line.
    pub fn status(&self) -> String {
        self.status.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn set_status(&self, s: String) {
        *self.status.lock().unwrap_or_else(|p| p.into_inner()) = s;
    }

    /// Ask the sampler to stop and wait for it (at most `wait`): after
    /// this returns true, it pushes nothing more.
    pub fn stop_and_wait(&self, wait: Duration) -> bool {
        self.sampler.stop_and_wait(wait)
    }

    fn fail(&self, device: u32, series: &str, e: &CallError) {
        self.failed_calls.fetch_add(1, Relaxed);
        let detail = format!("gpu{device} {series}: {e}");
        self.failures.lock().unwrap_or_else(|p| p.into_inner()).push(Failure {
            realtime_ns: realtime_ns(),
            detail,
        });
    }

    fn push(&self, s: Sample) {
        self.taken.fetch_add(1, Relaxed);
        if self.queue.push(s).is_err() {
            self.dropped.fetch_add(1, Relaxed);
        }
    }
}

/// One device the process samples.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// CUDA ordinal.
    pub device: DeviceId,
    /// CUDA's UUID (`GPU-…`), empty when unknown.
    pub uuid: String,
}

/// What to sample, decided before the trace's header is written.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Samples per second (≥ 1).
    pub hz: u32,
    /// The devices.
    pub targets: Vec<Target>,
    /// `GPUTRACE_NVML`, else the system's `libnvidia-ml.so.1`.
    pub library: Option<String>,
    /// Whether a device without a UUID may be matched by index
    /// (`CUDA_VISIBLE_DEVICES` unset, so CUDA's and NVML's numbering agree).
    pub by_index: bool,
}

/// The devices this process samples (see the module's documentation) and
/// the note for the trace header. `None` with the note when it samples none.
pub fn plan(
    hz: u32,
    devices: &[DeviceInfo],
    local_rank: Option<u32>,
    library: Option<String>,
    visible_devices_set: bool,
) -> (Option<Plan>, String) {
    if hz == 0 {
        return (None, "off (GPUTRACE_GPU_SAMPLE_HZ=0)".into());
    }
    if devices.is_empty() {
        return (None, "off: no CUDA device known to this process".into());
    }
    let (chosen, why) = choose_devices(devices, local_rank);
    let targets: Vec<Target> = chosen
        .iter()
        .map(|d| Target {
            device: d.ordinal,
            uuid: d.uuid.clone(),
        })
        .collect();
    let list: Vec<String> = targets.iter().map(|t| t.device.0.to_string()).collect();
    let note = format!("NVML at {hz} Hz, device {} ({why})", list.join(", "));
    let plan = Plan {
        hz,
        targets,
        library,
        by_index: !visible_devices_set,
    };
    (Some(plan), note)
}

/// The devices a process samples (see the module's documentation), with
/// why; `devices` must not be empty. Shared with the PM sampler.
pub fn choose_devices(devices: &[DeviceInfo], local_rank: Option<u32>) -> (Vec<&DeviceInfo>, String) {
    match local_rank {
        _ if devices.len() == 1 => (vec![&devices[0]], "the one device this process sees".into()),
        Some(r) => (
            vec![&devices[r as usize % devices.len()]],
            format!("local rank {r} of {} visible devices", devices.len()),
        ),
        None => (devices.iter().collect(), "every visible device (no local rank)".into()),
    }
}

/// Start the sampler thread. Returns at once; what happens (NVML missing,
/// devices found) is said on its thread, and in [`Hw::status`].
pub fn start(plan: Plan) {
    let hw = HW.get_or_init(|| Hw {
        queue: ArrayQueue::new(QUEUE_LEN),
        dropped: AtomicU64::new(0),
        taken: AtomicU64::new(0),
        failed_calls: AtomicU64::new(0),
        failures: Mutex::new(Vec::new()),
        status: Mutex::new("starting".into()),
        sampler: SamplerThread::new(),
    });
    let spawned = hw.sampler.spawn(
        "gputrace-nvml",
        move || run(hw, &plan),
        || {
            crate::say::say("internal error in the GPU counter sampler; sampling stopped, capture goes on");
            hw.set_status("off: internal error".into());
        },
    );
    if let Err(e) = spawned {
        crate::say::say(&format!("could not start the GPU counter sampler: {e}; capture goes on"));
        hw.set_status(format!("off: no sampler thread ({e})"));
    }
}

/// `CLOCK_REALTIME`, ns.
pub fn realtime_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// One NVML call per round, feeding one or two series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Probe {
    Utilization,
    SmClock,
    MemClock,
    Power,
    Energy,
    Temperature,
    Reasons,
    MemUsed,
    PcieTx,
    PcieRx,
    NvlinkTx,
    NvlinkRx,
    EccUncorrected,
    EccCorrected,
}

const PROBES: [Probe; 14] = [
    Probe::Utilization,
    Probe::SmClock,
    Probe::MemClock,
    Probe::Power,
    Probe::Energy,
    Probe::Temperature,
    Probe::Reasons,
    Probe::MemUsed,
    Probe::PcieTx,
    Probe::PcieRx,
    Probe::NvlinkTx,
    Probe::NvlinkRx,
    Probe::EccUncorrected,
    Probe::EccCorrected,
];

impl Probe {
    /// The series (indexes into [`SERIES`]) this call feeds.
    fn series(self) -> &'static [u8] {
        match self {
            Probe::Utilization => &[0, 1],
            Probe::SmClock => &[2],
            Probe::MemClock => &[3],
            Probe::Power => &[4],
            Probe::Energy => &[5],
            Probe::Temperature => &[6],
            Probe::Reasons => &[7],
            Probe::MemUsed => &[8],
            Probe::PcieTx => &[9],
            Probe::PcieRx => &[10],
            Probe::NvlinkTx => &[12],
            Probe::NvlinkRx => &[13],
            Probe::EccUncorrected => &[14],
            Probe::EccCorrected => &[15],
        }
    }

    /// Read the values, in the order of [`Probe::series`].
    fn read(self, n: &Nvml, d: Device) -> Result<[u64; 2], CallError> {
        Ok(match self {
            Probe::Utilization => {
                let u = n.utilization(d)?;
                [u.gpu as u64, u.memory as u64]
            }
            Probe::SmClock => [n.clock(d, api::CLOCK_SM)? as u64, 0],
            Probe::MemClock => [n.clock(d, api::CLOCK_MEM)? as u64, 0],
            Probe::Power => [n.power(d)? as u64, 0],
            Probe::Energy => [n.energy(d)?, 0],
            Probe::Temperature => [n.temperature(d)? as u64, 0],
            Probe::Reasons => [n.reasons(d)?, 0],
            Probe::MemUsed => [n.memory(d)?.used, 0],
            Probe::PcieTx => [n.pcie(d, api::PCIE_UTIL_TX_BYTES)? as u64, 0],
            Probe::PcieRx => [n.pcie(d, api::PCIE_UTIL_RX_BYTES)? as u64, 0],
            Probe::NvlinkTx => [
                n.field_value(
                    d,
                    api::FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                    api::SCOPE_ALL_LINKS,
                    "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX)",
                )?,
                0,
            ],
            Probe::NvlinkRx => [
                n.field_value(
                    d,
                    api::FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
                    api::SCOPE_ALL_LINKS,
                    "nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)",
                )?,
                0,
            ],
            Probe::EccUncorrected => [n.ecc_errors(d, api::MEMORY_ERROR_TYPE_UNCORRECTED)?, 0],
            Probe::EccCorrected => [n.ecc_errors(d, api::MEMORY_ERROR_TYPE_CORRECTED)?, 0],
        })
    }
}

fn names(series: &[u8]) -> String {
    series.iter().map(|&i| SERIES[i as usize]).collect::<Vec<_>>().join(", ")
}

/// The event set XID errors arrive in, with the devices registered to it;
/// freed when dropped (before the library is closed: it is made after it).
struct XidEvents<'a> {
    nvml: &'a Nvml,
    set: api::EventSet,
    /// (NVML handle, CUDA ordinal) of each registered device.
    devices: Vec<(Device, u32)>,
}

impl<'a> XidEvents<'a> {
    /// Register every device of `live` for XID events; `None` (with one
    /// line per failure) when none could be.
    fn open(hw: &Hw, nvml: &'a Nvml, live: &[Live]) -> Option<XidEvents<'a>> {
        use crate::say::say;
        let set = match nvml.event_set_create() {
            Ok(set) => set,
            Err(e) => {
                for l in live {
                    hw.fail(l.device, metric::XID, &e);
                }
                say(&format!("{} ({e}): XID errors are not recorded, capture goes on", metric::XID));
                return None;
            }
        };
        let mut x = XidEvents {
            nvml,
            set,
            devices: Vec::new(),
        };
        for l in live {
            match nvml.register_events(l.handle, api::EVENT_TYPE_XID_CRITICAL_ERROR, set) {
                Ok(()) => x.devices.push((l.handle, l.device)),
                Err(e) => {
                    hw.fail(l.device, metric::XID, &e);
                    say(&format!(
                        "gpu{} {}: {e}; its XID errors are not recorded, capture goes on",
                        l.device,
                        metric::XID
                    ));
                }
            }
        }
        // Dropping an empty one frees the set.
        (!x.devices.is_empty()).then_some(x)
    }

    /// Take the events that arrived (at most [`XID_EVENTS_PER_ROUND`]),
    /// without waiting: each XID is one sample of its device.
    fn poll(&self, hw: &Hw) -> Result<(), CallError> {
        for _ in 0..XID_EVENTS_PER_ROUND {
            let Some(ev) = self.nvml.event_set_wait(self.set, 0)? else {
                break;
            };
            if ev.event_type & api::EVENT_TYPE_XID_CRITICAL_ERROR == 0 {
                continue;
            }
            let Some(&(_, device)) = self.devices.iter().find(|(h, _)| *h == ev.device) else {
                continue;
            };
            hw.push(Sample {
                realtime_ns: realtime_ns(),
                device,
                series: XID,
                value: ev.event_data,
            });
        }
        Ok(())
    }
}

impl Drop for XidEvents<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.nvml.event_set_free(self.set) {
            crate::say::say(&format!("{e} (freeing the XID event set; nothing else is affected)"));
        }
    }
}

/// A device being sampled: its handle and which probes still run.
struct Live {
    device: u32,
    handle: Device,
    probes: Vec<Probe>,
}

fn run(hw: &'static Hw, plan: &Plan) {
    use crate::say::say;
    let Some((nvml, name)) = open(hw, plan) else {
        return;
    };
    let mut live = devices(hw, plan, &nvml);
    if live.is_empty() {
        hw.set_status("off: NVML knows none of this process's devices".into());
        return;
    }
    let list: Vec<String> = live.iter().map(|l| l.device.to_string()).collect();
    hw.set_status(format!("sampled gpu {} at {} Hz with {name}", list.join(", "), plan.hz));
    record_max_clocks(hw, &nvml, &live);
    let mut xid = XidEvents::open(hw, &nvml, &live);
    let period = Duration::from_nanos(1_000_000_000 / plan.hz as u64);
    let mut next = Instant::now();
    while !hw.sampler.stop_requested() {
        for l in &mut live {
            sample(hw, &nvml, l);
        }
        // After the probes, so that the XID of a GPU found lost this round
        // (XID 79, fallen off the bus) is still taken.
        if let Some(x) = &xid {
            if let Err(e) = x.poll(hw) {
                for &(_, device) in &x.devices {
                    hw.fail(device, metric::XID, &e);
                }
                say(&format!("{} ({e}): XID errors stop being recorded, capture goes on", metric::XID));
                xid = None;
            }
        }
        live.retain(|l| !l.probes.is_empty());
        if live.is_empty() {
            hw.set_status(format!("{}; every series stopped (see the loss records)", hw.status()));
            return;
        }
        // Ticks missed (a slow call, a stopped process) are skipped, not
        // caught up in a burst.
        next += period;
        let now = Instant::now();
        if next < now {
            next = now + period;
        }
        hw.sampler.sleep_until(next);
    }
}

/// NVML loaded, resolved and initialised, and the library's name; None (said
/// on stderr and in the status) when it cannot be.
fn open(hw: &Hw, plan: &Plan) -> Option<(Nvml, String)> {
    use crate::say::say;
    let name = plan.library.clone().unwrap_or_else(|| "libnvidia-ml.so.1".into());
    let Some(lib) = crate::dl::Lib::open(&name, 0) else {
        let hint = if plan.library.is_some() {
            "GPUTRACE_NVML"
        } else {
            "no NVIDIA driver on this machine?"
        };
        say(&format!(
            "NVML not available ({name} not found; {hint}): GPU counters are not sampled, capture goes on"
        ));
        hw.set_status(format!("off: {name} not found"));
        return None;
    };
    let nvml = match Nvml::resolve(&lib) {
        Ok(n) => n,
        Err(e) => {
            say(&format!(
                "NVML not usable ({name}: {e} not found in it): GPU counters are not sampled, capture goes on"
            ));
            hw.set_status(format!("off: {name}: {e} not found in it"));
            return None;
        }
    };
    if let Err(e) = nvml.init() {
        hw.failed_calls.fetch_add(1, Relaxed);
        say(&format!(
            "NVML could not start ({e}): GPU counters are not sampled, capture goes on"
        ));
        hw.set_status(format!("off: {e}"));
        return None;
    }
    Some((nvml, name))
}

/// The handles of the devices this process uses (a device NVML does not know is said and left out).
fn devices(hw: &Hw, plan: &Plan, nvml: &Nvml) -> Vec<Live> {
    use crate::say::say;
    let mut live: Vec<Live> = Vec::new();
    for t in &plan.targets {
        let handle = if !t.uuid.is_empty() {
            nvml.by_uuid(&t.uuid)
        } else if plan.by_index {
            nvml.count().and_then(|n| {
                if t.device.0 < n {
                    nvml.by_index(t.device.0)
                } else {
                    Err(CallError::described(
                        "nvmlDeviceGetCount_v2",
                        api::ERROR_NOT_FOUND,
                        format!("NVML sees {n} devices"),
                    ))
                }
            })
        } else {
            Err(CallError::described(
                "nvmlDeviceGetHandleByUUID",
                api::ERROR_NOT_FOUND,
                "CUDA gave no UUID for the device and CUDA_VISIBLE_DEVICES renumbers devices",
            ))
        };
        match handle {
            Ok(handle) => live.push(Live {
                device: t.device.0,
                handle,
                probes: PROBES.to_vec(),
            }),
            Err(e) => {
                hw.fail(t.device.0, "all series", &e);
                say(&format!(
                    "gpu{}: NVML does not know this device ({e}); its counters are not sampled",
                    t.device.0
                ));
            }
        }
    }
    live
}

/// The ceiling, once: what the SM clock is compared with.
fn record_max_clocks(hw: &Hw, nvml: &Nvml, live: &[Live]) {
    use crate::say::say;
    for l in live {
        match nvml.max_clock(l.handle, api::CLOCK_SM) {
            Ok(v) => hw.push(Sample {
                realtime_ns: realtime_ns(),
                device: l.device,
                series: SM_CLOCK_MAX,
                value: v as u64,
            }),
            Err(e) => {
                hw.fail(l.device, metric::SM_CLOCK_MAX_MHZ, &e);
                say(&format!(
                    "gpu{} {}: {e}; that series is not recorded",
                    l.device,
                    metric::SM_CLOCK_MAX_MHZ
                ));
            }
        }
    }
}

/// One round of `l`'s probes: a probe that fails is dropped (said on stderr and
/// counted); a lost GPU drops them all.
fn sample(hw: &Hw, nvml: &Nvml, l: &mut Live) {
    use crate::say::say;
    let mut lost = false;
    l.probes.retain(|&p| {
        if lost {
            return false;
        }
        match p.read(nvml, l.handle) {
            Ok(v) => {
                let t = realtime_ns();
                for (i, &s) in p.series().iter().enumerate() {
                    hw.push(Sample {
                        realtime_ns: t,
                        device: l.device,
                        series: s,
                        value: v[i],
                    });
                }
                true
            }
            Err(e) if e.code == api::ERROR_GPU_IS_LOST => {
                lost = true;
                false
            }
            Err(e) => {
                let n = names(p.series());
                hw.fail(l.device, &n, &e);
                let what = if e.code == api::ERROR_NOT_SUPPORTED {
                    "not supported on this GPU, that series is not recorded"
                } else {
                    "that series stops"
                };
                say(&format!("gpu{} {n}: {e}; {what}, capture goes on", l.device));
                false
            }
        }
    });
    if lost {
        let e = CallError::described("NVML", api::ERROR_GPU_IS_LOST, "the GPU is lost");
        hw.fail(l.device, "all series", &e);
        say(&format!(
            "gpu{}: NVML reports the GPU lost (fallen off the bus); its counters stop, capture goes on",
            l.device
        ));
        l.probes.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(i: u32) -> DeviceInfo {
        DeviceInfo {
            ordinal: DeviceId(i),
            uuid: format!("GPU-{i}"),
            ..DeviceInfo::default()
        }
    }

    #[test]
    fn each_process_samples_its_own_device() {
        let eight: Vec<DeviceInfo> = (0..8).map(dev).collect();
        let (p, note) = plan(10, &eight, Some(3), None, false);
        assert_eq!(
            p.unwrap().targets,
            vec![Target {
                device: DeviceId(3),
                uuid: "GPU-3".into()
            }]
        );
        assert!(note.contains("local rank 3"), "{note}");
        // One visible device (CUDA_VISIBLE_DEVICES per rank): that one, whatever the rank.
        let (p, _) = plan(10, &[dev(0)], Some(5), None, true);
        let p = p.unwrap();
        assert_eq!(p.targets.len(), 1);
        assert!(!p.by_index);
        // No local rank: every device.
        let (p, _) = plan(10, &eight, None, None, false);
        assert_eq!(p.unwrap().targets.len(), 8);
        // More ranks than devices wrap around.
        let (p, _) = plan(10, &eight[..2], Some(3), None, false);
        assert_eq!(p.unwrap().targets[0].device, DeviceId(1));
    }

    #[test]
    fn off_when_asked_or_without_devices() {
        let (p, note) = plan(0, &[dev(0)], None, None, false);
        assert!(p.is_none() && note.contains("=0"), "{note}");
        let (p, note) = plan(10, &[], None, None, false);
        assert!(p.is_none() && note.contains("no CUDA device"), "{note}");
    }

    #[test]
    fn every_series_is_fed_by_exactly_one_probe_or_the_ceiling() {
        let mut fed: Vec<u8> = PROBES.iter().flat_map(|p| p.series().iter().copied()).collect();
        fed.push(SM_CLOCK_MAX);
        fed.push(XID);
        fed.sort();
        assert_eq!(fed, (0..SERIES.len() as u8).collect::<Vec<_>>());
    }
}
