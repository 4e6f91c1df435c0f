//! `gputrace info FILE...`: what a trace holds, without decoding every event.

use crate::error::CliError;
use crate::inputs;
use gputrace_format::text::{escape, SafeWriter};
use gputrace_format::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `gputrace info`.
#[derive(Debug, clap::Args)]
pub struct InfoArgs {
    /// Trace files, or directories of them (one file per rank).
    #[arg(required = true, value_name = "FILE|DIR")]
    pub paths: Vec<PathBuf>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also decode every event for totals: kernel time, copy bytes by kind
    /// (reads the whole file).
    #[arg(long)]
    pub stats: bool,
}

/// Totals from decoding every event (`info --stats`).
#[derive(Debug, Default, Serialize)]
pub struct Stats {
    /// Kernels.
    pub kernels: u64,
    /// Sum of kernel durations (overlaps counted twice).
    pub kernel_time_ns: u64,
    /// Distinct kernel names.
    pub kernel_names: usize,
    /// Copies and bytes per direction, e.g. `"HtoD": [12, 4096]`.
    pub copies: BTreeMap<String, (u64, u64)>,
    /// Sum of copy durations.
    pub copy_time_ns: u64,
    /// Memsets and bytes.
    pub memsets: (u64, u64),
    /// API calls per name.
    pub api_calls: BTreeMap<String, u64>,
}

/// Decode every event of `t` and total it.
pub fn stats(t: &TraceFile) -> Result<Stats, CliError> {
    let mut s = Stats::default();
    let mut names = std::collections::BTreeSet::new();
    for e in t.events() {
        match e? {
            Event::Kernel(k) => {
                s.kernels += 1;
                s.kernel_time_ns += k.end.saturating_sub(k.start).0;
                names.insert(k.name);
            }
            Event::Memcpy(m) => {
                let c = s.copies.entry(m.kind.name().to_string()).or_default();
                c.0 += 1;
                c.1 += m.bytes;
                s.copy_time_ns += m.end.saturating_sub(m.start).0;
            }
            Event::Memset(m) => {
                s.memsets.0 += 1;
                s.memsets.1 += m.bytes;
            }
            Event::Api(a) => *s.api_calls.entry(t.name(a.name).into_owned()).or_default() += 1,
            _ => {}
        }
    }
    s.kernel_names = names.len();
    Ok(s)
}

/// Everything `info` reports about one file.
#[derive(Debug, Serialize)]
pub struct FileInfo {
    /// Path as given.
    pub path: String,
    /// File size.
    pub size_bytes: u64,
    /// `major.minor`.
    pub format_version: String,
    /// The header as recorded.
    pub header: Header,
    /// Events per kind.
    pub events: BTreeMap<String, u64>,
    /// All events.
    pub events_total: u64,
    /// File bytes per event.
    pub bytes_per_event: f64,
    /// First start and last end, ns in the trace's time domain.
    pub time_span_ns: Option<(u64, u64)>,
    /// GPU (device, context, stream) tracks.
    pub gpu_streams: usize,
    /// CPU thread tracks.
    pub threads: usize,
    /// String table size.
    pub strings: usize,
    /// Recorded losses per source: (records, total lost).
    pub losses: BTreeMap<String, LossSummary>,
    /// True when the writer finished (trailer present) and nothing is damaged.
    pub complete: bool,
    /// Why the file is incomplete, if it is.
    pub integrity: String,
    /// Damage at the end of the file.
    pub damage: Option<DamageInfo>,
    /// Chunks of kinds this gputrace does not know (written by a newer one).
    pub skipped_chunks: u32,
    /// NCCL communicators the trace names (from the NCCL profiler plugin).
    pub communicators: Vec<Communicator>,
    /// Capture windows of a duty-cycled capture (empty: traced the whole time).
    pub capture_windows: Vec<gputrace_format::CaptureWindow>,
    /// Counter series (GPU counters sampled beside the timeline).
    pub counters: Vec<SeriesInfo>,
    /// The trailer's free-form notes (what the agent counted at the end,
    /// e.g. `agent.api_calls_filtered`); empty without a trailer.
    pub trailer_extra: BTreeMap<String, String>,
    /// Totals from every event, with `--stats`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<Stats>,
    /// Host samples (`gputrace run`'s sampler; format 1.4), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_samples: Option<HostSamplesInfo>,
    /// Host samples the run record beside the trace said were being taken and
    /// that were never written into it (a loss; docs/host.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_samples_unwritten: Option<gputrace_analysis::HostSamplesUnwritten>,
}

/// One counter series: its samples summarized.
#[derive(Debug, Serialize)]
pub struct SeriesInfo {
    /// Device ordinal.
    pub device: u32,
    /// Series name, e.g. `nvml.sm_clock_mhz`.
    pub metric: String,
    /// Samples.
    pub samples: usize,
    /// Smallest value.
    pub min: u64,
    /// Largest value.
    pub max: u64,
    /// Time-weighted mean.
    pub mean: f64,
    /// First and last sample, ns in the trace's time domain.
    pub span_ns: (u64, u64),
}

/// Losses from one source.
#[derive(Debug, Default, Serialize)]
pub struct LossSummary {
    /// Loss records.
    pub records: u64,
    /// Sum of their counts.
    pub lost: u64,
}

/// Serializable [`Damage`].
#[derive(Debug, Serialize)]
pub struct DamageInfo {
    /// Offset of the first unreadable byte.
    pub offset: u64,
    /// Bytes that could not be read.
    pub lost_bytes: u64,
    /// Why.
    pub reason: String,
}

/// What a trace's host samples hold (`info`).
#[derive(Debug, Serialize)]
pub struct HostSamplesInfo {
    /// Samples asked for per second.
    pub hz: u32,
    /// Samples recorded (one per thread per tick).
    pub samples: u64,
    /// Runs stored (consecutive equal samples of a thread are one run).
    pub runs: usize,
    /// Threads sampled.
    pub threads: usize,
    /// Processes they belong to.
    pub processes: usize,
    /// Distinct Python stacks.
    pub python_stacks: usize,
    /// First sample to the end of the last run, ns.
    pub span_ns: Option<(u64, u64)>,
    /// Samples lost, by cause.
    pub lost: BTreeMap<String, u64>,
}

fn host_samples_info(t: &TraceFile) -> Result<Option<HostSamplesInfo>, CliError> {
    let Some(h) = t.host_samples()? else { return Ok(None) };
    let mut pids: Vec<u32> = h.threads.iter().map(|t| t.pid).collect();
    pids.sort_unstable();
    pids.dedup();
    Ok(Some(HostSamplesInfo {
        hz: h.hz,
        samples: h.sample_count(),
        runs: h.runs.len(),
        threads: h.threads.len(),
        processes: pids.len(),
        python_stacks: h.stacks.len(),
        span_ns: h
            .runs
            .first()
            .map(|f| (f.start.0, h.runs.iter().map(|r| r.end.0).max().unwrap_or(f.start.0))),
        lost: h.losses,
    }))
}

fn write_host_samples(out: &mut impl Write, h: &HostSamplesInfo) -> std::io::Result<()> {
    let span = h
        .span_ns
        .map_or(String::new(), |(a, b)| format!(" over {}", Nanos(b.saturating_sub(a))));
    // hz 0: stacks traced by Kineto (`python_function` events), one run per interval.
    let rate = if h.hz == 0 {
        " traced (Kineto python_function)".to_string()
    } else {
        format!(" at {} Hz", h.hz)
    };
    writeln!(
        out,
        "  host samples  {}{rate}{span}: {} threads in {} process(es), {} Python stacks ({} runs)",
        thousands(h.samples),
        h.threads,
        h.processes,
        h.python_stacks,
        thousands(h.runs as u64)
    )?;
    for (cause, n) in &h.lost {
        let what = match cause.as_str() {
            "host_samples_cap" => "samples past the sampler's memory cap",
            "python_read" => "Python stack reads that raced the process (those samples have no stack)",
            "python_attach" => "processes whose Python stacks could not be read",
            "frame_table_cap" => "thread samples without their stack: the frame table was full",
            _ => "samples",
        };
        writeln!(out, "  LOSSES        host samples {cause}: {} {what}", thousands(*n))?;
    }
    Ok(())
}

/// Collect the facts about one open trace.
pub fn describe(t: &TraceFile) -> Result<FileInfo, CliError> {
    let mut losses: BTreeMap<String, LossSummary> = BTreeMap::new();
    for e in t.events_of(&[EventKind::Loss]) {
        if let Event::Loss(l) = e? {
            let s = losses.entry(l.source.name().to_string()).or_default();
            s.records += 1;
            s.lost = s.lost.saturating_add(l.count);
        }
    }
    let counters = t
        .counter_series()?
        .into_iter()
        .filter(|c| !c.samples.is_empty())
        .map(|c| SeriesInfo {
            device: c.device.0,
            samples: c.samples.len(),
            min: c.samples.iter().map(|s| s.1).min().unwrap_or(0),
            max: c.samples.iter().map(|s| s.1).max().unwrap_or(0),
            mean: c.time_weighted_mean().unwrap_or(0.0),
            span_ns: (c.samples[0].0 .0, c.samples[c.samples.len() - 1].0 .0),
            metric: c.metric,
        })
        .collect();
    let tracks = t.tracks();
    let total = t.event_total();
    let damage = t.damage().map(|d| DamageInfo {
        offset: d.offset,
        lost_bytes: d.lost_bytes,
        reason: d.reason.clone(),
    });
    let integrity = match (t.trailer(), t.damage()) {
        (_, Some(d)) => format!(
            "DAMAGED: {} bytes from offset {} unreadable ({}); events before it are intact",
            d.lost_bytes, d.offset, d.reason
        ),
        (None, None) => {
            "NOT FINISHED: no trailer, the recording process did not finish writing (killed?); all whole chunks are intact".into()
        }
        (Some(_), None) => "complete".into(),
    };
    let (major, minor) = t.format_version();
    Ok(FileInfo {
        path: t.path().display().to_string(),
        size_bytes: t.len_bytes(),
        format_version: format!("{major}.{minor}"),
        header: t.header().clone(),
        events: t.event_counts().into_iter().map(|(k, v)| (k.name().to_string(), v)).collect(),
        events_total: total,
        bytes_per_event: if total > 0 { t.len_bytes() as f64 / total as f64 } else { 0.0 },
        time_span_ns: t.time_span().map(|(a, b)| (a.0, b.0)),
        gpu_streams: tracks.iter().filter(|s| matches!(s.track, Track::Gpu { .. })).count(),
        threads: tracks.iter().filter(|s| matches!(s.track, Track::Thread { .. })).count(),
        strings: t.string_count(),
        losses,
        complete: t.trailer().is_some() && t.damage().is_none(),
        integrity,
        damage,
        skipped_chunks: t.skipped_chunks(),
        communicators: t.communicators().to_vec(),
        capture_windows: t.capture_windows().to_vec(),
        counters,
        trailer_extra: t.trailer().map(|tr| tr.extra.clone()).unwrap_or_default(),
        stats: None,
        host_samples: host_samples_info(t)?,
        host_samples_unwritten: None,
    })
}

/// Run `gputrace info`.
pub fn run(args: &InfoArgs) -> Result<ExitCode, CliError> {
    let files = inputs::expand(&args.paths)?;
    // A record that does not parse leaves the traces' own facts to tell.
    let records = inputs::run_records(&args.paths).unwrap_or_else(|e| {
        super::say(&format!("gputrace: {e}: host samples the launcher owed are not checked"));
        Vec::new()
    });
    let mut infos = Vec::new();
    let mut failed = 0;
    // Text goes through the escaping writer; JSON is written exact.
    let mut out = SafeWriter::new(std::io::stdout().lock());
    for f in &files {
        let described = inputs::open_as_imported(f).and_then(|t| {
            let mut i = describe(&t)?;
            i.host_samples_unwritten = gputrace_analysis::HostSamplesUnwritten::of(t.header(), t.has_host_samples(), &records);
            if args.stats {
                i.stats = Some(stats(&t)?);
            }
            Ok(i)
        });
        match described {
            Ok(i) => {
                if !args.json {
                    write_text(&mut out, &i).map_err(CliError::Output)?;
                }
                infos.push(i);
            }
            Err(e) => {
                failed += 1;
                super::say(&format!("gputrace: error: {e}"));
                if let Some(hint) = e.hint() {
                    super::say(&format!("  hint: {hint}"));
                }
            }
        }
    }
    if args.json {
        let mut out = out.into_inner().map_err(CliError::Output)?;
        super::write_json(&mut out, &serde_json::json!({ "files": infos }))?;
    }
    if failed > 0 {
        return Err(CliError::SomeInputsFailed {
            failed,
            total: files.len(),
        });
    }
    Ok(ExitCode::SUCCESS)
}

fn version_str(v: Option<u32>) -> String {
    // CUDA encodes versions as 1000*major + 10*minor.
    v.map_or("unknown".into(), |v| format!("{}.{}", v / 1000, (v % 1000) / 10))
}

/// `i` as text. Names from the trace are escaped where they are written (one
/// line each); the caller's [`SafeWriter`] catches any other control character.
fn write_text(out: &mut impl Write, i: &FileInfo) -> std::io::Result<()> {
    write_process(out, i)?;
    write_devices(out, i)?;
    write_communicators(out, i)?;
    write_series(out, i)?;
    write_events(out, i)?;
    write_host_and_skipped(out, i)?;
    write_stats(out, i)?;
    writeln!(out, "  integrity     {}", i.integrity)?;
    writeln!(out)
}

/// The file, who wrote it, the process it traced, its clocks, CUDA versions and the capture agent's notes.
fn write_process(out: &mut impl Write, i: &FileInfo) -> std::io::Result<()> {
    let h = &i.header;
    writeln!(out, "{}", escape(&i.path))?;
    let producer = match h.producer {
        Producer::Synthetic => "SYNTHETIC (gputrace demo; not a GPU measurement)",
        Producer::Agent => "gputrace agent",
        Producer::Import => "imported",
        Producer::Launcher => "gputrace run (samples taken by the launcher, e.g. serving metrics)",
    };
    writeln!(
        out,
        "  producer      {producer}, gputrace {} (format {})",
        escape(&h.tool_version),
        i.format_version
    )?;
    let rank = match (&h.rank.rank, &h.rank.source) {
        (Some(r), Some(src)) => format!("rank {r} (from {})", escape(src)),
        (Some(r), None) => format!("rank {r}"),
        _ => "no rank (single process)".into(),
    };
    let local = h.rank.local_rank.map_or(String::new(), |l| format!(", local rank {l}"));
    let world = h.rank.world_size.map_or(String::new(), |w| format!(", world size {w}"));
    // An imported trace may know no host name, or (no CPU-side event) no pid.
    let host = if h.hostname.is_empty() {
        "host unknown".into()
    } else {
        escape(&h.hostname)
    };
    let pid = if h.pid == 0 {
        "pid unknown".to_string()
    } else {
        format!("pid {}", h.pid)
    };
    writeln!(out, "  process       {host} {pid}, {rank}{local}{world}")?;
    if !h.command.is_empty() {
        writeln!(out, "  command       {}", escape(&h.command.join(" ")))?;
    }
    let c = &h.start_clock;
    let cupti = c.cupti_ns.map_or(String::new(), |v| format!(", cupti {v}"));
    writeln!(
        out,
        "  started       {} (realtime {} ns, monotonic {} ns{cupti})",
        utc(c.realtime_ns),
        c.realtime_ns,
        c.monotonic_ns
    )?;
    writeln!(
        out,
        "  cuda          driver {}, runtime {}, cupti {}",
        version_str(h.cuda.driver),
        version_str(h.cuda.runtime),
        h.cuda.cupti.map_or("unknown".into(), |v| v.to_string())
    )?;
    // The capture agent's notes: header (how it ran), then trailer (what
    // it counted at the end).
    let notes = h
        .extra
        .iter()
        .chain(&i.trailer_extra)
        .filter(|(k, _)| ["agent.", "cupti.", "nccl.", "nvml.", "flight."].iter().any(|p| k.starts_with(p)));
    for (n, (k, v)) in notes.enumerate() {
        let label = if n == 0 { "agent" } else { "" };
        writeln!(out, "  {label:<13} {}: {}", escape(k), escape(v))?;
    }
    Ok(())
}

/// The GPUs, the time the events span, and the capture windows of a duty-cycled capture.
fn write_devices(out: &mut impl Write, i: &FileInfo) -> std::io::Result<()> {
    let h = &i.header;
    for d in &h.devices {
        writeln!(
            out,
            "  device {:<6} {} ({}), {} SMs, {:.1} GiB, cc {}.{}{}",
            d.ordinal.0,
            escape(&d.name),
            escape(&d.uuid),
            d.sm_count,
            d.memory_bytes as f64 / (1u64 << 30) as f64,
            d.compute_capability.0,
            d.compute_capability.1,
            if d.pci_bus_id.is_empty() {
                String::new()
            } else {
                format!(", pci {}", escape(&d.pci_bus_id))
            }
        )?;
    }
    match i.time_span_ns {
        Some((a, b)) => writeln!(out, "  time span     {} ({} .. {} ns)", Nanos(b.saturating_sub(a)), a, b)?,
        None => writeln!(out, "  time span     no events")?,
    }
    if let (Some(first), Some(last)) = (i.capture_windows.first(), i.capture_windows.last()) {
        let traced: u64 = i.capture_windows.iter().map(|w| w.end.0 - w.start.0).sum();
        writeln!(
            out,
            "  capture       duty-cycled{}: {} window(s), {} traced of {} ({} .. {} ns); untraced between them",
            h.extra.get("capture.duty").map_or(String::new(), |d| format!(" ({})", escape(d))),
            i.capture_windows.len(),
            Nanos(traced),
            Nanos(last.end.0 - first.start.0),
            first.start.0,
            last.end.0
        )?;
    }
    Ok(())
}

/// The NCCL communicators.
fn write_communicators(out: &mut impl Write, i: &FileInfo) -> std::io::Result<()> {
    for c in &i.communicators {
        let name = if c.name.is_empty() {
            String::new()
        } else {
            format!(" \"{}\"", escape(&c.name))
        };
        let nodes = match c.nodes {
            0 => String::new(),
            1 => ", 1 node".to_string(),
            n => format!(", {n} nodes"),
        };
        let via = if c.plugin_version > 0 {
            format!(" (NCCL profiler v{})", c.plugin_version)
        } else {
            String::new()
        };
        writeln!(
            out,
            "  communicator  {:016x}{name}: rank {}{}{nodes}{via}",
            c.id.0,
            if c.rank == gputrace_format::RANK_UNKNOWN {
                "unknown".to_string()
            } else {
                c.rank.to_string()
            },
            if c.nranks > 0 {
                format!(" of {}", c.nranks)
            } else {
                " (size not reported by NCCL < 2.27)".to_string()
            }
        )?;
    }
    Ok(())
}

/// The counter and serving-metric series.
fn write_series(out: &mut impl Write, i: &FileInfo) -> std::io::Result<()> {
    for (n, c) in i.counters.iter().enumerate() {
        let label = if n == 0 { "series" } else { "" };
        let range = if c.metric == metric::THROTTLE_REASONS {
            format!("bit mask, largest {:#x}", c.max)
        } else {
            format!("{}..{}, mean {:.1}", c.min, c.max, c.mean)
        };
        // A server's scraped series (docs/serving.md) belong to no GPU.
        let owner = if c.metric.starts_with(metric::serving::PREFIX) {
            "server".to_string()
        } else {
            format!("gpu{}", c.device)
        };
        writeln!(
            out,
            "  {label:<13} {owner} {}: {} samples over {}, {range}",
            escape(&c.metric),
            thousands(c.samples as u64),
            Nanos(c.span_ns.1.saturating_sub(c.span_ns.0))
        )?;
    }
    Ok(())
}

/// Event counts, size, and what was lost.
fn write_events(out: &mut impl Write, i: &FileInfo) -> std::io::Result<()> {
    let kinds: Vec<String> = i.events.iter().map(|(k, v)| format!("{k} {}", thousands(*v))).collect();
    writeln!(out, "  events        {} total: {}", thousands(i.events_total), kinds.join(", "))?;
    writeln!(
        out,
        "  size          {} bytes, {:.2} bytes/event; {} GPU streams, {} CPU threads, {} strings",
        thousands(i.size_bytes),
        i.bytes_per_event,
        i.gpu_streams,
        i.threads,
        i.strings
    )?;
    if let Some(h) = &i.host_samples_unwritten {
        writeln!(out, "  LOSSES        {} (run record {})", h.what, escape(&h.run_record))?;
    }
    if i.losses.is_empty() {
        if i.host_samples_unwritten.is_none() {
            writeln!(out, "  losses        none recorded")?;
        }
    } else {
        for (src, l) in &i.losses {
            if src == LossSource::COUNTER_FAILED.name() {
                writeln!(
                    out,
                    "  LOSSES        {src}: {} counter series stopped early (see the loss records)",
                    l.records
                )?;
            } else if src == LossSource::COUNTER_OVERFLOW.name() {
                writeln!(
                    out,
                    "  LOSSES        {src}: {} counter samples lost to a full hardware buffer ({} records)",
                    thousands(l.lost),
                    l.records
                )?;
            } else {
                writeln!(out, "  LOSSES        {src}: {} lost ({} records)", thousands(l.lost), l.records)?;
            }
        }
    }
    Ok(())
}

/// Host samples and chunks of a newer format.
fn write_host_and_skipped(out: &mut impl Write, i: &FileInfo) -> std::io::Result<()> {
    if let Some(h) = &i.host_samples {
        write_host_samples(out, h)?;
    }
    if i.skipped_chunks > 0 {
        writeln!(
            out,
            "  note          {} chunks of a newer format skipped; upgrade gputrace to read them",
            i.skipped_chunks
        )?;
    }
    Ok(())
}

/// Kernel, copy and memset totals.
fn write_stats(out: &mut impl Write, i: &FileInfo) -> std::io::Result<()> {
    if let Some(s) = &i.stats {
        writeln!(
            out,
            "  kernels       {} ({} names), {} of kernel time (summed)",
            thousands(s.kernels),
            s.kernel_names,
            Nanos(s.kernel_time_ns)
        )?;
        for (kind, (n, bytes)) in &s.copies {
            writeln!(out, "  copies {kind:<6} {} copies, {} bytes", thousands(*n), thousands(*bytes))?;
        }
        if s.memsets.0 > 0 {
            writeln!(
                out,
                "  memsets       {} memsets, {} bytes",
                thousands(s.memsets.0),
                thousands(s.memsets.1)
            )?;
        }
    }
    Ok(())
}

/// `1234567` → `1,234,567`.
pub fn thousands(v: u64) -> String {
    let s = v.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// ns since the epoch as `YYYY-MM-DD HH:MM:SS.mmm UTC` (milliseconds truncated).
pub fn utc(ns: u64) -> String {
    let (secs, sub) = (ns / 1_000_000_000, (ns % 1_000_000_000) as u32);
    // Every u64 of ns (up to the year 2554) is within chrono's range.
    match i64::try_from(secs).ok().and_then(|s| chrono::DateTime::from_timestamp(s, sub)) {
        Some(t) => t.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string(),
        None => format!("{ns} ns since the epoch"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(utc(0), "1970-01-01 00:00:00.000 UTC");
        assert_eq!(utc(1_790_000_000_123_000_000), "2026-09-21 14:13:20.123 UTC");
        assert_eq!(version_str(Some(12090)), "12.9");
        assert_eq!(version_str(Some(13000)), "13.0");
    }
}
