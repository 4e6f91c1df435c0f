//! Read PyTorch profiler (Kineto) Chrome-JSON traces into the gputrace model.
//!
//! `torch.profiler` writes one JSON document per rank (often gzipped):
//! a `traceEvents` array plus metadata such as `baseTimeNanoseconds`,
//! `distributedInfo` and `deviceProperties`. [`import`] parses that array
//! in place, in windows of the read buffer (on several threads for a
//! large file: see `parallel`), with a validating parser that keeps only the
//! fields it maps (`event`), and writes a [`gputrace_format::TraceWriter`].
//! Memory stays bounded by the window, the mapped events written in memory
//! until the time base is known (at most [`ImportOptions::max_one_pass_events`];
//! beyond, the file is read twice), the string table and the largest single
//! event, whatever the size of the file. [`to_trace`] does the same
//! into memory and opens the result as a [`gputrace_format::TraceFile`].
//!
//! Both schemas are read: the current one (`kernel`, `gpu_memcpy`,
//! `gpu_memset`, `cuda_runtime`, `cuda_driver`, `cuda_sync`,
//! `user_annotation`, `gpu_user_annotation`, `ac2g` flows) and the old one
//! (`Kernel`, `Runtime`, `Memcpy`, `Memset`, `Operator`). Times become
//! absolute nanoseconds (`baseTimeNanoseconds + ts`) computed from the
//! number text, so `1712195495519689.047` µs is exactly
//! `1712195495519689047` ns. Entries the model has no place for (CPU
//! operators, Python frames, metadata) are counted and written as `Loss`
//! events with source `IMPORT`.
//!
//! ```
//! let dir = std::env::temp_dir().join(format!("gputrace-kineto-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let path = dir.join("rank0.json");
//! std::fs::write(&path, r#"{"schemaVersion": 1, "traceEvents": [
//!   {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 10.5, "dur": 2.25,
//!    "args": {"device": 0, "stream": 7, "correlation": 3}}]}"#)?;
//! assert!(gputrace_kineto::is_kineto(&std::fs::read(&path)?));
//! let trace = gputrace_kineto::to_trace(&path)?;
//! let events: Vec<_> = trace.events().collect::<Result<_, _>>()?;
//! assert_eq!(events[0].start().0, 10_500);
//! assert_eq!(events[0].end().0, 12_750);
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(missing_docs)]

mod class;
mod error;
mod event;
mod held;
mod map;
mod meta;
pub mod number;
mod parallel;
mod python;
mod salvage;
mod scan;
mod skeleton;

pub use error::{KinetoError, Position};

use error::Fail;
use event::{ParseError, RawEvent};
use gputrace_format::{Event, EventKind, Header, Loss, LossSource, Nanos, StringId, TraceFile, TraceWriter, Trailer, WriterOptions};
use held::{Sink, PROVISIONAL_BASE};
use map::{Mapped, Mapper, Tally};
use meta::TraceMeta;
use scan::{CountingReader, Here, ReadAhead, Scanner, Shape};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Import settings.
#[derive(Clone, Debug)]
pub struct ImportOptions {
    /// Fail on the first trace event that has a mappable category but bad
    /// fields (e.g. a kernel whose `ts` is a string). By default such
    /// events are counted and written as `Loss` events instead.
    pub strict: bool,
    /// Settings of the gputrace writer.
    pub writer: WriterOptions,
    /// Threads that read a trace, the calling one included: 0 (the
    /// default) for one per core, at most 8, for a large trace (a smaller
    /// one is parsed on the calling thread and, gzipped, inflated on another);
    /// 1 for the calling thread only. The result is the same byte for byte
    /// whatever the number. Strict imports parse on one thread.
    pub threads: usize,
    /// Mapped events written in memory while the metadata after
    /// `traceEvents` is not yet read (see [`import`]); a trace with more is
    /// read twice instead. Default 2,097,152 (some 15 MiB written).
    pub max_one_pass_events: usize,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions {
            strict: false,
            writer: WriterOptions::default(),
            threads: 0,
            max_one_pass_events: held::ONE_PASS_EVENTS,
        }
    }
}

/// What an import did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportSummary {
    /// Size of the input file (compressed size for gzip).
    pub input_bytes: u64,
    /// Bytes of JSON text read (after decompression).
    pub json_bytes: u64,
    /// Bytes of gputrace output written.
    pub output_bytes: u64,
    /// Elements of `traceEvents`.
    pub trace_events: u64,
    /// gputrace events written, by kind name (`kernel`, `memcpy`, ...; `loss` counts loss records).
    pub events: BTreeMap<String, u64>,
    /// `ac2g` flow endpoints; their links are carried by correlation ids.
    pub flows: u64,
    /// `python_function` events (a trace recorded with `with_stack=True`)
    /// kept as host stacks (a host samples chunk: `docs/host.md`); those
    /// past the importer's cap are in `unmapped`.
    pub python_calls: u64,
    /// Entries that could not be mapped, by detail (each written as one `Loss` event).
    pub unmapped: BTreeMap<String, u64>,
    /// The input was cut off mid-write and read up to its last complete trace event:
    /// what was kept and lost (also a `truncated` loss record and the trailer's
    /// `import.truncated`). `None` for a whole file.
    pub truncated: Option<String>,
}

impl ImportSummary {
    /// Entries that could not be mapped, in total.
    pub fn unmapped_total(&self) -> u64 {
        self.unmapped.values().sum()
    }
}

/// Whether `first_bytes` (the start of a file; pass 64 KiB) look like a
/// Kineto trace: plain or gzipped JSON whose top-level object mentions
/// `traceEvents`, `schemaVersion`, `deviceProperties`, `distributedInfo` or
/// `baseTimeNanoseconds` in the bytes given, or is a JSON object too large
/// to judge from them (some writers put a large `metadata` member first;
/// [`import`] then says clearly if it is not a trace). Small JSON documents
/// without those members are not Kineto traces.
pub fn is_kineto(first_bytes: &[u8]) -> bool {
    if first_bytes.starts_with(&[0x1f, 0x8b]) {
        // Inflate what we were given; a cut-off prefix still yields its first bytes.
        let mut text = Vec::new();
        let mut decoder = flate2::read::GzDecoder::new(first_bytes).take(DETECT_TEXT as u64);
        let mut chunk = [0u8; 4096];
        let mut complete = false;
        loop {
            match decoder.read(&mut chunk) {
                Ok(0) => {
                    // End of the gzip stream, or of the text we inspect.
                    complete = text.len() < DETECT_TEXT;
                    break;
                }
                Err(_) => break,
                Ok(n) => text.extend_from_slice(&chunk[..n]),
            }
        }
        // Too little input to see any text: trust the magic.
        return text.is_empty() || looks_like_kineto_json(&text, complete);
    }
    looks_like_kineto_json(first_bytes, false)
}

/// How much decompressed text [`is_kineto`] inspects.
const DETECT_TEXT: usize = 256 * 1024;

/// `complete`: `text` is the whole document (not only a prefix). A prefix
/// that is not known to be the whole document counts as too large to judge
/// only if no closing brace at its end says the document ended.
fn looks_like_kineto_json(text: &[u8], complete: bool) -> bool {
    let text = text.strip_prefix(&[0xEF, 0xBB, 0xBF]).unwrap_or(text);
    let Some(first) = text.iter().position(|b| !b.is_ascii_whitespace()) else {
        return false;
    };
    if text[first] != b'{' {
        return false;
    }
    const KEYS: [&[u8]; 5] = [
        b"\"traceEvents\"",
        b"\"schemaVersion\"",
        b"\"deviceProperties\"",
        b"\"distributedInfo\"",
        b"\"baseTimeNanoseconds\"",
    ];
    if KEYS.iter().any(|k| memchr::memmem::find(text, k).is_some()) {
        return true;
    }
    let ends_document = text.iter().rev().find(|b| !b.is_ascii_whitespace()) == Some(&b'}');
    !complete && !ends_document
}

/// Import the Kineto trace at `path` (`.json` or gzip, detected by content)
/// and write it to `out` in the gputrace format.
///
/// The file is read once: the events are mapped and written as they are
/// parsed, into memory, timed against a provisional base, since
/// `baseTimeNanoseconds` (which every time is relative to) may follow
/// `traceEvents`, and the gputrace header comes first. Once the file is
/// read, the header is put in front and every time moved to the real base
/// ([`gputrace_format::retime`]), and the result written to `out`. A trace
/// with more events than that memory is meant for (about 2 million events,
/// some 15 MiB) is read twice instead: once for the metadata, then for the
/// events, which then go straight to `out`. Either way no more than one
/// trace event's text is in memory at a time.
///
/// A file cut off mid-write (the text ends inside the top-level object) is
/// read up to its last complete trace event, and what was lost is recorded
/// ([`ImportSummary::truncated`]); with [`ImportOptions::strict`] it is refused.
pub fn import<W: Write>(path: &Path, mut out: W, opts: &ImportOptions) -> Result<ImportSummary, KinetoError> {
    let mut out = CountingWriter { inner: &mut out, count: 0 };
    with_salvage(path, opts, |input| {
        if out.count > 0 {
            // A two-pass import failed after writing: not read again into the same output.
            return Err(Fail::NotKineto("cut off after part of it was written".into()).with_path(path.to_path_buf()));
        }
        import_input(input, &mut out, opts)
    })
}

/// Run `attempt` on the whole input; if it fails because the input is cut
/// off (see `salvage`), and not `opts.strict`, again on the text up to the
/// cut. The first failure is returned when the input is not cut off, when it
/// failed before the cut (damage in the middle is not a cut), or when the
/// second attempt fails too.
fn with_salvage<T>(path: &Path, opts: &ImportOptions, mut attempt: impl FnMut(&Input) -> Result<T, KinetoError>) -> Result<T, KinetoError> {
    let err = match attempt(&Input { path, cut: None }) {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    if opts.strict
        || !matches!(
            err,
            KinetoError::Syntax { .. } | KinetoError::Gzip { .. } | KinetoError::WrongType { .. }
        )
    {
        return Err(err);
    }
    let Some(cut) = text_of(path).ok().and_then(salvage::find_cut) else {
        return Err(err);
    };
    if err.position().is_some_and(|p| p.offset < cut.keep) {
        return Err(err);
    }
    attempt(&Input { path, cut: Some(cut) }).map_err(|_| err)
}

/// The JSON text of `path`, inflated if it is gzip.
fn text_of(path: &Path) -> std::io::Result<Box<dyn Read>> {
    let mut file = BufReader::new(File::open(path)?);
    let gzip = std::io::BufRead::fill_buf(&mut file)?.starts_with(&[0x1f, 0x8b]);
    Ok(if gzip {
        Box::new(flate2::read::MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    })
}

/// The file being imported, and where to cut it if it was cut off mid-write.
struct Input<'a> {
    path: &'a Path,
    cut: Option<salvage::Cut>,
}

/// [`import`] of one attempt.
fn import_input<W: Write>(input: &Input, mut out: W, opts: &ImportOptions) -> Result<ImportSummary, KinetoError> {
    let path = input.path;
    match one_pass(input, opts) {
        Ok(done) => {
            let (bytes, summary) = done?;
            out.write_all(&bytes).and_then(|()| out.flush()).map_err(|e| KinetoError::Write {
                path: path.to_path_buf(),
                source: gputrace_format::FormatError::Write(e),
            })?;
            Ok(summary)
        }
        Err(Restart) => two_passes(input, out, opts),
    }
}

/// The one-pass import gave up (too many events to hold, the rank came
/// after the events it applies to, or a time cannot be moved to the real
/// base); read the file twice instead.
struct Restart;

/// The writer of a one-pass import, counting the events it takes.
struct Direct<W: Write> {
    writer: TraceWriter<W>,
    events: usize,
    /// Most events taken (0: no limit).
    limit: usize,
}

impl<W: Write> map::Interner for Direct<W> {
    fn intern(&mut self, s: &str) -> StringId {
        self.writer.intern(s)
    }
}

impl<W: Write> Sink for Direct<W> {
    fn put(&mut self, event: Event) -> Result<(), Fail> {
        if self.limit > 0 && self.events >= self.limit {
            return Err(Fail::TooManyForOnePass);
        }
        self.events += 1;
        self.writer.push(event).map_err(Fail::Write)
    }
}

/// Read the whole file once, writing the mapped events in memory against
/// the provisional base; then the trace, moved to the real base, and what
/// was done (see [`import`]).
fn one_pass(input: &Input, opts: &ImportOptions) -> Result<Result<(Vec<u8>, ImportSummary), KinetoError>, Restart> {
    let path = input.path;
    let (mut sc, input_bytes) = match open(input, |size| inflate_apart(opts, size)) {
        Ok(x) => x,
        Err(e) => return Ok(Err(e)),
    };
    let mut summary = ImportSummary {
        input_bytes,
        ..ImportSummary::default()
    };
    let mut tally = Tally::default();
    let out = CountingWriter {
        inner: Vec::new(),
        count: 0,
    };
    // The header is put in front at the end (`retime` replaces this one).
    let writer = match TraceWriter::new(out, &Header::default(), opts.writer.clone()) {
        Ok(w) => w,
        Err(e) => return Ok(Err(Fail::Write(e).with_path(path.to_path_buf()))),
    };
    let mut sink = Direct {
        writer,
        events: 0,
        limit: opts.max_one_pass_events,
    };
    let mut meta = TraceMeta::default();
    let mut value = Vec::new();
    // The rank the collectives were mapped with, once events were.
    let mut rank_used = None;
    let result = walk(&mut sc, |key, sc| {
        if key != "traceEvents" {
            return add_meta(&mut meta, key, sc, &mut value);
        }
        meta.has_events = true;
        let mapper = Mapper {
            base_ns: PROVISIONAL_BASE,
            rank: meta.rank,
        };
        rank_used = Some(meta.rank);
        trace_events(sc, &mapper, &mut sink, &mut tally, &mut summary, opts)
    });
    match result {
        Err(Fail::TooManyForOnePass) => return Err(Restart),
        Err(f) => return Ok(Err(f.with_path(path.to_path_buf()))),
        Ok(()) => {}
    }
    if rank_used.is_some_and(|r| r != meta.rank) {
        return Err(Restart);
    }
    if !meta.has_events {
        return Ok(Err(no_events().with_path(path.to_path_buf())));
    }
    summary.json_bytes = sc.offset();
    // Every time written is provisional, the loss records' too: a loss
    // without a time is dated 0 once moved.
    let shift = i128::from(meta.base_ns) - i128::from(PROVISIONAL_BASE);
    let (Ok(shift), Some(zero)) = (i64::try_from(shift), PROVISIONAL_BASE.checked_sub(meta.base_ns)) else {
        return Err(Restart);
    };
    for bucket in tally.losses().values_mut() {
        if bucket.first_time == Nanos::ZERO {
            bucket.first_time = Nanos(zero);
        }
    }
    meta.pid = tally.host_pid.unwrap_or(0);
    let source_name = source_name(path);
    let (mut summary, written) = match finish(input, sink.writer, tally, summary, &source_name, (meta.pid, shift)) {
        Ok(x) => x,
        Err(e) => return Ok(Err(e)),
    };
    // A time that cannot be moved (before 1970 or after 2554 once the base
    // is known): the two-pass import counts those events as losses.
    let bytes = gputrace_format::retime(&written.inner, &meta.header(&source_name), shift, &opts.writer).map_err(|_| Restart)?;
    summary.output_bytes = bytes.len() as u64;
    Ok(Ok((bytes, summary)))
}

/// Read the metadata first, then the events straight into the writer.
fn two_passes<W: Write>(input: &Input, out: W, opts: &ImportOptions) -> Result<ImportSummary, KinetoError> {
    let path = input.path;
    let meta = read_meta(input)?;
    let (mut writer, source_name) = start_writer(path, &meta, out, opts)?;
    let mapper = Mapper {
        base_ns: meta.base_ns,
        rank: meta.rank,
    };
    let mut tally = Tally::default();
    let mut summary = ImportSummary::default();
    let (mut sc, input_bytes) = open(input, |size| inflate_apart(opts, size))?;
    summary.input_bytes = input_bytes;
    let result = walk(&mut sc, |key, sc| {
        if key != "traceEvents" {
            sc.value(None, "a value")?;
            return Ok(());
        }
        trace_events(sc, &mapper, &mut writer, &mut tally, &mut summary, opts)
    });
    result.map_err(|f| f.with_path(path.to_path_buf()))?;
    summary.json_bytes = sc.offset();
    finish(input, writer, tally, summary, &source_name, (meta.pid, 0)).map(|(summary, _)| summary)
}

/// The file's name, for the header and the trailer.
fn source_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

/// The writer, with the header made from `meta`; and the file's name.
fn start_writer<W: Write>(
    path: &Path,
    meta: &TraceMeta,
    out: W,
    opts: &ImportOptions,
) -> Result<(TraceWriter<CountingWriter<W>>, String), KinetoError> {
    let source_name = source_name(path);
    let header = meta.header(&source_name);
    let out = CountingWriter { inner: out, count: 0 };
    let writer = TraceWriter::new(out, &header, opts.writer.clone()).map_err(|e| Fail::Write(e).with_path(path.to_path_buf()))?;
    Ok((writer, source_name))
}

/// The elements of `traceEvents` (the scanner is at its value), mapped into `sink`.
fn trace_events<R: Read, S: Sink>(
    sc: &mut Scanner<R>,
    mapper: &Mapper,
    sink: &mut S,
    tally: &mut Tally,
    summary: &mut ImportSummary,
    opts: &ImportOptions,
) -> Result<(), Fail> {
    let strict = opts.strict;
    if sc.peek()? != Some(b'[') {
        let (shape, start) = sc.value(None, "the traceEvents array")?;
        return Err(Fail::WrongType {
            at: sc.at(start),
            what: format!("\"traceEvents\" must be an array, found {}", shape_name(shape)),
        });
    }
    sc.expect(b'[', "'['")?;
    if sc.eat(b']')? {
        return Ok(());
    }
    // Where the next two-thread window may start (see `parallel`); after a
    // window that could not be split, half a window is parsed serially.
    let mut serial_until = 0u64;
    let mut windows = parallel::Windows::default();
    let workers = parallel::workers(opts.threads);
    loop {
        if two_threads(opts, sc.size_hint()) && sc.offset() >= serial_until {
            let parsed = windows.window(sc, mapper, sink, tally, workers)?;
            summary.trace_events += parsed;
            if parsed == 0 {
                serial_until = sc.offset() + parallel::window_size(sc.size_hint(), workers) as u64 / 2;
            } else if sc.comma_or(b']', "between trace events")? {
                return windows.flush(sink);
            } else {
                continue;
            }
        }
        // The last window's workers' events go first.
        windows.flush(sink)?;
        summary.trace_events += 1;
        if sc.peek()? == Some(b'{') {
            sc.event(|parsed, start, here| map_element(mapper, parsed, start, here, sink, tally, strict))??;
        } else {
            let (shape, start) = sc.value(None, "a trace event")?;
            problem(
                tally,
                strict,
                format!("trace event is {}, not an object", shape_name(shape)),
                sc.at(start),
            )?;
        }
        if sc.comma_or(b']', "between trace events")? {
            return Ok(());
        }
    }
}

/// Write the loss records, the trailer and the host stacks of the
/// `python_function` events (after the trailer, as `gputrace run` appends
/// its host samples; `retime` copies them as they are, so their times are
/// moved by `shift` here, for the process `pid`); what was done, and the output.
fn finish<W: Write>(
    input: &Input,
    mut writer: TraceWriter<CountingWriter<W>>,
    mut tally: Tally,
    mut summary: ImportSummary,
    source_name: &str,
    (pid, shift): (u32, i64),
) -> Result<(ImportSummary, CountingWriter<W>), KinetoError> {
    let path = input.path;
    let write_err = |source| KinetoError::Write {
        path: path.to_path_buf(),
        source,
    };
    let python = std::mem::take(&mut tally.python);
    summary.python_calls = python.taken - python.over_cap;
    if python.over_cap > 0 {
        tally.losses().insert(
            python::OVER_CAP.to_string(),
            map::LossBucket {
                count: python.over_cap,
                first_time: Nanos::ZERO,
            },
        );
    }
    let host = python.into_samples(pid, shift, &mut |s| writer.intern(s));
    // One loss record per kind of unmapped entry, so nothing disappears
    // silently. They are dated at the earliest mapped event, so that they
    // never widen the trace's time span (CPU-only entries such as the
    // profiler session span often start well before any GPU work).
    let losses = std::mem::take(tally.losses());
    for (detail, bucket) in &losses {
        let detail_id = writer.intern(detail);
        writer
            .push(Event::Loss(Loss {
                time: tally.earliest.unwrap_or(bucket.first_time),
                source: LossSource::IMPORT,
                count: bucket.count,
                detail: detail_id,
            }))
            .map_err(write_err)?;
        summary.unmapped.insert(detail.clone(), bucket.count);
        tally.written[EventKind::Loss.index()] += 1;
    }
    if let Some(cut) = &input.cut {
        // What never reached the file: the unfinished event (or member) and all after it.
        let what = cut.describe();
        let detail = writer.intern(&format!("kineto: {what}"));
        writer
            .push(Event::Loss(Loss {
                time: tally.earliest.unwrap_or(Nanos::ZERO),
                source: LossSource::TRUNCATED,
                count: 1,
                detail,
            }))
            .map_err(write_err)?;
        tally.written[EventKind::Loss as usize - 1] += 1;
        summary.truncated = Some(what);
    }
    summary.flows = tally.flows;
    // The writer's own counts only cover flushed chunks until it finishes.
    summary.events = EventKind::ALL
        .iter()
        .zip(tally.written)
        .filter(|&(_, n)| n > 0)
        .map(|(k, n)| (k.name().to_string(), n))
        .collect();
    let mut trailer = Trailer::default();
    trailer.extra.insert("import.source".into(), source_name.to_string());
    trailer.extra.insert("import.trace_events".into(), summary.trace_events.to_string());
    trailer.extra.insert("import.flows".into(), summary.flows.to_string());
    trailer.extra.insert("import.unmapped".into(), summary.unmapped_total().to_string());
    trailer.extra.insert("import.json_bytes".into(), summary.json_bytes.to_string());
    if let Some(what) = &summary.truncated {
        trailer.extra.insert("import.truncated".into(), what.clone());
    }
    let mut counted = writer.finish(trailer).map_err(write_err)?;
    if let Some(host) = host {
        let chunks =
            gputrace_format::host::encode_chunks(&host, 1 << 20, 3).map_err(|e| write_err(gputrace_format::FormatError::Write(e)))?;
        counted
            .write_all(&chunks)
            .map_err(|e| write_err(gputrace_format::FormatError::Write(e)))?;
    }
    summary.output_bytes = counted.count;
    Ok((summary, counted))
}

/// Counts the bytes the trace writer produces (for the size ratio).
struct CountingWriter<W> {
    inner: W,
    count: u64,
}

impl<W: Write> Write for CountingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.count += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Import `path` into memory and open the result.
pub fn to_trace(path: impl AsRef<Path>) -> Result<TraceFile, KinetoError> {
    to_trace_with(path, &ImportOptions::default())
}

/// [`to_trace`] with options (e.g. fewer parsing threads when several
/// traces are read at once).
pub fn to_trace_with(path: impl AsRef<Path>, opts: &ImportOptions) -> Result<TraceFile, KinetoError> {
    let path = path.as_ref();
    let bytes = with_salvage(path, opts, |input| match one_pass(input, opts) {
        Ok(done) => Ok(done?.0),
        Err(Restart) => {
            let mut bytes = Vec::new();
            two_passes(input, &mut bytes, opts)?;
            Ok(bytes)
        }
    })?;
    Ok(TraceFile::from_bytes(path, bytes)?)
}

/// Map one parsed trace event into `sink`.
fn map_element<S: Sink>(
    mapper: &Mapper,
    parsed: Result<&RawEvent<'_>, ParseError>,
    start: u64,
    here: Here,
    sink: &mut S,
    tally: &mut Tally,
    strict: bool,
) -> Result<(), Fail> {
    let ev = match parsed {
        Ok(ev) => ev,
        Err(ParseError::Type { at, what }) => {
            return problem(
                tally,
                strict,
                format!("unreadable trace event ({what})"),
                here.at(start + at as u64),
            );
        }
        // The scanner reports syntax errors itself.
        Err(ParseError::Syntax { at, what }) => {
            return Err(Fail::Syntax {
                at: here.at(start + at as u64),
                what,
            })
        }
        Err(ParseError::Truncated) => {
            return Err(Fail::Syntax {
                at: here.at(start),
                what: "the trace event is cut off".into(),
            })
        }
    };
    if tally.host_pid.is_none() {
        tally.host_pid = Mapper::host_pid(ev);
    }
    match mapper.map(ev, sink) {
        Ok(Mapped::Events(first, second)) => {
            for event in std::iter::once(first).chain(second) {
                tally.written[event.kind().index()] += 1;
                tally.earliest = Some(tally.earliest.map_or(event.start(), |t| t.min(event.start())));
                sink.put(event)?;
            }
        }
        Ok(Mapped::Flow) => tally.flows += 1,
        Ok(Mapped::Unmapped(detail)) => tally.lose(detail, || mapper.start_of(ev)),
        Ok(Mapped::Category) if ev.cat.as_deref() == Some("python_function") && ev.ph.as_deref() == Some("X") => {
            let read = mapper
                .times(ev)
                .and_then(|t| Ok((t, map::id_of(ev.pid, "pid")?, map::id_of(ev.tid, "tid")?)));
            match read {
                Ok((times, pid, tid)) => tally.python.take(times, pid, tid.unwrap_or(0), ev.name.as_deref().unwrap_or("")),
                Err(what) => return problem(tally, strict, format!("python_function event: {what}"), here.at(start)),
            }
        }
        Ok(Mapped::Category) => tally.lose_category(ev.cat.as_deref().unwrap_or(""), ev.ph.as_deref().unwrap_or(""), || {
            mapper.start_of(ev)
        }),
        Err(what) => {
            return problem(tally, strict, format!("{} event: {what}", ev.category()), here.at(start));
        }
    }
    Ok(())
}

/// A mappable entry that cannot be read: an error in strict mode, else a loss.
fn problem(tally: &mut Tally, strict: bool, what: String, at: Position) -> Result<(), Fail> {
    if strict {
        return Err(Fail::WrongType { at, what });
    }
    tally.lose(&format!("kineto: {what}"), || None);
    Ok(())
}

/// serde_json appends " at line L column C"; the offset replaces it.
fn strip_position(msg: &str) -> String {
    match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
}

fn shape_name(shape: Shape) -> &'static str {
    match shape {
        Shape::Object => "an object",
        Shape::Array => "an array",
        Shape::String => "a string",
        Shape::Scalar => "a number, boolean or null",
    }
}

/// First pass: every top-level member except `traceEvents`, which is skipped unparsed.
fn read_meta(input: &Input) -> Result<TraceMeta, KinetoError> {
    let path = input.path;
    // Nothing is parsed on other threads here: gzip is inflated on one.
    let (mut sc, _) = open(input, |_| true)?;
    let mut meta = TraceMeta::default();
    let mut value = Vec::new();
    walk(&mut sc, |key, sc| {
        if key == "traceEvents" {
            meta.has_events = true;
            meta.pid = first_host_pid(sc)?.unwrap_or(0);
            return Ok(());
        }
        add_meta(&mut meta, key, sc, &mut value)
    })
    .map_err(|f| f.with_path(path.to_path_buf()))?;
    if !meta.has_events {
        return Err(no_events().with_path(path.to_path_buf()));
    }
    Ok(meta)
}

/// Pass over the `traceEvents` array (the scanner is at its value): the
/// pid of its first CPU-side event (see `Mapper::host_pid`), which the
/// header of a two-pass import needs before any event is written. Events
/// are parsed only until it is found; the rest are skipped unparsed.
fn first_host_pid<R: Read>(sc: &mut Scanner<R>) -> Result<Option<u32>, Fail> {
    if sc.peek()? != Some(b'[') {
        // The second pass reports what is wrong.
        sc.value(None, "the traceEvents array")?;
        return Ok(None);
    }
    sc.expect(b'[', "'['")?;
    if sc.eat(b']')? {
        return Ok(None);
    }
    let mut pid = None;
    loop {
        if pid.is_none() && sc.peek()? == Some(b'{') {
            pid = sc.event(|parsed, _, _| parsed.ok().and_then(Mapper::host_pid))?;
        } else {
            sc.value(None, "a trace event")?;
        }
        if sc.comma_or(b']', "between trace events")? {
            return Ok(pid);
        }
    }
}

fn no_events() -> Fail {
    Fail::NotKineto("the top-level object has no \"traceEvents\" member".into())
}

/// Parse one top-level member other than `traceEvents` into `meta`
/// (`value` is scratch for its text).
fn add_meta<R: Read>(meta: &mut TraceMeta, key: &str, sc: &mut Scanner<R>, value: &mut Vec<u8>) -> Result<(), Fail> {
    value.clear();
    let (_, start) = sc.value(Some(value), "a value")?;
    let parsed: serde_json::Value = serde_json::from_slice(value).map_err(|e| Fail::Syntax {
        at: sc.at(start + scan::line_col_to_index(value, e.line(), e.column()) as u64),
        what: strip_position(&e.to_string()),
    })?;
    meta.add(key, parsed, sc.at(start))
}

/// Walk the members of the top-level object, calling `member(key, scanner)`,
/// which must consume the member's value.
fn walk<R: Read>(sc: &mut Scanner<R>, mut member: impl FnMut(&str, &mut Scanner<R>) -> Result<(), Fail>) -> Result<(), Fail> {
    sc.skip_bom()?;
    match sc.peek()? {
        Some(b'{') => {}
        Some(b) => {
            return Err(Fail::NotKineto(format!(
                "it does not start with a JSON object (first byte {})",
                error::describe(b)
            )))
        }
        None => return Err(Fail::NotKineto("the file is empty".into())),
    }
    sc.expect(b'{', "'{'")?;
    if sc.eat(b'}')? {
        return Ok(());
    }
    let mut key_text = Vec::new();
    loop {
        key_text.clear();
        if sc.peek()? != Some(b'"') {
            return match sc.peek()? {
                Some(b) => Err(Fail::Syntax {
                    at: sc.at(sc.offset()),
                    what: format!("expected a member name in double quotes, found {}", error::describe(b)),
                }),
                None => Err(sc.eof("a member name")),
            };
        }
        let (_, start) = sc.value(Some(&mut key_text), "a member name")?;
        let key: String = serde_json::from_slice(&key_text).map_err(|e| Fail::Syntax {
            at: sc.at(start),
            what: strip_position(&e.to_string()),
        })?;
        sc.expect(b':', "':' after a member name")?;
        member(&key, sc)?;
        if sc.comma_or(b'}', "between top-level members")? {
            break;
        }
    }
    match sc.peek()? {
        None => Ok(()),
        Some(b) => Err(Fail::Syntax {
            at: sc.at(sc.offset()),
            what: format!("unexpected {} after the end of the top-level object", error::describe(b)),
        }),
    }
}

/// Whether `traceEvents` of an input of about `size_hint` bytes is parsed
/// on several threads (see `parallel`).
fn two_threads(opts: &ImportOptions, size_hint: u64) -> bool {
    !opts.strict && opts.threads != 1 && parallel::worth_it(size_hint)
}

/// Whether a gzipped input of about `size_hint` bytes is inflated on a
/// thread of its own: not when `traceEvents` is parsed on several threads
/// (the next window is inflated while the workers parse), nor when
/// `threads` is 1.
fn inflate_apart(opts: &ImportOptions, size_hint: u64) -> bool {
    !two_threads(opts, size_hint) && opts.threads != 1
}

/// Open `path` for scanning, decompressing if it starts with the gzip magic.
/// Returns the scanner and the file size. Gzip is inflated on a thread of
/// its own if `read_ahead` says so for the text's size.
/// A cut-off input ([`Input::cut`]) reads as its text up to the cut, closed.
fn open(input: &Input, read_ahead: impl FnOnce(u64) -> bool) -> Result<(Scanner<Box<dyn Read>>, u64), KinetoError> {
    let path = input.path;
    let io = |source| KinetoError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if meta.is_dir() {
        return Err(io(std::io::Error::other("is a directory, not a trace file")));
    }
    let mut magic = [0u8; 2];
    let mut got = 0;
    while got < 2 {
        match file.read(&mut magic[got..]).map_err(io)? {
            0 => break,
            n => got += n,
        }
    }
    use std::io::Seek;
    let gzip = got == 2 && magic == [0x1f, 0x8b];
    // The size of the JSON text, for the two-thread windows: a gzip file
    // ends with it (modulo 4 GiB, of the last member only: a hint).
    let mut text_size = meta.len();
    if gzip && meta.len() >= 18 {
        let mut isize = [0u8; 4];
        file.seek(std::io::SeekFrom::End(-4)).map_err(io)?;
        if file.read_exact(&mut isize).is_ok() {
            text_size = text_size.max(u32::from_le_bytes(isize) as u64);
        }
    }
    if let Some(cut) = &input.cut {
        text_size = cut.keep + cut.close.len() as u64;
    }
    file.seek(std::io::SeekFrom::Start(0)).map_err(io)?;
    if gzip {
        let count = Arc::new(AtomicU64::new(0));
        let counted = CountingReader {
            inner: file,
            count: count.clone(),
        };
        // MultiGzDecoder: `cat a.gz b.gz` is a valid gzip file too.
        let decoder = flate2::read::MultiGzDecoder::new(BufReader::with_capacity(256 * 1024, counted));
        let reader: Box<dyn Read> = match (&input.cut, read_ahead(text_size)) {
            (Some(cut), true) => Box::new(ReadAhead::new(cut.reader(decoder))),
            (Some(cut), false) => Box::new(cut.reader(decoder)),
            (None, true) => Box::new(ReadAhead::new(decoder)),
            (None, false) => Box::new(decoder),
        };
        Ok((Scanner::new(reader, Some(count), text_size), meta.len()))
    } else {
        let reader: Box<dyn Read> = match &input.cut {
            Some(cut) => Box::new(cut.reader(file)),
            None => Box::new(file),
        };
        Ok((Scanner::new(reader, None, text_size), meta.len()))
    }
}
