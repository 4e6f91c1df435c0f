//! The agent's one line on stderr about a failure. A leaf: every module may
//! use it, it uses none.

/// Print the agent's one line about a failure.
pub fn say(msg: &str) {
    eprintln!("gputrace: {msg}");
}
