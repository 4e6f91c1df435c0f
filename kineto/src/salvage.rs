//! A trace cut off mid-write (the job was killed while the profiler wrote
//! it, a copy stopped early) is read up to its last complete trace event.
//!
//! When an import fails, [`find_cut`] reads the JSON text once more with a
//! scanner that only follows strings and brackets. If the text ends inside
//! the top-level object (every bracket before the end matched), the input is
//! cut off: the import is run again on the text up to the end of the last
//! complete element of `traceEvents` (or, when the array was closed, of the
//! last complete top-level member), closed with `]}` (or `}`). What follows
//! the cut, the unfinished event and any metadata written after
//! `traceEvents`, never reached the file; the import records it as a
//! `truncated` loss and in the trailer's `import.truncated`.

use std::io::{self, Read};

/// Brackets deeper than this are not followed: such a file is not salvaged.
const MAX_DEPTH: usize = 256;

/// Where a cut-off text can be closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cut {
    /// Bytes of JSON text kept (the end of the last complete element or member).
    pub keep: u64,
    /// What closes the kept text into a document: `]}` or `}`.
    pub close: &'static str,
    /// Bytes of JSON text the input holds.
    pub text_bytes: u64,
    /// Complete elements of `traceEvents` kept.
    pub events: u64,
    /// Whether the array was closed before the cut (only metadata after it is lost).
    pub events_closed: bool,
    /// The read error that ended the text (a gzip stream cut off), if one did.
    pub read_error: Option<String>,
}

impl Cut {
    /// Bytes of text after the cut (the unfinished element or member).
    pub fn lost_bytes(&self) -> u64 {
        self.text_bytes - self.keep
    }

    /// One line for people: what was kept and what was lost.
    pub fn describe(&self) -> String {
        let how = match &self.read_error {
            Some(e) => format!("the compressed stream ends early: {e}"),
            None => "the text ends".to_string(),
        };
        if self.events_closed {
            format!(
                "cut off after traceEvents ({how}): {} bytes of an unfinished top-level member lost; \
                 all {} trace events were read, metadata after them is missing",
                self.lost_bytes(),
                self.events
            )
        } else {
            format!(
                "cut off inside traceEvents ({how}): {} bytes of an unfinished trace event lost; \
                 the {} complete events before it were read, anything after it (events, metadata) was never written",
                self.lost_bytes(),
                self.events
            )
        }
    }

    /// The kept text, closed: `text` (the whole input text, read from its start)
    /// cut at [`Cut::keep`] and followed by [`Cut::close`].
    pub fn reader<R: Read>(&self, text: R) -> io::Chain<io::Take<R>, &'static [u8]> {
        text.take(self.keep).chain(self.close.as_bytes())
    }
}

/// What the bracket scanner knows about the part of the top-level object it is in.
#[derive(Default)]
struct State {
    /// Open brackets, innermost last.
    stack: Vec<u8>,
    in_string: bool,
    escaped: bool,
    /// The last string completed directly in the top-level object (a member name), up to 32 bytes.
    key: Vec<u8>,
    /// Collecting `key`.
    in_key: bool,
    key_overflow: bool,
    /// The last key was `traceEvents` and its value has not started.
    events_next: bool,
    /// Depth of the `traceEvents` array's interior while inside it.
    in_events: bool,
    events_seen: bool,
    events_closed: bool,
    events: u64,
    /// Text offset after the last complete element (inside the array) or member (after it).
    keep: u64,
}

/// Read `text` (the input's JSON text) to its end. `None` when the text is
/// not a cut-off trace: the top-level object is complete, a bracket does not
/// match, the nesting is deeper than [`MAX_DEPTH`], or the text ends before
/// `traceEvents` begins (nothing to keep).
pub(crate) fn find_cut<R: Read>(mut text: R) -> Option<Cut> {
    let mut st = State::default();
    let mut buf = vec![0u8; 256 * 1024];
    let mut offset = 0u64;
    let mut started = false;
    let read_error = loop {
        let n = match text.read(&mut buf) {
            Ok(0) => break None,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => break Some(e.to_string()),
        };
        for (i, &b) in buf[..n].iter().enumerate() {
            let at = offset + i as u64;
            if !started {
                if b.is_ascii_whitespace() || b == 0xEF || b == 0xBB || b == 0xBF {
                    continue;
                }
                if b != b'{' {
                    return None;
                }
                started = true;
            }
            if !step(&mut st, b, at)? {
                // The top-level object closed: the document is whole.
                return None;
            }
        }
        offset += n as u64;
    };
    if !st.events_seen {
        return None;
    }
    Some(Cut {
        keep: st.keep,
        close: if st.events_closed { "}" } else { "]}" },
        text_bytes: offset,
        events: st.events,
        events_closed: st.events_closed,
        read_error,
    })
}

/// One byte at text offset `at`. `None`: not salvageable (a mismatched
/// bracket, too deep); `Some(false)`: the top-level object closed.
fn step(st: &mut State, b: u8, at: u64) -> Option<bool> {
    if st.in_string {
        if st.escaped {
            st.escaped = false;
        } else if b == b'\\' {
            st.escaped = true;
        } else if b == b'"' {
            st.in_string = false;
            if st.in_key {
                st.in_key = false;
                st.events_next = !st.key_overflow && st.key == b"traceEvents";
            }
        }
        if st.in_key && st.in_string {
            if st.key.len() < 32 {
                st.key.push(b);
            } else {
                st.key_overflow = true;
            }
        }
        return Some(true);
    }
    let depth = st.stack.len();
    match b {
        b'"' => {
            st.in_string = true;
            // A string directly in the top-level object before a ':' is a member name;
            // `events_next` is reset by the ':'-less value check below.
            if depth == 1 && !st.events_next {
                st.in_key = true;
                st.key.clear();
                st.key_overflow = false;
            }
        }
        b'{' | b'[' => {
            if depth >= MAX_DEPTH {
                return None;
            }
            if depth == 1 && st.events_next && b == b'[' && !st.events_seen {
                st.in_events = true;
                st.events_seen = true;
                st.keep = at + 1;
            }
            st.events_next = false;
            st.stack.push(b);
        }
        b'}' | b']' => {
            let open = st.stack.pop()?;
            if (open == b'{') != (b == b'}') {
                return None;
            }
            match st.stack.len() {
                0 => return Some(false),
                1 if st.in_events => {
                    st.in_events = false;
                    st.events_closed = true;
                    st.keep = at + 1;
                }
                2 if st.in_events => {
                    st.events += 1;
                    st.keep = at + 1;
                }
                _ => {}
            }
        }
        b',' => {
            if depth == 1 && st.events_closed {
                // A member after the array ended just before this comma.
                st.keep = at;
            }
            st.events_next = false;
        }
        b':' => {}
        _ => {}
    }
    Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(text: &str) -> Option<Cut> {
        find_cut(text.as_bytes())
    }

    fn closed(text: &str) -> String {
        let c = cut(text).unwrap();
        let mut s = String::new();
        c.reader(text.as_bytes()).read_to_string(&mut s).unwrap();
        s
    }

    #[test]
    fn a_whole_document_is_not_cut() {
        assert_eq!(cut(r#"{"traceEvents": [{"a": "]"}], "x": 1}"#), None);
    }

    #[test]
    fn the_last_complete_event_is_kept() {
        let t = r#"{"schemaVersion": 1, "traceEvents": [{"a": "}]\"{"}, {"b": [1, {"c": 2}]}, {"d": "x"#;
        assert_eq!(
            closed(t),
            r#"{"schemaVersion": 1, "traceEvents": [{"a": "}]\"{"}, {"b": [1, {"c": 2}]}]}"#
        );
        let c = cut(t).unwrap();
        assert_eq!((c.events, c.lost_bytes(), c.events_closed), (2, 10, false));
    }

    #[test]
    fn no_complete_event_keeps_an_empty_array() {
        assert_eq!(closed(r#"{"traceEvents": [{"ph": "X""#), r#"{"traceEvents": []}"#);
        assert_eq!(closed(r#"{"traceEvents": ["#), r#"{"traceEvents": []}"#);
    }

    #[test]
    fn after_the_array_the_last_complete_member_is_kept() {
        let t = r#"{"traceEvents": [{}], "a": {"b": 1}, "traceName": "/tmp/x.js"#;
        assert_eq!(closed(t), r#"{"traceEvents": [{}], "a": {"b": 1}}"#);
        assert_eq!(closed(r#"{"traceEvents": [{}] "#), r#"{"traceEvents": [{}]}"#);
    }

    #[test]
    fn damage_that_is_not_a_cut_is_not_salvaged() {
        // Ends before traceEvents: nothing to keep.
        assert_eq!(cut(r#"{"deviceProperties": [{"#), None);
        // A bracket that does not match.
        assert_eq!(cut(r#"{"traceEvents": [{"a": 1], {"b""#), None);
        // Not an object.
        assert_eq!(cut(r#"["traceEvents""#), None);
        // A key named traceEvents inside another member does not count.
        assert_eq!(cut(r#"{"m": {"traceEvents": [{}, {"#), None);
    }
}
