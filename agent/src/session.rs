//! One capture session per process: set-up in `InitializeInjection`, the
//! writer thread, the periodic flush, and the final flush at exit.
//!
//! Threads and what they may do:
//! - CUPTI's threads run `buffer_requested`/`buffer_completed`: pool
//!   operations only (see `pool.rs`).
//! - The writer thread decodes completed buffers, writes chunks, and calls
//!   `cuptiActivityFlushAll(0)` once per flush period.
//! - The exit handler calls `cuptiActivityFlushAll(FORCED)` and waits (with
//!   a deadline) for the writer to write the trailer.
//!
//! `flush_lock` serializes the two flush callers: CUPTI deadlocks if two
//! threads flush at once. It is never held by a CUPTI callback.

use crate::cbid_names;
use crate::config::Config;
use crate::cupti::{Cupti, CuptiError, FLUSH_FORCED, MULTIPLE_SUBSCRIBERS};
use crate::decode::{kind, Decoder};
use crate::dl::{self, Lib};
use crate::duty::{Duty, Schedule, Transition};
use crate::identity;
use crate::levers::{self, GraphMode};
use crate::pool::{Backlog, Pool};
use crate::say::say;
use gputrace_format::*;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::*};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The live session. Set once, never dropped (CUPTI may call back until
/// the process ends).
pub static SESSION: OnceLock<Session> = OnceLock::new();
/// pid that created the session: a forked child sees another pid and
/// leaves CUPTI, the buffers and the file alone.
pub static OWNER_PID: AtomicU32 = AtomicU32::new(0);

/// Capture state shared by all threads.
pub struct Session {
    pub(crate) pool: Pool,
    /// CUPTI, when this session captures GPU activity (`None`: an NCCL-only
    /// session, started by the NCCL plugin when CUPTI is unavailable).
    cupti: Option<CuptiSide>,
    /// EXTERNAL_CORRELATION records are on: the NCCL plugin may push ids.
    external_ids: AtomicBool,
    /// GRAPH_TRACE is on (graphs at graph level): enabled again after a
    /// duty cycle's off phase. CUPTI cannot go back to node level.
    graph_level: AtomicBool,
    config: Config,
    flush_lock: Mutex<()>,
    /// Set by the exit handler after its forced flush: drain and finish.
    stop: AtomicBool,
    /// Set by the writer thread when the trailer is written (or it gave up).
    finished: AtomicBool,
    writer_thread: OnceLock<std::thread::Thread>,
}

/// The CUPTI half of a session.
struct CuptiSide {
    api: Cupti,
    version: u32,
    source: String,
    /// CUPTI's multi-subscriber API is in use (other profilers can coexist).
    multi_subscriber: bool,
    cuda: Lib,
    /// libcupti itself (the PM sampler resolves its functions from it).
    lib: Lib,
    /// CUPTI's time (and the monotonic clock's) just before the activity
    /// kinds were enabled: where a duty-cycled capture's first window starts.
    enabled_at: (Nanos, Instant),
}

/// This process owns the session just set: remember its pid and have
/// forked children flag themselves.
fn own_session() {
    OWNER_PID.store(std::process::id(), Release);
    // Safety: registering a plain extern "C" function with libc.
    unsafe { libc::pthread_atfork(None, None, Some(crate::correlation::after_fork_child)) };
}

/// Everything `InitializeInjection` does. Errors are the one line to print.
pub fn start() -> Result<(), String> {
    let config = Config::from_env(|k| std::env::var(k).ok());
    if config.disabled {
        return Err("GPUTRACE_DISABLE=1: capture is off for this process".into());
    }
    if let Some(e) = &config.duty_error {
        say(&format!("{e}; capturing the whole time"));
    }
    for line in &config.setting_errors {
        say(line);
    }
    // CUPTI 13.2 crashes on its first call without libcuda; in injection
    // mode the driver called us, so it is loaded. Anything else: stop here.
    let cuda = dl::libcuda_loaded().ok_or("libcuda.so.1 is not loaded in this process; capture is off")?;
    let search = dl::find_cupti(config.cupti_path.clone(), config.cuda_home.clone());
    let Some((lib, source)) = search.found else {
        return Err(format!(
            "libcupti not found (searched: {}); set GPUTRACE_CUPTI to its path; this process runs untraced",
            search.searched.join(", ")
        ));
    };
    let cupti = Cupti::resolve(&lib).map_err(|e| format!("{source}: {e}; this process runs untraced"))?;
    let cupti_version = cupti
        .version()
        .map_err(|e| format!("{e}{}; this process runs untraced", no_driver_hint(e.code)))?;
    let multi_subscriber = match cupti.subscribe(cupti_version) {
        Ok(multi) => multi,
        Err(CuptiError { code, .. }) if code == MULTIPLE_SUBSCRIBERS => {
            return Err(
                "CUPTI is already in use by another profiler in this process (torch.profiler/Kineto, Nsight Systems or \
                        another CUPTI tool); this process runs untraced"
                    .into(),
            )
        }
        Err(e) => return Err(format!("{e}{}; this process runs untraced", no_driver_hint(e.code))),
    };
    let pool = Pool::new(config.buffers, config.buffer_bytes).ok_or_else(|| {
        format!(
            "could not allocate {} MiB of trace buffers; this process runs untraced",
            (config.buffers * config.buffer_bytes) >> 20
        )
    })?;
    let enabled_at = (
        Nanos(cupti.timestamp().unwrap_or_else(|_| ClockPair::now().realtime_ns)),
        Instant::now(),
    );
    let cupti = CuptiSide {
        api: cupti,
        version: cupti_version,
        source,
        multi_subscriber,
        cuda,
        lib,
        enabled_at,
    };
    let session = Session::new(pool, Some(cupti), config);
    if SESSION.set(session).is_err() {
        return Ok(()); // already running (InitializeInjection called twice)
    }
    let s = SESSION.get().expect("just set");
    let c = s.cupti.as_ref().expect("set above");
    own_session();
    crate::correlation::connect(&c.api, &s.external_ids);
    let _ = c.api.use_system_thread_ids();
    // Both must be set before the callbacks are registered and any kind enabled.
    let mut notes = vec![(
        "cupti.per_thread_buffers",
        levers::per_thread_buffers(&c.api, s.config.per_thread_buffers),
    )];
    let (timestamps, line) = levers::hw_trace(&c.api, c.version, s.config.hw_trace);
    if let Some(line) = line {
        say(&line);
    }
    notes.push(("cupti.kernel_timestamps", timestamps));
    notes.push(("capture.graphs", s.config.graphs.label()));
    c.api.register().map_err(|e| format!("{e}; this process runs untraced"))?;
    if s.config.api_calls {
        c.api
            .set_api_allowlist(kept_calls(&cbid_names::RUNTIME), kept_calls(&cbid_names::DRIVER));
    }
    // The concurrent kernel kind is essential; the others are best effort.
    c.api
        .enable(kind::CONCURRENT_KERNEL)
        .map_err(|e| format!("{e}; this process runs untraced"))?;
    let mut failed: Vec<String> = best_effort_kinds(s.config.api_calls)
        .into_iter()
        .filter_map(|k| c.api.enable(k).err().map(|e| format!("kind {k}: {e}")))
        .collect();
    if s.config.graphs == GraphMode::Graph {
        match c.api.enable(kind::GRAPH_TRACE) {
            Ok(()) => s.graph_level.store(true, Release),
            Err(e) => failed.push(format!(
                "kind {} (graph level): {e}; graphs are recorded node by node",
                kind::GRAPH_TRACE
            )),
        }
    }
    let api_filter = s.config.api_calls.then(|| filter_api_calls(&c.api));
    // For the NCCL plugin's collective → kernel links (see nccl/link.rs).
    if s.config.api_calls && crate::nccl::enabled_by_env() && c.api.has_external_correlation() {
        match c.api.enable(kind::EXTERNAL_CORRELATION) {
            Ok(()) => s.external_ids.store(true, Release),
            Err(e) => failed.push(format!("kind {}: {e}", kind::EXTERNAL_CORRELATION)),
        }
    }
    spawn_writer(s, failed, api_filter, notes)
}

/// The activity kinds enabled besides the concurrent kernel kind (best effort), with the
/// API kinds when `api_calls`. One list for enabling and for stopping, so that stopping
/// turns off every kind that was turned on.
fn best_effort_kinds(api_calls: bool) -> Vec<u32> {
    let mut kinds = vec![
        kind::MEMCPY,
        kind::MEMCPY2,
        kind::MEMSET,
        kind::SYNCHRONIZATION,
        kind::OVERHEAD,
        kind::DEVICE,
        kind::CONTEXT,
    ];
    if api_calls {
        kinds.extend([kind::RUNTIME, kind::DRIVER]);
    }
    kinds
}

/// Ask CUPTI not to record the API calls the decoder would drop as noise
/// (`cudaGetDevice`, `cudaGetLastError`, `cuCtxGetCurrent`, …). PyTorch
/// makes many times more of those than launches (measured: 17 per kept
/// call), and each costs CUPTI a record on the job's thread. Returns what to
/// note in the header; the decoder's filter stays as the fallback.
fn filter_api_calls(api: &Cupti) -> String {
    fn dropped(table: &'static [(&'static str, bool)]) -> impl Iterator<Item = u32> {
        table
            .iter()
            .enumerate()
            .filter(|(_, (name, keep))| !keep && !name.is_empty())
            .map(|(cbid, _)| cbid as u32)
    }
    match api.allowlist_outcome() {
        Some(Ok(())) => {
            return format!(
                "in CUPTI (allow-list, CUPTI 13.4+): only the {} runtime and {} driver calls that launch, copy, set, \
                 synchronize, allocate or capture are recorded",
                kept_calls(&cbid_names::RUNTIME).len(),
                kept_calls(&cbid_names::DRIVER).len()
            )
        }
        Some(Err(e)) => return format!("after capture (CUPTI refused the allow-list: {e})"),
        None => {}
    }
    match api.disable_api_calls(dropped(&cbid_names::RUNTIME), dropped(&cbid_names::DRIVER)) {
        Some(sw) if sw.off > 0 => match sw.first_error {
            Some(e) => format!("in CUPTI: {} query calls not recorded ({} refused: {e})", sw.off, sw.refused),
            None => format!("in CUPTI: {} query calls not recorded", sw.off),
        },
        Some(sw) => format!(
            "after capture ({})",
            sw.first_error.map_or("nothing to switch off".into(), |e| e.to_string())
        ),
        None => "after capture (this CUPTI has no per-call switch, or is subscriber-scoped)".into(),
    }
}

/// The callback ids of the calls whose API records are kept.
fn kept_calls(table: &'static [(&'static str, bool)]) -> Vec<u32> {
    table
        .iter()
        .enumerate()
        .filter(|(_, (_, keep))| *keep)
        .map(|(cbid, _)| cbid as u32)
        .collect()
}

/// Why a session runs without CUPTI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Started by the NCCL plugin.
    Nccl,
    /// Started at exit for NVTX markers (the process never initialized CUDA).
    Markers,
}

/// Set when the session without CUPTI was started for markers.
static MARKERS_ONLY: AtomicBool = AtomicBool::new(false);

/// Start a session without CUPTI, for the NCCL plugin (called from its first
/// `init` when `InitializeInjection` did not start one: CUPTI held by another
/// profiler, no libcupti, or NCCL loaded us without CUDA injection).
pub fn start_nccl_only() -> Result<(), String> {
    start_without_cupti(Mode::Nccl)
}

/// A session without CUPTI (see [`Mode`]).
pub fn start_without_cupti(mode: Mode) -> Result<(), String> {
    if let Some(s) = SESSION.get() {
        // A session whose writer never started (CUPTI failed after set-up
        // began) or that belongs to the parent of this forked process writes
        // nothing: say so rather than record into a queue nobody drains.
        if s.writer_thread.get().is_none() {
            return Err("capture is off in this process (see the gputrace: line above)".into());
        }
        if OWNER_PID.load(Acquire) != std::process::id() {
            return Err("this forked process does not write a trace of its own".into());
        }
        return Ok(());
    }
    let config = Config::from_env(|k| std::env::var(k).ok());
    if config.disabled {
        return Err("GPUTRACE_DISABLE=1: capture is off for this process".into());
    }
    let pool = Pool::new(2, 64 * 1024).ok_or("could not allocate the trace buffers")?;
    let session = Session::new(pool, None, config);
    if SESSION.set(session).is_err() {
        return Ok(());
    }
    MARKERS_ONLY.store(mode == Mode::Markers, Release);
    let s = SESSION.get().expect("just set");
    own_session();
    spawn_writer(s, Vec::new(), None, Vec::new())
}

/// Exit handler registered at NVTX's first call (by `nvtx_inject`): when no
/// session ever started in this process (no CUDA), start one without CUPTI
/// now and finish it, so the markers reach a trace.
pub extern "C" fn write_markers_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        if !crate::nvtx::owns_markers() {
            return;
        }
        if SESSION.get().is_some() {
            return; // that session's own exit handler finishes it
        }
        match start_without_cupti(Mode::Markers) {
            Ok(()) => {
                if let Some(sess) = SESSION.get() {
                    sess.finish_at_exit(Duration::from_secs(10));
                }
            }
            Err(msg) => say(&format!("{msg}; the NVTX markers are not written")),
        }
    });
}

/// Notes for the trace header (key, value).
type Notes = Vec<(&'static str, String)>;

fn spawn_writer(s: &'static Session, failed: Vec<String>, api_filter: Option<String>, notes: Notes) -> Result<(), String> {
    let handle = std::thread::Builder::new()
        .name("gputrace-writer".into())
        .spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| writer_main(s, failed, api_filter, notes)));
            if r.is_err() {
                say("internal error in the writer thread; capture stopped, the job continues");
                s.stop_capture();
                s.finished.store(true, Release);
            }
        })
        .map_err(|e| format!("could not start the writer thread: {e}; this process runs untraced"))?;
    let _ = s.writer_thread.set(handle.thread().clone());
    // A forked child inherits this handler; it recognises itself by its pid
    // (OWNER_PID) and leaves the parent's CUPTI state, buffers and file alone.
    // Safety: registering a plain extern "C" function with libc.
    unsafe { libc::atexit(crate::at_exit) };
    Ok(())
}

/// CUPTI answers NOT_INITIALIZED (12.x) or UNKNOWN (13.x) when there is no
/// usable GPU driver.
fn no_driver_hint(code: u32) -> &'static str {
    match code {
        15 | 999 => " (no usable GPU or driver for CUPTI?)",
        _ => "",
    }
}

impl Session {
    fn new(pool: Pool, cupti: Option<CuptiSide>, config: Config) -> Session {
        Session {
            pool,
            cupti,
            external_ids: AtomicBool::new(false),
            graph_level: AtomicBool::new(false),
            config,
            flush_lock: Mutex::new(()),
            stop: AtomicBool::new(false),
            finished: AtomicBool::new(false),
            writer_thread: OnceLock::new(),
        }
    }

    /// Disable every kind we enabled (best effort), so CUPTI stops costing
    /// the job anything after a failure.
    fn stop_capture(&self) {
        self.pause_capture();
    }

    /// Disable every kind `start` enabled (best effort). Returns whether
    /// EXTERNAL_CORRELATION records were on, for [`Self::resume_capture`].
    fn pause_capture(&self) -> bool {
        let Some(c) = &self.cupti else { return false };
        // The plugin stops pushing ids before their records are turned off.
        let external = self.external_ids.swap(false, AcqRel);
        if external {
            let _ = c.api.disable(kind::EXTERNAL_CORRELATION);
        }
        for k in std::iter::once(kind::CONCURRENT_KERNEL).chain(best_effort_kinds(true)) {
            let _ = c.api.disable(k);
        }
        if self.graph_level.load(Acquire) {
            let _ = c.api.disable(kind::GRAPH_TRACE);
        }
        external
    }

    /// Enable again what [`Self::pause_capture`] disabled (duty-cycled
    /// capture; writer thread only). Kinds that failed at start fail again,
    /// unseen: the header already names them.
    fn resume_capture(&self, external: bool) {
        let Some(c) = &self.cupti else { return };
        for k in std::iter::once(kind::CONCURRENT_KERNEL).chain(best_effort_kinds(self.config.api_calls)) {
            let _ = c.api.enable(k);
        }
        if self.graph_level.load(Acquire) {
            let _ = c.api.enable(kind::GRAPH_TRACE);
        }
        // Enabling an API kind turns its per-call switches back on (the
        // allow-list of the subscriber-scoped API is given at each enable).
        if self.config.api_calls {
            let _ = filter_api_calls(&c.api);
        }
        // Records on before the plugin may push ids again.
        if external && c.api.enable(kind::EXTERNAL_CORRELATION).is_ok() {
            self.external_ids.store(true, Release);
        }
    }

    fn flush(&self, flag: u32) -> Result<(), CuptiError> {
        let Some(c) = &self.cupti else { return Ok(()) };
        let _guard = self.flush_lock.lock().unwrap_or_else(|p| p.into_inner());
        c.api.flush_all(flag)
    }

    /// The exit handler's part: final forced flush, then wait for the
    /// writer (never longer than `deadline`).
    pub fn finish_at_exit(&self, deadline: Duration) {
        if self.stop.load(Acquire) {
            return;
        }
        let _ = self.flush(FLUSH_FORCED);
        self.stop.store(true, Release);
        if let Some(t) = self.writer_thread.get() {
            t.unpark();
        }
        let until = Instant::now() + deadline;
        while !self.finished.load(Acquire) {
            if Instant::now() >= until {
                say("the trace was not finished in time at exit; it is readable up to its last whole chunk");
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
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

struct Losses {
    pool_buffers: u64,
    pool_bytes: u64,
    undecodable: u64,
    /// NCCL plugin loss counters already written (slots, queue, comms, disabled).
    nccl: [u64; 4],
    /// NVTX loss counters already written (queue, domains, strings, names, too many open).
    nvtx: [u64; 6],
}

/// The writer thread's side of the NCCL plugin: links collectives to their
/// kernels and writes them, with the communicators.
struct NcclSide {
    linker: crate::nccl::link::Linker,
    comms_written: usize,
    comms: Vec<crate::nccl::CommInfo>,
    ready: Vec<crate::nccl::link::Ready>,
    /// Communicator ids already written (NCCL < 2.27 names a communicator
    /// only in its collectives: its record is written at the first one).
    known: std::collections::HashSet<u64>,
    /// Profiler interface version of each communicator slot without an id.
    legacy_version: u32,
    /// Added to a `CLOCK_REALTIME` ns to get the trace's time domain.
    offset: i64,
    epoch: Instant,
}

impl NcclSide {
    fn new(s: &Session, start: &ClockPair) -> NcclSide {
        let offset = start.cupti_ns.map_or(0, |c| c as i64 - start.realtime_ns as i64);
        // CUPTI delivers kernel records at its flushes: wait three periods.
        let wait = (s.config.flush_period * 3).max(Duration::from_secs(2));
        NcclSide {
            linker: crate::nccl::link::Linker::new(s.external_ids.load(Acquire), wait.as_nanos() as u64),
            comms_written: 0,
            comms: Vec::new(),
            ready: Vec::new(),
            known: Default::default(),
            legacy_version: 0,
            offset,
            epoch: Instant::now(),
        }
    }

    fn time(&self, realtime_ns: u64) -> Nanos {
        to_trace_time(realtime_ns, self.offset)
    }

    /// Move what the plugin and CUPTI delivered through the linker into the
    /// trace. `last`: write everything still waiting.
    fn pump<W: std::io::Write>(&mut self, dec: &mut Decoder, w: &mut TraceWriter<W>, last: bool) -> Result<(), FormatError> {
        let Some(st) = crate::nccl::state() else {
            return Ok(());
        };
        self.comms.clear();
        self.comms_written = st.comms_from(self.comms_written, &mut self.comms);
        if !self.comms.is_empty() {
            // v1–v3 `init` gives no id: those communicators are written from
            // their collectives instead.
            if let Some(c) = self.comms.iter().find(|c| c.id == 0) {
                self.legacy_version = c.version;
            }
            let known = &mut self.known;
            let offset = self.offset;
            let list: Vec<Communicator> = self
                .comms
                .iter()
                .filter(|c| c.id != 0 && known.insert(c.id))
                .map(|c| Communicator {
                    id: CommId(c.id),
                    name: crate::nccl::name_str(&c.name).into_owned(),
                    rank: known_rank(c.rank),
                    nranks: c.nranks.max(0) as u32,
                    nodes: c.nodes.max(0) as u32,
                    plugin_version: c.version,
                    created: to_trace_time(c.created_ns, offset),
                })
                .collect();
            w.add_communicators(&list)?;
        }
        let now = self.epoch.elapsed().as_nanos() as u64;
        while let Some(r) = st.queue.pop() {
            self.linker.record(r, now, &mut self.ready);
        }
        for (ext, corr) in dec.ext_links.drain(..) {
            self.linker.external(ext, corr);
        }
        for k in dec.comm_kernels.drain(..) {
            self.linker.kernel(k);
        }
        // A pass costs about 7 ns per waiting collective (`cargo bench -p
        // gputrace-agent --bench agent`): every writer pass can afford it.
        self.linker.poll(now, last, &mut self.ready);
        dec.collect_copies = self.linker.wants_copies;
        let mut ready = std::mem::take(&mut self.ready);
        for r in ready.drain(..) {
            if r.rec.comm != 0 && self.known.insert(r.rec.comm) {
                w.add_communicators(&[Communicator {
                    id: CommId(r.rec.comm),
                    rank: known_rank(r.rec.rank),
                    nranks: r.rec.nranks,
                    plugin_version: self.legacy_version,
                    created: self.time(r.rec.api_ns.max(r.rec.start_ns)),
                    ..Default::default()
                }])?;
            }
            let e = to_collective(&r, self.offset, w);
            w.push(Event::Collective(e))?;
        }
        self.ready = ready;
        Ok(())
    }
}

/// Starts the NVTX pairer dropped (it runs on the writer thread; read by
/// [`record_losses`]).
static NVTX_OPEN_DROPPED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Distinct strings a trace may hold before NVTX names are replaced (each
/// at most [`crate::nvtx::MSG_LEN`] bytes plus the payload: under 200 MiB).
const MAX_TRACE_STRINGS: u32 = 1 << 20;

/// The writer thread's side of NVTX: pairs the records and writes markers.
struct NvtxSide {
    pairer: crate::nvtx::pair::Pairer,
    done: Vec<crate::nvtx::pair::Done>,
    offset: i64,
    /// Marker names replaced because the trace's string table reached
    /// [`MAX_TRACE_STRINGS`].
    renamed: u64,
    /// Collect the times of step marks in `steps` (the flight recorder's
    /// slow-step trigger drains them; at most [`MAX_PENDING_STEPS`] kept).
    collect_steps: bool,
    steps: Vec<u64>,
}

/// Step mark times [`NvtxSide`] holds between two flight recorder polls.
const MAX_PENDING_STEPS: usize = 4096;

impl NvtxSide {
    fn new(offset: i64) -> NvtxSide {
        NvtxSide {
            pairer: Default::default(),
            done: Vec::new(),
            offset,
            renamed: 0,
            collect_steps: false,
            steps: Vec::new(),
        }
    }

    fn pump<W: std::io::Write>(&mut self, w: &mut TraceWriter<W>) -> Result<(), FormatError> {
        let Some(st) = crate::nvtx::state() else { return Ok(()) };
        // At most one queue's worth per pass: threads that keep marking
        // (at exit, say) cannot hold the writer here.
        for _ in 0..st.queue.capacity() {
            let Some(r) = st.queue.pop() else { break };
            if r.kind == crate::nvtx::RecKind::Request {
                // A request mark is no marker: written as it comes, no string.
                w.push(Event::Request(Request {
                    time: to_trace_time(r.time_ns, self.offset),
                    id: r.range_id,
                    phase: RequestPhase(r.category.min(u8::MAX as u32) as u8),
                    tokens: r.payload,
                }))?;
                continue;
            }
            self.pairer.record(st, &r, &mut self.done);
        }
        NVTX_OPEN_DROPPED.store(self.pairer.too_many_open, Relaxed);
        self.write(w)
    }

    fn write<W: std::io::Write>(&mut self, w: &mut TraceWriter<W>) -> Result<(), FormatError> {
        for d in self.done.drain(..) {
            if self.collect_steps && self.steps.len() < MAX_PENDING_STEPS && crate::flight::is_step_mark(&d.domain, &d.name) {
                self.steps.push(d.start_ns);
            }
            let mut intern = |s: &str| {
                if w.string_count() >= MAX_TRACE_STRINGS {
                    self.renamed += 1;
                    w.intern("(nvtx: the trace's string table is full)")
                } else {
                    w.intern(s)
                }
            };
            let (name, domain) = (intern(&d.name), intern(&d.domain));
            w.push(Event::Marker(Marker {
                start: to_trace_time(d.start_ns, self.offset),
                end: to_trace_time(d.end_ns, self.offset),
                thread: ThreadId(d.tid),
                name,
                domain,
                kind: if d.instant { MarkerKind::INSTANT } else { MarkerKind::RANGE },
                color: d.color,
            }))?;
        }
        Ok(())
    }

    /// Close the ranges still open at `end_ns` and note the counts.
    fn finish<W: std::io::Write>(&mut self, w: &mut TraceWriter<W>, end_ns: u64, trailer: &mut Trailer) -> Result<(), FormatError> {
        let Some(st) = crate::nvtx::state() else { return Ok(()) };
        self.pump(w)?;
        self.pairer.close_all(end_ns, &mut self.done);
        self.write(w)?;
        let p = &self.pairer;
        for (k, v) in [
            ("nvtx.ranges_open_at_exit", p.closed_at_exit),
            ("nvtx.unmatched_pops", p.unmatched_pops),
            ("nvtx.unmatched_ends", p.unmatched_ends),
            ("nvtx.truncated_messages", st.losses.truncated.load(Relaxed)),
            ("nvtx.names_replaced", self.renamed),
        ] {
            trailer.extra.insert(k.into(), v.to_string());
        }
        for (tid, name) in st.thread_names() {
            trailer.extra.insert(format!("nvtx.thread.{tid}"), name);
        }
        Ok(())
    }
}

/// The writer thread's side of the NVML sampler: moves its samples into
/// the trace as counter events and its failures as loss records.
struct HwSide {
    /// The series' names in the trace, interned at their first sample.
    names: [Option<StringId>; crate::nvml::SERIES.len()],
    offset: i64,
    /// Dropped samples already written as a loss record.
    dropped_written: u64,
}

impl HwSide {
    fn new(offset: i64) -> HwSide {
        HwSide {
            names: [None; crate::nvml::SERIES.len()],
            offset,
            dropped_written: 0,
        }
    }

    fn pump<W: std::io::Write>(&mut self, w: &mut TraceWriter<W>) -> Result<(), FormatError> {
        let Some(hw) = crate::nvml::state() else { return Ok(()) };
        // At most one queue's worth per pass (see `NvtxSide::pump`).
        for _ in 0..hw.queue.capacity() {
            let Some(x) = hw.queue.pop() else { break };
            let i = x.series as usize;
            let Some(&name) = crate::nvml::SERIES.get(i) else { continue };
            let metric = *self.names[i].get_or_insert_with(|| w.intern(name));
            w.push(Event::Counter(Counter {
                time: to_trace_time(x.realtime_ns, self.offset),
                device: DeviceId(x.device),
                metric,
                value: x.value,
            }))?;
        }
        for f in hw.take_failures() {
            let detail = w.intern(&f.detail);
            w.push(Event::Loss(Loss {
                time: to_trace_time(f.realtime_ns, self.offset),
                source: LossSource::COUNTER_FAILED,
                count: 1,
                detail,
            }))?;
        }
        let dropped = hw.dropped.load(Relaxed);
        if dropped > self.dropped_written {
            let detail = w.intern("nvml samples (the sampler's queue to the writer was full)");
            w.push(Event::Loss(Loss {
                time: to_trace_time(crate::nvml::realtime_ns(), self.offset),
                source: LossSource::QUEUE_OVERFLOW,
                count: dropped - self.dropped_written,
                detail,
            }))?;
            self.dropped_written = dropped;
        }
        Ok(())
    }

    /// Stop the sampler (waiting for it briefly, so that every sample it
    /// took is written), write what is left and note the counts.
    fn finish<W: std::io::Write>(&mut self, w: &mut TraceWriter<W>, trailer: &mut Trailer) -> Result<(), FormatError> {
        let Some(hw) = crate::nvml::state() else { return Ok(()) };
        let stopped = hw.stop_and_wait(Duration::from_millis(500));
        self.pump(w)?;
        let mut status = hw.status();
        if !stopped {
            status.push_str("; the sampler was still in an NVML call at exit (its last samples may be missing)");
        }
        for (k, v) in [
            ("nvml.status", status),
            ("nvml.samples", hw.taken.load(Relaxed).to_string()),
            ("nvml.samples_dropped", hw.dropped.load(Relaxed).to_string()),
            ("nvml.failed_calls", hw.failed_calls.load(Relaxed).to_string()),
        ] {
            trailer.extra.insert(k.into(), v);
        }
        Ok(())
    }
}

/// A plugin time (`CLOCK_REALTIME` ns) in the trace's domain (0 stays 0).
fn to_trace_time(realtime_ns: u64, offset: i64) -> Nanos {
    if realtime_ns == 0 {
        return Nanos(0);
    }
    Nanos(realtime_ns.saturating_add_signed(offset))
}

/// NCCL's rank, or [`RANK_UNKNOWN`] for its `-1` (not rank 0).
fn known_rank(rank: i32) -> u32 {
    u32::try_from(rank).unwrap_or(RANK_UNKNOWN)
}

/// The trace event for one collective: GPU times from its kernel when
/// linked, else start = end = the time the application called NCCL.
fn to_collective<W: std::io::Write>(r: &crate::nccl::link::Ready, offset: i64, w: &mut TraceWriter<W>) -> Collective {
    use crate::nccl::{datatype_size, name_str, short_datatype, RecKind};
    let rec = &r.rec;
    let d = &rec.d;
    let enqueue = to_trace_time(if rec.api_ns != 0 { rec.api_ns } else { rec.start_ns }, offset);
    let (start, end, device, stream, correlation) = match r.kernel {
        Some(k) => (Nanos(k.start), Nanos(k.end), k.device, StreamId(k.stream), k.correlation),
        None => (enqueue, enqueue, 0, StreamId::UNKNOWN, 0),
    };
    let datatype = name_str(&d.datatype);
    let bytes = if d.bytes != 0 {
        d.bytes
    } else {
        d.count.saturating_mul(datatype_size(&datatype))
    };
    let algorithm = if rec.kind == RecKind::CeColl {
        w.intern("CE")
    } else {
        w.intern(&name_str(&d.algo))
    };
    Collective {
        start,
        end,
        enqueue,
        comm: CommId(rec.comm),
        op: w.intern(&name_str(&d.func)),
        seq: d.seq,
        count: d.count,
        datatype: w.intern(short_datatype(&datatype)),
        bytes,
        rank: known_rank(rec.rank),
        nranks: rec.nranks,
        root: d.root,
        algorithm,
        protocol: w.intern(&name_str(&d.proto)),
        channels: d.channels,
        device: DeviceId(device),
        stream,
        correlation: CorrelationId(correlation),
    }
}

/// The writer's side of a duty-cycled capture (`duty.rs` has the schedule):
/// turns CUPTI off at each window's end and on at the next one's start, and
/// says what to record: each window as it opens ([`CaptureWindow::opened`],
/// so a process killed inside it still says when it began) and as it closes.
struct DutySide {
    schedule: Schedule,
    /// When the schedule's time 0 was (capture was on already).
    origin: Instant,
    /// Start of the open window, in trace time (`None`: capture is off).
    open: Option<Nanos>,
    /// EXTERNAL_CORRELATION was on when capture was turned off.
    external: bool,
}

impl DutySide {
    fn new(duty: Duty, (start, origin): (Nanos, Instant)) -> DutySide {
        DutySide {
            schedule: Schedule::new(duty),
            origin,
            open: Some(start),
            external: false,
        }
    }

    /// The record of the window open since capture started.
    fn first(&self) -> Option<CaptureWindow> {
        self.open.map(CaptureWindow::opened)
    }

    /// Act on the transitions due now. Returns the window records to write,
    /// in order: a window that closed (its records were flushed into the
    /// pool; the caller writes it once it has written them), one that opened.
    fn poll(&mut self, s: &Session, c: &CuptiSide) -> Vec<CaptureWindow> {
        let mut records = Vec::new();
        while let Some(t) = self.schedule.poll(self.origin.elapsed()) {
            match t {
                Transition::Off => {
                    self.external = s.pause_capture();
                    let end = trace_now(c);
                    if let Err(e) = s.flush(0) {
                        say(&format!("{e} during the flush at the end of a capture window"));
                    }
                    if let Some(start) = self.open.take() {
                        records.push(CaptureWindow {
                            start,
                            end: end.max(start),
                        });
                    }
                }
                Transition::On => {
                    let start = trace_now(c);
                    self.open = Some(start);
                    s.resume_capture(self.external);
                    records.push(CaptureWindow::opened(start));
                }
            }
        }
        records
    }

    /// The window open at the end of the trace, closed now.
    fn close(&mut self, c: &CuptiSide) -> Option<CaptureWindow> {
        let end = trace_now(c);
        self.open.take().map(|start| CaptureWindow {
            start,
            end: end.max(start),
        })
    }
}

/// `--graphs auto` on the writer thread: switches CUPTI to graph-level
/// graphs (the GRAPH_TRACE kind) once some graph has been launched the
/// configured number of times at node level, while capture is on (never in
/// a duty cycle's off phase). Tried once: CUPTI cannot go back.
#[derive(Default)]
struct GraphSwitch {
    /// The switch was tried: when (trace time), or CUPTI's refusal.
    tried: Option<Result<Nanos, CuptiError>>,
}

impl GraphSwitch {
    fn poll(&mut self, s: &Session, c: &CuptiSide, dec: &Decoder, capture_on: bool) {
        let GraphMode::Auto { after } = s.config.graphs else { return };
        if self.tried.is_some() || !capture_on || dec.graphs.most < after {
            return;
        }
        let at = trace_now(c);
        self.tried = Some(c.api.enable(kind::GRAPH_TRACE).map(|()| at));
        if let Some(Ok(_)) = self.tried {
            s.graph_level.store(true, Release);
        }
    }

    /// The trailer's `capture.graph_level`.
    fn note(&self, s: &Session) -> Option<String> {
        match (s.config.graphs, self.tried) {
            (GraphMode::Graph, _) if s.graph_level.load(Acquire) => Some("from the start".into()),
            (GraphMode::Auto { after }, None) => Some(format!("never: no graph was launched {after} times")),
            (GraphMode::Auto { after }, Some(Ok(t))) => {
                Some(format!("from {} ns (trace time): a graph had been launched {after} times", t.0))
            }
            (GraphMode::Auto { .. }, Some(Err(e))) => Some(format!("refused by CUPTI: {e}; graphs recorded node by node")),
            _ => None,
        }
    }
}

/// Now, in the trace's time (CUPTI's clock; the real-time clock if CUPTI
/// cannot say, which is what CUPTI's clock is by default).
fn trace_now(c: &CuptiSide) -> Nanos {
    Nanos(c.api.timestamp().unwrap_or_else(|_| ClockPair::now().realtime_ns))
}

fn writer_main(s: &'static Session, failed_kinds: Vec<String>, api_filter: Option<String>, notes: Notes) {
    let cupti = s.cupti.as_ref();
    let mut start_clock = ClockPair::now();
    start_clock.cupti_ns = cupti.and_then(|c| c.api.timestamp().ok());
    let mut dec = Decoder::default();
    dec.graphs.on = matches!(s.config.graphs, GraphMode::Auto { .. });
    let mut devices = match cupti {
        Some(c) => identity::devices(&c.cuda, Duration::from_secs(3)),
        None => Vec::new(),
    };
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
    match cupti {
        Some(c) => {
            header.extra.insert("cupti.library".into(), c.source.clone());
            header.extra.insert(
                "cupti.subscriber".into(),
                if c.multi_subscriber {
                    "multi (cuptiSubscribe_v2)"
                } else {
                    "legacy (sole subscriber)"
                }
                .into(),
            );
            header.extra.insert(
                "agent.buffers".into(),
                format!("{} x {} KiB", s.config.buffers, s.pool.buf_size() / 1024),
            );
        }
        None if MARKERS_ONLY.load(Acquire) => {
            header.extra.insert(
                "agent.mode".into(),
                "markers-only: the process never initialized CUDA, so only its NVTX markers were recorded".into(),
            );
        }
        None => {
            header.extra.insert(
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
                    header.extra.insert(key.into(), n.to_string());
                }
                None => say(&format!("ignoring {var}={}: not a positive integer", v.to_string_lossy())),
            }
        }
    }
    // Which `gputrace run` this trace belongs to (its live metrics count only its own
    // traces). Only an id of the launcher's shape is kept.
    if let Some(id) = std::env::var("GPUTRACE_RUN_ID").ok().filter(|v| is_run_id(v)) {
        header.extra.insert("gputrace.run_id".into(), id);
    }
    if !failed_kinds.is_empty() {
        header.extra.insert("agent.kinds_not_enabled".into(), failed_kinds.join("; "));
    }
    if let Some(note) = api_filter {
        header.extra.insert("agent.api_filter".into(), note);
    }
    for (k, v) in notes {
        header.extra.insert(k.into(), v);
    }
    // Duty-cycled capture: capture has been on since `start`.
    let mut duty = cupti.zip(s.config.duty).map(|(c, d)| {
        header.extra.insert("capture.duty".into(), d.label());
        (c, DutySide::new(d, c.enabled_at))
    });
    // Buffers completed before the file exists: scanned here for DEVICE
    // records, decoded for real once the file is open (nothing is dropped).
    let mut held = Backlog::default();
    if let (Some(c), true) = (cupti, devices.is_empty()) {
        // Fall back on CUPTI's DEVICE records, which it emits once the
        // driver is initialized: flush and scan for up to a second.
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
        devices = identity::devices_from_records(&scan.devices);
    }
    header.devices = devices;
    let (hw_plan, hw_note) = crate::nvml::plan(
        s.config.gpu_sample_hz,
        &header.devices,
        header.rank.local_rank,
        s.config.nvml_path.clone(),
        std::env::var_os("CUDA_VISIBLE_DEVICES").is_some(),
    );
    header.extra.insert("nvml.sampling".into(), hw_note);
    let on = s.config.gpu_metrics && cupti.is_some();
    let (pm_plan, pm_note) = crate::pm_sampling::plan(on, s.config.gpu_metrics_hz, &header.devices, header.rank.local_rank);
    header.extra.insert("pm.sampling".into(), pm_note);
    let path = trace_path(&s.config, &header);
    let opened = std::fs::create_dir_all(&s.config.output_dir)
        .and_then(|_| crate::flight::open_output(&s.config, &path))
        .map_err(|e| format!("cannot write the trace {}: {e}; capture is off, the job continues", path.display()))
        .and_then(|f| {
            TraceWriter::new(f, &header, WriterOptions::default())
                .map_err(|e| format!("cannot write the trace {}: {e}; capture is off, the job continues", path.display()))
        });
    // The header goes to disk at once: a process that execs or is killed
    // right away still leaves a readable (if empty) trace.
    let opened = opened.and_then(|mut w| {
        w.flush()
            .map(|_| w)
            .map_err(|e| format!("cannot write the trace {}: {e}; capture is off, the job continues", path.display()))
    });
    let mut w = match opened {
        Ok(w) => w,
        Err(msg) => {
            say(&msg);
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
    let mut losses = Losses {
        pool_buffers: 0,
        pool_bytes: 0,
        undecodable: 0,
        nccl: [0; 4],
        nvtx: [0; 6],
    };
    let mut nccl = NcclSide::new(s, &start_clock);
    let mut markers = NvtxSide::new(nccl.offset);
    let mut hw = HwSide::new(nccl.offset);
    if let Some(p) = hw_plan {
        crate::nvml::start(p);
    }
    let mut pm = crate::pm_sampling::WriterSide::default();
    if let (Some(p), Some(c)) = (pm_plan, cupti) {
        crate::pm_sampling::start(p, c.lib, c.source.clone());
    }
    let mut next_flush = Instant::now() + s.config.flush_period;
    let mut failed = false;
    if let Some(first) = duty.as_ref().and_then(|(_, d)| d.first()) {
        if let Err(e) = w.add_capture_windows(&[first]).and_then(|_| w.flush()) {
            failed = write_failed(s, &path, &e);
        }
    }
    let mut graphs = GraphSwitch::default();
    let mut flight = s.config.flight.map(|fc| crate::flight::Triggers::new(&s.config, &fc));
    markers.collect_steps = flight.as_ref().is_some_and(|t| t.wants_steps());
    // Activity records arrived since the last flush period (for the hang trigger).
    let mut activity = false;
    loop {
        let stopping = s.stop.load(Acquire);
        // A window that closes now is recorded after its records are written.
        let windows = match (&mut duty, failed, stopping) {
            (Some((c, d)), false, false) => d.poll(s, c),
            _ => Vec::new(),
        };
        // Before walking: records in this pass may already be the ones the
        // NCCL linker needs (a job can init NCCL, run and exit in one pass).
        // Without a way to link (no API records or external ids), NCCL's
        // kernels are not worth collecting.
        dec.collect_comm = nccl.linker.can_link && crate::nccl::state().is_some();
        let mut undecodable = 0;
        // The held buffers first, oldest first (see `Backlog`).
        while let Some((buf, valid)) = held.next(&s.pool) {
            activity |= valid > 0;
            if let (false, Some(c)) = (failed, cupti) {
                if let Err(e) = walk(&c.api, &mut dec, buf, valid, &mut w, &mut undecodable) {
                    failed = write_failed(s, &path, &e);
                }
            }
            s.pool.recycle(buf);
        }
        losses.undecodable += undecodable;
        if let (Some(c), false) = (cupti, failed) {
            let capture_on = duty.as_ref().is_none_or(|(_, d)| d.open.is_some());
            graphs.poll(s, c, &dec, capture_on);
        }
        if !failed {
            if let Err(e) = nccl
                .pump(&mut dec, &mut w, stopping)
                .and_then(|_| markers.pump(&mut w))
                .and_then(|_| hw.pump(&mut w))
                .and_then(|_| pm.pump(&mut w))
            {
                failed = write_failed(s, &path, &e);
            }
        }
        // The window open at exit ends with the trace.
        let windows = match (&mut duty, stopping) {
            (Some((c, d)), true) => d.close(c).into_iter().collect(),
            _ => windows,
        };
        if !windows.is_empty() && !failed {
            if let Err(e) = w.add_capture_windows(&windows).and_then(|_| w.flush()) {
                failed = write_failed(s, &path, &e);
            }
        }
        if stopping {
            break;
        }
        if Instant::now() >= next_flush {
            if let Err(e) = s.flush(0) {
                say(&format!("{e} during the periodic flush"));
            }
            if !failed {
                if let Err(e) = record_losses(s, &mut w, &mut losses).and_then(|_| w.flush()) {
                    failed = write_failed(s, &path, &e);
                }
            }
            if let (Some(t), false) = (&mut flight, failed) {
                if let Some(why) = t.poll(std::mem::take(&mut activity), &mut markers.steps) {
                    crate::flight::snapshot(&mut w, &path, &why);
                }
            }
            next_flush = Instant::now() + s.config.flush_period;
        }
        std::thread::park_timeout(Duration::from_millis(5));
    }
    if !failed {
        let mut trailer = Trailer::default();
        let mut end = ClockPair::now();
        end.cupti_ns = cupti.and_then(|c| c.api.timestamp().ok());
        trailer.end_clock = end;
        let end_ns = end.realtime_ns;
        if let Err(e) = markers
            .finish(&mut w, end_ns, &mut trailer)
            .and_then(|_| hw.finish(&mut w, &mut trailer))
            .and_then(|_| pm.finish(&mut w, &mut trailer))
        {
            write_failed(s, &path, &e);
            s.finished.store(true, Release);
            return;
        }
        trailer
            .extra
            .insert("agent.api_calls_filtered".into(), dec.filtered_api.to_string());
        trailer.extra.insert("agent.records_skipped".into(), dec.skipped.to_string());
        if let Some(note) = graphs.note(s) {
            trailer.extra.insert("capture.graph_level".into(), note);
        }
        for (name, records, ns) in dec.overhead.seen() {
            trailer.set_overhead(name, records, ns);
        }
        // What the profiling cost: CUPTI's records by where they were spent,
        // and this thread's own CPU time (one clock read, at the end).
        if cupti.is_some() {
            trailer
                .extra
                .insert("cupti.overhead_cpu_ns".into(), dec.overhead.cpu_ns.to_string());
            trailer
                .extra
                .insert("cupti.overhead_gpu_ns".into(), dec.overhead.gpu_ns.to_string());
        }
        if let Some(ns) = thread_cpu_ns() {
            trailer.extra.insert("agent.writer_cpu_ns".into(), ns.to_string());
        }
        if let Some(st) = crate::nccl::state() {
            trailer.extra.insert("nccl.linked".into(), nccl.linker.linked.to_string());
            trailer.extra.insert(
                "nccl.plugin".into(),
                format!(
                    "profiler interface v{}; {} events recorded; {} collectives linked to their kernels, {} not linked",
                    st.version.load(Relaxed),
                    nccl.linker.received,
                    nccl.linker.linked,
                    nccl.linker.unlinked
                ),
            );
        }
        let r = record_losses(s, &mut w, &mut losses)
            .and_then(|_| w.finish(trailer))
            .and_then(|mut b| {
                use std::io::Write;
                b.flush().map_err(FormatError::Write).map(|_| b)
            });
        match r {
            Ok(out) => {
                if let Some(t) = &mut flight {
                    crate::flight::snapshot_at_exit(t, &mut markers.steps, &out, &path);
                }
            }
            Err(e) => {
                write_failed(s, &path, &e);
            }
        }
    }
    s.finished.store(true, Release);
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

fn write_failed(s: &Session, path: &std::path::Path, e: &FormatError) -> bool {
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
    true
}

/// After a failure to open the file: keep CUPTI's buffers flowing (so it
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

/// Decode every record of one completed buffer and push it to `w`.
fn walk<W: std::io::Write>(
    cupti: &Cupti,
    dec: &mut Decoder,
    buf: *mut u8,
    valid: usize,
    w: &mut TraceWriter<W>,
    undecodable: &mut u64,
) -> Result<(), FormatError> {
    let mut cursor = std::ptr::null_mut();
    dec.new_buffer();
    loop {
        // Safety: `buf` is a buffer CUPTI completed with `valid` bytes, and
        // `cursor` starts null and is only advanced by CUPTI.
        match unsafe { cupti.next_record(buf, valid, &mut cursor) } {
            Ok(true) => {
                // Safety: CUPTI returned a complete record.
                unsafe { dec.decode(cursor as *const u8, w) }?;
            }
            Ok(false) => break,
            Err(_) => {
                // The rest of this buffer cannot be walked.
                *undecodable += 1;
                break;
            }
        }
    }
    Ok(())
}

/// Write loss records for whatever was lost since the last call.
fn record_losses<W: std::io::Write>(s: &Session, w: &mut TraceWriter<W>, l: &mut Losses) -> Result<(), FormatError> {
    let cupti = s.cupti.as_ref();
    let now = match cupti {
        Some(c) => Nanos(c.api.timestamp().unwrap_or(0)),
        None => Nanos(ClockPair::now().realtime_ns),
    };
    if let Some(Ok(n)) = cupti.map(|c| c.api.take_dropped()) {
        if n > 0 {
            w.push(Event::Loss(Loss {
                time: now,
                source: LossSource::CUPTI_DROPPED,
                count: n,
                detail: StringId::EMPTY,
            }))?;
        }
    }
    let buffers = s.pool.discarded_buffers.load(Relaxed);
    let bytes = s.pool.discarded_bytes.load(Relaxed);
    if buffers > l.pool_buffers {
        let detail = w.intern(&format!(
            "{} buffers ({} bytes of records) discarded: all {} trace buffers were full; raise GPUTRACE_BUFFERS",
            buffers - l.pool_buffers,
            bytes - l.pool_bytes,
            s.config.buffers
        ));
        w.push(Event::Loss(Loss {
            time: now,
            source: LossSource::BUFFER_POOL_EXHAUSTED,
            count: buffers - l.pool_buffers,
            detail,
        }))?;
        l.pool_buffers = buffers;
        l.pool_bytes = bytes;
    }
    if l.undecodable > 0 {
        let detail = w.intern("activity buffers whose records could not be walked to the end");
        w.push(Event::Loss(Loss {
            time: now,
            source: LossSource::UNDECODABLE,
            count: l.undecodable,
            detail,
        }))?;
        l.undecodable = 0;
    }
    if let Some(st) = crate::nvtx::state() {
        let [domains, strings, categories, threads] = st.names_full();
        let counters = [
            (
                st.losses.queue_full.load(Relaxed),
                "NVTX records not recorded: the queue to the writer thread was full; raise GPUTRACE_NVTX_RECORDS",
            ),
            (
                domains + st.losses.no_domain.load(Relaxed),
                "NVTX events not recorded: more domains than the agent's table holds",
            ),
            (
                strings + st.losses.no_string.load(Relaxed),
                "NVTX registered strings not kept (table full): their events have an empty name",
            ),
            (categories + threads, "NVTX category or thread names not kept: the table was full"),
            (NVTX_OPEN_DROPPED.load(Relaxed), "NVTX ranges not recorded: too many open at once"),
            (
                st.losses.requests_lost.load(Relaxed),
                "request marks (gputrace.request) not recorded: the queue to the writer thread was full; raise GPUTRACE_NVTX_RECORDS",
            ),
        ];
        for (i, (v, why)) in counters.into_iter().enumerate() {
            if v > l.nvtx[i] {
                let detail = w.intern(why);
                w.push(Event::Loss(Loss {
                    time: now,
                    source: LossSource::QUEUE_OVERFLOW,
                    count: v - l.nvtx[i],
                    detail,
                }))?;
                l.nvtx[i] = v;
            }
        }
    }
    if let Some(st) = crate::nccl::state() {
        let counters = [
            (&st.losses.slots_full, "NCCL events not recorded: all event slots were in use"),
            (
                &st.losses.queue_full,
                "NCCL events not recorded: the queue to the writer thread was full",
            ),
            (
                &st.losses.comms_full,
                "NCCL communicators not recorded: more than the plugin's table holds",
            ),
            (
                &st.losses.disabled,
                "NCCL events not recorded: the plugin had turned itself off (see the gputrace: line)",
            ),
        ];
        for (i, (c, why)) in counters.into_iter().enumerate() {
            let v = c.load(Relaxed);
            if v > l.nccl[i] {
                let detail = w.intern(why);
                w.push(Event::Loss(Loss {
                    time: now,
                    source: LossSource::NCCL_PLUGIN,
                    count: v - l.nccl[i],
                    detail,
                }))?;
                l.nccl[i] = v;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::link::{KernelInfo, Ready};
    use crate::nccl::{Descr, Rec, RecKind};

    #[test]
    fn stopping_disables_every_kind_enabling_turned_on() {
        let stopped = best_effort_kinds(true);
        for api_calls in [false, true] {
            for k in best_effort_kinds(api_calls) {
                assert!(stopped.contains(&k), "kind {k} is enabled but never disabled");
            }
        }
        for k in [kind::OVERHEAD, kind::DEVICE, kind::CONTEXT, kind::RUNTIME, kind::DRIVER] {
            assert!(stopped.contains(&k), "kind {k}");
        }
    }

    #[test]
    fn an_unknown_rank_is_not_rank_zero() {
        let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
        let mut r = ready(None);
        r.rec.rank = -1;
        assert_eq!(to_collective(&r, 0, &mut w).rank, RANK_UNKNOWN);
        r.rec.rank = 0;
        assert_eq!(to_collective(&r, 0, &mut w).rank, 0);
    }

    fn ready(kernel: Option<KernelInfo>) -> Ready {
        let mut d = Descr {
            seq: 41,
            count: 1 << 20,
            root: -1,
            channels: 8,
            ..Default::default()
        };
        d.func[..13].copy_from_slice(b"ReduceScatter");
        d.datatype[..12].copy_from_slice(b"ncclBfloat16");
        d.algo[..4].copy_from_slice(b"RING");
        d.proto[..6].copy_from_slice(b"Simple");
        Ready {
            rec: Rec {
                kind: RecKind::Coll,
                id: 3,
                group: 2,
                comm: 0xfeed,
                rank: 5,
                nranks: 8,
                api_ns: 1_000,
                start_ns: 1_500,
                stop_ns: 1_600,
                d,
            },
            kernel,
        }
    }

    #[test]
    fn linked_collectives_take_the_kernel_times_unlinked_the_api_time() {
        let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
        let k = KernelInfo {
            start: 90_000,
            end: 95_000,
            device: 2,
            context: 1,
            stream: 13,
            correlation: 777,
        };
        let c = to_collective(&ready(Some(k)), 50_000, &mut w);
        assert_eq!((c.start, c.end, c.enqueue), (Nanos(90_000), Nanos(95_000), Nanos(51_000)));
        assert_eq!((c.device, c.stream, c.correlation), (DeviceId(2), StreamId(13), CorrelationId(777)));
        assert_eq!((c.comm, c.seq, c.rank, c.nranks, c.channels), (CommId(0xfeed), 41, 5, 8, 8));
        assert_eq!(c.bytes, 2 << 20, "count x 2 bytes for bf16");
        let c = to_collective(&ready(None), -500, &mut w);
        assert_eq!((c.start, c.end, c.enqueue), (Nanos(500), Nanos(500), Nanos(500)));
        assert_eq!((c.stream, c.correlation), (StreamId::UNKNOWN, CorrelationId(0)));
    }
}
