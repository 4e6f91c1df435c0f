//! A regression corpus of hostile inputs (issue #43): the classes of the
//! security review, generated here from small seeds with a fixed random
//! sequence (no stored blobs), each run through the commands that read it
//! in a child process under a time limit:
//!
//! * `.gtrace` files cut at many points, with bytes flipped, overwritten
//!   with 0x00/0xFF runs and with all-ones length-like words;
//! * Kineto JSON (plain and gzip) cut, flipped, and shaped to hurt: deep
//!   nesting, huge numbers and strings, wrong types, invalid UTF-8, control
//!   bytes in names, a second `traceEvents`, a BOM, empty and non-object
//!   documents;
//! * rule files (`--classify`) that are not TOML, not UTF-8, deeply nested,
//!   wrongly typed, or carry control bytes;
//!
//! Every run must end (no hang), without a panic or a signal, with exit 0
//! or 2, an error naming the file when it fails, and no raw control byte on
//! the terminal. A failing input is kept under `target/hostile-corpus/` with
//! the command that failed.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

/// Longest a single command may take on one hostile input.
const LIMIT: Duration = Duration::from_secs(30);

/// xorshift64*: a fixed sequence, so every run sees the same corpus.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// One hostile input: a file name and its bytes.
struct Case {
    name: String,
    bytes: Vec<u8>,
}

fn case(name: impl Into<String>, bytes: impl Into<Vec<u8>>) -> Case {
    Case {
        name: name.into(),
        bytes: bytes.into(),
    }
}

/// Cuts, flips and overwrites of `seed` (`stem.N.ext`).
fn mutations(seed: &[u8], stem: &str, ext: &str, rng: &mut Rng, flips: usize) -> Vec<Case> {
    let mut out = Vec::new();
    let n = seed.len();
    let mut cuts: Vec<usize> = vec![0, 1, 2, 7, 8, 15, 16, 31, 32, 63, 64, n / 4, n / 2, n - 1];
    cuts.extend((0..12).map(|_| rng.below(n)));
    for (i, at) in cuts.into_iter().filter(|&a| a < n).enumerate() {
        out.push(case(format!("{stem}.cut{i}.{ext}"), &seed[..at]));
    }
    for i in 0..flips {
        let mut b = seed.to_vec();
        let at = rng.below(n);
        b[at] ^= 1 << rng.below(8);
        out.push(case(format!("{stem}.flip{i}.{ext}"), b));
    }
    for i in 0..flips / 3 {
        let mut b = seed.to_vec();
        let at = rng.below(n.saturating_sub(8));
        let fill = if i % 2 == 0 { 0x00 } else { 0xFF };
        b[at..at + 8].fill(fill);
        out.push(case(format!("{stem}.fill{i}.{ext}"), b));
    }
    for i in 0..flips / 3 {
        // A word that, where a length or count is read, claims everything.
        let mut b = seed.to_vec();
        let at = if i < 4 { 8 + 4 * i } else { rng.below(n.saturating_sub(4)) };
        b[at..at + 4].copy_from_slice(&[0xFF, 0xFF, 0xFF, 0x7F]);
        out.push(case(format!("{stem}.len{i}.{ext}"), b));
    }
    out
}

/// A small Kineto trace: GPU work, runtime calls, a flow, CPU operators, metadata.
fn kineto_seed() -> String {
    let mut events = vec![
        r#"{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}"#.to_string(),
        r#"{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 5, "dur": 40}"#.to_string(),
    ];
    for i in 0..12u32 {
        let ts = 10 + i * 20;
        events.push(format!(
            r#"{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": {ts}, "dur": 3, "args": {{"correlation": {i}, "cbid": 211}}}}"#
        ));
        events.push(format!(
            r#"{{"ph": "X", "cat": "kernel", "name": "gemm_{i}", "pid": 0, "tid": 7, "ts": {}.5, "dur": 9.25, "args": {{"device": 0, "stream": 7, "correlation": {i}, "grid": [1, 2, 3], "block": [128, 1, 1]}}}}"#,
            ts + 4
        ));
        events.push(format!(
            r#"{{"ph": "s", "cat": "ac2g", "id": {i}, "pid": 1, "tid": 1, "ts": {ts}, "name": "ac2g"}}"#
        ));
    }
    events.push(r#"{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": 300, "dur": 5, "args": {"device": 0, "stream": 7, "bytes": 4096, "correlation": 99}}"#.to_string());
    format!(
        r#"{{"schemaVersion": 1, "distributedInfo": {{"rank": 0, "world_size": 1}}, "deviceProperties": [{{"id": 0, "name": "H100"}}], "traceEvents": [
{}
], "traceName": "x", "baseTimeNanoseconds": 1700000000000000000}}"#,
        events.join(",\n")
    )
}

fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

/// Kineto documents built to hurt a parser.
fn kineto_shapes(seed: &str) -> Vec<Case> {
    let ev = |body: &str| format!(r#"{{"traceEvents": [{body}]}}"#);
    let mut v = vec![
        case("k.empty.json", ""),
        case("k.null.json", "null"),
        case("k.array.json", "[]"),
        case("k.string.json", "\"traceEvents\""),
        case("k.events-object.json", r#"{"traceEvents": {}}"#),
        case("k.events-twice.json", r#"{"traceEvents": [], "traceEvents": [{"ph": "X"}]}"#),
        case("k.bom.json", format!("\u{feff}{seed}")),
        case("k.trailing.json", format!("{seed} {{}}")),
        case("k.deep-array.json", format!(r#"{{"traceEvents": [{}"#, "[".repeat(200_000))),
        case("k.deep-object.json", ev(&format!("{}{}", "{\"a\":".repeat(50_000), "1"))),
        case("k.deep-closed.json", ev(&format!("{}1{}", "[".repeat(5_000), "]".repeat(5_000)))),
        case(
            "k.deep-meta.json",
            format!(
                r#"{{"distributedInfo": {}1{}, "traceEvents": []}}"#,
                "[".repeat(100_000),
                "]".repeat(100_000)
            ),
        ),
        case(
            "k.huge-exponent.json",
            ev(r#"{"ph": "X", "cat": "kernel", "name": "k", "ts": 1e999999999, "dur": 1, "args": {}}"#),
        ),
        case(
            "k.long-digits.json",
            ev(&format!(
                r#"{{"ph": "X", "cat": "kernel", "name": "k", "ts": 1{}, "dur": 1, "args": {{}}}}"#,
                "0".repeat(100_000)
            )),
        ),
        case(
            "k.negative.json",
            ev(r#"{"ph": "X", "cat": "kernel", "name": "k", "ts": -5, "dur": -1, "args": {"device": -1, "stream": -7}}"#),
        ),
        case(
            "k.max.json",
            ev(
                r#"{"ph": "X", "cat": "kernel", "name": "k", "ts": 18446744073709551615, "dur": 18446744073709551615, "args": {"device": 4294967296, "correlation": 99999999999999999999}}"#,
            ),
        ),
        case(
            "k.wrong-types.json",
            ev(r#"{"ph": 1, "cat": ["kernel"], "name": {}, "ts": "10", "dur": null, "args": "x"}"#),
        ),
        case(
            "k.nan.json",
            ev(r#"{"ph": "X", "cat": "kernel", "name": "k", "ts": NaN, "dur": Infinity, "args": {}}"#),
        ),
        case(
            "k.long-name.json",
            ev(&format!(
                r#"{{"ph": "X", "cat": "kernel", "name": "{}", "ts": 1, "dur": 1, "args": {{"device": 0, "stream": 7}}}}"#,
                "k".repeat(2 << 20)
            )),
        ),
        case(
            "k.control-names.json",
            ev(
                r#"{"ph": "X", "cat": "kernel\u001b[2J", "name": "k\u001b]0;x\u0007\r\n", "ts": 1, "dur": 1, "args": {"device": 0, "stream": 7}}, {"ph": "X", "cat": "kernel", "name": "k\u001b]0;x\u0007\rFORGED\nLINE", "ts": 1, "dur": 1, "args": {"device": 0, "stream": 7}}"#,
            ),
        ),
        case(
            "k.escapes.json",
            ev(r#"{"ph": "X", "cat": "kernel", "name": "\ud800\udc00\ud800 \u0000", "ts": 1, "dur": 1, "args": {}}"#),
        ),
        case("k.many-empty.json", ev(&vec!["{}"; 50_000].join(","))),
        case("k.many-scalars.json", ev(&vec!["1"; 50_000].join(","))),
    ];
    let mut bad_utf8 = ev(r#"{"ph": "X", "cat": "kernel", "name": "kXX", "ts": 1, "dur": 1, "args": {}}"#).into_bytes();
    let at = bad_utf8.windows(3).position(|w| w == b"kXX").unwrap();
    bad_utf8[at + 1] = 0xC3;
    bad_utf8[at + 2] = 0x28;
    v.push(case("k.bad-utf8.json", bad_utf8));
    v.push(case("k.gz-garbage.json.gz", [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 1, 2, 3, 4, 5]));
    let mut two = gzip(seed.as_bytes());
    two.extend_from_slice(&gzip(b"garbage after a complete member"));
    v.push(case("k.gz-two-members.json.gz", two));
    v
}

/// Rule files that are not what `--classify` wants.
fn rule_files() -> Vec<Case> {
    vec![
        case("r.empty.toml", ""),
        case("r.garbage.toml", [0u8, 1, 2, 0xFF, 0xFE, b'[', b'[']),
        case("r.not-utf8.toml", b"[[rule]]\npattern = \"\xC3\x28\"\n".to_vec()),
        case("r.no-pattern.toml", "[[rule]]\nlibrary = \"x\"\n"),
        case("r.empty-pattern.toml", "[[rule]]\npattern = \"\"\n"),
        case("r.wrong-type.toml", "[[rule]]\npattern = 5\ncategory = [\"compute\"]\n"),
        case("r.bad-category.toml", "[[rule]]\npattern = \"x\"\ncategory = \"teleport\"\n"),
        case("r.unknown-key.toml", "[[rule]]\npattern = \"x\"\npriority = 1\n"),
        case("r.rule-not-array.toml", "rule = \"nccl\"\n"),
        case("r.deep-array.toml", format!("x = {}1{}\n", "[".repeat(20_000), "]".repeat(20_000))),
        case(
            "r.deep-table.toml",
            format!("x = {}1{}\n", "{a = ".repeat(20_000), "}".repeat(20_000)),
        ),
        case(
            "r.control.toml",
            "[[rule]]\npattern = \"nccl\\u001b]0;x\\u0007\"\nlibrary = \"lib\\u001b[2J\\r\"\n",
        ),
        case("r.long-pattern.toml", format!("[[rule]]\npattern = \"{}\"\n", "a".repeat(1 << 20))),
        case(
            "r.many.toml",
            (0..3000).map(|i| format!("[[rule]]\npattern = \"p{i}\"\n")).collect::<String>(),
        ),
        case("r.unterminated.toml", "[[rule]]\npattern = \"nccl\n"),
    ]
}

/// What one command did with one input.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Run `gputrace ARGS` with its outputs in files (a full pipe cannot stall
/// it), killed at [`LIMIT`].
fn run_bounded(args: &[&str], scratch: &Path) -> Result<Run, String> {
    let (out_path, err_path) = (scratch.join("stdout"), scratch.join("stderr"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_gputrace"))
        .args(args)
        .env_remove("GPUTRACE_CLASSIFY")
        .env("GPUTRACE_THREADS", "2")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + LIMIT;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("no answer within {} s", LIMIT.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let read = |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
    Ok(Run {
        code: status.code(),
        stdout: read(&out_path),
        stderr: read(&err_path),
    })
}

/// Why `run` of `args` on `input` is wrong, if it is.
fn judge(run: &Run, input: &str) -> Option<String> {
    if run.stderr.contains("panicked") || run.code == Some(101) {
        return Some("panicked".into());
    }
    match run.code {
        Some(0) => {}
        Some(2) => {
            if !run.stderr.contains("gputrace: error:") || !run.stderr.contains(input) {
                return Some(format!("the error does not name {input}"));
            }
        }
        Some(c) => return Some(format!("exit {c}")),
        None => return Some("killed by a signal".into()),
    }
    for (stream, s) in [("stdout", &run.stdout), ("stderr", &run.stderr)] {
        if let Some(c) = s.chars().find(|&c| c != '\n' && c != '\t' && c.is_control()) {
            return Some(format!("a raw control character {:?} on {stream}", c));
        }
    }
    None
}

/// Runs of a corpus: how many, how many the command refused (exit 2).
#[derive(Debug, Default)]
struct Tally {
    runs: usize,
    refused: usize,
}

/// Write each case, run each command on it (`{}` stands for its path, `{out}` for an
/// output path), and collect the failures.
fn check(cases: &[Case], commands: &[&[&str]], dir: &Path, failures: &mut Vec<String>) -> Tally {
    let scratch = dir.join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let mut tally = Tally::default();
    for c in cases {
        let path = dir.join(&c.name);
        std::fs::write(&path, &c.bytes).unwrap();
        let out = dir.join("out.gtrace");
        for cmd in commands {
            let args: Vec<String> = cmd
                .iter()
                .map(|a| a.replace("{out}", out.to_str().unwrap()).replace("{}", path.to_str().unwrap()))
                .collect();
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            tally.runs += 1;
            let verdict = match run_bounded(&args, &scratch) {
                Err(hang) => Some(hang),
                Ok(run) => {
                    tally.refused += usize::from(run.code == Some(2));
                    judge(&run, &c.name).map(|why| format!("{why}\n    stderr: {}", run.stderr.trim()))
                }
            };
            if let Some(why) = verdict {
                keep_failure(c, &args);
                failures.push(format!("{} `gputrace {}`: {why}", c.name, args.join(" ")));
            }
        }
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(&out);
    }
    println!("{tally:?}");
    tally
}

/// No failure, and the corpus exercised both outcomes: inputs read (with their
/// damage said) and inputs refused with an error.
fn assert_sound(t: &Tally, failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} of {} runs failed:\n{}",
        failures.len(),
        t.runs,
        failures.join("\n")
    );
    assert!(
        t.refused > 0 && t.refused < t.runs,
        "{t:?}: every input read, or every input refused"
    );
}

/// A failing input, kept for a rerun by hand.
fn keep_failure(c: &Case, args: &[&str]) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/hostile-corpus");
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join(&c.name), &c.bytes);
        let _ = std::fs::write(dir.join(format!("{}.command", c.name)), format!("gputrace {}\n", args.join(" ")));
    }
}

#[test]
fn mutated_gtrace_files() {
    let dir = tempfile::tempdir().unwrap();
    common::demo(&dir.path().join("job"), 1, 2, 2);
    let seed_path = common::trace_files(&dir.path().join("job")).remove(0);
    let seed = std::fs::read(&seed_path).unwrap();
    let cases = mutations(&seed, "t", "gtrace", &mut Rng(0x9E37_79B9_7F4A_7C15), 45);
    let mut failures = Vec::new();
    let tally = check(&cases, &[&["info", "{}"], &["report", "{}"]], dir.path(), &mut failures);
    assert_sound(&tally, &failures);
}

#[test]
fn mutated_and_shaped_kineto_json() {
    let dir = tempfile::tempdir().unwrap();
    let seed = kineto_seed();
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let mut cases = mutations(seed.as_bytes(), "k", "json", &mut rng, 30);
    cases.extend(mutations(&gzip(seed.as_bytes()), "kz", "json.gz", &mut rng, 12));
    cases.extend(kineto_shapes(&seed));
    let mut failures = Vec::new();
    let tally = check(
        &cases,
        &[&["report", "{}"], &["import", "{}", "-o", "{out}"]],
        dir.path(),
        &mut failures,
    );
    assert_sound(&tally, &failures);
}

#[test]
fn hostile_rule_files() {
    let dir = tempfile::tempdir().unwrap();
    common::demo(&dir.path().join("job"), 1, 2, 2);
    let trace = common::trace_files(&dir.path().join("job")).remove(0);
    let trace = trace.to_str().unwrap();
    let mut failures = Vec::new();
    let tally = check(&rule_files(), &[&["report", trace, "--classify", "{}"]], dir.path(), &mut failures);
    assert_sound(&tally, &failures);
}
