//! The capture levers of issue #45 (`docs/agent.md`, "Cheaper capture")
//! end to end: the real launcher, agent and child process against the CUPTI
//! and libcuda doubles, checked against what the fake CUPTI says it was
//! asked and delivered. Build the workspace first, as for tests/agent.rs.

use gputrace_format::{Event, GraphLaunch, TraceFile};
use std::collections::BTreeMap;

mod common;
use common::{gputrace_lines, text, DoublesRun};

fn only_trace(run: &DoublesRun) -> TraceFile {
    let files = common::trace_files(&run.dir.path().join("traces"));
    assert_eq!(files.len(), 1, "one trace: {files:?}; stderr: {}", text(&run.out.stderr));
    TraceFile::open(&files[0]).unwrap()
}

fn run(major: u32, scenario: &str, flags: &[&str]) -> DoublesRun {
    let mut all = vec!["--gpu-sample-hz", "0"];
    all.extend_from_slice(flags);
    let r = common::run_testprog(major, scenario, &all, &["--ms", "20000", "exit", "0"], &[], &[]);
    assert_eq!(r.out.status.code(), Some(0), "stderr: {}", text(&r.out.stderr));
    r
}

fn header<'a>(t: &'a TraceFile, key: &str) -> &'a str {
    t.header().extra.get(key).map_or("", |s| s.as_str())
}

fn graph_launches(t: &TraceFile) -> Vec<GraphLaunch> {
    t.events()
        .filter_map(|e| match e.unwrap() {
            Event::GraphLaunch(g) => Some(g),
            _ => None,
        })
        .collect()
}

/// (graph id, correlation) of the kernels recorded node by node inside graphs.
fn graph_kernels(t: &TraceFile) -> Vec<(u32, u32)> {
    t.events()
        .filter_map(|e| match e.unwrap() {
            Event::Kernel(k) if k.graph_id != 0 => Some((k.graph_id, k.correlation.0)),
            _ => None,
        })
        .collect()
}

/// Correlation ids of the recorded `cudaGraphLaunch` calls.
fn graph_launch_calls(t: &TraceFile) -> Vec<u32> {
    t.events()
        .filter_map(|e| match e.unwrap() {
            Event::Api(a) if a.cbid == 311 => Some(a.correlation.0),
            _ => None,
        })
        .collect()
}

#[test]
fn graphs_at_graph_level_are_one_interval_per_launch_linked_to_its_call_and_the_report_says_what_is_gone() {
    for major in [12, 13] {
        let version = if major == 12 { "12.9" } else { "13.5" };
        let scenario = format!("version {version}\ndevice\ngraph_launches 5 4 9\nkernels 3 10000 1000\napi 3\n");
        let r = run(major, &scenario, &["--graphs", "graph"]);
        let t = only_trace(&r);
        let g = graph_launches(&t);
        assert_eq!(g.len(), 5, "major {major}: {g:?}");
        assert!(g
            .iter()
            .all(|g| g.graph_id == 9 && g.end.0 - g.start.0 == 40_000 && g.stream.0 == 7));
        let mut calls = graph_launch_calls(&t);
        let mut launched: Vec<u32> = g.iter().map(|g| g.correlation.0).collect();
        calls.sort();
        launched.sort();
        assert_eq!(calls, launched, "each graph interval links to its cudaGraphLaunch");
        assert!(graph_kernels(&t).is_empty(), "no node is recorded at graph level");
        assert_eq!(r.report.get("graph_level").map(String::as_str), Some("1"));
        assert_eq!(header(&t, "capture.graphs"), "graph");
        assert_eq!(common::extra(&t, "capture.graph_level"), "from the start");
        // The report: five 40 µs intervals of compute, and the sentence saying what is gone.
        let path = common::trace_files(&r.dir.path().join("traces"))[0].clone();
        let out = common::gputrace(&["report", "--json", path.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let rank = &json["ranks"][0];
        assert_eq!(rank["capture_levers"]["graph_launches"], 5);
        assert!(rank["devices"][0]["compute_ns"].as_u64().unwrap() >= 5 * 40_000 + 3 * 10_000);
        let out = common::gputrace(&["report", path.to_str().unwrap()]);
        let report = text(&out.stdout);
        assert!(report.contains("Recorded at graph level"), "{report}");
        assert!(report.contains("5 CUDA graph launches were recorded at graph level"), "{report}");
    }
}

#[test]
fn graphs_auto_switches_to_graph_level_after_n_launches_of_one_graph() {
    // Three launches at node level, delivered by a flush; the writer switches;
    // the next seven are graph intervals.
    let scenario = "version 13.5\ngraph_launches 3 4 9\nwait_flush\nsleep_ms 400\ngraph_launches 7 4 9\n";
    let r = run(13, scenario, &["--graphs", "auto", "--graphs-after", "3", "--flush-ms", "50"]);
    let t = only_trace(&r);
    let nodes = graph_kernels(&t);
    assert_eq!(nodes.len(), 12, "3 launches x 4 nodes at node level: {nodes:?}");
    let launches: std::collections::BTreeSet<u32> = nodes.iter().map(|n| n.1).collect();
    assert_eq!(launches.len(), 3);
    assert_eq!(graph_launches(&t).len(), 7);
    assert!(
        common::extra(&t, "capture.graph_level").contains("launched 3 times"),
        "{:?}",
        t.trailer()
    );
    assert!(header(&t, "capture.graphs").starts_with("auto"));
    // Node level throughout when no graph reaches the count.
    let r = run(
        13,
        "version 13.5\ngraph_launches 2 4 9\n",
        &["--graphs", "auto", "--graphs-after", "3"],
    );
    let t = only_trace(&r);
    assert_eq!((graph_kernels(&t).len(), graph_launches(&t).len()), (8, 0));
    assert!(common::extra(&t, "capture.graph_level").starts_with("never"));
    assert_eq!(r.report.get("graph_level").map(String::as_str), Some("0"));
}

#[test]
fn hardware_tracing_is_used_where_cupti_accepts_it_and_refused_in_one_line_otherwise() {
    // A Blackwell that accepts it (13.5: through the ENABLE_HES attribute).
    let r = run(13, "version 13.5\nhw_trace ok\nkernels 3\n", &[]);
    let t = only_trace(&r);
    assert!(
        header(&t, "cupti.kernel_timestamps").starts_with("hardware event system"),
        "{:?}",
        t.header().extra
    );
    assert_eq!(r.report.get("hw_trace").map(String::as_str), Some("1"));
    assert!(gputrace_lines(&r.out.stderr).iter().all(|l| !l.contains("hardware")));
    // The fake GPU (a Hopper) refuses: `auto` says nothing, the header says why.
    let r = run(13, "version 13.5\nkernels 3\n", &[]);
    let t = only_trace(&r);
    assert!(header(&t, "cupti.kernel_timestamps").contains("Blackwell"));
    assert!(gputrace_lines(&r.out.stderr).iter().all(|l| !l.contains("hardware")));
    // Under MPS: one line even in `auto`.
    let r = run(13, "version 13.5\nhw_trace mps\nkernels 3\n", &[]);
    let lines: Vec<String> = gputrace_lines(&r.out.stderr)
        .into_iter()
        .filter(|l| l.contains("hardware"))
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("HES_TRACE_NOT_SUPPORTED_ON_MPS"), "{lines:?}");
    assert!(header(&only_trace(&r), "cupti.kernel_timestamps").contains("MPS"));
    // An older CUPTI with --hw-trace on: one line, never the call; 12.9 in `auto`: not tried.
    let r = run(12, "version 12.6\nkernels 3\n", &["--hw-trace", "on"]);
    let lines: Vec<String> = gputrace_lines(&r.out.stderr)
        .into_iter()
        .filter(|l| l.contains("hardware"))
        .collect();
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("older than 12.8"), "{lines:?}");
    assert_eq!(r.report.get("calls.cuptiActivityEnableHWTrace"), None);
    let r = run(12, "version 12.9\nhw_trace ok\nkernels 3\n", &[]);
    assert_eq!(
        r.report.get("calls.cuptiActivityEnableHWTrace"),
        None,
        "12.9 is older than 13.4 Update 1"
    );
    assert!(header(&only_trace(&r), "cupti.kernel_timestamps").contains("13.4 Update 1"));
    let r = run(12, "version 12.9\nhw_trace ok\nkernels 3\n", &["--hw-trace", "off"]);
    assert_eq!(r.report.get("calls.cuptiActivityEnableHWTrace"), None);
}

#[test]
fn per_thread_buffers_are_set_before_any_kind_is_enabled() {
    // The fake aborts if the attribute comes after the callbacks or a kind.
    for (major, version) in [(12, "12.9"), (13, "13.5")] {
        for (flag, want) in [("on", "1"), ("off", "0")] {
            let r = run(major, &format!("version {version}\nkernels 3\n"), &["--per-thread-buffers", flag]);
            assert_eq!(r.report.get("attr.9").map(String::as_str), Some(want), "{major} {flag}");
            assert_eq!(header(&only_trace(&r), "cupti.per_thread_buffers"), flag);
        }
    }
    let r = run(13, "version 13.5\nkernels 3\n", &[]);
    assert_eq!(r.report.get("attr.9"), None, "CUPTI's default unless asked");
    assert!(header(&only_trace(&r), "cupti.per_thread_buffers").starts_with("CUPTI's default"));
}

#[test]
fn the_subscriber_scoped_api_takes_the_allow_list_at_enable_from_13_4() {
    // 500 cudaGetDevice (cbid 17) calls and 3 launches: on 13.5 CUPTI never writes the queries.
    let scenario = |v: &str| format!("version {v}\nkernels 3 10000 1000\napi 3\napi_call 500 17\n");
    let r = run(13, &scenario("13.5"), &[]);
    let t = only_trace(&r);
    assert_eq!(
        t.header().extra.get("cupti.subscriber").map(String::as_str),
        Some("multi (cuptiSubscribe_v2)")
    );
    assert!(
        header(&t, "agent.api_filter").starts_with("in CUPTI (allow-list"),
        "{:?}",
        t.header().extra
    );
    assert_eq!(r.report.get("skipped_cbid.runtime").map(String::as_str), Some("500"));
    assert_eq!(common::extra(&t, "agent.api_calls_filtered"), "0");
    let api = t.events().filter(|e| matches!(e.as_ref().unwrap(), Event::Api(_))).count();
    assert_eq!(api, 3);
    // 13.3 is subscriber-scoped without the list: CUPTI records them, the writer drops them.
    let r = run(13, &scenario("13.3"), &[]);
    let t = only_trace(&r);
    assert!(
        header(&t, "agent.api_filter").starts_with("after capture"),
        "{:?}",
        t.header().extra
    );
    assert_eq!(r.report.get("skipped_cbid.runtime"), None);
    assert_eq!(common::extra(&t, "agent.api_calls_filtered"), "500");
}

/// `t=NS enabled=K,K` lines of the fake CUPTI's log of enabled kinds.
fn kinds_log(run: &DoublesRun) -> Vec<(u64, String)> {
    std::fs::read_to_string(run.dir.path().join("report.kinds"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let kv: BTreeMap<&str, &str> = l.split(' ').filter_map(|t| t.split_once('=')).collect();
            Some((kv.get("t")?.parse().ok()?, kv.get("enabled")?.to_string()))
        })
        .collect()
}

#[test]
fn in_a_duty_cycles_off_phase_no_activity_kind_stays_enabled() {
    // Launches every 10 ms for about 1.5 s; windows of 100 ms every 400 ms;
    // graphs at graph level and NCCL's external ids off, so every kind the
    // agent turns on is in play.
    let body = "kernels 1 20000 0 duty_kernel\napi 1\nmemcpy 1 4096 1\ngraph_launches 1 2 5\nsleep_ms 10\n".repeat(150);
    let r = run(
        13,
        &format!("version 13.5\n{body}"),
        &["--duty", "100ms/400ms", "--graphs", "graph"],
    );
    let t = only_trace(&r);
    let windows = t.capture_windows();
    assert!(windows.len() >= 3, "{windows:?}");
    let log = kinds_log(&r);
    assert!(!log.is_empty(), "the fake logged no kind changes");
    let state_at = |ns: u64| log.iter().rev().find(|(t, _)| *t <= ns).map(|(_, k)| k.as_str()).unwrap_or("");
    for pair in windows.windows(2) {
        let (off, on) = (pair[0].end.0, pair[1].start.0);
        assert!(on > off);
        // Middle of the off phase, and just inside each end of it.
        for at in [off + (on - off) / 2, off + (on - off) / 10, on - (on - off) / 10] {
            assert_eq!(state_at(at), "", "kinds enabled at {at} in the off phase {off}..{on}: {log:?}");
        }
    }
    // Inside each window the kernel, API, copy and graph kinds were on.
    for w in windows.iter().filter(|w| w.end.0 > w.start.0) {
        let on = state_at(w.start.0 + (w.end.0 - w.start.0) / 2);
        for k in ["10", "5", "1", "51"] {
            assert!(on.split(',').any(|x| x == k), "kind {k} off inside a window: {on}");
        }
    }
    assert!(graph_launches(&t).len() > 10);
}

#[test]
fn the_report_says_what_the_profiler_cost_on_the_cpu_and_the_gpu() {
    // Four 3 µs buffer flushes on the launching thread, two 3 µs
    // instrumentation records on device 0.
    let r = run(13, "version 13.5\nkernels 3\noverhead 4\noverhead 2 gpu\n", &[]);
    let t = only_trace(&r);
    assert_eq!(common::extra(&t, "cupti.overhead_cpu_ns"), "12000");
    assert_eq!(common::extra(&t, "cupti.overhead_gpu_ns"), "6000");
    let writer: u64 = common::extra(&t, "agent.writer_cpu_ns").parse().unwrap();
    assert!(writer > 0);
    let path = t.path().to_str().unwrap().to_string();
    let out = common::gputrace(&["report", "--json", &path]);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cost = &json["ranks"][0]["capture_levers"]["profiler_cost"];
    assert_eq!(
        (cost["cupti_cpu_ns"].as_u64(), cost["cupti_gpu_ns"].as_u64()),
        (Some(12_000), Some(6_000))
    );
    assert_eq!(cost["writer_cpu_ns"].as_u64(), Some(writer));
    let human = text(&common::gputrace(&["report", &path]).stdout);
    assert!(
        human.contains("the profiler cost 12.000 µs of CPU and 6.000 µs of GPU time"),
        "{human}"
    );
}
