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
    let rows = Rows {
        trace: t,
        shift_ns: src.shift_ns,
    };
    use Value::{I as VI, S as VS};
    for ev in t.events() {
        let ev = ev.map_err(|source| ColumnarError::Read {
            path: t.path().to_path_buf(),
            source,
        })?;
        stats.events += 1;
        let head = [VS(job.id.as_str()), VS(job.name), VS(host), VI(rank), VI(pid)];
        rows.write(ev, &head, &mut w)?;
    }
    let head = [VS(job.id.as_str()), VS(job.name), VS(host), VI(rank), VI(pid)];
    let end = t.time_span().map_or(0, |(_, hi)| rows.at(hi));
    for (source, count, detail, lost_bytes) in file_losses(t) {
        w[4].row(&concat(&head, &[VI(end), VS(source), VI(count), VS(&detail), VI(lost_bytes)]))?;
    }
    for (i, pw) in w.into_iter().enumerate() {
        stats.rows[i] += pw.finish()?;
    }
    Ok(paths)
}

/// Turns a trace's events into rows of the event tables, times shifted onto the job's clock.
struct Rows<'t> {
    trace: &'t TraceFile,
    shift_ns: i64,
}

impl<'t> Rows<'t> {
    /// Write `ev` into its table (`w` in [`TABLES`] order) after the `head` columns.
    #[inline]
    fn write(&self, ev: Event, head: &[Value<'t>; 5], w: &mut [PartWriter]) -> Result<(), ColumnarError> {
        match ev {
            Event::Kernel(k) => w[0].row(&activity_row(head, self.kernel(&k))),
            Event::Memcpy(m) => w[0].row(&activity_row(head, self.memcpy(&m))),
            Event::Memset(m) => w[0].row(&activity_row(head, self.memset(&m))),
            Event::Sync(y) => w[0].row(&activity_row(head, self.sync(&y))),
            // A graph launch recorded at graph level: one activity row for the
            // whole graph, its nodes not recorded one by one.
            Event::GraphLaunch(g) => w[0].row(&activity_row(head, self.graph_launch(&g))),
            Event::Api(a) => w[1].row(&concat(head, &self.api(&a))),
            Event::Collective(c) => w[2].row(&concat(head, &self.collective(&c))),
            Event::Marker(m) => w[3].row(&concat(head, &self.marker(&m))),
            Event::Loss(l) => w[4].row(&concat(head, &self.loss(&l))),
            Event::Counter(c) => w[5].row(&concat(head, &self.counter(&c))),
            // Request marks are rows of the serving table (serving.rs).
            Event::Request(_) => Ok(()),
        }
    }

    #[inline]
    fn s(&self, id: StringId) -> &'t str {
        self.trace.string(id).unwrap_or("")
    }

    #[inline]
    fn at(&self, n: gputrace_format::Nanos) -> i64 {
        (n.0 as i64).saturating_add(self.shift_ns)
    }

    #[inline]
    fn kernel(&self, k: &gputrace_format::Kernel) -> Activity<'t> {
        Activity {
            kind: "kernel",
            device: k.device.0.into(),
            context: k.context.0.into(),
            stream: k.stream.0.into(),
            correlation: k.correlation.0.into(),
            name: self.s(k.name),
            start: self.at(k.start),
            end: self.at(k.end),
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
        }
    }

    #[inline]
    fn memcpy(&self, m: &gputrace_format::Memcpy) -> Activity<'t> {
        Activity {
            kind: "memcpy",
            device: m.device.0.into(),
            context: m.context.0.into(),
            stream: m.stream.0.into(),
            correlation: m.correlation.0.into(),
            name: m.kind.name(),
            start: self.at(m.start),
            end: self.at(m.end),
            duration: dur(m.start, m.end),
            bytes: m.bytes as i64,
            copy_kind: m.kind.name(),
            ..Activity::default()
        }
    }

    #[inline]
    fn memset(&self, m: &gputrace_format::Memset) -> Activity<'t> {
        Activity {
            kind: "memset",
            device: m.device.0.into(),
            context: m.context.0.into(),
            stream: m.stream.0.into(),
            correlation: m.correlation.0.into(),
            name: "memset",
            start: self.at(m.start),
            end: self.at(m.end),
            duration: dur(m.start, m.end),
            bytes: m.bytes as i64,
            ..Activity::default()
        }
    }

    #[inline]
    fn sync(&self, y: &gputrace_format::Sync) -> Activity<'t> {
        Activity {
            kind: "sync",
            device: y.device.0.into(),
            context: y.context.0.into(),
            stream: y.stream.0.into(),
            correlation: y.correlation.0.into(),
            name: y.kind.name(),
            start: self.at(y.start),
            end: self.at(y.end),
            duration: dur(y.start, y.end),
            ..Activity::default()
        }
    }

    #[inline]
    fn graph_launch(&self, g: &gputrace_format::GraphLaunch) -> Activity<'t> {
        Activity {
            kind: "graph_launch",
            device: g.device.0.into(),
            context: g.context.0.into(),
            stream: g.stream.0.into(),
            correlation: g.correlation.0.into(),
            name: "graph",
            start: self.at(g.start),
            end: self.at(g.end),
            duration: dur(g.start, g.end),
            graph_id: g.graph_id.into(),
            ..Activity::default()
        }
    }

    #[inline]
    fn api(&self, a: &gputrace_format::ApiCall) -> [Value<'t>; 9] {
        use Value::{I as VI, S as VS};
        [
            VI(a.thread.0.into()),
            VI(a.correlation.0.into()),
            VS(a.domain.name()),
            VI(a.cbid.into()),
            VS(self.s(a.name)),
            VI(self.at(a.start)),
            VI(self.at(a.end)),
            VI(dur(a.start, a.end)),
            VI(a.return_value.into()),
        ]
    }

    #[inline]
    fn collective(&self, c: &gputrace_format::Collective) -> [Value<'t>; 19] {
        use Value::{I as VI, S as VS};
        [
            VI(c.comm.0 as i64),
            VS(self.s(c.op)),
            VI(c.seq as i64),
            VI(c.count as i64),
            VS(self.s(c.datatype)),
            VI(c.bytes as i64),
            VI(c.rank.into()),
            VI(c.nranks.into()),
            VI(c.root.into()),
            VS(self.s(c.algorithm)),
            VS(self.s(c.protocol)),
            VI(c.channels.into()),
            VI(c.device.0.into()),
            VI(c.stream.0.into()),
            VI(c.correlation.0.into()),
            VI(self.at(c.enqueue)),
            VI(self.at(c.start)),
            VI(self.at(c.end)),
            VI(dur(c.start, c.end)),
        ]
    }

    #[inline]
    fn marker(&self, m: &gputrace_format::Marker) -> [Value<'t>; 7] {
        use Value::{I as VI, S as VS};
        [
            VI(m.thread.0.into()),
            VS(self.s(m.domain)),
            VS(self.s(m.name)),
            VS(m.kind.name()),
            VI(self.at(m.start)),
            VI(self.at(m.end)),
            VI(dur(m.start, m.end)),
        ]
    }

    #[inline]
    fn loss(&self, l: &gputrace_format::Loss) -> [Value<'t>; 5] {
        use Value::{I as VI, S as VS};
        [
            VI(self.at(l.time)),
            VS(l.source.name()),
            VI(l.count as i64),
            VS(self.s(l.detail)),
            VI(0),
        ]
    }

    /// Values are unsigned; none real comes near 2^63, and a value that did
    /// would saturate rather than turn negative.    #[inline]
    fn counter(&self, c: &gputrace_format::Counter) -> [Value<'t>; 4] {
        use Value::{I as VI, S as VS};
        [
            VI(c.device.0.into()),
            VS(self.s(c.metric)),
            VI(self.at(c.time)),
            VI(i64::try_from(c.value).unwrap_or(i64::MAX)),
        ]
    }
}

fn dur(a: gputrace_format::Nanos, b: gputrace_format::Nanos) -> i64 {
    b.0.saturating_sub(a.0) as i64
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
