//! `gputrace demo`: a synthetic job for a first run without a GPU.

use crate::cmd::info::thousands;
use crate::error::CliError;
use gputrace_synth::JobConfig;
use std::io::Write;
use std::path::PathBuf;
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
}

/// Run `gputrace demo`.
pub fn run(args: &DemoArgs) -> Result<ExitCode, CliError> {
    let defaults = JobConfig::default();
    let cfg = JobConfig {
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
        ..defaults
    };
    crate::out_dir::create(&args.output)?;
    // Replace an earlier demo's traces so `info DIR` shows only this job.
    let _ = std::fs::remove_file(args.output.join("demo.pftrace"));
    let _ = std::fs::remove_file(args.output.join("report.html"));
    if let Ok(entries) = std::fs::read_dir(&args.output) {
        for e in entries.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == gputrace_format::FILE_EXTENSION) {
                std::fs::remove_file(&p).map_err(CliError::io(&p))?;
            }
        }
    }
    let files = gputrace_synth::write_job(&cfg, &args.output).map_err(CliError::io(&args.output))?;
    let mut out = std::io::stdout().lock();
    let w = |out: &mut std::io::StdoutLock<'_>, s: String| writeln!(out, "{s}").map_err(CliError::Output);
    w(
        &mut out,
        format!(
            "gputrace demo: wrote a SYNTHETIC {}-rank data-parallel training job to {}/ (generated, not measured on a GPU)",
            cfg.ranks,
            args.output.display()
        ),
    )?;
    for (path, stats) in &files {
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        w(
            &mut out,
            format!(
                "  {name}  {} events, {} bytes ({:.2} bytes/event)",
                thousands(stats.events),
                thousands(stats.bytes),
                stats.bytes as f64 / stats.events.max(1) as f64
            ),
        )?;
    }
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
    w(&mut out, scenario)?;
    // The whole job as one Perfetto trace, every rank on one time line.
    let pftrace = args.output.join("demo.pftrace");
    let traces: Vec<gputrace_format::TraceFile> = files
        .iter()
        .map(|(p, _)| gputrace_format::TraceFile::open(p))
        .collect::<Result<_, _>>()
        .map_err(CliError::from)?;
    let job = viewer_export::Job::new(traces.iter());
    crate::inputs::write_via_temp(&pftrace, |file| {
        let mut buf = std::io::BufWriter::new(file);
        viewer_export::Exporter::export(
            &viewer_export::Perfetto::default(),
            &job,
            &viewer_export::Filter::default(),
            &mut buf,
        )
        .map_err(|e| CliError::Analysis(format!("{}: {e}", pftrace.display())))?;
        std::io::Write::flush(&mut buf).map_err(CliError::io(&pftrace))
    })?;
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
    let mut report = gputrace_analysis::analyze(&traces, &opts).map_err(|e| CliError::Analysis(format!("analysing the demo job: {e}")))?;
    let comparison = super::report::comparison(&report, &traces, &opts.classifier);
    if let Some(Ok(c)) = &comparison {
        super::report::add_stragglers(&mut report, c);
    }
    let color = std::io::IsTerminal::is_terminal(&out) && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    w(&mut out, String::new())?;
    std::io::Write::write_all(&mut out, gputrace_analysis::render_text(&report, color).as_bytes()).map_err(CliError::Output)?;
    // The same report as one HTML page.
    let html = args.output.join("report.html");
    let inputs = vec![args.output.display().to_string()];
    crate::cmd::report::write_html(&html, &report, comparison.as_ref(), inputs)?;
    // And which rank the others wait for.
    if traces.len() >= 2 {
        let c = gputrace_compare::compare(&traces, &gputrace_compare::Options::default())
            .map_err(|e| CliError::Analysis(format!("comparing the demo ranks: {e}")))?;
        w(&mut out, "\ngputrace compare: the ranks side by side".into())?;
        std::io::Write::write_all(&mut out, gputrace_compare::render_text(&c).as_bytes()).map_err(CliError::Output)?;
    }
    let d = args.output.display();
    w(
        &mut out,
        format!("\nWrote {d}/demo.pftrace: all ranks on one timeline; open it at https://ui.perfetto.dev"),
    )?;
    w(
        &mut out,
        format!("Wrote {d}/report.html: this report as one page (no network needed); open it in a browser"),
    )?;
    w(&mut out, "Next:".into())?;
    w(
        &mut out,
        format!("  gputrace compare {d}/    which rank the others wait for, and why"),
    )?;
    w(
        &mut out,
        format!(
            "  gputrace report {d}/ --model-params {:e} --gpu-hour-cost {}     the report above (--json for machines)",
            DEMO_MODEL_PARAMS, DEMO_GPU_HOUR_COST
        ),
    )?;
    w(
        &mut out,
        format!("  gputrace info {d}/       header, event counts, time span and losses of each rank"),
    )?;
    w(
        &mut out,
        format!("  gputrace metrics {d}/    the same numbers as Prometheus metrics (live: gputrace run --metrics 9400)"),
    )?;
    Ok(ExitCode::SUCCESS)
}
