//! `gputrace run` and Python jobs: the run record, the `gputrace` module, the
//! sitecustomize that chains to the job's own, and PyTorch's optimizer-step
//! hook. The hook tests use a real PyTorch (CPU is enough: the hook fires on
//! `optimizer.step()` without CUDA); `.ci/run` installs it, and under
//! `CI=true` a missing torch fails instead of skipping.

mod common;

use common::{agent_lib, text};
use gputrace_format::RunRecord;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn run_in(dir: &Path, extra: &[&str], cmd: &[&str], env: &[(&str, &str)]) -> Output {
    agent_lib();
    let out = dir.join("traces");
    let mut c = Command::new(env!("CARGO_BIN_EXE_gputrace"));
    c.arg("run").arg("-o").arg(&out).args(extra).arg("--").args(cmd);
    c.env_remove("PYTHONPATH");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run gputrace")
}

fn records(dir: &Path) -> Vec<RunRecord> {
    std::fs::read_dir(dir.join("traces"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| RunRecord::is_record_name(&p.file_name().unwrap().to_string_lossy()))
        .map(|p| RunRecord::from_json(&std::fs::read(&p).unwrap()).unwrap())
        .collect()
}

/// Nothing of ours is left in the output directory but traces and records.
fn only_outputs_left(dir: &Path) {
    for e in std::fs::read_dir(dir.join("traces")).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            name.ends_with(".gtrace") || RunRecord::is_record_name(&name),
            "left behind in the output directory: {name}"
        );
    }
}

fn python() -> Option<&'static str> {
    Command::new("python3")
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|_| "python3")
}

fn have_torch(py: &str) -> bool {
    let ok = Command::new(py)
        .args(["-c", "import torch"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but `python3 -c 'import torch'` fails: .ci/run installs PyTorch for these tests"
        );
        common::skip(&format!("no PyTorch for {py} (pip install torch)"));
    }
    ok
}

#[test]
fn the_run_record_says_how_the_command_ended() {
    let dir = tempfile::tempdir().unwrap();
    let out = run_in(dir.path(), &[], &["sh", "-c", "exit 3"], &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let r = records(dir.path());
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].exit_code, r[0].signal, r[0].succeeded()), (Some(3), None, false));
    assert_eq!(r[0].command, ["sh", "-c", "exit 3"]);
    assert!(r[0].end_realtime_ns >= r[0].start_realtime_ns && r[0].start_realtime_ns > 0);
    only_outputs_left(dir.path());

    let dir = tempfile::tempdir().unwrap();
    let out = run_in(dir.path(), &[], &["sh", "-c", "kill -9 $$"], &[]);
    assert_eq!(out.status.code(), Some(137));
    let r = records(dir.path());
    assert_eq!((r[0].exit_code, r[0].signal, r[0].outcome().as_str()), (None, Some(9), "signal 9"));

    let dir = tempfile::tempdir().unwrap();
    let out = run_in(dir.path(), &[], &["true"], &[]);
    assert!(out.status.success());
    assert!(records(dir.path())[0].succeeded());
}

#[test]
fn python_jobs_import_gputrace_and_keep_their_own_sitecustomize() {
    let Some(py) = python() else {
        return common::skip("no python3");
    };
    let dir = tempfile::tempdir().unwrap();
    // The job's own sitecustomize, on its own PYTHONPATH: it must still run.
    let theirs = dir.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::write(theirs.join("sitecustomize.py"), "import os\nos.environ['THEIRS_RAN'] = '1'\n").unwrap();
    let probe = "import os, sys, gputrace; print(os.environ.get('THEIRS_RAN'), gputrace.step(tokens=1), \
                 gputrace.__file__.startswith(os.environ['PYTHONPATH'].split(':')[0].rsplit('/', 1)[0]))";
    let pythonpath = theirs.to_str().unwrap();
    for (flags, want) in [(&[][..], "1 "), (&["--no-python-hooks"][..], "1 ")] {
        let out = run_in(dir.path(), flags, &[py, "-c", probe], &[("PYTHONPATH", pythonpath)]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(stdout.starts_with(want), "{flags:?}: {stdout} / {}", text(&out.stderr));
        assert!(stdout.trim_end().ends_with("True"), "gputrace is ours: {stdout}");
        only_outputs_left(dir.path());
    }
    // Our sitecustomize is first on the path only with hooks on.
    let show = "import sitecustomize, sys; print(getattr(sitecustomize, '__file__', ''))";
    let out = run_in(dir.path(), &[], &[py, "-c", show], &[]);
    assert!(text(&out.stdout).contains(".gputrace-python-"), "{}", text(&out.stdout));
    let out = run_in(dir.path(), &["--no-python-hooks"], &[py, "-c", show], &[]);
    assert!(!text(&out.stdout).contains(".gputrace-python-"), "{}", text(&out.stdout));
}

/// A stand-in for the agent's `gputrace_mark` that appends each mark to a
/// file, so the hook's behaviour is seen call by call.
fn mark_logger(dir: &Path) -> PathBuf {
    let src = dir.join("marks.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <stdlib.h>\n\
         int gputrace_mark(const char *d, const char *m) {\n\
           FILE *f = fopen(getenv(\"MARK_LOG\"), \"a\"); if (!f) return 0;\n\
           fprintf(f, \"%s|%s\\n\", d ? d : \"\", m ? m : \"\"); fclose(f); return 1; }\n",
    )
    .unwrap();
    let lib = dir.join("libmarks.so");
    let st = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success());
    lib
}

const TRAIN: &str = r#"
import sys, torch
torch.manual_seed(0)
model = torch.nn.Linear(8, 2)
adam = torch.optim.AdamW(model.parameters())
sgd = torch.optim.SGD(model.parameters(), lr=0.1)
mode = sys.argv[1]
for i in range(5):
    model(torch.randn(4, 8)).sum().backward()
    adam.step()
    sgd.step()  # a second optimizer: still one mark per step
if mode == "user":
    import gputrace
    gputrace.step(tokens=100, samples=4)
    gputrace.step(tokens=-1)
    adam.step()  # the job marks its own steps now: the hook stands down
if mode == "crash":
    raise RuntimeError("boom")
if mode == "exit":
    sys.exit(7)
"#;

/// Run TRAIN directly with gputrace's Python directory on the path (as
/// `gputrace run` sets it) and the mark logger as the agent.
fn train_with_logger(py: &str, dir: &Path, mode: &str, agent: &Path) -> (Output, Vec<String>) {
    let log = dir.join(format!("marks-{mode}"));
    let _ = std::fs::remove_file(&log);
    let script = dir.join("train.py");
    std::fs::write(&script, TRAIN).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let out = Command::new(py)
        .arg(&script)
        .arg(mode)
        .env(
            "PYTHONPATH",
            format!("{}:{}", root.join("hooks").display(), root.join("lib").display()),
        )
        .env("GPUTRACE_AGENT_LIB", agent)
        .env("MARK_LOG", &log)
        .output()
        .unwrap();
    let marks = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    (out, marks)
}

#[test]
fn the_optimizer_hook_marks_each_step_once_and_stands_down_for_the_job() {
    let Some(py) = python() else {
        return common::skip("no python3");
    };
    if !have_torch(py) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let agent = mark_logger(dir.path());
    let step = "gputrace|step".to_string();

    let (out, marks) = train_with_logger(py, dir.path(), "plain", &agent);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(marks, vec![step.clone(); 5]);
    assert!(!text(&out.stderr).contains("gputrace:"), "{}", text(&out.stderr));

    let (out, marks) = train_with_logger(py, dir.path(), "user", &agent);
    assert!(out.status.success());
    let mut want = vec![step.clone(); 5];
    want.extend(["gputrace|step tokens=100 samples=4".to_string(), step.clone()]);
    assert_eq!(marks, want, "the job's own marks, then no hook marks");
    assert_eq!(
        common::gputrace_lines(&out.stderr).len(),
        1,
        "one line for tokens=-1: {}",
        text(&out.stderr)
    );

    let (out, marks) = train_with_logger(py, dir.path(), "crash", &agent);
    assert_eq!(out.status.code(), Some(1), "the job's own exit code");
    assert_eq!(marks.last().map(String::as_str), Some("gputrace|exit exception=RuntimeError"));
    assert!(text(&out.stderr).contains("RuntimeError: boom"), "the job's traceback is intact");

    let (out, marks) = train_with_logger(py, dir.path(), "exit", &agent);
    assert_eq!(out.status.code(), Some(7));
    assert_eq!(marks.last().map(String::as_str), Some("gputrace|exit status=7"));

    // An agent without gputrace_mark (an older build): one line, the job runs on.
    let (out, marks) = train_with_logger(py, dir.path(), "plain", Path::new("/nonexistent/libgputrace_agent.so"));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(marks.is_empty());
    let lines = common::gputrace_lines(&out.stderr);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("could not load the capture agent"), "{lines:?}");
}

#[test]
fn a_job_without_torch_is_untouched() {
    let Some(py) = python() else {
        return common::skip("no python3");
    };
    let dir = tempfile::tempdir().unwrap();
    let agent = mark_logger(dir.path());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("python");
    let log = dir.path().join("log");
    let out = Command::new(py)
        .args(["-c", "import json, sys; print(json.dumps([1])); sys.exit(0)"])
        .env(
            "PYTHONPATH",
            format!("{}:{}", root.join("hooks").display(), root.join("lib").display()),
        )
        .env("GPUTRACE_AGENT_LIB", &agent)
        .env("MARK_LOG", &log)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(text(&out.stdout), "[1]\n");
    assert!(out.stderr.is_empty(), "{}", text(&out.stderr));
    assert!(!log.exists(), "no marks from a job without torch");
}
