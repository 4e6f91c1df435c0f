//! The inputs of a gputrace command, from paths to open traces: gputrace files
//! (memory-mapped), PyTorch profiler (Kineto) JSON traces converted in memory,
//! directories of ranks, and the run records `gputrace run` leaves beside them.
//! Also [`write_via_temp`], the one way outputs reach their final name.
//!
//! ```
//! let dir = tempfile::tempdir().unwrap();
//! let err = gputrace_inputs::expand(&[dir.path().to_path_buf()]).unwrap_err();
//! assert!(matches!(err, gputrace_inputs::InputError::NoTraces(_)));
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use gputrace_format::TraceFile;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Bytes read to recognise a file by its content.
const SNIFF: u64 = 64 * 1024;

/// The environment variable that bounds the threads a command uses.
pub const THREADS_ENV: &str = "GPUTRACE_THREADS";

/// Why an input could not be opened; every variant names the path or variable concerned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InputError {
    /// A gputrace file could not be read.
    #[error(transparent)]
    Format(#[from] gputrace_format::FormatError),
    /// A PyTorch profiler (Kineto) trace could not be read.
    #[error(transparent)]
    Kineto(#[from] gputrace_kineto::KinetoError),
    /// A file or directory operation failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A directory holds no trace files.
    #[error("{}: no traces found (*.gtrace files or PyTorch profiler JSON traces)", .0.display())]
    NoTraces(PathBuf),
    /// A run record (`gputrace-run.<host>.<pid>.json`) beside the traces could not be read.
    #[error("{}: {reason}", path.display())]
    BadRunRecord {
        /// The record.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        reason: gputrace_format::RunRecordError,
    },
    /// [`THREADS_ENV`] is set to something other than a positive number.
    #[error("{THREADS_ENV}={value:?}: {}", InputError::THREADS_EXPECTED)]
    BadThreads {
        /// Its value.
        value: String,
    },
}

impl InputError {
    /// What [`THREADS_ENV`] must hold.
    pub const THREADS_EXPECTED: &'static str = "expected a number of threads, 1 or more (unset: one per core)";

    /// Wrap an I/O error with its path.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> InputError {
        let path = path.into();
        move |source| InputError::Io { path, source }
    }
}

/// Expand files and directories: a directory contributes its trace files
/// (`*.gtrace`, and JSON files that are Kineto traces), not recursively,
/// sorted by name so rank order is stable. Files are taken as given,
/// whatever their extension (the readers check content).
pub fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, InputError> {
    expand_where(paths, is_trace_file, |dir| InputError::NoTraces(dir.to_path_buf()))
}

/// [`expand`] with another test of a directory's files, and the error for a
/// directory where none passes.
pub fn expand_where<E: From<InputError>>(
    paths: &[PathBuf],
    keep: impl Fn(&Path) -> bool,
    none_found: impl Fn(&Path) -> E,
) -> Result<Vec<PathBuf>, E> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(InputError::io(p))?;
        if meta.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(InputError::io(p))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.is_file() && keep(f))
                .collect();
            if found.is_empty() {
                return Err(none_found(p));
            }
            found.sort();
            out.extend(found);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

/// Whether a file is named as a run record of `gputrace run` (`gputrace-run.<host>.<pid>.json`).
fn is_run_record(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(gputrace_format::RunRecord::is_record_name)
}

/// The run records in the directories of the inputs (a directory itself, a file's
/// directory), each directory once, sorted by file name. A record that does not parse is
/// an error naming it.
pub fn run_records(paths: &[PathBuf]) -> Result<Vec<(String, gputrace_format::RunRecord)>, InputError> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for p in paths {
        let dir = if p.is_dir() {
            p.clone()
        } else {
            match p.parent() {
                Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                _ => PathBuf::from("."),
            }
        };
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|f| f.is_file() && is_run_record(f))
            .collect();
        files.sort();
        for f in files {
            let bytes = std::fs::read(&f).map_err(InputError::io(&f))?;
            let record =
                gputrace_format::RunRecord::from_json(&bytes).map_err(|reason| InputError::BadRunRecord { path: f.clone(), reason })?;
            out.push((f.display().to_string(), record));
        }
    }
    Ok(out)
}

fn head(path: &Path) -> Vec<u8> {
    let mut buf = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(SNIFF).read_to_end(&mut buf);
    }
    buf
}

/// Whether a file's content starts as a PyTorch profiler (Kineto) trace.
pub fn is_kineto_file(p: &Path) -> bool {
    gputrace_kineto::is_kineto(&head(p))
}

fn is_trace_file(p: &Path) -> bool {
    if is_run_record(p) {
        return false;
    }
    if p.extension().is_some_and(|e| e == gputrace_format::FILE_EXTENSION) {
        return true;
    }
    let name = p.file_name().map(|n| n.to_string_lossy().to_ascii_lowercase()).unwrap_or_default();
    (name.ends_with(".json") || name.ends_with(".json.gz")) && is_kineto_file(p)
}

/// Open a trace: a gputrace file directly (memory-mapped), a Kineto trace
/// converted in memory (parsed on one thread per core if large, or as many
/// as [`THREADS_ENV`] says). [`truncation`] says whether the conversion
/// stopped early.
pub fn open(path: &Path) -> Result<TraceFile, InputError> {
    open_with_threads(path, threads()?)
}

/// [`open`], with a Kineto trace's chunks compressed as `gputrace import`
/// writes them, so that its size is the size of a converted file (for
/// `info`). The other commands read the trace back at once and leave
/// them uncompressed: compressing would only cost time (measured in
/// `BENCHMARKS.md`, "Kineto import").
pub fn open_as_imported(path: &Path) -> Result<TraceFile, InputError> {
    open_kineto_with(path, threads()?, true)
}

/// [`open`], parsing a large Kineto trace on at most `threads` threads (0:
/// one per core), for callers that open several traces at once.
pub fn open_with_threads(path: &Path, threads: usize) -> Result<TraceFile, InputError> {
    open_kineto_with(path, threads, false)
}

/// Why a trace converted from Kineto JSON holds less than its input (the
/// input ended early), for a warning; `None` for a complete one.
pub fn truncation(trace: &TraceFile) -> Option<&str> {
    trace.trailer()?.extra.get("import.truncated").map(String::as_str)
}

/// The threads a command may use, from [`THREADS_ENV`]: 0 (unset or
/// empty) for one per core.
pub fn threads() -> Result<usize, InputError> {
    threads_from(std::env::var_os(THREADS_ENV))
}

fn threads_from(value: Option<std::ffi::OsString>) -> Result<usize, InputError> {
    let Some(v) = value else { return Ok(0) };
    let text = v.to_string_lossy();
    if text.trim().is_empty() {
        return Ok(0);
    }
    match text.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(InputError::BadThreads { value: text.into_owned() }),
    }
}

/// Open `path`; a Kineto trace is converted on at most `threads` threads,
/// its chunks zstd-compressed iff `compress`.
fn open_kineto_with(path: &Path, threads: usize, compress: bool) -> Result<TraceFile, InputError> {
    let h = head(path);
    if !h.starts_with(gputrace_format::chunk::MAGIC) && gputrace_kineto::is_kineto(&h) {
        let opts = gputrace_kineto::ImportOptions {
            threads,
            writer: gputrace_format::WriterOptions {
                compress,
                ..Default::default()
            },
            ..Default::default()
        };
        return Ok(gputrace_kineto::to_trace_with(path, &opts)?);
    }
    Ok(TraceFile::open(path)?)
}

/// Write `target` through a temporary file beside it (`<name>.partial`),
/// renamed into place only when `write` succeeds, so that a failed export or
/// import never leaves a half-written file under the real name. A target
/// that exists and is not a regular file (`/dev/null`, a FIFO, a symbolic
/// link) is written in place: renaming over it would replace the device or
/// the link with a file.
pub fn write_via_temp<T, E: From<InputError>>(target: &Path, write: impl FnOnce(std::fs::File) -> Result<T, E>) -> Result<T, E> {
    if writes_in_place(target) {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(target)
            .map_err(InputError::io(target))?;
        return write(file);
    }
    let mut name = target.as_os_str().to_os_string();
    name.push(".partial");
    let tmp = PathBuf::from(name);
    let file = std::fs::File::create(&tmp).map_err(InputError::io(&tmp))?;
    match write(file) {
        Ok(v) => {
            std::fs::rename(&tmp, target).map_err(InputError::io(target))?;
            Ok(v)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Whether `target` exists and is not a regular file (see [`write_via_temp`]).
fn writes_in_place(target: &Path) -> bool {
    std::fs::symlink_metadata(target).is_ok_and(|m| !m.file_type().is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_and_links_are_written_in_place() {
        // Only looked at: a wrong answer here must not replace /dev/null.
        assert!(writes_in_place(Path::new("/dev/null")));
        let dir = tempfile::tempdir().unwrap();
        let (file, link) = (dir.path().join("real.json"), dir.path().join("link.json"));
        assert!(!writes_in_place(&file), "a new file goes through a temporary one");
        std::fs::write(&file, b"old").unwrap();
        assert!(!writes_in_place(&file));
        std::os::unix::fs::symlink(&file, &link).unwrap();
        write_via_temp(&link, |mut f| -> Result<(), InputError> {
            std::io::Write::write_all(&mut f, b"new").map_err(InputError::io(&link))
        })
        .unwrap();
        assert!(
            std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink(),
            "the link stays a link"
        );
        assert_eq!(std::fs::read(&file).unwrap(), b"new");
        assert!(!dir.path().join("link.json.partial").exists());
    }

    #[test]
    fn a_failed_write_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.json");
        let r = write_via_temp(&target, |_| -> Result<(), InputError> {
            Err(InputError::NoTraces(PathBuf::from("x")))
        });
        assert!(r.is_err());
        assert!(!target.exists() && !dir.path().join("out.json.partial").exists());
    }

    #[test]
    fn thread_counts_from_the_environment() {
        let v = |s: &str| threads_from(Some(s.into()));
        assert_eq!(threads_from(None).unwrap(), 0);
        assert_eq!(v("").unwrap(), 0);
        assert_eq!(v(" 3 ").unwrap(), 3);
        for bad in ["0", "-2", "many", "1.5"] {
            let e = v(bad).unwrap_err().to_string();
            assert!(e.starts_with("GPUTRACE_THREADS=") && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn directories_contribute_traces_sorted_and_skip_run_records() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.gtrace", "a.gtrace", "gputrace-run.host.1.json", "notes.txt"] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let got = expand(&[dir.path().to_path_buf()]).unwrap();
        let names: Vec<_> = got.iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["a.gtrace", "b.gtrace"]);
        let missing = dir.path().join("missing");
        let e = expand(std::slice::from_ref(&missing)).unwrap_err();
        assert!(matches!(&e, InputError::Io { path, .. } if *path == missing), "{e}");
    }
}
