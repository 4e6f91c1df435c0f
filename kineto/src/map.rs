//! Mapping one Kineto trace event (a JSON object) to gputrace events.
//!
//! Every element of `traceEvents` ends up in exactly one of three places:
//! a gputrace event (kernel, copy, memset, sync, API call, marker; kernels
//! with NCCL metadata also give a collective; CPU operators and
//! annotations are markers whose domain is their Kineto category), the flow
//! count (`ac2g` flows, whose link is already carried by correlation ids),
//! or a loss bucket that is written as one `Loss` event (source `IMPORT`)
//! per kind of unmapped entry. Nothing is dropped silently.

use crate::class::{Class, Kind};
use crate::event::{Raw, RawArgs, RawEvent};
use crate::number::{scaled_integer, unsigned};
use gputrace_format::*;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Why an event could not be mapped (becomes a loss detail, or an error in strict mode).
pub(crate) type Problem = String;

/// Unmapped entries of one kind.
#[derive(Clone, Debug)]
pub(crate) struct LossBucket {
    pub count: u64,
    /// Time of the first such entry that had one (0 if none did); used for
    /// the loss record only when no event was mapped at all.
    pub first_time: Nanos,
}

/// Counts kept across the whole file.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Unmapped entries by detail text; those of unmapped categories only
    /// after [`Tally::settle`] (read through [`Tally::losses`], which does).
    losses: BTreeMap<String, LossBucket>,
    /// `ac2g` flow endpoints (links already carried by correlation ids).
    pub flows: u64,
    /// gputrace events written, by kind (its number - 1: an array, not a
    /// map, as it is counted for every event).
    pub written: [u64; EventKind::ALL.len()],
    /// Earliest start among the events written.
    pub earliest: Option<Nanos>,
    /// The pid of the first CPU-side entry (operator, annotation, CUDA
    /// call) in file order: the profiled process.
    pub host_pid: Option<u32>,
    /// `python_function` events, which become host stacks.
    pub python: crate::python::PythonSpans,
    /// Entries of the unmapped categories seen, counted by (category,
    /// phase) and moved into `losses` by [`Tally::settle`]: most entries
    /// of a trace are of these, so each is counted without making or
    /// looking up its detail text.
    details: Vec<Detail>,
    /// The entry of `details` counted last.
    last: usize,
}

/// Unmapped entries of one (category, phase) not yet in [`Tally::losses`]
/// (their detail text: [`unmapped_detail`]).
#[derive(Debug)]
struct Detail {
    cat: String,
    ph: String,
    count: u64,
    /// Time of the first that had one (0 if none did).
    first_time: Nanos,
}

impl Tally {
    /// Count one unmapped entry under `detail`; `time` is asked for only
    /// while the bucket has no time yet.
    pub(crate) fn lose(&mut self, detail: &str, time: impl FnOnce() -> Option<Nanos>) {
        let b = match self.losses.get_mut(detail) {
            Some(b) => b,
            None => self.losses.entry(detail.to_string()).or_insert(LossBucket {
                count: 0,
                first_time: Nanos::ZERO,
            }),
        };
        b.count += 1;
        if b.first_time == Nanos::ZERO {
            if let Some(t) = time() {
                b.first_time = t;
            }
        }
    }

    /// Add the counts of `later`, kept for the entries that follow this
    /// tally's in the file.
    pub(crate) fn absorb(&mut self, mut later: Tally) {
        self.settle();
        later.settle();
        self.python.absorb(std::mem::take(&mut later.python));
        for (detail, b) in later.losses {
            let mine = self.losses.entry(detail).or_insert(LossBucket {
                count: 0,
                first_time: Nanos::ZERO,
            });
            mine.count += b.count;
            if mine.first_time == Nanos::ZERO {
                mine.first_time = b.first_time;
            }
        }
        self.flows += later.flows;
        for (mine, n) in self.written.iter_mut().zip(later.written) {
            *mine += n;
        }
        self.host_pid = self.host_pid.or(later.host_pid);
        self.earliest = match (self.earliest, later.earliest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }

    /// Count one entry of a category the model has no place for.
    #[inline]
    pub(crate) fn lose_category(&mut self, cat: &str, ph: &str, time: impl FnOnce() -> Option<Nanos>) {
        let i = match self.details.get(self.last) {
            Some(d) if d.cat == cat && d.ph == ph => self.last,
            _ => self.detail_of(cat, ph),
        };
        let d = &mut self.details[i];
        d.count += 1;
        if d.first_time == Nanos::ZERO {
            if let Some(t) = time() {
                d.first_time = t;
            }
        }
        self.last = i;
    }

    #[inline(never)]
    fn detail_of(&mut self, cat: &str, ph: &str) -> usize {
        if let Some(i) = self.details.iter().position(|d| d.cat == cat && d.ph == ph) {
            return i;
        }
        self.details.push(Detail {
            cat: cat.to_string(),
            ph: ph.to_string(),
            count: 0,
            first_time: Nanos::ZERO,
        });
        self.details.len() - 1
    }

    /// Every unmapped entry, by detail text.
    pub(crate) fn losses(&mut self) -> &mut BTreeMap<String, LossBucket> {
        self.settle();
        &mut self.losses
    }

    /// Move the entries counted by [`Tally::lose_category`] into `losses`,
    /// which holds every unmapped entry after this.
    fn settle(&mut self) {
        for d in &mut self.details {
            if d.count == 0 {
                continue;
            }
            let b = self.losses.entry(unmapped_detail(&d.cat, &d.ph)).or_insert(LossBucket {
                count: 0,
                first_time: Nanos::ZERO,
            });
            b.count += d.count;
            if b.first_time == Nanos::ZERO {
                b.first_time = d.first_time;
            }
            d.count = 0;
            d.first_time = Nanos::ZERO;
        }
    }
}

/// What one element became.
// Returned by value once per element; boxing the events would allocate.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Mapped {
    /// One or two gputrace events (a kernel and its collective).
    Events(Event, Option<Event>),
    /// A flow endpoint.
    Flow,
    /// Not representable: the loss-bucket detail.
    Unmapped(&'static str),
    /// A category the model has no place for.
    Category,
}

/// Converts events of one trace; holds what every event needs.
#[derive(Clone, Copy)]
pub(crate) struct Mapper {
    /// `baseTimeNanoseconds` (0 when timestamps are absolute).
    pub base_ns: u64,
    /// This process's global rank, for the rank inside a process group.
    pub rank: Option<u32>,
}

/// Interning through the writer, behind a trait so mapping does not depend on `W`.
pub(crate) trait Interner {
    fn intern(&mut self, s: &str) -> StringId;
}

impl<W: std::io::Write> Interner for TraceWriter<W> {
    fn intern(&mut self, s: &str) -> StringId {
        TraceWriter::intern(self, s)
    }
}

impl Mapper {
    /// Map one event. `Err` is a problem with a mappable event (wrong type,
    /// missing time); the caller turns it into a loss or, in strict mode, an error.
    pub(crate) fn map<'a>(&self, ev: &RawEvent<'a>, strings: &mut dyn Interner) -> Result<Mapped, Problem> {
        let name = ev.name.as_deref().unwrap_or("");
        let (ph, cat) = (ev.ph.as_deref().unwrap_or(""), ev.cat.as_deref().unwrap_or(""));
        let class = match ev.class {
            Some(c) => c,
            None => Class::of(ph, cat),
        };
        let what = match class {
            Class::Flow => return Ok(Mapped::Flow),
            Class::Metadata => return Ok(Mapped::Unmapped("metadata (ph \"M\": process and thread names, sort order)")),
            Class::Kind(k) => k,
            // CPU operators (`ProfilerStep#N` among them) are markers too.
            Class::Operator => Kind::Marker,
            Class::Other => return Ok(Mapped::Category),
        };
        let args = ev.args.as_ref();
        let arg = |f: fn(&RawArgs<'a>) -> Option<Raw<'a>>| args.and_then(f);
        let (start, end) = self.times(ev)?;
        let correlation = CorrelationId(u32_arg(arg(|a| a.correlation()), "correlation")?.unwrap_or(0));
        match what {
            Kind::Kernel | Kind::Memcpy | Kind::Memset | Kind::Sync => {
                let device = match u32_arg(arg(|a| a.device()), "device")? {
                    Some(d) => DeviceId(d),
                    None => DeviceId(id_of(ev.pid, "pid")?.unwrap_or(0)),
                };
                let context = ContextId(u32_arg(arg(|a| a.context()), "context")?.unwrap_or(0));
                // ROCm writes the stream as a pointer string ("0x0") on API calls only; GPU
                // events carry a number. Fall back to the tid ("stream 7" in the old schema).
                let stream = match u32_arg(arg(|a| a.stream()), "stream")? {
                    Some(s) => StreamId(s),
                    None => StreamId(id_of(ev.tid, "tid")?.unwrap_or(0)),
                };
                let event = match what {
                    Kind::Kernel => {
                        let grid = dim3(arg(|a| a.grid()), "grid")?;
                        let block = dim3(arg(|a| a.block()), "block")?;
                        let kernel = Kernel {
                            start,
                            end,
                            device,
                            context,
                            stream,
                            correlation,
                            name: strings.intern(name),
                            grid,
                            block,
                            // Kineto reports static + dynamic shared memory as one number.
                            static_shared_mem: 0,
                            dynamic_shared_mem: u32_arg(arg(|a| a.shared_memory()), "shared memory")?.unwrap_or(0),
                            registers: u32_arg(arg(|a| a.registers()), "registers per thread")?.unwrap_or(0),
                            graph_id: 0,
                            graph_node_id: 0,
                        };
                        let collective = match args {
                            Some(a) if a.collective().is_some() => Some(Event::Collective(self.collective(&kernel, name, a, strings)?)),
                            _ => None,
                        };
                        return Ok(Mapped::Events(Event::Kernel(kernel), collective));
                    }
                    Kind::Memcpy => {
                        let (kind, src_kind, dst_kind) = copy_kind(name, arg(|a| a.kind()));
                        Event::Memcpy(Memcpy {
                            start,
                            end,
                            device,
                            context,
                            stream,
                            correlation,
                            kind,
                            bytes: u64_arg(arg(|a| a.bytes()), "bytes")?.unwrap_or(0),
                            src_kind,
                            dst_kind,
                            src_device: device,
                            dst_device: device,
                        })
                    }
                    Kind::Memset => Event::Memset(Memset {
                        start,
                        end,
                        device,
                        context,
                        stream,
                        correlation,
                        bytes: u64_arg(arg(|a| a.bytes()), "bytes")?.unwrap_or(0),
                        value: 0,
                        memory_kind: paren_kinds(name).0,
                    }),
                    _ => {
                        let kind_text = str_arg(arg(|a| a.cuda_sync_kind())).unwrap_or(Cow::Borrowed(name));
                        Event::Sync(Sync {
                            start,
                            end,
                            device,
                            context,
                            // Kineto writes u32::MAX (-1) for context-wide syncs, which is StreamId::UNKNOWN.
                            stream,
                            correlation,
                            kind: sync_kind(&kind_text),
                            cuda_event: 0,
                        })
                    }
                };
                Ok(Mapped::Events(event, None))
            }
            Kind::Api(domain) => {
                let cbid = match u32_arg(arg(|a| a.cbid()), "cbid")? {
                    Some(c) => c,
                    None => u32_arg(arg(|a| a.cid()), "cid")?.unwrap_or(0),
                };
                Ok(Mapped::Events(
                    Event::Api(ApiCall {
                        start,
                        end,
                        thread: ThreadId(id_of(ev.tid, "tid")?.unwrap_or(0)),
                        correlation,
                        domain,
                        cbid,
                        name: strings.intern(name),
                        return_value: 0,
                    }),
                    None,
                ))
            }
            Kind::Marker => Ok(Mapped::Events(
                Event::Marker(Marker {
                    start,
                    end,
                    // For `gpu_user_annotation` (domain says so) the tid is the GPU stream.
                    thread: ThreadId(id_of(ev.tid, "tid")?.unwrap_or(0)),
                    name: strings.intern(name),
                    domain: strings.intern(cat),
                    kind: if matches!(ph, "i" | "I") {
                        MarkerKind::INSTANT
                    } else {
                        MarkerKind::RANGE
                    },
                    color: 0,
                }),
                None,
            )),
        }
    }

    /// The process id of a CPU-side entry (a CPU operator, a CPU
    /// annotation, a CUDA call) written as a number; `None` for GPU work
    /// (whose pid is the device) and anything else.
    pub(crate) fn host_pid(ev: &RawEvent<'_>) -> Option<u32> {
        let (ph, cat) = (ev.ph.as_deref().unwrap_or(""), ev.cat.as_deref().unwrap_or(""));
        let cpu_side = match ev.class.unwrap_or_else(|| Class::of(ph, cat)) {
            Class::Operator | Class::Kind(Kind::Api(_)) => true,
            Class::Kind(Kind::Marker) => cat != "gpu_user_annotation",
            _ => false,
        };
        let pid = ev.pid?.get();
        if !cpu_side || !pid.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        pid.parse().ok()
    }

    /// The absolute start of any entry, if it has a readable `ts`.
    pub(crate) fn start_of(&self, ev: &RawEvent<'_>) -> Option<Nanos> {
        let ts_ns = scaled_integer(ev.ts?.get(), 3)?;
        u64::try_from(self.base_ns as i128 + ts_ns).ok().map(Nanos)
    }

    /// Absolute start and end in ns: `base + ts`, `start + dur`.
    pub(crate) fn times(&self, ev: &RawEvent<'_>) -> Result<(Nanos, Nanos), Problem> {
        let ts = ev.ts.ok_or_else(|| "event without \"ts\"".to_string())?;
        let ts_ns = scaled_integer(ts.get(), 3).ok_or_else(|| format!("\"ts\" is not a number: {}", short(ts.get())))?;
        let dur_ns = match ev.dur {
            None => 0,
            Some(d) => scaled_integer(d.get(), 3).ok_or_else(|| format!("\"dur\" is not a number: {}", short(d.get())))?,
        };
        if dur_ns < 0 {
            return Err("negative \"dur\"".into());
        }
        let start = self.base_ns as i128 + ts_ns;
        let end = start + dur_ns;
        match (u64::try_from(start), u64::try_from(end)) {
            (Ok(s), Ok(e)) => Ok((Nanos(s), Nanos(e))),
            _ => Err("\"ts\" outside the representable time range (before 1970 or after 2554)".into()),
        }
    }

    /// NCCL metadata on a kernel (`Collective name`, `In msg nelems`, ...).
    fn collective(&self, k: &Kernel, kernel_name: &str, a: &RawArgs<'_>, strings: &mut dyn Interner) -> Result<Collective, Problem> {
        let raw_op = str_arg(a.collective()).unwrap_or_default();
        let op = nccl_op_name(&raw_op);
        let dtype = str_arg(a.dtype()).unwrap_or_default();
        let in_n = u64_arg(a.in_nelems(), "In msg nelems")?.unwrap_or(0);
        let out_n = u64_arg(a.out_nelems(), "Out msg nelems")?.unwrap_or(0);
        let nranks = u32_arg(a.group_size(), "Group size")?.unwrap_or(0);
        // NCCL's count is per rank: AllGather's send count (PyTorch's "In"),
        // ReduceScatter's receive count (PyTorch's "Out"), AlltoAll's count per
        // peer; PyTorch records whole buffers. The smaller of In and Out is
        // NCCL's count for every collective but AlltoAll.
        let count = match (in_n, out_n) {
            (0, n) | (n, 0) => n,
            (i, o) if op == "AlltoAll" && nranks > 0 && i == o => i / nranks as u64,
            (i, o) => i.min(o),
        };
        // The communicator is only known by its process-group name; numeric names are
        // used as is, others hashed (FNV-1a), so equal names give equal ids across ranks.
        let comm = match str_arg(a.pg_name()) {
            // gputrace's own export writes NCCL's communicator id as 16 hex digits.
            Some(n) => CommId(n.parse::<u64>().unwrap_or_else(|_| {
                if n.len() == 16 && n.bytes().all(|b| b.is_ascii_hexdigit()) {
                    u64::from_str_radix(&n, 16).unwrap_or_else(|_| fnv1a(n.as_bytes()))
                } else {
                    fnv1a(n.as_bytes())
                }
            })),
            None => CommId(0),
        };
        // Rank within the group: our global rank's index in "Process Group Ranks" ("[0, 1]").
        let rank = match (self.rank, str_arg(a.pg_ranks())) {
            (Some(r), Some(list)) => list
                .trim_matches(|c| c == '[' || c == ']')
                .split(',')
                .position(|x| x.trim().parse::<u32>().ok() == Some(r))
                .map(|i| i as u32)
                .unwrap_or(r),
            (Some(r), None) => r,
            _ => 0,
        };
        let seq = match u64_arg(a.seq_upper(), "Seq")? {
            Some(s) => s,
            None => u64_arg(a.seq(), "seq")?.unwrap_or(0),
        };
        let (algorithm, protocol) = nccl_algo_proto(kernel_name);
        Ok(Collective {
            start: k.start,
            end: k.end,
            enqueue: Nanos::ZERO,
            comm,
            op: strings.intern(&op),
            seq,
            count,
            datatype: strings.intern(&dtype),
            bytes: count.saturating_mul(dtype_size(&dtype)),
            rank,
            nranks,
            root: -1,
            algorithm: strings.intern(algorithm),
            protocol: strings.intern(protocol),
            // NCCL launches one block per channel.
            channels: if kernel_name.starts_with("nccl") { k.grid[0] } else { 0 },
            device: k.device,
            stream: k.stream,
            correlation: k.correlation,
        })
    }
}

/// NCCL's name for a PyTorch collective name (`allreduce`,
/// `_allgather_base`, `reduce_scatter_tensor_coalesced`, `all_to_all`, …), so
/// imported traces use the same operation names as the NCCL plugin; names
/// it does not know pass through unchanged.
pub fn nccl_op_name(pytorch: &str) -> String {
    let mut n = pytorch.trim().trim_start_matches('_').to_ascii_lowercase();
    for suffix in ["_coalesced", "_base", "_into_tensor", "_tensor", "_single"] {
        if let Some(s) = n.strip_suffix(suffix) {
            n = s.to_string();
        }
    }
    let key: String = n.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    match key.as_str() {
        "allreduce" => "AllReduce",
        "allgather" => "AllGather",
        "reducescatter" => "ReduceScatter",
        "alltoall" | "alltoallv" => "AlltoAll",
        "broadcast" => "Broadcast",
        "reduce" => "Reduce",
        "send" => "Send",
        "recv" | "recvanysource" => "Recv",
        "gather" => "Gather",
        "scatter" => "Scatter",
        _ => return pytorch.to_string(),
    }
    .to_string()
}

/// The loss detail for a category the model has no place for.
fn unmapped_detail(cat: &str, ph: &str) -> String {
    let why = match cat {
        "cpu_op" | "Operator" => "CPU operators",
        "python_function" => "Python stack frames",
        "cpu_instant_event" => "CPU instant events",
        "fwdbwd" => "forward/backward flow links",
        "overhead" => "profiler overhead spans",
        "Trace" => "profiler session span",
        "" => "uncategorized entries (e.g. memory instants, iteration markers)",
        _ => "entries of a category this importer does not map",
    };
    format!("kineto cat={cat:?} ph={ph:?}: {why}")
}

fn short(s: &str) -> &str {
    match s.char_indices().nth(40) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// A string value, unescaped (`None` if absent or not a string).
fn str_arg<'a>(v: Option<Raw<'a>>) -> Option<Cow<'a, str>> {
    serde_json::from_str::<Cow<'a, str>>(v?.get()).ok()
}

fn u64_arg(v: Option<Raw<'_>>, field: &str) -> Result<Option<u64>, Problem> {
    match v {
        None => Ok(None),
        Some(v) if v.get() == "null" => Ok(None),
        Some(v) => unsigned(v.get())
            .map(Some)
            .ok_or_else(|| format!("\"{field}\" is not a non-negative integer: {}", short(v.get()))),
    }
}

fn u32_arg(v: Option<Raw<'_>>, field: &str) -> Result<Option<u32>, Problem> {
    match u64_arg(v, field)? {
        None => Ok(None),
        Some(x) => u32::try_from(x)
            .map(Some)
            .map_err(|_| format!("\"{field}\" does not fit in 32 bits: {x}")),
    }
}

/// A pid or tid: a number, a numeric string (`"25738"`), or a label ending
/// in a number (`"stream 7"`). Labels without a number (`"Spans"`) give `None`.
pub(crate) fn id_of(v: Option<Raw<'_>>, field: &str) -> Result<Option<u32>, Problem> {
    let Some(v) = v else { return Ok(None) };
    let text = v.get();
    if text.starts_with('"') {
        let s = str_arg(Some(v)).unwrap_or_default();
        let digits = s.trim_end_matches(|c: char| !c.is_ascii_digit());
        // The trailing ASCII digits, counted in bytes: the character before
        // them may be several bytes long ("线程7").
        let start = digits.len() - digits.bytes().rev().take_while(u8::is_ascii_digit).count();
        return Ok(digits[start..].parse::<u32>().ok());
    }
    // Negative tids (-1 for context-wide rows) mean "none".
    if text.starts_with('-') {
        return Ok(None);
    }
    u32_arg(Some(v), field)
}

fn dim3(v: Option<Raw<'_>>, field: &str) -> Result<[u32; 3], Problem> {
    let Some(v) = v else { return Ok([0; 3]) };
    // The usual shape, `[1, 2, 3]` of plain integers, without allocating.
    if let Some(out) = v.get().strip_prefix('[').and_then(|t| t.strip_suffix(']')).and_then(plain_dim3) {
        return Ok(out);
    }
    let parts: Vec<&serde_json::value::RawValue> = serde_json::from_str(v.get()).map_err(|_| format!("\"{field}\" is not an array"))?;
    let mut out = [1u32; 3];
    if parts.len() > 3 {
        return Err(format!("\"{field}\" has more than 3 dimensions"));
    }
    for (i, p) in parts.iter().enumerate() {
        out[i] = u32_arg(Some(Raw::from_checked(p.get())), field)?.unwrap_or(1);
    }
    Ok(out)
}

/// The inside of `[1, 2, 3]`: one to three integers that fit a `u32`,
/// digits only, separated by commas, with JSON whitespace around them (the
/// text is valid JSON); missing dimensions are 1. `None` for anything else
/// (then read as JSON, which says what is wrong).
fn plain_dim3(inner: &str) -> Option<[u32; 3]> {
    let b = inner.as_bytes();
    let ws = |i: &mut usize| {
        while b.get(*i).is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r')) {
            *i += 1;
        }
    };
    let mut out = [1u32; 3];
    let mut i = 0;
    for slot in &mut out {
        ws(&mut i);
        let start = i;
        let mut x: u32 = 0;
        while let Some(d) = b.get(i).filter(|c| c.is_ascii_digit()) {
            x = x.checked_mul(10)?.checked_add(u32::from(d - b'0'))?;
            i += 1;
        }
        if i == start {
            return None;
        }
        *slot = x;
        ws(&mut i);
        match b.get(i) {
            None => return Some(out),
            Some(b',') => i += 1,
            Some(_) => return None,
        }
    }
    // A comma after the third: more than three.
    None
}

/// Direction and memory kinds from `Memcpy HtoD (Pinned -> Device)`; ROCm
/// names say `Host` and give the direction in `args.kind` as well.
fn copy_kind(name: &str, kind_arg: Option<Raw<'_>>) -> (CopyKind, MemoryKind, MemoryKind) {
    let token = name.strip_prefix("Memcpy ").and_then(|r| r.split_whitespace().next()).unwrap_or("");
    let mut kind = direction(token);
    if kind == CopyKind::UNKNOWN {
        if let Some(k) = str_arg(kind_arg) {
            kind = direction(&k);
        }
    }
    let (src, dst) = paren_kinds(name);
    (kind, src, dst)
}

fn direction(token: &str) -> CopyKind {
    match token {
        "HtoD" => CopyKind::HTOD,
        "DtoH" => CopyKind::DTOH,
        "HtoA" => CopyKind::HTOA,
        "AtoH" => CopyKind::ATOH,
        "AtoA" => CopyKind::ATOA,
        "AtoD" => CopyKind::ATOD,
        "DtoA" => CopyKind::DTOA,
        "DtoD" => CopyKind::DTOD,
        "HtoH" => CopyKind::HTOH,
        "PtoP" => CopyKind::PTOP,
        _ => CopyKind::UNKNOWN,
    }
}

/// The memory kinds in the parenthesis of a copy or memset name:
/// `(Pinned -> Device)` → (pinned, device); `(Device)` → (device, device).
fn paren_kinds(name: &str) -> (MemoryKind, MemoryKind) {
    let inner = match (name.find('('), name.rfind(')')) {
        (Some(a), Some(b)) if a < b => &name[a + 1..b],
        _ => return (MemoryKind::UNKNOWN, MemoryKind::UNKNOWN),
    };
    let mut sides = inner.split("->").map(|s| memory_kind(s.trim()));
    let first = sides.next().unwrap_or(MemoryKind::UNKNOWN);
    (first, sides.next().unwrap_or(first))
}

fn memory_kind(s: &str) -> MemoryKind {
    match s {
        "Pageable" => MemoryKind::PAGEABLE,
        "Pinned" => MemoryKind::PINNED,
        "Device" => MemoryKind::DEVICE,
        "Array" => MemoryKind::ARRAY,
        "Managed" => MemoryKind::MANAGED,
        "Device Static" => MemoryKind::DEVICE_STATIC,
        "Managed Static" => MemoryKind::MANAGED_STATIC,
        // ROCm's "Host" does not say pinned or pageable.
        _ => MemoryKind::UNKNOWN,
    }
}

fn sync_kind(s: &str) -> SyncKind {
    match s {
        "Event Sync" => SyncKind::EVENT_SYNCHRONIZE,
        "Stream Wait Event" => SyncKind::STREAM_WAIT_EVENT,
        "Stream Sync" => SyncKind::STREAM_SYNCHRONIZE,
        "Context Sync" => SyncKind::CONTEXT_SYNCHRONIZE,
        _ => SyncKind::UNKNOWN,
    }
}

/// Algorithm and protocol from an NCCL kernel name such as
/// `ncclDevKernel_AllGather_RING_LL(...)` or `ncclKernel_AllReduce_RING_LL_Sum_float(...)`.
fn nccl_algo_proto(name: &str) -> (&str, &str) {
    let base = name.split('(').next().unwrap_or("");
    if !base.starts_with("nccl") {
        return ("", "");
    }
    let parts: Vec<&str> = base.split('_').collect();
    let algo = parts
        .iter()
        .position(|p| matches!(*p, "RING" | "TREE" | "COLLNET" | "NVLS" | "NVLSTREE" | "PAT"));
    match algo {
        Some(i) => {
            let proto = parts.get(i + 1).copied().filter(|p| matches!(*p, "LL" | "LL128" | "SIMPLE"));
            (parts[i], proto.unwrap_or(""))
        }
        None => ("", ""),
    }
}

/// Bytes per element of a PyTorch dtype name, or of gputrace's short names
/// (in its own exports); 0 when unknown.
fn dtype_size(dtype: &str) -> u64 {
    match dtype {
        "Float" | "Int" | "UInt32" | "ComplexHalf" => 4,
        "Double" | "Long" | "UInt64" | "ComplexFloat" => 8,
        "Half" | "BFloat16" | "Short" | "UInt16" => 2,
        "Byte" | "Char" | "Bool" | "Float8_e4m3fn" | "Float8_e5m2" | "Float8_e4m3fnuz" | "Float8_e5m2fnuz" => 1,
        "ComplexDouble" => 16,
        short => datatype_size(short),
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_dims_read_as_the_split_and_parse_reading_did() {
        // The reading `plain_dim3` replaced, for comparison.
        fn split(inner: &str) -> Option<[u32; 3]> {
            let mut out = [1u32; 3];
            let mut n = 0;
            let plain = inner.split(',').all(|p| match (p.trim().parse::<u32>().ok(), n < 3) {
                (Some(x), true) => {
                    out[n] = x;
                    n += 1;
                    true
                }
                _ => false,
            });
            (plain && n > 0).then_some(out)
        }
        let cases = [
            "1, 2, 3",
            "24,1,1",
            " 7 ",
            "128, 1",
            "",
            " ",
            ",",
            "1,",
            ",1",
            "1,,2",
            "1, 2, 3, 4",
            "4294967295, 0, 1",
            "4294967296",
            "-1, 2",
            "1.0, 2",
            "1e3",
            "\n  2,\t3\r",
            "[1]",
            "\"1\"",
            "1 2",
            "0, 0, 0",
            "99999999999999999999",
        ];
        for c in cases {
            assert_eq!(plain_dim3(c), split(c), "{c:?}");
        }
        for a in 0..40u32 {
            let text = format!("{a}, {}, {}", a * 7919 % 1001, u32::MAX - a);
            assert_eq!(plain_dim3(&text), split(&text), "{text:?}");
        }
    }

    #[test]
    fn ids_come_from_labels_in_any_script() {
        let id = |json: &str| id_of(Some(Raw::from_checked(json)), "tid").unwrap();
        assert_eq!(id("\"stream 7\""), Some(7));
        assert_eq!(id("\"线程7\""), Some(7));
        assert_eq!(id("\"GPU·12 \""), Some(12));
        assert_eq!(id("\"Spans\""), None);
        assert_eq!(id("\"线程\""), None);
        assert_eq!(id("25738"), Some(25738));
    }

    #[test]
    fn pytorch_collective_names_become_nccls() {
        for (py, nccl) in [
            ("allreduce", "AllReduce"),
            ("_allgather_base", "AllGather"),
            ("all_gather_into_tensor_coalesced", "AllGather"),
            ("reduce_scatter_tensor_coalesced", "ReduceScatter"),
            ("_reduce_scatter_base", "ReduceScatter"),
            ("all_to_all", "AlltoAll"),
            ("all_to_all_single", "AlltoAll"),
            ("broadcast", "Broadcast"),
            ("send", "Send"),
            ("recv", "Recv"),
            ("barrier", "barrier"),
        ] {
            assert_eq!(nccl_op_name(py), nccl, "{py}");
        }
    }

    #[test]
    fn unmapped_categories_are_counted_by_category_and_phase() {
        let mut a = Tally::default();
        let t = |n: u64| move || Some(Nanos(n));
        a.lose_category("cpu_op", "X", || None);
        a.lose_category("cpu_op", "X", t(5));
        a.lose_category("ac2g", "s", t(7));
        a.lose_category("cpu_op", "X", t(9));
        a.lose_category("cpu_op", "i", t(11));
        a.lose("metadata", t(1));
        assert_eq!(a.losses.len(), 1, "counted in place until settled");
        a.settle();
        a.settle();
        let bucket = |t: &Tally, cat: &str, ph: &str| {
            let b = &t.losses[&unmapped_detail(cat, ph)];
            (b.count, b.first_time.0)
        };
        assert_eq!(bucket(&a, "cpu_op", "X"), (3, 5), "the first time there was");
        assert_eq!(bucket(&a, "cpu_op", "i"), (1, 11));
        assert_eq!(bucket(&a, "ac2g", "s"), (1, 7));
        assert_eq!(a.losses.len(), 4);
        // A later tally's entries add up; the earlier first time stays.
        let mut b = Tally::default();
        b.lose_category("cpu_op", "X", t(2));
        b.lose_category("python_function", "X", t(3));
        a.lose_category("cpu_op", "X", t(4));
        a.absorb(b);
        assert_eq!(bucket(&a, "cpu_op", "X"), (5, 5));
        assert_eq!(bucket(&a, "python_function", "X"), (1, 3));
    }

    #[test]
    fn copy_names() {
        assert_eq!(
            copy_kind("Memcpy HtoD (Pinned -> Device)", None),
            (CopyKind::HTOD, MemoryKind::PINNED, MemoryKind::DEVICE)
        );
        assert_eq!(
            copy_kind("Memcpy DtoH (Device -> Pageable)", None),
            (CopyKind::DTOH, MemoryKind::DEVICE, MemoryKind::PAGEABLE)
        );
        assert_eq!(copy_kind("Memcpy PtoP (Device -> Device)", None).0, CopyKind::PTOP);
        assert_eq!(paren_kinds("Memset (Device)"), (MemoryKind::DEVICE, MemoryKind::DEVICE));
        assert_eq!(paren_kinds("Memset"), (MemoryKind::UNKNOWN, MemoryKind::UNKNOWN));
    }

    #[test]
    fn nccl_names() {
        assert_eq!(
            nccl_algo_proto("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            ("RING", "LL")
        );
        assert_eq!(
            nccl_algo_proto("ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"),
            ("RING", "LL")
        );
        assert_eq!(
            nccl_algo_proto("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"),
            ("", "")
        );
        assert_eq!(nccl_algo_proto("void gemm()"), ("", ""));
    }
}
