//! The page's sections that repeat what the text report says in tables: the productive
//! work per rank, the GPUs' own counters, the longest idle gaps and what the CPU did in
//! them, exposed communication by library and operation, and the collectives with their
//! algorithms and protocols. Every number carries its `data-key` like the rest of the page.

use super::*;
use std::collections::BTreeMap;

/// A map entry's path is only a path when its key has no dot.
fn path_safe(k: &str) -> bool {
    !k.contains('.')
}

/// `RING ×120, TREE ×8`, most first, each count a number of the page.
fn counts(key: &str, m: &BTreeMap<String, u64>) -> String {
    let mut v: Vec<(&String, &u64)> = m.iter().collect();
    v.sort_by_key(|(k, n)| (std::cmp::Reverse(**n), *k));
    let parts: Vec<String> = v
        .iter()
        .map(|(k, n)| {
            if path_safe(k) {
                format!("{} ×{}", esc(k), Num::u(format!("{key}.{k}"), **n, Fmt::Num).span())
            } else {
                format!("{} ×{n}", esc(k))
            }
        })
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(", ")
    }
}

/// A cell that holds markup already escaped.
fn td_html(html: String, sort: &str) -> String {
    format!(r#"<td data-sort="{}">{html}</td>"#, esc(sort))
}

impl Html {
    /// Steps, p50/p95 step time, throughput, GPU-Util, compute, MFU and outcome per rank
    /// (`ranks.N.productive`) and for the job (`productive`).
    pub(crate) fn productive_table(&self, o: &mut String, r: &Report) {
        let p = &r.productive;
        let source = match p.step_source {
            gputrace_analysis::StepSource::StepMarks => "gputrace step marks",
            gputrace_analysis::StepSource::ProfilerStep => "ProfilerStep ranges",
            gputrace_analysis::StepSource::Inferred => "inferred from the kernel pattern",
            gputrace_analysis::StepSource::None => "none found",
        };
        let _ = write!(
            o,
            "<h2>Productive work</h2><p class=\"mute\">Steps from {source}; GPU-Util as nvidia-smi computes it (the share of {} windows in which a kernel ran); compute: the share of the span a compute kernel ran; MFU: model FLOPs over the GPU's peak.</p>",
            Num::f("productive.gpu_util_window_s", Some(p.gpu_util_window_s), Fmt::Num)
                .text(format!("{:.3} s", p.gpu_util_window_s))
                .span()
        );
        o.push_str("<table class=\"sortable\" id=\"productive\"><thead><tr><th class=\"r\">rank</th><th class=\"r\">steps</th><th class=\"r\">p50 step</th><th class=\"r\">p95 step</th><th class=\"r\">tokens/s</th><th class=\"r\">samples/s</th><th class=\"r\">GPU-Util</th><th class=\"r\">compute</th><th class=\"r\">MFU</th><th>outcome</th></tr></thead><tbody>\n");
        let row = |o: &mut String, first: String, k: &str, x: &Productive, class: &str| {
            let key = |f: &str| format!("{k}{f}");
            let secs = |f: &str, v: Option<f64>| Num::f(key(f), v.map(|s| s * 1e9), Fmt::Ns).value_of(&v).td();
            let _ = writeln!(
                o,
                "<tr{class}>{first}{}{}{}{}{}{}{}{}{}</tr>",
                Num::u(key("steps"), x.steps, Fmt::Num).td(),
                secs("step_time_p50_s", x.step_time_p50_s),
                secs("step_time_p95_s", x.step_time_p95_s),
                Num::f(key("tokens_per_s"), x.tokens_per_s, Fmt::Si).td(),
                Num::f(key("samples_per_s"), x.samples_per_s, Fmt::Si).td(),
                Num::f(key("gpu_util_nvml_pct"), x.gpu_util_nvml_pct, Fmt::Pct100).td(),
                Num::f(key("compute_pct"), x.compute_pct, Fmt::Pct100).td(),
                Num::f(key("mfu"), x.mfu, Fmt::Frac).td(),
                td_text(&x.outcome)
            );
        };
        let mut shown: Vec<usize> = (0..r.ranks.len()).collect();
        if shown.len() > self.max_device_rows {
            // The ranks that computed least of their span first: where the time goes.
            let share = |i: &usize| r.ranks[*i].productive.compute_pct.unwrap_or(0.0);
            shown.sort_by(|a, b| share(a).total_cmp(&share(b)).then(a.cmp(b)));
            shown.truncate(self.max_device_rows);
            shown.sort_unstable();
        }
        for &ri in &shown {
            let rk = &r.ranks[ri];
            let first = Num::u(format!("ranks.{ri}.rank"), rk.rank.into(), Fmt::Num).td();
            row(o, first, &format!("ranks.{ri}.productive."), &rk.productive, "");
        }
        row(o, "<td>job</td>".into(), "productive.", p, " class=\"all\"");
        o.push_str("</tbody></table>\n");
        if shown.len() < r.ranks.len() {
            let _ = writeln!(
                o,
                "<p class=\"note\">{} of {} ranks shown: those with the lowest compute share. Every rank is in <code>gputrace report --json</code>.</p>",
                shown.len(),
                r.ranks.len()
            );
        }
        let mut sources = Vec::new();
        for (what, s) in [
            ("tokens from", &p.tokens_source),
            ("samples from", &p.samples_source),
            ("model FLOPs:", &p.model_flops_source),
            ("peak:", &p.peak_source),
        ] {
            if let Some(s) = s {
                sources.push(format!("{what} {}", esc(s)));
            }
        }
        if !sources.is_empty() {
            let _ = writeln!(o, "<p class=\"note\">{}</p>", sources.join("; "));
        }
    }

    /// The GPUs' own counters over the span, one row per GPU (`hardware` of each device).
    pub(crate) fn hardware_summary(&self, o: &mut String, r: &Report) {
        let mut rows: Vec<(usize, usize)> = Vec::new();
        for (ri, rk) in r.ranks.iter().enumerate() {
            for (di, d) in rk.devices.iter().enumerate() {
                if d.hardware.is_some() {
                    rows.push((ri, di));
                }
            }
        }
        if rows.is_empty() {
            return;
        }
        let total = rows.len();
        if rows.len() > self.max_device_rows {
            let pct = |&(ri, di): &(usize, usize)| {
                r.ranks[ri].devices[di]
                    .hardware
                    .as_ref()
                    .and_then(|h| h.sm_clock_pct_of_max)
                    .unwrap_or(100.0)
            };
            rows.sort_by(|a, b| pct(a).total_cmp(&pct(b)).then(a.cmp(b)));
            rows.truncate(self.max_device_rows);
            rows.sort_unstable();
        }
        o.push_str("<h2>Hardware</h2><p class=\"mute\">The GPU's own counters (NVML and CUPTI PM samples) over the span. util NVML: NVML's GPU-Util as sampled; timeline: the same definition computed from the kernels (they should agree within a few points); throttled: share of the sampled time with a slowdown reason other than idle.</p>");
        o.push_str("<table class=\"sortable\" id=\"hardware-summary\"><thead><tr><th class=\"r\">rank</th><th class=\"r\">gpu</th><th class=\"r\">util NVML</th><th class=\"r\">timeline</th><th class=\"r\">mem util</th><th class=\"r\">SM clock</th><th class=\"r\">max</th><th class=\"r\">of max</th><th class=\"r\">power</th><th class=\"r\">temp. max</th><th class=\"r\">throttled</th><th>by reason</th></tr></thead><tbody>\n");
        for &(ri, di) in &rows {
            let (rk, d) = (&r.ranks[ri], &r.ranks[ri].devices[di]);
            let Some(h) = &d.hardware else { continue };
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
            let by: Vec<String> = reasons
                .iter()
                .map(|(k, v)| {
                    let n = Num::pct(
                        format!("ranks.{ri}.devices.{di}.hardware.throttle_by_reason_ns.{k}"),
                        **v,
                        key("throttle_sampled_ns"),
                        h.throttle_sampled_ns,
                    );
                    if path_safe(k) {
                        format!("{} {}", esc(k), n.span())
                    } else {
                        esc(k).into_owned()
                    }
                })
                .collect();
            let _ = writeln!(
                o,
                "<tr>{}{}{}{}{}{}{}{}{}{}{}{}</tr>",
                Num::u(format!("ranks.{ri}.rank"), rk.rank.into(), Fmt::Num).td(),
                Num::u(format!("ranks.{ri}.devices.{di}.device"), d.device.into(), Fmt::Num).td(),
                Num::f(key("gpu_util_sampled_pct"), h.gpu_util_sampled_pct, Fmt::Pct100).td(),
                Num::f(key("gpu_util_nvml_pct"), h.gpu_util_nvml_pct, Fmt::Pct100).td(),
                Num::f(key("mem_util_sampled_pct"), h.mem_util_sampled_pct, Fmt::Pct100).td(),
                unit("sm_clock_mean_mhz", h.sm_clock_mean_mhz, "MHz").td(),
                unit("sm_clock_max_mhz", h.sm_clock_max_mhz.map(|m| m as f64), "MHz")
                    .value_of_num(&h.sm_clock_max_mhz)
                    .td(),
                Num::f(key("sm_clock_pct_of_max"), h.sm_clock_pct_of_max, Fmt::Pct100).td(),
                unit("power_mean_w", h.power_mean_w, "W").td(),
                unit("temperature_max_c", h.temperature_max_c.map(|t| t as f64), "°C")
                    .value_of_num(&h.temperature_max_c)
                    .td(),
                Num::pct(
                    key("throttled_ns"),
                    h.throttled_ns,
                    key("throttle_sampled_ns"),
                    h.throttle_sampled_ns
                )
                .td(),
                td_html(if by.is_empty() { "-".into() } else { by.join(", ") }, "")
            );
        }
        o.push_str("</tbody></table>\n");
        if rows.len() < total {
            let _ = writeln!(
                o,
                "<p class=\"note\">{} of {total} GPUs with counters shown: those with the lowest SM clock. Every one is in <code>gputrace report --json</code>.</p>",
                rows.len()
            );
        }
    }

    /// The job's longest idle gaps (across GPUs), with what the CPU was doing during each.
    pub(crate) fn gaps(&self, o: &mut String, r: &Report) {
        let mut gaps: Vec<(usize, usize, usize)> = Vec::new();
        for (ri, rk) in r.ranks.iter().enumerate() {
            for (di, d) in rk.devices.iter().enumerate() {
                gaps.extend((0..d.longest_gaps.len()).map(|gi| (ri, di, gi)));
            }
        }
        if gaps.is_empty() {
            return;
        }
        let gap = |&(ri, di, gi): &(usize, usize, usize)| &r.ranks[ri].devices[di].longest_gaps[gi];
        gaps.sort_by_key(|g| (std::cmp::Reverse(gap(g).duration_ns), *g));
        gaps.truncate(10);
        o.push_str("<h2>Longest idle gaps</h2><p class=\"mute\">The GPU ran nothing; cause from the CPU side (host-bound: the CPU was busy before launching the next work; latency: the work was queued; synchronization: the CPU waited). “CPU was in”: the calls and ranges that overlapped the gap most.</p>");
        o.push_str("<table class=\"sortable\" id=\"gaps\"><thead><tr><th class=\"r\">rank</th><th class=\"r\">gpu</th><th class=\"r\">idle</th><th>cause</th><th class=\"r\">step</th><th>next work</th><th>CPU was in</th></tr></thead><tbody>\n");
        for g in &gaps {
            let (ri, di, gi) = *g;
            let x = gap(g);
            let key = |f: &str| format!("ranks.{ri}.devices.{di}.longest_gaps.{gi}.{f}");
            let cpu: Vec<String> = x
                .cpu_activity
                .iter()
                .enumerate()
                .map(|(k, a)| {
                    format!(
                        "<div class=\"cpu\"><span class=\"ell-i\" title=\"{0}\">{0}</span> ({1})</div>",
                        esc(&a.name),
                        Num::u(key(&format!("cpu_activity.{k}.overlap_ns")), a.overlap_ns, Fmt::Ns).span()
                    )
                })
                .collect();
            let step = match x.step {
                Some(s) => Num::u(key("step"), s, Fmt::Num).td(),
                None => td_text("-"),
            };
            let _ = writeln!(
                o,
                "<tr>{}{}{}{}{step}{}{}</tr>",
                Num::u(format!("ranks.{ri}.rank"), r.ranks[ri].rank.into(), Fmt::Num).td(),
                Num::u(
                    format!("ranks.{ri}.devices.{di}.device"),
                    r.ranks[ri].devices[di].device.into(),
                    Fmt::Num
                )
                .td(),
                Num::u(key("duration_ns"), x.duration_ns, Fmt::Ns).td(),
                td_text(x.cause.name()),
                td_name(&x.next_work),
                td_html(if cpu.is_empty() { "-".into() } else { cpu.join("") }, "")
            );
        }
        o.push_str("</tbody></table>\n");
    }

    /// Exposed communication of the job by library and operation (`totals`).
    pub(crate) fn comm_libraries(&self, o: &mut String, r: &Report) {
        let t = &r.totals;
        if t.exposed_communication_ns == 0 {
            return;
        }
        let mut rows: Vec<(&str, &str, u64)> = t
            .exposed_communication_by_library_ns
            .iter()
            .flat_map(|(lib, ops)| ops.iter().map(move |(op, ns)| (lib.as_str(), op.as_str(), *ns)))
            .collect();
        rows.sort_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(b.0)).then(a.1.cmp(b.1)));
        o.push_str("<h2>Exposed communication by library and operation</h2><p class=\"mute\">Communication not under compute, by the classification rule that made each kernel communication (<code>gputrace report --explain-classes</code> audits it), summed over GPUs.</p>");
        o.push_str("<table class=\"sortable\" id=\"comm-libraries\"><thead><tr><th>library</th><th>operation</th><th class=\"r\">exposed</th><th class=\"r\">share</th><th>share</th></tr></thead><tbody>\n");
        let all = "totals.exposed_communication_ns";
        for (lib, op, v) in rows.iter().take(self.max_rank_rows) {
            let (value, share) = if path_safe(lib) && path_safe(op) {
                let k = format!("totals.exposed_communication_by_library_ns.{lib}.{op}");
                (Num::u(&k, *v, Fmt::Ns).td(), Num::pct(&k, *v, all, t.exposed_communication_ns).td())
            } else {
                (td_text(&ns(*v)), td_text("-"))
            };
            let _ = writeln!(
                o,
                "<tr>{}{}{value}{share}<td class=\"b\">{}</td></tr>",
                td_text(lib),
                td_text(op),
                bar([0, *v, 0, 0, 0, 0, 0], t.exposed_communication_ns)
            );
        }
        o.push_str("</tbody></table>\n");
        if rows.len() > self.max_rank_rows {
            let _ = writeln!(
                o,
                "<p class=\"note\">{} more in <code>gputrace report --json</code>.</p>",
                rows.len() - self.max_rank_rows
            );
        }
    }

    /// The algorithms and protocols each collective ran with (`collectives.N.algorithms`,
    /// `.protocols`), as a cell each.
    pub(crate) fn algorithms_cells(i: usize, c: &gputrace_analysis::CollectiveStat) -> String {
        format!(
            "{}{}",
            td_html(counts(&format!("collectives.{i}.algorithms"), &c.algorithms), ""),
            td_html(counts(&format!("collectives.{i}.protocols"), &c.protocols), "")
        )
    }
}

impl Num {
    /// Keep the text, but name another value (an integer field shown with its unit) as the JSON's.
    fn value_of_num<T: Serialize>(mut self, v: &T) -> Num {
        self.value = json(v);
        self
    }
}
