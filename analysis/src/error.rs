//! Errors of the analysis crate.

/// Why an analysis could not be produced.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AnalysisError {
    /// A trace could not be decoded (the format error names the file and offset).
    #[error(transparent)]
    Format(#[from] gputrace_format::FormatError),
    /// Nothing to analyze.
    #[error("no traces to analyze")]
    NoTraces,
}

/// Result alias.
pub type Result<T, E = AnalysisError> = std::result::Result<T, E>;
