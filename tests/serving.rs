//! Serving metrics against real parts: a stand-in inference server built on the
//! real `prometheus_client` (tests/support/serving_server.py, vLLM's families,
//! scripted traffic) runs under `gputrace run` while the test doubles' testprog
//! makes the GPU timeline; the launcher's scrapes must hold exactly what the
//! script did. Under `CI=true` a missing `prometheus_client` fails the tests.

use gputrace_format::metric::serving::{self as names, Histogram};
use gputrace_format::{CounterSeries, EventKind, Producer, TraceFile};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::prometheus::{tool, Prometheus};
use common::{agent_lib, doubles, gputrace_lines, text, trace_files};

/// `python3` with `prometheus_client`, or `None` (a skip, said; a failure under `CI=true`).
fn python() -> Option<&'static str> {
    let ok = Command::new("python3")
        .args(["-c", "import prometheus_client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but `python3 -c 'import prometheus_client'` fails: .ci/run installs it from PyPI"
        );
        common::skip("python3 with prometheus_client is not installed (pip install prometheus_client)");
        return None;
    }
    Some("python3")
}

fn server_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/serving_server.py")
}

/// Decode iterations: three 2 ms kernels 20 µs apart, then an 8 ms pause (the bubble).
pub const ITERATIONS: usize = 20;

fn scenario() -> String {
    let mut s = String::from("version 13.5\ndevice\n");
    for _ in 0..ITERATIONS {
        s.push_str("kernels 3 2000000 20000 decode_step_graph\nsleep_ms 8\n");
    }
    s
}

/// `gputrace run FLAGS -o DIR/traces -- python3 serving_server.py PORTFILE testprog ...`.
fn run_server(py: &str, flags: &[&str], with_gpu: bool) -> (Output, tempfile::TempDir) {
    let dbl = doubles();
    let dir = tempfile::tempdir().unwrap();
    let scen = dir.path().join("scenario");
    std::fs::write(&scen, scenario()).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_gputrace"));
    c.arg("run")
        .args(flags)
        .arg("-o")
        .arg(dir.path().join("traces"))
        .arg("--")
        .arg(py)
        .arg(server_script())
        .arg(dir.path().join("port"));
    if with_gpu {
        c.arg(dbl.join("testprog")).args(["--ms", "5000", "exit", "0"]);
    }
    c.env("FAKE_CUPTI_SCENARIO", &scen)
        .env("FAKE_CUPTI_REPORT", dir.path().join("report"))
        .env("GPUTRACE_CUPTI", dbl.join("cupti13/libcupti.so.13"))
        .env("GPUTRACE_AGENT", agent_lib())
        .env_remove("RANK")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("gputrace run of the serving stand-in hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (child.wait_with_output().unwrap(), dir)
}

fn serving_file(dir: &Path) -> TraceFile {
    let files: Vec<PathBuf> = trace_files(&dir.join("traces"))
        .into_iter()
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with("serving."))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    TraceFile::open(&files[0]).unwrap()
}

fn series<'a>(all: &'a [CounterSeries], name: &str) -> &'a [(gputrace_format::Nanos, u64)] {
    &all.iter()
        .find(|s| s.metric == name)
        .unwrap_or_else(|| panic!("no series {name}"))
        .samples
}

fn delta(all: &[CounterSeries], name: &str) -> u64 {
    let s = series(all, name);
    s.last().unwrap().1 - s.first().unwrap().1
}

#[test]
fn scrapes_hold_what_the_server_did_on_the_gpu_timeline_clock() {
    let Some(py) = python() else { return };
    let (out, dir) = run_server(py, &["--serving-interval", "0.2"], true);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines = gputrace_lines(&out.stderr);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("gputrace: scraping vllm metrics from http://127.0.0.1:")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("serving metrics:") && l.contains("scrape(s) of")),
        "{lines:?}"
    );

    let t = serving_file(dir.path());
    assert_eq!(t.header().producer, Producer::Launcher);
    assert_eq!(t.header().extra.get("serving.engine").map(String::as_str), Some("vllm"));
    assert!(t.trailer().is_some(), "the launcher finishes its file");
    let all = t.counter_series().unwrap();
    assert!(all.iter().all(|s| s.metric.starts_with(names::PREFIX)));
    // First scrape: the history only; last: history + the window's traffic.
    let first = |name| series(&all, name).first().unwrap().1;
    assert_eq!(first(names::REQUESTS_COMPLETED), 7);
    assert_eq!(first(names::PROMPT_TOKENS), 700);
    assert_eq!(delta(&all, names::REQUESTS_COMPLETED), 100);
    assert_eq!(delta(&all, names::REQUESTS_FAILED), 3);
    assert_eq!(delta(&all, names::PROMPT_TOKENS), 12800);
    assert_eq!(delta(&all, names::GENERATION_TOKENS), 25600);
    assert_eq!(delta(&all, &Histogram::Ttft.count()), 100);
    assert_eq!(delta(&all, &Histogram::Ttft.bucket("0.04")), 50);
    assert_eq!(delta(&all, &Histogram::Ttft.bucket("0.5")), 90);
    assert_eq!(delta(&all, &Histogram::Ttft.bucket("+Inf")), 100);
    assert_eq!(delta(&all, &Histogram::Ttft.sum_ns()), 43_500_000_000);
    assert_eq!(delta(&all, &Histogram::Itl.count()), 1100);
    assert_eq!(delta(&all, &Histogram::E2e.count()), 100);
    assert_eq!(delta(&all, &Histogram::Queue.bucket("0.3")), 80);
    let max = |name| series(&all, name).iter().map(|s| s.1).max().unwrap();
    assert_eq!(max(names::REQUESTS_WAITING), 5);
    assert_eq!(max(names::REQUESTS_RUNNING), 8);
    assert_eq!(max(names::KV_CACHE_USAGE_BP), 9300);
    assert_eq!(series(&all, names::REQUESTS_WAITING).last().unwrap().1, 0);
    assert_eq!(series(&all, names::SCRAPES_FAILED).last().unwrap().1, 0);

    // The GPU trace is on the same clock: its kernels fall inside the scrapes' window.
    let gpu: Vec<TraceFile> = trace_files(&dir.path().join("traces"))
        .into_iter()
        .map(|p| TraceFile::open(p).unwrap())
        .filter(|t| t.header().producer == Producer::Agent)
        .collect();
    assert_eq!(gpu.len(), 1);
    let kernels: Vec<u64> = gpu[0]
        .events_of(&[EventKind::Kernel])
        .map(|e| match e.unwrap() {
            gputrace_format::Event::Kernel(k) => (k.start.0 as i64 + gpu[0].header().realtime_shift()) as u64,
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(kernels.len(), 3 * ITERATIONS);
    let scrapes = series(&all, names::REQUESTS_WAITING);
    let (w0, w1) = (scrapes.first().unwrap().0 .0, scrapes.last().unwrap().0 .0);
    assert!(kernels.iter().all(|&k| w0 < k && k < w1), "kernels outside [{w0}, {w1}]");

    // The report's serving section: every number what the script implies.
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["report", "--json", "--gpu-hour-cost", "2.5"])
        .arg(dir.path().join("traces"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["ranks"].as_array().unwrap().len(), 1, "the launcher's file is no rank");
    let s = &r["serving"][0];
    let window_s = s["window_ns"].as_u64().unwrap() as f64 / 1e9;
    assert_eq!(s["window_ns"].as_u64().unwrap(), w1 - w0);
    assert_eq!(s["engine"], "vllm");
    assert_eq!(s["requests"]["completed"], 100);
    assert_eq!(s["requests"]["failed"], 3);
    let close = |v: &serde_json::Value, want: f64| {
        let v = v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
        assert!((v - want).abs() <= 1e-9 * want.abs().max(1.0), "{v} != {want}");
    };
    close(&s["requests"]["completed_per_s"], 100.0 / window_s);
    close(&s["requests"]["error_rate"], 3.0 / 103.0);
    assert_eq!(s["tokens"]["prompt"], 12800);
    assert_eq!(s["tokens"]["generation"], 25600);
    close(&s["tokens"]["generation_per_s"], 25600.0 / window_s);
    let lat = |name: &str| s["latency"].as_array().unwrap().iter().find(|l| l["name"] == name).unwrap().clone();
    let q = |name: &str, p: &str| lat(name)[p]["seconds"].clone();
    // By hand from the script's observations and the buckets (linear inside the bucket).
    for (name, p, want) in [
        ("ttft", "p50", 0.04),
        ("ttft", "p95", 3.75),
        ("ttft", "p99", 4.75),
        ("itl", "p50", 0.01 + 0.015 * 550.0 / 1000.0),
        ("itl", "p95", 0.05 + 0.025 * 45.0 / 100.0),
        ("itl", "p99", 0.05 + 0.025 * 89.0 / 100.0),
        ("e2e", "p50", 1.25),
        ("e2e", "p99", 1.495),
        ("queue", "p50", 0.3 * 50.0 / 80.0),
        ("queue", "p95", 0.5 + 0.3 * 15.0 / 20.0),
    ] {
        close(&q(name, p), want);
    }
    assert_eq!(lat("ttft")["p99"]["bucket_lower"], 2.5);
    assert_eq!(lat("ttft")["p99"]["bucket_upper"], 5.0);
    assert_eq!(lat("ttft")["count"], 100);
    close(&lat("ttft")["mean_s"], 43.5 / 100.0);
    assert_eq!(lat("itl")["count"], 1100);
    assert_eq!(s["waiting"]["max"], 5.0);
    assert_eq!(s["running"]["max"], 8.0);
    close(&s["kv_cache_usage"]["max"], 0.93);
    // Iterations: the scenario's 20 passes, each 3 × 2 ms of kernels, 8 ms apart or more.
    let it = &s["iterations"];
    assert_eq!(it["count"], ITERATIONS as u64);
    assert_eq!(it["unknown"], ITERATIONS as u64);
    assert!(it["bubble"]["p50_ns"].as_u64().unwrap() >= 8_000_000, "{it}");
    assert_eq!(it["busy"]["p50_ns"], 6_000_000);
    let g = &s["gpu_time"];
    assert_eq!(g["devices"], 1);
    assert_eq!(g["serving_work_ns"], 3 * ITERATIONS as u64 * 2_000_000);
    let parts = ["serving_work_ns", "waste_bubbles_ns", "headroom_idle_ns"].map(|k| g[k].as_u64().unwrap());
    assert_eq!(parts.iter().sum::<u64>(), g["window_gpu_ns"].as_u64().unwrap());
    assert_eq!(g["window_gpu_ns"].as_u64().unwrap(), w1 - w0);
    let gpu_hours = window_s / 3600.0;
    close(&s["cost"]["usd_per_m_output_tokens"], 2.5 * gpu_hours / 25600.0 * 1e6);
    close(&s["cost"]["usd_per_m_input_tokens"], 2.5 * gpu_hours / 12800.0 * 1e6);
    assert!(r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["rule"] == "serving-kv-cache-limit"));

    parquet_serving_table_agrees(&dir.path().join("traces"), s);

    // The text says the same, in place of training steps.
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .arg("report")
        .arg(dir.path().join("traces"))
        .output()
        .unwrap();
    let report = text(&out.stdout);
    assert!(report.contains("requests: 100 completed"), "{report}");
    assert!(report.contains("ttft        100"), "{report}");
    assert!(!report.contains("Productive work"), "{report}");

    // `gputrace metrics` carries the same window.
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .arg("metrics")
        .arg(dir.path().join("traces"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let prom = text(&out.stdout);
    for want in [
        "outcome=\"completed\"} 100\n",
        "outcome=\"failed\"} 3\n",
        "kind=\"generation\"} 25600\n",
        "latency=\"ttft\",q=\"0.99\"} 4.75\n",
    ] {
        assert!(
            prom.lines()
                .any(|l| l.starts_with("gputrace_serving_") && format!("{l}\n").ends_with(want)),
            "{want}\n{prom}"
        );
    }
    common::prometheus::promtool_check(&prom);
}

#[test]
fn a_named_endpoint_that_never_answers_is_one_line_and_the_job_runs_on() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["run", "--serving-interval", "0.2", "--serving-metrics", &url, "-o"])
        .arg(dir.path().join("traces"))
        .args(["--", "sh", "-c", "sleep 1; exit 3"])
        .env("GPUTRACE_AGENT", agent_lib())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "the job's exit code is kept");
    let lines: Vec<String> = gputrace_lines(&out.stderr)
        .into_iter()
        .filter(|l| l.contains("serving metrics"))
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains(&url) && lines[0].contains("never answered"), "{lines:?}");
    assert!(trace_files(&dir.path().join("traces")).is_empty());
}

#[test]
fn off_means_no_probe_and_no_file() {
    // A job listening on loopback: with `off` it is never probed.
    let dir = tempfile::tempdir().unwrap();
    let script = "import socket,time\ns=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); time.sleep(1.5)";
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        // Host samples would give this Python job a trace of its own (docs/host.md):
        // off, so that any file here would be the scraper's.
        .args([
            "run",
            "--no-host-samples",
            "--serving-interval",
            "0.2",
            "--serving-metrics",
            "off",
            "-o",
        ])
        .arg(dir.path().join("traces"))
        .args(["--", "python3", "-c", script])
        .env("GPUTRACE_AGENT", agent_lib())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stderr).contains("serving"), "{}", text(&out.stderr));
    assert!(trace_files(&dir.path().join("traces")).is_empty());
}

/// A real Prometheus server's `histogram_quantile` and gputrace's agree on the same
/// buckets (scraped from a `prometheus_client` histogram with observations spread over
/// many buckets, the `+Inf` bucket included).
#[test]
fn quantiles_equal_a_real_prometheus_servers() {
    let Some(py) = python() else { return };
    let Some(prom) = tool("prometheus") else { return };
    let dir = tempfile::tempdir().unwrap();
    let port_file = dir.path().join("port");
    let script = format!(
        "import os,time\n\
         from prometheus_client import CollectorRegistry, Histogram, start_http_server\n\
         r = CollectorRegistry()\n\
         h = Histogram('vllm:e2e_request_latency_seconds', 'e2e', ['model_name'], registry=r, buckets=[0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0])\n\
         for i in range(997): h.labels(model_name='m').observe(((i * 7919) % 1000) / 75.0)\n\
         s, _ = start_http_server(0, addr='127.0.0.1', registry=r)\n\
         open({port:?} + '.tmp', 'w').write(str(s.server_port)); os.rename({port:?} + '.tmp', {port:?})\n\
         time.sleep(60)\n",
        port = port_file.to_str().unwrap()
    );
    let mut server = Command::new(py).args(["-c", &script]).spawn().unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while !port_file.exists() {
        assert!(Instant::now() < until, "the histogram server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let port: u16 = std::fs::read_to_string(&port_file).unwrap().trim().parse().unwrap();
    let prom = Prometheus::start(&prom, format!("127.0.0.1:{port}").parse().unwrap(), Duration::from_millis(200));
    let until = Instant::now() + Duration::from_secs(60);
    while query_scalar_or_none(&prom, "count(vllm_e2e_request_latency_seconds_bucket)") != Some(10.0) {
        assert!(Instant::now() < until, "prometheus never scraped the histogram server");
        std::thread::sleep(Duration::from_millis(200));
    }

    // gputrace's reading of the same page.
    let url = gputrace_serving::http::Url::parse(&format!("http://127.0.0.1:{port}/metrics")).unwrap();
    let page = gputrace_serving::http::get(&url, Duration::from_secs(5)).unwrap();
    let (samples, bad) = gputrace_serving::expo::parse(&page, |n| n == "vllm:e2e_request_latency_seconds_bucket");
    assert_eq!(bad, 0);
    let buckets: Vec<(f64, f64)> = samples
        .iter()
        .map(|s| (gputrace_format::metric::serving::parse_le(s.label("le").unwrap()).unwrap(), s.value))
        .collect();
    assert_eq!(buckets.len(), 10);
    for q in [0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999] {
        // Prometheus stores the OpenMetrics spelling (underscore).
        let theirs = query_scalar(&prom, &format!("histogram_quantile({q}, vllm_e2e_request_latency_seconds_bucket)"));
        let ours = gputrace_analysis::serving::histogram_quantile(q, &buckets).map(|x| x.seconds);
        match ours {
            Some(v) => assert!(
                (v - theirs).abs() <= 1e-12 * theirs.abs().max(1.0),
                "q={q}: ours {v}, Prometheus {theirs}"
            ),
            None => assert!(theirs.is_nan(), "q={q}: ours NaN, Prometheus {theirs}"),
        }
    }
    drop(prom);
    let _ = server.kill();
    let _ = server.wait();
}

/// The value of a query answered by one sample, if so.
fn query_scalar_or_none(prom: &Prometheus, q: &str) -> Option<f64> {
    let result = prom.query(q);
    (result.len() == 1).then(|| result[0].1)
}

/// The value of a query whose answer is one sample.
fn query_scalar(prom: &Prometheus, q: &str) -> f64 {
    let result = prom.query(q);
    assert_eq!(result.len(), 1, "{q}: {result:?}");
    result[0].1
}

/// A PyTorch profiler (Kineto) trace of a serving loop gets iterations and bubbles from
/// its timeline alone with `report --serving`: ten forward passes of four 300 µs kernels
/// 5 µs apart, 3 ms between passes, the first inside a GPU annotation named `prefill`.
#[test]
fn a_kineto_trace_of_a_serving_loop_gets_iterations_and_bubbles() {
    let mut events = Vec::new();
    let mut t = 1000u64; // µs
    for i in 0..10 {
        if i == 0 {
            events.push(format!(
                r#"{{"ph": "X", "cat": "gpu_user_annotation", "name": "prefill", "pid": 0, "tid": 7, "ts": {t}, "dur": 1215}}"#
            ));
        }
        for k in 0..4 {
            events.push(format!(
                r#"{{"ph": "X", "cat": "kernel", "name": "layer_{k}", "pid": 0, "tid": 7, "ts": {t}, "dur": 300, "args": {{"device": 0, "context": 1, "stream": 7, "correlation": {}, "grid": [1, 1, 1], "block": [1, 1, 1]}}}}"#,
                i * 4 + k + 1
            ));
            t += 305;
        }
        t += 3000 - 5;
    }
    let json = format!(
        r#"{{"schemaVersion": 1, "deviceProperties": [{{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85018279936, "computeMajor": 9, "computeMinor": 0, "numSms": 132}}], "traceEvents": [{}], "baseTimeNanoseconds": 1700000000000000000}}"#,
        events.join(",\n")
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve_loop.pt.trace.json");
    std::fs::write(&path, json).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["report", "--serving", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let it = &r["serving"][0]["iterations"];
    assert_eq!(it["count"], 10, "{it}");
    assert_eq!(it["prefill"], 1);
    assert_eq!(it["unknown"], 9);
    assert_eq!(it["busy"]["p50_ns"], 1_200_000);
    assert_eq!(it["bubble"]["p50_ns"], 3_000_000);
    assert_eq!(it["bubble"]["max_ns"], 3_000_000);
    assert_eq!(it["bubble"]["total_ns"], 9 * 3_000_000);
    assert!(r["serving"][0]["gpu_time"].is_null(), "no server gauges: no waste/headroom split");
    // Without --serving the report is a training report as before.
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["report", "--json"])
        .arg(&path)
        .output()
        .unwrap();
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r.get("serving").is_none());
}

/// The Parquet `serving` table holds the scraped series: DuckDB's window
/// increases equal `report --json`'s requests, tokens and histogram counts.
fn parquet_serving_table_agrees(traces: &Path, s: &serde_json::Value) {
    if !common::have_python_module("duckdb") {
        return;
    }
    let pq = common::parquet_export(traces, "srv");
    let sql = r#"
import duckdb, json, sys
t = f"read_parquet('{sys.argv[1]}/serving/*/*/*.parquet', hive_partitioning=false)"
rows = duckdb.sql(f"""
  select series, max(value) - min(value) from {t}
  where series in ('serving.requests_completed', 'serving.requests_failed', 'serving.prompt_tokens',
                   'serving.generation_tokens', 'serving.ttft_seconds.count')
  group by series order by series""").fetchall()
engines = duckdb.sql(f"select distinct engine from {t}").fetchall()
print(json.dumps({"increase": dict(rows), "engines": engines}))
"#;
    let v = common::python_json(sql, &pq);
    let inc = &v["increase"];
    assert_eq!(inc["serving.requests_completed"], s["requests"]["completed"], "{v}");
    assert_eq!(inc["serving.requests_failed"], s["requests"]["failed"], "{v}");
    assert_eq!(inc["serving.prompt_tokens"], s["tokens"]["prompt"], "{v}");
    assert_eq!(inc["serving.generation_tokens"], s["tokens"]["generation"], "{v}");
    let ttft = s["latency"].as_array().unwrap().iter().find(|l| l["name"] == "ttft").unwrap();
    assert_eq!(inc["serving.ttft_seconds.count"], ttft["count"], "{v}");
    assert_eq!(v["engines"], serde_json::json!([["vllm"]]));
}
