//! The capture agent in real child processes, without a GPU.
//!
//! The agent library must be built first: `cargo build --workspace` (the
//! README's test command does). Tests that need the real libcupti from the
//! PyPI wheels (`scripts/fetch-cupti-wheels.sh`) skip, saying so, when it
//! is absent.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
use common::{agent_lib, doubles, text};

/// Compile a C file from tests/support into `dir`.
fn cc(dir: &Path, src: &str, out: &str, shared: Option<&str>) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support").join(src);
    let out = dir.join(out);
    let mut c = Command::new("gcc");
    c.arg("-O1").arg("-Wall").arg("-o").arg(&out).arg(&src);
    if let Some(soname) = shared {
        c.args(["-shared", "-fPIC", &format!("-Wl,-soname,{soname}")]);
    } else {
        c.arg("-ldl");
    }
    let st = c.status().expect("gcc is needed for the agent tests");
    assert!(st.success(), "compiling {}", src.display());
    out
}

fn gputrace_lines(o: &Output) -> Vec<String> {
    common::gputrace_lines(&o.stderr)
}

fn inject(dir: &Path, preload: Option<&Path>, cupti: Option<&Path>) -> Output {
    let prog = cc(dir, "inject.c", "inject", None);
    let mut c = Command::new(prog);
    c.arg(agent_lib());
    if let Some(p) = preload {
        c.arg(p);
    }
    c.env("GPUTRACE_OUTPUT", dir.join("traces"));
    match cupti {
        Some(p) => c.env("GPUTRACE_CUPTI", p),
        None => c.env_remove("GPUTRACE_CUPTI"),
    };
    c.output().unwrap()
}

#[test]
fn without_libcuda_libcupti_is_never_called() {
    let dir = tempfile::tempdir().unwrap();
    let aborting = cc(dir.path(), "abort_cupti.c", "libcupti.so.13", Some("libcupti.so.13"));
    let o = inject(dir.path(), None, Some(&aborting));
    assert_eq!(o.status.code(), Some(42), "the job's exit code survives: {}", text(&o.stderr));
    assert_eq!(text(&o.stdout).trim(), "InitializeInjection returned 1");
    let lines = gputrace_lines(&o);
    assert_eq!(lines.len(), 1, "exactly one gputrace line: {lines:?}");
    assert!(lines[0].contains("libcuda.so.1 is not loaded"), "{lines:?}");

    // The same library with a (stub) driver loaded *is* called: this is
    // what makes the check above meaningful.
    let stub = cc(dir.path(), "stub_cuda.c", "libcuda.so.1", Some("libcuda.so.1"));
    let o = inject(dir.path(), Some(&stub), Some(&aborting));
    assert_ne!(o.status.code(), Some(42), "the aborting libcupti was called");
}

#[test]
fn missing_libcupti_says_where_it_looked() {
    let dir = tempfile::tempdir().unwrap();
    let stub = cc(dir.path(), "stub_cuda.c", "libcuda.so.1", Some("libcuda.so.1"));
    let o = Command::new(cc(dir.path(), "inject.c", "inject", None))
        .arg(agent_lib())
        .arg(&stub)
        .env("GPUTRACE_CUPTI", dir.path().join("nope/libcupti.so"))
        .env("LD_LIBRARY_PATH", dir.path())
        .env_remove("CUDA_HOME")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(42));
    let lines = gputrace_lines(&o);
    // On a machine with a system libcupti this finds it and reports a CUPTI
    // error instead; either way: one line, job unchanged.
    assert_eq!(lines.len(), 1, "{lines:?}");
    if lines[0].contains("libcupti not found") {
        assert!(
            lines[0].contains("nope/libcupti.so") && lines[0].contains("GPUTRACE_CUPTI"),
            "{lines:?}"
        );
    }
}

fn wheel_cupti() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/cupti-wheels");
    let found: Vec<PathBuf> = ["libcupti.so.12", "libcupti.so.13"]
        .iter()
        .map(|n| dir.join(n))
        .filter(|p| p.exists())
        .collect();
    if found.is_empty() {
        common::skip(&format!(
            "no real libcupti in {} (run scripts/fetch-cupti-wheels.sh)",
            dir.display()
        ));
    }
    found
}

#[test]
fn real_libcupti_without_a_gpu_leaves_the_job_alone() {
    for cupti in wheel_cupti() {
        let dir = tempfile::tempdir().unwrap();
        let stub = cc(dir.path(), "stub_cuda.c", "libcuda.so.1", Some("libcuda.so.1"));
        let o = inject(dir.path(), Some(&stub), Some(&cupti));
        assert_eq!(o.status.code(), Some(42), "{}: {}", cupti.display(), text(&o.stderr));
        let lines = gputrace_lines(&o);
        assert_eq!(lines.len(), 1, "{}: {lines:?}", cupti.display());
        assert!(
            lines[0].contains("runs untraced") && lines[0].contains("no usable GPU"),
            "{}: {lines:?}",
            cupti.display()
        );
        assert!(!dir.path().join("traces").exists(), "no trace file for an untraced process");
    }
}

// ---------------------------------------------------------------------------
// End to end with the CUPTI and libcuda doubles (tests/doubles): the real
// `gputrace run`, the real agent, a real child process.

use gputrace_format::{Event, EventKind, LossSource, TraceFile};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

struct Run {
    out: Output,
    dir: tempfile::TempDir,
    report: BTreeMap<String, String>,
}

impl Run {
    fn traces(&self) -> Vec<PathBuf> {
        common::trace_files(&self.dir.path().join("traces"))
    }
    fn trace(&self) -> TraceFile {
        let t = self.traces();
        assert_eq!(t.len(), 1, "one trace expected: {t:?}; stderr: {}", text(&self.out.stderr));
        TraceFile::open(&t[0]).unwrap()
    }
    fn n(&self, key: &str) -> u64 {
        self.report.get(key).and_then(|v| v.parse().ok()).unwrap_or(0)
    }
    fn lines(&self) -> Vec<String> {
        gputrace_lines(&self.out)
    }
}

/// `gputrace run -o DIR/traces -- testprog ARGS` with a scenario, under a
/// time limit (a hang fails the test instead of blocking it).
fn run_scenario(cupti_major: u32, scenario: &str, env: &[(&str, &str)], args: &[&str]) -> Run {
    let common::DoublesRun { out, dir, report } = common::run_testprog(cupti_major, scenario, &[], args, env, &[]);
    Run { out, dir, report }
}

fn events(t: &TraceFile) -> Vec<Event> {
    t.events().collect::<Result<_, _>>().unwrap()
}

/// Per-record lines the double wrote: (kind, corr, start, end, bytes, name).
fn emitted_records(run: &Run) -> Vec<(u32, u32, u64, u64, u64, String)> {
    let path = run.dir.path().join("report.records");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    text.lines()
        .map(|l| {
            let (head, name) = l.split_once(" name=").unwrap_or((l, ""));
            let kv: BTreeMap<&str, u64> = head
                .split(' ')
                .filter_map(|t| t.split_once('='))
                .map(|(k, v)| (k, v.parse().unwrap_or(0)))
                .collect();
            let get = |k: &str| kv.get(k).copied().unwrap_or(0);
            (
                get("kind") as u32,
                get("corr") as u32,
                get("start"),
                get("end"),
                get("bytes"),
                name.to_string(),
            )
        })
        .collect()
}

const FULL: &str =
    "device\nkernels 40 20000 3000 void gemm<float, 128>(float const*, float*)\napi 40\nmemcpy 4 1048576 1\nmemcpy 2 4096 2\n\
                    memset 3 4096\nsync 2\np2p 2 65536\nnull_name 1\nunknown_kind 5\ndropped 7\noverhead 3\n";

#[test]
fn trace_matches_the_records_cupti_delivered_in_every_layout() {
    for (major, version) in [(12, "12.4"), (12, "12.9"), (13, "13.0"), (13, "13.3"), (13, "13.5")] {
        let run = run_scenario(major, &format!("version {version}\n{FULL}"), &[], &["--ms", "3000", "exit", "5"]);
        assert_eq!(
            run.out.status.code(),
            Some(5),
            "{version}: exit code passes through: {}",
            text(&run.out.stderr)
        );
        assert!(run.lines().iter().all(|l| !l.contains("untraced")), "{version}: {:?}", run.lines());
        let t = run.trace();
        assert!(t.trailer().is_some() && t.damage().is_none(), "{version}: complete file");
        let evs = events(&t);
        // Event by event against what the double delivered.
        let mut want: Vec<String> = Vec::new();
        for (kind, corr, start, end, bytes, name) in emitted_records(&run) {
            match kind {
                10 => want.push(format!(
                    "kernel {corr} {start} {end} {}",
                    if name == "(null)" || name.is_empty() {
                        "<unnamed kernel>".into()
                    } else {
                        name
                    }
                )),
                5 => want.push(format!("api {corr} {start} {end}")),
                1 | 22 => want.push(format!("memcpy {start} {end} {bytes}")),
                2 => want.push(format!("memset {start} {end} {bytes}")),
                38 => want.push(format!("sync {start} {end}")),
                _ => {}
            }
        }
        let mut got: Vec<String> = evs
            .iter()
            .filter_map(|e| match e {
                Event::Kernel(k) => Some(format!("kernel {} {} {} {}", k.correlation, k.start.0, k.end.0, t.name(k.name))),
                Event::Api(a) => Some(format!("api {} {} {}", a.correlation, a.start.0, a.end.0)),
                Event::Memcpy(m) => Some(format!("memcpy {} {} {}", m.start.0, m.end.0, m.bytes)),
                Event::Memset(m) => Some(format!("memset {} {} {}", m.start.0, m.end.0, m.bytes)),
                Event::Sync(s) => Some(format!("sync {} {}", s.start.0, s.end.0)),
                _ => None,
            })
            .collect();
        want.sort();
        got.sort();
        assert_eq!(want.len(), 40 + 1 + 40 + 6 + 2 + 3 + 2, "{version}: the double's record log");
        assert_eq!(got, want, "{version}: trace equals delivered records");
        // Losses: CUPTI's dropped count is a loss record.
        let dropped: u64 = evs
            .iter()
            .filter_map(|e| {
                if let Event::Loss(l) = e {
                    (l.source == LossSource::CUPTI_DROPPED).then_some(l.count)
                } else {
                    None
                }
            })
            .sum();
        assert_eq!(dropped, 7, "{version}");
        assert_eq!(
            t.trailer().unwrap().extra.get("agent.records_skipped").map(String::as_str),
            Some("5"),
            "{version}: unknown kinds skipped"
        );
        // CUPTI's own overhead records, summed by kind in the trailer.
        let flush = t.trailer().unwrap().extra.get("cupti.overhead.buffer_flush").cloned();
        assert!(
            flush.as_deref().is_some_and(|f| f.starts_with("3 records, ")),
            "{version}: {flush:?}"
        );
        // Header identity.
        let h = t.header();
        assert_eq!(h.devices.len(), 1, "{version}: {:?}", h.devices);
        assert!(h.devices[0].uuid.starts_with("GPU-"));
        assert_eq!(h.cuda.cupti, Some(run.n("api_version") as u32));
        assert!(h.command.iter().any(|a| a.ends_with("testprog")));
        // The run summary names the file.
        assert!(text(&run.out.stderr).contains("1 trace file(s)"), "{}", text(&run.out.stderr));
        assert_eq!(run.n("mixed_calls"), 0, "{version}: never mixes global and subscriber-scoped calls");
    }
}

#[test]
fn another_profiler_holding_cupti_leaves_the_job_untraced() {
    let run = run_scenario(13, "subscribe_error 39\nkernels 10\n", &[], &["--ms", "300", "exit", "3"]);
    assert_eq!(run.out.status.code(), Some(3));
    let lines = run.lines();
    assert!(lines.iter().any(|l| l.contains("already in use by another profiler")), "{lines:?}");
    assert!(run.traces().is_empty());
    assert_eq!(run.n("flush.calls"), 0, "nothing else was called");
}

#[test]
fn every_cupti_call_failing_in_turn_leaves_the_job_alone() {
    for f in [
        "cuptiGetVersion",
        "cuptiSubscribe",
        "cuptiActivityRegisterCallbacks",
        "cuptiActivityEnable",
        "cuptiActivityFlushAll",
        "cuptiActivityGetNextRecord",
        "cuptiActivityGetNumDroppedRecords",
        "cuptiGetTimestamp",
        "cuptiSetThreadIdType",
        "cuptiActivityEnableRuntimeApi",
        "cuptiActivityEnableDriverApi",
    ] {
        for code in [1, 999] {
            let run = run_scenario(
                13,
                &format!("fail {f} {code}\nkernels 20 1000 1000\napi 20\n"),
                &[("GPUTRACE_FLUSH_MS", "50")],
                &["--ms", "400", "exit", "9"],
            );
            assert_eq!(run.out.status.code(), Some(9), "{f} {code}: {}", text(&run.out.stderr));
            for t in run.traces() {
                // Whatever was written is readable.
                let t = TraceFile::open(&t).unwrap();
                events(&t);
            }
        }
    }
}

#[test]
fn exhausted_buffer_pool_is_counted_not_blocking() {
    let run = run_scenario(
        13,
        "burst 300000\n",
        &[("GPUTRACE_BUFFERS", "2"), ("GPUTRACE_BUFFER_KB", "64")],
        &["--ms", "5000", "exit", "0"],
    );
    assert_eq!(run.out.status.code(), Some(0));
    let t = run.trace();
    let evs = events(&t);
    let pool_losses: u64 = evs
        .iter()
        .filter_map(|e| {
            if let Event::Loss(l) = e {
                (l.source == LossSource::BUFFER_POOL_EXHAUSTED).then_some(l.count)
            } else {
                None
            }
        })
        .sum();
    let kept = evs.iter().filter(|e| e.kind() != EventKind::Loss).count() as u64;
    assert!(pool_losses > 0, "the pool ran dry and it was recorded");
    assert!(kept < run.n("delivered.total"), "some records went to the discard buffer");
    assert!(t.trailer().unwrap().losses.contains_key("buffer-pool-exhausted"));
}

#[test]
fn killed_and_abruptly_exiting_jobs_leave_readable_traces() {
    let slow = "kernels 200000 2000 2000\n";
    // os._exit: no atexit, but the periodic flush has written whole chunks.
    let run = run_scenario(13, slow, &[("GPUTRACE_FLUSH_MS", "50")], &["--ms", "600", "os_exit", "3"]);
    assert_eq!(run.out.status.code(), Some(3));
    let t = run.trace();
    assert!(t.trailer().is_none(), "no trailer after _exit");
    assert!(
        t.event_counts().get(&EventKind::Kernel).copied().unwrap_or(0) > 10,
        "periodic flushes reached the disk"
    );
    // SIGTERM with the default disposition: 128 + 15.
    let run = run_scenario(13, slow, &[("GPUTRACE_FLUSH_MS", "50")], &["--ms", "600", "sigterm-self"]);
    assert_eq!(run.out.status.code(), Some(143));
    assert!(run.trace().event_total() > 10);
    // abort(): 128 + 6.
    let run = run_scenario(13, slow, &[("GPUTRACE_FLUSH_MS", "50")], &["--ms", "600", "abort"]);
    assert_eq!(run.out.status.code(), Some(134));
    events(&run.trace());
}

#[test]
fn sigkill_mid_run_loses_at_most_the_last_flush_period() {
    let dbl = doubles();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s"), "kernels 1000000 2000 2000\n").unwrap();
    let mut child = Command::new(dbl.join("testprog"))
        .args(["--ms", "20000", "exit", "0"])
        .env("CUDA_INJECTION64_PATH", agent_lib())
        .env("GPUTRACE_OUTPUT", dir.path().join("traces"))
        .env("GPUTRACE_CUPTI", dbl.join("cupti13/libcupti.so.13"))
        .env("GPUTRACE_FLUSH_MS", "100")
        .env("FAKE_CUPTI_SCENARIO", dir.path().join("s"))
        .spawn()
        .unwrap();
    // Wait (under any machine load) until periodic flushes have put events
    // on disk, then SIGKILL mid-run.
    let traces = dir.path().join("traces");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = 0u64;
    while seen < 1000 {
        assert!(Instant::now() < deadline, "no events reached the disk within 60 s");
        std::thread::sleep(Duration::from_millis(100));
        let file = std::fs::read_dir(&traces)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .map(|e| e.path());
        seen = file.and_then(|f| TraceFile::open(f).ok()).map_or(0, |t| t.event_total());
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let files: Vec<PathBuf> = std::fs::read_dir(&traces).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1);
    let t = TraceFile::open(&files[0]).unwrap();
    assert!(t.trailer().is_none());
    let n = events(&t).len() as u64;
    // Everything flushed before the kill is still there.
    assert!(n >= seen, "{n} events survived, {seen} were on disk before the kill");
}

#[test]
fn fork_without_exec_and_exec_keep_the_parent_trace_intact() {
    // The double aborts a forked child that calls CUPTI (exit 97 here).
    let run = run_scenario(
        13,
        "kernels 50 1000 1000\nfork_child_calls abort\n",
        &[],
        &["--ms", "300", "fork-no-exec"],
    );
    assert_eq!(run.out.status.code(), Some(0), "{}", text(&run.out.stderr));
    let t = run.trace();
    assert!(t.trailer().is_some(), "the parent finished its file");
    assert_eq!(t.event_counts()[&EventKind::Kernel], 50);
    // exec of another program: the image is replaced, no atexit; the file
    // is readable up to the last flush (the scenario keeps the process
    // alive past a few flush periods first).
    let run = run_scenario(
        13,
        "kernels 50 1000 1000\nsleep_ms 300\n",
        &[("GPUTRACE_FLUSH_MS", "50")],
        &["--ms", "2000", "exec", "true"],
    );
    assert_eq!(run.out.status.code(), Some(0));
    let t = run.trace();
    assert!(t.trailer().is_none(), "exec skips atexit");
    assert_eq!(
        t.event_counts().get(&EventKind::Kernel).copied(),
        Some(50),
        "flushed before the exec"
    );
}

#[test]
fn unwritable_output_and_full_disk_turn_capture_off_not_the_job() {
    let dbl = doubles();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s"), "kernels 300000 1000 1000\napi 300000\n").unwrap();
    let run = |out: &Path| {
        Command::new(dbl.join("testprog"))
            .args(["--ms", "2000", "exit", "4"])
            .env("CUDA_INJECTION64_PATH", agent_lib())
            .env("GPUTRACE_OUTPUT", out)
            .env("GPUTRACE_CUPTI", dbl.join("cupti13/libcupti.so.13"))
            .env("GPUTRACE_FLUSH_MS", "50")
            // NVML as on a GPU machine (the fake), so that the one line is the writer's.
            .env("GPUTRACE_NVML", dbl.join("nvml/libnvidia-ml.so.1"))
            .env("FAKE_CUPTI_SCENARIO", dir.path().join("s"))
            .output()
            .unwrap()
    };
    let o = run(Path::new("/proc/gputrace-cannot-write-here"));
    assert_eq!(o.status.code(), Some(4));
    let lines = gputrace_lines(&o);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("cannot write the trace") && lines[0].contains("/proc/gputrace-cannot-write-here"),
        "{lines:?}"
    );

    // A small tmpfs fills up mid-run (needs root to mount; skipped
    // otherwise). Two free pages, and a scenario whose trace needs more:
    // thousands of distinct, hard-to-compress kernel names.
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        common::skip("the full-disk case: cannot mount a tmpfs here (not root?)");
        return;
    }
    std::fs::write(mnt.join("filler"), vec![0u8; 56 * 1024]).unwrap();
    let mut scenario = String::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..3000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        scenario += &format!("kernels 1 1000 500 kernel_{x:016x}_{:x}\n", x.rotate_left(23));
    }
    std::fs::write(dir.path().join("s"), scenario).unwrap();
    let o = run(&mnt);
    let _ = Command::new("umount").arg(&mnt).status();
    assert_eq!(o.status.code(), Some(4), "{}", text(&o.stderr));
    let lines = gputrace_lines(&o);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("failed") && lines[0].contains("capture stopped"), "{lines:?}");
}

#[test]
fn devices_come_from_cupti_records_when_the_driver_lists_none() {
    // The driver reports no devices; the DEVICE record CUPTI delivered
    // fills the header, and the buffers scanned for it are still decoded.
    let run = run_scenario(
        13,
        "cuda_device_count 0\ndevice\nkernels 25 1000 1000\napi 25\n",
        &[],
        &["--ms", "300", "exit", "0"],
    );
    assert_eq!(run.out.status.code(), Some(0), "{}", text(&run.out.stderr));
    let t = run.trace();
    assert_eq!(t.header().devices.len(), 1, "{:?}", t.header().devices);
    assert_eq!(t.header().devices[0].name, "Fake GPU");
    assert_eq!(t.event_counts().get(&EventKind::Kernel).copied(), Some(25));
    assert_eq!(t.event_counts().get(&EventKind::Api).copied(), Some(25));
}

#[test]
fn cupti_overhead_is_summed_and_reported() {
    let run = run_scenario(13, "kernels 20 1000 1000\napi 20\noverhead 4\n", &[], &["--ms", "300", "exit", "0"]);
    let t = run.trace();
    let flush = t
        .trailer()
        .unwrap()
        .extra
        .get("cupti.overhead.buffer_flush")
        .cloned()
        .unwrap_or_default();
    assert!(flush.starts_with("4 records, "), "{flush}");
    let out = common::gputrace(&["report", "--json", &t.path().display().to_string()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let o = &doc["ranks"][0]["profiler_overhead"]["buffer_flush"];
    assert_eq!(o["records"], 4, "{doc}");
    assert!(o["ns"].as_u64().unwrap() > 0);
    let out = common::gputrace(&["report", &t.path().display().to_string()]);
    let human = text(&out.stdout);
    assert!(human.contains("Profiler overhead") && human.contains("buffer flush"), "{human}");
}

#[test]
fn query_calls_are_switched_off_in_cupti_where_it_can() {
    // cudaGetDevice (runtime cbid 17) and cuCtxGetCurrent (driver 304):
    // PyTorch makes many times more of these than launches. From CUPTI 12.6
    // the agent asks CUPTI not to record them at all.
    let scenario = "kernels 10 1000 1000\napi 10\napi_call 500 17\napi_call 300 304 driver\n";
    let filter = |t: &TraceFile| t.header().extra.get("agent.api_filter").cloned().unwrap_or_default();
    let filtered = |t: &TraceFile| t.trailer().unwrap().extra.get("agent.api_calls_filtered").cloned();
    for version in ["12.6", "12.9"] {
        let run = run_scenario(12, &format!("version {version}\n{scenario}"), &[], &["--ms", "300", "exit", "0"]);
        assert_eq!(run.out.status.code(), Some(0), "{}", text(&run.out.stderr));
        assert_eq!(run.n("skipped_cbid.runtime"), 500, "{version}: {:?}", run.report);
        assert_eq!(run.n("skipped_cbid.driver"), 300);
        assert!(run.n("api_cbids_off.runtime") > 100 && run.n("api_cbids_off.driver") > 100);
        let t = run.trace();
        assert_eq!(t.event_counts().get(&EventKind::Api).copied(), Some(10), "the launches stay");
        assert!(filter(&t).starts_with("in CUPTI: "), "{}", filter(&t));
        assert_eq!(filtered(&t).as_deref(), Some("0"));
    }
    // A CUPTI older than our callback-id table refuses the newer ids (the
    // real 13.0 does): those are counted, the others still switched off.
    let run = run_scenario(
        13,
        &format!("version 13.0\napi_cbid_limit 400 600\n{scenario}"),
        &[],
        &["--ms", "300", "exit", "0"],
    );
    assert_eq!(run.n("skipped_cbid.runtime"), 500, "{:?}", run.report);
    assert_eq!(run.n("skipped_cbid.driver"), 300);
    let t = run.trace();
    assert!(
        filter(&t).starts_with("in CUPTI: ") && filter(&t).contains(" refused: "),
        "{}",
        filter(&t)
    );
    assert_eq!(filtered(&t).as_deref(), Some("0"));
    // Before 12.6 (no switch): recorded by CUPTI, dropped by the decoder.
    let run = run_scenario(12, &format!("version 12.4\n{scenario}"), &[], &["--ms", "300", "exit", "0"]);
    assert_eq!(run.n("skipped_cbid.runtime") + run.n("skipped_cbid.driver"), 0);
    let t = run.trace();
    assert_eq!(t.event_counts().get(&EventKind::Api).copied(), Some(10));
    assert!(filter(&t).starts_with("after capture"), "{}", filter(&t));
    assert_eq!(filtered(&t).as_deref(), Some("800"));
    // Subscriber-scoped (v2) mode: no global-scope call; from 13.4 the
    // allow-list goes with the enable, before that filtered after capture.
    for (version, in_cupti) in [("13.5", 800), ("13.3", 0)] {
        let run = run_scenario(
            13,
            &format!("version {version}\nother_subscriber multi\n{scenario}"),
            &[],
            &["--ms", "300", "exit", "0"],
        );
        assert_eq!(run.report.get("subscriber.mode").map(String::as_str), Some("v2"));
        assert_eq!(run.n("mixed_calls"), 0);
        assert_eq!(run.n("skipped_cbid.runtime") + run.n("skipped_cbid.driver"), in_cupti, "{version}");
        let after = (800 - in_cupti).to_string();
        assert_eq!(filtered(&run.trace()).as_deref(), Some(after.as_str()), "{version}");
    }
    // No API records asked for: no switch touched.
    let run = run_scenario(12, scenario, &[("GPUTRACE_API", "0")], &["--ms", "300", "exit", "0"]);
    assert_eq!(run.n("api_cbids_off.runtime") + run.n("api_cbids_off.driver"), 0);
    assert_eq!(run.trace().header().extra.get("agent.api_filter"), None);
}

#[test]
fn multi_subscriber_api_is_used_where_cupti_has_it() {
    // CUPTI 13.5 with another multi-subscriber tool (e.g. Nsight Systems)
    // in the process: gputrace subscribes alongside it through the v2 API and
    // never mixes in a global-scope call.
    let run = run_scenario(
        13,
        "version 13.5\nother_subscriber multi\nkernels 30 1000 1000\napi 30\ndropped 2\n",
        &[],
        &["--ms", "300", "exit", "0"],
    );
    assert_eq!(run.out.status.code(), Some(0), "{}", text(&run.out.stderr));
    assert_eq!(run.report.get("subscriber.mode").map(String::as_str), Some("v2"));
    assert_eq!(run.n("mixed_calls"), 0, "no v1 activity call after a v2 subscribe");
    assert_eq!(run.n("thread_id_type"), 1, "system thread ids requested through the v2 attribute");
    let t = run.trace();
    assert_eq!(
        t.header().extra.get("cupti.subscriber").map(String::as_str),
        Some("multi (cuptiSubscribe_v2)")
    );
    assert_eq!(t.event_counts().get(&EventKind::Kernel).copied(), Some(30));
    assert_eq!(
        t.trailer().unwrap().losses.get("cupti-dropped").copied(),
        Some(2),
        "dropped count read with the v2 call"
    );

    // A legacy (sole) subscriber already there: untraced, one line.
    let run = run_scenario(
        13,
        "version 13.5\nother_subscriber legacy\nkernels 10\n",
        &[],
        &["--ms", "300", "exit", "6"],
    );
    assert_eq!(run.out.status.code(), Some(6));
    assert!(run.lines().iter().any(|l| l.contains("already in use")), "{:?}", run.lines());
    assert!(run.traces().is_empty());

    // A driver without multi-subscriber support: back to the legacy API.
    let run = run_scenario(
        13,
        "version 13.5\nmulti_subscriber_unsupported\nkernels 10 1000 1000\n",
        &[],
        &["--ms", "300", "exit", "0"],
    );
    assert_eq!(run.report.get("subscriber.mode").map(String::as_str), Some("v1"));
    assert_eq!(run.n("mixed_calls"), 0);
    let t = run.trace();
    assert_eq!(
        t.header().extra.get("cupti.subscriber").map(String::as_str),
        Some("legacy (sole subscriber)")
    );
    assert_eq!(t.event_counts().get(&EventKind::Kernel).copied(), Some(10));

    // Before 13.3 the v2 activity calls are incomplete: legacy API.
    let run = run_scenario(13, "version 13.2\nkernels 10 1000 1000\n", &[], &["--ms", "300", "exit", "0"]);
    assert_eq!(run.report.get("subscriber.mode").map(String::as_str), Some("v1"));
    assert_eq!(run.trace().event_counts().get(&EventKind::Kernel).copied(), Some(10));
}

#[test]
fn buffers_held_before_the_file_opens_are_all_written_in_order() {
    // Many small buffers complete before the file exists (the header waits for CUPTI's
    // DEVICE record, which comes after them): once it opens, all of them are decoded,
    // and the kernels are stored in start order.
    let run = run_scenario(
        13,
        "cuda_device_count 0\nburst 4000\ndevice\n",
        &[("GPUTRACE_BUFFER_KB", "64"), ("GPUTRACE_BUFFERS", "64")],
        &["--ms", "300", "exit", "0"],
    );
    assert_eq!(run.out.status.code(), Some(0), "{}", text(&run.out.stderr));
    let t = run.trace();
    // The kernels as stored, chunk after chunk: in start order.
    let mut dec = t.decoder();
    let mut stored = Vec::new();
    for (i, _) in t.chunks().iter().enumerate().filter(|(_, c)| c.kind == EventKind::Kernel) {
        dec.decode_into(i, &mut stored).unwrap();
    }
    let starts: Vec<u64> = stored.iter().map(|e| e.start().0).collect();
    assert!(starts.len() > 1000, "{}", starts.len());
    let back = starts.windows(2).filter(|w| w[1] < w[0]).count();
    assert_eq!(back, 0, "{back} kernels stored before an earlier one");
}
