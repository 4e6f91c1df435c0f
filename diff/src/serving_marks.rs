//! Serving runs that both marked their requests (`gputrace.request`) are
//! compared by the marks' exact numbers: throughput, error rate and the
//! per-request latency quantiles (docs/serving.md).

use crate::serving::{judged, Change, ServingDiff};
use gputrace_analysis::serving::ServingReport;
use gputrace_analysis::Report;

/// The diff of the first servers of two reports by their request marks;
/// `None` unless both have marks.
pub(crate) fn diff_marks(a: &Report, b: &Report) -> Option<ServingDiff> {
    let (sa, sb) = (a.serving.first()?, b.serving.first()?);
    let (ma, mb) = (sa.request_marks.as_ref()?, sb.request_marks.as_ref()?);
    let throughput = vec![
        Change::new("requests/s", ma.requests.completed_per_s, mb.requests.completed_per_s, true),
        Change::new("prompt tokens/s", ma.tokens.prompt_per_s, mb.tokens.prompt_per_s, true),
        Change::new("generation tokens/s", ma.tokens.generation_per_s, mb.tokens.generation_per_s, true),
    ];
    let mut latency = Vec::new();
    for la in &ma.latency {
        let Some(lb) = mb.latency(la.name) else { continue };
        for (q, x, y) in [("p50", la.p50, lb.p50), ("p95", la.p95, lb.p95), ("p99", la.p99, lb.p99)] {
            latency.push(Change::new(format!("{} {q} s", la.name), x, y, false));
        }
    }
    if let (Some(x), Some(y)) = (&ma.decode_tokens_per_s, &mb.decode_tokens_per_s) {
        latency.push(Change::new("decode tokens/s p50", x.p50, y.p50, true));
    }
    let bubble = |s: &ServingReport| s.iterations.as_ref().map(|i| i.bubble.p50_ns as f64 / 1e6);
    Some(ServingDiff {
        throughput,
        error_rate: Change::new(
            "error rate %",
            100.0 * ma.requests.error_rate,
            100.0 * mb.requests.error_rate,
            false,
        ),
        bubble_p50_ms: bubble(sa).zip(bubble(sb)).map(|(x, y)| Change::new("bubble p50 ms", x, y, false)),
        slower_pct: judged(&latency),
        latency,
        source: Some(gputrace_analysis::serving::REQUEST_MARKS),
    })
}

#[cfg(test)]
mod tests {
    use gputrace_analysis::serving::{request_marks, RequestRow, ServingReport};
    use gputrace_analysis::Report;

    /// A server whose 10 requests each take `e2e_ms`, marked.
    fn marked(e2e_ms: u64, marks: bool) -> Report {
        let ms = 1_000_000;
        let rows: Vec<RequestRow> = (0..10)
            .map(|i| RequestRow {
                id: i,
                arrive_ns: Some(i * 100 * ms),
                scheduled_ns: Some(i * 100 * ms),
                first_token_ns: Some(i * 100 * ms + 10 * ms),
                end_ns: Some(i * 100 * ms + e2e_ms * ms),
                failed: false,
                prompt_tokens: 5,
                generation_tokens: 11,
            })
            .collect();
        let mut r = Report::from_ranks(Vec::new(), &gputrace_analysis::Options::default());
        r.serving.push(ServingReport {
            request_marks: marks.then(|| request_marks(&rows)).flatten(),
            ..ServingReport::default()
        });
        r
    }

    #[test]
    fn marked_servers_compare_by_their_exact_numbers() {
        let d = crate::diff(&marked(100, true), &marked(150, true));
        let s = d.serving.as_ref().unwrap();
        assert_eq!(s.source, Some("gputrace.request marks"));
        let e2e = s.latency.iter().find(|c| c.name == "e2e p99 s").unwrap();
        assert_eq!((e2e.a, e2e.b), (0.1, 0.15));
        assert!((s.slower_pct - 50.0).abs() < 1e-9, "{}", s.slower_pct);
        assert!(crate::render_text(&d, 5).contains("(exact, from gputrace.request marks in both runs)"));
        // One run without marks: the server metrics of both, as before.
        let d = crate::diff(&marked(100, true), &marked(150, false));
        assert_eq!(d.serving.as_ref().unwrap().source, None);
    }
}
