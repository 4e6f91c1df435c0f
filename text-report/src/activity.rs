//! The text report's GPU activity timeline.

use gputrace_analysis::activity::{sparkline, Activity};
use gputrace_analysis::activity_view::{select, TEXT_COLUMNS, TEXT_ROWS};
use gputrace_analysis::Report;
use gputrace_format::Nanos;
use std::fmt::Write;

/// The text report's timeline: one line per device, the compute share of each stretch of
/// its span as a block character (a space: not traced), so a sawtooth or a pause shows in
/// a terminal. `color` paints each character by what the rest of its time was.
pub(crate) fn render_text(o: &mut String, r: &Report, color: bool) {
    let sel = select(r, TEXT_ROWS, &[]);
    if sel.rows.is_empty() {
        return;
    }
    let title = "GPU activity over time (compute share per stretch of the span: ▁ none … █ all)";
    let _ = writeln!(
        o,
        "\n{}",
        if color {
            format!("\x1b[1m{title}\x1b[0m")
        } else {
            title.to_string()
        }
    );
    for &(ri, di) in &sel.rows {
        let (rk, d) = (&r.ranks[ri], &r.ranks[ri].devices[di]);
        let Some(a) = &d.activity else { continue };
        let line = sparkline(a, TEXT_COLUMNS);
        let line = if color { paint(a, &line) } else { line };
        let per = a.len().div_ceil(TEXT_COLUMNS).max(1) as u64 * a.bin_ns;
        let _ = writeln!(o, "{:>5} {:>4}  {line}  {} per char", rk.rank, d.device, Nanos(per));
    }
    if let Some(note) = &sel.note {
        let _ = writeln!(o, "({note}; every GPU's bins are in report --json: activity)");
    }
}

/// Each character of `line` coloured by the largest class of its stretch other than
/// compute (green when compute is the most).
fn paint(a: &Activity, line: &str) -> String {
    const COLORS: [&str; 7] = ["32", "33", "35", "31", "91", "34", "90"];
    let per = a.len().div_ceil(TEXT_COLUMNS).max(1);
    let mut out = String::new();
    for (k, ch) in line.chars().enumerate() {
        let mut sum = [0u64; 7];
        for i in k * per..((k + 1) * per).min(a.len()) {
            for (s, v) in sum.iter_mut().zip(a.bin(i)) {
                *s += v;
            }
        }
        let top = (0..7).max_by_key(|&c| (sum[c], std::cmp::Reverse(c))).unwrap_or(0);
        out.push_str(&format!("\x1b[{}m{ch}\x1b[0m", COLORS[top]));
    }
    out
}
