//! The serving families: an inference server's numbers over the traced window
//! (`Report::serving`, docs/serving.md), one set per server.

use crate::exposition::{Exposition, Labels, MetricType};
use crate::Options;
use gputrace_analysis::serving::ServingReport;
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
