//! h2o's directives that change answers, against a real spate: `file.file`,
//! `file.send-compressed: gunzip`, and the rest of issue 38's list. Each test names the h2o
//! behaviour it checks (h2o's docs and its `t/` tests).

mod common;

use common::*;
use std::io::Write;
use std::process::Command;

/// `spate -t` on `yaml`: whether it passed, and its standard error.
fn check(yaml: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("conf.yaml");
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(BIN)
        .args(["-t", "-c"])
        .arg(&path)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(data).unwrap();
    enc.finish().unwrap()
}

/// curl's answer: the head (lowercase) and the body as sent (curl decodes nothing).
fn fetch(s: &Spate, path: &str, extra: &[&str]) -> (String, Vec<u8>) {
    let url = s.url(path);
    let mut args = vec!["-D", "/dev/stderr"];
    args.extend_from_slice(extra);
    args.push(&url);
    let out = curl(&args);
    (
        String::from_utf8_lossy(&out.stderr).to_ascii_lowercase(),
        out.stdout,
    )
}

/// h2o's t/50file-file.t: `file.file` maps a path to one file; its type comes from the real
/// file's extension, and other paths are 404.
#[test]
fn file_file_serves_one_file_for_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let jpeg = vec![0xffu8; 40_000];
    write_file(dir.path(), "assets/halfdome.jpg", &jpeg);
    let s = Spate::start_in(
        r#"
listen: {host: 127.0.0.1, port: 0}
hosts:
  default:
    paths:
      /favicon.ico:
        file.file: $DIR/assets/halfdome.jpg
"#,
        dir,
    );
    assert_eq!(get(&s, "/").status, 404);
    let r = get(&s, "/favicon.ico");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("image/jpeg"));
    assert_eq!(r.header("content-length"), Some("40000"));
    assert_eq!(r.body, jpeg);
    // Conditional requests work as for file.dir.
    let etag = r.header("etag").unwrap().to_owned();
    let r = request(
        &s,
        &format!("GET /favicon.ico HTTP/1.1\r\nHost: x\r\nIf-None-Match: {etag}\r\n\r\n"),
    );
    assert_eq!(r.status, 304);
}

/// A `file.file` naming a missing file answers 404; one naming a directory 403.
#[test]
fn file_file_missing_or_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("somedir")).unwrap();
    let s = Spate::start_in(
        r#"
listen: {host: 127.0.0.1, port: 0}
hosts:
  default:
    paths:
      /gone:
        file.file: $DIR/nothing-here.txt
      /dir:
        file.file: $DIR/somedir
"#,
        dir,
    );
    assert_eq!(get(&s, "/gone").status, 404);
    assert_eq!(get(&s, "/dir").status, 403);
}

/// h2o's `file.send-compressed: gunzip` (t/50file-config.t): a file there only as `.gz` goes
/// as it is to a client that takes gzip, and decompressed to one that does not, with
/// `Vary: Accept-Encoding` either way. Over HTTP/1.1 and HTTP/2.
#[test]
fn send_compressed_gunzip_decompresses_for_clients_without_gzip() {
    let dir = tempfile::tempdir().unwrap();
    // Several output pieces' worth, so the decompressed body streams.
    let text: Vec<u8> = (0..6000)
        .flat_map(|i| format!("line {i} of alice in wonderland\n").into_bytes())
        .collect();
    let gz = gzip(&text);
    write_file(dir.path(), "htdocs/alice2.txt.gz", &gz);
    write_file(dir.path(), "htdocs/index.txt", b"plain\n");
    let s = Spate::start_in(
        r#"
listen: {host: 127.0.0.1, port: 0}
hosts:
  default:
    paths:
      /:
        file.dir: $DIR/htdocs
        file.send-compressed: gunzip
"#,
        dir,
    );
    for proto in [&[][..], &["--http2-prior-knowledge"][..]] {
        let (head, body) = fetch(&s, "/alice2.txt", proto);
        assert!(head.contains(" 200"), "{head}");
        assert!(head.contains("vary: accept-encoding"), "{head}");
        assert!(!head.contains("content-encoding"), "{head}");
        assert!(head.contains("content-type: text/plain"), "{head}");
        assert_eq!(body.len(), text.len(), "{proto:?}");
        assert!(body == text, "{proto:?}: decompressed body differs");

        let mut args = vec!["-H", "Accept-Encoding: gzip"];
        args.extend_from_slice(proto);
        let (head, body) = fetch(&s, "/alice2.txt", &args);
        assert!(head.contains("content-encoding: gzip"), "{head}");
        assert!(head.contains("vary: accept-encoding"), "{head}");
        assert!(
            head.contains(&format!("content-length: {}", gz.len())),
            "{head}"
        );
        assert!(body == gz, "{proto:?}: the .gz is sent as it is");
    }
    // A file with no .gz is served as usual, and one in neither form is 404.
    let (head, body) = fetch(&s, "/index.txt", &[]);
    assert!(head.contains(" 200"), "{head}");
    assert_eq!(body, b"plain\n");
    assert_eq!(get(&s, "/nothing.txt").status, 404);
    // HEAD of the decompressed file: the fields without a body.
    let (head, _) = fetch(&s, "/alice2.txt", &["-I"]);
    assert!(
        head.contains(" 200") && head.contains("vary: accept-encoding"),
        "{head}"
    );
}

/// A `.gz` that is not gzip: the client gets the head and a body cut short, never a panic;
/// the server stays up.
#[test]
fn send_compressed_gunzip_with_a_broken_gz_cuts_the_body_short() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "htdocs/bad.txt.gz", &[b'x'; 50_000]);
    let s = Spate::start_in(
        r#"
listen: {host: 127.0.0.1, port: 0}
hosts:
  default:
    paths:
      /:
        file.dir: $DIR/htdocs
        file.send-compressed: gunzip
"#,
        dir,
    );
    let out = curl(&[&s.url("/bad.txt")]);
    assert!(!out.status.success(), "curl sees an incomplete body");
    let r = get(&s, "/bad.txt.gz");
    assert_eq!(r.status, 200, "the server is still up");
    assert_eq!(s.log_lines_naming("bad .gz", 1).len(), 1);
}

/// `file.send-compressed` takes ON, OFF or gunzip; anything else is refused with its line.
#[test]
fn send_compressed_refuses_other_values_with_the_line() {
    let (ok, err) = check(
        "listen: 8080\nhosts:\n  default:\n    paths:\n      /:\n        file.dir: /tmp\n        file.send-compressed: gunzipped\n",
    );
    assert!(!ok);
    assert!(
        err.contains("conf.yaml:7") && err.contains("ON, OFF or gunzip"),
        "{err}"
    );
    let (ok, err) = check(
        "listen: 8080\nfile.send-compressed: GUNZIP\nhosts:\n  default:\n    paths:\n      /one:\n        file.file: /etc/hostname\n",
    );
    assert!(ok, "{err}");
}
