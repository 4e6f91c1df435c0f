//! The serving rows of the diagnosis table (docs/serving.md) as findings, from a serving section.

use crate::report::{Finding, Severity};
use crate::rule::{FindingRule, Value};
use crate::serving::ServingReport;

/// The serving rows of the diagnosis table (docs/serving.md) as findings.
pub(crate) fn serving_findings(r: &ServingReport) -> Vec<Finding> {
    let mut out = Vec::new();
    let mk = |rule: FindingRule, severity, title: String, evidence: String, next: &str, values: &[(Value, f64)]| Finding {
        rule,
        severity,
        title,
        evidence,
        next_step: next.to_string(),
        values: values.iter().copied().collect(),
    };
    let waiting = r.waiting.unwrap_or_default();
    let running = r.running.unwrap_or_default();
    let e2e = r.latency("e2e").and_then(|l| Some((l.p50?.seconds, l.p99?.seconds)));
    // Saturation: requests queue and the tail is far above the median.
    if let Some((p50, p99)) = e2e {
        if waiting.mean >= 1.0 && p50 > 0.0 && p99 >= 3.0 * p50 {
            out.push(mk(
                FindingRule::ServingSaturated,
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
                &[(Value::WaitingMean, waiting.mean), (Value::E2eP50S, p50), (Value::E2eP99S, p99)],
            ));
        }
    }
    // KV-cache limit: usage near full while requests wait.
    if let Some(kv) = r.kv_cache_usage {
        if kv.max >= 0.9 && waiting.max >= 1.0 {
            out.push(mk(
                FindingRule::ServingKvCacheLimit,
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
                &[(Value::KvCacheUsageMax, kv.max), (Value::WaitingMax, waiting.max)],
            ));
        }
    }
    // Low concurrency: few requests in flight, nothing waiting, GPU mostly idle.
    if let Some(g) = &r.gpu_time {
        let headroom = g.headroom_idle_ns as f64 / g.window_gpu_ns.max(1) as f64;
        // Only with the server's running gauge (request marks alone do not say it).
        if r.running.is_some() && running.mean < 4.0 && waiting.max < 1.0 && headroom >= 0.3 {
            out.push(mk(
                FindingRule::ServingLowConcurrency,
                Severity::Medium,
                "Low concurrency: the GPU waits for requests, not the other way round".into(),
                format!(
                    "{:.1} requests running on average, none waiting; {:.0}% of GPU time idle with nothing to serve",
                    running.mean,
                    100.0 * headroom
                ),
                "This is headroom, not waste, if it is kept on purpose; otherwise consolidate models or replicas, \
                 batch offline work into the gaps, or autoscale down.",
                &[(Value::RunningMean, running.mean), (Value::HeadroomShare, headroom)],
            ));
        }
        let waste = g.waste_bubbles_ns as f64 / g.window_gpu_ns.max(1) as f64;
        if waste >= 0.2 {
            let bubble = r.iterations.as_ref().map(|i| i.bubble).unwrap_or_default();
            out.push(mk(
                FindingRule::ServingCpuBubbles,
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
                &[(Value::WasteShare, waste), (Value::BubbleP50Ns, bubble.p50_ns as f64)],
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serving::{GaugeStat, GpuTime, LatencyStat, Quantile};

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

    fn rules(r: &ServingReport) -> Vec<FindingRule> {
        serving_findings(r).into_iter().map(|f| f.rule).collect()
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
        assert_eq!(rules(&r), [FindingRule::ServingSaturated]);
        r.latency = vec![e2e(1.0, 2.0)];
        assert!(rules(&r).is_empty(), "a tight tail is not saturation");
        // KV-cache limit: near full while requests wait.
        r.kv_cache_usage = stat(0.5, 0.8, 0.95);
        assert_eq!(rules(&r), [FindingRule::ServingKvCacheLimit]);
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
        assert_eq!(rules(&r), [FindingRule::ServingLowConcurrency]);
        // CPU scheduling bubbles: idle while requests were in the system.
        let r = ServingReport {
            running: stat(8.0, 8.0, 8.0),
            waiting: stat(0.0, 2.0, 4.0),
            gpu_time: Some(split(50, 40, 10)),
            ..ServingReport::default()
        };
        assert_eq!(rules(&r), [FindingRule::ServingCpuBubbles]);
    }
}
