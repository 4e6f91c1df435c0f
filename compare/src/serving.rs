//! `compare` of the servers of one job (replicas, data-parallel engines,
//! processes that mark their own requests): each server's throughput and
//! latency side by side, by what a server is for, not by steps; the slowest
//! named by e2e p99 (docs/serving.md).

use gputrace_analysis::serving::{analyze_serving, is_serving_trace, marks_serving, ServingReport};
use gputrace_format::{EventKind, TraceFile};
use serde::Serialize;
use std::fmt::Write;

/// One server's figures (exact from its request marks where it has them).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServerRow {
    /// The server: its metrics endpoint, else the trace that marked its requests.
    pub server: String,
    /// Where its figures come from (`gputrace.request marks` or the server's metrics).
    pub source: &'static str,
    /// Requests completed per second.
    pub requests_per_s: f64,
    /// Failed / finished.
    pub error_rate: f64,
    /// Prompt tokens per second.
    pub prompt_tokens_per_s: f64,
    /// Generated tokens per second.
    pub generation_tokens_per_s: f64,
    /// TTFT p50 and p99, seconds.
    pub ttft_p50_s: Option<f64>,
    /// TTFT p99.
    pub ttft_p99_s: Option<f64>,
    /// End-to-end p50 and p99, seconds.
    pub e2e_p50_s: Option<f64>,
    /// End-to-end p99.
    pub e2e_p99_s: Option<f64>,
    /// ITL p50, seconds.
    pub itl_p50_s: Option<f64>,
}

/// The servers of one job side by side.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ServerComparison {
    /// One row per server.
    pub servers: Vec<ServerRow>,
    /// Generated tokens per second, all servers together.
    pub generation_tokens_per_s_total: f64,
    /// The server with the highest e2e p99 (index into `servers`; null with
    /// fewer than two servers that have one).
    pub slowest: Option<usize>,
    /// Its e2e p99 over the lowest server's (null as `slowest`).
    pub e2e_p99_spread: Option<f64>,
}

fn row(r: &ServingReport) -> ServerRow {
    let (q, t) = (r.best_requests(), r.best_tokens());
    let server = if r.url.is_empty() {
        r.gpu_traces.first().cloned().unwrap_or_default()
    } else {
        r.url.clone()
    };
    ServerRow {
        server,
        source: r.figures_source(),
        requests_per_s: q.completed_per_s,
        error_rate: q.error_rate,
        prompt_tokens_per_s: t.prompt_per_s,
        generation_tokens_per_s: t.generation_per_s,
        ttft_p50_s: r.best_latency_s("ttft", 50),
        ttft_p99_s: r.best_latency_s("ttft", 99),
        e2e_p50_s: r.best_latency_s("e2e", 50),
        e2e_p99_s: r.best_latency_s("e2e", 99),
        itl_p50_s: r.best_latency_s("itl", 50),
    }
}

/// The servers among `traces`: each launcher trace of scraped metrics (with
/// the GPU traces of its run), else each trace that marked requests; `None`
/// when the job served nothing.
pub fn compare_servers(traces: &[TraceFile]) -> Option<ServerComparison> {
    let (launchers, gpu): (Vec<&TraceFile>, Vec<&TraceFile>) = traces.iter().partition(|t| is_serving_trace(t));
    let reports: Vec<ServingReport> = if launchers.is_empty() {
        gpu.iter()
            .filter(|t| t.chunks().iter().any(|c| c.kind == EventKind::Request))
            .filter_map(|t| marks_serving(&[*t], None))
            .collect()
    } else {
        analyze_serving(&launchers, &gpu, None)
    };
    if reports.is_empty() {
        return None;
    }
    let servers: Vec<ServerRow> = reports.iter().map(row).collect();
    let with_p99: Vec<(usize, f64)> = servers.iter().enumerate().filter_map(|(i, s)| Some((i, s.e2e_p99_s?))).collect();
    let slowest = (with_p99.len() >= 2)
        .then(|| with_p99.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1)))
        .flatten();
    let lowest = with_p99.iter().map(|x| x.1).reduce(f64::min);
    Some(ServerComparison {
        generation_tokens_per_s_total: servers.iter().map(|s| s.generation_tokens_per_s).sum(),
        e2e_p99_spread: slowest.zip(lowest).and_then(|((_, hi), lo)| (lo > 0.0).then(|| hi / lo)),
        slowest: slowest.map(|x| x.0),
        servers,
    })
}

fn secs(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.2} ms", v * 1e3))
}

/// The servers section of `compare`'s text.
pub fn render_servers(c: &ServerComparison) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "\nServers ({}; by latency and tokens/s, not steps)", c.servers.len());
    let _ = writeln!(
        o,
        "{:>3}  {:>10} {:>8} {:>12} {:>11} {:>11} {:>11} {:>11} {:>11}  server (source)",
        "#", "req/s", "errors", "gen tok/s", "ttft p50", "ttft p99", "e2e p50", "e2e p99", "itl p50"
    );
    for (i, s) in c.servers.iter().enumerate() {
        let _ = writeln!(
            o,
            "{:>3}  {:>10.2} {:>7.2}% {:>12.1} {:>11} {:>11} {:>11} {:>11} {:>11}  {} ({})",
            i,
            s.requests_per_s,
            100.0 * s.error_rate,
            s.generation_tokens_per_s,
            secs(s.ttft_p50_s),
            secs(s.ttft_p99_s),
            secs(s.e2e_p50_s),
            secs(s.e2e_p99_s),
            secs(s.itl_p50_s),
            s.server,
            s.source
        );
    }
    let _ = writeln!(o, "generated tokens/s, all servers: {:.1}", c.generation_tokens_per_s_total);
    if let (Some(i), Some(x)) = (c.slowest, c.e2e_p99_spread) {
        let _ = writeln!(o, "slowest: #{i} {} (e2e p99 {:.2}x the fastest server's)", c.servers[i].server, x);
    }
    o
}
