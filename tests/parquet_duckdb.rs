//! `gputrace export --format parquet` read by a real engine: DuckDB (PyPI
//! `duckdb`) over the export of the demo's multi-rank job gives the same
//! per-rank breakdown and top kernels as `report --json`, and the same
//! straggler as `compare --json`. The SQL is docs/sql.md's. Without
//! DuckDB the test skips, but under `CI=true` it fails (.ci/run installs it).

use std::process::Command;

mod common;
mod parquet_fleet;
use common::{gputrace as run, text};

fn have_duckdb() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import duckdb"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but `python3 -c 'import duckdb'` fails: .ci/run installs DuckDB for this test"
        );
        common::skip("no DuckDB for python3 (pip install duckdb)");
    }
    ok
}

/// docs/sql.md's queries, results as JSON on standard output.
const QUERIES: &str = r#"
import duckdb, json, sys
d = sys.argv[1]
c = duckdb.connect()
def t(name):
    return f"read_parquet('{d}/{name}/*/*/*.parquet', hive_partitioning=false)"
breakdown = c.sql(f"""
  select rank, device, compute_ns, exposed_communication_ns, idle_ns
  from {t('breakdown')} order by rank, device""").fetchall()
recomputed = c.sql(f"""
  select rank, count(*) from {t('gpu_activities')} where kind = 'kernel' group by rank order by rank""").fetchall()
top = c.sql(f"""
  select name, count(*) as n, sum(duration_ns) as total_ns
  from {t('gpu_activities')} where kind = 'kernel'
  group by name order by total_ns desc, name limit 5""").fetchall()
stragglers = c.sql(f"""
  with ranked as (
    select op, seq, rank,
      row_number() over (partition by op, seq order by start_ns desc, rank desc) as place,
      count(*) over (partition by op, seq) as n
    from {t('collectives')})
  select rank, count(*) as arrived_last
  from ranked where place = 1 and n > 1 group by rank order by arrived_last desc, rank""").fetchall()
jobs = c.sql(f"select distinct job, host, rank, pid, job_id from {t('gpu_activities')} order by rank").fetchall()
print(json.dumps({"breakdown": breakdown, "kernels": recomputed, "top": top, "stragglers": stragglers, "jobs": jobs}))
"#;

#[test]
fn duckdb_agrees_with_report_and_compare() {
    if !have_duckdb() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    common::demo(&job, 4, 3, 4);
    let pq = dir.path().join("pq");
    let (jobs, pqs) = (job.to_str().unwrap(), pq.to_str().unwrap());
    let out = run(&["export", jobs, "--format", "parquet", "--align", "--job", "demo-job", "-o", pqs]);
    assert!(out.status.success(), "export failed: {}", text(&out.stderr));
    for table in [
        "gpu_activities",
        "api_calls",
        "collectives",
        "markers",
        "losses",
        "counters",
        "breakdown",
    ] {
        let parts: Vec<_> = std::fs::read_dir(pq.join(table)).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(parts.len(), 1, "{table}: one job: {parts:?}");
        assert!(parts[0].join("rank=2").join("part-0.parquet").is_file(), "{table} rank=2 missing");
    }
    let q = Command::new("python3").args(["-c", QUERIES, pqs]).output().expect("run python3");
    assert!(q.status.success(), "DuckDB queries failed: {}", text(&q.stderr));
    let sql: serde_json::Value = serde_json::from_slice(&q.stdout).unwrap();

    let report = run(&["report", jobs, "--json"]);
    assert!(report.status.success(), "{}", text(&report.stderr));
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    let mut expect = Vec::new();
    for r in report["ranks"].as_array().unwrap() {
        for d in r["devices"].as_array().unwrap() {
            expect.push(serde_json::json!([
                r["rank"],
                d["device"],
                d["compute_ns"],
                d["exposed_communication_ns"],
                d["idle_ns"]
            ]));
        }
    }
    expect.sort_by_key(|v| (v[0].as_u64(), v[1].as_u64()));
    assert_eq!(
        sql["breakdown"],
        serde_json::Value::Array(expect),
        "breakdown table != report --json"
    );
    assert_eq!(sql["breakdown"].as_array().unwrap().len(), 4);

    // Top kernels recomputed from gpu_activities match the report's.
    let top = sql["top"].as_array().unwrap();
    for (i, k) in report["top_kernels"].as_array().unwrap().iter().take(3).enumerate() {
        assert_eq!(top[i][0], k["name"], "top kernel {i}");
        assert_eq!(top[i][1], k["count"], "top kernel {i} count");
        assert_eq!(top[i][2], k["total_ns"], "top kernel {i} time");
    }
    // Every rank's events carry job, host, rank and pid.
    let ids = sql["jobs"].as_array().unwrap();
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert!(ids
        .iter()
        .all(|r| r[0] == "demo-job" && r[1].as_str().is_some_and(|h| !h.is_empty())));
    assert_eq!(sql["kernels"].as_array().unwrap().len(), 4);

    // The rank that arrives last at most collectives is compare's straggler.
    let cmp = run(&["compare", jobs, "--json"]);
    assert!(cmp.status.success(), "{}", text(&cmp.stderr));
    let cmp: serde_json::Value = serde_json::from_slice(&cmp.stdout).unwrap();
    let s = &cmp["stragglers"][0];
    assert_eq!(
        sql["stragglers"][0][0], s["rank"],
        "straggler: SQL {} vs compare {s}",
        sql["stragglers"]
    );
    assert_eq!(sql["stragglers"][0][1], s["arrived_last"], "arrived_last");
}

/// Issue #43 item 4: over a directory of several jobs (one of 64 ranks, one
/// failed), DuckDB's answers equal `report --json`'s, job by job, and the
/// fleet formulas over the `runs` table equal them summed over jobs.
#[test]
fn duckdb_answers_per_job_and_fleet_questions_as_report_does() {
    if !have_duckdb() {
        return;
    }
    let fleet = parquet_fleet::build();
    let sql = parquet_fleet::query("duckdb", &fleet.pq);
    parquet_fleet::check(&fleet, &sql, "duckdb");
}

#[test]
fn parquet_refuses_filters_and_file_outputs_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    common::demo(&job, 2, 1, 2);
    let jobs = job.to_str().unwrap();
    let pq = dir.path().join("pq");
    let out = run(&["export", jobs, "--format", "parquet", "--rank", "1", "-o", pq.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(err.contains("--format parquet") && err.contains("--rank"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!pq.exists(), "nothing written on a refused export");
    let out = run(&["export", jobs, "--format", "parquet", "-o", "-"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("give a directory"), "{}", text(&out.stderr));
    let json = dir.path().join("t.json");
    let out = run(&[
        "export",
        jobs,
        "--format",
        "chrome",
        "--gpu-hour-cost",
        "2",
        "-o",
        json.to_str().unwrap(),
    ]);
    assert!(!out.status.success() && !json.exists());
    assert!(text(&out.stderr).contains("--format parquet"), "{}", text(&out.stderr));
}

/// Rows per job and rank of a table of the export in `dir`, by DuckDB,
/// over every Parquet file under the table's directory (whatever the layout).
fn rows_per_job_and_rank(dir: &std::path::Path, table: &str) -> Vec<(String, String, i64, i64)> {
    let script = r#"
import duckdb, json, sys
rows = duckdb.sql(f"""
  select job_id, job, rank, count(*) from read_parquet('{sys.argv[1]}/{sys.argv[2]}/**/*.parquet', hive_partitioning=false, union_by_name=true)
  group by all order by job, rank""").fetchall()
print(json.dumps(rows))
"#;
    let q = Command::new("python3")
        .args(["-c", script, dir.to_str().unwrap(), table])
        .output()
        .expect("run python3");
    assert!(q.status.success(), "DuckDB failed: {}", text(&q.stderr));
    serde_json::from_slice(&q.stdout).unwrap()
}

/// Issue #43 item 4: two jobs exported into one directory stay apart (the
/// second job's ranks 0-1 used to replace the first job's), and exporting a
/// job again replaces that job's rows only.
#[test]
fn jobs_in_one_directory_stay_apart_and_reexport_replaces_only_its_own() {
    if !have_duckdb() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    common::demo(&a, 4, 1, 2);
    let out = run(&[
        "demo",
        "-o",
        b.to_str().unwrap(),
        "--ranks",
        "2",
        "--steps",
        "1",
        "--layers",
        "2",
        "--seed",
        "7",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let pq = dir.path().join("pq");
    let export = |job: &std::path::Path, name: &str| {
        let out = run(&[
            "export",
            job.to_str().unwrap(),
            "--format",
            "parquet",
            "--job",
            name,
            "-o",
            pq.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "export {name}: {}", text(&out.stderr));
        text(&out.stderr)
    };
    export(&a, "a");
    export(&b, "b");
    let both = rows_per_job_and_rank(&pq, "breakdown");
    let ranks = |job: &str| -> Vec<i64> { both.iter().filter(|r| r.1 == job).map(|r| r.2).collect() };
    assert_eq!(ranks("a"), [0, 1, 2, 3], "{both:?}");
    assert_eq!(ranks("b"), [0, 1], "{both:?}");
    assert_ne!(both[0].0, both[4].0, "two job ids: {both:?}");
    let kernels = rows_per_job_and_rank(&pq, "gpu_activities");
    // Exporting a again (under another name) replaces a's rows, and only a's.
    let again = export(&a, "a-again");
    assert!(again.contains("replacing its earlier export"), "{again}");
    let after = rows_per_job_and_rank(&pq, "breakdown");
    assert_eq!(after.len(), 6, "{after:?}");
    assert!(after.iter().filter(|r| r.0 == both[0].0).all(|r| r.1 == "a-again"), "{after:?}");
    assert!(after.iter().filter(|r| r.1 == "b").count() == 2, "{after:?}");
    let kernels_after = rows_per_job_and_rank(&pq, "gpu_activities");
    let counts = |v: &[(String, String, i64, i64)]| -> Vec<(i64, i64)> { v.iter().map(|r| (r.2, r.3)).collect() };
    assert_eq!(counts(&kernels_after), counts(&kernels), "same rows per rank, none doubled");
    // Nothing but the tables is left in the directory (no staging leftovers).
    let mut names: Vec<String> = std::fs::read_dir(&pq)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
}

/// Issue #43 item 5: a damaged trace's losses reach the `losses` table (the
/// export used to warn on stderr and leave the table empty), with the bytes
/// lost that `report --json` gives, and an unfinished one says so too.
#[test]
fn a_damaged_trace_has_its_losses_in_the_losses_table() {
    if !have_duckdb() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    common::demo(&job, 2, 2, 2);
    let victim = common::trace_files(&job).pop().unwrap();
    let bytes = std::fs::read(&victim).unwrap();
    std::fs::write(&victim, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let pq = dir.path().join("pq");
    let out = run(&["export", job.to_str().unwrap(), "--format", "parquet", "-o", pq.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("damaged"), "{}", text(&out.stderr));
    let script = r#"
import duckdb, json, sys
print(json.dumps(duckdb.sql(f"""
  select rank, source, count, lost_bytes, detail
  from read_parquet('{sys.argv[1]}/losses/*/*/*.parquet', hive_partitioning=false)
  order by rank, source""").fetchall()))
"#;
    let q = Command::new("python3").args(["-c", script, pq.to_str().unwrap()]).output().unwrap();
    assert!(q.status.success(), "{}", text(&q.stderr));
    let rows: Vec<(i64, String, i64, i64, String)> = serde_json::from_slice(&q.stdout).unwrap();
    let report = run(&["report", job.to_str().unwrap(), "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    let rank1 = &report["ranks"][1]["losses"];
    assert!(rank1["damaged_bytes"].as_u64().unwrap() > 0, "{rank1}");
    let damaged: Vec<_> = rows.iter().filter(|r| r.1 == "damaged").collect();
    assert_eq!(damaged.len(), 1, "{rows:?}");
    assert_eq!(damaged[0].0, 1, "on the truncated rank: {rows:?}");
    assert_eq!(damaged[0].3, rank1["damaged_bytes"].as_i64().unwrap(), "{rows:?}");
    assert!(damaged[0].4.contains("unreadable"), "{rows:?}");
    assert!(rows.iter().any(|r| r.0 == 1 && r.1 == "unfinished"), "{rows:?}");
    assert!(rows.iter().all(|r| r.0 == 1), "the whole rank 0 has no losses: {rows:?}");
}
