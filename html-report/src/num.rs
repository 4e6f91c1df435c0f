//! The numbers of the page and the cells that hold them: every number is an element with
//! its JSON path (`data-key`), its JSON text (`data-value`) and how its text was made
//! (`data-fmt`), so a test reads the DOM back against `report --json`.

use crate::{esc_text, json, ns, ratio};
use gputrace_analysis::{IdleCauses, Report};
use maud::{html, Markup};
use serde::Serialize;

/// How a number's text is made from its value(s); the browser test reads it back.
#[derive(Clone, Copy)]
pub(crate) enum Fmt {
    /// A duration in ns, as `1.234 ms`.
    Ns,
    /// `100 · value / per`, one decimal, `%`.
    Pct,
    /// The value is a percentage already: `{:.1}%` (`{:.0}%` in the headline).
    Pct100,
    /// A 0..1 fraction: `100 · value`, one decimal, `%`.
    Frac,
    /// With an SI prefix.
    Si,
    /// US dollars.
    Usd,
    /// A plain number (counts, GB/s, bytes).
    Num,
    /// Seconds, shown as a duration.
    Secs,
    /// A byte count, humanised (`18.0 GiB`); the exact count is in the element's `title`.
    Bytes,
}

impl Fmt {
    fn name(self) -> &'static str {
        match self {
            Fmt::Ns => "ns",
            Fmt::Pct => "pct",
            Fmt::Pct100 => "pct100",
            Fmt::Frac => "frac",
            Fmt::Si => "si",
            Fmt::Usd => "usd",
            Fmt::Num => "num",
            Fmt::Secs => "s",
            Fmt::Bytes => "bytes",
        }
    }
}

/// A number in the page: its JSON path and value, and its text.
pub(crate) struct Num {
    key: String,
    value: String,
    per: Option<(String, String)>,
    fmt: Fmt,
    pub(crate) text: String,
    /// What a table sorts by (the shown quantity, not the raw value).
    sort: f64,
    /// Shown on hover (the exact value of a humanised one).
    title: Option<String>,
}

impl Num {
    pub(crate) fn u(key: impl Into<String>, v: u64, fmt: Fmt) -> Num {
        let text = match fmt {
            Fmt::Ns => ns(v),
            _ => v.to_string(),
        };
        Num {
            key: key.into(),
            value: json(&v),
            per: None,
            fmt,
            text,
            sort: v as f64,
            title: None,
        }
    }

    pub(crate) fn i(key: impl Into<String>, v: i64) -> Num {
        let text = if v < 0 {
            format!("−{}", ns(v.unsigned_abs()))
        } else {
            ns(v as u64)
        };
        Num {
            key: key.into(),
            value: json(&v),
            per: None,
            fmt: Fmt::Ns,
            text,
            sort: v as f64,
            title: None,
        }
    }

    /// `part` as a share of `whole`.
    pub(crate) fn pct(key: impl Into<String>, part: u64, per_key: impl Into<String>, whole: u64) -> Num {
        let r = ratio(part, whole);
        Num {
            key: key.into(),
            value: json(&part),
            per: Some((per_key.into(), json(&whole))),
            fmt: Fmt::Pct,
            text: if whole == 0 { "-".into() } else { format!("{:.1}%", 100.0 * r) },
            sort: r,
            title: None,
        }
    }

    pub(crate) fn f(key: impl Into<String>, v: Option<f64>, fmt: Fmt) -> Num {
        let text = match v {
            None => "-".to_string(),
            Some(x) => match fmt {
                Fmt::Pct100 => format!("{x:.1}%"),
                Fmt::Frac => format!("{:.1}%", 100.0 * x),
                Fmt::Si => gputrace_analysis::si(x),
                Fmt::Usd => format!("${x:.4}"),
                Fmt::Ns => ns(x.max(0.0).round() as u64),
                _ => format!("{x:.2}"),
            },
        };
        Num {
            key: key.into(),
            value: json(&v),
            per: None,
            fmt,
            text,
            sort: v.unwrap_or(f64::NEG_INFINITY),
            title: None,
        }
    }

    /// Seconds (`v`), shown as a duration.
    pub(crate) fn secs(key: impl Into<String>, v: Option<f64>) -> Num {
        let mut n = Num::f(key, v.map(|s| s * 1e9), Fmt::Ns).value_of(&v);
        n.fmt = Fmt::Secs;
        n
    }

    /// A byte count, humanised, with the exact count on hover.
    pub(crate) fn bytes(key: impl Into<String>, v: u64) -> Num {
        Num {
            key: key.into(),
            value: json(&v),
            per: None,
            fmt: Fmt::Bytes,
            text: gputrace_analysis::human_bytes_to(v, 1),
            sort: v as f64,
            title: Some(format!("{} bytes", group_digits(v))),
        }
    }

    pub(crate) fn text(mut self, text: String) -> Num {
        self.text = text;
        self
    }

    /// Keep the text, but name another value as the JSON's (an integer field shown with
    /// its unit, seconds shown as a duration).
    pub(crate) fn value_of<T: Serialize>(mut self, v: &T) -> Num {
        self.value = json(v);
        self
    }

    fn per_key(&self) -> Option<crate::EscText<'_>> {
        self.per.as_ref().map(|(k, _)| esc_text(k))
    }

    fn per_value(&self) -> Option<crate::EscText<'_>> {
        self.per.as_ref().map(|(_, v)| esc_text(v))
    }

    fn title(&self) -> Option<crate::EscText<'_>> {
        self.title.as_deref().map(esc_text)
    }

    /// The number as an element without text: kept for machines (a finding's values), not
    /// shown.
    pub(crate) fn data(&self) -> Markup {
        html! {
            data data-key=(esc_text(&self.key)) data-value=(esc_text(&self.value)) data-fmt=(self.fmt.name())
                data-per=[self.per_key()] data-per-value=[self.per_value()] title=[self.title()] {}
        }
    }

    pub(crate) fn span(&self) -> Markup {
        html! {
            span.n data-key=(esc_text(&self.key)) data-value=(esc_text(&self.value)) data-fmt=(self.fmt.name())
                data-per=[self.per_key()] data-per-value=[self.per_value()] title=[self.title()] { (esc_text(&self.text)) }
        }
    }

    pub(crate) fn td(&self) -> Markup {
        html! {
            td.r data-key=(esc_text(&self.key)) data-value=(esc_text(&self.value)) data-fmt=(self.fmt.name())
                data-per=[self.per_key()] data-per-value=[self.per_value()] title=[self.title()]
                data-sort=(self.sort) { (esc_text(&self.text)) }
        }
    }
}

/// `1234567` as `1,234,567`.
fn group_digits(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A value without trailing zeros: `0.42`, `3`, `1234.5`.
pub(crate) fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

/// A cell of text, sorted by it.
pub(crate) fn td_text(s: &str) -> Markup {
    html! { td data-sort=(esc_text(s)) { (esc_text(s)) } }
}

/// A cell for a long name: one line, cut with an ellipsis at the column's width, the whole
/// name on hover.
pub(crate) fn td_name(s: &str) -> Markup {
    html! { td.name data-sort=(esc_text(s)) { span.ell title=(esc_text(s)) { (esc_text(s)) } } }
}

/// The rank's and the GPU's cells of a device's row (`ranks.N.rank`, `ranks.N.devices.D.device`).
pub(crate) fn rank_gpu_cells(r: &Report, ri: usize, di: usize) -> Markup {
    let rk = &r.ranks[ri];
    html! {
        (Num::u(format!("ranks.{ri}.rank"), rk.rank.into(), Fmt::Num).td())
        (Num::u(format!("ranks.{ri}.devices.{di}.device"), rk.devices[di].device.into(), Fmt::Num).td())
    }
}

/// Keep at most `max` of `rows`, those with the lowest `key` (ties by row), in row order.
pub(crate) fn lowest<T: Ord + Copy>(rows: &mut Vec<T>, max: usize, key: impl Fn(&T) -> f64) {
    if rows.len() > max {
        rows.sort_by(|a, b| key(a).total_cmp(&key(b)).then(a.cmp(b)));
        rows.truncate(max);
        rows.sort_unstable();
    }
}

/// The parts of a stacked bar, in drawing order (class, label).
pub(crate) const PARTS: [(&str, &str); 7] = [
    ("compute", "compute"),
    ("comm", "exposed communication"),
    ("xfer", "exposed transfer"),
    ("host", "idle: host-bound"),
    ("lat", "idle: launch/dependency latency"),
    ("sync", "idle: synchronization"),
    ("unat", "idle: unattributed"),
];

/// A window's time in [`PARTS`] order. Idle is split by cause; idle outside any gap
/// (before the first or after the last activity) goes with `unattributed`, so the bar fills
/// its whole.
pub(crate) fn parts(compute: u64, comm: u64, xfer: u64, idle: u64, c: &IdleCauses) -> [u64; 7] {
    [
        compute,
        comm,
        xfer,
        c.host_bound_ns,
        c.launch_latency_ns,
        c.synchronization_ns,
        idle.saturating_sub(c.host_bound_ns + c.launch_latency_ns + c.synchronization_ns),
    ]
}

/// A stacked bar of `values` (same order as [`PARTS`]) over `whole`.
pub(crate) fn bar(values: [u64; 7], whole: u64) -> Markup {
    let mut drawn = Vec::new();
    let mut x = 0.0;
    for ((class, label), v) in PARTS.iter().zip(values) {
        if v == 0 || whole == 0 {
            continue;
        }
        let w = 1000.0 * v as f64 / whole as f64;
        drawn.push((class, label, v, x, w));
        x += w;
    }
    html! {
        svg.bar viewBox="0 0 1000 12" preserveAspectRatio="none" role="img" {
            @for (class, label, v, x, w) in drawn {
                rect class=(class) x=(format!("{x:.2}")) width=(format!("{w:.2}")) height="12" {
                    title { (label) ": " (ns(v)) " (" (format!("{:.1}", 100.0 * v as f64 / whole as f64)) "%)" }
                }
            }
        }
    }
}

/// What each colour of a bar means.
pub(crate) fn legend() -> Markup {
    html! {
        p.legend {
            @for (class, label) in PARTS {
                span { i.sw.(class) {} (label) }
            }
        }
    }
}
