//! Putting a recording into the job's traces: each process's samples go
//! into the trace of the process itself or of its nearest traced ancestor
//! (a data-loader worker's into its trainer's), in that trace's clock. A
//! Python job with no trace at all gets one trace, for its first process,
//! holding the samples of the whole tree.

use crate::record::{ProcessRecord, Recording};
use gputrace_format::host::{encode_chunks, encode_strings_chunk, HostFrame, HostRun, HostSamples};
use gputrace_format::{ClockPair, Header, Producer, StringId, TimeDomain, TraceFile, TraceWriter, Trailer, WriterOptions};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Runs per host samples chunk.
const RUNS_PER_CHUNK: usize = 1 << 18;

/// Who ran the job and where its traces are.
#[derive(Clone, Debug)]
pub struct Target<'a> {
    /// The traces' directory.
    pub dir: &'a Path,
    /// Only traces written since this time belong to this run.
    pub since: std::time::SystemTime,
    /// The job's first process.
    pub root: u32,
    /// This machine's name, as the agent writes it in headers.
    pub hostname: &'a str,
    /// The job's command line (for a trace made for samples alone).
    pub command: Vec<String>,
    /// gputrace's version.
    pub tool_version: &'a str,
    /// Whether a Python job that wrote no trace gets one for its samples
    /// (not for a flight recorder, whose traces are snapshots on demand).
    pub new_trace_for_python: bool,
}

/// What was written where.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Written {
    /// (trace, samples, samples lost) of each trace that got samples.
    pub traces: Vec<(PathBuf, u64, u64)>,
    /// One line each for samples that could not be written.
    pub problems: Vec<String>,
}

/// Write `rec` into the traces of `target`.
pub fn into_traces(rec: &Recording, target: &Target<'_>) -> Written {
    let mut out = Written::default();
    let traces = traces_by_pid(target);
    let parents: HashMap<u32, Option<u32>> = rec.processes.iter().map(|p| (p.pid, p.ppid)).collect();
    let owner_of = |pid: u32| -> Option<u32> {
        let mut p = pid;
        for _ in 0..64 {
            if traces.contains_key(&p) {
                return Some(p);
            }
            p = (*parents.get(&p)?)?;
        }
        None
    };
    let mut groups: BTreeMap<u32, Vec<&ProcessRecord>> = BTreeMap::new();
    let mut orphans = Vec::new();
    let own_trace = traces.is_empty() && target.new_trace_for_python && rec.processes.iter().any(|p| p.looks_python);
    for p in &rec.processes {
        match owner_of(p.pid) {
            Some(o) => groups.entry(o).or_default().push(p),
            None if own_trace => groups.entry(target.root).or_default().push(p),
            // A job with no trace and no Python: nothing to attach samples to.
            None if traces.is_empty() => {}
            None if !p.runs.is_empty() => orphans.push(p.pid),
            None => {}
        }
    }
    if !orphans.is_empty() {
        out.problems.push(format!(
            "host samples of {} process(es) outside every traced process (pids {}) were not kept: only traced processes and their descendants keep theirs",
            orphans.len(),
            orphans.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
        ));
    }
    for (owner, procs) in groups {
        let result = match traces.get(&owner) {
            Some(path) if !crate::proc::has_exited(owner) => Err(SamplesError::StillRunning {
                path: path.clone(),
                pid: owner,
            }),
            Some(path) => append(path, rec, &procs).map(|n| (path.clone(), n)),
            None => new_trace(rec, &procs, target),
        };
        match result {
            Ok((path, (samples, lost))) => out.traces.push((path, samples, lost)),
            Err(e) => out.problems.push(e.to_string()),
        }
    }
    out
}

/// The traces of this host written since `since`, by pid (the largest
/// file where one process wrote several).
fn traces_by_pid(target: &Target<'_>) -> HashMap<u32, PathBuf> {
    let mut found: HashMap<u32, (u64, PathBuf)> = HashMap::new();
    let Ok(dir) = std::fs::read_dir(target.dir) else {
        return HashMap::new();
    };
    let since = target.since - std::time::Duration::from_secs(1);
    for e in dir.flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != gputrace_format::FILE_EXTENSION) {
            continue;
        }
        // A link planted under a trace's name is never read or written through.
        if !e.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let Ok(meta) = e.metadata() else { continue };
        if meta.modified().is_ok_and(|t| t < since) {
            continue;
        }
        let Ok(t) = TraceFile::open(&path) else { continue };
        let h = t.header();
        if h.hostname != target.hostname || h.producer != Producer::Agent || t.has_host_samples() {
            continue;
        }
        let size = meta.len();
        if found.get(&h.pid).is_none_or(|(s, _)| size > *s) {
            found.insert(h.pid, (size, path));
        }
    }
    found.into_iter().map(|(pid, (_, p))| (pid, p)).collect()
}

/// Map a `CLOCK_MONOTONIC` time to a trace's time domain, through the clocks
/// its header read together.
fn to_trace_clock(header: &Header) -> impl Fn(u64) -> u64 {
    let c = header.start_clock;
    let base = match header.time_domain {
        TimeDomain::Cupti => c.cupti_ns.unwrap_or(c.realtime_ns),
        TimeDomain::Realtime => c.realtime_ns,
        TimeDomain::Monotonic => c.monotonic_ns,
    };
    let shift = base as i128 - c.monotonic_ns as i128;
    move |t| (t as i128 + shift).clamp(0, u64::MAX as i128) as u64
}

/// The samples of `procs` as one trace's [`HostSamples`], their names
/// added to a string table of `first_string` strings (returned, in order).
fn build(rec: &Recording, procs: &[&ProcessRecord], first_string: usize, clock: impl Fn(u64) -> u64) -> (HostSamples, Vec<String>) {
    let mut s = HostSamples {
        hz: rec.hz,
        ..Default::default()
    };
    let mut names: Vec<String> = Vec::new();
    let mut frame_map: HashMap<u32, u32> = HashMap::new();
    let mut stack_map: HashMap<u32, u32> = HashMap::new();
    let mut known: HashMap<String, StringId> = HashMap::new();
    for p in procs {
        let t0 = s.threads.len() as u32;
        s.threads.extend(p.threads.iter().cloned());
        for r in &p.runs {
            let stack = r.stack.map(|g| {
                *stack_map.entry(g).or_insert_with(|| {
                    let frames = rec.stacks[g as usize]
                        .iter()
                        .map(|&f| {
                            *frame_map.entry(f).or_insert_with(|| {
                                let (function, file, line) = &rec.frames[f as usize];
                                let mut id_of = |n: &str| {
                                    *known.entry(n.to_string()).or_insert_with(|| {
                                        names.push(n.to_string());
                                        StringId((first_string + names.len() - 1) as u32)
                                    })
                                };
                                let frame = HostFrame {
                                    function: id_of(function),
                                    file: id_of(file),
                                    line: *line,
                                };
                                s.frames.push(frame);
                                s.frames.len() as u32 - 1
                            })
                        })
                        .collect();
                    s.stacks.push(frames);
                    s.stacks.len() as u32 - 1
                })
            });
            s.runs.push(HostRun {
                start: gputrace_format::Nanos(clock(r.start.0)),
                end: gputrace_format::Nanos(clock(r.end.0)),
                thread: r.thread + t0,
                stack,
                ..*r
            });
        }
        for (k, v) in &p.losses {
            *s.losses.entry(k.clone()).or_insert(0) += v;
        }
    }
    s.runs.sort_by_key(|r| (r.start, r.thread));
    (s, names)
}

/// Why a trace did not get its host samples.
#[derive(Debug, thiserror::Error)]
enum SamplesError {
    /// The process that writes the trace has not exited.
    #[error("{}: process {pid} is still running, its trace may still grow; its host samples were not added", path.display())]
    StillRunning { path: PathBuf, pid: u32 },
    /// Appending to the trace failed.
    #[error("{}: host samples not added: {why}", path.display())]
    NotAdded { path: PathBuf, why: WriteFailure },
    /// A trace of the samples alone could not be written.
    #[error("{}: host samples not written: {why}", path.display())]
    NotWritten { path: PathBuf, why: WriteFailure },
    /// Nothing to write.
    #[error("no host samples were taken (the job ended before the first sample)")]
    NoneTaken,
}

/// What went wrong writing samples.
#[derive(Debug, thiserror::Error)]
enum WriteFailure {
    #[error(transparent)]
    Format(#[from] gputrace_format::FormatError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("the trace is damaged at its end")]
    Damaged,
}

/// Append the samples of `procs` to the finished trace at `path`:
/// (samples, lost).
fn append(path: &Path, rec: &Recording, procs: &[&ProcessRecord]) -> Result<(u64, u64), SamplesError> {
    let fail = |why: WriteFailure| SamplesError::NotAdded {
        path: path.to_path_buf(),
        why,
    };
    let (header, strings) = {
        let t = TraceFile::open(path).map_err(|e| fail(e.into()))?;
        if t.damage().is_some() {
            return Err(fail(WriteFailure::Damaged));
        }
        (t.header().clone(), t.string_count())
    };
    let (samples, names) = build(rec, procs, strings, to_trace_clock(&header));
    let bytes = chunks(&samples, strings, &names).map_err(|e| fail(e.into()))?;
    let mut f = {
        use std::os::unix::fs::OpenOptionsExt;
        // Never through a link put in the trace's place since it was read.
        std::fs::OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| fail(e.into()))?
    };
    f.write_all(&bytes).and_then(|_| f.sync_data()).map_err(|e| fail(e.into()))?;
    Ok((samples.sample_count(), samples.lost()))
}

/// A new trace for a job with none: the samples alone, in `CLOCK_REALTIME`.
fn new_trace(rec: &Recording, procs: &[&ProcessRecord], target: &Target<'_>) -> Result<(PathBuf, (u64, u64)), SamplesError> {
    let samples_taken: usize = procs.iter().map(|p| p.runs.len() + p.losses.len()).sum();
    if samples_taken == 0 {
        return Err(SamplesError::NoneTaken);
    }
    let mut header = Header {
        producer: Producer::Agent,
        tool_version: target.tool_version.to_string(),
        hostname: target.hostname.to_string(),
        pid: target.root,
        command: target.command.clone(),
        start_clock: rec.start_clock,
        time_domain: TimeDomain::Realtime,
        ..Header::default()
    };
    header.extra.insert("host.samples_only".into(), "1".into());
    let path = free_path(target.dir, target.hostname, target.root);
    let fail = |why: WriteFailure| SamplesError::NotWritten { path: path.clone(), why };
    let trailer = Trailer {
        end_clock: ClockPair::now(),
        ..Trailer::default()
    };
    let mut bytes = TraceWriter::new(Vec::new(), &header, WriterOptions::default())
        .and_then(|w| w.finish(trailer))
        .map_err(|e| fail(e.into()))?;
    let (samples, names) = build(rec, procs, 1, to_trace_clock(&header));
    bytes.extend(chunks(&samples, 1, &names).map_err(|e| fail(e.into()))?);
    // Through `<name>.partial`, neither name written through a link.
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    gputrace_format::outdir::OutDir::open(target.dir)
        .and_then(|dir| dir.write_replacing(&name, &bytes))
        .map_err(|e| fail(e.into()))?;
    Ok((path, (samples.sample_count(), samples.lost())))
}

fn chunks(samples: &HostSamples, first_string: usize, names: &[String]) -> std::io::Result<Vec<u8>> {
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut bytes = encode_strings_chunk(first_string, &refs);
    bytes.extend(encode_chunks(samples, RUNS_PER_CHUNK, 3)?);
    Ok(bytes)
}

/// `HOST.pPID.gtrace` (as the agent names its traces), or with `.N` before
/// the extension if taken.
fn free_path(dir: &Path, host: &str, pid: u32) -> PathBuf {
    let host: String = host
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    let base = format!("{host}.p{pid}");
    let mut p = dir.join(format!("{base}.gtrace"));
    let mut n = 1;
    while p.symlink_metadata().is_ok() {
        p = dir.join(format!("{base}.{n}.gtrace"));
        n += 1;
    }
    p
}
