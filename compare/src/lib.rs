//! `gputrace compare`: line up the per-rank timelines of a distributed job
//! and name the stragglers.
//!
//! 1. Each rank is reduced to a [`RankSummary`] (its collectives, steps, and
//!    per step its compute time and host-caused GPU idle).
//! 2. Collectives are matched across ranks by (communicator, operation,
//!    sequence number) when the traces carry NCCL's identity, otherwise by
//!    the order of each operation's kernels.
//! 3. Clocks are aligned on the matched collectives' end times: ranks leave
//!    a blocking collective within microseconds of each other, so the median
//!    difference of end times is each rank's clock offset; the spread around
//!    it is the residual, and its trend over the trace the drift.
//! 4. For every matched collective: each rank's arrival (aligned start), the
//!    last arriver and the wait it imposed on the others (its arrival minus
//!    the second-latest), each rank's wait, the transfer time (the time from
//!    the last arrival to the end, the shortest across ranks) and the bus
//!    bandwidth when bytes are known.
//! 5. The straggler is the rank that imposes the most wait; its cause is its
//!    own GPU work (more compute time than its peers), its host (more GPU
//!    idle waiting for launches), or neither (network), named only when the
//!    evidence singles the rank out (it leads the next rank by a margin the
//!    evidence states); a raised value another rank matches is `unclear`.
//!
//! ```
//! use gputrace_compare::{compare, Options};
//! use gputrace_synth::{schedule, write_rank, JobConfig};
//! let cfg = JobConfig { ranks: 3, steps: 4, layers: 3, slow_rank: Some(1), ..JobConfig::default() };
//! let s = schedule(&cfg);
//! let traces: Vec<_> = (0..3)
//!     .map(|r| gputrace_format::TraceFile::from_bytes(format!("r{r}"), write_rank(&cfg, &s, r, Vec::new()).unwrap().0).unwrap())
//!     .collect();
//! let c = compare(&traces, &Options::default()).unwrap();
//! assert_eq!(c.stragglers[0].rank, 1);
//! assert_eq!(c.stragglers[0].cause, gputrace_compare::Cause::Gpu);
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod heatmap;
mod host;
mod serving;
mod summary;

pub use heatmap::heatmap_svg;
pub use serving::{compare_servers, render_servers, ServerComparison, ServerRow};
pub use summary::{is_comm_kernel, op_from_kernel, summarize, summarize_report, summarize_with, CollKey, CollRec, RankSummary, StepStat};

use gputrace_analysis::{FindingRule, Value};
use gputrace_format::{FormatError, TraceFile};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Errors of `compare`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompareError {
    /// A trace could not be read.
    #[error(transparent)]
    Format(#[from] FormatError),
    /// A rank's trace could not be analysed.
    #[error(transparent)]
    Analysis(#[from] gputrace_analysis::AnalysisError),
    /// Fewer than two ranks.
    #[error("compare needs at least two ranks, got {0}")]
    TooFewRanks(usize),
    /// Two inputs claim the same rank.
    #[error("rank {rank} appears twice: {first} and {second}")]
    DuplicateRank {
        /// The rank.
        rank: u32,
        /// One file.
        first: String,
        /// The other.
        second: String,
    },
    /// No collective matched across all ranks.
    #[error("no collective operation could be matched across the ranks (do the traces come from the same job and contain NCCL kernels?)")]
    NothingMatched,
}

/// The report's `stragglers` findings from a comparison: the ranks the others wait for,
/// with the cause, exactly as `gputrace compare` names them (one definition for both
/// commands).
pub fn straggler_findings(c: &Comparison) -> Vec<gputrace_analysis::Finding> {
    c.stragglers
        .iter()
        .map(|st| {
            let next = match st.cause {
                Cause::Gpu => "Its GPU computes longer before each collective: compare its kernels and clocks with a peer (a slower or throttled GPU, or more work: sequence lengths, data shards, expert load).",
                Cause::Host => "Its CPU launches late: look at that rank's input pipeline and host-side work between steps (data loading, logging, garbage collection).",
                Cause::Network => "It arrives late without computing more or launching later: check its links (NVLink/PCIe/NIC), placement and topology.",
                Cause::Unclear => "Its compute or host idle is raised but other ranks' are close or higher: compare the ranks' per-step compute and host idle (gputrace compare's per-rank table) before blaming its GPU or host.",
                Cause::Unknown => "The collectives carry no GPU times: trace with CUPTI as well (no other profiler holding it) to tell the cause.",
            };
            use gputrace_analysis::Value;
            let values = gputrace_analysis::Values::from([
                (Value::Rank, f64::from(st.rank)),
                (Value::WaitImposedNs, st.wait_imposed_ns as f64),
                (Value::ShareOfWaiting, st.score),
                (Value::ArrivedLast, st.arrived_last as f64),
            ]);
            gputrace_analysis::Finding {
                rule: gputrace_analysis::FindingRule::Stragglers,
                severity: gputrace_analysis::Severity::High,
                title: format!("Rank {} is the straggler: the others wait for it (cause: {})", st.rank, st.cause),
                evidence: format!(
                    "arrived last at {} of {} matched collectives and made the others wait {} in all ({:.0}% of all waiting): {}{}",
                    st.arrived_last,
                    c.matched,
                    gputrace_format::Nanos(st.wait_imposed_ns),
                    100.0 * st.score,
                    st.why,
                    if c.clock.poor {
                        format!(
                            "; but the clock alignment is poor (residual {}), so treat this as a lead, not a measurement (gputrace compare says why)",
                            gputrace_format::Nanos(c.clock.residual_ns)
                        )
                    } else {
                        String::new()
                    }
                ),
                next_step: next.to_string(),
                values,
            }
        })
        .collect()
}

/// The comparison of a multi-rank report's ranks, as `gputrace compare` makes it
/// (reusing the report's analysis, with the default [`Options`]), or why it cannot be
/// made; `None` for a report of one rank.
pub fn report_comparison(
    report: &gputrace_analysis::Report,
    traces: &[TraceFile],
    classifier: &gputrace_analysis::Classifier,
) -> Option<Result<Comparison, CompareError>> {
    (report.ranks.len() >= 2).then(|| compare_report(report, traces, classifier, &Options::default()))
}

/// [`report_comparison`], and when it could be made, its stragglers added to the report's
/// findings ([`add_stragglers`]): a multi-rank report as `gputrace report` gives it.
pub fn with_stragglers(
    report: &mut gputrace_analysis::Report,
    traces: &[TraceFile],
    classifier: &gputrace_analysis::Classifier,
) -> Option<Result<Comparison, CompareError>> {
    let comparison = report_comparison(report, traces, classifier);
    if let Some(Ok(c)) = &comparison {
        add_stragglers(report, c);
    }
    comparison
}

/// Add the `stragglers` findings of comparison `c` ([`straggler_findings`]) to `report`,
/// each with the time at stake (the wait it imposed on the others), and keep the
/// findings sorted by severity.
pub fn add_stragglers(report: &mut gputrace_analysis::Report, c: &Comparison) {
    // A straggler whose cause is its GPU's longer compute already says what
    // "uneven compute" would say of the same rank.
    let gpu_bound: Vec<f64> = c
        .stragglers
        .iter()
        .filter(|s| s.cause == Cause::Gpu)
        .map(|s| f64::from(s.rank))
        .collect();
    report
        .findings
        .retain(|f| !(f.rule == FindingRule::UnevenCompute && f.values.get(Value::Rank).is_some_and(|r| gpu_bound.contains(&r))));
    let price = report.cost.map(|c| c.usd_per_gpu_hour);
    for mut f in straggler_findings(c) {
        let wait = f.values.get(Value::WaitImposedNs).map_or(0, |w| w as u64);
        gputrace_analysis::state_stake(
            &mut f,
            wait,
            report.totals.time.span_ns,
            price,
            Some(gputrace_analysis::Severity::High),
        );
        report.findings.push(f);
    }
    report.findings.sort_by_key(|f| f.severity);
}

/// The comparison of `report`'s ranks (the traces it was made from, in any order:
/// matched by file), as `gputrace compare` makes it, reusing the report's analysis of
/// each rank.
pub fn compare_report(
    report: &gputrace_analysis::Report,
    traces: &[TraceFile],
    classifier: &gputrace_analysis::Classifier,
    opts: &Options,
) -> Result<Comparison, CompareError> {
    let by_file: HashMap<String, &TraceFile> = traces.iter().map(|t| (t.path().display().to_string(), t)).collect();
    let mut sums = Vec::with_capacity(report.ranks.len());
    let mut start_realtime = Vec::with_capacity(report.ranks.len());
    let mut used = Vec::with_capacity(report.ranks.len());
    for r in &report.ranks {
        let Some(t) = by_file.get(&r.file) else {
            continue;
        };
        sums.push(summarize_report(t, r.clone(), classifier)?);
        start_realtime.push(t.header().start_clock.realtime_ns);
        used.push(*t);
    }
    let starts = host::Starts::of(&sums, &used);
    let mut c = compare_summaries(sums, &start_realtime, opts)?;
    host::explain(&mut c, &starts)?;
    Ok(c)
}

/// Settings.
#[derive(Clone, Debug)]
pub struct Options {
    /// A rank is listed as a straggler when its share of the imposed wait is
    /// at least this many times an even share (`1/ranks`).
    pub straggler_factor: f64,
    /// Compute time above the peers' median by this fraction means "gpu".
    pub gpu_threshold: f64,
    /// A straggler must also impose at least this fraction of the job's
    /// span in waiting (random jitter makes someone last every time).
    pub min_imposed_share: f64,
    /// A GPU with slowdown reasons set at least this share of the time is throttled.
    pub throttled_share: f64,
    /// A mean SM clock this fraction below the peers' median is slower-clocked.
    pub clock_deficit: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            straggler_factor: 1.25,
            gpu_threshold: 0.05,
            min_imposed_share: 0.02,
            throttled_share: 0.10,
            clock_deficit: 0.05,
        }
    }
}

/// Clock alignment.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Clock {
    /// Rank used as the reference (offset 0).
    pub reference_rank: u32,
    /// Each rank's clock offset to the reference, ns (rank time - offset =
    /// reference time).
    pub offsets_ns: BTreeMap<u32, i64>,
    /// Largest per-rank median absolute deviation of the end-time
    /// differences around the offset, ns.
    pub residual_ns: u64,
    /// Each rank's drift against the reference, parts per million.
    pub drift_ppm: BTreeMap<u32, f64>,
    /// Estimate from the recorded wall clocks (header start clock pairs),
    /// before alignment, ns.
    pub header_offsets_ns: BTreeMap<u32, i64>,
    /// Median duration of the matched collectives on the reference rank, ns.
    pub median_collective_ns: u64,
    /// The residual exceeds both [`POOR_ALIGNMENT_FLOOR_NS`] and a tenth of the median
    /// collective:
    /// per-collective numbers are unreliable (a warning says why).
    pub poor: bool,
}

/// Residuals up to this are never called poor (timer and launch jitter).
pub const POOR_ALIGNMENT_FLOOR_NS: u64 = 50_000;

/// Why a straggler arrives late. Serialized as its [`Cause::name`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Cause {
    /// Its GPU computes longer than its peers'.
    Gpu,
    /// Its GPU waits longer for its host to launch work.
    Host,
    /// Neither: it arrives late without computing more or launching later.
    Network,
    /// Its compute or host idle is raised without singling it out (the evidence says by
    /// how much).
    Unclear,
    /// The collectives have no GPU times, so the cause cannot be told.
    Unknown,
}

impl Cause {
    /// The name in JSON and text: `gpu`, `host`, `network`, `unclear`, `unknown`.
    pub fn name(self) -> &'static str {
        match self {
            Cause::Gpu => "gpu",
            Cause::Host => "host",
            Cause::Network => "network",
            Cause::Unclear => "unclear",
            Cause::Unknown => "unknown",
        }
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One straggler.
#[derive(Clone, Debug, Serialize)]
pub struct Straggler {
    /// Rank.
    pub rank: u32,
    /// Share of all imposed wait (0..1).
    pub score: f64,
    /// Total wait this rank imposed on the others, ns.
    pub wait_imposed_ns: u64,
    /// Collectives it arrived last at.
    pub arrived_last: u64,
    /// Why it arrives late.
    pub cause: Cause,
    /// The evidence, in words.
    pub why: String,
    /// Its GPU's counters show it throttled or clocked below its peers (see
    /// [`RankRow::gpu_slowed`]).
    pub gpu_slowed: bool,
    /// For a `host` cause, what its host did while it was late (its host
    /// samples over the waits it imposed; see `host.rs`); null without samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<gputrace_analysis::host::HostView>,
}

/// Per-rank numbers.
#[derive(Clone, Debug, Serialize)]
pub struct RankRow {
    /// Rank.
    pub rank: u32,
    /// Host.
    pub host: String,
    /// File.
    pub path: String,
    /// Matched collectives this rank arrived last at.
    pub arrived_last: u64,
    /// Wait this rank imposed on the others, ns.
    pub wait_imposed_ns: u64,
    /// Time this rank waited for late peers, ns.
    pub waited_ns: u64,
    /// Mean arrival after the median arrival, ns (negative: early).
    pub mean_lateness_ns: i64,
    /// Transfer time in its collectives (from the last arrival to the end), ns.
    pub transfer_ns: u64,
    /// Compute-kernel time, ns.
    pub compute_ns: u64,
    /// GPU idle the host caused, ns.
    pub host_idle_ns: u64,
    /// Steps (ProfilerStep markers), with step time, compute and host idle.
    pub steps: Vec<StepRow>,
    /// Number of steps (gputrace step marks, else ProfilerStep ranges), as `gputrace report` counts them.
    pub step_count: u64,
    /// Median step time, s (nearest rank, as `gputrace report`).
    pub step_time_p50_s: Option<f64>,
    /// Tokens per second in the steps (null without token counts).
    pub tokens_per_s: Option<f64>,
    /// `succeeded` or `failed` (run record, exit marker, trailer).
    pub outcome: String,
    /// Mean SM clock of its GPU, MHz (null without GPU counters in the trace).
    pub sm_clock_mean_mhz: Option<f64>,
    /// Share of the sampled time its GPU had a slowdown reason set (power cap, thermal,
    /// hardware slowdown), 0..1 (null without throttle-reason samples).
    pub throttled_share: Option<f64>,
    /// Its GPU was throttled at least [`Options::throttled_share`] of the time, or its mean SM
    /// clock was [`Options::clock_deficit`] or more below its peers' median: a common cause of
    /// a GPU straggler.
    pub gpu_slowed: bool,
    /// Why `gpu_slowed`, in words (empty when it is not).
    pub gpu_slowed_why: String,
}

/// One step of one rank.
#[derive(Clone, Debug, Serialize)]
pub struct StepRow {
    /// Step time, ns.
    pub step_ns: u64,
    /// Compute-kernel time, ns.
    pub compute_ns: u64,
    /// GPU idle the host caused (the CPU had not launched the work yet), ns.
    pub host_idle_ns: u64,
    /// GPU idle with the work already launched (launch/dependency latency), ns.
    pub latency_idle_ns: u64,
    /// GPU idle while the CPU was blocked in a synchronization, ns.
    pub sync_idle_ns: u64,
    /// Time this rank waited in the step's collectives for late peers, ns.
    pub waited_ns: u64,
    /// Time the step's collectives spent transferring after the last
    /// arrival, on this rank, ns.
    pub transfer_ns: u64,
}

/// One matched collective.
#[derive(Clone, Debug, Serialize)]
pub struct CollectiveRow {
    /// Communicator (0 if unknown).
    pub comm: u64,
    /// Operation.
    pub op: String,
    /// Sequence number.
    pub seq: u64,
    /// Latest minus earliest arrival, ns.
    pub arrival_skew_ns: u64,
    /// Rank that arrived last.
    pub last_rank: u32,
    /// Wait the last rank imposed (its arrival minus the second-latest), ns.
    pub imposed_ns: u64,
    /// Shortest time from the last arrival to a rank's end, ns.
    pub transfer_ns: u64,
    /// Bytes, when known.
    pub bytes: u64,
    /// Bus bandwidth, GB/s, when bytes are known.
    pub bus_gbps: Option<f64>,
    /// Index of the step (on the reference rank) it falls in.
    pub step: usize,
}

/// The whole comparison.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// Stragglers, most likely first.
    pub stragglers: Vec<Straggler>,
    /// Clock alignment.
    pub clock: Clock,
    /// Ranks, sorted by imposed wait (latest first).
    pub ranks: Vec<RankRow>,
    /// `exact` (communicator, operation, sequence number) or `order`.
    pub matching: String,
    /// Collectives matched across every rank.
    pub matched: usize,
    /// Collectives seen on some ranks only (not matched).
    pub unmatched: usize,
    /// Warnings (e.g. operation names that disagree).
    pub warnings: Vec<String>,
    /// Matched collectives (at most `max_collectives` kept, the worst first).
    pub collectives: Vec<CollectiveRow>,
    /// Mean lateness (arrival after the earliest rank) over the matched collectives of
    /// each step (or group of collectives), ns, per rank (in `lateness_ranks` order) per
    /// step: the heatmap's data.
    pub lateness: Vec<Vec<u64>>,
    /// Rank ids for the rows of `lateness`.
    pub lateness_ranks: Vec<u32>,
    /// The job's tokens per second: the ranks' summed (null without token counts), as
    /// `gputrace report`'s `productive.tokens_per_s`.
    pub tokens_per_s: Option<f64>,
}

fn median_i64(v: &mut [i64]) -> i64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[v.len() / 2]
}

fn median_u64(mut v: Vec<u64>) -> u64 {
    if v.is_empty() {
        return 0;
    }
    v.sort_unstable();
    v[v.len() / 2]
}

/// The peer (index) with the most of `v`, and its value.
fn top_peer(peers: &[usize], v: &[u64]) -> (usize, u64) {
    peers
        .iter()
        .map(|&p| (p, v[p]))
        .max_by_key(|&(p, x)| (x, std::cmp::Reverse(p)))
        .unwrap_or((0, 0))
}

/// Why straggler `r` arrives late, named only when its evidence singles it out among
/// `peers`: `gpu` when it computes [`Options::gpu_threshold`] more than its peers' median
/// and leads the next rank by half that; `host` when its GPU waits for its host enough
/// to explain half its lateness and more than every peer's by that much again; `unclear`
/// when one of the two is raised without singling it out (the numbers say which);
/// `network` when neither is raised.
fn straggler_cause(
    r: usize,
    peers: &[usize],
    compute: &[u64],
    host: &[u64],
    ranks: &[RankRow],
    n_steps: f64,
    opts: &Options,
) -> (Cause, String) {
    let ms = |ns: f64| ns / 1e6;
    let peers_c = median_u64(peers.iter().map(|&p| compute[p]).collect());
    let peers_h = median_u64(peers.iter().map(|&p| host[p]).collect());
    let (next_c_rank, next_c) = top_peer(peers, compute);
    let (next_h_rank, next_h) = top_peer(peers, host);
    let extra_c = compute[r] as f64 / peers_c.max(1) as f64 - 1.0;
    let lead_c = (compute[r] as f64 - next_c as f64) / peers_c.max(1) as f64;
    // Per step: how much more the GPU waited for this host than for its peers' (median),
    // and than for the next one's, against how late the rank arrives at a collective.
    let extra_h_step = host[r].saturating_sub(peers_h) as f64 / n_steps;
    let lead_h_step = (host[r] as f64 - next_h as f64) / n_steps;
    let lateness = ranks[r].mean_lateness_ns.max(0) as f64;
    let gpu_raised = extra_c >= opts.gpu_threshold;
    let host_raised = lateness > 0.0 && extra_h_step >= 0.5 * lateness;
    let gpu_words = format!(
        "its compute kernels took {:.1}% longer than its peers' (median), {:.1}% of that median more than the next rank's (rank {})",
        extra_c * 100.0,
        lead_c * 100.0,
        ranks[next_c_rank].rank
    );
    let host_words = format!(
        "its GPU sat idle waiting for its host {:.2} ms per step more than its peers' (median) and {:.2} ms per step more than the next rank's (rank {}), against {:.2} ms of lateness",
        ms(extra_h_step),
        ms(lead_h_step),
        ranks[next_h_rank].rank,
        ms(lateness)
    );
    if gpu_raised && lead_c >= 0.5 * opts.gpu_threshold {
        let mut why = gpu_words;
        if ranks[r].gpu_slowed {
            why.push_str(&format!(", and {}", ranks[r].gpu_slowed_why));
        }
        (Cause::Gpu, why)
    } else if host_raised && lead_h_step >= 0.5 * lateness {
        (Cause::Host, format!("{host_words}: data loading or Python on that host"))
    } else if gpu_raised || host_raised {
        (
            Cause::Unclear,
            format!("the evidence does not single it out: {gpu_words}; {host_words}"),
        )
    } else {
        (
            Cause::Network,
            format!("neither its GPU work nor its host explains it ({gpu_words}; {host_words}): look at its network path (NIC, switch, topology)"),
        )
    }
}

/// Median (the upper one of an even count, as [`median_u64`]); 0 when empty.
fn median_f64(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Compare open traces (one per rank).
pub fn compare(traces: &[TraceFile], opts: &Options) -> Result<Comparison, CompareError> {
    let mut sums = Vec::with_capacity(traces.len());
    for (i, t) in traces.iter().enumerate() {
        sums.push(summarize(t, i as u32)?);
    }
    let headers: Vec<_> = traces.iter().map(|t| t.header().start_clock.realtime_ns).collect();
    let starts = host::Starts::of(&sums, &traces.iter().collect::<Vec<_>>());
    let mut c = compare_summaries(sums, &headers, opts)?;
    host::explain(&mut c, &starts)?;
    Ok(c)
}

/// Compare rank summaries (see [`summarize`]); `start_realtime` are the
/// header wall clocks in the same order (for the starting estimate).
pub fn compare_summaries(sums: Vec<RankSummary>, start_realtime: &[u64], opts: &Options) -> Result<Comparison, CompareError> {
    let (sums, starts) = by_rank(sums, start_realtime)?;
    let exact = sums.iter().all(|s| s.exact_keys);
    // First: every number below describes only what these traces recorded.
    let mut warnings = input_warnings(&sums, exact);
    // Collectives recorded by the NCCL plugin but not linked to their kernels
    // (NCCL-only traces: CUPTI held by another profiler; NCCL < 2.28) have
    // only the time the rank called NCCL (start = end).
    let gpu_timed = sums.iter().any(|s| s.collectives.iter().any(|c| c.end > c.start));
    if !gpu_timed {
        warnings.push(
            "the collectives carry no GPU times (not linked to their kernels, e.g. NCCL-only traces): arrival and waiting \
             are measured between the times the ranks called NCCL, and a straggler's cause cannot be told"
                .into(),
        );
    }
    let (matched, unmatched) = match_collectives(&sums, exact, &mut warnings)?;
    let (clock, offsets) = align_clocks(&sums, &matched, &starts, exact, &mut warnings);
    let mut walked = walk_collectives(&sums, &matched, &offsets);
    let mut ranks = rank_rows(&sums, &walked, matched.len());
    mark_slowed_gpus(&mut ranks, &sums, opts, &mut warnings);
    let mut stragglers = find_stragglers(&sums, &ranks, &walked, gpu_timed, opts);
    stragglers.sort_by(|a, b| b.score.total_cmp(&a.score));
    // Mean lateness per cell: a rank that is late at most collectives of a step stands
    // out from one that was late once.
    for row in &mut walked.lateness {
        for (v, &k) in row.iter_mut().zip(&walked.per_column) {
            *v /= k.max(1);
        }
    }
    let lateness_ranks = sums.iter().map(|s| s.rank).collect();
    let tokens_per_s = gputrace_analysis::productive::job_rate(sums.iter().map(|s| s.productive.tokens_per_s));
    ranks.sort_by(|a, b| b.wait_imposed_ns.cmp(&a.wait_imposed_ns).then(a.rank.cmp(&b.rank)));
    let mut rows = walked.rows;
    rows.sort_by_key(|r| std::cmp::Reverse(r.imposed_ns));
    rows.truncate(100);
    Ok(Comparison {
        stragglers,
        clock,
        ranks,
        matching: if exact { "exact".into() } else { "order".into() },
        matched: matched.len(),
        unmatched,
        warnings,
        collectives: rows,
        lateness: walked.lateness,
        lateness_ranks,
        tokens_per_s,
    })
}

/// The summaries sorted by rank, with their header wall clocks (`start_realtime`, in
/// the summaries' given order; 0 where missing) in the same order. At least two ranks,
/// each once.
fn by_rank(sums: Vec<RankSummary>, start_realtime: &[u64]) -> Result<(Vec<RankSummary>, Vec<u64>), CompareError> {
    if sums.len() < 2 {
        return Err(CompareError::TooFewRanks(sums.len()));
    }
    let mut order: Vec<usize> = (0..sums.len()).collect();
    order.sort_by_key(|&i| sums[i].rank);
    let starts: Vec<u64> = order.iter().map(|&i| start_realtime.get(i).copied().unwrap_or(0)).collect();
    let sums: Vec<RankSummary> = order.iter().map(|&i| sums[i].clone()).collect();
    for w in sums.windows(2) {
        if w[0].rank == w[1].rank {
            return Err(CompareError::DuplicateRank {
                rank: w[0].rank,
                first: w[0].path.clone(),
                second: w[1].path.clone(),
            });
        }
    }
    Ok((sums, starts))
}

/// What the inputs themselves limit: ranks that lost data, identities on some ranks
/// only, and communication kernels matched by their order in a stream.
fn input_warnings(sums: &[RankSummary], exact: bool) -> Vec<String> {
    let mut warnings = Vec::new();
    for s in sums {
        if let Some(what) = &s.losses {
            warnings.push(format!(
                "rank {} ({}) lost data, its numbers describe what was recorded: {what}",
                s.rank, s.path
            ));
        }
    }
    if !exact && sums.iter().any(|s| s.exact_keys) {
        warnings.push("some ranks carry NCCL collective identities and some do not: matched by kernel order".into());
    }
    let mut ordered: BTreeMap<&str, u64> = BTreeMap::new();
    for s in sums {
        for (library, n) in &s.ordered_by_stream {
            let e = ordered.entry(library.as_str()).or_insert(0);
            *e = (*e).max(*n);
        }
    }
    for (library, n) in ordered {
        warnings.push(format!(
            "{library}: up to {n} communication kernels per rank carry no collective identity and were matched across ranks by their order within their stream (a rank that ran a different number, or on another stream, does not line up)"
        ));
    }
    warnings
}

/// A collective found on every rank: its key, and its record's index on each rank.
type Matched = (CollKey, Vec<usize>);

/// The collectives found on every rank (by exact key, or by operation and order when
/// not `exact`), in the reference rank's start order, and how many keys were seen on
/// some ranks only.
fn match_collectives(sums: &[RankSummary], exact: bool, warnings: &mut Vec<String>) -> Result<(Vec<Matched>, usize), CompareError> {
    let n = sums.len();
    // key -> per-rank record index
    let mut table: HashMap<CollKey, Vec<Option<usize>>> = HashMap::new();
    for (r, s) in sums.iter().enumerate() {
        for (i, c) in s.collectives.iter().enumerate() {
            let key = if exact {
                c.key.clone()
            } else {
                CollKey { comm: 0, ..c.key.clone() }
            };
            let slot = table.entry(key).or_insert_with(|| vec![None; n]);
            if slot[r].is_none() {
                slot[r] = Some(i);
            }
        }
    }
    let mut matched: Vec<Matched> = table
        .iter()
        .filter(|(_, v)| v.iter().all(Option::is_some))
        .map(|(k, v)| (k.clone(), v.iter().map(|x| x.unwrap_or(0)).collect()))
        .collect();
    let unmatched = table.len() - matched.len();
    if matched.is_empty() {
        return Err(CompareError::NothingMatched);
    }
    matched.sort_by_key(|(_, idx)| sums[0].collectives[idx[0]].start);
    if !exact {
        let per_rank: Vec<usize> = sums.iter().map(|s| s.collectives.len()).collect();
        let most = per_rank.iter().copied().max().unwrap_or(0);
        if matched.len() * 10 < most * 9 {
            warnings.push(format!(
                "matched by kernel order: only {} of up to {} communication kernels per rank line up; operation names or counts differ between ranks",
                matched.len(),
                most
            ));
        }
    }
    Ok((matched, unmatched))
}

/// Each rank's clock offset to the reference (rank 0 of `sums`) from the matched
/// collectives' end times, with the residual, the drift and the alignment's quality
/// (a warning when poor). Returns the clock and the offsets in `sums` order.
fn align_clocks(sums: &[RankSummary], matched: &[Matched], starts: &[u64], exact: bool, warnings: &mut Vec<String>) -> (Clock, Vec<i64>) {
    let n = sums.len();
    let mut clock = Clock {
        reference_rank: sums[0].rank,
        ..Default::default()
    };
    let mut offsets = vec![0i64; n];
    for r in 0..n {
        let mut d: Vec<i64> = matched
            .iter()
            .map(|(_, idx)| sums[r].collectives[idx[r]].end as i64 - sums[0].collectives[idx[0]].end as i64)
            .collect();
        let off = median_i64(&mut d);
        offsets[r] = off;
        let mut dev: Vec<i64> = d.iter().map(|x| (x - off).abs()).collect();
        clock.residual_ns = clock.residual_ns.max(median_i64(&mut dev) as u64);
        // Drift: least-squares slope of (diff - offset) against reference time.
        let pts: Vec<(f64, f64)> = matched
            .iter()
            .map(|(_, idx)| {
                (
                    sums[0].collectives[idx[0]].end as f64,
                    (sums[r].collectives[idx[r]].end as i64 - sums[0].collectives[idx[0]].end as i64 - off) as f64,
                )
            })
            .collect();
        let mx = pts.iter().map(|p| p.0).sum::<f64>() / pts.len() as f64;
        let my = pts.iter().map(|p| p.1).sum::<f64>() / pts.len() as f64;
        let sxx: f64 = pts.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
        let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        let slope = if sxx > 0.0 { sxy / sxx } else { 0.0 };
        clock.offsets_ns.insert(sums[r].rank, off);
        clock.drift_ppm.insert(sums[r].rank, slope * 1e6);
        clock.header_offsets_ns.insert(sums[r].rank, starts[r] as i64 - starts[0] as i64);
    }

    // Alignment quality: the same collective should end at (nearly) the same aligned
    // time on every rank. A residual above the collectives' own length means the
    // per-collective arrival and waiting numbers below are not trustworthy.
    let mut durations: Vec<u64> = matched
        .iter()
        .map(|(_, idx)| {
            let c = &sums[0].collectives[idx[0]];
            c.end.saturating_sub(c.start)
        })
        .collect();
    durations.sort_unstable();
    let median_duration = durations.get(durations.len() / 2).copied().unwrap_or(0);
    clock.median_collective_ns = median_duration;
    // Ranks leave a collective together (within the network's latency), so its end
    // times should agree far better than its length, which includes the waiting.
    clock.poor = clock.residual_ns > POOR_ALIGNMENT_FLOOR_NS && clock.residual_ns > median_duration / 10;
    if clock.poor {
        warnings.push(format!(
            "clock alignment is poor: after alignment the same collective still ends {:.1} µs apart across ranks (median deviation; ranks leave a \
             collective together, and its median length is {:.1} µs): per-collective arrival, skew and waiting are unreliable. Usually the ranks' traces cover different \
             steps or windows (profile the same steps on every rank), or the inputs are a few ranks of a larger job whose point-to-point \
             operations pair with ranks not given{}",
            clock.residual_ns as f64 / 1e3,
            median_duration as f64 / 1e3,
            if exact {
                ""
            } else {
                ", or collectives matched by kernel order did not line up (different operation counts per rank)"
            }
        ));
    }
    (clock, offsets)
}

/// What the walk over the matched collectives sums per rank (in `sums` order), per
/// heatmap column and per step of the reference rank.
struct Walked {
    /// Summed lateness (arrival after the earliest rank) per rank per column, ns.
    lateness: Vec<Vec<u64>>,
    /// Collectives per column.
    per_column: Vec<u64>,
    arrived_last: Vec<u64>,
    imposed: Vec<u64>,
    waited: Vec<u64>,
    /// Summed arrival after the median arrival (negative: early), ns.
    late_sum: Vec<i128>,
    transfer: Vec<u64>,
    /// Waiting and transfer per rank per reference step (empty without steps).
    step_wait: Vec<Vec<u64>>,
    step_xfer: Vec<Vec<u64>>,
    /// One row per matched collective, in `matched` order.
    rows: Vec<CollectiveRow>,
}

/// Walk the matched collectives on the aligned clocks: who arrived last, the wait it
/// imposed, each rank's waiting, lateness and transfer, per step or heatmap column.
fn walk_collectives(sums: &[RankSummary], matched: &[Matched], offsets: &[i64]) -> Walked {
    let n = sums.len();
    // Steps on the reference rank, for the heatmap columns.
    let ref_steps: Vec<(u64, u64)> = sums[0].steps.iter().map(|s| (s.start, s.end)).collect();
    let step_of = |t: u64| -> usize {
        if ref_steps.is_empty() {
            0
        } else {
            ref_steps.partition_point(|s| s.0 <= t).saturating_sub(1)
        }
    };
    let columns = if ref_steps.is_empty() {
        matched.len().min(200)
    } else {
        ref_steps.len()
    };
    let col_of = |k: usize, t: u64| -> usize {
        if ref_steps.is_empty() {
            k * columns / matched.len().max(1)
        } else {
            step_of(t)
        }
    };
    let mut w = Walked {
        lateness: vec![vec![0u64; columns.max(1)]; n],
        per_column: vec![0u64; columns.max(1)],
        arrived_last: vec![0u64; n],
        imposed: vec![0u64; n],
        waited: vec![0u64; n],
        late_sum: vec![0i128; n],
        transfer: vec![0u64; n],
        step_wait: vec![vec![0u64; ref_steps.len()]; n],
        step_xfer: vec![vec![0u64; ref_steps.len()]; n],
        rows: Vec::with_capacity(matched.len()),
    };
    for (k, (key, idx)) in matched.iter().enumerate() {
        let arr: Vec<i64> = (0..n).map(|r| sums[r].collectives[idx[r]].start as i64 - offsets[r]).collect();
        let ends: Vec<i64> = (0..n).map(|r| sums[r].collectives[idx[r]].end as i64 - offsets[r]).collect();
        // Equal arrivals go to the later rank (`max_by_key` keeps the last
        // maximum), so the count is deterministic and SQL can reproduce it.
        let (last, &latest) = arr.iter().enumerate().max_by_key(|(_, a)| **a).expect("n >= 2");
        let earliest = *arr.iter().min().expect("n >= 2");
        let second = arr
            .iter()
            .enumerate()
            .filter(|(r, _)| *r != last)
            .map(|(_, a)| *a)
            .max()
            .unwrap_or(latest);
        let mut sorted = arr.clone();
        let median = median_i64(&mut sorted);
        let xfer = ends.iter().map(|e| (e - latest).max(0) as u64).min().unwrap_or(0);
        w.arrived_last[last] += 1;
        w.imposed[last] += (latest - second).max(0) as u64;
        let col = col_of(k, sums[0].collectives[idx[0]].start).min(columns.saturating_sub(1));
        w.per_column[col] += 1;
        for r in 0..n {
            w.waited[r] += (latest - arr[r]).max(0) as u64;
            w.late_sum[r] += (arr[r] - median) as i128;
            w.transfer[r] += (ends[r] - latest).max(0) as u64;
            let l = (arr[r] - earliest).max(0) as u64;
            w.lateness[r][col] += l;
            if !ref_steps.is_empty() {
                w.step_wait[r][col] += (latest - arr[r]).max(0) as u64;
                w.step_xfer[r][col] += (ends[r] - latest).max(0) as u64;
            }
        }
        let c0 = &sums[0].collectives[idx[0]];
        w.rows.push(CollectiveRow {
            comm: key.comm,
            op: key.op.clone(),
            seq: key.seq,
            arrival_skew_ns: (latest - earliest) as u64,
            last_rank: sums[last].rank,
            imposed_ns: (latest - second).max(0) as u64,
            transfer_ns: xfer,
            bytes: c0.bytes,
            bus_gbps: bus_gbps(&key.op, c0, n, xfer),
            step: col,
        });
    }
    w
}

/// Bus bandwidth of collective `c` (as the reference rank recorded it, in a job of `n`
/// ranks when it does not say) transferring for `xfer_ns`, GB/s; `None` without bytes
/// or transfer time.
fn bus_gbps(op: &str, c: &CollRec, n: usize, xfer_ns: u64) -> Option<f64> {
    let nr = if c.nranks > 0 { c.nranks as f64 } else { n as f64 };
    (c.bytes > 0 && xfer_ns > 0).then(|| {
        let factor = match op {
            "AllReduce" => 2.0 * (nr - 1.0) / nr,
            "AllGather" | "ReduceScatter" => (nr - 1.0) / nr,
            _ => 1.0,
        };
        c.bytes as f64 * factor / xfer_ns as f64
    })
}

/// One row per rank (in `sums` order) from its summary and the walk over `matched`
/// collectives; `gpu_slowed` is left for [`mark_slowed_gpus`].
fn rank_rows(sums: &[RankSummary], w: &Walked, matched: usize) -> Vec<RankRow> {
    sums.iter()
        .enumerate()
        .map(|(r, s)| RankRow {
            rank: s.rank,
            host: s.host.clone(),
            path: s.path.clone(),
            arrived_last: w.arrived_last[r],
            wait_imposed_ns: w.imposed[r],
            waited_ns: w.waited[r],
            mean_lateness_ns: (w.late_sum[r] / matched as i128) as i64,
            transfer_ns: w.transfer[r],
            compute_ns: s.total.compute_ns,
            host_idle_ns: s.total.host_idle_ns,
            step_count: s.productive.steps,
            step_time_p50_s: s.productive.step_time_p50_s,
            tokens_per_s: s.productive.tokens_per_s,
            outcome: s.productive.outcome.clone(),
            sm_clock_mean_mhz: s.hardware.as_ref().and_then(|h| h.sm_clock_mean_mhz),
            throttled_share: s
                .hardware
                .as_ref()
                .filter(|h| h.throttle_sampled_ns > 0)
                .map(|h| h.throttled_share()),
            gpu_slowed: false,
            gpu_slowed_why: String::new(),
            steps: s
                .steps
                .iter()
                .enumerate()
                .map(|(i, st)| StepRow {
                    step_ns: st.end - st.start,
                    compute_ns: st.compute_ns,
                    host_idle_ns: st.host_idle_ns,
                    latency_idle_ns: st.latency_idle_ns,
                    sync_idle_ns: st.sync_idle_ns,
                    waited_ns: w.step_wait[r].get(i).copied().unwrap_or(0),
                    transfer_ns: w.step_xfer[r].get(i).copied().unwrap_or(0),
                })
                .collect(),
        })
        .collect()
}

/// Mark the ranks whose GPU was throttled or clocked below its peers', from the ranks'
/// own counters, with a warning for each.
fn mark_slowed_gpus(ranks: &mut [RankRow], sums: &[RankSummary], opts: &Options, warnings: &mut Vec<String>) {
    let clocks: Vec<f64> = ranks.iter().filter_map(|r| r.sm_clock_mean_mhz).collect();
    for r in 0..ranks.len() {
        let mut why = Vec::new();
        if let Some(share) = ranks[r].throttled_share.filter(|&s| s >= opts.throttled_share) {
            let reasons = sums[r].hardware.as_ref().map_or(String::new(), |h| {
                let mut v: Vec<(&String, &u64)> = h.throttle_by_reason_ns.iter().filter(|(k, _)| k.as_str() != "idle").collect();
                v.sort_by_key(|(k, ns)| (std::cmp::Reverse(**ns), *k));
                let names: Vec<&str> = v.iter().map(|(k, _)| k.as_str()).collect();
                if names.is_empty() {
                    String::new()
                } else {
                    format!(": {}", names.join(", "))
                }
            });
            why.push(format!("its GPU was throttled {:.0}% of the sampled time{reasons}", share * 100.0));
        }
        if let Some(mine) = ranks[r].sm_clock_mean_mhz {
            let peers: Vec<f64> = ranks
                .iter()
                .enumerate()
                .filter(|(p, _)| *p != r)
                .filter_map(|(_, x)| x.sm_clock_mean_mhz)
                .collect();
            if clocks.len() >= 2 && !peers.is_empty() {
                let median = median_f64(peers);
                if median > 0.0 && mine < (1.0 - opts.clock_deficit) * median {
                    why.push(format!(
                        "its SM clock averaged {mine:.0} MHz against its peers' {median:.0} MHz (median), {:.0}% lower",
                        100.0 * (1.0 - mine / median)
                    ));
                }
            }
        }
        if !why.is_empty() {
            ranks[r].gpu_slowed = true;
            ranks[r].gpu_slowed_why = why.join("; ");
            warnings.push(format!("rank {}: {} (NVML counters)", ranks[r].rank, ranks[r].gpu_slowed_why));
        }
    }
}

/// The ranks that impose a disproportionate share of the waiting (see
/// [`Options::straggler_factor`], [`Options::min_imposed_share`]), each with its cause
/// ([`straggler_cause`]; [`Cause::Unknown`] without GPU times), in rank order.
fn find_stragglers(sums: &[RankSummary], ranks: &[RankRow], w: &Walked, gpu_timed: bool, opts: &Options) -> Vec<Straggler> {
    let n = sums.len();
    let total_imposed: u64 = w.imposed.iter().sum();
    let compute: Vec<u64> = sums.iter().map(|s| s.total.compute_ns).collect();
    let host: Vec<u64> = sums.iter().map(|s| s.total.host_idle_ns).collect();
    // The job's span on the reference clock, and its steps.
    let span = {
        let c = &sums[0].collectives;
        c.iter()
            .map(|x| x.end)
            .max()
            .unwrap_or(0)
            .saturating_sub(c.iter().map(|x| x.start).min().unwrap_or(0))
    };
    let n_steps = sums[0].steps.len().max(1) as f64;
    let mut stragglers = Vec::new();
    for r in 0..n {
        let score = if total_imposed > 0 {
            w.imposed[r] as f64 / total_imposed as f64
        } else {
            0.0
        };
        if total_imposed == 0 || score * (n as f64) < opts.straggler_factor || (w.imposed[r] as f64) < opts.min_imposed_share * span as f64
        {
            continue;
        }
        let peers: Vec<usize> = (0..n).filter(|&p| p != r).collect();
        let (cause, why) = if gpu_timed {
            straggler_cause(r, &peers, &compute, &host, ranks, n_steps, opts)
        } else {
            (
                Cause::Unknown,
                "only the times the ranks called NCCL are known (no GPU times): it called NCCL late; trace with CUPTI to tell \
                 GPU, host and network apart"
                    .to_string(),
            )
        };
        stragglers.push(Straggler {
            rank: sums[r].rank,
            score,
            wait_imposed_ns: w.imposed[r],
            arrived_last: w.arrived_last[r],
            cause,
            why,
            gpu_slowed: ranks[r].gpu_slowed,
            host: None,
        });
    }
    stragglers
}

/// The comparison as text: findings first, then the rank table.
pub fn render_text(c: &Comparison) -> String {
    use gputrace_format::text::escape;
    use std::fmt::Write;
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} ranks, {} collectives matched ({}{}), {} unmatched",
        c.ranks.len(),
        c.matched,
        c.matching,
        if c.matching == "exact" {
            ": communicator, operation, sequence number"
        } else {
            ": kernel order per operation"
        },
        c.unmatched
    );
    for w in &c.warnings {
        let _ = writeln!(s, "warning: {}", escape(w));
    }
    let _ = writeln!(
        s,
        "clocks aligned on collective end times: residual {:.1} µs; largest offset {:.3} ms",
        c.clock.residual_ns as f64 / 1e3,
        c.clock.offsets_ns.values().map(|v| v.unsigned_abs()).max().unwrap_or(0) as f64 / 1e6
    );
    if c.stragglers.is_empty() {
        let _ = writeln!(s, "\nNo straggler: no rank imposes a disproportionate share of the waiting.");
    }
    for st in &c.stragglers {
        let _ = writeln!(
            s,
            "\nSTRAGGLER rank {}: arrived last at {} of {} collectives and made the others wait {:.2} ms in all ({:.0}% of all waiting); cause: {} — {}.",
            st.rank,
            st.arrived_last,
            c.matched,
            ms(st.wait_imposed_ns),
            st.score * 100.0,
            st.cause,
            escape(&st.why)
        );
    }
    let _ = writeln!(
        s,
        "\n{:>6} {:>10} {:>12} {:>11} {:>12} {:>12} {:>12} {:>12} {:>6} {:>12} {:>10}  host",
        "rank",
        "last at",
        "imposed ms",
        "waited ms",
        "late µs",
        "compute ms",
        "host-idle ms",
        "offset ms",
        "steps",
        "p50 step ms",
        "tokens/s"
    );
    for r in &c.ranks {
        let _ = writeln!(
            s,
            "{:>6} {:>10} {:>12.2} {:>11.2} {:>12.1} {:>12.2} {:>12.2} {:>12.3} {:>6} {:>12} {:>10}  {}",
            r.rank,
            r.arrived_last,
            ms(r.wait_imposed_ns),
            ms(r.waited_ns),
            r.mean_lateness_ns as f64 / 1e3,
            ms(r.compute_ns),
            ms(r.host_idle_ns),
            c.clock.offsets_ns.get(&r.rank).copied().unwrap_or(0) as f64 / 1e6,
            r.step_count,
            r.step_time_p50_s.map_or("-".into(), |v| format!("{:.2}", v * 1e3)),
            r.tokens_per_s.map_or("-".into(), |v| format!("{v:.0}")),
            escape(&r.host)
        );
    }
    match c.tokens_per_s {
        Some(t) => {
            let _ = writeln!(s, "job: {t:.0} tokens/s (the ranks' sum)");
        }
        None => {
            let _ = writeln!(
                s,
                "job tokens/s: no token counts (step marks with tokens=N, or --tokens-per-step N)"
            );
        }
    }
    // Names are escaped where they are written; this catches any other text from a trace.
    gputrace_format::text::escape_output(&s, false).into_owned()
}

#[cfg(test)]
mod cause_tests {
    use super::*;

    /// A rank row with its mean lateness; the rest as a fresh row.
    fn row(rank: u32, lateness_ns: i64) -> RankRow {
        RankRow {
            rank,
            host: String::new(),
            path: String::new(),
            arrived_last: 0,
            wait_imposed_ns: 0,
            waited_ns: 0,
            mean_lateness_ns: lateness_ns,
            transfer_ns: 0,
            compute_ns: 0,
            host_idle_ns: 0,
            steps: Vec::new(),
            step_count: 0,
            step_time_p50_s: None,
            tokens_per_s: None,
            outcome: String::new(),
            sm_clock_mean_mhz: None,
            throttled_share: None,
            gpu_slowed: false,
            gpu_slowed_why: String::new(),
        }
    }

    /// Rank 0 is the straggler, 1 ms late per collective, over 10 steps.
    fn cause(compute: &[u64], host: &[u64]) -> (Cause, String) {
        let n = compute.len();
        let ranks: Vec<RankRow> = (0..n as u32).map(|r| row(r, if r == 0 { 1_000_000 } else { 0 })).collect();
        let peers: Vec<usize> = (1..n).collect();
        straggler_cause(0, &peers, compute, host, &ranks, 10.0, &Options::default())
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn gpu_when_its_compute_leads_every_peer() {
        // 10% over the peers' median 100 ms, 8% (of it) over the next: singled out.
        let (c, why) = cause(&[110 * MS, 100 * MS, 100 * MS, 102 * MS], &[0; 4]);
        assert_eq!(c, Cause::Gpu);
        assert!(
            why.contains("10.0% longer than its peers' (median), 8.0% of that median more than the next rank's (rank 3)"),
            "{why}"
        );
    }

    #[test]
    fn host_when_its_idle_leads_every_peer() {
        // 8 ms per step more host idle than the median (0) and 6 ms more than the next
        // rank's, against 1 ms of lateness: half of it twice over.
        let (c, why) = cause(&[100 * MS; 4], &[80 * MS, 0, 20 * MS, 0]);
        assert_eq!(c, Cause::Host, "{why}");
        assert!(
            why.contains("8.00 ms per step more than its peers' (median) and 6.00 ms per step more than the next rank's (rank 2)"),
            "{why}"
        );
    }

    #[test]
    fn unclear_when_another_rank_matches_the_evidence() {
        // The issue's 8-rank DLRM case: its host idle is raised over the peers' median (0),
        // but two peers' exceed it.
        let (c, why) = cause(&[100 * MS; 8], &[80 * MS, 90 * MS, 95 * MS, 0, 0, 0, 0, 0]);
        assert_eq!(c, Cause::Unclear, "{why}");
        assert!(why.starts_with("the evidence does not single it out"), "{why}");
        assert!(why.contains("-1.50 ms per step more than the next rank's (rank 2)"), "{why}");
        // Compute 10% over the median but only 1% over the next rank.
        let (c, _) = cause(&[110 * MS, 100 * MS, 109 * MS, 100 * MS], &[0; 4]);
        assert_eq!(c, Cause::Unclear);
    }

    #[test]
    fn network_when_neither_is_raised() {
        let (c, why) = cause(&[100 * MS; 4], &[0; 4]);
        assert_eq!(c, Cause::Network);
        assert!(why.starts_with("neither its GPU work nor its host explains it"), "{why}");
    }
}
