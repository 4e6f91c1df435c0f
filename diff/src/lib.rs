//! `gputrace diff A B`: compare two runs' reports (A = baseline, B = new).
//!
//! Pure: two [`Report`]s in, a [`Diff`] out. Every time, count and byte total
//! is per GPU (the job total divided by its active GPUs): categories, steps,
//! kernels and collectives alike, so runs on different GPU counts compare
//! per GPU everywhere. Kernels are matched by name; a kernel present in one
//! run only has zeros on the other side. Rows are sorted biggest regression
//! (B − A) first.
//!
//! Beyond the totals: [`steps`] (step count, p50/p95 step time, per-step
//! means of each category, the slowest step), [`collectives`] (matched by
//! communicator name or by operation and ranks, with NCCL-tests bus
//! bandwidth) and, when A and B ran on different GPU counts, [`scaling`]
//! (the scaling efficiency and what ate the difference).
#![forbid(unsafe_code)]

pub mod collectives;
pub mod scaling;
pub mod serving;
mod serving_marks;
pub mod steps;

pub use collectives::{diff_collectives, Bandwidth, CollectiveDelta, MatchedBy};
pub use scaling::{diff_scaling, Basis, LostTime, Scaling, Straggler};
pub use serving::{diff_serving, ServingDiff};
pub use steps::{diff_steps, SlowStep, StepDiff};

use gputrace_analysis::Report;
use serde::Serialize;
use std::collections::BTreeMap;

/// One compared quantity.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Delta {
    /// What is compared.
    pub name: String,
    /// Baseline value, ns (or a count).
    pub a: u64,
    /// New value.
    pub b: u64,
    /// `b − a`.
    pub delta: i64,
    /// `delta / a` in percent (`None` when `a` is 0).
    pub pct: Option<f64>,
}

impl Delta {
    pub(crate) fn new(name: impl Into<String>, a: u64, b: u64) -> Delta {
        let delta = b as i64 - a as i64;
        Delta {
            name: name.into(),
            a,
            b,
            delta,
            pct: (a > 0).then(|| 100.0 * delta as f64 / a as f64),
        }
    }
}

/// One kernel name in both runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KernelDelta {
    /// Kernel name.
    pub name: String,
    /// Launches per GPU (the run's launches over its active GPUs, rounded down).
    pub count: Delta,
    /// GPU time per GPU, ns.
    pub time: Delta,
}

/// The diff of two runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Diff {
    /// Active GPUs in A and in B.
    pub gpus: (u64, u64),
    /// Mean GPU span (the run's time per GPU), ns.
    pub span: Delta,
    /// Per GPU: compute, exposed communication, exposed transfer, idle; biggest regression first.
    pub categories: Vec<Delta>,
    /// Kernels by name, per GPU, biggest time regression first.
    pub kernels: Vec<KernelDelta>,
    /// Steps: count, p50/p95 step time, per-step category means, the slowest step.
    pub steps: StepDiff,
    /// NCCL collectives (counts, bytes and time per GPU), biggest bus-bandwidth drop first.
    pub collectives: Vec<CollectiveDelta>,
    /// Scaling efficiency from A's GPU count to B's (only when they differ and a
    /// throughput is known in both).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scaling: Option<Scaling>,
    /// Serving runs (both reports have a serving section): tokens/s, requests/s and
    /// latency quantiles (docs/serving.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serving: Option<ServingDiff>,
    /// One line: faster, slower or the same, and the biggest regression.
    pub verdict: String,
    /// What each run's traces lost, one line per lossy rank: a lossy run's
    /// numbers describe what was recorded, not everything that ran.
    pub lossy: LossyRuns,
}

/// The lossy ranks of each run (`rank 0: damaged at byte ...`), empty when whole.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct LossyRuns {
    /// Of A.
    pub a: Vec<String>,
    /// Of B.
    pub b: Vec<String>,
}

fn lossy_ranks(r: &Report) -> Vec<String> {
    r.ranks
        .iter()
        .filter_map(|rk| gputrace_analysis::describe_losses(&rk.losses).map(|what| format!("rank {}: {what}", rk.rank)))
        .collect()
}

impl Diff {
    /// B's span change in percent of A's (0 when A is empty); for serving runs, B's
    /// latency change (e2e p99).
    pub fn slower_pct(&self) -> f64 {
        if let Some(s) = &self.serving {
            return s.slower_pct;
        }
        self.span.pct.unwrap_or(0.0)
    }
}

/// A kernel's (launch count, total ns) in one run.
type CountTime = (u64, u64);

/// Biggest regression (B − A) first, then by name.
pub(crate) fn sort_regressions(v: &mut [Delta]) {
    v.sort_by(|x, y| y.delta.cmp(&x.delta).then_with(|| x.name.cmp(&y.name)));
}

fn per_gpu(total: u64, gpus: u64) -> u64 {
    total / gpus.max(1)
}

/// Diff `a` (baseline) against `b`. Kernels come from each report's
/// `top_kernels`, so analyse both with a `top_kernels` large enough to list
/// every kernel name. The scaling section's stragglers are the reports'
/// `stragglers` findings: make each multi-rank report with
/// `gputrace_compare::with_stragglers`, as `gputrace report` does.
pub fn diff(a: &Report, b: &Report) -> Diff {
    let (ga, gb) = (a.totals.active_devices, b.totals.active_devices);
    let (ta, tb) = (&a.totals, &b.totals);
    let cat = |name: &str, x: u64, y: u64| Delta::new(name, per_gpu(x, ga), per_gpu(y, gb));
    let span = cat("span", ta.time.span_ns, tb.time.span_ns);
    let mut categories = vec![
        cat("compute", ta.time.compute_ns, tb.time.compute_ns),
        cat(
            "exposed communication",
            ta.time.exposed_communication_ns,
            tb.time.exposed_communication_ns,
        ),
        cat("exposed transfer", ta.time.exposed_transfer_ns, tb.time.exposed_transfer_ns),
        cat("idle", ta.time.idle_ns, tb.time.idle_ns),
    ];
    sort_regressions(&mut categories);
    let mut by_name: BTreeMap<&str, (CountTime, CountTime)> = BTreeMap::new();
    for k in &a.top_kernels {
        let e = by_name.entry(&k.name).or_default();
        e.0 = (e.0 .0 + k.count, e.0 .1 + k.total_ns);
    }
    for k in &b.top_kernels {
        let e = by_name.entry(&k.name).or_default();
        e.1 = (e.1 .0 + k.count, e.1 .1 + k.total_ns);
    }
    let mut kernels: Vec<KernelDelta> = by_name
        .into_iter()
        .map(|(name, ((ca, ta), (cb, tb)))| KernelDelta {
            name: name.to_string(),
            count: Delta::new("count", per_gpu(ca, ga), per_gpu(cb, gb)),
            time: Delta::new("time", per_gpu(ta, ga), per_gpu(tb, gb)),
        })
        .collect();
    kernels.sort_by(|x, y| y.time.delta.cmp(&x.time.delta).then_with(|| x.name.cmp(&y.name)));
    let pct = span.pct.unwrap_or(0.0);
    let word = if pct > 0.5 {
        format!("B is {pct:.1}% slower per GPU than A")
    } else if pct < -0.5 {
        format!("B is {:.1}% faster per GPU than A", -pct)
    } else {
        "B and A take the same time per GPU (within 0.5%)".to_string()
    };
    let worst = categories.first().filter(|c| c.delta > 0).map_or(String::new(), |c| {
        format!("; biggest regression: {} +{:.3} ms per GPU", c.name, c.delta as f64 / 1e6)
    });
    let scaling = diff_scaling(a, b);
    let scaled = scaling.as_ref().map_or(String::new(), |s| {
        format!(
            "; scaling efficiency {:.1}% ({} -> {} GPUs, {})",
            100.0 * s.efficiency,
            s.gpus.0,
            s.gpus.1,
            s.basis.name()
        )
    });
    // Both runs marked their requests: their exact numbers, else the server metrics'.
    let serving = serving_marks::diff_marks(a, b).or_else(|| diff_serving(a, b));
    let verdict = match &serving {
        Some(sv) => format!("{}; {word}{worst}{scaled}", serving::verdict(sv)),
        None => format!("{word}{worst}{scaled}"),
    };
    Diff {
        gpus: (ga, gb),
        span,
        categories,
        kernels,
        steps: diff_steps(a, b),
        collectives: diff_collectives(a, b),
        scaling,
        serving,
        verdict,
        lossy: LossyRuns {
            a: lossy_ranks(a),
            b: lossy_ranks(b),
        },
    }
}

/// Plain-text rendering: the verdict, categories, steps, scaling (when present),
/// then the `top` collectives and the `top` kernels.
pub fn render_text(d: &Diff, top: usize) -> String {
    use gputrace_format::text::{escape, escape_output};
    use std::fmt::Write;
    let ms = |ns: u64| ns as f64 / 1e6;
    let pct = pct_text;
    let mut s = String::new();
    // Before the verdict: it compares what was recorded.
    for (run, ranks) in [("A", &d.lossy.a), ("B", &d.lossy.b)] {
        if !ranks.is_empty() {
            let _ = writeln!(
                s,
                "WARNING: {run}'s traces lost data; its numbers describe what was recorded, not everything that ran:"
            );
            for r in ranks {
                let _ = writeln!(s, "  {run} {}", escape(r));
            }
        }
    }
    let _ = write!(s, "{}\n\nGPUs: A {}, B {}\n", escape(&d.verdict), d.gpus.0, d.gpus.1);
    let _ = writeln!(s, "\n{:<24} {:>12} {:>12} {:>9}", "per GPU (ms)", "A", "B", "change");
    for c in std::iter::once(&d.span).chain(&d.categories) {
        let _ = writeln!(s, "{:<24} {:>12.3} {:>12.3} {:>9}", c.name, ms(c.a), ms(c.b), pct(c.pct));
    }
    if let Some(sv) = &d.serving {
        serving::render_serving(&mut s, sv);
    }
    render_steps(&mut s, &d.steps);
    if let Some(sc) = &d.scaling {
        render_scaling(&mut s, sc);
    }
    render_collectives(&mut s, &d.collectives, top);
    let _ = writeln!(s, "\nkernels per GPU (biggest time regression first)");
    for k in d.kernels.iter().take(top) {
        let _ = writeln!(
            s,
            "  {:>+10.3} ms {:>9}  count {} -> {}  {}",
            k.time.delta as f64 / 1e6,
            pct(k.time.pct),
            k.count.a,
            k.count.b,
            escape(&k.name)
        );
    }
    // Names are escaped where they are written; this catches any other text from a trace.
    escape_output(&s, false).into_owned()
}

/// A change in percent; beyond ±1000% a factor reads better (`×49.4`), and `new` where
/// A had none.
fn pct_text(p: Option<f64>) -> String {
    match p {
        None => "new".to_string(),
        Some(p) if p > 1000.0 => format!("×{:.1}", 1.0 + p / 100.0),
        Some(p) => format!("{p:+.1}%"),
    }
}

/// A rate with an SI prefix: `54.95 k`, `1.20 M`.
fn si(v: f64) -> String {
    let a = v.abs();
    let (x, p) = if a >= 1e12 {
        (v / 1e12, " T")
    } else if a >= 1e9 {
        (v / 1e9, " G")
    } else if a >= 1e6 {
        (v / 1e6, " M")
    } else if a >= 1e3 {
        (v / 1e3, " k")
    } else {
        (v, "")
    };
    format!("{x:.2}{p}")
}

/// A duration in ns with a readable unit: `483.6 ns`, `23.01 µs`, `1.250 ms`.
fn ns_text(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.3} ms", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.2} µs", v / 1e3)
    } else {
        format!("{v:.1} ns")
    }
}

fn render_steps(s: &mut String, st: &StepDiff) {
    use std::fmt::Write;
    let ms = |ns: u64| ns as f64 / 1e6;
    let _ = writeln!(s, "\n{:<24} {:>12} {:>12} {:>9}", "steps", "A", "B", "change");
    let _ = writeln!(
        s,
        "{:<24} {:>12} {:>12} {:>9}",
        "count",
        st.count.a,
        st.count.b,
        pct_text(st.count.pct)
    );
    for (label, d) in [("p50 step (ms)", &st.p50), ("p95 step (ms)", &st.p95)] {
        if let Some(d) = d {
            let _ = writeln!(s, "{:<24} {:>12.3} {:>12.3} {:>9}", label, ms(d.a), ms(d.b), pct_text(d.pct));
        }
    }
    let _ = writeln!(
        s,
        "{:<24} {:>12.3} {:>12.3} {:>9}",
        "mean step per GPU (ms)",
        ms(st.mean_duration.a),
        ms(st.mean_duration.b),
        pct_text(st.mean_duration.pct)
    );
    for c in &st.mean {
        let _ = writeln!(s, "  {:<22} {:>12.3} {:>12.3} {:>9}", c.name, ms(c.a), ms(c.b), pct_text(c.pct));
    }
    for (run, slow) in [("A", &st.slowest.0), ("B", &st.slowest.1)] {
        if let Some(x) = slow {
            let _ = writeln!(
                s,
                "slowest step in {run}: step {} on rank {} gpu {}, {:.3} ms (idle {:.3} ms, exposed communication {:.3} ms)",
                x.step,
                x.rank,
                x.device,
                ms(x.duration_ns),
                ms(x.idle_ns),
                ms(x.exposed_communication_ns)
            );
        }
    }
}

fn render_scaling(s: &mut String, sc: &Scaling) {
    use std::fmt::Write;
    let _ = writeln!(
        s,
        "\nscaling {} -> {} GPUs on {}: efficiency {:.1}% (per GPU {} -> {} {})",
        sc.gpus.0,
        sc.gpus.1,
        sc.basis.name(),
        100.0 * sc.efficiency,
        si(sc.per_gpu.0),
        si(sc.per_gpu.1),
        sc.basis.name()
    );
    if !sc.lost.is_empty() {
        let a_total: f64 = sc.lost.iter().map(|l| l.a).sum();
        let of_a = |v: f64| {
            if a_total > 0.0 {
                format!(" ({:+.1}% of A's)", 100.0 * v / a_total)
            } else {
                String::new()
            }
        };
        let _ = writeln!(
            s,
            "  GPU time per {} in steps: A {}, B {}{}; by category (B - A):",
            sc.unit,
            ns_text(a_total),
            ns_text(a_total + sc.lost_ns_per_unit),
            of_a(sc.lost_ns_per_unit)
        );
        for l in &sc.lost {
            let share = l.share.map_or(String::new(), |x| format!(", {:.0}% of the loss", 100.0 * x));
            let signed = if l.delta >= 0.0 {
                format!("+{}", ns_text(l.delta))
            } else {
                ns_text(l.delta)
            };
            let _ = writeln!(s, "    {:<22} {:>12}{}{share}", l.name, signed, of_a(l.delta));
        }
    }
    for st in &sc.stragglers {
        let _ = writeln!(s, "  straggler in {}: {}", st.run, st.title);
    }
}

fn render_collectives(s: &mut String, rows: &[CollectiveDelta], top: usize) {
    use gputrace_format::text::escape;
    use std::fmt::Write;
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(s, "\ncollectives (biggest bus-bandwidth drop first; counts and time per GPU)");
    let bw = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.1}"));
    for c in rows.iter().take(top) {
        let who = if c.communicator_name.is_empty() {
            format!("{} x{}", escape(&c.op), c.nranks.1.max(c.nranks.0))
        } else {
            format!("{} {}", escape(&c.op), escape(&c.communicator_name))
        };
        let _ = writeln!(
            s,
            "  {:<28} busbw {} -> {} GB/s {:>9}  per GPU: count {} -> {}, time {:+.3} ms",
            who,
            bw(c.busbw_gbps.a),
            bw(c.busbw_gbps.b),
            c.busbw_gbps.pct.map_or("-".to_string(), |p| format!("{p:+.1}%")),
            c.count.a,
            c.count.b,
            c.time.delta as f64 / 1e6
        );
    }
}

#[cfg(test)]
mod tests;
