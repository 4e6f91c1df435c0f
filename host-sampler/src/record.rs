//! What a sampling run recorded, before it is written into traces.

use gputrace_format::host::{HostRun, HostThread};
use gputrace_format::ClockPair;
use std::collections::{BTreeMap, HashMap};

/// Everything one [`crate::Sampler`] recorded. Times are `CLOCK_MONOTONIC` ns.
#[derive(Clone, Debug, Default)]
pub struct Recording {
    /// Samples per second asked for.
    pub hz: u32,
    /// The clocks read together when sampling started (for a trace made for
    /// samples alone).
    pub start_clock: ClockPair,
    /// Interned Python frames: (function, file, line).
    pub frames: Vec<(String, String, u32)>,
    /// Interned stacks, innermost frame first, as indexes into `frames`.
    pub stacks: Vec<Vec<u32>>,
    /// Every process seen, in discovery order.
    pub processes: Vec<ProcessRecord>,
    /// Samples taken, all processes (for the cost summary).
    pub samples: u64,
}

/// The samples of one process of the job's tree.
#[derive(Clone, Debug, Default)]
pub struct ProcessRecord {
    /// Its pid.
    pub pid: u32,
    /// Its parent when first seen.
    pub ppid: Option<u32>,
    /// Whether Python stacks were read from it.
    pub python: bool,
    /// Whether it runs a Python interpreter (its executable or a library
    /// is `python*`), stacks read or not.
    pub looks_python: bool,
    /// Its threads; `pid` is each one's process.
    pub threads: Vec<HostThread>,
    /// Runs: `thread` indexes `threads`, `stack` indexes
    /// [`Recording::stacks`]; in no particular order.
    pub runs: Vec<HostRun>,
    /// Samples lost, by cause.
    pub losses: BTreeMap<String, u64>,
}

/// Most distinct frames a recording interns.
pub(crate) const MAX_FRAMES: usize = 1 << 18;
/// Most bytes of function and file names it keeps.
pub(crate) const MAX_NAME_BYTES: usize = 32 << 20;
/// Most distinct stacks it interns.
pub(crate) const MAX_STACKS: usize = 1 << 18;
/// Most frame entries over all its stacks.
pub(crate) const MAX_STACK_ENTRIES: usize = 1 << 23;

/// Frame and stack interning shared by every process of a recording.
///
/// Bounded: past [`MAX_FRAMES`] frames, [`MAX_NAME_BYTES`] of names,
/// [`MAX_STACKS`] stacks or [`MAX_STACK_ENTRIES`] frame entries, a stack
/// that needs a new entry is not interned (its sample has no stack and is
/// counted lost as `frame_table_cap`); frames and stacks already held still
/// are. About 100 MB at most.
pub(crate) struct Interner {
    frames: HashMap<(String, String, u32), u32>,
    stacks: HashMap<Vec<u32>, u32>,
    pub(crate) frame_list: Vec<(String, String, u32)>,
    pub(crate) stack_list: Vec<Vec<u32>>,
    name_bytes: usize,
    stack_entries: usize,
    limits: (usize, usize, usize, usize),
}

impl Default for Interner {
    fn default() -> Self {
        Interner::with_limits(MAX_FRAMES, MAX_NAME_BYTES, MAX_STACKS, MAX_STACK_ENTRIES)
    }
}

impl Interner {
    /// An interner holding at most `frames` frames, `name_bytes` bytes of
    /// names, `stacks` stacks and `stack_entries` frame entries in them.
    pub(crate) fn with_limits(frames: usize, name_bytes: usize, stacks: usize, stack_entries: usize) -> Interner {
        Interner {
            frames: HashMap::new(),
            stacks: HashMap::new(),
            frame_list: Vec::new(),
            stack_list: Vec::new(),
            name_bytes: 0,
            stack_entries: 0,
            limits: (frames, name_bytes, stacks, stack_entries),
        }
    }

    /// The id of a frame; `None` if it is new and the table is full.
    pub(crate) fn frame(&mut self, function: &str, file: &str, line: u32) -> Option<u32> {
        let key = (function.to_string(), file.to_string(), line);
        if let Some(&id) = self.frames.get(&key) {
            return Some(id);
        }
        let bytes = function.len() + file.len();
        if self.frame_list.len() >= self.limits.0 || self.name_bytes + bytes > self.limits.1 {
            return None;
        }
        self.name_bytes += bytes;
        let id = self.frame_list.len() as u32;
        self.frame_list.push(key.clone());
        self.frames.insert(key, id);
        Some(id)
    }

    /// The id of a stack; `None` if it is new and the table is full.
    pub(crate) fn stack(&mut self, frames: Vec<u32>) -> Option<u32> {
        if let Some(&id) = self.stacks.get(&frames) {
            return Some(id);
        }
        if self.stack_list.len() >= self.limits.2 || self.stack_entries + frames.len() > self.limits.3 {
            return None;
        }
        self.stack_entries += frames.len();
        let id = self.stack_list.len() as u32;
        self.stack_list.push(frames.clone());
        self.stacks.insert(frames, id);
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_interns_what_it_holds_and_refuses_new_entries() {
        let mut i = Interner::with_limits(2, 100, 2, 3);
        let a = i.frame("f", "a.py", 1).unwrap();
        let b = i.frame("g", "a.py", 2).unwrap();
        assert_eq!(i.frame("h", "a.py", 3), None, "a third frame");
        assert_eq!(i.frame("f", "a.py", 1), Some(a), "a frame held");
        let s = i.stack(vec![a, b]).unwrap();
        assert_eq!(i.stack(vec![a, b, a]), None, "four frame entries");
        assert_eq!(i.stack(vec![a]).map(|x| x != s), Some(true));
        assert_eq!(i.stack(vec![b]), None, "a third stack");
        assert_eq!(i.stack(vec![a, b]), Some(s), "a stack held");
        let mut small = Interner::with_limits(10, 5, 10, 10);
        assert_eq!(small.frame("long_name", "x.py", 1), None, "names past the byte cap");
    }
}
