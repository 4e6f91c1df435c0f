//! The entry layer: every function C calls into the agent, and the symbols
//! it exports. Each entry catches panics (nothing unwinds into C), answers
//! what its caller expects when anything fails, and delegates to safe Rust
//! functions in the modules below (`session`, `nvtx`, `nccl`). Nothing below
//! this layer names it: the session gets the functions it registers with
//! CUPTI and libc as [`session::Hooks`].
//!
//! | Caller | Entry |
//! |---|---|
//! | the CUDA driver (`CUDA_INJECTION64_PATH`) | [`InitializeInjection`] |
//! | CUPTI's activity buffers | `buffer_requested`, `buffer_completed` (and `_v2`) |
//! | libc at exit | `at_exit`, `write_markers_at_exit` |
//! | NVTX (`NVTX_INJECTION64_PATH`) | [`InitializeInjectionNvtx2`] and the functions it installs ([`nvtx`]) |
//! | NCCL's profiler plugin loader | the `ncclProfiler_v1` … `ncclProfiler_v6` tables ([`nccl`]) |
//! | gputrace's Python module (`ctypes`) | [`gputrace_mark`], [`gputrace_request`] |
//!
//! Fork and signal handlers (one atomic store each, which cannot panic)
//! stay beside the flag they set (`correlation`, `nvtx`, `flight`).

mod nccl;
mod nvtx;

use crate::say::say;
use crate::session::{self, Hooks};
use std::panic::{catch_unwind, AssertUnwindSafe};

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

/// What the session registers with CUPTI and libc.
const HOOKS: Hooks = Hooks {
    buffers: crate::cupti::BufferCallbacks {
        requested: buffer_requested,
        completed: buffer_completed,
        requested_v2: buffer_requested_v2,
        completed_v2: buffer_completed_v2,
    },
    at_exit,
};

/// Called by the CUDA driver inside the first `cuInit` when
/// `CUDA_INJECTION64_PATH` names this library. Returns 1 (success) in every
/// case, so the driver never treats the job differently because of us.
#[no_mangle]
pub extern "C" fn InitializeInjection() -> libc::c_int {
    let r = catch_unwind(|| {
        if let Err(e) = session::start(HOOKS) {
            say(&e.to_string());
        }
    });
    if r.is_err() {
        say("internal error while starting capture; this process runs untraced");
    }
    1
}

/// Called by NVTX (v3) at its first call when `NVTX_INJECTION64_PATH` names
/// this library: installs our functions for NVTX's core and domain API (see
/// [`nvtx`]). Returns 0 (NVTX then makes every call a no-op and may unload
/// us) only when NVTX capture is off, before any handler is registered;
/// after a failure it says so and returns 1 with nothing (or only part)
/// installed: NVTX no-ops whatever we left NULL.
#[no_mangle]
pub extern "C" fn InitializeInjectionNvtx2(get_export_table: crate::nvtx::abi::GetExportTable) -> libc::c_int {
    // Safety: NVTX passes its export-table function.
    catch_unwind(|| unsafe { nvtx::initialize_injection(get_export_table) }).unwrap_or(1)
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
    catch_unwind(|| unsafe { nvtx::mark(domain, message) } as libc::c_int).unwrap_or(0)
}

/// Record one moment of a served request, for gputrace's Python module
/// (`gputrace.request(...)`): `id` the request's number, `phase` 0 arrive,
/// 1 scheduled, 2 first token, 3 finish, 4 fail, `tokens` the prompt tokens
/// at arrive and the generated tokens at finish or fail (0 otherwise),
/// `time_ns` when it happened (`CLOCK_REALTIME` ns, Python's
/// `time.time_ns()`; 0: now). Returns 1 when recorded, 0 otherwise (capture
/// off, a phase out of range, queue full: counted as a loss). Never blocks,
/// allocates or makes a system call after the first call; adds no string to
/// the trace.
#[no_mangle]
pub extern "C" fn gputrace_request(id: u64, phase: u32, tokens: u64, time_ns: u64) -> libc::c_int {
    catch_unwind(|| nvtx::request(id, phase, tokens, time_ns) as libc::c_int).unwrap_or(0)
}

/// CUPTI asks for a buffer to fill. Callback path: pool only.
extern "C" fn buffer_requested(buffer: *mut *mut u8, size: *mut usize, max_records: *mut usize) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let Some((buf, len)) = session::request_buffer() else { return };
        // Safety: CUPTI passes valid out-pointers.
        unsafe {
            *buffer = buf;
            *size = len;
            *max_records = 0;
        }
    }));
}

/// CUPTI hands a filled buffer back. Callback path: pool only.
extern "C" fn buffer_completed(_ctx: cupti_sys::CUcontext, _stream: u32, buffer: *mut u8, _size: usize, valid: usize) {
    let _ = catch_unwind(AssertUnwindSafe(|| session::complete_buffer(buffer, valid)));
}

/// v2 (multi-subscriber) flavour of [`buffer_requested`].
extern "C" fn buffer_requested_v2(
    buffer: *mut *mut u8,
    size: *mut usize,
    max_records: *mut usize,
    _info: *mut cupti_sys::CUpti_BufferCallbackRequestInfo,
) {
    buffer_requested(buffer, size, max_records)
}

/// v2 (multi-subscriber) flavour of [`buffer_completed`].
extern "C" fn buffer_completed_v2(buffer: *mut u8, size: usize, valid: usize, _info: *mut cupti_sys::CUpti_BufferCallbackCompleteInfo) {
    buffer_completed(std::ptr::null_mut(), 0, buffer, size, valid)
}

/// `atexit` handler of a session: final forced flush and trailer, bounded
/// in time.
extern "C" fn at_exit() {
    let _ = catch_unwind(session::finish_at_exit);
}

/// `atexit` handler registered at NVTX's first call: writes the markers
/// when no session ever started in this process.
extern "C" fn write_markers_at_exit() {
    let _ = catch_unwind(|| session::write_markers_at_exit(HOOKS));
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
