//! An output directory that is written without ever following a symbolic
//! link.
//!
//! Traces, flight recorder rings, run records and their temporary names all
//! live in one directory that other users or jobs may be able to write to
//! (a shared scratch folder). Whoever plants a link there under a name a
//! later run will use must not get that run to write through it. So the
//! directory is opened once, and every name in it is created with
//! `openat(dir, name, O_CREAT | O_EXCL | O_NOFOLLOW)` relative to that
//! descriptor (`O_EXCL` never follows a link, not even a dangling one),
//! moved with `renameat` (which replaces a name, never what it points to),
//! and a name that is a link is refused with [`is_link_refusal`] error
//! rather than replaced. Nothing here ever writes outside the directory.
//!
//! The directory itself may be a link the user chose (`-o` naming a link
//! to a directory): it is opened once, following it, before any name in it
//! is used.
//!
//! The calls are `rustix`'s safe wrappers of `openat`, `fstatat`,
//! `unlinkat` and `renameat`.

use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// An opened output directory; names in it are single path components.
#[derive(Debug)]
pub struct OutDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// What is at a name of the directory, links not followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// Nothing.
    Missing,
    /// A regular file.
    File,
    /// A symbolic link (dangling or not).
    Link,
    /// A directory, device, FIFO or socket.
    Other,
}

/// The refusal of a name that is a symbolic link (inside an `io::Error`
/// of kind `AlreadyExists`).
#[derive(Debug, thiserror::Error)]
#[error("{} is a symbolic link; gputrace never writes through a link in its output directory", .0.display())]
pub struct LinkRefused(pub PathBuf);

/// Whether `e` is the refusal of a name that is a symbolic link.
pub fn is_link_refusal(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|inner| inner.is::<LinkRefused>())
}

impl OutDir {
    /// Open the directory `path` (following it if it is itself a link).
    pub fn open(path: &Path) -> io::Result<OutDir> {
        let fd = rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        Ok(OutDir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The directory holding `path` and the name of `path` in it.
    pub fn parent_of(path: &Path) -> io::Result<(OutDir, String)> {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{} has no file name", path.display())))?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        Ok((OutDir::open(parent)?, name.to_string()))
    }

    /// The directory's path, as given to [`OutDir::open`].
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `name` in the directory (for messages and readers).
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// What is at `name`, links not followed.
    pub fn entry(&self, name: &str) -> io::Result<Entry> {
        check_name(name)?;
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(match FileType::from_raw_mode(st.st_mode) {
                FileType::RegularFile => Entry::File,
                FileType::Symlink => Entry::Link,
                _ => Entry::Other,
            }),
            Err(rustix::io::Errno::NOENT) => Ok(Entry::Missing),
            Err(e) => Err(e.into()),
        }
    }

    /// Create `name` as a new, empty regular file open for reading and
    /// writing (mode 0644 before the umask). A regular file already there
    /// (left by an earlier process) is replaced; a link is refused
    /// ([`is_link_refusal`]), as is anything else that is not a regular file.
    pub fn create(&self, name: &str) -> io::Result<File> {
        match self.create_new(name) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && !is_link_refusal(&e) => {
                match self.entry(name)? {
                    Entry::File => self.remove(name)?,
                    Entry::Link => return Err(self.link_refused(name)),
                    Entry::Other => return Err(self.not_a_file(name)),
                    Entry::Missing => {}
                }
                self.create_new(name)
            }
            r => r,
        }
    }

    /// Create `name` only if nothing is there: `AlreadyExists` otherwise
    /// (with [`is_link_refusal`] when it is a link).
    pub fn create_new(&self, name: &str) -> io::Result<File> {
        check_name(name)?;
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        match rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(0o644)) {
            Ok(fd) => Ok(File::from(fd)),
            Err(rustix::io::Errno::EXIST) if self.entry(name)? == Entry::Link => Err(self.link_refused(name)),
            Err(e) => Err(io::Error::from(e)),
        }
    }

    /// Open `name` for reading if it is not a link (`O_NOFOLLOW`).
    pub fn open_read(&self, name: &str) -> io::Result<File> {
        check_name(name)?;
        match rustix::fs::openat(&self.fd, name, OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty()) {
            Ok(fd) => Ok(File::from(fd)),
            Err(rustix::io::Errno::LOOP) => Err(self.link_refused(name)),
            Err(e) => Err(e.into()),
        }
    }

    /// Move `from` to `to` within the directory, replacing a regular file
    /// at `to`; a link at `to` is refused, and `renameat` would only have
    /// replaced the link itself, never written to where it points.
    pub fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        check_name(from)?;
        match self.entry(to)? {
            Entry::Link => return Err(self.link_refused(to)),
            Entry::Other => return Err(self.not_a_file(to)),
            Entry::File | Entry::Missing => {}
        }
        rustix::fs::renameat(&self.fd, from, &self.fd, to).map_err(io::Error::from)
    }

    /// Remove the name `name` (a link is removed, not what it points to).
    pub fn remove(&self, name: &str) -> io::Result<()> {
        check_name(name)?;
        rustix::fs::unlinkat(&self.fd, name, AtFlags::empty()).map_err(io::Error::from)
    }

    /// Write `bytes` to `name` through `<name>.partial`, renamed into place.
    pub fn write_replacing(&self, name: &str, bytes: &[u8]) -> io::Result<()> {
        let tmp = format!("{name}.partial");
        let r = self.create(&tmp).and_then(|mut f| {
            io::Write::write_all(&mut f, bytes)?;
            self.rename(&tmp, name)
        });
        if r.is_err() && self.entry(&tmp).is_ok_and(|e| e == Entry::File) {
            let _ = self.remove(&tmp);
        }
        r
    }

    fn link_refused(&self, name: &str) -> io::Error {
        io::Error::new(io::ErrorKind::AlreadyExists, LinkRefused(self.join(name)))
    }

    fn not_a_file(&self, name: &str) -> io::Error {
        io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} exists and is not a regular file", self.join(name).display()),
        )
    }
}

/// Names are one path component: no `/`, not empty, `.` or `..`.
fn check_name(name: &str) -> io::Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{name:?} is not a file name in the output directory"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::fs::symlink;

    /// A directory with `out/` and, beside it, `outside/victim` (holding
    /// "precious") and links in `out/` to it and to a missing file.
    fn planted() -> (tempfile::TempDir, OutDir, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("out")).unwrap();
        std::fs::create_dir(root.path().join("outside")).unwrap();
        let victim = root.path().join("outside/victim");
        std::fs::write(&victim, b"precious").unwrap();
        symlink(&victim, root.path().join("out/to-victim")).unwrap();
        symlink(root.path().join("outside/new"), root.path().join("out/dangling")).unwrap();
        let dir = OutDir::open(&root.path().join("out")).unwrap();
        (root, dir, victim)
    }

    #[test]
    fn links_are_never_written_through() {
        let (root, dir, victim) = planted();
        for name in ["to-victim", "dangling"] {
            let e = dir.create(name).unwrap_err();
            assert!(is_link_refusal(&e), "{e}");
            assert!(e.to_string().contains(name), "names the file: {e}");
            assert!(is_link_refusal(&dir.create_new(name).unwrap_err()));
            assert!(is_link_refusal(&dir.open_read(name).unwrap_err()));
            assert!(is_link_refusal(&dir.write_replacing(name, b"x").unwrap_err()));
            assert_eq!(dir.entry(name).unwrap(), Entry::Link);
        }
        std::fs::write(dir.join("mine"), b"m").unwrap();
        assert!(is_link_refusal(&dir.rename("mine", "to-victim").unwrap_err()));
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(
            !root.path().join("outside/new").exists(),
            "the dangling link's target was not created"
        );
        // A `.partial` name that is a link is refused too.
        symlink(&victim, dir.join("rec.json.partial")).unwrap();
        assert!(is_link_refusal(&dir.write_replacing("rec.json", b"x").unwrap_err()));
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(dir.entry("rec.json").unwrap(), Entry::Missing);
    }

    #[test]
    fn regular_files_are_created_and_replaced() {
        let (_root, dir, _) = planted();
        let mut f = dir.create("a").unwrap();
        f.write_all(b"one").unwrap();
        assert_eq!(dir.create_new("a").unwrap_err().kind(), io::ErrorKind::AlreadyExists);
        let mut f = dir.create("a").unwrap();
        f.write_all(b"two").unwrap();
        let mut s = String::new();
        dir.open_read("a").unwrap().read_to_string(&mut s).unwrap();
        assert_eq!(s, "two");
        dir.write_replacing("b", b"bee").unwrap();
        assert_eq!(std::fs::read(dir.join("b")).unwrap(), b"bee");
        assert_eq!(dir.entry("b.partial").unwrap(), Entry::Missing);
        std::fs::create_dir(dir.join("d")).unwrap();
        assert!(dir.create("d").unwrap_err().to_string().contains("not a regular file"));
        for bad in ["", ".", "..", "x/y", "../escape"] {
            assert_eq!(dir.create(bad).unwrap_err().kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
    }
}
