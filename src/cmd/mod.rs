//! One module per subcommand.

pub mod compare;
pub mod demo;
pub mod diff;
pub mod export;
pub mod import;
pub mod info;
pub mod report;
pub mod run;
pub mod version;

/// Write `value` as pretty JSON and a newline to `out` in one write.
/// Stdout is line-buffered, so serializing straight into it costs a write
/// system call per line (1,364 for nccl_data's report).
pub(crate) fn write_json<T: serde::Serialize>(out: &mut impl std::io::Write, value: &T) -> Result<(), crate::error::CliError> {
    let mut text = serde_json::to_vec_pretty(value).map_err(|e| crate::error::CliError::Output(e.into()))?;
    text.push(b'\n');
    out.write_all(&text).map_err(crate::error::CliError::Output)
}
