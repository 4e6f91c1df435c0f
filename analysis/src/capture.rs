//! Duty-cycled traces: which time was traced.
//!
//! A trace with capture windows (format 1.3, `gputrace run --duty`) holds
//! events only from inside them; outside, the GPU was not watched, so an
//! absence of work there says nothing. Every measure of time over a device's
//! timeline (span, idle, the overlap masks, gaps, startup and teardown, step
//! idle) counts only the parts inside the windows. A trace without windows
//! was traced the whole time and is measured as before.

use gputrace_format::TraceFile;

/// The capture windows of a duty-cycled trace: sorted, disjoint, non-empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Capture {
    windows: Vec<(u64, u64)>,
}

impl Capture {
    /// The file's windows; `None` when it was traced the whole time.
    pub(crate) fn from_file(file: &TraceFile) -> Option<Capture> {
        let w = file.capture_windows();
        (!w.is_empty()).then(|| Capture {
            windows: w.iter().map(|w| (w.start.0, w.end.0)).collect(),
        })
    }

    #[cfg(test)]
    fn new(windows: &[(u64, u64)]) -> Capture {
        Capture { windows: windows.to_vec() }
    }

    /// Number of windows.
    pub(crate) fn len(&self) -> usize {
        self.windows.len()
    }

    /// Traced time in all windows.
    pub(crate) fn traced_ns(&self) -> u64 {
        self.windows.iter().map(|(a, b)| b - a).sum()
    }

    /// First window start and last window end.
    pub(crate) fn bounds(&self) -> (u64, u64) {
        (self.windows[0].0, self.windows[self.windows.len() - 1].1)
    }

    /// Traced time within `[lo, hi)`.
    pub(crate) fn covered(&self, lo: u64, hi: u64) -> u64 {
        self.windows.iter().map(|&(a, b)| b.min(hi).saturating_sub(a.max(lo))).sum()
    }

    /// A clipper for intervals that arrive in start order.
    pub(crate) fn clip(&self) -> Clip<'_> {
        Clip {
            windows: &self.windows,
            at: 0,
        }
    }
}

/// Cuts intervals to the capture windows; intervals must arrive with
/// non-decreasing starts (windows that end before a start are passed for good).
#[derive(Clone, Debug)]
pub(crate) struct Clip<'a> {
    windows: &'a [(u64, u64)],
    at: usize,
}

impl Clip<'_> {
    /// Call `f` for each part of `[a, b)` inside a window, in time order.
    pub(crate) fn each(&mut self, a: u64, b: u64, mut f: impl FnMut(u64, u64)) {
        while self.at < self.windows.len() && self.windows[self.at].1 <= a {
            self.at += 1;
        }
        for &(ws, we) in &self.windows[self.at..] {
            if ws >= b {
                break;
            }
            let (lo, hi) = (a.max(ws), b.min(we));
            if hi > lo {
                f(lo, hi);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covered_and_clipped_parts_agree() {
        let c = Capture::new(&[(10, 20), (40, 50), (60, 100)]);
        assert_eq!(c.traced_ns(), 60);
        assert_eq!(c.bounds(), (10, 100));
        assert_eq!(c.covered(0, 1000), 60);
        assert_eq!(c.covered(15, 45), 10);
        assert_eq!(c.covered(20, 40), 0);
        let mut clip = c.clip();
        let mut parts = Vec::new();
        for (a, b) in [(0, 5), (5, 15), (15, 45), (45, 70), (90, 200)] {
            clip.each(a, b, |lo, hi| parts.push((lo, hi)));
            let sum: u64 = parts.iter().filter(|p| p.0 >= a && p.1 <= b).map(|p| p.1 - p.0).sum();
            assert_eq!(sum, c.covered(a, b), "[{a}, {b})");
        }
        assert_eq!(parts, [(10, 15), (15, 20), (40, 45), (45, 50), (60, 70), (90, 100)]);
    }
}
