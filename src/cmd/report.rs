//! `gputrace report FILE|DIR...`: where each GPU's time went (compute,
//! communication, transfer, explained idle) and what to do about it. The
//! analysis is `gputrace-analysis`; this file only maps arguments and prints.

use crate::error::CliError;
use crate::inputs;
use crate::values::ValueError;
use gputrace_analysis::{analyze, AnalysisError, HtaCompat, ModelFlops, Options, Precision, ProductiveOptions, DEFAULT_NVML_WINDOW_NS};
use gputrace_text::render_text;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `gputrace report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// Trace files (gputrace, or PyTorch profiler JSON), or directories of them (one file per rank).
    #[arg(required = true, value_name = "FILE|DIR")]
    pub paths: Vec<PathBuf>,
    /// Print one JSON document instead of text (schema: docs/metrics.md).
    #[arg(long)]
    pub json: bool,
    /// Also write the report as one self-contained HTML page (inline SVG, CSS and JS; no
    /// network), with the ranks' comparison for a multi-rank job. Stdout then gets one line
    /// saying where it is (or, with --json, the JSON document).
    #[arg(long, value_name = "FILE.html")]
    pub html: Option<PathBuf>,
    /// Print the main thread's Python stacks from host samples in folded form
    /// (`rank N;outer;…;inner weight`, weight = GPU-idle µs; wall µs for a trace
    /// without GPU activity) instead of the report, for flamegraph.pl, inferno
    /// or speedscope. See docs/host.md.
    #[arg(long, conflicts_with_all = ["json", "html"])]
    pub folded: bool,
    /// How many kernels, and idle gaps per GPU, to list.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,
    /// Analyze the job as an inference server even without its scraped metrics
    /// (e.g. a PyTorch profiler trace of a serving loop): engine iterations and
    /// the bubbles between them, from the GPU timeline alone (docs/serving.md).
    #[arg(long)]
    pub serving: bool,
    /// Price of one GPU-hour in US dollars: prices idle and exposed time.
    #[arg(long, value_name = "USD", value_parser = parse_price)]
    pub gpu_hour_cost: Option<f64>,
    #[command(flatten)]
    pub classify: super::ClassifyArgs,
    /// List which classification rule made how much GPU time communication (or kept
    /// it compute), to audit the classification on this trace.
    #[arg(long)]
    pub explain_classes: bool,
    /// Tokens each process trains (or serves) per step, when neither step marks
    /// (`step tokens=N`) nor the trace header (`gputrace run --tokens-per-step`) say.
    #[arg(long, value_name = "N")]
    pub tokens_per_step: Option<u64>,
    /// Samples each process handles per step, when neither step marks nor the header say.
    #[arg(long, value_name = "N")]
    pub samples_per_step: Option<u64>,
    /// Model parameters (e.g. 7e9, 7B, 350M), for MFU: 6·N FLOPs per trained token
    /// (2·N with --inference).
    #[arg(long, value_name = "N", value_parser = parse_count, conflicts_with_all = ["model_flops_per_token", "flops_per_step"])]
    pub model_params: Option<f64>,
    /// Model FLOPs per token, for MFU (instead of --model-params).
    #[arg(long, value_name = "F", value_parser = parse_count, conflicts_with = "flops_per_step")]
    pub model_flops_per_token: Option<f64>,
    /// Model FLOPs each process does per step, for MFU (instead of --model-params).
    #[arg(long, value_name = "F", value_parser = parse_count)]
    pub flops_per_step: Option<f64>,
    /// With --model-params: forward only, 2·N FLOPs per token.
    #[arg(long, requires = "model_params")]
    pub inference: bool,
    /// Precision of the dense tensor-core peak MFU is measured against [default: the one most GEMM time ran in, read from the kernels' names (e4m3/e5m2/fp8, bf16, tf32, fp16), else bf16]
    #[arg(long, value_name = "bf16|fp16|fp8|tf32", value_parser = parse_precision)]
    pub precision: Option<Precision>,
    /// Peak TFLOPS per GPU, instead of the table's (for a device not in it).
    #[arg(long, value_name = "T", value_parser = parse_count)]
    pub peak_tflops: Option<f64>,
    /// GPU-Util's sampling window in seconds (nvidia-smi: 1/6 s on most GPUs, up to 1 s).
    #[arg(long, value_name = "SECONDS", value_parser = parse_window)]
    pub gpu_util_window: Option<u64>,
    /// HTA-compatible: numbers identical to Holistic Trace Analysis' temporal breakdown, not
    /// gputrace's definitions. With HTA's defaults: the last profiler step and GPU events not
    /// linked to a CPU call are left out (for traces with two or more ProfilerStep names),
    /// times are rounded inward to whole µs, only kernels HTA calls computation are compute,
    /// and synchronization records count as non-compute GPU work. The JSON's `hta_compat`
    /// says which mode produced it. Definitions: docs/metrics.md.
    #[arg(long)]
    pub hta: bool,
    /// HTA-compatible (implies --hta), keeping the last profiler step, as HTA's
    /// `include_last_profiler_step=True`.
    #[arg(long)]
    pub hta_include_last_step: bool,
    /// HTA-compatible (implies --hta), without HTA's µs rounding, as HTA with
    /// `HTA_DISABLE_NS_ROUNDING=1`.
    #[arg(long)]
    pub hta_no_rounding: bool,
}

impl ReportArgs {
    /// The HTA-compatible mode the flags ask for (`None`: gputrace's own definitions).
    fn hta(&self) -> Option<HtaCompat> {
        (self.hta || self.hta_include_last_step || self.hta_no_rounding).then_some(HtaCompat {
            drop_last_step: !self.hta_include_last_step,
            linked_only: true,
            round_to_us: !self.hta_no_rounding,
        })
    }
}

impl ReportArgs {
    /// The productive layer's settings from the flags (run records are read separately).
    pub fn productive(&self) -> ProductiveOptions {
        let model = match (self.model_params, self.model_flops_per_token, self.flops_per_step) {
            (Some(params), _, _) => Some(ModelFlops::Params {
                params,
                inference: self.inference,
            }),
            (None, Some(f), _) => Some(ModelFlops::PerToken(f)),
            (None, None, Some(f)) => Some(ModelFlops::PerStep(f)),
            (None, None, None) => None,
        };
        ProductiveOptions {
            tokens_per_step: self.tokens_per_step,
            samples_per_step: self.samples_per_step,
            model,
            precision: self.precision,
            peak_tflops: self.peak_tflops,
            nvml_window_ns: self.gpu_util_window.unwrap_or(DEFAULT_NVML_WINDOW_NS),
            run_records: Vec::new(),
        }
    }
}

/// A positive count with an optional suffix: `7e9`, `7B`, `350M`, `1.5k`, `2T`.
pub fn parse_count(s: &str) -> Result<f64, ValueError> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() && !t.ends_with(['e', 'E']) => {
            let m = match c.to_ascii_lowercase() {
                'k' => 1e3,
                'm' => 1e6,
                'b' | 'g' => 1e9,
                't' => 1e12,
                _ => {
                    return Err(ValueError::UnknownSuffix {
                        given: s.to_string(),
                        suffix: c,
                    })
                }
            };
            (&t[..i], m)
        }
        _ => (t, 1.0),
    };
    match num.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v * mult),
        _ => Err(ValueError::NotPositive(s.to_string())),
    }
}

fn parse_precision(s: &str) -> Result<Precision, ValueError> {
    Precision::parse(s).ok_or_else(|| ValueError::Precision(s.to_string()))
}

/// Seconds (e.g. 0.1667, 1/6, 1) to whole nanoseconds, at least 1 µs.
fn parse_window(s: &str) -> Result<u64, ValueError> {
    let v = match s.split_once('/') {
        Some((a, b)) => match (a.trim().parse::<f64>(), b.trim().parse::<f64>()) {
            (Ok(a), Ok(b)) if b != 0.0 => a / b,
            _ => f64::NAN,
        },
        None => s.trim().parse::<f64>().unwrap_or(f64::NAN),
    };
    if v.is_finite() && (1e-6..=3600.0).contains(&v) {
        Ok((v * 1e9).round() as u64)
    } else {
        Err(ValueError::Window(s.to_string()))
    }
}

pub(crate) fn parse_price(s: &str) -> Result<f64, ValueError> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(ValueError::Price(s.to_string())),
    }
}

/// Run `gputrace report`.
pub fn run(args: &ReportArgs) -> Result<ExitCode, CliError> {
    let files = inputs::expand(&args.paths)?;
    let run_records = inputs::run_records(&args.paths)?;
    let traces = files.iter().map(|f| inputs::open(f)).collect::<Result<Vec<_>, _>>()?;
    let classifier = args.classify.classifier()?;
    let opts = Options {
        classifier,
        explain_classes: args.explain_classes,
        top_gaps: args.top,
        top_kernels: args.top,
        gpu_hour_cost: args.gpu_hour_cost,
        hta: args.hta(),
        threads: inputs::threads()?,
        productive: ProductiveOptions {
            run_records,
            ..args.productive()
        },
        ..Options::default()
    };
    let mut report = analyze(&traces, &opts).map_err(|e| match e {
        AnalysisError::NoTraces => CliError::NoTraces(args.paths[0].clone()),
        other => CliError::from(other),
    })?;
    if args.serving && report.serving.is_empty() {
        let gpu: Vec<&gputrace_format::TraceFile> = traces.iter().filter(|t| !gputrace_analysis::serving::is_serving_trace(t)).collect();
        report.serving.extend(gputrace_analysis::serving::timeline_serving(&gpu));
    }
    // HTA's numbers are HTA's: no findings of gputrace's own are added to them.
    let comparison = match opts.hta {
        None => gputrace_compare::with_stragglers(&mut report, &traces, &opts.classifier),
        Some(_) => gputrace_compare::report_comparison(&report, &traces, &opts.classifier),
    };
    let mut out = std::io::stdout().lock();
    if let Some(path) = &args.html {
        let inputs: Vec<String> = args.paths.iter().map(|p| p.display().to_string()).collect();
        let bytes = write_html(path, &report, comparison.as_ref(), inputs)?;
        let line = format!("gputrace report: wrote {} ({bytes} bytes): open it in a browser", path.display());
        if args.json {
            super::say(&line);
        } else {
            writeln!(out, "{}", gputrace_format::text::escape_output(&line, false)).map_err(CliError::Output)?;
            return Ok(ExitCode::SUCCESS);
        }
    }
    if args.folded {
        let folded = gputrace_analysis::host::folded(&report);
        if folded.is_empty() {
            eprintln!("gputrace report: no host samples in these traces (record them with `gputrace run`; see docs/host.md)");
        }
        out.write_all(folded.as_bytes()).map_err(CliError::Output)?;
    } else if args.json {
        super::write_json(&mut out, &report)?;
    } else {
        let color = crate::color::enabled(out.is_terminal());
        out.write_all(render_text(&report, color).as_bytes()).map_err(CliError::Output)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Write `report` as an HTML page to `path` (through a temporary file), with the ranks'
/// comparison ([`gputrace_compare::report_comparison`]; when it could not be made, the page
/// says why). Returns
/// the page's size in bytes.
pub fn write_html(
    path: &std::path::Path,
    report: &gputrace_analysis::Report,
    comparison: Option<&Result<gputrace_compare::Comparison, gputrace_compare::CompareError>>,
    inputs: Vec<String>,
) -> Result<usize, CliError> {
    let page = gputrace_html::Page {
        report,
        comparison: comparison.and_then(|c| c.as_ref().ok()),
        comparison_note: comparison.and_then(|c| c.as_ref().err().map(ToString::to_string)),
        inputs,
    };
    let html = gputrace_html::Html::default().render(&page);
    crate::inputs::write_via_temp(path, |mut file| file.write_all(html.as_bytes()).map_err(CliError::io(path)))?;
    Ok(html.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hta_flags() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            report: ReportArgs,
        }
        let mode = |args: &[&str]| Cli::parse_from([&["report"], args, &["t.json"]].concat()).report.hta();
        assert_eq!(mode(&[]), None, "gputrace's own definitions by default");
        assert_eq!(mode(&["--hta"]), Some(HtaCompat::DEFAULTS));
        let include = mode(&["--hta-include-last-step"]).unwrap();
        assert!(!include.drop_last_step && include.linked_only && include.round_to_us);
        let exact = mode(&["--hta", "--hta-no-rounding"]).unwrap();
        assert!(exact.drop_last_step && !exact.round_to_us);
    }

    #[test]
    fn counts_windows_and_model_flags() {
        assert_eq!(parse_count("7e9"), Ok(7e9));
        assert_eq!(parse_count("7B"), Ok(7e9));
        assert_eq!(parse_count("350M"), Ok(3.5e8));
        assert_eq!(parse_count("1.5k"), Ok(1500.0));
        assert!(parse_count("0").is_err() && parse_count("7Q").is_err() && parse_count("-1").is_err());
        assert_eq!(parse_window("1/6"), Ok(166_666_667));
        assert_eq!(parse_window("1"), Ok(1_000_000_000));
        assert!(parse_window("0").is_err() && parse_window("1/0").is_err());
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            report: ReportArgs,
        }
        let p = |args: &[&str]| Cli::try_parse_from([&["report"], args, &["t.json"]].concat()).map(|c| c.report.productive());
        let o = p(&["--model-params", "7B", "--inference", "--precision", "fp8"]).unwrap();
        assert_eq!(
            o.model,
            Some(ModelFlops::Params {
                params: 7e9,
                inference: true
            })
        );
        assert_eq!(o.precision, Some(Precision::Fp8));
        assert_eq!(o.nvml_window_ns, DEFAULT_NVML_WINDOW_NS);
        assert!(
            p(&["--model-params", "7B", "--flops-per-step", "1e15"]).is_err(),
            "one source of model FLOPs"
        );
        assert!(p(&["--inference"]).is_err(), "--inference needs --model-params");
        assert_eq!(p(&["--flops-per-step", "1e15"]).unwrap().model, Some(ModelFlops::PerStep(1e15)));
    }

    #[test]
    fn prices() {
        assert_eq!(parse_price("2.5"), Ok(2.5));
        assert!(parse_price("-1").is_err());
        assert!(parse_price("NaN").is_err());
        assert!(parse_price("cheap").is_err());
    }
}
