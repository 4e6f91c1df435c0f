//! A validating parser for one element of `traceEvents`.
//!
//! It reads the whole element (every byte is checked against the JSON
//! grammar, and the element must be UTF-8) but keeps only what the importer
//! maps: `ph`, `cat`, `name` unescaped, and the exact text of `pid`, `tid`,
//! `ts`, `dur` and of the known `args` members. Everything else is
//! validated and skipped without building anything, which is most of a
//! Kineto trace (CPU operators with their input shapes, Python frames).
//!
//! Errors are either syntax errors (the import stops: the file is not JSON)
//! or type problems in well-formed JSON (e.g. `"cat": 7`), which the caller
//! counts as an unreadable event. A type problem is reported only once the
//! whole element has been checked for syntax.

use std::borrow::Cow;

/// The text of one JSON value exactly as written (checked to be valid JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Raw<'a>(&'a str);

impl<'a> Raw<'a> {
    /// The value's text.
    pub(crate) fn get(self) -> &'a str {
        self.0
    }

    /// A raw value from text already checked to be one JSON value (by
    /// serde_json, or by a test).
    pub(crate) fn from_checked(text: &'a str) -> Self {
        Raw(text)
    }
}

/// One element of `traceEvents`, with the fields the importer reads. A
/// member written as `null` counts as absent.
#[derive(Default, Debug)]
pub(crate) struct RawEvent<'a> {
    pub ph: Option<Cow<'a, str>>,
    pub cat: Option<Cow<'a, str>>,
    pub name: Option<Cow<'a, str>>,
    pub pid: Option<Raw<'a>>,
    pub tid: Option<Raw<'a>>,
    pub ts: Option<Raw<'a>>,
    pub dur: Option<Raw<'a>>,
    pub args: Option<RawArgs<'a>>,
    /// What `ph` and `cat` make the event, when already known (a skeleton
    /// works it out once); else the mapper works it out.
    pub class: Option<crate::class::Class>,
}

impl RawEvent<'_> {
    /// The category, for messages.
    pub(crate) fn category(&self) -> &str {
        self.cat.as_deref().unwrap_or("uncategorized")
    }
}

/// Declares [`RawArgs`] and the member name of each field, so the two
/// cannot disagree.
macro_rules! raw_args {
    ($($field:ident = $key:literal),* $(,)?) => {
        /// The indices of the fields of [`RawArgs`].
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy)]
        enum ArgField {
            $($field,)*
        }

        /// How many fields [`RawArgs`] has.
        const ARG_FIELDS: usize = [$(ArgField::$field),*].len();

        /// The `args` members the importer reads (others are validated and
        /// skipped), by [`ArgField`] index: an array, so that storing one
        /// by index is one store.
        #[derive(Default, Debug)]
        pub(crate) struct RawArgs<'a> {
            slots: [Option<Raw<'a>>; ARG_FIELDS],
        }

        impl<'a> RawArgs<'a> {
            $(
                /// The member's value, if present and not `null`.
                pub(crate) fn $field(&self) -> Option<Raw<'a>> {
                    self.slots[ArgField::$field as usize]
                }
            )*

            /// The field for member `key`, if the importer reads it.
            fn slot(&mut self, key: &str) -> Option<&mut Option<Raw<'a>>> {
                Self::index(key).and_then(|i| self.slot_at(i))
            }

            /// The index of the field for member `key` (see [`Self::slot_at`]).
            fn index(key: &str) -> Option<u8> {
                match key {
                    $($key => Some(ArgField::$field as u8),)*
                    _ => None,
                }
            }

            /// The field with index `i` (see [`Self::index`]).
            #[inline]
            pub(crate) fn slot_at(&mut self, i: u8) -> Option<&mut Option<Raw<'a>>> {
                self.slots.get_mut(usize::from(i))
            }
        }
    };
}

raw_args! {
    device = "device",
    context = "context",
    stream = "stream",
    correlation = "correlation",
    grid = "grid",
    block = "block",
    registers = "registers per thread",
    shared_memory = "shared memory",
    bytes = "bytes",
    cbid = "cbid",
    // ROCm's callback id.
    cid = "cid",
    // ROCm copies: "HtoD".
    kind = "kind",
    cuda_sync_kind = "cuda_sync_kind",
    collective = "Collective name",
    in_nelems = "In msg nelems",
    out_nelems = "Out msg nelems",
    dtype = "dtype",
    group_size = "Group size",
    pg_name = "Process Group Name",
    pg_ranks = "Process Group Ranks",
    seq_upper = "Seq",
    seq = "seq",
}

/// Why an element could not be read. Offsets are from the element's first byte.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ParseError {
    /// Not JSON (or not UTF-8): the import stops here.
    Syntax { at: usize, what: String },
    /// Well-formed JSON with a field of the wrong type (or a duplicate).
    Type { at: usize, what: String },
    /// The bytes end inside the element: more input is needed (or, at the
    /// end of the input, the file is cut off).
    Truncated,
}

/// The members of a trace event the importer reads.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Member {
    Ph,
    Cat,
    Name,
    Pid,
    Tid,
    Ts,
    Dur,
    Args,
    Other,
}

/// `name` and its closing quote as the low bytes of a little-endian word,
/// and the mask of those bytes.
const fn member_word(name: &[u8]) -> (u64, u64) {
    let mut v = 0u64;
    let mut i = 0;
    while i < name.len() {
        v |= (name[i] as u64) << (8 * i);
        i += 1;
    }
    v |= (b'"' as u64) << (8 * name.len());
    (v, (1u64 << (8 * (name.len() + 1))) - 1)
}

/// One member [`Parser::member`] recognises: its name, and the name with
/// its closing quote as a word and mask (see [`member_word`]).
struct KnownMember {
    name: &'static [u8],
    word: u64,
    mask: u64,
    member: Member,
}

const MEMBERS: [KnownMember; 8] = {
    const fn entry(name: &'static [u8], member: Member) -> KnownMember {
        let (word, mask) = member_word(name);
        KnownMember { name, word, mask, member }
    }
    [
        entry(b"ph", Member::Ph),
        entry(b"cat", Member::Cat),
        entry(b"name", Member::Name),
        entry(b"pid", Member::Pid),
        entry(b"tid", Member::Tid),
        entry(b"ts", Member::Ts),
        entry(b"dur", Member::Dur),
        entry(b"args", Member::Args),
    ]
};

/// Where a member's value went, as [`Parser`] records it for
/// `crate::skeleton`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Checked and skipped.
    None,
    /// Checked and skipped, a member of an object that is itself skipped
    /// (the `args` of a category whose args are not read): nested one
    /// level deeper than a member of the event.
    Nested,
    /// The event's field of this member (never `Args` or `Other`).
    Field(Member),
    /// The `args` field with this index ([`RawArgs::slot_at`]).
    Arg(u8),
    /// Read in a way a skeleton does not repeat (e.g. `"args": null`).
    Unfit,
}

/// One value as the parser met it: its bytes' range and where it went.
pub(crate) type Recorded = (usize, usize, Slot);

/// Most values recorded for one element (see `Parser::note`).
const MAX_RECORDED: usize = 4096;

/// Deepest nesting accepted (as serde_json's default recursion limit).
const MAX_DEPTH: usize = 128;

/// Parse the trace event object at the start of `bytes` (its first byte is `{`)
/// into `ev`, which must be empty, by the parser alone (the fast path that
/// matches kept skeletons first is `crate::skeleton::parse_prefix`). Also
/// returns the number of bytes it took (meaningful on success and for a type
/// problem, as the element was then read to its end). With `record`, the range
/// and destination of every member's value (of `args` members too) in order.
pub(crate) fn parse_prefix_recording<'a>(
    bytes: &'a [u8],
    ev: &mut RawEvent<'a>,
    record: Option<&mut Vec<Recorded>>,
) -> (Result<(), ParseError>, usize) {
    let mut p = Parser {
        b: bytes,
        i: 0,
        problem: None,
        record,
    };
    let result = p.event(ev).and_then(|()| match p.problem.take() {
        Some((at, what)) => Err(ParseError::Type { at, what }),
        None => Ok(()),
    });
    (result, p.i)
}

/// Check the value at `at` in `bytes` as a string, a number or any value
/// (`kind`), for `crate::skeleton`: the index after it and, for a string,
/// its content (unescaped). Any error is `None`.
#[inline(always)]
pub(crate) fn value_at(bytes: &[u8], at: usize, kind: ValueKind, nested: bool) -> Option<(usize, Option<Cow<'_, str>>)> {
    let mut p = Parser {
        b: bytes,
        i: at,
        problem: None,
        record: None,
    };
    let content = match kind {
        ValueKind::String => {
            if p.peek() != Some(b'"') {
                return None;
            }
            Some(p.string().ok()?)
        }
        ValueKind::Number => {
            if !matches!(p.peek(), Some(b'-' | b'0'..=b'9')) {
                return None;
            }
            p.number().ok()?;
            None
        }
        ValueKind::Any => {
            p.skip_value_within(MAX_DEPTH - usize::from(nested)).ok()?;
            None
        }
    };
    Some((p.i, content))
}

/// `bytes[from..to]` as text, for the bounds of a value [`value_at`]
/// checked.
#[inline(always)]
pub(crate) fn value_text(bytes: &[u8], from: usize, to: usize) -> &str {
    Parser {
        b: bytes,
        i: to,
        problem: None,
        record: None,
    }
    .text(from, to)
}

/// What [`value_at`] checks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ValueKind {
    String,
    Number,
    Any,
}

/// The index of the first byte at or after `i` that is not JSON whitespace.
pub(crate) fn skip_ws(bytes: &[u8], i: usize) -> usize {
    let mut p = Parser {
        b: bytes,
        i: i.min(bytes.len()),
        problem: None,
        record: None,
    };
    p.ws();
    p.i
}

/// Parse `element`, which must hold exactly one trace event object.
#[cfg(test)]
pub(crate) fn parse_event(element: &[u8]) -> Result<RawEvent<'_>, ParseError> {
    let mut ev = RawEvent::default();
    let (r, used) = parse_prefix_recording(element, &mut ev, None);
    r?;
    let mut p = Parser {
        b: element,
        i: used,
        problem: None,
        record: None,
    };
    p.ws();
    if p.i != element.len() {
        return Err(p.syntax(format!("unexpected {} after the trace event", describe_at(element, p.i))));
    }
    Ok(ev)
}

/// Invariant: `i <= b.len()`, and every string passed over so far was
/// checked to be UTF-8 (outside strings the grammar admits only ASCII), so
/// any range of `b[..i]` that starts and ends at an ASCII byte is text.
struct Parser<'a, 'r> {
    b: &'a [u8],
    i: usize,
    /// The first type problem (offset, message); syntax is still checked after it.
    problem: Option<(usize, String)>,
    /// Where to record each member's value, if anywhere.
    record: Option<&'r mut Vec<Recorded>>,
}

/// Bytes that stop the fast run through a string: the quote, the
/// backslash, the control characters JSON forbids inside strings, and
/// non-ASCII bytes (whose UTF-8 is then checked).
const STRING_STOP: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 256 {
        t[c] = c < 0x20 || c >= 0x80 || c == b'"' as usize || c == b'\\' as usize;
        c += 1;
    }
    t
};

impl<'a> Parser<'a, '_> {
    #[inline]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// Skip JSON whitespace (space, tab, line feed, carriage return). No
    /// whitespace, or a single space (after most `:` and `,`), costs one or
    /// two byte compares; longer runs (Kineto indents its events: a line
    /// feed and four to eight spaces) are passed eight bytes at a time,
    /// without a branch per byte.
    #[inline]
    fn ws(&mut self) {
        match self.b.get(self.i) {
            Some(&c) if c > b' ' => return,
            Some(b' ') if self.b.get(self.i + 1).is_some_and(|&c| c > b' ') => {
                self.i += 1;
                return;
            }
            _ => {}
        }
        while let Some(w) = self.b.get(self.i..self.i + 8) {
            let stop = not_ws(u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
            if stop != 0 {
                self.i += stop.trailing_zeros() as usize / 8;
                return;
            }
            self.i += 8;
        }
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    #[cold]
    fn syntax(&self, what: String) -> ParseError {
        ParseError::Syntax { at: self.i, what }
    }

    /// What was wanted at `i`; running out of bytes is [`ParseError::Truncated`].
    #[cold]
    fn expected(&self, what: &str) -> ParseError {
        match self.peek() {
            None => ParseError::Truncated,
            Some(_) => self.syntax(format!("expected {what}, found {}", describe_at(self.b, self.i))),
        }
    }

    /// `b[start..end]` as text.
    #[inline]
    fn text(&self, start: usize, end: usize) -> &'a str {
        let bytes = &self.b[start..end];
        debug_assert!(std::str::from_utf8(bytes).is_ok());
        // Safety: callers pass the bounds of a value or of a string's
        // content that was read completely, so the range starts and ends
        // at ASCII bytes and holds only checked strings and ASCII (the
        // struct invariant).
        unsafe { std::str::from_utf8_unchecked(bytes) }
    }

    /// Note a type problem (the first one wins).
    #[cold]
    fn problem(&mut self, at: usize, what: String) {
        if self.problem.is_none() {
            self.problem = Some((at, what));
        }
    }

    /// Parse into `ev` (empty), in place: the struct is large.
    fn event(&mut self, ev: &mut RawEvent<'a>) -> Result<(), ParseError> {
        if self.peek() != Some(b'{') {
            return Err(self.expected("'{'"));
        }
        if self.open_object() {
            return Ok(());
        }
        loop {
            self.ws();
            let member = self.member()?;
            self.ws();
            let at = self.i;
            let mut slot = match member {
                Member::Args | Member::Other => Slot::None,
                field => Slot::Field(field),
            };
            // An `args` object's members are recorded one by one, not it.
            let mut members_recorded = false;
            match member {
                Member::Ph => self.text_field(&mut ev.ph, "ph")?,
                Member::Cat => self.text_field(&mut ev.cat, "cat")?,
                Member::Name => self.text_field(&mut ev.name, "name")?,
                Member::Pid => self.raw_field(&mut ev.pid, "pid")?,
                Member::Tid => self.raw_field(&mut ev.tid, "tid")?,
                Member::Ts => self.raw_field(&mut ev.ts, "ts")?,
                Member::Dur => self.raw_field(&mut ev.dur, "dur")?,
                // Only some categories read their args: the others' are
                // checked and skipped (when the category came first, as
                // Kineto writes it).
                Member::Args if ev.cat.as_deref().is_some_and(|c| !crate::class::reads_args(c)) => {
                    self.skip_value()?;
                    if self.record.is_some() && self.b[at] == b'{' {
                        // Checked whole above.
                        self.record_skipped_object(at);
                        members_recorded = true;
                    }
                }
                Member::Args => match self.peek() {
                    Some(b'{') => {
                        if ev.args.is_some() {
                            self.problem(at, "duplicate field \"args\"".into());
                        }
                        self.args(ev.args.insert(RawArgs::default()))?;
                        members_recorded = true;
                    }
                    Some(b'n') => {
                        self.null()?;
                        slot = Slot::Unfit;
                    }
                    _ => {
                        self.skip_value()?;
                        self.problem(at, "\"args\" is not an object".into());
                    }
                },
                _ => self.skip_value()?,
            }
            if !members_recorded {
                self.note((at, self.i, slot));
            }
            if !self.more_members()? {
                return Ok(());
            }
        }
    }

    /// Consume the `{` at `i` and the whitespace after it; true if the
    /// object is empty (its `}` is consumed too).
    #[inline(always)]
    fn open_object(&mut self) -> bool {
        self.i += 1;
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return true;
        }
        false
    }

    /// After a member: true for `,` (another member follows), false for the
    /// closing `}`; both consumed.
    #[inline(always)]
    fn more_members(&mut self) -> Result<bool, ParseError> {
        // Kineto separates members on a line by ", ": one load for both.
        if self.b.get(self.i..self.i + 2) == Some(b", ") {
            self.i += 2;
            return Ok(true);
        }
        self.ws();
        match self.peek() {
            Some(b',') => {
                self.i += 1;
                Ok(true)
            }
            Some(b'}') => {
                self.i += 1;
                Ok(false)
            }
            _ => Err(self.expected("',' or '}' after a member")),
        }
    }

    fn args(&mut self, args: &mut RawArgs<'a>) -> Result<(), ParseError> {
        if self.open_object() {
            return Ok(());
        }
        loop {
            self.ws();
            let key = self.key()?;
            self.ws();
            let at = self.i;
            match args.slot(&key) {
                Some(slot) => {
                    let duplicate = slot.is_some();
                    let start = self.i;
                    self.skip_value()?;
                    let text = self.text(start, self.i);
                    *slot = (text != "null").then_some(Raw(text));
                    if duplicate {
                        self.problem(at, format!("duplicate field \"{key}\" in \"args\""));
                    }
                    if self.record.is_some() {
                        self.note((at, self.i, RawArgs::index(&key).map_or(Slot::Unfit, Slot::Arg)));
                    }
                }
                None => {
                    self.skip_value()?;
                    self.note((at, self.i, Slot::None));
                }
            }
            if !self.more_members()? {
                return Ok(());
            }
        }
    }

    /// Record the members of the object at `at`, already checked, as
    /// [`Slot::Nested`] values.
    #[cold]
    fn record_skipped_object(&mut self, at: usize) {
        let mut p = Parser {
            b: self.b,
            i: at,
            problem: None,
            record: None,
        };
        let mut values = Vec::new();
        let ok = (|| -> Result<(), ParseError> {
            if p.open_object() {
                return Ok(());
            }
            loop {
                p.ws();
                p.key()?;
                p.ws();
                let from = p.i;
                p.skip_value()?;
                values.push((from, p.i, Slot::Nested));
                if !p.more_members()? {
                    return Ok(());
                }
            }
        })();
        match ok {
            Ok(()) => values.into_iter().for_each(|v| self.note(v)),
            Err(_) => self.note((at, self.i, Slot::Unfit)),
        }
    }

    /// Record one value, if recording: at most [`MAX_RECORDED`] (an
    /// element with more values gets no skeleton, and the record stays
    /// small whatever the element's size).
    #[inline]
    fn note(&mut self, value: Recorded) {
        if let Some(record) = self.record.as_deref_mut() {
            match record.len() {
                n if n < MAX_RECORDED => record.push(value),
                MAX_RECORDED => record.push((0, 0, Slot::Unfit)),
                _ => {}
            }
        }
    }

    /// A member name and its ':'.
    #[inline(always)]
    fn key(&mut self) -> Result<Cow<'a, str>, ParseError> {
        self.name_quote()?;
        let key = self.string()?;
        self.colon()?;
        Ok(key)
    }

    /// Check that a member name starts at `i`.
    #[inline(always)]
    fn name_quote(&self) -> Result<(), ParseError> {
        if self.peek() != Some(b'"') {
            return Err(self.expected("a member name in double quotes"));
        }
        Ok(())
    }

    /// The ':' after a member name (whitespace before it allowed).
    #[inline(always)]
    fn colon(&mut self) -> Result<(), ParseError> {
        // Kineto writes ": " after a name: one load for both.
        if self.b.get(self.i..self.i + 2) == Some(b": ") {
            self.i += 2;
            return Ok(());
        }
        self.ws();
        if self.peek() != Some(b':') {
            return Err(self.expected("':' after a member name"));
        }
        self.i += 1;
        Ok(())
    }

    /// A member name of the event object and its ':'. The names Kineto
    /// writes are recognised from one 8-byte load when they are written
    /// plainly; any other name (or one with escapes) is read as a string.
    #[inline]
    fn member(&mut self) -> Result<Member, ParseError> {
        self.name_quote()?;
        let quick = self.b.get(self.i + 1..self.i + 9).and_then(|w| {
            let w = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
            MEMBERS.iter().find(|k| w & k.mask == k.word)
        });
        let member = match quick {
            Some(k) => {
                // The name, then its closing quote.
                self.i += k.name.len() + 2;
                k.member
            }
            None => {
                let name = self.string()?;
                MEMBERS
                    .iter()
                    .find(|k| k.name == name.as_bytes())
                    .map_or(Member::Other, |k| k.member)
            }
        };
        self.colon()?;
        Ok(member)
    }

    /// A string member (`ph`, `cat`, `name`); `null` leaves it absent.
    #[inline(always)]
    fn text_field(&mut self, slot: &mut Option<Cow<'a, str>>, field: &str) -> Result<(), ParseError> {
        let at = self.i;
        match self.peek() {
            Some(b'"') => {
                let v = self.string()?;
                if slot.is_some() {
                    self.problem(at, format!("duplicate field \"{field}\""));
                }
                *slot = Some(v);
            }
            Some(b'n') => self.null()?,
            _ => {
                self.skip_value()?;
                self.problem(at, format!("\"{field}\" is not a string"));
            }
        }
        Ok(())
    }

    /// A member kept as text; `null` leaves it absent.
    #[inline(always)]
    fn raw_field(&mut self, slot: &mut Option<Raw<'a>>, field: &str) -> Result<(), ParseError> {
        let start = self.i;
        match self.peek() {
            Some(b'-' | b'0'..=b'9') => self.number()?,
            _ => self.skip_value()?,
        }
        let text = self.text(start, self.i);
        if slot.is_some() {
            self.problem(start, format!("duplicate field \"{field}\""));
        }
        *slot = (text != "null").then_some(Raw(text));
        Ok(())
    }

    fn null(&mut self) -> Result<(), ParseError> {
        self.literal(b"null")
    }

    fn literal(&mut self, word: &[u8]) -> Result<(), ParseError> {
        let rest = &self.b[self.i..];
        if rest.starts_with(word) {
            self.i += word.len();
            return Ok(());
        }
        if word.starts_with(rest) {
            return Err(ParseError::Truncated);
        }
        // Point at the first byte that differs.
        let ok = self.b[self.i..].iter().zip(word).take_while(|(a, b)| a == b).count();
        self.i += ok;
        Err(self.expected(&format!("'{}'", word[ok] as char)))
    }

    /// A string starting at the current quote: its content, unescaped.
    #[inline(always)]
    fn string(&mut self) -> Result<Cow<'a, str>, ParseError> {
        let start = self.i + 1;
        let escaped = self.pass_string()?;
        let content = self.text(start, self.i - 1);
        if !escaped {
            return Ok(Cow::Borrowed(content));
        }
        unescape(content)
            .map(Cow::Owned)
            .map_err(|(k, what)| ParseError::Syntax { at: start + k, what })
    }

    /// Check the string starting at the current quote and move past it.
    /// Returns whether it holds escapes.
    #[inline(always)]
    fn pass_string(&mut self) -> Result<bool, ParseError> {
        let b = self.b;
        let start = self.i + 1;
        let mut j = start;
        let mut escaped = false;
        let mut non_ascii = false;
        loop {
            j = plain_run(b, j);
            match b.get(j) {
                Some(b'"') => break,
                Some(b'\\') => {
                    escaped = true;
                    j = self.escape(j)?;
                }
                Some(&c) if c >= 0x80 => {
                    non_ascii = true;
                    j += 1;
                }
                Some(_) => {
                    self.i = j;
                    return Err(self.syntax("control character (\\u0000-\\u001F) inside a string".into()));
                }
                None => return Err(ParseError::Truncated),
            }
        }
        if non_ascii {
            if let Err(e) = std::str::from_utf8(&b[start..j]) {
                self.i = start + e.valid_up_to();
                return Err(self.syntax("invalid UTF-8 (JSON text must be UTF-8)".into()));
            }
        }
        self.i = j + 1;
        Ok(escaped)
    }

    /// Check the escape at `j` (a backslash); the index after it.
    #[cold]
    #[inline(never)]
    fn escape(&mut self, j: usize) -> Result<usize, ParseError> {
        match self.b.get(j + 1) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(j + 2),
            Some(b'u') => {
                for k in j + 2..j + 6 {
                    match self.b.get(k) {
                        Some(c) if c.is_ascii_hexdigit() => {}
                        Some(_) => {
                            self.i = k;
                            return Err(self.syntax("invalid \\u escape (four hex digits expected)".into()));
                        }
                        None => return Err(ParseError::Truncated),
                    }
                }
                Ok(j + 6)
            }
            Some(_) => {
                self.i = j + 1;
                Err(self.syntax("invalid escape".into()))
            }
            None => Err(ParseError::Truncated),
        }
    }

    /// A number, checked against JSON's grammar.
    #[inline(always)]
    fn number(&mut self) -> Result<(), ParseError> {
        let b = self.b;
        let mut j = self.i;
        if b.get(j) == Some(&b'-') {
            j += 1;
        }
        let digits = |j: usize| digit_run(b, j);
        match b.get(j) {
            Some(b'0') => j += 1,
            Some(b'1'..=b'9') => j = digits(j + 1),
            _ => {
                self.i = j;
                return Err(self.expected("a digit"));
            }
        }
        if b.get(j) == Some(&b'.') {
            let k = digits(j + 1);
            if k == j + 1 {
                self.i = k;
                return Err(self.expected("a digit after the decimal point"));
            }
            j = k;
        }
        if matches!(b.get(j), Some(b'e' | b'E')) {
            j += 1;
            if matches!(b.get(j), Some(b'+' | b'-')) {
                j += 1;
            }
            let k = digits(j);
            if k == j {
                self.i = k;
                return Err(self.expected("a digit in the exponent"));
            }
            j = k;
        }
        self.i = j;
        Ok(())
    }

    /// Check and skip one value of any kind, without recursion.
    #[inline]
    fn skip_value(&mut self) -> Result<(), ParseError> {
        self.skip_value_within(MAX_DEPTH)
    }

    /// [`Self::skip_value`], nesting at most `max_depth` containers.
    fn skip_value_within(&mut self, max_depth: usize) -> Result<(), ParseError> {
        // Open containers: bit d of `objects` says whether the container
        // at depth d (from 0) is an object.
        let mut objects: u128 = 0;
        let mut depth = 0usize;
        'value: loop {
            self.ws();
            match self.peek() {
                Some(b'"') => {
                    // Skipped strings need no unescaping, only checking.
                    self.pass_string()?;
                }
                Some(b'-' | b'0'..=b'9') => self.number()?,
                Some(b't') => self.literal(b"true")?,
                Some(b'f') => self.literal(b"false")?,
                Some(b'n') => self.literal(b"null")?,
                Some(open @ (b'{' | b'[')) => {
                    if depth == max_depth {
                        return Err(self.syntax(format!("nesting deeper than {MAX_DEPTH} levels")));
                    }
                    self.i += 1;
                    self.ws();
                    let object = open == b'{';
                    let close = if object { b'}' } else { b']' };
                    if self.peek() == Some(close) {
                        self.i += 1;
                    } else {
                        objects = (objects & !(1 << depth)) | (u128::from(object) << depth);
                        depth += 1;
                        if object {
                            self.skip_key()?;
                        }
                        continue 'value;
                    }
                }
                _ => return Err(self.expected("a value")),
            }
            // After a value: close containers or move to the next member.
            loop {
                if depth == 0 {
                    return Ok(());
                }
                self.ws();
                let object = objects >> (depth - 1) & 1 == 1;
                match self.peek() {
                    Some(b',') => {
                        self.i += 1;
                        if object {
                            self.ws();
                            self.skip_key()?;
                        }
                        continue 'value;
                    }
                    Some(b'}') if object => {
                        self.i += 1;
                        depth -= 1;
                    }
                    Some(b']') if !object => {
                        self.i += 1;
                        depth -= 1;
                    }
                    _ => {
                        return Err(self.expected(if object {
                            "',' or '}' after a member"
                        } else {
                            "',' or ']' after an element"
                        }))
                    }
                }
            }
        }
    }

    /// Check and skip a member name and its ':'.
    fn skip_key(&mut self) -> Result<(), ParseError> {
        self.name_quote()?;
        self.pass_string()?;
        self.colon()?;
        Ok(())
    }
}

/// The end of the run of ASCII digits at `j`.
#[inline(always)]
pub(crate) fn digit_run(b: &[u8], mut j: usize) -> usize {
    const HIGH_NIBBLES: u64 = u64::from_le_bytes([0xF0; 8]);
    const THREES: u64 = u64::from_le_bytes([0x30; 8]);
    const SIXES: u64 = u64::from_le_bytes([0x06; 8]);
    // Eight at a time: a byte is a digit iff it and it plus 6 both have
    // high nibble 3. A carry out of a byte (>= 0xFA) only disturbs the
    // bytes above it, so the lowest flagged byte is exact.
    while let Some(w) = b.get(j..j + 8) {
        let w = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
        let not_digit = ((w & HIGH_NIBBLES) ^ THREES) | ((w.wrapping_add(SIXES) & HIGH_NIBBLES) ^ THREES);
        if not_digit != 0 {
            return j + not_digit.trailing_zeros() as usize / 8;
        }
        j += 8;
    }
    while b.get(j).is_some_and(u8::is_ascii_digit) {
        j += 1;
    }
    j
}

/// The high bit of each byte of `w` (eight input bytes, little-endian)
/// that is not JSON whitespace. Exact per byte: no carry crosses a byte
/// (`(x & 0x7f) + 0x7f` stays below 0x100), so every flag is true, not
/// only the lowest.
#[inline(always)]
fn not_ws(w: u64) -> u64 {
    const LOW7: u64 = u64::from_le_bytes([0x7F; 8]);
    const HIGH: u64 = u64::from_le_bytes([0x80; 8]);
    // High bit set iff the byte differs from `c`.
    let differs = |c: u8| {
        let x = w ^ u64::from_le_bytes([c; 8]);
        ((x & LOW7).wrapping_add(LOW7)) | x
    };
    differs(b' ') & differs(b'\n') & differs(b'\r') & differs(b'\t') & HIGH
}

/// The end of the run of plain string bytes (not [`STRING_STOP`]) at `j`.
#[inline(always)]
pub(crate) fn plain_run(b: &[u8], mut j: usize) -> usize {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_le_bytes([0x80; 8]);
    const QUOTE: u64 = u64::from_le_bytes([b'"'; 8]);
    const BACKSLASH: u64 = u64::from_le_bytes([b'\\'; 8]);
    const SPACE: u64 = u64::from_le_bytes([0x20; 8]);
    // Eight bytes at a time. For each test the lowest flagged byte is
    // exact (a borrow can only flag bytes above a true one), so the lowest
    // flag of all is the first stop byte.
    while let Some(w) = b.get(j..j + 8) {
        let w = u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
        let zero_in = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
        let stops = zero_in(w ^ QUOTE) | zero_in(w ^ BACKSLASH) | (w.wrapping_sub(SPACE) & !w & HIGH) | (w & HIGH);
        if stops != 0 {
            return j + stops.trailing_zeros() as usize / 8;
        }
        j += 8;
    }
    while j < b.len() && !STRING_STOP[b[j] as usize] {
        j += 1;
    }
    j
}

/// Decode the escapes of string content already checked by
/// [`Parser::escape`]. On a lone surrogate: (offset in `content`, message).
fn unescape(content: &str) -> Result<String, (usize, String)> {
    let b = content.as_bytes();
    let mut out = String::with_capacity(content.len());
    let mut i = 0;
    let hex = |k: usize| u32::from_str_radix(&content[k..k + 4], 16).unwrap_or(0);
    while i < b.len() {
        let Some(k) = memchr::memchr(b'\\', &b[i..]) else {
            out.push_str(&content[i..]);
            break;
        };
        out.push_str(&content[i..i + k]);
        i += k;
        let c = match b[i + 1] {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            _ => {
                // 'u': four hex digits, checked by the parser.
                let first = hex(i + 2);
                let at = i;
                i += 6;
                let code = match first {
                    0xD800..=0xDBFF => {
                        if !(b.get(i) == Some(&b'\\') && b.get(i + 1) == Some(&b'u')) {
                            return Err((at, "lone leading surrogate in \\u escape".into()));
                        }
                        let second = hex(i + 2);
                        if !(0xDC00..=0xDFFF).contains(&second) {
                            return Err((i, "invalid trailing surrogate in \\u escape".into()));
                        }
                        i += 6;
                        0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                    }
                    0xDC00..=0xDFFF => return Err((at, "lone trailing surrogate in \\u escape".into())),
                    c => c,
                };
                // Not a surrogate, so a valid scalar value.
                out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                continue;
            }
        };
        out.push(c);
        i += 2;
    }
    Ok(out)
}

/// The byte at `i` for a message.
fn describe_at(b: &[u8], i: usize) -> String {
    match b.get(i) {
        Some(&c) => crate::error::describe(c),
        None => "the end".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> RawEvent<'_> {
        parse_event(text.as_bytes()).unwrap_or_else(|e| panic!("{text}: {e:?}"))
    }

    fn syntax_at(text: &str) -> usize {
        match parse_event(text.as_bytes()) {
            Err(ParseError::Syntax { at, .. }) => at,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn reads_the_mapped_fields() {
        let ev = ok(
            r#"{"ph": "X", "cat": "kernel", "name": "a\"b\\c\u00e9\ud83d\ude00", "pid": 0, "tid": "stream 7",
               "ts": 1712195495519689.047, "dur": 2.5e0, "other": [1, {"x": [true, false, null]}, "s"],
               "args": {"device": 1, "grid": [1, 2, 3], "Collective name": "allreduce", "skip": {"a": []}, "seq": null}}"#,
        );
        assert_eq!(ev.ph.as_deref(), Some("X"));
        assert_eq!(ev.cat.as_deref(), Some("kernel"));
        assert_eq!(ev.name.as_deref(), Some("a\"b\\cé😀"));
        assert_eq!(ev.pid.map(Raw::get), Some("0"));
        assert_eq!(ev.tid.map(Raw::get), Some("\"stream 7\""));
        assert_eq!(ev.ts.map(Raw::get), Some("1712195495519689.047"));
        assert_eq!(ev.dur.map(Raw::get), Some("2.5e0"));
        let a = ev.args.unwrap();
        assert_eq!(a.device().map(Raw::get), Some("1"));
        assert_eq!(a.grid().map(Raw::get), Some("[1, 2, 3]"));
        assert_eq!(a.collective().map(Raw::get), Some("\"allreduce\""));
        assert_eq!(a.seq(), None);
        assert!(matches!(ok(r#"{"name": "plain"}"#).name, Some(Cow::Borrowed("plain"))));
        // The args of categories that do not read them are only checked.
        assert!(ok(r#"{"cat": "cpu_op", "args": {"device": 1}}"#).args.is_none());
        assert!(ok(r#"{"args": {"device": 1}, "cat": "cpu_op"}"#).args.is_some());
        assert!(ok(r#"{"cat": "cuda_runtime", "args": {"cbid": 1}}"#).args.is_some());
        assert_eq!(syntax_at(r#"{"cat": "cpu_op", "args": {"device": 1,}}"#), 39);
        assert!(ok("{}").ph.is_none());
        // A name written with an escape is still recognised (the slow path).
        assert_eq!(ok(r#"{"p\u0068": "X", "args\u0000": 1}"#).ph.as_deref(), Some("X"));
        assert!(ok(r#"{"ph": null, "args": null, "ts": null}"#).ts.is_none());
    }

    #[test]
    fn syntax_errors_point_at_the_bad_byte() {
        assert_eq!(syntax_at(r#"{"ts": 13x0.5}"#), 9);
        assert_eq!(syntax_at(r#"{"ts": 1.}"#), 9);
        assert_eq!(syntax_at(r#"{"ts": 01}"#), 8);
        assert_eq!(syntax_at(r#"{"ts": -}"#), 8);
        assert_eq!(syntax_at(r#"{"ts": 1e}"#), 9);
        assert_eq!(syntax_at(r#"{"a": tru}"#), 9);
        assert_eq!(syntax_at(r#"{"a": [1 2]}"#), 9);
        assert_eq!(syntax_at(r#"{"a": {"b" 1}}"#), 11);
        assert_eq!(syntax_at(r#"{"a": {1: 1}}"#), 7);
        assert_eq!(syntax_at(r#"{"a": "x\qy"}"#), 9);
        assert_eq!(syntax_at(r#"{"a": "\u12g4"}"#), 11);
        assert_eq!(syntax_at("{\"a\": \"x\ty\"}"), 8);
        assert_eq!(syntax_at(r#"{"name": "\ud800"}"#), 10);
        assert_eq!(syntax_at(r#"{"a": 1,}"#), 8);
        for cut in [
            r#"{"a": 1"#,
            r#"{"a": "x"#,
            r#"{"a": "\u12"#,
            r#"{"a": nu"#,
            r#"{"a": 1."#,
            r#"{"a": [{"#,
            "{",
        ] {
            assert_eq!(parse_event(cut.as_bytes()).unwrap_err(), ParseError::Truncated, "{cut}");
        }
        assert_eq!(syntax_at(r#"{"a": [1, 2}"#), 11);
        assert_eq!(syntax_at(r#"{"a": 1} x"#), 9);
        assert_eq!(
            syntax_at(&format!("{{\"a\": {}1{}}}", "[".repeat(200), "]".repeat(200))),
            6 + MAX_DEPTH
        );
        match parse_event(b"{\"a\": \"\xff\"}") {
            Err(ParseError::Syntax { at: 7, .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn word_at_a_time_runs_match_byte_loops() {
        // Every byte value at every position of a 20-byte run.
        for pos in 0..20 {
            for v in 0..=255u8 {
                let mut b = vec![b'7'; 20];
                b[pos] = v;
                let digits = b.iter().position(|c| !c.is_ascii_digit()).unwrap_or(20);
                assert_eq!(digit_run(&b, 0), digits, "{pos} {v:#x}");
                let mut s = vec![b'a'; 20];
                s[pos] = v;
                let plain = s.iter().position(|&c| STRING_STOP[c as usize]).unwrap_or(20);
                assert_eq!(plain_run(&s, 0), plain, "{pos} {v:#x}");
                // Whitespace runs of every mix, ended by any byte.
                for fill in [b' ', b'\n', b'\r', b'\t'] {
                    let mut w: Vec<u8> = (0..20).map(|i| [b' ', b'\n', fill, b'\t', b'\r'][i % 5]).collect();
                    w[pos] = v;
                    let run = w.iter().position(|c| !matches!(c, b' ' | b'\n' | b'\r' | b'\t')).unwrap_or(20);
                    let mut p = Parser {
                        b: &w,
                        i: 0,
                        problem: None,
                        record: None,
                    };
                    p.ws();
                    assert_eq!(p.i, run, "{pos} {v:#x}");
                }
            }
        }
    }

    #[test]
    fn type_problems_come_after_the_syntax_check() {
        match parse_event(br#"{"cat": 7, "name": "x"}"#) {
            Err(ParseError::Type { at: 8, what }) => assert!(what.contains("\"cat\""), "{what}"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            parse_event(br#"{"cat": 7, "name": x}"#),
            Err(ParseError::Syntax { at: 19, .. })
        ));
        assert!(matches!(parse_event(br#"{"args": 3}"#), Err(ParseError::Type { .. })));
        assert!(matches!(parse_event(br#"{"ph": "X", "ph": "i"}"#), Err(ParseError::Type { .. })));
    }

    #[test]
    fn agrees_with_serde_on_validity() {
        // Every prefix and every one-byte corruption of a realistic event:
        // the parser accepts exactly what serde_json accepts.
        let good = br#"{"ph": "X", "cat": "cpu_op", "name": "aten::mm \u00e9", "pid": 1, "tid": 2, "ts": 1.5e3, "dur": -0.25,
            "args": {"Input Dims": [[2, 3], []], "flag": true, "none": null, "s": "a\/b"}}"#;
        let check = |bytes: &[u8]| {
            if bytes.first() != Some(&b'{') {
                return;
            }
            let ours = parse_event(bytes);
            let serde = serde_json::from_slice::<serde_json::Value>(bytes);
            match (&ours, &serde) {
                (Err(ParseError::Syntax { .. } | ParseError::Truncated), Err(_)) | (Ok(_) | Err(ParseError::Type { .. }), Ok(_)) => {}
                _ => panic!("{:?}: ours {ours:?}, serde {serde:?}", String::from_utf8_lossy(bytes)),
            }
        };
        for cut in 0..good.len() {
            check(&good[..cut]);
        }
        for i in 0..good.len() {
            for b in [
                b'"', b'\\', b'{', b'}', b'[', b']', b',', b':', b'x', b'0', b'-', b'.', b'e', b' ', 0x01, 0xff,
            ] {
                let mut bad = good.to_vec();
                bad[i] = b;
                check(&bad);
            }
        }
    }
}
