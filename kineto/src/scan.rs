//! Streaming the input: a byte-level scanner that cuts a document into
//! values without parsing them, so that the `traceEvents` array can be read
//! one element at a time with bounded memory, and the read buffers behind it
//! (a read-ahead thread for one-thread parsing; lending the buffer to the
//! two-thread windows of `parallel` while the next window is read).
//!
//! The scanner itself only tracks strings (with escapes) and bracket depth;
//! it does not validate. Trace events are parsed and validated in place by
//! `event` ([`Scanner::event`]); every other value it captures (the
//! metadata around the array) is handed to `serde_json`, which validates
//! it, with the offset translated back to the file.

use crate::error::{describe, Fail, Position};
use crate::event::{ParseError, RawEvent};
use std::io::{self, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender};
use std::sync::Arc;

/// Read buffer size. Memory held by the scanner is this plus the largest
/// single value captured.
const BUF_SIZE: usize = 256 * 1024;

/// Counts bytes read from the file underneath a decompressor, so errors can
/// say how far into the compressed file they happened.
pub(crate) struct CountingReader<R> {
    pub(crate) inner: R,
    pub(crate) count: Arc<AtomicU64>,
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Size of the blocks [`ReadAhead`] hands over.
const AHEAD_BLOCK: usize = 256 * 1024;
/// Blocks decompressed ahead of the parser at most (used when parsing on
/// one thread; the two-thread parse reads the next window itself).
const AHEAD_BLOCKS: usize = 4;

/// Reads (decompresses) on a thread of its own, up to [`AHEAD_BLOCKS`]
/// blocks ahead, so that inflating and parsing run at the same time.
/// Memory: at most `AHEAD_BLOCKS + 2` blocks. The thread ends at the end of
/// the input, at the first error (which is handed over in order), or when
/// this reader is dropped.
pub(crate) struct ReadAhead {
    blocks: Receiver<io::Result<Vec<u8>>>,
    /// Used blocks go back to the thread for reuse.
    spent: Sender<Vec<u8>>,
    current: Vec<u8>,
    at: usize,
    done: bool,
}

impl ReadAhead {
    pub(crate) fn new(mut inner: impl Read + Send + 'static) -> ReadAhead {
        let (to_parser, blocks) = sync_channel(AHEAD_BLOCKS);
        let (spent, reuse) = channel::<Vec<u8>>();
        let spawned = std::thread::Builder::new().name("gputrace-inflate".into()).spawn(move || loop {
            let mut block = reuse.try_recv().unwrap_or_default();
            block.resize(AHEAD_BLOCK, 0);
            let mut n = 0;
            let result = loop {
                match inner.read(&mut block[n..]) {
                    Ok(0) => break Ok(()),
                    Ok(k) => {
                        n += k;
                        if n == block.len() {
                            break Ok(());
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => break Err(e),
                }
            };
            block.truncate(n);
            let end = n == 0 || result.is_err();
            if n > 0 && to_parser.send(Ok(block)).is_err() {
                return;
            }
            if let Err(e) = result {
                let _ = to_parser.send(Err(e));
            }
            if end {
                return;
            }
        });
        let (blocks, done) = match spawned {
            Ok(_) => (blocks, false),
            Err(e) => {
                // No thread: the reader reports why, once.
                let (tx, rx) = sync_channel(1);
                let _ = tx.send(Err(e));
                (rx, false)
            }
        };
        ReadAhead {
            blocks,
            spent,
            current: Vec::new(),
            at: 0,
            done,
        }
    }
}

impl Read for ReadAhead {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at == self.current.len() {
            if self.done {
                return Ok(0);
            }
            match self.blocks.recv() {
                Ok(Ok(block)) => {
                    let old = std::mem::replace(&mut self.current, block);
                    let _ = self.spent.send(old);
                    self.at = 0;
                }
                Ok(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                // The thread ended after the last block.
                Err(_) => self.done = true,
            }
        }
        let n = buf.len().min(self.current.len() - self.at);
        buf[..n].copy_from_slice(&self.current[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Streams bytes from `inner`, tracking the absolute offset of each byte.
///
/// Invariant: `buf[pos..len]` are the unconsumed bytes, and `buf[0]` is at
/// stream offset `base`; so the next byte is at `base + pos`.
pub(crate) struct Scanner<R> {
    inner: R,
    buf: Box<[u8]>,
    pos: usize,
    len: usize,
    base: u64,
    /// Bytes of the compressed file consumed, for gzip input.
    compressed: Option<Arc<AtomicU64>>,
    /// The input is known to have ended (see [`Self::fill_to`]).
    input_done: bool,
    /// Bytes read after `buf[..len]` while `buf` was lent out (see
    /// [`Self::lend`]); they follow `buf[len - 1]` in the stream.
    spare: Spare,
    /// A read error met while reading ahead, reported when the bytes read
    /// before it have been used up (as a direct read would have).
    pending: Option<io::Error>,
    /// About how many bytes the input holds (file size, or gzip's
    /// recorded text size).
    size_hint: u64,
}

/// Reads the input ahead into the scanner's spare buffer while its main
/// buffer is lent out (see [`Scanner::lend`]).
pub(crate) struct Refill<'a, R> {
    inner: &'a mut R,
    spare: &'a mut Spare,
    input_done: &'a mut bool,
    /// The first read error, reported when the refill is given back.
    error: Option<io::Error>,
}

/// Bytes read ahead: `bytes[HEADROOM..HEADROOM + len]`. The room before
/// them takes the scanner's unconsumed bytes when the two buffers trade
/// places (see [`Scanner::give_back`]); the rest is room, zeroed once.
/// `bytes` is allocated to its exact length, so that it becomes the
/// scanner's boxed buffer without a copy.
#[derive(Default)]
struct Spare {
    bytes: Vec<u8>,
    len: usize,
}

/// Room before the bytes read ahead for the unconsumed end of the window
/// (the start of an element cut by the window's end: rarely more than a
/// few hundred bytes).
const HEADROOM: usize = 64 * 1024;

impl<R: Read> Refill<'_, R> {
    /// The first read error, if any.
    pub(crate) fn into_error(self) -> Option<io::Error> {
        self.error
    }

    /// Read until `want` bytes are spare or the input ends.
    pub(crate) fn fill(&mut self, want: usize) {
        let spare = &mut *self.spare;
        if spare.bytes.len() < HEADROOM + want {
            let mut grown = vec![0; HEADROOM + want];
            if spare.len > 0 {
                grown[HEADROOM..HEADROOM + spare.len].copy_from_slice(&spare.bytes[HEADROOM..HEADROOM + spare.len]);
            }
            spare.bytes = grown;
        }
        while !*self.input_done && self.error.is_none() && spare.len < want {
            match self.inner.read(&mut spare.bytes[HEADROOM + spare.len..HEADROOM + want]) {
                Ok(0) => *self.input_done = true,
                Ok(n) => spare.len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => self.error = Some(e),
            }
        }
    }
}

/// Makes positions while the scanner is borrowed (by a parsed event).
#[derive(Clone, Copy)]
pub(crate) struct Here {
    compressed: Option<u64>,
}

impl Here {
    pub(crate) fn at(self, offset: u64) -> Position {
        Position {
            offset,
            compressed_offset: self.compressed,
        }
    }
}

/// The shape of a value, from its first byte.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Shape {
    Object,
    Array,
    String,
    /// Number, `true`, `false`, `null` (or garbage, which serde rejects).
    Scalar,
}

impl<R: Read> Scanner<R> {
    /// `size_hint`: about how many bytes the input holds.
    pub(crate) fn new(inner: R, compressed: Option<Arc<AtomicU64>>, size_hint: u64) -> Self {
        Scanner {
            inner,
            buf: vec![0; BUF_SIZE].into_boxed_slice(),
            pos: 0,
            len: 0,
            base: 0,
            compressed,
            input_done: false,
            spare: Spare::default(),
            pending: None,
            size_hint,
        }
    }

    /// Lend out the buffered bytes (as [`Self::buffered`]) together with a
    /// [`Refill`] that reads ahead meanwhile; [`Self::give_back`] takes
    /// the bytes it read.
    pub(crate) fn lend(&mut self) -> (&[u8], usize, u64, Refill<'_, R>) {
        let refill = Refill {
            inner: &mut self.inner,
            spare: &mut self.spare,
            input_done: &mut self.input_done,
            error: None,
        };
        (&self.buf[..self.len], self.pos, self.base, refill)
    }

    /// After [`Self::lend`]: consume the buffered bytes up to `index` (0:
    /// none) and put the bytes read ahead after the unconsumed ones.
    pub(crate) fn give_back(&mut self, index: usize, error: Option<io::Error>) {
        self.consume_to(index);
        let tail = self.len - self.pos;
        if self.spare.len > 0 && tail <= HEADROOM && self.base + self.pos as u64 >= (HEADROOM - tail) as u64 {
            // Trade buffers: the unconsumed bytes go just before the spare
            // ones, in its headroom, and the spare buffer becomes the
            // scanner's (no copy of the bytes read ahead).
            let at = HEADROOM - tail;
            self.spare.bytes[at..HEADROOM].copy_from_slice(&self.buf[self.pos..self.len]);
            let ahead = std::mem::take(&mut self.spare.bytes).into_boxed_slice();
            self.spare.bytes = std::mem::replace(&mut self.buf, ahead).into_vec();
            self.base = self.base + self.pos as u64 - at as u64;
            self.pos = at;
            self.len = HEADROOM + self.spare.len;
            self.spare.len = 0;
        } else if self.spare.len > 0 {
            // Keep the unconsumed bytes, at the front, then the spare ones.
            self.buf.copy_within(self.pos..self.len, 0);
            self.base += self.pos as u64;
            self.len -= self.pos;
            self.pos = 0;
            let need = self.len + self.spare.len;
            if self.buf.len() < need {
                let mut grown = std::mem::take(&mut self.buf).into_vec();
                grown.resize(need, 0);
                self.buf = grown.into_boxed_slice();
            }
            self.buf[self.len..need].copy_from_slice(&self.spare.bytes[HEADROOM..HEADROOM + self.spare.len]);
            self.len = need;
            self.spare.len = 0;
        }
        if error.is_some() {
            self.pending = error;
        }
    }

    /// Buffer at least `want` bytes after the next one, or all that is
    /// left of the input if that is less.
    pub(crate) fn fill_to(&mut self, want: usize) -> Result<(), Fail> {
        // As large as asked (doubling would overshoot), plus the headroom
        // that the buffer read ahead has: the two trade places (see
        // `give_back`), and then each is large enough for the other's role.
        if !self.input_done && self.buf.len() < want {
            let mut grown = std::mem::take(&mut self.buf).into_vec();
            grown.resize(want + HEADROOM, 0);
            self.buf = grown.into_boxed_slice();
        }
        // A pending read error waits until the bytes before it are used up.
        while !self.input_done && self.pending.is_none() && self.len - self.pos < want {
            if !self.more()? {
                self.input_done = true;
            }
        }
        Ok(())
    }

    /// Consume the buffered bytes up to `index` (an index before the next
    /// byte consumes nothing).
    pub(crate) fn consume_to(&mut self, index: usize) {
        debug_assert!(index <= self.len);
        self.pos = index.clamp(self.pos, self.len);
    }

    /// About how many bytes the input holds.
    pub(crate) fn size_hint(&self) -> u64 {
        self.size_hint
    }

    /// Makes positions for the bytes buffered now.
    pub(crate) fn here(&self) -> Here {
        Here {
            compressed: self.compressed.as_ref().map(|c| c.load(Ordering::Relaxed)),
        }
    }

    /// Offset of the next unconsumed byte.
    pub(crate) fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// A position for error messages at `offset`.
    pub(crate) fn at(&self, offset: u64) -> Position {
        Position {
            offset,
            compressed_offset: self.compressed.as_ref().map(|c| c.load(Ordering::Relaxed)),
        }
    }

    /// Refill the buffer once it is used up. Returns false at end of input.
    fn fill(&mut self) -> Result<bool, Fail> {
        debug_assert_eq!(self.pos, self.len);
        self.base += self.len as u64;
        self.pos = 0;
        self.len = 0;
        loop {
            match self.inner.read(&mut self.buf) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.len = n;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(Fail::Read {
                        at: self.at(self.base),
                        source,
                        gzip: self.compressed.is_some(),
                    })
                }
            }
        }
    }

    /// Keep the unconsumed bytes, moved to the front of the buffer, and
    /// read more after them, doubling the buffer when it is full (so it
    /// grows to the largest trace event). False at the end of the input.
    fn more(&mut self) -> Result<bool, Fail> {
        if let Some(source) = self.pending.take() {
            return Err(Fail::Read {
                at: self.at(self.base + self.len as u64),
                source,
                gzip: self.compressed.is_some(),
            });
        }
        if self.pos > 0 {
            self.buf.copy_within(self.pos..self.len, 0);
            self.base += self.pos as u64;
            self.len -= self.pos;
            self.pos = 0;
        }
        if self.len == self.buf.len() {
            let mut grown = std::mem::take(&mut self.buf).into_vec();
            grown.resize(grown.len() * 2, 0);
            self.buf = grown.into_boxed_slice();
        }
        loop {
            match self.inner.read(&mut self.buf[self.len..]) {
                Ok(0) => {
                    self.input_done = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.len += n;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(Fail::Read {
                        at: self.at(self.base + self.len as u64),
                        source,
                        gzip: self.compressed.is_some(),
                    })
                }
            }
        }
    }

    /// Parse the trace event object that starts at the next byte (`{`,
    /// after whitespace: the caller peeked it) where it lies in the read
    /// buffer, and hand it to `f` with its start offset and a way to make
    /// positions. Syntax errors and a cut-off input end the import here;
    /// type problems go to `f`.
    pub(crate) fn event<T>(&mut self, f: impl FnOnce(Result<&RawEvent<'_>, ParseError>, u64, Here) -> T) -> Result<T, Fail> {
        let start = self.offset();
        let mut input_left = true;
        loop {
            let mut ev = RawEvent::default();
            let (result, used) = crate::skeleton::parse_prefix(&self.buf[self.pos..self.len], &mut ev);
            match result {
                Err(ParseError::Truncated) if input_left => {}
                Err(ParseError::Truncated) => {
                    return Err(Fail::Syntax {
                        at: self.at(self.base + self.len as u64),
                        what: format!("the input ends inside the trace event that starts at byte {start} (file cut off?)"),
                    })
                }
                Err(ParseError::Syntax { at, what }) => {
                    return Err(Fail::Syntax {
                        at: self.at(start + at as u64),
                        what,
                    })
                }
                result => {
                    let here = Here {
                        compressed: self.compressed.as_ref().map(|c| c.load(Ordering::Relaxed)),
                    };
                    self.pos += used;
                    return Ok(f(result.map(|()| &ev), start, here));
                }
            }
            input_left = self.more()?;
        }
    }

    /// Skip whitespace and return the next byte without consuming it
    /// (`None` at end of input).
    pub(crate) fn peek(&mut self) -> Result<Option<u8>, Fail> {
        loop {
            while self.pos < self.len {
                let b = self.buf[self.pos];
                if !matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                    return Ok(Some(b));
                }
                self.pos += 1;
            }
            if !self.fill()? {
                return Ok(None);
            }
        }
    }

    /// Skip whitespace and a UTF-8 byte order mark at the very start.
    pub(crate) fn skip_bom(&mut self) -> Result<(), Fail> {
        if self.offset() == 0 && self.peek()? == Some(0xEF) && self.buf[self.pos..self.len].starts_with(&[0xEF, 0xBB, 0xBF]) {
            self.pos += 3;
        }
        Ok(())
    }

    /// Consume `expected` (after whitespace), or fail naming what was wanted.
    pub(crate) fn expect(&mut self, expected: u8, what: &str) -> Result<(), Fail> {
        match self.peek()? {
            Some(b) if b == expected => {
                self.pos += 1;
                Ok(())
            }
            Some(b) => Err(Fail::Syntax {
                at: self.at(self.offset()),
                what: format!("expected {what}, found {}", describe(b)),
            }),
            None => Err(self.eof(what)),
        }
    }

    /// Consume one of `,` or `close` after a member or element. Returns true
    /// if it was `close` (the container ended).
    pub(crate) fn comma_or(&mut self, close: u8, what: &str) -> Result<bool, Fail> {
        match self.peek()? {
            Some(b',') => {
                self.pos += 1;
                Ok(false)
            }
            Some(b) if b == close => {
                self.pos += 1;
                Ok(true)
            }
            Some(b) => Err(Fail::Syntax {
                at: self.at(self.offset()),
                what: format!("expected ',' or '{}' {what}, found {}", close as char, describe(b)),
            }),
            None => Err(self.eof(what)),
        }
    }

    /// Consume a closing byte if it is next (empty container).
    pub(crate) fn eat(&mut self, b: u8) -> Result<bool, Fail> {
        if self.peek()? == Some(b) {
            self.pos += 1;
            return Ok(true);
        }
        Ok(false)
    }

    pub(crate) fn eof(&self, what: &str) -> Fail {
        Fail::Syntax {
            at: self.at(self.offset()),
            what: format!("the input ends where {what} was expected (file cut off?)"),
        }
    }

    /// Consume one whole JSON value, appending its bytes to `out` if given.
    /// Returns its shape and start offset. The value's own syntax is not
    /// checked here (see the module comment).
    pub(crate) fn value(&mut self, mut out: Option<&mut Vec<u8>>, what: &str) -> Result<(Shape, u64), Fail> {
        let first = match self.peek()? {
            Some(b) => b,
            None => return Err(self.eof(what)),
        };
        let start = self.offset();
        let shape = match first {
            b'{' => Shape::Object,
            b'[' => Shape::Array,
            b'"' => Shape::String,
            b',' | b']' | b'}' | b':' => {
                return Err(Fail::Syntax {
                    at: self.at(start),
                    what: format!("expected {what}, found {}", describe(first)),
                })
            }
            _ => Shape::Scalar,
        };
        // Bracket depth outside strings; a composite value ends when it
        // returns to zero, a string when its closing quote is at depth zero.
        // `escaped`: the previous buffer ended on a backslash inside a string.
        let mut depth: u32 = 0;
        let mut in_string = false;
        let mut escaped = false;
        loop {
            if self.pos == self.len && !self.fill()? {
                if shape == Shape::Scalar && self.offset() > start {
                    return Ok((shape, start));
                }
                return Err(Fail::Syntax {
                    at: self.at(self.offset()),
                    what: format!("the input ends inside {what} that starts at byte {start} (file cut off?)"),
                });
            }
            let chunk = &self.buf[self.pos..self.len];
            let mut i = 0;
            let mut done = false;
            if escaped {
                i = 1;
                escaped = false;
            }
            while i < chunk.len() {
                if in_string {
                    // Names are the bulk of the text: jump to the next quote or backslash.
                    match memchr::memchr2(b'"', b'\\', &chunk[i..]) {
                        None => i = chunk.len(),
                        Some(k) if chunk[i + k] == b'\\' => {
                            i += k + 2;
                            if i > chunk.len() {
                                // The escaped byte is the first of the next buffer.
                                i = chunk.len();
                                escaped = true;
                            }
                        }
                        Some(k) => {
                            i += k + 1;
                            in_string = false;
                            if depth == 0 {
                                done = true;
                                break;
                            }
                        }
                    }
                    continue;
                }
                if shape == Shape::Scalar {
                    while i < chunk.len() && !DELIMITER[chunk[i] as usize] {
                        i += 1;
                    }
                    if i < chunk.len() {
                        done = true;
                        break;
                    }
                    continue;
                }
                while i < chunk.len() && !STRUCTURAL[chunk[i] as usize] {
                    i += 1;
                }
                if i == chunk.len() {
                    break;
                }
                match chunk[i] {
                    b'"' => in_string = true,
                    b'{' | b'[' => depth += 1,
                    _ => {
                        // '}' or ']'
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            i += 1;
                            done = true;
                            break;
                        }
                    }
                }
                i += 1;
            }
            if let Some(out) = out.as_deref_mut() {
                out.extend_from_slice(&chunk[..i]);
            }
            self.pos += i;
            if done {
                return Ok((shape, start));
            }
        }
    }
}

/// Bytes that end a scalar value.
const DELIMITER: [bool; 256] = byte_table(b",]} \n\r\t");
/// Bytes that matter outside strings inside an object or array.
const STRUCTURAL: [bool; 256] = byte_table(b"\"{}[]");

const fn byte_table(bytes: &[u8]) -> [bool; 256] {
    let mut t = [false; 256];
    let mut i = 0;
    while i < bytes.len() {
        t[bytes[i] as usize] = true;
        i += 1;
    }
    t
}

/// Translate serde_json's line and column inside `text` into a byte index.
pub(crate) fn line_col_to_index(text: &[u8], line: usize, column: usize) -> usize {
    let mut line_start = 0;
    let mut current = 1;
    while current < line {
        match memchr::memchr(b'\n', &text[line_start..]) {
            Some(k) => {
                line_start += k + 1;
                current += 1;
            }
            None => break,
        }
    }
    (line_start + column.saturating_sub(1)).min(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lend the window, read `ahead` bytes meanwhile, consume up to `upto`
    /// and give it back; then the unconsumed bytes and the ones read ahead
    /// must follow each other, at the right stream offsets.
    fn trade(input: &[u8], first: usize, upto: usize, ahead: usize) {
        let mut sc = Scanner::new(input, None, input.len() as u64);
        sc.fill_to(first).unwrap();
        let (buffered, pos, base, mut refill) = sc.lend();
        assert_eq!((pos, base), (0, 0));
        assert!(buffered.len() >= first);
        let window = buffered.len();
        refill.fill(ahead);
        let error = refill.into_error();
        sc.give_back(upto, error);
        assert_eq!(sc.offset(), upto as u64, "consumed up to {upto}");
        let rest = &sc.buf[sc.pos..sc.len];
        assert_eq!(rest, &input[upto..window + ahead], "first {first} upto {upto} ahead {ahead}");
        assert_eq!(sc.base + sc.pos as u64, upto as u64);
    }

    #[test]
    fn read_ahead_bytes_follow_the_unconsumed_ones() {
        let input: Vec<u8> = (0..3 * BUF_SIZE + 4 * HEADROOM).map(|i| (i * 7 % 251) as u8).collect();
        // A short unconsumed end (the buffers trade places), a long one
        // (copied as before), nothing consumed, everything consumed.
        for (upto, ahead) in [
            (BUF_SIZE - 100, BUF_SIZE),
            (BUF_SIZE - 2 * HEADROOM, BUF_SIZE),
            (0, 1000),
            (BUF_SIZE, 5000),
        ] {
            trade(&input, BUF_SIZE, upto, ahead);
        }
        // Twice in a row: the traded buffer is read ahead into again.
        let mut sc = Scanner::new(&input[..], None, input.len() as u64);
        sc.fill_to(BUF_SIZE).unwrap();
        for round in 0..2u64 {
            let (buffered, pos, base, mut refill) = sc.lend();
            let end = base + buffered.len() as u64;
            let upto = buffered.len() - 10;
            assert_eq!(base + pos as u64, round * (BUF_SIZE as u64 - 10));
            refill.fill(BUF_SIZE);
            let error = refill.into_error();
            sc.give_back(upto, error);
            assert_eq!(&sc.buf[sc.pos..sc.len], &input[sc.offset() as usize..end as usize + BUF_SIZE]);
        }
    }
}
