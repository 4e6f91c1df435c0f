//! One self-contained HTML page of a `gputrace report`: the headline, where
//! each GPU's time went (stacked bars, sortable), the steps with the slow ones
//! marked, the findings, top kernels, copies, collectives with bus bandwidth
//! and, for a multi-rank job, `gputrace compare`'s straggler view (a lateness
//! heatmap and the waiting each rank imposed); with host samples, flame graphs
//! of the host's Python stacks weighted by GPU-idle time.
//!
//! The page is written with `maud` templates (`html!`), which escape every
//! value they are given; strings from a trace go through `EscText`, the one
//! escaper of the page, which also escapes `/`.
//!
//! The page is written from the very structs that `report --json` and
//! `compare --json` serialize ([`Report`], [`Comparison`]), and every number
//! on it carries its source: `data-key` is the path of the field in
//! `report --json` (`ranks.0.devices.0.compute_ns`; paths into
//! `compare --json` start with `compare.`), `data-value` the field's JSON
//! text (serialized by serde_json, as the JSON documents are). A share of
//! another field also names its denominator (`data-per`, `data-per-value`);
//! `data-fmt` says how the text was made from the values. A test can thus
//! read the DOM and check it number for number against the JSON.
//!
//! Invariants: no request leaves the page (no link, script or style source,
//! no font); every string from a trace is HTML-escaped; the page's size
//! does not follow the number of ranks or steps beyond fixed caps (rows are
//! capped, the heatmap is bucketed), so a 1,024-rank job stays far under
//! 2 MB.
//!
//! ```
//! use gputrace_format::*;
//! use gputrace_analysis::{analyze, Options};
//! use gputrace_html::{Html, Page, PageWriter};
//!
//! let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default())?;
//! let gemm = w.intern("<b>gemm</b>");
//! w.push(Event::Kernel(Kernel {
//!     start: Nanos(0), end: Nanos(100), device: DeviceId(0), context: ContextId(1),
//!     stream: StreamId(7), correlation: CorrelationId(0), name: gemm, grid: [1; 3], block: [1; 3],
//!     static_shared_mem: 0, dynamic_shared_mem: 0, registers: 0, graph_id: 0, graph_node_id: 0,
//! }))?;
//! let trace = TraceFile::from_bytes("doc.gtrace", w.finish(Trailer::default())?)?;
//! let report = analyze(&[trace], &Options::default())?;
//! let mut html = Vec::new();
//! Html::default().write(&Page::new(&report), &mut html)?;
//! let html = String::from_utf8(html)?;
//! assert!(html.contains(r#"data-key="ranks.0.devices.0.compute_ns" data-value="100""#));
//! assert!(html.contains("&lt;b&gt;gemm&lt;&#x2F;b&gt;") && !html.contains("<b>gemm"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod flame;
mod num;
mod sections;
mod serving;
mod straggler;
mod style;

use gputrace_analysis::{activity_view, Category, Productive, Report, Severity};
use gputrace_compare::Comparison;
use gputrace_format::Nanos;
use maud::{html, Markup, PreEscaped, DOCTYPE};
use num::{bar, legend, lowest, parts, rank_gpu_cells, td_name, td_text, trim, Fmt, Num};
use serde::Serialize;
use std::io::{self, Write};

/// What one page shows.
#[derive(Clone, Debug)]
pub struct Page<'a> {
    /// The report, as `report --json` serializes it.
    pub report: &'a Report,
    /// The ranks compared, as `compare --json` serializes it (multi-rank jobs).
    pub comparison: Option<&'a Comparison>,
    /// Why there is no comparison for a multi-rank job (shown in its place).
    pub comparison_note: Option<String>,
    /// The inputs as the user named them (for the page's title and the export command).
    pub inputs: Vec<String>,
}

impl<'a> Page<'a> {
    /// A page of `report` alone.
    pub fn new(report: &'a Report) -> Self {
        Page {
            report,
            comparison: None,
            comparison_note: None,
            inputs: Vec::new(),
        }
    }
}

/// A writer of pages: takes a [`Page`], writes bytes; the caller picks the file.
pub trait PageWriter {
    /// Write the page to `out`.
    fn write<W: Write>(&self, page: &Page<'_>, out: W) -> io::Result<()>;
}

/// The HTML writer and its caps (what keeps a large job's page small).
#[derive(Clone, Copy, Debug)]
pub struct Html {
    /// GPUs listed one row each; beyond, the ones with the lowest compute share.
    pub max_device_rows: usize,
    /// Steps listed per device; beyond, the slowest.
    pub max_step_rows: usize,
    /// Ranks listed in the waiting table (the ones that imposed the most).
    pub max_rank_rows: usize,
    /// Heatmap rows (ranks are bucketed beyond).
    pub heatmap_rows: usize,
    /// Heatmap columns (steps are bucketed beyond).
    pub heatmap_cols: usize,
    /// GPUs drawn one row each in the activity timeline when there are at most this many.
    pub max_timeline_rows: usize,
    /// Beyond `max_timeline_rows`: rows drawn (the slowest, the fastest, the straggler and
    /// a sample).
    pub timeline_sample_rows: usize,
    /// Step boundaries drawn per timeline row (every k-th beyond).
    pub max_timeline_steps: usize,
    /// Host flame graphs: ranks drawn, and slow steps drawn (the slowest).
    pub max_flame_graphs: usize,
}

impl Default for Html {
    fn default() -> Self {
        Html {
            max_device_rows: 64,
            max_step_rows: 60,
            max_rank_rows: 32,
            heatmap_rows: 48,
            heatmap_cols: 40,
            max_timeline_rows: 256,
            timeline_sample_rows: 64,
            max_timeline_steps: 100,
            max_flame_graphs: 8,
        }
    }
}

impl PageWriter for Html {
    fn write<W: Write>(&self, page: &Page<'_>, mut out: W) -> io::Result<()> {
        out.write_all(self.render(page).as_bytes())
    }
}

/// Escape text (and attribute values: every attribute here is double-quoted).
fn esc(s: &str) -> std::borrow::Cow<'_, str> {
    html_escape::encode_safe(s)
}

/// A string from a trace in a template, escaped as [`esc`] does (`/` too, beyond what maud
/// escapes), so every name reads the same wherever the page shows it.
struct EscText<'a>(&'a str);

impl maud::Render for EscText<'_> {
    fn render_to(&self, buffer: &mut String) {
        buffer.push_str(&esc(self.0));
    }
}

fn esc_text(s: &str) -> EscText<'_> {
    EscText(s)
}

/// The JSON text of a value, exactly as the JSON documents write it.
fn json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

fn ns(v: u64) -> String {
    Nanos(v).to_string()
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

/// A note under a capped table: `{shown} of {total} {what}. {every} is in` the JSON.
fn shown_note(shown: usize, total: usize, what: &str, every: &str) -> Markup {
    html! {
        @if shown < total {
            p.note { (shown) " of " (total) " " (what) ". " (every) " is in " code { "gputrace report --json" } "." }
        }
    }
}

impl Html {
    /// The page as one string.
    pub fn render(&self, page: &Page<'_>) -> String {
        let r = page.report;
        let title = if page.inputs.is_empty() {
            "gputrace report".to_string()
        } else {
            format!("gputrace report: {}", page.inputs.join(" "))
        };
        let devices: usize = r.ranks.iter().map(|rk| rk.devices.len()).sum();
        let synthetic = r.ranks.iter().any(|rk| rk.producer == "synthetic");
        let inputs = if page.inputs.is_empty() {
            "TRACES".to_string()
        } else {
            page.inputs.join(" ")
        };
        let page = html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width,initial-scale=1";
                    meta http-equiv="Content-Security-Policy"
                        content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:";
                    title { (esc_text(&title)) }
                    style { (PreEscaped(style::CSS)) }
                }
                body {
                    h1 { (esc_text(&title)) }
                    p.mute {
                        (r.ranks.len()) " rank(s), " (devices) " GPU(s)"
                        @if synthetic { " · " b { "synthetic data, not a GPU measurement" } }
                    }
                    (Num::u("schema_version", r.schema_version.into(), Fmt::Num).data())
                    @if r.lossy {
                        p.warn {
                            "The trace lost data: every number below describes what was recorded (see Losses in the text report or "
                            code { "gputrace info" } ")."
                        }
                    }
                    @if r.hta_compat.is_some() {
                        p.warn { "HTA-compatible mode: span, compute and idle are Holistic Trace Analysis' temporal breakdown, not gputrace's definitions." }
                    }
                    (self.headline(&r.productive))
                    (self.timeline(r, page.comparison))
                    (self.devices(r))
                    (self.productive_table(r))
                    (serving::section(r))
                    (self.hardware_summary(r))
                    (self.hardware(r))
                    (self.gaps(r))
                    (self.flame_graphs(r))
                    (self.steps(r, page.comparison))
                    (self.findings(r))
                    (self.kernels(r))
                    (self.collectives(r))
                    (self.comm_libraries(r))
                    @if r.ranks.len() >= 2 {
                        (self.straggler(page))
                    }
                    (self.cost(r))
                    h2 { "Timeline" }
                    p {
                        "To see every kernel, copy and collective on one timeline: "
                        code { "gputrace export " (esc_text(&inputs)) " --format perfetto --align -o job.pftrace" }
                        ", then open " code { "job.pftrace" }
                        " in the Perfetto UI (ui.perfetto.dev, “Open trace file”; the file stays in your browser)."
                    }
                    p.note {
                        "Written by gputrace from the same data as " code { "gputrace report --json" }
                        @if page.comparison.is_some() { " and " code { "gputrace compare --json" } }
                        ". Definitions: docs/metrics.md."
                    }
                    script { (PreEscaped(style::JS)) }
                }
            }
        };
        page.into_string()
    }

    fn headline(&self, p: &Productive) -> Markup {
        // A missing number is a dash, and the flag that fills it gets a line of its own.
        let tile = |class: &str, label: &str, n: Num, hint: Option<&String>| {
            let missing = n.text == "-";
            let hint = hint.filter(|_| missing).map(|h| h.split(" (").next().unwrap_or(h));
            let (n, class) = if missing {
                (n.text("—".into()), format!("{class} dash"))
            } else {
                (n, class.to_string())
            };
            html! {
                div class={ "tile " (class) } {
                    span.v { (n.span()) }
                    span.l { (label) }
                    @if let Some(h) = hint { span.l.flag { (esc_text(h)) } }
                }
            }
        };
        let pct0 = |key: &str, v: Option<f64>| {
            let n = Num::f(key, v, Fmt::Pct100);
            let t = v.map_or("-".into(), |x| format!("{x:.0}%"));
            n.text(t)
        };
        let mfu = Num::f("productive.mfu", p.mfu, Fmt::Frac);
        let mfu = match p.mfu {
            Some(m) => mfu.text(format!("{:.0}%", 100.0 * m)),
            None => mfu,
        };
        let cost = Num::f("productive.cost_per_million_tokens", p.cost_per_million_tokens, Fmt::Usd);
        let cost = match p.cost_per_million_tokens {
            Some(c) => cost.text(format!("${c:.2}")),
            None => cost,
        };
        let hours = |key: &str, v: f64| Num::f(key, Some(v), Fmt::Num).text(format!("{v:.4}")).span();
        html! {
            div.head {
                (tile("dash", "GPU-Util, as nvidia-smi and dashboards show it", pct0("productive.gpu_util_nvml_pct", p.gpu_util_nvml_pct), None))
                (tile("", "compute: time a compute kernel ran", pct0("productive.compute_pct", p.compute_pct), None))
                (tile("", "MFU: model FLOPs over peak", mfu, p.missing.get("mfu")))
                (tile("", "tokens/s", Num::f("productive.tokens_per_s", p.tokens_per_s, Fmt::Si), p.missing.get("tokens_per_s")))
                (tile("", "per million tokens", cost, p.missing.get("cost_per_million_tokens")))
            }
            p.mute {
                (Num::u("productive.steps", p.steps, Fmt::Num).span()) " steps · p50 step "
                (Num::secs("productive.step_time_p50_s", p.step_time_p50_s).span()) " · p95 step "
                (Num::secs("productive.step_time_p95_s", p.step_time_p95_s).span()) " · "
                (hours("productive.gpu_hours", p.gpu_hours)) " GPU-hours traced, "
                (hours("productive.productive_gpu_hours", p.productive_gpu_hours)) " productive, "
                (hours("productive.failed_gpu_hours", p.failed_gpu_hours)) " failed · outcome: "
                (esc_text(&p.outcome))
            }
        }
    }

    /// The GPU activity timeline: per GPU a row of bins (drawn by the page's script from
    /// the row's `data-value`, the device's `activity` in `report --json`), on one time
    /// scale from each GPU's first activity, with its step boundaries.
    fn timeline(&self, r: &Report, c: Option<&Comparison>) -> Markup {
        let stragglers: Vec<u32> = c.map(|c| c.stragglers.iter().map(|s| s.rank).collect()).unwrap_or_default();
        let all = activity_view::select(r, usize::MAX, &[]).total;
        let max = if all <= self.max_timeline_rows {
            all
        } else {
            self.timeline_sample_rows
        };
        let sel = activity_view::select(r, max, &stragglers);
        if sel.rows.is_empty() {
            return html! {};
        }
        let span = sel
            .rows
            .iter()
            .map(|&(ri, di)| {
                let d = &r.ranks[ri].devices[di];
                d.last_ns.unwrap_or(0).saturating_sub(d.activity.as_ref().map_or(0, |a| a.start_ns))
            })
            .max()
            .unwrap_or(0);
        let density = match sel.rows.len() {
            0..=16 => "tall",
            17..=64 => "",
            _ => "dense",
        };
        let row = |ri: usize, di: usize| {
            let (rk, d) = (&r.ranks[ri], &r.ranks[ri].devices[di]);
            let Some(a) = &d.activity else { return html! {} };
            let every = d.steps.len().div_ceil(self.max_timeline_steps.max(1)).max(1);
            let steps: Vec<(u64, i64)> = d
                .steps
                .iter()
                .step_by(every)
                .map(|s| (s.step, s.start_ns as i64 - a.start_ns as i64))
                .collect();
            let label = format!(
                "rank {} · gpu {}{}",
                rk.rank,
                d.device,
                if stragglers.contains(&rk.rank) { " · straggler" } else { "" }
            );
            html! {
                div.tl-row {
                    span.tl-l title=(esc_text(&format!("{label}, {}", rk.hostname))) { (esc_text(&label)) }
                    canvas.tl-c.n height="14" data-key={ "ranks." (ri) ".devices." (di) ".activity" }
                        data-value=(esc_text(&json(a))) data-fmt="bins"
                        data-end=(d.last_ns.unwrap_or(a.start_ns).saturating_sub(a.start_ns))
                        data-steps=(esc_text(&json(&steps))) data-label=(esc_text(&label)) {}
                }
            }
        };
        html! {
            h2 { "GPU activity over time" }
            p.mute {
                "Per GPU, its span in equal bins from its first activity (one time scale for all rows), each bin split like the span: compute at the bottom, then exposed communication, exposed transfer and idle by cause; a blank bin was not traced. Thin lines: step starts. Hover a bin for its numbers."
            }
            (legend())
            div class={ "tl " (density) } #timeline data-span=(span) {
                div.tl-row.tl-axis {
                    span.tl-l { "step / time" }
                    canvas.tl-x height="30" {}
                }
                @for &(ri, di) in &sel.rows {
                    (row(ri, di))
                }
                div #tip.tip hidden {}
            }
            @if let Some(note) = &sel.note {
                p.note {
                    (esc_text(note)) ". Every GPU's bins are in " code { "gputrace report --json" } " (" code { "activity" } ")."
                }
            }
        }
    }

    fn devices(&self, r: &Report) -> Markup {
        let mut rows: Vec<(usize, usize)> = Vec::new();
        for (ri, rk) in r.ranks.iter().enumerate() {
            for (di, d) in rk.devices.iter().enumerate() {
                if d.first_ns.is_some() {
                    rows.push((ri, di));
                }
            }
        }
        let total = rows.len();
        lowest(&mut rows, self.max_device_rows, |&(ri, di)| {
            let d = &r.ranks[ri].devices[di];
            ratio(d.time.compute_ns, d.time.span_ns)
        });
        let t = &r.totals;
        let span = "totals.span_ns";
        html! {
            h2 { "Where the GPU time went" }
            p.mute {
                "Per rank and GPU: the span (first to last GPU activity, all streams merged) split exactly into compute, exposed communication, exposed transfer and idle by cause. Click a column to sort."
            }
            (legend())
            div.scroll { table.sortable #devices {
                thead { tr {
                    th.r { "rank" } th.r { "gpu" } th { "host" } th.r { "span" } th.r { "compute" } th.r { "exp.comm" }
                    th.r { "exp.xfer" } th.r { "idle" } th.r { "host-bound" } th { "time" }
                } }
                tbody {
                    @for &(ri, di) in &rows {
                        @let d = &r.ranks[ri].devices[di];
                        @let k = |f: &str| format!("ranks.{ri}.devices.{di}.{f}");
                        @let span = k("span_ns");
                        tr {
                            (rank_gpu_cells(r, ri, di))
                            (td_text(&r.ranks[ri].hostname))
                            (Num::u(k("span_ns"), d.time.span_ns, Fmt::Ns).td())
                            (Num::pct(k("compute_ns"), d.time.compute_ns, &span, d.time.span_ns).td())
                            (Num::pct(k("exposed_communication_ns"), d.time.exposed_communication_ns, &span, d.time.span_ns).td())
                            (Num::pct(k("exposed_transfer_ns"), d.time.exposed_transfer_ns, &span, d.time.span_ns).td())
                            (Num::pct(k("idle_ns"), d.time.idle_ns, &span, d.time.span_ns).td())
                            (Num::pct(k("idle_causes.host_bound_ns"), d.idle_causes.host_bound_ns, &span, d.time.span_ns).td())
                            td.b { (bar(parts(d.time.compute_ns, d.time.exposed_communication_ns, d.time.exposed_transfer_ns, d.time.idle_ns, &d.idle_causes), d.time.span_ns)) }
                        }
                    }
                    tr.all {
                        td { "all" } td {} td {}
                        (Num::u(span, t.time.span_ns, Fmt::Ns).td())
                        (Num::pct("totals.compute_ns", t.time.compute_ns, span, t.time.span_ns).td())
                        (Num::pct("totals.exposed_communication_ns", t.time.exposed_communication_ns, span, t.time.span_ns).td())
                        (Num::pct("totals.exposed_transfer_ns", t.time.exposed_transfer_ns, span, t.time.span_ns).td())
                        (Num::pct("totals.idle_ns", t.time.idle_ns, span, t.time.span_ns).td())
                        (Num::pct("totals.idle_causes.host_bound_ns", t.idle_causes.host_bound_ns, span, t.time.span_ns).td())
                        td.b { (bar(parts(t.time.compute_ns, t.time.exposed_communication_ns, t.time.exposed_transfer_ns, t.time.idle_ns, &t.idle_causes), t.time.span_ns)) }
                    }
                }
            } }
            (shown_note(rows.len(), total, "GPUs shown: those with the lowest compute share", "Every GPU"))
        }
    }

    fn steps(&self, r: &Report, c: Option<&Comparison>) -> Markup {
        // The first rank's busiest device, and the straggler's when it is another rank.
        let busiest = |ri: usize| {
            r.ranks[ri]
                .devices
                .iter()
                .enumerate()
                .filter(|(_, d)| !d.steps.is_empty())
                .max_by_key(|(_, d)| d.time.compute_ns)
                .map(|(di, _)| (ri, di))
        };
        let straggler = c.and_then(|c| c.stragglers.first()).map(|s| s.rank);
        let mut shown: Vec<(usize, usize)> = Vec::new();
        if let Some(first) = (0..r.ranks.len()).find_map(busiest) {
            shown.push(first);
        }
        if let Some(s) = straggler {
            if let Some(x) = r.ranks.iter().position(|rk| rk.rank == s).and_then(busiest) {
                if !shown.iter().any(|(ri, _)| *ri == x.0) {
                    shown.push(x);
                }
            }
        }
        if shown.is_empty() {
            return html! {};
        }
        html! {
            h2 { "Steps" }
            p.mute { "Each step's window split like the span; " b { "slow" } ": longer than 1.5 times the device's median step." }
            @for (ri, di) in shown {
                (self.device_steps(r, ri, di, straggler == Some(r.ranks[ri].rank)))
            }
        }
    }

    /// One device's steps (the slowest `max_step_rows`), the slow ones marked.
    fn device_steps(&self, r: &Report, ri: usize, di: usize, is_straggler: bool) -> Markup {
        let (rk, d) = (&r.ranks[ri], &r.ranks[ri].devices[di]);
        let mut durations: Vec<u64> = d.steps.iter().map(|s| s.duration_ns).collect();
        durations.sort_unstable();
        let median = durations[durations.len() / 2];
        let mut idx: Vec<usize> = (0..d.steps.len()).collect();
        if idx.len() > self.max_step_rows {
            idx.sort_by_key(|&i| (std::cmp::Reverse(d.steps[i].duration_ns), i));
            idx.truncate(self.max_step_rows);
            idx.sort_unstable();
        }
        html! {
            h3 { "rank " (rk.rank) " gpu " (d.device) @if is_straggler { " (the straggler)" } }
            div.scroll { table.sortable.steps {
                thead { tr {
                    th.r { "step" } th.r { "duration" } th.r { "compute" } th.r { "exp.comm" } th.r { "exp.xfer" }
                    th.r { "idle" } th.r { "host-bound" } th { "time" }
                } }
                tbody {
                    @for &si in &idx {
                        @let s = &d.steps[si];
                        @let k = |f: &str| format!("ranks.{ri}.devices.{di}.steps.{si}.{f}");
                        @let dur = k("duration_ns");
                        tr class=[(median > 0 && s.duration_ns * 2 > median * 3).then_some("slow")] {
                            (Num::u(k("step"), s.step, Fmt::Num).td())
                            (Num::u(&dur, s.duration_ns, Fmt::Ns).td())
                            (Num::pct(k("compute_ns"), s.compute_ns, &dur, s.duration_ns).td())
                            (Num::pct(k("exposed_communication_ns"), s.exposed_communication_ns, &dur, s.duration_ns).td())
                            (Num::pct(k("exposed_transfer_ns"), s.exposed_transfer_ns, &dur, s.duration_ns).td())
                            (Num::pct(k("idle_ns"), s.idle_ns, &dur, s.duration_ns).td())
                            (Num::u(k("idle_causes.host_bound_ns"), s.idle_causes.host_bound_ns, Fmt::Ns).td())
                            td.b { (bar(parts(s.compute_ns, s.exposed_communication_ns, s.exposed_transfer_ns, s.idle_ns, &s.idle_causes), s.duration_ns)) }
                        }
                    }
                }
            } }
            @if idx.len() < d.steps.len() {
                p.note { "The " (idx.len()) " slowest of " (d.steps.len()) " steps shown; median step " (ns(median)) "." }
            }
        }
    }

    fn findings(&self, r: &Report) -> Markup {
        html! {
            h2 { "Findings" }
            @if r.findings.is_empty() {
                p { "No rule fired: no large idle, exposed communication or transfer problem found." }
            }
            @for (i, f) in r.findings.iter().enumerate() {
                @let (class, sev) = match f.severity {
                    Severity::High => ("high", "HIGH"),
                    Severity::Medium => ("medium", "MEDIUM"),
                    Severity::Low => ("low", "LOW"),
                    Severity::Info => ("info", "INFO"),
                };
                div.finding.(class) {
                    p { span.sev { (sev) } b { (esc_text(&f.title)) } }
                    p { span.mute { "evidence:" } " " (esc_text(&f.evidence)) }
                    p { span.mute { "next:" } " " (esc_text(&f.next_step)) }
                    // Keys with a dot would not be a path; the rules' keys have none.
                    @for (k, v) in f.values.iter().filter(|(k, _)| !k.contains('.')) {
                        (Num::f(format!("findings.{i}.values.{k}"), Some(*v), Fmt::Num).text(trim(*v)).data())
                    }
                }
            }
        }
    }

    fn kernels(&self, r: &Report) -> Markup {
        if r.top_kernels.is_empty() {
            return html! {};
        }
        html! {
            h2 { "Top kernels" }
            p.mute { "Summed over ranks; share of all kernel time." }
            div.scroll { table.sortable #kernels {
                thead { tr { th.r { "time" } th.r { "share" } th.r { "count" } th.r { "mean" } th { "kind" } th { "name" } } }
                tbody {
                    @for (i, k) in r.top_kernels.iter().enumerate() {
                        @let key = |f: &str| format!("top_kernels.{i}.{f}");
                        tr {
                            (Num::u(key("total_ns"), k.total_ns, Fmt::Ns).td())
                            (Num::f(key("share"), Some(k.share), Fmt::Frac).td())
                            (Num::u(key("count"), k.count, Fmt::Num).td())
                            (Num::u(key("mean_ns"), k.mean_ns, Fmt::Ns).td())
                            (td_text(if k.category == Category::Communication { "comm" } else { "compute" }))
                            (td_name(&k.name))
                        }
                    }
                }
            } }
            @if !r.copies.is_empty() {
                h2 { "Copies and memsets" }
                div.scroll { table.sortable {
                    thead { tr {
                        th { "kind" } th { "host memory" } th.r { "count" } th.r { "bytes" } th.r { "time" } th.r { "GB/s" }
                    } }
                    tbody {
                        @for (i, c) in r.copies.iter().enumerate() {
                            @let key = |f: &str| format!("copies.{i}.{f}");
                            tr {
                                (td_text(&c.kind))
                                (td_text(if c.pageable { "pageable" } else { "-" }))
                                (Num::u(key("count"), c.count, Fmt::Num).td())
                                (Num::bytes(key("bytes"), c.bytes).td())
                                (Num::u(key("total_ns"), c.total_ns, Fmt::Ns).td())
                                (Num::f(key("achieved_gbps"), Some(c.achieved_gbps), Fmt::Num).td())
                            }
                        }
                    }
                } }
            }
        }
    }

    fn collectives(&self, r: &Report) -> Markup {
        if r.collectives.is_empty() {
            return html! {};
        }
        html! {
            h2 { "Collectives" }
            p.mute {
                "NCCL collectives per communicator and operation, summed over ranks; time: GPU time of the collectives linked to their kernel; bandwidths as NCCL-tests."
            }
            div.scroll { table.sortable #collectives {
                thead { tr {
                    th { "communicator" } th { "op" } th.r { "count" } th.r { "bytes" } th.r { "time" } th.r { "mean" }
                    th.r { "algbw GB/s" } th.r { "busbw GB/s" } th { "algorithms" } th { "protocols" }
                } }
                tbody {
                    @for (i, c) in r.collectives.iter().enumerate() {
                        @let key = |f: &str| format!("collectives.{i}.{f}");
                        @let comm = if c.communicator_name.is_empty() {
                            c.communicator.clone()
                        } else {
                            format!("{} {}", c.communicator_name, c.communicator)
                        };
                        tr {
                            (td_text(&comm))
                            (td_text(&c.op))
                            (Num::u(key("count"), c.count, Fmt::Num).td())
                            (Num::bytes(key("bytes"), c.bytes).td())
                            (Num::u(key("time_ns"), c.time_ns, Fmt::Ns).td())
                            (Num::u(key("mean_ns"), c.mean_ns, Fmt::Ns).td())
                            (Num::f(key("algbw_gbps"), c.algbw_gbps, Fmt::Num).td())
                            (Num::f(key("busbw_gbps"), c.busbw_gbps, Fmt::Num).td())
                            (sections::counts_cell(&key("algorithms"), &c.algorithms))
                            (sections::counts_cell(&key("protocols"), &c.protocols))
                        }
                    }
                }
            } }
        }
    }

    fn cost(&self, r: &Report) -> Markup {
        let Some(c) = &r.cost else { return html! {} };
        let usd = |k: &str, v: f64| Num::f(format!("cost.{k}"), Some(v), Fmt::Usd).span();
        html! {
            h2 {
                "Cost at "
                (Num::f("cost.usd_per_gpu_hour", Some(c.usd_per_gpu_hour), Fmt::Usd).text(format!("${:.2}", c.usd_per_gpu_hour)).span())
                " per GPU-hour"
            }
            p {
                "spans " (usd("span_usd", c.span_usd))
                "; idle " (usd("idle_usd", c.idle_usd))
                ", exposed communication " (usd("exposed_communication_usd", c.exposed_communication_usd))
                ", exposed transfer " (usd("exposed_transfer_usd", c.exposed_transfer_usd))
                ", startup/teardown " (usd("startup_teardown_usd", c.startup_teardown_usd))
                ": not compute " (usd("not_compute_usd", c.not_compute_usd))
            }
        }
    }
}
