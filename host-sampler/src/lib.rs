//! Host samples from outside the job: `gputrace run` is the parent of the
//! job, so it may read its descendants' `/proc` files and, under the usual
//! `ptrace_scope=1`, their memory.
//!
//! A [`Sampler`] thread walks the job's process tree at a fixed rate and
//! records, for every thread of every process, its scheduler state and CPU
//! time (`/proc/<pid>/task/<tid>/{stat,schedstat}`) and, for Python
//! processes, its Python stack (the `py-spy` crate, non-blocking: the job
//! is never paused). Consecutive equal observations of a thread are kept
//! as one run, and the runs held are capped (beyond the cap, samples are
//! counted as lost). After the job ends, [`write::into_traces`] puts each
//! process's samples into its trace, in the trace's clock.
#![deny(missing_docs)]

mod proc;
mod python;
mod record;
mod sampler;
pub mod write;

pub use record::{ProcessRecord, Recording};
pub use sampler::{Sampler, SamplerConfig};

/// `CLOCK_MONOTONIC` now, ns: the clock samples are taken on.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}
