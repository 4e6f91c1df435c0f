//! Steps in A and B: the productive layer's count and step-time percentiles,
//! and the per-step means of where each device's step time went.

use crate::Delta;
use gputrace_analysis::Report;
use serde::Serialize;

/// The steps of both runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepDiff {
    /// Steps (the productive layer's: distinct step numbers over ranks).
    pub count: Delta,
    /// Median step time, ns (null unless both runs have step times).
    pub p50: Option<Delta>,
    /// 95th percentile step time, ns (null unless both runs have step times).
    pub p95: Option<Delta>,
    /// Mean step duration over every device's steps, ns (0 for a run without per-device steps).
    pub mean_duration: Delta,
    /// Per-step means over every device's steps, ns: compute, exposed communication,
    /// exposed transfer, idle (they sum to `mean_duration` up to rounding); biggest
    /// regression first.
    pub mean: Vec<Delta>,
    /// The longest step of any device in A and in B (null for a run without steps).
    pub slowest: (Option<SlowStep>, Option<SlowStep>),
}

/// One device's longest step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SlowStep {
    /// Rank of the trace.
    pub rank: u32,
    /// CUDA ordinal in that process.
    pub device: u32,
    /// Step number.
    pub step: u64,
    /// Its duration, ns.
    pub duration_ns: u64,
    /// Its idle time, ns.
    pub idle_ns: u64,
    /// Its exposed communication, ns.
    pub exposed_communication_ns: u64,
}

/// Seconds (the productive layer's unit) to ns.
pub(crate) fn secs_ns(s: f64) -> u64 {
    (s * 1e9).round() as u64
}

/// Sums over every device's steps: (steps, duration, compute, exposed communication,
/// exposed transfer, idle).
pub(crate) fn step_sums(r: &Report) -> [u64; 6] {
    let mut s = [0u64; 6];
    for step in r.ranks.iter().flat_map(|rk| &rk.devices).flat_map(|d| &d.steps) {
        s[0] += 1;
        s[1] += step.duration_ns;
        s[2] += step.compute_ns;
        s[3] += step.exposed_communication_ns;
        s[4] += step.exposed_transfer_ns;
        s[5] += step.idle_ns;
    }
    s
}

fn slowest(r: &Report) -> Option<SlowStep> {
    let mut best: Option<SlowStep> = None;
    for rank in &r.ranks {
        for d in &rank.devices {
            for s in &d.steps {
                // Strictly longer: ties keep the first in (rank, device, step) order.
                if best.as_ref().is_none_or(|b| s.duration_ns > b.duration_ns) {
                    best = Some(SlowStep {
                        rank: rank.rank,
                        device: d.device,
                        step: s.step,
                        duration_ns: s.duration_ns,
                        idle_ns: s.idle_ns,
                        exposed_communication_ns: s.exposed_communication_ns,
                    });
                }
            }
        }
    }
    best
}

/// The steps of `a` against those of `b`.
pub fn diff_steps(a: &Report, b: &Report) -> StepDiff {
    let (pa, pb) = (&a.productive, &b.productive);
    let both = |x: Option<f64>, y: Option<f64>, name: &str| match (x, y) {
        (Some(x), Some(y)) => Some(Delta::new(name, secs_ns(x), secs_ns(y))),
        _ => None,
    };
    let (sa, sb) = (step_sums(a), step_sums(b));
    let mean = |s: &[u64; 6], i: usize| s[i] / s[0].max(1);
    let names = ["compute", "exposed communication", "exposed transfer", "idle"];
    let mut means: Vec<Delta> = names
        .iter()
        .enumerate()
        .map(|(i, name)| Delta::new(*name, mean(&sa, i + 2), mean(&sb, i + 2)))
        .collect();
    crate::sort_regressions(&mut means);
    StepDiff {
        count: Delta::new("steps", pa.steps, pb.steps),
        p50: both(pa.step_time_p50_s, pb.step_time_p50_s, "p50"),
        p95: both(pa.step_time_p95_s, pb.step_time_p95_s, "p95"),
        mean_duration: Delta::new("step", mean(&sa, 1), mean(&sb, 1)),
        mean: means,
        slowest: (slowest(a), slowest(b)),
    }
}
