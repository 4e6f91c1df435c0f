//! Scale benchmark: generate and write a large synthetic job through the
//! real writer, one file per rank.
//!
//! `RANKS=1024 EVENTS=1000000 cargo bench -p gputrace-synth --bench scale`
//! (defaults: 1,024 ranks × 100,000 events). Files go to a temporary
//! directory that is removed afterwards; prints time, rate and bytes.

use gputrace_synth::{write_job, JobConfig};
use std::time::Instant;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let ranks = env("RANKS", 1024) as u32;
    let events = env("EVENTS", 100_000);
    let base = JobConfig {
        ranks,
        ..JobConfig::default()
    };
    let steps = (events / base.events_per_step()).max(1) as u32;
    let cfg = JobConfig { steps, ..base };
    let dir = tempfile::tempdir().expect("temp dir");
    let t0 = Instant::now();
    let files = write_job(&cfg, dir.path()).expect("write job");
    let secs = t0.elapsed().as_secs_f64();
    let total_events: u64 = files.iter().map(|(_, s)| s.events).sum();
    let total_bytes: u64 = files.iter().map(|(_, s)| s.bytes).sum();
    println!(
        "{} ranks x {} steps: {} events, {} bytes ({:.2} bytes/event) in {:.1} s = {:.1} M events/s (simulation + encode + write, one thread)",
        ranks,
        steps,
        total_events,
        total_bytes,
        total_bytes as f64 / total_events as f64,
        secs,
        total_events as f64 / secs / 1e6
    );
}
