//! Chrome/Kineto JSON: structure, exact timestamps, flows, escaping,
//! filters, and a snapshot of a tiny export.

mod common;

use gputrace_format::*;
use gputrace_viewer::*;
use proptest::prelude::*;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

fn export(traces: &[&TraceFile], filter: &Filter) -> (Value, String, ExportStats) {
    let mut out = Vec::new();
    let stats = ChromeJson.export(&Job::new(traces.iter().copied()), filter, &mut out).unwrap();
    assert_eq!(stats.bytes, out.len() as u64);
    let text = String::from_utf8(out).unwrap();
    let json: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("invalid JSON: {e}"));
    assert_three_decimals(&text);
    (json, text, stats)
}

fn events(json: &Value) -> &Vec<Value> {
    json["traceEvents"].as_array().unwrap()
}

/// `ts` in ns relative to the base. Relative times are small enough that
/// the f64 holds them exactly to the ns.
fn ns_of(v: &Value) -> u64 {
    (v.as_f64().unwrap() * 1000.0).round() as u64
}

/// Every `ts` and `dur` literal is `<integer>.<3 digits>`.
fn assert_three_decimals(text: &str) {
    for key in ["\"ts\":", "\"dur\":"] {
        for (i, _) in text.match_indices(key) {
            let rest = &text[i + key.len()..];
            let lit: String = rest.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
            let (us, frac) = lit.split_once('.').unwrap_or_else(|| panic!("{lit} has no fraction"));
            assert!(!us.is_empty() && frac.len() == 3, "{key}{lit}: want µs with three decimals");
        }
    }
}

#[test]
fn snapshot_of_a_tiny_trace() {
    let t = common::tiny_trace("k<\"x\">");
    let (_, text, _) = export(&[&t], &Filter::default());
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/snapshots/tiny.json");
    common::check_snapshot(path, &text);
}

#[test]
fn kineto_fields_and_exact_times() {
    let (_, traces) = common::small_job(1);
    let t = &traces[0];
    let (json, text, stats) = export(&[t], &Filter::default());
    // HTA finds the rank with the regex `"rank":\s+(\d+)`, first match wins.
    let first = text.lines().find(|l| l.contains("\"rank\":")).unwrap();
    assert!(
        first.contains("\"distributedInfo\": {\"backend\": \"nccl\", \"rank\": 0,"),
        "{first}"
    );
    let base = json["baseTimeNanoseconds"].as_u64().unwrap();
    assert_eq!(json["distributedInfo"]["rank"], 0);
    assert_eq!(json["distributedInfo"]["world_size"], 1);
    assert_eq!(json["deviceProperties"][0]["name"], "Synthetic H200");
    assert_eq!(json["deviceProperties"][0]["numSms"], 132);

    let originals = common::all_events(t);
    assert_eq!(stats.walk.events, originals.len() as u64);
    assert_eq!(stats.walk.adjusted, 0, "synthetic slices nest already");
    // Every kernel appears with its exact start and duration (ns).
    let mut kernels: HashMap<u64, (u64, u64)> = HashMap::new();
    for e in &originals {
        if let Event::Kernel(k) = e {
            kernels.insert(k.correlation.0 as u64, (k.start.0, k.end.0 - k.start.0));
        }
    }
    let mut by_cat: BTreeMap<String, u64> = BTreeMap::new();
    let mut nccl_kernels = 0u64;
    for e in events(&json) {
        *by_cat.entry(e["cat"].as_str().unwrap().to_string()).or_default() += 1;
        if e["cat"] == "kernel" {
            let corr = e["args"]["correlation"].as_u64().unwrap();
            let (start, dur) = kernels[&corr];
            assert_eq!(base + ns_of(&e["ts"]), start);
            assert_eq!(ns_of(&e["dur"]), dur);
            assert_eq!(e["pid"], 0, "GPU pid is the device ordinal");
            assert_eq!(e["tid"], e["args"]["stream"], "GPU tid is the stream");
            assert!(e["args"]["grid"].as_array().unwrap().len() == 3);
            // NCCL kernels carry their collective's args, as Kineto writes
            // them (TraceLens and HTA read them from the kernel).
            let nccl = e["name"].as_str().unwrap().starts_with("nccl");
            assert_eq!(e["args"].get("Collective name").is_some(), nccl, "{e}");
            if nccl {
                nccl_kernels += 1;
                assert_eq!(e["args"]["Collective name"], "AllReduce");
                assert_eq!(e["args"]["Group size"], 1);
                assert_eq!(e["args"]["In msg nelems"], e["args"]["Out msg nelems"]);
                assert_eq!(e["args"]["Process Group Description"], "default_pg");
            }
        }
        if e["cat"] == "nccl_collective" {
            // The communicator's name from the trace's communicators chunk.
            assert_eq!(e["args"]["Process Group Description"], "default_pg");
            assert_eq!(e["args"]["Process Group Name"], "00c0ffeed00d0001");
        }
        if e["cat"] == "cuda_runtime" {
            assert_eq!(e["pid"], t.header().pid);
            assert!(e["args"]["correlation"].as_u64().unwrap() > 0);
        }
    }
    let counts = t.event_counts();
    assert_eq!(by_cat["kernel"], counts[&EventKind::Kernel]);
    assert_eq!(by_cat["gpu_memcpy"], counts[&EventKind::Memcpy]);
    assert_eq!(by_cat["cuda_runtime"], counts[&EventKind::Api]);
    assert_eq!(by_cat["user_annotation"], counts[&EventKind::Marker]);
    assert_eq!(by_cat["nccl_collective"], counts[&EventKind::Collective]);
    assert_eq!(nccl_kernels, counts[&EventKind::Collective], "one linked kernel per collective");
    assert_eq!(by_cat["cuda_sync"], counts[&EventKind::Sync]);
    // One ac2g arrow per launch: every kernel and copy has a launching call.
    assert_eq!(by_cat["ac2g"], 2 * (counts[&EventKind::Kernel] + counts[&EventKind::Memcpy]));
    assert_eq!(stats.walk.flows, counts[&EventKind::Kernel] + counts[&EventKind::Memcpy]);
}

#[test]
fn flows_pair_launches_with_gpu_work() {
    let (_, traces) = common::small_job(1);
    let (json, _, _) = export(&[&traces[0]], &Filter::default());
    let evs = events(&json);
    let mut starts = HashMap::new();
    let mut ends = HashMap::new();
    for e in evs {
        match e["ph"].as_str().unwrap() {
            "s" => assert!(starts.insert(e["id"].as_u64().unwrap(), e).is_none(), "duplicate flow start"),
            "f" => {
                assert_eq!(e["bp"], "e");
                assert!(ends.insert(e["id"].as_u64().unwrap(), e).is_none(), "duplicate flow end");
            }
            _ => {}
        }
    }
    assert_eq!(starts.len(), ends.len());
    // Each end binds to a GPU slice starting at its ts on the same pid/tid,
    // each start to the API call with that correlation.
    let slices: Vec<&Value> = evs.iter().filter(|e| e["ph"] == "X").collect();
    for (id, s) in &starts {
        let f = ends.get(id).expect("every arrow ends");
        assert!(ns_of(&s["ts"]) <= ns_of(&f["ts"]), "launch before work");
        assert!(slices
            .iter()
            .any(|x| x["cat"] == "cuda_runtime" && x["args"]["correlation"] == *id && x["ts"] == s["ts"] && x["tid"] == s["tid"]));
        assert!(slices.iter().any(|x| (x["cat"] == "kernel" || x["cat"] == "gpu_memcpy")
            && x["args"]["correlation"] == *id
            && x["ts"] == f["ts"]
            && x["tid"] == f["tid"]
            && x["pid"] == f["pid"]));
    }
}

#[test]
fn slices_nest_per_thread() {
    let (_, traces) = common::small_job(2);
    let (json, _, _) = export(&[&traces[0], &traces[1]], &Filter::default());
    let mut lanes: HashMap<(u64, u64), Vec<(u64, u64)>> = HashMap::new();
    for e in events(&json) {
        if e["ph"] == "X" {
            let s = ns_of(&e["ts"]);
            lanes
                .entry((e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap()))
                .or_default()
                .push((s, s + ns_of(&e["dur"])));
        }
    }
    for (lane, mut v) in lanes {
        v.sort_by_key(|&(s, e)| (s, std::cmp::Reverse(e)));
        let mut stack: Vec<u64> = Vec::new();
        for (s, e) in v {
            while stack.last().is_some_and(|&top| top <= s) {
                stack.pop();
            }
            if let Some(&top) = stack.last() {
                assert!(e <= top, "lane {lane:?}: [{s}, {e}] overlaps its parent ending {top}");
            }
            stack.push(e);
        }
    }
}

#[test]
fn merged_ranks_have_distinct_pids_and_align_clocks() {
    let (_, traces) = common::small_job(2);
    let (json, _, stats) = export(&[&traces[0], &traces[1]], &Filter::default());
    assert!(json.get("distributedInfo").is_none(), "one rank per file for distributedInfo");
    assert_eq!(json["gputraceRanks"].as_array().unwrap().len(), 2);
    let mut gpu_pids = std::collections::BTreeSet::new();
    for e in events(&json) {
        if e["cat"] == "kernel" {
            gpu_pids.insert(e["pid"].as_u64().unwrap());
        }
    }
    assert_eq!(
        gpu_pids.into_iter().collect::<Vec<_>>(),
        vec![MERGED_GPU_PID_BASE, MERGED_GPU_PID_BASE + 1001]
    );
    assert_eq!(stats.walk.events, traces.iter().map(|t| t.event_total()).sum::<u64>());
}

#[test]
fn header_clock_pairs_align_ranks() {
    // The tiny trace's CUPTI clock reads 1 s behind realtime.
    let t = common::tiny_trace("k");
    let (json, _, _) = export(&[&t], &Filter::default());
    assert_eq!(json["baseTimeNanoseconds"], 1_700_000_001_000_000_000u64);
    let mut job = Job::new([&t]);
    job.push(RankInput {
        trace: &t,
        offset_ns: 2_000,
    });
    let mut out = Vec::new();
    ChromeJson.export(&job, &Filter::default(), &mut out).unwrap();
    let json: Value = serde_json::from_slice(&out).unwrap();
    let kernel_ts: Vec<u64> = events(&json)
        .iter()
        .filter(|e| e["cat"] == "kernel")
        .map(|e| ns_of(&e["ts"]))
        .collect();
    assert_eq!(kernel_ts, vec![10_000, 12_000], "second copy shifted by its offset");
}

#[test]
fn filters_window_rank_device_and_budget() {
    let (_, traces) = common::small_job(2);
    let refs = [&traces[0], &traces[1]];
    let whole = export(&refs, &Filter::default()).2;
    let (all, span) = (whole.walk.events, whole.to - whole.from);

    let (json, _, stats) = export(
        &refs,
        &Filter {
            ranks: vec![Rank(1)],
            ..Filter::default()
        },
    );
    assert_eq!(stats.walk.events, traces[1].event_total());
    assert_eq!(json["distributedInfo"]["rank"], 1);

    let (_, _, none) = export(
        &refs,
        &Filter {
            devices: vec![DeviceId(5)],
            ..Filter::default()
        },
    );
    let host_only: u64 = traces
        .iter()
        .map(|t| t.event_counts()[&EventKind::Api] + t.event_counts()[&EventKind::Marker])
        .sum();
    assert_eq!(none.walk.events, host_only, "other GPUs dropped, host threads kept");
    assert_eq!(none.walk.flows, 0, "no arrows to GPU work that is not written");

    // The second quarter of the job: everything inside, clipped.
    let window = Filter {
        from: Some(Nanos(span / 4)),
        to: Some(Nanos(span / 2)),
        ..Filter::default()
    };
    let (json, _, stats) = export(&refs, &window);
    assert!(stats.walk.events > 0 && stats.walk.events < all);
    for e in events(&json) {
        if e["ph"] == "X" {
            // Relative to the window start rounded down to a whole µs.
            assert!(ns_of(&e["ts"]) + ns_of(&e["dur"]) <= span / 2 - span / 4 + 1_000);
        }
    }
    // Every arrow in a window is whole.
    let s = events(&json).iter().filter(|e| e["ph"] == "s").count();
    let f = events(&json).iter().filter(|e| e["ph"] == "f").count();
    assert_eq!(s, f);

    let (_, _, capped) = export(
        &refs,
        &Filter {
            max_events: Some(500),
            ..Filter::default()
        },
    );
    assert!(capped.walk.events <= 500 && capped.walk.events > 250, "{capped:?}");

    let err = ChromeJson
        .export(
            &Job::new(refs),
            &Filter {
                ranks: vec![Rank(9)],
                ..Filter::default()
            },
            Vec::new(),
        )
        .unwrap_err();
    assert!(matches!(err, ExportError::EmptySelection(_)), "{err}");
}

#[test]
fn estimate_is_in_the_right_range() {
    // Full-size layers, so that every name of the string table is used (as
    // in real traces, where the table holds only names that occurred).
    let cfg = gputrace_synth::JobConfig {
        ranks: 2,
        steps: 2,
        ..Default::default()
    };
    let sched = gputrace_synth::schedule(&cfg);
    let traces: Vec<TraceFile> = (0..2)
        .map(|r| TraceFile::from_bytes("r", gputrace_synth::write_rank(&cfg, &sched, r, Vec::new()).unwrap().0).unwrap())
        .collect();
    let job = Job::new([&traces[0], &traces[1]]);
    for format in [Format::ChromeJson, Format::Perfetto] {
        let est = estimate(&job, &Filter::default(), format).unwrap();
        let mut out = Vec::new();
        let stats = format.export(&job, &Filter::default(), &mut out).unwrap();
        assert_eq!(est.events, stats.walk.events);
        let ratio = est.bytes as f64 / stats.bytes as f64;
        assert!(
            (0.7..1.3).contains(&ratio),
            "{format:?}: estimated {} bytes, wrote {}",
            est.bytes,
            stats.bytes
        );
        assert!(!est.exceeds_viewer_limit());
    }
}

#[test]
fn nvtx_ranges_are_projected_onto_the_gpu() {
    let (cfg, traces) = common::small_job(1);
    let (json, _, _) = export(&[&traces[0]], &Filter::default());
    let evs = events(&json);
    let gpu: Vec<&Value> = evs.iter().filter(|e| e["cat"] == "gpu_user_annotation").collect();
    // Steps are not projected: TensorBoard's profiler plugin would count each
    // projection as one more step. Forward, backward and optimizer on the
    // compute stream (the all-reduces are launched between them).
    assert!(gpu.iter().all(|e| !e["name"].as_str().unwrap().starts_with("ProfilerStep#")));
    for phase in ["forward", "backward", "optimizer"] {
        let on: Vec<&&Value> = gpu.iter().filter(|e| e["name"] == phase).collect();
        assert_eq!(on.len(), cfg.steps as usize, "{phase}");
        assert!(on.iter().all(|e| e["tid"] == 7));
    }
    // A projection spans exactly work launched inside its range: it starts
    // when some of it starts and ends when some of it ends.
    let work: Vec<&Value> = evs
        .iter()
        .filter(|e| e["tid"] == 7 && matches!(e["cat"].as_str(), Some("kernel" | "gpu_memcpy" | "gpu_memset")))
        .collect();
    for p in &gpu {
        let (s, e) = (ns_of(&p["ts"]), ns_of(&p["ts"]) + ns_of(&p["dur"]));
        assert!(work.iter().any(|w| ns_of(&w["ts"]) == s), "{p}");
        assert!(work.iter().any(|w| ns_of(&w["ts"]) + ns_of(&w["dur"]) == e), "{p}");
    }
}

#[test]
fn ranges_sharing_correlation_ids_with_another_thread_are_not_projected() {
    let mut w = TraceWriter::new(
        Vec::new(),
        &Header {
            pid: 3,
            ..Header::default()
        },
        WriterOptions::default(),
    )
    .unwrap();
    let (a, b, launch) = (w.intern("interleaved"), w.intern("alone"), w.intern("cudaLaunchKernel"));
    let marker = |s: u64, e: u64, name| {
        Event::Marker(Marker {
            start: Nanos(s),
            end: Nanos(e),
            thread: ThreadId(1),
            name,
            domain: StringId::EMPTY,
            kind: MarkerKind::RANGE,
            color: 0,
        })
    };
    let call = |s: u64, tid: u32, corr: u32| {
        Event::Api(ApiCall {
            start: Nanos(s),
            end: Nanos(s + 5),
            thread: ThreadId(tid),
            correlation: CorrelationId(corr),
            domain: ApiDomain::RUNTIME,
            cbid: 211,
            name: launch,
            return_value: 0,
        })
    };
    let kernel = |s: u64, corr: u32| {
        Event::Kernel(Kernel {
            start: Nanos(s),
            end: Nanos(s + 10),
            device: DeviceId(0),
            context: ContextId(1),
            stream: StreamId(7),
            correlation: CorrelationId(corr),
            name: launch,
            grid: [1; 3],
            block: [1; 3],
            ..Kernel::default()
        })
    };
    // Thread 2 launches id 2 while thread 1's first range holds ids 1 and 3.
    for e in [
        marker(0, 100, a),
        call(10, 1, 1),
        call(20, 2, 2),
        call(30, 1, 3),
        marker(200, 300, b),
        call(210, 1, 4),
    ] {
        w.push(e).unwrap();
    }
    for (s, c) in [(400, 1), (420, 2), (440, 3), (460, 4)] {
        w.push(kernel(s, c)).unwrap();
    }
    let t = TraceFile::from_bytes("threads", w.finish(Trailer::default()).unwrap()).unwrap();
    let (json, _, _) = export(&[&t], &Filter::default());
    let gpu: Vec<(String, u64, u64)> = events(&json)
        .iter()
        .filter(|e| e["cat"] == "gpu_user_annotation")
        .map(|e| (e["name"].as_str().unwrap().to_string(), ns_of(&e["ts"]), ns_of(&e["dur"])))
        .collect();
    assert_eq!(gpu, vec![("alone".to_string(), 460, 10)]);
}

#[test]
fn a_graph_launch_gets_one_arrow() {
    let mut w = TraceWriter::new(
        Vec::new(),
        &Header {
            pid: 3,
            ..Header::default()
        },
        WriterOptions::default(),
    )
    .unwrap();
    let (launch, k) = (w.intern("cudaGraphLaunch"), w.intern("k"));
    w.push(Event::Api(ApiCall {
        start: Nanos(0),
        end: Nanos(10),
        thread: ThreadId(3),
        correlation: CorrelationId(5),
        domain: ApiDomain::RUNTIME,
        cbid: 311,
        name: launch,
        return_value: 0,
    }))
    .unwrap();
    for (s, stream) in [(20, 7), (40, 7), (30, 8)] {
        w.push(Event::Kernel(Kernel {
            start: Nanos(s),
            end: Nanos(s + 5),
            device: DeviceId(0),
            context: ContextId(1),
            stream: StreamId(stream),
            correlation: CorrelationId(5),
            name: k,
            grid: [1; 3],
            block: [1; 3],
            static_shared_mem: 0,
            dynamic_shared_mem: 0,
            registers: 0,
            graph_id: 9,
            graph_node_id: 1000 + s,
        }))
        .unwrap();
    }
    let t = TraceFile::from_bytes("graph", w.finish(Trailer::default()).unwrap()).unwrap();
    let (json, _, stats) = export(&[&t], &Filter::default());
    assert_eq!(stats.walk.flows, 1);
    let ends: Vec<u64> = events(&json).iter().filter(|e| e["ph"] == "f").map(|e| ns_of(&e["ts"])).collect();
    assert_eq!(ends, vec![20], "to the first kernel of the graph");
    // Each kernel keeps its own graph node id (a per-event series, read
    // with the spans only where a kernel belongs to a graph).
    let mut nodes: Vec<(u64, u64)> = events(&json)
        .iter()
        .filter(|e| e["cat"] == "kernel")
        .map(|e| (ns_of(&e["ts"]), e["args"]["graph node id"].as_u64().unwrap()))
        .collect();
    nodes.sort_unstable();
    assert_eq!(nodes, vec![(20, 1020), (30, 1030), (40, 1040)]);
    let mut out = Vec::new();
    Perfetto::default().export(&Job::new([&t]), &Filter::default(), &mut out).unwrap();
}

#[test]
fn a_loss_of_unknown_time_is_kept_at_the_start() {
    let mut w = TraceWriter::new(
        Vec::new(),
        &Header {
            pid: 3,
            ..Header::default()
        },
        WriterOptions::default(),
    )
    .unwrap();
    let api = w.intern("cudaFree");
    w.push(Event::Api(ApiCall {
        start: Nanos(5_000),
        end: Nanos(6_000),
        thread: ThreadId(3),
        correlation: CorrelationId(1),
        domain: ApiDomain::RUNTIME,
        cbid: 1,
        name: api,
        return_value: 0,
    }))
    .unwrap();
    w.push(Event::Loss(Loss {
        time: Nanos(0),
        source: LossSource::BUFFER_POOL_EXHAUSTED,
        count: 7,
        detail: StringId::EMPTY,
    }))
    .unwrap();
    let t = TraceFile::from_bytes("loss", w.finish(Trailer::default()).unwrap()).unwrap();
    let (json, _, stats) = export(&[&t], &Filter::default());
    assert_eq!(stats.walk.events, 2);
    assert_eq!(json["baseTimeNanoseconds"], 5_000, "the job starts at its first real event");
    let loss = events(&json).iter().find(|e| e["cat"] == "gputrace_loss").unwrap();
    assert_eq!(
        (loss["ph"].as_str(), ns_of(&loss["ts"]), loss["args"]["count"].as_u64()),
        (Some("i"), 0, Some(7))
    );
    // With an explicit window the loss is outside it.
    let (_, _, stats) = export(
        &[&t],
        &Filter {
            from: Some(Nanos(0)),
            ..Filter::default()
        },
    );
    assert_eq!(stats.walk.events, 1);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    #[test]
    fn any_kernel_name_round_trips(name in any::<String>()) {
        let t = common::tiny_trace(&name);
        let mut out = Vec::new();
        ChromeJson.export(&Job::new([&t]), &Filter::default(), &mut out).unwrap();
        let json: Value = serde_json::from_slice(&out).unwrap();
        let kernel = events(&json).iter().find(|e| e["cat"] == "kernel").unwrap();
        prop_assert_eq!(kernel["name"].as_str().unwrap(), name.as_str());
    }
}

/// The Chrome/Kineto export draws communication-library kernels on rows of their own
/// under the GPU, with a category Kineto readers do not count as kernels.
#[test]
fn communication_libraries_get_rows_of_their_own() {
    let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
    let gemm = w.intern("sm90_xmma_gemm_bf16");
    let dispatch = w.intern("void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*)");
    for (i, (s, e, name)) in [(1000, 2000, gemm), (2000, 3000, dispatch), (3000, 4000, gemm)]
        .into_iter()
        .enumerate()
    {
        w.push(Event::Kernel(Kernel {
            start: Nanos(s),
            end: Nanos(e),
            device: DeviceId(0),
            context: ContextId(1),
            stream: StreamId(7),
            correlation: CorrelationId(i as u32 + 1),
            name,
            ..Kernel::default()
        }))
        .unwrap();
    }
    let t = TraceFile::from_bytes("moe", w.finish(Trailer::default()).unwrap()).unwrap();
    let (json, _, _) = export(&[&t], &Filter::default());
    let evs = events(&json);
    let comm: Vec<&Value> = evs.iter().filter(|e| e["cat"] == "gputrace_communication").collect();
    assert_eq!(comm.len(), 1);
    assert_eq!(comm[0]["name"], t.name(dispatch).as_ref());
    assert_eq!(comm[0]["args"]["library"], "DeepEP");
    assert_eq!(ns_of(&comm[0]["ts"]), 1000, "relative to the trace's start");
    assert_eq!(
        evs.iter().filter(|e| e["cat"] == "kernel").count(),
        3,
        "the kernels stay on their stream"
    );
    let row = evs
        .iter()
        .find(|e| e["ph"] == "M" && e["name"] == "thread_name" && e["tid"] == comm[0]["tid"] && e["pid"] == comm[0]["pid"])
        .expect("the row is named");
    assert_eq!(row["args"]["name"], "DeepEP · stream 7 (communication)");
}
