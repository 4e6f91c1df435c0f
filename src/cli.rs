//! Command-line definition. clap types stay here and in `cmd/`; library
//! crates take plain config structs.

use crate::cmd;
use crate::error::CliError;
use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// gputrace: GPU timeline profiler for CUDA and NCCL jobs.
#[derive(Debug, Parser)]
#[command(name = "gputrace", version = cmd::version::VERSION_LINE, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Colour the text output: auto (on a terminal; NO_COLOR turns it off, FORCE_COLOR on),
    /// always or never.
    #[arg(long, global = true, value_enum, default_value = "auto", value_name = "WHEN")]
    pub color: crate::color::ColorChoice,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write a SYNTHETIC multi-rank training job (no GPU needed) and show what to run next.
    Demo(cmd::demo::DemoArgs),
    /// Run a command with the capture agent injected: `gputrace run -o DIR -- python train.py`.
    Run(Box<cmd::run::RunArgs>),
    /// Line up the ranks of a distributed job: clock offsets, collective skew, stragglers and why.
    Compare(cmd::compare::CompareArgs),
    /// This run against that one: categories, kernels, steps, collectives (bus bandwidth), scaling efficiency across GPU counts; `--fail-if-slower 5%` (exit 3).
    Diff(cmd::diff::DiffArgs),
    /// Convert PyTorch profiler (Kineto) traces to gputrace files; prints the size ratio.
    Import(cmd::import::ImportArgs),
    /// Write traces for the Perfetto UI (protobuf), chrome://tracing, TensorBoard, HTA (Kineto JSON), or Parquet tables for SQL engines.
    Export(cmd::export::ExportArgs),
    /// Where each GPU's time went: compute, communication, transfer, explained idle; findings.
    Report(cmd::report::ReportArgs),
    /// Prometheus metrics of finished traces (the families `run --metrics` serves live).
    Metrics(cmd::metrics::MetricsArgs),
    /// Show what trace files hold: header, event counts, time span, losses, damage.
    Info(cmd::info::InfoArgs),
    /// Print the version, the build, and where the capture agent library is.
    Version(cmd::version::VersionArgs),
}

/// Parse arguments and run the command.
pub fn run() -> Result<ExitCode, CliError> {
    let cli = Cli::parse();
    crate::color::set(cli.color);
    match cli.command {
        Command::Demo(a) => cmd::demo::run(&a),
        Command::Export(a) => cmd::export::run(&a),
        Command::Info(a) => cmd::info::run(&a),
        Command::Metrics(a) => cmd::metrics::run(&a),
        Command::Report(a) => cmd::report::run(&a),
        Command::Run(a) => cmd::run::run(&a),
        Command::Compare(a) => cmd::compare::run(&a),
        Command::Diff(a) => cmd::diff::run(&a),
        Command::Import(a) => cmd::import::run(&a),
        Command::Version(a) => cmd::version::run(&a),
    }
}
