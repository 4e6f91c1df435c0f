//! The gputrace timeline file format and in-memory model.
//!
//! One file per traced process (rank). A file is a preamble and a sequence
//! of self-delimiting, checksummed chunks: a JSON [`Header`], string-table
//! chunks, columnar zstd-compressed event chunks (one event kind on one
//! [`Track`] each) and, if the writer finished cleanly, a JSON [`Trailer`].
//! See `docs/format.md` for the byte layout.
//!
//! ```
//! use gputrace_format::*;
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
//! let bytes = w.finish(Trailer::default())?;
//!
//! let trace = TraceFile::from_bytes("example.gtrace", bytes)?;
//! let events: Vec<Event> = trace.events().collect::<Result<_, _>>()?;
//! assert_eq!(events.len(), 1);
//! assert_eq!(trace.name(name), "gemm_kernel");
//! # Ok::<(), FormatError>(())
//! ```
#![deny(missing_docs)]

pub mod chunk;
mod codec;
mod error;
pub mod flight;
mod header;
pub mod host;
pub mod metric;
mod model;
pub mod outdir;
mod reader;
mod retime;
mod run_record;
pub mod text;
mod units;
pub mod varint;
mod writer;

pub use codec::{Span, SPAN_BLOCK};
pub use error::{FormatError, Result};
pub use header::*;
pub use model::*;
pub use reader::{
    ChunkCursor, ChunkDecoder, ChunkMerge, CounterSeries, Damage, EventChunk, Events, SpanCursor, SpanMerge, SpanRun, TraceFile,
    TrackEvents, TrackSummary,
};
pub use retime::retime;
pub use run_record::*;
pub use units::*;
pub use writer::{TraceWriter, WriterOptions};

/// File name extension of gputrace traces.
pub const FILE_EXTENSION: &str = "gtrace";
