//! The agent as NCCL's profiler plugin, driven the way NCCL drives it.
//!
//! Each scenario runs in a child process (this test binary re-executed with
//! `GPUTRACE_TEST_NCCL=<scenario>`), which plays NCCL: it `dlopen`s the
//! library named by `NCCL_PROFILER_PLUGIN` (as NCCL does; `gputrace run`
//! sets it), looks up `ncclProfiler_vN`, and calls `init`, `startEvent`,
//! `stopEvent`, `recordEventState` and `finalize` with the exact descriptor
//! layouts of that version (the committed `nccl-sys` bindings), from several
//! threads. No CUDA is loaded, so the agent records an NCCL-only trace; the
//! parent then checks that every collective is in it with the right fields.
//!
//! The agent library must be built first (`cargo build --workspace`).

use gputrace_format::*;
use nccl_sys as sys;
use std::ffi::{c_int, c_void, CString};
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

const CHILD_ENV: &str = "GPUTRACE_TEST_NCCL";
const THREADS: usize = 4;
const PER_THREAD: u64 = 300;
const COMM_A: u64 = 0xa11c_0de5_0000_0001;
const COMM_B: u64 = 0xb22c_0de5_0000_0002;

mod common;
use common::agent_lib;

// ------------------------------------------------------------ the child

/// The child's entry: a test that does nothing unless re-executed by a
/// parent test with `GPUTRACE_TEST_NCCL` set.
#[test]
fn nccl_child() {
    let Ok(scenario) = std::env::var(CHILD_ENV) else { return };
    let code = play(&scenario);
    // `exit` runs the agent's atexit handler, which finishes the trace.
    std::process::exit(code);
}

struct Plugin {
    _lib: libloading::Library,
    table: *const c_void,
}

fn load(symbol: &str) -> Plugin {
    let path = std::env::var("NCCL_PROFILER_PLUGIN").expect("NCCL_PROFILER_PLUGIN is not set in the traced job");
    // Safety: loading the agent, whose initializers do nothing.
    let lib = unsafe { libloading::Library::new(&path) }.expect("dlopen the plugin");
    let name = CString::new(symbol).unwrap();
    // Safety: the symbol is a data object (the function table).
    let table = unsafe { lib.get::<*const c_void>(name.as_bytes_with_nul()) }.expect("plugin table symbol");
    let table = *table;
    Plugin { _lib: lib, table }
}

/// Handles are opaque pointers; they cross threads in NCCL too.
#[derive(Clone, Copy)]
struct H(*mut c_void);
// Safety: an opaque token.
unsafe impl Send for H {}
// Safety: an opaque token.
unsafe impl std::marker::Sync for H {}

fn play(scenario: &str) -> i32 {
    match scenario {
        "v5" => play_v5(false),
        "v6" => play_v5(true),
        "v4" => play_v4(),
        "v1" => play_v1(),
        "v2" => play_v2(),
        "v3" => play_v3(),
        "malformed" => play_malformed(),
        "overflow" => play_overflow(),
        "fork" => play_fork(),
        "env" => {
            println!("NCCL_PROFILER_PLUGIN={}", std::env::var("NCCL_PROFILER_PLUGIN").unwrap_or_default());
            0
        }
        other => panic!("unknown scenario {other}"),
    }
}

fn ok(r: sys::ncclResult_t) {
    assert_eq!(r, sys::ncclSuccess, "the plugin returned an error to NCCL");
}

/// The v5/v6 event sequence of one `ncclAllReduce` (ungrouped: NCCL opens
/// an implicit group), as `src/enqueue.cc` and `src/plugin/profiler.cc` emit
/// it: GroupApi → CollApi → KernelLaunch (around cuLaunchKernelEx) → API
/// stops → Coll (from hostStreamPlanTask) with the CollApi as parent.
fn play_v5(v6: bool) -> i32 {
    macro_rules! drive {
        ($table:ty, $descr:ty, $sym:literal) => {{
            let p = load($sym);
            // Safety: the symbol is this version's table.
            let t: &$table = unsafe { &*(p.table as *const $table) };
            let (init, start, stop, state, fin) = (
                t.init.unwrap(),
                t.startEvent.unwrap(),
                t.stopEvent.unwrap(),
                t.recordEventState.unwrap(),
                t.finalize.unwrap(),
            );
            let mut ctx_a: *mut c_void = std::ptr::null_mut();
            let mut ctx_b: *mut c_void = std::ptr::null_mut();
            let mut mask: c_int = 0;
            // Safety: valid out-pointers and C strings, as NCCL passes them.
            unsafe {
                ok(init(&mut ctx_a, COMM_A, &mut mask, c"dp_group".as_ptr(), 2, 4, 1, None));
                assert_ne!(mask & sys::ncclProfileKernelLaunch as c_int, 0, "v5 mask asks for KernelLaunch");
                assert_ne!(mask & sys::ncclProfileColl as c_int, 0);
                ok(init(&mut ctx_b, COMM_B, &mut mask, c"tp_group".as_ptr(), 1, 2, 0, None));
            }
            let (ca, cb) = (H(ctx_a), H(ctx_b));
            let seq = AtomicU64::new(0);
            std::thread::scope(|sc| {
                for th in 0..THREADS {
                    let seq = &seq;
                    sc.spawn(move || {
                        let (a, b): (H, H) = (ca, cb); // capture the Send wrappers whole
                        let (ctx_a, ctx_b) = (a.0, b.0);
                        let mk = |ty: u32, parent: *mut c_void| {
                            let mut d: $descr = unsafe { std::mem::zeroed() };
                            d.type_ = ty as u64;
                            d.parentObj = parent;
                            d.rank = 1;
                            d
                        };
                        for i in 0..PER_THREAD {
                            // Safety: the descriptors are valid for each call.
                            unsafe {
                                let mut g = std::ptr::null_mut();
                                ok(start(ctx_a, &mut g, &mut mk(sys::ncclProfileGroupApi, std::ptr::null_mut())));
                                let mut d = mk(sys::ncclProfileCollApi, g);
                                d.__bindgen_anon_1.collApi.func = c"AllReduce".as_ptr();
                                d.__bindgen_anon_1.collApi.count = 1000 + i as usize;
                                d.__bindgen_anon_1.collApi.datatype = c"ncclBfloat16".as_ptr();
                                d.__bindgen_anon_1.collApi.root = -1;
                                let mut api = std::ptr::null_mut();
                                ok(start(ctx_a, &mut api, &mut d));
                                let mut kl = std::ptr::null_mut();
                                let mut d = mk(sys::ncclProfileKernelLaunch, g);
                                d.__bindgen_anon_1.kernelLaunch.stream = 0x5000 as *mut c_void;
                                ok(start(ctx_a, &mut kl, &mut d));
                                ok(stop(kl));
                                ok(stop(api));
                                ok(stop(g));
                                // A state change on a group handle (NCCL sends GroupApi states).
                                ok(state(g, sys::ncclProfilerGroupEndApiStart, std::ptr::null_mut()));
                                let mut d = mk(sys::ncclProfileColl, api);
                                let c = &mut d.__bindgen_anon_1.coll;
                                c.seqNumber = seq.fetch_add(1, Relaxed);
                                c.func = c"AllReduce".as_ptr();
                                c.count = 1000 + i as usize;
                                c.root = -1;
                                c.datatype = c"ncclBfloat16".as_ptr();
                                c.nChannels = 8;
                                c.nWarps = 16;
                                c.algo = c"RING".as_ptr();
                                c.proto = c"LL".as_ptr();
                                let mut coll = std::ptr::null_mut();
                                ok(start(ctx_a, &mut coll, &mut d));
                                assert!(!coll.is_null(), "collectives are tracked");
                                // Events gputrace does not record get a NULL handle.
                                let mut px = std::ptr::null_mut();
                                let mut d = mk(sys::ncclProfileProxyOp, coll);
                                ok(start(ctx_a, &mut px, &mut d));
                                assert!(px.is_null(), "untracked event types get a NULL handle");
                                ok(stop(coll));
                                // Point-to-point on the second communicator.
                                if th == 0 && i < 50 {
                                    for (f, peer) in [(c"Send", 1), (c"Recv", 1)] {
                                        let mut d = mk(sys::ncclProfileP2p, std::ptr::null_mut());
                                        d.rank = 0;
                                        let p = &mut d.__bindgen_anon_1.p2p;
                                        p.func = f.as_ptr();
                                        p.count = 4096;
                                        p.datatype = c"ncclFloat32".as_ptr();
                                        p.peer = peer;
                                        p.nChannels = 2;
                                        let mut h = std::ptr::null_mut();
                                        ok(start(ctx_b, &mut h, &mut d));
                                        ok(stop(h));
                                    }
                                }
                            }
                        }
                    });
                }
            });
            // Safety: the contexts NCCL got from init.
            unsafe {
                ok(fin(ctx_a));
                ok(fin(ctx_b));
            }
        }};
    }
    if v6 {
        drive!(sys::ncclProfiler_v6_t, sys::ncclProfilerEventDescr_v6_t, "ncclProfiler_v6");
    } else {
        drive!(sys::ncclProfiler_v5_t, sys::ncclProfilerEventDescr_v5_t, "ncclProfiler_v5");
    }
    0
}

/// NCCL 2.27: the communicator hash comes with `init`; no API events.
fn play_v4() -> i32 {
    let p = load("ncclProfiler_v4");
    // Safety: the symbol is the v4 table.
    let t: &sys::ncclProfiler_v4_t = unsafe { &*(p.table as *const sys::ncclProfiler_v4_t) };
    let mut ctx = std::ptr::null_mut();
    let mut mask: c_int = 0;
    // Safety: as NCCL calls it.
    unsafe {
        ok(t.init.unwrap()(&mut ctx, &mut mask, c"world".as_ptr(), COMM_A, 1, 8, 3, None));
        assert_eq!(mask & sys::ncclProfileKernelLaunch as c_int, 0, "v4 has no KernelLaunch events");
        for i in 0..100u64 {
            let mut g = std::ptr::null_mut();
            let mut d: sys::ncclProfilerEventDescr_v4_t = std::mem::zeroed();
            d.type_ = sys::ncclProfileGroup as u8;
            ok(t.startEvent.unwrap()(ctx, &mut g, &mut d));
            let mut d: sys::ncclProfilerEventDescr_v4_t = std::mem::zeroed();
            d.type_ = sys::ncclProfileColl as u8;
            d.parentObj = g;
            d.rank = 3;
            let c = &mut d.__bindgen_anon_1.coll;
            c.seqNumber = i;
            c.func = c"AllGather".as_ptr();
            c.count = 256;
            c.root = -1;
            c.datatype = c"ncclFloat32".as_ptr();
            c.nChannels = 4;
            c.algo = c"RING".as_ptr();
            c.proto = c"Simple".as_ptr();
            let mut h = std::ptr::null_mut();
            ok(t.startEvent.unwrap()(ctx, &mut h, &mut d));
            ok(t.stopEvent.unwrap()(h));
            ok(t.stopEvent.unwrap()(g));
        }
        ok(t.finalize.unwrap()(ctx));
    }
    0
}

/// NCCL 2.23: codes instead of strings; the hash is in each descriptor.
fn play_v1() -> i32 {
    let p = load("ncclProfiler_v1");
    // Safety: the symbol is the v1 table.
    let t: &sys::ncclProfiler_v1_t = unsafe { &*(p.table as *const sys::ncclProfiler_v1_t) };
    let mut ctx = std::ptr::null_mut();
    let mut mask: c_int = 0;
    // Safety: as NCCL calls it.
    unsafe {
        ok(t.init.unwrap()(&mut ctx, &mut mask));
        for i in 0..50u64 {
            let mut d: sys::ncclProfilerEventDescr_v1_t = std::mem::zeroed();
            d.type_ = sys::ncclProfileColl as u8;
            d.rank = 2;
            let c = &mut d.__bindgen_anon_1.coll;
            c.commHash = COMM_B;
            c.seqNumber = i;
            c.func = 3; // ReduceScatter
            c.count = 512;
            c.root = -1;
            c.datatype = 9; // bf16
            c.trafficBytes = 4096;
            c.nMaxChannels = 2;
            c.algo = 1; // RING
            c.proto = 2; // Simple
            let mut h = std::ptr::null_mut();
            ok(t.startEvent.unwrap()(ctx, &mut h, &mut d));
            ok(t.stopEvent.unwrap()(h));
        }
        ok(t.finalize.unwrap()(ctx));
    }
    0
}

/// NCCL 2.24–2.25: strings, hash in the descriptor, trafficBytes.
fn play_v2() -> i32 {
    let p = load("ncclProfiler_v2");
    // Safety: the symbol is the v2 table.
    let t: &sys::ncclProfiler_v2_t = unsafe { &*(p.table as *const sys::ncclProfiler_v2_t) };
    let mut ctx = std::ptr::null_mut();
    let mut mask: c_int = 0;
    // Safety: as NCCL calls it.
    unsafe {
        ok(t.init.unwrap()(&mut ctx, &mut mask));
        for i in 0..20u64 {
            let mut d: sys::ncclProfilerEventDescr_v2_t = std::mem::zeroed();
            d.type_ = sys::ncclProfileColl as u8;
            d.rank = 0;
            let c = &mut d.__bindgen_anon_1.coll;
            c.commHash = COMM_A;
            c.seqNumber = i;
            c.func = c"Broadcast".as_ptr();
            c.count = 100;
            c.root = 0;
            c.datatype = c"ncclInt8".as_ptr();
            c.trafficBytes = 100;
            c.algo = c"TREE".as_ptr();
            c.proto = c"LL128".as_ptr();
            let mut h = std::ptr::null_mut();
            ok(t.startEvent.unwrap()(ctx, &mut h, &mut d));
            ok(t.stopEvent.unwrap()(h));
        }
    }
    0
}

/// NCCL 2.26: like v2 without the bytes (gputrace computes them).
fn play_v3() -> i32 {
    let p = load("ncclProfiler_v3");
    // Safety: the symbol is the v3 table.
    let t: &sys::ncclProfiler_v3_t = unsafe { &*(p.table as *const sys::ncclProfiler_v3_t) };
    let mut ctx = std::ptr::null_mut();
    let mut mask: c_int = 0;
    // Safety: as NCCL calls it.
    unsafe {
        ok(t.init.unwrap()(&mut ctx, &mut mask));
        for i in 0..10u64 {
            let mut d: sys::ncclProfilerEventDescr_v3_t = std::mem::zeroed();
            d.type_ = sys::ncclProfileColl as u8;
            d.rank = 1;
            let c = &mut d.__bindgen_anon_1.coll;
            c.commHash = COMM_B;
            c.seqNumber = i;
            c.func = c"AllReduce".as_ptr();
            c.count = 100;
            c.root = -1;
            c.datatype = c"ncclFloat32".as_ptr();
            c.nMaxChannels = 3;
            c.algo = c"NVLS".as_ptr();
            c.proto = c"Simple".as_ptr();
            let mut h = std::ptr::null_mut();
            ok(t.startEvent.unwrap()(ctx, &mut h, &mut d));
            ok(t.stopEvent.unwrap()(h));
        }
    }
    0
}

fn v5_coll(ctx: *mut c_void, t: &sys::ncclProfiler_v5_t, seq: u64) -> *mut c_void {
    // Safety: as NCCL calls it.
    unsafe {
        let mut d: sys::ncclProfilerEventDescr_v5_t = std::mem::zeroed();
        d.type_ = sys::ncclProfileColl as u64;
        let c = &mut d.__bindgen_anon_1.coll;
        c.seqNumber = seq;
        c.func = c"AllReduce".as_ptr();
        c.count = 8;
        c.datatype = c"ncclFloat32".as_ptr();
        let mut h = std::ptr::null_mut();
        ok(t.startEvent.unwrap()(ctx, &mut h, &mut d));
        h
    }
}

/// A handle gputrace never gave out, then a NULL descriptor: the plugin
/// turns itself off with one line, keeps answering ncclSuccess, and counts
/// what it no longer records.
fn play_malformed() -> i32 {
    let p = load("ncclProfiler_v5");
    // Safety: the symbol is the v5 table.
    let t: &sys::ncclProfiler_v5_t = unsafe { &*(p.table as *const sys::ncclProfiler_v5_t) };
    let mut ctx = std::ptr::null_mut();
    let mut mask: c_int = 0;
    // Safety: as NCCL calls it, then not.
    unsafe {
        ok(t.init.unwrap()(&mut ctx, COMM_A, &mut mask, std::ptr::null(), 1, 2, 0, None));
        for i in 0..10 {
            let h = v5_coll(ctx, t, i);
            ok(t.stopEvent.unwrap()(h));
        }
        let mut bogus = [0u64; 8];
        ok(t.stopEvent.unwrap()(bogus.as_mut_ptr() as *mut c_void));
        let mut h = std::ptr::null_mut();
        ok(t.startEvent.unwrap()(ctx, &mut h, std::ptr::null_mut()));
        assert!(h.is_null());
        for i in 10..15 {
            let h = v5_coll(ctx, t, i);
            assert!(h.is_null(), "a disabled plugin tracks nothing");
            ok(t.stopEvent.unwrap()(h));
        }
    }
    7
}

/// A process that forks after NCCL started (e.g. a data-loader worker) and
/// whose child creates a communicator: the child must not record into the
/// parent's session, which no thread drains there.
fn play_fork() -> i32 {
    let p = load("ncclProfiler_v5");
    // Safety: the symbol is the v5 table.
    let t: &sys::ncclProfiler_v5_t = unsafe { &*(p.table as *const sys::ncclProfiler_v5_t) };
    let mut ctx = std::ptr::null_mut();
    let mut mask: c_int = 0;
    // Safety: as NCCL calls it.
    unsafe { ok(t.init.unwrap()(&mut ctx, COMM_A, &mut mask, std::ptr::null(), 1, 2, 0, None)) };
    for i in 0..5 {
        // Safety: a handle from startEvent.
        unsafe { ok(t.stopEvent.unwrap()(v5_coll(ctx, t, i))) };
    }
    // Safety: fork while the agent's writer thread runs, as a job that forks
    // workers does; the child only calls the plugin's init and `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut c2 = std::ptr::null_mut();
        let mut m2: c_int = 1;
        // Safety: as NCCL calls it.
        unsafe { ok(t.init.unwrap()(&mut c2, COMM_B, &mut m2, std::ptr::null(), 1, 2, 0, None)) };
        let code = if c2.is_null() && m2 == 0 { 0 } else { 9 };
        // Safety: leave without atexit handlers, as a worker would on _exit.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // Safety: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    println!("child_exit={}", libc::WEXITSTATUS(status));
    for i in 5..10 {
        // Safety: a handle from startEvent.
        unsafe { ok(t.stopEvent.unwrap()(v5_coll(ctx, t, i))) };
    }
    0
}

/// More events in flight than the slot table holds: the rest are counted.
fn play_overflow() -> i32 {
    let p = load("ncclProfiler_v5");
    // Safety: the symbol is the v5 table.
    let t: &sys::ncclProfiler_v5_t = unsafe { &*(p.table as *const sys::ncclProfiler_v5_t) };
    let mut ctx = std::ptr::null_mut();
    let mut mask: c_int = 0;
    // Safety: as NCCL calls it.
    unsafe { ok(t.init.unwrap()(&mut ctx, COMM_A, &mut mask, std::ptr::null(), 1, 2, 0, None)) };
    let handles: Vec<H> = (0..20_000).map(|i| H(v5_coll(ctx, t, i))).collect();
    let tracked = handles.iter().filter(|h| !h.0.is_null()).count();
    for h in &handles {
        // Safety: handles from startEvent (NULL ones are skipped by NCCL,
        // and by the plugin).
        unsafe { ok(t.stopEvent.unwrap()(h.0)) };
    }
    println!("tracked={tracked}");
    0
}

// ----------------------------------------------------------- the parent

struct Run {
    out: Output,
    traces: Vec<PathBuf>,
    _dir: tempfile::TempDir,
}

fn child(scenario: &str, via_gputrace: bool, env: &[(&str, &str)]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let traces = dir.path().join("traces");
    let me = std::env::current_exe().unwrap();
    let mut c = if via_gputrace {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gputrace"));
        c.arg("run").arg("-o").arg(&traces).arg("--").arg(&me);
        c
    } else {
        let mut c = Command::new(&me);
        c.env("NCCL_PROFILER_PLUGIN", agent_lib());
        c.env("GPUTRACE_OUTPUT", &traces);
        c
    };
    c.args(["nccl_child", "--exact", "--nocapture", "--test-threads=1"]);
    c.env(CHILD_ENV, scenario);
    c.env_remove("GPUTRACE_DISABLE").env_remove("GPUTRACE_NCCL");
    if via_gputrace {
        c.env_remove("NCCL_PROFILER_PLUGIN");
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    let traces = common::trace_files(&traces);
    Run { out, traces, _dir: dir }
}

fn stderr(r: &Run) -> String {
    String::from_utf8_lossy(&r.out.stderr).into_owned()
}

fn gputrace_lines(r: &Run) -> Vec<String> {
    common::gputrace_lines(&r.out.stderr)
}

fn one_trace(r: &Run) -> TraceFile {
    assert_eq!(r.traces.len(), 1, "one trace per process: {:?}\n{}", r.traces, stderr(r));
    TraceFile::open(&r.traces[0]).unwrap()
}

fn collectives(t: &TraceFile) -> Vec<Collective> {
    t.events_of(&[EventKind::Collective])
        .map(|e| match e.unwrap() {
            Event::Collective(c) => c,
            other => panic!("{other:?}"),
        })
        .collect()
}

fn losses(t: &TraceFile) -> Vec<Loss> {
    t.events_of(&[EventKind::Loss])
        .map(|e| match e.unwrap() {
            Event::Loss(l) => l,
            other => panic!("{other:?}"),
        })
        .collect()
}

fn check_v5(r: &Run, version: u32) {
    assert_eq!(r.out.status.code(), Some(0), "{}", stderr(r));
    let t = one_trace(r);
    assert!(t.trailer().is_some(), "finished cleanly");
    assert_eq!(
        t.header().time_domain,
        TimeDomain::Realtime,
        "an NCCL-only trace is in CLOCK_REALTIME"
    );
    assert!(t.header().extra.get("agent.mode").is_some_and(|m| m.starts_with("nccl-only")));
    let comms = t.communicators();
    assert_eq!(comms.len(), 2, "{comms:?}");
    let a = comms.iter().find(|c| c.id == CommId(COMM_A)).expect("communicator A");
    assert_eq!(
        (a.name.as_str(), a.rank, a.nranks, a.nodes, a.plugin_version),
        ("dp_group", 1, 4, 2, version)
    );
    let b = comms.iter().find(|c| c.id == CommId(COMM_B)).expect("communicator B");
    assert_eq!((b.name.as_str(), b.rank, b.nranks, b.nodes), ("tp_group", 0, 2, 1));
    assert!(a.created.0 > 0);

    let cs = collectives(&t);
    let name = |id| t.name(id).into_owned();
    let ar: Vec<&Collective> = cs.iter().filter(|c| name(c.op) == "AllReduce").collect();
    let total = THREADS as u64 * PER_THREAD;
    assert_eq!(ar.len() as u64, total, "every collective recorded once");
    let mut seqs: Vec<u64> = ar.iter().map(|c| c.seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..total).collect::<Vec<_>>(), "NCCL's sequence numbers, each once");
    for c in &ar {
        assert_eq!(c.comm, CommId(COMM_A));
        assert_eq!((c.rank, c.nranks, c.root, c.channels), (1, 4, -1, 8));
        assert!((1000..1000 + PER_THREAD).contains(&c.count), "{c:?}");
        assert_eq!(c.bytes, c.count * 2, "bf16: 2 bytes per element");
        assert_eq!(
            (name(c.datatype), name(c.algorithm), name(c.protocol)),
            ("bf16".into(), "RING".into(), "LL".into())
        );
        // No CUPTI here: not linked to a kernel, so start = end = the time
        // the application called ncclAllReduce (the CollApi event).
        assert_eq!(c.correlation, CorrelationId(0));
        assert_eq!((c.start, c.end), (c.enqueue, c.enqueue));
        assert!(c.enqueue.0 > 1_600_000_000_000_000_000, "CLOCK_REALTIME ns: {}", c.enqueue.0);
    }
    let p2p: Vec<&Collective> = cs.iter().filter(|c| c.comm == CommId(COMM_B)).collect();
    assert_eq!(p2p.len(), 100);
    for op in ["Send", "Recv"] {
        let mut s: Vec<u64> = p2p.iter().filter(|c| name(c.op) == op).map(|c| c.seq).collect();
        s.sort_unstable();
        assert_eq!(s, (0..50).collect::<Vec<_>>(), "{op}: counted per communicator and direction");
    }
    assert!(p2p
        .iter()
        .all(|c| c.bytes == 4096 * 4 && c.root == 1 && c.rank == 0 && c.nranks == 2));
    assert!(losses(&t).is_empty(), "{:?}", losses(&t));
    assert!(t
        .trailer()
        .unwrap()
        .extra
        .get("nccl.plugin")
        .is_some_and(|s| s.contains(&format!("v{version}"))));
}

#[test]
fn v5_plugin_records_every_collective_from_several_threads() {
    let r = child("v5", false, &[]);
    assert!(gputrace_lines(&r).is_empty(), "{}", stderr(&r));
    check_v5(&r, 5);
    // The report on an NCCL-only trace says what was (not) recorded and why.
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(["report", "--json"])
        .arg(&r.traces[0])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let f = &v["findings"][0];
    assert_eq!(f["rule"], "no-gpu-activity");
    assert!(f["evidence"].as_str().unwrap().contains("1300 NCCL collective(s)"), "{f}");
    let rows = v["collectives"].as_array().unwrap();
    let ar = rows.iter().find(|x| x["op"] == "AllReduce").unwrap();
    assert_eq!((ar["count"].as_u64(), ar["linked"].as_u64()), (Some(1200), Some(0)));
}

#[test]
fn v6_plugin_under_gputrace_run() {
    // `gputrace run` points NCCL_PROFILER_PLUGIN at the agent.
    let r = child("v6", true, &[]);
    check_v5(&r, 6);
}

#[test]
fn v4_v3_v2_v1_descriptors() {
    let r = child("v4", false, &[]);
    assert_eq!(r.out.status.code(), Some(0), "{}", stderr(&r));
    let t = one_trace(&r);
    let cs = collectives(&t);
    assert_eq!(cs.len(), 100);
    assert!(cs
        .iter()
        .enumerate()
        .all(|(i, c)| c.seq == i as u64 || cs.iter().any(|d| d.seq == i as u64)));
    for c in &cs {
        assert_eq!(
            (c.comm, c.rank, c.nranks, c.count, c.bytes, c.channels),
            (CommId(COMM_A), 3, 8, 256, 1024, 4)
        );
        assert_eq!(
            (t.name(c.op), t.name(c.datatype), t.name(c.protocol)),
            ("AllGather".into(), "f32".into(), "Simple".into())
        );
    }
    assert_eq!(t.communicators()[0].name, "world");

    let r = child("v2", false, &[]);
    let t = one_trace(&r);
    let cs = collectives(&t);
    assert_eq!(cs.len(), 20);
    for c in &cs {
        assert_eq!((c.comm, c.rank, c.root, c.count, c.bytes), (CommId(COMM_A), 0, 0, 100, 100));
        assert_eq!(
            (t.name(c.op), t.name(c.datatype), t.name(c.algorithm), t.name(c.protocol)),
            ("Broadcast".into(), "i8".into(), "TREE".into(), "LL128".into())
        );
    }

    let r = child("v3", false, &[]);
    let t = one_trace(&r);
    let cs = collectives(&t);
    assert_eq!(cs.len(), 10);
    for c in &cs {
        assert_eq!(
            (c.comm, c.rank, c.count, c.bytes, c.channels),
            (CommId(COMM_B), 1, 100, 400, 3),
            "4-byte f32 x 100"
        );
        assert_eq!((t.name(c.algorithm), t.name(c.datatype)), ("NVLS".into(), "f32".into()));
    }
    assert_eq!(t.communicators()[0].plugin_version, 3);

    let r = child("v1", false, &[]);
    let t = one_trace(&r);
    let cs = collectives(&t);
    assert_eq!(cs.len(), 50);
    for c in &cs {
        // v1 passes enum codes; the hash comes in each descriptor.
        assert_eq!((c.comm, c.rank, c.count, c.bytes, c.channels), (CommId(COMM_B), 2, 512, 4096, 2));
        assert_eq!(
            (t.name(c.op), t.name(c.datatype), t.name(c.algorithm), t.name(c.protocol)),
            ("ReduceScatter".into(), "bf16".into(), "RING".into(), "Simple".into())
        );
    }
    // NCCL < 2.27 names the communicator only in its collectives.
    let comms = t.communicators();
    assert_eq!(comms.len(), 1, "{comms:?}");
    assert_eq!((comms[0].id, comms[0].rank, comms[0].plugin_version), (CommId(COMM_B), 2, 1));
}

#[test]
fn malformed_calls_turn_the_plugin_off_with_one_line_and_the_job_runs_on() {
    let r = child("malformed", true, &[]);
    assert_eq!(r.out.status.code(), Some(7), "the job's exit code survives: {}", stderr(&r));
    let lines = gputrace_lines(&r);
    let plugin: Vec<&String> = lines.iter().filter(|l| l.contains("NCCL profiler plugin")).collect();
    assert_eq!(plugin.len(), 1, "exactly one line: {lines:?}");
    assert!(plugin[0].contains("never returned"), "{plugin:?}");
    let t = one_trace(&r);
    assert_eq!(collectives(&t).len(), 10, "what came before is kept");
    let lost: u64 = losses(&t)
        .iter()
        .filter(|l| l.source == LossSource::NCCL_PLUGIN)
        .map(|l| l.count)
        .sum();
    assert_eq!(lost, 5, "the five collectives after the plugin turned off are counted");
}

#[test]
fn more_events_in_flight_than_slots_are_counted_not_blocking() {
    let r = child("overflow", false, &[]);
    assert_eq!(r.out.status.code(), Some(0), "{}", stderr(&r));
    let tracked: usize = String::from_utf8_lossy(&r.out.stdout)
        .lines()
        .find_map(|l| l.split("tracked=").nth(1))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "the child says how many were tracked: {}\n{}",
                String::from_utf8_lossy(&r.out.stdout),
                stderr(&r)
            )
        });
    let t = one_trace(&r);
    let lost: u64 = losses(&t)
        .iter()
        .filter(|l| l.source == LossSource::NCCL_PLUGIN)
        .map(|l| l.count)
        .sum();
    assert_eq!(collectives(&t).len(), tracked);
    assert_eq!(tracked as u64 + lost, 20_000, "every collective is either recorded or counted");
    assert!(lost > 0);
}

#[test]
fn gputrace_run_keeps_a_users_profiler_plugin_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let me = std::env::current_exe().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .arg("run")
        .arg("-o")
        .arg(dir.path())
        .arg("--")
        .arg(&me)
        .args(["nccl_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "env")
        .env("NCCL_PROFILER_PLUGIN", "/opt/inspector/libnccl-profiler-inspector.so")
        .output()
        .unwrap();
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(
        so.contains("NCCL_PROFILER_PLUGIN=/opt/inspector/libnccl-profiler-inspector.so"),
        "{so}"
    );
    let se = String::from_utf8_lossy(&out.stderr);
    assert!(se.lines().any(|l| l.starts_with("gputrace: keeping NCCL_PROFILER_PLUGIN")), "{se}");

    // And without one, gputrace sets it to the agent.
    let out = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .arg("run")
        .arg("-o")
        .arg(dir.path())
        .arg("--")
        .arg(&me)
        .args(["nccl_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "env")
        .env_remove("NCCL_PROFILER_PLUGIN")
        .output()
        .unwrap();
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(so.contains("libgputrace_agent.so"), "{so}");
}

#[test]
fn a_forked_child_does_not_record_into_its_parents_session() {
    let r = child("fork", false, &[]);
    assert_eq!(r.out.status.code(), Some(0), "{}", stderr(&r));
    let so = String::from_utf8_lossy(&r.out.stdout);
    assert!(so.contains("child_exit=0"), "the child's init was refused: {so}\n{}", stderr(&r));
    let lines = gputrace_lines(&r);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("forked process"), "{lines:?}");
    let t = one_trace(&r);
    assert_eq!(collectives(&t).len(), 10, "the parent records on");
    assert!(t.communicators().iter().all(|c| c.id == CommId(COMM_A)));
}
