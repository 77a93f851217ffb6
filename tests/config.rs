//! The command line and configuration: `-t`, errors with file:line, the seed configurations
//! running as they are, header commands, redirects and the access log.

mod common;
mod tls_support;

use common::*;
use std::path::Path;
use std::process::Command;

#[test]
fn help_and_version() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("-c") && help.contains("serve"), "{help}");
    let out = Command::new(BIN).arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains(env!("CARGO_PKG_VERSION")));
}

#[test]
fn dash_t_names_the_line_of_a_bad_backend_list() {
    let (ok, _, err) = check_config(
        "listen: 8080
hosts:
  default:
    paths:
      /:
        proxy.reverse.url:
          backends:
            - {url: http://10.0.0.1/, weight: 300}
          balancer: random
",
    );
    assert!(!ok);
    for want in [
        "conf.yaml:8: proxy.reverse.url: weight must be an integer in range 1 - 256, got \"300\"",
        "conf.yaml:9: proxy.reverse.url: balancer must be round-robin or least-conn, got \"random\"",
    ] {
        assert!(err.contains(want), "{err}");
    }
}

/// h2o directives that only tune h2o's internals run unchanged: `-t` accepts the file and
/// warns for each at its line with what spate does instead; OFF passes without a word.
#[test]
fn dash_t_warns_about_directives_that_only_tune_h2o() {
    let (ok, out, err) = check_config(
        "listen: 8080
proxy.zerocopy: always
ssl-offload: kernel
neverbleed-offload: OFF
io_uring-batch-size: 64
max-spare-pipes: 10
hosts:
  default:
    file.io_uring: ON
    paths:
      /:
        file.dir: /srv
",
    );
    assert!(ok, "{err}");
    assert!(out.contains("configuration is OK"), "{out}");
    for want in [
        "conf.yaml:2: warning: proxy.zerocopy tunes h2o's internals and is ignored: ",
        "conf.yaml:3: warning: ssl-offload tunes h2o's internals and is ignored: spate encrypts TLS in user space with rustls",
        "conf.yaml:5: warning: io_uring-batch-size ",
        "conf.yaml:6: warning: max-spare-pipes ",
        "conf.yaml:9: warning: file.io_uring ",
    ] {
        assert!(err.contains(want), "{want} not in {err}");
    }
    assert!(!err.contains("neverbleed-offload"), "{err}");
    assert_eq!(err.lines().count(), 5, "{err}");
}

#[test]
fn dash_t_accepts_a_valid_file() {
    let (ok, out, err) = check_config(
        "listen: 8080\nhosts:\n  default:\n    paths:\n      /:\n        file.dir: /tmp\n",
    );
    assert!(ok, "{out}{err}");
    assert!(out.contains("OK"), "{out}");
}

#[test]
fn dash_t_reports_every_problem_with_file_and_line() {
    let yaml = "listen: 8080\nnum-threads: many\nhosts:\n  default:\n    paths:\n      /:\n        file.dirr: /tmp\n";
    let (ok, _, err) = check_config(yaml);
    assert!(!ok);
    let lines: Vec<&str> = err.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("conf.yaml:2:") && l.contains("num-threads")),
        "{err}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("conf.yaml:7:") && l.contains("file.dirr")),
        "{err}"
    );
    assert!(err.contains("file.dir"), "a hint at the right name: {err}");
}

/// What `prepare` finds (it runs for `-t` as at start): each problem at its own line.
#[test]
fn dash_t_rejects_a_bad_access_log_format() {
    let (ok, out, err) = check_config(
        "listen: 8080
hosts:
  default:
    paths:
      /:
        file.dir: /tmp
        access-log:
          path: /dev/null
          format: \"%h %Q %Z\"
",
    );
    assert!(!ok, "{out}{err}");
    assert!(!out.contains("configuration is OK"), "{out}");
    assert!(
        err.contains("conf.yaml:9: access-log.format: ") && err.contains("%Q"),
        "{err}"
    );
}

#[test]
fn dash_t_rejects_a_bad_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (crt, key) = tls_support::cert(dir.path(), "a", "localhost", false);
    let (old_crt, old_key) = tls_support::cert(dir.path(), "old", "localhost", true);
    let conf = |crt: &Path, key: &Path| {
        format!(
            "listen:
  port: 8443
  ssl:
    certificate-file: {}
    key-file: {}
hosts:
  default:
    paths:
      /:
        file.dir: /tmp
",
            crt.display(),
            key.display()
        )
    };
    let (ok, out, err) = check_config(&conf(&crt, &key));
    assert!(ok, "{out}{err}");
    // An expired certificate, a key that is not the certificate's, a missing file.
    let (ok, _, err) = check_config(&conf(&old_crt, &old_key));
    assert!(!ok);
    assert!(
        err.contains("conf.yaml:4: ") && err.contains("the certificate expired"),
        "{err}"
    );
    let (ok, _, err) = check_config(&conf(&crt, &old_key));
    assert!(!ok);
    assert!(
        err.contains("conf.yaml:5: ") && err.contains("does not match the certificate"),
        "{err}"
    );
    let (ok, _, err) = check_config(&conf(&dir.path().join("none.crt"), &key));
    assert!(!ok);
    assert!(
        err.contains(&format!(
            "conf.yaml:4: {}: cannot read",
            dir.path().join("none.crt").display()
        )),
        "{err}"
    );
}

#[test]
fn dash_t_rejects_an_unknown_user() {
    let (ok, _, err) = check_config(
        "listen: 8080
user: no-such-user-of-spate
hosts:
  default:
    paths:
      /:
        file.dir: /tmp
",
    );
    assert!(!ok);
    assert!(
        err.contains("conf.yaml:2: user: no such user no-such-user-of-spate"),
        "{err}"
    );
}

#[test]
fn yaml_syntax_errors_have_a_line() {
    let (ok, _, err) = check_config("listen: 8080\nhosts:\n  default:\n    paths: [unclosed\n");
    assert!(!ok);
    assert!(err.contains("conf.yaml:"), "{err}");
}

#[test]
fn a_bad_config_stops_the_server_from_starting() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, "listen: 8080\nbogus-directive: 1\nhosts: {}\n").unwrap();
    let out = Command::new(BIN).arg("-c").arg(&path).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.yaml:2:"));
}

/// Copies a seed configuration with its placeholders replaced by a test root and a port.
fn seed(rel: &str, root: &Path, port: u16) -> String {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/seed-configs")
        .join(rel);
    let text = std::fs::read_to_string(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let root = root.display().to_string();
    text.replace("/path/to/htdocs", &root)
        .replace("/usr/local/nginx/html", &root)
        .replace("listen: 80\n", &format!("listen: {port}\n"))
        .replace("listen: 3000\n", &format!("listen: {port}\n"))
        .replace("127.0.0.1:80", &format!("127.0.0.1:{port}"))
}

/// Runs a seed config as it is (placeholders substituted) and fetches the index through it.
fn run_seed(rel: &str, host: &str) {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "htdocs/index.html", b"<p>seed</p>\n");
    let root = dir.path().join("htdocs");
    let (s, [port]) = Spate::start_on_free_ports(dir, |[port]| seed(rel, &root, port));
    let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    use std::io::Write;
    let host = host.replace("PORT", &port.to_string());
    c.write_all(format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes())
        .unwrap();
    let mut pending = Vec::new();
    let r = read_response(&mut c, &mut pending, false);
    assert_eq!(r.status, 200, "{rel}");
    assert_eq!(r.text(), "<p>seed</p>\n");
    drop(s);
}

#[test]
fn seed_h2o_vs_nginx_initial_runs() {
    run_seed("seed-001-h2o-vs-nginx/h2o-initial.yaml", "127.0.0.1:PORT");
}

#[test]
fn seed_h2o_vs_nginx_final_runs() {
    run_seed("seed-001-h2o-vs-nginx/h2o-final.yaml", "127.0.0.1:PORT");
}

#[test]
fn seed_h2_benchmark_web_runs() {
    run_seed("seed-000-h2-benchmark-2015/web.yaml", "localhost");
}

#[test]
fn seed_backend_runs() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "index.html", b"<p>seed</p>\n");
    let root = dir.path().to_path_buf();
    let _s = Spate::start_on_free_ports(dir, |[port]| {
        seed("seed-000-h2-benchmark-2015/backend-http1.yaml", &root, port)
            .replace("listen: 3001\n", &format!("listen: {port}\n"))
    });
}

#[test]
fn seed_004_fails_only_on_its_certificate_paths() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/seed-configs/seed-004-proxy-h2-h3/h2o.yaml"),
    )
    .unwrap();
    let (ok, _, err) = check_config(&text);
    assert!(!ok);
    // `/certs/localhost.pem` is a container path; compress (line 20) and the proxy
    // directives (lines 25, 26) are supported now.
    assert!(
        err.contains("conf.yaml:11: /certs/localhost.pem: cannot read"),
        "{err}"
    );
    assert!(!err.contains("not supported"), "{err}");
    assert!(!err.contains("compress") && !err.contains("proxy"), "{err}");
}

#[test]
fn seed_proxies_pass_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let (crt, key) = tls_support::cert(dir.path(), "server", "localhost", false);
    for rel in [
        "seed-000-h2-benchmark-2015/proxy.yaml",
        "seed-000-h2-benchmark-2015/tls-proxy.yaml",
    ] {
        let [port] = free_ports();
        let yaml = seed(rel, dir.path(), port)
            .replace("/path/to/server.crt", &crt.display().to_string())
            .replace("/path/to/server.key", &key.display().to_string());
        let (ok, out, err) = check_config(&yaml);
        assert!(ok, "{rel}: {out}{err}");
    }
}

#[test]
fn header_commands_and_redirects() {
    let s = Spate::start(
        r#"
listen: {host: 127.0.0.1, port: 0}
header.add: "X-Global: 1"
hosts:
  default:
    header.set: "X-Host: h"
    paths:
      /old:
        redirect: https://example.com/new
      /moved:
        redirect:
          url: /elsewhere/
          status: 301
      /:
        header.unset: X-Host
        respond: {body: "ok"}
"#,
    );
    let r = get(&s, "/");
    assert_eq!(r.header("x-global"), Some("1"));
    assert!(r.header("x-host").is_none());
    let r = get(&s, "/old/page?x");
    assert_eq!(r.status, 302);
    assert_eq!(r.header("location"), Some("https://example.com/new/page?x"));
    assert_eq!(r.header("x-host"), Some("h"));
    let r = get(&s, "/moved/a");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("/elsewhere/a"));
}

#[test]
fn access_log_records_requests_and_survives_shutdown() {
    let mut s = Spate::start(
        r#"
listen: {host: 127.0.0.1, port: 0}
access-log: $DIR/access.log
hosts:
  default:
    paths:
      /:
        respond: {body: "ok"}
      /custom:
        access-log:
          path: $DIR/custom.log
          format: "%m %U %s %b %{X-Test}i"
        respond: {body: "custom"}
"#,
    );
    for _ in 0..3 {
        assert_eq!(get(&s, "/hello?q=1").status, 200);
    }
    request(
        &s,
        "GET /custom/x HTTP/1.1\r\nHost: a\r\nX-Test: yes\r\n\r\n",
    );
    let dir = s.path().to_path_buf();
    assert!(s.stop().success());
    let log = std::fs::read_to_string(dir.join("access.log")).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 3, "{log}");
    assert!(lines[0].starts_with("127.0.0.1 - - ["), "{log}");
    assert!(
        lines[0].contains("\"GET /hello?q=1 HTTP/1.1\" 200 2"),
        "{log}"
    );
    let custom = std::fs::read_to_string(dir.join("custom.log")).unwrap();
    assert_eq!(custom, "GET /custom/x 200 6 yes\n");
}

/// The local address and port in the access log, on a listener bound to one address (taken
/// from the listener) and on a wildcard one (asked of each connection).
#[test]
fn access_log_local_address_on_bound_and_wildcard_listeners() {
    for host in ["127.0.0.1", "0.0.0.0"] {
        let mut s = Spate::start(&format!(
            r#"
listen: {{host: {host}, port: 0}}
access-log:
  path: $DIR/access.log
  format: "%A %p %U"
hosts:
  default:
    paths:
      /: {{respond: {{body: "ok"}}}}
"#
        ));
        assert_eq!(get(&s, "/x").status, 200);
        let port = s
            .url("/")
            .rsplit(':')
            .next()
            .unwrap_or_default()
            .trim_end_matches('/')
            .to_string();
        let dir = s.path().to_path_buf();
        assert!(s.stop().success());
        let log = std::fs::read_to_string(dir.join("access.log")).unwrap();
        assert_eq!(log, format!("127.0.0.1 {port} /x\n"), "listening on {host}");
    }
}

#[test]
fn path_prefixes_pick_the_longest_match_and_hosts_match_with_port() {
    let dir = tempfile::tempdir().unwrap();
    let (s, [port]) = Spate::start_on_free_ports(dir, |[port]| {
        format!(
            r#"
listen: {{host: 127.0.0.1, port: {port}}}
hosts:
  "127.0.0.1:{port}":
    paths:
      /: {{respond: {{body: "root"}}}}
      /a: {{respond: {{body: "a"}}}}
      /a/b: {{respond: {{body: "ab"}}}}
  "*.example.com":
    paths:
      /: {{respond: {{body: "wild"}}}}
"#
        )
    });
    let req = |path: &str, host: &str| {
        request(&s, &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n")).text()
    };
    let h = format!("127.0.0.1:{port}");
    assert_eq!(req("/", &h), "root");
    assert_eq!(req("/a", &h), "a");
    assert_eq!(req("/a/x", &h), "a");
    assert_eq!(req("/a/b/c", &h), "ab");
    assert_eq!(req("/ab", &h), "root");
    assert_eq!(req("/", "www.example.com"), "wild");
}

/// As in h2o, a host's own `listen` binds it to that listener: a request there is answered by
/// the hosts that listen there (the first of them when it names none), while a global `listen`
/// serves every host. Port 0 on four loopback addresses gives four listeners; the two hosts
/// naming 127.0.0.4 share one.
#[test]
fn hosts_with_their_own_listen_answer_on_that_listener_only() {
    let s = Spate::start(
        r#"
listen: {host: 127.0.0.3, port: 0}
num-threads: 1
hosts:
  one:
    listen: {host: 127.0.0.1, port: 0}
    paths:
      /: {respond: {body: "one"}}
  two:
    listen: {host: 127.0.0.2, port: 0}
    paths:
      /: {respond: {body: "two"}}
  three:
    listen: {host: 127.0.0.4, port: 0}
    paths:
      /: {respond: {body: "three"}}
  four:
    listen: {host: 127.0.0.4, port: 0}
    paths:
      /: {respond: {body: "four"}}
"#,
    );
    // Global first, then the hosts' in file order.
    let [global, one, two, shared] = s.listening[..] else {
        panic!("four listeners expected: {:?}", s.listening);
    };
    let ask = |addr: std::net::SocketAddr, host: &str| {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        use std::io::Write;
        // Twice on one connection: the second may be answered from the lane's memo.
        let req = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
        c.write_all(format!("{req}{req}").as_bytes()).unwrap();
        let mut pending = Vec::new();
        let first = read_response(&mut c, &mut pending, false).text();
        let second = read_response(&mut c, &mut pending, false).text();
        assert_eq!(first, second, "{host} at {addr}");
        first
    };
    for (addr, host, want) in [
        (one, "one", "one"),
        (one, "two", "one"),
        (one, "elsewhere", "one"),
        (two, "two", "two"),
        (two, "one", "two"),
        (two, "elsewhere", "two"),
        (shared, "four", "four"),
        (shared, "three", "three"),
        (shared, "one", "three"),
        (global, "two", "two"),
        (global, "four", "four"),
        (global, "elsewhere", "one"),
    ] {
        assert_eq!(ask(addr, host), want, "Host: {host} at {addr}");
    }
    // HTTP/2 routes the same way.
    let out = Command::new("curl")
        .args(["-s", "--http2-prior-knowledge", "-H", "Host: one"])
        .arg(format!("http://{two}/"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "two");
}

/// The listening socket's receive and send buffer sizes, from `ss` (`rb`/`tb` of skmem).
fn listener_buffers(addr: std::net::SocketAddr) -> (u64, u64) {
    let out = Command::new("ss")
        .args(["-ltmnH", "src", &addr.to_string()])
        .output()
        .expect("ss (iproute2)");
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |name: &str| -> u64 {
        let start = text
            .find(name)
            .unwrap_or_else(|| panic!("{name} in {text}"))
            + name.len();
        let digits: String = text[start..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().unwrap()
    };
    (field(",rb"), field(",tb"))
}

/// `listen` with `rcvbuf` and `sndbuf` sets them on the listening socket (the kernel doubles
/// them), and a reload with other values changes the socket it keeps.
#[test]
fn listen_buffer_sizes_apply_and_follow_a_reload() {
    let conf = |rcvbuf: u32| {
        format!(
            "tcp-fastopen: 8\nnum-threads: 1\nlisten: {{host: 127.0.0.1, port: 0, rcvbuf: {rcvbuf}, sndbuf: 65536}}\nhosts:\n  default:\n    paths:\n      /:\n        respond: {{status: 200, body: ok}}\n"
        )
    };
    let s = Spate::start(&conf(32768));
    assert_eq!(listener_buffers(s.addr), (65536, 131072));
    assert_eq!(get(&s, "/").status, 200);
    // `port: 0` again is the same listener: its socket is kept.
    std::fs::write(s.path().join("spate.yaml"), conf(49152)).unwrap();
    signal(&s.child, libc::SIGHUP);
    let lines = s.log_lines_naming("reloaded", 1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(listener_buffers(s.addr), (98304, 131072));
    assert_eq!(get(&s, "/").status, 200);
}

/// A reload runs the same checks as `-t`: a configuration `prepare` rejects is logged with
/// its line and the previous one keeps serving.
#[test]
fn a_reload_that_prepare_rejects_keeps_the_previous_configuration() {
    let conf = |body: &str, format: &str| {
        format!(
            "num-threads: 1\nlisten: {{host: 127.0.0.1, port: 0}}\nhosts:\n  default:\n    paths:\n      /:\n        access-log:\n          path: /dev/null\n          format: \"{format}\"\n        respond: {{status: 200, body: {body}}}\n"
        )
    };
    let s = Spate::start(&conf("old", "%h %s"));
    assert_eq!(get(&s, "/").text(), "old");
    std::fs::write(s.path().join("spate.yaml"), conf("new", "%h %Q")).unwrap();
    signal(&s.child, libc::SIGHUP);
    // "reloading", the error, "reload failed".
    let lines = s.log_lines_naming("spate.yaml", 3);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("spate.yaml:9: access-log.format: ") && l.contains("%Q")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("reload failed")),
        "{lines:?}"
    );
    assert_eq!(get(&s, "/").text(), "old");
}
