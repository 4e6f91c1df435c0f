//! Holistic Trace Analysis (HTA) compatibility: the parts of HTA's
//! `get_temporal_breakdown` that differ from gputrace's definitions, so that
//! `gputrace report --hta` gives HTA's numbers. Everything here follows HTA's
//! source at commit f4d0062 (file and function names are in docs/metrics.md,
//! "HTA-compatible mode"):
//!
//! - which events are left out when a trace has two or more `ProfilerStep`
//!   names (`Trace._filter_irrelevant_gpu_kernels`): GPU events whose
//!   correlation id has no CPU event that starts before the last step's start
//!   (or none at all with `include_last_profiler_step=True`);
//! - the inward rounding to whole µs (`round_down_time_stamps`), done in
//!   64-bit floats on the µs values of the JSON file;
//! - HTA's kernel types (`get_kernel_type`): what is computation.

use serde::Serialize;

/// HTA-compatible mode: numbers identical to Holistic Trace Analysis'
/// temporal breakdown (`get_temporal_breakdown`), not gputrace's definitions.
///
/// With any `HtaCompat` in [`crate::Options::hta`], a kernel counts as
/// compute exactly when HTA calls it computation, and synchronization records
/// that HTA reads as GPU events (Kineto `cuda_sync`) are non-compute work
/// (under transfer); zero-length work bounds the span as it does in HTA. The
/// three parts below are HTA's defaults and can be turned off one by one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct HtaCompat {
    /// Leave out the last profiler step, as `TraceAnalysis(include_last_profiler_step=False)`
    /// (HTA's default) does: when the trace has at least two distinct `ProfilerStep#N` names,
    /// GPU work launched (by a CPU call with its correlation id) at or after the start of the
    /// last step, and GPU work without a correlation id that starts then or later, is dropped.
    pub drop_last_step: bool,
    /// Leave out GPU work whose correlation id no CPU call in the trace has (HTA keeps only
    /// GPU events it can link to a CPU op; it does so only for traces with at least two
    /// distinct `ProfilerStep#N` names, and so does this).
    pub linked_only: bool,
    /// Round every event inward to whole µs, as HTA does unless `HTA_DISABLE_NS_ROUNDING=1`:
    /// start = ceil(ts), end = floor(ts + dur), computed in 64-bit floats on the µs values of
    /// the trace (relative to Kineto's `baseTimeNanoseconds`).
    pub round_to_us: bool,
}

impl HtaCompat {
    /// HTA's defaults: drop the last step, only linked GPU events, µs rounding.
    pub const DEFAULTS: HtaCompat = HtaCompat {
        drop_last_step: true,
        linked_only: true,
        round_to_us: true,
    };
}

impl Default for HtaCompat {
    fn default() -> Self {
        HtaCompat::DEFAULTS
    }
}

/// HTA's kernel types (`hta/utils/utils.py: get_kernel_type`, patterns in
/// `hta/common/types.py`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HtaKernelType {
    Communication,
    Memory,
    Computation,
    Other,
}

/// `get_kernel_type(name)`: communication (`^nccl`, `^hip`, `^hccl`, `.*ncclKernel`), else
/// memory (`^(hip)?Memcpy`, `^(hip)?Memset`, `^dma`), else computation unless the name matches
/// HTA's list of non-computation names, else other. Python's `re.match` anchors at the start;
/// `.` does not match a newline.
pub(crate) fn hta_kernel_type(name: &str) -> HtaKernelType {
    // `.*X` matched from the start: X occurs before the first newline.
    let first_line = name.split('\n').next().unwrap_or("");
    let contains = |s: &str| first_line.contains(s);
    let starts = |s: &str| name.starts_with(s);
    if starts("nccl") || starts("hip") || starts("hccl") || contains("ncclKernel") {
        return HtaKernelType::Communication;
    }
    if starts("Memcpy") || starts("hipMemcpy") || starts("Memset") || starts("hipMemset") || starts("dma") {
        return HtaKernelType::Memory;
    }
    // ComputeKernelGroupingPattern, an inverse match.
    let cuda_launch = starts("cuda") && first_line[4..].contains("LaunchKernel");
    let not_compute = starts("nccl")
        || contains("Memcpy")
        || contains("Memset")
        || contains("dma")
        || contains("Sync")
        || starts("Stream Wait Event")
        || cuda_launch
        || starts("runFunction")
        || starts("hip")
        || starts("job_exe")
        || starts("packet")
        || starts("pe_exe")
        || starts("cpum_exe_subgraph")
        || starts("hccl")
        || starts("collective_subgraph_execution");
    if not_compute {
        HtaKernelType::Other
    } else {
        HtaKernelType::Computation
    }
}

/// `ProfilerStepGroupingPattern`: `^ProfilerStep#(\d+)`.
pub(crate) fn is_hta_step_name(name: &str) -> bool {
    name.strip_prefix("ProfilerStep#")
        .is_some_and(|rest| rest.as_bytes().first().is_some_and(u8::is_ascii_digit))
}

/// HTA's view of the trace's times: the µs value of the JSON file as a 64-bit float, rounded
/// inward to whole µs or not.
#[derive(Clone, Copy, Debug)]
pub(crate) struct HtaClock {
    /// Kineto's `baseTimeNanoseconds` (the JSON `ts` are relative to it), 0 otherwise.
    pub base_ns: u64,
    pub round: bool,
}

/// Largest integer below which every integer is an exact `f64`.
const EXACT_F64: i128 = 1 << 53;

/// The `f64` Python's `float()` makes of the decimal `ns / 1000` (µs with three decimals,
/// as Kineto writes them): the nearest one.
fn us_f64(ns: i128) -> f64 {
    if ns.abs() < EXACT_F64 {
        // Both operands exact: IEEE division rounds the quotient correctly.
        ns as f64 / 1000.0
    } else {
        let sign = if ns < 0 { "-" } else { "" };
        let a = ns.unsigned_abs();
        format!("{sign}{}.{:03}", a / 1000, a % 1000).parse().expect("a decimal number")
    }
}

impl HtaClock {
    /// A trace's clock: `header.extra["kineto.baseTimeNanoseconds"]` for imported Kineto
    /// traces (0 when the trace has none: its `ts` are absolute); for gputrace's own, the base `gputrace export --format chrome` gives the file
    /// on its own: its first event that is not a loss record, in wall-clock time rounded down
    /// to a whole µs, taken back to the trace's clock. `report --hta` then equals HTA on that
    /// export even when the trace's clock is not a whole number of µs from wall-clock time
    /// (CUPTI's). (Absolute µs around 1.8·10¹⁵ would not even be exact in an `f64`.)
    pub(crate) fn of(file: &gputrace_format::TraceFile, round: bool) -> HtaClock {
        let header = file.header();
        let base_ns = header
            .extra
            .get("kineto.baseTimeNanoseconds")
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                if header.producer == gputrace_format::Producer::Import {
                    // A PyTorch profiler trace without `baseTimeNanoseconds`: its `ts` are
                    // absolute µs, and HTA rounds those very floats (at 1.7·10¹⁵ µs an
                    // `f64` has quarter-µs steps, so `ts + dur` itself rounds first).
                    return 0;
                }
                let chunks = file.chunks();
                let first = chunks
                    .iter()
                    .filter(|c| c.kind != gputrace_format::EventKind::Loss)
                    .map(|c| c.t_min.0)
                    .min();
                let Some(t0) = first.or_else(|| chunks.iter().map(|c| c.t_min.0).min()) else {
                    return 0;
                };
                let shift = header.realtime_shift() as i128;
                let wall = (t0 as i128 + shift).max(0);
                (wall - wall % 1_000 - shift).clamp(0, u64::MAX as i128) as u64
            });
        HtaClock { base_ns, round }
    }

    /// HTA's `ts` of an event starting at `ns` (comparable with `<`; rounding is monotonic).
    pub(crate) fn ts(&self, ns: u64) -> f64 {
        let f = us_f64(ns as i128 - self.base_ns as i128);
        if self.round {
            f.ceil()
        } else {
            f
        }
    }

    /// The interval HTA uses for `[start, end)` in ns: with rounding `[ceil(ts), floor(ts + dur)]`
    /// (the end may then be before the start: HTA's duration −1 µs); without, unchanged.
    pub(crate) fn interval(&self, start: u64, end: u64) -> (u64, u64) {
        if !self.round {
            return (start, end);
        }
        let base = self.base_ns as i128;
        let ts = us_f64(start as i128 - base);
        let dur = us_f64(end as i128 - start as i128);
        let to_ns = |us: f64| u64::try_from(base + us as i128 * 1000).unwrap_or(0);
        (to_ns(ts.ceil()), to_ns((ts + dur).floor()))
    }
}

/// Which GPU events HTA keeps (`Trace._filter_irrelevant_gpu_kernels`), for one trace.
#[derive(Clone, Debug, Default)]
pub(crate) struct HtaFilter {
    /// The filter applies: at least two distinct `ProfilerStep#N` names.
    pub active: bool,
    /// HTA's `ts` of the start of the last step (the latest-starting `ProfilerStep` range).
    pub cutoff: Option<f64>,
    pub drop_last_step: bool,
    pub linked_only: bool,
    /// Sorted correlation ids of the CPU calls that started before the cutoff (of all CPU
    /// calls when the last step is kept).
    pub early: Vec<u32>,
    /// Sorted correlation ids of CPU calls that started at or after the cutoff.
    pub late: Vec<u32>,
}

/// What the filter decided for one GPU event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Keep,
    /// Launched (or, without a correlation id, started) in the last step or later.
    LastStep,
    /// No CPU call has its correlation id.
    Unlinked,
}

impl HtaFilter {
    /// `correlation` 0 is "none": HTA reads a missing id as −1, which makes the event a CPU
    /// event to its filter, kept when it starts before the cutoff.
    pub(crate) fn verdict(&self, correlation: u32, ts: f64) -> Verdict {
        if !self.active {
            return Verdict::Keep;
        }
        let before_cutoff = |t: f64| !self.drop_last_step || self.cutoff.is_some_and(|c| t < c);
        if correlation == 0 {
            return if before_cutoff(ts) { Verdict::Keep } else { Verdict::LastStep };
        }
        // Several calls can share an id (a runtime call and the driver call it makes): one
        // before the cutoff is enough.
        if self.early.binary_search(&correlation).is_ok() {
            Verdict::Keep
        } else if self.late.binary_search(&correlation).is_ok() {
            Verdict::LastStep
        } else if self.linked_only {
            Verdict::Unlinked
        } else if before_cutoff(ts) {
            Verdict::Keep
        } else {
            Verdict::LastStep
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_types_follow_hta() {
        use HtaKernelType::*;
        assert_eq!(hta_kernel_type("ncclDevKernel_AllReduce_Sum_f32_RING_LL"), Communication);
        assert_eq!(
            hta_kernel_type("void ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"),
            Communication
        );
        assert_eq!(hta_kernel_type("hipMemcpyAsync"), Communication, "^hip is communication first");
        assert_eq!(hta_kernel_type("Memcpy HtoD (Pageable -> Device)"), Memory);
        assert_eq!(hta_kernel_type("Memset (Device)"), Memory);
        assert_eq!(hta_kernel_type("void at::native::vectorized_elementwise_kernel<4>"), Computation);
        assert_eq!(hta_kernel_type("Stream Sync"), Other);
        assert_eq!(hta_kernel_type("Context Sync"), Other);
        assert_eq!(hta_kernel_type("Stream Wait Event"), Other);
        assert_eq!(hta_kernel_type("cudaLaunchKernel"), Other);
        assert_eq!(hta_kernel_type("void fused_dmask_kernel"), Other, ".*dma");
        assert_eq!(hta_kernel_type("void deep_ep::intranode::dispatch<8>"), Computation);
        assert!(is_hta_step_name("ProfilerStep#12") && is_hta_step_name("ProfilerStep#1x"));
        assert!(!is_hta_step_name("ProfilerStep#") && !is_hta_step_name("ProfilerStep"));
    }

    #[test]
    fn rounding_is_inward_in_f64() {
        let c = HtaClock {
            base_ns: 1_000_000_000,
            round: true,
        };
        // ts 10.2 µs, dur 1.5 µs: [11, 11] (zero length); dur 0.5: [11, 10] (HTA's −1 µs).
        let at = |us_ns: u64| 1_000_000_000 + us_ns;
        assert_eq!(c.interval(at(10_200), at(11_700)), (at(11_000), at(11_000)));
        assert_eq!(c.interval(at(10_200), at(10_700)), (at(11_000), at(10_000)));
        assert_eq!(c.interval(at(10_000), at(12_000)), (at(10_000), at(12_000)));
        assert_eq!(c.ts(at(10_001)), 11.0);
        let exact = HtaClock { base_ns: 0, round: false };
        assert_eq!(exact.interval(5, 7), (5, 7));
        // Absolute µs around 1.7e15 (no base): f64 holds them to 0.25 µs, as pandas does.
        assert_eq!(us_f64(1_712_195_495_520_824_518), 1_712_195_495_520_824.5);
        assert_eq!(us_f64(1_712_195_495_520_824_100), 1_712_195_495_520_824.0);
        let abs = HtaClock { base_ns: 0, round: true };
        assert_eq!(
            abs.ts(1_712_195_495_520_824_100),
            1_712_195_495_520_824.0,
            "ceil of the f64, not of the decimal"
        );
        // ts 1712195495520824.2 is 824.25 in f64, and 824.25 + 0.7 rounds to 825.0: HTA's
        // interval is [825, 825], where the exact decimals would give [825, 824].
        let s = 1_712_195_495_520_824_200;
        assert_eq!(abs.interval(s, s + 700), (1_712_195_495_520_825_000, 1_712_195_495_520_825_000));
    }

    #[test]
    fn the_base_of_a_cupti_clock_trace_is_the_exports() {
        use gputrace_format::*;
        // CUPTI's clock 1,234,567 ns behind wall-clock time; a loss record
        // of unknown time (0) and a kernel at 5,000,300.
        let header = Header {
            time_domain: TimeDomain::Cupti,
            start_clock: ClockPair {
                realtime_ns: 1_700_000_000_001_234_567,
                monotonic_ns: 1,
                cupti_ns: Some(1_700_000_000_000_000_000),
            },
            ..Header::default()
        };
        let mut w = TraceWriter::new(Vec::new(), &header, WriterOptions::default()).unwrap();
        let name = w.intern("k");
        w.push(Event::Loss(Loss {
            time: Nanos(0),
            source: LossSource::CUPTI_DROPPED,
            count: 1,
            detail: StringId::EMPTY,
        }))
        .unwrap();
        w.push(Event::Kernel(Kernel {
            start: Nanos(5_000_300),
            end: Nanos(5_001_000),
            device: DeviceId(0),
            context: ContextId(1),
            stream: StreamId(7),
            correlation: CorrelationId(1),
            name,
            grid: [1; 3],
            block: [1; 3],
            ..Kernel::default()
        }))
        .unwrap();
        let file = TraceFile::from_bytes("cupti", w.finish(Trailer::default()).unwrap()).unwrap();
        let clock = HtaClock::of(&file, true);
        // The export's base: the kernel's wall-clock start rounded down to a
        // whole µs (6,234,000 after the shift); the kernel sits 0.867 µs after it.
        assert_eq!(clock.base_ns as i128 + 1_234_567, 6_234_000);
        assert_eq!(clock.ts(5_000_300), 1.0, "ceil of 0.867 µs");
    }

    #[test]
    fn filter_verdicts() {
        // Call 1 at 50, call 2 at 150, cutoff 100; without the drop, both are "early".
        let f = |drop_last_step, linked_only| HtaFilter {
            active: true,
            cutoff: Some(100.0),
            drop_last_step,
            linked_only,
            early: if drop_last_step { vec![1] } else { vec![1, 2] },
            late: if drop_last_step { vec![2] } else { vec![] },
        };
        use Verdict::*;
        let hta = f(true, true);
        assert_eq!(
            [hta.verdict(1, 60.0), hta.verdict(2, 160.0), hta.verdict(3, 10.0)],
            [Keep, LastStep, Unlinked]
        );
        assert_eq!(
            [hta.verdict(0, 99.0), hta.verdict(0, 100.0)],
            [Keep, LastStep],
            "no id: its own start"
        );
        let include_last = f(false, true);
        assert_eq!([include_last.verdict(2, 160.0), include_last.verdict(3, 10.0)], [Keep, Unlinked]);
        let drop_only = f(true, false);
        assert_eq!([drop_only.verdict(3, 10.0), drop_only.verdict(3, 110.0)], [Keep, LastStep]);
        let inactive = HtaFilter {
            active: false,
            ..f(true, true)
        };
        assert_eq!(inactive.verdict(3, 500.0), Keep);
    }
}
