//! `gputrace report --html` in a real browser: headless Chromium (Debian's `chromium`, which
//! `.ci/run` installs) loads the demo's page; no console error, every number's `data-key` /
//! `data-value` equals the same path in `report --json` (or, under `compare.`, in
//! `compare --json`), the activity timeline's bins add up to each GPU's breakdown, and at
//! 1400 and 900 px, light and dark, the rendered layout holds (a script added to a copy of
//! the page measures every text box against its container and writes what overflows into the
//! DOM) and a screenshot is taken (kept in `target/tmp/html-report/` to look at). Without
//! Chromium the test skips, saying so; under `CI=true` it fails.

use std::path::Path;

mod common;
use common::chromium::{chromium, chromium_absent, layout_result, page_copy_with, LAYOUT_CHECK};
use common::{gputrace, text};

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
    if chromium_absent() {
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
    let mut keys: Vec<String> = Vec::new();
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
            keys.push(k.clone());
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
    // Everything the text report has: the productive table per rank, the hardware summary,
    // the longest gaps with the CPU's activity, exposed communication by library and
    // operation, collectives with algorithm and protocol.
    for part in [
        ".productive.step_time_p95_s",
        ".hardware.sm_clock_mean_mhz",
        ".hardware.throttled_ns",
        ".longest_gaps.0.cpu_activity.0.overlap_ns",
        "totals.exposed_communication_by_library_ns.",
        "collectives.0.algorithms.",
        "collectives.0.protocols.",
        ".activity",
    ] {
        assert!(keys.iter().any(|k| k.contains(part)), "no number {part} on the page");
    }
    for heading in [
        "Productive work",
        "Hardware",
        "Longest idle gaps",
        "Exposed communication by library and operation",
        "GPU activity over time",
    ] {
        assert!(dom.contains(&format!("<h2>{heading}</h2>")), "no section {heading}");
    }

    timeline_bins_add_up(&dom, &report);
    // Without --model-params or a price the headline's tiles show a dash and the flag that
    // fills them: each on its own line, checked with the rest of the layout at 900 px.
    let plain = demo.join("plain.html");
    let out = gputrace(&["report", d, "--html", plain.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let plain_html = std::fs::read_to_string(&plain).unwrap();
    assert!(plain_html.contains(">—</span>") && plain_html.contains("class=\"l flag\">--model-params N"));
    let run = chromium(&["--window-size=900,1000", "--dump-dom"], &page_copy_with(&plain, LAYOUT_CHECK));
    let v = layout_result(&text(&run.stdout), "900 px, missing inputs");
    assert_eq!(v["tiles_run_together"], serde_json::json!([]), "tile text on one line: {v}");
    assert_eq!(v["overflow"], serde_json::json!([]), "text past its box: {v}");

    let checked = page_copy_with(&page, LAYOUT_CHECK);
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("html-report");
    std::fs::create_dir_all(&shots).unwrap();
    for width in [1400, 900] {
        for dark in [false, true] {
            let size = format!("--window-size={width},1000");
            let mut flags = vec![size.as_str(), "--dump-dom"];
            if dark {
                flags.push("--force-dark-mode");
            }
            let run = chromium(&flags, &checked);
            assert!(run.status.success(), "{}", text(&run.stderr));
            let scheme = if dark { "dark" } else { "light" };
            let v = layout_result(&text(&run.stdout), &format!("{width} px {scheme}"));
            assert_eq!(v["width"], width, "the window is {width} px");
            assert_eq!(v["dark"], dark, "prefers-color-scheme: dark is {dark}");
            assert!(v["texts"].as_u64().unwrap() > 500, "the check saw the page's text: {v}");
            assert_eq!(v["overflow"], serde_json::json!([]), "text past its box at {width} px {scheme}");
            assert_eq!(v["page_scroll"], false, "the page scrolls sideways at {width} px {scheme}");
            assert_eq!(
                v["tiles_run_together"],
                serde_json::json!([]),
                "tile text on one line at {width} px"
            );

            let png = shots.join(format!("report-{width}-{scheme}.png"));
            let arg = format!("--screenshot={}", png.display());
            let size = format!("--window-size={width},6000");
            let mut flags = vec![arg.as_str(), size.as_str(), "--hide-scrollbars"];
            if dark {
                flags.push("--force-dark-mode");
            }
            let run = chromium(&flags, &page);
            assert!(run.status.success(), "{}", text(&run.stderr));
            let bytes = std::fs::read(&png).unwrap();
            assert!(bytes.len() > 10_000 && bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG screenshot");
        }
    }
}

/// Every GPU drawn in the activity timeline: its bins are the report's, and each class's
/// bins sum to the GPU's breakdown (compute, exposed communication and transfer, idle by
/// cause), so the bins of a GPU sum to its span.
fn timeline_bins_add_up(dom: &str, report: &serde_json::Value) {
    let mut rows = 0;
    for piece in dom.split("<canvas").skip(1) {
        let tag = &piece[..piece.find('>').unwrap()];
        let Some(key) = attr(tag, "data-key") else { continue };
        let device = at(report, key.strip_suffix(".activity").unwrap()).unwrap();
        let bins: serde_json::Value = serde_json::from_str(&attr(tag, "data-value").unwrap()).unwrap();
        let sum = |k: &str| bins[k].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).sum::<u64>();
        let want = |k: &str| at(device, k).unwrap().as_u64().unwrap();
        for (class, total) in [
            ("compute_ns", "compute_ns"),
            ("exposed_communication_ns", "exposed_communication_ns"),
            ("exposed_transfer_ns", "exposed_transfer_ns"),
            ("host_bound_ns", "idle_causes.host_bound_ns"),
            ("launch_latency_ns", "idle_causes.launch_latency_ns"),
            ("synchronization_ns", "idle_causes.synchronization_ns"),
            ("unattributed_ns", "idle_causes.unattributed_ns"),
        ] {
            assert_eq!(sum(class), want(total), "{key}: {class} bins against {total}");
        }
        let all: u64 = ["compute_ns", "exposed_communication_ns", "exposed_transfer_ns", "idle_ns"]
            .map(want)
            .iter()
            .sum();
        assert_eq!(all, want("span_ns"));
        rows += 1;
    }
    assert_eq!(rows, 4, "every GPU of the demo has a timeline row");
}
