//! A server of one's own marks its requests (`gputrace.request(...)` of the
//! Python module): a real CPython script under `gputrace run` marks requests
//! at scripted times while the test doubles' testprog makes the GPU timeline;
//! every per-request number of the report must be what the script implies.

use gputrace_format::{Event, EventKind, Producer, TraceFile};
use serde_json::Value;
use std::process::{Command, Stdio};

mod common;
use common::{agent_lib, doubles, text, trace_files};

/// One scripted request, times in ms after the script's base time.
struct Req {
    id: String,
    arrive: u64,
    scheduled: Option<u64>,
    first: Option<u64>,
    /// End time and whether it failed.
    end: Option<(u64, bool)>,
    prompt: u64,
    generated: u64,
}

fn requests() -> Vec<Req> {
    let mut v: Vec<Req> = (0..10u64)
        .map(|i| {
            let (queue, ttft, itl, generated) = (1 + i * 7 % 10, 30 + 13 * i, 5 + i, 4 + 3 * i);
            let arrive = 25 * i;
            Req {
                // Even: a number; odd: a string id (hashed by the module).
                id: if i % 2 == 0 {
                    format!("{}", i * 1000 + 7)
                } else {
                    format!("'req-{i}'")
                },
                arrive,
                scheduled: Some(arrive + queue),
                first: Some(arrive + ttft),
                end: Some((arrive + ttft + itl * (generated - 1), false)),
                prompt: 50 + 10 * i,
                generated,
            }
        })
        .collect();
    v.push(Req {
        id: "'aborted'".into(),
        arrive: 260,
        scheduled: Some(265),
        first: Some(300),
        end: Some((330, true)),
        prompt: 70,
        generated: 4,
    });
    v.push(Req {
        id: "'still-queued'".into(),
        arrive: 400,
        scheduled: Some(410),
        first: None,
        end: None,
        prompt: 90,
        generated: 0,
    });
    v
}

/// The script: start testprog (the GPU timeline), mark every request at its
/// scripted time (`at_ns`, so that sleeping late changes nothing), wait.
fn script(reqs: &[Req]) -> String {
    let mut marks = String::new();
    for r in reqs {
        let mut m = |phase: &str, at: u64, tokens: u64| marks.push_str(&format!("    ({}, {phase:?}, {tokens}, {at}),\n", r.id));
        m("arrive", r.arrive, r.prompt);
        if let Some(s) = r.scheduled {
            m("scheduled", s, 0);
        }
        if let Some(f) = r.first {
            m("first_token", f, 0);
        }
        if let Some((e, failed)) = r.end {
            m(if failed { "fail" } else { "finish" }, e, r.generated);
        }
    }
    format!(
        "import subprocess, sys, time\nimport gputrace\n\
         base = time.time_ns() // 1_000_000 * 1_000_000\n\
         gpu = subprocess.Popen(sys.argv[1:])\n\
         MARKS = [\n{marks}]\n\
         ok = [gputrace.request(rid, phase, tokens=tok, at_ns=base + ms * 1_000_000) for rid, phase, tok, ms in MARKS]\n\
         gpu.wait()\n\
         sys.exit(0 if all(ok) and gpu.returncode == 0 else 3)\n"
    )
}

/// Nearest rank, as the report states: the ⌈q·n⌉-th smallest.
fn rank(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    sorted[((q * n as f64).ceil() as usize).clamp(1, n) - 1]
}

fn check_stat(stat: &Value, mut values: Vec<f64>) {
    values.sort_by(f64::total_cmp);
    let name = stat["name"].as_str().unwrap();
    assert_eq!(stat["count"].as_u64().unwrap(), values.len() as u64, "{name}");
    for (k, q) in [("p50", 0.5), ("p95", 0.95), ("p99", 0.99)] {
        assert_eq!(stat[k].as_f64().unwrap(), rank(&values, q), "{name} {k}");
    }
    assert_eq!(stat["min"].as_f64().unwrap(), values[0], "{name} min");
    assert_eq!(stat["max"].as_f64().unwrap(), *values.last().unwrap(), "{name} max");
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    assert!(
        (stat["mean"].as_f64().unwrap() - mean).abs() <= 1e-12 * mean.abs().max(1.0),
        "{name} mean"
    );
}

fn python3() -> Option<&'static str> {
    let ok = Command::new("python3")
        .arg("-c")
        .arg("import ctypes, hashlib")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true but python3 is missing");
        common::skip("python3 is not installed");
        return None;
    }
    Some("python3")
}

#[test]
fn request_marks_give_exact_per_request_numbers() {
    let Some(py) = python3() else { return };
    let reqs = requests();
    let dbl = doubles();
    let dir = tempfile::tempdir().unwrap();
    let scen = dir.path().join("scenario");
    let mut s = String::from("version 13.5\ndevice\n");
    for _ in 0..20 {
        s.push_str("kernels 3 2000000 20000 decode_step\nsleep_ms 8\n");
    }
    std::fs::write(&scen, s).unwrap();
    let script_path = dir.path().join("server.py");
    std::fs::write(&script_path, script(&reqs)).unwrap();
    let traces = dir.path().join("traces");
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["run", "--no-host-samples", "--serving-metrics", "off", "-o"])
        .arg(&traces)
        .arg("--")
        .arg(py)
        .arg(&script_path)
        .arg(dbl.join("testprog"))
        .args(["--ms", "5000", "exit", "0"])
        .env("FAKE_CUPTI_SCENARIO", &scen)
        .env("FAKE_CUPTI_REPORT", dir.path().join("report"))
        .env("GPUTRACE_CUPTI", dbl.join("cupti13/libcupti.so.13"))
        .env("GPUTRACE_AGENT", agent_lib())
        .env_remove("RANK")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));

    // The marks are request events of the Python process's own trace, no string per request.
    let files: Vec<TraceFile> = trace_files(&traces).into_iter().map(|p| TraceFile::open(p).unwrap()).collect();
    assert!(files.iter().all(|t| t.header().producer == Producer::Agent));
    let marked: Vec<&TraceFile> = files
        .iter()
        .filter(|t| t.chunks().iter().any(|c| c.kind == EventKind::Request))
        .collect();
    assert_eq!(marked.len(), 1, "one process marked");
    let n_marks = marked[0]
        .events_of(&[EventKind::Request])
        .filter(|e| matches!(e, Ok(Event::Request(_))))
        .count();
    let expected_marks: usize = reqs
        .iter()
        .map(|r| 1 + r.scheduled.is_some() as usize + r.first.is_some() as usize + r.end.is_some() as usize)
        .sum();
    assert_eq!(n_marks, expected_marks);
    assert!(
        marked[0].string_count() < 16,
        "request marks add no strings: {}",
        marked[0].string_count()
    );

    let report = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["report", "--json", "--gpu-hour-cost", "2.5"])
        .arg(&traces)
        .output()
        .unwrap();
    assert!(report.status.success(), "{}", text(&report.stderr));
    let v: Value = serde_json::from_slice(&report.stdout).unwrap();
    let serving = v["serving"].as_array().unwrap();
    assert_eq!(serving.len(), 1, "{}", v["serving"]);
    let s = &serving[0];
    let m = &s["request_marks"];
    assert_eq!(m["source"], "gputrace.request marks");

    // What the script implies.
    let ms = 1_000_000u64;
    let all_times: Vec<u64> = reqs
        .iter()
        .flat_map(|r| [Some(r.arrive), r.scheduled, r.first, r.end.map(|e| e.0)])
        .flatten()
        .collect();
    let window = (all_times.iter().max().unwrap() - all_times.iter().min().unwrap()) * ms;
    assert_eq!(m["window_ns"].as_u64().unwrap(), window);
    assert_eq!(s["window_ns"].as_u64().unwrap(), window);
    let secs = window as f64 / 1e9;
    let done: Vec<&Req> = reqs.iter().filter(|r| matches!(r.end, Some((_, false)))).collect();
    assert_eq!(m["requests"]["completed"].as_u64(), Some(done.len() as u64));
    assert_eq!(m["requests"]["failed"].as_u64(), Some(1));
    assert_eq!(m["unfinished"].as_u64(), Some(1));
    assert_eq!(m["requests"]["completed_per_s"].as_f64().unwrap(), done.len() as f64 / secs);
    let prompt: u64 = reqs.iter().map(|r| r.prompt).sum();
    let generated: u64 = reqs.iter().filter(|r| r.end.is_some()).map(|r| r.generated).sum();
    assert_eq!(m["tokens"]["prompt"].as_u64(), Some(prompt));
    assert_eq!(m["tokens"]["generation"].as_u64(), Some(generated));
    assert_eq!(m["tokens"]["generation_per_s"].as_f64().unwrap(), generated as f64 / secs);
    assert_eq!(
        s["tokens"]["generation"].as_u64(),
        Some(generated),
        "the section's tokens are the marks'"
    );

    let stat = |name: &str| {
        m["latency"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .unwrap_or_else(|| panic!("no {name}"))
            .clone()
    };
    let sec = |a: u64, b: u64| ((b - a) * ms) as f64 / 1e9;
    check_stat(&stat("ttft"), reqs.iter().filter_map(|r| Some(sec(r.arrive, r.first?))).collect());
    check_stat(
        &stat("queue"),
        reqs.iter().filter_map(|r| Some(sec(r.arrive, r.scheduled?))).collect(),
    );
    check_stat(&stat("e2e"), done.iter().map(|r| sec(r.arrive, r.end.unwrap().0)).collect());
    check_stat(
        &stat("itl"),
        done.iter()
            .map(|r| ((r.end.unwrap().0 - r.first.unwrap()) * ms) as f64 / (r.generated - 1) as f64 / 1e9)
            .collect(),
    );
    check_stat(
        &m["decode_tokens_per_s"],
        done.iter()
            .map(|r| (r.generated - 1) as f64 * 1e9 / ((r.end.unwrap().0 - r.first.unwrap()) * ms) as f64)
            .collect(),
    );

    // The GPU side over the marks' window: the split adds up, the cost uses the marks' tokens.
    let g = &s["gpu_time"];
    let part = |k: &str| g[k].as_u64().unwrap();
    assert_eq!(part("devices"), 1);
    assert_eq!(
        part("serving_work_ns") + part("waste_bubbles_ns") + part("headroom_idle_ns"),
        part("window_gpu_ns")
    );
    let c = &s["cost"];
    let gpu_hours = c["gpu_hours"].as_f64().unwrap();
    assert_eq!(gpu_hours, secs / 3600.0);
    assert_eq!(
        c["usd_per_m_output_tokens"].as_f64().unwrap(),
        2.5 * gpu_hours / generated as f64 * 1e6
    );

    parquet_requests_table_agrees(&traces, m);
    metrics_carry_the_marks(&traces, m);
    page_carries_the_marks(&traces, &v);

    // The text says which numbers are exact and where they come from.
    let report = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .arg("report")
        .arg(&traces)
        .output()
        .unwrap();
    let t = text(&report.stdout);
    assert!(t.contains("Serving (from gputrace.request marks, no server metrics;"), "{t}");
    assert!(
        t.contains(&format!(
            "requests (exact, gputrace.request marks over {secs:.3} s from the first mark to the last): 10 completed"
        )),
        "{t}"
    );
    assert!(t.contains("1 failed") && t.contains("1 unfinished"), "{t}");
    let ttft_line = t.lines().find(|l| l.starts_with("ttft ")).unwrap_or_else(|| panic!("{t}"));
    assert_eq!(ttft_line.split_whitespace().nth(1), Some("11"), "{ttft_line}");
}

/// The value of the one sample of family `name` whose labels include every one of `labels`.
fn sample(exposition: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<f64> = exposition
        .lines()
        .filter_map(|l| l.strip_prefix(name)?.strip_prefix('{'))
        .filter_map(|rest| {
            let (ls, v) = rest.rsplit_once("} ")?;
            labels
                .iter()
                .all(|(k, val)| ls.split(',').any(|p| p == format!("{k}=\"{val}\"")))
                .then(|| v.parse::<f64>().unwrap())
        })
        .collect();
    assert_eq!(found.len(), 1, "{name} {labels:?} in\n{exposition}");
    found[0]
}

/// `gputrace metrics`: promtool-clean, and the `gputrace_serving_marks_*` families
/// equal `report --json`'s request marks exactly.
fn metrics_carry_the_marks(traces: &std::path::Path, m: &Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .arg("metrics")
        .arg(traces)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let e = text(&out.stdout);
    common::prometheus::promtool_check(&e);
    let f = |v: &Value| v.as_f64().unwrap();
    for outcome in ["completed", "failed"] {
        assert_eq!(
            sample(&e, "gputrace_serving_marks_requests_total", &[("outcome", outcome)]),
            f(&m["requests"][outcome])
        );
    }
    assert_eq!(sample(&e, "gputrace_serving_marks_requests_unfinished", &[]), f(&m["unfinished"]));
    for kind in ["prompt", "generation"] {
        assert_eq!(
            sample(&e, "gputrace_serving_marks_tokens_total", &[("kind", kind)]),
            f(&m["tokens"][kind])
        );
    }
    assert_eq!(sample(&e, "gputrace_serving_marks_window_seconds", &[]), f(&m["window_ns"]) / 1e9);
    let qs = [("0", "min"), ("0.5", "p50"), ("0.95", "p95"), ("0.99", "p99"), ("1", "max")];
    let latencies = m["latency"].as_array().unwrap();
    assert_eq!(latencies.len(), 4, "ttft, itl, e2e, queue");
    for l in latencies {
        let name = l["name"].as_str().unwrap();
        for (q, field) in qs {
            let v = sample(&e, "gputrace_serving_marks_latency_seconds", &[("latency", name), ("q", q)]);
            assert_eq!(v, f(&l[field]), "{name} q {q}");
        }
        assert_eq!(
            sample(&e, "gputrace_serving_marks_latency_mean_seconds", &[("latency", name)]),
            f(&l["mean"])
        );
        assert_eq!(
            sample(&e, "gputrace_serving_marks_latency_requests", &[("latency", name)]),
            f(&l["count"])
        );
    }
    let d = &m["decode_tokens_per_s"];
    for (q, field) in qs {
        assert_eq!(
            sample(&e, "gputrace_serving_marks_decode_tokens_per_second", &[("q", q)]),
            f(&d[field])
        );
    }
    assert_eq!(
        sample(&e, "gputrace_serving_marks_decode_mean_tokens_per_second", &[]),
        f(&d["mean"])
    );
}

/// Attribute `name="..."` of a tag's text, unescaped (the page escapes `&<>"'/`).
fn attr(tag: &str, name: &str) -> Option<String> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let end = start + tag[start..].find('"')?;
    Some(
        tag[start..end]
            .replace("&quot;", "\"")
            .replace("&#x27;", "'")
            .replace("&#x2F;", "/")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&"),
    )
}

/// `report --html`: the serving block holds every number of the marks, each
/// element's `data-value` equal to the same path of `report --json`.
fn page_carries_the_marks(traces: &std::path::Path, report: &Value) {
    let page = traces.with_file_name("report.html");
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["report", "--gpu-hour-cost", "2.5", "--html"])
        .arg(&page)
        .arg(traces)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("source: gputrace.request marks"), "the source is named");
    let mut keys = std::collections::BTreeSet::new();
    for piece in html.split('<').skip(1) {
        let tag = &piece[..piece.find('>').unwrap_or(piece.len())];
        let Some(key) = attr(tag, "data-key").filter(|k| k.starts_with("serving.0.request_marks.")) else {
            continue;
        };
        let value: Value = serde_json::from_str(&attr(tag, "data-value").unwrap()).unwrap();
        let expected = key
            .split('.')
            .try_fold(report, |v, k| match v {
                Value::Array(a) => a.get(k.parse::<usize>().ok()?),
                Value::Object(o) => o.get(k),
                _ => None,
            })
            .unwrap_or_else(|| panic!("{key} is not in the JSON"));
        assert_eq!(expected.as_f64(), value.as_f64(), "{key}: page {value}, JSON {expected}");
        keys.insert(key);
    }
    for stat in ["latency.0", "latency.1", "latency.2", "latency.3", "decode_tokens_per_s"] {
        for field in ["count", "mean", "p50", "p95", "p99", "min", "max"] {
            let k = format!("serving.0.request_marks.{stat}.{field}");
            assert!(keys.contains(&k), "{k} not on the page: {keys:?}");
        }
    }
    for k in [
        "requests.completed",
        "requests.failed",
        "unfinished",
        "tokens.prompt",
        "tokens.generation",
        "window_ns",
    ] {
        assert!(keys.contains(&format!("serving.0.request_marks.{k}")), "{k} not on the page");
    }
}

/// The Parquet `requests` table: DuckDB's counts, tokens and nearest-rank
/// quantiles equal `report --json`'s request marks.
fn parquet_requests_table_agrees(traces: &std::path::Path, m: &Value) {
    if !common::have_python_module("duckdb") {
        return;
    }
    let pq = common::parquet_export(traces, "srv");
    let sql = r#"
import duckdb, json, sys
t = f"read_parquet('{sys.argv[1]}/requests/*/*/*.parquet', hive_partitioning=false)"
def rank(col, q):
    return duckdb.sql(f"""
      select {col} from (select {col}, row_number() over (order by {col}) as i, count(*) over () as n
                         from {t} where {col} is not null) where i = greatest(1, ceil({q} * n))""").fetchall()[0][0]
one = duckdb.sql(f"""
  select count(*) filter (where end_ns is not null and not failed), count(*) filter (where failed),
         count(*) filter (where arrive_ns is not null and end_ns is null),
         sum(prompt_tokens), sum(generation_tokens) filter (where end_ns is not null),
         max(e2e_ns), min(ttft_ns), count(itl_ns)
  from {t}""").fetchall()[0]
print(json.dumps({"one": [int(x) for x in one],
                  "ttft": [rank("ttft_ns", q) for q in (0.5, 0.95, 0.99)],
                  "e2e": [rank("e2e_ns", q) for q in (0.5, 0.95, 0.99)],
                  "queue_p50": rank("queue_ns", 0.5)}))
"#;
    let v = common::python_json(sql, &pq);
    let one: Vec<u64> = v["one"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
    assert_eq!(one[0], m["requests"]["completed"].as_u64().unwrap(), "{v}");
    assert_eq!(one[1], m["requests"]["failed"].as_u64().unwrap(), "{v}");
    assert_eq!(one[2], m["unfinished"].as_u64().unwrap(), "{v}");
    assert_eq!(one[3], m["tokens"]["prompt"].as_u64().unwrap(), "{v}");
    assert_eq!(one[4], m["tokens"]["generation"].as_u64().unwrap(), "{v}");
    let stat = |name: &str| m["latency"].as_array().unwrap().iter().find(|l| l["name"] == name).unwrap().clone();
    let secs = |x: &Value| x.as_u64().unwrap() as f64 / 1e9;
    assert_eq!(secs(&v["one"][5]), stat("e2e")["max"].as_f64().unwrap());
    assert_eq!(secs(&v["one"][6]), stat("ttft")["min"].as_f64().unwrap());
    assert_eq!(one[7], stat("itl")["count"].as_u64().unwrap());
    for (name, col) in [("ttft", "ttft"), ("e2e", "e2e")] {
        for (i, k) in ["p50", "p95", "p99"].iter().enumerate() {
            assert_eq!(secs(&v[col][i]), stat(name)[*k].as_f64().unwrap(), "{name} {k}: {v}");
        }
    }
    assert_eq!(secs(&v["queue_p50"]), stat("queue")["p50"].as_f64().unwrap());
}

/// Two processes of one job serve (each marks its own requests): `compare`
/// puts them side by side by latency and tokens/s and names the slower;
/// `diff` of the two compares their exact numbers.
#[test]
fn compare_and_diff_servers_by_their_marks() {
    let Some(py) = python3() else { return };
    let dir = tempfile::tempdir().unwrap();
    // Server `e2e_ms`: 5 requests, 10 ms apart, 20 prompt and 11 generated tokens each.
    let server = |e2e_ms: u64| {
        format!(
            "import time, gputrace\nbase = time.time_ns() // 1_000_000 * 1_000_000\n\
             for i in range(5):\n\
             \x20   a = base + i * 10_000_000\n\
             \x20   gputrace.request(i, 'arrive', tokens=20, at_ns=a)\n\
             \x20   gputrace.request(i, 'first_token', at_ns=a + 5_000_000)\n\
             \x20   gputrace.request(i, 'finish', tokens=11, at_ns=a + {e2e_ms} * 1_000_000)\n"
        )
    };
    let child = dir.path().join("slow.py");
    std::fs::write(&child, server(300)).unwrap();
    let parent = dir.path().join("fast.py");
    std::fs::write(
        &parent,
        format!(
            "{}import subprocess, sys\nsys.exit(subprocess.call([sys.executable, sys.argv[1]]))\n",
            server(100)
        ),
    )
    .unwrap();
    let traces = dir.path().join("traces");
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["run", "--no-host-samples", "--serving-metrics", "off", "-o"])
        .arg(&traces)
        .arg("--")
        .arg(py)
        .arg(&parent)
        .arg(&child)
        .env("GPUTRACE_AGENT", agent_lib())
        .env_remove("RANK")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let files = trace_files(&traces);
    assert_eq!(files.len(), 2, "{files:?}");

    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["compare", "--json"])
        .arg(&traces)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let servers = v["servers"]["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 2, "{v}");
    let mut p99: Vec<f64> = servers.iter().map(|s| s["e2e_p99_s"].as_f64().unwrap()).collect();
    p99.sort_by(f64::total_cmp);
    assert_eq!(p99, [0.1, 0.3]);
    for s in servers {
        assert_eq!(s["source"], "gputrace.request marks");
        // 5 requests over 40 ms + e2e of the last; 55 generated tokens.
        let window = 0.04 + s["e2e_p99_s"].as_f64().unwrap();
        assert!((s["generation_tokens_per_s"].as_f64().unwrap() - 55.0 / window).abs() < 1e-9, "{s}");
        assert_eq!(s["ttft_p50_s"].as_f64(), Some(0.005));
    }
    let slowest = v["servers"]["slowest"].as_u64().unwrap() as usize;
    assert_eq!(servers[slowest]["e2e_p99_s"].as_f64(), Some(0.3));
    assert!((v["servers"]["e2e_p99_spread"].as_f64().unwrap() - 3.0).abs() < 1e-12);
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .arg("compare")
        .arg(&traces)
        .output()
        .unwrap();
    let t = text(&out.stdout);
    assert!(
        t.contains("Servers (2; by latency and tokens/s, not steps)") && t.contains("slowest: #"),
        "{t}"
    );

    // diff fast slow: the exact numbers of both, judged by e2e p99 (+200%).
    let (fast, slow) = match servers[slowest]["server"].as_str().unwrap() {
        s if s.ends_with(files[0].file_name().unwrap().to_str().unwrap()) => (&files[1], &files[0]),
        _ => (&files[0], &files[1]),
    };
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["diff", "--json"])
        .arg(fast)
        .arg(slow)
        .output()
        .unwrap();
    let d: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stderr)));
    let s = &d["serving"];
    assert_eq!(s["source"], "gputrace.request marks", "{d}");
    assert!((s["slower_pct"].as_f64().unwrap() - 200.0).abs() < 1e-9, "{s}");
}

/// Marks the agent's queue has no room for are counted, exactly: without
/// CUDA the queue is drained only at exit, so a 16-record queue keeps the
/// first 16 marks and the trace's loss record counts every other one (as
/// many as `gputrace.request` said False to).
#[test]
fn request_marks_lost_to_a_full_queue_are_counted() {
    let Some(py) = python3() else { return };
    let dir = tempfile::tempdir().unwrap();
    let script = "import sys, gputrace\n\
                  ok = [gputrace.request(i, 'arrive', tokens=3) for i in range(1000)]\n\
                  sys.stdout.write('%d\\n' % ok.count(False))\n";
    let traces = dir.path().join("traces");
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["run", "--no-host-samples", "--serving-metrics", "off", "-o"])
        .arg(&traces)
        .args(["--", py, "-c", script])
        .env("GPUTRACE_AGENT", agent_lib())
        .env("GPUTRACE_NVTX_RECORDS", "16")
        .env_remove("RANK")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let refused: u64 = text(&out.stdout).trim().parse().unwrap();
    assert_eq!(refused, 1000 - 16);
    let files = trace_files(&traces);
    assert_eq!(files.len(), 1);
    let t = TraceFile::open(&files[0]).unwrap();
    let mut kept = 0;
    let mut lost = 0;
    for e in t.events_of(&[EventKind::Request, EventKind::Loss]) {
        match e.unwrap() {
            Event::Request(_) => kept += 1,
            Event::Loss(l)
                if t.string(l.detail)
                    .unwrap_or("")
                    .starts_with("request marks (gputrace.request) not recorded") =>
            {
                lost += l.count
            }
            _ => {}
        }
    }
    assert_eq!((kept, lost), (16, refused));
}
