//! The file handler through a real spate: index files, redirects, MIME types, validators,
//! ranges, traversal attempts, the open-file cache and `spate serve`.

mod common;

use common::*;
use std::io::Write;

const INDEX: &str = "<html><body>index</body></html>\n";

/// A document root with a few files, served by a config with `extra` path-level directives.
fn site(extra: &str) -> Spate {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("htdocs");
    write_file(&root, "index.html", INDEX.as_bytes());
    write_file(&root, "hello.txt", b"hello world\n");
    write_file(&root, "style.css", b"body{}\n");
    write_file(&root, "app.js", b"1;\n");
    write_file(
        &root,
        "data.bin",
        &(0..=255u8).cycle().take(100_000).collect::<Vec<u8>>(),
    );
    write_file(&root, "sub/index.html", b"sub index\n");
    write_file(&root, "empty/.keep", b"");
    write_file(&root, "noindex/a&b.txt", b"x");
    write_file(&root, "file.custom", b"custom\n");
    write_file(dir.path(), "secret.txt", b"outside the root\n");
    Spate::start_in(
        &format!(
            r#"
listen: {{host: 127.0.0.1, port: 0}}
hosts:
  default:
    paths:
      /:
        file.dir: $DIR/htdocs
{extra}
"#
        ),
        dir,
    )
}

#[test]
fn serves_index_files_and_files() {
    let s = site("");
    let r = get(&s, "/");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), INDEX);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert_eq!(get(&s, "/sub/").text(), "sub index\n");
    let r = get(&s, "/hello.txt");
    assert_eq!(r.text(), "hello world\n");
    assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
    assert_eq!(
        get(&s, "/style.css").header("content-type"),
        Some("text/css; charset=utf-8")
    );
}

#[test]
fn a_large_file_arrives_intact() {
    let s = site("");
    let r = get(&s, "/data.bin");
    assert_eq!(r.status, 200);
    let expected: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    assert_eq!(r.body.len(), expected.len());
    assert!(r.body == expected, "body differs");
    // And with a real client.
    let mut resp = agent().get(&s.url("/data.bin")).call().unwrap();
    let body = resp.body_mut().read_to_vec().unwrap();
    assert!(body == expected);
}

#[test]
fn a_directory_without_slash_redirects() {
    let s = site("");
    let r = get(&s, "/sub?x=1");
    assert_eq!(r.status, 301);
    let loc = r.header("location").unwrap();
    assert!(loc.ends_with("/sub/?x=1"), "{loc}");
}

#[test]
fn missing_files_are_404_and_no_index_is_403() {
    let s = site("");
    assert_eq!(get(&s, "/nope.html").status, 404);
    assert_eq!(get(&s, "/empty/").status, 403);
}

#[test]
fn dirlisting_lists_and_escapes_names() {
    let s = site("        file.dirlisting: ON");
    let r = get(&s, "/noindex/");
    assert_eq!(r.status, 200);
    let t = r.text();
    assert!(t.contains("a&amp;b.txt"), "{t}");
    assert!(!t.contains("a&b.txt"), "{t}");
}

#[test]
fn mime_addtypes_apply() {
    let s = site("        file.mime.addtypes:\n          application/x-custom: .custom");
    assert_eq!(
        get(&s, "/file.custom").header("content-type"),
        Some("application/x-custom")
    );
}

#[test]
fn mime_settypes_removetypes_and_the_default_type_apply() {
    let s = site(
        "        file.mime.settypes: {text/x-only: .txt}\n        file.mime.removetypes: [.js]\n        file.mime.setdefaulttype: application/x-unknown",
    );
    let ct = |p: &str| get(&s, p).header("content-type").map(str::to_string);
    assert_eq!(
        ct("/hello.txt").as_deref(),
        Some("text/x-only; charset=utf-8")
    );
    // The built-in table is gone: .css and .bin are unknown, like .js removed.
    for p in ["/style.css", "/app.js", "/data.bin"] {
        assert_eq!(ct(p).as_deref(), Some("application/x-unknown"), "{p}");
    }
}

/// `expires` gives a 200 answer `Cache-Control: max-age`, also when the lane answers again
/// from its memo on a kept-alive connection, and leaves a 404 alone.
#[test]
fn expires_adds_max_age_to_200_answers() {
    let s = site("        expires: 1 hour");
    let mut c = s.connect();
    let mut pending = Vec::new();
    for _ in 0..3 {
        write_all(&mut c, b"GET /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n");
        let r = read_response(&mut c, &mut pending, false);
        assert_eq!(r.status, 200);
        assert_eq!(r.header("cache-control"), Some("max-age=3600"));
    }
    let missing = get(&s, "/no-such-file");
    assert_eq!(missing.status, 404);
    assert_eq!(missing.header("cache-control"), None);
}

/// `error-doc`: a 404, a 405 (which keeps its Allow) and a proxy's 502 (an answer that comes
/// later) carry the site's documents with their own status; an inner path's entry wins, and
/// a HEAD gets the document's length without its body.
#[test]
fn error_docs_replace_the_body_of_error_answers() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("htdocs");
    write_file(&root, "index.html", INDEX.as_bytes());
    write_file(&root, "errors/404.html", b"<h1>not here</h1>\n");
    write_file(&root, "errors/5xx.html", b"<h1>down for a moment</h1>\n");
    write_file(&root, "errors/special.txt", b"special 404\n");
    let s = Spate::start_in(
        r#"
listen: {host: 127.0.0.1, port: 0}
error-doc:
  - status: 404
    url: /errors/404.html
  - status: [405, 502, 503]
    url: /errors/5xx.html
hosts:
  default:
    paths:
      /:
        file.dir: $DIR/htdocs
      /special:
        error-doc: {status: 404, url: /errors/special.txt}
        file.dir: $DIR/htdocs
      /api:
        proxy.reverse.url: http://127.0.0.1:1/
"#,
        dir,
    );
    let mut c = s.connect();
    let mut pending = Vec::new();
    for _ in 0..3 {
        write_all(&mut c, b"GET /missing HTTP/1.1\r\nHost: a\r\n\r\n");
        let r = read_response(&mut c, &mut pending, false);
        assert_eq!(r.status, 404);
        assert_eq!(r.text(), "<h1>not here</h1>\n");
        assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
        assert_eq!(r.header("etag"), None, "the document's validators stay out");
    }
    write_all(&mut c, b"HEAD /missing HTTP/1.1\r\nHost: a\r\n\r\n");
    let r = read_response(&mut c, &mut pending, true);
    assert_eq!((r.status, r.header("content-length")), (404, Some("18")));
    let r = request(&s, "DELETE /index.html HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(r.status, 405);
    assert!(r.header("allow").is_some_and(|a| a.contains("GET")));
    assert_eq!(r.text(), "<h1>down for a moment</h1>\n");
    let r = get(&s, "/special/missing");
    assert_eq!((r.status, r.text()), (404, "special 404\n".to_string()));
    let r = get(&s, "/api/x");
    assert_eq!(r.status, 502);
    assert_eq!(r.text(), "<h1>down for a moment</h1>\n");
    // The document itself is served as usual.
    assert_eq!(get(&s, "/errors/404.html").status, 200);
}

#[test]
fn other_methods_get_405_with_allow() {
    let s = site("");
    let r = request(&s, "DELETE /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(r.status, 405);
    let allow = r.header("allow").unwrap();
    assert!(allow.contains("GET") && allow.contains("HEAD"), "{allow}");
    let r = request(&s, "HEAD /hello.txt HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("12"));
}

#[test]
fn etag_and_last_modified_give_304() {
    let s = site("");
    let r = get(&s, "/hello.txt");
    let etag = r.header("etag").expect("ETag").to_string();
    assert!(etag.starts_with('"'), "strong: {etag}");
    let lm = r
        .header("last-modified")
        .expect("Last-Modified")
        .to_string();
    let r = request(
        &s,
        &format!("GET /hello.txt HTTP/1.1\r\nHost: a\r\nIf-None-Match: {etag}\r\n\r\n"),
    );
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    assert_eq!(r.header("etag"), Some(etag.as_str()));
    let r = request(
        &s,
        &format!("GET /hello.txt HTTP/1.1\r\nHost: a\r\nIf-Modified-Since: {lm}\r\n\r\n"),
    );
    assert_eq!(r.status, 304);
    let r = request(
        &s,
        "GET /hello.txt HTTP/1.1\r\nHost: a\r\nIf-None-Match: \"other\"\r\n\r\n",
    );
    assert_eq!(r.status, 200);
}

#[test]
fn etag_off_sends_none() {
    let s = site("        file.etag: OFF");
    assert!(get(&s, "/hello.txt").header("etag").is_none());
}

#[test]
fn ranges() {
    let s = site("");
    let r = request(
        &s,
        "GET /hello.txt HTTP/1.1\r\nHost: a\r\nRange: bytes=0-4\r\n\r\n",
    );
    assert_eq!(r.status, 206);
    assert_eq!(r.text(), "hello");
    assert_eq!(r.header("content-range"), Some("bytes 0-4/12"));
    let r = request(
        &s,
        "GET /hello.txt HTTP/1.1\r\nHost: a\r\nRange: bytes=-6\r\n\r\n",
    );
    assert_eq!(r.text(), "world\n");
    let r = request(
        &s,
        "GET /data.bin HTTP/1.1\r\nHost: a\r\nRange: bytes=99990-\r\n\r\n",
    );
    assert_eq!(r.status, 206);
    assert_eq!(r.body.len(), 10);
    let r = request(
        &s,
        "GET /hello.txt HTTP/1.1\r\nHost: a\r\nRange: bytes=50-60\r\n\r\n",
    );
    assert_eq!(r.status, 416);
    assert_eq!(r.header("content-range"), Some("bytes */12"));
    let r = request(
        &s,
        "GET /hello.txt HTTP/1.1\r\nHost: a\r\nRange: bytes=0-1,6-7\r\n\r\n",
    );
    assert_eq!(r.status, 206);
    let ct = r.header("content-type").unwrap();
    assert!(ct.starts_with("multipart/byteranges; boundary="), "{ct}");
    let t = r.text();
    assert!(
        t.contains("Content-Range: bytes 0-1/12") && t.contains("Content-Range: bytes 6-7/12"),
        "{t}"
    );
    assert!(
        t.contains("\r\n\r\nhe\r\n") && t.contains("\r\n\r\nwo\r\n"),
        "{t}"
    );
}

#[test]
fn if_range_with_a_stale_validator_sends_everything() {
    let s = site("");
    let r = request(
        &s,
        "GET /hello.txt HTTP/1.1\r\nHost: a\r\nRange: bytes=0-4\r\nIf-Range: \"stale\"\r\n\r\n",
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "hello world\n");
    let etag = get(&s, "/hello.txt").header("etag").unwrap().to_string();
    let r = request(
        &s,
        &format!(
            "GET /hello.txt HTTP/1.1\r\nHost: a\r\nRange: bytes=0-4\r\nIf-Range: {etag}\r\n\r\n"
        ),
    );
    assert_eq!(r.status, 206);
}

#[test]
fn curl_resumes_a_download() {
    if !have("curl") {
        eprintln!("curl not installed; skipping");
        return;
    }
    let s = site("");
    let out = curl(&["-r", "6-", "-D", "-", &s.url("/hello.txt")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("HTTP/1.1 206"), "{text}");
    assert!(text.ends_with("\r\n\r\nworld\n"), "{text}");
}

#[test]
fn no_path_escapes_the_document_root() {
    let s = site("");
    for path in [
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/%2E%2E/secret.txt",
        "/sub/../../secret.txt",
        "/sub/%2e%2e/%2e%2e/secret.txt",
        "/..%2fsecret.txt",
        "/sub%2f..%2f..%2fsecret.txt",
        "/hello.txt%00.html",
        "//etc/passwd",
        "/./../secret.txt",
    ] {
        let r = get(&s, path);
        assert!(
            r.status >= 400 && !r.text().contains("outside the root"),
            "{path} -> {} {}",
            r.status,
            r.text()
        );
    }
    // Dot segments inside the root resolve normally.
    assert_eq!(get(&s, "/sub/../hello.txt").text(), "hello world\n");
    assert_eq!(get(&s, "/%68ello.txt").text(), "hello world\n");
}

#[test]
fn changed_and_deleted_files_are_noticed() {
    let s = site("");
    let path = s.path().join("htdocs/hello.txt");
    assert_eq!(get(&s, "/hello.txt").text(), "hello world\n");
    let etag1 = get(&s, "/hello.txt").header("etag").unwrap().to_string();
    // The cache revalidates entries older than a second.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(b"changed content\n").unwrap();
    drop(f);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let r = get(&s, "/hello.txt");
    assert_eq!(r.text(), "changed content\n");
    assert_ne!(r.header("etag").unwrap(), etag1);
    std::fs::remove_file(&path).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(get(&s, "/hello.txt").status, 404);
}

#[test]
fn spate_serve_serves_a_directory_without_config() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "index.html", INDEX.as_bytes());
    write_file(dir.path(), "files/a.txt", b"a\n");
    let s = Spate::serve(dir);
    assert_eq!(get(&s, "/").text(), INDEX);
    // Listings are on for `serve`.
    let listing = get(&s, "/files/");
    assert_eq!(listing.status, 200);
    assert!(listing.text().contains("a.txt"));
}

#[test]
fn the_bundled_example_site_is_served() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/site");
    let child = std::process::Command::new(BIN)
        .args(["serve", root, "--listen", "127.0.0.1:0", "--threads", "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let s = Spate::from_child(child);
    let r = get(&s, "/");
    assert_eq!(r.status, 200);
    assert!(r.text().contains("spate is serving this site"));
    for asset in ["/style.css", "/logo.svg", "/app.js", "/docs/"] {
        assert_eq!(get(&s, asset).status, 200, "{asset}");
    }
    assert_eq!(
        get(&s, "/logo.svg").header("content-type"),
        Some("image/svg+xml; charset=utf-8")
    );
}

/// h2o's own check (`t/50file-range.t`, "multi-ranged"): a 20-character boundary of letters
/// and digits, the body split on it gives nothing before the first part, each part's data
/// after its header, and the closing `--`; the Content-Length is the whole multipart body.
#[test]
fn multi_range_request_gets_multipart_byteranges_as_h2o_sends_it() {
    let s = site("");
    let data: Vec<u8> = (0..=255u8).cycle().take(100_000).collect();
    let r = request(
        &s,
        "GET /data.bin HTTP/1.1\r\nHost: a\r\nRange: bytes=100-199,1000-1099\r\n\r\n",
    );
    assert_eq!(r.status, 206);
    let ct = r.header("content-type").unwrap();
    let boundary = ct.strip_prefix("multipart/byteranges; boundary=").unwrap();
    assert_eq!(boundary.len(), 20, "{ct}");
    assert!(boundary.bytes().all(|b| b.is_ascii_alphanumeric()), "{ct}");
    assert_eq!(
        r.header("content-length"),
        Some(r.body.len().to_string().as_str())
    );
    assert!(r.body.starts_with(format!("--{boundary}\r\n").as_bytes()));
    let sep = format!("\r\n--{boundary}");
    let body = &r.body[boundary.len() + 2..];
    let chunks: Vec<&[u8]> = split_on(body, sep.as_bytes());
    assert_eq!(chunks.len(), 3);
    let mut first = b"\r\n\r\n".to_vec();
    first.extend_from_slice(&data[100..200]);
    assert!(chunks[0].ends_with(&first));
    assert!(chunks[0].starts_with(b"\r\nContent-Type: application/octet-stream\r\n"));
    assert!(std::str::from_utf8(&chunks[0][..80])
        .unwrap_or("")
        .contains("Content-Range: bytes 100-199/100000\r\n"));
    let mut second = b"\r\n\r\n".to_vec();
    second.extend_from_slice(&data[1000..1100]);
    assert!(chunks[1].ends_with(&second));
    assert_eq!(chunks[2], b"--\r\n");

    // Over the cap of ranges, or ranges overlapping past the file's size: the whole file.
    let many: Vec<String> = (0..17).map(|i| format!("{}-{}", i * 10, i * 10)).collect();
    let r = request(
        &s,
        &format!(
            "GET /hello.txt HTTP/1.1\r\nHost: a\r\nRange: bytes={}\r\n\r\n",
            many.join(",")
        ),
    );
    assert_eq!((r.status, r.text()), (200, "hello world\n".to_string()));
    let r = request(
        &s,
        "GET /hello.txt HTTP/1.1\r\nHost: a\r\nRange: bytes=0-,0-\r\n\r\n",
    );
    assert_eq!(r.status, 200);
}

fn split_on<'a>(mut hay: &'a [u8], sep: &[u8]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    while let Some(i) = hay.windows(sep.len()).position(|w| w == sep) {
        out.push(&hay[..i]);
        hay = &hay[i + sep.len()..];
    }
    out.push(hay);
    out
}

/// A 40 KiB file rewritten in place with the same length and modification time keeps its
/// identity, so the cache keeps its entry: one held in memory is answered as it was read,
/// one not held is read again at each answer. That tells `file.memory-cache-max-file-size`
/// (and its 64 KiB default) at work; both answer ranges of the file as read. One worker:
/// the caches are per worker.
#[test]
fn files_up_to_the_memory_cache_size_are_held() {
    for (global, held) in [("", true), ("file.memory-cache-max-file-size: 0\n", false)] {
        let dir = tempfile::tempdir().unwrap();
        let first: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8).collect();
        write_file(dir.path(), "htdocs/mid.bin", &first);
        let s = Spate::start_in(
            &format!(
                "{global}num-threads: 1\nlisten: {{host: 127.0.0.1, port: 0}}\nhosts:\n  default:\n    paths:\n      /:\n        file.dir: $DIR/htdocs\n"
            ),
            dir,
        );
        let r = get(&s, "/mid.bin");
        assert_eq!((r.status, r.body == first), (200, true), "{global}");
        let r = request(
            &s,
            "GET /mid.bin HTTP/1.1\r\nHost: a\r\nRange: bytes=20000-20009\r\n\r\n",
        );
        assert_eq!((r.status, &r.body[..]), (206, &first[20000..20010]));

        let path = s.path().join("htdocs/mid.bin");
        let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
        let second: Vec<u8> = first.iter().map(|b| b ^ 0xff).collect();
        let mut f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all(&second).unwrap();
        f.set_modified(modified).unwrap();
        drop(f);
        // Past the revalidation interval: the entry is checked and found the same file.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let want = if held { &first } else { &second };
        let r = get(&s, "/mid.bin");
        assert!(r.body == *want, "{global}: held {held}");
        let r = request(
            &s,
            "GET /mid.bin HTTP/1.1\r\nHost: a\r\nRange: bytes=20000-20009\r\n\r\n",
        );
        assert_eq!(&r.body[..], &want[20000..20010], "{global}");
    }
}
