//! K-way merge of a file's event chunks into one start-ordered stream.
//!
//! Each events chunk is sorted by start (a format invariant). The merge keeps
//! decoded only the chunks whose time range has begun and not yet been
//! consumed, so memory is bounded by the chunks that overlap in time (about
//! one per track and kind), never by the number of events. Events are
//! handed out in runs: after taking the earliest chunk, it keeps reading
//! from it while its events start no later than any other chunk's next
//! event, which avoids a heap operation per event when streams do not
//! interleave finely.

use gputrace_format::{Event, EventChunk, EventKind, TraceFile};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Call `f` for every record that `convert` makes of the events of the
/// chunks `select` accepts, in start order (ties in any order). `convert`
/// runs once per event as chunks are decoded (chunk order, not time order),
/// so order-independent work belongs there; returning `None` drops the
/// event. Records must keep their event's start (`start_of`), so that each
/// decoded chunk stays sorted. Stops at the first decoding error.
pub fn for_each_merged<T>(
    file: &TraceFile,
    select: impl Fn(&EventChunk) -> bool,
    mut convert: impl FnMut(&Event) -> Option<T>,
    start_of: impl Fn(&T) -> u64,
    mut f: impl FnMut(&T),
) -> gputrace_format::Result<()> {
    let chunks = file.chunks();
    let mut pending: Vec<usize> = (0..chunks.len()).filter(|&i| select(&chunks[i])).collect();
    // Latest first, so that pop() yields the chunk that begins earliest.
    pending.sort_by_key(|&i| Reverse((chunks[i].t_min, i)));
    let mut dec = file.decoder();
    // Decoded chunks being consumed: (records, next position). A slot is
    // reused once its chunk is exhausted; `free` lists those slots.
    let mut active: Vec<(Vec<T>, usize)> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    // Next unread record start of each live slot.
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    loop {
        // A pending chunk must be decoded before any record that starts after its first event.
        while let Some(&idx) = pending.last() {
            let t = chunks[idx].t_min.0;
            if matches!(heap.peek(), Some(Reverse((next, _))) if *next < t) {
                break;
            }
            pending.pop();
            let slot = free.pop().unwrap_or_else(|| {
                active.push((Vec::new(), 0));
                active.len() - 1
            });
            let (buf, pos) = &mut active[slot];
            buf.clear();
            *pos = 0;
            dec.for_each(idx, |e| {
                if let Some(r) = convert(e) {
                    buf.push(r);
                }
            })?;
            match buf.first() {
                Some(r) => heap.push(Reverse((start_of(r), slot))),
                None => free.push(slot),
            }
        }
        let Some(Reverse((_, slot))) = heap.pop() else { break };
        // Everything starting at or before `bound` may be taken from this slot
        // without consulting the heap or the pending chunks again.
        let other = heap.peek().map_or(u64::MAX, |Reverse((t, _))| *t);
        let bound = other.min(pending.last().map_or(u64::MAX, |&i| chunks[i].t_min.0));
        let (buf, pos) = &mut active[slot];
        loop {
            f(&buf[*pos]);
            *pos += 1;
            match buf.get(*pos) {
                None => {
                    free.push(slot);
                    break;
                }
                Some(r) if start_of(r) > bound => {
                    heap.push(Reverse((start_of(r), slot)));
                    break;
                }
                Some(_) => {}
            }
        }
    }
    Ok(())
}

/// Call `f` for every event of the given kinds, chunk by chunk in file
/// order (not time-sorted), without materializing the chunks.
pub fn for_each_of_kinds(file: &TraceFile, kinds: &[EventKind], mut f: impl FnMut(&Event)) -> gputrace_format::Result<()> {
    let mut dec = file.decoder();
    for (i, c) in file.chunks().iter().enumerate() {
        if kinds.contains(&c.kind) {
            dec.for_each(i, &mut f)?;
        }
    }
    Ok(())
}
