//! Throughput of the report analysis on a synthetic job read from disk.
//!
//! `cargo bench -p gputrace-analysis --bench report`
//!
//! Environment: `GPUTRACE_BENCH_RANKS` (default 4) and
//! `GPUTRACE_BENCH_EVENTS` (events per rank, default 2,000,000). Files go to
//! a temporary directory that is removed at the end. Prints events/s for
//! one file on one core (the analysis is single-threaded per file), for
//! the whole job, and for plain decoding of the same file as a ceiling.

use gputrace_analysis::{analyze, analyze_file, Options};
use gputrace_format::TraceFile;
use gputrace_synth::{write_job, JobConfig};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Counts live heap bytes and their peak, to show what the analysis itself
/// holds (mapped trace files are not heap).
struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// Safety: every call is forwarded to the system allocator with the same
// arguments; the counters only observe sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Safety: same layout as given, per GlobalAlloc's contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Safety: `ptr` came from `alloc` above with this layout.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Peak heap growth while `f` runs, in bytes.
fn heap_peak_during<T>(f: impl FnOnce() -> T) -> (usize, T) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f();
    (PEAK.load(Ordering::Relaxed) - base, out)
}

fn env_u64(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .unwrap_or(default)
}

fn rate(events: u64, d: Duration) -> String {
    format!("{:.1} M events/s", events as f64 / d.as_secs_f64() / 1e6)
}

/// Peak resident memory of this process, from /proc (Linux), in MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn best_of<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = (Duration::MAX, None);
    for _ in 0..runs {
        let t = Instant::now();
        let out = f();
        let d = t.elapsed();
        if d < best.0 {
            best = (d, Some(out));
        }
    }
    (best.0, best.1.expect("at least one run"))
}

fn main() {
    let ranks = env_u64("GPUTRACE_BENCH_RANKS", 4) as u32;
    let per_rank = env_u64("GPUTRACE_BENCH_EVENTS", 2_000_000);
    let base = JobConfig::default();
    let steps = (per_rank / base.events_per_step()).max(2) as u32;
    let cfg = JobConfig {
        ranks,
        steps,
        stall_step: Some(steps / 2),
        ..base
    };
    let dir = std::env::temp_dir().join(format!("gputrace-bench-report-{}", std::process::id()));

    let t = Instant::now();
    let files = write_job(&cfg, &dir).expect("write the synthetic job");
    let bytes: u64 = files.iter().map(|(_, s)| s.bytes).sum();
    println!(
        "synthetic job: {ranks} ranks x {steps} steps, {} MiB, written in {:.2?}",
        bytes >> 20,
        t.elapsed()
    );

    let traces: Vec<TraceFile> = files.iter().map(|(p, _)| TraceFile::open(p).expect("open")).collect();
    let one = traces[0].event_total();
    let all: u64 = traces.iter().map(|t| t.event_total()).sum();
    let opts = Options::default();

    // The fastest plain scan the format offers: every chunk through a callback.
    let (decode, n) = best_of(3, || {
        let mut dec = traces[0].decoder();
        let mut n = 0u64;
        for i in 0..traces[0].chunks().len() {
            dec.for_each(i, |_| n += 1).expect("decode");
        }
        n
    });
    assert_eq!(n, one);
    println!(
        "decode only, 1 file:      {one:>11} events in {decode:>10.2?}  {}",
        rate(one, decode)
    );

    let (d1, r) = best_of(3, || analyze_file(&traces[0], 0, &opts).expect("analyze"));
    let dev = &r.report.devices[0];
    assert_eq!(
        dev.time.compute_ns + dev.time.exposed_communication_ns + dev.time.exposed_transfer_ns + dev.time.idle_ns,
        dev.time.span_ns
    );
    println!("analysis, 1 file, 1 core: {one:>11} events in {d1:>10.2?}  {}", rate(one, d1));

    let (heap, _) = heap_peak_during(|| analyze_file(&traces[0], 0, &opts).expect("analyze"));
    println!(
        "peak heap of one file's analysis: {:.1} MiB for {one} events",
        heap as f64 / (1 << 20) as f64
    );

    let sequential = Options {
        threads: 1,
        ..Options::default()
    };
    let (dj, _) = best_of(2, || analyze(&traces, &sequential).expect("analyze"));
    println!("analysis, whole job, 1 thread:  {all:>11} events in {dj:>10.2?}  {}", rate(all, dj));
    let (dp, report) = best_of(2, || analyze(&traces, &opts).expect("analyze"));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "analysis, whole job, {cores} threads: {all:>11} events in {dp:>10.2?}  {}",
        rate(all, dp)
    );
    println!(
        "findings: {}",
        report.findings.iter().map(|f| f.rule.as_str()).collect::<Vec<_>>().join(", ")
    );
    if let Some(mib) = peak_rss_mib() {
        println!("peak RSS of the process (mapped files included): {mib:.0} MiB");
    }
    drop(traces);
    std::fs::remove_dir_all(&dir).ok();
}
