//! The serving section of `report`'s text.

use gputrace_analysis::serving::{GaugeStat, Quantile, RequestMarks, ServingReport};
use std::fmt::Write;

fn secs(v: f64) -> String {
    if v >= 1.0 {
        format!("{v:.3} s")
    } else if v >= 1e-3 {
        format!("{:.2} ms", v * 1e3)
    } else {
        format!("{:.1} µs", v * 1e6)
    }
}

fn ms(ns: u64) -> String {
    format!("{:.2} ms", ns as f64 / 1e6)
}

fn quantile(q: Option<Quantile>) -> String {
    match q {
        None => "-".into(),
        Some(q) if q.above_highest_bucket => format!(">{}", secs(q.seconds)),
        Some(q) => secs(q.seconds),
    }
}

fn resolution(q: Option<Quantile>) -> String {
    match q {
        None => "-".into(),
        Some(q) if q.above_highest_bucket => format!("above {}", secs(q.bucket_upper)),
        Some(q) => format!("{}–{}", secs(q.bucket_lower), secs(q.bucket_upper)),
    }
}

fn gauge(name: &str, g: Option<GaugeStat>, pct: bool) -> Option<String> {
    let g = g?;
    let f = |v: f64| if pct { format!("{:.1}%", 100.0 * v) } else { format!("{v:.1}") };
    Some(format!(
        "{name} min {} mean {} max {} (last {})",
        f(g.min),
        f(g.mean),
        f(g.max),
        f(g.last)
    ))
}

fn share(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1}%", 100.0 * part as f64 / whole as f64)
    }
}

/// Append the serving section of each server to `o` (`heading` styles a title).
pub(crate) fn render_serving(o: &mut String, reports: &[ServingReport], heading: &dyn Fn(&str) -> String) {
    for r in reports {
        if let (0, Some(m)) = (r.scrapes, &r.request_marks) {
            let _ = writeln!(
                o,
                "\n{}",
                heading(&format!(
                    "Serving (from {}, no server metrics; window {:.3} s)",
                    m.source,
                    r.window_ns as f64 / 1e9
                ))
            );
            render_marks(o, m);
            render_iterations(o, r);
            render_split_and_cost(o, r);
            continue;
        }
        if r.scrapes == 0 {
            let _ = writeln!(
                o,
                "\n{}",
                heading(&format!(
                    "Serving (from the GPU timeline alone, no server metrics; window {:.3} s)",
                    r.window_ns as f64 / 1e9
                ))
            );
            render_iterations(o, r);
            continue;
        }
        let _ = writeln!(
            o,
            "\n{}",
            heading(&format!(
                "Serving ({} at {}; window {:.3} s, {} scrapes{})",
                if r.engine.is_empty() { "server" } else { &r.engine },
                if r.url.is_empty() { "?" } else { &r.url },
                r.window_ns as f64 / 1e9,
                r.scrapes,
                if r.scrapes_failed > 0 {
                    format!(", {} FAILED: gaps in the series", r.scrapes_failed)
                } else {
                    String::new()
                }
            ))
        );
        if let Some(m) = &r.request_marks {
            render_marks(o, m);
            let _ = writeln!(o, "server metrics (the histograms' estimates; the marks above are exact):");
        }
        if r.counter_resets > 0 {
            let _ = writeln!(
                o,
                "counters dropped {} time(s): the server restarted in the window",
                r.counter_resets
            );
        }
        let q = &r.requests;
        let _ = writeln!(
            o,
            "requests: {} completed ({:.2}/s), {} failed ({:.2}/s, error rate {:.2}%)",
            q.completed,
            q.completed_per_s,
            q.failed,
            q.failed_per_s,
            100.0 * q.error_rate
        );
        let t = &r.tokens;
        let _ = writeln!(
            o,
            "tokens: {} prompt ({:.1}/s input), {} generated ({:.1}/s output)",
            t.prompt, t.prompt_per_s, t.generation, t.generation_per_s
        );
        if !r.latency.is_empty() {
            let _ = writeln!(
                o,
                "{:<6} {:>8} {:>10} {:>10} {:>10} {:>10}  p99 bucket (histogram resolution)",
                "", "count", "mean", "p50", "p95", "p99"
            );
            for l in &r.latency {
                let _ = writeln!(
                    o,
                    "{:<6} {:>8} {:>10} {:>10} {:>10} {:>10}  {}",
                    l.name,
                    l.count,
                    l.mean_s.map_or("-".into(), secs),
                    quantile(l.p50),
                    quantile(l.p95),
                    quantile(l.p99),
                    resolution(l.p99)
                );
            }
            let _ = writeln!(
                o,
                "(quantiles as Prometheus' histogram_quantile over the window's bucket increases: linear inside a bucket)"
            );
        }
        let gauges: Vec<String> = [
            gauge("running", r.running, false),
            gauge("waiting", r.waiting, false),
            gauge("KV-cache", r.kv_cache_usage, true),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !gauges.is_empty() {
            let _ = writeln!(o, "{}", gauges.join("; "));
        }
        render_iterations(o, r);
        render_split_and_cost(o, r);
    }
}

fn render_iterations(o: &mut String, r: &ServingReport) {
    match &r.iterations {
        Some(i) => {
            let _ = writeln!(
                o,
                "iterations: {} ({:.1}/s per GPU; {} decode, {} prefill, {} eager unplaced); GPU busy per iteration p50 {}, p95 {}",
                i.count,
                i.per_s,
                i.decode,
                i.prefill,
                i.unknown,
                ms(i.busy.p50_ns),
                ms(i.busy.p95_ns)
            );
            let _ = writeln!(
                o,
                "bubble before an iteration: p50 {}, p95 {}, p99 {}, max {}, total {} (an idle gap of {} or more ends an iteration)",
                ms(i.bubble.p50_ns),
                ms(i.bubble.p95_ns),
                ms(i.bubble.p99_ns),
                ms(i.bubble.max_ns),
                ms(i.bubble.total_ns),
                ms(i.gap_threshold_ns)
            );
        }
        None => {
            let _ = writeln!(
                o,
                "iterations: no GPU trace of this server (capture off or failed): the server's own numbers only"
            );
        }
    }
}

fn render_split_and_cost(o: &mut String, r: &ServingReport) {
    if let Some(g) = &r.gpu_time {
        let _ = writeln!(
                o,
                "GPU time ({} GPU(s) × window): serving work {}, bubbles while requests waited (waste) {}, idle with nothing to serve (headroom) {}",
                g.devices,
                share(g.serving_work_ns, g.window_gpu_ns),
                share(g.waste_bubbles_ns, g.window_gpu_ns),
                share(g.headroom_idle_ns, g.window_gpu_ns)
            );
    }
    if let Some(c) = &r.cost {
        let per = |v: Option<f64>| v.map_or("-".into(), |v| format!("${v:.4}"));
        let _ = writeln!(
            o,
            "cost at ${}/GPU-hour: {} per million output tokens, {} per million input tokens ({:.4} GPU-hours)",
            c.usd_per_gpu_hour,
            per(c.usd_per_m_output_tokens),
            per(c.usd_per_m_input_tokens),
            c.gpu_hours
        );
    }
}

/// The exact numbers of a server's request marks.
fn render_marks(o: &mut String, m: &RequestMarks) {
    let q = &m.requests;
    let _ = writeln!(
        o,
        "requests (exact, {} over {:.3} s from the first mark to the last): {} completed ({:.2}/s), {} failed ({:.2}/s, error rate {:.2}%), {} unfinished",
        m.source,
        m.window_ns as f64 / 1e9,
        q.completed,
        q.completed_per_s,
        q.failed,
        q.failed_per_s,
        100.0 * q.error_rate,
        m.unfinished
    );
    let t = &m.tokens;
    let _ = writeln!(
        o,
        "tokens (exact, marks): {} prompt ({:.1}/s input), {} generated ({:.1}/s output)",
        t.prompt, t.prompt_per_s, t.generation, t.generation_per_s
    );
    if m.latency.is_empty() && m.decode_tokens_per_s.is_none() {
        return;
    }
    let _ = writeln!(
        o,
        "{:<13} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "exact", "requests", "mean", "p50", "p95", "p99", "min", "max"
    );
    for l in &m.latency {
        let _ = writeln!(
            o,
            "{:<13} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            l.name,
            l.count,
            secs(l.mean),
            secs(l.p50),
            secs(l.p95),
            secs(l.p99),
            secs(l.min),
            secs(l.max)
        );
    }
    if let Some(d) = &m.decode_tokens_per_s {
        let f = |v: f64| format!("{v:.1}/s");
        let _ = writeln!(
            o,
            "{:<13} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "decode tok/s",
            d.count,
            f(d.mean),
            f(d.p50),
            f(d.p95),
            f(d.p99),
            f(d.min),
            f(d.max)
        );
    }
    let _ = writeln!(
        o,
        "(each request from its own marks, percentiles by nearest rank; itl = (finish − first token) / (generated − 1), \
         decode tok/s = (generated − 1) / (finish − first token))"
    );
}
