//! The module graph: reads every `crate::` and `super::` path in `src/` (tests excluded) and
//! checks the layering of `docs/architecture.md`: each top-level module imports only modules
//! of its own layer or below, and no modules import each other in a circle, neither at the
//! top level nor among the sibling modules inside one top-level module.
//!
//! `cargo test --test architecture -- --nocapture` prints the graph.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Bottom to top. A module may import modules of its own layer or of a lower one.
const LAYERS: &[&[&str]] = &[
    &["config", "sys"],
    &["http"],
    &["proto"],
    &["tls", "log", "metrics", "fleet"],
    &["upstream", "cache", "acme"],
    &["handler"],
    &["server"],
];

/// Circles among sibling modules that are still to be taken apart, each as its sorted
/// members. The test fails when one of them is gone (so that it is taken off this list) or
/// when a new one appears.
const KNOWN_CIRCLES: &[&[&str]] = &[];

/// Upward imports still to be removed, as `from -> to` of top-level modules.
const KNOWN_UPWARD: &[(&str, &str)] = &[];

#[test]
fn the_module_graph_has_no_circle_and_no_upward_import() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules = modules(&src);
    let known: BTreeSet<Vec<String>> = modules.keys().cloned().collect();

    let mut top: Graph = BTreeMap::new();
    let mut inner: Graph = BTreeMap::new();
    for (module, text) in &modules {
        if module.is_empty() || module[0] == "main" || module[0] == "lib" {
            continue;
        }
        for target in references(module, text, &known) {
            if target.is_empty() || target[0] == module[0] {
                // Inside one top-level module: an edge between two of its children.
                if module.len() >= 2 && target.len() >= 2 && module[1] != target[1] {
                    inner
                        .entry(format!("{}::{}", module[0], module[1]))
                        .or_default()
                        .insert(format!("{}::{}", target[0], target[1]));
                }
                continue;
            }
            top.entry(module[0].clone())
                .or_default()
                .insert(target[0].clone());
        }
    }

    println!("top-level modules:");
    print_graph(&top);
    println!("sibling modules inside each top-level module:");
    print_graph(&inner);

    let mut upward = BTreeSet::new();
    for (from, tos) in &top {
        for to in tos {
            if layer(to) > layer(from) {
                upward.insert((from.clone(), to.clone()));
            }
        }
    }
    let known_upward: BTreeSet<(String, String)> = KNOWN_UPWARD
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(
        upward, known_upward,
        "upward imports (left) differ from the known list (right)"
    );

    let mut found: BTreeSet<Vec<String>> = circles(&top).into_iter().collect();
    found.extend(circles(&inner));
    let known_circles: BTreeSet<Vec<String>> = KNOWN_CIRCLES
        .iter()
        .map(|c| c.iter().map(|s| s.to_string()).collect())
        .collect();
    assert_eq!(
        found, known_circles,
        "circles (left) differ from the known list (right)"
    );
}

#[test]
fn the_reader_finds_circles_and_resolves_super() {
    let mut g: Graph = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    g.entry("c".into()).or_default().insert("a".into());
    g.entry("c".into()).or_default().insert("d".into());
    assert_eq!(circles(&g), vec![vec!["a", "b", "c"]]);

    let known: BTreeSet<Vec<String>> = [
        vec!["server".to_string()],
        vec!["server".into(), "h1".into()],
        vec!["server".into(), "h2".into()],
        vec!["proto".into(), "h2".into()],
    ]
    .into_iter()
    .collect();
    let module = vec!["server".to_string(), "h1".to_string()];
    let text =
        "use super::h2::serve;\nuse crate::proto::h2::Frame;\n// crate::config is a comment\n";
    let refs = references(&module, text, &known);
    assert_eq!(
        refs,
        vec![
            vec!["server".to_string(), "h2".to_string()],
            vec!["proto".to_string(), "h2".to_string()],
        ]
    );
}

type Graph = BTreeMap<String, BTreeSet<String>>;

fn layer(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.contains(&module))
        .unwrap_or_else(|| panic!("module `{module}` is in no layer of LAYERS"))
}

fn print_graph(g: &Graph) {
    for (from, tos) in g {
        let tos: Vec<&str> = tos.iter().map(String::as_str).collect();
        println!("  {from} -> {}", tos.join(", "));
    }
}

/// Every module of the crate (as its path: `["server", "h1"]`) with its text, test code cut.
fn modules(src: &Path) -> BTreeMap<Vec<String>, String> {
    let mut out = BTreeMap::new();
    let mut stack: Vec<PathBuf> = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n == "tests") {
                    continue;
                }
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).expect("under src");
            let mut parts: Vec<String> = rel
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            if parts.iter().any(|p| p == "tests" || p == "fuzzing") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read source");
            out.insert(parts, without_tests(&text));
        }
    }
    out
}

/// The text before the first `#[cfg(test)]` item that is a module (the convention here: test
/// modules come last in a file).
fn without_tests(text: &str) -> String {
    let mut kept = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]" {
            if let Some(next) = lines.peek() {
                let next = next.trim_start();
                if next.starts_with("mod ") || next.starts_with("pub mod ") {
                    break;
                }
            }
        }
        kept.push_str(line);
        kept.push('\n');
    }
    kept
}

/// The modules that `module`'s text refers to, each cut to the longest prefix that is a
/// module of the crate, in order of first appearance. Comments are skipped.
fn references(module: &[String], text: &str, known: &BTreeSet<Vec<String>>) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    for line in text.lines() {
        let code = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        for path in paths_in(code) {
            let resolved = match resolve(module, &path) {
                Some(r) => r,
                None => continue,
            };
            let mut prefix = resolved.clone();
            while !prefix.is_empty() && !known.contains(&prefix) {
                prefix.pop();
            }
            if !prefix.is_empty() && !out.contains(&prefix) {
                out.push(prefix);
            }
        }
    }
    out
}

/// Paths starting with `crate::` or `super::` in one line of code, as their segments; a
/// `{a, b}` group yields one path per member.
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let starts = rest.starts_with("crate::") || rest.starts_with("super::");
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if !(starts && boundary) {
            i += 1;
            continue;
        }
        let mut segments = Vec::new();
        let mut j = i;
        loop {
            let seg_end = code[j..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(code.len(), |k| j + k);
            segments.push(code[j..seg_end].to_string());
            j = seg_end;
            if code[j..].starts_with("::{") {
                let close = code[j..].find('}').map_or(code.len(), |k| j + k);
                for member in code[j + 3..close].split(',') {
                    let member: String = member
                        .trim()
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    if !member.is_empty() && member != "self" {
                        let mut p = segments.clone();
                        p.push(member);
                        out.push(p);
                    }
                }
                j = close;
                break;
            }
            if code[j..].starts_with("::") {
                j += 2;
                continue;
            }
            break;
        }
        out.push(segments);
        i = j.max(i + 1);
    }
    out
}

/// A path's segments as a module path from the crate root.
fn resolve(module: &[String], path: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> = Vec::new();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => rest = &rest[1..],
        Some("super") => {
            base = module.to_vec();
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    base.extend(rest.iter().filter(|s| *s != "self").cloned());
    Some(base)
}

/// The circles (strongly connected components of two or more) of a graph, each sorted.
fn circles(g: &Graph) -> Vec<Vec<String>> {
    struct State<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        if let Some(tos) = s.g.get(v) {
            for w in tos {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let lw = s.low[w];
                    let lv = s.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if s.stack.contains(&w) {
                    let iw = s.index[w];
                    let lv = s.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out.sort();
    s.out
}
