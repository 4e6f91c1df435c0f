//! CUPTI activity records → trace events, on the writer thread.
//!
//! Offsets come from `cupti_sys::layout`, whose tests prove them equal to
//! the real headers for every CUDA 12.0–13.5 layout; only fields present in
//! all of those versions are read, so no read goes past a record of any
//! supported version. Kinds the agent does not decode are skipped.

use crate::cbid_names;
use cupti_sys::layout;
use gputrace_format::*;
use rustc_hash_lite::PtrMap;
use std::ffi::CStr;

/// Activity kind numbers (`CUpti_ActivityKind`, equal in 12.x and 13.x).
pub mod kind {
    /// MEMCPY.
    pub const MEMCPY: u32 = 1;
    /// MEMSET.
    pub const MEMSET: u32 = 2;
    /// DRIVER API.
    pub const DRIVER: u32 = 4;
    /// RUNTIME API.
    pub const RUNTIME: u32 = 5;
    /// DEVICE.
    pub const DEVICE: u32 = 8;
    /// CONTEXT.
    pub const CONTEXT: u32 = 9;
    /// CONCURRENT_KERNEL.
    pub const CONCURRENT_KERNEL: u32 = 10;
    /// OVERHEAD (CUPTI's and the driver's own costs).
    pub const OVERHEAD: u32 = 17;
    /// MEMCPY2 (peer to peer).
    pub const MEMCPY2: u32 = 22;
    /// SYNCHRONIZATION.
    pub const SYNCHRONIZATION: u32 = 38;
    /// EXTERNAL_CORRELATION.
    pub const EXTERNAL_CORRELATION: u32 = 39;
    /// GRAPH_TRACE: one record per graph launch instead of per node.
    pub const GRAPH_TRACE: u32 = 51;
}

/// Read a little-endian `T` at `off` of a record.
///
/// # Safety
/// `rec + off .. rec + off + size_of::<T>()` must lie inside a record CUPTI
/// wrote (guaranteed by the layout tables for the offsets used here).
#[inline]
unsafe fn rd<T: Copy>(rec: *const u8, off: usize) -> T {
    // Safety: upheld by the caller; records are not necessarily aligned for T.
    unsafe { std::ptr::read_unaligned(rec.add(off) as *const T) }
}

/// A device seen in a DEVICE record.
#[derive(Clone, Debug, Default)]
pub struct SeenDevice {
    /// Ordinal.
    pub id: u32,
    /// UUID bytes.
    pub uuid: [u8; 16],
    /// Name.
    pub name: String,
    /// SMs.
    pub sm_count: u32,
    /// Global memory.
    pub memory: u64,
    /// Compute capability.
    pub cc: (u32, u32),
}

/// CUPTI's own costs (OVERHEAD records), summed per overhead kind: how
/// many and how long. Written into the trailer, so `info` and `report` can
/// say what the profiling itself cost.
#[derive(Default, Debug, Clone, PartialEq, Eq)]
pub struct Overhead {
    /// (records, ns) per entry of [`Overhead::NAMES`], the last one for
    /// kinds this table does not name.
    pub totals: [(u64, u64); Overhead::NAMES.len()],
    /// ns of records whose object is a process or thread (CPU time).
    pub cpu_ns: u64,
    /// ns of records whose object is a device, context or stream (GPU time).
    pub gpu_ns: u64,
}

impl Overhead {
    /// `CUpti_ActivityOverheadKind` values and the names used in the trailer
    /// (`cupti.overhead.<name>`); the last entry takes any other kind.
    pub const NAMES: [(u32, &'static str); 10] = [
        (1, "driver_compiler"),
        (1 << 16, "buffer_flush"),
        (2 << 16, "instrumentation"),
        (3 << 16, "resource"),
        (4 << 16, "module_loading"),
        (5 << 16, "lazy_function_loading"),
        (6 << 16, "command_buffer_full"),
        (7 << 16, "activity_buffer_request"),
        (8 << 16, "uvm_activity_init"),
        (u32::MAX, "other"),
    ];

    /// Count one record of kind `kind` lasting `ns`, spent on the object
    /// `object` (a `CUpti_ActivityObjectKind`: process and thread are CPU
    /// time, device, context and stream GPU time; unknown is neither).
    pub fn add(&mut self, kind: u32, object: u32, ns: u64) {
        use cupti_sys as sys;
        match object {
            sys::CUPTI_ACTIVITY_OBJECT_PROCESS | sys::CUPTI_ACTIVITY_OBJECT_THREAD => self.cpu_ns = self.cpu_ns.saturating_add(ns),
            sys::CUPTI_ACTIVITY_OBJECT_DEVICE | sys::CUPTI_ACTIVITY_OBJECT_CONTEXT | sys::CUPTI_ACTIVITY_OBJECT_STREAM => {
                self.gpu_ns = self.gpu_ns.saturating_add(ns)
            }
            _ => {}
        }
        let i = Self::NAMES.iter().position(|(k, _)| *k == kind).unwrap_or(Self::NAMES.len() - 1);
        let t = &mut self.totals[i];
        t.0 += 1;
        t.1 = t.1.saturating_add(ns);
    }

    /// `(name, records, ns)` of the kinds seen.
    pub fn seen(&self) -> impl Iterator<Item = (&'static str, u64, u64)> + '_ {
        Self::NAMES
            .iter()
            .zip(&self.totals)
            .filter(|(_, t)| t.0 > 0)
            .map(|((_, name), t)| (*name, t.0, t.1))
    }
}

/// Per-process decoding state.
#[derive(Default)]
pub struct Decoder {
    /// Kernel name pointer → (id, the bytes it had), so a pointer CUPTI
    /// reuses for another name is noticed.
    names: PtrMap,
    /// contextId → deviceId, from CONTEXT records and kernels.
    context_device: Vec<(u32, u32)>,
    /// Devices from DEVICE records.
    pub devices: Vec<SeenDevice>,
    /// API-call name ids per (domain, cbid), interned lazily.
    api_names: Vec<(u32, u32, StringId)>,
    /// The same for cbids below [`API_TABLE`], indexed by cbid per domain
    /// (runtime, driver): 0 not yet seen, [`FILTERED`] dropped as noise,
    /// else the name's id (never 0, the empty string's).
    api_ids: [Vec<u32>; 2],
    /// Records of kinds not decoded (skipped).
    pub skipped: u64,
    /// API records dropped as noise (queries such as cudaGetDevice).
    pub filtered_api: u64,
    /// CUPTI's OVERHEAD records, summed by kind.
    pub overhead: Overhead,
    /// Collect what the NCCL linker needs (set once the plugin is active).
    pub collect_comm: bool,
    /// Also hand over copies (set once a copy-engine collective was seen).
    pub collect_copies: bool,
    /// Our external correlation ids (CUSTOM2) → correlation ids.
    pub ext_links: Vec<(u64, u32)>,
    /// Communication kernels (names starting `nccl`/`rccl`), and copies when
    /// `collect_copies`.
    pub comm_kernels: Vec<crate::nccl::link::KernelInfo>,
    /// Per string id: is it a communication kernel's name.
    comm_names: Vec<bool>,
    /// The last (context, device) noted: kernels come in long runs on one
    /// context, so this skips the search of `context_device`.
    last_context: Option<(u32, u32)>,
    /// Launches of each CUDA graph seen at node level (for `--graphs auto`).
    pub graphs: GraphLaunches,
}

/// How often each CUDA graph has been launched, from the kernels recorded
/// at node level: a kernel with a graph id and a correlation id other than
/// that graph's last one starts a new launch (all nodes of one launch share
/// the `cudaGraphLaunch`'s correlation id). Kernels of two launches of one
/// graph interleaved in a buffer count extra launches, so the count is an
/// upper bound. At most [`GraphLaunches::GRAPHS`] graphs are followed.
#[derive(Default, Debug)]
pub struct GraphLaunches {
    /// Count (only `--graphs auto` needs it; off, a kernel costs one test).
    pub on: bool,
    /// (graph id, last correlation id, launches).
    seen: Vec<(u32, u32, u64)>,
    /// Index in `seen` of the last graph noted (a launch's nodes come in a run).
    last: usize,
    /// The most launches of any one graph.
    pub most: u64,
}

impl GraphLaunches {
    /// Graphs followed; later ones are not counted.
    pub const GRAPHS: usize = 1024;

    /// Note a kernel of `graph` (0: not in a graph) launched by `correlation`.
    #[inline]
    pub fn kernel(&mut self, graph: u32, correlation: u32) {
        if !self.on || graph == 0 {
            return;
        }
        let found = match self.seen.get(self.last) {
            Some(g) if g.0 == graph => Some(self.last),
            _ => self.seen.iter().position(|g| g.0 == graph),
        };
        if let Some(i) = found {
            self.last = i;
        }
        let n = match found {
            Some(i) if self.seen[i].1 == correlation => return,
            Some(i) => {
                let g = &mut self.seen[i];
                g.1 = correlation;
                g.2 += 1;
                g.2
            }
            None if self.seen.len() < Self::GRAPHS => {
                self.last = self.seen.len();
                self.seen.push((graph, correlation, 1));
                1
            }
            None => return,
        };
        self.most = self.most.max(n);
    }
}

/// cbids below this are looked up in `Decoder::api_ids` (both domains
/// have about a thousand).
const API_TABLE: usize = 4096;
/// An `api_ids` entry of a call dropped as noise.
const FILTERED: u32 = u32::MAX;

/// External correlation kind the agent pushes (Kineto uses CUSTOM0/1).
const EXTERNAL_KIND_CUSTOM2: u32 = cupti_sys::CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;

fn is_comm_kernel(name: &[u8]) -> bool {
    name.starts_with(b"nccl") || name.starts_with(b"rccl")
}

impl Decoder {
    /// Call before decoding each buffer CUPTI completes: kernel name
    /// pointers are checked against their bytes once per buffer.
    pub fn new_buffer(&mut self) {
        self.names.new_buffer();
    }

    fn device_of_context(&self, ctx: u32) -> u32 {
        self.context_device.iter().find(|(c, _)| *c == ctx).map_or(0, |(_, d)| *d)
    }

    #[inline]
    fn note_context(&mut self, ctx: u32, dev: u32) {
        if self.last_context != Some((ctx, dev)) {
            self.note_new_context(ctx, dev);
        }
    }

    fn note_new_context(&mut self, ctx: u32, dev: u32) {
        if !self.context_device.iter().any(|(c, _)| *c == ctx) {
            self.context_device.push((ctx, dev));
        }
        self.last_context = Some((ctx, dev));
    }

    /// A copy the NCCL linker may need (copy-engine collectives).
    #[inline]
    fn note_copy(&mut self, m: &Memcpy) {
        if self.collect_copies {
            self.comm_kernels.push(crate::nccl::link::KernelInfo::of(
                m.start,
                m.end,
                m.device,
                m.context,
                m.stream,
                m.correlation,
            ));
        }
    }

    /// The id of the kernel name at `ptr`: from the names checked in this
    /// buffer when it is there (inline), else checked or interned.
    #[inline(always)]
    fn kernel_name<W: std::io::Write>(&mut self, ptr: *const libc::c_char, w: &mut TraceWriter<W>) -> StringId {
        match self.names.verified(ptr as usize) {
            Some(id) if !ptr.is_null() => id,
            _ => self.kernel_name_slow(ptr, w),
        }
    }

    #[inline(never)]
    fn kernel_name_slow<W: std::io::Write>(&mut self, ptr: *const libc::c_char, w: &mut TraceWriter<W>) -> StringId {
        if ptr.is_null() {
            return w.intern("<unnamed kernel>");
        }
        // Safety: CUPTI's name pointer is a NUL-terminated string valid
        // while the buffer is not recycled (we copy before recycling).
        let bytes = unsafe { CStr::from_ptr(ptr) }.to_bytes();
        if let Some(id) = self.names.get(ptr as usize, bytes) {
            return id;
        }
        let id = w.intern(&String::from_utf8_lossy(bytes));
        self.names.insert(ptr as usize, bytes, id);
        if is_comm_kernel(bytes) {
            let i = id.0 as usize;
            if self.comm_names.len() <= i {
                self.comm_names.resize(i + 1, false);
            }
            self.comm_names[i] = true;
        }
        id
    }

    /// The id of an API call's name; `None` for a call dropped as noise.
    #[inline(always)]
    fn api_name<W: std::io::Write>(&mut self, domain: u32, cbid: u32, w: &mut TraceWriter<W>) -> Option<StringId> {
        let ids = &self.api_ids[usize::from(domain != kind::RUNTIME)];
        match ids.get(cbid as usize).copied() {
            Some(FILTERED) => None,
            Some(id) if id != 0 => Some(StringId(id)),
            _ => {
                let id = self.api_name_slow(domain, cbid, w);
                if (cbid as usize) < API_TABLE {
                    let ids = &mut self.api_ids[usize::from(domain != kind::RUNTIME)];
                    if ids.len() <= cbid as usize {
                        ids.resize(cbid as usize + 1, 0);
                    }
                    ids[cbid as usize] = id.map_or(FILTERED, |id| id.0);
                }
                id
            }
        }
    }

    #[inline(never)]
    fn api_name_slow<W: std::io::Write>(&mut self, domain: u32, cbid: u32, w: &mut TraceWriter<W>) -> Option<StringId> {
        let table: &[(&str, bool)] = if domain == kind::RUNTIME {
            &cbid_names::RUNTIME
        } else {
            &cbid_names::DRIVER
        };
        let (name, keep) = table.get(cbid as usize).copied().unwrap_or(("", true));
        if !keep {
            return None;
        }
        if let Some((_, _, id)) = self.api_names.iter().find(|(d, c, _)| *d == domain && *c == cbid) {
            return Some(*id);
        }
        let id = if name.is_empty() {
            w.intern(&format!("cbid {cbid}"))
        } else {
            w.intern(name)
        };
        self.api_names.push((domain, cbid, id));
        Some(id)
    }

    /// Decode one record and push its event, if it is a kind we keep, to
    /// `w`: the only way records are decoded. Kernels and API calls (nearly
    /// every record) go to the writer's typed entry points, without an
    /// [`Event`] in between; other kinds through [`Self::other`].
    ///
    /// # Safety
    /// `rec` must point at a complete record returned by
    /// `cuptiActivityGetNextRecord`.
    #[inline]
    pub unsafe fn decode<W: std::io::Write>(&mut self, rec: *const u8, w: &mut TraceWriter<W>) -> Result<(), FormatError> {
        // Safety: `rec` is a complete record (the caller's promise), so its
        // kind field can be read, and each arm reads its own kind's fields.
        unsafe {
            match rd::<u32>(rec, layout::KIND) {
                kind::CONCURRENT_KERNEL => {
                    let k = self.kernel(rec, w);
                    w.push_kernel(&k)
                }
                k @ (kind::RUNTIME | kind::DRIVER) => match self.api(k, rec, w) {
                    Some(c) => w.push_api(&c),
                    None => Ok(()),
                },
                k => match self.other(k, rec) {
                    Some(e) => w.push(e),
                    None => Ok(()),
                },
            }
        }
    }

    /// A CONCURRENT_KERNEL record's kernel.
    ///
    /// # Safety
    /// `rec` points at a complete kernel record.
    #[inline(always)]
    unsafe fn kernel<W: std::io::Write>(&mut self, rec: *const u8, w: &mut TraceWriter<W>) -> Kernel {
        // Safety (all reads below): offsets from the layout tables, inside
        // the smallest kernel record in every supported version.
        unsafe {
            use layout::kernel as o;
            let device: u32 = rd(rec, o::DEVICE_ID);
            let context: u32 = rd(rec, o::CONTEXT_ID);
            self.note_context(context, device);
            let name = self.kernel_name(rd::<*const libc::c_char>(rec, o::NAME), w);
            let k = Kernel {
                start: Nanos(rd(rec, o::START)),
                end: Nanos(rd(rec, o::END)),
                device: DeviceId(device),
                context: ContextId(context),
                stream: StreamId(rd(rec, o::STREAM_ID)),
                correlation: CorrelationId(rd(rec, o::CORRELATION_ID)),
                name,
                grid: [
                    rd::<i32>(rec, o::GRID_X) as u32,
                    rd::<i32>(rec, o::GRID_Y) as u32,
                    rd::<i32>(rec, o::GRID_Z) as u32,
                ],
                block: [
                    rd::<i32>(rec, o::BLOCK_X) as u32,
                    rd::<i32>(rec, o::BLOCK_Y) as u32,
                    rd::<i32>(rec, o::BLOCK_Z) as u32,
                ],
                static_shared_mem: rd(rec, o::STATIC_SHARED_MEMORY),
                dynamic_shared_mem: rd(rec, o::DYNAMIC_SHARED_MEMORY),
                registers: rd::<u16>(rec, o::REGISTERS_PER_THREAD) as u32,
                graph_id: rd(rec, o::GRAPH_ID),
                graph_node_id: rd(rec, o::GRAPH_NODE_ID),
            };
            self.graphs.kernel(k.graph_id, k.correlation.0);
            if self.collect_comm && self.comm_names.get(name.0 as usize).copied().unwrap_or(false) {
                self.comm_kernels.push(crate::nccl::link::KernelInfo::of(
                    k.start,
                    k.end,
                    k.device,
                    k.context,
                    k.stream,
                    k.correlation,
                ));
            }
            k
        }
    }

    /// A RUNTIME or DRIVER (`domain`) record's call; `None` for a call
    /// filtered as noise (counted).
    ///
    /// # Safety
    /// `rec` points at a complete API record.
    #[inline(always)]
    unsafe fn api<W: std::io::Write>(&mut self, domain: u32, rec: *const u8, w: &mut TraceWriter<W>) -> Option<ApiCall> {
        // Safety (all reads below): offsets from the layout tables, inside
        // the smallest API record in every supported version.
        unsafe {
            use layout::api as o;
            let cbid: u32 = rd(rec, o::CBID);
            let Some(name) = self.api_name(domain, cbid, w) else {
                self.filtered_api += 1;
                return None;
            };
            Some(ApiCall {
                start: Nanos(rd(rec, o::START)),
                end: Nanos(rd(rec, o::END)),
                thread: ThreadId(rd(rec, o::THREAD_ID)),
                correlation: CorrelationId(rd(rec, o::CORRELATION_ID)),
                domain: if domain == kind::RUNTIME {
                    ApiDomain::RUNTIME
                } else {
                    ApiDomain::DRIVER
                },
                cbid,
                name,
                return_value: rd(rec, o::RETURN_VALUE),
            })
        }
    }

    /// A record of kind `k`, neither a kernel nor an API call (those are
    /// [`Self::decode`]'s own arms; here they would count as skipped).
    /// Returns the event, if it is a kind we keep.
    ///
    /// # Safety
    /// `rec` points at a complete record of kind `k`.
    unsafe fn other(&mut self, k: u32, rec: *const u8) -> Option<Event> {
        // Safety (all reads below): offsets from the layout tables, inside
        // the smallest record of each kind in every supported version.
        unsafe {
            match k {
                kind::GRAPH_TRACE => {
                    use layout::graph_trace as o;
                    let device: u32 = rd(rec, o::DEVICE_ID);
                    let context: u32 = rd(rec, o::CONTEXT_ID);
                    self.note_context(context, device);
                    Some(Event::GraphLaunch(GraphLaunch {
                        start: Nanos(rd(rec, o::START)),
                        end: Nanos(rd(rec, o::END)),
                        device: DeviceId(device),
                        context: ContextId(context),
                        stream: StreamId(rd(rec, o::STREAM_ID)),
                        correlation: CorrelationId(rd(rec, o::CORRELATION_ID)),
                        graph_id: rd(rec, o::GRAPH_ID),
                    }))
                }
                kind::MEMCPY => {
                    use layout::memcpy as o;
                    let device = DeviceId(rd(rec, o::DEVICE_ID));
                    let m = Memcpy {
                        start: Nanos(rd(rec, o::START)),
                        end: Nanos(rd(rec, o::END)),
                        device,
                        context: ContextId(rd(rec, o::CONTEXT_ID)),
                        stream: StreamId(rd(rec, o::STREAM_ID)),
                        correlation: CorrelationId(rd(rec, o::CORRELATION_ID)),
                        kind: CopyKind(rd(rec, o::COPY_KIND)),
                        bytes: rd(rec, o::BYTES),
                        src_kind: MemoryKind(rd(rec, o::SRC_KIND)),
                        dst_kind: MemoryKind(rd(rec, o::DST_KIND)),
                        src_device: device,
                        dst_device: device,
                    };
                    self.note_copy(&m);
                    Some(Event::Memcpy(m))
                }
                kind::MEMCPY2 => {
                    use layout::memcpy_p2p as o;
                    let m = Memcpy {
                        start: Nanos(rd(rec, o::START)),
                        end: Nanos(rd(rec, o::END)),
                        device: DeviceId(rd(rec, o::DEVICE_ID)),
                        context: ContextId(rd(rec, o::CONTEXT_ID)),
                        stream: StreamId(rd(rec, o::STREAM_ID)),
                        correlation: CorrelationId(rd(rec, o::CORRELATION_ID)),
                        kind: CopyKind(rd(rec, o::COPY_KIND)),
                        bytes: rd(rec, o::BYTES),
                        src_kind: MemoryKind(rd(rec, o::SRC_KIND)),
                        dst_kind: MemoryKind(rd(rec, o::DST_KIND)),
                        src_device: DeviceId(rd(rec, o::SRC_DEVICE_ID)),
                        dst_device: DeviceId(rd(rec, o::DST_DEVICE_ID)),
                    };
                    self.note_copy(&m);
                    Some(Event::Memcpy(m))
                }
                kind::MEMSET => {
                    use layout::memset as o;
                    Some(Event::Memset(Memset {
                        start: Nanos(rd(rec, o::START)),
                        end: Nanos(rd(rec, o::END)),
                        device: DeviceId(rd(rec, o::DEVICE_ID)),
                        context: ContextId(rd(rec, o::CONTEXT_ID)),
                        stream: StreamId(rd(rec, o::STREAM_ID)),
                        correlation: CorrelationId(rd(rec, o::CORRELATION_ID)),
                        bytes: rd(rec, o::BYTES),
                        value: rd(rec, o::VALUE),
                        memory_kind: MemoryKind(rd::<u16>(rec, o::MEMORY_KIND).min(255) as u8),
                    }))
                }
                kind::SYNCHRONIZATION => {
                    use layout::synchronization as o;
                    let context: u32 = rd(rec, o::CONTEXT_ID);
                    Some(Event::Sync(Sync {
                        start: Nanos(rd(rec, o::START)),
                        end: Nanos(rd(rec, o::END)),
                        device: DeviceId(self.device_of_context(context)),
                        context: ContextId(context),
                        stream: StreamId(rd(rec, o::STREAM_ID)),
                        correlation: CorrelationId(rd(rec, o::CORRELATION_ID)),
                        kind: SyncKind(rd::<u32>(rec, o::TYPE).min(255) as u8),
                        cuda_event: rd(rec, o::CUDA_EVENT_ID),
                    }))
                }
                kind::EXTERNAL_CORRELATION => {
                    use layout::external_correlation as o;
                    if self.collect_comm && rd::<u32>(rec, o::EXTERNAL_KIND) == EXTERNAL_KIND_CUSTOM2 {
                        self.ext_links.push((rd(rec, o::EXTERNAL_ID), rd(rec, o::CORRELATION_ID)));
                    }
                    None
                }
                kind::OVERHEAD => {
                    use layout::overhead as o;
                    let (start, end): (u64, u64) = (rd(rec, o::START), rd(rec, o::END));
                    self.overhead
                        .add(rd(rec, o::OVERHEAD_KIND), rd(rec, o::OBJECT_KIND), end.saturating_sub(start));
                    None
                }
                kind::CONTEXT => {
                    use layout::context as o;
                    self.note_context(rd(rec, o::CONTEXT_ID), rd(rec, o::DEVICE_ID));
                    None
                }
                kind::DEVICE => {
                    use layout::device as o;
                    let name_ptr: *const libc::c_char = rd(rec, o::NAME);
                    let name = if name_ptr.is_null() {
                        String::new()
                    } else {
                        CStr::from_ptr(name_ptr).to_string_lossy().into_owned()
                    };
                    let id: u32 = rd(rec, o::ID);
                    if !self.devices.iter().any(|d| d.id == id) {
                        self.devices.push(SeenDevice {
                            id,
                            uuid: rd(rec, o::UUID),
                            name,
                            sm_count: rd(rec, o::NUM_MULTIPROCESSORS),
                            memory: rd(rec, o::GLOBAL_MEMORY_SIZE),
                            cc: (rd(rec, o::COMPUTE_CAPABILITY_MAJOR), rd(rec, o::COMPUTE_CAPABILITY_MINOR)),
                        });
                    }
                    None
                }
                _ => {
                    self.skipped += 1;
                    None
                }
            }
        }
    }
}

/// A tiny pointer-keyed cache (the agent avoids extra dependencies).
mod rustc_hash_lite {
    use gputrace_format::StringId;
    use std::collections::HashMap;
    use std::hash::{BuildHasherDefault, Hasher};

    /// Hash for pointer keys: one multiply (SipHash costs more than the
    /// lookup is worth here, and the keys are not attacker-chosen).
    #[derive(Default)]
    pub struct PtrHasher(u64);

    impl Hasher for PtrHasher {
        fn finish(&self) -> u64 {
            self.0
        }
        fn write(&mut self, bytes: &[u8]) {
            for b in bytes {
                self.0 = (self.0.rotate_left(5) ^ *b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            }
        }
        fn write_usize(&mut self, v: usize) {
            self.0 = (v as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(29);
        }
    }

    /// Slots the verified-pointer table starts with (a power of two).
    const MIN_SLOTS: usize = 1024;

    /// Pointer → (bytes, id), and an open-addressing table of every known
    /// pointer with the buffer in which its bytes were last checked.
    ///
    /// Invariant: `fast` holds each pointer of `map` once (and no other,
    /// besides empty slots, pointer 0), at most half full, so a probe
    /// that starts at the pointer's slot meets it or an empty slot. An entry
    /// `(ptr, id, epoch)` with `epoch` equal to the current one means `ptr`
    /// held the bytes of `id` when checked in this buffer. Every record of
    /// a buffer is decoded at about the same time, so the name memory
    /// cannot have changed in between (a pointer reused across a module
    /// unload is seen at the next buffer's first check). Unlike a
    /// direct-mapped cache, two names never evict each other, however many
    /// kernels a program has.
    pub struct PtrMap {
        map: HashMap<usize, (Box<[u8]>, StringId), BuildHasherDefault<PtrHasher>>,
        fast: Vec<(usize, StringId, u64)>,
        epoch: u64,
    }

    impl Default for PtrMap {
        fn default() -> Self {
            PtrMap {
                map: HashMap::default(),
                fast: vec![(0, StringId(0), 0); MIN_SLOTS],
                // Epoch 0 is never current: every entry starts stale.
                epoch: 1,
            }
        }
    }

    #[inline(always)]
    fn slot(ptr: usize, slots: usize) -> usize {
        ((ptr as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize & (slots - 1)
    }

    impl PtrMap {
        /// A new buffer: every pointer is checked again before it is trusted.
        pub fn new_buffer(&mut self) {
            self.epoch += 1;
        }

        /// The slot of `ptr` (non-null) in `fast`, or of the empty slot
        /// where it would go.
        #[inline(always)]
        fn find(&self, ptr: usize) -> usize {
            let mask = self.fast.len() - 1;
            let mut i = slot(ptr, self.fast.len());
            // Ends: the table is at most half full (see the invariant).
            loop {
                let p = self.fast[i].0;
                if p == ptr || p == 0 {
                    return i;
                }
                i = (i + 1) & mask;
            }
        }

        /// The id for `ptr` (non-null) if its bytes were already checked in
        /// this buffer.
        #[inline(always)]
        pub fn verified(&self, ptr: usize) -> Option<StringId> {
            let (p, id, epoch) = self.fast[self.find(ptr)];
            (p == ptr && epoch == self.epoch).then_some(id)
        }

        /// Mark `ptr` (non-null) as holding `id`'s bytes in this buffer.
        fn mark(&mut self, ptr: usize, id: StringId) {
            let i = self.find(ptr);
            if self.fast[i].0 == 0 && (self.map.len() + 1) * 2 > self.fast.len() {
                // Grow (the map already holds `ptr`): rehash every pointer.
                let bigger = vec![(0, StringId(0), 0); self.fast.len() * 2];
                let old = std::mem::replace(&mut self.fast, bigger);
                for e in old.into_iter().filter(|e| e.0 != 0) {
                    let j = self.find(e.0);
                    self.fast[j] = e;
                }
                let j = self.find(ptr);
                self.fast[j] = (ptr, id, self.epoch);
                return;
            }
            self.fast[i] = (ptr, id, self.epoch);
        }

        /// The id for `ptr` (non-null) if it still holds `bytes` (and
        /// remember that it was checked in this buffer).
        pub fn get(&mut self, ptr: usize, bytes: &[u8]) -> Option<StringId> {
            let id = self.map.get(&ptr).filter(|(b, _)| &**b == bytes).map(|(_, id)| *id)?;
            self.mark(ptr, id);
            Some(id)
        }

        /// Remember `ptr` (non-null) → `bytes`, `id` (checked in this buffer).
        pub fn insert(&mut self, ptr: usize, bytes: &[u8], id: StringId) {
            self.map.insert(ptr, (bytes.into(), id));
            self.mark(ptr, id);
        }
    }
}

/// Format a UUID as `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
pub fn uuid_string(u: &[u8; 16]) -> String {
    let h: Vec<String> = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        h[0..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..16].concat()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Build a record of `size` bytes with `fields` written at their offsets.
    fn record(size: usize, fields: &[(usize, &[u8])]) -> Vec<u8> {
        let mut r = vec![0u8; size];
        for (off, b) in fields {
            r[*off..*off + b.len()].copy_from_slice(b);
        }
        r
    }

    /// The trace `w` wrote, read back.
    fn read_back(w: TraceWriter<Vec<u8>>) -> TraceFile {
        TraceFile::from_bytes("decoded.gtrace", w.finish(Trailer::default()).unwrap()).unwrap()
    }

    fn events(trace: &TraceFile) -> Vec<Event> {
        trace.events().collect::<Result<_, _>>().unwrap()
    }

    #[test]
    fn decodes_a_kernel_record_at_the_header_offsets() {
        use layout::kernel as o;
        // Name memory the test can change later (CUPTI's may be reused).
        let mut name = *b"ampere_sgemm_128x64_tn\0";
        let ptr = (name.as_ptr() as usize).to_le_bytes();
        let size = o::LAYOUT.size_at(layout::version::V12_0).unwrap();
        let r = record(
            size,
            &[
                (layout::KIND, &kind::CONCURRENT_KERNEL.to_le_bytes()),
                (o::START, &1000u64.to_le_bytes()),
                (o::END, &2500u64.to_le_bytes()),
                (o::DEVICE_ID, &3u32.to_le_bytes()),
                (o::CONTEXT_ID, &7u32.to_le_bytes()),
                (o::STREAM_ID, &13u32.to_le_bytes()),
                (o::CORRELATION_ID, &99u32.to_le_bytes()),
                (o::GRID_X, &128i32.to_le_bytes()),
                (o::BLOCK_X, &256i32.to_le_bytes()),
                (o::REGISTERS_PER_THREAD, &64u16.to_le_bytes()),
                (o::DYNAMIC_SHARED_MEMORY, &4096i32.to_le_bytes()),
                (o::GRAPH_ID, &5u32.to_le_bytes()),
                (o::GRAPH_NODE_ID, &77u64.to_le_bytes()),
                (o::NAME, &ptr),
            ],
        );
        let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
        let mut d = Decoder::default();
        let k = unsafe { d.kernel(r.as_ptr(), &mut w) };
        assert_eq!(
            (k.start, k.end, k.device, k.context, k.stream),
            (Nanos(1000), Nanos(2500), DeviceId(3), ContextId(7), StreamId(13))
        );
        assert_eq!(
            (k.correlation, k.grid, k.block[0], k.registers),
            (CorrelationId(99), [128, 0, 0], 256, 64)
        );
        assert_eq!((k.dynamic_shared_mem, k.graph_id, k.graph_node_id), (4096, 5, 77));
        // The same pointer with the same bytes: the same id, no new string.
        let again = unsafe { d.kernel(r.as_ptr(), &mut w) };
        assert_eq!(again, k);
        assert_eq!(w.string_count(), 2);
        // The pointer now holds another name (a module unloaded and another
        // loaded there): seen in the next buffer.
        name[..13].copy_from_slice(b"other_kernel\0");
        // Safety of the reads below: `name` is still NUL-terminated.
        let read_name = |d: &mut Decoder, w: &mut TraceWriter<Vec<u8>>| unsafe { d.kernel(r.as_ptr(), w) }.name;
        // Within a buffer a checked pointer is trusted...
        assert_eq!(read_name(&mut d, &mut w), k.name);
        // ... and checked again in the next one.
        d.new_buffer();
        let renamed = read_name(&mut d, &mut w);
        assert_ne!(renamed, k.name);
        assert_eq!(w.intern("other_kernel"), renamed);
        // `decode` writes what `kernel` returns.
        unsafe { d.decode(r.as_ptr(), &mut w) }.unwrap();
        let trace = read_back(w);
        let Some(Event::Kernel(written)) = events(&trace).pop() else {
            panic!("no kernel written")
        };
        assert_eq!((written.start, written.grid, written.graph_node_id), (Nanos(1000), [128, 0, 0], 77));
        assert_eq!(trace.string(written.name), Some("other_kernel"));
    }

    #[test]
    fn collects_nccl_kernels_and_our_external_correlations_for_the_linker() {
        let kernel = |name: &std::ffi::CStr, corr: u32| {
            use layout::kernel as o;
            record(
                o::LAYOUT.size_at(layout::version::V12_0).unwrap(),
                &[
                    (layout::KIND, &kind::CONCURRENT_KERNEL.to_le_bytes()),
                    (o::START, &10u64.to_le_bytes()),
                    (o::END, &20u64.to_le_bytes()),
                    (o::DEVICE_ID, &1u32.to_le_bytes()),
                    (o::STREAM_ID, &21u32.to_le_bytes()),
                    (o::CORRELATION_ID, &corr.to_le_bytes()),
                    (o::NAME, &(name.as_ptr() as usize).to_le_bytes()),
                ],
            )
        };
        let ext = |ext_kind: u32, id: u64, corr: u32| {
            use layout::external_correlation as o;
            record(
                24,
                &[
                    (layout::KIND, &kind::EXTERNAL_CORRELATION.to_le_bytes()),
                    (o::EXTERNAL_KIND, &ext_kind.to_le_bytes()),
                    (o::EXTERNAL_ID, &id.to_le_bytes()),
                    (o::CORRELATION_ID, &corr.to_le_bytes()),
                ],
            )
        };
        let nccl = kernel(c"ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 7);
        let gemm = kernel(c"ampere_sgemm_128x64_tn", 8);
        let ours = ext(5, 1234, 7);
        let kineto = ext(3, 99, 8);
        let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
        let mut d = Decoder::default();
        // Before the plugin is active nothing is collected.
        for r in [&nccl, &ours] {
            unsafe { d.decode(r.as_ptr(), &mut w) }.unwrap();
        }
        assert!(d.comm_kernels.is_empty() && d.ext_links.is_empty());
        d.collect_comm = true;
        for r in [&nccl, &gemm, &ours, &kineto, &nccl] {
            unsafe { d.decode(r.as_ptr(), &mut w) }.unwrap();
        }
        assert_eq!(d.ext_links, vec![(1234, 7)], "only CUSTOM2 ids are ours");
        assert_eq!(
            d.comm_kernels.len(),
            2,
            "the NCCL kernel (twice, from the name cache), not the GEMM"
        );
        assert_eq!(
            d.comm_kernels[0],
            crate::nccl::link::KernelInfo {
                start: 10,
                end: 20,
                device: 1,
                context: 0,
                stream: 21,
                correlation: 7
            }
        );
        // Copies only once a copy-engine collective asked for them.
        let copy = {
            use layout::memcpy as o;
            record(
                o::LAYOUT.size_at(layout::version::V12_0).unwrap(),
                &[
                    (layout::KIND, &kind::MEMCPY.to_le_bytes()),
                    (o::START, &30u64.to_le_bytes()),
                    (o::END, &45u64.to_le_bytes()),
                    (o::CORRELATION_ID, &9u32.to_le_bytes()),
                ],
            )
        };
        unsafe { d.decode(copy.as_ptr(), &mut w) }.unwrap();
        assert_eq!(d.comm_kernels.len(), 2);
        d.collect_copies = true;
        unsafe { d.decode(copy.as_ptr(), &mut w) }.unwrap();
        assert_eq!(
            (d.comm_kernels[2].start, d.comm_kernels[2].end, d.comm_kernels[2].correlation),
            (30, 45, 9)
        );
    }

    #[test]
    fn decodes_a_graph_trace_record_at_the_header_offsets_of_both_layouts() {
        use layout::graph_trace as o;
        for version in [layout::version::V12_0, layout::version::V12_4] {
            let size = o::LAYOUT.size_at(version).unwrap();
            let r = record(
                size,
                &[
                    (layout::KIND, &kind::GRAPH_TRACE.to_le_bytes()),
                    (o::CORRELATION_ID, &41u32.to_le_bytes()),
                    (o::START, &5_000u64.to_le_bytes()),
                    (o::END, &9_000u64.to_le_bytes()),
                    (o::DEVICE_ID, &1u32.to_le_bytes()),
                    (o::GRAPH_ID, &17u32.to_le_bytes()),
                    (o::CONTEXT_ID, &2u32.to_le_bytes()),
                    (o::STREAM_ID, &7u32.to_le_bytes()),
                ],
            );
            let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
            let mut d = Decoder::default();
            unsafe { d.decode(r.as_ptr(), &mut w) }.unwrap();
            assert_eq!(d.skipped, 0);
            let written = events(&read_back(w));
            assert_eq!(
                written,
                vec![Event::GraphLaunch(GraphLaunch {
                    start: Nanos(5_000),
                    end: Nanos(9_000),
                    device: DeviceId(1),
                    context: ContextId(2),
                    stream: StreamId(7),
                    correlation: CorrelationId(41),
                    graph_id: 17,
                })],
                "layout of {version}"
            );
        }
    }

    #[test]
    fn graph_launches_are_counted_per_graph_by_correlation_id() {
        let mut g = GraphLaunches::default();
        g.kernel(5, 1);
        assert_eq!(g.most, 0, "not counted unless on");
        g.on = true;
        // Launch 1 of graph 5: three nodes share correlation 10; a kernel outside graphs.
        for corr in [10, 10, 10] {
            g.kernel(5, corr);
        }
        g.kernel(0, 11);
        assert_eq!(g.most, 1);
        // Launches 2 and 3 of graph 5, one launch of graph 6.
        g.kernel(5, 12);
        g.kernel(6, 13);
        g.kernel(5, 14);
        g.kernel(5, 14);
        assert_eq!(g.most, 3);
        // Only the first GRAPHS graphs are followed.
        let mut g = GraphLaunches {
            on: true,
            ..Default::default()
        };
        for id in 1..=GraphLaunches::GRAPHS as u32 + 10 {
            g.kernel(id, id);
        }
        assert_eq!(g.seen.len(), GraphLaunches::GRAPHS);
    }

    #[test]
    fn overhead_is_summed_by_kind_with_unknown_kinds_as_other() {
        let mut o = Overhead::default();
        o.add(2 << 16, 3, 1_000);
        o.add(2 << 16, 5, 500);
        o.add(1 << 16, 2, 7);
        o.add(42 << 16, 0, 3);
        let seen: Vec<_> = o.seen().collect();
        assert_eq!(seen, vec![("buffer_flush", 1, 7), ("instrumentation", 2, 1_500), ("other", 1, 3)]);
        // Device and stream objects are GPU time, threads CPU time, unknown neither.
        assert_eq!((o.cpu_ns, o.gpu_ns), (7, 1_500));
    }

    #[test]
    fn noisy_api_calls_are_dropped_and_unknown_kinds_skipped() {
        use layout::api as o;
        let get_device = cbid_names::RUNTIME.iter().position(|(n, _)| *n == "cudaGetDevice").unwrap() as u32;
        let launch = cbid_names::RUNTIME.iter().position(|(n, _)| *n == "cudaLaunchKernel").unwrap() as u32;
        let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
        let mut d = Decoder::default();
        let mk = |cbid: u32| {
            record(
                40,
                &[
                    (0, &kind::RUNTIME.to_le_bytes()),
                    (o::CBID, &cbid.to_le_bytes()),
                    (o::THREAD_ID, &4242u32.to_le_bytes()),
                ],
            )
        };
        let unknown = record(64, &[(0, &4000u32.to_le_bytes())]);
        for r in [mk(get_device), mk(launch), unknown] {
            unsafe { d.decode(r.as_ptr(), &mut w) }.unwrap();
        }
        assert_eq!((d.filtered_api, d.skipped), (1, 1));
        let trace = read_back(w);
        let [Event::Api(a)] = &events(&trace)[..] else {
            panic!("one API call expected")
        };
        assert_eq!((a.thread, a.cbid, a.domain), (ThreadId(4242), launch, ApiDomain::RUNTIME));
        assert_eq!(trace.string(a.name), Some("cudaLaunchKernel"));
    }

    #[test]
    fn decode_writes_every_kept_record() {
        let name = c"void gemm<float>(float*, int)";
        let kernel = {
            use layout::kernel as o;
            record(
                o::LAYOUT.size_at(layout::version::V13_0).unwrap(),
                &[
                    (layout::KIND, &kind::CONCURRENT_KERNEL.to_le_bytes()),
                    (o::START, &1_000u64.to_le_bytes()),
                    (o::END, &2_000u64.to_le_bytes()),
                    (o::DEVICE_ID, &1u32.to_le_bytes()),
                    (o::CONTEXT_ID, &3u32.to_le_bytes()),
                    (o::STREAM_ID, &7u32.to_le_bytes()),
                    (o::CORRELATION_ID, &5u32.to_le_bytes()),
                    (o::GRID_X, &64i32.to_le_bytes()),
                    (o::NAME, &(name.as_ptr() as usize).to_le_bytes()),
                ],
            )
        };
        let api = |domain: u32, cbid: u32, start: u64| {
            use layout::api as o;
            record(
                o::LAYOUT.size_at(layout::version::V13_0).unwrap(),
                &[
                    (layout::KIND, &domain.to_le_bytes()),
                    (o::CBID, &cbid.to_le_bytes()),
                    (o::START, &start.to_le_bytes()),
                    (o::END, &(start + 300).to_le_bytes()),
                    (o::THREAD_ID, &42u32.to_le_bytes()),
                    (o::CORRELATION_ID, &5u32.to_le_bytes()),
                ],
            )
        };
        let runtime = |n: &str| cbid_names::RUNTIME.iter().position(|(x, _)| *x == n).unwrap() as u32;
        let copy = {
            use layout::memcpy as o;
            record(
                o::LAYOUT.size_at(layout::version::V13_0).unwrap(),
                &[
                    (layout::KIND, &kind::MEMCPY.to_le_bytes()),
                    (o::START, &3_000u64.to_le_bytes()),
                    (o::END, &4_000u64.to_le_bytes()),
                    (o::BYTES, &4096u64.to_le_bytes()),
                ],
            )
        };
        let records = [
            api(kind::RUNTIME, runtime("cudaLaunchKernel"), 500),
            api(kind::DRIVER, 307, 600),
            api(kind::RUNTIME, runtime("cudaGetDevice"), 700),
            api(kind::RUNTIME, 4000, 800), // past the names table
            api(kind::DRIVER, 5000, 900),  // past `API_TABLE` too
            kernel.clone(),
            copy,
            kernel,
        ];
        let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
        let mut d = Decoder::default();
        for _ in 0..2 {
            for r in &records {
                unsafe { d.decode(r.as_ptr(), &mut w) }.unwrap();
            }
        }
        assert_eq!(d.filtered_api, 2, "cudaGetDevice, twice");
        let trace = read_back(w);
        let events = events(&trace);
        assert_eq!(events.len(), 14, "{events:?}");
        let name = |id| trace.string(id).unwrap_or("?").to_string();
        let mut kernels = Vec::new();
        let mut calls = Vec::new();
        let mut copies = Vec::new();
        for e in &events {
            match e {
                Event::Kernel(k) => kernels.push((k.start, k.end, k.device, k.stream, k.correlation, k.grid, name(k.name))),
                Event::Api(a) => calls.push((a.start, a.domain, a.thread, name(a.name))),
                Event::Memcpy(m) => copies.push((m.start, m.end, m.bytes)),
                e => panic!("unexpected {e:?}"),
            }
        }
        let gemm = (
            Nanos(1_000),
            Nanos(2_000),
            DeviceId(1),
            StreamId(7),
            CorrelationId(5),
            [64, 0, 0],
            "void gemm<float>(float*, int)".to_string(),
        );
        assert_eq!(kernels, vec![gemm; 4]);
        assert_eq!(copies, vec![(Nanos(3_000), Nanos(4_000), 4096); 2]);
        let starts: Vec<Nanos> = calls.iter().map(|c| c.0).collect();
        assert_eq!(starts, [500, 500, 600, 600, 800, 800, 900, 900].map(Nanos));
        assert!(calls.iter().all(|c| c.2 == ThreadId(42)));
        assert_eq!((calls[0].1, calls[0].3.as_str()), (ApiDomain::RUNTIME, "cudaLaunchKernel"));
        assert_eq!(calls[2].1, ApiDomain::DRIVER);
    }

    #[test]
    fn every_kernel_name_stays_verified_within_a_buffer() {
        // Far more names than the table starts with: none evicts another.
        let mut m = rustc_hash_lite::PtrMap::default();
        let ptr = |i: usize| 0x7f00_0000_0000 + i * 48;
        for i in 0..5000 {
            assert_eq!(m.verified(ptr(i)), None);
            m.insert(ptr(i), format!("k{i}").as_bytes(), StringId(i as u32 + 1));
        }
        for i in 0..5000 {
            assert_eq!(m.verified(ptr(i)), Some(StringId(i as u32 + 1)));
        }
        // The next buffer checks each again; a reused pointer is noticed.
        m.new_buffer();
        assert_eq!(m.verified(ptr(7)), None);
        assert_eq!(m.get(ptr(7), b"k7"), Some(StringId(8)));
        assert_eq!(m.verified(ptr(7)), Some(StringId(8)));
        assert_eq!(m.get(ptr(8), b"other"), None);
        assert_eq!(m.verified(ptr(8)), None);
        assert_eq!(m.verified(0), None);
    }

    #[test]
    fn uuid_format() {
        let u = [0xab; 16];
        assert_eq!(uuid_string(&u), "GPU-abababab-abab-abab-abab-abababababab");
    }
}
