//! The page's sections that repeat what the text report says in tables: the productive
//! work per rank, the GPUs' own counters (summed and over time), the longest idle gaps and
//! what the CPU did in them, exposed communication by library and operation, and the
//! collectives' algorithms and protocols. Every number carries its `data-key` like the rest
//! of the page.

use crate::num::{bar, lowest, rank_gpu_cells, td_name, td_text, trim, Fmt, Num};
use crate::{esc_text, ns, shown_note, Html};
use gputrace_analysis::hardware::CounterTimeline;
use gputrace_analysis::{Productive, Report, StepSource};
use maud::{html, Markup};
use std::collections::BTreeMap;

/// A map entry's path is only a path when its key has no dot.
fn path_safe(k: &str) -> bool {
    !k.contains('.')
}

/// A cell of `RING ×120, TREE ×8`, most first, each count a number of the page (`key.NAME`).
pub(crate) fn counts_cell(key: &str, m: &BTreeMap<String, u64>) -> Markup {
    let mut v: Vec<(&String, &u64)> = m.iter().collect();
    v.sort_by_key(|(k, n)| (std::cmp::Reverse(**n), *k));
    html! {
        td data-sort="" {
            @if v.is_empty() { "-" }
            @for (i, (k, n)) in v.iter().enumerate() {
                @if i > 0 { ", " }
                (esc_text(k)) " ×"
                @if path_safe(k) { (Num::u(format!("{key}.{k}"), **n, Fmt::Num).span()) } @else { (n) }
            }
        }
    }
}

/// The devices of `r` for which `has` holds, as (rank index, device index).
fn devices_where(r: &Report, has: impl Fn(&gputrace_analysis::DeviceReport) -> bool) -> Vec<(usize, usize)> {
    let mut rows = Vec::new();
    for (ri, rk) in r.ranks.iter().enumerate() {
        for (di, d) in rk.devices.iter().enumerate() {
            if has(d) {
                rows.push((ri, di));
            }
        }
    }
    rows
}

/// The device's SM clock as a share of its maximum (100 without counters): the GPUs with
/// counters listed first when they do not all fit are the slowest clocks.
fn sm_clock_pct(r: &Report, &(ri, di): &(usize, usize)) -> f64 {
    r.ranks[ri].devices[di]
        .hardware
        .as_ref()
        .and_then(|h| h.sm_clock_pct_of_max)
        .unwrap_or(100.0)
}

impl Html {
    /// Steps, p50/p95 step time, throughput, GPU-Util, compute, MFU and outcome per rank
    /// (`ranks.N.productive`) and for the job (`productive`).
    pub(crate) fn productive_table(&self, r: &Report) -> Markup {
        let p = &r.productive;
        let source = match p.step_source {
            StepSource::StepMarks => "gputrace step marks",
            StepSource::ProfilerStep => "ProfilerStep ranges",
            StepSource::Inferred => "inferred from the kernel pattern",
            StepSource::None => "none found",
        };
        let cells = |k: &str, x: &Productive| {
            let key = |f: &str| format!("{k}{f}");
            html! {
                (Num::u(key("steps"), x.steps, Fmt::Num).td())
                (Num::secs(key("step_time_p50_s"), x.step_time_p50_s).td())
                (Num::secs(key("step_time_p95_s"), x.step_time_p95_s).td())
                (Num::f(key("tokens_per_s"), x.tokens_per_s, Fmt::Si).td())
                (Num::f(key("samples_per_s"), x.samples_per_s, Fmt::Si).td())
                (Num::f(key("gpu_util_nvml_pct"), x.gpu_util_nvml_pct, Fmt::Pct100).td())
                (Num::f(key("compute_pct"), x.compute_pct, Fmt::Pct100).td())
                (Num::f(key("mfu"), x.mfu, Fmt::Frac).td())
                (td_text(&x.outcome))
            }
        };
        let mut shown: Vec<usize> = (0..r.ranks.len()).collect();
        // The ranks that computed least of their span first: where the time goes.
        lowest(&mut shown, self.max_device_rows, |&i| {
            r.ranks[i].productive.compute_pct.unwrap_or(0.0)
        });
        let sources: Vec<(&str, &String)> = [
            ("tokens from", &p.tokens_source),
            ("samples from", &p.samples_source),
            ("model FLOPs:", &p.model_flops_source),
            ("peak:", &p.peak_source),
        ]
        .into_iter()
        .filter_map(|(what, s)| Some((what, s.as_ref()?)))
        .collect();
        html! {
            h2 { "Productive work" }
            p.mute {
                "Steps from " (source) "; GPU-Util as nvidia-smi computes it (the share of "
                (Num::f("productive.gpu_util_window_s", Some(p.gpu_util_window_s), Fmt::Num).text(format!("{:.3} s", p.gpu_util_window_s)).span())
                " windows in which a kernel ran); compute: the share of the span a compute kernel ran; MFU: model FLOPs over the GPU's peak."
            }
            div.scroll { table.sortable #productive {
                thead { tr {
                    th.r { "rank" } th.r { "steps" } th.r { "p50 step" } th.r { "p95 step" } th.r { "tokens/s" }
                    th.r { "samples/s" } th.r { "GPU-Util" } th.r { "compute" } th.r { "MFU" } th { "outcome" }
                } }
                tbody {
                    @for &ri in &shown {
                        tr {
                            (Num::u(format!("ranks.{ri}.rank"), r.ranks[ri].rank.into(), Fmt::Num).td())
                            (cells(&format!("ranks.{ri}.productive."), &r.ranks[ri].productive))
                        }
                    }
                    tr.all { td { "job" } (cells("productive.", p)) }
                }
            } }
            (shown_note(shown.len(), r.ranks.len(), "ranks shown: those with the lowest compute share", "Every rank"))
            @if !sources.is_empty() {
                p.note {
                    @for (i, (what, s)) in sources.iter().enumerate() {
                        @if i > 0 { "; " }
                        (what) " " (esc_text(s))
                    }
                }
            }
        }
    }

    /// The GPUs' own counters over the span, one row per GPU (`hardware` of each device).
    pub(crate) fn hardware_summary(&self, r: &Report) -> Markup {
        let mut rows = devices_where(r, |d| d.hardware.is_some());
        if rows.is_empty() {
            return html! {};
        }
        let total = rows.len();
        lowest(&mut rows, self.max_device_rows, |d| sm_clock_pct(r, d));
        html! {
            h2 { "Hardware" }
            p.mute {
                "The GPU's own counters (NVML and CUPTI PM samples) over the span. util NVML: NVML's GPU-Util as sampled; timeline: the same definition computed from the kernels (they should agree within a few points); throttled: share of the sampled time with a slowdown reason other than idle."
            }
            div.scroll { table.sortable #hardware-summary {
                thead { tr {
                    th.r { "rank" } th.r { "gpu" } th.r { "util NVML" } th.r { "timeline" } th.r { "mem util" } th.r { "SM clock" }
                    th.r { "max" } th.r { "of max" } th.r { "power" } th.r { "temp. max" } th.r { "throttled" } th { "by reason" }
                } }
                tbody {
                    @for &(ri, di) in &rows {
                        (self.hardware_summary_row(r, ri, di))
                    }
                }
            } }
            (shown_note(rows.len(), total, "GPUs with counters shown: those with the lowest SM clock", "Every one"))
        }
    }

    fn hardware_summary_row(&self, r: &Report, ri: usize, di: usize) -> Markup {
        let Some(h) = &r.ranks[ri].devices[di].hardware else {
            return html! {};
        };
        let key = |f: &str| format!("ranks.{ri}.devices.{di}.hardware.{f}");
        let unit = |f: &str, v: Option<f64>, u: &str| {
            let n = Num::f(key(f), v, Fmt::Num);
            match v {
                Some(x) => n.text(format!("{x:.0} {u}")),
                None => n,
            }
        };
        let mut reasons: Vec<(&String, &u64)> = h.throttle_by_reason_ns.iter().filter(|(k, _)| k.as_str() != "idle").collect();
        reasons.sort_by_key(|(k, v)| (std::cmp::Reverse(**v), *k));
        let sampled = key("throttle_sampled_ns");
        html! {
            tr {
                (rank_gpu_cells(r, ri, di))
                (Num::f(key("gpu_util_sampled_pct"), h.gpu_util_sampled_pct, Fmt::Pct100).td())
                (Num::f(key("gpu_util_nvml_pct"), h.gpu_util_nvml_pct, Fmt::Pct100).td())
                (Num::f(key("mem_util_sampled_pct"), h.mem_util_sampled_pct, Fmt::Pct100).td())
                (unit("sm_clock_mean_mhz", h.sm_clock_mean_mhz, "MHz").td())
                (unit("sm_clock_max_mhz", h.sm_clock_max_mhz.map(|m| m as f64), "MHz").value_of(&h.sm_clock_max_mhz).td())
                (Num::f(key("sm_clock_pct_of_max"), h.sm_clock_pct_of_max, Fmt::Pct100).td())
                (unit("power_mean_w", h.power_mean_w, "W").td())
                (unit("temperature_max_c", h.temperature_max_c.map(|t| t as f64), "°C").value_of(&h.temperature_max_c).td())
                (Num::pct(key("throttled_ns"), h.throttled_ns, &sampled, h.throttle_sampled_ns).td())
                td data-sort="" {
                    @if reasons.is_empty() { "-" }
                    @for (i, (k, v)) in reasons.iter().enumerate() {
                        @if i > 0 { ", " }
                        (esc_text(k))
                        @if path_safe(k) {
                            " " (Num::pct(key(&format!("throttle_by_reason_ns.{k}")), **v, &sampled, h.throttle_sampled_ns).span())
                        }
                    }
                }
            }
        }
    }

    /// GPU counters over time, where NVML was sampled: a sparkline per plotted series
    /// and GPU, with its range.
    pub(crate) fn hardware(&self, r: &Report) -> Markup {
        const LABELS: [&str; 4] = ["GPU-Util", "SM clock", "power", "temperature"];
        let mut rows = devices_where(r, |d| d.hardware.as_ref().is_some_and(|h| !h.timeline.is_empty()));
        if rows.is_empty() {
            return html! {};
        }
        let total = rows.len();
        // The slowest clocks first: where the counters have something to say.
        lowest(&mut rows, self.max_device_rows, |d| sm_clock_pct(r, d));
        let series = |ri: usize, di: usize| r.ranks[ri].devices[di].hardware.iter().flat_map(|h| &h.timeline);
        // One scale per metric for every GPU: a 1965-1980 MHz line stays flat beside a
        // throttled one. Percentages on 0-100; the scale's floor is at most 0.8 of its top.
        let scales: Vec<(f64, f64)> = LABELS
            .iter()
            .map(|label| {
                let mut range = (f64::INFINITY, f64::NEG_INFINITY);
                for t in rows.iter().flat_map(|&(ri, di)| series(ri, di)).filter(|t| t.label == *label) {
                    if t.unit == "%" {
                        range = (0.0, 100.0);
                    } else {
                        range = (range.0.min(t.min), range.1.max(t.max));
                    }
                }
                (range.0.min(0.8 * range.1), range.1)
            })
            .collect();
        let unit_of = |label: &str| {
            devices_where(r, |_| true)
                .into_iter()
                .flat_map(|(ri, di)| series(ri, di))
                .find(|t| t.label == label)
                .map_or("", |t| unit_text(&t.unit))
        };
        html! {
            h2 { "GPU counters over time" }
            p.mute {
                "NVML samples taken beside the timeline (" code { "gputrace run --gpu-sample-hz" }
                "), each series the mean of its samples in up to 60 bins over its sampled time; the range is the bins' lowest and highest value. All GPUs share one scale per counter (shown under its name; GPU-Util on 0–100%)."
            }
            div.scroll { table.sortable #hardware {
                thead { tr {
                    th.r { "rank" } th.r { "gpu" }
                    @for (l, (lo, hi)) in LABELS.iter().zip(&scales) {
                        th { (l) span.scale { "scale " (trim(lo.round())) "–" (trim(hi.round())) " " (unit_of(l)) } }
                    }
                } }
                tbody {
                    @for &(ri, di) in &rows {
                        tr {
                            (rank_gpu_cells(r, ri, di))
                            @for (label, scale) in LABELS.iter().zip(&scales) {
                                @if let Some(k) = series(ri, di).position(|t| t.label == *label) {
                                    @let t = series(ri, di).nth(k).expect("found");
                                        @let key = |f: &str| format!("ranks.{ri}.devices.{di}.hardware.timeline.{k}.{f}");
                                        td.sp data-sort=(t.max) {
                                            (sparkline(t, *scale))
                                            (Num::f(key("min"), Some(t.min), Fmt::Num).text(format!("{:.0}", t.min)).span())
                                            "–"
                                            (Num::f(key("max"), Some(t.max), Fmt::Num).text(format!("{:.0}", t.max)).span())
                                            " " (esc_text(unit_text(&t.unit)))
                                        }
                                } @else {
                                    td { "-" }
                                }
                            }
                        }
                    }
                }
            } }
            @if rows.len() < total {
                p.note {
                    (rows.len()) " of " (total) " sampled GPUs shown: those with the lowest SM clock. Every series is in "
                    code { "gputrace report --json" } " (" code { "hardware.timeline" } ")."
                }
            }
        }
    }

    /// The job's longest idle gaps (across GPUs), with what the CPU was doing during each.
    pub(crate) fn gaps(&self, r: &Report) -> Markup {
        let mut gaps: Vec<(usize, usize, usize)> = Vec::new();
        for (ri, rk) in r.ranks.iter().enumerate() {
            for (di, d) in rk.devices.iter().enumerate() {
                gaps.extend((0..d.longest_gaps.len()).map(|gi| (ri, di, gi)));
            }
        }
        if gaps.is_empty() {
            return html! {};
        }
        let gap = |&(ri, di, gi): &(usize, usize, usize)| &r.ranks[ri].devices[di].longest_gaps[gi];
        gaps.sort_by_key(|g| (std::cmp::Reverse(gap(g).duration_ns), *g));
        gaps.truncate(10);
        html! {
            h2 { "Longest idle gaps" }
            p.mute {
                "The GPU ran nothing; cause from the CPU side (host-bound: the CPU was busy before launching the next work; latency: the work was queued; synchronization: the CPU waited). “CPU was in”: the calls and ranges that overlapped the gap most."
            }
            div.scroll { table.sortable #gaps {
                thead { tr {
                    th.r { "rank" } th.r { "gpu" } th.r { "idle" } th { "cause" } th.r { "step" } th { "next work" } th { "CPU was in" }
                } }
                tbody {
                    @for g in &gaps {
                        @let (ri, di, gi) = *g;
                        @let x = gap(g);
                        @let key = |f: &str| format!("ranks.{ri}.devices.{di}.longest_gaps.{gi}.{f}");
                        tr {
                            (rank_gpu_cells(r, ri, di))
                            (Num::u(key("duration_ns"), x.duration_ns, Fmt::Ns).td())
                            (td_text(x.cause.name()))
                            @if let Some(s) = x.step {
                                (Num::u(key("step"), s, Fmt::Num).td())
                            } @else {
                                (td_text("-"))
                            }
                            (td_name(&x.next_work))
                            td data-sort="" {
                                @if x.cpu_activity.is_empty() { "-" }
                                @for (k, a) in x.cpu_activity.iter().enumerate() {
                                    div.cpu {
                                        span.ell-i title=(esc_text(&a.name)) { (esc_text(&a.name)) }
                                        " (" (Num::u(key(&format!("cpu_activity.{k}.overlap_ns")), a.overlap_ns, Fmt::Ns).span()) ")"
                                    }
                                }
                            }
                        }
                    }
                }
            } }
        }
    }

    /// Exposed communication of the job by library and operation (`totals`).
    pub(crate) fn comm_libraries(&self, r: &Report) -> Markup {
        let t = &r.totals;
        if t.time.exposed_communication_ns == 0 {
            return html! {};
        }
        let mut rows: Vec<(&str, &str, u64)> = t
            .time
            .exposed_communication_by_library_ns
            .iter()
            .flat_map(|(lib, ops)| ops.iter().map(move |(op, ns)| (lib.as_str(), op.as_str(), *ns)))
            .collect();
        rows.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(b.0)).then(a.1.cmp(b.1)));
        let all = "totals.exposed_communication_ns";
        html! {
            h2 { "Exposed communication by library and operation" }
            p.mute {
                "Communication not under compute, by the classification rule that made each kernel communication ("
                code { "gputrace report --explain-classes" } " audits it), summed over GPUs."
            }
            div.scroll { table.sortable #comm-libraries {
                thead { tr { th { "library" } th { "operation" } th.r { "exposed" } th.r { "share" } th { "share" } } }
                tbody {
                    @for &(lib, op, v) in rows.iter().take(self.max_rank_rows) {
                        tr {
                            (td_text(lib))
                            (td_text(op))
                            @if path_safe(lib) && path_safe(op) {
                                @let k = format!("totals.exposed_communication_by_library_ns.{lib}.{op}");
                                (Num::u(&k, v, Fmt::Ns).td())
                                (Num::pct(&k, v, all, t.time.exposed_communication_ns).td())
                            } @else {
                                (td_text(&ns(v)))
                                (td_text("-"))
                            }
                            td.b { (bar([0, v, 0, 0, 0, 0, 0], t.time.exposed_communication_ns)) }
                        }
                    }
                }
            } }
            @if rows.len() > self.max_rank_rows {
                p.note { (rows.len() - self.max_rank_rows) " more in " code { "gputrace report --json" } "." }
            }
        }
    }
}

/// A series as an inline SVG line (broken where a bin has no samples) on the scale `lo..hi`,
/// which every GPU's line of the same metric shares.
fn sparkline(t: &CounterTimeline, (lo, hi): (f64, f64)) -> Markup {
    const W: f64 = 120.0;
    const H: f64 = 24.0;
    let n = t.values.len().max(2) - 1;
    let y = |v: f64| {
        let f = if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
        H - 1.0 - f.clamp(0.0, 1.0) * (H - 2.0)
    };
    // Runs of sampled bins, each one polyline.
    let mut lines: Vec<Vec<String>> = vec![Vec::new()];
    for (i, v) in t.values.iter().enumerate() {
        match v {
            Some(v) => lines
                .last_mut()
                .expect("one")
                .push(format!("{:.1},{:.1}", i as f64 * W / n as f64, y(*v))),
            None => lines.push(Vec::new()),
        }
    }
    html! {
        svg.spark viewBox="0 0 120 24" preserveAspectRatio="none" role="img" aria-label={ (esc_text(&t.label)) " over time" } {
            @for points in lines.iter().filter(|l| !l.is_empty()) {
                polyline points=(points.join(" ")) {}
            }
        }
    }
}

/// A counter's unit as people write it (`°C` for the JSON's `C`).
fn unit_text(unit: &str) -> &str {
    match unit {
        "C" => "°C",
        u => u,
    }
}
