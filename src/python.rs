//! The Python side that `gputrace run` gives a traced job, with no install:
//! the `gputrace` module (`gputrace.step(tokens=..., samples=...)`) and a
//! `sitecustomize` that registers PyTorch's optimizer-step hook and chains
//! to the one it shadows. Both files are built into the binary and written
//! to a private directory under the output directory for the length of the
//! run (`.gputrace-python-<host>-<pid>/`, removed when the run ends; the
//! next `gputrace run` on the same host removes one whose launcher was
//! killed).
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
    pub fn create(out_dir: &Path, host: &str, hooks: bool) -> std::io::Result<PythonDir> {
        let root = out_dir.join(dir_name(host, std::process::id()));
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

/// Names of the directories start with this.
const PREFIX: &str = ".gputrace-python-";

/// The start of the directory names of `gputrace run`s on `host` (its name
/// reduced to `[A-Za-z0-9._]`, so the whole is one path component).
fn host_prefix(host: &str) -> String {
    let host: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    format!("{PREFIX}{host}-")
}

/// The directory of the `gputrace run` `pid` on `host`.
fn dir_name(host: &str, pid: u32) -> String {
    format!("{}{pid}", host_prefix(host))
}

/// Remove the directories in `out_dir` left by a `gputrace run` on `host`
/// (this one) that was killed (its pid is gone). Those of other hosts (a shared
/// output directory) and of live processes are left alone; so are those of
/// other users, which cannot be removed. One `gputrace:` line per
/// directory removed.
pub fn remove_stale(out_dir: &Path, host: &str) {
    let Ok(entries) = std::fs::read_dir(out_dir) else { return };
    let ours = host_prefix(host);
    for e in entries.filter_map(|e| e.ok()) {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(ours.as_str()))
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        if pid <= 0 || pid as u32 == std::process::id() || process_lives(pid) || !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        if std::fs::remove_dir_all(e.path()).is_ok() {
            eprintln!(
                "gputrace: removed {}, left by a gputrace run (pid {pid}) that was killed",
                e.path().display()
            );
        }
    }
}

/// Whether a process `pid` exists on this host (one of another user too).
fn process_lives(pid: i32) -> bool {
    // Safety: signal 0 only checks that the process exists and may be signalled.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
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
            let dir = PythonDir::create(out.path(), "h", true).unwrap();
            root = dir.root.clone();
            assert!(root.join("hooks/sitecustomize.py").is_file());
            assert!(root.join("lib/gputrace/__init__.py").is_file());
            let path = dir.pythonpath(Some("/theirs".into()));
            let parts: Vec<PathBuf> = std::env::split_paths(&path).collect();
            assert_eq!(parts, [root.join("hooks"), root.join("lib"), PathBuf::from("/theirs")]);
            // A second run with the same pid in the same directory is refused.
            assert!(PythonDir::create(out.path(), "h", true).is_err());
        }
        assert!(!root.exists());
        let dir = PythonDir::create(out.path(), "h", false).unwrap();
        assert!(!dir.root.join("hooks").exists());
        assert_eq!(std::env::split_paths(&dir.pythonpath(None)).count(), 1);
    }

    #[test]
    fn only_this_hosts_directories_of_dead_launchers_are_removed() {
        let out = tempfile::tempdir().unwrap();
        let host = "thishost";
        // A pid that is surely gone: a child that has been reaped.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let stale = out.path().join(dir_name(host, dead));
        let live = out.path().join(dir_name(host, 1));
        let other_host = out.path().join(dir_name("elsewhere", dead));
        for d in [&stale, &live, &other_host] {
            std::fs::create_dir_all(d.join("lib/gputrace")).unwrap();
        }
        remove_stale(out.path(), host);
        assert!(!stale.exists(), "the dead launcher's directory is removed");
        assert!(live.exists() && other_host.exists());
    }
}
