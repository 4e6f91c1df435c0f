//! Agent hot paths without a GPU:
//! 1. the buffer callbacks (`request` + `complete`), per buffer;
//! 2. writer-thread throughput: CUPTI-layout records (13.0 layouts: a
//!    training-like mix of kernels, runtime API calls and copies) decoded,
//!    encoded, zstd-compressed and written to a file (page cache, no fsync,
//!    as in the agent).
//!
//! 3. the NCCL profiler plugin's cost on NCCL's thread, per plugin call
//!    (startEvent or stopEvent), for the v5 call sequence of one collective;
//! 4. the writer's linker: one pass over collectives waiting for their
//!    kernel.
//!
//! `cargo bench -p gputrace-agent --bench agent`. Record walking here steps
//! by the fixed record size; in the agent `cuptiActivityGetNextRecord` does
//! it (CUPTI's cost, not ours).

use cupti_sys::layout;
use gputrace_agent::internals::{kind, nccl_ty, Decoder, Descr, Linker, Nccl, Pool, Rec, RecKind};
use gputrace_format::*;
use std::io::BufWriter;
use std::time::Instant;

fn put<T: Copy>(rec: &mut [u8], off: usize, v: T) {
    let n = std::mem::size_of::<T>();
    // Safety: `v` is plain data of n bytes.
    let bytes = unsafe { std::slice::from_raw_parts(&v as *const T as *const u8, n) };
    rec[off..off + n].copy_from_slice(bytes);
}

/// This thread's CPU time, seconds: unlike the wall clock, other processes
/// on the machine barely move it.
fn thread_cpu() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: valid out-pointer; the call only writes `ts`.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn main() {
    // `AGENT_BENCH_ONLY=writer` runs only the writer throughput (for perf);
    // `AGENT_BENCH_ONLY=steady` only its steady-state measurement.
    if matches!(std::env::var("AGENT_BENCH_ONLY").as_deref(), Ok("writer" | "steady")) {
        // `AGENT_BENCH_MIX=N` (0, 1, 2): only that record mix (for perf).
        let pick: Option<usize> = std::env::var("AGENT_BENCH_MIX").ok().and_then(|m| m.parse().ok());
        for (_, mix) in Mix::ALL.into_iter().enumerate().filter(|(i, _)| pick.is_none_or(|p| p == *i)) {
            writer_throughput(mix);
        }
        return;
    }
    // `AGENT_BENCH_ONLY=always`: the always-on modes of issue #25 only.
    if std::env::var("AGENT_BENCH_ONLY").as_deref() == Ok("always") {
        always_on();
        return;
    }
    // 1. Callback cost.
    let pool = Pool::new(16, 4 << 20).expect("pool");
    let n = 2_000_000;
    let t0 = Instant::now();
    for i in 0..n {
        let b = pool.request();
        pool.complete(b, 4096 + (i & 1));
        let (b, _) = pool.take_completed().expect("completed");
        pool.recycle(b);
    }
    let per = t0.elapsed().as_nanos() as f64 / n as f64;
    println!("buffer callbacks: {per:.1} ns per request+complete pair (plus the writer's take+recycle)");

    // 2. Writer throughput on a CUPTI-layout buffer: launches only, then
    // with the driver call each launch makes (CUPTI records both; the
    // driver call's record comes first, as it returns first).
    for mix in Mix::ALL {
        writer_throughput(mix);
    }

    // 3. NCCL plugin calls: GroupApi, CollApi, KernelLaunch start/stop, API
    // stops, Coll start/stop = 8 calls per collective; a drainer thread
    // plays the writer (every 5 ms).
    for threads in [1usize, 2] {
        let mut best = f64::MAX;
        let mut lost = 0;
        for _round in 0..5 {
            let owned = Nccl::new(16384, 32768);
            let st = &owned;
            let ctx = st.bench_comm(0xc0ffee);
            let stop = std::sync::atomic::AtomicBool::new(false);
            let per_thread = 200_000u64;
            let elapsed: Vec<f64> = std::thread::scope(|sc| {
                let stop = &stop;
                sc.spawn(move || {
                    // As the writer does: drain, then sleep 5 ms (a drainer
                    // spinning on the queue would fight the callers for its
                    // cache lines, which the agent never does).
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        while st.bench_pop() {}
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                });
                let hs: Vec<_> = (0..threads)
                    .map(|_| {
                        let ctx = ctx as usize;
                        sc.spawn(move || {
                            let ctx = ctx as *mut std::ffi::c_void;
                            let mut func = [0u8; 16];
                            func[..9].copy_from_slice(b"AllReduce");
                            let t0 = Instant::now();
                            for i in 0..per_thread {
                                let g = st.start(
                                    ctx,
                                    &Descr {
                                        ty: nccl_ty::GROUP_API,
                                        ..Default::default()
                                    },
                                );
                                let api = st.start(
                                    ctx,
                                    &Descr {
                                        ty: nccl_ty::COLL_API,
                                        parent: g,
                                        ..Default::default()
                                    },
                                );
                                let kl = st.start(
                                    ctx,
                                    &Descr {
                                        ty: nccl_ty::KERNEL_LAUNCH,
                                        parent: g,
                                        ..Default::default()
                                    },
                                );
                                st.stop(kl);
                                st.stop(api);
                                st.stop(g);
                                let c = st.start(
                                    ctx,
                                    &Descr {
                                        ty: nccl_ty::COLL,
                                        parent: api,
                                        seq: i,
                                        func,
                                        count: 1 << 20,
                                        ..Default::default()
                                    },
                                );
                                st.stop(c);
                            }
                            t0.elapsed().as_nanos() as f64
                        })
                    })
                    .collect();
                let r = hs.into_iter().map(|h| h.join().unwrap()).collect();
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                r
            });
            let worst = elapsed.iter().cloned().fold(0.0, f64::max) / per_thread as f64;
            best = best.min(worst);
            lost += st.bench_lost();
        }
        println!(
            "NCCL plugin, {threads} calling thread(s): {:.1} ns per plugin call ({:.0} ns per collective = 8 calls; best of 5); lost: {lost}",
            best / 8.0,
            best,
        );
    }

    println!(
        "NCCL plugin tables (allocated at the first init): {:.1} MiB",
        gputrace_agent::internals::nccl_table_bytes() as f64 / (1 << 20) as f64
    );

    // 4. One linker pass over waiting collectives (none can link yet: the
    // worst case, every one looked up and kept).
    for waiting in [1_000usize, 30_000] {
        let mut l = Linker::new(true, u64::MAX);
        let mut out = Vec::new();
        for i in 0..waiting as u64 {
            let r = Rec {
                kind: RecKind::Coll,
                id: i + 1,
                group: i + 1,
                comm: 7,
                rank: 0,
                nranks: 8,
                api_ns: 1,
                start_ns: 1,
                stop_ns: 2,
                d: Descr::default(),
            };
            l.record(r, 0, &mut out);
        }
        let reps = 50;
        let t0 = Instant::now();
        for _ in 0..reps {
            l.poll(1, false, &mut out);
        }
        let per = t0.elapsed().as_secs_f64() / reps as f64;
        assert!(out.is_empty());
        println!(
            "NCCL linker: one pass over {waiting} waiting collectives: {:.2} ms ({:.0} ns each)",
            per * 1e3,
            per * 1e9 / waiting as f64
        );
    }
}

/// CUPTI-layout records (a runtime launch, optionally the driver call it
/// makes, a kernel; a copy every 50 kernels) through the agent's decoder and
/// the trace writer to a file, best of 7.
/// Which records each launch makes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mix {
    /// The runtime call, a driver call under it, and the kernel: the
    /// densest stream (CUPTI 13.0 on an H200 did not record the driver call
    /// inside a runtime call; see BENCHMARKS.md).
    Default,
    /// The runtime call and the kernel: what PyTorch's launches make, as
    /// measured on an H200 (about one API record per GPU record).
    RuntimeOnly,
    /// The kernel alone (`api_calls` off).
    KernelsOnly,
}

impl Mix {
    const ALL: [Mix; 3] = [Mix::Default, Mix::RuntimeOnly, Mix::KernelsOnly];

    fn label(self) -> &'static str {
        match self {
            Mix::Default => "runtime + driver + kernel",
            Mix::RuntimeOnly => "runtime + kernel (measured PyTorch stream)",
            Mix::KernelsOnly => "kernels only",
        }
    }
}

/// The records of `writer_throughput`: 150,000 launches of `mix` in one
/// CUPTI-layout buffer, the offset of each record, their count and the
/// time they span (ns). `names` must outlive the buffer (records point at them).
fn launch_records(mix: Mix, names: &[std::ffi::CString]) -> (Vec<u8>, Vec<usize>, u64, u64) {
    let v = layout::version::V13_0;
    let ksize = layout::kernel::LAYOUT.size_at(v).unwrap();
    let asize = layout::api::LAYOUT.size_at(v).unwrap();
    let msize = layout::memcpy::LAYOUT.size_at(v).unwrap();
    let mut buf: Vec<u8> = Vec::with_capacity(64 << 20);

    let random_jitter = std::env::var("AGENT_BENCH_JITTER").is_ok_and(|v| v == "random");
    let mut offsets = Vec::new();
    let mut t = 1_790_000_000_000_000_000u64;
    let mut records = 0u64;
    for i in 0..150_000u32 {
        // launch (runtime API) + kernel, and a copy every 50 kernels
        let mut a = vec![0u8; asize];
        put(&mut a, 0, kind::RUNTIME);
        put(&mut a, layout::api::CBID, 211u32);
        put(&mut a, layout::api::START, t);
        put(&mut a, layout::api::END, t + 4_000);
        put(&mut a, layout::api::THREAD_ID, 4242u32);
        put(&mut a, layout::api::CORRELATION_ID, i * 2 + 1);
        let mut d = vec![0u8; asize];
        put(&mut d, 0, kind::DRIVER);
        put(&mut d, layout::api::CBID, 307u32); // cuLaunchKernel
        put(&mut d, layout::api::START, t + 500);
        put(&mut d, layout::api::END, t + 3_500);
        put(&mut d, layout::api::THREAD_ID, 4242u32);
        put(&mut d, layout::api::CORRELATION_ID, i * 2 + 1);
        let mut k = vec![0u8; ksize];
        use layout::kernel as o;
        put(&mut k, 0, kind::CONCURRENT_KERNEL);
        // Timing jitter: a fixed pattern (the default), or with
        // `AGENT_BENCH_JITTER=random` pseudo-random (more entropy than a
        // training loop's kernels have, whose durations repeat within a few
        // percent; zstd works harder).
        let (j1, j2) = if random_jitter {
            let r = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            ((r >> 20) % 1000, (r >> 40) % 30_000)
        } else {
            ((i as u64 * 37) % 1000, (i as u64 * 7919) % 30_000)
        };
        put(&mut k, o::START, t + 9_000 + j1);
        put(&mut k, o::END, t + 9_000 + 20_000 + j2);
        put(&mut k, o::DEVICE_ID, 0u32);
        put(&mut k, o::CONTEXT_ID, 1u32);
        put(&mut k, o::STREAM_ID, 7u32);
        put(&mut k, o::CORRELATION_ID, i * 2 + 1);
        put(&mut k, o::GRID_X, 1i32 << (i % 9));
        put(&mut k, o::BLOCK_X, 256i32);
        put(&mut k, o::NAME, names[(i % 300) as usize].as_ptr());
        let launch = match mix {
            Mix::Default => vec![d, a, k],
            Mix::RuntimeOnly => vec![a, k],
            Mix::KernelsOnly => vec![k],
        };
        for r in launch {
            offsets.push(buf.len());
            buf.extend_from_slice(&r);
            records += 1;
        }
        if i % 50 == 0 {
            let mut m = vec![0u8; msize];
            use layout::memcpy as o;
            put(&mut m, 0, kind::MEMCPY);
            put(&mut m, o::COPY_KIND, 1u8);
            put(&mut m, o::BYTES, 16u64 << 20);
            put(&mut m, o::START, t);
            put(&mut m, o::END, t + 700_000);
            put(&mut m, o::STREAM_ID, 7u32);
            offsets.push(buf.len());
            buf.extend_from_slice(&m);
            records += 1;
        }
        t += 30_000;
    }
    (buf, offsets, records, t - 1_790_000_000_000_000_000)
}

/// 300 kernel names, as a training job's few hundred distinct kernels.
fn kernel_names() -> Vec<std::ffi::CString> {
    (0..300)
        .map(|i| std::ffi::CString::new(format!("void kernel_{i}<float, 128>(float*, int)")).unwrap())
        .collect()
}

fn writer_throughput(mix: Mix) {
    let names = kernel_names();
    let (buf, offsets, records, span) = launch_records(mix, &names);
    let dir = tempfile::tempdir().unwrap();
    steady_state(&buf, &offsets, records, span, mix, &dir.path().join("steady.gtrace"));
    if std::env::var("AGENT_BENCH_ONLY").as_deref() == Ok("steady") {
        return;
    }
    let path = dir.path().join("bench.gtrace");
    let mut best = f64::MAX;
    let mut best_cpu = f64::MAX;
    let mut size = 0;
    // `AGENT_BENCH_REPS` runs more (for `perf record` of the loop alone).
    let reps: usize = std::env::var("AGENT_BENCH_REPS").ok().and_then(|r| r.parse().ok()).unwrap_or(7);
    for _ in 0..reps {
        let t0 = Instant::now();
        let cpu0 = thread_cpu();
        let f = BufWriter::with_capacity(1 << 20, std::fs::File::create(&path).unwrap());
        let mut w = TraceWriter::new(f, &Header::default(), writer_options()).unwrap();
        let mut dec = Decoder::default();
        decode_all(&buf, &offsets, &mut dec, &mut w);
        let f = w.finish(Trailer::default()).unwrap();
        // Written to the page cache, as the agent does (it never fsyncs).
        drop(f.into_inner().unwrap());
        best = best.min(t0.elapsed().as_secs_f64());
        best_cpu = best_cpu.min(thread_cpu() - cpu0);
        size = std::fs::metadata(&path).unwrap().len();
    }
    println!(
        "writer thread, {}: {records} records ({:.1} MB of CUPTI records) -> {size} bytes on disk in {:.1} ms = {:.1} M records/s ({:.2} bytes/record); CPU time: {:.1} M records/s",
        mix.label(),
        buf.len() as f64 / 1e6,
        best * 1e3,
        records as f64 / best / 1e6,
        size as f64 / records as f64,
        records as f64 / best_cpu / 1e6
    );
}

/// The writer as it runs in a job: one long-lived writer and file, fed the
/// same records again and again, each pass `span` ns after the one before
/// (the timestamps are moved between passes, untimed, over the whole 38-45
/// MB, so the records are as cold in the cache as in the fresh-writer
/// measurement). The first pass warms the writer's buffers and is not
/// counted; the writer's one-time costs (creating the file, the header,
/// growing its buffers, the index and trailer at exit) are not in the rate.
fn steady_state(buf: &[u8], offsets: &[usize], records: u64, span: u64, mix: Mix, path: &std::path::Path) {
    let mut buf = buf.to_vec();
    let f = BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    let mut w = TraceWriter::new(f, &Header::default(), writer_options()).unwrap();
    let mut dec = Decoder::default();
    let reps: usize = std::env::var("AGENT_BENCH_REPS").ok().and_then(|r| r.parse().ok()).unwrap_or(7);
    let (mut best, mut best_cpu) = (f64::MAX, f64::MAX);
    for rep in 0..=reps {
        if rep > 0 {
            shift(&mut buf, offsets, span);
        }
        let t0 = Instant::now();
        let cpu0 = thread_cpu();
        decode_all(&buf, offsets, &mut dec, &mut w);
        if rep > 0 {
            best = best.min(t0.elapsed().as_secs_f64());
            best_cpu = best_cpu.min(thread_cpu() - cpu0);
        }
    }
    let f = w.finish(Trailer::default()).unwrap();
    drop(f.into_inner().unwrap());
    let size = std::fs::metadata(path).unwrap().len();
    println!(
        "writer thread, steady state, {}: {records} records per pass -> {:.2} bytes/record on disk; best pass {:.1} ms = {:.1} M records/s; CPU time: {:.1} M records/s",
        mix.label(),
        size as f64 / (records as f64 * (reps + 1) as f64),
        best * 1e3,
        records as f64 / best / 1e6,
        records as f64 / best_cpu / 1e6
    );
}

/// Move every record's timestamps `span` ns later (the next pass of a job).
fn shift(buf: &mut [u8], offsets: &[usize], span: u64) {
    for &off in offsets {
        let r = &mut buf[off..];
        let k = u32::from_ne_bytes(r[..4].try_into().unwrap());
        let fields: &[usize] = match k {
            kind::CONCURRENT_KERNEL => &[layout::kernel::START, layout::kernel::END],
            kind::MEMCPY => &[layout::memcpy::START, layout::memcpy::END],
            _ => &[layout::api::START, layout::api::END],
        };
        for &o in fields {
            let t = u64::from_ne_bytes(r[o..o + 8].try_into().unwrap());
            put(r, o, t + span);
        }
    }
}

/// Issue #25's modes on the writer thread (`AGENT_BENCH_ONLY=always`):
/// 1. the same records (the measured PyTorch stream) decoded and written
///    by two long-lived writers, one into a trace file (plain capture), one
///    into a flight recorder ring of `AGENT_BENCH_RING_MB` (default 256, as
///    `--flight-cap-mb`), passes interleaved, each pass flushed (the agent
///    flushes once per `--flush-ms`; a pass is 4.5 s of the job), best CPU
///    time of `AGENT_BENCH_REPS` (7) passes each;
/// 2. a snapshot (the trace written from the ring on a trigger) of a full
///    ring of that size: best of 3, wall and CPU time. The ring is filled by
///    appending the events chunks of one pass again and again (the
///    snapshot's cost is per byte and per chunk, not per event).
fn always_on() {
    use gputrace_format::chunk::{ChunkKind, Frame, FRAME_LEN, PREAMBLE_LEN};
    use gputrace_format::flight::{self, FlightSink, Ring};
    use std::time::Duration;
    let reps: usize = std::env::var("AGENT_BENCH_REPS").ok().and_then(|r| r.parse().ok()).unwrap_or(7);
    let ring_mb: u64 = std::env::var("AGENT_BENCH_RING_MB")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(256);
    let names = kernel_names();
    let mix = Mix::RuntimeOnly;
    let (mut buf, offsets, records, span) = launch_records(mix, &names);
    let dir = tempfile::tempdir().unwrap();
    let window = Duration::from_secs(60);

    // 1. Plain capture and the flight recorder, per record.
    let file = BufWriter::with_capacity(1 << 20, std::fs::File::create(dir.path().join("plain.gtrace")).unwrap());
    let mut plain = TraceWriter::new(file, &Header::default(), writer_options()).unwrap();
    let sink = FlightSink::create(dir.path(), "bench", ring_mb << 20, window).unwrap();
    let mut ring = TraceWriter::new(sink, &Header::default(), writer_options()).unwrap();
    let (mut dec_plain, mut dec_ring) = (Decoder::default(), Decoder::default());
    let (mut best_plain, mut best_ring) = (f64::MAX, f64::MAX);
    let (mut all_plain, mut all_ring) = (Vec::new(), Vec::new());
    for rep in 0..=reps {
        if rep > 0 {
            shift(&mut buf, &offsets, span);
        }
        let c0 = thread_cpu();
        decode_all(&buf, &offsets, &mut dec_plain, &mut plain);
        plain.flush().unwrap();
        let c1 = thread_cpu();
        decode_all(&buf, &offsets, &mut dec_ring, &mut ring);
        ring.flush().unwrap();
        let c2 = thread_cpu();
        // The first pass warms the writers' buffers (and the decoders' name caches).
        if rep > 0 {
            best_plain = f64::min(best_plain, c1 - c0);
            best_ring = f64::min(best_ring, c2 - c1);
            all_plain.push((c1 - c0) * 1e9 / records as f64);
            all_ring.push((c2 - c1) * 1e9 / records as f64);
        }
    }
    let per = |t: f64| t * 1e9 / records as f64;
    let range = |v: &[f64]| {
        let lo = v.iter().copied().fold(f64::MAX, f64::min);
        let hi = v.iter().copied().fold(0.0, f64::max);
        format!("{lo:.1}-{hi:.1}")
    };
    let ring_bytes = ring.get_mut().ring().counters();
    println!(
        "always-on, writer thread, {}: {records} records per pass, best of {reps} passes (CPU time):\n  \
         plain capture (trace file):          {:.1} ns/record = {:.1} M records/s (passes: {} ns)\n  \
         flight recorder ({ring_mb} MiB ring):     {:.1} ns/record = {:.1} M records/s (passes: {} ns); {:+.1} ns/record vs plain; evicted so far: {ring_bytes:?}",
        mix.label(),
        per(best_plain),
        records as f64 / best_plain / 1e6,
        range(&all_plain),
        per(best_ring),
        records as f64 / best_ring / 1e6,
        range(&all_ring),
        per(best_ring) - per(best_plain),
    );
    drop(plain);
    drop(ring);

    // 2. A snapshot of a full ring. One pass's stream, split as FlightSink does.
    let mut stream = TraceWriter::new(Vec::new(), &Header::default(), writer_options()).unwrap();
    decode_all(&buf, &offsets, &mut Decoder::default(), &mut stream);
    let stream = stream.finish(Trailer::default()).unwrap();
    let mut meta = stream[..PREAMBLE_LEN].to_vec();
    let mut events = Vec::new();
    let mut at = PREAMBLE_LEN;
    while at < stream.len() {
        let f = Frame::decode(stream[at..at + FRAME_LEN].try_into().unwrap()).unwrap();
        let chunk = &stream[at..at + FRAME_LEN + f.payload_len as usize];
        if f.kind == ChunkKind::Events as u16 {
            events.push(chunk.to_vec());
        } else {
            meta.extend_from_slice(chunk);
        }
        at += chunk.len();
    }
    let ring_path = flight::ring_path(dir.path(), "full");
    let meta_path = flight::meta_path(dir.path(), "full");
    std::fs::write(&meta_path, &meta).unwrap();
    let mut full = Ring::create(&ring_path, ring_mb << 20, window).unwrap();
    let now = gputrace_format::flight::realtime_ns();
    let (mut appended, mut n) = (0u64, 0u64);
    // Fill to the brim: once the first eviction happens, the ring is full.
    while full.counters().evicted_cap == 0 {
        for c in &events {
            full.append(c, now + n);
            appended += c.len() as u64;
            n += 1;
        }
    }
    drop(full);
    let (mut wall, mut cpu) = (f64::MAX, f64::MAX);
    let mut out = (0, 0);
    for i in 0..3 {
        let trace = dir.path().join(format!("snapshot{i}.gtrace"));
        let t0 = Instant::now();
        let c0 = thread_cpu();
        let r = flight::snapshot_files(&ring_path, &meta_path, &trace, "bench").unwrap();
        cpu = cpu.min(thread_cpu() - c0);
        wall = wall.min(t0.elapsed().as_secs_f64());
        out = (r.chunks, std::fs::metadata(&trace).unwrap().len());
        std::fs::remove_file(&trace).unwrap();
    }
    println!(
        "flight snapshot of a full {ring_mb} MiB ring ({} chunks kept, {:.1} MiB appended, a {:.1} MiB trace): \
         {:.0} ms wall, {:.0} ms CPU (best of 3) = {:.0} MiB/s of ring",
        out.0,
        appended as f64 / 1048576.0,
        out.1 as f64 / 1048576.0,
        wall * 1e3,
        cpu * 1e3,
        ring_mb as f64 / wall
    );
}

/// The writer's options: the agent's (the default), or with
/// `AGENT_BENCH_HUFFMAN=1` zstd's literals Huffman-coded (for comparison).
fn writer_options() -> WriterOptions {
    WriterOptions {
        huffman_literals: std::env::var("AGENT_BENCH_HUFFMAN").is_ok_and(|v| v == "1"),
        ..WriterOptions::default()
    }
}

/// The writer thread's work on the records at `offsets` of `buf` (each a
/// complete 13.0-layout record), in 4 MiB buffers as the agent gets them.
#[inline(always)]
fn decode_all<W: std::io::Write>(buf: &[u8], offsets: &[usize], dec: &mut Decoder, w: &mut TraceWriter<W>) {
    for (i, &off) in offsets.iter().enumerate() {
        // The agent's buffers are 4 MiB: a new one starts here.
        if i == 0 || off >> 22 != offsets[i - 1] >> 22 {
            dec.new_buffer();
        }
        // Safety: `off` starts a complete record (the caller's promise).
        unsafe { dec.decode(buf.as_ptr().add(off), w) }.unwrap();
    }
}
