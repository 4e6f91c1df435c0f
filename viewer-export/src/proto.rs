//! The few protobuf wire-format primitives the Perfetto writer needs.
//!
//! Nested messages are written in place: [`begin`] writes the field tag and
//! reserves one length byte, [`end`] patches the length and, for bodies of
//! 128 bytes or more, shifts the body to make room for a longer varint.
//! Trace packets and track events, which are often longer, reserve two bytes instead
//! ([`begin_wide`]) and get a two-byte length even when one would do: a
//! redundant varint, valid protobuf, and what Perfetto's own protozero
//! writer does (it pads to four bytes).

/// Wire type of varints.
const VARINT: u32 = 0;
/// Wire type of 64-bit fixed values.
const FIXED64: u32 = 1;
/// Wire type of length-delimited fields.
const LEN: u32 = 2;

/// Append `v` as a varint: room for the longest (10 bytes) is made once,
/// then the bytes are stored without a capacity check each, so a constant
/// (a field tag) becomes one or two plain stores.
#[inline]
pub(crate) fn varint(buf: &mut Vec<u8>, v: u64) {
    let mut r = Room::new(buf, 10);
    r.varint(v);
    r.done();
}

/// A varint field holding a time in ns since the epoch: from 2^56 ns
/// (2.3 years) to 2^63, nine bytes, assembled in a register without a loop
/// (see [`spread7`]) and stored as one 8-byte word and a byte. Other values
/// as [`uint`]. Always inlined: as a call it cost 6% of the export.
#[inline(always)]
pub(crate) fn uint_time(buf: &mut Vec<u8>, field: u32, v: u64) {
    let mut r = Room::new(buf, 11);
    r.time(field, v);
    r.done();
}

/// The low 56 bits of `v`, 7 to a byte: byte `i` holds bits `7i..7i+7`
/// (what PDEP with mask 0x7f7f…7f does, without needing BMI2): the 56 bits
/// split into two 28-bit halves (one per 32-bit lane), each half into two
/// 14-bit quarters (one per 16-bit lane), each quarter into two 7-bit
/// groups (one per byte).
#[inline(always)]
fn spread7(v: u64) -> u64 {
    let x = v & 0x00ff_ffff_ffff_ffff;
    let x = (x & 0x0fff_ffff) | ((x & 0x00ff_ffff_f000_0000) << 4);
    let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x0fff_c000_0fff_c000) << 2);
    (x & 0x007f_007f_007f_007f) | ((x & 0x3f80_3f80_3f80_3f80) << 1)
}

/// Write `v` as a varint into `out` from `at`; returns where it ends. The
/// caller leaves room for it (10 bytes at most).
#[inline(always)]
pub(crate) fn varint_at(out: &mut [u8], mut at: usize, mut v: u64) -> usize {
    while v >= 0x80 {
        out[at] = v as u8 | 0x80;
        v >>= 7;
        at += 1;
    }
    out[at] = v as u8;
    at + 1
}

#[inline]
fn tag(buf: &mut Vec<u8>, field: u32, wire: u32) {
    varint(buf, ((field << 3) | wire) as u64);
}

/// A varint field (uint32/uint64/int32 >= 0/enum/bool).
#[inline]
pub(crate) fn uint(buf: &mut Vec<u8>, field: u32, v: u64) {
    tag(buf, field, VARINT);
    varint(buf, v);
}

/// An int64 field (two's complement varint, as protobuf encodes `int64`).
#[inline]
pub(crate) fn int(buf: &mut Vec<u8>, field: u32, v: i64) {
    uint(buf, field, v as u64);
}

/// A fixed64 field.
#[inline]
pub(crate) fn fixed64(buf: &mut Vec<u8>, field: u32, v: u64) {
    tag(buf, field, FIXED64);
    buf.extend_from_slice(&v.to_le_bytes());
}

/// A double field.
#[inline]
pub(crate) fn double(buf: &mut Vec<u8>, field: u32, v: f64) {
    fixed64(buf, field, v.to_bits());
}

/// A string or bytes field.
#[inline]
pub(crate) fn bytes(buf: &mut Vec<u8>, field: u32, b: &[u8]) {
    tag(buf, field, LEN);
    varint(buf, b.len() as u64);
    buf.extend_from_slice(b);
}

/// Start a nested message; pass the result to [`end`].
#[inline]
#[must_use]
pub(crate) fn begin(buf: &mut Vec<u8>, field: u32) -> usize {
    tag(buf, field, LEN);
    buf.push(0);
    buf.len()
}

/// Finish the nested message started at `body`.
#[inline]
pub(crate) fn end(buf: &mut Vec<u8>, body: usize) {
    let len = buf.len() - body;
    if len < 0x80 {
        buf[body - 1] = len as u8;
        return;
    }
    let mut tmp = [0u8; 10];
    // The length's bytes beyond the one reserved.
    let n = varint_at(&mut tmp, 0, len as u64) - 1;
    buf.resize(buf.len() + n, 0);
    buf.copy_within(body..body + len, body + n);
    buf[body - 1..body + n].copy_from_slice(&tmp[..=n]);
}

/// Start a length-delimited field whose length gets two bytes; pass the
/// result to [`end_wide`].
#[inline]
#[must_use]
pub(crate) fn begin_wide(buf: &mut Vec<u8>, field: u32) -> usize {
    tag(buf, field, LEN);
    buf.extend_from_slice(&[0, 0]);
    buf.len()
}

/// Finish the field started at `body` by [`begin_wide`].
#[inline]
pub(crate) fn end_wide(buf: &mut Vec<u8>, body: usize) {
    let len = buf.len() - body;
    if len < 1 << 14 {
        buf[body - 2] = 0x80 | (len & 0x7f) as u8;
        buf[body - 1] = (len >> 7) as u8;
        return;
    }
    // Rare (a packet interning very long names): drop a reserved byte and
    // let `end` shift the body for the longer length.
    buf.remove(body - 1);
    end(buf, body - 1);
}

/// Room for at most `n` bytes at the end of a buffer, written through a
/// pointer without a capacity check per field: for the packets written for
/// every event, whose longest form is known. [`Room::done`] sets the
/// buffer's length to what was written.
///
/// Invariant: `start <= p <= end`, all within the buffer's capacity, and
/// the bytes from `start` to `p` are initialized. Every write checks that
/// its longest form (a tag of 10 bytes, a whole constant-size copy) stays
/// before `end`: a comparison the branch predictor gets right, since the
/// callers' rooms are constants that cover their packets' longest forms;
/// a failed check is a bug in one of them, so it panics rather than write
/// past the buffer.
pub(crate) struct Room<'b> {
    buf: &'b mut Vec<u8>,
    start: *mut u8,
    p: *mut u8,
    end: *mut u8,
}

impl<'b> Room<'b> {
    /// Room for `n` bytes after `buf`'s end.
    #[inline(always)]
    pub(crate) fn new(buf: &'b mut Vec<u8>, n: usize) -> Room<'b> {
        buf.reserve(n);
        // Safety: `n` bytes of spare capacity were reserved.
        unsafe {
            let start = buf.as_mut_ptr().add(buf.len());
            Room {
                buf,
                start,
                p: start,
                end: start.add(n),
            }
        }
    }

    /// Bytes written so far.
    #[inline(always)]
    pub(crate) fn written(&self) -> usize {
        self.p as usize - self.start as usize
    }

    #[inline(always)]
    fn check(&self, n: usize) {
        assert!(self.p as usize + n <= self.end as usize, "a write past its room");
    }

    /// Store `b`. Safety: a byte is left in the room.
    #[inline(always)]
    unsafe fn put(&mut self, b: u8) {
        *self.p = b;
        self.p = self.p.add(1);
    }

    /// Store `v` as a varint. Safety: 10 bytes are left in the room.
    #[inline(always)]
    unsafe fn put_varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.put(v as u8 | 0x80);
            v >>= 7;
        }
        self.put(v as u8);
    }

    /// Overwrite the byte at `at` (an offset already written).
    #[inline(always)]
    pub(crate) fn set_byte(&mut self, at: usize, b: u8) {
        assert!(at < self.written());
        // Safety: `at` lies in what was written.
        unsafe { *self.start.add(at) = b };
    }

    /// The first `len` bytes of `bytes` (`len <= N`), copied as all `N`
    /// (a constant-size copy; the bytes after `len` are overwritten by
    /// what comes next, or left past the buffer's length).
    #[inline(always)]
    pub(crate) fn run<const N: usize>(&mut self, bytes: &[u8; N], len: usize) {
        self.check(N);
        // Safety: N bytes fit in the room; at most N of them count.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.p, N);
            self.p = self.p.add(len.min(N));
        }
    }

    /// A varint (at most 10 bytes).
    #[inline(always)]
    pub(crate) fn varint(&mut self, v: u64) {
        self.check(10);
        // Safety: checked above.
        unsafe { self.put_varint(v) };
    }

    /// The bytes of `prefix`, then `v` as a varint (at most `K + 10`
    /// bytes): a small message's fixed fields before its last value.
    #[inline(always)]
    pub(crate) fn prefixed_varint<const K: usize>(&mut self, prefix: [u8; K], v: u64) {
        self.check(K + 10);
        // Safety: checked above. The prefix is stored a byte at a time:
        // callers build it from constants and set a length byte in it
        // afterwards, and bytes are what this path reads back.
        unsafe {
            for b in prefix {
                self.put(b);
            }
            self.put_varint(v);
        }
    }

    /// A varint field holding a time (as [`uint_time`]): at most 11 bytes.
    #[inline(always)]
    pub(crate) fn time(&mut self, field: u32, v: u64) {
        debug_assert!(field < 16, "a one-byte tag");
        self.check(11);
        // Safety: checked above: a tag byte and at most 10 more.
        unsafe {
            self.put(((field << 3) | VARINT) as u8);
            if !(1 << 56..1 << 63).contains(&v) {
                self.put_varint(v);
                return;
            }
            std::ptr::write_unaligned(self.p as *mut u64, (spread7(v) | 0x8080_8080_8080_8080).to_le());
            *self.p.add(8) = (v >> 56) as u8;
            self.p = self.p.add(9);
        }
    }

    /// A fixed64 field (at most 18 bytes).
    #[inline(always)]
    pub(crate) fn fixed64(&mut self, field: u32, v: u64) {
        self.check(18);
        // Safety: checked above: a tag of at most 10 bytes and 8 more.
        unsafe {
            self.put_varint(((field << 3) | FIXED64) as u64);
            std::ptr::write_unaligned(self.p as *mut u64, v.to_le());
            self.p = self.p.add(8);
        }
    }

    /// A length-delimited field's tag and two reserved length bytes; give
    /// the result to [`Room::end_wide`] (as [`begin_wide`]).
    #[inline(always)]
    pub(crate) fn begin_wide(&mut self, field: u32) -> usize {
        self.check(12);
        // Safety: checked above: a tag of at most 10 bytes and 2 more (set
        // by `end_wide`).
        unsafe {
            self.put_varint(((field << 3) | LEN) as u64);
            self.p = self.p.add(2);
        }
        self.written()
    }

    /// Set the two length bytes of the field whose body starts at `body`
    /// (a [`Room::begin_wide`] result, or any offset with two length bytes
    /// before it). The room holds less than 16 KiB.
    #[inline(always)]
    pub(crate) fn end_wide(&mut self, body: usize) {
        assert!(2 <= body && body <= self.written());
        let len = self.written() - body;
        debug_assert!(len < 1 << 14);
        // Safety: `body - 2 .. body` lies in what was written (checked above).
        unsafe {
            *self.start.add(body - 2) = 0x80 | (len & 0x7f) as u8;
            *self.start.add(body - 1) = (len >> 7) as u8;
        }
    }

    /// The buffer's length grows by what was written.
    #[inline(always)]
    pub(crate) fn done(self) {
        let n = self.written();
        // Safety: the `n` bytes after the old length were written (the
        // invariant), within the capacity reserved.
        unsafe { self.buf.set_len(self.buf.len() + n) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_lengths() {
        for n in [0usize, 1, 127, 128, 300, 20_000] {
            let mut b = vec![0xaa];
            let m = begin(&mut b, 1);
            b.extend(vec![7u8; n]);
            end(&mut b, m);
            let mut want = vec![0xaa, 0x0a];
            varint(&mut want, n as u64);
            want.extend(vec![7u8; n]);
            assert_eq!(b, want, "body of {n} bytes");
        }
    }

    #[test]
    fn packet_lengths() {
        for n in [0usize, 5, 127, 128, 16383, 16384, 100_000] {
            let mut b = vec![];
            let m = begin_wide(&mut b, 1);
            b.extend(vec![7u8; n]);
            end_wide(&mut b, m);
            let mut pos = 1;
            let mut len = 0usize;
            for shift in (0..).step_by(7) {
                let byte = b[pos];
                pos += 1;
                len |= ((byte & 0x7f) as usize) << shift;
                if byte & 0x80 == 0 {
                    break;
                }
            }
            assert_eq!(len, n);
            assert_eq!(b.len() - pos, n);
        }
    }

    proptest::proptest! {
        /// A room writes the bytes the buffer primitives write, and its
        /// longest forms fit the rooms the Perfetto writer asks for.
        #[test]
        fn room_writes_what_the_primitives_write(t: u64, f: u64, v: u64, shift in 0u32..64, run_len in 0usize..=24) {
            let (t, v) = (t >> shift, v >> (63 - shift));
            let run: [u8; 24] = std::array::from_fn(|i| i as u8 + 1);
            let mut want = vec![5u8];
            let p = begin_wide(&mut want, 1);
            uint_time(&mut want, 8, t);
            want.extend_from_slice(&run[..run_len]);
            fixed64(&mut want, 47, f);
            want.extend_from_slice(&[0x22, 0x07]);
            varint(&mut want, v);
            end_wide(&mut want, p);

            let mut got = vec![5u8];
            // A slice end's room (the longest time and run fill it).
            let mut r = Room::new(&mut got, 3 + 11 + 24 + 18 + 2 + 10);
            let p = r.begin_wide(1);
            r.time(8, t);
            r.run(&run, run_len);
            r.fixed64(47, f);
            r.prefixed_varint([0x22, 0x07], v);
            r.end_wide(p);
            r.done();
            proptest::prop_assert_eq!(got, want);
        }

        /// The three-step spread puts bit `7i + j` at bit `8i + j`, as the
        /// one-group-at-a-time loop does.
        #[test]
        fn spread7_moves_each_group_to_its_byte(v: u64) {
            let mut want = 0u64;
            for i in 0..8 {
                want |= (v & (0x7f << (7 * i))) << i;
            }
            proptest::prop_assert_eq!(spread7(v), want);
        }
    }

    #[test]
    fn varints() {
        let mut all = vec![0, 1, 127, 128, 300, 1 << 35, u64::MAX - 1, u64::MAX, 1_764_547_200_123_456_789];
        // Every length, at both ends.
        for bits in 1..64 {
            all.extend([(1u64 << bits) - 1, 1 << bits, (1 << bits) + 1]);
        }
        for v in all {
            let (mut ours, mut reference) = (vec![9u8], vec![9u8]);
            varint(&mut ours, v);
            gputrace_format::varint::put(&mut reference, v);
            assert_eq!(ours, reference, "{v}");
            let (mut time, mut field) = (vec![9u8], vec![9u8]);
            uint_time(&mut time, 8, v);
            uint(&mut field, 8, v);
            assert_eq!(time, field, "{v} as a time");
        }
        let mut b = Vec::new();
        varint(&mut b, 300);
        assert_eq!(b, [0xac, 0x02]);
        b.clear();
        int(&mut b, 1, -1);
        assert_eq!(b.len(), 11);
    }

    proptest::proptest! {
        #[test]
        fn varints_are_leb128(v: u64, shift in 0u32..64, prefix in 0usize..20) {
            // Any value and any magnitude, after any number of bytes.
            let v = v >> shift;
            let (mut ours, mut reference) = (vec![7u8; prefix], vec![7u8; prefix]);
            varint(&mut ours, v);
            gputrace_format::varint::put(&mut reference, v);
            proptest::prop_assert_eq!(&ours, &reference);
            let (mut time, mut field) = (vec![7u8; prefix], vec![7u8; prefix]);
            uint_time(&mut time, 8, v);
            uint(&mut field, 8, v);
            proptest::prop_assert_eq!(time, field);
        }
    }
}
