//! Hand-built reports whose diffs are known exactly.

use super::*;
use gputrace_analysis::{CollectiveStat, DeviceReport, Finding, Losses, Productive, RankReport, Severity, StepReport, Totals};

/// A job of `gpus` ranks with one device each and no activity yet.
fn report(gpus: u32) -> Report {
    let ranks = (0..gpus)
        .map(|rank| RankReport {
            rank,
            rank_from_header: true,
            file: format!("rank{rank}.gtrace"),
            producer: "synthetic".into(),
            hostname: "node".into(),
            local_rank: Some(rank),
            pid: 1,
            devices: vec![DeviceReport::default()],
            losses: Losses::default(),
            events: 0,
            hta: None,
            profiler_overhead: Default::default(),
            capture_levers: None,
            productive: Productive::default(),
            duty_cycle: None,
            host: None,
        })
        .collect();
    Report {
        schema_version: gputrace_analysis::SCHEMA_VERSION,
        ranks,
        totals: Totals {
            ranks: u64::from(gpus),
            active_devices: u64::from(gpus),
            ..Totals::default()
        },
        top_kernels: vec![],
        copies: vec![],
        findings: vec![],
        cost: None,
        lossy: false,
        communication_patterns: vec![],
        communicators: vec![],
        collectives: vec![],
        hta_compat: None,
        productive: Productive {
            devices: u64::from(gpus),
            ..Productive::default()
        },
        classification: None,
        serving: Vec::new(),
    }
}

/// A step of `duration` ns: `compute`, `comm` exposed communication, the rest idle.
fn step(n: u64, duration: u64, compute: u64, comm: u64) -> StepReport {
    StepReport {
        step: n,
        duration_ns: duration,
        compute_ns: compute,
        exposed_communication_ns: comm,
        idle_ns: duration - compute - comm,
        ..StepReport::default()
    }
}

fn collective(comm: &str, name: &str, op: &str, nranks: u32, count: u64, bytes: u64, time_ns: u64) -> CollectiveStat {
    // NCCL-tests' bus bandwidth of an AllReduce: 2(n-1)/n × bytes / time.
    let f = gputrace_analysis::nccl_tests_factors(op, nranks).unwrap();
    let algbw = bytes as f64 * f.size_multiplier as f64 / time_ns as f64;
    CollectiveStat {
        communicator: comm.into(),
        communicator_name: name.into(),
        op: op.into(),
        nranks,
        count,
        linked: count,
        kernels: count,
        bytes,
        linked_bytes: bytes,
        time_ns,
        mean_ns: time_ns / count,
        algorithms: Default::default(),
        protocols: Default::default(),
        size_multiplier: f.size_multiplier,
        bus_factor: Some(f.bus_factor),
        algbw_gbps: Some(algbw),
        busbw_gbps: Some(algbw * f.bus_factor),
    }
}

fn close(x: f64, y: f64) -> bool {
    (x - y).abs() < 1e-9 * y.abs().max(1.0)
}

#[test]
fn one_gpu_at_1000_tokens_per_s_against_four_at_3000_is_75_percent() {
    let mut a = report(1);
    a.productive.tokens_per_s = Some(1000.0);
    let mut b = report(4);
    b.productive.tokens_per_s = Some(3000.0);
    let s = diff(&a, &b).scaling.expect("GPU counts differ");
    assert_eq!(s.gpus, (1, 4));
    assert_eq!(s.basis, Basis::Tokens);
    assert!(close(s.efficiency, 0.75), "{s:?}");
    assert!(close(s.per_gpu.1, 750.0), "{s:?}");
    // M → N generalised: 2 GPUs at 1000 against 8 at 3000 is the same 75%.
    let (mut a2, mut b8) = (report(2), report(8));
    a2.productive.tokens_per_s = Some(1000.0);
    b8.productive.tokens_per_s = Some(3000.0);
    assert!(close(diff_scaling(&a2, &b8).unwrap().efficiency, 0.75));
    assert!(diff(&a, &b).verdict.contains("scaling efficiency 75.0% (1 -> 4 GPUs, tokens/s)"));
}

#[test]
fn scaling_is_absent_on_the_same_gpu_count_and_without_throughput() {
    let mut a = report(2);
    a.productive.tokens_per_s = Some(1000.0);
    let b = a.clone();
    let d = diff(&a, &b);
    assert!(d.scaling.is_none());
    assert!(!d.verdict.contains("scaling"));
    // Different counts, but nothing to measure throughput with.
    assert!(diff_scaling(&report(1), &report(2)).is_none());
}

#[test]
fn the_basis_falls_back_to_samples_then_to_steps() {
    let (mut a, mut b) = (report(1), report(2));
    a.productive.tokens_per_s = Some(1000.0); // B has no tokens: tokens cannot be the basis
    a.productive.samples_per_s = Some(10.0);
    b.productive.samples_per_s = Some(18.0);
    let s = diff_scaling(&a, &b).unwrap();
    assert_eq!((s.basis, s.unit), (Basis::Samples, "sample"));
    assert!(close(s.efficiency, 0.9));

    // Steps: the same work per GPU per step, so efficiency = p50_A / p50_B.
    let (mut a, mut b) = (report(1), report(2));
    a.productive.step_time_p50_s = Some(0.1);
    b.productive.step_time_p50_s = Some(0.125);
    let s = diff_scaling(&a, &b).unwrap();
    assert_eq!(s.basis, Basis::Steps);
    assert!(close(s.throughput.0, 10.0) && close(s.throughput.1, 16.0), "{s:?}");
    assert!(close(s.efficiency, 0.8));
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["basis"], "steps/s x GPUs");
}

#[test]
fn the_lost_time_splits_by_category_and_names_the_stragglers() {
    // A: 1 GPU, one step of 100 µs (80 compute, 10 exposed communication, 10 idle), 1000 tokens.
    let mut a = report(1);
    a.ranks[0].devices[0].steps = vec![step(0, 100_000, 80_000, 10_000)];
    a.productive.tokens = Some(1000);
    a.productive.tokens_per_s = Some(1000.0 / 100e-6);
    // B: 2 GPUs, each one step of 125 µs (80 compute, 30 exposed communication, 15 idle),
    // 1000 tokens each.
    let mut b = report(2);
    for r in &mut b.ranks {
        r.devices[0].steps = vec![step(0, 125_000, 80_000, 30_000)];
    }
    b.productive.tokens = Some(2000);
    b.productive.tokens_per_s = Some(2000.0 / 125e-6);
    b.findings.push(Finding {
        rule: gputrace_analysis::FindingRule::Stragglers,
        severity: Severity::High,
        title: "Rank 1 is the straggler".into(),
        evidence: String::new(),
        next_step: String::new(),
        values: [(gputrace_analysis::Value::Rank, 1.0)].into(),
    });
    let s = diff_scaling(&a, &b).unwrap();
    assert!(close(s.efficiency, 0.8), "{s:?}");
    // Per token: 100 ns in A, 125 ns in B: 25 ns lost, 20 to communication, 5 to idle.
    assert!(close(s.lost_ns_per_unit, 25.0), "{s:?}");
    let by = |n: &str| s.lost.iter().find(|l| l.name == n).unwrap().clone();
    assert_eq!(s.lost[0].name, "exposed communication");
    assert!(close(by("exposed communication").delta, 20.0));
    assert!(close(by("exposed communication").share.unwrap(), 0.8));
    assert!(close(by("idle").share.unwrap(), 0.2));
    assert!(close(by("compute").share.unwrap(), 0.0));
    assert_eq!(
        s.stragglers,
        vec![Straggler {
            run: "B",
            rank: Some(1),
            title: "Rank 1 is the straggler".into()
        }]
    );
    let text = render_text(&diff(&a, &b), 5);
    assert!(text.contains("efficiency 80.0%") && text.contains("straggler in B"), "{text}");
}

#[test]
fn steps_compare_count_percentiles_means_and_the_slowest() {
    let mut a = report(2);
    a.productive.steps = 2;
    a.productive.step_time_p50_s = Some(0.010);
    a.productive.step_time_p95_s = Some(0.020);
    a.ranks[0].devices[0].steps = vec![step(0, 10_000_000, 6_000_000, 1_000_000), step(1, 10_000_000, 6_000_000, 1_000_000)];
    a.ranks[1].devices[0].steps = vec![step(0, 10_000_000, 6_000_000, 1_000_000), step(1, 20_000_000, 6_000_000, 1_000_000)];
    let mut b = a.clone();
    b.productive.steps = 4;
    b.productive.step_time_p50_s = Some(0.012);
    b.ranks[1].devices[0].steps[1] = step(1, 30_000_000, 6_000_000, 5_000_000);
    let st = diff(&a, &b).steps;
    assert_eq!((st.count.a, st.count.b, st.count.pct), (2, 4, Some(100.0)));
    let p50 = st.p50.unwrap();
    assert_eq!((p50.a, p50.b, p50.delta), (10_000_000, 12_000_000, 2_000_000));
    assert_eq!(st.p95.unwrap().delta, 0);
    assert_eq!((st.mean_duration.a, st.mean_duration.b), (12_500_000, 15_000_000));
    // Exposed communication +1 ms per step on average, idle +1.5 ms, compute unchanged.
    assert_eq!(st.mean[0].name, "idle");
    assert_eq!(st.mean[0].delta, 1_500_000);
    assert_eq!(st.mean[1].name, "exposed communication");
    assert_eq!(st.mean[1].delta, 1_000_000);
    let slow = st.slowest.1.unwrap();
    assert_eq!((slow.rank, slow.step, slow.duration_ns), (1, 1, 30_000_000));
    assert_eq!(st.slowest.0.unwrap().duration_ns, 20_000_000);
    // Without step times in one run the percentiles are null, not zero.
    b.productive.step_time_p50_s = None;
    assert!(diff_steps(&a, &b).p50.is_none());
}

#[test]
fn collectives_match_by_shared_name_else_by_op_and_ranks() {
    let gb = 1u64 << 30;
    let mut a = report(2);
    a.collectives = vec![
        // Named in both runs: matched by name although the communicator id and nranks differ.
        collective("00000000000000aa", "default_pg", "AllReduce", 2, 10, 10 * gb, 100_000_000),
        // Unnamed: matched by (op, nranks), summed over two communicators.
        collective("00000000000000ab", "", "AllGather", 2, 4, 4 * gb, 50_000_000),
        collective("00000000000000ac", "", "AllGather", 2, 4, 4 * gb, 150_000_000),
        // Named only in A: falls back to (op, nranks).
        collective("00000000000000ad", "tp", "Broadcast", 2, 1, gb, 10_000_000),
    ];
    let mut b = report(4);
    b.collectives = vec![
        collective("00000000000000ba", "default_pg", "AllReduce", 4, 20, 20 * gb, 400_000_000),
        collective("00000000000000bb", "", "AllGather", 2, 8, 8 * gb, 200_000_000),
        collective("00000000000000bc", "", "Broadcast", 2, 1, gb, 10_000_000),
    ];
    let rows = diff_collectives(&a, &b);
    assert_eq!(rows.len(), 3, "{rows:#?}");
    let ar = rows.iter().find(|r| r.op == "AllReduce").unwrap();
    assert_eq!(
        (ar.matched_by, ar.communicator_name.as_str(), ar.nranks),
        (MatchedBy::Name, "default_pg", (2, 4))
    );
    // Per GPU: 10 over 2 GPUs, 20 over 4.
    assert_eq!((ar.count.a, ar.count.b), (5, 5));
    // busbw = 2(n-1)/n × bytes / time: 1 × 10 GiB / 0.1 s and 1.5 × 20 GiB / 0.4 s.
    let gbf = gb as f64;
    assert!(close(ar.busbw_gbps.a.unwrap(), 10.0 * gbf / 1e8));
    assert!(close(ar.busbw_gbps.b.unwrap(), 1.5 * 20.0 * gbf / 4e8));
    let ag = rows.iter().find(|r| r.op == "AllGather").unwrap();
    assert_eq!((ag.matched_by, ag.count.a, ag.count.b), (MatchedBy::OpNranks, 4, 2));
    assert_eq!(
        (ag.bytes.a, ag.bytes.b, ag.time.a, ag.time.b),
        (4 * gb, 2 * gb, 100_000_000, 50_000_000)
    );
    // Two rows in A: their summed bus bytes over their summed time, the same as B's one row.
    assert!(close(ag.busbw_gbps.a.unwrap(), ag.busbw_gbps.b.unwrap()));
    assert!(close(ag.busbw_gbps.delta.unwrap(), 0.0));
    let bc = rows.iter().find(|r| r.op == "Broadcast").unwrap();
    assert_eq!((bc.matched_by, bc.count.delta), (MatchedBy::OpNranks, 0));
    // Biggest bandwidth drop first: the AllReduce went from 107 to 80.5 GB/s.
    assert_eq!(rows[0].op, "AllReduce");
    assert!(rows[0].busbw_gbps.pct.unwrap() < -24.0, "{:?}", rows[0].busbw_gbps);
}

#[test]
fn a_job_against_itself_has_zero_deltas_everywhere() {
    let mut a = report(2);
    a.productive.steps = 2;
    a.productive.step_time_p50_s = Some(0.01);
    a.productive.step_time_p95_s = Some(0.02);
    a.ranks[0].devices[0].steps = vec![step(0, 10_000_000, 6_000_000, 1_000_000)];
    a.collectives = vec![collective("00000000000000aa", "", "AllReduce", 2, 10, 1 << 30, 1_000_000)];
    let d = diff(&a, &a);
    assert!(d.scaling.is_none());
    assert_eq!(d.steps.count.delta, 0);
    assert_eq!(d.steps.p50.unwrap().delta, 0);
    assert!(d.steps.mean.iter().all(|m| m.delta == 0));
    let c = &d.collectives[0];
    assert_eq!((c.count.delta, c.bytes.delta, c.time.delta), (0, 0, 0));
    assert_eq!(c.busbw_gbps.delta, Some(0.0));
}

/// Issue #44: 4 GPUs against 8 running the same per-GPU work. Kernels and collectives
/// compare per GPU (no "+93%" from twice the GPUs), a per-GPU throughput reads as
/// `54.95 k`, not `5.4953e4`, and a next-to-nothing loss gets no share in the thousands
/// of percent.
#[test]
fn different_gpu_counts_compare_per_gpu_everywhere() {
    let job = |gpus: u32, comm: u64| {
        let mut r = report(gpus);
        for rk in &mut r.ranks {
            rk.devices[0].steps = vec![step(0, 100_000, 80_000, comm)];
        }
        r.top_kernels = vec![gputrace_analysis::KernelStat {
            name: "gemm".into(),
            category: gputrace_analysis::Category::Compute,
            count: 96 * u64::from(gpus),
            total_ns: 1_000_000 * u64::from(gpus),
            mean_ns: 10_416,
            share: 1.0,
        }];
        r.collectives = vec![collective(
            "00000000000000aa",
            "default_pg",
            "AllReduce",
            gpus,
            72 * u64::from(gpus),
            1 << 30,
            5_000_000 * u64::from(gpus),
        )];
        r.productive.tokens = Some(1000 * u64::from(gpus));
        r.productive.tokens_per_s = Some(54_953.0 * f64::from(gpus));
        r
    };
    let (a, b) = (job(4, 10_000), job(8, 10_001));
    let d = diff(&a, &b);
    let k = &d.kernels[0];
    assert_eq!((k.count.a, k.count.b, k.time.delta), (96, 96, 0));
    let c = &d.collectives[0];
    assert_eq!((c.count.a, c.count.b, c.time.delta), (72, 72, 0));
    let s = d.scaling.as_ref().unwrap();
    assert!(s.lost.iter().all(|l| l.share.is_none()), "{s:?}");
    let text = render_text(&d, 5);
    assert!(text.contains("per GPU 54.95 k -> 54.95 k tokens/s"), "{text}");
    assert!(!text.contains("e4") && !text.contains("+93"), "{text}");
    for line in text.lines() {
        for word in line.split_whitespace() {
            let Some(p) = word.trim_matches(|c| c == '(' || c == ')' || c == ',').strip_suffix('%') else {
                continue;
            };
            if let Ok(p) = p.parse::<f64>() {
                assert!(p.abs() <= 1000.0, "{line}");
            }
        }
    }
}
