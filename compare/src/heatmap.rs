//! An SVG heatmap of lateness by rank × step: one row per rank, one column
//! per step (or per group of collectives), darker red = later, with a step
//! axis, a colour scale in µs and the named straggler marked.
//!
//! Invariants: the document is at most [`MAX_ROWS`] × [`MAX_COLUMNS`] cells
//! whatever the job's shape (ranks are grouped into bands and steps into
//! bins, each cell showing the largest mean lateness it covers, so a late
//! rank never averages away), and every text fits inside the document
//! (widths estimated at [`CHAR_WIDTH`] of the font size per character,
//! generous for the sans-serif fonts renderers use).

use crate::Comparison;
use std::fmt::Write;

/// Most rows drawn: more ranks are grouped into bands of consecutive ranks.
pub const MAX_ROWS: usize = 96;
/// Most columns drawn: more steps are grouped into bins of consecutive steps.
pub const MAX_COLUMNS: usize = 160;
/// Estimated advance of one character, as a fraction of the font size.
pub const CHAR_WIDTH: f64 = 0.62;

const FONT: usize = 11;
const TITLE_FONT: usize = 13;
const LEFT: usize = 110;
const TOP: usize = 48;
const LEGEND_W: usize = 150;

/// What the heatmap shows, independent of how it was computed.
#[derive(Clone, Debug)]
pub struct Heatmap<'a> {
    /// Mean lateness, ns, per row (rank) per column (step).
    pub values: &'a [Vec<u64>],
    /// Rank id of each row.
    pub ranks: &'a [u32],
    /// The rank named as the straggler, if any.
    pub straggler: Option<u32>,
    /// What a column is: `step` (ProfilerStep) or `collective group`.
    pub column: &'a str,
}

/// Render the comparison's heatmap as a standalone SVG document.
pub fn heatmap_svg(c: &Comparison) -> String {
    let column = if c.ranks.iter().any(|r| !r.steps.is_empty()) {
        "step"
    } else {
        "collective group"
    };
    render(&Heatmap {
        values: &c.lateness,
        ranks: &c.lateness_ranks,
        straggler: c.stragglers.first().map(|s| s.rank),
        column,
    })
}

/// Ranges `[lo, hi)` that split `n` items into at most `max` groups of equal size (the
/// last may be smaller).
fn groups(n: usize, max: usize) -> Vec<(usize, usize)> {
    let per = n.div_ceil(max.max(1)).max(1);
    (0..n).step_by(per).map(|lo| (lo, (lo + per).min(n))).collect()
}

fn text_width(text: &str, font: usize) -> usize {
    (text.chars().count() as f64 * CHAR_WIDTH * font as f64).ceil() as usize
}

fn us(ns: u64) -> String {
    let v = ns as f64 / 1e3;
    if v >= 100.0 {
        format!("{v:.0} µs")
    } else {
        format!("{v:.1} µs")
    }
}

/// Escape text for SVG content and attributes.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn fill(v: u64, max: u64) -> String {
    let f = v as f64 / max.max(1) as f64;
    let g = (255.0 * (1.0 - f)).round() as u8;
    format!("rgb(255,{g},{g})")
}

/// Render `h` as a standalone SVG document.
pub fn render(h: &Heatmap<'_>) -> String {
    let l = Layout::of(h);
    let mut s = String::new();
    write_title(&mut s, &l);
    write_rows(&mut s, h, &l);
    write_straggler(&mut s, &l);
    write_step_axis(&mut s, h, &l);
    write_legend(&mut s, &l);
    s.push_str("</svg>");
    s
}

/// Where everything goes: the cells after grouping rows and columns, their size, and the page's.
struct Layout {
    /// Rows of ranks (`[start, end)` indices into the heatmap's rows), one per drawn row.
    row_groups: Vec<(usize, usize)>,
    /// Columns (`[start, end)`), one per drawn column.
    col_groups: Vec<(usize, usize)>,
    /// Each cell: the largest value it covers.
    cells: Vec<Vec<u64>>,
    /// The largest cell.
    max: u64,
    cell_w: usize,
    cell_h: usize,
    grid_w: usize,
    grid_h: usize,
    /// The drawn row that holds the straggler.
    straggler_row: Option<usize>,
    /// The text after the straggler's row, and its width.
    marker: Option<String>,
    marker_w: usize,
    title: &'static str,
    subtitle: String,
    width: usize,
    height: usize,
}

impl Layout {
    fn of(h: &Heatmap<'_>) -> Layout {
        let n_rows = h.values.len();
        let n_cols = h.values.first().map_or(0, Vec::len);
        let row_groups = groups(n_rows, MAX_ROWS);
        let col_groups = groups(n_cols, MAX_COLUMNS);
        // Each cell: the largest value it covers.
        let cells: Vec<Vec<u64>> = row_groups
            .iter()
            .map(|&(r0, r1)| {
                col_groups
                    .iter()
                    .map(|&(c0, c1)| {
                        h.values[r0..r1]
                            .iter()
                            .flat_map(|row| row[c0..c1].iter())
                            .copied()
                            .max()
                            .unwrap_or(0)
                    })
                    .collect()
            })
            .collect();
        let max = cells.iter().flatten().copied().max().unwrap_or(0);
        let cell_w = (900 / col_groups.len().max(1)).clamp(2, 40);
        let cell_h = (640 / row_groups.len().max(1)).clamp(2, 24);
        let grid_w = col_groups.len().max(1) * cell_w;
        let grid_h = row_groups.len().max(1) * cell_h;

        let straggler_row = h.straggler.and_then(|s| {
            let pos = h.ranks.iter().position(|&r| r == s)?;
            row_groups.iter().position(|&(r0, r1)| (r0..r1).contains(&pos))
        });
        let col_unit = if col_groups.iter().any(|(a, b)| b - a > 1) {
            format!("{}s, {} per column", h.column, col_groups[0].1 - col_groups[0].0)
        } else {
            format!("{}s", h.column)
        };
        let title = "Arrival lateness at collectives, rank × step";
        let subtitle = format!(
            "mean lateness behind the earliest rank; {} rank(s) × {} {}{}",
            n_rows,
            n_cols,
            col_unit,
            if row_groups.iter().any(|(a, b)| b - a > 1) {
                format!(
                    "; {} ranks per row, each cell the latest it covers",
                    row_groups[0].1 - row_groups[0].0
                )
            } else {
                String::new()
            }
        );
        let marker = h.straggler.map(|s| format!("◀ straggler (rank {s})"));
        let marker_w = marker.as_deref().map_or(0, |m| text_width(m, FONT) + 8);
        let content_w = LEFT + grid_w + marker_w + 20 + LEGEND_W;
        let width = content_w
            .max(10 + text_width(title, TITLE_FONT) + 10)
            .max(10 + text_width(&subtitle, FONT) + 10);
        let height = TOP + grid_h + 56;

        Layout {
            row_groups,
            col_groups,
            cells,
            max,
            cell_w,
            cell_h,
            grid_w,
            grid_h,
            straggler_row,
            marker,
            marker_w,
            title,
            subtitle,
            width,
            height,
        }
    }

    /// The label of drawn row `i`: its rank, or the first and last it covers.
    fn row_label(&self, h: &Heatmap<'_>, i: usize) -> String {
        let (r0, r1) = self.row_groups[i];
        let (a, b) = (
            h.ranks.get(r0).copied().unwrap_or(r0 as u32),
            h.ranks.get(r1 - 1).copied().unwrap_or(r1 as u32 - 1),
        );
        if r1 - r0 == 1 {
            format!("rank {a}")
        } else {
            format!("ranks {a}–{b}")
        }
    }
}

fn write_title(s: &mut String, l: &Layout) {
    let (width, height, title) = (l.width, l.height, l.title);
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="{FONT}">"#
    );
    let _ = write!(s, r#"<rect width="{width}" height="{height}" fill="white"/>"#);
    let _ = write!(
        s,
        r#"<text x="10" y="18" font-size="{TITLE_FONT}" font-weight="bold">{}</text>"#,
        esc(title)
    );
    let _ = write!(s, r#"<text x="10" y="34" fill="rgb(68,68,68)">{}</text>"#, esc(&l.subtitle));
}

fn write_rows(s: &mut String, h: &Heatmap<'_>, l: &Layout) {
    let (cell_w, cell_h, max) = (l.cell_w, l.cell_h, l.max);
    // Row labels: every row when there is room, else about one per 12 px.
    let label_every = (12 / cell_h.max(1)).max(1);
    for (i, row_cells) in l.cells.iter().enumerate() {
        let y = TOP + i * cell_h;
        let straggling = l.straggler_row == Some(i);
        let label = l.row_label(h, i);
        if i % label_every == 0 || straggling {
            let weight = if straggling { r#" font-weight="bold""# } else { "" };
            let _ = write!(
                s,
                r#"<text x="{}" y="{}" text-anchor="end"{weight}>{}</text>"#,
                LEFT - 6,
                y + cell_h.clamp(FONT, 12) - 2,
                esc(&label)
            );
        }
        for (j, &v) in row_cells.iter().enumerate() {
            let (c0, c1) = l.col_groups[j];
            let cols = if c1 - c0 == 1 {
                format!("{} {c0}", h.column)
            } else {
                format!("{}s {c0}–{}", h.column, c1 - 1)
            };
            let _ = write!(
                s,
                r#"<rect x="{}" y="{y}" width="{cell_w}" height="{cell_h}" fill="{}"><title>{}, {}: {}</title></rect>"#,
                LEFT + j * cell_w,
                fill(v, max),
                esc(&label),
                esc(&cols),
                us(v)
            );
        }
    }
}

/// The straggler: outlined row and a marker after it.
fn write_straggler(s: &mut String, l: &Layout) {
    let (cell_h, grid_w) = (l.cell_h, l.grid_w);
    if let (Some(i), Some(m)) = (l.straggler_row, &l.marker) {
        let y = TOP + i * cell_h;
        let _ = write!(
            s,
            r#"<rect x="{LEFT}" y="{y}" width="{grid_w}" height="{cell_h}" fill="none" stroke="black" stroke-width="1.5"/>"#
        );
        let _ = write!(
            s,
            r#"<text x="{}" y="{}" font-weight="bold">{}</text>"#,
            LEFT + grid_w + 6,
            y + cell_h.clamp(FONT, 12) - 2,
            esc(m)
        );
    }
}

fn write_step_axis(s: &mut String, h: &Heatmap<'_>, l: &Layout) {
    let (cell_w, grid_w, grid_h, col_groups) = (l.cell_w, l.grid_w, l.grid_h, &l.col_groups);
    // Step axis: ticks at the first and last column and about every 80 px.
    let axis_y = TOP + grid_h;
    let tick_every = (80 / cell_w.max(1)).max(1);
    let mut last_end = 0usize;
    for (j, &(c0, _)) in col_groups.iter().enumerate() {
        let is_last = j + 1 == col_groups.len();
        if j % tick_every != 0 && !is_last {
            continue;
        }
        let x = LEFT + j * cell_w + cell_w / 2;
        let label = c0.to_string();
        let half = text_width(&label, FONT) / 2;
        if x.saturating_sub(half) < last_end + 4 && j != 0 {
            continue;
        }
        last_end = x + half;
        let _ = write!(
            s,
            r#"<line x1="{x}" y1="{axis_y}" x2="{x}" y2="{}" stroke="black"/><text x="{x}" y="{}" text-anchor="middle">{label}</text>"#,
            axis_y + 4,
            axis_y + 16
        );
    }
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">{} →</text>"#,
        LEFT + grid_w / 2,
        axis_y + 32,
        esc(h.column)
    );
}

fn write_legend(s: &mut String, l: &Layout) {
    let (grid_w, grid_h, marker_w, max) = (l.grid_w, l.grid_h, l.marker_w, l.max);
    // Colour scale in µs.
    let lx = LEFT + grid_w + marker_w + 20;
    let _ = write!(
        s,
        r#"<defs><linearGradient id="late" x1="0" y1="1" x2="0" y2="0"><stop offset="0" stop-color="rgb(255,255,255)"/><stop offset="1" stop-color="rgb(255,0,0)"/></linearGradient></defs>"#
    );
    let bar_h = grid_h.clamp(60, 240);
    let _ = write!(
        s,
        r#"<text x="{lx}" y="{}">lateness</text><rect x="{lx}" y="{TOP}" width="14" height="{bar_h}" fill="url(#late)" stroke="rgb(136,136,136)"/>"#,
        TOP - 4
    );
    let _ = write!(
        s,
        r#"<text x="{}" y="{}">{}</text><text x="{}" y="{}">0 µs</text>"#,
        lx + 20,
        TOP + FONT,
        us(max),
        lx + 20,
        TOP + bar_h
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (x, anchor, text) of every `<text>` element.
    fn texts(svg: &str) -> Vec<(usize, String, String, usize)> {
        let mut out = Vec::new();
        for part in svg.split("<text ").skip(1) {
            let (attrs, rest) = part.split_once('>').unwrap();
            let text = rest.split("</text>").next().unwrap();
            let attr = |k: &str| {
                attrs
                    .split(&format!("{k}=\""))
                    .nth(1)
                    .map(|v| v.split('"').next().unwrap().to_string())
            };
            let x: usize = attr("x").unwrap().parse().unwrap();
            let font = attr("font-size").map_or(FONT, |f| f.parse().unwrap());
            let text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&");
            out.push((x, attr("text-anchor").unwrap_or_default(), text, font));
        }
        out
    }

    fn width_of(svg: &str) -> usize {
        svg.split("width=\"").nth(1).unwrap().split('"').next().unwrap().parse().unwrap()
    }

    fn check_fits(svg: &str) {
        let w = width_of(svg);
        for (x, anchor, text, font) in texts(svg) {
            let tw = text_width(&text, font);
            let (lo, hi) = match anchor.as_str() {
                "end" => (x.saturating_sub(tw), x),
                "middle" => (x.saturating_sub(tw / 2), x + tw / 2),
                _ => (x, x + tw),
            };
            assert!(lo > 0 || x >= tw, "{text:?} starts left of the document");
            assert!(hi <= w, "{text:?} ends at {hi} > width {w}");
        }
    }

    fn map(rows: usize, cols: usize, late_rank: usize) -> (Vec<Vec<u64>>, Vec<u32>) {
        let values = (0..rows)
            .map(|r| {
                (0..cols)
                    .map(|c| {
                        if r == late_rank {
                            4_000_000
                        } else {
                            (c as u64 * 7 + r as u64) % 300_000
                        }
                    })
                    .collect()
            })
            .collect();
        (values, (0..rows as u32).collect())
    }

    #[test]
    fn any_shape_stays_bounded_and_readable() {
        for (rows, cols) in [(1, 1), (2, 1), (8, 1), (8, 12), (1024, 10_000), (3, 5000), (1000, 3)] {
            let late = rows / 2;
            let (values, ranks) = map(rows, cols, late);
            let svg = render(&Heatmap {
                values: &values,
                ranks: &ranks,
                straggler: Some(late as u32),
                column: "step",
            });
            check_fits(&svg);
            let rects = svg.matches("<rect x=").count();
            assert!(rects <= MAX_ROWS * MAX_COLUMNS + 3, "{rows}×{cols}: {rects} rects");
            assert!(svg.contains(&format!("◀ straggler (rank {late})")), "{rows}×{cols}");
            assert!(svg.contains("4000 µs</text>"), "legend max in µs: {rows}×{cols}");
            assert!(svg.contains("0 µs</text>"));
            // The straggler's cells are the darkest: pure red.
            assert!(svg.contains("fill=\"rgb(255,0,0)\""));
            assert!(svg.len() < 2_000_000, "{rows}×{cols}: {} bytes", svg.len());
        }
    }

    #[test]
    fn one_step_marks_the_straggler_alone() {
        // One step, 8 ranks: rank 5 late at every collective, ranks 1 and 2 once (their
        // mean lateness is small): only rank 5's row is dark and marked.
        let values: Vec<Vec<u64>> = (0..8)
            .map(|r| {
                vec![if r == 5 {
                    2_000_000
                } else if r == 1 || r == 2 {
                    200_000
                } else {
                    0
                }]
            })
            .collect();
        let ranks: Vec<u32> = (0..8).collect();
        let svg = render(&Heatmap {
            values: &values,
            ranks: &ranks,
            straggler: Some(5),
            column: "step",
        });
        assert_eq!(svg.matches("fill=\"rgb(255,0,0)\"").count(), 1);
        assert!(svg.contains(r#"font-weight="bold">rank 5</text>"#));
        check_fits(&svg);
    }

    #[test]
    fn names_are_escaped() {
        let values = vec![vec![1u64], vec![2]];
        let svg = render(&Heatmap {
            values: &values,
            ranks: &[0, 1],
            straggler: None,
            column: "<step>",
        });
        assert!(!svg.contains("<step>") && svg.contains("&lt;step&gt;"));
    }
}
