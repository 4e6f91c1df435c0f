//! The JSON example in docs/metrics.md names only fields that a real report has.

use gputrace_analysis::*;
use gputrace_synth::{schedule, write_rank, JobConfig};
use serde_json::Value;

/// Every key of `doc` (except the `"..."` placeholder) exists in `real`, recursively;
/// an empty object or array in `doc` stands for "abbreviated".
fn assert_documented_keys_exist(doc: &Value, real: &Value, path: &str) {
    match (doc, real) {
        (Value::Object(d), Value::Object(r)) => {
            for (k, v) in d.iter().filter(|(k, _)| k.as_str() != "...") {
                let inner = r
                    .get(k)
                    .unwrap_or_else(|| panic!("docs/metrics.md documents {path}.{k}, which the report lacks"));
                assert_documented_keys_exist(v, inner, &format!("{path}.{k}"));
            }
        }
        (Value::Array(d), Value::Array(r)) => {
            if let (Some(d0), Some(r0)) = (d.first(), r.first()) {
                assert_documented_keys_exist(d0, r0, &format!("{path}[0]"));
            }
        }
        // Scalars and null: only the name matters here.
        _ => {}
    }
}

#[test]
fn documented_device_fields_exist() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md")).expect("docs/metrics.md");
    let block = doc
        .split("```json\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("a ```json block");
    let documented: Value = serde_json::from_str(block).expect("the example is valid JSON");

    let cfg = JobConfig {
        ranks: 1,
        steps: 4,
        layers: 3,
        stall_step: Some(2),
        ..JobConfig::default()
    };
    let (bytes, _) = write_rank(&cfg, &schedule(&cfg), 0, Vec::new()).unwrap();
    let trace = gputrace_format::TraceFile::from_bytes("r0.gtrace", bytes).unwrap();
    let report = serde_json::to_value(analyze(&[trace], &Options::default()).unwrap()).unwrap();
    let device = &report["ranks"][0]["devices"][0];
    assert!(
        device["longest_gaps"].as_array().is_some_and(|g| !g.is_empty()),
        "the example job has gaps"
    );
    assert_documented_keys_exist(&documented, device, "device");
    for top in [
        "ranks",
        "totals",
        "top_kernels",
        "copies",
        "findings",
        "cost",
        "lossy",
        "communication_patterns",
        "schema_version",
        "communicators",
        "collectives",
        "hta_compat",
        "productive",
    ] {
        assert!(report.get(top).is_some(), "{top}");
    }
    // Every field of the productive section is documented, and only those.
    let line = doc
        .lines()
        .find_map(|l| l.strip_prefix("Each `productive` entry: "))
        .expect("docs/metrics.md lists the fields of productive");
    let documented: Vec<&str> = line.split('`').skip(1).step_by(2).collect();
    let entry = report["productive"].as_object().expect("productive is an object");
    for k in &documented {
        assert!(
            entry.contains_key(*k),
            "docs/metrics.md documents productive.{k}, which the report lacks"
        );
    }
    assert_eq!(
        documented.len(),
        entry.len(),
        "every productive field is documented: {:?}",
        entry.keys().collect::<Vec<_>>()
    );
    assert!(report["ranks"][0]["productive"].is_object());
    // The field lists of the collectives table and the communicators.
    for (prefix, top) in [
        ("Each `collectives` entry: ", "collectives"),
        ("Each `communicators` entry: ", "communicators"),
    ] {
        let line = doc
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("docs/metrics.md lists the fields of {top}"));
        let entry = report[top][0].as_object().unwrap_or_else(|| panic!("the example job has {top}"));
        let documented: Vec<&str> = line.split('`').skip(1).step_by(2).collect();
        assert!(documented.len() >= 6, "{line}");
        for k in &documented {
            assert!(
                entry.contains_key(*k),
                "docs/metrics.md documents {top}[0].{k}, which the report lacks"
            );
        }
        assert_eq!(
            documented.len(),
            entry.len(),
            "every {top} field is documented: {:?}",
            entry.keys().collect::<Vec<_>>()
        );
    }
}
