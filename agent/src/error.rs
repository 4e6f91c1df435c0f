//! The one error of a call into a library loaded at run time (CUPTI's
//! activity API, its PM sampling and profiler host API, NVML): which
//! function, its return code, and what the code means. Each library's
//! wrapper turns every return code into a `Result` through one conversion
//! to this type.

use cupti_sys as sys;

/// A call that did not succeed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallError {
    /// The function that failed (or the library, for a state it reported).
    pub call: &'static str,
    /// The raw return code (`CUptiResult`, `nvmlReturn_t`).
    pub code: u32,
    /// What the code means, as the message says it.
    pub meaning: Meaning,
}

/// How a [`CallError`]'s code is told (each library's messages keep their
/// own wording).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Meaning {
    /// A `CUptiResult` of the activity API: "CALL failed with CUPTI error
    /// CODE (NAME)".
    CuptiActivity,
    /// A `CUptiResult` of the PM sampling and profiler host API: "CALL
    /// returned CODE (NAME)".
    CuptiProfiler,
    /// "CALL returned CODE (TEXT)": the library's own description of the
    /// code (`nvmlErrorString`), or the agent's.
    Described(String),
}

impl CallError {
    /// A failed call of CUPTI's activity API.
    pub fn cupti(call: &'static str, code: u32) -> CallError {
        CallError {
            call,
            code,
            meaning: Meaning::CuptiActivity,
        }
    }

    /// A failed call of CUPTI's PM sampling or profiler host API.
    pub fn cupti_profiler(call: &'static str, code: u32) -> CallError {
        CallError {
            call,
            code,
            meaning: Meaning::CuptiProfiler,
        }
    }

    /// A failed call described in words (NVML's, or the agent's).
    pub fn described(call: &'static str, code: u32, text: impl Into<String>) -> CallError {
        CallError {
            call,
            code,
            meaning: Meaning::Described(text.into()),
        }
    }
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (call, code) = (self.call, self.code);
        match &self.meaning {
            Meaning::CuptiActivity => write!(f, "{call} failed with CUPTI error {code} ({})", result_name(code)),
            Meaning::CuptiProfiler => write!(f, "{call} returned {code} ({})", result_name(code)),
            Meaning::Described(text) => write!(f, "{call} returned {code} ({text})"),
        }
    }
}

impl std::error::Error for CallError {}

/// Names of the CUPTI results the agent can meet (from `cupti_result.h`).
/// A string table here, because `cuptiGetResultString` itself crashes in
/// CUPTI 13.2 without a driver.
pub fn result_name(code: u32) -> &'static str {
    match code {
        sys::CUPTI_SUCCESS => "SUCCESS",
        sys::CUPTI_ERROR_INVALID_PARAMETER => "INVALID_PARAMETER",
        sys::CUPTI_ERROR_INVALID_DEVICE => "INVALID_DEVICE",
        sys::CUPTI_ERROR_INVALID_CONTEXT => "INVALID_CONTEXT",
        sys::CUPTI_ERROR_INVALID_OPERATION => "INVALID_OPERATION",
        sys::CUPTI_ERROR_OUT_OF_MEMORY => "OUT_OF_MEMORY",
        sys::CUPTI_ERROR_PARAMETER_SIZE_NOT_SUFFICIENT => "PARAMETER_SIZE_NOT_SUFFICIENT",
        sys::CUPTI_ERROR_MAX_LIMIT_REACHED => "MAX_LIMIT_REACHED",
        sys::CUPTI_ERROR_NOT_COMPATIBLE => "NOT_COMPATIBLE",
        sys::CUPTI_ERROR_NOT_INITIALIZED => "NOT_INITIALIZED",
        sys::CUPTI_ERROR_QUEUE_EMPTY => "QUEUE_EMPTY",
        sys::CUPTI_ERROR_INVALID_KIND => "INVALID_KIND",
        sys::CUPTI_ERROR_HARDWARE_BUSY => "HARDWARE_BUSY",
        sys::CUPTI_ERROR_NOT_SUPPORTED => "NOT_SUPPORTED",
        sys::CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED => "VIRTUALIZED_DEVICE_NOT_SUPPORTED",
        sys::CUPTI_ERROR_INSUFFICIENT_PRIVILEGES => "INSUFFICIENT_PRIVILEGES",
        sys::CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED => "LEGACY_PROFILER_NOT_SUPPORTED",
        sys::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED => "MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED",
        sys::CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED => "CONFIDENTIAL_COMPUTING_NOT_SUPPORTED",
        sys::CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED => "CMP_DEVICE_NOT_SUPPORTED",
        sys::CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED => "MIG_DEVICE_NOT_SUPPORTED",
        sys::CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED => "SLI_DEVICE_NOT_SUPPORTED",
        sys::CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED => "WSL_DEVICE_NOT_SUPPORTED",
        sys::CUPTI_ERROR_HES_TRACE_NOT_SUPPORTED_ON_MPS => "HES_TRACE_NOT_SUPPORTED_ON_MPS",
        sys::CUPTI_ERROR_UNKNOWN => "UNKNOWN",
        _ => "unrecognised code",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_library_keeps_its_wording() {
        assert_eq!(
            CallError::cupti("cuptiActivityEnable", sys::CUPTI_ERROR_NOT_INITIALIZED).to_string(),
            "cuptiActivityEnable failed with CUPTI error 15 (NOT_INITIALIZED)"
        );
        assert_eq!(
            CallError::cupti_profiler("cuptiPmSamplingEnable", sys::CUPTI_ERROR_HARDWARE_BUSY).to_string(),
            format!("cuptiPmSamplingEnable returned {} (HARDWARE_BUSY)", sys::CUPTI_ERROR_HARDWARE_BUSY)
        );
        assert_eq!(
            CallError::described("NVML", 15, "the GPU is lost").to_string(),
            "NVML returned 15 (the GPU is lost)"
        );
    }
}
