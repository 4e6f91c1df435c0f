//! Host samples (chunk kind 7): appended after a finished trace, read back
//! merged, and damage reported.

use gputrace_format::host::*;
use gputrace_format::*;

fn base_trace() -> Vec<u8> {
    let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
    let name = w.intern("gemm");
    w.push(Event::Kernel(Kernel {
        start: Nanos(1_000),
        end: Nanos(3_000),
        device: DeviceId(0),
        context: ContextId(1),
        stream: StreamId(7),
        correlation: CorrelationId(1),
        name,
        grid: [1, 1, 1],
        block: [1, 1, 1],
        static_shared_mem: 0,
        dynamic_shared_mem: 0,
        registers: 0,
        graph_id: 0,
        graph_node_id: 0,
    }))
    .unwrap();
    w.finish(Trailer::default()).unwrap()
}

fn samples(first_string: u32) -> HostSamples {
    let f = |n: u32, line| HostFrame {
        function: StringId(first_string + n),
        file: StringId(first_string + 2),
        line,
    };
    HostSamples {
        hz: 100,
        threads: vec![
            HostThread {
                pid: 10,
                tid: 10,
                name: "python".into(),
            },
            HostThread {
                pid: 11,
                tid: 11,
                name: "pt_data_worker".into(),
            },
        ],
        frames: vec![f(0, 57), f(1, 12)],
        stacks: vec![vec![1, 0], vec![0]],
        runs: vec![
            HostRun {
                start: Nanos(500),
                end: Nanos(2_500),
                thread: 0,
                state: ThreadState::Sleeping,
                cpu_ns: 0,
                stack: Some(0),
                samples: 2,
            },
            HostRun {
                start: Nanos(700),
                end: Nanos(900),
                thread: 1,
                state: ThreadState::Running,
                cpu_ns: 190,
                stack: None,
                samples: 1,
            },
            HostRun {
                start: Nanos(2_500),
                end: Nanos(2_600),
                thread: 0,
                state: ThreadState::DiskWait,
                cpu_ns: 20,
                stack: Some(1),
                samples: 1,
            },
        ],
        losses: [("host_samples_cap".to_string(), 3u64)].into(),
    }
}

#[test]
fn appended_samples_read_back_with_their_frames() {
    let mut bytes = base_trace();
    let before = TraceFile::from_bytes("t.gtrace", bytes.clone()).unwrap();
    assert!(!before.has_host_samples());
    let first = before.string_count();
    bytes.extend(encode_strings_chunk(first, &["train_step", "load_batch", "train.py"]));
    let s = samples(first as u32);
    // Two runs per chunk: the three runs make two chunks, merged on reading.
    bytes.extend(encode_chunks(&s, 2, 3).unwrap());
    let t = TraceFile::from_bytes("t.gtrace", bytes).unwrap();
    assert!(t.damage().is_none());
    assert_eq!(t.event_total(), 1, "the GPU events are untouched");
    let back = t.host_samples().unwrap().unwrap();
    assert_eq!(back.runs, s.runs);
    assert_eq!(back.stacks.len(), 2, "the chunks' tables are joined");
    assert_eq!(back.threads.len(), 2);
    assert_eq!(back.sample_count(), 4);
    assert_eq!(back.lost(), 3, "losses are counted once");
    let top = back.frames[back.stacks[back.runs[0].stack.unwrap() as usize][0] as usize];
    assert_eq!(t.name(top.function), "load_batch");
    assert_eq!(t.name(top.file), "train.py");
    assert_eq!(top.line, 12);
}

#[test]
fn a_frame_naming_a_missing_string_is_an_error_with_the_offset() {
    let mut bytes = base_trace();
    let first = TraceFile::from_bytes("t.gtrace", bytes.clone()).unwrap().string_count();
    // No strings chunk: the frames name strings the table lacks.
    bytes.extend(encode_chunks(&samples(first as u32), 100, 3).unwrap());
    let t = TraceFile::from_bytes("t.gtrace", bytes).unwrap();
    let e = t.host_samples().unwrap_err().to_string();
    assert!(e.contains("t.gtrace") && e.contains("string the table does not have"), "{e}");
}

#[test]
fn samples_alone_make_a_trace_and_empty_samples_still_carry_losses() {
    let mut bytes = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default())
        .unwrap()
        .finish(Trailer::default())
        .unwrap();
    let empty = HostSamples {
        hz: 100,
        losses: [("python_attach".to_string(), 1u64)].into(),
        ..Default::default()
    };
    bytes.extend(encode_chunks(&empty, 10, 3).unwrap());
    let t = TraceFile::from_bytes("t.gtrace", bytes).unwrap();
    let back = t.host_samples().unwrap().unwrap();
    assert_eq!(back.sample_count(), 0);
    assert_eq!(back.lost(), 1);
}

#[test]
fn proc_states_map_to_the_four_states() {
    assert_eq!(ThreadState::from_proc(b'R'), ThreadState::Running);
    assert_eq!(ThreadState::from_proc(b'S'), ThreadState::Sleeping);
    assert_eq!(ThreadState::from_proc(b'D'), ThreadState::DiskWait);
    assert_eq!(ThreadState::from_proc(b'Z'), ThreadState::Other);
}
