//! HTA-compatible mode (`Options::hta`) on a hand-made 3-step trace whose
//! numbers were worked out by hand the way Holistic Trace Analysis computes
//! them (`get_temporal_breakdown` after its step filter and µs rounding; see
//! docs/metrics.md, "HTA-compatible mode"). Each part of the mode changes the
//! numbers, so a wrong last-step drop, link filter or rounding fails here.
//! The numbers of HTA's four modes (last step dropped or kept, rounding on or
//! off) and of the one-step variant were also reproduced by running HTA
//! f4d0062 on the same events written as Kineto JSON (`kineto_json` below).

use gputrace_analysis::*;
use gputrace_format::*;

mod util;
use util::*;

const US: u64 = 1_000;

/// GPU work with any correlation id (the builder's copies and syncs have none).
fn push(b: &mut Builder, ev: Event) {
    b.w.push(ev).unwrap();
}

/// Three steps of 100 µs; a `cudaLaunchKernel` (or sync) call per GPU event that has one.
///
/// | event | what | GPU time (µs) | correlation, call at (µs) |
/// |---|---|---|---|
/// | A | `gemm` | [10.3, 30.7) | 1, 1 |
/// | I | `tiny` (inside A; HTA's rounding gives it −1 µs) | [20.1, 20.6) | 7, 2 |
/// | F | `gemm` | [50, 60) | 6, no call: unlinked |
/// | G | memset | [70, 72) | none |
/// | J | stream sync | [90, 95) | 8, 89 |
/// | B | `gemm` | [110, 130) | 2, 101 |
/// | C | `ncclDevKernel_AllReduce` | [120, 140) | 3, 102 |
/// | L | `deep_ep::combine` (HTA: computation) | [150, 160) | 10, 103 |
/// | D | `gemm` (runs in step 3, launched in step 2) | [205, 215) | 4, 199 |
/// | K | `gemm` (0.9 µs; HTA's rounding: [217, 217]) | [216.2, 217.1) | 9, 150 |
/// | E | `gemm` (launched in step 3) | [220, 240) | 5, 201 |
/// | H | HtoD copy | [250, 260) | none |
fn three_steps(steps: &[&str]) -> TraceFile {
    let mut b = Builder::new(Header::default());
    for (i, name) in steps.iter().enumerate() {
        let i = i as u64;
        b.range(name, i * 100 * US, (i + 1) * 100 * US);
    }
    for (corr, at) in [
        (1, 1_000),
        (7, 2_000),
        (2, 101_000),
        (3, 102_000),
        (10, 103_000),
        (9, 150_000),
        (4, 199_000),
        (5, 201_000),
    ] {
        b.api("cudaLaunchKernel", at, at + 500, corr);
    }
    b.api("cudaStreamSynchronize", 89_000, 95_500, 8);
    b.kernel(0, 7, "gemm", 10_300, 30_700, 1)
        .kernel(0, 7, "tiny", 20_100, 20_600, 7)
        .kernel(0, 7, "gemm", 50_000, 60_000, 6)
        .memset(7, 70_000, 72_000, 64);
    push(
        &mut b,
        Event::Sync(Sync {
            start: Nanos(90_000),
            end: Nanos(95_000),
            device: DeviceId(0),
            context: CTX,
            stream: StreamId(7),
            correlation: CorrelationId(8),
            kind: SyncKind::STREAM_SYNCHRONIZE,
            cuda_event: 0,
        }),
    );
    b.kernel(0, 7, "gemm", 110_000, 130_000, 2)
        .kernel(0, 13, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 120_000, 140_000, 3)
        .kernel(0, 14, "void deep_ep::intranode::combine<8>", 150_000, 160_000, 10)
        .kernel(0, 7, "gemm", 205_000, 215_000, 4)
        .kernel(0, 7, "gemm", 216_200, 217_100, 9)
        .kernel(0, 7, "gemm", 220_000, 240_000, 5)
        .copy(8, CopyKind::HTOD, 250_000, 260_000, 1 << 20, false);
    b.finish(0)
}

fn run(trace: TraceFile, hta: Option<HtaCompat>) -> Report {
    let r = analyze(&[trace], &Options { hta, ..Options::default() }).unwrap();
    let d = &r.ranks[0].devices[0];
    assert_eq!(
        d.time.compute_ns + d.time.exposed_communication_ns + d.time.exposed_transfer_ns + d.time.idle_ns,
        d.time.span_ns,
        "the identity holds in every mode"
    );
    assert_eq!(d.idle_causes.total_ns(), d.time.idle_ns);
    r
}

/// (span, compute, exposed communication, exposed transfer, idle) in ns.
fn split(r: &Report) -> (u64, u64, u64, u64, u64) {
    let d = &r.ranks[0].devices[0];
    (
        d.time.span_ns,
        d.time.compute_ns,
        d.time.exposed_communication_ns,
        d.time.exposed_transfer_ns,
        d.time.idle_ns,
    )
}

const STEPS: [&str; 3] = ["ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"];

#[test]
fn hta_defaults_drop_the_last_step_and_unlinked_work_and_round_inward() {
    let r = run(three_steps(&STEPS), Some(HtaCompat::DEFAULTS));
    // Kept: A I G J B C L D K (rounded: A [11, 30), I [21, 20), K [217, 217]); dropped: E and H
    // (last step: E launched at 201 ≥ 200, H has no id and starts at 250), F (unlinked).
    // HTA: kernel_time 217 − 11 = 206; busy A 19 + G 2 + J 5 + B∪C 30 + L 10 + D 10 = 76;
    // idle 130; compute A 19 + B 20 + L 10 + D 10 = 59 (K adds 0, I lies inside A);
    // non-compute 206 − 59 − 130 = 17 = exposed C 10 + G 2 + J 5.
    assert_eq!(split(&r), (206 * US, 59 * US, 10 * US, 7 * US, 130 * US));
    let d = &r.ranks[0].devices[0];
    assert_eq!(
        (d.first_ns, d.last_ns),
        (Some(11 * US), Some(217 * US)),
        "K's zero-length end bounds the span"
    );
    assert_eq!(d.kernels, 7, "A I B C L D K");
    assert_eq!((d.copies, d.memsets), (0, 1));
    assert_eq!(
        r.ranks[0].hta,
        Some(HtaRank {
            step_filter: true,
            last_step: Some(3),
            last_step_start_ns: Some(200 * US),
            dropped_last_step_events: 2,
            dropped_unlinked_events: 1,
            negative_after_rounding: 1,
        })
    );
    let steps: Vec<u64> = d.steps.iter().map(|s| s.step).collect();
    assert_eq!(steps, [1, 2], "the last step is dropped");
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(
        json["hta_compat"],
        serde_json::json!({"drop_last_step": true, "linked_only": true, "round_to_us": true})
    );
    assert_eq!(json["ranks"][0]["hta"]["dropped_unlinked_events"], 1);
}

#[test]
fn without_rounding_the_fractional_microseconds_stay() {
    let hta = HtaCompat {
        round_to_us: false,
        ..HtaCompat::DEFAULTS
    };
    let r = run(three_steps(&STEPS), Some(hta));
    // HTA_DISABLE_NS_ROUNDING=1: span 217.1 − 10.3 = 206.8; busy 20.4 + 2 + 5 + 30 + 10 + 10 + 0.9 = 78.3;
    // compute 20.4 + 20 + 10 + 10 + 0.9 = 61.3.
    assert_eq!(split(&r), (206_800, 61_300, 10 * US, 7 * US, 128_500));
    assert_eq!(r.ranks[0].hta.as_ref().unwrap().negative_after_rounding, 0);
}

#[test]
fn including_the_last_step_keeps_its_work_but_not_unlinked_work() {
    let hta = HtaCompat {
        drop_last_step: false,
        ..HtaCompat::DEFAULTS
    };
    let r = run(three_steps(&STEPS), Some(hta));
    // include_last_profiler_step=True: E [220, 240) and H [250, 260) come back; F stays out.
    // Span 260 − 11 = 249; compute 59 + 20 = 79; transfer G 2 + J 5 + H 10 = 17; idle 143.
    assert_eq!(split(&r), (249 * US, 79 * US, 10 * US, 17 * US, 143 * US));
    let h = r.ranks[0].hta.as_ref().unwrap();
    assert_eq!((h.dropped_last_step_events, h.dropped_unlinked_events), (0, 1));
    assert_eq!(r.ranks[0].devices[0].steps.len(), 3);
}

#[test]
fn keeping_unlinked_work_brings_back_f() {
    let hta = HtaCompat {
        linked_only: false,
        ..HtaCompat::DEFAULTS
    };
    let r = run(three_steps(&STEPS), Some(hta));
    // F [50, 60) has no call: kept because it starts before the last step.
    assert_eq!(split(&r), (206 * US, 69 * US, 10 * US, 7 * US, 120 * US));
}

#[test]
fn with_one_step_name_hta_filters_nothing() {
    // HTA's filter needs two distinct ProfilerStep names; with one, every GPU event stays.
    let r = run(three_steps(&["ProfilerStep#1"]), Some(HtaCompat::DEFAULTS));
    let h = r.ranks[0].hta.as_ref().unwrap();
    assert!(!h.step_filter);
    assert_eq!((h.dropped_last_step_events, h.dropped_unlinked_events, h.last_step), (0, 0, None));
    // Rounded: A [11, 30) F [50, 60) G J B∪C L D K E [220, 240) H [250, 260): span 249;
    // compute 19 + 10 + 20 + 10 + 10 + 20 = 89; transfer 2 + 5 + 10 = 17; idle 249 − 116 = 133.
    assert_eq!(split(&r), (249 * US, 89 * US, 10 * US, 17 * US, 133 * US));
}

#[test]
fn gputrace_definitions_are_unchanged_by_default() {
    let r = run(three_steps(&STEPS), None);
    // Everything, unrounded; the sync is not work; the DeepEP kernel is communication.
    // Span 260 − 10.3 = 249.7; compute A 20.4 + F 10 + B 20 + D 10 + K 0.9 + E 20 = 81.3;
    // exposed communication [130, 140) + L 10 = 20; transfer G 2 + H 10 = 12; idle 136.4.
    assert_eq!(split(&r), (249_700, 81_300, 20 * US, 12 * US, 136_400));
    assert!(r.ranks[0].hta.is_none());
    assert_eq!(serde_json::to_value(&r).unwrap()["hta_compat"], serde_json::Value::Null);
    assert_eq!(r.ranks[0].devices[0].steps.len(), 3);
}

/// The events of [`three_steps`] as a Kineto JSON trace (what HTA reads), with µs relative
/// to `baseTimeNanoseconds`.
fn kineto_json(base_ns: u64) -> String {
    let mut ev: Vec<String> = Vec::new();
    for (i, name) in STEPS.iter().enumerate() {
        ev.push(format!(
            r#"{{"ph":"X","cat":"user_annotation","name":"{name}","pid":1,"tid":1,"ts":{}.0,"dur":100.0}}"#,
            i * 100
        ));
    }
    let calls = [
        (1, "1.0"),
        (7, "2.0"),
        (2, "101.0"),
        (3, "102.0"),
        (10, "103.0"),
        (9, "150.0"),
        (4, "199.0"),
        (5, "201.0"),
    ];
    for (corr, at) in calls {
        ev.push(format!(
            r#"{{"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":{at},"dur":0.5,"args":{{"correlation":{corr}}}}}"#
        ));
    }
    ev.push(
        r#"{"ph":"X","cat":"cuda_runtime","name":"cudaStreamSynchronize","pid":1,"tid":1,"ts":89.0,"dur":6.5,"args":{"correlation":8}}"#
            .into(),
    );
    let gpu = [
        ("kernel", "gemm", "10.300", "20.400", 1, 7),
        ("kernel", "tiny", "20.100", "0.500", 7, 7),
        ("kernel", "gemm", "50.000", "10.000", 6, 7),
        ("gpu_memset", "Memset (Device)", "70.000", "2.000", 0, 7),
        ("cuda_sync", "Stream Sync", "90.000", "5.000", 8, 7),
        ("kernel", "gemm", "110.000", "20.000", 2, 7),
        ("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "120.000", "20.000", 3, 13),
        ("kernel", "void deep_ep::intranode::combine<8>", "150.000", "10.000", 10, 14),
        ("kernel", "gemm", "205.000", "10.000", 4, 7),
        ("kernel", "gemm", "216.200", "0.900", 9, 7),
        ("kernel", "gemm", "220.000", "20.000", 5, 7),
        ("gpu_memcpy", "Memcpy HtoD (Host -> Device)", "250.000", "10.000", 0, 8),
    ];
    for (cat, name, ts, dur, corr, stream) in gpu {
        let corr = if corr == 0 {
            String::new()
        } else {
            format!(r#","correlation":{corr}"#)
        };
        ev.push(format!(
            r#"{{"ph":"X","cat":"{cat}","name":"{name}","pid":0,"tid":{stream},"ts":{ts},"dur":{dur},"args":{{"device":0,"stream":{stream}{corr}}}}}"#
        ));
    }
    format!(
        r#"{{"schemaVersion":1,"distributedInfo":{{"rank":0}},"baseTimeNanoseconds":{base_ns},"traceEvents":[{}]}}"#,
        ev.join(",\n")
    )
}

#[test]
fn an_imported_kineto_trace_rounds_relative_to_its_base_time() {
    // A base that is not whole µs: HTA rounds the file's `ts` (relative to it), so the
    // numbers are those of `hta_defaults_...`, shifted by the base.
    let base = 1_700_000_000_000_000_500;
    let path = std::env::temp_dir().join(format!("gputrace-hta-compat-{}.json", std::process::id()));
    std::fs::write(&path, kineto_json(base)).unwrap();
    let trace = gputrace_kineto::to_trace(&path).unwrap();
    std::fs::remove_file(&path).ok();
    let r = run(trace, Some(HtaCompat::DEFAULTS));
    assert_eq!(split(&r), (206 * US, 59 * US, 10 * US, 7 * US, 130 * US));
    let d = &r.ranks[0].devices[0];
    assert_eq!(d.first_ns, Some(base + 11 * US));
    let h = r.ranks[0].hta.as_ref().unwrap();
    assert_eq!(
        (h.dropped_last_step_events, h.dropped_unlinked_events, h.negative_after_rounding),
        (2, 1, 1)
    );
}
