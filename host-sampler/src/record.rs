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

/// Frame and stack interning shared by every process of a recording.
#[derive(Default)]
pub(crate) struct Interner {
    frames: HashMap<(String, String, u32), u32>,
    stacks: HashMap<Vec<u32>, u32>,
    pub(crate) frame_list: Vec<(String, String, u32)>,
    pub(crate) stack_list: Vec<Vec<u32>>,
}

impl Interner {
    pub(crate) fn frame(&mut self, function: &str, file: &str, line: u32) -> u32 {
        let key = (function.to_string(), file.to_string(), line);
        if let Some(&id) = self.frames.get(&key) {
            return id;
        }
        let id = self.frame_list.len() as u32;
        self.frame_list.push(key.clone());
        self.frames.insert(key, id);
        id
    }

    pub(crate) fn stack(&mut self, frames: Vec<u32>) -> u32 {
        if let Some(&id) = self.stacks.get(&frames) {
            return id;
        }
        let id = self.stack_list.len() as u32;
        self.stack_list.push(frames.clone());
        self.stacks.insert(frames, id);
        id
    }
}
