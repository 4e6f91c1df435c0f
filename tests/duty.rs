//! Duty-cycled capture (`gputrace run --duty`) end to end: the real
//! launcher, agent and child process against the CUPTI and libcuda doubles
//! (tests/doubles), checked record by record against what the fake CUPTI
//! says it delivered.
//!
//! The agent library must be built first (`cargo build --workspace`), as for
//! tests/agent.rs.

use gputrace_format::{CaptureWindow, Event, TraceFile};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

mod common;
use common::{agent_lib, doubles, gputrace_lines, text, DoublesRun};

/// Every 10 ms for about 1.5 s a kernel (20 µs), its launch (a runtime API
/// record) and a copy: spread over several windows of a 100ms/400ms cycle.
fn spread() -> String {
    "version 13.5\n".to_string() + &"kernels 1 20000 0 duty_kernel\napi 1\nmemcpy 1 4096 1\nsleep_ms 10\n".repeat(150)
}

/// CUPTI activity kinds of the records compared: kernel, runtime API, memcpy.
const KINDS: [u32; 3] = [10, 5, 1];

/// A record of the trace or of the fake CUPTI's log: (kind, corr, start, end).
type Rec = (u32, u32, u64, u64);

/// The fake CUPTI's per-record log (`$FAKE_CUPTI_REPORT.records`): every
/// record it handed to the agent, that is every record it wrote while its
/// kind was enabled.
fn delivered(run: &DoublesRun) -> Vec<Rec> {
    let text = std::fs::read_to_string(run.dir.path().join("report.records")).unwrap_or_default();
    let mut v: Vec<Rec> = text
        .lines()
        .map(|l| {
            let kv: BTreeMap<&str, u64> = l
                .split(' ')
                .filter_map(|t| t.split_once('='))
                .map(|(k, v)| (k, v.parse().unwrap_or(0)))
                .collect();
            let get = |k: &str| kv.get(k).copied().unwrap_or(0);
            (get("kind") as u32, get("corr") as u32, get("start"), get("end"))
        })
        .filter(|r| KINDS.contains(&r.0))
        .collect();
    v.sort();
    v
}

/// The trace's kernels, API calls and copies as CUPTI records.
fn records(t: &TraceFile) -> Vec<Rec> {
    let mut v: Vec<Rec> = t
        .events()
        .map(|e| e.unwrap())
        .filter_map(|e| match e {
            Event::Kernel(k) => Some((10, k.correlation.0, k.start.0, k.end.0)),
            Event::Api(a) => Some((5, a.correlation.0, a.start.0, a.end.0)),
            Event::Memcpy(m) => Some((1, m.correlation.0, m.start.0, m.end.0)),
            _ => None,
        })
        .collect();
    v.sort();
    v
}

fn kernels(t: &TraceFile) -> Vec<Rec> {
    records(t).into_iter().filter(|r| r.0 == 10).collect()
}

/// The agent's `gputrace:` lines (not the launcher's summary).
fn agent_lines(run: &DoublesRun) -> Vec<String> {
    gputrace_lines(&run.out.stderr)
        .into_iter()
        .filter(|l| !l.contains("trace file(s)"))
        .collect()
}

fn n(run: &DoublesRun, key: &str) -> u64 {
    run.report.get(key).and_then(|v| v.parse().ok()).unwrap_or(0)
}

fn only_trace(run: &DoublesRun) -> TraceFile {
    let files = common::trace_files(&run.dir.path().join("traces"));
    assert_eq!(files.len(), 1, "one trace: {files:?}; stderr: {}", text(&run.out.stderr));
    TraceFile::open(&files[0]).unwrap()
}

/// The window holding `[start, end]`. A kernel record is written only after
/// its end has passed, while its kind is enabled, so its end lies in the
/// window (which closes after the kinds are turned off); it may have
/// started up to its duration before the window opened (as with CUPTI, which
/// records a kernel that completes while activity is on). Its end may also
/// pass the window's by a little: the fake's worker checks that the kind is
/// enabled, then stamps the record, and on a loaded machine the agent can turn
/// the kind off and read the clock in between (as a kernel in flight at the
/// disable completes after it on a GPU); in the same way a record stamped
/// just before the agent read the clock at the enable can arrive in the window.
/// The report clips every event to the windows, so neither counts untraced time.
fn window_of(windows: &[CaptureWindow], start: u64, end: u64) -> Option<usize> {
    let slack = 1_000_000;
    windows
        .iter()
        .position(|w| end <= w.end.0 + slack && end + slack >= w.start.0 && start + slack >= w.start.0)
}

#[test]
fn only_records_made_while_capture_is_on_are_traced_and_windows_are_recorded() {
    let run = common::run_testprog(
        13,
        &spread(),
        &["--duty", "100ms/400ms", "--gpu-sample-hz", "0"],
        &["--ms", "20000", "exit", "3"],
        &[],
        &[],
    );
    assert_eq!(
        run.out.status.code(),
        Some(3),
        "exit code passes through: {}",
        text(&run.out.stderr)
    );
    assert!(agent_lines(&run).is_empty(), "{:?}", agent_lines(&run));
    let t = only_trace(&run);
    assert!(t.trailer().is_some() && t.damage().is_none());
    assert_eq!(t.header().extra.get("capture.duty").map(String::as_str), Some("100ms/400ms"));

    // Event by event: the trace holds exactly what the fake CUPTI delivered ...
    let want = delivered(&run);
    let all = records(&t);
    assert_eq!(all, want, "trace equals delivered records");
    // ... which is not everything the scenario played: the rest was made while off.
    for kind in KINDS {
        let traced = all.iter().filter(|r| r.0 == kind).count() as u64;
        let skipped = n(&run, &format!("skipped_disabled.{kind}"));
        assert!(
            skipped > 0,
            "kind {kind}: records were skipped while capture was off: {:?}",
            run.report
        );
        assert_eq!(traced + skipped, 150, "kind {kind}: every record was either traced or skipped");
    }
    let skipped = n(&run, "skipped_disabled.10");
    let got = kernels(&t);

    // The windows: several, in order, disjoint, each shorter than a period.
    let w = t.capture_windows();
    assert!(w.len() >= 3, "1.5 s of work spans several 400 ms periods: {w:?}");
    for pair in w.windows(2) {
        assert!(pair[0].end < pair[1].start, "disjoint: {w:?}");
        let gap = pair[1].start.0 - pair[0].end.0;
        assert!(gap >= 100_000_000, "capture was off between windows for most of the period: {w:?}");
    }
    assert!(w.iter().all(|x| x.end.0 - x.start.0 < 400_000_000), "{w:?}");
    // Every traced kernel lies in a window, and the windows that saw work
    // are more than one (capture came back on).
    let mut used = vec![0u32; w.len()];
    for &(_, corr, start, end) in &all {
        let i = window_of(w, start, end).unwrap_or_else(|| panic!("record {corr} [{start}, {end}] outside every window {w:?}"));
        used[i] += 1;
    }
    eprintln!("windows {w:?}, records per window {used:?}, kernels skipped {skipped}");
    assert!(used.iter().filter(|&&c| c > 0).count() >= 2, "{used:?}");

    // The report measures the windows only and says so.
    let path = t.path().display().to_string();
    let out = common::gputrace(&["report", "--json", &path]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rank = &doc["ranks"][0];
    assert_eq!(rank["duty_cycle"]["windows"], w.len());
    assert_eq!(rank["duty_cycle"]["schedule"], "100ms/400ms");
    let traced: u64 = w.iter().map(|x| x.end.0 - x.start.0).sum();
    assert_eq!(rank["duty_cycle"]["traced_ns"], traced);
    let dev = &rank["devices"][0];
    let span = dev["span_ns"].as_u64().unwrap();
    assert!(span <= traced, "span {span} counts traced time only ({traced})");
    let ns = |k: &str| dev[k].as_u64().unwrap();
    let (compute, idle) = (ns("compute_ns"), ns("idle_ns"));
    assert_eq!(
        compute + ns("exposed_communication_ns") + ns("exposed_transfer_ns") + idle,
        span,
        "the four-way split tiles the traced span"
    );
    assert!(idle < traced, "the untraced time between windows is not idle");
    assert_eq!(compute, got.iter().map(|k| k.3 - k.2.max(window_start(w, k.3))).sum::<u64>());
    let out = common::gputrace(&["report", &path]);
    assert!(
        text(&out.stdout).contains("duty-cycled capture (100ms/400ms)"),
        "{}",
        text(&out.stdout)
    );
    let out = common::gputrace(&["info", &path]);
    let want = format!("capture       duty-cycled (100ms/400ms): {} window(s)", w.len());
    assert!(text(&out.stdout).contains(&want), "{}", text(&out.stdout));
}

/// Start of the window a kernel ending at `end` ran in.
fn window_start(windows: &[CaptureWindow], end: u64) -> u64 {
    windows.iter().find(|w| end >= w.start.0 && end <= w.end.0).map_or(0, |w| w.start.0)
}

/// Enabling an API kind turns CUPTI's per-call switches back on (the fake
/// does as CUPTI 12.6+): each window's start must switch the query calls off
/// again, or later windows record them (and the decoder has to drop them).
#[test]
fn query_calls_stay_switched_off_in_every_window() {
    let mut scenario = String::from("version 12.9\n");
    for _ in 0..30 {
        scenario.push_str("api_call 20 17\nkernels 1 20000 0\nsleep_ms 50\n");
    }
    let run = common::run_testprog(
        12,
        &scenario,
        &["--duty", "100ms/400ms", "--gpu-sample-hz", "0"],
        &["--ms", "20000", "exit", "0"],
        &[],
        &[],
    );
    assert_eq!(run.out.status.code(), Some(0), "{}", text(&run.out.stderr));
    let t = only_trace(&run);
    assert!(t.capture_windows().len() >= 3, "{:?}", t.capture_windows());
    assert_eq!(
        n(&run, "skipped_cbid.runtime"),
        600,
        "every query call switched off: {:?}",
        run.report
    );
    let filtered = t.trailer().unwrap().extra.get("agent.api_calls_filtered").cloned();
    assert_eq!(filtered.as_deref(), Some("0"), "none reached the decoder");
    // Kernels came from more than one window.
    let k = kernels(&t);
    let used: std::collections::BTreeSet<usize> = k.iter().filter_map(|r| window_of(t.capture_windows(), r.2, r.3)).collect();
    assert!(used.len() >= 2, "{used:?}");
}

#[test]
fn an_invalid_duty_is_one_line_and_a_full_capture() {
    let run = common::run_testprog(
        13,
        "version 13.5\nkernels 20 20000 1000000\n",
        &["--gpu-sample-hz", "0"],
        &["--ms", "20000", "exit", "0"],
        &[("GPUTRACE_DUTY", "2s/60s")],
        &[],
    );
    assert_eq!(run.out.status.code(), Some(0), "{}", text(&run.out.stderr));
    let lines = agent_lines(&run);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("GPUTRACE_DUTY") && lines[0].contains("whole time"), "{lines:?}");
    let t = only_trace(&run);
    assert!(t.capture_windows().is_empty());
    assert!(!t.header().extra.contains_key("capture.duty"));
    assert_eq!(kernels(&t).len(), 20);
    assert_eq!(n(&run, "skipped_disabled.10"), 0);
}

#[test]
fn the_command_line_refuses_a_window_not_shorter_than_its_period() {
    let out = common::gputrace(&["run", "--duty", "60s/60s", "--", "true"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("shorter than the period"), "{}", text(&out.stderr));
}

/// SIGKILL in the middle of a window: the closed windows are in the file,
/// and so is the one the kill interrupted (its opening record, ended by the
/// last records that reached the disk).
#[test]
fn a_killed_process_keeps_its_windows_and_the_one_it_died_in() {
    const PERIOD: u64 = 400_000_000;
    let dbl = doubles();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s"), "version 13.5\nkernels 1000000 20000 1000000\n").unwrap();
    let traces = dir.path().join("traces");
    let mut child = Command::new(dbl.join("testprog"))
        .args(["--ms", "60000", "exit", "0"])
        .env("CUDA_INJECTION64_PATH", agent_lib())
        .env("GPUTRACE_OUTPUT", &traces)
        .env("GPUTRACE_CUPTI", dbl.join("cupti13/libcupti.so.13"))
        .env("GPUTRACE_DUTY", "100/400")
        .env("GPUTRACE_FLUSH_MS", "20")
        .env("GPUTRACE_GPU_SAMPLE_HZ", "0")
        .env("FAKE_CUPTI_SCENARIO", dir.path().join("s"))
        .spawn()
        .unwrap();
    let file = |p: &PathBuf| TraceFile::open(p).ok();
    let deadline = Instant::now() + Duration::from_secs(60);
    // The first window's start, once the file has it.
    let first = loop {
        assert!(Instant::now() < deadline, "no window reached the disk within 60 s");
        std::thread::sleep(Duration::from_millis(10));
        let t = common::trace_files(&traces).first().and_then(file);
        if let Some(w) = t.as_ref().and_then(|t| t.capture_windows().first().copied()) {
            break w.start.0;
        }
    };
    // The fake CUPTI's clock is CLOCK_REALTIME: kill 50-70 ms into the third
    // window or a later one (two periodic flushes after it opened).
    let now = || SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
    let killed_at = loop {
        assert!(Instant::now() < deadline, "no kill point within 60 s");
        let t = now();
        let phase = t.saturating_sub(first) % PERIOD;
        if t >= first + 2 * PERIOD && (50_000_000..70_000_000).contains(&phase) {
            // On a loaded machine the window's first flush may be late: kill only once
            // a kernel of this window is on disk (still well inside the window).
            let opened = t - phase;
            let on_disk = common::trace_files(&traces)
                .first()
                .and_then(file)
                .is_some_and(|f| kernels(&f).iter().any(|r| r.3 > opened));
            if on_disk {
                break t;
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let t = common::trace_files(&traces).first().and_then(file).expect("a readable trace");
    assert!(t.trailer().is_none());
    let w = t.capture_windows();
    assert!(w.len() >= 3, "{w:?}");
    let last = w[w.len() - 1];
    assert!(
        last.start.0 <= killed_at && killed_at < last.start.0 + PERIOD / 4,
        "the window the kill interrupted is the last one: {w:?}, killed at {killed_at}"
    );
    // Every kernel on disk lies in a window, the interrupted one's too.
    let k = kernels(&t);
    for &(_, corr, start, end) in &k {
        assert!(window_of(w, start, end).is_some(), "kernel {corr} [{start}, {end}] outside {w:?}");
    }
    assert!(k.iter().any(|r| r.3 > last.start.0), "the interrupted window has kernels");
}
