//! Format benchmark: bytes per event, encode+compress and decode rates on a
//! training-like mix (synthetic job: ~300 kernel names, launches, NCCL
//! all-reduces with collective metadata, H2D/D2H copies, markers).
//!
//! Run: `cargo bench -p gputrace-format --bench format` (prints a table;
//! numbers go to BENCHMARKS.md). Single-threaded throughout.

use gputrace_format::*;
use gputrace_synth::{schedule, write_rank, JobConfig};
use std::collections::BTreeMap;
use std::time::Instant;

/// CPU time of this thread: unaffected by other processes competing for the
/// cores (wall time is reported too).
fn thread_cpu() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: valid out-pointer; the call only writes `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn main() {
    let steps: u32 = std::env::var("STEPS").ok().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let cfg = JobConfig {
        ranks: 2,
        steps,
        ..JobConfig::default()
    };
    let sched = schedule(&cfg);
    let (bytes, _) = write_rank(&cfg, &sched, 0, Vec::new()).expect("synthetic trace");
    let src = TraceFile::from_bytes("bench-source", bytes).expect("readable");
    let events: Vec<Event> = src.events().collect::<Result<_, _>>().expect("decodes");
    let strings: Vec<String> = (0..src.string_count()).map(|i| src.name(StringId(i as u32)).into_owned()).collect();
    let mut mix: BTreeMap<&str, u64> = BTreeMap::new();
    for e in &events {
        *mix.entry(e.kind().name()).or_default() += 1;
    }
    let kernel_names: std::collections::BTreeSet<_> = events
        .iter()
        .filter_map(|e| if let Event::Kernel(k) = e { Some(k.name) } else { None })
        .collect();
    println!(
        "mix: {} events, {} distinct kernel names: {:?}",
        events.len(),
        kernel_names.len(),
        mix
    );

    // Encode + compress: intern the strings, push every event, finish.
    let mut best_enc = f64::MAX;
    let mut cpu_enc = f64::MAX;
    let mut out_len = 0;
    // One output buffer reused across runs, as a file writer reuses its
    // BufWriter: page-faulting fresh memory is not the format's cost.
    let mut sink: Vec<u8> = Vec::with_capacity(16 << 20);
    for _ in 0..5 {
        sink.clear();
        let t0 = Instant::now();
        let c0 = thread_cpu();
        let mut w = TraceWriter::new(&mut sink, src.header(), WriterOptions::default()).unwrap();
        for s in &strings[1..] {
            w.intern(s);
        }
        for e in &events {
            w.push_ref(e).unwrap();
        }
        w.finish(Trailer::default()).unwrap();
        best_enc = best_enc.min(t0.elapsed().as_secs_f64());
        cpu_enc = cpu_enc.min(thread_cpu() - c0);
        out_len = sink.len();
    }
    let written = {
        let mut w = TraceWriter::new(Vec::new(), src.header(), WriterOptions::default()).unwrap();
        for s in &strings[1..] {
            w.intern(s);
        }
        for e in &events {
            w.push_ref(e).unwrap();
        }
        w.finish(Trailer::default()).unwrap()
    };

    // Open: index the chunks and load the string table (checksums verified).
    let mut best_open = f64::MAX;
    for _ in 0..5 {
        let copy = written.clone();
        let c0 = thread_cpu();
        let t = TraceFile::from_bytes("bench", copy).unwrap();
        best_open = best_open.min(thread_cpu() - c0);
        std::hint::black_box(t.chunks().len());
    }
    // Decode: every event of an open file, one reused decoder (steady state,
    // as a reader scanning a file does after its first chunk).
    let t = TraceFile::from_bytes("bench", written.clone()).unwrap();
    let mut best_dec = f64::MAX;
    let mut best_track = f64::MAX;
    let mut cpu_dec = f64::MAX;
    let mut cpu_track = f64::MAX;
    let (mut best_spans, mut cpu_spans) = (f64::MAX, f64::MAX);
    // The chunks spans read (all but collectives and losses), and their events.
    let span_chunks: Vec<usize> = (0..t.chunks().len()).filter(|&i| t.chunks()[i].kind.has_spans()).collect();
    let span_events: u64 = span_chunks.iter().map(|&i| t.chunks()[i].count as u64).sum();
    let mut dec = t.decoder();
    for _ in 0..5 {
        let t0 = Instant::now();
        let c0 = thread_cpu();
        let mut n = 0u64;
        let mut dur = 0u64;
        for i in 0..t.chunks().len() {
            dec.for_each(i, |e| {
                n += 1;
                dur = dur.wrapping_add(e.end().0 - e.start().0);
            })
            .unwrap();
        }
        std::hint::black_box(dur);
        assert_eq!(n as usize, events.len());
        best_dec = best_dec.min(t0.elapsed().as_secs_f64());
        cpu_dec = cpu_dec.min(thread_cpu() - c0);

        let t0 = Instant::now();
        let c0 = thread_cpu();
        let mut m = 0u64;
        for s in t.tracks() {
            for e in t.track_events(s.track) {
                e.unwrap();
                m += 1;
            }
        }
        assert_eq!(m, n);
        best_track = best_track.min(t0.elapsed().as_secs_f64());
        cpu_track = cpu_track.min(thread_cpu() - c0);

        let t0 = Instant::now();
        let c0 = thread_cpu();
        let (mut k, mut dur) = (0u64, 0u64);
        let mut block = Vec::with_capacity(SPAN_BLOCK);
        for &i in &span_chunks {
            let mut c = dec.spans(i).unwrap();
            loop {
                c.fill(&mut block).unwrap();
                if block.is_empty() {
                    break;
                }
                for s in &block {
                    k += 1;
                    dur = dur.wrapping_add(s.end - s.start);
                }
            }
            dec.recycle_spans(c);
        }
        std::hint::black_box(dur);
        assert_eq!(k, span_events);
        best_spans = best_spans.min(t0.elapsed().as_secs_f64());
        cpu_spans = cpu_spans.min(thread_cpu() - c0);
    }
    let n = events.len() as f64;
    println!("size:        {} bytes, {:.2} bytes/event", out_len, out_len as f64 / n);
    let line = |what: &str, wall: f64, cpu: f64| {
        println!(
            "{what:<34} {:6.1} M events/s CPU time ({:.1} ms); {:6.1} M events/s wall",
            n / cpu / 1e6,
            cpu * 1e3,
            n / wall / 1e6
        )
    };
    line("encode+zstd (writer, to memory):", best_enc, cpu_enc);
    line("decode (chunk order, for_each):", best_dec, cpu_dec);
    line("decode (per-track time order):", best_track, cpu_track);
    // Spans cover fewer events (no collectives or losses): scale to them.
    let scale = span_events as f64 / n;
    line("spans (chunk order, no coll/loss):", best_spans / scale, cpu_spans / scale);
    println!(
        "open (index + checksums + strings): {:.2} ms for {} bytes",
        best_open * 1e3,
        written.len()
    );
}
