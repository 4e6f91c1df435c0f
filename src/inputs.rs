//! Turning command-line paths into traces: gputrace files, or PyTorch
//! profiler (Kineto) JSON traces converted in memory.

use crate::error::CliError;
use gputrace_format::TraceFile;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Bytes read to recognise a file by its content.
const SNIFF: u64 = 64 * 1024;

/// Expand files and directories: a directory contributes its trace files
/// (`*.gtrace`, and JSON files that are Kineto traces), not recursively,
/// sorted by name so rank order is stable. Files are taken as given,
/// whatever their extension (the readers check content).
pub fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, CliError> {
    expand_where(paths, is_trace_file, |dir| CliError::NoTraces(dir.to_path_buf()))
}

/// [`expand`] with another test of a directory's files, and the error for a
/// directory where none passes.
pub fn expand_where(
    paths: &[PathBuf],
    keep: impl Fn(&Path) -> bool,
    none_found: impl Fn(&Path) -> CliError,
) -> Result<Vec<PathBuf>, CliError> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(CliError::io(p))?;
        if meta.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(CliError::io(p))?
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
pub fn run_records(paths: &[PathBuf]) -> Result<Vec<(String, gputrace_format::RunRecord)>, CliError> {
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
            let bytes = std::fs::read(&f).map_err(CliError::io(&f))?;
            let record =
                gputrace_format::RunRecord::from_json(&bytes).map_err(|reason| CliError::BadRunRecord { path: f.clone(), reason })?;
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
/// as `GPUTRACE_THREADS` says).
pub fn open(path: &Path) -> Result<TraceFile, CliError> {
    open_with_threads(path, threads()?)
}

/// [`open`], with a Kineto trace's chunks compressed as `gputrace import`
/// writes them, so that its size is the size of a converted file (for
/// `info`). The other commands read the trace back at once and leave
/// them uncompressed: compressing would only cost time (measured in
/// `BENCHMARKS.md`, "Kineto import").
pub fn open_as_imported(path: &Path) -> Result<TraceFile, CliError> {
    open_kineto_with(path, threads()?, true)
}

/// The threads a command may use, from `GPUTRACE_THREADS`: 0 (unset or
/// empty) for one per core.
pub fn threads() -> Result<usize, CliError> {
    threads_from(std::env::var_os("GPUTRACE_THREADS"))
}

fn threads_from(value: Option<std::ffi::OsString>) -> Result<usize, CliError> {
    let Some(v) = value else { return Ok(0) };
    let text = v.to_string_lossy();
    if text.trim().is_empty() {
        return Ok(0);
    }
    match text.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(CliError::BadEnv {
            name: "GPUTRACE_THREADS",
            value: text.into_owned(),
            what: "expected a number of threads, 1 or more (unset: one per core)",
        }),
    }
}

/// [`open`], parsing a large Kineto trace on at most `threads` threads (0:
/// one per core), for callers that open several traces at once.
pub fn open_with_threads(path: &Path, threads: usize) -> Result<TraceFile, CliError> {
    open_kineto_with(path, threads, false)
}

/// Open `path`; a Kineto trace is converted on at most `threads` threads,
/// its chunks zstd-compressed iff `compress`.
fn open_kineto_with(path: &Path, threads: usize, compress: bool) -> Result<TraceFile, CliError> {
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
        let trace = gputrace_kineto::to_trace_with(path, &opts)?;
        if let Some(what) = trace.trailer().and_then(|t| t.extra.get("import.truncated")) {
            crate::say::say(&format!("gputrace: warning: {}: {what}", path.display()));
        }
        return Ok(trace);
    }
    Ok(TraceFile::open(path)?)
}

/// Write `target` through a temporary file beside it (`<name>.partial`),
/// renamed into place only when `write` succeeds, so that a failed export or
/// import never leaves a half-written file under the real name. A target
/// that exists and is not a regular file (`/dev/null`, a FIFO, a symbolic
/// link) is written in place: renaming over it would replace the device or
/// the link with a file.
pub fn write_via_temp<T, E: From<CliError>>(target: &Path, write: impl FnOnce(std::fs::File) -> Result<T, E>) -> Result<T, E> {
    if writes_in_place(target) {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(target)
            .map_err(CliError::io(target))?;
        return write(file);
    }
    let mut name = target.as_os_str().to_os_string();
    name.push(".partial");
    let tmp = PathBuf::from(name);
    let file = std::fs::File::create(&tmp).map_err(CliError::io(&tmp))?;
    match write(file) {
        Ok(v) => {
            std::fs::rename(&tmp, target).map_err(CliError::io(target))?;
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
        write_via_temp(&link, |mut f| -> Result<(), CliError> {
            std::io::Write::write_all(&mut f, b"new").map_err(CliError::io(&link))
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
}
