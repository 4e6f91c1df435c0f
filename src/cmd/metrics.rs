//! `gputrace metrics FILE|DIR...`: the Prometheus text exposition of finished traces,
//! the same families `gputrace run --metrics` serves live (docs/always-on.md).

use crate::error::CliError;
use crate::inputs;
use gputrace_analysis::{analyze, AnalysisError, Options};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `gputrace metrics`.
#[derive(Debug, clap::Args)]
pub struct MetricsArgs {
    /// Trace files, or directories of them (one file per rank).
    #[arg(required = true, value_name = "FILE|DIR")]
    pub paths: Vec<PathBuf>,
    /// Value of the `job` label on every series (default: no `job` label).
    #[arg(long, value_name = "NAME")]
    pub job: Option<String>,
    /// Write the exposition to this file (through a temporary file, as node_exporter's
    /// textfile collector wants) instead of stdout.
    #[arg(short, long, value_name = "FILE.prom")]
    pub output: Option<PathBuf>,
    /// Write the families as JSON instead of the text exposition: `{"families": [{"name",
    /// "help", "type", "samples": [{"labels": {...}, "value"}]}]}`.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub classify: super::ClassifyArgs,
}

/// Run `gputrace metrics`.
pub fn run(args: &MetricsArgs) -> Result<ExitCode, CliError> {
    let files = inputs::expand(&args.paths)?;
    let traces = files.iter().map(|f| inputs::open(f)).collect::<Result<Vec<_>, _>>()?;
    let opts = Options {
        classifier: args.classify.classifier()?,
        threads: inputs::threads()?,
        ..Options::default()
    };
    let report = analyze(&traces, &opts).map_err(|e| match e {
        AnalysisError::NoTraces => CliError::NoTraces(args.paths[0].clone()),
        other => CliError::from(other),
    })?;
    super::warn_lossy(&args.paths[0], &report);
    let metrics = gputrace_metrics::Options { job: args.job.clone() };
    let exposition = gputrace_metrics::report_exposition(&report, &gputrace_metrics::event_counts(&traces), &metrics);
    let text = if args.json {
        let mut v = serde_json::to_vec_pretty(&json(&exposition)).map_err(|e| CliError::Output(e.into()))?;
        v.push(b'\n');
        String::from_utf8_lossy(&v).into_owned()
    } else {
        exposition.render()
    };
    match &args.output {
        Some(path) => inputs::write_via_temp(path, |mut f| f.write_all(text.as_bytes()).map_err(CliError::io(path)))?,
        None => std::io::stdout().lock().write_all(text.as_bytes()).map_err(CliError::Output)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// The exposition as JSON: each family with its samples' labels as an object.
fn json(e: &gputrace_metrics::Exposition) -> serde_json::Value {
    let families: Vec<serde_json::Value> = e
        .families()
        .iter()
        .map(|f| {
            let samples: Vec<serde_json::Value> = f
                .samples
                .iter()
                .map(|(labels, value)| serde_json::json!({"labels": parse_labels(labels), "value": value}))
                .collect();
            serde_json::json!({
                "name": f.name,
                "help": f.help,
                "type": match f.kind {
                    gputrace_metrics::MetricType::Counter => "counter",
                    gputrace_metrics::MetricType::Gauge => "gauge",
                },
                "samples": samples,
            })
        })
        .collect();
    serde_json::json!({ "families": families })
}

/// `a="1",b="x\"y"` (the exposition's rendered label set) as `{"a": "1", "b": "x\"y"}`.
fn parse_labels(s: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while let Some(eq) = rest.find("=\"") {
        let name = rest[..eq].trim_start_matches(',').to_string();
        let mut value = String::new();
        let mut chars = rest[eq + 2..].char_indices();
        let mut end = rest.len() - eq - 2;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => {}
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(name, value);
        rest = &rest[eq + 2 + end..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendered_labels_parse_back() {
        let l = gputrace_metrics::Labels::new().with("rank", 3).with("name", "a\"b\\c\nd,e=\"f");
        let m = parse_labels(l.as_str());
        assert_eq!(m["rank"], "3");
        assert_eq!(m["name"], "a\"b\\c\nd,e=\"f");
        assert!(parse_labels("").is_empty());
    }
}
