//! Columnar encoding of one chunk of events of one kind on one track.
//!
//! Layout of an encoded body (before zstd):
//!
//! ```text
//! varint n_attrs            number of attribute fields per dictionary entry
//! varint dict_len           distinct attribute tuples in this chunk
//! dict_len × n_attrs varint the tuples (name, grid, block, bytes, ...)
//! varint n_cols             = 3 + n_series
//! n_cols × varint           byte length of each column
//! column 0: start           varint delta from the previous start (first: from the chunk's t_min)
//! column 1: duration        zigzag(end - start)
//! column 2..2+n_series      zigzag delta from the previous value in the column
//! column last: attr index   varint index into the dictionary
//! ```
//!
//! Events are sorted by start before encoding, so start deltas are small and
//! non-negative; the attribute dictionary turns the many repeated launch
//! configurations of a training loop into one small index per event.
//! Invariant: every column holds exactly `count` varints.

use crate::model::*;
use crate::units::*;
use crate::varint::{self, unzigzag, zigzag, Cursor};
use rustc_hash::FxHashMap;

/// Most per-event series any kind has.
pub(crate) const MAX_SERIES: usize = 5;
/// Most attribute fields any kind has.
pub(crate) const MAX_ATTRS: usize = 11;

type Attrs = [u64; MAX_ATTRS];
type Series = [u64; MAX_SERIES];

/// Per-kind shape: how many series and attribute fields are used.
pub(crate) fn shape(kind: EventKind) -> (usize, usize) {
    match kind {
        EventKind::Kernel => (2, 11),
        EventKind::Memcpy => (1, 6),
        EventKind::Memset => (1, 3),
        EventKind::Sync => (1, 2),
        EventKind::Api => (1, 4),
        EventKind::Marker => (0, 4),
        EventKind::Collective => (5, 11),
        EventKind::Loss => (1, 2),
    }
}

fn split(e: &Event) -> (u64, u64, Series, Attrs) {
    let mut s: Series = [0; MAX_SERIES];
    let mut a: Attrs = [0; MAX_ATTRS];
    let (start, end) = (e.start().0, e.end().0);
    match e {
        Event::Kernel(k) => {
            s[0] = k.correlation.0 as u64;
            s[1] = k.graph_node_id;
            a[..11].copy_from_slice(&[
                k.name.0 as u64,
                k.grid[0] as u64,
                k.grid[1] as u64,
                k.grid[2] as u64,
                k.block[0] as u64,
                k.block[1] as u64,
                k.block[2] as u64,
                k.static_shared_mem as u64,
                k.dynamic_shared_mem as u64,
                k.registers as u64,
                k.graph_id as u64,
            ]);
        }
        Event::Memcpy(m) => {
            s[0] = m.correlation.0 as u64;
            a[..6].copy_from_slice(&[
                m.kind.0 as u64,
                m.bytes,
                m.src_kind.0 as u64,
                m.dst_kind.0 as u64,
                m.src_device.0 as u64,
                m.dst_device.0 as u64,
            ]);
        }
        Event::Memset(m) => {
            s[0] = m.correlation.0 as u64;
            a[..3].copy_from_slice(&[m.bytes, m.value as u64, m.memory_kind.0 as u64]);
        }
        Event::Sync(y) => {
            s[0] = y.correlation.0 as u64;
            a[..2].copy_from_slice(&[y.kind.0 as u64, y.cuda_event as u64]);
        }
        Event::Api(c) => {
            s[0] = c.correlation.0 as u64;
            a[..4].copy_from_slice(&[c.domain.0 as u64, c.cbid as u64, c.name.0 as u64, c.return_value as u64]);
        }
        Event::Marker(m) => {
            a[..4].copy_from_slice(&[m.name.0 as u64, m.domain.0 as u64, m.kind.0 as u64, m.color as u64]);
        }
        Event::Collective(c) => {
            s[..5].copy_from_slice(&[c.seq, c.correlation.0 as u64, c.start.0.wrapping_sub(c.enqueue.0), c.bytes, c.count]);
            a[..11].copy_from_slice(&[
                c.comm.0,
                c.op.0 as u64,
                c.datatype.0 as u64,
                c.rank as u64,
                c.nranks as u64,
                c.root as u32 as u64,
                c.algorithm.0 as u64,
                c.protocol.0 as u64,
                c.channels as u64,
                c.device.0 as u64,
                c.stream.0 as u64,
            ]);
        }
        Event::Loss(l) => {
            s[0] = l.count;
            a[..2].copy_from_slice(&[l.source.0 as u64, l.detail.0 as u64]);
        }
    }
    (start, end, s, a)
}

fn u32f(v: u64) -> Result<u32, &'static str> {
    u32::try_from(v).map_err(|_| "attribute out of range for a 32-bit field")
}

fn u8f(v: u64) -> Result<u8, &'static str> {
    u8::try_from(v).map_err(|_| "attribute out of range for an 8-bit field")
}

fn gpu_ids(track: &Track) -> Result<(DeviceId, ContextId, StreamId), &'static str> {
    match *track {
        Track::Gpu { device, context, stream } => Ok((device, context, stream)),
        _ => Err("GPU event on a non-GPU track"),
    }
}

fn thread_id(track: &Track) -> Result<ThreadId, &'static str> {
    match *track {
        Track::Thread { tid } => Ok(tid),
        _ => Err("thread event on a non-thread track"),
    }
}

/// Build the event an attribute tuple describes, with zero times and series.
fn template(kind: EventKind, track: &Track, a: &Attrs) -> Result<Event, &'static str> {
    Ok(match kind {
        EventKind::Kernel => {
            let (device, context, stream) = gpu_ids(track)?;
            Event::Kernel(Kernel {
                start: Nanos(0),
                end: Nanos(0),
                device,
                context,
                stream,
                correlation: CorrelationId(0),
                name: StringId(u32f(a[0])?),
                grid: [u32f(a[1])?, u32f(a[2])?, u32f(a[3])?],
                block: [u32f(a[4])?, u32f(a[5])?, u32f(a[6])?],
                static_shared_mem: u32f(a[7])?,
                dynamic_shared_mem: u32f(a[8])?,
                registers: u32f(a[9])?,
                graph_id: u32f(a[10])?,
                graph_node_id: 0,
            })
        }
        EventKind::Memcpy => {
            let (device, context, stream) = gpu_ids(track)?;
            Event::Memcpy(Memcpy {
                start: Nanos(0),
                end: Nanos(0),
                device,
                context,
                stream,
                correlation: CorrelationId(0),
                kind: CopyKind(u8f(a[0])?),
                bytes: a[1],
                src_kind: MemoryKind(u8f(a[2])?),
                dst_kind: MemoryKind(u8f(a[3])?),
                src_device: DeviceId(u32f(a[4])?),
                dst_device: DeviceId(u32f(a[5])?),
            })
        }
        EventKind::Memset => {
            let (device, context, stream) = gpu_ids(track)?;
            Event::Memset(Memset {
                start: Nanos(0),
                end: Nanos(0),
                device,
                context,
                stream,
                correlation: CorrelationId(0),
                bytes: a[0],
                value: u32f(a[1])?,
                memory_kind: MemoryKind(u8f(a[2])?),
            })
        }
        EventKind::Sync => {
            let (device, context, stream) = gpu_ids(track)?;
            Event::Sync(Sync {
                start: Nanos(0),
                end: Nanos(0),
                device,
                context,
                stream,
                correlation: CorrelationId(0),
                kind: SyncKind(u8f(a[0])?),
                cuda_event: u32f(a[1])?,
            })
        }
        EventKind::Api => Event::Api(ApiCall {
            start: Nanos(0),
            end: Nanos(0),
            thread: thread_id(track)?,
            correlation: CorrelationId(0),
            domain: ApiDomain(u8f(a[0])?),
            cbid: u32f(a[1])?,
            name: StringId(u32f(a[2])?),
            return_value: u32f(a[3])?,
        }),
        EventKind::Marker => Event::Marker(Marker {
            start: Nanos(0),
            end: Nanos(0),
            thread: thread_id(track)?,
            name: StringId(u32f(a[0])?),
            domain: StringId(u32f(a[1])?),
            kind: MarkerKind(u8f(a[2])?),
            color: u32f(a[3])?,
        }),
        EventKind::Collective => {
            if *track != Track::Process {
                return Err("collective on a non-process track");
            }
            Event::Collective(Collective {
                start: Nanos(0),
                end: Nanos(0),
                enqueue: Nanos(0),
                comm: CommId(a[0]),
                op: StringId(u32f(a[1])?),
                seq: 0,
                count: 0,
                datatype: StringId(u32f(a[2])?),
                bytes: 0,
                rank: u32f(a[3])?,
                nranks: u32f(a[4])?,
                root: u32f(a[5])? as i32,
                algorithm: StringId(u32f(a[6])?),
                protocol: StringId(u32f(a[7])?),
                channels: u32f(a[8])?,
                device: DeviceId(u32f(a[9])?),
                stream: StreamId(u32f(a[10])?),
                correlation: CorrelationId(0),
            })
        }
        EventKind::Loss => {
            if *track != Track::Process {
                return Err("loss record on a non-process track");
            }
            Event::Loss(Loss {
                time: Nanos(0),
                source: LossSource(u8f(a[0])?),
                count: 0,
                detail: StringId(u32f(a[1])?),
            })
        }
    })
}

/// Fill the per-event fields of a copy of a template.
#[inline]
fn set_times(e: &mut Event, start: u64, end: u64, s: &Series) -> Result<(), &'static str> {
    let corr = |v: u64| u32::try_from(v).map(CorrelationId).map_err(|_| "correlation id out of range");
    match e {
        Event::Kernel(k) => {
            k.start = Nanos(start);
            k.end = Nanos(end);
            k.correlation = corr(s[0])?;
            k.graph_node_id = s[1];
        }
        Event::Memcpy(m) => {
            m.start = Nanos(start);
            m.end = Nanos(end);
            m.correlation = corr(s[0])?;
        }
        Event::Memset(m) => {
            m.start = Nanos(start);
            m.end = Nanos(end);
            m.correlation = corr(s[0])?;
        }
        Event::Sync(y) => {
            y.start = Nanos(start);
            y.end = Nanos(end);
            y.correlation = corr(s[0])?;
        }
        Event::Api(c) => {
            c.start = Nanos(start);
            c.end = Nanos(end);
            c.correlation = corr(s[0])?;
        }
        Event::Marker(m) => {
            m.start = Nanos(start);
            m.end = Nanos(end);
        }
        Event::Collective(c) => {
            c.start = Nanos(start);
            c.end = Nanos(end);
            c.seq = s[0];
            c.correlation = corr(s[1])?;
            c.enqueue = Nanos(start.wrapping_sub(s[2]));
            c.bytes = s[3];
            c.count = s[4];
        }
        Event::Loss(l) => {
            if end != start {
                return Err("loss record with a duration");
            }
            l.time = Nanos(start);
            l.count = s[0];
        }
    }
    Ok(())
}

/// Slots in the encoder's direct-mapped lookup cache (power of two).
const CACHE_SLOTS: usize = 4096;

/// Reusable scratch space for encoding chunks.
#[derive(Default)]
pub(crate) struct Encoder {
    dict: FxHashMap<Attrs, u32>,
    entries: Vec<Attrs>,
    cols: Vec<Vec<u8>>,
    /// Direct-mapped cache in front of `dict`: (chunk generation, entry
    /// index). An entry is valid only if its generation is the current one
    /// and `entries[index]` equals the tuple looked up.
    cache: Vec<(u32, u32)>,
    generation: u32,
}

/// Field-by-field compare of the used fields (a slice `==` calls memcmp,
/// which costs more than the compare itself here).
#[inline]
fn same_attrs(a: &Attrs, b: &Attrs, n: usize) -> bool {
    (0..n.min(MAX_ATTRS)).all(|i| a[i] == b[i])
}

#[inline]
fn cache_slot(a: &Attrs) -> usize {
    let h = a[0].wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ a[1].rotate_left(17) ^ a[2].rotate_left(31) ^ a[3].rotate_left(45);
    (h.wrapping_mul(0xbf58_476d_1ce4_e5b9) >> 52) as usize & (CACHE_SLOTS - 1)
}

impl Encoder {
    /// Encode `events` (all of `kind`, sorted by start, non-empty) into
    /// `out`. Returns (t_min, t_max) where t_max is the latest end.
    pub(crate) fn encode(&mut self, kind: EventKind, events: &[Event], out: &mut Vec<u8>) -> (u64, u64) {
        let (n_series, n_attrs) = shape(kind);
        let n_cols = 3 + n_series;
        self.dict.clear();
        self.entries.clear();
        if self.cache.is_empty() {
            self.cache = vec![(0, 0); CACHE_SLOTS];
        }
        // Generation 0 marks never-used slots.
        self.generation = self.generation.wrapping_add(1).max(1);
        self.cols.resize_with(n_cols, Vec::new);
        for c in &mut self.cols {
            c.clear();
            c.reserve(events.len() * 2);
        }
        let t_min = events.first().map(|e| e.start().0).unwrap_or(0);
        let mut t_max = t_min;
        let mut prev_start = t_min;
        let mut prev_series: Series = [0; MAX_SERIES];
        for e in events {
            let (start, end, s, a) = split(e);
            debug_assert_eq!(e.kind(), kind);
            t_max = t_max.max(end).max(start);
            varint::put(&mut self.cols[0], zigzag(start.wrapping_sub(prev_start) as i64));
            prev_start = start;
            varint::put(&mut self.cols[1], zigzag(end.wrapping_sub(start) as i64));
            for i in 0..n_series {
                varint::put(&mut self.cols[2 + i], zigzag(s[i].wrapping_sub(prev_series[i]) as i64));
            }
            prev_series = s;
            let slot = cache_slot(&a);
            let (gen, cached) = self.cache[slot];
            let idx = if gen == self.generation && same_attrs(&self.entries[cached as usize], &a, n_attrs) {
                cached
            } else {
                let next = self.entries.len() as u32;
                let idx = *self.dict.entry(a).or_insert_with(|| {
                    self.entries.push(a);
                    next
                });
                self.cache[slot] = (self.generation, idx);
                idx
            };
            varint::put(&mut self.cols[n_cols - 1], idx as u64);
        }
        varint::put(out, n_attrs as u64);
        varint::put(out, self.entries.len() as u64);
        for a in &self.entries {
            for v in &a[..n_attrs] {
                varint::put(out, *v);
            }
        }
        varint::put(out, n_cols as u64);
        for c in &self.cols[..n_cols] {
            varint::put(out, c.len() as u64);
        }
        for c in &self.cols[..n_cols] {
            out.extend_from_slice(c);
        }
        (t_min, t_max)
    }
}

/// Reusable scratch space for decoding chunks.
#[derive(Default)]
pub(crate) struct Decoder {
    cols: Vec<Vec<u64>>,
    templates: Vec<Event>,
}

/// Decode one column of exactly `count` varints into `out`.
fn decode_column(bytes: &[u8], count: usize, out: &mut Vec<u64>) -> Result<(), &'static str> {
    out.clear();
    out.resize(count, 0);
    let mut pos = 0;
    for v in out.iter_mut() {
        let mut value = 0u64;
        let mut shift = 0u32;
        loop {
            let b = *bytes.get(pos).ok_or("column ended early")?;
            pos += 1;
            if shift == 63 && b > 1 {
                return Err("varint overflows 64 bits");
            }
            value |= ((b & 0x7f) as u64) << shift;
            if b < 0x80 {
                break;
            }
            shift += 7;
            if shift > 63 {
                return Err("varint longer than 10 bytes");
            }
        }
        *v = value;
    }
    if pos != bytes.len() {
        return Err("column longer than the event count");
    }
    Ok(())
}

impl Decoder {
    /// Decode a body written by [`Encoder::encode`], calling `f` for each
    /// event in order (nothing is materialized).
    pub(crate) fn decode_with(
        &mut self,
        kind: EventKind,
        track: &Track,
        count: usize,
        t_min: u64,
        body: &[u8],
        mut f: impl FnMut(&Event),
    ) -> Result<(), &'static str> {
        const BAD: &str = "malformed column header";
        let (n_series, n_attrs) = shape(kind);
        let mut c = Cursor::new(body);
        if c.varint().ok_or(BAD)? != n_attrs as u64 {
            return Err("attribute count does not match the event kind");
        }
        let dict_len = c.varint().ok_or(BAD)? as usize;
        // Every entry takes at least n_attrs bytes: bound before allocating.
        if dict_len > c.remaining() / n_attrs.max(1) || dict_len > count.max(1) {
            return Err("dictionary larger than the chunk");
        }
        self.templates.clear();
        for _ in 0..dict_len {
            let mut a: Attrs = [0; MAX_ATTRS];
            for v in a.iter_mut().take(n_attrs) {
                *v = c.varint().ok_or("truncated dictionary")?;
            }
            self.templates.push(template(kind, track, &a)?);
        }
        let n_cols = 3 + n_series;
        if c.varint().ok_or(BAD)? != n_cols as u64 {
            return Err("column count does not match the event kind");
        }
        let mut lens = [0usize; 3 + MAX_SERIES];
        for l in lens.iter_mut().take(n_cols) {
            *l = c.varint().ok_or(BAD)? as usize;
        }
        self.cols.resize_with(n_cols, Vec::new);
        for (i, &l) in lens[..n_cols].iter().enumerate() {
            // Each event needs at least one byte in every column.
            if l < count {
                return Err("column shorter than the event count");
            }
            let bytes = c.bytes(l).ok_or("column runs past the chunk")?;
            decode_column(bytes, count, &mut self.cols[i])?;
        }
        if c.remaining() != 0 {
            return Err("trailing bytes after the columns");
        }
        let cols = &self.cols;
        let mut start = t_min;
        let mut series: Series = [0; MAX_SERIES];
        #[allow(clippy::needless_range_loop)] // rows across several columns
        for i in 0..count {
            start = start.wrapping_add(unzigzag(cols[0][i]) as u64);
            let end = start.wrapping_add(unzigzag(cols[1][i]) as u64);
            for (j, s) in series.iter_mut().enumerate().take(n_series) {
                *s = s.wrapping_add(unzigzag(cols[2 + j][i]) as u64);
            }
            let idx = cols[n_cols - 1][i] as usize;
            let mut e = *self.templates.get(idx).ok_or("attribute index out of range")?;
            set_times(&mut e, start, end, &series)?;
            f(&e);
        }
        Ok(())
    }
}
