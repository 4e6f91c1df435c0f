//! The serving section of `report`: an inference server's own metrics over
//! the traced window (from `gputrace run`'s scrapes, `serving.*` series),
//! its engine iterations and bubbles from the GPU timeline, and the GPU time
//! split into serving work, bubbles while requests waited (waste) and idle
//! with nothing to serve (headroom). See docs/serving.md.

mod iterations;
mod requests;
mod window;

pub use iterations::{iterations, Iteration, Phase, ITERATION_GAP_NS};
pub use requests::{
    in_server, request_marks, request_rows, trace_request_rows, ExactStat, RequestMarks, RequestRow, SERVER_METRICS,
    SOURCE as REQUEST_MARKS,
};
pub use window::{histogram_quantile, Bucket, GaugeStat, LatencyStat, Quantile};

use gputrace_format::metric::serving as names;
use gputrace_format::{Producer, TraceFile};
use serde::Serialize;
use std::collections::BTreeMap;

/// Points of the running/waiting/KV-cache timeline kept in the report.
const MAX_POINTS: usize = 240;

/// Whether a trace holds a server's scraped metrics (not GPU events).
pub fn is_serving_trace(t: &TraceFile) -> bool {
    t.header().producer == Producer::Launcher
}

/// Requests finished in the window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Requests {
    /// Finished normally.
    pub completed: u64,
    /// Ended otherwise (aborted, errors).
    pub failed: u64,
    /// `completed` per second of the window.
    pub completed_per_s: f64,
    /// `failed` per second.
    pub failed_per_s: f64,
    /// failed / (completed + failed); 0 without requests.
    pub error_rate: f64,
}

/// Tokens in the window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Tokens {
    /// Prompt (input) tokens.
    pub prompt: u64,
    /// Generated (output) tokens.
    pub generation: u64,
    /// Prompt tokens per second.
    pub prompt_per_s: f64,
    /// Generated tokens per second.
    pub generation_per_s: f64,
}

/// One scrape's gauges.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Point {
    /// Time since the window's start, ns.
    pub offset_ns: u64,
    /// Requests running.
    pub running: Option<u64>,
    /// Requests waiting.
    pub waiting: Option<u64>,
    /// KV-cache usage, 0..1.
    pub kv_cache_usage: Option<f64>,
}

/// A distribution of durations, ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Distribution {
    /// Median.
    pub p50_ns: u64,
    /// 95th percentile (nearest rank).
    pub p95_ns: u64,
    /// 99th percentile (nearest rank).
    pub p99_ns: u64,
    /// Largest.
    pub max_ns: u64,
    /// Sum.
    pub total_ns: u64,
}

fn distribution(mut v: Vec<u64>) -> Distribution {
    if v.is_empty() {
        return Distribution::default();
    }
    v.sort_unstable();
    let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
    Distribution {
        p50_ns: rank(0.50),
        p95_ns: rank(0.95),
        p99_ns: rank(0.99),
        max_ns: *v.last().unwrap_or(&0),
        total_ns: v.iter().sum(),
    }
}

/// Engine iterations in the window, from the GPU timeline.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct IterationStats {
    /// Iterations (over every device of the server's GPU traces).
    pub count: u64,
    /// Per second of the window, per device.
    pub per_s: f64,
    /// Decode steps (ran a CUDA graph, or an NVTX range said so).
    pub decode: u64,
    /// Prefills (NVTX said so).
    pub prefill: u64,
    /// Eager iterations the timeline cannot place.
    pub unknown: u64,
    /// GPU busy time per iteration.
    pub busy: Distribution,
    /// Idle time before each iteration (all but each device's first).
    pub bubble: Distribution,
    /// An idle gap at least this long ends an iteration.
    pub gap_threshold_ns: u64,
}

/// The GPU time of the window, split three ways (`serving_work_ns +
/// waste_bubbles_ns + headroom_idle_ns = window_gpu_ns` exactly).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct GpuTime {
    /// GPUs that ran something in the window.
    pub devices: u64,
    /// The window times the devices.
    pub window_gpu_ns: u64,
    /// Kernels, copies or memsets ran.
    pub serving_work_ns: u64,
    /// Idle while requests were running or waiting (waste: the GPU waited for the CPU).
    pub waste_bubbles_ns: u64,
    /// Idle with no request running or waiting (headroom, not waste).
    pub headroom_idle_ns: u64,
}

/// Price per million tokens at `--gpu-hour-cost` (the window's GPU-hours).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct ServingCost {
    /// The price given, US dollars per GPU-hour.
    pub usd_per_gpu_hour: f64,
    /// GPU-hours of the window (devices × window).
    pub gpu_hours: f64,
    /// Dollars per million output (generated) tokens; null without output tokens.
    pub usd_per_m_output_tokens: Option<f64>,
    /// Dollars per million input (prompt) tokens; null without prompt tokens.
    pub usd_per_m_input_tokens: Option<f64>,
}

/// The serving section of one server (one launcher trace).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ServingReport {
    /// The launcher's trace file.
    pub file: String,
    /// `vllm` or `sglang`.
    pub engine: String,
    /// The endpoint scraped.
    pub url: String,
    /// First scrape, realtime ns.
    pub window_start_realtime_ns: u64,
    /// First to last scrape, ns.
    pub window_ns: u64,
    /// Scrapes in the window.
    pub scrapes: u64,
    /// Scrapes that failed between two successes (gaps in the series).
    pub scrapes_failed: u64,
    /// Counter drops read as server restarts (each restarts the count from 0).
    pub counter_resets: u64,
    /// Requests finished.
    pub requests: Requests,
    /// Tokens processed.
    pub tokens: Tokens,
    /// TTFT, ITL, end-to-end and queue time over the window.
    pub latency: Vec<LatencyStat>,
    /// Requests running.
    pub running: Option<GaugeStat>,
    /// Requests waiting.
    pub waiting: Option<GaugeStat>,
    /// KV-cache usage, 0..1.
    pub kv_cache_usage: Option<GaugeStat>,
    /// The gauges at each scrape (at most 240 points, evenly thinned).
    pub timeline: Vec<Point>,
    /// The GPU traces of the same `gputrace run`.
    pub gpu_traces: Vec<String>,
    /// Iterations and bubbles (null without a GPU trace).
    pub iterations: Option<IterationStats>,
    /// The GPU time split (null without a GPU trace).
    pub gpu_time: Option<GpuTime>,
    /// Cost per million tokens (null without a price or a GPU trace; from the
    /// request marks' tokens where there are marks).
    pub cost: Option<ServingCost>,
    /// Exact per-request numbers from the server's own `gputrace.request`
    /// marks in the GPU traces (absent without marks): preferred over the
    /// histograms' estimates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_marks: Option<RequestMarks>,
}

impl ServingReport {
    /// The latency statistic named `name` (`ttft`, `itl`, `e2e`, `queue`).
    pub fn latency(&self, name: &str) -> Option<&LatencyStat> {
        self.latency.iter().find(|l| l.name == name)
    }
}

/// The serving reports of `serving` (launcher traces), each with the GPU traces of
/// `gpu` from the same `gputrace run` (or all of them when the run id is unknown).
pub fn analyze_serving(serving: &[&TraceFile], gpu: &[&TraceFile], gpu_hour_cost: Option<f64>) -> Vec<ServingReport> {
    serving
        .iter()
        .filter_map(|s| {
            let run = s.header().extra.get("gputrace.run_id");
            let mine: Vec<&TraceFile> = gpu
                .iter()
                .copied()
                .filter(|g| run.is_none() || g.header().extra.get("gputrace.run_id") == run)
                .collect();
            one(s, &mine, gpu_hour_cost)
        })
        .collect()
}

/// A serving section from GPU timelines alone (no scraped metrics: e.g. a
/// PyTorch profiler trace of a serving loop, `report --serving`): iterations
/// and bubbles over the traces' GPU activity; `None` without GPU work.
pub fn timeline_serving(gpu: &[&TraceFile]) -> Option<ServingReport> {
    let all: Vec<Iteration> = gpu.iter().flat_map(|g| iterations(g)).collect();
    let start = all.iter().map(|i| i.start).min()?;
    let end = all.iter().map(|i| i.end).max()?;
    let mut r = ServingReport {
        window_start_realtime_ns: start,
        window_ns: end - start,
        gpu_traces: gpu.iter().map(|g| g.path().display().to_string()).collect(),
        ..ServingReport::default()
    };
    gpu_side(&mut r, gpu, (start, end), None, None);
    // Without the server's gauges no idle time can be called waste or headroom.
    r.gpu_time = None;
    Some(r)
}

/// A serving section from the request marks of `gpu` alone (a server of
/// one's own without a metrics endpoint): the marks' numbers, and the GPU
/// side over the marks' window with a request in the server (arrived, not
/// ended) making idle time waste; `None` without marks.
pub fn marks_serving(gpu: &[&TraceFile], gpu_hour_cost: Option<f64>) -> Option<ServingReport> {
    let rows = request_rows(gpu);
    let marks = request_marks(&rows)?;
    let (start, end) = (marks.window_start_realtime_ns, marks.window_start_realtime_ns + marks.window_ns);
    let mut r = ServingReport {
        window_start_realtime_ns: start,
        window_ns: marks.window_ns,
        requests: marks.requests,
        tokens: marks.tokens,
        gpu_traces: gpu.iter().map(|g| g.path().display().to_string()).collect(),
        ..ServingReport::default()
    };
    gpu_side(&mut r, gpu, (start, end), Some(&in_server(&rows)), None);
    r.request_marks = Some(marks);
    r.cost = cost(&r, gpu_hour_cost);
    Some(r)
}

/// Cost per million tokens of `r`'s window, by the marks' tokens where there are marks.
fn cost(r: &ServingReport, gpu_hour_cost: Option<f64>) -> Option<ServingCost> {
    let (usd, g) = (gpu_hour_cost?, r.gpu_time.as_ref()?);
    let tokens = r.request_marks.as_ref().map_or(r.tokens, |m| m.tokens);
    let gpu_hours = g.devices as f64 * (r.window_ns as f64 / 1e9) / 3600.0;
    let per_m = |n: u64| (n > 0).then(|| usd * gpu_hours / n as f64 * 1e6);
    Some(ServingCost {
        usd_per_gpu_hour: usd,
        gpu_hours,
        usd_per_m_output_tokens: per_m(tokens.generation),
        usd_per_m_input_tokens: per_m(tokens.prompt),
    })
}

fn one(file: &TraceFile, gpu: &[&TraceFile], gpu_hour_cost: Option<f64>) -> Option<ServingReport> {
    let series = file.counter_series().ok()?;
    let shift = file.header().realtime_shift();
    let get = |name: &str| series.iter().find(|s| s.metric == name).map(|s| window::shifted(&s.samples, shift));
    // Every scrape writes the failure count: its samples are the scrapes.
    let scrapes = get(names::SCRAPES_FAILED)?;
    let (start, end) = (scrapes.first()?.0, scrapes.last()?.0);
    let window_ns = end - start;
    let secs = window_ns as f64 / 1e9;
    let per_s = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
    let mut resets = 0;
    let mut inc = |name: &str| {
        get(name).map_or(0, |s| {
            let (n, r) = window::increase(&s);
            resets += r;
            n
        })
    };
    let (completed, failed) = (inc(names::REQUESTS_COMPLETED), inc(names::REQUESTS_FAILED));
    let (prompt, generation) = (inc(names::PROMPT_TOKENS), inc(names::GENERATION_TOKENS));
    let latency = window::latencies(&series, shift, &mut resets);
    let running = get(names::REQUESTS_RUNNING);
    let waiting = get(names::REQUESTS_WAITING);
    let kv = get(names::KV_CACHE_USAGE_BP);
    let h = file.header();
    let mut r = ServingReport {
        file: file.path().display().to_string(),
        engine: h.extra.get("serving.engine").cloned().unwrap_or_default(),
        url: h.extra.get("serving.url").cloned().unwrap_or_default(),
        window_start_realtime_ns: start,
        window_ns,
        scrapes: scrapes.len() as u64,
        scrapes_failed: scrapes.last().map_or(0, |s| s.1),
        counter_resets: 0,
        requests: Requests {
            completed,
            failed,
            completed_per_s: per_s(completed),
            failed_per_s: per_s(failed),
            error_rate: if completed + failed > 0 {
                failed as f64 / (completed + failed) as f64
            } else {
                0.0
            },
        },
        tokens: Tokens {
            prompt,
            generation,
            prompt_per_s: per_s(prompt),
            generation_per_s: per_s(generation),
        },
        latency,
        running: running.as_deref().and_then(|s| window::gauge(s, 1.0)),
        waiting: waiting.as_deref().and_then(|s| window::gauge(s, 1.0)),
        kv_cache_usage: kv.as_deref().and_then(|s| window::gauge(s, 1e-4)),
        timeline: timeline(&scrapes, running.as_deref(), waiting.as_deref(), kv.as_deref()),
        gpu_traces: gpu.iter().map(|g| g.path().display().to_string()).collect(),
        ..ServingReport::default()
    };
    r.counter_resets = resets;
    if !gpu.is_empty() {
        gpu_side(&mut r, gpu, (start, end), running.as_deref(), waiting.as_deref());
    }
    r.request_marks = request_marks(&request_rows(gpu));
    r.cost = cost(&r, gpu_hour_cost);
    Some(r)
}

fn timeline(
    scrapes: &[(u64, u64)],
    running: Option<&[(u64, u64)]>,
    waiting: Option<&[(u64, u64)]>,
    kv: Option<&[(u64, u64)]>,
) -> Vec<Point> {
    let start = scrapes.first().map_or(0, |s| s.0);
    let at = |s: Option<&[(u64, u64)]>, t: u64| s.and_then(|s| s.iter().find(|x| x.0 == t)).map(|x| x.1);
    let step = scrapes.len().div_ceil(MAX_POINTS).max(1);
    scrapes
        .iter()
        .step_by(step)
        .map(|&(t, _)| Point {
            offset_ns: t - start,
            running: at(running, t),
            waiting: at(waiting, t),
            kv_cache_usage: at(kv, t).map(|v| v as f64 / 1e4),
        })
        .collect()
}

/// Iterations, bubbles and the GPU time split, over the window `w`.
fn gpu_side(r: &mut ServingReport, gpu: &[&TraceFile], w: (u64, u64), running: Option<&[(u64, u64)]>, waiting: Option<&[(u64, u64)]>) {
    // Per (trace, device): two processes may both call their GPU device 0.
    let mut its: Vec<(usize, Iteration)> = Vec::new();
    for (trace, g) in gpu.iter().enumerate() {
        // Iterations overlapping the window, clipped to it.
        its.extend(iterations(g).into_iter().filter(|i| i.end > w.0 && i.start < w.1).map(|mut i| {
            i.start = i.start.max(w.0);
            i.end = i.end.min(w.1);
            i.busy = i.busy.min(i.end - i.start);
            (trace, i)
        }));
    }
    // Requests in the system (running + waiting) as a step function of the scrapes.
    let mut in_system: BTreeMap<u64, u64> = BTreeMap::new();
    for s in [running, waiting].into_iter().flatten() {
        for &(t, v) in s {
            *in_system.entry(t).or_insert(0) += v;
        }
    }
    let mut split = GpuTime::default();
    let mut devices: BTreeMap<(usize, u32), Vec<&Iteration>> = BTreeMap::new();
    for (trace, it) in &its {
        devices.entry((*trace, it.device)).or_default().push(it);
    }
    for list in devices.values() {
        split.devices += 1;
        split.window_gpu_ns += w.1 - w.0;
        // Idle stretches: before the first, between, after the last iteration, and inside
        // iterations (busy < end - start) counted as work-adjacent idle at the iteration.
        let mut idle: Vec<(u64, u64)> = Vec::new();
        let mut cursor = w.0;
        for it in list {
            idle.push((cursor, it.start));
            split.serving_work_ns += it.busy;
            // Gaps inside an iteration are short launch gaps: idle at that time.
            let inner = (it.end - it.start) - it.busy;
            idle.push((it.start, it.start + inner));
            cursor = it.end;
        }
        idle.push((cursor, w.1));
        for (a, b) in idle.into_iter().filter(|(a, b)| b > a) {
            let waited = overlap_with_requests(&in_system, a, b);
            split.waste_bubbles_ns += waited;
            split.headroom_idle_ns += (b - a) - waited;
        }
    }
    if split.devices == 0 {
        return;
    }
    let secs = (w.1 - w.0) as f64 / 1e9;
    let count = its.len() as u64;
    r.iterations = Some(IterationStats {
        count,
        per_s: if secs > 0.0 {
            count as f64 / secs / split.devices as f64
        } else {
            0.0
        },
        decode: its.iter().filter(|i| i.1.phase == Phase::Decode).count() as u64,
        prefill: its.iter().filter(|i| i.1.phase == Phase::Prefill).count() as u64,
        unknown: its.iter().filter(|i| i.1.phase == Phase::Unknown).count() as u64,
        busy: distribution(its.iter().map(|i| i.1.busy).collect()),
        bubble: distribution(devices.values().flat_map(|l| l.iter().skip(1).map(|i| i.bubble_before)).collect()),
        gap_threshold_ns: ITERATION_GAP_NS,
    });
    r.gpu_time = Some(split);
}

/// The part of `[a, b)` during which the last scrape at or before each instant
/// saw a request running or waiting (before the first scrape: the first scrape's value).
fn overlap_with_requests(in_system: &BTreeMap<u64, u64>, a: u64, b: u64) -> u64 {
    let mut total = 0;
    let mut t = a;
    let mut value = in_system
        .range(..=a)
        .next_back()
        .or_else(|| in_system.iter().next())
        .map_or(0, |(_, v)| *v);
    for (&at, &v) in in_system.range(a + 1..b) {
        if value > 0 {
            total += at - t;
        }
        t = at;
        value = v;
    }
    if value > 0 {
        total += b - t;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_in_the_system_hold_from_scrape_to_scrape() {
        let m: BTreeMap<u64, u64> = [(100, 0), (200, 3), (300, 0)].into_iter().collect();
        assert_eq!(overlap_with_requests(&m, 150, 250), 50);
        assert_eq!(overlap_with_requests(&m, 0, 400), 100);
        assert_eq!(overlap_with_requests(&m, 210, 290), 80);
        assert_eq!(overlap_with_requests(&m, 300, 400), 0);
        // Before the first scrape: the first scrape's value.
        let m: BTreeMap<u64, u64> = [(100, 2)].into_iter().collect();
        assert_eq!(overlap_with_requests(&m, 0, 50), 50);
    }
}
