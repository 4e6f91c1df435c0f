//! `gputrace report --html` in a real browser: headless Chromium (Debian's `chromium`, which
//! `.ci/run` installs) loads the demo's page; no console error, every number's `data-key` /
//! `data-value` equals the same path in `report --json` (or, under `compare.`, in
//! `compare --json`), the activity timeline's bins add up to each GPU's breakdown, and at
//! 1400 and 900 px, light and dark, the rendered layout holds (a script added to a copy of
//! the page measures every text box against its container and writes what overflows into the
//! DOM) and a screenshot is taken (kept in `target/tmp/html-report/` to look at). Without
//! Chromium the test skips, saying so; under `CI=true` it fails.

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

/// What [`LAYOUT_CHECK`] wrote into the dumped DOM.
fn layout_result(dom: &str, what: &str) -> serde_json::Value {
    let result = dom
        .split("<pre id=\"layout-check\"")
        .nth(1)
        .and_then(|s| s.split_once('>'))
        .and_then(|(_, s)| s.split("</pre>").next())
        .unwrap_or_else(|| panic!("the layout check did not run at {what}"));
    let result = result
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    serde_json::from_str(&result).unwrap_or_else(|e| panic!("{e}: {result}"))
}

/// A copy of the page with `script` before `</body>`, next to it.
fn page_copy_with(page: &Path, script: &str) -> std::path::PathBuf {
    let html = std::fs::read_to_string(page).unwrap();
    let copy = page.with_extension("checked.html");
    std::fs::write(&copy, html.replace("</body>", &format!("<script>{script}</script></body>"))).unwrap();
    copy
}

/// Measures the rendered page and writes the result as JSON into `<pre id="layout-check">`:
/// the window's width, whether dark mode is on, how many text runs were measured, every text
/// run that reaches past the box of the block that holds it (text inside a box that clips or
/// scrolls on purpose, an ellipsis or a scrolling table, is checked by that box instead: it
/// must fit its own container, and a box that hides overflow must end in an ellipsis),
/// whether the page scrolls sideways, and tiles whose value and label share a line.
const LAYOUT_CHECK: &str = r#"
(function(){
  var out={width:window.innerWidth,dark:matchMedia("(prefers-color-scheme: dark)").matches,texts:0,overflow:[],page_scroll:document.documentElement.scrollWidth>window.innerWidth+1,tiles_run_together:[]};
  function blockOf(el){while(el&&el!==document.body){var d=getComputedStyle(el).display;if(d!=="inline"&&d!=="contents")return el;el=el.parentElement;}return document.body;}
  function clipper(el){while(el&&el!==document.body){var s=getComputedStyle(el);if(s.overflowX!=="visible")return el;el=el.parentElement;}return null;}
  var walk=document.createTreeWalker(document.body,NodeFilter.SHOW_TEXT),n;
  while((n=walk.nextNode())){
    if(!n.nodeValue.trim())continue;var el=n.parentElement;
    if(!el||el.closest("svg,script,style,#layout-check,[hidden]"))continue;
    out.texts++;var clip=clipper(el);
    if(clip){var cb=clip.getBoundingClientRect(),pb=blockOf(clip.parentElement).getBoundingClientRect();
      if(clip.scrollWidth>clip.clientWidth+1&&getComputedStyle(clip).textOverflow!=="ellipsis"&&getComputedStyle(clip).overflowX==="hidden")out.overflow.push({text:n.nodeValue.trim().slice(0,60),in:clip.tagName+"."+clip.className+" (cut without an ellipsis)",text_right:0,box_right:0});
      if(cb.right>pb.right+1||cb.left<pb.left-1)out.overflow.push({text:n.nodeValue.trim().slice(0,60),in:clip.tagName+"."+clip.className+" (its box)",text_right:Math.round(cb.right),box_right:Math.round(pb.right)});
      continue;}
    var box=blockOf(el),b=box.getBoundingClientRect();
    var r=document.createRange();r.selectNodeContents(n);var rects=r.getClientRects();
    for(var i=0;i<rects.length;i++){var t=rects[i];if(t.width===0)continue;
      if(t.right>b.right+1||t.left<b.left-1){out.overflow.push({text:n.nodeValue.trim().slice(0,60),in:box.tagName+"."+box.className,text_right:Math.round(t.right),box_right:Math.round(b.right)});break;}}
  }
  document.querySelectorAll(".tile").forEach(function(t){var v=t.querySelector(".v"),ls=t.querySelectorAll(".l");
    ls.forEach(function(l){if(l.getBoundingClientRect().top<v.getBoundingClientRect().bottom-1)out.tiles_run_together.push(t.textContent.slice(0,60));});
    for(var i=1;i<ls.length;i++)if(ls[i].getBoundingClientRect().top<ls[i-1].getBoundingClientRect().bottom-1)out.tiles_run_together.push(t.textContent.slice(0,60));});
  document.querySelectorAll("*").forEach(function(e){if(e.closest("svg"))return;var s=getComputedStyle(e);if(s.overflowX!=="visible"&&e!==document.documentElement&&e!==document.body){var r=e.getBoundingClientRect(),p=document.body.getBoundingClientRect();if(r.right>p.right+1)out.overflow.push({text:"(scroll box)",in:e.tagName+"."+e.className,text_right:Math.round(r.right),box_right:Math.round(p.right)});}});
  var pre=document.createElement("pre");pre.id="layout-check";pre.hidden=true;pre.textContent=JSON.stringify(out);document.body.appendChild(pre);
})();
"#;
