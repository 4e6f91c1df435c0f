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
    /// MEMCPY2 (peer to peer).
    pub const MEMCPY2: u32 = 22;
    /// SYNCHRONIZATION.
    pub const SYNCHRONIZATION: u32 = 38;
    /// EXTERNAL_CORRELATION.
    pub const EXTERNAL_CORRELATION: u32 = 39;
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
    /// Records of kinds not decoded (skipped).
    pub skipped: u64,
    /// API records dropped as noise (queries such as cudaGetDevice).
    pub filtered_api: u64,
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
}

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

    fn note_context(&mut self, ctx: u32, dev: u32) {
        if !self.context_device.iter().any(|(c, _)| *c == ctx) {
            self.context_device.push((ctx, dev));
        }
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

    fn kernel_name<W: std::io::Write>(&mut self, ptr: *const libc::c_char, w: &mut TraceWriter<W>) -> StringId {
        if ptr.is_null() {
            return w.intern("<unnamed kernel>");
        }
        if let Some(id) = self.names.verified(ptr as usize) {
            return id;
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

    fn api_name<W: std::io::Write>(&mut self, domain: u32, cbid: u32, w: &mut TraceWriter<W>) -> Option<StringId> {
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

    /// Decode one record. Returns the event, if it is a kind we keep.
    ///
    /// # Safety
    /// `rec` must point at a complete record returned by
    /// `cuptiActivityGetNextRecord`.
    pub unsafe fn record<W: std::io::Write>(&mut self, rec: *const u8, w: &mut TraceWriter<W>) -> Option<Event> {
        // Safety (all reads below): offsets from the layout tables, inside
        // the smallest record of each kind in every supported version.
        unsafe {
            let k: u32 = rd(rec, layout::KIND);
            match k {
                kind::CONCURRENT_KERNEL => {
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
                    Some(Event::Kernel(k))
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
                kind::RUNTIME | kind::DRIVER => {
                    use layout::api as o;
                    let cbid: u32 = rd(rec, o::CBID);
                    let Some(name) = self.api_name(k, cbid, w) else {
                        self.filtered_api += 1;
                        return None;
                    };
                    Some(Event::Api(ApiCall {
                        start: Nanos(rd(rec, o::START)),
                        end: Nanos(rd(rec, o::END)),
                        thread: ThreadId(rd(rec, o::THREAD_ID)),
                        correlation: CorrelationId(rd(rec, o::CORRELATION_ID)),
                        domain: if k == kind::RUNTIME {
                            ApiDomain::RUNTIME
                        } else {
                            ApiDomain::DRIVER
                        },
                        cbid,
                        name,
                        return_value: rd(rec, o::RETURN_VALUE),
                    }))
                }
                kind::EXTERNAL_CORRELATION => {
                    use layout::external_correlation as o;
                    if self.collect_comm && rd::<u32>(rec, o::EXTERNAL_KIND) == EXTERNAL_KIND_CUSTOM2 {
                        self.ext_links.push((rd(rec, o::EXTERNAL_ID), rd(rec, o::CORRELATION_ID)));
                    }
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

    /// Slots of the verified-pointer cache (a power of two).
    const FAST_SLOTS: usize = 1024;

    /// Pointer → (bytes, id), and a direct-mapped cache of the pointers
    /// whose bytes were checked during the current buffer.
    ///
    /// Invariant: a `fast` slot `(ptr, id, epoch)` with `epoch` equal to the
    /// current one means `ptr` held the bytes of `id` when checked in this
    /// buffer. Every record of a buffer is decoded at about the same time,
    /// so the name memory cannot have changed in between (a pointer reused
    /// across a module unload is seen at the next buffer's first check).
    pub struct PtrMap {
        map: HashMap<usize, (Box<[u8]>, StringId), BuildHasherDefault<PtrHasher>>,
        fast: Vec<(usize, StringId, u64)>,
        epoch: u64,
    }

    impl Default for PtrMap {
        fn default() -> Self {
            PtrMap {
                map: HashMap::default(),
                // Epoch 0 is never current: every slot starts stale.
                fast: vec![(0, StringId(0), 0); FAST_SLOTS],
                epoch: 1,
            }
        }
    }

    fn slot(ptr: usize) -> usize {
        ((ptr as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize & (FAST_SLOTS - 1)
    }

    impl PtrMap {
        /// A new buffer: every pointer is checked again before it is trusted.
        pub fn new_buffer(&mut self) {
            self.epoch += 1;
        }

        /// The id for `ptr` if its bytes were already checked in this buffer.
        #[inline]
        pub fn verified(&self, ptr: usize) -> Option<StringId> {
            let (p, id, epoch) = self.fast[slot(ptr)];
            (p == ptr && epoch == self.epoch).then_some(id)
        }

        /// The id for `ptr` if it still holds `bytes` (and remember that it
        /// was checked in this buffer).
        pub fn get(&mut self, ptr: usize, bytes: &[u8]) -> Option<StringId> {
            let id = self.map.get(&ptr).filter(|(b, _)| &**b == bytes).map(|(_, id)| *id)?;
            self.fast[slot(ptr)] = (ptr, id, self.epoch);
            Some(id)
        }

        /// Remember `ptr` → `bytes`, `id` (checked in this buffer).
        pub fn insert(&mut self, ptr: usize, bytes: &[u8], id: StringId) {
            self.map.insert(ptr, (bytes.into(), id));
            self.fast[slot(ptr)] = (ptr, id, self.epoch);
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
        let e = unsafe { d.record(r.as_ptr(), &mut w) }.unwrap();
        let Event::Kernel(k) = e else { panic!("{e:?}") };
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
        let again = unsafe { d.record(r.as_ptr(), &mut w) }.unwrap();
        assert_eq!(again, e);
        assert_eq!(w.string_count(), 2);
        // The pointer now holds another name (a module unloaded and another
        // loaded there): seen in the next buffer.
        name[..13].copy_from_slice(b"other_kernel\0");
        // Safety of the reads below: `name` is still NUL-terminated.
        let read_name = |d: &mut Decoder, w: &mut TraceWriter<Vec<u8>>| {
            let Some(Event::Kernel(k)) = (unsafe { d.record(r.as_ptr(), w) }) else {
                panic!("not a kernel")
            };
            k.name
        };
        // Within a buffer a checked pointer is trusted...
        assert_eq!(read_name(&mut d, &mut w), k.name);
        // ... and checked again in the next one.
        d.new_buffer();
        let renamed = read_name(&mut d, &mut w);
        assert_ne!(renamed, k.name);
        assert_eq!(w.intern("other_kernel"), renamed);
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
            unsafe { d.record(r.as_ptr(), &mut w) };
        }
        assert!(d.comm_kernels.is_empty() && d.ext_links.is_empty());
        d.collect_comm = true;
        for r in [&nccl, &gemm, &ours, &kineto, &nccl] {
            unsafe { d.record(r.as_ptr(), &mut w) };
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
        unsafe { d.record(copy.as_ptr(), &mut w) };
        assert_eq!(d.comm_kernels.len(), 2);
        d.collect_copies = true;
        unsafe { d.record(copy.as_ptr(), &mut w) };
        assert_eq!(
            (d.comm_kernels[2].start, d.comm_kernels[2].end, d.comm_kernels[2].correlation),
            (30, 45, 9)
        );
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
        assert!(unsafe { d.record(mk(get_device).as_ptr(), &mut w) }.is_none());
        assert_eq!(d.filtered_api, 1);
        let Some(Event::Api(a)) = (unsafe { d.record(mk(launch).as_ptr(), &mut w) }) else {
            panic!()
        };
        assert_eq!((a.thread, a.cbid, a.domain), (ThreadId(4242), launch, ApiDomain::RUNTIME));
        let unknown = record(64, &[(0, &4000u32.to_le_bytes())]);
        assert!(unsafe { d.record(unknown.as_ptr(), &mut w) }.is_none());
        assert_eq!(d.skipped, 1);
    }

    #[test]
    fn uuid_format() {
        let u = [0xab; 16];
        assert_eq!(uuid_string(&u), "GPU-abababab-abab-abab-abab-abababababab");
    }
}
