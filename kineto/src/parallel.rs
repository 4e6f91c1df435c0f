//! Parsing `traceEvents` on two threads.
//!
//! The importer buffers a window of the array ([`window_size`]), guesses
//! where an element starts two fifths of the way in (a `{` after `},`),
//! and parses the rest on a worker thread while this thread reads the next
//! window and parses the first part.
//! The guess is checked, not trusted: the worker's results are used only if
//! this thread's own parse, element by element, arrives exactly at the
//! guessed start. Otherwise they are dropped and the second half is parsed
//! again here, in order. So the result is the one a serial parse gives,
//! including string ids (the worker's strings are interned in the order it
//! met them) and which entry dates each loss bucket.
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

/// Whether an input of about `size_hint` bytes is parsed on two threads:
/// below 16 MiB, one thread (with inflating on another) is as fast.
pub(crate) fn worth_it(size_hint: u64) -> bool {
    size_hint >= 16 << 20
}

/// Bytes buffered for one pair of runs: an eighth of the input, from 2 to
/// 4 MiB (the window and the bytes read ahead meanwhile are the memory
/// this costs, so small inputs get small windows).
pub(crate) fn window_size(size_hint: u64) -> usize {
    (size_hint / 8).clamp(2 << 20, 4 << 20) as usize
}

/// This thread's share of a window, in percent.
const MINE_PERCENT: usize = 40;

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
/// `later` is the worker's scratch (empty between calls; kept to reuse its
/// memory).
pub(crate) fn window<R: Read, S: Sink>(
    sc: &mut Scanner<R>,
    mapper: &Mapper,
    sink: &mut S,
    tally: &mut Tally,
    later: &mut Held,
) -> Result<u64, Fail> {
    let window = window_size(sc.size_hint());
    sc.fill_to(window)?;
    let here = sc.here();
    let (buf, pos, base, mut refill) = sc.lend();
    // The scanner stops after a comma or a '[': the element follows whitespace.
    let pos = skip_ws(buf, pos);
    if buf.len() - pos < window / 2 {
        let error = refill.into_error();
        // Nothing consumed (consuming never moves back).
        sc.give_back(0, error);
        return Ok(0);
    }
    // This thread also reads (inflates) the next window meanwhile: it
    // parses the smaller share.
    let Some(split) = guess_element_start(buf, pos + (buf.len() - pos) * MINE_PERCENT / 100) else {
        let error = refill.into_error();
        sc.give_back(0, error);
        return Ok(0);
    };
    let mut later_tally = Tally::default();
    let (later_ref, later_tally_ref) = (&mut *later, &mut later_tally);
    let (mine, theirs, error) = std::thread::scope(|scope| {
        let worker = std::thread::Builder::new()
            .name("gputrace-parse".into())
            .spawn_scoped(scope, move || {
                run(buf, base, split, usize::MAX, mapper, later_ref, later_tally_ref, here)
            });
        refill.fill(window);
        let mine = run(buf, base, pos, split, mapper, sink, tally, here);
        // A worker that could not start, failed or panicked is simply not used.
        let theirs = worker.ok().and_then(|h| h.join().ok()).and_then(Result::ok);
        (mine, theirs, refill.into_error())
    });
    let mine = match mine {
        Ok(mine) => mine,
        Err(f) => {
            // The import stops here (or starts again from the file).
            later.clear();
            return Err(f);
        }
    };
    let mut parsed = mine.parsed;
    let mut next = mine.next;
    match theirs {
        Some(theirs) if mine.stop == Stop::Landed && theirs.parsed > 0 => {
            later.drain_into(sink)?;
            tally.absorb(later_tally);
            parsed += theirs.parsed;
            next = theirs.next;
        }
        _ => later.clear(),
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
}
