//! An SVG heatmap of lateness by rank × step: one row per rank, one column
//! per step (or per group of collectives), darker red = later.

use crate::Comparison;
use std::fmt::Write;

/// Render the heatmap as a standalone SVG document.
pub fn heatmap_svg(c: &Comparison) -> String {
    let rows = c.lateness.len();
    let cols = c.lateness.first().map_or(0, Vec::len);
    let cell_w = (900 / cols.max(1)).clamp(3, 40);
    let cell_h = (600 / rows.max(1)).clamp(2, 24);
    let left = 70;
    let top = 40;
    let width = left + cols * cell_w + 20;
    let height = top + rows * cell_h + 40;
    let max = c.lateness.iter().flatten().copied().max().unwrap_or(0).max(1);
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(
        s,
        r#"<text x="{left}" y="16" font-size="13">Arrival lateness at collectives (ms behind the earliest rank), rank × step; max {:.2} ms</text>"#,
        max as f64 / 1e6
    );
    for (i, row) in c.lateness.iter().enumerate() {
        let y = top + i * cell_h;
        let rank = c.lateness_ranks.get(i).copied().unwrap_or(i as u32);
        if cell_h >= 8 || i % (8 / cell_h.max(1)).max(1) == 0 {
            let _ = write!(
                s,
                r#"<text x="{}" y="{}" text-anchor="end">rank {rank}</text>"#,
                left - 4,
                y + cell_h.min(12)
            );
        }
        for (j, &v) in row.iter().enumerate() {
            let f = v as f64 / max as f64;
            let g = (255.0 * (1.0 - f)).round() as u8;
            let _ = write!(
                s,
                r#"<rect x="{}" y="{y}" width="{cell_w}" height="{cell_h}" fill="rgb(255,{g},{g})"><title>rank {rank}, step {j}: {:.3} ms late</title></rect>"#,
                left + j * cell_w,
                v as f64 / 1e6
            );
        }
    }
    let _ = write!(s, r#"<text x="{left}" y="{}">steps →</text></svg>"#, top + rows * cell_h + 20);
    s
}
