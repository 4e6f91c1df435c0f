//! End-to-end: `gputrace report` on a synthetic job written by `gputrace demo`.

use std::path::Path;

mod common;
use common::{gputrace, text};

fn demo(dir: &Path) {
    common::demo(dir, 3, 4, 5);
}

#[test]
fn report_json_splits_every_span_exactly() {
    let dir = tempfile::tempdir().unwrap();
    demo(dir.path());
    let out = gputrace(&["report", "--json", "--gpu-hour-cost", "2.5", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let ranks = v["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 3);
    for (i, rank) in ranks.iter().enumerate() {
        assert_eq!(rank["rank"], i as u64);
        let devices = rank["devices"].as_array().unwrap();
        assert_eq!(devices.len(), 1);
        for d in devices {
            let ns = |k: &str| d[k].as_u64().unwrap_or_else(|| panic!("{k} is not an integer: {}", d[k]));
            assert!(ns("span_ns") > 0);
            assert!(ns("communication_ns") > 0, "NCCL kernels are communication");
            assert_eq!(
                ns("compute_ns") + ns("exposed_communication_ns") + ns("exposed_transfer_ns") + ns("idle_ns"),
                ns("span_ns")
            );
            assert_eq!(d["steps"].as_array().unwrap().len(), 4);
        }
    }
    assert_eq!(v["cost"]["usd_per_gpu_hour"], 2.5);
    assert_eq!(v["lossy"], false);
}

#[test]
fn report_text_without_a_terminal_has_no_color() {
    let dir = tempfile::tempdir().unwrap();
    demo(dir.path());
    let out = gputrace(&["report", "--top", "3", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for needle in ["Where the GPU time went", "Longest idle gaps", "Top kernels", "Findings"] {
        assert!(stdout.contains(needle), "{needle}:\n{stdout}");
    }
    assert!(!stdout.contains('\x1b'), "stdout is a pipe: no color");
}

#[test]
fn report_has_the_collectives_of_the_demo() {
    let dir = tempfile::tempdir().unwrap();
    demo(dir.path());
    let out = gputrace(&["report", "--json", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    let rows = v["collectives"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    // 3 ranks x 4 steps x 6 gradient buckets.
    assert_eq!(rows[0]["op"], "AllReduce");
    assert_eq!(rows[0]["count"], 72);
    assert_eq!(rows[0]["linked"], 72);
    assert!(rows[0]["busbw_gbps"].as_f64().unwrap() > 0.0);
    assert_eq!(v["communicators"][0]["ranks"], serde_json::json!([0, 1, 2]));
    for rank in v["ranks"].as_array().unwrap() {
        for d in rank["devices"].as_array().unwrap() {
            let by_op: u64 = d["exposed_communication_by_op_ns"]
                .as_object()
                .unwrap()
                .values()
                .map(|x| x.as_u64().unwrap())
                .sum();
            assert_eq!(by_op, d["exposed_communication_ns"].as_u64().unwrap());
        }
    }
    let out = gputrace(&["report", dir.path().to_str().unwrap()]);
    let stdout = text(&out.stdout);
    for needle in [
        "Collectives (NCCL",
        "default_pg 00c0ffeed00d0001  AllReduce",
        "Exposed communication by operation",
    ] {
        assert!(stdout.contains(needle), "{needle}:\n{stdout}");
    }
}

#[test]
fn report_rejects_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.gtrace");
    std::fs::write(&junk, b"not a trace at all").unwrap();
    let out = gputrace(&["report", junk.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("not a gputrace trace"), "{}", text(&out.stderr));
    let out = gputrace(&["report", "--gpu-hour-cost=-3", junk.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("not a price"), "{}", text(&out.stderr));
}

/// HTA's `trace_filter` sample (rank 0) from ../shared/traces, or `None`
/// (saying so) when the shared traces are absent.
fn hta_sample_trace() -> Option<&'static str> {
    let trace = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../shared/traces/facebookresearch_HolisticTraceAnalysis@f4d0062/tests/data/trace_filter/sampled_rank-0.json.gz"
    );
    if !Path::new(trace).exists() {
        common::shared_traces_absent(&format!("{trace} is absent"));
        return None;
    }
    Some(trace)
}

/// Rank 0's device with the longest span in a `report --json` document.
fn busiest_device(v: &serde_json::Value) -> serde_json::Value {
    v["ranks"][0]["devices"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|d| d["span_ns"].as_u64().unwrap())
        .unwrap()
        .clone()
}

#[test]
fn report_reads_pytorch_profiler_traces() {
    let Some(trace) = hta_sample_trace() else { return };
    let out = gputrace(&["report", "--json", trace]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let d = busiest_device(&v);
    // HTA and TraceLens: span 1,222,847 µs, idle 675,191 µs on this file (../shared/traces/reference_numbers.csv).
    assert_eq!(d["span_ns"].as_u64(), Some(1_222_847_000));
    assert_eq!(d["idle_ns"].as_u64(), Some(675_191_000));
    assert_eq!(v["lossy"], false);
}

#[test]
fn report_hta_gives_hta_numbers_and_says_so() {
    let Some(trace) = hta_sample_trace() else { return };
    // (flags, HTA's kernel_time, compute_time, idle_time in µs from ../shared/traces/reference_numbers.csv)
    for (flags, span_us, compute_us, idle_us, mode) in [
        (
            &["--hta"][..],
            600_058,
            106_252,
            321_378,
            serde_json::json!({"drop_last_step": true, "linked_only": true, "round_to_us": true}),
        ),
        (
            &["--hta-include-last-step"][..],
            1_222_847,
            210_320,
            675_191,
            serde_json::json!({"drop_last_step": false, "linked_only": true, "round_to_us": true}),
        ),
    ] {
        let out = gputrace(&[&["report", "--json"], flags, &[trace]].concat());
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["hta_compat"], mode, "the document records the mode");
        let d = busiest_device(&v);
        let us = |k: &str| d[k].as_u64().unwrap() / 1000;
        assert_eq!(
            (us("span_ns"), us("compute_ns"), us("idle_ns")),
            (span_us, compute_us, idle_us),
            "{flags:?}"
        );
        assert_eq!(v["ranks"][0]["hta"]["last_step"], 552);
    }
    // Without a flag: gputrace's own definitions, and the document says so.
    let out = gputrace(&["report", "--json", trace]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["hta_compat"].is_null() && v["ranks"][0]["hta"].is_null());
    let out = gputrace(&["report", "--hta", trace]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("HTA-compatible mode (last profiler step dropped"), "{stdout}");
    assert!(stdout.contains("last step ProfilerStep#552 starts at"), "{stdout}");
}

#[test]
fn report_hta_on_the_demo_keeps_the_identities() {
    let dir = tempfile::tempdir().unwrap();
    demo(dir.path());
    let out = gputrace(&["report", "--json", "--hta-no-rounding", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["hta_compat"],
        serde_json::json!({"drop_last_step": true, "linked_only": true, "round_to_us": false})
    );
    for rank in v["ranks"].as_array().unwrap() {
        assert_eq!(rank["hta"]["step_filter"], true);
        assert!(rank["hta"]["dropped_last_step_events"].as_u64().unwrap() > 0);
        for d in rank["devices"].as_array().unwrap() {
            let ns = |k: &str| d[k].as_u64().unwrap();
            assert_eq!(
                ns("compute_ns") + ns("exposed_communication_ns") + ns("exposed_transfer_ns") + ns("idle_ns"),
                ns("span_ns")
            );
            assert_eq!(d["steps"].as_array().unwrap().len(), 3, "the last of 4 steps is dropped");
        }
    }
    let help = text(&gputrace(&["report", "--help"]).stdout);
    assert!(
        help.contains("HTA-compatible: numbers identical to Holistic Trace Analysis' temporal breakdown, not gputrace's definitions"),
        "{help}"
    );
}

#[test]
fn report_opens_with_the_headline_and_has_the_productive_section() {
    let dir = tempfile::tempdir().unwrap();
    demo(dir.path());
    let d = dir.path().to_str().unwrap();
    let out = gputrace(&["report", "--json", "--model-params", "1e9", "--gpu-hour-cost", "3", d]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let job = &v["productive"];
    for key in [
        "steps",
        "step_time_p50_s",
        "step_time_p95_s",
        "tokens_per_s",
        "samples_per_s",
        "mfu",
        "cost_per_million_tokens",
        "productive_gpu_hour_rate",
        "failed_gpu_hours",
    ] {
        assert!(!job[key].is_null(), "{key} is null: {job}");
        assert!(!v["ranks"][0]["productive"][key].is_null(), "rank 0 {key}");
    }
    // The demo's ranks each ran about 125 ms, under 3 GPU-Util windows of 1/6 s: no
    // GPU-Util (issue #42), and the reason instead.
    assert!(job["gpu_util_windows"].as_f64().unwrap() < 3.0, "{job}");
    assert!(job["gpu_util_nvml_pct"].is_null(), "{job}");
    assert!(
        job["missing"]["gpu_util_nvml_pct"]
            .as_str()
            .unwrap()
            .starts_with("a span of 3 or more"),
        "{job}"
    );
    assert_eq!(job["steps"], 4);
    assert_eq!(job["step_source"], "step-marks");
    assert_eq!(job["tokens"], 3 * 4 * 4096, "3 ranks x 4 steps x 4096 tokens");
    assert_eq!(job["samples_source"], "header");
    let mfu = job["mfu"].as_f64().unwrap();
    assert!(mfu > 0.0 && mfu < 1.0, "{mfu}");

    let out = gputrace(&["report", "--model-params", "1e9", "--gpu-hour-cost", "3", d]);
    let stdout = text(&out.stdout);
    let headline = stdout.lines().nth(1).unwrap();
    assert!(headline.starts_with("GPU-Util (as nvidia-smi) "), "{stdout}");
    for part in ["· compute ", "· MFU ", " tokens/s · $", " per M tokens"] {
        assert!(headline.contains(part), "{part}: {headline}");
    }
    assert!(stdout.contains("Productive work (steps: gputrace step marks"), "{stdout}");
    assert!(stdout.contains("Steps (gputrace step marks"), "{stdout}");

    // Without the flags, the headline says which one fills each part.
    let out = gputrace(&["report", d]);
    let stdout = text(&out.stdout);
    let headline = stdout.lines().nth(1).unwrap();
    assert!(
        headline.contains("MFU: --model-params N") && headline.contains("$ per M tokens: --gpu-hour-cost USD"),
        "{headline}"
    );
}

fn write_record(dir: &Path, host: &str, exit_code: Option<i32>) -> std::path::PathBuf {
    let record = serde_json::json!({
        "format": 1,
        "host": host,
        "pid": 99,
        "command": ["torchrun", "train.py"],
        "start_realtime_ns": 1_789_999_999_000_000_000u64,
        "end_realtime_ns": 1_790_000_100_000_000_000u64,
        "exit_code": exit_code,
        "signal": null,
    });
    let path = dir.join(format!("gputrace-run.{host}.99.json"));
    std::fs::write(&path, serde_json::to_vec(&record).unwrap()).unwrap();
    path
}

#[test]
fn report_reads_run_records_beside_the_traces() {
    let dir = tempfile::tempdir().unwrap();
    demo(dir.path());
    // The demo puts two ranks per node: ranks 0 and 1 ran on synth-node000.
    write_record(dir.path(), "synth-node000", Some(3));
    write_record(dir.path(), "synth-node001", Some(0));
    let d = dir.path().to_str().unwrap();
    let out = gputrace(&["report", "--json", "--gpu-hour-cost", "2", d]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ranks"].as_array().unwrap().len(), 3, "records are not traces");
    let failed: Vec<bool> = v["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["productive"]["failed"].as_bool().unwrap())
        .collect();
    assert_eq!(failed, [true, true, false]);
    let p = &v["productive"];
    let lost = p["failed_gpu_hours"].as_f64().unwrap();
    let r01: f64 = (0..2).map(|i| v["ranks"][i]["productive"]["gpu_hours"].as_f64().unwrap()).sum();
    assert!((lost - r01).abs() < 1e-12, "{lost} vs {r01}");
    assert_eq!(p["outcome"], "2 of 3 rank(s) failed");
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["rule"] == "failed-run")
        .expect("failed-run");
    assert!(f["evidence"].as_str().unwrap().contains("exit 3"), "{f}");

    // One trace file: the records of its directory count too.
    let rank0 = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains(".r00000."))
        .unwrap();
    let out = gputrace(&["report", "--json", rank0.to_str().unwrap()]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["productive"]["failed"], true);

    // A record that does not parse: a clear error naming it.
    let bad = dir.path().join("gputrace-run.broken.1.json");
    std::fs::write(&bad, b"{ not json").unwrap();
    let out = gputrace(&["report", d]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("gputrace-run.broken.1.json") && stderr.contains("run record"),
        "{stderr}"
    );
}

#[test]
fn classification_rules_from_a_file_or_the_environment_and_their_audit() {
    let dir = tempfile::tempdir().unwrap();
    demo(dir.path());
    let traces = dir.path().to_str().unwrap();
    // The demo's NCCL kernels counted as compute by a user rule: no communication left.
    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        "[[rule]]\npattern = \"ncclDevKernel\"\ncategory = \"compute\"\nsource = \"test\"\n",
    )
    .unwrap();
    let exposed = |out: &std::process::Output| -> u64 {
        assert!(out.status.success(), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["totals"]["exposed_communication_ns"].as_u64().unwrap()
    };
    assert!(exposed(&gputrace(&["report", "--json", traces])) > 0);
    let by_flag = gputrace(&["report", "--json", "--classify", rules.to_str().unwrap(), traces]);
    assert_eq!(exposed(&by_flag), 0);
    let by_env = common::gputrace_env(&["report", "--json", traces], &[("GPUTRACE_CLASSIFY", rules.to_str().unwrap())]);
    assert_eq!(exposed(&by_env), 0);

    // The audit names the rule file's line and the built-in NCCL rule's kernels.
    let out = gputrace(&["report", "--explain-classes", traces]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("Classification: which rule"), "{stdout}");
    assert!(stdout.contains("NCCL") && stdout.contains("built-in"), "{stdout}");
    assert!(stdout.contains("Exposed communication by library and operation"), "{stdout}");
    let out = gputrace(&["report", "--explain-classes", "--classify", rules.to_str().unwrap(), traces]);
    assert!(
        text(&out.stdout).contains(&format!("{}:1", rules.display())),
        "{}",
        text(&out.stdout)
    );

    // A bad file: one line naming the file, the line and what is wrong; no panic.
    std::fs::write(&rules, "[[rule]]\npattern = \"x\"\ncategory = \"teleport\"\n").unwrap();
    let out = gputrace(&["report", "--classify", rules.to_str().unwrap(), traces]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("{}:3:", rules.display())) && err.contains("teleport"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let out = gputrace(&["compare", "--classify", "/nonexistent/rules.toml", traces]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("/nonexistent/rules.toml: cannot read"),
        "{}",
        text(&out.stderr)
    );
}
