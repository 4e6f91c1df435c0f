//! The page's serving section (docs/serving.md): one block per server, self-contained
//! (its own table and inline SVG; nothing else on the page depends on it).

use crate::esc_text;
use crate::num::{Fmt, Num};
use gputrace_analysis::serving::{ExactStat, Point, Quantile, RequestMarks, ServingReport};
use gputrace_analysis::Report;
use maud::{html, Markup};

fn secs(q: Option<Quantile>) -> Markup {
    html! {
        @match q {
            None => "–",
            Some(q) => {
                @if q.above_highest_bucket { ">" }
                (format!("{:.4} s", q.seconds))
            }
        }
    }
}

/// Running and waiting requests over the window as an inline SVG (two lines).
fn gauges_svg(points: &[Point]) -> Markup {
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
    let line = |pick: fn(&Point) -> Option<u64>| {
        let pts: Vec<String> = points
            .iter()
            .filter_map(|p| pick(p).map(|v| format!("{:.1},{:.1}", p.offset_ns as f64 / end * W, H - 1.0 - v as f64 / max * (H - 2.0))))
            .collect();
        pts.join(" ")
    };
    html! {
        svg.serving-gauges viewBox="0 0 240 40" preserveAspectRatio="none" role="img"
            aria-label="running and waiting requests over time" style="width:240px;height:40px" {
            polyline.running stroke="#2b7bb9" fill="none" points=(line(|p| p.running)) {}
            polyline.waiting stroke="#d9534f" fill="none" points=(line(|p| p.waiting)) {}
        }
    }
}

/// One row of the marks' table: an exact statistic, its cells keyed to `key`
/// (`serving.S.request_marks.latency.L` or `....decode_tokens_per_s`).
fn exact_row(key: &str, label: &str, s: &ExactStat, seconds: bool) -> Markup {
    let cell = |field: &str, v: f64| {
        let k = format!("{key}.{field}");
        if seconds {
            Num::secs(k, Some(v))
        } else {
            Num::f(k, Some(v), Fmt::Num)
        }
    };
    html! {
        tr {
            td { (esc_text(label)) }
            (Num::u(format!("{key}.count"), s.count, Fmt::Num).td())
            (cell("mean", s.mean).td())
            (cell("p50", s.p50).td())
            (cell("p95", s.p95).td())
            (cell("p99", s.p99).td())
            (cell("min", s.min).td())
            (cell("max", s.max).td())
        }
    }
}

/// The exact per-request numbers of the `gputrace.request` marks of server `si`.
fn marks(si: usize, m: &RequestMarks) -> Markup {
    let k = format!("serving.{si}.request_marks");
    let n = |field: &str, v: u64| Num::u(format!("{k}.{field}"), v, Fmt::Num).span();
    let rate = |field: &str, v: f64| Num::f(format!("{k}.{field}"), Some(v), Fmt::Num).span();
    html! {
        div.request-marks {
            p {
                b { "Requests, exact" } " (source: " (esc_text(m.source)) ", over "
                (Num::u(format!("{k}.window_ns"), m.window_ns, Fmt::Ns).span()) " from the first mark to the last): "
                (n("requests.completed", m.requests.completed)) " completed (" (rate("requests.completed_per_s", m.requests.completed_per_s)) "/s), "
                (n("requests.failed", m.requests.failed)) " failed (" (rate("requests.failed_per_s", m.requests.failed_per_s)) "/s), "
                (n("unfinished", m.unfinished)) " unfinished · tokens: "
                (n("tokens.prompt", m.tokens.prompt)) " prompt (" (rate("tokens.prompt_per_s", m.tokens.prompt_per_s)) "/s), "
                (n("tokens.generation", m.tokens.generation)) " generated (" (rate("tokens.generation_per_s", m.tokens.generation_per_s)) "/s)"
            }
            div.scroll { table {
                thead { tr {
                    th { "per request" } th { "count" } th { "mean" } th { "p50" } th { "p95" } th { "p99" } th { "min" } th { "max" }
                } }
                tbody {
                    @for (li, l) in m.latency.iter().enumerate() {
                        (exact_row(&format!("{k}.latency.{li}"), l.name, l, true))
                    }
                    @if let Some(d) = &m.decode_tokens_per_s {
                        (exact_row(&format!("{k}.decode_tokens_per_s"), "decode tok/s", d, false))
                    }
                }
            } }
            @if m.latency.iter().any(|l| l.name == "itl") {
                p.mute { "itl: each request's mean ((finish − first token) / (generated − 1)); quantiles are nearest rank over requests." }
            }
        }
    }
}

fn server(si: usize, r: &ServingReport) -> Markup {
    html! {
        section.serving {
            h2 {
                "Serving: " (esc_text(if r.engine.is_empty() { "timeline" } else { &r.engine }))
                " at " (esc_text(if r.url.is_empty() { "(no server metrics)" } else { &r.url }))
            }
            p.mute {
                "window " (format!("{:.3}", r.window_ns as f64 / 1e9)) " s, " (r.scrapes) " scrapes"
                @if r.scrapes_failed > 0 { ", " b { (r.scrapes_failed) " failed" } }
            }
            @if let Some(m) = &r.request_marks {
                (marks(si, m))
                @if r.scrapes > 0 {
                    p.mute { "Server metrics (the histograms' estimates; the marks above are exact):" }
                }
            }
            @if r.scrapes > 0 {
                p {
                    "requests: " (r.requests.completed) " completed (" (format!("{:.2}", r.requests.completed_per_s)) "/s), "
                    (r.requests.failed) " failed (error rate " (format!("{:.2}", 100.0 * r.requests.error_rate)) "%) · tokens: "
                    (r.tokens.prompt) " prompt (" (format!("{:.1}", r.tokens.prompt_per_s)) "/s input), "
                    (r.tokens.generation) " generated (" (format!("{:.1}", r.tokens.generation_per_s)) "/s output)"
                }
                div.scroll { table {
                    thead { tr { th {} th { "count" } th { "p50" } th { "p95" } th { "p99" } th { "p99 bucket" } } }
                    tbody {
                        @for l in &r.latency {
                            tr {
                                td { (esc_text(l.name)) }
                                td { (l.count) }
                                td { (secs(l.p50)) }
                                td { (secs(l.p95)) }
                                td { (secs(l.p99)) }
                                td {
                                    @match l.p99 {
                                        Some(q) => { (q.bucket_lower) "–" (q.bucket_upper) " s" }
                                        None => "–",
                                    }
                                }
                            }
                        }
                    }
                } }
                @if !r.timeline.is_empty() {
                    p {
                        (gauges_svg(&r.timeline)) " running (blue) and waiting (red) requests over the window; KV-cache up to "
                        @match r.kv_cache_usage {
                            Some(g) => (format!("{:.1}%", 100.0 * g.max)),
                            None => "–",
                        }
                    }
                }
            }
            @if let Some(i) = &r.iterations {
                p {
                    "iterations: " (i.count) " (" (format!("{:.1}", i.per_s)) "/s per GPU); bubble before an iteration p50 "
                    (format!("{:.2}", i.bubble.p50_ns as f64 / 1e6)) " ms, p95 "
                    (format!("{:.2}", i.bubble.p95_ns as f64 / 1e6)) " ms, max "
                    (format!("{:.2}", i.bubble.max_ns as f64 / 1e6)) " ms"
                }
            }
            @if let Some(g) = &r.gpu_time {
                @let pct = |v: u64| format!("{:.1}", 100.0 * v as f64 / g.window_gpu_ns.max(1) as f64);
                p {
                    "GPU time: serving work " (pct(g.serving_work_ns)) "%, bubbles while requests waited (waste) "
                    (pct(g.waste_bubbles_ns)) "%, idle with nothing to serve (headroom) " (pct(g.headroom_idle_ns)) "%"
                }
            }
            @if let Some(c) = &r.cost {
                @let usd = |v: Option<f64>| v.map_or("–".into(), |v| format!("${v:.4}"));
                p {
                    "cost: " (usd(c.usd_per_m_output_tokens)) " per million output tokens, "
                    (usd(c.usd_per_m_input_tokens)) " per million input tokens"
                }
            }
        }
    }
}

/// The serving section of every server in the report (nothing for a training job).
pub(crate) fn section(r: &Report) -> Markup {
    html! {
        @for (si, s) in r.serving.iter().enumerate() {
            (server(si, s))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputrace_analysis::serving::{Requests, Tokens};

    #[test]
    fn a_server_gets_its_section_and_a_training_job_none() {
        let mut r = Report::from_ranks(Vec::new(), &gputrace_analysis::Options::default());
        assert!(section(&r).into_string().is_empty());
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
        let o = section(&r).into_string();
        assert!(o.contains("100 completed") && o.contains("25600 generated"), "{o}");
        assert!(o.contains("?a=&lt;b&gt;"), "escaped: {o}");
        assert!(o.contains("<polyline class=\"waiting\""), "{o}");
    }
}
