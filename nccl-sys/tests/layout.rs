//! Pins the layout of NCCL's profiler-plugin structs, v1 to v6, as gputrace
//! reads them, so that a regeneration of `src/bindings.rs` that moves a field
//! fails here (bindgen's own assertions only check the file against the
//! headers it was generated from).
//!
//! The expected numbers are what `tests/offsets.c` prints on x86_64 Linux
//! (the C compiler's `offsetof`/`sizeof` over the same headers), stored by
//! `generate.sh` as `tests/offsets.txt`. [`constants_are_the_c_compilers`]
//! checks that the constants below are exactly those lines, and the
//! per-version tests check the Rust structs against the constants. Union
//! members are named as in C (`coll.func`); in Rust they sit under
//! `__bindgen_anon_1`.
#![cfg(all(target_arch = "x86_64", target_os = "linux"))]

use std::collections::BTreeSet;
use std::ffi::{c_char, c_int, c_void};
use std::mem::{offset_of, size_of};

use nccl_sys::*;

/// One pinned number: `"<type> <field>"` (or `"<type> sizeof"`), the value in
/// the Rust bindings, and the value the C compiler printed.
struct Row {
    name: String,
    actual: usize,
    expected: usize,
}

/// bindgen appends `_` to fields named after Rust keywords (`type` -> `type_`).
fn c_name(field: &str) -> &str {
    field.strip_suffix('_').unwrap_or(field)
}

macro_rules! size {
    ($t:ident, $n:expr) => {
        Row {
            name: format!("{} sizeof", stringify!($t)),
            actual: size_of::<$t>(),
            expected: $n,
        }
    };
}

/// A field of the struct itself.
macro_rules! field {
    ($t:ident, $f:ident, $n:expr) => {
        Row {
            name: format!("{} {}", stringify!($t), c_name(stringify!($f))),
            actual: offset_of!($t, $f),
            expected: $n,
        }
    };
}

/// A field of a member of the descriptor's anonymous union.
macro_rules! member {
    ($t:ident, $m:ident . $f:ident, $n:expr) => {
        Row {
            name: format!("{} {}.{}", stringify!($t), stringify!($m), stringify!($f)),
            actual: offset_of!($t, __bindgen_anon_1.$m.$f),
            expected: $n,
        }
    };
}

fn check(rows: Vec<Row>) {
    let wrong: Vec<String> = rows
        .iter()
        .filter(|r| r.actual != r.expected)
        .map(|r| format!("{}: bindings say {}, pinned {}", r.name, r.actual, r.expected))
        .collect();
    assert!(wrong.is_empty(), "layout changed:\n{}", wrong.join("\n"));
}

fn v1() -> Vec<Row> {
    vec![
        size!(ncclProfilerEventDescr_v1_t, 120),
        field!(ncclProfilerEventDescr_v1_t, type_, 0),
        field!(ncclProfilerEventDescr_v1_t, parentObj, 8),
        field!(ncclProfilerEventDescr_v1_t, rank, 16),
        size!(ncclProfilerEventStateArgs_v1_t, 16),
        size!(ncclProfiler_v1_t, 48),
        field!(ncclProfiler_v1_t, name, 0),
        field!(ncclProfiler_v1_t, init, 8),
        field!(ncclProfiler_v1_t, startEvent, 16),
        field!(ncclProfiler_v1_t, stopEvent, 24),
        field!(ncclProfiler_v1_t, recordEventState, 32),
        field!(ncclProfiler_v1_t, finalize, 40),
        member!(ncclProfilerEventDescr_v1_t, coll.name, 24),
        member!(ncclProfilerEventDescr_v1_t, coll.commHash, 32),
        member!(ncclProfilerEventDescr_v1_t, coll.seqNumber, 40),
        member!(ncclProfilerEventDescr_v1_t, coll.func, 48),
        member!(ncclProfilerEventDescr_v1_t, coll.count, 72),
        member!(ncclProfilerEventDescr_v1_t, coll.root, 80),
        member!(ncclProfilerEventDescr_v1_t, coll.datatype, 84),
        member!(ncclProfilerEventDescr_v1_t, coll.op, 88),
        member!(ncclProfilerEventDescr_v1_t, coll.nMaxChannels, 104),
        member!(ncclProfilerEventDescr_v1_t, coll.nWarps, 105),
        member!(ncclProfilerEventDescr_v1_t, coll.algo, 106),
        member!(ncclProfilerEventDescr_v1_t, coll.proto, 107),
        member!(ncclProfilerEventDescr_v1_t, p2p.name, 24),
        member!(ncclProfilerEventDescr_v1_t, p2p.commHash, 32),
        member!(ncclProfilerEventDescr_v1_t, p2p.func, 40),
        member!(ncclProfilerEventDescr_v1_t, p2p.buff, 48),
        member!(ncclProfilerEventDescr_v1_t, p2p.datatype, 56),
        member!(ncclProfilerEventDescr_v1_t, p2p.count, 64),
        member!(ncclProfilerEventDescr_v1_t, p2p.peer, 72),
    ]
}

fn v2() -> Vec<Row> {
    vec![
        size!(ncclProfilerEventDescr_v2_t, 128),
        field!(ncclProfilerEventDescr_v2_t, type_, 0),
        field!(ncclProfilerEventDescr_v2_t, parentObj, 8),
        field!(ncclProfilerEventDescr_v2_t, rank, 16),
        size!(ncclProfilerEventStateArgs_v2_t, 16),
        size!(ncclProfiler_v2_t, 48),
        field!(ncclProfiler_v2_t, name, 0),
        field!(ncclProfiler_v2_t, init, 8),
        field!(ncclProfiler_v2_t, startEvent, 16),
        field!(ncclProfiler_v2_t, stopEvent, 24),
        field!(ncclProfiler_v2_t, recordEventState, 32),
        field!(ncclProfiler_v2_t, finalize, 40),
        member!(ncclProfilerEventDescr_v2_t, coll.name, 24),
        member!(ncclProfilerEventDescr_v2_t, coll.commHash, 32),
        member!(ncclProfilerEventDescr_v2_t, coll.seqNumber, 40),
        member!(ncclProfilerEventDescr_v2_t, coll.func, 48),
        member!(ncclProfilerEventDescr_v2_t, coll.count, 72),
        member!(ncclProfilerEventDescr_v2_t, coll.root, 80),
        member!(ncclProfilerEventDescr_v2_t, coll.datatype, 88),
        member!(ncclProfilerEventDescr_v2_t, coll.nMaxChannels, 104),
        member!(ncclProfilerEventDescr_v2_t, coll.nWarps, 105),
        member!(ncclProfilerEventDescr_v2_t, coll.algo, 112),
        member!(ncclProfilerEventDescr_v2_t, coll.proto, 120),
        member!(ncclProfilerEventDescr_v2_t, p2p.name, 24),
        member!(ncclProfilerEventDescr_v2_t, p2p.commHash, 32),
        member!(ncclProfilerEventDescr_v2_t, p2p.func, 40),
        member!(ncclProfilerEventDescr_v2_t, p2p.buff, 48),
        member!(ncclProfilerEventDescr_v2_t, p2p.datatype, 56),
        member!(ncclProfilerEventDescr_v2_t, p2p.count, 64),
        member!(ncclProfilerEventDescr_v2_t, p2p.peer, 72),
    ]
}

fn v3() -> Vec<Row> {
    vec![
        size!(ncclProfilerEventDescr_v3_t, 120),
        field!(ncclProfilerEventDescr_v3_t, type_, 0),
        field!(ncclProfilerEventDescr_v3_t, parentObj, 8),
        field!(ncclProfilerEventDescr_v3_t, rank, 16),
        size!(ncclProfilerEventStateArgs_v3_t, 16),
        size!(ncclProfiler_v3_t, 48),
        field!(ncclProfiler_v3_t, name, 0),
        field!(ncclProfiler_v3_t, init, 8),
        field!(ncclProfiler_v3_t, startEvent, 16),
        field!(ncclProfiler_v3_t, stopEvent, 24),
        field!(ncclProfiler_v3_t, recordEventState, 32),
        field!(ncclProfiler_v3_t, finalize, 40),
        member!(ncclProfilerEventDescr_v3_t, coll.name, 24),
        member!(ncclProfilerEventDescr_v3_t, coll.commHash, 32),
        member!(ncclProfilerEventDescr_v3_t, coll.seqNumber, 40),
        member!(ncclProfilerEventDescr_v3_t, coll.func, 48),
        member!(ncclProfilerEventDescr_v3_t, coll.count, 72),
        member!(ncclProfilerEventDescr_v3_t, coll.root, 80),
        member!(ncclProfilerEventDescr_v3_t, coll.datatype, 88),
        member!(ncclProfilerEventDescr_v3_t, coll.nMaxChannels, 96),
        member!(ncclProfilerEventDescr_v3_t, coll.nWarps, 97),
        member!(ncclProfilerEventDescr_v3_t, coll.algo, 104),
        member!(ncclProfilerEventDescr_v3_t, coll.proto, 112),
        member!(ncclProfilerEventDescr_v3_t, p2p.name, 24),
        member!(ncclProfilerEventDescr_v3_t, p2p.commHash, 32),
        member!(ncclProfilerEventDescr_v3_t, p2p.func, 40),
        member!(ncclProfilerEventDescr_v3_t, p2p.buff, 48),
        member!(ncclProfilerEventDescr_v3_t, p2p.datatype, 56),
        member!(ncclProfilerEventDescr_v3_t, p2p.count, 64),
        member!(ncclProfilerEventDescr_v3_t, p2p.peer, 72),
    ]
}

fn v4() -> Vec<Row> {
    vec![
        size!(ncclProfilerEventDescr_v4_t, 104),
        field!(ncclProfilerEventDescr_v4_t, type_, 0),
        field!(ncclProfilerEventDescr_v4_t, parentObj, 8),
        field!(ncclProfilerEventDescr_v4_t, rank, 16),
        size!(ncclProfilerEventStateArgs_v4_t, 8),
        size!(ncclProfiler_v4_t, 48),
        field!(ncclProfiler_v4_t, name, 0),
        field!(ncclProfiler_v4_t, init, 8),
        field!(ncclProfiler_v4_t, startEvent, 16),
        field!(ncclProfiler_v4_t, stopEvent, 24),
        field!(ncclProfiler_v4_t, recordEventState, 32),
        field!(ncclProfiler_v4_t, finalize, 40),
        member!(ncclProfilerEventDescr_v4_t, coll.seqNumber, 24),
        member!(ncclProfilerEventDescr_v4_t, coll.func, 32),
        member!(ncclProfilerEventDescr_v4_t, coll.count, 56),
        member!(ncclProfilerEventDescr_v4_t, coll.root, 64),
        member!(ncclProfilerEventDescr_v4_t, coll.datatype, 72),
        member!(ncclProfilerEventDescr_v4_t, coll.nChannels, 80),
        member!(ncclProfilerEventDescr_v4_t, coll.nWarps, 81),
        member!(ncclProfilerEventDescr_v4_t, coll.algo, 88),
        member!(ncclProfilerEventDescr_v4_t, coll.proto, 96),
        member!(ncclProfilerEventDescr_v4_t, p2p.func, 24),
        member!(ncclProfilerEventDescr_v4_t, p2p.buff, 32),
        member!(ncclProfilerEventDescr_v4_t, p2p.datatype, 40),
        member!(ncclProfilerEventDescr_v4_t, p2p.count, 48),
        member!(ncclProfilerEventDescr_v4_t, p2p.peer, 56),
        member!(ncclProfilerEventDescr_v4_t, p2p.nChannels, 60),
        member!(ncclProfilerEventDescr_v4_t, kernelCh.channelId, 24),
        member!(ncclProfilerEventDescr_v4_t, kernelCh.pTimer, 32),
    ]
}

fn v5() -> Vec<Row> {
    vec![
        size!(ncclProfilerEventDescr_v5_t, 112),
        field!(ncclProfilerEventDescr_v5_t, type_, 0),
        field!(ncclProfilerEventDescr_v5_t, parentObj, 8),
        field!(ncclProfilerEventDescr_v5_t, rank, 16),
        size!(ncclProfilerEventStateArgs_v5_t, 8),
        size!(ncclProfiler_v5_t, 48),
        field!(ncclProfiler_v5_t, name, 0),
        field!(ncclProfiler_v5_t, init, 8),
        field!(ncclProfiler_v5_t, startEvent, 16),
        field!(ncclProfiler_v5_t, stopEvent, 24),
        field!(ncclProfiler_v5_t, recordEventState, 32),
        field!(ncclProfiler_v5_t, finalize, 40),
        member!(ncclProfilerEventDescr_v5_t, coll.seqNumber, 24),
        member!(ncclProfilerEventDescr_v5_t, coll.func, 32),
        member!(ncclProfilerEventDescr_v5_t, coll.count, 56),
        member!(ncclProfilerEventDescr_v5_t, coll.root, 64),
        member!(ncclProfilerEventDescr_v5_t, coll.datatype, 72),
        member!(ncclProfilerEventDescr_v5_t, coll.nChannels, 80),
        member!(ncclProfilerEventDescr_v5_t, coll.nWarps, 81),
        member!(ncclProfilerEventDescr_v5_t, coll.algo, 88),
        member!(ncclProfilerEventDescr_v5_t, coll.proto, 96),
        member!(ncclProfilerEventDescr_v5_t, coll.parentGroup, 104),
        member!(ncclProfilerEventDescr_v5_t, p2p.func, 24),
        member!(ncclProfilerEventDescr_v5_t, p2p.buff, 32),
        member!(ncclProfilerEventDescr_v5_t, p2p.datatype, 40),
        member!(ncclProfilerEventDescr_v5_t, p2p.count, 48),
        member!(ncclProfilerEventDescr_v5_t, p2p.peer, 56),
        member!(ncclProfilerEventDescr_v5_t, p2p.nChannels, 60),
        member!(ncclProfilerEventDescr_v5_t, p2p.parentGroup, 64),
        member!(ncclProfilerEventDescr_v5_t, kernelCh.channelId, 24),
        member!(ncclProfilerEventDescr_v5_t, kernelCh.pTimer, 32),
        member!(ncclProfilerEventDescr_v5_t, groupApi.graphCaptured, 24),
        member!(ncclProfilerEventDescr_v5_t, groupApi.groupDepth, 28),
        member!(ncclProfilerEventDescr_v5_t, collApi.func, 24),
        member!(ncclProfilerEventDescr_v5_t, collApi.count, 32),
        member!(ncclProfilerEventDescr_v5_t, collApi.datatype, 40),
        member!(ncclProfilerEventDescr_v5_t, collApi.root, 48),
        member!(ncclProfilerEventDescr_v5_t, collApi.stream, 56),
        member!(ncclProfilerEventDescr_v5_t, collApi.graphCaptured, 64),
        member!(ncclProfilerEventDescr_v5_t, p2pApi.func, 24),
        member!(ncclProfilerEventDescr_v5_t, p2pApi.count, 32),
        member!(ncclProfilerEventDescr_v5_t, p2pApi.datatype, 40),
        member!(ncclProfilerEventDescr_v5_t, p2pApi.stream, 48),
        member!(ncclProfilerEventDescr_v5_t, p2pApi.graphCaptured, 56),
        member!(ncclProfilerEventDescr_v5_t, kernelLaunch.stream, 24),
    ]
}

fn v6() -> Vec<Row> {
    vec![
        size!(ncclProfilerEventDescr_v6_t, 112),
        field!(ncclProfilerEventDescr_v6_t, type_, 0),
        field!(ncclProfilerEventDescr_v6_t, parentObj, 8),
        field!(ncclProfilerEventDescr_v6_t, rank, 16),
        size!(ncclProfilerEventStateArgs_v6_t, 8),
        size!(ncclProfiler_v6_t, 48),
        field!(ncclProfiler_v6_t, name, 0),
        field!(ncclProfiler_v6_t, init, 8),
        field!(ncclProfiler_v6_t, startEvent, 16),
        field!(ncclProfiler_v6_t, stopEvent, 24),
        field!(ncclProfiler_v6_t, recordEventState, 32),
        field!(ncclProfiler_v6_t, finalize, 40),
        member!(ncclProfilerEventDescr_v6_t, coll.seqNumber, 24),
        member!(ncclProfilerEventDescr_v6_t, coll.func, 32),
        member!(ncclProfilerEventDescr_v6_t, coll.count, 56),
        member!(ncclProfilerEventDescr_v6_t, coll.root, 64),
        member!(ncclProfilerEventDescr_v6_t, coll.datatype, 72),
        member!(ncclProfilerEventDescr_v6_t, coll.nChannels, 80),
        member!(ncclProfilerEventDescr_v6_t, coll.nWarps, 81),
        member!(ncclProfilerEventDescr_v6_t, coll.algo, 88),
        member!(ncclProfilerEventDescr_v6_t, coll.proto, 96),
        member!(ncclProfilerEventDescr_v6_t, coll.parentGroup, 104),
        member!(ncclProfilerEventDescr_v6_t, p2p.func, 24),
        member!(ncclProfilerEventDescr_v6_t, p2p.buff, 32),
        member!(ncclProfilerEventDescr_v6_t, p2p.datatype, 40),
        member!(ncclProfilerEventDescr_v6_t, p2p.count, 48),
        member!(ncclProfilerEventDescr_v6_t, p2p.peer, 56),
        member!(ncclProfilerEventDescr_v6_t, p2p.nChannels, 60),
        member!(ncclProfilerEventDescr_v6_t, p2p.parentGroup, 64),
        member!(ncclProfilerEventDescr_v6_t, kernelCh.channelId, 24),
        member!(ncclProfilerEventDescr_v6_t, kernelCh.pTimer, 32),
        member!(ncclProfilerEventDescr_v6_t, groupApi.graphCaptured, 24),
        member!(ncclProfilerEventDescr_v6_t, groupApi.groupDepth, 28),
        member!(ncclProfilerEventDescr_v6_t, collApi.func, 24),
        member!(ncclProfilerEventDescr_v6_t, collApi.count, 32),
        member!(ncclProfilerEventDescr_v6_t, collApi.datatype, 40),
        member!(ncclProfilerEventDescr_v6_t, collApi.root, 48),
        member!(ncclProfilerEventDescr_v6_t, collApi.stream, 56),
        member!(ncclProfilerEventDescr_v6_t, collApi.graphCaptured, 64),
        member!(ncclProfilerEventDescr_v6_t, p2pApi.func, 24),
        member!(ncclProfilerEventDescr_v6_t, p2pApi.count, 32),
        member!(ncclProfilerEventDescr_v6_t, p2pApi.datatype, 40),
        member!(ncclProfilerEventDescr_v6_t, p2pApi.stream, 48),
        member!(ncclProfilerEventDescr_v6_t, p2pApi.graphCaptured, 56),
        member!(ncclProfilerEventDescr_v6_t, kernelLaunch.stream, 24),
        member!(ncclProfilerEventDescr_v6_t, ceColl.seqNumber, 24),
        member!(ncclProfilerEventDescr_v6_t, ceColl.func, 32),
        member!(ncclProfilerEventDescr_v6_t, ceColl.count, 56),
        member!(ncclProfilerEventDescr_v6_t, ceColl.root, 64),
        member!(ncclProfilerEventDescr_v6_t, ceColl.datatype, 72),
        member!(ncclProfilerEventDescr_v6_t, ceColl.syncStrategy, 80),
        member!(ncclProfilerEventDescr_v6_t, ceColl.ceSeqNum, 100),
        member!(ncclProfilerEventDescr_v6_t, ceColl.stream, 104),
    ]
}

#[test]
fn v1_layout() {
    check(v1());
}

#[test]
fn v2_layout() {
    check(v2());
}

#[test]
fn v3_layout() {
    check(v3());
}

#[test]
fn v4_layout() {
    check(v4());
}

#[test]
fn v5_layout() {
    check(v5());
}

#[test]
fn v6_layout() {
    check(v6());
}

/// The constants above are exactly the lines `tests/offsets.c` printed
/// (`tests/offsets.txt`): none missing, none extra, none different.
#[test]
fn constants_are_the_c_compilers() {
    let ours: BTreeSet<String> = [v1(), v2(), v3(), v4(), v5(), v6()]
        .into_iter()
        .flatten()
        .map(|r| format!("{} {}", r.name, r.expected))
        .collect();
    let c: BTreeSet<String> = include_str!("offsets.txt").lines().map(str::to_owned).collect();
    let missing: Vec<_> = c.difference(&ours).collect();
    let extra: Vec<_> = ours.difference(&c).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "tests/layout.rs and tests/offsets.txt disagree\nin offsets.txt only: {missing:#?}\nin layout.rs only: {extra:#?}"
    );
}

/// Field types that differ between versions, pinned at compile time.
#[test]
fn field_types() {
    let v1 = ncclProfilerEventDescr_v1_t::default();
    let v2 = ncclProfilerEventDescr_v2_t::default();
    let v3 = ncclProfilerEventDescr_v3_t::default();
    let v4 = ncclProfilerEventDescr_v4_t::default();
    let v5 = ncclProfilerEventDescr_v5_t::default();
    let v6 = ncclProfilerEventDescr_v6_t::default();
    let _: (u8, u8, u8, u8, u64, u64) = (v1.type_, v2.type_, v3.type_, v4.type_, v5.type_, v6.type_);
    let _: *mut c_void = v1.parentObj;
    let _: c_int = v6.rank;
    // Safety: the descriptors are zeroed; every member is plain data.
    unsafe {
        // v1: codes, not strings.
        let c = v1.__bindgen_anon_1.coll;
        let _: (u64, u64, u8, usize, u8, u32, u8, u8, u8) = (
            c.commHash,
            c.seqNumber,
            c.func,
            c.count,
            c.datatype,
            c.op,
            c.nMaxChannels,
            c.algo,
            c.proto,
        );
        let p = v1.__bindgen_anon_1.p2p;
        let _: (u64, u8, u8, usize, c_int) = (p.commHash, p.func, p.datatype, p.count, p.peer);
        // v2..v6: C strings.
        let c = v2.__bindgen_anon_1.coll;
        let _: (u64, *const c_char, *const c_char, *const c_char, *const c_char) = (c.commHash, c.func, c.datatype, c.algo, c.proto);
        let c = v3.__bindgen_anon_1.coll;
        let _: (u64, *const c_char, *const c_char, u8) = (c.commHash, c.func, c.datatype, c.nMaxChannels);
        let c = v4.__bindgen_anon_1.coll;
        let _: (u64, *const c_char, usize, *const c_char, u8) = (c.seqNumber, c.func, c.count, c.datatype, c.nChannels);
        let p = v4.__bindgen_anon_1.p2p;
        let _: (*const c_char, *const c_char, usize, c_int, u8) = (p.func, p.datatype, p.count, p.peer, p.nChannels);
        let _: u64 = v4.__bindgen_anon_1.kernelCh.pTimer;
        let a = v5.__bindgen_anon_1.collApi;
        let _: (*const c_char, usize, *const c_char, c_int, *mut c_void, bool) =
            (a.func, a.count, a.datatype, a.root, a.stream, a.graphCaptured);
        let _: *mut c_void = v5.__bindgen_anon_1.kernelLaunch.stream;
        let _: *mut c_void = v5.__bindgen_anon_1.coll.parentGroup;
        let _: bool = v6.__bindgen_anon_1.groupApi.graphCaptured;
        let c = v6.__bindgen_anon_1.ceColl;
        let _: (u64, *const c_char, usize, *const c_char, *mut c_void) = (c.seqNumber, c.func, c.count, c.datatype, c.stream);
    }
}

// Stand-ins with the exact C signatures; building the tables below pins every
// function-pointer type (and `init`'s per-version argument list).
unsafe extern "C" fn init_v1_v3(_context: *mut *mut c_void, _mask: *mut c_int) -> ncclResult_t {
    ncclSuccess
}
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn init_v4(
    _context: *mut *mut c_void,
    _mask: *mut c_int,
    _comm_name: *const c_char,
    _comm_hash: u64,
    _n_nodes: c_int,
    _nranks: c_int,
    _rank: c_int,
    _logfn: ncclDebugLogger_t,
) -> ncclResult_t {
    ncclSuccess
}
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn init_v5_v6(
    _context: *mut *mut c_void,
    _comm_id: u64,
    _mask: *mut c_int,
    _comm_name: *const c_char,
    _n_nodes: c_int,
    _nranks: c_int,
    _rank: c_int,
    _logfn: ncclDebugLogger_t,
) -> ncclResult_t {
    ncclSuccess
}
unsafe extern "C" fn stop_event(_handle: *mut c_void) -> ncclResult_t {
    ncclSuccess
}
unsafe extern "C" fn finalize(_context: *mut c_void) -> ncclResult_t {
    ncclSuccess
}

macro_rules! table {
    ($table:ident, $descr:ident, $state_args:ident, $init:ident) => {{
        unsafe extern "C" fn start_event(_context: *mut c_void, _handle: *mut *mut c_void, _descr: *mut $descr) -> ncclResult_t {
            ncclSuccess
        }
        unsafe extern "C" fn record_event_state(
            _handle: *mut c_void,
            _state: ncclProfilerEventState_t,
            _args: *mut $state_args,
        ) -> ncclResult_t {
            ncclSuccess
        }
        $table {
            name: c"gputrace".as_ptr(),
            init: Some($init),
            startEvent: Some(start_event),
            stopEvent: Some(stop_event),
            recordEventState: Some(record_event_state),
            finalize: Some(finalize),
        }
    }};
}

// `static` needs the `Sync` impls in lib.rs, as an exported table does.
static V1: ncclProfiler_v1_t = table!(
    ncclProfiler_v1_t,
    ncclProfilerEventDescr_v1_t,
    ncclProfilerEventStateArgs_v1_t,
    init_v1_v3
);
static V2: ncclProfiler_v2_t = table!(
    ncclProfiler_v2_t,
    ncclProfilerEventDescr_v2_t,
    ncclProfilerEventStateArgs_v2_t,
    init_v1_v3
);
static V3: ncclProfiler_v3_t = table!(
    ncclProfiler_v3_t,
    ncclProfilerEventDescr_v3_t,
    ncclProfilerEventStateArgs_v3_t,
    init_v1_v3
);
static V4: ncclProfiler_v4_t = table!(
    ncclProfiler_v4_t,
    ncclProfilerEventDescr_v4_t,
    ncclProfilerEventStateArgs_v4_t,
    init_v4
);
static V5: ncclProfiler_v5_t = table!(
    ncclProfiler_v5_t,
    ncclProfilerEventDescr_v5_t,
    ncclProfilerEventStateArgs_v5_t,
    init_v5_v6
);
static V6: ncclProfiler_v6_t = table!(
    ncclProfiler_v6_t,
    ncclProfilerEventDescr_v6_t,
    ncclProfilerEventStateArgs_v6_t,
    init_v5_v6
);

#[test]
fn function_tables() {
    let inits = [
        V1.init.is_some(),
        V2.init.is_some(),
        V3.init.is_some(),
        V4.init.is_some(),
        V5.init.is_some(),
        V6.init.is_some(),
    ];
    assert_eq!(inits, [true; 6]);
    // Safety: the stand-ins ignore their arguments.
    unsafe {
        let mut context = std::ptr::null_mut();
        let mut mask = 0;
        assert_eq!(V1.init.unwrap()(&mut context, &mut mask), ncclSuccess);
        assert_eq!(V6.stopEvent.unwrap()(context), ncclSuccess);
    }
    // v6 reuses v5's state arguments.
    let _: ncclProfilerEventStateArgs_v6_t = ncclProfilerEventStateArgs_v5_t::default();
}

#[test]
fn symbols() {
    for (i, symbol) in PROFILER_SYMBOLS.iter().enumerate() {
        assert_eq!(*symbol, format!("ncclProfiler_v{}", i + 1));
    }
}

/// Values NCCL passes across the ABI: event-type bits, states, results.
#[test]
fn constants() {
    let types: [ncclProfilerEventType_t; 15] = [
        ncclProfileGroup,
        ncclProfileColl,
        ncclProfileP2p,
        ncclProfileProxyOp,
        ncclProfileProxyStep,
        ncclProfileProxyCtrl,
        ncclProfileKernelCh,
        ncclProfileNetPlugin,
        ncclProfileGroupApi,
        ncclProfileCollApi,
        ncclProfileP2pApi,
        ncclProfileKernelLaunch,
        ncclProfileCeColl,
        ncclProfileCeSync,
        ncclProfileCeBatch,
    ];
    for (bit, t) in types.iter().enumerate() {
        assert_eq!(*t, 1 << bit);
    }
    let states: [(ncclProfilerEventState_t, u32); 31] = [
        (ncclProfilerProxyOpSendPosted, 0),
        (ncclProfilerProxyOpSendRemFifoWait, 1),
        (ncclProfilerProxyOpSendTransmitted, 2),
        (ncclProfilerProxyOpSendDone, 3),
        (ncclProfilerProxyOpRecvPosted, 4),
        (ncclProfilerProxyOpRecvReceived, 5),
        (ncclProfilerProxyOpRecvTransmitted, 6),
        (ncclProfilerProxyOpRecvDone, 7),
        (ncclProfilerProxyStepSendGPUWait, 8),
        (ncclProfilerProxyStepSendWait, 9),
        (ncclProfilerProxyStepRecvWait, 10),
        (ncclProfilerProxyStepRecvFlushWait, 11),
        (ncclProfilerProxyStepRecvGPUWait, 12),
        (ncclProfilerProxyCtrlIdle, 13),
        (ncclProfilerProxyCtrlActive, 14),
        (ncclProfilerProxyCtrlSleep, 15),
        (ncclProfilerProxyCtrlWakeup, 16),
        (ncclProfilerProxyCtrlAppend, 17),
        (ncclProfilerProxyCtrlAppendEnd, 18),
        (ncclProfilerProxyOpInProgress_v4, 19),
        (ncclProfilerProxyStepSendPeerWait_v4, 20),
        (ncclProfilerNetPluginUpdate, 21),
        (ncclProfilerKernelChStop, 22),
        (ncclProfilerGroupStartApiStop, 23),
        (ncclProfilerGroupEndApiStart, 24),
        (ncclProfilerCeCollStart, 25),
        (ncclProfilerCeCollComplete, 26),
        (ncclProfilerCeSyncStart, 27),
        (ncclProfilerCeSyncComplete, 28),
        (ncclProfilerCeBatchStart, 29),
        (ncclProfilerCeBatchComplete, 30),
    ];
    for (state, value) in states {
        assert_eq!(state, value);
    }
    // One state type for every version.
    let _: [ncclProfilerEventState_t; 6] = [
        ncclProfilerEventState_v1_t::default(),
        ncclProfilerEventState_v2_t::default(),
        ncclProfilerEventState_v3_t::default(),
        ncclProfilerEventState_v4_t::default(),
        ncclProfilerEventState_v5_t::default(),
        ncclProfilerEventState_v6_t::default(),
    ];
    let results = [
        ncclSuccess,
        ncclUnhandledCudaError,
        ncclSystemError,
        ncclInternalError,
        ncclInvalidArgument,
        ncclInvalidUsage,
        ncclRemoteError,
    ];
    assert_eq!(results, [0, 1, 2, 3, 4, 5, 6]);
    assert_eq!((NCCL_LOG_WARN, NCCL_LOG_INFO, NCCL_LOG_TRACE, NCCL_PROFILE), (2, 3, 5, 16384));
}
