//! The CUPTI activity source: the buffers CUPTI completed into the pool,
//! decoded into the trace.

use super::source::{Pass, Source, Writer};
use super::{CuptiSide, Session};
use crate::cupti::Cupti;
use crate::decode::Decoder;
use crate::pool::Backlog;
use gputrace_format::*;

/// The writer thread's side of CUPTI's activity buffers.
pub(super) struct ActivitySource {
    s: &'static Session,
    c: &'static CuptiSide,
    /// Buffers completed before the file was open, decoded first, oldest
    /// first.
    held: Backlog,
}

impl ActivitySource {
    pub fn new(s: &'static Session, c: &'static CuptiSide, held: Backlog) -> ActivitySource {
        ActivitySource { s, c, held }
    }
}

impl Source for ActivitySource {
    /// Decode every completed buffer (the held ones first) and give it back
    /// to the pool. After a write error the rest are given back unread.
    fn pump(&mut self, w: &mut Writer, pass: &mut Pass) -> Result<(), FormatError> {
        let mut r = Ok(());
        while let Some((buf, valid)) = self.held.next(&self.s.pool) {
            pass.activity |= valid > 0;
            if r.is_ok() {
                r = walk(&self.c.api, &mut pass.dec, buf, valid, w, &mut pass.undecodable);
            }
            self.s.pool.recycle(buf);
        }
        r
    }

    /// What the profiling cost: CUPTI's records by where they were spent.
    fn finish(&mut self, _w: &mut Writer, pass: &mut Pass, trailer: &mut Trailer) -> Result<(), FormatError> {
        let o = &pass.dec.overhead;
        trailer.extra.insert("cupti.overhead_cpu_ns".into(), o.cpu_ns.to_string());
        trailer.extra.insert("cupti.overhead_gpu_ns".into(), o.gpu_ns.to_string());
        Ok(())
    }

    fn abandon(&mut self) {
        for buf in self.held.drain() {
            self.s.pool.recycle(buf);
        }
    }
}

/// Decode every record of one completed buffer and push it to `w`.
pub(super) fn walk<W: std::io::Write>(
    cupti: &Cupti,
    dec: &mut Decoder,
    buf: *mut u8,
    valid: usize,
    w: &mut TraceWriter<W>,
    undecodable: &mut u64,
) -> Result<(), FormatError> {
    let mut cursor = std::ptr::null_mut();
    dec.new_buffer();
    loop {
        // Safety: `buf` is a buffer CUPTI completed with `valid` bytes, and
        // `cursor` starts null and is only advanced by CUPTI.
        match unsafe { cupti.next_record(buf, valid, &mut cursor) } {
            Ok(true) => {
                // Safety: CUPTI returned a complete record.
                unsafe { dec.decode(cursor as *const u8, w) }?;
            }
            Ok(false) => break,
            Err(_) => {
                // The rest of this buffer cannot be walked.
                *undecodable += 1;
                break;
            }
        }
    }
    Ok(())
}
