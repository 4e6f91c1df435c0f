//! `gputrace export --format parquet` read by Apache Spark (PyPI `pyspark`
//! on a Java 17 runtime, `local[2]`): over a directory of several jobs (one
//! of 64 ranks, one failed) Spark SQL gives the same answers as
//! `report --json` and `info --json`, job by job, and the fleet
//! formulas over the `runs` table. The SQL is tests/parquet/queries.py's, the
//! same DuckDB runs (tests/parquet_duckdb.rs). Spark starts slowly: one
//! session, one script, one test. Without pyspark or Java the test skips,
//! but under `CI=true` it fails (.ci/run installs pyspark).

use std::process::Command;

mod common;
mod parquet_fleet;

fn have_spark() -> bool {
    let java = Command::new("java").arg("-version").output().is_ok_and(|o| o.status.success());
    let pyspark = Command::new("python3")
        .args(["-c", "import pyspark"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !(java && pyspark) {
        let missing = if java {
            "`python3 -c 'import pyspark'` fails"
        } else {
            "no `java` (a Java 17 runtime)"
        };
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but {missing}: .ci/run installs pyspark (and needs OpenJDK 17) for this test"
        );
        common::skip(&format!("{missing} (pip install pyspark; apt-get install openjdk-17-jre-headless)"));
    }
    java && pyspark
}

#[test]
fn spark_answers_per_job_and_fleet_questions_as_report_does() {
    if !have_spark() {
        return;
    }
    let fleet = parquet_fleet::build();
    let sql = parquet_fleet::query("spark", &fleet.pq);
    parquet_fleet::check(&fleet, &sql, "spark");
}
