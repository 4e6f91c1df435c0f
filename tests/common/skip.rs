// The one way a test says it skipped (included by path from the test code of
// every crate: `#[path = ".../tests/common/skip.rs"] mod skip;`).
//
// A skip is printed on stderr (visible with `--nocapture`) and noted in
// `target/test-skips.txt`, one line per skip, `test<TAB>why`.
// `scripts/test.sh` (the README's test command) empties that file before
// the run and prints it after, so that no skip passes unseen inside
// captured output.

use std::path::{Path, PathBuf};

/// Where skips are noted: `test-skips.txt` in `$CARGO_TARGET_DIR` (relative
/// to the workspace when relative), else in the workspace's `target/` (the
/// workspace: the directory holding `Cargo.lock`). Tests run in their crate's
/// directory, so the workspace is found from there.
pub fn skips_file() -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = crate_dir.ancestors().find(|d| d.join("Cargo.lock").is_file()).unwrap_or(crate_dir);
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => root.join(d).join("test-skips.txt"),
        None => root.join("target/test-skips.txt"),
    }
}

/// Skip the running test because of `why`: say so on stderr and note it in
/// [`skips_file`]. The test is named by its thread, which the test harness
/// names after it.
#[allow(dead_code)]
pub fn skip(why: &str) {
    use std::io::Write;
    let thread = std::thread::current();
    let test = format!("{}::{}", env!("CARGO_CRATE_NAME"), thread.name().unwrap_or("?"));
    eprintln!("skipping {test}: {why}");
    let line = format!("{test}\t{}\n", why.replace(['\n', '\t'], " "));
    let file = skips_file();
    if let Some(parent) = file.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    // One write of one line in append mode: lines of tests running at once do not mix.
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(&file) {
        let _ = f.write_all(line.as_bytes());
    }
}
