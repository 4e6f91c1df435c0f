//! Each rule of the diagnosis table fires on its signature, and not on a
//! clean trace.

use gputrace_analysis::*;
use gputrace_format::*;

mod util;
use util::*;

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

fn rules(trace: TraceFile) -> Vec<FindingRule> {
    analyze(&[trace], &Options::default())
        .unwrap()
        .findings
        .iter()
        .map(|f| f.rule)
        .collect()
}

#[test]
fn a_dense_compute_trace_has_no_findings() {
    let mut b = Builder::new(Header::default());
    for i in 0..200 {
        b.kernel(0, 7, "gemm", i * 100 * US, (i + 1) * 100 * US, 0);
    }
    assert_eq!(rules(b.finish(0)), Vec::<FindingRule>::new());
}

#[test]
fn host_bound_idle() {
    // 10 kernels of 1 ms, each launched 1 ms after the previous one ended.
    let mut b = Builder::new(Header::default());
    for i in 0..10u64 {
        let start = i * 2 * MS;
        b.api("cudaLaunchKernel", start - (i > 0) as u64 * 5 * US, start, i as u32 + 1);
        b.kernel(0, 7, "gemm", start, start + MS, i as u32 + 1);
    }
    let r = analyze(&[b.finish(0)], &Options::default()).unwrap();
    let f = r
        .findings
        .iter()
        .find(|f| f.rule == FindingRule::HostBoundIdle)
        .expect("host-bound");
    assert_eq!(f.severity, Severity::High, "idle is 9 of 19 ms");
    assert!(
        (f.values[Value::HostBoundShareOfIdle] - (9.0 * 995.0) / (9.0 * 1000.0)).abs() < 1e-9,
        "{:?}",
        f.values
    );
}

#[test]
fn dependency_latency_and_synchronization() {
    // Everything launched up front: gaps are latency.
    let mut b = Builder::new(Header::default());
    for i in 0..10u64 {
        b.api("cudaLaunchKernel", i * US, i * US + 500, i as u32 + 1);
        b.kernel(0, 7, "gemm", 100 * US + i * 2 * MS, 100 * US + i * 2 * MS + MS, i as u32 + 1);
    }
    assert!(rules(b.finish(0)).contains(&FindingRule::DependencyLatencyIdle));

    // The CPU sits in cudaDeviceSynchronize through most of each gap.
    let mut b = Builder::new(Header::default());
    for i in 0..10u64 {
        let start = i * 2 * MS;
        if i > 0 {
            b.api("cudaDeviceSynchronize", start - MS, start - 10 * US, 0);
            b.api("cudaLaunchKernel", start - 10 * US, start - 5 * US, i as u32 + 1);
        }
        b.kernel(0, 7, "gemm", start, start + MS, i as u32 + 1);
    }
    let r = rules(b.finish(0));
    assert!(r.contains(&FindingRule::SynchronizationIdle), "{r:?}");
    assert!(!r.contains(&FindingRule::HostBoundIdle), "{r:?}");
}

#[test]
fn exposed_communication() {
    let mut b = Builder::new(Header::default());
    for i in 0..10u64 {
        let t = i * 10 * MS;
        b.kernel(0, 7, "gemm", t, t + 6 * MS, 0);
        b.kernel(0, 13, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", t + 5 * MS, t + 10 * MS, 0);
    }
    let r = analyze(&[b.finish(0)], &Options::default()).unwrap();
    let f = r
        .findings
        .iter()
        .find(|f| f.rule == FindingRule::ExposedCommunication)
        .expect("exposed comm");
    assert_eq!(f.severity, Severity::High);
    assert!((f.values[Value::ExposedCommunicationShare] - 0.4).abs() < 1e-9);
    // The same kernels are compute when the user drops the defaults.
    let mut b = Builder::new(Header::default());
    b.kernel(0, 13, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 0, 10, 0)
        .kernel(0, 13, "my_a2a_kernel", 10, 30, 0);
    let opts = Options {
        classifier: Classifier::empty().with_pattern("MY_A2A").unwrap(),
        ..Options::default()
    };
    let d = analyze(&[b.finish(0)], &opts).unwrap().ranks.remove(0).devices.remove(0);
    assert_eq!((d.time.compute_ns, d.time.communication_ns), (10, 20));
}

#[test]
fn launch_bound() {
    let mut b = Builder::new(Header::default());
    for i in 0..150u64 {
        b.kernel(0, 7, "tiny", i * 3 * US, i * 3 * US + 2 * US, 0);
    }
    assert!(rules(b.finish(0)).contains(&FindingRule::LaunchBound));
    // 99 kernels are too few to call.
    let mut b = Builder::new(Header::default());
    for i in 0..99u64 {
        b.kernel(0, 7, "tiny", i * 3 * US, i * 3 * US + 2 * US, 0);
    }
    assert!(!rules(b.finish(0)).contains(&FindingRule::LaunchBound));
}

#[test]
fn pageable_copies() {
    let mut b = Builder::new(Header::default());
    b.kernel(0, 7, "gemm", 0, 100 * MS, 0)
        .copy(8, CopyKind::HTOD, 10 * MS, 10 * MS + 200 * US, 2 << 20, true);
    assert!(rules(b.finish(0)).contains(&FindingRule::PageableCopies));
    let mut b = Builder::new(Header::default());
    b.kernel(0, 7, "gemm", 0, 100 * MS, 0)
        .copy(8, CopyKind::HTOD, 10 * MS, 10 * MS + 200 * US, 2 << 20, false);
    assert!(!rules(b.finish(0)).contains(&FindingRule::PageableCopies));
}

#[test]
fn checkpoint_pause_versus_plain_pause() {
    let build = |d2h_bytes: u64| {
        let mut b = Builder::new(Header::default());
        b.kernel(0, 7, "gemm", 0, 10 * MS, 0);
        b.copy(8, CopyKind::DTOH, 10 * MS, 12 * MS, d2h_bytes, false);
        b.kernel(0, 7, "gemm", 212 * MS, 400 * MS, 0);
        b.finish(0)
    };
    let r = analyze(&[build(64 << 20)], &Options::default()).unwrap();
    let f = r
        .findings
        .iter()
        .find(|f| f.rule == FindingRule::CheckpointPauses)
        .expect("checkpoint");
    assert_eq!(f.values[Value::D2hBytes], (64u64 << 20) as f64);
    assert_eq!(f.values[Value::PauseNs], (200 * MS) as f64);
    assert!(!r.findings.iter().any(|f| f.rule == FindingRule::LongPauses));
    let r = rules(build(4));
    assert!(
        r.contains(&FindingRule::LongPauses) && !r.contains(&FindingRule::CheckpointPauses),
        "{r:?}"
    );
}

#[test]
fn startup_teardown() {
    let mut b = Builder::new(header_with_window(1, &[0]));
    b.kernel(0, 7, "gemm", 50 * MS, 60 * MS, 0);
    let r = rules(b.finish(100 * MS));
    assert!(r.contains(&FindingRule::StartupTeardown), "{r:?}");
}
