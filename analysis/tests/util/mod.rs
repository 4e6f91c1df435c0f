//! A builder for hand-made traces, shared by the integration tests.
#![allow(dead_code)] // each test binary uses a different subset

use gputrace_format::*;

pub const CTX: ContextId = ContextId(1);
pub const TID: ThreadId = ThreadId(100);

/// Builds a one-process trace in memory.
pub struct Builder {
    pub w: TraceWriter<Vec<u8>>,
}

impl Builder {
    /// A builder whose writer cuts chunks after `chunk_events` events per track and kind.
    pub fn with_chunks(header: Header, chunk_events: usize) -> Builder {
        let opts = WriterOptions {
            chunk_events,
            max_buffered_events: chunk_events * 4,
            ..WriterOptions::default()
        };
        Builder {
            w: TraceWriter::new(Vec::new(), &header, opts).unwrap(),
        }
    }

    pub fn new(header: Header) -> Builder {
        Builder {
            w: TraceWriter::new(Vec::new(), &header, WriterOptions::default()).unwrap(),
        }
    }

    pub fn kernel(&mut self, device: u32, stream: u32, name: &str, start: u64, end: u64, corr: u32) -> &mut Self {
        let name = self.w.intern(name);
        self.w
            .push(Event::Kernel(Kernel {
                start: Nanos(start),
                end: Nanos(end),
                device: DeviceId(device),
                context: CTX,
                stream: StreamId(stream),
                correlation: CorrelationId(corr),
                name,
                grid: [1, 1, 1],
                block: [32, 1, 1],
                static_shared_mem: 0,
                dynamic_shared_mem: 0,
                registers: 32,
                graph_id: 0,
                graph_node_id: 0,
            }))
            .unwrap();
        self
    }

    pub fn copy(&mut self, stream: u32, kind: CopyKind, start: u64, end: u64, bytes: u64, pageable: bool) -> &mut Self {
        let (src_device, dst_device) = if kind == CopyKind::PTOP {
            (DeviceId(0), DeviceId(1))
        } else {
            (DeviceId(0), DeviceId(0))
        };
        let host = if pageable { MemoryKind::PAGEABLE } else { MemoryKind::PINNED };
        self.w
            .push(Event::Memcpy(Memcpy {
                start: Nanos(start),
                end: Nanos(end),
                device: DeviceId(0),
                context: CTX,
                stream: StreamId(stream),
                correlation: CorrelationId(0),
                kind,
                bytes,
                src_kind: host,
                dst_kind: MemoryKind::DEVICE,
                src_device,
                dst_device,
            }))
            .unwrap();
        self
    }

    pub fn memset(&mut self, stream: u32, start: u64, end: u64, bytes: u64) -> &mut Self {
        self.w
            .push(Event::Memset(Memset {
                start: Nanos(start),
                end: Nanos(end),
                device: DeviceId(0),
                context: CTX,
                stream: StreamId(stream),
                correlation: CorrelationId(0),
                bytes,
                value: 0,
                memory_kind: MemoryKind::DEVICE,
            }))
            .unwrap();
        self
    }

    pub fn api(&mut self, name: &str, start: u64, end: u64, corr: u32) -> &mut Self {
        let name = self.w.intern(name);
        self.w
            .push(Event::Api(ApiCall {
                start: Nanos(start),
                end: Nanos(end),
                thread: TID,
                correlation: CorrelationId(corr),
                domain: ApiDomain::RUNTIME,
                cbid: 0,
                name,
                return_value: 0,
            }))
            .unwrap();
        self
    }

    pub fn range(&mut self, name: &str, start: u64, end: u64) -> &mut Self {
        let name = self.w.intern(name);
        self.w
            .push(Event::Marker(Marker {
                start: Nanos(start),
                end: Nanos(end),
                thread: TID,
                name,
                domain: StringId::EMPTY,
                kind: MarkerKind::RANGE,
                color: 0,
            }))
            .unwrap();
        self
    }

    pub fn sync(&mut self, start: u64, end: u64) -> &mut Self {
        self.w
            .push(Event::Sync(Sync {
                start: Nanos(start),
                end: Nanos(end),
                device: DeviceId(0),
                context: CTX,
                stream: StreamId(7),
                correlation: CorrelationId(0),
                kind: SyncKind::STREAM_SYNCHRONIZE,
                cuda_event: 0,
            }))
            .unwrap();
        self
    }

    /// A peer-to-peer copy (device 0 to 1) with a correlation id: a copy-engine collective runs as one.
    pub fn peer_copy(&mut self, stream: u32, start: u64, end: u64, bytes: u64, corr: u32) -> &mut Self {
        self.w
            .push(Event::Memcpy(Memcpy {
                start: Nanos(start),
                end: Nanos(end),
                device: DeviceId(0),
                context: CTX,
                stream: StreamId(stream),
                correlation: CorrelationId(corr),
                kind: CopyKind::PTOP,
                bytes,
                src_kind: MemoryKind::DEVICE,
                dst_kind: MemoryKind::DEVICE,
                src_device: DeviceId(0),
                dst_device: DeviceId(1),
            }))
            .unwrap();
        self
    }

    /// Record communicators in the trace's communicator table.
    pub fn communicators(&mut self, comms: &[(u64, &str, u32, u32)]) -> &mut Self {
        let list: Vec<Communicator> = comms
            .iter()
            .map(|&(id, name, nranks, nodes)| Communicator {
                id: CommId(id),
                name: name.to_string(),
                rank: 0,
                nranks,
                nodes,
                plugin_version: 5,
                created: Nanos(0),
            })
            .collect();
        self.w.add_communicators(&list).unwrap();
        self
    }

    /// An NCCL collective on `device`: linked to the kernel with correlation `corr` (its GPU
    /// times `start`..`end`), or, with `corr` 0, unlinked (start = end = the enqueue time).
    #[allow(clippy::too_many_arguments)]
    pub fn collective(
        &mut self,
        device: u32,
        comm: u64,
        op: &str,
        nranks: u32,
        bytes: u64,
        algorithm: &str,
        protocol: &str,
        start: u64,
        end: u64,
        corr: u32,
    ) -> &mut Self {
        let op = self.w.intern(op);
        let algorithm = self.w.intern(algorithm);
        let protocol = self.w.intern(protocol);
        let datatype = self.w.intern("bf16");
        let end = if corr == 0 { start } else { end };
        self.w
            .push(Event::Collective(Collective {
                start: Nanos(start),
                end: Nanos(end),
                enqueue: Nanos(start.saturating_sub(10)),
                comm: CommId(comm),
                op,
                seq: 0,
                count: bytes / 2,
                datatype,
                bytes,
                rank: 0,
                nranks,
                root: -1,
                algorithm,
                protocol,
                channels: 8,
                device: DeviceId(device),
                stream: StreamId(13),
                correlation: CorrelationId(corr),
            }))
            .unwrap();
        self
    }

    pub fn finish(self, end_realtime: u64) -> TraceFile {
        let mut trailer = Trailer::default();
        trailer.end_clock.realtime_ns = end_realtime;
        TraceFile::from_bytes("test.gtrace", self.w.finish(trailer).unwrap()).unwrap()
    }
}

pub fn header_with_window(start_realtime: u64, devices: &[u32]) -> Header {
    Header {
        time_domain: TimeDomain::Realtime,
        start_clock: ClockPair {
            realtime_ns: start_realtime,
            monotonic_ns: 1,
            cupti_ns: None,
        },
        devices: devices
            .iter()
            .map(|&d| DeviceInfo {
                ordinal: DeviceId(d),
                name: format!("GPU {d}"),
                ..DeviceInfo::default()
            })
            .collect(),
        ..Header::default()
    }
}

/// The shared traces are absent: skip, saying so; under `CI=true` fail, so a
/// CI without them cannot pass these tests vacuously.
pub fn shared_traces_absent(what: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but {what}: the real traces must be present"
    );
    skip::skip(what);
}

#[path = "../../../tests/common/skip.rs"]
mod skip;
