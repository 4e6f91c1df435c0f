//! The sampling thread: walks the job's process tree and samples every
//! thread at a fixed rate.

use crate::monotonic_ns;
use crate::proc::{self, ThreadFiles};
use crate::python::{PythonReader, RETRIES_NS};
use crate::record::{Interner, ProcessRecord, Recording};
use gputrace_format::host::{HostRun, HostThread};
use gputrace_format::{ClockPair, Nanos};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How to sample.
#[derive(Clone, Debug)]
pub struct SamplerConfig {
    /// Samples per second (1 to 1000).
    pub hz: u32,
    /// Most runs held in memory over all processes (about 40 bytes each);
    /// samples past it are counted as lost (`host_samples_cap`).
    pub max_runs: usize,
    /// Read Python stacks (off: `/proc` state and CPU time only).
    pub python: bool,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            hz: 100,
            max_runs: 1 << 20,
            python: true,
        }
    }
}

/// A running sampler; [`Sampler::finish`] stops it and returns what it recorded.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Recording>,
}

impl Sampler {
    /// Start sampling the tree under `root` (the job's first process).
    pub fn start(root: u32, config: SamplerConfig) -> std::io::Result<Sampler> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("gputrace-host".into())
            .spawn(move || run(root, config, &flag))?;
        Ok(Sampler { stop, thread })
    }

    /// Stop and return the recording (`None` if the sampler panicked, which
    /// is said on stderr).
    pub fn finish(self) -> Option<Recording> {
        self.stop.store(true, Ordering::Release);
        match self.thread.join() {
            Ok(r) => Some(r),
            Err(_) => {
                eprintln!("gputrace: host samples: the sampler failed; no host samples were kept");
                None
            }
        }
    }
}

fn run(root: u32, config: SamplerConfig, stop: &AtomicBool) -> Recording {
    let hz = config.hz.clamp(1, 1000);
    let period = 1_000_000_000 / u64::from(hz);
    // The tree is walked about ten times a second.
    let walk_every = (hz / 10).max(1);
    let mut s = State::new(root, config, period);
    let mut next = monotonic_ns();
    let mut tick = 0u32;
    while !stop.load(Ordering::Acquire) {
        let now = monotonic_ns();
        if tick % walk_every == 0 {
            s.walk(now);
        }
        s.sample(now);
        tick = tick.wrapping_add(1);
        next += period;
        let after = monotonic_ns();
        if next <= after {
            // Late (the machine is busy): skip the missed ticks.
            next = after + period;
        }
        std::thread::sleep(Duration::from_nanos(next - after));
    }
    s.finish(monotonic_ns())
}

/// A thread being sampled.
struct ThreadSlot {
    files: ThreadFiles,
    /// Index in its process's `threads`.
    index: u32,
    last_cpu: Option<u64>,
    open: Option<HostRun>,
    /// Time of its last sample.
    last: u64,
}

enum Python {
    /// Looks like Python; try to attach at `at` (monotonic ns), `tries` done.
    Pending {
        at: u64,
        tries: usize,
    },
    /// An attach is running on its own thread (it reads the interpreter's
    /// binaries, which can take a while: sampling goes on meanwhile).
    Attaching {
        result: std::sync::mpsc::Receiver<Result<PythonReader, crate::python::PySpyError>>,
        tries: usize,
    },
    Attached(Box<PythonReader>),
    /// Not Python as of this executable (re-checked if it execs).
    Native,
    /// Could not attach (said once on stderr).
    Failed,
}

struct Process {
    record: ProcessRecord,
    /// Its executable when last looked at (an exec renames its threads).
    exe: Option<std::path::PathBuf>,
    threads: HashMap<u32, ThreadSlot>,
    python: Python,
    seen: u64,
    gone: bool,
}

struct State {
    root: u32,
    config: SamplerConfig,
    period: u64,
    processes: Vec<Process>,
    by_pid: HashMap<u32, usize>,
    intern: Interner,
    runs_held: usize,
    samples: u64,
    start_clock: ClockPair,
    buf: Vec<u8>,
}

impl State {
    fn new(root: u32, config: SamplerConfig, period: u64) -> State {
        State {
            root,
            config,
            period,
            processes: Vec::new(),
            by_pid: HashMap::new(),
            intern: Interner::default(),
            runs_held: 0,
            samples: 0,
            start_clock: ClockPair::now(),
            buf: vec![0u8; 4096],
        }
    }

    /// Find new processes and threads, and forget exited ones.
    fn walk(&mut self, now: u64) {
        let mut queue = vec![self.root];
        let mut visited = 0;
        while let Some(pid) = queue.pop() {
            visited += 1;
            if visited > 100_000 {
                break;
            }
            let tids = proc::tasks(pid);
            if tids.is_empty() {
                continue;
            }
            // A pid seen before but gone since is a new process of the tree.
            let i = match self.by_pid.get(&pid) {
                Some(&i) if !self.processes[i].gone => i,
                _ => self.add_process(pid, now),
            };
            let p = &mut self.processes[i];
            for &tid in &tids {
                if !p.threads.contains_key(&tid) {
                    if let Some(files) = ThreadFiles::open(pid, tid) {
                        let index = p.record.threads.len() as u32;
                        p.record.threads.push(HostThread {
                            pid,
                            tid,
                            name: proc::comm(pid, tid),
                        });
                        p.threads.insert(
                            tid,
                            ThreadSlot {
                                files,
                                index,
                                last_cpu: None,
                                open: None,
                                last: now,
                            },
                        );
                    }
                }
            }
            // An exiting process's `exe` link is gone: only a new executable counts.
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok();
            if exe.is_some() && exe != p.exe {
                // It exec'd: new names, and maybe Python now.
                p.exe = exe;
                for t in &mut p.record.threads {
                    t.name = proc::comm(pid, t.tid);
                }
                if proc::looks_like_python(pid) {
                    p.record.looks_python = true;
                    if matches!(p.python, Python::Native) && self.config.python {
                        p.python = Python::Pending { at: now, tries: 0 };
                    }
                }
            }
            queue.extend(proc::children(pid, &tids));
        }
    }

    fn add_process(&mut self, pid: u32, now: u64) -> usize {
        let looks_python = proc::looks_like_python(pid);
        let python = if self.config.python && looks_python {
            Python::Pending { at: now, tries: 0 }
        } else {
            Python::Native
        };
        self.processes.push(Process {
            record: ProcessRecord {
                pid,
                ppid: proc::ppid(pid),
                looks_python,
                ..Default::default()
            },
            threads: HashMap::new(),
            exe: std::fs::read_link(format!("/proc/{pid}/exe")).ok(),
            python,
            seen: now,
            gone: false,
        });
        let i = self.processes.len() - 1;
        self.by_pid.insert(pid, i);
        i
    }

    /// One sample of every thread of every live process.
    fn sample(&mut self, now: u64) {
        for i in 0..self.processes.len() {
            if self.processes[i].gone {
                continue;
            }
            let stacks = self.python_stacks(i, now);
            let p = &mut self.processes[i];
            let mut exited = Vec::new();
            for (&tid, slot) in p.threads.iter_mut() {
                let Some(r) = slot.files.read(&mut self.buf) else {
                    exited.push(tid);
                    continue;
                };
                self.samples += 1;
                let cpu = slot.last_cpu.map_or(0, |c| r.cpu_ns.saturating_sub(c));
                slot.last_cpu = Some(r.cpu_ns);
                let stack = stacks.as_ref().and_then(|s| s.get(&tid).copied());
                let continues = slot
                    .open
                    .as_ref()
                    .is_some_and(|o| o.state == r.state && o.stack == stack && now - slot.last <= 3 * self.period);
                if continues {
                    let o = slot.open.as_mut().expect("checked above");
                    o.samples = o.samples.saturating_add(1);
                    o.cpu_ns += cpu;
                } else {
                    let end = if now - slot.last <= 3 * self.period {
                        now
                    } else {
                        slot.last + self.period
                    };
                    close(&mut p.record, &mut slot.open, end, &mut self.runs_held, self.config.max_runs);
                    slot.open = Some(HostRun {
                        start: Nanos(now),
                        end: Nanos(now),
                        thread: slot.index,
                        state: r.state,
                        cpu_ns: cpu,
                        stack,
                        samples: 1,
                    });
                }
                slot.last = now;
            }
            for tid in exited {
                if let Some(mut slot) = p.threads.remove(&tid) {
                    close(
                        &mut p.record,
                        &mut slot.open,
                        slot.last + self.period,
                        &mut self.runs_held,
                        self.config.max_runs,
                    );
                }
            }
            if p.threads.is_empty() {
                p.gone = true;
            }
        }
    }

    /// The Python stacks of process `i` now (attaching first if due), or
    /// `None` for a process without them.
    fn python_stacks(&mut self, i: usize, now: u64) -> Option<HashMap<u32, u32>> {
        let p = &mut self.processes[i];
        let pid = p.record.pid;
        if let Python::Pending { at, tries } = p.python {
            if now < at {
                return None;
            }
            let (tx, rx) = std::sync::mpsc::channel();
            let spawned = std::thread::Builder::new().name("gputrace-pyattach".into()).spawn(move || {
                let _ = tx.send(PythonReader::attach(pid));
            });
            p.python = match spawned {
                Ok(_) => Python::Attaching { result: rx, tries },
                Err(e) => {
                    eprintln!("gputrace: host samples: no Python stacks for pid {pid}: could not start a thread: {e}");
                    Python::Failed
                }
            };
        }
        if let Python::Attaching { result, tries } = &p.python {
            let tries = *tries;
            p.python = match result.try_recv() {
                Err(std::sync::mpsc::TryRecvError::Empty) => return None,
                Ok(Ok(r)) => {
                    p.record.python = true;
                    Python::Attached(Box::new(r))
                }
                Ok(Err(_)) if tries < RETRIES_NS.len() && !proc::has_exited(pid) => Python::Pending {
                    at: p.seen + RETRIES_NS[tries],
                    tries: tries + 1,
                },
                Ok(Err(e)) => {
                    if !proc::has_exited(pid) {
                        eprintln!(
                            "gputrace: host samples: no Python stacks for pid {pid} ({}): {e}{}; its threads' CPU state is still sampled",
                            proc::comm(pid, pid),
                            permission_hint(&e.to_string())
                        );
                        *p.record.losses.entry("python_attach".into()).or_insert(0) += 1;
                    }
                    Python::Failed
                }
                Err(std::sync::mpsc::TryRecvError::Disconnected) => Python::Failed,
            };
        }
        let Python::Attached(reader) = &mut p.python else {
            return None;
        };
        match reader.read(pid, &mut self.intern) {
            Ok((s, left_out)) => {
                if left_out > 0 {
                    *p.record.losses.entry("frame_table_cap".into()).or_insert(0) += left_out;
                }
                Some(s)
            }
            Err(_) => {
                // A read racing the process (a frame freed under the
                // non-blocking reader, or the process exiting): this
                // sample has no stacks.
                *p.record.losses.entry("python_read".into()).or_insert(0) += 1;
                None
            }
        }
    }

    fn finish(mut self, now: u64) -> Recording {
        let (period, max) = (self.period, self.config.max_runs);
        for p in &mut self.processes {
            for slot in p.threads.values_mut() {
                let end = slot.last + period;
                close(&mut p.record, &mut slot.open, end.min(now.max(slot.last)), &mut self.runs_held, max);
            }
        }
        Recording {
            hz: (1_000_000_000 / self.period) as u32,
            start_clock: self.start_clock,
            frames: self.intern.frame_list,
            stacks: self.intern.stack_list,
            processes: self.processes.into_iter().map(|p| p.record).collect(),
            samples: self.samples,
        }
    }
}

/// Close a thread's open run at `end` and keep it, or count its samples as
/// lost if `max_runs` are held already.
fn close(record: &mut ProcessRecord, open: &mut Option<HostRun>, end: u64, held: &mut usize, max_runs: usize) {
    let Some(mut run) = open.take() else { return };
    run.end = Nanos(end.max(run.start.0));
    if *held >= max_runs {
        *record.losses.entry("host_samples_cap".into()).or_insert(0) += u64::from(run.samples);
        return;
    }
    *held += 1;
    record.runs.push(run);
}

fn permission_hint(e: &str) -> &'static str {
    if e.contains("ermission") || e.contains("EPERM") || e.contains("Operation not permitted") {
        " (reading another process's memory needs ptrace permission: in a container, add the SYS_PTRACE capability)"
    } else {
        ""
    }
}
