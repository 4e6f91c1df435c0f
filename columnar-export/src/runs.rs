//! The `runs` table: one row per job, from `gputrace report`'s analysis of
//! it (its productive layer, losses and outcome), so that a fleet's numbers
//! (productive GPU-hour rate, cost per completed run, failed GPU-hours) are
//! one SQL query over many jobs' rows.

use crate::schema::{Partitioning, RUNS};
use crate::writer::{PartWriter, Value};
use crate::{ColumnarError, ExportJob};
use gputrace_analysis::Report;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The `runs` file of `job_id` under `root`.
pub(crate) fn job_part(root: &Path, job_id: &str) -> PathBuf {
    debug_assert_eq!(RUNS.partitioning, Partitioning::Job);
    root.join(RUNS.name).join(format!("job_id={job_id}")).join("part-0.parquet")
}

/// The job's wall time: the longest any of its GPUs was held, each GPU's
/// time counted as its GPU-hours count it (the traced process window, at
/// least the span of its activity; `productive.rs` in gputrace-analysis).
fn wall_ns(report: &Report) -> u64 {
    report
        .ranks
        .iter()
        .flat_map(|r| &r.devices)
        .filter(|d| d.first_ns.is_some())
        .map(|d| d.process_window.map_or(d.time.span_ns, |w| w.window_ns.max(d.time.span_ns)))
        .max()
        .unwrap_or(0)
}

/// The job's first and last event time on the job clock (0, 0 without events).
fn time_range(job: &ExportJob<'_>) -> (i64, i64) {
    let spans: Vec<(i64, i64)> = job
        .ranks
        .iter()
        .filter_map(|s| {
            let (lo, hi) = s.trace.time_span()?;
            Some(((lo.0 as i64).saturating_add(s.shift_ns), (hi.0 as i64).saturating_add(s.shift_ns)))
        })
        .collect();
    let lo = spans.iter().map(|s| s.0).min().unwrap_or(0);
    let hi = spans.iter().map(|s| s.1).max().unwrap_or(0);
    (lo, hi)
}

/// Write the job's `runs` row under `root`; returns the file.
pub(crate) fn write_runs(root: &Path, job: &ExportJob<'_>, report: &Report) -> Result<PathBuf, ColumnarError> {
    let p = &report.productive;
    let hosts: BTreeSet<&str> = report.ranks.iter().map(|r| r.hostname.as_str()).collect();
    let failed_ranks = report.ranks.iter().filter(|r| r.productive.failed).count();
    let lost_records: u64 = report.ranks.iter().flat_map(|r| r.losses.lost_records.values()).sum();
    let damaged = report.ranks.iter().filter(|r| r.losses.damage.is_some()).count();
    let unfinished = report.ranks.iter().filter(|r| r.losses.trailer_missing).count();
    let (start, end) = time_range(job);
    let detail = if p.outcome_evidence.is_empty() {
        p.outcome.clone()
    } else {
        format!("{}: {}", p.outcome, p.outcome_evidence)
    };
    let int = |x: u64| Value::I(i64::try_from(x).unwrap_or(i64::MAX));
    let opt_int = |x: Option<u64>| x.map_or(Value::Null, int);
    let opt_f = |x: Option<f64>| x.map_or(Value::Null, Value::F);
    let path = job_part(root, job.id.as_str());
    let mut w = PartWriter::create(path.clone(), &RUNS)?;
    w.row(&[
        Value::S(job.id.as_str()),
        Value::S(job.name),
        Value::S(job.id.source().name()),
        int(report.ranks.len() as u64),
        int(hosts.len() as u64),
        int(p.devices),
        Value::I(start),
        Value::I(end),
        int(wall_ns(report)),
        Value::F(p.gpu_hours),
        Value::F(p.productive_gpu_hours),
        Value::F(p.failed_gpu_hours),
        opt_f(p.productive_gpu_hour_rate),
        int(p.steps),
        opt_int(p.tokens),
        opt_int(p.samples),
        opt_f(report.cost.as_ref().map(|c| c.usd_per_gpu_hour)),
        opt_f(p.cost_usd),
        opt_f(p.failed_cost_usd),
        Value::S(if p.failed { "failed" } else { "succeeded" }),
        int(failed_ranks as u64),
        Value::S(&detail),
        Value::B(report.lossy),
        int(lost_records),
        int(damaged as u64),
        int(unfinished as u64),
    ])?;
    w.finish()?;
    Ok(path)
}
