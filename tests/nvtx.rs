//! NVTX through the agent in real child processes: `tests/doubles/nvtxprog`
//! (built against the vendored NVTX v3 headers) under `gputrace run`, with
//! the CUDA/CUPTI doubles and without CUDA at all.

use gputrace_format::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{agent_lib, doubles, text};

struct Run {
    code: Option<i32>,
    stderr: String,
    trace: TraceFile,
    markers: Vec<(Marker, String, String)>,
    events: Vec<Event>,
}

/// `gputrace run -- nvtxprog ARGS` under a time limit.
fn run(args: &[&str], env: &[(&str, &str)], cupti: bool) -> Run {
    let dbl = doubles();
    let dir = tempfile::tempdir().unwrap();
    let scen = dir.path().join("scenario");
    std::fs::write(&scen, "version 13.5\ndevice\napi 20\nkernels 20 10000 1000\n").unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_gputrace"));
    c.args(["run", "-o"])
        .arg(dir.path().join("traces"))
        .arg("--")
        .arg(dbl.join("nvtxprog"))
        .args(args);
    c.env("GPUTRACE_AGENT", agent_lib())
        .env("FAKE_CUPTI_SCENARIO", &scen)
        .env("FAKE_CUPTI_REPORT", dir.path().join("report"))
        .env_remove("NVTX_INJECTION64_PATH")
        .env_remove("RANK")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if cupti {
        c.env("GPUTRACE_CUPTI", dbl.join("cupti13/libcupti.so.13"))
            .env("LD_LIBRARY_PATH", dbl);
    } else {
        c.env("GPUTRACE_CUPTI", dir.path().join("none")).env_remove("LD_LIBRARY_PATH");
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("gputrace run hung");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let files = common::trace_files(&dir.path().join("traces"));
    assert_eq!(files.len(), 1, "one trace: {}", text(&out.stderr));
    let trace = TraceFile::open(&files[0]).unwrap();
    let events: Vec<Event> = trace.events().collect::<Result<_, _>>().unwrap();
    let markers = events
        .iter()
        .filter_map(|e| match e {
            Event::Marker(m) => Some((
                *m,
                trace.string(m.name).unwrap().to_string(),
                trace.string(m.domain).unwrap().to_string(),
            )),
            _ => None,
        })
        .collect();
    Run {
        code: out.status.code(),
        stderr: text(&out.stderr),
        trace,
        markers,
        events,
    }
}

/// Markers of the main thread, ordered by start: (name, domain, kind, color).
fn main_thread(r: &Run) -> Vec<(String, String, &'static str, u32)> {
    let pid = r.trace.header().pid;
    let mut v: Vec<&(Marker, String, String)> = r.markers.iter().filter(|m| m.0.thread.0 == pid).collect();
    v.sort_by_key(|m| (m.0.start, std::cmp::Reverse(m.0.end)));
    v.iter().map(|(m, n, d)| (n.clone(), d.clone(), m.kind.name(), m.color)).collect()
}

fn expected(cuda: bool) -> Vec<(String, String, &'static str, u32)> {
    let mut v = vec![
        ("start", "", "instant", 0),
        ("outer", "", "range", 0),
        ("inner", "", "range", 0),
        ("wide ü", "", "instant", 0),
        ("registered-read [payload=42]", "io/disk", "range", 0xff00ff00),
        ("net-wide [payload=2.5]", "net", "instant", 0),
        ("cat-mark [payload=-5]", "/default-cat", "instant", 0),
        ("cross-thread", "", "range", 0),
    ];
    let long = "x".repeat(128);
    let mut v: Vec<(String, String, &'static str, u32)> = v.drain(..).map(|(a, b, c, d)| (a.to_string(), b.to_string(), c, d)).collect();
    v.push((long, String::new(), "instant", 0));
    v.push(("step tokens=4096 samples=8".into(), "gputrace".into(), "instant", 0));
    v.push(("plain".into(), String::new(), "instant", 0));
    if cuda {
        v.push(("cuda-work".into(), String::new(), "range", 0));
    }
    v.push(("never-popped".into(), String::new(), "range", 0));
    v
}

fn check_common(r: &Run, cuda: bool) {
    assert_eq!(r.code, Some(5), "the job's exit code: {}", r.stderr);
    assert_eq!(main_thread(r), expected(cuda));
    // Nesting: inner lies inside outer.
    let find = |n: &str| r.markers.iter().find(|m| m.1 == n).unwrap().0;
    let (outer, inner) = (find("outer"), find("inner"));
    assert!(outer.start <= inner.start && inner.end <= outer.end && inner.start < inner.end);
    // 8 worker threads × 100 ranges, each on its own (non-main) thread.
    let pid = r.trace.header().pid;
    let mut per: std::collections::BTreeMap<u32, usize> = Default::default();
    for (m, n, _) in &r.markers {
        if n == "t-work" {
            assert_ne!(m.thread.0, pid);
            *per.entry(m.thread.0).or_default() += 1;
        }
    }
    assert_eq!(per.len(), 8, "{per:?}");
    assert!(per.values().all(|&n| n == 100), "{per:?}");
    let tr = r.trace.trailer().expect("finished");
    for (k, v) in [
        ("nvtx.ranges_open_at_exit", "1"),
        ("nvtx.unmatched_pops", "1"),
        ("nvtx.unmatched_ends", "0"),
        ("nvtx.truncated_messages", "1"),
    ] {
        assert_eq!(tr.extra.get(k).map(String::as_str), Some(v), "{k}");
    }
    let named = tr
        .extra
        .iter()
        .filter(|(k, v)| k.starts_with("nvtx.thread.") && v.starts_with("worker-"))
        .count();
    assert_eq!(named, 8);
    let h = &r.trace.header().extra;
    assert_eq!(h.get("gputrace.tokens_per_step").map(String::as_str), Some("4096"));
    assert_eq!(h.get("gputrace.samples_per_step"), None, "not a positive integer: ignored");
    assert!(r.stderr.contains("gputrace: ignoring GPUTRACE_SAMPLES_PER_STEP=0"), "{}", r.stderr);
}

#[test]
fn nvtx_with_cuda_lines_up_with_cupti_api_calls() {
    let env = [("GPUTRACE_TOKENS_PER_STEP", "4096"), ("GPUTRACE_SAMPLES_PER_STEP", "0")];
    let r = run(&["--cuda", "3000", "5"], &env, true);
    check_common(&r, true);
    let range = r.markers.iter().find(|m| m.1 == "cuda-work").unwrap().0;
    let apis: Vec<&ApiCall> = r
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Api(a) => Some(a),
            _ => None,
        })
        .collect();
    assert_eq!(apis.len(), 20, "{}", r.stderr);
    for a in apis {
        assert!(range.start <= a.start && a.end <= range.end, "{a:?} outside {range:?}");
    }
}

#[test]
fn nvtx_without_cuda_writes_a_markers_only_trace() {
    let env = [("GPUTRACE_TOKENS_PER_STEP", "4096"), ("GPUTRACE_SAMPLES_PER_STEP", "0")];
    let r = run(&["5"], &env, false);
    check_common(&r, false);
    assert!(r.trace.header().extra["agent.mode"].starts_with("markers-only"));
    assert!(r.stderr.contains("812 markers"), "{}", r.stderr);
}

#[test]
fn a_full_queue_is_counted_exactly() {
    // Without CUDA the queue is drained only at exit: a 16-record queue keeps
    // the first 16 records and counts every other one.
    let r = run(&["--flood", "200000", "0"], &[("GPUTRACE_NVTX_RECORDS", "16")], false);
    assert_eq!(r.code, Some(0));
    let lost: u64 = r
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Loss(l) if r.trace.string(l.detail).unwrap_or("").starts_with("NVTX records not recorded") => Some(l.count),
            _ => None,
        })
        .sum();
    // Records the program makes: 7 marks, 3 push/pop pairs, 1 stray pop, one
    // start/end, 800 worker pairs, the last push, and the floods.
    let records = 7 + 6 + 1 + 2 + 1600 + 1 + 200_000;
    assert_eq!(lost, records - 16);
    let names: Vec<&str> = r.markers.iter().map(|m| m.1.as_str()).collect();
    assert!(names.contains(&"start") && names.contains(&"outer"), "{names:?}");
    assert_eq!(r.trace.trailer().unwrap().losses.get("queue-overflow"), Some(&lost));
}

#[test]
fn marking_from_many_threads_at_exit_does_not_crash() {
    for _ in 0..3 {
        let r = run(&["--storm", "3"], &[], false);
        assert_eq!(r.code, Some(3), "{}", r.stderr);
        assert!(r.trace.trailer().is_some());
    }
}

#[test]
fn no_nvtx_leaves_nvtx_a_no_op_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["run", "--no-nvtx", "-o"])
        .arg(dir.path().join("traces"))
        .arg("--")
        .arg(doubles().join("nvtxprog"))
        .arg("5")
        .env("GPUTRACE_AGENT", agent_lib())
        .env_remove("NVTX_INJECTION64_PATH")
        .output()
        .unwrap();
    // NVTX without a tool: nvtxRangePushA returns a negative depth, which
    // nvtxprog reports as exit 90; the agent never saw the calls.
    assert_eq!(out.status.code(), Some(90), "{}", text(&out.stderr));
    assert!(common::trace_files(&dir.path().join("traces")).is_empty());
}
