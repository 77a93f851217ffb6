//! Handler tests against a temporary directory.

use super::*;
use crate::config::MimeTypes;
use std::path::Path;
use std::time::Duration;

struct Site {
    dir: tempfile::TempDir,
    cache: Rc<RefCell<OpenFileCache>>,
}

impl Site {
    fn new() -> Site {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::write(p.join("hello.txt"), b"hello world\n").unwrap();
        std::fs::write(p.join("data.bin"), (0..=255u8).collect::<Vec<u8>>()).unwrap();
        std::fs::write(p.join("page.html"), b"<p>hi</p>").unwrap();
        std::fs::write(p.join("app.js"), b"1").unwrap();
        std::fs::write(p.join("noext"), b"x").unwrap();
        std::fs::write(p.join("pic.PNG"), b"x").unwrap();
        std::fs::create_dir(p.join("sub")).unwrap();
        std::fs::write(p.join("sub/index.html"), b"sub index").unwrap();
        std::fs::create_dir(p.join("empty")).unwrap();
        std::fs::write(p.join("empty/a&b.txt"), b"").unwrap();
        Site {
            dir,
            cache: Rc::new(RefCell::new(OpenFileCache::new())),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn conf(&self) -> FileConf {
        FileConf {
            dir: self.path().to_path_buf(),
            ..FileConf::default()
        }
    }

    fn handler(&self) -> FileHandler {
        self.handler_with(self.conf())
    }

    fn handler_with(&self, conf: FileConf) -> FileHandler {
        FileHandler::new(conf, self.cache.clone())
    }
}

fn request(method: Method, target: &str, headers: &[(&str, &str)]) -> Request {
    Request::for_test(method, target, headers)
}

fn get(h: &FileHandler, target: &str) -> Response {
    h.respond_now(&request(Method::Get, target, &[]))
}

fn get_with(h: &FileHandler, target: &str, headers: &[(&str, &str)]) -> Response {
    h.respond_now(&request(Method::Get, target, headers))
}

/// The body as bytes, reading file ranges from the open file.
fn body(resp: &Response) -> Vec<u8> {
    fn range(r: &FileRange) -> Vec<u8> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0; r.len as usize];
        r.file.file.read_exact_at(&mut buf, r.offset).unwrap();
        if let Some(b) = r.cached_bytes() {
            assert_eq!(b, buf, "cached contents differ from the file");
        }
        buf
    }
    match &resp.body {
        Body::Empty => Vec::new(),
        Body::Bytes(b) => b.to_vec(),
        Body::File(r) => range(r),
        Body::Parts(parts) => parts
            .iter()
            .flat_map(|p| match p {
                BodyPart::Bytes(b) => b.to_vec(),
                BodyPart::File(r) => range(r),
            })
            .collect(),
        Body::Stream(_) => panic!("the file handler never streams"),
    }
}

fn header<'a>(resp: &'a Response, name: &str) -> Option<&'a str> {
    resp.header(name.as_bytes())
        .map(|v| std::str::from_utf8(v).unwrap())
}

#[test]
fn serves_a_file_with_validators() {
    let s = Site::new();
    let h = s.handler();
    let r = get(&h, "/hello.txt");
    assert_eq!(r.status, 200);
    assert_eq!(body(&r), b"hello world\n");
    assert_eq!(
        header(&r, "Content-Type"),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(header(&r, "Accept-Ranges"), Some("bytes"));
    let etag = header(&r, "ETag").unwrap();
    assert!(etag.starts_with('"') && etag.ends_with("-c\""), "{etag}");
    let lm = header(&r, "Last-Modified").unwrap();
    assert!(httpdate::parse_http_date(lm).is_ok());
    // Second request is a cache hit with the same answer.
    let r2 = get(&h, "/hello.txt");
    assert_eq!(header(&r2, "ETag"), Some(etag));
    assert_eq!(body(&r2), b"hello world\n");
    assert_eq!(s.cache.borrow().len(), 1);
}

#[test]
fn head_gets_the_same_headers() {
    let s = Site::new();
    let h = s.handler();
    let r = h.respond_now(&request(Method::Head, "/data.bin", &[]));
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 256);
    assert_eq!(header(&r, "Content-Type"), Some("application/octet-stream"));
}

#[test]
fn missing_file_is_404() {
    let s = Site::new();
    let h = s.handler();
    assert_eq!(get(&h, "/nope.txt").status, 404);
    assert_eq!(get(&h, "/nope/deeper").status, 404);
    assert_eq!(get(&h, "/hello.txt/").status, 404);
    assert_eq!(get(&h, "/hello.txt/x").status, 404);
}

#[test]
fn other_methods_are_405() {
    let s = Site::new();
    let h = s.handler();
    for m in [Method::Post, Method::Put, Method::Delete, Method::Options] {
        let r = h.respond_now(&request(m, "/hello.txt", &[]));
        assert_eq!(r.status, 405);
        assert_eq!(header(&r, "Allow"), Some("GET, HEAD"));
    }
}

#[test]
fn traversal_attempts_never_leave_the_root() {
    let outer = tempfile::tempdir().unwrap();
    std::fs::write(outer.path().join("secret"), b"secret").unwrap();
    let root = outer.path().join("root");
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(root.join("a")).unwrap();
    std::fs::write(root.join("a/ok"), b"ok").unwrap();
    let cache = Rc::new(RefCell::new(OpenFileCache::new()));
    let h = FileHandler::new(
        FileConf {
            dir: root.clone(),
            ..FileConf::default()
        },
        cache,
    );
    for (target, status) in [
        ("/../secret", 400),
        ("/%2e%2e/secret", 400),
        ("/%2E%2E/secret", 400),
        ("/a/../../secret", 400),
        ("/a/%2e%2e/%2e%2e/secret", 400),
        ("/./../secret", 400),
        ("/..%2fsecret", 404),
        ("/a%2f..%2f..%2fsecret", 404),
        ("/..\\secret", 404),
        ("/%00", 404),
        ("/a/ok%00.txt", 404),
        ("/%zz", 400),
        ("secret", 400),
    ] {
        let r = get(&h, target);
        assert_eq!(r.status, status, "{target}");
        assert_ne!(body(&r), b"secret", "{target}");
    }
    // Dot segments that stay inside are fine.
    assert_eq!(body(&get(&h, "/a/./../a/ok")), b"ok");
    assert_eq!(body(&get(&h, "/a/%2e/ok")), b"ok");
    assert_eq!(body(&get(&h, "//a//ok")), b"ok");
}

#[test]
fn symlink_to_absolute_path_is_followed_only_when_placed_by_the_admin() {
    // Requests cannot name an absolute path: `//etc/passwd` stays under the root.
    let s = Site::new();
    let h = s.handler();
    assert_eq!(get(&h, "//etc/passwd").status, 404);
    assert_eq!(get(&h, "/%2fetc%2fpasswd").status, 404);
}

#[test]
fn directory_index_and_redirect() {
    let s = Site::new();
    let h = s.handler();
    let r = get(&h, "/sub/");
    assert_eq!(r.status, 200);
    assert_eq!(body(&r), b"sub index");
    assert_eq!(header(&r, "Content-Type"), Some("text/html; charset=utf-8"));
    // Cached under the directory key; still right on a hit.
    assert_eq!(body(&get(&h, "/sub/")), b"sub index");

    let r = get(&h, "/sub?x=1&y=%20");
    assert_eq!(r.status, 301);
    assert_eq!(header(&r, "Location"), Some("/sub/?x=1&y=%20"));
    let r = get(&h, "/sub?a\r\nSet-Cookie: x");
    assert_eq!(header(&r, "Location"), Some("/sub/?a%0D%0ASet-Cookie:%20x"));
    let r = get(&h, "/sub/.");
    assert_eq!(body(&r), b"sub index");
    // The Location is rebuilt from the normalised path, so it cannot go off-site.
    let r = get(&h, "//sub");
    assert_eq!(header(&r, "Location"), Some("/sub/"));
}

#[test]
fn directory_without_index_is_403_or_a_listing() {
    let s = Site::new();
    let h = s.handler();
    assert_eq!(get(&h, "/empty/").status, 403);
    let h = s.handler_with(FileConf {
        dirlisting: true,
        ..s.conf()
    });
    let r = get(&h, "/empty/");
    assert_eq!(r.status, 200);
    assert_eq!(header(&r, "Content-Type"), Some("text/html; charset=utf-8"));
    let html = String::from_utf8(body(&r)).unwrap();
    assert!(html.contains("a&amp;b.txt</a>"), "{html}");
    assert!(html.contains("Index of /empty/"));
}

#[test]
fn custom_index_list() {
    let s = Site::new();
    std::fs::write(s.path().join("empty/home.txt"), b"home").unwrap();
    let h = s.handler_with(FileConf {
        index: vec!["missing.html".into(), "home.txt".into()],
        ..s.conf()
    });
    assert_eq!(body(&get(&h, "/empty/")), b"home");
    // Another handler on the same cache with the default list must not reuse that choice.
    let d = s.handler();
    assert_eq!(get(&d, "/empty/").status, 403);
}

#[test]
fn prefix_is_stripped() {
    let s = Site::new();
    let h = s.handler().with_prefix("/static/");
    assert_eq!(body(&get(&h, "/static/hello.txt")), b"hello world\n");
    assert_eq!(get(&h, "/static/../hello.txt").status, 400);
    let r = get(&h, "/static");
    assert_eq!(r.status, 301);
    assert_eq!(header(&r, "Location"), Some("/static/"));
    let r = get(&h, "/static/sub?q");
    assert_eq!(header(&r, "Location"), Some("/static/sub/?q"));
    // The root has no index file.
    assert_eq!(get(&h, "/static/").status, 403);
}

#[test]
fn mime_types_and_charset() {
    let s = Site::new();
    let h = s.handler();
    let ct = |p: &str| header(&get(&h, p), "Content-Type").map(str::to_string);
    assert_eq!(
        ct("/page.html").as_deref(),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(
        ct("/app.js").as_deref(),
        Some("text/javascript; charset=utf-8")
    );
    assert_eq!(ct("/pic.PNG").as_deref(), Some("image/png"));
    assert_eq!(ct("/noext").as_deref(), Some("application/octet-stream"));

    let h = s.handler_with(FileConf {
        mime_types: MimeTypes {
            overrides: vec![
                ("bin".into(), "application/x-spate".into()),
                ("png".into(), "text/x-png".into()),
            ],
            ..MimeTypes::default()
        },
        ..s.conf()
    });
    let ct = |p: &str| header(&get(&h, p), "Content-Type").map(str::to_string);
    assert_eq!(ct("/data.bin").as_deref(), Some("application/x-spate"));
    // settypes (no built-in table), removetypes (an empty type) and setdefaulttype.
    let only = s.handler_with(FileConf {
        mime_types: MimeTypes {
            overrides: vec![
                ("html".into(), "text/x-mine".into()),
                ("bin".into(), String::new()),
            ],
            builtin: false,
            default_type: "text/plain".into(),
        },
        ..s.conf()
    });
    let ct_only = |p: &str| header(&get(&only, p), "Content-Type").map(str::to_string);
    assert_eq!(
        ct_only("/page.html").as_deref(),
        Some("text/x-mine; charset=utf-8")
    );
    for unknown in ["/pic.PNG", "/data.bin", "/noext"] {
        assert_eq!(
            ct_only(unknown).as_deref(),
            Some("text/plain; charset=utf-8"),
            "{unknown}"
        );
    }
    assert_eq!(ct("/pic.PNG").as_deref(), Some("text/x-png; charset=utf-8"));
    assert_eq!(
        with_charset("application/json").as_deref(),
        Some("application/json; charset=utf-8")
    );
    assert_eq!(
        with_charset("image/svg+xml").as_deref(),
        Some("image/svg+xml; charset=utf-8")
    );
    assert_eq!(with_charset("text/plain; charset=latin1"), None);
    assert_eq!(with_charset("image/png"), None);
}

#[test]
fn etag_and_last_modified_give_304() {
    let s = Site::new();
    let h = s.handler();
    let r = get(&h, "/hello.txt");
    let etag = header(&r, "ETag").unwrap().to_string();
    let lm = header(&r, "Last-Modified").unwrap().to_string();

    let r = get_with(&h, "/hello.txt", &[("If-None-Match", &etag)]);
    assert_eq!(r.status, 304);
    assert!(r.body.is_empty());
    assert_eq!(header(&r, "ETag"), Some(etag.as_str()));
    assert_eq!(header(&r, "Last-Modified"), Some(lm.as_str()));
    let weak = format!("\"x\", W/{etag}");
    assert_eq!(
        get_with(&h, "/hello.txt", &[("If-None-Match", &weak)]).status,
        304
    );
    assert_eq!(
        get_with(&h, "/hello.txt", &[("If-None-Match", "*")]).status,
        304
    );
    assert_eq!(
        get_with(&h, "/hello.txt", &[("If-None-Match", "\"x\"")]).status,
        200
    );

    assert_eq!(
        get_with(&h, "/hello.txt", &[("If-Modified-Since", &lm)]).status,
        304
    );
    let old = "Sun, 06 Nov 1994 08:49:37 GMT";
    assert_eq!(
        get_with(&h, "/hello.txt", &[("If-Modified-Since", old)]).status,
        200
    );
    // If-None-Match wins over If-Modified-Since.
    let both = [
        ("If-None-Match", "\"x\""),
        ("If-Modified-Since", lm.as_str()),
    ];
    assert_eq!(get_with(&h, "/hello.txt", &both).status, 200);
}

#[test]
fn if_match_and_if_unmodified_since_give_412() {
    let s = Site::new();
    let h = s.handler();
    let r = get(&h, "/hello.txt");
    let etag = header(&r, "ETag").unwrap().to_string();
    let lm = header(&r, "Last-Modified").unwrap().to_string();
    assert_eq!(
        get_with(&h, "/hello.txt", &[("If-Match", &etag)]).status,
        200
    );
    assert_eq!(get_with(&h, "/hello.txt", &[("If-Match", "*")]).status, 200);
    assert_eq!(
        get_with(&h, "/hello.txt", &[("If-Match", "\"x\"")]).status,
        412
    );
    let weak = format!("W/{etag}");
    assert_eq!(
        get_with(&h, "/hello.txt", &[("If-Match", &weak)]).status,
        412
    );
    assert_eq!(
        get_with(&h, "/hello.txt", &[("If-Unmodified-Since", &lm)]).status,
        200
    );
    let old = "Sun, 06 Nov 1994 08:49:37 GMT";
    assert_eq!(
        get_with(&h, "/hello.txt", &[("If-Unmodified-Since", old)]).status,
        412
    );
    // If-Match wins over If-Unmodified-Since; an unparsable date is ignored.
    let both = [("If-Match", etag.as_str()), ("If-Unmodified-Since", old)];
    assert_eq!(get_with(&h, "/hello.txt", &both).status, 200);
    assert_eq!(
        get_with(&h, "/hello.txt", &[("If-Unmodified-Since", "soon")]).status,
        200
    );
}

#[test]
fn etag_off() {
    let s = Site::new();
    let h = s.handler_with(FileConf {
        etag: false,
        ..s.conf()
    });
    let r = get(&h, "/hello.txt");
    assert_eq!(header(&r, "ETag"), None);
    assert!(header(&r, "Last-Modified").is_some());
}

#[test]
fn single_ranges() {
    let s = Site::new();
    let h = s.handler();
    let r = get_with(&h, "/data.bin", &[("Range", "bytes=10-19")]);
    assert_eq!(r.status, 206);
    assert_eq!(header(&r, "Content-Range"), Some("bytes 10-19/256"));
    assert_eq!(body(&r), (10..=19).collect::<Vec<u8>>());
    let r = get_with(&h, "/data.bin", &[("Range", "bytes=-3")]);
    assert_eq!(header(&r, "Content-Range"), Some("bytes 253-255/256"));
    assert_eq!(body(&r), vec![253, 254, 255]);
    let r = get_with(&h, "/data.bin", &[("Range", "bytes=250-")]);
    assert_eq!(header(&r, "Content-Range"), Some("bytes 250-255/256"));
    assert_eq!(body(&r).len(), 6);
}

#[test]
fn multiple_ranges_are_multipart() {
    let s = Site::new();
    let h = s.handler();
    let r = get_with(&h, "/data.bin", &[("Range", "bytes=0-1,-2")]);
    assert_eq!(r.status, 206);
    let ct = header(&r, "Content-Type").unwrap();
    let boundary = ct
        .strip_prefix("multipart/byteranges; boundary=")
        .unwrap()
        .to_string();
    let got = body(&r);
    let mut want = Vec::new();
    for (i, (range, bytes)) in [("0-1", [0u8, 1]), ("254-255", [254, 255])]
        .into_iter()
        .enumerate()
    {
        let sep = if i == 0 { "" } else { "\r\n" };
        want.extend_from_slice(
            format!(
                "{sep}--{boundary}\r\nContent-Type: application/octet-stream\r\n\
                 Content-Range: bytes {range}/256\r\n\r\n"
            )
            .as_bytes(),
        );
        want.extend_from_slice(&bytes);
    }
    want.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    assert_eq!(got, want);
    assert_eq!(r.body.len(), want.len() as u64);
}

#[test]
fn unsatisfiable_and_malformed_ranges() {
    let s = Site::new();
    let h = s.handler();
    let r = get_with(&h, "/data.bin", &[("Range", "bytes=256-")]);
    assert_eq!(r.status, 416);
    assert_eq!(header(&r, "Content-Range"), Some("bytes */256"));
    for bad in ["bytes=5-1", "lines=1-2", "bytes=x"] {
        let r = get_with(&h, "/data.bin", &[("Range", bad)]);
        assert_eq!(r.status, 200, "{bad}");
        assert_eq!(body(&r).len(), 256);
    }
    // Overlapping ranges larger than the file: whole file.
    let r = get_with(&h, "/data.bin", &[("Range", "bytes=0-200,100-255")]);
    assert_eq!(r.status, 200);
}

#[test]
fn if_range() {
    let s = Site::new();
    let h = s.handler();
    let r = get(&h, "/data.bin");
    let etag = header(&r, "ETag").unwrap().to_string();
    let lm = header(&r, "Last-Modified").unwrap().to_string();
    let ranged = |if_range: &str| {
        get_with(
            &h,
            "/data.bin",
            &[("Range", "bytes=0-0"), ("If-Range", if_range)],
        )
        .status
    };
    assert_eq!(ranged(&etag), 206);
    assert_eq!(ranged(&lm), 206);
    assert_eq!(ranged("\"stale\""), 200);
    assert_eq!(ranged(&format!("W/{etag}")), 200);
    assert_eq!(ranged("Sun, 06 Nov 1994 08:49:37 GMT"), 200);
}

#[test]
fn send_compressed() {
    let s = Site::new();
    std::fs::write(s.path().join("hello.txt.gz"), b"GZ").unwrap();
    std::fs::write(s.path().join("hello.txt.br"), b"BR").unwrap();
    let h = s.handler_with(FileConf {
        send_compressed: true,
        ..s.conf()
    });
    let r = get_with(&h, "/hello.txt", &[("Accept-Encoding", "gzip, br")]);
    assert_eq!(body(&r), b"BR");
    assert_eq!(header(&r, "Content-Encoding"), Some("br"));
    assert_eq!(header(&r, "Vary"), Some("Accept-Encoding"));
    assert_eq!(
        header(&r, "Content-Type"),
        Some("text/plain; charset=utf-8")
    );
    let br_etag = header(&r, "ETag").unwrap().to_string();

    let r = get_with(&h, "/hello.txt", &[("Accept-Encoding", "gzip")]);
    assert_eq!(body(&r), b"GZ");
    assert_eq!(header(&r, "Content-Encoding"), Some("gzip"));
    assert_ne!(header(&r, "ETag"), Some(br_etag.as_str()));

    let r = get(&h, "/hello.txt");
    assert_eq!(body(&r), b"hello world\n");
    assert_eq!(header(&r, "Content-Encoding"), None);
    assert_eq!(header(&r, "Vary"), Some("Accept-Encoding"));

    // Ranges on a compressed answer: the whole compressed file.
    let r = get_with(
        &h,
        "/hello.txt",
        &[("Accept-Encoding", "br"), ("Range", "bytes=0-0")],
    );
    assert_eq!((r.status, body(&r)), (200, b"BR".to_vec()));

    // Conditional requests are against the compressed file's ETag.
    let r = get_with(
        &h,
        "/hello.txt",
        &[("Accept-Encoding", "br"), ("If-None-Match", &br_etag)],
    );
    assert_eq!(r.status, 304);

    // Off: siblings are ignored.
    let off = s.handler();
    let r = get_with(&off, "/hello.txt", &[("Accept-Encoding", "br")]);
    assert_eq!(body(&r), b"hello world\n");
    assert_eq!(header(&r, "Vary"), None);
}

#[test]
fn cache_notices_changed_and_deleted_files() {
    let s = Site::new();
    s.cache.borrow_mut().set_revalidate_after(Duration::ZERO);
    let h = s.handler();
    let p = s.path().join("hello.txt");
    let r = get(&h, "/hello.txt");
    let etag = header(&r, "ETag").unwrap().to_string();
    std::fs::write(&p, b"changed!").unwrap();
    let r = get(&h, "/hello.txt");
    assert_eq!(body(&r), b"changed!");
    assert_ne!(header(&r, "ETag"), Some(etag.as_str()));
    // Replaced by rename with a new inode.
    let tmp = s.path().join("tmp");
    std::fs::write(&tmp, b"renamed!").unwrap();
    std::fs::rename(&tmp, &p).unwrap();
    assert_eq!(body(&get(&h, "/hello.txt")), b"renamed!");
    std::fs::remove_file(&p).unwrap();
    assert_eq!(get(&h, "/hello.txt").status, 404);
    // The directory index too.
    std::fs::remove_file(s.path().join("sub/index.html")).unwrap();
    assert_eq!(get(&h, "/sub/").status, 403);
}

#[test]
fn cache_trusts_fresh_entries() {
    let s = Site::new();
    s.cache
        .borrow_mut()
        .set_revalidate_after(Duration::from_secs(3600));
    let h = s.handler();
    assert_eq!(body(&get(&h, "/hello.txt")), b"hello world\n");
    std::fs::remove_file(s.path().join("hello.txt")).unwrap();
    // Within the interval the open file keeps being served.
    assert_eq!(body(&get(&h, "/hello.txt")), b"hello world\n");
}

#[test]
fn large_files_are_not_held_in_memory() {
    let s = Site::new();
    let big = vec![b'z'; SMALL_FILE as usize + 10];
    std::fs::write(s.path().join("big.txt"), &big).unwrap();
    let h = s.handler();
    let r = get_with(&h, "/big.txt", &[("Range", "bytes=-5")]);
    match &r.body {
        Body::File(f) => {
            assert!(f.file.contents.is_none());
            assert_eq!((f.offset, f.len), (SMALL_FILE + 5, 5));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn special_files_are_403() {
    let s = Site::new();
    let p = s.path().join("fifo");
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    crate::sys::file::mkfifo(&c, 0o644).unwrap();
    assert_eq!(get(&s.handler(), "/fifo").status, 403);
}

#[test]
fn unreadable_file_is_403() {
    if crate::sys::account::euid() == 0 {
        // root reads any file regardless of its mode; nothing to test.
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let s = Site::new();
    let p = s.path().join("secret.txt");
    std::fs::write(&p, b"s").unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o000)).unwrap();
    assert_eq!(get(&s.handler(), "/secret.txt").status, 403);
}

#[test]
fn whole_answers_share_fields_built_for_each_handlers_settings() {
    let s = Site::new();
    let h = s.handler();
    let a = get(&h, "/hello.txt");
    let b = get(&h, "/hello.txt");
    // Built once, then shared: the same list, not clones of its fields.
    assert_eq!(a.headers.as_ptr(), b.headers.as_ptr());
    let names: Vec<&str> = a
        .headers
        .iter()
        .map(|(n, _)| std::str::from_utf8(n).unwrap())
        .collect();
    assert_eq!(
        names,
        ["Content-Type", "Last-Modified", "ETag", "Accept-Ranges"]
    );
    // Another handler on the same cache without ETags, then with other MIME types.
    let no_etag = s.handler_with(FileConf {
        etag: false,
        ..s.conf()
    });
    let r = get(&no_etag, "/hello.txt");
    assert_eq!(header(&r, "ETag"), None);
    assert!(header(&get(&h, "/hello.txt"), "ETag").is_some());
    let typed = s.handler_with(FileConf {
        mime_types: MimeTypes {
            overrides: vec![("txt".into(), "application/x-note".into())],
            ..MimeTypes::default()
        },
        ..s.conf()
    });
    let r = get(&typed, "/hello.txt");
    assert_eq!(header(&r, "Content-Type"), Some("application/x-note"));
    let r = get(&h, "/hello.txt");
    assert_eq!(
        header(&r, "Content-Type"),
        Some("text/plain; charset=utf-8")
    );
    // Partial and 304 answers have fields of their own.
    let r = get_with(&h, "/hello.txt", &[("Range", "bytes=0-1")]);
    assert_eq!(header(&r, "Content-Range"), Some("bytes 0-1/12"));
    let etag = header(&a, "ETag").unwrap().to_string();
    let r = get_with(&h, "/hello.txt", &[("If-None-Match", &etag)]);
    assert_eq!((r.status, header(&r, "Content-Type")), (304, None));
}

#[test]
fn the_last_path_decoded_is_reused_only_for_the_same_path() {
    let s = Site::new();
    let h = s.handler();
    let other = s.handler_with(FileConf {
        dir: s.path().join("sub"),
        ..s.conf()
    });
    for _ in 0..2 {
        assert_eq!(get(&h, "/hello.txt").status, 200);
        assert_eq!(get(&h, "/../hello.txt").status, 400);
        assert_eq!(get(&h, "/%2e%2e/hello.txt").status, 400);
        assert_eq!(body(&get(&h, "/hello.txt")), b"hello world\n");
        assert_eq!(body(&get(&h, "/sub/")), b"sub index");
        assert_eq!(get(&h, "/sub").status, 301);
        assert_eq!(body(&get(&h, "/sub/.")), b"sub index");
        // Each handler keeps its own: the same path under another root.
        assert_eq!(body(&get(&other, "/index.html")), b"sub index");
        assert_eq!(get(&h, "/index.html").status, 404);
    }
}
