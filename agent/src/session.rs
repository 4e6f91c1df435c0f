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

use crate::config::Config;
use crate::cupti::{Cupti, CuptiError, FLUSH_FORCED, MULTIPLE_SUBSCRIBERS};
use crate::decode::{kind, Decoder};
use crate::dl::{self, Lib};
use crate::identity;
use crate::pool::Pool;
use gputrace_format::*;
use std::io::BufWriter;
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
    cupti: Cupti,
    cupti_version: u32,
    cupti_source: String,
    /// CUPTI's multi-subscriber API is in use (other profilers can coexist).
    multi_subscriber: bool,
    cuda: Lib,
    config: Config,
    flush_lock: Mutex<()>,
    /// Set by the exit handler after its forced flush: drain and finish.
    stop: AtomicBool,
    /// Set by the writer thread when the trailer is written (or it gave up).
    finished: AtomicBool,
    writer_thread: OnceLock<std::thread::Thread>,
}

/// Print the agent's one line about a failure.
pub fn say(msg: &str) {
    eprintln!("gputrace: {msg}");
}

/// Everything `InitializeInjection` does. Errors are the one line to print.
pub fn start() -> Result<(), String> {
    let config = Config::from_env(|k| std::env::var(k).ok());
    if config.disabled {
        return Err("GPUTRACE_DISABLE=1: capture is off for this process".into());
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
    let session = Session {
        pool,
        cupti,
        cupti_version,
        cupti_source: source,
        multi_subscriber,
        cuda,
        config,
        flush_lock: Mutex::new(()),
        stop: AtomicBool::new(false),
        finished: AtomicBool::new(false),
        writer_thread: OnceLock::new(),
    };
    if SESSION.set(session).is_err() {
        return Ok(()); // already running (InitializeInjection called twice)
    }
    let s = SESSION.get().expect("just set");
    OWNER_PID.store(std::process::id(), Release);
    let _ = s.cupti.use_system_thread_ids();
    s.cupti.register().map_err(|e| format!("{e}; this process runs untraced"))?;
    // The concurrent kernel kind is essential; the others are best effort.
    s.cupti
        .enable(kind::CONCURRENT_KERNEL)
        .map_err(|e| format!("{e}; this process runs untraced"))?;
    let mut kinds = vec![
        kind::MEMCPY,
        kind::MEMCPY2,
        kind::MEMSET,
        kind::SYNCHRONIZATION,
        kind::DEVICE,
        kind::CONTEXT,
    ];
    if s.config.api_calls {
        kinds.extend([kind::RUNTIME, kind::DRIVER]);
    }
    let failed: Vec<String> = kinds
        .into_iter()
        .filter_map(|k| s.cupti.enable(k).err().map(|e| format!("kind {k}: {e}")))
        .collect();
    let handle = std::thread::Builder::new()
        .name("gputrace-writer".into())
        .spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| writer_main(s, failed)));
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
    /// Disable every kind we enabled (best effort), so CUPTI stops costing
    /// the job anything after a failure.
    fn stop_capture(&self) {
        for k in [
            kind::CONCURRENT_KERNEL,
            kind::MEMCPY,
            kind::MEMCPY2,
            kind::MEMSET,
            kind::SYNCHRONIZATION,
            kind::RUNTIME,
            kind::DRIVER,
        ] {
            let _ = self.cupti.disable(k);
        }
    }

    fn flush(&self, flag: u32) -> Result<(), CuptiError> {
        let _guard = self.flush_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.cupti.flush_all(flag)
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
    while p.exists() {
        p = config.output_dir.join(format!("{base}.{n}.{FILE_EXTENSION}"));
        n += 1;
    }
    p
}

struct Losses {
    pool_buffers: u64,
    pool_bytes: u64,
    undecodable: u64,
}

fn writer_main(s: &'static Session, failed_kinds: Vec<String>) {
    let cupti_clock = s.cupti.timestamp().ok();
    let mut start_clock = ClockPair::now();
    start_clock.cupti_ns = cupti_clock;
    let mut dec = Decoder::default();
    let mut devices = identity::devices(&s.cuda, Duration::from_secs(3));
    let mut header = Header {
        producer: Producer::Agent,
        tool_version: env!("CARGO_PKG_VERSION").into(),
        hostname: identity::hostname(),
        pid: std::process::id(),
        rank: RankInfo::from_env(|k| std::env::var(k).ok()),
        command: identity::command_line(),
        start_clock,
        time_domain: TimeDomain::Cupti,
        cuda: CudaVersions {
            driver: identity::driver_version(&s.cuda),
            runtime: identity::runtime_version(),
            cupti: Some(s.cupti_version),
        },
        devices: Vec::new(),
        extra: Default::default(),
    };
    header.extra.insert("cupti.library".into(), s.cupti_source.clone());
    header.extra.insert(
        "cupti.subscriber".into(),
        if s.multi_subscriber {
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
    if !failed_kinds.is_empty() {
        header.extra.insert("agent.kinds_not_enabled".into(), failed_kinds.join("; "));
    }
    // Buffers completed before the file exists: scanned here for DEVICE
    // records, decoded for real once the file is open (nothing is dropped).
    let mut held: Vec<(*mut u8, usize)> = Vec::new();
    if devices.is_empty() {
        // Fall back on CUPTI's DEVICE records, which it emits once the
        // driver is initialized: flush and scan for up to a second.
        let mut scan = Decoder::default();
        let mut scratch =
            TraceWriter::new(std::io::sink(), &Header::default(), WriterOptions::default()).expect("writing to a sink cannot fail");
        let until = Instant::now() + Duration::from_secs(1);
        loop {
            while let Some((buf, valid)) = s.pool.take_completed() {
                // Writing to a sink cannot fail.
                let _ = walk(s, &mut scan, buf, valid, &mut scratch, &mut 0);
                held.push((buf, valid));
            }
            // Stop at the first DEVICE record, after a second, at exit (the
            // exit handler's forced flush has just delivered everything), or
            // before holding half the pool.
            if !scan.devices.is_empty() || Instant::now() >= until || s.stop.load(Acquire) || held.len() >= s.config.buffers / 2 {
                break;
            }
            let _ = s.flush(0);
            std::thread::sleep(Duration::from_millis(20));
        }
        devices = identity::devices_from_records(&scan.devices);
    }
    header.devices = devices;
    let path = trace_path(&s.config, &header);
    let opened = std::fs::create_dir_all(&s.config.output_dir)
        .and_then(|_| std::fs::File::create(&path))
        .map_err(|e| format!("cannot write the trace {}: {e}; capture is off, the job continues", path.display()))
        .and_then(|f| {
            TraceWriter::new(BufWriter::with_capacity(1 << 20, f), &header, WriterOptions::default())
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
            for (buf, _) in held.drain(..) {
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
    };
    let mut next_flush = Instant::now() + s.config.flush_period;
    let mut failed = false;
    loop {
        let stopping = s.stop.load(Acquire);
        let mut undecodable = 0;
        while let Some((buf, valid)) = held.pop().or_else(|| s.pool.take_completed()) {
            if !failed {
                if let Err(e) = walk(s, &mut dec, buf, valid, &mut w, &mut undecodable) {
                    failed = write_failed(s, &path, &e);
                }
            }
            s.pool.recycle(buf);
        }
        losses.undecodable += undecodable;
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
            next_flush = Instant::now() + s.config.flush_period;
        }
        std::thread::park_timeout(Duration::from_millis(5));
    }
    if !failed {
        let mut trailer = Trailer::default();
        let mut end = ClockPair::now();
        end.cupti_ns = s.cupti.timestamp().ok();
        trailer.end_clock = end;
        trailer
            .extra
            .insert("agent.api_calls_filtered".into(), dec.filtered_api.to_string());
        trailer.extra.insert("agent.records_skipped".into(), dec.skipped.to_string());
        let r = record_losses(s, &mut w, &mut losses)
            .and_then(|_| w.finish(trailer))
            .and_then(|mut b| {
                use std::io::Write;
                b.flush().map_err(FormatError::Write)
            });
        if let Err(e) = r {
            write_failed(s, &path, &e);
        }
    }
    s.finished.store(true, Release);
}

fn write_failed(s: &Session, path: &std::path::Path, e: &FormatError) -> bool {
    say(&format!(
        "writing the trace {} failed: {e}; capture stopped, the job continues",
        path.display()
    ));
    s.stop_capture();
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
    s: &Session,
    dec: &mut Decoder,
    buf: *mut u8,
    valid: usize,
    w: &mut TraceWriter<W>,
    undecodable: &mut u64,
) -> Result<(), FormatError> {
    let mut cursor = std::ptr::null_mut();
    loop {
        // Safety: `buf` is a buffer CUPTI completed with `valid` bytes, and
        // `cursor` starts null and is only advanced by CUPTI.
        match unsafe { s.cupti.next_record(buf, valid, &mut cursor) } {
            Ok(true) => {
                // Safety: CUPTI returned a complete record.
                if let Some(e) = unsafe { dec.record(cursor as *const u8, w) } {
                    w.push(e)?;
                }
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
    let now = Nanos(s.cupti.timestamp().unwrap_or(0));
    if let Ok(n) = s.cupti.take_dropped() {
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
    Ok(())
}
