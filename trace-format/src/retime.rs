//! Moving every time of a written trace: [`retime`].
//!
//! An importer that learns the base its times are relative to only after
//! the events (Kineto writes `baseTimeNanoseconds` after `traceEvents`)
//! can write the events at once, against a provisional base, and move
//! them afterwards, instead of holding them all until the base is known.
//! An events chunk stores its times relative to its `t_min` (in the
//! uncompressed meta), so moving a chunk is rewriting its meta, with one
//! exception: a collective's `start - enqueue` column holds its start
//! itself when the enqueue time is unknown (0), and that value moves too.

use crate::chunk::*;
use crate::error::{FormatError, Result};
use crate::header::Header;
use crate::model::EventKind;
use crate::varint::{self, Cursor};
use crate::writer::{set_literals, WriterOptions};

/// Column of a collective's `start - enqueue` series (after start,
/// duration, seq and correlation: see `docs/format.md`).
const COLLECTIVE_WAIT_COLUMN: usize = 4;

/// `trace` (a whole file as [`crate::TraceWriter`] writes it, finished or
/// not) with `header` as its header and every event time moved by `shift`
/// nanoseconds: the bytes the writer gives when it is given `header` and
/// the moved times, with `opts` (which says how bodies that are compressed
/// are compressed again, where one must change). An unknown (0) enqueue
/// time stays unknown. Fails, naming the problem, if a moved time would be
/// negative or past `u64::MAX`, or if the bytes are not such a trace.
pub fn retime(trace: &[u8], header: &Header, shift: i64, opts: &WriterOptions) -> Result<Vec<u8>> {
    let bad = |offset: usize, what: &str| FormatError::Corrupt {
        path: "(trace being retimed)".into(),
        offset: offset as u64,
        what: what.to_string(),
    };
    if trace.len() < PREAMBLE_LEN || trace[..PREAMBLE_LEN] != preamble() {
        return Err(bad(0, "not a trace of this format version"));
    }
    let mut out = Vec::with_capacity(trace.len() + 64);
    out.extend_from_slice(&preamble());
    let json = serde_json::to_vec(header).map_err(|e| FormatError::Write(e.into()))?;
    let mut payload = Vec::with_capacity(json.len() + 1);
    varint::put(&mut payload, 0);
    payload.extend_from_slice(&json);
    put_chunk(&mut out, ChunkKind::Header as u16, FLAG_CRITICAL, &payload, json.len());
    let mut compressor = None;
    let mut at = PREAMBLE_LEN;
    let mut first = true;
    while at < trace.len() {
        let frame_bytes: &[u8; FRAME_LEN] = trace
            .get(at..at + FRAME_LEN)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| bad(at, "cut off inside a chunk frame"))?;
        let frame = Frame::decode(frame_bytes).map_err(|what| bad(at, what))?;
        let start = at + FRAME_LEN;
        let payload = trace
            .get(start..start + frame.payload_len as usize)
            .ok_or_else(|| bad(at, "cut off inside a chunk"))?;
        if crc32fast::hash(payload) != frame.payload_crc {
            return Err(bad(at, "chunk checksum mismatch"));
        }
        let whole = &trace[at..start + payload.len()];
        at = start + payload.len();
        if std::mem::take(&mut first) {
            if frame.kind != ChunkKind::Header as u16 {
                return Err(bad(PREAMBLE_LEN, "the first chunk is not the header"));
            }
            continue;
        }
        if frame.kind != ChunkKind::Events as u16 {
            out.extend_from_slice(whole);
            continue;
        }
        let (moved, raw_len) = move_events(payload, frame, shift, opts, &mut compressor).map_err(|what| bad(start - FRAME_LEN, what))?;
        if moved.len() > MAX_PAYLOAD as usize {
            return Err(bad(start - FRAME_LEN, "a moved chunk grows past the format's limit"));
        }
        put_chunk(&mut out, frame.kind, frame.flags, &moved, raw_len);
    }
    Ok(out)
}

/// `t + shift`, if representable.
fn moved(t: u64, shift: i64) -> Option<u64> {
    u64::try_from(i128::from(t) + i128::from(shift)).ok()
}

/// The payload of an events chunk with its times moved by `shift`, and
/// its body's length once decompressed.
fn move_events(
    payload: &[u8],
    frame: Frame,
    shift: i64,
    opts: &WriterOptions,
    compressor: &mut Option<zstd::bulk::Compressor<'static>>,
) -> Result<(Vec<u8>, usize), &'static str> {
    const CUT: &str = "events chunk meta cut off";
    let mut c = Cursor::new(payload);
    let meta_len = c.varint().ok_or(CUT)? as usize;
    let meta = c.bytes(meta_len).ok_or(CUT)?;
    let body = c.rest();
    let mut m = Cursor::new(meta);
    let kind = m.varint().ok_or(CUT)?;
    let fields = match m.bytes(1).ok_or(CUT)?[0] {
        1 => 3,
        2 => 1,
        _ => 0,
    };
    for _ in 0..fields {
        m.varint().ok_or(CUT)?;
    }
    m.varint().ok_or(CUT)?; // count
    let keep = &meta[..m.pos()];
    let t_min = m.varint().ok_or(CUT)?;
    let span = m.varint().ok_or(CUT)?;
    let new_min = moved(t_min, shift).ok_or("a time moves before 0")?;
    new_min.checked_add(span).ok_or("a time moves past the largest representable")?;
    let mut new_meta = Vec::with_capacity(meta.len() + 10);
    new_meta.extend_from_slice(keep);
    varint::put(&mut new_meta, new_min);
    varint::put(&mut new_meta, span);
    new_meta.extend_from_slice(m.rest());
    let mut out = Vec::with_capacity(payload.len() + 10);
    varint::put(&mut out, new_meta.len() as u64);
    out.extend_from_slice(&new_meta);
    if kind != EventKind::Collective as u64 || shift == 0 {
        out.extend_from_slice(body);
        return Ok((out, frame.raw_len as usize));
    }
    let compressed = frame.flags & FLAG_COMPRESSED != 0;
    let raw = if compressed {
        zstd::bulk::decompress(body, frame.raw_len as usize).map_err(|_| "collective chunk body does not decompress")?
    } else {
        body.to_vec()
    };
    let raw = move_collective_waits(&raw, t_min, shift)?;
    if raw.len() > MAX_RAW as usize {
        return Err("a collective chunk grows past the format's limit");
    }
    if compressed {
        let z = match compressor {
            Some(z) => z,
            None => {
                let mut z = zstd::bulk::Compressor::new(opts.zstd_level).map_err(|_| "no zstd compressor")?;
                set_literals(&mut z, opts.huffman_literals).map_err(|_| "no zstd compressor")?;
                compressor.insert(z)
            }
        };
        out.extend_from_slice(&z.compress(&raw).map_err(|_| "collective chunk body does not compress")?);
    } else {
        out.extend_from_slice(&raw);
    }
    Ok((out, raw.len()))
}

/// A collective chunk's body with each unknown-enqueue event's `start -
/// enqueue` value (its start) moved by `shift`; `t_min` is the chunk's.
fn move_collective_waits(body: &[u8], t_min: u64, shift: i64) -> Result<Vec<u8>, &'static str> {
    const CUT: &str = "collective chunk body cut off";
    let mut c = Cursor::new(body);
    let n_attrs = c.varint().ok_or(CUT)?;
    let dict_len = c.varint().ok_or(CUT)?;
    for _ in 0..n_attrs.checked_mul(dict_len).ok_or(CUT)? {
        c.varint().ok_or(CUT)?;
    }
    let n_cols = c.varint().ok_or(CUT)? as usize;
    if n_cols <= COLLECTIVE_WAIT_COLUMN || n_cols > 64 {
        return Err("collective chunk without its enqueue column");
    }
    // The dictionary and the column count, kept as they are.
    let head = &body[..c.pos()];
    let lens: Vec<usize> = (0..n_cols)
        .map(|_| c.varint().map(|v| v as usize))
        .collect::<Option<_>>()
        .ok_or(CUT)?;
    let cols: Vec<&[u8]> = lens.iter().map(|&n| c.bytes(n)).collect::<Option<_>>().ok_or(CUT)?;
    let (mut starts, mut waits) = (Cursor::new(cols[0]), Cursor::new(cols[COLLECTIVE_WAIT_COLUMN]));
    let (mut start, mut wait, mut prev_new) = (t_min, 0u64, 0u64);
    let mut column = Vec::with_capacity(cols[COLLECTIVE_WAIT_COLUMN].len() + 10);
    while waits.remaining() > 0 {
        start = start.wrapping_add(varint::unzigzag(starts.varint().ok_or(CUT)?) as u64);
        wait = wait.wrapping_add(varint::unzigzag(waits.varint().ok_or(CUT)?) as u64);
        // `start - enqueue`: the start itself when the enqueue is unknown.
        let enqueue = start.wrapping_sub(wait);
        let new = if enqueue == 0 {
            moved(start, shift).ok_or("a time moves before 0")?
        } else {
            moved(enqueue, shift).ok_or("an enqueue time moves before 0")?;
            wait
        };
        varint::put(&mut column, varint::zigzag(new.wrapping_sub(prev_new) as i64));
        prev_new = new;
    }
    let mut out = Vec::with_capacity(body.len() + 10);
    out.extend_from_slice(head);
    for (i, &n) in lens.iter().enumerate() {
        varint::put(&mut out, if i == COLLECTIVE_WAIT_COLUMN { column.len() } else { n } as u64);
    }
    for (i, col) in cols.iter().enumerate() {
        out.extend_from_slice(if i == COLLECTIVE_WAIT_COLUMN { &column } else { col });
    }
    out.extend_from_slice(c.rest());
    Ok(out)
}

/// Append a chunk: its frame, then `payload` (`raw_len`: the body's
/// length once decompressed).
fn put_chunk(out: &mut Vec<u8>, kind: u16, flags: u16, payload: &[u8], raw_len: usize) {
    out.extend_from_slice(&Frame::of(kind, flags, payload, raw_len).encode());
    out.extend_from_slice(payload);
}
