//! NCCL collectives: the per-(communicator, operation) table with NCCL-tests
//! bandwidths, and exposed communication split by operation. Hand-made
//! traces check every number; a brute-force check over random timelines and
//! the synthetic job check the identity sum(by op) == exposed communication.

use gputrace_analysis::*;
use gputrace_format::*;
use gputrace_synth::{schedule, write_rank, JobConfig};
use gputrace_text::render_text;
use std::collections::BTreeMap;

mod util;
use util::*;

const A: u64 = 0xa;
const B: u64 = 0xb;
const C: u64 = 0xc;
const MS: u64 = 1_000_000;
const US: u64 = 1_000;
const AR: &str = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL";

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-9)
}

fn by_op(pairs: &[(&str, u64)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

fn row<'a>(r: &'a Report, comm: u64, op: &str) -> &'a CollectiveStat {
    let id = format!("{comm:016x}");
    r.collectives
        .iter()
        .find(|c| c.communicator == id && c.op == op)
        .unwrap_or_else(|| panic!("no row ({id}, {op}) in {:#?}", r.collectives))
}

/// The hand-made trace of `every_number`: device 0 with compute, linked, grouped, coalesced,
/// unlinked and copy-engine communication; device 1 with a kernel whose correlation id only
/// device 0's collective has.
fn hand_made() -> TraceFile {
    let mut b = Builder::new(Header::default());
    b.communicators(&[(A, "dp", 4, 1), (B, "pp", 2, 0)]);
    // Compute.
    b.kernel(0, 7, "gemm", 0, 1000, 1).kernel(0, 7, "gemm", 2000, 2500, 2);
    // Broadcast hidden under the gemm: 0 exposed.
    b.kernel(0, 15, "ncclDevKernel_Broadcast_RING_LL", 100, 300, 15);
    b.collective(0, A, "Broadcast", 4, 2000, "RING", "LL", 100, 300, 15);
    // AllReduce [800, 1500): exposed [1000, 1500).
    b.kernel(0, 13, AR, 800, 1500, 10);
    b.collective(0, A, "AllReduce", 4, 7000, "RING", "LL", 800, 1500, 10);
    // AllGather [1400, 1800) overlaps the AllReduce on [1400, 1500): the AllReduce started
    // first and keeps it; the AllGather is exposed on [1500, 1800).
    b.kernel(0, 14, "ncclDevKernel_AllGather_RING_LL", 1400, 1800, 11);
    b.collective(0, A, "AllGather", 4, 1000, "RING", "LL128", 1400, 1800, 11);
    // A communication kernel without a collective, exposed on [2500, 2600).
    b.kernel(0, 13, AR, 2400, 2600, 12);
    // Grouped Send and Recv in one kernel: label "Recv+Send", each operation gets the time.
    b.kernel(0, 13, "ncclDevKernel_SendRecv", 3000, 3200, 13);
    b.collective(0, B, "Send", 2, 400, "RING", "Simple", 3000, 3200, 13);
    b.collective(0, B, "Recv", 2, 400, "RING", "Simple", 3000, 3200, 13);
    // Two AllGathers coalesced into one kernel: its time counts once.
    b.kernel(0, 14, "ncclDevKernel_AllGather_RING_LL", 4000, 4100, 14);
    b.collective(0, A, "AllGather", 4, 500, "RING", "Simple", 4000, 4100, 14);
    b.collective(0, A, "AllGather", 4, 500, "RING", "Simple", 4000, 4100, 14);
    // A peer copy without a collective, and a copy-engine AllGather run as a peer copy.
    b.peer_copy(16, 4200, 4300, 4096, 0);
    b.peer_copy(16, 4500, 4600, 1000, 20);
    b.collective(0, A, "AllGather", 4, 250, "CE", "Simple", 4500, 4600, 20);
    // AlltoAll, ReduceScatter, Reduce.
    b.kernel(0, 13, "ncclDevKernel_AlltoAll", 5000, 5100, 16);
    b.collective(0, A, "AlltoAll", 4, 250, "RING", "Simple", 5000, 5100, 16);
    b.kernel(0, 13, "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", 5200, 5300, 17);
    b.collective(0, A, "ReduceScatter", 4, 250, "RING", "Simple", 5200, 5300, 17);
    b.kernel(0, 13, "ncclDevKernel_Reduce_Sum_bf16_RING_LL", 5400, 5450, 18);
    b.collective(0, A, "Reduce", 4, 500, "RING", "Simple", 5400, 5450, 18);
    // Not linked to a kernel (graph-captured, or NCCL < 2.28): counted, no GPU time.
    b.collective(0, A, "AllReduce", 4, 7000, "RING", "LL", 5500, 5500, 0);
    // A communicator that is not in the table, with one unlinked collective.
    b.collective(0, C, "Broadcast", 8, 64, "", "", 5600, 5600, 0);
    // Device 1: correlation 10 belongs to device 0's AllReduce, so this kernel is unattributed.
    b.kernel(1, 13, AR, 0, 100, 10);
    b.finish(0)
}

#[test]
fn every_number() {
    let r = analyze(&[hand_made()], &Options::default()).unwrap();
    let d0 = &r.ranks[0].devices[0];
    assert_eq!(d0.time.span_ns, 5450);
    assert_eq!(d0.time.exposed_communication_ns, 1650);
    assert_eq!(
        d0.time.exposed_communication_by_op_ns,
        by_op(&[
            ("AllReduce", 500),
            ("AllGather", 300 + 100 + 100),
            (UNATTRIBUTED, 100),
            ("Recv+Send", 200),
            (PEER_COPY, 100),
            ("AlltoAll", 100),
            ("ReduceScatter", 100),
            ("Reduce", 50),
            ("Broadcast", 0),
        ])
    );
    assert_eq!(
        d0.time.exposed_communication_by_op_ns.values().sum::<u64>(),
        d0.time.exposed_communication_ns
    );
    let d1 = &r.ranks[0].devices[1];
    assert_eq!(d1.time.exposed_communication_by_op_ns, by_op(&[(UNATTRIBUTED, 100)]));
    assert_eq!(r.totals.time.exposed_communication_ns, 1750);
    assert_eq!(r.totals.time.exposed_communication_by_op_ns["unattributed"], 200);
    assert_eq!(r.totals.time.exposed_communication_by_op_ns.values().sum::<u64>(), 1750);

    // The rows, most GPU time first; ties by count, then communicator and operation.
    let order: Vec<(String, &str)> = r.collectives.iter().map(|c| (c.communicator.clone(), c.op.as_str())).collect();
    let id = |c: u64| format!("{c:016x}");
    assert_eq!(
        order,
        [
            (id(A), "AllReduce"),
            (id(A), "AllGather"),
            (id(A), "Broadcast"),
            (id(B), "Recv"),
            (id(B), "Send"),
            (id(A), "AlltoAll"),
            (id(A), "ReduceScatter"),
            (id(A), "Reduce"),
            (id(C), "Broadcast"),
        ]
    );

    let ar = row(&r, A, "AllReduce");
    assert_eq!(ar.communicator_name, "dp");
    assert_eq!((ar.nranks, ar.count, ar.linked, ar.kernels), (4, 2, 1, 1));
    assert_eq!((ar.bytes, ar.linked_bytes, ar.time_ns, ar.mean_ns), (14000, 7000, 700, 700));
    assert_eq!(ar.algorithms, by_op(&[("RING", 2)]));
    assert_eq!(ar.protocols, by_op(&[("LL", 2)]));
    // 7000 B in 700 ns = 10 GB/s; bus factor 2(n-1)/n = 1.5.
    assert_eq!(ar.size_multiplier, 1);
    assert!(close(ar.bus_factor, 1.5));
    assert!(close(ar.algbw_gbps, 10.0) && close(ar.busbw_gbps, 15.0), "{ar:?}");

    let ag = row(&r, A, "AllGather");
    assert_eq!((ag.count, ag.linked, ag.kernels), (4, 4, 3), "two coalesced in one kernel");
    assert_eq!((ag.bytes, ag.linked_bytes), (2250, 2250));
    assert_eq!((ag.time_ns, ag.mean_ns), (400 + 100 + 100, 150), "the coalesced kernel counts once");
    assert_eq!(ag.algorithms, by_op(&[("RING", 3), ("CE", 1)]));
    assert_eq!(ag.protocols, by_op(&[("LL128", 1), ("Simple", 3)]));
    // NCCL-tests' size is nranks x the per-rank bytes: 9000 B in 600 ns = 15 GB/s; x (n-1)/n.
    assert_eq!(ag.size_multiplier, 4);
    assert!(close(ag.bus_factor, 0.75));
    assert!(close(ag.algbw_gbps, 15.0) && close(ag.busbw_gbps, 11.25), "{ag:?}");

    let bc = row(&r, A, "Broadcast");
    assert_eq!((bc.count, bc.bytes, bc.time_ns), (1, 2000, 200));
    assert!(close(bc.bus_factor, 1.0) && close(bc.algbw_gbps, 10.0) && close(bc.busbw_gbps, 10.0));

    for op in ["Send", "Recv"] {
        let p = row(&r, B, op);
        assert_eq!(p.communicator_name, "pp");
        assert_eq!((p.nranks, p.count, p.kernels, p.bytes, p.time_ns), (2, 1, 1, 400, 200), "{op}");
        assert!(
            close(p.bus_factor, 1.0) && close(p.algbw_gbps, 2.0) && close(p.busbw_gbps, 2.0),
            "{p:?}"
        );
    }

    for (op, mult, factor, bus) in [
        ("AlltoAll", 4, 0.75, 7.5),
        ("ReduceScatter", 4, 0.75, 7.5),
        ("Reduce", 1, 1.0, 10.0),
    ] {
        let x = row(&r, A, op);
        assert_eq!(x.size_multiplier, mult, "{op}");
        assert!(close(x.bus_factor, factor), "{op}");
        assert!(close(x.algbw_gbps, 10.0) && close(x.busbw_gbps, bus), "{x:?}");
    }

    // Unlinked only: counted, with bytes, but no time and no bandwidth.
    let c = row(&r, C, "Broadcast");
    assert_eq!(c.communicator_name, "", "not in any communicator table");
    assert_eq!(
        (c.nranks, c.count, c.linked, c.kernels, c.bytes, c.time_ns, c.mean_ns),
        (8, 1, 0, 0, 64, 0, 0)
    );
    assert_eq!(c.algorithms, by_op(&[("unknown", 1)]));
    assert!(c.algbw_gbps.is_none() && c.busbw_gbps.is_none());

    let comms: Vec<String> = r
        .communicators
        .iter()
        .map(|c| {
            format!(
                "{} {:?} n={} nodes={} ranks={:?} {}",
                c.id, c.name, c.nranks, c.nodes, c.ranks, c.collectives
            )
        })
        .collect();
    assert_eq!(
        comms,
        [
            r#"000000000000000a "dp" n=4 nodes=1 ranks=[0] 10"#,
            r#"000000000000000b "pp" n=2 nodes=0 ranks=[0] 2"#,
            r#"000000000000000c "" n=8 nodes=0 ranks=[0] 1"#,
        ]
    );

    // Exposed communication is 31.5% of the spans, but no operation has more than half of it
    // (AllGather and AllReduce 500 ns each of 1750).
    assert!(r.findings.iter().any(|f| f.rule == FindingRule::ExposedCommunication));
    assert!(
        !r.findings.iter().any(|f| f.rule == FindingRule::ExposedCommunicationByOp),
        "{:#?}",
        r.findings
    );

    // The text has the section; the JSON the same data.
    let text = render_text(&r, false);
    for needle in [
        "Collectives (NCCL",
        "dp 000000000000000a",
        "RING×3, CE×1",
        "Simple×3, LL128×1",
        "2 collective(s) not linked",
        "communicator 000000000000000a (dp): 4 rank(s) on 1 node(s), in the traces of rank(s) 0, 10 collective(s)",
        "Exposed communication by operation",
        "Recv+Send",
    ] {
        assert!(text.contains(needle), "{needle}:\n{text}");
    }
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["collectives"][0]["op"], "AllReduce");
    assert_eq!(v["collectives"][0]["busbw_gbps"], 15.0);
    assert_eq!(v["collectives"][8]["busbw_gbps"], serde_json::Value::Null);
    assert_eq!(v["communicators"][1]["name"], "pp");
    assert_eq!(v["ranks"][0]["devices"][0]["exposed_communication_by_op_ns"]["Recv+Send"], 200);
    assert_eq!(v["totals"]["exposed_communication_by_op_ns"]["unattributed"], 200);
}

#[test]
fn without_collectives_everything_is_unattributed_and_there_is_no_section() {
    let mut b = Builder::new(Header::default());
    b.kernel(0, 7, "gemm", 0, 100, 1).kernel(0, 13, AR, 50, 250, 2);
    let r = analyze(&[b.finish(0)], &Options::default()).unwrap();
    let d = &r.ranks[0].devices[0];
    assert_eq!(d.time.exposed_communication_ns, 150);
    assert_eq!(d.time.exposed_communication_by_op_ns, by_op(&[(UNATTRIBUTED, 150)]));
    assert!(r.collectives.is_empty() && r.communicators.is_empty());
    assert!(!render_text(&r, false).contains("Collectives"));

    // Compute only: no entry at all.
    let mut b = Builder::new(Header::default());
    b.kernel(0, 7, "gemm", 0, 100, 1);
    let r = analyze(&[b.finish(0)], &Options::default()).unwrap();
    assert!(r.ranks[0].devices[0].time.exposed_communication_by_op_ns.is_empty());
}

/// A small deterministic generator (SplitMix64).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Random timelines of compute, linked and unlinked communication kernels and peer copies
/// on five streams; the expected split comes from looking at every nanosecond: an instant
/// with communication and no compute goes to the communication interval that started
/// first among those running then.
#[test]
fn exposed_by_op_sums_to_exposed_communication_on_random_timelines() {
    const OPS: [&str; 3] = ["AllReduce", "AllGather", "ReduceScatter"];
    for seed in 0..25u64 {
        let mut rng = Rng(seed);
        let mut b = Builder::new(Header::default());
        b.communicators(&[(A, "world", 8, 1)]);
        // (start, end, Some(label) for communication)
        let mut work: Vec<(u64, u64, Option<String>)> = Vec::new();
        for i in 0..60u64 {
            // Distinct, increasing starts: the owner of each instant is unambiguous.
            let start = i * 300 + rng.below(250);
            let end = start + 1 + rng.below(1500);
            let corr = i as u32 + 1;
            let stream = 7 + rng.below(5) as u32;
            match rng.below(10) {
                0..=2 => {
                    b.kernel(0, stream, "gemm", start, end, corr);
                    work.push((start, end, None));
                }
                3 => {
                    b.peer_copy(stream, start, end, 1 << 20, corr);
                    work.push((start, end, Some(PEER_COPY.to_string())));
                }
                4 => {
                    b.kernel(0, stream, AR, start, end, corr);
                    work.push((start, end, Some(UNATTRIBUTED.to_string())));
                }
                _ => {
                    let op = OPS[rng.below(3) as usize];
                    b.kernel(0, stream, AR, start, end, corr);
                    b.collective(0, A, op, 8, 1 << 20, "RING", "LL", start, end, corr);
                    work.push((start, end, Some(op.to_string())));
                }
            }
        }
        let r = analyze(&[b.finish(0)], &Options::default()).unwrap();
        let d = &r.ranks[0].devices[0];
        let last = work.iter().map(|w| w.1).max().unwrap();
        let mut expected: BTreeMap<String, u64> = BTreeMap::new();
        for w in work.iter().filter(|w| w.2.is_some()) {
            expected.entry(w.2.clone().unwrap()).or_insert(0);
        }
        for t in 0..last {
            let covers = |w: &&(u64, u64, Option<String>)| w.0 <= t && t < w.1;
            if work.iter().filter(covers).any(|w| w.2.is_none()) {
                continue;
            }
            if let Some(owner) = work.iter().filter(covers).filter(|w| w.2.is_some()).min_by_key(|w| w.0) {
                *expected.get_mut(owner.2.as_ref().unwrap()).unwrap() += 1;
            }
        }
        assert_eq!(d.time.exposed_communication_by_op_ns, expected, "seed {seed}");
        assert_eq!(
            d.time.exposed_communication_by_op_ns.values().sum::<u64>(),
            d.time.exposed_communication_ns,
            "seed {seed}"
        );
        assert!(
            d.time.exposed_communication_ns > 0,
            "seed {seed}: the generator should expose communication"
        );
    }
}

/// Two ranks where AllReduce has nearly all exposed communication: the rows sum over ranks
/// and the finding names the operation with its bytes and bus bandwidth.
#[test]
fn a_dominant_operation_is_a_finding() {
    let rank = |r: u32| {
        let mut b = Builder::new(Header {
            rank: RankInfo {
                rank: Some(Rank(r)),
                ..RankInfo::default()
            },
            ..Header::default()
        });
        b.communicators(&[(A, "dp", 2, 1)]);
        for i in 0..10u64 {
            let t = i * 10 * MS;
            let corr = i as u32 + 1;
            b.kernel(0, 7, "gemm", t, t + 6 * MS, 100 + corr);
            // 4 ms exposed each: 40% of the span.
            b.kernel(0, 13, AR, t + 5 * MS, t + 10 * MS, corr);
            b.collective(0, A, "AllReduce", 2, 100_000_000, "RING", "Simple", t + 5 * MS, t + 10 * MS, corr);
        }
        b.finish(0)
    };
    let r = analyze(&[rank(1), rank(0)], &Options::default()).unwrap();
    let ar = row(&r, A, "AllReduce");
    assert_eq!((ar.count, ar.linked, ar.kernels), (20, 20, 20), "summed over both ranks");
    assert_eq!((ar.bytes, ar.time_ns, ar.mean_ns), (2_000_000_000, 100 * MS, 5 * MS));
    // 1e8 B in 5 ms = 20 GB/s; 2(n-1)/n = 1 for two ranks.
    assert!(close(ar.algbw_gbps, 20.0) && close(ar.busbw_gbps, 20.0), "{ar:?}");
    assert_eq!(r.communicators[0].ranks, [0, 1]);
    assert_eq!(r.communicators[0].collectives, 20);
    for rk in &r.ranks {
        assert_eq!(rk.devices[0].time.exposed_communication_by_op_ns, by_op(&[("AllReduce", 40 * MS)]));
    }
    let f = r
        .findings
        .iter()
        .find(|f| f.rule == FindingRule::ExposedCommunicationByOp)
        .expect("AllReduce dominates");
    // Severity follows the time at stake: AllReduce's exposed 2 × 40 ms of the two ranks'
    // 2 × 100 ms of GPU time is 40%, at least the 20% of a high finding.
    assert_eq!(f.severity, Severity::High);
    assert_eq!(f.values[Value::TimeNs], (80 * MS) as f64);
    assert!((f.values[Value::ShareOfGpuTime] - 0.4).abs() < 1e-12);
    assert_eq!(f.title, "AllReduce dominates exposed communication");
    assert!(
        f.evidence
            .contains("20 AllReduce collective(s) moved 2000000000 bytes (1.86 GiB) at 20.00 GB/s bus bandwidth"),
        "{}",
        f.evidence
    );
    assert!(f.next_step.contains("bucket_cap_mb"), "{}", f.next_step);
    assert!((f.values[Value::OpShareOfExposedCommunication] - 1.0).abs() < 1e-12);
    assert_eq!(f.values[Value::OpBytes], 2e9);
    assert!((f.values[Value::OpBusbwGbps] - 20.0).abs() < 1e-9);
    assert!((f.values[Value::ExposedCommunicationShare] - 0.4).abs() < 1e-9);
}

/// Below 10% exposed communication, no finding even when one operation has all of it.
#[test]
fn no_finding_when_little_is_exposed() {
    let mut b = Builder::new(Header::default());
    for i in 0..10u64 {
        let t = i * 10 * MS;
        let corr = i as u32 + 1;
        b.kernel(0, 7, "gemm", t, t + 9 * MS + 500 * US, 100 + corr);
        b.kernel(0, 13, AR, t + 9 * MS, t + 10 * MS, corr);
        b.collective(0, A, "AllGather", 8, 1 << 20, "RING", "Simple", t + 9 * MS, t + 10 * MS, corr);
    }
    let r = analyze(&[b.finish(0)], &Options::default()).unwrap();
    assert_eq!(r.totals.time.exposed_communication_by_op_ns, by_op(&[("AllGather", 5 * MS)]));
    assert!(
        !r.findings.iter().any(|f| f.rule.as_str().starts_with("exposed-communication")),
        "{:#?}",
        r.findings
    );
}

fn job(cfg: &JobConfig) -> Vec<TraceFile> {
    let sched = schedule(cfg);
    (0..cfg.ranks)
        .map(|r| {
            let (bytes, _) = write_rank(cfg, &sched, r, Vec::new()).unwrap();
            TraceFile::from_bytes(format!("rank{r}.gtrace"), bytes).unwrap()
        })
        .collect()
}

#[test]
fn synthetic_job_all_reduces() {
    let cfg = JobConfig {
        ranks: 4,
        steps: 6,
        layers: 4,
        ..JobConfig::default()
    };
    let r = analyze(&job(&cfg), &Options::default()).unwrap();
    assert_eq!(r.collectives.len(), 1, "{:#?}", r.collectives);
    let ar = &r.collectives[0];
    let expected = u64::from(cfg.ranks * cfg.steps * cfg.buckets);
    assert_eq!(ar.op, "AllReduce");
    assert_eq!(ar.communicator, "00c0ffeed00d0001");
    assert_eq!(ar.communicator_name, "default_pg");
    assert_eq!(
        (ar.count, ar.linked, ar.kernels, ar.nranks),
        (expected, expected, expected, cfg.ranks)
    );
    assert_eq!(ar.bytes, expected * cfg.bucket_bytes);
    assert_eq!(ar.algorithms, by_op(&[("RING", expected)]));
    assert_eq!(ar.protocols, by_op(&[("Simple", expected)]));
    // The time is the NCCL kernels' summed duration.
    let nccl: u64 = r
        .top_kernels
        .iter()
        .filter(|k| k.name.starts_with("ncclDevKernel_AllReduce"))
        .map(|k| k.total_ns)
        .sum();
    assert_eq!(ar.time_ns, nccl);
    let algbw = ar.algbw_gbps.unwrap();
    assert!((ar.busbw_gbps.unwrap() - algbw * 1.5).abs() < 1e-9);
    // The synthetic links run at about 150 GB/s bus bandwidth; waiting for the slow rank
    // inside the collectives only lowers it.
    assert!(ar.busbw_gbps.unwrap() > 1.0 && ar.busbw_gbps.unwrap() < 160.0, "{ar:?}");
    assert_eq!(r.communicators.len(), 1);
    assert_eq!(r.communicators[0].ranks, [0, 1, 2, 3]);
    assert_eq!((r.communicators[0].nranks, r.communicators[0].nodes), (4, 1));
    for rk in &r.ranks {
        let d = &rk.devices[0];
        assert!(d.time.exposed_communication_ns > 0);
        assert_eq!(
            d.time.exposed_communication_by_op_ns,
            by_op(&[("AllReduce", d.time.exposed_communication_ns)]),
            "rank {}: every NCCL kernel is linked",
            rk.rank
        );
    }
    let text = render_text(&r, false);
    assert!(text.contains("default_pg 00c0ffeed00d0001  AllReduce"), "{text}");

    // Without NCCL metadata: no table, and the same exposed communication, unattributed.
    let plain = analyze(
        &job(&JobConfig {
            nccl_metadata: false,
            ..cfg.clone()
        }),
        &Options::default(),
    )
    .unwrap();
    assert!(plain.collectives.is_empty() && plain.communicators.is_empty());
    for (a, b) in plain.ranks.iter().zip(&r.ranks) {
        let (a, b) = (&a.devices[0], &b.devices[0]);
        assert_eq!(a.time.exposed_communication_ns, b.time.exposed_communication_ns);
        assert_eq!(
            a.time.exposed_communication_by_op_ns,
            by_op(&[(UNATTRIBUTED, b.time.exposed_communication_ns)])
        );
    }
}
