//! The synthetic job (gputrace-synth) has a known stall step and a known
//! slow rank; the report must find both.

use gputrace_analysis::*;
use gputrace_format::TraceFile;
use gputrace_synth::{schedule, write_rank, JobConfig};
use gputrace_text::render_text;

fn job(cfg: &JobConfig) -> Vec<TraceFile> {
    let sched = schedule(cfg);
    (0..cfg.ranks)
        .map(|r| {
            let (bytes, _) = write_rank(cfg, &sched, r, Vec::new()).unwrap();
            TraceFile::from_bytes(format!("rank{r}.gtrace"), bytes).unwrap()
        })
        .collect()
}

fn config() -> JobConfig {
    JobConfig {
        ranks: 4,
        steps: 8,
        layers: 8,
        stall_step: Some(3),
        slow_rank: Some(2),
        ..JobConfig::default()
    }
}

#[test]
fn identities_hold_on_every_device_and_step() {
    let cfg = config();
    let r = analyze(&job(&cfg), &Options::default()).unwrap();
    assert_eq!(r.ranks.len(), 4);
    for (i, rk) in r.ranks.iter().enumerate() {
        assert_eq!(rk.rank, i as u32);
        assert!(rk.rank_from_header);
        assert_eq!(rk.producer, "synthetic");
        assert!(!rk.losses.any());
        let d = &rk.devices[0];
        assert_eq!(
            d.time.compute_ns + d.time.exposed_communication_ns + d.time.exposed_transfer_ns + d.time.idle_ns,
            d.time.span_ns
        );
        assert_eq!(d.idle_causes.total_ns(), d.time.idle_ns);
        assert!(d.time.communication_ns > 0, "ncclDevKernel_* is communication");
        assert!(d.time.transfer_ns > 0);
        assert_eq!(d.kernels, cfg.steps as u64 * (cfg.layers as u64 * 18 + 12 + cfg.buckets as u64));
        let w = d.process_window.unwrap();
        assert_eq!(w.startup_idle_ns + d.time.span_ns + w.teardown_idle_ns, w.window_ns);
        assert!(w.startup_idle_ns >= 50_000_000, "the job starts 50 ms after the process");
        assert_eq!(d.steps.len(), cfg.steps as usize);
        for s in &d.steps {
            assert_eq!(
                s.compute_ns + s.exposed_communication_ns + s.exposed_transfer_ns + s.idle_ns,
                s.duration_ns
            );
        }
    }
    assert!(!r.lossy);
}

#[test]
fn the_stall_step_is_host_bound_idle() {
    let cfg = config();
    let r = analyze(&job(&cfg), &Options::default()).unwrap();
    for rk in &r.ranks {
        let d = &rk.devices[0];
        let g = &d.longest_gaps[0];
        assert_eq!(g.step, Some(3), "rank {}: longest gap {g:?}", rk.rank);
        assert_eq!(g.cause, IdleCause::HostBound);
        assert!(g.duration_ns >= cfg.stall_ns, "{g:?}");
        assert!(g.causes.host_bound_ns >= cfg.stall_ns - 1_000_000, "{g:?}");
        assert!(g.cpu_activity.iter().any(|a| a.name == "ProfilerStep#3"), "{g:?}");
        let stall = &d.steps[3];
        for s in d.steps.iter().filter(|s| s.step != 3) {
            assert!(
                stall.idle_causes.host_bound_ns > 10 * s.idle_causes.host_bound_ns,
                "step {} vs the stall",
                s.step
            );
        }
    }
    let pause = r
        .findings
        .iter()
        .find(|f| f.rule == FindingRule::LongPauses)
        .expect("the stall is a long pause");
    assert!(
        pause.evidence.contains("ProfilerStep#3") && pause.evidence.contains("host-bound"),
        "{}",
        pause.evidence
    );
}

#[test]
fn the_slow_ranks_peers_wait_in_communication() {
    let cfg = config();
    let r = analyze(&job(&cfg), &Options::default()).unwrap();
    let slow = &r.ranks[2].devices[0];
    for rk in r.ranks.iter().filter(|rk| rk.rank != 2) {
        let d = &rk.devices[0];
        assert!(
            d.time.exposed_communication_ns > slow.time.exposed_communication_ns,
            "rank {} exposed comm {} vs slow rank {}",
            rk.rank,
            d.time.exposed_communication_ns,
            slow.time.exposed_communication_ns
        );
        assert!(d.time.compute_ns < slow.time.compute_ns);
    }
    let f = r
        .findings
        .iter()
        .find(|f| f.rule == FindingRule::UnevenCompute)
        .expect("straggler finding");
    assert!(f.title.contains("rank 2"), "{}", f.title);
    assert_eq!(f.values[Value::Rank], 2.0);
}

#[test]
fn without_a_slow_rank_or_stall_nothing_is_flagged_as_such() {
    let cfg = JobConfig {
        slow_rank: None,
        stall_step: None,
        ..config()
    };
    let r = analyze(&job(&cfg), &Options::default()).unwrap();
    assert!(
        r.findings
            .iter()
            .all(|f| f.rule != FindingRule::UnevenCompute && f.rule != FindingRule::LongPauses),
        "{:#?}",
        r.findings
    );
}

#[test]
fn text_report_names_the_findings() {
    let r = analyze(
        &job(&config()),
        &Options {
            gpu_hour_cost: Some(4.0),
            ..Options::default()
        },
    )
    .unwrap();
    let text = render_text(&r, false);
    eprintln!("{text}");
    let slow: Vec<&str> = text.lines().filter(|l| l.ends_with("slow")).collect();
    assert_eq!(slow.len(), 1, "only the stall step is slow: {slow:?}");
    assert!(slow[0].trim_start().starts_with("3 "), "{slow:?}");
    for needle in [
        "Where the GPU time went",
        "Longest idle gaps",
        "Top kernels",
        "Copies and memsets",
        "Findings",
        "Uneven compute",
        "Cost at $4.00",
    ] {
        assert!(text.contains(needle), "{needle}\n{text}");
    }
}

#[test]
fn parallel_and_sequential_reports_are_identical() {
    let traces = job(&JobConfig {
        ranks: 5,
        steps: 3,
        layers: 4,
        ..config()
    });
    let seq = analyze(
        &traces,
        &Options {
            threads: 1,
            ..Options::default()
        },
    )
    .unwrap();
    let par = analyze(
        &traces,
        &Options {
            threads: 3,
            ..Options::default()
        },
    )
    .unwrap();
    assert_eq!(serde_json::to_string(&seq).unwrap(), serde_json::to_string(&par).unwrap());
    assert_eq!(seq.ranks.iter().map(|r| r.rank).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
}

/// The same trace without its `ProfilerStep#N` (and other) ranges.
fn without_markers(t: &TraceFile) -> TraceFile {
    use gputrace_format::{Event, TraceWriter, Trailer, WriterOptions};
    let mut w = TraceWriter::new(Vec::new(), t.header(), WriterOptions::default()).unwrap();
    // Interning the table in order gives every string its old id.
    for i in 1..t.string_count() as u32 {
        assert_eq!(w.intern(t.string(gputrace_format::StringId(i)).unwrap()).0, i);
    }
    for e in t.events() {
        let e = e.unwrap();
        if !matches!(e, Event::Marker(_)) {
            w.push(e).unwrap();
        }
    }
    TraceFile::from_bytes("no-markers.gtrace", w.finish(Trailer::default()).unwrap()).unwrap()
}

#[test]
fn steps_are_inferred_from_the_kernel_pattern_without_markers() {
    let cfg = config();
    let traces: Vec<TraceFile> = job(&cfg).iter().map(without_markers).collect();
    let r = analyze(&traces, &Options::default()).unwrap();
    for rk in &r.ranks {
        let d = &rk.devices[0];
        let anchor = d.steps_inferred_from.as_deref().expect("inferred");
        assert!(!anchor.contains("nccl"), "{anchor}");
        assert_eq!(d.steps.len(), cfg.steps as usize, "one run of the anchor per step");
        for s in &d.steps {
            assert_eq!(
                s.compute_ns + s.exposed_communication_ns + s.exposed_transfer_ns + s.idle_ns,
                s.duration_ns
            );
        }
        // The stall sits before step 3's first kernel: in inferred step 2, and only there.
        let stalled: Vec<u64> = d
            .steps
            .iter()
            .filter(|s| s.idle_causes.host_bound_ns > cfg.stall_ns / 2)
            .map(|s| s.step)
            .collect();
        assert_eq!(stalled, [2], "rank {}", rk.rank);
    }
    // With markers, nothing is inferred.
    let marked = analyze(&job(&cfg), &Options::default()).unwrap();
    assert!(marked.ranks.iter().all(|rk| rk.devices[0].steps_inferred_from.is_none()));
    let off = analyze(
        &traces,
        &Options {
            infer_steps: false,
            ..Options::default()
        },
    )
    .unwrap();
    assert!(off.ranks.iter().all(|rk| rk.devices[0].steps.is_empty()));
}

#[test]
fn a_straggler_among_two_ranks() {
    let cfg = JobConfig {
        ranks: 2,
        steps: 4,
        layers: 4,
        slow_rank: Some(1),
        ..config()
    };
    let r = analyze(&job(&cfg), &Options::default()).unwrap();
    let f = r
        .findings
        .iter()
        .find(|f| f.rule == FindingRule::UnevenCompute)
        .expect("straggler finding");
    assert_eq!(f.values[Value::Rank], 1.0);
}
