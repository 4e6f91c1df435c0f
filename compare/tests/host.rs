//! A `host`-caused straggler explained by its host samples: the view is
//! taken over the waits it imposed (on its own clock, the stretch before
//! each collective it arrived last at), not over its whole run.

use gputrace_compare::{compare, summarize, Options};
use gputrace_format::host::*;
use gputrace_format::*;
use gputrace_synth::{schedule, write_rank, JobConfig};

const LATE: u32 = 3;

fn cfg() -> JobConfig {
    JobConfig {
        ranks: 4,
        gpus_per_node: 1,
        steps: 6,
        layers: 4,
        slow_rank: None,
        late_host_rank: Some(LATE),
        slow_link_rank: None,
        stall_step: None,
        ..JobConfig::default()
    }
}

/// `bytes` (a finished trace of process `pid`) with host samples: the main
/// thread runs in `late_work` inside `windows` and sleeps in `elsewhere`
/// from `from` to `to` outside them (far longer in all).
fn with_samples(mut bytes: Vec<u8>, pid: u32, windows: &[(u64, u64)], (from, to): (u64, u64)) -> Vec<u8> {
    let first = TraceFile::from_bytes("r.gtrace", bytes.clone()).unwrap().string_count();
    bytes.extend(encode_strings_chunk(first, &["late_work", "elsewhere", "/home/me/train.py"]));
    let s = |i: usize| StringId((first + i) as u32);
    let mut runs = Vec::new();
    let mut at = from;
    for &(a, b) in windows {
        if a > at {
            runs.push((at, a, ThreadState::Sleeping, 0u64, 1u32));
        }
        runs.push((a, b, ThreadState::Running, b - a, 0));
        at = b;
    }
    runs.push((at, to, ThreadState::Sleeping, 0, 1));
    let samples = HostSamples {
        hz: 100,
        threads: vec![HostThread {
            pid,
            tid: pid,
            name: "python".into(),
        }],
        frames: vec![
            HostFrame {
                function: s(0),
                file: s(2),
                line: 7,
            },
            HostFrame {
                function: s(1),
                file: s(2),
                line: 9,
            },
        ],
        stacks: vec![vec![0], vec![1]],
        runs: runs
            .into_iter()
            .map(|(a, b, state, cpu_ns, stack)| HostRun {
                start: Nanos(a),
                end: Nanos(b),
                thread: 0,
                state,
                cpu_ns,
                stack: Some(stack),
                samples: 1,
            })
            .collect(),
        losses: Default::default(),
    };
    bytes.extend(encode_chunks(&samples, 1000, 1).unwrap());
    bytes
}

#[test]
fn a_host_straggler_gets_the_host_view_of_the_waits_it_imposed() {
    let cfg = cfg();
    let s = schedule(&cfg);
    let bytes: Vec<Vec<u8>> = (0..cfg.ranks).map(|r| write_rank(&cfg, &s, r, Vec::new()).unwrap().0).collect();
    let open = |bytes: &[Vec<u8>]| -> Vec<TraceFile> {
        bytes
            .iter()
            .enumerate()
            .map(|(r, b)| TraceFile::from_bytes(format!("rank{r}.gtrace"), b.clone()).unwrap())
            .collect()
    };
    let plain = compare(&open(&bytes), &Options::default()).unwrap();
    assert_eq!(plain.stragglers[0].rank, LATE);
    assert_eq!(
        plain.stragglers[0].cause,
        gputrace_compare::Cause::Host,
        "{}",
        plain.stragglers[0].why
    );
    assert!(plain.stragglers[0].host.is_none(), "no samples, no host view");

    // The late rank's waits on its own clock, worked out here from its collectives.
    let late = &open(&bytes)[LATE as usize];
    let own = summarize(late, LATE).unwrap();
    let mut windows: Vec<(u64, u64)> = plain
        .collectives
        .iter()
        .filter(|row| row.last_rank == LATE && row.imposed_ns > 0)
        .map(|row| {
            let c = own
                .collectives
                .iter()
                .find(|c| (c.key.comm, c.key.op.as_str(), c.key.seq) == (row.comm, row.op.as_str(), row.seq))
                .unwrap();
            (c.start - row.imposed_ns, c.start)
        })
        .collect();
    windows.sort_unstable();
    assert!(!windows.is_empty());
    let waited: u64 = windows.iter().map(|(a, b)| b - a).sum();
    let first = late.events().map(|e| e.unwrap().start().0).min().unwrap();
    let last = late.events().map(|e| e.unwrap().end().0).max().unwrap();
    assert!(
        last - first > 2 * waited,
        "the rest of the run ({} ns) must outweigh the waits ({waited} ns)",
        last - first
    );

    let mut with = bytes.clone();
    with[LATE as usize] = with_samples(bytes[LATE as usize].clone(), late.header().pid, &windows, (first, last));
    let c = compare(&open(&with), &Options::default()).unwrap();
    let st = &c.stragglers[0];
    let view = st.host.as_ref().expect("the host straggler gets a host view");
    assert_eq!(view.window_ns, waited);
    assert_eq!(view.main_running_ns, waited, "running exactly in the waits");
    assert_eq!(view.stacks[0].frames, ["late_work (train.py:7)"]);
    assert_eq!(view.cause, gputrace_analysis::host::HostCause::HostCompute);
    assert!(
        st.why.contains("its host was host compute") && st.why.contains("late_work"),
        "{}",
        st.why
    );
    assert!(gputrace_compare::render_text(&c).contains("late_work"));
}
