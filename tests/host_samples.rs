//! Host samples end to end (#40): real CPython jobs under `gputrace run`
//! with the CUDA doubles, whose GPU goes idle while Python sits in a known
//! function: a loader that sleeps, a preprocessing loop that burns CPU, a
//! checkpoint written with O_DIRECT (disk wait). The report must name that
//! function for that gap, with the CPU state right.

mod common;

use common::{agent_lib, doubles, text};
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};

/// The interpreter itself (not a shim script), or `None` without Python.
fn python() -> Option<String> {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()
        .filter(|o| o.status.success());
    if out.is_none() {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true but python3 is missing");
        common::skip("no python3");
    }
    out.map(|o| text(&o.stdout).trim().to_string())
}

/// Each phase lasts `T` seconds; the scenario's GPU idles as long between
/// its bursts of kernels.
const JOB: &str = r#"
import ctypes, mmap, os, sys, time
cuda = ctypes.CDLL(sys.argv[1])
assert cuda.cuInit(0) == 0
T = float(sys.argv[2])

def load_batch():
    time.sleep(T)

def preprocess():
    t = time.time()
    x = 0
    while time.time() - t < T:
        x += 1

def save_checkpoint(path):
    buf = mmap.mmap(-1, 8 << 20)
    buf.write(b"\1" * (8 << 20))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT)
    t = time.time()
    while time.time() - t < T:
        os.pwrite(fd, buf, 0)
        os.fsync(fd)
    os.close(fd)

load_batch()
preprocess()
save_checkpoint(sys.argv[3])
cuda.fakecuda_work(60000)
sys.exit(3)
"#;

const SCENARIO: &str = "version 13.0\ndevice\n\
    kernels 3 1000000 100000\nsleep_ms 800\n\
    kernels 3 1000000 100000\nsleep_ms 800\n\
    kernels 3 1000000 100000\nsleep_ms 800\n\
    kernels 3 1000000 100000\n";

fn run_job(dir: &Path, py: &str, flags: &[&str]) -> Output {
    agent_lib();
    let dbl = doubles();
    std::fs::write(dir.join("job.py"), JOB).unwrap();
    std::fs::write(dir.join("scenario"), SCENARIO).unwrap();
    Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .arg("run")
        .args(flags)
        .arg("-o")
        .arg(dir.join("traces"))
        .arg("--")
        .arg(py)
        .arg(dir.join("job.py"))
        .arg(dbl.join("libcuda.so.1"))
        .arg("0.8")
        .arg(dir.join("ckpt.bin"))
        .env("FAKE_CUPTI_SCENARIO", dir.join("scenario"))
        .env("GPUTRACE_CUPTI", dbl.join("cupti13/libcupti.so.13"))
        .env("GPUTRACE_AGENT", agent_lib())
        .env_remove("RANK")
        .env_remove("PYTHONPATH")
        .output()
        .unwrap()
}

fn report_json(dir: &Path) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["report", "--json"])
        .arg(dir.join("traces"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn ns(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("{k} in {v}"))
}

#[test]
fn each_idle_gap_names_the_python_function_and_its_cpu_state() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = run_job(dir.path(), &py, &[]);
    assert_eq!(out.status.code(), Some(3), "the job's exit code is kept: {}", text(&out.stderr));
    let r = report_json(dir.path());
    let rank = &r["ranks"][0];
    assert!(rank.get("host").is_some(), "no host samples: {}", text(&out.stderr));
    let mut gaps: Vec<&Value> = rank["devices"][0]["longest_gaps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| ns(g, "duration_ns") > 500_000_000)
        .collect();
    gaps.sort_by_key(|g| ns(g, "start_ns"));
    assert_eq!(
        gaps.len(),
        3,
        "three long gaps: {}",
        serde_json::to_string_pretty(&rank["devices"][0]["longest_gaps"]).unwrap()
    );
    let expect = [
        ("load_batch", "sleep", "main_sleeping_ns"),
        ("preprocess", "host-compute", "main_running_ns"),
        ("save_checkpoint", "io-wait", "main_disk_wait_ns"),
    ];
    for (g, (function, cause, state)) in gaps.iter().zip(expect) {
        let h = &g["host"];
        let site = h["site"].as_str().unwrap_or_default();
        assert!(
            site.starts_with(&format!("{function} (job.py:")),
            "gap at {}: site {site}: {h}",
            g["start_ns"]
        );
        assert_eq!(h["cause"], cause, "{function}: {h}");
        assert!(
            ns(h, "sampled_ns") * 10 >= ns(h, "window_ns") * 7,
            "most of the gap is sampled: {h}"
        );
        // The state that makes the cause holds a real share of the sampled time.
        assert!(ns(h, state) * 5 >= ns(h, "sampled_ns"), "{function}: {state}: {h}");
        assert!(h["site_share"].as_f64().unwrap() > 0.5, "{function}: {h}");
        let top = &h["stacks"][0]["frames"];
        assert!(top[0].as_str().unwrap().starts_with("<module> (job.py:"), "outermost first: {top}");
    }
    assert_eq!(gaps[0]["host"]["stacks"][0]["state"], "sleeping");
    assert_eq!(gaps[1]["host"]["stacks"][0]["state"], "running");

    // The rank's summary, the finding and the text report.
    let host = &rank["host"];
    assert!(ns(host, "samples") > 100, "{host}");
    assert_eq!(host["hz"], 100);
    assert!(host["gpu_idle"]["window_ns"].as_u64().unwrap() > 2_000_000_000);
    let finding = r["findings"].as_array().unwrap().iter().find(|f| f["rule"] == "host-during-idle");
    assert!(finding.is_some(), "{}", r["findings"]);
    let txt = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .arg("report")
        .arg(dir.path().join("traces"))
        .output()
        .unwrap();
    let txt = text(&txt.stdout);
    assert!(txt.contains("host: sleep/wait") && txt.contains("in load_batch (job.py:"), "{txt}");
    assert!(txt.contains("Host during GPU idle"), "{txt}");

    // Folded stacks, weighted by GPU-idle µs.
    let folded = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["report", "--folded"])
        .arg(dir.path().join("traces"))
        .output()
        .unwrap();
    let folded = text(&folded.stdout);
    let nap: u64 = folded
        .lines()
        .filter(|l| l.starts_with("rank 0;<module> (job.py:") && l.contains(";load_batch (job.py:"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(nap > 400_000, "load_batch holds most of the first 800 ms gap:\n{folded}");

    // The page's flame graph draws the same stacks: load_batch's box is as wide as its
    // share of the folded weight.
    let page = dir.path().join("report.html");
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .arg("report")
        .arg(dir.path().join("traces"))
        .arg("--html")
        .arg(&page)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    let rank_graph = html
        .split("<div class=\"flame\" data-rank=\"0\">")
        .nth(1)
        .expect("the rank's flame graph")
        .split("<div class=\"flame\"")
        .next()
        .unwrap();
    let load = rank_graph
        .split("<div class=\"fg-f")
        .find(|b| b.contains("data-frame=\"load_batch (job.py:"))
        .unwrap_or_else(|| panic!("no load_batch box:\n{rank_graph}"));
    let attr = |name: &str| load.split(&format!("{name}=\"")).nth(1).unwrap().split('"').next().unwrap();
    let all: u64 = folded
        .lines()
        .filter(|l| l.starts_with("rank 0;"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(attr("data-ns").parse::<u64>().unwrap(), nap * 1000, "{load}");
    let share: f64 = attr("data-share").parse().unwrap();
    assert!((share - nap as f64 / all as f64).abs() < 1e-3, "{share} vs {nap}/{all}");
    assert!(attr("title").contains(" of GPU idle, "), "{load}");
    // In the browser at 900 px, dark: no frame's text past its box, no sideways scroll.
    if !common::chromium::chromium_absent() {
        use common::chromium::{chromium, layout_result, page_copy_with, LAYOUT_CHECK};
        let run = chromium(
            &["--window-size=900,1000", "--force-dark-mode", "--dump-dom"],
            &page_copy_with(&page, LAYOUT_CHECK),
        );
        let v = layout_result(&text(&run.stdout), "the flame graph page at 900 px");
        assert_eq!(v["overflow"], serde_json::json!([]), "text past its box: {v}");
        assert_eq!(v["page_scroll"], false, "{v}");
    }

    // info counts the samples.
    let info = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["info", "--json"])
        .arg(dir.path().join("traces"))
        .output()
        .unwrap();
    let info: Value = serde_json::from_slice(&info.stdout).unwrap();
    let hs = &info["files"][0]["host_samples"];
    assert!(ns(hs, "samples") > 100 && ns(hs, "threads") >= 1, "{hs}");
}

#[test]
fn no_host_samples_leaves_the_trace_as_before() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let out = run_job(dir.path(), &py, &["--no-host-samples"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let r = report_json(dir.path());
    assert!(r["ranks"][0].get("host").is_none(), "{}", r["ranks"][0]);
    assert!(r["ranks"][0]["devices"][0]["longest_gaps"][0].get("host").is_none());
}

#[test]
fn a_python_job_without_cuda_gets_a_trace_of_its_samples() {
    let Some(py) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let job = "import time\ndef spin():\n    t = time.time()\n    while time.time() - t < 1.5:\n        pass\nspin()\n";
    std::fs::write(dir.path().join("nocuda.py"), job).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["run", "-o"])
        .arg(dir.path().join("traces"))
        .arg("--")
        .arg(&py)
        .arg(dir.path().join("nocuda.py"))
        .env_remove("PYTHONPATH")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r = report_json(dir.path());
    let host = &r["ranks"][0]["host"];
    assert!(host["gpu_idle"].is_null(), "{host}");
    let site = host["wall"]["site"].as_str().unwrap_or_default();
    assert!(site.starts_with("spin (nocuda.py:"), "{host}");
    // A native job without CUDA still leaves no trace.
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["run", "-o"])
        .arg(dir.path().join("traces"))
        .args(["--", "sh", "-c", "sleep 0.3"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(text(&out.stderr).contains("no trace was written"), "{}", text(&out.stderr));
}

/// A real PyTorch DataLoader whose two workers burn CPU per sample while
/// the training loop waits for batches and the GPU idles: input-bound, the
/// workers' CPU counted, the wait named in the data loader. The job marks
/// the gap's ends itself: the scenario's `wait_flush` steps wait for its
/// `cuptiActivityFlushAll` calls (the agent's own periodic flush is off).
/// CUDA (and with it the fake CUPTI 12) is set up before `import torch`,
/// whose own libcupti.so.13 the agent must not pick up.
#[test]
fn a_dataloader_with_busy_workers_is_input_bound() {
    let Some(py) = python() else { return };
    // `py` is python3's own executable, so python3's modules are its modules.
    if !common::have_python_module("torch") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let job = r#"
import ctypes, sys, time
cuda = ctypes.CDLL(sys.argv[1])
assert cuda.cuInit(0) == 0
cupti = ctypes.CDLL(sys.argv[2])
import torch
from torch.utils.data import DataLoader, Dataset

class SlowDecode(Dataset):
    def __len__(self):
        return 48
    def __getitem__(self, i):
        t = time.time()
        while time.time() - t < 0.05:
            pass
        return torch.zeros(4)

def train():
    loader = DataLoader(SlowDecode(), batch_size=8, num_workers=2)
    for batch in loader:
        batch.sum()

cupti.cuptiActivityFlushAll(0)
train()
cupti.cuptiActivityFlushAll(0)
cuda.fakecuda_work(60000)
"#;
    std::fs::write(dir.path().join("loader.py"), job).unwrap();
    std::fs::write(
        dir.path().join("scenario"),
        "version 12.4\ndevice\nkernels 3 1000000 100000\nwait_flush\nkernels 3 1000000 100000\nwait_flush\nkernels 3 1000000 100000\n",
    )
    .unwrap();
    let dbl = doubles();
    let cupti = dbl.join("cupti12/libcupti.so.12");
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["run", "-o"])
        .arg(dir.path().join("traces"))
        .arg("--")
        .arg(&py)
        .arg(dir.path().join("loader.py"))
        .arg(dbl.join("libcuda.so.1"))
        .arg(&cupti)
        .env("FAKE_CUPTI_SCENARIO", dir.path().join("scenario"))
        .env("GPUTRACE_CUPTI", &cupti)
        .env("GPUTRACE_AGENT", agent_lib())
        .env("GPUTRACE_FLUSH_MS", "600000")
        .env_remove("RANK")
        .env_remove("PYTHONPATH")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let r = report_json(dir.path());
    // The gap of the training loop: the last long one (the one before is `import torch`).
    let gap = r["ranks"][0]["devices"][0]["longest_gaps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|g| ns(g, "duration_ns") > 500_000_000)
        .max_by_key(|g| ns(g, "start_ns"))
        .unwrap_or_else(|| panic!("the training gap: {}", r["ranks"][0]["devices"][0]))
        .clone();
    let h = &gap["host"];
    assert_eq!(h["cause"], "input-bound", "{h}");
    assert!(ns(h, "main_sleeping_ns") * 2 > ns(h, "sampled_ns"), "the main thread waits: {h}");
    assert!(ns(h, "workers") >= 2, "both loader workers were sampled in the gap: {h}");
    assert!(ns(h, "workers_cpu_ns") > 2 * ns(h, "main_cpu_ns"), "the workers do the work: {h}");
    let site = h["site"].as_str().unwrap_or_default();
    assert!(site.contains("← train (loader.py:"), "the user's frame is named: {h}");
    let frames: Vec<&str> = h["stacks"][0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert!(
        frames.iter().any(|f| f.contains("dataloader.py")),
        "waits in the DataLoader: {frames:?}"
    );
}

#[test]
fn a_launcher_killed_before_writing_its_samples_leaves_a_counted_loss() {
    use std::os::unix::process::CommandExt;
    let Some(py) = python() else { return };
    agent_lib();
    let dbl = doubles();
    let dir = tempfile::tempdir().unwrap();
    let job = "import ctypes, sys, time\ncuda = ctypes.CDLL(sys.argv[1])\nassert cuda.cuInit(0) == 0\n\
               cuda.fakecuda_work(60000)\ntime.sleep(60)\n";
    std::fs::write(dir.path().join("killed.py"), job).unwrap();
    std::fs::write(dir.path().join("scenario"), "version 13.0\ndevice\nkernels 3 1000000 100000\n").unwrap();
    let traces = dir.path().join("traces");
    let mut launcher = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["run", "--flush-ms", "50", "-o"])
        .arg(&traces)
        .arg("--")
        .arg(&py)
        .arg(dir.path().join("killed.py"))
        .arg(dbl.join("libcuda.so.1"))
        .env("FAKE_CUPTI_SCENARIO", dir.path().join("scenario"))
        .env("GPUTRACE_CUPTI", dbl.join("cupti13/libcupti.so.13"))
        .env("GPUTRACE_AGENT", agent_lib())
        .env_remove("RANK")
        .env_remove("PYTHONPATH")
        .stderr(std::process::Stdio::null())
        // Its own process group, so launcher and job die together.
        .process_group(0)
        .spawn()
        .unwrap();
    let group = launcher.id() as i32;
    // Until the trace holds the kernels (the sampler started with the job, before them).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let names: Vec<String> = std::fs::read_dir(&traces)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        let kernels = names.iter().filter(|n| n.ends_with(".gtrace")).any(|n| {
            gputrace_format::TraceFile::open(traces.join(n))
                .is_ok_and(|t| t.event_counts().get(&gputrace_format::EventKind::Kernel).copied().unwrap_or(0) >= 3)
        });
        if kernels {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no trace with kernels in {}: {names:?}",
            traces.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    // Safety: kill(2) on the process group this test made.
    unsafe { libc::kill(-group, libc::SIGKILL) };
    let _ = launcher.wait();

    let expected = "host samples expected (100 Hz) but none written: the launcher ended before writing them";
    let info = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .arg("info")
        .arg(&traces)
        .output()
        .unwrap();
    assert!(info.status.success(), "{}", text(&info.stderr));
    assert!(
        text(&info.stdout).contains(&format!("LOSSES        {expected}")),
        "{}",
        text(&info.stdout)
    );
    let info = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["info", "--json"])
        .arg(&traces)
        .output()
        .unwrap();
    let info: Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(info["files"][0]["host_samples_unwritten"]["hz"], 100, "{info}");

    let r = report_json(dir.path());
    let loss = &r["ranks"][0]["losses"]["host_samples_unwritten"];
    assert_eq!(loss["hz"], 100, "{}", r["ranks"][0]["losses"]);
    assert_eq!(loss["what"], expected);
    assert!(loss["run_record"].as_str().unwrap().contains("/gputrace-run."), "{loss}");
    assert_eq!(r["lossy"], true);
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .arg("report")
        .arg(&traces)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let losses = text(&out.stdout);
    let line = losses
        .lines()
        .find(|l| l.starts_with("rank 0:") && l.contains("no trailer"))
        .unwrap_or_else(|| panic!("{losses}"));
    assert!(line.contains(expected), "{line}");

    // A run whose launcher wrote its samples owes nothing.
    let dir = tempfile::tempdir().unwrap();
    let out = run_job(dir.path(), &py, &[]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let r = report_json(dir.path());
    assert!(
        r["ranks"][0]["losses"].get("host_samples_unwritten").is_none(),
        "{}",
        r["ranks"][0]["losses"]
    );
}
