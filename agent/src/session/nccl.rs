//! The NCCL source: the profiler plugin's collectives (`nccl/`), linked to
//! the kernels CUPTI recorded for them.

use super::source::{to_trace_time, Pass, Source, Writer};
use super::Session;
use gputrace_format::*;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::time::{Duration, Instant};

/// The writer thread's side of the NCCL plugin: links collectives to their
/// kernels and writes them, with the communicators.
pub(super) struct NcclSource {
    linker: crate::nccl::link::Linker,
    comms_written: usize,
    comms: Vec<crate::nccl::CommInfo>,
    ready: Vec<crate::nccl::link::Ready>,
    /// Communicator ids already written (NCCL < 2.27 names a communicator
    /// only in its collectives: its record is written at the first one).
    known: std::collections::HashSet<u64>,
    /// Profiler interface version of each communicator slot without an id.
    legacy_version: u32,
    /// Added to a `CLOCK_REALTIME` ns to get the trace's time domain.
    offset: i64,
    epoch: Instant,
}

impl NcclSource {
    /// `offset`: added to a `CLOCK_REALTIME` ns to get the trace's time.
    pub fn new(s: &Session, offset: i64) -> NcclSource {
        // CUPTI delivers kernel records at its flushes: wait three periods.
        let wait = (s.config.flush_period * 3).max(Duration::from_secs(2));
        NcclSource {
            linker: crate::nccl::link::Linker::new(s.external_ids.load(Acquire), wait.as_nanos() as u64),
            comms_written: 0,
            comms: Vec::new(),
            ready: Vec::new(),
            known: Default::default(),
            legacy_version: 0,
            offset,
            epoch: Instant::now(),
        }
    }

    fn time(&self, realtime_ns: u64) -> Nanos {
        to_trace_time(realtime_ns, self.offset)
    }
}

impl Source for NcclSource {
    /// Before CUPTI's buffers are walked: records in this pass may already
    /// be the ones the linker needs (a job can init NCCL, run and exit in
    /// one pass). Without a way to link (no API records or external ids),
    /// NCCL's kernels are not worth collecting.
    fn prepare(&mut self, pass: &mut Pass) {
        pass.dec.collect_comm = self.linker.can_link && crate::nccl::state().is_some();
    }

    /// Move what the plugin and CUPTI delivered through the linker into the
    /// trace (on the last pass, everything still waiting).
    fn pump(&mut self, w: &mut Writer, pass: &mut Pass) -> Result<(), FormatError> {
        let (dec, last) = (&mut pass.dec, pass.last);
        let Some(st) = crate::nccl::state() else {
            return Ok(());
        };
        self.comms.clear();
        self.comms_written = st.comms_from(self.comms_written, &mut self.comms);
        if !self.comms.is_empty() {
            // v1–v3 `init` gives no id: those communicators are written from
            // their collectives instead.
            if let Some(c) = self.comms.iter().find(|c| c.id == 0) {
                self.legacy_version = c.version;
            }
            let known = &mut self.known;
            let offset = self.offset;
            let list: Vec<Communicator> = self
                .comms
                .iter()
                .filter(|c| c.id != 0 && known.insert(c.id))
                .map(|c| Communicator {
                    id: CommId(c.id),
                    name: crate::nccl::name_str(&c.name).into_owned(),
                    rank: known_rank(c.rank),
                    nranks: c.nranks.max(0) as u32,
                    nodes: c.nodes.max(0) as u32,
                    plugin_version: c.version,
                    created: to_trace_time(c.created_ns, offset),
                })
                .collect();
            w.add_communicators(&list)?;
        }
        let now = self.epoch.elapsed().as_nanos() as u64;
        while let Some(r) = st.queue.pop() {
            self.linker.record(r, now, &mut self.ready);
        }
        for (ext, corr) in dec.ext_links.drain(..) {
            self.linker.external(ext, corr);
        }
        for k in dec.comm_kernels.drain(..) {
            self.linker.kernel(k);
        }
        // A pass costs about 7 ns per waiting collective (`cargo bench -p
        // gputrace-agent --bench agent`): every writer pass can afford it.
        self.linker.poll(now, last, &mut self.ready);
        dec.collect_copies = self.linker.wants_copies;
        let mut ready = std::mem::take(&mut self.ready);
        for r in ready.drain(..) {
            if r.rec.comm != 0 && self.known.insert(r.rec.comm) {
                w.add_communicators(&[Communicator {
                    id: CommId(r.rec.comm),
                    rank: known_rank(r.rec.rank),
                    nranks: r.rec.nranks,
                    plugin_version: self.legacy_version,
                    created: self.time(r.rec.api_ns.max(r.rec.start_ns)),
                    ..Default::default()
                }])?;
            }
            let e = to_collective(&r, self.offset, w);
            w.push(Event::Collective(e))?;
        }
        self.ready = ready;
        Ok(())
    }

    fn finish(&mut self, _w: &mut Writer, _pass: &mut Pass, trailer: &mut Trailer) -> Result<(), FormatError> {
        if let Some(st) = crate::nccl::state() {
            let l = &self.linker;
            trailer.extra.insert("nccl.linked".into(), l.linked.to_string());
            trailer.extra.insert(
                "nccl.plugin".into(),
                format!(
                    "profiler interface v{}; {} events recorded; {} collectives linked to their kernels, {} not linked",
                    st.version.load(Relaxed),
                    l.received,
                    l.linked,
                    l.unlinked
                ),
            );
        }
        Ok(())
    }
}

/// NCCL's rank, or [`RANK_UNKNOWN`] for its `-1` (not rank 0).
fn known_rank(rank: i32) -> u32 {
    u32::try_from(rank).unwrap_or(RANK_UNKNOWN)
}

/// The trace event for one collective: GPU times from its kernel when
/// linked, else start = end = the time the application called NCCL.
fn to_collective<W: std::io::Write>(r: &crate::nccl::link::Ready, offset: i64, w: &mut TraceWriter<W>) -> Collective {
    use crate::nccl::{datatype_size, name_str, short_datatype, RecKind};
    let rec = &r.rec;
    let d = &rec.d;
    let enqueue = to_trace_time(if rec.api_ns != 0 { rec.api_ns } else { rec.start_ns }, offset);
    let (start, end, device, stream, correlation) = match r.kernel {
        Some(k) => (Nanos(k.start), Nanos(k.end), k.device, StreamId(k.stream), k.correlation),
        None => (enqueue, enqueue, 0, StreamId::UNKNOWN, 0),
    };
    let datatype = name_str(&d.datatype);
    let bytes = if d.bytes != 0 {
        d.bytes
    } else {
        d.count.saturating_mul(datatype_size(&datatype))
    };
    let algorithm = if rec.kind == RecKind::CeColl {
        w.intern("CE")
    } else {
        w.intern(&name_str(&d.algo))
    };
    Collective {
        start,
        end,
        enqueue,
        comm: CommId(rec.comm),
        op: w.intern(&name_str(&d.func)),
        seq: d.seq,
        count: d.count,
        datatype: w.intern(short_datatype(&datatype)),
        bytes,
        rank: known_rank(rec.rank),
        nranks: rec.nranks,
        root: d.root,
        algorithm,
        protocol: w.intern(&name_str(&d.proto)),
        channels: d.channels,
        device: DeviceId(device),
        stream,
        correlation: CorrelationId(correlation),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nccl::link::{KernelInfo, Ready};
    use crate::nccl::{Descr, Rec, RecKind};

    #[test]
    fn an_unknown_rank_is_not_rank_zero() {
        let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
        let mut r = ready(None);
        r.rec.rank = -1;
        assert_eq!(to_collective(&r, 0, &mut w).rank, RANK_UNKNOWN);
        r.rec.rank = 0;
        assert_eq!(to_collective(&r, 0, &mut w).rank, 0);
    }

    fn ready(kernel: Option<KernelInfo>) -> Ready {
        let mut d = Descr {
            seq: 41,
            count: 1 << 20,
            root: -1,
            channels: 8,
            ..Default::default()
        };
        d.func[..13].copy_from_slice(b"ReduceScatter");
        d.datatype[..12].copy_from_slice(b"ncclBfloat16");
        d.algo[..4].copy_from_slice(b"RING");
        d.proto[..6].copy_from_slice(b"Simple");
        Ready {
            rec: Rec {
                kind: RecKind::Coll,
                id: 3,
                group: 2,
                comm: 0xfeed,
                rank: 5,
                nranks: 8,
                api_ns: 1_000,
                start_ns: 1_500,
                stop_ns: 1_600,
                d,
            },
            kernel,
        }
    }

    #[test]
    fn linked_collectives_take_the_kernel_times_unlinked_the_api_time() {
        let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
        let k = KernelInfo {
            start: 90_000,
            end: 95_000,
            device: 2,
            context: 1,
            stream: 13,
            correlation: 777,
        };
        let c = to_collective(&ready(Some(k)), 50_000, &mut w);
        assert_eq!((c.start, c.end, c.enqueue), (Nanos(90_000), Nanos(95_000), Nanos(51_000)));
        assert_eq!((c.device, c.stream, c.correlation), (DeviceId(2), StreamId(13), CorrelationId(777)));
        assert_eq!((c.comm, c.seq, c.rank, c.nranks, c.channels), (CommId(0xfeed), 41, 5, 8, 8));
        assert_eq!(c.bytes, 2 << 20, "count x 2 bytes for bf16");
        let c = to_collective(&ready(None), -500, &mut w);
        assert_eq!((c.start, c.end, c.enqueue), (Nanos(500), Nanos(500), Nanos(500)));
        assert_eq!((c.stream, c.correlation), (StreamId::UNKNOWN, CorrelationId(0)));
    }
}
