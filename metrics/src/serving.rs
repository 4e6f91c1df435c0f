//! The serving families: an inference server's numbers over the traced window
//! (`Report::serving`, docs/serving.md), one set per server.

use crate::exposition::{Exposition, Labels, MetricType};
use crate::Options;
use gputrace_analysis::serving::{ExactStat, RequestMarks, ServingReport};
use gputrace_analysis::Report;

fn server_labels(opts: &Options, r: &ServingReport) -> Labels {
    let mut l = Labels::new();
    if let Some(job) = &opts.job {
        l = l.with("job", job);
    }
    l.with("engine", &r.engine).with("server", &r.url)
}

/// Add the serving families of every server in `report` to `e`.
pub fn serving_families(e: &mut Exposition, report: &Report, opts: &Options) {
    use MetricType::{Counter, Gauge};
    for r in &report.serving {
        let l = server_labels(opts, r);
        for (outcome, n) in [("completed", r.requests.completed), ("failed", r.requests.failed)] {
            e.add(
                "gputrace_serving_requests_total",
                Counter,
                "Requests the server finished in the traced window, by outcome (its own metrics' increase).",
                &l.with("outcome", outcome),
                n as f64,
            );
        }
        for (kind, n) in [("prompt", r.tokens.prompt), ("generation", r.tokens.generation)] {
            e.add(
                "gputrace_serving_tokens_total",
                Counter,
                "Tokens the server processed in the traced window: prompt (input) or generation (output).",
                &l.with("kind", kind),
                n as f64,
            );
        }
        for lat in &r.latency {
            for (q, v) in [("0.5", lat.p50), ("0.95", lat.p95), ("0.99", lat.p99)] {
                if let Some(v) = v {
                    e.add(
                        "gputrace_serving_latency_seconds",
                        Gauge,
                        "Latency quantile over the traced window (histogram_quantile of the server's histogram \
                         increases): ttft, itl, e2e or queue.",
                        &l.with("latency", lat.name).with("q", q),
                        v.seconds,
                    );
                }
            }
        }
        for (state, g) in [("running", r.running), ("waiting", r.waiting)] {
            if let Some(g) = g {
                e.add(
                    "gputrace_serving_requests",
                    Gauge,
                    "Requests running or waiting at the last scrape.",
                    &l.with("state", state),
                    g.last,
                );
            }
        }
        if let Some(g) = r.kv_cache_usage {
            e.add(
                "gputrace_serving_kv_cache_usage_ratio",
                Gauge,
                "KV-cache usage at the last scrape (1 = full).",
                &l,
                g.last,
            );
        }
        if let Some(i) = &r.iterations {
            e.add(
                "gputrace_serving_iterations_total",
                Counter,
                "Engine iterations (forward passes) found on the GPU timeline in the window.",
                &l,
                i.count as f64,
            );
            e.add(
                "gputrace_serving_bubble_seconds_total",
                Counter,
                "GPU idle time before iterations (bubbles), summed.",
                &l,
                i.bubble.total_ns as f64 / 1e9,
            );
        }
        if let Some(m) = &r.request_marks {
            mark_families(e, m, &l);
        }
        if let Some(g) = &r.gpu_time {
            for (split, ns) in [
                ("work", g.serving_work_ns),
                ("waste", g.waste_bubbles_ns),
                ("headroom", g.headroom_idle_ns),
            ] {
                e.add(
                    "gputrace_serving_gpu_seconds_total",
                    Counter,
                    "GPU time of the window: serving work, idle while requests waited (waste), idle with nothing to \
                     serve (headroom); the three add up to GPUs x window.",
                    &l.with("split", split),
                    ns as f64 / 1e9,
                );
            }
        }
    }
}

/// The quantile labels of an exact statistic: its smallest value is q 0, its
/// largest q 1 (nearest rank, the same as its p50/p95/p99 are).
fn quantiles(s: &ExactStat) -> [(&'static str, f64); 5] {
    [("0", s.min), ("0.5", s.p50), ("0.95", s.p95), ("0.99", s.p99), ("1", s.max)]
}

/// The exact per-request numbers of `gputrace.request` marks (docs/serving.md),
/// the same as `report --json`'s `serving[].request_marks`.
fn mark_families(e: &mut Exposition, m: &RequestMarks, l: &Labels) {
    use MetricType::{Counter, Gauge};
    for (outcome, n) in [("completed", m.requests.completed), ("failed", m.requests.failed)] {
        e.add(
            "gputrace_serving_marks_requests_total",
            Counter,
            "Requests that ended in the window of the gputrace.request marks, by outcome (exact).",
            &l.with("outcome", outcome),
            n as f64,
        );
    }
    e.add(
        "gputrace_serving_marks_requests_unfinished",
        Gauge,
        "Requests marked as arrived that had not ended at the last gputrace.request mark.",
        l,
        m.unfinished as f64,
    );
    for (kind, n) in [("prompt", m.tokens.prompt), ("generation", m.tokens.generation)] {
        e.add(
            "gputrace_serving_marks_tokens_total",
            Counter,
            "Tokens of the marked requests: prompt (those that arrived) or generation (those that ended).",
            &l.with("kind", kind),
            n as f64,
        );
    }
    e.add(
        "gputrace_serving_marks_window_seconds",
        Gauge,
        "The window of the gputrace.request marks: first mark to last.",
        l,
        m.window_ns as f64 / 1e9,
    );
    for s in &m.latency {
        let ll = l.with("latency", s.name);
        for (q, v) in quantiles(s) {
            e.add(
                "gputrace_serving_marks_latency_seconds",
                Gauge,
                "Exact per-request latency from gputrace.request marks (ttft, itl, e2e, queue) at quantile q \
                 (nearest rank; q 0 the smallest, q 1 the largest).",
                &ll.with("q", q),
                v,
            );
        }
        e.add(
            "gputrace_serving_marks_latency_mean_seconds",
            Gauge,
            "Mean per-request latency from gputrace.request marks (ttft, itl, e2e, queue).",
            &ll,
            s.mean,
        );
        e.add(
            "gputrace_serving_marks_latency_requests",
            Gauge,
            "Marked requests with a value of this latency (ttft, itl, e2e, queue).",
            &ll,
            s.count as f64,
        );
    }
    if let Some(s) = &m.decode_tokens_per_s {
        for (q, v) in quantiles(s) {
            e.add(
                "gputrace_serving_marks_decode_tokens_per_second",
                Gauge,
                "Per marked request, output tokens per second after the first, at quantile q (nearest rank).",
                &l.with("q", q),
                v,
            );
        }
        e.add(
            "gputrace_serving_marks_decode_mean_tokens_per_second",
            Gauge,
            "Mean over marked requests of their output tokens per second after the first.",
            l,
            s.mean,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputrace_analysis::serving::{GpuTime, Requests, Tokens};

    #[test]
    fn serving_families_carry_the_window() {
        let mut report = Report::from_ranks(Vec::new(), &gputrace_analysis::Options::default());
        report.serving.push(ServingReport {
            engine: "vllm".into(),
            url: "http://127.0.0.1:8000/metrics".into(),
            requests: Requests {
                completed: 100,
                failed: 3,
                ..Requests::default()
            },
            tokens: Tokens {
                prompt: 12800,
                generation: 25600,
                ..Tokens::default()
            },
            gpu_time: Some(GpuTime {
                devices: 1,
                window_gpu_ns: 3_000_000_000,
                serving_work_ns: 1_000_000_000,
                waste_bubbles_ns: 1_500_000_000,
                headroom_idle_ns: 500_000_000,
            }),
            ..ServingReport::default()
        });
        let mut e = Exposition::new();
        serving_families(&mut e, &report, &Options { job: Some("j".into()) });
        let text = e.render();
        for line in [
            "gputrace_serving_requests_total{job=\"j\",engine=\"vllm\",server=\"http://127.0.0.1:8000/metrics\",outcome=\"completed\"} 100",
            "gputrace_serving_requests_total{job=\"j\",engine=\"vllm\",server=\"http://127.0.0.1:8000/metrics\",outcome=\"failed\"} 3",
            "gputrace_serving_tokens_total{job=\"j\",engine=\"vllm\",server=\"http://127.0.0.1:8000/metrics\",kind=\"generation\"} 25600",
            "gputrace_serving_gpu_seconds_total{job=\"j\",engine=\"vllm\",server=\"http://127.0.0.1:8000/metrics\",split=\"waste\"} 1.5",
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
    }
}
