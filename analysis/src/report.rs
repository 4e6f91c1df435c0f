//! The report: plain data, serialized as the `gputrace report --json` document.
//!
//! All times are integer nanoseconds in the trace's own clock (see the
//! header's `time_domain`); `*_ns` fields that are durations obey the
//! identities stated on each struct. `docs/metrics.md` defines every number.

use crate::peaks::Precision;
use crate::rule::{FindingRule, Values};
use gputrace_classify::Category;
use gputrace_format::{LossSource, Trailer};
use serde::Serialize;
use std::collections::BTreeMap;

/// Version of the JSON document's schema; bumped when a field changes meaning or is removed.
pub const SCHEMA_VERSION: u32 = 1;

/// Everything `gputrace report` shows, for one or more ranks.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// One entry per trace file, in rank order.
    pub ranks: Vec<RankReport>,
    /// Sums over every device of every rank.
    pub totals: Totals,
    /// Kernels by total GPU time, over all ranks (at most `Options::top_kernels`).
    pub top_kernels: Vec<KernelStat>,
    /// Copies and memsets by kind, over all ranks.
    pub copies: Vec<CopyStat>,
    /// Diagnoses with evidence and a next step, most important first.
    pub findings: Vec<Finding>,
    /// Idle and exposed time priced at `Options::gpu_hour_cost` (absent when no price was given).
    pub cost: Option<Cost>,
    /// True when any trace lost data (loss records, a missing trailer, a damaged tail):
    /// the numbers then describe what was recorded, not everything that ran.
    pub lossy: bool,
    /// Lower-cased substrings that made a kernel communication.
    pub communication_patterns: Vec<String>,
    /// NCCL communicators named by any trace (its communicator table or its collectives), by id.
    pub communicators: Vec<CommunicatorStat>,
    /// NCCL collectives per (communicator, operation) over all ranks, most GPU time first
    /// (empty without collective records).
    pub collectives: Vec<CollectiveStat>,
    /// The HTA-compatible mode that produced this report ([`crate::Options::hta`]); null for
    /// gputrace's own definitions. When set, span, compute and idle are Holistic Trace
    /// Analysis' `kernel_time`, `compute_time` and `idle_time`, not gputrace's definitions.
    pub hta_compat: Option<crate::HtaCompat>,
    /// The job's steps, throughput, GPU-Util, MFU, cost and failed GPU-hours (from the ranks').
    pub productive: Productive,
    /// With `Options::explain_classes`: every classification rule, in the order they are
    /// tried, with the kernels it classified, then a row for kernels no rule matched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classification: Option<Vec<RuleUse>>,
    /// The serving section, one entry per inference server scraped by `gputrace run`
    /// (absent when the job served nothing; docs/serving.md).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub serving: Vec<crate::serving::ServingReport>,
}

/// How much GPU time one classification rule classified (over all ranks).
#[derive(Clone, Debug, Serialize)]
pub struct RuleUse {
    /// The rule's library (`null` for the row of kernels no rule matched).
    pub library: Option<String>,
    /// Its pattern (a lower-case substring of kernel names).
    pub pattern: Option<String>,
    /// What the rule makes a kernel: `communication` or `compute`.
    pub category: Category,
    /// The rule's fixed operation, if it has one.
    pub operation: Option<String>,
    /// Why the rule exists (a project and file).
    pub source: String,
    /// `built-in`, `--comm-pattern`, or `FILE:LINE`.
    pub origin: String,
    /// Kernel executions it classified.
    pub kernels: u64,
    /// Distinct kernel names it classified.
    pub kernel_names: u64,
    /// Sum of their durations (not a union: overlapping kernels count twice).
    pub total_ns: u64,
    /// The name with the most GPU time among them.
    pub example: Option<String>,
}

/// One trace file (one process, usually one rank).
#[derive(Clone, Debug, Serialize)]
pub struct RankReport {
    /// Rank from the header, or the file's position among the inputs when the header has none.
    pub rank: u32,
    /// Whether `rank` came from the header.
    pub rank_from_header: bool,
    /// The file.
    pub file: String,
    /// `agent`, `synthetic` or `import`.
    pub producer: String,
    /// Host name.
    pub hostname: String,
    /// Rank within the node, from the header (null when the launcher set none).
    pub local_rank: Option<u32>,
    /// Process id, from the header.
    pub pid: u32,
    /// Devices with activity or listed in the header, by ordinal.
    pub devices: Vec<DeviceReport>,
    /// Data the trace says it lost.
    pub losses: Losses,
    /// Events in the file.
    pub events: u64,
    /// What HTA-compatible mode left out of this trace (null without it).
    pub hta: Option<HtaRank>,
    /// The profiler's own costs that CUPTI recorded (OVERHEAD records,
    /// summed by kind in the agent's trailer: `instrumentation`,
    /// `buffer_flush`, `resource`, ...). Empty when none were recorded.
    pub profiler_overhead: BTreeMap<String, OverheadTotal>,
    /// The capture levers in effect and what they gave up (graph-level
    /// graphs, API calls switched off, hardware timestamps); absent when the
    /// trace notes none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capture_levers: Option<crate::CaptureLevers>,
    /// Steps, throughput, GPU-Util, MFU, cost and outcome of this process
    /// (`docs/metrics.md`, "Productive work").
    pub productive: Productive,
    /// Set when the trace is duty-cycled (`gputrace run --duty`): it was
    /// traced only inside its capture windows, and every device's span and
    /// idle count that time only. Null for a trace captured the whole time.
    pub duty_cycle: Option<DutyCycle>,
    /// The trace's host samples joined to its idle time (absent without
    /// host samples). See docs/host.md.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<crate::host::HostSummary>,
}

/// Which time a duty-cycled trace covers (`docs/metrics.md`, "Duty-cycled traces").
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct DutyCycle {
    /// The schedule, from the header's `capture.duty` (e.g. `2s/60s`; empty if absent).
    pub schedule: String,
    /// Capture windows in the trace.
    pub windows: u64,
    /// Time inside them.
    pub traced_ns: u64,
    /// Wall time the trace covers: the process window (or, without one, the
    /// first window's start to the last one's end).
    pub wall_ns: u64,
    /// `traced_ns / wall_ns`.
    pub duty_ratio: f64,
}

/// One kind of CUPTI overhead in a trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OverheadTotal {
    /// OVERHEAD records of this kind.
    pub records: u64,
    /// Their summed duration.
    pub ns: u64,
}

impl OverheadTotal {
    /// From the trailer's overhead entries ([`Trailer::overheads`]).
    pub fn from_trailer(trailer: &Trailer) -> BTreeMap<String, OverheadTotal> {
        trailer
            .overheads()
            .map(|(kind, records, ns)| (kind.to_string(), OverheadTotal { records, ns }))
            .collect()
    }
}

/// What HTA-compatible mode ([`crate::HtaCompat`]) did to one trace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HtaRank {
    /// HTA's GPU event filter applies: the trace has two or more distinct `ProfilerStep#N`
    /// names (and the mode drops the last step or unlinked events).
    pub step_filter: bool,
    /// Number of the last step (the `ProfilerStep` range that starts last), when the filter applies.
    pub last_step: Option<u64>,
    /// Its start: GPU work launched at or after it is the last step's.
    pub last_step_start_ns: Option<u64>,
    /// GPU events left out as part of the last step.
    pub dropped_last_step_events: u64,
    /// GPU events left out because no CPU call in the trace has their correlation id.
    pub dropped_unlinked_events: u64,
    /// Events that HTA's inward rounding leaves with a negative duration (−1 µs: sub-µs work
    /// that crosses no µs boundary). HTA subtracts 1 µs of busy time for each that overlaps no
    /// other work (and fails its own `non_compute_time >= 0` check when that adds up); here they
    /// cover no time, like zero-length work.
    pub negative_after_rounding: u64,
}

/// Where one GPU's time went.
///
/// Identity: `compute_ns + exposed_communication_ns + exposed_transfer_ns + idle_ns == span_ns`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DeviceReport {
    /// CUDA ordinal in the process.
    pub device: u32,
    /// Marketing name from the header (empty if not recorded).
    pub name: String,
    /// Start of the first kernel, copy or memset (absent for a device without any).
    pub first_ns: Option<u64>,
    /// End of the last one.
    pub last_ns: Option<u64>,
    /// Where the span's time went (flattened: its fields are this device's).
    #[serde(flatten)]
    pub time: TimeSplit,
    /// The seven non-idle overlap cells.
    pub overlap: Overlap,
    /// Causes of `idle_ns` (they sum to it).
    pub idle_causes: IdleCauses,
    /// The process's lifetime around the span (gputrace captures only).
    pub process_window: Option<ProcessWindow>,
    /// Kernels executed.
    pub kernels: u64,
    /// Kernels shorter than `Options::short_kernel_ns`.
    pub short_kernels: u64,
    /// Summed duration of those kernels.
    pub short_kernel_ns: u64,
    /// Idle that ended at one of those kernels: the GPU ran dry before a short kernel
    /// (what launch overhead costs a launch-bound loop).
    pub idle_before_short_kernels_ns: u64,
    /// Copies executed (peer included).
    pub copies: u64,
    /// Memsets executed.
    pub memsets: u64,
    /// The longest idle gaps, longest first (at most `Options::top_gaps`).
    pub longest_gaps: Vec<GapReport>,
    /// Per-step breakdown: one entry per `ProfilerStep#N` range or, without them, per
    /// inferred step.
    pub steps: Vec<StepReport>,
    /// When the steps were inferred from the repeating kernel pattern: the kernel whose
    /// runs start each step (its windows are GPU time, numbered from 0).
    pub steps_inferred_from: Option<String>,
    /// What the GPU's own counters (NVML, sampled beside the timeline) say over the span;
    /// null when the trace has none for this device.
    pub hardware: Option<crate::hardware::HardwareReport>,
    /// GPU activity over time: the span in equal bins, each split like the span (absent
    /// for a device without activity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub activity: Option<crate::activity::Activity>,
}

/// Where GPU time went: the fields a device and the totals (their sum) share.
///
/// Identity: `compute_ns + exposed_communication_ns + exposed_transfer_ns + idle_ns == span_ns`.
/// [`DeviceReport::time`] and [`Totals::time`] hold it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TimeSplit {
    /// `last_ns - first_ns` of a device (0 without activity).
    pub span_ns: u64,
    /// |∪ compute kernels|.
    pub compute_ns: u64,
    /// |∪ communication kernels and peer copies|.
    pub communication_ns: u64,
    /// |∪ copies and memsets (not peer)|.
    pub transfer_ns: u64,
    /// Communication not under compute.
    pub exposed_communication_ns: u64,
    /// Transfer under neither compute nor communication.
    pub exposed_transfer_ns: u64,
    /// `exposed_communication_ns` split by the operation of the collective linked to the
    /// communication work that was exposed (`unattributed`: a communication kernel without
    /// a linked collective; `peer-copy`: a peer copy without one; `Recv+Send`: a kernel that
    /// ran several operations). Where several communication intervals overlap, the one that
    /// started first owns the time. The values sum to `exposed_communication_ns`.
    pub exposed_communication_by_op_ns: BTreeMap<String, u64>,
    /// `exposed_communication_ns` split by library (the classification rule that made the
    /// kernel communication; `peer copy` for peer copies no collective is linked to;
    /// `NCCL` for copies an NCCL collective ran), then by canonical operation (the linked
    /// collective's, else the rule's, else read from the kernel name; `other` when the
    /// name shows none). Same ownership rule as `exposed_communication_by_op_ns`; the
    /// values sum to `exposed_communication_ns`.
    pub exposed_communication_by_library_ns: BTreeMap<String, BTreeMap<String, u64>>,
    /// Nothing running on the device within the span.
    pub idle_ns: u64,
}

impl TimeSplit {
    /// Add `o`'s times (and its per-operation and per-library splits) to these.
    pub(crate) fn add(&mut self, o: &TimeSplit) {
        self.span_ns += o.span_ns;
        self.compute_ns += o.compute_ns;
        self.communication_ns += o.communication_ns;
        self.transfer_ns += o.transfer_ns;
        self.exposed_communication_ns += o.exposed_communication_ns;
        self.exposed_transfer_ns += o.exposed_transfer_ns;
        for (op, ns) in &o.exposed_communication_by_op_ns {
            *self.exposed_communication_by_op_ns.entry(op.clone()).or_insert(0) += ns;
        }
        for (library, ops) in &o.exposed_communication_by_library_ns {
            let t = self.exposed_communication_by_library_ns.entry(library.clone()).or_default();
            for (op, ns) in ops {
                *t.entry(op.clone()).or_insert(0) += ns;
            }
        }
        self.idle_ns += o.idle_ns;
    }
}

/// Time in each combination of overlapping categories; with `idle_ns` they tile the span.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Overlap {
    /// Compute alone.
    pub compute_only_ns: u64,
    /// Compute and communication.
    pub compute_communication_ns: u64,
    /// Compute and transfer.
    pub compute_transfer_ns: u64,
    /// All three.
    pub compute_communication_transfer_ns: u64,
    /// Communication alone.
    pub communication_only_ns: u64,
    /// Communication and transfer, no compute.
    pub communication_transfer_ns: u64,
    /// Transfer alone.
    pub transfer_only_ns: u64,
    /// Communication hidden under compute (`communication_ns - exposed_communication_ns`).
    pub communication_hidden_ns: u64,
    /// Transfer hidden under compute or communication (`transfer_ns - exposed_transfer_ns`).
    pub transfer_hidden_ns: u64,
}

/// Why the device was idle. Invariant: the four fields sum to the device's `idle_ns`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct IdleCauses {
    /// The CPU had not yet started launching the work that ended the gap, and was not
    /// blocked in a synchronization (input pipeline, Python, framework overhead).
    pub host_bound_ns: u64,
    /// The work that ended the gap had already been launched: launch latency or a
    /// dependency (event wait, another stream) held it.
    pub launch_latency_ns: u64,
    /// Before the launch, the CPU was blocked in a synchronization call.
    pub synchronization_ns: u64,
    /// The launching API call is not in the trace (API tracing off, imported trace).
    pub unattributed_ns: u64,
    /// Number of idle gaps.
    pub gaps: u64,
}

impl IdleCauses {
    /// The sum of the four causes.
    pub fn total_ns(&self) -> u64 {
        self.host_bound_ns + self.launch_latency_ns + self.synchronization_ns + self.unattributed_ns
    }

    /// Add `o`'s causes and gaps to these.
    pub fn add(&mut self, o: &IdleCauses) {
        self.host_bound_ns += o.host_bound_ns;
        self.launch_latency_ns += o.launch_latency_ns;
        self.synchronization_ns += o.synchronization_ns;
        self.unattributed_ns += o.unattributed_ns;
        self.gaps += o.gaps;
    }

    /// The cause with the most time (ties: host-bound, latency, sync, unattributed).
    pub fn dominant(&self) -> IdleCause {
        let c = [
            (IdleCause::HostBound, self.host_bound_ns),
            (IdleCause::LaunchLatency, self.launch_latency_ns),
            (IdleCause::Synchronization, self.synchronization_ns),
            (IdleCause::Unattributed, self.unattributed_ns),
        ];
        c.iter().fold(c[0], |best, x| if x.1 > best.1 { *x } else { best }).0
    }
}

/// One cause of idle time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IdleCause {
    /// See [`IdleCauses::host_bound_ns`].
    HostBound,
    /// See [`IdleCauses::launch_latency_ns`].
    LaunchLatency,
    /// See [`IdleCauses::synchronization_ns`].
    Synchronization,
    /// See [`IdleCauses::unattributed_ns`].
    Unattributed,
}

impl IdleCause {
    /// Name used in text output.
    pub fn name(self) -> &'static str {
        match self {
            IdleCause::HostBound => "host-bound",
            IdleCause::LaunchLatency => "launch/dependency latency",
            IdleCause::Synchronization => "synchronization",
            IdleCause::Unattributed => "unattributed",
        }
    }
}

/// The process's lifetime as recorded (header start clock to the trailer's end clock or
/// the last event), and the device idle before its first and after its last activity.
///
/// Identity: `startup_idle_ns + span_ns + teardown_idle_ns == window_ns`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProcessWindow {
    /// Start of recording (CUDA initialization for the agent).
    pub start_ns: u64,
    /// End of recording.
    pub end_ns: u64,
    /// `end_ns - start_ns`.
    pub window_ns: u64,
    /// From `start_ns` to the device's first activity (the whole window without activity).
    pub startup_idle_ns: u64,
    /// From the device's last activity to `end_ns`.
    pub teardown_idle_ns: u64,
    /// The traced part of the window: `window_ns`, or in a duty-cycled
    /// trace its time inside the capture windows. Startup and teardown idle
    /// count traced time only, so startup + span + teardown = `traced_ns`.
    pub traced_ns: u64,
}

/// One idle gap on a device.
#[derive(Clone, Debug, Serialize)]
pub struct GapReport {
    /// Last activity before the gap ended here.
    pub start_ns: u64,
    /// The next activity started here.
    pub end_ns: u64,
    /// `end_ns - start_ns`.
    pub duration_ns: u64,
    /// The cause with the most of this gap's time.
    pub cause: IdleCause,
    /// This gap split by cause (sums to `duration_ns`).
    pub causes: IdleCauses,
    /// The kernel, copy or memset that ended the gap.
    pub next_work: String,
    /// When the CPU entered the call that launched it (absent if not in the trace).
    pub launched_ns: Option<u64>,
    /// What the CPU was doing during the gap: API calls and ranges by time overlapping it,
    /// most first (at most three).
    pub cpu_activity: Vec<CpuActivity>,
    /// Device-to-host bytes copied in the second before the gap (checkpoint signature).
    pub d2h_bytes_before: u64,
    /// `ProfilerStep#N` whose window holds most of the gap.
    pub step: Option<u64>,
    /// What the host was doing during the gap, from host samples
    /// (`gputrace run`'s sampler; absent without them). See docs/host.md.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<crate::host::HostView>,
}

/// A CPU-side name and how much of a gap it covered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CpuActivity {
    /// API function or range name.
    pub name: String,
    /// Time it overlapped the gap.
    pub overlap_ns: u64,
}

/// One `ProfilerStep#N` range (CPU time window), and the device's time within it.
///
/// Identity: `compute_ns + exposed_communication_ns + exposed_transfer_ns + idle_ns == duration_ns`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct StepReport {
    /// N of `ProfilerStep#N` (step marks and inferred steps: numbered from 0).
    pub step: u64,
    /// Start of the step's GPU window on this device ([`crate::steps`]): the end of the
    /// previous step's window, or the first step's first work. Within the device's span.
    pub start_ns: u64,
    /// End of its GPU window: the end of the last work launched in the step.
    pub end_ns: u64,
    /// `end_ns - start_ns`.
    pub duration_ns: u64,
    /// The step's CPU window: the `ProfilerStep` range, or from the previous step mark to
    /// its own (the same as the GPU window for inferred steps).
    pub cpu_start_ns: u64,
    /// End of the CPU window.
    pub cpu_end_ns: u64,
    /// Compute within the window.
    pub compute_ns: u64,
    /// Communication within the window.
    pub communication_ns: u64,
    /// Transfer within the window.
    pub transfer_ns: u64,
    /// Exposed communication within the window.
    pub exposed_communication_ns: u64,
    /// Exposed transfer within the window.
    pub exposed_transfer_ns: u64,
    /// Nothing running on the device within the window.
    pub idle_ns: u64,
    /// The part of `idle_ns` inside the device's gaps, by cause (idle before the device's
    /// first or after its last activity is not in a gap).
    pub idle_causes: IdleCauses,
    /// For a slow step (at least 1.5 times the device's median step), what the host did
    /// during the step's idle time, from host samples (absent otherwise). See docs/host.md.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<crate::host::HostView>,
}

/// Sums over every device of every rank.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Totals {
    /// Ranks (files).
    pub ranks: u64,
    /// Devices with activity.
    pub active_devices: u64,
    /// The devices' time splits, summed (flattened: its fields are the sums).
    #[serde(flatten)]
    pub time: TimeSplit,
    /// Sum of idle causes.
    pub idle_causes: IdleCauses,
    /// Sum of startup idle (gputrace captures).
    pub startup_idle_ns: u64,
    /// Sum of teardown idle.
    pub teardown_idle_ns: u64,
    /// Kernels.
    pub kernels: u64,
    /// Kernels shorter than `Options::short_kernel_ns`.
    pub short_kernels: u64,
}

/// One kernel name's executions over all ranks.
#[derive(Clone, Debug, Serialize)]
pub struct KernelStat {
    /// Name as recorded.
    pub name: String,
    /// Compute or communication.
    pub category: Category,
    /// Executions.
    pub count: u64,
    /// Summed duration (not a union: concurrent executions both count).
    pub total_ns: u64,
    /// `total_ns / count`.
    pub mean_ns: u64,
    /// `total_ns` over the summed duration of all kernels, 0..1.
    pub share: f64,
}

/// Copies (or memsets) of one kind over all ranks.
#[derive(Clone, Debug, Serialize)]
pub struct CopyStat {
    /// `HtoD`, `DtoH`, `DtoD`, `PtoP`, ... or `memset`.
    pub kind: String,
    /// Host side is pageable memory (staged by the driver, synchronous for the host).
    pub pageable: bool,
    /// Operations.
    pub count: u64,
    /// Bytes.
    pub bytes: u64,
    /// Summed duration.
    pub total_ns: u64,
    /// `bytes / total_ns`, GB/s (0 when no time).
    pub achieved_gbps: f64,
}

/// One NCCL communicator over all ranks.
#[derive(Clone, Debug, Serialize)]
pub struct CommunicatorStat {
    /// NCCL's communicator hash, 16 hex digits (as the exporters write it).
    pub id: String,
    /// Its name (NCCL ≥ 2.27; empty when unknown).
    pub name: String,
    /// Number of ranks (from the communicator table, else from its collectives).
    pub nranks: u32,
    /// Nodes it spans (0 = unknown).
    pub nodes: u32,
    /// Ranks (of the report) whose trace names it: in its communicator table or in a collective.
    pub ranks: Vec<u32>,
    /// Collectives recorded on it, summed over ranks.
    pub collectives: u64,
}

/// One (communicator, operation) over all ranks. Each rank records its own side of every
/// collective, so counts, bytes and time are sums over ranks.
///
/// Bandwidths follow NCCL-tests: `algbw_gbps = linked_bytes × size_multiplier / time_ns`,
/// `busbw_gbps = algbw_gbps × bus_factor`.
#[derive(Clone, Debug, Serialize)]
pub struct CollectiveStat {
    /// The communicator's id, 16 hex digits.
    pub communicator: String,
    /// The communicator's name (empty when unknown).
    pub communicator_name: String,
    /// NCCL's operation name: `AllReduce`, `AllGather`, `ReduceScatter`, `Broadcast`,
    /// `Reduce`, `Send`, `Recv`, `AlltoAll`, ...
    pub op: String,
    /// Ranks in the communicator (as the collectives report it).
    pub nranks: u32,
    /// Collectives, summed over ranks.
    pub count: u64,
    /// Those linked to the kernel that ran them (correlation ≠ 0): only they have GPU time.
    pub linked: u64,
    /// Distinct kernels (correlation ids per device and rank) that ran the linked ones.
    pub kernels: u64,
    /// Bytes per rank as NCCL reports them (count × element size), summed over all collectives.
    pub bytes: u64,
    /// The part of `bytes` of the linked collectives (the bandwidths use it).
    pub linked_bytes: u64,
    /// GPU time of the linked collectives: the summed duration of the kernels that ran them,
    /// each kernel once for this operation (grouped collectives share one kernel).
    pub time_ns: u64,
    /// `time_ns / linked`.
    pub mean_ns: u64,
    /// Algorithm (`RING`, `TREE`, `NVLS`, `CE`, ... or `unknown`) → collectives.
    pub algorithms: BTreeMap<String, u64>,
    /// Protocol (`LL`, `LL128`, `Simple` or `unknown`) → collectives.
    pub protocols: BTreeMap<String, u64>,
    /// NCCL-tests' data size over the bytes NCCL reports: `nranks` for AllGather, ReduceScatter,
    /// AlltoAll, Gather, Scatter; 1 otherwise.
    pub size_multiplier: u64,
    /// Bus bandwidth over algorithm bandwidth (NCCL-tests): AllReduce `2(n-1)/n`; AllGather,
    /// ReduceScatter, AlltoAll, Gather, Scatter `(n-1)/n`; Broadcast, Reduce, Send, Recv 1;
    /// absent for other operations.
    pub bus_factor: Option<f64>,
    /// Algorithm bandwidth, GB/s (absent without GPU time).
    pub algbw_gbps: Option<f64>,
    /// Bus bandwidth, GB/s (absent without GPU time or without a bus factor).
    pub busbw_gbps: Option<f64>,
}

/// Data a trace says it lost.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Losses {
    /// Records lost, by source, from the trace's loss events (source `import` excluded).
    pub lost_records: BTreeMap<String, u64>,
    /// Input entries an importer had no place for (loss events with source `import`,
    /// e.g. CPU operators of a Kineto trace), by the importer's description. They are
    /// not GPU timeline data and do not make the report lossy.
    pub not_imported: BTreeMap<String, u64>,
    /// Counter series that stopped early because their source failed (loss events with
    /// source `counter-failed`), by the agent's description (`gpu0 nvml.pcie_tx_kbps:
    /// nvmlDeviceGetPcieThroughput returned 3 (Not Supported)`). The timeline is whole:
    /// they do not make the report lossy.
    pub counter_series_stopped: BTreeMap<String, u64>,
    /// Counter samples lost to a hardware sampler's buffer overflow (loss events with
    /// source `counter-overflow`, CUPTI PM sampling), by the agent's description. The
    /// timeline is whole: they do not make the report lossy.
    pub counter_samples_lost: BTreeMap<String, u64>,
    /// The trailer's loss totals (absent without a trailer).
    pub trailer_losses: BTreeMap<String, u64>,
    /// The writer did not finish: the end of the run is missing.
    pub trailer_missing: bool,
    /// Why reading stopped early, if it did.
    pub damage: Option<String>,
    /// Bytes that could not be read.
    pub damaged_bytes: u64,
    /// Host samples the run record of this trace's `gputrace run` said were being
    /// taken and that were never written: its launcher ended before writing them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_samples_unwritten: Option<HostSamplesUnwritten>,
}

/// Host samples a trace was owed and never got ([`Losses::host_samples_unwritten`]).
#[derive(Clone, Debug, Serialize)]
pub struct HostSamplesUnwritten {
    /// The sampling rate the launcher had on.
    pub hz: u32,
    /// The run record that says so.
    pub run_record: String,
    /// The loss in words.
    pub what: String,
}

impl HostSamplesUnwritten {
    /// The loss of a trace with no host samples, whose run `records` say were taken at
    /// some rate and not written; `None` when no record says so.
    pub fn of(header: &gputrace_format::Header, has_samples: bool, records: &[(String, gputrace_format::RunRecord)]) -> Option<Self> {
        if has_samples {
            return None;
        }
        records.iter().find_map(|(file, r)| {
            r.unwritten_host_samples(header).map(|hz| HostSamplesUnwritten {
                hz,
                run_record: file.clone(),
                what: format!("host samples expected ({hz} Hz) but none written: the launcher ended before writing them"),
            })
        })
    }
}

impl Losses {
    /// Whether anything was lost (entries an importer skipped do not count).
    pub fn any(&self) -> bool {
        self.trailer_missing
            || self.damage.is_some()
            || self.host_samples_unwritten.is_some()
            || self.lost_records.values().any(|&n| n > 0)
            || self.trailer_losses.iter().any(|(source, &n)| {
                n > 0
                    && source != LossSource::IMPORT.name()
                    && source != LossSource::COUNTER_FAILED.name()
                    && source != LossSource::COUNTER_OVERFLOW.name()
            })
    }
}

/// How urgent a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Severity {
    /// Costs a large share of GPU time.
    High,
    /// Worth a look.
    Medium,
    /// A small share of GPU time (findings about time: under 5% of it).
    Low,
    /// For information.
    Info,
}

/// A diagnosis with its evidence and the suggested next step.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    /// The rule that fired; serialized as its stable name, e.g. `host-bound-idle`.
    pub rule: FindingRule,
    /// How urgent.
    pub severity: Severity,
    /// One-line diagnosis.
    pub title: String,
    /// The numbers behind it, in words.
    pub evidence: String,
    /// What to investigate or change first.
    pub next_step: String,
    /// The same numbers, machine-readable. A finding about time also has `time_ns` (the GPU
    /// time it concerns, summed over devices), `share_of_gpu_time` (of the summed spans, or
    /// of the process windows for `startup-teardown`) and, with a GPU-hour price, `cost_usd`;
    /// its severity follows that share (`docs/metrics.md`, "Findings").
    pub values: Values,
}

/// Idle and exposed time priced per GPU-hour (durations summed over devices).
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Cost {
    /// The price given.
    pub usd_per_gpu_hour: f64,
    /// All spans.
    pub span_usd: f64,
    /// Idle within spans.
    pub idle_usd: f64,
    /// Exposed communication.
    pub exposed_communication_usd: f64,
    /// Exposed transfer.
    pub exposed_transfer_usd: f64,
    /// Startup and teardown idle (gputrace captures).
    pub startup_teardown_usd: f64,
    /// Sum of the four above.
    pub not_compute_usd: f64,
}

#[cfg(test)]
mod overhead_tests {
    use super::OverheadTotal;
    use gputrace_format::Trailer;

    #[test]
    fn overhead_comes_from_the_trailer_entries_that_parse() {
        let extra = [
            ("cupti.overhead.instrumentation", "12 records, 3400000 ns"),
            ("cupti.overhead.buffer_flush", "3 records, 900 ns"),
            ("cupti.overhead.garbled", "many records"),
            ("cupti.library", "libcupti.so.13"),
            ("agent.api_calls_filtered", "0"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let trailer = Trailer {
            extra,
            ..Trailer::default()
        };
        let o = OverheadTotal::from_trailer(&trailer);
        assert_eq!(o.len(), 2, "{o:?}");
        assert_eq!(
            o["instrumentation"],
            OverheadTotal {
                records: 12,
                ns: 3_400_000
            }
        );
        assert_eq!(o["buffer_flush"], OverheadTotal { records: 3, ns: 900 });
    }
}

/// Where a rank's steps came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepSource {
    /// gputrace step marks.
    StepMarks,
    /// `ProfilerStep#N` ranges.
    ProfilerStep,
    /// Inferred from the repeating kernel pattern.
    Inferred,
    /// No steps.
    #[default]
    None,
}

/// The productive numbers of one rank or of the job (same keys in both).
///
/// Invariants: `productive_gpu_hours + failed_gpu_hours <= gpu_hours` (a failed process
/// has no productive hours); `gpu_util_busy_ns <= span_ns`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Productive {
    /// Where the steps came from (the job: the first rank's source).
    pub step_source: StepSource,
    /// Steps (the job: distinct step numbers over ranks).
    pub steps: u64,
    /// Step marks ignored because they do not parse.
    pub malformed_step_marks: u64,
    /// Median step time, s (nearest rank; the job: of each step's slowest rank).
    pub step_time_p50_s: Option<f64>,
    /// 95th percentile step time, s (nearest rank).
    pub step_time_p95_s: Option<f64>,
    /// Coefficient of variation of the step times (population standard deviation / mean).
    pub step_time_cv: Option<f64>,
    /// Time inside steps, s (the job: summed over ranks).
    pub time_in_steps_s: f64,
    /// Tokens in the steps (the job: summed over ranks).
    pub tokens: Option<u64>,
    /// Where the token counts came from: `step marks`, `header`, `--tokens-per-step`.
    pub tokens_source: Option<String>,
    /// Samples in the steps.
    pub samples: Option<u64>,
    /// Where the sample counts came from.
    pub samples_source: Option<String>,
    /// `tokens / time_in_steps_s` (the job: the ranks' sum).
    pub tokens_per_s: Option<f64>,
    /// `samples / time_in_steps_s` (the job: the ranks' sum).
    pub samples_per_s: Option<f64>,
    /// Active devices.
    pub devices: u64,
    /// Summed spans of the active devices, ns.
    pub span_ns: u64,
    /// Summed compute of the active devices, ns.
    pub compute_ns: u64,
    /// Time of the GPU-Util windows in which a kernel ran, ns.
    pub gpu_util_busy_ns: u64,
    /// GPU-Util as NVML defines it: `100 · gpu_util_busy_ns / span_ns` (null without
    /// activity, and when a device's span holds fewer than
    /// [`crate::productive::MIN_GPU_UTIL_WINDOWS`] windows: `missing` says so).
    pub gpu_util_nvml_pct: Option<f64>,
    /// Its window, s.
    pub gpu_util_window_s: f64,
    /// The shortest active device span, in GPU-Util windows (null without activity).
    pub gpu_util_windows: Option<f64>,
    /// `100 · compute_ns / span_ns`.
    pub compute_pct: Option<f64>,
    /// Model FLOPs in the steps.
    pub model_flops: Option<f64>,
    /// How they were counted.
    pub model_flops_source: Option<String>,
    /// `model_flops / time_in_steps_s / 1e12` (the job: the ranks' sum).
    pub achieved_tflops: Option<f64>,
    /// Peak of the active devices at `precision`, TFLOPS (summed over devices).
    pub peak_tflops: Option<f64>,
    /// Where the peak came from (the table's device, or `--peak-tflops`).
    pub peak_source: Option<String>,
    /// Precision of the peak.
    pub precision: Precision,
    /// Where the precision came from: `--precision`, the GEMM kernels' names (with the
    /// share of GEMM time), or the bf16 default.
    pub precision_source: String,
    /// Model FLOPs utilization, 0..1: `achieved_tflops / peak_tflops`; null when above 1
    /// (then `mfu_refused` has it and `missing.mfu` the likely cause).
    pub mfu: Option<f64>,
    /// An MFU above 1 that was refused: more model FLOPs per second than the peak.
    pub mfu_refused: Option<f64>,
    /// Traced GPU-hours: each active device's process window (its span when the trace has none).
    pub gpu_hours: f64,
    /// GPU-hours inside completed steps of processes that did not fail.
    pub productive_gpu_hours: f64,
    /// `productive_gpu_hours / gpu_hours` (null without steps).
    pub productive_gpu_hour_rate: Option<f64>,
    /// GPU-hours of processes that did not succeed (all of their traced hours).
    pub failed_gpu_hours: f64,
    /// `gpu_hours` priced at `--gpu-hour-cost`.
    pub cost_usd: Option<f64>,
    /// `failed_gpu_hours` priced.
    pub failed_cost_usd: Option<f64>,
    /// `cost_usd / tokens of processes that did not fail × 1e6`.
    pub cost_per_million_tokens: Option<f64>,
    /// Whether the process failed (the job: whether any did).
    pub failed: bool,
    /// `succeeded` or `failed` (the job: `n of m ranks failed` or `succeeded`).
    pub outcome: String,
    /// What says so: the run record, the exit marker, the trailer.
    pub outcome_evidence: String,
    /// Null fields → the flag or input that fills them.
    pub missing: BTreeMap<String, String>,
    /// A rank without GPU work (a CPU-only Python job): its steps from its step marks, as
    /// (step, duration ns), which the job's step times take in place of device steps.
    #[serde(skip)]
    pub host_steps: Vec<(u64, u64)>,
}
