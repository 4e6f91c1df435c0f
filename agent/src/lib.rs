//! The gputrace capture agent (`libgputrace_agent.so`).
//!
//! Injected into a CUDA process by `gputrace run` through
//! `CUDA_INJECTION64_PATH` (the driver calls `InitializeInjection` inside
//! the first `cuInit`; every entry point lives in `ffi`). It records kernels, copies, memsets,
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
mod error;
mod ffi;
mod flight;
mod identity;
mod levers;
mod nccl;
mod nvml;
mod nvtx;
mod pm_sampling;
mod pool;
mod sampler;
mod say;
mod session;

/// Internals exposed for the agent's benchmarks and tests only; not an API.
#[doc(hidden)]
pub mod internals {
    pub use crate::decode::{kind, Decoder};
    pub use crate::nccl::link::Linker;
    pub use crate::nccl::ty as nccl_ty;
    pub use crate::nccl::{table_bytes as nccl_table_bytes, Descr, Nccl, Rec, RecKind};
    pub use crate::pool::Pool;
}
