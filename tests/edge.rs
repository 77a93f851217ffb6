//! The edge: HAProxy as the L4 balancer sending PROXY v1 and v2 to spate (over TCP and TLS),
//! `proxy-protocol-from` refusing a PROXY header from any other peer, `access` rules and the
//! client address `real-ip.*` finds behind trusted proxies. Clients take source addresses on
//! 127.0.0.0/8 (`curl --interface`), so each test tells clients apart on one host.

mod common;
mod tls_support;

use common::backend::{Backend, Echo};
use common::*;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `curl` from the source address `from`: the status, and the body.
fn curl_from(from: &str, url: &str, extra: &[&str]) -> (u16, String) {
    let mut args = vec!["--interface", from];
    args.extend_from_slice(extra);
    args.push(url);
    curl_status(&args)
}

#[test]
fn haproxy_names_the_client_over_tcp_and_tls_v1_and_v2() {
    let backend = Backend::start();
    let dir = tempfile::tempdir().unwrap();
    tls_support::cert(dir.path(), "a", "localhost", false);
    let s = Spate::start_in(
        &format!(
            "
listen:
  - {{host: 127.0.0.1, port: 0, proxy-protocol: ON, proxy-protocol-from: [127.0.0.1/32]}}
  - host: 127.0.0.2
    port: 0
    proxy-protocol: ON
    proxy-protocol-from: 127.0.0.1
    ssl:
      certificate-file: a.crt
      key-file: a.key
num-threads: 1
access-log:
  path: $DIR/access.log
  format: \"%h %r %s\"
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: {}
",
            backend.url("/")
        ),
        dir,
    );
    let (plain, tls) = (s.listening[0], s.listening[1]);
    let [p1, p2, p3, p4] = free_ports::<4>();
    let (plain, tls) = (plain.to_string(), tls.to_string());
    let _h = haproxy::start(
        s.path(),
        &[
            (p1, plain.clone(), "send-proxy"),
            (p2, plain, "send-proxy-v2"),
            (p3, tls.clone(), "send-proxy"),
            (p4, tls, "send-proxy-v2"),
        ],
    );
    let cases = [
        ("127.0.0.11", format!("http://127.0.0.1:{p1}/v1")),
        ("127.0.0.12", format!("http://127.0.0.1:{p2}/v2")),
        ("127.0.0.13", format!("https://127.0.0.1:{p3}/tls-v1")),
        ("127.0.0.14", format!("https://127.0.0.1:{p4}/tls-v2")),
    ];
    for (from, url) in &cases {
        let (status, body) = curl_from(from, url, &[]);
        assert_eq!(status, 200, "{url}: {body}");
        let echo = Echo::parse(body.as_bytes()).expect("an echo");
        // What the backend receives: the client HAProxy accepted, not HAProxy.
        assert_eq!(echo.header("x-forwarded-for"), Some(*from), "{url}");
    }
    let lines = file_lines(&s.path().join("access.log"), cases.len());
    for (from, url) in &cases {
        let path = &url[url.rfind('/').unwrap()..];
        // curl speaks HTTP/2 where TLS lets it choose.
        let version = if url.starts_with("https") {
            "HTTP/2"
        } else {
            "HTTP/1.1"
        };
        let want = format!("{from} GET {path} {version} 200");
        assert!(lines.contains(&want), "{want} not in {lines:?}");
    }
}

#[test]
fn a_proxy_header_from_an_untrusted_peer_is_refused_with_one_line() {
    let s = Spate::start(
        "
listen: {host: 127.0.0.1, port: 0, proxy-protocol: ON, proxy-protocol-from: [127.0.0.1]}
num-threads: 1
hosts:
  default:
    paths:
      /:
        respond: {body: hello}
",
    );
    // From 127.0.0.1, trusted: served as the client it names.
    let mut c = std::net::TcpStream::connect(s.addr).unwrap();
    write_all(
        &mut c,
        b"PROXY TCP4 203.0.113.7 127.0.0.1 5000 80\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
    );
    assert_eq!(
        read_response(&mut c, &mut Vec::new(), false).text(),
        "hello"
    );
    // From 127.0.0.2: whatever it claims, closed unanswered.
    let out = curl(&[
        "-s",
        "--max-time",
        "5",
        "--interface",
        "127.0.0.2",
        "--haproxy-protocol",
        "-w",
        "%{http_code}",
        &s.url("/"),
    ]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "000");
    let lines = s.log_lines_naming("not in proxy-protocol-from", 1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("127.0.0.2"), "{lines:?}");
}

/// Rules per host and path, in order, inherited and replaced; 403 and one log line.
#[test]
fn access_rules_allow_and_deny_by_address_in_order() {
    let s = Spate::start(
        "
listen: {host: 127.0.0.1, port: 0}
num-threads: 1
hosts:
  default:
    access:
      - deny: 127.0.0.66
    paths:
      /open:
        respond: {body: open}
      /private:
        access:
          - allow: [127.0.0.2, 127.0.1.0/24]
          - deny: all
        respond: {body: private}
      /private/public:
        access:
          - allow: all
        respond: {body: public}
",
    );
    let url = |p: &str| s.url(p);
    assert_eq!(curl_from("127.0.0.3", &url("/open"), &[]).0, 200);
    assert_eq!(curl_from("127.0.0.66", &url("/open"), &[]).0, 403);
    assert_eq!(curl_from("127.0.0.2", &url("/private"), &[]).0, 200);
    assert_eq!(curl_from("127.0.1.77", &url("/private/x"), &[]).0, 200);
    assert_eq!(curl_from("127.0.0.3", &url("/private"), &[]).0, 403);
    // The inner level's rules replace the host's: 127.0.0.66 may pass here.
    assert_eq!(curl_from("127.0.0.66", &url("/private/public"), &[]).0, 200);
    // HTTP/2 too: the same rules whatever carries the request.
    let (status, _) = curl_from("127.0.0.3", &url("/private"), &["--http2-prior-knowledge"]);
    assert_eq!(status, 403);
    let lines = s.log_lines_naming("access rule denies", 3);
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(lines.iter().any(|l| l.contains("127.0.0.66")), "{lines:?}");
}

/// `real-ip.*`: the address trusted proxies name in `X-Forwarded-For` / `Forwarded` is the
/// client the access rules judge; an untrusted peer's header counts for nothing.
#[test]
fn real_ip_walks_trusted_proxies_right_to_left() {
    let s = Spate::start(
        "
listen: {host: 127.0.0.1, port: 0}
num-threads: 1
real-ip.from: [127.0.0.1, 10.0.0.0/8]
real-ip.recursive: ON
hosts:
  default:
    access:
      - deny: 203.0.113.0/24
    paths:
      /:
        respond: {body: ok}
      /forwarded:
        real-ip.header: Forwarded
        respond: {body: ok}
      /one-step:
        real-ip.recursive: OFF
        respond: {body: ok}
",
    );
    let xff = |v: &str| format!("X-Forwarded-For: {v}");
    let from_lo = |path: &str, h: &str| curl_from("127.0.0.1", &s.url(path), &["-H", h]).0;
    assert_eq!(from_lo("/", &xff("203.0.113.5")), 403);
    assert_eq!(from_lo("/", &xff("203.0.113.5, 10.1.2.3, 10.0.0.1")), 403);
    assert_eq!(from_lo("/", &xff("198.51.100.1")), 200);
    assert_eq!(
        from_lo("/", &xff("203.0.113.5, 198.51.100.1, 10.0.0.1")),
        200
    );
    // One step only: the last address, a trusted proxy, is the client.
    assert_eq!(from_lo("/one-step", &xff("203.0.113.5, 10.0.0.1")), 200);
    assert_eq!(from_lo("/one-step", &xff("10.0.0.1, 203.0.113.5")), 403);
    let fwd = "Forwarded: for=203.0.113.5;proto=https, for=\"[2001:db8::1]:80\", for=10.0.0.9";
    assert_eq!(from_lo("/forwarded", fwd), 200);
    let fwd = "Forwarded: for=203.0.113.5, for=10.0.0.9";
    assert_eq!(from_lo("/forwarded", fwd), 403);
    // 127.0.0.2 is no trusted proxy: its header is ignored.
    let (status, _) = curl_from("127.0.0.2", &s.url("/"), &["-H", &xff("203.0.113.5")]);
    assert_eq!(status, 200);
}

#[test]
fn dash_t_names_each_bad_edge_directive() {
    assert_config_errors(
        "listen:
  - {port: 8080, proxy-protocol-from: 10.0.0.0/8}
  - {port: 8081, proxy-protocol: ON, proxy-protocol-from: [10.0.0.1/8]}
hosts:
  default:
    access:
      - allow: 10.0.0.0/33
      - permit: all
    real-ip.header: X-Real-IP
    paths:
      /:
        respond: {body: x}
",
        &[
        "conf.yaml:2: listen: proxy-protocol-from needs proxy-protocol: ON",
        "conf.yaml:3: listen.proxy-protocol-from expects an address or CIDR range: 10.0.0.1/8 has bits set after the prefix length",
        "conf.yaml:7: access.allow expects an address or CIDR range: prefix length \"33\" is not 0 to 32",
        "conf.yaml:8: access expects a sequence of {allow: RANGES} or {deny: RANGES}, got the key permit",
        "conf.yaml:9: real-ip.header and real-ip.recursive need real-ip.from",
        ],
    );
}

/// `htpasswd` from apache2-utils writes the file, one user per hash it offers.
fn htpasswd(file: &std::path::Path, flags: &str, user: &str, password: &str) {
    let mut args = vec![format!("-b{flags}")];
    if !file.exists() {
        args[0].push('c');
    }
    let out = Command::new("htpasswd")
        .args(&args)
        .arg(file)
        .args([user, password])
        .output()
        .expect("htpasswd (apt-get install apache2-utils)");
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn basic_auth_against_htpasswd_files_reloaded_when_they_change() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("users");
    htpasswd(&file, "m", "alice", "apr1-pass");
    htpasswd(&file, "B", "bob", "bcrypt-pass");
    htpasswd(&file, "2", "carol", "sha256-pass");
    htpasswd(&file, "5", "dave", "sha512-pass");
    // A broken line and a hash spate does not take: skipped, each with a line; the rest
    // still counts.
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("this line is broken\neve:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n");
    std::fs::write(&file, text).unwrap();
    let s = Spate::start_in(
        "
listen: {host: 127.0.0.1, port: 0}
num-threads: 1
hosts:
  default:
    paths:
      /:
        respond: {body: open}
      /private:
        basic-auth: {htpasswd: users, realm: Staff only}
        respond: {body: private}
      /missing:
        basic-auth: {htpasswd: no-such-file}
        respond: {body: never}
",
        dir,
    );
    let get = |path: &str, user: Option<&str>| {
        let mut args = vec!["-s", "-i", "--max-time", "10"];
        if let Some(u) = user {
            args.extend(["-u", u]);
        }
        let url = s.url(path);
        args.push(&url);
        String::from_utf8_lossy(&curl(&args).stdout).into_owned()
    };
    assert!(get("/", None).starts_with("HTTP/1.1 200"));
    let refused = get("/private", None);
    assert!(refused.starts_with("HTTP/1.1 401"), "{refused}");
    assert!(
        refused.contains("www-authenticate: Basic realm=\"Staff only\""),
        "{refused}"
    );
    // The file is read at the first request that needs it.
    let broken = s.log_lines_naming("skipped", 2);
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(
        broken[0].contains("users:5: skipped: no user:hash"),
        "{broken:?}"
    );
    assert!(
        broken[1].contains("users:6: skipped: a hash other than"),
        "{broken:?}"
    );
    for cred in [
        "alice:apr1-pass",
        "bob:bcrypt-pass",
        "carol:sha256-pass",
        "dave:sha512-pass",
    ] {
        let r = get("/private", Some(cred));
        assert!(
            r.starts_with("HTTP/1.1 200") && r.ends_with("private"),
            "{cred}: {r}"
        );
    }
    for cred in ["alice:wrong", "nobody:apr1-pass", "eve:abc"] {
        assert!(
            get("/private", Some(cred)).starts_with("HTTP/1.1 401"),
            "{cred}"
        );
    }
    // Changed on disk: a new user counts, a removed one no more, within a second or so.
    // (htpasswd itself refuses to edit a file with a broken line: rewritten here, with its
    // -n output for the new user.)
    let users = s.path().join("users");
    let out = Command::new("htpasswd")
        .args(["-nbm", "frank", "new-pass"])
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&users).unwrap();
    let mut kept: String = text
        .lines()
        .filter(|l| !l.starts_with("alice:"))
        .map(|l| format!("{l}\n"))
        .collect();
    kept.push_str(String::from_utf8_lossy(&out.stdout).trim());
    kept.push('\n');
    std::fs::write(&users, kept).unwrap();
    let end = Instant::now() + Duration::from_secs(5);
    while !get("/private", Some("frank:new-pass")).starts_with("HTTP/1.1 200") {
        assert!(Instant::now() < end, "the changed file was not read again");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(get("/private", Some("alice:apr1-pass")).starts_with("HTTP/1.1 401"));
    // Refusals are logged, credentials never.
    let refusals = s.log_lines_naming("401: Basic credentials not accepted", 4);
    assert!(refusals.len() >= 4, "{refusals:?}");
    for l in refusals.iter().chain(&broken) {
        assert!(!l.contains("pass") && !l.contains("wrong"), "{l}");
    }
    // No file: 500, never a pass-through, and one line however many requests.
    for _ in 0..3 {
        assert!(get("/missing", Some("bob:bcrypt-pass")).starts_with("HTTP/1.1 500"));
    }
    let lines = s.log_lines_naming("cannot read", 1);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(!lines[0].contains("pass"), "{lines:?}");
}

/// One request on a kept connection: its status.
fn status_on(c: &mut std::net::TcpStream, pending: &mut Vec<u8>, path: &str, key: &str) -> u16 {
    let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nX-Key: {key}\r\n\r\n");
    write_all(c, req.as_bytes());
    read_response(c, pending, false).status
}

/// The patterns of the comparison with nginx, on the server at `port`: (pattern, passed,
/// refused) for each.
fn limit_patterns(port: u16) -> Vec<(&'static str, usize, usize)> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut out = Vec::new();
    let tally = |statuses: &[u16]| {
        let passed = statuses.iter().filter(|s| **s == 200).count();
        let refused = statuses.iter().filter(|s| **s == 429).count();
        assert_eq!(passed + refused, statuses.len(), "{statuses:?}");
        (passed, refused)
    };
    // Steady at twice the rate: 40 requests 50 ms apart against 10 r/s.
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    let mut pending = Vec::new();
    let start = Instant::now();
    let mut statuses = Vec::new();
    for i in 0..40u32 {
        let at = start + Duration::from_millis(50) * i;
        std::thread::sleep(at.saturating_duration_since(Instant::now()));
        statuses.push(status_on(&mut c, &mut pending, "/steady", "-"));
    }
    let (p, r) = tally(&statuses);
    out.push(("steady 20 r/s against 10 r/s, 40 requests", p, r));
    // A burst of 20 at once against 5 r/s, burst 5, nodelay.
    let statuses: Vec<u16> = (0..20)
        .map(|_| status_on(&mut c, &mut pending, "/nodelay", "-"))
        .collect();
    let (p, r) = tally(&statuses);
    out.push(("20 at once, 5 r/s burst 5 nodelay", p, r));
    // The same without nodelay: 20 clients at once; those within the burst wait.
    let threads: Vec<_> = (0..20)
        .map(|_| {
            std::thread::spawn(move || {
                let mut c = std::net::TcpStream::connect(addr).unwrap();
                status_on(&mut c, &mut Vec::new(), "/delay", "-")
            })
        })
        .collect();
    let statuses: Vec<u16> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let (p, r) = tally(&statuses);
    out.push(("20 clients at once, 5 r/s burst 5 (delayed)", p, r));
    // Two keys (a header) interleaved, 12 each at once, 5 r/s burst 2 nodelay.
    let statuses: Vec<u16> = (0..24)
        .map(|i| {
            status_on(
                &mut c,
                &mut pending,
                "/keys",
                if i % 2 == 0 { "a" } else { "b" },
            )
        })
        .collect();
    let (p, r) = tally(&statuses);
    out.push(("two keys, 12 each at once, 5 r/s burst 2 nodelay", p, r));
    out
}

struct NginxProcess(Child);

impl Drop for NginxProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Debian's nginx with the same zones, on `port`.
fn nginx_limits(dir: &std::path::Path, port: u16) -> NginxProcess {
    let d = dir.display();
    std::fs::create_dir_all(dir.join("htdocs")).unwrap();
    std::fs::create_dir_all(dir.join("tmp")).unwrap();
    for f in ["steady", "nodelay", "delay", "keys"] {
        std::fs::write(dir.join("htdocs").join(f), "ok").unwrap();
    }
    let conf = format!(
        "daemon off; user root; worker_processes 1; pid {d}/nginx.pid; error_log {d}/error.log;
events {{}}
http {{
  access_log off;
  client_body_temp_path {d}/tmp; proxy_temp_path {d}/tmp; fastcgi_temp_path {d}/tmp;
  uwsgi_temp_path {d}/tmp; scgi_temp_path {d}/tmp;
  limit_req_zone $binary_remote_addr zone=steady:1m rate=10r/s;
  limit_req_zone $binary_remote_addr zone=nodelay:1m rate=5r/s;
  limit_req_zone $binary_remote_addr zone=delay:1m rate=5r/s;
  limit_req_zone $http_x_key zone=keys:1m rate=5r/s;
  limit_req_status 429;
  server {{
    listen 127.0.0.1:{port};
    root {d}/htdocs;
    location /steady {{ limit_req zone=steady; }}
    location /nodelay {{ limit_req zone=nodelay burst=5 nodelay; }}
    location /delay {{ limit_req zone=delay burst=5; }}
    location /keys {{ limit_req zone=keys burst=2 nodelay; }}
  }}
}}
"
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, conf).unwrap();
    let bin = if std::path::Path::new("/usr/sbin/nginx").exists() {
        "/usr/sbin/nginx"
    } else {
        "nginx"
    };
    let child = Command::new(bin)
        .arg("-c")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx (apt-get install nginx-light)");
    let n = NginxProcess(child);
    let end = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < end, "nginx did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    n
}

/// nginx's `limit_req` and spate's `limit-req` on the same traffic: the same numbers of
/// passed and refused requests (within a few where the client's timing decides).
#[test]
fn limit_req_agrees_with_nginx() {
    let s = Spate::start(
        "
listen: {host: 127.0.0.1, port: 0}
num-threads: 2
limit-req-zones:
  steady: {key: client, rate: 10r/s}
  nodelay: {rate: 5r/s}
  delay: {rate: 5r/s}
  keys: {key: \"header:X-Key\", rate: 5r/s}
hosts:
  default:
    paths:
      /steady:
        limit-req: {zone: steady}
        respond: {body: ok}
      /nodelay:
        limit-req: {zone: nodelay, burst: 5, nodelay: ON}
        respond: {body: ok}
      /delay:
        limit-req: {zone: delay, burst: 5}
        respond: {body: ok}
      /keys:
        limit-req: {zone: keys, burst: 2, nodelay: ON}
        respond: {body: ok}
",
    );
    let spate = limit_patterns(s.addr.port());
    let dir = tempfile::tempdir().unwrap();
    let [port] = free_ports::<1>();
    let nginx = nginx_limits(dir.path(), port);
    let theirs = limit_patterns(port);
    drop(nginx);
    eprintln!("pattern | spate passed/refused | nginx passed/refused");
    for ((name, p, r), (_, np, nr)) in spate.iter().zip(&theirs) {
        eprintln!("{name} | {p}/{r} | {np}/{nr}");
    }
    for ((name, p, _), (_, np, _)) in spate.iter().zip(&theirs) {
        // The steady pattern's count follows the client's own timing, which a busy machine
        // stretches differently in the two runs; the others agree exactly when it is idle.
        let slack = if name.starts_with("steady") { 4 } else { 1 };
        assert!(
            p.abs_diff(*np) <= slack,
            "{name}: spate {p} passed, nginx {np}"
        );
    }
    // A refusal says when to come back.
    let mut c = s.connect();
    let mut pending = Vec::new();
    let refusal = (0..10)
        .map(|_| {
            write_all(&mut c, b"GET /nodelay HTTP/1.1\r\nHost: x\r\n\r\n");
            read_response(&mut c, &mut pending, false)
        })
        .find(|r| r.status == 429)
        .expect("a refusal");
    let retry = refusal
        .header("retry-after")
        .map(|v| v.parse::<u64>().unwrap());
    assert!(retry.is_some_and(|v| v >= 1), "{retry:?}");
}

/// A full zone forgets its least recently seen key (one line says so), dry-run only logs,
/// and HTTP/2 streams count as requests.
#[test]
fn limit_req_full_zone_dry_run_and_http2_streams() {
    let s = Spate::start(
        "
listen: {host: 127.0.0.1, port: 0}
num-threads: 1
limit-req-zones:
  small: {key: \"header:X-Key\", rate: 1r/m, size: 2}
  dry: {rate: 1r/m}
  streams: {rate: 1r/m}
hosts:
  default:
    paths:
      /small:
        limit-req: {zone: small}
        respond: {body: ok}
      /dry:
        limit-req: {zone: dry, dry-run: ON}
        respond: {body: ok}
      /h2:
        limit-req: {zone: streams, burst: 1, nodelay: ON, status: 503}
        respond: {body: ok}
",
    );
    let mut c = s.connect();
    let mut pending = Vec::new();
    let mut st = |path: &str, key: &str| status_on(&mut c, &mut pending, path, key);
    assert_eq!(st("/small", "a"), 200);
    assert_eq!(st("/small", "b"), 200);
    assert_eq!(st("/small", "a"), 429);
    // c takes the place of a (least recently counted), so a starts afresh; b still counts.
    assert_eq!(st("/small", "c"), 200);
    assert_eq!(st("/small", "a"), 200);
    assert_eq!(st("/small", "c"), 429);
    let full = s.log_lines_naming("zone full", 1);
    assert_eq!(full.len(), 1, "{full:?}");
    for _ in 0..3 {
        assert_eq!(st("/dry", "-"), 200);
    }
    let dry = s.log_lines_naming("would refuse (dry-run)", 2);
    assert_eq!(dry.len(), 2, "{dry:?}");
    // Three streams on one HTTP/2 connection (h2load, cleartext prior knowledge): two
    // within the burst, the third refused.
    let out = Command::new("h2load")
        .args(["-n", "3", "-c", "1", "-m", "1", &s.url("/h2")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("status codes: 2 2xx, 0 3xx, 0 4xx, 1 5xx"),
        "{text}"
    );
}

#[test]
fn dash_t_names_each_bad_limit() {
    assert_config_errors(
        "listen: 8080
limit-req-zones:
  a: {key: cookie, rate: 10r/s}
  b: {rate: 10 per second}
  c: {size: 10}
hosts:
  default:
    paths:
      /:
        limit-req: {zone: nowhere}
        respond: {body: x}
      /x:
        limit-req: {zone: c, nodelay: ON, delay: 3, status: 302}
        respond: {body: x}
",
        &[
            "conf.yaml:3: limit-req-zones.a.key expects client or header:NAME, got \"cookie\"",
            "conf.yaml:4: limit-req-zones.b.rate expects requests per second or minute",
            "conf.yaml:5: limit-req-zones.c: rate is required",
            "conf.yaml:10: limit-req: no zone nowhere in limit-req-zones",
            "conf.yaml:13: limit-req: nodelay and delay exclude each other",
            "conf.yaml:13: limit-req.status",
        ],
    );
}

/// The client `real-ip` finds is the client everywhere after it: the access log's `%h` and
/// the `X-Forwarded-For` the backend gets.
#[test]
fn real_ip_reaches_the_log_and_the_backend() {
    let backend = Backend::start();
    let s = Spate::start(&format!(
        "
listen: {{host: 127.0.0.1, port: 0}}
num-threads: 1
real-ip.from: 127.0.0.1
access-log:
  path: $DIR/access.log
  format: \"%h %s\"
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: {}
",
        backend.url("/")
    ));
    let (status, body) = curl_from(
        "127.0.0.1",
        &s.url("/x"),
        &["-H", "X-Forwarded-For: 198.51.100.23"],
    );
    assert_eq!(status, 200, "{body}");
    let echo = Echo::parse(body.as_bytes()).expect("an echo");
    // The incoming list, with the client spate took it for appended as nginx's
    // $proxy_add_x_forwarded_for does.
    let xff = echo.header("x-forwarded-for").unwrap_or_default();
    assert!(xff.ends_with("198.51.100.23"), "{xff}");
    // Untrusted: its own address.
    let (status, _) = curl_from(
        "127.0.0.2",
        &s.url("/y"),
        &["-H", "X-Forwarded-For: 1.2.3.4"],
    );
    assert_eq!(status, 200);
    let lines = file_lines(&s.path().join("access.log"), 2);
    assert_eq!(lines, ["198.51.100.23 200", "127.0.0.2 200"]);
}

/// `limit-conn`: requests of one client in progress at once, over HTTP/1.1 (each on its own
/// connection) and as HTTP/2 streams of one connection; a streamed body keeps its place
/// until it ends; places come back; dry-run only logs.
#[test]
fn limit_conn_counts_requests_in_progress() {
    let backend = Backend::start();
    let s = Spate::start(&format!(
        "
listen: {{host: 127.0.0.1, port: 0}}
num-threads: 2
limit-conn-zones:
  per-client: {{key: client}}
  dry: {{key: client}}
  streams: {{key: client, size: 10}}
hosts:
  default:
    paths:
      /slow:
        limit-conn: {{zone: per-client, conn: 2}}
        proxy.reverse.url: {b}
      /dry:
        limit-conn: {{zone: dry, conn: 1, dry-run: ON}}
        proxy.reverse.url: {b}
      /h2:
        limit-conn: {{zone: streams, conn: 2, status: 429}}
        proxy.reverse.url: {b}
",
        b = backend.url("/")
    ));
    let addr = s.connect().peer_addr().unwrap();
    // The threads reach spate by address (`Spate` stays on this thread).
    let get = |path: &str| {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
        write_all(&mut c, req.as_bytes());
        read_response(&mut c, &mut Vec::new(), false)
    };
    let at_once = |path: &str, n: usize| -> Vec<u16> {
        let mut codes: Vec<u16> = std::thread::scope(|sc| {
            let all: Vec<_> = (0..n).map(|_| sc.spawn(|| get(path).status)).collect();
            all.into_iter().map(|h| h.join().unwrap()).collect()
        });
        codes.sort_unstable();
        codes
    };
    assert_eq!(at_once("/slow/delay?ms=700", 4), [200, 200, 503, 503]);
    let refused = s.log_lines_naming("limit-conn: refused: too many requests in progress", 2);
    assert_eq!(refused.len(), 2, "{refused:?}");
    // Given back: two more pass.
    assert_eq!(at_once("/slow/delay?ms=10", 2), [200, 200]);
    // A streamed body holds its place until its last piece.
    let codes = std::thread::scope(|sc| {
        let long: Vec<_> = (0..2)
            .map(|_| {
                sc.spawn(|| {
                    // Read to the end (the body is chunked): the place is held till then.
                    let mut c = std::net::TcpStream::connect(addr).unwrap();
                    let req = "GET /slow/chunked?pieces=4&delay=300 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
                    write_all(&mut c, req.as_bytes());
                    let all = read_to_close(&mut c);
                    assert!(all.contains("piece 3"), "{all}");
                    all[9..12].parse::<u16>().unwrap()
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(400));
        let third = get("/slow/text").status;
        let mut codes: Vec<u16> = long.into_iter().map(|h| h.join().unwrap()).collect();
        codes.push(third);
        codes
    });
    assert_eq!(codes, [200, 200, 503]);
    assert_eq!(get("/slow/text").status, 200);
    // Dry-run: all pass, the refusals only logged.
    assert_eq!(at_once("/dry/delay?ms=500", 3), [200, 200, 200]);
    let dry = s.log_lines_naming("limit-conn: would refuse (dry-run)", 2);
    assert_eq!(dry.len(), 2, "{dry:?}");
    // Four streams at once on one HTTP/2 connection: two in progress, two refused.
    let out = Command::new("h2load")
        .args(["-n", "4", "-c", "1", "-m", "4", &s.url("/h2/delay?ms=500")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("status codes: 2 2xx, 0 3xx, 2 4xx, 0 5xx"),
        "{text}"
    );
}

#[test]
fn dash_t_names_each_bad_limit_conn() {
    assert_config_errors(
        "limit-conn-zones:
  a: {key: nobody}
  b: {size: 0}
hosts:
  default:
    paths:
      /x:
        limit-conn: {zone: a}
        respond: {body: x}
      /y:
        limit-conn: {zone: missing, conn: 1, status: 200}
        respond: {body: x}
",
        &[
            "conf.yaml:2: limit-conn-zones.a.key expects client or header:NAME, got \"nobody\"",
            "conf.yaml:3: limit-conn-zones.b.size",
            "conf.yaml:8: limit-conn: conn is required",
            "conf.yaml:11: limit-conn.status",
        ],
    );
}
