//! Tests of the `proxy.*` directives and upstream URL parsing.

use super::*;
use crate::config::load::tests::{errors, ok};
use crate::config::{Config, HandlerConf, HeaderOp};
use std::path::PathBuf;

fn url(text: &str) -> UpstreamUrl {
    match parse_url(text, Path::new("/etc/spate")) {
        Ok(u) => u,
        Err(e) => panic!("{text}: {e}"),
    }
}

fn tcp(host: &str, port: u16, authority: &str, path: &str) -> UpstreamUrl {
    UpstreamUrl {
        addr: UpstreamAddr::Tcp {
            host: host.into(),
            port,
        },
        authority: authority.into(),
        path: path.into(),
        tls: false,
    }
}

fn unix(socket: &str, authority: &str, path: &str) -> UpstreamUrl {
    UpstreamUrl {
        addr: UpstreamAddr::Unix(PathBuf::from(socket)),
        authority: authority.into(),
        path: path.into(),
        tls: false,
    }
}

#[test]
fn url_forms() {
    assert_eq!(
        url("http://127.0.0.1:3001"),
        tcp("127.0.0.1", 3001, "127.0.0.1:3001", "/")
    );
    assert_eq!(
        url("http://App.Internal/app/"),
        tcp("app.internal", 80, "App.Internal", "/app/")
    );
    assert_eq!(
        url("HTTP://backend_1.example:65535/a%20b/c"),
        tcp(
            "backend_1.example",
            65535,
            "backend_1.example:65535",
            "/a%20b/c"
        )
    );
    assert_eq!(
        url("http://[::1]:8080/"),
        tcp("::1", 8080, "[::1]:8080", "/")
    );
    assert_eq!(
        url("http://[2001:DB8::1]/x"),
        tcp("2001:db8::1", 80, "[2001:DB8::1]", "/x")
    );
    assert_eq!(
        url("http://[unix:/tmp/s.sock]/app"),
        unix("/tmp/s.sock", "[unix:/tmp/s.sock]", "/app")
    );
    assert_eq!(
        url("http://[unix:/tmp/s.sock]"),
        unix("/tmp/s.sock", "[unix:/tmp/s.sock]", "/")
    );
    // A relative socket path is taken relative to the configuration file, as other paths.
    assert_eq!(
        url("http://[unix:run/app.sock]/"),
        unix("/etc/spate/run/app.sock", "[unix:run/app.sock]", "/")
    );
}

#[test]
fn url_errors() {
    let long = format!("http://[unix:/{}]/", "s".repeat(120));
    let cases: &[(&str, &str)] = &[
        (
            "127.0.0.1:3001",
            "\"127.0.0.1:3001\" is not a URL (expected http://HOST[:PORT][/PATH])",
        ),
        (
            "ftp://x/",
            "unknown scheme \"ftp\" in \"ftp://x/\" (expected http or https)",
        ),
        ("http://", "\"http://\" has no host"),
        ("http:///app", "\"http:///app\" has no host"),
        ("http://:80/", "\"http://:80/\" has no host"),
        (
            "http://x:0/",
            "bad port \"0\" in \"http://x:0/\" (expected 1 to 65535)",
        ),
        (
            "http://x:65536/",
            "bad port \"65536\" in \"http://x:65536/\" (expected 1 to 65535)",
        ),
        (
            "http://x:/",
            "bad port \"\" in \"http://x:/\" (expected 1 to 65535)",
        ),
        (
            "http://x:+80/",
            "bad port \"+80\" in \"http://x:+80/\" (expected 1 to 65535)",
        ),
        (
            "http://::1:80/",
            "\"http://::1:80/\": an IPv6 address must be written in brackets (http://[::1]:8080/)",
        ),
        (
            "http://[::1/",
            "missing ] in \"http://[::1/\"",
        ),
        (
            "http://[::1]x/",
            "unexpected \"x\" after ] in \"http://[::1]x/\"",
        ),
        (
            "http://[nope]/",
            "\"[nope]\" in \"http://[nope]/\" is neither an IPv6 address nor [unix:PATH]",
        ),
        (
            "http://[unix:/tmp/s]:80/",
            "\"http://[unix:/tmp/s]:80/\": a unix socket URL takes no port",
        ),
        (
            "http://[unix:]/",
            "\"http://[unix:]/\": [unix:] needs a socket path",
        ),
        (
            "http://user@x/",
            "\"http://user@x/\": user information (user@host) is not supported",
        ),
        (
            "http://x/a?b=1",
            "\"http://x/a?b=1\": a query or fragment is not supported (the request's own query is forwarded)",
        ),
        (
            "http://x y/",
            "the URL contains a space or a control character",
        ),
        (
            "http://x/\u{e9}",
            "\"http://x/\u{e9}\": non-ASCII characters must be percent-encoded",
        ),
        (
            "http://a,b/",
            "\"a,b\" in \"http://a,b/\" is not a valid host name",
        ),
        (
            "http://300.1.1.1/",
            "\"300.1.1.1\" in \"http://300.1.1.1/\" is not a valid host name",
        ),
    ];
    for (text, message) in cases {
        let got = parse_url(text, Path::new("/etc/spate"));
        let want = if message.starts_with("proxy.reverse.url") {
            message.to_string()
        } else {
            format!("proxy.reverse.url: {message}")
        };
        assert_eq!(got, Err(want), "{text}");
    }
    let e = parse_url(&long, Path::new("/"));
    assert!(
        matches!(&e, Err(m) if m.contains("is too long (121 bytes; at most 107)")),
        "{e:?}"
    );
}

/// The proxy configuration of `prefix` on the first host.
fn proxy<'a>(c: &'a Config, prefix: &str) -> &'a ProxyConf {
    let p = c.hosts[0].paths.iter().find(|p| p.prefix == prefix);
    match p.map(|p| &p.handler) {
        Some(HandlerConf::Proxy(conf)) => conf,
        other => panic!("{prefix}: not a proxy: {other:?}"),
    }
}

fn headers(conf: &ProxyConf) -> Vec<(HeaderOp, &str, &str)> {
    conf.headers
        .iter()
        .map(|h| (h.op, h.name.as_str(), h.value.as_str()))
        .collect()
}

#[test]
fn defaults() {
    let c = ok("\
listen: 8080
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: http://127.0.0.1:3001/
");
    let conf = proxy(&c, "/");
    assert_eq!(
        conf,
        &ProxyConf::new(tcp("127.0.0.1", 3001, "127.0.0.1:3001", "/"))
    );
    // h2o's defaults, and spate's own for its two limits.
    assert!(!conf.preserve_host && !conf.preserve_x_forwarded_proto);
    assert!(conf.emit_x_forwarded_headers && conf.emit_via_header);
    assert!(conf.emit_missing_date_header);
    assert!(!conf.expect && !conf.forward_close_connection);
    assert!(conf.headers.is_empty());
    assert_eq!(conf.connect_timeout, Duration::from_millis(30000));
    assert_eq!(conf.first_byte_timeout, Duration::from_millis(30000));
    assert_eq!(conf.io_timeout, Duration::from_millis(30000));
    assert_eq!(conf.keepalive_timeout, Duration::from_millis(2000));
    assert_eq!(conf.max_buffer_size, 65536);
    assert_eq!(conf.max_idle_connections, 1024);
}

#[test]
fn every_directive_at_the_path_level() {
    // The options may come before or after proxy.reverse.url (h2o defers the handler).
    let c = ok("\
listen: 8080
hosts:
  default:
    paths:
      /app:
        proxy.preserve-host: ON
        proxy.reverse.url: \"http://[unix:/run/app.sock]/v1/\"
        proxy.emit-x-forwarded-headers: OFF
        proxy.emit-via-header: OFF
        proxy.emit-missing-date-header: OFF
        proxy.preserve-x-forwarded-proto: ON
        proxy.header.add: \"X-A: 1\"
        proxy.header.append: \"X-A: 2\"
        proxy.header.merge: [\"Vary: a\", \"Vary: b\"]
        proxy.header.set: \"X-S: s\"
        proxy.header.setifempty: \"X-E: e\"
        proxy.header.unset: [Cookie, X-Secret]
        proxy.header.unsetunless: [Host, Accept, x-keep]
        proxy.timeout.connect: 100
        proxy.timeout.first_byte: 200
        proxy.timeout.io: 300
        proxy.timeout.keepalive: 400
        proxy.max-buffer-size: 1000
        proxy.expect: ON
        proxy.forward.close-connection: ON
        proxy.max-idle-connections: 0
        header.set: \"X-Response: r\"
");
    let conf = proxy(&c, "/app");
    assert_eq!(
        conf.url(),
        &unix("/run/app.sock", "[unix:/run/app.sock]", "/v1/")
    );
    assert!(conf.preserve_host && conf.preserve_x_forwarded_proto);
    assert!(!conf.emit_x_forwarded_headers && !conf.emit_via_header);
    assert!(!conf.emit_missing_date_header);
    assert!(conf.expect && conf.forward_close_connection);
    assert_eq!(
        (
            conf.connect_timeout,
            conf.first_byte_timeout,
            conf.io_timeout,
            conf.keepalive_timeout
        ),
        (
            Duration::from_millis(100),
            Duration::from_millis(200),
            Duration::from_millis(300),
            Duration::from_millis(400)
        )
    );
    assert_eq!((conf.max_buffer_size, conf.max_idle_connections), (1000, 0));
    assert_eq!(
        headers(conf),
        vec![
            (HeaderOp::Add, "X-A", "1"),
            (HeaderOp::Append, "X-A", "2"),
            (HeaderOp::Merge, "Vary", "a"),
            (HeaderOp::Merge, "Vary", "b"),
            (HeaderOp::Set, "X-S", "s"),
            (HeaderOp::SetIfEmpty, "X-E", "e"),
            (HeaderOp::Unset, "Cookie", ""),
            (HeaderOp::Unset, "X-Secret", ""),
            (HeaderOp::UnsetUnless, "", "Host, Accept, x-keep"),
        ]
    );
    let kept: Vec<_> = conf.headers[8].kept_names().collect();
    assert_eq!(kept, vec!["Host", "Accept", "x-keep"]);
    // `header.*` stays on the response, apart from the request commands.
    let p = &c.hosts[0].paths[0];
    assert_eq!(p.headers.len(), 1);
    assert_eq!(p.headers[0].name, "X-Response");
}

#[test]
fn options_inherit_global_host_path() {
    let c = ok("\
listen: 8080
proxy.timeout.io: 5000
proxy.preserve-host: ON
proxy.header.set: \"X-Global: g\"
proxy.emit-via-header: OFF
hosts:
  default:
    proxy.timeout.first_byte: 7000
    proxy.preserve-host: OFF
    proxy.header.add: \"X-Host: h\"
    proxy.max-idle-connections: 8
    paths:
      /a:
        proxy.reverse.url: http://a.internal/
        proxy.timeout.io: 1000
        proxy.header.unset: X-Global
        proxy.max-idle-connections: 2
      /b:
        proxy.reverse.url: http://b.internal:8081
      /c:
        proxy.keepalive: OFF
        proxy.reverse.url: http://c.internal/
      /d:
        file.dir: /srv
        proxy.timeout.io: 9
");
    let a = proxy(&c, "/a");
    // io set at the path; connect follows it, first_byte was set at the host.
    assert_eq!(a.io_timeout, Duration::from_millis(1000));
    assert_eq!(a.connect_timeout, Duration::from_millis(1000));
    assert_eq!(a.first_byte_timeout, Duration::from_millis(7000));
    assert!(!a.preserve_host && !a.emit_via_header);
    assert_eq!(a.max_idle_connections, 2);
    assert_eq!(
        headers(a),
        vec![
            (HeaderOp::Set, "X-Global", "g"),
            (HeaderOp::Add, "X-Host", "h"),
            (HeaderOp::Unset, "X-Global", ""),
        ]
    );
    let b = proxy(&c, "/b");
    assert_eq!(b.url(), &tcp("b.internal", 8081, "b.internal:8081", "/"));
    assert_eq!(b.io_timeout, Duration::from_millis(5000));
    assert_eq!(b.connect_timeout, Duration::from_millis(5000));
    assert_eq!(b.first_byte_timeout, Duration::from_millis(7000));
    assert_eq!(b.max_idle_connections, 8);
    assert_eq!(b.keepalive_timeout, Duration::from_millis(2000));
    assert_eq!(headers(b).len(), 2);
    assert_eq!(proxy(&c, "/c").keepalive_timeout, Duration::ZERO);
    // Options on a path without a proxy are accepted and have nothing to act on, as in h2o.
    let d = &c.hosts[0].paths[3];
    assert!(matches!(d.handler, HandlerConf::File(_)));
}

#[test]
fn keepalive_old_and_new_names() {
    let c = ok("\
listen: 8080
proxy.keepalive: OFF
hosts:
  default:
    paths:
      /off:
        proxy.reverse.url: http://x/
      /on-again:
        proxy.keepalive: ON
        proxy.reverse.url: http://x/
      /timeout-wins:
        proxy.timeout.keepalive: 900
        proxy.keepalive: ON
        proxy.reverse.url: http://x/
      /zero:
        proxy.keepalive: ON
        proxy.timeout.keepalive: 0
        proxy.reverse.url: http://x/
");
    let ka = |p: &str| proxy(&c, p).keepalive_timeout;
    assert_eq!(ka("/off"), Duration::ZERO);
    assert_eq!(ka("/on-again"), Duration::from_millis(2000));
    assert_eq!(ka("/timeout-wins"), Duration::from_millis(900));
    assert_eq!(ka("/zero"), Duration::ZERO);
}

#[test]
fn https_and_http2_options() {
    let dir = tempfile::tempdir().unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["b.internal".to_string()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, cert.pem()).unwrap();
    let c = ok(&format!(
        "\
listen: 8080
proxy.ssl.cafile: {}
proxy.http2.ratio: 100
hosts:
  default:
    paths:
      /a:
        proxy.reverse.url: https://B.internal/x
        proxy.http2.max-concurrent-streams: 8
      /b:
        proxy.reverse.url: https://10.0.0.1:8443/
        proxy.ssl.verify-peer: OFF
        proxy.ssl.session-cache: {{lifetime: 3600, capacity: 10}}
        proxy.http2.ratio: 0
      /c:
        proxy.reverse.url: http://10.0.0.1/
        proxy.http2.force-cleartext: ON
        proxy.ssl.session-cache: OFF
      /mixed:
        proxy.reverse.url: [http://10.0.0.1/, https://b.internal/, https://c.internal:8443/]
",
        ca.display()
    ));
    let a = proxy(&c, "/a");
    assert_eq!(a.url(), &{
        let mut u = tcp("b.internal", 443, "B.internal", "/x");
        u.tls = true;
        u
    });
    assert!(a.backends[0].tls.is_some());
    assert_eq!((a.http2_ratio, a.http2_max_concurrent_streams), (100, 8));
    let b = proxy(&c, "/b");
    assert!(b.backends[0].tls.is_some() && b.http2_ratio == 0);
    assert_eq!(b.http2_max_concurrent_streams, 100);
    // Each backend of a list in its own scheme, a TLS one with its own client (whose name
    // to verify `server::prepare`'s tests check).
    let ids = proxy(&c, "/mixed")
        .backends
        .iter()
        .map(|b| b.tls.as_ref().map(|t| t.id))
        .collect::<Vec<_>>();
    assert_eq!(ids[0], None);
    assert!(ids[1].is_some() && ids[2].is_some() && ids[1] != ids[2]);
    let c = proxy(&c, "/c");
    assert!(c.backends[0].tls.is_none() && c.http2_force_cleartext && !c.url().tls);

    let e = errors(
        "\
listen: 8080
hosts:
  default:
    paths:
      /a:
        proxy.ssl.cafile: /nonexistent/ca.crt
        proxy.ssl.session-cache: {lifetime: 10}
        proxy.http2.max-concurrent-streams: 0
        proxy.reverse.url: http://x/
      /pp:
        proxy.proxy-protocol: ON
        proxy.timeout.keepalive: 0
        proxy.ssl.verify-peer: OFF
        proxy.http2.ratio: 50
        proxy.reverse.url: [http://x/, https://y/]
",
    );
    assert_eq!(
        e,
        // The unreadable cafile of line 6 is `prepare`'s to find (its tests check that).
        vec![
            "t.yaml:7: proxy.ssl.session-cache expects both lifetime and capacity",
            "t.yaml:8: proxy.http2.max-concurrent-streams expects an integer >= 1, got \"0\"",
            "t.yaml:15: proxy.proxy-protocol: ON cannot go with HTTP/2 to the backend (one HTTP/2 connection carries many clients' requests under the first client's addresses)",
        ]
    );
}

#[test]
fn one_url_in_a_sequence_is_that_url() {
    let c = ok("\
listen: 8080
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: [\"http://127.0.0.1:3001/\"]
");
    assert_eq!(proxy(&c, "/").url().authority, "127.0.0.1:3001");
}

#[test]
fn several_backends_in_h2o_forms() {
    let c = ok("\
listen: 8080
proxy.health-check:
  path: /healthz
  interval: 500
  fall: 2
hosts:
  default:
    paths:
      /seq:
        proxy.reverse.url: [\"http://10.0.0.1/a/\", \"http://10.0.0.2:81/\"]
      /weighted:
        proxy.reverse.url:
          - url: http://10.0.0.1/
            weight: 256
          - http://10.0.0.2/
      /mapping:
        proxy.health-check: OFF
        proxy.reverse.url:
          backends:
            - {url: http://10.0.0.3/, weight: 3}
            - http://10.0.0.4/
          balancer: least-conn
      /one-in-mapping:
        proxy.max-fails: 0
        proxy.fail-timeout: 250
        proxy.max-response-head-size: 1024
        proxy.max-response-headers: 512
        proxy.reverse.url:
          backends: http://10.0.0.5/
");
    let weights = |p: &str| {
        let conf = proxy(&c, p);
        conf.backends
            .iter()
            .map(|b| (b.url.authority.clone(), b.weight))
            .collect::<Vec<_>>()
    };
    let seq = proxy(&c, "/seq");
    assert_eq!(seq.balancer, Balancer::RoundRobin);
    assert_eq!(
        weights("/seq"),
        vec![("10.0.0.1".into(), 1), ("10.0.0.2:81".into(), 1)]
    );
    // The first URL gives the path (and Host) sent, as in h2o.
    assert_eq!(seq.url().path, "/a/");
    assert_eq!(
        weights("/weighted"),
        vec![("10.0.0.1".into(), 256), ("10.0.0.2".into(), 1)]
    );
    let mapping = proxy(&c, "/mapping");
    assert_eq!(mapping.balancer, Balancer::LeastConn);
    assert_eq!(
        weights("/mapping"),
        vec![("10.0.0.3".into(), 3), ("10.0.0.4".into(), 1)]
    );
    assert_eq!(mapping.health_check, None);
    assert_eq!(
        seq.health_check,
        Some(HealthCheck {
            path: "/healthz".into(),
            interval: Duration::from_millis(500),
            timeout: Duration::from_millis(2000),
            status: 200,
            rise: 2,
            fall: 2,
        })
    );
    assert_eq!(
        (seq.max_fails, seq.fail_timeout),
        (3, Duration::from_secs(10))
    );
    assert_eq!(
        (seq.max_response_head_size, seq.max_response_headers),
        (65536, 128)
    );
    let one = proxy(&c, "/one-in-mapping");
    assert_eq!(weights("/one-in-mapping"), vec![("10.0.0.5".into(), 1)]);
    assert_eq!(
        (one.max_fails, one.fail_timeout),
        (0, Duration::from_millis(250))
    );
    assert_eq!(
        (one.max_response_head_size, one.max_response_headers),
        (1024, 512)
    );
}

#[test]
fn several_backends_errors() {
    let e = errors(
        "\
listen: 8080
hosts:
  default:
    paths:
      /empty:
        proxy.reverse.url: []
      /no-backends:
        proxy.reverse.url: {balancer: round-robin}
      /key:
        proxy.reverse.url: {backends: [http://a/], balancr: least-conn}
      /weight:
        proxy.reverse.url: [{url: http://a/, weight: 257}, {weight: 2}]
      /bad-url:
        proxy.reverse.url: [http://a/, ftp://b/]
      /pp:
        proxy.proxy-protocol: ON
        proxy.reverse.url: http://a/
      /pp-ok:
        proxy.proxy-protocol: ON
        proxy.timeout.keepalive: 0
        proxy.reverse.url: http://a/
      /check:
        proxy.health-check: {path: healthz, interval: 0, status: 99, rise: 0, falls: 2}
        proxy.max-response-headers: 513
        proxy.max-response-head-size: 100
        proxy.reverse.url: http://a/
",
    );
    assert_eq!(
        e,
        vec![
            "t.yaml:6: proxy.reverse.url: at least one backend URL must be set",
            "t.yaml:8: proxy.reverse.url: the mapping form needs backends",
            "t.yaml:10: unknown key balancr in proxy.reverse.url (did you mean balancer?)",
            "t.yaml:12: proxy.reverse.url: weight must be an integer in range 1 - 256, got \"257\"",
            "t.yaml:12: proxy.reverse.url: a backend mapping needs url",
            "t.yaml:14: proxy.reverse.url: unknown scheme \"ftp\" in \"ftp://b/\" (expected http or https)",
            "t.yaml:17: proxy.proxy-protocol: ON needs proxy.timeout.keepalive: 0 (a kept connection would carry other clients' requests under the first client's addresses)",
            "t.yaml:23: unknown key falls in proxy.health-check (did you mean fall?)",
            "t.yaml:23: proxy.health-check.path expects a path starting with /, got \"healthz\"",
            "t.yaml:23: proxy.health-check.interval expects an integer >= 1, got \"0\"",
            "t.yaml:23: proxy.health-check.status expects a status code (100-599), got \"99\"",
            "t.yaml:23: proxy.health-check.rise expects an integer >= 1, got \"0\"",
            "t.yaml:24: proxy.max-response-headers: at most 512, got 513",
            "t.yaml:25: proxy.max-response-head-size expects an integer >= 256, got \"100\"",
        ]
    );
}

#[test]
fn tunnel_directives_of_current_and_older_h2o() {
    let c = ok("\
listen: 8080
proxy.timeout.io: 7000
hosts:
  default:
    paths:
      /off:
        proxy.reverse.url: http://127.0.0.1:3001/
      /tunnel:
        proxy.reverse.url: http://127.0.0.1:3001/
        proxy.tunnel: ON
      /ws22:
        proxy.reverse.url: http://127.0.0.1:3001/
        proxy.websocket: ON
        proxy.websocket.timeout: 300000
");
    assert!(!proxy(&c, "/off").tunnel);
    let t = proxy(&c, "/tunnel");
    assert!(t.tunnel);
    // Current h2o: tunnels idle out by proxy.timeout.io.
    assert_eq!(t.tunnel_timeout, Duration::from_millis(7000));
    let w = proxy(&c, "/ws22");
    assert!(w.tunnel);
    assert_eq!(w.tunnel_timeout, Duration::from_millis(300_000));
    assert!(c.has_tunnel());
}

#[test]
fn errors_with_their_lines() {
    let e = errors(
        "\
listen: 8080
proxy.timeout.io: 0
proxy.max-buffer-size: 0
hosts:
  default:
    proxy.reverse.url: http://x/
    proxy.preserve-host: maybe
    paths:
      /https:
        proxy.reverse.url: https://[unix:/tmp/s]/
      /scheme:
        proxy.reverse.url: ws://127.0.0.1/
      /nohost:
        proxy.reverse.url: http:///x
      /port:
        proxy.reverse.url: http://x:99999/
      /many:
        proxy.reverse.url:
          - http://10.0.0.1/
          - url: http://10.0.0.2/
            weight: 0
      /balanced:
        proxy.reverse.url:
          backends: [http://10.0.0.1/]
          balancer: fastest
      /two:
        file.dir: /srv
        proxy.reverse.url: http://x/
      /not-yet:
        proxy.ssl.verify-peer: maybe
        proxy.http2.ratio: 101
        proxy.connect: ON
        proxy.timout.io: 5
        proxy.header.add: NoColon
        proxy.header.unsetunless: \"Bad Name\"
        proxy.timeout.keepalive: -1
        proxy.reverse.url: 8080
",
    );
    assert_eq!(
        e,
        vec![
            "t.yaml:2: proxy.timeout.io expects an integer >= 1, got \"0\"",
            "t.yaml:3: proxy.max-buffer-size expects an integer >= 1, got \"0\"",
            "t.yaml:6: directive proxy.reverse.url cannot be used at the host level",
            "t.yaml:7: proxy.preserve-host expects ON or OFF, got \"maybe\"",
            "t.yaml:10: proxy.reverse.url: https to a unix socket is not supported",
            "t.yaml:12: proxy.reverse.url: unknown scheme \"ws\" in \"ws://127.0.0.1/\" (expected http or https)",
            "t.yaml:14: proxy.reverse.url: \"http:///x\" has no host",
            "t.yaml:16: proxy.reverse.url: bad port \"99999\" in \"http://x:99999/\" (expected 1 to 65535)",
            "t.yaml:21: proxy.reverse.url: weight must be an integer in range 1 - 256, got \"0\"",
            "t.yaml:25: proxy.reverse.url: balancer must be round-robin or least-conn, got \"fastest\"",
            "t.yaml:30: proxy.ssl.verify-peer expects ON or OFF, got \"maybe\"",
            "t.yaml:31: proxy.http2.ratio expects a percentage (0 to 100)",
            "t.yaml:32: proxy.connect expects a sequence of access rules (\"+ADDRESS[/MASK][:PORT]\" or \"-...\"), got a scalar",
            "t.yaml:33: unknown directive proxy.timout.io (did you mean proxy.timeout.io?)",
            "t.yaml:34: proxy.header.add expects \"Name: value\", got \"NoColon\"",
            "t.yaml:35: proxy.header.unsetunless: \"Bad Name\" is not a valid header name",
            "t.yaml:36: proxy.timeout.keepalive expects an integer >= 0, got \"-1\"",
            "t.yaml:37: proxy.reverse.url: \"8080\" is not a URL (expected http://HOST[:PORT][/PATH])",
        ]
    );
}
