//! `gputrace version`.

use crate::agent;
use crate::error::CliError;
use std::io::Write;
use std::process::ExitCode;

/// `--version` text: version and commit.
pub const VERSION_LINE: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("GPUTRACE_GIT_COMMIT"), ")");

/// Print version, build and agent location.
pub fn run() -> Result<ExitCode, CliError> {
    let search = agent::locate();
    let mut out = std::io::stdout().lock();
    let profile = if cfg!(debug_assertions) { "debug" } else { "release" };
    let (major, minor) = (gputrace_format::chunk::FORMAT_MAJOR, gputrace_format::chunk::FORMAT_MINOR);
    let agent_line = match &search.found {
        Some(p) => p.display().to_string(),
        None => format!(
            "not found (searched: {}); build it with `cargo build --release` or set GPUTRACE_AGENT",
            search.searched_list()
        ),
    };
    writeln!(
        out,
        "gputrace {VERSION_LINE}, {profile} build\ntrace format: {major}.{minor}\nagent: {agent_line}"
    )
    .map_err(CliError::Output)?;
    Ok(ExitCode::SUCCESS)
}
