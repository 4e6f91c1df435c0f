//! The page's serving section (docs/serving.md): one block per server, self-contained
//! (its own table and inline SVG; nothing else on the page depends on it).

use super::esc;
use gputrace_analysis::serving::{Point, Quantile, ServingReport};
use gputrace_analysis::Report;
use std::fmt::Write;

fn secs(q: Option<Quantile>) -> String {
    match q {
        None => "–".into(),
        Some(q) if q.above_highest_bucket => format!("&gt;{:.4} s", q.seconds),
        Some(q) => format!("{:.4} s", q.seconds),
    }
}

/// Running and waiting requests over the window as an inline SVG (two lines).
fn gauges_svg(points: &[Point]) -> String {
    const W: f64 = 240.0;
    const H: f64 = 40.0;
    let max = points
        .iter()
        .flat_map(|p| [p.running, p.waiting])
        .flatten()
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let end = points.last().map_or(1, |p| p.offset_ns).max(1) as f64;
    let line = |pick: fn(&Point) -> Option<u64>, class: &str| {
        let pts: Vec<String> = points
            .iter()
            .filter_map(|p| pick(p).map(|v| format!("{:.1},{:.1}", p.offset_ns as f64 / end * W, H - 1.0 - v as f64 / max * (H - 2.0))))
            .collect();
        format!("<polyline class=\"{class}\" fill=\"none\" points=\"{}\"/>", pts.join(" "))
    };
    format!(
        "<svg class=\"serving-gauges\" viewBox=\"0 0 240 40\" preserveAspectRatio=\"none\" role=\"img\" aria-label=\"running and waiting requests over time\" \
         style=\"width:240px;height:40px\">{}{}</svg>",
        line(|p| p.running, "running\" stroke=\"#2b7bb9"),
        line(|p| p.waiting, "waiting\" stroke=\"#d9534f")
    )
}

fn server(o: &mut String, r: &ServingReport) {
    let _ = writeln!(
        o,
        "<section class=\"serving\"><h2>Serving: {} at {}</h2><p class=\"mute\">window {:.3} s, {} scrapes{}</p>",
        esc(if r.engine.is_empty() { "timeline" } else { &r.engine }),
        esc(if r.url.is_empty() { "(no server metrics)" } else { &r.url }),
        r.window_ns as f64 / 1e9,
        r.scrapes,
        if r.scrapes_failed > 0 {
            format!(", <b>{} failed</b>", r.scrapes_failed)
        } else {
            String::new()
        }
    );
    if r.scrapes > 0 {
        let _ = writeln!(
            o,
            "<p>requests: {} completed ({:.2}/s), {} failed (error rate {:.2}%) · tokens: {} prompt ({:.1}/s input), {} generated ({:.1}/s output)</p>",
            r.requests.completed,
            r.requests.completed_per_s,
            r.requests.failed,
            100.0 * r.requests.error_rate,
            r.tokens.prompt,
            r.tokens.prompt_per_s,
            r.tokens.generation,
            r.tokens.generation_per_s
        );
        o.push_str(
            "<table><thead><tr><th></th><th>count</th><th>p50</th><th>p95</th><th>p99</th><th>p99 bucket</th></tr></thead><tbody>\n",
        );
        for l in &r.latency {
            let bucket = l.p99.map_or("–".into(), |q| format!("{}–{} s", q.bucket_lower, q.bucket_upper));
            let _ = writeln!(
                o,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                l.name,
                l.count,
                secs(l.p50),
                secs(l.p95),
                secs(l.p99),
                bucket
            );
        }
        o.push_str("</tbody></table>\n");
        if !r.timeline.is_empty() {
            let _ = writeln!(
                o,
                "<p>{} running (blue) and waiting (red) requests over the window; KV-cache up to {}</p>",
                gauges_svg(&r.timeline),
                r.kv_cache_usage.map_or("–".into(), |g| format!("{:.1}%", 100.0 * g.max))
            );
        }
    }
    if let Some(i) = &r.iterations {
        let _ = writeln!(
            o,
            "<p>iterations: {} ({:.1}/s per GPU); bubble before an iteration p50 {:.2} ms, p95 {:.2} ms, max {:.2} ms</p>",
            i.count,
            i.per_s,
            i.bubble.p50_ns as f64 / 1e6,
            i.bubble.p95_ns as f64 / 1e6,
            i.bubble.max_ns as f64 / 1e6
        );
    }
    if let Some(g) = &r.gpu_time {
        let pct = |v: u64| 100.0 * v as f64 / g.window_gpu_ns.max(1) as f64;
        let _ = writeln!(
            o,
            "<p>GPU time: serving work {:.1}%, bubbles while requests waited (waste) {:.1}%, idle with nothing to serve (headroom) {:.1}%</p>",
            pct(g.serving_work_ns),
            pct(g.waste_bubbles_ns),
            pct(g.headroom_idle_ns)
        );
    }
    if let Some(c) = &r.cost {
        let usd = |v: Option<f64>| v.map_or("–".into(), |v| format!("${v:.4}"));
        let _ = writeln!(
            o,
            "<p>cost: {} per million output tokens, {} per million input tokens</p>",
            usd(c.usd_per_m_output_tokens),
            usd(c.usd_per_m_input_tokens)
        );
    }
    o.push_str("</section>\n");
}

/// The serving section of every server in the report (nothing for a training job).
pub(crate) fn section(o: &mut String, r: &Report) {
    for s in &r.serving {
        server(o, s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputrace_analysis::serving::{Requests, Tokens};

    #[test]
    fn a_server_gets_its_section_and_a_training_job_none() {
        let mut r = Report::from_ranks(Vec::new(), &gputrace_analysis::Options::default());
        let mut o = String::new();
        section(&mut o, &r);
        assert!(o.is_empty());
        r.serving.push(ServingReport {
            engine: "vllm".into(),
            url: "http://127.0.0.1:8000/metrics?a=<b>".into(),
            scrapes: 5,
            requests: Requests {
                completed: 100,
                ..Requests::default()
            },
            tokens: Tokens {
                generation: 25600,
                ..Tokens::default()
            },
            timeline: vec![
                Point {
                    offset_ns: 0,
                    running: Some(0),
                    waiting: Some(0),
                    kv_cache_usage: None,
                },
                Point {
                    offset_ns: 10,
                    running: Some(8),
                    waiting: Some(5),
                    kv_cache_usage: None,
                },
            ],
            ..ServingReport::default()
        });
        section(&mut o, &r);
        assert!(o.contains("100 completed") && o.contains("25600 generated"), "{o}");
        assert!(o.contains("?a=&lt;b&gt;"), "escaped: {o}");
        assert!(o.contains("<polyline class=\"waiting\""), "{o}");
    }
}
