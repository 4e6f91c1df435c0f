//! Which of a server's Prometheus families gputrace keeps, and how they
//! become `serving.*` series (`gputrace_format::metric::serving`).

use crate::expo::Sample;
use gputrace_format::metric::serving::{self as names, Histogram};

/// The serving engine whose families a page holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// vLLM (`vllm:*`).
    Vllm,
    /// SGLang (`sglang:*`).
    Sglang,
}

impl Engine {
    /// `vllm` or `sglang`.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Vllm => "vllm",
            Engine::Sglang => "sglang",
        }
    }
}

/// Whether a sample name belongs to a family this module may read (either
/// spelling: `vllm:` on plain text, `vllm_` under OpenMetrics).
pub fn is_engine_sample(name: &str) -> bool {
    ["vllm:", "vllm_", "sglang:", "sglang_"].iter().any(|p| name.starts_with(p))
}

/// `vllm_x` → `vllm:x` (prometheus_client writes the colon as an underscore
/// when it speaks OpenMetrics; HELP and TYPE keep the colon).
fn canonical(name: &str) -> String {
    for (under, colon) in [("vllm_", "vllm:"), ("sglang_", "sglang:")] {
        if let Some(rest) = name.strip_prefix(under) {
            return format!("{colon}{rest}");
        }
    }
    name.to_string()
}

/// The families of one histogram, first match wins (aliases of one quantity
/// are never added together).
fn histogram_families(h: Histogram) -> &'static [&'static str] {
    match h {
        Histogram::Ttft => &["vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"],
        Histogram::Itl => &[
            "vllm:inter_token_latency_seconds",
            "vllm:time_per_output_token_seconds",
            "sglang:inter_token_latency_seconds",
            "sglang:time_per_output_token_seconds",
        ],
        Histogram::E2e => &["vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds"],
        Histogram::Queue => &["vllm:request_queue_time_seconds", "sglang:queue_time_seconds"],
    }
}

/// One scrape turned into series values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// `(series name, value)`, in a stable order.
    pub series: Vec<(String, u64)>,
}

impl Snapshot {
    /// The value of one series, if the scrape had it.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.series.iter().find(|(n, _)| n == name).map(|s| s.1)
    }
}

fn count(v: f64) -> u64 {
    if v.is_finite() && v > 0.0 {
        v.round() as u64
    } else {
        0
    }
}

struct Page<'a> {
    samples: Vec<(String, &'a Sample)>,
}

impl<'a> Page<'a> {
    fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|(n, _)| n == name)
    }
    fn of(&self, name: &'a str) -> impl Iterator<Item = &'a Sample> + '_ {
        self.samples.iter().filter(move |(n, _)| n == name).map(|s| s.1)
    }
    /// Sum over label sets of the first family in `aliases` the page has.
    fn sum(&self, aliases: &[&'a str]) -> Option<f64> {
        let name = aliases.iter().find(|a| self.has(a))?;
        Some(self.of(name).map(|s| s.value).filter(|v| v.is_finite()).sum())
    }
    /// Largest value over label sets of the first family in `aliases` the page has.
    fn max(&self, aliases: &[&'a str]) -> Option<f64> {
        let name = aliases.iter().find(|a| self.has(a))?;
        self.of(name).map(|s| s.value).filter(|v| v.is_finite()).reduce(f64::max)
    }
}

/// The engine and the series of one scraped page, or `None` when it has no
/// vLLM or SGLang family.
pub fn snapshot(samples: &[Sample]) -> Option<(Engine, Snapshot)> {
    let page = Page {
        samples: samples.iter().map(|s| (canonical(&s.name), s)).collect(),
    };
    let engine = if page.samples.iter().any(|(n, _)| n.starts_with("vllm:")) {
        Engine::Vllm
    } else if page.samples.iter().any(|(n, _)| n.starts_with("sglang:")) {
        Engine::Sglang
    } else {
        return None;
    };
    let mut out = Vec::new();
    let mut put = |name: &str, v: Option<f64>| {
        if let Some(v) = v {
            out.push((name.to_string(), count(v)));
        }
    };
    put(
        names::REQUESTS_RUNNING,
        page.sum(&["vllm:num_requests_running", "sglang:num_running_reqs"]),
    );
    put(
        names::REQUESTS_WAITING,
        page.sum(&["vllm:num_requests_waiting", "sglang:num_queue_reqs"]),
    );
    put(
        names::KV_CACHE_USAGE_BP,
        page.max(&["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"])
            .map(|f| f * 10_000.0),
    );
    put(
        names::PROMPT_TOKENS,
        page.sum(&["vllm:prompt_tokens_total", "sglang:prompt_tokens_total"]),
    );
    put(
        names::GENERATION_TOKENS,
        page.sum(&["vllm:generation_tokens_total", "sglang:generation_tokens_total"]),
    );
    let (completed, failed) = requests(&page);
    put(names::REQUESTS_COMPLETED, completed);
    put(names::REQUESTS_FAILED, failed);
    for h in Histogram::ALL {
        histogram(&page, h, &mut out);
    }
    Some((engine, Snapshot { series: out }))
}

/// Completed and failed requests: vLLM's `request_success_total` by
/// `finished_reason` (`stop`, `length` completed; anything else failed),
/// SGLang's `num_requests_total` and `num_aborted_requests_total`.
fn requests(page: &Page<'_>) -> (Option<f64>, Option<f64>) {
    if page.has("vllm:request_success_total") {
        let (mut ok, mut failed) = (0.0, 0.0);
        for s in page.of("vllm:request_success_total").filter(|s| s.value.is_finite()) {
            match s.label("finished_reason") {
                Some("stop") | Some("length") | None => ok += s.value,
                Some(_) => failed += s.value,
            }
        }
        return (Some(ok), Some(failed));
    }
    let aborted = page.sum(&["sglang:num_aborted_requests_total"]);
    match page.sum(&["sglang:num_requests_total"]) {
        Some(all) => (Some((all - aborted.unwrap_or(0.0)).max(0.0)), Some(aborted.unwrap_or(0.0))),
        None => (None, aborted),
    }
}

/// A histogram's buckets (summed over label sets, per `le` text), count and sum.
fn histogram(page: &Page<'_>, h: Histogram, out: &mut Vec<(String, u64)>) {
    let Some(base) = histogram_families(h)
        .iter()
        .find(|b| page.has(&format!("{b}_count")) || page.has(&format!("{b}_bucket")))
    else {
        return;
    };
    let bucket = format!("{base}_bucket");
    let mut buckets: Vec<(String, f64, f64)> = Vec::new();
    for s in page.samples.iter().filter(|(n, _)| *n == bucket).map(|s| s.1) {
        let Some(le) = s.label("le") else { continue };
        let Some(bound) = names::parse_le(le) else { continue };
        match buckets.iter_mut().find(|b| b.1 == bound) {
            Some(b) => b.2 += s.value,
            None => buckets.push((le.to_string(), bound, s.value)),
        }
    }
    buckets.sort_by(|a, b| a.1.total_cmp(&b.1));
    for (le, _, v) in &buckets {
        out.push((h.bucket(le), count(*v)));
    }
    let sum_of = |suffix: &str| -> Option<f64> {
        let name = format!("{base}{suffix}");
        page.has(&name).then(|| {
            page.samples
                .iter()
                .filter(|(n, _)| *n == name)
                .map(|s| s.1.value)
                .filter(|v| v.is_finite())
                .sum()
        })
    };
    if let Some(c) = sum_of("_count") {
        out.push((h.count(), count(c)));
    }
    if let Some(s) = sum_of("_sum") {
        out.push((h.sum_ns(), count(s * 1e9)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::expo::parse;

    const VLLM: &str = r#"# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:num_requests_waiting{engine="0",model_name="m"} 7.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.9731
vllm:prompt_tokens_total{model_name="m"} 1200.0
vllm:prompt_tokens_created{model_name="m"} 1.7e9
vllm:generation_tokens_total{model_name="m"} 800.0
vllm:request_success_total{finished_reason="stop",model_name="m"} 9.0
vllm:request_success_total{finished_reason="length",model_name="m"} 1.0
vllm:request_success_total{finished_reason="abort",model_name="m"} 2.0
vllm:time_to_first_token_seconds_bucket{le="0.05",model_name="m"} 4.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 10.0
vllm:time_to_first_token_seconds_bucket{le="0.5",model_name="m"} 8.0
vllm:time_to_first_token_seconds_count{model_name="m"} 10.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 2.5
vllm:time_per_output_token_seconds_count{model_name="m"} 99.0
vllm:inter_token_latency_seconds_count{model_name="m"} 5.0
"#;

    #[test]
    fn vllm_page_becomes_series() {
        let (samples, _) = parse(VLLM, is_engine_sample);
        let (engine, s) = snapshot(&samples).unwrap();
        assert_eq!(engine, Engine::Vllm);
        assert_eq!(s.get(names::REQUESTS_RUNNING), Some(5));
        assert_eq!(s.get(names::REQUESTS_WAITING), Some(7));
        assert_eq!(s.get(names::KV_CACHE_USAGE_BP), Some(9731));
        assert_eq!(s.get(names::PROMPT_TOKENS), Some(1200));
        assert_eq!(s.get(names::GENERATION_TOKENS), Some(800));
        assert_eq!(s.get(names::REQUESTS_COMPLETED), Some(10));
        assert_eq!(s.get(names::REQUESTS_FAILED), Some(2));
        let t = Histogram::Ttft;
        let buckets: Vec<_> = s.series.iter().filter(|(n, _)| n.contains(".le=")).cloned().collect();
        assert_eq!(buckets, [(t.bucket("0.05"), 4), (t.bucket("0.5"), 8), (t.bucket("+Inf"), 10)]);
        assert_eq!(s.get(&t.count()), Some(10));
        assert_eq!(s.get(&t.sum_ns()), Some(2_500_000_000));
        // The current name wins over the deprecated alias; they are never added.
        assert_eq!(s.get(&Histogram::Itl.count()), Some(5));
        assert_eq!(s.get(&Histogram::E2e.count()), None);
    }

    #[test]
    fn openmetrics_underscore_spelling_reads_the_same() {
        let om = VLLM.replace("vllm:", "vllm_");
        let (a, _) = parse(VLLM, is_engine_sample);
        let (b, _) = parse(&om, is_engine_sample);
        assert_eq!(snapshot(&a), snapshot(&b));
    }

    #[test]
    fn sglang_and_others() {
        let page = "sglang:num_running_reqs 4\nsglang:num_queue_reqs 1\nsglang:token_usage 0.5\n\
                    sglang:num_requests_total 20\nsglang:num_aborted_requests_total 3\n";
        let (samples, _) = parse(page, is_engine_sample);
        let (engine, s) = snapshot(&samples).unwrap();
        assert_eq!(engine, Engine::Sglang);
        assert_eq!(s.get(names::KV_CACHE_USAGE_BP), Some(5000));
        assert_eq!(s.get(names::REQUESTS_COMPLETED), Some(17));
        assert_eq!(s.get(names::REQUESTS_FAILED), Some(3));
        let (samples, _) = parse("process_cpu_seconds_total 3\n", |_| true);
        assert_eq!(snapshot(&samples), None);
    }
}
