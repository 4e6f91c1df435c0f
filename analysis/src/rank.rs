//! Analysis of one trace file (one rank).
//!
//! Three passes over the file, none of which holds all events:
//! 1. markers, loss records and NCCL collectives (step windows, losses,
//!    per-operation collective totals, which kernel ran which operation);
//! 2. per device, the GPU chunks merged in start order through the
//!    [`Sweep`]: unions, overlap, idle gaps, per-step pieces, exposed
//!    communication by operation, kernel and copy statistics, GPU-side
//!    synchronizations (without step ranges, two passes over the device's
//!    kernels first infer the steps);
//! 3. API calls and ranges: when the work after each gap was launched, which
//!    calls were CPU synchronizations, what the CPU did in the longest gaps.
//!
//! In HTA-compatible mode ([`crate::HtaCompat`]) the marker chunks are read
//! once more first, for HTA's last step; pass 1 then also reads the API
//! calls for HTA's GPU event filter (only when it applies), and pass 2 applies
//! the filter, HTA's rounding and its kernel types as it reads each event.
//!
//! Memory: bounded by the chunks that overlap in time, plus one small record
//! per idle gap (40 bytes), per distinct string, per step, per
//! synchronization call and per linked collective (24 bytes); in
//! HTA-compatible mode with its filter, 4 bytes per distinct correlation id
//! of the CPU calls.

use crate::activity::Binner;
use crate::capture::{Capture, Clip};
use crate::collectives::{CollAcc, CollectiveAgg, Links, LABEL_PEER_COPY, LABEL_UNATTRIBUTED};
use crate::error::Result;
use crate::hta::{hta_kernel_type, is_hta_step_name, HtaClock, HtaFilter, HtaKernelType, Verdict};
use crate::merge::for_each_of_kinds;
use crate::productive::{parse_exit_mark, parse_step_mark, rank_productive, MarkParse, RankMarks, StepMark, UtilWindows};
use crate::report::*;
use crate::steps::Window;
use crate::sweep::{Sweep, SweepTotals, COMM, COMPUTE, TRANSFER};
use crate::Options;
use gputrace_classify::{canonical_operation, is_peer_copy, Category, Classifier, RuleId, PEER_COPY_LIBRARY};
use gputrace_format::*;
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// How far before a gap device-to-host bytes count towards `d2h_bytes_before`.
const D2H_LOOKBACK_NS: u64 = 1_000_000_000;

/// Per-string facts, computed once per string id (names repeat millions of times).
/// A name's call and range facts (sync call, step marker) and its kernel facts
/// (communication, HTA's kernel type) are worked out separately, when first
/// asked for: classifying a kernel name runs the classifier's patterns, which
/// is wasted on the thousands of distinct step-marker names of a long run.
struct Names<'a> {
    file: &'a TraceFile,
    classifier: &'a Classifier,
    /// Per string id: which fact groups are known (`NAME_DONE`, `KERNEL_DONE`)
    /// and the facts of those groups.
    cache: Vec<u8>,
    /// Per string id, once its kernel facts are known: the classifier's rule that
    /// matched it (`NO_RULE`: none).
    rules: Vec<u16>,
    /// Library and operation of the rank's communication work.
    classes: CommClasses,
}

const NO_RULE: u16 = u16::MAX;

/// The (library, operation) pairs of a rank's communication work, numbered in the
/// order first seen. Each kernel name, or (rule, collective label) for linked work,
/// is resolved once.
#[derive(Default)]
struct CommClasses {
    list: Vec<(String, String)>,
    index: FxHashMap<(String, String), u32>,
    /// Unlinked communication kernels: name → class.
    by_name: FxHashMap<StringId, u32>,
    /// Linked communication work: (rule or `NO_RULE` for copies, collective label) → class.
    by_link: FxHashMap<(u16, u32), u32>,
}

impl CommClasses {
    fn intern(&mut self, library: &str, operation: &str) -> u32 {
        let key = (library.to_string(), operation.to_string());
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        let i = self.list.len() as u32;
        self.list.push(key.clone());
        self.index.insert(key, i);
        i
    }
}

/// Library of communication that no rule matched (HTA-compatible mode: kernels HTA calls
/// communication).
const UNCLASSIFIED_LIBRARY: &str = "unclassified";

const NAME_COMM: u8 = 1;
const NAME_SYNC_API: u8 = 2;
const NAME_STEP: u8 = 4;
/// HTA's `ProfilerStep#(\d+)` name pattern.
const NAME_HTA_STEP: u8 = 8;
/// HTA's kernel type: computation.
const NAME_HTA_COMPUTE: u8 = 16;
/// HTA's kernel type: communication.
const NAME_HTA_COMM: u8 = 32;
/// The call and range facts of the name are in its cache entry.
const NAME_DONE: u8 = 64;
/// The kernel facts of the name are in its cache entry.
const KERNEL_DONE: u8 = 128;

impl<'a> Names<'a> {
    fn new(file: &'a TraceFile, classifier: &'a Classifier) -> Self {
        Names {
            file,
            classifier,
            cache: vec![0; file.string_count()],
            rules: vec![NO_RULE; file.string_count()],
            classes: CommClasses::default(),
        }
    }

    /// The call and range facts of a name: `NAME_SYNC_API`, `NAME_STEP`, `NAME_HTA_STEP`.
    #[inline]
    fn flags(&mut self, id: StringId) -> u8 {
        match self.cache.get(id.0 as usize) {
            Some(&f) if f & NAME_DONE != 0 => f,
            _ => self.classify(id, NAME_DONE),
        }
    }

    /// The kernel facts of a name: `NAME_COMM`, `NAME_HTA_COMPUTE`, `NAME_HTA_COMM`.
    #[inline]
    fn kernel_flags(&mut self, id: StringId) -> u8 {
        match self.cache.get(id.0 as usize) {
            Some(&f) if f & KERNEL_DONE != 0 => f,
            _ => self.classify(id, KERNEL_DONE),
        }
    }

    /// Work out the facts of group `group` (`NAME_DONE` or `KERNEL_DONE`) of a
    /// name, and return its entry.
    #[cold]
    fn classify(&mut self, id: StringId, group: u8) -> u8 {
        let i = id.0 as usize;
        if i >= self.cache.len() {
            // An id the table lacks: no facts (its name reads "<unknown string #n>").
            return 0;
        }
        let s = self.file.string(id).unwrap_or("");
        let mut f = self.cache[i] | group;
        if group == NAME_DONE {
            if is_sync_api(s) {
                f |= NAME_SYNC_API;
            }
            if step_number(s).is_some() {
                f |= NAME_STEP;
            }
            if is_hta_step_name(s) {
                f |= NAME_HTA_STEP;
            }
        } else {
            let rule = self.classifier.rule_for(s);
            if rule.is_some_and(|r| self.classifier.rule(r).category == Category::Communication) {
                f |= NAME_COMM;
            }
            self.rules[i] = rule.map_or(NO_RULE, |r| r.0);
            match hta_kernel_type(s) {
                HtaKernelType::Computation => f |= NAME_HTA_COMPUTE,
                HtaKernelType::Communication => f |= NAME_HTA_COMM,
                HtaKernelType::Memory | HtaKernelType::Other => {}
            }
        }
        self.cache[i] = f;
        f
    }

    /// The rule that classified kernel `id`, if any.
    fn rule(&mut self, id: StringId) -> Option<RuleId> {
        self.kernel_flags(id);
        match self.rules.get(id.0 as usize) {
            Some(&r) if r != NO_RULE => Some(RuleId(r)),
            _ => None,
        }
    }

    /// The (library, operation) class of communication kernel `id`, linked to the
    /// collective label `link` (an index into `links.labels`) or not.
    fn kernel_class(&mut self, id: StringId, link: Option<u32>, links: &Links) -> u32 {
        let cached = match link {
            None => self.classes.by_name.get(&id).copied(),
            Some(l) => {
                let r = self.rule(id).map_or(NO_RULE, |r| r.0);
                self.classes.by_link.get(&(r, l)).copied()
            }
        };
        if let Some(c) = cached {
            return c;
        }
        self.new_kernel_class(id, link, links)
    }

    #[cold]
    fn new_kernel_class(&mut self, id: StringId, link: Option<u32>, links: &Links) -> u32 {
        let rule = self.rule(id);
        let library = rule.map_or(UNCLASSIFIED_LIBRARY, |r| self.classifier.rule(r).library.as_str());
        let name = self.file.string(id).unwrap_or("");
        let operation = match link {
            // The linked collective knows its operation.
            Some(l) => link_operation(&links.labels[l as usize]),
            None => self.classifier.operation(rule, name),
        };
        let c = self.classes.intern(library, &operation);
        match link {
            None => self.classes.by_name.insert(id, c),
            Some(l) => self.classes.by_link.insert((rule.map_or(NO_RULE, |r| r.0), l), c),
        };
        c
    }

    /// The class of a peer copy linked to collective label `link`, or not.
    fn copy_class(&mut self, link: Option<u32>, links: &Links) -> u32 {
        match link {
            None => self.classes.intern(PEER_COPY_LIBRARY, "copy"),
            Some(l) => {
                if let Some(&c) = self.classes.by_link.get(&(NO_RULE, l)) {
                    return c;
                }
                let c = self.classes.intern("NCCL", &link_operation(&links.labels[l as usize]));
                self.classes.by_link.insert((NO_RULE, l), c);
                c
            }
        }
    }

    fn kernel(&mut self, id: StringId) -> Category {
        if self.kernel_flags(id) & NAME_COMM != 0 {
            Category::Communication
        } else {
            Category::Compute
        }
    }

    /// HTA-compatible mode: compute exactly when HTA calls the kernel computation; other
    /// kernels are communication (HTA's or the classifier's) or else transfer (HTA's
    /// memory and other types).
    fn hta_kernel(&mut self, id: StringId) -> Category {
        let f = self.kernel_flags(id);
        if f & NAME_HTA_COMPUTE != 0 {
            Category::Compute
        } else if f & (NAME_HTA_COMM | NAME_COMM) != 0 {
            Category::Communication
        } else {
            Category::Transfer
        }
    }
}

/// The canonical operation of a collective label (`AllReduce`, `Recv+Send`), or the
/// label itself.
fn link_operation(label: &str) -> String {
    canonical_operation(label).map_or_else(|| label.to_string(), str::to_string)
}

/// CUDA runtime and driver calls that block the calling thread until GPU work is done.
fn is_sync_api(name: &str) -> bool {
    name.starts_with("cu") && name.contains("Synchronize")
}

/// `N` of a `ProfilerStep#N` name.
pub(crate) fn step_number(name: &str) -> Option<u64> {
    name.strip_prefix("ProfilerStep#")?.parse().ok()
}

/// An idle gap while it is being resolved.
#[derive(Clone, Copy, Debug)]
struct Gap {
    start: u64,
    end: u64,
    next_corr: u32,
    next_kind: EventKind,
    next_name: StringId,
    /// Entry of the launching API call (u64::MAX: not found).
    launch: u64,
    d2h_before: u64,
}

/// What the ordered sweep needs of one kernel, copy or memset (40 bytes
/// instead of a whole decoded event).
#[derive(Clone, Copy, Debug)]
struct Work {
    start: u64,
    end: u64,
    /// Bytes of a device-to-host copy (0 otherwise).
    d2h_bytes: u64,
    corr: u32,
    name: StringId,
    /// Communication work: the label (operation) it is attributed to.
    label: u32,
    /// Communication work: its (library, operation) class in `Names::classes`.
    class: u32,
    kind: EventKind,
    cat: Category,
}

/// Per-kernel-name totals of one rank.
#[derive(Clone, Copy, Debug, Default)]
struct KernelAgg {
    count: u64,
    total: u64,
}

/// Per-copy-kind totals.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CopyAgg {
    pub count: u64,
    pub bytes: u64,
    pub total: u64,
}

/// The per-rank result plus the per-name aggregates that [`crate::Report`] merges across ranks.
#[derive(Clone, Debug)]
pub struct RankAnalysis {
    /// The rank's report.
    pub report: RankReport,
    /// (name, category, count, total ns) of every kernel name.
    pub(crate) kernels: Vec<(String, Category, u64, u64)>,
    /// (kind, pageable) → totals.
    pub(crate) copies: BTreeMap<(String, bool), CopyAgg>,
    /// Per (communicator, operation) totals of the NCCL collectives.
    pub(crate) collectives: Vec<CollectiveAgg>,
    /// The trace's communicator table.
    pub(crate) communicators: Vec<Communicator>,
}

/// HTA-compatible mode, for one trace: HTA's clock and its GPU event filter.
struct HtaPass {
    clock: HtaClock,
    filter: HtaFilter,
}

/// What HTA-compatible mode did on one device.
#[derive(Clone, Copy, Debug, Default)]
struct HtaCounts {
    dropped_last_step: u64,
    dropped_unlinked: u64,
    negative: u64,
}

impl HtaCounts {
    /// Add these to the rank's HTA numbers.
    fn add_to(&self, r: &mut HtaRank) {
        r.dropped_last_step_events += self.dropped_last_step;
        r.dropped_unlinked_events += self.dropped_unlinked;
        r.negative_after_rounding += self.negative;
    }
}

/// What the device pass found, before the API pass resolves the gaps.
struct DevicePass {
    device: u32,
    /// Step windows of this device (the rank's markers, or inferred).
    windows: Vec<Window>,
    /// The kernel whose runs delimit inferred steps.
    steps_inferred_from: Option<StringId>,
    totals: SweepTotals,
    /// Traced time from the first work to the last: `last - first`, or in a
    /// duty-cycled trace the part of it inside the capture windows (what the
    /// masks of `totals` tile).
    span_ns: u64,
    gaps: Vec<Gap>,
    step_masks: Vec<[u64; 8]>,
    /// Exposed communication per label (index into `Links::labels`); `None` for labels
    /// no communication work of this device carried.
    exposed_by_label: Vec<Option<u64>>,
    /// Exposed communication by library, then operation.
    exposed_by_library: BTreeMap<String, BTreeMap<String, u64>>,
    kernels: u64,
    short_kernels: u64,
    short_kernel_ns: u64,
    idle_before_short_ns: u64,
    copies: u64,
    memsets: u64,
    hta_counts: HtaCounts,
    /// GPU-Util's busy time (windows in which a kernel ran).
    util_busy_ns: u64,
    /// The activity timeline, idle gaps not yet added.
    bins: Binner,
}

/// Steps from step marks: step k runs from mark k-1 (step 0: from the rank's first GPU
/// activity) to mark k. Marks at or before the previous boundary end no step (two marks at
/// one instant, a mark before any GPU work). Returns the windows and each one's mark.
fn windows_from_marks(file: &TraceFile, mut marks: Vec<(u64, StepMark)>) -> (Vec<Window>, Vec<StepMark>) {
    marks.sort_by_key(|m| m.0);
    let first_activity = file
        .chunks()
        .iter()
        .filter(|c| {
            matches!(c.track, Track::Gpu { .. })
                && matches!(
                    c.kind,
                    EventKind::Kernel | EventKind::Memcpy | EventKind::Memset | EventKind::GraphLaunch
                )
        })
        .map(|c| c.t_min.0)
        .min();
    let mut prev = first_activity.unwrap_or(marks[0].0);
    let (mut windows, mut per_step) = (Vec::new(), Vec::new());
    for (t, mark) in marks {
        if t > prev {
            windows.push(Window {
                step: windows.len() as u64,
                start: prev,
                end: t,
                // The first step's work was launched before the first GPU activity.
                cpu_start: if windows.is_empty() { 0 } else { prev },
                cpu_end: t,
            });
            per_step.push(mark);
            prev = t;
        }
    }
    (windows, per_step)
}

/// Analyze one trace. `fallback_rank` is used when the header has no rank.
pub fn analyze_file(file: &TraceFile, fallback_rank: u32, opts: &Options) -> Result<RankAnalysis> {
    let header = file.header();
    let mut names = Names::new(file, &opts.classifier);
    let hta_steps = HtaSteps::read(file, opts, &mut names)?;
    // Pass 1: step windows, loss records, collectives (and, for HTA's filter, CPU calls).
    let mut first = first_pass(file, &mut names, &hta_steps)?;
    let (collectives, links) = std::mem::take(&mut first.colls).finish(file);
    first.windows.sort_by_key(|w| (w.start, w.end, w.step));
    // The same range recorded twice (two domains, two threads) is one step.
    first.windows.dedup_by_key(|w| (w.start, w.end, w.step));
    let (hta, mut hta_rank) = hta_pass(file, opts, hta_steps, &mut first);
    choose_steps(file, &mut first, hta.is_some());
    let FirstPass {
        windows,
        mut marks,
        mut losses,
        ..
    } = first;
    // The work each step launched, by correlation id: its GPU window on each device
    // (gputrace's definitions only; HTA-compatible mode keeps HTA's CPU windows).
    let step_links = if hta.is_none() {
        crate::steps::step_links(file, &windows)?
    } else {
        None
    };
    trailer_losses(file, &mut losses);

    // Pass 2: one sweep per device.
    let capture = Capture::from_file(file);
    let mut aggs = RankAggs {
        kernels: vec![KernelAgg::default(); file.string_count()],
        copies: BTreeMap::new(),
        syncs: Vec::new(),
    };
    let mut passes = Vec::new();
    for d in device_ordinals(file) {
        let (dev_windows, anchor) = device_windows(file, d, &windows, step_links.as_ref(), opts, &mut names)?;
        let mut p = device_pass(
            file,
            d,
            &dev_windows,
            opts,
            &mut names,
            &links,
            &mut aggs,
            hta.as_ref(),
            capture.as_ref(),
        )?;
        if let Some(r) = hta_rank.as_mut() {
            p.hta_counts.add_to(r);
        }
        if anchor.is_some() && marks.source == StepSource::None {
            marks.source = StepSource::Inferred;
        }
        p.windows = dev_windows;
        p.steps_inferred_from = anchor;
        passes.push(p);
    }

    // Pass 3: API calls and ranges.
    let top = longest_gaps(&passes, opts.top_gaps);
    let activity = api_pass(file, &mut names, &mut passes, &top, &mut aggs.syncs)?;
    let sync_union = union(std::mem::take(&mut aggs.syncs));

    // Resolve: idle causes per gap, device reports.
    let window = process_window(file);
    let mut reports = Vec::with_capacity(passes.len());
    for (di, p) in passes.iter().enumerate() {
        let mut dev = device_report(p, header, window, &links, capture.as_ref());
        let mut steps = step_reports(p, capture.as_ref());
        resolve_gaps(file, p, &top[di], &activity[di], &sync_union, &mut dev, &mut steps);

        dev.longest_gaps.sort_by_key(|g| (std::cmp::Reverse(g.duration_ns), g.start_ns));
        dev.activity = activity_timeline(p, &sync_union);
        debug_assert!(crate::activity_view::sums_match(&dev), "the activity bins sum to the breakdown");
        debug_assert_eq!(dev.idle_causes.total_ns(), dev.time.idle_ns, "idle causes tile the idle time");
        // A device the header lists but that ran nothing has no steps: its step
        // windows would be all idle, and every table that sums steps over devices
        // would count it (a rank's trace lists every GPU of its node).
        dev.steps = if p.totals.first_start.is_some() { steps } else { Vec::new() };
        dev.steps_inferred_from = p.steps_inferred_from.map(|id| file.name(id).into_owned());
        reports.push(dev);
    }

    let kernels = kernel_list(file, &aggs.kernels, &mut names);
    let util_busy: Vec<u64> = passes.iter().map(|p| p.util_busy_ns).collect();
    add_hardware(file, &mut reports, &util_busy)?;
    let mut report = RankReport {
        rank: header.rank.rank.map_or(fallback_rank, |r| r.0),
        rank_from_header: header.rank.rank.is_some(),
        file: file.path().display().to_string(),
        producer: producer_name(header.producer).to_string(),
        hostname: header.hostname.clone(),
        local_rank: header.rank.local_rank,
        pid: header.pid,
        devices: reports,
        losses,
        events: file.event_total(),
        hta: hta_rank,
        profiler_overhead: file.trailer().map(crate::report::OverheadTotal::from_trailer).unwrap_or_default(),
        capture_levers: crate::levers::CaptureLevers::of(file),
        productive: Productive::default(),
        duty_cycle: capture.as_ref().map(|c| duty_cycle(header, c, window)),
        host: None,
    };
    // The precision the GEMMs ran in, from their names (weighted by GPU time).
    let gemm = crate::peaks::infer_precision(
        kernels
            .iter()
            .filter(|k: &&(String, Category, u64, u64)| k.1 == Category::Compute)
            .map(|k| (k.0.as_str(), k.3)),
    );
    report.productive = rank_productive(
        &report,
        &util_busy,
        &marks,
        header,
        file.trailer().is_some(),
        gemm,
        &opts.productive,
        opts.gpu_hour_cost,
    );
    let idle: Vec<Vec<(u64, u64)>> = passes.iter().map(|p| p.gaps.iter().map(|g| (g.start, g.end)).collect()).collect();
    crate::host::attach(file, &mut report, &idle)?;
    report.losses.host_samples_unwritten =
        crate::report::HostSamplesUnwritten::of(header, file.has_host_samples(), &opts.productive.run_records);
    Ok(RankAnalysis {
        report,
        kernels,
        copies: aggs.copies,
        collectives,
        communicators: file.communicators().to_vec(),
    })
}

/// The step windows of device `d`: inferred from its kernels without step ranges or marks
/// (and the kernel that delimits them), else the steps' GPU windows on it (from the work
/// each step launched: `step_links`), else the rank's windows.
fn device_windows(
    file: &TraceFile,
    d: u32,
    windows: &[Window],
    step_links: Option<&crate::steps::StepLinks>,
    opts: &Options,
    names: &mut Names<'_>,
) -> Result<(Vec<Window>, Option<StringId>)> {
    Ok(if windows.is_empty() && opts.infer_steps {
        infer_steps(file, d, names)?
    } else if let Some(l) = step_links {
        (crate::steps::gpu_windows(file, d, windows, l)?, None)
    } else {
        (windows.to_vec(), None)
    })
}

/// (name, category, count, total ns) of every kernel name that ran.
fn kernel_list(file: &TraceFile, kernels: &[KernelAgg], names: &mut Names<'_>) -> Vec<(String, Category, u64, u64)> {
    kernels
        .iter()
        .enumerate()
        .filter(|(_, k)| k.count > 0)
        .map(|(i, k)| {
            let id = StringId(i as u32);
            (file.name(id).into_owned(), names.kernel(id), k.count, k.total)
        })
        .collect()
}

/// The GPU's own counters over each device's span, next to the timeline's GPU-Util
/// (`util_busy`: each device's busy windows).
fn add_hardware(file: &TraceFile, reports: &mut [DeviceReport], util_busy: &[u64]) -> Result<()> {
    let counters = file.counter_series()?;
    if counters.is_empty() {
        return Ok(());
    }
    for (dev, busy) in reports.iter_mut().zip(util_busy) {
        let util = (dev.time.span_ns > 0).then(|| 100.0 * *busy as f64 / dev.time.span_ns as f64);
        dev.hardware = crate::hardware::report(&counters, dev.device, dev.first_ns.zip(dev.last_ns), util);
    }
    Ok(())
}

/// What the device passes add up over the rank: per kernel name (by string id) and per
/// copy kind, and the CPU synchronization calls (from the API pass too).
struct RankAggs {
    kernels: Vec<KernelAgg>,
    copies: BTreeMap<(String, bool), CopyAgg>,
    syncs: Vec<(u64, u64)>,
}

/// HTA-compatible mode's steps: HTA's step names and its last step, read first (marker
/// chunks only), so that pass 1 keeps no more of the CPU calls than their correlation ids.
struct HtaSteps {
    clock: Option<HtaClock>,
    /// HTA filters only with two or more distinct step names (`_filter_irrelevant_gpu_kernels`).
    filter_active: bool,
    drop_last: bool,
    /// (HTA ts, start, name) of the step range that starts last.
    last_step: Option<(f64, u64, StringId)>,
}

impl HtaSteps {
    fn read(file: &TraceFile, opts: &Options, names: &mut Names<'_>) -> Result<HtaSteps> {
        let clock = opts.hta.map(|h| HtaClock::of(file, h.round_to_us));
        let wants_filter = opts.hta.is_some_and(|h| h.drop_last_step || h.linked_only);
        let mut step_names: BTreeSet<StringId> = BTreeSet::new();
        let mut last_step: Option<(f64, u64, StringId)> = None;
        if let (true, Some(clock)) = (wants_filter, &clock) {
            for_each_of_kinds(file, &[EventKind::Marker], |ev| {
                if let Event::Marker(m) = ev {
                    if m.kind == MarkerKind::RANGE && names.flags(m.name) & NAME_HTA_STEP != 0 {
                        step_names.insert(m.name);
                        let ts = clock.ts(m.start.0);
                        if last_step.is_none_or(|(t, start, _)| (ts, m.start.0) > (t, start)) {
                            last_step = Some((ts, m.start.0, m.name));
                        }
                    }
                }
            })?;
        }
        Ok(HtaSteps {
            clock,
            filter_active: wants_filter && step_names.len() >= 2,
            drop_last: opts.hta.is_some_and(|h| h.drop_last_step),
            last_step,
        })
    }

    /// HTA's time of the last step's start: CPU calls from then on are "late".
    fn cutoff(&self) -> Option<f64> {
        self.last_step.map(|l| l.0)
    }
}

/// What pass 1 finds: step ranges and step marks, losses, collectives, and (for HTA's
/// filter) the correlation ids of the CPU calls that started before the last step (all
/// of them when it is kept), and of those that only started in it or later.
#[derive(Default)]
struct FirstPass {
    windows: Vec<Window>,
    step_marks: Vec<(u64, StepMark)>,
    marks: RankMarks,
    losses: Losses,
    colls: CollAcc,
    early: Vec<u32>,
    late: Vec<u32>,
}

/// Pass 1: markers, loss records and collectives (and API calls for HTA's filter).
fn first_pass(file: &TraceFile, names: &mut Names<'_>, hta: &HtaSteps) -> Result<FirstPass> {
    let (hta_clock, drop_last, cutoff) = (&hta.clock, hta.drop_last, hta.cutoff());
    let FirstPass {
        mut windows,
        mut step_marks,
        mut marks,
        mut losses,
        mut colls,
        mut early,
        mut late,
    } = FirstPass::default();
    let kinds: &[EventKind] = if hta.filter_active {
        &[EventKind::Marker, EventKind::Loss, EventKind::Collective, EventKind::Api]
    } else {
        &[EventKind::Marker, EventKind::Loss, EventKind::Collective]
    };
    for_each_of_kinds(file, kinds, |ev| match ev {
        Event::Marker(m) if m.kind == MarkerKind::RANGE && names.flags(m.name) & NAME_STEP != 0 => {
            let step = step_number(&file.name(m.name)).unwrap_or_default();
            let (start, end) = (m.start.0, m.end.0.max(m.start.0));
            windows.push(Window {
                step,
                start,
                end,
                cpu_start: start,
                cpu_end: end,
            });
        }
        Event::Marker(m) if m.kind == MarkerKind::INSTANT => {
            let (domain, name) = (file.name(m.domain), file.name(m.name));
            match parse_step_mark(&domain, &name) {
                MarkParse::Step(mark) => step_marks.push((m.start.0, mark)),
                MarkParse::Malformed => marks.malformed += 1,
                MarkParse::NotAStepMark => {
                    if let Some(exit) = parse_exit_mark(&domain, &name) {
                        // The last one said how the process ended.
                        marks.exit = Some(exit);
                    }
                }
            }
        }
        Event::Api(a) if a.correlation.0 != 0 => {
            if let Some(clock) = &hta_clock {
                if !drop_last || cutoff.is_some_and(|c| clock.ts(a.start.0) < c) {
                    early.push(a.correlation.0);
                } else {
                    late.push(a.correlation.0);
                }
            }
        }
        Event::Loss(l) if l.source == LossSource::IMPORT => {
            *losses.not_imported.entry(file.name(l.detail).into_owned()).or_insert(0) += l.count
        }
        Event::Loss(l) if l.source == LossSource::COUNTER_FAILED => {
            *losses.counter_series_stopped.entry(file.name(l.detail).into_owned()).or_insert(0) += l.count
        }
        Event::Loss(l) if l.source == LossSource::COUNTER_OVERFLOW => {
            *losses.counter_samples_lost.entry(file.name(l.detail).into_owned()).or_insert(0) += l.count
        }
        Event::Loss(l) => *losses.lost_records.entry(l.source.name().to_string()).or_insert(0) += l.count,
        Event::Collective(c) => colls.add(c),
        _ => {}
    })?;
    Ok(FirstPass {
        windows,
        step_marks,
        marks,
        losses,
        colls,
        early,
        late,
    })
}

/// HTA-compatible mode's pass state (HTA's clock and GPU event filter) and the rank's HTA
/// numbers; drops the last step's window when HTA does. `(None, None)` otherwise.
fn hta_pass(file: &TraceFile, opts: &Options, steps: HtaSteps, first: &mut FirstPass) -> (Option<HtaPass>, Option<HtaRank>) {
    let cutoff = steps.cutoff();
    let (filter_active, last_step) = (steps.filter_active, steps.last_step);
    let (mut early, mut late) = (std::mem::take(&mut first.early), std::mem::take(&mut first.late));
    let windows = &mut first.windows;
    let mut hta_rank = opts.hta.map(|_| HtaRank::default());
    let hta = match (opts.hta, steps.clock) {
        (Some(h), Some(clock)) => {
            for ids in [&mut early, &mut late] {
                ids.sort_unstable();
                ids.dedup();
            }
            let r = hta_rank.as_mut().expect("set with opts.hta");
            r.step_filter = filter_active;
            if let (true, Some((_, start, name))) = (filter_active, last_step) {
                let number = step_number(&file.name(name));
                r.last_step = number;
                r.last_step_start_ns = Some(start);
                if h.drop_last_step {
                    // The last step's window goes too (every range with its number).
                    windows.retain(|w| Some(w.step) != number);
                }
            }
            Some(HtaPass {
                clock,
                filter: HtaFilter {
                    active: filter_active,
                    cutoff,
                    drop_last_step: h.drop_last_step,
                    linked_only: h.linked_only,
                    early,
                    late,
                },
            })
        }
        _ => None,
    };
    (hta, hta_rank)
}

/// Where the steps come from: ProfilerStep ranges, else (not in HTA-compatible mode, which
/// keeps HTA's steps) step marks, which then define the steps.
fn choose_steps(file: &TraceFile, first: &mut FirstPass, hta_mode: bool) {
    let FirstPass {
        windows,
        step_marks,
        marks,
        ..
    } = first;
    marks.source = if !windows.is_empty() {
        StepSource::ProfilerStep
    } else {
        StepSource::None
    };
    if !hta_mode && !step_marks.is_empty() {
        let (mark_windows, per_step) = windows_from_marks(file, std::mem::take(step_marks));
        if !mark_windows.is_empty() {
            marks.windows = mark_windows.iter().map(|w| (w.step, w.end - w.start)).collect();
            *windows = mark_windows;
            marks.per_step = per_step;
            marks.source = StepSource::StepMarks;
        }
    }
}

/// The trailer's loss counts (or that it is missing) and the file's damage.
fn trailer_losses(file: &TraceFile, losses: &mut Losses) {
    match file.trailer() {
        Some(t) => losses.trailer_losses = t.losses.clone(),
        None => losses.trailer_missing = true,
    }
    if let Some(d) = file.damage() {
        losses.damage = Some(format!("at byte {}: {}", d.offset, d.reason));
        losses.damaged_bytes = d.lost_bytes;
    }
}

/// Every device of the trace: the header's, and any that has GPU chunks.
fn device_ordinals(file: &TraceFile) -> BTreeSet<u32> {
    let mut devices: BTreeSet<u32> = file.header().devices.iter().map(|d| d.ordinal.0).collect();
    for c in file.chunks() {
        if let Track::Gpu { device, .. } = c.track {
            devices.insert(device.0);
        }
    }
    devices
}

/// Per device, the indices of its longest gaps (at most `n`), sorted by start.
fn longest_gaps(passes: &[DevicePass], n: usize) -> Vec<Vec<usize>> {
    passes
        .iter()
        .map(|p| {
            let mut idx: Vec<usize> = (0..p.gaps.len()).collect();
            // The longest (ties: the earliest), chosen without sorting them
            // all: the key is unique, so the set is the one a sort gives.
            let key = |&i: &usize| (std::cmp::Reverse(p.gaps[i].end - p.gaps[i].start), i);
            if n < idx.len() {
                idx.select_nth_unstable_by_key(n, key);
                idx.truncate(n);
            }
            idx.sort_unstable_by_key(|&i| (p.gaps[i].start, i));
            idx
        })
        .collect()
}

/// Pass 3: API calls and ranges. Sets when the work after each gap was launched, adds
/// the CPU synchronization calls to `syncs`, and returns per device, per listed gap
/// (`top`), what the CPU did in it (name → overlap).
fn api_pass(
    file: &TraceFile,
    names: &mut Names<'_>,
    passes: &mut [DevicePass],
    top: &[Vec<usize>],
    syncs: &mut Vec<(u64, u64)>,
) -> Result<Vec<Vec<FxHashMap<StringId, u64>>>> {
    // (correlation, device index, gap index) of the work that ended each gap,
    // sorted by correlation. CUPTI numbers calls in issue order, so within a
    // chunk of one thread the API calls' ids increase and a cursor that only
    // moves forward finds them (searched again when an id goes back).
    let mut wanted: Vec<(u32, usize, usize)> = Vec::new();
    for (di, p) in passes.iter().enumerate() {
        for (gi, g) in p.gaps.iter().enumerate() {
            if g.next_corr != 0 {
                wanted.push((g.next_corr, di, gi));
            }
        }
    }
    wanted.sort_unstable();
    let mut wanted_at = 0usize;
    let mut last_corr = 0u32;
    // The longest gaps of each device are sorted by start (they are disjoint), with
    // a name → overlap tally each.
    let mut activity: Vec<Vec<FxHashMap<StringId, u64>>> = top.iter().map(|t| vec![FxHashMap::default(); t.len()]).collect();
    // The spans of those gaps, contiguous (this test runs for every API call
    // and range), and their hull for a cheap first rejection.
    let spans: Vec<Vec<(u64, u64)>> = top
        .iter()
        .zip(passes.iter())
        .map(|(t, p)| t.iter().map(|&gi| (p.gaps[gi].start, p.gaps[gi].end)).collect())
        .collect();
    let mut gaps_seen = GapActivity::new(&spans);
    let mut note_activity = |name: StringId, s: u64, e: u64| gaps_seen.note(name, s, e, &mut activity);
    // What each dictionary entry of a chunk is to this pass: its name, and
    // whether it is an API call, a sync call, a range (else it is skipped).
    const API: u8 = 1;
    const SYNC: u8 = 2;
    const RANGE: u8 = 4;
    let mut entry: Vec<(StringId, u8)> = Vec::new();
    let mut block: Vec<Span> = Vec::with_capacity(SPAN_BLOCK);
    let mut dec = file.decoder();
    for (ci, c) in file.chunks().iter().enumerate() {
        if !matches!(c.kind, EventKind::Api | EventKind::Marker) {
            continue;
        }
        // Only calls and ranges inside one of the longest gaps add to its activity.
        let near_top = spans.iter().flatten().any(|&(gs, ge)| c.t_min.0 < ge && c.t_max.0 > gs);
        if c.kind == EventKind::Marker && !near_top {
            // Ranges only add activity.
            continue;
        }
        let mut cursor = dec.spans(ci)?;
        entry.clear();
        entry.extend(cursor.templates().iter().map(|t| match t {
            Event::Api(a) if names.flags(a.name) & NAME_SYNC_API != 0 => (a.name, API | SYNC),
            Event::Api(a) => (a.name, API),
            Event::Marker(m) if m.kind == MarkerKind::RANGE => (m.name, RANGE),
            _ => (StringId::EMPTY, 0),
        }));
        // Calls outside the longest gaps, and not syncs, only matter for their start and
        // correlation id (the launch of the work that ended a gap): their ends and names
        // are not read.
        let lean = c.kind == EventKind::Api && !near_top && entry.iter().all(|&(_, what)| what == API);
        if lean {
            cursor.skip(true, true);
        }
        loop {
            cursor.fill(&mut block)?;
            if block.is_empty() {
                break;
            }
            for sp in &block {
                // In range when read: `fill` checks every attribute index.
                let (name, what) = if lean { (StringId::EMPTY, API) } else { entry[sp.attr as usize] };
                if what & API != 0 {
                    let corr = sp.corr;
                    if corr < last_corr {
                        wanted_at = wanted.partition_point(|w| w.0 < corr);
                    } else {
                        while wanted.get(wanted_at).is_some_and(|w| w.0 < corr) {
                            wanted_at += 1;
                        }
                    }
                    last_corr = corr;
                    // Several gaps can share an id (kernels of one CUDA graph launch),
                    // and so do a runtime call and the driver call it makes.
                    for &(_, di, gi) in wanted[wanted_at..].iter().take_while(|w| w.0 == corr) {
                        let g = &mut passes[di].gaps[gi];
                        g.launch = g.launch.min(sp.start);
                    }
                    if what & SYNC != 0 {
                        syncs.push((sp.start, sp.end));
                    }
                }
                if what != 0 && !lean {
                    note_activity(name, sp.start, sp.end);
                }
            }
        }
        dec.recycle_spans(cursor);
    }
    Ok(activity)
}

/// The step reports of a device pass, their idle causes not yet added.
fn step_reports(p: &DevicePass, capture: Option<&Capture>) -> Vec<StepReport> {
    p.windows
        .iter()
        .zip(&p.step_masks)
        .map(|(w, m)| {
            let busy: u64 = m[1..].iter().sum();
            let masks = SweepTotals {
                first_start: None,
                last_end: None,
                masks: *m,
            };
            // Within the device's span (a CPU window can reach past it): every idle
            // nanosecond of the step then lies in a gap and has a cause.
            let (first, last) = (p.totals.first_start.unwrap_or(0), p.totals.last_end.unwrap_or(0));
            let start = w.start.clamp(first, last);
            let end = w.end.clamp(start, last.max(start));
            StepReport {
                step: w.step,
                start_ns: start,
                end_ns: end,
                duration_ns: end - start,
                cpu_start_ns: w.cpu_start,
                cpu_end_ns: w.cpu_end,
                compute_ns: masks.sum(|x| x & COMPUTE != 0),
                communication_ns: masks.sum(|x| x & COMM != 0),
                transfer_ns: masks.sum(|x| x & TRANSFER != 0),
                exposed_communication_ns: masks.sum(|x| x & COMM != 0 && x & COMPUTE == 0),
                exposed_transfer_ns: masks.sum(|x| x == TRANSFER),
                // Pieces are clipped to the step window (and to the capture
                // windows), so busy <= traced time in the step.
                idle_ns: capture.map_or(end - start, |c| c.covered(start, end)) - busy,
                idle_causes: IdleCauses::default(),
                host: None,
            }
        })
        .collect()
}

/// Each gap's idle causes, added to the device and to the steps it overlaps; the device's
/// longest gaps (`top`, with what the CPU did in each: `activity`) as gap reports.
fn resolve_gaps(
    file: &TraceFile,
    p: &DevicePass,
    top: &[usize],
    activity: &[FxHashMap<StringId, u64>],
    sync_union: &[(u64, u64)],
    dev: &mut DeviceReport,
    steps: &mut [StepReport],
) {
    let windows = &p.windows;
    let mut step_lo = 0;
    // `top` is sorted by start, as `p.gaps` is: the next listed gap is always at `next_top`.
    let mut next_top = 0;
    for (gi, g) in p.gaps.iter().enumerate() {
        let causes = gap_causes(g, sync_union, g.start, g.end);
        dev.idle_causes.add(&causes);
        while step_lo < windows.len() && windows[step_lo].end <= g.start {
            step_lo += 1;
        }
        // The step holding most of the gap (first on ties).
        let mut main_step: Option<(u64, u64)> = None;
        for (w, s) in windows.iter().zip(steps.iter_mut()).skip(step_lo) {
            if w.start >= g.end {
                break;
            }
            let (lo, hi) = (g.start.max(w.start), g.end.min(w.end));
            if hi > lo {
                if !matches!(main_step, Some((_, best)) if best >= hi - lo) {
                    main_step = Some((w.step, hi - lo));
                }
                let mut c = gap_causes(g, sync_union, lo, hi);
                c.gaps = u64::from(lo == g.start);
                s.idle_causes.add(&c);
            }
        }
        if top.get(next_top) == Some(&gi) {
            let k = next_top;
            next_top += 1;
            let mut cpu: Vec<(StringId, u64)> = activity[k].iter().map(|(n, v)| (*n, *v)).collect();
            cpu.sort_by_key(|&(n, v)| (std::cmp::Reverse(v), n));
            cpu.truncate(3);
            dev.longest_gaps.push(GapReport {
                start_ns: g.start,
                end_ns: g.end,
                duration_ns: g.end - g.start,
                cause: causes.dominant(),
                causes,
                next_work: match g.next_kind {
                    EventKind::Kernel => file.name(g.next_name).into_owned(),
                    k => k.name().to_string(),
                },
                launched_ns: (g.launch != u64::MAX).then_some(g.launch),
                cpu_activity: cpu
                    .into_iter()
                    .map(|(n, v)| CpuActivity {
                        name: file.name(n).into_owned(),
                        overlap_ns: v,
                    })
                    .collect(),
                d2h_bytes_before: g.d2h_before,
                step: main_step.map(|(step, _)| step),
                host: None,
            });
        }
    }
}

/// The trace's producer as the report names it.
fn producer_name(producer: Producer) -> &'static str {
    match producer {
        Producer::Agent => "agent",
        Producer::Synthetic => "synthetic",
        Producer::Import => "import",
        Producer::Launcher => "launcher",
    }
}

/// The duty cycle of a duty-cycled capture `c`, over the process window where known.
fn duty_cycle(header: &Header, c: &Capture, window: Option<(u64, u64)>) -> DutyCycle {
    let (first, last) = c.bounds();
    let (start, end) = window.map_or((first, last), |(s, e)| (s.min(first), e.max(last)));
    let traced = c.traced_ns();
    DutyCycle {
        schedule: header.extra.get("capture.duty").cloned().unwrap_or_default(),
        windows: c.len() as u64,
        traced_ns: traced,
        wall_ns: end - start,
        duty_ratio: if end > start { traced as f64 / (end - start) as f64 } else { 1.0 },
    }
}

/// What the sweep's pieces add up to: per-step masks, and exposed communication by the
/// label of the communication work that owns it.
struct Pieces<'w> {
    windows: &'w [Window],
    step_masks: Vec<[u64; 8]>,
    step_lo: usize,
    /// A piece within `[fast_lo, fast_hi)` lies in window `step_lo` and in no
    /// other (empty, `fast_lo > fast_hi`, until the first piece).
    fast_lo: u64,
    fast_hi: u64,
    /// Communication intervals that may still cover the cursor: (end, label, class), in
    /// start order. The first one still running at an instant owns it (first come).
    comm: Vec<(u64, u32, u32)>,
    exposed_by_label: Vec<Option<u64>>,
    /// Exposed communication per class (index into `Names::classes`), grown as classes
    /// appear.
    exposed_by_class: Vec<Option<u64>>,
    /// A duty-cycled trace's capture windows: only the parts of pieces inside
    /// them count (`None`: traced the whole time).
    capture: Option<Clip<'w>>,
    /// With `capture`, the time per overlap mask inside the windows.
    capture_masks: [u64; 8],
    /// The activity timeline's bins.
    bins: Binner,
}

impl Pieces<'_> {
    /// `[a, b)` with categories `mask`; pieces arrive in time order.
    #[inline(always)]
    fn piece(&mut self, a: u64, b: u64, mask: u8) {
        if self.capture.is_some() {
            self.piece_in_capture(a, b, mask);
        } else {
            self.traced_piece(a, b, mask);
        }
    }

    /// The parts of `[a, b)` inside the capture windows.
    fn piece_in_capture(&mut self, a: u64, b: u64, mask: u8) {
        let Some(mut clip) = self.capture.take() else { return };
        clip.each(a, b, |lo, hi| {
            self.capture_masks[mask as usize] += hi - lo;
            self.traced_piece(lo, hi, mask);
        });
        self.capture = Some(clip);
    }

    /// `[a, b)`, all of it traced time.
    #[inline(always)]
    fn traced_piece(&mut self, a: u64, b: u64, mask: u8) {
        if a >= self.fast_lo && b <= self.fast_hi {
            // Inside window `step_lo` and no other (see `fast_lo`).
            self.step_masks[self.step_lo][mask as usize] += b - a;
        } else {
            self.piece_in_windows(a, b, mask);
        }
        self.bins.piece(a, b, mask);
        if mask & COMM != 0 && mask & COMPUTE == 0 {
            self.exposed(a, b);
        }
    }

    /// Add `[a, b)` to the windows it overlaps, and find the stretch of the
    /// window it starts in that no other window overlaps.
    fn piece_in_windows(&mut self, a: u64, b: u64, mask: u8) {
        // Windows are sorted by start. Windows that ended before a piece can never overlap a later one.
        let windows = self.windows;
        while self.step_lo < windows.len() && windows[self.step_lo].end <= a {
            self.step_lo += 1;
        }
        for (w, m) in windows[self.step_lo..].iter().zip(&mut self.step_masks[self.step_lo..]) {
            if w.start >= b {
                break;
            }
            let (lo, hi) = (a.max(w.start), b.min(w.end));
            if hi > lo {
                m[mask as usize] += hi - lo;
            }
        }
        // Windows before `step_lo` ended by `a`, and later ones start after
        // the next one: a piece within the window up to the next's start
        // overlaps this window only.
        (self.fast_lo, self.fast_hi) = match windows.get(self.step_lo) {
            Some(w) => (w.start, windows.get(self.step_lo + 1).map_or(w.end, |n| n.start.min(w.end))),
            None => (u64::MAX, 0),
        };
    }

    /// Exposed communication `[a, b)`: each instant goes to the communication interval
    /// that started first among those running then.
    #[cold]
    fn exposed(&mut self, a: u64, b: u64) {
        let mut t = a;
        while t < b {
            let owner = self.comm.iter().find(|c| c.0 > t).copied();
            // The sweep saw communication here, so an interval covers `t`; the fallback
            // only keeps the identity should that ever not hold.
            let (end, label, class) = owner.unwrap_or((b, LABEL_UNATTRIBUTED, 0));
            let hi = end.min(b);
            *self.exposed_by_label[label as usize].get_or_insert(0) += hi - t;
            if let Some(c) = self.exposed_by_class.get_mut(class as usize) {
                *c.get_or_insert(0) += hi - t;
            }
            t = hi;
        }
    }

    /// A communication interval entered the sweep (after the sweep accounted up to `start`).
    fn comm_started(&mut self, start: u64, end: u64, label: u32, class: u32) {
        self.comm.retain(|c| c.0 > start);
        self.comm.push((end, label, class));
        self.exposed_by_label[label as usize].get_or_insert(0);
        let c = class as usize;
        if c >= self.exposed_by_class.len() {
            self.exposed_by_class.resize(c + 1, None);
        }
        self.exposed_by_class[c].get_or_insert(0);
    }
}

/// Sweep one device's GPU chunks.
#[allow(clippy::too_many_arguments)]
fn device_pass(
    file: &TraceFile,
    device: u32,
    windows: &[Window],
    opts: &Options,
    names: &mut Names<'_>,
    links: &Links,
    aggs: &mut RankAggs,
    hta: Option<&HtaPass>,
    capture: Option<&Capture>,
) -> Result<DevicePass> {
    let mut reader = WorkReader {
        names,
        links,
        link_table: links.by_device.get(&device).map_or(&[], |v| v.as_slice()),
        kernel_aggs: &mut aggs.kernels,
        syncs: &mut aggs.syncs,
        hta,
        short: opts.short_kernel_ns,
        stats: DeviceStats::default(),
    };
    let mut sweeper = DeviceSweep {
        util: UtilWindows::new(opts.productive.window_ns()),
        sweep: Sweep::new(),
        gaps: Vec::new(),
        pieces: Pieces {
            windows,
            step_masks: vec![[0u64; 8]; windows.len()],
            step_lo: 0,
            fast_lo: u64::MAX,
            fast_hi: 0,
            comm: Vec::new(),
            exposed_by_label: vec![None; links.labels.len()],
            exposed_by_class: Vec::new(),
            capture: capture.map(Capture::clip),
            capture_masks: [0; 8],
            bins: Binner::default(),
        },
        gap_clip: capture.map(Capture::clip),
        d2h: VecDeque::new(),
        d2h_bytes: 0,
        long_pause: opts.long_pause_ns,
        short: opts.short_kernel_ns,
        idle_before_short_ns: 0,
    };
    let chunks = file.chunks();
    let gpu_work: Vec<usize> = (0..chunks.len())
        .filter(|&i| {
            matches!(chunks[i].track, Track::Gpu { device: d, .. } if d.0 == device)
                && matches!(
                    chunks[i].kind,
                    EventKind::Kernel | EventKind::Memcpy | EventKind::Memset | EventKind::Sync | EventKind::GraphLaunch
                )
        })
        .collect();
    file.for_each_span_merged(
        gpu_work,
        |_| (),
        |sp, _, templates| {
            // In range: the cursor checks every attribute index.
            if let Some(w) = reader.work(sp, &templates[sp.attr as usize]) {
                sweeper.push(&w);
            }
        },
    )?;
    let WorkReader { names, stats, .. } = reader;
    let DeviceSweep {
        util,
        sweep,
        gaps,
        mut pieces,
        idle_before_short_ns,
        ..
    } = sweeper;
    let mut totals = sweep.finish(&mut |a, b, m| pieces.piece(a, b, m));
    let span_ns = match (capture, totals.first_start.zip(totals.last_end)) {
        (Some(c), Some((first, last))) => {
            // Only the pieces inside the windows count: they tile the traced span.
            totals.masks = pieces.capture_masks;
            c.covered(first, last)
        }
        (_, Some((first, last))) => last - first,
        (_, None) => 0,
    };
    debug_assert_eq!(totals.masks.iter().sum::<u64>(), span_ns, "the masks tile the traced span");
    stats.add_copies(&mut aggs.copies);
    debug_assert_eq!(
        gaps.iter().map(|g| g.end - g.start).sum::<u64>(),
        totals.masks[0],
        "gaps are the idle pieces"
    );
    debug_assert_eq!(
        pieces.exposed_by_label.iter().flatten().sum::<u64>(),
        totals.sum(|x| x & COMM != 0 && x & COMPUTE == 0),
        "exposed communication by label tiles exposed communication"
    );
    let mut exposed_by_library: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for (i, ns) in pieces.exposed_by_class.iter().enumerate() {
        if let (Some(ns), Some((library, op))) = (ns, names.classes.list.get(i)) {
            *exposed_by_library
                .entry(library.clone())
                .or_default()
                .entry(op.clone())
                .or_insert(0) += ns;
        }
    }
    Ok(DevicePass {
        device,
        windows: Vec::new(),
        steps_inferred_from: None,
        totals,
        span_ns,
        gaps,
        step_masks: pieces.step_masks,
        exposed_by_label: pieces.exposed_by_label,
        exposed_by_library,
        kernels: stats.kernels,
        short_kernels: stats.short_kernels,
        short_kernel_ns: stats.short_kernel_ns,
        idle_before_short_ns,
        copies: stats.copies,
        memsets: stats.memsets,
        hta_counts: stats.hta_counts,
        util_busy_ns: util.busy_ns(totals.first_start, totals.last_end),
        bins: pieces.bins,
    })
}

/// A device's statistics, which do not depend on the order of its work.
struct DeviceStats {
    kernels: u64,
    short_kernels: u64,
    short_kernel_ns: u64,
    copies: u64,
    memsets: u64,
    /// Copy kinds are few: by (kind byte, pageable), named at the end.
    copy_small: [[CopyAgg; 2]; 256],
    memset_agg: CopyAgg,
    hta_counts: HtaCounts,
}

impl Default for DeviceStats {
    fn default() -> DeviceStats {
        DeviceStats {
            kernels: 0,
            short_kernels: 0,
            short_kernel_ns: 0,
            copies: 0,
            memsets: 0,
            copy_small: [[CopyAgg::default(); 2]; 256],
            memset_agg: CopyAgg::default(),
            hta_counts: HtaCounts::default(),
        }
    }
}

impl DeviceStats {
    /// Add the copies and memsets, by kind name, to the rank's `copy_aggs`.
    fn add_copies(&self, copy_aggs: &mut BTreeMap<(String, bool), CopyAgg>) {
        for (kind, pair) in self.copy_small.iter().enumerate() {
            for (pageable, a) in pair.iter().enumerate() {
                if a.count > 0 {
                    let e = copy_aggs
                        .entry((CopyKind(kind as u8).name().to_string(), pageable == 1))
                        .or_default();
                    e.count += a.count;
                    e.bytes += a.bytes;
                    e.total += a.total;
                }
            }
        }
        if self.memset_agg.count > 0 {
            let e = copy_aggs.entry(("memset".to_string(), false)).or_default();
            e.count += self.memset_agg.count;
            e.bytes += self.memset_agg.bytes;
            e.total += self.memset_agg.total;
        }
    }
}

/// Turns a device's GPU events into [`Work`] for the sweep, gathering the statistics
/// (which do not depend on order) on the way: the record keeps only what the ordered
/// sweep needs.
struct WorkReader<'a, 'n> {
    names: &'a mut Names<'n>,
    links: &'a Links,
    /// The device's (correlation, label) links.
    link_table: &'a [(u32, u32)],
    kernel_aggs: &'a mut [KernelAgg],
    syncs: &'a mut Vec<(u64, u64)>,
    hta: Option<&'a HtaPass>,
    short: u64,
    stats: DeviceStats,
}

impl WorkReader<'_, '_> {
    /// The work of span `sp`, or `None` for an event the sweep does not take (or HTA's
    /// filter drops). `ev` is the span's dictionary entry: its own times and correlation
    /// are not the span's (read those from `sp`).
    fn work(&mut self, sp: &Span, ev: &Event) -> Option<Work> {
        let corr = sp.corr;
        match ev {
            Event::Kernel(_) | Event::Memcpy(_) | Event::Memset(_) | Event::GraphLaunch(_) => {}
            Event::Sync(_) => self.syncs.push((sp.start, sp.end)),
            _ => return None,
        }
        let (start, end) = self.interval(corr, sp.start, sp.end)?;
        let hta = self.hta;
        let (names, links, link_table) = (&mut *self.names, self.links, self.link_table);
        let short = self.short;
        let stats = &mut self.stats;
        let DeviceStats {
            kernels,
            short_kernels,
            short_kernel_ns,
            copies,
            memsets,
            copy_small,
            memset_agg,
            ..
        } = stats;
        let kernel_aggs = &mut *self.kernel_aggs;
        // What the sweep needs of the event besides its times and correlation.
        let (kind, name, label, class, cat, d2h_bytes) = match ev {
            Event::Kernel(k) => {
                let dur = end.saturating_sub(start);
                *kernels += 1;
                if dur < short {
                    *short_kernels += 1;
                    *short_kernel_ns += dur;
                }
                if let Some(a) = kernel_aggs.get_mut(k.name.0 as usize) {
                    a.count += 1;
                    a.total += dur;
                }
                let cat = match hta {
                    Some(_) => names.hta_kernel(k.name),
                    None => names.kernel(k.name),
                };
                let (label, class) = match cat {
                    Category::Communication => {
                        let link = Links::label(link_table, corr);
                        (link.unwrap_or(LABEL_UNATTRIBUTED), names.kernel_class(k.name, link, links))
                    }
                    _ => (LABEL_UNATTRIBUTED, 0),
                };
                (EventKind::Kernel, k.name, label, class, cat, 0)
            }
            Event::Memcpy(m) => {
                *copies += 1;
                let pageable = m.src_kind == MemoryKind::PAGEABLE || m.dst_kind == MemoryKind::PAGEABLE;
                let a = &mut copy_small[m.kind.0 as usize][pageable as usize];
                a.count += 1;
                a.bytes += m.bytes;
                a.total += end.saturating_sub(start);
                let (cat, label, class) = if is_peer_copy(m) {
                    // A copy-engine collective runs as peer copies.
                    let link = Links::label(link_table, corr);
                    (
                        Category::Communication,
                        link.unwrap_or(LABEL_PEER_COPY),
                        names.copy_class(link, links),
                    )
                } else {
                    (Category::Transfer, LABEL_UNATTRIBUTED, 0)
                };
                let d2h_bytes = if m.kind == CopyKind::DTOH { m.bytes } else { 0 };
                (EventKind::Memcpy, StringId::EMPTY, label, class, cat, d2h_bytes)
            }
            Event::Memset(m) => {
                *memsets += 1;
                memset_agg.count += 1;
                memset_agg.bytes += m.bytes;
                memset_agg.total += end.saturating_sub(start);
                (EventKind::Memset, StringId::EMPTY, LABEL_UNATTRIBUTED, 0, Category::Transfer, 0)
            }
            // HTA reads synchronization records (Kineto `cuda_sync`) as GPU events of its
            // "other" type: non-compute work. Otherwise they only explain idle time.
            Event::Sync(_) if hta.is_some() => (EventKind::Sync, StringId::EMPTY, LABEL_UNATTRIBUTED, 0, Category::Transfer, 0),
            // A graph recorded at graph level: one busy interval, its nodes unknown (compute).
            Event::GraphLaunch(_) => (EventKind::GraphLaunch, StringId::EMPTY, LABEL_UNATTRIBUTED, 0, Category::Compute, 0),
            _ => return None,
        };
        let work = Work {
            start,
            end,
            d2h_bytes,
            corr,
            name,
            label,
            class,
            kind,
            cat,
        };
        // Empty and inverted intervals cover no time: they neither end a gap nor enter the
        // sweep, except in HTA-compatible mode, where they bound the span (as instants).
        (work.end > work.start || hta.is_some()).then_some(work)
    }

    /// (start, end) as the sweep sees them: in HTA-compatible mode, HTA's filter first
    /// (`None`: dropped), then its rounding.
    fn interval(&mut self, corr: u32, start: u64, end: u64) -> Option<(u64, u64)> {
        let Some(h) = self.hta else {
            return Some((start, end));
        };
        let counts = &mut self.stats.hta_counts;
        match h.filter.verdict(corr, h.clock.ts(start)) {
            Verdict::Keep => {}
            Verdict::LastStep => {
                counts.dropped_last_step += 1;
                return None;
            }
            Verdict::Unlinked => {
                counts.dropped_unlinked += 1;
                return None;
            }
        }
        let (s, e) = h.clock.interval(start, end);
        counts.negative += u64::from(e < s);
        Some((s, e))
    }
}

/// The ordered sweep of one device's work: idle gaps (with the device-to-host bytes
/// before long ones), the pieces per step and label, GPU-Util's windows.
struct DeviceSweep<'w> {
    util: UtilWindows,
    sweep: Sweep,
    gaps: Vec<Gap>,
    pieces: Pieces<'w>,
    /// Idle gaps are cut to the capture windows as the pieces are.
    gap_clip: Option<Clip<'w>>,
    /// Device-to-host copies of the last D2H_LOOKBACK_NS: (end, bytes), and their sum.
    d2h: VecDeque<(u64, u64)>,
    d2h_bytes: u64,
    long_pause: u64,
    short: u64,
    /// Idle that ended at a short kernel: the GPU ran dry before it (launch-bound).
    idle_before_short_ns: u64,
}

impl DeviceSweep<'_> {
    /// Sweep the next work (in start order).
    fn push(&mut self, w: &Work) {
        if matches!(w.kind, EventKind::Kernel | EventKind::GraphLaunch) {
            self.util.kernel(w.start, w.end);
        } else {
            self.util.work(w.start);
        }
        if let Some((a, b)) = self.sweep.gap_before(w.start) {
            self.gap(w, a, b);
        }
        // Keep the lookback queue short even without long gaps.
        while self.d2h.front().is_some_and(|&(e, _)| e + D2H_LOOKBACK_NS < w.start) {
            self.d2h_bytes -= self.d2h.pop_front().map_or(0, |x| x.1);
        }
        if w.d2h_bytes > 0 {
            self.d2h.push_back((w.end, w.d2h_bytes));
            self.d2h_bytes += w.d2h_bytes;
        }
        let pieces = &mut self.pieces;
        if w.end <= w.start {
            // HTA-compatible mode only: zero-length (or, after HTA's rounding, negative-length) work.
            self.sweep.push_instant(w.start, &mut |a, b, m| pieces.piece(a, b, m));
            return;
        }
        self.sweep.push(w.cat, w.start, w.end, &mut |a, b, m| pieces.piece(a, b, m));
        if w.cat == Category::Communication {
            pieces.comm_started(w.start, w.end, w.label, w.class);
        }
    }

    /// The idle gap [a, b) that `w` ends (cut to the capture windows).
    fn gap(&mut self, w: &Work, a: u64, b: u64) {
        let before_short = w.kind == EventKind::Kernel && w.end.saturating_sub(w.start) < self.short;
        let long_pause = self.long_pause;
        let DeviceSweep {
            gaps,
            gap_clip,
            d2h,
            d2h_bytes,
            idle_before_short_ns,
            ..
        } = self;
        let mut push_gap = |a: u64, b: u64| {
            if before_short {
                *idle_before_short_ns += b - a;
            }
            let mut d2h_before = 0;
            if b - a >= long_pause {
                while d2h.front().is_some_and(|&(e, _)| e + D2H_LOOKBACK_NS < a) {
                    *d2h_bytes -= d2h.pop_front().map_or(0, |x| x.1);
                }
                d2h_before = *d2h_bytes;
            }
            gaps.push(Gap {
                start: a,
                end: b,
                next_corr: w.corr,
                next_kind: w.kind,
                next_name: w.name,
                launch: u64::MAX,
                d2h_before,
            });
        };
        match gap_clip.as_mut() {
            None => push_gap(a, b),
            Some(clip) => clip.each(a, b, push_gap),
        }
    }
}

/// Fewest runs of a kernel for it to delimit inferred steps.
const MIN_INFERRED_STEPS: u32 = 3;

/// How often one kernel name ran, in start order.
#[derive(Clone, Copy, Debug, Default)]
struct Runs {
    count: u32,
    first: u64,
    last: u64,
    min_interval: u64,
}

/// Steps from the repeating kernel pattern, for a device without step
/// markers. The number of steps is taken to be the most common run count
/// among compute kernel names that ran at least `MIN_INFERRED_STEPS` times
/// (in a training loop many kernels run exactly once per step); among the
/// names with that count, the one that starts first and never ran closer
/// than half its mean period to its previous run is the anchor. Each step
/// runs from one start of the anchor to the next; the last ends with the
/// device's last work. Heuristic: the windows are GPU time, and work before
/// the anchor's first run belongs to no step.
fn infer_steps(file: &TraceFile, device: u32, names: &mut Names<'_>) -> Result<(Vec<Window>, Option<StringId>)> {
    let mut runs = vec![Runs::default(); file.string_count()];
    let mut last_end = 0u64;
    let mut anchor_starts: Vec<u64> = Vec::new();
    let chunks = file.chunks();
    let kernels_of_device: Vec<usize> = (0..chunks.len())
        .filter(|&i| chunks[i].kind == EventKind::Kernel && matches!(chunks[i].track, Track::Gpu { device: d, .. } if d.0 == device))
        .collect();
    // In range: the cursor checks every attribute index.
    let name_of = |sp: &Span, templates: &[Event]| match templates[sp.attr as usize] {
        Event::Kernel(k) => Some(k.name),
        _ => None,
    };
    file.for_each_span_merged(
        kernels_of_device.clone(),
        |_| (),
        |sp, _, templates| {
            let Some(name) = name_of(sp, templates) else { return };
            let (start, end) = (sp.start, sp.end);
            last_end = last_end.max(end);
            if let Some(r) = runs.get_mut(name.0 as usize) {
                if r.count == 0 {
                    r.first = start;
                    r.min_interval = u64::MAX;
                } else {
                    r.min_interval = r.min_interval.min(start - r.last);
                }
                r.count += 1;
                r.last = start;
            }
        },
    )?;
    let mut count_votes: BTreeMap<u32, u32> = BTreeMap::new();
    let candidates: Vec<(usize, Runs)> = runs
        .iter()
        .enumerate()
        .filter(|(i, r)| r.count >= MIN_INFERRED_STEPS && names.kernel(StringId(*i as u32)) == Category::Compute)
        .map(|(i, r)| (i, *r))
        .collect();
    for (_, r) in &candidates {
        *count_votes.entry(r.count).or_insert(0) += 1;
    }
    // Most votes; on a tie the smaller count (fewer, longer steps).
    let Some((&steps, _)) = count_votes
        .iter()
        .max_by_key(|(count, votes)| (**votes, std::cmp::Reverse(**count)))
    else {
        return Ok((Vec::new(), None));
    };
    let regular = |r: &Runs| {
        let mean = (r.last - r.first) / u64::from(r.count - 1);
        r.min_interval.saturating_mul(2) >= mean && mean > 0
    };
    let Some(&(anchor, _)) = candidates
        .iter()
        .filter(|(_, r)| r.count == steps && regular(r))
        .min_by_key(|(i, r)| (r.first, *i))
    else {
        return Ok((Vec::new(), None));
    };
    let anchor = StringId(anchor as u32);
    file.for_each_span_merged(
        kernels_of_device,
        |_| (),
        |sp, _, templates| {
            if name_of(sp, templates) == Some(anchor) {
                anchor_starts.push(sp.start);
            }
        },
    )?;
    let windows = anchor_starts
        .iter()
        .enumerate()
        .map(|(i, &start)| {
            let end = anchor_starts.get(i + 1).copied().unwrap_or(last_end).max(start);
            Window {
                step: i as u64,
                start,
                end,
                cpu_start: start,
                cpu_end: end,
            }
        })
        .collect();
    Ok((windows, Some(anchor)))
}

/// Which CPU calls and ranges overlap the longest gaps of each device, for
/// events that arrive in start order within each chunk.
///
/// Invariant (after each event): `cursor[d]` is device `d`'s first gap
/// (in `spans[d]`, sorted and disjoint) that ends after `last_start`, and
/// `next_start` / `next_end` are the earliest start and end of those gaps
/// (`u64::MAX` when no device has one left).
struct GapActivity<'s> {
    spans: &'s [Vec<(u64, u64)>],
    cursor: Vec<usize>,
    last_start: u64,
    next_start: u64,
    next_end: u64,
}

impl<'s> GapActivity<'s> {
    fn new(spans: &'s [Vec<(u64, u64)>]) -> Self {
        let mut g = GapActivity {
            spans,
            cursor: vec![0; spans.len()],
            last_start: 0,
            next_start: 0,
            next_end: 0,
        };
        g.bounds();
        g
    }

    fn bounds(&mut self) {
        let current = self.spans.iter().zip(&self.cursor).filter_map(|(t, &c)| t.get(c));
        (self.next_start, self.next_end) = current.fold((u64::MAX, u64::MAX), |(a, b), &(gs, ge)| (a.min(gs), b.min(ge)));
    }

    /// Add `[s, e)` of `name` to the gaps it overlaps.
    #[inline]
    fn note(&mut self, name: StringId, s: u64, e: u64, activity: &mut [Vec<FxHashMap<StringId, u64>>]) {
        // Most calls overlap no long gap: no cursor moves (every current gap
        // ends after `s`) and the call ends before any of them starts.
        if s >= self.last_start && s < self.next_end && e <= self.next_start {
            self.last_start = s;
            return;
        }
        self.note_slow(name, s, e, activity);
    }

    #[inline(never)]
    fn note_slow(&mut self, name: StringId, s: u64, e: u64, activity: &mut [Vec<FxHashMap<StringId, u64>>]) {
        // The start went back (the next chunk): search again.
        let restart = s < self.last_start;
        self.last_start = s;
        for ((di, t), c) in self.spans.iter().enumerate().zip(self.cursor.iter_mut()) {
            if restart {
                *c = t.partition_point(|&(_, ge)| ge <= s);
            } else {
                while t.get(*c).is_some_and(|&(_, ge)| ge <= s) {
                    *c += 1;
                }
            }
            for (k, &(gs, ge)) in t.iter().enumerate().skip(*c) {
                if gs >= e {
                    break;
                }
                let overlap = e.min(ge).saturating_sub(s.max(gs));
                if overlap > 0 {
                    *activity[di][k].entry(name).or_insert(0) += overlap;
                }
            }
        }
        self.bounds();
    }
}

/// The device's activity timeline: the sweep's bins with the idle gaps added by cause.
fn activity_timeline(p: &DevicePass, syncs: &[(u64, u64)]) -> Option<crate::activity::Activity> {
    let mut bins = p.bins.clone();
    for g in &p.gaps {
        bins.gap(g.start, g.end, (g.launch != u64::MAX).then_some(g.launch), syncs);
    }
    bins.finish()
}

/// Sorted, disjoint union of intervals.
fn union(mut v: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    v.retain(|&(s, e)| e > s);
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (s, e) in v {
        match out.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => out.push((s, e)),
        }
    }
    out
}

/// Time of `[lo, hi)` covered by a sorted, disjoint union.
fn covered(u: &[(u64, u64)], lo: u64, hi: u64) -> u64 {
    let first = u.partition_point(|&(_, e)| e <= lo);
    let mut sum = 0;
    for &(s, e) in &u[first..] {
        if s >= hi {
            break;
        }
        sum += e.min(hi) - s.max(lo);
    }
    sum
}

/// Causes of the part `[lo, hi)` of gap `g`. Before the launching call was
/// entered, the CPU was either blocked in a synchronization or busy elsewhere
/// (host-bound); after it, the work was queued (latency). Sums to `hi - lo`.
fn gap_causes(g: &Gap, syncs: &[(u64, u64)], lo: u64, hi: u64) -> IdleCauses {
    let mut c = IdleCauses {
        gaps: 1,
        ..IdleCauses::default()
    };
    if g.launch == u64::MAX {
        c.unattributed_ns = hi - lo;
        return c;
    }
    let launched = g.launch.clamp(lo, hi);
    c.synchronization_ns = covered(syncs, lo, launched);
    c.host_bound_ns = (launched - lo) - c.synchronization_ns;
    c.launch_latency_ns = hi - launched;
    c
}

/// The recording window of a gputrace capture, in the trace's time domain.
fn process_window(file: &TraceFile) -> Option<(u64, u64)> {
    let h = file.header();
    if h.producer == Producer::Import {
        return None;
    }
    let pick = |c: &ClockPair| match h.time_domain {
        TimeDomain::Cupti => c.cupti_ns.unwrap_or(c.realtime_ns),
        TimeDomain::Realtime => c.realtime_ns,
        TimeDomain::Monotonic => c.monotonic_ns,
    };
    let start = pick(&h.start_clock);
    if start == 0 {
        return None;
    }
    let (lo, hi) = file.time_span().unwrap_or((Nanos(start), Nanos(start)));
    let end = file.trailer().map(|t| pick(&t.end_clock)).unwrap_or(0).max(hi.0);
    Some((start.min(lo.0), end))
}

fn device_report(p: &DevicePass, header: &Header, window: Option<(u64, u64)>, links: &Links, capture: Option<&Capture>) -> DeviceReport {
    let t = &p.totals;
    let m = |mask: u8| t.masks[mask as usize];
    let span = p.span_ns;
    // Idle before the first and after the last work counts traced time only.
    let traced = |lo: u64, hi: u64| capture.map_or(hi.saturating_sub(lo), |c| c.covered(lo, hi));
    let compute = t.sum(|x| x & COMPUTE != 0);
    let communication = t.sum(|x| x & COMM != 0);
    let transfer = t.sum(|x| x & TRANSFER != 0);
    let exposed_communication = t.sum(|x| x & COMM != 0 && x & COMPUTE == 0);
    let exposed_transfer = m(TRANSFER);
    let overlap = Overlap {
        compute_only_ns: m(COMPUTE),
        compute_communication_ns: m(COMPUTE | COMM),
        compute_transfer_ns: m(COMPUTE | TRANSFER),
        compute_communication_transfer_ns: m(COMPUTE | COMM | TRANSFER),
        communication_only_ns: m(COMM),
        communication_transfer_ns: m(COMM | TRANSFER),
        transfer_only_ns: m(TRANSFER),
        communication_hidden_ns: communication - exposed_communication,
        transfer_hidden_ns: transfer - exposed_transfer,
    };
    let process_window = window.map(|(start, end)| {
        let (startup, teardown) = match (t.first_start, t.last_end) {
            (Some(f), Some(l)) => (traced(start, f), traced(l, end)),
            _ => (traced(start, end), 0),
        };
        ProcessWindow {
            start_ns: start,
            end_ns: end,
            window_ns: end - start,
            startup_idle_ns: startup,
            teardown_idle_ns: teardown,
            traced_ns: traced(start, end),
        }
    });
    DeviceReport {
        device: p.device,
        name: header
            .devices
            .iter()
            .find(|d| d.ordinal.0 == p.device)
            .map(|d| d.name.clone())
            .unwrap_or_default(),
        first_ns: t.first_start,
        last_ns: t.last_end,
        time: TimeSplit {
            span_ns: span,
            compute_ns: compute,
            communication_ns: communication,
            transfer_ns: transfer,
            exposed_communication_ns: exposed_communication,
            exposed_transfer_ns: exposed_transfer,
            exposed_communication_by_op_ns: p
                .exposed_by_label
                .iter()
                .zip(&links.labels)
                .filter_map(|(ns, label)| ns.map(|ns| (label.clone(), ns)))
                .collect(),
            exposed_communication_by_library_ns: p.exposed_by_library.clone(),
            idle_ns: m(0),
        },
        overlap,
        idle_causes: IdleCauses::default(),
        process_window,
        kernels: p.kernels,
        short_kernels: p.short_kernels,
        short_kernel_ns: p.short_kernel_ns,
        idle_before_short_kernels_ns: p.idle_before_short_ns,
        copies: p.copies,
        memsets: p.memsets,
        longest_gaps: Vec::new(),
        steps: Vec::new(),
        steps_inferred_from: None,
        hardware: None,
        activity: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the gaps and the calls (sorted by start within each
        /// chunk, chunks in any order), every call's overlap with every gap
        /// is counted exactly once, as a brute-force sum counts it.
        #[test]
        fn gap_activity_counts_every_overlap(
            gaps in proptest::collection::vec(proptest::collection::vec((0u64..40, 1u64..30), 0..6), 1..4),
            chunks in proptest::collection::vec(proptest::collection::vec((0u64..900, 0u64..60, 0u32..3), 0..40), 1..4),
        ) {
            // Disjoint sorted gaps per device, from (space before, length).
            let spans: Vec<Vec<(u64, u64)>> = gaps
                .iter()
                .map(|d| {
                    let mut t = 0;
                    d.iter().map(|&(before, len)| { t += before; let g = (t, t + len); t += len; g }).collect()
                })
                .collect();
            let mut activity: Vec<Vec<FxHashMap<StringId, u64>>> = spans.iter().map(|t| vec![FxHashMap::default(); t.len()]).collect();
            let mut want = activity.clone();
            let mut g = GapActivity::new(&spans);
            for chunk in &chunks {
                let mut calls = chunk.clone();
                calls.sort_by_key(|c| c.0);
                for &(s, len, name) in &calls {
                    let (e, name) = (s + len, StringId(name));
                    g.note(name, s, e, &mut activity);
                    for (di, t) in spans.iter().enumerate() {
                        for (k, &(gs, ge)) in t.iter().enumerate() {
                            let overlap = e.min(ge).saturating_sub(s.max(gs));
                            if overlap > 0 {
                                *want[di][k].entry(name).or_insert(0) += overlap;
                            }
                        }
                    }
                }
            }
            prop_assert_eq!(activity, want);
        }
    }

    proptest! {
        /// Pieces reach every window they overlap, with the shortcut for pieces inside one
        /// window as without it: windows sorted by start, overlapping or nested, and pieces
        /// that tile time in order.
        #[test]
        fn pieces_add_to_every_window_they_overlap(
            windows in proptest::collection::vec((0u64..300, 0u64..80), 0..6),
            cuts in proptest::collection::vec((1u64..40, 0u8..8), 1..40),
        ) {
            let mut windows: Vec<Window> = windows.iter().enumerate().map(|(i, &(start, len))| Window { step: i as u64, start, end: start + len, cpu_start: start, cpu_end: start + len }).collect();
            windows.sort_by_key(|w| (w.start, w.end, w.step));
            let mut p = Pieces {
                windows: &windows,
                step_masks: vec![[0u64; 8]; windows.len()],
                step_lo: 0,
                fast_lo: u64::MAX,
                fast_hi: 0,
                comm: Vec::new(),
                exposed_by_label: vec![None; 2],
                exposed_by_class: Vec::new(),
                capture: None,
                capture_masks: [0; 8],
                bins: Binner::default(),
            };
            let mut want = vec![[0u64; 8]; windows.len()];
            let mut t = 0;
            for &(len, mask) in &cuts {
                // No communication-only masks: exposed communication needs intervals.
                let mask = if mask & COMM != 0 { mask | COMPUTE } else { mask };
                p.piece(t, t + len, mask);
                for (w, m) in windows.iter().zip(&mut want) {
                    let overlap = (t + len).min(w.end).saturating_sub(t.max(w.start));
                    m[mask as usize] += overlap;
                }
                t += len;
            }
            prop_assert_eq!(p.step_masks, want);
        }
    }

    #[test]
    fn union_and_coverage() {
        let u = union(vec![(50, 60), (10, 20), (15, 30), (30, 35), (40, 40), (70, 65)]);
        assert_eq!(u, [(10, 35), (50, 60)], "touching intervals merge; empty and inverted ones vanish");
        assert_eq!(covered(&u, 0, 100), 35);
        assert_eq!(covered(&u, 20, 55), 15 + 5);
        assert_eq!(covered(&u, 35, 50), 0);
        assert_eq!(covered(&[], 0, 10), 0);
    }

    #[test]
    fn gap_causes_split_at_the_launch() {
        let gap = |launch| Gap {
            start: 100,
            end: 200,
            next_corr: 1,
            next_kind: EventKind::Kernel,
            next_name: StringId::EMPTY,
            launch,
            d2h_before: 0,
        };
        let syncs = [(90, 120), (130, 140)];
        let c = gap_causes(&gap(150), &syncs, 100, 200);
        assert_eq!(
            (c.synchronization_ns, c.host_bound_ns, c.launch_latency_ns, c.unattributed_ns),
            (30, 20, 50, 0)
        );
        // Launched before the gap: all latency; after its end (clock skew): all CPU-side.
        assert_eq!(gap_causes(&gap(10), &syncs, 100, 200).launch_latency_ns, 100);
        assert_eq!(gap_causes(&gap(500), &[], 100, 200).host_bound_ns, 100);
        assert_eq!(gap_causes(&gap(u64::MAX), &syncs, 100, 200).unattributed_ns, 100);
        // A part of the gap (a step window) splits the same way.
        let c = gap_causes(&gap(150), &syncs, 140, 160);
        assert_eq!((c.synchronization_ns, c.host_bound_ns, c.launch_latency_ns), (0, 10, 10));
    }

    #[test]
    fn step_names() {
        assert_eq!(step_number("ProfilerStep#12"), Some(12));
        assert_eq!(step_number("ProfilerStep#"), None);
        assert_eq!(step_number("ProfilerStep#x"), None);
        assert_eq!(step_number("profilerstep#1"), None);
        assert!(is_sync_api("cudaStreamSynchronize") && is_sync_api("cuCtxSynchronize"));
        assert!(!is_sync_api("cudaLaunchKernel") && !is_sync_api("ncclSynchronize"));
    }
}
