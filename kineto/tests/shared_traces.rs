//! Every real trace under `../shared/traces`: import it and compare event
//! counts with an independent count made by `serde_json` over the same file.

use gputrace_format::{Event, EventKind};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

const TRACES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/traces");

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).expect("read dir").flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            collect(&p, out);
        } else {
            let name = p.to_string_lossy();
            if name.ends_with(".json.gz") || name.ends_with(".json") {
                out.push(p);
            }
        }
    }
}

/// The fields the independent count looks at; everything else is skipped.
#[derive(serde::Deserialize)]
struct Entry {
    #[serde(default)]
    cat: Option<String>,
    #[serde(default)]
    ph: Option<String>,
    #[serde(default)]
    args: Option<Args>,
}

#[derive(serde::Deserialize)]
struct Args {
    #[serde(default, rename = "Collective name")]
    collective: Option<serde::de::IgnoredAny>,
}

#[derive(serde::Deserialize)]
struct Doc {
    #[serde(rename = "traceEvents")]
    trace_events: Vec<Entry>,
}

/// Counts by gputrace kind, computed from the whole document with serde_json
/// (the importer's scanner and mapping are not involved).
fn independent_counts(path: &Path) -> BTreeMap<EventKind, u64> {
    let mut raw = Vec::new();
    std::fs::File::open(path).unwrap().read_to_end(&mut raw).unwrap();
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut text = Vec::new();
        flate2::read::MultiGzDecoder::new(&raw[..]).read_to_end(&mut text).unwrap();
        raw = text;
    }
    let doc: Doc = serde_json::from_slice(&raw).unwrap();
    let mut counts = BTreeMap::new();
    for e in doc.trace_events {
        if e.ph.as_deref() == Some("M") {
            continue;
        }
        let kind = match e.cat.as_deref().unwrap_or("") {
            "kernel" | "Kernel" => EventKind::Kernel,
            "gpu_memcpy" | "Memcpy" => EventKind::Memcpy,
            "gpu_memset" | "Memset" => EventKind::Memset,
            "cuda_runtime" | "cuda_driver" | "Runtime" => EventKind::Api,
            "cuda_sync" => EventKind::Sync,
            _ => continue,
        };
        *counts.entry(kind).or_insert(0) += 1;
        if kind == EventKind::Kernel && e.args.is_some_and(|a| a.collective.is_some()) {
            *counts.entry(EventKind::Collective).or_insert(0) += 1;
        }
    }
    counts
}

/// Unoptimized builds parse about 40 times slower; there the large traces
/// are left to `cargo test --release` unless `KINETO_ALL_TRACES=1`.
const DEBUG_MAX_FILE: u64 = 1024 * 1024;

#[test]
fn every_shared_trace_imports_with_matching_counts() {
    if !Path::new(TRACES).is_dir() {
        shared_traces_absent(&format!("{TRACES} is absent (real Kineto traces are not available here)"));
        return;
    }
    let mut files = Vec::new();
    collect(Path::new(TRACES), &mut files);
    assert!(!files.is_empty(), "no traces under {TRACES}");
    let mut skipped = Vec::new();
    for path in &files {
        let size = std::fs::metadata(path).unwrap().len();
        if cfg!(debug_assertions) && size > DEBUG_MAX_FILE && std::env::var_os("KINETO_ALL_TRACES").is_none() {
            skipped.push(path.strip_prefix(TRACES).unwrap_or(path).display().to_string());
            continue;
        }
        let head: Vec<u8> = std::fs::read(path).unwrap().into_iter().take(64 * 1024).collect();
        assert!(gputrace_kineto::is_kineto(&head), "{} not detected", path.display());
        let mut bytes = Vec::new();
        let summary = gputrace_kineto::import(path, &mut bytes, &Default::default()).unwrap_or_else(|e| panic!("{e}"));
        let trace = gputrace_format::TraceFile::from_bytes(path, bytes).unwrap();
        let got = trace.event_counts();
        let want = independent_counts(path);
        for kind in [
            EventKind::Kernel,
            EventKind::Memcpy,
            EventKind::Memset,
            EventKind::Api,
            EventKind::Sync,
            EventKind::Collective,
        ] {
            assert_eq!(
                got.get(&kind).copied().unwrap_or(0),
                want.get(&kind).copied().unwrap_or(0),
                "{}: {} count",
                path.display(),
                kind.name()
            );
        }
        // Every element is accounted for: mapped, a flow, a Python call
        // (host stacks), or in a loss record.
        let mapped: u64 = summary
            .events
            .iter()
            .filter(|(k, _)| *k != "loss" && *k != "collective")
            .map(|(_, v)| v)
            .sum();
        assert_eq!(
            mapped + summary.flows + summary.python_calls + summary.unmapped_total(),
            summary.trace_events,
            "{}",
            path.display()
        );
        let lost: u64 = trace
            .events_of(&[EventKind::Loss])
            .map(|e| match e.unwrap() {
                Event::Loss(l) => l.count,
                _ => 0,
            })
            .sum();
        assert_eq!(lost, summary.unmapped_total());
        for e in trace.events() {
            let e = e.unwrap();
            assert!(e.end() >= e.start());
        }
        println!(
            "{}: {} trace events -> kernel {} memcpy {} memset {} api {} sync {} marker {} collective {}, {} flows, {} unmapped; {:.1}x smaller",
            path.strip_prefix(TRACES).unwrap_or(path).display(),
            summary.trace_events,
            got.get(&EventKind::Kernel).unwrap_or(&0),
            got.get(&EventKind::Memcpy).unwrap_or(&0),
            got.get(&EventKind::Memset).unwrap_or(&0),
            got.get(&EventKind::Api).unwrap_or(&0),
            got.get(&EventKind::Sync).unwrap_or(&0),
            got.get(&EventKind::Marker).unwrap_or(&0),
            got.get(&EventKind::Collective).unwrap_or(&0),
            summary.flows,
            summary.unmapped_total(),
            summary.input_bytes as f64 / summary.output_bytes as f64,
        );
    }
    if !skipped.is_empty() {
        skip::skip(&format!(
            "skipped {} trace(s) over {} bytes in this unoptimized build (run `cargo test --release -p gputrace-kineto --test shared_traces`, or set KINETO_ALL_TRACES=1): {}",
            skipped.len(),
            DEBUG_MAX_FILE,
            skipped.join(", ")
        ));
    }
}

/// The shared traces are absent: skip, saying so; under `CI=true` fail, so a
/// CI without them cannot pass these tests vacuously.
fn shared_traces_absent(what: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but {what}: the real traces must be present"
    );
    skip::skip(what);
}

#[path = "../../tests/common/skip.rs"]
mod skip;
