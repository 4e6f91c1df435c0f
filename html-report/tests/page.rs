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
        grid: [1; 3],
        block: [1; 3],
        static_shared_mem: 0,
        dynamic_shared_mem: 0,
        registers: 0,
        graph_id: 0,
        graph_node_id: 0,
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
