//! Scale benchmark: compare a synthetic job of many ranks.
//!
//! `RANKS=1024 EVENTS=200000 cargo bench -p gputrace-compare --bench scale`
//! writes the job to a temporary directory (not timed), then times reading
//! every rank into its summary (all cores, one rank per thread at a time, as
//! `gputrace compare` does) and the comparison itself. Prints peak RSS.

use gputrace_compare::{compare_summaries, summarize, Options};
use gputrace_format::TraceFile;
use gputrace_synth::{write_job, JobConfig};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Instant;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

fn main() {
    let ranks = env("RANKS", 1024) as u32;
    let events = env("EVENTS", 200_000);
    let base = JobConfig {
        ranks,
        slow_rank: Some(ranks / 3),
        ..JobConfig::default()
    };
    let cfg = JobConfig {
        steps: (events / base.events_per_step()).max(1) as u32,
        ..base
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let t0 = Instant::now();
    let files = write_job(&cfg, dir.path()).expect("write job");
    let total_events: u64 = files.iter().map(|(_, s)| s.events).sum();
    println!(
        "generated {ranks} ranks x {} steps = {total_events} events in {:.1} s (not timed below)",
        cfg.steps,
        t0.elapsed().as_secs_f64()
    );
    let rss_before = peak_rss_mb();

    let t0 = Instant::now();
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<(usize, gputrace_compare::RankSummary, u64)>> = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= files.len() {
                    break;
                }
                let t = TraceFile::open(&files[i].0).expect("open");
                let sum = summarize(&t, i as u32).expect("summarize");
                out.lock().unwrap().push((i, sum, t.header().start_clock.realtime_ns));
            });
        }
    });
    let mut v = out.into_inner().unwrap();
    v.sort_by_key(|x| x.0);
    let read = t0.elapsed().as_secs_f64();
    let starts: Vec<u64> = v.iter().map(|x| x.2).collect();
    let sums = v.into_iter().map(|x| x.1).collect();
    let t1 = Instant::now();
    let c = compare_summaries(sums, &starts, &Options::default()).expect("compare");
    let cmp = t1.elapsed().as_secs_f64();
    println!(
        "compare: read+summarize {:.1} s ({:.1} M events/s on {workers} threads), match+align+rank {:.2} s, total {:.1} s; straggler rank {} ({}); peak RSS {:.0} MB (after generation: {:.0} MB)",
        read,
        total_events as f64 / read / 1e6,
        cmp,
        read + cmp,
        c.stragglers.first().map_or(u32::MAX, |s| s.rank),
        c.stragglers.first().map_or("none", |s| s.cause.name()),
        peak_rss_mb(),
        rss_before
    );
}
