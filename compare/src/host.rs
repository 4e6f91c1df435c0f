//! What a `host`-caused straggler's host was doing while it was late.
//!
//! A rank that arrives last at a collective imposes a wait on the others:
//! its arrival minus the second-latest one. On its own clock that wait is
//! the window `[its start - imposed, its start]` before the collective,
//! during which its peers were already waiting. Over those windows (of the
//! matched collectives the comparison kept, the worst first) the rank's
//! host samples (`gputrace run`'s, or the stacks of a Kineto trace recorded
//! with `with_stack=True`) give the host view of `gputrace report`: the
//! cause, the main thread's state and CPU, and the code site.

use crate::{CollKey, CompareError, Comparison, RankSummary};
use gputrace_format::TraceFile;
use std::collections::HashMap;

/// Each rank's collective starts on its own clock, by identity: taken
/// from the summaries before they go into the comparison.
pub(crate) struct Starts<'t> {
    by_rank: HashMap<u32, (HashMap<CollKey, u64>, &'t TraceFile)>,
}

impl<'t> Starts<'t> {
    /// `sums[i]` was made from `traces[i]`.
    pub(crate) fn of(sums: &[RankSummary], traces: &[&'t TraceFile]) -> Starts<'t> {
        let by_rank = sums
            .iter()
            .zip(traces)
            .map(|(s, &t)| {
                let starts = s.collectives.iter().map(|c| (c.key.clone(), c.start)).collect();
                (s.rank, (starts, t))
            })
            .collect();
        Starts { by_rank }
    }
}

/// Give each `host`-caused straggler of `c` the host view of its lateness,
/// and say it in its `why` (which the text and the findings print).
pub(crate) fn explain(c: &mut Comparison, starts: &Starts<'_>) -> Result<(), CompareError> {
    for st in c.stragglers.iter_mut().filter(|s| s.cause == crate::Cause::Host) {
        let Some((own, trace)) = starts.by_rank.get(&st.rank) else {
            continue;
        };
        let windows: Vec<(u64, u64)> = c
            .collectives
            .iter()
            .filter(|row| row.last_rank == st.rank && row.imposed_ns > 0)
            .filter_map(|row| {
                let key = CollKey {
                    comm: row.comm,
                    op: row.op.clone(),
                    seq: row.seq,
                };
                let &start = own.get(&key)?;
                Some((start.saturating_sub(row.imposed_ns), start))
            })
            .collect();
        if windows.is_empty() {
            continue;
        }
        let Some(view) = gputrace_analysis::host::view_over(trace, &windows)? else {
            continue;
        };
        st.why.push_str(&format!(
            "; while it was late ({} over {} collectives) its host was {}",
            gputrace_format::Nanos(view.window_ns),
            windows.len(),
            gputrace_analysis::host::view_line(&view)
        ));
        st.host = Some(view);
    }
    Ok(())
}
