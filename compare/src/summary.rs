//! One rank's trace, kept as a small summary: its collectives (read here)
//! and, per step, its compute time and idle time by cause (from the same
//! analysis `gputrace report` makes, so both commands agree). Afterwards
//! only the summary stays.

use gputrace_analysis::{Category, Classifier};
use gputrace_format::*;
use std::collections::{BTreeMap, HashMap};

/// Libraries whose collectives NCCL's profiler plugin identifies (communicator and
/// sequence number); other libraries' communication kernels are matched across ranks
/// by their order within their stream.
const NCCL_FAMILY: &[&str] = &["NCCL", "RCCL", "MSCCL"];

/// Is this kernel communication under the built-in rules (the same table `gputrace
/// report` uses: NCCL in all naming eras, RCCL, MSCCL, DeepEP, NVSHMEM, custom
/// all-reduce kernels)?
pub fn is_comm_kernel(name: &str) -> bool {
    use std::sync::OnceLock;
    static CLASSIFIER: OnceLock<Classifier> = OnceLock::new();
    CLASSIFIER.get_or_init(Classifier::default).kernel(name) == Category::Communication
}

/// The collective operation a communication kernel runs, from its name
/// (`ncclDevKernel_AllReduce_Sum_bf16_RING_LL` → `AllReduce`).
pub fn op_from_kernel(name: &str) -> String {
    let base = name.split('(').next().unwrap_or(name);
    for part in base.split('_').skip(1) {
        if !part.is_empty() && part.chars().next().is_some_and(|c| c.is_ascii_uppercase()) {
            return part.to_string();
        }
    }
    base.to_string()
}

/// How a collective is identified across ranks.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CollKey {
    /// Communicator id (0 when unknown).
    pub comm: u64,
    /// Operation name.
    pub op: String,
    /// Sequence number (NCCL's, or the order of the operation on its
    /// communicator stream).
    pub seq: u64,
}

/// One collective on one rank.
#[derive(Clone, Debug)]
pub struct CollRec {
    /// Identity.
    pub key: CollKey,
    /// Start on this rank's clock.
    pub start: u64,
    /// End on this rank's clock.
    pub end: u64,
    /// Bytes, when known (0 otherwise).
    pub bytes: u64,
    /// Ranks in the communicator, when known.
    pub nranks: u32,
}

/// One step (or the whole trace) of a rank's busiest GPU.
#[derive(Clone, Copy, Debug, Default)]
pub struct StepStat {
    /// Step start (rank clock).
    pub start: u64,
    /// Step end (rank clock).
    pub end: u64,
    /// Compute time (union of compute kernels).
    pub compute_ns: u64,
    /// Idle while the CPU had not launched the next work yet.
    pub host_idle_ns: u64,
    /// Idle with the next work already launched (launch/dependency latency).
    pub latency_idle_ns: u64,
    /// Idle while the CPU was blocked in a synchronization call.
    pub sync_idle_ns: u64,
}

impl StepStat {
    fn from_report(start: u64, end: u64, compute_ns: u64, idle: &gputrace_analysis::IdleCauses) -> StepStat {
        StepStat {
            start,
            end,
            compute_ns,
            host_idle_ns: idle.host_bound_ns,
            latency_idle_ns: idle.launch_latency_ns,
            sync_idle_ns: idle.synchronization_ns,
        }
    }
}

/// What `compare` keeps of a rank.
#[derive(Clone, Debug)]
pub struct RankSummary {
    /// Rank (from the header, else the input position).
    pub rank: u32,
    /// File it came from.
    pub path: String,
    /// Host name.
    pub host: String,
    /// Collectives, in start order.
    pub collectives: Vec<CollRec>,
    /// Whether the collectives carry NCCL's identity (communicator, seq).
    pub exact_keys: bool,
    /// Steps from `ProfilerStep#N` markers (empty if none).
    pub steps: Vec<StepStat>,
    /// The whole trace (start and end are 0).
    pub total: StepStat,
    /// The rank's productive numbers (steps, step time, tokens/s), as `gputrace report` computes them.
    pub productive: gputrace_analysis::Productive,
    /// Communication kernels of libraries without collective identities (DeepEP,
    /// custom all-reduce, NVSHMEM, ...), keyed by their order within their stream:
    /// how many per library.
    pub ordered_by_stream: BTreeMap<String, u64>,
    /// What its (busiest) GPU's own counters said, when the trace has them.
    pub hardware: Option<gputrace_analysis::hardware::HardwareReport>,
    /// What its trace lost (a damaged tail, no trailer, lost records), `None` when whole.
    pub losses: Option<String>,
}

/// Read one trace into its summary.
pub fn summarize(t: &TraceFile, fallback_rank: u32) -> Result<RankSummary, gputrace_analysis::AnalysisError> {
    summarize_with(
        t,
        fallback_rank,
        &gputrace_analysis::ProductiveOptions::default(),
        &Classifier::default(),
    )
}

/// [`summarize`], with token counts, model FLOPs and run records for the productive
/// numbers, and the user's classification rules.
pub fn summarize_with(
    t: &TraceFile,
    fallback_rank: u32,
    productive: &gputrace_analysis::ProductiveOptions,
    classifier: &Classifier,
) -> Result<RankSummary, gputrace_analysis::AnalysisError> {
    // Compute and idle by cause: the report's analysis of this rank.
    let opts = gputrace_analysis::Options {
        top_gaps: 0,
        top_kernels: 0,
        infer_steps: false,
        threads: 1,
        productive: productive.clone(),
        classifier: classifier.clone(),
        ..Default::default()
    };
    let analysis = gputrace_analysis::analyze_file(t, fallback_rank, &opts)?;
    summarize_report(t, analysis.report, classifier)
}

/// The summary of trace `t` from its report (`gputrace report`'s analysis of the same
/// trace, which this reuses for compute, idle and steps): only the collectives, or the
/// communication kernels, are read again.
pub fn summarize_report(
    t: &TraceFile,
    report: gputrace_analysis::RankReport,
    classifier: &Classifier,
) -> Result<RankSummary, gputrace_analysis::AnalysisError> {
    // One GPU per rank is the norm; with several, the busiest one.
    let dev = report.devices.iter().max_by_key(|d| d.time.compute_ns);
    let steps: Vec<StepStat> = dev
        .map(|d| {
            d.steps
                .iter()
                .map(|s| StepStat::from_report(s.start_ns, s.end_ns, s.compute_ns, &s.idle_causes))
                .collect()
        })
        .unwrap_or_default();
    let total = dev.map_or_else(StepStat::default, |d| {
        StepStat::from_report(0, 0, d.time.compute_ns, &d.idle_causes)
    });
    let hardware = dev.and_then(|d| d.hardware.clone());

    // Collectives: NCCL's identities when the trace has them, otherwise
    // the n-th kernel of an operation is that operation's n-th collective.
    let mut collectives = Vec::new();
    for e in t.events_of(&[EventKind::Collective]) {
        if let Event::Collective(c) = e? {
            collectives.push(CollRec {
                key: CollKey {
                    comm: c.comm.0,
                    op: t.name(c.op).into_owned(),
                    seq: c.seq,
                },
                start: c.start.0,
                end: c.end.0,
                bytes: c.bytes,
                nranks: c.nranks,
            });
        }
    }
    let exact_keys = !collectives.is_empty();
    // Communication kernels by name: NCCL-family kernels (without identities: keyed by
    // their operation's order on the rank, as before NCCL's plugin existed) and other
    // libraries' kernels (keyed by library, operation and stream, and their order there).
    enum Comm {
        NcclFamily(String),
        Ordered { library: String, op: String },
    }
    let mut kinds: HashMap<StringId, Option<Comm>> = HashMap::new();
    // (start, end, key op, stream or None)
    let mut comm: Vec<(u64, u64, String, Option<u32>)> = Vec::new();
    let mut ordered_by_stream: BTreeMap<String, u64> = BTreeMap::new();
    for e in t.events_of(&[EventKind::Kernel, EventKind::Memcpy]) {
        match e? {
            Event::Kernel(k) => {
                let kind = kinds.entry(k.name).or_insert_with(|| {
                    let n = t.name(k.name);
                    let rule = classifier.rule_for(&n)?;
                    let r = classifier.rule(rule);
                    if r.category != Category::Communication {
                        return None;
                    }
                    Some(if NCCL_FAMILY.contains(&r.library.as_str()) {
                        Comm::NcclFamily(op_from_kernel(&n))
                    } else {
                        Comm::Ordered {
                            library: r.library.clone(),
                            op: classifier.operation(Some(rule), &n),
                        }
                    })
                });
                match kind {
                    Some(Comm::NcclFamily(op)) if !exact_keys => comm.push((k.start.0, k.end.0, op.clone(), None)),
                    Some(Comm::Ordered { library, op }) => {
                        *ordered_by_stream.entry(library.clone()).or_insert(0) += 1;
                        comm.push((k.start.0, k.end.0, format!("{library} {op}"), Some(k.stream.0)));
                    }
                    _ => {}
                }
            }
            Event::Memcpy(m) if !exact_keys && gputrace_analysis::is_peer_copy(&m) => comm.push((m.start.0, m.end.0, "PtoP".into(), None)),
            _ => {}
        }
    }
    comm.sort();
    let mut seq: HashMap<(String, Option<u32>), u64> = HashMap::new();
    for (start, end, op, stream) in comm {
        let s = seq.entry((op.clone(), stream)).or_insert(0);
        *s += 1;
        let op = match stream {
            Some(st) => format!("{op} (stream {st})"),
            None => op,
        };
        collectives.push(CollRec {
            key: CollKey { comm: 0, op, seq: *s },
            start,
            end,
            bytes: 0,
            nranks: 0,
        });
    }
    collectives.sort_by_key(|c| c.start);
    let h = t.header();
    let losses = gputrace_analysis::describe_losses(&report.losses);
    Ok(RankSummary {
        losses,
        rank: report.rank,
        path: t.path().display().to_string(),
        host: h.hostname.clone(),
        collectives,
        exact_keys,
        steps,
        total,
        productive: report.productive,
        ordered_by_stream,
        hardware,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names() {
        assert!(is_comm_kernel(
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
        ));
        assert!(is_comm_kernel("ncclKernel_AllGather_RING_LL_Sum_int8_t"));
        assert!(is_comm_kernel("ncclSymkDevKernel_AllReduce_RSxLDMC"));
        assert!(!is_comm_kernel("ampere_sgemm_128x64_tn"));
        assert_eq!(op_from_kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)"), "AllReduce");
        assert_eq!(op_from_kernel("ncclKernel_AllGather_RING_LL_Sum_int8_t"), "AllGather");
        assert_eq!(
            op_from_kernel("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"),
            "SendRecv"
        );
    }
}
