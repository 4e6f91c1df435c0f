//! NVTX markers: the application's own ranges and marks (`nvtxRangePushA`,
//! `nvtxMarkA`, domains, categories, payloads), recorded through NVTX's own
//! injection entry (`InitializeInjectionNvtx2`, as Nsight Systems does; not
//! through CUPTI), plus `gputrace_mark` (in `ffi`) for the
//! Python module.
//!
//! Rules on the calling (application) thread, the same as the NCCL plugin's:
//! - no allocation, lock or system call: a record is filled on the stack
//!   and pushed into a bounded lock-free queue allocated once, at NVTX's
//!   initialization (`crossbeam::queue::ArrayQueue::push` does not
//!   allocate); times come from the vDSO `CLOCK_REALTIME`;
//! - two exceptions, both one-time: the first call on each thread asks the
//!   kernel for its thread id (`gettid`, cached in a const-initialized
//!   thread-local, which needs no allocation), and the initialization itself
//!   allocates the queue and tables and registers the exit handler;
//! - domains, registered strings, category and thread names live in fixed
//!   tables whose slots are claimed with an atomic add; what does not fit,
//!   and records the queue has no room for, are counted and written to the
//!   trace as losses.
//!
//! The queue is global and independent of any session: the writer thread of
//! whichever session runs (CUPTI's, or one without CUPTI) drains it, and a
//! process that used NVTX but never CUDA gets a markers-only trace at exit.

pub(crate) mod abi;
pub(crate) mod pair;

use crossbeam::queue::ArrayQueue;
use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering, Ordering::*};
use std::sync::OnceLock;

/// Message bytes kept inline in a record (longer ones are cut, counted).
pub const MSG_LEN: usize = 128;
/// Domains one process can create (more: their events go to the default
/// domain's slot 0 are not recorded, and counted).
pub const MAX_DOMAINS: usize = 256;
/// Registered strings (`nvtxDomainRegisterStringA`).
pub const MAX_STRINGS: usize = 4096;
/// Named categories and named threads, each.
pub const MAX_NAMES: usize = 1024;
/// Bytes kept of a domain, category or thread name.
pub const NAME_LEN: usize = 64;

/// What a record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RecKind {
    Mark,
    Push,
    Pop,
    Start,
    End,
    /// A `gputrace_request` mark: `range_id` is the request id, `category`
    /// its phase, `payload` its token count (not NVTX: the writer takes it
    /// out before pairing).
    Request,
}

/// One NVTX event, fixed-size, as it travels to the writer thread.
#[derive(Clone, Copy, Debug)]
pub struct Rec {
    /// `CLOCK_REALTIME` ns (the writer puts it on the trace's clock).
    pub time_ns: u64,
    /// Range id of a start/end (0 otherwise).
    pub range_id: u64,
    /// Payload bits as NVTX passed them (see `payload_type`).
    pub payload: u64,
    /// Kernel thread id (`gettid`), as CUPTI's API records carry it.
    pub tid: u32,
    pub category: u32,
    /// ARGB, when `has_color`.
    pub color: u32,
    /// Index in the domain table (0: the default domain).
    pub domain: u16,
    pub kind: RecKind,
    /// How to read `payload`.
    pub payload_type: abi::Payload,
    pub has_color: bool,
    /// Bytes of `msg` in use (UTF-8).
    pub len: u8,
    pub msg: [u8; MSG_LEN],
}

impl Rec {
    /// An empty record of `kind` on this thread, now.
    #[inline]
    pub fn new(kind: RecKind, domain: u16) -> Rec {
        Rec {
            time_ns: crate::nccl::now_ns(),
            range_id: 0,
            payload: 0,
            tid: thread_id(),
            category: 0,
            color: 0,
            domain,
            kind,
            payload_type: abi::Payload::None,
            has_color: false,
            len: 0,
            msg: [0; MSG_LEN],
        }
    }

    /// The message text.
    pub fn text(&self) -> &str {
        let b = &self.msg[..self.len as usize];
        // Always valid: `Text` only ever cuts at a character boundary.
        std::str::from_utf8(b).unwrap_or("")
    }
}

/// Appends UTF-8 into a fixed buffer, cutting at a character boundary.
pub struct Text<'a> {
    buf: &'a mut [u8],
    len: usize,
    /// Something did not fit.
    pub cut: bool,
}

impl<'a> Text<'a> {
    pub fn new(buf: &'a mut [u8]) -> Text<'a> {
        Text { buf, len: 0, cut: false }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn push(&mut self, c: char) {
        if self.cut {
            return;
        }
        let n = c.len_utf8();
        if self.len + n > self.buf.len() {
            self.cut = true;
            return;
        }
        c.encode_utf8(&mut self.buf[self.len..]);
        self.len += n;
    }

    /// A NUL-terminated byte string (each byte that is not part of valid
    /// UTF-8 becomes one U+FFFD).
    ///
    /// # Safety
    /// `p` is null or NUL-terminated and readable.
    pub unsafe fn push_cstr(&mut self, p: *const libc::c_char) {
        if p.is_null() {
            return;
        }
        // Every byte read becomes at least one byte of text, so bytes past
        // the room left (plus a character's worth, so that the last one that
        // fits is whole) can only be cut: they are not read.
        let limit = self.buf.len() - self.len + 4;
        let mut n = 0;
        // Safety: we stop at the NUL the caller guarantees.
        while n < limit && unsafe { *p.add(n) } != 0 {
            n += 1;
        }
        // Safety: the `n` bytes before the NUL (or the limit) were just read.
        let bytes = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) };
        for chunk in bytes.utf8_chunks() {
            for c in chunk.valid().chars() {
                self.push(c);
            }
            for _ in chunk.invalid() {
                self.push(char::REPLACEMENT_CHARACTER);
            }
            if self.cut {
                return;
            }
        }
    }

    /// A NUL-terminated `wchar_t` string (UTF-32 on Linux).
    ///
    /// # Safety
    /// `p` is null or NUL-terminated and readable.
    pub unsafe fn push_wide(&mut self, p: *const libc::wchar_t) {
        if p.is_null() {
            return;
        }
        let mut i = 0;
        loop {
            // Safety: we stop at the NUL the caller guarantees.
            let w = unsafe { *p.add(i) } as u32;
            if w == 0 || self.cut {
                return;
            }
            self.push(char::from_u32(w).unwrap_or(char::REPLACEMENT_CHARACTER));
            i += 1;
        }
    }
}

/// A [`NameSlot`]'s life: free, written by the one thread that claimed it,
/// then ready for good.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    Free = 0,
    Writing = 1,
    /// Stored with Release after the last write to the bytes.
    Ready = 2,
}

impl From<u8> for SlotState {
    fn from(v: u8) -> SlotState {
        match v {
            1 => SlotState::Writing,
            2 => SlotState::Ready,
            _ => SlotState::Free,
        }
    }
}

impl From<SlotState> for u8 {
    fn from(s: SlotState) -> u8 {
        s as u8
    }
}

/// A [`SlotState`] shared between threads.
struct AtomicSlotState(AtomicU8);

impl AtomicSlotState {
    fn new(s: SlotState) -> AtomicSlotState {
        AtomicSlotState(AtomicU8::new(s.into()))
    }

    fn load(&self, order: Ordering) -> SlotState {
        self.0.load(order).into()
    }

    fn store(&self, s: SlotState, order: Ordering) {
        self.0.store(s.into(), order)
    }
}

/// A fixed-size name slot, written once by the thread that claimed it.
struct NameSlot {
    state: AtomicSlotState,
    /// Domain (categories, strings) or thread id (thread names).
    key: AtomicU32,
    /// Category id (categories).
    id: AtomicU32,
    len: AtomicU8,
    bytes: UnsafeCell<[u8; MSG_LEN]>,
}

impl NameSlot {
    fn new() -> NameSlot {
        NameSlot {
            state: AtomicSlotState::new(SlotState::Free),
            key: AtomicU32::new(0),
            id: AtomicU32::new(0),
            len: AtomicU8::new(0),
            bytes: UnsafeCell::new([0; MSG_LEN]),
        }
    }

    /// The name, once ready.
    fn get(&self) -> Option<&str> {
        if self.state.load(Acquire) != SlotState::Ready {
            return None;
        }
        // Safety: Ready was stored (Release) after the last write to the
        // bytes, which are never written again.
        let b = unsafe { &*self.bytes.get() };
        std::str::from_utf8(&b[..self.len.load(Relaxed) as usize]).ok()
    }
}

// Safety: the bytes are written only by the thread that claimed the slot
// (atomic add), before its Release store of Ready; readers read them only
// after an Acquire load of Ready.
unsafe impl Sync for NameSlot {}

/// A table of [`NameSlot`]s claimed by an atomic add.
struct Names {
    slots: Box<[NameSlot]>,
    next: AtomicUsize,
    /// Names that found the table full.
    full: AtomicU64,
}

impl Names {
    fn new(n: usize) -> Names {
        Names {
            slots: (0..n).map(|_| NameSlot::new()).collect(),
            next: AtomicUsize::new(0),
            full: AtomicU64::new(0),
        }
    }

    /// Claim a slot and fill it with `fill` (limited to `cap` bytes);
    /// returns its index, or `None` (counted) when the table is full.
    fn add(&self, key: u32, id: u32, cap: usize, fill: impl FnOnce(&mut Text)) -> Option<usize> {
        let i = self.next.fetch_add(1, Relaxed);
        let Some(slot) = self.slots.get(i) else {
            self.next.store(self.slots.len(), Relaxed);
            self.full.fetch_add(1, Relaxed);
            return None;
        };
        slot.state.store(SlotState::Writing, Relaxed);
        // Safety: the atomic add gave slot `i` to this thread alone; readers
        // look at the bytes only after Ready (below).
        let bytes = unsafe { &mut *slot.bytes.get() };
        let mut t = Text::new(&mut bytes[..cap.min(MSG_LEN)]);
        fill(&mut t);
        slot.len.store(t.len() as u8, Relaxed);
        slot.key.store(key, Relaxed);
        slot.id.store(id, Relaxed);
        slot.state.store(SlotState::Ready, Release);
        Some(i)
    }

    fn ready(&self) -> impl Iterator<Item = (usize, &NameSlot)> {
        let n = self.next.load(Acquire).min(self.slots.len());
        self.slots[..n]
            .iter()
            .enumerate()
            .filter(|(_, s)| s.state.load(Acquire) == SlotState::Ready)
    }
}

/// Counters of what was not recorded or was cut.
#[derive(Default)]
pub struct Losses {
    /// Records the queue had no room for.
    pub queue_full: AtomicU64,
    /// Messages cut to [`MSG_LEN`] bytes (recorded, shortened).
    pub truncated: AtomicU64,
    /// Events in a domain the table had no room for (not recorded).
    pub no_domain: AtomicU64,
    /// Events whose registered string the table had no room for (recorded
    /// with an empty message).
    pub no_string: AtomicU64,
    /// `gputrace_request` marks the queue had no room for.
    pub requests_lost: AtomicU64,
}

/// The process's NVTX state, allocated once.
pub struct Nvtx {
    pub queue: ArrayQueue<Rec>,
    pub losses: Losses,
    /// Domain names; slot i is domain i + 1 (0 is the default domain).
    domains: Names,
    strings: Names,
    categories: Names,
    threads: Names,
    next_range: AtomicU64,
    next_resource: AtomicU64,
    /// pid that initialized NVTX (a forked child sees another).
    pub pid: u32,
}

static NVTX: OnceLock<Nvtx> = OnceLock::new();
/// Set by our `pthread_atfork` child handler: a forked child records nothing
/// (its parent's session, not the child, owns the queue's writer).
static FORKED: AtomicBool = AtomicBool::new(false);
/// `GPUTRACE_NVTX=0` or `GPUTRACE_DISABLE=1` (read once, at init).
static OFF: AtomicBool = AtomicBool::new(false);

extern "C" fn after_fork_child() {
    FORKED.store(true, Relaxed);
}

/// The state, if NVTX (or `gputrace_mark`) was used.
pub fn state() -> Option<&'static Nvtx> {
    NVTX.get()
}

/// The state, allocated on the first call (one time: allocates the queue
/// and tables, registers the fork handler and `at_exit`). `None` when NVTX
/// capture is off by environment. `at_exit` is the entry layer's handler
/// that writes the markers when no session ran (see `ffi/nvtx.rs`).
pub fn state_or_init(at_exit: extern "C" fn()) -> Option<&'static Nvtx> {
    if let Some(s) = NVTX.get() {
        return (!OFF.load(Relaxed)).then_some(s);
    }
    let env = |k: &str| std::env::var(k).ok();
    let config = crate::config::Config::from_env(env);
    let s = NVTX.get_or_init(|| {
        if !config.nvtx || config.disabled {
            OFF.store(true, Relaxed);
        }
        if OFF.load(Relaxed) {
            // No handlers: NVTX may unload this library when its
            // initialization returns 0.
            return Nvtx::new(1);
        }
        // Safety: registering plain extern "C" functions with libc.
        unsafe {
            libc::pthread_atfork(None, None, Some(after_fork_child));
            libc::atexit(at_exit);
        }
        Nvtx::new(config.nvtx_records)
    });
    (!OFF.load(Relaxed)).then_some(s)
}

/// Whether this process recorded markers it must write itself at exit:
/// NVTX capture is on and this is the process that initialized it (not a
/// forked child).
pub fn owns_markers() -> bool {
    state().is_some_and(|s| !OFF.load(Relaxed) && !FORKED.load(Relaxed) && s.pid == std::process::id())
}

thread_local! {
    /// This thread's kernel id, 0 until first asked (const: no allocation,
    /// no destructor).
    static TID: Cell<u32> = const { Cell::new(0) };
    /// Depth of this thread's push/pop ranges (all domains together).
    static DEPTH: Cell<i32> = const { Cell::new(0) };
}

/// The calling thread's kernel id: one `gettid` system call per thread,
/// then a thread-local read.
#[inline]
pub fn thread_id() -> u32 {
    TID.with(|t| {
        let v = t.get();
        if v != 0 {
            return v;
        }
        // Safety: gettid has no arguments and cannot fail.
        let id = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        t.set(id);
        id
    })
}

/// Where a message comes from.
#[derive(Clone, Copy)]
pub enum Msg {
    None,
    Ascii(*const libc::c_char),
    Wide(*const libc::wchar_t),
    /// A registered string handle.
    Registered(*const libc::c_void),
}

impl Nvtx {
    pub fn new(queue: usize) -> Nvtx {
        Nvtx {
            queue: ArrayQueue::new(queue.max(1)),
            losses: Losses::default(),
            domains: Names::new(MAX_DOMAINS),
            strings: Names::new(MAX_STRINGS),
            categories: Names::new(MAX_NAMES),
            threads: Names::new(MAX_NAMES),
            next_range: AtomicU64::new(1),
            next_resource: AtomicU64::new(1),
            pid: std::process::id(),
        }
    }

    /// Whether calls on this thread are recorded at all.
    #[inline]
    fn live(&self) -> bool {
        !FORKED.load(Relaxed)
    }

    /// The domain index of an NVTX handle (`None`: not one of ours or over
    /// the table: the event is not recorded, and counted).
    fn domain(&self, h: *const libc::c_void) -> Option<u16> {
        let i = h as usize;
        if i <= MAX_DOMAINS {
            Some(i as u16)
        } else {
            self.losses.no_domain.fetch_add(1, Relaxed);
            None
        }
    }

    /// Fill `r`'s message.
    ///
    /// # Safety
    /// A message pointer is null or NUL-terminated (the NVTX contract).
    unsafe fn set_msg(&self, r: &mut Rec, m: Msg) {
        let mut t = Text::new(&mut r.msg);
        match m {
            Msg::None => {}
            // Safety: NVTX passes NUL-terminated strings (the caller's contract).
            Msg::Ascii(p) => unsafe { t.push_cstr(p) },
            // Safety: as above.
            Msg::Wide(p) => unsafe { t.push_wide(p) },
            Msg::Registered(h) => match (h as usize).checked_sub(1).and_then(|i| self.strings.slots.get(i)) {
                Some(slot) => {
                    for c in slot.get().unwrap_or("").chars() {
                        t.push(c);
                    }
                }
                None => {
                    self.losses.no_string.fetch_add(1, Relaxed);
                }
            },
        }
        let (len, cut) = (t.len(), t.cut);
        r.len = len as u8;
        if cut {
            self.losses.truncated.fetch_add(1, Relaxed);
        }
    }

    /// Apply an `nvtxEventAttributes_t`.
    ///
    /// # Safety
    /// `a` is null or points to an attributes struct of at least its `size`.
    unsafe fn set_attrs(&self, r: &mut Rec, a: *const abi::EventAttributes) {
        if a.is_null() {
            return;
        }
        // Safety: the caller's contract; a struct smaller than the v2 one
        // (an older NVTX) is read field by field only as far as it goes.
        let size = unsafe { (*a).size } as usize;
        if size < std::mem::offset_of!(abi::EventAttributes, message) + 8 {
            return;
        }
        // Safety: the full v2 struct is there (checked above).
        let a = unsafe { &*a };
        r.category = a.category;
        if a.color_type == abi::COLOR_ARGB {
            r.has_color = true;
            r.color = a.color;
        }
        r.payload_type = abi::Payload::from_abi(a.payload_type);
        if r.payload_type != abi::Payload::None {
            r.payload = a.payload;
        }
        let m = match a.message_type {
            abi::MESSAGE_ASCII => Msg::Ascii(a.message as *const libc::c_char),
            abi::MESSAGE_UNICODE => Msg::Wide(a.message as *const libc::wchar_t),
            abi::MESSAGE_REGISTERED => Msg::Registered(a.message),
            _ => Msg::None,
        };
        // Safety: the message pointer follows the NVTX contract.
        unsafe { self.set_msg(r, m) };
    }

    #[inline]
    fn push(&self, r: Rec) -> bool {
        if self.queue.push(r).is_err() {
            self.losses.queue_full.fetch_add(1, Relaxed);
            return false;
        }
        true
    }

    /// Record an event. Returns the range id for a start, the new depth for
    /// a push, the depth left for a pop (-1: nothing was open on this
    /// thread), else 0 (and -1 for an event not recorded).
    ///
    /// # Safety
    /// `domain`, `attrs` and `msg` per the NVTX contract.
    pub unsafe fn event(
        &self,
        kind: RecKind,
        domain: *const libc::c_void,
        attrs: *const abi::EventAttributes,
        msg: Msg,
        range_id: u64,
    ) -> i64 {
        if !self.live() {
            return -1;
        }
        let Some(d) = self.domain(domain) else { return -1 };
        let mut r = Rec::new(kind, d);
        // Safety: the caller's contract.
        unsafe {
            self.set_attrs(&mut r, attrs);
            self.set_msg_if(&mut r, msg);
        }
        let ret = match kind {
            RecKind::Start => {
                r.range_id = self.next_range.fetch_add(1, Relaxed);
                r.range_id as i64
            }
            RecKind::End => {
                r.range_id = range_id;
                0
            }
            RecKind::Push => DEPTH.with(|c| {
                let v = c.get();
                c.set(v + 1);
                v as i64
            }),
            RecKind::Pop => DEPTH.with(|c| {
                let v = c.get();
                c.set((v - 1).max(0));
                v as i64 - 1
            }),
            RecKind::Mark | RecKind::Request => 0,
        };
        self.push(r);
        ret
    }

    /// Message from `msg` unless the attributes already gave one.
    ///
    /// # Safety
    /// As [`Self::set_msg`].
    unsafe fn set_msg_if(&self, r: &mut Rec, msg: Msg) {
        if !matches!(msg, Msg::None) {
            // Safety: the caller's contract.
            unsafe { self.set_msg(r, msg) };
        }
    }

    /// `nvtxDomainCreateA/W`: the handle is the table index + 1; the same
    /// name gives the same handle.
    pub fn create_domain(&self, name: Msg) -> *mut libc::c_void {
        let mut buf = [0u8; MSG_LEN];
        let mut t = Text::new(&mut buf[..NAME_LEN]);
        // Safety: NVTX passes a NUL-terminated name.
        unsafe {
            match name {
                Msg::Ascii(p) => t.push_cstr(p),
                Msg::Wide(p) => t.push_wide(p),
                _ => {}
            }
        }
        let n = t.len();
        let wanted = std::str::from_utf8(&buf[..n]).unwrap_or("");
        if let Some((i, _)) = self.domains.ready().find(|(_, s)| s.get() == Some(wanted)) {
            return (i + 1) as *mut libc::c_void;
        }
        match self.domains.add(0, 0, NAME_LEN, |t| wanted.chars().for_each(|c| t.push(c))) {
            Some(i) => (i + 1) as *mut libc::c_void,
            // Out of slots: an invalid handle; its events are counted.
            None => (MAX_DOMAINS + 1) as *mut libc::c_void,
        }
    }

    /// `nvtxDomainRegisterStringA/W`: copies the text (up to [`MSG_LEN`]).
    pub fn register_string(&self, domain: *const libc::c_void, s: Msg) -> *mut libc::c_void {
        let d = (domain as usize).min(u32::MAX as usize) as u32;
        let i = self.strings.add(d, 0, MSG_LEN, |t| {
            // Safety: NVTX passes a NUL-terminated string.
            unsafe {
                match s {
                    Msg::Ascii(p) => t.push_cstr(p),
                    Msg::Wide(p) => t.push_wide(p),
                    _ => {}
                }
            }
        });
        // Out of slots: handle 0 (null), whose events get an empty message, counted.
        i.map_or(std::ptr::null_mut(), |i| (i + 1) as *mut libc::c_void)
    }

    /// `nvtx[Domain]NameCategoryA/W`.
    pub fn name_category(&self, domain: *const libc::c_void, category: u32, name: Msg) {
        let d = (domain as usize).min(u32::MAX as usize) as u32;
        self.names(&self.categories, d, category, name);
    }

    /// `nvtxNameOsThreadA/W`.
    pub fn name_thread(&self, tid: u32, name: Msg) {
        self.names(&self.threads, tid, 0, name);
    }

    fn names(&self, table: &Names, key: u32, id: u32, name: Msg) {
        table.add(key, id, NAME_LEN, |t| {
            // Safety: NVTX passes a NUL-terminated string.
            unsafe {
                match name {
                    Msg::Ascii(p) => t.push_cstr(p),
                    Msg::Wide(p) => t.push_wide(p),
                    _ => {}
                }
            }
        });
    }

    /// `nvtxDomainResourceCreate`: a distinct non-null handle (resources
    /// name OS objects; the trace has no place for them, so nothing else is
    /// kept).
    pub fn create_resource(&self) -> *mut libc::c_void {
        self.next_resource.fetch_add(1, Relaxed) as usize as *mut libc::c_void
    }

    /// The name of domain `d` (empty for the default domain).
    pub fn domain_name(&self, d: u16) -> &str {
        match (d as usize).checked_sub(1).and_then(|i| self.domains.slots.get(i)) {
            Some(s) => s.get().unwrap_or(""),
            None => "",
        }
    }

    /// The last name given to `category` in domain `d`.
    pub fn category_name(&self, d: u16, category: u32) -> Option<&str> {
        self.categories
            .ready()
            .filter(|(_, s)| s.key.load(Relaxed) == d as u32 && s.id.load(Relaxed) == category)
            .last()
            .and_then(|(_, s)| s.get())
    }

    /// `(thread id, name)` of each named thread (the last name wins).
    pub fn thread_names(&self) -> Vec<(u32, String)> {
        let mut v: Vec<(u32, String)> = Vec::new();
        for (_, s) in self.threads.ready() {
            let (tid, name) = (s.key.load(Relaxed), s.get().unwrap_or("").to_string());
            match v.iter_mut().find(|(t, _)| *t == tid) {
                Some(e) => e.1 = name,
                None => v.push((tid, name)),
            }
        }
        v
    }

    /// Names that found their table full (domains, strings, categories, threads).
    pub fn names_full(&self) -> [u64; 4] {
        [
            self.domains.full.load(Relaxed),
            self.strings.full.load(Relaxed),
            self.categories.full.load(Relaxed),
            self.threads.full.load(Relaxed),
        ]
    }
}

/// `gputrace_mark`'s body: an instant marker in the named domain.
///
/// # Safety
/// `domain` and `message` are null or NUL-terminated.
pub unsafe fn mark(s: &Nvtx, domain: *const libc::c_char, message: *const libc::c_char) -> bool {
    // Safety: the caller's contract.
    let named = !domain.is_null() && unsafe { *domain } != 0;
    let d = if named {
        s.create_domain(Msg::Ascii(domain))
    } else {
        std::ptr::null_mut()
    };
    if !s.live() {
        return false;
    }
    let Some(d) = s.domain(d) else { return false };
    let mut r = Rec::new(RecKind::Mark, d);
    // Safety: the caller's contract.
    unsafe { s.set_msg(&mut r, Msg::Ascii(message)) };
    s.push(r)
}

/// Phases `gputrace_request` takes (`RequestPhase` of the trace format:
/// arrive, scheduled, first token, finish, fail).
pub const REQUEST_PHASES: u32 = 5;

/// `gputrace_request`'s body: one moment of a served request. No string, no
/// allocation: a fixed record into the bounded queue; a full queue counts
/// the mark as lost. False for a phase out of range (not recorded).
/// `time_ns` is `CLOCK_REALTIME` ns (0: now).
pub fn request(s: &Nvtx, id: u64, phase: u32, tokens: u64, time_ns: u64) -> bool {
    if !s.live() || phase >= REQUEST_PHASES {
        return false;
    }
    let mut r = Rec::new(RecKind::Request, 0);
    if time_ns != 0 {
        r.time_ns = time_ns;
    }
    r.range_id = id;
    r.category = phase;
    r.payload = tokens;
    if s.queue.push(r).is_err() {
        s.losses.requests_lost.fetch_add(1, Relaxed);
        return false;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_cuts_at_character_boundaries_and_reads_wide_strings() {
        let mut buf = [0u8; 5];
        let mut t = Text::new(&mut buf);
        let s = c"ab\xc3\xbcc\xff";
        // Safety: a C string literal.
        unsafe { t.push_cstr(s.as_ptr()) };
        assert_eq!((t.len(), t.cut), (5, true), "U+FFFD for the stray byte does not fit");
        assert_eq!(std::str::from_utf8(&buf[..5]).unwrap(), "abüc");
        let mut buf = [0u8; 4];
        let mut t = Text::new(&mut buf);
        let w: Vec<libc::wchar_t> = "aüé\u{1F600}".chars().map(|c| c as libc::wchar_t).chain([0]).collect();
        // Safety: NUL-terminated.
        unsafe { t.push_wide(w.as_ptr()) };
        assert_eq!((t.len(), t.cut), (3, true), "'é' does not fit whole");
        assert_eq!(std::str::from_utf8(&buf[..3]).unwrap(), "aü");
    }

    /// Byte by byte, what `push_cstr` keeps: a valid UTF-8 character whole,
    /// any other byte as one U+FFFD, until one does not fit.
    fn lossy_walk(bytes: &[u8], room: usize) -> (String, bool) {
        let (mut out, mut i) = (String::new(), 0);
        while i < bytes.len() {
            let want = match bytes[i] {
                0..=0x7f => 1,
                0xc2..=0xdf => 2,
                0xe0..=0xef => 3,
                0xf0..=0xf4 => 4,
                _ => 0,
            };
            let c = bytes
                .get(i..i + want.max(1))
                .and_then(|b| std::str::from_utf8(b).ok())
                .filter(|_| want > 0)
                .and_then(|s| s.chars().next());
            let (c, used) = c.map_or((char::REPLACEMENT_CHARACTER, 1), |c| (c, want));
            if out.len() + c.len_utf8() > room {
                return (out, true);
            }
            out.push(c);
            i += used;
        }
        (out, false)
    }

    #[test]
    fn byte_strings_become_text_byte_by_byte_in_any_room() {
        let cases: [&[u8]; 12] = [
            b"plain ascii",
            "Grüße, 世界 \u{1F600}".as_bytes(),
            b"\xff\xfe stray",
            b"\xe2\x82A cut short",
            b"\xe0\x80\x80 overlong",
            b"\xed\xa0\x80 surrogate",
            b"\xf4\x90\x80\x80 past U+10FFFF",
            b"\xc3 \xc3\xa9 \xe2\xc3\xa9",
            b"\xf0\x9f\x98",
            b"\x80\x80\xbf continuation only",
            b"\xc0\xaf\xc1\xbf",
            b"",
        ];
        for bytes in cases {
            let c = std::ffi::CString::new(bytes).unwrap();
            for room in 0..=bytes.len() * 3 + 4 {
                let mut buf = vec![0u8; room];
                let mut t = Text::new(&mut buf);
                // Safety: a NUL-terminated string.
                unsafe { t.push_cstr(c.as_ptr()) };
                let (len, cut) = (t.len(), t.cut);
                let want = lossy_walk(bytes, room);
                assert_eq!(
                    (std::str::from_utf8(&buf[..len]).unwrap(), cut),
                    (want.0.as_str(), want.1),
                    "{bytes:?} in {room}"
                );
            }
        }
    }

    #[test]
    fn request_marks_are_fixed_records_and_a_full_queue_counts_them_lost() {
        let n = Nvtx::new(2);
        assert!(request(&n, 7, 0, 120, 1_000));
        assert!(!request(&n, 7, REQUEST_PHASES, 0, 0), "a phase out of range is not recorded");
        assert!(request(&n, 7, 3, 64, 0));
        assert!(!request(&n, 8, 0, 1, 0), "queue of two is full");
        assert_eq!(n.losses.requests_lost.load(Relaxed), 1);
        assert_eq!(n.losses.queue_full.load(Relaxed), 0, "request losses are their own count");
        let a = n.queue.pop().unwrap();
        assert_eq!(
            (a.kind, a.range_id, a.category, a.payload, a.time_ns),
            (RecKind::Request, 7, 0, 120, 1_000)
        );
        let b = n.queue.pop().unwrap();
        assert_eq!((b.category, b.payload), (3, 64));
        assert!(b.time_ns > 1_000, "0 means now");
    }

    #[test]
    fn domains_strings_and_queue_are_bounded_and_counted() {
        let n = Nvtx::new(2);
        let d1 = n.create_domain(Msg::Ascii(c"io".as_ptr()));
        assert_eq!(d1 as usize, 1);
        assert_eq!(n.create_domain(Msg::Ascii(c"io".as_ptr())), d1, "same name, same handle");
        assert_eq!(n.domain_name(1), "io");
        assert_eq!(n.domain_name(0), "");
        let s = n.register_string(d1, Msg::Ascii(c"hello".as_ptr()));
        n.name_category(d1, 7, Msg::Ascii(c"disk".as_ptr()));
        assert_eq!(n.category_name(1, 7), Some("disk"));
        assert_eq!(n.category_name(0, 7), None);
        // Safety: valid handles and strings.
        unsafe {
            assert_eq!(n.event(RecKind::Push, d1, std::ptr::null(), Msg::Registered(s), 0), 0);
            assert_eq!(n.event(RecKind::Push, d1, std::ptr::null(), Msg::Ascii(c"x".as_ptr()), 0), 1);
            n.event(RecKind::Mark, std::ptr::null(), std::ptr::null(), Msg::Ascii(c"x".as_ptr()), 0);
            assert_eq!(n.event(RecKind::Pop, d1, std::ptr::null(), Msg::None, 0), 1);
            assert_eq!(n.event(RecKind::Pop, d1, std::ptr::null(), Msg::None, 0), 0);
            assert_eq!(n.event(RecKind::Pop, d1, std::ptr::null(), Msg::None, 0), -1);
            assert_eq!(n.event(RecKind::Mark, 9999 as *const _, std::ptr::null(), Msg::None, 0), -1);
        }
        assert_eq!(n.losses.queue_full.load(Relaxed), 4, "a queue of 2 took 2 of 6");
        assert_eq!(n.losses.no_domain.load(Relaxed), 1);
        let r = n.queue.pop().unwrap();
        assert_eq!((r.kind, r.domain, r.text()), (RecKind::Push, 1, "hello"));
        for i in 0..MAX_DOMAINS + 3 {
            let name = std::ffi::CString::new(format!("d{i}")).unwrap();
            n.create_domain(Msg::Ascii(name.as_ptr()));
        }
        assert_eq!(n.names_full()[0], 4, "255 more fit after io");
    }

    #[test]
    fn names_added_concurrently_are_read_whole() {
        // A slot's bytes are written only by the thread whose atomic add
        // claimed it, and read only once it is ready: were two writers ever
        // to share a slot, or a reader see one half written, a name would
        // not match its key.
        const THREADS: u32 = 8;
        const EACH: u32 = 200;
        let names = Names::new((THREADS * EACH) as usize);
        let check = |names: &Names| {
            let mut seen = 0;
            for (_, slot) in names.ready() {
                let key = slot.key.load(Relaxed);
                assert_eq!(slot.get(), Some(format!("name {key}").as_str()));
                assert_eq!(slot.id.load(Relaxed), key + 1);
                seen += 1;
            }
            seen
        };
        std::thread::scope(|sc| {
            for t in 0..THREADS {
                let names = &names;
                sc.spawn(move || {
                    for i in 0..EACH {
                        let key = t * EACH + i;
                        let added = names.add(key, key + 1, MSG_LEN, |text| {
                            for c in format!("name {key}").chars() {
                                std::thread::yield_now();
                                text.push(c);
                            }
                        });
                        assert!(added.is_some());
                    }
                });
            }
            // Read while they write.
            sc.spawn(|| {
                for _ in 0..50 {
                    check(&names);
                    std::thread::yield_now();
                }
            });
        });
        assert_eq!(check(&names), THREADS * EACH);
        let mut keys: Vec<u32> = names.ready().map(|(_, s)| s.key.load(Relaxed)).collect();
        keys.sort_unstable();
        assert!(keys.iter().copied().eq(0..THREADS * EACH), "names lost or doubled");
        assert_eq!(names.full.load(Relaxed), 0);
    }
}
