//! Host samples joined to idle gaps, with numbers worked out by hand: a
//! trace with two idle gaps and hand-made runs of a main thread, another
//! thread and a loader worker (another pid).

use gputrace_analysis::host::HostCause;
use gputrace_analysis::{analyze, Options};
use gputrace_format::host::*;
use gputrace_format::*;

const PID: u32 = 100;

fn kernel(w: &mut TraceWriter<Vec<u8>>, start: u64, end: u64) {
    let name = w.intern("gemm");
    w.push(Event::Kernel(Kernel {
        start: Nanos(start),
        end: Nanos(end),
        device: DeviceId(0),
        context: ContextId(1),
        stream: StreamId(7),
        correlation: CorrelationId(0),
        name,
        ..Kernel::default()
    }))
    .unwrap();
}

/// GPU busy [0,100) [1100,1200) [2200,2300): gaps [100,1100) and [1200,2200).
fn trace() -> TraceFile {
    let header = Header {
        pid: PID,
        ..Header::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &header, WriterOptions::default()).unwrap();
    kernel(&mut w, 0, 100);
    kernel(&mut w, 1100, 1200);
    kernel(&mut w, 2200, 2300);
    let mut bytes = w.finish(Trailer::default()).unwrap();
    let first = TraceFile::from_bytes("h.gtrace", bytes.clone()).unwrap().string_count();
    let names = [
        "load",
        "/site-packages/torch/utils/data/dataloader.py",
        "train",
        "/home/me/train.py",
        "augment",
    ];
    bytes.extend(encode_strings_chunk(first, &names));
    let s = |i: usize| StringId((first + i) as u32);
    let frames = vec![
        HostFrame {
            function: s(0),
            file: s(1),
            line: 631,
        }, // 0: __next__-like, in the loader
        HostFrame {
            function: s(2),
            file: s(3),
            line: 57,
        }, // 1: train
        HostFrame {
            function: s(4),
            file: s(3),
            line: 12,
        }, // 2: augment, user code
    ];
    let run = |start, end, thread, state, cpu_ns, stack| HostRun {
        start: Nanos(start),
        end: Nanos(end),
        thread,
        state,
        cpu_ns,
        stack,
        samples: 1,
    };
    let samples = HostSamples {
        hz: 100,
        threads: vec![
            HostThread {
                pid: PID,
                tid: PID,
                name: "python".into(),
            },
            HostThread {
                pid: PID,
                tid: PID + 1,
                name: "pin_memory".into(),
            },
            HostThread {
                pid: PID + 5,
                tid: PID + 5,
                name: "pt_data_worker".into(),
            },
        ],
        frames,
        // 0: train → load (waiting in the loader); 1: train → augment.
        stacks: vec![vec![0, 1], vec![2, 1]],
        runs: vec![
            // Gap 1 [100, 1100): main sleeps in the loader 100..900, runs augment 900..1100;
            // the worker runs the whole gap.
            run(50, 900, 0, ThreadState::Sleeping, 0, Some(0)),
            run(900, 1100, 0, ThreadState::Running, 200, Some(1)),
            run(0, 1100, 2, ThreadState::Running, 1100, None),
            // Gap 2 [1200, 2200): main runs augment 1200..1500, disk wait 1500..2000 in augment,
            // unsampled 2000..2200; the other thread uses 100 ns of CPU.
            run(1200, 1500, 0, ThreadState::Running, 300, Some(1)),
            run(1500, 2000, 0, ThreadState::DiskWait, 10, Some(1)),
            run(1200, 2200, 1, ThreadState::Sleeping, 100, None),
        ],
        losses: Default::default(),
    };
    bytes.extend(encode_chunks(&samples, 100, 1).unwrap());
    TraceFile::from_bytes("h.gtrace", bytes).unwrap()
}

#[test]
fn gap_views_weigh_runs_by_their_overlap_with_each_gap() {
    let r = analyze(&[trace()], &Options::default()).unwrap();
    let rank = &r.ranks[0];
    let mut gaps: Vec<_> = rank.devices[0].longest_gaps.iter().collect();
    gaps.sort_by_key(|g| g.start_ns);
    assert_eq!(
        gaps.iter().map(|g| (g.start_ns, g.end_ns)).collect::<Vec<_>>(),
        [(100, 1100), (1200, 2200)]
    );

    let g1 = gaps[0].host.as_ref().unwrap();
    assert_eq!((g1.window_ns, g1.sampled_ns), (1000, 1000));
    assert_eq!((g1.main_sleeping_ns, g1.main_running_ns), (800, 200));
    // 800 of the run's 850 ns lie in the gap: 0 CPU; the augment run: all 200.
    assert_eq!(g1.main_cpu_ns, 200);
    // The worker's run: 1000 of its 1100 ns, so 1000 of its 1100 ns of CPU.
    assert_eq!((g1.workers, g1.workers_cpu_ns), (1, 1000));
    assert_eq!(g1.cause, HostCause::InputBound);
    assert_eq!(g1.site.as_deref(), Some("load (dataloader.py:631) ← train (train.py:57)"));
    assert!((g1.site_share - 0.8).abs() < 1e-9);
    assert_eq!(g1.stacks[0].frames, ["train (train.py:57)", "load (dataloader.py:631)"]);
    assert_eq!(g1.stacks[0].state, ThreadState::Sleeping);

    let g2 = gaps[1].host.as_ref().unwrap();
    assert_eq!((g2.window_ns, g2.sampled_ns), (1000, 800));
    assert_eq!((g2.main_running_ns, g2.main_disk_wait_ns), (300, 500));
    assert_eq!((g2.main_cpu_ns, g2.threads_cpu_ns, g2.workers), (310, 100, 0));
    assert_eq!(g2.cause, HostCause::IoWait, "disk wait 500 of 800 sampled ns");
    assert_eq!(g2.site.as_deref(), Some("augment (train.py:12)"), "user code needs no second frame");

    // Over both gaps.
    let all = rank.host.as_ref().unwrap().gpu_idle.as_ref().unwrap();
    assert_eq!((all.window_ns, all.sampled_ns), (2000, 1800));
    assert_eq!(all.main_running_ns + all.main_sleeping_ns + all.main_disk_wait_ns, 1800);
    assert_eq!(rank.host.as_ref().unwrap().samples, 6);

    // Folded: stacks by GPU-idle µs (ns / 1000: only augment, 1000 ns, is not rounded away).
    assert_eq!(
        gputrace_analysis::host::folded(&r),
        "rank 0;train (train.py:57);augment (train.py:12) 1\n"
    );
    let text = gputrace_text::render_text(&r, false);
    assert!(text.contains("host: input-bound"), "{text}");
    assert!(text.contains("host: I/O wait"), "{text}");
}

#[test]
fn a_trace_without_host_samples_has_no_host_fields() {
    let header = Header::default();
    let mut w = TraceWriter::new(Vec::new(), &header, WriterOptions::default()).unwrap();
    kernel(&mut w, 0, 100);
    kernel(&mut w, 200, 300);
    let t = TraceFile::from_bytes("p.gtrace", w.finish(Trailer::default()).unwrap()).unwrap();
    let r = analyze(&[t], &Options::default()).unwrap();
    assert!(r.ranks[0].host.is_none());
    let json = serde_json::to_string(&r).unwrap();
    assert!(!json.contains("\"host\""), "no new keys in the JSON of a trace without samples");
}

/// Four `ProfilerStep#N` ranges of 1000, 1000, 1000 and 3000 ns, each with
/// 100 ns of GPU work at its start: only the last is slow (1.5 × the median
/// or more) and gets a host view of its idle time.
#[test]
fn a_slow_step_gets_the_host_view_of_its_idle_time() {
    let header = Header {
        pid: PID,
        ..Header::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &header, WriterOptions::default()).unwrap();
    let starts = [0u64, 1000, 2000, 3000];
    let ends = [1000u64, 2000, 3000, 6000];
    for (i, (&s, &e)) in starts.iter().zip(&ends).enumerate() {
        let name = w.intern(&format!("ProfilerStep#{}", i + 1));
        w.push(Event::Marker(Marker {
            start: Nanos(s),
            end: Nanos(e),
            thread: ThreadId(PID),
            name,
            domain: StringId::EMPTY,
            kind: MarkerKind::RANGE,
            color: 0,
        }))
        .unwrap();
        kernel(&mut w, s, s + 100);
    }
    kernel(&mut w, 6000, 6100);
    let mut bytes = w.finish(Trailer::default()).unwrap();
    let first = TraceFile::from_bytes("s.gtrace", bytes.clone()).unwrap().string_count();
    bytes.extend(encode_strings_chunk(first, &["wait_for_rank", "/home/me/train.py"]));
    let samples = HostSamples {
        hz: 100,
        threads: vec![HostThread {
            pid: PID,
            tid: PID,
            name: "python".into(),
        }],
        frames: vec![HostFrame {
            function: StringId(first as u32),
            file: StringId(first as u32 + 1),
            line: 9,
        }],
        stacks: vec![vec![0]],
        runs: vec![
            HostRun {
                start: Nanos(0),
                end: Nanos(3000),
                thread: 0,
                state: ThreadState::Running,
                cpu_ns: 3000,
                stack: None,
                samples: 3,
            },
            HostRun {
                start: Nanos(3000),
                end: Nanos(6000),
                thread: 0,
                state: ThreadState::Sleeping,
                cpu_ns: 0,
                stack: Some(0),
                samples: 3,
            },
        ],
        losses: Default::default(),
    };
    bytes.extend(encode_chunks(&samples, 100, 1).unwrap());
    let t = TraceFile::from_bytes("s.gtrace", bytes).unwrap();
    let r = analyze(&[t], &Options::default()).unwrap();
    let steps = &r.ranks[0].devices[0].steps;
    assert_eq!(steps.len(), 4, "{steps:?}");
    assert!(steps[..3].iter().all(|s| s.host.is_none()));
    let h = steps[3].host.as_ref().expect("the slow step has a host view");
    assert_eq!(
        (h.window_ns, h.main_sleeping_ns),
        (2900, 2900),
        "the step's idle time, [3100, 6000)"
    );
    assert_eq!(h.cause, HostCause::Sleep);
    assert_eq!(h.site.as_deref(), Some("wait_for_rank (train.py:9)"));
    let text = gputrace_text::render_text(&r, false);
    assert!(text.contains("slow step 4 on gpu 0"), "{text}");
}

/// One idle gap [100, 1100) with the main thread in `inner` (file `file`)
/// from 100 to 900 and in `train` after; `hz` 0 marks stacks traced by
/// Kineto (state `other`, no CPU time).
fn one_gap(inner: &str, file: &str, hz: u32, state: ThreadState) -> gputrace_analysis::host::HostView {
    let header = Header {
        pid: PID,
        ..Header::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &header, WriterOptions::default()).unwrap();
    kernel(&mut w, 0, 100);
    kernel(&mut w, 1100, 1200);
    let mut bytes = w.finish(Trailer::default()).unwrap();
    let first = TraceFile::from_bytes("g.gtrace", bytes.clone()).unwrap().string_count();
    bytes.extend(encode_strings_chunk(first, &[inner, file, "train", "train.py"]));
    let s = |i: usize| StringId((first + i) as u32);
    let samples = HostSamples {
        hz,
        threads: vec![HostThread {
            pid: PID,
            tid: PID,
            name: String::new(),
        }],
        frames: vec![
            HostFrame {
                function: s(0),
                file: s(1),
                line: 0,
            },
            HostFrame {
                function: s(2),
                file: s(3),
                line: 9,
            },
        ],
        stacks: vec![vec![0, 1], vec![1]],
        runs: [(100, 900, 0), (900, 1100, 1)]
            .into_iter()
            .map(|(a, b, stack)| HostRun {
                start: Nanos(a),
                end: Nanos(b),
                thread: 0,
                state,
                cpu_ns: if hz == 0 { 0 } else { b - a },
                stack: Some(stack),
                samples: 1,
            })
            .collect(),
        losses: Default::default(),
    };
    bytes.extend(encode_chunks(&samples, 100, 1).unwrap());
    let t = TraceFile::from_bytes("g.gtrace", bytes).unwrap();
    let r = analyze(&[t], &Options::default()).unwrap();
    r.ranks[0].devices[0].longest_gaps[0].host.clone().unwrap()
}

#[test]
fn the_stack_names_gc_and_sleep_and_traced_stacks_say_they_have_no_state() {
    // Kineto names C functions without a file.
    let gc = one_gap("<built-in function collect>", "", 0, ThreadState::Other);
    assert_eq!(gc.cause, HostCause::Gc);
    assert!(!gc.thread_state);
    assert_eq!(gc.site.as_deref(), Some("<built-in function collect>"));
    // Sampled: the collector's frame outweighs the running state.
    assert_eq!(one_gap("<gc>", "", 100, ThreadState::Running).cause, HostCause::Gc);
    assert_eq!(one_gap("collect", "gc", 100, ThreadState::Running).cause, HostCause::Gc);
    assert_eq!(
        one_gap("<built-in function sleep>", "", 0, ThreadState::Other).cause,
        HostCause::Sleep
    );
    // Nothing in the stack says more: traced stacks only, sampled states decide.
    let plain = one_gap("step", "model.py", 0, ThreadState::Other);
    assert_eq!(plain.cause, HostCause::StacksOnly);
    assert_eq!(plain.stacks[0].frames, ["train (train.py:9)", "step (model.py:0)"]);
    assert_eq!(one_gap("step", "model.py", 100, ThreadState::Running).cause, HostCause::HostCompute);
}
