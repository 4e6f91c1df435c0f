//! `gputrace diff` on synthetic jobs whose deltas are known by construction:
//! the same job with twice the steps launches every kernel exactly twice as
//! often (and runs twice the steps and collectives); a job against itself has
//! no delta at all; 2 ranks against 4 has a scaling section.

mod common;
use common::{gputrace as run, text};

#[test]
fn doubled_steps_double_every_kernel_and_trip_fail_if_slower() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    common::demo(&a, 2, 2, 3);
    common::demo(&b, 2, 4, 3);
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());

    let out = run(&["diff", a, b, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let kernels = d["kernels"].as_array().unwrap();
    assert!(kernels.len() > 5, "{kernels:?}");
    for k in kernels {
        assert_eq!(k["count"]["b"].as_u64().unwrap(), 2 * k["count"]["a"].as_u64().unwrap(), "{k}");
        assert!(k["time"]["delta"].as_i64().unwrap() > 0, "{k}");
    }
    // Biggest regression first.
    let deltas: Vec<i64> = kernels.iter().map(|k| k["time"]["delta"].as_i64().unwrap()).collect();
    assert!(deltas.windows(2).all(|w| w[0] >= w[1]), "{deltas:?}");
    let compute = d["categories"].as_array().unwrap().iter().find(|c| c["name"] == "compute").unwrap();
    let pct = compute["pct"].as_f64().unwrap();
    assert!((pct - 100.0).abs() < 5.0, "compute per GPU should about double: {compute}");
    assert!(d["verdict"].as_str().unwrap().contains("slower"), "{}", d["verdict"]);
    assert_eq!(
        (d["steps"]["count"]["a"].as_u64(), d["steps"]["count"]["b"].as_u64()),
        (Some(2), Some(4)),
        "{}",
        d["steps"]
    );
    let collectives = d["collectives"].as_array().unwrap();
    assert!(!collectives.is_empty());
    for c in collectives {
        assert_eq!(c["count"]["b"].as_u64().unwrap(), 2 * c["count"]["a"].as_u64().unwrap(), "{c}");
        assert_eq!(c["bytes"]["b"].as_u64().unwrap(), 2 * c["bytes"]["a"].as_u64().unwrap(), "{c}");
        assert!(c["busbw_gbps"]["a"].as_f64().unwrap() > 0.0, "{c}");
    }
    assert!(d.get("scaling").is_none(), "same GPU count: no scaling section");

    let out = run(&["diff", a, b, "--fail-if-slower", "5%"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let out = run(&["diff", b, a, "--fail-if-slower", "5%"]);
    assert_eq!(out.status.code(), Some(0), "B faster: {}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("B is ") && text(&out.stdout).contains("faster"));
}

#[test]
fn a_job_against_itself_has_no_delta() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    common::demo(&a, 2, 2, 2);
    let a = a.to_str().unwrap();
    let out = run(&["diff", a, a, "--json", "--fail-if-slower", "0%"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(d["span"]["delta"], 0);
    assert!(d["categories"].as_array().unwrap().iter().all(|c| c["delta"] == 0));
    assert!(d["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .all(|k| k["time"]["delta"] == 0 && k["count"]["delta"] == 0));
    let steps = &d["steps"];
    assert!(steps["count"]["a"].as_u64().unwrap() > 0, "{steps}");
    for key in ["count", "p50", "p95", "mean_duration"] {
        assert_eq!(steps[key]["delta"], 0, "{key}: {steps}");
    }
    assert_eq!(steps["mean"].as_array().unwrap().len(), 4);
    assert!(steps["mean"].as_array().unwrap().iter().all(|m| m["delta"] == 0), "{steps}");
    assert_eq!(steps["slowest"][0], steps["slowest"][1]);
    let collectives = d["collectives"].as_array().unwrap();
    assert!(!collectives.is_empty());
    for c in collectives {
        assert_eq!(c["matched_by"], "name", "the demo names its communicator: {c}");
        for key in ["count", "bytes", "time"] {
            assert_eq!(c[key]["delta"], 0, "{c}");
        }
        assert_eq!(c["busbw_gbps"]["delta"], 0.0, "{c}");
    }
    assert!(d.get("scaling").is_none());
}

#[test]
fn two_ranks_against_four_has_a_scaling_section() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    common::demo(&a, 2, 3, 2);
    common::demo(&b, 4, 3, 2);
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let out = run(&["diff", a, b, "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let d: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &d["scaling"];
    assert_eq!(s["gpus"], serde_json::json!([2, 4]), "{s}");
    // The demo counts tokens in its step marks.
    assert_eq!(s["basis"], "tokens/s");
    let (ta, tb) = (s["throughput"][0].as_f64().unwrap(), s["throughput"][1].as_f64().unwrap());
    let e = s["efficiency"].as_f64().unwrap();
    assert!(
        (e - tb / (2.0 * ta)).abs() < 1e-9,
        "efficiency = throughput_4 / (4/2 × throughput_2): {s}"
    );
    assert!(e > 0.5 && e < 1.5, "{s}");
    let lost = s["lost"].as_array().unwrap();
    assert_eq!(lost.len(), 4, "{s}");
    let sum: f64 = lost.iter().map(|l| l["delta"].as_f64().unwrap()).sum();
    assert!(
        (sum - s["lost_ns_per_unit"].as_f64().unwrap()).abs() < 1e-6,
        "the categories add up to the lost time: {s}"
    );
    // The demo job has a straggler (report's `stragglers` finding) in each run.
    assert!(s["stragglers"].as_array().unwrap().iter().any(|x| x["run"] == "B"), "{s}");
    // The communicator is named in both runs: matched by name across 2 and 4 ranks.
    let c = &d["collectives"][0];
    assert_eq!(
        (c["matched_by"].as_str(), c["nranks"].clone()),
        (Some("name"), serde_json::json!([2, 4])),
        "{c}"
    );
    assert!(d["verdict"].as_str().unwrap().contains("scaling efficiency"), "{}", d["verdict"]);

    let out = run(&["diff", a, b]);
    assert!(out.status.success());
    let t = text(&out.stdout);
    assert!(
        t.contains("scaling 2 -> 4 GPUs on tokens/s") && t.contains("collectives") && t.contains("p50 step"),
        "{t}"
    );
}

#[test]
fn bad_inputs_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    common::demo(&a, 2, 1, 2);
    let bad = dir.path().join("bad.gtrace");
    std::fs::write(&bad, b"not a trace").unwrap();
    let out = run(&["diff", a.to_str().unwrap(), bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("bad.gtrace") && !err.contains("panicked"), "{err}");
    let out = run(&["diff", a.to_str().unwrap(), a.to_str().unwrap(), "--fail-if-slower", "x"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("not a percentage"), "{}", text(&out.stderr));
}
