//! `gputrace import FILE|DIR... [-o OUT]`: convert PyTorch profiler (Kineto)
//! traces to gputrace files, and say how much smaller they are.

use crate::error::CliError;
use gputrace_kineto::{ImportOptions, ImportSummary};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `gputrace import`.
#[derive(Debug, clap::Args)]
pub struct ImportArgs {
    /// Kineto traces (`.json`, `.json.gz`, `.pt.trace.json[.gz]`; recognised by
    /// content), or directories of them (one file per rank).
    #[arg(required = true, value_name = "FILE|DIR")]
    pub paths: Vec<PathBuf>,
    /// Output file (one input) or directory (several inputs, or an existing
    /// directory). Default: next to each input, with the `.gtrace` extension.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Stop at the first malformed trace event instead of recording it as a
    /// loss in the output, and refuse a file cut off mid-write (by default its
    /// complete events are imported, the cut recorded as a `truncated` loss).
    #[arg(long)]
    pub strict: bool,
    /// Write what was imported as JSON on stdout instead of one line per file:
    /// `{"files": [{"input", "output", "input_bytes", "json_bytes", "output_bytes",
    /// "trace_events", "events", "flows", "unmapped"}], "failed": [{"input", "error"}]}`.
    #[arg(long)]
    pub json: bool,
}

/// Convert every input; report per file and the size ratio.
pub fn run(args: &ImportArgs) -> Result<ExitCode, CliError> {
    let inputs = expand(&args.paths)?;
    let into_dir = match &args.output {
        Some(o) => inputs.len() > 1 || o.is_dir() || o.as_os_str().to_string_lossy().ends_with('/'),
        None => false,
    };
    if let (true, Some(dir)) = (into_dir, &args.output) {
        crate::out_dir::create(dir)?;
    }
    let opts = ImportOptions {
        strict: args.strict,
        threads: crate::inputs::threads()?,
        ..Default::default()
    };
    // File names can carry control characters: shown escaped.
    let mut out = gputrace_format::text::SafeWriter::new(std::io::stdout().lock());
    let mut failed = 0;
    let mut written = Vec::new();
    let (mut files_json, mut failed_json) = (Vec::new(), Vec::new());
    for input in &inputs {
        let target = match &args.output {
            Some(dir) if into_dir => dir.join(output_name(input)),
            Some(file) => file.clone(),
            None => input.with_file_name(output_name(input)),
        };
        match convert(input, &target, &opts) {
            Ok(s) if args.json => {
                if let Some(what) = &s.truncated {
                    super::say(&format!("gputrace: warning: {}: {what}", input.display()));
                }
                files_json.push(serde_json::json!({
                    "input": input.display().to_string(),
                    "output": target.display().to_string(),
                    "input_bytes": s.input_bytes,
                    "json_bytes": s.json_bytes,
                    "output_bytes": s.output_bytes,
                    "trace_events": s.trace_events,
                    "events": s.events,
                    "flows": s.flows,
                    "unmapped": s.unmapped,
                }));
                written.push(target);
            }
            Ok(s) => {
                if let Some(what) = &s.truncated {
                    super::say(&format!("gputrace: warning: {}: {what}", input.display()));
                }
                writeln!(out, "{} -> {}: {}", input.display(), target.display(), describe(&s)).map_err(CliError::Output)?;
                written.push(target);
            }
            Err(e) => {
                failed += 1;
                super::say(&format!("gputrace: error: {e}"));
                failed_json.push(serde_json::json!({"input": input.display().to_string(), "error": e.to_string()}));
            }
        }
    }
    if args.json {
        super::write_json(&mut out, &serde_json::json!({"files": files_json, "failed": failed_json}))?;
    } else if let Some(first) = written.first() {
        let shown = match (&args.output, written.len()) {
            (Some(dir), n) if into_dir && n > 1 => dir.clone(),
            _ => first.clone(),
        };
        writeln!(
            out,
            "wrote {} trace(s); look at them with `gputrace info {}`",
            written.len(),
            shown.display()
        )
        .map_err(CliError::Output)?;
    }
    if failed > 0 {
        return Err(CliError::SomeInputsFailed {
            failed,
            total: inputs.len(),
        });
    }
    Ok(ExitCode::SUCCESS)
}

/// Import one file (through a temporary name: a failed import never leaves
/// a half-written trace).
fn convert(input: &Path, target: &Path, opts: &ImportOptions) -> Result<ImportSummary, Box<dyn std::error::Error>> {
    crate::inputs::write_via_temp(target, |file| {
        gputrace_kineto::import(input, std::io::BufWriter::new(file), opts).map_err(Into::into)
    })
}

/// One line about an import: what it holds, what was left out, the size ratio.
fn describe(s: &ImportSummary) -> String {
    let n = |k: &str| s.events.get(k).copied().unwrap_or(0);
    let ratio = |from: u64| from as f64 / s.output_bytes.max(1) as f64;
    format!(
        "{} kernels, {} copies, {} memsets, {} API calls, {} markers, {} collectives{}; {} of {} entries not in the model (CPU instants, metadata, ...: recorded as losses); {} -> {} bytes, {:.1}x smaller ({:.1}x smaller than the JSON text)",
        n("kernel"),
        n("memcpy"),
        n("memset"),
        n("api"),
        n("marker"),
        n("collective"),
        if s.python_calls > 0 {
            format!(", {} Python calls (host stacks)", s.python_calls)
        } else {
            String::new()
        },
        s.unmapped_total(),
        s.trace_events,
        s.input_bytes,
        s.output_bytes,
        ratio(s.input_bytes),
        ratio(s.json_bytes),
    )
}

/// `rank0.pt.trace.json.gz` → `rank0.gtrace`.
fn output_name(input: &Path) -> String {
    let name = input.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut stem = name.as_str();
    for suffix in [".gz", ".json", ".pt.trace"] {
        stem = stem.strip_suffix(suffix).unwrap_or(stem);
    }
    format!("{stem}.{}", gputrace_format::FILE_EXTENSION)
}

/// Files as given; directories contribute the files in them (not recursive)
/// that look like Kineto traces, sorted by name so rank order is stable.
fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, CliError> {
    crate::inputs::expand_where(paths, crate::inputs::is_kineto_file, |dir| CliError::Io {
        path: dir.to_path_buf(),
        source: std::io::Error::other("no PyTorch profiler (Kineto) traces (.json, .json.gz) in this directory"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_names() {
        assert_eq!(output_name(Path::new("/d/rank0.pt.trace.json.gz")), "rank0.gtrace");
        assert_eq!(output_name(Path::new("a.json")), "a.gtrace");
        assert_eq!(
            output_name(Path::new("worker0.1623143089861.pt.trace.json")),
            "worker0.1623143089861.gtrace"
        );
    }
}
