//! Tests of loading whole configurations: scopes, hosts, listeners and every directive.

use super::*;
use crate::config::yaml::NodeKind;
use crate::config::LogTarget;
use crate::config::{
    log, AccessLogConf, CompressConf, FileConf, HandlerConf, HeaderOp, Http2, ListenKind, PathConf,
    ProxyConf, RedirectConf, RespondConf, UpstreamAddr, UpstreamUrl,
};
use std::path::PathBuf;
use std::time::Duration;

/// The configuration `text` loads to (from `/etc/spate/t.yaml`); panics on errors.
pub(in crate::config) fn ok(text: &str) -> Config {
    match load_str(text, "/etc/spate/t.yaml") {
        Ok(c) => c,
        Err(e) => panic!("unexpected errors: {e:?}"),
    }
}

/// Every error as `file:line: message`.
pub(in crate::config) fn errors(text: &str) -> Vec<String> {
    match load_str(text, "t.yaml") {
        Ok(_) => panic!("expected errors"),
        Err(e) => e.iter().map(|e| e.to_string()).collect(),
    }
}

/// Found by the `config` fuzz target: a lone CR ends a line in YAML, so errors after
/// one are reported on the line an editor shows, and the loader does not panic.
#[test]
fn lone_cr_line_breaks_count_in_error_lines() {
    let e = errors("listen: 8080\rbogus-directive: 1\r\r\rerror-log: [1]\n");
    assert!(e.iter().any(|e| e.starts_with("t.yaml:2: ")), "{e:?}");
    assert!(e.iter().any(|e| e.starts_with("t.yaml:5: ")), "{e:?}");
}

fn path<'a>(c: &'a Config, host: usize, prefix: &str) -> &'a PathConf {
    match c.hosts[host].paths.iter().find(|p| p.prefix == prefix) {
        Some(p) => p,
        None => panic!("no path {prefix}"),
    }
}

fn file(p: &PathConf) -> &FileConf {
    match &p.handler {
        HandlerConf::File(f) => f,
        other => panic!("not a file handler: {other:?}"),
    }
}

fn headers(p: &PathConf) -> Vec<(HeaderOp, &str, &str)> {
    p.headers
        .iter()
        .map(|h| (h.op, h.name.as_str(), h.value.as_str()))
        .collect()
}

/// Where a certificate and its key would be: (cert, key). Loading only records the
/// paths (`server::prepare` reads them), so no files are needed.
fn cert() -> &'static (String, String) {
    static PAIR: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    PAIR.get_or_init(|| {
        (
            "/srv/certs/localhost.crt".to_string(),
            "/srv/certs/localhost.key".to_string(),
        )
    })
}

/// `text` with `$CRT` and `$KEY` replaced by a certificate's and a key's paths.
pub(in crate::config) fn with_cert(text: &str) -> String {
    let (c, k) = cert();
    text.replace("$CRT", c).replace("$KEY", k)
}

#[test]
fn a_listener_serves_every_host_when_global_else_the_hosts_that_name_it() {
    let c = ok(
        "listen: 8080\nhosts:\n  a:\n    listen: 8080\n    paths:\n      /:\n        \
         file.dir: /srv\n  b:\n    listen: 8081\n    paths:\n      /:\n        \
         file.dir: /srv\n  c:\n    listen: [8082, 8081]\n    paths:\n      /:\n        \
         file.dir: /srv\n",
    );
    let hosts: Vec<_> = c
        .listeners
        .iter()
        .map(|l| (l.addr.port(), l.hosts.clone()))
        .collect();
    assert_eq!(
        hosts,
        [
            (8080, None),
            (8081, Some(vec![1, 2])),
            (8082, Some(vec![2]))
        ]
    );
}

#[test]
fn proxy_protocol_is_a_tcp_listeners_and_agrees_on_a_shared_address() {
    let c = ok(
        "listen:\n  port: 8080\n  proxy-protocol: ON\nhosts:\n  a:\n    paths:\n      \
         /:\n        file.dir: /srv\n",
    );
    assert!(c.listeners[0].proxy_protocol);
    let e = errors(
        "listen: 8080\nhosts:\n  a:\n    listen: {port: 8080, proxy-protocol: ON}\n    \
         paths:\n      /:\n        file.dir: /srv\n",
    );
    assert_eq!(
        e,
        ["t.yaml:4: listen 0.0.0.0:8080: proxy-protocol differs from the listen at line 1"]
    );
    let e = errors("listen: {port: 8443, type: quic, proxy-protocol: ON, ssl: {}}\nhosts: {}\n");
    assert!(
        e.iter()
            .any(|l| l.contains("proxy-protocol applies to TCP")),
        "{e:?}"
    );
}

#[test]
fn push_and_reprioritising_directives_accept_off_only() {
    ok("listen: 80\nhttp2-casper: OFF\nhttp2-reprioritize-blocking-assets: OFF\nhosts:\n  a:\n    http2-push-preload: OFF\n    paths:\n      /:\n        http2-allow-cross-origin-push: OFF\n        file.dir: .\n");
    let e = errors("listen: 80\nhttp2-push-preload: ON\nhttp2-reprioritize-blocking-assets: ON\nhosts: {a: {paths: {/: {http2-casper: OFF, file.dir: .}}}}\n");
    assert_eq!(
        e,
        vec![
            "t.yaml:2: http2-push-preload: only OFF is supported: spate does not push (browsers have dropped HTTP/2 server push)",
            "t.yaml:3: http2-reprioritize-blocking-assets: only OFF is supported: spate follows the client's priorities (RFC 9218 urgency)",
            "t.yaml:4: directive http2-casper cannot be used at the path level",
        ]
    );
}

/// h2o 2.3's mapping form of the header commands: `when: early` commands go to interim
/// responses only, `all` to both, `final` (the default) to the final answer.
#[test]
fn header_commands_take_h2o_when() {
    let c = ok("listen: 80\nhosts:\n  a:\n    paths:\n      /:\n        header.add: {header: \"Link: </a.css>; rel=preload\", when: early}\n        header.set: {header: [\"X-A: 1\"], when: all}\n        header.unset: {header: X-B, when: final}\n        file.dir: .\n");
    let p = path(&c, 0, "/");
    let names = |cmds: &[crate::config::HeaderCommand]| -> Vec<String> {
        cmds.iter().map(|c| c.name.clone()).collect()
    };
    assert_eq!(names(&p.early_headers), ["Link", "X-A"]);
    assert_eq!(names(&p.headers), ["X-A", "X-B"]);
    let e = errors("listen: 80\nhosts:\n  a:\n    paths:\n      /:\n        header.add: {header: \"X: 1\", when: sometimes}\n        header.set: {when: early}\n        header.unset: {header: X, at: once}\n        file.dir: .\n");
    assert_eq!(
        e,
        [
            "t.yaml:6: header.add: when expects final, early or all, got \"sometimes\"",
            "t.yaml:7: header.set: the mapping needs a header key",
            "t.yaml:8: header.unset: unknown key \"at\" (expected header and when)",
        ]
    );
}

/// h2o's `send-informational`: global only, one of its three values, copied into every proxy
/// below with `proxy.max-informational-responses`.
#[test]
fn send_informational_takes_h2o_values_and_reaches_the_proxies() {
    use crate::config::{HandlerConf, SendInformational};
    let mode = |text: &str| {
        let c = ok(text);
        match &c.hosts[0].paths[0].handler {
            HandlerConf::Proxy(p) => (p.send_informational, p.max_informational),
            other => panic!("not a proxy: {other:?}"),
        }
    };
    let proxy = "hosts: {a: {paths: {/: {proxy.reverse.url: \"http://127.0.0.1:9\"}}}}\n";
    assert_eq!(
        mode(&format!("listen: 80\n{proxy}")),
        (SendInformational::ExceptH1, 16)
    );
    assert_eq!(
        mode(&format!("listen: 80\nsend-informational: none\n{proxy}")),
        (SendInformational::None, 16)
    );
    assert_eq!(
        mode(&format!(
            "listen: 80\nsend-informational: all\nproxy.max-informational-responses: 3\n{proxy}"
        )),
        (SendInformational::All, 3)
    );
    let e = errors("listen: 80\nsend-informational: sometimes\nhosts: {a: {paths: {/: {send-informational: all, file.dir: .}}}}\n");
    assert_eq!(
        e,
        [
            "t.yaml:2: send-informational expects except-h1, none or all, got \"sometimes\"",
            "t.yaml:3: directive send-informational cannot be used at the path level",
        ]
    );
}

/// h2o's `stash` holds YAML anchors and does nothing itself; `temp-buffer-path` is accepted.
#[test]
fn stash_holds_anchors_for_later_aliases() {
    let c = ok("stash:
  site: &site
    file.dir: /srv/site
  headers: &headers {x-a: 1}
temp-buffer-path: /tmp
listen: 80
hosts:
  a:
    stash: [anything, {at: all}]
    paths:
      /: *site
      /b:
        stash: 1
        file.dir: /srv/b
  c:
    paths:
      stash: &c_site
        file.dir: /srv/c
      /c: *c_site
");
    assert_eq!(file(path(&c, 0, "/")).dir, PathBuf::from("/srv/site"));
    assert_eq!(file(path(&c, 0, "/b")).dir, PathBuf::from("/srv/b"));
    // In a paths mapping too, as h2o's t/50reverse-proxy-informational.t writes it.
    assert_eq!(c.hosts[1].paths.len(), 1);
    assert_eq!(file(path(&c, 1, "/c")).dir, PathBuf::from("/srv/c"));
}

#[test]
fn socket_options_and_tcp_fastopen() {
    let c = ok("tcp-fastopen: 0\nlisten: {port: 8080, sndbuf: 65536, rcvbuf: 131072, reuseport: ON}\nhosts: {a: {paths: {/: {file.dir: /srv}}}}\n");
    assert_eq!(
        c.listeners[0].socket,
        crate::config::SocketOptions {
            sndbuf: Some(65536),
            rcvbuf: Some(131072),
            reuseport: true,
        }
    );
    assert_eq!(c.tcp_fastopen, 0);
    assert_eq!(ok(MINIMAL).tcp_fastopen, 4096, "h2o's default");
    let e = errors("listen: 8080\nhosts:\n  a:\n    listen: {port: 8080, rcvbuf: 4096}\n    paths: {/: {file.dir: /srv}}\n");
    assert_eq!(
        e,
        ["t.yaml:4: listen 0.0.0.0:8080: sndbuf, rcvbuf or reuseport differ from the listen at line 1"]
    );
    let e = errors("listen: {port: 8443, type: quic, sndbuf: 1, ssl: {}}\nhosts: {}\n");
    assert!(
        e.iter()
            .any(|l| l.contains("apply to TCP listeners, not quic")),
        "{e:?}"
    );
    let e = errors("listen: {port: 80, sndbuf: 0, group: www}\nhosts: {}\n");
    assert!(
        e.iter()
            .any(|l| l.contains("listen.group is not supported yet")),
        "{e:?}"
    );
    assert!(e.iter().any(|l| l.contains("listen.sndbuf")), "{e:?}");
}

#[test]
fn compress_forms_and_inheritance() {
    let c = ok("\
listen: 8080
compress: ON
compress-minimum-size: 10
hosts:
  a:
    paths:
      /all:
        respond: {body: x}
      /seq:
        compress: [gzip, zstd]
      /map:
        compress: {br: 11, gzip: 9, zstd: 22}
        compress-minimum-size: 0
      /off:
        compress: OFF
      /gzip:
        gzip: ON
      /gzip-off:
        gzip: OFF
      /empty:
        compress: []
  b:
    compress: {br: 0}
    paths:
      /:
        respond: {body: y}
      /plain:
        compress: OFF
        compress-minimum-size: 5
");
    let conf = |br, zstd, gzip, minimum_size| {
        Some(CompressConf {
            br,
            zstd,
            gzip,
            minimum_size,
        })
    };
    let got = |host, prefix| path(&c, host, prefix).compress.clone();
    assert_eq!(got(0, "/all"), conf(Some(1), Some(3), Some(1), 10));
    assert_eq!(got(0, "/seq"), conf(None, Some(3), Some(1), 10));
    assert_eq!(got(0, "/map"), conf(Some(11), Some(22), Some(9), 0));
    assert_eq!(got(0, "/off"), None);
    assert_eq!(got(0, "/gzip"), conf(None, None, Some(1), 10));
    assert_eq!(got(0, "/gzip-off"), None);
    assert_eq!(got(0, "/empty"), None);
    assert_eq!(got(1, "/"), conf(Some(0), None, None, 10));
    assert_eq!(got(1, "/plain"), None);
    // Off by default.
    assert_eq!(ok(MINIMAL).hosts[0].paths[0].compress, None);
}

#[test]
fn compress_errors() {
    let e = errors(
        "\
listen: 8080
compress: maybe
hosts:
  a:
    compress: {br: 12, gzip: 0}
    compress-minimum-size: -1
    paths:
      /:
        compress: [lzma]
        gzip: sometimes
",
    );
    assert_eq!(
        e,
        vec![
            "t.yaml:2: compress expects ON, OFF, a sequence of algorithms or a mapping of algorithm to quality, got \"maybe\"",
            "t.yaml:5: compress: the quality of br is 0-11, got \"12\"",
            "t.yaml:6: compress-minimum-size expects an integer >= 0, got \"-1\"",
            "t.yaml:9: compress: unknown algorithm \"lzma\" (br, zstd or gzip)",
            "t.yaml:10: gzip expects ON or OFF, got \"sometimes\"",
        ]
    );
}

const MINIMAL: &str =
    "listen: 8080\nhosts:\n  default:\n    paths:\n      /:\n        file.dir: /srv\n";

#[test]
fn header_commands_accumulate_global_host_path() {
    let c = ok("\
listen: 8080
header.add: \"X-Global: 1\"
hosts:
  a.example:
    header.set: [\"X-Host: h\", \"Cache-Control: no-store\"]
    paths:
      /:
        header.unset: Server
        file.dir: /srv
      /plain:
        respond: {body: hi}
  b.example:
    paths:
      /:
        header.append: \"Vary: Accept\"
        header.merge: \"Vary: Origin\"
        header.setifempty: \"X-E: e\"
        header.unsetunless: [Content-Type, X-E]
        respond: {}
");
    assert_eq!(
        headers(path(&c, 0, "/")),
        vec![
            (HeaderOp::Add, "X-Global", "1"),
            (HeaderOp::Set, "X-Host", "h"),
            (HeaderOp::Set, "Cache-Control", "no-store"),
            (HeaderOp::Unset, "Server", ""),
        ]
    );
    assert_eq!(
        headers(path(&c, 0, "/plain")),
        vec![
            (HeaderOp::Add, "X-Global", "1"),
            (HeaderOp::Set, "X-Host", "h"),
            (HeaderOp::Set, "Cache-Control", "no-store"),
        ]
    );
    assert_eq!(
        headers(path(&c, 1, "/")),
        vec![
            (HeaderOp::Add, "X-Global", "1"),
            (HeaderOp::Append, "Vary", "Accept"),
            (HeaderOp::Merge, "Vary", "Origin"),
            (HeaderOp::SetIfEmpty, "X-E", "e"),
            (HeaderOp::UnsetUnless, "", "Content-Type, X-E"),
        ]
    );
}

#[test]
fn file_options_and_access_log_inherit_and_override() {
    // `hosts` comes before the global options: they still apply (h2o defers `hosts`).
    let c = ok("\
listen: 8080
hosts:
  example.com:
    file.dirlisting: ON
    file.mime.addtypes:
      text/x-host: .HST
    access-log:
      path: logs/host.log
      format: \"%h %s\"
      escape: json
    paths:
      /:
        file.dir: htdocs
      /other:
        file.etag: ON
        file.index: [default.htm]
        file.send-compressed: ON
        file.mime.addtypes:
          application/javascript: [.js, .mjs]
          text/x-path: .hst
        access-log: /var/log/other.log
        file.dir: /srv/other
file.etag: OFF
file.index: [index.html]
access-log: /var/log/global.log
file.mime.addtypes:
  application/wasm: .wasm
");
    let root = file(path(&c, 0, "/"));
    assert_eq!(root.dir, PathBuf::from("/etc/spate/htdocs"));
    assert!(!root.etag && root.dirlisting && !root.send_compressed);
    assert_eq!(root.index, vec!["index.html"]);
    assert_eq!(
        root.mime_types.overrides,
        vec![
            ("wasm".to_string(), "application/wasm".to_string()),
            ("hst".to_string(), "text/x-host".to_string()),
        ]
    );
    assert_eq!(
        path(&c, 0, "/").access_log,
        Some(AccessLogConf {
            target: LogTarget::File(PathBuf::from("/etc/spate/logs/host.log")),
            format: "%h %s".into(),
            escape: crate::config::Escape::Json,
            buffer_size: 0,
            at: crate::config::Location {
                file: std::sync::Arc::from("t"),
                line: 1,
            },
        })
    );
    let other = file(path(&c, 0, "/other"));
    assert!(other.etag && other.dirlisting && other.send_compressed);
    assert_eq!(other.index, vec!["default.htm"]);
    assert_eq!(
        other.mime_types.overrides,
        vec![
            ("wasm".to_string(), "application/wasm".to_string()),
            ("js".to_string(), "application/javascript".to_string()),
            ("mjs".to_string(), "application/javascript".to_string()),
            ("hst".to_string(), "text/x-path".to_string()),
        ]
    );
    assert_eq!(
        path(&c, 0, "/other").access_log,
        Some(AccessLogConf {
            target: LogTarget::File(PathBuf::from("/var/log/other.log")),
            format: log::COMBINED.into(),
            escape: crate::config::Escape::Apache,
            buffer_size: 0,
            at: crate::config::Location {
                file: std::sync::Arc::from("t"),
                line: 1,
            },
        })
    );
}

#[test]
fn global_settings_and_units() {
    let c = ok("\
listen: 8080
num-threads: 3
max-connections: 50
server-name: test/1
send-server-name: OFF
error-log: err.log
error-log.emit-request-errors: off
num-name-resolution-threads: 1
limit-request-body: 1024
http1-request-timeout: 20
http1-request-io-timeout: 7
http1-keepalive-timeout: 3
http1-idle-park-delay: 1500
http1-upgrade-to-http2: OFF
http2-max-concurrent-requests-per-connection: 7
http2-max-streams: 8
http2-input-window-size: 65535
http2-idle-timeout: 30
http2-graceful-shutdown-timeout: 2
http2-max-write-size: 65536
max-request-head-size: 4096
max-request-target-size: 2048
max-request-headers: 20
max-pipelined-requests: 4
shutdown-timeout: 5
proxy.keepalive: ON
hosts:
  default:
    paths:
      /:
        file.dir: /srv
");
    assert_eq!((c.num_threads, c.max_connections), (3, 50));
    assert_eq!(c.server_name, "test/1");
    assert!(!c.send_server_name && !c.emit_request_errors);
    assert_eq!(
        c.error_log,
        Some(LogTarget::File(PathBuf::from("/etc/spate/err.log")))
    );
    assert_eq!(c.limits.request_body, 1024);
    assert_eq!(c.http1.request_timeout, Duration::from_secs(20));
    assert_eq!(c.http1.request_io_timeout, Duration::from_secs(7));
    assert_eq!(c.http1.keepalive_timeout, Duration::from_secs(3));
    assert_eq!(c.http1.idle_park_delay, Duration::from_millis(1500));
    assert!(!c.http1.upgrade_to_http2);
    assert_eq!(
        c.http2,
        Http2 {
            max_concurrent_requests_per_connection: 7,
            max_streams: 8,
            input_window_size: 65535,
            idle_timeout: Duration::from_secs(30),
            graceful_shutdown_timeout: Duration::from_secs(2),
            max_write_size: 65536,
            ..Http2::default()
        }
    );
    assert_eq!(
        (
            c.limits.request_head,
            c.limits.request_target,
            c.limits.request_headers,
            c.limits.pipelined_requests
        ),
        (4096, 2048, 20, 4)
    );
    assert_eq!(c.shutdown_timeout, Duration::from_secs(5));
}

#[test]
fn mime_settypes_removetypes_and_setdefaulttype_apply_in_order_down_the_levels() {
    let c = ok("listen: 80
file.mime.setdefaulttype: text/plain
file.send-gzip: ON
hosts:
  a:
    file.mime.settypes:
      text/html: [.html, .HTM]
      image/png: .png
    paths:
      /:
        file.mime.removetypes: [.png]
        file.mime.addtypes: {image/x-mine: .mine}
        file.dir: .
      /b:
        file.dir: .
");
    let t = &file(path(&c, 0, "/")).mime_types;
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    };
    assert_eq!(
        t.overrides,
        pairs(&[
            ("html", "text/html"),
            ("htm", "text/html"),
            ("png", ""),
            ("mine", "image/x-mine")
        ])
    );
    assert!(!t.builtin);
    assert_eq!(t.default_type, "text/plain");
    let b = file(path(&c, 0, "/b"));
    assert_eq!(b.mime_types.overrides.len(), 3);
    assert!(b.send_compressed, "file.send-gzip is file.send-compressed");
    let e = errors(
        "listen: 80\nfile.mime.setdefaulttype: plain\nfile.mime.removetypes: [png]\nhosts: {}\n",
    );
    assert_eq!(
        e,
        vec![
            "t.yaml:2: file.mime.setdefaulttype expects a media type (type/subtype), got \"plain\"",
            "t.yaml:3: file.mime.removetypes: extension \"png\" must start with a dot",
        ]
    );
}

#[test]
fn expires_is_inherited_and_off_at_an_inner_level() {
    let c = ok("listen: 80
expires: 1 day
hosts:
  a:
    paths:
      /:
        file.dir: .
      /live:
        expires: OFF
        file.dir: .
      /long:
        expires: 2 months
        file.dir: .
");
    assert_eq!(path(&c, 0, "/").expires, Some(86400));
    assert_eq!(path(&c, 0, "/live").expires, None);
    assert_eq!(path(&c, 0, "/long").expires, Some(60 * 86400));
    for bad in [
        "1 fortnight",
        "day",
        "1 day 2",
        "-1 day",
        "99999999999999999 years",
    ] {
        let e = errors(&format!("listen: 80\nexpires: {bad}\nhosts: {{}}\n"));
        assert_eq!(e.len(), 1, "{bad}: {e:?}");
        assert!(
            e[0].starts_with("t.yaml:2: expires expects OFF or a number"),
            "{e:?}"
        );
    }
}

#[test]
fn error_docs_accumulate_down_the_levels_and_must_be_served_by_a_file_or_respond() {
    let c = ok("listen: 80
error-doc: {status: [500, 503], url: /50x.html}
hosts:
  a:
    error-doc:
      - status: 404
        url: /404.html
    paths:
      /:
        file.dir: .
      /x:
        error-doc: {status: 404, url: /x404}
        file.dir: .
");
    let docs = |prefix| -> Vec<(u16, String)> {
        path(&c, 0, prefix)
            .error_docs
            .iter()
            .map(|d| (d.status, d.url.clone()))
            .collect()
    };
    let doc = |s: u16, u: &str| (s, u.to_string());
    assert_eq!(
        docs("/"),
        vec![
            doc(500, "/50x.html"),
            doc(503, "/50x.html"),
            doc(404, "/404.html")
        ]
    );
    assert_eq!(docs("/x").last(), Some(&doc(404, "/x404")));
    let e = errors(
        "listen: 80
error-doc: {status: 404, url: /api/404}
hosts:
  a:
    paths:
      /api:
        proxy.reverse.url: http://127.0.0.1:9/
      /b:
        error-doc: [{status: 200, url: /b}, {status: 404, url: nope}, {url: /c}]
        file.dir: .
",
    );
    assert_eq!(
        e,
        vec![
            "t.yaml:9: error-doc.status must be an error status (400-599), got 200",
            "t.yaml:9: error-doc.url must be a path on this host (starting with /), got \"nope\"",
            "t.yaml:9: error-doc needs both status and url",
            "t.yaml:2: error-doc.url /api/404 is not served by file.dir or respond on this host",
        ]
    );
}

/// Debian's stock /etc/h2o/h2o.conf, whole: `user`, `pid-file` and piped logs.
#[test]
fn debian_h2o_conf_with_user_pid_file_and_piped_logs() {
    let c = load_str(
        r#"server-name: "h2o (Debian)"
user: root
access-log: "|rotatelogs -l -f -L /var/log/h2o/access.log -p /usr/share/h2o/compress_logs /var/log/h2o/access.log.%Y-%m-%d 86400"
error-log: "|rotatelogs -l -f -L /var/log/h2o/error.log -p /usr/share/h2o/compress_logs /var/log/h2o/error.log.%Y-%m-%d 86400"
pid-file: /run/h2o.pid

listen:
  port: 80

hosts:
  default:
    paths:
      /:
        file.dir: /var/www
      /server-status:
        status: ON
"#,
        "/etc/h2o/h2o.conf",
    )
    .unwrap();
    assert_eq!(c.user.as_ref().map(|a| a.name.as_str()), Some("root"));
    assert_eq!(c.pid_file, Some(PathBuf::from("/run/h2o.pid")));
    let rotate = |name: &str| {
        LogTarget::Pipe(format!(
            "rotatelogs -l -f -L /var/log/h2o/{name}.log -p /usr/share/h2o/compress_logs /var/log/h2o/{name}.log.%Y-%m-%d 86400"
        ))
    };
    assert_eq!(c.error_log, Some(rotate("error")));
    assert_eq!(c.access_log_targets(), vec![&rotate("access")]);
    // Relative paths are the config file's; a command is left as written.
    let c = ok("pid-file: run/s.pid\naccess-log: {path: \"| cat\"}\nlisten: 80\nhosts: {a: {paths: {/: {file.dir: .}}}}\n");
    assert_eq!(c.pid_file, Some(PathBuf::from("/etc/spate/run/s.pid")));
    assert_eq!(c.access_log_targets(), vec![&LogTarget::Pipe("cat".into())]);
}

#[test]
fn an_unknown_user_and_an_empty_log_command_are_errors() {
    // The account is looked up by `prepare` (its tests check the unknown user's error).
    let e = errors("user: no-such-user-of-spate\nerror-log: \"|  \"\nlisten: 80\nhosts: {}\n");
    assert_eq!(
        e,
        vec!["t.yaml:2: error-log: the command after | is empty",]
    );
}

#[test]
fn defaults() {
    let c = ok(MINIMAL);
    let d = Config::empty();
    assert_eq!(c.num_threads, d.num_threads);
    assert_eq!(c.http2, Http2::default());
    assert_eq!(c.http1.request_io_timeout, Duration::from_secs(5));
    assert!(c.send_server_name && c.emit_request_errors);
    assert_eq!(c.error_log, None);
}

#[test]
fn listen_forms_repeats_and_dedup() {
    let c = ok(&with_cert(
        "\
listen: 8080
listen: \"127.0.0.1:8081\"
listen:
  - \"[::1]:8082\"
  - port: 8083
    host: 127.0.0.2
hosts:
  \"Example.COM:8080\":
    listen: 8080
    listen:
      port: 8084
      ssl:
        certificate-file: $CRT
        key-file: $KEY
    paths:
      /:
        respond: {status: 204}
  \"*.example.org\":
    listen:
      port: 8084
      ssl: {certificate-file: $CRT, key-file: $KEY}
    paths:
      /:
        respond: {}
",
    ));
    let got: Vec<_> = c
        .listeners
        .iter()
        .map(|l| (l.addr.to_string(), l.tls.is_some(), l.at.line))
        .collect();
    assert_eq!(
        got,
        vec![
            ("0.0.0.0:8080".to_string(), false, 1),
            ("127.0.0.1:8081".to_string(), false, 2),
            ("[::1]:8082".to_string(), false, 4),
            ("127.0.0.2:8083".to_string(), false, 5),
            ("0.0.0.0:8084".to_string(), true, 11),
        ]
    );
    assert_eq!(
        (c.hosts[0].name.as_str(), c.hosts[0].port),
        ("example.com", Some(8080))
    );
    assert_eq!(
        (c.hosts[1].name.as_str(), c.hosts[1].port),
        ("*.example.org", None)
    );
    assert_eq!(c.hosts[0].at.line, 8);
}

#[test]
fn listen_errors() {
    let e = errors(&with_cert(
        "\
listen: 8080
listen:
  port: 8080
  ssl: {certificate-file: $CRT, key-file: $KEY, ciphers: x}
listen: {host: 1.2.3.4}
listen: {port: 99999}
listen: {port: 1, type: quic}
listen: {port: 2, ssl: {certificate-file: $CRT}}
listen: example.com:80
hosts:
  default:
    paths:
      /:
        respond: {}
",
    ));
    assert_eq!(
        e,
        vec![
            "t.yaml:4: unknown key ciphers in listen.ssl",
            "t.yaml:5: listen: port is required",
            "t.yaml:6: listen.port: 99999 is too large",
            "t.yaml:7: listen: type quic requires ssl",
            "t.yaml:8: listen.ssl: key-file is required",
            "t.yaml:9: listen expects a port, \"address:port\" or a mapping with port, got \"example.com:80\"",
        ]
    );
    let e = errors(&with_cert(
        "\
listen: 8080
listen:
  port: 8080
  ssl: {certificate-file: $CRT, key-file: $KEY}
hosts: {default: {paths: {/: {respond: {}}}}}
",
    ));
    assert_eq!(
        e,
        vec!["t.yaml:3: listen 0.0.0.0:8080: cannot accept TLS; it already accepts cleartext (line 1)"]
    );
}

#[test]
fn handlers() {
    let c = ok("\
listen: 8080
hosts:
  default:
    paths:
      /r1:
        redirect: https://example.com/
      /r2:
        redirect:
          url: /new
          status: 301
          internal: OFF
      /ok:
        respond:
          status: 503
          body: down
          content-type: application/json
          methods: [GET, HEAD]
      /empty:
        header.add: \"X: y\"
");
    let r = |p: &str| match &path(&c, 0, p).handler {
        HandlerConf::Redirect(r) => r.clone(),
        other => panic!("{other:?}"),
    };
    let RedirectConf {
        url,
        status,
        internal,
    } = r("/r1");
    assert_eq!(
        (url.as_str(), status, internal),
        ("https://example.com/", 302, false)
    );
    let RedirectConf { url, status, .. } = r("/r2");
    assert_eq!((url.as_str(), status), ("/new", 301));
    match &path(&c, 0, "/ok").handler {
        HandlerConf::Respond(RespondConf {
            status,
            body,
            content_type,
            methods,
        }) => {
            assert_eq!((*status, body.as_str()), (503, "down"));
            assert_eq!(content_type, "application/json");
            assert_eq!(methods, &vec!["GET".to_string(), "HEAD".to_string()]);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(path(&c, 0, "/empty").handler, HandlerConf::None));
    // Paths stay in file order.
    let order: Vec<_> = c.hosts[0].paths.iter().map(|p| p.prefix.as_str()).collect();
    assert_eq!(order, vec!["/r1", "/r2", "/ok", "/empty"]);
}

/// h2o reads a path's sequence of mappings as one mapping in order: the options of every block
/// apply to the path, and its handlers are kept in the order written.
#[test]
fn a_sequence_of_handler_blocks_is_one_path_with_handlers_in_order() {
    let c = ok("\
listen: 8080
hosts:
  default:
    paths:
      /:
        - header.add: \"X-A: 1\"
        - file.dir: htdocs
          file.index: [start.html]
        - proxy.reverse.url: http://127.0.0.1:9000/
      /one:
        - file.dir: /srv
");
    let p = path(&c, 0, "/");
    assert_eq!(headers(p), vec![(HeaderOp::Add, "X-A", "1")]);
    match &p.handler {
        HandlerConf::Chain(list) => match list.as_slice() {
            [HandlerConf::File(f), HandlerConf::Proxy(_)] => {
                assert_eq!(f.dir, PathBuf::from("/etc/spate/htdocs"));
                assert_eq!(f.index, vec!["start.html".to_string()]);
            }
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    assert!(matches!(path(&c, 0, "/one").handler, HandlerConf::File(_)));
    assert!(c.warnings.is_empty(), "{:?}", c.warnings);
}

#[test]
fn a_handler_after_one_that_always_answers_is_a_warning() {
    let c = ok("\
listen: 8080
hosts:
  default:
    paths:
      /:
        - respond: {status: 200}
        - file.dir: /srv
");
    let w: Vec<String> = c.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(
        w,
        vec!["/etc/spate/t.yaml:7: path /: file.dir is never reached: respond at /etc/spate/t.yaml:6 answers every request"]
    );
}

#[test]
fn a_path_sequence_item_that_is_not_a_mapping_is_an_error() {
    let e =
        errors("listen: 1\nhosts:\n  h:\n    paths:\n      /:\n        - file.dir\n      /x: 5\n");
    assert_eq!(
        e,
        vec![
            "t.yaml:6: path /: each item of the sequence must be a mapping, got \"file.dir\"",
            "t.yaml:7: path /x expects a mapping or a sequence of mappings, got \"5\"",
        ]
    );
}

#[test]
fn access_log_buffer_size_is_bounded() {
    let c = ok("listen: 1\nhosts:\n  h:\n    paths:\n      /:\n        access-log: {path: a.log, buffer-size: 4096}\n");
    assert_eq!(
        path(&c, 0, "/").access_log.as_ref().map(|l| l.buffer_size),
        Some(4096)
    );
    let e = errors("listen: 1\nhosts:\n  h:\n    paths:\n      /:\n        access-log: {path: a.log, buffer-size: 100000}\n");
    assert_eq!(
        e,
        vec!["t.yaml:6: access-log.buffer-size: 100000 is more than 65536"]
    );
}

#[test]
fn respond_defaults() {
    let c = ok("listen: 1\nhosts:\n  h:\n    paths:\n      /:\n        respond: {}\n");
    match &path(&c, 0, "/").handler {
        HandlerConf::Respond(r) => {
            assert_eq!(
                (r.status, r.body.as_str(), r.content_type.as_str()),
                (200, "", "text/plain")
            );
            assert!(r.methods.is_empty());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_error_is_reported_with_its_line() {
    let e = errors(
        "\
listen: 8080
num-threads: 0
file.dir: /srv
lisen: 80
send-server-name: maybe
hosts:
  default:
    num-threads: 2
    file.etag: perhaps
    paths:
      /:
        file.dir: /srv
        respond: {}
      nope:
        respond: {}
      /r:
        redirect: {url: /x, internal: ON}
      /s:
        respond: {status: 99, bdy: x}
      /h:
        header.add: NoColon
        header.set: \"Bad Name: x\"
        file.index: index.html
      /x:
        proxy.connect: ON
        compress: {lzma: 1}
  nopaths:
    file.etag: ON
http2-max-write-size: 4096
",
    );
    assert_eq!(
        e,
        vec![
            "t.yaml:2: num-threads expects an integer >= 1, got \"0\"",
            "t.yaml:3: directive file.dir cannot be used at the global level",
            "t.yaml:4: unknown directive lisen (did you mean listen?)",
            "t.yaml:5: send-server-name expects ON, OFF or preserve, got \"maybe\"",
            "t.yaml:29: http2-max-write-size expects an integer >= 16384, got \"4096\"",
            "t.yaml:8: directive num-threads cannot be used at the host level",
            "t.yaml:9: file.etag expects ON or OFF, got \"perhaps\"",
            "t.yaml:14: a path must start with /, got \"nope\"",
            "t.yaml:17: redirect.internal ON is not supported yet",
            "t.yaml:19: unknown key bdy in respond (did you mean body?)",
            "t.yaml:19: respond.status expects an integer >= 100, got \"99\"",
            "t.yaml:21: header.add expects \"Name: value\", got \"NoColon\"",
            "t.yaml:22: header.set: \"Bad Name\" is not a valid header name",
            "t.yaml:23: file.index expects a sequence of file names, got \"index.html\"",
            "t.yaml:25: proxy.connect expects a sequence of access rules (\"+ADDRESS[/MASK][:PORT]\" or \"-...\"), got a scalar",
            "t.yaml:26: compress: unknown algorithm \"lzma\" (br, zstd or gzip)",
            "t.yaml:27: host \"nopaths\" has no paths",
        ]
    );
}

#[test]
fn structural_errors() {
    assert_eq!(errors(""), vec!["t.yaml:1: the configuration is empty"]);
    assert_eq!(
        errors("- a\n- b\n"),
        vec!["t.yaml:1: the configuration must be a mapping of directives, got a sequence"]
    );
    assert_eq!(
        errors("hosts:\n  h:\n    paths:\n      /:\n        respond: {}\n"),
        vec!["t.yaml:1: no listen directive: at least one listener is required"]
    );
    assert_eq!(
        errors("listen: 80\n"),
        vec!["t.yaml:1: mandatory directive hosts is missing"]
    );
    let e = errors("listen: 80\nhosts:\n  a:\n    paths: {/: {}}\n  A:\n    paths: {/: {}}\n");
    assert_eq!(
        e,
        vec!["t.yaml:5: host \"A\" is defined twice (first at line 3)"]
    );
    let e = errors("listen: 80\nfoo: [1,\n");
    assert_eq!(e.len(), 1);
    assert!(e[0].starts_with("t.yaml:"), "{e:?}");
    assert!(e[0].contains("YAML syntax error"), "{e:?}");
}

#[test]
fn load_file_resolves_relative_to_the_file() {
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("{e}"),
    };
    let conf = dir.path().join("spate.yaml");
    if let Err(e) = std::fs::write(&conf, MINIMAL.replace("/srv", "www")) {
        panic!("{e}");
    }
    let c = match load_file(&conf) {
        Ok(c) => c,
        Err(e) => panic!("{e:?}"),
    };
    assert_eq!(file(path(&c, 0, "/")).dir, dir.path().join("www"));

    let missing = dir.path().join("missing.yaml");
    let e = load_file(&missing).err().unwrap_or_default();
    assert_eq!(e.len(), 1);
    assert!(
        e[0].to_string().contains("missing.yaml:0: cannot read"),
        "{e:?}"
    );
}

#[test]
fn anchors_share_settings_between_hosts() {
    let c = ok("\
listen: 8080
hosts:
  a.example:
    paths: &paths
      /:
        file.dir: /srv/a
        file.etag: OFF
  b.example:
    paths:
      <<: *paths
      /api:
        respond: {body: b}
");
    assert_eq!(c.hosts[1].paths.len(), 2);
    assert!(!file(path(&c, 1, "/")).etag);
    assert_eq!(path(&c, 1, "/").at.line, 5);
}

mod include;
mod seeds;

#[test]
fn h2o_timeouts_in_seconds_are_read_as_seconds() {
    // h2o 2.3 reads these with `config_timeout` (whole seconds); an h2o file's `5` is 5 s.
    let c = ok(&format!(
        "http1-request-io-timeout: 3\nhttp1-request-timeout: 4\nhttp2-idle-timeout: 6\n\
         handshake-timeout: 8\n{MINIMAL}"
    ));
    assert_eq!(c.http1.request_io_timeout, Duration::from_secs(3));
    assert_eq!(c.http1.request_timeout, Duration::from_secs(4));
    assert_eq!(c.http2.idle_timeout, Duration::from_secs(6));
    assert_eq!(c.handshake_timeout, Duration::from_secs(8));
    assert_eq!(ok(MINIMAL).http1.request_io_timeout, Duration::from_secs(5));
}

#[test]
fn file_memory_cache_sizes() {
    let c = ok(MINIMAL);
    assert_eq!(
        (c.file_memory_cache_size, c.file_memory_cache_max_file),
        (128 << 20, 64 << 10)
    );
    let c = ok(&format!(
        "file.memory-cache-size: 8M\nfile.memory-cache-max-file-size: 0\n{MINIMAL}"
    ));
    assert_eq!(
        (c.file_memory_cache_size, c.file_memory_cache_max_file),
        (8 << 20, 0)
    );
    let e = errors(&format!("file.memory-cache-max-file-size: lots\n{MINIMAL}"));
    assert_eq!(
        e,
        ["t.yaml:1: file.memory-cache-max-file-size expects a size in bytes (like 65536, 512K, 64MB), got \"lots\""]
    );
}
