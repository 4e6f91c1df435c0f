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

type Attrs = [u64; MAX_ATTRS];
type Series = [u64; MAX_SERIES];

/// The columns of each event kind, described once: everything else in this
/// file (the chunk shape, the encoder's rows, the decoder's templates and
/// per-event setters, the span readers, kernel packing) is derived from it.
///
/// Each entry names the [`Event`] variant and its struct, binds a name
/// (`k`) for the field paths that follow, and gives:
/// - the track its chunks are on: `gpu(device, context, stream)` (the
///   fields the track fills in), `thread(thread)`, or `process("error")`;
/// - its times: `span(start, end)` (the start and duration columns), or
///   `instant(time, "error")` (a duration is refused when decoding);
/// - `series`: per-event fields, one delta-coded column each, in order;
/// - `attrs`: the fields of its dictionary entries, in on-disk order;
///   `attrs[packed]` holds them two to a word while a chunk is built (every
///   field must then be at most 32 bits, which the compiler checks).
///
/// A field is `plain(path)`: its value ([`Word`]), or `before_start(path)`:
/// a time, stored as how long before the event's start it is.
///
/// Adding a field to a kind is one line here (in `series` or `attrs`,
/// whose order is the on-disk order; `MAX_SERIES`, `MAX_ATTRS` and the
/// packing follow), plus a [`Word`] impl if its type is new; then the field
/// in the model's struct and its users (struct literals, exports), and the
/// format's table (docs/format.md) and version: files written before have
/// one field or column fewer, which the reader refuses as malformed. A new
/// kind is one entry here, and its variant in the model. A kind read as
/// spans ([`EventKind::has_spans`]) has at most two series: the correlation
/// id, then what [`Span::node`] carries.
macro_rules! event_columns {
    ($(
        $Variant:ident($x:ident: $Struct:ident) on $track:ident($($track_fields:tt)*), $timing:ident($($times:tt)*) {
            series: [$($sc:ident($sp:expr)),* $(,)?],
            attrs$([$packed:ident])?: [$($ac:ident($ap:expr)),* $(,)?] $(,)?
        }
    )*) => {
        $(
            impl KindColumns for $Struct {
                const KIND: EventKind = EventKind::$Variant;
                const SERIES: usize = count!($($sc)*);
                const ATTRS: usize = count!($($ac)*);
                const WORDS: usize = if packed!($($packed)?) { Self::ATTRS.div_ceil(2) } else { Self::ATTRS };

                #[inline(always)]
                fn push_into(&self, buf: &mut ChunkBuf) {
                    let $x = self;
                    let (start, end) = timing!(get, $timing($($times)*));
                    let s = [$(coding::$sc::put(start, $sp)),*];
                    let a = attr_words!($Struct, start, [$($ac($ap)),*] $($packed)?);
                    buf.push_row(start, end, s, a)
                }

                fn template(track: &Track, a: &[u64]) -> Result<Self, &'static str> {
                    let mut event = Self::default();
                    let $x = &mut event;
                    on_track!(track, $track($($track_fields)*));
                    let mut i = 0;
                    $(
                        $ap = coding::$ac::get(0, a[i])?;
                        i += 1;
                    )*
                    debug_assert_eq!(i, Self::ATTRS);
                    Ok(event)
                }

                #[inline(always)]
                #[allow(unused_assignments, unused_mut, unused_variables)] // a kind without series
                fn set_row(&mut self, start: u64, end: u64, s: &[u64]) -> Result<(), &'static str> {
                    let $x = self;
                    timing!(set, $x, start, end, $timing($($times)*));
                    let mut i = 0;
                    $(
                        $sp = coding::$sc::get(start, s[i])?;
                        i += 1;
                    )*
                    Ok(())
                }
            }

        )*

        /// Most per-event series any kind has.
        pub(crate) const MAX_SERIES: usize = most(&[$(<$Struct as KindColumns>::SERIES),*]);
        /// Most attribute fields any kind has.
        pub(crate) const MAX_ATTRS: usize = most(&[$(<$Struct as KindColumns>::ATTRS),*]);

        /// A kind's shape: how many series and (on-disk) attribute fields it has.
        pub(crate) fn shape(kind: EventKind) -> (usize, usize) {
            match kind {
                $(EventKind::$Variant => (<$Struct as KindColumns>::SERIES, <$Struct as KindColumns>::ATTRS),)*
            }
        }

        /// Attribute words per entry of a kind's dictionary while its chunk is
        /// built: as on disk ([`shape`]), or half as many for a packed kind
        /// (`attrs[packed]`: comparing a kernel launch with the predicted
        /// tuple then reads six words instead of eleven).
        fn memory_attrs(kind: EventKind) -> usize {
            match kind {
                $(EventKind::$Variant => <$Struct as KindColumns>::WORDS,)*
            }
        }

        /// Build the event an attribute tuple (as on disk) describes, with
        /// zero times and series.
        fn template(kind: EventKind, track: &Track, a: &Attrs) -> Result<Event, &'static str> {
            Ok(match kind {
                $(EventKind::$Variant => Event::$Variant(<$Struct as KindColumns>::template(track, a)?),)*
            })
        }

        /// Fill the per-event fields of a copy of a template.
        #[inline(always)]
        fn set_times(e: &mut Event, start: u64, end: u64, s: &Series) -> Result<(), &'static str> {
            match e {
                $(Event::$Variant(x) => x.set_row(start, end, s),)*
            }
        }

        impl ChunkBuf {
            /// Add one event (of this buffer's kind).
            #[inline]
            pub(crate) fn push(&mut self, e: &Event) {
                debug_assert_eq!(e.kind(), self.kind);
                match e {
                    $(Event::$Variant(x) => x.push_into(self),)*
                }
            }
        }

        /// Decode `count` rows of columns [`open_body`] checked, whose
        /// dictionary is in `templates`: one monomorphic loop per kind (the
        /// series count is a constant and the per-event fields are set
        /// without matching on the kind).
        fn decode_rows(
            kind: EventKind,
            cols: &mut Columns<'_>,
            templates: &mut [Event],
            count: usize,
            t_min: u64,
            f: &mut impl FnMut(&Event),
        ) -> Result<(), &'static str> {
            match kind {
                $(EventKind::$Variant => assemble::<{ <$Struct as KindColumns>::SERIES }>(cols, templates, count, t_min, f, |e, start, end, s| {
                    let Event::$Variant(x) = e else { return Err("template of another kind") };
                    x.set_row(start, end, s)
                }),)*
            }
        }

        /// A span's event: `template` with the span's start, end and series
        /// (correlation id and node id; see [`Span::event`]).
        #[inline]
        fn span_event(template: &Event, span: &Span) -> Event {
            let mut e = *template;
            let mut series: Series = [0; MAX_SERIES];
            (series[0], series[1]) = (span.corr as u64, span.node);
            match &mut e {
                $(Event::$Variant(x) if EventKind::$Variant.has_spans() => {
                    // Cannot fail: the correlation id fits 32 bits, and a
                    // kind with spans has durations.
                    let _ = x.set_row(span.start, span.end, &series);
                })*
                // Kinds spans are not read of (see `SpanRows`).
                _ => {}
            }
            e
        }
    };
}

/// The largest of `v` (0 for none).
const fn most(v: &[usize]) -> usize {
    let (mut i, mut m) = (0, 0);
    while i < v.len() {
        if v[i] > m {
            m = v[i];
        }
        i += 1;
    }
    m
}

/// How many token trees.
macro_rules! count {
    () => { 0usize };
    ($head:tt $($tail:tt)*) => { 1usize + count!($($tail)*) };
}

/// Whether `attrs` was marked `[packed]`.
macro_rules! packed {
    () => {
        false
    };
    (packed) => {
        true
    };
}

/// A row's attribute words from its fields: as on disk, or packed two to a
/// word (`packed`; each field then must be a [`Word32`]).
macro_rules! attr_words {
    ($T:ident, $start:ident, [$($c:ident($p:expr)),*]) => {
        [$(coding::$c::put($start, $p)),*]
    };
    ($T:ident, $start:ident, [$($c:ident($p:expr)),*] packed) => {
        pack::<{ <$T as KindColumns>::ATTRS }, { <$T as KindColumns>::WORDS }>([$(coding::$c::put32($start, $p)),*])
    };
}

/// Fill in (`template`) the fields a track gives, or check the track.
macro_rules! on_track {
    ($track:ident, gpu($device:expr, $context:expr, $stream:expr)) => {
        ($device, $context, $stream) = gpu_ids($track)?
    };
    ($track:ident, thread($thread:expr)) => {
        $thread = thread_id($track)?
    };
    ($track:ident, process($err:literal)) => {
        if *$track != Track::Process {
            return Err($err);
        }
    };
}

/// A kind's times: its start and end columns (`get`), or setting them from
/// a decoded row (`set`).
macro_rules! timing {
    (get, span($start:expr, $end:expr)) => {
        (($start).0, ($end).0)
    };
    (get, instant($time:expr, $err:literal)) => {
        (($time).0, ($time).0)
    };
    (set, $x:ident, $s:ident, $e:ident, span($start:expr, $end:expr)) => {{
        let base = &*$x as *const _ as usize;
        let at = |p: *const Nanos| p as usize - base;
        let (at_start, at_end) = (at(::std::ptr::addr_of!($start)), at(::std::ptr::addr_of!($end)));
        store_span($x, at_start, at_end, $s, $e);
    }};
    (set, $x:ident, $s:ident, $e:ident, instant($time:expr, $err:literal)) => {{
        if $e != $s {
            return Err($err);
        }
        $time = Nanos($s);
    }};
}

event_columns! {
    Kernel(k: Kernel) on gpu(k.device, k.context, k.stream), span(k.start, k.end) {
        series: [plain(k.correlation), plain(k.graph_node_id)],
        attrs[packed]: [
            plain(k.name),
            plain(k.grid[0]),
            plain(k.grid[1]),
            plain(k.grid[2]),
            plain(k.block[0]),
            plain(k.block[1]),
            plain(k.block[2]),
            plain(k.static_shared_mem),
            plain(k.dynamic_shared_mem),
            plain(k.registers),
            plain(k.graph_id),
        ],
    }
    Memcpy(m: Memcpy) on gpu(m.device, m.context, m.stream), span(m.start, m.end) {
        series: [plain(m.correlation)],
        attrs: [
            plain(m.kind),
            plain(m.bytes),
            plain(m.src_kind),
            plain(m.dst_kind),
            plain(m.src_device),
            plain(m.dst_device),
        ],
    }
    Memset(m: Memset) on gpu(m.device, m.context, m.stream), span(m.start, m.end) {
        series: [plain(m.correlation)],
        attrs: [plain(m.bytes), plain(m.value), plain(m.memory_kind)],
    }
    Sync(y: Sync) on gpu(y.device, y.context, y.stream), span(y.start, y.end) {
        series: [plain(y.correlation)],
        attrs: [plain(y.kind), plain(y.cuda_event)],
    }
    Api(c: ApiCall) on thread(c.thread), span(c.start, c.end) {
        series: [plain(c.correlation)],
        attrs: [plain(c.domain), plain(c.cbid), plain(c.name), plain(c.return_value)],
    }
    Marker(m: Marker) on thread(m.thread), span(m.start, m.end) {
        series: [],
        attrs: [plain(m.name), plain(m.domain), plain(m.kind), plain(m.color)],
    }
    Collective(c: Collective) on process("collective on a non-process track"), span(c.start, c.end) {
        series: [plain(c.seq), plain(c.correlation), before_start(c.enqueue), plain(c.bytes), plain(c.count)],
        attrs: [
            plain(c.comm),
            plain(c.op),
            plain(c.datatype),
            plain(c.rank),
            plain(c.nranks),
            plain(c.root),
            plain(c.algorithm),
            plain(c.protocol),
            plain(c.channels),
            plain(c.device),
            plain(c.stream),
        ],
    }
    Loss(l: Loss) on process("loss record on a non-process track"), instant(l.time, "loss record with a duration") {
        series: [plain(l.count)],
        attrs: [plain(l.source), plain(l.detail)],
    }
    Counter(c: Counter) on process("counter sample on a non-process track"), instant(c.time, "counter sample with a duration") {
        series: [plain(c.value)],
        attrs: [plain(c.device), plain(c.metric)],
    }
    GraphLaunch(g: GraphLaunch) on gpu(g.device, g.context, g.stream), span(g.start, g.end) {
        series: [plain(g.correlation)],
        attrs: [plain(g.graph_id)],
    }
    Request(r: Request) on process("request mark on a non-process track"), instant(r.time, "request mark with a duration") {
        series: [plain(r.id), plain(r.tokens)],
        attrs: [plain(r.phase)],
    }
}

/// An event struct's columns, generated from its kind's entry in
/// [`event_columns!`].
pub(crate) trait KindColumns: Copy + Default {
    /// Its kind.
    const KIND: EventKind;
    /// Per-event series: the columns after start and duration.
    const SERIES: usize;
    /// Attribute fields per dictionary entry, on disk.
    const ATTRS: usize;
    /// Attribute words per dictionary entry in memory ([`memory_attrs`]).
    const WORDS: usize;
    /// Add the event to a chunk buffer of its kind.
    fn push_into(&self, buf: &mut ChunkBuf);
    /// The event a dictionary entry (`a`: at least `ATTRS` fields, as on
    /// disk) on `track` describes, with zero times and series.
    fn template(track: &Track, a: &[u64]) -> Result<Self, &'static str>;
    /// Set the per-event fields: start, end and the series (the first
    /// `SERIES` of `s`).
    fn set_row(&mut self, start: u64, end: u64, s: &[u64]) -> Result<(), &'static str>;
}

/// A field's value in a column (`plain` coding), and back: a value that
/// does not fit the field is an error naming the field's width.
trait Word: Sized {
    fn word(self) -> u64;
    fn from_word(w: u64) -> Result<Self, &'static str>;
}

/// A [`Word`] of at most 32 bits, which a packed kind's attributes are.
trait Word32: Word {
    fn word32(self) -> u32;
}

const WIDE_32: &str = "attribute out of range for a 32-bit field";
const WIDE_8: &str = "attribute out of range for an 8-bit field";

impl Word for u64 {
    fn word(self) -> u64 {
        self
    }
    fn from_word(w: u64) -> Result<u64, &'static str> {
        Ok(w)
    }
}

impl Word for CommId {
    fn word(self) -> u64 {
        self.0
    }
    fn from_word(w: u64) -> Result<CommId, &'static str> {
        Ok(CommId(w))
    }
}

impl Word for u32 {
    fn word(self) -> u64 {
        self as u64
    }
    fn from_word(w: u64) -> Result<u32, &'static str> {
        u32::try_from(w).map_err(|_| WIDE_32)
    }
}

impl Word32 for u32 {
    fn word32(self) -> u32 {
        self
    }
}

/// A signed field (a collective's root, -1 for none) as its 32 bits.
impl Word for i32 {
    fn word(self) -> u64 {
        self as u32 as u64
    }
    fn from_word(w: u64) -> Result<i32, &'static str> {
        Ok(u32::from_word(w)? as i32)
    }
}

impl Word for CorrelationId {
    fn word(self) -> u64 {
        self.0 as u64
    }
    fn from_word(w: u64) -> Result<CorrelationId, &'static str> {
        u32::try_from(w).map(CorrelationId).map_err(|_| "correlation id out of range")
    }
}

/// Newtypes of 32-bit ids.
macro_rules! word_u32 {
    ($($t:ident),*) => {$(
        impl Word for $t {
            fn word(self) -> u64 {
                self.0 as u64
            }
            fn from_word(w: u64) -> Result<$t, &'static str> {
                u32::from_word(w).map($t)
            }
        }
        impl Word32 for $t {
            fn word32(self) -> u32 {
                self.0
            }
        }
    )*};
}
word_u32!(StringId, DeviceId, StreamId);

/// Newtypes of 8-bit enumerations.
macro_rules! word_u8 {
    ($($t:ident),*) => {$(
        impl Word for $t {
            fn word(self) -> u64 {
                self.0 as u64
            }
            fn from_word(w: u64) -> Result<$t, &'static str> {
                u8::try_from(w).map($t).map_err(|_| WIDE_8)
            }
        }
        impl Word32 for $t {
            fn word32(self) -> u32 {
                self.0 as u32
            }
        }
    )*};
}
word_u8!(CopyKind, MemoryKind, SyncKind, ApiDomain, MarkerKind, LossSource, RequestPhase);

/// How a field is held in its column (see [`event_columns!`]); `start` is
/// the event's start.
mod coding {
    use super::{Nanos, Word, Word32};

    /// As its value.
    pub(super) mod plain {
        use super::*;

        #[inline(always)]
        pub(crate) fn put<T: Word>(_start: u64, v: T) -> u64 {
            v.word()
        }
        #[inline(always)]
        pub(crate) fn put32<T: Word32>(_start: u64, v: T) -> u32 {
            v.word32()
        }
        #[inline(always)]
        pub(crate) fn get<T: Word>(_start: u64, w: u64) -> Result<T, &'static str> {
            T::from_word(w)
        }
    }

    /// A time as how long before the event's start it is.
    pub(super) mod before_start {
        use super::*;

        #[inline(always)]
        pub(crate) fn put(start: u64, v: Nanos) -> u64 {
            start.wrapping_sub(v.0)
        }
        #[inline(always)]
        pub(crate) fn get(start: u64, w: u64) -> Result<Nanos, &'static str> {
            Ok(Nanos(start.wrapping_sub(w)))
        }
    }
}

/// 32-bit fields two to a word: field `2i` in the low half of word `i`,
/// field `2i + 1` in the high half.
#[inline(always)]
fn pack<const N: usize, const W: usize>(a: [u32; N]) -> [u64; W] {
    let mut w = [0u64; W];
    for (i, &v) in a.iter().enumerate() {
        w[i / 2] |= (v as u64) << (32 * (i % 2));
    }
    w
}

/// The first `n` fields of a packed tuple ([`pack`]), one to a word.
fn unpack(a: &Attrs, n: usize) -> Attrs {
    let mut out = [0; MAX_ATTRS];
    for (i, v) in out.iter_mut().enumerate().take(n) {
        *v = (a[i / 2] >> (32 * (i % 2))) & 0xFFFF_FFFF;
    }
    out
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

/// Slots in a chunk buffer's direct-mapped lookup cache: it starts small
/// and doubles (up to the most) while the dictionary outgrows a quarter of it,
/// so a track with a few distinct tuples costs little memory and one with
/// hundreds of kernels sees few conflicts. Powers of two.
const CACHE_MIN_SLOTS: usize = 64;
const CACHE_MAX_SLOTS: usize = 8192;

/// Events of one kind on one track until the chunk is written, and the
/// attribute dictionary, built as events arrive.
///
/// While events arrive in start order (the usual case: kernels on a stream,
/// copies, most API calls), each is encoded on arrival into its varint
/// columns (`streaming`: a varint per column, nothing left to do when the
/// chunk is written). The first event that starts before its predecessor
/// turns the buffer to raw columns (20 bytes per event plus 8 per series),
/// which are sorted and encoded when the chunk is written.
///
/// Invariants. Streaming: each used `stream` column holds exactly
/// `streamed` varints, encoded from `first_start`; `prev_start` and
/// `prev_series` are those of the last streamed event (`prev_start` is 0
/// and `room` is 0 while none is); `t_max` is the latest end of the
/// streamed events (or the first start); `held` is one more event when
/// `holding`; the raw columns are empty. Raw: `starts`, `ends` and `attr_idx` have one entry per
/// event, `series` has `n_series` per event (row-major), `stream` is empty,
/// and `sorted` is true iff `starts` is non-decreasing. Every attribute
/// index is an index into `entries`.
pub(crate) struct ChunkBuf {
    kind: EventKind,
    n_series: usize,
    /// Attribute words per dictionary entry in memory ([`memory_attrs`]).
    n_attrs: usize,
    streaming: bool,
    /// Events held (streamed, held back or raw).
    count: usize,
    /// Columns as written: start delta, duration, series deltas, attribute
    /// index (the first `3 + n_series`; the others stay empty).
    stream: [Vec<u8>; 3 + MAX_SERIES],
    /// How many more events every used `stream` column has capacity for
    /// (at most 10 bytes each), so that appending checks once per event.
    room: usize,
    /// Events in `stream`.
    streamed: usize,
    /// Whether events are held back one at a time before they are streamed:
    /// set (for good) by the first event this buffer saw out of order. CUPTI
    /// writes an API record when the call returns, so the driver call a
    /// runtime call makes comes just before it; holding one event back puts
    /// such pairs in order at the cost of a copy per event, which in-order
    /// tracks (kernels, copies) do not pay.
    hold_back: bool,
    /// The newest event, held back (while `holding`) until the next one
    /// shows which of the two starts first. Its start is not before any
    /// streamed event's.
    held: Row,
    holding: bool,
    first_start: u64,
    prev_start: u64,
    prev_series: Series,
    t_max: u64,
    starts: Vec<u64>,
    ends: Vec<u64>,
    series: Vec<u64>,
    attr_idx: Vec<u32>,
    dict: FxHashMap<Attrs, u32>,
    entries: Vec<Attrs>,
    /// For each entry, the entry of the event that last followed it: a
    /// training loop repeats the same sequence of launches every step, so
    /// this predicts the next tuple without hashing it (checked by comparing).
    successor: Vec<u32>,
    /// Entry of the previous event (meaningless while `entries` is empty).
    last: u32,
    /// `successor[last]`, read after the previous event so that the next
    /// one does not wait for it (`u32::MAX`, no entry, when there is none).
    predicted: u32,
    /// Direct-mapped cache in front of `dict`: (generation, entry index),
    /// valid only if its generation is the current one and the entry equals
    /// the tuple looked up. Generation 0 marks never-used slots.
    cache: Vec<(u32, u32)>,
    generation: u32,
    sorted: bool,
}

/// Whether a dictionary entry holds the `NA` attributes `a` (its fields past
/// `NA` are 0 in every entry of a buffer of that kind). All fields at once,
/// branch-free, which the compiler turns into a few SIMD operations; a slice
/// `==` would call memcmp, and an early-exit loop mispredicts.
#[inline(always)]
fn same_prefix<const NA: usize>(entry: &Attrs, a: &[u64; NA]) -> bool {
    let mut diff = 0u64;
    for i in 0..NA {
        diff |= entry[i] ^ a[i];
    }
    diff == 0
}

/// Compare two whole attribute tuples (as [`same_prefix`]).
#[inline]
fn same_attrs(a: &Attrs, b: &Attrs) -> bool {
    let mut diff = 0u64;
    for i in 0..MAX_ATTRS {
        diff |= a[i] ^ b[i];
    }
    diff == 0
}

// `cache_slot` hashes the first four words.
const _: () = assert!(MAX_ATTRS >= 4);

#[inline]
fn cache_slot(a: &Attrs, slots: usize) -> usize {
    let h = a[0].wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ a[1].rotate_left(17) ^ a[2].rotate_left(31) ^ a[3].rotate_left(45);
    (h.wrapping_mul(0xbf58_476d_1ce4_e5b9) >> 40) as usize & (slots - 1)
}

/// One event's columns, held back by a streaming [`ChunkBuf`].
#[derive(Clone, Copy, Default)]
struct Row {
    start: u64,
    end: u64,
    series: Series,
    idx: u32,
}

impl Row {
    /// Overwrite with an event's columns (series past `s.len()` are left
    /// as they were: nothing reads them).
    #[inline(always)]
    fn set(&mut self, start: u64, end: u64, s: &[u64], idx: u32) {
        self.start = start;
        self.end = end;
        self.series[..s.len()].copy_from_slice(s);
        self.idx = idx;
    }
}

/// Write `v` as a varint at `base + len`; the new length.
///
/// A plain loop: nearly every value here takes one to three bytes, and
/// each column has its own inlined copy whose branch learns its lengths.
/// A branchless form (spreading the 7-bit groups over one word and storing
/// it whole) measured a third slower on the agent's writer benchmark.
///
/// # Safety
/// `base` points to at least `len + 10` writable bytes.
#[inline(always)]
unsafe fn write_varint(base: *mut u8, mut len: usize, mut v: u64) -> usize {
    // Safety: a varint is at most 10 bytes, all within the caller's room.
    unsafe {
        while v >= 0x80 {
            *base.add(len) = (v as u8) | 0x80;
            v >>= 7;
            len += 1;
        }
        *base.add(len) = v as u8;
    }
    len + 1
}

/// Append one varint to a column without a capacity check.
///
/// # Safety
/// `col` has at least 10 bytes of spare capacity.
#[inline(always)]
unsafe fn put_unchecked(col: &mut Vec<u8>, v: u64) {
    // Safety: `len + 10 <= capacity` (the caller's promise); every byte up
    // to the new length is written.
    unsafe {
        let len = write_varint(col.as_mut_ptr(), col.len(), v);
        col.set_len(len);
    }
}

/// Append `count` varints of `f(i)` to `out` (one column).
#[inline]
fn put_column(out: &mut Vec<u8>, count: usize, mut f: impl FnMut(usize) -> u64) {
    // Reserve once, then write without per-byte capacity checks.
    out.reserve(count * 10);
    let base = out.as_mut_ptr();
    let mut len = out.len();
    for i in 0..count {
        // Safety: `len + 10 <= capacity` holds for every value written,
        // because at most `count` varints of at most 10 bytes follow the
        // initial length, and all of that was reserved above.
        len = unsafe { write_varint(base, len, f(i)) };
    }
    // Safety: every byte up to `len` was written above.
    unsafe { out.set_len(len) };
}

/// Sort `perm` (indices into `keys`) stably by key. Chunks that go raw are
/// usually nearly sorted (each driver call's record a place before its
/// runtime caller's): an insertion sort puts those in order in linear
/// time; past a budget of moves, the library's stable sort finishes.
fn sort_nearly_sorted(perm: &mut [u32], keys: &[u64]) {
    let key = |i: u32| keys[i as usize];
    let mut budget = 4 * perm.len();
    for i in 1..perm.len() {
        let p = perm[i];
        let k = key(p);
        let mut j = i;
        // Strictly greater only: equal keys keep their order (stable).
        while j > 0 && key(perm[j - 1]) > k {
            perm[j] = perm[j - 1];
            j -= 1;
        }
        perm[j] = p;
        budget = budget.saturating_sub(i - j);
        if budget == 0 {
            // The prefix is sorted stably and the rest is in index order
            // (all indices after the prefix's), so a stable sort of the
            // whole gives the same order as one of the original.
            perm.sort_by_key(|&i| key(i));
            return;
        }
    }
}

impl ChunkBuf {
    /// An empty buffer for `kind`.
    pub(crate) fn new(kind: EventKind) -> ChunkBuf {
        let (n_series, _) = shape(kind);
        ChunkBuf {
            kind,
            n_series,
            n_attrs: memory_attrs(kind),
            streaming: true,
            count: 0,
            stream: Default::default(),
            room: 0,
            streamed: 0,
            hold_back: false,
            held: Row::default(),
            holding: false,
            first_start: 0,
            prev_start: 0,
            prev_series: [0; MAX_SERIES],
            t_max: 0,
            starts: Vec::new(),
            ends: Vec::new(),
            series: Vec::new(),
            attr_idx: Vec::new(),
            dict: FxHashMap::default(),
            entries: Vec::new(),
            successor: Vec::new(),
            last: 0,
            predicted: u32::MAX,
            cache: vec![(0, 0); CACHE_MIN_SLOTS],
            generation: 1,
            sorted: true,
        }
    }

    /// Events held.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.count
    }

    /// Add one event of a known struct (of this buffer's kind), without
    /// matching on an [`Event`]: the writer's path for kernels and API calls.
    #[inline(always)]
    pub(crate) fn push_typed<T: KindColumns>(&mut self, x: &T) {
        debug_assert_eq!(self.kind, T::KIND);
        x.push_into(self)
    }

    /// Add one event's columns: `NS` series and `NA` attributes (the
    /// buffer's shape).
    #[inline(always)]
    fn push_row<const NS: usize, const NA: usize>(&mut self, start: u64, end: u64, s: [u64; NS], a: [u64; NA]) {
        debug_assert_eq!((NS, NA), (self.n_series, self.n_attrs));
        self.count += 1;
        let predicted = self.predicted;
        let idx = match self.entries.get(predicted as usize) {
            // Fields past NA are 0 in every entry of this buffer.
            Some(p) if same_prefix(p, &a) => predicted,
            _ => {
                let mut full: Attrs = [0; MAX_ATTRS];
                full[..NA].copy_from_slice(&a);
                let idx = self.lookup(&full);
                if let Some(s) = self.successor.get_mut(self.last as usize) {
                    *s = idx;
                }
                idx
            }
        };
        self.last = idx;
        self.predicted = self.successor[idx as usize];
        if self.streaming {
            if !self.hold_back {
                if start >= self.prev_start {
                    self.append(start, end, &s, idx);
                    return;
                }
                // Out of order: this chunk goes raw, and this buffer holds
                // each event back from now on (see `hold_back`).
                self.hold_back = true;
            } else if self.holding && start >= self.held.start {
                // In order: the held event goes out, this one waits.
                let h = &mut self.held;
                let (h_start, h_end, h_idx) = (h.start, h.end, h.idx);
                let mut h_series = [0u64; NS];
                h_series.copy_from_slice(&h.series[..NS]);
                h.set(start, end, &s, idx);
                self.append(h_start, h_end, &h_series, h_idx);
                return;
            } else if !self.holding {
                self.holding = true;
                self.held.set(start, end, &s, idx);
                return;
            } else if start >= self.prev_start {
                // Just before the held event: this one goes out, the held
                // one waits.
                self.append(start, end, &s, idx);
                return;
            }
            self.leave_stream();
        }
        if self.starts.last().is_some_and(|&last| start < last) {
            self.sorted = false;
        }
        self.starts.push(start);
        self.ends.push(end);
        for v in s {
            self.series.push(v);
        }
        self.attr_idx.push(idx);
    }

    /// Encode one event at the end of the streamed columns (its start is
    /// not before the last one's).
    #[inline(always)]
    fn append(&mut self, start: u64, end: u64, s: &[u64], idx: u32) {
        // `make_room` also refuses a row of another shape than the buffer's
        // (an event of another kind), whose columns were not made room in.
        if (self.room == 0) | (s.len() != self.n_series) {
            self.make_room(start, s.len());
        }
        self.room -= 1;
        let cols = &mut self.stream;
        // Safety: `room` was at least 1, so every used column (the first
        // `3 + n_series`, and `s.len() == n_series`, checked above) has 10
        // spare bytes.
        unsafe {
            put_unchecked(&mut cols[0], zigzag(start.wrapping_sub(self.prev_start) as i64));
            put_unchecked(&mut cols[1], zigzag(end.wrapping_sub(start) as i64));
            for (j, &v) in s.iter().enumerate() {
                put_unchecked(&mut cols[2 + j], zigzag(v.wrapping_sub(self.prev_series[j]) as i64));
                self.prev_series[j] = v;
            }
            put_unchecked(&mut cols[2 + s.len()], idx as u64);
        }
        self.prev_start = start;
        // The latest start is `prev_start`: `encode` takes it into account.
        self.t_max = self.t_max.max(end);
        self.streamed += 1;
    }

    /// Grow the used columns so that at least 64 more events fit (each
    /// grows geometrically, so this runs rarely), and recount `room`. Also
    /// starts the chunk at its first event (`start`): `room` is 0 whenever
    /// `streamed` is. Panics if the event has `n_series` series where the
    /// buffer's kind has another number (a bug in the caller: the writer
    /// keys its buffers by kind).
    #[inline(never)]
    fn make_room(&mut self, start: u64, n_series: usize) {
        assert_eq!(n_series, self.n_series, "an event of another kind than the buffer's");
        if self.streamed == 0 {
            self.first_start = start;
            self.prev_start = start;
            self.prev_series = [0; MAX_SERIES];
            self.t_max = start;
        }
        let cols = &mut self.stream[..3 + self.n_series];
        for c in cols.iter_mut() {
            c.reserve(64 * 10);
        }
        self.room = cols.iter().map(|c| (c.capacity() - c.len()) / 10).min().unwrap_or(0);
    }

    /// Turn the streamed columns back into raw ones (an event arrived out of
    /// start order).
    #[cold]
    fn leave_stream(&mut self) {
        let n = self.streamed;
        let ns = self.n_series;
        // Each column holds exactly `n` varints (written by `push_row`), so
        // the defaults below are never used.
        let mut cols: Vec<Cursor<'_>> = self.stream.iter().map(|c| Cursor::new(c)).collect();
        let mut next = |j: usize| cols[j].varint().unwrap_or_default();
        let mut start = self.first_start;
        let mut series: Series = [0; MAX_SERIES];
        for _ in 0..n {
            start = start.wrapping_add(unzigzag(next(0)) as u64);
            self.starts.push(start);
            self.ends.push(start.wrapping_add(unzigzag(next(1)) as u64));
            for (j, v) in series.iter_mut().enumerate().take(ns) {
                *v = v.wrapping_add(unzigzag(next(2 + j)) as u64);
                self.series.push(*v);
            }
            self.attr_idx.push(next(2 + ns) as u32);
        }
        if std::mem::take(&mut self.holding) {
            let h = self.held;
            // Not before the streamed ones: the raw columns stay sorted.
            self.starts.push(h.start);
            self.ends.push(h.end);
            self.series.extend_from_slice(&h.series[..ns]);
            self.attr_idx.push(h.idx);
        }
        for c in &mut self.stream {
            c.clear();
        }
        self.room = 0;
        self.streamed = 0;
        self.prev_start = 0;
        self.streaming = false;
        self.sorted = true;
    }

    /// The dictionary index of `a`, added if new: the direct-mapped cache,
    /// then the hash map.
    #[inline]
    fn lookup(&mut self, a: &Attrs) -> u32 {
        let slot = cache_slot(a, self.cache.len());
        let (gen, cached) = self.cache[slot];
        if gen == self.generation && same_attrs(&self.entries[cached as usize], a) {
            return cached;
        }
        let next = self.entries.len() as u32;
        let idx = *self.dict.entry(*a).or_insert(next);
        if idx == next {
            self.entries.push(*a);
            self.successor.push(u32::MAX);
            if self.entries.len() * 4 > self.cache.len() && self.cache.len() < CACHE_MAX_SLOTS {
                // Grow: every slot is stale (the generation keeps counting).
                let slots = self.cache.len() * 2;
                self.cache.clear();
                self.cache.resize(slots, (0, 0));
            }
        }
        let slot = cache_slot(a, self.cache.len());
        self.cache[slot] = (self.generation, idx);
        idx
    }

    /// Put the events in start order (stable), if they are not.
    fn sort(&mut self) {
        if self.sorted {
            return;
        }
        let n = self.starts.len();
        let mut perm: Vec<u32> = (0..n as u32).collect();
        sort_nearly_sorted(&mut perm, &self.starts);
        let ns = self.n_series;
        self.starts = perm.iter().map(|&i| self.starts[i as usize]).collect();
        self.ends = perm.iter().map(|&i| self.ends[i as usize]).collect();
        self.attr_idx = perm.iter().map(|&i| self.attr_idx[i as usize]).collect();
        let mut series = Vec::with_capacity(self.series.len());
        for &i in &perm {
            series.extend_from_slice(&self.series[i as usize * ns..(i as usize + 1) * ns]);
        }
        self.series = series;
        self.sorted = true;
    }

    /// Encode the held events (non-empty) as a chunk body into `out`, using
    /// `cols` as scratch, and empty the buffer (keeping its allocations).
    /// Returns (t_min, t_max) where t_max is the latest end (or start).
    pub(crate) fn encode(&mut self, out: &mut Vec<u8>, cols: &mut Vec<Vec<u8>>) -> (u64, u64) {
        let n_cols = 3 + self.n_series;
        let (t_min, t_max) = if self.streaming {
            if self.holding {
                let h = self.held;
                self.append(h.start, h.end, &h.series[..self.n_series], h.idx);
                self.holding = false;
            }
            // Already encoded, in start order: the first start is the earliest.
            self.write_body(out, &self.stream[..n_cols]);
            (self.first_start, self.t_max.max(self.prev_start))
        } else {
            let times = self.encode_raw(cols);
            self.write_body(out, &cols[..n_cols]);
            times
        };
        self.clear();
        (t_min, t_max)
    }

    /// Sort the raw columns and encode them into `cols`; (t_min, t_max).
    fn encode_raw(&mut self, cols: &mut Vec<Vec<u8>>) -> (u64, u64) {
        self.sort();
        let n = self.starts.len();
        let ns = self.n_series;
        let n_cols = 3 + ns;
        cols.resize_with(n_cols.max(cols.len()), Vec::new);
        for c in cols.iter_mut() {
            c.clear();
        }
        let t_min = self.starts.first().copied().unwrap_or(0);
        let t_max = self.starts.iter().zip(&self.ends).fold(t_min, |m, (&s, &e)| m.max(s).max(e));
        let starts = &self.starts;
        put_column(&mut cols[0], n, |i| {
            zigzag(starts[i].wrapping_sub(if i == 0 { t_min } else { starts[i - 1] }) as i64)
        });
        let ends = &self.ends;
        put_column(&mut cols[1], n, |i| zigzag(ends[i].wrapping_sub(starts[i]) as i64));
        let series = &self.series;
        for j in 0..ns {
            put_column(&mut cols[2 + j], n, |i| {
                let prev = if i == 0 { 0 } else { series[(i - 1) * ns + j] };
                zigzag(series[i * ns + j].wrapping_sub(prev) as i64)
            });
        }
        let idx = &self.attr_idx;
        put_column(&mut cols[n_cols - 1], n, |i| idx[i] as u64);
        (t_min, t_max)
    }

    /// The body: dictionary, column lengths, columns.
    fn write_body(&self, out: &mut Vec<u8>, cols: &[Vec<u8>]) {
        let on_disk = shape(self.kind).1;
        varint::put(out, on_disk as u64);
        varint::put(out, self.entries.len() as u64);
        for a in &self.entries {
            let a = if self.n_attrs == on_disk { *a } else { unpack(a, on_disk) };
            for v in &a[..on_disk] {
                varint::put(out, *v);
            }
        }
        varint::put(out, cols.len() as u64);
        for c in cols {
            varint::put(out, c.len() as u64);
        }
        for c in cols {
            out.extend_from_slice(c);
        }
    }

    fn clear(&mut self) {
        self.count = 0;
        self.streamed = 0;
        self.holding = false;
        self.streaming = true;
        for c in &mut self.stream {
            c.clear();
        }
        // Recounted from the kept capacity at the next append.
        self.room = 0;
        self.prev_start = 0;
        self.starts.clear();
        self.ends.clear();
        self.series.clear();
        self.attr_idx.clear();
        self.dict.clear();
        self.entries.clear();
        self.successor.clear();
        self.predicted = u32::MAX;
        self.generation = self.generation.wrapping_add(1).max(1);
        self.sorted = true;
    }
}

/// Reusable scratch space for decoding chunks.
#[derive(Default)]
pub(crate) struct Decoder {
    templates: Vec<Event>,
}

/// A column checked by [`Column::new`] to hold exactly `count` varints,
/// read one varint at a time without bounds checks.
///
/// Invariant: the bytes from `pos` to the column's end hold exactly as many
/// varint-ending bytes (top bit clear) as varints are still to be read, and
/// the last byte is one, so every read stops inside the column. (Varints
/// longer than 10 bytes are not refused up front: `overlong` records them,
/// and the reader reports the chunk as corrupt after its last event.)
#[derive(Clone, Copy)]
struct Column<'a> {
    pos: *const u8,
    overlong: bool,
    _bytes: std::marker::PhantomData<&'a [u8]>,
}

impl<'a> Column<'a> {
    /// Check that `bytes` is exactly `count` varints of at most 10 bytes.
    fn new(bytes: &'a [u8], count: usize) -> Result<Column<'a>, &'static str> {
        // A varint ends at each byte without its top bit: count those, eight
        // bytes at a time, and the column must end with one.
        let mut words = bytes.chunks_exact(8);
        let mut stops = 0usize;
        for w in &mut words {
            let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            // One per stop byte, summed by a multiply (the baseline x86-64
            // target has no popcnt: `count_ones` is a dozen operations).
            let ones = (!w & 0x8080_8080_8080_8080) >> 7;
            stops += (ones.wrapping_mul(0x0101_0101_0101_0101) >> 56) as usize;
        }
        stops += words.remainder().iter().filter(|&&b| b < 0x80).count();
        if stops < count || bytes.last().is_some_and(|&b| b >= 0x80) {
            return Err("column ended early");
        }
        if stops > count {
            return Err("column longer than the event count");
        }
        Ok(Column {
            pos: bytes.as_ptr(),
            overlong: false,
            _bytes: std::marker::PhantomData,
        })
    }

    /// Whether a varint read so far was longer than 10 bytes or overflowed
    /// 64 bits (checked once per column, after reading it).
    fn overlong(&self) -> bool {
        self.overlong
    }

    /// The next varint. The caller reads at most `count` of them.
    #[inline(always)]
    fn next(&mut self) -> u64 {
        // Safety: by the invariant, a varint starts at `pos` and ends within
        // the column; the caller reads no more varints than the column holds.
        unsafe {
            let b = *self.pos;
            self.pos = self.pos.add(1);
            if b < 0x80 {
                return b as u64;
            }
            // Two and three bytes (time deltas, durations) unrolled: each
            // length gets its own branch, which predicts better than a loop.
            let b1 = *self.pos;
            self.pos = self.pos.add(1);
            let mut value = (b & 0x7f) as u64 | ((b1 & 0x7f) as u64) << 7;
            if b1 < 0x80 {
                return value;
            }
            let b2 = *self.pos;
            self.pos = self.pos.add(1);
            value |= ((b2 & 0x7f) as u64) << 14;
            if b2 < 0x80 {
                return value;
            }
            self.next_long(value)
        }
    }

    /// The rest of a varint of four or more bytes whose first three gave `value`.
    #[inline(never)]
    fn next_long(&mut self, mut value: u64) -> u64 {
        // Safety: as in `next`: the varint ends within the column.
        unsafe {
            let mut shift = 21;
            loop {
                let b = *self.pos;
                self.pos = self.pos.add(1);
                // A 10th byte may only hold the top bit of a u64; longer or
                // larger varints are flagged (and their value is garbage,
                // never undefined behaviour).
                if shift >= 63 {
                    self.overlong |= shift > 63 || b > 1;
                }
                value |= ((b & 0x7f) as u64).wrapping_shl(shift);
                if b < 0x80 {
                    return value;
                }
                shift += 7;
            }
        }
    }
}

/// The columns of a chunk body (start, duration, the series, attribute
/// index; `None` past the kind's count), each checked to hold `count`
/// varints, after filling `templates` from its dictionary.
type Columns<'a> = [Option<Column<'a>>; 3 + MAX_SERIES];

fn open_body<'a>(
    kind: EventKind,
    track: &Track,
    count: usize,
    body: &'a [u8],
    templates: &mut Vec<Event>,
) -> Result<Columns<'a>, &'static str> {
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
    templates.clear();
    for _ in 0..dict_len {
        let mut a: Attrs = [0; MAX_ATTRS];
        for v in a.iter_mut().take(n_attrs) {
            *v = c.varint().ok_or("truncated dictionary")?;
        }
        templates.push(template(kind, track, &a)?);
    }
    let n_cols = 3 + n_series;
    if c.varint().ok_or(BAD)? != n_cols as u64 {
        return Err("column count does not match the event kind");
    }
    let mut lens = [0usize; 3 + MAX_SERIES];
    for l in lens.iter_mut().take(n_cols) {
        *l = c.varint().ok_or(BAD)? as usize;
    }
    let mut cols: Columns<'a> = Default::default();
    for (i, &l) in lens[..n_cols].iter().enumerate() {
        let bytes = c.bytes(l).ok_or("column runs past the chunk")?;
        cols[i] = Some(Column::new(bytes, count)?);
    }
    if c.remaining() != 0 {
        return Err("trailing bytes after the columns");
    }
    Ok(cols)
}

/// A chunk body read one event at a time, in order, from its columns
/// (nothing materialized but the current event).
///
/// Invariant: the columns hold `left` more varints each.
pub(crate) struct Rows<'a> {
    cols: Columns<'a>,
    n_series: usize,
    left: usize,
    start: u64,
    /// The current event's end (its `Event::end`: a loss with a duration
    /// fails to decode).
    end: u64,
    series: Series,
    templates: Vec<Event>,
    /// Template holding the current event; `usize::MAX` before the first.
    cur: usize,
}

// Safety: `Rows` only reads its body (through the columns' pointers), which
// the `'a` borrow keeps alive and unchanged; nothing in it is shared.
unsafe impl Send for Rows<'_> {}

impl<'a> Rows<'a> {
    /// Open a body, positioned before its first event (`templates`: storage
    /// to reuse).
    pub(crate) fn open(
        kind: EventKind,
        track: &Track,
        count: usize,
        t_min: u64,
        body: &'a [u8],
        mut templates: Vec<Event>,
    ) -> Result<Rows<'a>, &'static str> {
        let cols = open_body(kind, track, count, body, &mut templates)?;
        Ok(Rows::of_columns(kind, cols, count, t_min, templates))
    }

    /// Rows of columns [`open_body`] checked, whose dictionary is in `templates`.
    fn of_columns(kind: EventKind, cols: Columns<'a>, count: usize, t_min: u64, templates: Vec<Event>) -> Rows<'a> {
        Rows {
            cols,
            n_series: shape(kind).0,
            left: count,
            start: t_min,
            end: t_min,
            series: [0; MAX_SERIES],
            templates,
            cur: usize::MAX,
        }
    }

    /// Move to the next event: false at the end.
    #[inline(always)]
    pub(crate) fn advance(&mut self) -> Result<bool, &'static str> {
        const BAD: &str = "malformed column header";
        if self.left == 0 {
            return Ok(false);
        }
        self.left -= 1;
        let ns = self.n_series;
        let [Some(c0), Some(c1), rest @ ..] = &mut self.cols else {
            return Err(BAD);
        };
        self.start = self.start.wrapping_add(unzigzag(c0.next()) as u64);
        let end = self.start.wrapping_add(unzigzag(c1.next()) as u64);
        for (s, col) in self.series.iter_mut().zip(rest.iter_mut()).take(ns) {
            *s = s.wrapping_add(unzigzag(col.as_mut().ok_or(BAD)?.next()) as u64);
        }
        let idx = rest[ns].as_mut().ok_or(BAD)?.next() as usize;
        if self.left == 0 && self.cols.iter().flatten().any(|c| c.overlong()) {
            return Err("varint longer than 10 bytes");
        }
        let e = self.templates.get_mut(idx).ok_or("attribute index out of range")?;
        set_times(e, self.start, end, &self.series)?;
        self.cur = idx;
        self.end = end;
        Ok(true)
    }

    /// The current event's start and end (after an `advance` that returned
    /// true): what `Event::start` and `Event::end` give, without matching
    /// on its kind.
    #[inline]
    pub(crate) fn times(&self) -> (u64, u64) {
        (self.start, self.end)
    }

    /// The current event (after an `advance` that returned true).
    #[inline]
    pub(crate) fn current(&self) -> Option<&Event> {
        self.templates.get(self.cur)
    }

    /// Give back the template storage for reuse.
    pub(crate) fn into_templates(self) -> Vec<Event> {
        self.templates
    }
}

/// What a span reader (`SpanCursor::fill`) reads of each event: its start
/// and end, its correlation id (0 for kinds without one), the index of its
/// attributes in the chunk's dictionary and, when asked for, a kernel's
/// graph node id. 32 bytes, so a block of them stays in cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    /// Start (ns).
    pub start: u64,
    /// End (ns).
    pub end: u64,
    /// Correlation id: the first series of kernels, copies, memsets,
    /// synchronizations and API calls; 0 for markers.
    pub corr: u32,
    /// Index of the event's attribute tuple in the chunk's dictionary (a
    /// valid index into the templates the rows were opened with).
    pub attr: u32,
    /// A kernel's graph node id (its second series) once
    /// [`crate::SpanCursor::read_node_ids`] asked for it; 0 otherwise.
    pub node: u64,
}

impl Span {
    /// The event this span is of: `template` (its entry in the chunk's
    /// dictionary, see [`crate::SpanCursor::templates`]) with the span's
    /// start, end, correlation id and (a kernel's) graph node id: the
    /// event itself when its cursor read node ids.
    #[inline]
    pub fn event(&self, template: &Event) -> Event {
        span_event(template, self)
    }
}

/// Spans decoded per `SpanCursor::fill` call.
pub const SPAN_BLOCK: usize = 64;

/// A chunk body read as [`Span`]s, a block at a time: only the start,
/// duration, correlation and attribute-index columns are read (the others
/// were checked to hold one varint per event when the body was opened, as
/// every column is). For kinds whose first series is the correlation id,
/// and markers.
///
/// Invariant: the columns read hold `left` more varints each; `corr_col`
/// is `Some` iff the kind has a correlation series (until then `corr` is 0).
pub(crate) struct SpanRows<'a> {
    start_col: Column<'a>,
    /// `None` once ends are skipped ([`SpanRows::skip`]).
    dur_col: Option<Column<'a>>,
    corr_col: Option<Column<'a>>,
    /// `None` once dictionary indexes are skipped.
    idx_col: Option<Column<'a>>,
    /// A kernel's graph node ids, once asked for ([`SpanRows::read_nodes`]).
    node_col: Option<Column<'a>>,
    /// Where they are until then (`None` for other kinds).
    node_avail: Option<Column<'a>>,
    node: u64,
    left: usize,
    start: u64,
    corr: u64,
    n_templates: usize,
}

// Safety: as for `Rows`: only the borrowed body is read.
unsafe impl Send for SpanRows<'_> {}

impl<'a> SpanRows<'a> {
    /// Open a body (filling `templates` with its dictionary).
    pub(crate) fn open(
        kind: EventKind,
        track: &Track,
        count: usize,
        t_min: u64,
        body: &'a [u8],
        templates: &mut Vec<Event>,
    ) -> Result<SpanRows<'a>, &'static str> {
        const BAD: &str = "malformed column header";
        if !kind.has_spans() {
            return Err("no spans for this event kind");
        }
        // A kind with spans has at most two series: the correlation id,
        // then (kernels) the graph node id.
        let n_series = shape(kind).0;
        let mut cols = open_body(kind, track, count, body, templates)?;
        let mut take = |i: usize| cols[i].take().ok_or(BAD);
        Ok(SpanRows {
            start_col: take(0)?,
            dur_col: Some(take(1)?),
            corr_col: if n_series >= 1 { Some(take(2)?) } else { None },
            idx_col: Some(take(2 + n_series)?),
            node_col: None,
            node_avail: if n_series >= 2 { Some(take(3)?) } else { None },
            node: 0,
            left: count,
            start: t_min,
            corr: 0,
            n_templates: templates.len(),
        })
    }

    /// Events not read yet.
    pub(crate) fn left(&self) -> usize {
        self.left
    }

    /// Stop reading the ends (`end`) and the dictionary indexes (`attr`) of
    /// the events not read yet: their spans then have `end == start` and
    /// `attr == 0`. Each saves a varint per event for a consumer that does
    /// not need it.
    pub(crate) fn skip(&mut self, end: bool, attr: bool) {
        if end {
            self.dur_col = None;
        }
        if attr {
            self.idx_col = None;
        }
    }

    /// Read a kernel chunk's graph node ids into [`Span::node`] (nothing
    /// for other kinds, and nothing once [`Self::fill`] was called: the
    /// column is read from its start or not at all).
    pub(crate) fn read_nodes(&mut self) {
        self.node_col = self.node_avail.take();
    }

    /// Decode the next up to [`SPAN_BLOCK`] events into `out` (cleared
    /// first); `out` is empty only when every event was read. A correlation
    /// id beyond 32 bits or an attribute index out of range fails the whole
    /// block; a varint longer than 10 bytes fails the last one.
    #[inline]
    pub(crate) fn fill(&mut self, out: &mut Vec<Span>) -> Result<(), &'static str> {
        out.clear();
        self.node_avail = None;
        let n = self.left.min(SPAN_BLOCK);
        if n == 0 {
            return Ok(());
        }
        self.left -= n;
        // One loop per set of columns read, each without a test per column.
        let (wide, outside) = match (self.corr_col.is_some(), self.dur_col.is_some(), self.idx_col.is_some()) {
            (true, true, true) => self.fill_with::<true, true, true>(out, n),
            (true, true, false) => self.fill_with::<true, true, false>(out, n),
            (true, false, true) => self.fill_with::<true, false, true>(out, n),
            (true, false, false) => self.fill_with::<true, false, false>(out, n),
            (false, true, true) => self.fill_with::<false, true, true>(out, n),
            (false, true, false) => self.fill_with::<false, true, false>(out, n),
            (false, false, true) => self.fill_with::<false, false, true>(out, n),
            (false, false, false) => self.fill_with::<false, false, false>(out, n),
        };
        if let Some(col) = self.node_col.as_mut() {
            // Rarely asked for (traces of CUDA graphs): a pass of its own
            // keeps the loops above as they are.
            let mut node = self.node;
            for sp in out.iter_mut() {
                node = node.wrapping_add(unzigzag(col.next()) as u64);
                sp.node = node;
            }
            self.node = node;
        }
        if outside {
            out.clear();
            return Err("attribute index out of range");
        }
        if wide != 0 {
            out.clear();
            return Err("correlation id out of range");
        }
        if self.left == 0
            && (self.start_col.overlong()
                || [self.dur_col, self.idx_col, self.corr_col, self.node_col]
                    .iter()
                    .flatten()
                    .any(|c| c.overlong()))
        {
            out.clear();
            return Err("varint longer than 10 bytes");
        }
        Ok(())
    }

    /// `n` spans into `out` from the start column and, where the const
    /// parameter says so (and only then is it `Some`), the correlation,
    /// duration and index columns. Returns the block's faults: bits above 32
    /// of a correlation id (or'ed together), an index past the dictionary.
    #[inline(always)]
    fn fill_with<const CORR: bool, const END: bool, const ATTR: bool>(&mut self, out: &mut Vec<Span>, n: usize) -> (u64, bool) {
        let (mut start, mut corr) = (self.start, self.corr);
        let limit = self.n_templates as u64;
        // The columns are read through copies in locals, so that their
        // positions stay in registers (through `self`, each read would
        // store its position back to memory, `out` might alias it).
        // Columns not read stand in as copies of the start column (never
        // read: the dispatch in `fill` sets each flag iff its column is there).
        let mut c0 = self.start_col;
        let mut c1 = self.dur_col.unwrap_or(c0);
        let mut cc = self.corr_col.unwrap_or(c0);
        let mut ci = self.idx_col.unwrap_or(c0);
        let (mut wide, mut outside) = (0u64, false);
        out.clear();
        out.reserve(n);
        let spans = out.as_mut_ptr();
        for i in 0..n {
            start = start.wrapping_add(unzigzag(c0.next()) as u64);
            let mut end = start;
            if END {
                end = start.wrapping_add(unzigzag(c1.next()) as u64);
            }
            if CORR {
                corr = corr.wrapping_add(unzigzag(cc.next()) as u64);
                wide |= corr >> 32;
            }
            let mut attr = 0;
            if ATTR {
                attr = ci.next();
                outside |= attr >= limit;
            }
            // Safety: `i < n`, and room for `n` spans was reserved.
            unsafe {
                spans.add(i).write(Span {
                    start,
                    end,
                    corr: corr as u32,
                    attr: attr as u32,
                    node: 0,
                })
            };
        }
        // Safety: the first `n` spans were written above.
        unsafe { out.set_len(n) };
        self.start_col = c0;
        if END {
            self.dur_col = Some(c1);
        }
        if CORR {
            self.corr_col = Some(cc);
        }
        if ATTR {
            self.idx_col = Some(ci);
        }
        (self.start, self.corr) = (start, corr);
        (wide, outside)
    }
}

impl Decoder {
    /// Decode a body written by [`ChunkBuf::encode`], calling `f` for each
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
        let mut cols = open_body(kind, track, count, body, &mut self.templates)?;
        decode_rows(kind, &mut cols, &mut self.templates, count, t_min, &mut f)
    }
}

/// Write an event's start and end, which live at byte offsets `at_start`
/// and `at_end` of `*x`. When they are adjacent (as in every event struct
/// today) both go in one 16-byte store: a consumer that reads them together
/// (the compiler merges the two loads) then gets them forwarded from that
/// store instead of stalling on two 8-byte stores.
#[inline(always)]
fn store_span<T>(x: &mut T, at_start: usize, at_end: usize, start: u64, end: u64) {
    let base = (x as *mut T).cast::<u8>();
    #[cfg(target_arch = "x86_64")]
    if at_end == at_start + 8 && at_start % 8 == 0 && at_end + 8 <= std::mem::size_of::<T>() {
        use std::arch::x86_64::{__m128i, _mm_set_epi64x, _mm_storeu_si128};
        // Safety: bytes at_start..at_start + 16 lie inside `*x` (checked
        // above) and are exactly its two u64-sized time fields; SSE2 is part
        // of x86_64.
        unsafe { _mm_storeu_si128(base.add(at_start).cast::<__m128i>(), _mm_set_epi64x(end as i64, start as i64)) };
        return;
    }
    // Safety: both offsets are those of `T`'s `Nanos` time fields.
    unsafe {
        base.add(at_start).cast::<Nanos>().write_unaligned(Nanos(start));
        base.add(at_end).cast::<Nanos>().write_unaligned(Nanos(end));
    }
}

/// Rows of a chunk whose kind has `NS` series: rebuild start, end and the
/// series from their deltas, read straight from the columns (`cols` holds
/// start, duration, the `NS` series and the attribute index), let `set` fill
/// the per-event fields of the event's template in place (every per-event
/// field is overwritten, so nothing of the previous event that used it
/// remains; no 112-byte copy per event), hand it to `f`.
#[inline(never)]
fn assemble<const NS: usize>(
    cols: &mut [Option<Column<'_>>; 3 + MAX_SERIES],
    templates: &mut [Event],
    count: usize,
    t_min: u64,
    f: &mut impl FnMut(&Event),
    set: impl Fn(&mut Event, u64, u64, &[u64; NS]) -> Result<(), &'static str>,
) -> Result<(), &'static str> {
    const BAD: &str = "malformed column header";
    let [Some(c0), Some(c1), rest @ ..] = cols else { return Err(BAD) };
    let (series_cols, idx_col) = rest.split_at_mut(NS);
    let mut series_cols: [&mut Column<'_>; NS] = {
        let mut it = series_cols.iter_mut();
        let mut out: [Option<&mut Column<'_>>; NS] = std::array::from_fn(|_| it.next().and_then(|c| c.as_mut()));
        std::array::from_fn(|j| out[j].take().expect("the decoder sets every column of the kind"))
    };
    let Some(ci) = idx_col[0].as_mut() else { return Err(BAD) };
    let mut start = t_min;
    let mut series = [0u64; NS];
    for _ in 0..count {
        start = start.wrapping_add(unzigzag(c0.next()) as u64);
        let end = start.wrapping_add(unzigzag(c1.next()) as u64);
        for (s, col) in series.iter_mut().zip(series_cols.iter_mut()) {
            *s = s.wrapping_add(unzigzag(col.next()) as u64);
        }
        let e = templates.get_mut(ci.next() as usize).ok_or("attribute index out of range")?;
        set(e, start, end, &series)?;
        f(e);
    }
    if c0.overlong() || c1.overlong() || ci.overlong() || series_cols.iter().any(|c| c.overlong()) {
        return Err("varint longer than 10 bytes");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn read_all(bytes: &[u8], count: usize) -> Result<Vec<u64>, &'static str> {
        let mut c = Column::new(bytes, count)?;
        let v: Vec<u64> = (0..count).map(|_| c.next()).collect();
        if c.overlong() {
            return Err("varint longer than 10 bytes");
        }
        Ok(v)
    }

    /// LEB128 byte by byte: what `write_varint` must produce.
    fn reference_varint(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
        out
    }

    #[test]
    fn varints_are_leb128_at_every_length() {
        let mut cases = vec![0u64, 1, u64::MAX];
        for bits in 1..64 {
            cases.extend([(1u64 << bits) - 1, 1u64 << bits, (1u64 << bits) + 1]);
        }
        for v in cases {
            let mut b = vec![0xAAu8; 3];
            b.reserve(10);
            // Safety: 10 bytes of room reserved above.
            unsafe {
                let n = write_varint(b.as_mut_ptr(), b.len(), v);
                b.set_len(n);
            }
            assert_eq!(&b[3..], reference_varint(v), "{v:#x}");
            assert_eq!(&b[..3], [0xAA; 3], "bytes before are untouched");
        }
    }

    proptest! {
        #[test]
        fn varints_match_leb128(v: u64, shift in 0u32..64) {
            let v = v >> shift;
            let mut b = Vec::with_capacity(10);
            // Safety: 10 bytes of room.
            unsafe {
                let n = write_varint(b.as_mut_ptr(), 0, v);
                b.set_len(n);
            }
            prop_assert_eq!(b, reference_varint(v));
        }

        #[test]
        fn columns_round_trip(values in proptest::collection::vec(any::<u64>().prop_map(|v| v >> (v % 64)), 0..300)) {
            let mut b = Vec::new();
            for &v in &values {
                varint::put(&mut b, v);
            }
            prop_assert_eq!(read_all(&b, values.len()), Ok(values));
        }

        /// Whatever the bytes, a column is refused or read within its bounds
        /// (each value read agrees with the bounds-checked cursor).
        #[test]
        fn garbage_columns_are_refused_or_read_in_bounds(bytes in proptest::collection::vec(any::<u8>(), 0..64), count in 0usize..40) {
            if let Ok(values) = read_all(&bytes, count) {
                let mut c = Cursor::new(&bytes);
                for v in values {
                    prop_assert_eq!(c.varint(), Some(v));
                }
                prop_assert_eq!(c.remaining(), 0);
            }
        }
    }

    proptest! {
        /// The insertion sort with its fallback orders as the library's
        /// stable sort: nearly sorted keys (steps back of up to `back`) and
        /// shuffled ones, with ties.
        #[test]
        fn nearly_sorted_keys_sort_stably(steps in proptest::collection::vec((0u64..4, 0u64..6), 0..400), back in 0u64..40) {
            let mut t = 100u64;
            let keys: Vec<u64> = steps.iter().map(|&(gap, b)| { t += gap; t - (b * back).min(t) }).collect();
            let mut want: Vec<u32> = (0..keys.len() as u32).collect();
            want.sort_by_key(|&i| keys[i as usize]);
            let mut got: Vec<u32> = (0..keys.len() as u32).collect();
            sort_nearly_sorted(&mut got, &keys);
            prop_assert_eq!(got, want);
        }
    }

    fn api(start: u64, dur: u64, corr: u32, name: u32) -> Event {
        Event::Api(ApiCall {
            start: Nanos(start),
            end: Nanos(start + dur),
            thread: ThreadId(7),
            correlation: CorrelationId(corr),
            domain: ApiDomain(1),
            cbid: name,
            name: StringId(name),
            return_value: 0,
        })
    }

    /// Encode `events` as one chunk of `buf` (which may have written chunks
    /// before), decode it: the events, t_min, t_max.
    fn chunk_round_trip_in(buf: &mut ChunkBuf, events: &[Event]) -> (Vec<Event>, u64, u64) {
        for e in events {
            buf.push(e);
        }
        let (mut body, mut cols) = (Vec::new(), Vec::new());
        let (t_min, t_max) = buf.encode(&mut body, &mut cols);
        let mut out = Vec::new();
        Decoder::default()
            .decode_with(
                EventKind::Api,
                &Track::Thread { tid: ThreadId(7) },
                events.len(),
                t_min,
                &body,
                |e| out.push(*e),
            )
            .unwrap();
        (out, t_min, t_max)
    }

    proptest! {
        /// Increasing starts (streamed as they arrive) with steps back
        /// (which turn the buffer to raw columns, sorted when written): the
        /// chunk comes out stably sorted by start, with the right time range,
        /// whichever path it took.
        #[test]
        fn out_of_order_events_come_out_sorted(steps in proptest::collection::vec((0u64..2_000, 0u64..24, 0u64..500), 1..300)) {
            let mut t = 1_000_000u64;
            let mut events = Vec::new();
            for (i, &(gap, back, dur)) in steps.iter().enumerate() {
                t += gap;
                // Half the events in order, the others a step back by up
                // to 11 events' worth.
                let start = t.saturating_sub(back.saturating_sub(12) * 1_000);
                events.push(api(start, dur, i as u32, (i % 3) as u32 + 1));
            }
            let mut want = events.clone();
            want.sort_by_key(|e| e.start()); // stable, as the writer's sort
            // Twice through one buffer: the second time it may be holding
            // events back (after the first saw one out of order).
            let mut buf = ChunkBuf::new(EventKind::Api);
            for _ in 0..2 {
                let (got, t_min, t_max) = chunk_round_trip_in(&mut buf, &events);
                prop_assert_eq!(&got, &want);
                prop_assert_eq!(t_min, want.iter().map(|e| e.start().0).min().unwrap());
                prop_assert_eq!(t_max, want.iter().map(|e| e.end().0).max().unwrap());
            }
        }
    }

    proptest! {
        /// Any body bytes: the row reader refuses them or reads them to the
        /// end (or to an error), never panicking; its events are those the
        /// one-pass decoder gives.
        #[test]
        fn garbage_bodies_never_panic_the_row_reader(body in proptest::collection::vec(any::<u8>(), 0..96), count in 1usize..12) {
            let track = Track::Thread { tid: ThreadId(1) };
            let mut want = Vec::new();
            let whole = Decoder::default().decode_with(EventKind::Api, &track, count, 5, &body, |e| want.push(*e));
            let rows = Rows::open(EventKind::Api, &track, count, 5, &body, Vec::new());
            let mut got = Vec::new();
            let mut failed = false;
            if let Ok(mut rows) = rows {
                loop {
                    match rows.advance() {
                        Ok(true) => got.push(*rows.current().unwrap()),
                        Ok(false) => break,
                        Err(_) => { failed = true; break }
                    }
                }
            } else {
                failed = true;
            }
            if whole.is_ok() {
                prop_assert!(!failed);
                prop_assert_eq!(got, want);
            }
        }
    }

    proptest! {
        #[test]
        fn garbage_bodies_never_panic_the_span_reader(body in proptest::collection::vec(any::<u8>(), 0..96), count in 1usize..80, marker in any::<bool>()) {
            let kind = if marker { EventKind::Marker } else { EventKind::Api };
            let track = Track::Thread { tid: ThreadId(1) };
            let mut want = Vec::new();
            let whole = Decoder::default().decode_with(kind, &track, count, 5, &body, |e| want.push(*e));
            let mut templates = Vec::new();
            let mut got = Vec::new();
            let mut failed = false;
            match SpanRows::open(kind, &track, count, 5, &body, &mut templates) {
                Ok(mut rows) => {
                    let mut block = Vec::new();
                    loop {
                        match rows.fill(&mut block) {
                            Ok(()) if block.is_empty() => break,
                            Ok(()) => got.extend(block.iter().map(|s| s.event(&templates[s.attr as usize]))),
                            Err(_) => { failed = true; break }
                        }
                    }
                }
                Err(_) => failed = true,
            }
            // Spans read every column of these kinds, so they fail exactly when decoding does.
            prop_assert_eq!(failed, whole.is_err());
            if whole.is_ok() {
                prop_assert_eq!(got, want);
            }
        }
    }

    #[test]
    fn after_a_driver_call_before_its_runtime_caller_the_buffer_holds_events_back() {
        // CUPTI's order: each runtime call's record follows that of the
        // driver call made inside it (which starts 500 ns later).
        let mut events = Vec::new();
        for i in 0..100u64 {
            let t = 1_000_000 + i * 10_000;
            events.push(api(t + 500, 3_000, (2 * i) as u32, 2));
            events.push(api(t, 4_000, (2 * i + 1) as u32, 1));
        }
        let mut want = events.clone();
        want.sort_by_key(|e| e.start());
        let mut buf = ChunkBuf::new(EventKind::Api);
        let track = Track::Thread { tid: ThreadId(7) };
        for round in 0..2 {
            for e in &events {
                buf.push(e);
            }
            // The first chunk turns raw at the first pair; from then on
            // the buffer holds events back and stays streaming.
            assert_eq!(buf.streaming, round == 1, "round {round}");
            let (mut body, mut cols) = (Vec::new(), Vec::new());
            let (t_min, t_max) = buf.encode(&mut body, &mut cols);
            assert_eq!((t_min, t_max), (1_000_000, 1_000_000 + 99 * 10_000 + 4_000));
            let mut got = Vec::new();
            Decoder::default()
                .decode_with(EventKind::Api, &track, events.len(), t_min, &body, |e| got.push(*e))
                .unwrap();
            assert_eq!(got, want, "round {round}");
        }
    }

    #[test]
    fn malformed_columns_are_named() {
        assert_eq!(read_all(&[1, 2], 3).unwrap_err(), "column ended early");
        assert_eq!(read_all(&[1, 0x80], 2).unwrap_err(), "column ended early");
        assert_eq!(read_all(&[1, 2, 3], 2).unwrap_err(), "column longer than the event count");
        let mut long = vec![0xffu8; 10];
        long.push(0);
        assert_eq!(read_all(&long, 1).unwrap_err(), "varint longer than 10 bytes");
        let mut big = vec![0xffu8; 9];
        big.push(2);
        assert_eq!(read_all(&big, 1).unwrap_err(), "varint longer than 10 bytes");
        let mut max = vec![0xffu8; 9];
        max.push(1);
        assert_eq!(read_all(&max, 1), Ok(vec![u64::MAX]));
    }
}

#[cfg(test)]
mod description_tests {
    use super::*;

    fn track_of(kind: EventKind) -> Track {
        match kind {
            EventKind::Kernel | EventKind::Memcpy | EventKind::Memset | EventKind::Sync | EventKind::GraphLaunch => Track::Gpu {
                device: DeviceId(1),
                context: ContextId(2),
                stream: StreamId(3),
            },
            EventKind::Api | EventKind::Marker => Track::Thread { tid: ThreadId(4) },
            EventKind::Collective | EventKind::Loss | EventKind::Counter | EventKind::Request => Track::Process,
        }
    }

    /// What the span readers assume of the description: a kind with spans
    /// has at most two series, the first its correlation id (what
    /// `Event::span_correlation` gives), the second a kernel's graph node
    /// id; `Span::event` gives the event back.
    #[test]
    fn kinds_with_spans_carry_correlation_then_node_id() {
        for kind in EventKind::ALL.into_iter().filter(|k| k.has_spans()) {
            let (n_series, n_attrs) = shape(kind);
            assert!(n_series <= 2, "{kind:?}: {n_series} series");
            let a: Attrs = std::array::from_fn(|i| if i < n_attrs { i as u64 + 1 } else { 0 });
            let t = template(kind, &track_of(kind), &a).unwrap();
            assert_eq!(t.track(), track_of(kind));
            let mut e = t;
            set_times(&mut e, 100, 250, &[7, 9, 0, 0, 0]).unwrap();
            assert_eq!((e.start().0, e.end().0), (100, 250));
            let corr = if n_series >= 1 { 7 } else { 0 };
            assert_eq!(e.span_correlation(), corr, "{kind:?}");
            if let Event::Kernel(k) = e {
                assert_eq!(k.graph_node_id, 9);
            }
            let node = if n_series >= 2 { 9 } else { 0 };
            let span = Span {
                start: 100,
                end: 250,
                corr,
                attr: 0,
                node,
            };
            assert_eq!(span.event(&t), e, "{kind:?}");
        }
    }

    /// A packed tuple unpacks to its fields, in order; a packed kind
    /// (kernels) holds half as many words as it has fields.
    #[test]
    fn packed_attributes_unpack_in_disk_order() {
        let fields: [u32; 11] = std::array::from_fn(|i| u32::MAX - i as u32);
        let words: [u64; 6] = pack(fields);
        let mut held: Attrs = [0; MAX_ATTRS];
        held[..6].copy_from_slice(&words);
        let back = unpack(&held, 11);
        assert_eq!(back[..11].to_vec(), fields.iter().map(|&v| v as u64).collect::<Vec<_>>());
        assert!(back[11..].iter().all(|&v| v == 0));
        let on_disk = shape(EventKind::Kernel).1;
        assert_eq!(memory_attrs(EventKind::Kernel), on_disk.div_ceil(2));
    }
}
