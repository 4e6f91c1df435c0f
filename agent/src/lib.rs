//! The gputrace capture agent (`libgputrace_agent.so`).
//!
//! Injected into a CUDA process by `gputrace run` through
//! `CUDA_INJECTION64_PATH` (the driver calls [`InitializeInjection`] inside
//! the first `cuInit`). It records kernels, copies, memsets,
//! synchronizations and CUDA API calls with CUPTI's activity API and
//! streams them to one trace file per process.
//!
//! Rules this library keeps, because it runs inside someone's job:
//! - every `extern "C"` entry catches panics; nothing unwinds into C;
//! - CUPTI's buffer callbacks only touch a pre-allocated lock-free pool
//!   (no allocation, lock or system call);
//! - any failure prints one `gputrace:` line and turns capture off; the job
//!   runs on with its own exit code;
//! - libcupti is never called unless libcuda is already loaded;
//! - a forked child never touches the parent's CUPTI state, buffers or file.
//!
//! Loaded with `LD_PRELOAD` (or by any process that merely links it), the
//! library does nothing: it has no constructor.

mod cbid_names;
mod config;
mod correlation;
mod cupti;
mod decode;
mod dl;
mod duty;
mod flight;
mod identity;
mod levers;
mod nccl;
mod nccl_plugin;
mod nvml;
mod nvtx;
mod nvtx_inject;
mod pm_sampling;
mod pool;
mod sampler;
mod say;
mod session;

use say::say;
use session::{OWNER_PID, SESSION};

/// Internals exposed for the agent's benchmarks and tests only; not an API.
#[doc(hidden)]
pub mod internals {
    pub use crate::decode::{kind, Decoder};
    pub use crate::nccl::link::Linker;
    pub use crate::nccl::ty as nccl_ty;
    pub use crate::nccl::{table_bytes as nccl_table_bytes, Descr, Nccl, Rec, RecKind};
    pub use crate::pool::Pool;
}
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering::Acquire;
use std::time::Duration;

/// NUL-terminated version string of this agent build.
#[no_mangle]
pub static GPUTRACE_AGENT_VERSION: [u8; AGENT_VERSION_LEN] = agent_version();

const AGENT_VERSION_LEN: usize = env!("CARGO_PKG_VERSION").len() + 1;

const fn agent_version() -> [u8; AGENT_VERSION_LEN] {
    let src = env!("CARGO_PKG_VERSION").as_bytes();
    let mut out = [0u8; AGENT_VERSION_LEN];
    let mut i = 0;
    while i < src.len() {
        out[i] = src[i];
        i += 1;
    }
    out
}

/// Called by the CUDA driver inside the first `cuInit` when
/// `CUDA_INJECTION64_PATH` names this library. Returns 1 (success) in every
/// case, so the driver never treats the job differently because of us.
#[no_mangle]
pub extern "C" fn InitializeInjection() -> libc::c_int {
    let r = catch_unwind(|| {
        if let Err(msg) = session::start() {
            say(&msg);
        }
    });
    if r.is_err() {
        say("internal error while starting capture; this process runs untraced");
    }
    1
}

/// Called by NVTX (v3) at its first call when `NVTX_INJECTION64_PATH` names
/// this library: installs our functions for NVTX's core and domain API (see
/// `nvtx/`). Returns 0 (NVTX then makes every call a no-op and may unload
/// us) only when NVTX capture is off, before any handler is registered;
/// after a failure it says so and returns 1 with nothing (or only part)
/// installed: NVTX no-ops whatever we left NULL.
#[no_mangle]
pub extern "C" fn InitializeInjectionNvtx2(get_export_table: nvtx::abi::GetExportTable) -> libc::c_int {
    // Safety: NVTX passes its export-table function.
    catch_unwind(|| unsafe { nvtx_inject::initialize_injection(get_export_table) }).unwrap_or(1)
}

/// Record an instant marker `message` in `domain` (NULL or "": the default
/// domain), for gputrace's Python module (loaded with `ctypes` from
/// `GPUTRACE_AGENT_LIB`). Works whether or not the process uses NVTX or
/// CUDA. Returns 1 when recorded, 0 otherwise (capture off, queue full:
/// counted as a loss). Never blocks, allocates or makes a system call after
/// the first call.
///
/// # Safety
/// `domain` and `message` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn gputrace_mark(domain: *const libc::c_char, message: *const libc::c_char) -> libc::c_int {
    // Safety: the caller's contract.
    catch_unwind(|| unsafe { nvtx_inject::mark(domain, message) } as libc::c_int).unwrap_or(0)
}

/// Record one moment of a served request, for gputrace's Python module
/// (`gputrace.request(...)`): `id` the request's number, `phase` 0 arrive,
/// 1 scheduled, 2 first token, 3 finish, 4 fail, `tokens` the prompt tokens
/// at arrive and the generated tokens at finish or fail (0 otherwise),
/// `time_ns` when it happened (`CLOCK_REALTIME` ns, Python's
/// `time.time_ns()`; 0: now). Returns 1 when recorded, 0 otherwise (capture off, a phase out of range,
/// queue full: counted as a loss). Never blocks, allocates or makes a system
/// call after the first call; adds no string to the trace.
#[no_mangle]
pub extern "C" fn gputrace_request(id: u64, phase: u32, tokens: u64, time_ns: u64) -> libc::c_int {
    catch_unwind(|| nvtx_inject::request(id, phase, tokens, time_ns) as libc::c_int).unwrap_or(0)
}

/// CUPTI asks for a buffer to fill. Callback path: pool only.
pub(crate) extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let Some(s) = SESSION.get() else { return };
        // Safety: CUPTI passes valid out-pointers.
        unsafe {
            *buffer = s.pool.request();
            *size = s.pool.buf_size();
            *max_records = 0;
        }
    }));
}

/// CUPTI hands a filled buffer back. Callback path: pool only.
pub(crate) extern "C" fn buffer_completed(_ctx: cupti_sys::CUcontext, _stream: u32, buffer: *mut u8, _size: usize, valid: usize) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if let Some(s) = SESSION.get() {
            s.pool.complete(buffer, valid);
        }
    }));
}

/// v2 (multi-subscriber) flavour of [`buffer_requested`].
pub(crate) extern "C" fn buffer_requested_v2(
    buffer: *mut *mut u8,
    size: *mut usize,
    max_records: *mut usize,
    _info: *mut cupti_sys::CUpti_BufferCallbackRequestInfo,
) {
    buffer_requested(buffer, size, max_records)
}

/// v2 (multi-subscriber) flavour of [`buffer_completed`].
pub(crate) extern "C" fn buffer_completed_v2(
    buffer: *mut u8,
    size: usize,
    valid: usize,
    _info: *mut cupti_sys::CUpti_BufferCallbackCompleteInfo,
) {
    buffer_completed(std::ptr::null_mut(), 0, buffer, size, valid)
}

/// `atexit` handler: final forced flush and trailer, bounded in time.
pub(crate) extern "C" fn at_exit() {
    let _ = catch_unwind(|| {
        if OWNER_PID.load(Acquire) != std::process::id() {
            return; // a forked child: the parent owns the session
        }
        if let Some(s) = SESSION.get() {
            s.finish_at_exit(Duration::from_secs(10));
        }
    });
}

#[cfg(test)]
mod tests {
    #[test]
    fn version_is_nul_terminated_package_version() {
        let v = &super::GPUTRACE_AGENT_VERSION;
        assert_eq!(v.last(), Some(&0));
        assert_eq!(&v[..v.len() - 1], env!("CARGO_PKG_VERSION").as_bytes());
    }
}
