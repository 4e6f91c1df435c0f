//! The agent's NVML sampler against the fake libnvidia-ml
//! (`tests/doubles/fake_nvml.c`): the recorded series are exactly what the
//! script made NVML return, and every fault (NVML missing, a call failing,
//! the device lost) is one `gputrace:` line with the job and the rest of the
//! capture going on.

use gputrace_format::*;
use std::collections::BTreeMap;

mod common;
use common::{doubles, extra, losses, run_testprog, trace_files, DoublesRun};

/// A job of 100 kernels that lasts about `ms` (the fake CUPTI's worker sleeps).
fn scenario(ms: u32, devices: u32) -> String {
    format!("version 13.5\ncuda_device_count {devices}\ndevice\nkernels 100 10000 5000 gemm\nsleep_ms {ms}\n")
}

/// Run the job sampled at `hz` with the fake NVML and `env`; its report is
/// `dir/nvml-report`.
fn run(ms: u32, hz: u32, env: &[(&str, &str)]) -> (DoublesRun, Option<TraceFile>) {
    run_on(ms, hz, 1, env, &["LOCAL_RANK"])
}

fn run_on(ms: u32, hz: u32, devices: u32, env: &[(&str, &str)], unset: &[&str]) -> (DoublesRun, Option<TraceFile>) {
    let nvml = doubles().join("nvml/libnvidia-ml.so.1");
    let report_dir = tempfile::tempdir().unwrap();
    let report = report_dir.path().join("nvml-report");
    let mut all: Vec<(&str, &str)> = vec![
        ("GPUTRACE_NVML", nvml.to_str().unwrap()),
        ("FAKE_NVML_REPORT", report.to_str().unwrap()),
    ];
    all.extend_from_slice(env);
    let hz = hz.to_string();
    let r = run_testprog(
        13,
        &scenario(ms, devices),
        &["--gpu-sample-hz", &hz],
        &["--ms", "5000"],
        &all,
        unset,
    );
    let _ = std::fs::copy(&report, r.dir.path().join("nvml-report"));
    assert_eq!(r.out.status.code(), Some(0), "the job's exit code: {}", common::text(&r.out.stderr));
    let files = trace_files(&r.dir.path().join("traces"));
    let t = files.first().map(|f| TraceFile::open(f).unwrap());
    (r, t)
}

/// Values per (fake's KEY, device), in time or call order.
type Series = BTreeMap<(String, u32), Vec<u64>>;

/// The fake's report: values per (KEY, device) in call order, and failures.
fn fake_report(r: &DoublesRun) -> (Series, Vec<String>) {
    let text = std::fs::read_to_string(r.dir.path().join("nvml-report")).unwrap_or_default();
    let mut values: Series = BTreeMap::new();
    let mut fails = Vec::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        if f[0] == "FAIL" {
            fails.push(l.to_string());
        } else if f[0] == "CALL" {
            continue;
        } else {
            values
                .entry((f[0].to_string(), f[1].parse().unwrap()))
                .or_default()
                .push(f[2].parse().unwrap());
        }
    }
    (values, fails)
}

/// The fake's lines about calls that return no value (`CALL ...`).
fn fake_calls(r: &DoublesRun) -> Vec<String> {
    let text = std::fs::read_to_string(r.dir.path().join("nvml-report")).unwrap_or_default();
    text.lines().filter(|l| l.starts_with("CALL ")).map(String::from).collect()
}

/// The fake's key for a series name.
fn key_of(metric_name: &str) -> &'static str {
    match metric_name {
        metric::GPU_UTIL_PCT => "GPU_UTIL",
        metric::MEM_UTIL_PCT => "MEM_UTIL",
        metric::SM_CLOCK_MHZ => "SM_CLOCK",
        metric::MEM_CLOCK_MHZ => "MEM_CLOCK",
        metric::SM_CLOCK_MAX_MHZ => "SM_CLOCK_MAX",
        metric::POWER_MW => "POWER",
        metric::ENERGY_MJ => "ENERGY",
        metric::TEMPERATURE_C => "TEMPERATURE",
        metric::THROTTLE_REASONS => "THROTTLE",
        metric::MEM_USED_BYTES => "MEM_USED",
        metric::PCIE_TX_KBPS => "PCIE_TX",
        metric::PCIE_RX_KBPS => "PCIE_RX",
        metric::NVLINK_TX_KIB => "NVLINK_TX",
        metric::NVLINK_RX_KIB => "NVLINK_RX",
        metric::ECC_UNCORRECTED_ERRORS => "ECC_UNCORRECTED",
        metric::ECC_CORRECTED_ERRORS => "ECC_CORRECTED",
        metric::XID => "XID",
        other => panic!("unexpected series {other}"),
    }
}

/// The trace's series: (KEY, device) → values in time order.
fn series(t: &TraceFile) -> Series {
    let mut samples: Vec<(Nanos, String, u32, u64)> = Vec::new();
    for e in t.events_of(&[EventKind::Counter]) {
        if let Event::Counter(c) = e.unwrap() {
            samples.push((c.time, key_of(&t.name(c.metric)).to_string(), c.device.0, c.value));
        }
    }
    // Stable: samples of one series taken at the same ns keep their order.
    samples.sort_by_key(|s| s.0);
    let mut out: Series = BTreeMap::new();
    for (_, k, d, v) in samples {
        out.entry((k, d)).or_default().push(v);
    }
    out
}

/// The agent's lines about NVML and the GPU counters (not `gputrace run`'s
/// summary).
fn nvml_lines(r: &DoublesRun) -> Vec<String> {
    common::gputrace_lines(&r.out.stderr)
        .into_iter()
        .filter(|l| l.contains("NVML") || l.contains("nvml") || l.contains("counter"))
        .collect()
}

#[test]
fn recorded_series_are_exactly_what_nvml_returned() {
    let (r, t) = run(
        400,
        50,
        &[
            ("FAKE_NVML_SM_CLOCK", "1980,1500,1200"),
            ("FAKE_NVML_POWER", "300000,650000,700000,699000"),
            ("FAKE_NVML_THROTTLE", "0,4,4,68"),
            ("FAKE_NVML_GPU_UTIL", "0,100,97"),
            ("FAKE_NVML_ENERGY", "1000,2000,4000"),
            ("FAKE_NVML_SM_CLOCK_MAX", "1980"),
            ("FAKE_NVML_FAIL", "nvmlDeviceGetPcieThroughput:3"),
        ],
    );
    let t = t.expect("a trace");
    let got = series(&t);
    let (want, fails) = fake_report(&r);
    // What the fake returned, series by series, is what the trace holds.
    let want: BTreeMap<_, _> = want.into_iter().collect();
    assert_eq!(got, want);
    // And that is the script: its values in order, the last repeating.
    let sm = &got[&("SM_CLOCK".to_string(), 0)];
    assert!(sm.len() >= 5, "at 50 Hz for 400 ms, a handful of samples at least: {sm:?}");
    assert_eq!(&sm[..3], &[1980, 1500, 1200]);
    assert!(sm[3..].iter().all(|&v| v == 1200), "{sm:?}");
    let th = &got[&("THROTTLE".to_string(), 0)];
    assert_eq!(&th[..4], &[0, 4, 4, 68]);
    assert_eq!(got[&("SM_CLOCK_MAX".to_string(), 0)], vec![1980], "the ceiling is read once");
    // Both PCIe series failed once each and stopped: no samples, one line
    // and one loss record each, counted in the trailer.
    assert_eq!(fails.len(), 2, "{fails:?}");
    assert!(!got.keys().any(|(k, _)| k.starts_with("PCIE")));
    let lines = nvml_lines(&r);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines
            .iter()
            .all(|l| l.contains("nvmlDeviceGetPcieThroughput returned 3 (Not Supported)")),
        "{lines:?}"
    );
    let l = losses(&t);
    assert_eq!(l.len(), 2, "{l:?}");
    assert!(
        l.iter()
            .all(|(s, n, d)| *s == LossSource::COUNTER_FAILED && *n == 1 && d.contains("nvml.pcie_")),
        "{l:?}"
    );
    assert_eq!(extra(&t, "nvml.failed_calls"), "2");
    let total: usize = got.values().map(Vec::len).sum();
    assert_eq!(extra(&t, "nvml.samples"), total.to_string());
    assert_eq!(extra(&t, "nvml.samples_dropped"), "0");
    assert!(
        extra(&t, "nvml.status").starts_with("sampled gpu 0 at 50 Hz"),
        "{}",
        extra(&t, "nvml.status")
    );
    // The capture itself is whole.
    assert_eq!(t.event_counts().get(&EventKind::Kernel), Some(&100));
    // `info` lists every series with its sample count, text and JSON.
    let path = t.path().to_str().unwrap().to_string();
    let o = common::gputrace(&["info", &path]);
    let text = common::text(&o.stdout);
    let sm_line = format!("gpu0 nvml.sm_clock_mhz: {} samples", sm.len());
    assert!(text.contains(&sm_line), "{text}");
    assert!(text.contains("gpu0 nvml.sm_clock_max_mhz: 1 samples"), "{text}");
    assert!(text.contains("counter-failed: 2 counter series stopped early"), "{text}");
    let o = common::gputrace(&["info", "--json", &path]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let listed = j["files"][0]["counters"].as_array().unwrap();
    assert_eq!(listed.len(), got.len());
    let sm_json = listed.iter().find(|c| c["metric"] == metric::SM_CLOCK_MHZ).unwrap();
    assert_eq!(sm_json["samples"], sm.len());
    assert_eq!((sm_json["min"].as_u64(), sm_json["max"].as_u64()), (Some(1200), Some(1980)));
    // Samples lie within the trace's time span (the same time domain).
    let (lo, hi) = t.time_span().unwrap();
    for e in t.events_of(&[EventKind::Counter]) {
        let c = e.unwrap();
        assert!(c.start() >= lo && c.start() <= hi);
    }
}

#[test]
fn without_nvml_one_line_and_the_capture_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope/libnvidia-ml.so.1");
    let (r, t) = run(50, 10, &[("GPUTRACE_NVML", missing.to_str().unwrap())]);
    let t = t.expect("a trace");
    let lines = nvml_lines(&r);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("NVML not available") && lines[0].contains("nope/libnvidia-ml.so.1"),
        "{lines:?}"
    );
    assert_eq!(t.event_counts().get(&EventKind::Counter), None);
    assert_eq!(t.event_counts().get(&EventKind::Kernel), Some(&100));
    assert!(extra(&t, "nvml.status").starts_with("off:"), "{}", extra(&t, "nvml.status"));
}

#[test]
fn sampling_off_calls_no_nvml() {
    let (r, t) = run(50, 0, &[]);
    let t = t.expect("a trace");
    assert!(nvml_lines(&r).is_empty());
    assert_eq!(t.event_counts().get(&EventKind::Counter), None);
    assert!(fake_report(&r).0.is_empty() && fake_report(&r).1.is_empty(), "NVML was called");
    assert_eq!(
        t.header().extra.get("nvml.sampling").map(String::as_str),
        Some("off (GPUTRACE_GPU_SAMPLE_HZ=0)")
    );
}

/// Each NVML call failing in turn: only the series it feeds is missing,
/// with one line; the job and the other series go on.
#[test]
fn each_failing_call_stops_only_its_series() {
    let cases: [(&str, &[&str]); 10] = [
        ("nvmlDeviceGetUtilizationRates", &["GPU_UTIL", "MEM_UTIL"]),
        ("nvmlDeviceGetClockInfo", &["SM_CLOCK", "MEM_CLOCK"]),
        ("nvmlDeviceGetMaxClockInfo", &["SM_CLOCK_MAX"]),
        ("nvmlDeviceGetPowerUsage", &["POWER"]),
        ("nvmlDeviceGetTotalEnergyConsumption", &["ENERGY"]),
        ("nvmlDeviceGetTemperature", &["TEMPERATURE"]),
        ("nvmlDeviceGetCurrentClocksEventReasons", &["THROTTLE"]),
        ("nvmlDeviceGetMemoryInfo", &["MEM_USED"]),
        ("nvmlDeviceGetFieldValues", &["NVLINK_TX", "NVLINK_RX"]),
        ("nvmlDeviceGetTotalEccErrors", &["ECC_UNCORRECTED", "ECC_CORRECTED"]),
    ];
    let all = [
        "GPU_UTIL",
        "MEM_UTIL",
        "SM_CLOCK",
        "MEM_CLOCK",
        "SM_CLOCK_MAX",
        "POWER",
        "ENERGY",
        "TEMPERATURE",
        "THROTTLE",
        "MEM_USED",
        "PCIE_TX",
        "PCIE_RX",
        "NVLINK_TX",
        "NVLINK_RX",
        "ECC_UNCORRECTED",
        "ECC_CORRECTED",
    ];
    for (func, gone) in cases {
        let fail = format!("{func}:999");
        let (r, t) = run(60, 100, &[("FAKE_NVML_FAIL", &fail)]);
        let t = t.expect("a trace");
        let got = series(&t);
        for k in all {
            assert_eq!(
                got.contains_key(&(k.to_string(), 0)),
                !gone.contains(&k),
                "{func} failing: series {k} ({:?})",
                got.keys().collect::<Vec<_>>()
            );
        }
        let lines = nvml_lines(&r);
        // The clock, NVLink and ECC calls feed two series through two
        // calls: both fail.
        let calls = if gone.len() == 2 && func != "nvmlDeviceGetUtilizationRates" {
            2
        } else {
            1
        };
        assert_eq!(lines.len(), calls, "{func}: {lines:?}");
        assert!(lines.iter().all(|l| l.contains(func) && l.contains("999")), "{lines:?}");
        assert_eq!(extra(&t, "nvml.failed_calls"), calls.to_string(), "{func}");
        assert_eq!(got, fake_report(&r).0, "{func}: the rest is exactly what NVML returned");
    }
    // NVML that does not start, or does not know the device: one line, no series.
    for (fail, says) in [
        ("nvmlInit_v2:9", "NVML could not start"),
        ("nvmlDeviceGetHandleByUUID:6", "does not know this device"),
    ] {
        let (r, t) = run(50, 100, &[("FAKE_NVML_FAIL", fail)]);
        let t = t.expect("a trace");
        let lines = nvml_lines(&r);
        assert_eq!(lines.len(), 1, "{fail}: {lines:?}");
        assert!(lines[0].contains(says), "{lines:?}");
        assert_eq!(t.event_counts().get(&EventKind::Counter), None, "{fail}");
        assert_eq!(t.event_counts().get(&EventKind::Kernel), Some(&100), "{fail}");
    }
}

#[test]
fn a_device_lost_mid_run_stops_its_series_with_one_line() {
    let (r, t) = run(300, 100, &[("FAKE_NVML_LOST_AFTER", "3")]);
    let t = t.expect("a trace");
    let got = series(&t);
    for ((k, _), v) in &got {
        let n = if k == "SM_CLOCK_MAX" { 1 } else { 3 };
        assert_eq!(v.len(), n, "{k}: {v:?}");
    }
    assert_eq!(got.len(), 16, "every series but XID (none scripted)");
    let lines = nvml_lines(&r);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("gpu0") && lines[0].contains("lost"), "{lines:?}");
    let l = losses(&t);
    assert_eq!(l.len(), 1, "{l:?}");
    assert!(l[0].2.contains("all series") && l[0].2.contains("15"), "{l:?}");
    assert!(
        extra(&t, "nvml.status").contains("every series stopped"),
        "{}",
        extra(&t, "nvml.status")
    );
}

/// Two devices seen, local rank 1: this process samples device 1 only
/// (its rank's), matched to NVML by UUID.
#[test]
fn a_rank_samples_its_own_device() {
    let (_r, t) = run_on(
        100,
        50,
        2,
        &[
            ("LOCAL_RANK", "1"),
            ("FAKE_NVML_DEVICES", "2"),
            ("FAKE_NVML_SM_CLOCK_0", "1111"),
            ("FAKE_NVML_SM_CLOCK_1", "1222"),
        ],
        &[],
    );
    let t = t.expect("a trace");
    let got = series(&t);
    assert!(!got.is_empty());
    assert!(got.keys().all(|(_, d)| *d == 1), "{:?}", got.keys().collect::<Vec<_>>());
    assert!(got[&("SM_CLOCK".to_string(), 1)].iter().all(|&v| v == 1222));
    let note = t.header().extra.get("nvml.sampling").cloned().unwrap_or_default();
    assert!(note.contains("device 1 (local rank 1 of 2 visible devices)"), "{note}");
}

/// `gputrace report --json` of a trace.
fn report_json(t: &TraceFile) -> serde_json::Value {
    let o = common::gputrace(&["report", "--json", t.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", common::text(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// NVLink counters, ECC counts and XID events: the trace holds what the
/// fake returned, the report turns them into MB/s and error counts, and an
/// XID makes the `gpu-errors` finding.
#[test]
fn nvlink_ecc_and_xid_are_what_nvml_returned() {
    let (r, t) = run(
        400,
        50,
        &[
            ("FAKE_NVML_NVLINK_TX", "1000000,1002048,1010240"),
            ("FAKE_NVML_NVLINK_RX", "7"),
            ("FAKE_NVML_ECC_UNCORRECTED", "3,3,4"),
            ("FAKE_NVML_ECC_CORRECTED", "10,12"),
            ("FAKE_NVML_XID", "100:79,150:48"),
        ],
    );
    let t = t.expect("a trace");
    let got = series(&t);
    let (want, fails) = fake_report(&r);
    assert!(fails.is_empty(), "{fails:?}");
    assert_eq!(got, want);
    let tx = &got[&("NVLINK_TX".to_string(), 0)];
    assert_eq!(&tx[..3], &[1000000, 1002048, 1010240]);
    assert_eq!(got[&("XID".to_string(), 0)], vec![79, 48], "each XID once, in order");
    assert!(nvml_lines(&r).is_empty(), "{:?}", nvml_lines(&r));
    // The event set was polled, never waited on, and freed at the end.
    let calls = fake_calls(&r);
    assert!(calls.iter().all(|c| !c.contains("blocking")), "{calls:?}");
    assert_eq!(calls.iter().filter(|c| *c == "CALL nvmlEventSetFree -").count(), 1, "{calls:?}");
    assert_eq!(t.event_counts().get(&EventKind::Kernel), Some(&100));
    // The report.
    let v = report_json(&t);
    let h = &v["ranks"][0]["devices"][0]["hardware"];
    assert_eq!(h["ecc_uncorrected_errors"], 1, "{h}");
    assert_eq!(h["ecc_corrected_errors"], 2, "{h}");
    assert_eq!(h["xid_error_count"], 2, "{h}");
    assert_eq!(h["xid_errors"].as_array().unwrap().len(), 2, "{h}");
    assert_eq!(h["xid_errors"][0]["xid"], 79, "{h}");
    assert_eq!(h["nvlink_rx_mean_mbps"], 0.0, "{h}");
    // TX: the counter's increase over the time of its samples (all inside
    // the job's span or all of them: either way first to last of those used).
    assert!(h["nvlink_tx_mean_mbps"].as_f64().unwrap() > 0.0, "{h}");
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "gpu-errors")
        .unwrap_or_else(|| panic!("no gpu-errors finding: {}", v["findings"]));
    assert_eq!(f["severity"], "high", "{f}");
    let evidence = f["evidence"].as_str().unwrap();
    assert!(evidence.contains("XID 79, 48"), "{evidence}");
    assert!(evidence.contains("1 uncorrected ECC error"), "{evidence}");
    let o = common::gputrace(&["report", t.path().to_str().unwrap()]);
    let text = common::text(&o.stdout);
    assert!(
        text.contains("rank 0 gpu 0: NVLink ") && text.contains("2 XID error(s): 79, 48; ECC errors 1 uncorrected, 2 corrected"),
        "{text}"
    );
    // `info` lists the new series like any other.
    let o = common::gputrace(&["info", t.path().to_str().unwrap()]);
    let text = common::text(&o.stdout);
    assert!(text.contains("gpu0 nvml.xid: 2 samples"), "{text}");
    assert!(text.contains("gpu0 nvml.nvlink_tx_kib:"), "{text}");
}

/// A GPU without NVLink, with ECC off and without XID events: those series
/// are absent, one line each, and everything else goes on.
#[test]
fn unsupported_nvlink_ecc_and_xid_are_absent() {
    let (r, t) = run(
        200,
        50,
        &[(
            "FAKE_NVML_FAIL",
            "field138:3,field139:3,nvmlDeviceGetTotalEccErrors:3,nvmlDeviceRegisterEvents:3",
        )],
    );
    let t = t.expect("a trace");
    let got = series(&t);
    for k in ["NVLINK_TX", "NVLINK_RX", "ECC_UNCORRECTED", "ECC_CORRECTED", "XID"] {
        assert!(!got.contains_key(&(k.to_string(), 0)), "{k}: {:?}", got.keys().collect::<Vec<_>>());
    }
    assert_eq!(got.len(), 12, "the other series: {:?}", got.keys().collect::<Vec<_>>());
    assert_eq!(got, fake_report(&r).0, "the rest is exactly what NVML returned");
    let lines = nvml_lines(&r);
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert!(lines.iter().all(|l| l.contains("returned 3 (Not Supported)")), "{lines:?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("nvml.nvlink_tx_kib: nvmlDeviceGetFieldValues(NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX)")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("nvml.xid") && l.contains("nvmlDeviceRegisterEvents")),
        "{lines:?}"
    );
    let l = losses(&t);
    assert_eq!(l.len(), 5, "{l:?}");
    assert!(l.iter().all(|(s, _, _)| *s == LossSource::COUNTER_FAILED), "{l:?}");
    assert_eq!(extra(&t, "nvml.failed_calls"), "5");
    // The set made for XIDs is freed though no device could be registered.
    assert_eq!(fake_calls(&r).iter().filter(|c| *c == "CALL nvmlEventSetFree -").count(), 1);
    assert_eq!(t.event_counts().get(&EventKind::Kernel), Some(&100));
    // No errors, no finding; the hardware section has no NVLink or ECC numbers.
    let v = report_json(&t);
    let h = &v["ranks"][0]["devices"][0]["hardware"];
    assert!(h["nvlink_tx_mean_mbps"].is_null() && h["ecc_uncorrected_errors"].is_null(), "{h}");
    assert_eq!(h["xid_error_count"], 0, "{h}");
    assert!(v["findings"].as_array().unwrap().iter().all(|f| f["rule"] != "gpu-errors"));
}
