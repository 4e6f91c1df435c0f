//! The text report's host section.

use gputrace_analysis::{host, Report};
use gputrace_format::Nanos;
use std::fmt::Write;

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        return "-".into();
    }
    format!("{:.0}%", 100.0 * part as f64 / whole as f64)
}

/// The text report's host section: per trace with host samples, what the
/// host did over the GPU's idle time (or over the whole run without GPU
/// activity), and the main thread's top stacks. `None` without samples.
pub(crate) fn render_section(r: &Report) -> Option<String> {
    let mut o = String::new();
    for rk in &r.ranks {
        let Some(h) = &rk.host else { continue };
        let (what, v) = match &h.gpu_idle {
            Some(v) => ("GPU idle", v),
            None => ("the whole run (no GPU activity)", &h.wall),
        };
        let what_samples = if h.hz == 0 {
            format!("{} Python stack intervals from Kineto python_function events", h.samples)
        } else {
            format!("{} samples at {} Hz", h.samples, h.hz)
        };
        let _ = writeln!(
            o,
            "rank {} pid {}: {what_samples} of {} threads in {} process(es){}",
            rk.rank,
            rk.pid,
            h.threads,
            h.processes,
            if h.lost > 0 {
                format!(", {} LOST (see info)", h.lost)
            } else {
                String::new()
            }
        );
        let _ = writeln!(
            o,
            "  over {what} ({}, {} sampled): {}",
            Nanos(v.window_ns),
            pct(v.sampled_ns, v.window_ns),
            host::view_line(v)
        );
        for d in &rk.devices {
            for st in d.steps.iter().filter(|s| s.host.is_some()) {
                let sv = st.host.as_ref().expect("filtered");
                let _ = writeln!(
                    o,
                    "  slow step {} on gpu {} ({}, {} idle): {}",
                    st.step,
                    d.device,
                    Nanos(st.duration_ns),
                    Nanos(sv.window_ns),
                    host::view_line(sv)
                );
            }
        }
        if !v.stacks.is_empty() {
            let _ = writeln!(
                o,
                "  main thread's Python stacks by {} time:",
                if h.gpu_idle.is_some() { "GPU-idle" } else { "wall" }
            );
            for st in &v.stacks {
                let inner: Vec<&str> = st.frames.iter().rev().take(3).map(String::as_str).collect();
                let shown = if inner.is_empty() {
                    "(no Python stack)".to_string()
                } else {
                    inner.join(" ← ")
                };
                let state = if v.thread_state { st.state.name() } else { "traced" };
                let _ = writeln!(o, "  {:>6}  {:<9}  {shown}", pct(st.idle_ns, v.sampled_ns), state);
            }
        }
    }
    (!o.is_empty()).then_some(o)
}
