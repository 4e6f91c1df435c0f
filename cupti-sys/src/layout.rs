//! Byte offsets of the activity-record fields the gputrace decoder reads,
//! valid for every CUPTI library from 12.0 to 13.5 (x86_64 Linux).
//!
//! Why offsets and not the generated structs: each CUPTI release may send a
//! newer, longer struct for the same kind (Kernel9 in 12.x, Kernel10..13 in
//! 13.x), but every newer struct only appends fields, so one offset table
//! covers all of them. Read a field with `ptr::read_unaligned(record.add(OFFSET)
//! as *const T)`, the type being the C field's (`u32` unless noted).
//!
//! Rules for the decoder:
//! - Advance with `cuptiActivityGetNextRecord`, never by a size from here.
//! - A field is valid only if [`RecordLayout::has_field`] says so for the
//!   running library's `cuptiGetVersion()`. Fields with `since ==
//!   version::V12_0` lie inside [`RecordLayout::min_size`] and are always
//!   valid; later ones (e.g. [`kernel::PRIORITY`]) lie past the end of older
//!   records, where the bytes belong to the next record, or (the
//!   `IS_DEVICE_LAUNCHED` bytes of memcpy/memset) in padding that 12.x does not
//!   set.
//! - [`record_size`] is the size of the struct the library sends, as measured
//!   for the versions in [`version::MEASURED`]. For a version between two
//!   measured ones it returns the older size: a lower bound, so trusting it
//!   never reads past a record.
//!
//! Every number here is checked against the real headers by
//! `tests/layouts.rs` (against `shared/research/cupti-layouts/layout_v*.json`,
//! gdb `ptype /o` of each header) and against the generated structs
//! (`offset_of!`).

use crate::bindings_v13 as b;

/// `cuptiGetVersion()` values of the libraries the layouts were measured on,
/// one per PyPI wheel (`nvidia-cuda-cupti-cu12` / `nvidia-cuda-cupti`).
///
/// 12.x reports a small counter (12.0.146 reports 18, the same as 11.8), 13.x
/// reports `xxyyzz`. Do not derive the CUDA version from these.
pub mod version {
    /// 12.0.146
    pub const V12_0: u32 = 18;
    /// 12.4.127
    pub const V12_4: u32 = 22;
    /// 12.6.80
    pub const V12_6: u32 = 24;
    /// 12.8.90
    pub const V12_8: u32 = 26;
    /// 12.9.79
    pub const V12_9: u32 = 28;
    /// 13.0.85
    pub const V13_0: u32 = 130001;
    /// 13.1.115
    pub const V13_1: u32 = 130101;
    /// 13.2.86
    pub const V13_2: u32 = 130202;
    /// 13.3.75
    pub const V13_3: u32 = 130301;
    /// 13.4.92
    pub const V13_4: u32 = 130401;
    /// 13.5.25
    pub const V13_5: u32 = 130500;

    /// (CUDA minor as in `layout_v<minor>.json`, `cuptiGetVersion()`), oldest first.
    pub const MEASURED: &[(&str, u32)] = &[
        ("12.0", V12_0),
        ("12.4", V12_4),
        ("12.6", V12_6),
        ("12.8", V12_8),
        ("12.9", V12_9),
        ("13.0", V13_0),
        ("13.1", V13_1),
        ("13.2", V13_2),
        ("13.3", V13_3),
        ("13.4", V13_4),
        ("13.5", V13_5),
    ];
}

use version::*;

/// Offset of `kind` (`u32`, a `CUpti_ActivityKind`), the same in every record.
pub const KIND: usize = 0;

/// One field of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// The C field name.
    pub name: &'static str,
    /// Byte offset from the start of the record.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
    /// First `cuptiGetVersion()` whose records carry this field.
    pub since: u32,
}

/// The C struct CUPTI sends for a kind, from a library version on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StructVersion {
    /// C struct name, e.g. `CUpti_ActivityKernel9`.
    pub name: &'static str,
    /// `sizeof` the struct.
    pub size: usize,
    /// First measured `cuptiGetVersion()` that sends it.
    pub since: u32,
}

/// Layout of the records of one or more activity kinds.
#[derive(Debug, Clone, Copy)]
pub struct RecordLayout {
    /// The `CUpti_ActivityKind` values that use these records.
    pub kinds: &'static [u32],
    /// Struct per library version, oldest first.
    pub structs: &'static [StructVersion],
    /// The fields gputrace reads, `kind` first.
    pub fields: &'static [Field],
}

impl RecordLayout {
    /// The struct a library reporting `cupti_version` sends; `None` below 12.0.
    pub fn struct_at(&self, cupti_version: u32) -> Option<&'static StructVersion> {
        self.structs.iter().rev().find(|s| s.since <= cupti_version)
    }

    /// Size of the records a library reporting `cupti_version` sends (a lower
    /// bound for unmeasured versions); `None` below 12.0.
    pub fn size_at(&self, cupti_version: u32) -> Option<usize> {
        self.struct_at(cupti_version).map(|s| s.size)
    }

    /// Size of the oldest struct: every library sends at least this much.
    pub fn min_size(&self) -> usize {
        self.structs[0].size
    }

    /// Whether records from a library reporting `cupti_version` carry `field`.
    pub fn has_field(&self, field: &Field, cupti_version: u32) -> bool {
        cupti_version >= field.since && self.size_at(cupti_version).is_some_and(|size| field.offset + field.size <= size)
    }

    /// The field with C name `name`.
    pub fn field(&self, name: &str) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

const fn field(name: &'static str, offset: usize, size: usize) -> Field {
    Field {
        name,
        offset,
        size,
        since: V12_0,
    }
}

const fn field_since(name: &'static str, offset: usize, size: usize, since: u32) -> Field {
    Field { name, offset, size, since }
}

const fn st(name: &'static str, size: usize, since: u32) -> StructVersion {
    StructVersion { name, size, since }
}

/// KERNEL (3) and CONCURRENT_KERNEL (10): Kernel9 (12.x, 208 bytes) to
/// Kernel13 (13.4+, 248 bytes).
pub mod kernel {
    use super::*;

    /// `u8` union: requested (low 4 bits) and executed (high 4 bits) cache config.
    pub const CACHE_CONFIG: usize = 4;
    /// `u8`.
    pub const SHARED_MEMORY_CONFIG: usize = 5;
    /// `u16`.
    pub const REGISTERS_PER_THREAD: usize = 6;
    /// `u64` ns; 0 when CUPTI ran out of device buffer memory.
    pub const START: usize = 16;
    /// `u64` ns.
    pub const END: usize = 24;
    /// `u64` ns.
    pub const COMPLETED: usize = 32;
    pub const DEVICE_ID: usize = 40;
    pub const CONTEXT_ID: usize = 44;
    pub const STREAM_ID: usize = 48;
    /// `i32`.
    pub const GRID_X: usize = 52;
    /// `i32`.
    pub const GRID_Y: usize = 56;
    /// `i32`.
    pub const GRID_Z: usize = 60;
    /// `i32`.
    pub const BLOCK_X: usize = 64;
    /// `i32`.
    pub const BLOCK_Y: usize = 68;
    /// `i32`.
    pub const BLOCK_Z: usize = 72;
    /// `i32`.
    pub const STATIC_SHARED_MEMORY: usize = 76;
    /// `i32`.
    pub const DYNAMIC_SHARED_MEMORY: usize = 80;
    pub const LOCAL_MEMORY_PER_THREAD: usize = 84;
    pub const LOCAL_MEMORY_TOTAL: usize = 88;
    pub const CORRELATION_ID: usize = 92;
    /// `i64`.
    pub const GRID_ID: usize = 96;
    /// `*const c_char`, CUPTI-owned, shared by records of the same kernel.
    pub const NAME: usize = 104;
    /// `u64` ns; only with `cuptiActivityEnableLatencyTimestamps(1)`.
    pub const QUEUED: usize = 120;
    /// `u64` ns; only with `cuptiActivityEnableLatencyTimestamps(1)`.
    pub const SUBMITTED: usize = 128;
    /// `u8`.
    pub const LAUNCH_TYPE: usize = 136;
    pub const SHARED_MEMORY_EXECUTED: usize = 140;
    /// `u64`.
    pub const GRAPH_NODE_ID: usize = 144;
    pub const SHMEM_LIMIT_CONFIG: usize = 152;
    pub const GRAPH_ID: usize = 156;
    pub const CHANNEL_ID: usize = 168;
    pub const CHANNEL_TYPE: usize = 172;
    pub const CLUSTER_X: usize = 176;
    pub const CLUSTER_Y: usize = 180;
    pub const CLUSTER_Z: usize = 184;
    pub const CLUSTER_SCHEDULING_POLICY: usize = 188;
    /// `u64`.
    pub const LOCAL_MEMORY_TOTAL_V2: usize = 192;
    pub const MAX_POTENTIAL_CLUSTER_SIZE: usize = 200;
    pub const MAX_ACTIVE_CLUSTERS: usize = 204;
    /// `u8`; 13.0+.
    pub const IS_DEVICE_LAUNCHED: usize = 208;
    /// `i32`; 13.1+.
    pub const PRIORITY: usize = 216;
    /// 13.3+.
    pub const EXECUTION_MODEL: usize = 224;
    /// 13.4+.
    pub const SOURCE_GRAPH_ID: usize = 232;
    /// `u64`; 13.4+.
    pub const SOURCE_GRAPH_NODE_ID: usize = 240;

    pub const LAYOUT: RecordLayout = RecordLayout {
        kinds: &[b::CUPTI_ACTIVITY_KIND_KERNEL, b::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL],
        structs: &[
            st("CUpti_ActivityKernel9", 208, V12_0),
            st("CUpti_ActivityKernel10", 216, V13_0),
            st("CUpti_ActivityKernel11", 224, V13_1),
            st("CUpti_ActivityKernel12", 232, V13_3),
            st("CUpti_ActivityKernel13", 248, V13_4),
        ],
        fields: &[
            field("kind", KIND, 4),
            field("cacheConfig", CACHE_CONFIG, 1),
            field("sharedMemoryConfig", SHARED_MEMORY_CONFIG, 1),
            field("registersPerThread", REGISTERS_PER_THREAD, 2),
            field("start", START, 8),
            field("end", END, 8),
            field("completed", COMPLETED, 8),
            field("deviceId", DEVICE_ID, 4),
            field("contextId", CONTEXT_ID, 4),
            field("streamId", STREAM_ID, 4),
            field("gridX", GRID_X, 4),
            field("gridY", GRID_Y, 4),
            field("gridZ", GRID_Z, 4),
            field("blockX", BLOCK_X, 4),
            field("blockY", BLOCK_Y, 4),
            field("blockZ", BLOCK_Z, 4),
            field("staticSharedMemory", STATIC_SHARED_MEMORY, 4),
            field("dynamicSharedMemory", DYNAMIC_SHARED_MEMORY, 4),
            field("localMemoryPerThread", LOCAL_MEMORY_PER_THREAD, 4),
            field("localMemoryTotal", LOCAL_MEMORY_TOTAL, 4),
            field("correlationId", CORRELATION_ID, 4),
            field("gridId", GRID_ID, 8),
            field("name", NAME, 8),
            field("queued", QUEUED, 8),
            field("submitted", SUBMITTED, 8),
            field("launchType", LAUNCH_TYPE, 1),
            field("sharedMemoryExecuted", SHARED_MEMORY_EXECUTED, 4),
            field("graphNodeId", GRAPH_NODE_ID, 8),
            field("shmemLimitConfig", SHMEM_LIMIT_CONFIG, 4),
            field("graphId", GRAPH_ID, 4),
            field("channelID", CHANNEL_ID, 4),
            field("channelType", CHANNEL_TYPE, 4),
            field("clusterX", CLUSTER_X, 4),
            field("clusterY", CLUSTER_Y, 4),
            field("clusterZ", CLUSTER_Z, 4),
            field("clusterSchedulingPolicy", CLUSTER_SCHEDULING_POLICY, 4),
            field("localMemoryTotal_v2", LOCAL_MEMORY_TOTAL_V2, 8),
            field("maxPotentialClusterSize", MAX_POTENTIAL_CLUSTER_SIZE, 4),
            field("maxActiveClusters", MAX_ACTIVE_CLUSTERS, 4),
            field_since("isDeviceLaunched", IS_DEVICE_LAUNCHED, 1, V13_0),
            field_since("priority", PRIORITY, 4, V13_1),
            field_since("executionModel", EXECUTION_MODEL, 4, V13_3),
            field_since("sourceGraphId", SOURCE_GRAPH_ID, 4, V13_4),
            field_since("sourceGraphNodeId", SOURCE_GRAPH_NODE_ID, 8, V13_4),
        ],
    };
}

/// MEMCPY (1): Memcpy5 (88 bytes), Memcpy6 (12.8+, 96), Memcpy7 (13.4+, 112).
pub mod memcpy {
    use super::*;

    /// `u8`, a `CUpti_ActivityMemcpyKind` (1 HTOD, 2 DTOH, ..., 8 DTOD, 10 PTOP).
    pub const COPY_KIND: usize = 4;
    /// `u8`, a `CUpti_ActivityMemoryKind`.
    pub const SRC_KIND: usize = 5;
    /// `u8`, a `CUpti_ActivityMemoryKind`.
    pub const DST_KIND: usize = 6;
    /// `u8`, bit 0 = async.
    pub const FLAGS: usize = 7;
    /// `u64`.
    pub const BYTES: usize = 8;
    /// `u64` ns.
    pub const START: usize = 16;
    /// `u64` ns.
    pub const END: usize = 24;
    pub const DEVICE_ID: usize = 32;
    pub const CONTEXT_ID: usize = 36;
    pub const STREAM_ID: usize = 40;
    /// Correlates with the driver API record.
    pub const CORRELATION_ID: usize = 44;
    /// Correlates with the runtime API record.
    pub const RUNTIME_CORRELATION_ID: usize = 48;
    /// `u64`.
    pub const GRAPH_NODE_ID: usize = 64;
    pub const GRAPH_ID: usize = 72;
    pub const CHANNEL_ID: usize = 76;
    pub const CHANNEL_TYPE: usize = 80;
    /// `u8`; 13.0+ (padding before).
    pub const IS_DEVICE_LAUNCHED: usize = 84;
    /// `u64`; 12.8+.
    pub const COPY_COUNT: usize = 88;
    /// 13.4+.
    pub const SOURCE_GRAPH_ID: usize = 96;
    /// `u64`; 13.4+.
    pub const SOURCE_GRAPH_NODE_ID: usize = 104;

    pub const LAYOUT: RecordLayout = RecordLayout {
        kinds: &[b::CUPTI_ACTIVITY_KIND_MEMCPY],
        structs: &[
            st("CUpti_ActivityMemcpy5", 88, V12_0),
            st("CUpti_ActivityMemcpy6", 96, V12_8),
            st("CUpti_ActivityMemcpy7", 112, V13_4),
        ],
        fields: &[
            field("kind", KIND, 4),
            field("copyKind", COPY_KIND, 1),
            field("srcKind", SRC_KIND, 1),
            field("dstKind", DST_KIND, 1),
            field("flags", FLAGS, 1),
            field("bytes", BYTES, 8),
            field("start", START, 8),
            field("end", END, 8),
            field("deviceId", DEVICE_ID, 4),
            field("contextId", CONTEXT_ID, 4),
            field("streamId", STREAM_ID, 4),
            field("correlationId", CORRELATION_ID, 4),
            field("runtimeCorrelationId", RUNTIME_CORRELATION_ID, 4),
            field("graphNodeId", GRAPH_NODE_ID, 8),
            field("graphId", GRAPH_ID, 4),
            field("channelID", CHANNEL_ID, 4),
            field("channelType", CHANNEL_TYPE, 4),
            field_since("isDeviceLaunched", IS_DEVICE_LAUNCHED, 1, V13_0),
            field_since("copyCount", COPY_COUNT, 8, V12_8),
            field_since("sourceGraphId", SOURCE_GRAPH_ID, 4, V13_4),
            field_since("sourceGraphNodeId", SOURCE_GRAPH_NODE_ID, 8, V13_4),
        ],
    };
}

/// MEMCPY2 (22), peer-to-peer copies: MemcpyPtoP4, 96 bytes in every version.
pub mod memcpy_p2p {
    use super::*;

    /// `u8`, a `CUpti_ActivityMemcpyKind`.
    pub const COPY_KIND: usize = 4;
    /// `u8`.
    pub const SRC_KIND: usize = 5;
    /// `u8`.
    pub const DST_KIND: usize = 6;
    /// `u8`.
    pub const FLAGS: usize = 7;
    /// `u64`.
    pub const BYTES: usize = 8;
    /// `u64` ns.
    pub const START: usize = 16;
    /// `u64` ns.
    pub const END: usize = 24;
    pub const DEVICE_ID: usize = 32;
    pub const CONTEXT_ID: usize = 36;
    pub const STREAM_ID: usize = 40;
    pub const SRC_DEVICE_ID: usize = 44;
    pub const SRC_CONTEXT_ID: usize = 48;
    pub const DST_DEVICE_ID: usize = 52;
    pub const DST_CONTEXT_ID: usize = 56;
    pub const CORRELATION_ID: usize = 60;
    /// `u64`.
    pub const GRAPH_NODE_ID: usize = 72;
    pub const GRAPH_ID: usize = 80;
    pub const CHANNEL_ID: usize = 84;
    pub const CHANNEL_TYPE: usize = 88;

    pub const LAYOUT: RecordLayout = RecordLayout {
        kinds: &[b::CUPTI_ACTIVITY_KIND_MEMCPY2],
        structs: &[st("CUpti_ActivityMemcpyPtoP4", 96, V12_0)],
        fields: &[
            field("kind", KIND, 4),
            field("copyKind", COPY_KIND, 1),
            field("srcKind", SRC_KIND, 1),
            field("dstKind", DST_KIND, 1),
            field("flags", FLAGS, 1),
            field("bytes", BYTES, 8),
            field("start", START, 8),
            field("end", END, 8),
            field("deviceId", DEVICE_ID, 4),
            field("contextId", CONTEXT_ID, 4),
            field("streamId", STREAM_ID, 4),
            field("srcDeviceId", SRC_DEVICE_ID, 4),
            field("srcContextId", SRC_CONTEXT_ID, 4),
            field("dstDeviceId", DST_DEVICE_ID, 4),
            field("dstContextId", DST_CONTEXT_ID, 4),
            field("correlationId", CORRELATION_ID, 4),
            field("graphNodeId", GRAPH_NODE_ID, 8),
            field("graphId", GRAPH_ID, 4),
            field("channelID", CHANNEL_ID, 4),
            field("channelType", CHANNEL_TYPE, 4),
        ],
    };
}

/// MEMSET (2): Memset4 (88 bytes), Memset5 (13.4+, 104).
pub mod memset {
    use super::*;

    pub const VALUE: usize = 4;
    /// `u64`.
    pub const BYTES: usize = 8;
    /// `u64` ns.
    pub const START: usize = 16;
    /// `u64` ns.
    pub const END: usize = 24;
    pub const DEVICE_ID: usize = 32;
    pub const CONTEXT_ID: usize = 36;
    pub const STREAM_ID: usize = 40;
    pub const CORRELATION_ID: usize = 44;
    /// `u16`, bit 0 = async.
    pub const FLAGS: usize = 48;
    /// `u16`, a `CUpti_ActivityMemoryKind`.
    pub const MEMORY_KIND: usize = 50;
    /// `u64`.
    pub const GRAPH_NODE_ID: usize = 64;
    pub const GRAPH_ID: usize = 72;
    pub const CHANNEL_ID: usize = 76;
    pub const CHANNEL_TYPE: usize = 80;
    /// `u8`; 13.0+ (padding before).
    pub const IS_DEVICE_LAUNCHED: usize = 84;
    /// 13.4+.
    pub const SOURCE_GRAPH_ID: usize = 88;
    /// `u64`; 13.4+.
    pub const SOURCE_GRAPH_NODE_ID: usize = 96;

    pub const LAYOUT: RecordLayout = RecordLayout {
        kinds: &[b::CUPTI_ACTIVITY_KIND_MEMSET],
        structs: &[st("CUpti_ActivityMemset4", 88, V12_0), st("CUpti_ActivityMemset5", 104, V13_4)],
        fields: &[
            field("kind", KIND, 4),
            field("value", VALUE, 4),
            field("bytes", BYTES, 8),
            field("start", START, 8),
            field("end", END, 8),
            field("deviceId", DEVICE_ID, 4),
            field("contextId", CONTEXT_ID, 4),
            field("streamId", STREAM_ID, 4),
            field("correlationId", CORRELATION_ID, 4),
            field("flags", FLAGS, 2),
            field("memoryKind", MEMORY_KIND, 2),
            field("graphNodeId", GRAPH_NODE_ID, 8),
            field("graphId", GRAPH_ID, 4),
            field("channelID", CHANNEL_ID, 4),
            field("channelType", CHANNEL_TYPE, 4),
            field_since("isDeviceLaunched", IS_DEVICE_LAUNCHED, 1, V13_0),
            field_since("sourceGraphId", SOURCE_GRAPH_ID, 4, V13_4),
            field_since("sourceGraphNodeId", SOURCE_GRAPH_NODE_ID, 8, V13_4),
        ],
    };
}

/// SYNCHRONIZATION (38): Synchronization (40 bytes), Synchronization2 (12.8+, 56).
pub mod synchronization {
    use super::*;

    /// A `CUpti_ActivitySynchronizationType`: 1 event sync, 2 stream wait
    /// event, 3 stream sync, 4 context sync.
    pub const TYPE: usize = 4;
    /// `u64` ns.
    pub const START: usize = 8;
    /// `u64` ns.
    pub const END: usize = 16;
    pub const CORRELATION_ID: usize = 24;
    pub const CONTEXT_ID: usize = 28;
    pub const STREAM_ID: usize = 32;
    pub const CUDA_EVENT_ID: usize = 36;
    /// `u64`; 12.8+.
    pub const CUDA_EVENT_SYNC_ID: usize = 40;
    /// A `CUresult`; 12.8+.
    pub const RETURN_VALUE: usize = 48;

    pub const LAYOUT: RecordLayout = RecordLayout {
        kinds: &[b::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION],
        structs: &[
            st("CUpti_ActivitySynchronization", 40, V12_0),
            st("CUpti_ActivitySynchronization2", 56, V12_8),
        ],
        fields: &[
            field("kind", KIND, 4),
            field("type", TYPE, 4),
            field("start", START, 8),
            field("end", END, 8),
            field("correlationId", CORRELATION_ID, 4),
            field("contextId", CONTEXT_ID, 4),
            field("streamId", STREAM_ID, 4),
            field("cudaEventId", CUDA_EVENT_ID, 4),
            field_since("cudaEventSyncId", CUDA_EVENT_SYNC_ID, 8, V12_8),
            field_since("returnValue", RETURN_VALUE, 4, V12_8),
        ],
    };
}

/// DRIVER (4), RUNTIME (5) and INTERNAL_LAUNCH_API (48): `CUpti_ActivityAPI`,
/// 40 bytes in every version.
pub mod api {
    use super::*;

    /// A `CUpti_driver_api_trace_cbid` or `CUpti_runtime_api_trace_cbid`.
    pub const CBID: usize = 4;
    /// `u64` ns.
    pub const START: usize = 8;
    /// `u64` ns.
    pub const END: usize = 16;
    pub const PROCESS_ID: usize = 24;
    /// `pthread_self()` unless `cuptiSetThreadIdType(SYSTEM)` made it gettid.
    pub const THREAD_ID: usize = 28;
    pub const CORRELATION_ID: usize = 32;
    /// A `CUresult` or `cudaError_t`.
    pub const RETURN_VALUE: usize = 36;

    pub const LAYOUT: RecordLayout = RecordLayout {
        kinds: &[
            b::CUPTI_ACTIVITY_KIND_DRIVER,
            b::CUPTI_ACTIVITY_KIND_RUNTIME,
            b::CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API,
        ],
        structs: &[st("CUpti_ActivityAPI", 40, V12_0)],
        fields: &[
            field("kind", KIND, 4),
            field("cbid", CBID, 4),
            field("start", START, 8),
            field("end", END, 8),
            field("processId", PROCESS_ID, 4),
            field("threadId", THREAD_ID, 4),
            field("correlationId", CORRELATION_ID, 4),
            field("returnValue", RETURN_VALUE, 4),
        ],
    };
}

/// OVERHEAD (17): Overhead (12.0, 40 bytes), Overhead3 (12.4+, 56).
pub mod overhead {
    use super::*;

    /// A `CUpti_ActivityOverheadKind`.
    pub const OVERHEAD_KIND: usize = 4;
    /// A `CUpti_ActivityObjectKind`.
    pub const OBJECT_KIND: usize = 8;
    /// 12-byte `CUpti_ActivityObjectKindId` union (process/thread or
    /// device/context/stream ids).
    pub const OBJECT_ID: usize = 12;
    /// `u64` ns.
    pub const START: usize = 24;
    /// `u64` ns.
    pub const END: usize = 32;
    /// 12.4+.
    pub const CORRELATION_ID: usize = 40;
    /// `*mut c_void`; 12.4+.
    pub const OVERHEAD_DATA: usize = 48;

    pub const LAYOUT: RecordLayout = RecordLayout {
        kinds: &[b::CUPTI_ACTIVITY_KIND_OVERHEAD],
        structs: &[st("CUpti_ActivityOverhead", 40, V12_0), st("CUpti_ActivityOverhead3", 56, V12_4)],
        fields: &[
            field("kind", KIND, 4),
            field("overheadKind", OVERHEAD_KIND, 4),
            field("objectKind", OBJECT_KIND, 4),
            field("objectId", OBJECT_ID, 12),
            field("start", START, 8),
            field("end", END, 8),
            field_since("correlationId", CORRELATION_ID, 4, V12_4),
            field_since("overheadData", OVERHEAD_DATA, 8, V12_4),
        ],
    };
}

/// DEVICE (8): Device4 (12.0, 176 bytes), Device5 (12.4+, 184), Device6 (13.2+, 192).
pub mod device {
    use super::*;

    pub const FLAGS: usize = 4;
    /// `u64`, KB/s.
    pub const GLOBAL_MEMORY_BANDWIDTH: usize = 8;
    /// `u64`, bytes.
    pub const GLOBAL_MEMORY_SIZE: usize = 16;
    pub const L2_CACHE_SIZE: usize = 28;
    /// kHz.
    pub const CORE_CLOCK_RATE: usize = 36;
    pub const NUM_MEMCPY_ENGINES: usize = 40;
    pub const NUM_MULTIPROCESSORS: usize = 44;
    pub const COMPUTE_CAPABILITY_MAJOR: usize = 104;
    pub const COMPUTE_CAPABILITY_MINOR: usize = 108;
    /// The process-local ordinal that other records call `deviceId`.
    pub const ID: usize = 112;
    /// 16 bytes (`CUuuid`), the physical GPU.
    pub const UUID: usize = 120;
    /// `*const c_char`.
    pub const NAME: usize = 136;
    /// `u8`.
    pub const IS_CUDA_VISIBLE: usize = 144;
    /// `u8`.
    pub const IS_MIG_ENABLED: usize = 145;
    pub const GPU_INSTANCE_ID: usize = 152;
    pub const COMPUTE_INSTANCE_ID: usize = 156;
    /// 16 bytes.
    pub const MIG_UUID: usize = 160;
    /// 12.4+.
    pub const IS_NUMA_NODE: usize = 176;
    /// 12.4+.
    pub const NUMA_ID: usize = 180;
    /// 13.2+.
    pub const NUM_TPCS: usize = 184;

    pub const LAYOUT: RecordLayout = RecordLayout {
        kinds: &[b::CUPTI_ACTIVITY_KIND_DEVICE],
        structs: &[
            st("CUpti_ActivityDevice4", 176, V12_0),
            st("CUpti_ActivityDevice5", 184, V12_4),
            st("CUpti_ActivityDevice6", 192, V13_2),
        ],
        fields: &[
            field("kind", KIND, 4),
            field("flags", FLAGS, 4),
            field("globalMemoryBandwidth", GLOBAL_MEMORY_BANDWIDTH, 8),
            field("globalMemorySize", GLOBAL_MEMORY_SIZE, 8),
            field("l2CacheSize", L2_CACHE_SIZE, 4),
            field("coreClockRate", CORE_CLOCK_RATE, 4),
            field("numMemcpyEngines", NUM_MEMCPY_ENGINES, 4),
            field("numMultiprocessors", NUM_MULTIPROCESSORS, 4),
            field("computeCapabilityMajor", COMPUTE_CAPABILITY_MAJOR, 4),
            field("computeCapabilityMinor", COMPUTE_CAPABILITY_MINOR, 4),
            field("id", ID, 4),
            field("uuid", UUID, 16),
            field("name", NAME, 8),
            field("isCudaVisible", IS_CUDA_VISIBLE, 1),
            field("isMigEnabled", IS_MIG_ENABLED, 1),
            field("gpuInstanceId", GPU_INSTANCE_ID, 4),
            field("computeInstanceId", COMPUTE_INSTANCE_ID, 4),
            field("migUuid", MIG_UUID, 16),
            field_since("isNumaNode", IS_NUMA_NODE, 4, V12_4),
            field_since("numaId", NUMA_ID, 4, V12_4),
            field_since("numTpcs", NUM_TPCS, 4, V13_2),
        ],
    };
}

/// CONTEXT (9): Context (12.0, 16 bytes), Context2 (12.4, 24), Context3
/// (12.6+, 32), Context4 (13.1+, 40).
pub mod context {
    use super::*;

    pub const CONTEXT_ID: usize = 4;
    pub const DEVICE_ID: usize = 8;
    /// `u16`, a `CUpti_ActivityComputeApiKind`.
    pub const COMPUTE_API_KIND: usize = 12;
    /// `u16`, the legacy default stream's id.
    pub const NULL_STREAM_ID: usize = 14;
    /// 12.4+.
    pub const PARENT_CONTEXT_ID: usize = 16;
    /// `u8`; 12.4+.
    pub const IS_GREEN_CONTEXT: usize = 20;
    /// `u16`; 12.4+.
    pub const NUM_MULTIPROCESSORS: usize = 22;
    /// 12.6+.
    pub const CIG_MODE: usize = 24;
    /// `u64`; 13.1+.
    pub const PROCESS_ID: usize = 32;

    pub const LAYOUT: RecordLayout = RecordLayout {
        kinds: &[b::CUPTI_ACTIVITY_KIND_CONTEXT],
        structs: &[
            st("CUpti_ActivityContext", 16, V12_0),
            st("CUpti_ActivityContext2", 24, V12_4),
            st("CUpti_ActivityContext3", 32, V12_6),
            st("CUpti_ActivityContext4", 40, V13_1),
        ],
        fields: &[
            field("kind", KIND, 4),
            field("contextId", CONTEXT_ID, 4),
            field("deviceId", DEVICE_ID, 4),
            field("computeApiKind", COMPUTE_API_KIND, 2),
            field("nullStreamId", NULL_STREAM_ID, 2),
            field_since("parentContextId", PARENT_CONTEXT_ID, 4, V12_4),
            field_since("isGreenContext", IS_GREEN_CONTEXT, 1, V12_4),
            field_since("numMultiprocessors", NUM_MULTIPROCESSORS, 2, V12_4),
            field_since("cigMode", CIG_MODE, 4, V12_6),
            field_since("processId", PROCESS_ID, 8, V13_1),
        ],
    };
}

/// NAME (11): `CUpti_ActivityName`, 32 bytes; names for threads, devices,
/// contexts and streams (from `nvtxName*` calls).
pub mod name {
    use super::*;

    /// A `CUpti_ActivityObjectKind`.
    pub const OBJECT_KIND: usize = 4;
    /// 12-byte `CUpti_ActivityObjectKindId` union.
    pub const OBJECT_ID: usize = 8;
    /// `*const c_char`.
    pub const NAME: usize = 24;

    pub const LAYOUT: RecordLayout = RecordLayout {
        kinds: &[b::CUPTI_ACTIVITY_KIND_NAME],
        structs: &[st("CUpti_ActivityName", 32, V12_0)],
        fields: &[
            field("kind", KIND, 4),
            field("objectKind", OBJECT_KIND, 4),
            field("objectId", OBJECT_ID, 12),
            field("name", NAME, 8),
        ],
    };
}

/// MARKER (12): `CUpti_ActivityMarker2`, 56 bytes; NVTX marks and range
/// start/end (needs `NVTX_INJECTION64_PATH` pointing at libcupti).
pub mod marker {
    use super::*;

    /// A `CUpti_ActivityFlag` (MARKER_INSTANTANEOUS / START / END, ...).
    pub const FLAGS: usize = 4;
    /// `u64` ns.
    pub const TIMESTAMP: usize = 8;
    /// Pairs a range's start and end records.
    pub const ID: usize = 16;
    /// A `CUpti_ActivityObjectKind`.
    pub const OBJECT_KIND: usize = 20;
    /// 12-byte `CUpti_ActivityObjectKindId` union.
    pub const OBJECT_ID: usize = 24;
    /// `*const c_char`.
    pub const NAME: usize = 40;
    /// `*const c_char`, the NVTX domain name.
    pub const DOMAIN: usize = 48;

    pub const LAYOUT: RecordLayout = RecordLayout {
        kinds: &[b::CUPTI_ACTIVITY_KIND_MARKER],
        structs: &[st("CUpti_ActivityMarker2", 56, V12_0)],
        fields: &[
            field("kind", KIND, 4),
            field("flags", FLAGS, 4),
            field("timestamp", TIMESTAMP, 8),
            field("id", ID, 4),
            field("objectKind", OBJECT_KIND, 4),
            field("objectId", OBJECT_ID, 12),
            field("name", NAME, 8),
            field("domain", DOMAIN, 8),
        ],
    };
}

/// EXTERNAL_CORRELATION (39): `CUpti_ActivityExternalCorrelation`, 24 bytes.
pub mod external_correlation {
    use super::*;

    /// A `CUpti_ExternalCorrelationKind` (CUSTOM0 = 3, CUSTOM1 = 4, CUSTOM2 = 5).
    pub const EXTERNAL_KIND: usize = 4;
    /// `u64`, the id pushed with `cuptiActivityPushExternalCorrelationId`.
    pub const EXTERNAL_ID: usize = 8;
    pub const CORRELATION_ID: usize = 16;

    pub const LAYOUT: RecordLayout = RecordLayout {
        kinds: &[b::CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION],
        structs: &[st("CUpti_ActivityExternalCorrelation", 24, V12_0)],
        fields: &[
            field("kind", KIND, 4),
            field("externalKind", EXTERNAL_KIND, 4),
            field("externalId", EXTERNAL_ID, 8),
            field("correlationId", CORRELATION_ID, 4),
        ],
    };
}

/// STREAM (37): `CUpti_ActivityStream`, 24 bytes.
pub mod stream {
    use super::*;

    pub const CONTEXT_ID: usize = 4;
    pub const STREAM_ID: usize = 8;
    pub const PRIORITY: usize = 12;
    /// A `CUpti_ActivityStreamFlag` (1 default/blocking, 2 non-blocking).
    pub const FLAG: usize = 16;
    pub const CORRELATION_ID: usize = 20;

    pub const LAYOUT: RecordLayout = RecordLayout {
        kinds: &[b::CUPTI_ACTIVITY_KIND_STREAM],
        structs: &[st("CUpti_ActivityStream", 24, V12_0)],
        fields: &[
            field("kind", KIND, 4),
            field("contextId", CONTEXT_ID, 4),
            field("streamId", STREAM_ID, 4),
            field("priority", PRIORITY, 4),
            field("flag", FLAG, 4),
            field("correlationId", CORRELATION_ID, 4),
        ],
    };
}

/// GRAPH_TRACE (51): GraphTrace (12.0, 48 bytes), GraphTrace2 (12.4+, 56);
/// one record per graph launch instead of per node.
pub mod graph_trace {
    use super::*;

    pub const CORRELATION_ID: usize = 4;
    /// `u64` ns.
    pub const START: usize = 8;
    /// `u64` ns.
    pub const END: usize = 16;
    pub const DEVICE_ID: usize = 24;
    pub const GRAPH_ID: usize = 28;
    pub const CONTEXT_ID: usize = 32;
    pub const STREAM_ID: usize = 36;
    /// 12.4+.
    pub const END_DEVICE_ID: usize = 48;
    /// 12.4+.
    pub const END_CONTEXT_ID: usize = 52;

    pub const LAYOUT: RecordLayout = RecordLayout {
        kinds: &[b::CUPTI_ACTIVITY_KIND_GRAPH_TRACE],
        structs: &[
            st("CUpti_ActivityGraphTrace", 48, V12_0),
            st("CUpti_ActivityGraphTrace2", 56, V12_4),
        ],
        fields: &[
            field("kind", KIND, 4),
            field("correlationId", CORRELATION_ID, 4),
            field("start", START, 8),
            field("end", END, 8),
            field("deviceId", DEVICE_ID, 4),
            field("graphId", GRAPH_ID, 4),
            field("contextId", CONTEXT_ID, 4),
            field("streamId", STREAM_ID, 4),
            field_since("endDeviceId", END_DEVICE_ID, 4, V12_4),
            field_since("endContextId", END_CONTEXT_ID, 4, V12_4),
        ],
    };
}

/// Every layout in this module.
pub const ALL: &[&RecordLayout] = &[
    &kernel::LAYOUT,
    &memcpy::LAYOUT,
    &memcpy_p2p::LAYOUT,
    &memset::LAYOUT,
    &synchronization::LAYOUT,
    &api::LAYOUT,
    &overhead::LAYOUT,
    &device::LAYOUT,
    &context::LAYOUT,
    &name::LAYOUT,
    &marker::LAYOUT,
    &external_correlation::LAYOUT,
    &stream::LAYOUT,
    &graph_trace::LAYOUT,
];

/// The layout of records of activity kind `kind`, if gputrace reads it.
pub fn layout_for(kind: u32) -> Option<&'static RecordLayout> {
    ALL.iter().copied().find(|l| l.kinds.contains(&kind))
}

/// Size of the `kind` records a library reporting `cupti_version` sends (a
/// lower bound between measured versions, see the module docs); `None` for
/// kinds without a layout here and for versions older than 12.0.
pub fn record_size(kind: u32, cupti_version: u32) -> Option<usize> {
    layout_for(kind)?.size_at(cupti_version)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_sorted_within_size_and_versions_increase() {
        for layout in ALL {
            assert_eq!(layout.fields[0], field("kind", KIND, 4));
            for pair in layout.structs.windows(2) {
                assert!(pair[0].since < pair[1].since && pair[0].size < pair[1].size);
            }
            let newest = layout.structs.last().unwrap().size;
            for f in layout.fields {
                assert!(f.offset + f.size <= newest, "{} past the newest struct", f.name);
                if f.since == V12_0 {
                    assert!(f.offset + f.size <= layout.min_size(), "{}", f.name);
                }
            }
        }
    }

    #[test]
    fn record_size_and_has_field() {
        let k = b::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        assert_eq!(record_size(k, 17), None);
        assert_eq!(record_size(k, V12_0), Some(208));
        assert_eq!(record_size(k, 130000), Some(208)); // unmeasured: lower bound
        assert_eq!(record_size(k, V13_1), Some(224));
        assert_eq!(record_size(k, 140000), Some(248));
        assert_eq!(record_size(b::CUPTI_ACTIVITY_KIND_MEMCPY, V12_9), Some(96));
        assert_eq!(record_size(b::CUPTI_ACTIVITY_KIND_PC_SAMPLING, V13_5), None);

        let memcpy = &memcpy::LAYOUT;
        let launched = memcpy.field("isDeviceLaunched").unwrap();
        assert!(!memcpy.has_field(launched, V12_9)); // padding in 12.x
        assert!(memcpy.has_field(launched, V13_0));
        let priority = kernel::LAYOUT.field("priority").unwrap();
        assert!(!kernel::LAYOUT.has_field(priority, V13_0));
        assert!(kernel::LAYOUT.has_field(priority, V13_5));
    }
}
