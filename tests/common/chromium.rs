//! Headless Chromium (Debian's `chromium`, which `.ci/run` installs) for the tests of the HTML
//! page: run it on a page, and measure the page's layout from inside it.

use std::path::Path;
use std::process::Command;

/// Where Debian installs it.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// Chromium headless on `page` with `extra` flags, in a fresh profile, logging to stderr.
pub fn chromium(extra: &[&str], page: &Path) -> std::process::Output {
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

/// Chromium is absent: skip, saying so; under `CI=true` fail.
pub fn chromium_absent() -> bool {
    if Path::new(CHROMIUM).exists() {
        return false;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true but {CHROMIUM} is missing: .ci/run installs it (apt-get install chromium)"
    );
    super::skip(&format!("{CHROMIUM} not installed (apt-get install chromium)"));
    true
}

/// What [`LAYOUT_CHECK`] wrote into the dumped DOM.
pub fn layout_result(dom: &str, what: &str) -> serde_json::Value {
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
pub fn page_copy_with(page: &Path, script: &str) -> std::path::PathBuf {
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
pub const LAYOUT_CHECK: &str = r#"
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
