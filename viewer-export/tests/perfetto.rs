//! Perfetto protobuf: decoded by an independent wire-format walker (and,
//! when the PyPI `perfetto` package is installed, by the official schema),
//! then checked for sequence flags, interning, tracks, nesting and flows.

mod common;

use gputrace_format::*;
use gputrace_viewer::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap, HashSet};

/// A decoded protobuf field value.
#[derive(Clone, Debug)]
enum V {
    Int(u64),
    Fixed64(u64),
    Fixed32,
    Bytes(Vec<u8>),
}

/// A decoded message: fields in wire order.
#[derive(Clone, Debug, Default)]
struct Msg(Vec<(u32, V)>);

fn read_varint(b: &[u8], pos: &mut usize) -> u64 {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = b[*pos];
        *pos += 1;
        v |= ((byte & 0x7f) as u64) << shift;
        if byte & 0x80 == 0 {
            return v;
        }
    }
    panic!("varint too long at {pos}");
}

fn parse(b: &[u8]) -> Msg {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < b.len() {
        let key = read_varint(b, &mut pos);
        let (field, wire) = ((key >> 3) as u32, key & 7);
        assert!(field > 0, "field number 0");
        let v = match wire {
            0 => V::Int(read_varint(b, &mut pos)),
            1 => {
                pos += 8;
                V::Fixed64(u64::from_le_bytes(b[pos - 8..pos].try_into().unwrap()))
            }
            2 => {
                let n = read_varint(b, &mut pos) as usize;
                pos += n;
                assert!(pos <= b.len(), "length-delimited field runs past its message");
                V::Bytes(b[pos - n..pos].to_vec())
            }
            5 => {
                pos += 4;
                V::Fixed32
            }
            w => panic!("wire type {w}"),
        };
        out.push((field, v));
    }
    Msg(out)
}

impl Msg {
    fn int(&self, f: u32) -> Option<u64> {
        self.0.iter().rev().find_map(|(n, v)| match v {
            V::Int(x) if *n == f => Some(*x),
            _ => None,
        })
    }
    fn fixed(&self, f: u32) -> Vec<u64> {
        self.0
            .iter()
            .filter_map(|(n, v)| match v {
                V::Fixed64(x) if *n == f => Some(*x),
                _ => None,
            })
            .collect()
    }
    fn msgs(&self, f: u32) -> Vec<Msg> {
        self.0
            .iter()
            .filter_map(|(n, v)| match v {
                V::Bytes(b) if *n == f => Some(parse(b)),
                _ => None,
            })
            .collect()
    }
    fn msg(&self, f: u32) -> Option<Msg> {
        self.msgs(f).pop()
    }
    fn str(&self, f: u32) -> Option<String> {
        self.0.iter().rev().find_map(|(n, v)| match v {
            V::Bytes(b) if *n == f => Some(String::from_utf8(b.clone()).expect("UTF-8 string")),
            _ => None,
        })
    }
}

#[derive(Debug, Default)]
struct Track {
    parent: Option<u64>,
    name: String,
    thread: Option<(u64, u64)>,
    process: Option<u64>,
}

#[derive(Debug)]
struct Slice {
    track: u64,
    name: String,
    category: String,
    start: u64,
    end: u64,
    args: BTreeMap<String, u64>,
    /// Every annotation as `name=value` (strings quoted, arrays in brackets).
    args_text: Vec<String>,
}

fn annotation_text(a: &Msg) -> String {
    if let Some(v) = a.int(3) {
        return v.to_string();
    }
    if let Some(v) = a.int(4) {
        return (v as i64).to_string();
    }
    if let Some(v) = a.str(6) {
        return format!("{v:?}");
    }
    let items: Vec<String> = a.msgs(12).iter().map(annotation_text).collect();
    format!("[{}]", items.join(","))
}

/// Everything the checks need from a decoded trace.
#[derive(Debug, Default)]
struct Decoded {
    tracks: HashMap<u64, Track>,
    slices: Vec<Slice>,
    instants: Vec<(u64, String, u64)>,
    /// Counter samples by track: (ts, value).
    counters: HashMap<u64, Vec<(u64, f64)>>,
    flow_out: HashMap<u64, usize>,
    flow_in: HashMap<u64, usize>,
    /// The clock snapshot's readings by clock id.
    snapshot: HashMap<u64, u64>,
}

/// Decode and check the invariants every export must hold.
fn decode(bytes: &[u8]) -> Decoded {
    let trace = parse(bytes);
    assert!(trace.0.iter().all(|(f, _)| *f == 1), "a Trace holds only packets");
    let mut d = Decoded::default();
    let mut names: HashMap<u64, String> = HashMap::new();
    let mut categories: HashMap<u64, String> = HashMap::new();
    let mut arg_names: HashMap<u64, String> = HashMap::new();
    let mut cleared = false;
    let mut open: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut last_ts: HashMap<u64, u64> = HashMap::new();
    let mut siblings: HashSet<(u64, String)> = HashSet::new();
    let mut clock_snapshot = false;
    for (i, p) in trace.msgs(1).into_iter().enumerate() {
        assert_eq!(p.int(10), Some(SEQUENCE_ID), "packet {i}: trusted_packet_sequence_id");
        let flags = p.int(13).unwrap_or(0);
        if i == 0 {
            assert_eq!(flags, 1, "first packet clears incremental state");
            assert_eq!(p.msg(59).and_then(|m| m.int(58)), Some(1), "defaults: timestamps in CLOCK_REALTIME");
            cleared = true;
        }
        if let Some(interned) = p.msg(12) {
            assert!(cleared);
            for (field, map) in [(1, &mut categories), (2, &mut names), (3, &mut arg_names)] {
                for e in interned.msgs(field) {
                    let iid = e.int(1).unwrap();
                    assert!(map.insert(iid, e.str(2).unwrap()).is_none(), "iid {iid} interned twice");
                }
            }
        }
        if let Some(cs) = p.msg(6) {
            let ids: Vec<u64> = cs.msgs(1).iter().map(|c| c.int(1).unwrap()).collect();
            assert!(ids.contains(&1) && ids.contains(&6), "snapshot pairs REALTIME and BOOTTIME");
            d.snapshot = cs.msgs(1).iter().map(|c| (c.int(1).unwrap(), c.int(2).unwrap())).collect();
            clock_snapshot = true;
        }
        if let Some(td) = p.msg(60) {
            let uuid = td.int(1).unwrap();
            let parent = td.int(5);
            if let Some(parent) = parent {
                assert!(d.tracks.contains_key(&parent), "track {uuid:x}: parent described first");
            }
            let mut t = Track {
                parent,
                ..Track::default()
            };
            if let Some(name) = td.str(2) {
                assert!(
                    siblings.insert((parent.unwrap_or(0), name.clone())),
                    "sibling tracks named {name:?} would merge"
                );
                assert_eq!(td.int(15), Some(2), "{name}: sibling merging off");
                t.name = name;
            }
            if let Some(th) = td.msg(4) {
                t.thread = Some((th.int(1).unwrap(), th.int(2).unwrap()));
                t.name = th.str(5).unwrap();
            }
            if let Some(c) = td.msg(8) {
                assert_eq!(c.str(6).as_deref(), Some("%"));
            }
            if let Some(pr) = td.msg(3) {
                t.process = pr.int(1);
                t.name = pr.str(6).unwrap();
            }
            assert!(d.tracks.insert(uuid, t).is_none(), "track {uuid:x} described twice");
        }
        if let Some(te) = p.msg(11) {
            assert_eq!(flags, 2, "event packets need incremental state");
            let ts = p.int(8).expect("event timestamp");
            let track = te.int(11).expect("track_uuid");
            assert!(d.tracks.contains_key(&track), "event on undescribed track {track:x}");
            let prev = last_ts.insert(track, ts).unwrap_or(0);
            assert!(ts >= prev, "track {track:x}: packets in time order");
            let name = || names.get(&te.int(10).expect("name_iid")).cloned().expect("interned name");
            match te.int(9) {
                Some(1) => {
                    let mut args = BTreeMap::new();
                    let mut args_text = Vec::new();
                    for a in te.msgs(4) {
                        let key = arg_names[&a.int(1).unwrap()].clone();
                        args_text.push(format!("{key}={}", annotation_text(&a)));
                        args.insert(key, a.int(3).unwrap_or(u64::MAX));
                    }
                    let category = categories[&te.int(3).unwrap()].clone();
                    d.slices.push(Slice {
                        track,
                        name: name(),
                        category,
                        start: ts,
                        end: u64::MAX,
                        args,
                        args_text,
                    });
                    let idx = d.slices.len() - 1;
                    for id in te.fixed(47) {
                        assert!(d.flow_out.insert(id, idx).is_none(), "flow {id:x} starts twice");
                    }
                    for id in te.fixed(48) {
                        assert!(d.flow_in.insert(id, idx).is_none(), "flow {id:x} ends twice");
                    }
                    let stack = open.entry(track).or_default();
                    if let Some(&parent) = stack.last() {
                        assert!(d.slices[parent].start <= ts);
                    }
                    stack.push(idx);
                }
                Some(2) => {
                    let idx = open.get_mut(&track).and_then(|s| s.pop()).expect("slice end without begin");
                    assert!(d.slices[idx].start <= ts);
                    d.slices[idx].end = ts;
                    if let Some(&parent) = open[&track].last() {
                        let _ = parent; // the parent ends later: checked when it ends
                    }
                }
                Some(3) => d.instants.push((track, name(), ts)),
                Some(4) => {
                    let v = f64::from_bits(te.fixed(44).pop().expect("double_counter_value"));
                    d.counters.entry(track).or_default().push((ts, v));
                }
                t => panic!("unexpected TrackEvent type {t:?}"),
            }
        }
    }
    assert!(clock_snapshot, "a clock snapshot");
    for (track, stack) in open {
        assert!(stack.is_empty(), "track {track:x}: {} slices never end", stack.len());
    }
    // Children end before their parents: replay per track.
    let mut per_track: HashMap<u64, Vec<&Slice>> = HashMap::new();
    for s in &d.slices {
        per_track.entry(s.track).or_default().push(s);
    }
    for (track, v) in per_track {
        let mut stack: Vec<u64> = Vec::new();
        for s in v {
            while stack.last().is_some_and(|&e| e <= s.start) {
                stack.pop();
            }
            if let Some(&e) = stack.last() {
                assert!(
                    s.end <= e,
                    "track {track:x}: {} [{}, {}] overlaps its parent",
                    s.name,
                    s.start,
                    s.end
                );
            }
            stack.push(s.end);
        }
    }
    d
}

fn export(traces: &[&TraceFile], filter: &Filter) -> (Vec<u8>, ExportStats) {
    let mut out = Vec::new();
    let stats = Perfetto::default()
        .export(&Job::new(traces.iter().copied()), filter, &mut out)
        .unwrap();
    assert_eq!(stats.bytes, out.len() as u64);
    (out, stats)
}

#[test]
fn synthetic_job_decodes_with_tracks_nesting_and_flows() {
    let (_, traces) = common::small_job(2);
    let (bytes, stats) = export(&[&traces[0], &traces[1]], &Filter::default());
    let d = decode(&bytes);
    let total: u64 = traces.iter().map(|t| t.event_total()).sum();
    let projected = d.slices.iter().filter(|s| s.category == "gpu_user_annotation").count();
    assert_eq!((d.slices.len() - projected + d.instants.len()) as u64, total);
    // Every step range on the compute and the NCCL stream, on `… · NVTX`
    // tracks next to them.
    let steps = 2 * traces.len(); // small_job: 2 steps per rank
    let on_gpu: Vec<&Slice> = d
        .slices
        .iter()
        .filter(|s| s.category == "gpu_user_annotation" && s.name.starts_with("ProfilerStep#"))
        .collect();
    assert_eq!(on_gpu.len(), 2 * steps);
    for s in on_gpu {
        let name = &d.tracks[&s.track].name;
        assert!(name.ends_with("stream 7 · NVTX") || name.ends_with("stream 13 · NVTX"), "{name}");
    }
    assert_eq!(stats.walk.events, total);

    // One process per rank with host, pid and rank in the name.
    let processes: Vec<&Track> = d.tracks.values().filter(|t| t.process.is_some()).collect();
    assert_eq!(processes.len(), 2);
    for t in &traces {
        let h = t.header();
        let want = format!("rank {} · {} · pid {}", h.rank.rank.unwrap(), h.hostname, h.pid);
        assert!(
            processes.iter().any(|p| p.name == want && p.process == Some(h.pid as u64)),
            "{want}"
        );
    }
    // GPU tracks under processes, stream tracks under GPUs.
    for s in d.slices.iter().filter(|s| s.category == "kernel") {
        let stream = &d.tracks[&s.track];
        assert!(stream.name.contains(&format!("stream {}", s.args["stream"])), "{}", stream.name);
        let gpu = &d.tracks[&stream.parent.unwrap()];
        assert!(
            gpu.name.starts_with(&format!("GPU {} · Synthetic H200", s.args["device"])),
            "{}",
            gpu.name
        );
        assert!(d.tracks[&gpu.parent.unwrap()].process.is_some());
    }
    // API calls on thread tracks of their process.
    for s in d.slices.iter().filter(|s| s.category == "cuda_runtime") {
        let (pid, tid) = d.tracks[&s.track].thread.expect("API calls on thread tracks");
        assert_eq!(pid, tid, "synthetic main thread id = pid");
    }
    // Each flow joins a launch and the kernel or copy with its correlation.
    assert_eq!(d.flow_out.len() as u64, stats.walk.flows);
    assert_eq!(d.flow_in.len(), d.flow_out.len());
    for (id, &a) in &d.flow_out {
        let g = d.flow_in[id];
        let (api, gpu) = (&d.slices[a], &d.slices[g]);
        assert_eq!(api.category, "cuda_runtime");
        assert!(gpu.category == "kernel" || gpu.category == "gpu_memcpy");
        assert_eq!(api.args["correlation"], gpu.args["correlation"]);
        assert_eq!(id & 0xffff_ffff, api.args["correlation"]);
        assert!(api.start <= gpu.start);
    }
    let launches: u64 = traces
        .iter()
        .map(|t| t.event_counts()[&EventKind::Kernel] + t.event_counts()[&EventKind::Memcpy])
        .sum();
    assert_eq!(stats.walk.flows, launches);
    // Four utilization counters per GPU, shares that add up.
    let gpus: Vec<u64> = d
        .tracks
        .iter()
        .filter(|(_, t)| t.name.starts_with("GPU ") && t.name.contains("Synthetic"))
        .map(|(u, _)| *u)
        .collect();
    assert_eq!(gpus.len(), 2);
    for gpu in gpus {
        let series: BTreeMap<String, &Vec<(u64, f64)>> = d
            .counters
            .iter()
            .filter(|(t, _)| d.tracks[t].parent == Some(gpu))
            .map(|(t, v)| (d.tracks[t].name.split(' ').nth(2).unwrap().to_string(), v))
            .collect();
        assert_eq!(series.keys().collect::<Vec<_>>(), ["communication", "compute", "idle", "transfer"]);
        let n = series["idle"].len();
        assert_eq!(n, 200);
        for (i, &(_, idle)) in series["idle"].iter().enumerate() {
            let (c, m, t) = (series["compute"][i].1, series["communication"][i].1, series["transfer"][i].1);
            for v in [c, m, t, idle] {
                assert!((0.0..=100.0).contains(&v));
            }
            assert!(c + m + t + idle >= 99.999, "bin {i}: busy categories cover the non-idle time");
            assert!(c.max(m).max(t) + idle <= 100.001, "bin {i}");
        }
        assert!(series["communication"].iter().any(|x| x.1 > 0.0) && series["compute"].iter().any(|x| x.1 > 50.0));
    }
    // Collectives on a communicator track with their metadata.
    let coll = d.slices.iter().find(|s| s.category == "nccl_collective").unwrap();
    assert!(
        d.tracks[&coll.track]
            .name
            .starts_with("NCCL comm 00c0ffeed00d0001 (default_pg) · rank "),
        "{}",
        d.tracks[&coll.track].name
    );
    assert_eq!(coll.name, "nccl:AllReduce");
    assert!(coll.args.contains_key("seq") && coll.args["group size"] == 2);
}

#[test]
fn every_kind_and_instants() {
    let t = common::tiny_trace("kernel \"with\" quotes\n");
    let (bytes, stats) = export(&[&t], &Filter::default());
    let d = decode(&bytes);
    assert_eq!(stats.walk.events, 11);
    let cats: BTreeMap<&str, usize> = d.slices.iter().fold(BTreeMap::new(), |mut m, s| {
        *m.entry(s.category.as_str()).or_default() += 1;
        m
    });
    let want: BTreeMap<&str, usize> = [
        ("cuda_driver", 1),
        ("cuda_runtime", 2),
        ("cuda_sync", 1),
        ("gpu_memcpy", 1),
        ("gpu_memset", 1),
        ("gpu_user_annotation", 1),
        ("kernel", 1),
        ("nccl_collective", 1),
        ("user_annotation", 1),
    ]
    .into_iter()
    .collect();
    assert_eq!(cats, want);
    let names: Vec<&str> = d.instants.iter().map(|i| i.1.as_str()).collect();
    assert_eq!(names, vec!["checkpoint", "lost records: cupti-dropped"]);
    let loss_track = &d.tracks[&d.instants[1].0];
    assert_eq!(loss_track.process, Some(1234), "loss records on the process track");
    let k = d.slices.iter().find(|s| s.category == "kernel").unwrap();
    assert_eq!(k.name, "kernel \"with\" quotes\n");
    assert_eq!(k.end - k.start, 10_001);
    // The driver call nests in the runtime call, both in the step range.
    let step = d
        .slices
        .iter()
        .find(|s| s.name == "ProfilerStep#0" && s.category == "user_annotation")
        .unwrap();
    let drv = d.slices.iter().find(|s| s.category == "cuda_driver").unwrap();
    assert!(step.start <= drv.start && drv.end <= step.end);
    // The sync has its own lane, next to the stream's.
    let sync = d.slices.iter().find(|s| s.category == "cuda_sync").unwrap();
    assert_eq!(d.tracks[&sync.track].name, "GPU 1 · ctx 1 · stream 7 · sync");
    // Times are realtime: the CUPTI clock read 1 s behind.
    assert_eq!(step.start, 1_700_000_001_000_000_000);
    // The snapshot is the header's own clock pair, not shifted again.
    let clock = &t.header().start_clock;
    assert_eq!((d.snapshot[&1], d.snapshot[&6]), (clock.realtime_ns, clock.monotonic_ns));
}

#[test]
fn overlapping_slices_are_made_to_nest() {
    let header = Header {
        pid: 5,
        ..Header::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &header, WriterOptions::default()).unwrap();
    let name = w.intern("k");
    let api = w.intern("cudaLaunchKernel");
    let kernel = |s: u64, e: u64| {
        Event::Kernel(Kernel {
            start: Nanos(s),
            end: Nanos(e),
            device: DeviceId(0),
            context: ContextId(1),
            stream: StreamId(7),
            correlation: CorrelationId(0),
            name,
            grid: [1; 3],
            block: [1; 3],
            ..Kernel::default()
        })
    };
    let call = |s: u64, e: u64| {
        Event::Api(ApiCall {
            start: Nanos(s),
            end: Nanos(e),
            thread: ThreadId(5),
            correlation: CorrelationId(0),
            domain: ApiDomain::RUNTIME,
            cbid: 1,
            name: api,
            return_value: 0,
        })
    };
    // Kernels overlapping on one stream (timer jitter), calls overlapping partially.
    for e in [kernel(100, 200), kernel(190, 300), kernel(250, 260), call(100, 200), call(150, 250)] {
        w.push(e).unwrap();
    }
    let t = TraceFile::from_bytes("overlap", w.finish(Trailer::default()).unwrap()).unwrap();
    let (bytes, stats) = export(&[&t], &Filter::default());
    assert_eq!(stats.walk.adjusted, 3);
    let d = decode(&bytes); // checks nesting
    let spans: Vec<(u64, u64)> = d.slices.iter().map(|s| (s.start, s.end)).collect();
    assert_eq!(spans, vec![(100, 200), (200, 300), (300, 300), (100, 200), (150, 200)]);
}

#[test]
fn ranks_share_one_time_line() {
    // Rank 0 in the CUPTI domain (1 s behind realtime), rank 1 in
    // CLOCK_MONOTONIC, with the same pid on another host.
    let cupti = common::tiny_trace("k");
    let header = Header {
        hostname: "other".into(),
        pid: 1234,
        rank: RankInfo {
            rank: Some(Rank(4)),
            ..RankInfo::default()
        },
        start_clock: ClockPair {
            realtime_ns: 1_700_000_001_000_000_000,
            monotonic_ns: 7_000,
            cupti_ns: None,
        },
        time_domain: TimeDomain::Monotonic,
        ..Header::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &header, WriterOptions::default()).unwrap();
    let name = w.intern("ProfilerStep#0");
    w.push(Event::Marker(Marker {
        start: Nanos(7_500),
        end: Nanos(9_000),
        thread: ThreadId(1),
        name,
        domain: StringId::EMPTY,
        kind: MarkerKind::RANGE,
        color: 0,
    }))
    .unwrap();
    let mono = TraceFile::from_bytes("mono", w.finish(Trailer::default()).unwrap()).unwrap();
    let (bytes, _) = export(&[&cupti, &mono], &Filter::default());
    let d = decode(&bytes);
    let steps: Vec<u64> = d
        .slices
        .iter()
        .filter(|s| s.name == "ProfilerStep#0" && s.category == "user_annotation")
        .map(|s| s.start)
        .collect();
    assert_eq!(steps, vec![1_700_000_001_000_000_000, 1_700_000_001_000_000_500]);
    let mut pids: Vec<u64> = d.tracks.values().filter_map(|t| t.process).collect();
    pids.sort();
    assert_eq!(pids.len(), 2);
    assert_ne!(
        pids[0], pids[1],
        "same pid on two hosts: made distinct so the UI keeps two processes"
    );
}

#[test]
fn filters_apply() {
    let (_, traces) = common::small_job(2);
    let (bytes, stats) = export(
        &[&traces[0], &traces[1]],
        &Filter {
            ranks: vec![Rank(0)],
            max_events: Some(300),
            ..Filter::default()
        },
    );
    let d = decode(&bytes);
    assert!(stats.walk.events <= 300);
    assert_eq!(d.tracks.values().filter(|t| t.process.is_some()).count(), 1);
    assert_eq!(d.flow_in.len(), d.flow_out.len(), "no dangling arrows in a window");
}

#[test]
fn utilization_counters_are_exact() {
    let mut w = TraceWriter::new(
        Vec::new(),
        &Header {
            pid: 9,
            ..Header::default()
        },
        WriterOptions::default(),
    )
    .unwrap();
    let gemm = w.intern("gemm");
    let nccl = w.intern("ncclDevKernel_AllReduce");
    let kernel = common::kernel;
    let copy = Event::Memcpy(Memcpy {
        start: Nanos(1080),
        end: Nanos(1090),
        device: DeviceId(0),
        context: ContextId(1),
        stream: StreamId(1),
        correlation: CorrelationId(0),
        kind: CopyKind::DTOH,
        bytes: 8,
        src_kind: MemoryKind::DEVICE,
        dst_kind: MemoryKind::PINNED,
        src_device: DeviceId(0),
        dst_device: DeviceId(0),
    });
    for e in [
        kernel(1000, 1050, 1, gemm),
        kernel(1025, 1075, 2, nccl),
        kernel(1030, 1040, 3, gemm),
        copy,
    ] {
        w.push(e).unwrap();
    }
    let t = TraceFile::from_bytes("util", w.finish(Trailer::default()).unwrap()).unwrap();
    let mut out = Vec::new();
    Perfetto {
        counter_bins: 2,
        ..Perfetto::default()
    }
    .export(&Job::new([&t]), &Filter::default(), &mut out)
    .unwrap();
    let d = decode(&out);
    let values: BTreeMap<String, Vec<(u64, f64)>> = d.counters.iter().map(|(t, v)| (d.tracks[t].name.clone(), v.clone())).collect();
    // Window [1000, 1091): bins [1000, 1046) and [1046, 1091).
    let pct = |n: f64, w: f64| 100.0 * n / w;
    let want = [
        ("GPU 0 compute %", [pct(46.0, 46.0), pct(4.0, 45.0)]),
        ("GPU 0 communication %", [pct(21.0, 46.0), pct(29.0, 45.0)]),
        ("GPU 0 transfer %", [0.0, pct(10.0, 45.0)]),
        ("GPU 0 idle %", [0.0, pct(6.0, 45.0)]),
    ];
    for (name, v) in want {
        let got = &values[name];
        assert_eq!(got.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1000, 1046], "{name}");
        for (g, w) in got.iter().zip(v) {
            assert!((g.1 - w).abs() < 1e-9, "{name}: {} != {w}", g.1);
        }
    }
}

/// Snapshot of the decoded tiny export (one line per packet).
#[test]
fn snapshot_of_a_tiny_trace() {
    let t = common::tiny_trace("k");
    let mut bytes = Vec::new();
    Perfetto {
        counter_bins: 4,
        ..Perfetto::default()
    }
    .export(&Job::new([&t]), &Filter::default(), &mut bytes)
    .unwrap();
    let d = decode(&bytes);
    let base = 1_700_000_001_000_000_000u64;
    let track_name = |u: &u64| d.tracks[u].name.clone();
    let mut lines = Vec::new();
    let mut tracks: Vec<(&u64, &Track)> = d.tracks.iter().collect();
    tracks.sort_by_key(|(u, _)| **u);
    for (u, t) in tracks {
        lines.push(format!(
            "track {u} parent={:?} thread={:?} process={:?} {:?}",
            t.parent, t.thread, t.process, t.name
        ));
    }
    for s in &d.slices {
        lines.push(format!(
            "slice {:?} [{}, {}] {} {:?} {}",
            track_name(&s.track),
            s.start - base,
            s.end - base,
            s.category,
            s.name,
            s.args_text.join(" ")
        ));
    }
    for (t, name, ts) in &d.instants {
        lines.push(format!("instant {:?} {} {name:?}", track_name(t), ts - base));
    }
    let mut flows: Vec<(&u64, &usize)> = d.flow_out.iter().collect();
    flows.sort();
    for (id, a) in flows {
        lines.push(format!("flow {id} {:?} -> {:?}", d.slices[*a].name, d.slices[d.flow_in[id]].name));
    }
    let mut counters: Vec<(String, &Vec<(u64, f64)>)> = d.counters.iter().map(|(t, v)| (track_name(t), v)).collect();
    counters.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, v) in counters {
        let v: Vec<String> = v.iter().map(|(ts, x)| format!("{}:{x:.2}", ts - base)).collect();
        lines.push(format!("counter {name:?} {}", v.join(" ")));
    }
    let text = lines.join("\n") + "\n";
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/snapshots/tiny.pftrace.txt");
    common::check_snapshot(path, &text);
}

#[path = "../../tests/common/skip.rs"]
mod skip;

/// Decode every packet with the official schema (PyPI `perfetto`), where
/// it is installed: `pip install perfetto protobuf`.
#[test]
fn official_schema_decodes_every_packet() {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import perfetto.protos.perfetto.trace.perfetto_trace_pb2"])
        .output();
    if !matches!(&probe, Ok(o) if o.status.success()) {
        let why = "python3 with the PyPI `perfetto` package not found (install: pip install perfetto protobuf)";
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true but {why}");
        skip::skip(why);
        return;
    }
    let (_, traces) = common::small_job(2);
    let dir = std::env::temp_dir().join(format!("viewer-export-schema-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut files = Vec::new();
    for (name, bytes) in [
        ("job", export(&[&traces[0], &traces[1]], &Filter::default()).0),
        ("tiny", export(&[&common::tiny_trace("k\u{1}<ü>")], &Filter::default()).0),
    ] {
        let path = dir.join(format!("{name}.pftrace"));
        std::fs::write(&path, bytes).unwrap();
        files.push(path);
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/check_perfetto.py");
    let out = std::process::Command::new("python3").arg(script).args(&files).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "schema check failed:\n{text}");
    eprintln!("{text}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    /// Events written in any order, in tiny chunks whose time ranges
    /// overlap, come out complete, per-track ordered and nested.
    #[test]
    fn any_order_and_chunking_decodes_cleanly(
        spans in proptest::collection::vec((0u64..10_000, 0u64..3_000, 0u32..3, any::<bool>()), 1..120),
        chunk in 1usize..8,
    ) {
        let options = WriterOptions { chunk_events: chunk, ..WriterOptions::default() };
        let mut w = TraceWriter::new(Vec::new(), &Header { pid: 11, ..Header::default() }, options).unwrap();
        let (k, api) = (w.intern("k"), w.intern("cudaLaunchKernel"));
        for (i, &(start, len, lane, gpu)) in spans.iter().enumerate() {
            let (start, end, corr) = (Nanos(start), Nanos(start + len), CorrelationId(i as u32 + 1));
            let e = if gpu {
                Event::Kernel(Kernel {
                    start, end, device: DeviceId(0), context: ContextId(1), stream: StreamId(lane), correlation: corr, name: k,
                    grid: [1; 3], block: [1; 3], static_shared_mem: 0, dynamic_shared_mem: 0, registers: 0, graph_id: 0, graph_node_id: 0,
                })
            } else {
                Event::Api(ApiCall { start, end, thread: ThreadId(lane), correlation: corr, domain: ApiDomain::RUNTIME, cbid: 1, name: api, return_value: 0 })
            };
            w.push(e).unwrap();
        }
        let t = TraceFile::from_bytes("random", w.finish(Trailer::default()).unwrap()).unwrap();
        let (bytes, stats) = export(&[&t], &Filter::default());
        let d = decode(&bytes);
        prop_assert_eq!(d.slices.len(), spans.len());
        prop_assert_eq!(stats.walk.events, spans.len() as u64);
        let mut json = Vec::new();
        ChromeJson.export(&Job::new([&t]), &Filter::default(), &mut json).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        let slices = v["traceEvents"].as_array().unwrap().iter().filter(|e| e["ph"] == "X").count();
        prop_assert_eq!(slices, spans.len());
    }
}

#[test]
fn utilization_classifies_work_as_the_report_does() {
    // A demangled NCCL kernel name and a peer-to-peer copy: communication
    // for `gputrace report`, so for the counters too.
    let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
    let nccl = w.intern("void ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
    w.push(common::kernel(1000, 1050, 1, nccl)).unwrap();
    w.push(Event::Memcpy(Memcpy {
        start: Nanos(1050),
        end: Nanos(1100),
        device: DeviceId(0),
        context: ContextId(1),
        stream: StreamId(2),
        correlation: CorrelationId(0),
        kind: CopyKind::PTOP,
        bytes: 8,
        src_kind: MemoryKind::DEVICE,
        dst_kind: MemoryKind::DEVICE,
        src_device: DeviceId(0),
        dst_device: DeviceId(1),
    }))
    .unwrap();
    let t = TraceFile::from_bytes("comm", w.finish(Trailer::default()).unwrap()).unwrap();
    let mut out = Vec::new();
    Perfetto {
        counter_bins: 1,
        ..Perfetto::default()
    }
    .export(&Job::new([&t]), &Filter::default(), &mut out)
    .unwrap();
    let d = decode(&out);
    let value = |name: &str| {
        d.counters
            .iter()
            .find(|(t, _)| d.tracks[*t].name == name)
            .map(|(_, v)| v[0].1)
            .unwrap()
    };
    // The window is [1000, 1101).
    assert!((value("GPU 0 communication %") - 100.0 * 100.0 / 101.0).abs() < 1e-9);
    assert_eq!(value("GPU 0 compute %"), 0.0);
    assert_eq!(value("GPU 0 transfer %"), 0.0);
}

/// Every kernel's and CUDA call's packet carries its own event's times,
/// name and args, not another event's: packets of events with the same
/// attributes are made from bytes kept per dictionary entry, with the
/// times, correlation id and flow of each event put in.
#[test]
fn every_packet_is_its_own_events() {
    let (_, traces) = common::small_job(2);
    let (bytes, _) = export(&[&traces[0]], &Filter::default());
    let d = decode(&bytes);
    let t = &traces[0];
    let by_corr: HashMap<(u64, &str), &Slice> = d
        .slices
        .iter()
        .filter(|s| s.category == "kernel" || s.category == "cuda_runtime")
        .map(|s| ((s.args["correlation"], s.category.as_str()), s))
        .collect();
    let (mut kernels, mut calls) = (0, 0);
    for e in t.events() {
        match e.unwrap() {
            Event::Kernel(k) => {
                let s = by_corr[&(k.correlation.0 as u64, "kernel")];
                assert_eq!((s.start, s.end), (k.start.0, k.end.0));
                assert_eq!(s.name, t.name(k.name));
                assert_eq!(s.args["stream"], k.stream.0 as u64);
                assert_eq!(s.args["registers per thread"], k.registers as u64);
                let grid = format!("grid=[{},{},{}]", k.grid[0], k.grid[1], k.grid[2]);
                assert!(s.args_text.contains(&grid), "{grid} in {:?}", s.args_text);
                kernels += 1;
            }
            Event::Api(a) => {
                let s = by_corr[&(a.correlation.0 as u64, "cuda_runtime")];
                assert_eq!((s.start, s.end), (a.start.0, a.end.0));
                assert_eq!(s.name, t.name(a.name));
                assert_eq!(s.args["cbid"], a.cbid as u64);
                calls += 1;
            }
            _ => {}
        }
    }
    assert!(kernels >= 50 && calls >= 50, "{kernels} kernels, {calls} calls");
    assert_eq!(by_corr.len(), kernels + calls, "one packet per event, correlation ids unique");
}

/// Without args, an export has the same slices, instants and flows (each
/// event's times, name, category and track), only without annotations:
/// packets of events with the same attributes come from bytes kept per
/// dictionary entry in both.
#[test]
fn without_args_the_events_are_the_same() {
    let (_, traces) = common::small_job(2);
    let job = Job::new([&traces[0], &traces[1]]);
    let run = |args: bool| {
        let mut out = Vec::new();
        Perfetto {
            args,
            ..Perfetto::default()
        }
        .export(&job, &Filter::default(), &mut out)
        .unwrap();
        decode(&out)
    };
    let (with, without) = (run(true), run(false));
    let bare = |d: &Decoded| -> Vec<(u64, String, String, u64, u64)> {
        d.slices
            .iter()
            .map(|s| (s.track, s.name.clone(), s.category.clone(), s.start, s.end))
            .collect()
    };
    assert!(with.slices.len() > 100);
    assert_eq!(bare(&without), bare(&with));
    assert!(without.slices.iter().all(|s| s.args.is_empty() && s.args_text.is_empty()));
    assert!(with.slices.iter().any(|s| !s.args.is_empty()));
    assert_eq!(without.instants, with.instants);
    assert_eq!(without.flow_out, with.flow_out);
    assert_eq!(without.flow_in, with.flow_in);
    assert_eq!(without.counters, with.counters);
}

/// Kernels of communication libraries other than NCCL are drawn a second time, on a
/// track per library and stream under their GPU, so that DeepEP or a custom all-reduce
/// stands out from compute on the same stream. NCCL's kernels and compute get none.
#[test]
fn communication_libraries_get_tracks_of_their_own() {
    let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
    let gemm = w.intern("sm90_xmma_gemm_bf16");
    let dispatch = w.intern("void deep_ep::internode::dispatch<true, 8>(int4*, float*)");
    let combine = w.intern("void deep_ep::internode::combine<__nv_bfloat16, 4, 8>(int4*)");
    let nccl = w.intern("ncclDevKernel_AllReduce_Sum_f32_RING_LL");
    let custom = w.intern("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*)");
    for e in [
        common::kernel(1000, 1100, 7, gemm),
        common::kernel(1100, 1200, 8, dispatch),
        common::kernel(1200, 1300, 9, nccl),
        common::kernel(1300, 1400, 8, combine),
        common::kernel(1400, 1450, 7, custom),
        common::kernel(1450, 1500, 7, gemm),
    ] {
        w.push(e).unwrap();
    }
    let t = TraceFile::from_bytes("moe", w.finish(Trailer::default()).unwrap()).unwrap();
    let (bytes, _) = export(&[&t], &Filter::default());
    let d = decode(&bytes);
    let on = |track_name: &str| -> Vec<(String, u64, u64, String)> {
        let mut v: Vec<_> = d
            .slices
            .iter()
            .filter(|s| d.tracks[&s.track].name == track_name)
            .map(|s| (s.name.clone(), s.start, s.end, s.category.clone()))
            .collect();
        v.sort_by_key(|s| s.1);
        v
    };
    let cat = "gputrace_communication".to_string();
    assert_eq!(
        on("GPU 0 · DeepEP · stream 8 (communication)"),
        vec![
            (t.name(dispatch).into_owned(), 1100, 1200, cat.clone()),
            (t.name(combine).into_owned(), 1300, 1400, cat.clone())
        ]
    );
    assert_eq!(
        on("GPU 0 · vLLM/SGLang custom all-reduce · stream 7 (communication)"),
        vec![(t.name(custom).into_owned(), 1400, 1450, cat.clone())]
    );
    let library_tracks: Vec<&str> = d
        .tracks
        .values()
        .map(|t| t.name.as_str())
        .filter(|n| n.ends_with("(communication)"))
        .collect();
    assert_eq!(library_tracks.len(), 2, "none for NCCL or compute: {library_tracks:?}");
    // The kernels themselves stay on their streams, once.
    assert_eq!(d.slices.iter().filter(|s| s.category == "kernel").count(), 6);
    let parent = d
        .tracks
        .values()
        .find(|t| t.name.starts_with("GPU 0 · DeepEP"))
        .and_then(|t| t.parent)
        .unwrap();
    assert!(d.tracks[&parent].name.starts_with("GPU 0"), "under its GPU");
}
