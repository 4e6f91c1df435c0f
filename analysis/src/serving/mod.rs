//! The serving section of `report`: an inference server's own metrics over
//! the traced window (from `gputrace run`'s scrapes, `serving.*` series),
//! its engine iterations and bubbles from the GPU timeline, and the GPU time
//! split into serving work, bubbles while requests waited (waste) and idle
//! with nothing to serve (headroom). See docs/serving.md.

mod iterations;
mod render;
mod window;

pub use iterations::{iterations, Iteration, Phase, ITERATION_GAP_NS};
pub use render::render_serving;
pub use window::{histogram_quantile, Bucket, GaugeStat, LatencyStat, Quantile};

use crate::report::{Finding, Severity};
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
    /// Cost per million tokens (null without a price or a GPU trace).
    pub cost: Option<ServingCost>,
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
    if let (Some(usd), Some(g)) = (gpu_hour_cost, &r.gpu_time) {
        let gpu_hours = g.devices as f64 * secs / 3600.0;
        let per_m = |n: u64| (n > 0).then(|| usd * gpu_hours / n as f64 * 1e6);
        r.cost = Some(ServingCost {
            usd_per_gpu_hour: usd,
            gpu_hours,
            usd_per_m_output_tokens: per_m(generation),
            usd_per_m_input_tokens: per_m(prompt),
        });
    }
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

/// Findings of the seed's serving rows (docs/serving.md).
pub fn serving_findings(r: &ServingReport) -> Vec<Finding> {
    let mut out = Vec::new();
    let mk = |rule: &'static str, severity, title: String, evidence: String, next: &str, values: &[(&str, f64)]| Finding {
        rule,
        severity,
        title,
        evidence,
        next_step: next.to_string(),
        values: values.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
    };
    let waiting = r.waiting.unwrap_or_default();
    let running = r.running.unwrap_or_default();
    let e2e = r.latency("e2e").and_then(|l| Some((l.p50?.seconds, l.p99?.seconds)));
    // Saturation: requests queue and the tail is far above the median.
    if let Some((p50, p99)) = e2e {
        if waiting.mean >= 1.0 && p50 > 0.0 && p99 >= 3.0 * p50 {
            out.push(mk(
                "serving-saturated",
                Severity::High,
                "Saturated: throughput holds but the tail latency grows (requests queue)".into(),
                format!(
                    "{:.1} requests waiting on average (max {:.0}); e2e p99 {:.3} s is {:.1}x the p50 {:.3} s",
                    waiting.mean,
                    waiting.max,
                    p99,
                    p99 / p50,
                    p50
                ),
                "Cap the batch (max-num-seqs / max-running-requests) against the latency target, add replicas, \
                 or shed load; watch queue depth and P99 together.",
                &[("waiting_mean", waiting.mean), ("e2e_p50_s", p50), ("e2e_p99_s", p99)],
            ));
        }
    }
    // KV-cache limit: usage near full while requests wait.
    if let Some(kv) = r.kv_cache_usage {
        if kv.max >= 0.9 && waiting.max >= 1.0 {
            out.push(mk(
                "serving-kv-cache-limit",
                Severity::High,
                "The KV cache limits the batch: usage near full while requests wait".into(),
                format!(
                    "KV-cache usage up to {:.0}% (mean {:.0}%) with up to {:.0} requests waiting",
                    100.0 * kv.max,
                    100.0 * kv.mean,
                    waiting.max
                ),
                "Give the KV cache more memory (gpu-memory-utilization), quantize it (fp8 KV cache), shorten \
                 max-model-len, or enable prefix caching; more replicas if memory is already spent.",
                &[("kv_cache_usage_max", kv.max), ("waiting_max", waiting.max)],
            ));
        }
    }
    // Low concurrency: few requests in flight, nothing waiting, GPU mostly idle.
    if let Some(g) = &r.gpu_time {
        let headroom = g.headroom_idle_ns as f64 / g.window_gpu_ns.max(1) as f64;
        if running.mean < 4.0 && waiting.max < 1.0 && headroom >= 0.3 {
            out.push(mk(
                "serving-low-concurrency",
                Severity::Medium,
                "Low concurrency: the GPU waits for requests, not the other way round".into(),
                format!(
                    "{:.1} requests running on average, none waiting; {:.0}% of GPU time idle with nothing to serve",
                    running.mean,
                    100.0 * headroom
                ),
                "This is headroom, not waste, if it is kept on purpose; otherwise consolidate models or replicas, \
                 batch offline work into the gaps, or autoscale down.",
                &[("running_mean", running.mean), ("headroom_share", headroom)],
            ));
        }
        let waste = g.waste_bubbles_ns as f64 / g.window_gpu_ns.max(1) as f64;
        if waste >= 0.2 {
            let bubble = r.iterations.as_ref().map(|i| i.bubble).unwrap_or_default();
            out.push(mk(
                "serving-cpu-bubbles",
                Severity::High,
                "CPU scheduling bubbles: the GPU idles between iterations while requests wait".into(),
                format!(
                    "{:.0}% of GPU time idle while requests were running or waiting; bubble before an iteration: \
                     p50 {:.2} ms, p95 {:.2} ms",
                    100.0 * waste,
                    bubble.p50_ns as f64 / 1e6,
                    bubble.p95_ns as f64 / 1e6
                ),
                "Overlap scheduling with the forward pass (vLLM async scheduling, SGLang overlap scheduler), use \
                 CUDA graphs for decode, and profile the engine's CPU between steps (sampling, detokenization).",
                &[("waste_share", waste), ("bubble_p50_ns", bubble.p50_ns as f64)],
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(min: f64, mean: f64, max: f64) -> Option<GaugeStat> {
        Some(GaugeStat { min, mean, max, last: min })
    }

    fn quantile(seconds: f64) -> Option<Quantile> {
        Some(Quantile {
            q: 0.5,
            seconds,
            bucket_lower: 0.0,
            bucket_upper: seconds,
            above_highest_bucket: false,
        })
    }

    fn rules(r: &ServingReport) -> Vec<&'static str> {
        serving_findings(r).into_iter().map(|f| f.rule).collect()
    }

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

    #[test]
    fn findings_follow_the_seed_rows() {
        let e2e = |p50, p99| LatencyStat {
            name: "e2e",
            count: 100,
            mean_s: None,
            p50: quantile(p50),
            p95: None,
            p99: quantile(p99),
            buckets: Vec::new(),
        };
        // Saturated: requests queue and p99 is far above p50.
        let mut r = ServingReport {
            waiting: stat(0.0, 6.0, 12.0),
            running: stat(16.0, 32.0, 32.0),
            latency: vec![e2e(1.0, 5.0)],
            ..ServingReport::default()
        };
        assert_eq!(rules(&r), ["serving-saturated"]);
        r.latency = vec![e2e(1.0, 2.0)];
        assert!(rules(&r).is_empty(), "a tight tail is not saturation");
        // KV-cache limit: near full while requests wait.
        r.kv_cache_usage = stat(0.5, 0.8, 0.95);
        assert_eq!(rules(&r), ["serving-kv-cache-limit"]);
        r.waiting = stat(0.0, 0.0, 0.0);
        assert!(rules(&r).is_empty(), "a full cache with nobody waiting is not a limit");
        // Low concurrency: few running, none waiting, mostly headroom.
        let split = |work, waste, headroom| GpuTime {
            devices: 1,
            window_gpu_ns: work + waste + headroom,
            serving_work_ns: work,
            waste_bubbles_ns: waste,
            headroom_idle_ns: headroom,
        };
        let r = ServingReport {
            running: stat(0.0, 1.5, 3.0),
            waiting: stat(0.0, 0.0, 0.0),
            gpu_time: Some(split(30, 10, 60)),
            ..ServingReport::default()
        };
        assert_eq!(rules(&r), ["serving-low-concurrency"]);
        // CPU scheduling bubbles: idle while requests were in the system.
        let r = ServingReport {
            running: stat(8.0, 8.0, 8.0),
            waiting: stat(0.0, 2.0, 4.0),
            gpu_time: Some(split(50, 40, 10)),
            ..ServingReport::default()
        };
        assert_eq!(rules(&r), ["serving-cpu-bubbles"]);
    }
}
