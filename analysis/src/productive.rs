//! The productive layer: what useful work the GPU-hours bought.
//!
//! Per rank and for the job: steps and their time, tokens and samples per
//! second, GPU-Util as nvidia-smi defines it (computed from the timeline),
//! MFU, cost per million tokens, and the GPU-hours of failed runs.
//! `docs/metrics.md` ("Productive work") defines every number.
//!
//! Inputs from the trace, as the agent and the Python module write them:
//! - step marks: an instant marker in domain `gputrace` named `step` with an optional
//!   `key=value` tail (`step tokens=4096 samples=8`), or in any domain a name starting
//!   `gputrace.step` with the same tail; each mark ends a step ([`parse_step_mark`]);
//! - the process's outcome: an instant in domain `gputrace` named `exit status=<int>` or
//!   `exit exception=<TypeName>` ([`parse_exit_mark`]);
//! - header extras `gputrace.tokens_per_step` and `gputrace.samples_per_step`;
//! - run records (`gputrace-run.<host>.<pid>.json`) beside the traces, given in
//!   [`ProductiveOptions::run_records`].

use crate::peaks::{device_peak, DevicePeak, Precision};
use crate::report::{DeviceReport, Productive, RankReport, StepReport, StepSource};
use gputrace_format::{Header, RunRecord};
use std::collections::BTreeMap;

/// NVML's GPU-Util sampling period on most products, 1/6 s (rounded to the ns).
pub const DEFAULT_NVML_WINDOW_NS: u64 = 166_666_667;

/// GPU-Util needs a span of at least this many of its windows: over fewer, one window's
/// all-or-nothing reading is most of the value (a 5 ms capture with one kernel reads 100%).
pub const MIN_GPU_UTIL_WINDOWS: f64 = 3.0;

/// Header extra: tokens one process trains (or serves) per step.
pub const TOKENS_PER_STEP_KEY: &str = "gputrace.tokens_per_step";
/// Header extra: samples one process handles per step.
pub const SAMPLES_PER_STEP_KEY: &str = "gputrace.samples_per_step";

/// How many model FLOPs the work is worth.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ModelFlops {
    /// FLOPs per token (`--model-flops-per-token`).
    PerToken(f64),
    /// A model of `params` parameters: 6·N FLOPs per trained token, 2·N per inferred one
    /// (`--model-params`, `--inference`).
    Params {
        /// Parameters.
        params: f64,
        /// Forward only (2·N) instead of training (6·N).
        inference: bool,
    },
    /// FLOPs one process does per step (`--flops-per-step`).
    PerStep(f64),
}

impl ModelFlops {
    fn describe(self) -> String {
        match self {
            ModelFlops::PerToken(f) => format!("--model-flops-per-token {f:e}"),
            ModelFlops::Params { params, inference: false } => format!("6·N per token, N = {params:e} (--model-params, training)"),
            ModelFlops::Params { params, inference: true } => format!("2·N per token, N = {params:e} (--model-params --inference)"),
            ModelFlops::PerStep(f) => format!("--flops-per-step {f:e}"),
        }
    }
}

/// Settings of the productive layer.
#[derive(Clone, Debug)]
pub struct ProductiveOptions {
    /// Tokens per step and process when neither marks nor the header say.
    pub tokens_per_step: Option<u64>,
    /// Samples per step and process when neither marks nor the header say.
    pub samples_per_step: Option<u64>,
    /// Model FLOPs, for MFU (none: MFU is null).
    pub model: Option<ModelFlops>,
    /// Precision of the peak MFU is measured against (none: the one most GEMM time ran
    /// in, read from the kernels' names, else bf16).
    pub precision: Option<Precision>,
    /// Peak TFLOPS per GPU, instead of the table's.
    pub peak_tflops: Option<f64>,
    /// GPU-Util's sampling window (0 is taken as the default).
    pub nvml_window_ns: u64,
    /// Run records found beside the traces: (file, record).
    pub run_records: Vec<(String, RunRecord)>,
}

impl Default for ProductiveOptions {
    fn default() -> Self {
        ProductiveOptions {
            tokens_per_step: None,
            samples_per_step: None,
            model: None,
            precision: None,
            peak_tflops: None,
            nvml_window_ns: DEFAULT_NVML_WINDOW_NS,
            run_records: Vec::new(),
        }
    }
}

impl ProductiveOptions {
    pub(crate) fn window_ns(&self) -> u64 {
        if self.nvml_window_ns == 0 {
            DEFAULT_NVML_WINDOW_NS
        } else {
            self.nvml_window_ns
        }
    }
}

/// What a step mark says about its step.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepMark {
    /// `tokens=`.
    pub tokens: Option<u64>,
    /// `samples=`.
    pub samples: Option<u64>,
}

/// What a marker name is to the productive layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkParse {
    /// Not a step mark.
    NotAStepMark,
    /// A step mark.
    Step(StepMark),
    /// Looks like a step mark, but a value does not parse (`tokens=lots`), a key repeats or a
    /// word has no `=`: ignored (it ends no step) and counted.
    Malformed,
}

/// Parse a marker's domain and name as a step mark.
pub fn parse_step_mark(domain: &str, name: &str) -> MarkParse {
    let tail = if domain == "gputrace" && (name == "step" || name.starts_with("step ")) {
        &name[4..]
    } else if let Some(rest) = name.strip_prefix("gputrace.step") {
        if !(rest.is_empty() || rest.starts_with(' ')) {
            return MarkParse::NotAStepMark;
        }
        rest
    } else {
        return MarkParse::NotAStepMark;
    };
    let mut mark = StepMark::default();
    for word in tail.split_ascii_whitespace() {
        let Some((key, value)) = word.split_once('=') else {
            return MarkParse::Malformed;
        };
        let slot = match key {
            "tokens" => &mut mark.tokens,
            "samples" => &mut mark.samples,
            _ => continue,
        };
        match value.parse::<u64>() {
            Ok(v) if slot.is_none() => *slot = Some(v),
            _ => return MarkParse::Malformed,
        }
    }
    MarkParse::Step(mark)
}

/// How a process said it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExitMark {
    /// `exit status=<int>`.
    Status(i64),
    /// `exit exception=<TypeName>`.
    Exception(String),
}

/// Parse an `exit` marker (domain `gputrace`); anything else, or a malformed one, is `None`.
pub fn parse_exit_mark(domain: &str, name: &str) -> Option<ExitMark> {
    if domain != "gputrace" {
        return None;
    }
    let rest = name.strip_prefix("exit ")?.trim();
    if let Some(v) = rest.strip_prefix("status=") {
        return v.parse().ok().map(ExitMark::Status);
    }
    let t = rest.strip_prefix("exception=")?;
    (!t.is_empty() && !t.contains(char::is_whitespace)).then(|| ExitMark::Exception(t.to_string()))
}

/// One device's share of the window grid, while its work streams by in start order.
///
/// Invariant: windows are `[origin + i·W, origin + (i+1)·W)`; `marked` windows carry a
/// kernel and are exactly those `i` with a kernel overlapping them; `upto` is the highest
/// marked index. Kernels arrive in start order, so every window between a kernel's start
/// window and `upto` is already marked (the kernel that set `upto` started no later and
/// covers them), and a new kernel only adds the windows after `upto`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UtilWindows {
    window: u64,
    origin: Option<u64>,
    upto: Option<u64>,
    marked: u64,
}

impl UtilWindows {
    pub(crate) fn new(window: u64) -> Self {
        UtilWindows {
            window: window.max(1),
            origin: None,
            upto: None,
            marked: 0,
        }
    }

    /// Any work at `start` (the first one sets the grid's origin: the span's start).
    pub(crate) fn work(&mut self, start: u64) {
        self.origin.get_or_insert(start);
    }

    /// A kernel `[start, end)`.
    pub(crate) fn kernel(&mut self, start: u64, end: u64) {
        let origin = *self.origin.get_or_insert(start);
        if end <= start {
            return;
        }
        let first = start.saturating_sub(origin) / self.window;
        let last = (end - 1).saturating_sub(origin) / self.window;
        let from = match self.upto {
            Some(u) => first.max(u + 1),
            None => first,
        };
        if last >= from {
            self.marked += last - from + 1;
            self.upto = Some(last);
        }
    }

    /// Busy time of the span `[first, last)`: whole windows, and the last (partial) window
    /// for its length in the span.
    pub(crate) fn busy_ns(&self, first: Option<u64>, last: Option<u64>) -> u64 {
        let (Some(f), Some(l)) = (first, last) else { return 0 };
        let span = l.saturating_sub(f);
        if span == 0 || self.marked == 0 {
            return 0;
        }
        let last_window = (span - 1) / self.window;
        let last_len = span - last_window * self.window;
        if self.upto == Some(last_window) {
            (self.marked - 1) * self.window + last_len
        } else {
            self.marked * self.window
        }
    }
}

/// The step-mark facts of one rank, from the analysis' first pass.
#[derive(Clone, Debug, Default)]
pub(crate) struct RankMarks {
    /// The marks' counts, one per step, in step order (when the steps are the marks').
    pub per_step: Vec<StepMark>,
    pub malformed: u64,
    pub exit: Option<ExitMark>,
    pub source: StepSource,
    /// The step marks' windows as (step, duration ns), when the marks define the steps.
    pub windows: Vec<(u64, u64)>,
}

/// Nearest-rank percentile `p` (0 < p ≤ 1) of sorted values.
pub fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let k = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[k - 1])
}

/// (p50, p95, cv) of step durations in ns, seconds for the percentiles.
fn step_stats(durations: &[u64]) -> (Option<f64>, Option<f64>, Option<f64>) {
    let mut d = durations.to_vec();
    d.sort_unstable();
    let s = |v: Option<u64>| v.map(|v| v as f64 / 1e9);
    let cv = (!d.is_empty()).then(|| {
        let n = d.len() as f64;
        let mean = d.iter().map(|&x| x as f64).sum::<f64>() / n;
        let var = d.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n;
        if mean > 0.0 {
            var.sqrt() / mean
        } else {
            0.0
        }
    });
    (s(percentile(&d, 0.5)), s(percentile(&d, 0.95)), cv)
}

/// The device whose steps stand for the rank: the one with the most compute (as `compare`).
pub fn rank_steps(r: &RankReport) -> &[StepReport] {
    r.devices
        .iter()
        .filter(|d| d.first_ns.is_some())
        .max_by_key(|d| d.time.compute_ns)
        .map_or(&[], |d| d.steps.as_slice())
}

fn hours(ns: u64) -> f64 {
    ns as f64 / 3.6e12
}

fn header_count(h: &Header, key: &str) -> Option<u64> {
    h.extra.get(key).and_then(|v| v.trim().parse().ok())
}

/// Per-step counts: the mark's, else the header's, else the flag's.
fn counts(
    marks: &[StepMark],
    steps: usize,
    pick: impl Fn(&StepMark) -> Option<u64>,
    header: Option<u64>,
    flag: Option<u64>,
    flag_name: &str,
) -> (Option<u64>, Option<String>) {
    let mut total: Option<u64> = None;
    let mut sources: Vec<&str> = Vec::new();
    for k in 0..steps {
        let (v, src) = match (marks.get(k).and_then(&pick), header, flag) {
            (Some(v), _, _) => (v, "step marks"),
            (None, Some(v), _) => (v, "header"),
            (None, None, Some(v)) => (v, flag_name),
            _ => continue,
        };
        total = Some(total.unwrap_or(0).saturating_add(v));
        if !sources.contains(&src) {
            sources.push(src);
        }
    }
    (total, (!sources.is_empty()).then(|| sources.join(", ")))
}

/// How a rank ended: (failed, evidence).
fn outcome(header: &Header, has_trailer: bool, exit: Option<&ExitMark>, records: &[(String, RunRecord)]) -> (bool, String) {
    let mut failures: Vec<String> = Vec::new();
    let mut success: Vec<String> = Vec::new();
    // The record of the `gputrace run` on this host whose run holds the trace's start
    // (a minute of slack for clock steps; a record never completed, its launcher
    // killed, has no end); the closest start on ties.
    let start = header.start_clock.realtime_ns;
    const SLACK: u64 = 60_000_000_000;
    let record = records
        .iter()
        .filter(|(_, r)| r.host == header.hostname)
        .filter(|(_, r)| {
            start.saturating_add(SLACK) >= r.start_realtime_ns && (!r.completed() || start <= r.end_realtime_ns.saturating_add(SLACK))
        })
        .min_by_key(|(_, r)| r.start_realtime_ns.abs_diff(start));
    if let Some((file, r)) = record {
        if r.succeeded() {
            success.push(format!("run record {file}: {}", r.outcome()));
        } else {
            failures.push(format!("run record {file}: {}", r.outcome()));
        }
    }
    match exit {
        Some(ExitMark::Status(0)) => success.push("exit marker: status 0".into()),
        Some(ExitMark::Status(s)) => failures.push(format!("exit marker: status {s}")),
        Some(ExitMark::Exception(t)) => failures.push(format!("exit marker: exception {t}")),
        None => {}
    }
    if !has_trailer {
        failures.push("no trailer: the process was killed before the writer finished".into());
    }
    if !failures.is_empty() {
        (true, failures.join("; "))
    } else if success.is_empty() {
        (false, "trailer present (no run record or exit marker)".into())
    } else {
        (false, success.join("; "))
    }
}

/// The hint for a null MFU.
fn mfu_hint(
    model: Option<ModelFlops>,
    has_flops: bool,
    peak: Option<f64>,
    devices: &[&DeviceReport],
    precision: Precision,
) -> Option<String> {
    if model.is_none() {
        return Some("--model-params N (or --model-flops-per-token F, --flops-per-step F)".into());
    }
    if !has_flops {
        return Some("tokens per step (step marks with tokens=, --tokens-per-step N) for the model FLOPs".into());
    }
    if peak.is_none() {
        let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
        return Some(format!(
            "--peak-tflops T (no dense {} peak for `{}` in the table)",
            precision.name(),
            names.join("`, `")
        ));
    }
    None
}

/// Why GPU-Util is null on a span of `windows` windows of `window_s`.
fn util_hint(windows: f64, window_s: f64) -> String {
    format!(
        "a span of {MIN_GPU_UTIL_WINDOWS:.0} or more GPU-Util windows of {window_s:.3} s (this one holds {windows:.2}: \
         one window's all-or-nothing reading would be most of the value)"
    )
}

/// Every input the cost per million tokens lacks, at once.
fn cost_hint(no_price: bool, no_tokens: bool, failed: bool) -> String {
    let mut need = Vec::new();
    if no_price {
        need.push("--gpu-hour-cost USD");
    }
    if no_tokens {
        need.push("--tokens-per-step N (or step marks with tokens=N)");
    } else if failed {
        need.push("tokens of a process that succeeded");
    }
    if need.is_empty() {
        need.push("a token count above 0");
    }
    need.join(" and ")
}

/// The precision MFU is measured against, and where it came from: `--precision`, else
/// the GEMM kernels' names (`gemm`: the precision most GEMM time ran in, its share), else bf16.
fn resolve_precision(given: Option<Precision>, gemm: Option<(Precision, f64)>) -> (Precision, String) {
    match (given, gemm) {
        (Some(p), _) => (p, "--precision".into()),
        (None, Some((p, share))) => (
            p,
            format!(
                "GEMM kernel names ({:.0}% of the GEMM time whose names show a precision is {})",
                100.0 * share,
                p.name()
            ),
        ),
        (None, None) => (
            Precision::Bf16,
            "default (no GEMM kernel name shows a precision; --precision sets it)".into(),
        ),
    }
}

/// Why an MFU above 100% (`mfu`) cannot be: the likely cause, from the achieved TFLOPS per
/// GPU, the device's table row, the precision used and the one the GEMM names show.
fn impossible_mfu(
    mfu: f64,
    achieved_per_gpu: f64,
    row: Option<DevicePeak>,
    precision: Precision,
    gemm: Option<(Precision, f64)>,
    flag_peak: Option<f64>,
) -> String {
    let mut causes = Vec::new();
    if let Some(p) = flag_peak {
        causes.push(format!(
            "the peak: --peak-tflops {p} per GPU is below the {achieved_per_gpu:.0} TFLOPS per GPU the model FLOPs imply"
        ));
    }
    let best = row.and_then(|r| {
        [Precision::Fp8, Precision::Bf16, Precision::Tf32]
            .into_iter()
            .filter_map(|p| r.tflops(p).map(|t| (p, t)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    });
    if let (Some(row), Some((g, _))) = (row, gemm) {
        if g != precision {
            if let Some(t) = row.tflops(g).filter(|&t| t >= achieved_per_gpu) {
                causes.push(format!(
                    "the precision: the GEMM kernels run in {} (peak {t} TFLOPS), against which MFU would be {:.0}%: pass --precision {}",
                    g.name(),
                    100.0 * achieved_per_gpu / t,
                    g.name()
                ));
            }
        }
    }
    if best.is_none_or(|(_, t)| achieved_per_gpu > t) || causes.is_empty() {
        causes.push(format!(
            "the model FLOPs: {achieved_per_gpu:.0} TFLOPS per GPU{}; check --model-params (for a mixture-of-experts model the parameters active per token, not the total) and the tokens per step (each process's, not the global batch)",
            best.map_or(String::new(), |(p, t)| format!(" is above even the device's {} peak of {t} TFLOPS", p.name()))
        ));
    }
    format!(
        "refused: MFU {:.0}% is impossible (more model FLOPs per second than the {} peak); likely cause: {}",
        100.0 * mfu,
        precision.name(),
        causes.join("; or ")
    )
}

/// The productive numbers of one rank; `util_busy_ns[i]` is the GPU-Util busy time of
/// `r.devices[i]`; `gemm` is the precision its GEMM kernels' names show ([`crate::peaks::infer_precision`]).
#[allow(clippy::too_many_arguments)]
pub(crate) fn rank_productive(
    r: &RankReport,
    util_busy_ns: &[u64],
    marks: &RankMarks,
    header: &Header,
    has_trailer: bool,
    gemm: Option<(Precision, f64)>,
    opts: &ProductiveOptions,
    usd_per_gpu_hour: Option<f64>,
) -> Productive {
    let (precision, precision_source) = resolve_precision(opts.precision, gemm);
    let active: Vec<&DeviceReport> = r.devices.iter().filter(|d| d.first_ns.is_some()).collect();
    let steps = RankSteps::of(r, marks, header, opts);
    let util = Utilization::of(r, util_busy_ns, &active, opts);
    let mfu = MfuEstimate::of(opts, &steps, &active, precision);
    let hours = GpuHours::of(&active, header, has_trailer, marks, opts, usd_per_gpu_hour, steps.tokens);
    let missing = missing_inputs(&steps, &util, &mfu, &hours, &active, precision, gemm, opts, usd_per_gpu_hour);
    let rate = |n: Option<u64>| n.filter(|_| steps.in_steps_ns > 0).map(|n| n as f64 / steps.in_steps_s);
    let pct = |x: u64| (util.span > 0).then(|| 100.0 * x as f64 / util.span as f64);
    let failed = hours.failed;
    Productive {
        step_source: marks.source,
        steps: steps.steps.len() as u64,
        malformed_step_marks: marks.malformed,
        step_time_p50_s: steps.p50,
        step_time_p95_s: steps.p95,
        step_time_cv: steps.cv,
        time_in_steps_s: steps.in_steps_s,
        tokens: steps.tokens,
        tokens_source: steps.tokens_source,
        samples: steps.samples,
        samples_source: steps.samples_source,
        tokens_per_s: rate(steps.tokens),
        samples_per_s: rate(steps.samples),
        devices: active.len() as u64,
        span_ns: util.span,
        compute_ns: util.compute,
        gpu_util_busy_ns: util.busy,
        gpu_util_nvml_pct: if util.too_short.is_some() { None } else { pct(util.busy) },
        gpu_util_window_s: util.window_s,
        gpu_util_windows: util.windows,
        compute_pct: pct(util.compute),
        model_flops: mfu.model_flops,
        model_flops_source: opts.model.map(ModelFlops::describe),
        achieved_tflops: mfu.achieved,
        peak_tflops: mfu.peak,
        peak_source: mfu.peak_source,
        precision,
        precision_source,
        mfu: mfu.mfu,
        mfu_refused: mfu.refused,
        gpu_hours: hours.gpu_hours,
        productive_gpu_hours: hours.productive_gpu_hours,
        productive_gpu_hour_rate: (!steps.steps.is_empty() && hours.gpu_hours > 0.0).then(|| hours.productive_gpu_hours / hours.gpu_hours),
        failed_gpu_hours: hours.failed_gpu_hours,
        cost_usd: hours.cost_usd,
        failed_cost_usd: usd_per_gpu_hour.map(|p| hours.failed_gpu_hours * p),
        cost_per_million_tokens: hours.cost_per_million_tokens,
        failed,
        outcome: if failed { "failed" } else { "succeeded" }.into(),
        outcome_evidence: hours.evidence,
        missing,
        host_steps: if steps.host_steps { steps.steps } else { Vec::new() },
    }
}

/// A rank's steps, their time and what they processed.
struct RankSteps {
    /// (step, duration ns) of the busiest GPU, or of the step marks when no GPU ran any.
    steps: Vec<(u64, u64)>,
    /// The steps are the host's step marks (no GPU ran any).
    host_steps: bool,
    p50: Option<f64>,
    p95: Option<f64>,
    cv: Option<f64>,
    in_steps_ns: u64,
    in_steps_s: f64,
    tokens: Option<u64>,
    tokens_source: Option<String>,
    samples: Option<u64>,
    samples_source: Option<String>,
}

impl RankSteps {
    fn of(r: &RankReport, marks: &RankMarks, header: &Header, opts: &ProductiveOptions) -> RankSteps {
        // Steps of the busiest GPU; a rank that ran nothing on a GPU (a Python job without CUDA)
        // still has the steps its marks delimit.
        let device_steps = rank_steps(r);
        let host_steps = device_steps.is_empty() && marks.source == StepSource::StepMarks;
        let steps: Vec<(u64, u64)> = if host_steps {
            marks.windows.clone()
        } else {
            device_steps.iter().map(|s| (s.step, s.duration_ns)).collect()
        };
        let durations: Vec<u64> = steps.iter().map(|s| s.1).collect();
        let (p50, p95, cv) = step_stats(&durations);
        let in_steps_ns: u64 = durations.iter().sum();
        let per_step: &[StepMark] = if marks.source == StepSource::StepMarks {
            &marks.per_step
        } else {
            &[]
        };
        let (tokens, tokens_source) = counts(
            per_step,
            steps.len(),
            |m| m.tokens,
            header_count(header, TOKENS_PER_STEP_KEY),
            opts.tokens_per_step,
            "--tokens-per-step",
        );
        let (samples, samples_source) = counts(
            per_step,
            steps.len(),
            |m| m.samples,
            header_count(header, SAMPLES_PER_STEP_KEY),
            opts.samples_per_step,
            "--samples-per-step",
        );
        RankSteps {
            steps,
            host_steps,
            p50,
            p95,
            cv,
            in_steps_ns,
            in_steps_s: in_steps_ns as f64 / 1e9,
            tokens,
            tokens_source,
            samples,
            samples_source,
        }
    }
}

/// How busy a rank's active GPUs were: by their kernels and by NVML's GPU-Util.
struct Utilization {
    /// Summed span of the active devices, ns.
    span: u64,
    /// Summed compute time, ns.
    compute: u64,
    /// Summed GPU-Util busy time, ns.
    busy: u64,
    /// The GPU-Util window, s.
    window_s: f64,
    /// The shortest device span in GPU-Util windows.
    windows: Option<f64>,
    /// `windows` when too few for a GPU-Util figure.
    too_short: Option<f64>,
}

impl Utilization {
    fn of(r: &RankReport, util_busy_ns: &[u64], active: &[&DeviceReport], opts: &ProductiveOptions) -> Utilization {
        let busy: u64 = util_busy_ns
            .iter()
            .zip(&r.devices)
            .filter(|(_, d)| d.first_ns.is_some())
            .map(|(b, _)| *b)
            .sum();
        // The shortest device span in GPU-Util windows: over too few, no GPU-Util.
        let windows = active
            .iter()
            .map(|d| d.time.span_ns as f64 / opts.window_ns() as f64)
            .min_by(f64::total_cmp);
        Utilization {
            span: active.iter().map(|d| d.time.span_ns).sum(),
            compute: active.iter().map(|d| d.time.compute_ns).sum(),
            busy,
            window_s: opts.window_ns() as f64 / 1e9,
            windows,
            too_short: windows.filter(|&w| w < MIN_GPU_UTIL_WINDOWS),
        }
    }
}

/// Model FLOPs utilization: achieved model TFLOPS against the devices' peak.
struct MfuEstimate {
    model_flops: Option<f64>,
    /// Achieved model TFLOPS of the rank (all its GPUs).
    achieved: Option<f64>,
    peak: Option<f64>,
    peak_source: Option<String>,
    /// MFU at most 1.
    mfu: Option<f64>,
    /// MFU above 1: impossible, refused.
    refused: Option<f64>,
}

impl MfuEstimate {
    fn of(opts: &ProductiveOptions, steps: &RankSteps, active: &[&DeviceReport], precision: Precision) -> MfuEstimate {
        let model_flops = model_flops(opts.model, steps.tokens, steps.steps.len());
        let achieved = model_flops.filter(|_| steps.in_steps_ns > 0).map(|f| f / steps.in_steps_s / 1e12);
        let (peak, peak_source) = peak_tflops(opts.peak_tflops, active, precision);
        let raw_mfu = match (achieved, peak) {
            (Some(a), Some(p)) if p > 0.0 => Some(a / p),
            _ => None,
        };
        // More model FLOPs per second than the peak: refused, with its likely cause.
        let refused = raw_mfu.filter(|&m| m > 1.0);
        MfuEstimate {
            model_flops,
            achieved,
            peak,
            peak_source,
            mfu: raw_mfu.filter(|_| refused.is_none()),
            refused,
        }
    }
}

/// GPU hours traced, how many were productive, and what they cost.
struct GpuHours {
    gpu_hours: f64,
    productive_gpu_hours: f64,
    failed_gpu_hours: f64,
    failed: bool,
    /// Why the run counts as failed or succeeded.
    evidence: String,
    cost_usd: Option<f64>,
    cost_per_million_tokens: Option<f64>,
}

impl GpuHours {
    fn of(
        active: &[&DeviceReport],
        header: &Header,
        has_trailer: bool,
        marks: &RankMarks,
        opts: &ProductiveOptions,
        usd_per_gpu_hour: Option<f64>,
        tokens: Option<u64>,
    ) -> GpuHours {
        let traced_ns: u64 = active
            .iter()
            .map(|d| d.process_window.map_or(d.time.span_ns, |w| w.window_ns.max(d.time.span_ns)))
            .sum();
        let gpu_hours = hours(traced_ns);
        let (failed, evidence) = outcome(header, has_trailer, marks.exit.as_ref(), &opts.run_records);
        // Each active device's steps are its own GPU windows (disjoint): their time, never
        // more than the traced time.
        let all_steps_ns: u64 = active.iter().flat_map(|d| &d.steps).map(|s| s.duration_ns).sum();
        let productive_ns = if failed { 0 } else { all_steps_ns.min(traced_ns) };
        let cost_usd = usd_per_gpu_hour.map(|p| gpu_hours * p);
        let good_tokens = tokens.filter(|&t| !failed && t > 0);
        let cost_per_million_tokens = match (cost_usd, good_tokens) {
            (Some(c), Some(t)) => Some(c / t as f64 * 1e6),
            _ => None,
        };
        GpuHours {
            gpu_hours,
            productive_gpu_hours: hours(productive_ns),
            failed_gpu_hours: if failed { gpu_hours } else { 0.0 },
            failed,
            evidence,
            cost_usd,
            cost_per_million_tokens,
        }
    }
}

/// For each figure that could not be computed, what would give it.
#[allow(clippy::too_many_arguments)]
fn missing_inputs(
    steps: &RankSteps,
    util: &Utilization,
    mfu: &MfuEstimate,
    hours: &GpuHours,
    active: &[&DeviceReport],
    precision: Precision,
    gemm: Option<(Precision, f64)>,
    opts: &ProductiveOptions,
    usd_per_gpu_hour: Option<f64>,
) -> BTreeMap<String, String> {
    let mut missing = BTreeMap::new();
    if let Some(w) = util.too_short {
        missing.insert("gpu_util_nvml_pct".to_string(), util_hint(w, util.window_s));
    }
    if steps.steps.is_empty() {
        missing.insert("steps".to_string(), "step marks (gputrace.step) or ProfilerStep ranges".to_string());
    }
    if steps.tokens.is_none() {
        missing.insert("tokens_per_s".into(), "--tokens-per-step N (or step marks with tokens=N)".into());
    }
    if steps.samples.is_none() {
        missing.insert("samples_per_s".into(), "--samples-per-step N (or step marks with samples=N)".into());
    }
    if let (Some(m), Some(a)) = (mfu.refused, mfu.achieved) {
        let row = active.first().and_then(|d| device_peak(&d.name));
        let per_gpu = a / active.len().max(1) as f64;
        missing.insert("mfu".into(), impossible_mfu(m, per_gpu, row, precision, gemm, opts.peak_tflops));
    } else if mfu.mfu.is_none() {
        if let Some(h) = mfu_hint(opts.model, mfu.model_flops.is_some(), mfu.peak, active, precision) {
            missing.insert("mfu".into(), h);
        }
    }
    if hours.cost_per_million_tokens.is_none() {
        missing.insert(
            "cost_per_million_tokens".into(),
            cost_hint(usd_per_gpu_hour.is_none(), steps.tokens.is_none(), hours.failed),
        );
    }
    missing
}

/// The model FLOPs of `steps` steps that trained (or served) `tokens` tokens, from what
/// the user said of the model; `None` without it (or without the tokens it needs).
fn model_flops(model: Option<ModelFlops>, tokens: Option<u64>, steps: usize) -> Option<f64> {
    match model {
        Some(ModelFlops::PerToken(f)) => tokens.map(|t| t as f64 * f),
        Some(ModelFlops::Params { params, inference }) => tokens.map(|t| t as f64 * params * if inference { 2.0 } else { 6.0 }),
        Some(ModelFlops::PerStep(f)) => (steps > 0).then_some(steps as f64 * f),
        None => None,
    }
}

/// The summed peak TFLOPS of the `active` devices at `precision`, and where it comes from:
/// `--peak-tflops` (per GPU), else the peak table when it knows every device.
fn peak_tflops(given: Option<f64>, active: &[&DeviceReport], precision: Precision) -> (Option<f64>, Option<String>) {
    if let Some(p) = given {
        return (Some(p * active.len() as f64), Some(format!("--peak-tflops: {p} TFLOPS per GPU")));
    }
    let rows: Option<Vec<(DevicePeak, f64)>> = active
        .iter()
        .map(|d| device_peak(&d.name).and_then(|row| row.tflops(precision).map(|t| (row, t))))
        .collect();
    match rows {
        Some(rows) if !rows.is_empty() => {
            let mut named: Vec<String> = rows
                .iter()
                .map(|(row, t)| {
                    format!(
                        "{}: {t} TFLOPS dense {} per GPU, {} TB/s",
                        row.device,
                        precision.name(),
                        row.dram_tbps
                    )
                })
                .collect();
            named.dedup();
            (Some(rows.iter().map(|r| r.1).sum()), Some(format!("table: {}", named.join("; "))))
        }
        _ => (None, None),
    }
}

/// The job's throughput from its ranks' (tokens or samples per second): ranks run at the
/// same time, so their rates add; null when no rank has one. `report` and `compare` both use it.
pub fn job_rate(ranks: impl Iterator<Item = Option<f64>> + Clone) -> Option<f64> {
    sum_opt(ranks)
}

fn sum_opt<T: Copy + std::iter::Sum<T>>(v: impl Iterator<Item = Option<T>> + Clone) -> Option<T> {
    v.clone().any(|x| x.is_some()).then(|| v.flatten().sum())
}

/// The job's numbers from its ranks: sums of the ranks' amounts and rates (ranks run at the
/// same time), each step's time that of its slowest rank.
pub(crate) fn job_productive(ranks: &[RankReport], opts: &ProductiveOptions, usd_per_gpu_hour: Option<f64>) -> Productive {
    let p: Vec<&Productive> = ranks.iter().map(|r| &r.productive).collect();
    let mut by_step: BTreeMap<u64, u64> = BTreeMap::new();
    for r in ranks {
        let device_steps = rank_steps(r).iter().map(|s| (s.step, s.duration_ns));
        for (step, duration) in device_steps.chain(r.productive.host_steps.iter().copied()) {
            let e = by_step.entry(step).or_insert(0);
            *e = (*e).max(duration);
        }
    }
    let durations: Vec<u64> = by_step.values().copied().collect();
    let (p50, p95, cv) = step_stats(&durations);
    let span: u64 = p.iter().map(|x| x.span_ns).sum();
    let compute: u64 = p.iter().map(|x| x.compute_ns).sum();
    let busy: u64 = p.iter().map(|x| x.gpu_util_busy_ns).sum();
    let pct = |x: u64| (span > 0).then(|| 100.0 * x as f64 / span as f64);
    let achieved = sum_opt(p.iter().map(|x| x.achieved_tflops));
    let peak = sum_opt(p.iter().map(|x| x.peak_tflops));
    // MFU over the ranks that have both.
    let both: Vec<&&Productive> = p
        .iter()
        .filter(|x| x.achieved_tflops.is_some() && x.peak_tflops.is_some())
        .collect();
    let (a, pk) = both.iter().fold((0.0, 0.0), |(a, pk), x| {
        (a + x.achieved_tflops.unwrap_or(0.0), pk + x.peak_tflops.unwrap_or(0.0))
    });
    let raw_mfu = (!both.is_empty() && pk > 0.0).then(|| a / pk);
    let mfu_refused = raw_mfu.filter(|&m| m > 1.0);
    let mfu = raw_mfu.filter(|_| mfu_refused.is_none());
    let gpu_hours: f64 = p.iter().map(|x| x.gpu_hours).sum();
    let productive_gpu_hours: f64 = p.iter().map(|x| x.productive_gpu_hours).sum();
    let failed_gpu_hours: f64 = p.iter().map(|x| x.failed_gpu_hours).sum();
    let failed_ranks = p.iter().filter(|x| x.failed).count();
    let cost_usd = usd_per_gpu_hour.map(|c| gpu_hours * c);
    let good_tokens: u64 = p.iter().filter(|x| !x.failed).filter_map(|x| x.tokens).sum();
    let tokens = sum_opt(p.iter().map(|x| x.tokens));
    let mut missing = BTreeMap::new();
    for x in &p {
        for (k, v) in &x.missing {
            missing.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }
    let any_steps = p.iter().any(|x| x.steps > 0);
    let cost_per_million_tokens = match cost_usd {
        Some(c) if good_tokens > 0 => Some(c / good_tokens as f64 * 1e6),
        _ => None,
    };
    if cost_per_million_tokens.is_some() {
        missing.remove("cost_per_million_tokens");
    } else {
        // The job's own inputs, all of them: a rank's hint names only what that rank lacks.
        missing.insert(
            "cost_per_million_tokens".into(),
            cost_hint(usd_per_gpu_hour.is_none(), tokens.is_none(), good_tokens == 0 && tokens.is_some()),
        );
    }
    // The shortest device span of any rank, in GPU-Util windows.
    let util_windows = p.iter().filter_map(|x| x.gpu_util_windows).min_by(f64::total_cmp);
    let util_too_short = util_windows.filter(|&w| w < MIN_GPU_UTIL_WINDOWS);
    if let Some(w) = util_too_short {
        missing.insert("gpu_util_nvml_pct".into(), util_hint(w, opts.window_ns() as f64 / 1e9));
    }
    if mfu.is_some() {
        missing.remove("mfu");
    }
    if tokens.is_some() {
        missing.remove("tokens_per_s");
    }
    let join = |f: fn(&Productive) -> &Option<String>| {
        let mut v: Vec<&str> = p.iter().filter_map(|x| f(x).as_deref()).collect();
        v.sort_unstable();
        v.dedup();
        (!v.is_empty()).then(|| v.join("; "))
    };
    Productive {
        step_source: p.first().map_or(StepSource::None, |x| x.step_source),
        steps: by_step.len() as u64,
        malformed_step_marks: p.iter().map(|x| x.malformed_step_marks).sum(),
        step_time_p50_s: p50,
        step_time_p95_s: p95,
        step_time_cv: cv,
        time_in_steps_s: p.iter().map(|x| x.time_in_steps_s).sum(),
        tokens,
        tokens_source: join(|x| &x.tokens_source),
        samples: sum_opt(p.iter().map(|x| x.samples)),
        samples_source: join(|x| &x.samples_source),
        tokens_per_s: job_rate(p.iter().map(|x| x.tokens_per_s)),
        samples_per_s: job_rate(p.iter().map(|x| x.samples_per_s)),
        devices: p.iter().map(|x| x.devices).sum(),
        span_ns: span,
        compute_ns: compute,
        gpu_util_busy_ns: busy,
        gpu_util_nvml_pct: if util_too_short.is_some() { None } else { pct(busy) },
        gpu_util_window_s: opts.window_ns() as f64 / 1e9,
        gpu_util_windows: util_windows,
        compute_pct: pct(compute),
        model_flops: sum_opt(p.iter().map(|x| x.model_flops)),
        model_flops_source: opts.model.map(ModelFlops::describe),
        achieved_tflops: achieved,
        peak_tflops: peak,
        peak_source: join(|x| &x.peak_source),
        precision: p.first().map_or(Precision::Bf16, |x| x.precision),
        precision_source: {
            let mut v: Vec<&str> = p.iter().map(|x| x.precision_source.as_str()).collect();
            v.sort_unstable();
            v.dedup();
            v.join("; ")
        },
        mfu,
        mfu_refused,
        gpu_hours,
        productive_gpu_hours,
        productive_gpu_hour_rate: (any_steps && gpu_hours > 0.0).then(|| productive_gpu_hours / gpu_hours),
        failed_gpu_hours,
        cost_usd,
        failed_cost_usd: usd_per_gpu_hour.map(|c| failed_gpu_hours * c),
        cost_per_million_tokens,
        failed: failed_ranks > 0,
        outcome: if failed_ranks > 0 {
            format!("{failed_ranks} of {} rank(s) failed", p.len())
        } else {
            "succeeded".into()
        },
        outcome_evidence: p
            .iter()
            .zip(ranks)
            .filter(|(x, _)| x.failed)
            .map(|(x, r)| format!("rank {}: {}", r.rank, x.outcome_evidence))
            .collect::<Vec<_>>()
            .join("; "),
        missing,
        host_steps: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_marks_parse() {
        let step = |d: &str, n: &str| parse_step_mark(d, n);
        let mark = |tokens, samples| MarkParse::Step(StepMark { tokens, samples });
        assert_eq!(step("gputrace", "step"), mark(None, None));
        assert_eq!(step("gputrace", "step tokens=4096 samples=8"), mark(Some(4096), Some(8)));
        assert_eq!(
            step("gputrace", "step samples=8 tokens=4096"),
            mark(Some(4096), Some(8)),
            "any order"
        );
        assert_eq!(
            step("gputrace", "step  tokens=1 lr=3e-4"),
            mark(Some(1), None),
            "unknown keys are ignored"
        );
        assert_eq!(
            step("", "gputrace.step tokens=7"),
            mark(Some(7), None),
            "any domain with the prefix"
        );
        assert_eq!(step("torch", "gputrace.step"), mark(None, None));
        assert_eq!(
            step("", "step tokens=7"),
            MarkParse::NotAStepMark,
            "`step` alone only in domain gputrace"
        );
        assert_eq!(step("gputrace", "steps"), MarkParse::NotAStepMark);
        assert_eq!(step("", "gputrace.steps"), MarkParse::NotAStepMark);
        assert_eq!(step("gputrace", "exit status=0"), MarkParse::NotAStepMark);
        for bad in [
            "step tokens=lots",
            "step tokens=-1",
            "step tokens=1 tokens=2",
            "step tokens",
            "step samples=",
            "step tokens=99999999999999999999999",
        ] {
            assert_eq!(step("gputrace", bad), MarkParse::Malformed, "{bad}");
        }
    }

    #[test]
    fn exit_marks_parse() {
        assert_eq!(parse_exit_mark("gputrace", "exit status=0"), Some(ExitMark::Status(0)));
        assert_eq!(parse_exit_mark("gputrace", "exit status=-9"), Some(ExitMark::Status(-9)));
        assert_eq!(
            parse_exit_mark("gputrace", "exit exception=RuntimeError"),
            Some(ExitMark::Exception("RuntimeError".into()))
        );
        assert_eq!(parse_exit_mark("gputrace", "exit status=x"), None);
        assert_eq!(parse_exit_mark("gputrace", "exit exception="), None);
        assert_eq!(parse_exit_mark("other", "exit status=1"), None);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u64> = (1..=20).collect();
        assert_eq!(percentile(&v, 0.5), Some(10));
        assert_eq!(percentile(&v, 0.95), Some(19));
        assert_eq!(percentile(&[5], 0.95), Some(5));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn util_windows_count_each_window_once() {
        // Window 10, span [100, 155): windows [100,110) .. [150,155) (partial, 5 ns).
        let mut u = UtilWindows::new(10);
        u.work(100);
        u.kernel(100, 101); // window 0
        u.kernel(100, 125); // windows 0-2
        u.kernel(105, 112); // within 0-1, already marked
        u.kernel(140, 141); // window 4
        u.kernel(152, 155); // window 5, the partial one
        assert_eq!(u.busy_ns(Some(100), Some(155)), 4 * 10 + 5);
        // Window 3 ([130, 140)) had nothing.
        let mut u = UtilWindows::new(10);
        u.work(100);
        u.kernel(129, 131); // windows 2 and 3
        assert_eq!(u.busy_ns(Some(100), Some(200)), 20);
        assert_eq!(UtilWindows::new(10).busy_ns(None, None), 0);
    }
}
