//! End-to-end tests of the `gputrace` binary.

use std::path::{Path, PathBuf};
use std::process::Command;

fn gputrace() -> Command {
    Command::new(env!("CARGO_BIN_EXE_gputrace"))
}

mod common;
use common::{gputrace as run, text};

fn demo(dir: &Path, extra: &[&str]) -> Vec<PathBuf> {
    let mut args = vec!["demo", "-o", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    let out = run(&args);
    assert!(out.status.success(), "demo failed: {}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("SYNTHETIC"), "demo must label its data: {stdout}");
    assert!(stdout.contains("gputrace info"), "demo says what to run next: {stdout}");
    assert!(
        dir.join("demo.pftrace").exists(),
        "the demo writes a Perfetto trace of the whole job"
    );
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gtrace"))
        .collect();
    files.sort();
    files
}

#[test]
fn demo_then_info_json() {
    let dir = tempfile::tempdir().unwrap();
    let files = demo(dir.path(), &["--ranks", "3", "--steps", "4", "--layers", "5"]);
    assert_eq!(files.len(), 3);
    let out = run(&["info", "--json", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let files = v["files"].as_array().unwrap();
    assert_eq!(files.len(), 3);
    for (rank, f) in files.iter().enumerate() {
        assert_eq!(f["header"]["rank"]["rank"], rank as u64);
        assert_eq!(f["header"]["producer"], "synthetic");
        assert_eq!(f["complete"], true);
        // 5 layers * 18 + 12 optimizer kernels, plus 6 all-reduce kernels, per step.
        assert_eq!(f["events"]["kernel"], (4 * (5 * 18 + 12 + 6)) as u64);
        assert_eq!(f["events"]["collective"], 4 * 6);
        let total: u64 = f["events"].as_object().unwrap().values().map(|v| v.as_u64().unwrap()).sum();
        assert_eq!(f["events_total"], total);
        assert!(f["losses"].as_object().unwrap().is_empty());
    }
    // --stats decodes every event: totals agree with the counts.
    let out = run(&["info", "--json", "--stats", dir.path().to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let f = &v["files"][0];
    assert_eq!(f["stats"]["kernels"], f["events"]["kernel"]);
    assert!(f["stats"]["kernel_time_ns"].as_u64().unwrap() > 0);
    assert_eq!(f["stats"]["copies"]["HtoD"][0], 4, "one batch copy per step");
    assert_eq!(f["stats"]["copies"]["HtoD"][1], 4 * (16u64 << 20));
    assert_eq!(f["stats"]["api_calls"]["cudaLaunchKernel"], f["events"]["kernel"]);
}

#[test]
fn info_reports_a_cut_off_file_and_keeps_going() {
    let dir = tempfile::tempdir().unwrap();
    let files = demo(dir.path(), &["--ranks", "1", "--steps", "3", "--layers", "3"]);
    let bytes = std::fs::read(&files[0]).unwrap();
    let cut = dir.path().join("cut.gtrace");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let out = run(&["info", cut.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("DAMAGED") && stdout.contains("offset"), "{stdout}");
}

#[test]
fn bad_inputs_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let foreign = dir.path().join("picture.png");
    std::fs::write(&foreign, b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR").unwrap();
    let out = run(&["info", foreign.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("picture.png") && err.contains("not a gputrace trace"), "{err}");
    assert!(err.contains("PyTorch profiler"), "the hint names what is readable: {err}");

    // JSON that is not a profiler trace is not one either.
    let json = dir.path().join("config.json");
    std::fs::write(&json, b"{\"lr\": 0.001, \"batch\": 32}").unwrap();
    let out = run(&["info", json.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("config.json"), "{}", text(&out.stderr));
    assert!(!err.contains("panicked"), "{err}");

    let out = run(&["info", "/definitely/not/here.gtrace"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("/definitely/not/here.gtrace"));

    let empty_dir = tempfile::tempdir().unwrap();
    let out = run(&["info", empty_dir.path().to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no traces found"), "{}", text(&out.stderr));

    // Random bytes with the right magic: a clear error, never a panic.
    let junk = dir.path().join("junk.gtrace");
    let mut b = b"GPUTRACE\x01\x00\x00\x00\x00\x00\x00\x00".to_vec();
    b.extend((0..5000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8));
    std::fs::write(&junk, b).unwrap();
    let out = run(&["info", junk.to_str().unwrap()]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("junk.gtrace") && err.contains("offset 16"), "{err}");
}

#[test]
fn version_finds_the_agent_built_next_to_the_binary() {
    let out = run(&["version"]);
    assert!(out.status.success());
    let stdout = text(&out.stdout);
    let exe_dir = Path::new(env!("CARGO_BIN_EXE_gputrace")).parent().unwrap().to_path_buf();
    let expected = exe_dir.join("libgputrace_agent.so");
    assert!(expected.exists(), "build the workspace first: cargo build --workspace");
    assert!(stdout.contains(&format!("agent: {}", expected.display())), "{stdout}");
    // The override is honoured.
    let out = gputrace()
        .arg("version")
        .env("GPUTRACE_AGENT", "/nope/libgputrace_agent.so")
        .output()
        .unwrap();
    assert!(
        text(&out.stdout).contains("not found (searched: /nope/libgputrace_agent.so)"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn demo_replaces_its_own_traces_only() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"keep me").unwrap();
    demo(dir.path(), &["--ranks", "4", "--steps", "2", "--layers", "2"]);
    let files = demo(dir.path(), &["--ranks", "2", "--steps", "2", "--layers", "2"]);
    let traces = files.iter().filter(|f| f.extension().is_some_and(|e| e == "gtrace")).count();
    assert_eq!(traces, 2);
    assert!(dir.path().join("notes.txt").exists());
}

#[test]
fn gputrace_threads_caps_the_threads_and_bad_values_are_named() {
    let dir = tempfile::tempdir().unwrap();
    demo(dir.path(), &["--ranks", "2", "--steps", "2"]);
    let d = dir.path().to_str().unwrap();
    let report = |threads: Option<&str>| {
        let mut c = gputrace();
        c.args(["report", "--json", d]);
        match threads {
            Some(t) => c.env("GPUTRACE_THREADS", t),
            None => c.env_remove("GPUTRACE_THREADS"),
        };
        c.output().unwrap()
    };
    let (auto, one) = (report(None), report(Some("1")));
    assert!(auto.status.success() && one.status.success(), "{}", text(&one.stderr));
    assert_eq!(auto.stdout, one.stdout, "the same report on one thread");
    for cmd in [&["report", d][..], &["compare", d][..]] {
        let out = gputrace().args(cmd).env("GPUTRACE_THREADS", "zero").output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{cmd:?}");
        let err = text(&out.stderr);
        assert!(err.contains("GPUTRACE_THREADS=\"zero\""), "{cmd:?}: {err}");
    }
}
