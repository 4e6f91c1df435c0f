//! Python stacks of one process, read with `py-spy` without pausing it.

use crate::record::Interner;
use py_spy::config::{LineNo, LockingStrategy};
use py_spy::{Config, PythonSpy};
use std::collections::HashMap;

/// A process's Python reader.
pub(crate) struct PythonReader {
    spy: PythonSpy,
}

/// Waits before each new attempt to attach to a process that looks like
/// Python (its interpreter may not be set up yet), ns after it was seen.
pub(crate) const RETRIES_NS: [u64; 4] = [100_000_000, 300_000_000, 1_000_000_000, 3_000_000_000];

impl PythonReader {
    /// Attach (reads the interpreter's layout; does not stop the process).
    pub(crate) fn attach(pid: u32) -> Result<PythonReader, PySpyError> {
        let config = Config {
            blocking: LockingStrategy::NonBlocking,
            native: false,
            collect_thread_names: false,
            lineno: LineNo::LastInstruction,
            ..Config::default()
        };
        let mut spy = PythonSpy::new(pid as py_spy::Pid, &config).map_err(PySpyError)?;
        // A first read proves the layout (as py-spy's own retry does).
        spy.get_stack_traces().map_err(PySpyError)?;
        Ok(PythonReader { spy })
    }

    /// The stack of each Python thread with a known OS thread id, interned:
    /// tid → stack; and how many threads' stacks the full interner left
    /// out. A process with one Python thread whose OS id is unknown
    /// (Python before 3.11) gives it the main thread (`pid`).
    pub(crate) fn read(&mut self, pid: u32, intern: &mut Interner) -> Result<(HashMap<u32, u32>, u64), PySpyError> {
        let traces = self.spy.get_stack_traces().map_err(PySpyError)?;
        let single = traces.len() == 1;
        let mut out = HashMap::with_capacity(traces.len());
        let mut left_out = 0;
        for t in traces {
            let tid = match t.os_thread_id {
                Some(id) => id as u32,
                None if single => pid,
                None => continue,
            };
            let frames: Option<Vec<u32>> = t
                .frames
                .iter()
                .map(|f| intern.frame(&f.name, &f.filename, f.line.max(0) as u32))
                .collect();
            match frames.and_then(|f| intern.stack(f)) {
                Some(stack) => {
                    out.insert(tid, stack);
                }
                None => left_out += 1,
            }
        }
        Ok((out, left_out))
    }
}

/// An error of py-spy; shown with its causes on one line (py-spy's errors are chains).
#[derive(Debug)]
pub(crate) struct PySpyError(anyhow::Error);

impl std::fmt::Display for PySpyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        for c in self.0.chain().skip(1) {
            write!(f, ": {c}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PySpyError {}
