//! `gputrace diff A B`: compare two runs' reports (A = baseline, B = new).
//!
//! Pure: two [`Report`]s in, a [`Diff`] out. Times per category are per GPU
//! (the job total divided by its active GPUs), so runs on different GPU
//! counts compare per GPU. Kernels are matched by name; a kernel present in
//! one run only has zeros on the other side. Rows are sorted biggest
//! regression (B − A) first.

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
    fn new(name: impl Into<String>, a: u64, b: u64) -> Delta {
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
    /// Launch counts.
    pub count: Delta,
    /// Total GPU time, ns.
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
    /// Kernels by name, biggest time regression first.
    pub kernels: Vec<KernelDelta>,
    /// One line: faster, slower or the same, and the biggest regression.
    pub verdict: String,
}

impl Diff {
    /// B's span change in percent of A's (0 when A is empty).
    pub fn slower_pct(&self) -> f64 {
        self.span.pct.unwrap_or(0.0)
    }
}

/// A kernel's (launch count, total ns) in one run.
type CountTime = (u64, u64);

fn per_gpu(total: u64, gpus: u64) -> u64 {
    total / gpus.max(1)
}

/// Diff `a` (baseline) against `b`. Kernels come from each report's
/// `top_kernels`, so analyse both with a `top_kernels` large enough to list
/// every kernel name.
pub fn diff(a: &Report, b: &Report) -> Diff {
    let (ga, gb) = (a.totals.active_devices, b.totals.active_devices);
    let (ta, tb) = (&a.totals, &b.totals);
    let cat = |name: &str, x: u64, y: u64| Delta::new(name, per_gpu(x, ga), per_gpu(y, gb));
    let span = cat("span", ta.span_ns, tb.span_ns);
    let mut categories = vec![
        cat("compute", ta.compute_ns, tb.compute_ns),
        cat("exposed communication", ta.exposed_communication_ns, tb.exposed_communication_ns),
        cat("exposed transfer", ta.exposed_transfer_ns, tb.exposed_transfer_ns),
        cat("idle", ta.idle_ns, tb.idle_ns),
    ];
    categories.sort_by(|x, y| y.delta.cmp(&x.delta).then_with(|| x.name.cmp(&y.name)));
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
            count: Delta::new("count", ca, cb),
            time: Delta::new("time", ta, tb),
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
    Diff {
        gpus: (ga, gb),
        span,
        categories,
        kernels,
        verdict: format!("{word}{worst}"),
    }
}

/// Plain-text rendering: the verdict, categories, then the `top` kernels.
pub fn render_text(d: &Diff, top: usize) -> String {
    use std::fmt::Write;
    let ms = |ns: u64| ns as f64 / 1e6;
    let pct = |p: Option<f64>| p.map_or("new".to_string(), |p| format!("{p:+.1}%"));
    let mut s = format!("{}\n\nGPUs: A {}, B {}\n", d.verdict, d.gpus.0, d.gpus.1);
    let _ = writeln!(s, "\n{:<24} {:>12} {:>12} {:>9}", "per GPU (ms)", "A", "B", "change");
    for c in std::iter::once(&d.span).chain(&d.categories) {
        let _ = writeln!(s, "{:<24} {:>12.3} {:>12.3} {:>9}", c.name, ms(c.a), ms(c.b), pct(c.pct));
    }
    let _ = writeln!(s, "\nkernels (biggest time regression first)");
    for k in d.kernels.iter().take(top) {
        let _ = writeln!(
            s,
            "  {:>+10.3} ms {:>9}  count {} -> {}  {}",
            k.time.delta as f64 / 1e6,
            pct(k.time.pct),
            k.count.a,
            k.count.b,
            k.name
        );
    }
    s
}
