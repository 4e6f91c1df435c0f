//! The GPU-underutilization diagnosis table (symptom, likely cause, where to
//! look) as rules over a finished report. Each rule states its
//! threshold next to it; `docs/metrics.md` lists them.

use crate::report::*;
use crate::rule::{FindingRule, Value};
use crate::units::{gpu_time, usd};
use crate::Options;
use gputrace_format::Nanos;

/// Idle at least this share of the span is worth explaining.
const IDLE_SHARE: f64 = 0.10;
/// Idle at this share of the span or more is high severity.
const IDLE_SHARE_HIGH: f64 = 0.25;
/// A cause owning at least this share of idle is "mostly" that cause.
const CAUSE_SHARE: f64 = 0.5;
/// Exposed communication at least this share of the span.
const EXPOSED_COMM_SHARE: f64 = 0.10;
/// ... and this share is high severity.
const EXPOSED_COMM_SHARE_HIGH: f64 = 0.20;
/// One operation owning more than this share of exposed communication dominates it.
const OP_SHARE: f64 = 0.5;
/// Short kernels at least this share of all kernels means launch-bound.
const SHORT_KERNEL_SHARE: f64 = 0.30;
/// Ignore the launch-bound rule below this many kernels.
const MIN_KERNELS: u64 = 100;
/// Pageable copies matter from this many bytes ...
const PAGEABLE_BYTES: u64 = 1 << 20;
/// ... or this share of the span spent copying from or to pageable memory.
const PAGEABLE_SHARE: f64 = 0.01;
/// Device-to-host bytes in the second before a pause that mark a checkpoint.
const CHECKPOINT_D2H_BYTES: u64 = 16 << 20;
/// A device with this much more compute than the median is a straggler.
const STRAGGLER_EXCESS: f64 = 0.10;
/// The device with the most compute leads the next by this share of the median to be
/// singled out as the one its peers wait for.
const SINGLE_OUT_MARGIN: f64 = 0.05;
/// Synchronization at least this share of idle.
const SYNC_SHARE: f64 = 0.30;
/// Startup and teardown at least this share of the process windows.
const STARTUP_SHARE: f64 = 0.20;
/// GPU-Util (as nvidia-smi) at least this, in percent, is "high" ...
const HIGH_GPU_UTIL_PCT: f64 = 80.0;
/// ... and MFU below this is "low" (a published study of 608 H100 jobs averaged 25%) ...
const LOW_MFU: f64 = 0.30;
/// ... or, without MFU, compute below this share of the span.
const LOW_COMPUTE_PCT: f64 = 50.0;
/// Step time is unstable when p95 / p50 reaches this ...
const STEP_P95_OVER_P50: f64 = 1.5;
/// ... or the coefficient of variation this.
const STEP_CV: f64 = 0.25;
/// A GPU with slowdown reasons (power cap, thermal, hardware slowdown) set at least this
/// share of the sampled time is throttled ...
const THROTTLED_SHARE: f64 = 0.10;
/// A busy GPU whose mean SM clock is below this share of its maximum is slower-clocked.
const CLOCK_SHARE_LOW: f64 = 0.85;
/// "Busy" for the clock rule: NVML's GPU utilization at least this, percent.
const BUSY_UTIL_PCT: f64 = 50.0;
/// NVML's memory utilization at least this, percent, on a busy GPU: memory-bound.
const MEMORY_BOUND_UTIL_PCT: f64 = 70.0;
/// CUPTI PM sampling's DRAM throughput at least this share of the GPU's peak, percent,
/// over the activity span: memory-bound (used instead of NVML's memory utilization when
/// the trace has it).
const MEMORY_BOUND_DRAM_PCT: f64 = 60.0;
/// XIDs named at most per device in the `gpu-errors` finding's evidence.
const XIDS_NAMED: usize = 8;
/// Fewest steps for the stability rule.
const MIN_STEPS_FOR_STABILITY: u64 = 5;

/// A finding about this share of the GPU time or more is high severity ...
pub(crate) const STAKE_HIGH: f64 = 0.20;
/// ... from this share on medium, and below it low (`docs/metrics.md`, "Findings").
pub(crate) const STAKE_MEDIUM: f64 = 0.05;

/// The severity of a finding about `share` of the GPU time.
pub(crate) fn stake_severity(share: f64) -> Severity {
    if share >= STAKE_HIGH {
        Severity::High
    } else if share >= STAKE_MEDIUM {
        Severity::Medium
    } else {
        Severity::Low
    }
}

/// State the time finding `f` concerns: `time_ns` of `whole_ns` GPU time (values
/// `time_ns`, `share_of_gpu_time`, and `cost_usd` at `usd_per_gpu_hour`). Its severity
/// then follows the share ([`stake_severity`]), never above `cap`; rules that are not
/// about time (lost data, hardware errors, a failed run) keep theirs with `cap: None`.
pub fn state_stake(f: &mut Finding, time_ns: u64, whole_ns: u64, usd_per_gpu_hour: Option<f64>, cap: Option<Severity>) {
    f.values.insert(Value::TimeNs, time_ns as f64);
    if let Some(price) = usd_per_gpu_hour {
        f.values.insert(Value::CostUsd, time_ns as f64 / 3.6e12 * price);
    }
    if whole_ns == 0 {
        return;
    }
    let share = time_ns as f64 / whole_ns as f64;
    f.values.insert(Value::ShareOfGpuTime, share);
    if let Some(cap) = cap {
        // Severities order High < Medium < Low: the larger of the two is the milder.
        f.severity = stake_severity(share).max(cap);
    }
}

fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

fn finding(rule: FindingRule, severity: Severity, title: String, evidence: String, next_step: &str, values: &[(Value, f64)]) -> Finding {
    Finding {
        rule,
        severity,
        title,
        evidence,
        next_step: next_step.to_string(),
        values: values.iter().copied().collect(),
    }
}

/// What to try first when operation `op` dominates exposed communication.
fn op_next_step(op: &str) -> &'static str {
    match crate::collectives::op_key(op).as_str() {
        "allreduce" => {
            "Overlap the gradient all-reduce with backward: DDP bucket_cap_mb (fewer, larger buckets; the last bucket is exposed), \
             gradient_as_bucket_view, no_sync() during gradient accumulation. If the bus bandwidth is well below what nccl-tests' \
             all_reduce_perf reaches on this topology, look at the network (NCCL_ALGO/NCCL_PROTO, NICs, topology) before overlap."
        }
        "allgather" => {
            "Prefetch the parameter all-gathers: FSDP forward_prefetch=True and backward_prefetch=BACKWARD_PRE (FSDP2: \
             set_modules_to_forward_prefetch / reshard_after_forward), larger wrap units so each all-gather moves more; compare the \
             bus bandwidth with nccl-tests' all_gather_perf."
        }
        "reducescatter" => {
            "Overlap the gradient reduce-scatters with backward (FSDP backward_prefetch, larger wrap units, a lower-precision \
             reduce_dtype); compare the bus bandwidth with nccl-tests' reduce_scatter_perf."
        }
        "alltoall" => {
            "Expert-parallel all-to-all: overlap dispatch/combine with expert compute (DeepEP, overlapped micro-batches), keep the \
             expert-parallel group within a node, revisit the capacity factor; compare with nccl-tests' alltoall_perf."
        }
        "send" | "recv" | "sendrecv" | "recvsend" => {
            "Pipeline point-to-point transfers are exposed: more micro-batches or an interleaved schedule to shrink the bubble, and \
             overlap the sends and receives with the next micro-batch's compute."
        }
        "broadcast" | "reduce" => {
            "Rooted collectives in the loop: DDP broadcast_buffers=False when buffers do not change, broadcast once outside the \
             step, or replace with an all-reduce/all-gather that can overlap."
        }
        _ => "Overlap this operation with compute, make it larger and rarer, or move less data with it.",
    }
}

/// `exposed-communication-by-op`: the operation (not `unattributed` or `peer-copy`) with the
/// most exposed communication, when it has more than [`OP_SHARE`] of it.
fn dominant_operation(r: &Report, exposed_share: f64, price: Option<f64>) -> Option<Finding> {
    let t = &r.totals;
    let (op, &op_ns) = t
        .time
        .exposed_communication_by_op_ns
        .iter()
        .filter(|(op, _)| op.as_str() != crate::UNATTRIBUTED && op.as_str() != crate::PEER_COPY)
        .max_by_key(|(op, ns)| (**ns, std::cmp::Reverse(op.as_str())))?;
    let share = pct(op_ns, t.time.exposed_communication_ns);
    if share <= OP_SHARE {
        return None;
    }
    // The operation's rows over all communicators (none for a combined label like `Recv+Send`).
    let rows: Vec<&CollectiveStat> = r.collectives.iter().filter(|c| &c.op == op).collect();
    let count: u64 = rows.iter().map(|c| c.count).sum();
    let bytes: u64 = rows.iter().map(|c| c.bytes).sum();
    let timed: Vec<&&CollectiveStat> = rows.iter().filter(|c| c.busbw_gbps.is_some()).collect();
    let time: u64 = timed.iter().map(|c| c.time_ns).sum();
    // Time-weighted over communicators: total bus bytes over total time.
    let busbw = (time > 0).then(|| timed.iter().map(|c| c.busbw_gbps.unwrap_or(0.0) * c.time_ns as f64).sum::<f64>() / time as f64);
    let mut values = vec![
        (Value::OpShareOfExposedCommunication, share),
        (Value::OpExposedCommunicationNs, op_ns as f64),
        (Value::ExposedCommunicationShare, exposed_share),
    ];
    let mut evidence = format!(
        "{op} is {} of the {} of exposed communication ({:.1}%); exposed communication is {:.1}% of the span",
        Nanos(op_ns),
        Nanos(t.time.exposed_communication_ns),
        100.0 * share,
        100.0 * exposed_share
    );
    if count > 0 {
        values.push((Value::OpCollectives, count as f64));
        values.push((Value::OpBytes, bytes as f64));
        evidence.push_str(&format!(
            "; {count} {op} collective(s) moved {bytes} bytes ({})",
            crate::collectives::human_bytes(bytes)
        ));
        match busbw {
            Some(bw) => {
                values.push((Value::OpBusbwGbps, bw));
                evidence.push_str(&format!(" at {bw:.2} GB/s bus bandwidth (NCCL-tests definition)"));
            }
            None => evidence.push_str(" (bus bandwidth unknown: no collective linked to its kernel)"),
        }
    }
    let mut f = finding(
        FindingRule::ExposedCommunicationByOp,
        Severity::Medium,
        format!("{op} dominates exposed communication"),
        evidence,
        op_next_step(op),
        &values,
    );
    state_stake(&mut f, op_ns, t.time.span_ns, price, Some(Severity::High));
    Some(f)
}

/// `uneven-compute`: the device with the most compute, when it computed
/// [`STRAGGLER_EXCESS`] more than the median; with the excess over the median (the time
/// at stake). Its cause (a slower GPU or more work) is named only when the evidence singles
/// it out: it leads the next device by [`SINGLE_OUT_MARGIN`] of the median and waited
/// least in communication (its peers wait for it); otherwise the cause is unclear.
fn uneven_compute(devices: &[(u32, &DeviceReport)]) -> Option<(Finding, u64)> {
    let mut active: Vec<(u32, &DeviceReport)> = devices.iter().filter(|(_, d)| d.first_ns.is_some()).copied().collect();
    if active.len() < 2 {
        return None;
    }
    // Most compute first; ties by (rank, device).
    active.sort_by_key(|(r, d)| (std::cmp::Reverse(d.time.compute_ns), *r, d.device));
    let mut computes: Vec<u64> = active.iter().map(|(_, d)| d.time.compute_ns).collect();
    computes.sort_unstable();
    // The lower median: with two GPUs, the other one.
    let median = computes[(computes.len() - 1) / 2].max(1);
    let (srank, sdev) = active[0];
    let (nrank, next) = active[1];
    let excess = sdev.time.compute_ns as f64 / median as f64 - 1.0;
    if excess < STRAGGLER_EXCESS {
        return None;
    }
    let excess_ns = sdev.time.compute_ns.saturating_sub(median);
    let lead_ns = sdev.time.compute_ns - next.time.compute_ns;
    let lead = lead_ns as f64 / median as f64;
    let peers = &active[1..];
    let least_wait = peers.iter().map(|(_, d)| d.time.exposed_communication_ns).min().unwrap_or(0);
    let waited_more = peers
        .iter()
        .filter(|(_, d)| d.time.exposed_communication_ns < sdev.time.exposed_communication_ns)
        .count();
    let singled_out = lead >= SINGLE_OUT_MARGIN && sdev.time.exposed_communication_ns < least_wait;
    let evidence = format!(
        "its compute {} is {:.1}% ({}) above the median {}, {} ({:.1}% of the median) more than the next, rank {nrank} gpu {}; \
         it waited {} in exposed communication, its peers {} to {} ({} of {} waited less)",
        Nanos(sdev.time.compute_ns),
        100.0 * excess,
        Nanos(excess_ns),
        Nanos(median),
        Nanos(lead_ns),
        100.0 * lead,
        next.device,
        Nanos(sdev.time.exposed_communication_ns),
        Nanos(least_wait),
        Nanos(peers.iter().map(|(_, d)| d.time.exposed_communication_ns).max().unwrap_or(0)),
        waited_more,
        peers.len()
    );
    let (title, next_step) =
        if singled_out {
            (
            format!("Uneven compute: rank {srank} gpu {} computes longest and its peers wait for it", sdev.device),
            "Compare that rank's timeline and kernels with a peer (per-rank table); check for a slower or throttled GPU, placement and \
             topology, or uneven work (sequence lengths, data shards).",
        )
        } else {
            (
                format!(
                    "Uneven compute: rank {srank} gpu {} computed the most (cause: unclear)",
                    sdev.device
                ),
                "The evidence does not single this GPU out (it does not lead the next by a clear margin, or it waits in communication \
             as long as its peers): compare the ranks' step times and collectives (gputrace compare) before suspecting its GPU.",
            )
        };
    let f = finding(
        FindingRule::UnevenCompute,
        Severity::Medium,
        title,
        evidence,
        next_step,
        &[
            (Value::Rank, srank as f64),
            (Value::ComputeExcess, excess),
            (Value::ExcessNs, excess_ns as f64),
            (Value::LeadOverNextNs, lead_ns as f64),
            (Value::SingledOut, f64::from(u8::from(singled_out))),
        ],
    );
    Some((f, excess_ns))
}

/// What the rules read: the report, its devices (with their ranks), the options and price.
struct Job<'r> {
    r: &'r Report,
    opts: &'r Options,
    price: Option<f64>,
    devices: Vec<(u32, &'r DeviceReport)>,
}

impl Job<'_> {
    fn totals(&self) -> &Totals {
        &self.r.totals
    }

    /// A finding about `time` of the GPU time, its severity from that share.
    fn staked(&self, mut f: Finding, time: u64) -> Finding {
        state_stake(&mut f, time, self.r.totals.time.span_ns, self.price, Some(Severity::High));
        f
    }
}

/// High from `high` on, else medium.
fn high_from(share: f64, high: f64) -> Severity {
    if share >= high {
        Severity::High
    } else {
        Severity::Medium
    }
}

/// Every rule that fires, most severe first (stable within a severity).
pub(crate) fn findings(r: &Report, opts: &Options) -> Vec<Finding> {
    let job = Job {
        r,
        opts,
        price: opts.gpu_hour_cost,
        devices: r.ranks.iter().flat_map(|rk| rk.devices.iter().map(move |d| (rk.rank, d))).collect(),
    };
    let mut out: Vec<Finding> = lossy_trace(r).into_iter().collect();
    if r.totals.active_devices == 0 {
        out.push(no_gpu_activity(r));
        productive_findings(r, &mut out, job.price);
        out.sort_by_key(|f| f.severity);
        return out;
    }
    idle_findings(&job, &mut out);
    exposed_communication(&job, &mut out);
    launch_bound(&job, &mut out);
    pageable_copies(&job, &mut out);
    pauses(&job, &mut out);
    if let Some((f, excess_ns)) = uneven_compute(&job.devices) {
        out.push(job.staked(f, excess_ns));
    }
    startup_teardown(&job, &mut out);
    productive_findings(r, &mut out, job.price);
    hardware_findings(&job.devices, &mut out, r.totals.time.span_ns, job.price);
    gpu_errors(&job.devices, &mut out);
    out.extend(crate::host::findings(r));
    out.sort_by_key(|f| f.severity);
    out
}

/// `lossy-trace`: a rank recorded losses, a damaged tail or no trailer.
fn lossy_trace(r: &Report) -> Option<Finding> {
    if !r.lossy {
        return None;
    }
    let lossy: Vec<String> = r.ranks.iter().filter(|rk| rk.losses.any()).map(|rk| rk.rank.to_string()).collect();
    Some(finding(
        FindingRule::LossyTrace,
        Severity::High,
        "The trace lost data: the numbers below undercount what ran".into(),
        format!("rank(s) {} recorded losses, a damaged tail or no trailer", lossy.join(", ")),
        "Read the losses section; rerun with larger capture buffers or fewer event kinds if the loss is large.",
        &[(Value::LossyRanks, lossy.len() as f64)],
    ))
}

/// `no-gpu-activity`: no kernel, copy or memset was recorded (with NCCL's metadata, why).
fn no_gpu_activity(r: &Report) -> Finding {
    let t = &r.totals;
    let collectives: u64 = r.collectives.iter().map(|c| c.count).sum();
    let (evidence, next) = if collectives > 0 {
        (
            format!(
                "{} rank(s), no GPU activity, but {collectives} NCCL collective(s) from NCCL's profiler plugin",
                t.ranks
            ),
            "Only NCCL's metadata was recorded: CUPTI was not running in the process (`gputrace info` says \
             `agent.mode nccl-only`), usually because torch.profiler or Nsight Systems held it. Trace without them \
             active (CUDA 13.3+ lets both record).",
        )
    } else {
        (
            format!("{} rank(s), no GPU activity", t.ranks),
            "Check that the process used the GPU while it was traced (and that activity tracing was on).",
        )
    };
    finding(
        FindingRule::NoGpuActivity,
        Severity::Info,
        "No kernel, copy or memset was recorded".into(),
        evidence,
        next,
        &[(Value::Collectives, collectives as f64)],
    )
}

/// `host-bound-idle`, `dependency-latency-idle`, `synchronization-idle`: idle time of
/// one cause.
fn idle_findings(job: &Job<'_>, out: &mut Vec<Finding>) {
    let t = job.totals();
    let idle_share = pct(t.time.idle_ns, t.time.span_ns);
    let c = &t.idle_causes;
    if idle_share >= IDLE_SHARE && pct(c.host_bound_ns, t.time.idle_ns) >= CAUSE_SHARE {
        out.push(job.staked(
            finding(
                FindingRule::HostBoundIdle,
                high_from(idle_share, IDLE_SHARE_HIGH),
                "The GPU waits for the CPU: idle time is mostly host-bound".into(),
                format!(
                    "idle {} = {:.1}% of the span; {:.1}% of it host-bound (next work launched only after the GPU ran dry)",
                    Nanos(t.time.idle_ns),
                    100.0 * idle_share,
                    100.0 * pct(c.host_bound_ns, t.time.idle_ns)
                ),
                "Look at the input pipeline first (DataLoader num_workers, pin_memory, prefetch_factor, persistent_workers), then Python \
                 overhead between launches (torch.compile, CUDA graphs).",
                &[
                    (Value::IdleShare, idle_share),
                    (Value::HostBoundShareOfIdle, pct(c.host_bound_ns, t.time.idle_ns)),
                ],
            ),
            c.host_bound_ns,
        ));
    }
    if idle_share >= IDLE_SHARE && pct(c.launch_latency_ns, t.time.idle_ns) >= CAUSE_SHARE {
        out.push(job.staked(
            finding(
                FindingRule::DependencyLatencyIdle,
                high_from(idle_share, IDLE_SHARE_HIGH),
                "Work was queued but the GPU waited: launch latency or cross-stream dependencies".into(),
                format!(
                    "idle {} = {:.1}% of the span; {:.1}% of it after the next work had been launched",
                    Nanos(t.time.idle_ns),
                    100.0 * idle_share,
                    100.0 * pct(c.launch_latency_ns, t.time.idle_ns)
                ),
                "Check event waits between streams and collectives that wait for peers; CUDA graphs remove per-launch latency.",
                &[
                    (Value::IdleShare, idle_share),
                    (Value::LatencyShareOfIdle, pct(c.launch_latency_ns, t.time.idle_ns)),
                ],
            ),
            c.launch_latency_ns,
        ));
    }
    if pct(t.time.idle_ns, t.time.span_ns) >= IDLE_SHARE / 2.0 && pct(c.synchronization_ns, t.time.idle_ns) >= SYNC_SHARE {
        out.push(job.staked(
            finding(
                FindingRule::SynchronizationIdle,
                Severity::Medium,
                "The CPU blocks in synchronizations while the GPU has nothing queued".into(),
                format!(
                    "{} of idle ({:.1}%) is spent with the CPU in a synchronize call",
                    Nanos(c.synchronization_ns),
                    100.0 * pct(c.synchronization_ns, t.time.idle_ns)
                ),
                "Remove host syncs from the step loop (.item(), .cpu(), .tolist(), torch.cuda.synchronize(), printing tensors); log \
                 asynchronously every N steps.",
                &[(Value::SynchronizationShareOfIdle, pct(c.synchronization_ns, t.time.idle_ns))],
            ),
            c.synchronization_ns,
        ));
    }
}

/// `exposed-communication`, and `exposed-communication-by-op` when one operation owns it.
fn exposed_communication(job: &Job<'_>, out: &mut Vec<Finding>) {
    let t = job.totals();
    let exposed_share = pct(t.time.exposed_communication_ns, t.time.span_ns);
    if exposed_share >= EXPOSED_COMM_SHARE {
        out.push(job.staked(
            finding(
                FindingRule::ExposedCommunication,
                high_from(exposed_share, EXPOSED_COMM_SHARE_HIGH),
                "Communication is not hidden behind compute".into(),
                format!(
                    "exposed communication {} = {:.1}% of the span; {:.1}% of all communication ran under compute",
                    Nanos(t.time.exposed_communication_ns),
                    100.0 * exposed_share,
                    100.0 * pct(t.time.communication_ns - t.time.exposed_communication_ns, t.time.communication_ns)
                ),
                "Overlap communication with compute: DDP bucket_cap_mb / gradient_as_bucket_view, FSDP forward and backward prefetch, \
                 fewer and larger collectives. If ranks are uneven (see stragglers), fix the slow rank first: its peers wait inside the \
                 collectives.",
                &[(Value::ExposedCommunicationShare, exposed_share)],
            ),
            t.time.exposed_communication_ns,
        ));
    }

    if exposed_share >= EXPOSED_COMM_SHARE {
        if let Some(f) = dominant_operation(job.r, exposed_share, job.price) {
            out.push(f);
        }
    }
}

/// `launch-bound`: many kernels shorter than `Options::short_kernel_ns`.
fn launch_bound(job: &Job<'_>, out: &mut Vec<Finding>) {
    let t = job.totals();
    let short_share = pct(t.short_kernels, t.kernels);
    if t.kernels >= MIN_KERNELS && short_share >= SHORT_KERNEL_SHARE {
        let us = job.opts.short_kernel_ns as f64 / 1e3;
        // What fusing or graph capture could win back: the short kernels' own time and
        // the idle right before them (the GPU ran dry waiting for their launch).
        let short_ns: u64 = job.devices.iter().map(|(_, d)| d.short_kernel_ns).sum();
        let launch_idle: u64 = job.devices.iter().map(|(_, d)| d.idle_before_short_kernels_ns).sum();
        let time = (short_ns + launch_idle).min(t.time.span_ns);
        out.push(job.staked(
            finding(
                FindingRule::LaunchBound,
                Severity::Medium,
                format!("Many kernels are shorter than {us:.0} µs: launch-bound"),
                format!(
                    "{} of {} kernels ({:.1}%) ran under {us:.0} µs; they ran {} ({:.1}% of the span), and the GPU sat idle right before them {} ({:.1}%)",
                    t.short_kernels,
                    t.kernels,
                    100.0 * short_share,
                    Nanos(short_ns),
                    100.0 * pct(short_ns, t.time.span_ns),
                    Nanos(launch_idle),
                    100.0 * pct(launch_idle, t.time.span_ns)
                ),
                "Fuse small kernels (torch.compile), capture the step in CUDA graphs (mode=\"reduce-overhead\"), or give each kernel more work \
                 (larger batch).",
                &[
                    (Value::ShortKernelShare, short_share),
                    (Value::Kernels, t.kernels as f64),
                    (Value::ShortKernelNs, short_ns as f64),
                    (Value::LaunchIdleNs, launch_idle as f64),
                ],
            ),
            time,
        ));
    }
}

/// `pageable-copies`: copies from or to pageable host memory.
fn pageable_copies(job: &Job<'_>, out: &mut Vec<Finding>) {
    let t = job.totals();
    let (pageable_bytes, pageable_ns, pageable_count) = job
        .r
        .copies
        .iter()
        .filter(|c| c.pageable)
        .fold((0u64, 0u64, 0u64), |a, c| (a.0 + c.bytes, a.1 + c.total_ns, a.2 + c.count));
    if pageable_count > 0 && (pageable_bytes >= PAGEABLE_BYTES || pct(pageable_ns, t.time.span_ns) >= PAGEABLE_SHARE) {
        out.push(job.staked(finding(
            FindingRule::PageableCopies,
            Severity::Medium,
            "Copies use pageable host memory".into(),
            format!(
                "{pageable_count} copies, {pageable_bytes} bytes, {} copying from or to pageable memory",
                Nanos(pageable_ns)
            ),
            "Pin host memory (DataLoader(pin_memory=True), tensor.pin_memory()) and copy with non_blocking=True so copies overlap compute.",
            &[
                (Value::PageableBytes, pageable_bytes as f64),
                (Value::PageableCopies, pageable_count as f64),
            ],
        ), pageable_ns));
    }
}

/// `checkpoint-pauses` (long pauses after device-to-host bursts), else `long-pauses`.
fn pauses(job: &Job<'_>, out: &mut Vec<Finding>) {
    let gaps: Vec<(u32, u32, &GapReport)> = job
        .devices
        .iter()
        .flat_map(|(rank, d)| d.longest_gaps.iter().map(move |g| (*rank, d.device, g)))
        .collect();
    let pauses: Vec<&(u32, u32, &GapReport)> = gaps.iter().filter(|(_, _, g)| g.duration_ns >= job.opts.long_pause_ns).collect();
    let checkpoints: Vec<&&(u32, u32, &GapReport)> = pauses
        .iter()
        .filter(|(_, _, g)| g.d2h_bytes_before >= CHECKPOINT_D2H_BYTES)
        .collect();
    if !checkpoints.is_empty() {
        let bytes: u64 = checkpoints.iter().map(|(_, _, g)| g.d2h_bytes_before).sum();
        let ns: u64 = checkpoints.iter().map(|(_, _, g)| g.duration_ns).sum();
        out.push(job.staked(
            finding(
                FindingRule::CheckpointPauses,
                Severity::Medium,
                "Long pauses follow device-to-host bursts: checkpoints stall training".into(),
                format!(
                    "{} pause(s) totalling {} after {bytes} bytes copied to the host",
                    checkpoints.len(),
                    Nanos(ns)
                ),
                "Checkpoint asynchronously (torch.distributed.checkpoint async_save), less often, or to faster local storage; look at the \
                 storage path (queues, RPCs, staging).",
                &[
                    (Value::Pauses, checkpoints.len() as f64),
                    (Value::PauseNs, ns as f64),
                    (Value::D2hBytes, bytes as f64),
                ],
            ),
            ns,
        ));
    } else if let Some((rank, device, g)) = pauses
        .iter()
        .max_by_key(|(rank, device, g)| (g.duration_ns, std::cmp::Reverse((*rank, *device))))
    {
        let step = g.step.map_or(String::new(), |s| format!(" in ProfilerStep#{s}"));
        let doing = g
            .cpu_activity
            .first()
            .map_or(String::new(), |a| format!("; the CPU was in {}", a.name));
        let ns: u64 = pauses.iter().map(|(_, _, g)| g.duration_ns).sum();
        out.push(job.staked(
            finding(
                FindingRule::LongPauses,
                Severity::Medium,
                format!(
                    "The GPU paused for {} or more {} time(s)",
                    Nanos(job.opts.long_pause_ns),
                    pauses.len()
                ),
                format!(
                    "longest: {} on rank {rank} gpu {device}{step}, {}{doing}; all listed pauses: {}",
                    Nanos(g.duration_ns),
                    g.cause.name(),
                    Nanos(ns)
                ),
                match g.cause {
                    IdleCause::HostBound => {
                        "The CPU stalled before launching the next work: data loading, garbage collection, evaluation or \
                                             logging in the loop. Profile the host side of that step."
                    }
                    IdleCause::Synchronization => {
                        "The CPU waited in a synchronization while the GPU had nothing to do: look for syncs on other \
                                                   devices or streams."
                    }
                    IdleCause::LaunchLatency => {
                        "The work was queued but waited: a dependency on another stream, device or peer (collective)."
                    }
                    IdleCause::Unattributed => "Trace the CUDA API as well to see what the CPU was doing.",
                },
                &[(Value::Pauses, pauses.len() as f64), (Value::LongestNs, g.duration_ns as f64)],
            ),
            ns,
        ));
    }
}

/// `startup-teardown`: much of the process windows before the first or after the last GPU work.
fn startup_teardown(job: &Job<'_>, out: &mut Vec<Finding>) {
    let t = job.totals();
    // The traced part of the windows: startup and teardown count traced time only.
    let window: u64 = job.devices.iter().filter_map(|(_, d)| d.process_window.map(|w| w.traced_ns)).sum();
    let st = t.startup_idle_ns + t.teardown_idle_ns;
    if window > 0 && pct(st, window) >= STARTUP_SHARE {
        let mut f = finding(
            FindingRule::StartupTeardown,
            Severity::Info,
            "Much of the process lifetime is before the first or after the last GPU work".into(),
            format!(
                "startup {} and teardown {} = {:.1}% of the process window",
                Nanos(t.startup_idle_ns),
                Nanos(t.teardown_idle_ns),
                100.0 * pct(st, window)
            ),
            "For long jobs this amortizes; for short ones look at initialization (model loading, compilation, NCCL setup).",
            &[(Value::StartupTeardownShare, pct(st, window))],
        );
        // Paid GPU time of the process windows; for long jobs it amortizes: at most medium.
        state_stake(&mut f, st, window, job.price, Some(Severity::Medium));
        out.push(f);
    }
}

/// The rules over the GPU's own counters: throttled or slower-clocked GPUs, memory-bound
/// kernels. One finding per rule, naming every device it holds for, worst first.
fn hardware_findings(devices: &[(u32, &DeviceReport)], out: &mut Vec<Finding>, gpu_ns: u64, price: Option<f64>) {
    gpu_throttled(devices, out, gpu_ns, price);
    memory_bound(devices, out, gpu_ns, price);
}

/// `gpu-throttled`: slowdown reasons set, or a busy GPU's clock well below its maximum.
fn gpu_throttled(devices: &[(u32, &DeviceReport)], out: &mut Vec<Finding>, gpu_ns: u64, price: Option<f64>) {
    // (share throttled, clock share of max, rank, device, report)
    let mut slow: Vec<(f64, f64, u32, u32, &crate::hardware::HardwareReport)> = Vec::new();
    for &(rank, d) in devices {
        let Some(h) = &d.hardware else { continue };
        let throttled = h.throttled_share();
        let clock = h.sm_clock_pct_of_max.map_or(1.0, |p| p / 100.0);
        let busy = h.gpu_util_sampled_pct.is_none_or(|u| u >= BUSY_UTIL_PCT);
        if throttled >= THROTTLED_SHARE || (busy && clock < CLOCK_SHARE_LOW) {
            slow.push((throttled, clock, rank, d.device, h));
        }
    }
    slow.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.total_cmp(&b.1)).then((a.2, a.3).cmp(&(b.2, b.3))));
    if let Some(&(throttled, clock, rank, device, h)) = slow.first() {
        let reasons: Vec<String> = {
            let mut r: Vec<(&String, &u64)> = h.throttle_by_reason_ns.iter().filter(|(k, _)| k.as_str() != "idle").collect();
            r.sort_by_key(|(k, v)| (std::cmp::Reverse(**v), *k));
            r.iter()
                .map(|(k, v)| format!("{k} {:.0}%", 100.0 * pct(**v, h.throttle_sampled_ns)))
                .collect()
        };
        let mut evidence = format!(
            "rank {rank} gpu {device}: slowdown reasons set {:.0}% of the sampled time{}",
            100.0 * throttled,
            if reasons.is_empty() {
                String::new()
            } else {
                format!(" ({})", reasons.join(", "))
            }
        );
        if let (Some(m), Some(max)) = (h.sm_clock_mean_mhz, h.sm_clock_max_mhz) {
            evidence.push_str(&format!(
                "; SM clock {m:.0} MHz on average, {:.0}% of its {max} MHz maximum",
                100.0 * clock
            ));
        }
        if let Some(p) = h.power_mean_w {
            evidence.push_str(&format!("; {p:.0} W on average"));
        }
        if let Some(t) = h.temperature_max_c {
            evidence.push_str(&format!(", up to {t} °C"));
        }
        if slow.len() > 1 {
            let others: Vec<String> = slow[1..].iter().map(|s| format!("rank {} gpu {}", s.2, s.3)).collect();
            evidence.push_str(&format!("; also {}", others.join(", ")));
        }
        let mut values = vec![
            (Value::ThrottledShare, throttled),
            (Value::SmClockShareOfMax, clock),
            (Value::Rank, rank as f64),
            (Value::Device, device as f64),
            (Value::Devices, slow.len() as f64),
        ];
        if let Some(p) = h.power_mean_w {
            values.push((Value::PowerMeanW, p));
        }
        let what = if throttled >= THROTTLED_SHARE {
            "throttled"
        } else {
            "running below its maximum clock"
        };
        // The time at stake: each listed GPU's span times the share it ran slowed (throttled,
        // or its clock's shortfall from the maximum, whichever is larger).
        let time: u64 = slow
            .iter()
            .filter_map(|s| {
                let d = devices.iter().find(|(r, d)| *r == s.2 && d.device == s.3)?.1;
                Some((d.time.span_ns as f64 * s.0.max(1.0 - s.1).clamp(0.0, 1.0)) as u64)
            })
            .sum();
        let mut f = finding(
            FindingRule::GpuThrottled,
            Severity::Medium,
            format!("GPU clocks {what}: rank {rank} gpu {device} computes slower than it can"),
            evidence,
            "Look at the power limit, cooling and clocks: nvidia-smi -q -d PERFORMANCE,POWER,TEMPERATURE,CLOCK on that node (a lowered power limit, a failing fan, a hot rack, application clocks set low). In a synchronous job every rank waits for the slowest GPU: gputrace compare shows whether this one is the straggler.",
            &values,
        );
        state_stake(&mut f, time, gpu_ns, price, Some(Severity::High));
        out.push(f);
    }
}

/// `memory-bound`: PM sampling's DRAM throughput (share of peak) where sampled, else
/// NVML's memory utilization on a busy GPU.
fn memory_bound(devices: &[(u32, &DeviceReport)], out: &mut Vec<Finding>, gpu_ns: u64, price: Option<f64>) {
    let mut memory: Vec<(f64, u32, u32, &crate::hardware::HardwareReport)> = devices
        .iter()
        .filter_map(|&(rank, d)| {
            let h = d.hardware.as_ref()?;
            if let Some(dram) = h.dram_throughput_pct {
                return (dram >= MEMORY_BOUND_DRAM_PCT).then_some((dram, rank, d.device, h));
            }
            let mem = h.mem_util_sampled_pct?;
            let busy = h.gpu_util_sampled_pct.is_some_and(|u| u >= HIGH_GPU_UTIL_PCT);
            (busy && mem >= MEMORY_BOUND_UTIL_PCT).then_some((mem, rank, d.device, h))
        })
        .collect();
    memory.sort_by(|a, b| b.0.total_cmp(&a.0).then((a.1, a.2).cmp(&(b.1, b.2))));
    if let Some(&(share, rank, device, h)) = memory.first() {
        let also = if memory.len() > 1 {
            format!(" and {} more device(s)", memory.len() - 1)
        } else {
            String::new()
        };
        let (evidence, values) = if h.dram_throughput_pct.is_some() {
            let f = |v: Option<f64>, unit: &str| v.map_or("-".to_string(), |v| format!("{v:.0}{unit}"));
            (
                format!(
                    "rank {rank} gpu {device}{also}: DRAM throughput {share:.0}% of peak (CUPTI PM sampling: {} read, {} written) with SM active {} and tensor pipe {}",
                    f(h.dram_read_gbps, " GB/s"),
                    f(h.dram_write_gbps, " GB/s"),
                    f(h.sm_active_pct, "%"),
                    f(h.tensor_active_pct, "%")
                ),
                [
                    (Value::DramThroughputPct, Some(share)),
                    (Value::SmActivePct, h.sm_active_pct),
                    (Value::TensorActivePct, h.tensor_active_pct),
                    (Value::Devices, Some(memory.len() as f64)),
                ]
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect::<Vec<_>>(),
            )
        } else {
            (
                format!(
                    "rank {rank} gpu {device}{also}: NVML's memory utilization {share:.0}% (time the memory was read or written) while a kernel ran {:.0}%+ of the time",
                    HIGH_GPU_UTIL_PCT
                ),
                vec![(Value::MemUtilSampledPct, share), (Value::Devices, memory.len() as f64)],
            )
        };
        let mut f = finding(
            FindingRule::MemoryBound,
            Severity::Info,
            "Kernels look memory-bound: device memory was busy most of the time".into(),
            evidence,
            "Check the top kernels' DRAM throughput against the GPU's peak (ncu --section MemoryWorkloadAnalysis): fuse elementwise kernels, use lower precision or larger tiles to raise arithmetic intensity.",
            &values,
        );
        // A whole-span reading of the listed GPUs: information, whatever its share.
        let time: u64 = memory
            .iter()
            .filter_map(|m| devices.iter().find(|(r, d)| *r == m.1 && d.device == m.2))
            .map(|(_, d)| d.time.span_ns)
            .sum();
        state_stake(&mut f, time, gpu_ns, price, None);
        out.push(f);
    }
}

/// `gpu-errors`: XID critical errors or uncorrected ECC errors on any device during the
/// run. One finding naming every such device and its XIDs.
fn gpu_errors(devices: &[(u32, &DeviceReport)], out: &mut Vec<Finding>) {
    let mut parts = Vec::new();
    let (mut xids, mut ecc, mut first) = (0u64, 0u64, None);
    for &(rank, d) in devices {
        let Some(h) = &d.hardware else { continue };
        let uncorrected = h.ecc_uncorrected_errors.unwrap_or(0);
        if h.xid_error_count == 0 && uncorrected == 0 {
            continue;
        }
        first.get_or_insert((rank, d.device));
        xids += h.xid_error_count;
        ecc += uncorrected;
        let mut what = Vec::new();
        if h.xid_error_count > 0 {
            // Each XID once, with how often it came, in order of first appearance.
            let mut seen: Vec<(u64, u64)> = Vec::new();
            for e in &h.xid_errors {
                match seen.iter_mut().find(|(x, _)| *x == e.xid) {
                    Some((_, n)) => *n += 1,
                    None => seen.push((e.xid, 1)),
                }
            }
            let mut named: Vec<String> = seen
                .iter()
                .take(XIDS_NAMED)
                .map(|&(x, n)| if n > 1 { format!("{x} ×{n}") } else { x.to_string() })
                .collect();
            if seen.len() > XIDS_NAMED || (h.xid_error_count as usize) > h.xid_errors.len() {
                named.push("…".into());
            }
            what.push(format!("{} XID error(s) (XID {})", h.xid_error_count, named.join(", ")));
        }
        if uncorrected > 0 {
            what.push(format!("{uncorrected} uncorrected ECC error(s)"));
        }
        parts.push(format!("rank {rank} gpu {}: {}", d.device, what.join(", ")));
    }
    let Some((rank, device)) = first else { return };
    let devices_with_errors = parts.len();
    out.push(finding(
        FindingRule::GpuErrors,
        Severity::High,
        format!("The GPU reported hardware errors: rank {rank} gpu {device}"),
        parts.join("; "),
        "Look the XIDs up in NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors) and the kernel log (dmesg | grep -i xid) of that node; uncorrected ECC errors: nvidia-smi -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER. Results after such an error may be wrong and the job may hang: drain the node, reset or replace the GPU, and rerun from the last checkpoint.",
        &[
            (Value::XidErrors, xids as f64),
            (Value::EccUncorrectedErrors, ecc as f64),
            (Value::Devices, devices_with_errors as f64),
            (Value::Rank, rank as f64),
            (Value::Device, device as f64),
        ],
    ));
}

/// The productive layer's rules: high GPU-Util with low MFU, an impossible MFU, unstable
/// step time, failed runs.
fn productive_findings(r: &Report, out: &mut Vec<Finding>, price: Option<f64>) {
    high_gpu_util_low_mfu(r, out, price);
    impossible_mfu(r, out);
    step_time_unstable(r, out, price);
    failed_run(r, out, price);
}

/// `high-gpu-util-low-mfu`: nvidia-smi would show the GPU busy while the model uses little of it.
fn high_gpu_util_low_mfu(r: &Report, out: &mut Vec<Finding>, price: Option<f64>) {
    let p = &r.productive;
    if let Some(util) = p.gpu_util_nvml_pct.filter(|&u| u >= HIGH_GPU_UTIL_PCT) {
        let compute = p.compute_pct.unwrap_or(0.0);
        let low = match p.mfu {
            Some(mfu) => (mfu < LOW_MFU).then(|| format!("MFU {:.1}% (below {:.0}%)", 100.0 * mfu, 100.0 * LOW_MFU)),
            None => (compute < LOW_COMPUTE_PCT).then(|| {
                format!(
                    "MFU unknown ({}), compute only {compute:.1}% of the span",
                    p.missing.get("mfu").map_or("no model FLOPs", String::as_str)
                )
            }),
        };
        if let Some(low) = low {
            let mut values = vec![(Value::GpuUtilNvmlPct, util), (Value::ComputePct, compute)];
            if let Some(m) = p.mfu {
                values.push((Value::Mfu, m));
            }
            let mut f = finding(
                FindingRule::HighGpuUtilLowMfu,
                Severity::Medium,
                format!("High GPU-Util and low MFU: nvidia-smi would show {util:.0}% while the model uses a fraction of the GPU"),
                format!(
                    "a kernel ran in {util:.1}% of the {:.3} s sampling windows, but the GPU computed {compute:.1}% of the span; {low}",
                    p.gpu_util_window_s
                ),
                "Inefficient or memory-bound kernels: profile the top kernels' SM throughput, tensor-pipe activity and DRAM bandwidth (ncu --set full, or DCGM's SM_ACTIVE / PIPE_TENSOR_ACTIVE / DRAM_ACTIVE); raise arithmetic intensity (larger micro-batches, fused kernels, torch.compile), and for inference look at tokens/s, TTFT, p99 and queue depth.",
                &values,
            );
            // The GPU time nvidia-smi counts as busy in which the GPU did not compute.
            state_stake(
                &mut f,
                p.span_ns.saturating_sub(p.compute_ns),
                p.span_ns,
                price,
                Some(Severity::High),
            );
            out.push(f);
        }
    }
}

/// `impossible-mfu`: an MFU above 100%, refused.
fn impossible_mfu(r: &Report, out: &mut Vec<Finding>) {
    let p = &r.productive;
    if let Some(m) = p.mfu_refused {
        let mut values = vec![(Value::MfuRefused, m)];
        values.extend(p.achieved_tflops.map(|a| (Value::AchievedTflops, a)));
        values.extend(p.peak_tflops.map(|t| (Value::PeakTflops, t)));
        out.push(finding(
            FindingRule::ImpossibleMfu,
            Severity::High,
            format!("MFU {:.0}% is impossible: the model FLOPs, the peak or the precision is wrong", 100.0 * m),
            format!(
                "{:.0} TFLOPS achieved against a peak of {:.0} TFLOPS ({}; precision from {}): {}",
                p.achieved_tflops.unwrap_or(0.0),
                p.peak_tflops.unwrap_or(0.0),
                p.peak_source.as_deref().unwrap_or("no peak source"),
                p.precision_source,
                p.missing.get("mfu").map_or("", String::as_str)
            ),
            "Fix the input the evidence names (--model-params, --tokens-per-step, --precision or --peak-tflops) and report again; until then no MFU is shown.",
            &values,
        ));
    }
}

/// `step-time-unstable`: p95/p50 or the coefficient of variation of step time too high.
fn step_time_unstable(r: &Report, out: &mut Vec<Finding>, price: Option<f64>) {
    let p = &r.productive;
    if let (Some(p50), Some(p95), Some(cv)) = (p.step_time_p50_s, p.step_time_p95_s, p.step_time_cv) {
        let ratio = if p50 > 0.0 { p95 / p50 } else { 0.0 };
        if p.steps >= MIN_STEPS_FOR_STABILITY && (ratio >= STEP_P95_OVER_P50 || cv >= STEP_CV) {
            let mut f = finding(
                FindingRule::StepTimeUnstable,
                Severity::Medium,
                "Step time is unstable".into(),
                format!(
                    "over {} steps: p50 {:.2} ms, p95 {:.2} ms (p95/p50 {ratio:.2}), coefficient of variation {cv:.2}",
                    p.steps,
                    p50 * 1e3,
                    p95 * 1e3
                ),
                "Look at the slow steps (Steps table, longest idle gaps): data-loader stalls, checkpoints, evaluation or logging in the loop, garbage collection, or a straggling rank (gputrace compare).",
                &[(Value::StepP95OverP50, ratio), (Value::StepTimeCv, cv), (Value::Steps, p.steps as f64)],
            );
            state_stake(&mut f, slow_step_excess_ns(r), r.totals.time.span_ns, price, Some(Severity::High));
            out.push(f);
        }
    }
}

/// `failed-run`: GPU time of processes that did not succeed.
fn failed_run(r: &Report, out: &mut Vec<Finding>, price: Option<f64>) {
    let p = &r.productive;
    if p.failed_gpu_hours > 0.0 {
        let cost = p.failed_cost_usd.map_or(String::new(), |c| format!(" ({})", usd(c)));
        let mut values = vec![(Value::FailedGpuHours, p.failed_gpu_hours), (Value::GpuHours, p.gpu_hours)];
        if let Some(c) = p.failed_cost_usd {
            values.push((Value::FailedCostUsd, c));
        }
        let mut f = finding(
            FindingRule::FailedRun,
            Severity::High,
            format!("Failed run: {} lost{cost}", gpu_time(p.failed_gpu_hours)),
            format!(
                "{} of {} traced belong to processes that did not succeed: {}",
                gpu_time(p.failed_gpu_hours),
                gpu_time(p.gpu_hours),
                p.outcome_evidence
            ),
            "Find the first failure (the exit status or exception, the stderr of the rank that died first), checkpoint often enough that a restart loses little, and track failed and interrupted GPU-hours per job.",
            &values,
        );
        // A failed run is high whatever its share: its results are lost.
        let ns = |h: f64| (h * 3.6e12).round() as u64;
        state_stake(&mut f, ns(p.failed_gpu_hours), ns(p.gpu_hours), price, None);
        out.push(f);
    }
}

/// The time lost to slow steps: on every device, each step's time above the device's
/// median step (nearest rank), summed.
fn slow_step_excess_ns(r: &Report) -> u64 {
    let mut total = 0;
    for d in r.ranks.iter().flat_map(|rk| &rk.devices) {
        let mut durations: Vec<u64> = d.steps.iter().map(|s| s.duration_ns).collect();
        durations.sort_unstable();
        let Some(median) = crate::productive::percentile(&durations, 0.5) else {
            continue;
        };
        total += durations.iter().map(|&x| x.saturating_sub(median)).sum::<u64>();
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hardware::{HardwareReport, XidError};

    fn device(device: u32, hardware: HardwareReport) -> DeviceReport {
        DeviceReport {
            device,
            hardware: Some(hardware),
            ..DeviceReport::default()
        }
    }

    #[test]
    fn xids_and_uncorrected_ecc_errors_make_one_high_finding() {
        let xid = |time_ns, xid| XidError { time_ns, xid };
        let failing = device(
            1,
            HardwareReport {
                xid_error_count: 3,
                xid_errors: vec![xid(10, 79), xid(20, 48), xid(30, 79)],
                ..HardwareReport::default()
            },
        );
        let ecc = device(
            0,
            HardwareReport {
                ecc_uncorrected_errors: Some(2),
                ecc_corrected_errors: Some(40),
                ..HardwareReport::default()
            },
        );
        // Corrected errors alone are not a finding.
        let healthy = device(
            2,
            HardwareReport {
                ecc_uncorrected_errors: Some(0),
                ecc_corrected_errors: Some(40),
                ..HardwareReport::default()
            },
        );
        let mut out = Vec::new();
        gpu_errors(&[(0, &healthy), (3, &failing), (4, &ecc)], &mut out);
        assert_eq!(out.len(), 1);
        let f = &out[0];
        assert_eq!((f.rule, f.severity), (FindingRule::GpuErrors, Severity::High));
        assert!(f.title.contains("rank 3 gpu 1"), "{}", f.title);
        assert_eq!(
            f.evidence,
            "rank 3 gpu 1: 3 XID error(s) (XID 79 ×2, 48); rank 4 gpu 0: 2 uncorrected ECC error(s)"
        );
        assert_eq!(f.values[Value::XidErrors], 3.0);
        assert_eq!(f.values[Value::EccUncorrectedErrors], 2.0);
        assert_eq!(f.values[Value::Devices], 2.0);
        let mut out = Vec::new();
        gpu_errors(&[(0, &healthy)], &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn memory_bound_reads_pm_dram_throughput_where_sampled() {
        // PM sampling: 72% of peak DRAM throughput, whatever NVML says.
        let pm = device(
            0,
            HardwareReport {
                dram_throughput_pct: Some(72.0),
                dram_read_gbps: Some(1500.0),
                dram_write_gbps: Some(700.0),
                sm_active_pct: Some(95.0),
                tensor_active_pct: Some(4.0),
                mem_util_sampled_pct: Some(10.0),
                ..HardwareReport::default()
            },
        );
        // Below the threshold: not memory-bound even with NVML's memory utilization high.
        let low = device(
            1,
            HardwareReport {
                dram_throughput_pct: Some(40.0),
                mem_util_sampled_pct: Some(90.0),
                gpu_util_sampled_pct: Some(100.0),
                ..HardwareReport::default()
            },
        );
        let mut out = Vec::new();
        hardware_findings(&[(2, &pm), (2, &low)], &mut out, 0, None);
        let f: Vec<&Finding> = out.iter().filter(|f| f.rule == FindingRule::MemoryBound).collect();
        assert_eq!(f.len(), 1, "{out:?}");
        assert_eq!(
            f[0].evidence,
            "rank 2 gpu 0: DRAM throughput 72% of peak (CUPTI PM sampling: 1500 GB/s read, 700 GB/s written) with SM active 95% and tensor pipe 4%"
        );
        assert_eq!(f[0].values[Value::DramThroughputPct], 72.0);
        assert_eq!(f[0].values[Value::Devices], 1.0);
        let mut out = Vec::new();
        hardware_findings(&[(2, &low)], &mut out, 0, None);
        assert!(!out.iter().any(|f| f.rule == FindingRule::MemoryBound), "{out:?}");
    }
}
