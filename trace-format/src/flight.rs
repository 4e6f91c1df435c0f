//! Flight recorder files: keep only the last minutes of a trace, in bounded
//! space, and turn them into an ordinary trace when something goes wrong.
//!
//! A [`FlightSink`] is the `W` of a [`crate::TraceWriter`]. It splits the
//! byte stream the writer produces into its chunks and stores them in two
//! files beside where the trace would be:
//!
//! - `.<stem>.flight-meta`: the preamble and every chunk that is not an
//!   events chunk (header, string tables, communicators, trailer), appended.
//!   They are small and all of them are kept, so every string id stays
//!   defined. On its own it is a valid trace with no events.
//! - `.<stem>.flight-ring`: a memory-mapped file of fixed size holding the
//!   events chunks in a ring (layout below). A file mapping lives in the page
//!   cache, so what was appended survives the process dying by any signal,
//!   SIGKILL included.
//!
//! [`reconstruct`] writes preamble, meta chunks, the ring's valid chunks
//! from oldest to newest (those older than the window dropped) and a
//! trailer whose `extra` says `flight.window`, `flight.trigger` and how many
//! chunks were evicted by age and by the byte cap.
//!
//! ```text
//! ring   := header (128 bytes) | data (capacity bytes, used as a circle)
//! header := "GTFLRING" | u32 version | u32 header_len | u64 capacity
//!           | u64 write_pos | u64 oldest | u64 window_ns
//!           | u64 evicted_age | u64 evicted_cap | u64 evicted_cap_events | zeros
//! record := prefix (32 bytes) | chunk (frame + payload)     at data[pos % capacity..], wrapping
//! prefix := "GTFR" | u32 chunk_len | u64 pos | u64 wall_ns | u32 crc32(prefix 0..24) | u32 0
//! ```
//!
//! `write_pos` and `oldest` are logical byte positions that only grow; a
//! record lives at `pos % capacity`. The writer evicts whole records from
//! `oldest` before it overwrites them, then writes the record, then
//! publishes the new `write_pos`: a record cut short by the process dying
//! lies past `write_pos` and is never read, and a reader that finds a bad
//! record (its prefix names another position, or a checksum fails) skips
//! forward byte by byte to the next good one.

use crate::chunk::{preamble, ChunkKind, Frame, FRAME_LEN, MAX_PAYLOAD, PREAMBLE_LEN};
use crate::error::{FormatError, Result};
use crate::header::Trailer;
use crate::outdir::OutDir;
use crate::varint;
use memmap2::MmapMut;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Ring file magic.
pub const RING_MAGIC: &[u8; 8] = b"GTFLRING";
/// Ring layout version.
pub const RING_VERSION: u32 = 1;
/// Length of the ring file's header.
pub const RING_HEADER_LEN: usize = 128;
/// Length of the prefix before each chunk in the ring.
pub const RECORD_PREFIX_LEN: usize = 32;
/// Smallest ring data area accepted.
pub const MIN_CAPACITY: u64 = 64 * 1024;
/// Bytes of a chunk that hold its frame and events metadata (kind, track,
/// count, times: under 60 bytes of varints).
const HEAD_LEN: usize = FRAME_LEN + 104;
/// Record prefix magic.
const RECORD_MAGIC: &[u8; 4] = b"GTFR";
/// Name suffix of ring files (`.<stem>.flight-ring`).
pub const RING_SUFFIX: &str = ".flight-ring";
/// Name suffix of meta files (`.<stem>.flight-meta`).
pub const META_SUFFIX: &str = ".flight-meta";
/// The file `gputrace run` touches to ask every agent for a snapshot.
pub const TRIGGER_FILE: &str = ".gputrace-flight-trigger";

// Header field offsets.
const H_CAPACITY: usize = 16;
const H_WRITE_POS: usize = 24;
const H_OLDEST: usize = 32;
const H_WINDOW: usize = 40;
const H_EVICTED_AGE: usize = 48;
const H_EVICTED_CAP: usize = 56;
const H_EVICTED_CAP_EVENTS: usize = 64;

/// The ring file of the trace `stem` (`host.r00000.p123`) in `dir`.
pub fn ring_path(dir: &Path, stem: &str) -> PathBuf {
    dir.join(format!(".{stem}{RING_SUFFIX}"))
}

/// The meta file beside [`ring_path`].
pub fn meta_path(dir: &Path, stem: &str) -> PathBuf {
    dir.join(format!(".{stem}{META_SUFFIX}"))
}

/// The trace stem of a ring file's name (`.host.p1.flight-ring` → `host.p1`).
pub fn stem_of_ring(file_name: &str) -> Option<&str> {
    file_name.strip_prefix('.')?.strip_suffix(RING_SUFFIX).filter(|s| !s.is_empty())
}

/// Whether the process that wrote the meta file `meta` is gone: its lock
/// (taken by [`FlightSink::create`]) is free. On `Some`, the returned file
/// holds that lock until dropped, so two processes never both take the
/// files over. `None` while the writer lives, or if `meta` cannot be opened.
pub fn writer_gone(meta: &Path) -> Option<File> {
    let f = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(meta).ok()?;
    // Safety: flock on a descriptor we own.
    let rc = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&f), libc::LOCK_EX | libc::LOCK_NB) };
    (rc == 0).then_some(f)
}

/// `dir/<stem>.gtrace`, or `dir/<stem>.N.gtrace` with the first N that is
/// free; a name that is a symbolic link, even a dangling one, is taken.
pub fn unused_trace_path(dir: &Path, stem: &str) -> PathBuf {
    let ext = crate::FILE_EXTENSION;
    let mut p = dir.join(format!("{stem}.{ext}"));
    let mut n = 1;
    while p.symlink_metadata().is_ok() {
        p = dir.join(format!("{stem}.{n}.{ext}"));
        n += 1;
    }
    p
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

fn le32(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

/// Counters a ring keeps in its header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RingCounters {
    /// Records overwritten after they were older than the window.
    pub evicted_age: u64,
    /// Records overwritten (or refused, being larger than the ring) while
    /// younger than the window: lost to the byte cap.
    pub evicted_cap: u64,
    /// Events in the records counted in `evicted_cap`.
    pub evicted_cap_events: u64,
}

/// The writing side of a ring file.
pub struct Ring {
    map: MmapMut,
    cap: u64,
    window_ns: u64,
    write_pos: u64,
    oldest: u64,
    counters: RingCounters,
}

impl Ring {
    /// Create (or truncate) `path` as a ring of `capacity` data bytes for a
    /// window of `window`.
    pub fn create(path: &Path, capacity: u64, window: Duration) -> io::Result<Ring> {
        let (dir, name) = OutDir::parent_of(path)?;
        Ring::create_in(&dir, &name, capacity, window)
    }

    /// [`Ring::create`] of `name` in `dir`: created relative to the opened
    /// directory, never through a link.
    pub fn create_in(dir: &OutDir, name: &str, capacity: u64, window: Duration) -> io::Result<Ring> {
        if capacity < MIN_CAPACITY {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a flight ring needs at least {MIN_CAPACITY} bytes"),
            ));
        }
        let f = dir.create(name)?;
        let len = RING_HEADER_LEN as u64 + capacity;
        f.set_len(len)?;
        // Reserve the blocks now: writing through a mapping into a sparse
        // file on a full disk raises SIGBUS, which would kill the job.
        let len = libc::off_t::try_from(len).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "flight ring too large"))?;
        // Safety: a valid descriptor we own; posix_fallocate returns the error number.
        let rc = unsafe { libc::posix_fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), 0, len) };
        if rc != 0 {
            let _ = dir.remove(name);
            return Err(io::Error::from_raw_os_error(rc));
        }
        // Safety: the file was just created and sized by us; nothing else in
        // this process maps it. Another process changing it under us could
        // only corrupt the ring's contents, which every reader validates.
        let mut map = unsafe { MmapMut::map_mut(&f)? };
        let window_ns = window.as_nanos().min(u64::MAX as u128) as u64;
        map[0..8].copy_from_slice(RING_MAGIC);
        map[8..12].copy_from_slice(&RING_VERSION.to_le_bytes());
        map[12..16].copy_from_slice(&(RING_HEADER_LEN as u32).to_le_bytes());
        map[H_CAPACITY..H_CAPACITY + 8].copy_from_slice(&capacity.to_le_bytes());
        map[H_WINDOW..H_WINDOW + 8].copy_from_slice(&window_ns.to_le_bytes());
        Ok(Ring {
            map,
            cap: capacity,
            window_ns,
            write_pos: 0,
            oldest: 0,
            counters: RingCounters::default(),
        })
    }

    /// The whole mapping (header and data), for [`reconstruct`].
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// The eviction counters so far.
    pub fn counters(&self) -> RingCounters {
        self.counters
    }

    /// Store a header word. `write_pos` is stored with release ordering
    /// after everything it publishes.
    fn store(&mut self, at: usize, v: u64) {
        let p = self.map[at..at + 8].as_mut_ptr() as *mut u64;
        // Safety: the mapping is page-aligned and `at` a multiple of 8, so
        // `p` is aligned and in bounds; only this thread writes the mapping.
        let a = unsafe { AtomicU64::from_ptr(p) };
        a.store(v, Ordering::Release);
    }

    fn copy_in(&mut self, pos: u64, bytes: &[u8]) {
        let data = &mut self.map[RING_HEADER_LEN..];
        let at = (pos % self.cap) as usize;
        let first = bytes.len().min(data.len() - at);
        data[at..at + first].copy_from_slice(&bytes[..first]);
        data[..bytes.len() - first].copy_from_slice(&bytes[first..]);
    }

    /// Append one chunk (frame and payload) written at `wall_ns`
    /// (`CLOCK_REALTIME`), evicting the oldest records it needs room for.
    pub fn append(&mut self, chunk: &[u8], wall_ns: u64) {
        let len = (RECORD_PREFIX_LEN + chunk.len()) as u64;
        if len > self.cap {
            self.counters.evicted_cap += 1;
            self.counters.evicted_cap_events += events_in_chunk(chunk);
            self.store_counters();
            return;
        }
        let end = self.write_pos + len;
        while self.oldest < self.write_pos && end - self.oldest > self.cap {
            match read_record(&self.map, self.cap, self.oldest, self.write_pos) {
                Some(r) => {
                    if wall_ns.saturating_sub(r.wall_ns) >= self.window_ns {
                        self.counters.evicted_age += 1;
                    } else {
                        self.counters.evicted_cap += 1;
                        // The frame and the chunk's metadata are enough to count its events.
                        let mut head = Vec::with_capacity(HEAD_LEN);
                        copy_out(&self.map, self.cap, r.chunk_pos, r.chunk_len.min(HEAD_LEN), &mut head);
                        self.counters.evicted_cap_events += events_in_chunk(&head);
                    }
                    self.oldest = r.chunk_pos + r.chunk_len as u64;
                }
                // Only this writer writes the ring, so this means it was
                // damaged from outside: give up on the overwritten part.
                None => self.oldest = end - self.cap,
            }
        }
        if self.oldest < end.saturating_sub(self.cap) {
            self.oldest = end - self.cap;
        }
        // Evictions are published before their bytes are overwritten.
        self.store_counters();
        self.store(H_OLDEST, self.oldest);
        let mut prefix = [0u8; RECORD_PREFIX_LEN];
        prefix[0..4].copy_from_slice(RECORD_MAGIC);
        prefix[4..8].copy_from_slice(&(chunk.len() as u32).to_le_bytes());
        prefix[8..16].copy_from_slice(&self.write_pos.to_le_bytes());
        prefix[16..24].copy_from_slice(&wall_ns.to_le_bytes());
        let crc = crc32fast::hash(&prefix[0..24]);
        prefix[24..28].copy_from_slice(&crc.to_le_bytes());
        self.copy_in(self.write_pos, &prefix);
        self.copy_in(self.write_pos + RECORD_PREFIX_LEN as u64, chunk);
        self.write_pos = end;
        self.store(H_WRITE_POS, end);
    }

    fn store_counters(&mut self) {
        let c = self.counters;
        self.store(H_EVICTED_AGE, c.evicted_age);
        self.store(H_EVICTED_CAP, c.evicted_cap);
        self.store(H_EVICTED_CAP_EVENTS, c.evicted_cap_events);
    }
}

/// Copy `len` bytes at logical position `pos` out of the ring `map` into `out`.
fn copy_out(map: &[u8], cap: u64, pos: u64, len: usize, out: &mut Vec<u8>) {
    out.clear();
    let data = &map[RING_HEADER_LEN..];
    let at = (pos % cap) as usize;
    let first = len.min(data.len() - at);
    out.extend_from_slice(&data[at..at + first]);
    out.extend_from_slice(&data[..len - first]);
}

/// Where one record's chunk lies in the ring.
#[derive(Clone, Copy, Debug)]
struct RecordAt {
    wall_ns: u64,
    /// Logical position of the chunk (after the prefix).
    chunk_pos: u64,
    chunk_len: usize,
}

/// The record at logical `pos` if its prefix and chunk frame are sound and
/// it ends by `limit` (the payload checksum is checked by the reader).
fn read_record(map: &[u8], cap: u64, pos: u64, limit: u64) -> Option<RecordAt> {
    if pos + (RECORD_PREFIX_LEN + FRAME_LEN) as u64 > limit {
        return None;
    }
    let data = &map[RING_HEADER_LEN..];
    let at = (pos % cap) as usize;
    // Cheap test first: the resync scan calls this at every byte.
    if data[at] != RECORD_MAGIC[0] {
        return None;
    }
    let mut prefix = Vec::with_capacity(RECORD_PREFIX_LEN);
    copy_out(map, cap, pos, RECORD_PREFIX_LEN, &mut prefix);
    if &prefix[0..4] != RECORD_MAGIC || crc32fast::hash(&prefix[0..24]) != le32(&prefix, 24) || le64(&prefix, 8) != pos {
        return None;
    }
    let chunk_len = le32(&prefix, 4) as usize;
    let chunk_pos = pos + RECORD_PREFIX_LEN as u64;
    if chunk_len < FRAME_LEN || chunk_pos + chunk_len as u64 > limit {
        return None;
    }
    let mut frame = Vec::with_capacity(FRAME_LEN);
    copy_out(map, cap, chunk_pos, FRAME_LEN, &mut frame);
    let f = Frame::decode(frame.as_slice().try_into().ok()?).ok()?;
    if FRAME_LEN + f.payload_len as usize != chunk_len {
        return None;
    }
    Some(RecordAt {
        wall_ns: le64(&prefix, 16),
        chunk_pos,
        chunk_len,
    })
}

/// The number of events in an events chunk (0 for any other chunk, or one
/// that does not parse).
fn events_in_chunk(chunk: &[u8]) -> u64 {
    event_meta(chunk).map_or(0, |(_, n)| n)
}

/// Kind name and event count of an events chunk.
fn event_meta(chunk: &[u8]) -> Option<(&'static str, u64)> {
    let f = Frame::decode(chunk.get(..FRAME_LEN)?.try_into().ok()?).ok()?;
    if f.kind != ChunkKind::Events as u16 {
        return None;
    }
    let mut c = varint::Cursor::new(chunk.get(FRAME_LEN..)?);
    let meta = c.varint().and_then(|n| c.bytes(usize::try_from(n).ok()?))?;
    let (kind, _, count, _, _) = crate::reader::parse_event_meta(meta).ok()??;
    Some((kind.name(), count as u64))
}

/// A ring file's header, read back.
#[derive(Clone, Copy, Debug)]
pub struct RingHeader {
    /// Data bytes.
    pub capacity: u64,
    /// Logical end of the last whole record.
    pub write_pos: u64,
    /// Logical start of the oldest record not evicted.
    pub oldest: u64,
    /// The window the writer was told to keep.
    pub window: Duration,
    /// Eviction counters.
    pub counters: RingCounters,
}

/// Parse and check the header of a ring mapping.
pub fn ring_header(ring: &[u8]) -> std::result::Result<RingHeader, &'static str> {
    if ring.len() < RING_HEADER_LEN || &ring[0..8] != RING_MAGIC {
        return Err("not a gputrace flight ring");
    }
    if le32(ring, 8) != RING_VERSION || le32(ring, 12) as usize != RING_HEADER_LEN {
        return Err("flight ring of another layout version");
    }
    let capacity = le64(ring, H_CAPACITY);
    if capacity < MIN_CAPACITY || capacity != (ring.len() - RING_HEADER_LEN) as u64 {
        return Err("flight ring capacity does not match the file's size");
    }
    let write_pos = le64(ring, H_WRITE_POS);
    let oldest = le64(ring, H_OLDEST);
    if oldest > write_pos {
        return Err("flight ring positions are inconsistent");
    }
    Ok(RingHeader {
        capacity,
        write_pos,
        oldest,
        window: Duration::from_nanos(le64(ring, H_WINDOW)),
        counters: RingCounters {
            evicted_age: le64(ring, H_EVICTED_AGE),
            evicted_cap: le64(ring, H_EVICTED_CAP),
            evicted_cap_events: le64(ring, H_EVICTED_CAP_EVENTS),
        },
    })
}

/// The ring's valid records from oldest to newest, each with its wall time
/// and the chunk's bytes (in a buffer reused between calls).
struct Records<'a> {
    map: &'a [u8],
    h: RingHeader,
    pos: u64,
    buf: Vec<u8>,
    /// Bytes skipped looking for a good record (damage, or a record torn).
    skipped: u64,
}

impl<'a> Records<'a> {
    fn new(map: &'a [u8], h: RingHeader) -> Records<'a> {
        let pos = h.oldest.max(h.write_pos.saturating_sub(h.capacity));
        Records {
            map,
            h,
            pos,
            buf: Vec::new(),
            skipped: 0,
        }
    }

    fn next_record(&mut self) -> Option<(u64, &[u8])> {
        while self.pos < self.h.write_pos {
            if let Some(r) = read_record(self.map, self.h.capacity, self.pos, self.h.write_pos) {
                copy_out(self.map, self.h.capacity, r.chunk_pos, r.chunk_len, &mut self.buf);
                let payload_crc = le32(&self.buf, 16);
                if crc32fast::hash(&self.buf[FRAME_LEN..]) == payload_crc {
                    self.pos = r.chunk_pos + r.chunk_len as u64;
                    return Some((r.wall_ns, &self.buf));
                }
            }
            self.pos += 1;
            self.skipped += 1;
        }
        None
    }
}

/// What [`reconstruct`] wrote.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reconstruction {
    /// Events chunks written from the ring.
    pub chunks: u64,
    /// Events in them, by kind name.
    pub events: BTreeMap<String, u64>,
    /// Chunks dropped for being older than the window (overwritten, or
    /// still in the ring but older than the newest chunk by more than it).
    pub evicted_by_age: u64,
    /// Chunks overwritten while younger than the window (lost to the cap).
    pub evicted_by_cap: u64,
    /// Ring bytes skipped as damaged or torn.
    pub skipped_bytes: u64,
}

fn corrupt(path: &Path, offset: u64, what: &str) -> FormatError {
    FormatError::Corrupt {
        path: path.to_path_buf(),
        offset,
        what: what.to_string(),
    }
}

/// Write a trace of the flight recorder's files: the preamble, the meta
/// chunks (`meta`, as [`FlightSink`] wrote it; the trailers in it are left
/// out, the last one is the base of the new trailer), the ring's chunks
/// that are at most the ring's window older than its newest, and a trailer
/// saying `flight.trigger` = `trigger`, the window and the evictions.
/// `ring_name` and `meta_name` name the inputs in errors.
pub fn reconstruct(
    ring: &[u8],
    ring_name: &Path,
    mut meta: impl Read,
    meta_name: &Path,
    mut out: impl Write,
    trigger: &str,
) -> Result<Reconstruction> {
    let h = ring_header(ring).map_err(|e| corrupt(ring_name, 0, e))?;
    let werr = FormatError::Write;
    let rerr = |e: io::Error| FormatError::Io {
        path: meta_name.to_path_buf(),
        source: e,
    };
    let mut pre = [0u8; PREAMBLE_LEN];
    meta.read_exact(&mut pre).map_err(rerr)?;
    if pre[0..8] != preamble()[0..8] {
        return Err(corrupt(meta_name, 0, "not a flight recorder meta file"));
    }
    out.write_all(&pre).map_err(werr)?;
    // Meta chunks up to the first one cut short (a process killed while
    // appending leaves at most one).
    let mut base = None;
    let mut header_seen = false;
    let mut offset = PREAMBLE_LEN as u64;
    let mut payload = Vec::new();
    loop {
        let mut fb = [0u8; FRAME_LEN];
        match read_full(&mut meta, &mut fb).map_err(rerr)? {
            0 => break,
            n if n < FRAME_LEN => break,
            _ => {}
        }
        let Ok(f) = Frame::decode(&fb) else { break };
        payload.resize(f.payload_len as usize, 0);
        if read_full(&mut meta, &mut payload).map_err(rerr)? < payload.len() || crc32fast::hash(&payload) != f.payload_crc {
            break;
        }
        if !header_seen && f.kind != ChunkKind::Header as u16 {
            return Err(corrupt(meta_name, offset, "the first chunk is not the header"));
        }
        header_seen = true;
        offset += (FRAME_LEN + payload.len()) as u64;
        if f.kind == ChunkKind::Trailer as u16 {
            base = Some(trailer_of(&f, &payload));
            continue;
        }
        out.write_all(&fb).and_then(|_| out.write_all(&payload)).map_err(werr)?;
    }
    if !header_seen {
        return Err(corrupt(meta_name, offset, "no header chunk (the process died before writing it)"));
    }
    let mut result = Reconstruction {
        evicted_by_age: h.counters.evicted_age,
        evicted_by_cap: h.counters.evicted_cap,
        ..Default::default()
    };
    // First pass: the newest record's time, which the window counts back from.
    let mut newest = 0u64;
    let mut walk = Records::new(ring, h);
    while let Some((wall, _)) = walk.next_record() {
        newest = newest.max(wall);
    }
    let from = newest.saturating_sub(h.window.as_nanos().min(u64::MAX as u128) as u64);
    let mut walk = Records::new(ring, h);
    while let Some((wall, chunk)) = walk.next_record() {
        if wall < from {
            result.evicted_by_age += 1;
            continue;
        }
        if let Some((kind, n)) = event_meta(chunk) {
            *result.events.entry(kind.to_string()).or_default() += n;
        }
        out.write_all(chunk).map_err(werr)?;
        result.chunks += 1;
    }
    result.skipped_bytes = walk.skipped;
    let mut trailer = base.flatten().unwrap_or_default();
    trailer.events = result.events.clone();
    if h.counters.evicted_cap_events > 0 {
        trailer.losses.insert("flight_cap".into(), h.counters.evicted_cap_events);
    }
    for (k, v) in [
        ("flight.window", format!("{} ms", h.window.as_millis())),
        ("flight.trigger", trigger.to_string()),
        ("flight.evicted_by_age", result.evicted_by_age.to_string()),
        ("flight.evicted_by_cap", result.evicted_by_cap.to_string()),
        ("flight.evicted_by_cap_events", h.counters.evicted_cap_events.to_string()),
        ("flight.chunks", result.chunks.to_string()),
        ("flight.skipped_bytes", result.skipped_bytes.to_string()),
    ] {
        trailer.extra.insert(k.into(), v);
    }
    let json = serde_json::to_vec(&trailer).map_err(|e| FormatError::Write(e.into()))?;
    let frame = Frame::of(ChunkKind::Trailer as u16, 0, &trailer_payload(&json), json.len());
    out.write_all(&frame.encode())
        .and_then(|_| out.write_all(&trailer_payload(&json)))
        .and_then(|_| out.flush())
        .map_err(werr)?;
    Ok(result)
}

/// The payload of an uncompressed chunk with no metadata.
fn trailer_payload(json: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(json.len() + 1);
    varint::put(&mut p, 0);
    p.extend_from_slice(json);
    p
}

/// The trailer in a trailer chunk's payload (`None` if it does not parse;
/// the agent writes it uncompressed).
fn trailer_of(f: &Frame, payload: &[u8]) -> Option<Trailer> {
    let mut c = varint::Cursor::new(payload);
    c.varint().and_then(|n| c.bytes(usize::try_from(n).ok()?))?;
    let body = c.rest();
    if f.flags & crate::chunk::FLAG_COMPRESSED != 0 {
        let raw = zstd::bulk::decompress(body, f.raw_len as usize).ok()?;
        return serde_json::from_slice(&raw).ok();
    }
    serde_json::from_slice(body).ok()
}

/// Read until `buf` is full or the input ends; the bytes read.
fn read_full(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Write the trace of a ring and meta file pair to `trace` (through a
/// temporary file and a rename: a reader never sees half a trace).
/// Every name is opened relative to its directory and never through a
/// symbolic link ([`OutDir`]).
pub fn snapshot(ring: &[u8], ring_name: &Path, meta_name: &Path, trace: &Path, trigger: &str) -> Result<Reconstruction> {
    let meta_err = |e| FormatError::Io {
        path: meta_name.to_path_buf(),
        source: e,
    };
    let (meta_dir, meta_file) = OutDir::parent_of(meta_name).map_err(meta_err)?;
    let meta = meta_dir.open_read(&meta_file).map_err(meta_err)?;
    let trace_err = |e| FormatError::Io {
        path: trace.to_path_buf(),
        source: e,
    };
    let (dir, trace_file) = OutDir::parent_of(trace).map_err(trace_err)?;
    let tmp_file = format!("{trace_file}.partial");
    let tmp = dir.join(&tmp_file);
    let io_err = |e| FormatError::Io {
        path: tmp.clone(),
        source: e,
    };
    let f = dir.create(&tmp_file).map_err(io_err)?;
    let mut w = io::BufWriter::with_capacity(1 << 20, f);
    let r = reconstruct(ring, ring_name, io::BufReader::new(meta), meta_name, &mut w, trigger).and_then(|r| {
        w.flush().map_err(FormatError::Write)?;
        Ok(r)
    });
    drop(w);
    match r {
        Ok(r) => {
            if let Err(e) = dir.rename(&tmp_file, &trace_file) {
                let _ = dir.remove(&tmp_file);
                return Err(trace_err(e));
            }
            Ok(r)
        }
        Err(e) => {
            let _ = dir.remove(&tmp_file);
            Err(e)
        }
    }
}

/// [`snapshot`] of the files `ring_name` and its meta file, as `gputrace
/// run` does after the job ended (the ring is mapped read-only).
pub fn snapshot_files(ring_name: &Path, meta_name: &Path, trace: &Path, trigger: &str) -> Result<Reconstruction> {
    let io_err = |e| FormatError::Io {
        path: ring_name.to_path_buf(),
        source: e,
    };
    let (dir, name) = OutDir::parent_of(ring_name).map_err(io_err)?;
    let f = dir.open_read(&name).map_err(io_err)?;
    // Safety: the ring's writer has exited (the job ended); a file changed
    // under the mapping can only give bytes that fail validation.
    let map = unsafe { memmap2::Mmap::map(&f) }.map_err(io_err)?;
    snapshot(&map, ring_name, meta_name, trace, trigger)
}

/// The `W` of a [`crate::TraceWriter`] in flight-recorder mode: events
/// chunks go to a [`Ring`], the rest to the meta file.
pub struct FlightSink {
    ring: Ring,
    meta: File,
    ring_path: PathBuf,
    meta_path: PathBuf,
    /// Bytes of the chunk being received (the writer hands a frame and its
    /// payload in separate writes).
    pending: Vec<u8>,
    preamble_done: bool,
    /// Clock for each chunk's wall time (`CLOCK_REALTIME` ns); replaceable
    /// in tests.
    clock: fn() -> u64,
}

/// `CLOCK_REALTIME` in ns.
pub fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

impl FlightSink {
    /// Create the ring (`capacity` bytes, `window`) and meta files for the
    /// trace stem `stem` in `dir`.
    pub fn create(dir: &Path, stem: &str, capacity: u64, window: Duration) -> io::Result<FlightSink> {
        // Both names are created relative to the opened directory, never
        // through a link.
        let out = OutDir::open(dir)?;
        let (ring_name, meta_name) = (format!(".{stem}{RING_SUFFIX}"), format!(".{stem}{META_SUFFIX}"));
        let ring = Ring::create_in(&out, &ring_name, capacity, window)?;
        let meta = match out.create(&meta_name) {
            Ok(m) => m,
            Err(e) => {
                let _ = out.remove(&ring_name);
                return Err(e);
            }
        };
        // The writer's lock: held while this process (or a child forked
        // without exec) lives, so another process can tell a live ring from
        // one left behind ([`writer_gone`]). Not having it only loses that.
        // Safety: flock on a descriptor we own.
        unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&meta), libc::LOCK_EX | libc::LOCK_NB) };
        Ok(FlightSink {
            ring,
            meta,
            ring_path: out.join(&ring_name),
            meta_path: out.join(&meta_name),
            pending: Vec::new(),
            preamble_done: false,
            clock: realtime_ns,
        })
    }

    /// Use `clock` for the chunks' wall times.
    #[cfg(test)]
    fn with_clock(mut self, clock: fn() -> u64) -> FlightSink {
        self.clock = clock;
        self
    }

    /// The ring file.
    pub fn ring_path(&self) -> &Path {
        &self.ring_path
    }

    /// The meta file.
    pub fn meta_path(&self) -> &Path {
        &self.meta_path
    }

    /// The ring.
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// Write a trace of everything received so far to `trace` (call
    /// [`crate::TraceWriter::flush`] first).
    pub fn snapshot(&self, trace: &Path, trigger: &str) -> Result<Reconstruction> {
        snapshot(self.ring.bytes(), &self.ring_path, &self.meta_path, trace, trigger)
    }

    /// Remove both files (the job needs no trace).
    pub fn remove_files(&self) {
        let _ = std::fs::remove_file(&self.ring_path);
        let _ = std::fs::remove_file(&self.meta_path);
    }

    fn dispatch(&mut self) -> io::Result<()> {
        loop {
            if !self.preamble_done {
                if self.pending.len() < PREAMBLE_LEN {
                    return Ok(());
                }
                self.meta.write_all(&self.pending[..PREAMBLE_LEN])?;
                self.pending.drain(..PREAMBLE_LEN);
                self.preamble_done = true;
            }
            let Some(fb) = self.pending.get(..FRAME_LEN) else { return Ok(()) };
            let f = Frame::decode(fb.try_into().expect("FRAME_LEN bytes")).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            debug_assert!(f.payload_len <= MAX_PAYLOAD);
            let total = FRAME_LEN + f.payload_len as usize;
            if self.pending.len() < total {
                return Ok(());
            }
            if f.kind == ChunkKind::Events as u16 {
                let now = (self.clock)();
                self.ring.append(&self.pending[..total], now);
            } else {
                self.meta.write_all(&self.pending[..total])?;
            }
            self.pending.drain(..total);
        }
    }
}

impl Write for FlightSink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.pending.extend_from_slice(buf);
        self.dispatch()?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::*;
    use proptest::prelude::*;
    use std::sync::atomic::AtomicU64;

    // One clock per test: tests run in parallel.
    static CLOCK_A: AtomicU64 = AtomicU64::new(1_000_000_000_000);
    static CLOCK_B: AtomicU64 = AtomicU64::new(1_000_000_000_000);
    static CLOCK_C: AtomicU64 = AtomicU64::new(1_000_000_000_000);
    static CLOCK_D: AtomicU64 = AtomicU64::new(1_000_000_000_000);

    /// Kernel `i`, starting at `i * 100` plus noise, with a random-looking
    /// correlation id (so that chunks do not compress to nothing).
    fn kernel(i: u64, name: StringId) -> Event {
        let noise = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
        let start = i * 100 + noise % 50;
        Event::Kernel(Kernel {
            start: Nanos(start),
            end: Nanos(start + 10 + noise % 1000),
            device: DeviceId(0),
            context: ContextId(1),
            stream: StreamId(7),
            correlation: CorrelationId(noise as u32),
            name,
            grid: [1, 1, 1],
            block: [1, 1, 1],
            static_shared_mem: 0,
            dynamic_shared_mem: 0,
            registers: 0,
            graph_id: 0,
            graph_node_id: 0,
        })
    }

    /// Writes `chunks` chunks of `per_chunk` kernels, `clock` (read by
    /// `now`) advancing `step_ns` per chunk, then snapshots.
    fn record(
        now: fn() -> u64,
        clock: &AtomicU64,
        cap: u64,
        window: Duration,
        chunks: u64,
        per_chunk: u64,
        step_ns: u64,
    ) -> (TraceFile, Reconstruction) {
        let dir = tempfile::tempdir().unwrap();
        let sink = FlightSink::create(dir.path(), "host.p1", cap, window).unwrap().with_clock(now);
        let mut w = TraceWriter::new(sink, &Header::default(), WriterOptions::default()).unwrap();
        let name = w.intern("early_kernel_name");
        let mut i = 0;
        for _ in 0..chunks {
            for _ in 0..per_chunk {
                w.push(kernel(i, name)).unwrap();
                i += 1;
            }
            w.flush().unwrap();
            clock.fetch_add(step_ns, Ordering::Relaxed);
        }
        let sink = w.get_mut();
        let trace = dir.path().join("host.p1.gtrace");
        let r = sink.snapshot(&trace, "test").unwrap();
        let t = TraceFile::open(&trace).unwrap();
        (t, r)
    }

    #[test]
    fn everything_within_the_window_and_cap_comes_back() {
        let (t, r) = record(
            || CLOCK_A.load(Ordering::Relaxed),
            &CLOCK_A,
            1 << 20,
            Duration::from_secs(60),
            20,
            50,
            1_000_000,
        );
        assert_eq!(t.event_total(), 1000);
        assert!(t.damage().is_none());
        let tr = t.trailer().unwrap();
        assert_eq!(tr.extra["flight.trigger"], "test");
        assert_eq!(tr.extra["flight.window"], "60000 ms");
        assert_eq!(tr.events["kernel"], 1000);
        assert_eq!((r.chunks, r.evicted_by_age, r.evicted_by_cap, r.skipped_bytes), (20, 0, 0, 0));
    }

    #[test]
    fn a_small_cap_wraps_keeps_the_newest_and_counts_what_it_lost() {
        // Chunks of 2000 uncompressible-ish kernels are several KiB: a
        // 64 KiB ring holds a few of 200.
        let (t, r) = record(
            || CLOCK_B.load(Ordering::Relaxed),
            &CLOCK_B,
            MIN_CAPACITY,
            Duration::from_secs(3600),
            200,
            2000,
            1_000_000,
        );
        assert!(r.evicted_by_cap > 0, "{r:?}");
        assert_eq!(r.evicted_by_age, 0);
        assert!(r.chunks > 0 && r.chunks < 200, "{r:?}");
        assert_eq!(r.chunks + r.evicted_by_cap, 200, "every chunk is kept or counted");
        let events: Vec<Event> = t.events().collect::<Result<_>>().unwrap();
        let last = 200 * 2000 - 1;
        let Event::Kernel(newest) = kernel(last, name_of(&t)) else {
            panic!()
        };
        assert!(events.iter().any(|e| e.start() == newest.start), "the newest kernel is there");
        assert!(
            events.iter().all(|e| e.start() >= Nanos((200 - r.chunks) * 2000 * 100)),
            "only the newest chunks"
        );
        // Strings interned before the evicted chunks are still defined.
        let Event::Kernel(k) = &events[0] else { panic!() };
        assert_eq!(t.name(k.name), "early_kernel_name");
        let tr = t.trailer().unwrap();
        assert_eq!(tr.losses["flight_cap"], r.evicted_by_cap * 2000);
        assert_eq!(tr.extra["flight.evicted_by_cap"], r.evicted_by_cap.to_string());
    }

    #[test]
    fn chunks_older_than_the_window_are_dropped_and_counted() {
        // One chunk a second for 100 s, a 10 s window, room for all.
        let (t, r) = record(
            || CLOCK_C.load(Ordering::Relaxed),
            &CLOCK_C,
            1 << 20,
            Duration::from_secs(10),
            100,
            10,
            1_000_000_000,
        );
        assert_eq!(r.chunks, 11, "the newest and the 10 s before it");
        assert_eq!((r.evicted_by_age, r.evicted_by_cap), (89, 0));
        assert_eq!(t.event_total(), 110);
        // With a small ring, old chunks overwritten count as age evictions.
        let (_, r) = record(
            || CLOCK_D.load(Ordering::Relaxed),
            &CLOCK_D,
            MIN_CAPACITY,
            Duration::from_secs(1),
            200,
            2000,
            10_000_000_000,
        );
        assert_eq!(r.evicted_by_cap, 0, "{r:?}");
        assert_eq!(r.chunks, 1);
        assert_eq!(r.evicted_by_age, 199);
    }

    #[test]
    fn a_live_writers_files_are_locked_and_free_once_it_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let sink = FlightSink::create(dir.path(), "host.p1", MIN_CAPACITY, Duration::from_secs(60)).unwrap();
        let meta = sink.meta_path().to_path_buf();
        assert!(writer_gone(&meta).is_none(), "the writer holds its lock");
        drop(sink);
        let held = writer_gone(&meta).expect("free once the writer is gone");
        assert!(writer_gone(&meta).is_none(), "one taker at a time");
        drop(held);
        assert!(writer_gone(&dir.path().join("missing")).is_none());
    }

    #[test]
    fn flight_files_and_snapshots_are_never_written_through_links() {
        use std::os::unix::fs::symlink;
        let root = tempfile::tempdir().unwrap();
        let (dir, victim) = (root.path().join("out"), root.path().join("victim"));
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(&victim, b"precious").unwrap();
        let refused = |e: io::Error| assert!(crate::outdir::is_link_refusal(&e), "{e}");
        // A link where the ring goes, then where the meta file goes.
        symlink(&victim, ring_path(&dir, "h.p1")).unwrap();
        refused(
            FlightSink::create(&dir, "h.p1", MIN_CAPACITY, Duration::from_secs(60))
                .err()
                .unwrap(),
        );
        symlink(&victim, meta_path(&dir, "h.p2")).unwrap();
        refused(
            FlightSink::create(&dir, "h.p2", MIN_CAPACITY, Duration::from_secs(60))
                .err()
                .unwrap(),
        );
        assert!(!ring_path(&dir, "h.p2").exists(), "the ring made before the refusal is removed");
        // A snapshot's name and temporary name: links are passed over or refused.
        let mut w = TraceWriter::new(
            FlightSink::create(&dir, "h.p3", MIN_CAPACITY, Duration::from_secs(60)).unwrap(),
            &Header::default(),
            WriterOptions::default(),
        )
        .unwrap();
        w.flush().unwrap();
        symlink(root.path().join("new"), dir.join("h.p3.gtrace")).unwrap();
        let trace = unused_trace_path(&dir, "h.p3");
        assert_eq!(trace, dir.join("h.p3.1.gtrace"), "a dangling link is a taken name");
        symlink(&victim, dir.join("h.p3.1.gtrace.partial")).unwrap();
        let e = w.get_mut().snapshot(&trace, "test").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(!root.path().join("new").exists());
        std::fs::remove_file(dir.join("h.p3.1.gtrace.partial")).unwrap();
        w.get_mut().snapshot(&trace, "test").unwrap();
        assert!(TraceFile::open(&trace).is_ok());
        // The files a snapshot reads are not read through links either.
        let ring_link = dir.join(".h.p4.flight-ring");
        symlink(ring_path(&dir, "h.p3"), &ring_link).unwrap();
        let e = snapshot_files(&ring_link, &meta_path(&dir, "h.p3"), &dir.join("h.p4.gtrace"), "t").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
    }

    fn name_of(t: &TraceFile) -> StringId {
        (0..).map(StringId).find(|&id| t.name(id) == "early_kernel_name").unwrap()
    }

    fn chunk(payload: &[u8]) -> Vec<u8> {
        let mut c = Frame::of(99, 0, payload, payload.len()).encode().to_vec();
        c.extend_from_slice(payload);
        c
    }

    fn payloads(ring: &Ring) -> (Vec<Vec<u8>>, u64) {
        let h = ring_header(ring.bytes()).unwrap();
        let mut walk = Records::new(ring.bytes(), h);
        let mut out = Vec::new();
        while let Some((_, c)) = walk.next_record() {
            out.push(c[FRAME_LEN..].to_vec());
        }
        (out, walk.skipped)
    }

    #[test]
    fn a_damaged_record_is_skipped_and_the_next_found() {
        let dir = tempfile::tempdir().unwrap();
        let mut ring = Ring::create(&dir.path().join("r"), MIN_CAPACITY, Duration::from_secs(60)).unwrap();
        for i in 0..10u8 {
            ring.append(&chunk(&[i; 100]), 1);
        }
        // Damage the payload of record 3 (records are 32 + 24 + 100 bytes).
        let at = RING_HEADER_LEN + 3 * 156 + 60;
        ring.map[at] ^= 0xff;
        let (got, skipped) = payloads(&ring);
        let want: Vec<Vec<u8>> = (0..10u8).filter(|&i| i != 3).map(|i| vec![i; 100]).collect();
        assert_eq!(got, want);
        assert_eq!(skipped, 156);
    }

    #[test]
    fn a_record_torn_by_a_kill_is_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let mut ring = Ring::create(&dir.path().join("r"), MIN_CAPACITY, Duration::from_secs(60)).unwrap();
        let big = vec![7u8; 20_000];
        for _ in 0..5 {
            ring.append(&chunk(&big), 1);
        }
        // The process dies while copying the sixth record in: its first
        // bytes overwrite the oldest record's, `write_pos` is not moved.
        let (before, _) = payloads(&ring);
        let pos = ring.write_pos;
        // What `append` publishes before copying: the eviction.
        let end = pos + (RECORD_PREFIX_LEN + FRAME_LEN + big.len()) as u64;
        while end - ring.oldest > ring.cap {
            ring.oldest += (RECORD_PREFIX_LEN + FRAME_LEN + big.len()) as u64;
        }
        let oldest = ring.oldest;
        ring.store(H_OLDEST, oldest);
        let torn = chunk(&[9u8; 20_000]);
        ring.copy_in(pos, &torn[..5_000]);
        let (after, skipped) = payloads(&ring);
        assert_eq!(skipped, 0);
        assert_eq!(after.len(), before.len() - 1, "the overwritten record is gone, the rest intact");
        assert!(after.iter().all(|p| p == &big));
    }

    proptest! {
        #[test]
        fn the_ring_returns_a_suffix_of_what_was_appended(sizes in proptest::collection::vec(1usize..20_000, 1..60)) {
            let dir = tempfile::tempdir().unwrap();
            let mut ring = Ring::create(&dir.path().join("r"), MIN_CAPACITY, Duration::from_secs(60)).unwrap();
            let all: Vec<Vec<u8>> = sizes.iter().enumerate().map(|(i, &n)| vec![i as u8; n]).collect();
            for p in &all {
                ring.append(&chunk(p), 1);
            }
            let (got, skipped) = payloads(&ring);
            prop_assert_eq!(skipped, 0);
            prop_assert!(!got.is_empty());
            prop_assert_eq!(&got[..], &all[all.len() - got.len()..]);
            prop_assert_eq!(got.len() as u64 + ring.counters().evicted_cap, all.len() as u64);
            // What fits was kept: the record before the oldest kept would not have.
            let used: usize = got.iter().map(|p| p.len() + RECORD_PREFIX_LEN + FRAME_LEN).sum();
            if got.len() < all.len() {
                let prev = all[all.len() - got.len() - 1].len() + RECORD_PREFIX_LEN + FRAME_LEN;
                prop_assert!(used + prev > MIN_CAPACITY as usize);
            }
        }
    }
}
