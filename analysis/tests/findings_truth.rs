//! The findings' truth table (issue #42): for every rule of `findings.rs`, a hand-built
//! trace where it must fire and one where it must not, with the time at stake and the
//! severity worked out from the construction. The `stragglers` rule lives in
//! `gputrace-compare` (`straggler_cause` tests there).
//!
//! Severity of a finding about time (docs/metrics.md, "Findings"): high from 20% of the
//! GPU time (the summed device spans), medium from 5%, low below.

use gputrace_analysis::*;
use gputrace_format::*;
use gputrace_synth::Underfilled;
use gputrace_text::render_text;

mod util;
use util::*;

const MS: u64 = 1_000_000;
const US: u64 = 1_000;
const AR: &str = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL";
const H100: &str = "NVIDIA H100 80GB HBM3";
const FP8_GEMM: &str = "sm90_xmma_gemm_e4m3bf16_e4m3f32_f32_tn_n_tilesize128x128x128";

fn report(traces: Vec<TraceFile>, opts: &Options) -> Report {
    analyze(&traces, opts).unwrap()
}

fn find(r: &Report, rule: FindingRule) -> Option<&Finding> {
    r.findings.iter().find(|f| f.rule == rule)
}

/// `rule` fires on `yes` and not on `no`; returns the finding.
fn truth<'r>(rule: FindingRule, yes: &'r Report, no: &Report) -> &'r Finding {
    assert!(
        find(no, rule).is_none(),
        "{rule} must not fire: {:?}",
        no.findings.iter().map(|f| f.rule).collect::<Vec<_>>()
    );
    find(yes, rule).unwrap_or_else(|| panic!("{rule} must fire: {:?}", yes.findings.iter().map(|f| f.rule).collect::<Vec<_>>()))
}

/// The finding states `time_ns` of `whole_ns` and its severity follows that share.
fn staked(f: &Finding, time_ns: u64, whole_ns: u64) {
    assert_eq!(f.values[Value::TimeNs], time_ns as f64, "{}: {:?}", f.rule, f.values);
    let share = time_ns as f64 / whole_ns as f64;
    assert!(
        (f.values[Value::ShareOfGpuTime] - share).abs() < 1e-12,
        "{}: {:?}",
        f.rule,
        f.values
    );
    let want = if share >= 0.2 {
        Severity::High
    } else if share >= 0.05 {
        Severity::Medium
    } else {
        Severity::Low
    };
    assert_eq!(f.severity, want, "{}: share {share}", f.rule);
}

fn h100(start_realtime: u64) -> Header {
    let mut h = header_with_window(start_realtime, &[0]);
    h.devices[0].name = H100.into();
    h
}

/// 20 kernels of 100 µs back to back: nothing to find.
fn dense() -> TraceFile {
    let mut b = Builder::new(Header::default());
    for i in 0..20 {
        b.kernel(0, 7, "gemm", i * 100 * US, (i + 1) * 100 * US, 0);
    }
    b.finish(0)
}

/// 10 kernels of 1 ms; before each (but the first) a gap of 1 ms. `launch(i, start)` is
/// when kernel `i` (at `start`) was launched; `sync`: a synchronization before each launch.
fn gappy(launch: impl Fn(u64, u64) -> u64, sync: bool) -> TraceFile {
    let mut b = Builder::new(Header::default());
    for i in 0..10u64 {
        let start = i * 2 * MS;
        let corr = i as u32 + 1;
        if sync && i > 0 {
            b.api("cudaDeviceSynchronize", start - MS, start - 10 * US, 0);
        }
        let at = launch(i, start);
        b.api("cudaLaunchKernel", at, at + 1, corr);
        b.kernel(0, 7, "gemm", start, start + MS, corr);
    }
    b.finish(0)
}

fn defaults() -> Options {
    Options::default()
}

#[test]
fn host_bound_latency_and_synchronization_idle() {
    let d = report(vec![dense()], &defaults());
    // Launched 5 µs before each kernel: of each 1 ms gap, 995 µs host-bound.
    let host = report(vec![gappy(|i, s| if i == 0 { s } else { s - 5 * US }, false)], &defaults());
    let f = truth(FindingRule::HostBoundIdle, &host, &d);
    // Span 19 ms; host-bound 9 × 995 µs.
    staked(f, 9 * 995 * US, 19 * MS);
    // Everything launched at the start: the gaps are latency.
    let latency = report(vec![gappy(|i, _| i, false)], &defaults());
    let f = truth(FindingRule::DependencyLatencyIdle, &latency, &host);
    staked(f, 9 * MS, 19 * MS);
    // The CPU syncs from 1 ms before each kernel to 10 µs before, then launches at -5 µs.
    let sync = report(vec![gappy(|i, s| if i == 0 { s } else { s - 5 * US }, true)], &defaults());
    let f = truth(FindingRule::SynchronizationIdle, &sync, &host);
    // Each gap [s - 1 ms, s): the sync covers [s - 1 ms, s - 10 µs): 990 µs.
    staked(f, 9 * 990 * US, 19 * MS);
}

fn comm_trace(collectives: bool, exposed_ms: u64) -> TraceFile {
    let mut b = Builder::new(Header::default());
    b.communicators(&[(0xa, "dp", 2, 1)]);
    for i in 0..10u64 {
        let t = i * 10 * MS;
        let corr = i as u32 + 1;
        b.kernel(0, 7, "gemm", t, t + 10 * MS - exposed_ms * MS, 100 + corr);
        b.kernel(0, 13, AR, t + 5 * MS, t + 10 * MS, corr);
        if collectives {
            b.collective(0, 0xa, "AllReduce", 2, 1 << 20, "RING", "Simple", t + 5 * MS, t + 10 * MS, corr);
        }
    }
    b.finish(0)
}

#[test]
fn exposed_communication_and_its_operation() {
    // 4 of every 10 ms exposed; hidden entirely when compute covers the all-reduce.
    let exposed = report(vec![comm_trace(true, 4)], &defaults());
    let hidden = report(vec![comm_trace(true, 0)], &defaults());
    staked(truth(FindingRule::ExposedCommunication, &exposed, &hidden), 40 * MS, 100 * MS);
    staked(truth(FindingRule::ExposedCommunicationByOp, &exposed, &hidden), 40 * MS, 100 * MS);
    // Without the collective records no operation owns it: no by-op finding.
    let unlinked = report(vec![comm_trace(false, 4)], &defaults());
    assert!(find(&unlinked, FindingRule::ExposedCommunication).is_some());
    assert!(find(&unlinked, FindingRule::ExposedCommunicationByOp).is_none());
}

#[test]
fn launch_bound_is_as_large_as_the_time_it_concerns() {
    // 150 kernels of 2 µs every 3 µs: the short kernels' 300 µs and the 149 gaps of 1 µs
    // before them, all of the 449 µs span.
    let mut b = Builder::new(Header::default());
    for i in 0..150u64 {
        b.kernel(0, 7, "tiny", i * 3 * US, i * 3 * US + 2 * US, 0);
    }
    let bound = report(vec![b.finish(0)], &defaults());
    let mut b = Builder::new(Header::default());
    for i in 0..99u64 {
        b.kernel(0, 7, "tiny", i * 3 * US, i * 3 * US + 2 * US, 0);
    }
    let few = report(vec![b.finish(0)], &defaults());
    staked(truth(FindingRule::LaunchBound, &bound, &few), 449 * US, 449 * US);

    // The case: most kernels are short, but they are a sliver of the GPU time
    // (150 × 2 µs after a 100 ms GEMM, back to back, no idle before them): 300 µs of
    // 100.3 ms, 0.3%: low.
    let mut b = Builder::new(Header::default());
    b.kernel(0, 7, "gemm", 0, 100 * MS, 0);
    for i in 0..150u64 {
        b.kernel(0, 7, "tiny", 100 * MS + i * 2 * US, 100 * MS + (i + 1) * 2 * US, 0);
    }
    let sliver = report(vec![b.finish(0)], &defaults());
    let f = find(&sliver, FindingRule::LaunchBound).expect("150 of 151 kernels are short");
    staked(f, 300 * US, 100 * MS + 300 * US);
    assert_eq!(f.severity, Severity::Low);
    let text = render_text(&sliver, false);
    assert!(text.contains("LOW    Many kernels are shorter than 10 µs"), "{text}");
    assert!(text.contains("at stake: 300.000 µs of GPU time (0.3%)"), "{text}");
}

#[test]
fn pageable_copies_checkpoints_and_pauses() {
    let copy = |pageable| {
        let mut b = Builder::new(Header::default());
        b.kernel(0, 7, "gemm", 0, 100 * MS, 0)
            .copy(8, CopyKind::HTOD, 10 * MS, 12 * MS, 2 << 20, pageable);
        b.finish(0)
    };
    let (pageable, pinned) = (report(vec![copy(true)], &defaults()), report(vec![copy(false)], &defaults()));
    let f = truth(FindingRule::PageableCopies, &pageable, &pinned);
    // 2 ms of copying in a 100 ms span: 2%, low.
    staked(f, 2 * MS, 100 * MS);

    let pause = |d2h_bytes: u64| {
        let mut b = Builder::new(Header::default());
        b.kernel(0, 7, "gemm", 0, 10 * MS, 0);
        b.copy(8, CopyKind::DTOH, 10 * MS, 12 * MS, d2h_bytes, false);
        b.kernel(0, 7, "gemm", 212 * MS, 400 * MS, 0);
        b.finish(0)
    };
    let checkpoint = report(vec![pause(64 << 20)], &defaults());
    let plain = report(vec![pause(4)], &defaults());
    // The 200 ms pause of a 400 ms span: 50%.
    staked(truth(FindingRule::CheckpointPauses, &checkpoint, &plain), 200 * MS, 400 * MS);
    staked(truth(FindingRule::LongPauses, &plain, &checkpoint), 200 * MS, 400 * MS);
}

/// One rank computing `compute_ms` and waiting `wait_ms` in exposed communication, every
/// 20 ms for 10 rounds.
fn rank_trace(rank: u32, compute_us: u64, wait_us: u64) -> TraceFile {
    let mut b = Builder::new(Header {
        rank: RankInfo {
            rank: Some(Rank(rank)),
            ..RankInfo::default()
        },
        ..Header::default()
    });
    for i in 0..10u64 {
        let t = i * 20 * MS;
        b.kernel(0, 7, "gemm", t, t + compute_us * US, 0);
        b.kernel(0, 13, AR, t + compute_us * US, t + (compute_us + wait_us) * US, 0);
    }
    b.finish(0)
}

#[test]
fn uneven_compute_names_a_cause_only_when_singled_out() {
    let even = report((0..4).map(|r| rank_trace(r, 10_000, 3_000)).collect(), &defaults());
    // Rank 3 computes 12 ms a round against 10 ms and waits least: its peers wait for it.
    let single = report(
        vec![
            rank_trace(0, 10_000, 3_000),
            rank_trace(1, 10_000, 3_000),
            rank_trace(2, 10_000, 3_000),
            rank_trace(3, 12_000, 1_000),
        ],
        &defaults(),
    );
    let f = truth(FindingRule::UnevenCompute, &single, &even);
    assert_eq!(f.title, "Uneven compute: rank 3 gpu 0 computes longest and its peers wait for it");
    assert_eq!(f.values[Value::SingledOut], 1.0);
    // 10 rounds × 2 ms over the median, of 4 ranks' spans (10 rounds: 9 × 20 ms + the last).
    let spans: u64 = single.ranks.iter().map(|r| r.devices[0].time.span_ns).sum();
    staked(f, 10 * 2 * MS, spans);

    // The DLRM case: the rank that computed most leads the next by 2.5% of the
    // median only, and waited longest: the cause is unclear, and the numbers say so.
    let unclear = report(
        vec![
            rank_trace(0, 10_000, 3_000),
            rank_trace(1, 10_000, 3_000),
            rank_trace(2, 12_000, 3_000),
            rank_trace(3, 12_250, 3_500),
        ],
        &defaults(),
    );
    let f = find(&unclear, FindingRule::UnevenCompute).expect("22.5% above the median");
    assert_eq!(f.title, "Uneven compute: rank 3 gpu 0 computed the most (cause: unclear)");
    assert_eq!(f.values[Value::SingledOut], 0.0);
    assert_eq!(f.values[Value::ExcessNs], (10 * 2_250 * US) as f64);
    assert_eq!(f.values[Value::LeadOverNextNs], (10 * 250 * US) as f64);
    assert!(
        f.evidence
            .contains("2.500 ms (2.5% of the median) more than the next, rank 2 gpu 0")
            && f.evidence.contains("(3 of 3 waited less)"),
        "{}",
        f.evidence
    );
}

#[test]
fn startup_and_teardown() {
    // Recording from 1 ns; one kernel [50, 60) ms; the process ends at 100 ms: startup
    // 50 ms and teardown 40 ms of a 100 ms window, 90%; capped at medium.
    let mut b = Builder::new(header_with_window(1, &[0]));
    b.kernel(0, 7, "gemm", 50 * MS, 60 * MS, 0);
    let long = report(vec![b.finish(100 * MS)], &defaults());
    let mut b = Builder::new(header_with_window(1, &[0]));
    b.kernel(0, 7, "gemm", 1, 100 * MS, 0);
    let tight = report(vec![b.finish(100 * MS)], &defaults());
    let f = truth(FindingRule::StartupTeardown, &long, &tight);
    assert_eq!(f.values[Value::TimeNs], (90 * MS - 1) as f64);
    assert_eq!(f.severity, Severity::Medium, "at most medium: it amortizes over a long job");
}

fn opts_7b() -> Options {
    Options {
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
fn high_gpu_util_low_mfu_never_rests_on_a_short_capture() {
    let u = Underfilled::default();
    let long = report(vec![TraceFile::from_bytes("u", u.write().unwrap()).unwrap()], &opts_7b());
    // A 5 ms capture with one 4 ms kernel: nvidia-smi would read 100% (one window, busy),
    // and the compute share is 80%: GPU-Util has 5 ms / (1/6 s) = 0.03 windows.
    let mut b = Builder::new(h100(1));
    b.kernel(0, 7, "gemm", MS, 5 * MS, 0);
    b.kernel(0, 7, "gemm", 5 * MS + 500 * US, 6 * MS, 0);
    let short = report(vec![b.finish(6 * MS)], &opts_7b());
    let f = truth(FindingRule::HighGpuUtilLowMfu, &long, &short);
    // Underfilled: 57 kernels of 70 ms in 60 windows of 1/6 s: the rest is at stake.
    let span = 60 * u.window_ns;
    staked(f, span - 57 * 70 * MS, span);
    let p = &short.productive;
    assert_eq!(p.gpu_util_nvml_pct, None);
    let windows = 5.0 * MS as f64 / u.window_ns as f64;
    assert!((p.gpu_util_windows.unwrap() - windows).abs() < 1e-12);
    assert_eq!(
        p.missing["gpu_util_nvml_pct"],
        "a span of 3 or more GPU-Util windows of 0.167 s (this one holds 0.03: one window's all-or-nothing reading would be most of the value)"
    );
    let text = render_text(&short, false);
    let headline = text.lines().nth(1).unwrap();
    assert!(
        headline.starts_with("GPU-Util (as nvidia-smi) - (span of 0.03 windows of 0.167 s: too short to mean anything)"),
        "{headline}"
    );
    // Item 7: GPU time in a unit that fits (recording 1 ns to 6 ms), and every missing
    // input of the cost per million tokens at once.
    assert!(text.contains("GPU time: 6.000 GPU-ms traced"), "{text}");
    assert!(!text.contains("0.0000"), "no number reads as nothing: {text}");
    assert_eq!(
        p.missing["cost_per_million_tokens"],
        "--gpu-hour-cost USD and --tokens-per-step N (or step marks with tokens=N)"
    );
    assert!(
        headline.ends_with("$ per M tokens: --gpu-hour-cost USD and --tokens-per-step N"),
        "{headline}"
    );
}

/// One step on an H100: the CPU range [0, 1 ms) launches an FP8 GEMM at 100 µs that runs
/// [200 µs, 1.2 ms): a 1 ms GPU window.
fn fp8_step() -> TraceFile {
    let mut b = Builder::new(h100(1));
    b.range("ProfilerStep#1", 0, MS);
    b.api("cudaLaunchKernel", 100 * US, 110 * US, 1);
    b.kernel(0, 7, FP8_GEMM, 200 * US, 1_200 * US, 1);
    b.finish(2 * MS)
}

fn flops_opts(precision: Option<Precision>) -> Options {
    Options {
        productive: ProductiveOptions {
            // 1.5e12 FLOPs in the 1 ms step: 1500 TFLOPS.
            model: Some(ModelFlops::PerStep(1.5e12)),
            precision,
            ..ProductiveOptions::default()
        },
        ..Options::default()
    }
}

#[test]
fn impossible_mfu_is_refused_with_its_likely_cause() {
    let inferred = report(vec![fp8_step()], &flops_opts(None));
    let bf16 = report(vec![fp8_step()], &flops_opts(Some(Precision::Bf16)));
    let f = truth(FindingRule::ImpossibleMfu, &bf16, &inferred);
    // Against the BF16 peak 989.5: 1500 / 989.5 = 151.6%, refused.
    let p = &bf16.productive;
    assert_eq!(p.mfu, None);
    assert!((p.mfu_refused.unwrap() - 1500.0 / 989.5).abs() < 1e-9);
    assert_eq!(f.severity, Severity::High);
    assert_eq!(
        f.title,
        "MFU 152% is impossible: the model FLOPs, the peak or the precision is wrong"
    );
    assert!(
        p.missing["mfu"].contains(
            "likely cause: the precision: the GEMM kernels run in fp8 (peak 1979 TFLOPS), against which MFU would be 76%: pass --precision fp8"
        ),
        "{}",
        p.missing["mfu"]
    );
    // Without --precision the GEMM names say FP8: 1500 / 1979.
    let p = &inferred.productive;
    assert!((p.mfu.unwrap() - 1500.0 / 1979.0).abs() < 1e-9);
    assert_eq!(p.precision, Precision::Fp8);
    assert_eq!(
        p.precision_source,
        "GEMM kernel names (100% of the GEMM time whose names show a precision is fp8)"
    );
    assert_eq!(
        p.peak_source.as_deref(),
        Some("table: H100 SXM: 1979 TFLOPS dense fp8 per GPU, 3.35 TB/s")
    );
    // Beyond even the FP8 peak, the model FLOPs are to blame.
    let mut opts = flops_opts(None);
    opts.productive.model = Some(ModelFlops::PerStep(8.2e12));
    let p = report(vec![fp8_step()], &opts).productive;
    assert!(
        p.missing["mfu"].contains("likely cause: the model FLOPs: 8200 TFLOPS per GPU is above even the device's fp8 peak of 1979 TFLOPS"),
        "{}",
        p.missing["mfu"]
    );
}

/// Steps of `durations` µs, each a CPU range launching one kernel that fills its window.
fn steps_trace(durations: &[u64]) -> TraceFile {
    let mut b = Builder::new(Header::default());
    let mut t = 0;
    for (i, &d) in durations.iter().enumerate() {
        let corr = i as u32 + 1;
        b.range(&format!("ProfilerStep#{i}"), t, t + d * US);
        b.api("cudaLaunchKernel", t, t + 1, corr);
        b.kernel(0, 7, "gemm", t + 1, t + d * US, corr);
        t += d * US;
    }
    b.finish(0)
}

#[test]
fn unstable_steps() {
    let steady = report(vec![steps_trace(&[1000; 6])], &defaults());
    let unstable = report(vec![steps_trace(&[1000, 1000, 3000, 1000, 1000, 1000])], &defaults());
    let f = truth(FindingRule::StepTimeUnstable, &unstable, &steady);
    // The GPU windows: the first from its kernel's start (1 ns in), then tiling. The slow
    // step lost 2 ms over the median (1 ms); the span is 8 ms less 1 ns.
    staked(f, 2 * MS, 8 * MS - 1);
}

#[test]
fn failed_runs() {
    let run = |exit: &str| {
        let mut b = Builder::new(header_with_window(1, &[0]));
        b.kernel(0, 7, "gemm", 0, 10 * MS, 0);
        let (d, n) = (b.w.intern("gputrace"), b.w.intern(exit));
        b.w.push(Event::Marker(Marker {
            start: Nanos(10 * MS),
            end: Nanos(10 * MS),
            thread: TID,
            name: n,
            domain: d,
            kind: MarkerKind::INSTANT,
            color: 0,
        }))
        .unwrap();
        b.finish(10 * MS)
    };
    let failed = report(vec![run("exit status=1")], &defaults());
    let ok = report(vec![run("exit status=0")], &defaults());
    let f = truth(FindingRule::FailedRun, &failed, &ok);
    // All of its window, [0, 10 ms) (the kernel at 0 opens it), is lost: high, whatever
    // the share.
    assert_eq!(f.severity, Severity::High);
    assert_eq!(f.values[Value::TimeNs], (10 * MS) as f64);
    assert_eq!(f.title, "Failed run: 10.000 GPU-ms lost");
}

fn counters(series: &[(&str, &[u64])]) -> TraceFile {
    let mut b = Builder::new(h100(1));
    b.kernel(0, 7, "gemm", 0, 1_000 * MS, 0);
    for &(metric, values) in series {
        let m = b.w.intern(metric);
        for (i, &v) in values.iter().enumerate() {
            b.w.push(Event::Counter(Counter {
                time: Nanos(i as u64 * 100 * MS),
                device: DeviceId(0),
                metric: m,
                value: v,
            }))
            .unwrap();
        }
    }
    b.finish(1_000 * MS)
}

#[test]
fn hardware_rules() {
    let clean = report(
        vec![counters(&[
            ("nvml.throttle_reasons", &[0; 11]),
            ("nvml.sm_clock_mhz", &[1980; 11]),
            ("nvml.sm_clock_max_mhz", &[1980; 11]),
            ("pm.dram_throughput_bp", &[4000; 11]),
        ])],
        &defaults(),
    );
    // The software power cap set the whole time.
    let capped = report(vec![counters(&[("nvml.throttle_reasons", &[4; 11])])], &defaults());
    let f = truth(FindingRule::GpuThrottled, &capped, &clean);
    assert_eq!(f.severity, Severity::High, "throttled all of the 1 s span: {:?}", f.values);
    let dram = report(vec![counters(&[("pm.dram_throughput_bp", &[7000; 11])])], &defaults());
    let f = truth(FindingRule::MemoryBound, &dram, &clean);
    assert_eq!(f.severity, Severity::Info, "a reading, not a loss of time");
    let xid = report(vec![counters(&[("nvml.xid", &[79])])], &defaults());
    let f = truth(FindingRule::GpuErrors, &xid, &clean);
    assert_eq!(f.severity, Severity::High);
}

#[test]
fn lossy_and_empty_traces() {
    let mut b = Builder::new(Header::default());
    b.kernel(0, 7, "gemm", 0, 10, 0);
    b.w.push(Event::Loss(Loss {
        time: Nanos(5),
        source: LossSource::CUPTI_DROPPED,
        count: 17,
        detail: StringId::EMPTY,
    }))
    .unwrap();
    let lossy = report(vec![b.finish(0)], &defaults());
    let d = report(vec![dense()], &defaults());
    assert_eq!(truth(FindingRule::LossyTrace, &lossy, &d).severity, Severity::High);
    let mut b = Builder::new(Header::default());
    b.api("cudaMalloc", 0, 10, 1);
    let empty = report(vec![b.finish(0)], &defaults());
    assert_eq!(truth(FindingRule::NoGpuActivity, &empty, &d).severity, Severity::Info);
}

/// Issue #42 item 2: the GPU work of a step runs past its CPU window. Step 1's range
/// [0, 1 µs) launches two kernels that run [0.5, 2.6) µs; step 2's range [1, 2) µs
/// launches one at 1.1 µs that runs [3, 3.5) µs; one kernel at 4 µs has no launch.
#[test]
fn a_step_is_the_gpu_time_of_the_work_it_launched() {
    let mut b = Builder::new(Header::default());
    b.range("ProfilerStep#1", 0, 1_000).range("ProfilerStep#2", 1_000, 2_000);
    b.api("cudaLaunchKernel", 100, 110, 1).kernel(0, 7, "a", 500, 1_500, 1);
    b.api("cudaLaunchKernel", 200, 210, 2).kernel(0, 7, "b", 1_500, 2_600, 2);
    b.api("cudaLaunchKernel", 1_100, 1_110, 3).kernel(0, 7, "c", 3_000, 3_500, 3);
    b.kernel(0, 7, "d", 4_000, 4_200, 0);
    let opts = Options {
        productive: ProductiveOptions {
            tokens_per_step: Some(100),
            ..ProductiveOptions::default()
        },
        ..Options::default()
    };
    let r = report(vec![b.finish(0)], &opts);
    let d = &r.ranks[0].devices[0];
    let got: Vec<(u64, u64, u64, u64, u64)> = d
        .steps
        .iter()
        .map(|s| (s.step, s.start_ns, s.end_ns, s.cpu_start_ns, s.cpu_end_ns))
        .collect();
    // Step 1: its work [500, 2600); step 2: from there to its work's end, 3500.
    assert_eq!(got, [(1, 500, 2_600, 0, 1_000), (2, 2_600, 3_500, 1_000, 2_000)]);
    let (s1, s2) = (&d.steps[0], &d.steps[1]);
    assert_eq!((s1.duration_ns, s1.compute_ns, s1.idle_ns), (2_100, 2_100, 0));
    // Step 2 waited [2600, 3000) for c, launched long before: latency.
    assert_eq!((s2.duration_ns, s2.compute_ns, s2.idle_ns), (900, 500, 400));
    assert_eq!(s2.idle_causes.launch_latency_ns, 400);
    // The device's idle: the gap [2600, 3000) and, outside the steps, [3500, 4000)
    // (unattributed: d has no launch). Step idle + outside = the breakdown's idle.
    assert_eq!(d.time.idle_ns, 400 + 500);
    assert_eq!(d.idle_causes.unattributed_ns, 500);
    // Tokens per second over the steps' GPU time, 3 µs: not their CPU time (2 µs).
    let p = &r.productive;
    assert!((p.tokens_per_s.unwrap() - 200.0 / 3e-6).abs() < 1e-6, "{:?}", p.tokens_per_s);
    // The step table: one definition per column, rows that add up to `all`.
    let text = render_text(&r, false);
    for row in [
        "       1     2.100 µs     2.100 µs    100.0%      0.0%      0.0%         0 ns         0 ns         0 ns         0 ns         0 ns",
        "       2       900 ns       900 ns     55.6%      0.0%      0.0%       400 ns         0 ns       400 ns         0 ns         0 ns",
        " outside            -       700 ns     28.6%      0.0%      0.0%       500 ns         0 ns         0 ns         0 ns       500 ns",
        "     all            -     3.700 µs     75.7%      0.0%      0.0%       900 ns         0 ns       400 ns         0 ns       500 ns",
    ] {
        assert!(text.contains(row), "{row}\n{text}");
    }
}
