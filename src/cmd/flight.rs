//! `gputrace run --flight-recorder`: the launcher's side of the flight
//! recorder (the agent's side is `agent/src/flight.rs`, the files
//! `gputrace_format::flight`). SIGUSR2 to `gputrace run` asks every traced
//! process for a snapshot through the trigger file; when the job ends, its
//! rings become traces if it failed and are deleted if it exited 0.

use crate::duration::DurationError;
use crate::values::ValueError;
use gputrace_format::flight;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

/// Parse a flight recorder duration (`60s`, `5m`, `1500ms`, `1.5s`); at least 10 ms.
pub fn parse_window(s: &str) -> Result<Duration, DurationError> {
    let d = crate::duration::parse(s, crate::duration::MS_TO_MIN)?;
    if d < Duration::from_millis(10) {
        return Err(DurationError::TooShort {
            given: s.trim().to_string(),
            least: "10ms",
        });
    }
    Ok(d)
}

/// Parse a slow-step factor (`3`, `2.5`): a number of at least 1.5.
pub fn parse_factor(s: &str) -> Result<f64, ValueError> {
    let f: f64 = s
        .trim()
        .trim_end_matches('x')
        .parse()
        .map_err(|_| ValueError::NotFactor(s.to_string()))?;
    if !f.is_finite() || f < 1.5 {
        return Err(ValueError::SmallFactor(s.to_string()));
    }
    Ok(f)
}

/// The trigger file's name, NUL-terminated for the signal handler.
static TRIGGER: OnceLock<CString> = OnceLock::new();
/// The output directory, opened for the signal handler (-1: none). Kept
/// open for the life of the process.
static TRIGGER_DIR: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_sigusr2(_: libc::c_int) {
    let (Some(name), dir) = (TRIGGER.get(), TRIGGER_DIR.load(Ordering::Relaxed)) else {
        return;
    };
    if dir < 0 {
        return;
    }
    // Safety: openat, write and close are async-signal-safe; `name` is a
    // valid C string and `dir` an open descriptor, both set before the
    // handler was installed. The name is opened relative to the directory
    // and never through a link (O_NOFOLLOW). One byte is appended, so the
    // file's length changes even when its modification time does not (two
    // signals within a clock tick).
    unsafe {
        let fd = libc::openat(
            dir,
            name.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC | libc::O_NOFOLLOW,
            0o644,
        );
        if fd >= 0 {
            let _ = libc::write(fd, b"t".as_ptr() as *const libc::c_void, 1);
            libc::close(fd);
        }
    }
}

/// Make SIGUSR2 to this process a snapshot request to every agent writing
/// into `out_dir` (instead of forwarding it to the child).
pub fn install_trigger(out_dir: &Path) {
    let _ = std::fs::remove_file(out_dir.join(flight::TRIGGER_FILE));
    let Ok(dir) = std::fs::File::open(out_dir) else { return };
    let Ok(c) = CString::new(flight::TRIGGER_FILE) else { return };
    let _ = TRIGGER.set(c);
    TRIGGER_DIR.store(std::os::fd::IntoRawFd::into_raw_fd(dir), Ordering::Relaxed);
    // Safety: a zeroed sigaction with a valid handler.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigusr2 as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut());
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGILL => "SIGILL",
        libc::SIGINT => "SIGINT",
        libc::SIGHUP => "SIGHUP",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        _ => "signal",
    }
}

/// The trigger a job's end is, or `None` for exit code 0.
pub fn end_trigger(status: &ExitStatus) -> Option<String> {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(0), _) => None,
        (Some(c), _) => Some(format!("the job exited with code {c}")),
        (None, Some(s)) => Some(format!("the job was killed by {} ({s})", signal_name(s))),
        _ => Some("the job ended abnormally".into()),
    }
}

/// The rings in `dir` written since `since` (this run's), with their
/// stems: regular files only, a link named like a ring is never read.
fn rings(dir: &Path, since: SystemTime) -> Vec<(PathBuf, String)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<(PathBuf, String)> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| {
            let name = e.file_name();
            let stem = flight::stem_of_ring(name.to_str()?)?.to_string();
            let fresh = e
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t >= since - Duration::from_secs(1));
            fresh.then(|| (e.path(), stem))
        })
        .collect();
    v.sort();
    v
}

/// The trigger a SIGUSR2 to `gputrace run` left for the ring `stem`, if no
/// trace of it was written after the last one: the agent checks the
/// trigger file once per flush period and at exit, so a signal that
/// arrived after a process's last check is honoured here, from its ring.
fn missed_sigusr2(dir: &Path, stem: &str) -> Option<String> {
    let asked = std::fs::metadata(dir.join(flight::TRIGGER_FILE)).and_then(|m| m.modified()).ok()?;
    let answered = std::fs::read_dir(dir).ok()?.filter_map(|e| e.ok()).any(|e| {
        e.file_name().to_str().is_some_and(|n| is_snapshot_of(n, stem)) && e.metadata().and_then(|m| m.modified()).is_ok_and(|t| t >= asked)
    });
    (!answered).then(|| "SIGUSR2 to gputrace run".to_string())
}

/// Whether `name` is a trace of the ring `stem`: `<stem>.gtrace` or
/// `<stem>.N.gtrace` ([`flight::unused_trace_path`]).
fn is_snapshot_of(name: &str, stem: &str) -> bool {
    let Some(rest) = name
        .strip_prefix(stem)
        .and_then(|r| r.strip_prefix('.'))
        .and_then(|r| r.strip_suffix(gputrace_format::FILE_EXTENSION))
    else {
        return false;
    };
    rest.is_empty()
        || rest
            .strip_suffix('.')
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// After the job: turn every ring of this run into a trace if `trigger`
/// (the job failed) or a SIGUSR2 to `gputrace run` got no snapshot from
/// it, then delete the rings, their meta files and the trigger file. A
/// ring that cannot be read costs one line and is kept.
pub fn finish(dir: &Path, since: SystemTime, trigger: Option<&str>) {
    for (ring, stem) in rings(dir, since) {
        let meta = flight::meta_path(dir, &stem);
        let why = trigger.map(str::to_string).or_else(|| missed_sigusr2(dir, &stem));
        if let Some(why) = why.as_deref() {
            let trace = flight::unused_trace_path(dir, &stem);
            if let Err(e) = flight::snapshot_files(&ring, &meta, &trace, why) {
                eprintln!(
                    "gputrace: could not turn the flight recorder of {stem} into a trace: {e}; its files are left in {}",
                    dir.display()
                );
                continue;
            }
        }
        let _ = std::fs::remove_file(&ring);
        let _ = std::fs::remove_file(&meta);
    }
    let _ = std::fs::remove_file(dir.join(flight::TRIGGER_FILE));
}

/// The trigger of a trace recovered from a ring left behind.
pub const RECOVERED: &str = "recovered: its gputrace run ended without turning the ring into a trace or deleting it";

/// Rings in `dir` whose writer is gone and that no `gputrace run` turned
/// into a trace or deleted (it was killed, or the agent was injected by
/// hand): turn each into a trace (trigger [`RECOVERED`]), then delete the
/// ring and its meta file, one line each. A ring whose meta file was
/// modified in the last 10 s is left alone (a writer may be creating it);
/// a ring without a meta file holds nothing readable and is deleted once
/// it is 10 s old. Returns the traces written.
pub fn recover_left_behind(dir: &Path) -> Vec<PathBuf> {
    let young = |p: &Path| {
        std::fs::metadata(p)
            .and_then(|m| m.modified())
            .map_or(true, |t| t.elapsed().map_or(true, |age| age < Duration::from_secs(10)))
    };
    let mut written = Vec::new();
    for (ring, stem) in rings(dir, SystemTime::UNIX_EPOCH + Duration::from_secs(1)) {
        let meta = flight::meta_path(dir, &stem);
        if !meta.exists() {
            if !young(&ring) {
                let _ = std::fs::remove_file(&ring);
            }
            continue;
        }
        if young(&meta) {
            continue;
        }
        // Held until the files are gone: one taker only.
        let Some(_lock) = flight::writer_gone(&meta) else { continue };
        let trace = flight::unused_trace_path(dir, &stem);
        match flight::snapshot_files(&ring, &meta, &trace, RECOVERED) {
            Ok(_) => {
                eprintln!(
                    "gputrace: a flight recorder ring was left in {} by an earlier run; recovered it as {}",
                    dir.display(),
                    trace.display()
                );
                written.push(trace);
            }
            Err(e) => eprintln!(
                "gputrace: a flight recorder ring left by an earlier run could not be read ({e}); deleted {}",
                ring.display()
            ),
        }
        let _ = std::fs::remove_file(&ring);
        let _ = std::fs::remove_file(&meta);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    use gputrace_format::{Event, Header, Kernel, TraceFile, TraceWriter, Trailer, WriterOptions};

    /// A process's flight files for the trace `stem` in `dir`, with 100
    /// kernels, as a clean exit leaves them (the writer gone).
    fn flight_files(dir: &Path, stem: &str) {
        let sink = flight::FlightSink::create(dir, stem, flight::MIN_CAPACITY, Duration::from_secs(60)).unwrap();
        let mut w = TraceWriter::new(sink, &Header::default(), WriterOptions::default()).unwrap();
        let name = w.intern("k");
        for i in 0..100u64 {
            w.push(Event::Kernel(Kernel {
                start: gputrace_format::Nanos(i * 100),
                end: gputrace_format::Nanos(i * 100 + 50),
                name,
                ..Kernel::default()
            }))
            .unwrap();
        }
        drop(w.finish(Trailer::default()).unwrap());
    }

    fn age(path: &Path, secs: u64) {
        let f = std::fs::File::options().write(true).open(path).unwrap();
        f.set_modified(SystemTime::now() - Duration::from_secs(secs)).unwrap();
    }

    fn trigger_of(trace: &Path) -> String {
        let t = TraceFile::open(trace).unwrap();
        assert_eq!(t.event_total(), 100);
        t.trailer().unwrap().extra["flight.trigger"].clone()
    }

    #[test]
    fn a_sigusr2_no_process_answered_is_answered_from_the_rings_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let since = SystemTime::now() - Duration::from_secs(1);
        flight_files(d, "host.p1");
        flight_files(d, "host.p12");
        // p1 answered an earlier signal, p12 none; then the last signal.
        std::fs::write(d.join("host.p1.gtrace"), b"an earlier snapshot").unwrap();
        age(&d.join("host.p1.gtrace"), 5);
        std::fs::write(d.join(flight::TRIGGER_FILE), b"tt").unwrap();
        // p1 answered the last one too (its `.1` snapshot is newer).
        std::fs::write(d.join("host.p1.1.gtrace"), b"the answer").unwrap();
        finish(d, since, None);
        assert!(!d.join("host.p1.2.gtrace").exists(), "p1 answered");
        assert_eq!(trigger_of(&d.join("host.p12.gtrace")), "SIGUSR2 to gputrace run");
        let left: Vec<_> = std::fs::read_dir(d).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left.len(), 3, "the traces only: {left:?}");
        assert!(is_snapshot_of("host.p1.gtrace", "host.p1") && is_snapshot_of("host.p1.17.gtrace", "host.p1"));
        assert!(!is_snapshot_of("host.p12.gtrace", "host.p1") && !is_snapshot_of("host.p1.x.gtrace", "host.p1"));
    }

    #[test]
    fn a_clean_exit_without_a_signal_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let since = SystemTime::now() - Duration::from_secs(1);
        flight_files(dir.path(), "host.p1");
        finish(dir.path(), since, None);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn rings_left_behind_become_traces_once_their_writer_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        flight_files(d, "host.p1");
        assert!(recover_left_behind(d).is_empty(), "a meta file under 10 s old may be a writer's");
        age(&flight::meta_path(d, "host.p1"), 60);
        // A live writer's files (its lock held) stay.
        let live = flight::FlightSink::create(d, "host.p2", flight::MIN_CAPACITY, Duration::from_secs(60)).unwrap();
        age(&flight::meta_path(d, "host.p2"), 60);
        // A ring without a meta file holds nothing readable.
        std::fs::write(flight::ring_path(d, "host.p3"), b"").unwrap();
        age(&flight::ring_path(d, "host.p3"), 60);
        let got = recover_left_behind(d);
        assert_eq!(got, [d.join("host.p1.gtrace")]);
        assert_eq!(trigger_of(&got[0]), RECOVERED);
        assert!(!flight::ring_path(d, "host.p1").exists() && !flight::meta_path(d, "host.p1").exists());
        assert!(!flight::ring_path(d, "host.p3").exists());
        assert!(live.ring_path().exists() && live.meta_path().exists());
    }

    #[test]
    fn windows_parse_with_units_only() {
        assert_eq!(parse_window("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_window("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_window("1500ms"), Ok(Duration::from_millis(1500)));
        assert!(parse_window("60").is_err());
        assert!(parse_window("1ms").is_err());
        assert!(parse_window("soon").is_err());
        assert_eq!(parse_factor("3"), Ok(3.0));
        assert_eq!(parse_factor("2.5x"), Ok(2.5));
        assert!(parse_factor("1").is_err() && parse_factor("NaN").is_err());
    }
}
