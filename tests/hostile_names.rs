//! Names with terminal control bytes (issue #43 item 3): a kernel, host,
//! marker, API call, device or loss detail carrying ESC, BEL, CR, a newline,
//! DEL or a C1 control is shown escaped by every text output, never raw;
//! JSON keeps it exact.

use gputrace_format::*;
use std::path::{Path, PathBuf};
use std::process::Output;

mod common;
use common::{gputrace as run, text};

/// Retitles the terminal, clears it, returns the cursor and forges a line.
const EVIL: &str = "evil\x1b]0;pwned\x07\x1b[2J\x1b[31m\rFORGED\nFAKE LINE\x7f\u{9b}31m\u{202e}";

/// One rank of a small job whose every name is `EVIL`-laden.
fn write_rank(dir: &Path, rank: u32) -> PathBuf {
    let header = Header {
        hostname: format!("host{rank}{EVIL}"),
        pid: 100 + rank,
        rank: RankInfo {
            rank: Some(Rank(rank)),
            local_rank: Some(rank),
            world_size: Some(2),
            source: None,
        },
        command: vec!["python".into(), format!("train{EVIL}.py")],
        devices: vec![DeviceInfo {
            ordinal: DeviceId(0),
            name: format!("GPU{EVIL}"),
            ..DeviceInfo::default()
        }],
        extra: [(format!("key{EVIL}"), format!("value{EVIL}"))].into(),
        ..Header::default()
    };
    let mut w = TraceWriter::new(Vec::new(), &header, WriterOptions::default()).unwrap();
    let kernel = w.intern(&format!("gemm{EVIL}"));
    let nccl = w.intern(&format!("ncclKernel_AllReduce{EVIL}"));
    let api = w.intern(&format!("cudaLaunchKernel{EVIL}"));
    let loss = w.intern(&format!("lost{EVIL}"));
    let domain = w.intern("");
    let mut t = 1_000_000u64;
    for step in 0..4u32 {
        let step_name = w.intern(&format!("ProfilerStep#{step}"));
        let mark = w.intern(&format!("marker{EVIL}"));
        for name in [step_name, mark] {
            w.push(Event::Marker(Marker {
                start: Nanos(t),
                end: Nanos(t + 900_000),
                thread: ThreadId(1),
                name,
                domain,
                kind: MarkerKind::RANGE,
                color: 0,
            }))
            .unwrap();
        }
        for (i, name) in [kernel, kernel, nccl].into_iter().enumerate() {
            let corr = CorrelationId(step * 10 + i as u32 + 1);
            let start = t + 10_000 + i as u64 * 250_000;
            w.push(Event::Api(ApiCall {
                start: Nanos(start - 5_000),
                end: Nanos(start - 1_000),
                thread: ThreadId(1),
                correlation: corr,
                domain: ApiDomain::RUNTIME,
                cbid: 211,
                name: api,
                return_value: 0,
            }))
            .unwrap();
            w.push(Event::Kernel(Kernel {
                start: Nanos(start),
                end: Nanos(start + 200_000 + u64::from(rank) * 20_000),
                device: DeviceId(0),
                stream: StreamId(7),
                correlation: corr,
                name,
                ..Kernel::default()
            }))
            .unwrap();
        }
        t += 1_000_000;
    }
    w.push(Event::Loss(Loss {
        time: Nanos(t),
        source: LossSource::CUPTI_DROPPED,
        count: 3,
        detail: loss,
    }))
    .unwrap();
    let bytes = w.finish(Trailer::default()).unwrap();
    let path = dir.join(format!("evil.r{rank}.gtrace"));
    std::fs::write(&path, bytes).unwrap();
    path
}

fn job() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let job = dir.path().join("job");
    std::fs::create_dir(&job).unwrap();
    write_rank(&job, 0);
    write_rank(&job, 1);
    (dir, job)
}

/// The control characters in `s` other than newline and tab, with where they are.
fn raw_controls(s: &str) -> Vec<(usize, char)> {
    s.char_indices()
        .filter(|&(_, c)| c != '\n' && c != '\t' && (c.is_control() || c == '\u{202e}'))
        .collect()
}

/// Standard output and error of a text command hold no raw control byte, and show the
/// names escaped (so they were printed, not left out).
fn assert_clean(what: &str, out: &Output) {
    for (stream, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        let s = String::from_utf8(bytes.clone()).unwrap_or_else(|e| panic!("{what}: {stream} is not UTF-8: {e}"));
        let raw = raw_controls(&s);
        assert!(raw.is_empty(), "{what}: raw control characters on {stream} at {raw:?}:\n{s}");
        assert!(
            !s.lines().any(|l| l.starts_with("FAKE LINE")),
            "{what}: a name forged a line on {stream}:\n{s}"
        );
    }
    let all = text(&out.stdout) + &text(&out.stderr);
    assert!(
        all.contains("\\x1b]0;pwned\\x07"),
        "{what}: the names are not shown escaped:\n{all}"
    );
}

#[test]
fn text_outputs_escape_control_characters_in_names() {
    let (dir, job) = job();
    let job_s = job.to_str().unwrap();
    let r0 = job.join("evil.r0.gtrace");
    let r0_s = r0.to_str().unwrap();
    let r1 = job.join("evil.r1.gtrace");
    let perfetto = dir.path().join("out.pftrace");
    let cases: Vec<(&str, Vec<&str>)> = vec![
        ("report", vec!["report", job_s, "--top", "20"]),
        ("info", vec!["info", job_s]),
        ("diff", vec!["diff", r0_s, r1.to_str().unwrap()]),
        ("compare", vec!["compare", job_s]),
        ("metrics", vec!["metrics", job_s]),
        ("export", vec!["export", r0_s, "-o", perfetto.to_str().unwrap()]),
    ];
    for (what, args) in &cases {
        let out = run(args);
        assert!(out.status.success(), "{what}: {}", text(&out.stderr));
        if *what == "export" {
            // Its messages name files, not names: only clean is asked.
            for (stream, bytes) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
                assert!(raw_controls(&text(bytes)).is_empty(), "export {stream}: {}", text(bytes));
            }
            continue;
        }
        if *what == "metrics" {
            // The exposition escapes in its own syntax: no raw byte, names still there.
            let s = text(&out.stdout);
            assert!(raw_controls(&s).is_empty(), "metrics: {s}");
            assert!(s.contains("host0evil"), "metrics: {s}");
            continue;
        }
        assert_clean(what, &out);
    }
}

#[test]
fn json_outputs_keep_names_exact() {
    let (_dir, job) = job();
    let out = run(&["report", "--json", job.to_str().unwrap(), "--top", "20"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v["top_kernels"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|k| k["name"].as_str())
        .collect();
    assert!(names.contains(&format!("gemm{EVIL}").as_str()), "{names:?}");
    let out = run(&["info", "--json", job.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("\\u001b]0;pwned\\u0007"), "{}", text(&out.stdout));
}

/// With colour on (a terminal), the report's own colour sequences are the only
/// escape sequences on the terminal.
#[test]
fn colour_on_a_terminal_leaves_only_the_tools_own_sequences() {
    if std::process::Command::new("script").arg("--version").output().is_err() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but util-linux's `script` (a pseudo-terminal) is missing"
        );
        common::skip("no `script` command (util-linux) for a pseudo-terminal");
        return;
    }
    let (_dir, job) = job();
    let cmd = format!("'{}' report '{}'", env!("CARGO_BIN_EXE_gputrace"), job.display());
    let out = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env_remove("NO_COLOR")
        .env("TERM", "xterm")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The terminal turns each newline into CR LF.
    let s = text(&out.stdout).replace("\r\n", "\n");
    assert!(s.contains("\x1b[1m"), "colour is off under a terminal:\n{s}");
    let mut rest = s.as_str();
    let mut sequences = 0;
    while let Some(i) = rest.find('\x1b') {
        let after = &rest[i + 1..];
        let params = after
            .strip_prefix('[')
            .map(|p| p.chars().take_while(|c| c.is_ascii_digit() || *c == ';').count());
        let ok = params.is_some_and(|n| after[1 + n..].starts_with('m'));
        assert!(
            ok,
            "an escape sequence that is not the tool's colour: {:?}",
            &rest[i..(i + 16).min(rest.len())]
        );
        sequences += 1;
        rest = after;
    }
    assert!(sequences > 0);
    let without_sgr: String = {
        let mut t = String::new();
        let mut r = s.as_str();
        while let Some(i) = r.find("\x1b[") {
            t.push_str(&r[..i]);
            let n = r[i + 2..].find('m').unwrap();
            r = &r[i + 3 + n..];
        }
        t.push_str(r);
        t
    };
    assert!(raw_controls(&without_sgr).is_empty(), "{without_sgr}");
    assert!(without_sgr.contains("\\x1b]0;pwned\\x07"), "{without_sgr}");
}
