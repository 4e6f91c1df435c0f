//! The smaller defects of #43 item 7, through the real `gputrace` binary:
//! a closed pipe, `-o` naming something that is not a directory, the
//! flight recorder's last line, and a launcher that is killed.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{gputrace, text};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gputrace"));
    c.env_remove("GPUTRACE_CLASSIFY").env("GPUTRACE_AGENT", common::agent_lib());
    c
}

#[test]
fn a_closed_pipe_is_a_normal_end() {
    let dir = tempfile::tempdir().unwrap();
    common::demo(&dir.path().join("demo"), 2, 3, 2);
    // `gputrace export -o - | head -c 100`: megabytes into a pipe whose reader leaves.
    let mut child = bin()
        .args(["export", "-o", "-"])
        .arg(dir.path().join("demo"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 100];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("Broken pipe") && !err.contains("error"), "{err}");
}

#[test]
fn o_naming_a_file_or_a_dangling_link_says_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"").unwrap();
    let dangling = dir.path().join("dangling");
    std::os::unix::fs::symlink(dir.path().join("missing"), &dangling).unwrap();
    for (o, want) in [(&file, "is a file, not a directory"), (&dangling, "which does not exist")] {
        let out = gputrace(&["run", "-o", o.to_str().unwrap(), "--", "true"]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains(want) && !err.contains("os error 17"), "{err}");
        let out = gputrace(&["demo", "-o", o.to_str().unwrap()]);
        assert!(text(&out.stderr).contains(want), "{}", text(&out.stderr));
    }
}

#[test]
fn the_flight_recorder_says_how_a_job_that_traced_nothing_ended() {
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("t");
    let out = gputrace(&[
        "run",
        "--flight-recorder",
        "60s",
        "-o",
        o.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "exit 7",
    ]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{err}");
    assert!(err.contains("the job exited with code 7, but no process was traced"), "{err}");
    assert!(!err.contains("exited 0"), "{err}");
}

/// The run records in `dir` (none while it does not exist).
fn records(dir: &Path) -> Vec<gputrace_format::RunRecord> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| gputrace_format::RunRecord::is_record_name(&e.file_name().to_string_lossy()))
        .map(|e| gputrace_format::RunRecord::from_json(&std::fs::read(e.path()).unwrap()).unwrap())
        .collect()
}

fn python_dirs(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".gputrace-python-"))
        .collect()
}

#[test]
fn a_killed_launcher_leaves_a_record_that_says_so_and_its_python_directory_is_cleaned() {
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("t");
    let mut launcher = bin()
        .args(["run", "-o", o.to_str().unwrap(), "--", "sleep", "2"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    while records(&o).is_empty() || python_dirs(&o).is_empty() {
        assert!(Instant::now() < until, "no run record was written at the start");
        std::thread::sleep(Duration::from_millis(20));
    }
    launcher.kill().unwrap();
    launcher.wait().unwrap();
    let r = records(&o);
    assert_eq!(r.len(), 1);
    assert!(!r[0].completed() && !r[0].succeeded(), "{:?}", r[0]);
    assert_eq!(r[0].outcome(), "not completed: gputrace run was killed before the command ended");
    assert_eq!(python_dirs(&o).len(), 1, "the killed launcher's Python directory is left");
    // The next run on this host removes it, saying so, and completes its own record.
    let out = gputrace(&["run", "-o", o.to_str().unwrap(), "--", "true"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(python_dirs(&o).is_empty(), "{err}");
    assert_eq!(err.lines().filter(|l| l.contains("that was killed")).count(), 1, "{err}");
    let r = records(&o);
    assert_eq!(r.iter().filter(|r| r.completed() && r.succeeded()).count(), 1, "{r:?}");
}
