//! Chrome trace event JSON in the dialect of PyTorch's Kineto, so that
//! chrome://tracing, Perfetto, TensorBoard, HTA and TraceLens read it.
//!
//! Layout (one rank, as Kineto writes it):
//! - top level: `schemaVersion`, `deviceProperties`, `distributedInfo`
//!   (`backend`, `rank`, `world_size`), CUDA versions, `displayTimeUnit`,
//!   `baseTimeNanoseconds`, then `traceEvents`, then a `gputrace` object with
//!   the export's counts;
//! - `ts`/`dur` in µs with three decimals relative to `baseTimeNanoseconds`,
//!   printed from integer nanoseconds (no float rounding);
//! - GPU work: `pid` = device ordinal, `tid` = stream id; categories
//!   `kernel`, `gpu_memcpy`, `gpu_memset`, `cuda_sync`; `args` with `device`,
//!   `context`, `stream`, `correlation`, `grid`, `block`, `bytes`, ...;
//! - host: `pid` = process id, `tid` = thread id; `cuda_runtime` /
//!   `cuda_driver` API calls with `correlation` and `cbid`; NVTX ranges as
//!   `user_annotation`, and on each GPU stream as `gpu_user_annotation`
//!   spanning the work launched inside the range (when the range's
//!   correlation ids are not shared with another thread's calls);
//! - `ac2g` flow events (`s` on the launch, `f` with `bp: "e"` on the GPU
//!   work, `id` = correlation id);
//! - NCCL collectives (`cat: "nccl_collective"`) on a lane of their GPU,
//!   with PyTorch's comms metadata keys (`Collective name`,
//!   `In msg nelems`, `Group size`, `dtype`, `Process Group Name`, `Seq`, ...);
//! - loss records as process-scoped instants (`cat: "gputrace_loss"`).
//!
//! With several ranks in one file, pids are made unique: a rank's host
//! process keeps its pid unless another rank has the same one
//! ([`CLASH_PID_BASE`]), and its GPUs get [`MERGED_GPU_PID_BASE`]
//! ` + 1000 × position + device`. HTA and TraceLens expect one file per
//! rank; merged files are for looking at.

use crate::error::Result;
use crate::job::{Filter, Job, Plan};
use crate::out::*;
use crate::walk::{counter_display, walk, CommLibraries, Flow, Input, Item, Lane, LaneId, Visitor, WalkOptions};
use crate::{ExportStats, Exporter};
use gputrace_format::*;
use rustc_hash::{FxHashMap, FxHashSet};
use std::io::Write;
use std::ops::Range;

/// Lane tids above stream ids: synchronizations of stream `s` use
/// `SYNC_TID_BASE + s`, communicator `i` of a rank uses `COMM_TID_BASE + i`.
pub const SYNC_TID_BASE: u64 = 1_000_000;
/// See [`SYNC_TID_BASE`].
pub const COMM_TID_BASE: u64 = 2_000_000;
/// The `i`-th track of a communication library's kernels (one per library and
/// stream) of a rank uses `LIBRARY_TID_BASE + i`.
pub const LIBRARY_TID_BASE: u64 = 3_000_000;
/// The `i`-th host samples track of a rank (one per sampled thread) uses
/// `HOST_SAMPLES_TID_BASE + i`, above every Linux tid (2^22).
pub const HOST_SAMPLES_TID_BASE: u64 = 5_000_000;
/// With several ranks in one file, GPU `d` of the input at position `i` gets
/// pid `MERGED_GPU_PID_BASE + 1000 × i + d` (Linux pids stay below 2^22).
pub const MERGED_GPU_PID_BASE: u64 = 1_000_000_000;
/// Host pid of the input at position `i` when another input has the same pid.
pub const CLASH_PID_BASE: u64 = 900_000_000;
/// tid used for events whose stream is unknown (context-wide).
pub const UNKNOWN_STREAM_TID: u64 = 999_999;

/// The Chrome/Kineto JSON writer.
#[derive(Clone, Copy, Debug, Default)]
pub struct ChromeJson;

impl Exporter for ChromeJson {
    fn export<W: Write>(&self, job: &Job<'_>, filter: &Filter, out: W) -> Result<ExportStats> {
        let plan = Plan::new(job, filter)?;
        let mut w = JsonWriter::new(job, &plan, out);
        w.header(job, &plan);
        let walked = walk(
            job,
            filter,
            &plan,
            WalkOptions {
                bins: 0,
                gpu_annotations: true,
                gpu_step_annotations: false,
            },
            &mut w,
        )?;
        let buf = &mut w.out.buf;
        buf.extend_from_slice(b"\n],\n\"gputrace\":{\"version\":");
        put_json_str(buf, env!("CARGO_PKG_VERSION"));
        buf.extend_from_slice(b",\"events\":");
        put_u64(buf, walked.events);
        buf.extend_from_slice(b",\"flows\":");
        put_u64(buf, walked.flows);
        buf.extend_from_slice(b",\"adjusted\":");
        put_u64(buf, walked.adjusted);
        buf.extend_from_slice(b",\"truncated\":");
        buf.extend_from_slice(if walked.truncated { b"true" } else { b"false" });
        buf.extend_from_slice(b"}\n}\n");
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
    host_pid: u64,
    gpu_pid_base: u64,
    /// Escaped string literals by string id, filled on first use.
    names: Vec<Option<Box<[u8]>>>,
    lanes: FxHashSet<Lane>,
    gpus: FxHashSet<DeviceId>,
    comms: Vec<CommId>,
    /// The communication-library tracks, in the order first met.
    library_lanes: Vec<Lane>,
    /// NCCL collectives by the (device, correlation id) of the kernel that ran
    /// them, so that kernel events carry PyTorch's collective args as Kineto
    /// writes them (what TraceLens and HTA read). At most
    /// [`MAX_LINKED_COLLECTIVES`] per input (bounded memory).
    kernel_coll: FxHashMap<(u32, u32), Collective>,
    /// Kineto's `External id`s of an imported Kineto trace (else empty).
    external: ExternalIds,
}

/// Kineto's `External id`s, made up again for an imported Kineto trace
/// (the importer keeps no ids): each CPU range (operator or annotation) of
/// a thread gets its own number (1, 2, ... in thread then start order), a
/// CUDA call the number of the innermost operator (`cpu_op`, not
/// annotation: PyTorch links GPU work to operators only) around it on its
/// thread (0 outside any), and GPU work its launch's number. This is how
/// Kineto links them; TensorBoard's profiler plugin counts a kernel as
/// communication when its number is that of an `nccl:*` range.
#[derive(Default)]
struct ExternalIds {
    /// Whether the input has them (an imported Kineto trace).
    on: bool,
    /// By (thread, start, end, name) of a range.
    ranges: FxHashMap<(u32, u64, u64, u32), u32>,
    /// By the correlation id of a CUDA call.
    calls: FxHashMap<u32, u32>,
    /// The GPU of each stream number (the first that has it), where an
    /// imported `gpu_user_annotation` (whose thread is its stream) is drawn.
    stream_gpu: FxHashMap<u32, DeviceId>,
}

/// Ranges and calls given `External id`s per input at most (some 24 bytes
/// each); the ones past it are written without one.
const MAX_EXTERNAL_IDS: usize = 1 << 22;

impl ExternalIds {
    fn of(trace: &TraceFile) -> ExternalIds {
        let mut ids = ExternalIds {
            on: crate::is_kineto_import(trace.header()),
            ..ExternalIds::default()
        };
        if !ids.on {
            return ids;
        }
        for k in trace.tracks() {
            if let Track::Gpu { device, stream, .. } = k.track {
                ids.stream_gpu.entry(stream.0).or_insert(device);
            }
        }
        // Per thread: (start, end, range name and whether it is an operator,
        // or None for a call; correlation).
        type Item = (u64, u64, Option<(StringId, bool)>, u32);
        let mut threads: FxHashMap<u32, Vec<Item>> = FxHashMap::default();
        let mut taken = 0usize;
        for e in trace.events_of(&[EventKind::Api, EventKind::Marker]) {
            // A damaged chunk is reported by the walk itself.
            let item = match e {
                Ok(Event::Api(a)) => (a.thread.0, (a.start.0, a.end.0, None, a.correlation.0)),
                Ok(Event::Marker(m)) if m.kind == MarkerKind::RANGE => match crate::kineto_category(&trace.name(m.domain)) {
                    Some(cat @ ("cpu_op" | "user_annotation")) => (m.thread.0, (m.start.0, m.end.0, Some((m.name, cat == "cpu_op")), 0)),
                    _ => continue,
                },
                _ => continue,
            };
            taken += 1;
            if taken > MAX_EXTERNAL_IDS {
                break;
            }
            threads.entry(item.0).or_default().push(item.1);
        }
        let mut tids: Vec<u32> = threads.keys().copied().collect();
        tids.sort_unstable();
        let mut next = 1u32;
        for tid in tids {
            let items = threads.get_mut(&tid).map(std::mem::take).unwrap_or_default();
            let mut items = items;
            // Outer before inner: earlier start, then later end, ranges before calls.
            items.sort_by_key(|&(s, e, name, _)| (s, std::cmp::Reverse(e), name.is_none()));
            // Open operators: (start, end, id); each holds the next.
            let mut open: Vec<(u64, u64, u32)> = Vec::new();
            for (s, e, name, corr) in items {
                while open.last().is_some_and(|&(os, oe, _)| !(os <= s && e <= oe)) {
                    open.pop();
                }
                match name {
                    Some((name, operator)) => {
                        ids.ranges.insert((tid, s, e, name.0), next);
                        if operator {
                            open.push((s, e, next));
                        }
                        next += 1;
                    }
                    None if corr != 0 => {
                        ids.calls.insert(corr, open.last().map_or(0, |o| o.2));
                    }
                    None => {}
                }
            }
        }
        ids
    }
}

/// Collectives remembered per input for their kernels' args (about 120 bytes
/// each); kernels of the ones past it carry no collective args.
const MAX_LINKED_COLLECTIVES: usize = 1 << 18;

/// The linked collectives of a trace, by their kernel's (device, correlation).
fn linked_collectives(trace: &TraceFile) -> FxHashMap<(u32, u32), Collective> {
    let mut map = FxHashMap::default();
    for e in trace.events_of(&[EventKind::Collective]) {
        // A damaged chunk is reported by the walk itself.
        let Ok(Event::Collective(c)) = e else { continue };
        if c.correlation.0 != 0 {
            map.insert((c.device.0, c.correlation.0), c);
            if map.len() >= MAX_LINKED_COLLECTIVES {
                break;
            }
        }
    }
    map
}

/// PyTorch's "In msg nelems" / "Out msg nelems" for NCCL's per-rank count:
/// whole buffers, so AllGather's output and ReduceScatter's input are n times
/// NCCL's count.
fn msg_nelems(op: &str, count: u64, nranks: u32) -> (u64, u64) {
    let n = nranks.max(1) as u64;
    match op {
        "AllGather" => (count, count.saturating_mul(n)),
        "ReduceScatter" => (count.saturating_mul(n), count),
        _ => (count, count),
    }
}

/// What an event's opening text is made of (see `JsonWriter::open_named_at`).
#[derive(Clone, Copy, PartialEq, Eq)]
struct PrefixKey {
    ordinal: u32,
    /// Index into [`PrefixKey::CATS`].
    cat: u8,
    name: u32,
    pid: u64,
    tid: u64,
}

impl PrefixKey {
    const KERNEL: u8 = 0;
    const RUNTIME: u8 = 1;
    const DRIVER: u8 = 2;
    const CATS: [&'static [u8]; 3] = [b"kernel", b"cuda_runtime", b"cuda_driver"];

    fn hash(&self) -> u64 {
        (self.name as u64) ^ (self.cat as u64) << 32 ^ self.tid.rotate_left(40) ^ self.pid.rotate_left(20) ^ (self.ordinal as u64) << 56
    }
}

struct JsonWriter<W: Write> {
    out: Out<W>,
    base: u64,
    first: bool,
    inputs: Vec<InputState>,
    /// (pid, tid) by [`LaneId`] of the current input (`None`: not placed yet).
    places: Vec<Option<(u64, u64)>>,
    /// `,"pid":…,"tid":…,"ts":` by (pid, tid).
    place_text: TextCache<(u64, u64), 64>,
    /// `,"args":{"device":…,"context":…,"stream":…` by those ids.
    gpu_text: TextCache<GpuIdsKey, 64>,
    /// A kernel's registers, shared memory, grid and block args by their values.
    launch_text: TextCache<LaunchKey, 1024>,
    /// The opening of the events that make up nearly every trace (kernels
    /// and CUDA calls): `,\n{"ph":"X","cat":…,"name":…,"pid":…,"tid":…,"ts":`
    /// by what it is made of, marked where its place (`,"pid":…`) starts.
    prefix_text: TextCache<PrefixKey, 1024>,
    /// An API call's `,"args":{"cbid":…` by cbid.
    cbid_text: TextCache<u32, 256>,
    /// The current event's `,"pid":…,"tid":…,"ts":…` text: its (pid, tid,
    /// ts) and where it lies in `out.buf`, so that its flow copies it
    /// (empty before the event writes it; nothing is flushed in between).
    last_place: ((u64, u64, u64), Range<usize>),
    /// The current event's correlation id and where its digits lie (see
    /// `last_place`).
    last_corr: (u64, Range<usize>),
    /// Names of the communication-library tracks' libraries.
    libraries: CommLibraries,
}

/// `key` then `[x,y,z]`.
fn put_dims(b: &mut Vec<u8>, key: &[u8], d: [u32; 3]) {
    b.extend_from_slice(key);
    b.push(b'[');
    put_u64(b, d[0] as u64);
    b.push(b',');
    put_u64(b, d[1] as u64);
    b.push(b',');
    put_u64(b, d[2] as u64);
    b.push(b']');
}

fn stream_tid(s: StreamId) -> u64 {
    if s == StreamId::UNKNOWN {
        UNKNOWN_STREAM_TID
    } else {
        s.0 as u64
    }
}

impl<W: Write> JsonWriter<W> {
    fn new(job: &Job<'_>, plan: &Plan, out: W) -> Self {
        let merged = plan.inputs.len() > 1;
        let pids: Vec<u32> = plan.inputs.iter().map(|&i| job.inputs()[i].trace.header().pid).collect();
        let inputs = plan
            .inputs
            .iter()
            .enumerate()
            .map(|(ordinal, &i)| {
                let trace = job.inputs()[i].trace;
                let pid = trace.header().pid;
                let clash = pids.iter().filter(|&&p| p == pid).count() > 1;
                InputState {
                    host_pid: if clash { CLASH_PID_BASE + ordinal as u64 } else { pid as u64 },
                    gpu_pid_base: if merged { MERGED_GPU_PID_BASE + 1000 * ordinal as u64 } else { 0 },
                    names: vec![None; trace.string_count()],
                    lanes: FxHashSet::default(),
                    gpus: FxHashSet::default(),
                    comms: Vec::new(),
                    library_lanes: Vec::new(),
                    kernel_coll: linked_collectives(trace),
                    external: ExternalIds::of(trace),
                }
            })
            .collect();
        JsonWriter {
            out: Out::new(out),
            base: plan.base,
            first: true,
            inputs,
            places: Vec::new(),
            place_text: TextCache::new(),
            gpu_text: TextCache::new(),
            launch_text: TextCache::new(),
            prefix_text: TextCache::new(),
            cbid_text: TextCache::new(),
            last_place: ((0, 0, 0), 0..0),
            last_corr: (0, 0..0),
            libraries: CommLibraries::of(job.classifier()),
        }
    }

    fn header(&mut self, job: &Job<'_>, plan: &Plan) {
        let b = &mut self.out.buf;
        b.extend_from_slice(b"{\n\"schemaVersion\":1,\n\"deviceProperties\":[");
        let mut first = true;
        for &i in &plan.inputs {
            let h = job.inputs()[i].trace.header();
            for d in &h.devices {
                if !first {
                    b.push(b',');
                }
                first = false;
                b.extend_from_slice(b"\n{\"id\":");
                put_u64(b, d.ordinal.0 as u64);
                b.extend_from_slice(b",\"name\":");
                put_json_str(b, &d.name);
                b.extend_from_slice(b",\"totalGlobalMem\":");
                put_u64(b, d.memory_bytes);
                b.extend_from_slice(b",\"computeMajor\":");
                put_u64(b, d.compute_capability.0 as u64);
                b.extend_from_slice(b",\"computeMinor\":");
                put_u64(b, d.compute_capability.1 as u64);
                b.extend_from_slice(b",\"numSms\":");
                put_u64(b, d.sm_count as u64);
                b.extend_from_slice(b",\"uuid\":");
                put_json_str(b, &d.uuid);
                b.extend_from_slice(b",\"pciBusId\":");
                put_json_str(b, &d.pci_bus_id);
                if plan.inputs.len() > 1 {
                    b.extend_from_slice(b",\"rank\":");
                    put_u64(b, job.rank(i).0 as u64);
                }
                b.push(b'}');
            }
        }
        b.extend_from_slice(b"],\n");
        let first_header = job.inputs()[plan.inputs[0]].trace.header();
        if plan.inputs.len() == 1 && first_header.rank.rank.is_some() {
            // Spaced as Kineto writes it: HTA finds the rank with the regex
            // `"rank":\s+(\d+)` on the first line that matches.
            b.extend_from_slice(b"\"distributedInfo\": {\"backend\": \"nccl\", \"rank\": ");
            put_u64(b, job.rank(plan.inputs[0]).0 as u64);
            b.extend_from_slice(b", \"world_size\": ");
            put_u64(b, first_header.rank.world_size.unwrap_or(1) as u64);
            b.extend_from_slice(b"},\n");
        }
        let versions = [
            ("cuda_driver_version", first_header.cuda.driver),
            ("cuda_runtime_version", first_header.cuda.runtime),
            ("cupti_version", first_header.cuda.cupti),
        ];
        for (key, v) in versions {
            if let Some(v) = v {
                put_json_str(b, key);
                b.push(b':');
                put_u64(b, v as u64);
                b.extend_from_slice(b",\n");
            }
        }
        b.extend_from_slice(b"\"gputraceRanks\":[");
        for (n, &i) in plan.inputs.iter().enumerate() {
            let h = job.inputs()[i].trace.header();
            if n > 0 {
                b.push(b',');
            }
            b.extend_from_slice(b"{\"rank\":");
            put_u64(b, job.rank(i).0 as u64);
            b.extend_from_slice(b",\"host\":");
            put_json_str(b, &h.hostname);
            b.extend_from_slice(b",\"pid\":");
            put_u64(b, h.pid as u64);
            b.extend_from_slice(b",\"shiftNs\":");
            put_i64(b, job.shift(i));
            b.extend_from_slice(b",\"synthetic\":");
            b.extend_from_slice(if h.producer == Producer::Synthetic { b"true" } else { b"false" });
            b.push(b'}');
        }
        b.extend_from_slice(b"],\n\"displayTimeUnit\":\"ms\",\n\"baseTimeNanoseconds\":");
        put_u64(b, plan.base);
        b.extend_from_slice(b",\n\"traceEvents\":[");
    }

    /// PyTorch's collective args (`Collective name`, `In msg nelems`, …), as
    /// Kineto writes them on NCCL kernels, after other args.
    fn collective_args(&mut self, input: &Input<'_>, c: &Collective) {
        let t = input.trace;
        let op = t.name(c.op);
        let (in_n, out_n) = msg_nelems(&op, c.count, c.nranks);
        self.arg_str(b",\"Collective name\":", &op);
        self.arg_u64(b",\"In msg nelems\":", in_n);
        self.arg_u64(b",\"Out msg nelems\":", out_n);
        self.arg_u64(b",\"Group size\":", c.nranks as u64);
        self.arg_str(b",\"dtype\":", &t.name(c.datatype));
        self.arg_str(b",\"Process Group Name\":", &format!("{:016x}", c.comm.0));
        let desc = t.communicators().iter().find(|k| k.id == c.comm).map_or("", |k| k.name.as_str());
        self.arg_str(
            b",\"Process Group Description\":",
            if desc.is_empty() { "NCCL communicator" } else { desc },
        );
        if c.rank == RANK_UNKNOWN {
            // Kineto's own value for a rank it does not know.
            self.out.buf.extend_from_slice(b",\"Rank\":-1");
        } else {
            self.arg_u64(b",\"Rank\":", c.rank as u64);
        }
        self.arg_u64(b",\"Seq\":", c.seq);
    }

    /// Start an event object: separator, `ph`, `cat`.
    #[inline]
    fn open(&mut self, ph: &[u8], cat: &[u8]) {
        let b = &mut self.out.buf;
        b.extend_from_slice(if self.first { b"\n{\"ph\":\"" } else { b",\n{\"ph\":\"" });
        self.first = false;
        b.extend_from_slice(ph);
        b.extend_from_slice(b"\",\"cat\":\"");
        b.extend_from_slice(cat);
        b.push(b'"');
    }

    /// Open an event of category `cat` (a [`PrefixKey`] tag: kernel,
    /// runtime or driver call) named `name`, at `pid`/`tid` and time `ts`:
    /// the same bytes as [`Self::open`], [`Self::name_id`] and
    /// [`Self::pid_tid_ts`] in turn, copied from a cache in one piece.
    #[inline]
    fn open_named_at(&mut self, input: &Input<'_>, cat: u8, name: StringId, pid: u64, tid: u64, ts: u64) {
        let key = PrefixKey {
            ordinal: input.ordinal as u32,
            cat,
            name: name.0,
            pid,
            tid,
        };
        let (text, place_at) = self.prefix_text.get(key, key.hash(), |t| {
            t.extend_from_slice(b",\n{\"ph\":\"X\",\"cat\":\"");
            t.extend_from_slice(PrefixKey::CATS[cat as usize]);
            t.extend_from_slice(b"\",\"name\":");
            put_json_str(t, &input.trace.name(name));
            let at = t.len();
            t.extend_from_slice(b",\"pid\":");
            put_u64(t, pid);
            t.extend_from_slice(b",\"tid\":");
            put_u64(t, tid);
            t.extend_from_slice(b",\"ts\":");
            at
        });
        let b = &mut self.out.buf;
        // The first event of the array has no separating comma.
        let skip = usize::from(self.first);
        self.first = false;
        let start = b.len();
        b.extend_from_slice(&text[skip..]);
        let at = start + place_at - skip;
        put_micros(b, ts.saturating_sub(self.base));
        self.last_place = ((pid, tid, ts), at..b.len());
    }

    #[inline]
    fn pid_tid_ts(&mut self, pid: u64, tid: u64, ts: u64) {
        let base = self.base;
        let b = &mut self.out.buf;
        let at = b.len();
        self.place_text.put(b, (pid, tid), pid ^ tid.rotate_left(32), |t| {
            t.extend_from_slice(b",\"pid\":");
            put_u64(t, pid);
            t.extend_from_slice(b",\"tid\":");
            put_u64(t, tid);
            t.extend_from_slice(b",\"ts\":");
        });
        put_micros(b, ts.saturating_sub(base));
        self.last_place = ((pid, tid, ts), at..b.len());
    }

    fn name_id(&mut self, input: &Input<'_>, id: StringId) {
        let state = &mut self.inputs[input.ordinal];
        let b = &mut self.out.buf;
        b.extend_from_slice(b",\"name\":");
        match state.names.get_mut(id.0 as usize) {
            Some(slot) => {
                let lit = slot.get_or_insert_with(|| {
                    let mut v = Vec::new();
                    put_json_str(&mut v, &input.trace.name(id));
                    v.into_boxed_slice()
                });
                b.extend_from_slice(lit);
            }
            None => put_json_str(b, &input.trace.name(id)),
        }
    }

    fn name_str(&mut self, s: &str) {
        let b = &mut self.out.buf;
        b.extend_from_slice(b",\"name\":");
        put_json_str(b, s);
    }

    #[inline]
    /// Open the args of GPU work with what Kineto puts first on kernels,
    /// copies and memsets.
    fn gpu_args(&mut self, device: DeviceId, context: ContextId, stream: StreamId, correlation: CorrelationId) {
        let (key, hash) = gpu_ids_key(device, context, stream);
        self.gpu_text.put(&mut self.out.buf, key, hash, |t| {
            t.extend_from_slice(b",\"args\":{\"device\":");
            put_u64(t, device.0 as u64);
            t.extend_from_slice(b",\"context\":");
            put_u64(t, context.0 as u64);
            t.extend_from_slice(b",\"stream\":");
            put_u64(t, stream.0 as u64);
        });
        self.correlation(correlation.0 as u64);
    }

    /// `,"correlation":N`, remembered for the event's flow.
    fn correlation(&mut self, v: u64) {
        let b = &mut self.out.buf;
        b.extend_from_slice(b",\"correlation\":");
        let at = b.len();
        put_u64(b, v);
        self.last_corr = (v, at..b.len());
    }

    fn arg_u64(&mut self, key: &[u8], v: u64) {
        let b = &mut self.out.buf;
        b.extend_from_slice(key);
        put_u64(b, v);
    }

    fn arg_str(&mut self, key: &[u8], v: &str) {
        let b = &mut self.out.buf;
        b.extend_from_slice(key);
        put_json_str(b, v);
    }

    fn dur(&mut self, start: u64, end: u64) {
        let b = &mut self.out.buf;
        b.extend_from_slice(b",\"dur\":");
        put_micros(b, end - start);
    }

    fn metadata(&mut self, what: &[u8], pid: u64, tid: Option<u64>, key: &[u8], value: &str) {
        self.open(b"M", b"__metadata");
        let b = &mut self.out.buf;
        b.extend_from_slice(b",\"name\":\"");
        b.extend_from_slice(what);
        b.extend_from_slice(b"\",\"pid\":");
        put_u64(b, pid);
        if let Some(tid) = tid {
            b.extend_from_slice(b",\"tid\":");
            put_u64(b, tid);
        }
        b.extend_from_slice(b",\"args\":{\"");
        b.extend_from_slice(key);
        b.extend_from_slice(b"\":");
        if key == b"sort_index" {
            b.extend_from_slice(value.as_bytes());
        } else {
            put_json_str(b, value);
        }
        b.extend_from_slice(b"}}");
    }

    /// (pid, tid) of a lane; names the lane's process and thread the first
    /// time it is used.
    #[inline]
    fn place(&mut self, input: &Input<'_>, lane: Lane, id: LaneId) -> (u64, u64) {
        match self.places.get(id.index()) {
            Some(&Some(place)) => place,
            _ => self.place_new(input, lane, id),
        }
    }

    #[cold]
    fn place_new(&mut self, input: &Input<'_>, lane: Lane, id: LaneId) -> (u64, u64) {
        let ordinal = input.ordinal;
        let host_pid = self.inputs[ordinal].host_pid;
        let gpu_base = self.inputs[ordinal].gpu_pid_base;
        let gpu_pid = |d: DeviceId| gpu_base + d.0 as u64;
        let (pid, tid) = match lane {
            Lane::Stream { device, stream, .. } => (gpu_pid(device), stream_tid(stream)),
            Lane::Sync { device, stream, .. } => (gpu_pid(device), SYNC_TID_BASE + stream_tid(stream)),
            Lane::Thread { tid } => (host_pid, tid.0 as u64),
            Lane::Comm { comm, device } => {
                let comms = &mut self.inputs[ordinal].comms;
                let i = comms.iter().position(|c| *c == comm).unwrap_or_else(|| {
                    comms.push(comm);
                    comms.len() - 1
                });
                (gpu_pid(device), COMM_TID_BASE + i as u64)
            }
            Lane::Library { device, .. } => {
                let lanes = &mut self.inputs[ordinal].library_lanes;
                let i = lanes.iter().position(|l| *l == lane).unwrap_or_else(|| {
                    lanes.push(lane);
                    lanes.len() - 1
                });
                (gpu_pid(device), LIBRARY_TID_BASE + i as u64)
            }
            Lane::Process => (host_pid, 0),
            // Kineto draws gpu_user_annotation on the stream's own row.
            Lane::Ranges { device, stream, .. } => (gpu_pid(device), stream_tid(stream)),
        };
        if !matches!(lane, Lane::Ranges { .. }) && self.inputs[ordinal].lanes.insert(lane) {
            let device = match lane {
                Lane::Stream { device, .. } | Lane::Sync { device, .. } | Lane::Comm { device, .. } | Lane::Library { device, .. } => {
                    Some(device)
                }
                _ => None,
            };
            if let Some(d) = device {
                if self.inputs[ordinal].gpus.insert(d) {
                    let label = if self.inputs.len() > 1 {
                        format!("rank {} GPU {}", input.rank, d)
                    } else {
                        format!("GPU {d}")
                    };
                    self.metadata(b"process_name", pid, None, b"name", &label);
                    self.metadata(b"process_labels", pid, None, b"labels", &label);
                    self.metadata(b"process_sort_index", pid, None, b"sort_index", &(pid + 1_000_000).to_string());
                }
            }
            let name = match lane {
                Lane::Stream { context, stream, .. } if stream == StreamId::UNKNOWN => format!("ctx {context} (no stream)"),
                Lane::Stream { stream, .. } => format!("stream {stream}"),
                Lane::Sync { stream, .. } if stream == StreamId::UNKNOWN => "sync (context)".to_string(),
                Lane::Sync { stream, .. } => format!("stream {stream} sync"),
                Lane::Thread { tid } => format!("thread {tid}"),
                Lane::Comm { comm, .. } => format!("NCCL comm {:016x}", comm.0),
                Lane::Library { stream, library, .. } => {
                    format!("{} · stream {stream} (communication)", self.libraries.name(library))
                }
                Lane::Process | Lane::Ranges { .. } => "process".to_string(),
            };
            self.metadata(b"thread_name", pid, Some(tid), b"name", &name);
            self.metadata(b"thread_sort_index", pid, Some(tid), b"sort_index", &tid.to_string());
        }
        if self.places.len() <= id.index() {
            self.places.resize(id.index() + 1, None);
        }
        self.places[id.index()] = Some((pid, tid));
        (pid, tid)
    }

    /// `,"External id":N` of GPU work of an imported Kineto trace: its
    /// launch's (see [`ExternalIds`]).
    fn launch_external_id(&mut self, input: &Input<'_>, correlation: CorrelationId) {
        let ids = &self.inputs[input.ordinal].external;
        if let Some(&id) = ids.on.then(|| ids.calls.get(&correlation.0)).flatten() {
            self.arg_u64(b",\"External id\":", id as u64);
        }
    }

    /// A CPU operator or annotation of an imported Kineto trace, in the
    /// category it had, with its `External id`; a GPU annotation on its
    /// stream of the GPU that has a stream of that number (the thread of
    /// Kineto's `gpu_user_annotation` is the stream).
    fn kineto_marker(&mut self, input: &Input<'_>, m: &Marker, pid: u64, tid: u64, s: u64, e: u64) {
        let t = input.trace;
        let cat = crate::kineto_category(&t.name(m.domain)).unwrap_or("user_annotation");
        let (pid, tid) = if cat == "gpu_user_annotation" {
            let device = self.inputs[input.ordinal]
                .external
                .stream_gpu
                .get(&m.thread.0)
                .copied()
                .unwrap_or(DeviceId(0));
            (self.inputs[input.ordinal].gpu_pid_base + device.0 as u64, m.thread.0 as u64)
        } else {
            (pid, tid)
        };
        let instant = m.kind == MarkerKind::INSTANT;
        self.open(if instant { b"i" } else { b"X" }, cat.as_bytes());
        self.name_id(input, m.name);
        self.pid_tid_ts(pid, tid, s);
        if instant {
            self.out.buf.extend_from_slice(b",\"s\":\"t\"}");
            return;
        }
        self.dur(s, e);
        let id = self.inputs[input.ordinal]
            .external
            .ranges
            .get(&(m.thread.0, m.start.0, m.end.0, m.name.0))
            .copied();
        match id {
            Some(id) => self.arg_u64(b",\"args\":{\"External id\":", id as u64),
            None => self.out.buf.push(b'}'),
        }
        if id.is_some() {
            self.out.buf.extend_from_slice(b"}}");
        }
    }

    /// A flow event of the event just written: its id and its place and
    /// time are copied from that event's text when they are the same.
    fn flow(&mut self, end: bool, id: u64, pid: u64, tid: u64, ts: u64) {
        let (place, corr) = (self.last_place.clone(), self.last_corr.clone());
        // An event came before (the flow's own), so a comma always separates.
        let b = &mut self.out.buf;
        b.extend_from_slice(if end {
            b",\n{\"ph\":\"f\",\"cat\":\"ac2g\",\"name\":\"ac2g\",\"id\":"
        } else {
            b",\n{\"ph\":\"s\",\"cat\":\"ac2g\",\"name\":\"ac2g\",\"id\":"
        });
        if corr.0 == id && !corr.1.is_empty() {
            b.extend_from_within(corr.1);
        } else {
            put_u64(b, id);
        }
        if place.0 == (pid, tid, ts) && !place.1.is_empty() {
            b.extend_from_within(place.1);
        } else {
            self.pid_tid_ts(pid, tid, ts);
        }
        self.out.buf.extend_from_slice(if end { b",\"bp\":\"e\"}" } else { b"}" });
    }
}

impl<W: Write> Visitor for JsonWriter<W> {
    type EntryState = ();

    fn begin_input(&mut self, input: &Input<'_>) -> Result<()> {
        // Lane ids are per input.
        self.places.clear();
        let h = input.trace.header();
        let pid = self.inputs[input.ordinal].host_pid;
        let mut label = crate::process_label(input.rank, h);
        if let Some(cmd) = h.command.first() {
            label = format!("{label} · {cmd}");
        }
        self.metadata(b"process_name", pid, None, b"name", &label);
        self.metadata(b"process_labels", pid, None, b"labels", &format!("rank {}", input.rank));
        self.metadata(b"process_sort_index", pid, None, b"sort_index", &(input.ordinal as u64).to_string());
        Ok(())
    }

    fn end_slice(&mut self, _: &Input<'_>, _: LaneId, _: u64) -> Result<()> {
        Ok(())
    }

    fn gpu_annotation(&mut self, input: &Input<'_>, lane: Lane, id: LaneId, name: StringId, start: u64, end: u64) -> Result<()> {
        let (pid, tid) = self.place(input, lane, id);
        self.open(b"X", b"gpu_user_annotation");
        self.name_id(input, name);
        self.pid_tid_ts(pid, tid, start);
        self.dur(start, end);
        self.out.buf.push(b'}');
        self.out.maybe_flush()?;
        Ok(())
    }

    fn comm_library(
        &mut self,
        input: &Input<'_>,
        lane: Lane,
        id: LaneId,
        library: &str,
        name: StringId,
        start: u64,
        end: u64,
    ) -> Result<()> {
        let (pid, tid) = self.place(input, lane, id);
        // A category of its own: Kineto readers (HTA, TraceLens) count `kernel` events,
        // and these are the same kernels drawn a second time.
        self.open(b"X", b"gputrace_communication");
        self.name_id(input, name);
        self.pid_tid_ts(pid, tid, start);
        self.dur(start, end);
        let b = &mut self.out.buf;
        b.extend_from_slice(b",\"args\":{\"library\":");
        put_json_str(b, library);
        b.extend_from_slice(b"}}");
        self.out.maybe_flush()?;
        Ok(())
    }

    fn counters(&mut self, input: &Input<'_>, series: &[CounterSeries]) -> Result<()> {
        let gpu_base = self.inputs[input.ordinal].gpu_pid_base;
        for c in series {
            let (label, _, scale) = counter_display(&c.metric);
            let pid = gpu_base + c.device.0 as u64;
            let mut name = Vec::new();
            put_json_str(&mut name, &format!("GPU {} {label}", c.device.0));
            for &(t, v) in &c.samples {
                // Chrome's counter events: one series per name and process, the value in args.
                self.open(b"C", b"gputrace_counter");
                let b = &mut self.out.buf;
                b.extend_from_slice(b",\"name\":");
                b.extend_from_slice(&name);
                self.pid_tid_ts(pid, 0, t.0);
                let b = &mut self.out.buf;
                b.extend_from_slice(b",\"args\":{\"value\":");
                put_f64(b, v as f64 * scale);
                b.extend_from_slice(b"}}");
                self.out.maybe_flush()?;
            }
        }
        Ok(())
    }

    fn host_samples(&mut self, input: &Input<'_>, tracks: &[crate::host::HostTrack]) -> Result<()> {
        let pid = self.inputs[input.ordinal].host_pid;
        for (i, t) in tracks.iter().enumerate() {
            let tid = HOST_SAMPLES_TID_BASE + i as u64;
            self.metadata(b"thread_name", pid, Some(tid), b"name", &t.name);
            self.metadata(b"thread_sort_index", pid, Some(tid), b"sort_index", &tid.to_string());
            for s in &t.slices {
                self.open(b"X", b"host_sample");
                let b = &mut self.out.buf;
                b.extend_from_slice(b",\"name\":");
                put_json_str(b, &s.name);
                self.pid_tid_ts(pid, tid, s.start);
                self.dur(s.start, s.end);
                let b = &mut self.out.buf;
                if let Some((state, cpu_ns, samples)) = s.run {
                    b.extend_from_slice(b",\"args\":{\"state\":");
                    put_json_str(b, state);
                    b.extend_from_slice(b",\"cpu ns\":");
                    put_u64(b, cpu_ns);
                    b.extend_from_slice(b",\"samples\":");
                    put_u64(b, u64::from(samples));
                    b.push(b'}');
                }
                b.push(b'}');
                self.out.maybe_flush()?;
            }
        }
        Ok(())
    }

    fn event(&mut self, input: &Input<'_>, item: &Item<'_>, _: Option<&mut ()>) -> Result<()> {
        self.last_place.1 = 0..0;
        self.last_corr.1 = 0..0;
        let (pid, tid) = self.place(input, item.lane, item.lane_id);
        let (s, e) = (item.start, item.end);
        let event = item.event();
        match &*event {
            Event::Kernel(k) => self.write_kernel(input, k, pid, tid, s, e),
            Event::Memcpy(m) => self.write_memcpy(input, m, pid, tid, s, e),
            Event::Memset(m) => self.write_memset(input, m, pid, tid, s, e),
            Event::GraphLaunch(g) => self.write_graph_launch(input, g, pid, tid, s, e),
            Event::Sync(y) => self.write_sync(y, pid, tid, s, e),
            Event::Api(a) => self.write_api(input, a, pid, tid, s, e),
            Event::Marker(m) if self.inputs[input.ordinal].external.on && crate::kineto_category(&input.trace.name(m.domain)).is_some() => {
                self.kineto_marker(input, m, pid, tid, s, e);
            }
            Event::Marker(m) => self.write_marker(input, m, pid, tid, s, e),
            Event::Collective(c) => self.write_collective(input, c, pid, tid, s, e),
            Event::Loss(l) => self.write_loss(input, l, pid, tid, s),
            // The walk hands no counter samples over (see `walk`).
            // Counter samples and request marks are no slices (skipped by the walk).
            Event::Counter(_) | Event::Request(_) => return Ok(()),
        }
        match item.flow {
            Flow::Out(id) => self.flow(false, id, pid, tid, s),
            Flow::In(id) => self.flow(true, id, pid, tid, s),
            Flow::None => {}
        }
        self.out.maybe_flush()?;
        Ok(())
    }
}

/// One trace event object per event kind (called per event: kept inline).
impl<W: Write> JsonWriter<W> {
    #[inline]
    fn write_kernel(&mut self, input: &Input<'_>, k: &Kernel, pid: u64, tid: u64, s: u64, e: u64) {
        self.open_named_at(input, PrefixKey::KERNEL, k.name, pid, tid, s);
        self.dur(s, e);
        self.gpu_args(k.device, k.context, k.stream, k.correlation);
        let (key, hash) = launch_key(k);
        let shared = key.3;
        self.launch_text.put(&mut self.out.buf, key, hash, |t| {
            t.extend_from_slice(b",\"registers per thread\":");
            put_u64(t, k.registers as u64);
            t.extend_from_slice(b",\"shared memory\":");
            put_u64(t, shared);
            put_dims(t, b",\"grid\":", k.grid);
            put_dims(t, b",\"block\":", k.block);
        });
        if k.graph_id != 0 {
            self.arg_u64(b",\"graph id\":", k.graph_id as u64);
            self.arg_u64(b",\"graph node id\":", k.graph_node_id);
        }
        let linked = &self.inputs[input.ordinal].kernel_coll;
        if let Some(c) = (!linked.is_empty())
            .then(|| linked.get(&(k.device.0, k.correlation.0)).copied())
            .flatten()
        {
            self.collective_args(input, &c);
        }
        self.launch_external_id(input, k.correlation);
        self.out.buf.extend_from_slice(b"}}");
    }

    #[inline]
    fn write_memcpy(&mut self, input: &Input<'_>, m: &Memcpy, pid: u64, tid: u64, s: u64, e: u64) {
        self.open(b"X", b"gpu_memcpy");
        self.name_str(&crate::memcpy_label(m));
        self.pid_tid_ts(pid, tid, s);
        self.dur(s, e);
        self.gpu_args(m.device, m.context, m.stream, m.correlation);
        self.arg_u64(b",\"bytes\":", m.bytes);
        self.out.buf.extend_from_slice(b",\"memory bandwidth (GB/s)\":");
        put_ratio3(&mut self.out.buf, m.bytes, m.end.saturating_sub(m.start).0);
        if m.src_device != m.device || m.dst_device != m.device {
            self.arg_u64(b",\"src device\":", m.src_device.0 as u64);
            self.arg_u64(b",\"dst device\":", m.dst_device.0 as u64);
        }
        self.launch_external_id(input, m.correlation);
        self.out.buf.extend_from_slice(b"}}");
    }

    #[inline]
    fn write_memset(&mut self, input: &Input<'_>, m: &Memset, pid: u64, tid: u64, s: u64, e: u64) {
        self.open(b"X", b"gpu_memset");
        self.name_str(&crate::memset_label(m));
        self.pid_tid_ts(pid, tid, s);
        self.dur(s, e);
        self.gpu_args(m.device, m.context, m.stream, m.correlation);
        self.arg_u64(b",\"bytes\":", m.bytes);
        self.arg_u64(b",\"value\":", m.value as u64);
        self.out.buf.extend_from_slice(b",\"memory bandwidth (GB/s)\":");
        put_ratio3(&mut self.out.buf, m.bytes, m.end.saturating_sub(m.start).0);
        self.launch_external_id(input, m.correlation);
        self.out.buf.extend_from_slice(b"}}");
    }

    #[inline]
    fn write_graph_launch(&mut self, input: &Input<'_>, g: &GraphLaunch, pid: u64, tid: u64, s: u64, e: u64) {
        self.open(b"X", b"kernel");
        self.name_str(&crate::graph_label(g));
        self.pid_tid_ts(pid, tid, s);
        self.dur(s, e);
        self.gpu_args(g.device, g.context, g.stream, g.correlation);
        self.arg_u64(b",\"graph id\":", g.graph_id as u64);
        self.arg_str(b",\"recorded\":", "graph level: one slice per graph launch, its nodes not recorded");
        self.launch_external_id(input, g.correlation);
        self.out.buf.extend_from_slice(b"}}");
    }

    #[inline]
    fn write_sync(&mut self, y: &Sync, pid: u64, tid: u64, s: u64, e: u64) {
        self.open(b"X", b"cuda_sync");
        self.name_str(crate::sync_label(y.kind));
        self.pid_tid_ts(pid, tid, s);
        self.dur(s, e);
        // No "stream" key: analyzers count events with a stream as GPU work.
        self.arg_u64(b",\"args\":{\"device\":", y.device.0 as u64);
        self.arg_u64(b",\"context\":", y.context.0 as u64);
        if y.stream != StreamId::UNKNOWN {
            self.arg_u64(b",\"wait stream\":", y.stream.0 as u64);
        }
        self.arg_u64(b",\"correlation\":", y.correlation.0 as u64);
        self.arg_str(b",\"cuda_sync_kind\":", y.kind.name());
        if y.cuda_event != 0 {
            self.arg_u64(b",\"event\":", y.cuda_event as u64);
        }
        self.out.buf.extend_from_slice(b"}}");
    }

    #[inline]
    fn write_api(&mut self, input: &Input<'_>, a: &ApiCall, pid: u64, tid: u64, s: u64, e: u64) {
        let cat = if a.domain == ApiDomain::DRIVER {
            PrefixKey::DRIVER
        } else {
            PrefixKey::RUNTIME
        };
        self.open_named_at(input, cat, a.name, pid, tid, s);
        self.dur(s, e);
        let cbid = a.cbid;
        self.cbid_text.put(&mut self.out.buf, cbid, cbid as u64, |t| {
            t.extend_from_slice(b",\"args\":{\"cbid\":");
            put_u64(t, cbid as u64);
        });
        self.correlation(a.correlation.0 as u64);
        if a.return_value != 0 {
            self.arg_u64(b",\"return\":", a.return_value as u64);
        }
        if self.inputs[input.ordinal].external.on {
            // Kineto writes 0 for a call outside any operator.
            let id = self.inputs[input.ordinal]
                .external
                .calls
                .get(&a.correlation.0)
                .copied()
                .unwrap_or(0);
            self.arg_u64(b",\"External id\":", id as u64);
        }
        self.out.buf.extend_from_slice(b"}}");
    }

    #[inline]
    fn write_marker(&mut self, input: &Input<'_>, m: &Marker, pid: u64, tid: u64, s: u64, e: u64) {
        let instant = m.kind == MarkerKind::INSTANT;
        self.open(if instant { b"i" } else { b"X" }, b"user_annotation");
        self.name_id(input, m.name);
        self.pid_tid_ts(pid, tid, s);
        if instant {
            self.out.buf.extend_from_slice(b",\"s\":\"t\"");
        } else {
            self.dur(s, e);
        }
        if m.domain != StringId::EMPTY {
            self.arg_str(b",\"args\":{\"domain\":", &input.trace.name(m.domain));
            self.out.buf.push(b'}');
        }
        self.out.buf.push(b'}');
    }

    #[inline]
    fn write_collective(&mut self, input: &Input<'_>, c: &Collective, pid: u64, tid: u64, s: u64, e: u64) {
        let t = input.trace;
        let op = t.name(c.op);
        self.open(b"X", b"nccl_collective");
        self.name_str(&format!("nccl:{op}"));
        self.pid_tid_ts(pid, tid, s);
        self.dur(s, e);
        self.arg_u64(b",\"args\":{\"bytes\":", c.bytes);
        self.collective_args(input, c);
        if c.root >= 0 {
            self.arg_u64(b",\"Root\":", c.root as u64);
        }
        if c.algorithm != StringId::EMPTY {
            self.arg_str(b",\"algorithm\":", &t.name(c.algorithm));
        }
        if c.protocol != StringId::EMPTY {
            self.arg_str(b",\"protocol\":", &t.name(c.protocol));
        }
        if c.channels != 0 {
            self.arg_u64(b",\"channels\":", c.channels as u64);
        }
        self.arg_u64(b",\"device\":", c.device.0 as u64);
        if c.stream != StreamId::UNKNOWN {
            self.arg_u64(b",\"nccl stream\":", c.stream.0 as u64);
        }
        if c.correlation.0 != 0 {
            self.arg_u64(b",\"kernel correlation\":", c.correlation.0 as u64);
        }
        self.out.buf.extend_from_slice(b"}}");
    }

    #[inline]
    fn write_loss(&mut self, input: &Input<'_>, l: &Loss, pid: u64, tid: u64, s: u64) {
        self.open(b"i", b"gputrace_loss");
        self.name_str(&format!("lost {} records: {}", l.count, l.source));
        self.pid_tid_ts(pid, tid, s);
        self.out.buf.extend_from_slice(b",\"s\":\"p\"");
        self.arg_str(b",\"args\":{\"source\":", l.source.name());
        self.arg_u64(b",\"count\":", l.count);
        if l.detail != StringId::EMPTY {
            self.arg_str(b",\"detail\":", &input.trace.name(l.detail));
        }
        self.out.buf.extend_from_slice(b"}}");
    }
}

#[cfg(test)]
mod tests {
    use super::msg_nelems;

    #[test]
    fn pytorch_message_sizes_are_whole_buffers() {
        // NCCL counts per rank; PyTorch's args count the whole buffers.
        assert_eq!(msg_nelems("AllGather", 100, 4), (100, 400));
        assert_eq!(msg_nelems("ReduceScatter", 100, 4), (400, 100));
        assert_eq!(msg_nelems("AllReduce", 100, 4), (100, 100));
        assert_eq!(msg_nelems("AllGather", 100, 0), (100, 100), "unknown group size");
    }
}
