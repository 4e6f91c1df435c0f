//! The agent's CUPTI PM sampler (`gputrace run --gpu-metrics`) against the
//! fake PM sampling API in the fake libcupti (`tests/doubles/fake_pmsampling.c`):
//! the recorded series are the script's values at the script's times, a
//! hardware buffer overflow is counted, and every fault (CUPTI too old,
//! unsupported GPU, no permission, counters busy, a call failing mid-run) is
//! one `gputrace:` line with the job's exit code and the rest of the trace
//! unchanged.

use gputrace_format::*;
use std::collections::BTreeMap;

mod common;
use common::{doubles, extra, losses, run_testprog, trace_files, DoublesRun};

const SM: &str = "sm__cycles_active.avg.pct_of_peak_sustained_elapsed";
const TENSOR: &str = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed";
const READ: &str = "dram__bytes_read.sum.per_second";
const WRITE: &str = "dram__bytes_write.sum.per_second";
const DRAM: &str = "dram__throughput.avg.pct_of_peak_sustained_elapsed";

/// A job of 100 kernels lasting about `ms`.
fn scenario(ms: u32) -> String {
    format!("version 13.5\ncuda_device_count 1\ndevice\nkernels 100 10000 5000 gemm\nsleep_ms {ms}\n")
}

/// `n` samples 1 ms apart with distinct values:
/// (start, end, [sm %, tensor %, read B/s, write B/s, DRAM % of peak]).
fn samples(n: u64) -> Vec<(u64, u64, [f64; 5])> {
    (0..n)
        .map(|i| {
            let start = 1_000_000 * i;
            (
                start,
                start + 1_000_000,
                [
                    10.0 + i as f64 + 0.25,
                    0.5 * i as f64,
                    1.0e9 * (i + 1) as f64,
                    123_456.0 + i as f64,
                    60.0 + 0.01 * i as f64,
                ],
            )
        })
        .collect()
}

/// The fake's script: `metrics` are the columns it knows, in the order of
/// the values of [`samples`] (a metric left out leaves its value out).
fn script(metrics: &[&str], samples: &[(u64, u64, [f64; 5])], extra: &str) -> String {
    let all = [SM, TENSOR, READ, WRITE, DRAM];
    let mut s = format!("metrics {}\n{extra}\n", metrics.join(" "));
    for (a, b, v) in samples {
        let vals: Vec<String> = metrics
            .iter()
            .map(|m| v[all.iter().position(|x| x == m).unwrap()].to_string())
            .collect();
        s.push_str(&format!("sample {a} {b} {}\n", vals.join(" ")));
    }
    s
}

struct Run {
    r: DoublesRun,
    t: TraceFile,
    /// The fake's report lines.
    report: Vec<String>,
}

/// `gputrace run --gpu-metrics` of the job with `script`; `env` adds to
/// (or overrides) the job's environment; `args` go to testprog.
fn run(script: &str, env: &[(&str, &str)], args: &[&str], flags: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let (sp, rp) = (dir.path().join("pm-script"), dir.path().join("pm-report"));
    std::fs::write(&sp, script).unwrap();
    let mut all: Vec<(&str, &str)> = vec![
        ("FAKE_PM_SCRIPT", sp.to_str().unwrap()),
        ("FAKE_PM_REPORT", rp.to_str().unwrap()),
        ("GPUTRACE_GPU_SAMPLE_HZ", "0"),
    ];
    all.extend_from_slice(env);
    let mut f = vec!["--gpu-metrics"];
    f.extend_from_slice(flags);
    let mut a = vec!["--ms", "5000"];
    a.extend_from_slice(args);
    let r = run_testprog(13, &scenario(600), &f, &a, &all, &["LOCAL_RANK"]);
    let report = std::fs::read_to_string(&rp).unwrap_or_default().lines().map(String::from).collect();
    let files = trace_files(&r.dir.path().join("traces"));
    let t = TraceFile::open(files.first().expect("a trace")).unwrap();
    Run { r, t, report }
}

/// The agent's lines about PM sampling.
fn pm_lines(r: &DoublesRun) -> Vec<String> {
    common::gputrace_lines(&r.out.stderr)
        .into_iter()
        .filter(|l| l.contains("PM sampling") || l.contains("pm."))
        .collect()
}

/// The trace's pm series: name → (time, value) in time order.
fn series(t: &TraceFile) -> BTreeMap<String, Vec<(u64, u64)>> {
    let mut out: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
    for e in t.events_of(&[EventKind::Counter]) {
        if let Event::Counter(c) = e.unwrap() {
            let name = t.name(c.metric).into_owned();
            if name.starts_with("pm.") {
                out.entry(name).or_default().push((c.time.0, c.value));
            }
        }
    }
    for v in out.values_mut() {
        v.sort();
    }
    out
}

/// `START T0` from the fake's report.
fn t0(report: &[String]) -> u64 {
    report
        .iter()
        .find_map(|l| l.strip_prefix("START "))
        .expect("PM sampling started")
        .parse()
        .unwrap()
}

/// The series the script's values make, at the script's times from `t0`.
fn expected(t0: u64, s: &[(u64, u64, [f64; 5])]) -> BTreeMap<String, Vec<(u64, u64)>> {
    let mut out = BTreeMap::new();
    let scale = [100.0, 100.0, 1.0, 1.0, 100.0];
    for (k, name) in [
        metric::PM_SM_ACTIVE_BP,
        metric::PM_TENSOR_ACTIVE_BP,
        metric::PM_DRAM_READ_BYTES_PER_S,
        metric::PM_DRAM_WRITE_BYTES_PER_S,
        metric::PM_DRAM_THROUGHPUT_BP,
    ]
    .iter()
    .enumerate()
    {
        let v: Vec<(u64, u64)> = s.iter().map(|(a, _, v)| (t0 + a, (v[k] * scale[k]).round() as u64)).collect();
        out.insert(name.to_string(), v);
    }
    out
}

#[test]
fn recorded_series_are_the_script_at_its_times() {
    let s = samples(30);
    let run = run(&script(&[SM, TENSOR, READ, WRITE, DRAM], &s, "batch 8"), &[], &[], &[]);
    assert_eq!(run.r.out.status.code(), Some(0), "{}", common::text(&run.r.out.stderr));
    assert!(pm_lines(&run.r).is_empty(), "{:?}", pm_lines(&run.r));
    let t0 = t0(&run.report);
    assert_eq!(series(&run.t), expected(t0, &s));
    // 10.25 % is 1025 basis points; 1 GB/s is 1e9 bytes/s.
    assert_eq!(series(&run.t)[metric::PM_SM_ACTIVE_BP][0].1, 1025);
    assert!(losses(&run.t).is_empty(), "{:?}", losses(&run.t));
    assert_eq!(extra(&run.t, "pm.samples"), "150");
    assert_eq!(extra(&run.t, "pm.samples_dropped"), "0");
    assert!(
        extra(&run.t, "pm.status").starts_with("sampled gpu 0 (GH100) at 1000 Hz"),
        "{}",
        extra(&run.t, "pm.status")
    );
    // The config: 1 ms of GPU time, 32 MiB, GPU time trigger, keep oldest.
    assert!(run.report.contains(&"CONFIG 1000000 33554432 1 0".to_string()), "{:?}", run.report);
    // Torn down at the end, in order.
    let calls: Vec<&str> = run.report.iter().filter_map(|l| l.strip_prefix("CALL ")).collect();
    let pos = |c: &str| {
        calls
            .iter()
            .rposition(|x| *x == c)
            .unwrap_or_else(|| panic!("{c} not called: {calls:?}"))
    };
    assert!(pos("cuptiPmSamplingStop") < pos("cuptiPmSamplingDisable"));
    assert!(pos("cuptiPmSamplingDisable") < pos("cuptiProfilerHostDeinitialize"));
    assert!(pos("cuptiProfilerHostDeinitialize") < pos("cuptiProfilerDeInitialize"));
    // The rest of the capture is whole, and the samples lie in its span.
    assert_eq!(run.t.event_counts().get(&EventKind::Kernel), Some(&100));
    assert_eq!(
        run.t.header().extra.get("pm.sampling").map(String::as_str),
        Some("CUPTI PM sampling at 1000 Hz, device 0 (the one device this process sees)")
    );
    // `info` lists the series.
    let path = run.t.path().to_str().unwrap().to_string();
    let text = common::text(&common::gputrace(&["info", &path]).stdout);
    assert!(text.contains("gpu0 pm.sm_active_bp: 30 samples"), "{text}");
    assert!(text.contains("gpu0 pm.dram_read_bytes_per_s: 30 samples"), "{text}");
}

#[test]
fn the_rate_is_the_interval() {
    let run = run(
        &script(&[SM, TENSOR, READ, WRITE, DRAM], &samples(2), ""),
        &[],
        &[],
        &["--gpu-metrics-hz", "4000"],
    );
    assert!(run.report.contains(&"CONFIG 250000 33554432 1 0".to_string()), "{:?}", run.report);
}

#[test]
fn an_overflow_is_counted_as_lost_samples() {
    let s = samples(30);
    // Decode 2 reports an overflow; the 5 samples after its batch are gone.
    let run = run(
        &script(&[SM, TENSOR, READ, WRITE, DRAM], &s, "batch 4\noverflow 2 5"),
        &[],
        &[],
        &[],
    );
    assert!(run.report.contains(&"LOST 5".to_string()), "{:?}", run.report);
    assert!(pm_lines(&run.r).is_empty(), "{:?}", pm_lines(&run.r));
    let got = series(&run.t);
    let kept: Vec<_> = s[..8].iter().chain(&s[13..]).copied().collect();
    assert_eq!(got, expected(t0(&run.report), &kept));
    let l = losses(&run.t);
    assert_eq!(l.len(), 1, "{l:?}");
    assert_eq!((l[0].0, l[0].1), (LossSource::COUNTER_OVERFLOW, 5), "{l:?}");
    assert!(l[0].2.contains("gpu0") && l[0].2.contains("overflowed"), "{l:?}");
    assert_eq!(extra(&run.t, "pm.samples_overflowed"), "5");
    let path = run.t.path().to_str().unwrap().to_string();
    let text = common::text(&common::gputrace(&["info", &path]).stdout);
    assert!(text.contains("counter-overflow: 5 counter samples lost"), "{text}");
    // Lost counter samples leave the timeline whole: the report is not lossy.
    let o = common::gputrace(&["report", "--json", &path]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["lossy"], false, "{}", j["ranks"][0]["losses"]);
    assert_eq!(
        j["ranks"][0]["losses"]["counter_samples_lost"]
            .as_object()
            .unwrap()
            .values()
            .next()
            .unwrap(),
        5
    );
}

#[test]
fn a_metric_the_chip_lacks_is_one_line_and_an_absent_series() {
    let run = run(&script(&[SM, READ, WRITE, DRAM], &samples(10), "chip TU102"), &[], &[], &[]);
    let lines = pm_lines(&run.r);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("pm.tensor_active_bp") && lines[0].contains("TU102"), "{lines:?}");
    let got = series(&run.t);
    assert_eq!(got.len(), 4, "{:?}", got.keys());
    assert!(!got.contains_key(metric::PM_TENSOR_ACTIVE_BP));
    assert_eq!(got[metric::PM_SM_ACTIVE_BP].len(), 10);
}

/// Each fault: one line saying why, no pm series, a counter-failed loss
/// record, the job's exit code and the rest of the trace unchanged.
#[test]
fn each_fault_is_one_line_and_the_job_goes_on() {
    let nopm = doubles().join("cupti13-nopm/libcupti.so.13");
    let nopm = nopm.to_str().unwrap();
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
    let cases: [Case; 6] = [
        ("", &[("GPUTRACE_CUPTI", nopm)], "needs CUPTI 12.6 or newer"),
        ("fail cuptiPmSamplingEnable 35", &[], "NVreg_RestrictProfilingToAdminUsers"),
        ("fail cuptiPmSamplingEnable 27", &[], "Turing"),
        ("fail cuptiPmSamplingEnable 26", &[], "held by another profiler"),
        ("fail cuptiDeviceGetChipName 42", &[], "CMP"),
        ("fail cuptiProfilerHostInitialize 1", &[], "cuptiProfilerHostInitialize returned 1"),
    ];
    for (fault, env, want) in cases {
        let run = run(
            &script(&[SM, TENSOR, READ, WRITE, DRAM], &samples(10), fault),
            env,
            &["exit", "7"],
            &[],
        );
        assert_eq!(run.r.out.status.code(), Some(7), "{fault}: {}", common::text(&run.r.out.stderr));
        let lines = pm_lines(&run.r);
        assert_eq!(lines.len(), 1, "{fault}: {lines:?}");
        assert!(
            lines[0].contains(want) && lines[0].contains("capture goes on"),
            "{fault}: {lines:?}"
        );
        assert!(series(&run.t).is_empty(), "{fault}");
        let l = losses(&run.t);
        assert_eq!(l.len(), 1, "{fault}: {l:?}");
        assert_eq!((l[0].0, l[0].1), (LossSource::COUNTER_FAILED, 1), "{fault}: {l:?}");
        assert_eq!(run.t.event_counts().get(&EventKind::Kernel), Some(&100), "{fault}");
        assert!(
            extra(&run.t, "pm.status").starts_with("off"),
            "{fault}: {}",
            extra(&run.t, "pm.status")
        );
        // Whatever was set up is torn down.
        let enabled = run.report.iter().filter(|l| *l == "CALL cuptiPmSamplingEnable").count();
        let disabled = run.report.iter().filter(|l| *l == "CALL cuptiPmSamplingDisable").count();
        assert_eq!(enabled, disabled, "{fault}: {:?}", run.report);
    }
}

#[test]
fn decoding_failing_mid_run_keeps_what_was_decoded() {
    let s = samples(40);
    let run = run(
        &script(
            &[SM, TENSOR, READ, WRITE, DRAM],
            &s,
            "batch 4\nfail cuptiPmSamplingDecodeData 999 2",
        ),
        &[],
        &["exit", "3"],
        &[],
    );
    assert_eq!(run.r.out.status.code(), Some(3));
    let lines = pm_lines(&run.r);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("gputrace: gpu0: GPU metrics (CUPTI PM sampling) off: cuptiPmSamplingDecodeData returned 999"),
        "{lines:?}"
    );
    // Two decodes of 4 samples made it.
    assert_eq!(series(&run.t), expected(t0(&run.report), &s[..8]));
    let l = losses(&run.t);
    assert_eq!(l.len(), 1, "{l:?}");
    assert_eq!(l[0].0, LossSource::COUNTER_FAILED);
    assert!(run.report.contains(&"CALL cuptiPmSamplingDisable".to_string()), "{:?}", run.report);
    assert_eq!(run.t.event_counts().get(&EventKind::Kernel), Some(&100));
}

#[test]
fn without_the_flag_nothing_is_called() {
    let dir = tempfile::tempdir().unwrap();
    let rp = dir.path().join("pm-report");
    let r = run_testprog(
        13,
        &scenario(50),
        &[],
        &["--ms", "5000"],
        &[("FAKE_PM_REPORT", rp.to_str().unwrap()), ("GPUTRACE_GPU_SAMPLE_HZ", "0")],
        &["LOCAL_RANK"],
    );
    assert_eq!(r.out.status.code(), Some(0));
    assert!(
        !rp.exists(),
        "PM sampling was called: {}",
        std::fs::read_to_string(&rp).unwrap_or_default()
    );
    let files = trace_files(&r.dir.path().join("traces"));
    let t = TraceFile::open(&files[0]).unwrap();
    assert_eq!(
        t.header().extra.get("pm.sampling").map(String::as_str),
        Some("off (gputrace run --gpu-metrics turns it on)")
    );
}

/// Downstream of the agent: `report` averages the series into the device's
/// hardware section and reads DRAM throughput for `memory-bound`; the
/// exporters draw them as counter tracks under the GPU.
#[test]
fn report_and_exports_use_the_series() {
    let s: Vec<(u64, u64, [f64; 5])> = (0..20)
        .map(|i| (1_000_000 * i, 1_000_000 * (i + 1), [80.0, 5.0, 2.0e12, 1.0e12, 75.0]))
        .collect();
    let run = run(&script(&[SM, TENSOR, READ, WRITE, DRAM], &s, ""), &[], &[], &[]);
    let path = run.t.path().to_str().unwrap().to_string();
    let o = common::gputrace(&["report", "--json", &path]);
    assert!(o.status.success(), "{}", common::text(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let h = &j["ranks"][0]["devices"][0]["hardware"];
    assert_eq!(h["source"], "cupti-pm", "{h}");
    assert_eq!(h["sm_active_pct"].as_f64(), Some(80.0), "{h}");
    assert_eq!(h["tensor_active_pct"].as_f64(), Some(5.0), "{h}");
    assert_eq!(h["dram_read_gbps"].as_f64(), Some(2000.0), "{h}");
    assert_eq!(h["dram_write_gbps"].as_f64(), Some(1000.0), "{h}");
    assert_eq!(h["dram_throughput_pct"].as_f64(), Some(75.0), "{h}");
    let findings = j["findings"].as_array().unwrap();
    let mb = findings
        .iter()
        .find(|f| f["rule"] == "memory-bound")
        .expect("a memory-bound finding");
    assert!(
        mb["evidence"]
            .as_str()
            .unwrap()
            .contains("DRAM throughput 75% of peak (CUPTI PM sampling"),
        "{mb}"
    );
    let text = common::text(&common::gputrace(&["report", &path]).stdout);
    assert!(
        text.contains("PM sampling: SM active 80.0%, tensor pipe 5.0%, DRAM 2000.0 GB/s read, 1000.0 GB/s written (75.0% of peak)"),
        "{text}"
    );
    // Chrome: one counter event per sample, in the track's unit.
    let json = run.r.dir.path().join("pm.json");
    let o = common::gputrace(&["export", &path, "--format", "chrome", "-o", json.to_str().unwrap()]);
    assert!(o.status.success(), "{}", common::text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let values: Vec<f64> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "C" && e["name"] == "GPU 0 SM active %")
        .map(|e| e["args"]["value"].as_f64().unwrap())
        .collect();
    // The export's window starts at the first event that is not a counter
    // sample or a loss (viewer-export's Plan): samples the fake PM sampler
    // took before the job's first GPU work fall outside it, as many as the
    // job's start was late (load dependent).
    let first = run
        .t
        .chunks()
        .iter()
        .filter(|c| c.kind != EventKind::Counter && c.kind != EventKind::Loss)
        .map(|c| c.t_min.0)
        .min()
        .expect("GPU work in the trace");
    let in_window = series(&run.t)[metric::PM_SM_ACTIVE_BP].iter().filter(|(t, _)| *t >= first).count();
    assert!(in_window >= 15, "the job's GPU work should cover most samples: {in_window} of 20");
    assert_eq!(values, vec![80.0; in_window]);
    // Perfetto: a counter track of that name.
    let pf = run.r.dir.path().join("pm.pftrace");
    let o = common::gputrace(&["export", &path, "-o", pf.to_str().unwrap()]);
    assert!(o.status.success(), "{}", common::text(&o.stderr));
    let bytes = std::fs::read(&pf).unwrap();
    for name in [&b"SM active %"[..], b"DRAM read GB/s", b"DRAM throughput % of peak"] {
        assert!(bytes.windows(name.len()).any(|w| w == name), "{}", String::from_utf8_lossy(name));
    }
}
