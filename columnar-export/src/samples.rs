//! The `samples` table: a rank's host samples (format 1.4's host samples
//! chunks), one row per run of consecutive samples of a thread with the
//! same state and stack, as the trace stores them. A trace without host
//! samples writes a file without rows, as every table does.

use crate::events::rank_part;
use crate::schema::{SAMPLES, TABLES};
use crate::writer::{PartWriter, Value};
use crate::{ColumnarError, ColumnarStats, ExportJob, RankSource};
use gputrace_format::host::HostFrame;
use std::path::PathBuf;

/// Write `src`'s host samples under `root`; the file written, if any.
pub(crate) fn write_samples(
    root: &std::path::Path,
    job: &ExportJob<'_>,
    src: &RankSource<'_>,
    stats: &mut ColumnarStats,
) -> Result<PathBuf, ColumnarError> {
    let t = src.trace;
    let read = |source| ColumnarError::Read {
        path: t.path().to_path_buf(),
        source,
    };
    let h = t.host_samples().map_err(read)?.unwrap_or_default();
    let header = t.header();
    let frame = |f: &HostFrame| {
        let function = t.name(f.function);
        let file = t.name(f.file);
        if file.is_empty() {
            function.into_owned()
        } else {
            format!("{function} ({file}:{})", f.line)
        }
    };
    // Folded, outermost first: `outer;…;inner`.
    let stacks: Vec<String> = h
        .stacks
        .iter()
        .map(|s| s.iter().rev().map(|&i| frame(&h.frames[i as usize])).collect::<Vec<_>>().join(";"))
        .collect();
    let path = rank_part(root, &SAMPLES, job.id.as_str(), src.rank);
    let mut w = PartWriter::create(path.clone(), &SAMPLES)?;
    let at = |n: gputrace_format::Nanos| (n.0 as i64).saturating_add(src.shift_ns);
    let int = |x: u64| Value::I(i64::try_from(x).unwrap_or(i64::MAX));
    for r in &h.runs {
        let th = &h.threads[r.thread as usize];
        let leaf = r.stack.and_then(|s| h.stacks[s as usize].first()).map(|&f| h.frames[f as usize]);
        let (function, file, line) = match leaf {
            Some(f) => (t.name(f.function), t.name(f.file), i64::from(f.line)),
            None => ("".into(), "".into(), 0),
        };
        w.row(&[
            Value::S(job.id.as_str()),
            Value::S(job.name),
            Value::S(&header.hostname),
            Value::I(src.rank.into()),
            Value::I(header.pid.into()),
            Value::I(at(r.start)),
            Value::I(at(r.end)),
            Value::I(r.samples.into()),
            Value::I(th.pid.into()),
            Value::I(th.tid.into()),
            Value::S(&th.name),
            Value::B(th.pid == header.pid && th.tid == th.pid),
            Value::S(r.state.name()),
            int(r.cpu_ns),
            r.stack.map_or(Value::Null, |s| Value::I(s.into())),
            Value::S(r.stack.map_or("", |s| stacks[s as usize].as_str())),
            Value::S(&function),
            Value::S(&file),
            Value::I(line),
        ])?;
    }
    let index = TABLES.iter().position(|t| t.name == SAMPLES.name).expect("samples is a table");
    stats.rows[index] += w.finish()?;
    Ok(path)
}
