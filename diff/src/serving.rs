//! Serving runs compared by what a server is for: tokens/s, requests/s, error
//! rate and latency quantiles (the first server of each report; docs/serving.md).

use gputrace_analysis::serving::ServingReport;
use gputrace_analysis::Report;
use serde::Serialize;
use std::fmt::Write;

/// One compared rate or duration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Change {
    /// What is compared (`generation tokens/s`, `e2e p99 s`).
    pub name: String,
    /// Baseline.
    pub a: f64,
    /// New.
    pub b: f64,
    /// `(b − a) / a` in percent (`None` when `a` is 0).
    pub pct: Option<f64>,
    /// Whether higher is better (throughput) or lower (latency, errors).
    pub higher_is_better: bool,
}

impl Change {
    pub(crate) fn new(name: impl Into<String>, a: f64, b: f64, higher_is_better: bool) -> Change {
        Change {
            name: name.into(),
            a,
            b,
            pct: (a != 0.0).then(|| 100.0 * (b - a) / a),
            higher_is_better,
        }
    }

    /// How much worse B is, in percent (negative: better).
    pub fn worse_pct(&self) -> f64 {
        let p = self.pct.unwrap_or(0.0);
        if self.higher_is_better {
            -p
        } else {
            p
        }
    }
}

/// Two serving runs side by side.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServingDiff {
    /// Throughput: requests/s completed, prompt and generation tokens/s.
    pub throughput: Vec<Change>,
    /// Error rate, in percent of finished requests.
    pub error_rate: Change,
    /// TTFT, ITL, e2e and queue at p50/p95/p99, seconds (those both runs have).
    pub latency: Vec<Change>,
    /// Bubble before an iteration at p50, ms (both runs with a GPU trace).
    pub bubble_p50_ms: Option<Change>,
    /// The change B is judged by: e2e p99 (else the worst latency change), in percent.
    pub slower_pct: f64,
    /// `gputrace.request marks` when both runs marked their requests: then
    /// throughput, error rate and latency are the marks' exact numbers
    /// (absent: the server's metrics, latency from its histograms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<&'static str>,
}

/// The serving diff of two reports that both served, else `None`.
pub fn diff_serving(a: &Report, b: &Report) -> Option<ServingDiff> {
    let (sa, sb) = (a.serving.first()?, b.serving.first()?);
    let throughput = vec![
        Change::new("requests/s", sa.requests.completed_per_s, sb.requests.completed_per_s, true),
        Change::new("prompt tokens/s", sa.tokens.prompt_per_s, sb.tokens.prompt_per_s, true),
        Change::new("generation tokens/s", sa.tokens.generation_per_s, sb.tokens.generation_per_s, true),
    ];
    let mut latency = Vec::new();
    for la in &sa.latency {
        let Some(lb) = sb.latency(la.name) else { continue };
        for (q, x, y) in [("p50", la.p50, lb.p50), ("p95", la.p95, lb.p95), ("p99", la.p99, lb.p99)] {
            if let (Some(x), Some(y)) = (x, y) {
                latency.push(Change::new(format!("{} {q} s", la.name), x.seconds, y.seconds, false));
            }
        }
    }
    let slower_pct = judged(&latency);
    let bubble = |s: &ServingReport| s.iterations.as_ref().map(|i| i.bubble.p50_ns as f64 / 1e6);
    Some(ServingDiff {
        throughput,
        error_rate: Change::new(
            "error rate %",
            100.0 * sa.requests.error_rate,
            100.0 * sb.requests.error_rate,
            false,
        ),
        bubble_p50_ms: bubble(sa).zip(bubble(sb)).map(|(x, y)| Change::new("bubble p50 ms", x, y, false)),
        latency,
        slower_pct,
        source: None,
    })
}

/// The change a server is judged by: e2e p99, else the worst latency change, in percent.
pub(crate) fn judged(latency: &[Change]) -> f64 {
    latency
        .iter()
        .find(|c| c.name == "e2e p99 s")
        .map(Change::worse_pct)
        .or_else(|| latency.iter().map(Change::worse_pct).reduce(f64::max))
        .unwrap_or(0.0)
}

/// The verdict's serving words: output tokens/s and e2e p99 (or the judged latency).
pub fn verdict(d: &ServingDiff) -> String {
    let tok = d.throughput.iter().find(|c| c.name == "generation tokens/s");
    let tok = tok
        .and_then(|c| c.pct)
        .map_or(String::new(), |p| format!("generation tokens/s {p:+.1}%, "));
    format!("serving: {tok}latency {:+.1}% (e2e p99, or the worst quantile)", d.slower_pct)
}

/// The serving table of `gputrace diff`'s text.
pub fn render_serving(s: &mut String, d: &ServingDiff) {
    let _ = writeln!(s, "\n{:<24} {:>12} {:>12} {:>9}", "serving", "A", "B", "change");
    if let Some(src) = d.source {
        let _ = writeln!(s, "(exact, from {src} in both runs)");
    }
    let rows = d
        .throughput
        .iter()
        .chain(std::iter::once(&d.error_rate))
        .chain(&d.latency)
        .chain(&d.bubble_p50_ms);
    for c in rows {
        let pct = c.pct.map_or("-".into(), |p| format!("{p:+.1}%"));
        let _ = writeln!(s, "{:<24} {:>12.4} {:>12.4} {:>9}", c.name, c.a, c.b, pct);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputrace_analysis::serving::{LatencyStat, Quantile, Requests, Tokens};

    fn report(tokens_per_s: f64, e2e_p99: f64) -> Report {
        let mut r = Report::from_ranks(Vec::new(), &gputrace_analysis::Options::default());
        let q = |seconds| {
            Some(Quantile {
                q: 0.99,
                seconds,
                bucket_lower: 0.0,
                bucket_upper: 10.0,
                above_highest_bucket: false,
            })
        };
        r.serving.push(ServingReport {
            requests: Requests {
                completed: 100,
                completed_per_s: 10.0,
                ..Requests::default()
            },
            tokens: Tokens {
                generation_per_s: tokens_per_s,
                ..Tokens::default()
            },
            latency: vec![LatencyStat {
                name: "e2e",
                count: 100,
                mean_s: None,
                p50: q(1.0),
                p95: None,
                p99: q(e2e_p99),
                buckets: Vec::new(),
            }],
            ..ServingReport::default()
        });
        r
    }

    #[test]
    fn serving_runs_compare_by_tokens_and_latency() {
        let d = crate::diff(&report(1000.0, 2.0), &report(1200.0, 3.0));
        let s = d.serving.as_ref().unwrap();
        let tok = s.throughput.iter().find(|c| c.name == "generation tokens/s").unwrap();
        assert_eq!(tok.pct, Some(20.0));
        assert_eq!(tok.worse_pct(), -20.0);
        assert_eq!(s.slower_pct, 50.0);
        assert_eq!(d.slower_pct(), 50.0, "--fail-if-slower judges a server by e2e p99");
        assert!(
            d.verdict.starts_with("serving: generation tokens/s +20.0%, latency +50.0%"),
            "{}",
            d.verdict
        );
        assert!(crate::render_text(&d, 5).contains("e2e p99 s"));
        // Training runs: no serving section.
        let plain = Report::from_ranks(Vec::new(), &gputrace_analysis::Options::default());
        assert!(crate::diff(&plain, &plain).serving.is_none());
    }
}
