//! Turning command-line paths into the list of trace files to read.

use crate::error::CliError;
use std::path::{Path, PathBuf};

/// Expand files and directories: a directory contributes its `*.gtrace`
/// files (not recursive), sorted by name so rank order is stable. Files are
/// taken as given, whatever their extension (the reader checks content).
pub fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, CliError> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(CliError::io(p))?;
        if meta.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(CliError::io(p))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| is_trace_name(f))
                .collect();
            if found.is_empty() {
                return Err(CliError::NoTraces(p.clone()));
            }
            found.sort();
            out.extend(found);
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

fn is_trace_name(p: &Path) -> bool {
    p.extension().is_some_and(|e| e == gputrace_format::FILE_EXTENSION) && p.is_file()
}
