//! K-way merge of a file's event chunks into one start-ordered stream.
//!
//! Each events chunk is sorted by start (a format invariant). The merge reads
//! the chunks whose time range has begun and not yet been consumed through
//! cursors that hold only their decompressed bodies, so memory is bounded by
//! the chunks that overlap in time (about one per track and kind), never by
//! the number of events. Events are handed out in runs: after taking the
//! earliest chunk, it keeps reading from it while its events start no later
//! than any other chunk's next event, which avoids a heap operation per
//! event when streams do not interleave finely.
//!
//! This is [`TraceFile::merge`] without its tie rule (longer event first,
//! which the exporters need): comparing starts only, in one loop, the report
//! benchmark measured 21.6 M events/s here against 19.1 through
//! `TraceFile::merge` (`cargo bench -p gputrace-analysis --bench report`).

use gputrace_format::{ChunkCursor, Event, EventChunk, EventKind, Span, SpanCursor, TraceFile, SPAN_BLOCK};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Call `f` for every record that `convert` makes of the events of the
/// chunks `select` accepts, in the events' start order (ties in any order);
/// returning `None` drops the event. Records reach `f` in the order of their
/// events' starts, so a record that changes its start must keep that order
/// (a monotonic rounding does). Stops at the first decoding error.
pub fn for_each_merged<T>(
    file: &TraceFile,
    select: impl Fn(&EventChunk) -> bool,
    mut convert: impl FnMut(&Event) -> Option<T>,
    mut f: impl FnMut(&T),
) -> gputrace_format::Result<()> {
    let chunks = file.chunks();
    let mut pending: Vec<usize> = (0..chunks.len()).filter(|&i| select(&chunks[i])).collect();
    // Latest first, so that pop() yields the chunk that begins earliest.
    pending.sort_by_key(|&i| Reverse((chunks[i].t_min, i)));
    let mut dec = file.decoder();
    // Cursors of the chunks being read; a slot is reused once its chunk is
    // done (`free` lists those slots).
    let mut active: Vec<Option<ChunkCursor>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    // Next event start of each live slot.
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    loop {
        // A pending chunk must be opened before any event that starts after its first.
        while let Some(&idx) = pending.last() {
            let t = chunks[idx].t_min.0;
            if matches!(heap.peek(), Some(Reverse((next, _))) if *next < t) {
                break;
            }
            pending.pop();
            let cursor = dec.cursor(idx)?;
            let start = cursor.event().start().0;
            let slot = match free.pop() {
                Some(slot) => {
                    active[slot] = Some(cursor);
                    slot
                }
                None => {
                    active.push(Some(cursor));
                    active.len() - 1
                }
            };
            heap.push(Reverse((start, slot)));
        }
        let Some(Reverse((_, slot))) = heap.pop() else { break };
        // Everything starting at or before `bound` may be taken from this slot
        // without consulting the heap or the pending chunks again.
        let other = heap.peek().map_or(u64::MAX, |Reverse((t, _))| *t);
        let bound = other.min(pending.last().map_or(u64::MAX, |&i| chunks[i].t_min.0));
        let Some(cursor) = active[slot].as_mut() else { continue };
        loop {
            if let Some(r) = convert(cursor.event()) {
                f(&r);
            }
            if !cursor.advance()? {
                if let Some(done) = active[slot].take() {
                    dec.recycle(done);
                }
                free.push(slot);
                break;
            }
            let next = cursor.event().start().0;
            if next > bound {
                heap.push(Reverse((next, slot)));
                break;
            }
        }
    }
    Ok(())
}

/// One chunk being read by [`for_each_merged_spans`]: its cursor, the
/// block of spans decoded last and the next one's place in it (always
/// valid while the slot is live), and what `prepare` made of its dictionary.
struct SpanSlot<P> {
    cursor: SpanCursor,
    block: Vec<Span>,
    at: usize,
    prepared: P,
}

/// Call `f(span, prepared, templates)` for every span of the chunks
/// `select` accepts (kernel, copy, memset, synchronization, API and marker
/// chunks), in start order (ties in any order), where `templates` is the
/// span's chunk's dictionary (`templates[span.attr]` is its entry) and
/// `prepared` what `prepare` made of that dictionary when the chunk was
/// opened (once per chunk, so per-entry work such as classifying a kernel
/// name is not repeated per event). The same merge as [`for_each_merged`],
/// read a block of spans at a time instead of an event at a time. Stops at
/// the first decoding error.
pub fn for_each_merged_spans<P>(
    file: &TraceFile,
    select: impl Fn(&EventChunk) -> bool,
    mut prepare: impl FnMut(&EventChunk, &[Event]) -> P,
    mut f: impl FnMut(&Span, &P, &[Event]),
) -> gputrace_format::Result<()> {
    let chunks = file.chunks();
    let mut pending: Vec<usize> = (0..chunks.len()).filter(|&i| select(&chunks[i])).collect();
    // Latest first, so that pop() yields the chunk that begins earliest.
    pending.sort_by_key(|&i| Reverse((chunks[i].t_min, i)));
    let mut dec = file.decoder();
    let mut active: Vec<Option<SpanSlot<P>>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    // Blocks of finished slots, for the next ones.
    let mut spare_blocks: Vec<Vec<Span>> = Vec::new();
    // Next span start of each live slot.
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::new();
    loop {
        // A pending chunk must be opened before any span that starts after its first.
        while let Some(&idx) = pending.last() {
            let t = chunks[idx].t_min.0;
            if matches!(heap.peek(), Some(Reverse((next, _))) if *next < t) {
                break;
            }
            pending.pop();
            let mut cursor = dec.spans(idx)?;
            let mut block = spare_blocks.pop().unwrap_or_else(|| Vec::with_capacity(SPAN_BLOCK));
            cursor.fill(&mut block)?;
            let Some(first) = block.first() else {
                dec.recycle_spans(cursor);
                spare_blocks.push(block);
                continue;
            };
            let start = first.start;
            let prepared = prepare(&chunks[idx], cursor.templates());
            let live = SpanSlot {
                cursor,
                block,
                at: 0,
                prepared,
            };
            let slot = match free.pop() {
                Some(slot) => {
                    active[slot] = Some(live);
                    slot
                }
                None => {
                    active.push(Some(live));
                    active.len() - 1
                }
            };
            heap.push(Reverse((start, slot)));
        }
        let Some(Reverse((_, slot))) = heap.pop() else { break };
        // Everything starting at or before `bound` may be taken from this slot
        // without consulting the heap or the pending chunks again.
        let other = heap.peek().map_or(u64::MAX, |Reverse((t, _))| *t);
        let bound = other.min(pending.last().map_or(u64::MAX, |&i| chunks[i].t_min.0));
        let Some(s) = active[slot].as_mut() else { continue };
        'run: loop {
            // Invariant: `s.at < s.block.len()`.
            while s.at < s.block.len() {
                let sp = &s.block[s.at];
                if sp.start > bound {
                    heap.push(Reverse((sp.start, slot)));
                    break 'run;
                }
                f(sp, &s.prepared, s.cursor.templates());
                s.at += 1;
            }
            s.cursor.fill(&mut s.block)?;
            s.at = 0;
            if s.block.is_empty() {
                if let Some(done) = active[slot].take() {
                    dec.recycle_spans(done.cursor);
                    spare_blocks.push(done.block);
                }
                free.push(slot);
                break;
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
