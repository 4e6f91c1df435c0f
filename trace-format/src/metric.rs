//! Names of the counter series gputrace writes (see [`crate::Counter`]).
//!
//! A series is named `<source>.<quantity>_<unit>`; its values are unsigned
//! integers in that unit. The names are part of the file format: readers
//! (`report`, the exporters, `compare`) look series up by them, and a name
//! they do not know is still listed by `info` and drawn by the exporters.

/// NVML `nvmlDeviceGetUtilizationRates().gpu`: percent of the sample period
/// in which one or more kernels ran (NVML's "GPU-Util", as `nvidia-smi`).
pub const GPU_UTIL_PCT: &str = "nvml.gpu_util_pct";
/// NVML `nvmlDeviceGetUtilizationRates().memory`: percent of the sample
/// period in which device memory was read or written.
pub const MEM_UTIL_PCT: &str = "nvml.mem_util_pct";
/// NVML `nvmlDeviceGetClockInfo(NVML_CLOCK_SM)`, MHz.
pub const SM_CLOCK_MHZ: &str = "nvml.sm_clock_mhz";
/// NVML `nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)`, MHz.
pub const MEM_CLOCK_MHZ: &str = "nvml.mem_clock_mhz";
/// NVML `nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM)`, MHz: one sample when
/// sampling starts (the ceiling the SM clock is compared with).
pub const SM_CLOCK_MAX_MHZ: &str = "nvml.sm_clock_max_mhz";
/// NVML `nvmlDeviceGetPowerUsage`, milliwatts.
pub const POWER_MW: &str = "nvml.power_mw";
/// NVML `nvmlDeviceGetTotalEnergyConsumption`, millijoules since the driver
/// was loaded (differences give the energy of an interval).
pub const ENERGY_MJ: &str = "nvml.energy_mj";
/// NVML `nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)`, degrees Celsius.
pub const TEMPERATURE_C: &str = "nvml.temperature_c";
/// NVML `nvmlDeviceGetCurrentClocksEventReasons` (formerly
/// `…ThrottleReasons`): a bit mask, see [`throttle`].
pub const THROTTLE_REASONS: &str = "nvml.throttle_reasons";
/// NVML `nvmlDeviceGetMemoryInfo().used`, bytes.
pub const MEM_USED_BYTES: &str = "nvml.mem_used_bytes";
/// NVML `nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_TX_BYTES)`, KB/s
/// (NVML averages over 20 ms).
pub const PCIE_TX_KBPS: &str = "nvml.pcie_tx_kbps";
/// NVML `nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_RX_BYTES)`, KB/s.
pub const PCIE_RX_KBPS: &str = "nvml.pcie_rx_kbps";
/// NVML field `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX` summed over the
/// device's NVLinks (`scopeId = UINT_MAX`): KiB of data sent since the
/// driver started counting, a cumulative counter (differences over time
/// give the throughput). Absent on a GPU without NVLink.
pub const NVLINK_TX_KIB: &str = "nvml.nvlink_tx_kib";
/// NVML field `NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX`: KiB received, as
/// [`NVLINK_TX_KIB`].
pub const NVLINK_RX_KIB: &str = "nvml.nvlink_rx_kib";
/// NVML `nvmlDeviceGetTotalEccErrors(NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
/// NVML_VOLATILE_ECC)`: uncorrected ECC errors since the driver loaded, a
/// cumulative counter. Absent when ECC is off or unsupported.
pub const ECC_UNCORRECTED_ERRORS: &str = "nvml.ecc_uncorrected_errors";
/// The same for `NVML_MEMORY_ERROR_TYPE_CORRECTED` (single-bit errors the
/// hardware fixed).
pub const ECC_CORRECTED_ERRORS: &str = "nvml.ecc_corrected_errors";
/// One sample per XID critical error event (`nvmlEventTypeXidCriticalError`,
/// from `nvmlEventSetWait_v2`): the value is the XID number (`eventData`;
/// 999 for an XID NVML does not know), the time when the sampler received
/// it (within one sampling period of the event).
pub const XID: &str = "nvml.xid";

/// CUPTI PM sampling (`gputrace run --gpu-metrics`): SM activity, the
/// PM metric `sm__cycles_active.avg.pct_of_peak_sustained_elapsed` (share of
/// the sample interval in which the average SM had a warp resident), in
/// basis points (1/100 of a percent: 10000 = 100 %). Each sample covers one
/// sampling interval starting at its time.
pub const PM_SM_ACTIVE_BP: &str = "pm.sm_active_bp";
/// CUPTI PM sampling: tensor pipe activity,
/// `sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed`, in
/// basis points of the pipe's peak.
pub const PM_TENSOR_ACTIVE_BP: &str = "pm.tensor_active_bp";
/// CUPTI PM sampling: DRAM read throughput, `dram__bytes_read.sum.per_second`,
/// bytes per second over the sample interval.
pub const PM_DRAM_READ_BYTES_PER_S: &str = "pm.dram_read_bytes_per_s";
/// CUPTI PM sampling: DRAM write throughput, `dram__bytes_write.sum.per_second`,
/// bytes per second.
pub const PM_DRAM_WRITE_BYTES_PER_S: &str = "pm.dram_write_bytes_per_s";

/// CUPTI PM sampling: DRAM throughput as a share of the GPU's peak,
/// `dram__throughput.avg.pct_of_peak_sustained_elapsed`, in basis points
/// (what the `memory-bound` finding reads).
pub const PM_DRAM_THROUGHPUT_BP: &str = "pm.dram_throughput_bp";

/// Bits of [`THROTTLE_REASONS`], with NVML's values
/// (`nvmlClocksEventReason*` in `nvml.h`).
pub mod throttle {
    /// Nothing runs; clocks are low because the GPU is idle (not a throttle).
    pub const GPU_IDLE: u64 = 0x1;
    /// Clocks limited by the applications clocks setting.
    pub const APPLICATIONS_CLOCKS_SETTING: u64 = 0x2;
    /// Software power cap (the power limit).
    pub const SW_POWER_CAP: u64 = 0x4;
    /// Hardware slowdown (thermal or power brake, by the hardware).
    pub const HW_SLOWDOWN: u64 = 0x8;
    /// Sync boost (clocks held to those of a group of GPUs).
    pub const SYNC_BOOST: u64 = 0x10;
    /// Software thermal slowdown.
    pub const SW_THERMAL_SLOWDOWN: u64 = 0x20;
    /// Hardware thermal slowdown.
    pub const HW_THERMAL_SLOWDOWN: u64 = 0x40;
    /// Hardware power brake (an external signal).
    pub const HW_POWER_BRAKE_SLOWDOWN: u64 = 0x80;
    /// Clocks limited by the display clock setting.
    pub const DISPLAY_CLOCK_SETTING: u64 = 0x100;

    /// Every reason with its short name, in bit order.
    pub const ALL: [(u64, &str); 9] = [
        (GPU_IDLE, "idle"),
        (APPLICATIONS_CLOCKS_SETTING, "applications-clocks"),
        (SW_POWER_CAP, "sw-power-cap"),
        (HW_SLOWDOWN, "hw-slowdown"),
        (SYNC_BOOST, "sync-boost"),
        (SW_THERMAL_SLOWDOWN, "sw-thermal"),
        (HW_THERMAL_SLOWDOWN, "hw-thermal"),
        (HW_POWER_BRAKE_SLOWDOWN, "hw-power-brake"),
        (DISPLAY_CLOCK_SETTING, "display-clocks"),
    ];

    /// The reasons that slow a busy GPU down: power and thermal limits and
    /// hardware slowdowns (not idle, not settings a user chose).
    pub const SLOWDOWN: u64 = SW_POWER_CAP | HW_SLOWDOWN | SW_THERMAL_SLOWDOWN | HW_THERMAL_SLOWDOWN | HW_POWER_BRAKE_SLOWDOWN;
}

/// Series of an inference server's own metrics (vLLM's `vllm:*`, SGLang's
/// `sglang:*`), scraped by `gputrace run` and written by the launcher into a
/// file of its own ([`crate::Producer::Launcher`], format 1.6), on the
/// realtime clock, all series of one scrape at the same time. Device is
/// always 0: the series belong to the server, not to a GPU.
///
/// Counters and histograms are the server's cumulative values (since it
/// started); a window's numbers are differences between two scrapes.
/// Histograms are stored bucket by bucket: [`Histogram::bucket`] names the
/// series of the observations at most `le` seconds (the `le` label exactly
/// as the server wrote it), [`Histogram::count`] all observations and
/// [`Histogram::sum_ns`] their sum in nanoseconds.
pub mod serving {
    /// Prefix of every serving series.
    pub const PREFIX: &str = "serving.";
    /// Requests being processed (vLLM `num_requests_running`, SGLang
    /// `num_running_reqs`), summed over engines.
    pub const REQUESTS_RUNNING: &str = "serving.requests_running";
    /// Requests waiting to be scheduled (vLLM `num_requests_waiting`,
    /// SGLang `num_queue_reqs`), summed over engines.
    pub const REQUESTS_WAITING: &str = "serving.requests_waiting";
    /// KV-cache usage (vLLM `kv_cache_usage_perc`, formerly
    /// `gpu_cache_usage_perc`; SGLang `token_usage`; 1 = full), in basis
    /// points (10000 = full), the largest over engines.
    pub const KV_CACHE_USAGE_BP: &str = "serving.kv_cache_usage_bp";
    /// Prompt (input, prefill) tokens processed, cumulative.
    pub const PROMPT_TOKENS: &str = "serving.prompt_tokens";
    /// Generated (output) tokens, cumulative.
    pub const GENERATION_TOKENS: &str = "serving.generation_tokens";
    /// Requests that finished normally (vLLM `request_success_total` with
    /// `finished_reason` `stop` or `length`; SGLang `num_requests_total`
    /// less `num_aborted_requests_total`), cumulative.
    pub const REQUESTS_COMPLETED: &str = "serving.requests_completed";
    /// Requests that ended otherwise (aborted, errors), cumulative.
    pub const REQUESTS_FAILED: &str = "serving.requests_failed";
    /// Scrapes of the endpoint that failed since the scraper started
    /// between two successful ones (cumulative; written with every
    /// successful scrape), so a gap in the series is never silent.
    pub const SCRAPES_FAILED: &str = "serving.scrapes_failed";

    /// The latency histograms gputrace keeps.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
    pub enum Histogram {
        /// Time to first token (vLLM and SGLang `time_to_first_token_seconds`).
        Ttft,
        /// Inter-token latency (`inter_token_latency_seconds`, formerly
        /// `time_per_output_token_seconds`).
        Itl,
        /// End-to-end request latency (`e2e_request_latency_seconds`).
        E2e,
        /// Time a request waited in the queue (vLLM `request_queue_time_seconds`,
        /// SGLang `queue_time_seconds`).
        Queue,
    }

    impl Histogram {
        /// Every histogram, in report order.
        pub const ALL: [Histogram; 4] = [Histogram::Ttft, Histogram::Itl, Histogram::E2e, Histogram::Queue];

        /// The stem of its series names, e.g. `serving.ttft_seconds`.
        pub fn stem(self) -> &'static str {
            match self {
                Histogram::Ttft => "serving.ttft_seconds",
                Histogram::Itl => "serving.itl_seconds",
                Histogram::E2e => "serving.e2e_seconds",
                Histogram::Queue => "serving.queue_seconds",
            }
        }

        /// Short name for people: `ttft`, `itl`, `e2e`, `queue`.
        pub fn short(self) -> &'static str {
            match self {
                Histogram::Ttft => "ttft",
                Histogram::Itl => "itl",
                Histogram::E2e => "e2e",
                Histogram::Queue => "queue",
            }
        }

        /// Series of the observations at most `le` seconds: `<stem>.le=<le>`.
        pub fn bucket(self, le: &str) -> String {
            format!("{}.le={le}", self.stem())
        }

        /// Series of the number of observations: `<stem>.count`.
        pub fn count(self) -> String {
            format!("{}.count", self.stem())
        }

        /// Series of the sum of the observations, ns: `<stem>.sum_ns`.
        pub fn sum_ns(self) -> String {
            format!("{}.sum_ns", self.stem())
        }
    }

    /// What a histogram series holds.
    #[derive(Clone, Debug, PartialEq)]
    pub enum HistogramPart {
        /// Observations at most this many seconds (the `le` text, then its value).
        Bucket(String, f64),
        /// All observations.
        Count,
        /// Sum of the observations, ns.
        SumNs,
    }

    /// Which histogram and part a series name is, if it is one.
    pub fn parse_histogram(name: &str) -> Option<(Histogram, HistogramPart)> {
        let h = Histogram::ALL
            .into_iter()
            .find(|h| name.strip_prefix(h.stem()).is_some_and(|r| r.starts_with('.')))?;
        let rest = &name[h.stem().len() + 1..];
        let part = match rest {
            "count" => HistogramPart::Count,
            "sum_ns" => HistogramPart::SumNs,
            _ => {
                let le = rest.strip_prefix("le=")?;
                HistogramPart::Bucket(le.to_string(), parse_le(le)?)
            }
        };
        Some((h, part))
    }

    /// A bucket bound as Prometheus writes it (`0.05`, `1e-05`, `+Inf`).
    pub fn parse_le(le: &str) -> Option<f64> {
        match le {
            "+Inf" | "Inf" | "+inf" | "inf" => Some(f64::INFINITY),
            _ => le.parse::<f64>().ok().filter(|v| !v.is_nan()),
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn histogram_names_round_trip() {
            for h in Histogram::ALL {
                assert_eq!(parse_histogram(&h.count()), Some((h, HistogramPart::Count)));
                assert_eq!(parse_histogram(&h.sum_ns()), Some((h, HistogramPart::SumNs)));
                assert_eq!(
                    parse_histogram(&h.bucket("0.05")),
                    Some((h, HistogramPart::Bucket("0.05".into(), 0.05)))
                );
                assert_eq!(
                    parse_histogram(&h.bucket("+Inf")),
                    Some((h, HistogramPart::Bucket("+Inf".into(), f64::INFINITY)))
                );
            }
            assert_eq!(parse_histogram(REQUESTS_RUNNING), None);
            assert_eq!(parse_histogram("serving.ttft_seconds.le=abc"), None);
            assert_eq!(parse_histogram("serving.ttft_secondsx.count"), None);
        }
    }
}
