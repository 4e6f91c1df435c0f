//! The CUPTI functions the agent uses, resolved at run time from whichever
//! libcupti was found, and one conversion from return codes to `Result`.

use crate::dl::Lib;
use cupti_sys as sys;
use std::ffi::CStr;

/// A CUPTI error code with its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CuptiError {
    /// The function that failed.
    pub call: &'static str,
    /// The raw `CUptiResult`.
    pub code: u32,
}

impl std::fmt::Display for CuptiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} failed with CUPTI error {} ({})",
            self.call,
            self.code,
            result_name(self.code)
        )
    }
}

/// Names of the CUPTI results the agent can meet (from `cupti_result.h`).
/// A string table here, because `cuptiGetResultString` itself crashes in
/// CUPTI 13.2 without a driver.
pub fn result_name(code: u32) -> &'static str {
    match code {
        0 => "SUCCESS",
        1 => "INVALID_PARAMETER",
        2 => "INVALID_DEVICE",
        3 => "INVALID_CONTEXT",
        10 => "INVALID_KIND",
        12 => "MAX_LIMIT_REACHED",
        14 => "NOT_COMPATIBLE",
        15 => "NOT_INITIALIZED",
        17 => "NOT_READY",
        19 => "INVALID_OPERATION",
        20 => "OUT_OF_MEMORY",
        22 => "NOT_SUPPORTED",
        24 => "UNKNOWN (24)",
        26 => "INSUFFICIENT_PRIVILEGES",
        35 => "VIRTUALIZED_DEVICE_NOT_SUPPORTED",
        36 => "CUDA_COMPATIBILITY_NOT_SUPPORTED",
        38 => "LEGACY_PROFILER_NOT_SUPPORTED",
        39 => "MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED",
        999 => "UNKNOWN",
        _ => "unrecognised code",
    }
}

/// `CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED`: another tool holds CUPTI.
pub const MULTIPLE_SUBSCRIBERS: u32 = sys::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
/// `CUPTI_ERROR_MAX_LIMIT_REACHED`: the end of an activity buffer.
pub const MAX_LIMIT_REACHED: u32 = sys::CUPTI_ERROR_MAX_LIMIT_REACHED;
/// `CUPTI_ACTIVITY_FLAG_FLUSH_FORCED`.
pub const FLUSH_FORCED: u32 = 1;

fn check(call: &'static str, code: u32) -> Result<(), CuptiError> {
    if code == 0 {
        Ok(())
    } else {
        Err(CuptiError { call, code })
    }
}

/// Resolved CUPTI entry points. Every pointer was checked non-null.
pub struct Cupti {
    get_version: sys::cuptiGetVersion_t,
    subscribe: sys::cuptiSubscribe_t,
    enable: sys::cuptiActivityEnable_t,
    disable: sys::cuptiActivityDisable_t,
    register: sys::cuptiActivityRegisterCallbacks_t,
    flush_all: sys::cuptiActivityFlushAll_t,
    next_record: sys::cuptiActivityGetNextRecord_t,
    dropped: sys::cuptiActivityGetNumDroppedRecords_t,
    timestamp: sys::cuptiGetTimestamp_t,
    set_thread_id_type: sys::cuptiSetThreadIdType_t,
}

macro_rules! resolve {
    ($lib:expr, $name:literal, $ty:ty) => {{
        let p = $lib.sym(unsafe { CStr::from_bytes_with_nul_unchecked(concat!($name, "\0").as_bytes()) });
        if p.is_null() {
            return Err(format!("libcupti has no {}", $name));
        }
        // Safety: the symbol has this C signature in every CUPTI 12.x/13.x
        // (checked against both headers in cupti-sys's tests).
        unsafe { std::mem::transmute::<*mut libc::c_void, $ty>(p) }
    }};
}

impl Cupti {
    /// Resolve the entry points. Calls nothing in the library.
    pub fn resolve(lib: &Lib) -> Result<Cupti, String> {
        Ok(Cupti {
            get_version: resolve!(lib, "cuptiGetVersion", sys::cuptiGetVersion_t),
            subscribe: resolve!(lib, "cuptiSubscribe", sys::cuptiSubscribe_t),
            enable: resolve!(lib, "cuptiActivityEnable", sys::cuptiActivityEnable_t),
            disable: resolve!(lib, "cuptiActivityDisable", sys::cuptiActivityDisable_t),
            register: resolve!(lib, "cuptiActivityRegisterCallbacks", sys::cuptiActivityRegisterCallbacks_t),
            flush_all: resolve!(lib, "cuptiActivityFlushAll", sys::cuptiActivityFlushAll_t),
            next_record: resolve!(lib, "cuptiActivityGetNextRecord", sys::cuptiActivityGetNextRecord_t),
            dropped: resolve!(lib, "cuptiActivityGetNumDroppedRecords", sys::cuptiActivityGetNumDroppedRecords_t),
            timestamp: resolve!(lib, "cuptiGetTimestamp", sys::cuptiGetTimestamp_t),
            set_thread_id_type: resolve!(lib, "cuptiSetThreadIdType", sys::cuptiSetThreadIdType_t),
        })
    }

    /// `cuptiGetVersion`.
    pub fn version(&self) -> Result<u32, CuptiError> {
        let mut v = 0u32;
        // Safety: valid out-pointer.
        check("cuptiGetVersion", unsafe { (self.get_version)(&mut v) })?;
        Ok(v)
    }

    /// `cuptiSubscribe` with no callback: claims (or detects the owner of)
    /// the CUPTI subscriber slot.
    pub fn subscribe(&self) -> Result<(), CuptiError> {
        let mut handle: sys::CUpti_SubscriberHandle = std::ptr::null_mut();
        // Safety: valid out-pointer; a None callback is allowed.
        check("cuptiSubscribe", unsafe {
            (self.subscribe)(&mut handle, None, std::ptr::null_mut())
        })
    }

    /// `cuptiActivityRegisterCallbacks`.
    pub fn register(
        &self,
        req: sys::CUpti_BuffersCallbackRequestFunc,
        done: sys::CUpti_BuffersCallbackCompleteFunc,
    ) -> Result<(), CuptiError> {
        // Safety: both are valid extern "C" functions for the process lifetime.
        check("cuptiActivityRegisterCallbacks", unsafe { (self.register)(req, done) })
    }

    /// `cuptiActivityEnable(kind)`.
    pub fn enable(&self, kind: u32) -> Result<(), CuptiError> {
        // Safety: plain value call.
        check("cuptiActivityEnable", unsafe { (self.enable)(kind) })
    }

    /// `cuptiActivityDisable(kind)`.
    pub fn disable(&self, kind: u32) -> Result<(), CuptiError> {
        // Safety: plain value call.
        check("cuptiActivityDisable", unsafe { (self.disable)(kind) })
    }

    /// `cuptiActivityFlushAll(flag)`. Never call from a CUPTI callback, and
    /// never from two threads at once (the caller holds the flush lock).
    pub fn flush_all(&self, flag: u32) -> Result<(), CuptiError> {
        // Safety: plain value call.
        check("cuptiActivityFlushAll", unsafe { (self.flush_all)(flag) })
    }

    /// `cuptiActivityGetNumDroppedRecords(NULL, 0, &n)` (resets on read).
    pub fn take_dropped(&self) -> Result<u64, CuptiError> {
        let mut n = 0usize;
        // Safety: valid out-pointer; NULL context means all.
        check("cuptiActivityGetNumDroppedRecords", unsafe {
            (self.dropped)(std::ptr::null_mut(), 0, &mut n)
        })?;
        Ok(n as u64)
    }

    /// `cuptiGetTimestamp`.
    pub fn timestamp(&self) -> Result<u64, CuptiError> {
        let mut t = 0u64;
        // Safety: valid out-pointer.
        check("cuptiGetTimestamp", unsafe { (self.timestamp)(&mut t) })?;
        Ok(t)
    }

    /// Ask for `gettid`-style thread ids in API records.
    pub fn use_system_thread_ids(&self) -> Result<(), CuptiError> {
        // Safety: plain value call.
        check("cuptiSetThreadIdType", unsafe {
            (self.set_thread_id_type)(sys::CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM)
        })
    }

    /// Walk to the next record in a completed buffer. `Ok(None)` at the end.
    ///
    /// # Safety
    /// `buf` must be a buffer CUPTI completed with `valid` bytes, and
    /// `cursor` null on the first call, then the previous return value.
    pub unsafe fn next_record(&self, buf: *mut u8, valid: usize, cursor: &mut *mut sys::CUpti_Activity) -> Result<bool, CuptiError> {
        // Safety: upheld by the caller.
        match unsafe { (self.next_record)(buf, valid, cursor) } {
            0 => Ok(true),
            MAX_LIMIT_REACHED => Ok(false),
            code => Err(CuptiError {
                call: "cuptiActivityGetNextRecord",
                code,
            }),
        }
    }
}
