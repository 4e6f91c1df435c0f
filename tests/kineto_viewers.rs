//! A Kineto trace and its round trip through gputrace (`gputrace import`,
//! then `gputrace export --format chrome`) read the same in TensorBoard's
//! PyTorch profiler plugin (PyPI `torch-tb-profiler`, its own loader) and in
//! HTA (PyPI `HolisticTraceAnalysis`): the same steps, the same per-step
//! breakdown (kernel, memcpy, memset, communication, runtime, DataLoader, CPU
//! exec, other), kernel tables, recommendation, HTA temporal breakdown and
//! straggler list. `tests/support/kineto_viewers.py` asks both.
//!
//! Inputs: the real 2-rank HTA trace (integer µs; ranks 0 and 1 of a
//! 128-rank job), a real DDP trace with float-µs times and DataLoader-free
//! steps, and the demo's own Chrome export (its round trip).
//!
//! Numbers are compared within [`TOLERANCE_US`]: the readers turn the
//! original's absolute float µs (`4458676524670.502`) into float64, ours are
//! µs after `baseTimeNanoseconds` with three decimals, exact to the ns.
//! Without the Python packages or the shared traces the test skips, but
//! under `CI=true` it fails (.ci/run installs the packages).

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{gputrace as run, text};

/// Largest difference allowed between two times (µs) the readers computed
/// from the original and from the round trip.
const TOLERANCE_US: f64 = 0.5;

fn helper() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/kineto_viewers.py")
}

/// What the plugin and HTA make of the Kineto files in `dir`; `None` when
/// the packages are missing (skip; under `CI=true`, fail).
fn viewers(dir: &Path) -> Option<Value> {
    let out = Command::new("python3").arg(helper()).arg(dir).output().expect("run python3");
    if out.status.code() == Some(2) {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but {}: .ci/run installs torch-tb-profiler and HolisticTraceAnalysis for this test",
            text(&out.stdout).trim()
        );
        common::skip(text(&out.stdout).trim());
        return None;
    }
    assert!(out.status.success(), "{} failed: {}", helper().display(), text(&out.stderr));
    Some(serde_json::from_slice(&out.stdout).unwrap())
}

/// Import each file in `from` and export it as Chrome JSON into `to`.
fn round_trip(from: &[PathBuf], to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    let gt = to.join("gtrace");
    std::fs::create_dir_all(&gt).unwrap();
    for f in from {
        let stem = f
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .trim_end_matches(".gz")
            .trim_end_matches(".json");
        let g = gt.join(format!("{stem}.gtrace"));
        let out = run(&["import", f.to_str().unwrap(), "-o", g.to_str().unwrap()]);
        assert!(out.status.success(), "import {}: {}", f.display(), text(&out.stderr));
        let json = to.join(format!("{stem}.json"));
        let out = run(&["export", "--format", "chrome", g.to_str().unwrap(), "-o", json.to_str().unwrap()]);
        assert!(out.status.success(), "export {}: {}", g.display(), text(&out.stderr));
    }
}

fn close(a: &Value, b: &Value, tol: f64) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => (x - y).abs() <= tol,
        _ => a == b,
    }
}

/// The plugin's and HTA's readings of the original files (`a`) and of their
/// round trip (`b`) agree; `names` pairs each original file name with its
/// round trip's. Returns the largest time difference seen (µs).
fn same_reading(what: &str, a: &Value, b: &Value, names: &[(String, String)]) -> f64 {
    let mut worst: f64 = 0.0;
    let mut diff = |x: &Value, y: &Value, tol: f64, at: &str| {
        assert!(close(x, y, tol), "{what}: {at}: original {x}, round trip {y}");
        if let (Some(x), Some(y)) = (x.as_f64(), y.as_f64()) {
            worst = worst.max((x - y).abs());
        }
    };
    for (orig, rt) in names {
        let (pa, pb) = (&a["plugin"][orig], &b["plugin"][rt]);
        assert!(pa.is_object(), "{what}: the plugin could not read the original {orig}: {pa}");
        assert!(pb.is_object(), "{what}: the plugin could not read the round trip {rt}: {pb}");
        assert_eq!(pa["steps"], pb["steps"], "{what} {orig}: steps");
        for (step, roles) in pa["breakdown"].as_object().unwrap() {
            for (role, v) in roles.as_object().unwrap() {
                diff(v, &pb["breakdown"][step][role], TOLERANCE_US, &format!("{orig} step {step} {role}"));
            }
        }
        let (ka, kb) = (pa["kernels"].as_object().unwrap(), pb["kernels"].as_object().unwrap());
        assert!(!ka.is_empty(), "{what} {orig}: the plugin lists kernels");
        assert_eq!(
            ka.keys().collect::<Vec<_>>(),
            kb.keys().collect::<Vec<_>>(),
            "{what} {orig}: kernel names"
        );
        for (name, row) in ka {
            assert_eq!(row[0], kb[name][0], "{what} {orig}: calls of {name}");
            diff(&row[1], &kb[name][1], TOLERANCE_US, &format!("{orig} total of {name}"));
        }
        assert_eq!(pa["recommendations"], pb["recommendations"], "{what} {orig}: recommendation");
        // No warning the original does not give ("ranges on the same thread should not intersect").
        for w in pb["warnings"].as_array().unwrap() {
            assert!(pa["warnings"].as_array().unwrap().contains(w), "{what} {rt}: new warning {w}");
        }
    }
    let (ha, hb) = (&a["hta"], &b["hta"]);
    assert_eq!(ha["profiler_steps"], hb["profiler_steps"], "{what}: HTA profiler steps");
    assert_eq!(ha["stragglers"], hb["stragglers"], "{what}: HTA potential stragglers");
    for key in ["temporal", "kernels"] {
        let (ta, tb) = (&ha[key], &hb[key]);
        assert!(ta.is_object(), "{what}: HTA {key} on the original: {ta}");
        let (ta, tb) = (ta.as_object().unwrap(), tb.as_object().unwrap());
        assert_eq!(
            ta.keys().collect::<Vec<_>>(),
            tb.keys().collect::<Vec<_>>(),
            "{what}: HTA {key} rows"
        );
        for (k, v) in ta {
            match v.as_object() {
                Some(cols) => cols
                    .iter()
                    .for_each(|(c, x)| diff(x, &tb[k][c], TOLERANCE_US.max(1.0), &format!("HTA {key} {k} {c}"))),
                None => diff(v, &tb[k], TOLERANCE_US, &format!("HTA {key} {k}")),
            }
        }
    }
    worst
}

fn shared(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/traces").join(rel)
}

fn check_real(what: &str, files: &[PathBuf]) {
    if let Some(missing) = files.iter().find(|f| !f.is_file()) {
        common::shared_traces_absent(&format!("{} is absent", missing.display()));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let orig = dir.path().join("orig");
    std::fs::create_dir_all(&orig).unwrap();
    let mut names = Vec::new();
    for f in files {
        let name = f.file_name().unwrap().to_str().unwrap().to_string();
        std::fs::copy(f, orig.join(&name)).unwrap();
        names.push((
            name.clone(),
            format!("{}.json", name.trim_end_matches(".gz").trim_end_matches(".json")),
        ));
    }
    let originals: Vec<PathBuf> = names.iter().map(|(n, _)| orig.join(n)).collect();
    let rt = dir.path().join("rt");
    round_trip(&originals, &rt);
    let Some(a) = viewers(&orig) else { return };
    let b = viewers(&rt).unwrap();
    let worst = same_reading(what, &a, &b, &names);
    eprintln!("{what}: largest difference {worst:.3} µs");
}

#[test]
fn real_two_rank_trace_reads_the_same_after_a_round_trip() {
    let dir = "facebookresearch_HolisticTraceAnalysis@f4d0062/tests/data/trace_filter";
    check_real(
        "HTA 2-rank",
        &[
            shared(&format!("{dir}/sampled_rank-0.json.gz")),
            shared(&format!("{dir}/sampled_rank-1.json.gz")),
        ],
    );
}

#[test]
fn real_float_time_ddp_trace_reads_the_same_after_a_round_trip() {
    check_real(
        "HTA nccl_data",
        &[shared(
            "facebookresearch_HolisticTraceAnalysis@f4d0062/tests/data/nccl_parser_config/nccl_data.json.gz",
        )],
    );
}

#[test]
fn demo_export_reads_the_same_after_a_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    common::demo(&job, 2, 4, 2);
    // The demo's own export is the Kineto trace; its round trip goes through import.
    let orig = dir.path().join("orig");
    std::fs::create_dir_all(&orig).unwrap();
    let mut names = Vec::new();
    for g in common::trace_files(&job) {
        let name = format!("{}.json", g.file_stem().unwrap().to_str().unwrap());
        let out = run(&[
            "export",
            "--format",
            "chrome",
            g.to_str().unwrap(),
            "-o",
            orig.join(&name).to_str().unwrap(),
        ]);
        assert!(out.status.success(), "export {}: {}", g.display(), text(&out.stderr));
        names.push((name.clone(), name));
    }
    let originals: Vec<PathBuf> = names.iter().map(|(n, _)| orig.join(n)).collect();
    let rt = dir.path().join("rt");
    round_trip(&originals, &rt);
    let Some(a) = viewers(&orig) else { return };
    let b = viewers(&rt).unwrap();
    // Each of the demo's 4 steps once (a GPU projection of the step range
    // would make the plugin list it again).
    for (name, _) in &names {
        assert_eq!(a["plugin"][name]["steps"], serde_json::json!(["0", "1", "2", "3"]), "{name}");
    }
    let worst = same_reading("demo", &a, &b, &names);
    eprintln!("demo: largest difference {worst:.3} µs");
}
