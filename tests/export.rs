//! End-to-end tests of `gputrace export` on a synthetic job.

use std::path::Path;

mod common;
use common::{gputrace as run, text};

fn demo(dir: &Path) {
    common::demo(dir, 2, 3, 4);
}

#[test]
fn export_chrome_json_of_one_rank() {
    let dir = tempfile::tempdir().unwrap();
    demo(&dir.path().join("job"));
    let out_file = dir.path().join("rank1.json");
    let out = run(&[
        "export",
        dir.path().join("job").to_str().unwrap(),
        "--format",
        "chrome",
        "--rank",
        "1",
        "-o",
        out_file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("wrote ") && stderr.contains("chrome://tracing"), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out_file).unwrap()).unwrap();
    assert_eq!(v["distributedInfo"]["rank"], 1);
    let events = v["traceEvents"].as_array().unwrap();
    // 4 layers * 18 + 12 optimizer + 6 all-reduce kernels per step, 3 steps.
    assert_eq!(events.iter().filter(|e| e["cat"] == "kernel").count(), 3 * (4 * 18 + 12 + 6));
    assert!(events.iter().any(|e| e["ph"] == "s" && e["cat"] == "ac2g"));
    assert!(!dir.path().join("rank1.json.partial").exists());

    // Read back (as any Kineto trace), the collectives are the same: NCCL
    // kernels carry PyTorch's collective args, and the communicator id
    // survives as its 16 hex digits.
    let table = |path: &Path| {
        let out = run(&["report", "--json", path.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["collectives"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["communicator"].clone(),
                    c["op"].clone(),
                    c["count"].clone(),
                    c["linked"].clone(),
                    c["bytes"].clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    let original = std::fs::read_dir(dir.path().join("job"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains(".r00001."))
        .unwrap();
    let rows = table(&original);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(table(&out_file), rows);
}

#[test]
fn export_perfetto_gzip_with_window() {
    let dir = tempfile::tempdir().unwrap();
    demo(&dir.path().join("job"));
    let out_file = dir.path().join("job.pftrace.gz");
    let out = run(&[
        "export",
        dir.path().join("job").to_str().unwrap(),
        "-o",
        out_file.to_str().unwrap(),
        "--from",
        "1ms",
        "--to",
        "5ms",
        "--max-events",
        "1000",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("ui.perfetto.dev"), "{stderr}");
    let bytes = std::fs::read(&out_file).unwrap();
    assert_eq!(&bytes[..2], &[0x1f, 0x8b], "gzip magic");
    let events: u64 = stderr
        .split("wrote ")
        .nth(1)
        .unwrap()
        .split(": ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(events > 0 && events <= 1000, "{stderr}");
}

#[test]
fn export_reports_an_empty_selection() {
    let dir = tempfile::tempdir().unwrap();
    demo(&dir.path().join("job"));
    let out_file = dir.path().join("x.json");
    let out = run(&[
        "export",
        dir.path().join("job").to_str().unwrap(),
        "--format",
        "chrome",
        "--rank",
        "7",
        "-o",
        out_file.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("nothing to export"), "{}", text(&out.stderr));
    assert!(!out_file.exists());
}

#[test]
fn export_one_chrome_file_per_rank_into_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    demo(&dir.path().join("job"));
    let out_dir = format!("{}/", dir.path().join("kineto").display());
    let out = run(&[
        "export",
        dir.path().join("job").to_str().unwrap(),
        "--format",
        "chrome",
        "-o",
        &out_dir,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut files: Vec<_> = std::fs::read_dir(dir.path().join("kineto"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    for (rank, f) in files.iter().enumerate() {
        assert_eq!(f.extension().unwrap(), "json");
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap();
        assert_eq!(v["distributedInfo"]["rank"], rank as u64);
    }
}

#[test]
fn step_marks_survive_as_instants() {
    let dir = tempfile::tempdir().unwrap();
    demo(&dir.path().join("job"));
    // Chrome/Kineto JSON: an instant event ("ph": "i") per step mark, with its name.
    let json = dir.path().join("rank0.json");
    let out = run(&[
        "export",
        dir.path().join("job").to_str().unwrap(),
        "--format",
        "chrome",
        "--rank",
        "0",
        "-o",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let marks: Vec<&serde_json::Value> = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "step tokens=4096")
        .collect();
    assert_eq!(marks.len(), 3, "one per step of the demo");
    assert!(marks.iter().all(|e| e["ph"] == "i"), "{marks:?}");
    // Perfetto: the mark's name is in the trace (interned once) as an instant's.
    let pf = dir.path().join("job.pftrace");
    let out = run(&["export", dir.path().join("job").to_str().unwrap(), "-o", pf.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let bytes = std::fs::read(&pf).unwrap();
    assert!(
        bytes.windows(16).any(|w| w == b"step tokens=4096"),
        "the step mark's name is in the Perfetto trace"
    );
}

#[test]
fn gpu_counters_are_chrome_counter_events() {
    let dir = tempfile::tempdir().unwrap();
    demo(&dir.path().join("job"));
    let original = std::fs::read_dir(dir.path().join("job"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains(".r00001."))
        .unwrap();
    let trace = gputrace_format::TraceFile::open(&original).unwrap();
    let series = trace.counter_series().unwrap();
    let samples: usize = series.iter().map(|s| s.samples.len()).sum();
    assert!(samples > 0, "the demo samples NVML counters");
    let out_file = dir.path().join("rank1.json");
    let out = run(&[
        "export",
        original.to_str().unwrap(),
        "--format",
        "chrome",
        "-o",
        out_file.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out_file).unwrap()).unwrap();
    let counters: Vec<&serde_json::Value> = v["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "C").collect();
    assert_eq!(counters.len(), samples, "one counter event per sample");
    let power = series
        .iter()
        .find(|s| s.metric == gputrace_format::metric::POWER_MW)
        .expect("a power series");
    let name = format!("GPU {} power W", power.device.0);
    let values: Vec<f64> = counters
        .iter()
        .filter(|e| e["name"] == name.as_str())
        .map(|e| e["args"]["value"].as_f64().unwrap())
        .collect();
    let want: Vec<f64> = power.samples.iter().map(|&(_, mw)| mw as f64 / 1000.0).collect();
    assert_eq!(values, want, "{name}: the samples in watts");
    // Read back as a Kineto trace, the counters are not GPU work: the report is unchanged.
    let report = |p: &Path| {
        let out = run(&["report", "--json", p.to_str().unwrap()]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["ranks"][0]["devices"][0]["compute_ns"].clone()
    };
    assert_eq!(report(&out_file), report(&original));
}
