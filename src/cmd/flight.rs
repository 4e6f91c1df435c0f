//! `gputrace run --flight-recorder`: the launcher's side of the flight
//! recorder (the agent's side is `agent/src/flight.rs`, the files
//! `gputrace_format::flight`). SIGUSR2 to `gputrace run` asks every traced
//! process for a snapshot through the trigger file; when the job ends, its
//! rings become traces if it failed and are deleted if it exited 0.

use gputrace_format::flight;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

/// Parse a flight recorder duration (`60s`, `5m`, `1500ms`); at least 10 ms.
pub fn parse_window(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let d = match t
        .strip_suffix('m')
        .filter(|n| !n.ends_with('m') && !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
    {
        Some(mins) => Duration::from_secs(mins.parse::<u64>().map_err(|e| e.to_string())?.saturating_mul(60)),
        None => {
            if t.chars().all(|c| c.is_ascii_digit()) {
                return Err(format!("{t:?} has no unit: write e.g. 60s, 5m or 1500ms"));
            }
            Duration::from_nanos(super::export::parse_duration(t)?.0)
        }
    };
    if d < Duration::from_millis(10) {
        return Err(format!("{t:?} is too short: at least 10ms"));
    }
    Ok(d)
}

/// Parse a slow-step factor (`3`, `2.5`): a number of at least 1.5.
pub fn parse_factor(s: &str) -> Result<f64, String> {
    let f: f64 = s
        .trim()
        .trim_end_matches('x')
        .parse()
        .map_err(|_| format!("{s:?} is not a number (write e.g. 3 or 2.5)"))?;
    if !f.is_finite() || f < 1.5 {
        return Err(format!("{s:?}: the factor must be at least 1.5"));
    }
    Ok(f)
}

/// The trigger file, NUL-terminated for the signal handler.
static TRIGGER: OnceLock<CString> = OnceLock::new();

extern "C" fn on_sigusr2(_: libc::c_int) {
    let Some(path) = TRIGGER.get() else { return };
    // Safety: open, write and close are async-signal-safe; `path` is a
    // valid C string set before the handler was installed. One byte is
    // appended, so the file's length changes even when its modification
    // time does not (two signals within a clock tick).
    unsafe {
        let fd = libc::open(
            path.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC,
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
    let file = out_dir.join(flight::TRIGGER_FILE);
    let _ = std::fs::remove_file(&file);
    let Ok(c) = CString::new(file.as_os_str().as_bytes()) else { return };
    let _ = TRIGGER.set(c);
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

/// The rings in `dir` written since `since` (this run's), with their stems.
fn rings(dir: &Path, since: SystemTime) -> Vec<(PathBuf, String)> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<(PathBuf, String)> = entries
        .filter_map(|e| e.ok())
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

/// After the job: turn every ring of this run into a trace if `trigger`
/// (the job failed), then delete the rings, their meta files and the
/// trigger file. A ring that cannot be read costs one line and is kept.
pub fn finish(dir: &Path, since: SystemTime, trigger: Option<&str>) {
    for (ring, stem) in rings(dir, since) {
        let meta = flight::meta_path(dir, &stem);
        if let Some(why) = trigger {
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

#[cfg(test)]
mod tests {
    use super::*;

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
