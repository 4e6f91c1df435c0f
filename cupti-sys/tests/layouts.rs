//! Checks `cupti_sys::layout` against the real CUPTI headers:
//!
//! 1. `layout_v*.json` (gdb `ptype /o` of the 12.0 … 13.5 headers, in
//!    `shared/research/cupti-layouts/`): for every measured library version,
//!    the struct named in `kind_to_struct.md` must be the one `layout` picks,
//!    with the same size, and every field `layout` says is valid at that
//!    version must be in it at the same offset and size (and no field may
//!    appear earlier than its `since`).
//! 2. The generated structs (`offset_of!` on `bindings_v13` and
//!    `bindings_v12`): same offsets, field sizes and struct sizes.

use std::collections::HashMap;
use std::fs;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;

use cupti_sys::layout::{self, version, RecordLayout};

/// Offset and size of each field of one struct, and the struct's size.
#[derive(Debug, Default)]
struct StructInfo {
    size: usize,
    fields: HashMap<String, (usize, usize)>,
}

#[path = "../../tests/common/skip.rs"]
mod skip;

type Structs = HashMap<String, StructInfo>;

fn research_dir() -> Option<PathBuf> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/research/cupti-layouts"));
    if dir.is_dir() {
        Some(dir)
    } else {
        skip::skip(&format!("../shared/research/cupti-layouts not found (looked in {dir:?})"));
        None
    }
}

/// Parses `layout_v<minor>.json`: `{struct: {"size": n, "fields": [[name, offset, size], ..]}}`.
fn load_json(dir: &std::path::Path, minor: &str) -> Structs {
    let path = dir.join(format!("layout_v{minor}.json"));
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let value: serde_json::Value = serde_json::from_str(&text).expect("valid JSON");
    let mut structs = Structs::new();
    for (name, body) in value.as_object().expect("top-level object") {
        let mut info = StructInfo {
            size: body["size"].as_u64().expect("size") as usize,
            ..Default::default()
        };
        for f in body["fields"].as_array().expect("fields") {
            let f = f.as_array().expect("[name, offset, size]");
            info.fields.insert(
                f[0].as_str().unwrap().to_string(),
                (f[1].as_u64().unwrap() as usize, f[2].as_u64().unwrap() as usize),
            );
        }
        structs.insert(name.clone(), info);
    }
    structs
}

/// Parses `kind_to_struct.md`: the `cuptiGetVersion()` of each column (the
/// number in parentheses) and, per kind name, the struct in each column.
fn load_kind_table(dir: &std::path::Path) -> (Vec<u32>, HashMap<String, Vec<String>>) {
    let text = fs::read_to_string(dir.join("kind_to_struct.md")).expect("kind_to_struct.md");
    let mut lines = text.lines().filter(|l| l.contains('|'));
    let header: Vec<&str> = lines.next().expect("header").split('|').map(str::trim).collect();
    let versions = header[1..]
        .iter()
        .map(|col| {
            let inner = col.split('(').nth(1).and_then(|s| s.strip_suffix(')'));
            inner.and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("column {col:?}"))
        })
        .collect();
    let mut rows = HashMap::new();
    for line in lines {
        let cells: Vec<String> = line.split('|').map(|c| c.trim().to_string()).collect();
        if cells[0].starts_with("---") {
            continue;
        }
        rows.insert(cells[0].clone(), cells[1..].to_vec());
    }
    (versions, rows)
}

/// `CUpti_ActivityKind` value of a kind name in `kind_to_struct.md`.
fn kind_value(name: &str) -> Option<u32> {
    use cupti_sys::*;
    Some(match name {
        "KERNEL" => CUPTI_ACTIVITY_KIND_KERNEL,
        "CONCURRENT_KERNEL" => CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
        "MEMCPY" => CUPTI_ACTIVITY_KIND_MEMCPY,
        "MEMCPY2" => CUPTI_ACTIVITY_KIND_MEMCPY2,
        "MEMSET" => CUPTI_ACTIVITY_KIND_MEMSET,
        "SYNCHRONIZATION" => CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
        "DRIVER" => CUPTI_ACTIVITY_KIND_DRIVER,
        "RUNTIME" => CUPTI_ACTIVITY_KIND_RUNTIME,
        "INTERNAL_LAUNCH_API" => CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API,
        "OVERHEAD" => CUPTI_ACTIVITY_KIND_OVERHEAD,
        "DEVICE" => CUPTI_ACTIVITY_KIND_DEVICE,
        "CONTEXT" => CUPTI_ACTIVITY_KIND_CONTEXT,
        "NAME" => CUPTI_ACTIVITY_KIND_NAME,
        "MARKER" => CUPTI_ACTIVITY_KIND_MARKER,
        "EXTERNAL_CORRELATION" => CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
        "STREAM" => CUPTI_ACTIVITY_KIND_STREAM,
        "GRAPH_TRACE" => CUPTI_ACTIVITY_KIND_GRAPH_TRACE,
        _ => return None,
    })
}

fn layout_name(layout: &RecordLayout) -> &'static str {
    layout.structs[0].name
}

/// Size of the field `$f` of `$t` (works for packed structs: no reference is made).
macro_rules! field_size {
    ($t:ty, $f:ident) => {{
        fn pointee_size<T>(_: *const T) -> usize {
            size_of::<T>()
        }
        let record = std::mem::MaybeUninit::<$t>::uninit();
        // Safety: `addr_of!` only computes the field's address inside
        // `record`; nothing is read and no reference is created.
        pointee_size(unsafe { std::ptr::addr_of!((*record.as_ptr()).$f) })
    }};
}

macro_rules! add_fields {
    ($map:ident, $m:ident, $ty:ident, { $($field:ident),* $(,)? }) => {{
        let info = $map.entry(stringify!($ty).to_string()).or_insert_with(|| StructInfo {
            size: size_of::<cupti_sys::$m::$ty>(),
            fields: HashMap::new(),
        });
        $(
            info.fields.insert(
                stringify!($field).to_string(),
                (
                    offset_of!(cupti_sys::$m::$ty, $field),
                    field_size!(cupti_sys::$m::$ty, $field),
                ),
            );
        )*
    }};
}

/// `[Struct, ..] { field, .. }` groups: the listed fields exist in each struct.
macro_rules! generated_structs {
    ($m:ident; $( [$($ty:ident),+ $(,)?] $fields:tt )*) => {{
        let mut map = Structs::new();
        $( $( add_fields!(map, $m, $ty, $fields); )+ )*
        map
    }};
}

/// The 13.5 bindings: every struct in `layout`, with every field of `layout`
/// that the struct has.
fn generated_v13() -> Structs {
    generated_structs!(bindings_v13;
        [CUpti_ActivityKernel9, CUpti_ActivityKernel10, CUpti_ActivityKernel11,
         CUpti_ActivityKernel12, CUpti_ActivityKernel13] {
            kind, cacheConfig, sharedMemoryConfig, registersPerThread, start, end, completed,
            deviceId, contextId, streamId, gridX, gridY, gridZ, blockX, blockY, blockZ,
            staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, localMemoryTotal,
            correlationId, gridId, name, queued, submitted, launchType, sharedMemoryExecuted,
            graphNodeId, shmemLimitConfig, graphId, channelID, channelType, clusterX, clusterY,
            clusterZ, clusterSchedulingPolicy, localMemoryTotal_v2, maxPotentialClusterSize,
            maxActiveClusters,
        }
        [CUpti_ActivityKernel10, CUpti_ActivityKernel11, CUpti_ActivityKernel12,
         CUpti_ActivityKernel13] { isDeviceLaunched }
        [CUpti_ActivityKernel11, CUpti_ActivityKernel12, CUpti_ActivityKernel13] { priority }
        [CUpti_ActivityKernel12, CUpti_ActivityKernel13] { executionModel }
        [CUpti_ActivityKernel13] { sourceGraphId, sourceGraphNodeId }
        [CUpti_ActivityMemcpy5, CUpti_ActivityMemcpy6, CUpti_ActivityMemcpy7] {
            kind, copyKind, srcKind, dstKind, flags, bytes, start, end, deviceId, contextId,
            streamId, correlationId, runtimeCorrelationId, graphNodeId, graphId, channelID,
            channelType,
        }
        [CUpti_ActivityMemcpy6, CUpti_ActivityMemcpy7] { isDeviceLaunched, copyCount }
        [CUpti_ActivityMemcpy7] { sourceGraphId, sourceGraphNodeId }
        [CUpti_ActivityMemcpyPtoP4] {
            kind, copyKind, srcKind, dstKind, flags, bytes, start, end, deviceId, contextId,
            streamId, srcDeviceId, srcContextId, dstDeviceId, dstContextId, correlationId,
            graphNodeId, graphId, channelID, channelType,
        }
        [CUpti_ActivityMemset4, CUpti_ActivityMemset5] {
            kind, value, bytes, start, end, deviceId, contextId, streamId, correlationId, flags,
            memoryKind, graphNodeId, graphId, channelID, channelType, isDeviceLaunched,
        }
        [CUpti_ActivityMemset5] { sourceGraphId, sourceGraphNodeId }
        [CUpti_ActivitySynchronization, CUpti_ActivitySynchronization2] {
            kind, type_, start, end, correlationId, contextId, streamId, cudaEventId,
        }
        [CUpti_ActivitySynchronization2] { cudaEventSyncId, returnValue }
        [CUpti_ActivityAPI] {
            kind, cbid, start, end, processId, threadId, correlationId, returnValue,
        }
        [CUpti_ActivityOverhead, CUpti_ActivityOverhead3] {
            kind, overheadKind, objectKind, objectId, start, end,
        }
        [CUpti_ActivityOverhead3] { correlationId, overheadData }
        [CUpti_ActivityDevice4, CUpti_ActivityDevice5, CUpti_ActivityDevice6] {
            kind, flags, globalMemoryBandwidth, globalMemorySize, l2CacheSize, coreClockRate,
            numMemcpyEngines, numMultiprocessors, computeCapabilityMajor, computeCapabilityMinor,
            id, uuid, name, isCudaVisible, isMigEnabled, gpuInstanceId, computeInstanceId, migUuid,
        }
        [CUpti_ActivityDevice5, CUpti_ActivityDevice6] { isNumaNode, numaId }
        [CUpti_ActivityDevice6] { numTpcs }
        [CUpti_ActivityContext, CUpti_ActivityContext2, CUpti_ActivityContext3,
         CUpti_ActivityContext4] { kind, contextId, deviceId, computeApiKind, nullStreamId }
        [CUpti_ActivityContext2, CUpti_ActivityContext3, CUpti_ActivityContext4] {
            parentContextId, isGreenContext, numMultiprocessors,
        }
        [CUpti_ActivityContext3, CUpti_ActivityContext4] { cigMode }
        [CUpti_ActivityContext4] { processId }
        [CUpti_ActivityName] { kind, objectKind, objectId, name }
        [CUpti_ActivityMarker2] { kind, flags, timestamp, id, objectKind, objectId, name, domain }
        [CUpti_ActivityExternalCorrelation] { kind, externalKind, externalId, correlationId }
        [CUpti_ActivityStream] { kind, contextId, streamId, priority, flag, correlationId }
        [CUpti_ActivityGraphTrace, CUpti_ActivityGraphTrace2] {
            kind, correlationId, start, end, deviceId, graphId, contextId, streamId,
        }
        [CUpti_ActivityGraphTrace2] { endDeviceId, endContextId }
    )
}

/// The 12.9 bindings: the structs a 12.x library sends. Memcpy6 and Memset4
/// have no `isDeviceLaunched` there (it is padding).
fn generated_v12() -> Structs {
    generated_structs!(bindings_v12;
        [CUpti_ActivityKernel9] {
            kind, cacheConfig, sharedMemoryConfig, registersPerThread, start, end, completed,
            deviceId, contextId, streamId, gridX, gridY, gridZ, blockX, blockY, blockZ,
            staticSharedMemory, dynamicSharedMemory, localMemoryPerThread, localMemoryTotal,
            correlationId, gridId, name, queued, submitted, launchType, sharedMemoryExecuted,
            graphNodeId, shmemLimitConfig, graphId, channelID, channelType, clusterX, clusterY,
            clusterZ, clusterSchedulingPolicy, localMemoryTotal_v2, maxPotentialClusterSize,
            maxActiveClusters,
        }
        [CUpti_ActivityMemcpy5, CUpti_ActivityMemcpy6] {
            kind, copyKind, srcKind, dstKind, flags, bytes, start, end, deviceId, contextId,
            streamId, correlationId, runtimeCorrelationId, graphNodeId, graphId, channelID,
            channelType,
        }
        [CUpti_ActivityMemcpy6] { copyCount }
        [CUpti_ActivityMemcpyPtoP4] {
            kind, copyKind, srcKind, dstKind, flags, bytes, start, end, deviceId, contextId,
            streamId, srcDeviceId, srcContextId, dstDeviceId, dstContextId, correlationId,
            graphNodeId, graphId, channelID, channelType,
        }
        [CUpti_ActivityMemset4] {
            kind, value, bytes, start, end, deviceId, contextId, streamId, correlationId, flags,
            memoryKind, graphNodeId, graphId, channelID, channelType,
        }
        [CUpti_ActivitySynchronization, CUpti_ActivitySynchronization2] {
            kind, type_, start, end, correlationId, contextId, streamId, cudaEventId,
        }
        [CUpti_ActivitySynchronization2] { cudaEventSyncId, returnValue }
        [CUpti_ActivityAPI] {
            kind, cbid, start, end, processId, threadId, correlationId, returnValue,
        }
        [CUpti_ActivityOverhead, CUpti_ActivityOverhead3] {
            kind, overheadKind, objectKind, objectId, start, end,
        }
        [CUpti_ActivityOverhead3] { correlationId, overheadData }
        [CUpti_ActivityDevice4, CUpti_ActivityDevice5] {
            kind, flags, globalMemoryBandwidth, globalMemorySize, l2CacheSize, coreClockRate,
            numMemcpyEngines, numMultiprocessors, computeCapabilityMajor, computeCapabilityMinor,
            id, uuid, name, isCudaVisible, isMigEnabled, gpuInstanceId, computeInstanceId, migUuid,
        }
        [CUpti_ActivityDevice5] { isNumaNode, numaId }
        [CUpti_ActivityContext, CUpti_ActivityContext2, CUpti_ActivityContext3] {
            kind, contextId, deviceId, computeApiKind, nullStreamId,
        }
        [CUpti_ActivityContext2, CUpti_ActivityContext3] {
            parentContextId, isGreenContext, numMultiprocessors,
        }
        [CUpti_ActivityContext3] { cigMode }
        [CUpti_ActivityName] { kind, objectKind, objectId, name }
        [CUpti_ActivityMarker2] { kind, flags, timestamp, id, objectKind, objectId, name, domain }
        [CUpti_ActivityExternalCorrelation] { kind, externalKind, externalId, correlationId }
        [CUpti_ActivityStream] { kind, contextId, streamId, priority, flag, correlationId }
        [CUpti_ActivityGraphTrace, CUpti_ActivityGraphTrace2] {
            kind, correlationId, start, end, deviceId, graphId, contextId, streamId,
        }
        [CUpti_ActivityGraphTrace2] { endDeviceId, endContextId }
    )
}

/// bindgen renames the C field `type` to `type_`.
fn c_name(rust_field: &str) -> &str {
    rust_field.strip_suffix('_').unwrap_or(rust_field)
}

/// Every field a generated struct has must match `layout`; returns how many
/// (struct, field) pairs were compared.
fn check_generated(label: &str, generated: &Structs, newest_version: u32) -> usize {
    let mut compared = 0;
    for layout in layout::ALL {
        for sv in layout.structs.iter().filter(|s| s.since <= newest_version) {
            let info = generated
                .get(sv.name)
                .unwrap_or_else(|| panic!("{label}: {} not listed in this test", sv.name));
            assert_eq!(info.size, sv.size, "{label}: size of {}", sv.name);
            for (rust_field, &(offset, size)) in &info.fields {
                let name = c_name(rust_field);
                let field = layout
                    .field(name)
                    .unwrap_or_else(|| panic!("{label}: {}.{name} is not in layout", sv.name));
                assert_eq!(
                    (offset, size),
                    (field.offset, field.size),
                    "{label}: {}.{name}: generated (offset, size) vs layout",
                    sv.name
                );
                compared += 1;
            }
        }
        // The newest struct has every field valid at `newest_version`, so each
        // such constant is compared at least once.
        let newest = layout.struct_at(newest_version).unwrap();
        let info = &generated[newest.name];
        for field in layout.fields.iter().filter(|f| layout.has_field(f, newest_version)) {
            let listed = info.fields.keys().any(|k| c_name(k) == field.name);
            assert!(listed, "{label}: {}.{} not compared", newest.name, field.name);
        }
    }
    compared
}

#[test]
fn layout_matches_generated_13x_structs() {
    let compared = check_generated("bindings_v13", &generated_v13(), version::V13_5);
    assert!(compared > 300, "only {compared} fields compared");
}

#[test]
fn layout_matches_generated_12x_structs() {
    let compared = check_generated("bindings_v12", &generated_v12(), version::V12_9);
    assert!(compared > 150, "only {compared} fields compared");
}

/// Checks `layouts` against the measured headers (see the file docs); panics
/// on the first disagreement.
fn check_headers(dir: &std::path::Path, generated: &Structs, layouts: &[&RecordLayout]) {
    let (md_versions, md_rows) = load_kind_table(dir);
    let measured: Vec<u32> = version::MEASURED.iter().map(|&(_, v)| v).collect();
    assert_eq!(md_versions, measured, "kind_to_struct.md columns vs layout::version::MEASURED");

    let mut kinds_seen = Vec::new();
    let mut field_checks = 0;
    for (column, &(minor, api)) in version::MEASURED.iter().enumerate() {
        let json = load_json(dir, minor);

        for layout in layouts {
            // Any struct of this layout in the file, current or deprecated,
            // must agree with layout wherever it has a field of that name.
            for sv in layout.structs {
                let Some(info) = json.get(sv.name) else { continue };
                assert_eq!(info.size, sv.size, "{minor}: size of {}", sv.name);
                for field in layout.fields {
                    if let Some(&got) = info.fields.get(field.name) {
                        assert_eq!(
                            got,
                            (field.offset, field.size),
                            "{minor}: {}.{}: header (offset, size) vs layout",
                            sv.name,
                            field.name
                        );
                        field_checks += 1;
                    }
                }
            }
        }

        for (kind_name, structs) in &md_rows {
            let Some(kind) = kind_value(kind_name) else { continue };
            let Some(layout) = layouts.iter().find(|l| l.kinds.contains(&kind)) else {
                continue;
            };
            kinds_seen.push(kind);
            let md_struct = &structs[column];
            let picked = layout
                .struct_at(api)
                .unwrap_or_else(|| panic!("{minor}: no struct for {kind_name}"));
            assert_eq!(picked.name, md_struct, "{minor}: struct for {kind_name}");

            // Device4, Context, Context2, Overhead and GraphTrace are in no
            // JSON file (12.0's lists fewer structs); the 13.5 bindings still
            // define them in cupti_activity_deprecated.h.
            let (info, source) = match json.get(picked.name) {
                Some(info) => (info, "json"),
                None => (&generated[picked.name], "bindings_v13"),
            };
            assert_eq!(info.size, picked.size, "{minor}: size of {} ({source})", picked.name);

            for field in layout.fields {
                let got = info.fields.iter().find(|(k, _)| c_name(k) == field.name).map(|(_, &v)| v);
                if layout.has_field(field, api) {
                    assert_eq!(
                        got,
                        Some((field.offset, field.size)),
                        "{minor} ({api}): {}.{} ({source})",
                        picked.name,
                        field.name
                    );
                } else {
                    assert_eq!(
                        got, None,
                        "{minor} ({api}): {}.{} exists before its `since` {} ({source})",
                        picked.name, field.name, field.since
                    );
                }
            }
        }
    }

    for layout in layouts {
        for kind in layout.kinds {
            assert!(
                kinds_seen.contains(kind),
                "kind {kind} ({}) is not in kind_to_struct.md",
                layout_name(layout)
            );
        }
    }
    assert!(field_checks > 0, "no header fields compared");
}

#[test]
fn layout_matches_measured_headers_12_0_to_13_5() {
    let Some(dir) = research_dir() else { return };
    check_headers(&dir, &generated_v13(), layout::ALL);
    // record_size dispatches each kind to the layout checked above.
    for layout in layout::ALL {
        for &kind in layout.kinds {
            for &(_, api) in version::MEASURED {
                assert_eq!(layout::record_size(kind, api), layout.size_at(api));
            }
        }
    }
}

/// The check is not vacuous: a wrong offset, a wrong `since` or a wrong
/// struct version each make it fail.
#[test]
fn a_wrong_layout_is_caught() {
    let Some(dir) = research_dir() else { return };
    let generated = generated_v13();
    let good = layout::kernel::LAYOUT;

    let mut fields = good.fields.to_vec();
    let start = fields.iter_mut().find(|f| f.name == "start").unwrap();
    start.offset += 8;
    let wrong_offset = RecordLayout {
        fields: fields.leak(),
        ..good
    };

    let mut fields = good.fields.to_vec();
    let priority = fields.iter_mut().find(|f| f.name == "priority").unwrap();
    priority.since = version::V13_3;
    let wrong_since = RecordLayout {
        fields: fields.leak(),
        ..good
    };

    let mut structs = good.structs.to_vec();
    structs[2].since = version::V13_2; // Kernel11 is already sent by 13.1
    let wrong_struct = RecordLayout {
        structs: structs.leak(),
        ..good
    };

    for (what, bad) in [("offset", wrong_offset), ("since", wrong_since), ("struct version", wrong_struct)] {
        let result = std::panic::catch_unwind(|| check_headers(&dir, &generated, &[&bad]));
        assert!(result.is_err(), "a wrong {what} passed the check");
    }
    check_headers(&dir, &generated, &[&good]);
}
