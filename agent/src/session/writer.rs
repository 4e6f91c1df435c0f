//! The writer thread: builds the header, opens the trace, then pumps every
//! source once per pass until the exit handler asks it to finish, and writes
//! the trailer. Each step is one function below, in the order they run.

use super::activity::{walk, ActivitySource};
use super::capture::{DutySide, GraphSwitch};
use super::losses::{record_losses, Losses};
use super::nccl::NcclSource;
use super::nvml::NvmlSource;
use super::nvtx::NvtxSource;
use super::source::{Pass, Source, Writer};
use super::{CuptiSide, Notes, Session, MARKERS_ONLY};
use crate::config::Config;
use crate::decode::Decoder;
use crate::flight::Triggers;
use crate::identity;
use crate::levers::GraphMode;
use crate::pool::Backlog;
use crate::say::say;
use gputrace_format::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::{Acquire, Release};
use std::time::{Duration, Instant};

/// The writer thread's body.
pub(super) fn run(s: &'static Session, failed_kinds: Vec<String>, api_filter: Option<String>, notes: Notes) {
    let cupti = s.cupti.as_ref();
    let mut start_clock = ClockPair::now();
    start_clock.cupti_ns = cupti.and_then(|c| c.api.timestamp().ok());
    let mut header = header(s, start_clock, failed_kinds, api_filter, notes);
    // Duty-cycled capture: capture has been on since `enabled_at`.
    let duty = cupti.zip(s.config.duty).map(|(c, d)| {
        header.extra.insert("capture.duty".into(), d.label());
        (c, DutySide::new(d, c.enabled_at))
    });
    let mut held = Backlog::default();
    header.devices = devices(s, cupti, &mut held);
    let samplers = plan_samplers(s, &mut header);
    let path = trace_path(&s.config, &header);
    let w = match open_trace(s, &header, &path) {
        Ok(w) => w,
        Err(e) => {
            say(&e.to_string());
            s.stop_capture();
            if let Some(st) = crate::nccl::state() {
                st.disable("the trace file could not be written");
            }
            for buf in held.drain() {
                s.pool.recycle(buf);
            }
            recycle_until_stop(s);
            return;
        }
    };
    let offset = start_clock.cupti_ns.map_or(0, |c| c as i64 - start_clock.realtime_ns as i64);
    let mut t = Tracing::new(s, w, path, sources(s, held, offset), duty);
    samplers.start(cupti);
    match t.passes() {
        Ok(()) => t.finish(),
        Err(e) => {
            write_failed(s, &t.path, &e);
            for src in &mut t.sources {
                src.abandon();
            }
            recycle_until_stop(s);
        }
    }
    s.finished.store(true, Release);
}

/// The sources, in the order each pass pumps them: CUPTI's activity first
/// (its decoder collects what the NCCL source links). `held`: CUPTI's
/// buffers completed before the file was open; `offset`: added to a
/// `CLOCK_REALTIME` ns to get the trace's time.
fn sources(s: &'static Session, held: Backlog, offset: i64) -> Vec<Box<dyn Source>> {
    let mut sources: Vec<Box<dyn Source>> = Vec::new();
    if let Some(c) = s.cupti.as_ref() {
        sources.push(Box::new(ActivitySource::new(s, c, held)));
    }
    sources.push(Box::new(NcclSource::new(s, offset)));
    sources.push(Box::new(NvtxSource::new(offset)));
    sources.push(Box::new(NvmlSource::new(offset)));
    sources.push(Box::<crate::pm_sampling::WriterSide>::default());
    sources
}

/// The NVML and PM samplers' plans, said in the header.
struct Samplers {
    nvml: Option<crate::nvml::Plan>,
    pm: Option<crate::pm_sampling::Plan>,
}

fn plan_samplers(s: &Session, header: &mut Header) -> Samplers {
    let (nvml, note) = crate::nvml::plan(
        s.config.gpu_sample_hz,
        &header.devices,
        header.rank.local_rank,
        s.config.nvml_path.clone(),
        std::env::var_os("CUDA_VISIBLE_DEVICES").is_some(),
    );
    header.extra.insert("nvml.sampling".into(), note);
    let on = s.config.gpu_metrics && s.cupti.is_some();
    let (pm, note) = crate::pm_sampling::plan(on, s.config.gpu_metrics_hz, &header.devices, header.rank.local_rank);
    header.extra.insert("pm.sampling".into(), note);
    Samplers { nvml, pm }
}

impl Samplers {
    /// Start the sampler threads (once the sources that drain them exist).
    fn start(self, cupti: Option<&CuptiSide>) {
        if let Some(p) = self.nvml {
            crate::nvml::start(p);
        }
        if let (Some(p), Some(c)) = (self.pm, cupti) {
            crate::pm_sampling::start(p, c.lib, c.source.clone());
        }
    }
}

/// The header: who, where, which CUDA, and the notes set-up made (devices
/// come later).
fn header(s: &Session, start_clock: ClockPair, failed_kinds: Vec<String>, api_filter: Option<String>, notes: Notes) -> Header {
    let cupti = s.cupti.as_ref();
    let mut header = Header {
        producer: Producer::Agent,
        tool_version: env!("CARGO_PKG_VERSION").into(),
        hostname: identity::hostname(),
        pid: std::process::id(),
        rank: RankInfo::from_env(|k| std::env::var(k).ok()),
        command: identity::command_line(),
        start_clock,
        time_domain: if cupti.is_some() { TimeDomain::Cupti } else { TimeDomain::Realtime },
        cuda: CudaVersions {
            driver: cupti.and_then(|c| identity::driver_version(&c.cuda)),
            runtime: identity::runtime_version(),
            cupti: cupti.map(|c| c.version),
        },
        devices: Vec::new(),
        extra: Default::default(),
    };
    let extra = &mut header.extra;
    match cupti {
        Some(c) => {
            extra.insert("cupti.library".into(), c.source.clone());
            extra.insert(
                "cupti.subscriber".into(),
                if c.multi_subscriber {
                    "multi (cuptiSubscribe_v2)"
                } else {
                    "legacy (sole subscriber)"
                }
                .into(),
            );
            extra.insert(
                "agent.buffers".into(),
                format!("{} x {} KiB", s.config.buffers, s.pool.buf_size() / 1024),
            );
        }
        None if MARKERS_ONLY.load(Acquire) => {
            extra.insert(
                "agent.mode".into(),
                "markers-only: the process never initialized CUDA, so only its NVTX markers were recorded".into(),
            );
        }
        None => {
            extra.insert(
                "agent.mode".into(),
                "nccl-only: CUPTI was not running in this process, so only NCCL's collectives were recorded".into(),
            );
        }
    }
    for (var, key) in [
        ("GPUTRACE_TOKENS_PER_STEP", "gputrace.tokens_per_step"),
        ("GPUTRACE_SAMPLES_PER_STEP", "gputrace.samples_per_step"),
    ] {
        if let Some(v) = std::env::var_os(var) {
            match v.to_str().and_then(|v| v.trim().parse::<u64>().ok()).filter(|&n| n > 0) {
                Some(n) => {
                    extra.insert(key.into(), n.to_string());
                }
                None => say(&format!("ignoring {var}={}: not a positive integer", v.to_string_lossy())),
            }
        }
    }
    // Which `gputrace run` this trace belongs to (its live metrics count only its own
    // traces). Only an id of the launcher's shape is kept.
    if let Some(id) = std::env::var("GPUTRACE_RUN_ID").ok().filter(|v| is_run_id(v)) {
        extra.insert("gputrace.run_id".into(), id);
    }
    if !failed_kinds.is_empty() {
        extra.insert("agent.kinds_not_enabled".into(), failed_kinds.join("; "));
    }
    if let Some(note) = api_filter {
        extra.insert("agent.api_filter".into(), note);
    }
    for (k, v) in notes {
        extra.insert(k.into(), v);
    }
    header
}

/// The devices, from the driver; failing that, from CUPTI's DEVICE records,
/// which it emits once the driver is initialized: flush and scan for up to a
/// second. The buffers scanned are `held`, to be decoded for real once the
/// file is open (nothing is dropped).
fn devices(s: &Session, cupti: Option<&CuptiSide>, held: &mut Backlog) -> Vec<DeviceInfo> {
    let Some(c) = cupti else { return Vec::new() };
    let devices = identity::devices(&c.cuda, Duration::from_secs(3));
    if !devices.is_empty() {
        return devices;
    }
    let mut scan = Decoder::default();
    let mut scratch =
        TraceWriter::new(std::io::sink(), &Header::default(), WriterOptions::default()).expect("writing to a sink cannot fail");
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        while let Some((buf, valid)) = s.pool.take_completed() {
            // Writing to a sink cannot fail.
            let _ = walk(&c.api, &mut scan, buf, valid, &mut scratch, &mut 0);
            held.hold(buf, valid);
        }
        // Stop at the first DEVICE record, after a second, at exit (the
        // exit handler's forced flush has just delivered everything), or
        // before holding half the pool.
        if !scan.devices.is_empty() || Instant::now() >= until || s.stop.load(Acquire) || held.count() >= s.config.buffers / 2 {
            break;
        }
        let _ = s.flush(0);
        std::thread::sleep(Duration::from_millis(20));
    }
    identity::devices_from_records(&scan.devices)
}

/// Why the trace file could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the trace {}: {cause}; capture is off, the job continues", .path.display())]
struct OpenError {
    path: PathBuf,
    cause: OpenCause,
}

#[derive(Debug, thiserror::Error)]
enum OpenCause {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Format(#[from] FormatError),
}

/// Create the trace file and write its header to disk at once: a process
/// that execs or is killed right away still leaves a readable (if empty)
/// trace.
fn open_trace(s: &Session, header: &Header, path: &Path) -> Result<Writer, OpenError> {
    let open = || -> Result<Writer, OpenCause> {
        std::fs::create_dir_all(&s.config.output_dir)?;
        let f = crate::flight::open_output(&s.config, path)?;
        let mut w = TraceWriter::new(f, header, WriterOptions::default())?;
        w.flush()?;
        Ok(w)
    };
    open().map_err(|cause| OpenError {
        path: path.to_path_buf(),
        cause,
    })
}

/// The writer thread's state once the file is open.
struct Tracing {
    s: &'static Session,
    w: Writer,
    path: PathBuf,
    /// In the order each pass pumps them (see [`sources`]).
    sources: Vec<Box<dyn Source>>,
    pass: Pass,
    losses: Losses,
    duty: Option<(&'static CuptiSide, DutySide)>,
    graphs: GraphSwitch,
    flight: Option<Triggers>,
}

impl Tracing {
    fn new(
        s: &'static Session,
        w: Writer,
        path: PathBuf,
        sources: Vec<Box<dyn Source>>,
        duty: Option<(&'static CuptiSide, DutySide)>,
    ) -> Tracing {
        let mut dec = Decoder::default();
        dec.graphs.on = matches!(s.config.graphs, GraphMode::Auto { .. });
        let flight = s.config.flight.map(|fc| Triggers::new(&s.config, &fc));
        let mut pass = Pass::new(dec);
        pass.steps.wanted = flight.as_ref().is_some_and(|t| t.wants_steps());
        Tracing {
            s,
            w,
            path,
            sources,
            pass,
            losses: Losses::default(),
            duty,
            graphs: GraphSwitch::default(),
            flight,
        }
    }

    /// Writer passes, every 5 ms (or when the exit handler wakes the
    /// thread), until the one after the exit handler's forced flush.
    fn passes(&mut self) -> Result<(), FormatError> {
        if let Some(first) = self.duty.as_ref().and_then(|(_, d)| d.first()) {
            self.w.add_capture_windows(&[first])?;
            self.w.flush()?;
        }
        let mut next_flush = Instant::now() + self.s.config.flush_period;
        loop {
            let last = self.s.stop.load(Acquire);
            self.pass.last = last;
            self.pass_once()?;
            if last {
                return Ok(());
            }
            if Instant::now() >= next_flush {
                self.periodic()?;
                next_flush = Instant::now() + self.s.config.flush_period;
            }
            std::thread::park_timeout(Duration::from_millis(5));
        }
    }

    /// One pass: the duty cycle's transitions, every source, and the capture
    /// windows that opened or closed.
    fn pass_once(&mut self) -> Result<(), FormatError> {
        let s = self.s;
        // A window that closes now is recorded after its records are written.
        let mut windows = match (&mut self.duty, self.pass.last) {
            (Some((c, d)), false) => d.poll(s, c),
            _ => Vec::new(),
        };
        for src in &mut self.sources {
            src.prepare(&mut self.pass);
        }
        for src in &mut self.sources {
            src.pump(&mut self.w, &mut self.pass)?;
        }
        self.losses.undecodable += std::mem::take(&mut self.pass.undecodable);
        if let Some(c) = s.cupti.as_ref() {
            let capture_on = self.duty.as_ref().is_none_or(|(_, d)| d.is_on());
            self.graphs.poll(s, c, &self.pass.dec, capture_on);
        }
        // The window open at exit ends with the trace.
        if let (Some((c, d)), true) = (&mut self.duty, self.pass.last) {
            windows = d.close(c).into_iter().collect();
        }
        if !windows.is_empty() {
            self.w.add_capture_windows(&windows)?;
            self.w.flush()?;
        }
        Ok(())
    }

    /// Once per flush period: CUPTI's flush (its records reach the pool),
    /// the losses so far, and the flight recorder's triggers.
    fn periodic(&mut self) -> Result<(), FormatError> {
        if let Err(e) = self.s.flush(0) {
            say(&format!("{e} during the periodic flush"));
        }
        record_losses(self.s, &mut self.w, &mut self.losses)?;
        self.w.flush()?;
        if let Some(t) = &mut self.flight {
            if let Some(why) = t.poll(std::mem::take(&mut self.pass.activity), &mut self.pass.steps.times) {
                crate::flight::snapshot(&mut self.w, &self.path, &why);
            }
        }
        Ok(())
    }

    /// After the last pass: every source's rest and notes, the writer's own
    /// notes, the last losses and the trailer.
    fn finish(mut self) {
        let s = self.s;
        let mut trailer = Trailer::default();
        let mut end = ClockPair::now();
        end.cupti_ns = s.cupti.as_ref().and_then(|c| c.api.timestamp().ok());
        trailer.end_clock = end;
        for src in &mut self.sources {
            if let Err(e) = src.finish(&mut self.w, &mut self.pass, &mut trailer) {
                write_failed(s, &self.path, &e);
                return;
            }
        }
        self.writer_notes(&mut trailer);
        let r = record_losses(s, &mut self.w, &mut self.losses)
            .and_then(|_| self.w.finish(trailer))
            .and_then(|mut b| {
                use std::io::Write;
                b.flush().map_err(FormatError::Write).map(|_| b)
            });
        match r {
            Ok(out) => {
                if let Some(t) = &mut self.flight {
                    crate::flight::snapshot_at_exit(t, &mut self.pass.steps.times, &out, &self.path);
                }
            }
            Err(e) => write_failed(s, &self.path, &e),
        }
    }

    /// The trailer's notes of the writer itself: what the decoder filtered
    /// and skipped, CUPTI's overhead records, the graph switch, and this
    /// thread's CPU time (one clock read, at the end).
    fn writer_notes(&self, trailer: &mut Trailer) {
        let dec = &self.pass.dec;
        trailer
            .extra
            .insert("agent.api_calls_filtered".into(), dec.filtered_api.to_string());
        trailer.extra.insert("agent.records_skipped".into(), dec.skipped.to_string());
        if let Some(note) = self.graphs.note(self.s) {
            trailer.extra.insert("capture.graph_level".into(), note);
        }
        for (name, records, ns) in dec.overhead.seen() {
            trailer.set_overhead(name, records, ns);
        }
        if let Some(ns) = thread_cpu_ns() {
            trailer.extra.insert("agent.writer_cpu_ns".into(), ns.to_string());
        }
    }
}

fn trace_path(config: &Config, header: &Header) -> PathBuf {
    let rank = header.rank.rank.map_or(String::new(), |r| format!(".r{:05}", r.0));
    let base = format!("{}{}.p{}", identity::sanitize(&header.hostname), rank, header.pid);
    let mut p = config.output_dir.join(format!("{base}.{FILE_EXTENSION}"));
    let mut n = 1;
    let mut link = None;
    // A link, even a dangling one, is a taken name: never written through.
    while let Ok(m) = p.symlink_metadata() {
        if m.file_type().is_symlink() && link.is_none() {
            link = Some(p.clone());
        }
        p = config.output_dir.join(format!("{base}.{n}.{FILE_EXTENSION}"));
        n += 1;
    }
    if let Some(link) = link {
        say(&format!(
            "{} is a symbolic link; gputrace never writes through a link in its output directory, so this trace goes to {}",
            link.display(),
            p.display()
        ));
    }
    p
}

/// CPU time of the calling thread (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu_ns() -> Option<u64> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: valid out-pointer.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (r == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// A run id as `gputrace run` makes them: 1 to 64 ASCII digits and dashes.
fn is_run_id(v: &str) -> bool {
    (1..=64).contains(&v.len()) && v.bytes().all(|b| b.is_ascii_digit() || b == b'-')
}

fn write_failed(s: &Session, path: &Path, e: &FormatError) {
    say(&format!(
        "writing the trace {} failed: {e}; capture stopped, the job continues",
        path.display()
    ));
    s.stop_capture();
    if let Some(st) = crate::nccl::state() {
        st.disable("the trace file could not be written");
    }
    if let Some(hw) = crate::nvml::state() {
        hw.stop_and_wait(Duration::ZERO);
    }
    crate::pm_sampling::stop_now();
}

/// After a failure to open or write the file: keep CUPTI's buffers flowing (so it
/// never runs dry and drops silently inside the job) until exit.
fn recycle_until_stop(s: &Session) {
    loop {
        while let Some((buf, _)) = s.pool.take_completed() {
            s.pool.recycle(buf);
        }
        if s.stop.load(Acquire) {
            break;
        }
        std::thread::park_timeout(Duration::from_millis(20));
    }
    s.finished.store(true, Release);
}
