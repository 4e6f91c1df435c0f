//! Shared fixtures: small synthetic jobs and hand-made traces, in memory.
#![allow(dead_code)]

use gputrace_format::*;
use gputrace_synth::{schedule, write_rank, JobConfig};

/// A small synthetic job: `ranks` ranks, 2 steps, 2 layers.
/// A kernel on device 0, context 1, `stream`, with no correlation and a
/// one-thread launch.
pub fn kernel(start: u64, end: u64, stream: u32, name: StringId) -> Event {
    Event::Kernel(Kernel {
        start: Nanos(start),
        end: Nanos(end),
        device: DeviceId(0),
        context: ContextId(1),
        stream: StreamId(stream),
        correlation: CorrelationId(0),
        name,
        grid: [1; 3],
        block: [1; 3],
        ..Kernel::default()
    })
}

pub fn small_job(ranks: u32) -> (JobConfig, Vec<TraceFile>) {
    let cfg = JobConfig {
        ranks,
        steps: 2,
        layers: 2,
        buckets: 2,
        ..JobConfig::default()
    };
    let sched = schedule(&cfg);
    let traces = (0..ranks)
        .map(|r| {
            let (bytes, _) = write_rank(&cfg, &sched, r, Vec::new()).unwrap();
            TraceFile::from_bytes(format!("rank{r}.gtrace"), bytes).unwrap()
        })
        .collect();
    (cfg, traces)
}

/// Every event of a trace, in file order.
pub fn all_events(t: &TraceFile) -> Vec<Event> {
    t.events().collect::<Result<_, _>>().unwrap()
}

/// A tiny trace with one of each event kind, times in the CUPTI domain
/// mapped to realtime by the header's clock pair (+1 s).
pub fn tiny_trace(kernel_name: &str) -> TraceFile {
    let header = Header {
        hostname: "node\"7".into(),
        pid: 1234,
        rank: RankInfo {
            rank: Some(Rank(3)),
            local_rank: Some(1),
            world_size: Some(8),
            source: None,
        },
        start_clock: ClockPair {
            realtime_ns: 1_700_000_001_000_000_000,
            monotonic_ns: 5_000,
            cupti_ns: Some(1_700_000_000_000_000_000),
        },
        time_domain: TimeDomain::Cupti,
        devices: vec![DeviceInfo {
            ordinal: DeviceId(1),
            uuid: "GPU-abc".into(),
            name: "Test GPU".into(),
            sm_count: 4,
            memory_bytes: 1 << 30,
            compute_capability: (9, 0),
            pci_bus_id: String::new(),
        }],
        ..Header::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &header, WriterOptions::default()).unwrap();
    let t0 = 1_700_000_000_000_000_000u64;
    let kname = w.intern(kernel_name);
    let launch = w.intern("cudaLaunchKernel");
    let driver = w.intern("cuLaunchKernel");
    let memcpy = w.intern("cudaMemcpyAsync");
    let step = w.intern("ProfilerStep#0");
    let mark = w.intern("checkpoint");
    let dom = w.intern("my domain");
    let ar = w.intern("AllReduce");
    let bf16 = w.intern("bf16");
    let detail = w.intern("ring full");
    let tid = ThreadId(77);
    let (dev, ctx, st) = (DeviceId(1), ContextId(1), StreamId(7));
    let n = |x: u64| Nanos(t0 + x);
    let events = vec![
        Event::Marker(Marker {
            start: n(0),
            end: n(100_000),
            thread: tid,
            name: step,
            domain: StringId::EMPTY,
            kind: MarkerKind::RANGE,
            color: 0,
        }),
        Event::Marker(Marker {
            start: n(500),
            end: n(500),
            thread: tid,
            name: mark,
            domain: dom,
            kind: MarkerKind::INSTANT,
            color: 0,
        }),
        Event::Api(ApiCall {
            start: n(1_000),
            end: n(6_000),
            thread: tid,
            correlation: CorrelationId(1),
            domain: ApiDomain::RUNTIME,
            cbid: 211,
            name: launch,
            return_value: 0,
        }),
        Event::Api(ApiCall {
            start: n(2_000),
            end: n(5_000),
            thread: tid,
            correlation: CorrelationId(2),
            domain: ApiDomain::DRIVER,
            cbid: 307,
            name: driver,
            return_value: 0,
        }),
        Event::Kernel(Kernel {
            start: n(10_000),
            end: n(20_001),
            device: dev,
            context: ctx,
            stream: st,
            correlation: CorrelationId(1),
            name: kname,
            grid: [2, 3, 4],
            block: [128, 1, 1],
            static_shared_mem: 16,
            dynamic_shared_mem: 32,
            registers: 40,
            graph_id: 0,
            graph_node_id: 0,
        }),
        Event::Api(ApiCall {
            start: n(7_000),
            end: n(9_000),
            thread: tid,
            correlation: CorrelationId(3),
            domain: ApiDomain::RUNTIME,
            cbid: 41,
            name: memcpy,
            return_value: 0,
        }),
        Event::Memcpy(Memcpy {
            start: n(20_500),
            end: n(21_500),
            device: dev,
            context: ctx,
            stream: st,
            correlation: CorrelationId(3),
            kind: CopyKind::HTOD,
            bytes: 4096,
            src_kind: MemoryKind::PINNED,
            dst_kind: MemoryKind::DEVICE,
            src_device: dev,
            dst_device: dev,
        }),
        Event::Memset(Memset {
            start: n(22_000),
            end: n(23_000),
            device: dev,
            context: ctx,
            stream: st,
            correlation: CorrelationId(9),
            bytes: 1000,
            value: 0,
            memory_kind: MemoryKind::DEVICE,
        }),
        Event::Sync(Sync {
            start: n(9_500),
            end: n(24_000),
            device: dev,
            context: ctx,
            stream: st,
            correlation: CorrelationId(4),
            kind: SyncKind::STREAM_SYNCHRONIZE,
            cuda_event: 0,
        }),
        Event::Collective(Collective {
            start: n(30_000),
            end: n(40_000),
            enqueue: n(25_000),
            comm: CommId(0xabc),
            op: ar,
            seq: 5,
            count: 1024,
            datatype: bf16,
            bytes: 2048,
            rank: 3,
            nranks: 8,
            root: -1,
            algorithm: StringId::EMPTY,
            protocol: StringId::EMPTY,
            channels: 2,
            device: dev,
            stream: StreamId(13),
            correlation: CorrelationId(0),
        }),
        Event::Loss(Loss {
            time: n(50_000),
            source: LossSource::CUPTI_DROPPED,
            count: 12,
            detail,
        }),
    ];
    for e in events {
        w.push(e).unwrap();
    }
    TraceFile::from_bytes("tiny.gtrace", w.finish(Trailer::default()).unwrap()).unwrap()
}

/// Compare `text` with the snapshot file `path` line by line, naming the
/// first line that changed; `UPDATE_SNAPSHOTS=1` rewrites the file instead.
pub fn check_snapshot(path: &str, text: &str) {
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(path, text).unwrap();
    }
    let want = std::fs::read_to_string(path).expect("snapshot missing: run with UPDATE_SNAPSHOTS=1");
    if let Some((n, (got, exp))) = text.lines().zip(want.lines()).enumerate().find(|(_, (a, b))| a != b) {
        panic!(
            "export changed at line {}:\n  got:  {got}\n  want: {exp}\nreview, then run with UPDATE_SNAPSHOTS=1 to accept",
            n + 1
        );
    }
    assert_eq!(
        text.lines().count(),
        want.lines().count(),
        "export changed in length; review, then run with UPDATE_SNAPSHOTS=1"
    );
}
