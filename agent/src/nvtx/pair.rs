//! The writer thread's side: pairs push/pop (per thread and domain) and
//! start/end (by range id) into range markers; marks become instants.

use super::abi::Payload;
use super::{Nvtx, Rec, RecKind};
use std::collections::HashMap;

/// Ranges held open at once (beyond: the start is dropped, counted).
pub const MAX_OPEN: usize = 1 << 16;

/// A finished marker, times still in `CLOCK_REALTIME` ns.
#[derive(Clone, Debug, PartialEq)]
pub struct Done {
    pub start_ns: u64,
    pub end_ns: u64,
    pub tid: u32,
    pub name: String,
    /// `domain` or `domain/category` (see docs/agent.md).
    pub domain: String,
    pub instant: bool,
    pub color: u32,
}

#[derive(Default)]
pub struct Pairer {
    stacks: HashMap<(u32, u16), Vec<Done>>,
    started: HashMap<u64, Done>,
    open: usize,
    /// Pops with nothing pushed on their thread and domain.
    pub unmatched_pops: u64,
    /// Ends of an id never started (or already ended).
    pub unmatched_ends: u64,
    /// Ranges still open at the end, closed at the final time.
    pub closed_at_exit: u64,
    /// Starts dropped because [`MAX_OPEN`] ranges were open.
    pub too_many_open: u64,
}

/// `name [payload=…]`, the marker's name.
fn name_of(r: &Rec) -> String {
    let t = r.text();
    let p = r.payload;
    let v = match r.payload_type {
        Payload::U64 => p.to_string(),
        Payload::I64 => (p as i64).to_string(),
        Payload::F64 => f64::from_bits(p).to_string(),
        Payload::U32 => (p as u32).to_string(),
        Payload::I32 => (p as u32 as i32).to_string(),
        Payload::F32 => f32::from_bits(p as u32).to_string(),
        Payload::None => return t.to_string(),
    };
    format!("{t} [payload={v}]")
}

/// The marker's domain field: the domain name, plus `/category` when the
/// event has one (its registered name, else its number).
pub fn domain_of(n: &Nvtx, r: &Rec) -> String {
    let d = n.domain_name(r.domain);
    if r.category == 0 {
        return d.to_string();
    }
    match n.category_name(r.domain, r.category) {
        Some(c) => format!("{d}/{c}"),
        None => format!("{d}/{}", r.category),
    }
}

impl Pairer {
    /// Take one record; a finished marker goes to `out`.
    pub fn record(&mut self, n: &Nvtx, r: &Rec, out: &mut Vec<Done>) {
        let mk = |instant| Done {
            start_ns: r.time_ns,
            end_ns: r.time_ns,
            tid: r.tid,
            name: name_of(r),
            domain: domain_of(n, r),
            instant,
            color: if r.has_color { r.color } else { 0 },
        };
        match r.kind {
            RecKind::Mark => out.push(mk(true)),
            // Not a marker: the writer takes request marks out before pairing.
            RecKind::Request => {}
            RecKind::Push | RecKind::Start if self.open >= MAX_OPEN => self.too_many_open += 1,
            RecKind::Push => {
                self.open += 1;
                self.stacks.entry((r.tid, r.domain)).or_default().push(mk(false));
            }
            RecKind::Start => {
                self.open += 1;
                self.started.insert(r.range_id, mk(false));
            }
            RecKind::Pop => match self.stacks.get_mut(&(r.tid, r.domain)).and_then(|s| s.pop()) {
                Some(mut d) => {
                    self.open -= 1;
                    d.end_ns = r.time_ns;
                    out.push(d);
                }
                None => self.unmatched_pops += 1,
            },
            RecKind::End => match self.started.remove(&r.range_id) {
                Some(mut d) => {
                    self.open -= 1;
                    d.end_ns = r.time_ns;
                    out.push(d);
                }
                None => self.unmatched_ends += 1,
            },
        }
    }

    /// Close every open range at `end_ns` (the end of the trace).
    pub fn close_all(&mut self, end_ns: u64, out: &mut Vec<Done>) {
        let mut left: Vec<Done> = self.stacks.drain().flat_map(|(_, v)| v).collect();
        left.extend(self.started.drain().map(|(_, d)| d));
        left.sort_by_key(|d| d.start_ns);
        self.closed_at_exit += left.len() as u64;
        self.open = 0;
        for mut d in left {
            d.end_ns = end_ns.max(d.start_ns);
            out.push(d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvtx::{Msg, Rec};

    fn rec(kind: RecKind, tid: u32, t: u64, msg: &str, id: u64) -> Rec {
        let mut r = Rec::new(kind, 0);
        r.tid = tid;
        r.time_ns = t;
        r.range_id = id;
        r.msg[..msg.len()].copy_from_slice(msg.as_bytes());
        r.len = msg.len() as u8;
        r
    }

    #[test]
    fn push_pop_nest_per_thread_and_start_end_pair_by_id() {
        let n = Nvtx::new(4);
        let mut p = Pairer::default();
        let mut out = Vec::new();
        for r in [
            rec(RecKind::Push, 1, 10, "outer", 0),
            rec(RecKind::Push, 2, 11, "other", 0),
            rec(RecKind::Push, 1, 12, "inner", 0),
            rec(RecKind::Start, 1, 13, "cross", 7),
            rec(RecKind::Pop, 1, 14, "", 0),
            rec(RecKind::Pop, 1, 15, "", 0),
            rec(RecKind::Pop, 1, 16, "", 0),
            rec(RecKind::End, 3, 17, "", 7),
            rec(RecKind::End, 3, 18, "", 8),
            rec(RecKind::Mark, 2, 19, "m", 0),
        ] {
            p.record(&n, &r, &mut out);
        }
        let got: Vec<(&str, u64, u64, u32, bool)> = out
            .iter()
            .map(|d| (d.name.as_str(), d.start_ns, d.end_ns, d.tid, d.instant))
            .collect();
        assert_eq!(
            got,
            [
                ("inner", 12, 14, 1, false),
                ("outer", 10, 15, 1, false),
                ("cross", 13, 17, 1, false),
                ("m", 19, 19, 2, true)
            ]
        );
        assert_eq!((p.unmatched_pops, p.unmatched_ends), (1, 1));
        out.clear();
        p.close_all(100, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].name.as_str(), out[0].start_ns, out[0].end_ns), ("other", 11, 100));
        assert_eq!(p.closed_at_exit, 1);
    }

    #[test]
    fn payloads_and_categories_name_the_marker() {
        let n = Nvtx::new(4);
        let d = n.create_domain(Msg::Ascii(c"io".as_ptr()));
        n.name_category(d, 7, Msg::Ascii(c"disk".as_ptr()));
        let mut r = rec(RecKind::Mark, 1, 1, "read", 0);
        r.domain = 1;
        r.category = 7;
        r.payload_type = Payload::F64;
        r.payload = 2.5f64.to_bits();
        assert_eq!((name_of(&r), domain_of(&n, &r)), ("read [payload=2.5]".into(), "io/disk".into()));
        r.category = 9;
        r.payload_type = Payload::I32;
        r.payload = (-5i32) as u32 as u64;
        assert_eq!((name_of(&r), domain_of(&n, &r)), ("read [payload=-5]".into(), "io/9".into()));
        r.domain = 0;
        r.category = 0;
        r.payload_type = Payload::None;
        assert_eq!((name_of(&r), domain_of(&n, &r)), ("read".into(), "".into()));
    }
}
