//! The NCCL profiler plugin: what NCCL itself knows about each collective
//! (communicator, operation, sequence number, bytes, algorithm), recorded
//! on NCCL's threads and handed to the writer thread.
//!
//! NCCL (≥ 2.23) loads the library named by `NCCL_PROFILER_PLUGIN` and looks
//! up `ncclProfiler_v6` … `ncclProfiler_v1`; `gputrace run` points it at
//! this agent, and `ffi/nccl.rs` exports every version. Each version's entry
//! points translate NCCL's descriptor into a [`Descr`] and call the
//! version-independent code here.
//!
//! Rules, the same as for CUPTI's callbacks (NCCL calls `startEvent` and
//! `stopEvent` on its launch path and proxy threads):
//! - after the first `init`, no allocation, lock or system call: events
//!   live in a pre-allocated slot table claimed with a CAS, finished events
//!   go to a pre-allocated lock-free queue, times come from the vDSO clock;
//! - memory is bounded (slot table, queue, communicator table); whatever
//!   does not fit is counted and written to the trace as an `nccl-plugin`
//!   loss, never dropped silently;
//! - nothing here returns an error to NCCL: a malformed call (a handle we
//!   never gave out, a NULL descriptor) turns the plugin off with one
//!   `gputrace:` line, and NCCL runs on.
//!
//! The first `init` allocates the tables and, when no CUPTI session runs
//! (CUPTI held by another profiler, or a process without CUDA injection),
//! starts an NCCL-only capture session, so the collectives are still
//! recorded.

pub(crate) mod link;

use crossbeam::queue::ArrayQueue;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::*};
use std::sync::OnceLock;

/// Communicators one process can hold (more are counted as lost).
pub const MAX_COMMS: usize = 1024;
/// Events in flight at once (API, launch and task events).
pub const EVENT_SLOTS: usize = 16384;
/// Finished records waiting for the writer thread (it drains every 5 ms).
pub const QUEUE_LEN: usize = 32768;
/// Bytes kept of each NCCL string (function, datatype, algorithm, protocol).
pub const NAME_LEN: usize = 16;
/// Bytes kept of a communicator's name.
pub const COMM_NAME_LEN: usize = 64;

/// NCCL event type bits (`ncclProfileGroup` …), equal in every version.
pub mod ty {
    pub const COLL: u64 = 1 << 1;
    pub const P2P: u64 = 1 << 2;
    pub const GROUP_API: u64 = 1 << 8;
    pub const COLL_API: u64 = 1 << 9;
    pub const P2P_API: u64 = 1 << 10;
    pub const KERNEL_LAUNCH: u64 = 1 << 11;
    pub const CE_COLL: u64 = 1 << 12;
}

/// A fixed-size copy of a C string, NUL-padded.
pub type Name = [u8; NAME_LEN];

/// Copy a NUL-terminated C string into `N` bytes (truncating).
///
/// # Safety
/// `p` is null or a NUL-terminated string readable for the call.
pub unsafe fn copy_cstr<const N: usize>(p: *const libc::c_char) -> [u8; N] {
    let mut out = [0u8; N];
    if p.is_null() {
        return out;
    }
    for (i, o) in out.iter_mut().enumerate() {
        // Safety: we stop at the first NUL, which the caller guarantees.
        let c = unsafe { *p.add(i) } as u8;
        if c == 0 {
            break;
        }
        *o = c;
    }
    out
}

/// The text of a [`Name`] (up to the first NUL; lossy UTF-8).
pub fn name_str(n: &[u8]) -> std::borrow::Cow<'_, str> {
    let end = n.iter().position(|&b| b == 0).unwrap_or(n.len());
    String::from_utf8_lossy(&n[..end])
}

/// Bytes per element of an NCCL datatype (`ncclFloat32`, …, as the profiler
/// interface names them); 0 when unknown.
pub fn datatype_size(name: &str) -> u64 {
    gputrace_format::datatype_size(short_datatype(name))
}

/// The short datatype name gputrace writes (`bf16`, `f32`, …) for NCCL's
/// `ncclBfloat16`, `ncclFloat32`, …; other names pass through.
pub fn short_datatype(name: &str) -> &str {
    match name {
        "ncclInt8" => "i8",
        "ncclUint8" => "u8",
        "ncclInt32" => "i32",
        "ncclUint32" => "u32",
        "ncclInt64" => "i64",
        "ncclUint64" => "u64",
        "ncclFloat16" => "f16",
        "ncclFloat32" => "f32",
        "ncclFloat64" => "f64",
        "ncclBfloat16" => "bf16",
        "ncclFloat8e4m3" => "f8e4m3",
        "ncclFloat8e5m2" => "f8e5m2",
        other => other,
    }
}

/// What the version adapters extract from NCCL's event descriptor.
#[derive(Clone, Copy, Debug)]
pub struct Descr {
    /// `ncclProfile*` type bit.
    pub ty: u64,
    /// `parentObj` (a handle we returned earlier, or null).
    pub parent: *mut libc::c_void,
    /// Rank in the descriptor (-1 if none).
    pub rank: i32,
    /// Communicator hash carried in the descriptor (v1–v3), 0 otherwise.
    pub comm_hash: u64,
    pub seq: u64,
    pub func: Name,
    pub datatype: Name,
    pub algo: Name,
    pub proto: Name,
    pub count: u64,
    /// Bytes as NCCL reports them (v1–v3 `trafficBytes`), else 0 (derived
    /// from count × datatype size).
    pub bytes: u64,
    /// Root (collectives) or peer (point-to-point); -1 = none.
    pub root: i32,
    pub channels: u32,
    pub graph_captured: bool,
}

impl Default for Descr {
    fn default() -> Self {
        Descr {
            ty: 0,
            parent: std::ptr::null_mut(),
            rank: -1,
            comm_hash: 0,
            seq: 0,
            func: [0; NAME_LEN],
            datatype: [0; NAME_LEN],
            algo: [0; NAME_LEN],
            proto: [0; NAME_LEN],
            count: 0,
            bytes: 0,
            root: -1,
            channels: 0,
            graph_captured: false,
        }
    }
}

/// What a finished record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecKind {
    /// A collective (Coll event).
    Coll,
    /// A point-to-point operation (P2p event).
    P2p,
    /// A copy-engine collective (v6 CeColl event).
    CeColl,
    /// A kernel launch bracket (v5+ KernelLaunch event).
    Launch,
}

/// One finished event, as the writer thread receives it. Times are
/// `CLOCK_REALTIME` ns.
#[derive(Clone, Copy, Debug)]
pub struct Rec {
    pub kind: RecKind,
    /// Unique id of this event (for `Launch`: the external correlation id
    /// pushed to CUPTI); 0 in a slot that holds no record.
    pub id: u64,
    /// Id of the GroupApi event it belongs to (v5+; 0 = unknown).
    pub group: u64,
    /// Communicator id (hash).
    pub comm: u64,
    pub rank: i32,
    pub nranks: u32,
    /// When the application called the NCCL API (CollApi start; 0 = unknown).
    pub api_ns: u64,
    pub start_ns: u64,
    pub stop_ns: u64,
    pub d: Descr,
}

// Safety: `Descr::parent` is an opaque token, never dereferenced by the
// writer thread.
unsafe impl Send for Rec {}

/// One communicator, as `init` reported it.
#[derive(Clone, Copy, Debug)]
pub struct CommInfo {
    pub id: u64,
    pub rank: i32,
    pub nranks: i32,
    pub nodes: i32,
    pub name: [u8; COMM_NAME_LEN],
    pub version: u32,
    pub created_ns: u64,
}

struct CommSlot {
    /// Set (Release) once `info` is written; never cleared.
    ready: AtomicBool,
    info: UnsafeCell<CommInfo>,
    send_seq: AtomicU64,
    recv_seq: AtomicU64,
}

const FREE: u8 = 0;
const BUSY: u8 = 1;

/// One event in flight. The atomics are what other threads may read
/// (children read their parent's group id and API time); `rec` belongs to
/// whoever claimed the slot until it is released.
struct Slot {
    state: AtomicU8,
    id: AtomicU64,
    group: AtomicU64,
    api_ns: AtomicU64,
    graph: AtomicBool,
    rec: UnsafeCell<Rec>,
    /// The CUPTI external correlation id was pushed (Launch only).
    pushed: AtomicBool,
}

/// Losses, by cause.
#[derive(Default)]
pub struct Losses {
    /// No free event slot.
    pub slots_full: AtomicU64,
    /// The queue to the writer was full.
    pub queue_full: AtomicU64,
    /// More communicators than [`MAX_COMMS`].
    pub comms_full: AtomicU64,
    /// Events after the plugin turned itself off.
    pub disabled: AtomicU64,
}

/// Bytes the plugin allocates at its first `init` (slot table, queue,
/// communicator table): its whole memory on NCCL's side.
pub fn table_bytes() -> usize {
    // ArrayQueue keeps a stamp next to each value.
    EVENT_SLOTS * std::mem::size_of::<Slot>()
        + QUEUE_LEN * (std::mem::size_of::<Rec>() + std::mem::size_of::<usize>())
        + MAX_COMMS * std::mem::size_of::<CommSlot>()
}

/// The plugin's state, allocated by the first `init`.
pub struct Nccl {
    comms: Box<[CommSlot]>,
    next_comm: AtomicUsize,
    slots: Box<[Slot]>,
    cursor: AtomicUsize,
    pub(crate) queue: ArrayQueue<Rec>,
    pub losses: Losses,
    disabled: AtomicBool,
    /// Highest profiler interface version NCCL called `init` through.
    pub version: AtomicU32,
}

// Safety: the UnsafeCells are only written by the thread that owns the slot
// (claimed with a CAS) or, for communicators, before `ready` is published.
unsafe impl Sync for Nccl {}
// Safety: as above.
unsafe impl Send for Nccl {}

static NCCL: OnceLock<Nccl> = OnceLock::new();

/// The plugin state, once any `init` ran.
pub fn state() -> Option<&'static Nccl> {
    NCCL.get()
}

/// `CLOCK_REALTIME` in ns (vDSO: no system call on Linux x86-64).
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // Safety: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

impl Nccl {
    /// A state of the given capacities (the plugin itself uses
    /// [`EVENT_SLOTS`] and [`QUEUE_LEN`]; benchmarks and tests others).
    pub fn new(slots: usize, queue: usize) -> Nccl {
        let empty = Rec {
            kind: RecKind::Coll,
            id: 0,
            group: 0,
            comm: 0,
            rank: -1,
            nranks: 0,
            api_ns: 0,
            start_ns: 0,
            stop_ns: 0,
            d: Descr::default(),
        };
        Nccl {
            comms: (0..MAX_COMMS)
                .map(|_| CommSlot {
                    ready: AtomicBool::new(false),
                    info: UnsafeCell::new(CommInfo {
                        id: 0,
                        rank: -1,
                        nranks: 0,
                        nodes: 0,
                        name: [0; COMM_NAME_LEN],
                        version: 0,
                        created_ns: 0,
                    }),
                    send_seq: AtomicU64::new(0),
                    recv_seq: AtomicU64::new(0),
                })
                .collect(),
            next_comm: AtomicUsize::new(0),
            slots: (0..slots)
                .map(|_| Slot {
                    state: AtomicU8::new(FREE),
                    id: AtomicU64::new(0),
                    group: AtomicU64::new(0),
                    api_ns: AtomicU64::new(0),
                    graph: AtomicBool::new(false),
                    rec: UnsafeCell::new(empty),
                    pushed: AtomicBool::new(false),
                })
                .collect(),
            cursor: AtomicUsize::new(0),
            queue: ArrayQueue::new(queue),
            losses: Losses::default(),
            disabled: AtomicBool::new(false),
            version: AtomicU32::new(0),
        }
    }

    /// Benchmarks: a communicator context.
    #[doc(hidden)]
    pub fn bench_comm(&self, id: u64) -> *mut libc::c_void {
        let info = CommInfo {
            id,
            rank: 0,
            nranks: 8,
            nodes: 1,
            name: [0; COMM_NAME_LEN],
            version: 5,
            created_ns: 0,
        };
        self.init(info, u64::MAX).0
    }

    /// Benchmarks: pop one finished record (what the writer does).
    #[doc(hidden)]
    pub fn bench_pop(&self) -> bool {
        self.queue.pop().is_some()
    }

    /// Benchmarks: events lost so far.
    #[doc(hidden)]
    pub fn bench_lost(&self) -> u64 {
        self.losses.slots_full.load(Relaxed) + self.losses.queue_full.load(Relaxed)
    }

    /// Whether the plugin turned itself off.
    pub fn is_disabled(&self) -> bool {
        self.disabled.load(Relaxed)
    }

    /// Turn the plugin off with one line (printed once).
    pub fn disable(&self, why: &str) {
        if !self.disabled.swap(true, Relaxed) {
            crate::say::say(&format!(
                "NCCL profiler plugin: {why}; NCCL metadata capture is off, the job continues"
            ));
        }
    }

    /// Communicators published so far, from index `from` (the writer keeps
    /// its own watermark). Stops at the first one still being written.
    pub fn comms_from(&self, from: usize, out: &mut Vec<CommInfo>) -> usize {
        let n = self.next_comm.load(Acquire).min(MAX_COMMS);
        let mut i = from;
        while i < n && self.comms[i].ready.load(Acquire) {
            // Safety: `ready` (Acquire) publishes `info`, never written again.
            out.push(unsafe { *self.comms[i].info.get() });
            i += 1;
        }
        i
    }

    fn comm_slot(&self, ctx: *mut libc::c_void) -> Option<&CommSlot> {
        let base = self.comms.as_ptr() as usize;
        let off = (ctx as usize).checked_sub(base)?;
        let size = std::mem::size_of::<CommSlot>();
        if off % size != 0 || off / size >= self.comms.len() {
            return None;
        }
        Some(&self.comms[off / size])
    }

    fn slot(&self, handle: *mut libc::c_void) -> Option<&Slot> {
        let base = self.slots.as_ptr() as usize;
        let off = (handle as usize).checked_sub(base)?;
        let size = std::mem::size_of::<Slot>();
        if off % size != 0 || off / size >= self.slots.len() {
            return None;
        }
        Some(&self.slots[off / size])
    }

    /// Claim a free slot: a few probes from a shared cursor, so slots are
    /// reused round-robin (a parent's slot is not reused while its children
    /// could still look at it, unless 16 k events are in flight).
    /// Also returns the event's id: the cursor ticket + 1, unique and never 0
    /// (one shared atomic per event, not two).
    fn claim(&self) -> Option<(&Slot, u64)> {
        let n = self.slots.len();
        let start = self.cursor.fetch_add(1, Relaxed);
        for probe in 0..8 {
            let s = &self.slots[(start + probe) % n];
            if s.state.compare_exchange(FREE, BUSY, Acquire, Relaxed).is_ok() {
                return Some((s, start as u64 + 1));
            }
        }
        self.losses.slots_full.fetch_add(1, Relaxed);
        None
    }

    /// `init` for any version. Returns the context and the activation mask.
    pub fn init(&self, info: CommInfo, mask: u64) -> (*mut libc::c_void, u64) {
        self.version.fetch_max(info.version, Relaxed);
        if self.is_disabled() {
            return (std::ptr::null_mut(), 0);
        }
        let i = self.next_comm.fetch_add(1, AcqRel);
        let Some(c) = self.comms.get(i) else {
            self.losses.comms_full.fetch_add(1, Relaxed);
            return (std::ptr::null_mut(), 0);
        };
        // Safety: slot `i` was handed to this call alone; published below.
        unsafe { *c.info.get() = info };
        c.ready.store(true, Release);
        (c as *const CommSlot as *mut libc::c_void, mask)
    }

    /// `startEvent` for any version. Returns the handle (null = untracked).
    pub fn start(&self, ctx: *mut libc::c_void, d: &Descr) -> *mut libc::c_void {
        if self.is_disabled() {
            self.losses.disabled.fetch_add(1, Relaxed);
            return std::ptr::null_mut();
        }
        let tracked = ty::GROUP_API | ty::COLL_API | ty::P2P_API | ty::KERNEL_LAUNCH | ty::COLL | ty::P2P | ty::CE_COLL;
        if d.ty & tracked == 0 || d.ty.count_ones() != 1 {
            return std::ptr::null_mut(); // a type we do not record
        }
        let comm = self.comm_slot(ctx);
        let Some((s, id)) = self.claim() else {
            return std::ptr::null_mut();
        };
        // The clock costs tens of ns on some VMs: read it only where the
        // time is used (API calls and the operations themselves).
        let now = if d.ty & (ty::COLL_API | ty::P2P_API | ty::COLL | ty::P2P | ty::CE_COLL) != 0 {
            now_ns()
        } else {
            0
        };
        // The parent may already be stopped (a collective's task starts after
        // its API call returned; a non-blocking communicator launches from
        // NCCL's async thread after ncclGroupEnd returned): its atomics keep
        // their values until the slot is reused, which the round-robin claim
        // puts thousands of events later.
        let parent = self.slot(d.parent);
        let (p_id, p_group, p_api, p_graph) = parent.map_or((0, 0, 0, false), |p| {
            (
                p.id.load(Relaxed),
                p.group.load(Relaxed),
                p.api_ns.load(Relaxed),
                p.graph.load(Relaxed),
            )
        });
        let (group, api_ns, graph) = match d.ty {
            ty::GROUP_API => (id, 0, d.graph_captured),
            ty::COLL_API | ty::P2P_API => (p_id, now, d.graph_captured || p_graph),
            ty::KERNEL_LAUNCH => (p_id, 0, p_graph),
            // Coll/P2p: parent is the CollApi/P2pApi event (v5+) or the
            // Group event (v1–v4, which has no API time).
            _ => (p_group, p_api, p_graph),
        };
        s.id.store(id, Relaxed);
        s.group.store(group, Relaxed);
        s.api_ns.store(api_ns, Relaxed);
        s.graph.store(graph, Relaxed);
        s.pushed.store(false, Relaxed);
        if matches!(d.ty, ty::COLL | ty::P2P | ty::CE_COLL | ty::KERNEL_LAUNCH) {
            let (comm_id, rank, nranks) = match comm {
                // Safety: a context we handed out was published before NCCL got it.
                Some(c) => {
                    let info = unsafe { &*c.info.get() };
                    let id = if info.id != 0 { info.id } else { d.comm_hash };
                    let rank = if d.rank >= 0 { d.rank } else { info.rank };
                    (id, rank, info.nranks.max(0) as u32)
                }
                None => (d.comm_hash, d.rank, 0),
            };
            let mut desc = *d;
            desc.graph_captured |= graph;
            if d.ty == ty::P2P {
                // Point-to-point has no NCCL sequence number: count per
                // communicator and direction.
                if let Some(c) = comm {
                    // Bytes, not `name_str`: a lossy conversion may allocate.
                    let ctr = if d.func.starts_with(b"Recv\0") || d.func.starts_with(b"recv\0") {
                        &c.recv_seq
                    } else {
                        &c.send_seq
                    };
                    desc.seq = ctr.fetch_add(1, Relaxed);
                }
            }
            let kind = match d.ty {
                ty::COLL => RecKind::Coll,
                ty::P2P => RecKind::P2p,
                ty::CE_COLL => RecKind::CeColl,
                _ => RecKind::Launch,
            };
            // Safety: we own the slot (claimed above) until stop releases it.
            unsafe {
                *s.rec.get() = Rec {
                    kind,
                    id,
                    group,
                    comm: comm_id,
                    rank,
                    nranks,
                    api_ns,
                    start_ns: now,
                    stop_ns: 0,
                    d: desc,
                };
            }
            // A kernel launch, or a copy-engine collective's copies: CUPTI
            // ties the CUDA calls made inside the bracket to this id.
            if matches!(kind, RecKind::Launch | RecKind::CeColl) {
                s.pushed.store(crate::correlation::push(id), Relaxed);
            }
        }
        s as *const Slot as *mut libc::c_void
    }

    /// `stopEvent` for any version.
    pub fn stop(&self, handle: *mut libc::c_void) {
        if handle.is_null() {
            return;
        }
        let Some(s) = self.slot(handle) else {
            self.disable("stopEvent got a handle this plugin never returned");
            return;
        };
        if s.state.load(Acquire) != BUSY {
            self.disable("stopEvent on an event that was already stopped");
            return;
        }
        // Safety: the slot is ours until released below.
        let rec = unsafe { &mut *s.rec.get() };
        // `rec.id` is set only for the events that become records (and cleared
        // below): API and group events just release their slot.
        if rec.id != 0 {
            if s.pushed.load(Relaxed) {
                crate::correlation::pop();
            }
            if rec.kind != RecKind::Launch {
                rec.stop_ns = now_ns();
            }
            if self.queue.push(*rec).is_err() {
                self.losses.queue_full.fetch_add(1, Relaxed);
            }
        }
        rec.id = 0;
        s.state.store(FREE, Release);
    }

    /// `recordEventState`: only validates the handle (gputrace records no
    /// proxy or channel states yet).
    pub fn state_change(&self, handle: *mut libc::c_void) {
        if !handle.is_null() && self.slot(handle).is_none() {
            self.disable("recordEventState got a handle this plugin never returned");
        }
    }
}

/// The state, allocated on first use (by the first `init`, which also makes
/// sure a capture session runs).
pub fn state_or_init() -> &'static Nccl {
    NCCL.get_or_init(|| Nccl::new(EVENT_SLOTS, QUEUE_LEN))
}

/// Whether the environment leaves the plugin on (`GPUTRACE_NCCL=0` or
/// `GPUTRACE_DISABLE=1` turn it off): read once, at the first `init`, not on
/// every communicator's.
pub fn enabled_by_env() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| {
        let c = crate::config::Config::from_env(|k| std::env::var(k).ok());
        c.nccl && !c.disabled
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coll(parent: *mut libc::c_void, seq: u64) -> Descr {
        Descr {
            ty: ty::COLL,
            parent,
            rank: 1,
            seq,
            func: *b"AllReduce\0\0\0\0\0\0\0",
            datatype: *b"ncclBfloat16\0\0\0\0",
            count: 1024,
            ..Default::default()
        }
    }

    fn info(id: u64) -> CommInfo {
        CommInfo {
            id,
            rank: 1,
            nranks: 4,
            nodes: 1,
            name: [0; COMM_NAME_LEN],
            version: 5,
            created_ns: 1,
        }
    }

    #[test]
    fn api_group_launch_and_coll_chain_ids() {
        let n = Nccl::new(64, 64);
        let (ctx, _) = n.init(info(0xc0ffee), 0xfff);
        let g = n.start(
            ctx,
            &Descr {
                ty: ty::GROUP_API,
                ..Default::default()
            },
        );
        let api = n.start(
            ctx,
            &Descr {
                ty: ty::COLL_API,
                parent: g,
                ..Default::default()
            },
        );
        let launch = n.start(
            ctx,
            &Descr {
                ty: ty::KERNEL_LAUNCH,
                parent: g,
                ..Default::default()
            },
        );
        n.stop(launch);
        n.stop(api);
        let c = n.start(ctx, &coll(api, 7));
        n.stop(c);
        n.stop(g);
        let l = n.queue.pop().unwrap();
        let c = n.queue.pop().unwrap();
        assert!(n.queue.pop().is_none());
        assert_eq!(l.kind, RecKind::Launch);
        assert_eq!(c.kind, RecKind::Coll);
        assert_eq!(l.group, c.group);
        assert_ne!(l.group, 0);
        assert_eq!((c.comm, c.rank, c.nranks, c.d.seq, c.d.count), (0xc0ffee, 1, 4, 7, 1024));
        assert!(c.api_ns > 0 && c.api_ns <= c.start_ns && c.start_ns <= c.stop_ns);
        assert_eq!(name_str(&c.d.func), "AllReduce");
        assert!(!n.is_disabled());
    }

    #[test]
    fn a_launch_after_its_group_ended_still_gets_the_group() {
        // Non-blocking communicators launch from NCCL's async thread, after
        // ncclGroupEnd (and the GroupApi event) returned.
        let n = Nccl::new(64, 64);
        let (ctx, _) = n.init(info(7), 0xfff);
        let g = n.start(
            ctx,
            &Descr {
                ty: ty::GROUP_API,
                ..Default::default()
            },
        );
        let api = n.start(
            ctx,
            &Descr {
                ty: ty::COLL_API,
                parent: g,
                ..Default::default()
            },
        );
        n.stop(api);
        n.stop(g);
        let launch = n.start(
            ctx,
            &Descr {
                ty: ty::KERNEL_LAUNCH,
                parent: g,
                ..Default::default()
            },
        );
        n.stop(launch);
        let c = n.start(ctx, &coll(api, 0));
        n.stop(c);
        let (l, c) = (n.queue.pop().unwrap(), n.queue.pop().unwrap());
        assert_ne!(l.group, 0);
        assert_eq!(l.group, c.group);
    }

    #[test]
    fn concurrent_events_each_get_their_own_slot_and_record() {
        // The slot table's UnsafeCells are written only by the thread whose
        // CAS claimed the slot: were two threads ever to share one, records
        // would be lost, doubled or mixed (a count from one, a sequence
        // number from another).
        const THREADS: u64 = 8;
        const EACH: u64 = 2000;
        // Fewer slots than threads: claims contend.
        let n = Nccl::new(4, (THREADS * EACH) as usize);
        let (ctx, _) = n.init(info(3), 0xfff);
        let ctx = ctx as usize;
        let full = AtomicU64::new(0);
        std::thread::scope(|sc| {
            for t in 0..THREADS {
                let (n, full) = (&n, &full);
                sc.spawn(move || {
                    for i in 0..EACH {
                        let seq = t * 1_000_000 + i;
                        let d = Descr {
                            count: seq,
                            ..coll(std::ptr::null_mut(), seq)
                        };
                        // A misused slot turns the plugin off (a stop on a
                        // freed slot): then every start is refused.
                        let h = loop {
                            let h = n.start(ctx as *mut libc::c_void, &d);
                            if !h.is_null() || n.is_disabled() {
                                break h;
                            }
                            full.fetch_add(1, Relaxed);
                            std::thread::yield_now();
                        };
                        std::thread::yield_now();
                        n.stop(h);
                    }
                });
            }
        });
        let mut seqs = Vec::new();
        while let Some(r) = n.queue.pop() {
            assert_eq!(r.d.count, r.d.seq, "a record mixes two events");
            assert_eq!((r.kind, r.comm, r.rank), (RecKind::Coll, 3, 1));
            seqs.push(r.d.seq);
        }
        seqs.sort_unstable();
        let want: Vec<u64> = (0..THREADS).flat_map(|t| (0..EACH).map(move |i| t * 1_000_000 + i)).collect();
        assert_eq!(seqs.len(), want.len(), "records lost or doubled");
        assert!(seqs == want, "records lost or doubled");
        assert_eq!(n.losses.slots_full.load(Relaxed), full.load(Relaxed));
        assert_eq!(n.losses.queue_full.load(Relaxed), 0);
        assert!(!n.is_disabled());
    }

    #[test]
    fn full_tables_count_losses_and_never_block() {
        let n = Nccl::new(4, 2);
        let (ctx, _) = n.init(info(1), 0xfff);
        let hs: Vec<_> = (0..6).map(|i| n.start(ctx, &coll(std::ptr::null_mut(), i))).collect();
        assert_eq!(hs.iter().filter(|h| h.is_null()).count(), 2);
        assert_eq!(n.losses.slots_full.load(Relaxed), 2);
        for h in hs {
            n.stop(h);
        }
        assert_eq!(n.losses.queue_full.load(Relaxed), 2);
        assert_eq!(n.queue.len(), 2);
    }

    #[test]
    fn foreign_handle_turns_the_plugin_off() {
        let n = Nccl::new(4, 4);
        let mut x = 0u64;
        n.stop(&mut x as *mut u64 as *mut libc::c_void);
        assert!(n.is_disabled());
        let (ctx, mask) = n.init(info(2), 0xfff);
        assert!(ctx.is_null() && mask == 0);
    }

    #[test]
    fn tables_stay_within_the_documented_12_mib() {
        // docs/nccl.md and docs/agent.md state this bound.
        assert!(table_bytes() <= 12 << 20, "{} bytes", table_bytes());
    }

    #[test]
    fn datatype_sizes() {
        assert_eq!(datatype_size("ncclBfloat16"), 2);
        assert_eq!(datatype_size("ncclFloat32"), 4);
        assert_eq!(datatype_size("ncclUint8"), 1);
        assert_eq!(datatype_size("ncclFloat64"), 8);
        assert_eq!(datatype_size("mystery"), 0);
    }
}
