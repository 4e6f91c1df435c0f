//! `gputrace export --format parquet` read by a real engine: DuckDB (PyPI
//! `duckdb`) over the export of the demo's multi-rank job gives the same
//! per-rank breakdown and top kernels as `report --json`, and the same
//! straggler as `compare --json`. The SQL is docs/sql.md's. Without
//! DuckDB the test skips, but under `CI=true` it fails (.ci/run installs it).

use std::process::Command;

mod common;
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
    return f"read_parquet('{d}/{name}/*/*.parquet', hive_partitioning=false)"
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
  with last as (
    select op, seq, arg_max(rank, start_ns) as last_rank, count(*) as n
    from {t('collectives')} group by op, seq)
  select last_rank as rank, count(*) as arrived_last
  from last where n > 1 group by last_rank order by arrived_last desc, rank""").fetchall()
jobs = c.sql(f"select distinct job, host, rank, pid from {t('gpu_activities')} order by rank").fetchall()
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
    for table in ["gpu_activities", "api_calls", "collectives", "markers", "losses", "breakdown"] {
        assert!(
            pq.join(table).join("rank=2").join("part-0.parquet").is_file(),
            "{table} rank=2 missing"
        );
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
}
