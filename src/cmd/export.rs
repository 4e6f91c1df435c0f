//! `gputrace export FILE|DIR... --format perfetto|chrome -o OUT`: write a
//! trace (all ranks on one time line) for the Perfetto UI, chrome://tracing,
//! TensorBoard, HTA or TraceLens. Inputs are gputrace files or Kineto
//! traces (converted in memory by `inputs::open`).

use crate::duration::DurationError;
use crate::error::CliError;
use crate::inputs;
use gputrace_format::{DeviceId, LossSource, Nanos, Rank, TraceFile};
use gputrace_viewer::{estimate, ExportError, ExportStats, Filter, Format, Job};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Output formats on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FormatArg {
    /// Perfetto native protobuf (open at ui.perfetto.dev).
    Perfetto,
    /// Chrome/Kineto trace JSON (chrome://tracing, Perfetto, TensorBoard, HTA, TraceLens).
    Chrome,
    /// Hive-partitioned Parquet tables (`OUT/<table>/job_id=ID/rank=N/part-0.parquet`;
    /// a re-export replaces only its own job) for DuckDB, Spark SQL, DataFusion; see docs/parquet.md.
    Parquet,
}

/// Arguments of `gputrace export`.
#[derive(Debug, clap::Args)]
pub struct ExportArgs {
    /// Trace files, or directories of them (one file per rank).
    #[arg(required = true, value_name = "FILE|DIR")]
    pub paths: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "perfetto")]
    pub format: FormatArg,
    /// Output file (`-` for standard output), or a directory (existing, or
    /// ending in `/`) for one file per input, named after it.
    #[arg(short, long, value_name = "OUT")]
    pub output: PathBuf,
    /// Compress with gzip (also when OUT ends in `.gz`).
    #[arg(long)]
    pub gzip: bool,
    /// Start of the time window after the job start: ns, or with a unit
    /// (`1.5s`, `200ms`, `30us`, `100ns`).
    #[arg(long, value_parser = parse_duration, value_name = "TIME")]
    pub from: Option<Nanos>,
    /// End of the time window after the job start (same units as --from).
    #[arg(long, value_parser = parse_duration, value_name = "TIME")]
    pub to: Option<Nanos>,
    /// Only these ranks (repeat or separate with commas).
    #[arg(long, value_delimiter = ',', value_name = "RANK")]
    pub rank: Vec<u32>,
    /// Only these GPUs, by CUDA ordinal (CPU threads are kept).
    #[arg(long, value_delimiter = ',', value_name = "DEVICE")]
    pub device: Vec<u32>,
    /// At most this many events: the earliest ones.
    #[arg(long, value_name = "N")]
    pub max_events: Option<u64>,
    /// Align the ranks' clocks on their collectives, as `gputrace compare`
    /// does (instead of trusting each host's wall clock).
    #[arg(long)]
    pub align: bool,
    #[command(flatten)]
    pub classify: super::ClassifyArgs,
    /// Job name in every Parquet row's `job` column (default: the first
    /// input's name).
    #[arg(long, value_name = "NAME")]
    pub job: Option<String>,
    /// Parquet: price of one GPU-hour in US dollars, for the `runs` table's
    /// costs (as `report --gpu-hour-cost`).
    #[arg(long, value_name = "USD", value_parser = super::report::parse_price)]
    pub gpu_hour_cost: Option<f64>,
    /// Parquet: tokens each process handles per step, for the `runs` table,
    /// when neither step marks nor the header say (as `report --tokens-per-step`).
    #[arg(long, value_name = "N")]
    pub tokens_per_step: Option<u64>,
    /// Also write what was written as JSON on stdout: `{"files": [{"path", "format",
    /// "gzip", "events", "flows", "adjusted", "truncated", "bytes"}]}` (not with `-o -`).
    #[arg(long)]
    pub json: bool,
}

/// Parse `1.5s`, `200ms`, `30us`, `30µs`, `100ns` or a plain number of ns,
/// exactly (no floating point).
pub fn parse_duration(s: &str) -> Result<Nanos, DurationError> {
    let t = s.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t.parse().map(Nanos).map_err(|_| DurationError::TooLong(t.to_string()));
    }
    let d = crate::duration::parse(t, crate::duration::NS_TO_S)?;
    u64::try_from(d.as_nanos())
        .map(Nanos)
        .map_err(|_| DurationError::TooLong(t.to_string()))
}

fn export_error<'a>(out: &'a Path, inputs: &'a [PathBuf]) -> impl FnOnce(ExportError) -> CliError + 'a {
    move |e| match e {
        ExportError::Read(f) => CliError::Format(f),
        ExportError::Write(source) => CliError::Io {
            path: out.to_path_buf(),
            source,
        },
        other => CliError::Io {
            path: inputs.first().cloned().unwrap_or_default(),
            source: io::Error::new(io::ErrorKind::InvalidInput, other.to_string()),
        },
    }
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

/// A job whose ranks are put on the reference rank's clock with the offsets
/// `compare` estimates from matched collectives. `compare` measures offsets
/// between raw event times; the job first maps each rank through its
/// header clock pair (`Header::realtime_shift`), so the extra offset undoes that
/// mapping's disagreement with the estimate.
fn aligned_job(traces: &[TraceFile]) -> Result<Job<'_>, CliError> {
    let c = gputrace_compare::compare(traces, &gputrace_compare::Options::default())
        .map_err(|source| CliError::CompareFor { what: "--align", source })?;
    let rank_of = |i: usize, t: &TraceFile| t.header().rank.rank.map_or(i as u32, |r| r.0);
    let reference = traces
        .iter()
        .enumerate()
        .find(|(i, t)| rank_of(*i, t) == c.clock.reference_rank)
        .map_or(0, |(_, t)| t.header().realtime_shift());
    let mut job = Job::default();
    for (i, t) in traces.iter().enumerate() {
        let off = c.clock.offsets_ns.get(&rank_of(i, t)).copied().unwrap_or(0);
        // Header values are the file's: saturate rather than overflow.
        let offset_ns = reference.saturating_sub(t.header().realtime_shift()).saturating_sub(off);
        job.push(gputrace_viewer::RankInput { trace: t, offset_ns });
    }
    eprintln!(
        "gputrace: clocks aligned on {} matched collectives (residual {:.1} µs)",
        c.matched,
        c.clock.residual_ns as f64 / 1e3
    );
    Ok(job)
}

/// Run `gputrace export`.
pub fn run(args: &ExportArgs) -> Result<ExitCode, CliError> {
    let files = inputs::expand(&args.paths)?;
    let traces = files.iter().map(|f| inputs::open(f)).collect::<Result<Vec<_>, _>>()?;
    for t in &traces {
        if let Some(d) = t.damage() {
            super::say(&format!(
                "gputrace: warning: {}: damaged at byte {} ({}); exporting the events before it",
                t.path().display(),
                d.offset,
                d.reason
            ));
        }
        match t.trailer() {
            None => super::say(&format!(
                "gputrace: warning: {}: no trailer (the writer did not finish: the end of the run is missing)",
                t.path().display()
            )),
            Some(tr) => {
                let quiet = [LossSource::IMPORT, LossSource::COUNTER_FAILED, LossSource::COUNTER_OVERFLOW].map(|s| s.name());
                let lost: Vec<String> = tr
                    .losses
                    .iter()
                    .filter(|(source, n)| **n > 0 && !quiet.contains(&source.as_str()))
                    .map(|(source, n)| format!("{n} {source}"))
                    .collect();
                if !lost.is_empty() {
                    super::say(&format!(
                        "gputrace: warning: {}: the trace lost records ({}); the export holds what was recorded",
                        t.path().display(),
                        lost.join(", ")
                    ));
                }
            }
        }
    }
    if args.json && args.output.as_os_str() == "-" {
        return Err(CliError::Io {
            path: args.output.clone(),
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                "--json writes to standard output: give the export a file or directory with -o",
            ),
        });
    }
    let classifier = args.classify.classifier()?;
    let job = if args.align && traces.len() >= 2 {
        aligned_job(&traces)?
    } else {
        Job::new(traces.iter())
    }
    .with_classifier(classifier.clone());
    if args.format == FormatArg::Parquet {
        return export_parquet(args, &files, &traces, &job);
    }
    if args.gpu_hour_cost.is_some() || args.tokens_per_step.is_some() {
        return Err(CliError::Io {
            path: args.output.clone(),
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                "--gpu-hour-cost and --tokens-per-step are for --format parquet's runs table",
            ),
        });
    }
    let filter = Filter {
        from: args.from,
        to: args.to,
        ranks: args.rank.iter().map(|&r| Rank(r)).collect(),
        devices: args.device.iter().map(|&d| DeviceId(d)).collect(),
        max_events: args.max_events,
    };
    let format = match args.format {
        FormatArg::Perfetto => Format::Perfetto,
        FormatArg::Chrome => Format::ChromeJson,
        FormatArg::Parquet => unreachable!("handled above"),
    };
    let out = &args.output;
    let gzip = args.gzip || out.extension().is_some_and(|e| e == "gz");
    let to_dir = out.is_dir() || out.as_os_str().to_string_lossy().ends_with('/');
    if !to_dir {
        let stats = export_one(&job, &filter, format, gzip, out, &files)?;
        report(args, out, format, gzip, &stats, traces.len()).map_err(CliError::Output)?;
        if args.json {
            print_json(&[written_json(out, format, gzip, &stats)])?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    // One file per input, named after it (HTA and TraceLens read a
    // directory of per-rank Kineto files).
    std::fs::create_dir_all(out).map_err(CliError::io(out))?;
    let mut written = 0;
    let mut summary = Vec::new();
    for (i, trace) in traces.iter().enumerate() {
        if !filter.keeps_rank(job.rank(i)) {
            continue;
        }
        let stem = files[i]
            .file_stem()
            .map_or_else(|| format!("rank{i}"), |s| s.to_string_lossy().into_owned());
        let name = format!("{stem}.{}{}", format.extension(), if gzip { ".gz" } else { "" });
        let path = out.join(name);
        let one = Filter {
            ranks: Vec::new(),
            ..filter.clone()
        };
        let stats = export_one(
            &Job::new([trace]).with_classifier(classifier.clone()),
            &one,
            format,
            gzip,
            &path,
            &files[i..=i],
        )?;
        report(args, &path, format, gzip, &stats, 1).map_err(CliError::Output)?;
        summary.push(written_json(&path, format, gzip, &stats));
        written += 1;
    }
    if written == 0 {
        return Err(export_error(out, &files)(ExportError::EmptySelection(format!(
            "no input has rank {:?}",
            args.rank
        ))));
    }
    if args.json {
        print_json(&summary)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// One written file, for `--json`.
fn written_json(path: &Path, format: Format, gzip: bool, stats: &ExportStats) -> serde_json::Value {
    serde_json::json!({
        "path": path.display().to_string(),
        "format": match format {
            Format::Perfetto => "perfetto",
            Format::ChromeJson => "chrome",
        },
        "gzip": gzip,
        "events": stats.walk.events,
        "flows": stats.walk.flows,
        "adjusted": stats.walk.adjusted,
        "truncated": stats.walk.truncated,
        "bytes": stats.bytes,
    })
}

/// `{"files": [...]}` on stdout.
fn print_json(files: &[serde_json::Value]) -> Result<(), CliError> {
    super::write_json(&mut io::stdout().lock(), &serde_json::json!({ "files": files }))
}

/// Export `job` to `out` (`-`: standard output), warning first when the
/// output will be too big for the viewer.
fn export_one(job: &Job<'_>, filter: &Filter, format: Format, gzip: bool, out: &Path, files: &[PathBuf]) -> Result<ExportStats, CliError> {
    let to_err = export_error(out, files);
    let est = match estimate(job, filter, format) {
        Ok(e) => e,
        Err(e) => return Err(to_err(e)),
    };
    if est.exceeds_viewer_limit() {
        eprintln!(
            "gputrace: warning: the export will be about {} ({} events), more than {} loads; narrow it with --from/--to, --rank, --device or --max-events",
            mb(est.bytes),
            est.events,
            est.viewer
        );
    }
    if out.as_os_str() == "-" {
        return write_to(io::stdout().lock(), gzip, job, filter, format).map_err(to_err);
    }
    // A Kineto input exported as JSON next to itself would be overwritten.
    let same = |f: &PathBuf| matches!((f.canonicalize(), out.canonicalize()), (Ok(a), Ok(b)) if a == b);
    if files.iter().any(same) {
        return Err(CliError::Io {
            path: out.to_path_buf(),
            source: io::Error::new(io::ErrorKind::AlreadyExists, "is one of the inputs; choose another output with -o"),
        });
    }
    crate::inputs::write_via_temp(out, |file| write_to(file, gzip, job, filter, format).map_err(to_err))
}

fn write_to(out: impl Write, gzip: bool, job: &Job<'_>, filter: &Filter, format: Format) -> Result<ExportStats, ExportError> {
    let out = BufWriter::with_capacity(1 << 20, out);
    if gzip {
        let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
        let stats = format.export(job, filter, &mut gz)?;
        gz.finish()?.flush()?;
        Ok(stats)
    } else {
        let mut out = out;
        let stats = format.export(job, filter, &mut out)?;
        out.flush()?;
        Ok(stats)
    }
}

/// One line on stderr (stdout may be the export): what was written and how
/// to open it.
fn report(args: &ExportArgs, out: &Path, format: Format, gzip: bool, stats: &ExportStats, inputs: usize) -> io::Result<()> {
    // Paths can carry control characters: shown escaped.
    let mut err = gputrace_format::text::SafeWriter::new(io::stderr().lock());
    let w = &stats.walk;
    let mut notes = Vec::new();
    if w.truncated {
        notes.push("cut at --max-events".to_string());
    }
    if w.adjusted > 0 {
        notes.push(format!("{} overlapping slices trimmed to nest", w.adjusted));
    }
    let notes = if notes.is_empty() {
        String::new()
    } else {
        format!(" ({})", notes.join("; "))
    };
    let size = if gzip {
        format!("{} before gzip", mb(stats.bytes))
    } else {
        mb(stats.bytes)
    };
    let target = if out.as_os_str() == "-" {
        "standard output".to_string()
    } else {
        out.display().to_string()
    };
    writeln!(err, "wrote {target}: {} events, {} launch arrows, {size}{notes}", w.events, w.flows)?;
    let (limit, viewer) = format.viewer_limit();
    if stats.bytes > limit {
        writeln!(
            err,
            "warning: {} is more than {viewer} loads; for big traces use trace_processor --httpd or narrow the export",
            mb(stats.bytes)
        )?;
    }
    match format {
        Format::Perfetto => writeln!(err, "open it at https://ui.perfetto.dev (Open trace file)"),
        Format::ChromeJson => {
            writeln!(err, "open it at https://ui.perfetto.dev or chrome://tracing")?;
            if inputs > 1 && args.rank.len() != 1 {
                writeln!(err, "note: HTA and TraceLens read one file per rank: give a directory, -o DIR/")?;
            }
            Ok(())
        }
    }
}

/// `--format parquet`: every event of every rank, plus the report's
/// rank × device breakdown, as Parquet tables under the output directory.
fn export_parquet(args: &ExportArgs, files: &[PathBuf], traces: &[TraceFile], job: &Job<'_>) -> Result<ExitCode, CliError> {
    let out = &args.output;
    let usage = |what: &str| CliError::Io {
        path: out.clone(),
        source: io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("--format parquet exports whole ranks: {what} is not supported (filter in SQL instead)"),
        ),
    };
    if args.from.is_some() || args.to.is_some() || !args.rank.is_empty() || !args.device.is_empty() {
        return Err(usage("--from/--to/--rank/--device"));
    }
    if args.max_events.is_some() || args.gzip {
        return Err(usage("--max-events/--gzip"));
    }
    if out.as_os_str() == "-" || out.is_file() {
        return Err(usage("a file or standard output as OUT (give a directory)"));
    }
    // The report's default options but for the price, tokens and run records
    // (so `runs` agrees with `report --json` given the same flags).
    let opts = gputrace_analysis::Options {
        gpu_hour_cost: args.gpu_hour_cost,
        productive: gputrace_analysis::ProductiveOptions {
            tokens_per_step: args.tokens_per_step,
            run_records: inputs::run_records(&args.paths)?,
            ..Default::default()
        },
        ..Default::default()
    };
    let report = gputrace_analysis::analyze(traces, &opts).map_err(|source| CliError::AnalysisFor {
        what: "breakdown for the parquet export",
        source,
    })?;
    let sources: Vec<_> = (0..traces.len())
        .map(|i| gputrace_columnar::RankSource {
            trace: &traces[i],
            rank: job.rank(i).0,
            shift_ns: job.shift(i),
        })
        .collect();
    let name = args.job.clone().unwrap_or_else(|| {
        let p = args.paths.first().map(|p| p.as_path()).unwrap_or(Path::new("job"));
        let p = if p.is_dir() { p } else { files.first().map_or(p, |f| f.as_path()) };
        p.file_stem()
            .map_or_else(|| "job".to_string(), |s| s.to_string_lossy().into_owned())
    });
    let ids: Vec<_> = sources.iter().map(|s| (s.rank, s.trace)).collect();
    let id = gputrace_columnar::JobId::of(&ids);
    let started = std::time::Instant::now();
    let export_job = gputrace_columnar::ExportJob {
        id: &id,
        name: &name,
        ranks: &sources,
        report: Some(&report),
    };
    let stats = gputrace_columnar::export(out, &export_job)?;
    let secs = started.elapsed().as_secs_f64();
    let tables: Vec<String> = gputrace_columnar::TABLES
        .iter()
        .zip(stats.rows)
        .map(|(t, n)| format!("{} {n}", t.name))
        .collect();
    eprintln!(
        "gputrace: wrote job {id} ({}) to {} ({} files, {}, {} events in {:.2} s = {:.0} events/s, {:.1} bytes/event; rows: {})",
        if stats.replaced { "replacing its earlier export" } else { "new" },
        out.display(),
        stats.files,
        mb(stats.bytes),
        stats.events,
        secs,
        stats.events as f64 / secs.max(1e-9),
        stats.bytes as f64 / (stats.events.max(1)) as f64,
        tables.join(", ")
    );
    if args.json {
        let rows: serde_json::Map<String, serde_json::Value> = gputrace_columnar::TABLES
            .iter()
            .zip(stats.rows)
            .map(|(t, n)| (t.name.to_string(), n.into()))
            .collect();
        print_json(&[serde_json::json!({
            "path": out.display().to_string(),
            "format": "parquet",
            "job_id": id.as_str(),
            "replaced": stats.replaced,
            "files": stats.files,
            "bytes": stats.bytes,
            "events": stats.events,
            "rows": rows,
        })])?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    #[test]
    fn align_puts_every_rank_on_the_reference_clock() {
        use gputrace_format::Event;
        use gputrace_synth::{schedule, write_rank, JobConfig};
        let cfg = JobConfig {
            ranks: 4,
            gpus_per_node: 1,
            steps: 3,
            layers: 3,
            clock_skew_ns: 2_000_000_000,
            ..JobConfig::default()
        };
        let sched = schedule(&cfg);
        let traces: Vec<TraceFile> = (0..4)
            .map(|r| TraceFile::from_bytes(format!("r{r}"), write_rank(&cfg, &sched, r, Vec::new()).unwrap().0).unwrap())
            .collect();
        // The first all-reduce ends on every rank within ~1 µs of true time.
        let first_end = |t: &TraceFile| {
            t.events()
                .filter_map(|e| match e.unwrap() {
                    Event::Collective(c) => Some(c.end.0 as i64),
                    _ => None,
                })
                .min()
                .unwrap()
        };
        let spread = |job: &Job<'_>| {
            let ends: Vec<i64> = traces.iter().enumerate().map(|(i, t)| first_end(t) + job.shift(i)).collect();
            ends.iter().max().unwrap() - ends.iter().min().unwrap()
        };
        assert!(spread(&Job::new(traces.iter())) > 100_000_000, "hosts disagree by up to seconds");
        assert!(spread(&aligned_job(&traces).unwrap()) <= 1_000);
    }

    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1500"), Ok(Nanos(1500)));
        assert_eq!(parse_duration("1.5s"), Ok(Nanos(1_500_000_000)));
        assert_eq!(parse_duration("200ms"), Ok(Nanos(200_000_000)));
        assert_eq!(parse_duration("0.000000001s"), Ok(Nanos(1)));
        assert_eq!(parse_duration("30us"), Ok(Nanos(30_000)));
        assert_eq!(parse_duration("2.5µs"), Ok(Nanos(2_500)));
        assert!(parse_duration("1.5ns").is_err());
        assert!(parse_duration("5 min").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("99999999999s").is_err());
    }
}
