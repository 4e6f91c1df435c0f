//! One capture session per process: set-up in `InitializeInjection`, the
//! writer thread, the periodic flush, and the final flush at exit.
//!
//! Threads and what they may do:
//! - CUPTI's threads run the entry layer's buffer callbacks (`ffi`), which
//!   call [`request_buffer`]/[`complete_buffer`]: pool operations only (see
//!   `pool.rs`).
//! - The writer thread decodes completed buffers, writes chunks, and calls
//!   `cuptiActivityFlushAll(0)` once per flush period.
//! - The exit handler calls `cuptiActivityFlushAll(FORCED)` and waits (with
//!   a deadline) for the writer to write the trailer.
//!
//! `flush_lock` serializes the two flush callers: CUPTI deadlocks if two
//! threads flush at once. It is never held by a CUPTI callback.
//!
//! The writer thread (`writer.rs`) pumps the sources (`source.rs`): CUPTI
//! activity (`activity.rs`), NCCL, NVTX and NVML (files of those names) and
//! PM sampling; `capture.rs` turns capture on and off, `losses.rs` writes
//! what was lost.

mod activity;
mod capture;
mod losses;
mod nccl;
mod nvml;
mod nvtx;
mod source;
mod writer;

use crate::cbid_names;
use crate::config::Config;
use crate::cupti::{BufferCallbacks, Cupti, FLUSH_FORCED, MULTIPLE_SUBSCRIBERS};
use crate::decode::kind;
use crate::dl::{self, Lib, MissingSymbol};
use crate::error::CallError;
use crate::levers::{self, GraphMode};
use crate::pool::Pool;
use crate::say::say;
use gputrace_format::*;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::*};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The live session. Set once, never dropped (CUPTI may call back until
/// the process ends).
static SESSION: OnceLock<Session> = OnceLock::new();
/// pid that created the session: a forked child sees another pid and
/// leaves CUPTI, the buffers and the file alone.
static OWNER_PID: AtomicU32 = AtomicU32::new(0);

/// The entry layer's functions (`ffi`) that a session registers with CUPTI
/// and libc; the layer above hands them in, so the session never names it.
#[derive(Clone, Copy)]
pub struct Hooks {
    pub buffers: BufferCallbacks,
    /// `atexit` handler that calls [`finish_at_exit`].
    pub at_exit: extern "C" fn(),
}

/// A buffer for CUPTI to fill and its size (`None`: no session). Callback
/// path: pool only.
pub fn request_buffer() -> Option<(*mut u8, usize)> {
    let s = SESSION.get()?;
    Some((s.pool.request(), s.pool.buf_size()))
}

/// CUPTI hands back a buffer holding `valid` bytes of records. Callback
/// path: pool only.
pub fn complete_buffer(buffer: *mut u8, valid: usize) {
    if let Some(s) = SESSION.get() {
        s.pool.complete(buffer, valid);
    }
}

/// At exit: final forced flush and trailer, bounded in time (nothing in a
/// forked child: the parent owns the session).
pub fn finish_at_exit() {
    if OWNER_PID.load(Acquire) != std::process::id() {
        return;
    }
    if let Some(s) = SESSION.get() {
        s.finish_at_exit(Duration::from_secs(10));
    }
}

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

/// Why a session did not start: the one `gputrace:` line the entry layer
/// prints (the process runs on untraced).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("GPUTRACE_DISABLE=1: capture is off for this process")]
    Disabled,
    #[error("libcuda.so.1 is not loaded in this process; capture is off")]
    NoCuda,
    #[error("libcupti not found (searched: {}); set GPUTRACE_CUPTI to its path; this process runs untraced", .searched.join(", "))]
    NoCupti { searched: Vec<String> },
    #[error("{source_name}: libcupti has no {missing}; this process runs untraced")]
    OldCupti { source_name: String, missing: MissingSymbol },
    /// CUPTI cannot say its version or subscribe (no driver, usually).
    #[error("{0}{hint}; this process runs untraced", hint = no_driver_hint(.0.code))]
    CuptiUnusable(CallError),
    #[error(
        "CUPTI is already in use by another profiler in this process (torch.profiler/Kineto, Nsight Systems or another \
         CUPTI tool); this process runs untraced"
    )]
    CuptiBusy,
    /// CUPTI refused the callbacks or the kernel activity kind.
    #[error("{0}; this process runs untraced")]
    CuptiRefused(CallError),
    #[error("could not allocate {mib} MiB of trace buffers; this process runs untraced")]
    NoBuffers { mib: usize },
    #[error("could not allocate the trace buffers")]
    NoMarkerBuffers,
    #[error("could not start the writer thread: {0}; this process runs untraced")]
    NoWriterThread(std::io::Error),
    /// A session set up earlier (its line was printed) writes nothing.
    #[error("capture is off in this process (see the gputrace: line above)")]
    OffEarlier,
    #[error("this forked process does not write a trace of its own")]
    ForkedChild,
}

/// This process owns the session just set: remember its pid and have
/// forked children flag themselves.
fn own_session() {
    OWNER_PID.store(std::process::id(), Release);
    // Safety: registering a plain extern "C" function with libc.
    unsafe { libc::pthread_atfork(None, None, Some(crate::correlation::after_fork_child)) };
}

/// Everything `InitializeInjection` does. Errors are the one line to print.
pub fn start(hooks: Hooks) -> Result<(), StartError> {
    let config = Config::from_env(|k| std::env::var(k).ok());
    if config.disabled {
        return Err(StartError::Disabled);
    }
    if let Some(e) = &config.duty_error {
        say(&format!("{e}; capturing the whole time"));
    }
    for line in &config.setting_errors {
        say(line);
    }
    // CUPTI 13.2 crashes on its first call without libcuda; in injection
    // mode the driver called us, so it is loaded. Anything else: stop here.
    let cuda = dl::libcuda_loaded().ok_or(StartError::NoCuda)?;
    let search = dl::find_cupti(config.cupti_path.clone(), config.cuda_home.clone());
    let Some((lib, source)) = search.found else {
        return Err(StartError::NoCupti { searched: search.searched });
    };
    let cupti = Cupti::resolve(&lib).map_err(|missing| StartError::OldCupti {
        source_name: source.clone(),
        missing,
    })?;
    let cupti_version = cupti.version().map_err(StartError::CuptiUnusable)?;
    let multi_subscriber = match cupti.subscribe(cupti_version) {
        Ok(multi) => multi,
        Err(CallError { code, .. }) if code == MULTIPLE_SUBSCRIBERS => return Err(StartError::CuptiBusy),
        Err(e) => return Err(StartError::CuptiUnusable(e)),
    };
    let pool = Pool::new(config.buffers, config.buffer_bytes).ok_or(StartError::NoBuffers {
        mib: (config.buffers * config.buffer_bytes) >> 20,
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
    c.api.register(hooks.buffers).map_err(StartError::CuptiRefused)?;
    if s.config.api_calls {
        c.api
            .set_api_allowlist(kept_calls(&cbid_names::RUNTIME), kept_calls(&cbid_names::DRIVER));
    }
    // The concurrent kernel kind is essential; the others are best effort.
    c.api.enable(kind::CONCURRENT_KERNEL).map_err(StartError::CuptiRefused)?;
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
    spawn_writer(s, hooks, failed, api_filter, notes)
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
pub fn start_nccl_only(hooks: Hooks) -> Result<(), StartError> {
    start_without_cupti(Mode::Nccl, hooks)
}

/// A session without CUPTI (see [`Mode`]).
pub fn start_without_cupti(mode: Mode, hooks: Hooks) -> Result<(), StartError> {
    if let Some(s) = SESSION.get() {
        // A session whose writer never started (CUPTI failed after set-up
        // began) or that belongs to the parent of this forked process writes
        // nothing: say so rather than record into a queue nobody drains.
        if s.writer_thread.get().is_none() {
            return Err(StartError::OffEarlier);
        }
        if OWNER_PID.load(Acquire) != std::process::id() {
            return Err(StartError::ForkedChild);
        }
        return Ok(());
    }
    let config = Config::from_env(|k| std::env::var(k).ok());
    if config.disabled {
        return Err(StartError::Disabled);
    }
    let pool = Pool::new(2, 64 * 1024).ok_or(StartError::NoMarkerBuffers)?;
    let session = Session::new(pool, None, config);
    if SESSION.set(session).is_err() {
        return Ok(());
    }
    MARKERS_ONLY.store(mode == Mode::Markers, Release);
    let s = SESSION.get().expect("just set");
    own_session();
    spawn_writer(s, hooks, Vec::new(), None, Vec::new())
}

/// At exit, for the handler registered at NVTX's first call: when no
/// session ever started in this process (no CUDA), start one without CUPTI
/// now and finish it, so the markers reach a trace.
pub fn write_markers_at_exit(hooks: Hooks) {
    if !crate::nvtx::owns_markers() {
        return;
    }
    if SESSION.get().is_some() {
        return; // that session's own exit handler finishes it
    }
    match start_without_cupti(Mode::Markers, hooks) {
        Ok(()) => {
            if let Some(sess) = SESSION.get() {
                sess.finish_at_exit(Duration::from_secs(10));
            }
        }
        Err(msg) => say(&format!("{msg}; the NVTX markers are not written")),
    }
}

/// Notes for the trace header (key, value).
type Notes = Vec<(&'static str, String)>;

fn spawn_writer(
    s: &'static Session,
    hooks: Hooks,
    failed: Vec<String>,
    api_filter: Option<String>,
    notes: Notes,
) -> Result<(), StartError> {
    let handle = std::thread::Builder::new()
        .name("gputrace-writer".into())
        .spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| writer::run(s, failed, api_filter, notes)));
            if r.is_err() {
                say("internal error in the writer thread; capture stopped, the job continues");
                s.stop_capture();
                s.finished.store(true, Release);
            }
        })
        .map_err(StartError::NoWriterThread)?;
    let _ = s.writer_thread.set(handle.thread().clone());
    // A forked child inherits this handler; it recognises itself by its pid
    // (OWNER_PID) and leaves the parent's CUPTI state, buffers and file alone.
    // Safety: registering a plain extern "C" function with libc.
    unsafe { libc::atexit(hooks.at_exit) };
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

    fn flush(&self, flag: u32) -> Result<(), CallError> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
