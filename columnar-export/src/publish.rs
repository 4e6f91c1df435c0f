//! Putting one job's files into the output directory without disturbing the
//! other jobs there.
//!
//! The export writes every file under a staging directory inside the output
//! directory (`DIR/.gputrace-staging.<job id>.<pid>/<table>/job_id=<id>/…`,
//! hidden, and outside every table directory, so no engine's glob or
//! partition discovery sees it). Then, table by table, the staged
//! `job_id=<id>` directory takes the place of the one in `DIR/<table>/`: on
//! Linux with one `renameat2(RENAME_EXCHANGE)`, so a reader sees the old
//! partition or the new one, never a mix and never neither; elsewhere (or
//! where the file system refuses the exchange) with two renames, when for an
//! instant the job's partition is absent. The old partition then lands in
//! the staging directory and is removed with it. The `runs` table is
//! published last: a job's `runs` row means all its tables are in place.

use crate::ColumnarError;
use std::io;
use std::path::{Path, PathBuf};

/// The staging directory of one export.
pub(crate) struct Staging {
    root: PathBuf,
    done: bool,
}

impl Staging {
    /// A fresh staging directory in `dir` for `job_id` (one left by a crashed
    /// export of this process id is removed first).
    pub(crate) fn create(dir: &Path, job_id: &str) -> Result<Staging, ColumnarError> {
        let root = dir.join(format!(".gputrace-staging.{job_id}.{}", std::process::id()));
        let io_err = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ColumnarError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        match std::fs::remove_dir_all(&root) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(io_err(&root)(e)),
        }
        std::fs::create_dir(&root).map_err(io_err(&root))?;
        Ok(Staging { root, done: false })
    }

    /// The staging root: files are written under `root/<table>/…`.
    pub(crate) fn root(&self) -> &Path {
        &self.root
    }

    /// Move the staged `<table>/<partition>` into `dir/<table>/<partition>`,
    /// replacing what was there. Returns whether something was replaced.
    pub(crate) fn publish(&self, dir: &Path, table: &str, partition: &str) -> Result<bool, ColumnarError> {
        let staged = self.root.join(table).join(partition);
        let table_dir = dir.join(table);
        std::fs::create_dir_all(&table_dir).map_err(|source| ColumnarError::Io {
            path: table_dir.clone(),
            source,
        })?;
        let target = table_dir.join(partition);
        let replaced = swap_into_place(&staged, &target).map_err(|source| ColumnarError::Io {
            path: target.clone(),
            source,
        })?;
        Ok(replaced)
    }

    /// Remove the staging directory (with the replaced partitions in it).
    pub(crate) fn finish(mut self) -> Result<(), ColumnarError> {
        self.done = true;
        std::fs::remove_dir_all(&self.root).map_err(|source| ColumnarError::Io {
            path: self.root.clone(),
            source,
        })
    }
}

impl Drop for Staging {
    /// A failed export leaves nothing behind but what was already published.
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

/// Put directory `staged` at `target`. An existing `target` ends up at
/// `staged` (to be removed with the staging directory). Returns whether
/// `target` existed.
fn swap_into_place(staged: &Path, target: &Path) -> io::Result<bool> {
    match std::fs::symlink_metadata(target) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::rename(staged, target)?;
            return Ok(false);
        }
        Err(e) => return Err(e),
        Ok(m) if !m.is_dir() => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "is not a directory: not an export's partition, left alone",
            ))
        }
        Ok(_) => {}
    }
    if exchange(staged, target).is_ok() {
        return Ok(true);
    }
    // No atomic exchange here: move the old partition aside, then the new one in.
    let aside = staged.with_extension("replaced");
    std::fs::rename(target, &aside)?;
    std::fs::rename(staged, target)?;
    std::fs::rename(&aside, staged)?;
    Ok(true)
}

#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE).map_err(io::Error::from)
}

#[cfg(not(target_os = "linux"))]
fn exchange(_: &Path, _: &Path) -> io::Result<()> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "no atomic exchange"))
}

/// A table directory of `dir` laid out by schema version 1
/// (`<table>/rank=<N>/`), which this version must not mix with its own.
pub(crate) fn old_layout(dir: &Path, tables: &[&str]) -> Option<PathBuf> {
    tables.iter().find_map(|t| {
        std::fs::read_dir(dir.join(t))
            .ok()?
            .filter_map(Result::ok)
            .find_map(|e| e.file_name().to_str().is_some_and(|n| n.starts_with("rank=")).then(|| e.path()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(path: &Path, file: &str) {
        std::fs::create_dir_all(path).unwrap();
        std::fs::write(path.join(file), file).unwrap();
    }

    #[test]
    fn the_new_partition_takes_the_old_ones_place_whole() {
        let d = tempfile::tempdir().unwrap();
        let (staged, target) = (d.path().join("staged"), d.path().join("target"));
        dir_with(&staged, "new");
        assert!(!swap_into_place(&staged, &target).unwrap(), "nothing to replace");
        assert!(target.join("new").is_file() && !staged.exists());
        dir_with(&staged, "newer");
        assert!(swap_into_place(&staged, &target).unwrap());
        assert!(
            target.join("newer").is_file() && !target.join("new").exists(),
            "no file of the old partition stays"
        );
        assert!(staged.join("new").is_file(), "the old partition is left in staging, to be removed");
        #[cfg(target_os = "linux")]
        {
            dir_with(&d.path().join("a"), "x");
            exchange(&d.path().join("a"), &staged).expect("tmpfs and ext4 exchange atomically");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_file_or_link_in_the_partitions_place_is_left_alone() {
        let d = tempfile::tempdir().unwrap();
        let (staged, target) = (d.path().join("staged"), d.path().join("target"));
        dir_with(&staged, "new");
        std::fs::write(&target, "not mine").unwrap();
        assert!(swap_into_place(&staged, &target).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"not mine");
        let outside = d.path().join("outside");
        dir_with(&outside, "keep");
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        assert!(swap_into_place(&staged, &link).is_err());
        assert!(outside.join("keep").is_file());
    }
}
