//! The sampler on real processes: a Python child that sleeps in one
//! function then burns CPU in another, and a native child.

use gputrace_format::host::ThreadState;
use gputrace_host::{Recording, Sampler, SamplerConfig};
use std::process::Command;
use std::time::Duration;

fn python() -> Option<&'static str> {
    let ok = Command::new("python3").arg("-c").arg("pass").status().is_ok_and(|s| s.success());
    if !ok && std::env::var("CI").as_deref() == Ok("true") {
        panic!("python3 is required under CI=true");
    }
    ok.then_some("python3")
}

/// Runs of `function` (innermost frame) in `rec`: (state, samples, cpu_ns).
fn runs_in(rec: &Recording, function: &str) -> Vec<(ThreadState, u32, u64)> {
    let mut out = Vec::new();
    for p in &rec.processes {
        for r in &p.runs {
            let Some(s) = r.stack else { continue };
            let Some(&top) = rec.stacks[s as usize].first() else { continue };
            if rec.frames[top as usize].0 == function {
                out.push((r.state, r.samples, r.cpu_ns));
            }
        }
    }
    out
}

#[test]
fn python_sleep_and_burn_are_told_apart() {
    let Some(py) = python() else {
        eprintln!("skipped: no python3");
        return;
    };
    // `burn` spins until it has used 0.6 s of CPU (not of wall time), so a
    // loaded machine slows it down without starving it below the assertion.
    let script = "import time\n\
                  def nap():\n    time.sleep(0.6)\n\
                  def burn():\n    t = time.process_time()\n    while time.process_time() - t < 0.6:\n        pass\n\
                  nap()\nburn()\n";
    let mut child = Command::new(py).arg("-c").arg(script).spawn().unwrap();
    let sampler = Sampler::start(child.id(), SamplerConfig::default()).unwrap();
    child.wait().unwrap();
    let rec = sampler.finish().unwrap();
    let p = rec.processes.iter().find(|p| p.pid == child.id()).expect("the child was seen");
    assert!(p.python, "py-spy attached: {:?}", p.losses);
    let nap = runs_in(&rec, "nap");
    let sleep_samples: u32 = nap.iter().filter(|r| r.0 == ThreadState::Sleeping).map(|r| r.1).sum();
    assert!(sleep_samples >= 20, "{nap:?}");
    let burn = runs_in(&rec, "burn");
    let running: u32 = burn.iter().filter(|r| r.0 == ThreadState::Running).map(|r| r.1).sum();
    let cpu: u64 = burn.iter().map(|r| r.2).sum();
    assert!(running >= 20, "{burn:?}");
    assert!(cpu >= 300_000_000, "burn used {cpu} ns of CPU");
}

#[test]
fn native_children_get_cpu_state_without_stacks() {
    let mut child = Command::new("sh").arg("-c").arg("sleep 0.5; true").spawn().unwrap();
    let sampler = Sampler::start(child.id(), SamplerConfig::default()).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    child.wait().unwrap();
    let rec = sampler.finish().unwrap();
    let sleeper = rec
        .processes
        .iter()
        .find(|p| p.threads.iter().any(|t| t.name == "sleep"))
        .expect("the grandchild `sleep` was found through the tree");
    assert_eq!(sleeper.ppid, Some(child.id()));
    assert!(!sleeper.python);
    assert!(sleeper.runs.iter().all(|r| r.stack.is_none()));
    assert!(
        sleeper.runs.iter().any(|r| r.state == ThreadState::Sleeping && r.samples >= 10),
        "{:?}",
        sleeper.runs
    );
}
