//! NCCL collectives of A against those of B.
//!
//! Communicator ids are hashes that differ from run to run, so they cannot be
//! matched. A communicator name both runs carry (NCCL ≥ 2.27, e.g.
//! `default_pg`) matches its collectives by (name, operation), whatever the
//! rank count; every other collective matches by (operation, ranks), summed
//! over communicators. Bus bandwidth is the report's own (NCCL-tests', from
//! `gputrace_analysis::nccl_tests_factors`): for several rows it is their
//! time-weighted mean, i.e. the summed bus bytes (`busbw × time`) over the
//! summed time, which for one row is that row's value exactly.

use crate::Delta;
use gputrace_analysis::{CollectiveStat, Report};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// How a row was matched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MatchedBy {
    /// The communicator name (both runs have it) and the operation.
    Name,
    /// The operation and the number of ranks.
    OpNranks,
}

/// A bandwidth in both runs, GB/s.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bandwidth {
    /// In A (null without GPU time or without an NCCL-tests bus factor).
    pub a: Option<f64>,
    /// In B.
    pub b: Option<f64>,
    /// `b − a` (null unless both are known).
    pub delta: Option<f64>,
    /// `delta / a` in percent.
    pub pct: Option<f64>,
}

/// One matched collective row.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CollectiveDelta {
    /// NCCL's operation name.
    pub op: String,
    /// The shared communicator name when matched by name (empty otherwise).
    pub communicator_name: String,
    /// How the row was matched.
    pub matched_by: MatchedBy,
    /// Ranks in the communicator, in A and in B (0 where the run has none of it).
    pub nranks: (u32, u32),
    /// Collectives per GPU (summed over ranks, over the run's active GPUs).
    pub count: Delta,
    /// Bytes as NCCL reports them per rank, summed, per GPU.
    pub bytes: Delta,
    /// GPU time of the linked collectives per GPU, ns.
    pub time: Delta,
    /// Bus bandwidth (NCCL-tests), GB/s.
    pub busbw_gbps: Bandwidth,
}

#[derive(Default)]
struct Sums {
    nranks: u32,
    count: u64,
    bytes: u64,
    time: u64,
    /// Σ busbw × time over rows with a bus bandwidth, bytes.
    bus_bytes: f64,
    /// Σ time of those rows, ns.
    bus_time: u64,
}

impl Sums {
    fn add(&mut self, c: &CollectiveStat) {
        self.nranks = self.nranks.max(c.nranks);
        self.count += c.count;
        self.bytes += c.bytes;
        self.time += c.time_ns;
        if let Some(bw) = c.busbw_gbps {
            // GB/s × ns = bytes.
            self.bus_bytes += bw * c.time_ns as f64;
            self.bus_time += c.time_ns;
        }
    }

    fn busbw(&self) -> Option<f64> {
        (self.bus_time > 0).then(|| self.bus_bytes / self.bus_time as f64)
    }
}

/// Match key: (operation, name) or (operation, ranks).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Name(String, String),
    OpNranks(String, u32),
}

/// The collectives of `a` against those of `b`, biggest bus-bandwidth drop
/// first; rows without a bandwidth on both sides follow, biggest time
/// regression first.
pub fn diff_collectives(a: &Report, b: &Report) -> Vec<CollectiveDelta> {
    let names = |r: &Report| -> BTreeSet<(String, String)> {
        r.collectives
            .iter()
            .filter(|c| !c.communicator_name.is_empty())
            .map(|c| (c.op.clone(), c.communicator_name.clone()))
            .collect()
    };
    let shared: BTreeSet<(String, String)> = names(a).intersection(&names(b)).cloned().collect();
    let key = |c: &CollectiveStat| {
        let named = (c.op.clone(), c.communicator_name.clone());
        if shared.contains(&named) {
            Key::Name(named.0, named.1)
        } else {
            Key::OpNranks(c.op.clone(), c.nranks)
        }
    };
    let (ga, gb) = (crate::scaling::gpus(a).max(1), crate::scaling::gpus(b).max(1));
    let mut rows: BTreeMap<Key, (Sums, Sums)> = BTreeMap::new();
    for c in &a.collectives {
        rows.entry(key(c)).or_default().0.add(c);
    }
    for c in &b.collectives {
        rows.entry(key(c)).or_default().1.add(c);
    }
    let mut out: Vec<CollectiveDelta> = rows
        .into_iter()
        .map(|(k, (x, y))| {
            let (op, communicator_name, matched_by) = match k {
                Key::Name(op, name) => (op, name, MatchedBy::Name),
                Key::OpNranks(op, _) => (op, String::new(), MatchedBy::OpNranks),
            };
            let (bwa, bwb) = (x.busbw(), y.busbw());
            let delta = bwa.zip(bwb).map(|(p, q)| q - p);
            CollectiveDelta {
                op,
                communicator_name,
                matched_by,
                nranks: (x.nranks, y.nranks),
                count: Delta::new("count", x.count / ga, y.count / gb),
                bytes: Delta::new("bytes", x.bytes / ga, y.bytes / gb),
                time: Delta::new("time", x.time / ga, y.time / gb),
                busbw_gbps: Bandwidth {
                    a: bwa,
                    b: bwb,
                    delta,
                    pct: delta.zip(bwa).filter(|(_, p)| *p > 0.0).map(|(d, p)| 100.0 * d / p),
                },
            }
        })
        .collect();
    out.sort_by(|x, y| match (x.busbw_gbps.delta, y.busbw_gbps.delta) {
        (Some(p), Some(q)) => p.total_cmp(&q),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => y.time.delta.cmp(&x.time.delta),
    });
    out
}
