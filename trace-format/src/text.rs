//! Names from a trace (kernels, hosts, markers, commands) are bytes someone
//! else chose. Printed raw, an ESC, BEL or CR in one can retitle or clear
//! the reader's terminal or forge a line of output. Every text output shows
//! them escaped instead; JSON and the binary formats keep them exact.
//!
//! [`escape`] is for one name: every control character (C0 with newline and
//! tab, DEL, C1) and the bidirectional overrides become visible escapes
//! (`\x1b`, `\n`, `\u{202e}`). [`escape_output`] and [`SafeWriter`] are for a
//! whole text output: the same, except that newlines and tabs (the layout)
//! stay, and with `keep_sgr` the colour sequences the tool itself emits
//! (`ESC [ digits ; m`).
//!
//! ```
//! use gputrace_format::text::escape;
//! assert_eq!(escape("gemm\x1b]0;owned\x07"), "gemm\\x1b]0;owned\\x07");
//! assert_eq!(escape("plain \"quoted\\path\""), "plain \"quoted\\path\"");
//! ```

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{self, Write};

/// Whether `c` is shown escaped: a control character (C0, DEL, C1) or a
/// bidirectional formatting character (which can reorder what a terminal shows).
pub fn is_unsafe(c: char) -> bool {
    c.is_control() || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `c` written visibly: `\n`, `\t`, `\r` by name, other characters below
/// U+0100 as `\xNN`, the rest as `\u{NNNN}`.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\t' => out.push_str("\\t"),
        '\r' => out.push_str("\\r"),
        c if (c as u32) < 0x100 => {
            let _ = write!(out, "\\x{:02x}", c as u32);
        }
        c => {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        }
    }
}

/// One name for a text output: every control or bidirectional character
/// escaped (newline and tab included, so a name stays on its line).
pub fn escape(name: &str) -> Cow<'_, str> {
    escape_where(name, is_unsafe, false)
}

/// A whole text output: as [`escape`], but newlines and tabs stay, and with
/// `keep_sgr` so do SGR sequences (`ESC [` digits and `;` then `m`), the
/// colours the tool emits on a terminal.
pub fn escape_output(text: &str, keep_sgr: bool) -> Cow<'_, str> {
    escape_where(text, |c| c != '\n' && c != '\t' && is_unsafe(c), keep_sgr)
}

fn escape_where(s: &str, unsafe_char: impl Fn(char) -> bool, keep_sgr: bool) -> Cow<'_, str> {
    if !s.chars().any(&unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        if keep_sgr && c == '\x1b' {
            if let Some(n) = sgr_len(rest.as_bytes()) {
                out.push_str(&rest[..n]);
                rest = &rest[n..];
                continue;
            }
        }
        if unsafe_char(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    Cow::Owned(out)
}

/// Length of the SGR sequence `ESC [ [0-9;]* m` at the start of `b`, if one is.
fn sgr_len(b: &[u8]) -> Option<usize> {
    if b.len() < 3 || b[0] != 0x1b || b[1] != b'[' {
        return None;
    }
    let params = b[2..].iter().take_while(|&&x| x.is_ascii_digit() || x == b';').count();
    (b.get(2 + params) == Some(&b'm')).then_some(3 + params)
}

/// A writer that passes text through [`escape_output`] (without SGR): for
/// text outputs written piece by piece. A UTF-8 sequence split between two
/// writes is held until its end arrives; bytes that are not UTF-8 are
/// written as `\xNN`.
pub struct SafeWriter<W: Write> {
    /// Always `Some` until `into_inner` takes it.
    inner: Option<W>,
    /// The start of a UTF-8 sequence whose end has not been written yet.
    pending: Vec<u8>,
}

impl<W: Write> SafeWriter<W> {
    /// Escape what is written to `inner`.
    pub fn new(inner: W) -> Self {
        SafeWriter {
            inner: Some(inner),
            pending: Vec::new(),
        }
    }

    /// The inner writer (anything pending is written as `\xNN` first).
    pub fn into_inner(mut self) -> io::Result<W> {
        self.flush_pending()?;
        Ok(self.inner.take().expect("the inner writer is taken only here"))
    }

    fn inner(&mut self) -> &mut W {
        self.inner.as_mut().expect("the inner writer is taken only by into_inner")
    }

    fn flush_pending(&mut self) -> io::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let mut s = String::new();
        for &b in &self.pending {
            let _ = write!(s, "\\x{b:02x}");
        }
        self.pending.clear();
        match self.inner.as_mut() {
            Some(w) => w.write_all(s.as_bytes()),
            None => Ok(()),
        }
    }
}

impl<W: Write> Write for SafeWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut bytes = std::mem::take(&mut self.pending);
        bytes.extend_from_slice(buf);
        let mut text = String::with_capacity(bytes.len());
        let mut rest = &bytes[..];
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    text.push_str(s);
                    break;
                }
                Err(e) => {
                    let good = e.valid_up_to();
                    // Safety net only: `from_utf8` said these bytes are UTF-8.
                    text.push_str(std::str::from_utf8(&rest[..good]).unwrap_or_default());
                    match e.error_len() {
                        // A sequence cut off at the end of this write: keep it for the next.
                        None => {
                            self.pending.extend_from_slice(&rest[good..]);
                            break;
                        }
                        Some(n) => {
                            for &b in &rest[good..good + n] {
                                let _ = write!(text, "\\x{b:02x}");
                            }
                            rest = &rest[good + n..];
                        }
                    }
                }
            }
        }
        self.inner().write_all(escape_output(&text, false).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner().flush()
    }
}

impl<W: Write> Drop for SafeWriter<W> {
    fn drop(&mut self) {
        let _ = self.flush_pending();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_lose_every_control_character() {
        assert_eq!(
            escape("a\x1b[2Jb\x07c\rd\ne\tf\x7fg\u{9b}h\u{202e}i"),
            "a\\x1b[2Jb\\x07c\\rd\\ne\\tf\\x7fg\\x9bh\\u{202e}i"
        );
        assert!(matches!(escape("gemm_kernel<128, \"x\\y\">"), Cow::Borrowed(_)));
        assert_eq!(escape("ünïcode ✓"), "ünïcode ✓");
    }

    #[test]
    fn outputs_keep_their_layout_and_optionally_their_colours() {
        let t = "\x1b[1mtitle\x1b[0m\n\tname \x1b]0;x\x07\x1b[31m\r\n";
        assert_eq!(escape_output(t, true), "\x1b[1mtitle\x1b[0m\n\tname \\x1b]0;x\\x07\x1b[31m\\r\n");
        assert_eq!(
            escape_output(t, false),
            "\\x1b[1mtitle\\x1b[0m\n\tname \\x1b]0;x\\x07\\x1b[31m\\r\n"
        );
    }

    #[test]
    fn the_writer_escapes_across_split_writes() {
        let mut w = SafeWriter::new(Vec::new());
        let text = "é\u{9b}x\x1by\n";
        for b in text.as_bytes() {
            w.write_all(std::slice::from_ref(b)).unwrap();
        }
        w.write_all(b"\xff\n").unwrap();
        w.write_all(b"cut \xc3").unwrap();
        let out = w.into_inner().unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "é\\x9bx\\x1by\n\\xff\ncut \\xc3");
    }
}
