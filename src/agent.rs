//! Finding the capture agent library (`libgputrace_agent.so`).
//!
//! Search order, first hit wins:
//! 1. `$GPUTRACE_AGENT` (a path to the library; if set, nothing else is tried),
//! 2. next to the `gputrace` executable (what `cargo build` produces),
//! 3. `<exe dir>/../lib/gputrace/` (an installed layout: `bin/gputrace`,
//!    `lib/gputrace/libgputrace_agent.so`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// File name of the agent library.
pub const AGENT_FILE: &str = "libgputrace_agent.so";

/// The outcome of a search: where it was found, and every place looked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSearch {
    /// The library, if found.
    pub found: Option<PathBuf>,
    /// Every candidate, in order.
    pub searched: Vec<PathBuf>,
}

impl AgentSearch {
    /// "a, b, c" for error messages.
    pub fn searched_list(&self) -> String {
        self.searched.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
    }
}

/// Search with this process's environment and executable path.
pub fn locate() -> AgentSearch {
    locate_from(std::env::var_os("GPUTRACE_AGENT"), std::env::current_exe().ok().as_deref())
}

/// The search itself, with its inputs explicit (for tests).
pub fn locate_from(env_override: Option<OsString>, exe: Option<&Path>) -> AgentSearch {
    let mut searched = Vec::new();
    if let Some(p) = env_override.filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        searched.push(p.clone());
        let found = is_shared_object(&p).then_some(p);
        return AgentSearch { found, searched };
    }
    if let Some(dir) = exe.and_then(Path::parent) {
        searched.push(dir.join(AGENT_FILE));
        searched.push(dir.join("../lib/gputrace").join(AGENT_FILE));
    }
    let found = searched.iter().find(|p| is_shared_object(p)).cloned();
    AgentSearch { found, searched }
}

/// A regular file that starts with the ELF magic.
fn is_shared_object(p: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(p).and_then(|mut f| f.read_exact(&mut magic)).is_ok() && magic == *b"\x7fELF"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_and_override() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        let lib = dir.path().join("lib/gputrace");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&lib).unwrap();
        let exe = bin.join("gputrace");
        // Nothing there yet.
        let s = locate_from(None, Some(&exe));
        assert_eq!(s.found, None);
        assert_eq!(s.searched.len(), 2);
        // Installed layout.
        std::fs::write(lib.join(AGENT_FILE), b"\x7fELF....").unwrap();
        assert_eq!(
            locate_from(None, Some(&exe)).found,
            Some(bin.join("../lib/gputrace").join(AGENT_FILE))
        );
        // Next to the executable wins.
        std::fs::write(bin.join(AGENT_FILE), b"\x7fELF....").unwrap();
        assert_eq!(locate_from(None, Some(&exe)).found, Some(bin.join(AGENT_FILE)));
        // The override is exclusive, and a non-ELF file is not an agent.
        let fake = dir.path().join("fake.so");
        std::fs::write(&fake, b"not elf").unwrap();
        let s = locate_from(Some(fake.clone().into()), Some(&exe));
        assert_eq!((s.found, s.searched), (None, vec![fake]));
    }
}
