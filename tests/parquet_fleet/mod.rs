//! A fleet of jobs exported into one Parquet directory, and the checks that an
//! engine's answers over it (tests/parquet/queries.py) equal `report --json`
//! and `info --json`. Shared by tests/parquet_duckdb.rs and
//! tests/parquet_spark.rs so both engines answer the same questions.
//!
//! The fleet: a 64-rank job, a 4-rank job, and a 4-rank job whose last
//! rank's file is cut off (a failed run, damaged), all priced at
//! [`PRICE`] per GPU-hour; the 4-rank job is exported twice (the second
//! export replaces the first).

use crate::common::{self, gputrace as run, text};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `--gpu-hour-cost` of every export and report.
pub const PRICE: &str = "2.5";

/// The jobs by name: (ranks, steps, seed, cut off the last rank's file).
const JOBS: [(&str, u32, u32, u32, bool); 3] = [("big", 64, 2, 24301, false), ("failed", 4, 3, 9, true), ("small", 4, 3, 7, false)];

/// The fleet's export, and each job's `report --json` and `info --json`.
pub struct Fleet {
    _dir: tempfile::TempDir,
    /// The Parquet directory.
    pub pq: PathBuf,
    reports: BTreeMap<&'static str, Value>,
    infos: BTreeMap<&'static str, Value>,
}

fn json(out: std::process::Output, what: &str) -> Value {
    assert!(out.status.success(), "{what}: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Make the jobs, export them into one directory, and report on each.
pub fn build() -> Fleet {
    let dir = tempfile::tempdir().unwrap();
    let pq = dir.path().join("pq");
    let mut reports = BTreeMap::new();
    let mut infos = BTreeMap::new();
    for (name, ranks, steps, seed, cut) in JOBS {
        let job = dir.path().join(name);
        let (r, s, seed) = (ranks.to_string(), steps.to_string(), seed.to_string());
        let out = run(&[
            "demo",
            "-o",
            job.to_str().unwrap(),
            "--ranks",
            &r,
            "--steps",
            &s,
            "--layers",
            "2",
            "--seed",
            &seed,
        ]);
        assert!(out.status.success(), "demo {name}: {}", text(&out.stderr));
        if cut {
            let last = common::trace_files(&job).pop().unwrap();
            let bytes = std::fs::read(&last).unwrap();
            std::fs::write(&last, &bytes[..bytes.len() * 2 / 3]).unwrap();
        }
        let times = if name == "small" { 2 } else { 1 };
        for _ in 0..times {
            let out = run(&[
                "export",
                job.to_str().unwrap(),
                "--format",
                "parquet",
                "--gpu-hour-cost",
                PRICE,
                "--job",
                name,
                "-o",
                pq.to_str().unwrap(),
            ]);
            assert!(out.status.success(), "export {name}: {}", text(&out.stderr));
        }
        let job = job.to_str().unwrap();
        reports.insert(name, json(run(&["report", job, "--json", "--gpu-hour-cost", PRICE]), "report"));
        infos.insert(name, json(run(&["info", job, "--json"]), "info"));
    }
    Fleet {
        _dir: dir,
        pq,
        reports,
        infos,
    }
}

/// Run tests/parquet/queries.py with `engine` over `pq`, and the queries of
/// docs/sql.md and docs/parquet.md.
pub fn query(engine: &str, pq: &Path) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let q = Command::new("python3")
        .arg(root.join("tests/parquet/queries.py"))
        .args([engine, pq.to_str().unwrap()])
        .args([root.join("docs/sql.md"), root.join("docs/parquet.md")])
        .output()
        .expect("run python3");
    assert!(q.status.success(), "{engine} queries failed: {}", text(&q.stderr));
    serde_json::from_slice(&q.stdout).unwrap_or_else(|e| panic!("{engine}: {e}: {}", text(&q.stdout)))
}

fn close(a: f64, b: f64, what: &str) {
    assert!((a - b).abs() <= 1e-9 * b.abs().max(1e-12), "{what}: SQL {a} vs report {b}");
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Every answer of `engine` (`sql`: queries.py's output) against the reports.
pub fn check(fleet: &Fleet, sql: &Value, engine: &str) {
    let rows = |name: &str| sql[name].as_array().unwrap_or_else(|| panic!("{engine}: no {name}")).clone();
    let of_job = |name: &str, job: &str| -> Vec<Value> { rows(name).into_iter().filter(|r| r[0] == job).collect() };

    // Three jobs, three ids, the re-exported one once.
    // Every query of docs/sql.md and docs/parquet.md runs.
    let docs = rows("docs");
    assert!(docs.len() >= 12, "{engine}: the docs' queries: {docs:?}");
    let failed: Vec<&Value> = docs.iter().filter(|d| !d[2].is_null()).collect();
    assert!(failed.is_empty(), "{engine}: queries of the docs fail: {failed:#?}");

    let ids = rows("job_ids");
    assert_eq!(ids.len(), 3, "{engine}: {ids:?}");
    for (job, report) in &fleet.reports {
        // The breakdown: every rank × device of the report.
        let mut expect = Vec::new();
        for r in report["ranks"].as_array().unwrap() {
            for d in r["devices"].as_array().unwrap() {
                expect.push(serde_json::json!([
                    job,
                    r["rank"],
                    d["device"],
                    d["compute_ns"],
                    d["exposed_communication_ns"],
                    d["idle_ns"]
                ]));
            }
        }
        let got = of_job("breakdown", job);
        assert_eq!(got, expect, "{engine}: {job}: breakdown != report --json");
        if *job == "big" {
            assert_eq!(got.len(), 64, "{engine}: the 64-rank job");
        }
        // Top kernels recomputed from gpu_activities.
        let top = of_job("top", job);
        for (i, k) in report["top_kernels"].as_array().unwrap().iter().take(3).enumerate() {
            assert_eq!(
                top[i].as_array().unwrap()[1..],
                [k["name"].clone(), k["count"].clone(), k["total_ns"].clone()],
                "{engine}: {job}: top kernel {i}"
            );
        }
        // The runs row: the report's productive layer.
        let p = &report["productive"];
        let run = of_job("runs", job);
        assert_eq!(run.len(), 1, "{engine}: {job}: one runs row: {run:?}");
        let run = &run[0];
        let ranks = report["ranks"].as_array().unwrap();
        assert_eq!(run[1], ranks.len(), "{engine}: {job}: ranks");
        assert_eq!(run[2], p["devices"], "{engine}: {job}: gpus");
        let wall = ranks
            .iter()
            .flat_map(|r| r["devices"].as_array().unwrap())
            .filter(|d| !d["first_ns"].is_null())
            .map(|d| {
                d["process_window"]["window_ns"]
                    .as_u64()
                    .unwrap_or(0)
                    .max(d["span_ns"].as_u64().unwrap())
            })
            .max()
            .unwrap();
        assert_eq!(run[3], wall, "{engine}: {job}: wall_ns");
        close(f(&run[4]), f(&p["gpu_hours"]), &format!("{engine}: {job}: gpu_hours"));
        close(
            f(&run[5]),
            f(&p["productive_gpu_hours"]),
            &format!("{engine}: {job}: productive_gpu_hours"),
        );
        close(f(&run[6]), f(&p["failed_gpu_hours"]), &format!("{engine}: {job}: failed_gpu_hours"));
        assert_eq!(run[7], p["tokens"], "{engine}: {job}: tokens");
        close(f(&run[8]), f(&p["cost_usd"]), &format!("{engine}: {job}: cost_usd"));
        let outcome = if p["failed"] == true { "failed" } else { "succeeded" };
        assert_eq!(run[9], outcome, "{engine}: {job}: outcome");
        assert_eq!(run[10], report["lossy"], "{engine}: {job}: lossy");
        let damaged = ranks.iter().filter(|r| !r["losses"]["damage"].is_null()).count();
        assert_eq!(run[11], damaged, "{engine}: {job}: damaged_ranks");
        assert_eq!(run[13], "content-hash", "{engine}: {job}");
        // Counter samples: as many as info counts, in the job's series.
        let files = fleet.infos[job]["files"].as_array().unwrap();
        let samples: u64 = files.iter().map(|i| i["events"]["counter"].as_u64().unwrap_or(0)).sum();
        let counters = of_job("counters", job);
        assert!(samples > 0, "{job}: the demo has NVML series");
        assert_eq!(counters[0][1], samples, "{engine}: {job}: counter samples");
        // File losses: the cut-off rank's, with the report's bytes.
        let losses = of_job("losses", job);
        let mut expect = Vec::new();
        for r in ranks {
            let l = &r["losses"];
            if !l["damage"].is_null() {
                expect.push(serde_json::json!([job, r["rank"], "damaged", l["damaged_bytes"]]));
            }
            if l["trailer_missing"] == true {
                expect.push(serde_json::json!([job, r["rank"], "unfinished", 0]));
            }
        }
        assert_eq!(losses, expect, "{engine}: {job}: losses");
    }
    let failed = &fleet.reports["failed"]["productive"];
    assert_eq!(failed["failed"], true, "the cut-off job failed");
    assert!(f(&failed["failed_gpu_hours"]) > 0.0);

    // The fleet formulas, from the reports.
    let sum = |k: &str| fleet.reports.values().map(|r| f(&r["productive"][k])).sum::<f64>();
    let completed = fleet.reports.values().filter(|r| r["productive"]["failed"] == false).count();
    let fleet_row = &rows("fleet")[0];
    close(
        f(&fleet_row[0]),
        sum("productive_gpu_hours") / sum("gpu_hours"),
        &format!("{engine}: productive GPU-hour rate"),
    );
    close(
        f(&fleet_row[1]),
        sum("cost_usd") / completed as f64,
        &format!("{engine}: cost per completed run"),
    );
    close(f(&fleet_row[2]), sum("failed_gpu_hours"), &format!("{engine}: failed GPU-hours"));
    assert_eq!(fleet_row[3], completed, "{engine}: completed runs");
    assert_eq!(fleet_row[4], 3, "{engine}: runs");
}
