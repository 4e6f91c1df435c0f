//! One self-contained HTML page of a `gputrace report`: the headline, where
//! each GPU's time went (stacked bars, sortable), the steps with the slow ones
//! marked, the findings, top kernels, copies, collectives with bus bandwidth
//! and, for a multi-rank job, `gputrace compare`'s straggler view (a lateness
//! heatmap and the waiting each rank imposed).
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

mod serving;
use gputrace_analysis::{activity_view, Category, DeviceReport, Productive, Report, Severity, StepReport};
use gputrace_compare::Comparison;
use gputrace_format::Nanos;
use serde::Serialize;
use std::fmt::Write as _;
use std::io::{self, Write};

mod sections;

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

/// How a number's text is made from its value(s); the browser test reads it back.
#[derive(Clone, Copy)]
enum Fmt {
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
struct Num {
    key: String,
    value: String,
    per: Option<(String, String)>,
    fmt: Fmt,
    text: String,
    /// What a table sorts by (the shown quantity, not the raw value).
    sort: f64,
    /// Shown on hover (the exact value of a humanised one).
    title: Option<String>,
}

impl Num {
    fn u(key: impl Into<String>, v: u64, fmt: Fmt) -> Num {
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

    fn i(key: impl Into<String>, v: i64) -> Num {
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
    fn pct(key: impl Into<String>, part: u64, per_key: impl Into<String>, whole: u64) -> Num {
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

    fn f(key: impl Into<String>, v: Option<f64>, fmt: Fmt) -> Num {
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

    /// A byte count, humanised, with the exact count on hover.
    fn bytes(key: impl Into<String>, v: u64) -> Num {
        Num {
            key: key.into(),
            value: json(&v),
            per: None,
            fmt: Fmt::Bytes,
            text: human_bytes(v),
            sort: v as f64,
            title: Some(format!("{} bytes", group_digits(v))),
        }
    }

    /// The number as an element without text: kept for machines (a finding's values), not
    /// shown.
    fn data(&self) -> String {
        format!("<data {}></data>", self.attrs())
    }

    fn text(mut self, text: String) -> Num {
        self.text = text;
        self
    }

    fn attrs(&self) -> String {
        let mut a = format!(
            r#"data-key="{}" data-value="{}" data-fmt="{}""#,
            esc(&self.key),
            esc(&self.value),
            self.fmt.name()
        );
        if let Some((k, v)) = &self.per {
            let _ = write!(a, r#" data-per="{}" data-per-value="{}""#, esc(k), esc(v));
        }
        if let Some(t) = &self.title {
            let _ = write!(a, r#" title="{}""#, esc(t));
        }
        a
    }

    fn span(&self) -> String {
        format!(r#"<span class="n" {}>{}</span>"#, self.attrs(), esc(&self.text))
    }

    fn td(&self) -> String {
        format!(
            r#"<td class="r" {} data-sort="{}">{}</td>"#,
            self.attrs(),
            self.sort,
            esc(&self.text)
        )
    }
}

/// Bytes in binary units: `512 B`, `18.0 GiB`.
fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if b < 1024 {
        return format!("{b} B");
    }
    let mut v = b as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
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

/// A cell for a long name: one line, cut with an ellipsis at the column's width, the whole
/// name on hover.
fn td_name(s: &str) -> String {
    format!(
        r#"<td class="name" data-sort="{0}"><span class="ell" title="{0}">{0}</span></td>"#,
        esc(s)
    )
}

/// Tables scroll sideways inside their own box when the window is narrower than they are.
fn scrolling_tables(page: String) -> String {
    page.replace("<table", "<div class=\"scroll\"><table")
        .replace("</table>", "</table></div>")
}

fn td_text(s: &str) -> String {
    format!(r#"<td data-sort="{0}">{0}</td>"#, esc(s))
}

/// The parts of a stacked bar, in drawing order (class, label).
const PARTS: [(&str, &str); 7] = [
    ("compute", "compute"),
    ("comm", "exposed communication"),
    ("xfer", "exposed transfer"),
    ("host", "idle: host-bound"),
    ("lat", "idle: launch/dependency latency"),
    ("sync", "idle: synchronization"),
    ("unat", "idle: unattributed"),
];

/// A stacked bar of `values` (same order as [`PARTS`]) over `whole`.
fn bar(values: [u64; 7], whole: u64) -> String {
    let mut s = String::from(r#"<svg class="bar" viewBox="0 0 1000 12" preserveAspectRatio="none" role="img">"#);
    let mut x = 0.0;
    for ((class, label), v) in PARTS.iter().zip(values) {
        if v == 0 || whole == 0 {
            continue;
        }
        let w = 1000.0 * v as f64 / whole as f64;
        let _ = write!(
            s,
            r#"<rect class="{class}" x="{x:.2}" width="{w:.2}" height="12"><title>{label}: {} ({:.1}%)</title></rect>"#,
            ns(v),
            100.0 * v as f64 / whole as f64
        );
        x += w;
    }
    s.push_str("</svg>");
    s
}

fn legend() -> String {
    let mut s = String::from(r#"<p class="legend">"#);
    for (class, label) in PARTS {
        let _ = write!(s, r#"<span><i class="sw {class}"></i>{label}</span>"#);
    }
    s.push_str("</p>");
    s
}

/// Idle of a device is split by cause; idle outside any gap (before the first or after the
/// last activity of a step window) goes with `unattributed`, so the bar fills its whole.
fn device_parts(d: &DeviceReport) -> [u64; 7] {
    let c = &d.idle_causes;
    [
        d.compute_ns,
        d.exposed_communication_ns,
        d.exposed_transfer_ns,
        c.host_bound_ns,
        c.launch_latency_ns,
        c.synchronization_ns,
        d.idle_ns
            .saturating_sub(c.host_bound_ns + c.launch_latency_ns + c.synchronization_ns),
    ]
}

fn step_parts(s: &StepReport) -> [u64; 7] {
    let c = &s.idle_causes;
    [
        s.compute_ns,
        s.exposed_communication_ns,
        s.exposed_transfer_ns,
        c.host_bound_ns,
        c.launch_latency_ns,
        c.synchronization_ns,
        s.idle_ns
            .saturating_sub(c.host_bound_ns + c.launch_latency_ns + c.synchronization_ns),
    ]
}

const CSS: &str = r#"
:root{color-scheme:light dark;--bg:#fff;--fg:#1d1f23;--mute:#5f6670;--line:#d9dce1;--card:#f5f6f8;--compute:#2f7d32;--comm:#e08a00;--xfer:#7b4fb3;--host:#c62828;--lat:#ef7a7a;--sync:#1e6fb8;--unat:#9aa0a6;--late:#d62728;--high:#c62828;--med:#b26a00;--info:#5f6670}
@media (prefers-color-scheme:dark){:root{--bg:#16181c;--fg:#e6e8eb;--mute:#a0a6ae;--line:#353a42;--card:#1f2228;--compute:#5cb85f;--comm:#f0a830;--xfer:#a27be0;--host:#ef5350;--lat:#f39a9a;--sync:#5aa3e8;--unat:#6f757c;--late:#ff5a4f;--high:#ff6b66;--med:#f0a830;--info:#a0a6ae}}
*{box-sizing:border-box}body{margin:0 auto;max-width:1200px;padding:16px 24px 48px;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
.mute,.note{color:var(--mute)}.note{font-size:12px}.warn{border:1px solid var(--high);color:var(--high);padding:6px 10px;border-radius:6px}
.head{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}.tile{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:8px 14px;min-width:150px}
.tile .v{font-size:24px;font-weight:600;display:block}.tile .l{color:var(--mute);font-size:12px;display:block}.tile .flag{font-size:11px}.tile.dash .v{color:var(--mute)}
table{border-collapse:collapse;width:100%;font-size:13px}th,td{padding:3px 6px;border-bottom:1px solid var(--line);text-align:left;vertical-align:middle}
th{font-weight:600;color:var(--mute);white-space:nowrap}table.sortable th{cursor:pointer}table.sortable th:after{content:" ↕";opacity:.4}
td{white-space:nowrap}td.r,th.r{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.scroll{overflow-x:auto;max-width:100%}.ell-i{display:inline-block;max-width:min(300px,30vw);overflow:hidden;text-overflow:ellipsis;white-space:nowrap;vertical-align:bottom}.ell{display:block;max-width:min(560px,42vw);overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
td.b{width:34%;min-width:160px}svg.spark{width:120px;height:24px;display:block;background:var(--card)}th .scale{display:block;font-weight:400;font-size:11px}svg.spark polyline{fill:none;stroke:var(--sync);stroke-width:1.5}td.sp{white-space:nowrap}svg.bar{width:100%;min-width:160px;height:12px;display:block;background:var(--card)}
.compute{fill:var(--compute);background:var(--compute)}.comm{fill:var(--comm);background:var(--comm)}.xfer{fill:var(--xfer);background:var(--xfer)}
.host{fill:var(--host);background:var(--host)}.lat{fill:var(--lat);background:var(--lat)}.sync{fill:var(--sync);background:var(--sync)}.unat{fill:var(--unat);background:var(--unat)}
.legend span{margin-right:14px;font-size:12px;white-space:nowrap}.sw{display:inline-block;width:10px;height:10px;margin-right:4px;border-radius:2px}
tr.slow td:first-child:after{content:" slow";color:var(--high);font-weight:600}tr.all td{font-weight:600}
.finding{border-left:4px solid var(--info);padding:4px 10px;margin:8px 0;background:var(--card);border-radius:0 6px 6px 0}
.finding.high{border-color:var(--high)}.finding.medium{border-color:var(--med)}.sev{font-weight:700;font-size:11px;margin-right:6px}
.finding.high .sev{color:var(--high)}.finding.medium .sev{color:var(--med)}.finding p{margin:2px 0}.vals{font-size:12px;color:var(--mute)}
.vals .n{margin-right:10px}code{background:var(--card);padding:1px 4px;border-radius:4px}
svg.hm text{fill:var(--fg);font-size:11px}svg.hm text.ax{text-anchor:middle;fill:var(--mute)}svg.hm .cell{fill:var(--late)}svg.hm .bg{fill:var(--card)}
.tl{position:relative;margin:6px 0}.tl-row{display:flex;align-items:center;gap:8px;height:16px}.tl-row.tl-axis{height:32px;align-items:flex-end}
.tl-l{flex:none;width:170px;font-size:11px;color:var(--mute);white-space:nowrap;overflow:hidden;text-overflow:ellipsis;text-align:right}
.tl canvas{flex:1 1 auto;min-width:0;width:100%;height:14px;display:block;background:var(--card)}.tl canvas.tl-x{height:30px;background:none}
.tl.tall .tl-row{height:26px}.tl.tall canvas{height:24px}.tl.dense .tl-row{height:9px}.tl.dense canvas{height:8px}.tl.dense .tl-l{font-size:8px;line-height:9px}
.tip{position:fixed;z-index:5;pointer-events:none;background:var(--bg);color:var(--fg);border:1px solid var(--line);border-radius:6px;padding:6px 8px;font-size:12px;white-space:pre;box-shadow:0 2px 8px rgba(0,0,0,.2)}
"#;

/// Sort a `table.sortable` by the clicked column (numbers by `data-sort`, else text); draw
/// the activity timeline from its rows' data (and redraw on resize or a colour-scheme change).
const JS: &str = r#"
(function(){
  var tl=document.getElementById("timeline");if(!tl)return;
  var keys=["compute_ns","exposed_communication_ns","exposed_transfer_ns","host_bound_ns","launch_latency_ns","synchronization_ns","unattributed_ns"];
  var vars=["compute","comm","xfer","host","lat","sync","unat"];
  var names=["compute","exposed communication","exposed transfer","idle: host-bound","idle: launch/dependency latency","idle: synchronization","idle: unattributed"];
  var span=+tl.dataset.span||1,rows=Array.prototype.slice.call(tl.querySelectorAll("canvas.tl-c")),tip=document.getElementById("tip");
  rows.forEach(function(c){c._a=JSON.parse(c.dataset.value);c._s=JSON.parse(c.dataset.steps||"[]");});
  function fmt(v){var a=Math.abs(v);return a>=1e9?(v/1e9).toFixed(3)+" s":a>=1e6?(v/1e6).toFixed(2)+" ms":a>=1e3?(v/1e3).toFixed(1)+" µs":v+" ns";}
  function setup(c){var w=c.clientWidth,h=c.clientHeight,r=window.devicePixelRatio||1;c.width=Math.max(1,Math.round(w*r));c.height=Math.max(1,Math.round(h*r));var g=c.getContext("2d");g.setTransform(r,0,0,r,0,0);g.clearRect(0,0,w,h);return [g,w,h];}
  function width(c,i){var a=c._a,end=+c.dataset.end;return Math.max(1,Math.min(a.bin_ns,end-i*a.bin_ns));}
  function draw(){
    var st=getComputedStyle(document.documentElement),col=vars.map(function(v){return st.getPropertyValue("--"+v).trim();}),fg=st.getPropertyValue("--fg").trim(),mute=st.getPropertyValue("--mute").trim();
    rows.forEach(function(c){
      var s=setup(c),g=s[0],w=s[1],h=s[2],a=c._a,sx=w/span;
      for(var i=0;i<a.compute_ns.length;i++){
        var x0=Math.floor(i*a.bin_ns*sx),x1=Math.max(x0+1,Math.floor(Math.min((i+1)*a.bin_ns,+c.dataset.end)*sx)),y=h,bw=width(c,i);
        for(var k=0;k<7;k++){var v=a[keys[k]][i];if(!v)continue;var bh=h*v/bw;g.fillStyle=col[k];g.fillRect(x0,y-bh,x1-x0,bh);y-=bh;}
      }
      g.fillStyle=fg;g.globalAlpha=0.5;c._s.forEach(function(p){g.fillRect(Math.round(p[1]*sx),0,1,h);});g.globalAlpha=1;
    });
    var ax=tl.querySelector("canvas.tl-x");if(!ax)return;
    var s=setup(ax),g=s[0],w=s[1],h=s[2],sx=w/span;g.font="11px system-ui,sans-serif";g.fillStyle=mute;g.textBaseline="alphabetic";
    var steps=rows.length?rows[0]._s:[],last=-1e9;
    steps.forEach(function(p){var x=p[1]*sx,t=String(p[0]);if(x<0||x>w-8)return;if(x-last<g.measureText(t).width+8)return;g.fillText(t,x+2,11);g.fillRect(Math.round(x),2,1,11);last=x;});
    var nice=[1,2,5],step=1,e=1;while(span/step>Math.max(2,w/90)){step=nice[e%3]*Math.pow(10,Math.floor(e/3));e++;}
    for(var t=0;t<=span;t+=step){var x=t*sx;if(x>w-40)break;g.fillRect(Math.round(x),h-14,1,5);g.fillText(fmt(t),x+2,h-3);}
  }
  function at(c,ev){var r=c.getBoundingClientRect(),a=c._a,t=(ev.clientX-r.left)/r.width*span,i=Math.floor(t/a.bin_ns);return i>=0&&i<a.compute_ns.length?i:-1;}
  rows.forEach(function(c){
    c.addEventListener("mousemove",function(ev){var i=at(c,ev);if(i<0){tip.hidden=true;return;}var a=c._a,bw=width(c,i),lines=[c.dataset.label+", "+fmt(i*a.bin_ns)+" – "+fmt(i*a.bin_ns+bw)];
      var step=null;c._s.forEach(function(p){if(p[1]<=i*a.bin_ns+bw/2)step=p[0];});if(step!==null)lines[0]+=" (step "+step+")";
      for(var k=0;k<7;k++){var v=a[keys[k]][i];if(v)lines.push(names[k]+": "+fmt(v)+" ("+(100*v/bw).toFixed(1)+"%)");}
      if(lines.length==1)lines.push("not traced");
      tip.textContent=lines.join("\n");tip.hidden=false;tip.style.left=Math.min(ev.clientX+12,window.innerWidth-tip.offsetWidth-8)+"px";tip.style.top=(ev.clientY+14)+"px";});
    c.addEventListener("mouseleave",function(){tip.hidden=true;});
  });
  draw();window.addEventListener("resize",draw);
  if(window.matchMedia){var m=window.matchMedia("(prefers-color-scheme: dark)");if(m.addEventListener)m.addEventListener("change",draw);}
})();
document.querySelectorAll("table.sortable").forEach(function(t){
  t.querySelectorAll("thead th").forEach(function(th,i){
    th.addEventListener("click",function(){
      var b=t.tBodies[0],rows=Array.prototype.slice.call(b.rows).filter(function(r){return !r.classList.contains("all");});
      var dir=th.dataset.dir==="desc"?1:-1;th.dataset.dir=dir===1?"asc":"desc";
      function v(r){var c=r.cells[i];if(!c)return "";var s=c.getAttribute("data-sort");var n=parseFloat(s);return isNaN(n)?(s||c.textContent):n;}
      rows.sort(function(a,c){var x=v(a),y=v(c);return (x<y?-1:x>y?1:0)*dir;});
      rows.forEach(function(r){b.appendChild(r);});
    });
  });
});
"#;

impl Html {
    /// The page as one string.
    pub fn render(&self, page: &Page<'_>) -> String {
        let r = page.report;
        let mut o = String::with_capacity(64 * 1024);
        let title = if page.inputs.is_empty() {
            "gputrace report".to_string()
        } else {
            format!("gputrace report: {}", page.inputs.join(" "))
        };
        let devices: usize = r.ranks.iter().map(|rk| rk.devices.len()).sum();
        let synthetic = r.ranks.iter().any(|rk| rk.producer == "synthetic");
        let _ = write!(
            o,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">\
             <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\
             <title>{}</title><style>{CSS}</style></head><body>\n",
            esc(&title)
        );
        let _ = writeln!(
            o,
            "<h1>{}</h1><p class=\"mute\">{} rank(s), {} GPU(s){}</p>{}",
            esc(&title),
            r.ranks.len(),
            devices,
            if synthetic {
                " · <b>synthetic data, not a GPU measurement</b>"
            } else {
                ""
            },
            Num::u("schema_version", r.schema_version.into(), Fmt::Num).data()
        );
        if r.lossy {
            o.push_str("<p class=\"warn\">The trace lost data: every number below describes what was recorded (see Losses in the text report or <code>gputrace info</code>).</p>\n");
        }
        if r.hta_compat.is_some() {
            o.push_str("<p class=\"warn\">HTA-compatible mode: span, compute and idle are Holistic Trace Analysis' temporal breakdown, not gputrace's definitions.</p>\n");
        }
        self.headline(&mut o, &r.productive);
        self.timeline(&mut o, r, page.comparison);
        self.devices(&mut o, r);
        self.productive_table(&mut o, r);
        serving::section(&mut o, r);
        self.hardware_summary(&mut o, r);
        self.hardware(&mut o, r);
        self.gaps(&mut o, r);
        self.steps(&mut o, r, page.comparison);
        self.findings(&mut o, r);
        self.kernels(&mut o, r);
        self.collectives(&mut o, r);
        self.comm_libraries(&mut o, r);
        if r.ranks.len() >= 2 {
            self.straggler(&mut o, page);
        }
        self.cost(&mut o, r);
        let inputs = if page.inputs.is_empty() {
            "TRACES".to_string()
        } else {
            page.inputs.join(" ")
        };
        let _ = writeln!(
            o,
            "<h2>Timeline</h2><p>To see every kernel, copy and collective on one timeline: <code>gputrace export {} --format perfetto --align -o job.pftrace</code>, \
             then open <code>job.pftrace</code> in the Perfetto UI (ui.perfetto.dev, “Open trace file”; the file stays in your browser).</p>",
            esc(&inputs)
        );
        let _ = write!(
            o,
            "<p class=\"note\">Written by gputrace from the same data as <code>gputrace report --json</code>{}. Definitions: docs/metrics.md.</p>\n<script>{JS}</script></body></html>\n",
            if page.comparison.is_some() {
                " and <code>gputrace compare --json</code>"
            } else {
                ""
            }
        );
        scrolling_tables(o)
    }

    fn headline(&self, o: &mut String, p: &Productive) {
        // A missing number is a dash, and the flag that fills it gets a line of its own.
        let tile = |class: &str, label: &str, n: Num, hint: Option<&String>| {
            let missing = n.text == "-";
            let hint = match hint {
                Some(h) if missing => format!(r#"<span class="l flag">{}</span>"#, esc(h.split(" (").next().unwrap_or(h))),
                _ => String::new(),
            };
            let (n, class) = if missing {
                (n.text("—".into()), format!("{class} dash"))
            } else {
                (n, class.to_string())
            };
            format!(
                r#"<div class="tile {class}"><span class="v">{}</span><span class="l">{label}</span>{hint}</div>"#,
                n.span()
            )
        };
        o.push_str("<div class=\"head\">");
        let pct0 = |key: &str, v: Option<f64>| {
            let n = Num::f(key, v, Fmt::Pct100);
            let t = v.map_or("-".into(), |x| format!("{x:.0}%"));
            n.text(t)
        };
        o.push_str(&tile(
            "dash",
            "GPU-Util, as nvidia-smi and dashboards show it",
            pct0("productive.gpu_util_nvml_pct", p.gpu_util_nvml_pct),
            None,
        ));
        o.push_str(&tile(
            "",
            "compute: time a compute kernel ran",
            pct0("productive.compute_pct", p.compute_pct),
            None,
        ));
        let mfu = Num::f("productive.mfu", p.mfu, Fmt::Frac);
        let mfu = match p.mfu {
            Some(m) => mfu.text(format!("{:.0}%", 100.0 * m)),
            None => mfu,
        };
        o.push_str(&tile("", "MFU: model FLOPs over peak", mfu, p.missing.get("mfu")));
        o.push_str(&tile(
            "",
            "tokens/s",
            Num::f("productive.tokens_per_s", p.tokens_per_s, Fmt::Si),
            p.missing.get("tokens_per_s"),
        ));
        let cost = Num::f("productive.cost_per_million_tokens", p.cost_per_million_tokens, Fmt::Usd);
        let cost = match p.cost_per_million_tokens {
            Some(c) => cost.text(format!("${c:.2}")),
            None => cost,
        };
        o.push_str(&tile("", "per million tokens", cost, p.missing.get("cost_per_million_tokens")));
        o.push_str("</div>\n");
        let _ = writeln!(
            o,
            "<p class=\"mute\">{} steps · p50 step {} · p95 step {} · {} GPU-hours traced, {} productive, {} failed · outcome: {}</p>",
            Num::u("productive.steps", p.steps, Fmt::Num).span(),
            Num::f("productive.step_time_p50_s", p.step_time_p50_s.map(|s| s * 1e9), Fmt::Ns)
                .value_of(&p.step_time_p50_s)
                .span(),
            Num::f("productive.step_time_p95_s", p.step_time_p95_s.map(|s| s * 1e9), Fmt::Ns)
                .value_of(&p.step_time_p95_s)
                .span(),
            Num::f("productive.gpu_hours", Some(p.gpu_hours), Fmt::Num)
                .text(format!("{:.4}", p.gpu_hours))
                .span(),
            Num::f("productive.productive_gpu_hours", Some(p.productive_gpu_hours), Fmt::Num)
                .text(format!("{:.4}", p.productive_gpu_hours))
                .span(),
            Num::f("productive.failed_gpu_hours", Some(p.failed_gpu_hours), Fmt::Num)
                .text(format!("{:.4}", p.failed_gpu_hours))
                .span(),
            esc(&p.outcome)
        );
    }

    /// The GPU activity timeline: per GPU a row of bins (drawn by the page's script from
    /// the row's `data-value`, the device's `activity` in `report --json`), on one time
    /// scale from each GPU's first activity, with its step boundaries.
    fn timeline(&self, o: &mut String, r: &Report, c: Option<&Comparison>) {
        let stragglers: Vec<u32> = c.map(|c| c.stragglers.iter().map(|s| s.rank).collect()).unwrap_or_default();
        let all = activity_view::select(r, usize::MAX, &[]).total;
        let max = if all <= self.max_timeline_rows {
            all
        } else {
            self.timeline_sample_rows
        };
        let sel = activity_view::select(r, max, &stragglers);
        if sel.rows.is_empty() {
            return;
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
        o.push_str(r#"<h2>GPU activity over time</h2><p class="mute">Per GPU, its span in equal bins from its first activity (one time scale for all rows), each bin split like the span: compute at the bottom, then exposed communication, exposed transfer and idle by cause; a blank bin was not traced. Thin lines: step starts. Hover a bin for its numbers.</p>"#);
        o.push_str(&legend());
        let density = match sel.rows.len() {
            0..=16 => "tall",
            17..=64 => "",
            _ => "dense",
        };
        let _ = write!(
            o,
            r#"<div class="tl {density}" id="timeline" data-span="{span}"><div class="tl-row tl-axis"><span class="tl-l">step / time</span><canvas class="tl-x" height="30"></canvas></div>"#
        );
        for &(ri, di) in &sel.rows {
            let (rk, d) = (&r.ranks[ri], &r.ranks[ri].devices[di]);
            let Some(a) = &d.activity else { continue };
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
            let _ = writeln!(
                o,
                r#"<div class="tl-row"><span class="tl-l" title="{}">{}</span><canvas class="tl-c n" height="14" data-key="ranks.{ri}.devices.{di}.activity" data-value="{}" data-fmt="bins" data-end="{}" data-steps="{}" data-label="{}"></canvas></div>"#,
                esc(&format!("{label}, {}", rk.hostname)),
                esc(&label),
                esc(&json(a)),
                d.last_ns.unwrap_or(a.start_ns).saturating_sub(a.start_ns),
                esc(&json(&steps)),
                esc(&label)
            );
        }
        o.push_str("<div id=\"tip\" class=\"tip\" hidden></div></div>\n");
        if let Some(note) = &sel.note {
            let _ = writeln!(
                o,
                r#"<p class="note">{}. Every GPU's bins are in <code>gputrace report --json</code> (<code>activity</code>).</p>"#,
                esc(note)
            );
        }
    }

    fn devices(&self, o: &mut String, r: &Report) {
        o.push_str("<h2>Where the GPU time went</h2><p class=\"mute\">Per rank and GPU: the span (first to last GPU activity, all streams merged) split exactly into compute, exposed communication, exposed transfer and idle by cause. Click a column to sort.</p>");
        o.push_str(&legend());
        let mut rows: Vec<(usize, usize)> = Vec::new();
        for (ri, rk) in r.ranks.iter().enumerate() {
            for (di, d) in rk.devices.iter().enumerate() {
                if d.first_ns.is_some() {
                    rows.push((ri, di));
                }
            }
        }
        let total = rows.len();
        if rows.len() > self.max_device_rows {
            let dev = |&(ri, di): &(usize, usize)| &r.ranks[ri].devices[di];
            rows.sort_by(|a, b| {
                ratio(dev(a).compute_ns, dev(a).span_ns)
                    .total_cmp(&ratio(dev(b).compute_ns, dev(b).span_ns))
                    .then(a.cmp(b))
            });
            rows.truncate(self.max_device_rows);
            rows.sort_unstable();
        }
        o.push_str("<table class=\"sortable\" id=\"devices\"><thead><tr><th class=\"r\">rank</th><th class=\"r\">gpu</th><th>host</th><th class=\"r\">span</th><th class=\"r\">compute</th><th class=\"r\">exp.comm</th><th class=\"r\">exp.xfer</th><th class=\"r\">idle</th><th class=\"r\">host-bound</th><th>time</th></tr></thead><tbody>\n");
        for (ri, di) in rows.iter().copied() {
            let rk = &r.ranks[ri];
            let d = &rk.devices[di];
            let k = |f: &str| format!("ranks.{ri}.devices.{di}.{f}");
            let span = k("span_ns");
            let _ = writeln!(
                o,
                "<tr>{}{}{}{}{}{}{}{}{}<td class=\"b\">{}</td></tr>",
                Num::u(format!("ranks.{ri}.rank"), rk.rank.into(), Fmt::Num).td(),
                Num::u(k("device"), d.device.into(), Fmt::Num).td(),
                td_text(&rk.hostname),
                Num::u(k("span_ns"), d.span_ns, Fmt::Ns).td(),
                Num::pct(k("compute_ns"), d.compute_ns, &span, d.span_ns).td(),
                Num::pct(k("exposed_communication_ns"), d.exposed_communication_ns, &span, d.span_ns).td(),
                Num::pct(k("exposed_transfer_ns"), d.exposed_transfer_ns, &span, d.span_ns).td(),
                Num::pct(k("idle_ns"), d.idle_ns, &span, d.span_ns).td(),
                Num::pct(k("idle_causes.host_bound_ns"), d.idle_causes.host_bound_ns, &span, d.span_ns).td(),
                bar(device_parts(d), d.span_ns)
            );
        }
        let t = &r.totals;
        let c = &t.idle_causes;
        let span = "totals.span_ns";
        let _ = writeln!(
            o,
            "<tr class=\"all\"><td>all</td><td></td><td></td>{}{}{}{}{}{}<td class=\"b\">{}</td></tr>",
            Num::u(span, t.span_ns, Fmt::Ns).td(),
            Num::pct("totals.compute_ns", t.compute_ns, span, t.span_ns).td(),
            Num::pct("totals.exposed_communication_ns", t.exposed_communication_ns, span, t.span_ns).td(),
            Num::pct("totals.exposed_transfer_ns", t.exposed_transfer_ns, span, t.span_ns).td(),
            Num::pct("totals.idle_ns", t.idle_ns, span, t.span_ns).td(),
            Num::pct("totals.idle_causes.host_bound_ns", c.host_bound_ns, span, t.span_ns).td(),
            bar(
                [
                    t.compute_ns,
                    t.exposed_communication_ns,
                    t.exposed_transfer_ns,
                    c.host_bound_ns,
                    c.launch_latency_ns,
                    c.synchronization_ns,
                    t.idle_ns
                        .saturating_sub(c.host_bound_ns + c.launch_latency_ns + c.synchronization_ns)
                ],
                t.span_ns
            )
        );
        o.push_str("</tbody></table>\n");
        if rows.len() < total {
            let _ = writeln!(
                o,
                "<p class=\"note\">{} of {total} GPUs shown: those with the lowest compute share. Every GPU is in <code>gputrace report --json</code>.</p>",
                rows.len()
            );
        }
    }

    /// GPU counters over time, where NVML was sampled: a sparkline per plotted series
    /// and GPU, with its range.
    fn hardware(&self, o: &mut String, r: &Report) {
        const LABELS: [&str; 4] = ["GPU-Util", "SM clock", "power", "temperature"];
        let mut rows: Vec<(usize, usize)> = Vec::new();
        for (ri, rk) in r.ranks.iter().enumerate() {
            for (di, d) in rk.devices.iter().enumerate() {
                if d.hardware.as_ref().is_some_and(|h| !h.timeline.is_empty()) {
                    rows.push((ri, di));
                }
            }
        }
        if rows.is_empty() {
            return;
        }
        let total = rows.len();
        if rows.len() > self.max_device_rows {
            // The slowest clocks first: where the counters have something to say.
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
        // One scale per metric for every GPU: a 1965-1980 MHz line stays flat beside a
        // throttled one. Percentages on 0-100; the scale's floor is at most 0.8 of its top.
        let scales: Vec<(f64, f64)> = LABELS
            .iter()
            .map(|label| {
                let mut range = (f64::INFINITY, f64::NEG_INFINITY);
                for &(ri, di) in &rows {
                    let h = r.ranks[ri].devices[di].hardware.as_ref();
                    for t in h.iter().flat_map(|h| &h.timeline).filter(|t| t.label == *label) {
                        if t.unit == "%" {
                            range = (0.0, 100.0);
                        } else {
                            range = (range.0.min(t.min), range.1.max(t.max));
                        }
                    }
                }
                (range.0.min(0.8 * range.1), range.1)
            })
            .collect();
        o.push_str("<h2>GPU counters over time</h2><p class=\"mute\">NVML samples taken beside the timeline (<code>gputrace run --gpu-sample-hz</code>), each series the mean of its samples in up to 60 bins over its sampled time; the range is the bins' lowest and highest value. All GPUs share one scale per counter (shown under its name; GPU-Util on 0–100%).</p>");
        o.push_str("<table class=\"sortable\" id=\"hardware\"><thead><tr><th class=\"r\">rank</th><th class=\"r\">gpu</th>");
        for (l, (lo, hi)) in LABELS.iter().zip(&scales) {
            let unit = r
                .ranks
                .iter()
                .flat_map(|rk| &rk.devices)
                .flat_map(|d| d.hardware.iter().flat_map(|h| &h.timeline))
                .find(|t| t.label == *l)
                .map_or("", |t| unit_text(&t.unit));
            let _ = write!(
                o,
                "<th>{l}<span class=\"scale\">scale {}–{} {unit}</span></th>",
                trim(lo.round()),
                trim(hi.round())
            );
        }
        o.push_str("</tr></thead><tbody>\n");
        for (ri, di) in rows.iter().copied() {
            let rk = &r.ranks[ri];
            let d = &rk.devices[di];
            let Some(h) = &d.hardware else { continue };
            let _ = write!(
                o,
                "<tr>{}{}",
                Num::u(format!("ranks.{ri}.rank"), rk.rank.into(), Fmt::Num).td(),
                Num::u(format!("ranks.{ri}.devices.{di}.device"), d.device.into(), Fmt::Num).td()
            );
            for (label, scale) in LABELS.iter().zip(&scales) {
                match h.timeline.iter().position(|t| t.label == *label) {
                    Some(k) => {
                        let t = &h.timeline[k];
                        let key = |f: &str| format!("ranks.{ri}.devices.{di}.hardware.timeline.{k}.{f}");
                        let _ = write!(
                            o,
                            "<td class=\"sp\" data-sort=\"{}\">{}{}–{} {}</td>",
                            t.max,
                            sparkline(t, *scale),
                            Num::f(key("min"), Some(t.min), Fmt::Num).text(format!("{:.0}", t.min)).span(),
                            Num::f(key("max"), Some(t.max), Fmt::Num).text(format!("{:.0}", t.max)).span(),
                            esc(unit_text(&t.unit))
                        );
                    }
                    None => o.push_str("<td>-</td>"),
                }
            }
            o.push_str("</tr>\n");
        }
        o.push_str("</tbody></table>\n");
        if rows.len() < total {
            let _ = writeln!(
                o,
                "<p class=\"note\">{} of {total} sampled GPUs shown: those with the lowest SM clock. Every series is in <code>gputrace report --json</code> (<code>hardware.timeline</code>).</p>",
                rows.len()
            );
        }
    }

    fn steps(&self, o: &mut String, r: &Report, c: Option<&Comparison>) {
        // The first rank's busiest device, and the straggler's when it is another rank.
        let busiest = |ri: usize| {
            r.ranks[ri]
                .devices
                .iter()
                .enumerate()
                .filter(|(_, d)| !d.steps.is_empty())
                .max_by_key(|(_, d)| d.compute_ns)
                .map(|(di, _)| (ri, di))
        };
        let mut shown: Vec<(usize, usize)> = Vec::new();
        if let Some(first) = (0..r.ranks.len()).find_map(busiest) {
            shown.push(first);
        }
        if let Some(s) = c.and_then(|c| c.stragglers.first()) {
            if let Some(x) = r.ranks.iter().position(|rk| rk.rank == s.rank).and_then(busiest) {
                if !shown.iter().any(|(ri, _)| *ri == x.0) {
                    shown.push(x);
                }
            }
        }
        if shown.is_empty() {
            return;
        }
        o.push_str("<h2>Steps</h2><p class=\"mute\">Each step's window split like the span; <b>slow</b>: longer than 1.5 times the device's median step.</p>");
        for (ri, di) in shown {
            let rk = &r.ranks[ri];
            let d = &rk.devices[di];
            let mut durations: Vec<u64> = d.steps.iter().map(|s| s.duration_ns).collect();
            durations.sort_unstable();
            let median = durations[durations.len() / 2];
            let mut idx: Vec<usize> = (0..d.steps.len()).collect();
            if idx.len() > self.max_step_rows {
                idx.sort_by_key(|&i| (std::cmp::Reverse(d.steps[i].duration_ns), i));
                idx.truncate(self.max_step_rows);
                idx.sort_unstable();
            }
            let _ = writeln!(
                o,
                "<h3>rank {} gpu {}{}</h3><table class=\"sortable steps\"><thead><tr><th class=\"r\">step</th><th class=\"r\">duration</th><th class=\"r\">compute</th><th class=\"r\">exp.comm</th><th class=\"r\">exp.xfer</th><th class=\"r\">idle</th><th class=\"r\">host-bound</th><th>time</th></tr></thead><tbody>",
                rk.rank,
                d.device,
                match c.and_then(|c| c.stragglers.first()) {
                    Some(s) if s.rank == rk.rank => " (the straggler)",
                    _ => "",
                }
            );
            for &si in &idx {
                let s = &d.steps[si];
                let k = |f: &str| format!("ranks.{ri}.devices.{di}.steps.{si}.{f}");
                let dur = k("duration_ns");
                let slow = median > 0 && s.duration_ns * 2 > median * 3;
                let _ = writeln!(
                    o,
                    "<tr{}>{}{}{}{}{}{}{}<td class=\"b\">{}</td></tr>",
                    if slow { " class=\"slow\"" } else { "" },
                    Num::u(k("step"), s.step, Fmt::Num).td(),
                    Num::u(&dur, s.duration_ns, Fmt::Ns).td(),
                    Num::pct(k("compute_ns"), s.compute_ns, &dur, s.duration_ns).td(),
                    Num::pct(k("exposed_communication_ns"), s.exposed_communication_ns, &dur, s.duration_ns).td(),
                    Num::pct(k("exposed_transfer_ns"), s.exposed_transfer_ns, &dur, s.duration_ns).td(),
                    Num::pct(k("idle_ns"), s.idle_ns, &dur, s.duration_ns).td(),
                    Num::u(k("idle_causes.host_bound_ns"), s.idle_causes.host_bound_ns, Fmt::Ns).td(),
                    bar(step_parts(s), s.duration_ns)
                );
            }
            o.push_str("</tbody></table>\n");
            if idx.len() < d.steps.len() {
                let _ = writeln!(
                    o,
                    "<p class=\"note\">The {} slowest of {} steps shown; median step {}.</p>",
                    idx.len(),
                    d.steps.len(),
                    ns(median)
                );
            }
        }
    }

    fn findings(&self, o: &mut String, r: &Report) {
        o.push_str("<h2>Findings</h2>\n");
        if r.findings.is_empty() {
            o.push_str("<p>No rule fired: no large idle, exposed communication or transfer problem found.</p>\n");
        }
        for (i, f) in r.findings.iter().enumerate() {
            let (class, sev) = match f.severity {
                Severity::High => ("high", "HIGH"),
                Severity::Medium => ("medium", "MEDIUM"),
                Severity::Low => ("low", "LOW"),
                Severity::Info => ("info", "INFO"),
            };
            let mut vals = String::new();
            // Keys with a dot would not be a path; the rules' keys have none.
            for (k, v) in f.values.iter().filter(|(k, _)| !k.contains('.')) {
                let n = Num::f(format!("findings.{i}.values.{k}"), Some(*v), Fmt::Num).text(trim(*v));
                vals.push_str(&n.data());
            }
            let _ = writeln!(
                o,
                "<div class=\"finding {class}\"><p><span class=\"sev\">{sev}</span><b>{}</b></p><p><span class=\"mute\">evidence:</span> {}</p><p><span class=\"mute\">next:</span> {}</p>{vals}</div>",
                esc(&f.title),
                esc(&f.evidence),
                esc(&f.next_step)
            );
        }
    }

    fn kernels(&self, o: &mut String, r: &Report) {
        if r.top_kernels.is_empty() {
            return;
        }
        o.push_str("<h2>Top kernels</h2><p class=\"mute\">Summed over ranks; share of all kernel time.</p><table class=\"sortable\" id=\"kernels\"><thead><tr><th class=\"r\">time</th><th class=\"r\">share</th><th class=\"r\">count</th><th class=\"r\">mean</th><th>kind</th><th>name</th></tr></thead><tbody>\n");
        for (i, k) in r.top_kernels.iter().enumerate() {
            let key = |f: &str| format!("top_kernels.{i}.{f}");
            let _ = writeln!(
                o,
                "<tr>{}{}{}{}{}{}</tr>",
                Num::u(key("total_ns"), k.total_ns, Fmt::Ns).td(),
                Num::f(key("share"), Some(k.share), Fmt::Frac).td(),
                Num::u(key("count"), k.count, Fmt::Num).td(),
                Num::u(key("mean_ns"), k.mean_ns, Fmt::Ns).td(),
                td_text(if k.category == Category::Communication { "comm" } else { "compute" }),
                td_name(&k.name)
            );
        }
        o.push_str("</tbody></table>\n");
        if !r.copies.is_empty() {
            o.push_str("<h2>Copies and memsets</h2><table class=\"sortable\"><thead><tr><th>kind</th><th>host memory</th><th class=\"r\">count</th><th class=\"r\">bytes</th><th class=\"r\">time</th><th class=\"r\">GB/s</th></tr></thead><tbody>\n");
            for (i, c) in r.copies.iter().enumerate() {
                let key = |f: &str| format!("copies.{i}.{f}");
                let _ = writeln!(
                    o,
                    "<tr>{}{}{}{}{}{}</tr>",
                    td_text(&c.kind),
                    td_text(if c.pageable { "pageable" } else { "-" }),
                    Num::u(key("count"), c.count, Fmt::Num).td(),
                    Num::bytes(key("bytes"), c.bytes).td(),
                    Num::u(key("total_ns"), c.total_ns, Fmt::Ns).td(),
                    Num::f(key("achieved_gbps"), Some(c.achieved_gbps), Fmt::Num).td()
                );
            }
            o.push_str("</tbody></table>\n");
        }
    }

    fn collectives(&self, o: &mut String, r: &Report) {
        if r.collectives.is_empty() {
            return;
        }
        o.push_str("<h2>Collectives</h2><p class=\"mute\">NCCL collectives per communicator and operation, summed over ranks; time: GPU time of the collectives linked to their kernel; bandwidths as NCCL-tests.</p><table class=\"sortable\" id=\"collectives\"><thead><tr><th>communicator</th><th>op</th><th class=\"r\">count</th><th class=\"r\">bytes</th><th class=\"r\">time</th><th class=\"r\">mean</th><th class=\"r\">algbw GB/s</th><th class=\"r\">busbw GB/s</th><th>algorithms</th><th>protocols</th></tr></thead><tbody>\n");
        for (i, c) in r.collectives.iter().enumerate() {
            let key = |f: &str| format!("collectives.{i}.{f}");
            let comm = if c.communicator_name.is_empty() {
                c.communicator.clone()
            } else {
                format!("{} {}", c.communicator_name, c.communicator)
            };
            let _ = writeln!(
                o,
                "<tr>{}{}{}{}{}{}{}{}{}</tr>",
                td_text(&comm),
                td_text(&c.op),
                Num::u(key("count"), c.count, Fmt::Num).td(),
                Num::bytes(key("bytes"), c.bytes).td(),
                Num::u(key("time_ns"), c.time_ns, Fmt::Ns).td(),
                Num::u(key("mean_ns"), c.mean_ns, Fmt::Ns).td(),
                Num::f(key("algbw_gbps"), c.algbw_gbps, Fmt::Num).td(),
                Num::f(key("busbw_gbps"), c.busbw_gbps, Fmt::Num).td(),
                Html::algorithms_cells(i, c)
            );
        }
        o.push_str("</tbody></table>\n");
    }

    fn straggler(&self, o: &mut String, page: &Page<'_>) {
        o.push_str("<h2>Stragglers</h2>\n");
        let Some(c) = page.comparison else {
            let _ = writeln!(
                o,
                "<p class=\"mute\">No cross-rank comparison: {}</p>",
                esc(page.comparison_note.as_deref().unwrap_or("not computed"))
            );
            return;
        };
        let _ = writeln!(
            o,
            "<p class=\"mute\">{} collectives matched across {} ranks ({}); clocks aligned on the collectives' end times, residual {}.</p>",
            Num::u("compare.matched", c.matched as u64, Fmt::Num).span(),
            c.ranks.len(),
            esc(&c.matching),
            Num::u("compare.clock.residual_ns", c.clock.residual_ns, Fmt::Ns).span()
        );
        for w in &c.warnings {
            let _ = writeln!(o, "<p class=\"warn\">{}</p>", esc(w));
        }
        if c.stragglers.is_empty() {
            o.push_str("<p>No straggler: no rank imposes a disproportionate share of the waiting.</p>\n");
        }
        for (i, s) in c.stragglers.iter().enumerate() {
            let key = |f: &str| format!("compare.stragglers.{i}.{f}");
            let _ = writeln!(
                o,
                "<div class=\"finding high\"><p><span class=\"sev\">STRAGGLER</span><b>rank {}</b>: arrived last at {} collectives and made the others wait {} in all ({} of all waiting); cause: <b>{}</b></p><p>{}</p></div>",
                Num::u(key("rank"), s.rank.into(), Fmt::Num).span(),
                Num::u(key("arrived_last"), s.arrived_last, Fmt::Num).span(),
                Num::u(key("wait_imposed_ns"), s.wait_imposed_ns, Fmt::Ns).span(),
                Num::f(key("score"), Some(s.score), Fmt::Frac).span(),
                esc(s.cause.name()),
                esc(&s.why)
            );
        }
        self.heatmap(o, c);
        // Ranks are sorted by imposed wait in the comparison: the first are the worst.
        let max = c.ranks.iter().map(|x| x.wait_imposed_ns).max().unwrap_or(0);
        let shown = c.ranks.len().min(self.max_rank_rows);
        o.push_str("<h3>Waiting imposed per rank</h3><table class=\"sortable\" id=\"waiting\"><thead><tr><th class=\"r\">rank</th><th>host</th><th class=\"r\">last at</th><th class=\"r\">imposed</th><th class=\"r\">waited</th><th class=\"r\">mean lateness</th><th class=\"r\">compute</th><th class=\"r\">host idle</th><th>imposed</th></tr></thead><tbody>\n");
        for (i, x) in c.ranks.iter().take(shown).enumerate() {
            let key = |f: &str| format!("compare.ranks.{i}.{f}");
            let w = if max == 0 {
                0.0
            } else {
                1000.0 * x.wait_imposed_ns as f64 / max as f64
            };
            let _ = writeln!(
                o,
                "<tr>{}{}{}{}{}{}{}{}<td class=\"b\"><svg class=\"bar\" viewBox=\"0 0 1000 12\" preserveAspectRatio=\"none\"><rect class=\"host\" width=\"{w:.2}\" height=\"12\"></rect></svg></td></tr>",
                Num::u(key("rank"), x.rank.into(), Fmt::Num).td(),
                td_text(&x.host),
                Num::u(key("arrived_last"), x.arrived_last, Fmt::Num).td(),
                Num::u(key("wait_imposed_ns"), x.wait_imposed_ns, Fmt::Ns).td(),
                Num::u(key("waited_ns"), x.waited_ns, Fmt::Ns).td(),
                Num::i(key("mean_lateness_ns"), x.mean_lateness_ns).td(),
                Num::u(key("compute_ns"), x.compute_ns, Fmt::Ns).td(),
                Num::u(key("host_idle_ns"), x.host_idle_ns, Fmt::Ns).td()
            );
        }
        o.push_str("</tbody></table>\n");
        if shown < c.ranks.len() {
            let _ = writeln!(
                o,
                "<p class=\"note\">The {shown} ranks that imposed the most waiting, of {}; all in <code>gputrace compare --json</code>.</p>",
                c.ranks.len()
            );
        }
    }

    /// Lateness by rank × step, ranks and steps bucketed to at most
    /// `heatmap_rows` × `heatmap_cols` cells; a cell shows its bucket's largest
    /// lateness and names that entry of `compare.lateness` as its key.
    fn heatmap(&self, o: &mut String, c: &Comparison) {
        let rows = c.lateness.len();
        let cols = c.lateness.first().map_or(0, Vec::len);
        if rows == 0 || cols == 0 {
            return;
        }
        let (br, bc) = (rows.div_ceil(self.heatmap_rows.max(1)), cols.div_ceil(self.heatmap_cols.max(1)));
        let (nr, nc) = (rows.div_ceil(br), cols.div_ceil(bc));
        let max = c.lateness.iter().flatten().copied().max().unwrap_or(0).max(1);
        // Every row is tall enough for its label.
        let (left, top, cw, ch) = (110usize, 8usize, (760 / nc).clamp(6, 40), (480 / nr).clamp(13, 22));
        let (w, h) = (left + nc * cw + 10, top + nr * ch + 40);
        let rank_of = |i: usize| c.lateness_ranks.get(i).copied().unwrap_or(i as u32);
        let _ = write!(
            o,
            "<h3>Arrival lateness at collectives</h3><p class=\"mute\">How far behind the earliest rank each rank arrived at the step's collectives, by rank × step{}; the stronger the colour, the later (scale below); largest {}.</p>\
             <div class=\"scroll\"><svg class=\"hm\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" role=\"img\">",
            if br > 1 || bc > 1 {
                format!(" (buckets of {br} rank(s) × {bc} step(s), each showing its largest)")
            } else {
                String::new()
            },
            ns(max)
        );
        for gi in 0..nr {
            let (r0, r1) = (gi * br, ((gi + 1) * br).min(rows));
            let y = top + gi * ch;
            let label = if r1 - r0 == 1 {
                format!("rank {}", rank_of(r0))
            } else {
                format!("ranks {}-{}", rank_of(r0), rank_of(r1 - 1))
            };
            let _ = write!(
                o,
                r#"<text x="{}" y="{}" text-anchor="end">{label}</text>"#,
                left - 4,
                y + ch.min(12) - 1
            );
            for gj in 0..nc {
                let (c0, c1) = (gj * bc, ((gj + 1) * bc).min(cols));
                let (mut bi, mut bj, mut v) = (r0, c0, 0u64);
                for (i, row) in c.lateness.iter().enumerate().take(r1).skip(r0) {
                    for (j, &x) in row.iter().enumerate().take(c1).skip(c0) {
                        if x > v {
                            (bi, bj, v) = (i, j, x);
                        }
                    }
                }
                let x = left + gj * cw;
                let steps = if c1 - c0 == 1 {
                    format!("step {c0}")
                } else {
                    format!("steps {c0}-{}", c1 - 1)
                };
                let _ = write!(
                    o,
                    r#"<rect class="bg" x="{x}" y="{y}" width="{cw}" height="{ch}"></rect><rect class="cell n" x="{x}" y="{y}" width="{cw}" height="{ch}" fill-opacity="{:.3}" data-key="compare.lateness.{bi}.{bj}" data-value="{v}" data-fmt="ns"><title>{label}, {steps}: {} late</title></rect>"#,
                    v as f64 / max as f64,
                    ns(v)
                );
            }
        }
        // Step numbers under the columns (as many as fit), then the colour scale.
        let axis = top + nr * ch + 13;
        let every = (28 / cw).max(1);
        for gj in (0..nc).step_by(every) {
            let _ = write!(
                o,
                r#"<text x="{}" y="{axis}" class="ax">{}</text>"#,
                left + gj * cw + cw / 2,
                gj * bc
            );
        }
        let _ = write!(o, r#"<text x="{}" y="{axis}" text-anchor="end">step</text>"#, left - 4);
        let scale_y = axis + 8;
        let _ = write!(o, r#"<text x="{}" y="{}" text-anchor="end">0</text>"#, left - 4, scale_y + 10);
        for k in 0..10 {
            let _ = write!(
                o,
                r#"<rect class="bg" x="{x}" y="{scale_y}" width="20" height="12"></rect><rect class="cell" x="{x}" y="{scale_y}" width="20" height="12" fill-opacity="{:.2}"></rect>"#,
                (k as f64 + 0.5) / 10.0,
                x = left + k * 20
            );
        }
        let _ = write!(
            o,
            r#"<text x="{}" y="{}">{} late</text></svg></div>"#,
            left + 204,
            scale_y + 10,
            ns(max)
        );
        o.push('\n');
    }

    fn cost(&self, o: &mut String, r: &Report) {
        let Some(c) = &r.cost else { return };
        let usd = |k: &str, v: f64| Num::f(format!("cost.{k}"), Some(v), Fmt::Usd).span();
        let _ = writeln!(
            o,
            "<h2>Cost at {} per GPU-hour</h2><p>spans {}; idle {}, exposed communication {}, exposed transfer {}, startup/teardown {}: not compute {}</p>",
            Num::f("cost.usd_per_gpu_hour", Some(c.usd_per_gpu_hour), Fmt::Usd)
                .text(format!("${:.2}", c.usd_per_gpu_hour))
                .span(),
            usd("span_usd", c.span_usd),
            usd("idle_usd", c.idle_usd),
            usd("exposed_communication_usd", c.exposed_communication_usd),
            usd("exposed_transfer_usd", c.exposed_transfer_usd),
            usd("startup_teardown_usd", c.startup_teardown_usd),
            usd("not_compute_usd", c.not_compute_usd)
        );
    }
}

/// A series as an inline SVG line (broken where a bin has no samples) on the scale `lo..hi`,
/// which every GPU's line of the same metric shares.
fn sparkline(t: &gputrace_analysis::hardware::CounterTimeline, (lo, hi): (f64, f64)) -> String {
    const W: f64 = 120.0;
    const H: f64 = 24.0;
    let n = t.values.len().max(2) - 1;
    let y = |v: f64| {
        let f = if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
        H - 1.0 - f.clamp(0.0, 1.0) * (H - 2.0)
    };
    let mut lines = String::new();
    let mut points = String::new();
    let flush = |points: &mut String, lines: &mut String| {
        if !points.is_empty() {
            let _ = write!(lines, "<polyline points=\"{}\"/>", points.trim_end());
            points.clear();
        }
    };
    for (i, v) in t.values.iter().enumerate() {
        match v {
            Some(v) => {
                let _ = write!(points, "{:.1},{:.1} ", i as f64 * W / n as f64, y(*v));
            }
            None => flush(&mut points, &mut lines),
        }
    }
    flush(&mut points, &mut lines);
    format!(
        "<svg class=\"spark\" viewBox=\"0 0 120 24\" preserveAspectRatio=\"none\" role=\"img\" aria-label=\"{} over time\">{lines}</svg>",
        esc(&t.label)
    )
}

/// A counter's unit as people write it (`°C` for the JSON's `C`).
fn unit_text(unit: &str) -> &str {
    match unit {
        "C" => "°C",
        u => u,
    }
}

/// A finding's value without trailing zeros: `0.42`, `3`, `1234.5`.
fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

impl Num {
    /// Keep the text, but name another value as the JSON's (seconds shown as a duration).
    fn value_of<T: Serialize>(mut self, v: &T) -> Num {
        self.value = json(v);
        self.fmt = Fmt::Secs;
        self
    }
}
