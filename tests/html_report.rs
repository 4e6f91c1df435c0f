//! `gputrace report --html` in a real browser: headless Chromium (Debian's `chromium`, which
//! `.ci/run` installs) loads the demo's page; no console error, every number's `data-key` /
//! `data-value` equals the same path in `report --json` (or, under `compare.`, in
//! `compare --json`), and a screenshot is a PNG. Without Chromium the test skips, saying so;
//! under `CI=true` it fails.

use std::path::Path;
use std::process::Command;

mod common;
use common::{gputrace, text};

const CHROMIUM: &str = "/usr/bin/chromium";

fn chromium(extra: &[&str], page: &Path) -> std::process::Output {
    let profile = tempfile::tempdir().unwrap();
    let mut args = vec![
        "--headless".to_string(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-quic".into(),
        "--no-first-run".into(),
        "--disable-background-networking".into(),
        "--disable-component-update".into(),
        "--disable-sync".into(),
        "--enable-logging=stderr".into(),
        "--v=0".into(),
        format!("--user-data-dir={}", profile.path().display()),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args.push(format!("file://{}", page.display()));
    Command::new(CHROMIUM).args(&args).output().expect("run chromium")
}

/// Attribute `name="..."` of a tag's text, unescaped (the writer escapes `&<>"'/`).
fn attr(tag: &str, name: &str) -> Option<String> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let end = start + tag[start..].find('"')?;
    Some(
        tag[start..end]
            .replace("&quot;", "\"")
            .replace("&#x27;", "'")
            .replace("&#x2F;", "/")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&"),
    )
}

fn at<'a>(v: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    path.split('.').try_fold(v, |v, k| match v {
        serde_json::Value::Array(a) => a.get(k.parse::<usize>().ok()?),
        serde_json::Value::Object(o) => o.get(k),
        _ => None,
    })
}

#[test]
fn the_demo_page_in_chromium_agrees_with_report_json() {
    if !Path::new(CHROMIUM).exists() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true but {CHROMIUM} is missing: .ci/run installs it (apt-get install chromium)"
        );
        common::skip(&format!("{CHROMIUM} not installed (apt-get install chromium)"));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let demo = dir.path().join("demo");
    let out = gputrace(&["demo", "-o", demo.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("report.html"), "the demo mentions its page");
    let page = demo.join("report.html");
    let html = std::fs::read_to_string(&page).unwrap();
    for banned in ["http://", "https://", " src=", " href="] {
        assert!(!html.contains(banned), "the page must not load anything: {banned}");
    }
    let d = demo.to_str().unwrap();
    let out = gputrace(&["report", "--json", "--model-params", "5e8", "--gpu-hour-cost", "3", d]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let out = gputrace(&["compare", "--json", d]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let compare: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    let run = chromium(&["--dump-dom"], &page);
    assert!(run.status.success(), "{}", text(&run.stderr));
    let log = text(&run.stderr);
    for bad in ["Uncaught", "CONSOLE(", "Refused to"] {
        assert!(!log.contains(bad), "console error in the page ({bad}):\n{log}");
    }
    let dom = text(&run.stdout);
    assert!(dom.contains("Where the GPU time went") && dom.contains("Stragglers"), "rendered");
    let mut checked = 0;
    let mut prefixes = std::collections::BTreeSet::new();
    for piece in dom.split('<').skip(1) {
        let tag = &piece[..piece.find('>').unwrap_or(piece.len())];
        let Some(key) = attr(tag, "data-key") else { continue };
        let value: serde_json::Value = serde_json::from_str(&attr(tag, "data-value").unwrap()).unwrap();
        let pairs = [(key.clone(), value)]
            .into_iter()
            .chain(attr(tag, "data-per").map(|k| (k, serde_json::from_str(&attr(tag, "data-per-value").unwrap()).unwrap())));
        for (k, v) in pairs {
            let expected = match k.strip_prefix("compare.") {
                Some(rest) => at(&compare, rest),
                None => at(&report, &k),
            };
            let expected = expected.unwrap_or_else(|| panic!("{k} is not in the JSON"));
            let same = match (expected.as_f64(), v.as_f64()) {
                (Some(a), Some(b)) => a == b,
                _ => *expected == v,
            };
            assert!(same, "{k}: page {v}, JSON {expected}");
            prefixes.insert(k.split('.').next().unwrap().to_string());
            checked += 1;
        }
    }
    assert!(checked > 300, "only {checked} numbers on the page");
    for p in [
        "productive",
        "ranks",
        "totals",
        "findings",
        "top_kernels",
        "collectives",
        "compare",
        "cost",
    ] {
        assert!(prefixes.contains(p), "no number from {p}: {prefixes:?}");
    }

    let png = dir.path().join("shot.png");
    let arg = format!("--screenshot={}", png.display());
    let run = chromium(&[&arg, "--window-size=1280,2000"], &page);
    assert!(run.status.success(), "{}", text(&run.stderr));
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.len() > 10_000 && bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG screenshot");
}
