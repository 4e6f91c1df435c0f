//! The traversal both writers share: selected inputs, then each track in
//! start order (only the chunks that overlap the window are decoded), with
//! events clipped to the window, put on lanes that nest, and linked
//! launch-to-GPU by flow ids.
//!
//! Kernels, copies, memsets, synchronizations, calls and marks are read as
//! spans ([`SpanMerge`]: times, correlation id and dictionary index); what
//! the walk needs of the rest (lane, nesting, flow role, utilization
//! category) is worked out once per dictionary entry when a chunk opens,
//! and the writers keep what they make of an entry there too
//! ([`Visitor::EntryState`]). Collectives and losses are read whole.
//!
//! Memory: the chunks that overlap the current position of one track (a
//! block of spans and a table per dictionary entry each), a handful of
//! open slices per lane, two bits per correlation id in use (one paged
//! set: launches in the window, GPU work linked) and, for the GPU
//! projection of NVTX ranges, about 100 bytes per range (at most a
//! million ranges per input).

use crate::error::Result;
use crate::job::{apply_shift, chunk_selected, Filter, Job, Plan};
use gputrace_classify::Category;
use gputrace_format::*;
use std::cmp::Reverse;

/// Where an event is drawn. A track of the file can hold several lanes
/// (a GPU stream and its synchronizations; several NCCL communicators).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Lane {
    /// Kernels, copies and memsets of one stream.
    Stream {
        device: DeviceId,
        context: ContextId,
        stream: StreamId,
    },
    /// Synchronizations seen on one stream (they span the host wait, so
    /// they overlap the stream's work and need a lane of their own).
    Sync {
        device: DeviceId,
        context: ContextId,
        stream: StreamId,
    },
    /// CUDA API calls and NVTX ranges of one CPU thread.
    Thread { tid: ThreadId },
    /// Collectives of one NCCL communicator.
    Comm { comm: CommId, device: DeviceId },
    /// Process-wide instants (loss records).
    Process,
    /// The kernels of one stream that a communication library other than NCCL ran
    /// (DeepEP, NVSHMEM, custom all-reduce, ...), drawn again on a track of their
    /// own; `library` indexes [`CommLibraries`].
    Library { device: DeviceId, stream: StreamId, library: u16 },
    /// NVTX ranges projected onto one stream (see [`Annotation`]).
    Ranges {
        device: DeviceId,
        context: ContextId,
        stream: StreamId,
    },
}

impl Lane {
    fn of(e: &Event) -> Lane {
        match e {
            Event::Kernel(k) => Lane::Stream {
                device: k.device,
                context: k.context,
                stream: k.stream,
            },
            Event::Memcpy(k) => Lane::Stream {
                device: k.device,
                context: k.context,
                stream: k.stream,
            },
            Event::Memset(k) => Lane::Stream {
                device: k.device,
                context: k.context,
                stream: k.stream,
            },
            Event::Sync(k) => Lane::Sync {
                device: k.device,
                context: k.context,
                stream: k.stream,
            },
            Event::GraphLaunch(k) => Lane::Stream {
                device: k.device,
                context: k.context,
                stream: k.stream,
            },
            Event::Api(a) => Lane::Thread { tid: a.thread },
            Event::Marker(m) => Lane::Thread { tid: m.thread },
            Event::Collective(c) => Lane::Comm {
                comm: c.comm,
                device: c.device,
            },
            Event::Loss(_) | Event::Counter(_) | Event::Request(_) => Lane::Process,
        }
    }

    /// Work on a serial lane never nests: an overlap is a timing artifact
    /// and the later slice is moved to start when the earlier one ends.
    fn serial(self) -> bool {
        matches!(
            self,
            Lane::Stream { .. } | Lane::Sync { .. } | Lane::Comm { .. } | Lane::Library { .. }
        )
    }
}

/// The communication libraries whose kernels get tracks of their own: every library of
/// the classifier's communication rules except NCCL (whose collectives have their
/// communicators' tracks), in rule order.
#[derive(Clone, Debug, Default)]
pub(crate) struct CommLibraries {
    names: Vec<String>,
}

impl CommLibraries {
    pub fn of(classifier: &gputrace_classify::Classifier) -> CommLibraries {
        let mut names: Vec<String> = Vec::new();
        for r in classifier.rules() {
            if r.category == Category::Communication && r.library != "NCCL" && !names.contains(&r.library) {
                names.push(r.library.clone());
            }
        }
        CommLibraries { names }
    }

    /// The index of `library`, if its kernels get tracks.
    fn index(&self, library: &str) -> Option<u16> {
        self.names.iter().position(|n| n == library).map(|i| i as u16)
    }

    /// The name of library `i`.
    pub fn name(&self, i: u16) -> &str {
        self.names.get(usize::from(i)).map_or("communication", String::as_str)
    }
}

/// A lane's index among the lanes of its input, in the order the walk
/// first met them. Writers keep what they made of a lane (a track uuid, a
/// pid/tid pair) in a vector indexed by it instead of looking the lane up
/// by value for every event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LaneId(pub u32);

impl LaneId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Flow arrow attached to an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    None,
    /// The launching API call: the arrow starts here.
    Out(u64),
    /// The kernel, copy or memset: the arrow ends here.
    In(u64),
}

/// Whether an event is drawn as an instant rather than a slice.
pub(crate) fn is_instant(e: &Event) -> bool {
    match e {
        Event::Loss(_) => true,
        Event::Marker(m) => m.kind == MarkerKind::INSTANT,
        _ => false,
    }
}

/// One event ready to be written: times on the common time line, clipped to
/// the window and adjusted to nest on its lane.
pub(crate) struct Item<'e> {
    /// The event or, when it was read as a span, its dictionary entry
    /// (see [`Item::attributes`]).
    of: &'e Event,
    /// Its times and per-event series, when it was read as a span.
    span: Option<&'e Span>,
    /// Its correlation id (kernels, copies, memsets, synchronizations and
    /// calls; 0 for other kinds).
    pub corr: u32,
    pub lane: Lane,
    pub lane_id: LaneId,
    pub start: u64,
    pub end: u64,
    pub flow: Flow,
    /// The end of the slice on the event's lane that closes just before
    /// it (see [`Visitor::event`]); any other slices that close before it
    /// were ended by [`Visitor::end_slice`].
    pub ended: Option<u64>,
}

/// Dictionary entries per chunk that get a [`Visitor::EntryState`].
pub(crate) const ENTRY_STATES: usize = 1024;

impl<'e> Item<'e> {
    /// The event's attributes: its kind, names, device, stream, sizes
    /// (everything its dictionary entry holds). Its times, correlation id
    /// and per-event series are not meaningful here: see [`Self::event`],
    /// [`Self::corr`] and the item's clipped times.
    #[inline]
    pub fn attributes(&self) -> &'e Event {
        self.of
    }

    /// The whole event, as recorded (times before shifting and clipping).
    #[inline]
    pub fn event(&self) -> std::borrow::Cow<'e, Event> {
        match self.span {
            Some(sp) => std::borrow::Cow::Owned(sp.event(self.of)),
            None => std::borrow::Cow::Borrowed(self.of),
        }
    }
}

/// The input being walked.
pub(crate) struct Input<'a> {
    /// Position among the selected inputs (0-based).
    pub ordinal: usize,
    pub trace: &'a TraceFile,
    pub rank: Rank,
}

/// What a writer does with the walk.
pub(crate) trait Visitor {
    /// What the writer keeps per dictionary entry of the chunks being read
    /// (say, the bytes every event of the entry shares): made `Default`
    /// when a chunk is opened, dropped when it is done, for the first
    /// [`ENTRY_STATES`] entries of each.
    type EntryState: Default;
    /// Called before the first event of an input.
    fn begin_input(&mut self, input: &Input<'_>) -> Result<()>;
    /// One event (its slice begins; for instants, the whole event), with
    /// the state of its entry (`None` for collectives and losses, and
    /// entries past the first [`ENTRY_STATES`]). When `item.ended` is set,
    /// the innermost open slice of the event's lane ends at that time just
    /// before it (written first, as [`Self::end_slice`] would).
    fn event(&mut self, input: &Input<'_>, item: &Item<'_>, state: Option<&mut Self::EntryState>) -> Result<()>;
    /// The innermost open slice on `lane` ends at `at` (called in time
    /// order per lane, after every event that starts before `at`).
    fn end_slice(&mut self, input: &Input<'_>, lane: LaneId, at: u64) -> Result<()>;
    /// The GPU time of one device by category, after its last event (only
    /// when the walk was asked for bins).
    fn utilization(&mut self, _input: &Input<'_>, _util: &Utilization) -> Result<()> {
        Ok(())
    }
    /// An NVTX range's span on one GPU stream (a [`Lane::Ranges`] slice,
    /// ended by `end_slice`), after the GPU's last event; only when the walk
    /// was asked for annotations.
    fn gpu_annotation(&mut self, _input: &Input<'_>, _lane: Lane, _id: LaneId, _name: StringId, _start: u64, _end: u64) -> Result<()> {
        Ok(())
    }
    /// A kernel of communication library `library` (a [`Lane::Library`] slice named
    /// `name`, ended by `end_slice`), drawn again on its library's track after the
    /// GPU's last event.
    #[allow(clippy::too_many_arguments)]
    fn comm_library(
        &mut self,
        _input: &Input<'_>,
        _lane: Lane,
        _id: LaneId,
        _library: &str,
        _name: StringId,
        _start: u64,
        _end: u64,
    ) -> Result<()> {
        Ok(())
    }
    /// The input's counter series (GPU counters sampled beside the timeline) of the
    /// devices the filter keeps, with times on the common time line and only the samples
    /// in the window, after the input's last track.
    fn counters(&mut self, _input: &Input<'_>, _series: &[CounterSeries]) -> Result<()> {
        Ok(())
    }
    /// The input's host samples, one track per sampled thread, clipped to
    /// the window, after its counters (see `host.rs`).
    fn host_samples(&mut self, _input: &Input<'_>, _tracks: &[crate::host::HostTrack]) -> Result<()> {
        Ok(())
    }
}

/// How a counter series is drawn: its track's label, unit and the factor
/// from the stored value to the shown one.
pub(crate) fn counter_display(name: &str) -> (String, &'static str, f64) {
    use gputrace_format::metric as m;
    let (label, unit, scale) = match name {
        m::GPU_UTIL_PCT => ("NVML GPU-Util %", "%", 1.0),
        m::MEM_UTIL_PCT => ("NVML memory util %", "%", 1.0),
        m::SM_CLOCK_MHZ => ("SM clock MHz", "MHz", 1.0),
        m::SM_CLOCK_MAX_MHZ => ("SM clock max MHz", "MHz", 1.0),
        m::MEM_CLOCK_MHZ => ("memory clock MHz", "MHz", 1.0),
        m::POWER_MW => ("power W", "W", 1e-3),
        m::ENERGY_MJ => ("energy J", "J", 1e-3),
        m::TEMPERATURE_C => ("temperature C", "C", 1.0),
        m::THROTTLE_REASONS => ("throttle reasons (NVML bit mask)", "", 1.0),
        m::MEM_USED_BYTES => ("memory used GiB", "GiB", 1.0 / (1u64 << 30) as f64),
        m::PCIE_TX_KBPS => ("PCIe TX MB/s", "MB/s", 1e-3),
        m::PCIE_RX_KBPS => ("PCIe RX MB/s", "MB/s", 1e-3),
        m::NVLINK_TX_KIB => ("NVLink TX total GiB", "GiB", 1.0 / (1u64 << 20) as f64),
        m::NVLINK_RX_KIB => ("NVLink RX total GiB", "GiB", 1.0 / (1u64 << 20) as f64),
        m::ECC_UNCORRECTED_ERRORS => ("ECC uncorrected errors", "", 1.0),
        m::ECC_CORRECTED_ERRORS => ("ECC corrected errors", "", 1.0),
        m::XID => ("XID error", "", 1.0),
        m::PM_SM_ACTIVE_BP => ("SM active %", "%", 1e-2),
        m::PM_TENSOR_ACTIVE_BP => ("tensor pipe active %", "%", 1e-2),
        m::PM_DRAM_READ_BYTES_PER_S => ("DRAM read GB/s", "GB/s", 1e-9),
        m::PM_DRAM_WRITE_BYTES_PER_S => ("DRAM write GB/s", "GB/s", 1e-9),
        m::PM_DRAM_THROUGHPUT_BP => ("DRAM throughput % of peak", "%", 1e-2),
        other => return (other.to_string(), "", 1.0),
    };
    (label.to_string(), unit, scale)
}

/// What the walk computes besides the events.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct WalkOptions {
    /// Bins of the per-GPU utilization (0: none).
    pub bins: u32,
    /// Project NVTX ranges onto the GPU work launched inside them.
    pub gpu_annotations: bool,
    /// Project step ranges (`ProfilerStep#N`) too. TensorBoard's profiler
    /// plugin counts every range of that name, a GPU one too, as a step of
    /// its own, so the Chrome/Kineto export leaves them out.
    pub gpu_step_annotations: bool,
}

/// Categories of GPU time, in [`Utilization::bins`] order.
pub(crate) const COMPUTE: usize = 0;
pub(crate) const COMMUNICATION: usize = 1;
pub(crate) const TRANSFER: usize = 2;
/// Any GPU work (its complement is idle time).
pub(crate) const BUSY: usize = 3;

/// GPU time of one device per category in fixed bins over the window.
/// Overlapping work of one category (several streams) counts once: events
/// arrive in start order, so the union is a running "covered until".
pub(crate) struct Utilization {
    pub device: DeviceId,
    pub from: u64,
    pub to: u64,
    pub bin_ns: u64,
    /// Per bin: ns of compute, communication, transfer, any.
    pub bins: Vec<[u64; 4]>,
    covered: [u64; 4],
    /// The bin [`Self::bin`] found last, its start and end (empty at first).
    last: (usize, u64, u64),
}

impl Utilization {
    fn new(device: DeviceId, from: u64, to: u64, bins: u32) -> Utilization {
        let span = to.saturating_sub(from).max(1);
        let bin_ns = span.div_ceil(bins.max(1) as u64).max(1);
        let n = span.div_ceil(bin_ns) as usize;
        Utilization {
            device,
            from,
            to,
            bin_ns,
            bins: vec![[0; 4]; n],
            covered: [0; 4],
            last: (0, 0, 0),
        }
    }

    /// Count `start..end` (at or after `from`) as GPU time of `category`.
    #[inline(always)]
    fn add(&mut self, category: usize, start: u64, end: u64) {
        for c in [category, BUSY] {
            let mut t = start.max(self.covered[c]);
            while t < end {
                let (b, bin_end) = self.bin(t);
                let x = end.min(bin_end);
                self.bins[b][c] += x - t;
                t = x;
            }
            self.covered[c] = self.covered[c].max(end);
        }
    }

    /// The bin of time `t` (at or after `from`) and where it ends (after
    /// `t`; times past the last bin count in it). Work arrives in start
    /// order, so `t` is usually in the bin of the last question: that one
    /// is tried before dividing.
    #[inline(always)]
    fn bin(&mut self, t: u64) -> (usize, u64) {
        let (b, lo, hi) = self.last;
        if lo <= t && t < hi {
            return (b, hi);
        }
        let raw = (t - self.from) / self.bin_ns;
        let b = (raw as usize).min(self.bins.len() - 1);
        let bin_end = (self.from + (b as u64 + 1) * self.bin_ns).max(t + 1);
        if raw < self.bins.len() as u64 {
            self.last = (b, self.from + raw * self.bin_ns, bin_end);
        }
        (b, bin_end)
    }

    /// Width of bin `b` (the last one may be short).
    pub fn width(&self, b: usize) -> u64 {
        let start = self.from + b as u64 * self.bin_ns;
        (start + self.bin_ns).min(self.to).saturating_sub(start).max(1)
    }
}

/// Counts of what the walk produced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalkStats {
    /// Events written.
    pub events: u64,
    /// Flow arrows (launch to GPU work) written.
    pub flows: u64,
    /// Slices whose start or end was moved so that they nest on their lane.
    pub adjusted: u64,
    /// Events dropped by the event budget (`max_events`).
    pub truncated: bool,
}

/// Two sets of u32 ids ([`LAUNCHES`], [`LINKED`]) in pages of 64 Ki ids,
/// allocated when touched; an id's two bits sit in adjacent words, so
/// that [`IdSets::link`] tests and sets them with one page lookup.
pub(crate) struct IdSets {
    pages: Vec<Option<Box<[[u64; 2]; 1024]>>>,
}

/// Correlation ids of the calls written (in the window).
pub(crate) const LAUNCHES: usize = 0;
/// Correlation ids whose GPU work got its flow arrow.
pub(crate) const LINKED: usize = 1;

impl IdSets {
    pub fn new() -> IdSets {
        IdSets { pages: Vec::new() }
    }

    /// The page, word and bit of `id`.
    #[inline(always)]
    fn place(id: u32) -> (usize, usize, u64) {
        ((id >> 16) as usize, ((id >> 6) & 1023) as usize, 1 << (id & 63))
    }

    #[inline]
    pub fn insert(&mut self, set: usize, id: u32) {
        let (p, w, b) = Self::place(id);
        match self.pages.get_mut(p) {
            Some(Some(page)) => page[w][set] |= b,
            _ => self.insert_new_page(set, id),
        }
    }

    /// `insert` where the page of `id` is not allocated yet.
    #[cold]
    fn insert_new_page(&mut self, set: usize, id: u32) {
        let (p, w, b) = Self::place(id);
        if p >= self.pages.len() {
            self.pages.resize_with(p + 1, || None);
        }
        self.pages[p].get_or_insert_with(|| Box::new([[0; 2]; 1024]))[w][set] |= b;
    }

    #[inline]
    pub fn contains(&self, set: usize, id: u32) -> bool {
        let (p, w, b) = Self::place(id);
        matches!(self.pages.get(p), Some(Some(page)) if page[w][set] & b != 0)
    }

    /// Whether `id` is in [`LAUNCHES`] and not yet in [`LINKED`]; if so,
    /// it is added to [`LINKED`].
    #[inline]
    pub fn link(&mut self, id: u32) -> bool {
        let (p, w, b) = Self::place(id);
        let Some(Some(page)) = self.pages.get_mut(p) else { return false };
        let words = &mut page[w];
        let first = words[LAUNCHES] & !words[LINKED] & b != 0;
        if first {
            words[LINKED] |= b;
        }
        first
    }

    /// How many ids in `lo..=hi` are in `set`.
    pub fn count_range(&self, set: usize, lo: u32, hi: u32) -> u64 {
        let mut n = 0;
        let mut id = lo as u64;
        while id <= hi as u64 {
            let (p, w) = ((id >> 16) as usize, ((id >> 6) & 1023) as usize);
            let word_end = (id | 63).min(hi as u64);
            if let Some(Some(page)) = self.pages.get(p) {
                let (from, to) = (id & 63, word_end & 63);
                let mask = (u64::MAX >> (63 - to)) & (u64::MAX << from);
                n += (page[w][set] & mask).count_ones() as u64;
            }
            id = word_end + 1;
        }
        n
    }
}

/// An NVTX range on a CPU thread, projected onto the GPU work launched
/// inside it (Kineto's `gpu_user_annotation`).
///
/// Correlation ids grow with API entry time, so the calls inside a range
/// on one thread are the ids `lo..=hi` of that thread. The projection is
/// exact when no other thread made a call with an id in that range
/// (`pure`); a range whose ids interleave with another thread's is not
/// projected rather than guessed.
pub(crate) struct Annotation {
    pub name: StringId,
    lo: u32,
    hi: u32,
    calls: u64,
    parent: Option<usize>,
    pure: bool,
    /// GPU span per stream lane.
    pub spans: Vec<(LaneId, u64, u64)>,
}

/// NVTX ranges projected per input at most (each an `Annotation`, an index
/// entry and its spans): a trace with a range around every operator gets the
/// first million projected.
const MAX_ANNOTATIONS: usize = 1 << 20;

/// The annotations of one input, for lookups by correlation id.
struct Annotations {
    all: Vec<Annotation>,
    /// Pure annotations with calls, sorted by `lo`.
    by_lo: Vec<usize>,
    /// Their `lo`s, in the same order (searched without indirection).
    los: Vec<u32>,
    /// Where the last search ended: GPU work arrives in launch order on each
    /// lane, so the next answer is usually there or just after.
    hint: usize,
    /// The last answer of [`Self::innermost`] and the ids it holds for.
    last: Option<Innermost>,
}

/// An answer of [`Annotations::innermost`]: for correlation ids
/// `min..=max` with `k` pure annotations starting at or before them, the
/// innermost pure annotation holding them (`None`: none does).
#[derive(Clone, Copy)]
struct Innermost {
    k: usize,
    min: u64,
    max: u64,
    found: Option<usize>,
}

impl Annotations {
    fn new() -> Annotations {
        Annotations {
            all: Vec::new(),
            by_lo: Vec::new(),
            los: Vec::new(),
            hint: 0,
            last: None,
        }
    }

    /// Give the enclosing range of annotation `i` the calls made in `i`
    /// (when `i` closes in the pre-pass: calls are counted in the innermost
    /// open range only).
    fn fold_into_parent(&mut self, i: usize) {
        if let Some(p) = self.all[i].parent {
            let (lo, hi, calls) = (self.all[i].lo, self.all[i].hi, self.all[i].calls);
            let a = &mut self.all[p];
            (a.lo, a.hi, a.calls) = (a.lo.min(lo), a.hi.max(hi), a.calls + calls);
        }
    }

    /// Mark the pure ones and index them.
    fn finish(&mut self, launches: &IdSets) {
        for a in &mut self.all {
            a.pure = a.calls > 0 && launches.count_range(LAUNCHES, a.lo, a.hi) == a.calls;
        }
        self.by_lo = (0..self.all.len()).filter(|&i| self.all[i].pure).collect();
        self.by_lo.sort_by_key(|&i| self.all[i].lo);
        self.los = self.by_lo.iter().map(|&i| self.all[i].lo).collect();
        self.hint = 0;
        self.last = None;
    }

    /// How many pure annotations start at or before `c`.
    #[inline]
    fn count_up_to(&mut self, c: u32) -> usize {
        let los = &self.los;
        let mut k = self.hint.min(los.len());
        if k > 0 && los[k - 1] > c {
            k = los.partition_point(|&lo| lo <= c);
        } else {
            // Walk forward a few entries, then search the rest.
            let mut steps = 0;
            while k < los.len() && los[k] <= c {
                k += 1;
                steps += 1;
                if steps == 4 {
                    k += los[k..].partition_point(|&lo| lo <= c);
                    break;
                }
            }
        }
        self.hint = k;
        k
    }

    /// Extend the GPU span of the innermost annotation that launched `c`.
    /// Its pure ancestors launched `c` too; [`Self::settle`] extends them.
    #[inline(always)]
    fn add(&mut self, c: u32, lane: LaneId, start: u64, end: u64) {
        if let Some(i) = self.innermost(c) {
            self.all[i].extend(lane, start, end);
        }
    }

    /// The innermost pure annotation that launched `c`.
    #[inline(always)]
    fn innermost(&mut self, c: u32) -> Option<usize> {
        let k = self.count_up_to(c);
        match self.last {
            Some(l) if l.k == k && (l.min..=l.max).contains(&(c as u64)) => l.found,
            _ => self.innermost_walk(k, c),
        }
    }

    /// `innermost` by walking the candidates (and remembering the answer).
    ///
    /// Pure ranges nest (ranges of one thread nest in time, and no other
    /// thread has ids inside a pure one), so the ranges holding `c` are the
    /// first candidate (the last pure one to start at or before `c`) and
    /// its enclosing ranges. Each encloses the one before, so their `lo`s
    /// are at most `c` and their `hi`s grow: the answer is the first pure
    /// one with `c <= hi`. When every candidate skipped was pure, it stays
    /// the answer for every id above the `hi` of the candidate before it
    /// and up to its own (with the same `k`), and is remembered for them.
    #[inline(never)]
    fn innermost_walk(&mut self, k: usize, c: u32) -> Option<usize> {
        let mut next = k.checked_sub(1).map(|k| self.by_lo[k]);
        let (mut min, mut exact) = (0u64, true);
        let mut found = None;
        while let Some(i) = next {
            let a = &self.all[i];
            if a.pure && a.lo <= c && c <= a.hi {
                found = Some(i);
                break;
            }
            if a.pure && a.lo <= c {
                min = min.max(a.hi as u64 + 1);
            } else {
                exact = false;
            }
            next = a.parent;
        }
        let (min, max) = match found {
            Some(i) => (min.max(self.all[i].lo as u64), self.all[i].hi as u64),
            None => (min, u32::MAX as u64),
        };
        self.last = exact.then_some(Innermost { k, min, max, found });
        found
    }

    /// Extend every annotation's spans by those of the pure annotations
    /// nested in it, so that each covers all GPU work launched inside it.
    /// A parent comes before its children in `all`, so one pass from the
    /// end carries spans all the way up. Extending is min/max, so settling
    /// again changes nothing.
    fn settle(&mut self) {
        for i in (0..self.all.len()).rev() {
            if self.all[i].spans.is_empty() {
                continue;
            }
            // The nearest pure ancestor (an impure one gets no spans).
            let mut up = self.all[i].parent;
            while let Some(p) = up.filter(|&p| !self.all[p].pure) {
                up = self.all[p].parent;
            }
            let Some(p) = up else { continue };
            let spans = std::mem::take(&mut self.all[i].spans);
            for &(lane, start, end) in &spans {
                self.all[p].extend(lane, start, end);
            }
            self.all[i].spans = spans;
        }
    }
}

impl Annotation {
    /// Extend the span on `lane` to cover `start..end`.
    #[inline]
    fn extend(&mut self, lane: LaneId, start: u64, end: u64) {
        match self.spans.iter_mut().find(|s| s.0 == lane) {
            Some(s) => {
                s.1 = s.1.min(start);
                s.2 = s.2.max(end);
            }
            None => self.spans.push((lane, start, end)),
        }
    }
}

/// The lanes of the current input, each with the ends of its open slices
/// (innermost last); a lane's position here is its [`LaneId`].
struct Lanes {
    open: Vec<(Lane, Vec<u64>)>,
}

impl Lanes {
    /// The id of `lane`, added if new. Asked once per dictionary entry of
    /// a chunk (the walk keeps the answer in the entry's [`Facts`]), and
    /// per collective or loss.
    fn id(&mut self, lane: Lane) -> LaneId {
        let i = match self.open.iter().position(|(l, _)| *l == lane) {
            Some(i) => i,
            None => {
                self.open.push((lane, Vec::new()));
                self.open.len() - 1
            }
        };
        LaneId(i as u32)
    }

    /// The open slices of lane `id`.
    fn stack(&mut self, id: LaneId) -> &mut Vec<u64> {
        &mut self.open[id.index()].1
    }
}

/// The NVTX ranges' spans on the streams of GPU `device`, as slices of
/// [`Lane::Ranges`] lanes in time order, nested (a span that overlaps its
/// parent's end, possible only when threads share a stream, is cut there).
fn project_annotations(
    input: &Input<'_>,
    annotations: &Annotations,
    lanes: &mut Lanes,
    device: DeviceId,
    visitor: &mut impl Visitor,
) -> Result<()> {
    let mut spans: Vec<(Lane, u64, Reverse<u64>, StringId)> = Vec::new();
    for a in &annotations.all {
        for &(id, start, end) in &a.spans {
            if let Some((
                Lane::Stream {
                    device: d,
                    context,
                    stream,
                },
                _,
            )) = lanes.open.get(id.index())
            {
                let (d, context, stream) = (*d, *context, *stream);
                if d == device {
                    spans.push((Lane::Ranges { device, context, stream }, start, Reverse(end), a.name));
                }
            }
        }
    }
    spans.sort_unstable();
    let mut open: Vec<u64> = Vec::new();
    let mut prev: Option<LaneId> = None;
    for (i, &(lane, start, Reverse(mut end), name)) in spans.iter().enumerate() {
        let id = lanes.id(lane);
        if let (true, Some(prev)) = (i > 0 && spans[i - 1].0 != lane, prev) {
            while let Some(top) = open.pop() {
                visitor.end_slice(input, prev, top)?;
            }
        }
        prev = Some(id);
        while let Some(&top) = open.last() {
            if top > start {
                break;
            }
            open.pop();
            visitor.end_slice(input, id, top)?;
        }
        if let Some(&parent) = open.last() {
            end = end.min(parent);
        }
        open.push(end);
        visitor.gpu_annotation(input, lane, id, name, start, end)?;
    }
    if let Some(last) = prev {
        while let Some(top) = open.pop() {
            visitor.end_slice(input, last, top)?;
        }
    }
    Ok(())
}

/// Walk `plan` over `job`, feeding `visitor`; measure GPU utilization and
/// project NVTX ranges onto the GPU as `options` asks.
pub(crate) fn walk<V: Visitor>(job: &Job<'_>, filter: &Filter, plan: &Plan, options: WalkOptions, visitor: &mut V) -> Result<WalkStats> {
    let mut stats = WalkStats::default();
    // The report's classification, so that the utilization counters agree with it.
    let classifier = job.classifier();
    let libraries = CommLibraries::of(classifier);
    for (ordinal, &index) in plan.inputs.iter().enumerate() {
        let trace = job.inputs()[index].trace;
        let input = Input {
            ordinal,
            trace,
            rank: job.rank(index),
        };
        let scope = Scope::new(trace, plan, filter, job.shift(index));
        // Launches in the window, so that GPU work links only to calls that
        // are written too; and, if asked, the NVTX ranges around them.
        // An imported Kineto trace has Kineto's own GPU annotations: they
        // are written as they are, not projected again.
        let (launches, annotations) = if options.gpu_annotations && !crate::is_kineto_import(trace.header()) {
            annotated_launches(&scope, options.gpu_step_annotations)?
        } else {
            (launches_only(&scope)?, Annotations::new())
        };
        let mut w = Walker {
            input: &input,
            plan,
            visitor: &mut *visitor,
            lanes: Lanes { open: Vec::new() },
            ids: launches,
            annotations,
            library_spans: Vec::new(),
            util: None,
            on_gpu: false,
            flow_base: (ordinal as u64) << 32,
            stats,
        };
        w.visitor.begin_input(&input)?;
        let mut kinds = KernelKinds::new(trace, classifier, &libraries);
        for (device, tracks) in track_groups(trace) {
            if !walk_group(&mut w, &scope, &mut kinds, device, &tracks, options.bins)? {
                return Ok(w.stats);
            }
        }
        write_counters(&mut w, &scope)?;
        let window = (scope.plan.from, scope.plan.to);
        crate::host::tracks_in(trace, scope.shift, window)?.map_or(Ok(()), |t| w.visitor.host_samples(&input, &t))?;
        stats = w.stats;
    }
    Ok(stats)
}

/// One input's part of the walk: its trace, the plan's window, the filter,
/// and its clock shift onto the common time line.
struct Scope<'s> {
    trace: &'s TraceFile,
    plan: &'s Plan,
    filter: &'s Filter,
    shift: i64,
    /// The window on the input's own clock.
    lo: u64,
    hi: u64,
}

impl<'s> Scope<'s> {
    fn new(trace: &'s TraceFile, plan: &'s Plan, filter: &'s Filter, shift: i64) -> Scope<'s> {
        let local = |t: u64| apply_shift(t, -shift);
        Scope {
            trace,
            plan,
            filter,
            shift,
            lo: local(plan.from),
            hi: local(plan.to),
        }
    }

    /// Whether chunk `c` is read: it is selected and overlaps the window (a loss chunk
    /// always, without a window start).
    fn overlaps(&self, c: &EventChunk) -> bool {
        let early_loss = c.kind == EventKind::Loss && self.filter.from.is_none();
        (early_loss || (c.t_max.0 >= self.lo && c.t_min.0 < self.hi)) && chunk_selected(c, self.filter)
    }

    /// The chunks of the trace that pass `keep` and [`Self::overlaps`].
    fn chunk_ids(&self, keep: impl Fn(&EventChunk) -> bool) -> Vec<usize> {
        let chunks = self.trace.chunks();
        (0..chunks.len())
            .filter(|&i| keep(&chunks[i]) && self.overlaps(&chunks[i]))
            .collect()
    }

    /// Whether a span `s..t` on the input's clock is written.
    fn in_window(&self, s: u64, t: u64) -> bool {
        in_window(self.plan, apply_shift(s, self.shift), apply_shift(t, self.shift))
    }
}

/// The launches in the window (every call's correlation id), for inputs whose NVTX
/// ranges are not projected.
fn launches_only(scope: &Scope<'_>) -> Result<IdSets> {
    let mut launches = IdSets::new();
    let mut dec = scope.trace.decoder();
    let mut block = Vec::with_capacity(SPAN_BLOCK);
    for i in scope.chunk_ids(|c| c.kind == EventKind::Api) {
        // A call's times and correlation id: its entry is not read.
        let mut cursor = dec.spans(i)?;
        cursor.skip(false, true);
        loop {
            cursor.fill(&mut block)?;
            if block.is_empty() {
                break;
            }
            for sp in &block {
                if sp.corr != 0 && scope.in_window(sp.start, sp.end) {
                    launches.insert(LAUNCHES, sp.corr);
                }
            }
        }
        dec.recycle_spans(cursor);
    }
    Ok(launches)
}

/// The launches in the window and the NVTX ranges around them (step ranges only with
/// `steps`), thread by thread: each range with the correlation ids of the calls made
/// inside it, marked pure when no other thread's calls interleave.
fn annotated_launches(scope: &Scope<'_>, steps: bool) -> Result<(IdSets, Annotations)> {
    let trace = scope.trace;
    let mut launches = IdSets::new();
    let mut annotations = Annotations::new();
    for summary in trace.tracks() {
        if !matches!(summary.track, Track::Thread { .. }) {
            continue;
        }
        let ids = scope.chunk_ids(|c| c.track == summary.track && matches!(c.kind, EventKind::Api | EventKind::Marker));
        let mut open: Vec<(u64, usize)> = Vec::new();
        // Calls and ranges as spans: a call needs only its times and
        // correlation id, a range its times and name.
        trace.for_each_span_merged(
            ids,
            |cursor| {
                // Every entry of an API chunk is a call: its indexes are not read.
                let calls_only = cursor.chunk().kind == EventKind::Api;
                if calls_only {
                    cursor.skip(false, true);
                }
                let ranges: Vec<Option<StringId>> = cursor
                    .templates()
                    .iter()
                    .map(|t| match t {
                        Event::Marker(m) if m.kind == MarkerKind::RANGE && (steps || !trace.name(m.name).starts_with("ProfilerStep#")) => {
                            Some(m.name)
                        }
                        _ => None,
                    })
                    .collect();
                (calls_only, ranges)
            },
            |sp, (calls_only, ranges), _| {
                let (s, t) = (apply_shift(sp.start, scope.shift), apply_shift(sp.end, scope.shift));
                if !in_window(scope.plan, s, t) {
                    return;
                }
                while open.last().is_some_and(|&(end, _)| end <= s) {
                    if let Some((_, i)) = open.pop() {
                        annotations.fold_into_parent(i);
                    }
                }
                if *calls_only {
                    let c = sp.corr;
                    if c != 0 {
                        launches.insert(LAUNCHES, c);
                        // The innermost open range only: its
                        // enclosing ranges get its calls when it
                        // closes (`fold_into_parent`).
                        if let Some(&(_, i)) = open.last() {
                            let an = &mut annotations.all[i];
                            (an.lo, an.hi, an.calls) = (an.lo.min(c), an.hi.max(c), an.calls + 1);
                        }
                    }
                } else if let (Some(&Some(name)), true) = (ranges.get(sp.attr as usize), annotations.all.len() < MAX_ANNOTATIONS) {
                    let parent = open.last().map(|o| o.1);
                    annotations.all.push(Annotation {
                        name,
                        lo: u32::MAX,
                        hi: 0,
                        calls: 0,
                        parent,
                        pure: false,
                        spans: Vec::new(),
                    });
                    open.push((t, annotations.all.len() - 1));
                }
            },
        )?;
        while let Some((_, i)) = open.pop() {
            annotations.fold_into_parent(i);
        }
    }
    annotations.finish(&launches);
    Ok((launches, annotations))
}

/// The trace's tracks in the groups the walk takes together: the streams of one GPU
/// (adjacent in the track list), so that its busy time can be measured as a union;
/// every other track alone.
fn track_groups(trace: &TraceFile) -> Vec<(Option<DeviceId>, Vec<Track>)> {
    let mut groups: Vec<(Option<DeviceId>, Vec<Track>)> = Vec::new();
    for summary in trace.tracks() {
        match (summary.track, groups.last_mut()) {
            (Track::Gpu { device, .. }, Some((Some(d), tracks))) if *d == device => tracks.push(summary.track),
            (Track::Gpu { device, .. }, _) => groups.push((Some(device), vec![summary.track])),
            (track, _) => groups.push((None, vec![track])),
        }
    }
    groups
}

/// What a kernel is, by name, looked up once per name of one input: its utilization
/// category (as the report classifies it) and the communication library whose track
/// draws it again.
struct KernelKinds<'k> {
    trace: &'k TraceFile,
    classifier: &'k gputrace_classify::Classifier,
    libraries: &'k CommLibraries,
    /// Per name: 0 not looked up yet, 1 compute, 2 communication.
    class: Vec<u8>,
    /// Per name: 0 not looked up yet, 1 no library track, 2 + the library's index.
    library: Vec<u16>,
    /// Whether the group being walked measures utilization (else no category).
    measure: bool,
}

impl<'k> KernelKinds<'k> {
    fn new(trace: &'k TraceFile, classifier: &'k gputrace_classify::Classifier, libraries: &'k CommLibraries) -> Self {
        KernelKinds {
            trace,
            classifier,
            libraries,
            class: vec![0; trace.string_count()],
            library: vec![0; trace.string_count()],
            measure: false,
        }
    }

    /// The utilization category of GPU work `e` ([`COMPUTE`] .. [`TRANSFER`]) when
    /// measured.
    fn category(&mut self, e: &Event) -> Option<u8> {
        if !self.measure {
            return None;
        }
        let c = match e {
            Event::Kernel(k) => {
                let class = self.class.get_mut(k.name.0 as usize);
                let comm = match class {
                    Some(c) if *c != 0 => *c == 2,
                    other => {
                        let comm = self.classifier.kernel(&self.trace.name(k.name)) == Category::Communication;
                        if let Some(c) = other {
                            *c = 1 + comm as u8;
                        }
                        comm
                    }
                };
                if comm {
                    COMMUNICATION
                } else {
                    COMPUTE
                }
            }
            // As the report counts them: peer copies are communication.
            Event::Memcpy(m) if self.classifier.memcpy(m) == Category::Communication => COMMUNICATION,
            Event::Memcpy(_) | Event::Memset(_) => TRANSFER,
            _ => return None,
        };
        Some(c as u8)
    }

    /// The communication library ([`CommLibraries`] index) of kernel `e`, if one runs it.
    fn library(&mut self, e: &Event) -> Option<u16> {
        let Event::Kernel(k) = e else { return None };
        let slot = self.library.get_mut(k.name.0 as usize);
        if let Some(&c) = slot.as_deref() {
            if c != 0 {
                return c.checked_sub(2);
            }
        }
        let name = self.trace.name(k.name);
        let found = self
            .classifier
            .rule_for(&name)
            .map(|id| self.classifier.rule(id))
            .filter(|r| r.category == Category::Communication)
            .and_then(|r| self.libraries.index(&r.library));
        if let Some(c) = slot {
            *c = found.map_or(1, |i| i + 2);
        }
        found
    }
}

/// Walk one group of tracks (see [`track_groups`]) of GPU `device` (`None`: not a GPU's
/// streams): its events in start order, then its open slices closed, its utilization
/// (in `bins`) and, on a GPU, its NVTX ranges and library tracks. False when the event
/// budget is spent.
fn walk_group<V: Visitor>(
    w: &mut Walker<'_, '_, V>,
    scope: &Scope<'_>,
    kinds: &mut KernelKinds<'_>,
    device: Option<DeviceId>,
    tracks: &[Track],
    bins: u32,
) -> Result<bool> {
    let chunk_ids = scope.chunk_ids(|c| tracks.contains(&c.track));
    if chunk_ids.is_empty() {
        return Ok(true);
    }
    w.util = match device {
        Some(d) if bins > 0 => Some(Utilization::new(d, scope.plan.from, scope.plan.to, bins)),
        _ => None,
    };
    w.on_gpu = device.is_some() && !w.annotations.by_lo.is_empty();
    kinds.measure = w.util.is_some();
    let chunks = scope.trace.chunks();
    if chunk_ids.iter().all(|&i| chunks[i].kind.has_spans()) {
        walk_spans(w, scope, kinds, chunk_ids)?;
    } else {
        walk_events(w, scope, kinds, chunk_ids)?;
    }
    // Only this group's lanes have open slices.
    for (i, (_, stack)) in w.lanes.open.iter_mut().enumerate() {
        while let Some(top) = stack.pop() {
            w.visitor.end_slice(w.input, LaneId(i as u32), top)?;
        }
    }
    if let Some(u) = w.util.take() {
        w.visitor.utilization(w.input, &u)?;
    }
    if let Some(d) = device {
        w.annotations.settle();
        project_annotations(w.input, &w.annotations, &mut w.lanes, d, w.visitor)?;
        project_library_spans(w.input, &mut w.library_spans, kinds.libraries, &mut w.lanes, w.visitor)?;
    }
    Ok(!w.stats.truncated)
}

/// Kernels, copies, memsets, synchronizations, calls and marks: read as
/// spans, with what the walk needs of each dictionary entry worked out when
/// its chunk is opened.
fn walk_spans<V: Visitor>(w: &mut Walker<'_, '_, V>, scope: &Scope<'_>, kinds: &mut KernelKinds<'_>, chunk_ids: Vec<usize>) -> Result<()> {
    // Per slot of the merge: the facts and the visitor's state of each
    // entry of the slot's chunk.
    let mut tables: Vec<(Vec<Facts>, Vec<V::EntryState>)> = Vec::new();
    let mut merge = scope.trace.span_merge(chunk_ids);
    'runs: while let Some(run) = merge.next_run(|slot, cursor| {
        // Graph node ids are read only where a writer shows them.
        if cursor.templates().iter().any(|t| matches!(t, Event::Kernel(k) if k.graph_id != 0)) {
            cursor.read_node_ids();
        }
        if tables.len() <= slot {
            tables.resize_with(slot + 1, Default::default);
        }
        let (facts, states) = &mut tables[slot];
        facts.clear();
        facts.extend(
            cursor
                .templates()
                .iter()
                .map(|e| Facts::of(e, kinds.category(e)).with_library(kinds.library(e))),
        );
        states.clear();
        states.resize_with(facts.len().min(ENTRY_STATES), Default::default);
    })? {
        let Some((facts, states)) = tables.get_mut(run.slot) else {
            continue;
        };
        let templates = run.cursor.templates();
        for sp in run.spans {
            let a = sp.attr as usize;
            // Every span's index is in its dictionary (checked by the reader).
            let (Some(f), Some(of)) = (facts.get_mut(a), templates.get(a)) else {
                continue;
            };
            let (s, t) = (apply_shift(sp.start, scope.shift), apply_shift(sp.end, scope.shift));
            if !w.step(s, t, f, sp.corr, of, Some(sp), states.get_mut(a))? {
                break 'runs;
            }
        }
    }
    Ok(())
}

/// The process track: collectives and losses, read as whole events.
fn walk_events<V: Visitor>(w: &mut Walker<'_, '_, V>, scope: &Scope<'_>, kinds: &mut KernelKinds<'_>, chunk_ids: Vec<usize>) -> Result<()> {
    let (plan, filter) = (scope.plan, scope.filter);
    let mut events = scope.trace.merge(chunk_ids);
    while let Some(e) = events.next_event()? {
        if let Event::Counter(_) | Event::Request(_) = e {
            // Counter samples are not slices: the writers draw
            // them as counter tracks of their own, not here.
            // Request marks are the serving report's, not drawn.
            continue;
        }
        if let Event::Collective(c) = &e {
            if !filter.keeps_device(c.device) {
                continue;
            }
        }
        let (mut s, mut t) = (apply_shift(e.start().0, scope.shift), apply_shift(e.end().0, scope.shift));
        if let Event::Loss(_) = e {
            // A loss of unknown time (0) or before the first event
            // stays visible at the start, unless a window was asked for.
            if s < plan.from && filter.from.is_none() {
                (s, t) = (plan.from, plan.from);
            }
        }
        let mut f = Facts::of(e, kinds.category(e));
        if !w.step(s, t, &mut f, e.span_correlation(), e, None, None)? {
            break;
        }
    }
    Ok(())
}

/// The input's counter series (of the devices the filter keeps) in the window, on the
/// common time line, to the visitor.
fn write_counters<V: Visitor>(w: &mut Walker<'_, '_, V>, scope: &Scope<'_>) -> Result<()> {
    let plan = scope.plan;
    let mut series = scope.trace.counter_series()?;
    series.retain(|c| scope.filter.keeps_device(c.device));
    for c in &mut series {
        for x in &mut c.samples {
            x.0 = Nanos(apply_shift(x.0 .0, scope.shift));
        }
        c.samples.retain(|x| x.0 .0 >= plan.from && x.0 .0 < plan.to);
    }
    series.retain(|c| !c.samples.is_empty());
    if !series.is_empty() {
        w.visitor.counters(w.input, &series)?;
    }
    Ok(())
}

/// Whether a span `s..t` (on the common time line) is written: it
/// overlaps the window, or is an instant at its start.
#[inline(always)]
fn in_window(plan: &Plan, s: u64, t: u64) -> bool {
    s < plan.to && (t > plan.from || s >= plan.from)
}

/// How an event takes part in launch-to-GPU flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    None,
    /// A kernel, copy or memset: ends an arrow from its launch.
    Gpu,
    /// A CUDA call: starts an arrow to the GPU work it launched.
    Call,
}

/// What the walk needs of an event besides its times and correlation id,
/// all attributes of its dictionary entry: worked out once per entry of a
/// chunk read as spans (once per event for collectives and losses).
#[derive(Clone, Copy)]
struct Facts {
    lane: Lane,
    /// Its id, given at the entry's first event in the window (lane ids
    /// follow the order in which events first meet their lanes).
    lane_id: Option<LaneId>,
    instant: bool,
    serial: bool,
    link: Link,
    /// Utilization category ([`COMPUTE`] .. [`TRANSFER`]) when measured.
    category: Option<u8>,
    /// The communication library (a [`CommLibraries`] index) of a kernel drawn again
    /// on its library's track.
    library: Option<u16>,
}

impl Facts {
    fn of(e: &Event, category: Option<u8>) -> Facts {
        let lane = Lane::of(e);
        Facts {
            lane,
            lane_id: None,
            instant: is_instant(e),
            serial: lane.serial(),
            link: match e {
                Event::Kernel(_) | Event::Memcpy(_) | Event::Memset(_) => Link::Gpu,
                Event::Api(_) => Link::Call,
                _ => Link::None,
            },
            category,
            library: None,
        }
    }

    fn with_library(mut self, library: Option<u16>) -> Facts {
        self.library = library;
        self
    }
}

/// The walk of one input: its lanes, flow id sets, NVTX ranges and, per
/// group of tracks, the utilization being measured.
struct Walker<'w, 'a, V: Visitor> {
    input: &'w Input<'a>,
    plan: &'w Plan,
    visitor: &'w mut V,
    lanes: Lanes,
    /// Launches in the window (GPU work links only to calls written too),
    /// and the correlation ids whose GPU work got its arrow.
    ids: IdSets,
    annotations: Annotations,
    /// The kernels of communication libraries in this group, to draw again on their
    /// libraries' tracks: lane, start, end, name.
    library_spans: Vec<(Lane, u64, u64, StringId)>,
    util: Option<Utilization>,
    /// On a GPU, with NVTX ranges to project.
    on_gpu: bool,
    /// The input's flow ids: `flow_base | correlation`.
    flow_base: u64,
    stats: WalkStats,
}

impl<V: Visitor> Walker<'_, '_, V> {
    /// One event, at `s..t` on the common time line, correlation `corr`:
    /// clipped to the window, nested on its lane (closing the slices that
    /// end before it), linked, measured and handed to the visitor. `of` is
    /// the event, or its entry when `span` holds its times and series.
    /// False when the event budget is spent (the event is not written).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn step(
        &mut self,
        mut s: u64,
        mut t: u64,
        f: &mut Facts,
        corr: u32,
        of: &Event,
        span: Option<&Span>,
        state: Option<&mut V::EntryState>,
    ) -> Result<bool> {
        let plan = self.plan;
        if !in_window(plan, s, t) {
            return Ok(true);
        }
        if self.stats.events >= plan.max_events {
            self.stats.truncated = true;
            return Ok(false);
        }
        s = s.max(plan.from);
        t = t.max(s).min(plan.to);
        let lane_id = match f.lane_id {
            Some(id) => id,
            None => {
                let id = self.lanes.id(f.lane);
                f.lane_id = Some(id);
                id
            }
        };
        // The last slice to close before the event is handed over with it.
        let mut ended = None;
        if !f.instant {
            let stack = self.lanes.stack(lane_id);
            while let Some(&top) = stack.last() {
                if top <= s || f.serial {
                    stack.pop();
                    if top > s {
                        // Serial lane overlap: start when the previous slice ends.
                        s = top;
                        t = t.max(s);
                        self.stats.adjusted += 1;
                    }
                    if let Some(before) = ended.replace(top) {
                        self.visitor.end_slice(self.input, lane_id, before)?;
                    }
                } else {
                    break;
                }
            }
            if let Some(&parent) = stack.last() {
                if t > parent {
                    t = parent;
                    self.stats.adjusted += 1;
                }
            }
            stack.push(t);
        }
        // One arrow per launch: a graph launch runs many kernels under
        // one correlation id; the arrow goes to the first.
        let flow = match f.link {
            Link::Gpu if corr != 0 && self.ids.link(corr) => Flow::In(self.flow_base | corr as u64),
            Link::Call if corr != 0 && self.ids.contains(LINKED, corr) => {
                self.stats.flows += 1;
                Flow::Out(self.flow_base | corr as u64)
            }
            _ => Flow::None,
        };
        if self.on_gpu && f.link == Link::Gpu && corr != 0 {
            self.annotations.add(corr, lane_id, s, t);
        }
        if let (Some(u), Some(c)) = (self.util.as_mut(), f.category) {
            u.add(c as usize, s, t);
        }
        self.stats.events += 1;
        self.visitor.event(
            self.input,
            &Item {
                of,
                span,
                corr,
                lane: f.lane,
                lane_id,
                start: s,
                end: t,
                flow,
                ended,
            },
            state,
        )?;
        if let (Some(library), Lane::Stream { device, stream, .. }, Event::Kernel(k)) = (f.library, f.lane, of) {
            self.library_spans.push((Lane::Library { device, stream, library }, s, t, k.name));
        }
        Ok(true)
    }
}

/// The kernels of communication libraries of one GPU, drawn again on their libraries'
/// tracks in time order (each track holds one stream's kernels, already serial).
fn project_library_spans(
    input: &Input<'_>,
    spans: &mut Vec<(Lane, u64, u64, StringId)>,
    libraries: &CommLibraries,
    lanes: &mut Lanes,
    visitor: &mut impl Visitor,
) -> Result<()> {
    spans.sort_unstable_by_key(|&(lane, s, t, _)| (lane, s, t));
    for (lane, s, t, name) in spans.drain(..) {
        let Lane::Library { library, .. } = lane else { continue };
        let id = lanes.id(lane);
        visitor.comm_library(input, lane, id, libraries.name(library), name, s, t)?;
        visitor.end_slice(input, id, t)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The hinted search answers as a binary search over the sorted
        /// starts would, whatever the order of the questions.
        #[test]
        fn hinted_search_agrees_with_partition_point(mut los in proptest::collection::vec(0u32..500, 0..60), qs in proptest::collection::vec(0u32..520, 1..80)) {
            los.sort_unstable();
            let mut a = Annotations { all: Vec::new(), by_lo: Vec::new(), los: los.clone(), hint: 0, last: None };
            for q in qs {
                prop_assert_eq!(a.count_up_to(q), los.partition_point(|&lo| lo <= q));
            }
        }
    }

    proptest! {
        /// The remembered answers of `innermost` are those of walking the
        /// candidates every time, on ranges built as the pre-pass builds
        /// them (nested ranges of one thread, its calls, and calls of
        /// another thread whose ids interleave).
        #[test]
        fn remembered_innermost_agrees_with_the_walk(ops in proptest::collection::vec(0u8..5, 1..200), qs in proptest::collection::vec(0u32..160, 1..200)) {
            let mut a = Annotations { all: Vec::new(), by_lo: Vec::new(), los: Vec::new(), hint: 0, last: None };
            let (mut launches, mut open, mut id) = (IdSets::new(), Vec::new(), 0u32);
            for op in ops {
                match op {
                    0 => {
                        let parent = open.last().copied();
                        a.all.push(Annotation { name: StringId(0), lo: u32::MAX, hi: 0, calls: 0, parent, pure: false, spans: Vec::new() });
                        open.push(a.all.len() - 1);
                    }
                    1 => {
                        if let Some(i) = open.pop() {
                            a.fold_into_parent(i);
                        }
                    }
                    2 | 3 => {
                        id += 1;
                        launches.insert(LAUNCHES, id);
                        if let Some(&i) = open.last() {
                            let an = &mut a.all[i];
                            (an.lo, an.hi, an.calls) = (an.lo.min(id), an.hi.max(id), an.calls + 1);
                        }
                    }
                    _ => {
                        id += 1;
                        launches.insert(LAUNCHES, id);
                    }
                }
            }
            while let Some(i) = open.pop() {
                a.fold_into_parent(i);
            }
            a.finish(&launches);
            let want: Vec<Option<usize>> = qs
                .iter()
                .map(|&q| {
                    a.last = None;
                    let k = a.count_up_to(q);
                    a.innermost_walk(k, q)
                })
                .collect();
            a.last = None;
            let got: Vec<Option<usize>> = qs.iter().map(|&q| a.innermost(q)).collect();
            prop_assert_eq!(got, want);
        }
    }

    struct Null(u64);
    impl Visitor for Null {
        type EntryState = ();
        fn begin_input(&mut self, _: &Input<'_>) -> Result<()> {
            Ok(())
        }
        fn event(&mut self, _: &Input<'_>, item: &Item<'_>, _: Option<&mut ()>) -> Result<()> {
            self.0 += item.start + item.ended.unwrap_or(0);
            Ok(())
        }
        fn end_slice(&mut self, _: &Input<'_>, _: LaneId, at: u64) -> Result<()> {
            self.0 += at;
            Ok(())
        }
    }

    #[test]
    fn id_sets_count_ranges_and_link_once() {
        let mut s = IdSets::new();
        for id in [0, 1, 63, 64, 65_535, 65_536, 200_000, u32::MAX] {
            s.insert(LAUNCHES, id);
        }
        s.insert(LINKED, 5);
        assert_eq!(s.count_range(LAUNCHES, 0, u32::MAX), 8);
        assert_eq!(s.count_range(LAUNCHES, 1, 64), 3);
        assert_eq!(s.count_range(LAUNCHES, 2, 62), 0);
        assert_eq!(s.count_range(LAUNCHES, 65_535, 65_536), 2);
        assert_eq!(s.count_range(LAUNCHES, u32::MAX, u32::MAX), 1);
        assert_eq!(s.count_range(LINKED, 0, u32::MAX), 1);
        // A launch links once; an id that is not a launch never does.
        assert!(s.link(65_536) && !s.link(65_536));
        assert!(s.contains(LINKED, 65_536) && !s.contains(LINKED, 65_535));
        assert!(!s.link(2) && !s.link(300_000) && !s.contains(LINKED, 2));
    }

    #[test]
    #[ignore = "timing; run with --release -- --ignored --nocapture"]
    fn walk_speed() {
        let cfg = gputrace_synth::JobConfig {
            ranks: 4,
            steps: 60,
            ..Default::default()
        };
        let s = gputrace_synth::schedule(&cfg);
        let traces: Vec<TraceFile> = (0..4)
            .map(|r| TraceFile::from_bytes("r", gputrace_synth::write_rank(&cfg, &s, r, Vec::new()).unwrap().0).unwrap())
            .collect();
        let job = Job::new(traces.iter());
        let plan = Plan::new(&job, &Filter::default()).unwrap();
        println!("size_of::<Event>() = {}", std::mem::size_of::<Event>());
        for bins in [0, 200] {
            let mut best = f64::MAX;
            for _ in 0..10 {
                let t = std::time::Instant::now();
                let st = walk(
                    &job,
                    &Filter::default(),
                    &plan,
                    WalkOptions {
                        bins,
                        gpu_annotations: bins > 0,
                        gpu_step_annotations: true,
                    },
                    &mut Null(0),
                )
                .unwrap();
                best = best.min(t.elapsed().as_secs_f64());
                assert!(st.events > 0);
            }
            let n: u64 = traces.iter().map(|t| t.event_total()).sum();
            println!(
                "walk only (bins and annotations: {}): {:.2} M events/s",
                bins > 0,
                n as f64 / best / 1e6
            );
        }
    }
}
