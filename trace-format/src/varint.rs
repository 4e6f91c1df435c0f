//! LEB128 varints and zigzag, with bounds-checked decoding.

/// Append `v` as an unsigned LEB128 varint.
#[inline]
pub fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Zigzag-map a signed value so small magnitudes encode in few bytes.
#[inline]
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag`].
#[inline]
pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// A cursor over a byte slice. Every read is bounds-checked; a malformed
/// input yields `None`, never a panic.
#[derive(Clone, Debug)]
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// Bytes consumed so far.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Read one varint. `None` on end of input or a varint longer than 10 bytes.
    #[inline]
    pub fn varint(&mut self) -> Option<u64> {
        let buf = self.buf;
        let mut pos = self.pos;
        // Fast path: one byte.
        let first = *buf.get(pos)?;
        pos += 1;
        if first < 0x80 {
            self.pos = pos;
            return Some(first as u64);
        }
        let mut v = (first & 0x7f) as u64;
        let mut shift = 7;
        loop {
            let b = *buf.get(pos)?;
            pos += 1;
            if shift == 63 && b > 1 {
                return None; // overflows u64
            }
            v |= ((b & 0x7f) as u64) << shift;
            if b < 0x80 {
                self.pos = pos;
                return Some(v);
            }
            shift += 7;
            if shift > 63 {
                return None;
            }
        }
    }

    /// Read a varint that must fit in a `u32`.
    #[inline]
    pub fn varint_u32(&mut self) -> Option<u32> {
        self.varint().and_then(|v| u32::try_from(v).ok())
    }

    /// Take the next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    /// The unread rest.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varint_round_trips(v: u64) {
            let mut b = Vec::new();
            put(&mut b, v);
            let mut c = Cursor::new(&b);
            prop_assert_eq!(c.varint(), Some(v));
            prop_assert_eq!(c.remaining(), 0);
        }

        #[test]
        fn zigzag_round_trips(v: i64) {
            prop_assert_eq!(unzigzag(zigzag(v)), v);
        }

        #[test]
        fn garbage_never_panics(bytes: Vec<u8>) {
            let mut c = Cursor::new(&bytes);
            while c.varint().is_some() {}
        }
    }

    #[test]
    fn rejects_overlong() {
        let b = [0xffu8; 11];
        assert_eq!(Cursor::new(&b).varint(), None);
        let b = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert_eq!(Cursor::new(&b).varint(), None);
        let b = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(Cursor::new(&b).varint(), Some(u64::MAX));
    }
}
