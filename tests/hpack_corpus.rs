//! The hpack-test-case corpus (github.com/http2jp/hpack-test-case): decode every story's wire
//! format, round-trip the raw header lists through our encoder and decoder, and check both
//! directions against the `hpack` crate.

use std::fs;
use std::path::{Path, PathBuf};

use bytes::BytesMut;
use spate::proto::h2::hpack::{Decoder, Encoder};

const CORPUS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/data/hpack-test-case"
);

/// The corpus directory: `CORPUS`, or `$HPACK_TEST_CASE_DIR` (for a checkout elsewhere,
/// such as a git worktree).
fn corpus() -> PathBuf {
    std::env::var_os("HPACK_TEST_CASE_DIR").map_or_else(|| PathBuf::from(CORPUS), PathBuf::from)
}

type Headers = Vec<(Vec<u8>, Vec<u8>)>;

struct Case {
    header_table_size: Option<usize>,
    wire: Option<Vec<u8>>,
    headers: Headers,
}

/// Whether the corpus is there: it lives beside the repository (`../shared`), not in it (34 MB),
/// so a plain clone skips these tests and says so.
fn corpus_here() -> bool {
    let here = corpus().is_dir();
    if !here {
        eprintln!(
            "skipped: the HPACK corpus is not at {} (set HPACK_TEST_CASE_DIR)",
            corpus().display()
        );
    }
    here
}

#[test]
fn decodes_every_encoded_story() {
    if !corpus_here() {
        return;
    }
    let mut stories = 0;
    let mut blocks = 0;
    for dir in corpus_dirs() {
        if dir.ends_with("raw-data") {
            continue;
        }
        for story in story_files(&dir) {
            let mut dec = Decoder::new(4096, usize::MAX);
            for (i, case) in load_story(&story).into_iter().enumerate() {
                if let Some(size) = case.header_table_size {
                    dec.set_max_table_size(size);
                }
                let wire = case
                    .wire
                    .unwrap_or_else(|| panic!("{}: case {i} has no wire", story.display()));
                let got = decode(&mut dec, &wire)
                    .unwrap_or_else(|e| panic!("{} case {i}: {e:?}", story.display()));
                assert_eq!(got, case.headers, "{} case {i}", story.display());
                blocks += 1;
            }
            stories += 1;
        }
    }
    assert!(stories >= 100, "only {stories} encoded stories found");
    assert!(blocks > 1000, "only {blocks} blocks decoded");
}

#[test]
fn raw_data_round_trips_through_our_encoder_and_decoder() {
    if !corpus_here() {
        return;
    }
    let mut checked = 0;
    for lists in raw_stories() {
        // A small table too, to exercise eviction and the initial size update.
        for cap in [4096, 256] {
            let mut enc = Encoder::new(cap);
            let mut dec = Decoder::new(4096, usize::MAX);
            for headers in &lists {
                let wire = encode(&mut enc, headers);
                assert_eq!(&decode(&mut dec, &wire).unwrap(), headers);
                checked += 1;
            }
        }
    }
    assert!(checked > 1000, "only {checked} header lists");
}

#[test]
fn hpack_crate_decodes_our_output() {
    if !corpus_here() {
        return;
    }
    for lists in raw_stories() {
        let mut enc = Encoder::default();
        let mut theirs = hpack::Decoder::new();
        for headers in &lists {
            let wire = encode(&mut enc, headers);
            let got = theirs.decode(&wire).unwrap_or_else(|e| panic!("{e:?}"));
            assert_eq!(&got, headers);
        }
    }
}

#[test]
fn we_decode_hpack_crate_output() {
    if !corpus_here() {
        return;
    }
    for lists in raw_stories() {
        let mut theirs = hpack::Encoder::new();
        let mut dec = Decoder::new(4096, usize::MAX);
        for headers in &lists {
            let wire = theirs.encode(headers.iter().map(|(n, v)| (&n[..], &v[..])));
            assert_eq!(&decode(&mut dec, &wire).unwrap(), headers);
        }
    }
}

fn decode(dec: &mut Decoder, wire: &[u8]) -> Result<Headers, spate::proto::h2::hpack::DecodeError> {
    let mut buf = BytesMut::new();
    let mut fields = Vec::new();
    dec.decode(wire, &mut buf, |f| fields.push(f))?;
    Ok(fields
        .into_iter()
        .map(|f| (buf[f.name].to_vec(), buf[f.value].to_vec()))
        .collect())
}

fn encode(enc: &mut Encoder, headers: &Headers) -> Vec<u8> {
    let mut wire = Vec::new();
    enc.encode(headers.iter().map(|(n, v)| (&n[..], &v[..])), &mut wire);
    wire
}

/// The header lists of every raw-data story.
fn raw_stories() -> Vec<Vec<Headers>> {
    let dir = corpus().join("raw-data");
    let stories: Vec<Vec<Headers>> = story_files(&dir)
        .iter()
        .map(|s| load_story(s).into_iter().map(|c| c.headers).collect())
        .collect();
    assert!(!stories.is_empty(), "no raw-data stories");
    stories
}

fn corpus_dirs() -> Vec<PathBuf> {
    let root = corpus();
    let entries = fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("hpack-test-case corpus missing at {}: {e}", root.display()));
    let mut dirs: Vec<PathBuf> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(
        !dirs.is_empty(),
        "no story directories in {}",
        root.display()
    );
    dirs
}

fn story_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with("story_") && name.ends_with(".json")
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no story in {}", dir.display());
    files
}

fn load_story(path: &Path) -> Vec<Case> {
    let text = fs::read_to_string(path).unwrap();
    let json = Json::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let cases = json.get("cases").and_then(Json::as_array).expect("cases");
    cases
        .iter()
        .map(|case| Case {
            header_table_size: case
                .get("header_table_size")
                .and_then(Json::as_number)
                .map(|n| n as usize),
            wire: case.get("wire").and_then(Json::as_str).map(unhex),
            headers: case
                .get("headers")
                .and_then(Json::as_array)
                .expect("headers")
                .iter()
                .flat_map(|h| match h {
                    Json::Object(fields) => fields
                        .iter()
                        .map(|(n, v)| {
                            let v = v.as_str().expect("header value is a string");
                            (n.as_bytes().to_vec(), v.as_bytes().to_vec())
                        })
                        .collect::<Vec<_>>(),
                    _ => panic!("header is not an object"),
                })
                .collect(),
        })
        .collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// Just enough JSON for the corpus files.
#[derive(Debug)]
enum Json {
    /// null, true or false: the corpus has no use for them.
    Literal,
    Number(f64),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    fn parse(text: &str) -> Result<Json, String> {
        let mut p = Parser {
            s: text.as_bytes(),
            pos: 0,
        };
        let v = p.value()?;
        p.ws();
        if p.pos != p.s.len() {
            return Err(format!("trailing data at {}", p.pos));
        }
        Ok(v)
    }

    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(fields) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn as_array(&self) -> Option<&[Json]> {
        match self {
            Json::Array(a) => Some(a),
            _ => None,
        }
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    fn as_number(&self) -> Option<f64> {
        match self {
            Json::Number(n) => Some(*n),
            _ => None,
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self
            .s
            .get(self.pos)
            .is_some_and(|b| b.is_ascii_whitespace())
        {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Result<u8, String> {
        self.ws();
        self.s
            .get(self.pos)
            .copied()
            .ok_or_else(|| "unexpected end".to_string())
    }

    fn expect(&mut self, b: u8) -> Result<(), String> {
        if self.peek()? != b {
            return Err(format!("expected '{}' at {}", b as char, self.pos));
        }
        self.pos += 1;
        Ok(())
    }

    fn literal(&mut self, word: &str) -> Result<Json, String> {
        if self.s[self.pos..].starts_with(word.as_bytes()) {
            self.pos += word.len();
            Ok(Json::Literal)
        } else {
            Err(format!("bad literal at {}", self.pos))
        }
    }

    fn value(&mut self) -> Result<Json, String> {
        match self.peek()? {
            b'{' => {
                self.pos += 1;
                let mut fields = Vec::new();
                if self.peek()? == b'}' {
                    self.pos += 1;
                    return Ok(Json::Object(fields));
                }
                loop {
                    let key = self.string()?;
                    self.expect(b':')?;
                    fields.push((key, self.value()?));
                    match self.peek()? {
                        b',' => self.pos += 1,
                        b'}' => {
                            self.pos += 1;
                            return Ok(Json::Object(fields));
                        }
                        _ => return Err(format!("bad object at {}", self.pos)),
                    }
                }
            }
            b'[' => {
                self.pos += 1;
                let mut items = Vec::new();
                if self.peek()? == b']' {
                    self.pos += 1;
                    return Ok(Json::Array(items));
                }
                loop {
                    items.push(self.value()?);
                    match self.peek()? {
                        b',' => self.pos += 1,
                        b']' => {
                            self.pos += 1;
                            return Ok(Json::Array(items));
                        }
                        _ => return Err(format!("bad array at {}", self.pos)),
                    }
                }
            }
            b'"' => Ok(Json::String(self.string()?)),
            b'n' => self.literal("null"),
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            _ => {
                let start = self.pos;
                while self
                    .s
                    .get(self.pos)
                    .is_some_and(|b| b"+-.eE0123456789".contains(b))
                {
                    self.pos += 1;
                }
                let text =
                    std::str::from_utf8(&self.s[start..self.pos]).map_err(|e| e.to_string())?;
                text.parse()
                    .map(Json::Number)
                    .map_err(|_| format!("bad number at {start}"))
            }
        }
    }

    fn string(&mut self) -> Result<String, String> {
        self.expect(b'"')?;
        let mut out = String::new();
        loop {
            let b = *self.s.get(self.pos).ok_or("unterminated string")?;
            self.pos += 1;
            match b {
                b'"' => return Ok(out),
                b'\\' => {
                    let e = *self.s.get(self.pos).ok_or("unterminated escape")?;
                    self.pos += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e as char),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let mut c = self.hex4()?;
                            if (0xd800..0xdc00).contains(&c) {
                                // A surrogate pair: \uD8xx\uDCxx.
                                if !self.s[self.pos..].starts_with(b"\\u") {
                                    return Err("lone surrogate".into());
                                }
                                self.pos += 2;
                                let low = self.hex4()?;
                                c = 0x10000
                                    + ((c - 0xd800) << 10)
                                    + (low.wrapping_sub(0xdc00) & 0x3ff);
                            }
                            out.push(char::from_u32(c).ok_or("bad \\u escape")?);
                        }
                        _ => return Err(format!("bad escape at {}", self.pos)),
                    }
                }
                _ => {
                    // Copy a run of plain UTF-8 bytes at once.
                    let start = self.pos - 1;
                    while self
                        .s
                        .get(self.pos)
                        .is_some_and(|&c| c != b'"' && c != b'\\')
                    {
                        self.pos += 1;
                    }
                    out.push_str(
                        std::str::from_utf8(&self.s[start..self.pos]).map_err(|e| e.to_string())?,
                    );
                }
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let digits = self
            .s
            .get(self.pos..self.pos + 4)
            .ok_or("short \\u escape")?;
        self.pos += 4;
        let text = std::str::from_utf8(digits).map_err(|e| e.to_string())?;
        u32::from_str_radix(text, 16).map_err(|e| e.to_string())
    }
}
