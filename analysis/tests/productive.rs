//! The productive layer against traces whose steps, tokens, FLOPs and GPU-Util are known
//! from their construction (`gputrace_synth::Underfilled`, hand-built traces): expected
//! numbers are worked out here from the construction, not read from the analysis.

use gputrace_analysis::*;
use gputrace_format::*;
use gputrace_synth::Underfilled;
use gputrace_text::render_text;

mod util;
use util::*;

/// `a` and `b` agree to 1e-9 relative.
fn close(a: Option<f64>, b: f64, what: &str) {
    let a = a.unwrap_or_else(|| panic!("{what} is null"));
    assert!((a - b).abs() <= 1e-9 * b.abs().max(1e-12), "{what}: {a} != {b}");
}

fn trace(u: &Underfilled) -> TraceFile {
    TraceFile::from_bytes("underfilled.gtrace", u.write().unwrap()).unwrap()
}

fn opts_7b() -> Options {
    Options {
        gpu_hour_cost: Some(3.0),
        productive: ProductiveOptions {
            model: Some(ModelFlops::Params {
                params: 7e9,
                inference: false,
            }),
            ..ProductiveOptions::default()
        },
        ..Options::default()
    }
}

#[test]
fn underfilled_gpu_reads_95_percent_busy_with_low_mfu() {
    let u = Underfilled::default();
    let r = analyze(&[trace(&u)], &opts_7b()).unwrap();
    let w = u.window_ns as f64;
    let span = (u.windows * u.window_ns) as f64;
    let step_ns = (u.windows_per_step * u.window_ns) as f64;
    let steps = u.windows / u.windows_per_step;
    let tokens = steps * u.tokens_per_step;
    let traced = span + u.startup_ns as f64;
    assert_eq!(u.busy_windows(), 57, "60 windows, 3 of them idle");
    for (what, p) in [("rank", &r.ranks[0].productive), ("job", &r.productive)] {
        assert_eq!(p.step_source, StepSource::StepMarks, "{what}");
        assert_eq!(p.steps, steps, "{what}");
        assert_eq!(p.malformed_step_marks, 0);
        close(p.step_time_p50_s, step_ns / 1e9, "p50");
        close(p.step_time_p95_s, step_ns / 1e9, "p95");
        close(p.step_time_cv, 0.0, "cv");
        close(p.gpu_util_nvml_pct, 95.0, "GPU-Util: 57 of 60 windows");
        close(p.compute_pct, 100.0 * (57 * u.kernel_ns) as f64 / span, "compute");
        assert_eq!(p.tokens, Some(tokens));
        assert_eq!(p.samples, Some(steps * u.samples_per_step), "samples from the header");
        close(p.tokens_per_s, tokens as f64 / (span / 1e9), "tokens/s");
        close(p.samples_per_s, (steps * u.samples_per_step) as f64 / (span / 1e9), "samples/s");
        let flops = 6.0 * 7e9 * tokens as f64;
        close(p.model_flops, flops, "model FLOPs");
        close(p.peak_tflops, 989.5, "H100 SXM dense BF16");
        let mfu = flops / (span / 1e9) / 989.5e12;
        close(p.mfu, mfu, "MFU");
        assert!(p.mfu.unwrap() < 0.10, "underfilled: MFU {}", p.mfu.unwrap());
        close(Some(p.gpu_hours), traced / 3.6e12, "GPU-hours (process window)");
        close(Some(p.productive_gpu_hours), span / 3.6e12, "productive GPU-hours");
        close(p.productive_gpu_hour_rate, span / traced, "productive rate");
        assert_eq!(p.failed_gpu_hours, 0.0);
        assert!(!p.failed && p.outcome == "succeeded", "{what}: {}", p.outcome);
        close(
            p.cost_per_million_tokens,
            traced / 3.6e12 * 3.0 / tokens as f64 * 1e6,
            "cost per M tokens",
        );
        assert!(p.missing.is_empty(), "{what}: {:?}", p.missing);
    }
    let _ = w;
    let rules: Vec<FindingRule> = r.findings.iter().map(|f| f.rule).collect();
    assert!(rules.contains(&FindingRule::HighGpuUtilLowMfu), "{rules:?}");
    assert!(
        !rules.contains(&FindingRule::StepTimeUnstable) && !rules.contains(&FindingRule::FailedRun),
        "{rules:?}"
    );
    let text = render_text(&r, false);
    let headline = text.lines().nth(1).unwrap();
    // The line docs/metrics.md shows for this job.
    assert_eq!(
        headline,
        "GPU-Util (as nvidia-smi) 95% · compute 40% · MFU 9% · 2.0 k tokens/s · $0.42 per M tokens"
    );

    // Steps the per-step table shows are the marks' windows.
    let steps_of_device = &r.ranks[0].devices[0].steps;
    assert_eq!(steps_of_device.len() as u64, steps);
    assert!(steps_of_device.iter().all(|s| s.duration_ns == u.windows_per_step * u.window_ns));
}

#[test]
fn the_window_is_an_option() {
    // Windows of two: every pair holds a busy window (the idle ones are 10, 30, 50).
    let u = Underfilled::default();
    let mut opts = opts_7b();
    opts.productive.nvml_window_ns = 2 * u.window_ns;
    let r = analyze(&[trace(&u)], &opts).unwrap();
    close(r.productive.gpu_util_nvml_pct, 100.0, "GPU-Util over 1/3 s windows");
    assert_eq!(r.productive.gpu_util_window_s, 2.0 * u.window_ns as f64 / 1e9);
}

#[test]
fn without_tokens_or_flops_the_fields_are_null_and_say_which_flag_fills_them() {
    let mut b = Builder::new(header_with_window(1_000, &[0]));
    b.kernel(0, 7, "gemm", 10_000, 20_000, 1).range("ProfilerStep#1", 9_000, 21_000);
    b.kernel(0, 7, "gemm", 30_000, 40_000, 2).range("ProfilerStep#2", 29_000, 41_000);
    let r = analyze(&[b.finish(50_000)], &Options::default()).unwrap();
    let p = &r.productive;
    assert_eq!((p.step_source, p.steps), (StepSource::ProfilerStep, 2));
    assert_eq!(
        (p.tokens_per_s, p.samples_per_s, p.mfu, p.cost_per_million_tokens),
        (None, None, None, None)
    );
    assert!(p.missing["tokens_per_s"].contains("--tokens-per-step"), "{:?}", p.missing);
    assert!(p.missing["samples_per_s"].contains("--samples-per-step"));
    assert!(p.missing["mfu"].contains("--model-params"));
    assert!(p.missing["cost_per_million_tokens"].contains("--gpu-hour-cost"));
    let text = render_text(&r, false);
    let headline = text.lines().nth(1).unwrap();
    assert!(
        headline.contains("MFU: --model-params N")
            && headline.contains("tokens/s: --tokens-per-step N")
            && headline.contains("$ per M tokens: --gpu-hour-cost USD"),
        "{headline}"
    );
    assert!(text.contains("mfu: not computed; --model-params N"), "{text}");

    // The JSON has every key, null where unknown.
    let v = serde_json::to_value(&r).unwrap();
    for doc in [&v["productive"], &v["ranks"][0]["productive"]] {
        for key in [
            "steps",
            "step_time_p50_s",
            "step_time_p95_s",
            "tokens_per_s",
            "samples_per_s",
            "gpu_util_nvml_pct",
            "mfu",
            "cost_per_million_tokens",
            "productive_gpu_hour_rate",
            "failed_gpu_hours",
        ] {
            assert!(doc.get(key).is_some(), "{key} missing: {doc}");
        }
        assert!(doc["mfu"].is_null() && doc["tokens_per_s"].is_null());
        assert_eq!(doc["steps"], 2);
    }

    // The flag fills tokens; the device `GPU 0` has no peak: MFU asks for one.
    let opts = Options {
        productive: ProductiveOptions {
            tokens_per_step: Some(1000),
            model: Some(ModelFlops::PerToken(1e6)),
            ..ProductiveOptions::default()
        },
        ..Options::default()
    };
    let mut b = Builder::new(header_with_window(1_000, &[0]));
    b.kernel(0, 7, "gemm", 10_000, 20_000, 1).range("ProfilerStep#1", 9_000, 21_000);
    let r = analyze(&[b.finish(50_000)], &opts).unwrap();
    let p = &r.productive;
    assert_eq!(p.tokens, Some(1000));
    assert_eq!(p.tokens_source.as_deref(), Some("--tokens-per-step"));
    // No API call links the kernel to its step: the step is its CPU window [9, 21) µs cut
    // to the device's span [10, 20) µs (issue #42: a step is GPU time), 10 µs.
    close(p.tokens_per_s, 1000.0 / 10e-6, "tokens/s over the 10 µs step");
    assert!(p.mfu.is_none() && p.missing["mfu"].contains("--peak-tflops"), "{:?}", p.missing);
    let opts = Options {
        productive: ProductiveOptions {
            peak_tflops: Some(100.0),
            ..opts.productive
        },
        ..opts
    };
    let mut b = Builder::new(header_with_window(1_000, &[0]));
    b.kernel(0, 7, "gemm", 10_000, 20_000, 1).range("ProfilerStep#1", 9_000, 21_000);
    let r = analyze(&[b.finish(50_000)], &opts).unwrap();
    close(r.productive.mfu, 1000.0 * 1e6 / 10e-6 / 100e12, "MFU at --peak-tflops");
}

fn instant(b: &mut Builder, domain: &str, name: &str, at: u64) {
    let (domain, name) = (b.w.intern(domain), b.w.intern(name));
    b.w.push(Event::Marker(Marker {
        start: Nanos(at),
        end: Nanos(at),
        thread: TID,
        name,
        domain,
        kind: MarkerKind::INSTANT,
        color: 0,
    }))
    .unwrap();
}

#[test]
fn malformed_step_marks_are_ignored_and_counted() {
    let mut b = Builder::new(header_with_window(1_000, &[0]));
    b.kernel(0, 7, "gemm", 10_000, 20_000, 1).kernel(0, 7, "gemm", 30_000, 40_000, 2);
    // Also a ProfilerStep range: step marks win.
    b.range("ProfilerStep#7", 5_000, 45_000);
    instant(&mut b, "gputrace", "step tokens=100", 25_000);
    instant(&mut b, "gputrace", "step tokens=lots", 27_000);
    instant(&mut b, "gputrace", "step tokens", 28_000);
    instant(&mut b, "torch", "gputrace.step tokens=300 lr=0.1", 45_000);
    instant(&mut b, "gputrace", "stepping", 46_000);
    let r = analyze(&[b.finish(50_000)], &Options::default()).unwrap();
    let p = &r.productive;
    assert_eq!(p.step_source, StepSource::StepMarks);
    assert_eq!(p.steps, 2, "first activity → 25 µs, then → 45 µs");
    assert_eq!(p.malformed_step_marks, 2);
    assert_eq!(p.tokens, Some(400));
    // No API call links the kernels to the marks: the steps are the marks' windows cut to
    // the device's span [10, 40) µs (the second ended at the mark at 45 µs, after the last
    // kernel): 15 µs each.
    let steps = &r.ranks[0].devices[0].steps;
    assert_eq!(
        steps.iter().map(|s| (s.start_ns, s.end_ns)).collect::<Vec<_>>(),
        [(10_000, 25_000), (25_000, 40_000)]
    );
    close(p.step_time_p50_s, 15e-6, "p50");
    close(p.step_time_p95_s, 15e-6, "p95");
    close(p.tokens_per_s, 400.0 / 30e-6, "tokens/s");
    assert!(render_text(&r, false).contains("2 step mark(s) did not parse"));
}

fn record(u: &Underfilled, host: &str, exit_code: Option<i32>, signal: Option<i32>) -> (String, RunRecord) {
    let start = u.start_ns - u.startup_ns - 1_000_000_000;
    (
        format!("gputrace-run.{host}.77.json"),
        RunRecord {
            format: RUN_RECORD_FORMAT,
            host: host.into(),
            pid: 77,
            command: vec!["python".into(), "train.py".into()],
            start_realtime_ns: start,
            end_realtime_ns: u.start_ns + u.windows * u.window_ns + 1_000_000_000,
            exit_code,
            signal,
            run_id: None,
            host_samples: None,
        },
    )
}

#[test]
fn failed_gpu_hours_from_a_run_record() {
    let u = Underfilled::default();
    let traced = (u.windows * u.window_ns + u.startup_ns) as f64 / 3.6e12;
    let mut opts = opts_7b();
    // A failed run on another host does not concern this trace.
    opts.productive.run_records = vec![record(&u, "elsewhere", Some(1), None), record(&u, &u.hostname, Some(0), None)];
    let r = analyze(&[trace(&u)], &opts).unwrap();
    assert!(!r.productive.failed, "{}", r.productive.outcome_evidence);
    assert!(r.ranks[0].productive.outcome_evidence.contains("exit 0"));

    opts.productive.run_records = vec![record(&u, &u.hostname, None, Some(9))];
    let r = analyze(&[trace(&u)], &opts).unwrap();
    let p = &r.productive;
    assert!(p.failed && p.outcome == "1 of 1 rank(s) failed", "{}", p.outcome);
    close(Some(p.failed_gpu_hours), traced, "failed GPU-hours: the whole traced time");
    assert_eq!(p.productive_gpu_hours, 0.0);
    close(p.productive_gpu_hour_rate, 0.0, "productive rate");
    close(p.failed_cost_usd, traced * 3.0, "failed cost");
    assert!(p.cost_per_million_tokens.is_none(), "no successful tokens");
    let f = r
        .findings
        .iter()
        .find(|f| f.rule == FindingRule::FailedRun)
        .expect("failed-run fires");
    assert_eq!(f.severity, Severity::High);
    // 60 windows of 1/6 s plus 1/3 s of startup: 10.33 GPU-seconds, in the unit that fits
    // (0.0029 GPU-hours would read as nothing), priced at $3 per GPU-hour.
    assert_eq!(f.title, "Failed run: 10.33 GPU-seconds lost ($0.0086)");
    assert!(
        f.evidence.contains("signal 9") && f.evidence.contains("gputrace-run.underfilled-node.77.json"),
        "{}",
        f.evidence
    );
}

#[test]
fn failed_gpu_hours_from_a_killed_trace_and_from_exit_marks() {
    let killed = Underfilled {
        trailer: false,
        ..Underfilled::default()
    };
    let traced = (killed.windows * killed.window_ns + killed.startup_ns) as f64 / 3.6e12;
    let r = analyze(&[trace(&killed)], &opts_7b()).unwrap();
    assert!(r.productive.failed);
    close(Some(r.productive.failed_gpu_hours), traced, "killed: its traced GPU-hours");
    assert!(
        r.productive.outcome_evidence.contains("no trailer"),
        "{}",
        r.productive.outcome_evidence
    );
    assert!(r.findings.iter().any(|f| f.rule == FindingRule::FailedRun));

    for (exit, failed) in [
        ("exit status=0", false),
        ("exit status=3", true),
        ("exit exception=RuntimeError", true),
    ] {
        let u = Underfilled {
            exit_marker: Some(exit.into()),
            ..Underfilled::default()
        };
        let r = analyze(&[trace(&u)], &opts_7b()).unwrap();
        assert_eq!(r.productive.failed, failed, "{exit}: {}", r.productive.outcome_evidence);
        assert_eq!(r.productive.failed_gpu_hours > 0.0, failed, "{exit}");
    }
}

#[test]
fn two_ranks_add_their_throughput_and_the_job_waits_for_the_slowest_step() {
    let a = Underfilled::default();
    let b = Underfilled {
        windows_per_step: 12,
        hostname: "other".into(),
        ..Underfilled::default()
    };
    let r = analyze(&[trace(&a), trace(&b)], &opts_7b()).unwrap();
    let span = (a.windows * a.window_ns) as f64 / 1e9;
    close(
        r.productive.tokens_per_s,
        (10 * a.tokens_per_step) as f64 / span + (5 * b.tokens_per_step) as f64 / span,
        "job tokens/s",
    );
    // Steps 0-4 exist on both (the slower: 12 windows), 5-9 on the first only (6 windows).
    assert_eq!(r.productive.steps, 10);
    close(r.productive.step_time_p95_s, (12 * a.window_ns) as f64 / 1e9, "job p95");
    close(
        r.productive.step_time_p50_s,
        (6 * a.window_ns) as f64 / 1e9,
        "job p50: the 5th of 10 sorted steps",
    );
}
