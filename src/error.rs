//! The CLI's error type: every failure a command can report, each with the
//! file it concerns, and a hint where there is a known fix.

use std::path::PathBuf;

/// An error reported by a `gputrace` command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A trace could not be read.
    #[error(transparent)]
    Format(#[from] gputrace_format::FormatError),
    /// A PyTorch profiler (Kineto) trace could not be read.
    #[error(transparent)]
    Kineto(#[from] gputrace_kineto::KinetoError),
    /// A classification rules file could not be used.
    #[error(transparent)]
    Classify(#[from] gputrace_analysis::ClassifyError),
    /// A file or directory operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// An input path holds no trace files.
    #[error("{}: no traces found (*.gtrace files or PyTorch profiler JSON traces)", .0.display())]
    NoTraces(PathBuf),
    /// Some inputs failed; each was already reported.
    #[error("{failed} of {total} inputs could not be read (see above)")]
    SomeInputsFailed {
        /// How many failed.
        failed: usize,
        /// How many were given.
        total: usize,
    },
    /// The capture agent library was not found.
    #[error("the capture agent library (libgputrace_agent.so) was not found (searched: {searched})")]
    AgentMissing {
        /// Every place looked.
        searched: String,
    },
    /// The command to trace could not be started.
    #[error("cannot run {command}: {source}")]
    Spawn {
        /// The command.
        command: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An analysis could not be made from the inputs.
    #[error(transparent)]
    Analysis(gputrace_analysis::AnalysisError),
    /// The inputs could not be opened (a cause without a variant of its own here).
    #[error(transparent)]
    Input(gputrace_inputs::InputError),
    /// The analysis another output needs (`what`) could not be made.
    #[error("{what}: {source}")]
    AnalysisFor {
        /// What needed it.
        what: &'static str,
        /// Why not.
        #[source]
        source: gputrace_analysis::AnalysisError,
    },
    /// The ranks could not be compared.
    #[error(transparent)]
    Compare(#[from] gputrace_compare::CompareError),
    /// The comparison another output needs (`what`) could not be made.
    #[error("{what}: {source}")]
    CompareFor {
        /// What needed it.
        what: &'static str,
        /// Why not.
        #[source]
        source: gputrace_compare::CompareError,
    },
    /// A timeline for a viewer could not be written to `path`.
    #[error("{}: {source}", path.display())]
    Export {
        /// The file being written.
        path: PathBuf,
        /// Why.
        #[source]
        source: gputrace_viewer::ExportError,
    },
    /// Parquet tables could not be written.
    #[error(transparent)]
    Columnar(#[from] gputrace_columnar::ColumnarError),
    /// Writing to stdout failed (e.g. a closed pipe).
    #[error("writing output: {0}")]
    Output(#[source] std::io::Error),
    /// A run record (`gputrace-run.<host>.<pid>.json`) beside the traces could not be read.
    #[error("{}: {reason}", path.display())]
    BadRunRecord {
        /// The record.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        reason: gputrace_format::RunRecordError,
    },
    /// A command-line value that clap accepted but that cannot be used here.
    #[error("{flag}: {what}")]
    BadArgument {
        /// The flag.
        flag: &'static str,
        /// What is wrong.
        what: String,
    },
    /// An environment variable has a value gputrace cannot use.
    #[error("{name}={value:?}: {what}")]
    BadEnv {
        /// The variable.
        name: &'static str,
        /// Its value.
        value: String,
        /// What it should be.
        what: &'static str,
    },
}

impl From<gputrace_analysis::AnalysisError> for CliError {
    fn from(e: gputrace_analysis::AnalysisError) -> CliError {
        match e {
            gputrace_analysis::AnalysisError::Format(f) => CliError::Format(f),
            other => CliError::Analysis(other),
        }
    }
}

/// Each input error becomes the CLI error of the same cause, so that its hint applies.
impl From<gputrace_inputs::InputError> for CliError {
    fn from(e: gputrace_inputs::InputError) -> CliError {
        use gputrace_inputs::InputError as I;
        match e {
            I::Format(f) => CliError::Format(f),
            I::Kineto(k) => CliError::Kineto(k),
            I::Io { path, source } => CliError::Io { path, source },
            I::NoTraces(path) => CliError::NoTraces(path),
            I::BadRunRecord { path, reason } => CliError::BadRunRecord { path, reason },
            I::BadThreads { value } => CliError::BadEnv {
                name: gputrace_inputs::THREADS_ENV,
                value,
                what: I::THREADS_EXPECTED,
            },
            other => CliError::Input(other),
        }
    }
}

impl CliError {
    /// A one-line suggestion for a known cause.
    pub fn hint(&self) -> Option<&'static str> {
        use gputrace_format::FormatError as F;
        match self {
            CliError::Format(F::NotATrace { .. }) => {
                Some("gputrace reads .gtrace files (from `gputrace run` or `gputrace demo`) and PyTorch profiler (Kineto) JSON traces")
            }
            CliError::Format(F::UnsupportedVersion { .. }) => {
                Some("this trace was written by a newer gputrace; install that version to read it")
            }
            CliError::AgentMissing { .. } => Some("build it with `cargo build --release --workspace`, or set GPUTRACE_AGENT to its path"),
            CliError::Spawn { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                Some("check the command name and PATH; everything after `--` is the command to trace")
            }
            CliError::BadRunRecord { .. } => {
                Some("run records are written by `gputrace run`; remove or move a damaged one to analyse the traces without it")
            }
            CliError::NoTraces(_) => Some("run `gputrace demo` to write an example job, or pass .gtrace files or PyTorch profiler traces"),
            CliError::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => {
                Some("check the permissions of the path, or choose another with -o")
            }
            _ => None,
        }
    }

    /// Whether this is, at any depth, a write to a closed pipe: the reader
    /// (`head`) has what it wanted, which is a normal end, not a failure.
    pub fn is_broken_pipe(&self) -> bool {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(e) = cause {
            let kind = e
                .downcast_ref::<std::io::Error>()
                .map(std::io::Error::kind)
                .or_else(|| e.downcast_ref::<serde_json::Error>().and_then(serde_json::Error::io_error_kind));
            if kind == Some(std::io::ErrorKind::BrokenPipe) {
                return true;
            }
            cause = e.source();
        }
        false
    }

    /// Wrap an I/O error with its path.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> CliError {
        let path = path.into();
        move |source| CliError::Io { path, source }
    }
}
