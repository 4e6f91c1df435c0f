//! `gputrace metrics FILE|DIR...`: the Prometheus text exposition of finished traces,
//! the same families `gputrace run --metrics` serves live (docs/always-on.md).

use crate::error::CliError;
use crate::inputs;
use gputrace_analysis::{analyze, AnalysisError, Options};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `gputrace metrics`.
#[derive(Debug, clap::Args)]
pub struct MetricsArgs {
    /// Trace files, or directories of them (one file per rank).
    #[arg(required = true, value_name = "FILE|DIR")]
    pub paths: Vec<PathBuf>,
    /// Value of the `job` label on every series (default: no `job` label).
    #[arg(long, value_name = "NAME")]
    pub job: Option<String>,
    /// Write the exposition to this file (through a temporary file, as node_exporter's
    /// textfile collector wants) instead of stdout.
    #[arg(short, long, value_name = "FILE.prom")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub classify: super::ClassifyArgs,
}

/// Run `gputrace metrics`.
pub fn run(args: &MetricsArgs) -> Result<ExitCode, CliError> {
    let files = inputs::expand(&args.paths)?;
    let traces = files.iter().map(|f| inputs::open(f)).collect::<Result<Vec<_>, _>>()?;
    let opts = Options {
        classifier: args.classify.classifier()?,
        threads: inputs::threads()?,
        ..Options::default()
    };
    let report = analyze(&traces, &opts).map_err(|e| match e {
        AnalysisError::NoTraces => CliError::NoTraces(args.paths[0].clone()),
        other => CliError::from(other),
    })?;
    super::warn_lossy(&args.paths[0], &report);
    let metrics = gputrace_metrics::Options { job: args.job.clone() };
    let text = gputrace_metrics::report_exposition(&report, &gputrace_metrics::event_counts(&traces), &metrics).render();
    match &args.output {
        Some(path) => inputs::write_via_temp(path, |mut f| f.write_all(text.as_bytes()).map_err(CliError::io(path)))?,
        None => std::io::stdout().lock().write_all(text.as_bytes()).map_err(CliError::Output)?,
    }
    Ok(ExitCode::SUCCESS)
}
