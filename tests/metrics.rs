//! Live and offline Prometheus metrics against real parts: `promtool check metrics`
//! accepts the exposition, and a real Prometheus server scraping `gputrace run
//! --metrics` of the doubles' test program ends with exactly what `gputrace report
//! --json` says of the trace written at the end. Under `CI=true` a missing Prometheus
//! fails the tests instead of skipping them.

use serde_json::Value;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::prometheus::{free_port, promtool_check, tool, Prometheus};
use common::{agent_lib, doubles, gputrace, text};

fn report_json(dir: &Path) -> Value {
    let out = gputrace(&["report", "--json", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn offline_metrics_pass_promtool_and_equal_the_report() {
    let dir = tempfile::tempdir().unwrap();
    common::demo(dir.path(), 2, 4, 4);
    let out = gputrace(&["metrics", "--job", "demo \"job\"", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let exposition = text(&out.stdout);
    promtool_check(&exposition);
    let report = report_json(dir.path());
    for rank in report["ranks"].as_array().unwrap() {
        for d in rank["devices"].as_array().unwrap() {
            let labels = format!(
                "job=\"demo \\\"job\\\"\",host=\"{}\",rank=\"{}\",local_rank=\"{}\",gpu=\"{}\"",
                rank["hostname"].as_str().unwrap(),
                rank["rank"],
                rank["local_rank"],
                d["device"]
            );
            for (category, key) in [
                ("compute", "compute_ns"),
                ("communication_exposed", "exposed_communication_ns"),
                ("transfer_exposed", "exposed_transfer_ns"),
                ("idle", "idle_ns"),
            ] {
                let line = format!("gputrace_gpu_seconds_total{{{labels},category=\"{category}\"}} ");
                let value: f64 = exposition
                    .lines()
                    .find_map(|l| l.strip_prefix(&line))
                    .unwrap_or_else(|| panic!("no {line} in\n{exposition}"))
                    .parse()
                    .unwrap();
                assert_eq!((value * 1e9).round() as u64, d[key].as_u64().unwrap(), "{line}");
            }
        }
    }
}

#[test]
fn bad_input_is_an_error_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.gtrace");
    std::fs::write(&bad, b"not a trace").unwrap();
    let out = gputrace(&["metrics", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("bad.gtrace"), "{}", text(&out.stderr));
}

/// Kernels in five bursts over about four seconds, so that scrapes (every 0.5 s, the
/// first one at a random offset after Prometheus finds the target) see the trace grow.
const SCENARIO: &str = "version 13.5\ndevice\n\
    kernels 200 20000 5000 gemm\nkernels 50 8000 2000 ncclDevKernel_AllReduce_Sum_f32_RING_LL\nsleep_ms 400\n\
    kernels 200 20000 5000 gemm\nsleep_ms 400\nkernels 200 20000 5000 gemm\nsleep_ms 400\n\
    kernels 200 20000 5000 gemm\nsleep_ms 400\nkernels 200 20000 5000 gemm\nmemcpy 20 1048576 1\nsleep_ms 2000\n";

#[test]
fn prometheus_scraping_a_live_run_ends_with_the_reports_numbers() {
    let Some(bin) = tool("prometheus") else { return };
    let target: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let prom = Prometheus::start(&bin, target, Duration::from_millis(500));
    let dbl = doubles();
    let dir = tempfile::tempdir().unwrap();
    let scen = dir.path().join("scenario");
    std::fs::write(&scen, SCENARIO).unwrap();
    let traces = dir.path().join("traces");
    let textfiles = dir.path().join("textfiles");
    let mut run = Command::new(env!("CARGO_BIN_EXE_gputrace"));
    run.args([
        "run",
        "--metrics",
        &target.to_string(),
        "--metrics-interval",
        "0.2",
        "--metrics-linger",
        "3",
    ])
    .args(["--metrics-job", "live-test", "--metrics-textfile", textfiles.to_str().unwrap()])
    .arg("-o")
    .arg(&traces)
    .arg("--")
    .arg(dbl.join("testprog"))
    .args(["--ms", "10000"])
    .env("FAKE_CUPTI_SCENARIO", &scen)
    .env("FAKE_CUPTI_REPORT", dir.path().join("report"))
    .env("GPUTRACE_CUPTI", dbl.join("cupti13/libcupti.so.13"))
    .env("GPUTRACE_AGENT", agent_lib())
    .env("GPUTRACE_FLUSH_MS", "50")
    .env("RANK", "5")
    .env("LOCAL_RANK", "0")
    .env_remove("GPUTRACE_CLASSIFY")
    .env_remove("SLURM_LOCALID")
    .env_remove("OMPI_COMM_WORLD_LOCAL_RANK")
    .env_remove("MPI_LOCALRANKID")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = run.spawn().unwrap();
    // While the job runs, the textfile appears and holds the same families.
    let mut textfile_seen = false;
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "gputrace run hung");
        if !textfile_seen {
            if let Ok(entries) = std::fs::read_dir(&textfiles) {
                for e in entries.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    if name.ends_with(".prom") {
                        let t = std::fs::read_to_string(e.path()).unwrap_or_default();
                        textfile_seen |= t.contains("# TYPE gputrace_metrics_analyses_total counter");
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "the job's exit code: {}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains(&format!("serving live metrics on http://{target}/metrics")),
        "{}",
        text(&out.stderr)
    );
    assert!(textfile_seen, "the textfile was written while the job ran");
    assert_eq!(
        std::fs::read_dir(&textfiles).unwrap().count(),
        0,
        "the textfile is removed once the job is over"
    );

    // The last scrape (during the linger) saw the finished trace: its values are the report's.
    let report = report_json(&traces);
    let rank = &report["ranks"][0];
    assert_eq!(rank["rank"], 5);
    let d = &rank["devices"][0];
    let selector = "{job=\"live-test\",rank=\"5\",gpu=\"0\"}";
    let mut by_category = std::collections::BTreeMap::new();
    for (labels, v) in prom.query(&format!("gputrace_gpu_seconds_total{selector}")) {
        by_category.insert(labels["category"].as_str().unwrap().to_string(), (v * 1e9).round() as u64);
    }
    let want: std::collections::BTreeMap<String, u64> = [
        ("compute", "compute_ns"),
        ("communication_exposed", "exposed_communication_ns"),
        ("transfer_exposed", "exposed_transfer_ns"),
        ("idle", "idle_ns"),
    ]
    .iter()
    .map(|(c, k)| (c.to_string(), d[*k].as_u64().unwrap()))
    .collect();
    assert_eq!(by_category, want, "Prometheus' last values against report --json");
    assert!(want["compute"] > 0 && want["communication_exposed"] > 0);
    let kernels = prom.query(&format!("gputrace_gpu_kernels_total{selector}"));
    assert_eq!(kernels.len(), 1);
    assert_eq!(kernels[0].1 as u64, d["kernels"].as_u64().unwrap());
    assert_eq!(d["kernels"], 1050);
    let finished = prom.query("gputrace_trace_finished{job=\"live-test\",rank=\"5\"}");
    assert_eq!(finished.len(), 1);
    assert_eq!(finished[0].1, 1.0, "the final scrape saw the finished trace");
    // And earlier scrapes saw it live: unfinished, with fewer kernels than at the end.
    let live = prom.query("min_over_time(gputrace_trace_finished{job=\"live-test\"}[5m])");
    assert_eq!(live[0].1, 0.0, "no scrape saw the trace while the job ran");
    let fewer = prom.query(&format!("min_over_time(gputrace_gpu_kernels_total{selector}[5m])"));
    assert!(fewer[0].1 < 1050.0, "every scrape saw all kernels: nothing was live");
    // A counter never went down between scrapes.
    for q in ["resets(gputrace_gpu_seconds_total[5m])", "resets(gputrace_gpu_kernels_total[5m])"] {
        for (labels, v) in prom.query(q) {
            assert_eq!(v, 0.0, "{q} {labels:?}");
        }
    }
}

#[test]
fn a_taken_port_is_one_line_and_the_job_runs_on() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let r = common::run_testprog(
        13,
        "version 13.5\ndevice\nkernels 10 1000 1000 gemm\n",
        &["--metrics", &port],
        &["--ms", "5000", "exit", "7"],
        &[],
        &["LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"],
    );
    assert_eq!(r.out.status.code(), Some(7), "the job's exit code is kept");
    let err = text(&r.out.stderr);
    assert_eq!(err.lines().filter(|l| l.contains("cannot serve metrics")).count(), 1, "{err}");
    assert!(
        !common::trace_files(&r.dir.path().join("traces")).is_empty(),
        "the trace is still written"
    );
}
