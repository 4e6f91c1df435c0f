//! `gputrace report FILE|DIR...`: where each GPU's time went (compute,
//! communication, transfer, explained idle) and what to do about it. The
//! analysis is `gputrace-analysis`; this file only maps arguments and prints.

use crate::error::CliError;
use crate::inputs;
use gputrace_analysis::{analyze, render_text, AnalysisError, Classifier, HtaCompat, Options};
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
    /// How many kernels, and idle gaps per GPU, to list.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,
    /// Price of one GPU-hour in US dollars: prices idle and exposed time.
    #[arg(long, value_name = "USD", value_parser = parse_price)]
    pub gpu_hour_cost: Option<f64>,
    /// Also count kernels whose name contains this (case-insensitive) as
    /// communication; repeatable. NCCL, RCCL, DeepEP, NVSHMEM and custom
    /// all-reduce kernels are recognized already.
    #[arg(long = "comm-pattern", value_name = "TEXT")]
    pub comm_patterns: Vec<String>,
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

fn parse_price(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("`{s}` is not a price (a number of US dollars, e.g. 2.50)")),
    }
}

/// Color only on a terminal, and never when `NO_COLOR` is set to anything non-empty.
fn use_color(is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    is_terminal && !matches!(no_color, Some(v) if !v.is_empty())
}

/// Run `gputrace report`.
pub fn run(args: &ReportArgs) -> Result<ExitCode, CliError> {
    let files = inputs::expand(&args.paths)?;
    let traces = files.iter().map(|f| inputs::open(f)).collect::<Result<Vec<_>, _>>()?;
    let classifier = args.comm_patterns.iter().fold(Classifier::default(), |c, p| c.with_pattern(p));
    let opts = Options {
        classifier,
        top_gaps: args.top,
        top_kernels: args.top,
        gpu_hour_cost: args.gpu_hour_cost,
        hta: args.hta(),
        threads: inputs::threads()?,
        ..Options::default()
    };
    let report = analyze(&traces, &opts).map_err(|e| match e {
        AnalysisError::NoTraces => CliError::NoTraces(args.paths[0].clone()),
        other => CliError::from(other),
    })?;
    let mut out = std::io::stdout().lock();
    if args.json {
        super::write_json(&mut out, &report)?;
    } else {
        let color = use_color(out.is_terminal(), std::env::var_os("NO_COLOR"));
        out.write_all(render_text(&report, color).as_bytes()).map_err(CliError::Output)?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn color_rules() {
        assert!(use_color(true, None));
        assert!(use_color(true, Some("".into())), "an empty NO_COLOR does not count");
        assert!(!use_color(true, Some("1".into())));
        assert!(!use_color(false, None));
    }

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
    fn prices() {
        assert_eq!(parse_price("2.5"), Ok(2.5));
        assert!(parse_price("-1").is_err());
        assert!(parse_price("NaN").is_err());
        assert!(parse_price("cheap").is_err());
    }
}
