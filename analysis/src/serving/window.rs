//! A serving trace's window: counters and histograms as increases between
//! the first and last scrape, quantiles as Prometheus' `histogram_quantile`
//! computes them, gauges over time.

use gputrace_format::metric::serving::{parse_histogram, Histogram, HistogramPart};
use gputrace_format::CounterSeries;
use serde::Serialize;

/// Samples of one series, realtime ns and value, in time order.
pub(crate) type Samples = Vec<(u64, u64)>;

/// How much a cumulative counter grew over its samples, as Prometheus'
/// `increase` without extrapolation: a drop is a restart of the server, after
/// which the counter counts from 0 (the value after the drop is all growth).
/// Returns the increase and the number of resets.
pub(crate) fn increase(s: &[(u64, u64)]) -> (u64, u64) {
    let mut total = 0u64;
    let mut resets = 0;
    for w in s.windows(2) {
        let (a, b) = (w[0].1, w[1].1);
        if b >= a {
            total += b - a;
        } else {
            total += b;
            resets += 1;
        }
    }
    (total, resets)
}

/// One bucket of a histogram's window: observations at most `le` seconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bucket {
    /// Upper bound, seconds (`inf` for the last).
    #[serde(serialize_with = "bound")]
    pub le: f64,
    /// Observations in the window at most `le` (cumulative).
    pub count: u64,
}

fn bound<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_finite() {
        s.serialize_f64(*v)
    } else {
        s.serialize_str("+Inf")
    }
}

/// A quantile and the bucket it was interpolated in (its resolution).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Quantile {
    /// The quantile, 0..1.
    pub q: f64,
    /// Seconds, as `histogram_quantile(q, ...)` computes it.
    pub seconds: f64,
    /// Lower bound of the bucket it lies in (the previous bucket's `le`, 0 for the first).
    pub bucket_lower: f64,
    /// Upper bound of that bucket (for a quantile in the `+Inf` bucket: the
    /// highest finite bound, which Prometheus returns; the true value is above it).
    pub bucket_upper: f64,
    /// Whether the quantile fell in the `+Inf` bucket (then `seconds` is a lower bound).
    pub above_highest_bucket: bool,
}

/// Prometheus' `histogram_quantile(q, buckets)` (promql `bucketQuantile`):
/// `buckets` are cumulative `(le, count)` pairs. `None` where Prometheus
/// returns NaN (no `+Inf` bucket, fewer than two buckets, no observations).
pub fn histogram_quantile(q: f64, buckets: &[(f64, f64)]) -> Option<Quantile> {
    if q.is_nan() || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let mut b: Vec<(f64, f64)> = buckets.to_vec();
    b.sort_by(|x, y| x.0.total_cmp(&y.0));
    if !b.last().is_some_and(|l| l.0 == f64::INFINITY) {
        return None;
    }
    // Coalesce equal bounds, then make the counts monotonic, as Prometheus does.
    let mut c: Vec<(f64, f64)> = Vec::with_capacity(b.len());
    for (le, n) in b {
        match c.last_mut() {
            Some(last) if last.0 == le => last.1 += n,
            _ => c.push((le, n)),
        }
    }
    let mut max = f64::NEG_INFINITY;
    for x in c.iter_mut() {
        max = max.max(x.1);
        x.1 = max;
    }
    if c.len() < 2 {
        return None;
    }
    let observations = c[c.len() - 1].1;
    if observations == 0.0 {
        return None;
    }
    let mut rank = q * observations;
    let i = c[..c.len() - 1].iter().position(|x| x.1 >= rank).unwrap_or(c.len() - 1);
    if i == c.len() - 1 {
        let top = c[c.len() - 2].0;
        return Some(Quantile {
            q,
            seconds: top,
            bucket_lower: top,
            bucket_upper: top,
            above_highest_bucket: true,
        });
    }
    if i == 0 && c[0].0 <= 0.0 {
        return Some(Quantile {
            q,
            seconds: c[0].0,
            bucket_lower: c[0].0,
            bucket_upper: c[0].0,
            above_highest_bucket: false,
        });
    }
    let end = c[i].0;
    let (start, mut count) = (if i > 0 { c[i - 1].0 } else { 0.0 }, c[i].1);
    if i > 0 {
        count -= c[i - 1].1;
        rank -= c[i - 1].1;
    }
    let seconds = start + (end - start) * (rank / count);
    seconds.is_finite().then_some(Quantile {
        q,
        seconds,
        bucket_lower: start,
        bucket_upper: end,
        above_highest_bucket: false,
    })
}

/// One latency histogram over the window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LatencyStat {
    /// `ttft`, `itl`, `e2e` or `queue`.
    pub name: &'static str,
    /// Observations in the window (requests; tokens for `itl`).
    pub count: u64,
    /// Mean, seconds (sum / count; null without a sum or observations).
    pub mean_s: Option<f64>,
    /// p50, p95 and p99 (each null where `histogram_quantile` gives NaN).
    pub p50: Option<Quantile>,
    /// p95.
    pub p95: Option<Quantile>,
    /// p99.
    pub p99: Option<Quantile>,
    /// The window's cumulative buckets.
    pub buckets: Vec<Bucket>,
}

/// A gauge over the window (sample-and-hold between scrapes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct GaugeStat {
    /// Smallest sample.
    pub min: f64,
    /// Mean over time: each sample holds until the next scrape.
    pub mean: f64,
    /// Largest sample.
    pub max: f64,
    /// The last sample.
    pub last: f64,
}

/// A gauge's statistics, each sample scaled by `scale`; `None` without samples.
pub(crate) fn gauge(s: &[(u64, u64)], scale: f64) -> Option<GaugeStat> {
    let first = s.first()?;
    let last = s.last()?;
    let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut weighted = 0.0;
    for (i, &(t, v)) in s.iter().enumerate() {
        let v = v as f64 * scale;
        min = min.min(v);
        max = max.max(v);
        if let Some(next) = s.get(i + 1) {
            weighted += v * (next.0 - t) as f64;
        }
    }
    let span = (last.0 - first.0) as f64;
    let mean = if span > 0.0 { weighted / span } else { first.1 as f64 * scale };
    Some(GaugeStat {
        min,
        mean,
        max,
        last: last.1 as f64 * scale,
    })
}

/// The latency histograms of a trace's series, each over the window.
pub(crate) fn latencies(series: &[CounterSeries], shift: i64, resets: &mut u64) -> Vec<LatencyStat> {
    let mut out = Vec::new();
    for h in Histogram::ALL {
        let mut buckets: Vec<(f64, u64)> = Vec::new();
        let (mut count, mut sum_ns) = (None, None);
        for s in series {
            let Some((which, part)) = parse_histogram(&s.metric) else {
                continue;
            };
            if which != h {
                continue;
            }
            let samples = shifted(&s.samples, shift);
            let (inc, r) = increase(&samples);
            *resets += r;
            match part {
                HistogramPart::Bucket(_, le) => buckets.push((le, inc)),
                HistogramPart::Count => count = Some(inc),
                HistogramPart::SumNs => sum_ns = Some(inc),
            }
        }
        if buckets.is_empty() && count.is_none() {
            continue;
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        let count = count.unwrap_or_else(|| buckets.last().map_or(0, |b| b.1));
        let pairs: Vec<(f64, f64)> = buckets.iter().map(|&(le, n)| (le, n as f64)).collect();
        out.push(LatencyStat {
            name: h.short(),
            count,
            mean_s: sum_ns.filter(|_| count > 0).map(|s| s as f64 / 1e9 / count as f64),
            p50: histogram_quantile(0.50, &pairs),
            p95: histogram_quantile(0.95, &pairs),
            p99: histogram_quantile(0.99, &pairs),
            buckets: buckets.into_iter().map(|(le, count)| Bucket { le, count }).collect(),
        });
    }
    out
}

/// Samples moved to realtime.
pub(crate) fn shifted(s: &[(gputrace_format::Nanos, u64)], shift: i64) -> Samples {
    s.iter()
        .map(|&(t, v)| ((t.0 as i64).saturating_add(shift).max(0) as u64, v))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// vLLM's TTFT buckets with 50 × 0.03 s, 40 × 0.3 s, 10 × 3 s: the answers a real
    /// Prometheus 2.42 gave (shared/research/serving-metrics.md).
    #[test]
    fn quantiles_match_prometheus() {
        let les = [
            0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0,
            2560.0,
        ];
        let mut b: Vec<(f64, f64)> = les
            .iter()
            .map(|&le| {
                let n = [0.03, 0.3, 3.0]
                    .iter()
                    .zip([50.0, 40.0, 10.0])
                    .filter(|(v, _)| **v <= le)
                    .map(|(_, n)| n)
                    .sum();
                (le, n)
            })
            .collect();
        b.push((f64::INFINITY, 100.0));
        let q = |q| histogram_quantile(q, &b).unwrap();
        assert!((q(0.5).seconds - 0.04).abs() < 1e-12);
        assert!((q(0.95).seconds - 3.75).abs() < 1e-12);
        assert!((q(0.99).seconds - 4.75).abs() < 1e-12);
        assert_eq!((q(0.99).bucket_lower, q(0.99).bucket_upper), (2.5, 5.0));
    }

    #[test]
    fn quantile_edge_cases_follow_prometheus() {
        let inf = f64::INFINITY;
        // No +Inf bucket, one bucket, no observations: NaN.
        assert_eq!(histogram_quantile(0.5, &[(1.0, 3.0)]), None);
        assert_eq!(histogram_quantile(0.5, &[(inf, 3.0)]), None);
        assert_eq!(histogram_quantile(0.5, &[(1.0, 0.0), (inf, 0.0)]), None);
        // In the +Inf bucket: the highest finite bound.
        let top = histogram_quantile(0.99, &[(1.0, 1.0), (2.0, 1.0), (inf, 10.0)]).unwrap();
        assert_eq!((top.seconds, top.above_highest_bucket), (2.0, true));
        // Non-monotonic counts are made monotonic; unsorted input is sorted.
        let q = histogram_quantile(0.5, &[(inf, 4.0), (2.0, 1.0), (1.0, 2.0)]).unwrap();
        assert_eq!(q.seconds, 1.0);
        assert_eq!(histogram_quantile(1.5, &[(1.0, 1.0), (inf, 1.0)]), None);
    }

    #[test]
    fn increases_survive_restarts() {
        assert_eq!(increase(&[(0, 5), (1, 9), (2, 12)]), (7, 0));
        assert_eq!(increase(&[(0, 5), (1, 9), (2, 2), (3, 4)]), (4 + 2 + 2, 1));
        assert_eq!(increase(&[(0, 5)]), (0, 0));
    }

    #[test]
    fn gauges_hold_until_the_next_scrape() {
        let g = gauge(&[(0, 0), (1_000, 10), (4_000, 2)], 1.0).unwrap();
        assert_eq!((g.min, g.max, g.last), (0.0, 10.0, 2.0));
        assert!((g.mean - 30_000.0 / 4_000.0).abs() < 1e-12);
    }
}
