//! `gputrace compare FILE|DIR...`: line up the ranks of a distributed job
//! and name the stragglers. The work is `gputrace-compare`; this file reads
//! the inputs (in parallel, one rank at a time per thread) and prints.

use crate::error::CliError;
use crate::inputs;
use gputrace_compare::{compare_summaries, heatmap_svg, render_text, summarize_with, Options, RankSummary};
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Arguments of `gputrace compare`.
#[derive(Debug, clap::Args)]
pub struct CompareArgs {
    /// One trace per rank: files, or directories of them.
    #[arg(required = true, value_name = "FILE|DIR")]
    pub paths: Vec<PathBuf>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also write a heatmap of lateness by rank × step (SVG).
    #[arg(long, value_name = "FILE.svg")]
    pub heatmap: Option<PathBuf>,
    /// Tokens each process trains per step, when neither step marks nor the trace header
    /// say (for the tokens/s column).
    #[arg(long, value_name = "N")]
    pub tokens_per_step: Option<u64>,
    #[command(flatten)]
    pub classify: super::ClassifyArgs,
}

/// One rank's summary and its header wall clock, or why it failed.
type RankResult = Result<(RankSummary, u64), CliError>;

/// Run `gputrace compare`.
pub fn run(args: &CompareArgs) -> Result<ExitCode, CliError> {
    // A server's scraped metrics (docs/serving.md) are no rank to line up.
    let all_files = inputs::expand(&args.paths)?;
    let files: Vec<_> = all_files
        .iter()
        .filter(|p| !gputrace_serving::scraper::is_serving_file(p))
        .cloned()
        .collect();
    let mut served = files.len() != all_files.len();
    let marked = std::sync::atomic::AtomicBool::new(false);
    let productive = gputrace_analysis::ProductiveOptions {
        tokens_per_step: args.tokens_per_step,
        run_records: inputs::run_records(&args.paths)?,
        ..Default::default()
    };
    let classifier = args.classify.classifier()?;
    let total = files.len();
    let done = AtomicUsize::new(0);
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<RankResult>>> = Mutex::new((0..total).map(|_| None).collect());
    let progress = std::io::stderr().is_terminal() && total >= 16;
    let cores = match inputs::threads()? {
        0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
        n => n,
    };
    let workers = cores.min(total.max(1));
    // The cores left to each file's own parsing (Kineto traces).
    let threads_each = (cores / workers).max(1);
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    break;
                }
                // Open, summarize, close: memory holds one rank per thread.
                let r = inputs::open_with_threads(&files[i], threads_each).and_then(|t| {
                    if t.chunks().iter().any(|c| c.kind == gputrace_format::EventKind::Request) {
                        marked.store(true, Ordering::Relaxed);
                    }
                    Ok((
                        summarize_with(&t, i as u32, &productive, &classifier).map_err(CliError::from)?,
                        t.header().start_clock.realtime_ns,
                    ))
                });
                results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(r);
                let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                if progress && (d % 16 == 0 || d == total) {
                    eprint!("\rgputrace: read {d}/{total} ranks");
                }
            });
        }
    });
    if progress {
        eprintln!();
    }
    let mut sums = Vec::with_capacity(total);
    let mut starts = Vec::with_capacity(total);
    for r in results.into_inner().unwrap_or_else(|p| p.into_inner()).into_iter().flatten() {
        let (s, start) = r?;
        sums.push(s);
        starts.push(start);
    }
    served |= marked.load(Ordering::Relaxed);
    // A serving job: its servers side by side by latency and tokens/s (docs/serving.md).
    let servers = if served { serving_servers(&all_files)? } else { None };
    let c = match compare_summaries(sums, &starts, &Options::default()) {
        Ok(c) => c,
        Err(_) if servers.is_some() => return print_servers_only(args, servers.as_ref()),
        Err(e) => return Err(e.into()),
    };
    if let Some(path) = &args.heatmap {
        std::fs::write(path, heatmap_svg(&c)).map_err(CliError::io(path))?;
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        match &servers {
            None => super::write_json(&mut out, &c)?,
            Some(sv) => {
                let mut v = serde_json::to_value(&c).map_err(|e| CliError::Output(e.into()))?;
                v["servers"] = serde_json::to_value(sv).map_err(|e| CliError::Output(e.into()))?;
                super::write_json(&mut out, &v)?;
            }
        }
    } else {
        out.write_all(render_text(&c).as_bytes()).map_err(CliError::Output)?;
        if let Some(sv) = &servers {
            out.write_all(gputrace_compare::render_servers(sv).as_bytes())
                .map_err(CliError::Output)?;
        }
        if let Some(path) = &args.heatmap {
            writeln!(out, "\nheatmap: {} (open it in a browser)", path.display()).map_err(CliError::Output)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The servers of a serving job among `files` (docs/serving.md), read whole.
fn serving_servers(files: &[PathBuf]) -> Result<Option<gputrace_compare::ServerComparison>, CliError> {
    let traces = files.iter().map(|p| inputs::open(p)).collect::<Result<Vec<_>, _>>()?;
    Ok(gputrace_compare::compare_servers(&traces))
}

/// `compare` of a job with servers and nothing to line up by steps.
fn print_servers_only(args: &CompareArgs, servers: Option<&gputrace_compare::ServerComparison>) -> Result<ExitCode, CliError> {
    let Some(sv) = servers else { return Ok(ExitCode::SUCCESS) };
    let mut out = std::io::stdout().lock();
    if args.json {
        super::write_json(&mut out, &serde_json::json!({ "servers": sv }))?;
    } else {
        out.write_all(gputrace_compare::render_servers(sv).trim_start().as_bytes())
            .map_err(CliError::Output)?;
    }
    Ok(ExitCode::SUCCESS)
}
