//! Prometheus metrics of gputrace reports: the same classified GPU time `gputrace report`
//! computes, as counters per rank and GPU, for `gputrace metrics`, the live endpoint of
//! `gputrace run --metrics` and node_exporter textfiles.
//!
//! [`report_exposition`] is a pure function of a [`Report`] (and the traces' event counts);
//! [`serve`] is the small HTTP endpoint that serves whatever exposition it is handed. Every
//! time is in seconds (`_seconds_total`), from the report's integer nanoseconds; the names,
//! labels and what each family means are listed in `docs/always-on.md`.
#![forbid(unsafe_code)]

pub mod exposition;
pub mod serve;
pub mod serving;

pub use exposition::{CounterMemory, Exposition, Labels, MetricType};

use gputrace_analysis::{DeviceReport, RankReport, Report};
use gputrace_format::{EventKind, TraceFile};
use std::collections::BTreeMap;

/// What the exposition adds to the report.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The `job` label on every series (absent: no `job` label, so the scraper's own
    /// `job` applies).
    pub job: Option<String>,
}

/// Event counts of each trace by file name, as [`RankReport::file`] names it.
pub type EventCounts = BTreeMap<String, BTreeMap<EventKind, u64>>;

/// The event counts of `traces`, keyed as the report keys its ranks.
pub fn event_counts(traces: &[TraceFile]) -> EventCounts {
    traces.iter().map(|t| (t.path().display().to_string(), t.event_counts())).collect()
}

const SECONDS: f64 = 1e9;

fn s(ns: u64) -> f64 {
    ns as f64 / SECONDS
}

/// The labels every series of rank `r` carries.
fn rank_labels(opts: &Options, r: &RankReport) -> Labels {
    let mut l = Labels::new();
    if let Some(job) = &opts.job {
        l = l.with("job", job);
    }
    l = l.with("host", &r.hostname).with("rank", r.rank);
    if let Some(local) = r.local_rank {
        l = l.with("local_rank", local);
    }
    l
}

/// The exposition of `report`: per GPU, its time by exclusive category (the four tile
/// the span, as in `report`), by overlapping activity, idle by cause, exposed
/// communication by library and operation, work counts and hardware counters; per rank,
/// events by kind, steps, tokens, samples, losses and whether the trace is finished.
pub fn report_exposition(report: &Report, events: &EventCounts, opts: &Options) -> Exposition {
    use MetricType::{Counter, Gauge};
    let mut e = Exposition::new();
    for r in &report.ranks {
        let rank = rank_labels(opts, r);
        // Duty-cycled capture: the traced share of the wall time, to extrapolate by.
        let traced_share = r.duty_cycle.as_ref().map(|c| c.duty_ratio).filter(|&x| x > 0.0);
        for d in &r.devices {
            let l = rank.with("gpu", d.device);
            device(&mut e, &l, d);
            if let Some(share) = traced_share {
                for (category, ns) in tiles(d) {
                    e.add(
                        "gputrace_gpu_extrapolated_seconds_total",
                        Counter,
                        "Duty-cycled capture only: gputrace_gpu_seconds_total divided by the traced share of the wall \
                         time (gputrace_capture_duty_ratio), an estimate of the whole run's time by category.",
                        &l.with("category", category),
                        s(ns) / share,
                    );
                }
            }
        }
        if let Some(c) = &r.duty_cycle {
            e.add(
                "gputrace_capture_windows_total",
                Counter,
                "Duty-cycled capture: capture windows in the rank's trace.",
                &rank,
                c.windows as f64,
            );
            e.add(
                "gputrace_capture_traced_seconds_total",
                Counter,
                "Duty-cycled capture: time inside the capture windows (the GPU time series cover only this).",
                &rank,
                s(c.traced_ns),
            );
            e.add(
                "gputrace_capture_wall_seconds_total",
                Counter,
                "Duty-cycled capture: wall time the rank's trace covers.",
                &rank,
                s(c.wall_ns),
            );
            e.add(
                "gputrace_capture_duty_ratio",
                Gauge,
                "Duty-cycled capture: traced time / wall time.",
                &rank,
                c.duty_ratio,
            );
        }
        if let Some(counts) = events.get(&r.file) {
            for (kind, n) in counts {
                e.add(
                    "gputrace_events_total",
                    Counter,
                    "Events in the rank's trace, by kind.",
                    &rank.with("kind", kind.name()),
                    *n as f64,
                );
            }
        }
        let p = &r.productive;
        e.add(
            "gputrace_steps_total",
            Counter,
            "Training (or serving) steps the rank completed.",
            &rank,
            p.steps as f64,
        );
        e.add(
            "gputrace_step_seconds_total",
            Counter,
            "Wall time inside the rank's steps.",
            &rank,
            p.time_in_steps_s,
        );
        if let Some(t) = p.tokens {
            e.add("gputrace_tokens_total", Counter, "Tokens the rank processed.", &rank, t as f64);
        }
        if let Some(n) = p.samples {
            e.add("gputrace_samples_total", Counter, "Samples the rank processed.", &rank, n as f64);
        }
        for (source, n) in &r.losses.lost_records {
            e.add(
                "gputrace_records_lost_total",
                Counter,
                "Records the capture lost (dropped by CUPTI, buffer pool exhausted, ...), by source.",
                &rank.with("source", source),
                *n as f64,
            );
        }
        e.add(
            "gputrace_trace_finished",
            Gauge,
            "1 once the rank's trace is complete (its process ended and the writer finished), else 0.",
            &rank,
            if r.losses.trailer_missing { 0.0 } else { 1.0 },
        );
        e.add(
            "gputrace_trace_lossy",
            Gauge,
            "1 when the rank's numbers undercount what ran (records lost, a damaged or cut-off file, no trailer), else 0.",
            &rank,
            if r.losses.any() { 1.0 } else { 0.0 },
        );
        e.add(
            "gputrace_trace_damaged_bytes",
            Gauge,
            "Bytes at the end of the rank's trace file that could not be read (damaged or cut off), 0 when whole.",
            &rank,
            r.losses.damaged_bytes as f64,
        );
    }
    serving::serving_families(&mut e, report, opts);
    e
}

/// The report's exclusive split of a device's span, by category label.
fn tiles(d: &DeviceReport) -> [(&'static str, u64); 4] {
    [
        ("compute", d.time.compute_ns),
        ("communication_exposed", d.time.exposed_communication_ns),
        ("transfer_exposed", d.time.exposed_transfer_ns),
        ("idle", d.time.idle_ns),
    ]
}

fn device(e: &mut Exposition, l: &Labels, d: &DeviceReport) {
    use MetricType::Counter;
    const TILES: &str = "GPU time by exclusive category (compute, then exposed communication, then exposed transfer, \
                         then idle): the four add up to gputrace_gpu_span_seconds_total.";
    for (category, ns) in tiles(d) {
        e.add("gputrace_gpu_seconds_total", Counter, TILES, &l.with("category", category), s(ns));
    }
    e.add(
        "gputrace_gpu_span_seconds_total",
        Counter,
        "Time from the GPU's first work to its last work in the trace.",
        l,
        s(d.time.span_ns),
    );
    for (category, ns) in [
        ("compute", d.time.compute_ns),
        ("communication", d.time.communication_ns),
        ("transfer", d.time.transfer_ns),
    ] {
        e.add(
            "gputrace_gpu_active_seconds_total",
            Counter,
            "Time the GPU ran work of each category (categories overlap).",
            &l.with("category", category),
            s(ns),
        );
    }
    let c = &d.idle_causes;
    for (cause, ns) in [
        ("host_bound", c.host_bound_ns),
        ("launch_latency", c.launch_latency_ns),
        ("synchronization", c.synchronization_ns),
        ("unattributed", c.unattributed_ns),
    ] {
        e.add(
            "gputrace_gpu_idle_seconds_total",
            Counter,
            "Idle GPU time by cause; the causes add up to the idle category.",
            &l.with("cause", cause),
            s(ns),
        );
    }
    for (library, ops) in &d.time.exposed_communication_by_library_ns {
        for (op, ns) in ops {
            e.add(
                "gputrace_gpu_exposed_communication_seconds_total",
                Counter,
                "Exposed communication time by library and operation; adds up to the communication_exposed category.",
                &l.with("library", library).with("operation", op),
                s(*ns),
            );
        }
    }
    e.add("gputrace_gpu_kernels_total", Counter, "Kernels the GPU ran.", l, d.kernels as f64);
    e.add(
        "gputrace_gpu_copies_total",
        Counter,
        "Memory copies on the GPU.",
        l,
        d.copies as f64,
    );
    e.add("gputrace_gpu_memsets_total", Counter, "Memsets on the GPU.", l, d.memsets as f64);
    if let Some(hw) = &d.hardware {
        if let Some(j) = hw.energy_j {
            e.add(
                "gputrace_gpu_energy_joules_total",
                Counter,
                "Energy the GPU used over its NVML samples.",
                l,
                j,
            );
        }
        for (kind, n) in [("uncorrected", hw.ecc_uncorrected_errors), ("corrected", hw.ecc_corrected_errors)] {
            if let Some(n) = n {
                e.add(
                    "gputrace_gpu_ecc_errors_total",
                    Counter,
                    "ECC memory errors NVML counted during the run, by type.",
                    &l.with("type", kind),
                    n as f64,
                );
            }
        }
        // Only XIDs seen: without one, a 0 could not tell "none" from "not monitored".
        if hw.xid_error_count > 0 {
            e.add(
                "gputrace_gpu_xid_errors_total",
                Counter,
                "XID critical errors NVML reported for the GPU.",
                l,
                hw.xid_error_count as f64,
            );
        }
        for (reason, ns) in &hw.throttle_by_reason_ns {
            e.add(
                "gputrace_gpu_throttled_seconds_total",
                Counter,
                "Time an NVML slowdown reason was set, by reason.",
                &l.with("reason", reason),
                s(*ns),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gputrace_analysis::{analyze, Options as AnalysisOptions};
    use gputrace_format::*;

    fn trace() -> TraceFile {
        let mut h = Header {
            hostname: "node\"1".into(),
            ..Header::default()
        };
        h.rank.rank = Some(Rank(3));
        h.rank.local_rank = Some(1);
        let mut w = TraceWriter::new(Vec::new(), &h, WriterOptions::default()).unwrap();
        let gemm = w.intern("gemm");
        let ar = w.intern("ncclDevKernel_AllReduce_Sum_f32_RING_LL");
        for (i, (start, end, name)) in [(0, 100, gemm), (150, 300, ar), (250, 400, gemm)].into_iter().enumerate() {
            w.push(Event::Kernel(Kernel {
                start: Nanos(start),
                end: Nanos(end),
                device: DeviceId(0),
                context: ContextId(1),
                stream: StreamId(7 + i as u32 % 2),
                correlation: CorrelationId(i as u32 + 1),
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
        }
        TraceFile::from_bytes("r3.gtrace", w.finish(Trailer::default()).unwrap()).unwrap()
    }

    fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
        let line = format!("{name}{{{labels}}} ");
        text.lines().find_map(|l| l.strip_prefix(&line)).map(|v| v.parse().unwrap())
    }

    #[test]
    fn the_tiles_are_the_reports_and_labels_are_escaped() {
        let traces = vec![trace()];
        let report = analyze(&traces, &AnalysisOptions::default()).unwrap();
        let d = &report.ranks[0].devices[0];
        let text = report_exposition(&report, &event_counts(&traces), &Options { job: Some("j".into()) }).render();
        let base = r#"job="j",host="node\"1",rank="3",local_rank="1",gpu="0""#;
        let get = |name: &str, extra: &str| sample(&text, name, &format!("{base}{extra}"));
        assert_eq!(
            get("gputrace_gpu_seconds_total", r#",category="compute""#),
            Some(d.time.compute_ns as f64 / 1e9)
        );
        assert_eq!(d.time.compute_ns, 250, "0-100 and 250-400");
        assert_eq!(
            get("gputrace_gpu_seconds_total", r#",category="communication_exposed""#),
            Some(100e-9),
            "150-250"
        );
        assert_eq!(get("gputrace_gpu_seconds_total", r#",category="idle""#), Some(50e-9));
        assert_eq!(get("gputrace_gpu_span_seconds_total", ""), Some(400e-9));
        assert_eq!(get("gputrace_gpu_kernels_total", ""), Some(3.0));
        assert_eq!(
            get(
                "gputrace_gpu_exposed_communication_seconds_total",
                r#",library="NCCL",operation="all_reduce""#
            ),
            Some(100e-9)
        );
        let rank = r#"job="j",host="node\"1",rank="3",local_rank="1""#;
        assert_eq!(
            sample(&text, "gputrace_events_total", &format!("{rank},kind=\"kernel\"")),
            Some(3.0)
        );
        assert_eq!(sample(&text, "gputrace_trace_finished", rank), Some(1.0));
        assert_eq!(text.matches("# TYPE gputrace_gpu_seconds_total counter").count(), 1);
        assert!(
            !text.contains("gputrace_capture_") && !text.contains("extrapolated"),
            "not duty-cycled"
        );
    }

    #[test]
    fn duty_cycled_traces_say_so_and_extrapolate() {
        let mut h = Header::default();
        h.extra.insert("capture.duty".into(), "1s/4s".into());
        let mut w = TraceWriter::new(Vec::new(), &h, WriterOptions::default()).unwrap();
        let gemm = w.intern("gemm");
        for (i, (start, end)) in [(1000, 1600), (5000, 5400)].into_iter().enumerate() {
            w.push(Event::Kernel(Kernel {
                start: Nanos(start),
                end: Nanos(end),
                device: DeviceId(0),
                context: ContextId(1),
                stream: StreamId(7),
                correlation: CorrelationId(i as u32 + 1),
                name: gemm,
                ..Kernel::default()
            }))
            .unwrap();
        }
        w.add_capture_windows(&[
            CaptureWindow {
                start: Nanos(1000),
                end: Nanos(2000),
            },
            CaptureWindow {
                start: Nanos(5000),
                end: Nanos(6000),
            },
        ])
        .unwrap();
        let traces = vec![TraceFile::from_bytes("duty.gtrace", w.finish(Trailer::default()).unwrap()).unwrap()];
        let report = analyze(&traces, &AnalysisOptions::default()).unwrap();
        let duty = report.ranks[0].duty_cycle.clone().expect("duty-cycled");
        let text = report_exposition(&report, &event_counts(&traces), &Options::default()).render();
        let base = r#"host="",rank="0""#;
        assert_eq!(sample(&text, "gputrace_capture_windows_total", base), Some(2.0));
        assert_eq!(
            sample(&text, "gputrace_capture_traced_seconds_total", base),
            Some(duty.traced_ns as f64 / 1e9)
        );
        assert_eq!(sample(&text, "gputrace_capture_duty_ratio", base), Some(duty.duty_ratio));
        let compute = report.ranks[0].devices[0].time.compute_ns as f64 / 1e9;
        assert_eq!(compute, 1000e-9);
        let extrapolated = sample(
            &text,
            "gputrace_gpu_extrapolated_seconds_total",
            &format!("{base},gpu=\"0\",category=\"compute\""),
        )
        .unwrap();
        assert!((extrapolated - compute / duty.duty_ratio).abs() < 1e-15, "{extrapolated}");
    }
}
