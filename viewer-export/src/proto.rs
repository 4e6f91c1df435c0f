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
pub(crate) fn varint(buf: &mut Vec<u8>, mut v: u64) {
    buf.reserve(10);
    let len = buf.len();
    // Safety: 10 bytes of spare capacity were reserved, and a varint takes
    // at most 10; the length grows only over the bytes written.
    unsafe {
        let out = buf.as_mut_ptr().add(len);
        let mut n = 0;
        while v >= 0x80 {
            *out.add(n) = v as u8 | 0x80;
            v >>= 7;
            n += 1;
        }
        *out.add(n) = v as u8;
        buf.set_len(len + n + 1);
    }
}

/// A varint field holding a time in ns since the epoch: from 2^56 ns
/// (2.3 years) to 2^63, nine bytes, assembled in a register without a loop
/// (see [`spread7`]) and stored as one 8-byte word and a byte. Other values
/// as [`uint`]. Always inlined: as a call it cost 6% of the export.
#[inline(always)]
pub(crate) fn uint_time(buf: &mut Vec<u8>, field: u32, v: u64) {
    tag(buf, field, VARINT);
    if !(1 << 56..1 << 63).contains(&v) {
        varint(buf, v);
        return;
    }
    buf.reserve(9);
    let len = buf.len();
    // Safety: 9 bytes of spare capacity were reserved and 9 are written.
    unsafe {
        let out = buf.as_mut_ptr().add(len);
        std::ptr::write_unaligned(out as *mut u64, (spread7(v) | 0x8080_8080_8080_8080).to_le());
        *out.add(8) = (v >> 56) as u8;
        buf.set_len(len + 9);
    }
}

/// The low 56 bits of `v`, 7 to a byte: byte `i` holds bits `7i..7i+7`
/// (what PDEP with mask 0x7f7f…7f does, without needing BMI2).
#[inline(always)]
fn spread7(v: u64) -> u64 {
    let mut w = 0;
    let mut i = 0;
    while i < 8 {
        w |= (v & (0x7f << (7 * i))) << i;
        i += 1;
    }
    w
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
