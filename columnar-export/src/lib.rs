//! Export gputrace jobs (one trace per rank) as Parquet tables that
//! existing engines (DuckDB, Spark SQL, DataFusion, Polars) query directly.
//!
//! Layout (hive-style, partitioned by job, then rank):
//! `DIR/<table>/job_id=<id>/rank=<N>/part-0.parquet` for the tables in
//! [`TABLES`]. Many jobs share one directory: each export replaces its own
//! job's partitions ([`JobId`] says how a job is named, `publish.rs` how the
//! replacement stays atomic) and leaves the others alone. Every row carries
//! `job_id`, `job`, `host`, `rank` and `pid`. Times are ns on the job's
//! common clock: each input's `shift_ns` is added to its raw times.
//!
//! Memory: events are streamed; each open table holds at most
//! [`ROW_GROUP_ROWS`] buffered rows before they are written out as a row
//! group, so memory does not grow with the trace. Strings are dictionary
//! encoded and every column is zstd compressed. The schema is versioned
//! ([`SCHEMA_VERSION`], also in each file's key-value metadata under
//! `gputrace.schema_version`) and documented in `docs/parquet.md`.
#![forbid(unsafe_code)]

mod events;
mod job_id;
mod publish;
mod runs;
mod samples;
mod schema;
mod serving;
mod writer;

pub use events::{DAMAGED, UNFINISHED};
pub use job_id::{JobId, JobIdSource, RUN_ID_KEY};
pub use schema::{
    ColumnType, Partitioning, Table, API_CALLS, BREAKDOWN, COLLECTIVES, COUNTERS, GPU_ACTIVITIES, JOB_KEYS, LOSSES, MARKERS, RANK_KEYS,
    RUNS, SAMPLES, TABLES,
};
pub use schema::{REQUESTS, SERVING};
pub use writer::Value;

use gputrace_analysis::Report;
use gputrace_format::TraceFile;
use std::path::{Path, PathBuf};
use writer::PartWriter;

/// Version of the table layout; bumped on any incompatible change
/// (2: partitioned by job, then rank; a `job_id` column first in every table).
pub const SCHEMA_VERSION: u32 = 2;

/// Rows per row group: large enough for engines to scan efficiently,
/// small enough to bound the writer's memory (a few MB per table).
pub const ROW_GROUP_ROWS: usize = 128 * 1024;

/// Export failures, each naming the file concerned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ColumnarError {
    /// Creating, moving or removing a directory or file failed.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The Parquet writer failed.
    #[error("{path}: parquet: {source}")]
    Parquet {
        /// The file being written.
        path: PathBuf,
        /// The cause.
        source: parquet::errors::ParquetError,
    },
    /// Reading an input trace failed.
    #[error("{path}: {source}")]
    Read {
        /// The input trace.
        path: PathBuf,
        /// The cause.
        source: gputrace_format::FormatError,
    },
    /// The output directory holds an export laid out by an older schema
    /// version, which this one would mix with.
    #[error("{path}: an export of Parquet schema version 1 (partitioned by rank only); export to another directory, or move the old export away first")]
    OldLayout {
        /// A partition directory of the old layout.
        path: PathBuf,
    },
}

/// One rank of the job to export.
#[derive(Clone, Copy, Debug)]
pub struct RankSource<'a> {
    /// The trace.
    pub trace: &'a TraceFile,
    /// The rank (partition key and `rank` column).
    pub rank: u32,
    /// Added to every raw time of this trace to put it on the job's clock.
    pub shift_ns: i64,
}

/// The job to export: its ranks, names, and the report the per-job tables
/// come from.
#[derive(Clone, Copy, Debug)]
pub struct ExportJob<'a> {
    /// The partition key ([`JobId::of`] the ranks).
    pub id: &'a JobId,
    /// The human name in every row's `job` column.
    pub name: &'a str,
    /// The ranks.
    pub ranks: &'a [RankSource<'a>],
    /// `gputrace report`'s analysis of these ranks (none: no `breakdown`
    /// and no `runs` row).
    pub report: Option<&'a Report>,
}

/// What was written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ColumnarStats {
    /// Rows written per table, in [`TABLES`] order.
    pub rows: [u64; TABLES.len()],
    /// Trace events read.
    pub events: u64,
    /// Files written.
    pub files: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Whether an earlier export of the same job was replaced.
    pub replaced: bool,
}

/// Export `job` under `dir`, replacing an earlier export of the same job id
/// and no other job's files.
pub fn export(dir: &Path, job: &ExportJob<'_>) -> Result<ColumnarStats, ColumnarError> {
    let names: Vec<&str> = TABLES.iter().map(|t| t.name).collect();
    if let Some(path) = publish::old_layout(dir, &names) {
        return Err(ColumnarError::OldLayout { path });
    }
    let staging = publish::Staging::create(dir, job.id.as_str())?;
    let mut stats = ColumnarStats::default();
    let mut paths = Vec::new();
    for src in job.ranks {
        paths.extend(events::write_rank(staging.root(), job, src, &mut stats)?);
        paths.extend(serving::write_rank(staging.root(), job, src, &mut stats, serving_tables())?);
        paths.push(samples::write_samples(staging.root(), job, src, &mut stats)?);
    }
    if let Some(report) = job.report {
        paths.extend(write_breakdown(staging.root(), job, report, &mut stats)?);
        paths.push(runs::write_runs(staging.root(), job, report)?);
        stats.rows[TABLES.len() - 1] += 1;
    }
    stats.files = paths.len() as u64;
    stats.bytes = paths.iter().filter_map(|p| std::fs::metadata(p).ok()).map(|m| m.len()).sum();
    let partition = format!("job_id={}", job.id);
    for t in TABLES {
        if staging.root().join(t.name).join(&partition).is_dir() {
            stats.replaced |= staging.publish(dir, t.name, &partition)?;
        }
    }
    staging.finish()?;
    Ok(stats)
}

/// The indexes of the `serving` and `requests` tables in [`TABLES`].
fn serving_tables() -> (usize, usize) {
    let at = |name: &str| TABLES.iter().position(|t| t.name == name).expect("a table");
    (at(SERVING.name), at(REQUESTS.name))
}

/// The `breakdown` table: one row per rank × device of `report`.
fn write_breakdown(root: &Path, job: &ExportJob<'_>, report: &Report, stats: &mut ColumnarStats) -> Result<Vec<PathBuf>, ColumnarError> {
    let index = TABLES.iter().position(|t| t.name == BREAKDOWN.name).expect("breakdown is a table");
    let mut paths = Vec::new();
    for r in &report.ranks {
        let (pid, host) = job.ranks.iter().find(|s| s.rank == r.rank).map_or((0, r.hostname.as_str()), |s| {
            (s.trace.header().pid, s.trace.header().hostname.as_str())
        });
        let p = events::rank_part(root, &BREAKDOWN, job.id.as_str(), r.rank);
        paths.push(p.clone());
        let mut w = PartWriter::create(p, &BREAKDOWN)?;
        for d in &r.devices {
            let u = |x: u64| Value::I(x as i64);
            w.row(&[
                Value::S(job.id.as_str()),
                Value::S(job.name),
                Value::S(host),
                Value::I(r.rank.into()),
                Value::I(pid.into()),
                Value::I(d.device.into()),
                Value::S(&d.name),
                u(d.time.span_ns),
                u(d.time.compute_ns),
                u(d.time.communication_ns),
                u(d.time.transfer_ns),
                u(d.time.exposed_communication_ns),
                u(d.time.exposed_transfer_ns),
                u(d.time.idle_ns),
            ])?;
        }
        stats.rows[index] += w.finish()?;
    }
    Ok(paths)
}
