//! The Python side that `gputrace run` gives a traced job, with no install:
//! the `gputrace` module (`gputrace.step(tokens=..., samples=...)`) and a
//! `sitecustomize` that registers PyTorch's optimizer-step hook and chains
//! to the one it shadows. Both files are built into the binary and written
//! to a private directory under the output directory for the length of the
//! run (`.gputrace-python-<pid>/`, removed when the run ends).
//!
//! Layout: `lib/gputrace/__init__.py` (always on `PYTHONPATH`, so `import
//! gputrace` works) and `hooks/sitecustomize.py` (on `PYTHONPATH` only with
//! the hooks on; `--no-python-hooks` leaves it off, so nothing of ours runs
//! at interpreter start-up).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

const MODULE: &str = include_str!("../python/lib/gputrace/__init__.py");
const SITECUSTOMIZE: &str = include_str!("../python/hooks/sitecustomize.py");

/// The written directory; removed on drop.
#[derive(Debug)]
pub struct PythonDir {
    root: PathBuf,
    hooks: bool,
}

impl PythonDir {
    /// Write the files under `out_dir`. `hooks`: put the sitecustomize on
    /// the path too. Fails if the directory exists (never writes through
    /// something another process made).
    pub fn create(out_dir: &Path, hooks: bool) -> std::io::Result<PythonDir> {
        let root = out_dir.join(format!(".gputrace-python-{}", std::process::id()));
        // Private to this user: nobody else can plant a name inside it.
        std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700).create(&root)?;
        let dir = PythonDir { root, hooks };
        std::fs::create_dir_all(dir.root.join("lib/gputrace"))?;
        std::fs::write(dir.root.join("lib/gputrace/__init__.py"), MODULE)?;
        if hooks {
            std::fs::create_dir(dir.root.join("hooks"))?;
            std::fs::write(dir.root.join("hooks/sitecustomize.py"), SITECUSTOMIZE)?;
        }
        Ok(dir)
    }

    /// `PYTHONPATH` for the job: ours first (the sitecustomize must be found
    /// before any other), then what the job had.
    pub fn pythonpath(&self, existing: Option<OsString>) -> OsString {
        let mut parts: Vec<PathBuf> = Vec::new();
        if self.hooks {
            parts.push(self.root.join("hooks"));
        }
        parts.push(self.root.join("lib"));
        let mut path = std::env::join_paths(&parts).unwrap_or_default();
        if let Some(rest) = existing.filter(|p| !p.is_empty()) {
            path.push(":");
            path.push(rest);
        }
        path
    }
}

impl Drop for PythonDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_written_put_first_on_the_path_and_removed() {
        let out = tempfile::tempdir().unwrap();
        let root;
        {
            let dir = PythonDir::create(out.path(), true).unwrap();
            root = dir.root.clone();
            assert!(root.join("hooks/sitecustomize.py").is_file());
            assert!(root.join("lib/gputrace/__init__.py").is_file());
            let path = dir.pythonpath(Some("/theirs".into()));
            let parts: Vec<PathBuf> = std::env::split_paths(&path).collect();
            assert_eq!(parts, [root.join("hooks"), root.join("lib"), PathBuf::from("/theirs")]);
            // A second run with the same pid in the same directory is refused.
            assert!(PythonDir::create(out.path(), true).is_err());
        }
        assert!(!root.exists());
        let dir = PythonDir::create(out.path(), false).unwrap();
        assert!(!dir.root.join("hooks").exists());
        assert_eq!(std::env::split_paths(&dir.pythonpath(None)).count(), 1);
    }
}
