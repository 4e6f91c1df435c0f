//! `gputrace compare`'s straggler view on the page: the stragglers and why, the
//! arrival-lateness heatmap by rank × step, and the waiting each rank imposed. Every number's
//! `data-key` is a path into `compare --json`, prefixed `compare.`.

use crate::num::{td_text, Fmt, Num};
use crate::{esc_text, ns, Html, Page};
use gputrace_compare::Comparison;
use maud::{html, Markup};

impl Html {
    pub(crate) fn straggler(&self, page: &Page<'_>) -> Markup {
        let Some(c) = page.comparison else {
            return html! {
                h2 { "Stragglers" }
                p.mute { "No cross-rank comparison: " (esc_text(page.comparison_note.as_deref().unwrap_or("not computed"))) }
            };
        };
        // Ranks are sorted by imposed wait in the comparison: the first are the worst.
        let max = c.ranks.iter().map(|x| x.wait_imposed_ns).max().unwrap_or(0);
        let shown = c.ranks.len().min(self.max_rank_rows);
        html! {
            h2 { "Stragglers" }
            p.mute {
                (Num::u("compare.matched", c.matched as u64, Fmt::Num).span()) " collectives matched across "
                (c.ranks.len()) " ranks (" (esc_text(&c.matching)) "); clocks aligned on the collectives' end times, residual "
                (Num::u("compare.clock.residual_ns", c.clock.residual_ns, Fmt::Ns).span()) "."
            }
            @for w in &c.warnings {
                p.warn { (esc_text(w)) }
            }
            @if c.stragglers.is_empty() {
                p { "No straggler: no rank imposes a disproportionate share of the waiting." }
            }
            @for (i, s) in c.stragglers.iter().enumerate() {
                @let key = |f: &str| format!("compare.stragglers.{i}.{f}");
                div.finding.high {
                    p {
                        span.sev { "STRAGGLER" }
                        b { "rank " (Num::u(key("rank"), s.rank.into(), Fmt::Num).span()) }
                        ": arrived last at " (Num::u(key("arrived_last"), s.arrived_last, Fmt::Num).span())
                        " collectives and made the others wait " (Num::u(key("wait_imposed_ns"), s.wait_imposed_ns, Fmt::Ns).span())
                        " in all (" (Num::f(key("score"), Some(s.score), Fmt::Frac).span()) " of all waiting); cause: "
                        b { (esc_text(s.cause.name())) }
                    }
                    p { (esc_text(&s.why)) }
                }
            }
            (self.heatmap(c))
            h3 { "Waiting imposed per rank" }
            div.scroll { table.sortable #waiting {
                thead { tr {
                    th.r { "rank" } th { "host" } th.r { "last at" } th.r { "imposed" } th.r { "waited" }
                    th.r { "mean lateness" } th.r { "compute" } th.r { "host idle" } th { "imposed" }
                } }
                tbody {
                    @for (i, x) in c.ranks.iter().take(shown).enumerate() {
                        @let key = |f: &str| format!("compare.ranks.{i}.{f}");
                        @let w = if max == 0 { 0.0 } else { 1000.0 * x.wait_imposed_ns as f64 / max as f64 };
                        tr {
                            (Num::u(key("rank"), x.rank.into(), Fmt::Num).td())
                            (td_text(&x.host))
                            (Num::u(key("arrived_last"), x.arrived_last, Fmt::Num).td())
                            (Num::u(key("wait_imposed_ns"), x.wait_imposed_ns, Fmt::Ns).td())
                            (Num::u(key("waited_ns"), x.waited_ns, Fmt::Ns).td())
                            (Num::i(key("mean_lateness_ns"), x.mean_lateness_ns).td())
                            (Num::u(key("compute_ns"), x.compute_ns, Fmt::Ns).td())
                            (Num::u(key("host_idle_ns"), x.host_idle_ns, Fmt::Ns).td())
                            td.b {
                                svg.bar viewBox="0 0 1000 12" preserveAspectRatio="none" {
                                    rect.host width=(format!("{w:.2}")) height="12" {}
                                }
                            }
                        }
                    }
                }
            } }
            @if shown < c.ranks.len() {
                p.note {
                    "The " (shown) " ranks that imposed the most waiting, of " (c.ranks.len()) "; all in "
                    code { "gputrace compare --json" } "."
                }
            }
        }
    }

    /// Lateness by rank × step, ranks and steps bucketed to at most
    /// `heatmap_rows` × `heatmap_cols` cells; a cell shows its bucket's largest
    /// lateness and names that entry of `compare.lateness` as its key.
    fn heatmap(&self, c: &Comparison) -> Markup {
        let rows = c.lateness.len();
        let cols = c.lateness.first().map_or(0, Vec::len);
        if rows == 0 || cols == 0 {
            return html! {};
        }
        let (br, bc) = (rows.div_ceil(self.heatmap_rows.max(1)), cols.div_ceil(self.heatmap_cols.max(1)));
        let (nr, nc) = (rows.div_ceil(br), cols.div_ceil(bc));
        let max = c.lateness.iter().flatten().copied().max().unwrap_or(0).max(1);
        // Every row is tall enough for its label.
        let (left, top, cw, ch) = (110usize, 8usize, (760 / nc).clamp(6, 40), (480 / nr).clamp(13, 22));
        let (w, h) = (left + nc * cw + 10, top + nr * ch + 40);
        let rank_of = |i: usize| c.lateness_ranks.get(i).copied().unwrap_or(i as u32);
        let label = |gi: usize| {
            let (r0, r1) = (gi * br, ((gi + 1) * br).min(rows));
            if r1 - r0 == 1 {
                format!("rank {}", rank_of(r0))
            } else {
                format!("ranks {}-{}", rank_of(r0), rank_of(r1 - 1))
            }
        };
        // The bucket's largest lateness and where it is: (rank index, step index, ns).
        let cell = |gi: usize, gj: usize| {
            let (r0, r1) = (gi * br, ((gi + 1) * br).min(rows));
            let (c0, c1) = (gj * bc, ((gj + 1) * bc).min(cols));
            let (mut bi, mut bj, mut v) = (r0, c0, 0u64);
            for (i, row) in c.lateness.iter().enumerate().take(r1).skip(r0) {
                for (j, &x) in row.iter().enumerate().take(c1).skip(c0) {
                    if x > v {
                        (bi, bj, v) = (i, j, x);
                    }
                }
            }
            let steps = if c1 - c0 == 1 {
                format!("step {c0}")
            } else {
                format!("steps {c0}-{}", c1 - 1)
            };
            (bi, bj, v, steps)
        };
        // Step numbers under the columns (as many as fit), then the colour scale.
        let axis = top + nr * ch + 13;
        let every = (28 / cw).max(1);
        let scale_y = axis + 8;
        html! {
            h3 { "Arrival lateness at collectives" }
            p.mute {
                "How far behind the earliest rank each rank arrived at the step's collectives, by rank × step"
                @if br > 1 || bc > 1 { " (buckets of " (br) " rank(s) × " (bc) " step(s), each showing its largest)" }
                "; the stronger the colour, the later (scale below); largest " (ns(max)) "."
            }
            div.scroll {
                svg.hm width=(w) height=(h) viewBox={ "0 0 " (w) " " (h) } role="img" {
                    @for gi in 0..nr {
                        @let y = top + gi * ch;
                        @let label = label(gi);
                        text x=(left - 4) y=(y + ch.min(12) - 1) text-anchor="end" { (label) }
                        @for gj in 0..nc {
                            @let (bi, bj, v, steps) = cell(gi, gj);
                            @let x = left + gj * cw;
                            rect.bg x=(x) y=(y) width=(cw) height=(ch) {}
                            rect.cell.n x=(x) y=(y) width=(cw) height=(ch) fill-opacity=(format!("{:.3}", v as f64 / max as f64))
                                data-key={ "compare.lateness." (bi) "." (bj) } data-value=(v) data-fmt="ns" {
                                title { (label) ", " (steps) ": " (ns(v)) " late" }
                            }
                        }
                    }
                    @for gj in (0..nc).step_by(every) {
                        text.ax x=(left + gj * cw + cw / 2) y=(axis) { (gj * bc) }
                    }
                    text x=(left - 4) y=(axis) text-anchor="end" { "step" }
                    text x=(left - 4) y=(scale_y + 10) text-anchor="end" { "0" }
                    @for k in 0..10 {
                        @let x = left + k * 20;
                        rect.bg x=(x) y=(scale_y) width="20" height="12" {}
                        rect.cell x=(x) y=(scale_y) width="20" height="12" fill-opacity=(format!("{:.2}", (k as f64 + 0.5) / 10.0)) {}
                    }
                    text x=(left + 204) y=(scale_y + 10) { (ns(max)) " late" }
                }
            }
        }
    }
}
