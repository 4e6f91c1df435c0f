"""The Parquet export's queries, run by one engine over an export directory.

    python3 tests/parquet/queries.py duckdb|spark DIR [DOC.md...]

Prints one JSON document; with Markdown files, also whether each of their
```sql blocks runs (`docs`: [file:block, first line, error or null]). The SQL is the same for both engines (and is
docs/sql.md's); only how a table is registered differs. Used by
tests/parquet_duckdb.rs and tests/parquet_spark.rs, which check every value
against `gputrace report --json` and `gputrace info --json`.
"""
import json
import sys

TABLES = ["gpu_activities", "api_calls", "collectives", "markers", "losses", "counters", "breakdown", "samples", "runs"]

QUERIES = {
    "breakdown": """
        select job, rank, device, compute_ns, exposed_communication_ns, idle_ns
        from breakdown order by job, rank, device""",
    "top": """
        with k as (
          select job, name, count(*) as n, sum(duration_ns) as total_ns
          from gpu_activities where kind = 'kernel' group by job, name),
        ranked as (
          select job, name, n, total_ns,
                 row_number() over (partition by job order by total_ns desc, name) as i
          from k)
        select job, name, n, total_ns from ranked where i <= 3 order by job, i""",
    "runs": """
        select job, ranks, gpus, wall_ns, gpu_hours, productive_gpu_hours, failed_gpu_hours,
               tokens, cost_usd, outcome, lossy, damaged_ranks, unfinished_ranks, job_id_source
        from runs order by job""",
    # The fleet formulas, one query over every job in the directory.
    "fleet": """
        select sum(productive_gpu_hours) / sum(gpu_hours) as productive_gpu_hour_rate,
               sum(cost_usd) / nullif(sum(case when outcome = 'succeeded' then 1 else 0 end), 0)
                 as cost_per_completed_run_usd,
               sum(failed_gpu_hours) as failed_gpu_hours,
               sum(case when outcome = 'succeeded' then 1 else 0 end) as completed_runs,
               count(*) as runs
        from runs""",
    "counters": """
        select job, count(*) as samples, count(distinct metric) as metrics
        from counters group by job order by job""",
    "losses": """
        select job, rank, source, lost_bytes
        from losses where source in ('damaged', 'unfinished') order by job, rank, source""",
    "job_ids": """
        select distinct job, job_id from gpu_activities order by job""",
}


def duckdb_engine(d):
    import duckdb

    c = duckdb.connect()
    for t in TABLES:
        c.sql(f"create view {t} as select * from read_parquet('{d}/{t}/**/*.parquet', hive_partitioning=false)")
    return lambda q: [list(r) for r in c.sql(q).fetchall()], lambda: None


def spark_engine(d):
    from pyspark.sql import SparkSession

    s = (
        SparkSession.builder.master("local[2]")
        .appName("gputrace-parquet-test")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    s.sparkContext.setLogLevel("ERROR")
    for t in TABLES:
        # Spark discovers job_id=/rank= as partition columns (equal to the files' columns).
        s.read.parquet(f"{d}/{t}").createOrReplaceTempView(t)
    return lambda q: [list(r) for r in s.sql(q).collect()], s.stop


def cookbook(path):
    """The ```sql blocks of a Markdown file."""
    blocks, current = [], None
    for line in open(path, encoding="utf-8"):
        if current is None and line.strip() == "```sql":
            current = []
        elif current is not None and line.strip() == "```":
            blocks.append("".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def main():
    engine, d = sys.argv[1], sys.argv[2]
    run, stop = {"duckdb": duckdb_engine, "spark": spark_engine}[engine](d)
    out = {name: run(q) for name, q in QUERIES.items()}
    if len(sys.argv) > 3:
        out["docs"] = []
        for path, i, q in [(p, i, q) for p in sys.argv[3:] for i, q in enumerate(cookbook(p))]:
            try:
                run(q.strip().rstrip(";"))
                error = None
            except Exception as e:  # the engine's own error, reported to the test
                error = f"{type(e).__name__}: {str(e)[:500]}"
            out["docs"].append([f"{path}:{i}", q.strip().splitlines()[0], error])
    stop()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
