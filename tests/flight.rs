//! The flight recorder (`gputrace run --flight-recorder`) with the real
//! launcher and agent in child processes, against the C doubles of libcuda
//! and libcupti (`tests/doubles`). Build the workspace first (`cargo build
//! --workspace`): the agent library must be next to the `gputrace` binary.

use gputrace_format::{TraceFile, Trailer};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{agent_lib, doubles, extra, text, trace_files};

/// Everything in the output directory besides the run records and traces
/// (flight files left behind).
fn leftovers(dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<String> = rd
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            let run_record = n.starts_with("gputrace-run.") && n.ends_with(".json");
            !(n.ends_with(".gtrace") || run_record)
        })
        .collect();
    v.sort();
    v
}

fn trailer(t: &TraceFile) -> &Trailer {
    t.trailer().expect("a reconstructed trace has a trailer")
}

fn one_trace(dir: &Path, stderr: &[u8]) -> TraceFile {
    let files = trace_files(dir);
    assert_eq!(files.len(), 1, "one trace expected: {files:?}; stderr: {}", text(stderr));
    TraceFile::open(&files[0]).unwrap()
}

#[test]
fn a_job_that_exits_0_leaves_no_trace_and_no_flight_files() {
    let run = common::run_testprog(
        13,
        "kernels 20000 2000 2000\n",
        &["--flight-recorder", "60s", "--flush-ms", "50"],
        &["--ms", "300", "exit", "0"],
        &[],
        &[],
    );
    let traces = run.dir.path().join("traces");
    assert_eq!(run.out.status.code(), Some(0), "{}", text(&run.out.stderr));
    assert!(trace_files(&traces).is_empty(), "{:?}", trace_files(&traces));
    assert!(leftovers(&traces).is_empty(), "{:?}", leftovers(&traces));
    assert!(
        text(&run.out.stderr).contains("nothing triggered a snapshot"),
        "{}",
        text(&run.out.stderr)
    );
}

#[test]
fn a_job_that_fails_or_dies_leaves_a_trace_from_its_ring() {
    let scenario = "kernels 200000 2000 2000\n";
    for (args, code, trigger) in [
        (&["--ms", "600", "exit", "3"][..], 3, "exited with code 3"),
        (&["--ms", "600", "os_exit", "4"][..], 4, "exited with code 4"),
        (&["--ms", "600", "sigterm-self"][..], 143, "SIGTERM"),
        (&["--ms", "600", "abort"][..], 134, "SIGABRT"),
    ] {
        let run = common::run_testprog(13, scenario, &["--flight-recorder", "60s", "--flush-ms", "50"], args, &[], &[]);
        assert_eq!(run.out.status.code(), Some(code), "{args:?}: {}", text(&run.out.stderr));
        let traces = run.dir.path().join("traces");
        let t = one_trace(&traces, &run.out.stderr);
        assert!(t.damage().is_none(), "{args:?}");
        assert!(t.event_total() > 10, "{args:?}: {} events", t.event_total());
        assert!(extra(&t, "flight.trigger").contains(trigger), "{args:?}: {:?}", trailer(&t).extra);
        assert_eq!(extra(&t, "flight.window"), "60000 ms");
        assert_eq!(
            trailer(&t).events.values().sum::<u64>(),
            t.event_total(),
            "the trailer counts what is in the file"
        );
        assert!(leftovers(&traces).is_empty(), "{args:?}: {:?}", leftovers(&traces));
        let report = common::gputrace(&["report", t.path().to_str().unwrap()]);
        assert!(report.status.success(), "report: {}", text(&report.stderr));
    }
}

/// `gputrace run --flight-recorder ... -- testprog ARGS` in the background.
struct Live {
    child: Child,
    dir: tempfile::TempDir,
}

impl Live {
    fn start(scenario: &str, flags: &[&str], args: &[&str]) -> Live {
        let dbl = doubles();
        let dir = tempfile::tempdir().unwrap();
        let scen = dir.path().join("scenario");
        std::fs::write(&scen, scenario).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_gputrace"))
            .arg("run")
            .args(flags)
            .arg("-o")
            .arg(dir.path().join("traces"))
            .arg("--")
            .arg(dbl.join("testprog"))
            .args(args)
            .env("FAKE_CUPTI_SCENARIO", &scen)
            .env("FAKE_CUPTI_REPORT", dir.path().join("report"))
            .env("GPUTRACE_CUPTI", dbl.join("cupti13/libcupti.so.13"))
            .env("GPUTRACE_AGENT", agent_lib())
            .env_remove("RANK")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Live { child, dir }
    }

    fn traces(&self) -> PathBuf {
        self.dir.path().join("traces")
    }

    /// The traced process's ring, once it holds events chunks, and its pid.
    fn ring_with_events(&mut self) -> (PathBuf, i32) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            assert!(Instant::now() < deadline, "no ring with events within 60 s");
            assert!(self.child.try_wait().unwrap().is_none(), "the job ended early");
            let found = std::fs::read_dir(self.traces()).ok().and_then(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(".flight-ring")))
            });
            if let Some(ring) = found {
                let bytes = std::fs::read(&ring).unwrap_or_default();
                let write_pos = bytes.get(24..32).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap()));
                if write_pos > 0 {
                    let name = ring.file_name().unwrap().to_str().unwrap();
                    let stem = name.trim_start_matches('.').trim_end_matches(".flight-ring");
                    let pid = stem.rsplit('.').next().unwrap().trim_start_matches('p').parse().unwrap();
                    return (ring, pid);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait for a trace file to appear while the job still runs.
    fn trace_while_running(&mut self) -> TraceFile {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            assert!(Instant::now() < deadline, "no snapshot within 30 s");
            assert!(self.child.try_wait().unwrap().is_none(), "the job ended before the snapshot");
            if let Some(f) = trace_files(&self.traces()).first() {
                return TraceFile::open(f).unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Wait for the end (60 s at most); exit code and stderr.
    fn wait(mut self) -> (Option<i32>, String, tempfile::TempDir) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("gputrace run hung");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = self.child.wait_with_output().unwrap();
        (out.status.code(), text(&out.stderr), self.dir)
    }
}

fn kill(pid: i32, sig: libc::c_int) {
    // Safety: plain kill(2) of a process this test started.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0, "kill {pid} {sig}");
}

#[test]
fn sigkill_leaves_a_trace_from_the_mapped_ring() {
    let mut live = Live::start(
        "kernels 2000000 2000 2000\n",
        &["--flight-recorder", "60s", "--flush-ms", "50"],
        &["--ms", "60000", "exit", "0"],
    );
    let (_, pid) = live.ring_with_events();
    kill(pid, libc::SIGKILL);
    let (code, stderr, dir) = live.wait();
    assert_eq!(code, Some(137), "{stderr}");
    let traces = dir.path().join("traces");
    let t = one_trace(&traces, stderr.as_bytes());
    assert!(t.event_total() > 0, "{stderr}");
    assert!(extra(&t, "flight.trigger").contains("SIGKILL"), "{:?}", trailer(&t).extra);
    assert!(leftovers(&traces).is_empty(), "{:?}", leftovers(&traces));
}

#[test]
fn sigusr2_to_gputrace_run_snapshots_while_the_job_runs() {
    // About 4 s of kernels (4 µs apart), then the job exits 0.
    let mut live = Live::start(
        "kernels 1000000 2000 2000\n",
        &["--flight-recorder", "60s", "--flush-ms", "50"],
        &["--ms", "60000", "exit", "0"],
    );
    live.ring_with_events();
    kill(live.child.id() as i32, libc::SIGUSR2);
    let t = live.trace_while_running();
    assert!(t.event_total() > 0);
    assert_eq!(extra(&t, "flight.trigger"), "SIGUSR2 to gputrace run");
    let (code, stderr, dir) = live.wait();
    assert_eq!(code, Some(0), "the job was not signalled: {stderr}");
    let traces = dir.path().join("traces");
    assert_eq!(
        trace_files(&traces).len(),
        1,
        "the snapshot stays, nothing else is written: {stderr}"
    );
    assert!(leftovers(&traces).is_empty(), "{:?}", leftovers(&traces));
    assert!(stderr.contains("flight recorder snapshot (SIGUSR2 to gputrace run)"), "{stderr}");
}

#[test]
fn sigusr2_to_a_traced_process_without_a_handler_snapshots_and_it_runs_on() {
    // The job outlives the kernels by 15 s, so that a loaded machine's slow
    // snapshot still lands while it runs.
    let mut live = Live::start(
        "kernels 1000000 2000 2000\nsleep_ms 15000\n",
        &["--flight-recorder", "60s", "--flush-ms", "50"],
        &["--ms", "60000", "exit", "0"],
    );
    let (_, pid) = live.ring_with_events();
    kill(pid, libc::SIGUSR2);
    let t = live.trace_while_running();
    assert_eq!(extra(&t, "flight.trigger"), "SIGUSR2 to the process");
    let (code, stderr, _dir) = live.wait();
    assert_eq!(code, Some(0), "SIGUSR2 did not kill the job: {stderr}");
}

#[test]
fn a_job_without_gpu_progress_gets_one_hang_snapshot() {
    let run = common::run_testprog(
        13,
        "kernels 2000 2000 2000\nsleep_ms 1500\n",
        &["--flight-recorder", "60s", "--flush-ms", "50", "--flight-hang", "300ms"],
        &["--ms", "60000", "exit", "0"],
        &[],
        &[],
    );
    assert_eq!(run.out.status.code(), Some(0), "{}", text(&run.out.stderr));
    let traces = run.dir.path().join("traces");
    let t = one_trace(&traces, &run.out.stderr);
    assert_eq!(extra(&t, "flight.trigger"), "hang: no GPU activity for 300 ms");
    assert_eq!(t.event_total(), 2000);
    assert!(leftovers(&traces).is_empty(), "{:?}", leftovers(&traces));
}

#[test]
fn a_short_window_keeps_only_the_recent_events_and_counts_the_rest() {
    // 2 s of kernels, a 300 ms window, a chunk every 50 ms.
    let run = common::run_testprog(
        13,
        "kernels 500000 2000 2000\n",
        &["--flight-recorder", "300ms", "--flush-ms", "50", "--flight-cap-mb", "1"],
        &["--ms", "60000", "exit", "3"],
        &[],
        &[],
    );
    assert_eq!(run.out.status.code(), Some(3), "{}", text(&run.out.stderr));
    let t = one_trace(&run.dir.path().join("traces"), &run.out.stderr);
    let by_age: u64 = extra(&t, "flight.evicted_by_age").parse().unwrap();
    assert!(by_age > 5, "{:?}", trailer(&t).extra);
    assert!(t.event_total() < 400_000, "{} events kept of 500000", t.event_total());
    let events: Vec<gputrace_format::Event> = t.events().collect::<Result<_, _>>().unwrap();
    let first = events.iter().map(|e| e.start().0).min().unwrap();
    let last = events.iter().map(|e| e.start().0).max().unwrap();
    // The window plus a flush period or two of slack (chunks are kept whole).
    assert!(last - first < 1_000_000_000, "{} ms of events kept", (last - first) / 1_000_000);
}

#[test]
fn a_step_much_slower_than_the_median_gets_a_snapshot() {
    let dbl = doubles();
    let dir = tempfile::tempdir().unwrap();
    let scen = dir.path().join("scenario");
    std::fs::write(&scen, "version 13.5\nkernels 20 10000 1000\n").unwrap();
    // Steps 40 ms apart, one of 600 ms, then six more.
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args([
            "run",
            "--flight-recorder",
            "60s",
            "--flush-ms",
            "20",
            "--flight-slow-step",
            "4",
            "-o",
        ])
        .arg(dir.path().join("traces"))
        .arg("--")
        .arg(dbl.join("nvtxprog"))
        .args(["--cuda", "0", "--steps", "16", "40", "600", "0"])
        .env("GPUTRACE_AGENT", agent_lib())
        .env("GPUTRACE_CUPTI", dbl.join("cupti13/libcupti.so.13"))
        .env("LD_LIBRARY_PATH", dbl)
        .env("FAKE_CUPTI_SCENARIO", &scen)
        .env_remove("NVTX_INJECTION64_PATH")
        .env_remove("RANK")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let traces = dir.path().join("traces");
    let t = one_trace(&traces, &out.stderr);
    assert!(extra(&t, "flight.trigger").starts_with("slow step: 6"), "{:?}", trailer(&t).extra);
    assert!(leftovers(&traces).is_empty(), "{:?}", leftovers(&traces));
}

#[test]
fn a_trigger_in_the_last_flush_period_before_a_clean_exit_still_writes_its_snapshot() {
    // About 4 s of kernels, then exit 0; the agent polls its triggers
    // every 30 s, so only the check at exit can see these.
    for to_launcher in [false, true] {
        let mut live = Live::start(
            "kernels 1000000 2000 2000\n",
            &["--flight-recorder", "60s", "--flush-ms", "30000", "--flight-cap-mb", "4"],
            &["--ms", "60000", "exit", "0"],
        );
        let (_, pid) = live.ring_with_events();
        let launcher = live.child.id() as i32;
        kill(if to_launcher { launcher } else { pid }, libc::SIGUSR2);
        let (code, stderr, dir) = live.wait();
        assert_eq!(code, Some(0), "{stderr}");
        let traces = dir.path().join("traces");
        let t = one_trace(&traces, stderr.as_bytes());
        let want = if to_launcher {
            "SIGUSR2 to gputrace run"
        } else {
            "SIGUSR2 to the process"
        };
        assert_eq!(extra(&t, "flight.trigger"), want, "{stderr}");
        assert!(t.event_total() > 0);
        assert!(leftovers(&traces).is_empty(), "{:?}", leftovers(&traces));
    }
}

#[test]
fn a_ring_left_by_a_killed_gputrace_run_becomes_a_trace_at_the_next_run() {
    let mut live = Live::start(
        "kernels 2000000 2000 2000\n",
        &["--flight-recorder", "60s", "--flush-ms", "50"],
        &["--ms", "60000", "exit", "0"],
    );
    let (ring, pid) = live.ring_with_events();
    // The launcher dies first, then its job: nobody turns the ring into a trace.
    kill(live.child.id() as i32, libc::SIGKILL);
    let _ = live.child.wait();
    kill(pid, libc::SIGKILL);
    let traces = live.traces();
    let deadline = Instant::now() + Duration::from_secs(10);
    // Safety: kill with signal 0 only asks whether `pid` exists.
    while unsafe { libc::kill(pid, 0) } == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(ring.exists() && trace_files(&traces).is_empty());
    // The next run recovers rings whose meta file is 10 s old (younger ones may be a writer's).
    let meta = traces.join(ring.file_name().unwrap().to_str().unwrap().replace(".flight-ring", ".flight-meta"));
    let f = std::fs::File::options().write(true).open(&meta).unwrap();
    f.set_modified(std::time::SystemTime::now() - Duration::from_secs(60)).unwrap();
    let agent = agent_lib();
    let next = common::gputrace_env(
        &["run", "-o", traces.to_str().unwrap(), "--", "true"],
        &[("GPUTRACE_AGENT", agent.to_str().unwrap())],
    );
    let stderr = text(&next.stderr);
    assert!(stderr.contains("recovered it as"), "{stderr}");
    let t = one_trace(&traces, &next.stderr);
    assert!(t.event_total() > 0);
    assert!(extra(&t, "flight.trigger").starts_with("recovered"), "{:?}", trailer(&t).extra);
    // The killed launcher's Python hooks directory stays (its job may
    // still start Python processes that import from it); no flight file does.
    let flight_files: Vec<String> = leftovers(&traces).into_iter().filter(|n| n.contains("flight")).collect();
    assert!(flight_files.is_empty(), "{flight_files:?}");
}
