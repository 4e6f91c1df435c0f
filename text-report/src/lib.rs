//! The human-readable `gputrace report`: aligned tables of where each GPU's time went,
//! then the findings. The caller decides on color (a terminal, `NO_COLOR`); this crate
//! only formats a finished [`Report`] (the HTML page is `gputrace-html`, the JSON the
//! report's own serialization).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod activity;
mod host;
mod serving;

use gputrace_analysis::*;
use gputrace_format::Nanos;
use std::fmt::Write;

struct Style {
    color: bool,
}

impl Style {
    fn paint(&self, code: &str, s: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_string()
        }
    }
    fn heading(&self, s: &str) -> String {
        self.paint("1", s)
    }
    fn severity(&self, sev: Severity) -> String {
        match sev {
            Severity::High => self.paint("1;31", "HIGH  "),
            Severity::Medium => self.paint("33", "MEDIUM"),
            Severity::Low => self.paint("36", "LOW   "),
            Severity::Info => self.paint("2", "INFO  "),
        }
    }
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1}%", 100.0 * part as f64 / whole as f64)
    }
}

fn ns(v: u64) -> String {
    Nanos(v).to_string()
}

/// A name (kernel, marker, host...) for a column: control characters escaped
/// (`gputrace_format::text`), then cut to `max` characters.
fn truncate(s: &str, max: usize) -> String {
    let s = gputrace_format::text::escape(s);
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max.saturating_sub(1)).collect();
        t.push('…');
        t
    }
}

/// The banner of a duty-cycled rank.
fn duty_line(rank: u32, d: &DutyCycle) -> String {
    format!(
        "rank {rank}: duty-cycled capture{}: {} window(s), {} traced of {} wall ({:.1}%); span and idle count traced time only \
         (the time between windows was not watched)",
        if d.schedule.is_empty() {
            String::new()
        } else {
            format!(" ({})", d.schedule)
        },
        d.windows,
        ns(d.traced_ns),
        ns(d.wall_ns),
        100.0 * d.duty_ratio
    )
}

/// Render a report as text tables. `color` adds ANSI styling.
pub fn render_text(r: &Report, color: bool) -> String {
    let st = Style { color };
    let mut o = String::new();
    render_title(&mut o, r, &st);
    render_hta_banner(&mut o, r, &st);
    render_breakdown(&mut o, r, &st);
    activity::render_text(&mut o, r, color);
    // A serving job gets its serving section instead of training steps.
    if r.serving.is_empty() {
        render_productive(&mut o, r, &st);
    } else {
        serving::render_serving(&mut o, &r.serving, &|t| st.heading(t));
    }
    render_hardware(&mut o, r, &st);
    render_gaps(&mut o, r, &st);
    if let Some(host) = host::render_section(r) {
        let _ = write!(o, "\n{}\n{host}", st.heading("Host during GPU idle (host samples; docs/host.md)"));
    }
    if r.serving.is_empty() {
        render_steps(&mut o, r, &st);
    }
    render_top_kernels(&mut o, r, &st);
    render_copies(&mut o, r, &st);
    render_collectives(&mut o, r, &st);
    render_comm_libraries(&mut o, r, &st);
    render_classification(&mut o, r, &st);
    render_losses(&mut o, r, &st);
    render_profiler_overhead(&mut o, r, &st);
    render_graph_level(&mut o, r, &st);
    render_not_imported(&mut o, r);
    render_findings(&mut o, r, &st);
    render_cost(&mut o, r, &st);
    // Names are escaped where they are written; this catches any other text
    // from a trace, keeping the layout and (on a terminal) our own colours.
    gputrace_format::text::escape_output(&o, color).into_owned()
}

/// The title, the loss warning, the job's headline and the duty-cycle banners.
fn render_title(o: &mut String, r: &Report, st: &Style) {
    // A GPU counts when it ran something, not when a header lists it.
    let devices = r.totals.active_devices;
    let listed: usize = r.ranks.iter().map(|rk| rk.devices.len()).sum();
    let idle_listed = listed.saturating_sub(devices as usize);
    let synthetic = r.ranks.iter().any(|rk| rk.producer == "synthetic");
    let _ = writeln!(
        o,
        "{}",
        st.heading(&format!(
            "gputrace report: {} rank(s), {} GPU(s){}{}",
            r.ranks.len(),
            devices,
            if idle_listed > 0 {
                format!(" ({idle_listed} more listed without activity)")
            } else {
                String::new()
            },
            if synthetic {
                " (synthetic data, not a GPU measurement)"
            } else {
                ""
            }
        ))
    );
    if r.lossy {
        let _ = writeln!(
            o,
            "{}",
            st.paint(
                "1;31",
                "WARNING: the trace lost data; every number below describes what was recorded (see Losses)."
            )
        );
    }

    // The job's headline: right after the title (after the loss warning, which must come first).
    if r.serving.is_empty() {
        let _ = writeln!(o, "{}", headline(&r.productive));
    }
    for rk in &r.ranks {
        if let Some(d) = &rk.duty_cycle {
            let _ = writeln!(o, "{}", st.paint("1;33", &duty_line(rk.rank, d)));
        }
    }
}

/// In HTA-compatible mode: what it changed, job-wide and per rank.
fn render_hta_banner(o: &mut String, r: &Report, st: &Style) {
    if let Some(h) = &r.hta_compat {
        let _ = writeln!(
            o,
            "{}",
            st.paint(
                "1;33",
                &format!(
                    "HTA-compatible mode ({}, {}, {}): span, compute and idle are Holistic Trace Analysis' \
                     temporal breakdown (kernel_time, compute_time, idle_time; non-compute = exp.comm + exp.xfer), \
                     not gputrace's definitions.",
                    if h.drop_last_step {
                        "last profiler step dropped"
                    } else {
                        "last profiler step included"
                    },
                    if h.linked_only {
                        "unlinked GPU events dropped"
                    } else {
                        "unlinked GPU events kept"
                    },
                    if h.round_to_us { "µs inward rounding" } else { "no rounding" },
                )
            )
        );
        for rk in &r.ranks {
            let Some(x) = &rk.hta else { continue };
            let mut parts = Vec::new();
            if !x.step_filter {
                parts.push("fewer than two ProfilerStep names: nothing filtered (as HTA)".to_string());
            }
            if let (Some(step), Some(at)) = (x.last_step, x.last_step_start_ns) {
                parts.push(format!("last step ProfilerStep#{step} starts at {}", ns(at)));
            }
            if x.dropped_last_step_events > 0 {
                parts.push(format!("{} GPU events of the last step left out", x.dropped_last_step_events));
            }
            if x.dropped_unlinked_events > 0 {
                parts.push(format!("{} GPU events without a CPU call left out", x.dropped_unlinked_events));
            }
            if x.negative_after_rounding > 0 {
                parts.push(format!(
                    "{} events rounded to −1 µs (HTA subtracts them from busy time; here they count 0)",
                    x.negative_after_rounding
                ));
            }
            let _ = writeln!(o, "  rank {}: {}", rk.rank, parts.join("; "));
        }
    }
}

/// Where the GPU time went: per device, all devices, and the causes of idle.
fn render_breakdown(o: &mut String, r: &Report, st: &Style) {
    let _ = writeln!(
        o,
        "\n{}",
        st.heading("Where the GPU time went (span: first to last GPU activity, all streams merged)")
    );
    let _ = writeln!(
        o,
        "{:>5} {:>4}  {:>11}  {:>8}  {:>8}  {:>8}  {:>8}  {:>10}  {:>10}",
        "rank", "gpu", "span", "compute", "exp.comm", "exp.xfer", "idle", "comm hid.", "xfer hid."
    );
    // Devices a header lists but that ran nothing get one line below, not a row each.
    let mut without_work = 0;
    for rk in &r.ranks {
        for d in &rk.devices {
            if d.first_ns.is_none() {
                without_work += 1;
                continue;
            }
            let _ = writeln!(
                o,
                "{:>5} {:>4}  {:>11}  {:>8}  {:>8}  {:>8}  {:>8}  {:>10}  {:>10}",
                rk.rank,
                d.device,
                ns(d.time.span_ns),
                pct(d.time.compute_ns, d.time.span_ns),
                pct(d.time.exposed_communication_ns, d.time.span_ns),
                pct(d.time.exposed_transfer_ns, d.time.span_ns),
                pct(d.time.idle_ns, d.time.span_ns),
                pct(d.overlap.communication_hidden_ns, d.time.communication_ns),
                pct(d.overlap.transfer_hidden_ns, d.time.transfer_ns),
            );
        }
    }
    let t = &r.totals;
    let _ = writeln!(
        o,
        "{:>10}  {:>11}  {:>8}  {:>8}  {:>8}  {:>8}  {:>10}  {:>10}",
        "all",
        ns(t.time.span_ns),
        pct(t.time.compute_ns, t.time.span_ns),
        pct(t.time.exposed_communication_ns, t.time.span_ns),
        pct(t.time.exposed_transfer_ns, t.time.span_ns),
        pct(t.time.idle_ns, t.time.span_ns),
        pct(t.time.communication_ns - t.time.exposed_communication_ns, t.time.communication_ns),
        pct(t.time.transfer_ns - t.time.exposed_transfer_ns, t.time.transfer_ns),
    );
    if without_work > 0 {
        let _ = writeln!(
            o,
            "({without_work} more GPU(s) listed in the trace headers ran no kernel, copy or memset)"
        );
    }
    let c = &t.idle_causes;
    let _ = writeln!(
        o,
        "idle {} in {} gaps: host-bound {}, launch/dependency latency {}, synchronization {}, unattributed {}",
        ns(t.time.idle_ns),
        c.gaps,
        pct(c.host_bound_ns, t.time.idle_ns),
        pct(c.launch_latency_ns, t.time.idle_ns),
        pct(c.synchronization_ns, t.time.idle_ns),
        pct(c.unattributed_ns, t.time.idle_ns)
    );
    if t.startup_idle_ns + t.teardown_idle_ns > 0 {
        let _ = writeln!(
            o,
            "outside the span (process window): startup idle {}, teardown idle {}",
            ns(t.startup_idle_ns),
            ns(t.teardown_idle_ns)
        );
    }
}

/// The longest idle gaps over all devices.
fn render_gaps(o: &mut String, r: &Report, st: &Style) {
    let mut gaps: Vec<(u32, u32, &GapReport)> = r
        .ranks
        .iter()
        .flat_map(|rk| {
            rk.devices
                .iter()
                .flat_map(move |d| d.longest_gaps.iter().map(move |g| (rk.rank, d.device, g)))
        })
        .collect();
    gaps.sort_by_key(|(rank, dev, g)| (std::cmp::Reverse(g.duration_ns), *rank, *dev));
    gaps.truncate(10);
    if !gaps.is_empty() {
        let _ = writeln!(o, "\n{}", st.heading("Longest idle gaps"));
        let _ = writeln!(
            o,
            "{:>5} {:>4}  {:>11}  {:<26} {:>5}  {:<28} CPU was in",
            "rank", "gpu", "idle", "cause", "step", "next work"
        );
        for (rank, dev, g) in gaps {
            let cpu: Vec<String> = g
                .cpu_activity
                .iter()
                .map(|a| format!("{} ({})", truncate(&a.name, 32), ns(a.overlap_ns)))
                .collect();
            let _ = writeln!(
                o,
                "{:>5} {:>4}  {:>11}  {:<26} {:>5}  {:<28} {}",
                rank,
                dev,
                ns(g.duration_ns),
                g.cause.name(),
                g.step.map_or("-".into(), |s| s.to_string()),
                truncate(&g.next_work, 28),
                if cpu.is_empty() { "-".to_string() } else { cpu.join(", ") }
            );
            if let Some(h) = &g.host {
                let _ = writeln!(o, "{:>13}host: {}", "", gputrace_analysis::host::view_line(h));
            }
        }
    }
}

/// The kernels with the most time, summed over ranks.
fn render_top_kernels(o: &mut String, r: &Report, st: &Style) {
    if !r.top_kernels.is_empty() {
        let _ = writeln!(o, "\n{}", st.heading("Top kernels (summed over ranks)"));
        let _ = writeln!(
            o,
            "{:>11}  {:>7}  {:>9}  {:>11}  {:<6} name",
            "time", "share", "count", "mean", "kind"
        );
        for k in &r.top_kernels {
            let _ = writeln!(
                o,
                "{:>11}  {:>6.1}%  {:>9}  {:>11}  {:<6} {}",
                ns(k.total_ns),
                100.0 * k.share,
                k.count,
                ns(k.mean_ns),
                if k.category == gputrace_analysis::Category::Communication {
                    "comm"
                } else {
                    "comp"
                },
                truncate(&k.name, 90)
            );
        }
    }
}

/// Copies and memsets by kind.
fn render_copies(o: &mut String, r: &Report, st: &Style) {
    if !r.copies.is_empty() {
        let _ = writeln!(o, "\n{}", st.heading("Copies and memsets"));
        let _ = writeln!(
            o,
            "{:<8} {:<9} {:>9}  {:>14}  {:>11}  {:>10}",
            "kind", "host mem", "count", "bytes", "time", "GB/s"
        );
        for c in &r.copies {
            let _ = writeln!(
                o,
                "{:<8} {:<9} {:>9}  {:>14}  {:>11}  {:>10.2}",
                c.kind,
                if c.pageable { "pageable" } else { "-" },
                c.count,
                c.bytes,
                ns(c.total_ns),
                c.achieved_gbps
            );
        }
    }
}

/// What each lossy rank lost.
fn render_losses(o: &mut String, r: &Report, st: &Style) {
    if r.lossy {
        let _ = writeln!(o, "\n{}", st.heading("Losses"));
        for rk in r.ranks.iter().filter(|rk| rk.losses.any()) {
            let l = &rk.losses;
            let mut parts: Vec<String> = l
                .lost_records
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(k, n)| format!("{n} {k}"))
                .collect();
            if l.trailer_missing {
                parts.push("no trailer (the writer did not finish)".into());
            }
            if let Some(d) = &l.damage {
                parts.push(format!("damaged {d} ({} bytes unread)", l.damaged_bytes));
            }
            if let Some(h) = &l.host_samples_unwritten {
                parts.push(format!("{} (run record {})", h.what, h.run_record));
            }
            let _ = writeln!(o, "rank {}: {}", rk.rank, parts.join("; "));
        }
    }
}

/// CUPTI's own overhead records and the profiler's cost, per rank.
fn render_profiler_overhead(o: &mut String, r: &Report, st: &Style) {
    let cost = |rk: &gputrace_analysis::RankReport| rk.capture_levers.as_ref().and_then(|l| l.profiler_cost.clone());
    if r.ranks.iter().any(|rk| !rk.profiler_overhead.is_empty() || cost(rk).is_some()) {
        let _ = writeln!(o, "\n{}", st.heading("Profiler overhead (CUPTI's own records)"));
        for rk in r.ranks.iter().filter(|rk| !rk.profiler_overhead.is_empty()) {
            let mut kinds: Vec<_> = rk.profiler_overhead.iter().collect();
            kinds.sort_by_key(|(k, t)| (std::cmp::Reverse(t.ns), *k));
            let parts: Vec<String> = kinds
                .iter()
                .map(|(k, t)| format!("{} {} ({} records)", k.replace('_', " "), ns(t.ns), t.records))
                .collect();
            let _ = writeln!(o, "rank {}: {}", rk.rank, parts.join(", "));
        }
        for rk in &r.ranks {
            if let Some(c) = cost(rk) {
                let writer = c
                    .writer_cpu_ns
                    .map_or(String::new(), |w| format!("; gputrace's writer thread {} of CPU", ns(w)));
                let _ = writeln!(
                    o,
                    "rank {}: the profiler cost {} of CPU and {} of GPU time in CUPTI's records{writer} (not counted: the µs CUPTI adds inside each traced CUDA call)",
                    rk.rank,
                    ns(c.cupti_cpu_ns),
                    ns(c.cupti_gpu_ns)
                );
            }
        }
    }
}

/// Ranks whose CUDA graphs were recorded as whole launches, and what that gives up.
fn render_graph_level(o: &mut String, r: &Report, st: &Style) {
    let graph_level: Vec<_> = r
        .ranks
        .iter()
        .filter_map(|rk| rk.capture_levers.as_ref().filter(|l| l.graph_launches > 0).map(|l| (rk.rank, l)))
        .collect();
    if !graph_level.is_empty() {
        let _ = writeln!(o, "\n{}", st.heading("Recorded at graph level"));
        for (rank, l) in graph_level {
            let _ = writeln!(o, "rank {rank}: {}", l.gives_up[0]);
        }
    }
}

/// How many input entries the import left out.
fn render_not_imported(o: &mut String, r: &Report) {
    let not_imported: u64 = r.ranks.iter().flat_map(|rk| rk.losses.not_imported.values()).sum();
    if not_imported > 0 {
        let _ = writeln!(
            o,
            "\n{not_imported} input entries were outside the timeline model and not imported (Python frames, metadata, ...; see the JSON)."
        );
    }
}

/// Every finding: severity, title, evidence, the time at stake and the next step.
fn render_findings(o: &mut String, r: &Report, st: &Style) {
    let _ = writeln!(o, "\n{}", st.heading("Findings"));
    if r.findings.is_empty() {
        let _ = writeln!(o, "no rule fired: no large idle, exposed communication or transfer problem found");
    }
    for f in &r.findings {
        // One line each, whatever names they quote.
        let one_line = gputrace_format::text::escape;
        let _ = writeln!(o, "{} {}", st.severity(f.severity), one_line(&f.title));
        let _ = writeln!(o, "       evidence: {}", one_line(&f.evidence));
        if let Some(stake) = stake_line(f) {
            let _ = writeln!(o, "       at stake: {stake}");
        }
        let _ = writeln!(o, "       next:     {}", one_line(&f.next_step));
    }
}

/// The job's cost at the GPU-hour price given.
fn render_cost(o: &mut String, r: &Report, st: &Style) {
    if let Some(c) = &r.cost {
        let _ = writeln!(o, "\n{}", st.heading(&format!("Cost at ${:.2} per GPU-hour", c.usd_per_gpu_hour)));
        let _ = writeln!(
            o,
            "spans ${:.4}; idle ${:.4}, exposed communication ${:.4}, exposed transfer ${:.4}, startup/teardown ${:.4}: not compute ${:.4}",
            c.span_usd, c.idle_usd, c.exposed_communication_usd, c.exposed_transfer_usd, c.startup_teardown_usd, c.not_compute_usd
        );
    }
}

/// A finding's time at stake in words: `12.300 ms of GPU time (4.5%), $0.0123`.
fn stake_line(f: &Finding) -> Option<String> {
    let time = f.values.get(Value::TimeNs)?;
    let mut s = format!("{} of GPU time", ns(time.round() as u64));
    if let Some(share) = f.values.get(Value::ShareOfGpuTime) {
        let _ = write!(s, " ({:.1}%)", 100.0 * share);
    }
    if let Some(usd) = f.values.get(Value::CostUsd) {
        let _ = write!(s, ", {}", gputrace_analysis::units::usd(usd));
    }
    Some(s)
}

/// Sorted rank numbers as ranges: `0-3, 5, 7-8`.
fn ranges(v: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if j == i { v[i].to_string() } else { format!("{}-{}", v[i], v[j]) });
        i = j + 1;
    }
    out.join(", ")
}

fn gbps(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

/// Devices listed one per row in the exposed-by-operation table; beyond, only the total.
const MAX_EXPOSED_ROWS: usize = 16;

/// NCCL collectives per (communicator, operation), the communicators, and exposed
/// communication by operation. Nothing without collective records.
/// The `hardware` sections: what the GPUs' own counters said, one row per device.
fn render_hardware(o: &mut String, r: &Report, st: &Style) {
    let rows: Vec<(u32, u32, &gputrace_analysis::hardware::HardwareReport)> = r
        .ranks
        .iter()
        .flat_map(|rk| {
            rk.devices
                .iter()
                .filter_map(move |d| d.hardware.as_ref().map(|h| (rk.rank, d.device, h)))
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "\n{}",
        st.heading("Hardware (the GPU's own counters: NVML and CUPTI PM samples over the span)")
    );
    let _ = writeln!(
        o,
        "{:>5} {:>4}  {:>9} {:>9} {:>8}  {:>15} {:>8} {:>9}  {:>10}  by reason",
        "rank", "gpu", "util NVML", "timeline", "mem util", "SM clock (max)", "of max", "power", "throttled"
    );
    let f1 = |v: Option<f64>, unit: &str| v.map_or("-".to_string(), |v| format!("{v:.1}{unit}"));
    let mut notes = Vec::new();
    for (rank, dev, h) in rows {
        let mut extra = Vec::new();
        if h.nvlink_tx_mean_mbps.is_some() || h.nvlink_rx_mean_mbps.is_some() {
            extra.push(format!(
                "NVLink {} out, {} in",
                f1(h.nvlink_tx_mean_mbps, " MB/s"),
                f1(h.nvlink_rx_mean_mbps, " MB/s")
            ));
        }
        if h.xid_error_count > 0 {
            let xids: Vec<String> = h.xid_errors.iter().take(8).map(|e| e.xid.to_string()).collect();
            let more = if h.xid_error_count > xids.len() as u64 { ", …" } else { "" };
            extra.push(format!("{} XID error(s): {}{more}", h.xid_error_count, xids.join(", ")));
        }
        if let Some(n) = h.ecc_uncorrected_errors {
            extra.push(format!(
                "ECC errors {n} uncorrected, {} corrected",
                h.ecc_corrected_errors.map_or("-".to_string(), |c| c.to_string())
            ));
        }
        if h.sm_active_pct.is_some() || h.dram_throughput_pct.is_some() || h.dram_read_gbps.is_some() {
            extra.push(format!(
                "PM sampling: SM active {}, tensor pipe {}, DRAM {} read, {} written ({} of peak)",
                f1(h.sm_active_pct, "%"),
                f1(h.tensor_active_pct, "%"),
                f1(h.dram_read_gbps, " GB/s"),
                f1(h.dram_write_gbps, " GB/s"),
                f1(h.dram_throughput_pct, "%")
            ));
        }
        if !extra.is_empty() {
            notes.push(format!("rank {rank} gpu {dev}: {}", extra.join("; ")));
        }
        let clock = match (h.sm_clock_mean_mhz, h.sm_clock_max_mhz) {
            (Some(m), Some(max)) => format!("{m:.0} ({max}) MHz"),
            (Some(m), None) => format!("{m:.0} MHz"),
            _ => "-".into(),
        };
        let mut reasons: Vec<(&String, &u64)> = h.throttle_by_reason_ns.iter().filter(|(k, _)| k.as_str() != "idle").collect();
        reasons.sort_by_key(|(k, v)| (std::cmp::Reverse(**v), *k));
        let by: Vec<String> = reasons
            .iter()
            .map(|(k, v)| format!("{k} {}", pct(**v, h.throttle_sampled_ns)))
            .collect();
        let throttled = if h.throttle_sampled_ns == 0 {
            "-".to_string()
        } else {
            pct(h.throttled_ns, h.throttle_sampled_ns)
        };
        let _ = writeln!(
            o,
            "{:>5} {:>4}  {:>9} {:>9} {:>8}  {:>15} {:>8} {:>9}  {:>10}  {}",
            rank,
            dev,
            f1(h.gpu_util_sampled_pct, "%"),
            f1(h.gpu_util_nvml_pct, "%"),
            f1(h.mem_util_sampled_pct, "%"),
            clock,
            f1(h.sm_clock_pct_of_max, "%"),
            f1(h.power_mean_w, " W"),
            throttled,
            if by.is_empty() { "-".to_string() } else { by.join(", ") }
        );
    }
    for n in notes {
        let _ = writeln!(o, "{n}");
    }
    let _ = writeln!(
        o,
        "util NVML: NVML's GPU-Util sampled; timeline: the same definition computed from the kernels (they should agree within a few points)"
    );
}

fn render_collectives(o: &mut String, r: &Report, st: &Style) {
    if r.collectives.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "\n{}",
        st.heading("Collectives (NCCL; summed over ranks; time: GPU time of the collectives linked to their kernel)")
    );
    let comm_w = r
        .collectives
        .iter()
        .map(|c| c.communicator_name.chars().count().min(24) + 17)
        .max()
        .unwrap_or(0)
        .max(12);
    let _ = writeln!(
        o,
        "{:<comm_w$}  {:<13} {:>9} {:>9}  {:>11}  {:>11}  {:>11}  {:>10}  {:>10}  {:<20} protocols",
        "communicator", "op", "count", "linked", "bytes", "time", "mean", "algbw GB/s", "busbw GB/s", "algorithms"
    );
    for c in &r.collectives {
        let comm = if c.communicator_name.is_empty() {
            c.communicator.clone()
        } else {
            format!("{} {}", truncate(&c.communicator_name, 24), c.communicator)
        };
        let _ = writeln!(
            o,
            "{:<comm_w$}  {:<13} {:>9} {:>9}  {:>11}  {:>11}  {:>11}  {:>10}  {:>10}  {:<20} {}",
            comm,
            truncate(&c.op, 13),
            c.count,
            c.linked,
            human_bytes(c.bytes),
            ns(c.time_ns),
            if c.linked > 0 { ns(c.mean_ns) } else { "-".into() },
            gbps(c.algbw_gbps),
            gbps(c.busbw_gbps),
            counts_text(&c.algorithms),
            counts_text(&c.protocols),
        );
    }
    let unlinked: u64 = r.collectives.iter().map(|c| c.count - c.linked).sum();
    if unlinked > 0 {
        let _ = writeln!(
            o,
            "({unlinked} collective(s) not linked to the kernel that ran them: counted, but without GPU time or bandwidth)"
        );
    }
    let _ = writeln!(
        o,
        "(as NCCL-tests: algbw = bytes / time, bytes x n for AllGather, ReduceScatter, AlltoAll; busbw = algbw x 2(n-1)/n for AllReduce, \
         (n-1)/n for those three, 1 for Broadcast, Reduce, Send, Recv; n = nranks)"
    );
    for c in &r.communicators {
        let _ = writeln!(
            o,
            "communicator {}{}: {} rank(s){}, in the traces of rank(s) {}, {} collective(s)",
            c.id,
            if c.name.is_empty() {
                String::new()
            } else {
                format!(" ({})", gputrace_format::text::escape(&c.name))
            },
            c.nranks,
            if c.nodes > 0 {
                format!(" on {} node(s)", c.nodes)
            } else {
                String::new()
            },
            ranges(&c.ranks),
            c.collectives
        );
    }

    let t = &r.totals;
    if t.time.exposed_communication_ns == 0 {
        return;
    }
    let mut ops: Vec<(&String, &u64)> = t.time.exposed_communication_by_op_ns.iter().collect();
    ops.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    let widths: Vec<usize> = ops.iter().map(|(op, _)| op.chars().count().clamp(17, 24)).collect();
    let _ = writeln!(
        o,
        "\n{}",
        st.heading("Exposed communication by operation (communication not under compute, by the collective linked to its kernel)")
    );
    let mut head = format!("{:>5} {:>4}  {:>11}", "rank", "gpu", "exposed");
    for ((op, _), w) in ops.iter().zip(&widths) {
        let _ = write!(head, "  {:>w$}", truncate(op, *w));
    }
    let _ = writeln!(o, "{head}");
    let row = |first: String, exposed: u64, by_op: &std::collections::BTreeMap<String, u64>| {
        let mut line = format!("{first}  {:>11}", ns(exposed));
        for ((op, _), w) in ops.iter().zip(&widths) {
            let v = by_op.get(*op).copied().unwrap_or(0);
            let _ = write!(line, "  {:>w$}", format!("{} {}", ns(v), pct(v, exposed)));
        }
        line
    };
    let devices: Vec<(u32, &DeviceReport)> = r
        .ranks
        .iter()
        .flat_map(|rk| rk.devices.iter().map(move |d| (rk.rank, d)))
        .filter(|(_, d)| d.time.exposed_communication_ns > 0)
        .collect();
    if devices.len() <= MAX_EXPOSED_ROWS {
        for (rank, d) in &devices {
            let _ = writeln!(
                o,
                "{}",
                row(
                    format!("{:>5} {:>4}", rank, d.device),
                    d.time.exposed_communication_ns,
                    &d.time.exposed_communication_by_op_ns
                )
            );
        }
    }
    let _ = writeln!(
        o,
        "{}",
        row(
            format!("{:>10}", "all"),
            t.time.exposed_communication_ns,
            &t.time.exposed_communication_by_op_ns
        )
    );
    if devices.len() > MAX_EXPOSED_ROWS {
        let _ = writeln!(o, "({} GPUs with exposed communication: per GPU in the JSON)", devices.len());
    }
}

/// Rows of the exposed-communication-by-library table.
const MAX_LIBRARY_ROWS: usize = 12;

/// The job's exposed communication by library and operation (what the classification
/// decided, whether or not a collective record names it).
fn render_comm_libraries(o: &mut String, r: &Report, st: &Style) {
    let t = &r.totals;
    if t.time.exposed_communication_ns == 0 {
        return;
    }
    let mut rows: Vec<(&str, &str, u64)> = t
        .time
        .exposed_communication_by_library_ns
        .iter()
        .flat_map(|(lib, ops)| ops.iter().map(move |(op, ns)| (lib.as_str(), op.as_str(), *ns)))
        .collect();
    rows.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(b.0)).then(a.1.cmp(b.1)));
    let _ = writeln!(
        o,
        "\n{}",
        st.heading(
            "Exposed communication by library and operation (the classification rule of each kernel; report --explain-classes audits it)"
        )
    );
    let _ = writeln!(o, "{:<32} {:<16} {:>13} {:>7}", "library", "operation", "exposed", "share");
    for (lib, op, v) in rows.iter().take(MAX_LIBRARY_ROWS) {
        let _ = writeln!(
            o,
            "{:<32} {:<16} {:>13} {:>7}",
            truncate(lib, 32),
            truncate(op, 16),
            ns(*v),
            pct(*v, t.time.exposed_communication_ns)
        );
    }
    if rows.len() > MAX_LIBRARY_ROWS {
        let _ = writeln!(o, "({} more: in the JSON)", rows.len() - MAX_LIBRARY_ROWS);
    }
}

/// `--explain-classes`: which rule classified how much kernel time.
fn render_classification(o: &mut String, r: &Report, st: &Style) {
    let Some(rules) = &r.classification else {
        return;
    };
    let _ = writeln!(
        o,
        "\n{}",
        st.heading("Classification: which rule made how much kernel time communication (first matching rule wins; user rules first)")
    );
    let _ = writeln!(
        o,
        "{:<30} {:<22} {:<13} {:>9} {:>6} {:>13}  origin · example",
        "library", "pattern", "category", "kernels", "names", "kernel time"
    );
    let mut unused = 0;
    for u in rules {
        if u.kernels == 0 {
            unused += 1;
            continue;
        }
        let _ = writeln!(
            o,
            "{:<30} {:<22} {:<13} {:>9} {:>6} {:>13}  {} · {}",
            truncate(u.library.as_deref().unwrap_or("(no rule)"), 30),
            truncate(u.pattern.as_deref().unwrap_or("-"), 22),
            u.category.name(),
            u.kernels,
            u.kernel_names,
            ns(u.total_ns),
            u.origin,
            truncate(u.example.as_deref().unwrap_or(""), 60)
        );
    }
    if unused > 0 {
        let _ = writeln!(
            o,
            "({unused} rule(s) matched no kernel of these traces; all rules with their sources: --json)"
        );
    }
}

/// Steps listed individually up to this many; beyond, the slowest few.
const MAX_STEPS_SHOWN: usize = 12;
/// How many of the slowest steps a long run shows.
const SLOWEST_STEPS_SHOWN: usize = 5;

/// One step (or the time outside the steps, or all of it) over every device that has it:
/// every field a sum over those devices, except `wall`.
#[derive(Default, Clone, Copy)]
struct StepAgg {
    /// The longest device window: the job waits for its slowest GPU.
    wall: u64,
    /// Summed device windows (GPU time).
    gpu: u64,
    compute: u64,
    exposed_communication: u64,
    exposed_transfer: u64,
    idle: u64,
    causes: IdleCauses,
}

impl StepAgg {
    fn add(&mut self, duration: u64, compute: u64, comm: u64, xfer: u64, idle: u64, causes: &IdleCauses) {
        self.wall = self.wall.max(duration);
        self.gpu += duration;
        self.compute += compute;
        self.exposed_communication += comm;
        self.exposed_transfer += xfer;
        self.idle += idle;
        self.causes.add(causes);
    }

    fn add_step(&mut self, s: &StepReport) {
        self.add(
            s.duration_ns,
            s.compute_ns,
            s.exposed_communication_ns,
            s.exposed_transfer_ns,
            s.idle_ns,
            &s.idle_causes,
        );
    }

    fn merge(&mut self, o: &StepAgg) {
        self.wall = self.wall.max(o.wall);
        self.gpu += o.gpu;
        self.compute += o.compute;
        self.exposed_communication += o.exposed_communication;
        self.exposed_transfer += o.exposed_transfer;
        self.idle += o.idle;
        self.causes.add(&o.causes);
    }

    fn row(&self, label: &str) -> String {
        let c = &self.causes;
        format!(
            "{label:>8}  {:>11}  {:>11}  {:>8}  {:>8}  {:>8}  {:>11}  {:>11}  {:>11}  {:>11}  {:>11}",
            if self.wall > 0 { ns(self.wall) } else { "-".into() },
            ns(self.gpu),
            pct(self.compute, self.gpu),
            pct(self.exposed_communication, self.gpu),
            pct(self.exposed_transfer, self.gpu),
            ns(self.idle),
            ns(c.host_bound_ns),
            ns(c.launch_latency_ns),
            ns(c.synchronization_ns),
            ns(c.unattributed_ns),
        )
    }
}

/// Steps across all ranks, in GPU time: each column has one definition, stated in the
/// heading, and the rows add up: the steps, the time outside them and (when the table
/// lists only the slowest steps) the other steps sum to the `all` row, which is the
/// breakdown's totals.
fn render_steps(o: &mut String, r: &Report, st: &Style) {
    let mut steps: std::collections::BTreeMap<u64, StepAgg> = std::collections::BTreeMap::new();
    let mut outside = StepAgg::default();
    let mut all = StepAgg::default();
    for d in r.ranks.iter().flat_map(|rk| &rk.devices).filter(|d| d.first_ns.is_some()) {
        let mut mine = StepAgg::default();
        for s in &d.steps {
            steps.entry(s.step).or_default().add_step(s);
            mine.add_step(s);
        }
        all.add(
            d.time.span_ns,
            d.time.compute_ns,
            d.time.exposed_communication_ns,
            d.time.exposed_transfer_ns,
            d.time.idle_ns,
            &d.idle_causes,
        );
        // The device's remainder: its span less its steps' windows (disjoint, within it).
        let sub = |a: u64, b: u64| a.saturating_sub(b);
        let c = &d.idle_causes;
        let m = &mine.causes;
        outside.add(
            sub(d.time.span_ns, mine.gpu),
            sub(d.time.compute_ns, mine.compute),
            sub(d.time.exposed_communication_ns, mine.exposed_communication),
            sub(d.time.exposed_transfer_ns, mine.exposed_transfer),
            sub(d.time.idle_ns, mine.idle),
            &IdleCauses {
                host_bound_ns: sub(c.host_bound_ns, m.host_bound_ns),
                launch_latency_ns: sub(c.launch_latency_ns, m.launch_latency_ns),
                synchronization_ns: sub(c.synchronization_ns, m.synchronization_ns),
                unattributed_ns: sub(c.unattributed_ns, m.unattributed_ns),
                gaps: 0,
            },
        );
    }
    if steps.is_empty() {
        return;
    }
    let mut durations: Vec<u64> = steps.values().map(|a| a.wall).collect();
    durations.sort_unstable();
    let median = durations[durations.len() / 2];
    let mut shown: Vec<u64> = steps.keys().copied().collect();
    if shown.len() > MAX_STEPS_SHOWN {
        shown.sort_by_key(|k| std::cmp::Reverse(steps[k].wall));
        shown.truncate(SLOWEST_STEPS_SHOWN);
        shown.sort_unstable();
    }
    let inferred = r
        .ranks
        .iter()
        .flat_map(|rk| &rk.devices)
        .find_map(|d| d.steps_inferred_from.as_deref());
    let marks = r.productive.step_source == gputrace_analysis::StepSource::StepMarks;
    let source = match inferred {
        _ if marks => "gputrace step marks, each ends a step".to_string(),
        Some(anchor) => format!("no ProfilerStep ranges: inferred from the runs of {}", truncate(anchor, 60)),
        None => "ProfilerStep#N".to_string(),
    };
    let _ = writeln!(
        o,
        "\n{}",
        st.heading(&format!(
            "Steps ({source}; a step is the GPU time of the work it launched, from the previous step's end to its own last work)"
        ))
    );
    let _ = writeln!(
        o,
        "(wall: the slowest GPU's window; every other column summed over all GPUs: compute + exp.comm + exp.xfer + idle = 100% of GPU time, idle = host-bound + latency + sync + unattributed; rows add up to `all`, the breakdown above)"
    );
    let _ = writeln!(
        o,
        "{:>8}  {:>11}  {:>11}  {:>8}  {:>8}  {:>8}  {:>11}  {:>11}  {:>11}  {:>11}  {:>11}",
        "step", "wall", "GPU time", "compute", "exp.comm", "exp.xfer", "idle", "host-bound", "latency", "sync", "unattrib."
    );
    let mut others = StepAgg::default();
    for (k, a) in &steps {
        if !shown.contains(k) {
            others.merge(a);
            continue;
        }
        // Slow: more than 1.5 times the median step.
        let slow = if median > 0 && a.wall * 2 > median * 3 { "  slow" } else { "" };
        let _ = writeln!(o, "{}{}", a.row(&k.to_string()), st.paint("33", slow));
    }
    if shown.len() < steps.len() {
        let _ = writeln!(o, "{}", others.row(&format!("{} more", steps.len() - shown.len())));
    }
    let _ = writeln!(o, "{}", StepAgg { wall: 0, ..outside }.row("outside"));
    let _ = writeln!(o, "{}", StepAgg { wall: 0, ..all }.row("all"));
    if shown.len() < steps.len() {
        let _ = writeln!(
            o,
            "({} slowest of {} steps shown, the others in one row; median step {})",
            shown.len(),
            steps.len(),
            ns(median)
        );
    }
}

/// The short form of a missing field's hint: up to its first parenthesis.
fn short_hint<'a>(p: &'a Productive, field: &str) -> &'a str {
    p.missing.get(field).map_or("", |h| h.split(" (").next().unwrap_or(h))
}

/// The report's first line after the title: the dashboard number next to the productive ones.
fn headline(p: &Productive) -> String {
    let mut parts = vec![
        match (p.gpu_util_nvml_pct, p.gpu_util_windows) {
            (Some(u), _) => format!("GPU-Util (as nvidia-smi) {u:.0}%"),
            (None, Some(w)) => format!(
                "GPU-Util (as nvidia-smi) - (span of {w:.2} windows of {:.3} s: too short to mean anything)",
                p.gpu_util_window_s
            ),
            (None, None) => "GPU-Util (as nvidia-smi) - (no GPU activity)".to_string(),
        },
        match p.compute_pct {
            Some(c) => format!("compute {c:.0}%"),
            None => "compute -".to_string(),
        },
    ];
    parts.push(match p.mfu {
        Some(m) => format!("MFU {:.0}%", 100.0 * m),
        None => format!("MFU: {}", short_hint(p, "mfu")),
    });
    parts.push(match p.tokens_per_s {
        Some(t) => format!("{} tokens/s", si(t)),
        None => format!("tokens/s: {}", short_hint(p, "tokens_per_s")),
    });
    parts.push(match p.cost_per_million_tokens {
        Some(c) => format!("${c:.2} per M tokens"),
        None => format!("$ per M tokens: {}", short_hint(p, "cost_per_million_tokens")),
    });
    parts.join(" · ")
}

fn opt_pct(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}%"))
}

fn opt_s(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| ns((v * 1e9).round() as u64))
}

fn opt_si(v: Option<f64>) -> String {
    v.map_or("-".into(), si)
}

/// Ranks listed one per row in the productive table; beyond, only the job.
const MAX_PRODUCTIVE_ROWS: usize = 16;

/// Steps, throughput, GPU-Util, MFU and outcome per rank and for the job.
fn render_productive(o: &mut String, r: &Report, st: &Style) {
    let p = &r.productive;
    let source = match p.step_source {
        gputrace_analysis::StepSource::StepMarks => "gputrace step marks",
        gputrace_analysis::StepSource::ProfilerStep => "ProfilerStep ranges",
        gputrace_analysis::StepSource::Inferred => "inferred from the kernel pattern",
        gputrace_analysis::StepSource::None => "none found",
    };
    let _ = writeln!(
        o,
        "\n{}",
        st.heading(&format!(
            "Productive work (steps: {source}; GPU-Util: share of {:.3} s windows in which a kernel ran, as nvidia-smi)",
            p.gpu_util_window_s
        ))
    );
    let _ = writeln!(
        o,
        "{:>5}  {:>6}  {:>11}  {:>11}  {:>9}  {:>9}  {:>8}  {:>8}  {:>6}  outcome",
        "rank", "steps", "p50 step", "p95 step", "tokens/s", "samples/s", "GPU-Util", "compute", "MFU"
    );
    let row = |first: String, x: &Productive, outcome: &str| {
        format!(
            "{first}  {:>6}  {:>11}  {:>11}  {:>9}  {:>9}  {:>8}  {:>8}  {:>6}  {outcome}",
            x.steps,
            opt_s(x.step_time_p50_s),
            opt_s(x.step_time_p95_s),
            opt_si(x.tokens_per_s),
            opt_si(x.samples_per_s),
            opt_pct(x.gpu_util_nvml_pct),
            opt_pct(x.compute_pct),
            x.mfu.map_or("-".into(), |m| format!("{:.1}%", 100.0 * m)),
        )
    };
    if r.ranks.len() <= MAX_PRODUCTIVE_ROWS {
        for rk in &r.ranks {
            let _ = writeln!(o, "{}", row(format!("{:>5}", rk.rank), &rk.productive, &rk.productive.outcome));
        }
    }
    let _ = writeln!(o, "{}", row(format!("{:>5}", "job"), p, &p.outcome));
    if r.ranks.len() > 1 {
        let _ = writeln!(
            o,
            "(job: steps and their p50/p95 of each step's slowest rank; tokens/s and samples/s summed over the ranks; GPU-Util, compute and MFU over all GPUs)"
        );
    }
    let mut hours = format!(
        "GPU time: {} traced, {} in completed steps of processes that succeeded",
        gputrace_analysis::units::gpu_time(p.gpu_hours),
        gputrace_analysis::units::gpu_time(p.productive_gpu_hours)
    );
    if let Some(rate) = p.productive_gpu_hour_rate {
        let _ = write!(hours, " ({:.1}%)", 100.0 * rate);
    }
    let _ = write!(hours, ", {} failed", gputrace_analysis::units::gpu_time(p.failed_gpu_hours));
    if let Some(c) = p.cost_usd {
        let _ = write!(hours, "; cost ${c:.4}");
    }
    if let Some(c) = p.cost_per_million_tokens {
        let _ = write!(hours, ", ${c:.2} per million tokens");
    }
    let _ = writeln!(o, "{hours}");
    let mut sources = Vec::new();
    if let Some(s) = &p.tokens_source {
        sources.push(format!("tokens from {s}"));
    }
    if let Some(s) = &p.samples_source {
        sources.push(format!("samples from {s}"));
    }
    if let Some(s) = &p.model_flops_source {
        sources.push(format!("model FLOPs: {s}"));
    }
    if let Some(s) = &p.peak_source {
        sources.push(format!("peak: {s}"));
    }
    if !sources.is_empty() {
        let _ = writeln!(o, "({})", sources.join("; "));
    }
    if p.malformed_step_marks > 0 {
        let _ = writeln!(
            o,
            "({} step mark(s) did not parse and were ignored: expected `step tokens=N samples=N`)",
            p.malformed_step_marks
        );
    }
    for (field, hint) in &p.missing {
        let _ = writeln!(o, "{field}: not computed; {hint}");
    }
}
