//! One module per subcommand.

pub mod compare;
pub mod demo;
pub mod diff;
pub mod export;
pub mod flight;
pub mod import;
pub mod info;
pub mod metrics;
pub mod report;
pub mod run;
pub mod serving;
pub mod version;

/// How GPU work is classified: shared by every command that splits time into compute,
/// communication and transfer.
#[derive(Debug, Default, clap::Args)]
pub struct ClassifyArgs {
    /// Classification rules (TOML, docs/classify.md), tried before the built-in ones;
    /// default: the file named by GPUTRACE_CLASSIFY.
    #[arg(long = "classify", value_name = "RULES.toml")]
    pub rules: Option<std::path::PathBuf>,
    /// Also count kernels whose name contains this (case-insensitive) as
    /// communication; repeatable. NCCL, RCCL, MSCCL(++), DeepEP, NVSHMEM,
    /// userbuffers, UCC and custom all-reduce kernels are recognized already.
    #[arg(long = "comm-pattern", value_name = "TEXT")]
    pub comm_patterns: Vec<String>,
}

impl ClassifyArgs {
    /// The classifier: `--classify` (else `GPUTRACE_CLASSIFY`), then `--comm-pattern`s,
    /// then the built-in rules.
    pub fn classifier(&self) -> Result<gputrace_analysis::Classifier, crate::error::CliError> {
        let from_env = std::env::var_os("GPUTRACE_CLASSIFY")
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from);
        let c = gputrace_analysis::Classifier::default().with_patterns(self.comm_patterns.iter().rev())?;
        match self.rules.clone().or(from_env) {
            Some(path) => Ok(c.with_rules_file(&path)?),
            None => Ok(c),
        }
    }
}

/// Write `value` as pretty JSON and a newline to `out` in one write.
/// Stdout is line-buffered, so serializing straight into it costs a write
/// system call per line (1,364 for nccl_data's report).
pub(crate) fn write_json<T: serde::Serialize>(out: &mut impl std::io::Write, value: &T) -> Result<(), crate::error::CliError> {
    let mut text = serde_json::to_vec_pretty(value).map_err(|e| crate::error::CliError::Output(e.into()))?;
    text.push(b'\n');
    out.write_all(&text).map_err(crate::error::CliError::Output)
}

/// Warn on stderr about each lossy rank of `report` (read from `what`): a
/// damaged or lossy trace is said to be so by every command that reads it,
/// whatever its output (text, JSON, exposition).
pub(crate) fn warn_lossy(what: &std::path::Path, report: &gputrace_analysis::Report) {
    for rk in &report.ranks {
        if let Some(lost) = gputrace_analysis::describe_losses(&rk.losses) {
            say(&format!(
                "gputrace: warning: {} rank {}: the trace lost data, its numbers describe what was recorded: {lost}",
                what.display(),
                rk.rank
            ));
        }
    }
}

pub(crate) use crate::say::say;
