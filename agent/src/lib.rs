//! The gputrace capture agent (`libgputrace_agent.so`).
//!
//! **Status: placeholder.** This crate exists so that the workspace layout, the
//! build and the CLI's agent lookup (`gputrace version` reports where the
//! library was found) are in place. It captures nothing yet: the CUPTI
//! injection (`InitializeInjection`, buffer pool, writer thread) arrives with
//! the agent issue (#3). Until then the library exports a single
//! identification symbol and has no constructor, so loading it has no effect
//! on a process.
#![deny(missing_docs)]

/// NUL-terminated version string of this agent build. `gputrace` reads it to
/// check that the CLI and the agent library it found come from the same build.
#[no_mangle]
pub static GPUTRACE_AGENT_VERSION: [u8; AGENT_VERSION_LEN] = agent_version();

const AGENT_VERSION_LEN: usize = env!("CARGO_PKG_VERSION").len() + 1;

const fn agent_version() -> [u8; AGENT_VERSION_LEN] {
    let src = env!("CARGO_PKG_VERSION").as_bytes();
    let mut out = [0u8; AGENT_VERSION_LEN];
    let mut i = 0;
    while i < src.len() {
        out[i] = src[i];
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn version_is_nul_terminated_package_version() {
        let v = &super::GPUTRACE_AGENT_VERSION;
        assert_eq!(v.last(), Some(&0));
        assert_eq!(&v[..v.len() - 1], env!("CARGO_PKG_VERSION").as_bytes());
    }
}
