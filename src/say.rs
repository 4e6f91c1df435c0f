//! Message lines on stderr.

/// Print one message line to stderr with any control character in it (from a
/// file name or a trace) escaped: error and warning lines name files and things
/// from traces, which must not reach the terminal raw.
pub(crate) fn say(line: &str) {
    eprintln!("{}", gputrace_format::text::escape_output(line, false));
}
