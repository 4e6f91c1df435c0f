//! The rank pass: one trace's events streamed into its partition files of
//! the event tables, one row per event.

use crate::schema::{Table, EVENT_TABLES, TABLES};
use crate::writer::{PartWriter, Value};
use crate::{ColumnarError, ColumnarStats, ExportJob, RankSource};
use gputrace_format::{Event, StringId, TraceFile};
use std::path::{Path, PathBuf};

/// The file of `table` for `rank` of `job_id` under `root`.
pub(crate) fn rank_part(root: &Path, table: &Table, job_id: &str, rank: u32) -> PathBuf {
    root.join(table.name)
        .join(format!("job_id={job_id}"))
        .join(format!("rank={rank}"))
        .join("part-0.parquet")
}

/// Write `src`'s events under `root`; returns the files written.
pub(crate) fn write_rank(
    root: &Path,
    job: &ExportJob<'_>,
    src: &RankSource<'_>,
    stats: &mut ColumnarStats,
) -> Result<Vec<PathBuf>, ColumnarError> {
    let h = src.trace.header();
    let host = h.hostname.as_str();
    let rank = i64::from(src.rank);
    let pid = i64::from(h.pid);
    let mut paths = Vec::with_capacity(EVENT_TABLES);
    let mut w = Vec::with_capacity(EVENT_TABLES);
    for t in &TABLES[..EVENT_TABLES] {
        let p = rank_part(root, t, job.id.as_str(), src.rank);
        paths.push(p.clone());
        w.push(PartWriter::create(p, t)?);
    }
    let t = src.trace;
    let s = |id: StringId| t.string(id).unwrap_or("");
    let at = |n: gputrace_format::Nanos| (n.0 as i64).saturating_add(src.shift_ns);
    let dur = |a: gputrace_format::Nanos, b: gputrace_format::Nanos| b.0.saturating_sub(a.0) as i64;
    use Value::{I as VI, S as VS};
    for ev in t.events() {
        let ev = ev.map_err(|source| ColumnarError::Read {
            path: t.path().to_path_buf(),
            source,
        })?;
        stats.events += 1;
        let head = [VS(job.id.as_str()), VS(job.name), VS(host), VI(rank), VI(pid)];
        match ev {
            Event::Kernel(k) => w[0].row(&activity_row(
                &head,
                Activity {
                    kind: "kernel",
                    device: k.device.0.into(),
                    context: k.context.0.into(),
                    stream: k.stream.0.into(),
                    correlation: k.correlation.0.into(),
                    name: s(k.name),
                    start: at(k.start),
                    end: at(k.end),
                    duration: dur(k.start, k.end),
                    launch: [
                        k.grid[0].into(),
                        k.grid[1].into(),
                        k.grid[2].into(),
                        k.block[0].into(),
                        k.block[1].into(),
                        k.block[2].into(),
                        k.registers.into(),
                        k.static_shared_mem.into(),
                        k.dynamic_shared_mem.into(),
                    ],
                    graph_id: k.graph_id.into(),
                    ..Activity::default()
                },
            ))?,
            Event::Memcpy(m) => w[0].row(&activity_row(
                &head,
                Activity {
                    kind: "memcpy",
                    device: m.device.0.into(),
                    context: m.context.0.into(),
                    stream: m.stream.0.into(),
                    correlation: m.correlation.0.into(),
                    name: m.kind.name(),
                    start: at(m.start),
                    end: at(m.end),
                    duration: dur(m.start, m.end),
                    bytes: m.bytes as i64,
                    copy_kind: m.kind.name(),
                    ..Activity::default()
                },
            ))?,
            Event::Memset(m) => w[0].row(&activity_row(
                &head,
                Activity {
                    kind: "memset",
                    device: m.device.0.into(),
                    context: m.context.0.into(),
                    stream: m.stream.0.into(),
                    correlation: m.correlation.0.into(),
                    name: "memset",
                    start: at(m.start),
                    end: at(m.end),
                    duration: dur(m.start, m.end),
                    bytes: m.bytes as i64,
                    ..Activity::default()
                },
            ))?,
            Event::Sync(y) => w[0].row(&activity_row(
                &head,
                Activity {
                    kind: "sync",
                    device: y.device.0.into(),
                    context: y.context.0.into(),
                    stream: y.stream.0.into(),
                    correlation: y.correlation.0.into(),
                    name: y.kind.name(),
                    start: at(y.start),
                    end: at(y.end),
                    duration: dur(y.start, y.end),
                    ..Activity::default()
                },
            ))?,
            // A graph launch recorded at graph level: one activity row for the
            // whole graph, its nodes not recorded one by one.
            Event::GraphLaunch(g) => w[0].row(&activity_row(
                &head,
                Activity {
                    kind: "graph_launch",
                    device: g.device.0.into(),
                    context: g.context.0.into(),
                    stream: g.stream.0.into(),
                    correlation: g.correlation.0.into(),
                    name: "graph",
                    start: at(g.start),
                    end: at(g.end),
                    duration: dur(g.start, g.end),
                    graph_id: g.graph_id.into(),
                    ..Activity::default()
                },
            ))?,
            Event::Api(a) => w[1].row(&concat(
                &head,
                &[
                    VI(a.thread.0.into()),
                    VI(a.correlation.0.into()),
                    VS(a.domain.name()),
                    VI(a.cbid.into()),
                    VS(s(a.name)),
                    VI(at(a.start)),
                    VI(at(a.end)),
                    VI(dur(a.start, a.end)),
                    VI(a.return_value.into()),
                ],
            ))?,
            Event::Collective(c) => w[2].row(&concat(
                &head,
                &[
                    VI(c.comm.0 as i64),
                    VS(s(c.op)),
                    VI(c.seq as i64),
                    VI(c.count as i64),
                    VS(s(c.datatype)),
                    VI(c.bytes as i64),
                    VI(c.rank.into()),
                    VI(c.nranks.into()),
                    VI(c.root.into()),
                    VS(s(c.algorithm)),
                    VS(s(c.protocol)),
                    VI(c.channels.into()),
                    VI(c.device.0.into()),
                    VI(c.stream.0.into()),
                    VI(c.correlation.0.into()),
                    VI(at(c.enqueue)),
                    VI(at(c.start)),
                    VI(at(c.end)),
                    VI(dur(c.start, c.end)),
                ],
            ))?,
            Event::Marker(m) => w[3].row(&concat(
                &head,
                &[
                    VI(m.thread.0.into()),
                    VS(s(m.domain)),
                    VS(s(m.name)),
                    VS(m.kind.name()),
                    VI(at(m.start)),
                    VI(at(m.end)),
                    VI(dur(m.start, m.end)),
                ],
            ))?,
            Event::Loss(l) => w[4].row(&concat(
                &head,
                &[VI(at(l.time)), VS(l.source.name()), VI(l.count as i64), VS(s(l.detail)), VI(0)],
            ))?,
            // Values are unsigned; none real comes near 2^63, and a value that did
            // would saturate rather than turn negative.
            Event::Counter(c) => w[5].row(&concat(
                &head,
                &[
                    VI(c.device.0.into()),
                    VS(s(c.metric)),
                    VI(at(c.time)),
                    VI(i64::try_from(c.value).unwrap_or(i64::MAX)),
                ],
            ))?,
            // Request marks are rows of the serving table (serving.rs).
            Event::Request(_) => {}
        }
    }
    let head = [VS(job.id.as_str()), VS(job.name), VS(host), VI(rank), VI(pid)];
    let end = t.time_span().map_or(0, |(_, hi)| at(hi));
    for (source, count, detail, lost_bytes) in file_losses(t) {
        w[4].row(&concat(&head, &[VI(end), VS(source), VI(count), VS(&detail), VI(lost_bytes)]))?;
    }
    for (i, pw) in w.into_iter().enumerate() {
        stats.rows[i] += pw.finish()?;
    }
    Ok(paths)
}

/// Source names of the rows for what the file itself lost (no loss record
/// can say it: the writer never got to write one).
pub const DAMAGED: &str = "damaged";
/// See [`DAMAGED`].
pub const UNFINISHED: &str = "unfinished";

/// Rows (source, count, detail, lost bytes) for a damaged or unfinished file,
/// as `gputrace info` and `report` describe it. Counts are 0: how many
/// events were lost is unknown.
fn file_losses(t: &TraceFile) -> Vec<(&'static str, i64, String, i64)> {
    let mut rows = Vec::new();
    if let Some(d) = t.damage() {
        rows.push((
            DAMAGED,
            0,
            format!(
                "{} bytes from offset {} unreadable ({}); the events after it are lost",
                d.lost_bytes, d.offset, d.reason
            ),
            i64::try_from(d.lost_bytes).unwrap_or(i64::MAX),
        ));
    }
    if t.trailer().is_none() {
        rows.push((
            UNFINISHED,
            0,
            "no trailer: the recording process did not finish writing (killed?); the end of the run is missing".to_string(),
            0,
        ));
    }
    rows
}

/// One row of `gpu_activities` after the head columns, in the table's column
/// order; a field a kind does not have is 0 or empty (`Default`).
#[derive(Default)]
struct Activity<'a> {
    kind: &'a str,
    device: i64,
    context: i64,
    stream: i64,
    correlation: i64,
    name: &'a str,
    start: i64,
    end: i64,
    duration: i64,
    /// grid x/y/z, block x/y/z, registers, static and dynamic shared memory.
    launch: [i64; 9],
    bytes: i64,
    copy_kind: &'a str,
    graph_id: i64,
}

fn activity_row<'a>(head: &[Value<'a>; 5], a: Activity<'a>) -> Vec<Value<'a>> {
    use Value::{I, S};
    let mut v = Vec::with_capacity(head.len() + 21);
    v.extend_from_slice(head);
    v.extend([S(a.kind), I(a.device), I(a.context), I(a.stream), I(a.correlation), S(a.name)]);
    v.extend([I(a.start), I(a.end), I(a.duration)]);
    v.extend(a.launch.map(I));
    v.extend([I(a.bytes), S(a.copy_kind), I(a.graph_id)]);
    v
}

fn concat<'a>(head: &[Value<'a>; 5], rest: &[Value<'a>]) -> Vec<Value<'a>> {
    let mut v = Vec::with_capacity(head.len() + rest.len());
    v.extend_from_slice(head);
    v.extend_from_slice(rest);
    v
}
