//! One pass over one rank's trace, kept as a small summary: its
//! collectives, its steps, and per step its GPU compute time and the GPU
//! idle time the host caused. Memory while reading is one rank's kernels
//! and launch times; afterwards only the summary stays.

use gputrace_format::*;
use std::collections::HashMap;

/// Is this kernel communication? The same default list `gputrace report`
/// uses (NCCL in all naming eras, RCCL, MSCCL, DeepEP, NVSHMEM, custom
/// all-reduce kernels): one definition for both commands.
pub fn is_comm_kernel(name: &str) -> bool {
    use std::sync::OnceLock;
    static CLASSIFIER: OnceLock<gputrace_analysis::Classifier> = OnceLock::new();
    CLASSIFIER.get_or_init(gputrace_analysis::Classifier::default).kernel(name) == gputrace_analysis::Category::Communication
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

/// Per step: (start, end, compute busy ns, host-caused idle ns).
#[derive(Clone, Copy, Debug, Default)]
pub struct StepStat {
    /// Step start (rank clock).
    pub start: u64,
    /// Step end (rank clock).
    pub end: u64,
    /// Sum of compute-kernel durations in the step.
    pub compute_ns: u64,
    /// GPU idle in the step while the next work had not been launched yet.
    pub host_idle_ns: u64,
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
    /// Whole-trace compute and host-caused idle (when there are no steps).
    pub total: StepStat,
}

struct K {
    start: u64,
    end: u64,
    corr: u32,
    comm: bool,
}

/// Read one trace into its summary.
pub fn summarize(t: &TraceFile, fallback_rank: u32) -> Result<RankSummary, FormatError> {
    let mut kernels: Vec<K> = Vec::new();
    let mut launch: HashMap<u32, u64> = HashMap::new();
    let mut exact: Vec<CollRec> = Vec::new();
    let mut steps: Vec<(u64, u64)> = Vec::new();
    let mut comm_names: HashMap<StringId, (bool, String)> = HashMap::new();
    for e in t.events() {
        match e? {
            Event::Kernel(k) => {
                let (comm, _) = comm_names
                    .entry(k.name)
                    .or_insert_with(|| {
                        let n = t.name(k.name);
                        (is_comm_kernel(&n), op_from_kernel(&n))
                    })
                    .clone();
                kernels.push(K {
                    start: k.start.0,
                    end: k.end.0,
                    corr: k.correlation.0,
                    comm,
                });
            }
            Event::Memcpy(m) => kernels.push(K {
                start: m.start.0,
                end: m.end.0,
                corr: m.correlation.0,
                comm: m.kind == CopyKind::PTOP,
            }),
            Event::Memset(m) => kernels.push(K {
                start: m.start.0,
                end: m.end.0,
                corr: m.correlation.0,
                comm: false,
            }),
            Event::Api(a) if a.correlation.0 != 0 => {
                launch.insert(a.correlation.0, a.start.0);
            }
            Event::Collective(c) => exact.push(CollRec {
                key: CollKey {
                    comm: c.comm.0,
                    op: t.name(c.op).into_owned(),
                    seq: c.seq,
                },
                start: c.start.0,
                end: c.end.0,
                bytes: c.bytes,
                nranks: c.nranks,
            }),
            Event::Marker(m) if t.name(m.name).starts_with("ProfilerStep") => steps.push((m.start.0, m.end.0)),
            _ => {}
        }
    }
    kernels.sort_by_key(|k| (k.start, k.end));
    steps.sort();
    let exact_keys = !exact.is_empty();
    let mut collectives = if exact_keys {
        exact
    } else {
        // Order matching: the n-th kernel of an operation is that operation's
        // n-th collective (per rank, in start order).
        let mut seq: HashMap<String, u64> = HashMap::new();
        let mut names: HashMap<u32, String> = HashMap::new();
        for e in t.events_of(&[EventKind::Kernel]) {
            if let Event::Kernel(k) = e? {
                let n = t.name(k.name);
                if is_comm_kernel(&n) {
                    names.insert(k.correlation.0, op_from_kernel(&n));
                }
            }
        }
        let mut out = Vec::new();
        for k in kernels.iter().filter(|k| k.comm) {
            let op = names.get(&k.corr).cloned().unwrap_or_else(|| "PtoP".into());
            let s = seq.entry(op.clone()).or_insert(0);
            *s += 1;
            out.push(CollRec {
                key: CollKey { comm: 0, op, seq: *s },
                start: k.start,
                end: k.end,
                bytes: 0,
                nranks: 0,
            });
        }
        out
    };
    collectives.sort_by_key(|c| c.start);

    // Compute time and host-caused idle, per step window (or whole trace).
    let windows: Vec<(u64, u64)> = if steps.is_empty() {
        vec![(
            kernels.first().map_or(0, |k| k.start),
            kernels.iter().map(|k| k.end).max().unwrap_or(0),
        )]
    } else {
        steps.clone()
    };
    let mut stats: Vec<StepStat> = windows
        .iter()
        .map(|&(s, e)| StepStat {
            start: s,
            end: e,
            ..Default::default()
        })
        .collect();
    let window_of = |t: u64| windows.partition_point(|w| w.0 <= t).checked_sub(1).filter(|&i| t < windows[i].1);
    let mut busy_until = 0u64;
    for k in &kernels {
        if let Some(w) = window_of(k.start) {
            if !k.comm {
                stats[w].compute_ns += k.end.saturating_sub(k.start);
            }
            // The part of an idle gap that lies in this window is
            // host-caused if this work was launched only after the gap began.
            let gap_start = busy_until.max(windows[w].0);
            if busy_until > 0 && k.start > gap_start {
                let launched = launch.get(&k.corr).copied().unwrap_or(0);
                if launched >= busy_until {
                    stats[w].host_idle_ns += k.start - gap_start;
                }
            }
        }
        busy_until = busy_until.max(k.end);
    }
    let total = stats.iter().fold(StepStat::default(), |a, s| StepStat {
        start: 0,
        end: 0,
        compute_ns: a.compute_ns + s.compute_ns,
        host_idle_ns: a.host_idle_ns + s.host_idle_ns,
    });
    let h = t.header();
    Ok(RankSummary {
        rank: h.rank.rank.map_or(fallback_rank, |r| r.0),
        path: t.path().display().to_string(),
        host: h.hostname.clone(),
        collectives,
        exact_keys,
        steps: if steps.is_empty() { Vec::new() } else { stats },
        total,
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
