//! Agent settings, from the environment (`gputrace run` sets them).

use crate::duty::{Duty, DutyError};
use crate::levers::{GraphMode, HwTrace};
use std::path::PathBuf;
use std::time::Duration;

/// Default NVTX queue length (`GPUTRACE_NVTX_RECORDS`); 32768 records × 176 B
/// = 5.5 MiB.
pub const NVTX_QUEUE_LEN: usize = 32768;

/// Settings. Values that do not parse fall back to the defaults.
#[derive(Clone, Debug)]
pub struct Config {
    /// Directory for the trace file (`GPUTRACE_OUTPUT`, default `gputrace-traces`).
    pub output_dir: PathBuf,
    /// Pool buffers (`GPUTRACE_BUFFERS`, default 16).
    pub buffers: usize,
    /// Bytes per buffer (`GPUTRACE_BUFFER_KB`, default 4096 KiB; 16 × 4 MiB =
    /// 64 MiB of memory in all).
    pub buffer_bytes: usize,
    /// Period of the background flush (`GPUTRACE_FLUSH_MS`, default 1000):
    /// a killed process loses at most this much.
    pub flush_period: Duration,
    /// Explicit libcupti path (`GPUTRACE_CUPTI`).
    pub cupti_path: Option<String>,
    /// `CUDA_HOME`, searched for libcupti.
    pub cuda_home: Option<String>,
    /// Record CUDA API calls (`GPUTRACE_API=0` turns them off).
    pub api_calls: bool,
    /// `GPUTRACE_DISABLE=1`: load but capture nothing.
    pub disabled: bool,
    /// Record NCCL's collectives through its profiler plugin
    /// (`GPUTRACE_NCCL=0` turns it off).
    pub nccl: bool,
    /// Record NVTX markers (`GPUTRACE_NVTX=0` turns them off).
    pub nvtx: bool,
    /// NVTX records the queue to the writer holds (`GPUTRACE_NVTX_RECORDS`,
    /// default 32768 x 176 bytes = 5.5 MiB; 16 to 4 Mi).
    pub nvtx_records: usize,
    /// NVML samples per second and device (`GPUTRACE_GPU_SAMPLE_HZ`,
    /// default 10, at most 1000; 0 turns sampling off).
    pub gpu_sample_hz: u32,
    /// Explicit libnvidia-ml path (`GPUTRACE_NVML`; default: the system's
    /// `libnvidia-ml.so.1`).
    pub nvml_path: Option<String>,
    /// CUPTI PM sampling of SM, tensor pipe and DRAM activity
    /// (`GPUTRACE_GPU_METRICS=1`, set by `gputrace run --gpu-metrics`).
    pub gpu_metrics: bool,
    /// PM samples per second (`GPUTRACE_GPU_METRICS_HZ`, default 1000,
    /// 1 to 20000).
    pub gpu_metrics_hz: u32,
    /// Duty-cycled capture (`GPUTRACE_DUTY="ON_MS/PERIOD_MS"`): CUPTI
    /// activity on for the first `on` of every `period`. `None`: capture
    /// the whole time, also when the value is invalid (`duty_error` says why).
    pub duty: Option<Duty>,
    /// Why `GPUTRACE_DUTY` was ignored, for the one `gputrace:` line.
    pub duty_error: Option<DutyError>,
    /// Flight recorder mode (`GPUTRACE_FLIGHT_MS` > 0): keep only the last
    /// window in a ring, write a trace only when triggered.
    pub flight: Option<FlightConfig>,
    /// How CUDA graphs are recorded (`GPUTRACE_GRAPHS=node|graph|auto`,
    /// `GPUTRACE_GRAPHS_AFTER=N` for auto; default node).
    pub graphs: GraphMode,
    /// Hardware event tracing (`GPUTRACE_HW_TRACE=auto|on|off`, default auto).
    pub hw_trace: HwTrace,
    /// CUPTI's per-thread activity buffers (`GPUTRACE_PER_THREAD_BUFFERS=1|0`;
    /// unset: CUPTI's default).
    pub per_thread_buffers: Option<bool>,
    /// Lines to print about settings that were ignored (graph or HW trace mode).
    pub setting_errors: Vec<String>,
}

/// Flight recorder settings (see `flight.rs`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlightConfig {
    /// How much of the timeline to keep (`GPUTRACE_FLIGHT_MS`).
    pub window: Duration,
    /// Size of the ring (`GPUTRACE_FLIGHT_CAP_MB`, default 256, 1 to 65536).
    pub cap_bytes: u64,
    /// Snapshot after this long without new GPU activity
    /// (`GPUTRACE_FLIGHT_HANG_MS`; unset or 0: off).
    pub hang: Option<Duration>,
    /// Snapshot when a step (between two step marks) takes this many times
    /// the running median (`GPUTRACE_FLIGHT_SLOW_STEP`, at least 1.5; unset: off).
    pub slow_step: Option<f64>,
}

impl Config {
    /// Read the settings through `get` (usually `std::env::var`).
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Config {
        let duty = get("GPUTRACE_DUTY").filter(|v| !v.trim().is_empty()).map(|v| Duty::parse(&v));
        let (graphs, graphs_error) = GraphMode::parse(get("GPUTRACE_GRAPHS").as_deref(), get("GPUTRACE_GRAPHS_AFTER").as_deref());
        let (hw_trace, hw_error) = HwTrace::parse(get("GPUTRACE_HW_TRACE").as_deref());
        let num = |k: &str, d: u64, lo: u64, hi: u64| get(k).and_then(|v| v.trim().parse::<u64>().ok()).map_or(d, |v| v.clamp(lo, hi));
        Config {
            output_dir: get("GPUTRACE_OUTPUT")
                .filter(|s| !s.is_empty())
                .map_or_else(|| PathBuf::from("gputrace-traces"), PathBuf::from),
            buffers: num("GPUTRACE_BUFFERS", 16, 2, 4096) as usize,
            buffer_bytes: num("GPUTRACE_BUFFER_KB", 4096, 64, 256 * 1024) as usize * 1024,
            flush_period: Duration::from_millis(num("GPUTRACE_FLUSH_MS", 1000, 10, 600_000)),
            cupti_path: get("GPUTRACE_CUPTI").filter(|s| !s.is_empty()),
            cuda_home: get("CUDA_HOME").or_else(|| get("CUDA_PATH")).filter(|s| !s.is_empty()),
            api_calls: get("GPUTRACE_API").is_none_or(|v| v.trim() != "0"),
            disabled: get("GPUTRACE_DISABLE").is_some_and(|v| v.trim() == "1"),
            nccl: get("GPUTRACE_NCCL").is_none_or(|v| v.trim() != "0"),
            nvtx: get("GPUTRACE_NVTX").is_none_or(|v| v.trim() != "0"),
            nvtx_records: num("GPUTRACE_NVTX_RECORDS", NVTX_QUEUE_LEN as u64, 16, 4 << 20) as usize,
            gpu_sample_hz: num("GPUTRACE_GPU_SAMPLE_HZ", 10, 0, 1000) as u32,
            nvml_path: get("GPUTRACE_NVML").filter(|s| !s.is_empty()),
            gpu_metrics: get("GPUTRACE_GPU_METRICS").is_some_and(|v| v.trim() == "1"),
            gpu_metrics_hz: num("GPUTRACE_GPU_METRICS_HZ", 1000, 1, 20_000) as u32,
            duty: duty.clone().and_then(Result::ok),
            duty_error: duty.and_then(Result::err),
            flight: match num("GPUTRACE_FLIGHT_MS", 0, 0, 7 * 24 * 3_600_000) {
                0 => None,
                ms => Some(FlightConfig {
                    window: Duration::from_millis(ms.max(10)),
                    cap_bytes: num("GPUTRACE_FLIGHT_CAP_MB", 256, 1, 65536) << 20,
                    hang: match num("GPUTRACE_FLIGHT_HANG_MS", 0, 0, 7 * 24 * 3_600_000) {
                        0 => None,
                        ms => Some(Duration::from_millis(ms)),
                    },
                    slow_step: get("GPUTRACE_FLIGHT_SLOW_STEP")
                        .and_then(|v| v.trim().parse::<f64>().ok())
                        .filter(|f| f.is_finite() && *f >= 1.5),
                }),
            },
            graphs,
            hw_trace,
            per_thread_buffers: match get("GPUTRACE_PER_THREAD_BUFFERS").as_deref().map(str::trim) {
                Some("1") | Some("on") => Some(true),
                Some("0") | Some("off") => Some(false),
                _ => None,
            },
            setting_errors: graphs_error.into_iter().chain(hw_error).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_clamping() {
        let c = Config::from_env(|_| None);
        assert_eq!((c.buffers, c.buffer_bytes, c.flush_period), (16, 4 << 20, Duration::from_secs(1)));
        assert!(c.api_calls && !c.disabled && c.nccl);
        assert_eq!(c.gpu_sample_hz, 10);
        assert_eq!(c.flight, None);
        let c = Config::from_env(|k| match k {
            "GPUTRACE_BUFFERS" => Some("1000000".into()),
            "GPUTRACE_BUFFER_KB" => Some("garbage".into()),
            "GPUTRACE_FLUSH_MS" => Some("1".into()),
            "GPUTRACE_API" => Some("0".into()),
            "GPUTRACE_GPU_SAMPLE_HZ" => Some("5000".into()),
            _ => None,
        });
        assert_eq!(
            (c.buffers, c.buffer_bytes, c.flush_period),
            (4096, 4 << 20, Duration::from_millis(10))
        );
        assert!(!c.api_calls);
        assert_eq!(c.gpu_sample_hz, 1000);
        assert_eq!(
            Config::from_env(|k| (k == "GPUTRACE_GPU_SAMPLE_HZ").then(|| "0".into())).gpu_sample_hz,
            0
        );
        let c = Config::from_env(|k| match k {
            "GPUTRACE_FLIGHT_MS" => Some("60000".into()),
            "GPUTRACE_FLIGHT_HANG_MS" => Some("300000".into()),
            _ => None,
        });
        assert_eq!(
            c.flight,
            Some(FlightConfig {
                window: Duration::from_secs(60),
                cap_bytes: 256 << 20,
                hang: Some(Duration::from_secs(300)),
                slow_step: None,
            })
        );
    }

    #[test]
    fn duty_is_off_unless_valid() {
        let duty = |v: &'static str| Config::from_env(move |k| (k == "GPUTRACE_DUTY").then(|| v.into()));
        let c = Config::from_env(|_| None);
        assert!(c.duty.is_none() && c.duty_error.is_none());
        let c = duty("2000/60000");
        assert_eq!(c.duty.map(|d| d.label()).as_deref(), Some("2s/60s"));
        assert!(c.duty_error.is_none());
        for bad in ["2s/60s", "60000/2000", "garbage"] {
            let c = duty(bad);
            assert!(c.duty.is_none(), "{bad}");
            assert!(c.duty_error.is_some(), "{bad}");
        }
        assert!(duty(" ").duty_error.is_none(), "empty means unset");
    }
}
