//! Exact conversion of JSON number text to integers.
//!
//! Kineto writes microseconds, either integers (`1661203462598738`) or with
//! three decimals (`1712195495519689.047`). The latter has 19 significant
//! digits, more than an `f64` holds (its spacing at 1.7e15 is 0.25), so
//! timestamps are converted from their decimal text, never through `f64`.

/// Largest number of significant digits accepted (keeps `i128` exact).
const MAX_DIGITS: usize = 34;

/// `text.trim()`, without looking for Unicode whitespace when both ends
/// are visible ASCII (every number the parser hands over).
#[inline]
fn trim(text: &str) -> &str {
    match (text.as_bytes().first(), text.as_bytes().last()) {
        (Some(a), Some(b)) if a.is_ascii_graphic() && b.is_ascii_graphic() => text,
        _ => text.trim(),
    }
}

/// The value of JSON number `text` times `10^scale`, rounded to the nearest
/// integer (halves away from zero). `None` if `text` is not a JSON number or
/// the result does not fit.
///
/// `scale = 3` turns microseconds into nanoseconds: `"1.5"` → 1500,
/// `"12.0004"` → 12000, `"2e-3"` → 2.
pub fn scaled_integer(text: &str, scale: i32) -> Option<i128> {
    let bytes = trim(text).as_bytes();
    if let Some(v) = plain_scaled(bytes, scale) {
        return Some(v);
    }
    let (negative, rest) = match bytes.first()? {
        b'-' => (true, &bytes[1..]),
        _ => (false, bytes),
    };
    // Split into integer digits, fraction digits and exponent.
    let int_end = rest.iter().position(|b| !b.is_ascii_digit()).unwrap_or(rest.len());
    if int_end == 0 {
        return None;
    }
    let int_digits = &rest[..int_end];
    let mut i = int_end;
    let mut frac_digits: &[u8] = &[];
    if rest.get(i) == Some(&b'.') {
        let f_start = i + 1;
        let f_end = f_start
            + rest[f_start..]
                .iter()
                .position(|b| !b.is_ascii_digit())
                .unwrap_or(rest.len() - f_start);
        if f_end == f_start {
            return None;
        }
        frac_digits = &rest[f_start..f_end];
        i = f_end;
    }
    let mut exponent: i64 = 0;
    if matches!(rest.get(i), Some(b'e' | b'E')) {
        let e_text = std::str::from_utf8(&rest[i + 1..]).ok()?;
        let e_text = e_text.strip_prefix('+').unwrap_or(e_text);
        exponent = e_text.parse::<i64>().ok()?;
        if !(-400..=400).contains(&exponent) {
            return None;
        }
        i = rest.len();
    }
    if i != rest.len() {
        return None;
    }
    // value = digits * 10^(exponent - frac_len) * 10^scale
    let mut digits: Vec<u8> = int_digits.iter().chain(frac_digits).copied().collect();
    let first_nonzero = digits.iter().position(|&d| d != b'0').unwrap_or(digits.len());
    digits.drain(..first_nonzero);
    let mut power = exponent + scale as i64 - frac_digits.len() as i64;
    // Trailing zeros beyond the decimal point do not change the value.
    while power < 0 && digits.last() == Some(&b'0') {
        digits.pop();
        power += 1;
    }
    if digits.is_empty() {
        return Some(0);
    }
    let magnitude = if power >= 0 {
        if digits.len() + power as usize > MAX_DIGITS {
            return None;
        }
        let mut v: i128 = 0;
        for d in &digits {
            v = v * 10 + (d - b'0') as i128;
        }
        v * 10i128.pow(power as u32)
    } else {
        // Keep the integer part, round on the first dropped digit.
        let drop = (-power) as usize;
        if digits.len() <= drop {
            // |value| < 1: rounds to 1 only if it is at least one half.
            let half = digits.len() == drop && digits[0] >= b'5';
            i128::from(half)
        } else {
            let keep = digits.len() - drop;
            if keep > MAX_DIGITS {
                return None;
            }
            let mut v: i128 = 0;
            for d in &digits[..keep] {
                v = v * 10 + (d - b'0') as i128;
            }
            if digits[keep] >= b'5' {
                v += 1;
            }
            v
        }
    };
    Some(if negative { -magnitude } else { magnitude })
}

/// [`scaled_integer`] for the common shapes, without allocating: at most
/// 18 digits, no exponent, and no more decimals than `scale` (so nothing to
/// round). `None` means "not this shape", not "not a number".
#[inline]
fn plain_scaled(bytes: &[u8], scale: i32) -> Option<i128> {
    if !(0..=18).contains(&scale) {
        return None;
    }
    let (negative, rest) = match bytes.split_first()? {
        (b'-', rest) => (true, rest),
        _ => (false, bytes),
    };
    let mut v: u64 = 0;
    let mut i = 0;
    while let Some(d) = rest.get(i).filter(|d| d.is_ascii_digit()) {
        v = v * 10 + u64::from(d - b'0');
        i += 1;
        if i > 18 {
            return None;
        }
    }
    let int_len = i;
    if int_len == 0 {
        return None;
    }
    let mut frac_len = 0usize;
    if rest.get(i) == Some(&b'.') {
        i += 1;
        while let Some(d) = rest.get(i).filter(|d| d.is_ascii_digit()) {
            v = v * 10 + u64::from(d - b'0');
            i += 1;
            frac_len += 1;
            if int_len + frac_len > 18 {
                return None;
            }
        }
        if frac_len == 0 {
            return None;
        }
    }
    if i != rest.len() || frac_len as i32 > scale {
        return None;
    }
    // At most 18 digits and a factor of at most 10^18: fits in i128.
    let m = i128::from(v) * 10i128.pow((scale - frac_len as i32) as u32);
    Some(if negative { -m } else { m })
}

/// A non-negative JSON integer (or a number with a zero fraction, e.g.
/// `7.0`, or a decimal string such as `"7"`) as `u64`.
pub fn unsigned(text: &str) -> Option<u64> {
    let t = trim(text);
    let t = t.strip_prefix('"').and_then(|s| s.strip_suffix('"')).unwrap_or(t);
    if let Ok(v) = t.parse::<u64>() {
        return Some(v);
    }
    let exact = scaled_integer(t, 0)?;
    // Only if rounding changed nothing: compare against the value at a finer scale.
    if scaled_integer(t, 9)? != exact.checked_mul(1_000_000_000)? {
        return None;
    }
    u64::try_from(exact).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micros_to_nanos_exact() {
        assert_eq!(scaled_integer("1712195495519689.047", 3), Some(1_712_195_495_519_689_047));
        assert_eq!(scaled_integer("1661203462598738", 3), Some(1_661_203_462_598_738_000));
        assert_eq!(scaled_integer("68.0", 3), Some(68_000));
        assert_eq!(scaled_integer("0.769", 3), Some(769));
        assert_eq!(scaled_integer("1.6", 3), Some(1_600));
        assert_eq!(scaled_integer("1.6e3", 3), Some(1_600_000));
        assert_eq!(scaled_integer("2E-3", 3), Some(2));
        assert_eq!(scaled_integer("-1.5", 3), Some(-1_500));
        assert_eq!(scaled_integer("0", 3), Some(0));
        assert_eq!(scaled_integer("0.000", 3), Some(0));
    }

    #[test]
    fn extra_decimals_round_to_nearest() {
        assert_eq!(scaled_integer("12.0004", 3), Some(12_000));
        assert_eq!(scaled_integer("12.0005", 3), Some(12_001));
        assert_eq!(scaled_integer("0.0004", 3), Some(0));
        assert_eq!(scaled_integer("0.0005", 3), Some(1));
        assert_eq!(scaled_integer("0.00049", 3), Some(0));
    }

    #[test]
    fn rejects_non_numbers() {
        for t in ["", "-", "abc", "1.", ".5", "1e", "1.2.3", "0x10", "1e999", "\"1\""] {
            assert_eq!(scaled_integer(t, 3), None, "{t}");
        }
    }

    #[test]
    fn the_fast_shapes_agree_with_the_general_path() {
        for t in [
            "0",
            "-0",
            "7",
            "1712195495519689",
            "1712195495519689.047",
            "1712195495519689.04",
            "12.5",
            "-3.125",
            "999999999999999999",
            "99999999999999999.9",
            "1.0001",
            "00012",
            "1e3",
            "1.",
            "-",
            "",
        ] {
            for scale in [0, 3, 9] {
                let fast = plain_scaled(t.as_bytes(), scale);
                if let Some(v) = fast {
                    // The general path, forced: through an exponent of zero.
                    let general = scaled_integer(&format!("{t}e0"), scale);
                    assert_eq!(Some(v), general, "{t} at scale {scale}");
                }
            }
        }
        assert_eq!(plain_scaled(b"1.0001", 3), None);
        assert_eq!(plain_scaled(b"1e3", 3), None);
    }

    #[test]
    fn unsigned_ids() {
        assert_eq!(unsigned("7"), Some(7));
        assert_eq!(unsigned("7.0"), Some(7));
        assert_eq!(unsigned("\"25738\""), Some(25738));
        assert_eq!(unsigned("4294967295"), Some(4_294_967_295));
        assert_eq!(unsigned("7.5"), None);
        assert_eq!(unsigned("-1"), None);
    }
}
