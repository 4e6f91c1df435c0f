//! No import circles between the top-level modules of any crate in the
//! workspace (the developers' guide: "no import circles").
//!
//! A crate's top-level modules are the files `src/NAME.rs` and folders
//! `src/NAME/` beside its `lib.rs`/`main.rs`; everything in `src/NAME/` is
//! module NAME. Module A depends on module B when code in A (comments
//! aside) names `crate::B`, or `crate::ITEM` where the crate root re-exports
//! ITEM from B by name (`pub use B::ITEM;`, `pub use B::{ITEM, …};`; glob
//! re-exports are not followed). The crate root itself is left out: it
//! declares every module, so it sits above all of them.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Identifiers that follow `crate::` in `line`.
fn crate_paths(line: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("crate::") {
        // `gputrace_crate::x` or `foo_crate::` is another path.
        let before = rest[..i].chars().next_back();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
        if end > 0 {
            out.push(&rest[..end]);
        }
    }
    out
}

/// Code of `text` without `//` comments (line and doc comments; string
/// literals containing `//` are rare enough in `use` paths not to matter).
fn code_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines().map(|l| l.find("//").map_or(l, |i| &l[..i]))
}

/// ITEM → module for the root's by-name re-exports from its modules.
fn root_reexports(root: &str, modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let code: String = code_lines(root).collect::<Vec<_>>().join("\n");
    let mut out = BTreeMap::new();
    for stmt in code.split(';') {
        let s = stmt.trim();
        let Some(at) = s.find("use ") else { continue };
        if !(at == 0 || s[..at].trim_start().starts_with("pub")) {
            continue;
        }
        let path = s[at + 4..].trim();
        let path = path.strip_prefix("crate::").or_else(|| path.strip_prefix("self::")).unwrap_or(path);
        let Some((first, tail)) = path.split_once("::") else { continue };
        if !modules.contains(first) {
            continue;
        }
        // The names brought in: the last segment, or everything inside braces.
        let names = match tail.find('{') {
            Some(b) => &tail[b..],
            None => tail.rsplit("::").next().unwrap_or(tail),
        };
        for name in names.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if !name.is_empty() && name != "self" && name != "as" {
                out.entry(name.to_string()).or_insert_with(|| first.to_string());
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let p = e.expect("directory entry").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module graph of the crate whose sources are in `src`.
fn module_graph(src: &Path) -> Graph {
    let root_file = ["lib.rs", "main.rs"]
        .iter()
        .map(|f| src.join(f))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{}: no lib.rs or main.rs", src.display()));
    let mut modules = BTreeSet::new();
    for e in fs::read_dir(src).expect("src folder") {
        let p = e.expect("directory entry").path();
        let name = p.file_stem().expect("file name").to_string_lossy().into_owned();
        if p.is_dir() || (p.extension().is_some_and(|x| x == "rs") && p != root_file) {
            modules.insert(name);
        }
    }
    let reexports = root_reexports(&fs::read_to_string(&root_file).expect("crate root"), &modules);
    let mut graph = Graph::new();
    let mut files = Vec::new();
    rust_files(src, &mut files);
    for f in files.iter().filter(|f| **f != root_file) {
        let rel = f.strip_prefix(src).expect("under src");
        let first = rel.components().next().expect("a component").as_os_str().to_string_lossy();
        let module = first.strip_suffix(".rs").unwrap_or(&first).to_string();
        let text = fs::read_to_string(f).expect("source file");
        for line in code_lines(&text) {
            for name in crate_paths(line) {
                let target = if modules.contains(name) {
                    Some(name)
                } else {
                    reexports.get(name).map(String::as_str)
                };
                if let Some(t) = target.filter(|t| *t != module) {
                    graph.entry(module.clone()).or_default().insert(t.to_string());
                }
            }
        }
    }
    graph
}

/// One circle of `graph` (as a path that returns to its start), if any.
fn find_circle(graph: &Graph) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(n: &str, g: &Graph, marks: &mut BTreeMap<String, Mark>, stack: &mut Vec<String>) -> Option<Vec<String>> {
        match marks.get(n) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = stack.iter().position(|s| s == n).expect("open node is on the stack");
                let mut c = stack[from..].to_vec();
                c.push(n.to_string());
                return Some(c);
            }
            None => {}
        }
        marks.insert(n.to_string(), Mark::Open);
        stack.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, g, marks, stack) {
                return Some(c);
            }
        }
        stack.pop();
        marks.insert(n.to_string(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    graph.keys().find_map(|n| visit(n, graph, &mut marks, &mut Vec::new()))
}

#[test]
fn no_crate_has_a_module_circle() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut srcs = vec![workspace.join("src")];
    for e in fs::read_dir(workspace).expect("workspace") {
        let p = e.expect("directory entry").path();
        if p.join("Cargo.toml").exists() && p.join("src").is_dir() {
            srcs.push(p.join("src"));
        }
    }
    assert!(srcs.len() >= 10, "expected the workspace's crates, found {srcs:?}");
    let circles: Vec<String> = srcs
        .iter()
        .filter_map(|s| find_circle(&module_graph(s)).map(|c| format!("{}: {}", s.display(), c.join(" -> "))))
        .collect();
    assert!(circles.is_empty(), "module circles:\n{}", circles.join("\n"));
}

#[test]
fn the_check_finds_a_circle_through_a_root_reexport() {
    let dir = tempfile::tempdir().expect("temp dir");
    let src = dir.path();
    fs::write(src.join("lib.rs"), "mod a;\nmod b;\npub use b::{Thing, Other as O};\n").unwrap();
    fs::write(src.join("a.rs"), "use crate::Thing; // crate::c is a comment\n").unwrap();
    fs::create_dir(src.join("b")).unwrap();
    fs::write(src.join("b/mod.rs"), "mod deep;\n").unwrap();
    fs::write(src.join("b/deep.rs"), "fn f() { crate::a::g(); gputrace_crate::x(); }\n").unwrap();
    let g = module_graph(src);
    assert_eq!(
        g.get("a").map(|s| s.iter().cloned().collect::<Vec<_>>()),
        Some(vec!["b".to_string()])
    );
    assert_eq!(
        g.get("b").map(|s| s.iter().cloned().collect::<Vec<_>>()),
        Some(vec!["a".to_string()])
    );
    assert_eq!(find_circle(&g), Some(vec!["a".into(), "b".into(), "a".into()]));
    // Without b's call back into a, no circle.
    fs::write(src.join("b/deep.rs"), "fn f() {}\n").unwrap();
    assert_eq!(find_circle(&module_graph(src)), None);
}
