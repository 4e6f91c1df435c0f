//! Flame graphs of the host's Python stacks weighted by GPU-idle time: one per rank with
//! host samples (every main-thread stack, `report`'s `folded`), and one per slow step (the
//! step's heaviest stacks). Drawn as nested boxes in HTML, outermost frame on top: a frame's
//! width is its share of the sampled GPU-idle time, its `title` names the frame, its
//! `file:line` and its time. No script, no other tool.
//!
//! Invariant: the boxes of one row never overlap and a child lies inside its parent, because
//! a child's offset is its parent's plus the time of its elder siblings, and the children of
//! a frame sum to at most the frame's time.

use crate::num::{Fmt, Num};
use crate::{esc_text, ns, Html};
use gputrace_analysis::host::HostView;
use gputrace_analysis::Report;
use maud::{html, Markup};

/// Frames narrower than this share of the graph are not drawn (their time stays in their
/// parent's width).
const MIN_SHARE: f64 = 0.002;
/// Rows drawn; deeper frames are cut, and the graph says so.
const MAX_DEPTH: usize = 40;
/// Boxes drawn per graph (the widest; the graph says so), which keeps a page of many ranks
/// with many distinct stacks small.
const MAX_BOXES: usize = 400;

/// A frame of the merged stacks and the time spent in it and below it.
#[derive(Default)]
struct Frame {
    name: String,
    ns: u64,
    /// By name, as a flame graph merges them (alphabetical order, not time order).
    children: Vec<Frame>,
}

impl Frame {
    fn add(&mut self, frames: &[&str], ns: u64) {
        self.ns += ns;
        let Some((first, rest)) = frames.split_first() else { return };
        let i = match self.children.binary_search_by(|c| c.name.as_str().cmp(first)) {
            Ok(i) => i,
            Err(i) => {
                self.children.insert(
                    i,
                    Frame {
                        name: first.to_string(),
                        ..Frame::default()
                    },
                );
                i
            }
        };
        self.children[i].add(rest, ns);
    }
}

/// A box to draw: its row, its offset and width in ns of the graph's whole.
struct Placed<'a> {
    depth: usize,
    at: u64,
    frame: &'a Frame,
}

/// What [`place`] left out.
#[derive(Default)]
struct Cut {
    /// Frames deeper than [`MAX_DEPTH`].
    deep: bool,
    /// Boxes wide enough to draw, when more than [`MAX_BOXES`].
    boxes: Option<usize>,
}

/// Every frame wide enough to draw, at most [`MAX_BOXES`] (the widest), parents before
/// children. Keeping the widest keeps every kept box's parent: a child is at most as wide as
/// its parent, and of two as wide the parent is higher, so it sorts first.
fn place(root: &Frame) -> (Vec<Placed<'_>>, Cut) {
    let min = ((root.ns as f64 * MIN_SHARE).ceil() as u64).max(1);
    let mut cut = Cut::default();
    let mut out = Vec::new();
    let mut todo = vec![Placed {
        depth: 0,
        at: 0,
        frame: root,
    }];
    while let Some(p) = todo.pop() {
        let mut at = p.at;
        for c in &p.frame.children {
            if c.ns >= min {
                if p.depth + 1 < MAX_DEPTH {
                    todo.push(Placed {
                        depth: p.depth + 1,
                        at,
                        frame: c,
                    });
                } else {
                    cut.deep = true;
                }
            }
            at += c.ns;
        }
        out.push(p);
    }
    if out.len() > MAX_BOXES {
        cut.boxes = Some(out.len());
        out.sort_by_key(|p| (std::cmp::Reverse(p.frame.ns), p.depth, p.at));
        out.truncate(MAX_BOXES);
        out.sort_by_key(|p| (p.depth, p.at));
    }
    (out, cut)
}

/// The function of a `function (file:line)` frame: what its box shows (the whole frame is
/// in its `title`).
fn function_of(frame: &str) -> &str {
    frame.rsplit_once(" (").map_or(frame, |(f, _)| f)
}

/// The graph of `root` (its `name` is the caption of the top row); `of` names the time the
/// widths share (`GPU idle`).
fn graph(root: &Frame, of: &str) -> Markup {
    let (placed, cut) = place(root);
    let depth = placed.iter().map(|p| p.depth).max().unwrap_or(0) + 1;
    let whole = root.ns.max(1) as f64;
    html! {
        div.fg style={ "height:" (depth * 18) "px" } {
            @for p in &placed {
                @let share = p.frame.ns as f64 / whole;
                // A box under 1% of the graph (under its padding at any page
                // width the page allows) has none, so it ends where its width does.
                div.fg-f.{ "fg" (hue(&p.frame.name, p.depth)) }.fg-n[share < 0.01]
                    style={ "top:" (p.depth * 18) "px;left:" (format!("{:.3}", 100.0 * p.at as f64 / whole)) "%;width:" (format!("{:.3}", 100.0 * share)) "%" }
                    title={ (esc_text(&p.frame.name)) "\n" (ns(p.frame.ns)) " of " (of) ", " (format!("{:.1}", 100.0 * share)) "%" }
                    data-frame=(esc_text(&p.frame.name)) data-ns=(p.frame.ns) data-share=(format!("{share:.4}")) {
                    (esc_text(function_of(&p.frame.name)))
                }
            }
        }
        @if cut.deep {
            p.note { "Stacks deeper than " (MAX_DEPTH) " frames are cut at that depth." }
        }
        @if let Some(n) = cut.boxes {
            p.note { "The " (MAX_BOXES) " widest of " (n) " boxes are drawn; every stack is in " code { "gputrace report --folded" } "." }
        }
    }
}

/// One of six colours, the same for a function wherever it appears.
fn hue(name: &str, depth: usize) -> usize {
    if depth == 0 {
        return 0;
    }
    let f = function_of(name);
    1 + f.bytes().fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize)) % 5
}

/// A step's heaviest stacks (the report keeps the top few) and, for the rest of its sampled
/// idle time, one box that says so.
fn step_root(v: &HostView) -> Frame {
    let mut root = Frame {
        name: "all sampled GPU-idle time of the step".into(),
        ..Frame::default()
    };
    for s in &v.stacks {
        let frames: Vec<&str> = s.frames.iter().map(String::as_str).collect();
        let frames = if frames.is_empty() { vec!["(no Python stack)"] } else { frames };
        root.add(&frames, s.idle_ns);
    }
    let rest = v.sampled_ns.saturating_sub(root.ns);
    if rest > 0 {
        root.add(&["(other stacks, not kept in the report)"], rest);
    }
    root
}

impl Html {
    /// The host's stacks while the GPU was idle, or why the page has none.
    pub(crate) fn flame_graphs(&self, r: &Report) -> Markup {
        let mut ranks: Vec<usize> = (0..r.ranks.len())
            .filter(|&ri| r.ranks[ri].host.as_ref().is_some_and(|h| !h.folded.is_empty()))
            .collect();
        let sampled = |ri: &usize| {
            let h = r.ranks[*ri].host.as_ref().expect("filtered");
            h.gpu_idle.as_ref().unwrap_or(&h.wall).sampled_ns
        };
        let with_samples = ranks.len();
        if ranks.len() > self.max_flame_graphs {
            ranks.sort_by_key(|ri| (std::cmp::Reverse(sampled(ri)), *ri));
            ranks.truncate(self.max_flame_graphs);
            ranks.sort_unstable();
        }
        let mut steps: Vec<(usize, usize, usize)> = Vec::new();
        for (ri, rk) in r.ranks.iter().enumerate() {
            for (di, d) in rk.devices.iter().enumerate() {
                for (si, s) in d.steps.iter().enumerate() {
                    if s.host.as_ref().is_some_and(|v| v.sampled_ns > 0) {
                        steps.push((ri, di, si));
                    }
                }
            }
        }
        let step = |&(ri, di, si): &(usize, usize, usize)| &r.ranks[ri].devices[di].steps[si];
        let slow_steps = steps.len();
        if steps.len() > self.max_flame_graphs {
            steps.sort_by_key(|s| (std::cmp::Reverse(step(s).duration_ns), *s));
            steps.truncate(self.max_flame_graphs);
            steps.sort_unstable();
        }
        html! {
            h2 { "Host stacks while the GPU was idle" }
            @if ranks.is_empty() {
                p.mute #flame-none {
                    "No flame graph: these traces have no host samples. "
                    code { "gputrace run" } " samples the job's Python stacks and threads (on by default, "
                    code { "--host-sample-hz" } "); a trace recorded with " code { "--no-host-samples" }
                    ", imported from another profiler or of a job with no Python process has none. See docs/host.md."
                }
            } @else {
                p.mute {
                    "The main thread's Python stacks, outermost frame on top, each box as wide as its share of the GPU's idle time the thread was sampled in (by wall time for a trace without GPU activity). Hover a box for its frame, "
                    code { "file:line" } " and time. The same stacks as "
                    code { "gputrace report --folded" } "."
                }
                @for &ri in &ranks {
                    (self.rank_flame(r, ri))
                }
                @if ranks.len() < with_samples {
                    p.note { "The " (ranks.len()) " of " (with_samples) " ranks with the most sampled idle time." }
                }
                @if !steps.is_empty() {
                    h3 { "Slow steps" }
                    p.mute { "Each slow step's idle time (the step lasted at least 1.5 times its device's median): its heaviest stacks, the rest in one box." }
                    @for s in &steps {
                        (self.step_flame(r, *s))
                    }
                    @if steps.len() < slow_steps {
                        p.note { "The " (steps.len()) " slowest of " (slow_steps) " slow steps with host samples." }
                    }
                }
            }
        }
    }

    fn rank_flame(&self, r: &Report, ri: usize) -> Markup {
        let rk = &r.ranks[ri];
        let h = rk.host.as_ref().expect("ranks with host samples");
        let (view, what, of, field) = match &h.gpu_idle {
            Some(v) => (v, "GPU idle", "GPU idle", "gpu_idle"),
            None => (&h.wall, "the whole run (no GPU activity)", "wall time", "wall"),
        };
        let mut root = Frame {
            name: format!("rank {}: all sampled {what}", rk.rank),
            ..Frame::default()
        };
        // Folded stacks are `;`-joined: a `;` inside a frame's name splits it there, as in every
        // folded-stack tool.
        for (stack, us) in &h.folded {
            let frames: Vec<&str> = stack.split(';').collect();
            root.add(&frames, us * 1000);
        }
        let key = |f: &str| format!("ranks.{ri}.host.{field}.{f}");
        html! {
            div.flame data-rank=(rk.rank) {
                p {
                    b { "rank " (rk.rank) } ": " (Num::u(key("sampled_ns"), view.sampled_ns, Fmt::Ns).span())
                    " sampled of " (Num::u(key("window_ns"), view.window_ns, Fmt::Ns).span()) " " (what)
                    "; " (view.cause.name())
                }
                (graph(&root, of))
            }
        }
    }

    fn step_flame(&self, r: &Report, (ri, di, si): (usize, usize, usize)) -> Markup {
        let (rk, d) = (&r.ranks[ri], &r.ranks[ri].devices[di]);
        let s = &d.steps[si];
        let v = s.host.as_ref().expect("steps with a host view");
        let key = |f: &str| format!("ranks.{ri}.devices.{di}.steps.{si}.{f}");
        html! {
            div.flame data-rank=(rk.rank) data-step=(s.step) {
                p {
                    b { "step " (s.step) } " of rank " (rk.rank) " gpu " (d.device) ": "
                    (Num::u(key("duration_ns"), s.duration_ns, Fmt::Ns).span()) ", "
                    (Num::u(key("host.window_ns"), v.window_ns, Fmt::Ns).span()) " idle, "
                    (Num::u(key("host.sampled_ns"), v.sampled_ns, Fmt::Ns).span()) " sampled; "
                    (v.cause.name())
                }
                (graph(&step_root(v), "GPU idle"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_graph_of_many_stacks_draws_the_widest_boxes_and_says_so() {
        let mut root = Frame::default();
        // 300 stacks `main;a{i};b{i}` of weight 1000 + i: each leaf about 0.3% of the whole,
        // wider than MIN_SHARE; 602 boxes with the root and `main`.
        let names: Vec<(String, String)> = (0..300).map(|i| (format!("a{i} (x.py:{i})"), format!("b{i} (y.py:{i})"))).collect();
        for (i, (a, b)) in names.iter().enumerate() {
            root.add(&["main (x.py:1)", a, b], 1000 + i as u64);
        }
        let (placed, cut) = place(&root);
        assert_eq!(cut.boxes, Some(602));
        assert_eq!(placed.len(), MAX_BOXES);
        assert_eq!((placed[0].depth, placed[1].depth), (0, 1), "the root and main are kept");
        // The 199 widest stacks, each with both its frames: no box without its parent.
        assert!(placed[2..].iter().all(|p| p.frame.ns >= 1000 + 300 - 199), "the widest");
        for p in placed.iter().filter(|p| p.depth == 3) {
            let parent = format!("a{}", &p.frame.name[1..]).replace("y.py", "x.py");
            assert!(placed.iter().any(|q| q.depth == 2 && q.frame.name == parent), "{}", p.frame.name);
        }
        let html = graph(&root, "GPU idle").into_string();
        assert!(html.contains("The 400 widest of 602 boxes are drawn"));
    }
}
