//! What to export: the input ranks, how their clocks line up, and the
//! filters (time window, ranks, devices, event budget).

use crate::error::{ExportError, Result};
use gputrace_classify::Classifier;
use gputrace_format::*;

/// One input trace (one process, usually one rank) and its clock alignment.
#[derive(Clone, Copy, Debug)]
pub struct RankInput<'a> {
    /// The trace.
    pub trace: &'a TraceFile,
    /// Extra shift added to this trace's times after the header clock
    /// alignment, ns (e.g. an offset that clock-skew estimation computed).
    pub offset_ns: i64,
}

/// The traces to export, one per rank, put on one common time line.
///
/// Times are mapped to `CLOCK_REALTIME` with each header's clock pair
/// ([`Header::start_clock`]): `t_realtime = t - reading_in_domain + realtime`,
/// then [`RankInput::offset_ns`] is added.
#[derive(Clone, Debug, Default)]
pub struct Job<'a> {
    inputs: Vec<RankInput<'a>>,
    /// Which GPU work is communication (the utilization counters use it, so that they
    /// agree with `gputrace report` run with the same rules).
    classifier: Classifier,
}

impl<'a> Job<'a> {
    /// A job over `traces`, in the given order, with no extra offsets.
    pub fn new(traces: impl IntoIterator<Item = &'a TraceFile>) -> Job<'a> {
        Job {
            inputs: traces.into_iter().map(|trace| RankInput { trace, offset_ns: 0 }).collect(),
            classifier: Classifier::default(),
        }
    }

    /// The same job classified by `classifier` (default: the built-in rules).
    pub fn with_classifier(mut self, classifier: Classifier) -> Job<'a> {
        self.classifier = classifier;
        self
    }

    /// The classification rules of the job.
    pub fn classifier(&self) -> &Classifier {
        &self.classifier
    }

    /// Add one input.
    pub fn push(&mut self, input: RankInput<'a>) {
        self.inputs.push(input);
    }

    /// The inputs, in order.
    pub fn inputs(&self) -> &[RankInput<'a>] {
        &self.inputs
    }

    /// Shift (ns) from input `index`'s event times to the common time line.
    pub fn shift(&self, index: usize) -> i64 {
        let input = &self.inputs[index];
        input.trace.header().realtime_shift().saturating_add(input.offset_ns)
    }

    /// Rank of input `index`: the header's rank, else its position.
    pub fn rank(&self, index: usize) -> Rank {
        self.inputs[index].trace.header().rank.rank.unwrap_or(Rank(index as u32))
    }
}

/// Which part of a job to export. The default exports everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Start of the time window, ns after the job start (the earliest event
    /// on the common time line). Events are clipped to the window.
    pub from: Option<Nanos>,
    /// End of the time window, ns after the job start.
    pub to: Option<Nanos>,
    /// Ranks to keep (empty: all).
    pub ranks: Vec<Rank>,
    /// GPUs to keep (empty: all). CPU threads are always kept; API calls
    /// link only to the GPU work that is kept.
    pub devices: Vec<DeviceId>,
    /// At most this many events: the window is shortened to end where the
    /// chunk index says this many have started, then output is cut at the
    /// limit (flow arrows and metadata are not counted).
    pub max_events: Option<u64>,
}

impl Filter {
    /// Whether the filter keeps GPU `device`.
    pub fn keeps_device(&self, device: DeviceId) -> bool {
        self.devices.is_empty() || self.devices.contains(&device)
    }

    /// Whether the filter keeps `rank`.
    pub fn keeps_rank(&self, rank: Rank) -> bool {
        self.ranks.is_empty() || self.ranks.contains(&rank)
    }
}

/// A job and a filter, resolved against the chunk indexes: the selected
/// inputs and the window on the common time line.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Indexes of the selected inputs in the job.
    pub inputs: Vec<usize>,
    /// Window start on the common time line (ns since the epoch).
    pub from: u64,
    /// Window end (exclusive) on the common time line.
    pub to: u64,
    /// The base of relative timestamps: the window start rounded down to a
    /// whole microsecond.
    pub base: u64,
    /// Hard cap on events.
    pub max_events: u64,
    /// Events in the window according to the chunk index (estimate).
    pub estimated_events: EventCounts,
}

/// Event counts by kind (indexed by `EventKind::index`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EventCounts(pub [f64; EventKind::ALL.len()]);

impl EventCounts {
    /// Total over all kinds.
    pub fn total(&self) -> f64 {
        self.0.iter().sum()
    }

    /// Count for one kind.
    pub fn get(&self, kind: EventKind) -> f64 {
        self.0[kind.index()]
    }
}

#[inline]
pub(crate) fn apply_shift(t: u64, shift: i64) -> u64 {
    if shift >= 0 {
        t.saturating_add(shift as u64)
    } else {
        t.saturating_sub(shift.unsigned_abs())
    }
}

/// Whether a chunk survives the rank-independent filters (device).
pub(crate) fn chunk_selected(c: &EventChunk, filter: &Filter) -> bool {
    match c.track {
        Track::Gpu { device, .. } => filter.keeps_device(device),
        _ => true,
    }
}

/// Fraction of a chunk's events that start in `[lo, hi)`, assuming starts
/// spread evenly over its span.
fn chunk_share(t_min: u64, t_max: u64, lo: u64, hi: u64) -> f64 {
    if hi <= lo || t_max < lo || t_min >= hi {
        return 0.0;
    }
    if t_max == t_min {
        return 1.0;
    }
    let a = t_min.max(lo) as f64;
    let b = t_max.min(hi) as f64;
    if b <= a {
        return 1.0 / (t_max - t_min) as f64;
    }
    ((b - a) / (t_max - t_min) as f64).min(1.0)
}

impl Plan {
    /// Resolve `filter` for `job`.
    pub fn new(job: &Job<'_>, filter: &Filter) -> Result<Plan> {
        if job.inputs().is_empty() {
            return Err(ExportError::NoInput);
        }
        let inputs: Vec<usize> = (0..job.inputs().len()).filter(|&i| filter.keeps_rank(job.rank(i))).collect();
        if inputs.is_empty() {
            return Err(ExportError::EmptySelection(format!("no input has rank {:?}", filter.ranks)));
        }
        // Aligned chunk spans of the selection. Loss records may carry a
        // time of 0 (unknown); they do not define the job start.
        let mut spans: Vec<(u64, u64, u32, EventKind)> = Vec::new();
        for &i in &inputs {
            let shift = job.shift(i);
            for c in job.inputs()[i].trace.chunks() {
                if chunk_selected(c, filter) {
                    spans.push((apply_shift(c.t_min.0, shift), apply_shift(c.t_max.0, shift), c.count, c.kind));
                }
            }
        }
        let start = spans
            .iter()
            .filter(|s| s.3 != EventKind::Loss && s.3 != EventKind::Counter)
            .map(|s| s.0)
            .min()
            .or_else(|| spans.iter().map(|s| s.0).min());
        let end = spans.iter().map(|s| s.1).max();
        let (Some(start), Some(end)) = (start, end) else {
            return Err(ExportError::EmptySelection("the selected ranks and devices hold no events".into()));
        };
        let from = start.saturating_add(filter.from.map_or(0, |n| n.0));
        let mut to = filter.to.map_or(u64::MAX, |n| start.saturating_add(n.0));
        to = to.min(end.saturating_add(1));
        if to <= from {
            return Err(ExportError::EmptySelection(
                "the time window is empty or after the last event".into(),
            ));
        }
        let count = |lo: u64, hi: u64| {
            let mut counts = EventCounts::default();
            for &(a, b, n, kind) in &spans {
                counts.0[kind.index()] += n as f64 * chunk_share(a, b, lo, hi);
            }
            counts
        };
        let max_events = filter.max_events.unwrap_or(u64::MAX);
        if count(from, to).total() > max_events as f64 {
            // Binary search the end where the estimate reaches the budget.
            let (mut lo, mut hi) = (from, to);
            while hi - lo > 1_000 {
                let mid = lo + (hi - lo) / 2;
                if count(from, mid).total() > max_events as f64 {
                    hi = mid;
                } else {
                    lo = mid;
                }
            }
            to = lo.max(from + 1);
        }
        Ok(Plan {
            inputs,
            from,
            to,
            // On a whole microsecond, so that relative µs timestamps have the
            // same µs boundaries as the absolute times (HTA's inward rounding of
            // an export then equals `report --hta` on the original).
            base: from - from % 1_000,
            max_events,
            estimated_events: count(from, to),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(domain: TimeDomain, cupti: Option<u64>) -> Header {
        Header {
            time_domain: domain,
            start_clock: ClockPair {
                realtime_ns: 1_000_000,
                monotonic_ns: 300,
                cupti_ns: cupti,
            },
            ..Header::default()
        }
    }

    #[test]
    fn clock_shifts_per_domain() {
        assert_eq!(header(TimeDomain::Realtime, None).realtime_shift(), 0);
        assert_eq!(header(TimeDomain::Monotonic, None).realtime_shift(), 1_000_000 - 300);
        assert_eq!(header(TimeDomain::Cupti, Some(999_000)).realtime_shift(), 1_000);
        assert_eq!(
            header(TimeDomain::Cupti, None).realtime_shift(),
            0,
            "no CUPTI reading: taken as realtime"
        );
        assert_eq!(apply_shift(5, -10), 0);
        assert_eq!(apply_shift(u64::MAX - 1, 10), u64::MAX);
    }

    #[test]
    fn chunk_shares() {
        assert_eq!(chunk_share(0, 100, 0, 1000), 1.0);
        assert_eq!(chunk_share(0, 100, 50, 1000), 0.5);
        assert_eq!(chunk_share(0, 100, 200, 1000), 0.0);
        assert_eq!(chunk_share(10, 10, 0, 11), 1.0);
        assert_eq!(chunk_share(10, 10, 11, 20), 0.0);
    }
}
