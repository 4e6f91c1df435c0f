//! The pre-allocated buffer pool between CUPTI's callbacks and the writer
//! thread.
//!
//! Invariants:
//! - Every pool buffer is in exactly one place: the free queue, CUPTI's
//!   hands, the completed queue, or the writer thread's hands. Both queues
//!   have room for every buffer, so a push never fails.
//! - The callbacks (`request`, `complete`) only pop/push lock-free queues
//!   and bump atomics: no allocation, no lock, no system call.
//! - When the free queue is empty, CUPTI gets the discard buffer instead
//!   (never NULL, which crashes CUPTI before API version 27) and the loss
//!   is counted.

use crossbeam::queue::ArrayQueue;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Buffers are 8-byte aligned, as CUPTI requires.
const ALIGN: usize = std::mem::align_of::<u64>();

/// The pool. Its buffers are never freed, not even when the pool is
/// dropped: CUPTI may still hold one (the discard buffer included) and write
/// into it after the agent stops, so the pool is made once and lives for the
/// process (a leak checker reports its buffers as leaked, by design).
pub struct Pool {
    buf_size: usize,
    free: ArrayQueue<usize>,
    done: ArrayQueue<(usize, usize)>,
    discard: usize,
    /// Buffers handed out as the discard buffer.
    pub discarded_buffers: AtomicU64,
    /// Valid bytes CUPTI wrote into the discard buffer (records lost).
    pub discarded_bytes: AtomicU64,
    /// Completed buffers that were not ours (should never happen).
    pub foreign_buffers: AtomicU64,
}

impl Pool {
    /// Allocate `count` buffers of `buf_size` bytes (plus the discard
    /// buffer). Returns `None` if memory is not available.
    pub fn new(count: usize, buf_size: usize) -> Option<Pool> {
        let count = count.max(2);
        let buf_size = buf_size.max(64 * 1024).next_multiple_of(ALIGN);
        // Each buffer is the spare capacity of an empty `Vec<u64>` (8-byte
        // aligned): reserved, not written, so the pages are only touched
        // when CUPTI fills them. Nothing is leaked until every allocation
        // succeeded; on failure the vectors free what was taken.
        let mut bufs: Vec<Vec<u64>> = Vec::new();
        bufs.try_reserve_exact(count + 1).ok()?;
        for _ in 0..=count {
            let mut b = Vec::new();
            b.try_reserve_exact(buf_size / ALIGN).ok()?;
            bufs.push(b);
        }
        let mut addrs = bufs.into_iter().map(|b| std::mem::ManuallyDrop::new(b).as_mut_ptr() as usize);
        let discard = addrs.next()?;
        let free = ArrayQueue::new(count);
        for p in addrs {
            // Cannot fail: the queue has room for `count`.
            let _ = free.push(p);
        }
        Some(Pool {
            buf_size,
            free,
            done: ArrayQueue::new(count),
            discard,
            discarded_buffers: AtomicU64::new(0),
            discarded_bytes: AtomicU64::new(0),
            foreign_buffers: AtomicU64::new(0),
        })
    }

    /// Size of every buffer.
    pub fn buf_size(&self) -> usize {
        self.buf_size
    }

    /// Callback path: a buffer for CUPTI to fill.
    #[inline]
    pub fn request(&self) -> *mut u8 {
        match self.free.pop() {
            Some(p) => p as *mut u8,
            None => {
                self.discarded_buffers.fetch_add(1, Relaxed);
                self.discard as *mut u8
            }
        }
    }

    /// Callback path: CUPTI returns a buffer with `valid` bytes of records.
    #[inline]
    pub fn complete(&self, buf: *mut u8, valid: usize) {
        let p = buf as usize;
        if p == self.discard {
            self.discarded_bytes.fetch_add(valid as u64, Relaxed);
        } else if p == 0 {
            self.foreign_buffers.fetch_add(1, Relaxed);
        } else if self.done.push((p, valid)).is_err() {
            // Cannot happen (see the invariants); count rather than leak silently.
            self.foreign_buffers.fetch_add(1, Relaxed);
        }
    }

    /// Writer side: the next completed buffer.
    pub fn take_completed(&self) -> Option<(*mut u8, usize)> {
        self.done.pop().map(|(p, v)| (p as *mut u8, v))
    }

    /// Writer side: give a drained buffer back.
    pub fn recycle(&self, buf: *mut u8) {
        let _ = self.free.push(buf as usize);
    }
}

/// Writer side: completed buffers taken from the pool before the trace file
/// was open (the writer scans them for the devices first). They come back
/// in completion order, oldest first, and before any buffer completed
/// since, so each track's events reach the trace writer in time order (a
/// track that starts out of order costs its chunk buffer a copy per event
/// for the rest of the run). Once empty, only the pool's buffers follow.
#[derive(Default)]
pub struct Backlog(VecDeque<(*mut u8, usize)>);

impl Backlog {
    /// Keep a buffer taken from the pool (in the order taken).
    pub fn hold(&mut self, buf: *mut u8, valid: usize) {
        self.0.push_back((buf, valid));
    }

    /// Buffers held.
    pub fn count(&self) -> usize {
        self.0.len()
    }

    /// The oldest held buffer, else the pool's next completed one.
    pub fn next(&mut self, pool: &Pool) -> Option<(*mut u8, usize)> {
        self.0.pop_front().or_else(|| pool.take_completed())
    }

    /// Every held buffer, to give back to the pool.
    pub fn drain(&mut self) -> impl Iterator<Item = *mut u8> + '_ {
        self.0.drain(..).map(|(buf, _)| buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_cycle_and_exhaustion_is_counted() {
        let pool = Pool::new(2, 64 * 1024).unwrap();
        let a = pool.request();
        let b = pool.request();
        assert_ne!(a, b);
        let c = pool.request(); // exhausted: the discard buffer
        assert!(!c.is_null());
        assert_eq!(pool.discarded_buffers.load(Relaxed), 1);
        pool.complete(c, 1000);
        assert_eq!(pool.discarded_bytes.load(Relaxed), 1000);
        pool.complete(a, 10);
        assert_eq!(pool.take_completed(), Some((a, 10)));
        assert_eq!(pool.take_completed(), None);
        pool.recycle(a);
        assert_eq!(pool.request(), a);
        assert_eq!(a as usize % 8, 0);
    }

    #[test]
    fn held_buffers_come_back_oldest_first_then_the_pools() {
        let pool = Pool::new(4, 64 * 1024).unwrap();
        let (a, b, c) = (pool.request(), pool.request(), pool.request());
        pool.complete(a, 1);
        pool.complete(b, 2);
        let mut held = Backlog::default();
        while let Some((buf, valid)) = pool.take_completed() {
            held.hold(buf, valid);
        }
        assert_eq!(held.count(), 2);
        // Completed after the file opened.
        pool.complete(c, 3);
        let order: Vec<_> = std::iter::from_fn(|| held.next(&pool)).collect();
        assert_eq!(order, vec![(a, 1), (b, 2), (c, 3)]);
        assert_eq!(held.count(), 0);
        // Held no more: later buffers come straight from the pool.
        pool.complete(a, 4);
        assert_eq!(held.next(&pool), Some((a, 4)));
        held.hold(b, 5);
        assert_eq!(held.drain().collect::<Vec<_>>(), vec![b]);
        assert_eq!(held.next(&pool), None);
    }

    #[test]
    fn every_buffer_is_its_own_buf_size_bytes() {
        let pool = Pool::new(3, 64 * 1024 + 1).unwrap();
        assert_eq!(pool.buf_size(), 64 * 1024 + ALIGN);
        let bufs: Vec<*mut u8> = (0..4).map(|_| pool.request()).collect(); // the last: the discard buffer
        let mut ranges: Vec<(usize, usize)> = bufs.iter().map(|&b| (b as usize, b as usize + pool.buf_size())).collect();
        ranges.sort();
        assert!(ranges.windows(2).all(|w| w[0].1 <= w[1].0), "buffers overlap: {ranges:?}");
        for (i, &b) in bufs.iter().enumerate() {
            // Safety: each buffer is `buf_size` bytes the pool gave out.
            unsafe { std::ptr::write_bytes(b, i as u8 + 1, pool.buf_size()) };
        }
        for (i, &b) in bufs.iter().enumerate() {
            // Safety: as above, written just now.
            let bytes = unsafe { std::slice::from_raw_parts(b, pool.buf_size()) };
            assert!(bytes.iter().all(|&x| x == i as u8 + 1), "buffer {i} was overwritten");
        }
    }
}
