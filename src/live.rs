//! Live metrics of `gputrace run --metrics ADDR` / `--metrics-textfile DIR`: a thread of
//! the launcher (never of the traced job) re-analyses this run's growing trace files
//! every interval and publishes the exposition to the endpoint and the textfile.
//!
//! Which files are this run's: those whose header carries this run's id
//! (`gputrace.run_id`, which the agent copies from `GPUTRACE_RUN_ID`), so that several
//! `gputrace run`s sharing an output directory (one per rank under `srun`) never count
//! each other's ranks.

use gputrace_analysis::{analyze, Classifier, Options};
use gputrace_format::TraceFile;
use gputrace_metrics::serve::{Content, Endpoint, Limits};
use gputrace_metrics::{CounterMemory, Exposition, Labels, MetricType};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// Header extra naming the `gputrace run` a trace belongs to.
pub const RUN_ID_KEY: &str = "gputrace.run_id";

/// What to publish, where, how often.
pub struct LiveOptions {
    /// Where the endpoint listens (`None`: no endpoint).
    pub listen: Option<SocketAddr>,
    /// Directory for a node_exporter textfile (`None`: none).
    pub textfile_dir: Option<PathBuf>,
    /// Time between two analyses.
    pub interval: Duration,
    /// The `job` label.
    pub job: Option<String>,
    /// How GPU work is classified.
    pub classifier: Classifier,
}

/// The running collector.
pub struct Live {
    shared: Arc<Shared>,
    endpoint: Option<Endpoint>,
    thread: Option<JoinHandle<()>>,
    textfile: Option<PathBuf>,
}

struct Shared {
    out_dir: PathBuf,
    run_id: String,
    opts: LiveOptions,
    content: Arc<Content>,
    stop: AtomicBool,
    state: std::sync::Mutex<State>,
}

#[derive(Default)]
struct State {
    memory: CounterMemory,
    /// (path, length, modification time) of the files last analysed.
    seen: Vec<(PathBuf, u64, Option<SystemTime>)>,
    /// The families of the last analysis (reused while no file changed).
    last: Option<Exposition>,
    analyses: u64,
    errors: u64,
    said_error: bool,
    last_duration_s: f64,
    last_at: Option<SystemTime>,
}

impl Live {
    /// Bind the endpoint (a failure is one `gputrace:` line; the job runs without it) and
    /// start the collector for the traces of run `run_id` in `out_dir`.
    pub fn start(out_dir: &Path, run_id: String, opts: LiveOptions) -> Live {
        let content = Arc::new(Content::default());
        let endpoint = opts
            .listen
            .and_then(|addr| match Endpoint::bind(addr, content.clone(), Limits::default()) {
                Ok(e) => {
                    eprintln!("gputrace: serving live metrics on http://{}/metrics", e.addr());
                    Some(e)
                }
                Err(e) => {
                    eprintln!("gputrace: cannot serve metrics on {addr}: {e}; the job runs without the endpoint");
                    None
                }
            });
        let textfile = opts
            .textfile_dir
            .as_ref()
            .map(|d| d.join(format!("gputrace_{}.prom", std::process::id())));
        let shared = Arc::new(Shared {
            out_dir: out_dir.to_path_buf(),
            run_id,
            opts,
            content,
            stop: AtomicBool::new(false),
            state: Default::default(),
        });
        let worker = shared.clone();
        let textfile_for_thread = textfile.clone();
        let thread = std::thread::Builder::new()
            .name("gputrace-live".into())
            .spawn(move || {
                lower_priority();
                let mut next = Instant::now();
                while !worker.stop.load(Ordering::Relaxed) {
                    if Instant::now() >= next {
                        let took = worker.refresh(textfile_for_thread.as_deref());
                        next = Instant::now() + pause_after(worker.opts.interval, took);
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
            .map_err(|e| eprintln!("gputrace: cannot start the metrics thread: {e}; no live metrics"))
            .ok();
        Live {
            shared,
            endpoint,
            thread,
            textfile,
        }
    }

    /// The endpoint's address, if it listens.
    pub fn addr(&self) -> Option<SocketAddr> {
        self.endpoint.as_ref().map(|e| e.addr())
    }

    /// After the job: one last analysis of the finished traces, served for `linger`
    /// (so a scraper collects the final values), then the endpoint closes and the
    /// textfile is removed.
    pub fn finish(mut self, linger: Duration) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.shared.refresh(self.textfile.as_deref());
        if !linger.is_zero() && (self.endpoint.is_some() || self.textfile.is_some()) {
            match self.addr() {
                Some(a) => eprintln!(
                    "gputrace: serving the final metrics on http://{a}/metrics for {} s",
                    linger.as_secs_f64()
                ),
                None => eprintln!("gputrace: keeping the final metrics textfile for {} s", linger.as_secs_f64()),
            }
            std::thread::sleep(linger);
        }
        drop(self.endpoint.take());
        if let Some(f) = &self.textfile {
            let _ = std::fs::remove_file(f);
        }
    }
}

impl Shared {
    /// This run's trace files, sorted.
    fn files(&self) -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&self.out_dir) else {
            return Vec::new();
        };
        let mut v: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == gputrace_format::FILE_EXTENSION))
            .collect();
        v.sort();
        v
    }

    /// Analyse (if a file changed) and publish; returns the analysis' time.
    fn refresh(&self, textfile: Option<&Path>) -> Duration {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let files = self.files();
        let seen: Vec<_> = files
            .iter()
            .map(|p| {
                let m = std::fs::metadata(p).ok();
                (p.clone(), m.as_ref().map_or(0, |m| m.len()), m.and_then(|m| m.modified().ok()))
            })
            .collect();
        if st.last.is_none() || seen != st.seen {
            let started = Instant::now();
            match self.analyse(&files) {
                Ok(mut e) => {
                    e.hold_counters(&mut st.memory);
                    st.last = Some(e);
                    st.seen = seen;
                    st.analyses += 1;
                }
                Err(msg) => {
                    st.errors += 1;
                    if !st.said_error {
                        eprintln!("gputrace: live metrics: {msg} (said once; the metrics keep their last values)");
                        st.said_error = true;
                    }
                }
            }
            st.last_duration_s = started.elapsed().as_secs_f64();
            st.last_at = Some(SystemTime::now());
        }
        let took = Duration::from_secs_f64(st.last_duration_s);
        let mut e = st.last.clone().unwrap_or_default();
        status(&mut e, &st, self.opts.job.as_deref());
        let text = e.render();
        if let Some(path) = textfile {
            write_textfile(path, &text);
        }
        self.content.set(text);
        took
    }

    /// The exposition of this run's traces (none yet: empty).
    fn analyse(&self, files: &[PathBuf]) -> Result<Exposition, gputrace_analysis::AnalysisError> {
        let mut traces = Vec::new();
        for f in files {
            // A file being created may not have its header yet: next time.
            let Ok(t) = TraceFile::open(f) else { continue };
            if t.header().extra.get(RUN_ID_KEY).is_some_and(|id| *id == self.run_id) {
                traces.push(t);
            }
        }
        if traces.is_empty() {
            return Ok(Exposition::new());
        }
        let opts = Options {
            classifier: self.opts.classifier.clone(),
            threads: 1,
            ..Options::default()
        };
        let report = analyze(&traces, &opts)?;
        let metrics = gputrace_metrics::Options {
            job: self.opts.job.clone(),
        };
        Ok(gputrace_metrics::report_exposition(
            &report,
            &gputrace_metrics::event_counts(&traces),
            &metrics,
        ))
    }
}

/// Time to the next analysis: the interval, or ten times the last analysis' time when
/// that is longer, so that re-analysing a long job's growing traces never takes more
/// than about a tenth of one core.
fn pause_after(interval: Duration, analysis: Duration) -> Duration {
    interval.max(analysis.saturating_mul(10))
}

/// The collector's own families: how fresh the numbers are and what they cost.
fn status(e: &mut Exposition, st: &State, job: Option<&str>) {
    use MetricType::{Counter, Gauge};
    let l = match job {
        Some(j) => Labels::new().with("job", j),
        None => Labels::new(),
    };
    e.add(
        "gputrace_metrics_analyses_total",
        Counter,
        "Analyses of the growing traces the live metrics made.",
        &l,
        st.analyses as f64,
    );
    e.add(
        "gputrace_metrics_analysis_errors_total",
        Counter,
        "Analyses that failed (the metrics then keep their last values).",
        &l,
        st.errors as f64,
    );
    e.add(
        "gputrace_metrics_analysis_duration_seconds",
        Gauge,
        "Time the last analysis took.",
        &l,
        st.last_duration_s,
    );
    if let Some(at) = st.last_at.and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok()) {
        e.add(
            "gputrace_metrics_last_analysis_timestamp_seconds",
            Gauge,
            "When the last analysis ran (Unix time).",
            &l,
            at.as_secs_f64(),
        );
    }
}

/// Write the textfile through a temporary name in the same directory, so the collector
/// never reads half a file; neither name is written through a symbolic link. A failure
/// is said once per process.
fn write_textfile(path: &Path, text: &str) {
    static SAID: AtomicBool = AtomicBool::new(false);
    let r = gputrace_format::outdir::OutDir::parent_of(path).and_then(|(dir, name)| dir.write_replacing(&name, text.as_bytes()));
    if let Err(e) = r {
        if !SAID.swap(true, Ordering::Relaxed) {
            eprintln!("gputrace: cannot write the metrics textfile {}: {e}", path.display());
        }
    }
}

/// The collector competes with the job for CPU: it runs at a lower priority.
fn lower_priority() {
    // Safety: plain system calls on this thread's id.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 10);
    }
}

/// A run id for `GPUTRACE_RUN_ID`: this process' id and start time, digits and a dash
/// (safe in a header whatever the environment holds).
pub fn new_run_id() -> String {
    let ns = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{}-{ns}", std::process::id())
}

/// The port offset when `gputrace run` is itself started once per rank: its local rank
/// from the launchers' variables (torchrun `LOCAL_RANK`, Slurm `SLURM_LOCALID`, Open MPI
/// `OMPI_COMM_WORLD_LOCAL_RANK`, MPICH `MPI_LOCALRANKID`), else 0.
pub fn local_rank_offset(get: impl Fn(&str) -> Option<String>) -> u16 {
    ["LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"]
        .iter()
        .find_map(|k| get(k).and_then(|v| v.trim().parse::<u16>().ok()))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_textfile_is_never_written_through_a_link() {
        let root = tempfile::tempdir().unwrap();
        let victim = root.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let dir = root.path().join("textfiles");
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("gputrace_1.prom.partial")).unwrap();
        write_textfile(&dir.join("gputrace_1.prom"), "m 1\n");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert!(!dir.join("gputrace_1.prom").exists());
        std::fs::remove_file(dir.join("gputrace_1.prom.partial")).unwrap();
        write_textfile(&dir.join("gputrace_1.prom"), "m 1\n");
        assert_eq!(std::fs::read(dir.join("gputrace_1.prom")).unwrap(), b"m 1\n");
    }

    #[test]
    fn offsets_come_from_the_first_launcher_variable() {
        assert_eq!(local_rank_offset(|_| None), 0);
        assert_eq!(local_rank_offset(|k| (k == "SLURM_LOCALID").then(|| "3".into())), 3);
        assert_eq!(local_rank_offset(|k| (k == "LOCAL_RANK").then(|| "x".into())), 0);
        assert!(new_run_id().chars().all(|c| c.is_ascii_digit() || c == '-'));
    }

    #[test]
    fn long_analyses_stretch_the_interval() {
        let s = Duration::from_secs;
        assert_eq!(pause_after(s(5), Duration::from_millis(100)), s(5));
        assert_eq!(pause_after(s(5), s(2)), s(20));
    }
}
