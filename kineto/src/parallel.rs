//! Parsing `traceEvents` on several threads (two on a two-core machine).
//!
//! The importer buffers a window of the array ([`window_size`]) and cuts
//! it into parts at guessed element starts (a `{` after `},`): a first,
//! smaller part for this thread, which also reads (inflates) the next
//! window meanwhile ([`mine_percent`]: two fifths with one worker), then
//! one equal part per worker thread ([`workers`]).
//! The guesses are checked, not trusted: a worker's results are used only
//! if the part before it (this thread's own parse, element by element, then
//! each worker's accepted in turn) ended exactly at its guessed start.
//! Otherwise they are dropped, with every later worker's, and the rest is
//! parsed again here, in order. So the result is the one a serial parse
//! gives, including string ids (each worker's strings are interned in the
//! order it met them, workers in order) and which entry dates each loss
//! bucket.
//!
//! Anything unusual ends a run early and leaves the rest to the serial
//! loop, which reports it precisely: an element that is not an object, a
//! syntax error, an element cut by the end of the window, the end of the
//! array.
//!
//! Keeping both cores busy ([`Windows`]): the workers are started once
//! and kept for the whole array (a thread started per window was often run
//! on the core of the thread that started it, the two taking turns). Their
//! events are handed to the sink by this thread, in order, in the next
//! window, before this thread parses its share of it, while the next
//! window's parts are parsed (not between windows, while the workers would
//! wait). And this thread's share follows the rates measured so far (its
//! parse, the workers', and its time reading and handing over), so that
//! all finish together ([`Balance`]). Neither changes the result: where
//! the parts are cut never does.

use crate::event::{parse_prefix, skip_ws, ParseError, RawEvent};
use crate::held::{Held, Sink};
use crate::map::{Mapper, Tally};
use crate::scan::{Here, Scanner};
use crate::{map_element, Fail};
use std::io::Read;

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

/// This thread's share of a window, in percent, with `workers` workers:
/// it also reads (inflates) the next window, which takes about a fifth of
/// the time parsing a window takes, so with `f = 1/5` both finish together
/// when its share `m` satisfies `f + m = (1 - m) / workers`. Two fifths
/// with one worker (measured best on two cores), a tenth with three, and
/// never below a twentieth.
fn mine_percent(workers: usize) -> usize {
    let k = workers as f64;
    let m = (1.0 - 0.2 * k) / (k + 1.0);
    ((m * 100.0).round() as usize).max(5)
}

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

/// What the windows so far measured, summed, to size this thread's share
/// of the next ([`Balance::share`]): times in ns, sizes in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Balance {
    /// This thread's shares: bytes and the time their parse took.
    mine_bytes: f64,
    mine_ns: f64,
    /// The workers' parts: bytes and time, summed over the workers.
    theirs_bytes: f64,
    theirs_ns: f64,
    /// This thread's other work (handing the window before's events to
    /// the sink, reading the next window), and the windows measured.
    other_ns: f64,
    windows: u32,
}

impl Balance {
    /// Fewest and most of a window this thread takes, in thousandths.
    const MIN: usize = 20;
    const MAX: usize = 800;

    /// This thread's share, in thousandths of a window of `len` bytes,
    /// with `workers` workers: the share `m` for which this thread (its
    /// other work, then `m * len` at its rate) and each worker (an equal
    /// part of the rest at theirs) finish together, at the rates measured
    /// so far. Clamped to [`Self::MIN`]..=[`Self::MAX`]; [`mine_percent`]
    /// until a window was measured.
    pub(crate) fn share(&self, len: usize, workers: usize) -> usize {
        let fallback = mine_percent(workers) * 10;
        if self.windows == 0 || self.mine_bytes <= 0.0 || self.theirs_bytes <= 0.0 {
            return fallback;
        }
        let mine = len as f64 * self.mine_ns / self.mine_bytes;
        let theirs = len as f64 * self.theirs_ns / self.theirs_bytes / workers.max(1) as f64;
        // m * mine + other = (1 - m) * theirs
        let share = (theirs - self.other_ns / f64::from(self.windows)) / (mine + theirs);
        if !share.is_finite() {
            return fallback;
        }
        ((share * 1000.0).round().max(0.0) as usize).clamp(Self::MIN, Self::MAX)
    }

    /// Add one window's measurements.
    fn add(&mut self, w: Balance) {
        self.mine_bytes += w.mine_bytes;
        self.mine_ns += w.mine_ns;
        self.theirs_bytes += w.theirs_bytes;
        self.theirs_ns += w.theirs_ns;
        self.other_ns += w.other_ns;
        self.windows += 1;
    }
}

/// A window's bytes, lent to a worker thread: see [`Windows::window`] for
/// why the worker never reads them after the window.
#[derive(Clone, Copy)]
struct Lent {
    ptr: *const u8,
    len: usize,
}

// Safety: the bytes are only read, and only while the lending thread waits
// for the worker's answer (see `Windows::window`).
unsafe impl Send for Lent {}

/// One worker's part of a window.
struct Job {
    buf: Lent,
    base: u64,
    from: usize,
    to: usize,
    here: Here,
    held: Held,
}

/// A worker's answer: the run (`None` if it panicked), and its scratch back.
struct Done {
    run: Option<Result<Run, Fail>>,
    held: Held,
    tally: Tally,
    took: std::time::Duration,
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
    fn start(mapper: Mapper) -> Option<Worker> {
        let (jobs, job_rx) = std::sync::mpsc::channel::<Job>();
        let (done_tx, done) = std::sync::mpsc::channel::<Done>();
        let thread = std::thread::Builder::new()
            .name("gputrace-parse".into())
            .spawn(move || {
                for mut job in job_rx {
                    let began = std::time::Instant::now();
                    let mut tally = Tally::default();
                    // Safety: see `Windows::window`: the bytes stay valid
                    // and unchanged until the answer is received.
                    let buf = unsafe { std::slice::from_raw_parts(job.buf.ptr, job.buf.len) };
                    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        run(buf, job.base, job.from, job.to, &mapper, &mut job.held, &mut tally, job.here)
                    }))
                    .ok();
                    let done = Done {
                        run,
                        held: job.held,
                        tally,
                        took: began.elapsed(),
                    };
                    if done_tx.send(done).is_err() {
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

/// The jobs of one window: lends its bytes to the workers and, when
/// dropped, waits for every answer still due, so that no worker reads the
/// bytes after they are released, whatever way the window ends. It
/// borrows the bytes for as long as it lives, so they cannot be released
/// (the scanner given back) before.
struct Answers<'w, 'b> {
    workers: &'w [Worker],
    /// Jobs sent (to `workers[..sent]`) and answers taken, in order.
    sent: usize,
    taken: usize,
    bytes: &'b [u8],
}

impl<'w, 'b> Answers<'w, 'b> {
    fn new(workers: &'w [Worker], bytes: &'b [u8]) -> Self {
        Answers {
            workers,
            sent: 0,
            taken: 0,
            bytes,
        }
    }

    /// Send the next worker its part of the bytes; `false` if it is gone.
    fn send(&mut self, base: u64, from: usize, to: usize, here: Here, held: Held) -> bool {
        let Some(w) = self.workers.get(self.sent) else { return false };
        let buf = Lent {
            ptr: self.bytes.as_ptr(),
            len: self.bytes.len(),
        };
        let job = Job {
            buf,
            base,
            from,
            to,
            here,
            held,
        };
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

impl Drop for Answers<'_, '_> {
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
    balance: Balance,
    /// The next window's size (0 before the first; see [`first_window`]).
    next_size: usize,
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
    /// nothing changed. The last window's workers' events go to the sink
    /// first; this window's accepted workers' events are kept, for the
    /// next window or [`Self::flush`]. `workers` (at least one, see
    /// [`workers`]) is how many parse beside this thread.
    pub(crate) fn window<R: Read, S: Sink>(
        &mut self,
        sc: &mut Scanner<R>,
        mapper: &Mapper,
        sink: &mut S,
        tally: &mut Tally,
        workers: usize,
    ) -> Result<u64, Fail> {
        while self.workers.len() < workers {
            match Worker::start(*mapper) {
                Some(w) => self.workers.push(w),
                None => break,
            }
        }
        let full = window_size(sc.size_hint(), self.workers.len().max(1));
        let window = match self.next_size {
            0 => first_window(full),
            n => n.min(full),
        };
        let next_window = (window * 2).min(full);
        sc.fill_to(window)?;
        let here = sc.here();
        let (buf, pos, base, mut refill) = sc.lend();
        // The scanner stops after a comma or a '[': the element follows whitespace.
        let pos = skip_ws(buf, pos);
        let len = buf.len() - pos;
        // This thread also hands over the last window's events and reads
        // (inflates) the next window meanwhile: it parses the share that
        // `Balance` gives, then each worker an equal part of the rest,
        // from a guessed element start.
        let n = self.workers.len();
        let my_share = len * self.balance.share(len, n) / 1000;
        let mut splits: Vec<usize> = Vec::with_capacity(n);
        if len >= window / 2 {
            for j in 0..n {
                let target = pos + my_share + j * (len - my_share) / n;
                let from = splits.last().map_or(target, |&s| target.max(s + 1));
                match guess_element_start(buf, from) {
                    Some(s) => splits.push(s),
                    None => break,
                }
            }
        }
        if splits.is_empty() {
            let error = refill.into_error();
            // Nothing consumed (consuming never moves back).
            sc.give_back(0, error);
            self.flush(sink)?;
            return Ok(0);
        }
        let k = splits.len();
        // Safety of lending `buf`: `answers` borrows it for as long as it
        // lives, and waits (when dropped, at the latest) for every answer
        // due; a worker reads the bytes only between taking a job and
        // answering it (or dying, which closes its channel). So no worker
        // reads them once this function has released them.
        let mut answers = Answers::new(&self.workers[..k], buf);
        for j in 0..k {
            // Each worker stops where the next one starts; the last at
            // the window's end.
            let to = splits.get(j + 1).copied().unwrap_or(usize::MAX);
            let mut held = self.spare.pop().unwrap_or_default();
            held.clear();
            if !answers.send(base, splits[j], to, here, held) {
                break;
            }
        }
        let began = std::time::Instant::now();
        let drained = hand_over(&mut self.pending, &mut self.spare, sink);
        refill.fill(next_window);
        let other = began.elapsed();
        // Nothing of this window goes to the sink before the last one's events.
        let mine = drained.and_then(|()| run(buf, base, pos, splits[0], mapper, sink, tally, here));
        let mine_ns = began.elapsed() - other;
        let mut theirs: Vec<Option<Done>> = (0..answers.sent).map(|_| answers.next()).collect();
        drop(answers);
        theirs.resize_with(k, || None);
        let error = refill.into_error();
        let mine = match mine {
            Ok(mine) => mine,
            Err(f) => {
                // The import stops here (or starts again from the file).
                self.spare.extend(theirs.into_iter().flatten().map(|d| d.held));
                return Err(f);
            }
        };
        let mut measured = Balance {
            mine_bytes: (mine.next - pos) as f64,
            mine_ns: mine_ns.as_nanos() as f64,
            other_ns: other.as_nanos() as f64,
            ..Balance::default()
        };
        let mut parsed = mine.parsed;
        let mut next = mine.next;
        // A worker's part is used only if the part before it (this
        // thread's, then each accepted worker's) ended exactly where it
        // started.
        let mut landed = mine.stop == Stop::Landed;
        for (j, done) in theirs.into_iter().enumerate() {
            let Some(done) = done else {
                landed = false;
                continue;
            };
            match done.run {
                Some(Ok(run)) if landed && run.parsed > 0 => {
                    tally.absorb(done.tally);
                    measured.theirs_bytes += (run.next - splits[j]) as f64;
                    measured.theirs_ns += done.took.as_nanos() as f64;
                    parsed += run.parsed;
                    next = run.next;
                    landed = run.stop == Stop::Landed;
                    self.pending.push(done.held);
                }
                _ => {
                    landed = false;
                    self.spare.push(done.held);
                }
            }
        }
        // Rates from a window cut short (a part not sent or not accepted)
        // mislead, and so does the time reading ahead a larger window.
        let all = self.pending.len() == k;
        if all && next_window == window {
            self.balance.add(measured);
        }
        self.next_size = next_window;
        sc.give_back(if parsed > 0 { next } else { 0 }, error);
        if !all {
            // The rest is parsed serially, after these.
            self.flush(sink)?;
        }
        Ok(parsed)
    }
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

    #[test]
    fn shares_and_windows_follow_the_workers() {
        // This thread's share: two fifths with one worker (the two-core
        // case), less with more, never below a twentieth.
        assert_eq!([1, 2, 3, 7].map(mine_percent), [40, 20, 10, 5]);
        assert_eq!([2, 8, 100].map(workers), [1, 7, MAX_WORKERS]);
        let big = 1 << 30;
        assert_eq!([1, 3, 7].map(|k| window_size(big, k) >> 20), [1, 2, 4]);
        assert_eq!(window_size(10 << 20, 1) >> 10, 640, "small inputs, small windows");
        assert_eq!(window_size(1 << 20, 1) >> 10, 512);
        assert_eq!(first_window(window_size(big, 1)) >> 10, 128);
    }

    #[test]
    fn the_share_lets_every_thread_finish_together() {
        let mut b = Balance::default();
        assert_eq!(b.share(1 << 20, 1), 400, "the static share until a window is measured");
        // Equal rates, nothing else to do: half with one worker, a quarter with three.
        let even = Balance {
            mine_bytes: 1000.0,
            mine_ns: 2000.0,
            theirs_bytes: 1000.0,
            theirs_ns: 2000.0,
            ..Balance::default()
        };
        b.add(even);
        assert_eq!(b.share(1 << 20, 1), 500);
        assert_eq!(b.share(1 << 20, 3), 250);
        // Other work worth a fifth of the window's parse on one thread:
        // m * 2L + 0.4L = (1 - m) * 2L, so m = 0.4.
        let mut busy = Balance::default();
        busy.add(Balance {
            other_ns: 0.2 * 1000.0 * 2.0,
            ..even
        });
        assert_eq!(busy.share(1000, 1), 400);
        // Rates are summed over the windows: a second, slower window for
        // this thread moves the share the way of the workers.
        busy.add(Balance { mine_ns: 4000.0, ..even });
        assert!(busy.share(1000, 1) < 400);
        // Never all, never nothing.
        let mut lopsided = Balance::default();
        lopsided.add(Balance { other_ns: 1e12, ..even });
        assert_eq!(lopsided.share(1000, 1), Balance::MIN);
        let mut fast = Balance::default();
        fast.add(Balance { mine_ns: 1.0, ..even });
        assert_eq!(fast.share(1000, 1), Balance::MAX);
    }
}
