//! The interval sweep: unions of compute, communication and transfer
//! intervals and their exclusive attribution, in one pass over intervals
//! sorted by start, in constant memory.
//!
//! Invariant (holds between calls to [`Sweep::push`]): every interval pushed
//! so far started at or before `cursor`, so the part of category `c`'s union
//! that lies at or after `cursor` is exactly `[cursor, ends[c])` (empty when
//! `ends[c] <= cursor`). Everything before `cursor` has been accounted into
//! `masks`. Advancing the cursor to the next start therefore splits the
//! stretch between them into at most four pieces at the `ends[c]`
//! breakpoints, each with a known set of active categories.

use gputrace_classify::Category;

/// Overlap mask bit of compute.
pub const COMPUTE: u8 = Category::Compute.bit();
/// Overlap mask bit of communication.
pub const COMM: u8 = Category::Communication.bit();
/// Overlap mask bit of transfer.
pub const TRANSFER: u8 = Category::Transfer.bit();

/// Streaming union and overlap accounting over intervals pushed in start order.
#[derive(Clone, Debug, Default)]
pub struct Sweep {
    /// Time up to which everything is accounted.
    cursor: u64,
    /// Per category (index = bit position), end of the union run that covers `cursor`.
    ends: [u64; 3],
    /// Start of the first non-empty interval, once one was pushed.
    first: Option<u64>,
    /// Time in each overlap mask (index = OR of category bits); index 0 is idle.
    masks: [u64; 8],
    /// Latest instant pushed with [`Sweep::push_instant`] (0 if none).
    instant_end: u64,
}

impl Sweep {
    /// An empty sweep.
    pub fn new() -> Sweep {
        Sweep::default()
    }

    /// Start of the first interval, if any was pushed.
    pub fn first(&self) -> Option<u64> {
        self.first
    }

    /// End of the union of everything pushed so far (the busy frontier), instants included.
    pub fn busy_until(&self) -> u64 {
        self.ends.iter().copied().max().unwrap_or(0).max(self.instant_end)
    }

    /// The idle gap that an interval starting at `start` would close:
    /// `Some((gap_start, start))` when the device was idle just before it.
    pub fn gap_before(&self, start: u64) -> Option<(u64, u64)> {
        let busy = self.busy_until();
        (self.first.is_some() && start > busy).then_some((busy, start))
    }

    /// Add `[start, end)` of `cat`. Starts must not decrease between calls
    /// (a decreasing start is treated as equal to the previous one, which
    /// keeps the totals consistent). Empty and inverted intervals are
    /// ignored: they cover no time. `piece(start, end, mask)` is called for
    /// every accounted stretch, in time order; mask 0 is an idle gap.
    #[inline]
    pub fn push(&mut self, cat: Category, start: u64, end: u64, piece: &mut impl FnMut(u64, u64, u8)) {
        if end <= start {
            return;
        }
        match self.first {
            None => {
                self.first = Some(start);
                self.cursor = start;
            }
            Some(_) => self.advance(start, piece),
        }
        let i = cat.bit().trailing_zeros() as usize;
        self.ends[i] = self.ends[i].max(end);
    }

    /// Add zero-length work at `t` (same ordering rule as [`Sweep::push`]): it covers no
    /// time but bounds the span, as zero-length GPU events do in HTA's temporal breakdown
    /// (the span runs from the first event's start to the last one's end). Idle time on
    /// either side of it is accounted as two pieces (two gaps).
    pub fn push_instant(&mut self, t: u64, piece: &mut impl FnMut(u64, u64, u8)) {
        match self.first {
            None => {
                self.first = Some(t);
                self.cursor = t;
            }
            Some(_) => self.advance(t, piece),
        }
        self.instant_end = self.instant_end.max(t);
    }

    /// Account everything up to `to` (no-op if `to <= cursor`).
    #[inline]
    fn advance(&mut self, to: u64, piece: &mut impl FnMut(u64, u64, u8)) {
        let mut t = self.cursor;
        let [e0, e1, e2] = self.ends;
        while t < to {
            // Branch-free: which categories cover t, and where the first of them ends.
            let mask = u8::from(e0 > t) | u8::from(e1 > t) << 1 | u8::from(e2 > t) << 2;
            let end_if_active = |e: u64| if e > t { e } else { u64::MAX };
            let next = to.min(end_if_active(e0)).min(end_if_active(e1)).min(end_if_active(e2));
            piece(t, next, mask);
            self.masks[mask as usize] += next - t;
            t = next;
        }
        self.cursor = self.cursor.max(to);
    }

    /// Account the rest and return the totals. `last_end` of the result is
    /// the end of the last interval.
    pub fn finish(mut self, piece: &mut impl FnMut(u64, u64, u8)) -> SweepTotals {
        let end = self.busy_until();
        if self.first.is_some() {
            self.advance(end, piece);
        }
        SweepTotals {
            first_start: self.first,
            last_end: self.first.map(|_| end),
            masks: self.masks,
        }
    }
}

/// What a finished [`Sweep`] measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SweepTotals {
    /// Start of the first interval (None: nothing was pushed).
    pub first_start: Option<u64>,
    /// End of the last interval.
    pub last_end: Option<u64>,
    /// Time per overlap mask; they sum to `last_end - first_start`.
    pub masks: [u64; 8],
}

impl SweepTotals {
    /// Sum of the masks selected by `pred`.
    pub fn sum(&self, pred: impl Fn(u8) -> bool) -> u64 {
        (0u8..8).filter(|&m| pred(m)).map(|m| self.masks[m as usize]).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Category::*;

    fn run(intervals: &[(Category, u64, u64)]) -> (SweepTotals, Vec<(u64, u64, u8)>) {
        let mut pieces = Vec::new();
        let mut s = Sweep::new();
        let mut sorted = intervals.to_vec();
        sorted.sort_by_key(|x| x.1);
        for (c, a, b) in sorted {
            s.push(c, a, b, &mut |x, y, m| pieces.push((x, y, m)));
        }
        let t = s.finish(&mut |x, y, m| pieces.push((x, y, m)));
        (t, pieces)
    }

    #[test]
    fn nested_and_overlapping() {
        // compute [0,100) with comm [10,30) nested and [90,150) sticking out;
        // transfer [140,160) partly under comm; gap [160,200); compute [200,210).
        let (t, pieces) = run(&[
            (Compute, 0, 100),
            (Communication, 10, 30),
            (Communication, 90, 150),
            (Transfer, 140, 160),
            (Compute, 200, 210),
        ]);
        assert_eq!(t.first_start, Some(0));
        assert_eq!(t.last_end, Some(210));
        assert_eq!(t.masks[COMPUTE as usize], 10 + 60 + 10); // [0,10) [30,90) [200,210)
        assert_eq!(t.masks[(COMPUTE | COMM) as usize], 20 + 10); // [10,30) [90,100)
        assert_eq!(t.masks[COMM as usize], 40); // [100,140)
        assert_eq!(t.masks[(COMM | TRANSFER) as usize], 10); // [140,150)
        assert_eq!(t.masks[TRANSFER as usize], 10); // [150,160)
        assert_eq!(t.masks[0], 40); // [160,200)
        assert_eq!(t.masks.iter().sum::<u64>(), 210);
        // Pieces tile the span in order with no holes.
        let mut at = 0;
        for (a, b, _) in &pieces {
            assert_eq!(*a, at);
            at = *b;
        }
        assert_eq!(at, 210);
    }

    #[test]
    fn instants_bound_the_span_without_covering_time() {
        let mut pieces = Vec::new();
        let mut s = Sweep::new();
        let mut p = |a, b, m| pieces.push((a, b, m));
        s.push_instant(5, &mut p);
        assert_eq!(s.gap_before(10), Some((5, 10)), "the instant opened the span");
        s.push(Compute, 10, 20, &mut p);
        s.push_instant(15, &mut p);
        assert_eq!(s.busy_until(), 20, "an instant under work changes nothing");
        s.push_instant(30, &mut p);
        assert_eq!(s.gap_before(40), Some((30, 40)), "an instant in a gap splits it");
        s.push(Transfer, 40, 45, &mut p);
        s.push_instant(50, &mut p);
        let t = s.finish(&mut p);
        assert_eq!((t.first_start, t.last_end), (Some(5), Some(50)));
        assert_eq!(t.masks[0], 5 + 20 + 5, "idle [5,10) [20,40) [45,50)");
        assert_eq!(t.masks.iter().sum::<u64>(), 45);
        assert_eq!(pieces.iter().filter(|x| x.2 == 0).count(), 4, "[5,10) [20,30) [30,40) [45,50)");
    }

    #[test]
    fn empty_and_inverted_intervals_cover_nothing() {
        let (t, pieces) = run(&[(Compute, 5, 5), (Transfer, 9, 3)]);
        assert_eq!(t, SweepTotals::default());
        assert!(pieces.is_empty());
        let mut s = Sweep::new();
        s.push(Compute, 10, 20, &mut |_, _, _| {});
        assert_eq!(s.gap_before(20), None);
        assert_eq!(s.gap_before(25), Some((20, 25)));
    }
}
