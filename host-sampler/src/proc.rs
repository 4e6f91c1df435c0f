//! `/proc` readers: the process tree, and each thread's state and CPU time.

use gputrace_format::host::ThreadState;
use std::fs::File;
use std::os::unix::fs::FileExt;

/// A thread's `/proc` files, kept open: each sample is one `pread` of each
/// (a `/proc` file read at offset 0 is generated afresh).
pub(crate) struct ThreadFiles {
    stat: File,
    schedstat: Option<File>,
}

/// What one read of a thread says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ThreadReading {
    pub state: ThreadState,
    /// CPU time used so far, ns (`schedstat`'s run time; `stat`'s
    /// utime + stime in clock ticks where `schedstat` is missing).
    pub cpu_ns: u64,
}

impl ThreadFiles {
    /// Open the thread's files; `None` if it is gone.
    pub(crate) fn open(pid: u32, tid: u32) -> Option<ThreadFiles> {
        let dir = format!("/proc/{pid}/task/{tid}");
        let stat = File::open(format!("{dir}/stat")).ok()?;
        let schedstat = File::open(format!("{dir}/schedstat")).ok();
        Some(ThreadFiles { stat, schedstat })
    }

    /// Read the thread now; `None` once it has exited.
    pub(crate) fn read(&self, buf: &mut [u8]) -> Option<ThreadReading> {
        let n = self.stat.read_at(buf, 0).ok().filter(|&n| n > 0)?;
        let (state, ticks) = parse_stat(&buf[..n])?;
        let cpu_ns = match &self.schedstat {
            Some(f) => {
                let n = f.read_at(buf, 0).ok().filter(|&n| n > 0)?;
                parse_schedstat(&buf[..n])?
            }
            None => ticks.saturating_mul(1_000_000_000 / clock_ticks()),
        };
        Some(ThreadReading { state, cpu_ns })
    }
}

fn clock_ticks() -> u64 {
    // Safety: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// State letter and utime + stime (ticks) of a `stat` line. The command
/// name is in parentheses and may hold spaces and parentheses: the fields
/// start after the last `)`.
pub(crate) fn parse_stat(line: &[u8]) -> Option<(ThreadState, u64)> {
    let close = line.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&line[close + 1..]).ok()?;
    let mut f = rest.split_ascii_whitespace();
    let state = ThreadState::from_proc(*f.next()?.as_bytes().first()?);
    // After the state: ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime.
    let mut f = f.skip(10);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some((state, utime + stime))
}

/// Parent pid of a `stat` line.
pub(crate) fn parse_ppid(line: &[u8]) -> Option<u32> {
    let close = line.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&line[close + 1..]).ok()?;
    rest.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// Run time on a CPU, ns: the first field of `schedstat`.
pub(crate) fn parse_schedstat(line: &[u8]) -> Option<u64> {
    std::str::from_utf8(line).ok()?.split_ascii_whitespace().next()?.parse().ok()
}

/// The thread ids of a process (empty once it is gone).
pub(crate) fn tasks(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

/// The direct children of a process: the union of its threads' `children`
/// files (a child belongs to the thread that forked it).
pub(crate) fn children(pid: u32, tids: &[u32]) -> Vec<u32> {
    let mut out = Vec::new();
    for tid in tids {
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children")) {
            out.extend(s.split_ascii_whitespace().filter_map(|c| c.parse::<u32>().ok()));
        }
    }
    out
}

/// A thread's name (`comm`).
pub(crate) fn comm(pid: u32, tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

/// The parent of a process, from its `stat`.
pub(crate) fn ppid(pid: u32) -> Option<u32> {
    parse_ppid(&std::fs::read(format!("/proc/{pid}/stat")).ok()?)
}

/// Whether a process runs a Python interpreter: its executable or a mapped
/// library is `python*` / `libpython*`.
pub(crate) fn looks_like_python(pid: u32) -> bool {
    let is_python = |path: &str| {
        let name = path.rsplit('/').next().unwrap_or(path);
        name.starts_with("python") || name.starts_with("libpython")
    };
    if std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|p| is_python(&p.to_string_lossy())) {
        return true;
    }
    std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .is_ok_and(|m| m.lines().filter_map(|l| l.split_ascii_whitespace().nth(5)).any(is_python))
}

/// Whether the process is gone or a zombie (it will write nothing more).
pub(crate) fn has_exited(pid: u32) -> bool {
    match std::fs::read(format!("/proc/{pid}/stat")) {
        Ok(s) => parse_stat(&s).is_none_or(|(st, _)| st == ThreadState::Other && is_zombie(&s)),
        Err(_) => true,
    }
}

fn is_zombie(line: &[u8]) -> bool {
    let Some(close) = line.iter().rposition(|&b| b == b')') else {
        return false;
    };
    line.get(close + 2) == Some(&b'Z')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_parentheses_in_the_name() {
        let line = b"8195 (a) b (c)) S 8194 8195 8195 0 -1 4194560 12899 3361407 0 192 5 8 10443 1319 20 0 1 0";
        assert_eq!(parse_stat(line), Some((ThreadState::Sleeping, 13)));
        assert_eq!(parse_ppid(line), Some(8194));
        assert_eq!(parse_stat(b"12 (x) D 1 1 1 0 -1 0 0 0 0 0 7 1"), Some((ThreadState::DiskWait, 8)));
        assert_eq!(parse_stat(b"12 (x"), None);
        assert_eq!(parse_schedstat(b"141318107 545718672 347\n"), Some(141318107));
    }

    #[test]
    fn this_thread_reads_as_running_with_cpu_time() {
        let pid = std::process::id();
        // Safety: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        let f = ThreadFiles::open(pid, tid).expect("own thread");
        let mut buf = [0u8; 1024];
        let a = f.read(&mut buf).unwrap();
        // Spin until /proc shows 10 ms more CPU (its unit is a clock tick);
        // on a loaded machine that takes longer than 10 ms of wall time.
        let spin = std::time::Instant::now();
        let mut b = f.read(&mut buf).unwrap();
        while b.cpu_ns < a.cpu_ns + 10_000_000 && spin.elapsed() < std::time::Duration::from_secs(10) {
            b = f.read(&mut buf).unwrap();
        }
        assert_eq!(b.state, ThreadState::Running, "a thread reading its own stat is on a CPU");
        assert!(b.cpu_ns >= a.cpu_ns + 10_000_000, "{a:?} {b:?}");
        assert!(tasks(pid).contains(&tid));
        assert!(!has_exited(pid));
    }
}
