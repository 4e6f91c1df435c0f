//! The life of a sampler thread of the agent's own (NVML counters, CUPTI PM
//! sampling): started once, it loops until the exit path asks it to stop,
//! and the exit path waits for it a bounded time. Nothing here runs on a
//! CUDA, NVTX or NCCL callback path.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A sampler thread's stop request and "has stopped" flag.
///
/// Invariant: `stopped` becomes true once the thread's body has returned or
/// panicked, or when the thread could not be started, and never goes back;
/// a caller that saw it true knows the sampler pushes nothing more.
pub struct SamplerThread {
    stop: AtomicBool,
    stopped: AtomicBool,
    thread: OnceLock<std::thread::Thread>,
}

impl SamplerThread {
    pub const fn new() -> Self {
        SamplerThread {
            stop: AtomicBool::new(false),
            stopped: AtomicBool::new(false),
            thread: OnceLock::new(),
        }
    }

    /// Run `body` on a new thread named `name`. A panic in it is caught
    /// (`on_panic` then runs, to say so); an error is returned, and the
    /// sampler counts as stopped, when no thread could be started.
    pub fn spawn(
        &'static self,
        name: &str,
        body: impl FnOnce() + Send + 'static,
        on_panic: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<()> {
        let spawned = std::thread::Builder::new().name(name.into()).spawn(move || {
            if std::panic::catch_unwind(AssertUnwindSafe(body)).is_err() {
                on_panic();
            }
            self.stopped.store(true, Release);
        });
        match spawned {
            Ok(h) => {
                let _ = self.thread.set(h.thread().clone());
                Ok(())
            }
            Err(e) => {
                self.stopped.store(true, Release);
                Err(e)
            }
        }
    }

    /// Whether the exit path asked the sampler to stop.
    pub fn stop_requested(&self) -> bool {
        self.stop.load(Acquire)
    }

    /// On the sampler's thread: sleep until `deadline`, or less if a stop
    /// is asked for meanwhile.
    pub fn sleep_until(&self, deadline: Instant) {
        while !self.stop_requested() {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            std::thread::park_timeout(deadline - now);
        }
    }

    /// Ask the sampler to stop and wait for it, at most `wait`: true when
    /// it has stopped (it pushes nothing more).
    pub fn stop_and_wait(&self, wait: Duration) -> bool {
        self.stop.store(true, Release);
        if let Some(t) = self.thread.get() {
            t.unpark();
        }
        let until = Instant::now() + wait;
        while !self.stopped.load(Acquire) {
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::sync::atomic::Ordering::Relaxed;

    fn leaked() -> &'static SamplerThread {
        Box::leak(Box::new(SamplerThread::new()))
    }

    #[test]
    fn a_sleeping_sampler_wakes_and_stops_when_asked() {
        let s = leaked();
        let rounds: &'static AtomicU32 = Box::leak(Box::new(AtomicU32::new(0)));
        s.spawn(
            "test-sampler",
            move || {
                while !s.stop_requested() {
                    rounds.fetch_add(1, Relaxed);
                    s.sleep_until(Instant::now() + Duration::from_secs(3600));
                }
            },
            || {},
        )
        .unwrap();
        while rounds.load(Relaxed) == 0 {
            std::thread::yield_now();
        }
        // An hour-long sleep is cut short by the request.
        assert!(s.stop_and_wait(Duration::from_secs(60)));
        assert_eq!(rounds.load(Relaxed), 1);
    }

    #[test]
    fn a_panicking_sampler_counts_as_stopped_and_says_so() {
        let s = leaked();
        let said: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        s.spawn("test-sampler", || panic!("sampler bug"), move || said.store(true, Release))
            .unwrap();
        assert!(s.stop_and_wait(Duration::from_secs(60)));
        assert!(said.load(Acquire));
    }

    #[test]
    fn a_sampler_that_ignores_the_request_is_not_waited_for_past_the_limit() {
        let s = leaked();
        s.spawn("test-sampler", || std::thread::sleep(Duration::from_secs(5)), || {})
            .unwrap();
        let t = Instant::now();
        assert!(!s.stop_and_wait(Duration::from_millis(50)));
        assert!(t.elapsed() < Duration::from_secs(5));
    }
}
