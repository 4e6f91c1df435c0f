//! The per-file header and trailer: who recorded what, where and when.
//!
//! Both are JSON inside their chunks, so that new optional fields can be
//! added without a format version bump (unknown fields are ignored, missing
//! ones take their defaults).

use crate::units::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Simultaneous readings of the clocks a trace's times can be mapped to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockPair {
    /// `CLOCK_REALTIME`, ns since the Unix epoch.
    pub realtime_ns: u64,
    /// `CLOCK_MONOTONIC`, ns since boot (not comparable across hosts).
    pub monotonic_ns: u64,
    /// The CUPTI timestamp (`cuptiGetTimestamp`) read between the two, when
    /// CUPTI was available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cupti_ns: Option<u64>,
}

impl ClockPair {
    /// Read `CLOCK_REALTIME` and `CLOCK_MONOTONIC` now.
    pub fn now() -> ClockPair {
        ClockPair {
            realtime_ns: clock_ns(libc::CLOCK_REALTIME),
            monotonic_ns: clock_ns(libc::CLOCK_MONOTONIC),
            cupti_ns: None,
        }
    }
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: `ts` is a valid, writable timespec; clock_gettime writes only it.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// Which clock the event timestamps of a trace are in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TimeDomain {
    /// CUPTI's timestamps (on Linux, close to `CLOCK_REALTIME`; map with
    /// `ClockPair::cupti_ns`).
    #[default]
    Cupti,
    /// `CLOCK_REALTIME` ns.
    Realtime,
    /// `CLOCK_MONOTONIC` ns.
    Monotonic,
}

/// Where a rank number came from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankInfo {
    /// Global rank, if the launcher set one.
    pub rank: Option<Rank>,
    /// Rank within the node.
    pub local_rank: Option<u32>,
    /// Number of ranks in the job.
    pub world_size: Option<u32>,
    /// The environment variable the rank was read from (e.g. `RANK`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl RankInfo {
    /// Read rank, local rank and world size the way torchrun, Slurm, Open MPI
    /// and MPICH/PMI set them, first match wins. `get` is usually
    /// `|k| std::env::var(k).ok()`; values that are not small non-negative
    /// integers are ignored (hostile or garbled environments).
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> RankInfo {
        let num = |k: &str| get(k).and_then(|v| v.trim().parse::<u32>().ok());
        let first = |keys: &[&'static str]| keys.iter().find_map(|k| num(k).map(|v| (v, *k)));
        let rank = first(&["RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"]);
        let local = first(&["LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"]);
        let world = first(&["WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]);
        RankInfo {
            rank: rank.map(|(v, _)| Rank(v)),
            local_rank: local.map(|(v, _)| v),
            world_size: world.map(|(v, _)| v),
            source: rank.map(|(_, k)| k.to_string()),
        }
    }
}

/// A GPU the process saw.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// CUDA ordinal in this process (matches event `device` fields).
    pub ordinal: DeviceId,
    /// `GPU-xxxxxxxx-...` UUID (identifies the physical GPU across processes).
    pub uuid: String,
    /// Marketing name, e.g. `NVIDIA H200`.
    pub name: String,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Global memory, bytes.
    pub memory_bytes: u64,
    /// Compute capability `(major, minor)`.
    #[serde(default)]
    pub compute_capability: (u32, u32),
    /// PCI bus id, e.g. `0000:1b:00.0` (empty if unknown).
    #[serde(default)]
    pub pci_bus_id: String,
}

/// CUDA stack versions, as the CUDA/CUPTI version integers (e.g. 13000).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CudaVersions {
    /// `cuDriverGetVersion`.
    pub driver: Option<u32>,
    /// `cudaRuntimeGetVersion`.
    pub runtime: Option<u32>,
    /// `cuptiGetVersion` (the CUPTI API version number).
    pub cupti: Option<u32>,
}

/// What produced a trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Producer {
    /// The capture agent inside a real process.
    #[default]
    Agent,
    /// `gputrace demo` / the synthetic job generator: not a real GPU.
    Synthetic,
    /// Converted from another format (e.g. a Kineto trace).
    Import,
    /// `gputrace run` itself (format 1.6): samples the launcher takes outside
    /// the traced processes, such as an inference server's own metrics
    /// (`serving.*` counter series). Such a file has no GPU events and no rank.
    Launcher,
}

/// The file header: everything known when recording starts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    /// What wrote this file.
    pub producer: Producer,
    /// `gputrace` version that wrote it.
    pub tool_version: String,
    /// Host name.
    pub hostname: String,
    /// Process id.
    pub pid: u32,
    /// Rank, local rank, world size.
    pub rank: RankInfo,
    /// Command line (argv).
    pub command: Vec<String>,
    /// Clock readings at the start of recording.
    pub start_clock: ClockPair,
    /// The clock event timestamps are in.
    pub time_domain: TimeDomain,
    /// CUDA driver, runtime and CUPTI versions.
    pub cuda: CudaVersions,
    /// GPUs.
    pub devices: Vec<DeviceInfo>,
    /// Free-form facts (e.g. the source file of an import, the synthetic
    /// scenario). Keys are stable names.
    #[serde(default)]
    pub extra: BTreeMap<String, String>,
}

impl Header {
    /// Shift from this header's time domain to `CLOCK_REALTIME`, ns: add
    /// it to an event time to get wall-clock time. 0 when the domain is
    /// realtime or a clock reading is missing (CUPTI time without a CUPTI
    /// reading is taken as realtime: it is on Linux, up to drift).
    pub fn realtime_shift(&self) -> i64 {
        let c = &self.start_clock;
        let reading = match self.time_domain {
            TimeDomain::Realtime => return 0,
            TimeDomain::Monotonic => c.monotonic_ns,
            TimeDomain::Cupti => match c.cupti_ns {
                Some(v) => v,
                None => return 0,
            },
        };
        if c.realtime_ns == 0 || reading == 0 {
            return 0;
        }
        (c.realtime_ns as i128 - reading as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }
}

/// Written last by a writer that finished cleanly. A file without one was
/// cut off (killed process, full disk) and is still readable up to its last
/// whole chunk.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trailer {
    /// Clock readings when recording stopped (for drift estimation).
    pub end_clock: ClockPair,
    /// Events written, by kind name.
    pub events: BTreeMap<String, u64>,
    /// Total lost records written as loss events, by source name.
    pub losses: BTreeMap<String, u64>,
    /// Free-form facts added at the end.
    #[serde(default)]
    pub extra: BTreeMap<String, String>,
}

impl Trailer {
    /// Prefix of the [`Trailer::extra`] entries that hold CUPTI's own
    /// costs, one per overhead kind: `cupti.overhead.<kind>` =
    /// `"<records> records, <ns> ns"`.
    pub const OVERHEAD_PREFIX: &'static str = "cupti.overhead.";

    /// Record `records` CUPTI overhead records of `kind` lasting `ns` in all.
    pub fn set_overhead(&mut self, kind: &str, records: u64, ns: u64) {
        self.extra
            .insert(format!("{}{kind}", Self::OVERHEAD_PREFIX), format!("{records} records, {ns} ns"));
    }

    /// `(kind, records, ns)` of each overhead entry; entries that do not
    /// parse are left out.
    pub fn overheads(&self) -> impl Iterator<Item = (&str, u64, u64)> + '_ {
        self.extra.iter().filter_map(|(k, v)| {
            let kind = k.strip_prefix(Self::OVERHEAD_PREFIX)?;
            let (records, ns) = v.split_once(" records, ")?;
            Some((kind, records.parse().ok()?, ns.strip_suffix(" ns")?.parse().ok()?))
        })
    }
}

/// One NCCL (or RCCL) communicator this process belonged to, as the NCCL
/// profiler plugin reported it at `ncclCommInitRank` time. Collectives refer
/// to it by [`Communicator::id`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Communicator {
    /// NCCL's communicator id/hash: the same on every rank of the
    /// communicator (what [`crate::Collective::comm`] holds).
    pub id: CommId,
    /// The communicator's name (NCCL ≥ 2.27; empty when unknown).
    #[serde(default)]
    pub name: String,
    /// This process's rank in it ([`crate::RANK_UNKNOWN`] when NCCL did not say).
    pub rank: u32,
    /// Number of ranks.
    pub nranks: u32,
    /// Number of nodes it spans (0 = unknown).
    #[serde(default)]
    pub nodes: u32,
    /// Profiler plugin interface NCCL used (1..6; 0 = not from the plugin).
    #[serde(default)]
    pub plugin_version: u32,
    /// When it was created, in the trace's time domain (0 = unknown).
    #[serde(default)]
    pub created: Nanos,
}

/// A stretch of time during which a duty-cycled capture recorded GPU
/// activity (format 1.3). A trace with capture windows was traced only
/// inside them: outside, nothing was recorded, and a reader must not read
/// the absence of events there as idle time. A trace without any was
/// traced the whole time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureWindow {
    /// When capture was turned on, in the trace's time domain.
    pub start: Nanos,
    /// When it was turned off (after the flush that delivered its records).
    /// In the file, [`CaptureWindow::OPEN`] (0) marks the record written when
    /// the window opened; [`crate::TraceFile::capture_windows`] resolves it.
    pub end: Nanos,
}

impl CaptureWindow {
    /// `end` of a window that was open when its record was written.
    pub const OPEN: Nanos = Nanos(0);

    /// The record a writer writes when a window opens at `start`.
    pub fn opened(start: Nanos) -> CaptureWindow {
        CaptureWindow { start, end: Self::OPEN }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_from_torchrun_env() {
        let env = |k: &str| match k {
            "RANK" => Some("7".into()),
            "LOCAL_RANK" => Some("3".into()),
            "WORLD_SIZE" => Some("16".into()),
            "SLURM_PROCID" => Some("99".into()),
            _ => None,
        };
        let r = RankInfo::from_env(env);
        assert_eq!(r.rank, Some(Rank(7)));
        assert_eq!(r.local_rank, Some(3));
        assert_eq!(r.world_size, Some(16));
        assert_eq!(r.source.as_deref(), Some("RANK"));
    }

    #[test]
    fn rank_from_slurm_and_hostile_values() {
        let env = |k: &str| match k {
            "RANK" => Some("-1; rm -rf /".into()),
            "SLURM_PROCID" => Some("12".into()),
            "SLURM_NTASKS" => Some("99999999999999".into()),
            _ => None,
        };
        let r = RankInfo::from_env(env);
        assert_eq!(r.rank, Some(Rank(12)));
        assert_eq!(r.source.as_deref(), Some("SLURM_PROCID"));
        assert_eq!(r.world_size, None);
        assert_eq!(RankInfo::from_env(|_| None), RankInfo::default());
    }

    #[test]
    fn clocks_are_read() {
        let c = ClockPair::now();
        assert!(c.realtime_ns > 1_600_000_000_000_000_000);
        assert!(c.monotonic_ns > 0);
    }
}
