//! Real PyTorch-profiler traces (`../shared/traces`, imported with
//! gputrace-kineto) against the numbers Holistic Trace Analysis and
//! TraceLens computed on the same files (`reference_numbers.csv`): span,
//! idle, compute and communication agree to the µs wherever the definitions
//! agree. The skipped rows are the differences docs/metrics.md explains.
//! Skips with a message when the folder is absent; the large traces run
//! only with `GPUTRACE_REFERENCE_ALL=1` (all of them agree too).

use gputrace_analysis::{analyze, DeviceReport, Options};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const TRACES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/traces");

/// Traces larger than this (compressed) are checked only with
/// `GPUTRACE_REFERENCE_ALL=1`: a debug build imports them slowly.
const SMALL_TRACE_BYTES: u64 = 800_000;

/// One CSV line, honoring double quotes around fields with commas.
fn csv_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => fields.push(String::new()),
            c => fields.last_mut().expect("one field at least").push(c),
        }
    }
    fields
}

/// The trace a CSV row means: the file itself, or for a directory the
/// `.json.gz` of that rank in it.
fn resolve(root: &Path, file: &str, rank: &str) -> Option<PathBuf> {
    let p = root.join(file);
    if !file.ends_with('/') {
        return Some(p);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir(&p)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|f| f.to_string_lossy().ends_with(".json.gz"))
        .collect();
    found.sort();
    if found.len() == 1 {
        return found.pop();
    }
    found
        .into_iter()
        .find(|f| f.to_string_lossy().ends_with(&format!("rank-{rank}.json.gz")))
}

/// Why a row is not expected to match; `None` if it is.
fn known_difference(file: &str, tool: &str) -> Option<&'static str> {
    let hta = tool.starts_with("HTA");
    if hta && !tool.contains("include_last_profiler_step=True") {
        return Some("HTA drops the last profiler step");
    }
    if hta && tool.contains("HTA_DISABLE_NS_ROUNDING=1") {
        return None;
    }
    let float_ns = ["nccl_parser_config", "ns_resolution_trace", "amd_trace", "TraceLens@"];
    if hta && float_ns.iter().any(|f| file.contains(f)) {
        return Some("HTA rounds fractional µs inward");
    }
    if hta && (file.contains("trace_diff/test") || file.contains("negative_queue_length")) {
        return Some("HTA leaves out GPU events not linked to a CPU op");
    }
    if hta && file.contains("critical_path/alexnet") {
        return Some("HTA counts Kineto cuda_sync records as GPU events");
    }
    if !hta && file.contains("ns_resolution_trace") {
        return Some("TraceLens reads absolute µs through f64 (0.25 µs steps)");
    }
    None
}

#[test]
fn span_idle_compute_and_communication_match_hta_and_tracelens() {
    let root = Path::new(TRACES);
    let Ok(csv) = std::fs::read_to_string(root.join("reference_numbers.csv")) else {
        eprintln!("skipped: {} is absent", root.display());
        return;
    };
    type Field = fn(&DeviceReport) -> u64;
    let mut rows: Vec<(String, Field, f64)> = Vec::new();
    let mut paths: BTreeMap<PathBuf, Vec<usize>> = BTreeMap::new();
    let mut skipped = 0;
    let all = std::env::var_os("GPUTRACE_REFERENCE_ALL").is_some();
    let mut deferred = 0;
    for line in csv.lines().skip(1) {
        let f = csv_fields(line);
        let [_, file, rank, tool, metric, value, ..] = f.as_slice() else {
            continue;
        };
        let field: Field = match metric.as_str() {
            "gpu_timeline.total_time_us" | "temporal_breakdown.kernel_time(us)" => |d| d.span_ns,
            "gpu_timeline.idle_time_us" | "temporal_breakdown.idle_time(us)" => |d| d.idle_ns,
            "gpu_timeline.total_comm_time_us" => |d| d.communication_ns,
            "temporal_breakdown.compute_time(us)" => |d| d.compute_ns,
            _ => continue,
        };
        if known_difference(file, tool).is_some() {
            skipped += 1;
            continue;
        }
        let path = resolve(root, file, rank).unwrap_or_else(|| panic!("no trace for {file} rank {rank}"));
        if !all && std::fs::metadata(&path).map_or(0, |m| m.len()) > SMALL_TRACE_BYTES {
            deferred += 1;
            continue;
        }
        paths.entry(path).or_default().push(rows.len());
        rows.push((
            format!("{file} rank {rank} {metric} [{tool}]"),
            field,
            value.parse().expect("a number"),
        ));
    }
    // Import and analyze each trace once, in parallel (debug builds parse JSON slowly).
    let devices: Vec<(PathBuf, DeviceReport)> = std::thread::scope(|s| {
        let handles: Vec<_> = paths
            .keys()
            .map(|path| {
                s.spawn(move || {
                    let trace = gputrace_kineto::to_trace(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                    let report = analyze(
                        &[trace],
                        &Options {
                            threads: 1,
                            ..Options::default()
                        },
                    )
                    .expect("analyze");
                    // Each of these traces has one GPU with work; the header may list more.
                    let device = report.ranks[0].devices.iter().max_by_key(|d| d.span_ns).cloned().expect("a device");
                    (path.clone(), device)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("import thread")).collect()
    });
    let mut failures = Vec::new();
    for (path, device) in &devices {
        for &i in &paths[path] {
            let (what, field, reference) = &rows[i];
            let ours_us = field(device) as f64 / 1e3;
            if (ours_us - reference).abs() > 1.0 {
                failures.push(format!("{what}: gputrace {ours_us:.3} µs, reference {reference}"));
            }
        }
    }
    let checked = rows.len();
    assert!(
        failures.is_empty(),
        "{} of {checked} differ by more than 1 µs:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        checked >= if all { 50 } else { 20 },
        "only {checked} rows checked ({skipped} skipped)"
    );
    eprintln!(
        "{checked} reference numbers agree to the µs; {skipped} skipped as explained differences; \
         {deferred} on large traces left for GPUTRACE_REFERENCE_ALL=1"
    );
}
