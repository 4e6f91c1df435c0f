//! The serving tables (docs/parquet.md): an inference server's scraped
//! series (`serving`, from `gputrace run`'s launcher trace) and the requests
//! a server marked (`requests`, from `gputrace.request` marks), each in the
//! partition of the job and rank of the trace that holds them. A trace with
//! neither writes no file.

use crate::events::rank_part;
use crate::schema::{REQUESTS, SERVING};
use crate::writer::{PartWriter, Value};
use crate::{ColumnarError, ColumnarStats, ExportJob, RankSource};
use gputrace_format::metric::serving::PREFIX;
use gputrace_format::{Producer, TraceFile};
use std::path::PathBuf;

fn read_err(t: &TraceFile) -> impl Fn(gputrace_format::FormatError) -> ColumnarError + '_ {
    |source| ColumnarError::Read {
        path: t.path().to_path_buf(),
        source,
    }
}

/// Write `src`'s serving series and request rows; returns the files written
/// and adds the rows to `stats` at `serving_index` and `requests_index`.
pub(crate) fn write_rank(
    root: &std::path::Path,
    job: &ExportJob<'_>,
    src: &RankSource<'_>,
    stats: &mut ColumnarStats,
    (serving_index, requests_index): (usize, usize),
) -> Result<Vec<PathBuf>, ColumnarError> {
    let t = src.trace;
    let h = t.header();
    let head = [
        Value::S(job.id.as_str()),
        Value::S(job.name),
        Value::S(h.hostname.as_str()),
        Value::I(src.rank.into()),
        Value::I(h.pid.into()),
    ];
    let at = |ns: u64| (ns as i64).saturating_add(src.shift_ns);
    let mut paths = Vec::new();
    if h.producer == Producer::Launcher {
        let series = t.counter_series().map_err(read_err(t))?;
        let series: Vec<_> = series.iter().filter(|s| s.metric.starts_with(PREFIX)).collect();
        if !series.is_empty() {
            let p = rank_part(root, &SERVING, job.id.as_str(), src.rank);
            paths.push(p.clone());
            let mut w = PartWriter::create(p, &SERVING)?;
            let engine = h.extra.get("serving.engine").map_or("", String::as_str);
            let url = h.extra.get("serving.url").map_or("", String::as_str);
            for s in series {
                for &(time, value) in &s.samples {
                    let mut row = head.to_vec();
                    row.extend([
                        Value::S(engine),
                        Value::S(url),
                        Value::S(&s.metric),
                        Value::I(at(time.0)),
                        Value::I(i64::try_from(value).unwrap_or(i64::MAX)),
                    ]);
                    w.row(&row)?;
                }
            }
            stats.rows[serving_index] += w.finish()?;
        }
    }
    // Raw trace times (shift 0), put on the job's clock below.
    let rows = gputrace_analysis::serving::trace_request_rows(t, 0);
    if !rows.is_empty() {
        let p = rank_part(root, &REQUESTS, job.id.as_str(), src.rank);
        paths.push(p.clone());
        let mut w = PartWriter::create(p, &REQUESTS)?;
        let opt = |v: Option<u64>| v.map_or(Value::Null, |ns| Value::I(at(ns)));
        let dur = |v: Option<u64>| v.map_or(Value::Null, |ns| Value::I(ns as i64));
        for r in &rows {
            let mut row = head.to_vec();
            row.extend([
                // The id's 64 bits as a signed number.
                Value::I(r.id as i64),
                opt(r.arrive_ns),
                opt(r.scheduled_ns),
                opt(r.first_token_ns),
                opt(r.end_ns),
                Value::B(r.failed),
                Value::I(r.prompt_tokens as i64),
                Value::I(r.generation_tokens as i64),
                dur(r.ttft_ns()),
                dur(r.queue_ns()),
                dur(r.e2e_ns()),
                r.itl_ns().map_or(Value::Null, Value::F),
            ]);
            w.row(&row)?;
        }
        stats.rows[requests_index] += w.finish()?;
    }
    Ok(paths)
}
