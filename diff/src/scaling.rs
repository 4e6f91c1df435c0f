//! Scaling efficiency when A ran on M GPUs and B on N ≠ M:
//! `throughput_B / (N/M × throughput_A)`, i.e. B's throughput per GPU over
//! A's (with M = 1: throughput on N ÷ (N × throughput on 1)).
//!
//! Throughput is the productive layer's tokens/s when both runs count tokens,
//! else samples/s, else steps/s × GPUs (`GPUs / p50 step time`: it assumes
//! every GPU does the same work per step in both runs, as in data-parallel
//! weak scaling). What ate the difference is GPU time per unit of work (per
//! token, sample or device-step) inside the steps, split by category: B − A
//! per category, as a share of B − A in all.

use crate::steps::step_sums;
use gputrace_analysis::Report;
use serde::Serialize;

/// Throughput definition used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Basis {
    /// The productive layer's `tokens_per_s` (both runs count tokens).
    #[serde(rename = "tokens/s")]
    Tokens,
    /// `samples_per_s` (both runs count samples, not both tokens).
    #[serde(rename = "samples/s")]
    Samples,
    /// `GPUs / step_time_p50_s`: steps per second times GPUs.
    #[serde(rename = "steps/s x GPUs")]
    Steps,
}

impl Basis {
    /// The unit of work the breakdown is per.
    pub fn unit(self) -> &'static str {
        match self {
            Basis::Tokens => "token",
            Basis::Samples => "sample",
            Basis::Steps => "device-step",
        }
    }

    /// As in the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Basis::Tokens => "tokens/s",
            Basis::Samples => "samples/s",
            Basis::Steps => "steps/s x GPUs",
        }
    }
}

/// One category's GPU time per unit of work in A and B, ns.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LostTime {
    /// `compute`, `exposed communication`, `exposed transfer` or `idle`.
    pub name: String,
    /// In A, ns per unit.
    pub a: f64,
    /// In B, ns per unit.
    pub b: f64,
    /// `b − a`.
    pub delta: f64,
    /// `delta` over the total lost time (the categories' deltas sum to it), 0..1 for
    /// categories that grew; null when less than 1% of A's GPU time per unit was lost (a
    /// share of next to nothing would read as thousands of percent).
    pub share: Option<f64>,
}

/// A `stragglers` finding of one run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Straggler {
    /// `A` or `B`.
    pub run: &'static str,
    /// The rank the others wait for.
    pub rank: Option<u32>,
    /// The finding's title.
    pub title: String,
}

/// Scaling from A's GPU count to B's.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Scaling {
    /// GPUs in A (M) and in B (N).
    pub gpus: (u64, u64),
    /// Which throughput: `tokens/s`, `samples/s` or `steps/s x GPUs`.
    pub basis: Basis,
    /// Throughput of A and of B, in the basis' unit per second.
    pub throughput: (f64, f64),
    /// Throughput per GPU of A and of B.
    pub per_gpu: (f64, f64),
    /// `throughput_B / (N/M × throughput_A)`, 0..1 below linear scaling.
    pub efficiency: f64,
    /// What the breakdown is per: `token`, `sample` or `device-step`.
    pub unit: &'static str,
    /// GPU time per unit inside the steps in B minus in A, ns.
    pub lost_ns_per_unit: f64,
    /// That difference by category, biggest first (empty without per-device steps).
    pub lost: Vec<LostTime>,
    /// The runs' `stragglers` findings (the ranks the others wait for).
    pub stragglers: Vec<Straggler>,
}

/// GPUs of a run: its active devices, else the productive layer's count.
pub fn gpus(r: &Report) -> u64 {
    if r.totals.active_devices > 0 {
        r.totals.active_devices
    } else {
        r.productive.devices
    }
}

/// Scaling from `a` to `b`; `None` when they ran on the same number of GPUs
/// or no throughput is known in both.
pub fn diff_scaling(a: &Report, b: &Report) -> Option<Scaling> {
    let (m, n) = (gpus(a), gpus(b));
    if m == n || m == 0 || n == 0 {
        return None;
    }
    let (pa, pb) = (&a.productive, &b.productive);
    let step_rate = |p: &gputrace_analysis::Productive, g: u64| p.step_time_p50_s.filter(|&s| s > 0.0).map(|s| g as f64 / s);
    let (basis, ta, tb) = if let (Some(x), Some(y)) = (pa.tokens_per_s, pb.tokens_per_s) {
        (Basis::Tokens, x, y)
    } else if let (Some(x), Some(y)) = (pa.samples_per_s, pb.samples_per_s) {
        (Basis::Samples, x, y)
    } else {
        let (x, y) = step_rate(pa, m).zip(step_rate(pb, n))?;
        (Basis::Steps, x, y)
    };
    if ta <= 0.0 {
        return None;
    }
    let (mf, nf) = (m as f64, n as f64);
    let efficiency = tb / (nf / mf * ta);
    let (sa, sb) = (step_sums(a), step_sums(b));
    let units = |r: &Report, s: &[u64; 6]| -> f64 {
        match basis {
            Basis::Tokens => r.productive.tokens.unwrap_or(0) as f64,
            Basis::Samples => r.productive.samples.unwrap_or(0) as f64,
            Basis::Steps => s[0] as f64,
        }
    };
    let (ua, ub) = (units(a, &sa), units(b, &sb));
    let mut lost = Vec::new();
    let mut lost_ns_per_unit = 0.0;
    if sa[0] > 0 && sb[0] > 0 && ua > 0.0 && ub > 0.0 {
        lost_ns_per_unit = sb[1] as f64 / ub - sa[1] as f64 / ua;
        let lost_enough = lost_ns_per_unit > 0.01 * sa[1] as f64 / ua;
        let names = ["compute", "exposed communication", "exposed transfer", "idle"];
        for (i, name) in names.iter().enumerate() {
            let (x, y) = (sa[i + 2] as f64 / ua, sb[i + 2] as f64 / ub);
            let delta = y - x;
            lost.push(LostTime {
                name: name.to_string(),
                a: x,
                b: y,
                delta,
                share: lost_enough.then(|| delta / lost_ns_per_unit),
            });
        }
        lost.sort_by(|x, y| y.delta.total_cmp(&x.delta));
    }
    let mut stragglers = Vec::new();
    for (run, r) in [("A", a), ("B", b)] {
        for f in r.findings.iter().filter(|f| f.rule == gputrace_analysis::FindingRule::Stragglers) {
            stragglers.push(Straggler {
                run,
                rank: f.values.get(gputrace_analysis::Value::Rank).map(|v| v as u32),
                title: f.title.clone(),
            });
        }
    }
    Some(Scaling {
        gpus: (m, n),
        basis,
        throughput: (ta, tb),
        per_gpu: (ta / mf, tb / nf),
        efficiency,
        unit: basis.unit(),
        lost_ns_per_unit,
        lost,
        stragglers,
    })
}
