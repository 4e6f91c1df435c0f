//! The fast path of parsing a trace event (the parser is
//! [`crate::event::parse_prefix_recording`]): trace events read
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
//! first), op by op: an op's literal (the bytes before a value) is
//! compared sixteen bytes at a time, the value is checked for its kind
//! (plain integers and strings inline, the rest by the parser's own code),
//! and stored where the skeleton says. Member names are not read, nor
//! whitespace passed byte by byte: a trace event is read in about 0.6 of
//! the parser's time (measured in `BENCHMARKS.md`). A match that fails in
//! op `p` goes on from there with a kept skeleton that has exactly `p` ops
//! in common with it (events of one kind that differ in their last members
//! are not read twice), and each skeleton works out once what its `ph` and
//! `cat` make an event ([`Class`]).
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

use crate::class::Class;
use crate::event::{self, Member, ParseError, Raw, RawArgs, RawEvent, Recorded, Slot, ValueKind};
use std::borrow::Cow;
use std::cell::RefCell;

/// Skeletons kept per thread.
const KEPT: usize = 8;

/// Longest element a skeleton is made from.
const MAX_ELEMENT: usize = 16 << 10;

/// What follows an [`Op`]'s literal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Then {
    /// A value of this kind.
    Value(ValueKind),
    /// The end of the element (the last op).
    End,
}

/// One step of a skeleton: bytes that must be there as they are, then a
/// value (or the end). Some of the literal's bytes may be the content of
/// `ph` or `cat` ([`Skeleton::captures`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Op {
    /// The literal's first sixteen bytes (zeros after its end), and ones
    /// over those of them that are the literal's.
    head: u128,
    mask: u128,
    /// The literal: `Skeleton::text[at..at + len]`.
    at: u32,
    len: u32,
    then: Then,
    /// Where the value goes (nested one level deeper than the event's
    /// members when [`Slot::Nested`]); never [`Slot::Unfit`], nor a field
    /// other than name, pid, tid, ts and dur.
    slot: Slot,
    /// Whether the literal holds a `ph` or `cat` capture.
    captures: bool,
}

/// The shape of one event: see the module comment.
#[derive(Debug)]
struct Skeleton {
    /// The literals, one after the other, then [`PAD`] zero bytes, so that
    /// sixteen bytes can be read at any offset inside a literal.
    text: Box<[u8]>,
    /// Invariant: not empty, and only the last one is [`Then::End`].
    ops: Box<[Op]>,
    /// The `ph` and `cat` contents in the literals: (op, offset in its
    /// literal, length, [`Member::Ph`] or [`Member::Cat`]).
    captures: Vec<(usize, usize, usize, Member)>,
    /// The event has an `args` object that is read (not skipped).
    args: bool,
    /// What its `ph` and `cat` make an event.
    class: Class,
    /// The skeleton the event after the last one matched here matched
    /// (an index in [`Cache::kept`]): tried first next time, as a profiler
    /// often writes its kinds of events in a repeating order.
    next: usize,
    /// When it was last matched (a count of matches), to replace the one
    /// unused longest.
    used: u64,
    /// For each kept skeleton (by index in [`Cache::kept`]), how many
    /// leading ops the two have in common; 0 when their `args` differ.
    /// A match that fails in op `p` goes on, from the start of that op,
    /// with a skeleton it has exactly `p` ops in common with: the ops
    /// before `p` are the same, so what they stored stands, and op `p`
    /// differs, so it may match where this one did not.
    common: [u16; KEPT],
}

/// Zero bytes after a skeleton's literals.
const PAD: usize = 16;

/// Where a match failed: the op, and the byte it started at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Failed {
    op: usize,
    at: usize,
}

impl Skeleton {
    fn literal(&self, op: &Op) -> &[u8] {
        &self.text[op.at as usize..(op.at + op.len) as usize]
    }

    /// Whether op `k` of `self` and of `other` are the same step.
    fn same_op(&self, other: &Skeleton, k: usize) -> bool {
        let (Some(a), Some(b)) = (self.ops.get(k), other.ops.get(k)) else {
            return false;
        };
        let caps = |s: &Skeleton| s.captures.iter().filter(|c| c.0 == k).map(|c| (c.1, c.2, c.3)).collect::<Vec<_>>();
        (a.then, a.slot, a.captures) == (b.then, b.slot, b.captures) && self.literal(a) == other.literal(b) && caps(self) == caps(other)
    }
}

/// How many leading ops `a` and `b` have in common (0 if their `args`
/// differ, as a match sets `args` first).
fn common_ops(a: &Skeleton, b: &Skeleton) -> u16 {
    if a.args != b.args {
        return 0;
    }
    let n = (0..a.ops.len().min(b.ops.len())).take_while(|&k| a.same_op(b, k)).count();
    u16::try_from(n).unwrap_or(u16::MAX)
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
    /// Matches tried, and ops read by those that failed (for tests and
    /// measurements).
    tries: u64,
    wasted: u64,
    /// Matches that went on from where another one failed.
    resumed: u64,
    record: Vec<Recorded>,
}

impl Cache {
    /// Match against the skeleton the last one predicts, then the others:
    /// after a failure in op `p`, first those with exactly `p` ops in
    /// common with the one that failed, from where it failed (see
    /// [`Skeleton::common`]), then the rest from the start.
    #[inline]
    fn find<'a>(&mut self, bytes: &'a [u8], ev: &mut RawEvent<'a>) -> Option<usize> {
        let n = self.kept.len();
        let first = self.kept.get(self.last).map_or(0, |s| s.next);
        // Skeletons tried (a bit per index; KEPT <= 32).
        let mut tried = 0u32;
        let (mut k, mut from) = (first, Failed { op: 0, at: 0 });
        // Whether `ev` holds what a failed match stored.
        let mut touched = false;
        loop {
            let s = self.kept.get(k)?;
            tried |= 1 << k;
            self.tries += 1;
            // The usual miss, in the first literal, checked here: a call
            // to `matches` sets up more than this compare costs. (`matches`
            // compares it again: not doing so measured no faster.)
            let first_differs = from.op == 0 && s.ops.first().is_none_or(|op| !literal_at(s, op, bytes, 0));
            let result = if first_differs { Err(from) } else { matches(s, bytes, from, ev) };
            match result {
                Ok(used) => {
                    ev.class = Some(s.class);
                    self.clock += 1;
                    self.kept[k].used = self.clock;
                    if let Some(last) = self.kept.get_mut(self.last) {
                        last.next = k;
                    }
                    self.last = k;
                    return Some(used);
                }
                Err(failed) if failed.op == 0 => {
                    // In the first literal, the usual miss: nothing stored,
                    // nothing to go on from. The next untried, in turn.
                    let untried = !tried & ((1u32 << n) - 1);
                    if untried == 0 {
                        break;
                    }
                    k = untried.trailing_zeros() as usize;
                }
                Err(failed) => {
                    self.wasted += (failed.op - from.op) as u64;
                    touched = true;
                    // Those with more ops in common fail where this one did.
                    for u in 0..n {
                        if usize::from(s.common[u]) > failed.op {
                            tried |= 1 << u;
                        }
                    }
                    let goes_on = (0..n)
                        .filter(|&u| tried & (1 << u) == 0 && usize::from(s.common[u]) == failed.op)
                        .max_by_key(|&u| self.kept[u].used);
                    if let Some(u) = goes_on {
                        self.resumed += u64::from(failed.op > 0);
                        (k, from) = (u, failed);
                        continue;
                    }
                    // From the start (the rest in turn), with `ev` empty.
                    if touched {
                        *ev = RawEvent::default();
                        touched = false;
                    }
                    let untried = !tried & ((1u32 << n) - 1);
                    if untried == 0 {
                        break;
                    }
                    k = untried.trailing_zeros() as usize;
                    from = Failed { op: 0, at: 0 };
                }
            }
        }
        if touched {
            *ev = RawEvent::default();
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
        for u in 0..self.kept.len() {
            let c = common_ops(&self.kept[k], &self.kept[u]);
            self.kept[k].common[u] = c;
            self.kept[u].common[k] = c;
        }
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

/// Parse the trace event object at the start of `bytes` into the empty `ev`, as
/// [`crate::event::parse_prefix_recording`] does: matched against a kept skeleton,
/// or read by the parser (and its skeleton kept). Also returns the bytes it took.
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
    let mut text: Vec<u8> = Vec::with_capacity(element.len() + PAD);
    let mut ops = Vec::with_capacity(record.len() + 1);
    let mut captures = Vec::new();
    // Where the literal being gathered starts in `text`.
    let mut lit = 0;
    let mut from = 0;
    let mut op_captures = false;
    for &(at, end, slot) in record {
        text.extend_from_slice(element.get(from..at)?);
        from = end;
        let value = element.get(at..end)?;
        match slot {
            Slot::Unfit => return None,
            Slot::Field(member @ (Member::Ph | Member::Cat)) => {
                // Kept as bytes: a plain string (its content captured).
                if value.len() < 2 || value[0] != b'"' || value.contains(&b'\\') {
                    return None;
                }
                captures.push((ops.len(), text.len() - lit + 1, value.len() - 2, member));
                op_captures = true;
                text.extend_from_slice(value);
            }
            Slot::Field(Member::Name | Member::Pid | Member::Tid | Member::Ts | Member::Dur) | Slot::Arg(_) | Slot::None | Slot::Nested => {
                let kind = match value.first()? {
                    b'"' => ValueKind::String,
                    b'-' | b'0'..=b'9' => ValueKind::Number,
                    _ => ValueKind::Any,
                };
                if slot == Slot::Field(Member::Name) && kind != ValueKind::String {
                    return None;
                }
                ops.push(Op {
                    head: 0,
                    mask: 0,
                    at: u32::try_from(lit).ok()?,
                    len: u32::try_from(text.len() - lit).ok()?,
                    then: Then::Value(kind),
                    slot,
                    captures: std::mem::take(&mut op_captures),
                });
                lit = text.len();
            }
            // A value of no field the event has: never matched.
            Slot::Field(_) => return None,
        }
    }
    text.extend_from_slice(element.get(from..)?);
    ops.push(Op {
        head: 0,
        mask: 0,
        at: u32::try_from(lit).ok()?,
        len: u32::try_from(text.len() - lit).ok()?,
        then: Then::End,
        slot: Slot::None,
        captures: op_captures,
    });
    // An element starts with `{`: the first op's literal is never empty, so
    // a match that fails in it stored nothing.
    if ops[0].len == 0 {
        return None;
    }
    text.extend_from_slice(&[0; PAD]);
    for op in &mut ops {
        let at = op.at as usize;
        let head = text.get(at..at + 16)?;
        let n = (op.len as usize).min(16);
        let mut bytes = [0u8; 16];
        bytes[..n].copy_from_slice(&head[..n]);
        op.head = u128::from_le_bytes(bytes);
        op.mask = MASKS[n];
    }
    let captured = |which: Member| {
        captures.iter().find(|c| c.3 == which).map_or("", |&(k, at, len, _)| {
            let from = ops[k].at as usize + at;
            // The content of a plain string (no escape), checked by the parser.
            std::str::from_utf8(&text[from..from + len]).unwrap_or("")
        })
    };
    let class = Class::of(captured(Member::Ph), captured(Member::Cat));
    Some(Skeleton {
        class,
        text: text.into_boxed_slice(),
        ops: ops.into_boxed_slice(),
        captures,
        args,
        next: 0,
        used: 0,
        common: [0; KEPT],
    })
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

/// Ones over the first `n` bytes of sixteen (little-endian).
const MASKS: [u128; 17] = {
    let mut m = [0u128; 17];
    let mut n = 1;
    while n < 16 {
        m[n] = (1u128 << (8 * n)) - 1;
        n += 1;
    }
    m[16] = u128::MAX;
    m
};

/// Whether `bytes[i..]` starts with `s`'s literal of `op`: its first
/// sixteen bytes in one masked compare, any after them sixteen at a time.
#[inline(always)]
fn literal_at(s: &Skeleton, op: &Op, bytes: &[u8], i: usize) -> bool {
    let len = op.len as usize;
    let w = |b: &[u8], j: usize| u128::from_le_bytes(b[j..j + 16].try_into().unwrap_or([0; 16]));
    let Some(here) = bytes.get(i..i + len + PAD) else {
        // Near the end of the bytes: exactly.
        return bytes.get(i..i + len).is_some_and(|here| here == s.literal(op));
    };
    if (w(here, 0) ^ op.head) & op.mask != 0 {
        return false;
    }
    if len <= 16 {
        return true;
    }
    let at = op.at as usize;
    let Some(lit) = s.text.get(at..at + len + PAD) else {
        return false;
    };
    let mut j = 16;
    while j + 16 <= len {
        if w(here, j) != w(lit, j) {
            return false;
        }
        j += 16;
    }
    (w(here, j) ^ w(lit, j)) & MASKS[len - j] == 0
}

/// The end of the value of `kind` at `i`, and a name's content, or `None`
/// if there is none there; the plain cases here, the rest by the parser's
/// own code.
#[inline(always)]
fn value_end<'a>(bytes: &'a [u8], i: usize, kind: ValueKind, slot: Slot) -> Option<(usize, Option<Cow<'a, str>>)> {
    match kind {
        ValueKind::Number => {
            if let Some(end) = integer_end(bytes, i) {
                return Some((end, None));
            }
        }
        ValueKind::String => {
            if bytes.get(i) == Some(&b'"') {
                let j = event::plain_run(bytes, i + 1);
                if bytes.get(j) == Some(&b'"') {
                    // Plain ASCII (no escape, control or non-ASCII byte).
                    return Some((j + 1, Some(Cow::Borrowed(event::value_text(bytes, i + 1, j)))));
                }
            }
        }
        ValueKind::Any => {}
    }
    event::value_at(bytes, i, kind, slot == Slot::Nested)
}

/// Match `bytes` (from an element's `{`) against `s` from op `from.op`
/// at byte `from.at` (`ev` holding what the ops before it stored, or empty
/// at op 0), filling `ev`; the bytes taken, or where the match failed. An
/// op stores only once all of it matched, so a failure in op 0 stored
/// nothing.
#[inline(never)]
fn matches<'a>(s: &Skeleton, bytes: &'a [u8], from: Failed, ev: &mut RawEvent<'a>) -> Result<usize, Failed> {
    let (mut k, mut i) = (from.op, from.at);
    while let Some(op) = s.ops.get(k) {
        let fail = Failed { op: k, at: i };
        if !literal_at(s, op, bytes, i) {
            return Err(fail);
        }
        let lit = i;
        i += op.len as usize;
        let stored = match op.then {
            Then::End => None,
            Then::Value(kind) => {
                let (end, content) = value_end(bytes, i, kind, op.slot).ok_or(fail)?;
                Some((i, end, kind, content))
            }
        };
        if k == 0 && s.args {
            ev.args = Some(RawArgs::default());
        }
        if op.captures {
            capture(s, k, &bytes[lit..], ev);
        }
        let Some((at, end, kind, content)) = stored else {
            return Ok(i);
        };
        // A number or a string is never `null`.
        let raw = || {
            let text = event::value_text(bytes, at, end);
            (kind != ValueKind::Any || text != "null").then_some(Raw::from_checked(text))
        };
        match op.slot {
            Slot::Field(Member::Name) => ev.name = content,
            Slot::Field(Member::Pid) => ev.pid = raw(),
            Slot::Field(Member::Tid) => ev.tid = raw(),
            Slot::Field(Member::Ts) => ev.ts = raw(),
            Slot::Field(Member::Dur) => ev.dur = raw(),
            // `args` was set by op 0 (an `args` member comes after it).
            Slot::Arg(a) => {
                if let Some(place) = ev.args.as_mut().and_then(|args| args.slot_at(a)) {
                    *place = raw();
                }
            }
            _ => {}
        }
        i = end;
        k += 1;
    }
    Ok(i)
}

/// Store the `ph` and `cat` contents that op `k`'s literal holds: `here`,
/// the input from that literal on, whose first bytes equal it.
#[inline(never)]
fn capture<'a>(s: &Skeleton, k: usize, here: &'a [u8], ev: &mut RawEvent<'a>) {
    for &(_, at, len, member) in s.captures.iter().filter(|c| c.0 == k) {
        // The same bytes as the skeleton's: the content of a string without
        // escapes, which the parser checked, between quotes (ASCII).
        let text = Cow::Borrowed(event::value_text(here, at, at + len));
        match member {
            Member::Ph => ev.ph = Some(text),
            _ => ev.cat = Some(text),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    mod skip {
        include!("../../tests/common/skip.rs");
    }
    use std::io::Read;

    /// The parser's reading of `bytes`, and the skeleton path's, as text.
    fn both(bytes: &[u8]) -> (String, String) {
        let mut ev = RawEvent::default();
        let (r, used) = event::parse_prefix_recording(bytes, &mut ev, None);
        let slow = format!("{r:?} {used} {ev:?}");
        let mut ev = RawEvent::default();
        let (r, used) = parse_prefix(bytes, &mut ev);
        // A skeleton's class is what the event's `ph` and `cat` make it.
        if let Some(class) = ev.class.take() {
            assert!(r.is_ok());
            assert_eq!(class, Class::of(ev.ph.as_deref().unwrap_or(""), ev.cat.as_deref().unwrap_or("")));
        }
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
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "CI=true but no traces under {}: the real traces must be present",
                root.display()
            );
            skip::skip(&format!("no traces under {}", root.display()));
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
    fn a_match_that_fails_late_goes_on_from_there_with_a_skeleton_of_the_same_start() {
        let shapes = [
            "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"ts\": 1, \"args\": {\"stream\": 7, \"device\": 0}}",
            "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"ts\": 1, \"args\": {\"stream\": 7}}",
            "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"ts\": 1, \"args\": {\"stream\": \"s\", \"device\": 0}}",
        ];
        // Keep all three skeletons.
        for s in shapes {
            both(s.as_bytes());
        }
        let (misses, resumed) = CACHE.with(|c| (c.borrow().misses, c.borrow().resumed));
        // In an order the predictions get wrong: each event is first tried
        // against a skeleton that fails after the name, or in `args`.
        for order in [[0, 2, 1], [1, 0, 2], [2, 1, 0]] {
            for k in order {
                let other = shapes[k].replace("\"k\"", "\"a longer name\"").replace(": 1,", ": 1234567,");
                let (slow, fast) = both(other.as_bytes());
                assert_eq!(slow, fast, "{other}");
            }
        }
        let (misses_now, resumed_now) = CACHE.with(|c| (c.borrow().misses, c.borrow().resumed));
        assert_eq!(misses_now, misses, "every event matched a kept skeleton");
        assert!(resumed_now > resumed, "some matches went on from where another failed");
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

    /// `cargo test --release -p gputrace-kineto --lib repeated_event_speed -- --ignored --nocapture`:
    /// the skeleton path on one `cpu_op` event of df_index_resolver, read
    /// again and again (in the caches, every prediction right): what the
    /// matcher itself costs per event.
    #[test]
    #[ignore]
    fn repeated_event_speed() {
        // Spaces after the element: reading sixteen bytes past a literal
        // stays in the bytes, as it does inside a trace.
        let event = format!(
            "{}{}",
            r#"{
    "ph": "X", "cat": "cpu_op", "name": "aten::zero_", "pid": 783658, "tid": 783658,
    "ts": 1669783688800185, "dur": 21,
    "args": {
      "External id": 47873,"Ev Idx": 76530, "Fwd thread id": 0, "Sequence number": 1580
    }
  }"#,
            " ".repeat(64)
        );
        let n = 2_000_000u32;
        let best = (0..3)
            .map(|_| {
                let t = std::time::Instant::now();
                for _ in 0..n {
                    let mut ev = RawEvent::default();
                    let (r, used) = parse_prefix(std::hint::black_box(event.as_bytes()), &mut ev);
                    assert!(r.is_ok() && used > 0);
                    std::hint::black_box(&ev);
                }
                t.elapsed().as_nanos() / u128::from(n)
            })
            .min()
            .unwrap_or(0);
        eprintln!("a repeated cpu_op event: {best} ns each");
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
                    skip::skip("no shared traces");
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
        let parser = if std::env::var_os("KINETO_PARSE_SKELETONS_ONLY").is_some() {
            0
        } else {
            time(&|b| event::parse_prefix_recording(b, &mut RawEvent::default(), None).1)
        };
        let skeletons = time(&|b| parse_prefix(b, &mut RawEvent::default()).1);
        eprintln!("{} trace events: parser {parser} ns each, with skeletons {skeletons} ns", at.len());
        CACHE.with(|c| {
            let c = c.borrow();
            eprintln!("tries {} wasted ops {} misses {}", c.tries, c.wasted, c.misses);
        });
    }
}
