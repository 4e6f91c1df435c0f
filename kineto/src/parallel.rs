//! Parsing `traceEvents` on several threads (two on a two-core machine).
//!
//! The importer buffers a window of the array ([`window_size`]) and cuts
//! it into equal parts ([`PARTS_PER_THREAD`] per thread), each but the
//! first from a guessed element start (a `{` after `},`). This thread and
//! the workers ([`workers`]) take the parts in turn from a shared counter;
//! this thread first hands the last window's events to the sink and reads
//! (inflates) the next window. Taking parts in turn keeps every thread busy
//! until the window's end, whatever each one's speed, with nothing to
//! estimate (an earlier version gave this thread a share from measured
//! rates, and one thread often waited for the other).
//! The guesses are checked, not trusted: a part's results are used only if
//! every part before it was, and the one just before ended exactly at its
//! guessed start. Otherwise they are dropped, with every later part's,
//! and the rest is parsed again here, in order. So the result is the one a
//! serial parse gives, including string ids (each part's strings are
//! interned in the order it met them, parts in order) and which entry
//! dates each loss bucket.
//!
//! Anything unusual ends a part early and leaves the rest to the serial
//! loop, which reports it precisely: an element that is not an object, a
//! syntax error, an element cut by the end of the window, the end of the
//! array.
//!
//! The workers are started once and kept for the whole array (a thread
//! started per window was often run on the core of the thread that started
//! it, the two taking turns). Their events are handed to the sink by this
//! thread, in order, in the next window while the workers parse it (not
//! between windows, while they would wait). Neither changes the result:
//! where the parts are cut and who parses them never does.

use crate::event::{skip_ws, ParseError, RawEvent};
use crate::held::{Held, Sink};
use crate::map::{Mapper, Tally};
use crate::scan::{Here, Scanner};
use crate::skeleton::parse_prefix;
use crate::{map_element, Fail};
use std::io::Read;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Whether an input of about `size_hint` bytes is parsed on several
/// threads: below 4 MiB, one thread (with inflating on another) is as
/// fast on two cores. (nccl_data, 9.8 MB of JSON: 31-33 ms on two, 36-41
/// ms on one.)
pub(crate) fn worth_it(size_hint: u64) -> bool {
    size_hint >= 4 << 20
}

/// Bytes buffered for one window with `workers` workers: a sixteenth of
/// the input, from 512 KiB to 1 MiB with one worker, and proportionally
/// more with more workers (2 MiB with three, 4 MiB with seven), so that
/// each worker gets 512 KiB to 1 MiB. Small windows are faster: the window
/// and the one read ahead meanwhile stay in the caches (the workers read
/// bytes just inflated by this thread) and take few fresh pages. With 4
/// MiB windows, df_index_resolver's `report` took 0.117-0.122 s; with 1
/// MiB, 0.101-0.104 s (nccl_data: 0.034-0.040 s and 0.027-0.031 s).
pub(crate) fn window_size(size_hint: u64, workers: usize) -> usize {
    let scale = (workers as u64 + 1).div_ceil(2).max(1);
    (size_hint / 16).clamp(512 << 10, 1 << 20) as usize * scale as usize
}

/// The first window, with windows of `full` bytes later: an eighth of
/// them, then each window twice the one before, up to `full`. The first
/// window is read (inflated) before any worker has work, so a small one
/// starts the workers sooner; later ones are read while the workers parse
/// the one before, and one twice as large is read in less time than that
/// takes.
fn first_window(full: usize) -> usize {
    full / 8
}

/// Most parsing threads besides this one.
pub(crate) const MAX_WORKERS: usize = 7;

/// Parsing threads besides this one for `threads` in all (0: one per
/// core, as the machine reports them, at most [`MAX_WORKERS`] + 1); at
/// least one.
pub(crate) fn workers(threads: usize) -> usize {
    let all = match threads {
        0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
        n => n,
    };
    all.saturating_sub(1).clamp(1, MAX_WORKERS)
}

/// Parts a window is cut into per parsing thread (this one included).
/// The threads take the parts in turn from a shared counter, so they end
/// a window within about a part of each other, whatever their speeds and
/// this thread's other work (handing the last window's events over and
/// reading the next window), without estimating any of them.
const PARTS_PER_THREAD: usize = 8;

/// Why a run stopped.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Stop {
    /// The next element starts exactly at the run's `stop_at`.
    Landed,
    /// Anything else (see the module comment), or the run went past `stop_at`.
    Other,
}

/// What a run did.
#[derive(Debug)]
struct Run {
    /// Elements parsed and mapped.
    parsed: u64,
    /// Index just after the last element parsed (where the run started if none).
    next: usize,
    stop: Stop,
}

/// The parts of one window, shared by the threads that parse it.
struct Parts {
    /// The workers' copy of the window's bytes (the scanner's buffer is
    /// refilled and traded while they parse; one copy per window is a
    /// memcpy against a parse of the same bytes). Taken back for the next
    /// window once every worker has answered ([`Windows::copy`]).
    buf: Vec<u8>,
    /// Stream offset of the bytes' first byte.
    base: u64,
    here: Here,
    /// Where each part starts: the first at an element start, the others
    /// at guessed ones. A part ends where the next starts, the last at the
    /// end of the bytes.
    starts: Vec<usize>,
    /// The next part to take (past the last: none left).
    next: AtomicUsize,
}

impl Parts {
    /// Take parts until none is left, parsing each into scratch from
    /// `spare`, and add them to `out`. `buf` holds the window's bytes
    /// (the scanner's, or the same in [`Self::buf`]).
    fn take(&self, buf: &[u8], mapper: &Mapper, spare: &mut Vec<Held>, out: &mut Vec<Part>) {
        loop {
            let index = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(&from) = self.starts.get(index) else { return };
            let to = self.starts.get(index + 1).copied().unwrap_or(usize::MAX);
            let mut held = spare.pop().unwrap_or_default();
            held.clear();
            let mut tally = Tally::default();
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run(buf, self.base, from, to, mapper, &mut held, &mut tally, self.here)
            }))
            .ok();
            out.push(Part { index, run, held, tally });
        }
    }

    /// Leave no part for anyone to take.
    fn close(&self) {
        self.next.store(self.starts.len(), Ordering::Relaxed);
    }
}

/// One part, parsed: its run (`None` if the parse panicked), its events
/// and strings, and its tally.
struct Part {
    index: usize,
    run: Option<Result<Run, Fail>>,
    held: Held,
    tally: Tally,
}

/// A worker's job: take parts of a window, with scratch to parse them into.
struct Job {
    parts: Arc<Parts>,
    spare: Vec<Held>,
}

/// A worker's answer: the parts it parsed, and the scratch it did not use.
struct Done {
    parts: Vec<Part>,
    spare: Vec<Held>,
}

/// A parse thread kept for the whole array, so that the scheduler places
/// it once (a thread started per window was often run on the core of the
/// thread that started it, the two taking turns).
struct Worker {
    /// `None` once closing (which ends the thread).
    jobs: Option<std::sync::mpsc::Sender<Job>>,
    done: std::sync::mpsc::Receiver<Done>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Worker {
    /// Start a worker that runs on any allowed CPU but `avoid` (where this
    /// thread runs), when there is another.
    fn start(mapper: Mapper, avoid: Option<usize>) -> Option<Worker> {
        let (jobs, job_rx) = std::sync::mpsc::channel::<Job>();
        let (done_tx, done) = std::sync::mpsc::channel::<Done>();
        let thread = std::thread::Builder::new()
            .name("gputrace-parse".into())
            .spawn(move || {
                if let Some(cpu) = avoid {
                    keep_off(cpu);
                }
                for Job { parts: shared, mut spare } in job_rx {
                    let mut parts = Vec::new();
                    shared.take(&shared.buf, &mapper, &mut spare, &mut parts);
                    // Released before answering, so that the window's copy
                    // is the lending thread's alone once it has every answer.
                    drop(shared);
                    if done_tx.send(Done { parts, spare }).is_err() {
                        return;
                    }
                }
            })
            .ok()?;
        Some(Worker {
            jobs: Some(jobs),
            done,
            thread: Some(thread),
        })
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Closing the job channel ends the thread.
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The jobs of one window: when dropped, waits for every answer still
/// due, so that whatever way the window ends (an error, a panic in this
/// thread) no answer of it is left to be taken for the next window.
struct Answers<'w> {
    workers: &'w [Worker],
    /// Jobs sent (to `workers[..sent]`) and answers taken, in order.
    sent: usize,
    taken: usize,
}

impl<'w> Answers<'w> {
    fn new(workers: &'w [Worker]) -> Self {
        Answers {
            workers,
            sent: 0,
            taken: 0,
        }
    }

    /// Send the next worker its job; `false` if it is gone.
    fn send(&mut self, job: Job) -> bool {
        let Some(w) = self.workers.get(self.sent) else { return false };
        let sent = w.jobs.as_ref().is_some_and(|j| j.send(job).is_ok());
        self.sent += usize::from(sent);
        sent
    }

    /// The next answer, in order (`None` if the worker is gone, or none is due).
    fn next(&mut self) -> Option<Done> {
        if self.taken >= self.sent {
            return None;
        }
        self.taken += 1;
        self.workers[self.taken - 1].done.recv().ok()
    }
}

impl Drop for Answers<'_> {
    fn drop(&mut self) {
        while self.taken < self.sent {
            let _ = self.next();
        }
    }
}

/// Parsing threads, their scratch, and the state kept from window to
/// window.
///
/// Invariant: `pending` holds the accepted parts of the last window, in
/// order, not yet handed to the sink; `spare` holds scratch to reuse
/// (cleared when taken).
#[derive(Default)]
pub(crate) struct Windows {
    workers: Vec<Worker>,
    pending: Vec<Held>,
    spare: Vec<Held>,
    /// The parts of the window, parsed (reused).
    parsed: Vec<Part>,
    /// The next window's size (0 before the first; see [`first_window`]).
    next_size: usize,
    /// The buffer of the last window's copy ([`Parts::buf`]), reused.
    copy: Vec<u8>,
}

impl Windows {
    /// Hand the last window's accepted parts to `sink`, if not done yet.
    /// Called before anything else goes to the sink and at the end.
    pub(crate) fn flush<S: Sink>(&mut self, sink: &mut S) -> Result<(), Fail> {
        hand_over(&mut self.pending, &mut self.spare, sink)
    }

    /// Try one window at the element that starts at the scanner's next
    /// byte. Returns the number of elements parsed; when it is not 0 the
    /// scanner is just after the last of them (between elements), else
    /// nothing changed. The last window's events go to the sink first;
    /// this window's accepted parts are kept, for the next window or
    /// [`Self::flush`]. `workers` (at least one, see [`workers`]) is how
    /// many parse beside this thread.
    pub(crate) fn window<R: Read, S: Sink>(
        &mut self,
        sc: &mut Scanner<R>,
        mapper: &Mapper,
        sink: &mut S,
        tally: &mut Tally,
        workers: usize,
    ) -> Result<u64, Fail> {
        let avoid = if self.workers.len() < workers { current_cpu() } else { None };
        while self.workers.len() < workers {
            match Worker::start(*mapper, avoid) {
                Some(w) => self.workers.push(w),
                None => break,
            }
        }
        let n = self.workers.len();
        let full = window_size(sc.size_hint(), n.max(1));
        let window = match self.next_size {
            0 => first_window(full),
            size => size.min(full),
        };
        let next_window = (window * 2).min(full);
        sc.fill_to(window)?;
        let here = sc.here();
        let (buf, pos, base, mut refill) = sc.lend();
        // The scanner stops after a comma or a '[': the element follows whitespace.
        let pos = skip_ws(buf, pos);
        let len = buf.len() - pos;
        // Equal parts, each from a guessed element start but the first.
        let count = (n + 1) * PARTS_PER_THREAD;
        let mut starts = Vec::with_capacity(count);
        starts.push(pos);
        if len >= window / 2 {
            for j in 1..count {
                let from = (pos + j * len / count).max(starts[starts.len() - 1] + 1);
                match guess_element_start(buf, from) {
                    Some(s) => starts.push(s),
                    None => break,
                }
            }
        }
        if starts.len() < 2 {
            let error = refill.into_error();
            // Nothing consumed (consuming never moves back).
            sc.give_back(0, error);
            self.flush(sink)?;
            return Ok(0);
        }
        let count = starts.len();
        let mut answers = Answers::new(&self.workers);
        let mut copy = std::mem::take(&mut self.copy);
        copy.clear();
        copy.extend_from_slice(buf);
        let parts = Arc::new(Parts {
            buf: copy,
            base,
            here,
            starts,
            next: AtomicUsize::new(0),
        });
        for j in 0..n {
            // Each thread gets an equal share of the scratch.
            let give = self.spare.len() / (n + 1 - j);
            let spare = self.spare.split_off(self.spare.len() - give);
            if !answers.send(Job {
                parts: Arc::clone(&parts),
                spare,
            }) {
                break;
            }
        }
        // While the workers start on the parts: the last window's events
        // to the sink (nothing of this window goes there before them), and
        // the next window read ahead. Then this thread takes parts too.
        let drained = hand_over(&mut self.pending, &mut self.spare, sink);
        refill.fill(next_window);
        let mut parsed = std::mem::take(&mut self.parsed);
        parsed.clear();
        match drained {
            Ok(()) => parts.take(buf, mapper, &mut self.spare, &mut parsed),
            Err(_) => parts.close(),
        }
        while let Some(done) = answers.next() {
            parsed.extend(done.parts);
            self.spare.extend(done.spare);
        }
        drop(answers);
        if let Ok(done) = Arc::try_unwrap(parts) {
            self.copy = done.buf;
        }
        let error = refill.into_error();
        if let Err(f) = drained {
            // The import stops here (or starts again from the file).
            self.spare.extend(parsed.drain(..).map(|p| p.held));
            self.parsed = parsed;
            return Err(f);
        }
        // A part is used only if every part before it was, and the one
        // just before ended exactly where it starts (the first starts at
        // an element). The rest is parsed again serially, in order.
        parsed.sort_unstable_by_key(|p| p.index);
        let (mut elements, mut next, mut landed, mut accepted) = (0, pos, true, 0);
        for part in parsed.drain(..) {
            match part.run {
                Some(Ok(run)) if landed && part.index == accepted && run.parsed > 0 => {
                    tally.absorb(part.tally);
                    elements += run.parsed;
                    next = run.next;
                    landed = run.stop == Stop::Landed;
                    accepted += 1;
                    self.pending.push(part.held);
                }
                _ => {
                    landed = false;
                    self.spare.push(part.held);
                }
            }
        }
        self.parsed = parsed;
        self.next_size = next_window;
        sc.give_back(if elements > 0 { next } else { 0 }, error);
        if accepted < count {
            // The rest is parsed serially, after these.
            self.flush(sink)?;
        }
        Ok(elements)
    }
}

/// The CPU this thread runs on, if known.
fn current_cpu() -> Option<usize> {
    #[cfg(target_os = "linux")]
    {
        // Safety: no arguments; returns -1 on failure.
        let cpu = unsafe { libc::sched_getcpu() };
        usize::try_from(cpu).ok()
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// Keep this thread off `cpu`, if it is allowed another CPU; otherwise
/// (or if the calls fail) leave it as it is.
///
/// Why: the scheduler places a thread woken by another on the waker's CPU
/// when it judges that CPU about to be free, and a worker is woken by the
/// thread that hands it work and goes on working. Scheduler traces of
/// `report` runs started from Python showed the two threads on one CPU,
/// taking turns, for the first 15 ms of a 40 ms run on nccl_data, and this
/// thread preempted by the worker 25 times in six runs on
/// df_index_resolver. Only the worker is kept off; this thread's placement
/// is the caller's.
fn keep_off(cpu: usize) {
    #[cfg(target_os = "linux")]
    {
        // Safety: `set` is a plain bit mask owned here; the calls read or
        // write only it, for the calling thread (pid 0).
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            let size = std::mem::size_of::<libc::cpu_set_t>();
            if libc::sched_getaffinity(0, size, &mut set) != 0 || cpu >= libc::CPU_SETSIZE as usize {
                return;
            }
            libc::CPU_CLR(cpu, &mut set);
            if libc::CPU_COUNT(&set) > 0 {
                libc::sched_setaffinity(0, size, &set);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = cpu;
}

/// Hand `pending` to `sink` in order, and keep its scratch in `spare`.
fn hand_over<S: Sink>(pending: &mut Vec<Held>, spare: &mut Vec<Held>, sink: &mut S) -> Result<(), Fail> {
    let result = pending.iter_mut().try_for_each(|h| h.drain_into(sink));
    spare.append(pending);
    result
}

/// Parse and map the elements of `buf` from index `at` (an element start),
/// until the next one would start at or after `stop_at`, or something
/// unusual comes up. `base` is the stream offset of `buf[0]`.
#[allow(clippy::too_many_arguments)]
fn run<S: Sink>(
    buf: &[u8],
    base: u64,
    mut at: usize,
    stop_at: usize,
    mapper: &Mapper,
    sink: &mut S,
    tally: &mut Tally,
    here: Here,
) -> Result<Run, Fail> {
    let mut parsed = 0;
    let mut next = at;
    let other = |parsed, next| {
        Ok(Run {
            parsed,
            next,
            stop: Stop::Other,
        })
    };
    loop {
        if buf.get(at) != Some(&b'{') {
            return other(parsed, next);
        }
        let mut ev = RawEvent::default();
        let (result, used) = parse_prefix(&buf[at..], &mut ev);
        if matches!(result, Err(ParseError::Syntax { .. } | ParseError::Truncated)) {
            return other(parsed, next);
        }
        map_element(mapper, result.map(|()| &ev), base + at as u64, here, sink, tally, false)?;
        parsed += 1;
        next = at + used;
        let comma = skip_ws(buf, next);
        if buf.get(comma) != Some(&b',') {
            return other(parsed, next);
        }
        at = skip_ws(buf, comma + 1);
        if at == stop_at {
            return Ok(Run {
                parsed,
                next,
                stop: Stop::Landed,
            });
        }
        if at > stop_at {
            return other(parsed, next);
        }
    }
}

/// A likely element start at or after `from`: a `{` that follows `}` and
/// `,` and is followed by a member name (whitespace allowed between).
fn guess_element_start(buf: &[u8], from: usize) -> Option<usize> {
    let is_ws = |c: &u8| matches!(c, b' ' | b'\n' | b'\r' | b'\t');
    let mut i = from;
    // Give up after a while: the serial parse is never wrong.
    for _ in 0..10_000 {
        let k = i + memchr::memchr(b'{', buf.get(i..)?)?;
        i = k + 1;
        let Some(comma) = buf[..k].iter().rposition(|c| !is_ws(c)) else {
            continue;
        };
        if buf[comma] != b',' {
            continue;
        }
        let Some(close) = buf[..comma].iter().rposition(|c| !is_ws(c)) else {
            continue;
        };
        if buf[close] == b'}' && buf.get(skip_ws(buf, k + 1)) == Some(&b'"') {
            return Some(k);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guesses_need_a_closing_brace_and_comma_before_and_a_name_after() {
        let text = br#"[{"a": "},{x"}, {"b": [{}, 1]},
  {"ph": "X"}]"#;
        let at = guess_element_start(text, 1).unwrap();
        assert_eq!(&text[at..at + 6], br#"{"b": "#);
        let after = guess_element_start(text, at + 1).unwrap();
        assert_eq!(&text[after..after + 6], br#"{"ph":"#);
        assert_eq!(guess_element_start(text, after + 1), None);
    }

    /// The CPUs this thread may run on.
    #[cfg(target_os = "linux")]
    fn allowed() -> Vec<usize> {
        // Safety: as in `keep_off`.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set), 0);
            (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
        }
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn a_worker_keeps_off_the_cpu_it_is_told_to_unless_it_is_the_only_one() {
        let before = allowed();
        let cpu = current_cpu().expect("sched_getcpu works on Linux");
        assert!(before.contains(&cpu));
        let after = std::thread::spawn(move || {
            keep_off(cpu);
            allowed()
        })
        .join()
        .unwrap();
        if before.len() > 1 {
            let want: Vec<usize> = before.iter().copied().filter(|&c| c != cpu).collect();
            assert_eq!(after, want);
        } else {
            assert_eq!(after, before, "the only CPU allowed is kept");
        }
        // A CPU past the set's size changes nothing.
        let same = std::thread::spawn(|| {
            keep_off(usize::MAX);
            allowed()
        })
        .join()
        .unwrap();
        assert_eq!(same, before);
        // This thread's own CPUs are untouched.
        assert_eq!(allowed(), before);
    }

    #[test]
    fn windows_follow_the_workers() {
        assert_eq!([2, 8, 100].map(workers), [1, 7, MAX_WORKERS]);
        let big = 1 << 30;
        assert_eq!([1, 3, 7].map(|k| window_size(big, k) >> 20), [1, 2, 4]);
        assert_eq!(window_size(10 << 20, 1) >> 10, 640, "small inputs, small windows");
        assert_eq!(window_size(1 << 20, 1) >> 10, 512);
        assert_eq!(first_window(window_size(big, 1)) >> 10, 128);
    }

    /// Dropping [`Answers`] waits for every answer still due: a window
    /// that ends early (an error, a panic in this thread) must not leave
    /// an answer of its own to be taken as the next window's. Drop the
    /// answers without taking any, then check that no answer arrives
    /// afterwards (each was consumed by the drop).
    #[test]
    fn dropping_the_answers_waits_for_every_worker_still_reading() {
        let mapper = || Mapper { base_ns: 0, rank: None };
        let workers: Vec<Worker> = (0..3).filter_map(|_| Worker::start(mapper(), None)).collect();
        assert_eq!(workers.len(), 3);
        let scanner = Scanner::new(std::io::empty(), None, 0);
        // Many small elements, so that each worker has parsing to do.
        let element = br#"{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0, "args": {}},"#;
        let mut bytes = b"[".to_vec();
        let mut starts = Vec::new();
        for _ in 0..60_000 {
            if bytes.len() > starts.len() * 200_000 {
                starts.push(bytes.len());
            }
            bytes.extend_from_slice(element);
        }
        bytes.pop();
        bytes.push(b']');
        {
            let mut answers = Answers::new(&workers);
            let parts = Arc::new(Parts {
                buf: bytes.clone(),
                base: 0,
                here: scanner.here(),
                starts,
                next: AtomicUsize::new(0),
            });
            for _ in 0..workers.len() {
                assert!(answers.send(Job {
                    parts: Arc::clone(&parts),
                    spare: Vec::new()
                }));
            }
            // Ends here without taking an answer, as a window that fails does.
        }
        drop(bytes);
        for w in &workers {
            assert!(
                w.done.recv_timeout(std::time::Duration::from_millis(300)).is_err(),
                "a worker answered after its window's answers were dropped"
            );
        }
    }
}
