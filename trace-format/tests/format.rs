//! Round-trip, damage and robustness tests of the file format.

use gputrace_format::chunk::{Frame, FLAG_CRITICAL, FRAME_LEN, PREAMBLE_LEN};
use gputrace_format::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

fn arb_event() -> impl Strategy<Value = Event> {
    let times = (0u64..1 << 40, 0u64..1 << 24);
    let gpu = (0u32..3, 0u32..3, prop_oneof![0u32..4, Just(u32::MAX)]);
    let small = proptest::array::uniform8(any::<u32>());
    (0u8..11, times, gpu, small, any::<u64>(), 0u32..50, any::<u8>()).prop_map(|(k, (s, d), (dev, ctx, st), v, big, name, b)| {
        let start = Nanos(s);
        let end = Nanos(s + d);
        let (device, context, stream) = (DeviceId(dev), ContextId(ctx), StreamId(st));
        let correlation = CorrelationId(v[0]);
        match k {
            0 => Event::Kernel(Kernel {
                start,
                end,
                device,
                context,
                stream,
                correlation,
                name: StringId(name),
                // Every field differs, so that two fields swapped in the
                // encoding would show.
                grid: [v[1], v[2], v[1].rotate_left(7) ^ 3],
                block: [v[3], v[3].rotate_left(3) ^ 5, v[2].rotate_left(11) ^ 9],
                static_shared_mem: v[4],
                dynamic_shared_mem: v[5],
                registers: v[6],
                graph_id: v[7],
                graph_node_id: big,
            }),
            1 => Event::Memcpy(Memcpy {
                start,
                end,
                device,
                context,
                stream,
                correlation,
                kind: CopyKind(b % 12),
                bytes: big,
                src_kind: MemoryKind(b),
                dst_kind: MemoryKind(b / 2),
                src_device: DeviceId(v[1]),
                dst_device: DeviceId(v[2]),
            }),
            2 => Event::Memset(Memset {
                start,
                end,
                device,
                context,
                stream,
                correlation,
                bytes: big,
                value: v[1],
                memory_kind: MemoryKind(b),
            }),
            3 => Event::Sync(Sync {
                start,
                end,
                device,
                context,
                stream,
                correlation,
                kind: SyncKind(b),
                cuda_event: v[1],
            }),
            4 => Event::Api(ApiCall {
                start,
                end,
                thread: ThreadId(dev),
                correlation,
                domain: ApiDomain(b % 3),
                cbid: v[1],
                name: StringId(name),
                return_value: v[2],
            }),
            5 => Event::Marker(Marker {
                start,
                end,
                thread: ThreadId(dev),
                name: StringId(name),
                domain: StringId(name / 2),
                kind: MarkerKind(b % 2),
                color: v[1],
            }),
            6 => Event::Collective(Collective {
                start,
                end,
                enqueue: Nanos(s.saturating_sub(v[1] as u64)),
                comm: CommId(big),
                op: StringId(name),
                seq: big ^ 0x55,
                count: v[2] as u64,
                datatype: StringId(name / 3),
                bytes: big >> 3,
                rank: v[3],
                nranks: v[4],
                root: v[5] as i32,
                algorithm: StringId(1),
                protocol: StringId(2),
                channels: v[6],
                device,
                stream,
                correlation,
            }),
            7 => Event::Loss(Loss {
                time: start,
                source: LossSource(b),
                count: big,
                detail: StringId(name),
            }),
            8 => Event::Counter(Counter {
                time: start,
                device,
                metric: StringId(name),
                value: big,
            }),
            9 => Event::Request(Request {
                time: start,
                id: big ^ 0xa5a5,
                phase: RequestPhase(b % 5),
                tokens: big >> 5,
            }),
            _ => Event::GraphLaunch(GraphLaunch {
                start,
                end,
                device,
                context,
                stream,
                correlation,
                graph_id: v[1],
            }),
        }
    })
}

fn sort_key(e: &Event) -> String {
    format!("{:?}", e)
}

fn write(events: &[Event], opts: WriterOptions, finish: bool) -> Vec<u8> {
    let header = Header {
        hostname: "h".into(),
        ..Header::default()
    };
    write_with(&header, events, opts, finish)
}

/// [`write`], with `header`.
fn write_with(header: &Header, events: &[Event], opts: WriterOptions, finish: bool) -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), header, opts).unwrap();
    for i in 0..60 {
        w.intern(&format!("name-{i}"));
    }
    for e in events {
        w.push(*e).unwrap();
    }
    if finish {
        w.finish(Trailer::default()).unwrap()
    } else {
        w.flush().unwrap();
        // Simulate a killed process: the writer never finishes.
        std::mem::take(w.get_mut())
    }
}

/// Every event of the chunks spans read (all kinds but collectives and
/// losses), in chunk order, through spans and their templates; a kernel's
/// graph node id, which spans do not carry, is 0.
fn read_spans(t: &TraceFile) -> Result<Vec<Event>> {
    let mut dec = t.decoder();
    let mut out = Vec::new();
    let mut block = Vec::new();
    for (i, c) in t.chunks().iter().enumerate() {
        if !c.kind.has_spans() {
            continue;
        }
        let mut cursor = dec.spans(i)?;
        assert_eq!(cursor.left(), c.count as usize);
        loop {
            cursor.fill(&mut block)?;
            if block.is_empty() {
                break;
            }
            assert!(block.len() <= SPAN_BLOCK);
            out.extend(block.iter().map(|s| s.event(&cursor.templates()[s.attr as usize])));
        }
        assert_eq!(cursor.left(), 0);
        dec.recycle_spans(cursor);
    }
    Ok(out)
}

/// The spans of the chunks `read_spans` reads, with their ends and
/// dictionary indexes skipped.
fn read_lean_spans(t: &TraceFile) -> Vec<Span> {
    let mut dec = t.decoder();
    let mut out = Vec::new();
    let mut block = Vec::new();
    for (i, c) in t.chunks().iter().enumerate() {
        if !c.kind.has_spans() {
            continue;
        }
        let mut cursor = dec.spans(i).unwrap();
        cursor.skip(true, true);
        loop {
            cursor.fill(&mut block).unwrap();
            if block.is_empty() {
                break;
            }
            out.extend_from_slice(&block);
        }
    }
    out
}

/// The events `read_spans` gives, from `for_each`.
fn read_span_kinds(t: &TraceFile) -> Vec<Event> {
    let mut dec = t.decoder();
    let mut out = Vec::new();
    for (i, c) in t.chunks().iter().enumerate() {
        if c.kind.has_spans() {
            dec.for_each(i, |e| {
                let mut e = *e;
                if let Event::Kernel(k) = &mut e {
                    k.graph_node_id = 0;
                }
                out.push(e)
            })
            .unwrap();
        }
    }
    out
}

fn read_all(t: &TraceFile) -> Vec<Event> {
    t.events().collect::<Result<Vec<_>, _>>().unwrap()
}

/// A buffer left nearly full while another track goes on is written after
/// a while, instead of making the writer check its limits at every push.
#[test]
fn a_nearly_full_idle_buffer_is_written() {
    let opts = WriterOptions {
        chunk_events: 1000,
        max_buffered_events: 100_000,
        ..WriterOptions::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &Header::default(), opts).unwrap();
    let name = w.intern("k");
    for i in 0..999u64 {
        w.push(Event::Kernel(Kernel {
            start: Nanos(i * 10),
            end: Nanos(i * 10 + 5),
            stream: StreamId(7),
            correlation: CorrelationId(i as u32),
            name,
            ..Kernel::default()
        }))
        .unwrap();
    }
    assert_eq!(w.buffered_events(), 999);
    for i in 0..200u64 {
        w.push(Event::Api(ApiCall {
            start: Nanos(i * 10),
            end: Nanos(i * 10 + 5),
            thread: ThreadId(4242),
            correlation: CorrelationId(i as u32),
            name,
            ..ApiCall::default()
        }))
        .unwrap();
    }
    assert!(
        w.buffered_events() <= 200,
        "the kernels' buffer is still held: {}",
        w.buffered_events()
    );
    let t = TraceFile::from_bytes("idle", w.finish(Trailer::default()).unwrap()).unwrap();
    let kernels: Vec<u32> = t.chunks().iter().filter(|c| c.kind == EventKind::Kernel).map(|c| c.count).collect();
    assert_eq!(kernels, [999]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    #[test]
    fn round_trip_any_order(events in proptest::collection::vec(arb_event(), 0..400), chunk in 1usize..50, huffman_literals in any::<bool>(), compress in any::<bool>()) {
        let bytes = write(&events, WriterOptions { chunk_events: chunk, max_buffered_events: 64, zstd_level: 1, huffman_literals, compress }, true);
        let t = TraceFile::from_bytes("rt", bytes).unwrap();
        prop_assert!(t.damage().is_none());
        prop_assert!(t.trailer().is_some());
        let mut got = read_all(&t);
        let mut want = events.clone();
        got.sort_by_key(sort_key);
        want.sort_by_key(sort_key);
        prop_assert_eq!(&got, &want);
        // Per track: time order, and every event exactly once.
        let mut per_track: BTreeMap<Track, usize> = BTreeMap::new();
        for s in t.tracks() {
            let evs: Vec<Event> = t.track_events(s.track).collect::<Result<_, _>>().unwrap();
            prop_assert!(evs.windows(2).all(|w| w[0].start() <= w[1].start()), "track {} not sorted", s.track);
            prop_assert!(evs.iter().all(|e| e.track() == s.track));
            per_track.insert(s.track, evs.len());
        }
        prop_assert_eq!(per_track.values().sum::<usize>(), events.len());
        // Spans and their templates give the same events as full decoding.
        let spans = read_spans(&t).unwrap();
        prop_assert_eq!(&spans, &read_span_kinds(&t));
        // Merged spans come in the merge's order, ties included.
        for s in t.tracks() {
            let ids: Vec<usize> = (0..t.chunks().len())
                .filter(|&i| t.chunks()[i].track == s.track && t.chunks()[i].kind.has_spans())
                .collect();
            let mut want = Vec::new();
            let mut m = t.merge(ids.clone());
            while let Some(e) = m.next_event().unwrap() {
                let mut e = *e;
                if let Event::Kernel(k) = &mut e {
                    k.graph_node_id = 0;
                }
                want.push(e);
            }
            let mut got = Vec::new();
            t.for_each_span_merged(ids, |_| (), |sp, _, templates| got.push(sp.event(&templates[sp.attr as usize]))).unwrap();
            prop_assert_eq!(got, want);
        }
        // Skipping ends and indexes leaves the starts and correlation ids.
        let lean = read_lean_spans(&t);
        prop_assert_eq!(lean.len(), spans.len());
        for (s, e) in lean.iter().zip(&spans) {
            prop_assert_eq!((s.start, s.end, s.corr, s.attr), (e.start().0, e.start().0, e.span_correlation(), 0));
        }
    }

    #[test]
    fn retimed_bytes_are_the_bytes_of_moved_times(events in proptest::collection::vec(arb_event(), 0..300), chunk in 1usize..40, shift in -(1i64 << 30)..(1i64 << 50), compress in any::<bool>(), finish in any::<bool>()) {
        // Half the collectives with an unknown enqueue, which `start -
        // enqueue` stores as the start itself.
        let events: Vec<Event> = events
            .into_iter()
            .enumerate()
            .map(|(i, mut e)| {
                if let Event::Collective(c) = &mut e {
                    if i % 2 == 0 {
                        c.enqueue = Nanos::ZERO;
                    }
                }
                e
            })
            .collect();
        // Times at least 2^30, so that every move stays representable.
        let lift = |t: Nanos| Nanos(t.0 + (1 << 30));
        let moved = |t: Nanos, by: i64| Nanos((t.0 as i64 + by) as u64);
        let shifted = |by: i64| -> Vec<Event> {
            events
                .iter()
                .map(|e| {
                    let mut e = *e;
                    let span = |s: &mut Nanos, t: &mut Nanos| {
                        *s = moved(lift(*s), by);
                        *t = moved(lift(*t), by);
                    };
                    match &mut e {
                        Event::Kernel(k) => span(&mut k.start, &mut k.end),
                        Event::Memcpy(m) => span(&mut m.start, &mut m.end),
                        Event::Memset(m) => span(&mut m.start, &mut m.end),
                        Event::Sync(y) => span(&mut y.start, &mut y.end),
                        Event::Api(a) => span(&mut a.start, &mut a.end),
                        Event::Marker(m) => span(&mut m.start, &mut m.end),
                        Event::Collective(c) => {
                            span(&mut c.start, &mut c.end);
                            if c.enqueue != Nanos::ZERO {
                                c.enqueue = moved(lift(c.enqueue), by);
                            }
                        }
                        Event::Loss(l) => l.time = moved(lift(l.time), by),
                        Event::Counter(c) => c.time = moved(lift(c.time), by),
                        Event::Request(r) => r.time = moved(lift(r.time), by),
                        Event::GraphLaunch(g) => span(&mut g.start, &mut g.end),
                    }
                    e
                })
                .collect()
        };
        let opts = WriterOptions { chunk_events: chunk, max_buffered_events: 64, compress, ..WriterOptions::default() };
        let header = Header { hostname: "final".into(), pid: 7, ..Header::default() };
        let written = |evs: &[Event], h: &Header| write_with(h, evs, opts.clone(), finish);
        let provisional = written(&shifted(0), &Header::default());
        let retimed = retime(&provisional, &header, shift, &opts).unwrap();
        prop_assert!(retimed == written(&shifted(shift), &header), "retimed bytes differ from a trace written with the moved times");
    }

    #[test]
    fn limits_hold_at_every_push(events in proptest::collection::vec(arb_event(), 0..400), chunk in 1usize..50, max in 1usize..80) {
        let opts = WriterOptions { chunk_events: chunk, max_buffered_events: max, ..WriterOptions::default() };
        let mut w = TraceWriter::new(Vec::new(), &Header::default(), opts).unwrap();
        for i in 0..60 {
            w.intern(&format!("name-{i}"));
        }
        for e in &events {
            w.push(*e).unwrap();
            // Reaching the limit writes at once.
            prop_assert!(w.buffered_events() < max, "{} buffered, limit {max}", w.buffered_events());
        }
        let t = TraceFile::from_bytes("limits", w.finish(Trailer::default()).unwrap()).unwrap();
        prop_assert!(t.chunks().iter().all(|c| c.count as usize <= chunk));
        prop_assert_eq!(t.chunks().iter().map(|c| c.count as usize).sum::<usize>(), events.len());
        // A single track fills its chunks exactly (when the total limit is not lower).
        if max > chunk && events.iter().all(|e| (e.kind(), e.track()) == (events[0].kind(), events[0].track())) {
            let full = t.chunks().iter().filter(|c| c.count as usize == chunk).count();
            prop_assert_eq!(full, events.len() / chunk);
        }
    }

    /// Calls and ranges of one thread that start together: merged spans
    /// break ties as the event merge does (the longer first, then the chunk).
    #[test]
    fn merged_spans_break_ties_as_the_merge(evs in proptest::collection::vec((any::<bool>(), 0u64..12, 0u64..6, 0u32..3), 1..120), chunk in 1usize..6) {
        let thread = ThreadId(7);
        let events: Vec<Event> = evs.iter().enumerate().map(|(i, &(marker, s, d, name))| {
            let (start, end) = (Nanos(s), Nanos(s + d));
            if marker {
                Event::Marker(Marker { start, end, thread, name: StringId(name), domain: StringId::EMPTY, kind: MarkerKind::RANGE, color: 0 })
            } else {
                Event::Api(ApiCall { start, end, thread, correlation: CorrelationId(i as u32 + 1), domain: ApiDomain::RUNTIME, cbid: 211, name: StringId(name), return_value: 0 })
            }
        }).collect();
        let bytes = write(&events, WriterOptions { chunk_events: chunk, max_buffered_events: 64, ..WriterOptions::default() }, true);
        let t = TraceFile::from_bytes("ties", bytes).unwrap();
        let ids: Vec<usize> = (0..t.chunks().len()).collect();
        let mut want = Vec::new();
        let mut m = t.merge(ids.clone());
        while let Some(e) = m.next_event().unwrap() {
            want.push(*e);
        }
        let mut got = Vec::new();
        t.for_each_span_merged(ids, |_| (), |sp, _, templates| got.push(sp.event(&templates[sp.attr as usize]))).unwrap();
        prop_assert_eq!(got.len(), events.len());
        prop_assert_eq!(got, want);
    }

    #[test]
    fn mutated_files_never_panic(events in proptest::collection::vec(arb_event(), 1..200), flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8), cut in any::<usize>()) {
        let mut bytes = write(&events, WriterOptions { chunk_events: 16, ..WriterOptions::default() }, true);
        for (pos, v) in flips {
            let n = bytes.len();
            bytes[pos % n] ^= v | 1;
        }
        let n = bytes.len();
        bytes.truncate(cut % (n + 1));
        if let Ok(t) = TraceFile::from_bytes("fuzz", bytes) {
            for e in t.events() { let _ = e; }
            for s in t.tracks() { for e in t.track_events(s.track) { let _ = e; } }
            let _ = read_spans(&t);
        }
    }
}

fn demo_trace() -> Vec<u8> {
    let cfg = gputrace_synth::JobConfig {
        ranks: 2,
        steps: 3,
        layers: 4,
        ..Default::default()
    };
    let s = gputrace_synth::schedule(&cfg);
    gputrace_synth::write_rank(&cfg, &s, 0, Vec::new()).unwrap().0
}

#[test]
fn retiming_refuses_times_it_cannot_represent_and_foreign_bytes() {
    let bytes = demo_trace();
    let t = TraceFile::from_bytes("demo", bytes.clone()).unwrap();
    let (first, _) = t.time_span().unwrap();
    let opts = WriterOptions::default();
    // Moving the earliest start to 0 is fine; one nanosecond further is not.
    let to_zero = retime(&bytes, t.header(), -(first.0 as i64), &opts).unwrap();
    let moved = TraceFile::from_bytes("moved", to_zero).unwrap();
    assert_eq!(moved.time_span().unwrap().0, Nanos(0));
    assert_eq!(moved.event_total(), t.event_total());
    let err = retime(&bytes, t.header(), -(first.0 as i64) - 1, &opts).unwrap_err();
    assert!(err.to_string().contains("before 0"), "{err}");
    let err = retime(b"not a trace at all", t.header(), 0, &opts).unwrap_err();
    assert!(err.to_string().contains("not a trace"), "{err}");
    let err = retime(&bytes[..bytes.len() - 3], t.header(), 0, &opts).unwrap_err();
    assert!(err.to_string().contains("cut off"), "{err}");
    // A damaged payload is refused, not given a fresh checksum.
    let mut damaged = bytes.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 0x40;
    let err = retime(&damaged, t.header(), 0, &opts).unwrap_err();
    assert!(err.to_string().contains("checksum"), "{err}");
}

#[test]
fn truncated_file_reads_up_to_last_whole_chunk() {
    let full = demo_trace();
    let t = TraceFile::from_bytes("full", full.clone()).unwrap();
    let total = t.event_total();
    // Where each chunk starts (and the file ends).
    let mut boundaries = vec![];
    let mut pos = PREAMBLE_LEN;
    while pos < full.len() {
        boundaries.push(pos);
        let frame = Frame::decode(full[pos..pos + FRAME_LEN].try_into().unwrap()).unwrap();
        pos += FRAME_LEN + frame.payload_len as usize;
    }
    boundaries.push(full.len());
    let mut last = 0;
    // Every cut point: never a panic; events readable grow with the length.
    for cut in (16..full.len()).step_by(37) {
        match TraceFile::from_bytes("cut.gtrace", full[..cut].to_vec()) {
            Ok(t) => {
                let n = read_all(&t).len() as u64;
                assert!(n >= last && n <= total);
                last = n;
                // A cut inside a chunk is damage; one between chunks reads as
                // a writer killed there (no trailer, nothing lost).
                if let Some(d) = t.damage() {
                    assert_eq!(d.offset + d.lost_bytes, cut as u64);
                } else {
                    assert!(boundaries.contains(&cut), "a cut at {cut}, inside a chunk, is not reported");
                }
                assert!(t.trailer().is_none());
            }
            Err(e) => {
                let msg = e.to_string();
                assert!(msg.contains("cut.gtrace") && msg.contains("offset"), "{msg}");
            }
        }
    }
    assert!(last > total / 2);
}

#[test]
fn killed_writer_leaves_readable_file_without_trailer() {
    let events: Vec<Event> = (0..1000)
        .map(|i| {
            Event::Loss(Loss {
                time: Nanos(i * 10),
                source: LossSource::CUPTI_DROPPED,
                count: i,
                detail: StringId::EMPTY,
            })
        })
        .collect();
    let bytes = write(&events, WriterOptions::default(), false);
    let t = TraceFile::from_bytes("killed", bytes).unwrap();
    assert!(t.trailer().is_none());
    assert!(t.damage().is_none());
    assert_eq!(read_all(&t).len(), 1000);
}

#[test]
fn foreign_and_empty_files_are_named_errors() {
    let e = TraceFile::from_bytes("x.json", b"{\"traceEvents\": []}".to_vec()).unwrap_err();
    assert!(matches!(e, FormatError::NotATrace { .. }), "{e}");
    assert!(
        e.to_string().contains("x.json") && e.to_string().contains("not a gputrace trace"),
        "{e}"
    );
    let e = TraceFile::from_bytes("empty", Vec::new()).unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
    let mut b = demo_trace();
    b[8] = 9; // major version 9
    let e = TraceFile::from_bytes("new.gtrace", b).unwrap_err();
    assert!(matches!(e, FormatError::UnsupportedVersion { major: 9, .. }), "{e}");
    assert!(e.to_string().contains("upgrade gputrace"));
    let e = TraceFile::open("/nonexistent/dir/t.gtrace").unwrap_err();
    assert!(e.to_string().contains("/nonexistent/dir/t.gtrace"), "{e}");
}

fn chunk(kind: u16, flags: u16, payload: &[u8]) -> Vec<u8> {
    let f = Frame {
        kind,
        flags,
        payload_len: payload.len() as u32,
        raw_len: (payload.len() - 1) as u32,
        payload_crc: crc32(payload),
    };
    let mut v = f.encode().to_vec();
    assert_eq!(v.len(), FRAME_LEN);
    v.extend_from_slice(payload);
    v
}

/// CRC-32 (IEEE), written out here so the test does not trust the crate.
fn crc32(b: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &x in b {
        crc ^= x as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

#[test]
fn unknown_chunks_are_skipped_unless_critical() {
    let full = demo_trace();
    let n = read_all(&TraceFile::from_bytes("a", full.clone()).unwrap()).len();
    let hdr = Frame::decode(full[16..16 + FRAME_LEN].try_into().unwrap()).unwrap();
    let at = 16 + FRAME_LEN + hdr.payload_len as usize;
    let mut with_unknown = full[..at].to_vec();
    with_unknown.extend(chunk(77, 0, &[0, 1, 2, 3]));
    with_unknown.extend_from_slice(&full[at..]);
    let t = TraceFile::from_bytes("future", with_unknown).unwrap();
    assert_eq!(t.skipped_chunks(), 1);
    assert_eq!(read_all(&t).len(), n);

    let mut with_critical = full[..at].to_vec();
    with_critical.extend(chunk(78, FLAG_CRITICAL, &[0, 1]));
    with_critical.extend_from_slice(&full[at..]);
    let e = TraceFile::from_bytes("future-critical", with_critical).unwrap_err();
    assert!(e.to_string().contains("upgrade gputrace"), "{e}");
}

#[test]
fn checksum_damage_stops_at_the_chunk() {
    let mut b = demo_trace();
    let n = b.len();
    b[n - 40] ^= 0xff; // inside the last chunk (the trailer)
    let t = TraceFile::from_bytes("flip", b).unwrap();
    let d = t.damage().unwrap();
    assert!(d.reason.contains("checksum"), "{d:?}");
    assert!(t.trailer().is_none());
}

#[test]
fn mmap_open_reads_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("r.gtrace");
    let b = demo_trace();
    std::fs::write(&p, &b).unwrap();
    let a = TraceFile::open(&p).unwrap();
    let m = TraceFile::from_bytes("mem", b).unwrap();
    assert_eq!(read_all(&a), read_all(&m));
    assert_eq!(a.header(), m.header());
    assert_eq!(a.len_bytes(), std::fs::metadata(&p).unwrap().len());
}

#[test]
fn writer_memory_is_bounded_across_many_tracks() {
    let opts = WriterOptions {
        chunk_events: 1000,
        max_buffered_events: 5000,
        ..WriterOptions::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &Header::default(), opts).unwrap();
    let mut peak = 0;
    // 300 threads interleaved: no single buffer fills, the global cap must act.
    for i in 0..200_000u64 {
        let e = Event::Api(ApiCall {
            start: Nanos(i),
            end: Nanos(i + 1),
            thread: ThreadId((i % 300) as u32),
            correlation: CorrelationId(i as u32),
            domain: ApiDomain::RUNTIME,
            cbid: 1,
            name: StringId::EMPTY,
            return_value: 0,
        });
        w.push(e).unwrap();
        peak = peak.max(w.buffered_events());
    }
    assert!(peak <= 5000, "peak {peak}");
    let t = TraceFile::from_bytes("bounded", w.finish(Trailer::default()).unwrap()).unwrap();
    assert_eq!(t.event_total(), 200_000);
    assert_eq!(t.trailer().unwrap().events["api"], 200_000);
}

#[test]
fn communicators_survive_a_cut_and_keep_the_first_of_each_id() {
    let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
    let a = Communicator {
        id: CommId(0xabc),
        name: "default_pg".into(),
        rank: 3,
        nranks: 8,
        nodes: 2,
        plugin_version: 5,
        created: Nanos(10),
    };
    let b = Communicator {
        id: CommId(0xdef),
        rank: 0,
        nranks: 2,
        ..Default::default()
    };
    w.add_communicators(std::slice::from_ref(&a)).unwrap();
    w.add_communicators(&[Communicator { rank: 99, ..a.clone() }, b.clone()]).unwrap();
    w.flush().unwrap();
    // No trailer: the writer was "killed" here.
    let bytes = std::mem::take(w.get_mut());
    let t = TraceFile::from_bytes("cut.gtrace", bytes).unwrap();
    assert!(t.trailer().is_none());
    assert_eq!(t.communicators(), &[a, b]);
}

#[test]
fn capture_windows_survive_a_cut_and_are_sorted_and_merged() {
    let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
    let win = |a: u64, b: u64| CaptureWindow {
        start: Nanos(a),
        end: Nanos(b),
    };
    w.add_capture_windows(&[win(100, 200)]).unwrap();
    w.add_capture_windows(&[win(50, 60), win(190, 250), win(300, 300)]).unwrap();
    w.add_capture_windows(&[]).unwrap();
    w.flush().unwrap();
    let bytes = std::mem::take(w.get_mut());
    let t = TraceFile::from_bytes("cut.gtrace", bytes).unwrap();
    assert!(t.trailer().is_none());
    assert_eq!(t.capture_windows(), &[win(50, 60), win(100, 250)]);
    assert!(TraceFile::from_bytes("demo", demo_trace()).unwrap().capture_windows().is_empty());
}

#[test]
fn an_opened_window_is_its_closed_record_or_ends_with_the_last_gpu_work() {
    let win = |a: u64, b: u64| CaptureWindow {
        start: Nanos(a),
        end: Nanos(b),
    };
    let kernel = |w: &mut TraceWriter<Vec<u8>>, start: u64, end: u64| {
        let name = w.intern("k");
        w.push(Event::Kernel(Kernel {
            start: Nanos(start),
            end: Nanos(end),
            device: DeviceId(0),
            context: ContextId(1),
            stream: StreamId(7),
            correlation: CorrelationId(1),
            name,
            grid: [1, 1, 1],
            block: [1, 1, 1],
            static_shared_mem: 0,
            dynamic_shared_mem: 0,
            registers: 1,
            graph_id: 0,
            graph_node_id: 0,
        }))
        .unwrap();
    };
    let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
    w.add_capture_windows(&[CaptureWindow::opened(Nanos(100))]).unwrap();
    kernel(&mut w, 110, 150);
    w.add_capture_windows(&[win(100, 200)]).unwrap();
    w.add_capture_windows(&[CaptureWindow::opened(Nanos(1000))]).unwrap();
    kernel(&mut w, 990, 1300);
    w.flush().unwrap();
    // Killed inside the second window: it ends with its last kernel.
    let cut = w.get_mut().clone();
    let t = TraceFile::from_bytes("killed", cut).unwrap();
    assert_eq!(t.capture_windows(), &[win(100, 200), win(1000, 1300)]);
    // An opened window without any work after its start is dropped.
    w.add_capture_windows(&[CaptureWindow::opened(Nanos(5000))]).unwrap();
    w.flush().unwrap();
    let t = TraceFile::from_bytes("killed", w.get_mut().clone()).unwrap();
    assert_eq!(t.capture_windows(), &[win(100, 200), win(1000, 1300)]);
}

/// What a 1.2 reader does with a 1.3 file's capture windows: a chunk kind it
/// does not know, not critical, is skipped (here: rewritten to a number this
/// build does not know either, which takes the same path).
#[test]
fn a_reader_that_does_not_know_capture_windows_skips_them() {
    let full = demo_trace();
    let hdr = Frame::decode(full[16..16 + FRAME_LEN].try_into().unwrap()).unwrap();
    let at = 16 + FRAME_LEN + hdr.payload_len as usize;
    let mut payload = vec![0u8];
    payload.extend_from_slice(br#"[{"start": 1, "end": 2}]"#);
    for (kind, windows) in [(6u16, 1usize), (60, 0)] {
        let mut b = full[..at].to_vec();
        b.extend(chunk(kind, 0, &payload));
        b.extend_from_slice(&full[at..]);
        let t = TraceFile::from_bytes("win", b).unwrap();
        assert!(t.damage().is_none());
        assert_eq!(t.capture_windows().len(), windows);
        assert_eq!(t.event_total(), TraceFile::from_bytes("demo", demo_trace()).unwrap().event_total());
    }
}

#[test]
fn a_garbled_communicators_chunk_is_damage_not_a_panic() {
    let full = demo_trace();
    let hdr = Frame::decode(full[16..16 + FRAME_LEN].try_into().unwrap()).unwrap();
    let at = 16 + FRAME_LEN + hdr.payload_len as usize;
    let mut b = full[..at].to_vec();
    let mut payload = vec![0u8]; // no meta
    payload.extend_from_slice(b"[{\"id\": \"not a number\"}]");
    b.extend(chunk(5, 0, &payload));
    b.extend_from_slice(&full[at..]);
    let t = TraceFile::from_bytes("garbled", b).unwrap();
    let d = t.damage().expect("reported as damage");
    assert!(d.reason.contains("communicators"), "{}", d.reason);
    assert!(t.communicators().is_empty());
}

/// The demo job's events and strings, to write again with other writer
/// options and check the result against.
struct Rewrite {
    events: Vec<Event>,
    strings: Vec<String>,
    trace: TraceFile,
}

impl Rewrite {
    fn demo() -> Rewrite {
        let trace = TraceFile::from_bytes("demo", demo_trace()).unwrap();
        let events = read_all(&trace);
        assert!(events.len() > 300, "{}", events.len());
        let strings = (1..trace.string_count() as u32)
            .map(|i| trace.name(StringId(i)).into_owned())
            .collect();
        Rewrite { events, strings, trace }
    }

    fn write(&self, opts: WriterOptions) -> Vec<u8> {
        let mut w = TraceWriter::new(Vec::new(), self.trace.header(), opts).unwrap();
        for s in &self.strings {
            w.intern(s);
        }
        for e in &self.events {
            w.push_ref(e).unwrap();
        }
        w.finish(Trailer::default()).unwrap()
    }

    /// `bytes` read back hold the demo's events.
    fn check(&self, bytes: Vec<u8>) {
        let u = TraceFile::from_bytes("rewritten", bytes).unwrap();
        assert!(u.damage().is_none());
        let (mut a, mut b) = (read_all(&u), self.events.clone());
        a.sort_by_key(sort_key);
        b.sort_by_key(sort_key);
        assert_eq!(a, b);
    }
}

/// Huffman-coded literals (`WriterOptions::huffman_literals`) change the
/// size, not the events.
#[test]
fn huffman_literals_make_smaller_files_of_the_same_events() {
    let r = Rewrite::demo();
    let plain = r.write(WriterOptions::default());
    let huffman = r.write(WriterOptions {
        huffman_literals: true,
        ..WriterOptions::default()
    });
    assert!(huffman.len() < plain.len(), "{} against {}", huffman.len(), plain.len());
    r.check(plain);
    r.check(huffman);
}

/// `WriterOptions::compress` off stores chunk bodies as encoded: a larger
/// file of the same events, whose strings can be found in it as they are.
#[test]
fn uncompressed_chunks_hold_the_same_events() {
    let r = Rewrite::demo();
    let compressed = r.write(WriterOptions::default());
    let plain = r.write(WriterOptions {
        compress: false,
        ..WriterOptions::default()
    });
    assert!(plain.len() > 2 * compressed.len(), "{} against {}", plain.len(), compressed.len());
    // The longest string, stored as it is only when strings chunks are not compressed.
    let longest = r.strings.iter().max_by_key(|s| s.len()).unwrap().as_bytes();
    let holds = |bytes: &[u8]| bytes.windows(longest.len()).any(|w| w == longest);
    assert!(holds(&plain) && !holds(&compressed));
    r.check(compressed);
    r.check(plain);
}

/// Decoders hand their zstd contexts on to the thread's next decoders: a
/// context used on one file (Huffman-coded literals or not) and then on
/// another decodes each exactly as a fresh one does, whatever the order.
#[test]
fn reused_decompression_contexts_decode_like_fresh_ones() {
    let r = Rewrite::demo();
    let files = [
        r.write(WriterOptions::default()),
        r.write(WriterOptions {
            huffman_literals: true,
            ..WriterOptions::default()
        }),
    ];
    let files: Vec<TraceFile> = files
        .into_iter()
        .enumerate()
        .map(|(i, b)| TraceFile::from_bytes(format!("f{i}"), b).unwrap())
        .collect();
    let first: Vec<Vec<Event>> = files.iter().map(read_all).collect();
    for order in [[0, 1, 0, 1], [1, 0, 0, 1]] {
        for i in order {
            assert_eq!(read_all(&files[i]), first[i], "file {i} after the contexts moved on");
            // A merge opens a decoder of its own.
            let merged: Vec<Event> = {
                let mut m = files[i].merge((0..files[i].chunks().len()).collect());
                let mut out = Vec::new();
                while let Some(e) = m.next_event().unwrap() {
                    out.push(*e);
                }
                out
            };
            assert_eq!(merged.len(), first[i].len());
        }
    }
}

/// A span merge gives the events of an event merge in the same order (each
/// span's event is its entry with its times and series), as runs that each
/// come from one chunk.
#[test]
fn span_merge_reads_as_the_event_merge() {
    let t = TraceFile::from_bytes("demo", demo_trace()).unwrap();
    let by_track: std::collections::BTreeMap<String, Vec<usize>> =
        t.chunks()
            .iter()
            .enumerate()
            .filter(|(_, c)| c.kind.has_spans())
            .fold(Default::default(), |mut m, (i, c)| {
                m.entry(format!("{:?}", c.track)).or_default().push(i);
                m
            });
    let (mut total, mut runs) = (0, 0);
    // Each track alone, and every span chunk of the file at once.
    let all: Vec<usize> = by_track.values().flatten().copied().collect();
    for ids in by_track.values().cloned().chain([all]) {
        let mut want = Vec::new();
        let mut m = t.merge(ids.clone());
        while let Some(e) = m.next_event().unwrap() {
            want.push(*e);
        }
        let mut got = Vec::new();
        let mut merge = t.span_merge(ids);
        let mut opened = Vec::new();
        while let Some(run) = merge
            .next_run(|slot, cursor| {
                cursor.read_node_ids();
                opened.push((slot, cursor.index()));
            })
            .unwrap()
        {
            assert!(!run.spans.is_empty());
            assert_eq!(
                opened.iter().rev().find(|(s, _)| *s == run.slot).map(|o| o.1),
                Some(run.cursor.index())
            );
            for sp in run.spans {
                got.push(sp.event(&run.cursor.templates()[sp.attr as usize]));
            }
            runs += 1;
        }
        total += want.len();
        assert_eq!(got, want);
    }
    assert!(
        total as u64 > t.event_total() && runs > 10 && runs * 4 < total,
        "{runs} runs, {total} events"
    );
}

/// CUPTI overhead totals written into a trailer read back as written.
#[test]
fn overhead_entries_round_trip_through_the_trailer() {
    let mut t = Trailer::default();
    t.set_overhead("buffer_flush", 3, 900);
    t.set_overhead("instrumentation", 12, 3_400_000);
    t.extra.insert("agent.records_skipped".into(), "5".into());
    let read: Vec<_> = t.overheads().collect();
    assert_eq!(read, [("buffer_flush", 3, 900), ("instrumentation", 12, 3_400_000)]);
}

/// Counter samples round-trip exactly, with their series names stored once
/// in the string table, on the process track, in time order per series.
#[test]
fn counter_samples_round_trip_with_their_series_names() {
    let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
    let clock = w.intern(metric::SM_CLOCK_MHZ);
    let power = w.intern(metric::POWER_MW);
    let mut want = Vec::new();
    for i in 0..1000u64 {
        for dev in 0..2u32 {
            let c = Counter {
                time: Nanos(1_000_000 + i * 100_000_000),
                device: DeviceId(dev),
                metric: if i % 2 == 0 { clock } else { power },
                value: if i % 2 == 0 {
                    1980 - (i % 7) * 15 - dev as u64
                } else {
                    650_000 + i * 3
                },
            };
            w.push(Event::Counter(c)).unwrap();
            want.push(c);
        }
    }
    // A value at the top of the range survives the zigzag deltas.
    let top = Counter {
        time: Nanos(u32::MAX as u64),
        device: DeviceId(0),
        metric: power,
        value: u64::MAX,
    };
    w.push(Event::Counter(top)).unwrap();
    want.push(top);
    let bytes = w.finish(Trailer::default()).unwrap();
    let t = TraceFile::from_bytes("counters", bytes).unwrap();
    assert!(t.chunks().iter().all(|c| c.kind == EventKind::Counter && c.track == Track::Process));
    assert_eq!(t.event_counts().get(&EventKind::Counter), Some(&(want.len() as u64)));
    let mut got: Vec<Counter> = read_all(&t)
        .into_iter()
        .map(|e| match e {
            Event::Counter(c) => c,
            other => panic!("not a counter: {other:?}"),
        })
        .collect();
    let key = |c: &Counter| (c.time, c.device, c.metric, c.value);
    got.sort_by_key(key);
    want.sort_by_key(key);
    assert_eq!(got, want);
    assert_eq!(t.name(clock), "nvml.sm_clock_mhz");
    assert_eq!(t.name(power), "nvml.power_mw");
    // The names are in the string table once each.
    assert_eq!(t.string_count(), 3);
    assert_eq!(t.format_version(), (1, gputrace_format::chunk::FORMAT_MINOR));
}

/// What a 1.0 or 1.1 reader does with a 1.2 file's counters: an events
/// chunk of a kind it does not know, on a track it knows, is skipped, and
/// everything else reads. Here the counter chunk's kind is rewritten to a
/// number this build does not know either, which takes the same path.
#[test]
fn a_reader_that_does_not_know_counters_skips_them() {
    let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
    let name = w.intern("k");
    let util = w.intern(metric::GPU_UTIL_PCT);
    w.push(Event::Counter(Counter {
        time: Nanos(5),
        device: DeviceId(0),
        metric: util,
        value: 97,
    }))
    .unwrap();
    w.flush().unwrap();
    w.push(Event::Kernel(Kernel {
        start: Nanos(10),
        end: Nanos(20),
        name,
        ..Kernel::default()
    }))
    .unwrap();
    let mut bytes = w.finish(Trailer::default()).unwrap();
    // Find the counter chunk: its meta starts with varint kind 9, track tag 3.
    let mut pos = PREAMBLE_LEN;
    let mut patched = false;
    while pos < bytes.len() {
        let f = Frame::decode(bytes[pos..pos + FRAME_LEN].try_into().unwrap()).unwrap();
        let p = pos + FRAME_LEN;
        if f.kind == 3 && bytes[p + 1] == 9 && bytes[p + 2] == 3 {
            bytes[p + 1] = 99;
            let crc = crc32(&bytes[p..p + f.payload_len as usize]);
            bytes[pos + 16..pos + 20].copy_from_slice(&crc.to_le_bytes());
            let fcrc = crc32(&bytes[pos..pos + 20]);
            bytes[pos + 20..pos + 24].copy_from_slice(&fcrc.to_le_bytes());
            patched = true;
        }
        pos = p + f.payload_len as usize;
    }
    assert!(patched, "no counter chunk found");
    let t = TraceFile::from_bytes("old-reader", bytes).unwrap();
    assert!(t.damage().is_none(), "{:?}", t.damage());
    assert_eq!(t.skipped_chunks(), 1);
    let all = read_all(&t);
    assert_eq!(all.len(), 1);
    assert!(matches!(all[0], Event::Kernel(_)));
}

/// `counter_series` groups samples by (device, metric) in time order;
/// means and times weigh each sample by the gap to the next one.
#[test]
fn counter_series_are_grouped_sorted_and_time_weighted() {
    let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
    let clock = w.intern(metric::SM_CLOCK_MHZ);
    let reasons = w.intern(metric::THROTTLE_REASONS);
    // Out of order on purpose; gaps of 100 ns, the value 1000 held for 300 of 400 ns.
    for (t, v) in [(300u64, 2000u64), (0, 1000), (100, 1000), (200, 1000)] {
        w.push(Event::Counter(Counter {
            time: Nanos(t),
            device: DeviceId(1),
            metric: clock,
            value: v,
        }))
        .unwrap();
    }
    w.push(Event::Counter(Counter {
        time: Nanos(0),
        device: DeviceId(0),
        metric: reasons,
        value: 4,
    }))
    .unwrap();
    let t = TraceFile::from_bytes("s", w.finish(Trailer::default()).unwrap()).unwrap();
    let s = t.counter_series().unwrap();
    assert_eq!(s.len(), 2);
    assert_eq!((s[0].device, s[0].metric.as_str()), (DeviceId(0), metric::THROTTLE_REASONS));
    assert_eq!(
        s[1].samples,
        vec![(Nanos(0), 1000), (Nanos(100), 1000), (Nanos(200), 1000), (Nanos(300), 2000)]
    );
    assert_eq!(s[1].time_weighted_mean(), Some(1250.0));
    assert_eq!(s[1].time_where(|v| v < 1500), (Nanos(300), Nanos(400)));
    assert_eq!(s[0].time_weighted_mean(), Some(4.0));
}
