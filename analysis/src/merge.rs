//! Reading a file's event chunks in file order.
//!
//! The passes that need time order (the device sweep, step inference) read
//! merged spans through [`gputrace_format::TraceFile::for_each_span_merged`].

use gputrace_format::{Event, EventKind, TraceFile};

/// Call `f` for every event of the given kinds, chunk by chunk in file
/// order (not time-sorted), without materializing the chunks.
pub fn for_each_of_kinds(file: &TraceFile, kinds: &[EventKind], mut f: impl FnMut(&Event)) -> gputrace_format::Result<()> {
    let mut dec = file.decoder();
    for (i, c) in file.chunks().iter().enumerate() {
        if kinds.contains(&c.kind) {
            dec.for_each(i, &mut f)?;
        }
    }
    Ok(())
}
