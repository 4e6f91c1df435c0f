//! Command-line paths to traces. Finding and opening them is `gputrace-inputs`;
//! this adds what a command prints: the warning line for a Kineto trace that
//! ended early, and errors as [`CliError`]s (with their hints).

use crate::error::CliError;
use gputrace_format::TraceFile;
use gputrace_inputs::InputError;
use std::path::Path;

pub use gputrace_inputs::{expand, expand_where, is_kineto_file, run_records, threads, write_via_temp};

/// [`gputrace_inputs::open`], warning on stderr when a Kineto trace ended early.
pub fn open(path: &Path) -> Result<TraceFile, CliError> {
    warn_truncated(path, gputrace_inputs::open(path))
}

/// [`gputrace_inputs::open_as_imported`], warning as [`open`] does.
pub fn open_as_imported(path: &Path) -> Result<TraceFile, CliError> {
    warn_truncated(path, gputrace_inputs::open_as_imported(path))
}

/// [`gputrace_inputs::open_with_threads`], warning as [`open`] does.
pub fn open_with_threads(path: &Path, threads: usize) -> Result<TraceFile, CliError> {
    warn_truncated(path, gputrace_inputs::open_with_threads(path, threads))
}

fn warn_truncated(path: &Path, opened: Result<TraceFile, InputError>) -> Result<TraceFile, CliError> {
    let trace = opened?;
    if let Some(what) = gputrace_inputs::truncation(&trace) {
        crate::say::say(&format!("gputrace: warning: {}: {what}", path.display()));
    }
    Ok(trace)
}
