//! The page escapes what a trace says, and stays small for a 1,024-rank job.

use gputrace_analysis::{analyze, Options};
use gputrace_format::*;
use gputrace_html::{Html, Page};

#[test]
fn names_from_a_hostile_trace_do_not_inject_markup() {
    let header = Header {
        hostname: "\"><img onerror=alert(1)>".into(),
        ..Header::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &header, WriterOptions::default()).unwrap();
    let name = w.intern("<script>alert(1)</script>");
    w.push(Event::Kernel(Kernel {
        start: Nanos(0),
        end: Nanos(100),
        device: DeviceId(0),
        context: ContextId(1),
        stream: StreamId(7),
        correlation: CorrelationId(0),
        name,
        ..Kernel::default()
    }))
    .unwrap();
    let trace = TraceFile::from_bytes("x.gtrace", w.finish(Trailer::default()).unwrap()).unwrap();
    let report = analyze(&[trace], &Options::default()).unwrap();
    let mut page = Page::new(&report);
    page.inputs = vec!["</title><script>x()</script>".into()];
    let html = Html::default().render(&page);
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;&#x2F;script&gt;"),
        "the kernel name is shown, escaped"
    );
    assert_eq!(html.matches("<script>").count(), 1, "only the page's own script");
    assert!(!html.contains("<img") && !html.contains("</title><script>"));
}

#[test]
fn a_1024_rank_job_is_under_2_mb() {
    let cfg = gputrace_synth::JobConfig {
        ranks: 1024,
        steps: 6,
        layers: 1,
        buckets: 1,
        slow_rank: Some(700),
        ..Default::default()
    };
    let s = gputrace_synth::schedule(&cfg);
    let traces: Vec<TraceFile> = (0..cfg.ranks)
        .map(|r| {
            let bytes = gputrace_synth::write_rank(&cfg, &s, r, Vec::new()).unwrap().0;
            TraceFile::from_bytes(format!("r{r}.gtrace"), bytes).unwrap()
        })
        .collect();
    let report = analyze(&traces, &Options::default()).unwrap();
    let comparison = gputrace_compare::compare(&traces, &gputrace_compare::Options::default()).unwrap();
    let page = Page {
        comparison: Some(&comparison),
        ..Page::new(&report)
    };
    let html = Html::default().render(&page);
    eprintln!("1,024-rank page: {} bytes", html.len());
    assert!(html.len() <= 2 << 20, "{} bytes", html.len());
    assert!(html.contains("64 of 1024 GPUs shown") && html.contains("buckets of"));
    // The activity timeline: 64 GPUs of 1,024 drawn, the straggler among them, and said so.
    let rows = html.matches("data-fmt=\"bins\"").count();
    assert!((60..=65).contains(&rows), "{rows} timeline rows");
    assert!(
        html.contains("data-label=\"rank 700 · gpu 4 · straggler\""),
        "the straggler's row is drawn"
    );
    assert!(html.contains("of 1024 GPUs: the 16 with the lowest compute share"));
}

const PID: u32 = 100;
const MS: u64 = 1_000_000;

/// A trace whose GPU is idle [100, 1100) ms and [1200, 2200) ms while the main thread
/// sleeps in `load` under `train` for 800 ms, then runs the hostile-named function under
/// `train` for 1,000 ms (running and disk wait): 1,800 ms of sampled idle time.
fn trace_with_host_samples() -> TraceFile {
    use gputrace_format::host::*;
    let header = Header {
        pid: PID,
        ..Header::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &header, WriterOptions::default()).unwrap();
    let gemm = w.intern("gemm");
    for (start, end) in [(0, 100), (1100, 1200), (2200, 2300)] {
        w.push(Event::Kernel(Kernel {
            start: Nanos(start * MS),
            end: Nanos(end * MS),
            device: DeviceId(0),
            context: ContextId(1),
            stream: StreamId(7),
            correlation: CorrelationId(0),
            name: gemm,
            grid: [1; 3],
            block: [1; 3],
            static_shared_mem: 0,
            dynamic_shared_mem: 0,
            registers: 0,
            graph_id: 0,
            graph_node_id: 0,
        }))
        .unwrap();
    }
    let mut bytes = w.finish(Trailer::default()).unwrap();
    let first = TraceFile::from_bytes("h.gtrace", bytes.clone()).unwrap().string_count();
    let names = [
        "load",
        "/site-packages/torch/utils/data/dataloader.py",
        "train",
        "/home/me/train.py",
        "<i onmouseover=x()>aug",
    ];
    bytes.extend(encode_strings_chunk(first, &names));
    let s = |i: usize| StringId((first + i) as u32);
    let frame = |function, file, line| HostFrame {
        function: s(function),
        file: s(file),
        line,
    };
    let run = |start: u64, end: u64, state, stack| HostRun {
        start: Nanos(start * MS),
        end: Nanos(end * MS),
        thread: 0,
        state,
        cpu_ns: 0,
        stack: Some(stack),
        samples: 1,
    };
    let samples = HostSamples {
        hz: 100,
        threads: vec![HostThread {
            pid: PID,
            tid: PID,
            name: "python".into(),
        }],
        frames: vec![frame(0, 1, 631), frame(2, 3, 57), frame(4, 3, 12)],
        // Innermost first: train → load, train → the hostile one.
        stacks: vec![vec![0, 1], vec![2, 1]],
        runs: vec![
            run(100, 900, ThreadState::Sleeping, 0),
            run(900, 1100, ThreadState::Running, 1),
            run(1200, 1500, ThreadState::Running, 1),
            run(1500, 2000, ThreadState::DiskWait, 1),
        ],
        losses: Default::default(),
    };
    bytes.extend(encode_chunks(&samples, 100, 1).unwrap());
    TraceFile::from_bytes("h.gtrace", bytes).unwrap()
}

/// The boxes of the flame graph that draws `frame`: (data-share, title) of each.
fn boxes<'a>(html: &'a str, frame: &str) -> Vec<(f64, &'a str)> {
    html.split("<div class=\"fg-f")
        .skip(1)
        .filter(|b| b.contains(&format!("data-frame=\"{frame}\"")))
        .map(|b| {
            let share = b.split("data-share=\"").nth(1).unwrap().split('"').next().unwrap();
            let title = b.split("title=\"").nth(1).unwrap().split('"').next().unwrap();
            (share.parse().unwrap(), title)
        })
        .collect()
}

#[test]
fn host_samples_give_a_flame_graph_of_gpu_idle_time() {
    let mut report = analyze(&[trace_with_host_samples()], &Options::default()).unwrap();
    // A slow step whose idle time is the rank's (the flame graph of a step draws its view).
    let view = report.ranks[0].host.as_ref().unwrap().gpu_idle.clone().unwrap();
    assert_eq!(view.sampled_ns, 1800 * MS, "{view:?}");
    report.ranks[0].devices[0].steps.push(gputrace_analysis::StepReport {
        step: 7,
        duration_ns: 2300 * MS,
        host: Some(view),
        ..Default::default()
    });
    let html = Html::default().render(&Page::new(&report));
    // Kept to look at (target/tmp/flame.html).
    std::fs::write(std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("flame.html"), &html).unwrap();
    assert!(html.contains("<h2>Host stacks while the GPU was idle</h2>"));
    assert!(!html.contains("id=\"flame-none\""), "the graph, not the reason for none");
    assert_eq!(html.matches("<div class=\"flame\"").count(), 2, "the rank's graph and the step's");
    assert!(html.contains("data-step=\"7\""));
    // The loader's frame: 800 of 1,800 ms in both graphs, under `train` (all of it).
    let load = boxes(&html, "load (dataloader.py:631)");
    assert_eq!(load.len(), 2, "{load:?}");
    for (share, title) in &load {
        assert!((share - 800.0 / 1800.0).abs() < 1e-3, "{share}");
        assert!(title.contains("800.000 ms of GPU idle, 44.4%"), "{title}");
    }
    for (share, _) in boxes(&html, "train (train.py:57)") {
        assert!((share - 1.0).abs() < 1e-9);
    }
    // The hostile function name is shown escaped, in the box and on hover.
    let aug = boxes(&html, "&lt;i onmouseover=x()&gt;aug (train.py:12)");
    assert_eq!(aug.len(), 2, "escaped like every name");
    assert!((aug[0].0 - 1000.0 / 1800.0).abs() < 1e-3);
    assert!(!html.contains("<i onmouseover"));
}

#[test]
fn a_page_without_host_samples_says_why_it_has_no_flame_graph() {
    let trace = TraceFile::from_bytes("x.gtrace", {
        let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
        let name = w.intern("gemm");
        w.push(Event::Kernel(Kernel {
            start: Nanos(0),
            end: Nanos(100),
            device: DeviceId(0),
            context: ContextId(1),
            stream: StreamId(7),
            correlation: CorrelationId(0),
            name,
            ..Kernel::default()
        }))
        .unwrap();
        w.finish(Trailer::default()).unwrap()
    })
    .unwrap();
    let report = analyze(&[trace], &Options::default()).unwrap();
    let html = Html::default().render(&Page::new(&report));
    assert!(html.contains("id=\"flame-none\"") && html.contains("these traces have no host samples"));
    assert!(!html.contains("class=\"fg") && !html.contains("class=\"flame"), "no empty box");
}
