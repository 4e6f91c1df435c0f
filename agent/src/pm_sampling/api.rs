//! CUPTI's PM sampling and profiler host calls, resolved at run time from
//! the libcupti the session loaded. Every entry point is optional in the
//! library (CUPTI 12.6 added them): [`PmApi::resolve`] names the first one
//! missing.
//!
//! Parameter structs are versioned by `structSize`. Each call passes the
//! size the 12.6 headers define, which 13.x accepts: only
//! `CUpti_Profiler_Host_Initialize_Params` grew since (13.0 appended
//! `pSinglePassMetricSetName`, which PM sampling of chosen metrics leaves
//! unset), so it is passed with the size up to `pHostObject`.

use crate::dl::{required_symbol, Lib, MissingSymbol};
use crate::error::CallError;
use cupti_sys as sys;
use std::ffi::{c_char, CStr, CString};
use std::mem::{offset_of, size_of};

/// The resolved entry points. Every pointer was checked non-null.
pub struct PmApi {
    profiler_init: sys::cuptiProfilerInitialize_t,
    profiler_deinit: sys::cuptiProfilerDeInitialize_t,
    chip_name: sys::cuptiDeviceGetChipName_t,
    availability: sys::cuptiPmSamplingGetCounterAvailability_t,
    host_init: sys::cuptiProfilerHostInitialize_t,
    host_deinit: sys::cuptiProfilerHostDeinitialize_t,
    add_metrics: sys::cuptiProfilerHostConfigAddMetrics_t,
    config_size: sys::cuptiProfilerHostGetConfigImageSize_t,
    config_image: sys::cuptiProfilerHostGetConfigImage_t,
    evaluate: sys::cuptiProfilerHostEvaluateToGpuValues_t,
    enable: sys::cuptiPmSamplingEnable_t,
    disable: sys::cuptiPmSamplingDisable_t,
    set_config: sys::cuptiPmSamplingSetConfig_t,
    start: sys::cuptiPmSamplingStart_t,
    stop: sys::cuptiPmSamplingStop_t,
    data_size: sys::cuptiPmSamplingGetCounterDataSize_t,
    data_init: sys::cuptiPmSamplingCounterDataImageInitialize_t,
    decode: sys::cuptiPmSamplingDecodeData_t,
    data_info: sys::cuptiPmSamplingGetCounterDataInfo_t,
    sample_info: sys::cuptiPmSamplingCounterDataGetSampleInfo_t,
    timestamp: sys::cuptiGetTimestamp_t,
}

/// Returns `CUPTI_SUCCESS` as Ok, anything else as a [`CallError`].
fn check(call: &'static str, code: sys::CUptiResult) -> Result<(), CallError> {
    if code == sys::CUPTI_SUCCESS {
        Ok(())
    } else {
        Err(CallError::cupti_profiler(call, code))
    }
}

/// The 12.6 size of a parameter struct: up to and including its last field.
macro_rules! size_to {
    ($t:ty, $field:ident, $fty:ty) => {
        offset_of!($t, $field) + size_of::<$fty>()
    };
}

/// An opaque CUPTI object pointer (PM sampling or host object).
#[derive(Debug)]
pub struct Object<T>(pub *mut T);
impl<T> Clone for Object<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Object<T> {}
// Safety: CUPTI's objects are plain handles; the sampler thread is the only
// user of the ones it creates.
unsafe impl<T> Send for Object<T> {}

pub type Sampler = Object<sys::CUpti_PmSampling_Object>;
pub type Host = Object<sys::CUpti_Profiler_Host_Object>;

impl PmApi {
    /// Resolve every entry point; the name of the first one missing otherwise.
    pub fn resolve(lib: &Lib) -> Result<PmApi, MissingSymbol> {
        Ok(PmApi {
            enable: required_symbol!(lib, "cuptiPmSamplingEnable", sys::cuptiPmSamplingEnable_t),
            disable: required_symbol!(lib, "cuptiPmSamplingDisable", sys::cuptiPmSamplingDisable_t),
            set_config: required_symbol!(lib, "cuptiPmSamplingSetConfig", sys::cuptiPmSamplingSetConfig_t),
            start: required_symbol!(lib, "cuptiPmSamplingStart", sys::cuptiPmSamplingStart_t),
            stop: required_symbol!(lib, "cuptiPmSamplingStop", sys::cuptiPmSamplingStop_t),
            data_size: required_symbol!(lib, "cuptiPmSamplingGetCounterDataSize", sys::cuptiPmSamplingGetCounterDataSize_t),
            data_init: required_symbol!(
                lib,
                "cuptiPmSamplingCounterDataImageInitialize",
                sys::cuptiPmSamplingCounterDataImageInitialize_t
            ),
            decode: required_symbol!(lib, "cuptiPmSamplingDecodeData", sys::cuptiPmSamplingDecodeData_t),
            data_info: required_symbol!(lib, "cuptiPmSamplingGetCounterDataInfo", sys::cuptiPmSamplingGetCounterDataInfo_t),
            sample_info: required_symbol!(
                lib,
                "cuptiPmSamplingCounterDataGetSampleInfo",
                sys::cuptiPmSamplingCounterDataGetSampleInfo_t
            ),
            availability: required_symbol!(
                lib,
                "cuptiPmSamplingGetCounterAvailability",
                sys::cuptiPmSamplingGetCounterAvailability_t
            ),
            host_init: required_symbol!(lib, "cuptiProfilerHostInitialize", sys::cuptiProfilerHostInitialize_t),
            host_deinit: required_symbol!(lib, "cuptiProfilerHostDeinitialize", sys::cuptiProfilerHostDeinitialize_t),
            add_metrics: required_symbol!(lib, "cuptiProfilerHostConfigAddMetrics", sys::cuptiProfilerHostConfigAddMetrics_t),
            config_size: required_symbol!(
                lib,
                "cuptiProfilerHostGetConfigImageSize",
                sys::cuptiProfilerHostGetConfigImageSize_t
            ),
            config_image: required_symbol!(lib, "cuptiProfilerHostGetConfigImage", sys::cuptiProfilerHostGetConfigImage_t),
            evaluate: required_symbol!(
                lib,
                "cuptiProfilerHostEvaluateToGpuValues",
                sys::cuptiProfilerHostEvaluateToGpuValues_t
            ),
            profiler_init: required_symbol!(lib, "cuptiProfilerInitialize", sys::cuptiProfilerInitialize_t),
            profiler_deinit: required_symbol!(lib, "cuptiProfilerDeInitialize", sys::cuptiProfilerDeInitialize_t),
            chip_name: required_symbol!(lib, "cuptiDeviceGetChipName", sys::cuptiDeviceGetChipName_t),
            timestamp: required_symbol!(lib, "cuptiGetTimestamp", sys::cuptiGetTimestamp_t),
        })
    }

    /// `cuptiProfilerInitialize`: once per process before the rest.
    pub fn profiler_init(&self) -> Result<(), CallError> {
        let mut p = sys::CUpti_Profiler_Initialize_Params {
            structSize: size_to!(sys::CUpti_Profiler_Initialize_Params, pPriv, *mut libc::c_void),
            ..Default::default()
        };
        // Safety: `p` is a valid, initialized parameter struct.
        check("cuptiProfilerInitialize", unsafe { (self.profiler_init)(&mut p) })
    }

    pub fn profiler_deinit(&self) -> Result<(), CallError> {
        let mut p = sys::CUpti_Profiler_DeInitialize_Params {
            structSize: size_to!(sys::CUpti_Profiler_DeInitialize_Params, pPriv, *mut libc::c_void),
            ..Default::default()
        };
        // Safety: as above.
        check("cuptiProfilerDeInitialize", unsafe { (self.profiler_deinit)(&mut p) })
    }

    /// The device's chip name (`GH100`), as a copy.
    pub fn chip_name(&self, device: u32) -> Result<CString, CallError> {
        let mut p = sys::CUpti_Device_GetChipName_Params {
            structSize: size_to!(sys::CUpti_Device_GetChipName_Params, pChipName, *const c_char),
            deviceIndex: device as usize,
            ..Default::default()
        };
        // Safety: `p` is valid; CUPTI sets `pChipName` to a string it owns.
        check("cuptiDeviceGetChipName", unsafe { (self.chip_name)(&mut p) })?;
        if p.pChipName.is_null() {
            return Err(CallError::cupti_profiler("cuptiDeviceGetChipName", sys::CUPTI_ERROR_UNKNOWN));
        }
        // Safety: non-null, NUL-terminated, valid for the call's lifetime; copied at once.
        Ok(unsafe { CStr::from_ptr(p.pChipName) }.to_owned())
    }

    /// The device's counter availability image (size query, then fill).
    pub fn counter_availability(&self, device: u32) -> Result<Vec<u8>, CallError> {
        const CALL: &str = "cuptiPmSamplingGetCounterAvailability";
        let mut p = sys::CUpti_PmSampling_GetCounterAvailability_Params {
            structSize: size_to!(
                sys::CUpti_PmSampling_GetCounterAvailability_Params,
                pCounterAvailabilityImage,
                *mut u8
            ),
            deviceIndex: device as usize,
            ..Default::default()
        };
        // Safety: a null image asks for the size only.
        check(CALL, unsafe { (self.availability)(&mut p) })?;
        let mut image = vec![0u8; p.counterAvailabilityImageSize];
        p.pCounterAvailabilityImage = image.as_mut_ptr();
        // Safety: `image` holds `counterAvailabilityImageSize` bytes.
        check(CALL, unsafe { (self.availability)(&mut p) })?;
        Ok(image)
    }

    /// A host object for PM sampling on `chip`.
    pub fn host_init(&self, chip: &CStr, availability: &[u8]) -> Result<Host, CallError> {
        let mut p = sys::CUpti_Profiler_Host_Initialize_Params {
            // The 12.x size (see the module's documentation).
            structSize: size_to!(
                sys::CUpti_Profiler_Host_Initialize_Params,
                pHostObject,
                *mut sys::CUpti_Profiler_Host_Object
            ),
            profilerType: sys::CUPTI_PROFILER_TYPE_PM_SAMPLING,
            pChipName: chip.as_ptr(),
            pCounterAvailabilityImage: availability.as_ptr(),
            ..Default::default()
        };
        // Safety: the strings and image outlive the call.
        check("cuptiProfilerHostInitialize", unsafe { (self.host_init)(&mut p) })?;
        Ok(Object(p.pHostObject))
    }

    pub fn host_deinit(&self, host: Host) -> Result<(), CallError> {
        let mut p = sys::CUpti_Profiler_Host_Deinitialize_Params {
            structSize: size_to!(
                sys::CUpti_Profiler_Host_Deinitialize_Params,
                pHostObject,
                *mut sys::CUpti_Profiler_Host_Object
            ),
            pHostObject: host.0,
            ..Default::default()
        };
        // Safety: `host` came from `host_init` and is not used after this.
        check("cuptiProfilerHostDeinitialize", unsafe { (self.host_deinit)(&mut p) })
    }

    /// Add one metric to the host's config.
    pub fn add_metric(&self, host: Host, name: &CStr) -> Result<(), CallError> {
        let mut names = [name.as_ptr()];
        let mut p = sys::CUpti_Profiler_Host_ConfigAddMetrics_Params {
            structSize: size_to!(sys::CUpti_Profiler_Host_ConfigAddMetrics_Params, numMetrics, usize),
            pHostObject: host.0,
            ppMetricNames: names.as_mut_ptr(),
            numMetrics: 1,
            ..Default::default()
        };
        // Safety: `names` holds one valid C string for the call.
        check("cuptiProfilerHostConfigAddMetrics", unsafe { (self.add_metrics)(&mut p) })
    }

    /// The config image of the metrics added so far.
    pub fn config_image(&self, host: Host) -> Result<Vec<u8>, CallError> {
        let mut s = sys::CUpti_Profiler_Host_GetConfigImageSize_Params {
            structSize: size_to!(sys::CUpti_Profiler_Host_GetConfigImageSize_Params, configImageSize, usize),
            pHostObject: host.0,
            ..Default::default()
        };
        // Safety: `s` is valid.
        check("cuptiProfilerHostGetConfigImageSize", unsafe { (self.config_size)(&mut s) })?;
        let mut image = vec![0u8; s.configImageSize];
        let mut p = sys::CUpti_Profiler_Host_GetConfigImage_Params {
            structSize: size_to!(sys::CUpti_Profiler_Host_GetConfigImage_Params, pConfigImage, *mut u8),
            pHostObject: host.0,
            configImageSize: image.len(),
            pConfigImage: image.as_mut_ptr(),
            ..Default::default()
        };
        // Safety: `image` holds `configImageSize` bytes.
        check("cuptiProfilerHostGetConfigImage", unsafe { (self.config_image)(&mut p) })?;
        Ok(image)
    }

    pub fn enable(&self, device: u32) -> Result<Sampler, CallError> {
        let mut p = sys::CUpti_PmSampling_Enable_Params {
            structSize: size_to!(
                sys::CUpti_PmSampling_Enable_Params,
                pPmSamplingObject,
                *mut sys::CUpti_PmSampling_Object
            ),
            deviceIndex: device as usize,
            ..Default::default()
        };
        // Safety: `p` is valid.
        check("cuptiPmSamplingEnable", unsafe { (self.enable)(&mut p) })?;
        Ok(Object(p.pPmSamplingObject))
    }

    /// `Disable`, `Start` or `Stop`: they share one parameter layout.
    fn object_call(
        &self,
        call: &'static str,
        f: unsafe extern "C" fn(*mut sys::CUpti_PmSampling_Start_Params) -> sys::CUptiResult,
        s: Sampler,
    ) -> Result<(), CallError> {
        let mut p = sys::CUpti_PmSampling_Start_Params {
            structSize: size_to!(
                sys::CUpti_PmSampling_Start_Params,
                pPmSamplingObject,
                *mut sys::CUpti_PmSampling_Object
            ),
            pPmSamplingObject: s.0,
            ..Default::default()
        };
        // Safety: `s` came from `enable`; `p` is valid.
        check(call, unsafe { f(&mut p) })
    }

    pub fn disable(&self, s: Sampler) -> Result<(), CallError> {
        // Safety: Disable_Params and Start_Params have the same fields
        // (structSize, pPriv, pPmSamplingObject), so the signatures agree.
        let f = unsafe {
            std::mem::transmute::<
                sys::cuptiPmSamplingDisable_t,
                unsafe extern "C" fn(*mut sys::CUpti_PmSampling_Start_Params) -> sys::CUptiResult,
            >(self.disable)
        };
        self.object_call("cuptiPmSamplingDisable", f, s)
    }

    pub fn start(&self, s: Sampler) -> Result<(), CallError> {
        self.object_call("cuptiPmSamplingStart", self.start, s)
    }

    pub fn stop(&self, s: Sampler) -> Result<(), CallError> {
        // Safety: as in `disable`.
        let f = unsafe {
            std::mem::transmute::<
                sys::cuptiPmSamplingStop_t,
                unsafe extern "C" fn(*mut sys::CUpti_PmSampling_Start_Params) -> sys::CUptiResult,
            >(self.stop)
        };
        self.object_call("cuptiPmSamplingStop", f, s)
    }

    /// Sample every `interval_ns` (GPU time trigger), keeping the oldest
    /// records when the hardware buffer is full (so an overflow is reported).
    pub fn set_config(&self, s: Sampler, config: &[u8], hw_buffer: usize, interval_ns: u64) -> Result<(), CallError> {
        let mut p = sys::CUpti_PmSampling_SetConfig_Params {
            structSize: size_to!(
                sys::CUpti_PmSampling_SetConfig_Params,
                hwBufferAppendMode,
                sys::CUpti_PmSampling_HardwareBuffer_AppendMode
            ),
            pPmSamplingObject: s.0,
            configSize: config.len(),
            pConfig: config.as_ptr(),
            hardwareBufferSize: hw_buffer,
            samplingInterval: interval_ns,
            triggerMode: sys::CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL,
            hwBufferAppendMode: sys::CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST,
            ..Default::default()
        };
        // Safety: `config` outlives the call (CUPTI copies it).
        check("cuptiPmSamplingSetConfig", unsafe { (self.set_config)(&mut p) })
    }

    /// Bytes of a counter data image for `max_samples` of `metrics`.
    pub fn counter_data_size(&self, s: Sampler, metrics: &[*const c_char], max_samples: u32) -> Result<usize, CallError> {
        let mut names = metrics.to_vec();
        let mut p = sys::CUpti_PmSampling_GetCounterDataSize_Params {
            structSize: size_to!(sys::CUpti_PmSampling_GetCounterDataSize_Params, counterDataSize, usize),
            pPmSamplingObject: s.0,
            pMetricNames: names.as_mut_ptr(),
            numMetrics: names.len(),
            maxSamples: max_samples,
            ..Default::default()
        };
        // Safety: `names` are valid C strings owned by the caller.
        check("cuptiPmSamplingGetCounterDataSize", unsafe { (self.data_size)(&mut p) })?;
        Ok(p.counterDataSize)
    }

    /// (Re)initialize a counter data image: empty, ready for decoding.
    pub fn init_counter_data(&self, s: Sampler, image: &mut [u8]) -> Result<(), CallError> {
        let mut p = sys::CUpti_PmSampling_CounterDataImage_Initialize_Params {
            structSize: size_to!(sys::CUpti_PmSampling_CounterDataImage_Initialize_Params, pCounterData, *mut u8),
            pPmSamplingObject: s.0,
            counterDataSize: image.len(),
            pCounterData: image.as_mut_ptr(),
            ..Default::default()
        };
        // Safety: `image` is writable for its length.
        check("cuptiPmSamplingCounterDataImageInitialize", unsafe { (self.data_init)(&mut p) })
    }

    /// Decode the hardware buffer into `image`. `full`: the image filled up
    /// before the hardware buffer emptied; `overflow`: the hardware buffer
    /// overflowed (records after it were lost). CUPTI may report the
    /// overflow as `CUPTI_ERROR_OUT_OF_MEMORY` with the flag set: that is
    /// returned as Ok with `overflow`, the samples decoded still usable.
    pub fn decode(&self, s: Sampler, image: &mut [u8]) -> Result<Decoded, CallError> {
        let mut p = sys::CUpti_PmSampling_DecodeData_Params {
            structSize: size_to!(sys::CUpti_PmSampling_DecodeData_Params, overflow, u8),
            pPmSamplingObject: s.0,
            pCounterDataImage: image.as_mut_ptr(),
            counterDataImageSize: image.len(),
            ..Default::default()
        };
        // Safety: `image` was initialized for `s` and is writable.
        let code = unsafe { (self.decode)(&mut p) };
        if code != sys::CUPTI_SUCCESS && !(code == sys::CUPTI_ERROR_OUT_OF_MEMORY && p.overflow != 0) {
            return Err(CallError::cupti_profiler("cuptiPmSamplingDecodeData", code));
        }
        Ok(Decoded {
            full: p.decodeStopReason == sys::CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL,
            overflow: p.overflow != 0,
        })
    }

    /// Samples completed in `image`.
    pub fn completed_samples(&self, image: &[u8]) -> Result<usize, CallError> {
        let mut p = sys::CUpti_PmSampling_GetCounterDataInfo_Params {
            structSize: size_to!(sys::CUpti_PmSampling_GetCounterDataInfo_Params, numCompletedSamples, usize),
            pCounterDataImage: image.as_ptr(),
            counterDataImageSize: image.len(),
            ..Default::default()
        };
        // Safety: `image` is readable for its length.
        check("cuptiPmSamplingGetCounterDataInfo", unsafe { (self.data_info)(&mut p) })?;
        Ok(p.numCompletedSamples)
    }

    /// (start, end) GPU timestamps of sample `index`, ns.
    pub fn sample_times(&self, s: Sampler, image: &[u8], index: usize) -> Result<(u64, u64), CallError> {
        let mut p = sys::CUpti_PmSampling_CounterData_GetSampleInfo_Params {
            structSize: size_to!(sys::CUpti_PmSampling_CounterData_GetSampleInfo_Params, endTimestamp, u64),
            pPmSamplingObject: s.0,
            pCounterDataImage: image.as_ptr(),
            counterDataImageSize: image.len(),
            sampleIndex: index,
            ..Default::default()
        };
        // Safety: as above.
        check("cuptiPmSamplingCounterDataGetSampleInfo", unsafe { (self.sample_info)(&mut p) })?;
        Ok((p.startTimestamp, p.endTimestamp))
    }

    /// The metrics' values for sample `index`, into `values` (one per name).
    pub fn evaluate(&self, host: Host, image: &[u8], index: usize, names: &[*const c_char], values: &mut [f64]) -> Result<(), CallError> {
        debug_assert_eq!(names.len(), values.len());
        let mut p = sys::CUpti_Profiler_Host_EvaluateToGpuValues_Params {
            structSize: size_to!(sys::CUpti_Profiler_Host_EvaluateToGpuValues_Params, pMetricValues, *mut f64),
            pHostObject: host.0,
            pCounterDataImage: image.as_ptr(),
            counterDataImageSize: image.len(),
            rangeIndex: index,
            // CUPTI reads the array only (`const char**` in the header).
            ppMetricNames: names.as_ptr().cast_mut(),
            numMetrics: names.len(),
            pMetricValues: values.as_mut_ptr(),
            ..Default::default()
        };
        // Safety: `values` has room for one f64 per name.
        check("cuptiProfilerHostEvaluateToGpuValues", unsafe { (self.evaluate)(&mut p) })
    }

    /// `cuptiGetTimestamp`: the trace's GPU clock.
    pub fn now(&self) -> Option<u64> {
        let mut t = 0u64;
        // Safety: `t` is a valid out-pointer.
        (unsafe { (self.timestamp)(&mut t) } == sys::CUPTI_SUCCESS).then_some(t)
    }
}

/// What one decode call reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    pub full: bool,
    pub overflow: bool,
}
