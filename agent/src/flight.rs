//! Flight recorder mode, on the writer thread: the trace goes to a ring and
//! a meta file (`gputrace_format::flight`) instead of the trace file, and a
//! trace is written only when something triggers a snapshot:
//!
//! - `gputrace run` got SIGUSR2: it touches `OUTPUT/.gputrace-flight-trigger`,
//!   whose modification this thread notices once per flush period;
//! - this process got SIGUSR2 and the application had not set a handler for
//!   it (ours only stores a flag; it is never installed over the app's);
//! - no new activity records for `GPUTRACE_FLIGHT_HANG_MS` after some were seen;
//! - a step (from one step mark to the next) `GPUTRACE_FLIGHT_SLOW_STEP` times
//!   as long as the running median of the steps before it.
//!
//! A job that ends badly (non-zero exit, killed) is reconstructed by
//! `gputrace run` from the files this process leaves; one that exits 0 has
//! them deleted.

use crate::config::{Config, FlightConfig};
use crate::say::say;
use gputrace_format::flight::{self, FlightSink};
use gputrace_format::outdir::OutDir;
use gputrace_format::TraceWriter;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::{Duration, Instant, SystemTime};

/// Where the writer's bytes go.
pub enum Out {
    /// The trace file (normal mode).
    File(BufWriter<File>),
    /// The flight recorder's ring and meta file.
    Flight(Box<FlightSink>),
}

impl Write for Out {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Out::File(f) => f.write(buf),
            Out::Flight(s) => s.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Out::File(f) => f.write_all(buf),
            Out::Flight(s) => s.write_all(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Out::File(f) => f.flush(),
            Out::Flight(s) => s.flush(),
        }
    }
}

/// The trace's name without its extension (`host.r00000.p123`).
fn stem(path: &Path) -> String {
    path.file_stem()
        .map_or_else(|| "trace".into(), |s| s.to_string_lossy().into_owned())
}

/// Open the output for the trace that would be written to `path`: the file,
/// or in flight mode the ring and meta file beside it. A ring that cannot
/// be created costs one `gputrace:` line and the process is traced normally.
pub fn open_output(config: &Config, path: &Path) -> std::io::Result<Out> {
    if let Some(fc) = &config.flight {
        match FlightSink::create(&config.output_dir, &stem(path), fc.cap_bytes, fc.window) {
            Ok(sink) => return Ok(Out::Flight(Box::new(sink))),
            Err(e) => say(&format!(
                "cannot create the flight recorder's ring ({} MiB in {}): {e}; tracing normally to {} instead",
                fc.cap_bytes >> 20,
                config.output_dir.display(),
                path.display()
            )),
        }
    }
    // A new name, created relative to the opened directory and never
    // through a link (one planted since the name was chosen is refused).
    let (dir, name) = OutDir::parent_of(path)?;
    Ok(Out::File(BufWriter::with_capacity(1 << 20, dir.create_new(&name)?)))
}

/// Set by our SIGUSR2 handler.
static SIGUSR2_SEEN: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigusr2(_: libc::c_int) {
    // One atomic store: async-signal-safe.
    SIGUSR2_SEEN.store(true, Relaxed);
}

/// Handle SIGUSR2 if its disposition is the default (which would kill the
/// process); an application's own handler, or its choice to ignore it,
/// stays. True if installed.
fn install_sigusr2() -> bool {
    // Safety: sigaction with a null new action only reads the current one
    // into a zeroed struct we own.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    if unsafe { libc::sigaction(libc::SIGUSR2, std::ptr::null(), &mut old) } != 0 {
        return false;
    }
    if old.sa_sigaction != libc::SIG_DFL {
        return false;
    }
    // Safety: a zeroed sigaction with a plain handler that only stores an atomic.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigusr2 as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut()) == 0
    }
}

/// The trigger file's state: modification time and length.
fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::symlink_metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// What the writer thread checks once per flush period.
pub struct Triggers {
    file: PathBuf,
    seen: Option<(SystemTime, u64)>,
    hang: Option<Duration>,
    /// When activity records last arrived (`None`: none yet).
    last_activity: Option<Instant>,
    hang_reported: bool,
    slow: Option<SlowSteps>,
}

impl Triggers {
    /// The triggers of a flight-mode session (installs the SIGUSR2 handler).
    pub fn new(config: &Config, fc: &FlightConfig) -> Triggers {
        install_sigusr2();
        let file = config.output_dir.join(flight::TRIGGER_FILE);
        Triggers {
            seen: stamp(&file),
            file,
            hang: fc.hang,
            last_activity: None,
            hang_reported: false,
            slow: fc.slow_step.map(SlowSteps::new),
        }
    }

    /// Whether step marks should be collected for [`Self::poll`].
    pub fn wants_steps(&self) -> bool {
        self.slow.is_some()
    }

    /// Why to write a snapshot now, if at all. `activity`: activity records
    /// arrived since the last call; `steps`: the times (ns) of the step
    /// marks written since then, in order (drained).
    pub fn poll(&mut self, activity: bool, steps: &mut Vec<u64>) -> Option<String> {
        let now = Instant::now();
        let mut why = self.pending(steps);
        if activity {
            self.last_activity = Some(now);
            self.hang_reported = false;
        } else if let (Some(limit), Some(last), false) = (self.hang, self.last_activity, self.hang_reported) {
            if now.duration_since(last) >= limit {
                self.hang_reported = true;
                why.get_or_insert_with(|| format!("hang: no GPU activity for {} ms", limit.as_millis()));
            }
        }
        why
    }

    /// The triggers raised since the last poll that do not depend on time
    /// passing (a slow step among `steps`, SIGUSR2 to the process, the
    /// trigger file): what [`Self::poll`] checks, less the hang. Also the
    /// last check at a clean exit, so that a trigger raised within the
    /// last flush period still writes its snapshot.
    pub fn pending(&mut self, steps: &mut Vec<u64>) -> Option<String> {
        let mut why = None;
        if let Some(slow) = &mut self.slow {
            for t in steps.drain(..) {
                if let Some(w) = slow.mark(t) {
                    why.get_or_insert(w);
                }
            }
        }
        steps.clear();
        if SIGUSR2_SEEN.swap(false, Relaxed) {
            why = Some("SIGUSR2 to the process".to_string());
        }
        let st = stamp(&self.file);
        if st.is_some() && st != self.seen {
            self.seen = st;
            why.get_or_insert_with(|| "SIGUSR2 to gputrace run".to_string());
        }
        why
    }
}

/// Whether an NVTX marker is a step mark (the forms
/// `gputrace_analysis::productive::parse_step_mark` accepts).
pub fn is_step_mark(domain: &str, name: &str) -> bool {
    let step = |rest: &str| rest.is_empty() || rest.starts_with(' ');
    (domain == "gputrace" && name.strip_prefix("step").is_some_and(step)) || name.strip_prefix("gputrace.step").is_some_and(step)
}

/// Step durations the running median is taken over.
const STEP_HISTORY: usize = 32;
/// Steps seen before one can be judged slow.
const MIN_STEPS: usize = 5;

/// The slow-step trigger: step durations from consecutive step marks.
struct SlowSteps {
    factor: f64,
    last_mark: Option<u64>,
    /// The last durations, a ring of `len` entries.
    durations: [u64; STEP_HISTORY],
    len: usize,
    next: usize,
    /// False after a slow step, until a step that is not: one snapshot per
    /// slow stretch.
    armed: bool,
}

impl SlowSteps {
    fn new(factor: f64) -> SlowSteps {
        SlowSteps {
            factor,
            last_mark: None,
            durations: [0; STEP_HISTORY],
            len: 0,
            next: 0,
            armed: true,
        }
    }

    fn median(&self) -> u64 {
        let mut v = self.durations;
        let v = &mut v[..self.len];
        v.sort_unstable();
        v[self.len / 2]
    }

    /// A step mark at `t_ns`: why to snapshot, if the step it ends is slow.
    fn mark(&mut self, t_ns: u64) -> Option<String> {
        let prev = self.last_mark.replace(t_ns)?;
        let d = t_ns.checked_sub(prev)?;
        let mut verdict = None;
        if self.len >= MIN_STEPS {
            let median = self.median();
            if median > 0 && d as f64 > self.factor * median as f64 {
                verdict = Some(format!(
                    "slow step: {} ms, {:.1} x the median of the {} steps before it ({} ms)",
                    d / 1_000_000,
                    d as f64 / median as f64,
                    self.len,
                    median / 1_000_000
                ));
            }
        }
        self.durations[self.next] = d;
        self.next = (self.next + 1) % STEP_HISTORY;
        self.len = (self.len + 1).min(STEP_HISTORY);
        match verdict {
            Some(_) if self.armed => {
                self.armed = false;
                verdict
            }
            Some(_) => None,
            None => {
                self.armed = true;
                None
            }
        }
    }
}

/// Write a snapshot of the flight recorder (everything pushed to `w` so
/// far, the window's worth of events) as a trace beside where `path` would
/// be, and say where. Any failure is one `gputrace:` line; recording goes on.
pub fn snapshot(w: &mut TraceWriter<Out>, path: &Path, why: &str) {
    if let Err(e) = w.flush() {
        say(&format!("flight recorder snapshot ({why}) failed: {e}"));
        return;
    }
    let Out::Flight(sink) = w.get_mut() else { return };
    let dir = path.parent().unwrap_or(Path::new("."));
    let trace = flight::unused_trace_path(dir, &stem(path));
    report(why, &trace, sink.snapshot(&trace, why));
}

/// At a clean exit, after the trailer went to the meta file (`out`, what
/// the writer's `finish` returned): write the snapshot a trigger raised
/// since the last flush period asks for, if any.
pub fn snapshot_at_exit(t: &mut Triggers, steps: &mut Vec<u64>, out: &Out, path: &Path) {
    let Out::Flight(sink) = out else { return };
    let Some(why) = t.pending(steps) else { return };
    let dir = path.parent().unwrap_or(Path::new("."));
    let trace = flight::unused_trace_path(dir, &stem(path));
    report(&why, &trace, sink.snapshot(&trace, &why));
}

/// Say where a snapshot went, or why it failed.
fn report(why: &str, trace: &Path, r: gputrace_format::Result<flight::Reconstruction>) {
    match r {
        Ok(r) => say(&format!(
            "flight recorder snapshot ({why}): {} ({} event chunks)",
            trace.display(),
            r.chunks
        )),
        Err(e) => say(&format!("flight recorder snapshot ({why}) failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path, hang: Option<Duration>) -> Config {
        let mut c = Config::from_env(|_| None);
        c.output_dir = dir.to_path_buf();
        c.flight = Some(FlightConfig {
            window: Duration::from_secs(60),
            cap_bytes: 1 << 20,
            hang,
            slow_step: Some(3.0),
        });
        c
    }

    #[test]
    fn flight_mode_writes_no_trace_file_and_falls_back_to_one_if_the_ring_fails() {
        let dir = tempfile::tempdir().unwrap();
        let c = config(dir.path(), None);
        let path = dir.path().join("host.p1.gtrace");
        assert!(matches!(open_output(&c, &path).unwrap(), Out::Flight(_)));
        assert!(!path.exists());
        assert!(flight::ring_path(dir.path(), "host.p1").exists());
        // A directory where the ring should go: traced normally instead.
        let path = dir.path().join("host.p2.gtrace");
        std::fs::create_dir(flight::ring_path(dir.path(), "host.p2")).unwrap();
        assert!(matches!(open_output(&c, &path).unwrap(), Out::File(_)));
        assert!(path.exists());
    }

    #[test]
    fn the_trigger_file_and_a_hang_each_fire_once() {
        let dir = tempfile::tempdir().unwrap();
        let c = config(dir.path(), Some(Duration::from_millis(50)));
        let mut t = Triggers::new(&c, c.flight.as_ref().unwrap());
        assert_eq!(t.poll(false, &mut Vec::new()), None, "no hang before any activity");
        std::fs::write(dir.path().join(flight::TRIGGER_FILE), b"t").unwrap();
        assert_eq!(t.poll(true, &mut Vec::new()).as_deref(), Some("SIGUSR2 to gputrace run"));
        assert_eq!(t.poll(false, &mut Vec::new()), None);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(t.poll(false, &mut Vec::new()).as_deref(), Some("hang: no GPU activity for 50 ms"));
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(t.poll(false, &mut Vec::new()), None, "one snapshot per hang");
        std::fs::write(dir.path().join(flight::TRIGGER_FILE), b"tt").unwrap();
        assert_eq!(t.poll(true, &mut Vec::new()).as_deref(), Some("SIGUSR2 to gputrace run"));
    }

    #[test]
    fn a_step_three_times_the_median_fires_once_per_slow_stretch() {
        assert!(is_step_mark("gputrace", "step tokens=4096") && is_step_mark("", "gputrace.step"));
        assert!(!is_step_mark("gputrace", "stepper") && !is_step_mark("app", "step"));
        let mut s = SlowSteps::new(3.0);
        let ms = 1_000_000;
        let mut t = 0;
        let mut fired = Vec::new();
        for (i, d) in [100, 100, 110, 90, 100, 100, 500, 600, 100, 100, 450].iter().enumerate() {
            t += d * ms;
            if let Some(why) = s.mark(t) {
                fired.push((i, why));
            }
        }
        // The first mark only starts a step; 500 ms is 5 x 100 ms; 600 ms
        // right after is the same slow stretch; 450 ms after normal steps fires again.
        assert_eq!(fired.iter().map(|f| f.0).collect::<Vec<_>>(), [6, 10], "{fired:?}");
        assert!(fired[0].1.starts_with("slow step: 500 ms, 5.0 x the median"), "{fired:?}");
    }
}
