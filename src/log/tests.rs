//! End-to-end tests of the access log: escapes against built requests, files, buffering.

use super::*;
use crate::http::request::RequestBuilder;
use crate::http::{Method, Version};
use bytes::Bytes;
use std::path::Path;
use std::time::UNIX_EPOCH;

/// A request whose head buffer holds the target, then each header name and value.
fn request(method: Method, target: &[u8], headers: &[(&[u8], &[u8])]) -> Request {
    let mut head = target.to_vec();
    let mut fields = Vec::new();
    for (n, v) in headers {
        let ns = head.len();
        head.extend_from_slice(n);
        let vs = head.len();
        head.extend_from_slice(v);
        fields.push((ns..vs, vs..head.len()));
    }
    RequestBuilder {
        method,
        version: Version::Http11,
        secure: false,
        peer: "192.0.2.7:51234".parse().unwrap(),
        local: "[::1]:8080".parse().unwrap(),
        target: 0..target.len(),
        authority: None,
        fields,
    }
    .build(Bytes::from(head))
}

fn sample() -> Request {
    request(
        Method::Get,
        b"/dir/a.html?x=1&y=2",
        &[
            (b"Host", b"example.com:8080"),
            (b"User-Agent", b"curl/8.0"),
            (b"Referer", b""),
        ],
    )
}

/// 2000-10-10 13:45:36.012345 UTC
fn received_at() -> SystemTime {
    UNIX_EPOCH + Duration::new(971_185_536, 12_345_000)
}

fn record<'a>(req: &'a Request, resp_headers: &'a [(Bytes, Bytes)]) -> LogRecord<'a> {
    LogRecord {
        req,
        status: 200,
        body_bytes: 1234,
        total_bytes: 1400,
        received_at: received_at(),
        duration: Duration::from_micros(2_500_123),
        resp_headers,
        tls: None,
        stream_id: None,
    }
}

/// Renders one line of `format` for `rec`, without the trailing newline.
fn line(format: &str, rec: &LogRecord<'_>) -> String {
    line_as(format, Escape::Apache, rec)
}

fn line_as(format: &str, escape: Escape, rec: &LogRecord<'_>) -> String {
    let compiled = format::Compiled::new(format, escape).unwrap();
    let mut out = Vec::new();
    render::render(&compiled, rec, &mut time::Calendar::default(), &mut out);
    assert_eq!(out.pop(), Some(b'\n'));
    String::from_utf8(out).unwrap()
}

#[test]
fn each_escape() {
    let req = sample();
    let resp = [(
        Bytes::from_static(b"Content-Type"),
        Bytes::from_static(b"text/html"),
    )];
    let rec = record(&req, &resp);
    let cases: &[(&str, &str)] = &[
        ("%%", "%"),
        ("%A", "::1"),
        ("%h", "192.0.2.7"),
        ("%a", "192.0.2.7"),
        ("%b", "1234"),
        ("%B", "1234"),
        ("%O", "1400"),
        ("%H", "HTTP/1.1"),
        ("%l", "-"),
        ("%u", "-"),
        ("%m", "GET"),
        ("%p", "8080"),
        ("%{local}p", "8080"),
        ("%{remote}p", "51234"),
        ("%q", "?x=1&y=2"),
        ("%r", "GET /dir/a.html?x=1&y=2 HTTP/1.1"),
        ("%s", "200"),
        ("%>s", "200"),
        ("%t", "[10/Oct/2000:13:45:36 +0000]"),
        ("%{sec}t", "971185536"),
        ("%{msec}t", "971185536012"),
        ("%{usec}t", "971185536012345"),
        ("%{msec_frac}t", "012"),
        ("%{usec_frac}t", "012345"),
        ("%U", "/dir/a.html"),
        ("%V", "example.com:8080"),
        ("%v", "example.com:8080"),
        ("%{user-agent}i", "curl/8.0"),
        ("%{USER-AGENT}i", "curl/8.0"),
        ("%{Referer}i", "-"),
        ("%{Cookie}i", "-"),
        ("%{content-type}o", "text/html"),
        ("%{Location}o", "-"),
        ("%D", "2500123"),
        ("%{us}T", "2500123"),
        ("%{ms}T", "2500"),
        ("%T", "2"),
        ("%{duration}x", "2.500123"),
        (
            "%{%d/%b/%Y:%H:%M:%S}t.%{msec_frac}t",
            "10/Oct/2000:13:45:36.012",
        ),
        ("[%m %U%q]", "[GET /dir/a.html?x=1&y=2]"),
    ];
    for (format, want) in cases {
        assert_eq!(line(format, &rec), *want, "format {format:?}");
    }
}

/// h2o's `%{ssl.*}x` and `%{http2.stream-id}x`, with the connection's facts and without.
#[test]
fn tls_and_stream_values() {
    let req = request(Method::Get, b"/", &[]);
    let mut rec = record(&req, &[]);
    let format = "%{ssl.protocol-version}x %{ssl.session-reused}x %{ssl.cipher}x \
                  %{ssl.cipher-bits}x %{ssl.session-id}x %{http2.stream-id}x";
    assert_eq!(line(format, &rec), "- - - - - -");
    use rustls::{CipherSuite as S, ProtocolVersion as V};
    let short = "%{ssl.cipher}x %{ssl.cipher-bits}x";
    let cases = [
        (
            V::TLSv1_3,
            S::TLS13_AES_128_GCM_SHA256,
            true,
            format,
            "TLSv1.3 1 TLS_AES_128_GCM_SHA256 128 - 7",
        ),
        (
            V::TLSv1_2,
            S::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
            false,
            format,
            "TLSv1.2 0 ECDHE-RSA-CHACHA20-POLY1305 256 - 7",
        ),
        (
            V::TLSv1_2,
            S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            false,
            short,
            "ECDHE-ECDSA-AES256-GCM-SHA384 256",
        ),
    ];
    rec.stream_id = Some(7);
    for (version, suite, resumed, format, want) in cases {
        rec.tls = Some(TlsFacts {
            version,
            suite,
            resumed,
        });
        assert_eq!(line(format, &rec), want);
    }
    // In JSON, a value the connection does not have is null.
    rec.tls = None;
    rec.stream_id = None;
    assert_eq!(
        line_as(
            r#"{"v":"%{ssl.protocol-version}x","r":%{ssl.session-reused}x,"s":%{http2.stream-id}x}"#,
            Escape::Json,
            &rec
        ),
        r#"{"v":null,"r":null,"s":null}"#
    );
}

/// Every name of h2o's `%{NAME}x` list loads; those spate does not measure log as missing.
#[test]
fn h2o_extension_names_load() {
    let req = request(Method::Get, b"/", &[]);
    let rec = record(&req, &[]);
    for name in super::format::UNMEASURED {
        assert_eq!(line(&format!("<%{{{name}}}x>"), &rec), "<->", "{name}");
    }
    assert!(validate_format("%{ssl.no-such-thing}x").is_err());
}

#[test]
fn absent_and_zero_values() {
    let req = request(Method::Head, b"/", &[]);
    let mut rec = record(&req, &[]);
    rec.body_bytes = 0;
    rec.total_bytes = 0;
    assert_eq!(line("%b|%B|%O", &rec), "-|0|0");
    assert_eq!(line("[%q]", &rec), "[]");
    assert_eq!(line("%V %v", &rec), "- -");
    assert_eq!(line("%r", &rec), "HEAD / HTTP/1.1");
}

#[test]
fn ipv4_mapped_peers_are_logged_as_ipv4() {
    let mut req = sample();
    req.peer = "[::ffff:10.1.2.3]:9".parse().unwrap();
    assert_eq!(line("%h", &record(&req, &[])), "10.1.2.3");
}

#[test]
fn escapes_quotes_and_control_bytes_in_values() {
    let req = request(
        Method::Other(Bytes::from_static(b"WEIRD")),
        b"/a\"b\\c?q=\x01",
        &[(b"User-Agent", b"evil\"\r\nagent\x7f\xc3\xa9")],
    );
    let rec = record(&req, &[]);
    assert_eq!(
        line("\"%r\" \"%{User-Agent}i\"", &rec),
        "\"WEIRD /a\\x22b\\x5cc?q=\\x01 HTTP/1.1\" \"evil\\x22\\x0d\\x0aagent\\x7f\\xc3\\xa9\""
    );
    assert_eq!(line("%U %q", &rec), "/a\\x22b\\x5cc ?q=\\x01");
}

#[test]
fn validate_format_reports_errors() {
    assert!(validate_format(COMMON_FORMAT).is_ok());
    assert!(validate_format(COMBINED_FORMAT).is_ok());
    assert!(validate_format("%{%Y-%m-%d}t").is_ok());
    assert!(validate_format("%{%c}t").unwrap_err().contains("strftime"));
    assert!(validate_format("%Q").unwrap_err().contains("%Q"));
}

/// Checks a format as `prepare` does.
fn validate_format(format: &str) -> Result<(), String> {
    Formats::default().compile(format, Escape::Apache)
}

/// The log of `conf` with its format compiled, as `prepare` compiles it.
fn prepared(conf: &AccessLogConf) -> AccessLog {
    let mut formats = Formats::default();
    formats.compile(&conf.format, conf.escape).unwrap();
    AccessLog::new(conf, &formats)
}

fn conf(path: &Path, format: &str) -> AccessLogConf {
    AccessLogConf {
        target: LogTarget::File(path.to_path_buf()),
        format: format.to_string(),
        escape: Escape::Apache,
        buffer_size: 0,
        at: crate::config::Location {
            file: std::sync::Arc::from("t"),
            line: 1,
        },
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn common_and_combined_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    let req = sample();
    {
        let mut common = prepared(&conf(&path, COMMON_FORMAT));
        let mut combined = prepared(&conf(&path, COMBINED_FORMAT));
        common.log(&record(&req, &[]));
        common.flush();
        combined.log(&record(&req, &[]));
        combined.flush();
    }
    assert_eq!(
        read(&path),
        "192.0.2.7 - - [10/Oct/2000:13:45:36 +0000] \"GET /dir/a.html?x=1&y=2 HTTP/1.1\" 200 1234\n\
         192.0.2.7 - - [10/Oct/2000:13:45:36 +0000] \"GET /dir/a.html?x=1&y=2 HTTP/1.1\" 200 1234 \
         \"-\" \"curl/8.0\"\n"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        // The umask may remove bits, never add them.
        assert_eq!(mode & 0o133, 0, "mode {mode:o}");
    }
}

#[test]
fn appends_to_an_existing_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    std::fs::write(&path, "old line\n").unwrap();
    let req = sample();
    let mut log = prepared(&conf(&path, "%m %U"));
    log.log(&record(&req, &[]));
    log.flush();
    assert_eq!(read(&path), "old line\nGET /dir/a.html\n");
}

#[test]
fn with_a_buffer_size_lines_wait_for_a_flush() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    let req = sample();
    let mut log = prepared(&AccessLogConf {
        buffer_size: 4096,
        ..conf(&path, "%s %U")
    });
    log.log(&record(&req, &[]));
    log.log(&record(&req, &[]));
    assert_eq!(read(&path), "", "nothing is written before a flush");
    log.flush();
    assert_eq!(read(&path), "200 /dir/a.html\n200 /dir/a.html\n");
    log.flush();
    assert_eq!(
        read(&path),
        "200 /dir/a.html\n200 /dir/a.html\n",
        "flush is idempotent"
    );
}

/// h2o's and nginx's default: a line is on disk once its request is logged.
#[test]
fn without_a_buffer_size_each_line_is_written_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    let req = sample();
    let mut log = prepared(&conf(&path, "%s %U"));
    log.log(&record(&req, &[]));
    assert_eq!(read(&path), "200 /dir/a.html\n");
    log.log(&record(&req, &[]));
    assert_eq!(read(&path), "200 /dir/a.html\n200 /dir/a.html\n");
}

#[test]
fn writes_whole_lines_when_the_buffer_fills() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    let req = sample();
    let mut log = prepared(&AccessLogConf {
        buffer_size: BUFFER_LIMIT,
        ..conf(&path, "%s %U %{User-Agent}i")
    });
    let one = "200 /dir/a.html curl/8.0\n";
    let mut logged = 0;
    // Just below the limit: still nothing on disk.
    while (logged + 1) * one.len() < BUFFER_LIMIT {
        log.log(&record(&req, &[]));
        logged += 1;
    }
    assert_eq!(read(&path), "");
    // The line that reaches the limit triggers exactly one write of every buffered line.
    log.log(&record(&req, &[]));
    logged += 1;
    let on_disk = read(&path);
    assert_eq!(on_disk, one.repeat(logged));
    // Later lines wait for the next flush; dropping the log flushes them.
    log.log(&record(&req, &[]));
    assert_eq!(read(&path).len(), on_disk.len());
    drop(log);
    assert_eq!(read(&path), one.repeat(logged + 1));
}

#[test]
fn unopenable_file_drops_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing-dir").join("access.log");
    let req = sample();
    let mut log = prepared(&conf(&path, COMMON_FORMAT));
    log.log(&record(&req, &[]));
    log.flush();
    assert!(!path.exists());
    assert_eq!(log.conf().target, LogTarget::File(path.to_path_buf()));
}

#[test]
fn invalid_format_logs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("access.log");
    let req = sample();
    let conf = conf(&path, "%Z");
    let mut formats = Formats::default();
    assert!(formats.compile(&conf.format, conf.escape).is_err());
    let mut log = AccessLog::new(&conf, &formats);
    log.log(&record(&req, &[]));
    log.flush();
    assert_eq!(read(&path), "");
}

#[test]
fn json_escape_writes_json_lines() {
    let req = request(
        Method::Get,
        b"/a\"b?q=\x01",
        &[(b"User-Agent", b"say \"hi\"\\ \xc3\xa9"), (b"Referer", b"")],
    );
    let mut rec = record(&req, &[]);
    rec.body_bytes = 0;
    let format = r#"{"ua":"%{user-agent}i","ref":"%{referer}i","x":"%{x-none}i","s":%s,"b":%b,"u":"%u","r":"%r","t":"%{%Y}t"}"#;
    assert_eq!(
        line_as(format, Escape::Json, &rec),
        r#"{"ua":"say \"hi\"\\ \u00c3\u00a9","ref":"","x":null,"s":200,"b":0,"u":null,"r":"GET /a\"b?q=\u0001 HTTP/1.1","t":"2000"}"#
    );
    // Apache's style for the same values.
    assert_eq!(
        line_as("%{x-none}i %b %{referer}i", Escape::Apache, &rec),
        "- - -"
    );
    // A missing value inside a longer string stays inside it.
    assert_eq!(
        line_as(r#"{"v":"x=%{x-none}i"}"#, Escape::Json, &rec),
        r#"{"v":"x=null"}"#
    );
}
