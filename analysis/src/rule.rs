//! What a [`Finding`](crate::Finding) is and carries, as types: the [`FindingRule`] that
//! fired and its named numbers ([`Values`], keyed by [`Value`]).
//!
//! Both serialize as the strings `docs/metrics.md` ("Findings") documents: a rule
//! as its kebab-case name, the values as one JSON object of snake_case names in
//! name order. A new rule or value is a new variant here, and every `match` on
//! them (the names below, a renderer's) fails to compile until it handles it.

use serde::{Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;

/// Declares an enum of unit variants with one stable name each: `as_str` and
/// `ALL` (every variant, in declaration order) are generated from the one list,
/// so neither can miss a variant.
macro_rules! named {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:literal,)* }) => {
        $(#[$meta])*
        $vis enum $name {
            $($(#[$vmeta])* $variant,)*
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The stable name (JSON, text and docs use it).
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }
        }
    };
}

named! {
    /// The rule a finding comes from (`docs/metrics.md`, "Findings", lists when each fires).
    /// Deliberately exhaustive (no `#[non_exhaustive]`): a renderer in another crate that
    /// matches on it fails to compile until it handles a new rule.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum FindingRule {
        /// A rank recorded losses, a damaged tail or no trailer.
        LossyTrace => "lossy-trace",
        /// No kernel, copy or memset was recorded.
        NoGpuActivity => "no-gpu-activity",
        /// Idle time is mostly host-bound.
        HostBoundIdle => "host-bound-idle",
        /// Idle time is mostly launch latency or cross-stream dependencies.
        DependencyLatencyIdle => "dependency-latency-idle",
        /// The CPU blocks in synchronizations while the GPU has nothing queued.
        SynchronizationIdle => "synchronization-idle",
        /// Communication is not hidden behind compute.
        ExposedCommunication => "exposed-communication",
        /// One collective operation dominates exposed communication.
        ExposedCommunicationByOp => "exposed-communication-by-op",
        /// Many short kernels.
        LaunchBound => "launch-bound",
        /// Copies from or to pageable host memory.
        PageableCopies => "pageable-copies",
        /// Long pauses after device-to-host bursts.
        CheckpointPauses => "checkpoint-pauses",
        /// Long pauses without a checkpoint's signature.
        LongPauses => "long-pauses",
        /// One device computes clearly more than the median.
        UnevenCompute => "uneven-compute",
        /// Much of the process windows is before the first or after the last GPU work.
        StartupTeardown => "startup-teardown",
        /// Throttled or slower-clocked GPUs.
        GpuThrottled => "gpu-throttled",
        /// Device memory busy most of the time.
        MemoryBound => "memory-bound",
        /// XID or uncorrected ECC errors.
        GpuErrors => "gpu-errors",
        /// High GPU-Util (as nvidia-smi) with low MFU.
        HighGpuUtilLowMfu => "high-gpu-util-low-mfu",
        /// An MFU above 100%, refused.
        ImpossibleMfu => "impossible-mfu",
        /// Unstable step time.
        StepTimeUnstable => "step-time-unstable",
        /// GPU time of processes that did not succeed.
        FailedRun => "failed-run",
        /// What the host did during the GPU's idle time (host samples).
        HostDuringIdle => "host-during-idle",
        /// A rank the others wait for (`gputrace compare`'s stragglers).
        Stragglers => "stragglers",
        /// A server whose requests queue while the tail latency grows.
        ServingSaturated => "serving-saturated",
        /// A server whose KV cache limits the batch.
        ServingKvCacheLimit => "serving-kv-cache-limit",
        /// A server whose GPU waits for requests.
        ServingLowConcurrency => "serving-low-concurrency",
        /// A server whose GPU idles between iterations while requests wait.
        ServingCpuBubbles => "serving-cpu-bubbles",
    }
}

named! {
    /// The name of one number a finding carries (`Finding::values`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    #[non_exhaustive]
    pub enum Value {
        /// The GPU time the finding concerns, summed over devices.
        TimeNs => "time_ns",
        /// [`Value::TimeNs`] as a share of the summed spans (of the process windows for `startup-teardown`).
        ShareOfGpuTime => "share_of_gpu_time",
        /// [`Value::TimeNs`] priced at the GPU-hour cost.
        CostUsd => "cost_usd",
        /// Ranks with losses.
        LossyRanks => "lossy_ranks",
        /// NCCL collectives recorded.
        Collectives => "collectives",
        /// Idle as a share of the span.
        IdleShare => "idle_share",
        /// Host-bound idle as a share of idle.
        HostBoundShareOfIdle => "host_bound_share_of_idle",
        /// Launch/dependency latency as a share of idle.
        LatencyShareOfIdle => "latency_share_of_idle",
        /// Synchronization as a share of idle.
        SynchronizationShareOfIdle => "synchronization_share_of_idle",
        /// Exposed communication as a share of the span.
        ExposedCommunicationShare => "exposed_communication_share",
        /// The operation's share of exposed communication.
        OpShareOfExposedCommunication => "op_share_of_exposed_communication",
        /// The operation's exposed communication.
        OpExposedCommunicationNs => "op_exposed_communication_ns",
        /// The operation's collectives.
        OpCollectives => "op_collectives",
        /// The bytes the operation's collectives moved.
        OpBytes => "op_bytes",
        /// The operation's time-weighted bus bandwidth, GB/s.
        OpBusbwGbps => "op_busbw_gbps",
        /// Short kernels as a share of all kernels.
        ShortKernelShare => "short_kernel_share",
        /// Kernels.
        Kernels => "kernels",
        /// The short kernels' own time.
        ShortKernelNs => "short_kernel_ns",
        /// Idle that ended at a short kernel.
        LaunchIdleNs => "launch_idle_ns",
        /// Bytes copied from or to pageable memory.
        PageableBytes => "pageable_bytes",
        /// Copies from or to pageable memory.
        PageableCopies => "pageable_copies",
        /// Pauses.
        Pauses => "pauses",
        /// The pauses' time.
        PauseNs => "pause_ns",
        /// Device-to-host bytes before the pauses.
        D2hBytes => "d2h_bytes",
        /// The longest pause.
        LongestNs => "longest_ns",
        /// The rank the finding names.
        Rank => "rank",
        /// The device the finding names.
        Device => "device",
        /// Devices the finding holds for.
        Devices => "devices",
        /// Compute above the median, as a share of the median.
        ComputeExcess => "compute_excess",
        /// Compute above the median.
        ExcessNs => "excess_ns",
        /// Compute above the next device's.
        LeadOverNextNs => "lead_over_next_ns",
        /// 1 when the evidence singles the device out, else 0.
        SingledOut => "singled_out",
        /// Startup and teardown as a share of the process windows.
        StartupTeardownShare => "startup_teardown_share",
        /// Share of the sampled time with slowdown reasons set.
        ThrottledShare => "throttled_share",
        /// Mean SM clock as a share of its maximum.
        SmClockShareOfMax => "sm_clock_share_of_max",
        /// Mean power, W.
        PowerMeanW => "power_mean_w",
        /// DRAM throughput, percent of peak.
        DramThroughputPct => "dram_throughput_pct",
        /// SM active, percent.
        SmActivePct => "sm_active_pct",
        /// Tensor pipe active, percent.
        TensorActivePct => "tensor_active_pct",
        /// NVML's memory utilization, percent.
        MemUtilSampledPct => "mem_util_sampled_pct",
        /// XID errors.
        XidErrors => "xid_errors",
        /// Uncorrected ECC errors.
        EccUncorrectedErrors => "ecc_uncorrected_errors",
        /// GPU-Util as nvidia-smi, percent.
        GpuUtilNvmlPct => "gpu_util_nvml_pct",
        /// Compute, percent of the span.
        ComputePct => "compute_pct",
        /// Model FLOPs utilization.
        Mfu => "mfu",
        /// The MFU refused as impossible.
        MfuRefused => "mfu_refused",
        /// Achieved TFLOPS.
        AchievedTflops => "achieved_tflops",
        /// Peak TFLOPS.
        PeakTflops => "peak_tflops",
        /// p95 step time over p50.
        StepP95OverP50 => "step_p95_over_p50",
        /// Coefficient of variation of step time.
        StepTimeCv => "step_time_cv",
        /// Steps.
        Steps => "steps",
        /// GPU-hours of processes that did not succeed.
        FailedGpuHours => "failed_gpu_hours",
        /// GPU-hours traced.
        GpuHours => "gpu_hours",
        /// [`Value::FailedGpuHours`] priced.
        FailedCostUsd => "failed_cost_usd",
        /// GPU idle time looked at.
        IdleNs => "idle_ns",
        /// Of it, the time covered by host samples.
        SampledNs => "sampled_ns",
        /// The main thread running.
        MainRunningNs => "main_running_ns",
        /// The main thread sleeping.
        MainSleepingNs => "main_sleeping_ns",
        /// The main thread in disk wait.
        MainDiskWaitNs => "main_disk_wait_ns",
        /// CPU time of other threads and processes.
        WorkersCpuNs => "workers_cpu_ns",
        /// The named site's share of the idle time.
        SiteShare => "site_share",
        /// Mean requests waiting.
        WaitingMean => "waiting_mean",
        /// Most requests waiting.
        WaitingMax => "waiting_max",
        /// Median end-to-end latency, s.
        E2eP50S => "e2e_p50_s",
        /// p99 end-to-end latency, s.
        E2eP99S => "e2e_p99_s",
        /// Largest KV-cache usage, share.
        KvCacheUsageMax => "kv_cache_usage_max",
        /// Mean requests running.
        RunningMean => "running_mean",
        /// Idle GPU time with nothing to serve, share.
        HeadroomShare => "headroom_share",
        /// Idle GPU time while requests were in the system, share.
        WasteShare => "waste_share",
        /// Median bubble before an iteration.
        BubbleP50Ns => "bubble_p50_ns",
        /// The wait a straggler imposed on the others.
        WaitImposedNs => "wait_imposed_ns",
        /// That wait's share of all waiting.
        ShareOfWaiting => "share_of_waiting",
        /// Collectives at which the straggler arrived last.
        ArrivedLast => "arrived_last",
    }
}

impl fmt::Display for FindingRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for FindingRule {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A finding's numbers by name. Serializes as one object with the names in
/// [`Value::as_str`] order (what a map of strings gave), whatever the enum's order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Values(BTreeMap<Value, f64>);

impl Values {
    /// The number named `key`, if the finding has it.
    pub fn get(&self, key: Value) -> Option<f64> {
        self.0.get(&key).copied()
    }

    /// Set (or replace) the number named `key`.
    pub fn insert(&mut self, key: Value, value: f64) {
        self.0.insert(key, value);
    }

    /// Whether the finding has no numbers.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every number with its name, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &f64)> {
        let mut all: Vec<(&'static str, &f64)> = self.0.iter().map(|(k, v)| (k.as_str(), v)).collect();
        all.sort_unstable_by_key(|(k, _)| *k);
        all.into_iter()
    }
}

/// The number named `key`; panics when the finding does not have it (as a map would).
impl std::ops::Index<Value> for Values {
    type Output = f64;

    fn index(&self, key: Value) -> &f64 {
        &self.0[&key]
    }
}

impl FromIterator<(Value, f64)> for Values {
    fn from_iter<I: IntoIterator<Item = (Value, f64)>>(iter: I) -> Values {
        Values(iter.into_iter().collect())
    }
}

impl<const N: usize> From<[(Value, f64); N]> for Values {
    fn from(values: [(Value, f64); N]) -> Values {
        values.into_iter().collect()
    }
}

impl Serialize for Values {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn names_are_distinct_and_keep_their_case() {
        let rules: HashSet<&str> = FindingRule::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(rules.len(), FindingRule::ALL.len());
        assert!(
            rules.iter().all(|r| r.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')),
            "{rules:?}"
        );
        let values: HashSet<&str> = Value::ALL.iter().map(|v| v.as_str()).collect();
        assert_eq!(values.len(), Value::ALL.len());
        assert!(
            values
                .iter()
                .all(|v| v.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')),
            "{values:?}"
        );
    }

    #[test]
    fn values_serialize_in_name_order() {
        // The enum order puts time_ns before cost_usd; the JSON keeps name order.
        let v = Values::from([(Value::TimeNs, 5.0), (Value::CostUsd, 0.5), (Value::Rank, 1.0)]);
        assert_eq!(serde_json::to_string(&v).unwrap(), r#"{"cost_usd":0.5,"rank":1.0,"time_ns":5.0}"#);
        assert_eq!(serde_json::to_string(&FindingRule::HostBoundIdle).unwrap(), r#""host-bound-idle""#);
    }
}
