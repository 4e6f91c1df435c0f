//! Errors of the format crate. Every read error names the file and, where
//! it applies, the byte offset.

use std::io;
use std::path::PathBuf;

/// An error reading or writing a trace file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The file could not be opened, mapped or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The file does not start with the gputrace magic.
    #[error("{}: not a gputrace trace (starts with {found}; a gputrace trace starts with \"GPUTRACE\")", path.display())]
    NotATrace {
        /// The file.
        path: PathBuf,
        /// The first bytes, escaped.
        found: String,
    },
    /// Written by a newer, incompatible gputrace.
    #[error("{}: format version {major}.{minor} is newer than this gputrace reads (version {supported}.x); upgrade gputrace", path.display())]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// Major version in the file.
        major: u16,
        /// Minor version in the file.
        minor: u16,
        /// Major version this build reads.
        supported: u16,
    },
    /// The bytes are damaged or inconsistent.
    #[error("{}: corrupt at byte offset {offset}: {what}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Offset of the damaged chunk or field.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// Writing failed (the writer does not know file names; the caller adds it).
    #[error("writing the trace failed: {0}")]
    Write(#[source] io::Error),
}

/// Result alias.
pub type Result<T, E = FormatError> = std::result::Result<T, E>;
