//! Which GPUs' activity timelines a view of many draws (the text report's timeline
//! lines and the page's rows), and the check that a device's bins add up to its
//! breakdown. (Apart from [`crate::activity`], which the report holds, so that the two
//! do not import each other.)

use crate::report::{DeviceReport, Report};

/// Whether each class's bins sum to the device's total of that class (the invariant).
pub fn sums_match(d: &DeviceReport) -> bool {
    let Some(a) = &d.activity else { return true };
    let c = &d.idle_causes;
    let want = [
        d.time.compute_ns,
        d.time.exposed_communication_ns,
        d.time.exposed_transfer_ns,
        c.host_bound_ns,
        c.launch_latency_ns,
        c.synchronization_ns,
        c.unattributed_ns,
    ];
    crate::activity::Class::ALL.map(|k| a.class(k).iter().sum::<u64>()) == want
}

/// Which devices a view of many shows, and what it says about the choice.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// (rank index, device index) into [`Report::ranks`], in rank order.
    pub rows: Vec<(usize, usize)>,
    /// Devices with a timeline in all.
    pub total: usize,
    /// How the rows were chosen when not all are shown.
    pub note: Option<String>,
}

/// Compute share of a device's span (0 without span).
fn compute_share(d: &DeviceReport) -> f64 {
    if d.time.span_ns == 0 {
        0.0
    } else {
        d.time.compute_ns as f64 / d.time.span_ns as f64
    }
}

/// The devices to draw when at most `max` rows fit: all of them up to `max`; beyond, the
/// quarter with the lowest compute share (the slowest: most time not computing), the
/// quarter with the highest (the fastest), the ranks in `also` (a straggler), and an even
/// sample of the rest by rank.
pub fn select(r: &Report, max: usize, also: &[u32]) -> Selection {
    let mut all: Vec<(usize, usize)> = Vec::new();
    for (ri, rk) in r.ranks.iter().enumerate() {
        for (di, d) in rk.devices.iter().enumerate() {
            if d.activity.as_ref().is_some_and(|a| !a.is_empty()) {
                all.push((ri, di));
            }
        }
    }
    let total = all.len();
    if total <= max {
        return Selection {
            rows: all,
            total,
            note: None,
        };
    }
    let dev = |&(ri, di): &(usize, usize)| &r.ranks[ri].devices[di];
    let mut by_share = all.clone();
    by_share.sort_by(|a, b| compute_share(dev(a)).total_cmp(&compute_share(dev(b))).then(a.cmp(b)));
    let quarter = (max / 4).max(1);
    let mut picked: Vec<(usize, usize)> = Vec::new();
    picked.extend(&by_share[..quarter]);
    picked.extend(&by_share[total - quarter..]);
    for &(ri, di) in &all {
        if also.contains(&r.ranks[ri].rank) && picked.len() < max && !picked.contains(&(ri, di)) {
            picked.push((ri, di));
        }
    }
    let straggler = picked.len() - 2 * quarter;
    let left = max.saturating_sub(picked.len());
    let rest: Vec<(usize, usize)> = all.iter().copied().filter(|x| !picked.contains(x)).collect();
    let mut sampled = 0;
    for k in 0..left.min(rest.len()) {
        // Evenly spaced over the rest, by rank order.
        picked.push(rest[k * rest.len() / left.min(rest.len())]);
        sampled += 1;
    }
    picked.sort_unstable();
    picked.dedup();
    Selection {
        note: Some(format!(
            "{} of {total} GPUs: the {quarter} with the lowest compute share (the slowest), the {quarter} with the highest (the fastest){}, and {sampled} evenly spaced by rank",
            picked.len(),
            if straggler > 0 { ", the straggler" } else { "" },
        )),
        rows: picked,
        total,
    }
}

/// Devices the text report draws a line for.
pub const TEXT_ROWS: usize = 32;
/// Characters per line of the text report's timeline.
pub const TEXT_COLUMNS: usize = 64;
