//! Where each GPU's time went: the analysis behind `gputrace report`.
//!
//! For every rank and device of one or more traces, the GPU timeline (all
//! streams merged) is split into compute, communication and transfer, with
//! exclusive attribution by precedence compute > communication > transfer >
//! idle, so that
//!
//! `compute + exposed communication + exposed transfer + idle = span`
//!
//! holds exactly, in integer nanoseconds. Idle time is explained from the
//! CPU side (host-bound, launch/dependency latency, synchronization), and
//! the numbers are turned into [`Finding`]s with a suggested next step.
//! `docs/metrics.md` defines every number and compares them with Holistic
//! Trace Analysis and TraceLens. [`Options::hta`] switches to HTA's own
//! definitions ([`HtaCompat`]: its last-step drop, link filter, µs rounding
//! and kernel types), for numbers identical to HTA's temporal breakdown.
//!
//! The analysis streams each file: the GPU events of a device are merged
//! in start order from the file's chunks and swept once, so memory follows
//! the number of tracks (plus one small record per idle gap), not events.
//!
//! ```
//! use gputrace_format::*;
//! use gputrace_analysis::{analyze, Options};
//!
//! let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default())?;
//! let gemm = w.intern("gemm");
//! let nccl = w.intern("ncclDevKernel_AllReduce_Sum_bf16_RING_LL");
//! let kernel = |start, end, stream, name| Event::Kernel(Kernel {
//!     start: Nanos(start), end: Nanos(end), device: DeviceId(0), context: ContextId(1),
//!     stream: StreamId(stream), correlation: CorrelationId(0), name, grid: [1; 3], block: [1; 3],
//!     static_shared_mem: 0, dynamic_shared_mem: 0, registers: 0, graph_id: 0, graph_node_id: 0,
//! });
//! w.push(kernel(0, 100, 7, gemm))?;      // compute [0, 100)
//! w.push(kernel(60, 150, 13, nccl))?;    // communication [60, 150): 40 ns hidden, 50 exposed
//! w.push(kernel(200, 250, 7, gemm))?;    // idle [150, 200)
//! let trace = TraceFile::from_bytes("doc.gtrace", w.finish(Trailer::default())?)?;
//!
//! let report = analyze(&[trace], &Options::default())?;
//! let d = &report.ranks[0].devices[0].time;
//! assert_eq!((d.span_ns, d.compute_ns, d.exposed_communication_ns, d.idle_ns), (250, 150, 50, 50));
//! assert_eq!(d.compute_ns + d.exposed_communication_ns + d.exposed_transfer_ns + d.idle_ns, d.span_ns);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod activity;
pub mod activity_view;
mod capture;
mod collectives;
mod damage;
mod error;
mod findings;
pub mod hardware;
pub mod host;
mod hta;
mod levers;
mod merge;
pub mod peaks;
pub mod productive;
mod rank;
mod report;
mod rule;
pub mod serving;
mod serving_findings;
mod steps;
pub mod sweep;
pub mod units;

pub use collectives::{counts_text, human_bytes, human_bytes_to, nccl_tests_factors, NcclTestsFactors, PEER_COPY, UNATTRIBUTED};
pub use damage::describe_losses;
pub use error::{AnalysisError, Result};
pub use findings::state_stake;
pub use gputrace_classify::{is_peer_copy, Category, Classifier, ClassifyError, Origin, Rule, RuleId, DEFAULT_RULES};
pub use hta::HtaCompat;
pub use levers::{CaptureLevers, ProfilerCost};
pub use peaks::{device_peak, DevicePeak, Precision};
pub use productive::{ModelFlops, ProductiveOptions, DEFAULT_NVML_WINDOW_NS};
pub use rank::{analyze_file, RankAnalysis};
pub use report::*;
pub use rule::{FindingRule, Value, Values};
pub use units::si;

use gputrace_format::TraceFile;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// What to analyze and how much to list.
#[derive(Clone, Debug)]
pub struct Options {
    /// Which kernels are communication.
    pub classifier: Classifier,
    /// Longest idle gaps listed per device.
    pub top_gaps: usize,
    /// Kernels listed in [`Report::top_kernels`].
    pub top_kernels: usize,
    /// Kernels shorter than this count as short (launch-bound signal).
    pub short_kernel_ns: u64,
    /// Gaps at least this long are pauses (checkpoint detection looks at them).
    pub long_pause_ns: u64,
    /// Price of one GPU-hour in US dollars, to price idle and exposed time.
    pub gpu_hour_cost: Option<f64>,
    /// Without `ProfilerStep#N` ranges, find steps from the repeating kernel pattern.
    pub infer_steps: bool,
    /// Files analyzed at once by [`analyze`] (each file is one thread's work); 0 means one
    /// per available core.
    pub threads: usize,
    /// HTA-compatible mode: numbers identical to Holistic Trace Analysis' temporal breakdown,
    /// not gputrace's definitions (see [`HtaCompat`]). `None` (the default): gputrace's own.
    pub hta: Option<HtaCompat>,
    /// Token counts, model FLOPs, peaks, GPU-Util's window and run records for the
    /// productive layer ([`Productive`]).
    pub productive: ProductiveOptions,
    /// Fill [`Report::classification`]: which rule classified how much kernel time.
    pub explain_classes: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            classifier: Classifier::default(),
            top_gaps: 5,
            top_kernels: 10,
            short_kernel_ns: 10_000,
            long_pause_ns: 50_000_000,
            gpu_hour_cost: None,
            infer_steps: true,
            threads: 0,
            hta: None,
            productive: ProductiveOptions::default(),
            explain_classes: false,
        }
    }
}

/// [`Report::classification`]: the kernels of `kernels` (name → count, total) by the rule
/// that classified them.
fn explain_classes<'a>(classifier: &Classifier, kernels: impl Iterator<Item = (&'a str, u64, u64)>) -> Vec<RuleUse> {
    let rules = classifier.rules();
    /// Kernels, names, total and the name with the most time (its total, the name).
    type Acc<'n> = (u64, u64, u64, Option<(u64, &'n str)>);
    // Per rule, then the row of no rule.
    let mut acc: Vec<Acc<'a>> = vec![(0, 0, 0, None); rules.len() + 1];
    for (name, count, total) in kernels {
        let i = classifier.rule_for(name).map_or(rules.len(), |r| usize::from(r.0));
        let a = &mut acc[i];
        a.0 += count;
        a.1 += 1;
        a.2 += total;
        if a.3
            .is_none_or(|(t, n)| (total, std::cmp::Reverse(name)) > (t, std::cmp::Reverse(n)))
        {
            a.3 = Some((total, name));
        }
    }
    acc.into_iter()
        .enumerate()
        .map(|(i, (kernels, kernel_names, total_ns, best))| {
            let example = best.map(|(_, n)| n.to_string());
            match rules.get(i) {
                Some(r) => RuleUse {
                    library: Some(r.library.clone()),
                    pattern: Some(r.pattern.clone()),
                    category: r.category,
                    operation: r.operation.clone(),
                    source: r.source.clone(),
                    origin: r.origin.to_string(),
                    kernels,
                    kernel_names,
                    total_ns,
                    example,
                },
                None => RuleUse {
                    library: None,
                    pattern: None,
                    category: Category::Compute,
                    operation: None,
                    source: "no rule matched: compute".into(),
                    origin: "-".into(),
                    kernels,
                    kernel_names,
                    total_ns,
                    example,
                },
            }
        })
        .collect()
}

/// Analyze traces, one per rank (any order; the report is sorted by rank).
/// Files are analyzed in parallel on up to `opts.threads` threads; a file
/// without a rank in its header gets its position in `traces`.
pub fn analyze(traces: &[TraceFile], opts: &Options) -> Result<Report> {
    // A server's scraped metrics (a launcher trace) are no rank: they feed the serving section.
    let (servers, gpu): (Vec<&TraceFile>, Vec<&TraceFile>) = traces.iter().partition(|t| serving::is_serving_trace(t));
    if servers.is_empty() {
        let mut report = analyze_ranks(&gpu, opts)?;
        // A server of one's own that marked its requests (gputrace.request) serves too.
        report.serving.extend(serving::marks_serving(&gpu, opts.gpu_hour_cost));
        for s in &report.serving {
            report.findings.extend(serving_findings::serving_findings(s));
        }
        return Ok(report);
    }
    let mut report = match gpu.is_empty() {
        true => Report::from_ranks(Vec::new(), opts),
        false => analyze_ranks(&gpu, opts)?,
    };
    report.serving = serving::analyze_serving(&servers, &gpu, opts.gpu_hour_cost);
    for s in &report.serving {
        report.findings.extend(serving_findings::serving_findings(s));
    }
    Ok(report)
}

fn analyze_ranks(traces: &[&TraceFile], opts: &Options) -> Result<Report> {
    if traces.is_empty() {
        return Err(AnalysisError::NoTraces);
    }
    let threads = match opts.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .min(traces.len());
    let mut results: Vec<Option<Result<RankAnalysis>>> = (0..traces.len()).map(|_| None).collect();
    if threads <= 1 {
        for (i, t) in traces.iter().enumerate() {
            results[i] = Some(analyze_file(t, i as u32, opts));
        }
    } else {
        // Workers take the next file index; each result goes back to its own slot.
        let next = AtomicUsize::new(0);
        let slots: Vec<Mutex<Option<Result<RankAnalysis>>>> = results.into_iter().map(Mutex::new).collect();
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(t) = traces.get(i) else { break };
                    let r = analyze_file(t, i as u32, opts);
                    *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                });
            }
        });
        results = slots
            .into_iter()
            .map(|m| m.into_inner().unwrap_or_else(|e| e.into_inner()))
            .collect();
    }
    let ranks = results
        .into_iter()
        .map(|r| r.expect("every index was taken by a worker"))
        .collect::<Result<Vec<_>>>()?;
    Ok(Report::from_ranks(ranks, opts))
}

impl Report {
    /// Combine per-rank analyses: totals, top kernels, copies, findings, cost.
    pub fn from_ranks(mut ranks: Vec<RankAnalysis>, opts: &Options) -> Report {
        ranks.sort_by(|a, b| (a.report.rank, &a.report.file).cmp(&(b.report.rank, &b.report.file)));
        let mut totals = Totals {
            ranks: ranks.len() as u64,
            ..Totals::default()
        };
        let mut kernels: BTreeMap<&str, (Category, u64, u64)> = BTreeMap::new();
        let mut copies: BTreeMap<(String, bool), rank::CopyAgg> = BTreeMap::new();
        for r in &ranks {
            for d in &r.report.devices {
                totals.active_devices += u64::from(d.first_ns.is_some());
                totals.time.add(&d.time);
                totals.idle_causes.add(&d.idle_causes);
                totals.kernels += d.kernels;
                totals.short_kernels += d.short_kernels;
                if let Some(w) = &d.process_window {
                    totals.startup_idle_ns += w.startup_idle_ns;
                    totals.teardown_idle_ns += w.teardown_idle_ns;
                }
            }
            for (name, cat, count, total) in &r.kernels {
                let e = kernels.entry(name.as_str()).or_insert((*cat, 0, 0));
                e.1 += count;
                e.2 += total;
            }
            for (k, a) in &r.copies {
                let e = copies.entry(k.clone()).or_default();
                e.count += a.count;
                e.bytes += a.bytes;
                e.total += a.total;
            }
        }
        let classification = opts
            .explain_classes
            .then(|| explain_classes(&opts.classifier, kernels.iter().map(|(n, k)| (*n, k.1, k.2))));
        let all_kernel_ns: u64 = kernels.values().map(|k| k.2).sum();
        let mut top: Vec<KernelStat> = kernels
            .into_iter()
            .map(|(name, (category, count, total_ns))| KernelStat {
                name: name.to_string(),
                category,
                count,
                total_ns,
                mean_ns: total_ns / count.max(1),
                share: if all_kernel_ns == 0 {
                    0.0
                } else {
                    total_ns as f64 / all_kernel_ns as f64
                },
            })
            .collect();
        top.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.name.cmp(&b.name)));
        top.truncate(opts.top_kernels);
        let copies = copies
            .into_iter()
            .map(|((kind, pageable), a)| CopyStat {
                kind,
                pageable,
                count: a.count,
                bytes: a.bytes,
                total_ns: a.total,
                achieved_gbps: if a.total == 0 { 0.0 } else { a.bytes as f64 / a.total as f64 },
            })
            .collect();
        let cost = opts.gpu_hour_cost.map(|usd| {
            let price = |ns: u64| ns as f64 / 3.6e12 * usd;
            let c = Cost {
                usd_per_gpu_hour: usd,
                span_usd: price(totals.time.span_ns),
                idle_usd: price(totals.time.idle_ns),
                exposed_communication_usd: price(totals.time.exposed_communication_ns),
                exposed_transfer_usd: price(totals.time.exposed_transfer_ns),
                startup_teardown_usd: price(totals.startup_idle_ns + totals.teardown_idle_ns),
                not_compute_usd: 0.0,
            };
            Cost {
                not_compute_usd: c.idle_usd + c.exposed_communication_usd + c.exposed_transfer_usd + c.startup_teardown_usd,
                ..c
            }
        });
        let (communicators, collectives) =
            collectives::merge(ranks.iter().map(|r| (r.report.rank, &r.communicators[..], &r.collectives[..])));
        let ranks: Vec<RankReport> = ranks.into_iter().map(|r| r.report).collect();
        let productive = productive::job_productive(&ranks, &opts.productive, opts.gpu_hour_cost);
        let lossy = ranks.iter().any(|r| r.losses.any());
        let mut report = Report {
            schema_version: SCHEMA_VERSION,
            ranks,
            totals,
            top_kernels: top,
            copies,
            findings: Vec::new(),
            cost,
            lossy,
            communication_patterns: opts.classifier.patterns(),
            communicators,
            collectives,
            hta_compat: opts.hta,
            productive,
            classification,
            serving: Vec::new(),
        };
        report.findings = findings::findings(&report, opts);
        report
    }
}
