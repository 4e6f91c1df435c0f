//! The settings that make capture cheaper by asking CUPTI for less
//! (`docs/agent.md`, "Cheaper capture"): graph-level graphs, hardware event
//! timestamps and per-thread activity buffers. Parsing here; the calls are
//! made by `session/` at set-up (before any activity kind is enabled, as
//! CUPTI requires for the last two) and, for `--graphs auto`, by the writer.

use crate::cupti::Cupti;
use crate::error::CallError;
use cupti_sys as sys;

/// How CUDA graphs are recorded (`GPUTRACE_GRAPHS`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GraphMode {
    /// Every node: kernels, copies and memsets one by one (CUPTI's default).
    #[default]
    Node,
    /// One record per graph launch (CUPTI's GRAPH_TRACE kind) from the start.
    Graph,
    /// Node level until some graph has been launched `after` times, then
    /// graph level for the rest of the process (CUPTI cannot go back).
    Auto {
        /// Launches of one graph that switch to graph level.
        after: u64,
    },
}

/// Launches of one graph after which `--graphs auto` switches (default).
pub const GRAPHS_AFTER: u64 = 20;

impl GraphMode {
    /// From `GPUTRACE_GRAPHS` and `GPUTRACE_GRAPHS_AFTER`; an unknown value
    /// is node level, with the line to print.
    pub fn parse(mode: Option<&str>, after: Option<&str>) -> (GraphMode, Option<String>) {
        let after = after
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(GRAPHS_AFTER, |n| n.clamp(1, 1 << 30));
        match mode.map(str::trim) {
            None | Some("") | Some("node") => (GraphMode::Node, None),
            Some("graph") => (GraphMode::Graph, None),
            Some("auto") => (GraphMode::Auto { after }, None),
            Some(other) => (
                GraphMode::Node,
                Some(format!(
                    "ignoring GPUTRACE_GRAPHS={other}: not node, graph or auto; graphs are recorded node by node"
                )),
            ),
        }
    }

    /// The header's `capture.graphs`.
    pub fn label(self) -> String {
        match self {
            GraphMode::Node => "node".into(),
            GraphMode::Graph => "graph".into(),
            GraphMode::Auto { after } => format!("auto (graph level once a graph has been launched {after} times)"),
        }
    }
}

/// Whether kernel timestamps come from the hardware event system (HES,
/// Blackwell and newer; `GPUTRACE_HW_TRACE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HwTrace {
    /// Use it when this CUPTI is new enough and the GPU supports it; no
    /// line when it does not.
    #[default]
    Auto,
    /// Ask for it; one line when refused.
    On,
    /// Never.
    Off,
}

impl HwTrace {
    /// From `GPUTRACE_HW_TRACE`; an unknown value is `auto`, with the line to print.
    pub fn parse(v: Option<&str>) -> (HwTrace, Option<String>) {
        match v.map(str::trim) {
            None | Some("") | Some("auto") => (HwTrace::Auto, None),
            Some("on") | Some("1") => (HwTrace::On, None),
            Some("off") | Some("0") => (HwTrace::Off, None),
            Some(other) => (
                HwTrace::Auto,
                Some(format!("ignoring GPUTRACE_HW_TRACE={other}: not auto, on or off")),
            ),
        }
    }
}

/// `cuptiActivityEnableHWTrace` appeared in CUPTI 12.8 (API version 26).
pub const HW_TRACE_SINCE: u32 = 26;
/// `auto` uses hardware tracing only on a CUPTI newer than 13.4.0 (API
/// version 130401), whose HES records leak (fixed in 13.4 Update 1).
pub const HW_TRACE_AUTO_AFTER: u32 = 130_401;

/// The header's `cupti.kernel_timestamps` when CUPTI instruments kernels.
pub const SOFTWARE_TIMESTAMPS: &str = "software (CUPTI instruments each kernel)";

/// Ask for hardware event tracing as `mode` says. Returns the header's
/// `cupti.kernel_timestamps` and the line to print, if any. Call before any
/// activity kind is enabled and before a context exists (inside
/// `InitializeInjection`, which the driver runs within `cuInit`).
pub fn hw_trace(api: &Cupti, version: u32, mode: HwTrace) -> (String, Option<String>) {
    let refused = |why: String| {
        let line =
            (mode == HwTrace::On).then(|| format!("hardware event tracing refused: {why}; kernels are timed by CUPTI's instrumentation"));
        (format!("{SOFTWARE_TIMESTAMPS}; hardware event tracing not used: {why}"), line)
    };
    match mode {
        HwTrace::Off => return (format!("{SOFTWARE_TIMESTAMPS}; hardware event tracing off"), None),
        _ if version < HW_TRACE_SINCE => return refused(format!("CUPTI {} is older than 12.8", version_label(version))),
        HwTrace::Auto if version <= HW_TRACE_AUTO_AFTER => {
            return refused(format!(
                "CUPTI {} is older than 13.4 Update 1 (earlier hardware event tracing leaks records); --hw-trace on forces it",
                version_label(version)
            ))
        }
        _ => {}
    }
    match api.enable_hw_trace() {
        None => refused("this libcupti has no cuptiActivityEnableHWTrace".into()),
        Some(Ok(())) => ("hardware event system (HES), as CUPTI accepted at set-up".into(), None),
        Some(Err(e)) => {
            let (why, always) = hw_trace_refusal(&e);
            let (note, line) = refused(why);
            // MPS and MIG are worth a line even in `auto`: the user may not know.
            (
                note,
                line.or_else(|| always.then(|| format!("hardware event tracing not used: {e}"))),
            )
        }
    }
}

/// Why CUPTI refused hardware tracing, and whether to say so in `auto`.
fn hw_trace_refusal(e: &CallError) -> (String, bool) {
    match e.code {
        sys::CUPTI_ERROR_HES_TRACE_NOT_SUPPORTED_ON_MPS => ("not supported under MPS".into(), true),
        sys::CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED => ("not supported on a MIG instance".into(), true),
        sys::CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED => ("not supported on a virtualized GPU (vGPU)".into(), true),
        sys::CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED => ("not supported under WSL".into(), true),
        sys::CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED => ("not supported with confidential computing".into(), true),
        sys::CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED | sys::CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED => (e.to_string(), true),
        sys::CUPTI_ERROR_NOT_SUPPORTED => ("this GPU or platform does not support it (Blackwell or newer needed)".into(), false),
        _ => (e.to_string(), false),
    }
}

/// `cuptiGetVersion`'s number as a CUDA version where it maps to one.
pub fn version_label(v: u32) -> String {
    match v {
        v if v >= 130_000 => format!("{}.{} (API {v})", v / 10_000, v / 100 % 100),
        v => format!("API version {v}"),
    }
}

/// Set CUPTI's per-thread activity buffers as asked (`None`: CUPTI's
/// default, on in 13.x and off in 12.x). Returns the header's
/// `cupti.per_thread_buffers`. Call before the buffer callbacks are
/// registered and before any kind is enabled.
pub fn per_thread_buffers(api: &Cupti, want: Option<bool>) -> String {
    let Some(on) = want else {
        return "CUPTI's default (on from CUDA 13.0, off before)".into();
    };
    let word = if on { "on" } else { "off" };
    match api.set_attribute_u8(sys::CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER, on as u8) {
        Some(Ok(())) => word.into(),
        Some(Err(e)) => format!("CUPTI's default ({word} refused: {e}; the attribute needs CUPTI 12.3)"),
        None => format!("CUPTI's default ({word} not set: this libcupti has no cuptiActivitySetAttribute)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn graph_modes_parse_and_unknown_values_are_node_level_with_a_line() {
        assert_eq!(GraphMode::parse(None, None), (GraphMode::Node, None));
        assert_eq!(GraphMode::parse(Some("graph"), None), (GraphMode::Graph, None));
        assert_eq!(GraphMode::parse(Some("auto"), None).0, GraphMode::Auto { after: GRAPHS_AFTER });
        assert_eq!(GraphMode::parse(Some(" auto "), Some("3")).0, GraphMode::Auto { after: 3 });
        assert_eq!(GraphMode::parse(Some("auto"), Some("0")).0, GraphMode::Auto { after: 1 });
        let (m, line) = GraphMode::parse(Some("nodes"), None);
        assert_eq!(m, GraphMode::Node);
        assert!(line.unwrap().contains("GPUTRACE_GRAPHS=nodes"));
    }

    #[test]
    fn hw_trace_modes_parse() {
        assert_eq!(HwTrace::parse(None), (HwTrace::Auto, None));
        assert_eq!(HwTrace::parse(Some("on")).0, HwTrace::On);
        assert_eq!(HwTrace::parse(Some("off")).0, HwTrace::Off);
        assert!(HwTrace::parse(Some("yes")).1.is_some());
    }

    #[test]
    fn refusals_name_mps_and_mig_and_say_so_in_auto() {
        let e = |code| CallError::cupti("cuptiActivityEnableHWTrace", code);
        let (why, always) = hw_trace_refusal(&e(sys::CUPTI_ERROR_HES_TRACE_NOT_SUPPORTED_ON_MPS));
        assert!(why.contains("MPS") && always);
        let (why, always) = hw_trace_refusal(&e(sys::CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED));
        assert!(why.contains("MIG") && always);
        let (why, always) = hw_trace_refusal(&e(sys::CUPTI_ERROR_NOT_SUPPORTED));
        assert!(why.contains("Blackwell") && !always);
        assert_eq!(version_label(130401), "13.4 (API 130401)");
    }
}
