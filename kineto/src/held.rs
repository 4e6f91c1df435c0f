//! Where mapped events go: the gputrace writer ([`Sink`]), or a part of a
//! window parsed on another thread ([`Held`]), held with its own strings
//! until it is handed to the writer in order.
//!
//! Kineto writes `baseTimeNanoseconds` after `traceEvents`, so a one-pass
//! import maps times against a provisional base ([`PROVISIONAL_BASE`]) and
//! moves them once the file is read (see [`crate::import`]); up to
//! [`ONE_PASS_EVENTS`] events, then it reads the file twice instead, so
//! memory stays bounded whatever the file's size.

use crate::error::Fail;
use crate::map::Interner;
use gputrace_format::*;
use rustc_hash::FxHashMap;
use std::io::Write;

/// Most events a one-pass import writes in memory by default before it
/// falls back to two passes: some 15 MiB of encoded events (7.5 bytes an
/// event, uncompressed, on df_index_resolver).
pub(crate) const ONE_PASS_EVENTS: usize = 1 << 21;

/// The base time events are mapped against while the real one is unknown:
/// 2^62 ns (year 2116), so that relative times before or after it, as
/// Kineto writes them, stay representable.
pub(crate) const PROVISIONAL_BASE: u64 = 1 << 62;

/// Takes mapped events and interns their strings.
pub(crate) trait Sink: Interner {
    /// One event.
    fn put(&mut self, event: Event) -> Result<(), Fail>;
}

impl<W: Write> Sink for TraceWriter<W> {
    fn put(&mut self, event: Event) -> Result<(), Fail> {
        self.push(event).map_err(Fail::Write)
    }
}

/// A part's events, with their strings.
///
/// Invariant: string ids are given as [`TraceWriter::intern`] gives them
/// (the empty string is [`StringId::EMPTY`], then 1, 2, ... in order of
/// first use), and `strings[i]` has id `i + 1`.
#[derive(Default)]
pub(crate) struct Held {
    pub events: Vec<Event>,
    strings: Vec<String>,
    ids: FxHashMap<String, StringId>,
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
    fn put(&mut self, event: Event) -> Result<(), Fail> {
        self.events.push(event);
        Ok(())
    }
}

impl Held {
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
        for mut e in self.events.drain(..) {
            remap(&mut e, &ids);
            sink.put(e)?;
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
        Event::Counter(c) => id(&mut c.metric),
        Event::Memcpy(_) | Event::Memset(_) | Event::Sync(_) | Event::GraphLaunch(_) | Event::Request(_) => {}
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
}
