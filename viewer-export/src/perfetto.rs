//! Perfetto's native protobuf trace (`Trace { repeated TracePacket packet = 1 }`)
//! with TrackEvent slices, written by hand (field numbers from
//! `perfetto/trace/perfetto_trace.proto`).
//!
//! Tracks, per input (rank):
//! - a process track: `rank R · host · pid P` (ProcessDescriptor with the pid);
//! - a track per GPU (`GPU d · name · uuid`) with a child track per
//!   (context, stream) named `GPU d · ctx c · stream s` and, when there are
//!   synchronizations, `… · sync`; sibling merging is off so that streams
//!   never merge;
//! - a thread track per CPU thread (ThreadDescriptor) with the CUDA API calls
//!   and NVTX ranges;
//! - a track per NCCL communicator (`NCCL comm <hash> · rank r/n`) with the
//!   collectives and their metadata as debug annotations;
//! - NVTX ranges projected onto each stream that ran work launched inside
//!   them, on a `… · NVTX` child of the stream's GPU (see the JSON writer's
//!   `gpu_user_annotation`);
//! - loss records as instants on the process track;
//! - per GPU, counters of the compute, communication (NCCL kernels),
//!   transfer (copies, memsets) and idle share of each time bin, in percent
//!   (work overlapping on several streams counts once).
//!
//! Every launch and the GPU work it launched share a flow id
//! (`position << 32 | correlation`): `flow_ids` on the API call,
//! `terminating_flow_ids` on the kernel or copy. Event names, categories and
//! annotation names are interned. One packet sequence: its first packet has
//! `SEQ_INCREMENTAL_STATE_CLEARED` and the defaults (timestamps in
//! `CLOCK_REALTIME`), every event packet `SEQ_NEEDS_INCREMENTAL_STATE`. A clock
//! snapshot pairs REALTIME with the first input's MONOTONIC reading (as
//! BOOTTIME) and makes REALTIME the trace clock.
//!
//! Packets come in file order, one track after another, each track in time
//! order; trace processor sorts across tracks.

use crate::error::Result;
use crate::job::{Filter, Job, Plan};
use crate::out::{launch_key, LaunchKey, Out, TextCache};
use crate::proto::*;
use crate::walk::{
    counter_display, walk, CommLibraries, Flow, Input, Item, Lane, LaneId, Utilization, Visitor, WalkOptions, BUSY, COMMUNICATION, COMPUTE,
    TRANSFER,
};
use crate::{ExportStats, Exporter};
use gputrace_format::*;
use rustc_hash::FxHashMap;
use std::io::Write;

/// The Perfetto protobuf writer.
#[derive(Clone, Copy, Debug)]
pub struct Perfetto {
    /// Attach arguments (device, stream, correlation, grid, ...) as debug
    /// annotations. About 40% of the output size.
    pub args: bool,
    /// Number of time bins of the per-GPU utilization counters (compute,
    /// communication, transfer and idle share, in percent); 0: none.
    pub counter_bins: u32,
    /// Project NVTX ranges onto the GPU streams that ran the work launched
    /// inside them (`… · NVTX` tracks).
    pub nvtx_on_gpu: bool,
}

impl Default for Perfetto {
    fn default() -> Self {
        Perfetto {
            args: true,
            counter_bins: 200,
            nvtx_on_gpu: true,
        }
    }
}

/// The trusted packet sequence id of every packet this writer emits.
pub const SEQUENCE_ID: u64 = 1;

// TracePacket fields.
const PKT: u32 = 1; // Trace.packet
const P_TIMESTAMP: u32 = 8;
const P_SEQ_ID: u32 = 10;
const P_TRACK_EVENT: u32 = 11;
const P_INTERNED: u32 = 12;
const P_FLAGS: u32 = 13;
const P_CLOCK_SNAPSHOT: u32 = 6;
const P_DEFAULTS: u32 = 59;
const P_TRACK_DESCRIPTOR: u32 = 60;
const P_FIRST_ON_SEQUENCE: u32 = 87;
const SEQ_INCREMENTAL_STATE_CLEARED: u64 = 1;
const SEQ_NEEDS_INCREMENTAL_STATE: u64 = 2;
const CLOCK_REALTIME: u64 = 1;
const CLOCK_BOOTTIME: u64 = 6;
// TrackEvent fields.
const E_CATEGORY_IIDS: u32 = 3;
const E_DEBUG: u32 = 4;
const E_TYPE: u32 = 9;
const E_NAME_IID: u32 = 10;
const E_TRACK_UUID: u32 = 11;
const E_FLOW_IDS: u32 = 47;
const E_TERMINATING_FLOW_IDS: u32 = 48;
const TYPE_SLICE_BEGIN: u64 = 1;
const TYPE_SLICE_END: u64 = 2;
const TYPE_INSTANT: u64 = 3;
const TYPE_COUNTER: u64 = 4;
const E_DOUBLE_COUNTER_VALUE: u32 = 44;
// DebugAnnotation fields.
const A_NAME_IID: u32 = 1;
const A_UINT: u32 = 3;
const A_INT: u32 = 4;
const A_STRING: u32 = 6;
const A_ARRAY: u32 = 12;

/// Categories, interned with iids 1.. in this order.
const CATEGORIES: [&str; 11] = [
    "kernel",
    "gpu_memcpy",
    "gpu_memset",
    "cuda_sync",
    "cuda_runtime",
    "cuda_driver",
    "user_annotation",
    "nccl_collective",
    "gputrace_loss",
    "gpu_user_annotation",
    "gputrace_communication",
];

/// Category iid of NVTX ranges projected onto GPU streams.
const GPU_USER_ANNOTATION: u64 = 10;
/// Category iid of communication-library kernels drawn on their libraries' tracks.
const GPUTRACE_COMMUNICATION: u64 = 11;

/// Debug annotation names, interned with iids 1.. in this order.
#[derive(Clone, Copy)]
#[repr(u64)]
enum Arg {
    Device = 1,
    Context,
    Stream,
    Correlation,
    Grid,
    Block,
    Registers,
    SharedMemory,
    Bytes,
    Kind,
    Cbid,
    Return,
    Domain,
    Count,
    Dtype,
    Rank,
    GroupSize,
    Seq,
    Comm,
    Root,
    Algorithm,
    Protocol,
    Channels,
    Source,
    Detail,
    Value,
    SrcDevice,
    DstDevice,
    Event,
    GraphId,
}

const ARG_NAMES: [&str; 30] = [
    "device",
    "context",
    "stream",
    "correlation",
    "grid",
    "block",
    "registers per thread",
    "shared memory",
    "bytes",
    "kind",
    "cbid",
    "return",
    "domain",
    "count",
    "dtype",
    "rank",
    "group size",
    "seq",
    "comm",
    "root",
    "algorithm",
    "protocol",
    "channels",
    "source",
    "detail",
    "value",
    "src device",
    "dst device",
    "cuda event",
    "graph id",
];

impl Exporter for Perfetto {
    fn export<W: Write>(&self, job: &Job<'_>, filter: &Filter, out: W) -> Result<ExportStats> {
        let plan = Plan::new(job, filter)?;
        let mut w = ProtoWriter::new(job, &plan, out, self.args);
        w.preamble(job, &plan);
        let walked = walk(
            job,
            filter,
            &plan,
            WalkOptions {
                bins: self.counter_bins,
                gpu_annotations: self.nvtx_on_gpu,
                gpu_step_annotations: true,
            },
            &mut w,
        )?;
        let (_, bytes) = w.out.finish()?;
        Ok(ExportStats {
            walk: walked,
            bytes,
            from: plan.from,
            to: plan.to,
        })
    }
}

struct InputState {
    pid: u64,
    /// Event-name iid by string id (0: not interned yet).
    name_iids: Vec<u64>,
}

struct ProtoWriter<W: Write> {
    out: Out<W>,
    args: bool,
    /// Names of the communication-library tracks' libraries.
    libraries: CommLibraries,
    inputs: Vec<InputState>,
    next_iid: u64,
    /// Names that are not in a string table (memcpy labels, ...).
    label_iids: FxHashMap<String, u64>,
    uuids: FxHashMap<TrackKey, u64>,
    /// Track by [`LaneId`] of the current input (uuid 0: not described yet;
    /// uuids start at 1).
    lane_tracks: Vec<LaneTrack>,
    /// Interned names the current packet must carry.
    new_names: Vec<(u64, String)>,
    /// Encoded args that repeat from event to event.
    arg_cache: ArgCache,
}

/// Encoded debug annotations that repeat from event to event, copied
/// instead of encoded again.
struct ArgCache {
    /// A kernel's grid, block, registers and shared memory.
    launch: TextCache<LaunchKey, 1024>,
}

/// Up to `N` bytes kept inline, appended as one constant-size copy cut
/// back to their length (a copy of a variable size is a call).
#[derive(Clone, Copy)]
struct Inline<const N: usize> {
    bytes: [u8; N],
    len: u8,
}

impl<const N: usize> Inline<N> {
    const EMPTY: Inline<N> = Inline { bytes: [0; N], len: 0 };

    /// `b`, or `None` when it is longer than `N`.
    fn new(b: &[u8]) -> Option<Inline<N>> {
        let mut i = Self::EMPTY;
        i.bytes.get_mut(..b.len())?.copy_from_slice(b);
        i.len = b.len() as u8;
        Some(i)
    }

    /// What `write` writes, which must fit (a bound the caller knows).
    fn written(write: impl FnOnce(&mut Vec<u8>)) -> Inline<N> {
        let mut b = Vec::with_capacity(N);
        write(&mut b);
        Inline::new(&b).expect("written within the bound")
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    #[inline(always)]
    fn put(&self, out: &mut Vec<u8>) {
        let at = out.len();
        out.extend_from_slice(&self.bytes);
        out.truncate(at + self.len as usize);
    }
}

impl<const N: usize> Default for Inline<N> {
    fn default() -> Self {
        Self::EMPTY
    }
}

/// A lane's track: its uuid, and the bytes every event packet on it has
/// after its timestamp: the start of a begin packet, the whole rest of a
/// slice-end packet.
#[derive(Clone, Copy, Default)]
struct LaneTrack {
    uuid: u64,
    /// Sequence fields, the track event's tag and (placeholder) length, its
    /// type (`TYPE_SLICE_BEGIN`, the byte at [`BEGIN_TYPE_AT`]) and track
    /// uuid: at most 4 + 3 + 2 + 11 bytes.
    begin: Inline<24>,
    /// A slice-end packet's bytes after its timestamp field: at most 4 + 2
    /// + 2 + 11.
    end: Inline<24>,
    /// On a stream lane, the debug annotations of a kernel's device,
    /// context and stream (at most 3 × 10 bytes; empty on other lanes).
    kernel_ids: Inline<32>,
    /// Those of a copy's or memset's device and stream.
    copy_ids: Inline<24>,
}

impl LaneTrack {
    fn new(uuid: u64, lane: Lane) -> LaneTrack {
        let mut t = LaneTrack {
            uuid,
            begin: Inline::written(|b| {
                uint(b, P_SEQ_ID, SEQUENCE_ID);
                uint(b, P_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE);
                let _ = begin_wide(b, P_TRACK_EVENT);
                debug_assert_eq!(b.len(), BEGIN_TYPE_AT - 1);
                uint(b, E_TYPE, TYPE_SLICE_BEGIN);
                uint(b, E_TRACK_UUID, uuid);
            }),
            end: Inline::written(|b| {
                uint(b, P_SEQ_ID, SEQUENCE_ID);
                uint(b, P_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE);
                let te = begin(b, P_TRACK_EVENT);
                uint(b, E_TYPE, TYPE_SLICE_END);
                uint(b, E_TRACK_UUID, uuid);
                end(b, te);
            }),
            ..LaneTrack::default()
        };
        if let Lane::Stream { device, context, stream } = lane {
            t.kernel_ids = Inline::written(|b| {
                arg_u(b, Arg::Device, device.0 as u64);
                arg_u(b, Arg::Context, context.0 as u64);
                arg_u(b, Arg::Stream, stream.0 as u64);
            });
            t.copy_ids = Inline::written(|b| {
                arg_u(b, Arg::Device, device.0 as u64);
                arg_u(b, Arg::Stream, stream.0 as u64);
            });
        }
        t
    }
}

/// Where a begin packet's type value is in [`LaneTrack::begin`]: after the
/// sequence fields (4 bytes), the track event's tag and length (3) and the
/// type's tag (1).
const BEGIN_TYPE_AT: usize = 8;

/// What a track descriptor stands for. Tracks get small sequential uuids
/// (1, 2, ...) in the order they are described: short varints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum TrackKey {
    Process(usize),
    Gpu(usize, DeviceId),
    Lane(usize, Lane),
    /// Utilization counter `category` of a GPU.
    Counter(usize, DeviceId, usize),
    /// The input's `n`-th counter series (NVML), under its GPU.
    Series(usize, DeviceId, usize),
    /// The input's `n`-th host samples track (one per sampled thread).
    HostSamples(usize, usize),
}

fn lane_key(ordinal: usize, lane: Lane) -> TrackKey {
    match lane {
        Lane::Process => TrackKey::Process(ordinal),
        lane => TrackKey::Lane(ordinal, lane),
    }
}

fn category(e: &Event) -> u64 {
    1 + match e {
        // Graph launches are GPU work of kernels, in the kernel category.
        Event::Kernel(_) | Event::GraphLaunch(_) => 0,
        Event::Memcpy(_) => 1,
        Event::Memset(_) => 2,
        Event::Sync(_) => 3,
        Event::Api(a) if a.domain == ApiDomain::DRIVER => 5,
        Event::Api(_) => 4,
        Event::Marker(_) => 6,
        Event::Collective(_) => 7,
        Event::Loss(_) => 8,
        Event::Counter(_) | Event::Request(_) => 9,
    }
}

/// An unsigned debug annotation: `{name_iid, uint_value}`. Put together in
/// a 16-byte stack buffer (every length is known: the name's iid is below
/// 128, the value at most 10 bytes) and appended as one constant-size
/// copy, cut back to its length.
#[inline]
fn arg_u(buf: &mut Vec<u8>, name: Arg, v: u64) {
    const { assert!(ARG_NAMES.len() < 128, "one-byte annotation name iids") };
    let mut a = [0u8; 16];
    a[0] = ((E_DEBUG << 3) | 2) as u8;
    a[2] = (A_NAME_IID << 3) as u8;
    a[3] = name as u8;
    a[4] = (A_UINT << 3) as u8;
    let n = varint_at(&mut a, 5, v);
    a[1] = (n - 2) as u8;
    let len = buf.len();
    buf.extend_from_slice(&a);
    buf.truncate(len + n);
}

fn arg_i(buf: &mut Vec<u8>, name: Arg, v: i64) {
    let a = begin(buf, E_DEBUG);
    uint(buf, A_NAME_IID, name as u64);
    int(buf, A_INT, v);
    end(buf, a);
}

fn arg_s(buf: &mut Vec<u8>, name: Arg, v: &str) {
    let a = begin(buf, E_DEBUG);
    uint(buf, A_NAME_IID, name as u64);
    bytes(buf, A_STRING, v.as_bytes());
    end(buf, a);
}

#[inline]
fn arg_dims(buf: &mut Vec<u8>, name: Arg, d: [u32; 3]) {
    let a = begin(buf, E_DEBUG);
    uint(buf, A_NAME_IID, name as u64);
    for v in d {
        let x = begin(buf, A_ARRAY);
        uint(buf, A_UINT, v as u64);
        end(buf, x);
    }
    end(buf, a);
}

impl<W: Write> ProtoWriter<W> {
    fn new(job: &Job<'_>, plan: &Plan, out: W, args: bool) -> Self {
        let pids: Vec<u32> = plan.inputs.iter().map(|&i| job.inputs()[i].trace.header().pid).collect();
        let inputs = plan
            .inputs
            .iter()
            .enumerate()
            .map(|(ordinal, &i)| {
                let trace = job.inputs()[i].trace;
                let pid = trace.header().pid;
                // Trace processor merges processes with the same pid.
                let clash = pid == 0 || pids.iter().filter(|&&p| p == pid).count() > 1;
                InputState {
                    pid: if clash { 0x4000_0000 + ordinal as u64 } else { pid as u64 },
                    name_iids: vec![0; trace.string_count()],
                }
            })
            .collect();
        ProtoWriter {
            out: Out::new(out),
            args,
            libraries: CommLibraries::of(job.classifier()),
            inputs,
            next_iid: 1,
            label_iids: FxHashMap::default(),
            uuids: FxHashMap::default(),
            lane_tracks: Vec::new(),
            new_names: Vec::new(),
            arg_cache: ArgCache { launch: TextCache::new() },
        }
    }

    /// The sequence's first packet (incremental state cleared, defaults,
    /// categories and annotation names) and the clock snapshot.
    fn preamble(&mut self, job: &Job<'_>, plan: &Plan) {
        let b = &mut self.out.buf;
        let p = begin_wide(b, PKT);
        uint(b, P_SEQ_ID, SEQUENCE_ID);
        uint(b, P_FLAGS, SEQ_INCREMENTAL_STATE_CLEARED);
        uint(b, P_FIRST_ON_SEQUENCE, 1);
        let d = begin(b, P_DEFAULTS);
        uint(b, 58, CLOCK_REALTIME); // TracePacketDefaults.timestamp_clock_id
        end(b, d);
        let i = begin(b, P_INTERNED);
        for (n, name) in CATEGORIES.iter().enumerate() {
            let c = begin(b, 1); // event_categories
            uint(b, 1, n as u64 + 1);
            bytes(b, 2, name.as_bytes());
            end(b, c);
        }
        for (n, name) in ARG_NAMES.iter().enumerate() {
            let c = begin(b, 3); // debug_annotation_names
            uint(b, 1, n as u64 + 1);
            bytes(b, 2, name.as_bytes());
            end(b, c);
        }
        end(b, i);
        end_wide(b, p);

        // The header's clock pair was read back to back: it already is a
        // (realtime, boottime) snapshot, whatever the events' time domain.
        let first = job.inputs()[plan.inputs[0]].trace.header();
        let (real, boot) = if first.start_clock.realtime_ns != 0 && first.start_clock.monotonic_ns != 0 {
            (first.start_clock.realtime_ns, first.start_clock.monotonic_ns)
        } else {
            (plan.base, plan.base)
        };
        let p = begin_wide(b, PKT);
        uint(b, P_SEQ_ID, SEQUENCE_ID);
        let s = begin(b, P_CLOCK_SNAPSHOT);
        for (id, ts) in [(CLOCK_BOOTTIME, boot), (CLOCK_REALTIME, real)] {
            let c = begin(b, 1);
            uint(b, 1, id);
            uint(b, 2, ts);
            end(b, c);
        }
        uint(b, 2, CLOCK_REALTIME); // primary_trace_clock
        end(b, s);
        end_wide(b, p);
    }

    /// The uuid of a described track. Looked up only when a track is
    /// described and once per GPU's counters: events find theirs by lane id
    /// (`lane_tracks`).
    fn uuid(&self, key: TrackKey) -> Option<u64> {
        self.uuids.get(&key).copied()
    }

    /// The uuid of `key`, describing the track first if needed.
    fn descriptor(&mut self, key: TrackKey, body: impl FnOnce(&mut Vec<u8>)) -> u64 {
        if let Some(uuid) = self.uuid(key) {
            return uuid;
        }
        let uuid = self.uuids.len() as u64 + 1;
        self.uuids.insert(key, uuid);
        let b = &mut self.out.buf;
        let p = begin_wide(b, PKT);
        uint(b, P_SEQ_ID, SEQUENCE_ID);
        let d = begin(b, P_TRACK_DESCRIPTOR);
        uint(b, 1, uuid);
        body(b);
        end(b, d);
        end_wide(b, p);
        uuid
    }

    /// The begin of a slice that draws GPU work a second time (an NVTX range projected
    /// onto a stream, a communication library's kernel on its library's track): named
    /// `name`, of category iid `category`, on lane `id`; `end_slice` ends it.
    fn second_slice_begin(&mut self, input: &Input<'_>, lane: Lane, id: LaneId, name: StringId, start: u64, category: u64) -> Result<()> {
        let track = self.lane_uuid(input, lane, id, None);
        let name = self.name_iid_id(input, name);
        let b = &mut self.out.buf;
        let p = begin_wide(b, PKT);
        uint_time(b, P_TIMESTAMP, start);
        uint(b, P_SEQ_ID, SEQUENCE_ID);
        uint(b, P_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE);
        let te = begin(b, P_TRACK_EVENT);
        uint(b, E_TYPE, TYPE_SLICE_BEGIN);
        uint(b, E_TRACK_UUID, track);
        uint(b, E_NAME_IID, name);
        uint(b, E_CATEGORY_IIDS, category);
        end(b, te);
        self.write_new_names();
        end_wide(&mut self.out.buf, p);
        self.out.maybe_flush()?;
        Ok(())
    }

    /// The uuid of lane `id`, describing its track first if needed.
    #[inline]
    fn lane_uuid(&mut self, input: &Input<'_>, lane: Lane, id: LaneId, event: Option<&Event>) -> u64 {
        let i = self.lane_track(input, lane, id, event);
        self.lane_tracks[i].uuid
    }

    /// The index of lane `id`'s track in `lane_tracks`, describing the
    /// track first if needed.
    #[inline]
    fn lane_track(&mut self, input: &Input<'_>, lane: Lane, id: LaneId, event: Option<&Event>) -> usize {
        let i = id.index();
        if self.lane_tracks.get(i).is_none_or(|t| t.uuid == 0) {
            let uuid = self.describe_lane(input, lane, event);
            if self.lane_tracks.len() <= i {
                self.lane_tracks.resize(i + 1, LaneTrack::default());
            }
            self.lane_tracks[i] = LaneTrack::new(uuid, lane);
        }
        i
    }

    #[cold]
    fn describe_lane(&mut self, input: &Input<'_>, lane: Lane, event: Option<&Event>) -> u64 {
        let ordinal = input.ordinal;
        let key = lane_key(ordinal, lane);
        if let Some(uuid) = self.uuid(key) {
            return uuid;
        }
        let proc_uuid = self.uuid(TrackKey::Process(ordinal)).expect("process described in begin_input");
        let pid = self.inputs[ordinal].pid;
        let gpu = |w: &mut Self, device: DeviceId| {
            let info = input.trace.header().devices.iter().find(|d| d.ordinal == device);
            let name = match info {
                Some(d) => format!("GPU {device} · {} · {}", d.name, d.uuid),
                None => format!("GPU {device}"),
            };
            w.descriptor(TrackKey::Gpu(ordinal, device), |b| {
                uint(b, 5, proc_uuid);
                bytes(b, 2, name.as_bytes());
                uint(b, 12, 100 + device.0 as u64); // sibling_order_rank
                uint(b, 15, 2); // SIBLING_MERGE_BEHAVIOR_NONE
            })
        };
        let named_child = |w: &mut Self, parent: u64, name: String, rank: u64| {
            w.descriptor(key, |b| {
                uint(b, 5, parent);
                bytes(b, 2, name.as_bytes());
                uint(b, 12, rank);
                uint(b, 15, 2); // SIBLING_MERGE_BEHAVIOR_NONE
            })
        };
        match lane {
            Lane::Stream { device, context, stream }
            | Lane::Sync { device, context, stream }
            | Lane::Ranges { device, context, stream } => {
                let parent = gpu(self, device);
                let stream_name = if stream == StreamId::UNKNOWN {
                    "no stream".to_string()
                } else {
                    format!("stream {stream}")
                };
                let (suffix, order) = match lane {
                    Lane::Sync { .. } => (" · sync", 1),
                    Lane::Ranges { .. } => (" · NVTX", 2),
                    _ => ("", 0),
                };
                let name = format!("GPU {device} · ctx {context} · {stream_name}{suffix}");
                named_child(self, parent, name, stream.0 as u64 * 3 + order)
            }
            Lane::Comm { comm, .. } => {
                let mut name = format!("NCCL comm {:016x}", comm.0);
                if let Some(k) = input
                    .trace
                    .communicators()
                    .iter()
                    .find(|k| k.id == comm)
                    .filter(|k| !k.name.is_empty())
                {
                    name = format!("{name} ({})", k.name);
                }
                if let Some(Event::Collective(c)) = event {
                    let rank = if c.rank == RANK_UNKNOWN {
                        "?".to_string()
                    } else {
                        c.rank.to_string()
                    };
                    name = format!("{name} · rank {rank}/{}", c.nranks);
                }
                named_child(self, proc_uuid, name, 50)
            }
            Lane::Library { device, stream, library } => {
                let parent = gpu(self, device);
                let name = format!("GPU {device} · {} · stream {stream} (communication)", self.libraries.name(library));
                // After the GPU's streams (ranked 3 × stream + 0..2).
                named_child(self, parent, name, 1 << 40 | u64::from(library) << 32 | stream.0 as u64)
            }
            Lane::Thread { tid } => self.descriptor(key, |b| {
                let t = begin(b, 4);
                uint(b, 1, pid);
                uint(b, 2, tid.0 as u64);
                bytes(b, 5, format!("thread {tid}").as_bytes());
                end(b, t);
            }),
            Lane::Process => proc_uuid,
        }
    }

    #[inline]
    fn name_iid_id(&mut self, input: &Input<'_>, id: StringId) -> u64 {
        match self.inputs[input.ordinal].name_iids.get(id.0 as usize) {
            Some(&iid) if iid != 0 => iid,
            _ => self.intern_id(input, id),
        }
    }

    /// `name_iid_id` for a name not interned yet.
    #[cold]
    fn intern_id(&mut self, input: &Input<'_>, id: StringId) -> u64 {
        let slot = &mut self.inputs[input.ordinal].name_iids;
        match slot.get(id.0 as usize) {
            Some(&iid) if iid != 0 => iid,
            Some(_) => {
                let iid = self.next_iid;
                self.next_iid += 1;
                slot[id.0 as usize] = iid;
                self.new_names.push((iid, input.trace.name(id).into_owned()));
                iid
            }
            None => self.name_iid_label(&input.trace.name(id)),
        }
    }

    fn name_iid_label(&mut self, label: &str) -> u64 {
        if let Some(&iid) = self.label_iids.get(label) {
            return iid;
        }
        let iid = self.next_iid;
        self.next_iid += 1;
        self.label_iids.insert(label.to_string(), iid);
        self.new_names.push((iid, label.to_string()));
        iid
    }
}

/// Write the event's arguments as debug annotations; `lane` is the track of
/// the event's lane (a GPU event's ids come from it). Returns where in `b`
/// the correlation annotation is, if the event has one (see
/// [`EntryBytes`]).
fn write_args(b: &mut Vec<u8>, cache: &mut ArgCache, input: &Input<'_>, e: &Event, lane: &LaneTrack) -> Option<(usize, usize)> {
    let t = input.trace;
    let mut corr = None;
    let mut correlation = |b: &mut Vec<u8>, c: CorrelationId| {
        let at = b.len();
        arg_u(b, Arg::Correlation, c.0 as u64);
        corr = Some((at, b.len()));
    };
    match e {
        Event::Kernel(k) => {
            lane.kernel_ids.put(b);
            correlation(b, k.correlation);
            let (launch, hash) = launch_key(k);
            let shared = launch.3;
            cache.launch.put(b, launch, hash, |a| {
                arg_dims(a, Arg::Grid, k.grid);
                arg_dims(a, Arg::Block, k.block);
                arg_u(a, Arg::Registers, k.registers as u64);
                arg_u(a, Arg::SharedMemory, shared);
            });
            if k.graph_id != 0 {
                arg_u(b, Arg::GraphId, k.graph_id as u64);
            }
        }
        Event::Memcpy(m) => {
            lane.copy_ids.put(b);
            correlation(b, m.correlation);
            arg_u(b, Arg::Bytes, m.bytes);
            if m.src_device != m.device || m.dst_device != m.device {
                arg_u(b, Arg::SrcDevice, m.src_device.0 as u64);
                arg_u(b, Arg::DstDevice, m.dst_device.0 as u64);
            }
        }
        Event::Memset(m) => {
            lane.copy_ids.put(b);
            correlation(b, m.correlation);
            arg_u(b, Arg::Bytes, m.bytes);
            arg_u(b, Arg::Value, m.value as u64);
        }
        Event::Sync(y) => {
            arg_u(b, Arg::Device, y.device.0 as u64);
            correlation(b, y.correlation);
            arg_s(b, Arg::Kind, y.kind.name());
            if y.cuda_event != 0 {
                arg_u(b, Arg::Event, y.cuda_event as u64);
            }
        }
        Event::Api(a) => {
            correlation(b, a.correlation);
            arg_u(b, Arg::Cbid, a.cbid as u64);
            if a.return_value != 0 {
                arg_u(b, Arg::Return, a.return_value as u64);
            }
        }
        Event::Marker(m) => {
            if m.domain != StringId::EMPTY {
                arg_s(b, Arg::Domain, &t.name(m.domain));
            }
        }
        Event::Collective(c) => {
            arg_s(b, Arg::Comm, &format!("{:016x}", c.comm.0));
            arg_u(b, Arg::Seq, c.seq);
            arg_u(b, Arg::Count, c.count);
            arg_s(b, Arg::Dtype, &t.name(c.datatype));
            arg_u(b, Arg::Bytes, c.bytes);
            if c.rank == RANK_UNKNOWN {
                arg_i(b, Arg::Rank, -1);
            } else {
                arg_u(b, Arg::Rank, c.rank as u64);
            }
            arg_u(b, Arg::GroupSize, c.nranks as u64);
            if c.root >= 0 {
                arg_i(b, Arg::Root, c.root as i64);
            }
            if c.algorithm != StringId::EMPTY {
                arg_s(b, Arg::Algorithm, &t.name(c.algorithm));
            }
            if c.protocol != StringId::EMPTY {
                arg_s(b, Arg::Protocol, &t.name(c.protocol));
            }
            if c.channels != 0 {
                arg_u(b, Arg::Channels, c.channels as u64);
            }
            arg_u(b, Arg::Device, c.device.0 as u64);
            if c.correlation.0 != 0 {
                arg_u(b, Arg::Correlation, c.correlation.0 as u64);
            }
        }
        Event::Loss(l) => {
            arg_s(b, Arg::Source, l.source.name());
            arg_u(b, Arg::Count, l.count);
            if l.detail != StringId::EMPTY {
                arg_s(b, Arg::Detail, &t.name(l.detail));
            }
        }
        Event::GraphLaunch(g) => {
            lane.kernel_ids.put(b);
            correlation(b, g.correlation);
            arg_u(b, Arg::GraphId, g.graph_id as u64);
        }
        // The walk hands no counter samples over (see `walk`).
        Event::Counter(_) | Event::Request(_) => {}
    }
    corr
}

/// What a begin packet holds after its timestamp for every event of one
/// dictionary entry, around the correlation annotation (`head`: the lane's
/// fields, name, category and the annotations before the correlation;
/// `tail`: those after it). Kernels, copies, memsets, synchronizations,
/// CUDA calls and NVTX marks: everything in their packets but the times,
/// the correlation id and the flow is an attribute of their entry.
/// Collectives and losses (series other than times and correlation) get
/// none: the walk gives them no entry state.
#[derive(Clone, Copy, Default)]
struct EntryBytes {
    /// Empty: not made yet (a head holds at least the lane's fields).
    head: Inline<64>,
    tail: Inline<96>,
    /// Whether a correlation annotation goes between.
    corr: bool,
}

impl EntryBytes {
    /// From a packet body after its timestamp, its correlation annotation at
    /// `corr` and its flow (if any) starting at `end`, all offsets in
    /// `body`; `None` when a part is too long to keep.
    fn new(body: &[u8], corr: Option<(usize, usize)>, end: usize) -> Option<EntryBytes> {
        let (head, tail) = match corr {
            Some((c0, c1)) => (&body[..c0], &body[c1..end]),
            None => (&body[..end], &body[end..end]),
        };
        Some(EntryBytes {
            head: Inline::new(head)?,
            tail: Inline::new(tail)?,
            corr: corr.is_some(),
        })
    }
}

/// The flow id field, if any (at most 18 bytes of room).
#[inline(always)]
fn write_flow(r: &mut Room<'_>, flow: Flow) {
    match flow {
        Flow::Out(id) => r.fixed64(E_FLOW_IDS, id),
        Flow::In(id) => r.fixed64(E_TERMINATING_FLOW_IDS, id),
        Flow::None => {}
    }
}

impl<W: Write> ProtoWriter<W> {
    /// Intern the names first used by the current packet, in it.
    #[inline]
    fn write_new_names(&mut self) {
        if !self.new_names.is_empty() {
            self.write_names();
        }
    }

    #[cold]
    fn write_names(&mut self) {
        let b = &mut self.out.buf;
        let i = begin(b, P_INTERNED);
        for (iid, name) in self.new_names.drain(..) {
            let n = begin(b, 2); // event_names
            uint(b, 1, iid);
            bytes(b, 2, name.as_bytes());
            end(b, n);
        }
        end(b, i);
    }

    fn event_name(&mut self, input: &Input<'_>, e: &Event) -> u64 {
        match e {
            Event::Kernel(k) => self.name_iid_id(input, k.name),
            Event::Api(a) => self.name_iid_id(input, a.name),
            Event::Marker(m) => self.name_iid_id(input, m.name),
            Event::Memcpy(m) => self.name_iid_label(&crate::memcpy_label(m)),
            Event::Memset(m) => self.name_iid_label(&crate::memset_label(m)),
            Event::Sync(y) => self.name_iid_label(crate::sync_label(y.kind)),
            Event::GraphLaunch(g) => self.name_iid_label(&crate::graph_label(g)),
            Event::Collective(c) => {
                let op = input.trace.name(c.op);
                self.name_iid_label(&format!("nccl:{op}"))
            }
            Event::Loss(l) => self.name_iid_label(&format!("lost records: {}", l.source)),
            Event::Counter(c) => self.name_iid_id(input, c.metric),
            Event::Request(r) => self.name_iid_label(&format!("request {}", r.phase)),
        }
    }

    /// An event whose entry's bytes are kept: its packet (and that of the
    /// slice it follows) from them, its times, correlation id and flow.
    #[inline(always)]
    fn event_kept(&mut self, item: &Item<'_>, bytes: &EntryBytes) -> Result<()> {
        // The slice that ends first: packet tag and length (3), timestamp
        // (11), the rest (24 copied). Then the begin packet: tag and
        // length, timestamp, head (64 copied), correlation (10), tail (96
        // copied), flow (10): 238 bytes, and the checks' longest forms
        // (the flow's 18) fit in 256.
        let mut r = Room::new(&mut self.out.buf, 256);
        if let Some(at) = item.ended {
            // A slice ends only on a lane one of its events described.
            let track = self.lane_tracks.get(item.lane_id.index()).filter(|t| t.uuid != 0);
            debug_assert!(track.is_some(), "a slice ends on a described track");
            if let Some(track) = track {
                let p = r.begin_wide(PKT);
                r.time(P_TIMESTAMP, at);
                r.run(&track.end.bytes, track.end.len as usize);
                r.end_wide(p);
            }
        }
        let p = r.begin_wide(PKT);
        r.time(P_TIMESTAMP, item.start);
        let at = r.written();
        r.run(&bytes.head.bytes, bytes.head.len as usize);
        if bytes.corr {
            // Stored a byte at a time: assembled on the stack first, its
            // 16-byte copy would stall on forwarding from the byte stores.
            let len_at = r.written() + 1;
            let head = [
                ((E_DEBUG << 3) | 2) as u8,
                0,
                (A_NAME_IID << 3) as u8,
                Arg::Correlation as u8,
                (A_UINT << 3) as u8,
            ];
            r.prefixed_varint(head, item.corr as u64);
            r.set_byte(len_at, (r.written() - len_at - 1) as u8);
        }
        r.run(&bytes.tail.bytes, bytes.tail.len as usize);
        write_flow(&mut r, item.flow);
        r.end_wide(at + BEGIN_TYPE_AT - 1);
        r.end_wide(p);
        r.done();
        self.out.maybe_flush()?;
        Ok(())
    }

    /// An event's packet made field by field (the first event of its
    /// entry, an entry past the first [`crate::walk::ENTRY_STATES`] of its
    /// chunk, a collective or a loss); keeps the entry's bytes for its
    /// next events.
    #[inline(never)]
    fn event_uncached(&mut self, input: &Input<'_>, item: &Item<'_>, state: Option<&mut EntryBytes>) -> Result<()> {
        // Without args, a packet holds only attributes of the event's entry.
        let event = if self.args {
            item.event()
        } else {
            std::borrow::Cow::Borrowed(item.attributes())
        };
        let e = &*event;
        let track = self.lane_track(input, item.lane, item.lane_id, Some(e));
        let name = self.event_name(input, e);
        let b = &mut self.out.buf;
        let p = begin_wide(b, PKT);
        uint_time(b, P_TIMESTAMP, item.start);
        // The track event (with arguments, often over 127 bytes: a two-byte
        // length) starts with the lane's constant fields.
        let t = &self.lane_tracks[track];
        let at = b.len();
        let te = at + BEGIN_TYPE_AT - 1;
        t.begin.put(b);
        if crate::walk::is_instant(e) {
            b[at + BEGIN_TYPE_AT] = TYPE_INSTANT as u8;
        }
        uint(b, E_NAME_IID, name);
        uint(b, E_CATEGORY_IIDS, category(e));
        let corr = if self.args {
            write_args(b, &mut self.arg_cache, input, e, t)
        } else {
            None
        };
        if let Some(state) = state {
            let rel = corr.map(|(c0, c1)| (c0 - at, c1 - at));
            if let Some(bytes) = EntryBytes::new(&b[at..], rel, b.len() - at) {
                *state = bytes;
            }
        }
        let mut r = Room::new(b, 18);
        write_flow(&mut r, item.flow);
        r.done();
        end_wide(b, te);
        self.write_new_names();
        end_wide(&mut self.out.buf, p);
        self.out.maybe_flush()?;
        Ok(())
    }
}

impl<W: Write> Visitor for ProtoWriter<W> {
    type EntryState = EntryBytes;

    fn begin_input(&mut self, input: &Input<'_>) -> Result<()> {
        // Lane ids are per input.
        self.lane_tracks.clear();
        let h = input.trace.header();
        let pid = self.inputs[input.ordinal].pid;
        let name = crate::process_label(input.rank, h);
        let labels = if h.producer == Producer::Synthetic {
            "synthetic (not a GPU measurement)"
        } else {
            ""
        };
        let rank = input.rank.0 as u64;
        self.descriptor(TrackKey::Process(input.ordinal), |b| {
            let p = begin(b, 3);
            uint(b, 1, pid);
            for arg in &h.command {
                bytes(b, 2, arg.as_bytes());
            }
            bytes(b, 6, name.as_bytes());
            if !labels.is_empty() {
                bytes(b, 8, labels.as_bytes());
            }
            end(b, p);
            uint(b, 12, rank); // sibling_order_rank
        });
        Ok(())
    }

    #[inline]
    fn event(&mut self, input: &Input<'_>, item: &Item<'_>, state: Option<&mut EntryBytes>) -> Result<()> {
        match state {
            Some(bytes) if !bytes.head.is_empty() => self.event_kept(item, bytes),
            state => {
                if let Some(at) = item.ended {
                    self.end_slice(input, item.lane_id, at)?;
                }
                self.event_uncached(input, item, state)
            }
        }
    }

    fn gpu_annotation(&mut self, input: &Input<'_>, lane: Lane, id: LaneId, name: StringId, start: u64, _end: u64) -> Result<()> {
        self.second_slice_begin(input, lane, id, name, start, GPU_USER_ANNOTATION)
    }

    fn comm_library(
        &mut self,
        input: &Input<'_>,
        lane: Lane,
        id: LaneId,
        _library: &str,
        name: StringId,
        start: u64,
        _end: u64,
    ) -> Result<()> {
        self.second_slice_begin(input, lane, id, name, start, GPUTRACE_COMMUNICATION)
    }

    fn utilization(&mut self, input: &Input<'_>, util: &Utilization) -> Result<()> {
        let ordinal = input.ordinal;
        let Some(gpu) = self.uuid(TrackKey::Gpu(ordinal, util.device)) else {
            return Ok(());
        };
        let series = [
            (COMPUTE, "compute"),
            (COMMUNICATION, "communication"),
            (TRANSFER, "transfer"),
            (BUSY, "idle"),
        ];
        for (rank, (category, label)) in series.into_iter().enumerate() {
            let name = format!("GPU {} {label} %", util.device);
            let track = self.descriptor(TrackKey::Counter(ordinal, util.device, category), |b| {
                uint(b, 5, gpu);
                bytes(b, 2, name.as_bytes());
                let c = begin(b, 8); // CounterDescriptor
                bytes(b, 6, b"%"); // unit_name
                end(b, c);
                uint(b, 12, 1000 + rank as u64); // after the streams
                uint(b, 15, 2); // SIBLING_MERGE_BEHAVIOR_NONE
            });
            for (i, bin) in util.bins.iter().enumerate() {
                let share = 100.0 * bin[category] as f64 / util.width(i) as f64;
                let value = if category == BUSY { 100.0 - share } else { share };
                let b = &mut self.out.buf;
                let p = begin_wide(b, PKT);
                uint_time(b, P_TIMESTAMP, util.from + i as u64 * util.bin_ns);
                uint(b, P_SEQ_ID, SEQUENCE_ID);
                uint(b, P_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE);
                let te = begin(b, P_TRACK_EVENT);
                uint(b, E_TYPE, TYPE_COUNTER);
                uint(b, E_TRACK_UUID, track);
                double(b, E_DOUBLE_COUNTER_VALUE, value.clamp(0.0, 100.0));
                end(b, te);
                end_wide(b, p);
            }
            self.out.maybe_flush()?;
        }
        Ok(())
    }

    fn counters(&mut self, input: &Input<'_>, series: &[CounterSeries]) -> Result<()> {
        let ordinal = input.ordinal;
        for (k, s) in series.iter().enumerate() {
            // Drawn under its GPU's track; a GPU without events in the window has none.
            let Some(gpu) = self.uuid(TrackKey::Gpu(ordinal, s.device)) else {
                continue;
            };
            let (label, unit, scale) = counter_display(&s.metric);
            let name = format!("GPU {} {label}", s.device.0);
            let track = self.descriptor(TrackKey::Series(ordinal, s.device, k), |b| {
                uint(b, 5, gpu);
                bytes(b, 2, name.as_bytes());
                let c = begin(b, 8); // CounterDescriptor
                bytes(b, 6, unit.as_bytes()); // unit_name
                end(b, c);
                uint(b, 12, 2000 + k as u64); // after the utilization counters
                uint(b, 15, 2); // SIBLING_MERGE_BEHAVIOR_NONE
            });
            for &(t, v) in &s.samples {
                let b = &mut self.out.buf;
                let p = begin_wide(b, PKT);
                uint_time(b, P_TIMESTAMP, t.0);
                uint(b, P_SEQ_ID, SEQUENCE_ID);
                uint(b, P_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE);
                let te = begin(b, P_TRACK_EVENT);
                uint(b, E_TYPE, TYPE_COUNTER);
                uint(b, E_TRACK_UUID, track);
                double(b, E_DOUBLE_COUNTER_VALUE, v as f64 * scale);
                end(b, te);
                end_wide(b, p);
                self.out.maybe_flush()?;
            }
        }
        Ok(())
    }

    fn host_samples(&mut self, input: &Input<'_>, tracks: &[crate::host::HostTrack]) -> Result<()> {
        // A run's state, CPU time and samples under the annotation names `kind`, `value` and `count`.
        let arg = |name: &str| ARG_NAMES.iter().position(|n| *n == name).expect("an argument name") as u64 + 1;
        let (kind, value, count) = (arg("kind"), arg("value"), arg("count"));
        let proc_uuid = self
            .uuid(TrackKey::Process(input.ordinal))
            .expect("process described in begin_input");
        for (k, t) in tracks.iter().enumerate() {
            let track = self.descriptor(TrackKey::HostSamples(input.ordinal, k), |b| {
                uint(b, 5, proc_uuid);
                bytes(b, 2, t.name.as_bytes());
                uint(b, 12, 3000 + k as u64); // after the counters
                uint(b, 15, 2); // SIBLING_MERGE_BEHAVIOR_NONE
            });
            for (at, slice) in crate::host::begin_end(&t.slices) {
                let name = slice.map(|s| self.name_iid_label(&s.name));
                let b = &mut self.out.buf;
                let p = begin_wide(b, PKT);
                uint_time(b, P_TIMESTAMP, at);
                uint(b, P_SEQ_ID, SEQUENCE_ID);
                uint(b, P_FLAGS, SEQ_NEEDS_INCREMENTAL_STATE);
                let te = begin(b, P_TRACK_EVENT);
                uint(b, E_TRACK_UUID, track);
                match (slice, name) {
                    (Some(s), Some(name)) => {
                        uint(b, E_TYPE, TYPE_SLICE_BEGIN);
                        uint(b, E_NAME_IID, name);
                        if let Some((state, cpu_ns, samples)) = s.run {
                            // DebugAnnotation: name_iid (1), uint_value (3), string_value (6).
                            let d = begin(b, E_DEBUG);
                            uint(b, 1, kind);
                            bytes(b, 6, state.as_bytes());
                            end(b, d);
                            for (iid, v) in [(value, cpu_ns), (count, u64::from(samples))] {
                                let d = begin(b, E_DEBUG);
                                uint(b, 1, iid);
                                uint(b, 3, v);
                                end(b, d);
                            }
                        }
                    }
                    _ => uint(b, E_TYPE, TYPE_SLICE_END),
                }
                end(b, te);
                self.write_new_names();
                end_wide(&mut self.out.buf, p);
                self.out.maybe_flush()?;
            }
        }
        Ok(())
    }

    fn end_slice(&mut self, _: &Input<'_>, lane: LaneId, at: u64) -> Result<()> {
        // A slice ends only on a lane one of its events described.
        let Some(track) = self.lane_tracks.get(lane.index()).filter(|t| t.uuid != 0) else {
            // An end without its begin would unbalance every slice after it on the
            // track: fail rather than write a wrong timeline.
            return Err(crate::ExportError::Internal(format!(
                "a slice ends at {at} on lane {} where no event began one",
                lane.0
            )));
        };
        // Packet tag and length (3), timestamp (11), the rest (24 copied).
        let mut r = Room::new(&mut self.out.buf, 3 + 11 + 24);
        let p = r.begin_wide(PKT);
        r.time(P_TIMESTAMP, at);
        r.run(&track.end.bytes, track.end.len as usize);
        r.end_wide(p);
        r.done();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{Filter, Job, Plan};

    #[test]
    fn an_unbalanced_slice_end_is_an_error_not_a_silent_drop() {
        let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
        let name = w.intern("gemm");
        w.push(Event::Kernel(Kernel {
            start: Nanos(1_000),
            end: Nanos(2_000),
            name,
            ..Kernel::default()
        }))
        .unwrap();
        let trace = TraceFile::from_bytes("t.gtrace", w.finish(Trailer::default()).unwrap()).unwrap();
        let job = Job::new([&trace]);
        let plan = Plan::new(&job, &Filter::default()).unwrap();
        let mut writer = ProtoWriter::new(&job, &plan, Vec::new(), true);
        let input = Input {
            ordinal: 0,
            trace: &trace,
            rank: Rank(0),
        };
        let e = writer.end_slice(&input, LaneId(7), 1_500).unwrap_err();
        assert!(matches!(e, crate::ExportError::Internal(_)), "{e}");
        assert!(e.to_string().contains("lane 7"), "{e}");
    }
}
