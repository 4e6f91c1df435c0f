//! Where mapped events go: straight into the gputrace writer, or held in
//! memory while the header is not yet known.
//!
//! Kineto writes `baseTimeNanoseconds` after `traceEvents`, and the gputrace
//! header (written first) comes from the members around the array. So the
//! importer reads the file once, holding what it maps — up to
//! [`HELD_EVENTS`] events — and writes the header and the events at the end.
//! Held events are timed against a provisional base ([`PROVISIONAL_BASE`])
//! and their strings interned locally; both are fixed when they are
//! written. A trace with more events than that is read twice instead (the
//! metadata first), so memory stays bounded whatever the file's size.

use crate::error::Fail;
use crate::map::Interner;
use gputrace_format::*;
use rustc_hash::FxHashMap;
use std::io::Write;

/// Most events held by default before the importer falls back to two
/// passes: about 30 MiB (an `Event` is 112 bytes, plus its offset).
pub(crate) const HELD_EVENTS: usize = 1 << 18;

/// The base time events are mapped against while the real one is unknown:
/// 2^62 ns (year 2116), so that relative times before or after it, as
/// Kineto writes them, stay representable.
pub(crate) const PROVISIONAL_BASE: u64 = 1 << 62;

/// Takes mapped events and interns their strings.
pub(crate) trait Sink: Interner {
    /// One event; `offset` is where its trace event starts in the JSON.
    fn put(&mut self, event: Event, offset: u64) -> Result<(), Fail>;
}

impl<W: Write> Sink for TraceWriter<W> {
    fn put(&mut self, event: Event, _offset: u64) -> Result<(), Fail> {
        self.push(event).map_err(Fail::Write)
    }
}

/// Events held in memory, with their strings.
///
/// Invariant: string ids are given as [`TraceWriter::intern`] gives them
/// (the empty string is [`StringId::EMPTY`], then 1, 2, ... in order of
/// first use), and `strings[i]` has id `i + 1`.
#[derive(Default)]
pub(crate) struct Held {
    pub events: Vec<(Event, u64)>,
    strings: Vec<String>,
    ids: FxHashMap<String, StringId>,
    /// Most events taken (0: no limit).
    limit: usize,
}

impl Interner for Held {
    fn intern(&mut self, s: &str) -> StringId {
        if s.is_empty() {
            return StringId::EMPTY;
        }
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        self.strings.push(s.to_string());
        let id = StringId(self.strings.len() as u32);
        self.ids.insert(s.to_string(), id);
        id
    }
}

impl Sink for Held {
    fn put(&mut self, event: Event, offset: u64) -> Result<(), Fail> {
        if self.limit > 0 && self.events.len() >= self.limit {
            return Err(Fail::TooManyToHold);
        }
        self.events.push((event, offset));
        Ok(())
    }
}

impl Held {
    /// Holds at most `limit` events (at least one).
    pub(crate) fn with_limit(limit: usize) -> Held {
        Held {
            limit: limit.max(1),
            ..Held::default()
        }
    }

    /// Intern the held strings into `into`, in the order they were first
    /// used; the id each one got there, by local id (the same ids for a
    /// fresh writer).
    pub(crate) fn strings_into(&self, into: &mut dyn Interner) -> Vec<StringId> {
        std::iter::once(StringId::EMPTY)
            .chain(self.strings.iter().map(|s| into.intern(s)))
            .collect()
    }

    /// Pass the held events (strings given new ids) on to `sink`, and
    /// empty this (keeping its allocations for the next use).
    pub(crate) fn drain_into<S: Sink>(&mut self, sink: &mut S) -> Result<(), Fail> {
        let ids = self.strings_into(sink);
        self.strings.clear();
        self.ids.clear();
        for (mut e, offset) in self.events.drain(..) {
            remap(&mut e, &ids);
            sink.put(e, offset)?;
        }
        Ok(())
    }

    /// Empty this, keeping its allocations.
    pub(crate) fn clear(&mut self) {
        self.events.clear();
        self.strings.clear();
        self.ids.clear();
    }
}

/// Move a time mapped against [`PROVISIONAL_BASE`] to `base`; `None` if
/// the result is not representable.
pub(crate) fn rebase(t: Nanos, base: u64) -> Option<Nanos> {
    let t = t.0 as i128 - PROVISIONAL_BASE as i128 + base as i128;
    u64::try_from(t).ok().map(Nanos)
}

/// Rebase every time of `e` (see [`rebase`]) and give its strings the ids
/// in `ids` (by local id). `None` if a time is not representable.
pub(crate) fn fix(e: &mut Event, base: u64, ids: &[StringId]) -> Option<()> {
    let span = |start: &mut Nanos, end: &mut Nanos| -> Option<()> {
        *start = rebase(*start, base)?;
        *end = rebase(*end, base)?;
        Some(())
    };
    match e {
        Event::Kernel(k) => span(&mut k.start, &mut k.end)?,
        Event::Memcpy(m) => span(&mut m.start, &mut m.end)?,
        Event::Memset(m) => span(&mut m.start, &mut m.end)?,
        Event::Sync(s) => span(&mut s.start, &mut s.end)?,
        Event::Api(a) => span(&mut a.start, &mut a.end)?,
        Event::Marker(m) => span(&mut m.start, &mut m.end)?,
        Event::Collective(c) => {
            span(&mut c.start, &mut c.end)?;
            if c.enqueue != Nanos::ZERO {
                c.enqueue = rebase(c.enqueue, base)?;
            }
        }
        Event::Loss(l) => l.time = rebase(l.time, base)?,
    }
    remap(e, ids);
    Some(())
}

/// Give the strings of `e` the ids in `ids` (by local id).
pub(crate) fn remap(e: &mut Event, ids: &[StringId]) {
    let id = |s: &mut StringId| *s = ids.get(s.0 as usize).copied().unwrap_or(*s);
    match e {
        Event::Kernel(k) => id(&mut k.name),
        Event::Api(a) => id(&mut a.name),
        Event::Marker(m) => {
            id(&mut m.name);
            id(&mut m.domain);
        }
        Event::Collective(c) => {
            id(&mut c.op);
            id(&mut c.datatype);
            id(&mut c.algorithm);
            id(&mut c.protocol);
        }
        Event::Loss(l) => id(&mut l.detail),
        Event::Memcpy(_) | Event::Memset(_) | Event::Sync(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_ids_are_the_writers() {
        let mut held = Held::default();
        let names = ["gemm", "", "cudaLaunchKernel", "gemm", "é"];
        let local: Vec<StringId> = names.iter().map(|s| held.intern(s)).collect();
        let mut w = TraceWriter::new(Vec::new(), &Header::default(), WriterOptions::default()).unwrap();
        let ids = held.strings_into(&mut w);
        for (s, l) in names.iter().zip(&local) {
            assert_eq!(ids[l.0 as usize], w.intern(s), "{s}");
            assert_eq!(ids[l.0 as usize], *l, "{s}");
        }
    }

    #[test]
    fn rebasing_keeps_relative_times_and_refuses_the_impossible() {
        let p = PROVISIONAL_BASE;
        assert_eq!(rebase(Nanos(p + 5), 1_000), Some(Nanos(1_005)));
        assert_eq!(rebase(Nanos(p - 5), 1_000), Some(Nanos(995)));
        assert_eq!(rebase(Nanos(p - 5), 0), None);
        assert_eq!(rebase(Nanos(u64::MAX), u64::MAX), None);
    }
}
