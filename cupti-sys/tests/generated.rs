//! Checks on the committed generated files, backing the claims in the crate
//! docs: nothing is linked, the agent's functions are all there, and the 13.5
//! bindings describe 12.x libraries too (same constants, same function
//! signatures, same struct layouts as the 12.9 bindings).

use std::collections::HashMap;
use std::fs;

fn source(name: &str) -> String {
    let path = format!("{}/src/{name}", env!("CARGO_MANIFEST_DIR"));
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The text of every `<prefix>...;` item, whitespace removed, keyed by the
/// identifier after the prefix.
fn items(text: &str, prefix: &str) -> HashMap<String, String> {
    let squashed: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let mut out = HashMap::new();
    for (start, _) in squashed.match_indices(prefix) {
        let rest = &squashed[start + prefix.len()..];
        let end = rest.find(';').expect("item ends with ';'");
        let item = &rest[..end];
        let name_end = item.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(item.len());
        out.insert(item[..name_end].to_string(), item[name_end..].to_string());
    }
    out
}

/// bindgen's layout assertions: `"Size of X"` and `"Offset of field: X::f"`
/// mapped to the number the compiler checked them against.
fn layout_assertions(text: &str) -> HashMap<String, u64> {
    let squashed: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    let mut out = HashMap::new();
    for marker in ["[\"Sizeof", "[\"Offsetoffield:"] {
        for (start, _) in squashed.match_indices(marker) {
            let rest = &squashed[start + 2..];
            let key = &rest[..rest.find('"').unwrap()];
            let value_end = rest.find("usize]").unwrap();
            let value = &rest[..value_end];
            let value = &value[value.rfind('-').unwrap() + 1..];
            out.insert(key.to_string(), value.parse().unwrap());
        }
    }
    out
}

#[test]
fn nothing_is_linked() {
    for file in ["bindings_v13.rs", "bindings_v12.rs"] {
        let text = source(file);
        assert!(!text.contains("extern \"C\" {"), "{file} declares extern functions");
        assert!(!text.contains("#[link"), "{file} has a #[link] attribute");
        assert!(text.contains("pub type cuptiActivityFlushAll_t = unsafe extern \"C\" fn"));
    }
}

/// Every function the agent resolves with dlsym has a typedef of the right
/// shape (this fails to compile otherwise).
#[test]
fn agent_functions_have_typedefs() {
    use cupti_sys::*;
    let _: Option<cuptiActivityEnable_t> = None;
    let _: Option<cuptiActivityDisable_t> = None;
    let _: Option<cuptiActivityEnableAndDump_t> = None;
    let _: Option<cuptiActivityRegisterCallbacks_t> = None;
    let _: Option<cuptiActivityRegisterTimestampCallback_t> = None;
    let _: Option<cuptiActivityFlushAll_t> = None;
    let _: Option<cuptiActivityFlushPeriod_t> = None;
    let _: Option<cuptiActivityGetNextRecord_t> = None;
    let _: Option<cuptiActivityGetNumDroppedRecords_t> = None;
    let _: Option<cuptiActivitySetAttribute_t> = None;
    let _: Option<cuptiActivityGetAttribute_t> = None;
    let _: Option<cuptiActivityPushExternalCorrelationId_t> = None;
    let _: Option<cuptiActivityPopExternalCorrelationId_t> = None;
    let _: Option<cuptiActivityEnableDriverApi_t> = None;
    let _: Option<cuptiActivityEnableRuntimeApi_t> = None;
    let _: Option<cuptiActivityEnableLatencyTimestamps_t> = None;
    let _: Option<cuptiActivityGetStructSize_t> = None;
    let _: Option<cuptiSubscribe_t> = None;
    let _: Option<cuptiSubscribe_v2_t> = None;
    let _: Option<cuptiUnsubscribe_t> = None;
    let _: Option<cuptiEnableCallback_t> = None;
    let _: Option<cuptiEnableDomain_t> = None;
    let _: Option<cuptiGetTimestamp_t> = None;
    let _: Option<cuptiGetVersion_t> = None;
    let _: Option<cuptiGetResultString_t> = None;
    let _: Option<cuptiSetThreadIdType_t> = None;
    let _: Option<cuptiFinalize_t> = None;
    let _: Option<cuptiGetLastError_t> = None;
    let _: Option<cuptiGetStreamIdEx_t> = None;
    let _: Option<cuptiActivityEnable_v2_t> = None;
    let _: Option<cuptiActivityRegisterCallbacks_v2_t> = None;
    let _: Option<cuptiActivityGetNextRecord_v2_t> = None;
    let _: Option<cuptiActivityGetNumDroppedRecords_v2_t> = None;
    let _: Option<cuptiActivitySetAttribute_v2_t> = None;
    // Capture levers (issue #45): hardware event tracing (12.8+, in both
    // header sets) and the 13.4 API allow-list passed at enable.
    let _: Option<cuptiActivityEnableHWTrace_t> = None;
    let _: Option<bindings_v12::cuptiActivityEnableHWTrace_t> = None;
    let options = CUpti_ActivityApiOptions::default();
    let cbids = CUpti_ActivityApiCbidOptions::default();
    let config = CUpti_ActivityConfig::default();
    assert_eq!((options.structSize, cbids.numCbids, config.structSize), (0, 0, 0));
    assert_eq!(std::mem::offset_of!(CUpti_ActivityConfig, pKindOptions), 32);
    assert_eq!(
        CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER,
        bindings_v12::CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER
    );
    assert_eq!(CUPTI_ACTIVITY_KIND_GRAPH_TRACE, bindings_v12::CUPTI_ACTIVITY_KIND_GRAPH_TRACE);
    // PM sampling (CUPTI 12.6+) and the profiler calls it needs.
    let _: Option<cuptiProfilerInitialize_t> = None;
    let _: Option<cuptiProfilerDeInitialize_t> = None;
    let _: Option<cuptiDeviceGetChipName_t> = None;
    let _: Option<cuptiProfilerHostInitialize_t> = None;
    let _: Option<cuptiProfilerHostDeinitialize_t> = None;
    let _: Option<cuptiProfilerHostConfigAddMetrics_t> = None;
    let _: Option<cuptiProfilerHostGetConfigImageSize_t> = None;
    let _: Option<cuptiProfilerHostGetConfigImage_t> = None;
    let _: Option<cuptiProfilerHostEvaluateToGpuValues_t> = None;
    let _: Option<cuptiPmSamplingGetCounterAvailability_t> = None;
    let _: Option<cuptiPmSamplingEnable_t> = None;
    let _: Option<cuptiPmSamplingDisable_t> = None;
    let _: Option<cuptiPmSamplingSetConfig_t> = None;
    let _: Option<cuptiPmSamplingStart_t> = None;
    let _: Option<cuptiPmSamplingStop_t> = None;
    let _: Option<cuptiPmSamplingGetCounterDataSize_t> = None;
    let _: Option<cuptiPmSamplingCounterDataImageInitialize_t> = None;
    let _: Option<cuptiPmSamplingDecodeData_t> = None;
    let _: Option<cuptiPmSamplingGetCounterDataInfo_t> = None;
    let _: Option<cuptiPmSamplingCounterDataGetSampleInfo_t> = None;

    let flush: cuptiActivityFlushAll_t = fake_flush;
    // Safety: `fake_flush` is a plain Rust function with this signature.
    assert_eq!(unsafe { flush(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) }, CUPTI_SUCCESS);
}

unsafe extern "C" fn fake_flush(flag: u32) -> cupti_sys::CUptiResult {
    assert_eq!(flag, 1);
    cupti_sys::CUPTI_SUCCESS
}

#[test]
fn constants_agree_between_12_9_and_13_5() {
    let v12 = items(&source("bindings_v12.rs"), "pubconst");
    let v13 = items(&source("bindings_v13.rs"), "pubconst");
    // Sentinels that count the enum's values, and the header's own version.
    let expected_to_differ = [
        "CUPTI_API_VERSION",
        "CUPTI_ACTIVITY_KIND_COUNT",
        "CUPTI_DRIVER_TRACE_CBID_SIZE",
        "CUPTI_RUNTIME_TRACE_CBID_SIZE",
        "CUPTI_CBID_RESOURCE_SIZE",
        "CUPTI_MAX_NVLINK_PORTS",
        "CU_DEVICE_ATTRIBUTE_MAX",
    ];
    let mut shared = 0;
    for (name, value) in &v12 {
        let Some(other) = v13.get(name) else { continue };
        shared += 1;
        if !expected_to_differ.contains(&name.as_str()) {
            assert_eq!(value, other, "{name}: 12.9 vs 13.5");
        }
    }
    assert!(shared > 1500, "only {shared} shared constants");
    assert_eq!(cupti_sys::bindings_v12::CUPTI_API_VERSION, 28);
    assert_eq!(cupti_sys::CUPTI_API_VERSION, 130500);
}

#[test]
fn function_signatures_agree_between_12_9_and_13_5() {
    let v12 = items(&source("bindings_v12.rs"), "pubtypecupti");
    let v13 = items(&source("bindings_v13.rs"), "pubtypecupti");
    assert!(v12.len() >= 50 && v13.len() >= 70, "{} / {}", v12.len(), v13.len());
    for (name, signature) in &v12 {
        assert_eq!(Some(signature), v13.get(name), "cupti{name}: 12.9 vs 13.5");
    }
}

#[test]
fn struct_layouts_agree_between_12_9_and_13_5() {
    let v12 = layout_assertions(&source("bindings_v12.rs"));
    let v13 = layout_assertions(&source("bindings_v13.rs"));
    // 13.x names the first byte of Memcpy6's and Memset4's trailing `pad2`
    // `isDeviceLaunched`, so `pad2` moves from 84 to 85.
    // Two profiler parameter structs grew at their end in 13.x (they are
    // versioned by `structSize`; every 12.9 field keeps its offset, which
    // the loop checks): `CUpti_Profiler_Host_Initialize_Params` gained
    // `pSinglePassMetricSetName`, `CUpti_Profiler_GetCounterAvailability_Params`
    // a trailing field. The PM sampler passes the 12.x size of the first.
    let expected_to_differ = [
        "Offsetoffield:CUpti_ActivityMemcpy6::pad2",
        "Offsetoffield:CUpti_ActivityMemset4::pad2",
        "SizeofCUpti_Profiler_GetCounterAvailability_Params",
        "SizeofCUpti_Profiler_Host_Initialize_Params",
    ];
    assert!(v12.len() > 400, "only {} assertions in bindings_v12.rs", v12.len());
    for (key, value) in &v12 {
        if expected_to_differ.contains(&key.as_str()) {
            continue;
        }
        assert_eq!(Some(value), v13.get(key), "{key}: 12.9 vs 13.5");
    }
}

/// The PM sampling and profiler parameter structs the agent fills, pinned
/// (x86_64) in both generated files: a regeneration that moves a field
/// fails here. `tests/doubles/fake_pmsampling.c` asserts the same numbers
/// for its own declarations (`_Static_assert`).
#[test]
fn pm_sampling_parameter_layouts_are_pinned() {
    use std::mem::{offset_of, size_of};
    macro_rules! pin {
        ($m:ident) => {{
            use cupti_sys::$m as b;
            assert_eq!(size_of::<b::CUpti_Device_GetChipName_Params>(), 32);
            assert_eq!(offset_of!(b::CUpti_Device_GetChipName_Params, pChipName), 24);
            assert_eq!(size_of::<b::CUpti_Profiler_Initialize_Params>(), 16);
            assert_eq!(size_of::<b::CUpti_PmSampling_GetCounterAvailability_Params>(), 40);
            assert_eq!(
                offset_of!(b::CUpti_PmSampling_GetCounterAvailability_Params, pCounterAvailabilityImage),
                32
            );
            assert_eq!(offset_of!(b::CUpti_Profiler_Host_Initialize_Params, pHostObject), 40);
            assert_eq!(size_of::<b::CUpti_Profiler_Host_Deinitialize_Params>(), 24);
            assert_eq!(size_of::<b::CUpti_Profiler_Host_ConfigAddMetrics_Params>(), 40);
            assert_eq!(size_of::<b::CUpti_Profiler_Host_GetConfigImageSize_Params>(), 32);
            assert_eq!(size_of::<b::CUpti_Profiler_Host_GetConfigImage_Params>(), 40);
            assert_eq!(size_of::<b::CUpti_Profiler_Host_EvaluateToGpuValues_Params>(), 72);
            assert_eq!(offset_of!(b::CUpti_Profiler_Host_EvaluateToGpuValues_Params, rangeIndex), 40);
            assert_eq!(size_of::<b::CUpti_PmSampling_Enable_Params>(), 32);
            assert_eq!(size_of::<b::CUpti_PmSampling_Disable_Params>(), 24);
            assert_eq!(size_of::<b::CUpti_PmSampling_Start_Params>(), 24);
            assert_eq!(size_of::<b::CUpti_PmSampling_Stop_Params>(), 24);
            assert_eq!(size_of::<b::CUpti_PmSampling_SetConfig_Params>(), 64);
            assert_eq!(offset_of!(b::CUpti_PmSampling_SetConfig_Params, samplingInterval), 48);
            assert_eq!(offset_of!(b::CUpti_PmSampling_SetConfig_Params, triggerMode), 56);
            assert_eq!(offset_of!(b::CUpti_PmSampling_SetConfig_Params, hwBufferAppendMode), 60);
            assert_eq!(size_of::<b::CUpti_PmSampling_GetCounterDataSize_Params>(), 56);
            assert_eq!(offset_of!(b::CUpti_PmSampling_GetCounterDataSize_Params, maxSamples), 40);
            assert_eq!(offset_of!(b::CUpti_PmSampling_GetCounterDataSize_Params, counterDataSize), 48);
            assert_eq!(size_of::<b::CUpti_PmSampling_CounterDataImage_Initialize_Params>(), 40);
            assert_eq!(size_of::<b::CUpti_PmSampling_DecodeData_Params>(), 48);
            assert_eq!(offset_of!(b::CUpti_PmSampling_DecodeData_Params, decodeStopReason), 40);
            assert_eq!(offset_of!(b::CUpti_PmSampling_DecodeData_Params, overflow), 44);
            assert_eq!(size_of::<b::CUpti_PmSampling_GetCounterDataInfo_Params>(), 56);
            assert_eq!(size_of::<b::CUpti_PmSampling_CounterData_GetSampleInfo_Params>(), 64);
            assert_eq!(offset_of!(b::CUpti_PmSampling_CounterData_GetSampleInfo_Params, startTimestamp), 48);
        }};
    }
    pin!(bindings_v12);
    pin!(bindings_v13);
    // 12.x ends the host object's init params at pHostObject; 13.x appends
    // pSinglePassMetricSetName.
    assert_eq!(size_of::<cupti_sys::bindings_v12::CUpti_Profiler_Host_Initialize_Params>(), 48);
    assert_eq!(size_of::<cupti_sys::bindings_v13::CUpti_Profiler_Host_Initialize_Params>(), 56);
}
