//! Per-request numbers from the server's own marks (`gputrace.request(...)`,
//! format 1.7 request events): exact where the server's histograms are
//! estimates. A request is the marks with one id in the traces of one run;
//! its latencies are differences of its marks' times.

use super::{Requests, Tokens};
use gputrace_format::{Event, EventKind, RequestPhase, TraceFile};
use serde::Serialize;
use std::collections::BTreeMap;

/// Where these numbers come from, as the report names it.
pub const SOURCE: &str = "gputrace.request marks";

/// One request, its marks' times in realtime ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct RequestRow {
    /// The server's request id (a string id hashed by the Python module).
    pub id: u64,
    /// Arrival (the earliest `arrive` mark).
    pub arrive_ns: Option<u64>,
    /// Taken from the queue (the earliest `scheduled` mark).
    pub scheduled_ns: Option<u64>,
    /// First output token (the earliest `first_token` mark).
    pub first_token_ns: Option<u64>,
    /// End: the earliest `finish` or `fail` mark.
    pub end_ns: Option<u64>,
    /// It ended with `fail`.
    pub failed: bool,
    /// Prompt tokens (from `arrive`).
    pub prompt_tokens: u64,
    /// Generated tokens (from `finish` or `fail`).
    pub generation_tokens: u64,
}

fn since(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    b?.checked_sub(a?)
}

impl RequestRow {
    /// Arrival to first token.
    pub fn ttft_ns(&self) -> Option<u64> {
        since(self.arrive_ns, self.first_token_ns)
    }
    /// Arrival to being scheduled.
    pub fn queue_ns(&self) -> Option<u64> {
        since(self.arrive_ns, self.scheduled_ns)
    }
    /// Arrival to the end, of a request that finished normally.
    pub fn e2e_ns(&self) -> Option<u64> {
        if self.failed {
            return None;
        }
        since(self.arrive_ns, self.end_ns)
    }
    /// Mean time between output tokens: (end − first token) / (generated − 1),
    /// for a finished request that generated at least two tokens.
    pub fn itl_ns(&self) -> Option<f64> {
        if self.failed || self.generation_tokens < 2 {
            return None;
        }
        since(self.first_token_ns, self.end_ns).map(|d| d as f64 / (self.generation_tokens - 1) as f64)
    }
    /// Output tokens per second after the first: (generated − 1) / (end − first token).
    pub fn decode_tokens_per_s(&self) -> Option<f64> {
        let d = since(self.first_token_ns, self.end_ns).filter(|&d| d > 0)?;
        (!self.failed && self.generation_tokens >= 2).then(|| (self.generation_tokens - 1) as f64 * 1e9 / d as f64)
    }
}

/// A distribution over requests, each request one value (nearest rank: the
/// value of the ⌈q·n⌉-th smallest).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ExactStat {
    /// `ttft`, `itl`, `e2e`, `queue` (seconds) or `decode_tokens_per_s`.
    pub name: &'static str,
    /// Requests with a value.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

fn exact(name: &'static str, mut v: Vec<f64>) -> Option<ExactStat> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let rank = |q: f64| v[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
    Some(ExactStat {
        name,
        count: n as u64,
        mean: v.iter().sum::<f64>() / n as f64,
        p50: rank(0.50),
        p95: rank(0.95),
        p99: rank(0.99),
        min: v[0],
        max: v[n - 1],
    })
}

/// What a run's request marks say.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RequestMarks {
    /// [`SOURCE`].
    pub source: &'static str,
    /// First mark, realtime ns.
    pub window_start_realtime_ns: u64,
    /// First to last mark, ns.
    pub window_ns: u64,
    /// Requests that ended (completed: `finish`; failed: `fail`), per second of the window.
    pub requests: Requests,
    /// Requests that arrived and had not ended at the last mark.
    pub unfinished: u64,
    /// Prompt tokens of the requests that arrived, generated tokens of those
    /// that ended, per second of the window.
    pub tokens: Tokens,
    /// `ttft`, `itl` (per request: its mean), `e2e`, `queue`, in seconds;
    /// only those some request has.
    pub latency: Vec<ExactStat>,
    /// Per request: output tokens per second after the first.
    pub decode_tokens_per_s: Option<ExactStat>,
}

impl RequestMarks {
    /// The latency statistic named `name`.
    pub fn latency(&self, name: &str) -> Option<&ExactStat> {
        self.latency.iter().find(|l| l.name == name)
    }
}

/// Where a serving figure comes from when there are no request marks.
pub const SERVER_METRICS: &str = "server metrics (histogram estimates)";

impl super::ServingReport {
    /// Where [`Self::best_requests`], [`Self::best_tokens`] and
    /// [`Self::best_latency_s`] come from: the request marks where the report
    /// has them (exact), else the server's metrics.
    pub fn figures_source(&self) -> &'static str {
        if self.request_marks.is_some() {
            SOURCE
        } else {
            SERVER_METRICS
        }
    }

    /// Requests finished, from the marks where there are marks.
    pub fn best_requests(&self) -> Requests {
        self.request_marks.as_ref().map_or(self.requests, |m| m.requests)
    }

    /// Tokens, from the marks where there are marks.
    pub fn best_tokens(&self) -> Tokens {
        self.request_marks.as_ref().map_or(self.tokens, |m| m.tokens)
    }

    /// Latency `name` (`ttft`, `itl`, `e2e`, `queue`) at percentile `q` (50,
    /// 95 or 99), seconds: exact from the marks where there are marks, else
    /// the histogram's quantile.
    pub fn best_latency_s(&self, name: &str, q: u32) -> Option<f64> {
        match &self.request_marks {
            Some(m) => {
                let l = m.latency(name)?;
                Some(match q {
                    50 => l.p50,
                    95 => l.p95,
                    _ => l.p99,
                })
            }
            None => {
                let l = self.latency(name)?;
                match q {
                    50 => l.p50,
                    95 => l.p95,
                    _ => l.p99,
                }
                .map(|x| x.seconds)
            }
        }
    }
}

/// The requests marked in `traces` (realtime ns), by id; empty without marks.
pub fn request_rows(traces: &[&TraceFile]) -> Vec<RequestRow> {
    let mut by: BTreeMap<u64, RequestRow> = BTreeMap::new();
    for t in traces {
        add_marks(&mut by, t, t.header().realtime_shift());
    }
    by.into_values().collect()
}

/// The requests marked in one trace, `shift` added to its times (0: the
/// trace's own clock), by id.
pub fn trace_request_rows(t: &TraceFile, shift: i64) -> Vec<RequestRow> {
    let mut by: BTreeMap<u64, RequestRow> = BTreeMap::new();
    add_marks(&mut by, t, shift);
    by.into_values().collect()
}

fn add_marks(by: &mut BTreeMap<u64, RequestRow>, t: &TraceFile, shift: i64) {
    if !t.chunks().iter().any(|c| c.kind == EventKind::Request) {
        return;
    }
    // A damaged chunk ends this trace's marks; what was read counts.
    for e in t.events_of(&[EventKind::Request]) {
        let Ok(Event::Request(m)) = e else { break };
        let at = (m.time.0 as i64).saturating_add(shift).max(0) as u64;
        let r = by.entry(m.id).or_insert(RequestRow {
            id: m.id,
            ..RequestRow::default()
        });
        let first = |slot: &mut Option<u64>| *slot = Some(slot.map_or(at, |v| v.min(at)));
        match m.phase {
            RequestPhase::ARRIVE => {
                first(&mut r.arrive_ns);
                r.prompt_tokens = r.prompt_tokens.max(m.tokens);
            }
            RequestPhase::SCHEDULED => first(&mut r.scheduled_ns),
            RequestPhase::FIRST_TOKEN => first(&mut r.first_token_ns),
            RequestPhase::FINISH | RequestPhase::FAIL => {
                if r.end_ns.is_none_or(|e| at < e) {
                    r.end_ns = Some(at);
                    r.failed = m.phase == RequestPhase::FAIL;
                }
                r.generation_tokens = r.generation_tokens.max(m.tokens);
            }
            _ => {} // a phase of a newer writer
        }
    }
}

/// When each mark's request was in the server (arrived, not ended), as a
/// step function: (time, requests in the server from then on).
pub fn in_server(rows: &[RequestRow]) -> Vec<(u64, u64)> {
    let mut delta: BTreeMap<u64, i64> = BTreeMap::new();
    for r in rows {
        let Some(a) = r.arrive_ns else { continue };
        *delta.entry(a).or_insert(0) += 1;
        if let Some(e) = r.end_ns.filter(|&e| e >= a) {
            *delta.entry(e).or_insert(0) -= 1;
        }
    }
    let mut n = 0i64;
    delta
        .into_iter()
        .map(|(t, d)| {
            n += d;
            (t, n.max(0) as u64)
        })
        .collect()
}

/// The statistics of `rows`; `None` without a request.
pub fn request_marks(rows: &[RequestRow]) -> Option<RequestMarks> {
    let times = rows
        .iter()
        .flat_map(|r| [r.arrive_ns, r.scheduled_ns, r.first_token_ns, r.end_ns])
        .flatten();
    let (start, end) = times.fold(None, |acc: Option<(u64, u64)>, t| match acc {
        None => Some((t, t)),
        Some((a, b)) => Some((a.min(t), b.max(t))),
    })?;
    let window_ns = end - start;
    let secs = window_ns as f64 / 1e9;
    let per_s = |n: u64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
    let completed = rows.iter().filter(|r| r.end_ns.is_some() && !r.failed).count() as u64;
    let failed = rows.iter().filter(|r| r.end_ns.is_some() && r.failed).count() as u64;
    let prompt: u64 = rows.iter().filter(|r| r.arrive_ns.is_some()).map(|r| r.prompt_tokens).sum();
    let generation: u64 = rows.iter().filter(|r| r.end_ns.is_some()).map(|r| r.generation_tokens).sum();
    let s = |v: Option<u64>| v.map(|ns| ns as f64 / 1e9);
    let latency = [
        exact("ttft", rows.iter().filter_map(|r| s(r.ttft_ns())).collect()),
        exact("itl", rows.iter().filter_map(|r| r.itl_ns().map(|ns| ns / 1e9)).collect()),
        exact("e2e", rows.iter().filter_map(|r| s(r.e2e_ns())).collect()),
        exact("queue", rows.iter().filter_map(|r| s(r.queue_ns())).collect()),
    ]
    .into_iter()
    .flatten()
    .collect();
    Some(RequestMarks {
        source: SOURCE,
        window_start_realtime_ns: start,
        window_ns,
        requests: Requests {
            completed,
            failed,
            completed_per_s: per_s(completed),
            failed_per_s: per_s(failed),
            error_rate: if completed + failed > 0 {
                failed as f64 / (completed + failed) as f64
            } else {
                0.0
            },
        },
        unfinished: rows.iter().filter(|r| r.arrive_ns.is_some() && r.end_ns.is_none()).count() as u64,
        tokens: Tokens {
            prompt,
            generation,
            prompt_per_s: per_s(prompt),
            generation_per_s: per_s(generation),
        },
        latency,
        decode_tokens_per_s: exact("decode_tokens_per_s", rows.iter().filter_map(|r| r.decode_tokens_per_s()).collect()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: u64, arrive: u64, sched: u64, first: u64, end: u64, gen: u64, failed: bool) -> RequestRow {
        RequestRow {
            id,
            arrive_ns: Some(arrive),
            scheduled_ns: Some(sched),
            first_token_ns: Some(first),
            end_ns: Some(end),
            failed,
            prompt_tokens: 10,
            generation_tokens: gen,
        }
    }

    #[test]
    fn latencies_are_differences_of_one_requests_marks() {
        let ms = 1_000_000;
        let rows = [
            row(1, 0, 2 * ms, 50 * ms, 150 * ms, 11, false),
            row(2, 100 * ms, 110 * ms, 200 * ms, 1100 * ms, 101, false),
            row(3, 200 * ms, 200 * ms, 300 * ms, 400 * ms, 5, true),
        ];
        let m = request_marks(&rows).unwrap();
        assert_eq!((m.requests.completed, m.requests.failed, m.unfinished), (2, 1, 0));
        assert_eq!(m.window_ns, 1100 * ms);
        assert_eq!((m.tokens.prompt, m.tokens.generation), (30, 117));
        let ttft = m.latency("ttft").unwrap();
        assert_eq!((ttft.count, ttft.p50, ttft.max), (3, 0.1, 0.1));
        assert_eq!(ttft.min, 0.05);
        let itl = m.latency("itl").unwrap();
        assert_eq!(itl.count, 2, "the failed request has no ITL");
        assert_eq!((itl.min, itl.max), (0.009, 0.01));
        let e2e = m.latency("e2e").unwrap();
        assert_eq!((e2e.count, e2e.p50, e2e.p99), (2, 0.15, 1.0));
        assert_eq!(m.latency("queue").unwrap().max, 0.01);
        // The step function: 1 at 0, 2 at 100 ms, 1 at 150, 2 at 200, 1 at 400, 0 at 1100.
        assert_eq!(
            in_server(&rows),
            vec![(0, 1), (100 * ms, 2), (150 * ms, 1), (200 * ms, 2), (400 * ms, 1), (1100 * ms, 0)]
        );
    }
}
