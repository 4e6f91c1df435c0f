//! Streaming writer: bounded memory, any `Write`.

use crate::chunk::*;
use crate::codec::ChunkBuf;
use crate::error::{FormatError, Result};
use crate::header::{CaptureWindow, Communicator, Header, Trailer};
use crate::model::{ApiCall, Event, EventKind, Kernel, Track};
use crate::units::StringId;
use crate::varint;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;
use std::io::Write;

/// Size of the writer's recent-key cache.
const RECENT: usize = 4;

/// Writer settings.
#[derive(Clone, Debug)]
pub struct WriterOptions {
    /// Events per chunk (per kind and track) before it is written.
    pub chunk_events: usize,
    /// Upper bound on events buffered across all tracks; when reached the
    /// fullest buffer is written. A buffered event takes its encoded size (a
    /// varint per column) when its track's events arrive in start order, and
    /// 20 bytes plus 8 per series otherwise, plus the buffers' capacity kept
    /// between chunks.
    pub max_buffered_events: usize,
    /// zstd level (1 fastest; 3 is zstd's default).
    pub zstd_level: i32,
    /// Huffman-code zstd's literals in events chunks (string chunks always
    /// are). Off by default: on a training-like mix the file is about 15%
    /// larger without it (4.3 instead of 3.7 bytes per event), but events
    /// chunks decode about 1.45 times as fast and encode about 1.15 times as
    /// fast (`cargo bench -p gputrace-format --bench format`). Column bytes
    /// are varints of deltas, which entropy coding shrinks only a little.
    pub huffman_literals: bool,
    /// zstd-compress chunk bodies (events and strings). Off, chunks are
    /// stored as they are encoded (3.4 times the size on a converted Kineto
    /// trace): for a trace that is read back at once in memory (a Kineto
    /// trace converted for `report`), where compressing and decompressing
    /// buy nothing.
    pub compress: bool,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            chunk_events: 32 * 1024,
            max_buffered_events: 256 * 1024,
            zstd_level: 1,
            huffman_literals: false,
            compress: true,
        }
    }
}

/// Writes one trace file. Events may be pushed in any order; within each
/// chunk they are sorted by start, and the reader merges chunks per track.
///
/// Invariants: a strings chunk defining an id is always written before any
/// events chunk using it; memory is bounded by `max_buffered_events` plus
/// the string table.
pub struct TraceWriter<W: Write> {
    out: W,
    opts: WriterOptions,
    /// Column scratch for encoding chunks.
    cols: Vec<Vec<u8>>,
    compressor: zstd::bulk::Compressor<'static>,
    /// Whether `compressor` is set to Huffman-code literals (see
    /// [`WriterOptions::huffman_literals`]); it starts so (zstd's default).
    huffman: bool,
    strings: FxHashMap<Box<str>, StringId>,
    next_string: u32,
    pending_first: u32,
    pending_strings: Vec<u8>,
    pending_count: u32,
    /// One buffer per (kind, track), found through `buffer_index`.
    buffers: Vec<((EventKind, Track), ChunkBuf)>,
    buffer_index: FxHashMap<(EventKind, Track), usize>,
    /// The buffers of the most recent distinct keys (round robin): events
    /// come in runs on a few tracks (launch, kernel, launch, ...), so this
    /// usually skips the map.
    recent: [Option<((EventKind, Track), usize)>; RECENT],
    recent_next: usize,
    /// Per kind (indexed by its number - 1), the track and buffer of its
    /// last event: kernels on a stream and API calls on a thread come in
    /// long runs, so this usually answers before `recent` is searched.
    last: [Option<(Track, usize)>; EventKind::ALL.len()],
    buffered: usize,
    /// Events that can be pushed before a limit (`chunk_events` in one
    /// buffer, `max_buffered_events` in all) can be reached, at least 1.
    /// Invariant: at most `max_buffered_events - buffered` and at most
    /// `chunk_events - len` of every buffer (each push adds one event to
    /// one buffer, so counting down keeps it); writing a chunk only moves
    /// both bounds up. So the limits are checked only when it reaches 0,
    /// and still at the exact push that reaches one.
    until_check: usize,
    /// Countdowns in a row held below [`TIGHT`] by a buffer other than the
    /// one pushed to (see [`Self::check_limits`]).
    tight_runs: u32,
    counts: BTreeMap<String, u64>,
    losses: BTreeMap<String, u64>,
    bytes_written: u64,
    raw: Vec<u8>,
    payload: Vec<u8>,
    /// Compressed body of the chunk being written (reused).
    zbuf: Vec<u8>,
}

/// A countdown below this many events is tight (see `tight_runs`).
const TIGHT: usize = 64;
/// Tight countdowns in a row after which the buffer holding them down is
/// written.
const TIGHT_RUNS: u32 = 64;

impl<W: Write> TraceWriter<W> {
    /// Start a trace: writes the preamble and the header chunk.
    pub fn new(out: W, header: &Header, opts: WriterOptions) -> Result<Self> {
        let compressor = zstd::bulk::Compressor::new(opts.zstd_level).map_err(FormatError::Write)?;
        let mut w = TraceWriter {
            out,
            opts,
            cols: Vec::new(),
            compressor,
            huffman: true,
            strings: FxHashMap::default(),
            next_string: 1,
            pending_first: 1,
            pending_strings: Vec::new(),
            pending_count: 0,
            buffers: Vec::new(),
            buffer_index: FxHashMap::default(),
            recent: [None; RECENT],
            recent_next: 0,
            last: [None; EventKind::ALL.len()],
            buffered: 0,
            // The first push computes the real count.
            until_check: 1,
            tight_runs: 0,
            counts: BTreeMap::new(),
            losses: BTreeMap::new(),
            bytes_written: 0,
            raw: Vec::new(),
            payload: Vec::new(),
            zbuf: Vec::new(),
        };
        w.strings.insert("".into(), StringId::EMPTY);
        w.out.write_all(&preamble()).map_err(FormatError::Write)?;
        w.bytes_written += PREAMBLE_LEN as u64;
        let json = serde_json::to_vec(header).map_err(|e| FormatError::Write(e.into()))?;
        w.write_chunk(ChunkKind::Header as u16, FLAG_CRITICAL, &[], &json, false)?;
        Ok(w)
    }

    /// The id of `s` in the string table, adding it if new.
    pub fn intern(&mut self, s: &str) -> StringId {
        if let Some(id) = self.strings.get(s) {
            return *id;
        }
        let id = StringId(self.next_string);
        self.next_string += 1;
        self.strings.insert(s.into(), id);
        varint::put(&mut self.pending_strings, s.len() as u64);
        self.pending_strings.extend_from_slice(s.as_bytes());
        self.pending_count += 1;
        id
    }

    /// Number of strings interned so far (including the empty string).
    pub fn string_count(&self) -> u32 {
        self.next_string
    }

    /// Add one event. String ids in it must come from [`Self::intern`].
    #[inline]
    pub fn push(&mut self, event: Event) -> Result<()> {
        self.push_ref(&event)
    }

    /// Add one event, by reference: for an event that lives elsewhere
    /// (a decoded chunk, a vector), this saves copying its 112 bytes.
    #[inline]
    pub fn push_ref(&mut self, event: &Event) -> Result<()> {
        match event {
            Event::Kernel(k) => self.push_kernel(k),
            Event::Api(c) => self.push_api(c),
            _ => self.push_other(event),
        }
    }

    /// Add one kernel: the same as [`Self::push`] with `Event::Kernel`,
    /// for a caller that has a [`Kernel`] (the agent's decoder), without
    /// building the [`Event`] and matching on it again.
    #[inline(always)]
    pub fn push_kernel(&mut self, k: &Kernel) -> Result<()> {
        let track = Track::Gpu {
            device: k.device,
            context: k.context,
            stream: k.stream,
        };
        let i = self.buffer_of(EventKind::Kernel, track);
        self.buffers[i].1.push_typed(k);
        self.pushed(i)
    }

    /// Add one API call: the same as [`Self::push`] with `Event::Api` (see
    /// [`Self::push_kernel`]).
    #[inline(always)]
    pub fn push_api(&mut self, c: &ApiCall) -> Result<()> {
        let i = self.buffer_of(EventKind::Api, Track::Thread { tid: c.thread });
        self.buffers[i].1.push_typed(c);
        self.pushed(i)
    }

    fn push_other(&mut self, event: &Event) -> Result<()> {
        if let Event::Loss(l) = event {
            let total = self.losses.entry(l.source.name().to_string()).or_default();
            *total = total.saturating_add(l.count);
        }
        let i = self.buffer_of(event.kind(), event.track());
        self.buffers[i].1.push(event);
        self.pushed(i)
    }

    /// The buffer of `(kind, track)`: the kind's last track, then the
    /// recent keys, then the map (adding a buffer if the key is new).
    #[inline(always)]
    fn buffer_of(&mut self, kind: EventKind, track: Track) -> usize {
        match self.last[kind.index()] {
            Some((t, i)) if t == track => i,
            _ => self.buffer_of_slow(kind, track),
        }
    }

    #[inline(never)]
    fn buffer_of_slow(&mut self, kind: EventKind, track: Track) -> usize {
        let key = (kind, track);
        let i = match self.recent.iter().flatten().find(|(k, _)| *k == key) {
            Some(&(_, i)) => i,
            None => {
                let next = self.buffers.len();
                let i = *self.buffer_index.entry(key).or_insert(next);
                if i == next {
                    self.buffers.push((key, ChunkBuf::new(key.0)));
                }
                self.recent[self.recent_next] = Some((key, i));
                self.recent_next = (self.recent_next + 1) % RECENT;
                i
            }
        };
        self.last[kind.index()] = Some((track, i));
        i
    }

    /// Count an event just added to buffer `i`, writing a chunk if a limit
    /// is reached.
    #[inline(always)]
    fn pushed(&mut self, i: usize) -> Result<()> {
        self.buffered += 1;
        self.until_check -= 1;
        // One branch in the common case (no limit can have been reached).
        if self.until_check == 0 {
            return self.check_limits(i);
        }
        Ok(())
    }

    /// A limit may have been reached by the push to buffer `i`: write
    /// buffer `i` if full, else the fullest if too many events are
    /// buffered; then count down again. Also writes a nearly full buffer
    /// that keeps the countdown short while others are pushed to (see
    /// [`TIGHT_RUNS`]).
    #[cold]
    #[inline(never)]
    fn check_limits(&mut self, i: usize) -> Result<()> {
        // Whatever fails below, the next push checks again.
        self.until_check = 1;
        if self.buffers[i].1.len() >= self.opts.chunk_events {
            self.flush_buffer(i)?;
        } else if self.buffered >= self.opts.max_buffered_events {
            if let Some((j, _)) = self.longest() {
                self.flush_buffer(j)?;
            }
        }
        let mut longest = self.longest();
        if let Some((j, len)) = longest {
            // A buffer that is nearly full but no longer pushed to would
            // hold the countdown near 0, and each check costs a pass over
            // the buffers: after TIGHT_RUNS such checks in a row it is
            // written (a chunk a little short of `chunk_events`).
            if j != i && self.opts.chunk_events.saturating_sub(len) < TIGHT {
                self.tight_runs += 1;
                if self.tight_runs >= TIGHT_RUNS {
                    self.tight_runs = 0;
                    self.flush_buffer(j)?;
                    longest = self.longest();
                }
            } else {
                self.tight_runs = 0;
            }
        }
        let longest = longest.map_or(0, |(_, len)| len);
        self.until_check = (self.opts.chunk_events.saturating_sub(longest))
            .min(self.opts.max_buffered_events.saturating_sub(self.buffered))
            .max(1);
        Ok(())
    }

    /// The fullest buffer and its length.
    fn longest(&self) -> Option<(usize, usize)> {
        self.buffers.iter().map(|b| b.1.len()).enumerate().max_by_key(|&(_, len)| len)
    }

    /// Write every buffered event and string and flush the underlying
    /// writer. After this returns, everything pushed so far is on disk as
    /// whole chunks (a later crash loses nothing before this point).
    pub fn flush(&mut self) -> Result<()> {
        // In key order, so that output does not depend on first-seen order.
        let mut order: Vec<usize> = (0..self.buffers.len()).filter(|&i| self.buffers[i].1.len() > 0).collect();
        order.sort_by_key(|&i| self.buffers[i].0);
        for i in order {
            self.flush_buffer(i)?;
        }
        self.flush_strings()?;
        self.out.flush().map_err(FormatError::Write)
    }

    /// The underlying writer. Writing to it directly corrupts the trace;
    /// this exists to inspect or sync it (e.g. `File::sync_data`).
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// Events held in memory, not yet written (never more than
    /// `max_buffered_events`).
    pub fn buffered_events(&self) -> usize {
        self.buffered
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    /// Events written or buffered so far, per kind name.
    pub fn counts(&self) -> &BTreeMap<String, u64> {
        &self.counts
    }

    /// Write everything and the trailer; returns the underlying writer.
    pub fn finish(mut self, mut trailer: Trailer) -> Result<W> {
        self.flush()?;
        trailer.events = self.counts.clone();
        for (k, v) in &self.losses {
            trailer.losses.entry(k.clone()).or_insert(*v);
        }
        let json = serde_json::to_vec(&trailer).map_err(|e| FormatError::Write(e.into()))?;
        self.write_chunk(ChunkKind::Trailer as u16, 0, &[], &json, false)?;
        self.out.flush().map_err(FormatError::Write)?;
        Ok(self.out)
    }

    /// Record a communicator at once (a communicators chunk, uncompressed
    /// JSON), so a trace cut short still names the communicators its
    /// collectives refer to. Call it once per communicator; duplicates are
    /// harmless (readers keep the first of each id).
    pub fn add_communicators(&mut self, comms: &[Communicator]) -> Result<()> {
        if comms.is_empty() {
            return Ok(());
        }
        let json = serde_json::to_vec(comms).map_err(|e| FormatError::Write(e.into()))?;
        self.write_chunk(ChunkKind::Communicators as u16, 0, &[], &json, false)
    }

    /// Record a closed capture window of a duty-cycled capture at once (a
    /// capture-windows chunk, uncompressed JSON), so a trace cut short
    /// still says which time its events cover. Call it once per window,
    /// after the window's events were pushed.
    pub fn add_capture_windows(&mut self, windows: &[CaptureWindow]) -> Result<()> {
        if windows.is_empty() {
            return Ok(());
        }
        let json = serde_json::to_vec(windows).map_err(|e| FormatError::Write(e.into()))?;
        self.write_chunk(ChunkKind::CaptureWindows as u16, 0, &[], &json, false)
    }

    fn flush_strings(&mut self) -> Result<()> {
        if self.pending_count == 0 {
            return Ok(());
        }
        let mut body = Vec::with_capacity(self.pending_strings.len() + 10);
        varint::put(&mut body, self.pending_first as u64);
        varint::put(&mut body, self.pending_count as u64);
        body.extend_from_slice(&self.pending_strings);
        self.literals(true)?;
        self.write_chunk(ChunkKind::Strings as u16, FLAG_CRITICAL, &[], &body, self.opts.compress)?;
        self.pending_first = self.next_string;
        self.pending_strings.clear();
        self.pending_count = 0;
        Ok(())
    }

    fn flush_buffer(&mut self, i: usize) -> Result<()> {
        let key = self.buffers[i].0;
        let count = self.buffers[i].1.len();
        if count == 0 {
            return Ok(());
        }
        self.flush_strings()?;
        self.buffered -= count;
        let mut raw = std::mem::take(&mut self.raw);
        raw.clear();
        // Sorts by start (stable) if needed, then empties the buffer.
        let (t_min, t_max) = self.buffers[i].1.encode(&mut raw, &mut self.cols);
        let mut meta = Vec::with_capacity(32);
        varint::put(&mut meta, key.0 as u64);
        encode_track(&mut meta, &key.1);
        varint::put(&mut meta, count as u64);
        varint::put(&mut meta, t_min);
        varint::put(&mut meta, t_max - t_min);
        *self.counts.entry(key.0.name().to_string()).or_default() += count as u64;
        let r = self
            .literals(self.opts.huffman_literals)
            .and_then(|()| self.write_chunk(ChunkKind::Events as u16, 0, &meta, &raw, self.opts.compress));
        self.raw = raw;
        r
    }

    /// Set whether the next compressed chunks Huffman-code their literals.
    fn literals(&mut self, huffman: bool) -> Result<()> {
        if self.huffman != huffman {
            set_literals(&mut self.compressor, huffman).map_err(FormatError::Write)?;
            self.huffman = huffman;
        }
        Ok(())
    }

    fn write_chunk(&mut self, kind: u16, mut flags: u16, meta: &[u8], body: &[u8], compress: bool) -> Result<()> {
        if body.len() > MAX_RAW as usize {
            return Err(FormatError::Write(std::io::Error::other("chunk body exceeds the format limit")));
        }
        let mut payload = std::mem::take(&mut self.payload);
        payload.clear();
        varint::put(&mut payload, meta.len() as u64);
        payload.extend_from_slice(meta);
        if compress {
            // Into a buffer kept across chunks rather than a new allocation
            // per chunk.
            let mut z = std::mem::take(&mut self.zbuf);
            z.clear();
            z.reserve(zstd::zstd_safe::compress_bound(body.len()));
            let r = self.compressor.compress_to_buffer(body, &mut z);
            payload.extend_from_slice(&z);
            self.zbuf = z;
            r.map_err(FormatError::Write)?;
            flags |= FLAG_COMPRESSED;
        } else {
            payload.extend_from_slice(body);
        }
        if payload.len() > MAX_PAYLOAD as usize {
            return Err(FormatError::Write(std::io::Error::other("chunk payload exceeds the format limit")));
        }
        let frame = Frame::of(kind, flags, &payload, body.len());
        let r = self
            .out
            .write_all(&frame.encode())
            .and_then(|_| self.out.write_all(&payload))
            .map_err(FormatError::Write);
        self.bytes_written += (FRAME_LEN + payload.len()) as u64;
        self.payload = payload;
        r
    }
}

/// Set whether `compressor` Huffman-codes literals (zstd's default) or
/// leaves them raw (see [`WriterOptions::huffman_literals`]).
pub(crate) fn set_literals(compressor: &mut zstd::bulk::Compressor<'static>, huffman: bool) -> std::io::Result<()> {
    use zstd::zstd_safe::{CParameter, ParamSwitch};
    let mode = if huffman { ParamSwitch::Auto } else { ParamSwitch::Disable };
    compressor.set_parameter(CParameter::LiteralCompressionMode(mode))
}

pub(crate) fn encode_track(out: &mut Vec<u8>, t: &Track) {
    match *t {
        Track::Gpu { device, context, stream } => {
            out.push(1);
            varint::put(out, device.0 as u64);
            varint::put(out, context.0 as u64);
            varint::put(out, stream.0 as u64);
        }
        Track::Thread { tid } => {
            out.push(2);
            varint::put(out, tid.0 as u64);
        }
        Track::Process => out.push(3),
    }
}
