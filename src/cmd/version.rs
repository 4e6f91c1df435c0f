//! `gputrace version`.

use crate::agent;
use crate::error::CliError;
use std::io::Write;
use std::process::ExitCode;

/// `--version` text: version and commit.
pub const VERSION_LINE: &str = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("GPUTRACE_GIT_COMMIT"), ")");

/// Arguments of `gputrace version`.
#[derive(Debug, Default, clap::Args)]
pub struct VersionArgs {
    /// Write it as JSON (`version`, `commit`, `profile`, `trace_format`, `agent`, `agent_searched`).
    #[arg(long)]
    pub json: bool,
}

/// `gputrace version --json`.
#[derive(Debug, serde::Serialize)]
struct VersionJson {
    version: &'static str,
    commit: &'static str,
    profile: &'static str,
    trace_format: String,
    /// The capture agent library found, or null.
    agent: Option<String>,
    /// Where it was looked for.
    agent_searched: Vec<String>,
}

/// Print version, build and agent location.
pub fn run(args: &VersionArgs) -> Result<ExitCode, CliError> {
    let search = agent::locate();
    let mut out = std::io::stdout().lock();
    let profile = if cfg!(debug_assertions) { "debug" } else { "release" };
    let (major, minor) = (gputrace_format::chunk::FORMAT_MAJOR, gputrace_format::chunk::FORMAT_MINOR);
    if args.json {
        let v = VersionJson {
            version: env!("CARGO_PKG_VERSION"),
            commit: env!("GPUTRACE_GIT_COMMIT"),
            profile,
            trace_format: format!("{major}.{minor}"),
            agent: search.found.as_ref().map(|p| p.display().to_string()),
            agent_searched: search.searched.iter().map(|p| p.display().to_string()).collect(),
        };
        super::write_json(&mut out, &v)?;
        return Ok(ExitCode::SUCCESS);
    }
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
