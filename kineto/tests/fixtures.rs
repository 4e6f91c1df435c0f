//! Mapping, timestamps, detection and error reporting on the small
//! handwritten fixtures in `tests/fixtures/` (see its README).

use gputrace_format::*;
use gputrace_kineto::{import, is_kineto, to_trace, ImportOptions, KinetoError};
use std::io::Write;
use std::path::{Path, PathBuf};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn fixture(name: &str) -> PathBuf {
    Path::new(FIXTURES).join(name)
}

fn events(t: &TraceFile) -> Vec<Event> {
    t.events().collect::<Result<_, _>>().unwrap()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

const BASE: u64 = 1_700_000_000_000_000_000;

#[test]
fn current_schema_maps_every_kind() {
    let t = to_trace(fixture("current_schema.json")).unwrap();
    let h = t.header();
    assert_eq!(h.producer, Producer::Import);
    assert_eq!(h.rank.rank, Some(Rank(1)));
    assert_eq!(h.rank.world_size, Some(4));
    assert_eq!(h.devices.len(), 1);
    assert_eq!(h.devices[0].name, "NVIDIA H100 80GB HBM3");
    assert_eq!(h.devices[0].sm_count, 132);
    assert_eq!(h.devices[0].compute_capability, (9, 0));
    assert_eq!(h.cuda.runtime, Some(12040));
    assert_eq!(h.extra["import.source"], "current_schema.json");
    assert_eq!(h.extra["kineto.baseTimeNanoseconds"], BASE.to_string());
    assert_eq!(h.extra["kineto.trace_id"], "ABC");
    assert_eq!(h.extra["kineto.distributedInfo.backend"], "nccl");
    let trailer = t.trailer().expect("finished cleanly");
    assert_eq!(trailer.extra["import.trace_events"], "15");
    assert_eq!(trailer.extra["import.flows"], "2");
    assert_eq!(trailer.extra["import.unmapped"], "1");

    let ev = events(&t);
    let kernels: Vec<&Kernel> = ev
        .iter()
        .filter_map(|e| if let Event::Kernel(k) = e { Some(k) } else { None })
        .collect();
    assert_eq!(kernels.len(), 2);
    let gemm = kernels.iter().find(|k| t.name(k.name) == "gemm_kernel").unwrap();
    assert_eq!((gemm.start.0, gemm.end.0), (BASE + 1_100_123, BASE + 1_120_579));
    assert_eq!(
        (gemm.device, gemm.context, gemm.stream, gemm.correlation),
        (DeviceId(0), ContextId(1), StreamId(7), CorrelationId(42))
    );
    assert_eq!((gemm.grid, gemm.block, gemm.registers), ([56, 2, 1], [384, 1, 1], 168));
    assert_eq!(gemm.static_shared_mem + gemm.dynamic_shared_mem, 231_424);

    let coll = ev
        .iter()
        .find_map(|e| if let Event::Collective(c) = e { Some(*c) } else { None })
        .unwrap();
    assert_eq!(t.name(coll.op), "AllGather", "PyTorch's _allgather_base under NCCL's name");
    assert_eq!(t.name(coll.datatype), "BFloat16");
    assert_eq!((coll.count, coll.bytes, coll.nranks, coll.seq), (25136, 50272, 4, 17));
    assert_eq!(coll.rank, 2, "global rank 1 is third in [4, 5, 1, 7]");
    assert_eq!(coll.comm, CommId(3));
    assert_eq!(
        (t.name(coll.algorithm).as_ref(), t.name(coll.protocol).as_ref(), coll.channels),
        ("RING", "LL", 11)
    );
    assert_eq!(
        (coll.correlation, coll.stream, coll.start.0, coll.end.0),
        (CorrelationId(44), StreamId(20), BASE + 1_200_000, BASE + 1_230_000)
    );

    let copies: Vec<&Memcpy> = ev
        .iter()
        .filter_map(|e| if let Event::Memcpy(m) = e { Some(m) } else { None })
        .collect();
    assert_eq!(copies.len(), 2);
    assert_eq!(
        (copies[0].kind, copies[0].src_kind, copies[0].dst_kind, copies[0].bytes),
        (CopyKind::HTOD, MemoryKind::PINNED, MemoryKind::DEVICE, 2048)
    );
    assert_eq!(
        (copies[0].start.0, copies[0].end.0, copies[0].correlation),
        (BASE + 1_300_500, BASE + 1_302_100, CorrelationId(45))
    );
    assert_eq!(
        (copies[1].kind, copies[1].src_kind, copies[1].dst_kind),
        (CopyKind::DTOH, MemoryKind::DEVICE, MemoryKind::PAGEABLE)
    );

    let set = ev
        .iter()
        .find_map(|e| if let Event::Memset(m) = e { Some(*m) } else { None })
        .unwrap();
    assert_eq!(
        (set.start.0, set.end.0, set.bytes, set.memory_kind),
        (BASE + 1_310_250, BASE + 1_311_019, 4, MemoryKind::DEVICE)
    );

    let sync = ev
        .iter()
        .find_map(|e| if let Event::Sync(s) = e { Some(*s) } else { None })
        .unwrap();
    assert_eq!(
        (sync.kind, sync.stream, sync.correlation),
        (SyncKind::CONTEXT_SYNCHRONIZE, StreamId::UNKNOWN, CorrelationId(48))
    );

    let apis: Vec<&ApiCall> = ev
        .iter()
        .filter_map(|e| if let Event::Api(a) = e { Some(a) } else { None })
        .collect();
    assert_eq!(apis.len(), 2);
    let rt = apis.iter().find(|a| a.domain == ApiDomain::RUNTIME).unwrap();
    assert_eq!(
        (t.name(rt.name).as_ref(), rt.thread, rt.correlation, rt.cbid),
        ("cudaLaunchKernel", ThreadId(101), CorrelationId(42), 211)
    );
    assert_eq!((rt.start.0, rt.end.0), (BASE + 1_010_001, BASE + 1_015_501));
    let drv = apis.iter().find(|a| a.domain == ApiDomain::DRIVER).unwrap();
    assert_eq!(
        (t.name(drv.name).as_ref(), drv.cbid, drv.correlation),
        ("cuLaunchKernel", 307, CorrelationId(43))
    );

    let markers: Vec<&Marker> = ev
        .iter()
        .filter_map(|e| if let Event::Marker(m) = e { Some(m) } else { None })
        .collect();
    assert_eq!(markers.len(), 4);
    let step = markers.iter().find(|m| t.name(m.domain) == "user_annotation").unwrap();
    assert_eq!(
        (t.name(step.name).as_ref(), step.thread, step.kind),
        ("ProfilerStep#3", ThreadId(101), MarkerKind::RANGE)
    );
    assert_eq!((step.start.0, step.end.0), (BASE + 1_000_500, BASE + 1_500_750));
    let gpu_step = markers.iter().find(|m| t.name(m.domain) == "gpu_user_annotation").unwrap();
    assert_eq!((t.name(gpu_step.name).as_ref(), gpu_step.thread), ("ProfilerStep#3", ThreadId(7)));

    // CPU operators are markers on their thread, domain `cpu_op`.
    let ops: Vec<(String, u32, u64, u64)> = markers
        .iter()
        .filter(|m| t.name(m.domain) == "cpu_op")
        .map(|m| (t.name(m.name).into_owned(), m.thread.0, m.start.0 - BASE, m.end.0 - BASE))
        .collect();
    assert_eq!(
        ops,
        [
            ("aten::mm".to_string(), 101, 1_005_000, 1_025_000),
            ("aten::add".to_string(), 101, 1_030_000, 1_032_000)
        ]
    );
    // The process is that of the CPU-side events.
    assert_eq!(t.header().pid, 100);

    // The metadata row (1) is counted as a loss, never dropped silently.
    let losses: Vec<(String, u64, u64)> = ev
        .iter()
        .filter_map(|e| if let Event::Loss(l) = e { Some(l) } else { None })
        .inspect(|l| assert_eq!(l.source, LossSource::IMPORT))
        .map(|l| (t.name(l.detail).into_owned(), l.count, l.time.0))
        .collect();
    assert_eq!(losses.len(), 1, "{losses:?}");
    let meta = losses.iter().find(|l| l.0.contains("metadata")).unwrap();
    // Dated at the earliest mapped event (the ProfilerStep marker), never earlier.
    assert_eq!((meta.1, meta.2), (1, BASE + 1_000_500));
    assert_eq!(trailer.losses["import"], 1);
}

#[test]
fn summary_counts_and_ratio() {
    let mut out = Vec::new();
    let s = import(&fixture("current_schema.json"), &mut out, &ImportOptions::default()).unwrap();
    assert_eq!(s.output_bytes, out.len() as u64);
    assert_eq!(s.input_bytes, std::fs::metadata(fixture("current_schema.json")).unwrap().len());
    assert_eq!(s.json_bytes, s.input_bytes);
    assert_eq!(s.trace_events, 15);
    assert_eq!(
        (s.events["kernel"], s.events["memcpy"], s.events["memset"], s.events["api"]),
        (2, 2, 1, 2)
    );
    assert_eq!(
        (s.events["sync"], s.events["marker"], s.events["collective"], s.events["loss"]),
        (1, 4, 1, 1)
    );
    assert_eq!((s.flows, s.unmapped_total()), (2, 1));
}

#[test]
fn old_schema_integer_micros_and_string_tids() {
    let t = to_trace(fixture("old_schema.json")).unwrap();
    assert_eq!(t.header().rank.rank, None);
    assert!(!t.header().extra.contains_key("kineto.baseTimeNanoseconds"));
    let ev = events(&t);
    let k = ev
        .iter()
        .find_map(|e| if let Event::Kernel(k) = e { Some(*k) } else { None })
        .unwrap();
    assert_eq!((k.start.0, k.end.0), (1_623_142_623_531_625_000, 1_623_142_623_531_627_000));
    assert_eq!(
        (k.stream, k.correlation, k.grid, k.registers),
        (StreamId(7), CorrelationId(34441), [50, 1, 1], 38)
    );
    let m = ev
        .iter()
        .find_map(|e| if let Event::Memcpy(m) = e { Some(*m) } else { None })
        .unwrap();
    assert_eq!(
        (m.kind, m.src_kind, m.bytes, m.stream),
        (CopyKind::HTOD, MemoryKind::PAGEABLE, 19_267_584, StreamId(7))
    );
    let s = ev
        .iter()
        .find_map(|e| if let Event::Memset(m) = e { Some(*m) } else { None })
        .unwrap();
    assert_eq!(s.bytes, 128_000);
    let a = ev.iter().find_map(|e| if let Event::Api(a) = e { Some(*a) } else { None }).unwrap();
    assert_eq!(
        (a.thread, a.domain, a.cbid, t.name(a.name).as_ref()),
        (ThreadId(25738), ApiDomain::RUNTIME, 41, "cudaMemcpyAsync")
    );
    let step = ev
        .iter()
        .find_map(|e| if let Event::Marker(m) = e { Some(*m) } else { None })
        .unwrap();
    assert_eq!(
        (t.name(step.name).as_ref(), t.name(step.domain).as_ref(), step.thread),
        ("ProfilerStep#1", "Operator", ThreadId(25738))
    );
    let lost: u64 = ev
        .iter()
        .filter_map(|e| if let Event::Loss(l) = e { Some(l.count) } else { None })
        .sum();
    assert_eq!(lost, 1, "the [memory] instant (aten::conv2d is a marker)");
    assert_eq!(t.trailer().unwrap().extra["import.flows"], "2");
}

#[test]
fn rocm_trace() {
    let t = to_trace(fixture("rocm.json")).unwrap();
    let base = 1_735_632_360_000_000_000u64;
    let ev = events(&t);
    let apis: Vec<ApiCall> = ev
        .iter()
        .filter_map(|e| if let Event::Api(a) = e { Some(*a) } else { None })
        .collect();
    assert_eq!(apis.len(), 2);
    assert!(apis
        .iter()
        .any(|a| a.cbid == 153 && t.name(a.name) == "hipMemcpyWithStream" && a.start.0 == base + 4_203_669_603_438_301));
    let m = ev
        .iter()
        .find_map(|e| if let Event::Memcpy(m) = e { Some(*m) } else { None })
        .unwrap();
    assert_eq!(
        (m.kind, m.src_kind, m.dst_kind, m.device, m.stream),
        (CopyKind::HTOD, MemoryKind::UNKNOWN, MemoryKind::DEVICE, DeviceId(2), StreamId(0))
    );
    let k = ev
        .iter()
        .find_map(|e| if let Event::Kernel(k) = e { Some(*k) } else { None })
        .unwrap();
    assert_eq!((k.device, k.stream, k.correlation), (DeviceId(2), StreamId(0), CorrelationId(121)));
    assert_eq!(k.end.0 - k.start.0, 17_600);
}

#[test]
fn gzip_and_pt_trace_names_import_identically() {
    let dir = tempfile::tempdir().unwrap();
    let plain = std::fs::read(fixture("current_schema.json")).unwrap();
    let gz = write(dir.path(), "worker0.123.pt.trace.json.gz", &gzip(&plain));
    // Detection is by content: a gzip file named .json works as well.
    let misnamed = write(dir.path(), "trace.json", &gzip(&plain));
    let a = events(&to_trace(fixture("current_schema.json")).unwrap());
    for p in [&gz, &misnamed] {
        assert_eq!(events(&to_trace(p).unwrap()), a, "{}", p.display());
    }
    let mut out = Vec::new();
    let s = import(&gz, &mut out, &ImportOptions::default()).unwrap();
    assert_eq!(s.json_bytes, plain.len() as u64);
    assert!(s.input_bytes < s.json_bytes);
}

#[test]
fn float_timestamps_convert_exactly() {
    let dir = tempfile::tempdir().unwrap();
    // 19 significant digits: an f64 would round these to a multiple of 0.25 µs.
    let doc = r#"{"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1712195495519689.047, "dur": 4.928, "args": {"device": 0, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1712195495519695.813, "dur": 0.001, "args": {"device": 0, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1682725898082228, "dur": 10.0, "args": {"device": 0, "stream": 7}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5e3, "dur": 2E-3, "args": {"device": 0, "stream": 7}}
    ]}"#;
    let p = write(dir.path(), "ts.json", doc.as_bytes());
    let mut got: Vec<(u64, u64)> = events(&to_trace(&p).unwrap()).iter().map(|e| (e.start().0, e.end().0)).collect();
    got.sort();
    assert_eq!(
        got,
        vec![
            (1_500_000, 1_500_002),
            (1_682_725_898_082_228_000, 1_682_725_898_082_238_000),
            (1_712_195_495_519_689_047, 1_712_195_495_519_693_975),
            (1_712_195_495_519_695_813, 1_712_195_495_519_695_814),
        ]
    );
    // With a base time, ts is relative to it.
    let doc = r#"{"baseTimeNanoseconds": 1711964646000000000, "traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 4458676522690.655, "dur": 1, "args": {"device": 0, "stream": 7}}]}"#;
    let p = write(dir.path(), "base.json", doc.as_bytes());
    let e = events(&to_trace(&p).unwrap());
    assert_eq!(e[0].start().0, 1_711_964_646_000_000_000 + 4_458_676_522_690_655);
}

#[test]
fn detection_by_content() {
    let plain = std::fs::read(fixture("current_schema.json")).unwrap();
    assert!(is_kineto(&plain));
    assert!(is_kineto(&plain[..64]));
    assert!(is_kineto(&gzip(&plain)));
    assert!(is_kineto(&gzip(&plain)[..40]), "a gzip prefix still shows the start of the text");
    assert!(!is_kineto(b"GPUTRACE\x01\x00\x00\x00"));
    assert!(!is_kineto(br#"{"name": "a config file", "value": 1}"#));
    assert!(!is_kineto(&gzip(br#"{"name": "a config file"}"#)));
    assert!(!is_kineto(b"[1, 2, 3]"));
    assert!(!is_kineto(b""));
    // A large first member (TraceLens's "metadata") hides the keys: still accepted.
    let mut big = br#"{"metadata": {"notes": ""#.to_vec();
    big.extend(std::iter::repeat_n(b'x', 300_000));
    assert!(is_kineto(&big[..4096]));
    assert!(is_kineto(&gzip(&big)));
}

fn expect_err(path: &Path, opts: &ImportOptions) -> KinetoError {
    match import(path, std::io::sink(), opts) {
        Ok(s) => panic!("{} imported: {s:?}", path.display()),
        Err(e) => e,
    }
}

/// Strict: a cut-off file is refused.
fn strict() -> ImportOptions {
    ImportOptions {
        strict: true,
        ..Default::default()
    }
}

/// By default a cut-off file is read up to its last complete event and says so,
/// or, cut before `traceEvents` begins, is an error naming the file.
fn salvaged_or_named(p: &Path, name: &str) {
    match import(p, std::io::sink(), &ImportOptions::default()) {
        Ok(s) => assert!(s.truncated.is_some(), "{s:?}"),
        Err(e) => assert!(e.to_string().contains(name), "{e}"),
    }
}

#[test]
fn every_truncation_is_an_error_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let plain = std::fs::read(fixture("current_schema.json")).unwrap();
    let end = plain.iter().rposition(|b| *b == b'}').unwrap();
    for cut in 0..end {
        let p = write(dir.path(), "cut.json", &plain[..cut]);
        salvaged_or_named(&p, "cut.json");
        let e = expect_err(&p, &strict());
        let msg = e.to_string();
        assert!(msg.contains("cut.json"), "{msg}");
        match &e {
            KinetoError::NotKineto { .. } => assert!(plain[..cut].iter().all(|b| b.is_ascii_whitespace()), "{cut}: {msg}"),
            _ => {
                let at = e.position().unwrap_or_else(|| panic!("{cut}: no position: {msg}"));
                assert!(at.offset <= cut as u64, "{cut}: {msg}");
                assert!(msg.contains("byte offset"), "{msg}");
            }
        }
    }
}

#[test]
fn truncated_gzip_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let gz = gzip(&std::fs::read(fixture("current_schema.json")).unwrap());
    for cut in (10..gz.len() - 1).step_by(7) {
        let p = write(dir.path(), "cut.json.gz", &gz[..cut]);
        salvaged_or_named(&p, "cut.json.gz");
        let e = expect_err(&p, &strict());
        let msg = e.to_string();
        assert!(msg.contains("cut.json.gz"), "{msg}");
        let at = e.position().unwrap_or_else(|| panic!("{cut}: {msg}"));
        assert!(at.compressed_offset.is_some(), "{msg}");
        if let KinetoError::Gzip { .. } = e {
            assert!(msg.contains("gzip"), "{msg}");
        }
    }
    let p = write(dir.path(), "half.json.gz", &gz[..gz.len() / 2]);
    assert!(matches!(expect_err(&p, &strict()), KinetoError::Gzip { .. }));
}

#[test]
fn malformed_json_points_at_the_bad_byte() {
    let dir = tempfile::tempdir().unwrap();
    let plain = String::from_utf8(std::fs::read(fixture("current_schema.json")).unwrap()).unwrap();
    let bad = plain.replacen(r#""ts": 1300.5,"#, r#""ts": 13x0.5,"#, 1);
    let at = bad.find("13x0.5").unwrap() as u64;
    let p = write(dir.path(), "bad.json", bad.as_bytes());
    let e = expect_err(&p, &ImportOptions::default());
    assert!(matches!(e, KinetoError::Syntax { .. }), "{e}");
    let pos = e.position().unwrap().offset;
    assert!(pos >= at && pos <= at + 3, "error at {pos}, bad byte at {}: {e}", at + 2);

    let text = b"{\"traceEvents\": [ {\"ph\": \"X\"} ] } trailing";
    let garbage = write(dir.path(), "garbage.json", text);
    let e = expect_err(&garbage, &ImportOptions::default());
    assert_eq!(e.position().unwrap().offset, (text.len() - "trailing".len()) as u64, "{e}");

    let not_kineto = write(dir.path(), "other.json", br#"{"name": "x"}"#);
    assert!(matches!(
        expect_err(&not_kineto, &ImportOptions::default()),
        KinetoError::NotKineto { .. }
    ));
    let array = write(dir.path(), "array.json", b"[1, 2]");
    assert!(matches!(
        expect_err(&array, &ImportOptions::default()),
        KinetoError::NotKineto { .. }
    ));
    let missing = dir.path().join("missing.json");
    assert!(matches!(expect_err(&missing, &ImportOptions::default()), KinetoError::Io { .. }));
}

#[test]
fn wrong_types() {
    let dir = tempfile::tempdir().unwrap();
    let text = br#"{"schemaVersion": 1, "traceEvents": {"ph": "X"}}"#;
    let p = write(dir.path(), "obj.json", text);
    let e = expect_err(&p, &ImportOptions::default());
    assert!(matches!(e, KinetoError::WrongType { .. }), "{e}");
    assert_eq!(e.position().unwrap().offset, text.iter().rposition(|b| *b == b'{').unwrap() as u64);
    assert!(e.to_string().contains("traceEvents"), "{e}");

    let p = write(dir.path(), "base.json", br#"{"baseTimeNanoseconds": "soon", "traceEvents": []}"#);
    let e = expect_err(&p, &ImportOptions::default());
    assert!(matches!(e, KinetoError::WrongType { .. }), "{e}");
    assert_eq!(e.position().unwrap().offset, 24);

    // A kernel whose ts is a string: a loss by default, an error in strict mode.
    let doc = br#"{"traceEvents": [
 {"ph": "X", "cat": "kernel", "name": "ok", "ts": 1, "dur": 1, "args": {"device": 0, "stream": 7}},
 {"ph": "X", "cat": "kernel", "name": "bad", "ts": "1", "dur": 1},
 {"ph": "X", "cat": "kernel", "name": "bad grid", "ts": 1, "args": {"grid": 5}},
 {"ph": "X", "cat": 7, "name": "bad cat", "ts": 1},
 3
]}"#;
    let p = write(dir.path(), "fields.json", doc);
    let mut out = Vec::new();
    let s = import(&p, &mut out, &ImportOptions::default()).unwrap();
    assert_eq!(s.events["kernel"], 1);
    assert_eq!(s.unmapped_total(), 4, "{:?}", s.unmapped);
    assert!(s.unmapped.keys().any(|k| k.contains("\"ts\" is not a number")), "{:?}", s.unmapped);
    assert!(
        s.unmapped.keys().any(|k| k.contains("\"grid\" is not an array")),
        "{:?}",
        s.unmapped
    );
    let strict = ImportOptions {
        strict: true,
        ..Default::default()
    };
    let e = expect_err(&p, &strict);
    assert!(matches!(e, KinetoError::WrongType { .. }), "{e}");
    let second = doc.windows(2).position(|w| w == b"{\"").unwrap();
    let second = second + 1 + doc[second + 1..].windows(2).position(|w| w == b"{\"").unwrap();
    let second = second + 1 + doc[second + 1..].windows(2).position(|w| w == b"{\"").unwrap();
    let second = second + 1 + doc[second + 1..].windows(2).position(|w| w == b"{\"").unwrap();
    assert_eq!(e.position().unwrap().offset, second as u64, "{e}");
}

#[test]
fn empty_and_whitespace_documents() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "empty.json", b"");
    assert!(matches!(expect_err(&p, &ImportOptions::default()), KinetoError::NotKineto { .. }));
    let p = write(dir.path(), "none.json", b"\xEF\xBB\xBF { \"traceEvents\" : [ ] }\n");
    let t = to_trace(&p).unwrap();
    assert_eq!(t.event_total(), 0);
}

#[test]
fn escapes_across_read_buffer_boundaries() {
    // The scanner reads 256 KiB at a time; a name of 300,000 escaped quotes
    // puts a backslash at the last byte of a buffer for one of the two shifts.
    let dir = tempfile::tempdir().unwrap();
    let name = "\"\\".repeat(150_000);
    for shift in 0..2 {
        let event = serde_json::json!({"ph": "X", "cat": "kernel", "name": name, "ts": 1, "dur": 1, "args": {"device": 0, "stream": 7}});
        let doc = format!("{{\"traceEvents\": [{}{event}, {event}]}}", " ".repeat(shift));
        let p = write(dir.path(), "long.json", doc.as_bytes());
        let t = to_trace(&p).unwrap();
        let ev = events(&t);
        assert_eq!(ev.len(), 2);
        for e in ev {
            let Event::Kernel(k) = e else { panic!("{e:?}") };
            assert_eq!(t.name(k.name), name);
        }
        let gz = write(dir.path(), "long.json.gz", &gzip(doc.as_bytes()));
        assert_eq!(to_trace(&gz).unwrap().event_total(), 2);
    }
}
