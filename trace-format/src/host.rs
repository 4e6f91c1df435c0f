//! Host samples (format 1.4, chunk kind 7): what the job's CPU threads were
//! doing, sampled from outside by `gputrace run`.
//!
//! Each sample of a thread is its scheduler state (running, sleeping, disk
//! wait) and CPU time from `/proc`, and for Python threads the Python stack.
//! Consecutive samples of a thread with the same state and stack are kept
//! as one [`HostRun`] (its `samples` count says how many), so an idle
//! thread costs one row, not one per sample.
//!
//! Frame names and file names live in the trace's string table. A host
//! samples chunk is self-contained otherwise: it carries its own thread,
//! frame and stack tables, and [`HostSamples::merge`] joins chunks. Chunk
//! layout (the body is zstd-compressed):
//!
//! ```text
//! meta := JSON HostMeta { hz, threads: [{pid, tid, name}], losses: {source: n} }
//! body := varint n_frames  (varint function, varint file, varint line)*
//!         varint n_stacks  (varint depth, varint frame*)*       innermost frame first
//!         varint n_runs    (varint start - previous start, varint end - start,
//!                           varint thread, u8 state, varint cpu_ns,
//!                           varint stack + 1 (0: no Python stack), varint samples)*
//! ```
//! Runs are sorted by start. Times are in the trace's time domain.

use crate::chunk::{ChunkKind, Frame, FLAG_COMPRESSED, MAX_PAYLOAD, MAX_RAW};
use crate::units::{Nanos, StringId};
use crate::varint::{self, Cursor};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Scheduler state of a thread when sampled (`/proc/<pid>/task/<tid>/stat`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[repr(u8)]
pub enum ThreadState {
    /// `R`: on a CPU or ready to run.
    Running = 0,
    /// `S`: asleep, waiting for an event (a lock, a pipe, a timer, a socket).
    Sleeping = 1,
    /// `D`: uninterruptible sleep, almost always disk or network file system I/O.
    DiskWait = 2,
    /// Anything else (stopped, traced, zombie, idle kernel thread).
    Other = 3,
}

impl ThreadState {
    /// The state of a `/proc` state letter.
    pub fn from_proc(c: u8) -> ThreadState {
        match c {
            b'R' => ThreadState::Running,
            b'S' => ThreadState::Sleeping,
            b'D' => ThreadState::DiskWait,
            _ => ThreadState::Other,
        }
    }

    fn from_u8(v: u8) -> Option<ThreadState> {
        Some(match v {
            0 => ThreadState::Running,
            1 => ThreadState::Sleeping,
            2 => ThreadState::DiskWait,
            3 => ThreadState::Other,
            _ => return None,
        })
    }

    /// Name used in text output.
    pub fn name(self) -> &'static str {
        match self {
            ThreadState::Running => "running",
            ThreadState::Sleeping => "sleeping",
            ThreadState::DiskWait => "disk wait",
            ThreadState::Other => "other",
        }
    }
}

/// One sampled thread.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostThread {
    /// Its process.
    pub pid: u32,
    /// The thread id (the pid for a process's main thread).
    pub tid: u32,
    /// The thread's name (`comm`) when first seen.
    pub name: String,
}

/// One Python frame: the function and where it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HostFrame {
    /// Function name (string table).
    pub function: StringId,
    /// File name (string table).
    pub file: StringId,
    /// Line being executed (0 when unknown).
    pub line: u32,
}

/// Consecutive samples of one thread with the same state and stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostRun {
    /// First sample.
    pub start: Nanos,
    /// One sample period after the last sample (the time the run stands for).
    pub end: Nanos,
    /// Index into [`HostSamples::threads`].
    pub thread: u32,
    /// Scheduler state in every sample of the run.
    pub state: ThreadState,
    /// CPU time (user + system) the thread used from the sample before the
    /// run to its last sample.
    pub cpu_ns: u64,
    /// Index into [`HostSamples::stacks`]; `None`: no Python stack (a native
    /// thread, or a thread of a process that is not Python).
    pub stack: Option<u32>,
    /// Samples merged into the run.
    pub samples: u32,
}

/// What the JSON meta of a host samples chunk holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostMeta {
    /// Sampling rate asked for, per second; 0 for stacks traced rather
    /// than sampled (a Kineto import's `python_function` calls: one run per
    /// interval between call boundaries, state `Other`, CPU time 0).
    pub hz: u32,
    /// The threads the runs refer to.
    pub threads: Vec<HostThread>,
    /// Samples not recorded, by cause (`host_samples_cap`,
    /// `python_read`, ...), and sampler faults by process.
    #[serde(default)]
    pub losses: BTreeMap<String, u64>,
}

/// The host samples of a trace, every chunk merged.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostSamples {
    /// Sampling rate asked for, per second (of the first chunk).
    pub hz: u32,
    /// Sampled threads.
    pub threads: Vec<HostThread>,
    /// Python frames.
    pub frames: Vec<HostFrame>,
    /// Stacks, innermost frame first, as indexes into `frames`.
    pub stacks: Vec<Vec<u32>>,
    /// Runs, sorted by start.
    pub runs: Vec<HostRun>,
    /// Samples lost, by cause.
    pub losses: BTreeMap<String, u64>,
}

impl HostSamples {
    /// Samples recorded (runs count each sample they merge).
    pub fn sample_count(&self) -> u64 {
        self.runs.iter().map(|r| u64::from(r.samples)).sum()
    }

    /// Samples lost, all causes.
    pub fn lost(&self) -> u64 {
        self.losses.values().sum()
    }

    /// Add `other`'s runs, its threads, frames and stacks joined with the
    /// equal ones already here (a thread is its pid and tid), and sum the
    /// losses; the runs stay sorted by start.
    pub fn merge(&mut self, other: HostSamples) {
        if self.threads.is_empty() && self.runs.is_empty() {
            self.hz = other.hz;
        }
        let threads: Vec<u32> = other
            .threads
            .into_iter()
            .map(|t| match self.threads.iter().position(|x| (x.pid, x.tid) == (t.pid, t.tid)) {
                Some(i) => i as u32,
                None => {
                    self.threads.push(t);
                    self.threads.len() as u32 - 1
                }
            })
            .collect();
        let mut frame_ids: std::collections::HashMap<HostFrame, u32> =
            self.frames.iter().enumerate().map(|(i, f)| (*f, i as u32)).collect();
        let frames: Vec<u32> = other
            .frames
            .into_iter()
            .map(|f| {
                *frame_ids.entry(f).or_insert_with(|| {
                    self.frames.push(f);
                    self.frames.len() as u32 - 1
                })
            })
            .collect();
        let mut stack_ids: std::collections::HashMap<Vec<u32>, u32> =
            self.stacks.iter().enumerate().map(|(i, s)| (s.clone(), i as u32)).collect();
        let stacks: Vec<u32> = other
            .stacks
            .into_iter()
            .map(|s| {
                let s: Vec<u32> = s.into_iter().map(|f| frames[f as usize]).collect();
                *stack_ids.entry(s.clone()).or_insert_with(|| {
                    self.stacks.push(s);
                    self.stacks.len() as u32 - 1
                })
            })
            .collect();
        let sorted = self.runs.last().zip(other.runs.first()).is_none_or(|(a, b)| a.start <= b.start);
        self.runs.extend(other.runs.into_iter().map(|r| HostRun {
            thread: threads[r.thread as usize],
            stack: r.stack.map(|s| stacks[s as usize]),
            ..r
        }));
        if !sorted {
            self.runs.sort_by_key(|r| r.start);
        }
        for (k, v) in other.losses {
            *self.losses.entry(k).or_insert(0) += v;
        }
    }
}

/// Encode `samples` as host samples chunks (frame + payload bytes, ready to
/// append to a trace; runs sorted by start on the way), at most `max_runs` runs per chunk so that each stays
/// under the format's limits. Frame and file names must already be in the
/// trace's string table. The losses go into the first chunk.
pub fn encode_chunks(samples: &HostSamples, max_runs: usize, zstd_level: i32) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let max_runs = max_runs.max(1);
    let mut first = true;
    // Runs are stored by start (their starts are deltas).
    let sorted;
    let runs: &[HostRun] = if samples.runs.windows(2).all(|w| w[0].start <= w[1].start) {
        &samples.runs
    } else {
        let mut v = samples.runs.clone();
        v.sort_by_key(|r| r.start);
        sorted = v;
        &sorted
    };
    let mut pieces: Vec<&[HostRun]> = runs.chunks(max_runs).collect();
    if pieces.is_empty() {
        pieces.push(&[]);
    }
    for runs in pieces {
        let meta = HostMeta {
            hz: samples.hz,
            threads: samples.threads.clone(),
            losses: if first { samples.losses.clone() } else { BTreeMap::new() },
        };
        first = false;
        let meta = serde_json::to_vec(&meta).map_err(std::io::Error::other)?;
        let body = encode_body(samples, runs);
        if body.len() > MAX_RAW as usize {
            return Err(std::io::Error::other("host samples chunk body exceeds the format limit"));
        }
        let z = zstd::bulk::compress(&body, zstd_level)?;
        let mut payload = Vec::with_capacity(z.len() + meta.len() + 10);
        varint::put(&mut payload, meta.len() as u64);
        payload.extend_from_slice(&meta);
        payload.extend_from_slice(&z);
        if payload.len() > MAX_PAYLOAD as usize {
            return Err(std::io::Error::other("host samples chunk exceeds the format limit"));
        }
        let frame = Frame::of(ChunkKind::HostSamples as u16, FLAG_COMPRESSED, &payload, body.len());
        out.extend_from_slice(&frame.encode());
        out.extend_from_slice(&payload);
    }
    Ok(out)
}

fn encode_body(samples: &HostSamples, runs: &[HostRun]) -> Vec<u8> {
    let mut b = Vec::with_capacity(runs.len() * 8 + samples.frames.len() * 6);
    varint::put(&mut b, samples.frames.len() as u64);
    for f in &samples.frames {
        varint::put(&mut b, u64::from(f.function.0));
        varint::put(&mut b, u64::from(f.file.0));
        varint::put(&mut b, u64::from(f.line));
    }
    varint::put(&mut b, samples.stacks.len() as u64);
    for s in &samples.stacks {
        varint::put(&mut b, s.len() as u64);
        for &f in s {
            varint::put(&mut b, u64::from(f));
        }
    }
    varint::put(&mut b, runs.len() as u64);
    let mut prev = 0u64;
    for r in runs {
        // Sorted by start: the delta is never negative.
        varint::put(&mut b, r.start.0.saturating_sub(prev));
        prev = r.start.0.max(prev);
        varint::put(&mut b, r.end.0.saturating_sub(r.start.0));
        varint::put(&mut b, u64::from(r.thread));
        b.push(r.state as u8);
        varint::put(&mut b, r.cpu_ns);
        varint::put(&mut b, r.stack.map_or(0, |s| u64::from(s) + 1));
        varint::put(&mut b, u64::from(r.samples));
    }
    b
}

/// What is wrong with a host samples chunk (the reader adds file and offset).
#[derive(Debug, thiserror::Error)]
pub(crate) enum HostChunkError {
    #[error("host samples meta: {0}")]
    Meta(serde_json::Error),
    #[error("host samples: truncated")]
    Truncated,
    #[error("host samples: a count larger than the chunk")]
    CountTooLarge,
    #[error("host samples: a frame names a string the table does not have")]
    UnknownString,
    #[error("host samples: truncated frame")]
    TruncatedFrame,
    #[error("host samples: truncated stack")]
    TruncatedStack,
    #[error("host samples: a stack names a frame the chunk does not have")]
    UnknownFrame,
    #[error("host samples: truncated run")]
    TruncatedRun,
    #[error("host samples: time overflow")]
    TimeOverflow,
    #[error("host samples: a run names a thread the chunk does not have")]
    UnknownThread,
    #[error("host samples: unknown thread state")]
    UnknownState,
    #[error("host samples: a run names a stack the chunk does not have")]
    UnknownStack,
    #[error("host samples: sample count overflow")]
    SampleCountOverflow,
    #[error("host samples: trailing bytes")]
    TrailingBytes,
}

/// Decode one chunk: its JSON `meta` and decompressed `body`. The error
/// says what is wrong.
pub(crate) fn decode_chunk(meta: &[u8], body: &[u8], strings: usize) -> Result<HostSamples, HostChunkError> {
    use HostChunkError as E;
    let meta: HostMeta = serde_json::from_slice(meta).map_err(E::Meta)?;
    let mut c = Cursor::new(body);
    let count = |c: &mut Cursor<'_>, each: usize| -> Result<usize, HostChunkError> {
        let n = c.varint().ok_or(E::Truncated)?;
        // Every entry takes at least `each` bytes: a count above that is damage.
        if n > (c.remaining() / each.max(1)) as u64 {
            return Err(E::CountTooLarge);
        }
        Ok(n as usize)
    };
    let string = |v: u64| -> Result<StringId, HostChunkError> {
        if v >= strings as u64 {
            return Err(E::UnknownString);
        }
        Ok(StringId(v as u32))
    };
    let n_frames = count(&mut c, 3)?;
    let mut frames = Vec::with_capacity(n_frames);
    for _ in 0..n_frames {
        let function = string(c.varint().ok_or(E::TruncatedFrame)?)?;
        let file = string(c.varint().ok_or(E::TruncatedFrame)?)?;
        let line = c.varint_u32().ok_or(E::TruncatedFrame)?;
        frames.push(HostFrame { function, file, line });
    }
    let n_stacks = count(&mut c, 1)?;
    let mut stacks = Vec::with_capacity(n_stacks);
    for _ in 0..n_stacks {
        let depth = count(&mut c, 1)?;
        let mut s = Vec::with_capacity(depth);
        for _ in 0..depth {
            let f = c.varint().ok_or(E::TruncatedStack)?;
            if f >= n_frames as u64 {
                return Err(E::UnknownFrame);
            }
            s.push(f as u32);
        }
        stacks.push(s);
    }
    let n_runs = count(&mut c, 7)?;
    let mut runs = Vec::with_capacity(n_runs);
    let mut start = 0u64;
    for _ in 0..n_runs {
        let t = |c: &mut Cursor<'_>| c.varint().ok_or(E::TruncatedRun);
        start = start.checked_add(t(&mut c)?).ok_or(E::TimeOverflow)?;
        let end = start.checked_add(t(&mut c)?).ok_or(E::TimeOverflow)?;
        let thread = t(&mut c)?;
        if thread >= meta.threads.len() as u64 {
            return Err(E::UnknownThread);
        }
        let state = c.bytes(1).ok_or(E::TruncatedRun)?[0];
        let state = ThreadState::from_u8(state).ok_or(E::UnknownState)?;
        let cpu_ns = t(&mut c)?;
        let stack = match t(&mut c)? {
            0 => None,
            s if s <= n_stacks as u64 => Some((s - 1) as u32),
            _ => return Err(E::UnknownStack),
        };
        let samples = u32::try_from(t(&mut c)?).map_err(|_| E::SampleCountOverflow)?;
        runs.push(HostRun {
            start: Nanos(start),
            end: Nanos(end),
            thread: thread as u32,
            state,
            cpu_ns,
            stack,
            samples,
        });
    }
    if c.remaining() != 0 {
        return Err(E::TrailingBytes);
    }
    Ok(HostSamples {
        hz: meta.hz,
        threads: meta.threads,
        frames,
        stacks,
        runs,
        losses: meta.losses,
    })
}

/// A strings chunk that appends `names` to a string table of `first`
/// strings (frame + payload bytes); empty if `names` is.
pub fn encode_strings_chunk(first: usize, names: &[&str]) -> Vec<u8> {
    if names.is_empty() {
        return Vec::new();
    }
    let mut body = Vec::new();
    varint::put(&mut body, first as u64);
    varint::put(&mut body, names.len() as u64);
    for s in names {
        varint::put(&mut body, s.len() as u64);
        body.extend_from_slice(s.as_bytes());
    }
    let mut payload = vec![0u8]; // no meta
    payload.extend_from_slice(&body);
    let frame = Frame::of(ChunkKind::Strings as u16, crate::chunk::FLAG_CRITICAL, &payload, body.len());
    let mut out = frame.encode().to_vec();
    out.extend_from_slice(&payload);
    out
}
