//! Kineto traces recorded with `with_stack=True` (#40): their
//! `python_function` events become host stacks, and the stacks named for
//! the longest idle gaps must be stacks the main thread was in during that
//! gap. Checked against the raw JSON, read here with serde_json (not
//! through the importer): at one moment inside the gap, every frame of the
//! gap's heaviest stack has a `python_function` event of the main thread
//! open, and the innermost frame's events cover the stack's weight.

mod common;

use gputrace_analysis::{analyze, Options};
use std::io::Read;
use std::path::{Path, PathBuf};

const TRACES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/traces");

/// One `python_function` event of the raw JSON.
struct Call {
    pid: u64,
    tid: u64,
    start: i128,
    end: i128,
    /// As the report names a frame: `function (file's base name:line)`,
    /// a builtin by its name without the object's address.
    frame: String,
}

fn frame_of(name: &str) -> String {
    // `file(line): function`
    if let Some((head, function)) = name.split_once("): ") {
        if let Some((file, line)) = head.rsplit_once('(') {
            if line.chars().all(|c| c.is_ascii_digit()) && !line.is_empty() {
                let base = file.rsplit('/').next().unwrap_or(file);
                return format!("{function} ({base}:{line})");
            }
        }
    }
    match name.find(" at 0x") {
        Some(i) if name.starts_with('<') => format!("{}>", &name[..i]),
        _ => name.to_string(),
    }
}

/// The trace's `python_function` events, in absolute ns, and their number.
fn calls(path: &Path) -> Vec<Call> {
    let mut raw = Vec::new();
    flate2::read::MultiGzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_end(&mut raw)
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    let base = doc["baseTimeNanoseconds"].as_u64().unwrap_or(0) as i128;
    let ns = |v: &serde_json::Value| (v.as_f64().unwrap() * 1000.0).round() as i128;
    doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["cat"] == "python_function" && e["ph"] == "X")
        .map(|e| Call {
            pid: e["pid"].as_u64().unwrap_or(0),
            tid: e["tid"].as_u64().unwrap_or(0),
            start: base + ns(&e["ts"]),
            end: base + ns(&e["ts"]) + ns(&e["dur"]),
            frame: frame_of(e["name"].as_str().unwrap()),
        })
        .collect()
}

fn traces_with_python() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.to_string_lossy().ends_with(".json.gz") {
                out.push(p);
            }
        }
    }
    let mut all = Vec::new();
    walk(Path::new(TRACES), &mut all);
    all.sort();
    all.into_iter()
        .filter(|p| {
            let mut text = String::new();
            flate2::read::MultiGzDecoder::new(std::fs::File::open(p).unwrap())
                .read_to_string(&mut text)
                .is_ok()
                && text.contains("\"python_function\"")
        })
        .collect()
}

#[test]
fn frames_named_for_the_longest_idle_gaps_were_active_in_them() {
    if !Path::new(TRACES).is_dir() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true but {TRACES} is absent");
        common::skip(&format!("{TRACES} is absent (real Kineto traces are not available here)"));
        return;
    }
    let paths = traces_with_python();
    assert!(!paths.is_empty(), "no shared trace carries python_function events");
    let mut gaps_checked = 0;
    for path in &paths {
        let trace = gputrace_kineto::to_trace(path).unwrap();
        let samples = trace.host_samples().unwrap().expect("python_function events become host stacks");
        assert_eq!(samples.hz, 0, "traced, not sampled");
        let report = analyze(&[trace], &Options::default()).unwrap();
        let rank = &report.ranks[0];
        let calls = calls(path);
        let main: Vec<&Call> = calls.iter().filter(|c| c.pid == u64::from(rank.pid) && c.tid == c.pid).collect();
        for dev in &rank.devices {
            let mut gaps: Vec<_> = dev.longest_gaps.iter().collect();
            gaps.sort_by_key(|g| std::cmp::Reverse(g.duration_ns));
            for g in gaps.iter().take(5) {
                let view = g.host.as_ref().expect("every longest gap gets a host view");
                let (a, b) = (g.start_ns as i128, g.end_ns as i128);
                assert!(view.sampled_ns <= view.window_ns);
                let Some(top) = view.stacks.first() else { continue };
                if top.frames.is_empty() {
                    continue;
                }
                let inner = top.frames.last().unwrap();
                let ctx = format!("{}: gap {a}..{b}, stack {:?}", path.display(), top.frames);
                // The innermost frame's calls inside the gap cover the stack's weight
                // (1 µs per call of rounding slack).
                let inner_calls: Vec<&&Call> = main.iter().filter(|c| &c.frame == inner && c.start < b && c.end > a).collect();
                let covered: i128 = inner_calls.iter().map(|c| c.end.min(b) - c.start.max(a)).sum();
                assert!(
                    covered + 1000 * inner_calls.len() as i128 >= top.idle_ns as i128,
                    "{ctx}: innermost frame open {covered} ns in the gap, named for {} ns",
                    top.idle_ns
                );
                // At the middle of one of them (inside the gap), every frame of the stack is open.
                let all_open = inner_calls.iter().any(|c| {
                    let t = (c.start.max(a) + c.end.min(b)) / 2;
                    top.frames
                        .iter()
                        .all(|f| main.iter().any(|o| &o.frame == f && o.start <= t && o.end >= t))
                });
                assert!(all_open, "{ctx}: no moment in the gap where the whole stack was open");
                gaps_checked += 1;
            }
        }
    }
    assert!(gaps_checked >= 10, "only {gaps_checked} gaps had a stack to check");
    println!("{} traces, {gaps_checked} gaps checked", paths.len());
}

/// The Chrome and Perfetto exports of such a trace carry its host stacks:
/// a track per sampled thread, a leaf slice per run (its state and
/// arguments) under slices of its frames, nesting; the Perfetto file
/// decodes with the official schema where the PyPI `perfetto` package is.
#[test]
fn exports_carry_the_host_stacks_on_thread_tracks() {
    use gputrace_viewer::{ChromeJson, Exporter, Filter, Job, Perfetto, HOST_SAMPLES_TID_BASE};
    let path = Path::new(TRACES).join("AMD-AGI_TraceLens@171dd74/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz");
    if !path.is_file() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but {} is absent",
            path.display()
        );
        common::skip(&format!("{} is absent", path.display()));
        return;
    }
    let trace = gputrace_kineto::to_trace(&path).unwrap();
    let samples = trace.host_samples().unwrap().unwrap();
    let mut json = Vec::new();
    ChromeJson.export(&Job::new([&trace]), &Filter::default(), &mut json).unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let events = doc["traceEvents"].as_array().unwrap();
    let host: Vec<&serde_json::Value> = events.iter().filter(|e| e["cat"] == "host_sample").collect();
    let leaves: Vec<&&serde_json::Value> = host.iter().filter(|e| e["args"]["state"].is_string()).collect();
    // The export's window is the trace's span; runs outside it are left out.
    let (lo, hi) = trace.time_span().unwrap();
    let inside = samples.runs.iter().filter(|r| r.end.0 > lo.0 && r.start.0 < hi.0).count();
    assert!(inside > 1000);
    assert_eq!(leaves.len(), inside, "a leaf slice per run in the window");
    assert!(leaves.iter().all(|e| e["args"]["state"] == "traced"));
    assert!(host.iter().all(|e| e["tid"].as_u64().unwrap() >= HOST_SAMPLES_TID_BASE));
    // Per track, slices nest: each starts inside the one open around it or after it ends.
    let us = |v: &serde_json::Value| (v.as_f64().unwrap() * 1000.0).round() as i64;
    let mut by_tid: std::collections::BTreeMap<u64, Vec<(i64, i64)>> = Default::default();
    for e in &host {
        by_tid
            .entry(e["tid"].as_u64().unwrap())
            .or_default()
            .push((us(&e["ts"]), us(&e["ts"]) + us(&e["dur"])));
    }
    for spans in by_tid.values_mut() {
        spans.sort_by_key(|&(s, e)| (s, std::cmp::Reverse(e)));
        let mut open: Vec<i64> = Vec::new();
        for &(s, e) in spans.iter() {
            while open.last().is_some_and(|&end| end <= s) {
                open.pop();
            }
            if let Some(&end) = open.last() {
                assert!(e <= end + 1, "a slice {s}..{e} crosses the end of its parent at {end}");
            }
            open.push(e);
        }
    }
    assert!(
        host.iter().any(|e| e["name"] == "forward (modeling_bert.py:1306)"),
        "frames are named as the report names them"
    );

    let mut pf = Vec::new();
    Perfetto::default()
        .export(&Job::new([&trace]), &Filter::default(), &mut pf)
        .unwrap();
    let probe = std::process::Command::new("python3")
        .args(["-c", "import perfetto.protos.perfetto.trace.perfetto_trace_pb2"])
        .output();
    if !matches!(&probe, Ok(o) if o.status.success()) {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but python3 with `perfetto` is missing"
        );
        common::skip("python3 with the PyPI `perfetto` package not found");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bert.pftrace");
    std::fs::write(&file, &pf).unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/viewer-export/tests/check_perfetto.py");
    let out = std::process::Command::new("python3").arg(script).arg(&file).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(
        pf.windows(b"host samples".len()).any(|w| w == b"host samples"),
        "the host samples tracks are described"
    );
}
