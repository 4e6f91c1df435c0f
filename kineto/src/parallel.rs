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

use crate::event::{parse_prefix, skip_ws, ParseError, RawEvent};
use crate::held::{Held, Sink};
use crate::map::{Mapper, Tally};
use crate::scan::{Here, Scanner};
use crate::{map_element, Fail};
use std::io::Read;

/// Whether an input of about `size_hint` bytes is parsed on several
/// threads: below 16 MiB, one thread (with inflating on another) is as
/// fast on two cores.
pub(crate) fn worth_it(size_hint: u64) -> bool {
    size_hint >= 16 << 20
}

/// Bytes buffered for one window with `workers` workers: an eighth of the
/// input, from 2 to 4 MiB with one worker (the window and the bytes read
/// ahead meanwhile are the memory this costs, so small inputs get small
/// windows), and larger with more workers, so that each still gets about
/// 2 MiB to parse for the threads started per window: 8 MiB with three,
/// 16 MiB with seven.
pub(crate) fn window_size(size_hint: u64, workers: usize) -> usize {
    let scale = (workers as u64 + 1).div_ceil(2).max(1);
    (size_hint / 8).clamp(2 << 20, 4 << 20) as usize * scale as usize
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

/// Try one window at the element that starts at the scanner's next byte.
/// Returns the number of elements parsed; when it is not 0 the scanner is
/// just after the last of them (between elements), else nothing changed.
/// `later` holds the workers' scratch (empty between calls; kept to reuse
/// its memory); `workers` (at least one, see [`workers`]) is how many
/// parse beside this thread.
pub(crate) fn window<R: Read, S: Sink>(
    sc: &mut Scanner<R>,
    mapper: &Mapper,
    sink: &mut S,
    tally: &mut Tally,
    later: &mut Vec<Held>,
    workers: usize,
) -> Result<u64, Fail> {
    let window = window_size(sc.size_hint(), workers);
    sc.fill_to(window)?;
    let here = sc.here();
    let (buf, pos, base, mut refill) = sc.lend();
    // The scanner stops after a comma or a '[': the element follows whitespace.
    let pos = skip_ws(buf, pos);
    let len = buf.len() - pos;
    // This thread also reads (inflates) the next window meanwhile: it
    // parses the smaller share, then each worker an equal part of the rest,
    // from a guessed element start.
    let my_share = len * mine_percent(workers) / 100;
    let mut splits: Vec<usize> = Vec::with_capacity(workers);
    if len >= window / 2 {
        for j in 0..workers {
            let target = pos + my_share + j * (len - my_share) / workers;
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
        return Ok(0);
    }
    let k = splits.len();
    if later.len() < k {
        later.resize_with(k, Held::default);
    }
    let mut tallies: Vec<Tally> = (0..k).map(|_| Tally::default()).collect();
    let (mine, theirs, error) = std::thread::scope(|scope| {
        let splits = &splits;
        let handles: Vec<_> = later[..k]
            .iter_mut()
            .zip(tallies.iter_mut())
            .enumerate()
            .map(|(j, (held, t))| {
                // Each worker stops where the next one starts; the last at
                // the window's end.
                let (from, to) = (splits[j], splits.get(j + 1).copied().unwrap_or(usize::MAX));
                std::thread::Builder::new()
                    .name("gputrace-parse".into())
                    .spawn_scoped(scope, move || run(buf, base, from, to, mapper, held, t, here))
            })
            .collect();
        refill.fill(window);
        let mine = run(buf, base, pos, splits[0], mapper, sink, tally, here);
        // A worker that could not start, failed or panicked is simply not used.
        let theirs: Vec<Option<Run>> = handles
            .into_iter()
            .map(|h| h.ok().and_then(|h| h.join().ok()).and_then(Result::ok))
            .collect();
        (mine, theirs, refill.into_error())
    });
    let mine = match mine {
        Ok(mine) => mine,
        Err(f) => {
            // The import stops here (or starts again from the file).
            later.iter_mut().for_each(Held::clear);
            return Err(f);
        }
    };
    let mut parsed = mine.parsed;
    let mut next = mine.next;
    // A worker's part is used only if the part before it (this thread's,
    // then each accepted worker's) ended exactly where it started.
    let mut landed = mine.stop == Stop::Landed;
    for (j, (theirs, t)) in theirs.into_iter().zip(tallies).enumerate() {
        match theirs {
            Some(theirs) if landed && theirs.parsed > 0 => {
                if let Err(f) = later[j].drain_into(sink) {
                    later.iter_mut().for_each(Held::clear);
                    return Err(f);
                }
                tally.absorb(t);
                parsed += theirs.parsed;
                next = theirs.next;
                landed = theirs.stop == Stop::Landed;
            }
            _ => {
                landed = false;
                later[j].clear();
            }
        }
    }
    sc.give_back(if parsed > 0 { next } else { 0 }, error);
    Ok(parsed)
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
        assert_eq!([1, 3, 7].map(|k| window_size(big, k) >> 20), [4, 8, 16]);
        assert_eq!(window_size(20 << 20, 1) >> 20, 2, "small inputs, small windows");
    }
}
