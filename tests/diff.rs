//! `gputrace diff` on synthetic jobs whose deltas are known by construction:
//! the same job with twice the steps launches every kernel exactly twice as
//! often; a job against itself has no delta at all.

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
