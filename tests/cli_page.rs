//! The command line around the page (issue #44 item 4): `--json` on `version`, `demo`,
//! `export`, `metrics` and `import`; `--color` and `FORCE_COLOR`; a large demo's short
//! terminal output; and a Python job with step marks but no CUDA gets its steps.

use std::path::Path;
use std::process::{Command, Output};

mod common;
use common::text;

fn gputrace(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gputrace"));
    c.args(args).env_remove("NO_COLOR").env_remove("FORCE_COLOR");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run gputrace")
}

fn json_of(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)))
}

fn demo(dir: &Path, ranks: &str) -> Output {
    gputrace(
        &[
            "demo",
            "-o",
            dir.to_str().unwrap(),
            "--ranks",
            ranks,
            "--steps",
            "3",
            "--layers",
            "2",
        ],
        &[],
    )
}

#[test]
fn json_on_version_demo_export_metrics_and_import() {
    let v = json_of(&gputrace(&["version", "--json"], &[]));
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert!(v["trace_format"].as_str().unwrap().starts_with("1."), "{v}");
    assert!(v["agent_searched"].as_array().is_some_and(|a| !a.is_empty()));

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("demo");
    let ds = d.to_str().unwrap();
    let out = gputrace(&["demo", "-o", ds, "--ranks", "2", "--steps", "3", "--layers", "2", "--json"], &[]);
    let v = json_of(&out);
    assert_eq!((v["ranks"].as_u64(), v["synthetic"].as_bool()), (Some(2), Some(true)));
    assert_eq!(v["files"].as_array().unwrap().len(), 2);
    assert!(Path::new(v["html"].as_str().unwrap()).exists() && Path::new(v["pftrace"].as_str().unwrap()).exists());
    assert!(v["next"][0].as_str().unwrap().starts_with("gputrace compare"));

    let pf = dir.path().join("job.pftrace");
    let v = json_of(&gputrace(&["export", ds, "-o", pf.to_str().unwrap(), "--json"], &[]));
    let f = &v["files"][0];
    assert_eq!((f["format"].as_str(), f["path"].as_str()), (Some("perfetto"), pf.to_str()));
    assert!(f["events"].as_u64().unwrap() > 100 && f["bytes"].as_u64() == Some(std::fs::metadata(&pf).unwrap().len()));
    let out = gputrace(&["export", ds, "-o", "-", "--json"], &[]);
    assert_eq!(out.status.code(), Some(2), "--json and -o - both want stdout");

    let v = json_of(&gputrace(&["metrics", ds, "--json"], &[]));
    let families = v["families"].as_array().unwrap();
    let gpu = families.iter().find(|f| f["name"] == "gputrace_gpu_seconds_total").unwrap();
    assert_eq!(gpu["type"], "counter");
    let sample = &gpu["samples"][0];
    assert!(sample["labels"]["rank"].is_string() && sample["value"].is_number(), "{sample}");

    // Kineto JSON from the chrome export, imported back.
    let kineto = dir.path().join("kineto");
    let out = gputrace(&["export", ds, "--format", "chrome", "-o", &format!("{}/", kineto.display())], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let back = dir.path().join("back");
    let v = json_of(&gputrace(
        &["import", kineto.to_str().unwrap(), "-o", &format!("{}/", back.display()), "--json"],
        &[],
    ));
    assert_eq!(v["files"].as_array().unwrap().len(), 2, "{v}");
    assert!(v["files"][0]["events"]["kernel"].as_u64().unwrap() > 0);
    assert_eq!(v["failed"], serde_json::json!([]));
}

#[test]
fn color_follows_the_flag_then_no_color_then_force_color() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("demo");
    assert!(demo(&d, "2").status.success());
    let ds = d.to_str().unwrap();
    let colored = |args: &[&str], env: &[(&str, &str)]| {
        let out = gputrace(args, env);
        assert!(out.status.success(), "{}", text(&out.stderr));
        out.stdout.contains(&0x1b)
    };
    assert!(!colored(&["report", ds], &[]), "a pipe gets no colour");
    assert!(colored(&["report", ds, "--color", "always"], &[]));
    assert!(
        colored(&["--color", "always", "report", ds], &[]),
        "the flag goes before or after the command"
    );
    assert!(colored(&["report", ds], &[("FORCE_COLOR", "1")]));
    assert!(!colored(&["report", ds], &[("FORCE_COLOR", "0")]));
    assert!(!colored(&["report", ds], &[("FORCE_COLOR", "1"), ("NO_COLOR", "1")]));
    assert!(!colored(&["report", ds, "--color", "never"], &[("FORCE_COLOR", "1")]));
    assert!(colored(&["report", ds, "--color", "always"], &[("NO_COLOR", "1")]));
    let out = gputrace(&["report", ds, "--color", "sometimes"], &[]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_demo_of_many_ranks_keeps_its_terminal_output_short() {
    let dir = tempfile::tempdir().unwrap();
    let out = demo(&dir.path().join("demo"), "40");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines = stdout.lines().count();
    assert!(lines < 30, "{lines} lines:\n{stdout}");
    assert!(
        stdout.contains("40 trace files") && stdout.contains("Findings:") && stdout.contains("straggler"),
        "{stdout}"
    );
    assert!(stdout.contains("report.html"), "{stdout}");
}

/// A Python job that marks its steps and never touches CUDA: `report` counts the steps its
/// marks delimit (the first mark starts step 0), with their tokens.
#[test]
fn a_python_job_without_cuda_gets_its_steps() {
    if Command::new("python3")
        .arg("--version")
        .output()
        .map_or(true, |o| !o.status.success())
    {
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true but no python3");
        return common::skip("no python3");
    }
    common::agent_lib();
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces");
    let script = "import gputrace, time\nfor i in range(6):\n    time.sleep(0.01)\n    gputrace.step(tokens=100, samples=2)\n";
    let out = gputrace(&["run", "-o", traces.to_str().unwrap(), "--", "python3", "-c", script], &[]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v = json_of(&gputrace(&["report", "--json", traces.to_str().unwrap()], &[]));
    let p = &v["productive"];
    assert_eq!(p["steps"], 5, "{p}");
    assert_eq!(p["step_source"], "step-marks", "{p}");
    assert_eq!(p["tokens"], 500, "{p}");
    assert!(p["step_time_p50_s"].as_f64().unwrap() >= 0.01, "{p}");
    assert!(p["missing"].get("steps").is_none(), "{p}");
    let out = gputrace(&["report", traces.to_str().unwrap()], &[]);
    let report = text(&out.stdout);
    assert!(!report.contains("steps: not computed"), "{report}");
}
