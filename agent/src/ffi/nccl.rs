//! The exported `ncclProfiler_v1` … `ncclProfiler_v6` tables and their
//! entry points: each translates its version's descriptor (layouts from the
//! committed `nccl-sys` bindings) into a [`Descr`] and calls the shared
//! code in `nccl/` (the recorder). The first `init` also makes sure a
//! capture session runs (this part of the entry layer sits above both
//! `nccl` and `session`).
//!
//! Every entry point catches panics and returns `ncclSuccess`: NCCL never
//! sees an error from gputrace. A NULL out-pointer or descriptor is a
//! malformed call: the plugin turns itself off with one line.

use crate::nccl::{copy_cstr, enabled_by_env, now_ns, state, state_or_init, ty, CommInfo, Descr, Nccl, COMM_NAME_LEN, NAME_LEN};
use nccl_sys as sys;
use std::ffi::{c_char, c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

const SUCCESS: sys::ncclResult_t = sys::ncclSuccess;

/// Events recorded with the v5/v6 interfaces (API brackets and kernel
/// launches give the collective → kernel link; see `link.rs`).
const MASK_V5: u64 = ty::GROUP_API | ty::COLL_API | ty::P2P_API | ty::KERNEL_LAUNCH | ty::COLL | ty::P2P;
/// v6 adds copy-engine collectives.
const MASK_V6: u64 = MASK_V5 | ty::CE_COLL;
/// v1–v4 have no API or launch events: collectives and point-to-point only.
const MASK_V1: u64 = ty::COLL | ty::P2P;

/// Run `f` with the plugin state, catching panics (which turn it off).
fn guarded(f: impl FnOnce(&'static Nccl)) -> sys::ncclResult_t {
    let Some(st) = state() else { return SUCCESS };
    if catch_unwind(AssertUnwindSafe(|| f(st))).is_err() {
        st.disable("internal error in the plugin");
    }
    SUCCESS
}

/// The shared part of every version's `init`.
///
/// # Safety
/// `ctx` and `mask` are NCCL's out-pointers (checked for NULL); `name` is
/// NULL or a C string.
unsafe fn init_common(ctx: *mut *mut c_void, mask: *mut c_int, mut info: CommInfo, name: *const c_char, wanted: u64) -> sys::ncclResult_t {
    let r = catch_unwind(AssertUnwindSafe(|| {
        if ctx.is_null() || mask.is_null() {
            let st = state_or_init();
            st.disable("init was called with a NULL context or mask pointer");
            return;
        }
        // Safety: checked non-null above.
        unsafe {
            *ctx = std::ptr::null_mut();
            *mask = 0;
        }
        if !enabled_by_env() {
            return;
        }
        let st = state_or_init();
        // The first communicator: make sure something writes the trace.
        if let Err(msg) = crate::session::start_nccl_only(super::HOOKS) {
            st.disable(&msg.to_string());
            return;
        }
        // Safety: NULL or NCCL's NUL-terminated communicator name.
        info.name = unsafe { copy_cstr(name) };
        info.created_ns = now_ns();
        let (c, m) = st.init(info, wanted);
        // Safety: checked non-null above.
        unsafe {
            *ctx = c;
            *mask = m as c_int;
        }
    }));
    if r.is_err() {
        if let Some(st) = state() {
            st.disable("internal error in init");
        }
    }
    SUCCESS
}

fn comm(id: u64, nodes: c_int, nranks: c_int, rank: c_int, version: u32) -> CommInfo {
    CommInfo {
        id,
        rank,
        nranks,
        nodes,
        name: [0; COMM_NAME_LEN],
        version,
        created_ns: 0,
    }
}

/// The fields every version's descriptor has in common.
macro_rules! head {
    ($e:expr) => {
        Descr {
            ty: u64::from($e.type_),
            parent: $e.parentObj,
            rank: $e.rank,
            ..Default::default()
        }
    };
}

/// The shared part of every version's `startEvent`. `descr` translates the
/// version's descriptor (`None`: NULL); it runs inside the unwind guard.
fn start_common(ctx: *mut c_void, handle: *mut *mut c_void, descr: impl FnOnce() -> Option<Descr>) -> sys::ncclResult_t {
    if !handle.is_null() {
        // Untracked unless set below, even if no `init` ever ran.
        // Safety: NCCL's out-pointer, checked non-null.
        unsafe { *handle = std::ptr::null_mut() };
    }
    guarded(|st| {
        if handle.is_null() {
            st.disable("startEvent was called with a NULL handle pointer");
            return;
        }
        let Some(d) = descr() else {
            st.disable("startEvent was called with a NULL descriptor");
            return;
        };
        let h = st.start(ctx, &d);
        // Safety: as above.
        unsafe { *handle = h };
    })
}

/// `recordEventState` of every version (they differ only in the state
/// arguments' type, which gputrace does not read).
// Safety (the caller's contract): NCCL passes its profiler interface's
// arguments for this version; pointers are NULL (checked) or valid for the call.
unsafe extern "C" fn record_state<A>(h: *mut c_void, _s: sys::ncclProfilerEventState_t, _a: *mut A) -> sys::ncclResult_t {
    guarded(|st| st.state_change(h))
}

// Safety (the caller's contract): NCCL passes its profiler interface's
// arguments for this version; pointers are NULL (checked) or valid for the call.
unsafe extern "C" fn stop_event(handle: *mut c_void) -> sys::ncclResult_t {
    guarded(|st| st.stop(handle))
}

// Safety (the caller's contract): NCCL passes its profiler interface's
// arguments for this version; pointers are NULL (checked) or valid for the call.
unsafe extern "C" fn finalize(_ctx: *mut c_void) -> sys::ncclResult_t {
    SUCCESS
}

/// `ncclFunc_t` in NCCL 2.23 (v1 passes codes, not names).
fn func_v1(code: u8) -> &'static [u8] {
    match code {
        0 => b"Broadcast",
        1 => b"Reduce",
        2 => b"AllGather",
        3 => b"ReduceScatter",
        4 => b"AllReduce",
        5 => b"SendRecv",
        6 => b"Send",
        7 => b"Recv",
        _ => b"Unknown",
    }
}

/// `ncclDataType_t` in NCCL 2.23.
fn datatype_v1(code: u8) -> &'static [u8] {
    match code {
        0 => b"ncclInt8",
        1 => b"ncclUint8",
        2 => b"ncclInt32",
        3 => b"ncclUint32",
        4 => b"ncclInt64",
        5 => b"ncclUint64",
        6 => b"ncclFloat16",
        7 => b"ncclFloat32",
        8 => b"ncclFloat64",
        9 => b"ncclBfloat16",
        10 => b"ncclFloat8e4m3",
        11 => b"ncclFloat8e5m2",
        _ => b"Unknown",
    }
}

fn algo_v1(code: u8) -> &'static [u8] {
    match code {
        0 => b"TREE",
        1 => b"RING",
        2 => b"COLLNET_DIRECT",
        3 => b"COLLNET_CHAIN",
        4 => b"NVLS",
        5 => b"NVLS_TREE",
        6 => b"PAT",
        _ => b"",
    }
}

fn proto_v1(code: u8) -> &'static [u8] {
    match code {
        0 => b"LL",
        1 => b"LL128",
        2 => b"Simple",
        _ => b"",
    }
}

fn name_of(b: &[u8]) -> [u8; NAME_LEN] {
    let mut out = [0u8; NAME_LEN];
    let n = b.len().min(NAME_LEN);
    out[..n].copy_from_slice(&b[..n]);
    out
}

/// Copy one of NCCL's strings (it passes NULL or static NUL-terminated
/// strings, e.g. `ncclFuncToString`'s).
fn cstr(p: *const c_char) -> [u8; NAME_LEN] {
    // Safety: see above.
    unsafe { copy_cstr::<NAME_LEN>(p) }
}

/// `init` of v1–v3 (NCCL 2.23–2.26), which tell nothing of the communicator:
/// its hash comes with each descriptor.
// Safety (the caller's contract): NCCL passes its profiler interface's
// arguments for this version; pointers are NULL (checked) or valid for the call.
unsafe extern "C" fn init_legacy<const V: u32>(ctx: *mut *mut c_void, mask: *mut c_int) -> sys::ncclResult_t {
    // Safety: forwarded NCCL pointers.
    unsafe { init_common(ctx, mask, comm(0, 0, 0, -1, V), std::ptr::null(), MASK_V1) }
}

// ---------------------------------------------------------------- v1 (2.23)

// Safety (the caller's contract): NCCL passes its profiler interface's
// arguments for this version; pointers are NULL (checked) or valid for the call.
unsafe extern "C" fn start_v1(ctx: *mut c_void, h: *mut *mut c_void, e: *mut sys::ncclProfilerEventDescr_v1_t) -> sys::ncclResult_t {
    // Safety: NULL or NCCL's descriptor, read only for this call.
    let d = move || {
        unsafe { e.as_ref() }.map(|e| {
            let mut d = head!(e);
            // Safety: the union member matching `type`.
            unsafe {
                if d.ty == ty::COLL {
                    let c = &e.__bindgen_anon_1.coll;
                    d.comm_hash = c.commHash;
                    d.seq = c.seqNumber;
                    d.func = name_of(func_v1(c.func));
                    d.datatype = name_of(datatype_v1(c.datatype));
                    d.algo = name_of(algo_v1(c.algo));
                    d.proto = name_of(proto_v1(c.proto));
                    d.count = c.count as u64;
                    d.bytes = c.trafficBytes as u64;
                    d.root = c.root;
                    d.channels = c.nMaxChannels as u32;
                } else if d.ty == ty::P2P {
                    let p = &e.__bindgen_anon_1.p2p;
                    d.comm_hash = p.commHash;
                    d.func = name_of(func_v1(p.func));
                    d.datatype = name_of(datatype_v1(p.datatype));
                    d.count = p.count as u64;
                    d.root = p.peer;
                }
            }
            d
        })
    };
    start_common(ctx, h, d)
}

// ------------------------------------------ v2 (2.24–2.25) and v3 (2.26)

/// `startEvent` of v2 and v3 (NCCL 2.24–2.26): strings, and the hash in each
/// descriptor; v2 also reports the bytes (`trafficBytes`).
macro_rules! start_v23 {
    ($name:ident, $descr:ty, |$c:ident, $d:ident| $extra:block) => {
        // Safety (the caller's contract): NCCL passes its profiler interface's
        // arguments for this version; pointers are NULL (checked) or valid for the call.
        unsafe extern "C" fn $name(ctx: *mut c_void, h: *mut *mut c_void, e: *mut $descr) -> sys::ncclResult_t {
            // Safety: NULL or NCCL's descriptor, read only for this call.
            let d = move || {
                unsafe { e.as_ref() }.map(|e| {
                    let mut $d = head!(e);
                    // Safety: the union member matching `type`.
                    unsafe {
                        if $d.ty == ty::COLL {
                            let $c = &e.__bindgen_anon_1.coll;
                            $d.comm_hash = $c.commHash;
                            $d.seq = $c.seqNumber;
                            $d.func = cstr($c.func);
                            $d.datatype = cstr($c.datatype);
                            $d.algo = cstr($c.algo);
                            $d.proto = cstr($c.proto);
                            $d.count = $c.count as u64;
                            $d.root = $c.root;
                            $d.channels = $c.nMaxChannels as u32;
                            $extra
                        } else if $d.ty == ty::P2P {
                            let p = &e.__bindgen_anon_1.p2p;
                            $d.comm_hash = p.commHash;
                            $d.func = cstr(p.func);
                            $d.datatype = cstr(p.datatype);
                            $d.count = p.count as u64;
                            $d.root = p.peer;
                        }
                    }
                    $d
                })
            };
            start_common(ctx, h, d)
        }
    };
}

start_v23!(start_v2, sys::ncclProfilerEventDescr_v2_t, |c, d| {
    d.bytes = c.trafficBytes as u64;
});
start_v23!(start_v3, sys::ncclProfilerEventDescr_v3_t, |c, d| {});

// ---------------------------------------------------------------- v4 (2.27)

#[allow(clippy::too_many_arguments)]
// Safety (the caller's contract): NCCL passes its profiler interface's
// arguments for this version; pointers are NULL (checked) or valid for the call.
unsafe extern "C" fn init_v4(
    ctx: *mut *mut c_void,
    mask: *mut c_int,
    name: *const c_char,
    hash: u64,
    nodes: c_int,
    nranks: c_int,
    rank: c_int,
    _log: sys::ncclDebugLogger_t,
) -> sys::ncclResult_t {
    // Safety: forwarded NCCL pointers.
    unsafe { init_common(ctx, mask, comm(hash, nodes, nranks, rank, 4), name, MASK_V1) }
}

// Safety (the caller's contract): NCCL passes its profiler interface's
// arguments for this version; pointers are NULL (checked) or valid for the call.
unsafe extern "C" fn start_v4(ctx: *mut c_void, h: *mut *mut c_void, e: *mut sys::ncclProfilerEventDescr_v4_t) -> sys::ncclResult_t {
    // Safety: NULL or NCCL's descriptor, read only for this call.
    let d = move || {
        unsafe { e.as_ref() }.map(|e| {
            let mut d = head!(e);
            // Safety: the union member matching `type`.
            unsafe {
                if d.ty == ty::COLL {
                    let c = &e.__bindgen_anon_1.coll;
                    d.seq = c.seqNumber;
                    d.func = cstr(c.func);
                    d.datatype = cstr(c.datatype);
                    d.algo = cstr(c.algo);
                    d.proto = cstr(c.proto);
                    d.count = c.count as u64;
                    d.root = c.root;
                    d.channels = c.nChannels as u32;
                } else if d.ty == ty::P2P {
                    let p = &e.__bindgen_anon_1.p2p;
                    d.func = cstr(p.func);
                    d.datatype = cstr(p.datatype);
                    d.count = p.count as u64;
                    d.root = p.peer;
                    d.channels = p.nChannels as u32;
                }
            }
            d
        })
    };
    start_common(ctx, h, d)
}

// ------------------------------------------------------- v5 (2.28) and v6

/// `init` of v5 and v6 (NCCL 2.28+): the communicator id comes before the mask.
#[allow(clippy::too_many_arguments)]
// Safety (the caller's contract): NCCL passes its profiler interface's
// arguments for this version; pointers are NULL (checked) or valid for the call.
unsafe extern "C" fn init_v56<const V: u32>(
    ctx: *mut *mut c_void,
    id: u64,
    mask: *mut c_int,
    name: *const c_char,
    nodes: c_int,
    nranks: c_int,
    rank: c_int,
    _log: sys::ncclDebugLogger_t,
) -> sys::ncclResult_t {
    let wanted = if V >= 6 { MASK_V6 } else { MASK_V5 };
    // Safety: forwarded NCCL pointers.
    unsafe { init_common(ctx, mask, comm(id, nodes, nranks, rank, V), name, wanted) }
}

/// v5 and v6 share every member but the CE ones; one macro reads both.
macro_rules! descr_v5 {
    ($e:expr, $d:ident) => {
        // Safety: the union member matching `type`.
        unsafe {
            let u = &$e.__bindgen_anon_1;
            match $d.ty {
                ty::GROUP_API => $d.graph_captured = u.groupApi.graphCaptured,
                ty::COLL_API => $d.graph_captured = u.collApi.graphCaptured,
                ty::P2P_API => $d.graph_captured = u.p2pApi.graphCaptured,
                ty::COLL => {
                    let c = &u.coll;
                    $d.seq = c.seqNumber;
                    $d.func = cstr(c.func);
                    $d.datatype = cstr(c.datatype);
                    $d.algo = cstr(c.algo);
                    $d.proto = cstr(c.proto);
                    $d.count = c.count as u64;
                    $d.root = c.root;
                    $d.channels = c.nChannels as u32;
                }
                ty::P2P => {
                    let p = &u.p2p;
                    $d.func = cstr(p.func);
                    $d.datatype = cstr(p.datatype);
                    $d.count = p.count as u64;
                    $d.root = p.peer;
                    $d.channels = p.nChannels as u32;
                }
                _ => {}
            }
        }
    };
}

// Safety (the caller's contract): NCCL passes its profiler interface's
// arguments for this version; pointers are NULL (checked) or valid for the call.
unsafe extern "C" fn start_v5(ctx: *mut c_void, h: *mut *mut c_void, e: *mut sys::ncclProfilerEventDescr_v5_t) -> sys::ncclResult_t {
    // Safety: NULL or NCCL's descriptor, read only for this call.
    let d = move || {
        unsafe { e.as_ref() }.map(|e| {
            let mut d = head!(e);
            descr_v5!(e, d);
            d
        })
    };
    start_common(ctx, h, d)
}

// Safety (the caller's contract): NCCL passes its profiler interface's
// arguments for this version; pointers are NULL (checked) or valid for the call.
unsafe extern "C" fn start_v6(ctx: *mut c_void, h: *mut *mut c_void, e: *mut sys::ncclProfilerEventDescr_v6_t) -> sys::ncclResult_t {
    // Safety: NULL or NCCL's descriptor, read only for this call.
    let d = move || {
        unsafe { e.as_ref() }.map(|e| {
            let mut d = head!(e);
            descr_v5!(e, d);
            if d.ty == ty::CE_COLL {
                // Safety: the union member matching `type`.
                let c = unsafe { &e.__bindgen_anon_1.ceColl };
                d.seq = c.seqNumber;
                d.func = cstr(c.func);
                d.datatype = cstr(c.datatype);
                d.count = c.count as u64;
                d.root = c.root;
            }
            d
        })
    };
    start_common(ctx, h, d)
}

const NAME: *const c_char = c"gputrace".as_ptr();

/// One exported table: the symbol NCCL looks up for that interface version.
macro_rules! table {
    ($(#[$doc:meta])* $sym:ident: $ty:ident = $init:expr, $start:expr, $args:ty) => {
        $(#[$doc])*
        #[no_mangle]
        pub static $sym: sys::$ty = sys::$ty {
            name: NAME,
            init: Some($init),
            startEvent: Some($start),
            stopEvent: Some(stop_event),
            recordEventState: Some(record_state::<$args>),
            finalize: Some(finalize),
        };
    };
}

table!(
    /// NCCL 2.23.
    ncclProfiler_v1: ncclProfiler_v1_t = init_legacy::<1>, start_v1, sys::ncclProfilerEventStateArgs_v1_t
);
table!(
    /// NCCL 2.24–2.25.
    ncclProfiler_v2: ncclProfiler_v2_t = init_legacy::<2>, start_v2, sys::ncclProfilerEventStateArgs_v2_t
);
table!(
    /// NCCL 2.26.
    ncclProfiler_v3: ncclProfiler_v3_t = init_legacy::<3>, start_v3, sys::ncclProfilerEventStateArgs_v3_t
);
table!(
    /// NCCL 2.27.
    ncclProfiler_v4: ncclProfiler_v4_t = init_v4, start_v4, sys::ncclProfilerEventStateArgs_v4_t
);
table!(
    /// NCCL 2.28.
    ncclProfiler_v5: ncclProfiler_v5_t = init_v56::<5>, start_v5, sys::ncclProfilerEventStateArgs_v5_t
);
table!(
    /// NCCL 2.29 and later (looked up first).
    ncclProfiler_v6: ncclProfiler_v6_t = init_v56::<6>, start_v6, sys::ncclProfilerEventStateArgs_v6_t
);
