//! Memory-mapped reader.
//!
//! Opening a file scans only chunk frames and the small per-chunk metadata
//! (plus the string table); event bodies are decompressed on demand, one
//! chunk at a time. A damaged or cut-off tail ends the scan: everything
//! before it stays readable and [`TraceFile::damage`] says what was lost.

use crate::chunk::*;
use crate::codec::{self, Span};
use crate::error::{FormatError, Result};
use crate::header::{CaptureWindow, Communicator, Header, Trailer};
use crate::model::{Event, EventKind, Track};
use crate::units::*;
use crate::varint::Cursor;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::path::{Path, PathBuf};

enum Backing {
    Mmap(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => m,
            Backing::Owned(v) => v,
        }
    }
}

/// Where and why reading stopped early.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// Offset of the first unreadable byte.
    pub offset: u64,
    /// Bytes from there to the end of the file that could not be read.
    pub lost_bytes: u64,
    /// What was wrong.
    pub reason: String,
}

/// Index entry for one events chunk.
#[derive(Clone, Copy, Debug)]
pub struct EventChunk {
    /// Event kind.
    pub kind: EventKind,
    /// Track.
    pub track: Track,
    /// Number of events.
    pub count: u32,
    /// Earliest start.
    pub t_min: Nanos,
    /// Latest end.
    pub t_max: Nanos,
    /// File offset of the chunk frame.
    pub offset: u64,
    body_start: usize,
    body_end: usize,
    raw_len: u32,
    compressed: bool,
}

/// Per-track summary from the chunk index (no decoding needed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrackSummary {
    /// The track.
    pub track: Track,
    /// Events per kind on it.
    pub events: BTreeMap<EventKind, u64>,
    /// Earliest start.
    pub t_min: Nanos,
    /// Latest end.
    pub t_max: Nanos,
}

/// An open trace file.
pub struct TraceFile {
    path: PathBuf,
    data: Backing,
    header: Header,
    strings: Vec<Box<str>>,
    chunks: Vec<EventChunk>,
    trailer: Option<Trailer>,
    communicators: Vec<Communicator>,
    capture_windows: Vec<CaptureWindow>,
    damage: Option<Damage>,
    skipped_chunks: u32,
    format_minor: u16,
    host_chunks: Vec<HostChunk>,
}

/// Where a host samples chunk is (decoded on demand by [`TraceFile::host_samples`]).
#[derive(Clone, Debug)]
struct HostChunk {
    offset: usize,
    meta: std::ops::Range<usize>,
    body: std::ops::Range<usize>,
    raw_len: u32,
    compressed: bool,
}

impl std::fmt::Debug for TraceFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceFile")
            .field("path", &self.path)
            .field("chunks", &self.chunks.len())
            .finish()
    }
}

impl TraceFile {
    /// Open and index a file (memory-mapped; the file is not loaded).
    pub fn open(path: impl AsRef<Path>) -> Result<TraceFile> {
        let path = path.as_ref().to_path_buf();
        let io = |source| FormatError::Io {
            path: path.clone(),
            source,
        };
        let file = std::fs::File::open(&path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if meta.is_dir() {
            return Err(io(std::io::Error::other("is a directory, not a trace file")));
        }
        let data = if meta.len() == 0 {
            Backing::Owned(Vec::new())
        } else {
            // Safety: the map is read-only and private to this process, and
            // covers the length the file had when opened. The agent writes
            // its trace under the final name and only ever appends, so a file
            // still being written stays readable up to that length (a torn
            // last chunk is reported as damage). Only a file truncated by
            // another process while mapped could make reads fault; nothing
            // in gputrace truncates a trace.
            Backing::Mmap(unsafe { memmap2::Mmap::map(&file) }.map_err(io)?)
        };
        Self::index(path, data)
    }

    /// Index a trace held in memory; `name` is used in error messages.
    pub fn from_bytes(name: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<TraceFile> {
        Self::index(name.into(), Backing::Owned(bytes))
    }

    fn index(path: PathBuf, data: Backing) -> Result<TraceFile> {
        let bytes = data.bytes();
        let corrupt = |offset: usize, what: &str| FormatError::Corrupt {
            path: path.clone(),
            offset: offset as u64,
            what: what.to_string(),
        };
        let minor = match check_preamble(bytes) {
            Ok(minor) => minor,
            Err(Preamble::Empty) => {
                return Err(FormatError::NotATrace {
                    path,
                    found: "nothing (the file is empty)".into(),
                })
            }
            Err(Preamble::NotATrace(head)) => {
                return Err(FormatError::NotATrace {
                    path,
                    found: format!("\"{}\"", head.escape_ascii()),
                })
            }
            Err(Preamble::Corrupt(offset, what)) => return Err(corrupt(offset, what)),
            Err(Preamble::Version(major, minor)) => {
                return Err(FormatError::UnsupportedVersion {
                    path,
                    major,
                    minor,
                    supported: FORMAT_MAJOR,
                })
            }
        };

        let mut index = ChunkIndex::new();
        let mut pos = PREAMBLE_LEN;
        while pos < bytes.len() {
            let stop = |reason: &str| Damage {
                offset: pos as u64,
                lost_bytes: (bytes.len() - pos) as u64,
                reason: reason.to_string(),
            };
            let chunk = match FramedChunk::at(bytes, pos) {
                Ok(c) => c,
                Err(reason) => {
                    index.damage = Some(stop(&reason.to_string()));
                    break;
                }
            };
            match index.add(bytes, pos, &chunk) {
                Ok(()) => {}
                Err(ChunkStop::Damage(reason)) => {
                    index.damage = Some(stop(&reason));
                    break;
                }
                Err(ChunkStop::Fatal(what)) => return Err(corrupt(pos, &what)),
            }
            pos = chunk.end;
        }
        let ChunkIndex {
            header,
            strings,
            chunks,
            trailer,
            communicators,
            capture_windows,
            damage,
            skipped,
            host_chunks,
            scratch: _,
        } = index;
        let Some(header) = header else {
            return Err(corrupt(
                PREAMBLE_LEN,
                damage.as_ref().map_or("no header chunk", |d| d.reason.as_str()),
            ));
        };
        let capture_windows = resolve_windows(capture_windows, &chunks);
        Ok(TraceFile {
            path,
            data,
            header,
            strings,
            chunks,
            trailer,
            communicators,
            capture_windows,
            damage,
            skipped_chunks: skipped,
            format_minor: minor,
            host_chunks,
        })
    }

    /// The NCCL communicators the trace names (first record of each id, in
    /// file order).
    pub fn communicators(&self) -> &[Communicator] {
        &self.communicators
    }

    /// The capture windows of a duty-cycled capture (format 1.3), sorted by
    /// start, empty windows dropped and overlapping ones merged. Empty: the
    /// trace was captured the whole time.
    pub fn capture_windows(&self) -> &[CaptureWindow] {
        &self.capture_windows
    }

    /// The file's path (or the name given to [`Self::from_bytes`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The trailer; `None` if the writer did not finish (killed process,
    /// full disk): the file is readable up to its last whole chunk.
    pub fn trailer(&self) -> Option<&Trailer> {
        self.trailer.as_ref()
    }

    /// Damage at the end of the file, if reading stopped early.
    pub fn damage(&self) -> Option<&Damage> {
        self.damage.as_ref()
    }

    /// Chunks of kinds this build does not know, skipped.
    pub fn skipped_chunks(&self) -> u32 {
        self.skipped_chunks
    }

    /// Format version `(major, minor)` of the file.
    pub fn format_version(&self) -> (u16, u16) {
        (FORMAT_MAJOR, self.format_minor)
    }

    /// File size in bytes.
    pub fn len_bytes(&self) -> u64 {
        self.data.bytes().len() as u64
    }

    /// The events-chunk index.
    pub fn chunks(&self) -> &[EventChunk] {
        &self.chunks
    }

    /// A string by id, if the table has it.
    pub fn string(&self, id: StringId) -> Option<&str> {
        self.strings.get(id.0 as usize).map(|s| &**s)
    }

    /// A string by id, or a visible placeholder for an id the table lacks.
    pub fn name(&self, id: StringId) -> std::borrow::Cow<'_, str> {
        match self.string(id) {
            Some(s) => s.into(),
            None => format!("<unknown string #{}>", id.0).into(),
        }
    }

    /// Number of strings in the table.
    pub fn string_count(&self) -> usize {
        self.strings.len()
    }

    /// Whether the trace has host samples (format 1.4).
    pub fn has_host_samples(&self) -> bool {
        !self.host_chunks.is_empty()
    }

    /// The host samples of every host samples chunk, merged (`None`: the
    /// trace has none). A damaged chunk is an error naming its offset.
    pub fn host_samples(&self) -> Result<Option<crate::host::HostSamples>> {
        let mut all: Option<crate::host::HostSamples> = None;
        for h in &self.host_chunks {
            let bytes = self.data.bytes();
            let corrupt = |what: String| FormatError::Corrupt {
                path: self.path.clone(),
                offset: h.offset as u64,
                what,
            };
            let body = &bytes[h.body.clone()];
            let raw;
            let body = if h.compressed {
                raw = zstd::bulk::decompress(body, h.raw_len as usize).map_err(|e| corrupt(format!("host samples: zstd: {e}")))?;
                &raw[..]
            } else {
                body
            };
            let one = crate::host::decode_chunk(&bytes[h.meta.clone()], body, self.strings.len()).map_err(|e| corrupt(e.to_string()))?;
            match &mut all {
                Some(a) => a.merge(one),
                None => all = Some(one),
            }
        }
        Ok(all)
    }

    /// Event counts per kind, from the index.
    pub fn event_counts(&self) -> BTreeMap<EventKind, u64> {
        let mut m = BTreeMap::new();
        for c in &self.chunks {
            *m.entry(c.kind).or_insert(0) += c.count as u64;
        }
        m
    }

    /// Total events, from the index.
    pub fn event_total(&self) -> u64 {
        self.chunks.iter().map(|c| c.count as u64).sum()
    }

    /// Earliest start and latest end over all events, from the index.
    pub fn time_span(&self) -> Option<(Nanos, Nanos)> {
        let lo = self.chunks.iter().map(|c| c.t_min).min()?;
        let hi = self.chunks.iter().map(|c| c.t_max).max()?;
        Some((lo, hi))
    }

    /// Per-track summaries, sorted by track.
    pub fn tracks(&self) -> Vec<TrackSummary> {
        let mut m: BTreeMap<Track, TrackSummary> = BTreeMap::new();
        for c in &self.chunks {
            let s = m.entry(c.track).or_insert_with(|| TrackSummary {
                track: c.track,
                events: BTreeMap::new(),
                t_min: c.t_min,
                t_max: c.t_max,
            });
            *s.events.entry(c.kind).or_insert(0) += c.count as u64;
            s.t_min = s.t_min.min(c.t_min);
            s.t_max = s.t_max.max(c.t_max);
        }
        m.into_values().collect()
    }

    /// A decoder for this file's chunks (reuses its buffers across chunks).
    pub fn decoder(&self) -> ChunkDecoder<'_> {
        ChunkDecoder {
            file: self,
            raw: Vec::new(),
            zstd: None,
            codec: codec::Decoder::default(),
            spare: Vec::new(),
        }
    }

    /// Every event, chunk by chunk in file order (not globally time-sorted;
    /// each chunk is sorted by start). Stops after the first error.
    pub fn events(&self) -> Events<'_> {
        Events {
            dec: self.decoder(),
            order: (0..self.chunks.len()).collect(),
            next: 0,
            buf: Vec::new(),
            pos: 0,
            failed: false,
        }
    }

    /// Events of the given kinds only, in file order.
    pub fn events_of(&self, kinds: &[EventKind]) -> Events<'_> {
        let order = (0..self.chunks.len()).filter(|&i| kinds.contains(&self.chunks[i].kind)).collect();
        Events {
            dec: self.decoder(),
            order,
            next: 0,
            buf: Vec::new(),
            pos: 0,
            failed: false,
        }
    }

    /// Every counter series of the trace (see [`crate::Counter`]): one per
    /// (device, metric), ordered by device then name, each series' samples
    /// in time order. Decodes only the counter chunks.
    pub fn counter_series(&self) -> Result<Vec<CounterSeries>> {
        let mut by: BTreeMap<(DeviceId, StringId), Vec<(Nanos, u64)>> = BTreeMap::new();
        for e in self.events_of(&[EventKind::Counter]) {
            if let Event::Counter(c) = e? {
                by.entry((c.device, c.metric)).or_default().push((c.time, c.value));
            }
        }
        let mut out: Vec<CounterSeries> = by
            .into_iter()
            .map(|((device, metric), mut samples)| {
                samples.sort_by_key(|s| s.0);
                CounterSeries {
                    device,
                    metric: self.name(metric).into_owned(),
                    samples,
                }
            })
            .collect();
        out.sort_by(|a, b| (a.device, &a.metric).cmp(&(b.device, &b.metric)));
        Ok(out)
    }

    /// Events of one track (all kinds), in start order. Memory holds only
    /// the chunks whose time ranges overlap the current position.
    pub fn track_events(&self, track: Track) -> TrackEvents<'_> {
        let ids = (0..self.chunks.len()).filter(|&i| self.chunks[i].track == track).collect();
        TrackEvents {
            merge: self.merge(ids),
            failed: false,
        }
    }

    /// The events of the chunks `ids`, merged into one stream in start
    /// order (see [`ChunkMerge`]).
    pub fn merge(&self, ids: Vec<usize>) -> ChunkMerge<'_> {
        ChunkMerge::new(self, ids)
    }
}

impl TraceFile {
    /// Call `f(span, prepared, templates)` for every span of chunks `ids`
    /// (kernel, copy, memset, synchronization, API and marker chunks) in
    /// the order of [`Self::merge`]: by start, on equal starts the longer
    /// first, then by chunk. `templates` is the span's chunk's dictionary
    /// (`templates[span.attr]` is its entry unless indexes were skipped)
    /// and `prepared` what `prepare` made of the chunk's cursor when it was
    /// opened, before its first span was read: per-entry work such as
    /// classifying a kernel name is done once per chunk, and `prepare` may
    /// [`SpanCursor::skip`] columns it does not need (a skipped end counts
    /// as the start in the order). `prepare` must not call
    /// [`SpanCursor::fill`]: the spans it took would be missing.
    ///
    /// [`SpanMerge`] with a closure per span; memory is bounded the same
    /// way. Stops at the first decoding error.
    pub fn for_each_span_merged<P>(
        &self,
        ids: Vec<usize>,
        mut prepare: impl FnMut(&mut SpanCursor) -> P,
        mut f: impl FnMut(&Span, &P, &[Event]),
    ) -> Result<()> {
        // What `prepare` made of each slot's chunk.
        let mut prepared: Vec<Option<P>> = Vec::new();
        let mut merge = self.span_merge(ids);
        while let Some(run) = merge.next_run(|slot, cursor| {
            if prepared.len() <= slot {
                prepared.resize_with(slot + 1, || None);
            }
            prepared[slot] = Some(prepare(cursor));
        })? {
            let Some(p) = prepared.get(run.slot).and_then(Option::as_ref) else {
                continue;
            };
            let templates = run.cursor.templates();
            for sp in run.spans {
                f(sp, p, templates);
            }
        }
        Ok(())
    }

    /// The spans of chunks `ids` merged in start order, a run at a time
    /// (see [`SpanMerge`]).
    pub fn span_merge(&self, ids: Vec<usize>) -> SpanMerge<'_> {
        SpanMerge::new(self, ids)
    }
}

/// One chunk being read by a [`SpanMerge`]: its cursor, the block of spans
/// decoded last and the next one's place in it.
///
/// Invariant: `at <= block.len()`, and `block` is empty only when the
/// chunk is done.
struct SpanSlot {
    cursor: SpanCursor,
    block: Vec<Span>,
    at: usize,
}

/// The spans of a set of chunks (kernel, copy, memset, synchronization,
/// API and marker chunks) in the order of [`TraceFile::merge`]: by start,
/// on equal starts the longer first, then by slot. They come as runs: the
/// longest stretch of one chunk's block that goes before every other
/// chunk's next span, so that a consumer loops over a slice and does its
/// per-chunk work (looking up what it made of the chunk's dictionary) once
/// per run; runs of one stream are usually tens of spans long.
///
/// Memory: as [`ChunkMerge`], only the chunks whose time range has begun
/// and not yet been consumed are open, each with one block of
/// [`codec::SPAN_BLOCK`] spans.
pub struct SpanMerge<'a> {
    dec: ChunkDecoder<'a>,
    chunks: &'a [EventChunk],
    /// Chunks not opened yet, latest first (pop() takes the earliest).
    pending: Vec<usize>,
    /// Open chunks (`None`: a finished slot, listed in `free`).
    active: Vec<Option<SpanSlot>>,
    free: Vec<usize>,
    /// Blocks of finished slots, for the next ones.
    spare_blocks: Vec<Vec<Span>>,
    /// Open slots other than `current`, by their next span.
    heap: BinaryHeap<Reverse<MergeKey>>,
    /// The slot of the run handed out last (not in the heap).
    current: Option<usize>,
}

/// A run of spans of one chunk, next in merge order. See [`SpanMerge`].
pub struct SpanRun<'m> {
    /// The chunk's slot: the same for every run of the chunk, reused by a
    /// later chunk once this one is done (the `open` callback of
    /// [`SpanMerge::next_run`] says when).
    pub slot: usize,
    /// The spans, in order.
    pub spans: &'m [Span],
    /// The chunk's cursor: its dictionary ([`SpanCursor::templates`]),
    /// chunk and index.
    pub cursor: &'m SpanCursor,
}

fn span_key(s: &Span, slot: usize) -> MergeKey {
    (s.start, Reverse(s.end), slot)
}

impl<'a> SpanMerge<'a> {
    fn new(file: &'a TraceFile, mut ids: Vec<usize>) -> SpanMerge<'a> {
        let chunks = &file.chunks;
        ids.sort_by_key(|&i| Reverse((chunks.get(i).map(|c| c.t_min), i)));
        SpanMerge {
            dec: file.decoder(),
            chunks,
            pending: ids,
            active: Vec::new(),
            free: Vec::new(),
            spare_blocks: Vec::new(),
            heap: BinaryHeap::new(),
            current: None,
        }
    }

    /// The next run, or `None` when every chunk is done. A chunk opened on
    /// the way is first given to `open(slot, cursor)`, before its first
    /// span is read: the place to [`SpanCursor::skip`] columns, ask for
    /// node ids, or work out what the caller needs of its dictionary.
    pub fn next_run(&mut self, mut open: impl FnMut(usize, &mut SpanCursor)) -> Result<Option<SpanRun<'_>>> {
        // The last run's chunk goes back in the heap by its next span.
        if let Some(slot) = self.current.take() {
            if let Some(s) = self.active[slot].as_mut() {
                if s.at == s.block.len() {
                    s.cursor.fill(&mut s.block)?;
                    s.at = 0;
                }
                match s.block.get(s.at) {
                    Some(sp) => self.heap.push(Reverse(span_key(sp, slot))),
                    None => self.finish(slot),
                }
            }
        }
        // A pending chunk must be opened before any span that starts after its first.
        while let Some(&idx) = self.pending.last() {
            let t = self.chunks.get(idx).map_or(0, |c| c.t_min.0);
            if matches!(self.heap.peek(), Some(Reverse((next, _, _))) if *next < t) {
                break;
            }
            self.pending.pop();
            let mut cursor = self.dec.spans(idx)?;
            let slot = match self.free.pop() {
                Some(slot) => slot,
                None => {
                    self.active.push(None);
                    self.active.len() - 1
                }
            };
            open(slot, &mut cursor);
            let mut block = self.spare_blocks.pop().unwrap_or_else(|| Vec::with_capacity(codec::SPAN_BLOCK));
            cursor.fill(&mut block)?;
            let first = block.first().map(|sp| span_key(sp, slot));
            self.active[slot] = Some(SpanSlot { cursor, block, at: 0 });
            match first {
                Some(key) => self.heap.push(Reverse(key)),
                None => self.finish(slot),
            }
        }
        let Some(Reverse((_, _, slot))) = self.heap.pop() else {
            return Ok(None);
        };
        // The popped span goes first; those after it in its block go on
        // while they come before the heap's first and start before the
        // earliest pending chunk (neither changes meanwhile).
        let top = self.heap.peek().map_or((u64::MAX, Reverse(0), usize::MAX), |Reverse(k)| *k);
        let pending_start = self
            .pending
            .last()
            .and_then(|&i| self.chunks.get(i))
            .map_or(u64::MAX, |c| c.t_min.0);
        let bound = top.0.min(pending_start);
        let Some(s) = self.active[slot].as_mut() else {
            return Ok(None);
        };
        let from = s.at;
        let mut to = from + 1;
        while let Some(sp) = s.block.get(to) {
            // Usually settled by the start alone; an equal start compares the rest.
            if sp.start < bound || (sp.start == top.0 && sp.start < pending_start && span_key(sp, slot) < top) {
                to += 1;
            } else {
                break;
            }
        }
        s.at = to;
        self.current = Some(slot);
        Ok(Some(SpanRun {
            slot,
            spans: &s.block[from..to],
            cursor: &s.cursor,
        }))
    }

    /// Close slot `slot`, whose chunk is done, keeping its buffers.
    fn finish(&mut self, slot: usize) {
        if let Some(done) = self.active[slot].take() {
            self.dec.recycle_spans(done.cursor);
            self.spare_blocks.push(done.block);
        }
        self.free.push(slot);
    }
}

thread_local! {
    /// Decompression contexts of dropped decoders, for this thread's next
    /// ones: making a context (its tables) was 2% of the export benchmark,
    /// whose walk makes a decoder per merge (per GPU, per thread track). At
    /// most [`SPARE_ZSTD_MAX`] are kept. A context holds no state between frames
    /// that a later frame depends on (each body is a whole frame), so any
    /// file's decoder can reuse it.
    static SPARE_ZSTD: std::cell::RefCell<Vec<zstd::bulk::Decompressor<'static>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Spare decompression contexts kept per thread.
const SPARE_ZSTD_MAX: usize = 4;

impl Drop for ChunkDecoder<'_> {
    fn drop(&mut self) {
        if let Some(d) = self.zstd.take() {
            // `try_with`: a decoder dropped while the thread's locals are
            // being destroyed just frees its context.
            let _ = SPARE_ZSTD.try_with(|s| {
                if let Ok(mut s) = s.try_borrow_mut() {
                    if s.len() < SPARE_ZSTD_MAX {
                        s.push(d);
                    }
                }
            });
        }
    }
}

/// Decodes chunk bodies of one file.
pub struct ChunkDecoder<'a> {
    file: &'a TraceFile,
    raw: Vec<u8>,
    zstd: Option<zstd::bulk::Decompressor<'static>>,
    codec: codec::Decoder,
    /// Buffers of finished cursors, for the next ones (at most 16 kept).
    spare: Vec<(Vec<u8>, Vec<Event>)>,
}

impl<'a> ChunkDecoder<'a> {
    /// Append the events of chunk `index` to `out`.
    pub fn decode_into(&mut self, index: usize, out: &mut Vec<Event>) -> Result<()> {
        out.reserve(self.file.chunks.get(index).map_or(0, |c| c.count as usize));
        self.for_each(index, |e| out.push(*e))
    }

    /// Call `f` for each event of chunk `index`, in start order, without
    /// materializing the chunk (the fastest way to scan a file). Faults in
    /// the chunk's layout are found before the first event, faults in one
    /// event (an attribute index out of range) at that event, and a varint
    /// longer than 10 bytes only at the chunk's end, after `f` has seen its
    /// events.
    pub fn for_each(&mut self, index: usize, f: impl FnMut(&Event)) -> Result<()> {
        let file = self.file;
        let c = file.chunks.get(index).ok_or_else(|| no_chunk(file, index))?;
        let mut raw = std::mem::take(&mut self.raw);
        let body = self.body(c, &mut raw);
        let r = body.and_then(|body| {
            self.codec
                .decode_with(c.kind, &c.track, c.count as usize, c.t_min.0, body, f)
                .map_err(|e| chunk_error(file, c, e))
        });
        self.raw = raw;
        r
    }

    /// The body of chunk `c`: decompressed into `raw`, or the file's bytes.
    fn body<'r>(&mut self, c: &EventChunk, raw: &'r mut Vec<u8>) -> Result<&'r [u8]>
    where
        'a: 'r,
    {
        let file = self.file;
        let corrupt = |what: String| FormatError::Corrupt {
            path: file.path.clone(),
            offset: c.offset,
            what,
        };
        let body = &file.data.bytes()[c.body_start..c.body_end];
        if !c.compressed {
            return Ok(body);
        }
        if self.zstd.is_none() {
            self.zstd = Some(match SPARE_ZSTD.with(|s| s.borrow_mut().pop()) {
                Some(d) => d,
                None => zstd::bulk::Decompressor::new().map_err(|e| corrupt(format!("zstd: {e}")))?,
            });
        }
        let d = self.zstd.as_mut().expect("set above");
        raw.clear();
        raw.reserve(c.raw_len as usize);
        let n = d.decompress_to_buffer(body, raw).map_err(|e| corrupt(format!("zstd: {e}")))?;
        if n != c.raw_len as usize {
            return Err(corrupt("chunk body length differs from its frame".into()));
        }
        Ok(raw)
    }

    /// Chunk `index`, its body in a buffer of its own (decompressed, or
    /// copied), and template storage to reuse: what a cursor holds.
    fn owned_body(&mut self, index: usize) -> Result<(&'a EventChunk, Vec<u8>, Vec<Event>)> {
        let file = self.file;
        let c = file.chunks.get(index).ok_or_else(|| no_chunk(file, index))?;
        let (mut raw, templates) = self.spare.pop().unwrap_or_default();
        if !c.compressed {
            raw.clear();
            raw.extend_from_slice(&file.data.bytes()[c.body_start..c.body_end]);
        } else {
            self.body(c, &mut raw)?;
        }
        Ok((c, raw, templates))
    }

    /// A cursor over chunk `index`, on its first event: the chunk is read
    /// one event at a time, holding only its decompressed body (a varint per
    /// column per event) rather than every event (112 bytes each). Give it
    /// back with [`Self::recycle`] to reuse its buffers. Faults are found
    /// as in [`Self::for_each`].
    pub fn cursor(&mut self, index: usize) -> Result<ChunkCursor> {
        let (c, raw, templates) = self.owned_body(index)?;
        let file = self.file;
        // Safety: the rows borrow `raw`'s heap buffer, which moves into the
        // cursor with them (moving a Vec does not move its buffer), outlives
        // them there and is never changed (see `ChunkCursor`).
        let body: &'static [u8] = unsafe { &*(raw.as_slice() as *const [u8]) };
        let rows =
            codec::Rows::open(c.kind, &c.track, c.count as usize, c.t_min.0, body, templates).map_err(|e| chunk_error(file, c, e))?;
        let mut cursor = ChunkCursor {
            rows,
            raw,
            path: file.path.clone(),
            index,
            chunk: *c,
            done: false,
        };
        if !cursor.advance()? {
            return Err(chunk_error(file, c, "events chunk with no events"));
        }
        Ok(cursor)
    }

    /// A span cursor over chunk `index` (a kernel, copy, memset,
    /// synchronization, API or marker chunk): its events' start, end,
    /// correlation id and attribute index, decoded a block at a time, and
    /// its attribute dictionary as event templates. For consumers that need
    /// only those (and work out per dictionary entry what they need of the
    /// rest) this is cheaper than [`Self::cursor`], which fills in a
    /// 112-byte event per event: the report's device sweep over a million
    /// kernels went from 62 to 52 ms with it (`BENCHMARKS.md`). Give it back
    /// with [`Self::recycle_spans`]. Faults in the chunk's layout are found
    /// here, faults in events by [`SpanCursor::fill`].
    pub fn spans(&mut self, index: usize) -> Result<SpanCursor> {
        let (c, raw, mut templates) = self.owned_body(index)?;
        let file = self.file;
        // Safety: as in `cursor`: the rows borrow `raw`'s heap buffer, which
        // moves into the cursor with them and outlives them there unchanged.
        let body: &'static [u8] = unsafe { &*(raw.as_slice() as *const [u8]) };
        let rows = codec::SpanRows::open(c.kind, &c.track, c.count as usize, c.t_min.0, body, &mut templates)
            .map_err(|e| chunk_error(file, c, e))?;
        Ok(SpanCursor {
            rows,
            templates,
            raw,
            path: file.path.clone(),
            index,
            chunk: *c,
        })
    }

    /// Keep a finished span cursor's buffers for the next cursor.
    pub fn recycle_spans(&mut self, c: SpanCursor) {
        let SpanCursor { raw, templates, .. } = c;
        self.keep_spare(raw, templates);
    }

    /// Keep a finished cursor's body buffer and template storage (a few at most).
    fn keep_spare(&mut self, raw: Vec<u8>, templates: Vec<Event>) {
        if self.spare.len() < 16 {
            self.spare.push((raw, templates));
        }
    }

    /// Keep a finished cursor's buffers for the next [`Self::cursor`].
    pub fn recycle(&mut self, c: ChunkCursor) {
        let ChunkCursor { rows, raw, .. } = c;
        self.keep_spare(raw, rows.into_templates());
    }
}

fn no_chunk(file: &TraceFile, index: usize) -> FormatError {
    FormatError::Corrupt {
        path: file.path.clone(),
        offset: 0,
        what: format!("no chunk #{index}"),
    }
}

fn chunk_error(file: &TraceFile, c: &EventChunk, e: &str) -> FormatError {
    chunk_error_at(&file.path, c, e)
}

/// A corrupt events chunk `c` of the file at `path`: where, and what.
#[cold]
fn chunk_error_at(path: &Path, c: &EventChunk, e: &str) -> FormatError {
    FormatError::Corrupt {
        path: path.to_path_buf(),
        offset: c.offset,
        what: format!("{} chunk on {}: {e}", c.kind.name(), c.track),
    }
}

/// One events chunk, read one event at a time in start order. See
/// [`ChunkDecoder::cursor`].
///
/// Invariant: `rows` reads `raw`, whose heap buffer is never changed or
/// freed while `rows` exists (`raw` is private, only read, and dropped after
/// `rows`: fields drop in declaration order).
pub struct ChunkCursor {
    rows: codec::Rows<'static>,
    raw: Vec<u8>,
    path: PathBuf,
    index: usize,
    chunk: EventChunk,
    /// `advance` went past the last event.
    done: bool,
}

impl ChunkCursor {
    /// The current event.
    #[inline]
    pub fn event(&self) -> &Event {
        // Set by every successful `advance`, and the cursor starts on one.
        self.rows.current().expect("a cursor is always on an event")
    }

    /// The current event's start and end (`event().start()`, `.end()`),
    /// kept by the decoder.
    #[inline]
    fn times(&self) -> (u64, u64) {
        self.rows.times()
    }

    /// Move to the next event; false when the chunk is done (the last
    /// event stays current).
    #[inline]
    pub fn advance(&mut self) -> Result<bool> {
        match self.rows.advance() {
            Ok(more) => {
                self.done = !more;
                Ok(more)
            }
            Err(e) => Err(chunk_error_at(&self.path, &self.chunk, e)),
        }
    }

    /// Whether `advance` went past the last event.
    #[inline]
    pub fn done(&self) -> bool {
        self.done
    }

    /// The chunk's index in [`TraceFile::chunks`].
    pub fn index(&self) -> usize {
        self.index
    }
}

/// One events chunk read as [`Span`]s, a block at a time. See
/// [`ChunkDecoder::spans`].
///
/// Invariant: `rows` reads `raw`, whose heap buffer is never changed or
/// freed while `rows` exists (as in [`ChunkCursor`]).
pub struct SpanCursor {
    rows: codec::SpanRows<'static>,
    templates: Vec<Event>,
    raw: Vec<u8>,
    path: PathBuf,
    index: usize,
    chunk: EventChunk,
}

impl SpanCursor {
    /// The chunk's attribute dictionary: the event of a span is
    /// `templates()[span.attr]` with the span's start, end and correlation
    /// (the templates' own per-event fields are not meaningful).
    pub fn templates(&self) -> &[Event] {
        &self.templates
    }

    /// The next block of up to [`codec::SPAN_BLOCK`] spans in start order, in
    /// `out` (cleared first); `out` stays empty once the chunk is done.
    #[inline]
    pub fn fill(&mut self, out: &mut Vec<Span>) -> Result<()> {
        self.rows.fill(out).map_err(|e| chunk_error_at(&self.path, &self.chunk, e))
    }

    /// Events not read yet.
    pub fn left(&self) -> usize {
        self.rows.left()
    }

    /// Stop reading the ends (`end`) and the dictionary indexes (`attr`)
    /// of the events not read yet: their spans then have `end == start` and
    /// `attr == 0` (not an index to use). A consumer that needs neither
    /// (say, only starts and correlation ids) reads two varints per event
    /// instead of four.
    pub fn skip(&mut self, end: bool, attr: bool) {
        self.rows.skip(end, attr);
    }

    /// Read a kernel chunk's graph node ids too ([`Span::node`]); call it
    /// before the first [`Self::fill`] (afterwards it does nothing).
    pub fn read_node_ids(&mut self) {
        self.rows.read_nodes();
    }

    /// The chunk.
    pub fn chunk(&self) -> &EventChunk {
        &self.chunk
    }

    /// The chunk's index in [`TraceFile::chunks`].
    pub fn index(&self) -> usize {
        self.index
    }
}

/// Iterator over events in file order. See [`TraceFile::events`].
pub struct Events<'a> {
    dec: ChunkDecoder<'a>,
    order: Vec<usize>,
    next: usize,
    buf: Vec<Event>,
    pos: usize,
    failed: bool,
}

impl Iterator for Events<'_> {
    type Item = Result<Event>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.failed {
                return None;
            }
            if let Some(e) = self.buf.get(self.pos) {
                self.pos += 1;
                return Some(Ok(*e));
            }
            let idx = *self.order.get(self.next)?;
            self.next += 1;
            self.buf.clear();
            self.pos = 0;
            if let Err(e) = self.dec.decode_into(idx, &mut self.buf) {
                self.failed = true;
                return Some(Err(e));
            }
        }
    }
}

/// Iterator over one track's events in start order. See
/// [`TraceFile::track_events`].
pub struct TrackEvents<'a> {
    merge: ChunkMerge<'a>,
    failed: bool,
}

impl Iterator for TrackEvents<'_> {
    type Item = Result<Event>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.merge.next_event() {
            Ok(e) => e.map(|e| Ok(*e)),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Merge order (of [`ChunkMerge`] and [`SpanMerge`]): start, then the
/// longer event first (so that an enclosing slice comes before what it
/// encloses), then the slot.
type MergeKey = (u64, Reverse<u64>, usize);

/// Events of a set of chunks in start order (on equal starts the longer
/// first). Only the chunks whose time range has begun and not yet been
/// consumed are open, each through a [`ChunkCursor`], so memory is bounded
/// by the chunks that overlap in time (about one per track and kind), never
/// by the number of events. The chunk that gave the last event is read on
/// without the heap while its next event still comes first, which is the
/// usual case (long runs of one stream).
pub struct ChunkMerge<'a> {
    dec: ChunkDecoder<'a>,
    chunks: &'a [EventChunk],
    /// Chunks not opened yet, latest first (pop() takes the earliest).
    pending: Vec<usize>,
    /// Open cursors (`None`: a finished slot, listed in `free`).
    active: Vec<Option<ChunkCursor>>,
    free: Vec<usize>,
    /// Open slots other than `solo`, by their current event.
    heap: BinaryHeap<Reverse<MergeKey>>,
    /// The slot whose current event was handed out last (not in the heap).
    solo: Option<Solo>,
}

impl<'a> ChunkMerge<'a> {
    fn new(file: &'a TraceFile, mut ids: Vec<usize>) -> ChunkMerge<'a> {
        ids.sort_by_key(|&i| Reverse((file.chunks[i].t_min, i)));
        ChunkMerge {
            dec: file.decoder(),
            chunks: &file.chunks,
            pending: ids,
            active: Vec::new(),
            free: Vec::new(),
            heap: BinaryHeap::new(),
            solo: None,
        }
    }

    fn key(c: &ChunkCursor, slot: usize) -> MergeKey {
        let (start, end) = c.times();
        (start, Reverse(end), slot)
    }

    /// The next event, or `None` when every chunk is done.
    #[inline]
    pub fn next_event(&mut self) -> Result<Option<&Event>> {
        Ok(self.next_cursor()?.map(ChunkCursor::event))
    }

    /// The cursor of the next event, on it.
    #[inline(always)]
    fn next_cursor(&mut self) -> Result<Option<&ChunkCursor>> {
        // Fast path: the last event's chunk goes on while its next event
        // still comes before the heap's first and every pending chunk.
        if let Some(solo) = self.solo {
            if let Some(cursor) = self.active[solo.slot].as_mut() {
                if cursor.advance()? && solo.goes_on(cursor) {
                    return Ok(self.active[solo.slot].as_ref());
                }
            }
        }
        self.next_slow()
    }

    /// `next_cursor` when the heap or a pending chunk may come first.
    #[inline(never)]
    fn next_slow(&mut self) -> Result<Option<&ChunkCursor>> {
        if let Some(Solo { slot, .. }) = self.solo.take() {
            // Its cursor was advanced by `next_event`: still on an event, or done.
            match self.active[slot].as_ref() {
                Some(cursor) if !cursor.done() => self.heap.push(Reverse(Self::key(cursor, slot))),
                _ => {
                    if let Some(done) = self.active[slot].take() {
                        self.dec.recycle(done);
                    }
                    self.free.push(slot);
                }
            }
        }
        // Open every pending chunk that could hold the next event.
        while let Some(&idx) = self.pending.last() {
            if matches!(self.heap.peek(), Some(Reverse((next, _, _))) if *next < self.chunks[idx].t_min.0) {
                break;
            }
            self.pending.pop();
            let cursor = self.dec.cursor(idx)?;
            let slot = match self.free.pop() {
                Some(slot) => slot,
                None => {
                    self.active.push(None);
                    self.active.len() - 1
                }
            };
            self.heap.push(Reverse(Self::key(&cursor, slot)));
            self.active[slot] = Some(cursor);
        }
        let Some(Reverse((_, _, slot))) = self.heap.pop() else {
            return Ok(None);
        };
        self.solo = Some(Solo {
            slot,
            top: self.heap.peek().map_or((u64::MAX, Reverse(0), usize::MAX), |Reverse(k)| *k),
            pending: self.pending.last().map_or(u64::MAX, |&i| self.chunks[i].t_min.0),
        });
        Ok(self.active[slot].as_ref())
    }
}

/// The slot whose current event was handed out last, and what it must come
/// before to go on without the heap: the heap's first key and the earliest
/// pending chunk's start (neither changes while it goes on).
#[derive(Clone, Copy)]
struct Solo {
    slot: usize,
    top: MergeKey,
    pending: u64,
}

impl Solo {
    /// Whether the cursor's event, the slot's next, still comes first.
    #[inline(always)]
    fn goes_on(&self, c: &ChunkCursor) -> bool {
        c.times().0 < self.pending && ChunkMerge::key(c, self.slot) < self.top
    }
}

/// Why a file's first bytes are not a readable trace's preamble.
enum Preamble<'a> {
    Empty,
    /// The first bytes (at most 8), not the magic.
    NotATrace(&'a [u8]),
    /// Offset and what is wrong.
    Corrupt(usize, &'static str),
    /// Major and minor version of a format this build does not read.
    Version(u16, u16),
}

/// The format's minor version, if `bytes` start with a preamble this build reads.
fn check_preamble(bytes: &[u8]) -> std::result::Result<u16, Preamble<'_>> {
    if bytes.len() < 8 || &bytes[..8] != MAGIC {
        let head = &bytes[..bytes.len().min(8)];
        if bytes.is_empty() {
            return Err(Preamble::Empty);
        }
        if MAGIC.starts_with(head) {
            return Err(Preamble::Corrupt(
                0,
                "file ends inside the preamble (truncated right after it was created?)",
            ));
        }
        return Err(Preamble::NotATrace(head));
    }
    if bytes.len() < PREAMBLE_LEN {
        return Err(Preamble::Corrupt(8, "file ends inside the preamble"));
    }
    let major = u16::from_le_bytes([bytes[8], bytes[9]]);
    let minor = u16::from_le_bytes([bytes[10], bytes[11]]);
    if major != FORMAT_MAJOR {
        return Err(Preamble::Version(major, minor));
    }
    Ok(minor)
}

/// One chunk's frame, checked against its payload, and where its parts are.
struct FramedChunk<'a> {
    frame: Frame,
    /// The chunk's metadata bytes.
    meta: &'a [u8],
    /// Offset of the metadata in the file.
    meta_start: usize,
    /// Offset of the body in the file.
    body_start: usize,
    /// Offset just past the chunk (its payload's end).
    end: usize,
}

impl<'a> FramedChunk<'a> {
    /// The chunk at `pos`; the error is the damage that stops reading there.
    fn at(bytes: &'a [u8], pos: usize) -> std::result::Result<FramedChunk<'a>, FrameDamage> {
        let Some(fb) = bytes.get(pos..pos + FRAME_LEN) else {
            return Err(FrameDamage::EndsInFrame);
        };
        let frame = Frame::decode(fb.try_into().expect("slice of FRAME_LEN")).map_err(FrameDamage::Frame)?;
        let pstart = pos + FRAME_LEN;
        let pend = pstart + frame.payload_len as usize;
        let Some(payload) = bytes.get(pstart..pend) else {
            return Err(FrameDamage::CutOff {
                present: bytes.len() - pstart,
                payload: frame.payload_len,
            });
        };
        if crc32fast::hash(payload) != frame.payload_crc {
            return Err(FrameDamage::Checksum);
        }
        let mut c = Cursor::new(payload);
        let Some(meta) = c.varint().and_then(|n| c.bytes(usize::try_from(n).ok()?)) else {
            return Err(FrameDamage::MetaPastPayload);
        };
        Ok(FramedChunk {
            frame,
            meta,
            meta_start: pstart + c.pos() - meta.len(),
            body_start: pstart + c.pos(),
            end: pend,
        })
    }

    fn compressed(&self) -> bool {
        self.frame.flags & FLAG_COMPRESSED != 0
    }

    /// The body, decompressed into `scratch`.
    fn read_body(&self, bytes: &[u8], scratch: &mut Vec<u8>) -> std::result::Result<(), BodyError> {
        scratch.clear();
        let body = &bytes[self.body_start..self.end];
        if self.compressed() {
            *scratch = zstd::bulk::decompress(body, self.frame.raw_len as usize).map_err(BodyError::Zstd)?;
        } else {
            scratch.extend_from_slice(body);
        }
        if scratch.len() != self.frame.raw_len as usize {
            return Err(BodyError::LengthMismatch);
        }
        Ok(())
    }
}

/// Why a chunk's frame or payload cannot be read: damage from there on.
#[derive(Debug, thiserror::Error)]
enum FrameDamage {
    #[error("file ends inside a chunk frame (cut off while writing)")]
    EndsInFrame,
    #[error("{0}")]
    Frame(&'static str),
    #[error("chunk cut off: {present} of its {payload} payload bytes present")]
    CutOff { present: usize, payload: u32 },
    #[error("chunk payload checksum mismatch")]
    Checksum,
    #[error("chunk metadata runs past the payload")]
    MetaPastPayload,
}

/// Why indexing stopped at a chunk.
enum ChunkStop {
    /// This chunk and the rest of the file are damage: the file reads up to it.
    Damage(String),
    /// The file cannot be read at all (said at the chunk's offset).
    Fatal(String),
}

/// What indexing has read so far: the file's parts but its preamble.
struct ChunkIndex {
    header: Option<Header>,
    strings: Vec<Box<str>>,
    chunks: Vec<EventChunk>,
    trailer: Option<Trailer>,
    communicators: Vec<Communicator>,
    capture_windows: Vec<CaptureWindow>,
    damage: Option<Damage>,
    skipped: u32,
    host_chunks: Vec<HostChunk>,
    /// Decompressed body of the chunk being read.
    scratch: Vec<u8>,
}

impl ChunkIndex {
    fn new() -> ChunkIndex {
        ChunkIndex {
            header: None,
            // String id 0 is the empty string.
            strings: vec!["".into()],
            chunks: Vec::new(),
            trailer: None,
            communicators: Vec::new(),
            capture_windows: Vec::new(),
            damage: None,
            skipped: 0,
            host_chunks: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Index the chunk at `pos`, or say why reading stops there.
    fn add(&mut self, bytes: &[u8], pos: usize, chunk: &FramedChunk<'_>) -> std::result::Result<(), ChunkStop> {
        let frame = &chunk.frame;
        match ChunkKind::from_u16(frame.kind) {
            Some(ChunkKind::Header) => {
                if self.header.is_some() {
                    return Err(ChunkStop::Damage("a second header chunk".into()));
                }
                let parsed = chunk
                    .read_body(bytes, &mut self.scratch)
                    .and_then(|_| serde_json::from_slice::<Header>(&self.scratch).map_err(BodyError::HeaderJson));
                match parsed {
                    Ok(h) => self.header = Some(h),
                    Err(e) => return Err(ChunkStop::Fatal(e.to_string())),
                }
            }
            _ if self.header.is_none() => return Err(ChunkStop::Fatal("the first chunk is not the header".into())),
            Some(ChunkKind::Strings) => {
                let read = chunk
                    .read_body(bytes, &mut self.scratch)
                    .and_then(|_| append_strings(&mut self.strings, &self.scratch).map_err(BodyError::Strings));
                if let Err(e) = read {
                    return Err(ChunkStop::Damage(format!("string table chunk: {e}")));
                }
            }
            Some(ChunkKind::Events) => match parse_event_meta(chunk.meta) {
                Ok(Some((kind, track, count, t_min, t_max))) => {
                    if frame.raw_len as u64 > 0 && count as u64 > frame.raw_len as u64 {
                        return Err(ChunkStop::Damage("event count larger than the chunk body".into()));
                    }
                    self.chunks.push(EventChunk {
                        kind,
                        track,
                        count,
                        t_min,
                        t_max,
                        offset: pos as u64,
                        body_start: chunk.body_start,
                        body_end: chunk.end,
                        raw_len: frame.raw_len,
                        compressed: chunk.compressed(),
                    })
                }
                Ok(None) => self.skipped += 1, // a future event kind
                Err(e) => return Err(ChunkStop::Damage(e.into())),
            },
            Some(ChunkKind::Trailer) => {
                let t: Trailer = self.json(bytes, chunk, "trailer")?;
                self.trailer = Some(t);
            }
            Some(ChunkKind::Communicators) => {
                let list: Vec<Communicator> = self.json(bytes, chunk, "communicators")?;
                for c in list {
                    if !self.communicators.iter().any(|k| k.id == c.id) {
                        self.communicators.push(c);
                    }
                }
            }
            Some(ChunkKind::CaptureWindows) => {
                let list: Vec<CaptureWindow> = self.json(bytes, chunk, "capture windows")?;
                self.capture_windows.extend(list);
            }
            Some(ChunkKind::HostSamples) => self.host_chunks.push(HostChunk {
                offset: pos,
                meta: chunk.meta_start..chunk.meta_start + chunk.meta.len(),
                body: chunk.body_start..chunk.end,
                raw_len: frame.raw_len,
                compressed: chunk.compressed(),
            }),
            None if frame.flags & FLAG_CRITICAL != 0 => {
                return Err(ChunkStop::Fatal(format!(
                    "chunk kind {} is required to read this file but unknown to this gputrace; upgrade gputrace",
                    frame.kind
                )))
            }
            None => self.skipped += 1,
        }
        Ok(())
    }

    /// A chunk whose body is JSON; damage named `what` if it does not parse.
    fn json<T: serde::de::DeserializeOwned>(
        &mut self,
        bytes: &[u8],
        chunk: &FramedChunk<'_>,
        what: &str,
    ) -> std::result::Result<T, ChunkStop> {
        chunk
            .read_body(bytes, &mut self.scratch)
            .and_then(|_| serde_json::from_slice::<T>(&self.scratch).map_err(BodyError::Json))
            .map_err(|e| ChunkStop::Damage(format!("{what}: {e}")))
    }
}

/// Why a chunk's body could not be read; the caller prefixes the chunk kind.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    #[error("zstd: {0}")]
    Zstd(std::io::Error),
    #[error("chunk body length differs from its frame")]
    LengthMismatch,
    #[error("header JSON: {0}")]
    HeaderJson(serde_json::Error),
    #[error("{0}")]
    Json(serde_json::Error),
    #[error("{0}")]
    Strings(StringsError),
}

/// What is wrong with a string table chunk.
#[derive(Debug, thiserror::Error)]
enum StringsError {
    #[error("truncated")]
    Truncated,
    #[error("starts at id {first}, expected {expected}")]
    WrongStart { first: u64, expected: usize },
    #[error("more strings than bytes")]
    MoreStringsThanBytes,
    #[error("length overflow")]
    LengthOverflow,
    #[error("string runs past the chunk")]
    RunsPast,
    #[error("string is not UTF-8")]
    NotUtf8,
    #[error("trailing bytes")]
    TrailingBytes,
}

fn append_strings(strings: &mut Vec<Box<str>>, body: &[u8]) -> std::result::Result<(), StringsError> {
    let mut c = Cursor::new(body);
    let first = c.varint().ok_or(StringsError::Truncated)?;
    let n = c.varint().ok_or(StringsError::Truncated)?;
    if first != strings.len() as u64 {
        return Err(StringsError::WrongStart {
            first,
            expected: strings.len(),
        });
    }
    if n > c.remaining() as u64 {
        return Err(StringsError::MoreStringsThanBytes);
    }
    for _ in 0..n {
        let len = c.varint().ok_or(StringsError::Truncated)?;
        let b = c
            .bytes(usize::try_from(len).map_err(|_| StringsError::LengthOverflow)?)
            .ok_or(StringsError::RunsPast)?;
        let s = std::str::from_utf8(b).map_err(|_| StringsError::NotUtf8)?;
        strings.push(s.into());
    }
    if c.remaining() != 0 {
        return Err(StringsError::TrailingBytes);
    }
    Ok(())
}

/// One counter series of a trace, read whole ([`TraceFile::counter_series`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CounterSeries {
    /// The device.
    pub device: DeviceId,
    /// The series' name (e.g. `nvml.sm_clock_mhz`, see [`crate::metric`]).
    pub metric: String,
    /// (time, value), in time order.
    pub samples: Vec<(Nanos, u64)>,
}

impl CounterSeries {
    /// Mean of the values, each weighted by the time until the next sample
    /// (the last by the median gap, so a series that ends early is not
    /// stretched); the plain mean of a single sample. `None` when empty.
    pub fn time_weighted_mean(&self) -> Option<f64> {
        self.weighted(|v| v as f64)
    }

    /// Time the predicate held, each sample standing for the time until the
    /// next (the last for the median gap), and the time all samples stand
    /// for.
    pub fn time_where(&self, pred: impl Fn(u64) -> bool) -> (Nanos, Nanos) {
        let w = self.weights();
        let mut held = 0u64;
        let mut all = 0u64;
        for (i, &(_, v)) in self.samples.iter().enumerate() {
            all += w[i];
            if pred(v) {
                held += w[i];
            }
        }
        (Nanos(held), Nanos(all))
    }

    fn weights(&self) -> Vec<u64> {
        let s = &self.samples;
        let mut gaps: Vec<u64> = s.windows(2).map(|p| p[1].0 .0.saturating_sub(p[0].0 .0)).collect();
        let mut sorted = gaps.clone();
        sorted.sort_unstable();
        let last = sorted.get(sorted.len() / 2).copied().unwrap_or(1).max(1);
        gaps.push(last);
        gaps
    }

    fn weighted(&self, f: impl Fn(u64) -> f64) -> Option<f64> {
        if self.samples.is_empty() {
            return None;
        }
        let w = self.weights();
        let total: u64 = w.iter().sum();
        if total == 0 {
            return Some(self.samples.iter().map(|s| f(s.1)).sum::<f64>() / self.samples.len() as f64);
        }
        Some(self.samples.iter().zip(&w).map(|(s, &w)| f(s.1) * w as f64).sum::<f64>() / total as f64)
    }
}

pub(crate) type EventMeta = (EventKind, Track, u32, Nanos, Nanos);

pub(crate) fn parse_event_meta(meta: &[u8]) -> std::result::Result<Option<EventMeta>, &'static str> {
    const BAD: &str = "malformed events-chunk metadata";
    let mut c = Cursor::new(meta);
    let raw_kind = c.varint().ok_or(BAD)?;
    let track = match c.bytes(1).ok_or(BAD)?[0] {
        1 => Track::Gpu {
            device: DeviceId(c.varint_u32().ok_or(BAD)?),
            context: ContextId(c.varint_u32().ok_or(BAD)?),
            stream: StreamId(c.varint_u32().ok_or(BAD)?),
        },
        2 => Track::Thread {
            tid: ThreadId(c.varint_u32().ok_or(BAD)?),
        },
        3 => Track::Process,
        _ => return Err("unknown track kind in events-chunk metadata"),
    };
    let count = c.varint_u32().ok_or(BAD)?;
    let t_min = c.varint().ok_or(BAD)?;
    let t_max = t_min.checked_add(c.varint().ok_or(BAD)?).ok_or(BAD)?;
    let Some(kind) = u8::try_from(raw_kind).ok().and_then(EventKind::from_u8) else {
        return Ok(None);
    };
    if count == 0 {
        return Err("events chunk with no events");
    }
    Ok(Some((kind, track, count, Nanos(t_min), Nanos(t_max))))
}

/// Capture windows as a reader uses them: an opened window whose closed
/// record is in the file is that record; one that never closed (the
/// process was killed inside it) ends with the last GPU or API work of the
/// file after its start (the records CUPTI delivered while it was open), or
/// is dropped without any. Then sorted by start, empty ones dropped,
/// overlapping or touching ones merged (a writer never writes those, but a
/// reader must not count a stretch twice).
fn resolve_windows(v: Vec<CaptureWindow>, chunks: &[EventChunk]) -> Vec<CaptureWindow> {
    let captured_until = chunks
        .iter()
        .filter(|c| {
            matches!(
                c.kind,
                EventKind::Kernel | EventKind::Memcpy | EventKind::Memset | EventKind::Sync | EventKind::Api
            )
        })
        .map(|c| c.t_max)
        .max()
        .unwrap_or(Nanos(0));
    let closed: Vec<Nanos> = v.iter().filter(|w| w.end != CaptureWindow::OPEN).map(|w| w.start).collect();
    let mut v: Vec<CaptureWindow> = v
        .into_iter()
        .filter_map(|w| match w.end {
            CaptureWindow::OPEN if closed.contains(&w.start) => None,
            CaptureWindow::OPEN => Some(CaptureWindow {
                start: w.start,
                end: captured_until,
            }),
            _ => Some(w),
        })
        .collect();
    v.retain(|w| w.end > w.start);
    v.sort_by_key(|w| (w.start, w.end));
    let mut out: Vec<CaptureWindow> = Vec::with_capacity(v.len());
    for w in v {
        match out.last_mut() {
            Some(last) if w.start <= last.end => last.end = last.end.max(w.end),
            _ => out.push(w),
        }
    }
    out
}
