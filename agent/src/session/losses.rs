//! Loss records: what the pool, CUPTI, NVTX and the NCCL plugin could not
//! record, written as the counters grow.

use super::nvtx::NVTX_OPEN_DROPPED;
use super::source::Writer;
use super::Session;
use gputrace_format::*;
use std::sync::atomic::Ordering::Relaxed;

/// The loss counters already written.
#[derive(Default)]
pub(super) struct Losses {
    pool_buffers: u64,
    pool_bytes: u64,
    /// Activity buffers not walked to the end, not yet written.
    pub undecodable: u64,
    /// NCCL plugin loss counters already written (slots, queue, comms, disabled).
    nccl: [u64; 4],
    /// NVTX loss counters already written (queue, domains, strings, names, too many open, request marks).
    nvtx: [u64; 6],
}

/// Write loss records for whatever was lost since the last call.
pub(super) fn record_losses(s: &Session, w: &mut Writer, l: &mut Losses) -> Result<(), FormatError> {
    let cupti = s.cupti.as_ref();
    let now = match cupti {
        Some(c) => Nanos(c.api.timestamp().unwrap_or(0)),
        None => Nanos(ClockPair::now().realtime_ns),
    };
    if let Some(Ok(n)) = cupti.map(|c| c.api.take_dropped()) {
        if n > 0 {
            w.push(Event::Loss(Loss {
                time: now,
                source: LossSource::CUPTI_DROPPED,
                count: n,
                detail: StringId::EMPTY,
            }))?;
        }
    }
    let buffers = s.pool.discarded_buffers.load(Relaxed);
    let bytes = s.pool.discarded_bytes.load(Relaxed);
    if buffers > l.pool_buffers {
        let detail = w.intern(&format!(
            "{} buffers ({} bytes of records) discarded: all {} trace buffers were full; raise GPUTRACE_BUFFERS",
            buffers - l.pool_buffers,
            bytes - l.pool_bytes,
            s.config.buffers
        ));
        w.push(Event::Loss(Loss {
            time: now,
            source: LossSource::BUFFER_POOL_EXHAUSTED,
            count: buffers - l.pool_buffers,
            detail,
        }))?;
        l.pool_buffers = buffers;
        l.pool_bytes = bytes;
    }
    if l.undecodable > 0 {
        let detail = w.intern("activity buffers whose records could not be walked to the end");
        w.push(Event::Loss(Loss {
            time: now,
            source: LossSource::UNDECODABLE,
            count: l.undecodable,
            detail,
        }))?;
        l.undecodable = 0;
    }
    if let Some(st) = crate::nvtx::state() {
        let [domains, strings, categories, threads] = st.names_full();
        let counters = [
            (
                st.losses.queue_full.load(Relaxed),
                "NVTX records not recorded: the queue to the writer thread was full; raise GPUTRACE_NVTX_RECORDS",
            ),
            (
                domains + st.losses.no_domain.load(Relaxed),
                "NVTX events not recorded: more domains than the agent's table holds",
            ),
            (
                strings + st.losses.no_string.load(Relaxed),
                "NVTX registered strings not kept (table full): their events have an empty name",
            ),
            (categories + threads, "NVTX category or thread names not kept: the table was full"),
            (NVTX_OPEN_DROPPED.load(Relaxed), "NVTX ranges not recorded: too many open at once"),
            (
                st.losses.requests_lost.load(Relaxed),
                "request marks (gputrace.request) not recorded: the queue to the writer thread was full; raise GPUTRACE_NVTX_RECORDS",
            ),
        ];
        for (i, (v, why)) in counters.into_iter().enumerate() {
            if v > l.nvtx[i] {
                let detail = w.intern(why);
                w.push(Event::Loss(Loss {
                    time: now,
                    source: LossSource::QUEUE_OVERFLOW,
                    count: v - l.nvtx[i],
                    detail,
                }))?;
                l.nvtx[i] = v;
            }
        }
    }
    if let Some(st) = crate::nccl::state() {
        let counters = [
            (&st.losses.slots_full, "NCCL events not recorded: all event slots were in use"),
            (
                &st.losses.queue_full,
                "NCCL events not recorded: the queue to the writer thread was full",
            ),
            (
                &st.losses.comms_full,
                "NCCL communicators not recorded: more than the plugin's table holds",
            ),
            (
                &st.losses.disabled,
                "NCCL events not recorded: the plugin had turned itself off (see the gputrace: line)",
            ),
        ];
        for (i, (c, why)) in counters.into_iter().enumerate() {
            let v = c.load(Relaxed);
            if v > l.nccl[i] {
                let detail = w.intern(why);
                w.push(Event::Loss(Loss {
                    time: now,
                    source: LossSource::NCCL_PLUGIN,
                    count: v - l.nccl[i],
                    detail,
                }))?;
                l.nccl[i] = v;
            }
        }
    }
    Ok(())
}
