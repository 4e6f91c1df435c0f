//! Helpers shared by the tests that run the agent against the C doubles of
//! libcuda and libcupti (`tests/doubles`). Each test file that needs them
//! declares `mod common;`; not every file uses every helper.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub mod chromium;
pub mod prometheus;
pub mod skip;
pub use skip::skip;

/// The shared traces are absent: skip, saying so; under `CI=true` fail, so a
/// CI without them cannot pass these tests vacuously.
pub fn shared_traces_absent(what: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but {what}: the real traces must be present"
    );
    skip(what);
}

/// The agent library next to the `gputrace` binary under test.
pub fn agent_lib() -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_gputrace")).with_file_name("libgputrace_agent.so");
    assert!(
        p.exists(),
        "{} is missing: build the workspace first (`cargo build --workspace && cargo test --workspace`)",
        p.display()
    );
    p
}

/// The doubles, built once per test binary.
pub fn doubles() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("gputrace-doubles-{}", std::process::id()));
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/doubles/build.sh");
        let st = Command::new("sh").arg(&script).arg(&dir).status().expect("sh");
        assert!(st.success(), "building the test doubles failed");
        dir
    })
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// What a run of `testprog` under `gputrace run` left.
pub struct DoublesRun {
    pub out: Output,
    /// Holds `traces/`, the scenario and the fake CUPTI's report.
    pub dir: tempfile::TempDir,
    /// `$FAKE_CUPTI_REPORT` as key → value.
    pub report: BTreeMap<String, String>,
}

/// `gputrace run [FLAGS] -o DIR/traces -- testprog ARGS` with `scenario` for
/// the fake CUPTI of `cupti_major`, under a time limit (a hang fails the test
/// instead of blocking it). `env` is set and `unset` removed in the job's
/// environment (`RANK` is always removed).
pub fn run_testprog(cupti_major: u32, scenario: &str, flags: &[&str], args: &[&str], env: &[(&str, &str)], unset: &[&str]) -> DoublesRun {
    let dbl = doubles();
    let dir = tempfile::tempdir().unwrap();
    let scen = dir.path().join("scenario");
    std::fs::write(&scen, scenario).unwrap();
    let report = dir.path().join("report");
    let mut c = Command::new(env!("CARGO_BIN_EXE_gputrace"));
    c.arg("run")
        .args(flags)
        .arg("-o")
        .arg(dir.path().join("traces"))
        .arg("--")
        .arg(dbl.join("testprog"))
        .args(args);
    c.env("FAKE_CUPTI_SCENARIO", &scen)
        .env("FAKE_CUPTI_REPORT", &report)
        .env("GPUTRACE_CUPTI", dbl.join(format!("cupti{cupti_major}/libcupti.so.{cupti_major}")))
        .env("GPUTRACE_AGENT", agent_lib())
        .env_remove("RANK")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for k in unset {
        c.env_remove(k);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("gputrace run hung (scenario:\n{scenario})");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let report = std::fs::read_to_string(&report)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(' ').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect();
    DoublesRun { out, dir, report }
}

/// Run the `gputrace` binary under test (without the caller's `GPUTRACE_CLASSIFY`).
pub fn gputrace(args: &[&str]) -> Output {
    gputrace_env(args, &[])
}

/// [`gputrace`] with extra environment variables.
pub fn gputrace_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(args)
        .env_remove("GPUTRACE_CLASSIFY")
        .envs(env.iter().copied())
        .output()
        .expect("run gputrace")
}

/// `gputrace demo` of a small synthetic job into `dir`.
pub fn demo(dir: &Path, ranks: u32, steps: u32, layers: u32) {
    let (r, s, l) = (ranks.to_string(), steps.to_string(), layers.to_string());
    let out = gputrace(&["demo", "-o", dir.to_str().unwrap(), "--ranks", &r, "--steps", &s, "--layers", &l]);
    assert!(out.status.success(), "demo failed: {}", text(&out.stderr));
}

/// The agent's `gputrace:` lines in a process's standard error.
pub fn gputrace_lines(stderr: &[u8]) -> Vec<String> {
    text(stderr)
        .lines()
        .filter(|l| l.starts_with("gputrace:"))
        .map(str::to_string)
        .collect()
}

/// The trace files in `dir`, sorted (none if it does not exist).
pub fn trace_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "gtrace"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// A trace's loss records: source, count and detail.
pub fn losses(t: &gputrace_format::TraceFile) -> Vec<(gputrace_format::LossSource, u64, String)> {
    use gputrace_format::{Event, EventKind};
    t.events_of(&[EventKind::Loss])
        .filter_map(|e| match e.unwrap() {
            Event::Loss(l) => Some((l.source, l.count, t.name(l.detail).into_owned())),
            _ => None,
        })
        .collect()
}

/// An entry of the trace's trailer `extra` map, "" when absent (or no trailer).
pub fn extra<'a>(t: &'a gputrace_format::TraceFile, key: &str) -> &'a str {
    t.trailer().and_then(|tr| tr.extra.get(key)).map_or("", |s| s.as_str())
}

/// Whether `python3 -c 'import MODULE'` works; a skip otherwise (a failure under `CI=true`).
pub fn have_python_module(module: &str) -> bool {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but `python3 -c 'import {module}'` fails"
        );
        skip(&format!("no {module} for python3"));
    }
    ok
}

/// `gputrace export --format parquet --job JOB` of `traces` into `pq` beside it; the directory.
pub fn parquet_export(traces: &Path, job: &str) -> PathBuf {
    let pq = traces.with_file_name("pq");
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["export", "--format", "parquet", "--job", job, "-o"])
        .arg(&pq)
        .arg(traces)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    pq
}

/// What a Python script (`python3 -c script arg`) prints as JSON; its failure fails the test.
pub fn python_json(script: &str, arg: &Path) -> serde_json::Value {
    let q = Command::new("python3").args(["-c", script]).arg(arg).output().unwrap();
    assert!(q.status.success(), "python3: {}", text(&q.stderr));
    serde_json::from_slice(&q.stdout).unwrap()
}
