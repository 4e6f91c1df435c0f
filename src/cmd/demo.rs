//! `gputrace demo`: a synthetic job for a first run without a GPU.

use crate::cmd::info::thousands;
use crate::error::CliError;
use gputrace_synth::JobConfig;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Parameters of the model the demo job trains (stated in the scenario, passed to the report for MFU).
const DEMO_MODEL_PARAMS: f64 = 0.5e9;
/// The price of a GPU-hour the demo's report uses, US dollars.
const DEMO_GPU_HOUR_COST: f64 = 3.0;
/// Tokens each rank trains per step (in the step marks).
const DEMO_TOKENS_PER_STEP: u64 = 4096;
/// Samples each rank handles per step (in the header, as `gputrace run --samples-per-step`).
const DEMO_SAMPLES_PER_STEP: u64 = 8;

/// Arguments of `gputrace demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Directory to write the demo traces into (created if missing; existing
    /// demo traces in it are replaced).
    #[arg(short, long, default_value = "gputrace-demo")]
    pub output: PathBuf,
    /// Number of ranks.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub ranks: u32,
    /// Training steps per rank.
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub steps: u32,
    /// Transformer layers (18 kernels each per step).
    #[arg(long, default_value_t = 24, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub layers: u32,
    /// Seed for the synthetic timings.
    #[arg(long, default_value_t = 0x5eed)]
    pub seed: u64,
    /// Write what was written as JSON on stdout (files, the Perfetto trace, the page, the
    /// commands to run next) instead of the report.
    #[arg(long)]
    pub json: bool,
}

/// Beyond this many ranks the terminal gets a summary (one line for the files, the
/// headline, the findings' titles, the straggler), not every rank's rows.
const BRIEF_ABOVE_RANKS: u32 = 16;

/// Run `gputrace demo`.
pub fn run(args: &DemoArgs) -> Result<ExitCode, CliError> {
    let cfg = job_config(args);
    crate::out_dir::create(&args.output)?;
    clear_earlier_demo(&args.output)?;
    let files = gputrace_synth::write_job(&cfg, &args.output).map_err(CliError::io(&args.output))?;
    let brief = args.ranks > BRIEF_ABOVE_RANKS;
    // With --json, the human text goes nowhere and the JSON summary is written at the end.
    let mut out: Box<dyn Write> = if args.json {
        Box::new(std::io::sink())
    } else {
        Box::new(std::io::stdout().lock())
    };
    line(
        &mut out,
        format!(
            "gputrace demo: wrote a SYNTHETIC {}-rank data-parallel training job to {}/ (generated, not measured on a GPU)",
            cfg.ranks,
            args.output.display()
        ),
    )?;
    say_files(&mut out, &files, brief)?;
    line(&mut out, scenario(&cfg))?;
    let traces: Vec<gputrace_format::TraceFile> = files
        .iter()
        .map(|(p, _)| gputrace_format::TraceFile::open(p))
        .collect::<Result<_, _>>()
        .map_err(CliError::from)?;
    let pftrace = args.output.join("demo.pftrace");
    write_pftrace(&pftrace, &traces, &args.output, &cfg)?;
    // The report of the job, so a first run shows the answer.
    let opts = gputrace_analysis::Options {
        gpu_hour_cost: Some(DEMO_GPU_HOUR_COST),
        productive: gputrace_analysis::ProductiveOptions {
            model: Some(gputrace_analysis::ModelFlops::Params {
                params: DEMO_MODEL_PARAMS,
                inference: false,
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let mut report = gputrace_analysis::analyze(&traces, &opts).map_err(|source| CliError::AnalysisFor {
        what: "analysing the demo job",
        source,
    })?;
    let comparison = gputrace_compare::with_stragglers(&mut report, &traces, &opts.classifier);
    let color = !args.json && crate::color::enabled(std::io::IsTerminal::is_terminal(&std::io::stdout()));
    line(&mut out, "")?;
    say_report(&mut out, &report, color, brief)?;
    // The same report as one HTML page.
    let html = args.output.join("report.html");
    let inputs = vec![args.output.display().to_string()];
    crate::cmd::report::write_html(&html, &report, comparison.as_ref(), inputs)?;
    // And which rank the others wait for.
    if traces.len() >= 2 && !brief {
        let c = gputrace_compare::compare(&traces, &gputrace_compare::Options::default()).map_err(|source| CliError::CompareFor {
            what: "comparing the demo ranks",
            source,
        })?;
        line(&mut out, "\ngputrace compare: the ranks side by side")?;
        out.write_all(gputrace_compare::render_text(&c).as_bytes())
            .map_err(CliError::Output)?;
    }
    say_next(&mut out, &args.output, brief)?;
    if args.json {
        let summary = json_summary(&args.output, &cfg, &files, &pftrace, &html, &report);
        super::write_json(&mut std::io::stdout().lock(), &summary)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One line of the demo's text.
fn line(out: &mut dyn Write, s: impl std::fmt::Display) -> Result<(), CliError> {
    writeln!(out, "{s}").map_err(CliError::Output)
}

/// The synthetic job the arguments ask for, with the scenario the demo tells.
fn job_config(args: &DemoArgs) -> JobConfig {
    JobConfig {
        ranks: args.ranks,
        steps: args.steps,
        layers: args.layers,
        seed: args.seed,
        slow_rank: (args.ranks > 1).then_some(args.ranks / 2),
        stall_step: Some(args.steps / 2),
        // Two GPUs per node, so even a small demo spans hosts with
        // different clocks.
        gpus_per_node: 2,
        tokens_per_step: Some(DEMO_TOKENS_PER_STEP),
        samples_per_step: Some(DEMO_SAMPLES_PER_STEP),
        model_params: Some(DEMO_MODEL_PARAMS),
        gpu_counters: true,
        ..JobConfig::default()
    }
}

/// Remove an earlier demo's traces, Perfetto trace and page from `dir`, so that
/// `info DIR` shows only this job.
fn clear_earlier_demo(dir: &Path) -> Result<(), CliError> {
    let _ = std::fs::remove_file(dir.join("demo.pftrace"));
    let _ = std::fs::remove_file(dir.join("report.html"));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == gputrace_format::FILE_EXTENSION) {
                std::fs::remove_file(&p).map_err(CliError::io(&p))?;
            }
        }
    }
    Ok(())
}

/// The files written: one line each, or one line for all when `brief`.
fn say_files(out: &mut dyn Write, files: &[(PathBuf, gputrace_synth::RankStats)], brief: bool) -> Result<(), CliError> {
    if brief {
        let (events, bytes) = files.iter().fold((0, 0), |(e, b), (_, s)| (e + s.events, b + s.bytes));
        return line(
            out,
            format!(
                "  {} trace files, {} events, {} bytes ({:.2} bytes/event)",
                files.len(),
                thousands(events),
                thousands(bytes),
                bytes as f64 / events.max(1) as f64
            ),
        );
    }
    for (path, stats) in files {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        line(
            out,
            format!(
                "  {name}  {} events, {} bytes ({:.2} bytes/event)",
                thousands(stats.events),
                thousands(stats.bytes),
                stats.bytes as f64 / stats.events.max(1) as f64
            ),
        )?;
    }
    Ok(())
}

/// What the synthetic job does, in one paragraph: the model, the stall, the slow rank,
/// the clocks and the price.
fn scenario(cfg: &JobConfig) -> String {
    let mut scenario = format!(
        "Scenario: a {:.1} B-parameter model, {} tokens ({} samples) per rank and step; {} steps of {} layers; step {} has a {} ms data-loader stall on every rank",
        DEMO_MODEL_PARAMS / 1e9,
        DEMO_TOKENS_PER_STEP,
        DEMO_SAMPLES_PER_STEP,
        cfg.steps,
        cfg.layers,
        cfg.stall_step.unwrap_or(0),
        cfg.stall_ns / 1_000_000
    );
    if let Some(r) = cfg.slow_rank {
        scenario += &format!(
            "; rank {r}'s GPU is power-capped (its NVML counters show the SM clock at {:.0}% of its maximum), so its kernels run {:.1}x slower and its peers wait in every all-reduce",
            100.0 / cfg.slow_factor,
            cfg.slow_factor
        );
    }
    scenario += &format!(
        "; host clocks differ by up to {} ms. The report prices GPU-hours at ${DEMO_GPU_HOUR_COST:.2}.",
        cfg.clock_skew_ns / 1_000_000
    );
    scenario
}

/// The whole job as one Perfetto trace at `pftrace`, every rank on one time line,
/// with the warning `gputrace export` gives when the viewer cannot load it.
fn write_pftrace(pftrace: &Path, traces: &[gputrace_format::TraceFile], output: &Path, cfg: &JobConfig) -> Result<(), CliError> {
    let job = gputrace_viewer::Job::new(traces.iter());
    // Warn before writing an export the viewer cannot load, as `gputrace export` does.
    let everything = gputrace_viewer::Filter::default();
    if let Ok(est) = gputrace_viewer::estimate(&job, &everything, gputrace_viewer::Format::Perfetto) {
        if est.exceeds_viewer_limit() {
            eprintln!(
                "gputrace: warning: {} will be about {:.1} MB ({} events), more than {} loads; writing it anyway. Open a part instead: gputrace export {}/ --rank 0,{} --align -o part.pftrace",
                pftrace.display(),
                est.bytes as f64 / 1e6,
                est.events,
                est.viewer,
                output.display(),
                cfg.slow_rank.unwrap_or(0)
            );
        }
    }
    crate::inputs::write_via_temp(pftrace, |file| {
        let mut buf = std::io::BufWriter::new(file);
        gputrace_viewer::Exporter::export(
            &gputrace_viewer::Perfetto::default(),
            &job,
            &gputrace_viewer::Filter::default(),
            &mut buf,
        )
        .map_err(|source| CliError::Export {
            path: pftrace.to_path_buf(),
            source,
        })?;
        std::io::Write::flush(&mut buf).map_err(CliError::io(pftrace))
    })
}

/// The report as text; when `brief`, its title and headline and the findings' titles.
fn say_report(out: &mut dyn Write, report: &gputrace_analysis::Report, color: bool, brief: bool) -> Result<(), CliError> {
    let text = gputrace_text::render_text(report, color);
    if !brief {
        return out.write_all(text.as_bytes()).map_err(CliError::Output);
    }
    // The title and the headline, then what the findings say.
    for l in text.lines().take(2) {
        line(out, l)?;
    }
    line(out, "Findings:")?;
    for f in &report.findings {
        let sev = match f.severity {
            gputrace_analysis::Severity::High => "HIGH  ",
            gputrace_analysis::Severity::Medium => "MEDIUM",
            gputrace_analysis::Severity::Low => "LOW   ",
            gputrace_analysis::Severity::Info => "INFO  ",
        };
        line(out, format!("  {sev} {}", gputrace_format::text::escape(&f.title)))?;
    }
    Ok(())
}

/// Where the Perfetto trace and the page are, and the commands to run next on `output`.
fn say_next(out: &mut dyn Write, output: &Path, brief: bool) -> Result<(), CliError> {
    let d = output.display();
    line(
        out,
        format!("\nWrote {d}/demo.pftrace: all ranks on one timeline; open it at https://ui.perfetto.dev"),
    )?;
    line(
        out,
        format!("Wrote {d}/report.html: this report as one page (no network needed); open it in a browser"),
    )?;
    line(out, "Next:")?;
    line(out, format!("  gputrace compare {d}/    which rank the others wait for, and why"))?;
    line(
        out,
        format!(
            "  gputrace report {d}/ --model-params {:e} --gpu-hour-cost {}     the {} report (--json for machines)",
            DEMO_MODEL_PARAMS,
            DEMO_GPU_HOUR_COST,
            if brief { "whole" } else { "above" }
        ),
    )?;
    line(
        out,
        format!("  gputrace info {d}/       header, event counts, time span and losses of each rank"),
    )?;
    line(
        out,
        format!("  gputrace metrics {d}/    the same numbers as Prometheus metrics (live: gputrace run --metrics 9400)"),
    )
}

/// `demo --json`: what was written and the commands to run next.
fn json_summary(
    output: &Path,
    cfg: &JobConfig,
    files: &[(PathBuf, gputrace_synth::RankStats)],
    pftrace: &Path,
    html: &Path,
    report: &gputrace_analysis::Report,
) -> serde_json::Value {
    let d = output.display();
    serde_json::json!({
        "synthetic": true,
        "output": d.to_string(),
        "ranks": cfg.ranks,
        "steps": cfg.steps,
        "files": files.iter().map(|(p, s)| serde_json::json!({
            "path": p.display().to_string(),
            "events": s.events,
            "bytes": s.bytes,
        })).collect::<Vec<_>>(),
        "pftrace": pftrace.display().to_string(),
        "html": html.display().to_string(),
        "findings": report.findings.iter().map(|f| f.title.clone()).collect::<Vec<_>>(),
        "next": [
            format!("gputrace compare {d}/"),
            format!("gputrace report {d}/ --model-params {DEMO_MODEL_PARAMS:e} --gpu-hour-cost {DEMO_GPU_HOUR_COST}"),
            format!("gputrace info {d}/"),
            format!("gputrace metrics {d}/"),
        ],
    })
}
