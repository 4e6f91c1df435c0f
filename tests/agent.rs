//! The capture agent in real child processes, without a GPU.
//!
//! The agent library must be built first: `cargo build --workspace` (the
//! README's test command does). Tests that need the real libcupti from the
//! PyPI wheels (`scripts/fetch-cupti-wheels.sh`) skip, saying so, when it
//! is absent.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn agent_lib() -> PathBuf {
    let p = Path::new(env!("CARGO_BIN_EXE_gputrace")).with_file_name("libgputrace_agent.so");
    assert!(
        p.exists(),
        "{} is missing: build the workspace first (`cargo build --workspace && cargo test --workspace`)",
        p.display()
    );
    p
}

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

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn gputrace_lines(o: &Output) -> Vec<String> {
    text(&o.stderr)
        .lines()
        .filter(|l| l.starts_with("gputrace:"))
        .map(str::to_string)
        .collect()
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
        eprintln!(
            "skipping: no real libcupti in {} (run scripts/fetch-cupti-wheels.sh)",
            dir.display()
        );
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
