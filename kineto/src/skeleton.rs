//! The fast path of [`crate::event::parse_prefix`]: trace events read
//! against the skeletons of events read before.
//!
//! A profiler writes its events from a few templates: the same members in
//! the same order, the same indentation, the same category, only the
//! values differ. So the bytes of an event are, outside its values, those
//! of an earlier event of its kind. Once the parser has read an event, its
//! *skeleton* is kept: the bytes between its values (member names,
//! whitespace, punctuation, and the `ph` and `cat` values), and for each
//! value its kind (string, number or any value) and where it goes in a
//! [`RawEvent`]. The next event is first matched against the skeletons
//! kept (up to [`KEPT`] per thread, the one predicted by the event before
//! first): the bytes between values are compared eight or sixteen at a
//! time, each value is checked by the parser's own code for its kind, and
//! the values are stored where the skeleton says. Member names are not
//! read, nor whitespace passed byte by byte: a trace event is read in
//! about 0.7 of the parser's time (measured in `BENCHMARKS.md`).
//!
//! Why a match reads exactly what the parser reads: the skeleton's event
//! was valid JSON, read without a type problem; a matching event differs
//! from it only inside values, each replaced by a valid value of the same
//! kind. So it is valid JSON too, with the same members in the same order
//! (no duplicates, as there were none), the same category (so its `args`
//! are read or skipped alike), and each value goes where the parser would
//! put it. Anything else (a byte that differs, a value of another kind, an
//! element cut off by the end of the bytes) is not a match, and the
//! parser reads the element as before (and reports what is wrong). A test
//! checks matches against the parser on every element of the shared
//! traces and on every prefix and one-byte change of sample events.

use crate::event::{self, Member, ParseError, Raw, RawArgs, RawEvent, Recorded, Slot, ValueKind};
use std::borrow::Cow;
use std::cell::RefCell;

/// Skeletons kept per thread.
const KEPT: usize = 8;

/// Longest element a skeleton is made from.
const MAX_ELEMENT: usize = 16 << 10;

/// One piece of a skeleton.
#[derive(Debug)]
enum Piece {
    /// Bytes that must be there as they are; some of them are the content
    /// of `ph` or `cat` (offset in `bytes`, length, and which).
    Literal {
        bytes: Box<[u8]>,
        captures: Vec<(usize, usize, Slot)>,
    },
    /// A value of this kind, stored in `slot` (and nested one level
    /// deeper than the event's members when `slot` is [`Slot::Nested`]).
    Value { kind: ValueKind, slot: Slot },
}

/// The shape of one event: see the module comment.
#[derive(Debug)]
struct Skeleton {
    pieces: Vec<Piece>,
    /// The event has an `args` object that is read (not skipped).
    args: bool,
    /// The skeleton the event after the last one matched here matched
    /// (an index in [`Cache::kept`]): tried first next time, as a profiler
    /// often writes its kinds of events in a repeating order.
    next: usize,
    /// When it was last matched (a count of matches), to replace the one
    /// unused longest.
    used: u64,
}

/// Per thread: the skeletons, and the parser's record of the last miss.
#[derive(Default)]
struct Cache {
    kept: Vec<Skeleton>,
    /// The skeleton matched (or made) last.
    last: usize,
    /// Matches and skeletons made so far.
    clock: u64,
    /// Elements that matched no skeleton.
    misses: u64,
    record: Vec<Recorded>,
}

impl Cache {
    /// Match against the skeleton the last one predicts, then the others.
    #[inline]
    fn find<'a>(&mut self, bytes: &'a [u8], ev: &mut RawEvent<'a>) -> Option<usize> {
        let n = self.kept.len();
        let first = self.kept.get(self.last).map_or(0, |s| s.next);
        for t in 0..n {
            let k = if t == 0 {
                first
            } else if t <= first {
                t - 1
            } else {
                t
            };
            let Some(s) = self.kept.get(k) else { continue };
            let m = matches(s, bytes, ev);
            if let Ok(used) = m {
                self.clock += 1;
                self.kept[k].used = self.clock;
                if let Some(last) = self.kept.get_mut(self.last) {
                    last.next = k;
                }
                self.last = k;
                return Some(used);
            }
            if m == Err(Touched::Yes) {
                *ev = RawEvent::default();
            }
        }
        None
    }

    /// Keep `s` (made from the element read last), in place of the one
    /// unused longest if all places are taken.
    fn keep(&mut self, s: Skeleton) {
        let k = if self.kept.len() < KEPT {
            self.kept.push(s);
            self.kept.len() - 1
        } else {
            let k = (0..self.kept.len()).min_by_key(|&k| self.kept[k].used).unwrap_or(0);
            self.kept[k] = s;
            k
        };
        self.clock += 1;
        self.kept[k].used = self.clock;
        self.kept[k].next = k;
        if let Some(last) = self.kept.get_mut(self.last) {
            last.next = k;
        }
        self.last = k;
    }
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache::default());
}

/// [`crate::event::parse_prefix`]: matched against a kept skeleton, or
/// read by the parser (and its skeleton kept).
pub(crate) fn parse_prefix<'a>(bytes: &'a [u8], ev: &mut RawEvent<'a>) -> (Result<(), ParseError>, usize) {
    CACHE.with(|cell| {
        let Ok(mut cache) = cell.try_borrow_mut() else {
            return event::parse_prefix_recording(bytes, ev, None);
        };
        let cache = &mut *cache;
        if let Some(used) = cache.find(bytes, ev) {
            return (Ok(()), used);
        }
        cache.misses += 1;
        cache.record.clear();
        let (result, used) = event::parse_prefix_recording(bytes, ev, Some(&mut cache.record));
        if result.is_ok() && used <= MAX_ELEMENT {
            if let Some(s) = build(&bytes[..used], &cache.record, ev.args.is_some()) {
                cache.keep(s);
            }
        }
        (result, used)
    })
}

/// The skeleton of `element`, read without a problem, whose values the
/// parser recorded in `record`; `None` if it has a value read in a way a
/// skeleton does not repeat.
fn build(element: &[u8], record: &[Recorded], args: bool) -> Option<Skeleton> {
    let mut pieces = Vec::with_capacity(2 * record.len() + 1);
    let mut literal: Vec<u8> = Vec::new();
    let mut captures = Vec::new();
    let mut from = 0;
    for &(at, end, slot) in record {
        literal.extend_from_slice(element.get(from..at)?);
        from = end;
        let value = element.get(at..end)?;
        match slot {
            Slot::Unfit => return None,
            Slot::Field(Member::Ph | Member::Cat) => {
                // Kept as bytes: a plain string (its content captured).
                if value.len() < 2 || value[0] != b'"' || value.contains(&b'\\') {
                    return None;
                }
                captures.push((literal.len() + 1, value.len() - 2, slot));
                literal.extend_from_slice(value);
            }
            _ => {
                let kind = match value.first()? {
                    b'"' => ValueKind::String,
                    b'-' | b'0'..=b'9' => ValueKind::Number,
                    _ => ValueKind::Any,
                };
                if slot == Slot::Field(Member::Name) && kind != ValueKind::String {
                    return None;
                }
                if !literal.is_empty() {
                    pieces.push(Piece::Literal {
                        bytes: std::mem::take(&mut literal).into_boxed_slice(),
                        captures: std::mem::take(&mut captures),
                    });
                }
                pieces.push(Piece::Value { kind, slot });
            }
        }
    }
    literal.extend_from_slice(element.get(from..)?);
    if !literal.is_empty() {
        pieces.push(Piece::Literal {
            bytes: literal.into_boxed_slice(),
            captures,
        });
    }
    Some(Skeleton {
        pieces,
        args,
        next: 0,
        used: 0,
    })
}

/// Whether `a` and `b` (of the same length) are equal: a few word
/// compares, overlapping at the end, without a call or a loop per byte.
#[inline(always)]
fn same(a: &[u8], b: &[u8]) -> bool {
    debug_assert_eq!(a.len(), b.len());
    let n = a.len().min(b.len());
    let w8 = |s: &[u8], i: usize| u64::from_le_bytes(s[i..i + 8].try_into().unwrap_or([0; 8]));
    let w4 = |s: &[u8], i: usize| u32::from_le_bytes(s[i..i + 4].try_into().unwrap_or([0; 4]));
    if n >= 16 {
        let mut i = 0;
        while i + 16 < n {
            if (w8(a, i) ^ w8(b, i)) | (w8(a, i + 8) ^ w8(b, i + 8)) != 0 {
                return false;
            }
            i += 16;
        }
        // The last sixteen bytes (overlapping the ones before).
        (w8(a, n - 16) ^ w8(b, n - 16)) | (w8(a, n - 8) ^ w8(b, n - 8)) == 0
    } else if n >= 8 {
        (w8(a, 0) ^ w8(b, 0)) | (w8(a, n - 8) ^ w8(b, n - 8)) == 0
    } else if n >= 4 {
        (w4(a, 0) ^ w4(b, 0)) | (w4(a, n - 4) ^ w4(b, n - 4)) == 0
    } else {
        a[..n] == b[..n]
    }
}

/// The end of the integer at `at` (`-`, then `0` or digits not starting
/// with `0`) when no fraction or exponent follows; otherwise `None`, for
/// the parser's full check.
#[inline(always)]
fn integer_end(bytes: &[u8], at: usize) -> Option<usize> {
    let j = at + usize::from(bytes.get(at) == Some(&b'-'));
    let end = match bytes.get(j) {
        Some(b'0') => j + 1,
        Some(b'1'..=b'9') => event::digit_run(bytes, j + 1),
        _ => return None,
    };
    (!matches!(bytes.get(end), Some(b'.' | b'e' | b'E'))).then_some(end)
}

/// Whether a failed match changed the event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Touched {
    No,
    Yes,
}

/// Match `bytes` (from an element's `{`) against `s`, filling `ev`
/// (empty); the bytes taken. On failure, whether `ev` was changed.
#[inline]
fn matches<'a>(s: &Skeleton, bytes: &'a [u8], ev: &mut RawEvent<'a>) -> Result<usize, Touched> {
    // Most failures are at the first bytes: nothing is stored before them,
    // and the rest starts after them.
    let (mut i, mut rest) = (0, &s.pieces[..]);
    if let Some((Piece::Literal { bytes: lit, captures }, tail)) = s.pieces.split_first() {
        let Some(here) = bytes.get(..lit.len()).filter(|here| same(here, lit)) else {
            return Err(Touched::No);
        };
        capture(here, captures, ev);
        (i, rest) = (lit.len(), tail);
    }
    fill(s.args, rest, bytes, i, ev).ok_or(Touched::Yes)
}

/// Store the `ph` and `cat` contents that a literal holds: `here`, the
/// input's bytes equal to it.
#[inline(always)]
fn capture<'a>(here: &'a [u8], captures: &[(usize, usize, Slot)], ev: &mut RawEvent<'a>) {
    for &(at, len, slot) in captures {
        // The same bytes as the skeleton's: the content of a string without
        // escapes, which the parser checked, between quotes (ASCII).
        let text = event::value_text(here, at, at + len);
        match slot {
            Slot::Field(Member::Ph) => ev.ph = Some(Cow::Borrowed(text)),
            _ => ev.cat = Some(Cow::Borrowed(text)),
        }
    }
}

/// [`matches`] past its quick check: `pieces` from byte `i` of `bytes`.
#[inline]
fn fill<'a>(args: bool, pieces: &[Piece], bytes: &'a [u8], mut i: usize, ev: &mut RawEvent<'a>) -> Option<usize> {
    if args {
        ev.args = Some(RawArgs::default());
    }
    for piece in pieces {
        match piece {
            Piece::Literal { bytes: lit, captures } => {
                let here = bytes.get(i..i + lit.len())?;
                if !same(here, lit) {
                    return None;
                }
                capture(here, captures, ev);
                i += lit.len();
            }
            &Piece::Value { kind, slot } => {
                let (end, content) = match kind {
                    ValueKind::Number => match integer_end(bytes, i) {
                        Some(end) => (end, None),
                        None => event::value_at(bytes, i, kind, false)?,
                    },
                    _ => event::value_at(bytes, i, kind, slot == Slot::Nested)?,
                };
                // A number or a string is never `null`.
                let raw = || {
                    let text = event::value_text(bytes, i, end);
                    (kind != ValueKind::Any || text != "null").then_some(Raw::from_checked(text))
                };
                match slot {
                    Slot::None | Slot::Nested => {}
                    Slot::Field(Member::Name) => ev.name = content,
                    Slot::Field(Member::Pid) => ev.pid = raw(),
                    Slot::Field(Member::Tid) => ev.tid = raw(),
                    Slot::Field(Member::Ts) => ev.ts = raw(),
                    Slot::Field(Member::Dur) => ev.dur = raw(),
                    Slot::Arg(k) => *ev.args.as_mut()?.slot_at(k)? = raw(),
                    Slot::Field(_) | Slot::Unfit => return None,
                }
                i = end;
            }
        }
    }
    Some(i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// The parser's reading of `bytes`, and the skeleton path's, as text.
    fn both(bytes: &[u8]) -> (String, String) {
        let mut ev = RawEvent::default();
        let (r, used) = event::parse_prefix_recording(bytes, &mut ev, None);
        let slow = format!("{r:?} {used} {ev:?}");
        let mut ev = RawEvent::default();
        let (r, used) = parse_prefix(bytes, &mut ev);
        (slow, format!("{r:?} {used} {ev:?}"))
    }

    /// The elements of `traceEvents` in `text` (their offsets), as the
    /// parser delimits them.
    fn elements(text: &[u8]) -> Vec<usize> {
        let Some(key) = text.windows(13).position(|w| w == b"\"traceEvents\"") else {
            return Vec::new();
        };
        let Some(open) = text[key..].iter().position(|&c| c == b'[') else {
            return Vec::new();
        };
        let mut i = key + open + 1;
        let mut out = Vec::new();
        loop {
            i = event::skip_ws(text, i);
            if text.get(i) != Some(&b'{') {
                return out;
            }
            let mut ev = RawEvent::default();
            let (r, used) = event::parse_prefix_recording(&text[i..], &mut ev, None);
            if matches!(r, Err(ParseError::Syntax { .. } | ParseError::Truncated)) {
                return out;
            }
            out.push(i);
            i = event::skip_ws(text, i + used);
            if text.get(i) != Some(&b',') {
                return out;
            }
            i += 1;
        }
    }

    fn shared_traces(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                shared_traces(&p, out);
            } else if p.to_string_lossy().ends_with(".json.gz") {
                out.push(p);
            }
        }
    }

    #[test]
    fn skeletons_read_every_shared_trace_as_the_parser_does() {
        let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/traces"));
        let mut files = Vec::new();
        shared_traces(root, &mut files);
        if files.is_empty() {
            eprintln!("skipping: no traces under {}", root.display());
            return;
        }
        let mut events = 0;
        let misses = CACHE.with(|c| c.borrow().misses);
        for f in files {
            let mut text = Vec::new();
            flate2::read::GzDecoder::new(std::fs::File::open(&f).unwrap())
                .read_to_end(&mut text)
                .unwrap();
            for at in elements(&text) {
                let (slow, fast) = both(&text[at..]);
                assert_eq!(slow, fast, "{} at byte {at}", f.display());
                events += 1;
            }
        }
        // The fast path is taken: nearly every event matches a skeleton.
        let misses = CACHE.with(|c| c.borrow().misses) - misses;
        assert!(misses * 100 < events, "{misses} of {events} events matched no skeleton");
    }

    /// Events of the shapes Kineto writes, without escapes (which a
    /// skeleton's `ph` and `cat` refuse) and with.
    const SAMPLES: [&[u8]; 4] = [
        b"{\n    \"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"void gemm<128>(float*)\", \"pid\": 0, \"tid\": 7,\n    \"ts\": 1669783687467795, \"dur\": 3,\n    \"args\": {\n      \"device\": 0, \"stream\": 7, \"correlation\": 3212, \"grid\": [2, 1, 1], \"kind\": \"HtoD\", \"x\": null\n    }\n  }",
        b"{\n    \"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mm\", \"pid\": 783658, \"tid\": 785244,\n    \"ts\": 1669783687467808.5, \"dur\": -1e3,\n    \"args\": {\n      \"External id\": 3213,\"Input Dims\": [[1, 2], [], {\"a\": [true, false]}]\n    }\n  }",
        b"{\"ph\": \"f\", \"id\": 73689, \"pid\": \"1\", \"tid\": 7, \"ts\": 1, \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": \"e\"}",
        b"{\"name\": \"a\\u00e9\\\"b\", \"ph\": \"i\", \"s\": \"t\", \"pid\": null, \"ts\": 0, \"args\": {\"device\": \"x\\ny\"}}",
    ];

    #[test]
    fn every_prefix_and_one_byte_change_reads_as_the_parser_reads_it() {
        for sample in SAMPLES {
            for cut in 0..=sample.len() {
                // Each time with the skeleton of the whole event kept.
                let (slow, fast) = both(sample);
                assert_eq!(slow, fast);
                let (slow, fast) = both(&sample[..cut]);
                assert_eq!(slow, fast, "{:?}", String::from_utf8_lossy(&sample[..cut]));
            }
            for i in 0..sample.len() {
                for b in [
                    b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', b'x', b'0', b'9', b'-', b'.', b'e', b' ', b'\n', 0x01, 0xff, b'n',
                ] {
                    let mut changed = sample.to_vec();
                    changed[i] = b;
                    let (slow, fast) = both(sample);
                    assert_eq!(slow, fast);
                    let (slow, fast) = both(&changed);
                    assert_eq!(slow, fast, "{:?}", String::from_utf8_lossy(&changed));
                }
            }
        }
    }

    #[test]
    fn nesting_inside_skipped_args_keeps_the_parsers_limit() {
        for depth in [126, 127, 128, 129] {
            let nest = |d: usize| format!("{}{}", "[".repeat(d), "]".repeat(d));
            let event = |d: usize| {
                format!(
                    "{{\"cat\": \"cpu_op\", \"name\": \"n\", \"args\": {{\"a\": 1, \"b\": {}}}}}",
                    nest(d)
                )
            };
            // Keep the skeleton of a shallow event, then read a deep one.
            both(event(1).as_bytes());
            let (slow, fast) = both(event(depth).as_bytes());
            assert_eq!(slow, fast, "depth {depth}");
        }
    }

    #[test]
    fn elements_with_very_many_values_get_no_skeleton() {
        for cat in ["cpu_op", "kernel"] {
            let members: Vec<String> = (0..5000).map(|k| format!("\"a{k}\": {k}")).collect();
            let event = format!("{{\"ph\": \"X\", \"cat\": \"{cat}\", \"args\": {{{}}}}}", members.join(", "));
            let misses = CACHE.with(|c| c.borrow().misses);
            for _ in 0..2 {
                let (slow, fast) = both(event.as_bytes());
                assert_eq!(slow, fast);
                CACHE.with(|c| assert!(c.borrow().record.len() <= 4097, "the record stays bounded"));
            }
            assert_eq!(CACHE.with(|c| c.borrow().misses) - misses, 2, "{cat}: no skeleton was kept");
        }
    }

    #[test]
    fn kept_skeletons_are_bounded_and_predicted_in_turn() {
        let kinds: Vec<String> = (0..12)
            .map(|k| format!("{{\"ph\": \"X\", \"cat\": \"c{k}\", \"ts\": 1}}"))
            .collect();
        for _ in 0..3 {
            for k in &kinds {
                both(k.as_bytes());
            }
        }
        CACHE.with(|c| assert!(c.borrow().kept.len() <= KEPT));
        // A repeating order of fewer kinds than are kept: each is predicted.
        for _ in 0..3 {
            for k in &kinds[..4] {
                both(k.as_bytes());
            }
        }
        let hits_before = CACHE.with(|c| c.borrow().clock);
        for k in &kinds[..4] {
            let mut ev = RawEvent::default();
            let last = CACHE.with(|c| c.borrow().last);
            let next = CACHE.with(|c| c.borrow().kept[last].next);
            parse_prefix(k.as_bytes(), &mut ev).0.unwrap();
            assert_eq!(CACHE.with(|c| c.borrow().last), next, "the predicted skeleton matched");
        }
        assert_eq!(CACHE.with(|c| c.borrow().clock), hits_before + 4);
    }

    /// `cargo test --release -p gputrace-kineto --lib parse_speed -- --ignored --nocapture`
    /// (`KINETO_PARSE_FILE=` an uncompressed trace; else the largest shared one):
    /// the parser alone against the skeleton path, per trace event.
    #[test]
    #[ignore]
    fn parse_speed() {
        let text = match std::env::var_os("KINETO_PARSE_FILE") {
            Some(f) => std::fs::read(f).unwrap(),
            None => {
                let mut files = Vec::new();
                shared_traces(
                    std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/traces")),
                    &mut files,
                );
                let Some(f) = files.into_iter().max_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)) else {
                    eprintln!("skipping: no shared traces");
                    return;
                };
                let mut text = Vec::new();
                flate2::read::GzDecoder::new(std::fs::File::open(&f).unwrap())
                    .read_to_end(&mut text)
                    .unwrap();
                text
            }
        };
        let at = elements(&text);
        let time = |f: &dyn Fn(&[u8]) -> usize| {
            (0..3)
                .map(|_| {
                    let t = std::time::Instant::now();
                    let used: usize = at.iter().map(|&o| f(&text[o..])).sum();
                    assert!(used > 0);
                    t.elapsed().as_nanos() / at.len() as u128
                })
                .min()
                .unwrap_or(0)
        };
        let parser = time(&|b| event::parse_prefix_recording(b, &mut RawEvent::default(), None).1);
        let skeletons = time(&|b| parse_prefix(b, &mut RawEvent::default()).1);
        eprintln!("{} trace events: parser {parser} ns each, with skeletons {skeletons} ns", at.len());
    }
}
