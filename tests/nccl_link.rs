//! NCCL collectives linked to the kernels that ran them, end to end without
//! a GPU: the real `gputrace run`, the real agent (as CUDA injection *and*
//! as NCCL's profiler plugin), the fake libcuda/libcupti (tests/doubles) and
//! `testprog nccl N`, which plays NCCL 2.28 (profiler interface v5) against
//! the library named by `NCCL_PROFILER_PLUGIN`.
//!
//! The chain under test (agent/src/nccl/link.rs): the plugin pushes a CUPTI
//! external correlation id (CUSTOM2) around each `KernelLaunch` event; the
//! fake CUPTI's `nccl_kernels N` step answers each push the way CUPTI does
//! for a launch inside it: an EXTERNAL_CORRELATION record (id → correlation
//! id) and a kernel record with that correlation id. The agent must join
//! them and write each collective with its kernel's times, device, stream
//! and correlation id.
//!
//! The agent library must be built first: `cargo build --workspace`.

use gputrace_format::{Event, StreamId, TraceFile};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output};

const COMM: u64 = 0xC0FFEE;
const N: usize = 20;
const NCCL_KERNEL: &str = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)";

mod common;
use common::text;

struct Run {
    out: Output,
    dir: tempfile::TempDir,
    report: BTreeMap<String, String>,
    what: String,
}

impl Run {
    fn trace(&self) -> TraceFile {
        let files = common::trace_files(&self.dir.path().join("traces"));
        assert_eq!(
            files.len(),
            1,
            "{}: one trace expected: {files:?}; stderr: {}",
            self.what,
            self.stderr()
        );
        TraceFile::open(&files[0]).unwrap()
    }
    fn n(&self, key: &str) -> u64 {
        self.report.get(key).and_then(|v| v.parse().ok()).unwrap_or(0)
    }
    fn stderr(&self) -> String {
        text(&self.out.stderr)
    }
    /// What the fake CUPTI delivered, from its per-record log.
    fn records(&self) -> Vec<Record> {
        let t = std::fs::read_to_string(self.dir.path().join("report.records")).unwrap_or_default();
        t.lines()
            .map(|l| {
                let (head, name) = l.split_once(" name=").unwrap_or((l, ""));
                let kv: BTreeMap<&str, u64> = head
                    .split(' ')
                    .filter_map(|t| t.split_once('='))
                    .map(|(k, v)| (k, v.parse().unwrap_or(0)))
                    .collect();
                let get = |k: &str| kv.get(k).copied().unwrap_or(0);
                Record {
                    kind: get("kind") as u32,
                    corr: get("corr") as u32,
                    start: get("start"),
                    end: get("end"),
                    stream: get("stream") as u32,
                    external_kind: get("externalKind") as u32,
                    name: name.to_string(),
                }
            })
            .collect()
    }
}

/// One line of `$FAKE_CUPTI_REPORT.records`.
struct Record {
    kind: u32,
    corr: u32,
    start: u64,
    end: u64,
    stream: u32,
    external_kind: u32,
    name: String,
}

/// `gputrace run [FLAGS] -o DIR/traces -- testprog --ms 0 nccl N` with a
/// scenario for the fake CUPTI of `cupti_major`, under a time limit. `--ms 0`:
/// the scenario's `nccl_kernels` step waits for the plugin's pushes, so the
/// first `fakecuda_work` must not wait for the scenario (testprog.c).
fn run_nccl(what: &str, cupti_major: u32, scenario: &str, flags: &[&str]) -> Run {
    // `gputrace run` points NCCL_PROFILER_PLUGIN at the agent unless the user
    // chose another plugin; nothing here may turn it off.
    let unset = ["NCCL_PROFILER_PLUGIN", "GPUTRACE_NCCL", "GPUTRACE_API", "GPUTRACE_DISABLE"];
    let n = N.to_string();
    let common::DoublesRun { out, dir, report } =
        common::run_testprog(cupti_major, scenario, flags, &["--ms", "0", "nccl", &n], &[], &unset);
    let run = Run {
        out,
        dir,
        report,
        what: what.to_string(),
    };
    assert_eq!(
        run.out.status.code(),
        Some(0),
        "{what}: testprog exit code; stderr:\n{}",
        run.stderr()
    );
    run
}

fn events(t: &TraceFile) -> Vec<Event> {
    t.events().collect::<Result<_, _>>().unwrap()
}

fn nccl_plugin_line(what: &str, t: &TraceFile) -> String {
    t.trailer()
        .unwrap_or_else(|| panic!("{what}: the trace has a trailer"))
        .extra
        .get("nccl.plugin")
        .unwrap_or_else(|| panic!("{what}: trailer extra nccl.plugin: {:?}", t.trailer().unwrap().extra))
        .clone()
}

/// The communicator and the NCCL fields every collective carries, linked or
/// not.
fn check_nccl_metadata(what: &str, t: &TraceFile, evs: &[Event]) {
    let comms = t.communicators();
    assert_eq!(comms.len(), 1, "{what}: {comms:?}");
    let c = &comms[0];
    assert_eq!(
        (c.id.0, c.name.as_str(), c.rank, c.nranks, c.nodes, c.plugin_version),
        (COMM, "dp", 0, 2, 1, 5),
        "{what}: {c:?}"
    );
    let mut seqs = BTreeSet::new();
    for e in evs {
        if let Event::Collective(col) = e {
            assert_eq!(col.comm.0, COMM, "{what}: {col:?}");
            assert_eq!(t.name(col.op), "AllReduce", "{what}");
            assert_eq!(col.count, 1024, "{what}");
            assert_eq!(t.name(col.datatype), "bf16", "{what}");
            assert_eq!(col.bytes, 2048, "{what}: 1024 × bf16");
            assert_eq!(t.name(col.algorithm), "RING", "{what}");
            assert_eq!(t.name(col.protocol), "LL", "{what}");
            assert_eq!((col.rank, col.nranks, col.channels), (0, 2, 2), "{what}");
            assert_ne!(col.enqueue.0, 0, "{what}: the CollApi time is known");
            assert!(seqs.insert(col.seq), "{what}: seq {} twice", col.seq);
        }
    }
    assert_eq!(seqs, (0..N as u64).collect::<BTreeSet<_>>(), "{what}: seq 0..{N} once each");
}

fn collectives(evs: &[Event]) -> Vec<gputrace_format::Collective> {
    let mut v: Vec<_> = evs
        .iter()
        .filter_map(|e| if let Event::Collective(c) = e { Some(*c) } else { None })
        .collect();
    v.sort_by_key(|c| c.seq);
    v
}

/// The CUPTI versions and the push call the agent uses with each: 13.5
/// subscribes with the multi-subscriber API, so it pushes with the
/// subscriber-scoped (`_v2`) call; 13.0 and 12.9 use the global (v1) one.
const VERSIONS: [(u32, &str, &str); 3] = [
    (13, "13.5", "cuptiActivityPushExternalCorrelationId_v2"),
    (13, "13.0", "cuptiActivityPushExternalCorrelationId"),
    (12, "12.9", "cuptiActivityPushExternalCorrelationId"),
];

/// Ordinary kernels (with their API records) before the NCCL ones, and a
/// few after; `pause` before the NCCL kernels' records (a `sleep_ms` line or
/// nothing).
fn linked_scenario(version: &str, pause: &str) -> String {
    format!(
        "version {version}\ndevice\nkernels 10 10000 5000 void gemm<bf16>(bf16 const*, bf16*)\napi 10\n\
         {pause}nccl_kernels {N}\nkernels 5 8000 2000\n"
    )
}

#[test]
fn collectives_are_linked_to_the_kernels_nccl_launched() {
    // The kernels' records come 100 ms after the collectives (the GPU ran
    // them later); they reach the agent at its exit flush.
    for (major, version, push_fn) in VERSIONS {
        let what = format!("CUPTI {version}");
        let run = run_nccl(&what, major, &linked_scenario(version, "sleep_ms 100\n"), &[]);
        check_linked(&what, &run, push_fn);
    }
}

#[test]
fn collectives_are_linked_when_the_job_exits_right_after_them() {
    // No pause: the job calls NCCL, the fake CUPTI answers at once and the
    // job exits within a few ms, often before the agent's writer thread has
    // run once since NCCL's `init`. Repeated because that is a race.
    for round in 0..3 {
        for (major, version, push_fn) in VERSIONS {
            let what = format!("CUPTI {version}, no pause, round {round}");
            let run = run_nccl(&what, major, &linked_scenario(version, ""), &[]);
            check_linked(&what, &run, push_fn);
        }
    }
}

/// Every collective of a `linked_scenario` run carries its own kernel.
fn check_linked(what: &str, run: &Run, push_fn: &str) {
    // The fake saw balanced pushes/pops on the launching thread, through
    // the API flavour matching the subscription, and played every one.
    let pop_fn = push_fn.replace("Push", "Pop");
    assert_eq!(run.n(&format!("calls.{push_fn}")), N as u64, "{what}: {:?}", run.report);
    assert_eq!(run.n(&format!("calls.{pop_fn}")), N as u64, "{what}: {:?}", run.report);
    for (k, v) in [
        ("ext_corr.pushed", N as u64),
        ("ext_corr.popped", N as u64),
        ("ext_corr.pop_empty", 0),
        ("ext_corr.consumed", N as u64),
        ("enabled.39", 1),
        ("delivered.39", N as u64),
        ("mixed_calls", 0),
        ("failures.injected", 0),
    ] {
        assert_eq!(run.n(k), v, "{what}: report {k}: {:?}", run.report);
    }

    // What the fake delivered: the NCCL kernels and, per push, the
    // external correlation record naming the kernel's correlation id.
    let recs = run.records();
    let nccl_kernels: BTreeMap<u32, &Record> = recs
        .iter()
        .filter(|r| r.kind == 10 && r.name == NCCL_KERNEL)
        .map(|r| (r.corr, r))
        .collect();
    assert_eq!(nccl_kernels.len(), N, "{what}: NCCL kernel records delivered");
    let mut ext_corrs: Vec<u32> = recs
        .iter()
        .filter(|r| r.kind == 39)
        .map(|r| {
            assert_eq!(r.external_kind, 5, "{what}: CUSTOM2");
            r.corr
        })
        .collect();
    ext_corrs.sort();
    assert_eq!(ext_corrs, nccl_kernels.keys().copied().collect::<Vec<_>>(), "{what}");

    let t = run.trace();
    assert!(t.damage().is_none(), "{what}: complete file");
    let evs = events(&t);
    check_nccl_metadata(what, &t, &evs);
    let kernels: BTreeMap<u32, gputrace_format::Kernel> = evs
        .iter()
        .filter_map(|e| {
            if let Event::Kernel(k) = e {
                Some((k.correlation.0, *k))
            } else {
                None
            }
        })
        .collect();
    assert_eq!(kernels.len(), 10 + N + 5, "{what}: every kernel is in the trace");
    let cols = collectives(&evs);
    assert_eq!(cols.len(), N, "{what}");
    for (i, col) in cols.iter().enumerate() {
        let corr = col.correlation.0;
        assert_ne!(
            corr,
            0,
            "{what}: collective seq {} is not linked ({}): {col:?}",
            col.seq,
            nccl_plugin_line(what, &t)
        );
        let k = kernels
            .get(&corr)
            .unwrap_or_else(|| panic!("{what}: seq {}: no kernel with correlation {corr}", col.seq));
        assert_eq!(t.name(k.name), NCCL_KERNEL, "{what}: seq {} linked to a non-NCCL kernel", col.seq);
        assert_eq!(
            (col.start, col.end),
            (k.start, k.end),
            "{what}: seq {}: the kernel's GPU times",
            col.seq
        );
        assert_eq!((col.device, col.stream), (k.device, k.stream), "{what}: seq {}", col.seq);
        assert_eq!(col.end.0 - col.start.0, 20_000, "{what}: nccl_kernels' default duration");
        // Each push is answered in order: the i-th collective ran the
        // kernel of the i-th launch (correlation ids grow with pushes).
        assert_eq!(corr, ext_corrs[i], "{what}: seq {} linked to another launch's kernel", col.seq);
        let rec = nccl_kernels[&corr];
        assert_eq!(
            (k.start.0, k.end.0, k.stream.0),
            (rec.start, rec.end, rec.stream),
            "{what}: kernel as delivered"
        );
        // Same time domain: the API call was at most seconds before.
        assert!(col.enqueue.0.abs_diff(col.start.0) < 5_000_000_000, "{what}: {col:?}");
    }
    let linked: BTreeSet<u32> = cols.iter().map(|c| c.correlation.0).collect();
    assert_eq!(linked.len(), N, "{what}: one kernel per collective");

    let line = nccl_plugin_line(what, &t);
    assert!(
        line.contains("profiler interface v5") && line.contains(&format!("; {N} collectives linked to their kernels, 0 not linked")),
        "{what}: {line}"
    );
    // `gputrace run`'s closing summary says it too.
    let summary = format!("{N} NCCL collectives, {N} linked to kernels");
    assert!(run.stderr().contains(&summary), "{what}: {}", run.stderr());
}

/// Collectives written without their kernel: all present, CPU time only.
fn check_unlinked(what: &str, run: &Run) {
    let t = run.trace();
    let evs = events(&t);
    check_nccl_metadata(what, &t, &evs);
    let nccl_kernels = evs
        .iter()
        .filter(|e| matches!(e, Event::Kernel(k) if t.name(k.name) == NCCL_KERNEL))
        .count();
    assert_eq!(nccl_kernels, N, "{what}: the NCCL kernels are in the trace, only not linked");
    let cols = collectives(&evs);
    assert_eq!(cols.len(), N, "{what}");
    for col in &cols {
        assert_eq!(col.correlation.0, 0, "{what}: {col:?}");
        assert_eq!((col.start, col.end), (col.enqueue, col.enqueue), "{what}: {col:?}");
        assert_eq!(col.stream, StreamId::UNKNOWN, "{what}: {col:?}");
    }
    let line = nccl_plugin_line(what, &t);
    assert!(
        line.contains(&format!("; 0 collectives linked to their kernels, {N} not linked")),
        "{what}: {line}"
    );
}

/// The NCCL kernels without any EXTERNAL_CORRELATION record: what CUPTI
/// delivers when nothing was pushed (`nccl_kernels` would wait for pushes).
fn plain_nccl_kernels(version: &str) -> String {
    format!("version {version}\ndevice\nkernels {N} 20000 5000 {NCCL_KERNEL}\n")
}

#[test]
fn without_api_records_collectives_stay_unlinked() {
    // --no-api: no EXTERNAL_CORRELATION kind, so the plugin pushes nothing.
    let what = "--no-api";
    let run = run_nccl(what, 13, &plain_nccl_kernels("13.5"), &["--no-api"]);
    for k in [
        "enabled.39",
        "ext_corr.pushed",
        "calls.cuptiActivityPushExternalCorrelationId",
        "calls.cuptiActivityPushExternalCorrelationId_v2",
        "calls.cuptiActivityPopExternalCorrelationId",
        "calls.cuptiActivityPopExternalCorrelationId_v2",
    ] {
        assert_eq!(run.n(k), 0, "{what}: report {k}: {:?}", run.report);
    }
    check_unlinked(what, &run);
}

#[test]
fn a_failing_push_leaves_collectives_unlinked_and_is_never_popped() {
    for (major, version, push_fn) in [
        (13, "13.5", "cuptiActivityPushExternalCorrelationId_v2"),
        (12, "12.9", "cuptiActivityPushExternalCorrelationId"),
    ] {
        let what = format!("failing {push_fn} on CUPTI {version}");
        let scenario = format!("fail {push_fn} 1\n{}", plain_nccl_kernels(version));
        let run = run_nccl(&what, major, &scenario, &[]);
        let pop_fn = push_fn.replace("Push", "Pop");
        assert_eq!(run.n("enabled.39"), 1, "{what}: {:?}", run.report);
        assert_eq!(run.n(&format!("calls.{push_fn}")), N as u64, "{what}: {:?}", run.report);
        assert_eq!(run.n("failures.injected"), N as u64, "{what}: {:?}", run.report);
        assert_eq!(run.n(&format!("calls.{pop_fn}")), 0, "{what}: popped what was never pushed");
        assert_eq!(run.n("ext_corr.pushed"), 0, "{what}");
        check_unlinked(&what, &run);
    }
}

/// The doubles check themselves against a minimal C agent (record counts,
/// push/pop semantics, the no-driver behaviours of each CUPTI version): a
/// double that drifts from CUPTI would make the tests above meaningless.
#[test]
fn the_doubles_pass_their_own_selftest() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/doubles/selftest.sh");
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("sh").arg(&script).arg(dir.path()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("selftest: all passed"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
