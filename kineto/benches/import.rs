//! Import throughput on the largest shared Kineto trace (or `KINETO_BENCH_FILE`).
//!
//! Prints the parse rate in MB/s of JSON text and of file bytes, events/s,
//! and the peak resident set (`VmHWM`). Run with
//! `cargo bench -p gputrace-kineto --bench import` (`KINETO_BENCH_THREADS=1`: one
//! parsing thread).

use std::path::{Path, PathBuf};
use std::time::Instant;

const TRACES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/traces");

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.to_string_lossy().ends_with(".json.gz") || p.to_string_lossy().ends_with(".json") {
            out.push(p);
        }
    }
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() {
    let file = match std::env::var_os("KINETO_BENCH_FILE") {
        Some(f) => PathBuf::from(f),
        None => {
            let mut all = Vec::new();
            collect(Path::new(TRACES), &mut all);
            match all.into_iter().max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)) {
                Some(p) => p,
                None => {
                    eprintln!("skipping: no traces under {TRACES} (set KINETO_BENCH_FILE)");
                    return;
                }
            }
        }
    };
    // `KINETO_BENCH_THREADS=N`: read on N threads (1: parse and inflate on
    // this one only); unset: one per core.
    // `KINETO_BENCH_UNCOMPRESSED=1`: chunks written without zstd, as the
    // commands other than `import` and `info` convert a trace in memory.
    let opts = gputrace_kineto::ImportOptions {
        threads: std::env::var("KINETO_BENCH_THREADS").ok().and_then(|t| t.parse().ok()).unwrap_or(0),
        writer: gputrace_format::WriterOptions {
            compress: std::env::var("KINETO_BENCH_UNCOMPRESSED").as_deref() != Ok("1"),
            ..Default::default()
        },
        ..Default::default()
    };
    let rss_before = peak_rss_kib().unwrap_or(0);
    let runs = 3;
    let mut best = f64::MAX;
    let mut first = None;
    let mut summary = None;
    for _ in 0..runs {
        let t = Instant::now();
        let s = gputrace_kineto::import(&file, std::io::sink(), &opts).expect("import");
        best = best.min(t.elapsed().as_secs_f64());
        first.get_or_insert(t.elapsed().as_secs_f64());
        summary = Some(s);
    }
    let s = summary.expect("at least one run");
    let events: u64 = s.events.values().sum();
    println!("file: {}", file.display());
    println!(
        "input {:.1} MB (JSON {:.1} MB), {} trace events -> {} gputrace events, output {:.2} MB (ratio {:.1}x of the file)",
        s.input_bytes as f64 / 1e6,
        s.json_bytes as f64 / 1e6,
        s.trace_events,
        events,
        s.output_bytes as f64 / 1e6,
        s.input_bytes as f64 / s.output_bytes.max(1) as f64
    );
    // A command runs the import once, in a fresh process: its memory
    // faulted in for the first time, its threads started.
    println!("first run (as in a fresh process): {:.3} s", first.unwrap_or(0.0));
    println!(
        "best of {runs}: {:.3} s = {:.0} MB/s of JSON ({:.0} MB/s of file), {:.2} M trace events/s, {:.2} M gputrace events/s{}",
        best,
        s.json_bytes as f64 / 1e6 / best,
        s.input_bytes as f64 / 1e6 / best,
        s.trace_events as f64 / 1e6 / best,
        events as f64 / 1e6 / best,
        if opts.threads == 1 { " (one thread)" } else { "" }
    );
    println!(
        "peak RSS (VmHWM): {:.1} MiB (before import: {:.1} MiB)",
        peak_rss_kib().unwrap_or(0) as f64 / 1024.0,
        rss_before as f64 / 1024.0
    );
}
