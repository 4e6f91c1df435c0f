//! Hand-built traces with known intervals: every number is checked to the ns.

use gputrace_analysis::*;
use gputrace_format::*;
use gputrace_text::render_text;

mod util;
use util::*;

fn one(trace: TraceFile) -> Report {
    analyze(&[trace], &Options::default()).unwrap()
}

fn assert_identities(r: &Report) {
    for rk in &r.ranks {
        for d in &rk.devices {
            assert_eq!(
                d.time.compute_ns + d.time.exposed_communication_ns + d.time.exposed_transfer_ns + d.time.idle_ns,
                d.time.span_ns,
                "rank {} gpu {}",
                rk.rank,
                d.device
            );
            assert_eq!(d.idle_causes.total_ns(), d.time.idle_ns);
            let o = &d.overlap;
            assert_eq!(
                o.compute_only_ns
                    + o.compute_communication_ns
                    + o.compute_transfer_ns
                    + o.compute_communication_transfer_ns
                    + o.communication_only_ns
                    + o.communication_transfer_ns
                    + o.transfer_only_ns
                    + d.time.idle_ns,
                d.time.span_ns
            );
            if let Some(w) = d.process_window {
                assert_eq!(w.startup_idle_ns + d.time.span_ns + w.teardown_idle_ns, w.traced_ns);
                if rk.duty_cycle.is_none() {
                    assert_eq!(w.traced_ns, w.window_ns);
                }
            }
            for s in &d.steps {
                if rk.duty_cycle.is_none() {
                    assert_eq!(
                        s.compute_ns + s.exposed_communication_ns + s.exposed_transfer_ns + s.idle_ns,
                        s.duration_ns,
                        "step {}",
                        s.step
                    );
                }
                assert!(s.idle_causes.total_ns() <= s.idle_ns);
            }
        }
    }
}

#[test]
fn overlapping_streams_are_merged() {
    let mut b = Builder::new(Header::default());
    b.kernel(0, 7, "gemm", 100, 200, 0)
        .kernel(0, 7, "gemm", 300, 400, 0)
        .kernel(0, 8, "softmax", 150, 350, 0)
        .kernel(0, 8, "softmax", 500, 520, 0);
    let r = one(b.finish(0));
    assert_identities(&r);
    let d = &r.ranks[0].devices[0];
    assert_eq!((d.first_ns, d.last_ns), (Some(100), Some(520)));
    assert_eq!(d.time.span_ns, 420);
    assert_eq!(d.time.compute_ns, 320); // [100, 400) and [500, 520)
    assert_eq!(d.time.idle_ns, 100);
    assert_eq!(d.idle_causes.unattributed_ns, 100, "no API calls in this trace");
    assert_eq!(d.idle_causes.gaps, 1);
    assert_eq!((d.time.communication_ns, d.time.transfer_ns), (0, 0));
    assert_eq!(d.kernels, 4);
    assert!(d.process_window.is_none(), "no start clock, no window");
    // Kernel statistics are sums of durations, not unions.
    let gemm = r.top_kernels.iter().find(|k| k.name == "gemm").unwrap();
    assert_eq!((gemm.count, gemm.total_ns, gemm.mean_ns), (2, 200, 100));
    assert_eq!(r.top_kernels[0].name, "softmax");
    assert_eq!(r.top_kernels[0].total_ns, 220);
    assert!((r.top_kernels[0].share - 220.0 / 420.0).abs() < 1e-12);
}

#[test]
fn nested_overlaps_and_exclusive_attribution() {
    let mut b = Builder::new(header_with_window(0, &[0]));
    b.kernel(0, 1, "gemm", 0, 1000, 0)
        .kernel(0, 2, "elementwise", 100, 200, 0) // nested in compute
        .kernel(0, 3, "ncclKernel_AllReduce_RING_LL_Sum_float", 300, 600, 0) // hidden
        .kernel(0, 3, "ncclSymkDevKernel_AllGather_LL", 900, 1200, 0) // 100 hidden, 200 exposed
        .copy(4, CopyKind::HTOD, 1100, 1300, 200, false) // 100 under comm, 100 exposed
        .memset(4, 1400, 1450, 64) // exposed transfer
        .copy(5, CopyKind::PTOP, 1500, 1600, 1000, false); // peer copy: communication
    let r = one(b.finish(1600));
    assert_identities(&r);
    let d = &r.ranks[0].devices[0];
    assert_eq!(d.time.span_ns, 1600);
    assert_eq!(d.time.compute_ns, 1000);
    assert_eq!(d.time.communication_ns, 700);
    assert_eq!(d.time.transfer_ns, 250);
    assert_eq!(d.time.exposed_communication_ns, 300);
    assert_eq!(d.time.exposed_transfer_ns, 150);
    assert_eq!(d.time.idle_ns, 150); // [1300, 1400) and [1450, 1500)
    let o = d.overlap;
    assert_eq!(o.compute_only_ns, 600);
    assert_eq!(o.compute_communication_ns, 400);
    assert_eq!(o.communication_only_ns, 200);
    assert_eq!(o.communication_transfer_ns, 100);
    assert_eq!(o.transfer_only_ns, 150);
    assert_eq!((o.compute_transfer_ns, o.compute_communication_transfer_ns), (0, 0));
    assert_eq!(o.communication_hidden_ns, 400);
    assert_eq!(o.transfer_hidden_ns, 100);
    assert_eq!((d.kernels, d.copies, d.memsets), (4, 2, 1));
    // The comm kernels of both NCCL eras are classified as communication.
    for k in &r.top_kernels {
        let comm = k.name.starts_with("nccl");
        assert_eq!(k.category == Category::Communication, comm, "{}", k.name);
    }
    // Copies by kind, with bandwidth in GB/s (= bytes per ns).
    let h2d = r.copies.iter().find(|c| c.kind == "HtoD").unwrap();
    assert_eq!((h2d.count, h2d.bytes, h2d.total_ns), (1, 200, 200));
    assert!((h2d.achieved_gbps - 1.0).abs() < 1e-12);
    let p2p = r.copies.iter().find(|c| c.kind == "PtoP").unwrap();
    assert!((p2p.achieved_gbps - 10.0).abs() < 1e-12);
    assert!(r.copies.iter().any(|c| c.kind == "memset" && c.bytes == 64));
    assert!(d.process_window.is_none(), "a start clock of 0 means unknown: no window");
}

#[test]
fn empty_device_and_process_window() {
    let mut b = Builder::new(header_with_window(100, &[0, 1]));
    b.kernel(0, 7, "gemm", 1000, 2000, 0);
    let r = one(b.finish(5000));
    assert_identities(&r);
    let devs = &r.ranks[0].devices;
    assert_eq!(devs.len(), 2);
    let d0 = &devs[0];
    let w = d0.process_window.unwrap();
    assert_eq!((w.start_ns, w.end_ns, w.window_ns), (100, 5000, 4900));
    assert_eq!((w.startup_idle_ns, w.teardown_idle_ns), (900, 3000));
    let d1 = &devs[1];
    assert_eq!((d1.device, d1.name.as_str()), (1, "GPU 1"));
    assert_eq!(
        (d1.first_ns, d1.time.span_ns, d1.time.compute_ns, d1.time.idle_ns, d1.kernels),
        (None, 0, 0, 0, 0)
    );
    let w1 = d1.process_window.unwrap();
    assert_eq!(
        (w1.startup_idle_ns, w1.teardown_idle_ns),
        (4900, 0),
        "a device without work idles the whole window"
    );
    assert_eq!(r.totals.active_devices, 1);
    let text = render_text(&r, false);
    assert!(text.contains("startup idle 5.800 µs, teardown idle 3.000 µs"), "{text}");
    assert!(
        text.contains("(1 more GPU(s) listed in the trace headers ran no kernel, copy or memset)"),
        "{text}"
    );
    assert_eq!((r.totals.startup_idle_ns, r.totals.teardown_idle_ns), (900 + 4900, 3000));
}

/// Kernels A..E with gaps of every cause; see the comments for the arithmetic.
fn gap_trace() -> TraceFile {
    let mut b = Builder::new(header_with_window(0, &[0]));
    b.range("ProfilerStep#0", 0, 7500).range("ProfilerStep#1", 7500, 15000);
    b.api("cudaLaunchKernel", 500, 510, 1).kernel(0, 7, "A", 1000, 2000, 1);
    // Gap [2000, 5000): B launched at 4000, after the GPU ran dry: 2000 host-bound, 1000 latency.
    b.api("cudaLaunchKernel", 4000, 4010, 2).kernel(0, 7, "B", 5000, 6000, 2);
    // Gap [6000, 7000): C was launched at 1000, long before: all latency.
    b.api("cudaLaunchKernel", 1000, 1010, 3).kernel(0, 8, "C", 7000, 8000, 3);
    // Gap [8000, 12000): D launched at 11000; before that the CPU was in a sync
    // ([7500, 9000) API call and [8500, 10000) GPU-side sync record: union
    // [7500, 10000)): 2000 synchronization, 1000 host-bound, 1000 latency.
    b.api("cudaStreamSynchronize", 7500, 9000, 9).sync(8500, 10000);
    b.api("cudaLaunchKernel", 11000, 11010, 4).kernel(0, 7, "D", 12000, 13000, 4);
    // Gap [13000, 14000): E has no correlation: unattributed.
    b.kernel(0, 7, "E", 14000, 15000, 0);
    b.finish(15000)
}

#[test]
fn idle_gap_causes() {
    let r = one(gap_trace());
    assert_identities(&r);
    let d = &r.ranks[0].devices[0];
    assert_eq!((d.time.span_ns, d.time.compute_ns, d.time.idle_ns), (14000, 5000, 9000));
    let c = d.idle_causes;
    assert_eq!(c.gaps, 4);
    assert_eq!(c.host_bound_ns, 3000);
    assert_eq!(c.launch_latency_ns, 3000);
    assert_eq!(c.synchronization_ns, 2000);
    assert_eq!(c.unattributed_ns, 1000);

    let g = &d.longest_gaps[0];
    assert_eq!((g.start_ns, g.end_ns, g.duration_ns), (8000, 12000, 4000));
    assert_eq!(g.cause, IdleCause::Synchronization);
    assert_eq!(
        (g.causes.synchronization_ns, g.causes.host_bound_ns, g.causes.launch_latency_ns),
        (2000, 1000, 1000)
    );
    assert_eq!(g.next_work, "D");
    assert_eq!(g.launched_ns, Some(11000));
    assert_eq!(g.step, Some(1));
    let cpu: Vec<(&str, u64)> = g.cpu_activity.iter().map(|a| (a.name.as_str(), a.overlap_ns)).collect();
    assert_eq!(
        cpu,
        [("ProfilerStep#1", 4000), ("cudaStreamSynchronize", 1000), ("cudaLaunchKernel", 10)]
    );
    let second = &d.longest_gaps[1];
    assert_eq!((second.start_ns, second.cause), (2000, IdleCause::HostBound));
    assert_eq!(d.longest_gaps.len(), 4);

    // Steps are GPU windows (issue #42): the CPU windows [0, 7500) and [7500, 15000)
    // launched correlations 1-3 (A, B, C) and 4, 9 (D, the sync); E (no correlation)
    // belongs to no step. Step 0 runs from A's start to C's end, [1000, 8000); step 1 from
    // there to D's end, [8000, 13000); [13000, 15000) (a gap, then E) is outside the steps.
    assert_eq!(d.steps.len(), 2);
    let (s0, s1) = (&d.steps[0], &d.steps[1]);
    assert_eq!((s0.start_ns, s0.end_ns, s0.cpu_start_ns, s0.cpu_end_ns), (1000, 8000, 0, 7500));
    assert_eq!((s1.start_ns, s1.end_ns, s1.cpu_start_ns, s1.cpu_end_ns), (8000, 13000, 7500, 15000));
    // Step 0: A, B, C computed 3000 of 7000; idle: gaps [2000, 5000) (2000 host-bound,
    // 1000 latency) and [6000, 7000) (latency).
    assert_eq!((s0.step, s0.duration_ns, s0.compute_ns, s0.idle_ns), (0, 7000, 3000, 4000));
    assert_eq!(
        (
            s0.idle_causes.host_bound_ns,
            s0.idle_causes.launch_latency_ns,
            s0.idle_causes.total_ns()
        ),
        (2000, 2000, 4000)
    );
    // Step 1: D computed 1000 of 5000; idle: the gap [8000, 12000) (2000 sync, 1000
    // host-bound, 1000 latency).
    assert_eq!((s1.step, s1.duration_ns, s1.compute_ns, s1.idle_ns), (1, 5000, 1000, 4000));
    assert_eq!(s1.idle_causes.synchronization_ns, 2000);
    assert_eq!(s1.idle_causes.unattributed_ns, 0);
    assert_eq!(s1.idle_causes.total_ns(), 4000);
    assert_eq!((s0.idle_causes.gaps, s1.idle_causes.gaps), (2, 1));
    // The steps' idle and the unattributed gap [13000, 14000) outside them add up to the
    // device's idle: every nanosecond has a cause.
    assert_eq!(s0.idle_ns + s1.idle_ns + 1000, d.time.idle_ns);
}

#[test]
fn sweep_matches_painting_every_nanosecond() {
    // Random intervals on several streams against a brute-force per-ns paint.
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut rand = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let names = ["gemm", "ncclDevKernel_Send", "copy"];
    for round in 0..40 {
        let mut b = Builder::new(Header::default());
        let mut paint = vec![0u8; 3000];
        let mut any = false;
        for _ in 0..(5 + rand(40)) {
            let start = rand(2500);
            let end = start + rand(400);
            let which = rand(3) as usize;
            let stream = 1 + rand(4) as u32;
            match which {
                0 | 1 => {
                    b.kernel(0, stream, names[which], start, end, 0);
                }
                _ => {
                    b.copy(stream, CopyKind::DTOH, start, end, 8, false);
                }
            }
            for p in &mut paint[start as usize..end as usize] {
                *p |= 1 << which;
            }
            any |= end > start;
        }
        let r = one(b.finish(0));
        assert_identities(&r);
        let d = &r.ranks[0].devices[0];
        if !any {
            assert_eq!(d.time.span_ns, 0);
            continue;
        }
        let first = paint.iter().position(|&p| p != 0).unwrap() as u64;
        let last = paint.iter().rposition(|&p| p != 0).unwrap() as u64 + 1;
        let span = &paint[first as usize..last as usize];
        let count = |f: &dyn Fn(u8) -> bool| span.iter().filter(|&&p| f(p)).count() as u64;
        assert_eq!(d.time.span_ns, last - first, "round {round}");
        assert_eq!(d.time.compute_ns, count(&|p| p & 1 != 0), "round {round}");
        assert_eq!(d.time.communication_ns, count(&|p| p & 2 != 0), "round {round}");
        assert_eq!(d.time.transfer_ns, count(&|p| p & 4 != 0), "round {round}");
        assert_eq!(
            d.time.exposed_communication_ns,
            count(&|p| p & 2 != 0 && p & 1 == 0),
            "round {round}"
        );
        assert_eq!(d.time.exposed_transfer_ns, count(&|p| p == 4), "round {round}");
        assert_eq!(d.time.idle_ns, count(&|p| p == 0), "round {round}");
        assert_eq!(d.overlap.communication_transfer_ns, count(&|p| p == 6), "round {round}");
    }
}

#[test]
fn losses_make_the_report_lossy_up_front() {
    let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
    let gemm = w.intern("gemm");
    w.push(Event::Loss(Loss {
        time: Nanos(5),
        source: LossSource::CUPTI_DROPPED,
        count: 17,
        detail: StringId::EMPTY,
    }))
    .unwrap();
    w.push(Event::Kernel(Kernel {
        start: Nanos(0),
        end: Nanos(10),
        device: DeviceId(0),
        context: CTX,
        stream: StreamId(1),
        correlation: CorrelationId(0),
        name: gemm,
        grid: [1; 3],
        block: [1; 3],
        ..Kernel::default()
    }))
    .unwrap();
    // No finish(): the file has no trailer, as after a killed process.
    w.flush().unwrap();
    let bytes = w.get_mut().clone();
    let r = one(TraceFile::from_bytes("cut.gtrace", bytes).unwrap());
    assert!(r.lossy);
    let l = &r.ranks[0].losses;
    assert_eq!(l.lost_records.get("cupti-dropped"), Some(&17));
    assert!(l.trailer_missing);
    assert_eq!(r.findings[0].rule, FindingRule::LossyTrace);
    let text = render_text(&r, false);
    assert!(text.lines().nth(1).unwrap().starts_with("WARNING: the trace lost data"), "{text}");
    assert!(text.contains("17 cupti-dropped"));
    assert!(!text.contains('\x1b'), "no color unless asked");
    assert!(render_text(&r, true).contains('\x1b'));
}

#[test]
fn json_has_the_documented_shape() {
    let r = analyze(
        &[gap_trace()],
        &Options {
            gpu_hour_cost: Some(3.6e12 / 1e9),
            ..Options::default()
        },
    )
    .unwrap();
    let v: serde_json::Value = serde_json::to_value(&r).unwrap();
    let d = &v["ranks"][0]["devices"][0];
    assert_eq!(v["ranks"][0]["rank"], 0);
    assert_eq!(d["device"], 0);
    for (key, want) in [
        ("span_ns", 14000u64),
        ("compute_ns", 5000),
        ("communication_ns", 0),
        ("transfer_ns", 0),
        ("exposed_communication_ns", 0),
        ("exposed_transfer_ns", 0),
        ("idle_ns", 9000),
    ] {
        assert_eq!(d[key].as_u64(), Some(want), "{key}");
    }
    assert_eq!(d["idle_causes"]["host_bound_ns"].as_u64(), Some(3000));
    assert_eq!(d["longest_gaps"][0]["cause"], "synchronization");
    assert_eq!(v["schema_version"], 1);
    // At $1 per 1e9 ns (the price chosen above), idle 9000 ns costs $9e-6.
    let idle_usd = v["cost"]["idle_usd"].as_f64().unwrap();
    assert!((idle_usd - 9e-6).abs() < 1e-15, "{idle_usd}");
}

#[test]
fn no_traces_is_an_error() {
    assert!(matches!(analyze(&[], &Options::default()), Err(AnalysisError::NoTraces)));
}

#[test]
fn devices_are_separate_and_ranks_sorted() {
    // Two devices in one process: their timelines never merge.
    let mut b = Builder::new(Header::default());
    b.kernel(0, 7, "gemm", 0, 100, 0)
        .kernel(1, 7, "gemm", 50, 80, 0)
        .kernel(1, 9, "gemm", 200, 300, 0);
    let two_devices = b.finish(0);
    let mut ranked = Header::default();
    ranked.rank.rank = Some(Rank(0));
    let mut b = Builder::new(ranked);
    b.kernel(0, 7, "gemm", 0, 10, 0);
    let rank0 = b.finish(0);
    // The file without a rank is first in the input, so it gets rank 0 too; ranks sort stably by file name.
    let r = analyze(&[two_devices, rank0], &Options::default()).unwrap();
    assert_identities(&r);
    assert_eq!(r.ranks.len(), 2);
    let unranked = r.ranks.iter().find(|rk| !rk.rank_from_header).unwrap();
    assert_eq!(unranked.rank, 0);
    let (d0, d1) = (&unranked.devices[0], &unranked.devices[1]);
    assert_eq!((d0.device, d0.time.span_ns, d0.time.compute_ns, d0.time.idle_ns), (0, 100, 100, 0));
    assert_eq!(
        (d1.device, d1.time.span_ns, d1.time.compute_ns, d1.time.idle_ns),
        (1, 250, 130, 120)
    );
    assert_eq!(r.totals.time.span_ns, 100 + 250 + 10);
    assert_eq!(r.totals.active_devices, 3);
}

#[test]
fn a_trace_without_gpu_work_still_renders() {
    let mut b = Builder::new(header_with_window(10, &[0]));
    b.api("cudaMalloc", 20, 30, 1);
    let r = one(b.finish(100));
    assert_identities(&r);
    assert_eq!(r.totals.active_devices, 0);
    assert_eq!(r.findings.iter().map(|f| f.rule).collect::<Vec<_>>(), [FindingRule::NoGpuActivity]);
    assert!(render_text(&r, false).contains("No kernel, copy or memset was recorded"));
}

#[test]
fn shared_and_decreasing_correlation_ids() {
    // k2 and k3 come from one CUDA graph launch (one correlation id); the
    // last launch has a smaller id than the one before it.
    let mut b = Builder::new(Header::default());
    b.api("cudaLaunchKernel", 0, 1, 5).kernel(0, 7, "k1", 0, 100, 5);
    b.api("cudaGraphLaunch", 150, 160, 7)
        .kernel(0, 7, "k2", 200, 300, 7)
        .kernel(0, 7, "k3", 400, 500, 7);
    b.api("cudaLaunchKernel", 550, 560, 3).kernel(0, 7, "k4", 600, 700, 3);
    let r = one(b.finish(0));
    assert_identities(&r);
    let c = r.ranks[0].devices[0].idle_causes;
    // [100, 200): launched at 150; [300, 400): launched long before; [500, 600): launched at 550.
    assert_eq!(
        (c.gaps, c.host_bound_ns, c.launch_latency_ns, c.unattributed_ns),
        (3, 50 + 50, 50 + 100 + 50, 0)
    );
}

#[test]
fn many_small_chunks_give_the_same_report() {
    // The merge must order events across many overlapping chunks per track.
    let build = |mut b: Builder| {
        let mut seed = 0x9e37_79b9_u64;
        let mut rand = |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for i in 0..400u64 {
            let start = rand(100_000);
            let end = start + 1 + rand(3_000);
            let stream = 1 + (i % 3) as u32;
            match rand(4) {
                0 => b.kernel(0, stream, "ncclDevKernel_AllReduce", start, end, i as u32 + 1),
                1 => b.copy(stream, CopyKind::HTOD, start, end, 1024, false),
                _ => b.kernel(0, stream, "gemm", start, end, i as u32 + 1),
            };
            b.api("cudaLaunchKernel", start.saturating_sub(rand(500)), start, i as u32 + 1);
        }
        serde_json::to_value(one(b.finish(0))).unwrap()
    };
    let whole = build(Builder::new(Header::default()));
    let chunked = build(Builder::with_chunks(Header::default(), 3));
    assert_eq!(whole, chunked);
    assert!(whole["ranks"][0]["devices"][0]["idle_causes"]["gaps"].as_u64().unwrap() > 0);
}

#[test]
fn entries_an_importer_skipped_are_listed_but_not_a_loss() {
    let header = Header {
        producer: Producer::Import,
        ..Header::default()
    };
    let mut b = Builder::new(header);
    b.kernel(0, 7, "gemm", 0, 100, 0);
    let detail = b.w.intern("cpu_op (CPU operators)");
    b.w.push(Event::Loss(Loss {
        time: Nanos(0),
        source: LossSource::IMPORT,
        count: 5,
        detail,
    }))
    .unwrap();
    let mut trailer = Trailer::default();
    trailer.losses.insert("import".into(), 5);
    let t = TraceFile::from_bytes("imported.gtrace", b.w.finish(trailer).unwrap()).unwrap();
    let r = one(t);
    assert!(!r.lossy, "{:?}", r.ranks[0].losses);
    assert_eq!(r.ranks[0].losses.not_imported.get("cpu_op (CPU operators)"), Some(&5));
    assert!(r.ranks[0].losses.lost_records.is_empty());
    assert!(r.ranks[0].devices[0].process_window.is_none(), "imports have no process window");
    assert!(render_text(&r, false).contains("5 input entries were outside the timeline model"));
}

/// A rank's PyTorch trace lists every GPU of its node, but the rank ran on one: the
/// listed-only GPUs have no steps, so the step table's shares equal the device's.
#[test]
fn gpus_listed_without_activity_have_no_steps() {
    let mut b = Builder::new(header_with_window(1_000, &[0, 1, 2, 3, 4, 5, 6, 7]));
    b.range("ProfilerStep#0", 0, 10_000).range("ProfilerStep#1", 10_000, 20_000);
    b.kernel(3, 7, "gemm", 0, 9_000, 0);
    b.kernel(3, 7, "gemm", 10_000, 19_000, 0);
    let r = analyze(&[b.finish(0)], &Options::default()).unwrap();
    let devices = &r.ranks[0].devices;
    assert_eq!(devices.len(), 8, "the header's GPUs are all reported");
    for d in devices {
        if d.device == 3 {
            assert_eq!(d.steps.len(), 2);
            // No API calls link the kernels to their steps: the steps are their CPU
            // windows within the device's span [0, 19 µs). Step 0: 9 µs of gemm, 1 µs idle;
            // step 1 ends with the last kernel at 19 µs: 9 µs of gemm, no idle (the µs
            // after it is past the device's last work, not idle of the device).
            let got: Vec<(u64, u64, u64)> = d.steps.iter().map(|s| (s.duration_ns, s.compute_ns, s.idle_ns)).collect();
            assert_eq!(got, [(10_000, 9_000, 1_000), (9_000, 9_000, 0)]);
        } else {
            assert!(d.first_ns.is_none() && d.steps.is_empty(), "gpu {}: {:?}", d.device, d.steps);
        }
    }
    assert_eq!(r.totals.active_devices, 1);
    let text = render_text(&r, false);
    assert!(text.contains("1 rank(s), 1 GPU(s) (7 more listed without activity)"), "{text}");
}

/// A duty-cycled trace (format 1.3 capture windows): the time between the
/// windows was not watched, so it is neither span nor idle.
#[test]
fn duty_cycled_idle_excludes_the_untraced_gaps() {
    let mut h = header_with_window(500, &[0]);
    h.extra.insert("capture.duty".into(), "1s/10s".into());
    let mut b = Builder::new(h);
    let win = |a: u64, b: u64| CaptureWindow {
        start: Nanos(a),
        end: Nanos(b),
    };
    // Window [1000, 2000): compute [1100, 1500), transfer [1400, 1600), idle 100 + 400.
    b.kernel(0, 7, "gemm", 1100, 1500, 0).copy(4, CopyKind::HTOD, 1400, 1600, 64, false);
    b.w.add_capture_windows(&[win(1000, 2000)]).unwrap();
    // Window [11000, 12000): a kernel that started before the window opened
    // (only its traced part counts), then compute [11500, 11800).
    b.kernel(0, 7, "gemm", 10_900, 11_200, 0).kernel(0, 7, "gemm", 11_500, 11_800, 0);
    b.w.add_capture_windows(&[win(11_000, 12_000)]).unwrap();
    // Ranges for steps: one step across the untraced gap.
    b.range("ProfilerStep#1", 1000, 12_000);
    let r = one(b.finish(20_000));
    assert_identities(&r);
    let rk = &r.ranks[0];
    let d = &rk.devices[0];
    assert_eq!((d.first_ns, d.last_ns), (Some(1100), Some(11_800)));
    // Traced span: [1100, 2000) + [11000, 11800).
    assert_eq!(d.time.span_ns, 900 + 800);
    assert_eq!(d.time.compute_ns, 400 + 200 + 300);
    assert_eq!(d.time.exposed_transfer_ns, 100);
    // Idle: [1600, 2000) and [11200, 11500); never the 9000 ns between windows.
    assert_eq!(d.time.idle_ns, 400 + 300);
    assert_eq!(d.idle_causes.gaps, 2, "the gap across the windows is cut to its traced parts");
    assert!(d.longest_gaps.iter().all(|g| g.duration_ns <= 400), "{:?}", d.longest_gaps);
    let w = d.process_window.unwrap();
    assert_eq!((w.window_ns, w.traced_ns), (19_500, 2000));
    assert_eq!((w.startup_idle_ns, w.teardown_idle_ns), (100, 200));
    // The step (a CPU window: no API calls link the work to it) is cut to the device's
    // span, [1100, 11800): 10700 ns of wall time, of which the traced 900 + 800 tile it.
    let s = &d.steps[0];
    assert_eq!(s.duration_ns, 10_700);
    assert_eq!(s.compute_ns + s.exposed_communication_ns + s.exposed_transfer_ns + s.idle_ns, 1700);
    // The report says so.
    let duty = rk.duty_cycle.as_ref().expect("duty-cycled");
    assert_eq!(
        (duty.schedule.as_str(), duty.windows, duty.traced_ns, duty.wall_ns),
        ("1s/10s", 2, 2000, 19_500)
    );
    assert!((duty.duty_ratio - 2000.0 / 19_500.0).abs() < 1e-12);
    let text = render_text(&r, false);
    assert!(
        text.contains("duty-cycled capture (1s/10s): 2 window(s)") && text.contains("(10.3%)"),
        "{text}"
    );
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["ranks"][0]["duty_cycle"]["windows"], 2);
    assert_eq!(v["ranks"][0]["devices"][0]["process_window"]["traced_ns"], 2000);

    // The same events without windows: the gap between them is idle.
    let mut b = Builder::new(header_with_window(0, &[0]));
    b.kernel(0, 7, "gemm", 1100, 1500, 0).copy(4, CopyKind::HTOD, 1400, 1600, 64, false);
    b.kernel(0, 7, "gemm", 10_900, 11_200, 0).kernel(0, 7, "gemm", 11_500, 11_800, 0);
    let r = one(b.finish(20_000));
    assert!(r.ranks[0].duty_cycle.is_none());
    assert_eq!(r.ranks[0].devices[0].time.span_ns, 10_700);
    assert_eq!(r.ranks[0].devices[0].time.idle_ns, 9300 + 300);
    assert!(!render_text(&r, false).contains("duty-cycled"));
}
