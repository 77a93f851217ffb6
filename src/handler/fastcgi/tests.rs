use super::*;
use crate::config::{Location, UpstreamAddr};
use crate::http::Method;
use crate::proto::fastcgi::parse_params;
use std::collections::HashMap;
use std::time::Duration;

fn conf(document_root: Option<&str>) -> FastcgiConf {
    FastcgiConf {
        addr: UpstreamAddr::Unix("/nonexistent".into()),
        spawn: None,
        timeout_io: Duration::from_secs(1),
        keepalive: Duration::ZERO,
        max_connections: 16,
        send_delegated_uri: false,
        document_root: document_root.map(str::to_owned),
        max_request_buffer: 1 << 20,
        max_response_head: 1 << 16,
        at: Location {
            file: "t.yaml".into(),
            line: 1,
        },
    }
}

fn params(
    h: &FastcgiHandler,
    req: &Request,
    script: Option<Script<'_>>,
) -> HashMap<String, String> {
    let p = h.params(req, script);
    parse_params(p.as_bytes())
        .unwrap()
        .into_iter()
        .map(|(k, v)| (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap()))
        .collect()
}

#[test]
fn fields_become_cgi_variables() {
    let h = Shared::new("spate/test").handler(&conf(Some("/srv")));
    let req = Request::for_test(
        Method::Post,
        "/app/x?q=1",
        &[
            ("Content-Type", "text/plain"),
            ("Content-Length", "3"),
            ("Cookie", "a=1"),
            ("cookie", "b=2"),
            ("X-Forwarded-For", "10.0.0.1"),
            ("Proxy", "http://evil/"),
            ("Connection", "keep-alive"),
        ],
    );
    let v = params(&h, &req, None);
    assert_eq!(v["SCRIPT_NAME"], "");
    assert_eq!(v["PATH_INFO"], "/app/x");
    assert_eq!(v["DOCUMENT_ROOT"], "/srv");
    assert_eq!(v["PATH_TRANSLATED"], "/srv/app/x");
    assert_eq!(v["QUERY_STRING"], "q=1");
    assert_eq!(v["REQUEST_METHOD"], "POST");
    assert_eq!(v["REQUEST_URI"], "/app/x?q=1");
    assert_eq!(v["CONTENT_TYPE"], "text/plain");
    assert_eq!(v["HTTP_COOKIE"], "a=1;b=2");
    assert_eq!(v["HTTP_X_FORWARDED_FOR"], "10.0.0.1");
    assert_eq!(v["REMOTE_ADDR"], "127.0.0.1");
    assert_eq!(v["REMOTE_PORT"], "1");
    assert_eq!(v["SERVER_PORT"], "2");
    assert_eq!(v["SERVER_SOFTWARE"], "spate/test");
    assert_eq!(v["SERVER_PROTOCOL"], "HTTP/1.1");
    for absent in [
        "HTTP_PROXY",
        "HTTP_CONTENT_LENGTH",
        "HTTP_CONTENT_TYPE",
        "HTTP_CONNECTION",
        "HTTPS",
        // Added by the client once the body's length is known.
        "CONTENT_LENGTH",
    ] {
        assert!(!v.contains_key(absent), "{absent}");
    }
}

#[test]
fn a_script_names_its_file_and_path_info() {
    let h = Shared::new("s").handler(&conf(None));
    let req = Request::for_test(Method::Get, "/a.php/b", &[]);
    let v = params(
        &h,
        &req,
        Some(Script {
            filename: b"/srv/a.php",
            name: b"/a.php",
            path_info: Some(b"/b"),
        }),
    );
    assert_eq!(v["SCRIPT_FILENAME"], "/srv/a.php");
    assert_eq!(v["SCRIPT_NAME"], "/a.php");
    assert_eq!(v["PATH_INFO"], "/b");
    assert!(!v.contains_key("DOCUMENT_ROOT"));
}

#[test]
fn hosts_lose_their_port() {
    assert_eq!(host_of(b"example.com:8080"), b"example.com");
    assert_eq!(host_of(b"example.com"), b"example.com");
    assert_eq!(host_of(b"[::1]:443"), b"[::1]");
    assert_eq!(host_of(b""), b"");
}
