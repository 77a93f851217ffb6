//! A YAML tree that keeps line numbers, anchors, merge keys and repeated keys.
//!
//! Built from `saphyr-parser`'s event stream rather than a generic YAML value type because h2o's
//! dialect needs what those drop: the line of every node (for `file:line` errors) and repeated
//! keys in one mapping (two `listen:` keys are two listeners).
//!
//! Aliases are expanded into copies of the anchored node; the copy keeps the line numbers of the
//! anchored text, so an error inside it points at the text that is wrong. Merge keys
//! (`<<: *a`, `<<: [*a, *b]`) are expanded in place; keys written in the mapping itself win over
//! merged ones, and among several merged mappings the earlier one wins (as YAML 1.1 specifies).
//!
//! h2o's two tags are resolved while reading: `!file NAME` is replaced by the tree of that
//! YAML file (which may include others), `!env NAME` by the environment variable's value as a
//! scalar (empty when unset, as h2o). A node's `line` also says which file it was read from
//! (see [`Sources`]), so an error in an included file names that file.

use saphyr_parser::{Event, Parser, ScalarStyle, Tag};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One node of the tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// 1-based line where the node starts.
    pub line: u32,
    pub kind: NodeKind,
}

#[derive(Debug, Clone, PartialEq)]
pub enum NodeKind {
    Scalar(Scalar),
    Seq(Vec<Node>),
    /// Entries in file order; repeated keys are kept.
    Map(Vec<(Node, Node)>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Scalar {
    pub value: String,
    /// Written in quotes (or as a block scalar), so never null, a number or a boolean.
    pub quoted: bool,
}

/// A YAML syntax or structure problem.
#[derive(Debug, Clone, PartialEq)]
pub struct YamlError {
    pub line: u32,
    pub message: String,
}

/// Parses one YAML document. An empty input yields `Ok(None)`. `!file` names are resolved
/// against the working directory.
#[cfg(test)]
pub fn parse(text: &str) -> Result<Option<Node>, YamlError> {
    parse_with(text, &mut Sources::new("-", Path::new("")))
}

/// Parses one YAML document read from `sources`' first file, reading the files it includes.
pub fn parse_with(text: &str, sources: &mut Sources) -> Result<Option<Node>, YamlError> {
    Builder::default().run(text, sources, 0)
}

/// The files a tree was read from: the configuration first, then each `!file` in the order
/// met. A node's `line` carries the index of its file above [`LINE_BITS`]: line numbers flow
/// through every error report unchanged, and [`Sources::locate`] splits them.
pub struct Sources {
    pub files: Vec<Arc<str>>,
    /// The configuration's directory: a relative `!file` name is resolved as every relative
    /// path of the configuration (`paths::resolve`).
    base_dir: PathBuf,
}

/// Lines of one file are kept below 2^20; the file's index is above.
pub const LINE_BITS: u32 = 20;
const LINE_MASK: u32 = (1 << LINE_BITS) - 1;
/// Files one configuration may be made of: the index must fit above [`LINE_BITS`].
const MAX_FILES: usize = 1 << (32 - LINE_BITS);
/// `!file` inside `!file` this deep is refused (a file including itself).
const MAX_INCLUDE_DEPTH: usize = 8;

impl Sources {
    pub fn new(file: &str, base_dir: &Path) -> Sources {
        Sources {
            files: vec![Arc::from(file)],
            base_dir: base_dir.to_path_buf(),
        }
    }

    /// The file and the line in it of a node's `line`.
    pub fn locate(&self, line: u32) -> (Arc<str>, u32) {
        let index = (line >> LINE_BITS) as usize;
        let file = self.files.get(index).or(self.files.first());
        (
            file.cloned().unwrap_or_else(|| Arc::from("")),
            line & LINE_MASK,
        )
    }

    fn resolve(&self, name: &str) -> PathBuf {
        super::paths::resolve(&self.base_dir, Path::new(name))
    }
}

impl Node {
    /// The scalar's text, if this is a scalar that is not null.
    pub fn as_str(&self) -> Option<&str> {
        match &self.kind {
            NodeKind::Scalar(s) if !self.is_null() => Some(&s.value),
            _ => None,
        }
    }

    /// `~`, `null` or an empty plain scalar.
    pub fn is_null(&self) -> bool {
        match &self.kind {
            NodeKind::Scalar(s) => {
                !s.quoted && matches!(s.value.as_str(), "" | "~" | "null" | "Null" | "NULL")
            }
            _ => false,
        }
    }

    /// h2o's `ON`/`OFF`, also `on/off/true/false/yes/no` in any case. Quoted text counts too,
    /// as in h2o, which reads every scalar as a string.
    pub fn as_bool(&self) -> Option<bool> {
        let s = self.as_str()?;
        const YES: [&str; 3] = ["on", "true", "yes"];
        const NO: [&str; 3] = ["off", "false", "no"];
        if YES.iter().any(|y| s.eq_ignore_ascii_case(y)) {
            Some(true)
        } else if NO.iter().any(|n| s.eq_ignore_ascii_case(n)) {
            Some(false)
        } else {
            None
        }
    }

    /// A non-negative decimal integer (`_` separators are not accepted).
    pub fn as_u64(&self) -> Option<u64> {
        let s = self.as_str()?.trim();
        let digits = s.strip_prefix('+').unwrap_or(s);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    }

    pub fn as_map(&self) -> Option<&[(Node, Node)]> {
        match &self.kind {
            NodeKind::Map(m) => Some(m),
            _ => None,
        }
    }

    pub fn as_seq(&self) -> Option<&[Node]> {
        match &self.kind {
            NodeKind::Seq(s) => Some(s),
            _ => None,
        }
    }

    /// A short name of the node's type for error messages.
    pub fn type_name(&self) -> &'static str {
        match &self.kind {
            NodeKind::Scalar(_) if self.is_null() => "null",
            NodeKind::Scalar(_) => "scalar",
            NodeKind::Seq(_) => "sequence",
            NodeKind::Map(_) => "mapping",
        }
    }
}

/// Deeper nesting than this is refused: it is never needed in a server configuration, and
/// cloning or dropping a very deep tree would recurse deeply.
const MAX_DEPTH: usize = 64;
/// Upper bound on nodes after alias expansion ("billion laughs").
const MAX_NODES: usize = 1_000_000;

#[derive(Default)]
struct Builder {
    /// The file's index in [`Sources::files`], shifted into place for `line`.
    file: u32,
    /// Containers being built, innermost last, with their anchor id.
    stack: Vec<(Node, usize)>,
    /// A mapping key waiting for its value, per open mapping (parallel to `stack`).
    pending_keys: Vec<Option<Node>>,
    anchors: Vec<(usize, Node)>,
    nodes: usize,
    root: Option<Node>,
    documents: usize,
}

impl Builder {
    /// Reads `text`, the last file of `sources`, itself included `includes` deep.
    fn run(
        mut self,
        text: &str,
        sources: &mut Sources,
        includes: usize,
    ) -> Result<Option<Node>, YamlError> {
        let index = sources.files.len() - 1;
        self.file = u32::try_from(index).unwrap_or(0) << LINE_BITS;
        let mut parser = Parser::new_from_str(text);
        let last = last_line(text);
        while let Some(ev) = parser.next_event() {
            let (ev, span) = ev.map_err(|e| YamlError {
                // The scanner may place an error at the end of input one line past the last.
                line: self.file | line_of(e.marker().line()).min(last),
                message: format!("YAML syntax error: {}", e.info()),
            })?;
            // An implied empty value at the end of input (`? key` on the last line) starts one
            // line past the last, as errors there do.
            let line = self.file | line_of(span.start.line()).min(last);
            match ev {
                Event::DocumentStart(_) => {
                    self.documents += 1;
                    if self.documents > 1 {
                        return Err(YamlError {
                            line,
                            message: "only one YAML document is allowed".into(),
                        });
                    }
                }
                Event::Scalar(value, style, anchor, tag) => {
                    let quoted = !matches!(style, ScalarStyle::Plain);
                    let node = match tag.as_deref().and_then(h2o_tag) {
                        Some(H2oTag::File) => include(&value, line, sources, includes)?,
                        Some(H2oTag::Env) => Node {
                            line,
                            kind: NodeKind::Scalar(Scalar {
                                value: std::env::var(value.as_ref()).unwrap_or_default(),
                                quoted: true,
                            }),
                        },
                        None => Node {
                            line,
                            kind: NodeKind::Scalar(Scalar {
                                value: value.into_owned(),
                                quoted,
                            }),
                        },
                    };
                    self.finish(node, anchor)?;
                }
                Event::Alias(id) => {
                    let Some((_, target)) = self.anchors.iter().rev().find(|(a, _)| *a == id)
                    else {
                        return Err(YamlError {
                            line,
                            message: "alias to an unknown anchor".into(),
                        });
                    };
                    // The copy must respect the depth bound like any other node.
                    if self.stack.len() + depth(target) > MAX_DEPTH {
                        return Err(too_deep(line));
                    }
                    // Counted before copying so a "billion laughs" file is refused cheaply.
                    self.nodes += count(target);
                    if self.nodes > MAX_NODES {
                        return Err(too_large(line));
                    }
                    let copy = target.clone();
                    self.finish(copy, 0)?;
                }
                Event::SequenceStart(_, tag) | Event::MappingStart(_, tag)
                    if tag.as_deref().and_then(h2o_tag).is_some() =>
                {
                    return Err(YamlError {
                        line,
                        message: "the value of !file or !env must be a scalar".into(),
                    });
                }
                Event::SequenceStart(anchor, _) => {
                    self.open(line, NodeKind::Seq(Vec::new()), anchor)?
                }
                Event::MappingStart(anchor, _) => {
                    self.open(line, NodeKind::Map(Vec::new()), anchor)?
                }
                Event::SequenceEnd | Event::MappingEnd => {
                    // The parser balances start and end events, so the stack is not empty here.
                    if let (Some((mut node, anchor)), Some(_)) =
                        (self.stack.pop(), self.pending_keys.pop())
                    {
                        if let NodeKind::Map(entries) = &mut node.kind {
                            let merged = expand_merge_keys(std::mem::take(entries))?;
                            *entries = merged;
                        }
                        self.finish(node, anchor)?;
                    }
                }
                Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => {}
            }
        }
        Ok(self.root)
    }

    fn open(&mut self, line: u32, kind: NodeKind, anchor: usize) -> Result<(), YamlError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(too_deep(line));
        }
        self.stack.push((Node { line, kind }, anchor));
        self.pending_keys.push(None);
        Ok(())
    }

    /// Places a completed node into its parent (or makes it the root).
    fn finish(&mut self, node: Node, anchor: usize) -> Result<(), YamlError> {
        self.nodes += 1;
        if self.nodes > MAX_NODES {
            return Err(too_large(node.line));
        }
        if anchor != 0 {
            self.anchors.push((anchor, node.clone()));
        }
        let Some((parent, _)) = self.stack.last_mut() else {
            self.root = Some(node);
            return Ok(());
        };
        match &mut parent.kind {
            NodeKind::Seq(items) => items.push(node),
            NodeKind::Map(entries) => {
                if let Some(pending) = self.pending_keys.last_mut() {
                    match pending.take() {
                        Some(key) => entries.push((key, node)),
                        None => *pending = Some(node),
                    }
                }
            }
            NodeKind::Scalar(_) => {}
        }
        Ok(())
    }
}

enum H2oTag {
    File,
    Env,
}

fn h2o_tag(tag: &Tag) -> Option<H2oTag> {
    match (tag.handle.as_str(), tag.suffix.as_str()) {
        ("!", "file") => Some(H2oTag::File),
        ("!", "env") => Some(H2oTag::Env),
        _ => None,
    }
}

/// The tree of the file `name` a `!file` at `line` names.
fn include(name: &str, line: u32, sources: &mut Sources, depth: usize) -> Result<Node, YamlError> {
    let fail = |message: String| Err(YamlError { line, message });
    if depth >= MAX_INCLUDE_DEPTH {
        return fail(format!(
            "!file {name}: files include each other more than {MAX_INCLUDE_DEPTH} deep"
        ));
    }
    if sources.files.len() >= MAX_FILES {
        return fail(format!(
            "!file {name}: more than {MAX_FILES} files included"
        ));
    }
    let path = sources.resolve(name);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) => return fail(format!("!file {name}: cannot read {}: {e}", path.display())),
    };
    sources.files.push(Arc::from(path.display().to_string()));
    match Builder::default().run(&text, sources, depth + 1)? {
        Some(node) => Ok(node),
        // An empty file is a null scalar where the tag was.
        None => Ok(Node {
            line,
            kind: NodeKind::Scalar(Scalar {
                value: String::new(),
                quoted: false,
            }),
        }),
    }
}

/// Replaces `<<` entries with the entries of the mapping(s) they name. Keys already written in
/// the mapping win; among merged mappings, the first one that has a key wins.
fn expand_merge_keys(entries: Vec<(Node, Node)>) -> Result<Vec<(Node, Node)>, YamlError> {
    if !entries.iter().any(|(k, _)| is_merge_key(k)) {
        return Ok(entries);
    }
    let own: Vec<String> = entries
        .iter()
        .filter(|(k, _)| !is_merge_key(k))
        .filter_map(|(k, _)| scalar_text(k).map(str::to_owned))
        .collect();
    let mut taken_from_merge: Vec<String> = Vec::new();
    let mut out = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        if !is_merge_key(&key) {
            out.push((key, value));
            continue;
        }
        let sources: Vec<Node> = match value.kind {
            NodeKind::Map(_) => vec![value],
            NodeKind::Seq(items) => items,
            NodeKind::Scalar(_) => {
                return Err(YamlError {
                    line: key.line,
                    message: "merge key `<<` expects a mapping or a sequence of mappings".into(),
                })
            }
        };
        // Keys merged from an earlier source block the same keys from a later one, but repeated
        // keys within one source are all kept (they are repeated directives).
        for source in sources {
            let NodeKind::Map(merged) = source.kind else {
                return Err(YamlError {
                    line: source.line,
                    message: "merge key `<<` expects a mapping or a sequence of mappings".into(),
                });
            };
            let mut from_this: Vec<String> = Vec::new();
            for (k, v) in merged {
                if let Some(text) = scalar_text(&k) {
                    if own.iter().any(|o| o == text) || taken_from_merge.iter().any(|t| t == text) {
                        continue;
                    }
                    from_this.push(text.to_owned());
                }
                out.push((k, v));
            }
            taken_from_merge.extend(from_this);
        }
    }
    Ok(out)
}

fn is_merge_key(node: &Node) -> bool {
    matches!(&node.kind, NodeKind::Scalar(s) if !s.quoted && s.value == "<<")
}

fn scalar_text(node: &Node) -> Option<&str> {
    match &node.kind {
        NodeKind::Scalar(s) => Some(&s.value),
        _ => None,
    }
}

fn count(node: &Node) -> usize {
    match &node.kind {
        NodeKind::Scalar(_) => 1,
        NodeKind::Seq(items) => 1 + items.iter().map(count).sum::<usize>(),
        NodeKind::Map(entries) => {
            1 + entries
                .iter()
                .map(|(k, v)| count(k) + count(v))
                .sum::<usize>()
        }
    }
}

/// Nesting levels of a node (a scalar is 1). Bounded by [`MAX_DEPTH`] for every node built.
fn depth(node: &Node) -> usize {
    match &node.kind {
        NodeKind::Scalar(_) => 1,
        NodeKind::Seq(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        NodeKind::Map(entries) => {
            1 + entries
                .iter()
                .map(|(k, v)| depth(k).max(depth(v)))
                .max()
                .unwrap_or(0)
        }
    }
}

fn too_deep(line: u32) -> YamlError {
    YamlError {
        line,
        message: format!("nesting deeper than {MAX_DEPTH} levels"),
    }
}

fn too_large(line: u32) -> YamlError {
    YamlError {
        line,
        message: "document too large after alias expansion".into(),
    }
}

/// The number of the text's last line, counting line breaks as YAML does (LF, CRLF, lone CR).
fn last_line(text: &str) -> u32 {
    let b = text.as_bytes();
    let breaks = (0..b.len())
        .filter(|&i| b[i] == b'\n' || (b[i] == b'\r' && b.get(i + 1) != Some(&b'\n')))
        .count();
    line_of(breaks + 1)
}

fn line_of(line: usize) -> u32 {
    u32::try_from(line).unwrap_or(u32::MAX).min(LINE_MASK)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `config` fuzz target: an error about the null value of a complex key on
    /// the last line named a line past the end of the file.
    #[test]
    fn an_empty_value_at_the_end_of_input_is_on_the_last_line() {
        let text = "hosts:\n  a:\n    listen:\n  ?    ty";
        let root = parse(text).expect("parses").expect("a document");
        let mut lines = Vec::new();
        fn walk(n: &Node, out: &mut Vec<u32>) {
            out.push(n.line);
            match &n.kind {
                NodeKind::Seq(items) => items.iter().for_each(|i| walk(i, out)),
                NodeKind::Map(entries) => entries.iter().for_each(|(k, v)| {
                    walk(k, out);
                    walk(v, out);
                }),
                _ => {}
            }
        }
        walk(&root, &mut lines);
        assert!(lines.iter().all(|&l| (1..=4).contains(&l)), "{lines:?}");
    }

    fn root(text: &str) -> Node {
        match parse(text) {
            Ok(Some(n)) => n,
            other => panic!("unexpected parse result {other:?}"),
        }
    }

    fn keys(node: &Node) -> Vec<(&str, u32)> {
        node.as_map()
            .unwrap_or_default()
            .iter()
            .map(|(k, _)| (k.as_str().unwrap_or("?"), k.line))
            .collect()
    }

    fn get<'a>(node: &'a Node, key: &str) -> &'a Node {
        match node
            .as_map()
            .and_then(|m| m.iter().find(|(k, _)| k.as_str() == Some(key)))
        {
            Some((_, v)) => v,
            None => panic!("no key {key} in {node:?}"),
        }
    }

    #[test]
    fn keeps_repeated_keys_in_order_with_lines() {
        let n = root("a: 1\nlisten: 80\nb: x\nlisten: 81\n");
        assert_eq!(
            keys(&n),
            vec![("a", 1), ("listen", 2), ("b", 3), ("listen", 4)]
        );
        let values: Vec<_> = n
            .as_map()
            .unwrap_or_default()
            .iter()
            .filter(|(k, _)| k.as_str() == Some("listen"))
            .map(|(_, v)| v.as_u64())
            .collect();
        assert_eq!(values, vec![Some(80), Some(81)]);
    }

    #[test]
    fn errors_at_the_end_of_input_name_the_last_line() {
        // Found by the `config` fuzz target: the error was reported on line 2 of a 1-line file.
        for (text, line) in [("%___", 1), ("%", 1), ("a: b\n%x", 2), ("a: b\r%x", 2)] {
            match parse(text) {
                Err(e) => assert_eq!(e.line, line, "{text:?}: {}", e.message),
                Ok(n) => panic!("{text:?} parsed: {n:?}"),
            }
        }
    }

    #[test]
    fn nested_line_numbers() {
        let n = root(
            "# comment\n\nhosts:\n  example.com:\n    paths:\n      /:\n        file.dir: /x\n",
        );
        let hosts = get(&n, "hosts");
        assert_eq!(hosts.line, 4);
        let host = get(hosts, "example.com");
        let paths = get(host, "paths");
        let p = get(paths, "/");
        let (k, v) = &p.as_map().unwrap_or_default()[0];
        assert_eq!((k.line, v.line), (7, 7));
        assert_eq!(v.as_str(), Some("/x"));
    }

    #[test]
    fn anchors_and_aliases_copy_the_node() {
        let n = root("a: &x\n  port: 1\n  host: h\nb: *x\nc: &s scalar\nd: *s\n");
        assert_eq!(get(&n, "a"), get(&n, "b"));
        assert_eq!(get(&n, "d").as_str(), Some("scalar"));
        // The copy keeps the anchored text's lines.
        assert_eq!(get(get(&n, "b"), "port").line, 2);
    }

    #[test]
    fn merge_key_expands_and_own_keys_win() {
        let n = root("base: &b\n  port: 443\n  type: tcp\nl:\n  type: quic\n  <<: *b\n");
        let l = get(&n, "l");
        assert_eq!(keys(l), vec![("type", 5), ("port", 2)]);
        assert_eq!(get(l, "type").as_str(), Some("quic"));
        assert_eq!(get(l, "port").as_u64(), Some(443));
    }

    #[test]
    fn merge_key_sequence_first_wins() {
        let n = root("a: &a {x: 1, y: 1}\nb: &b {y: 2, z: 2}\nc:\n  <<: [*a, *b]\n  z: 3\n");
        let c = get(&n, "c");
        assert_eq!(get(c, "x").as_u64(), Some(1));
        assert_eq!(get(c, "y").as_u64(), Some(1));
        assert_eq!(get(c, "z").as_u64(), Some(3));
        assert_eq!(c.as_map().map(|m| m.len()), Some(3));
    }

    #[test]
    fn quoted_merge_key_is_a_plain_key() {
        let n = root("a: &a {x: 1}\nb:\n  '<<': *a\n");
        assert_eq!(keys(get(&n, "b")), vec![("<<", 3)]);
    }

    #[test]
    fn merge_of_scalar_is_an_error() {
        let e = parse("a: &a 1\nb:\n  <<: *a\n").err();
        assert_eq!(e.map(|e| e.line), Some(3));
    }

    #[test]
    fn scalar_types() {
        let n = root("a: ON\nb: off\nc: \"80\"\nd: 80\ne: ~\nf:\ng: 'yes'\nh: maybe\n");
        assert_eq!(get(&n, "a").as_bool(), Some(true));
        assert_eq!(get(&n, "b").as_bool(), Some(false));
        assert_eq!(get(&n, "g").as_bool(), Some(true));
        assert_eq!(get(&n, "h").as_bool(), None);
        let quoted = |n: &Node| matches!(&n.kind, NodeKind::Scalar(s) if s.quoted);
        assert!(quoted(get(&n, "c")));
        assert!(!quoted(get(&n, "d")));
        assert_eq!(get(&n, "c").as_u64(), Some(80));
        assert!(get(&n, "e").is_null());
        assert!(get(&n, "f").is_null());
        assert!(!get(&n, "c").is_null());
    }

    #[test]
    fn syntax_error_has_line() {
        let e = parse("a: 1\nb: [1, 2\nc: 3\n").err();
        assert!(e.as_ref().is_some_and(|e| e.message.contains("syntax")));
        let e = parse("a: 1\nb: 2\n  c: 3\n").err();
        assert_eq!(e.map(|e| e.line), Some(3));
    }

    #[test]
    fn unknown_alias_and_multiple_documents_are_errors() {
        assert!(parse("a: *nope\n").is_err());
        assert_eq!(parse("a: 1\n---\nb: 2\n").err().map(|e| e.line), Some(2));
    }

    #[test]
    fn empty_document_is_none() {
        assert_eq!(parse(""), Ok(None));
        assert_eq!(parse("# only a comment\n"), Ok(None));
    }

    #[test]
    fn billion_laughs_is_refused() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..8 {
            let p = i - 1;
            text.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        assert!(parse(&text).is_err());
    }

    #[test]
    fn deep_nesting_through_aliases_is_refused() {
        let mut text = String::from("a0: &a0 [[[[[[[[[[x]]]]]]]]]]\n");
        for i in 1..20 {
            let p = i - 1;
            text.push_str(&format!("a{i}: &a{i} [[[[[[[[[[*a{p}]]]]]]]]]]\n"));
        }
        let e = parse(&text).err();
        assert!(e.is_some_and(|e| e.message.contains("nesting")));
    }

    #[test]
    fn deep_nesting_is_refused() {
        let text = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(parse(&text).is_err());
    }
}
