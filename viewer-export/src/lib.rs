//! Exporters from the gputrace trace model to viewer formats: Perfetto's
//! native protobuf ([`Perfetto`]) and Chrome/Kineto trace JSON
//! ([`ChromeJson`]).
//!
//! Both are pure writers behind one trait, [`Exporter`]: they read the
//! traces of a [`Job`] (one per rank, put on one time line by their header
//! clock pairs), apply a [`Filter`] (time window, ranks, devices, event
//! budget) and stream the result to any `W: Write`. The caller picks files
//! and compression. Events are written as they are decoded, one track at a
//! time, and only the chunks that overlap the window are decoded (the JSON
//! writer also reads every collective chunk once, to put PyTorch's
//! collective args on their kernels). Memory holds the chunks at the current
//! position, one bit per correlation id (to draw launch arrows only when both
//! ends are written), a record per NVTX range projected onto the GPU (on by
//! default, at most a million ranges) and, for JSON, the linked collectives
//! (at most 2¹⁸). [`estimate`] predicts the output size
//! from the chunk index alone, so a front end can warn before writing more
//! than a viewer loads.
//!
//! ```
//! use gputrace_format::*;
//! use gputrace_viewer::{ChromeJson, Exporter, Filter, Job};
//!
//! let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default())?;
//! let name = w.intern("gemm_kernel");
//! w.push(Event::Kernel(Kernel {
//!     start: Nanos(1_000), end: Nanos(3_500),
//!     device: DeviceId(0), context: ContextId(1), stream: StreamId(7),
//!     correlation: CorrelationId(42), name,
//!     grid: [128, 1, 1], block: [256, 1, 1],
//!     static_shared_mem: 0, dynamic_shared_mem: 0, registers: 64,
//!     graph_id: 0, graph_node_id: 0,
//! }))?;
//! let trace = TraceFile::from_bytes("example.gtrace", w.finish(Trailer::default())?)?;
//!
//! let mut json = Vec::new();
//! let stats = ChromeJson.export(&Job::new([&trace]), &Filter::default(), &mut json)?;
//! assert_eq!(stats.walk.events, 1);
//! let text = String::from_utf8(json).unwrap();
//! assert!(text.contains(r#""cat":"kernel","name":"gemm_kernel","pid":0,"tid":7,"ts":0.000,"dur":2.500"#));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod chrome;
mod error;
mod host;
mod job;
mod out;
mod perfetto;
mod proto;
mod walk;

pub use chrome::{
    ChromeJson, CLASH_PID_BASE, COMM_TID_BASE, HOST_SAMPLES_TID_BASE, MERGED_GPU_PID_BASE, SYNC_TID_BASE, UNKNOWN_STREAM_TID,
};
pub use error::{ExportError, Result};
pub use job::{EventCounts, Filter, Job, Plan, RankInput};
pub use perfetto::{Perfetto, SEQUENCE_ID};
pub use walk::WalkStats;

use gputrace_format::*;
use std::io::Write;

/// A writer of one viewer format.
pub trait Exporter {
    /// Write the part of `job` that `filter` selects to `out`.
    fn export<W: Write>(&self, job: &Job<'_>, filter: &Filter, out: W) -> Result<ExportStats>;
}

/// What an export wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportStats {
    /// Events, flows, adjustments, truncation.
    pub walk: WalkStats,
    /// Bytes written (before any compression the caller adds).
    pub bytes: u64,
    /// Window start on the common time line (ns since the epoch).
    pub from: u64,
    /// Window end (exclusive).
    pub to: u64,
}

/// The output formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    /// Perfetto native protobuf (`.pftrace`).
    Perfetto,
    /// Chrome/Kineto trace JSON (`.json`).
    ChromeJson,
}

impl Format {
    /// Usual file name extension.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Perfetto => "pftrace",
            Format::ChromeJson => "json",
        }
    }

    /// Export with this format's writer (default options).
    pub fn export<W: Write>(self, job: &Job<'_>, filter: &Filter, out: W) -> Result<ExportStats> {
        match self {
            Format::Perfetto => Perfetto::default().export(job, filter, out),
            Format::ChromeJson => ChromeJson.export(job, filter, out),
        }
    }

    /// Largest output the usual viewer loads, bytes (uncompressed), and the
    /// viewer: about 256 MB of JSON for chrome://tracing; for the Perfetto
    /// UI, about 2 GB of browser memory at up to 4× the protobuf size.
    pub fn viewer_limit(self) -> (u64, &'static str) {
        match self {
            Format::Perfetto => (512 << 20, "the Perfetto UI (about 2 GB of browser memory)"),
            Format::ChromeJson => (256 << 20, "chrome://tracing (about 256 MB of JSON)"),
        }
    }

    /// Average output bytes per event of `kind`, flow arrows included: an
    /// estimate from synthetic jobs (`benches/export.rs` prints the bytes
    /// per event of its whole mix, not per kind).
    fn bytes_per_event(self, kind: EventKind) -> f64 {
        match (self, kind) {
            (Format::ChromeJson, EventKind::Kernel) => 436.0,
            (Format::ChromeJson, EventKind::Api) => 245.0,
            (Format::ChromeJson, EventKind::Collective) => 480.0,
            (Format::ChromeJson, _) => 300.0,
            (Format::Perfetto, EventKind::Kernel) => 132.0,
            (Format::Perfetto, EventKind::Api) => 72.0,
            (Format::Perfetto, EventKind::Collective) => 170.0,
            (Format::Perfetto, _) => 80.0,
        }
    }
}

/// Predicted size of an export, from the chunk index (nothing is decoded).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SizeEstimate {
    /// Events in the window.
    pub events: u64,
    /// Output bytes (uncompressed).
    pub bytes: u64,
    /// What the format's usual viewer loads, bytes.
    pub limit_bytes: u64,
    /// That viewer, in words.
    pub viewer: &'static str,
}

impl SizeEstimate {
    /// Whether the output is likely too big for the viewer.
    pub fn exceeds_viewer_limit(&self) -> bool {
        self.bytes > self.limit_bytes
    }
}

/// Predict the size of exporting `job` with `filter` as `format`.
pub fn estimate(job: &Job<'_>, filter: &Filter, format: Format) -> Result<SizeEstimate> {
    let plan = Plan::new(job, filter)?;
    let counts = plan.estimated_events;
    let mut events = 0.0;
    let mut bytes = 0.0;
    for kind in EventKind::ALL {
        let n = counts.get(kind).min(plan.max_events as f64);
        events += n;
        bytes += n * format.bytes_per_event(kind);
    }
    if format == Format::Perfetto {
        // Interned names: at most every string of every selected table.
        for &i in &plan.inputs {
            let t = job.inputs()[i].trace;
            bytes += (0..t.string_count())
                .map(|s| t.string(StringId(s as u32)).map_or(0, str::len) as f64 + 6.0)
                .sum::<f64>();
        }
    }
    let events = (events.round() as u64).min(plan.max_events);
    let (limit_bytes, viewer) = format.viewer_limit();
    Ok(SizeEstimate {
        events,
        bytes: bytes as u64,
        limit_bytes,
        viewer,
    })
}

fn memory_kind_label(k: MemoryKind) -> &'static str {
    match k {
        MemoryKind::PAGEABLE => "Pageable",
        MemoryKind::PINNED => "Pinned",
        MemoryKind::DEVICE => "Device",
        MemoryKind::ARRAY => "Array",
        MemoryKind::MANAGED => "Managed",
        MemoryKind::DEVICE_STATIC => "Device Static",
        MemoryKind::MANAGED_STATIC => "Managed Static",
        _ => "Unknown",
    }
}

/// Kineto's name of a copy: `Memcpy HtoD (Pinned -> Device)`.
/// Whether a trace was imported from a PyTorch profiler (Kineto) trace: its
/// CPU operators and annotations are markers whose domain is their Kineto
/// category ([`kineto_category`]), and its GPU annotations are Kineto's own.
pub(crate) fn is_kineto_import(h: &Header) -> bool {
    h.producer == Producer::Import && h.extra.get("import.format").map(String::as_str) == Some("kineto")
}

/// The Kineto category a marker of an imported Kineto trace had (its
/// domain), if it is one of the CPU-side or GPU annotation categories the
/// importer keeps; the old schema's `Operator` is written as `cpu_op`.
pub(crate) fn kineto_category(domain: &str) -> Option<&'static str> {
    match domain {
        "cpu_op" | "Operator" => Some("cpu_op"),
        "user_annotation" => Some("user_annotation"),
        "gpu_user_annotation" => Some("gpu_user_annotation"),
        _ => None,
    }
}

/// A process's name in both viewers: `rank R · host · pid P`, leaving out
/// the host and the pid when the trace does not know them (an imported
/// trace may have neither).
pub(crate) fn process_label(rank: Rank, h: &Header) -> String {
    let mut label = format!("rank {rank}");
    if !h.hostname.is_empty() {
        label = format!("{label} · {}", h.hostname);
    }
    if h.pid != 0 {
        label = format!("{label} · pid {}", h.pid);
    }
    label
}

pub(crate) fn memcpy_label(m: &Memcpy) -> String {
    format!(
        "Memcpy {} ({} -> {})",
        m.kind,
        memory_kind_label(m.src_kind),
        memory_kind_label(m.dst_kind)
    )
}

/// Kineto's name of a memset: `Memset (Device)`.
pub(crate) fn memset_label(m: &Memset) -> String {
    format!("Memset ({})", memory_kind_label(m.memory_kind))
}

/// The slice name of a graph launch recorded at graph level.
pub(crate) fn graph_label(g: &GraphLaunch) -> String {
    format!("CUDA graph {}", g.graph_id)
}

/// Kineto's names of synchronizations.
pub(crate) fn sync_label(k: SyncKind) -> &'static str {
    match k {
        SyncKind::EVENT_SYNCHRONIZE => "Event Sync",
        SyncKind::STREAM_WAIT_EVENT => "Stream Wait Event",
        SyncKind::STREAM_SYNCHRONIZE => "Stream Sync",
        SyncKind::CONTEXT_SYNCHRONIZE => "Context Sync",
        _ => "Unknown Sync",
    }
}
