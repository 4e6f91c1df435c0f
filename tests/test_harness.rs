//! Tests that need a real component never pass unseen (issue #43 item 8):
//! the README's test command is `scripts/test.sh`, which installs the
//! components (`scripts/test-deps.sh`, also what `.ci/run` runs) and lists
//! every skipped test at the end; every skip goes through the one helper
//! that notes it (`tests/common/skip.rs`).

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

#[test]
fn the_readme_and_ci_run_the_script_that_installs_and_lists() {
    let readme = read("README.md");
    let setup = &readme[readme.find("## Set-up").unwrap()..];
    let block = &setup[setup.find("```sh").unwrap()..];
    let block = &block[..block[3..].find("```").unwrap() + 3];
    let commands: Vec<&str> = block
        .lines()
        .skip(1)
        .filter(|l| !l.trim().is_empty() && !l.starts_with("```"))
        .collect();
    assert_eq!(commands.len(), 2, "two commands on a fresh machine: {commands:?}");
    assert!(commands[1].starts_with("scripts/test.sh"), "{commands:?}");
    let ci = read(".ci/run");
    assert!(
        ci.lines().any(|l| l.trim() == "scripts/test.sh"),
        ".ci/run runs the README's test command"
    );
    assert!(
        !ci.contains("pip install --quiet duckdb") && !ci.contains("install -y -qq chromium"),
        "installs live in scripts/test-deps.sh"
    );
    let test_sh = read("scripts/test.sh");
    assert!(test_sh.contains("scripts/test-deps.sh"));
    let deps = read("scripts/test-deps.sh");
    for component in [
        "perfetto",
        "fetch-cupti-wheels",
        "librsvg2-bin",
        "torch==",
        "chromium",
        "duckdb",
        "HolisticTraceAnalysis",
        "prometheus",
    ] {
        assert!(deps.contains(component), "scripts/test-deps.sh installs {component}");
    }
}

/// The list at the end: a stand-in `cargo` notes two skips (as tests do, in
/// the file `tests/common/skip.rs` names) and fails; the script prints both,
/// and keeps cargo's exit status.
#[test]
fn the_test_script_lists_every_skip_and_keeps_the_status() {
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let target = dir.path().join("target");
    let fake = bin.join("cargo");
    std::fs::write(
        &fake,
        "#!/bin/sh\n[ \"$1\" = test ] || exit 0\n\
         printf 'a::first\\tno chromium (apt-get install chromium)\\n' >> \"$CARGO_TARGET_DIR/test-skips.txt\"\n\
         printf 'b::second\\tno duckdb\\n' >> \"$CARGO_TARGET_DIR/test-skips.txt\"\nexit 101\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // A skip left from an earlier run is not listed again.
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(target.join("test-skips.txt"), "old::stale\tearlier run\n").unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let out = Command::new(Path::new(ROOT).join("scripts/test.sh"))
        .env("PATH", path)
        .env("GPUTRACE_TEST_DEPS", "0")
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(101), "{stdout}");
    assert!(stdout.contains("2 test(s) skipped"), "{stdout}");
    assert!(stdout.contains("  a::first: no chromium (apt-get install chromium)"), "{stdout}");
    assert!(stdout.contains("  b::second: no duckdb"), "{stdout}");
    assert!(!stdout.contains("stale"), "{stdout}");
}

/// The helper notes a skip where the script reads it, naming the test (run
/// in a child process of this test binary with its own target directory, so
/// that the real list gets no note).
#[test]
fn the_skip_helper_notes_the_test_and_why() {
    if std::env::var_os("GPUTRACE_SKIP_HELPER_CHILD").is_some() {
        common::skip("the reason\twith a tab");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "the_skip_helper_notes_the_test_and_why"])
        .env("GPUTRACE_SKIP_HELPER_CHILD", "1")
        .env("CARGO_TARGET_DIR", dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let notes = std::fs::read_to_string(dir.path().join("test-skips.txt")).unwrap();
    assert_eq!(
        notes,
        "test_harness::the_skip_helper_notes_the_test_and_why\tthe reason with a tab\n"
    );
}

/// Every test that skips does it through the helper (a bare `eprintln!("skipping")`
/// passes unseen inside captured output).
#[test]
fn no_test_skips_outside_the_helper() {
    let mut files = Vec::new();
    for dir in std::fs::read_dir(ROOT).unwrap().flatten().map(|e| e.path()) {
        for sub in ["tests", "src"] {
            collect(&dir.join(sub), &mut files);
        }
    }
    collect(&Path::new(ROOT).join("tests"), &mut files);
    let mut bare = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for (i, line) in text.lines().enumerate() {
            let l = line.trim_start();
            if (l.starts_with("eprintln!(\"skipping")
                || l.starts_with("eprintln!(\"SKIPPED")
                || l.starts_with("return eprintln!(\"skipping"))
                && !f.ends_with("benches/import.rs")
                && !f.ends_with("tests/common/skip.rs")
            {
                bare.push(format!("{}:{}: {l}", f.display(), i + 1));
            }
        }
    }
    assert!(bare.is_empty(), "skips that no list shows:\n{}", bare.join("\n"));
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for p in entries.flatten().map(|e| e.path()) {
        if p.is_dir() {
            if !p.ends_with("target") {
                collect(&p, out);
            }
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}
