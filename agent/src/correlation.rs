//! External correlation ids: the NCCL plugin pushes one around each kernel
//! launch it brackets, so that CUPTI ties the launch's CUDA calls to its
//! collective (see `nccl/link.rs`).
//!
//! The session connects its CUPTI handle and its on/off switch here once it
//! captures; the plugin only calls [`push`] and [`pop`], so it never depends
//! on the session. Nothing here allocates, locks or makes a system call.

use crate::cupti::Cupti;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::OnceLock;

/// Where the ids go: the session's CUPTI and its switch (EXTERNAL_CORRELATION
/// records are on).
struct Target {
    api: &'static Cupti,
    on: &'static AtomicBool,
}

static TARGET: OnceLock<Target> = OnceLock::new();

/// Set in a forked child by the `pthread_atfork` handler the session
/// registers. The launch path tests this instead of comparing pids: `getpid`
/// is a system call on every use (glibc no longer caches it).
static IN_FORKED_CHILD: AtomicBool = AtomicBool::new(false);

/// `pthread_atfork` child handler: one atomic store (async-signal-safe).
pub extern "C" fn after_fork_child() {
    IN_FORKED_CHILD.store(true, Relaxed);
}

/// Send pushed ids to `api` while `on` is set (called once, by the session
/// that captures with CUPTI; later calls change nothing).
pub fn connect(api: &'static Cupti, on: &'static AtomicBool) {
    let _ = TARGET.set(Target { api, on });
}

/// Push an external correlation id for the NCCL plugin's kernel-launch
/// bracket; false when there is no CUPTI session or it cannot.
pub fn push(id: u64) -> bool {
    match TARGET.get() {
        Some(t) if t.on.load(Relaxed) && !IN_FORKED_CHILD.load(Relaxed) => t.api.push_external(id),
        _ => false,
    }
}

/// Pop what [`push`] pushed (only called when it returned true).
pub fn pop() {
    if let Some(t) = TARGET.get() {
        t.api.pop_external();
    }
}
