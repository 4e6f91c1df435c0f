//! What a trace's capture settings left out: the levers the agent pulls to
//! make capture cheaper (`docs/agent.md`, "Cheaper capture") each give up
//! some detail, and the report says which, from the header the agent wrote
//! and the events the trace holds.

use gputrace_format::{EventKind, TraceFile};
use serde::Serialize;

/// The capture levers in effect in one trace and what each gave up.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct CaptureLevers {
    /// CUDA graph launches recorded at graph level (one busy interval each,
    /// counted as compute).
    pub graph_launches: u64,
    /// The graph mode (`capture.graphs` in the header), when the agent noted one.
    pub graphs: Option<String>,
    /// Kernel timestamps: `software` (CUPTI's instrumentation) or the
    /// hardware event system (`cupti.kernel_timestamps`).
    pub kernel_timestamps: Option<String>,
    /// Which CUDA API calls were recorded (`agent.api_filter`).
    pub api_filter: Option<String>,
    /// One sentence per detail this trace does not have because of a lever.
    pub gives_up: Vec<String>,
    /// What the profiling itself cost (agent traces that finished).
    pub profiler_cost: Option<ProfilerCost>,
}

/// What the profiling itself cost in one process, from the agent's trailer:
/// CUPTI's OVERHEAD records by where the time went, and the agent's writer
/// thread. Not in it: the few µs CUPTI adds inside each traced CUDA call
/// (CUPTI records nothing for that), and the NVML and PM sampler threads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProfilerCost {
    /// OVERHEAD records on a process or thread: CPU time (buffer flushes,
    /// resource set-up, module instrumentation on the host).
    pub cupti_cpu_ns: u64,
    /// OVERHEAD records on a device, context or stream: GPU time.
    pub cupti_gpu_ns: u64,
    /// CPU time of the agent's writer thread (decoding, compressing, writing).
    pub writer_cpu_ns: Option<u64>,
}

impl ProfilerCost {
    fn of(file: &TraceFile) -> Option<ProfilerCost> {
        let extra = &file.trailer()?.extra;
        let num = |k: &str| extra.get(k).and_then(|v| v.parse::<u64>().ok());
        let writer_cpu_ns = num("agent.writer_cpu_ns");
        match (num("cupti.overhead_cpu_ns"), num("cupti.overhead_gpu_ns")) {
            (None, None) if writer_cpu_ns.is_none() => None,
            (cpu, gpu) => Some(ProfilerCost {
                cupti_cpu_ns: cpu.unwrap_or(0),
                cupti_gpu_ns: gpu.unwrap_or(0),
                writer_cpu_ns,
            }),
        }
    }
}

impl CaptureLevers {
    /// From the header's notes and the trace's event counts; `None` for a
    /// trace without any (an import, a trace from an older agent).
    pub fn of(file: &TraceFile) -> Option<CaptureLevers> {
        let extra = &file.header().extra;
        let graph_launches = file.event_counts().get(&EventKind::GraphLaunch).copied().unwrap_or(0);
        let mut l = CaptureLevers {
            graph_launches,
            graphs: extra.get("capture.graphs").cloned(),
            kernel_timestamps: extra.get("cupti.kernel_timestamps").cloned(),
            api_filter: extra.get("agent.api_filter").cloned(),
            gives_up: Vec::new(),
            profiler_cost: ProfilerCost::of(file),
        };
        if graph_launches > 0 {
            l.gives_up.push(format!(
                "{graph_launches} CUDA graph launches were recorded at graph level: each is one busy interval (counted as \
                 compute) on its stream; the kernels, copies and memsets inside them, their names, times and launch \
                 parameters, and any communication or transfer time inside a graph are not in the trace"
            ));
        }
        if l.api_filter.as_deref().is_some_and(|f| f.starts_with("in CUPTI")) {
            l.gives_up.push(
                "CUDA API calls other than launches, copies, memsets, synchronizations, allocations, graph launches and \
                 stream captures (queries such as cudaGetDevice, cudaGetLastError, cuCtxGetCurrent) were not recorded: \
                 their CPU time is not on the threads' timelines"
                    .into(),
            );
        }
        let nothing = l.graph_launches == 0
            && l.graphs.is_none()
            && l.kernel_timestamps.is_none()
            && l.api_filter.is_none()
            && l.profiler_cost.is_none();
        (!nothing || !l.gives_up.is_empty()).then_some(l)
    }
}
