//! The scraper thread of `gputrace run`: find the job's metrics endpoint (or
//! take the one the user named), scrape it every interval and write each
//! scrape's series into the launcher's own trace file.
//!
//! Memory is bounded: one page at a time ([`crate::http::MAX_BODY`]), only
//! the engine families parsed, and the trace writer's own bound. The file is
//! flushed after every scrape, so a launcher killed mid-run leaves every
//! scrape before the last as whole chunks.

use crate::discover::{self, Listener};
use crate::expo;
use crate::families::{self, Engine, Snapshot};
use crate::http::{self, HttpError, Url};
use gputrace_format::metric::serving as names;
use gputrace_format::{ClockPair, Counter, DeviceId, Event, Header, Nanos, Producer, TimeDomain, TraceWriter, Trailer, WriterOptions};
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

/// Where the metrics are.
#[derive(Clone, Debug)]
pub enum Target {
    /// The URL the user named (`--serving-metrics URL`).
    Url(Url),
    /// The ports the process tree under `root` listens on, probed for the
    /// engines' families (`proc_root` is `/proc` outside tests).
    Discover {
        /// The job's pid.
        root: u32,
        /// Where procfs is mounted.
        proc_root: PathBuf,
        /// Ports never probed: PyTorch's rendezvous and TCPStore ports
        /// (`MASTER_PORT`, 29400, 29500), which speak their own protocol.
        skip_ports: Vec<u16>,
    },
}

/// What the scraper needs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where the metrics are.
    pub target: Target,
    /// Time between two scrapes.
    pub interval: Duration,
    /// Deadline of one scrape (connect, send, read).
    pub timeout: Duration,
    /// Directory of the trace file (created at the first successful scrape).
    pub out_dir: PathBuf,
    /// Header fields of the file (command, host, run id in `extra`); the
    /// scraper sets producer, clock, time domain and the serving extras.
    pub header: Header,
}

/// How the scraping went, for the launcher's closing lines.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// The endpoint scraped (found or named).
    pub url: Option<Url>,
    /// Its engine.
    pub engine: Option<Engine>,
    /// The trace file written, if any scrape succeeded.
    pub file: Option<PathBuf>,
    /// Successful scrapes.
    pub scrapes: u64,
    /// Failed scrapes between two successful ones (each a gap in the series).
    pub failed: u64,
    /// Failed scrapes after the last success (the server went away before
    /// the job ended; the window ends at the last success, so no gap).
    pub failed_at_end: u64,
    /// Failed tries before the first success (a named URL that never answered).
    pub failed_before_first: u64,
    /// The last error, in words.
    pub last_error: Option<String>,
    /// Writing the file failed (the series stop there).
    pub write_error: Option<String>,
}

/// The running scraper.
pub struct Scraper {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<Outcome>>,
}

impl Scraper {
    /// Start the thread (a failure to start is an `Outcome` with that error).
    pub fn start(cfg: Config) -> Scraper {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("gputrace-serving".into())
            .spawn(move || run(cfg, &flag))
            .map_err(|e| eprintln!("gputrace: cannot start the serving metrics scraper: {e}; no serving numbers"))
            .ok();
        Scraper { stop, thread }
    }

    /// Stop, write the trailer, and say how it went.
    pub fn finish(mut self) -> Outcome {
        {
            let (m, cv) = &*self.stop;
            *m.lock().unwrap_or_else(|e| e.into_inner()) = true;
            cv.notify_all();
        }
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(o)) => o,
            Some(Err(_)) => Outcome {
                last_error: Some("the scraper thread panicked".into()),
                ..Outcome::default()
            },
            None => Outcome::default(),
        }
    }
}

/// What discovery knows of a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Probe {
    /// Not HTTP, or refused or reset: never asked again (a port may be
    /// another protocol's, e.g. a TCPStore, which must not get HTTP every second).
    Never,
    /// HTTP without the engines' families (not ready yet?), or a first
    /// time without an answer in time: asked again after this many rounds.
    RetryIn(u32),
}

const RETRY_ROUNDS: u32 = 10;

struct State {
    cfg: Config,
    found: Option<(Url, Engine)>,
    probes: HashMap<u16, Probe>,
    /// Ports that once gave no answer in time.
    silent: std::collections::HashSet<u16>,
    writer: Option<(PathBuf, TraceWriter<File>)>,
    out: Outcome,
}

fn run(cfg: Config, stop: &(Mutex<bool>, Condvar)) -> Outcome {
    let mut st = State {
        found: match &cfg.target {
            Target::Url(u) => Some((u.clone(), Engine::Vllm)),
            Target::Discover { .. } => None,
        },
        cfg,
        probes: HashMap::new(),
        silent: Default::default(),
        writer: None,
        out: Outcome::default(),
    };
    if let Target::Url(u) = &st.cfg.target {
        st.out.url = Some(u.clone());
    }
    loop {
        let round = Instant::now();
        match st.found.as_ref().map(|f| f.0.clone()) {
            Some(url) => scrape(&mut st, &url),
            None => discover(&mut st),
        }
        let (m, cv) = stop;
        let mut stopped = m.lock().unwrap_or_else(|e| e.into_inner());
        while !*stopped {
            let Some(left) = (round + st.cfg.interval).checked_duration_since(Instant::now()) else {
                break;
            };
            stopped = cv.wait_timeout(stopped, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        if *stopped {
            break;
        }
    }
    close(st)
}

/// One scrape of `url`: its series into the file, or a failure counted.
fn scrape(st: &mut State, url: &Url) {
    let asked = SystemTime::now();
    match fetch(url, st.cfg.timeout) {
        Ok((engine, snap)) => {
            let answered = SystemTime::now();
            // The page describes some instant between asking and the answer.
            let t = ns(asked) / 2 + ns(answered) / 2 + (ns(asked) % 2 + ns(answered) % 2) / 2;
            if st.out.scrapes == 0 {
                st.out.engine = Some(engine);
                st.out.url = Some(url.clone());
                if let Some(f) = &mut st.found {
                    f.1 = engine;
                }
            }
            st.out.scrapes += 1;
            st.out.failed += std::mem::take(&mut st.out.failed_at_end);
            write(st, t, &snap);
        }
        Err(e) => {
            if st.out.scrapes == 0 {
                st.out.failed_before_first += 1;
            } else {
                st.out.failed_at_end += 1;
            }
            st.out.last_error = Some(e.to_string());
        }
    }
}

fn ns(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// Why one scrape failed.
#[derive(Debug, thiserror::Error)]
enum FetchError {
    /// The GET failed.
    #[error(transparent)]
    Http(#[from] HttpError),
    /// The page has none of an engine's metric families.
    #[error("the page has no vllm: or sglang: metrics")]
    NoEngine,
}

/// GET, parse, and keep the engine families.
fn fetch(url: &Url, timeout: Duration) -> Result<(Engine, Snapshot), FetchError> {
    let page = http::get(url, timeout)?;
    let (samples, _bad) = expo::parse(&page, families::is_engine_sample);
    families::snapshot(&samples).ok_or(FetchError::NoEngine)
}

/// Probe the tree's listeners not yet ruled out; the first with an engine's families is the endpoint.
fn discover(st: &mut State) {
    let Target::Discover {
        root,
        proc_root,
        skip_ports,
    } = &st.cfg.target
    else {
        return;
    };
    let (root, proc_root, skip) = (*root, proc_root.clone(), skip_ports.clone());
    for Listener { loopback, port } in discover::listeners(&proc_root, root) {
        if skip.contains(&port) {
            continue;
        }
        match st.probes.get_mut(&port) {
            Some(Probe::Never) => continue,
            Some(Probe::RetryIn(n)) if *n > 0 => {
                *n -= 1;
                continue;
            }
            _ => {}
        }
        let host = match loopback {
            std::net::IpAddr::V4(a) => a.to_string(),
            std::net::IpAddr::V6(a) => format!("[{a}]"),
        };
        let url = Url {
            host,
            port,
            path: "/metrics".into(),
        };
        match http::get(&url, st.cfg.timeout) {
            Ok(page) => {
                let (samples, _) = expo::parse(&page, families::is_engine_sample);
                if let Some((engine, _)) = families::snapshot(&samples) {
                    eprintln!(
                        "gputrace: scraping {} metrics from {url} every {} s",
                        engine.name(),
                        st.cfg.interval.as_secs_f64()
                    );
                    st.found = Some((url.clone(), engine));
                    scrape(st, &url);
                    return;
                }
                st.probes.insert(port, Probe::RetryIn(RETRY_ROUNDS));
            }
            // An HTTP error status, or no answer in time (a busy server): ask again later.
            Err(HttpError::Protocol(m)) if m.starts_with("HTTP status") => {
                st.probes.insert(port, Probe::RetryIn(RETRY_ROUNDS));
            }
            // Twice silent: not a server that answers HTTP.
            Err(HttpError::Deadline(_)) => {
                let again = !st.silent.insert(port);
                st.probes
                    .insert(port, if again { Probe::Never } else { Probe::RetryIn(RETRY_ROUNDS) });
            }
            Err(_) => {
                st.probes.insert(port, Probe::Never);
            }
        }
    }
}

/// The file's name: one per launcher, beside the agent's traces.
pub fn file_name(hostname: &str, pid: u32) -> String {
    format!("serving.{hostname}.{pid}.{}", gputrace_format::FILE_EXTENSION)
}

fn write(st: &mut State, t: u64, snap: &Snapshot) {
    if st.out.write_error.is_some() {
        return;
    }
    if st.writer.is_none() {
        match open(&st.cfg, st.found.as_ref()) {
            Ok(w) => {
                st.out.file = Some(w.0.clone());
                st.writer = Some(w);
            }
            Err(e) => {
                st.out.write_error = Some(e.to_string());
                return;
            }
        }
    }
    let failed = st.out.failed;
    let Some((path, w)) = &mut st.writer else { return };
    let put = |w: &mut TraceWriter<File>, name: &str, value: u64| {
        let metric = w.intern(name);
        w.push(Event::Counter(Counter {
            time: Nanos(t),
            device: DeviceId(0),
            metric,
            value,
        }))
    };
    let result = snap
        .series
        .iter()
        .try_for_each(|(name, v)| put(w, name, *v))
        .and_then(|_| put(w, names::SCRAPES_FAILED, failed))
        .and_then(|_| w.flush());
    if let Err(e) = result {
        st.out.write_error = Some(format!("{}: {e}", path.display()));
    }
}

/// Why the series file could not be started; each names the file.
#[derive(Debug, thiserror::Error)]
enum OpenError {
    /// The file could not be created.
    #[error("{}: {source}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Its header could not be written.
    #[error("{}: {source}", path.display())]
    Header {
        path: PathBuf,
        #[source]
        source: gputrace_format::FormatError,
    },
}

fn open(cfg: &Config, found: Option<&(Url, Engine)>) -> Result<(PathBuf, TraceWriter<File>), OpenError> {
    let mut h = cfg.header.clone();
    h.producer = Producer::Launcher;
    h.pid = std::process::id();
    h.time_domain = TimeDomain::Realtime;
    h.start_clock = ClockPair::now();
    h.devices.clear();
    if let Some((url, engine)) = found {
        h.extra.insert("serving.url".into(), url.to_string());
        h.extra.insert("serving.engine".into(), engine.name().into());
    }
    let name = file_name(&h.hostname, h.pid);
    let path = cfg.out_dir.join(&name);
    // Created without following a link planted under this name (a link is refused).
    let file = gputrace_format::outdir::OutDir::open(&cfg.out_dir)
        .and_then(|dir| dir.create(&name))
        .map_err(|source| OpenError::Create {
            path: path.clone(),
            source,
        })?;
    let w = TraceWriter::new(file, &h, WriterOptions::default()).map_err(|source| OpenError::Header {
        path: path.clone(),
        source,
    })?;
    Ok((path, w))
}

fn close(mut st: State) -> Outcome {
    if let Some((path, w)) = st.writer.take() {
        let mut trailer = Trailer {
            end_clock: ClockPair::now(),
            ..Trailer::default()
        };
        trailer.extra.insert("serving.scrapes".into(), st.out.scrapes.to_string());
        trailer.extra.insert("serving.scrapes_failed".into(), st.out.failed.to_string());
        trailer
            .extra
            .insert("serving.scrapes_failed_at_end".into(), st.out.failed_at_end.to_string());
        if let Some(e) = &st.out.last_error {
            trailer.extra.insert("serving.last_error".into(), e.clone());
        }
        let r = w.finish(trailer).map(|_| ());
        if let Err(e) = r {
            st.out.write_error = Some(format!("{}: {e}", path.display()));
        }
    }
    st.out
}

/// Whether `dir` holds a file this module writes (by name).
pub fn is_serving_file(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("serving.") && n.ends_with(gputrace_format::FILE_EXTENSION))
}
