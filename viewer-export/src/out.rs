//! A buffered, counting output and the text primitives of the JSON writer.

use std::io::{self, Write};

const FLUSH_AT: usize = 1 << 18;

/// Buffers writes to `W` in large blocks and counts the bytes.
pub(crate) struct Out<W: Write> {
    inner: W,
    pub buf: Vec<u8>,
    written: u64,
}

impl<W: Write> Out<W> {
    pub fn new(inner: W) -> Self {
        Out {
            inner,
            buf: Vec::with_capacity(FLUSH_AT + 4096),
            written: 0,
        }
    }

    /// Flush if the buffer is large; call between events.
    #[inline]
    pub fn maybe_flush(&mut self) -> io::Result<()> {
        if self.buf.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.inner.write_all(&self.buf)?;
        self.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    /// Flush everything and return the writer and the bytes written.
    pub fn finish(mut self) -> io::Result<(W, u64)> {
        self.flush()?;
        self.inner.flush()?;
        Ok((self.inner, self.written))
    }
}

/// Formatted text by key, for the parts of an event that repeat from event
/// to event (a lane's ids, a kernel's launch configuration): formatting
/// numbers costs more than copying the bytes formatted last time. `N` slots,
/// direct-mapped by `hash`; a miss formats into the slot. With each text a
/// mark: an offset into it that its formatter chose (0 from [`Self::put`]).
pub(crate) struct TextCache<K, const N: usize> {
    slots: Vec<Option<(K, Vec<u8>, usize)>>,
}

impl<K: PartialEq + Copy, const N: usize> TextCache<K, N> {
    pub fn new() -> Self {
        TextCache {
            slots: (0..N).map(|_| None).collect(),
        }
    }

    /// Append the text for `key` to `out`, formatting it with `format`
    /// (which must depend on `key` only) when the slot holds another key.
    #[inline]
    pub fn put(&mut self, out: &mut Vec<u8>, key: K, hash: u64, format: impl FnOnce(&mut Vec<u8>)) {
        let (text, _) = self.get(key, hash, |t| {
            format(t);
            0
        });
        out.extend_from_slice(text);
    }

    /// The text for `key` and its mark, formatted by `format` (which must
    /// depend on `key` only and returns the mark) when the slot holds
    /// another key.
    #[inline]
    pub fn get(&mut self, key: K, hash: u64, format: impl FnOnce(&mut Vec<u8>) -> usize) -> (&[u8], usize) {
        let slot = &mut self.slots[(hash.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize % N];
        if !matches!(slot, Some((k, _, _)) if *k == key) {
            let mut text = match slot.take() {
                Some((_, mut t, _)) => {
                    t.clear();
                    t
                }
                None => Vec::new(),
            };
            let mark = format(&mut text);
            *slot = Some((key, text, mark));
        }
        let (_, text, mark) = slot.as_ref().expect("filled above");
        (text, *mark)
    }
}

/// A kernel's launch configuration (grid, block, registers per thread,
/// shared memory), which exporters write as args, as a [`TextCache`] key,
/// with its hash.
pub(crate) type LaunchKey = ([u32; 3], [u32; 3], u32, u64);

pub(crate) fn launch_key(k: &gputrace_format::Kernel) -> (LaunchKey, u64) {
    let shared = k.static_shared_mem as u64 + k.dynamic_shared_mem as u64;
    let hash = (k.registers as u64)
        ^ shared.rotate_left(8)
        ^ (k.grid[0] as u64).rotate_left(20)
        ^ (k.grid[1] as u64).rotate_left(30)
        ^ (k.grid[2] as u64).rotate_left(36)
        ^ (k.block[0] as u64).rotate_left(44)
        ^ (k.block[1] as u64).rotate_left(52)
        ^ (k.block[2] as u64).rotate_left(58);
    ((k.grid, k.block, k.registers, shared), hash)
}

/// A GPU event's device, context and stream as a [`TextCache`] key, with its hash.
pub(crate) type GpuIdsKey = (gputrace_format::DeviceId, gputrace_format::ContextId, gputrace_format::StreamId);

pub(crate) fn gpu_ids_key(
    device: gputrace_format::DeviceId,
    context: gputrace_format::ContextId,
    stream: gputrace_format::StreamId,
) -> (GpuIdsKey, u64) {
    (
        (device, context, stream),
        (device.0 as u64) << 48 ^ (context.0 as u64) << 24 ^ stream.0 as u64,
    )
}

/// Append a few bytes one by one: a variable-length slice copy of a few
/// bytes becomes a memcpy call, which costs more.
#[inline]
fn put_small(buf: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        buf.push(b);
    }
}

/// Append the decimal digits of `v` (itoa's formatting, copied into place).
#[inline(always)]
pub(crate) fn put_u64(buf: &mut Vec<u8>, v: u64) {
    if v < 10 {
        buf.push(b'0' + v as u8);
        return;
    }
    buf.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

/// Append the decimal digits of `v`.
#[inline]
pub(crate) fn put_i64(buf: &mut Vec<u8>, v: i64) {
    put_small(buf, itoa::Buffer::new().format(v).as_bytes());
}

/// Append `ns` as microseconds with exactly three decimals (`12.345`),
/// computed with integers so no precision is lost.
#[inline]
pub(crate) fn put_micros(buf: &mut Vec<u8>, ns: u64) {
    // The integer part, then the three decimals of the fraction.
    put_u64(buf, ns / 1000);
    let frac = (ns % 1000) as u16;
    buf.extend_from_slice(&[
        b'.',
        b'0' + (frac / 100) as u8,
        b'0' + (frac / 10 % 10) as u8,
        b'0' + (frac % 10) as u8,
    ]);
}

/// Append `num / den` with three decimals, rounded down (e.g. bandwidth).
pub(crate) fn put_ratio3(buf: &mut Vec<u8>, num: u64, den: u64) {
    if den == 0 {
        buf.push(b'0');
        return;
    }
    let milli = (num as u128 * 1000 / den as u128).min(u64::MAX as u128) as u64;
    put_micros(buf, milli);
}

/// Append `s` as a JSON string literal, quotes included. Escapes `"`, `\`
/// and every control character; everything else (any Unicode) is copied
/// as UTF-8.
pub(crate) fn put_json_str(buf: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    buf.push(b'"');
    let bytes = s.as_bytes();
    let mut from = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f | 0x7f => b"",
            _ => continue,
        };
        buf.extend_from_slice(&bytes[from..i]);
        if esc.is_empty() {
            buf.extend_from_slice(&[b'\\', b'u', b'0', b'0', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]);
        } else {
            buf.extend_from_slice(esc);
        }
        from = i + 1;
    }
    buf.extend_from_slice(&bytes[from..]);
    buf.push(b'"');
}

/// A finite number as a JSON number (Rust's shortest round-trip decimal, never an
/// exponent); a non-finite one as `null`.
pub(crate) fn put_f64(buf: &mut Vec<u8>, v: f64) {
    use std::io::Write;
    if v.is_finite() {
        // Writing to a Vec cannot fail.
        let _ = write!(buf, "{v}");
    } else {
        buf.extend_from_slice(b"null");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        #[test]
        fn integers_are_written_as_rust_writes_them(v: u64, shift in 0u32..64) {
            for x in [v, v >> shift, 10u64.pow(shift % 20), 10u64.pow(shift % 20) - 1, u64::MAX] {
                let mut b = b"x".to_vec();
                put_u64(&mut b, x);
                proptest::prop_assert_eq!(String::from_utf8(b).unwrap(), format!("x{x}"));
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn micros_are_written_as_formatting_writes_them(v: u64, shift in 0u32..64) {
            for ns in [v, v >> shift, 10u64.pow(shift % 20), 10u64.pow(shift % 20) - 1, 99_999_999_999, 100_000_000_000] {
                let mut b = b"x".to_vec();
                put_micros(&mut b, ns);
                proptest::prop_assert_eq!(String::from_utf8(b).unwrap(), format!("x{}.{:03}", ns / 1000, ns % 1000));
            }
        }
    }

    #[test]
    fn text_cache_keeps_each_texts_mark() {
        // One slot: the second key evicts the first, which comes back
        // formatted again with its own mark.
        let mut c: TextCache<u8, 1> = TextCache::new();
        let mark_of = |k: u8| {
            move |t: &mut Vec<u8>| {
                t.extend(std::iter::repeat_n(b'a' + k, k as usize + 2));
                k as usize
            }
        };
        assert_eq!(c.get(1, 0, mark_of(1)), (&b"bbb"[..], 1));
        assert_eq!(c.get(1, 0, |_| unreachable!("cached")), (&b"bbb"[..], 1));
        assert_eq!(c.get(2, 0, mark_of(2)), (&b"cccc"[..], 2));
        assert_eq!(c.get(1, 0, mark_of(1)), (&b"bbb"[..], 1));
    }

    #[test]
    fn text_cache_gives_each_key_its_own_text() {
        // One slot: every key collides, and each must still get its text.
        let mut cache: TextCache<u64, 1> = TextCache::new();
        let mut out = Vec::new();
        for k in [7u64, 7, 8, 7, 8, 8] {
            cache.put(&mut out, k, 0, |t| put_u64(t, k * 11));
            out.push(b' ');
        }
        assert_eq!(out, b"77 77 88 77 88 88 ");
    }

    #[test]
    fn micros_are_exact() {
        let mut b = Vec::new();
        put_micros(&mut b, 1_790_000_000_123_456_789);
        assert_eq!(b, b"1790000000123456.789");
        b.clear();
        put_micros(&mut b, 5);
        assert_eq!(b, b"0.005");
        b.clear();
        put_ratio3(&mut b, 16 << 20, 699_050);
        assert_eq!(std::str::from_utf8(&b).unwrap(), "24.000");
    }

    #[test]
    fn escapes() {
        let mut b = Vec::new();
        put_json_str(&mut b, "a\"b\\c\n\u{1}\u{7f}ü€😀");
        assert_eq!(std::str::from_utf8(&b).unwrap(), "\"a\\\"b\\\\c\\n\\u0001\\u007fü€😀\"");
    }
}
