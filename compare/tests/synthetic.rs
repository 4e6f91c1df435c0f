//! Ground truth from synthetic jobs: the right straggler and cause, and
//! clock offsets recovered to within a microsecond despite skew of seconds.

use gputrace_compare::{compare, heatmap_svg, render_text, Cause, CompareError, Options};
use gputrace_format::TraceFile;
use gputrace_synth::{schedule, write_rank, JobConfig};

fn job(cfg: &JobConfig) -> (Vec<TraceFile>, Vec<i64>) {
    let s = schedule(cfg);
    let traces = (0..cfg.ranks)
        .map(|r| TraceFile::from_bytes(format!("rank{r}.gtrace"), write_rank(cfg, &s, r, Vec::new()).unwrap().0).unwrap())
        .collect();
    (traces, s.clock_offsets().to_vec())
}

fn base() -> JobConfig {
    JobConfig {
        ranks: 8,
        gpus_per_node: 1, // every rank its own host and clock
        steps: 8,
        layers: 4,
        slow_rank: None,
        late_host_rank: None,
        slow_link_rank: None,
        stall_step: None,
        clock_skew_ns: 2_000_000_000, // ±2 s between hosts
        ..JobConfig::default()
    }
}

fn check_offsets(c: &gputrace_compare::Comparison, truth: &[i64]) {
    for (r, &t) in truth.iter().enumerate() {
        let want = t - truth[0];
        let got = c.clock.offsets_ns[&(r as u32)];
        assert!((got - want).abs() <= 1_000, "rank {r}: offset {got} ns, truth {want} ns");
    }
    assert!(c.clock.residual_ns <= 1_000, "residual {}", c.clock.residual_ns);
    assert!(
        truth.iter().any(|&t| (t - truth[0]).abs() > 100_000_000),
        "the test needs real skew"
    );
}

#[test]
fn slow_gpu_rank_is_found_with_cause_gpu() {
    for slow in [0u32, 5] {
        let cfg = JobConfig {
            slow_rank: Some(slow),
            seed: 7 + slow as u64,
            ..base()
        };
        let (traces, truth) = job(&cfg);
        let c = compare(&traces, &Options::default()).unwrap();
        assert_eq!(c.matching, "exact");
        assert_eq!(c.matched, (cfg.steps * cfg.buckets) as usize);
        assert_eq!(c.stragglers.len(), 1, "{:?}", c.stragglers);
        assert_eq!(c.stragglers[0].rank, slow);
        assert_eq!(c.stragglers[0].cause, Cause::Gpu, "{}", c.stragglers[0].why);
        assert_eq!(c.ranks[0].rank, slow, "table sorted by lateness");
        check_offsets(&c, &truth);
        assert!(render_text(&c).contains(&format!("STRAGGLER rank {slow}")));
    }
}

#[test]
fn late_host_rank_is_found_with_cause_host() {
    let cfg = JobConfig {
        late_host_rank: Some(3),
        ..base()
    };
    let (traces, truth) = job(&cfg);
    let c = compare(&traces, &Options::default()).unwrap();
    assert_eq!(c.stragglers.len(), 1, "{:?}", c.stragglers);
    assert_eq!(c.stragglers[0].rank, 3);
    assert_eq!(c.stragglers[0].cause, Cause::Host, "{}", c.stragglers[0].why);
    check_offsets(&c, &truth);
}

#[test]
fn slow_network_rank_is_found_with_cause_network() {
    let cfg = JobConfig {
        slow_link_rank: Some(6),
        ..base()
    };
    let (traces, truth) = job(&cfg);
    let c = compare(&traces, &Options::default()).unwrap();
    assert_eq!(c.stragglers.len(), 1, "{:?}", c.stragglers);
    assert_eq!(c.stragglers[0].rank, 6);
    assert_eq!(c.stragglers[0].cause, Cause::Network, "{}", c.stragglers[0].why);
    check_offsets(&c, &truth);
}

#[test]
fn balanced_job_has_no_straggler() {
    let cfg = JobConfig { steps: 12, ..base() };
    let (traces, truth) = job(&cfg);
    let c = compare(&traces, &Options::default()).unwrap();
    assert!(c.stragglers.is_empty(), "{:?}", c.stragglers);
    check_offsets(&c, &truth);
}

#[test]
fn without_nccl_metadata_collectives_match_by_kernel_order() {
    let cfg = JobConfig {
        slow_rank: Some(2),
        nccl_metadata: false,
        ..base()
    };
    let (traces, truth) = job(&cfg);
    let c = compare(&traces, &Options::default()).unwrap();
    assert_eq!(c.matching, "order");
    assert_eq!(c.matched, (cfg.steps * cfg.buckets) as usize);
    assert_eq!(c.stragglers[0].rank, 2);
    assert!(c.collectives.iter().all(|k| k.op == "AllReduce"));
    check_offsets(&c, &truth);
}

#[test]
fn per_collective_numbers_and_heatmap() {
    let cfg = JobConfig {
        slow_rank: Some(1),
        ..base()
    };
    let (traces, _) = job(&cfg);
    let c = compare(&traces, &Options::default()).unwrap();
    let worst = &c.collectives[0];
    assert_eq!(worst.last_rank, 1);
    assert!(worst.imposed_ns > 0 && worst.arrival_skew_ns >= worst.imposed_ns);
    assert_eq!(worst.bytes, cfg.bucket_bytes);
    // 64 MiB at the synthetic ~150 GB/s bus bandwidth model (±5% jitter).
    let bus = worst.bus_gbps.unwrap();
    assert!(bus > 100.0 && bus < 350.0, "{bus}");
    assert_eq!(c.lateness.len(), 8);
    assert_eq!(c.lateness[0].len(), cfg.steps as usize, "one column per ProfilerStep");
    let svg = heatmap_svg(&c);
    assert!(svg.starts_with("<svg") && svg.ends_with("</svg>") && svg.contains("rank 1"));
    let json = serde_json::to_value(&c).unwrap();
    assert_eq!(json["stragglers"][0]["rank"], 1);
    assert!(json["clock"]["offsets_ns"].is_object() && json["clock"]["residual_ns"].is_u64());
    assert!(json["stragglers"][0]["wait_imposed_ns"].as_u64().unwrap() > 0);
    // Per rank and step: the slow rank never waits; its peers wait in every step.
    let row = |r: u32| c.ranks.iter().find(|x| x.rank == r).unwrap();
    assert_eq!(row(1).steps.len(), cfg.steps as usize);
    assert!(row(1).steps.iter().all(|s| s.waited_ns == 0));
    assert!(row(0)
        .steps
        .iter()
        .all(|s| s.waited_ns > 0 && s.transfer_ns > 0 && s.compute_ns > 0));
    let waited: u64 = row(0).steps.iter().map(|s| s.waited_ns).sum();
    assert_eq!(waited, row(0).waited_ns, "steps add up to the rank total");
}

#[test]
fn errors_are_clear() {
    let cfg = JobConfig { ranks: 2, ..base() };
    let (traces, _) = job(&cfg);
    assert!(matches!(
        compare(&traces[..1], &Options::default()),
        Err(CompareError::TooFewRanks(1))
    ));
    let twice = vec![traces[0].clone_for_test(), traces[0].clone_for_test()];
    let e = compare(&twice, &Options::default()).unwrap_err();
    assert!(e.to_string().contains("appears twice"), "{e}");
}

trait CloneForTest {
    fn clone_for_test(&self) -> TraceFile;
}

impl CloneForTest for TraceFile {
    fn clone_for_test(&self) -> TraceFile {
        let bytes = std::fs::read(self.path()).unwrap_or_default();
        if bytes.is_empty() {
            // In-memory traces: rebuild from the same synthetic job.
            let cfg = JobConfig { ranks: 2, ..base() };
            let s = schedule(&cfg);
            return TraceFile::from_bytes("again.gtrace", write_rank(&cfg, &s, 0, Vec::new()).unwrap().0).unwrap();
        }
        TraceFile::from_bytes(self.path(), bytes).unwrap()
    }
}

/// NCCL-only traces (CUPTI held by another profiler): collectives carry only
/// the time each rank called NCCL. The late rank is still found, but no cause
/// is claimed for it.
#[test]
fn collectives_without_gpu_times_name_the_late_rank_but_no_cause() {
    use gputrace_format::*;
    let trace = |rank: u32, late_ns: u64| {
        let mut h = Header::default();
        h.rank.rank = Some(Rank(rank));
        let mut w = TraceWriter::new(Vec::new(), &h, WriterOptions::default()).unwrap();
        let op = w.intern("AllReduce");
        for seq in 0..50u64 {
            // Rank 1 calls every fifth collective late (a constant delay
            // would look like a clock offset and be aligned away).
            let t = Nanos(1_000_000_000 + seq * 10_000_000 + if seq % 5 == 0 { late_ns } else { 0 });
            w.push(Event::Collective(Collective {
                start: t,
                end: t,
                enqueue: t,
                comm: CommId(7),
                op,
                seq,
                count: 1024,
                datatype: StringId::EMPTY,
                bytes: 2048,
                rank,
                nranks: 2,
                root: -1,
                algorithm: StringId::EMPTY,
                protocol: StringId::EMPTY,
                channels: 0,
                device: DeviceId(0),
                stream: StreamId::UNKNOWN,
                correlation: CorrelationId(0),
            }))
            .unwrap();
        }
        TraceFile::from_bytes(format!("rank{rank}.gtrace"), w.finish(Trailer::default()).unwrap()).unwrap()
    };
    let c = compare(&[trace(0, 0), trace(1, 2_000_000)], &Options::default()).unwrap();
    assert_eq!(c.matching, "exact");
    assert!(c.warnings.iter().any(|w| w.contains("no GPU times")), "{:?}", c.warnings);
    let s = c.stragglers.first().expect("the late rank is a straggler");
    assert_eq!((s.rank, s.cause), (1, Cause::Unknown), "{}", render_text(&c));
}

/// DeepEP's dispatch and combine kernels carry no collective identity: they are matched
/// across ranks by their order within their stream, with a warning, and the rank whose
/// compute runs long before every fifth dispatch is the one the others wait for.
#[test]
fn non_nccl_collectives_match_by_order_within_their_stream() {
    use gputrace_format::*;
    let trace = |rank: u32, extra_ns: u64| {
        let mut h = Header::default();
        h.rank.rank = Some(Rank(rank));
        let mut w = TraceWriter::new(Vec::new(), &h, WriterOptions::default()).unwrap();
        let gemm = w.intern("sm90_xmma_gemm_bf16bf16");
        let dispatch = w.intern("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*)");
        let combine = w.intern("void deep_ep::intranode::combine<__nv_bfloat16, 8>(int4*)");
        let kernel = |name, stream: u32, start: u64, end: u64| {
            Event::Kernel(Kernel {
                start: Nanos(start),
                end: Nanos(end),
                stream: StreamId(stream),
                name,
                ..Kernel::default()
            })
        };
        for i in 0..40u64 {
            let t = 1_000_000_000 + i * 10_000_000;
            // Every fifth step, this rank's compute runs `extra_ns` longer.
            let late = if i % 5 == 0 { extra_ns } else { 0 };
            w.push(kernel(gemm, 7, t, t + 2_000_000 + late)).unwrap();
            let d = t + 2_000_000 + late;
            w.push(kernel(dispatch, 20, d, t + 5_000_000)).unwrap();
            w.push(kernel(combine, 20, t + 6_000_000, t + 7_000_000)).unwrap();
        }
        TraceFile::from_bytes(format!("rank{rank}.gtrace"), w.finish(Trailer::default()).unwrap()).unwrap()
    };
    let c = compare(&[trace(0, 0), trace(1, 2_000_000)], &Options::default()).unwrap();
    assert_eq!(c.matched, 80, "{}", render_text(&c));
    assert!(
        c.warnings
            .iter()
            .any(|w| w.starts_with("DeepEP: up to 80 communication kernels per rank")),
        "{:?}",
        c.warnings
    );
    assert!(c
        .collectives
        .iter()
        .all(|r| r.op.starts_with("DeepEP ") && r.op.ends_with("(stream 20)")));
    let s = c.stragglers.first().expect("rank 1 is late at every fifth dispatch");
    assert_eq!(s.rank, 1, "{}", render_text(&c));
}

/// A library caller gets the report's straggler findings from `with_stragglers`, as
/// `gputrace report` shows them, and the JSON names the cause as before.
#[test]
fn report_with_stragglers_names_the_slow_rank() {
    let cfg = JobConfig {
        slow_rank: Some(2),
        ..base()
    };
    let (traces, _) = job(&cfg);
    let opts = gputrace_analysis::Options::default();
    let mut report = gputrace_analysis::analyze(&traces, &opts).unwrap();
    assert!(report.findings.iter().all(|f| f.rule != gputrace_analysis::FindingRule::Stragglers));
    let c = gputrace_compare::with_stragglers(&mut report, &traces, &opts.classifier)
        .expect("eight ranks")
        .unwrap();
    assert_eq!((c.stragglers[0].rank, c.stragglers[0].cause), (2, Cause::Gpu));
    let f: Vec<_> = report
        .findings
        .iter()
        .filter(|f| f.rule == gputrace_analysis::FindingRule::Stragglers)
        .collect();
    assert_eq!(f.len(), 1);
    assert!(
        f[0].title.starts_with("Rank 2 is the straggler") && f[0].title.ends_with("(cause: gpu)"),
        "{}",
        f[0].title
    );
    assert!(
        serde_json::to_string(&c.stragglers[0]).unwrap().contains(r#""cause":"gpu""#),
        "the cause serializes by its name"
    );
    let one = gputrace_analysis::analyze(&traces[..1], &opts).unwrap();
    assert!(gputrace_compare::report_comparison(&one, &traces[..1], &opts.classifier).is_none());
}
