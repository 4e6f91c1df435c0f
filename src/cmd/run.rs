//! `gputrace run [-o DIR] -- CMD ARGS...`: run a command with the capture
//! agent injected into every CUDA process of its tree.

use crate::agent;
use crate::cmd::info::thousands;
use crate::error::CliError;
use crate::python::PythonDir;
use gputrace_format::outdir::OutDir;
use gputrace_format::{EventKind, HostSampling, RunRecord, TraceFile, RUN_RECORD_FORMAT};
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::SystemTime;

/// Arguments of `gputrace run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Directory for the trace files, one per traced process (created if missing).
    #[arg(short, long, default_value = "gputrace-traces")]
    pub output: PathBuf,
    /// Trace buffers per process (memory = buffers × buffer size; default 16).
    #[arg(long, value_parser = clap::value_parser!(u32).range(2..=4096))]
    pub buffers: Option<u32>,
    /// Size of each trace buffer in KiB (default 4096).
    #[arg(long, value_parser = clap::value_parser!(u32).range(64..=262_144))]
    pub buffer_kb: Option<u32>,
    /// How often buffered records are written, in ms (a killed process loses at most this much; default 1000).
    #[arg(long, value_parser = clap::value_parser!(u32).range(10..=600_000))]
    pub flush_ms: Option<u32>,
    /// Do not record CUDA API calls (smaller traces; no launch→kernel links).
    #[arg(long)]
    pub no_api: bool,
    /// Use this libcupti instead of searching for one.
    #[arg(long, value_name = "PATH")]
    pub cupti: Option<PathBuf>,
    /// Do not load gputrace as NCCL's profiler plugin (collectives then carry
    /// no communicator, sequence number or bytes; compare falls back to order).
    #[arg(long)]
    pub no_nccl: bool,
    /// Do not give Python jobs gputrace's sitecustomize (the PyTorch
    /// optimizer-step hook that marks steps, and the exit-outcome hook);
    /// `import gputrace` still works.
    #[arg(long)]
    pub no_python_hooks: bool,
    /// Do not record the program's NVTX ranges and marks.
    #[arg(long)]
    pub no_nvtx: bool,
    /// Sample each GPU's NVML counters (utilization, clocks, power, energy,
    /// temperature, throttle reasons, memory used, PCIe) this many times a
    /// second; 0 turns sampling off (default 10; at most 1000).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub gpu_sample_hz: Option<u32>,
    /// Sample each GPU's SM activity, tensor pipe activity and DRAM read and
    /// write throughput with CUPTI PM sampling (CUPTI 12.6+, Turing or newer
    /// GPU, profiling permission); see docs/agent.md.
    #[arg(long)]
    pub gpu_metrics: bool,
    /// PM samples per second with --gpu-metrics (default 1000; 1 to 20000).
    #[arg(long, value_name = "N", requires = "gpu_metrics", value_parser = clap::value_parser!(u32).range(1..=20_000))]
    pub gpu_metrics_hz: Option<u32>,
    /// Tokens per training step, noted in the trace header (for throughput).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub tokens_per_step: Option<u64>,
    /// Samples per training step, noted in the trace header.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub samples_per_step: Option<u64>,
    /// Serve live Prometheus metrics of this run's traces at http://ADDR/metrics while the
    /// job runs: PORT or :PORT is loopback (127.0.0.1:PORT); give HOST:PORT (0.0.0.0:9400)
    /// to listen beyond this machine. Started once per rank (srun, mpirun), the port is
    /// PORT + the local rank. No listener without this flag.
    #[arg(long, value_name = "ADDR", value_parser = gputrace_metrics::serve::parse_listen_addr)]
    pub metrics: Option<std::net::SocketAddr>,
    /// Write the same metrics to DIR/gputrace_<pid>.prom every interval, for
    /// node_exporter's textfile collector.
    #[arg(long, value_name = "DIR")]
    pub metrics_textfile: Option<PathBuf>,
    /// Seconds between two analyses of the growing traces for the live metrics (default 5).
    #[arg(long, value_name = "SECONDS", default_value_t = 5.0, value_parser = parse_seconds)]
    pub metrics_interval: f64,
    /// After the job ends, keep serving the final metrics this many seconds, so the last
    /// scrape sees them (default 0).
    #[arg(long, value_name = "SECONDS", default_value_t = 0.0, value_parser = parse_linger)]
    pub metrics_linger: f64,
    /// The `job` label of the metrics (default: $SLURM_JOB_ID, else no label).
    #[arg(long, value_name = "NAME")]
    pub metrics_job: Option<String>,
    /// Duty-cycled capture, ON/PERIOD (e.g. `2s/60s`): record GPU activity
    /// for the first ON of every PERIOD only, and nothing in between (CUPTI
    /// is turned off, so it costs the job nothing there). Units `ms`, `s`,
    /// `m`. The trace records each capture window; `report` computes idle
    /// time over the windows only and says the trace is duty-cycled.
    #[arg(long, value_name = "ON/PERIOD", value_parser = parse_duty)]
    pub duty: Option<Duty>,
    /// Flight recorder: each process keeps only about the last DURATION
    /// (e.g. 60s, 5m) of its timeline, in a fixed-size memory-mapped ring
    /// in the output directory, and a trace is written only when triggered:
    /// SIGUSR2 to `gputrace run` (not forwarded to the job), SIGUSR2 to a
    /// traced process that has no handler of its own, the job exiting
    /// non-zero or being killed, `--flight-hang` or `--flight-slow-step`. A job that exits 0
    /// leaves no trace. See docs/always-on.md.
    #[arg(long, value_name = "DURATION", value_parser = super::flight::parse_window)]
    pub flight_recorder: Option<std::time::Duration>,
    /// Size of each process's flight recorder ring in MiB (default 256);
    /// events pushed out by it before they are a window old are counted as
    /// lost (`flight_cap`).
    #[arg(long, value_name = "MB", requires = "flight_recorder", value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub flight_cap_mb: Option<u32>,
    /// With --flight-recorder: also write a snapshot when a process has had
    /// no new GPU activity for DURATION after having had some (off by default).
    #[arg(long, value_name = "DURATION", requires = "flight_recorder", value_parser = super::flight::parse_window)]
    pub flight_hang: Option<std::time::Duration>,
    /// With --flight-recorder: also write a snapshot when a step (from one
    /// step mark to the next; see docs/python.md) takes FACTOR times the
    /// median of the steps before it (at least 1.5; off by default).
    #[arg(long, value_name = "FACTOR", requires = "flight_recorder", value_parser = super::flight::parse_factor)]
    pub flight_slow_step: Option<f64>,
    /// Where the job's inference server publishes its Prometheus metrics
    /// (vLLM, SGLang): `http://HOST:PORT/PATH`, scraped every second into
    /// the trace as `serving.*` series (docs/serving.md). By default the
    /// ports the job's processes listen on are found on loopback and probed
    /// for the engines' metrics; `off` turns that off.
    #[arg(long, value_name = "URL|off", value_parser = parse_serving_metrics)]
    pub serving_metrics: Option<ServingMetrics>,
    /// Seconds between two scrapes of the serving metrics (default 1).
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0, value_parser = parse_seconds)]
    pub serving_interval: f64,
    /// How CUDA graphs are recorded: `node` (every kernel, copy and memset;
    /// the default), `graph` (one interval per graph launch: cheaper, the
    /// nodes are not recorded) or `auto` (node level until a graph has been
    /// launched --graphs-after times, then graph level). See docs/agent.md.
    #[arg(long, value_name = "MODE", value_parser = ["node", "graph", "auto"])]
    pub graphs: Option<String>,
    /// With --graphs auto: launches of one graph after which graphs are
    /// recorded at graph level (default 20).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub graphs_after: Option<u64>,
    /// Kernel timestamps from the GPU's hardware event system (Blackwell,
    /// CUDA 12.8+): `auto` (the default: when CUPTI is 13.4 Update 1 or newer
    /// and the GPU supports it), `on` (ask for it; one line if refused) or `off`.
    #[arg(long, value_name = "MODE", value_parser = ["auto", "on", "off"])]
    pub hw_trace: Option<String>,
    /// CUPTI's per-thread activity buffers (`on` for jobs with many launching
    /// threads, `off`); default: CUPTI's own (on from CUDA 13.0).
    #[arg(long, value_name = "on|off", value_parser = ["on", "off"])]
    pub per_thread_buffers: Option<String>,
    /// Sample the job's threads this many times a second: CPU state and time
    /// of every thread of its process tree, Python stacks of its Python
    /// processes (read without pausing them); 0 turns it off (default 100;
    /// at most 1000). See docs/host.md.
    #[arg(long, value_name = "N", default_value_t = 100, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub host_sample_hz: u32,
    /// Do not sample the job's threads (same as --host-sample-hz 0).
    #[arg(long)]
    pub no_host_samples: bool,
    /// The command to trace and its arguments (everything after `--`).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

fn parse_seconds(s: &str) -> Result<f64, crate::values::ValueError> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.1..=3600.0).contains(&v) => Ok(v),
        _ => Err(crate::values::ValueError::Seconds {
            given: s.to_string(),
            least: "0.1",
        }),
    }
}

/// `--serving-metrics`: a URL to scrape, or `off`.
#[derive(Clone, Debug)]
pub enum ServingMetrics {
    /// Scrape this URL.
    Url(gputrace_serving::http::Url),
    /// Do not look for a metrics endpoint.
    Off,
}

fn parse_serving_metrics(s: &str) -> Result<ServingMetrics, gputrace_serving::http::UrlError> {
    if s == "off" {
        return Ok(ServingMetrics::Off);
    }
    gputrace_serving::http::Url::parse(s).map(ServingMetrics::Url)
}

fn parse_linger(s: &str) -> Result<f64, crate::values::ValueError> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=3600.0).contains(&v) => Ok(v),
        _ => Err(crate::values::ValueError::Seconds {
            given: s.to_string(),
            least: "0",
        }),
    }
}

/// A `--duty` schedule, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Duty {
    /// Capture window length.
    pub on_ms: u64,
    /// Period between window starts.
    pub period_ms: u64,
}

/// Why a `--duty` schedule was refused.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum DutyError {
    /// No `/` between the window and the period.
    #[error("expected ON/PERIOD, e.g. 2s/60s")]
    NotOnPeriod,
    /// The window or the period is not a duration in ms, s or m.
    #[error(transparent)]
    Duration(#[from] crate::duration::DurationError),
    /// A window of 0, or not shorter than the period.
    #[error("the capture window must be longer than 0 and shorter than the period")]
    WindowNotInPeriod,
}

/// `2s/60s`, `500ms/1m`, `1.5s/1m`: ON/PERIOD, each a number with a unit (`ms`, `s`,
/// `m`), in whole milliseconds.
fn parse_duty(v: &str) -> Result<Duty, DutyError> {
    let ms = |part: &str| -> Result<u64, DutyError> {
        let d = crate::duration::parse(part, crate::duration::MS_TO_MIN)?;
        Ok(crate::duration::whole_ms(d, part)?)
    };
    let (on, period) = v.split_once('/').ok_or(DutyError::NotOnPeriod)?;
    let d = Duty {
        on_ms: ms(on)?,
        period_ms: ms(period)?,
    };
    if d.on_ms == 0 || d.on_ms >= d.period_ms {
        return Err(DutyError::WindowNotInPeriod);
    }
    Ok(d)
}

/// The traced child's pid, for the signal forwarder (0: none yet).
static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    let child = CHILD.load(Ordering::Relaxed);
    // Signals from the terminal (si_code > 0, e.g. Ctrl-C) already reach
    // the child through the process group; forward only those sent to us
    // by a process (kill, a job scheduler).
    // Safety: the kernel passes a valid siginfo to SA_SIGINFO handlers.
    let code = if info.is_null() { 0 } else { unsafe { (*info).si_code } };
    if child > 0 && code <= 0 {
        // Safety: kill is async-signal-safe.
        unsafe { libc::kill(child, sig) };
    }
}

fn install_forwarding() {
    for sig in [
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
    ] {
        // Safety: a zeroed sigaction with a valid SA_SIGINFO handler.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = forward as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Run `gputrace run`.
pub fn run(args: &RunArgs) -> Result<ExitCode, CliError> {
    let (agent_path, out_dir) = prepare(args)?;
    let program = &args.command[0];
    let mut cmd = Command::new(program);
    cmd.args(&args.command[1..]);
    agent_env(&mut cmd, args, &agent_path, &out_dir);
    // Kept alive until the command ends; removed on drop.
    let python = python_hooks(&mut cmd, args, &out_dir);
    source_env(&mut cmd, args, &agent_path);
    let run_id = crate::live::new_run_id();
    cmd.env("GPUTRACE_RUN_ID", &run_id);
    let run_id_for_serving = run_id.clone();
    let run_id_for_record = run_id.clone();
    let live = live_options(args)?.map(|opts| crate::live::Live::start(&out_dir, run_id, opts));
    flight_env(&mut cmd, args);
    let started = SystemTime::now();
    // The record is written now and completed when the command ends: a
    // launcher killed meanwhile leaves one that says so.
    let hz = if args.no_host_samples { 0 } else { args.host_sample_hz };
    let mut record = run_record(&args.command, started, None);
    record.run_id = Some(run_id_for_record);
    write_record(&out_dir, &record);
    let shown = Path::new(program).display().to_string();
    install_forwarding();
    if args.flight_recorder.is_some() {
        super::flight::install_trigger(&out_dir);
    }
    let mut child = cmd.spawn().map_err(|source| CliError::Spawn {
        command: shown.clone(),
        source,
    })?;
    CHILD.store(child.id() as i32, Ordering::Relaxed);
    let serving = super::serving::start(args, child.id(), &out_dir, &run_id_for_serving);
    let host = crate::host::start(child.id(), hz);
    if host.is_some() {
        // Said before any sample is taken: a launcher killed from now on
        // leaves a record of the samples its traces will not get.
        record.host_samples = Some(HostSampling {
            hz,
            root_pid: child.id(),
            written: false,
        });
        write_record(&out_dir, &record);
    }
    let status = wait(&mut child, shown)?;
    CHILD.store(0, Ordering::Relaxed);
    drop(python);
    super::serving::finish(serving);
    let mut record = RunRecord {
        run_id: record.run_id,
        host_samples: record.host_samples,
        ..run_record(&args.command, started, Some(&status))
    };
    write_record(&out_dir, &record);
    let code = finish(args, &out_dir, started, &status, child.id(), host, &mut record)?;
    if let Some(live) = live {
        live.finish(std::time::Duration::from_secs_f64(args.metrics_linger));
    }
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// The agent library and the output directory, both canonical; the directory is
/// created, checked writable, and cleared of what killed runs left.
fn prepare(args: &RunArgs) -> Result<(PathBuf, PathBuf), CliError> {
    let search = agent::locate();
    let agent_path = search.found.clone().ok_or_else(|| CliError::AgentMissing {
        searched: search.searched_list(),
    })?;
    let agent_path = std::fs::canonicalize(&agent_path).map_err(CliError::io(&agent_path))?;
    crate::out_dir::create(&args.output)?;
    let out_dir = std::fs::canonicalize(&args.output).map_err(CliError::io(&args.output))?;
    check_writable(&out_dir)?;
    // Python directories of launchers that were killed on this host.
    crate::python::remove_stale(&out_dir, &hostname());
    // Rings an earlier run left behind (it was killed) become traces.
    super::flight::recover_left_behind(&out_dir);

    Ok((agent_path, out_dir))
}

/// Inject the agent (CUDA, NCCL) and pass it the capture settings.
fn agent_env(cmd: &mut Command, args: &RunArgs, agent_path: &Path, out_dir: &Path) {
    if let Some(old) = std::env::var_os("CUDA_INJECTION64_PATH").filter(|v| !v.is_empty() && v != "none" && Path::new(v) != agent_path) {
        eprintln!(
            "gputrace: replacing CUDA_INJECTION64_PATH={} (CUDA has one injection slot; that tool will not load under gputrace)",
            Path::new(&old).display()
        );
    }
    cmd.env("CUDA_INJECTION64_PATH", agent_path);
    cmd.env("GPUTRACE_OUTPUT", out_dir);
    if let Some(v) = args.buffers {
        cmd.env("GPUTRACE_BUFFERS", v.to_string());
    }
    if let Some(v) = args.buffer_kb {
        cmd.env("GPUTRACE_BUFFER_KB", v.to_string());
    }
    if let Some(v) = args.flush_ms {
        cmd.env("GPUTRACE_FLUSH_MS", v.to_string());
    }
    if let Some(d) = args.duty {
        cmd.env("GPUTRACE_DUTY", format!("{}/{}", d.on_ms, d.period_ms));
    }
    if args.no_api {
        cmd.env("GPUTRACE_API", "0");
    }
    for (var, v) in [
        ("GPUTRACE_GRAPHS", args.graphs.clone()),
        ("GPUTRACE_GRAPHS_AFTER", args.graphs_after.map(|n| n.to_string())),
        ("GPUTRACE_HW_TRACE", args.hw_trace.clone()),
        ("GPUTRACE_PER_THREAD_BUFFERS", args.per_thread_buffers.clone()),
    ] {
        if let Some(v) = v {
            cmd.env(var, v);
        }
    }
    if let Some(p) = &args.cupti {
        cmd.env("GPUTRACE_CUPTI", p);
    }
    if args.no_nccl {
        cmd.env("GPUTRACE_NCCL", "0");
    } else {
        match std::env::var_os("NCCL_PROFILER_PLUGIN").filter(|v| !v.is_empty()) {
            // NCCL loads one profiler plugin: the user's choice wins.
            Some(theirs) if Path::new(&theirs) != agent_path => eprintln!(
                "gputrace: keeping NCCL_PROFILER_PLUGIN={} (NCCL loads one profiler plugin); collectives will carry no NCCL \
                 metadata and compare matches them by order",
                theirs.to_string_lossy()
            ),
            _ => {
                cmd.env("NCCL_PROFILER_PLUGIN", agent_path);
            }
        }
    }
}

/// The Python hooks' directory on `PYTHONPATH` (None, said on stderr, when it cannot be written).
fn python_hooks(cmd: &mut Command, args: &RunArgs, out_dir: &Path) -> Option<PythonDir> {
    match PythonDir::create(out_dir, &hostname(), !args.no_python_hooks) {
        Ok(dir) => {
            cmd.env("PYTHONPATH", dir.pythonpath(std::env::var_os("PYTHONPATH")));
            Some(dir)
        }
        Err(e) => {
            eprintln!(
                "gputrace: could not write the Python hooks to {}: {e}; Python jobs run without step marks",
                out_dir.display()
            );
            None
        }
    }
}

/// What the agent's other sources need: step sizes, GPU sampling, NVTX.
fn source_env(cmd: &mut Command, args: &RunArgs, agent_path: &Path) {
    cmd.env("GPUTRACE_AGENT_LIB", agent_path);
    if let Some(n) = args.tokens_per_step {
        cmd.env("GPUTRACE_TOKENS_PER_STEP", n.to_string());
    }
    if let Some(n) = args.samples_per_step {
        cmd.env("GPUTRACE_SAMPLES_PER_STEP", n.to_string());
    }
    if let Some(hz) = args.gpu_sample_hz {
        cmd.env("GPUTRACE_GPU_SAMPLE_HZ", hz.to_string());
    }
    if args.gpu_metrics {
        cmd.env("GPUTRACE_GPU_METRICS", "1");
    }
    if let Some(hz) = args.gpu_metrics_hz {
        cmd.env("GPUTRACE_GPU_METRICS_HZ", hz.to_string());
    }
    if args.no_nvtx {
        cmd.env("GPUTRACE_NVTX", "0");
    } else {
        match std::env::var_os("NVTX_INJECTION64_PATH").filter(|v| !v.is_empty()) {
            // NVTX loads one injection library: the user's choice wins.
            Some(theirs) if Path::new(&theirs) != agent_path => eprintln!(
                "gputrace: keeping NVTX_INJECTION64_PATH={} (NVTX loads one tool); NVTX markers will not be recorded",
                theirs.to_string_lossy()
            ),
            _ => {
                cmd.env("NVTX_INJECTION64_PATH", agent_path);
            }
        }
    }
}

/// The flight recorder's settings.
fn flight_env(cmd: &mut Command, args: &RunArgs) {
    if let Some(window) = args.flight_recorder {
        cmd.env("GPUTRACE_FLIGHT_MS", window.as_millis().max(1).to_string());
        cmd.env("GPUTRACE_FLIGHT_CAP_MB", args.flight_cap_mb.unwrap_or(256).to_string());
        match args.flight_hang {
            Some(h) => cmd.env("GPUTRACE_FLIGHT_HANG_MS", h.as_millis().max(1).to_string()),
            None => cmd.env_remove("GPUTRACE_FLIGHT_HANG_MS"),
        };
        match args.flight_slow_step {
            Some(f) => cmd.env("GPUTRACE_FLIGHT_SLOW_STEP", f.to_string()),
            None => cmd.env_remove("GPUTRACE_FLIGHT_SLOW_STEP"),
        };
    }
}

/// Wait for the command, through interrupted waits.
fn wait(child: &mut std::process::Child, shown: String) -> Result<std::process::ExitStatus, CliError> {
    loop {
        match child.wait() {
            Ok(s) => return Ok(s),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(source) => return Err(CliError::Spawn { command: shown, source }),
        }
    }
}

/// After the command: the flight recorder's and host samples' files, the summary;
/// returns the exit code to pass on.
fn finish(
    args: &RunArgs,
    out_dir: &Path,
    started: SystemTime,
    status: &std::process::ExitStatus,
    child_id: u32,
    host: Option<gputrace_host::Sampler>,
    record: &mut RunRecord,
) -> Result<i32, CliError> {
    let code = match (status.code(), std::os::unix::process::ExitStatusExt::signal(status)) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        _ => 1,
    };
    let end = super::flight::end_trigger(status);
    if args.flight_recorder.is_some() {
        super::flight::finish(out_dir, started, end.as_deref());
    }
    if let Some(host) = host {
        crate::host::finish(
            host,
            out_dir,
            started,
            child_id,
            &args.command,
            &hostname(),
            args.flight_recorder.is_some(),
        );
        if let Some(h) = record.host_samples.as_mut() {
            h.written = true;
            write_record(out_dir, record);
        }
    }
    let flight = args.flight_recorder.map(|_| end.as_deref());
    summarize(out_dir, started, flight).map_err(CliError::Output)?;
    Ok(code)
}

/// The live metrics' settings, if `--metrics` or `--metrics-textfile` asks for them.
fn live_options(args: &RunArgs) -> Result<Option<crate::live::LiveOptions>, CliError> {
    if args.metrics.is_none() && args.metrics_textfile.is_none() {
        return Ok(None);
    }
    let listen = match args.metrics {
        Some(mut addr) => {
            if addr.port() != 0 {
                let offset = crate::live::local_rank_offset(|k| std::env::var(k).ok());
                let port = addr.port().checked_add(offset).ok_or_else(|| CliError::BadArgument {
                    flag: "--metrics",
                    what: format!("port {} + local rank {offset} is above 65535", addr.port()),
                })?;
                addr.set_port(port);
            }
            Some(addr)
        }
        None => None,
    };
    if let Some(dir) = &args.metrics_textfile {
        crate::out_dir::create(dir)?;
    }
    Ok(Some(crate::live::LiveOptions {
        listen,
        textfile_dir: args.metrics_textfile.clone(),
        interval: std::time::Duration::from_secs_f64(args.metrics_interval),
        job: args
            .metrics_job
            .clone()
            .or_else(|| std::env::var("SLURM_JOB_ID").ok().filter(|v| !v.is_empty())),
        classifier: super::ClassifyArgs::default().classifier()?,
    }))
}

/// What this run knows of how the command ended: with `status` `None`,
/// the record of a command still running (no end, no exit status).
fn run_record(command: &[OsString], started: SystemTime, status: Option<&std::process::ExitStatus>) -> RunRecord {
    let ns = |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    RunRecord {
        format: RUN_RECORD_FORMAT,
        host: hostname(),
        pid: std::process::id(),
        command: command.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
        start_realtime_ns: ns(started),
        end_realtime_ns: status.map_or(0, |_| ns(SystemTime::now()).max(1)),
        exit_code: status.and_then(|s| s.code()),
        signal: status.and_then(std::os::unix::process::ExitStatusExt::signal),
        run_id: None,
        host_samples: None,
    }
}

/// [`write_run_record`], a failure being one `gputrace:` line for the whole
/// run (the record is written up to four times: at the start, when sampling
/// starts, at the end, when the samples are written).
fn write_record(dir: &Path, record: &RunRecord) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if let Err(e) = write_run_record(dir, record) {
        if !SAID.swap(true, Ordering::Relaxed) {
            eprintln!("gputrace: could not write the run record to {}: {e}", dir.display());
        }
    }
}

/// Write the record beside the traces (temporary name, then rename: a
/// reader never sees half a record; neither name is written through a link).
fn write_run_record(dir: &Path, record: &RunRecord) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(record).map_err(std::io::Error::other)?;
    OutDir::open(dir)?.write_replacing(&RunRecord::file_name(&record.host, record.pid), &bytes)
}

pub(crate) fn hostname() -> String {
    let mut buf = [0u8; 256];
    // Safety: valid buffer and length; one byte is left for the NUL.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len() - 1) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Create and remove a new file in `dir`: a name already taken (a link
/// planted there included) is passed over, never written through.
fn check_writable(dir: &Path) -> Result<(), CliError> {
    let out = OutDir::open(dir).map_err(CliError::io(dir))?;
    let mut last = None;
    for n in 0..16 {
        let probe = format!(".gputrace-write-test-{}-{n}", std::process::id());
        match out.create_new(&probe) {
            Ok(_) => {
                let _ = out.remove(&probe);
                return Ok(());
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(CliError::io(dir)(e)),
        }
    }
    Err(CliError::io(dir)(last.unwrap_or_else(|| std::io::ErrorKind::AlreadyExists.into())))
}

/// Print where the traces are, one line per file written by this run.
/// `flight`: with the flight recorder, the trigger the command's end was
/// (`None`: it exited 0).
fn summarize(dir: &Path, since: SystemTime, flight: Option<Option<&str>>) -> std::io::Result<()> {
    let mut links = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == gputrace_format::FILE_EXTENSION))
        .filter(|e| {
            if e.file_type().is_ok_and(|t| t.is_symlink()) {
                links.push(e.file_name());
                return false;
            }
            e.metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t >= since - std::time::Duration::from_secs(1))
        })
        .map(|e| e.path())
        .collect();
    files.sort();
    let mut err = std::io::stderr().lock();
    if !links.is_empty() {
        links.sort();
        writeln!(
            err,
            "gputrace: {} symbolic link(s) named like traces in {} (first: {}) were not read: gputrace neither writes nor reads through links there",
            links.len(),
            dir.display(),
            links[0].to_string_lossy()
        )?;
    }
    match (files.is_empty(), flight) {
        (true, Some(None)) => {
            writeln!(
                err,
                "gputrace: flight recorder: the command exited 0 and nothing triggered a snapshot (or no process was traced), so no trace was written to {}",
                dir.display()
            )?;
            return Ok(());
        }
        (true, Some(Some(end))) => {
            writeln!(
                err,
                "gputrace: flight recorder: {end}, but no process was traced (no flight recorder ring in {}: the command used no CUDA and no NVTX, or capture was off: see the gputrace: lines above), so there was nothing to write",
                dir.display()
            )?;
            return Ok(());
        }
        _ => {}
    }
    if files.is_empty() {
        writeln!(
            err,
            "gputrace: no trace was written to {} (the command used no CUDA and no NVTX, or capture was off: see the gputrace: lines above)",
            dir.display()
        )?;
        return Ok(());
    }
    writeln!(err, "gputrace: {} trace file(s) in {}/", files.len(), dir.display())?;
    for f in &files {
        let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        match TraceFile::open(f) {
            Ok(t) if t.header().producer == gputrace_format::Producer::Launcher => writeln!(
                err,
                "  {name}: {} samples of the server's own metrics (serving.*; gputrace report shows them)",
                thousands(t.event_total())
            )?,
            Ok(t) => {
                let counts = t.event_counts();
                let k = |kind| counts.get(&kind).copied().unwrap_or(0);
                let lost: u64 = t.trailer().map_or(0, |tr| tr.losses.values().sum());
                let state = match (t.trailer(), t.damage()) {
                    (Some(_), None) => String::new(),
                    (None, None) => ", NOT FINISHED (process killed?)".into(),
                    (_, Some(d)) => format!(", DAMAGED at byte {}", d.offset),
                };
                let losses = if lost > 0 {
                    format!(", {} RECORDS LOST", thousands(lost))
                } else {
                    String::from(", no losses")
                };
                let nccl = match k(EventKind::Collective) {
                    0 => String::new(),
                    n => {
                        let linked = t
                            .trailer()
                            .and_then(|tr| tr.extra.get("nccl.linked"))
                            .map(|v| format!(", {v} linked to kernels"))
                            .unwrap_or_default();
                        format!(", {} NCCL collectives{linked}", thousands(n))
                    }
                };
                writeln!(
                    err,
                    "  {name}: {} events ({} kernels, {} copies, {} API calls, {} markers{nccl}){losses}{state}",
                    thousands(t.event_total()),
                    thousands(k(EventKind::Kernel)),
                    thousands(k(EventKind::Memcpy) + k(EventKind::Memset)),
                    thousands(k(EventKind::Api)),
                    thousands(k(EventKind::Marker)),
                )?;
            }
            Err(e) => writeln!(err, "  {name}: unreadable: {e}")?,
        }
    }
    writeln!(err, "Next: gputrace info {}/", dir.display())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn duty_takes_units_and_refuses_nonsense() {
        let d = |on_ms, period_ms| Ok(Duty { on_ms, period_ms });
        assert_eq!(parse_duty("2s/60s"), d(2000, 60_000));
        assert_eq!(parse_duty("500ms/1m"), d(500, 60_000));
        assert_eq!(parse_duty(" 1s / 2s "), d(1000, 2000));
        for bad in [
            "2s",
            "2/60",
            "2s/2s",
            "3s/2s",
            "0s/1s",
            "x/1s",
            "1h/2h",
            "-1s/2s",
            "99999999999999999999m/1s",
        ] {
            assert!(parse_duty(bad).is_err(), "{bad}");
        }
    }
}
