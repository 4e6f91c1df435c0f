//! Damage reaches every command (issue #43 item 5): a trace cut off mid-write
//! (gputrace or Kineto) is said to be lossy where each command's output is
//! read: `diff` and `compare` (text and JSON), `metrics` (the exposition),
//! `report` (text, JSON, HTML), `export` (its messages), and on stderr.

use std::path::{Path, PathBuf};

mod common;
use common::{gputrace as run, text};

/// A 2-rank demo job, and a copy whose rank files are cut at 60%.
fn whole_and_cut(dir: &Path) -> (PathBuf, PathBuf) {
    let whole = dir.join("whole");
    common::demo(&whole, 2, 12, 8);
    let cut = dir.join("cut");
    std::fs::create_dir(&cut).unwrap();
    for e in std::fs::read_dir(&whole).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "gtrace") {
            let bytes = std::fs::read(&p).unwrap();
            std::fs::write(cut.join(p.file_name().unwrap()), &bytes[..bytes.len() * 6 / 10]).unwrap();
        }
    }
    (whole, cut)
}

fn ok(args: &[&str]) -> (String, String) {
    let out = run(args);
    assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
    (text(&out.stdout), text(&out.stderr))
}

#[test]
fn diff_says_which_run_lost_data() {
    let dir = tempfile::tempdir().unwrap();
    let (whole, cut) = whole_and_cut(dir.path());
    let (w, c) = (whole.to_str().unwrap(), cut.to_str().unwrap());
    let (stdout, stderr) = ok(&["diff", w, c]);
    assert!(
        stdout.starts_with("WARNING: B's traces lost data"),
        "the warning comes before the verdict:\n{stdout}"
    );
    assert!(stdout.contains("B rank 0: damaged at byte"), "{stdout}");
    assert!(!stdout.contains("A's traces lost data"), "{stdout}");
    assert!(stderr.contains("warning:") && stderr.contains("damaged at byte"), "{stderr}");
    let (json, _) = ok(&["diff", "--json", w, c]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["lossy"]["a"].as_array().unwrap().len(), 0);
    assert_eq!(v["lossy"]["b"].as_array().unwrap().len(), 2, "{}", v["lossy"]);
    // Whole against whole: nothing said.
    let (stdout, stderr) = ok(&["diff", w, w]);
    assert!(!stdout.contains("WARNING") && !stderr.contains("warning"), "{stdout}{stderr}");
}

#[test]
fn compare_metrics_report_and_export_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let (whole, cut) = whole_and_cut(dir.path());
    let c = cut.to_str().unwrap();

    let (stdout, _) = ok(&["compare", c]);
    assert!(stdout.contains("warning: rank 0 (") && stdout.contains("lost data"), "{stdout}");
    let (json, _) = ok(&["compare", "--json", c]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let warnings: Vec<&str> = v["warnings"].as_array().unwrap().iter().filter_map(|w| w.as_str()).collect();
    assert_eq!(warnings.iter().filter(|w| w.contains("lost data")).count(), 2, "{warnings:?}");

    let (exposition, stderr) = ok(&["metrics", c]);
    let lossy: Vec<&str> = exposition.lines().filter(|l| l.starts_with("gputrace_trace_lossy{")).collect();
    assert_eq!(lossy.len(), 2, "{exposition}");
    assert!(lossy.iter().all(|l| l.ends_with(" 1")), "{lossy:?}");
    let damaged: Vec<&str> = exposition
        .lines()
        .filter(|l| l.starts_with("gputrace_trace_damaged_bytes{"))
        .collect();
    assert!(damaged.iter().all(|l| !l.ends_with(" 0")), "{damaged:?}");
    assert!(stderr.contains("lost data"), "{stderr}");
    let (exposition, stderr) = ok(&["metrics", whole.to_str().unwrap()]);
    assert!(exposition
        .lines()
        .filter(|l| l.starts_with("gputrace_trace_lossy{"))
        .all(|l| l.ends_with(" 0")));
    assert!(stderr.is_empty(), "{stderr}");

    let (json, _) = ok(&["report", "--json", c]);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["lossy"], true);
    let html = dir.path().join("r.html");
    ok(&["report", c, "--html", html.to_str().unwrap()]);
    assert!(std::fs::read_to_string(&html).unwrap().contains("The trace lost data"));

    let out = dir.path().join("x.json");
    let (_, stderr) = ok(&["export", c, "--format", "chrome", "-o", out.to_str().unwrap()]);
    assert!(stderr.contains("damaged at byte") && stderr.contains("no trailer"), "{stderr}");
}

/// A Kineto trace cut off mid-write: every command reads its complete events and says it was cut.
#[test]
fn a_cut_off_kineto_trace_is_lossy_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rank0.json");
    let mut events = Vec::new();
    for i in 0..50u64 {
        events.push(format!(
            r#"{{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": {}, "dur": 5, "args": {{"device": 0, "stream": 7, "correlation": {}}}}}"#,
            10 + i * 10,
            i + 1
        ));
    }
    let whole = format!(
        r#"{{"schemaVersion": 1, "traceEvents": [{}], "baseTimeNanoseconds": 0}}"#,
        events.join(",\n")
    );
    let whole_path = dir.path().join("whole.json");
    std::fs::write(&whole_path, &whole).unwrap();
    // Cut in the middle of the 31st event.
    let at = whole.find(r#""correlation": 31}"#).unwrap();
    std::fs::write(&path, &whole[..at]).unwrap();
    let p = path.to_str().unwrap();

    let (json, stderr) = ok(&["report", "--json", p]);
    assert!(stderr.contains("rank0.json: cut off inside traceEvents"), "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["lossy"], true);
    assert_eq!(v["ranks"][0]["losses"]["lost_records"]["truncated"], 1);
    assert_eq!(v["top_kernels"][0]["count"], 30);

    let (exposition, _) = ok(&["metrics", p]);
    assert!(exposition.contains(r#"source="truncated"} 1"#), "{exposition}");
    let (stdout, _) = ok(&["diff", whole_path.to_str().unwrap(), p]);
    assert!(stdout.contains("B rank 0: records lost: 1 truncated"), "{stdout}");
    let (stdout, _) = ok(&["info", p]);
    assert!(stdout.contains("LOSSES        truncated: 1 lost"), "{stdout}");
    // import --strict refuses it, naming the file.
    let out = run(&["import", "--strict", p, "-o", dir.path().join("x.gtrace").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("rank0.json"), "{}", text(&out.stderr));
}
