//! Export throughput on a synthetic job: events per second on one core for
//! Perfetto protobuf and Chrome JSON, and output bytes per event.
//!
//! `cargo bench -p viewer-export --bench export` (std::time only, no
//! harness). The job size is set by `EXPORT_BENCH_RANKS` (default 4) and
//! `EXPORT_BENCH_STEPS` (default 60); each run is repeated
//! `EXPORT_BENCH_REPS` times (default 5) and the best is reported. Writers
//! are timed end to end from the memory-mapped trace (chunk decoding
//! included) into a byte-counting sink; the decode-only line shows how much
//! of that is reading.

use gputrace_format::TraceFile;
use gputrace_synth::{schedule, write_rank, JobConfig};
use std::io::{self, Write};
use std::time::{Duration, Instant};
use viewer_export::{ChromeJson, Exporter, Filter, Job, Perfetto};

/// A sink that only counts.
struct Count(u64);

impl Write for Count {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0 += b.len() as u64;
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn env(name: &str, default: u32) -> u32 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn best(reps: u32, mut f: impl FnMut() -> u64) -> (Duration, u64) {
    let mut best = Duration::MAX;
    let mut out = 0;
    for _ in 0..reps {
        let t = Instant::now();
        out = std::hint::black_box(f());
        best = best.min(t.elapsed());
    }
    (best, out)
}

fn main() {
    let cfg = JobConfig {
        ranks: env("EXPORT_BENCH_RANKS", 4),
        steps: env("EXPORT_BENCH_STEPS", 60),
        ..JobConfig::default()
    };
    let reps = env("EXPORT_BENCH_REPS", 5);
    let sched = schedule(&cfg);
    let traces: Vec<TraceFile> = (0..cfg.ranks)
        .map(|r| {
            TraceFile::from_bytes(
                format!("rank{r}"),
                write_rank(&cfg, &sched, r, Vec::new()).expect("synthetic rank").0,
            )
            .expect("readable")
        })
        .collect();
    let events: u64 = traces.iter().map(|t| t.event_total()).sum();
    let job = Job::new(traces.iter());
    println!(
        "synthetic job: {} ranks x {} steps x {} layers = {events} events (best of {reps})",
        cfg.ranks, cfg.steps, cfg.layers
    );

    let (t, n) = best(reps, || {
        traces
            .iter()
            .map(|t| t.events().inspect(|e| assert!(e.is_ok())).count() as u64)
            .sum()
    });
    assert_eq!(n, events);
    println!("{:<34} {:>8.2} M events/s", "decode only", events as f64 / t.as_secs_f64() / 1e6);

    type Run<'a> = &'a dyn Fn(&mut Count) -> u64;
    let runs: [(&str, Run); 3] = [
        ("perfetto (with args)", &|out| {
            Perfetto::default()
                .export(&job, &Filter::default(), out)
                .expect("export")
                .walk
                .events
        }),
        ("perfetto (no args/counters/nvtx)", &|out| {
            Perfetto {
                args: false,
                counter_bins: 0,
                nvtx_on_gpu: false,
            }
            .export(&job, &Filter::default(), out)
            .expect("export")
            .walk
            .events
        }),
        ("chrome json", &|out| {
            ChromeJson.export(&job, &Filter::default(), out).expect("export").walk.events
        }),
    ];
    let only = std::env::var("EXPORT_BENCH_ONLY").ok();
    for (name, run) in runs {
        if only.as_deref().is_some_and(|o| !name.starts_with(o)) {
            continue;
        }
        let mut bytes = 0;
        let (t, n) = best(reps, || {
            let mut sink = Count(0);
            let n = run(&mut sink);
            bytes = sink.0;
            n
        });
        assert_eq!(n, events);
        println!(
            "{name:<34} {:>8.2} M events/s  {:>7.1} bytes/event  {:>8.1} MB/s  ({:.3} s, {} bytes)",
            events as f64 / t.as_secs_f64() / 1e6,
            bytes as f64 / events as f64,
            bytes as f64 / t.as_secs_f64() / 1e6,
            t.as_secs_f64(),
            bytes
        );
    }
}
