//! `gputrace diff A B`: this run (B) against that one (A, the baseline).
//! Each side is a trace file, a directory of ranks, or Kineto traces. The
//! logic lives in the `gputrace-diff` crate; this is argument parsing and
//! the exit code: 3 when `--fail-if-slower P%` and B is more than P% slower.
//! Besides categories and kernels the diff has steps (count, p50/p95, per-step
//! means, the slowest step), collectives with bus bandwidth, and the scaling
//! efficiency when A and B ran on different GPU counts.

use crate::error::CliError;
use crate::inputs;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Exit code when `--fail-if-slower` trips (0: within it; 2: bad input).
pub const SLOWER_EXIT: u8 = 3;

/// Arguments of `gputrace diff`.
#[derive(Debug, clap::Args)]
pub struct DiffArgs {
    /// The baseline run: a trace file, a directory of ranks, or Kineto traces.
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The run to compare with it.
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// Write the diff as JSON.
    #[arg(long)]
    pub json: bool,
    /// Exit with code 3 when B's time per GPU is more than this much
    /// slower than A's (`5%` or `5`).
    #[arg(long, value_parser = parse_pct, value_name = "PCT")]
    pub fail_if_slower: Option<f64>,
    /// Kernels (and collectives) shown in the text output.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
}

fn parse_pct(s: &str) -> Result<f64, crate::values::ValueError> {
    use crate::values::ValueError;
    let v: f64 = s
        .trim()
        .trim_end_matches('%')
        .parse()
        .map_err(|_| ValueError::NotPercent(s.to_string()))?;
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(ValueError::NegativePercent(s.to_string()))
    }
}

fn analyse(path: &PathBuf) -> Result<gputrace_analysis::Report, CliError> {
    let files = inputs::expand(std::slice::from_ref(path))?;
    let traces = files.iter().map(|f| inputs::open(f)).collect::<Result<Vec<_>, _>>()?;
    let opts = gputrace_analysis::Options {
        // Every kernel name, so that kernels match by name across runs.
        top_kernels: usize::MAX,
        threads: inputs::threads()?,
        ..gputrace_analysis::Options::default()
    };
    let mut report = gputrace_analysis::analyze(&traces, &opts).map_err(|e| match e {
        gputrace_analysis::AnalysisError::NoTraces => CliError::NoTraces(path.clone()),
        other => CliError::from(other),
    })?;
    // The scaling section names each run's stragglers, as `gputrace report` does.
    gputrace_compare::with_stragglers(&mut report, &traces, &opts.classifier);
    Ok(report)
}

/// Run `gputrace diff`.
pub fn run(args: &DiffArgs) -> Result<ExitCode, CliError> {
    let (a, b) = (analyse(&args.a)?, analyse(&args.b)?);
    super::warn_lossy(&args.a, &a);
    super::warn_lossy(&args.b, &b);
    let d = gputrace_diff::diff(&a, &b);
    let mut out = std::io::stdout().lock();
    if args.json {
        super::write_json(&mut out, &d)?;
    } else {
        out.write_all(gputrace_diff::render_text(&d, args.top).as_bytes())
            .map_err(CliError::Output)?;
    }
    if args.fail_if_slower.is_some_and(|p| d.slower_pct() > p) {
        eprintln!(
            "gputrace: B is {:.1}% slower than A (limit {}%)",
            d.slower_pct(),
            args.fail_if_slower.unwrap_or(0.0)
        );
        return Ok(ExitCode::from(SLOWER_EXIT));
    }
    Ok(ExitCode::SUCCESS)
}
