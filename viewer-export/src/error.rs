//! Errors of the exporters.

use gputrace_format::FormatError;
use std::io;

/// An error while exporting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExportError {
    /// Reading an input trace failed (damaged chunk body, unreadable file).
    #[error(transparent)]
    Read(#[from] FormatError),
    /// Writing the output failed. The writer does not know file names; the
    /// caller adds them.
    #[error("writing the export failed: {0}")]
    Write(#[source] io::Error),
    /// The job has no input trace.
    #[error("nothing to export: no input trace")]
    NoInput,
    /// The filter leaves nothing (no rank, device or time matches).
    #[error("nothing to export: {0}")]
    EmptySelection(String),
    /// The walk broke an invariant the writer relies on (a bug: the output would be
    /// wrong, so it is not written as if it were right).
    #[error("internal error in the exporter: {0} (please report it with the input trace)")]
    Internal(String),
}

impl From<io::Error> for ExportError {
    fn from(e: io::Error) -> Self {
        ExportError::Write(e)
    }
}

/// Result alias.
pub type Result<T, E = ExportError> = std::result::Result<T, E>;
