//! Export a gputrace job (one trace per rank) as Parquet tables that
//! existing engines (DuckDB, Spark SQL, DataFusion, Polars) query directly.
//!
//! Layout (hive-style, one partition per rank):
//! `DIR/<table>/rank=<N>/part-0.parquet` for the tables in [`TABLES`].
//! Every row carries `job`, `host`, `rank` and `pid`. Times are ns on the
//! job's common clock: each input's `shift_ns` is added to its raw times.
//!
//! Memory: events are streamed; each open table holds at most
//! [`ROW_GROUP_ROWS`] buffered rows before they are written out as a row
//! group, so memory does not grow with the trace. Strings are dictionary
//! encoded and every column is zstd compressed. The schema is versioned
//! ([`SCHEMA_VERSION`], also in each file's key-value metadata under
//! `gputrace.schema_version`) and documented in `docs/parquet.md`.

use gputrace_analysis::Report;
use gputrace_format::{Event, StringId, TraceFile};
use parquet::basic::{Compression, ZstdLevel};
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{WriterProperties, WriterVersion};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::Type;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Version of the table layout; bumped on any incompatible change.
pub const SCHEMA_VERSION: u32 = 1;

/// Rows per row group: large enough for engines to scan efficiently,
/// small enough to bound the writer's memory (a few MB per table).
pub const ROW_GROUP_ROWS: usize = 128 * 1024;

/// Export failures, each naming the file concerned.
#[derive(Debug, thiserror::Error)]
pub enum ColumnarError {
    /// Creating a directory or file failed.
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
}

/// Physical type of a column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnType {
    /// Signed 64-bit integer.
    Int64,
    /// UTF-8 string, dictionary encoded.
    String,
}

/// A table: its name (the directory) and columns after the common ones.
#[derive(Debug)]
pub struct Table {
    /// Directory name under the output directory.
    pub name: &'static str,
    /// Columns after `job, host, rank, pid`.
    pub columns: &'static [(&'static str, ColumnType)],
}

use ColumnType::{Int64 as I, String as S};

/// Columns every table starts with.
pub const COMMON: &[(&str, ColumnType)] = &[("job", S), ("host", S), ("rank", I), ("pid", I)];

/// GPU activities: kernels, copies, memsets and syncs.
pub const GPU_ACTIVITIES: Table = Table {
    name: "gpu_activities",
    columns: &[
        ("kind", S),
        ("device", I),
        ("context", I),
        ("stream", I),
        ("correlation", I),
        ("name", S),
        ("start_ns", I),
        ("end_ns", I),
        ("duration_ns", I),
        ("grid_x", I),
        ("grid_y", I),
        ("grid_z", I),
        ("block_x", I),
        ("block_y", I),
        ("block_z", I),
        ("registers", I),
        ("static_shared_mem", I),
        ("dynamic_shared_mem", I),
        ("bytes", I),
        ("copy_kind", S),
        ("graph_id", I),
    ],
};

/// CUDA runtime/driver API calls.
pub const API_CALLS: Table = Table {
    name: "api_calls",
    columns: &[
        ("thread", I),
        ("correlation", I),
        ("domain", S),
        ("cbid", I),
        ("name", S),
        ("start_ns", I),
        ("end_ns", I),
        ("duration_ns", I),
        ("return_value", I),
    ],
};

/// NCCL collectives.
pub const COLLECTIVES: Table = Table {
    name: "collectives",
    columns: &[
        ("comm", I),
        ("op", S),
        ("seq", I),
        ("count", I),
        ("datatype", S),
        ("bytes", I),
        ("comm_rank", I),
        ("nranks", I),
        ("root", I),
        ("algorithm", S),
        ("protocol", S),
        ("channels", I),
        ("device", I),
        ("stream", I),
        ("correlation", I),
        ("enqueue_ns", I),
        ("start_ns", I),
        ("end_ns", I),
        ("duration_ns", I),
    ],
};

/// NVTX ranges and marks (and the steps recorded as markers).
pub const MARKERS: Table = Table {
    name: "markers",
    columns: &[
        ("thread", I),
        ("domain", S),
        ("name", S),
        ("kind", S),
        ("start_ns", I),
        ("end_ns", I),
        ("duration_ns", I),
    ],
};

/// Recorded data losses.
pub const LOSSES: Table = Table {
    name: "losses",
    columns: &[("time_ns", I), ("source", S), ("count", I), ("detail", S)],
};

/// One row per rank × device of `gputrace report`'s breakdown.
pub const BREAKDOWN: Table = Table {
    name: "breakdown",
    columns: &[
        ("device", I),
        ("device_name", S),
        ("span_ns", I),
        ("compute_ns", I),
        ("communication_ns", I),
        ("transfer_ns", I),
        ("exposed_communication_ns", I),
        ("exposed_transfer_ns", I),
        ("idle_ns", I),
    ],
};

/// Every table, in the order they are written.
pub const TABLES: [&Table; 6] = [&GPU_ACTIVITIES, &API_CALLS, &COLLECTIVES, &MARKERS, &LOSSES, &BREAKDOWN];

/// One value of a row.
#[derive(Clone, Copy, Debug)]
pub enum Value<'a> {
    /// An integer.
    I(i64),
    /// A string.
    S(&'a str),
}

enum Buffer {
    I(Vec<i64>),
    S(Vec<ByteArray>),
}

/// Writes one table's partition file, a row group every [`ROW_GROUP_ROWS`] rows.
struct PartWriter {
    path: PathBuf,
    file: SerializedFileWriter<File>,
    buffers: Vec<Buffer>,
    rows: usize,
    total: u64,
}

fn schema(table: &Table) -> Type {
    use parquet::basic::{ConvertedType, LogicalType, Repetition, Type as Physical};
    let fields = COMMON
        .iter()
        .chain(table.columns)
        .map(|&(name, ty)| {
            let b = match ty {
                ColumnType::Int64 => Type::primitive_type_builder(name, Physical::INT64),
                ColumnType::String => Type::primitive_type_builder(name, Physical::BYTE_ARRAY)
                    .with_logical_type(Some(LogicalType::String))
                    .with_converted_type(ConvertedType::UTF8),
            };
            Arc::new(b.with_repetition(Repetition::REQUIRED).build().expect("static schema is valid"))
        })
        .collect();
    Type::group_type_builder("schema")
        .with_fields(fields)
        .build()
        .expect("static schema is valid")
}

impl PartWriter {
    fn create(path: PathBuf, table: &Table) -> Result<PartWriter, ColumnarError> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|source| ColumnarError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let file = File::create(&path).map_err(|source| ColumnarError::Io {
            path: path.clone(),
            source,
        })?;
        let props = WriterProperties::builder()
            .set_writer_version(WriterVersion::PARQUET_1_0)
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_dictionary_enabled(true)
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .set_key_value_metadata(Some(vec![KeyValue::new(
                "gputrace.schema_version".to_string(),
                SCHEMA_VERSION.to_string(),
            )]))
            .set_created_by(format!("gputrace {}", env!("CARGO_PKG_VERSION")))
            .build();
        let file = SerializedFileWriter::new(file, Arc::new(schema(table)), Arc::new(props)).map_err(|source| ColumnarError::Parquet {
            path: path.clone(),
            source,
        })?;
        let buffers = COMMON
            .iter()
            .chain(table.columns)
            .map(|&(_, ty)| match ty {
                ColumnType::Int64 => Buffer::I(Vec::new()),
                ColumnType::String => Buffer::S(Vec::new()),
            })
            .collect();
        Ok(PartWriter {
            path,
            file,
            buffers,
            rows: 0,
            total: 0,
        })
    }

    /// Append one row; `values` must match the table's columns in order and type.
    fn row(&mut self, values: &[Value<'_>]) -> Result<(), ColumnarError> {
        debug_assert_eq!(values.len(), self.buffers.len());
        for (b, v) in self.buffers.iter_mut().zip(values) {
            match (b, v) {
                (Buffer::I(c), Value::I(x)) => c.push(*x),
                (Buffer::S(c), Value::S(s)) => c.push(ByteArray::from(*s)),
                // A schema/row mismatch is a bug in this crate's table code.
                _ => unreachable!("row value does not match its column's type"),
            }
        }
        self.rows += 1;
        self.total += 1;
        if self.rows >= ROW_GROUP_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ColumnarError> {
        if self.rows == 0 {
            return Ok(());
        }
        let path = self.path.clone();
        let err = |source| ColumnarError::Parquet {
            path: path.clone(),
            source,
        };
        let mut rg = self.file.next_row_group().map_err(err)?;
        for b in &mut self.buffers {
            let mut col = rg.next_column().map_err(err)?.expect("one writer per schema column");
            match b {
                Buffer::I(c) => {
                    col.typed::<Int64Type>().write_batch(c, None, None).map_err(err)?;
                    c.clear();
                }
                Buffer::S(c) => {
                    col.typed::<ByteArrayType>().write_batch(c, None, None).map_err(err)?;
                    c.clear();
                }
            }
            col.close().map_err(err)?;
        }
        rg.close().map_err(err)?;
        self.rows = 0;
        Ok(())
    }

    fn finish(mut self) -> Result<u64, ColumnarError> {
        self.flush()?;
        let path = self.path.clone();
        self.file.close().map_err(|source| ColumnarError::Parquet { path, source })?;
        Ok(self.total)
    }
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

/// What was written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ColumnarStats {
    /// Rows written per table, in [`TABLES`] order.
    pub rows: [u64; 6],
    /// Trace events read.
    pub events: u64,
    /// Files written.
    pub files: u64,
    /// Events of kinds schema v1 has no table for (NVML counter samples), not written.
    pub not_exported: u64,
    /// Bytes written.
    pub bytes: u64,
}

fn part_path(dir: &Path, table: &Table, rank: u32) -> PathBuf {
    dir.join(table.name).join(format!("rank={rank}")).join("part-0.parquet")
}

/// Export `ranks` (and `report`'s per-rank × device breakdown, if given)
/// under `dir`, with `job` in every row's `job` column.
pub fn export(dir: &Path, job: &str, ranks: &[RankSource<'_>], report: Option<&Report>) -> Result<ColumnarStats, ColumnarError> {
    let mut stats = ColumnarStats::default();
    let mut paths = Vec::new();
    for src in ranks {
        let h = src.trace.header();
        let host = h.hostname.as_str();
        let rank = i64::from(src.rank);
        let pid = i64::from(h.pid);
        let mut w = Vec::with_capacity(5);
        for t in &TABLES[..5] {
            let p = part_path(dir, t, src.rank);
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
            let head = [VS(job), VS(host), VI(rank), VI(pid)];
            match ev {
                Event::Kernel(k) => w[0].row(&concat(
                    &head,
                    &[
                        VS("kernel"),
                        VI(k.device.0.into()),
                        VI(k.context.0.into()),
                        VI(k.stream.0.into()),
                        VI(k.correlation.0.into()),
                        VS(s(k.name)),
                        VI(at(k.start)),
                        VI(at(k.end)),
                        VI(dur(k.start, k.end)),
                        VI(k.grid[0].into()),
                        VI(k.grid[1].into()),
                        VI(k.grid[2].into()),
                        VI(k.block[0].into()),
                        VI(k.block[1].into()),
                        VI(k.block[2].into()),
                        VI(k.registers.into()),
                        VI(k.static_shared_mem.into()),
                        VI(k.dynamic_shared_mem.into()),
                        VI(0),
                        VS(""),
                        VI(k.graph_id.into()),
                    ],
                ))?,
                Event::Memcpy(m) => w[0].row(&concat(
                    &head,
                    &[
                        VS("memcpy"),
                        VI(m.device.0.into()),
                        VI(m.context.0.into()),
                        VI(m.stream.0.into()),
                        VI(m.correlation.0.into()),
                        VS(m.kind.name()),
                        VI(at(m.start)),
                        VI(at(m.end)),
                        VI(dur(m.start, m.end)),
                        VI(0),
                        VI(0),
                        VI(0),
                        VI(0),
                        VI(0),
                        VI(0),
                        VI(0),
                        VI(0),
                        VI(0),
                        VI(m.bytes as i64),
                        VS(m.kind.name()),
                        VI(0),
                    ],
                ))?,
                Event::Memset(m) => w[0].row(&concat(
                    &head,
                    &[
                        VS("memset"),
                        VI(m.device.0.into()),
                        VI(m.context.0.into()),
                        VI(m.stream.0.into()),
                        VI(m.correlation.0.into()),
                        VS("memset"),
                        VI(at(m.start)),
                        VI(at(m.end)),
                        VI(dur(m.start, m.end)),
                        VI(0),
                        VI(0),
                        VI(0),
                        VI(0),
                        VI(0),
                        VI(0),
                        VI(0),
                        VI(0),
                        VI(0),
                        VI(m.bytes as i64),
                        VS(""),
                        VI(0),
                    ],
                ))?,
                Event::Sync(y) => w[0].row(&concat(
                    &head,
                    &[
                        VS("sync"),
                        VI(y.device.0.into()),
                        VI(y.context.0.into()),
                        VI(y.stream.0.into()),
                        VI(y.correlation.0.into()),
                        VS(y.kind.name()),
                        VI(at(y.start)),
                        VI(at(y.end)),
                        VI(dur(y.start, y.end)),
                        VI(0),
                        VI(0),
                        VI(0),
                        VI(0),
                        VI(0),
                        VI(0),
                        VI(0),
                        VI(0),
                        VI(0),
                        VI(0),
                        VS(""),
                        VI(0),
                    ],
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
                    &[VI(at(l.time)), VS(l.source.name()), VI(l.count as i64), VS(s(l.detail))],
                ))?,
                // Schema v1 has no table for the GPU's counter samples yet: counted and
                // reported, not silently dropped.
                Event::Counter(_) => stats.not_exported += 1,
                // Nor for graph launches recorded at graph level: counted the same way.
                Event::GraphLaunch(_) => stats.not_exported += 1,
            }
        }
        for (i, pw) in w.into_iter().enumerate() {
            stats.rows[i] += pw.finish()?;
        }
    }
    if let Some(report) = report {
        for r in &report.ranks {
            let (pid, host) = ranks.iter().find(|s| s.rank == r.rank).map_or((0, r.hostname.as_str()), |s| {
                (s.trace.header().pid, s.trace.header().hostname.as_str())
            });
            let p = part_path(dir, &BREAKDOWN, r.rank);
            paths.push(p.clone());
            let mut w = PartWriter::create(p, &BREAKDOWN)?;
            for d in &r.devices {
                let u = |x: u64| Value::I(x as i64);
                w.row(&[
                    Value::S(job),
                    Value::S(host),
                    Value::I(r.rank.into()),
                    Value::I(pid.into()),
                    Value::I(d.device.into()),
                    Value::S(&d.name),
                    u(d.span_ns),
                    u(d.compute_ns),
                    u(d.communication_ns),
                    u(d.transfer_ns),
                    u(d.exposed_communication_ns),
                    u(d.exposed_transfer_ns),
                    u(d.idle_ns),
                ])?;
            }
            stats.rows[5] += w.finish()?;
        }
    }
    stats.files = paths.len() as u64;
    stats.bytes = paths.iter().filter_map(|p| std::fs::metadata(p).ok()).map(|m| m.len()).sum();
    Ok(stats)
}

fn concat<'a>(head: &[Value<'a>; 4], rest: &[Value<'a>]) -> Vec<Value<'a>> {
    let mut v = Vec::with_capacity(4 + rest.len());
    v.extend_from_slice(head);
    v.extend_from_slice(rest);
    v
}
