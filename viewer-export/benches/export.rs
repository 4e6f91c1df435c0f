//! Export throughput on a synthetic job: events per second on one core for
//! Perfetto protobuf and Chrome JSON, and output bytes per event.
//!
//! `cargo bench -p gputrace-viewer --bench export` (std::time only, no
//! harness). The job size is set by `EXPORT_BENCH_RANKS` (default 4) and
//! `EXPORT_BENCH_STEPS` (default 60); each run is repeated
//! `EXPORT_BENCH_REPS` times (default 5) and the best is reported. Writers
//! are timed end to end from the memory-mapped trace (chunk decoding
//! included) into a byte-counting sink. The decode-only line reads every
//! event in file order; the two "merged per track group" lines read them as
//! the walk does (events) and as the report does (spans): ceilings of what
//! an export could reach with either reader. `EXPORT_BENCH_ONLY=<prefix>`
//! runs only the lines whose name starts with it (for profiling).

use gputrace_format::*;
use gputrace_synth::{schedule, write_rank, JobConfig};
use gputrace_viewer::{ChromeJson, Exporter, Filter, Job, Perfetto};
use std::io::{self, Write};
use std::time::{Duration, Instant};

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

    let only = std::env::var("EXPORT_BENCH_ONLY").ok();
    let wants = |name: &str| only.as_deref().is_none_or(|o| name.starts_with(o));

    if wants("decode only") {
        let (t, n) = best(reps, || {
            traces
                .iter()
                .map(|t| t.events().inspect(|e| assert!(e.is_ok())).count() as u64)
                .sum()
        });
        assert_eq!(n, events);
        println!("{:<34} {:>8.2} M events/s", "decode only", events as f64 / t.as_secs_f64() / 1e6);
    }

    // Ceilings of the walk's reading: each input's chunks merged per group
    // of tracks as the walk merges them (a GPU's streams together, every
    // other track alone), as full events (what the walk reads) and as
    // spans (start, end, correlation, dictionary index: what the report
    // reads; collectives and losses have no spans and are left out).
    if wants("merged per track group, events") {
        let (t, n) = best(reps, || {
            let mut n = 0u64;
            for trace in &traces {
                for ids in track_groups(trace) {
                    let mut merge = trace.merge(ids);
                    while let Some(e) = merge.next_event().expect("decodes") {
                        std::hint::black_box(e);
                        n += 1;
                    }
                }
            }
            n
        });
        assert_eq!(n, events);
        println!(
            "{:<34} {:>8.2} M events/s",
            "merged per track group, events",
            n as f64 / t.as_secs_f64() / 1e6
        );
    }
    if wants("merged per track group, spans") {
        let (t, n) = best(reps, || {
            let mut n = 0u64;
            for trace in &traces {
                for ids in track_groups(trace) {
                    let ids = ids.into_iter().filter(|&i| trace.chunks()[i].kind.has_spans()).collect();
                    trace
                        .for_each_span_merged(
                            ids,
                            |_| (),
                            |sp, _, _| {
                                std::hint::black_box(sp);
                                n += 1;
                            },
                        )
                        .expect("decodes");
                }
            }
            n
        });
        println!(
            "{:<34} {:>8.2} M events/s",
            "merged per track group, spans",
            n as f64 / t.as_secs_f64() / 1e6
        );
    }

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
    for (name, run) in runs {
        if !wants(name) {
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

/// Chunk indexes of `trace` by the groups of tracks the export walks
/// together: all streams of one GPU, every other track alone.
fn track_groups(trace: &TraceFile) -> Vec<Vec<usize>> {
    let mut groups: Vec<(Track, Vec<usize>)> = Vec::new();
    for (i, c) in trace.chunks().iter().enumerate() {
        let key = match c.track {
            Track::Gpu { device, .. } => Track::Gpu {
                device,
                context: ContextId(0),
                stream: StreamId(0),
            },
            track => track,
        };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, ids)) => ids.push(i),
            None => groups.push((key, vec![i])),
        }
    }
    groups.into_iter().map(|(_, ids)| ids).collect()
}
