//! The directory `-o` names: created if missing, and when it cannot be, a
//! message that says what is in the way instead of "File exists (os error 17)".

use crate::error::CliError;
use std::io;
use std::path::Path;

/// Create `dir` (and its parents) unless it is a directory already (or a
/// link to one). A file, a dangling link or a link to a file in its place
/// is an error saying which.
pub fn create(dir: &Path) -> Result<(), CliError> {
    match std::fs::create_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) => Err(CliError::Io {
            path: dir.to_path_buf(),
            source: explain(dir).unwrap_or(e),
        }),
    }
}

/// What stands where a directory was wanted, if that is why it cannot be created.
fn explain(dir: &Path) -> Option<io::Error> {
    let wrong = |what: String| Some(io::Error::new(io::ErrorKind::AlreadyExists, what));
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        // A component above it may be the file in the way.
        return dir
            .ancestors()
            .skip(1)
            .find(|a| std::fs::metadata(a).is_ok_and(|m| !m.is_dir()))
            .and_then(|a| wrong(format!("{} is a file, not a directory", a.display())));
    };
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(dir).map_or_else(|_| "?".into(), |t| t.display().to_string());
        return match std::fs::metadata(dir) {
            Err(_) => wrong(format!(
                "is a symbolic link to {target}, which does not exist; -o names the directory for the output: create {target} or choose another"
            )),
            Ok(m) if !m.is_dir() => wrong(format!(
                "is a symbolic link to {target}, which is not a directory; -o names the directory for the output"
            )),
            Ok(_) => None,
        };
    }
    if meta.is_file() {
        return wrong("is a file, not a directory; -o names the directory for the output".into());
    }
    if !meta.is_dir() {
        return wrong("exists and is not a directory; -o names the directory for the output".into());
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_in_the_way_is_named() {
        let root = tempfile::tempdir().unwrap();
        let p = |n: &str| root.path().join(n);
        std::fs::write(p("file"), b"").unwrap();
        std::os::unix::fs::symlink(p("missing"), p("dangling")).unwrap();
        std::os::unix::fs::symlink(p("file"), p("to-file")).unwrap();
        std::os::unix::fs::symlink(root.path(), p("to-dir")).unwrap();
        let msg = |n: &str| create(&p(n)).unwrap_err().to_string();
        assert!(
            msg("file").ends_with("file: is a file, not a directory; -o names the directory for the output"),
            "{}",
            msg("file")
        );
        assert!(
            msg("dangling").contains("is a symbolic link to") && msg("dangling").contains("which does not exist"),
            "{}",
            msg("dangling")
        );
        assert!(msg("to-file").contains("which is not a directory"), "{}", msg("to-file"));
        assert!(msg("file/sub").contains("file is a file, not a directory"), "{}", msg("file/sub"));
        for m in ["file", "dangling", "to-file", "file/sub"] {
            assert!(!msg(m).contains("os error"), "{}", msg(m));
        }
        create(&p("to-dir")).unwrap();
        create(&p("new/deeper")).unwrap();
        assert!(p("new/deeper").is_dir());
    }
}
