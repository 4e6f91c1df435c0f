//! NCCL collectives (the NCCL profiler plugin's `Collective` events): totals
//! per (communicator, operation) with NCCL-tests bandwidths, and the labels
//! that attribute exposed communication to operations.
//!
//! Per rank, [`CollAcc`] gathers the collectives during the analysis's first
//! pass (the one that reads markers and losses): counts, bytes, algorithms
//! and protocols per (communicator, operation), and one small record per
//! linked collective (`correlation != 0`). [`CollAcc::finish`] then turns
//! those records into GPU time per operation (each kernel counted once per
//! operation it ran) and into a per-device table correlation → operation
//! label that the device sweep uses to attribute exposed communication.
//! `docs/metrics.md` defines every number.

use crate::report::{CollectiveStat, CommunicatorStat};
use gputrace_format::{Collective, Communicator, StringId, TraceFile};
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet};

/// Label of communication kernels no collective is linked to.
pub const UNATTRIBUTED: &str = "unattributed";
/// Label of peer-to-peer copies no collective is linked to.
pub const PEER_COPY: &str = "peer-copy";
/// Index of [`UNATTRIBUTED`] in [`Links::labels`].
pub(crate) const LABEL_UNATTRIBUTED: u32 = 0;
/// Index of [`PEER_COPY`] in [`Links::labels`].
pub(crate) const LABEL_PEER_COPY: u32 = 1;

/// How NCCL-tests turns a collective's size and time into bandwidths.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct NcclTestsFactors {
    /// NCCL-tests' data size over the bytes NCCL reports per rank (`count` × element size):
    /// `nranks` for AllGather, ReduceScatter, AlltoAll, Gather and Scatter (NCCL's count is
    /// the per-rank part there, NCCL-tests' size the whole buffer), 1 otherwise.
    pub size_multiplier: u64,
    /// Bus bandwidth over algorithm bandwidth: `2(n-1)/n` for AllReduce, `(n-1)/n` for
    /// AllGather, ReduceScatter, AlltoAll, Gather and Scatter, 1 for Broadcast, Reduce,
    /// Send, Recv and SendRecv.
    pub bus_factor: f64,
}

pub(crate) use gputrace_classify::op_key;

/// NCCL-tests' factors for operation `op` (NCCL's function name, any case; `AllToAll` and
/// `AlltoAll` both match) on `nranks` ranks. `None` for an operation NCCL-tests does not
/// measure (its bus bandwidth is then unknown).
pub fn nccl_tests_factors(op: &str, nranks: u32) -> Option<NcclTestsFactors> {
    let n = f64::from(nranks.max(1));
    let (size_multiplier, bus_factor) = match op_key(op).as_str() {
        "allreduce" => (1, 2.0 * (n - 1.0) / n),
        "allgather" | "reducescatter" | "alltoall" | "gather" | "scatter" => (u64::from(nranks.max(1)), (n - 1.0) / n),
        "broadcast" | "bcast" | "reduce" | "send" | "recv" | "sendrecv" => (1, 1.0),
        _ => return None,
    };
    Some(NcclTestsFactors {
        size_multiplier,
        bus_factor,
    })
}

/// One (communicator, operation) of one rank, while the file is read.
#[derive(Clone, Debug)]
struct Group {
    comm: u64,
    op: StringId,
    nranks: u32,
    count: u64,
    bytes: u64,
    linked: u64,
    linked_bytes: u64,
    kernels: u64,
    time: u64,
    /// (algorithm, count), few entries.
    algorithms: Vec<(StringId, u64)>,
    /// (protocol, count), few entries.
    protocols: Vec<(StringId, u64)>,
}

/// A linked collective: what is needed to count each kernel's time once per operation and
/// to label the kernel (24 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Linked {
    device: u32,
    corr: u32,
    group: u32,
    dur: u64,
}

fn tally(v: &mut Vec<(StringId, u64)>, id: StringId) {
    match v.iter_mut().find(|(k, _)| *k == id) {
        Some(e) => e.1 += 1,
        None => v.push((id, 1)),
    }
}

/// The collectives of one rank, gathered in any order.
#[derive(Debug, Default)]
pub(crate) struct CollAcc {
    index: FxHashMap<(u64, StringId), u32>,
    groups: Vec<Group>,
    linked: Vec<Linked>,
}

/// One (communicator, operation) of one rank, with names resolved.
#[derive(Clone, Debug)]
pub(crate) struct CollectiveAgg {
    pub comm: u64,
    pub op: String,
    pub nranks: u32,
    pub count: u64,
    pub bytes: u64,
    pub linked: u64,
    pub linked_bytes: u64,
    pub kernels: u64,
    pub time: u64,
    pub algorithms: BTreeMap<String, u64>,
    pub protocols: BTreeMap<String, u64>,
}

/// Which operation each communication kernel of a rank ran.
#[derive(Clone, Debug)]
pub(crate) struct Links {
    /// Label names: [`UNATTRIBUTED`], [`PEER_COPY`], then operation names (several operations
    /// in one kernel: their names sorted and joined with `+`).
    pub labels: Vec<String>,
    /// Per device: (correlation, label), sorted by correlation, one entry per correlation.
    pub by_device: BTreeMap<u32, Vec<(u32, u32)>>,
}

impl Links {
    /// The label of the work with correlation `corr` on a device whose table is `table`.
    pub fn label(table: &[(u32, u32)], corr: u32) -> Option<u32> {
        if corr == 0 {
            return None;
        }
        table.binary_search_by_key(&corr, |e| e.0).ok().map(|i| table[i].1)
    }
}

impl CollAcc {
    /// Count one collective.
    pub fn add(&mut self, c: &Collective) {
        let next = self.groups.len() as u32;
        let g = *self.index.entry((c.comm.0, c.op)).or_insert(next);
        if g == next {
            self.groups.push(Group {
                comm: c.comm.0,
                op: c.op,
                nranks: 0,
                count: 0,
                bytes: 0,
                linked: 0,
                linked_bytes: 0,
                kernels: 0,
                time: 0,
                algorithms: Vec::new(),
                protocols: Vec::new(),
            });
        }
        let e = &mut self.groups[g as usize];
        e.nranks = e.nranks.max(c.nranks);
        e.count += 1;
        e.bytes += c.bytes;
        tally(&mut e.algorithms, c.algorithm);
        tally(&mut e.protocols, c.protocol);
        if c.correlation.0 != 0 {
            e.linked += 1;
            e.linked_bytes += c.bytes;
            self.linked.push(Linked {
                device: c.device.0,
                corr: c.correlation.0,
                group: g,
                dur: c.end.0.saturating_sub(c.start.0),
            });
        }
    }

    /// GPU time per operation and the per-device label tables. A kernel (one correlation id
    /// on one device) that ran several collectives of one (communicator, operation) adds its
    /// time to that operation once; a kernel that ran several operations (a grouped Send and
    /// Recv) adds it to each.
    pub fn finish(mut self, file: &TraceFile) -> (Vec<CollectiveAgg>, Links) {
        self.linked.sort_unstable();
        let mut labels: Vec<String> = vec![UNATTRIBUTED.to_string(), PEER_COPY.to_string()];
        let mut label_ids: FxHashMap<String, u32> = labels.iter().enumerate().map(|(i, l)| (l.clone(), i as u32)).collect();
        let mut by_device: BTreeMap<u32, Vec<(u32, u32)>> = BTreeMap::new();
        // Label by the operations' string ids (sorted, deduplicated), so that
        // the label text is made once per distinct set, not once per kernel.
        let mut label_of: FxHashMap<Vec<StringId>, u32> = FxHashMap::default();
        let mut key: Vec<StringId> = Vec::new();
        for run in self.linked.chunk_by(|a, b| (a.device, a.corr) == (b.device, b.corr)) {
            // Sorted by group within the run: each group's first entry counts the kernel.
            key.clear();
            for group_run in run.chunk_by(|a, b| a.group == b.group) {
                let g = &mut self.groups[group_run[0].group as usize];
                g.kernels += 1;
                g.time += group_run.iter().map(|l| l.dur).max().unwrap_or(0);
                key.push(g.op);
            }
            key.sort_unstable();
            key.dedup();
            let id = match label_of.get(&key) {
                Some(&id) => id,
                None => {
                    // The operation names sorted and joined (two ids may hold one text).
                    let ops: BTreeSet<String> = key.iter().map(|&op| file.name(op).into_owned()).collect();
                    let label = ops.into_iter().collect::<Vec<_>>().join("+");
                    let next = labels.len() as u32;
                    let id = *label_ids.entry(label.clone()).or_insert(next);
                    if id == next {
                        labels.push(label);
                    }
                    label_of.insert(key.clone(), id);
                    id
                }
            };
            by_device.entry(run[0].device).or_default().push((run[0].corr, id));
        }
        let name = |id: StringId| match file.name(id).into_owned() {
            s if s.is_empty() => "unknown".to_string(),
            s => s,
        };
        let aggs = self
            .groups
            .iter()
            .map(|g| CollectiveAgg {
                comm: g.comm,
                op: name(g.op),
                nranks: g.nranks,
                count: g.count,
                bytes: g.bytes,
                linked: g.linked,
                linked_bytes: g.linked_bytes,
                kernels: g.kernels,
                time: g.time,
                algorithms: g.algorithms.iter().fold(BTreeMap::new(), |mut m, (k, n)| {
                    *m.entry(name(*k)).or_insert(0) += n;
                    m
                }),
                protocols: g.protocols.iter().fold(BTreeMap::new(), |mut m, (k, n)| {
                    *m.entry(name(*k)).or_insert(0) += n;
                    m
                }),
            })
            .collect();
        (aggs, Links { labels, by_device })
    }
}

/// The communicator's id as the exporters write it: 16 hex digits.
fn comm_hex(id: u64) -> String {
    format!("{id:016x}")
}

/// Communicators and (communicator, operation) rows over all ranks: per rank (sorted by
/// rank), its number, its trace's communicator table and its collectives' aggregates.
pub(crate) fn merge<'a>(
    ranks: impl IntoIterator<Item = (u32, &'a [Communicator], &'a [CollectiveAgg])>,
) -> (Vec<CommunicatorStat>, Vec<CollectiveStat>) {
    #[derive(Default)]
    struct Comm {
        name: String,
        nranks: u32,
        nodes: u32,
        ranks: BTreeSet<u32>,
        collectives: u64,
    }
    let mut comms: BTreeMap<u64, Comm> = BTreeMap::new();
    let mut rows: BTreeMap<(u64, String), CollectiveAgg> = BTreeMap::new();
    let note = |comms: &mut BTreeMap<u64, Comm>, rank: u32, c: &Communicator| {
        let e = comms.entry(c.id.0).or_default();
        if e.name.is_empty() {
            e.name = c.name.clone();
        }
        e.nranks = e.nranks.max(c.nranks);
        e.nodes = e.nodes.max(c.nodes);
        e.ranks.insert(rank);
    };
    for (rank, communicators, collectives) in ranks {
        for c in communicators {
            note(&mut comms, rank, c);
        }
        for a in collectives {
            let e = comms.entry(a.comm).or_default();
            e.nranks = e.nranks.max(a.nranks);
            e.ranks.insert(rank);
            e.collectives += a.count;
            match rows.get_mut(&(a.comm, a.op.clone())) {
                None => {
                    rows.insert((a.comm, a.op.clone()), a.clone());
                }
                Some(m) => {
                    m.nranks = m.nranks.max(a.nranks);
                    m.count += a.count;
                    m.bytes += a.bytes;
                    m.linked += a.linked;
                    m.linked_bytes += a.linked_bytes;
                    m.kernels += a.kernels;
                    m.time += a.time;
                    for (k, n) in &a.algorithms {
                        *m.algorithms.entry(k.clone()).or_insert(0) += n;
                    }
                    for (k, n) in &a.protocols {
                        *m.protocols.entry(k.clone()).or_insert(0) += n;
                    }
                }
            }
        }
    }
    let mut stats: Vec<CollectiveStat> = rows
        .into_values()
        .map(|a| {
            let factors = nccl_tests_factors(&a.op, a.nranks);
            let size_multiplier = factors.map_or(1, |f| f.size_multiplier);
            let algbw = (a.time > 0).then(|| (a.linked_bytes * size_multiplier) as f64 / a.time as f64);
            CollectiveStat {
                communicator: comm_hex(a.comm),
                communicator_name: comms.get(&a.comm).map(|c| c.name.clone()).unwrap_or_default(),
                op: a.op,
                nranks: a.nranks,
                count: a.count,
                linked: a.linked,
                kernels: a.kernels,
                bytes: a.bytes,
                linked_bytes: a.linked_bytes,
                time_ns: a.time,
                mean_ns: a.time / a.linked.max(1),
                algorithms: a.algorithms,
                protocols: a.protocols,
                size_multiplier,
                bus_factor: factors.map(|f| f.bus_factor),
                algbw_gbps: algbw,
                busbw_gbps: algbw.and_then(|bw| factors.map(|f| bw * f.bus_factor)),
            }
        })
        .collect();
    stats.sort_by(|a, b| {
        b.time_ns
            .cmp(&a.time_ns)
            .then(b.count.cmp(&a.count))
            .then_with(|| (&a.communicator, &a.op).cmp(&(&b.communicator, &b.op)))
    });
    let comms = comms
        .into_iter()
        .map(|(id, c)| CommunicatorStat {
            id: comm_hex(id),
            name: c.name,
            nranks: c.nranks,
            nodes: c.nodes,
            ranks: c.ranks.into_iter().collect(),
            collectives: c.collectives,
        })
        .collect();
    (comms, stats)
}

/// Bytes in binary units: `512 B`, `64.00 KiB`, `18.00 GiB`.
pub fn human_bytes(b: u64) -> String {
    human_bytes_to(b, 2)
}

/// Bytes in binary units with `decimals` after the point: `512 B`, `18.0 GiB` (1).
pub fn human_bytes_to(b: u64, decimals: usize) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.decimals$} {}", UNITS[u])
}

/// "RING×120, TREE×8": most first, then by name.
pub fn counts_text(m: &BTreeMap<String, u64>) -> String {
    let mut v: Vec<(&String, &u64)> = m.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    v.iter().map(|(k, n)| format!("{k}×{n}")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_tests_factors_per_operation() {
        let f = |op: &str, n| nccl_tests_factors(op, n).map(|f| (f.size_multiplier, f.bus_factor));
        assert_eq!(f("AllReduce", 8), Some((1, 1.75)));
        assert_eq!(f("AllGather", 8), Some((8, 0.875)));
        assert_eq!(f("ReduceScatter", 4), Some((4, 0.75)));
        assert_eq!(f("AlltoAll", 4), Some((4, 0.75)));
        assert_eq!(f("AllToAll", 4), Some((4, 0.75)));
        assert_eq!(f("all_to_all", 2), Some((2, 0.5)));
        for op in ["Broadcast", "Reduce", "Send", "Recv", "SendRecv"] {
            assert_eq!(f(op, 16), Some((1, 1.0)), "{op}");
        }
        assert_eq!(f("AllReduce", 1), Some((1, 0.0)), "one rank moves nothing over the bus");
        assert_eq!(f("Barrier", 4), None);
        assert_eq!(f("", 4), None);
    }

    #[test]
    fn counts_text_most_first() {
        let m: BTreeMap<String, u64> = [("TREE".to_string(), 8), ("RING".to_string(), 120), ("NVLS".to_string(), 8)].into();
        assert_eq!(counts_text(&m), "RING×120, NVLS×8, TREE×8");
        assert_eq!(counts_text(&BTreeMap::new()), "");
    }

    #[test]
    fn human_bytes_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1024), "1.00 KiB");
        assert_eq!(human_bytes(64 << 20), "64.00 MiB");
        assert_eq!(human_bytes(288 * (64 << 20)), "18.00 GiB");
    }
}
