//! What the GPU's own counters say, beside the timeline: the `hardware`
//! section of a device's report, from the trace's counter series (NVML,
//! sampled by the agent; see `gputrace_format::metric`).
//!
//! Every number is over the samples inside the device's activity span
//! (first to last kernel, copy or memset), so that it can stand next to the
//! timeline's numbers; a device without activity uses all its samples.
//! Means are time-weighted (each sample stands for the time until the next).
//! Errors (ECC counts, XID events) are counted over all the samples: an
//! error outside the activity span still happened to the GPU.

use gputrace_format::metric::{self, throttle};
use gputrace_format::{CounterSeries, DeviceId, Nanos};
use serde::Serialize;
use std::collections::BTreeMap;

/// One device's counters, summarized.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HardwareReport {
    /// Where the counters came from: `nvml`, `cupti-pm` (PM sampling,
    /// `gputrace run --gpu-metrics`) or both (`nvml+cupti-pm`).
    pub source: String,
    /// Samples used, over all series.
    pub samples: u64,
    /// Time the samples cover, ns.
    pub sampled_ns: u64,
    /// NVML's GPU utilization (`nvidia-smi`'s GPU-Util), time-weighted mean, percent.
    pub gpu_util_sampled_pct: Option<f64>,
    /// The same quantity computed from the timeline (`gpu_util_nvml_pct`: windows in which a
    /// kernel ran), for this device, percent; they should agree within a few points.
    pub gpu_util_nvml_pct: Option<f64>,
    /// NVML's memory utilization (time the memory controller was busy), mean, percent.
    pub mem_util_sampled_pct: Option<f64>,
    /// Mean SM clock, MHz.
    pub sm_clock_mean_mhz: Option<f64>,
    /// The SM clock's maximum (`nvmlDeviceGetMaxClockInfo`), MHz.
    pub sm_clock_max_mhz: Option<u64>,
    /// `100 · sm_clock_mean_mhz / sm_clock_max_mhz`.
    pub sm_clock_pct_of_max: Option<f64>,
    /// Mean power draw, W.
    pub power_mean_w: Option<f64>,
    /// Highest power sample, W.
    pub power_max_w: Option<f64>,
    /// Energy used over the samples (difference of NVML's total energy counter), J.
    pub energy_j: Option<f64>,
    /// Highest temperature sample, °C.
    pub temperature_max_c: Option<u64>,
    /// Time with one or more slowdown reasons set (power cap, thermal, hardware slowdown,
    /// power brake; not idle, not user settings), ns.
    pub throttled_ns: u64,
    /// Time the throttle-reason samples cover, ns (the denominator of `throttled_ns`).
    pub throttle_sampled_ns: u64,
    /// Time each reason was set, by its short name (`sw-power-cap`, `hw-thermal`, ...), ns;
    /// reasons never seen are left out.
    pub throttle_by_reason_ns: BTreeMap<String, u64>,
    /// Mean PCIe throughput from the device, MB/s.
    pub pcie_tx_mean_mbps: Option<f64>,
    /// Mean PCIe throughput to the device, MB/s.
    pub pcie_rx_mean_mbps: Option<f64>,
    /// Mean NVLink throughput from the device over all its links, MB/s (10⁶ bytes/s): the
    /// increase of NVML's cumulative KiB counter over the time between its first and last
    /// sample. `None` without NVLink (or fewer than two samples).
    pub nvlink_tx_mean_mbps: Option<f64>,
    /// Mean NVLink throughput to the device, MB/s, as `nvlink_tx_mean_mbps`.
    pub nvlink_rx_mean_mbps: Option<f64>,
    /// Uncorrected ECC errors during the run (increase of NVML's volatile count); `None`
    /// when ECC is off or unsupported.
    pub ecc_uncorrected_errors: Option<u64>,
    /// Corrected ECC errors during the run, as `ecc_uncorrected_errors`.
    pub ecc_corrected_errors: Option<u64>,
    /// CUPTI PM sampling: SM activity (share of time the average SM had a warp resident),
    /// time-weighted mean over the samples in the activity span, percent.
    pub sm_active_pct: Option<f64>,
    /// CUPTI PM sampling: tensor pipe activity, percent of its peak, mean as `sm_active_pct`.
    pub tensor_active_pct: Option<f64>,
    /// CUPTI PM sampling: DRAM read throughput, mean, GB/s (10⁹ bytes/s).
    pub dram_read_gbps: Option<f64>,
    /// CUPTI PM sampling: DRAM write throughput, mean, GB/s.
    pub dram_write_gbps: Option<f64>,
    /// CUPTI PM sampling: DRAM throughput as a share of the GPU's peak, mean, percent.
    pub dram_throughput_pct: Option<f64>,
    /// XID critical errors NVML reported during the run.
    pub xid_error_count: u64,
    /// The first [`XID_ERRORS_LISTED`] of them, in time order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub xid_errors: Vec<XidError>,
    /// GPU-Util, SM clock, power and temperature over time, for plots (the HTML
    /// report's sparklines): each the mean of its samples in up to [`TIMELINE_BINS`]
    /// equal bins over its sampled time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<CounterTimeline>,
}

/// XID errors listed at most in [`HardwareReport::xid_errors`] (all are counted).
pub const XID_ERRORS_LISTED: usize = 100;

/// One XID critical error event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct XidError {
    /// When the sampler received it, ns (the trace's clock; within one sampling period
    /// of the event).
    pub time_ns: u64,
    /// The XID (NVIDIA's XID catalog; 999: unknown to NVML).
    pub xid: u64,
}

/// Bins of a [`CounterTimeline`] at most.
pub const TIMELINE_BINS: usize = 60;

/// One counter series over time, downsampled.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CounterTimeline {
    /// The series (`nvml.power_mw`, see `gputrace_format::metric`).
    pub metric: String,
    /// What it is, for a label (`power`).
    pub label: String,
    /// The unit of `values` (`W`).
    pub unit: String,
    /// Time of the first sample, ns (the trace's clock).
    pub start_ns: u64,
    /// Width of each bin, ns.
    pub bin_ns: u64,
    /// Mean of the samples in each bin, in `unit`; `None` for a bin without samples.
    pub values: Vec<Option<f64>>,
    /// Smallest and largest of `values`.
    pub min: f64,
    /// See `min`.
    pub max: f64,
}

/// The plotted series: stored name, label, unit, factor to the unit.
const PLOTTED: [(&str, &str, &str, f64); 4] = [
    (metric::GPU_UTIL_PCT, "GPU-Util", "%", 1.0),
    (metric::SM_CLOCK_MHZ, "SM clock", "MHz", 1.0),
    (metric::POWER_MW, "power", "W", 1e-3),
    (metric::TEMPERATURE_C, "temperature", "C", 1.0),
];

/// `s` in at most [`TIMELINE_BINS`] bins (`None` without samples).
fn timeline(s: &CounterSeries, label: &str, unit: &str, scale: f64) -> Option<CounterTimeline> {
    let (first, last) = (s.samples.first()?.0 .0, s.samples.last()?.0 .0);
    let bins = s.samples.len().min(TIMELINE_BINS) as u64;
    let bin_ns = (last - first) / bins + 1;
    let mut sums = vec![(0.0f64, 0u32); bins as usize];
    for &(t, v) in &s.samples {
        let i = (((t.0 - first) / bin_ns) as usize).min(sums.len() - 1);
        sums[i].0 += v as f64 * scale;
        sums[i].1 += 1;
    }
    let values: Vec<Option<f64>> = sums.iter().map(|&(sum, n)| (n > 0).then(|| sum / f64::from(n))).collect();
    let known = values.iter().flatten().copied();
    let min = known.clone().fold(f64::INFINITY, f64::min);
    let max = known.fold(f64::NEG_INFINITY, f64::max);
    Some(CounterTimeline {
        metric: s.metric.clone(),
        label: label.into(),
        unit: unit.into(),
        start_ns: first,
        bin_ns,
        values,
        min,
        max,
    })
}

impl HardwareReport {
    /// `throttled_ns / throttle_sampled_ns` (0 without throttle samples).
    pub fn throttled_share(&self) -> f64 {
        if self.throttle_sampled_ns == 0 {
            0.0
        } else {
            self.throttled_ns as f64 / self.throttle_sampled_ns as f64
        }
    }
}

/// The samples of `s` inside `span` (all of them without a span, or when
/// fewer than two fall inside).
fn clip(s: &CounterSeries, span: Option<(u64, u64)>) -> CounterSeries {
    let Some((lo, hi)) = span else { return s.clone() };
    let inside: Vec<(Nanos, u64)> = s.samples.iter().copied().filter(|(t, _)| t.0 >= lo && t.0 <= hi).collect();
    if inside.len() < 2 {
        return s.clone();
    }
    CounterSeries {
        device: s.device,
        metric: s.metric.clone(),
        samples: inside,
    }
}

/// Series read whole, not clipped to the activity span: the ceiling (one sample at the
/// start) and the errors.
const UNCLIPPED: [&str; 4] = [
    metric::SM_CLOCK_MAX_MHZ,
    metric::ECC_UNCORRECTED_ERRORS,
    metric::ECC_CORRECTED_ERRORS,
    metric::XID,
];

/// Mean rate of a cumulative KiB counter between its first and last sample, MB/s.
fn counter_rate_mbps(s: &CounterSeries) -> Option<f64> {
    let (&(t0, v0), &(t1, v1)) = (s.samples.first()?, s.samples.last()?);
    let ns = t1.0.checked_sub(t0.0).filter(|&ns| ns > 0)?;
    let bytes = v1.saturating_sub(v0) as f64 * 1024.0;
    Some(bytes / 1e6 / (ns as f64 / 1e9))
}

/// Increase of a cumulative count over its samples.
fn counter_increase(s: &CounterSeries) -> Option<u64> {
    Some(s.samples.last()?.1.saturating_sub(s.samples.first()?.1))
}

/// The hardware section of `device` from the trace's `series`; `None`
/// when the trace has no counters for it. `util_nvml_pct` is the
/// timeline's GPU-Util of the device.
pub fn report(series: &[CounterSeries], device: u32, span: Option<(u64, u64)>, util_nvml_pct: Option<f64>) -> Option<HardwareReport> {
    let mine: Vec<CounterSeries> = series
        .iter()
        .filter(|s| s.device == DeviceId(device) && !s.samples.is_empty())
        .map(|s| {
            if UNCLIPPED.contains(&s.metric.as_str()) {
                s.clone()
            } else {
                clip(s, span)
            }
        })
        .collect();
    if mine.is_empty() {
        return None;
    }
    let get = |name: &str| mine.iter().find(|s| s.metric == name);
    let mean = |name: &str| get(name).and_then(CounterSeries::time_weighted_mean);
    let pm = mine.iter().any(|s| s.metric.starts_with("pm."));
    let nvml = mine.iter().any(|s| s.metric.starts_with("nvml."));
    let source = match (nvml, pm) {
        (true, true) => "nvml+cupti-pm",
        (false, true) => "cupti-pm",
        _ => "nvml",
    };
    let mut r = HardwareReport {
        source: source.into(),
        samples: mine.iter().map(|s| s.samples.len() as u64).sum(),
        sampled_ns: mine
            .iter()
            .map(|s| s.samples.last().unwrap().0 .0 - s.samples[0].0 .0)
            .max()
            .unwrap_or(0),
        gpu_util_sampled_pct: mean(metric::GPU_UTIL_PCT),
        gpu_util_nvml_pct: util_nvml_pct,
        mem_util_sampled_pct: mean(metric::MEM_UTIL_PCT),
        sm_clock_mean_mhz: mean(metric::SM_CLOCK_MHZ),
        sm_clock_max_mhz: get(metric::SM_CLOCK_MAX_MHZ).and_then(|s| s.samples.iter().map(|x| x.1).max()),
        power_mean_w: mean(metric::POWER_MW).map(|mw| mw / 1e3),
        power_max_w: get(metric::POWER_MW)
            .and_then(|s| s.samples.iter().map(|x| x.1).max())
            .map(|mw| mw as f64 / 1e3),
        energy_j: get(metric::ENERGY_MJ)
            .filter(|s| s.samples.len() >= 2)
            .map(|s| s.samples.last().unwrap().1.saturating_sub(s.samples[0].1) as f64 / 1e3),
        temperature_max_c: get(metric::TEMPERATURE_C).and_then(|s| s.samples.iter().map(|x| x.1).max()),
        pcie_tx_mean_mbps: mean(metric::PCIE_TX_KBPS).map(|k| k / 1e3),
        pcie_rx_mean_mbps: mean(metric::PCIE_RX_KBPS).map(|k| k / 1e3),
        nvlink_tx_mean_mbps: get(metric::NVLINK_TX_KIB).and_then(counter_rate_mbps),
        nvlink_rx_mean_mbps: get(metric::NVLINK_RX_KIB).and_then(counter_rate_mbps),
        ecc_uncorrected_errors: get(metric::ECC_UNCORRECTED_ERRORS).and_then(counter_increase),
        ecc_corrected_errors: get(metric::ECC_CORRECTED_ERRORS).and_then(counter_increase),
        sm_active_pct: mean(metric::PM_SM_ACTIVE_BP).map(|bp| bp / 100.0),
        tensor_active_pct: mean(metric::PM_TENSOR_ACTIVE_BP).map(|bp| bp / 100.0),
        dram_read_gbps: mean(metric::PM_DRAM_READ_BYTES_PER_S).map(|b| b / 1e9),
        dram_write_gbps: mean(metric::PM_DRAM_WRITE_BYTES_PER_S).map(|b| b / 1e9),
        dram_throughput_pct: mean(metric::PM_DRAM_THROUGHPUT_BP).map(|bp| bp / 100.0),
        ..HardwareReport::default()
    };
    r.timeline = PLOTTED
        .iter()
        .filter_map(|&(name, label, unit, scale)| get(name).and_then(|s| timeline(s, label, unit, scale)))
        .collect();
    r.sm_clock_pct_of_max = match (r.sm_clock_mean_mhz, r.sm_clock_max_mhz) {
        (Some(m), Some(max)) if max > 0 => Some(100.0 * m / max as f64),
        _ => None,
    };
    if let Some(s) = get(metric::XID) {
        r.xid_error_count = s.samples.len() as u64;
        r.xid_errors = s
            .samples
            .iter()
            .take(XID_ERRORS_LISTED)
            .map(|&(t, xid)| XidError { time_ns: t.0, xid })
            .collect();
    }
    if let Some(s) = get(metric::THROTTLE_REASONS) {
        let (held, all) = s.time_where(|v| v & throttle::SLOWDOWN != 0);
        r.throttled_ns = held.0;
        r.throttle_sampled_ns = all.0;
        for (bit, name) in throttle::ALL {
            let (held, _) = s.time_where(|v| v & bit != 0);
            if held.0 > 0 {
                r.throttle_by_reason_ns.insert(name.to_string(), held.0);
            }
        }
    }
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(metric: &str, vals: &[u64]) -> CounterSeries {
        CounterSeries {
            device: DeviceId(0),
            metric: metric.into(),
            samples: vals.iter().enumerate().map(|(i, &v)| (Nanos(1000 + 100 * i as u64), v)).collect(),
        }
    }

    #[test]
    fn golden_numbers_of_a_power_capped_gpu() {
        let s = vec![
            series(metric::SM_CLOCK_MHZ, &[1980, 1980, 1400, 1400]),
            series(metric::SM_CLOCK_MAX_MHZ, &[1980]),
            series(metric::POWER_MW, &[500_000, 700_000, 700_000, 700_000]),
            series(metric::ENERGY_MJ, &[10_000, 60_000, 130_000, 200_000]),
            // Idle, then power cap, then power cap and HW thermal.
            series(metric::THROTTLE_REASONS, &[0x1, 0x4, 0x4, 0x44]),
            series(metric::GPU_UTIL_PCT, &[100, 100, 90, 90]),
        ];
        let r = report(&s, 0, None, Some(96.0)).unwrap();
        assert_eq!(r.sm_clock_mean_mhz, Some(1690.0));
        let clock = r.timeline.iter().find(|t| t.label == "SM clock").unwrap();
        assert_eq!(clock.values, vec![Some(1980.0), Some(1980.0), Some(1400.0), Some(1400.0)]);
        assert_eq!((clock.min, clock.max, clock.start_ns, clock.bin_ns), (1400.0, 1980.0, 1000, 76));
        let power = r.timeline.iter().find(|t| t.unit == "W").unwrap();
        assert_eq!(power.values[0], Some(500.0));
        assert_eq!(r.timeline.len(), 3, "GPU-Util, SM clock, power (no temperature series)");
        assert_eq!(r.sm_clock_max_mhz, Some(1980));
        assert!((r.sm_clock_pct_of_max.unwrap() - 100.0 * 1690.0 / 1980.0).abs() < 1e-9);
        assert_eq!(r.power_mean_w, Some(650.0));
        assert_eq!(r.power_max_w, Some(700.0));
        assert_eq!(r.energy_j, Some(190.0));
        assert_eq!((r.throttled_ns, r.throttle_sampled_ns), (300, 400));
        assert_eq!(r.throttle_by_reason_ns.get("idle"), Some(&100));
        assert_eq!(r.throttle_by_reason_ns.get("sw-power-cap"), Some(&300));
        assert_eq!(r.throttle_by_reason_ns.get("hw-thermal"), Some(&100));
        assert_eq!(r.gpu_util_sampled_pct, Some(95.0));
        assert_eq!(r.gpu_util_nvml_pct, Some(96.0));
        assert_eq!(r.samples, 21, "every sample of the device's six series");
        assert!((r.throttled_share() - 0.75).abs() < 1e-12);
        assert!(report(&s, 1, None, None).is_none(), "no counters for another device");
    }

    #[test]
    fn pm_sampling_means_in_their_units() {
        let s = vec![
            series(metric::PM_SM_ACTIVE_BP, &[9000, 8000, 7000, 6000]),
            series(metric::PM_TENSOR_ACTIVE_BP, &[100, 100, 100, 100]),
            series(
                metric::PM_DRAM_READ_BYTES_PER_S,
                &[2_000_000_000, 3_000_000_000, 4_000_000_000, 3_000_000_000],
            ),
            series(metric::PM_DRAM_WRITE_BYTES_PER_S, &[500_000_000; 4]),
            series(metric::PM_DRAM_THROUGHPUT_BP, &[7500; 4]),
        ];
        let r = report(&s, 0, None, None).unwrap();
        assert_eq!(r.source, "cupti-pm");
        assert_eq!(r.sm_active_pct, Some(75.0));
        assert_eq!(r.tensor_active_pct, Some(1.0));
        assert_eq!(r.dram_read_gbps, Some(3.0));
        assert_eq!(r.dram_write_gbps, Some(0.5));
        assert_eq!(r.dram_throughput_pct, Some(75.0));
        assert_eq!(r.gpu_util_sampled_pct, None);
        let mut both = s.clone();
        both.push(series(metric::GPU_UTIL_PCT, &[100; 4]));
        assert_eq!(report(&both, 0, None, None).unwrap().source, "nvml+cupti-pm");
    }

    #[test]
    fn nvlink_rates_and_errors_of_a_failing_gpu() {
        // Samples 100 ns apart: 3 intervals, 300 ns.
        let s = vec![
            series(metric::NVLINK_TX_KIB, &[1_000, 1_000, 2_000, 4_000]),
            series(metric::NVLINK_RX_KIB, &[50, 50, 50, 50]),
            series(metric::ECC_UNCORRECTED_ERRORS, &[2, 2, 3, 5]),
            series(metric::ECC_CORRECTED_ERRORS, &[7, 7, 7, 7]),
            series(metric::XID, &[79, 48]),
        ];
        // An activity span that holds none of the XIDs: errors are counted anyway.
        let r = report(&s, 0, Some((1200, 1300)), None).unwrap();
        // The rate is over the span's samples: 2000 → 4000 KiB in 100 ns.
        let want = 2000.0 * 1024.0 / 1e6 / (100.0 / 1e9);
        assert!((r.nvlink_tx_mean_mbps.unwrap() - want).abs() < 1e-6, "{:?}", r.nvlink_tx_mean_mbps);
        assert_eq!(r.nvlink_rx_mean_mbps, Some(0.0));
        assert_eq!(r.ecc_uncorrected_errors, Some(3), "5 − 2 over the whole run");
        assert_eq!(r.ecc_corrected_errors, Some(0));
        assert_eq!(r.xid_error_count, 2);
        assert_eq!(
            r.xid_errors,
            vec![XidError { time_ns: 1000, xid: 79 }, XidError { time_ns: 1100, xid: 48 }]
        );
        // Without those series: absent, not zero.
        let r = report(&[series(metric::SM_CLOCK_MHZ, &[1980, 1980])], 0, None, None).unwrap();
        assert_eq!(
            (r.nvlink_tx_mean_mbps, r.ecc_uncorrected_errors, r.xid_error_count),
            (None, None, 0)
        );
        // One NVLink sample gives no rate; the list of XIDs is capped, the count is not.
        let many: Vec<u64> = vec![13; XID_ERRORS_LISTED + 5];
        let r = report(&[series(metric::NVLINK_TX_KIB, &[5]), series(metric::XID, &many)], 0, None, None).unwrap();
        assert_eq!(r.nvlink_tx_mean_mbps, None);
        assert_eq!(r.xid_error_count, XID_ERRORS_LISTED as u64 + 5);
        assert_eq!(r.xid_errors.len(), XID_ERRORS_LISTED);
    }

    #[test]
    fn samples_outside_the_activity_span_are_left_out() {
        let s = vec![
            series(metric::SM_CLOCK_MHZ, &[300, 1980, 1980, 300]),
            series(metric::SM_CLOCK_MAX_MHZ, &[1980]),
        ];
        // Activity from 1100 to 1200: the two samples at full clock.
        let r = report(&s, 0, Some((1100, 1200)), None).unwrap();
        assert_eq!(r.sm_clock_mean_mhz, Some(1980.0));
        assert_eq!(r.sm_clock_max_mhz, Some(1980), "the ceiling, sampled before the span, is kept");
    }
}
