//! Errors of the Kineto importer. Every error about the input names the file
//! and, where it applies, the byte offset.

use std::io;
use std::path::PathBuf;

/// Where in the input a problem is. For gzip files `offset` counts bytes of
/// the decompressed JSON text (what a `zcat FILE | head -c` shows), and
/// `compressed_offset` how far into the file the decoder had read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Position {
    /// Byte offset in the JSON text.
    pub offset: u64,
    /// Bytes of the file consumed so far, for gzip input (`None` for plain JSON).
    pub compressed_offset: Option<u64>,
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.compressed_offset {
            None => write!(f, "byte offset {}", self.offset),
            Some(c) => write!(
                f,
                "byte offset {} of the decompressed JSON (about byte {c} of the gzip file)",
                self.offset
            ),
        }
    }
}

/// An error importing a Kineto trace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KinetoError {
    /// The file could not be opened or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The gzip stream is cut off or damaged.
    #[error("{}: gzip data ends or is corrupt at {at}: {source} (truncated download or copy?)", path.display())]
    Gzip {
        /// The file.
        path: PathBuf,
        /// Where decompression failed.
        at: Position,
        /// The decoder's error.
        #[source]
        source: io::Error,
    },
    /// The JSON text is malformed or ends early.
    #[error("{}: malformed JSON at {at}: {what}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// Where.
        at: Position,
        /// What is wrong.
        what: String,
    },
    /// A value has the wrong JSON type (e.g. `traceEvents` is not an array).
    #[error("{}: wrong type at {at}: {what}", path.display())]
    WrongType {
        /// The file.
        path: PathBuf,
        /// Where the value starts.
        at: Position,
        /// Which value, and what was expected.
        what: String,
    },
    /// Valid JSON, but not a Kineto trace.
    #[error("{}: not a PyTorch profiler (Kineto) trace: {why}", path.display())]
    NotKineto {
        /// The file.
        path: PathBuf,
        /// Why not.
        why: String,
    },
    /// Writing the gputrace output failed.
    #[error("{}: writing the converted trace failed: {source}", path.display())]
    Write {
        /// The input file being converted.
        path: PathBuf,
        /// The cause.
        #[source]
        source: gputrace_format::FormatError,
    },
    /// Reading back the converted trace failed (a bug, or out of memory).
    #[error(transparent)]
    Format(#[from] gputrace_format::FormatError),
}

impl KinetoError {
    /// The position in the input this error refers to, if any.
    pub fn position(&self) -> Option<Position> {
        match self {
            KinetoError::Gzip { at, .. } | KinetoError::Syntax { at, .. } | KinetoError::WrongType { at, .. } => Some(*at),
            _ => None,
        }
    }
}

/// A failure found while scanning, before the file name is attached.
#[derive(Debug)]
pub(crate) enum Fail {
    /// Reading the underlying input failed (`gzip` when inside a gzip decoder).
    Read { at: Position, source: io::Error, gzip: bool },
    /// Malformed or truncated JSON.
    Syntax { at: Position, what: String },
    /// A value of the wrong type.
    WrongType { at: Position, what: String },
    /// Not a Kineto trace.
    NotKineto(String),
    /// The gputrace writer failed.
    Write(gputrace_format::FormatError),
    /// More events than the one-pass import writes in memory; the import
    /// starts again in two passes (never reaches the user).
    TooManyForOnePass,
}

impl Fail {
    pub(crate) fn with_path(self, path: PathBuf) -> KinetoError {
        match self {
            Fail::Read { at, source, gzip: true } => KinetoError::Gzip { path, at, source },
            Fail::Read { source, .. } => KinetoError::Io { path, source },
            Fail::Syntax { at, what } => KinetoError::Syntax { path, at, what },
            Fail::WrongType { at, what } => KinetoError::WrongType { path, at, what },
            Fail::NotKineto(why) => KinetoError::NotKineto { path, why },
            Fail::Write(source) => KinetoError::Write { path, source },
            Fail::TooManyForOnePass => KinetoError::Io {
                path,
                source: io::Error::other("internal: too many events for one pass (the importer retries in two passes)"),
            },
        }
    }
}

/// A byte for an error message.
pub(crate) fn describe(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("'{}'", b as char)
    } else {
        format!("byte 0x{b:02x}")
    }
}
