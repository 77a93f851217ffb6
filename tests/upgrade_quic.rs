//! HTTP/3 across a binary upgrade (SIGUSR2): the new process reads the UDP sockets, and the
//! datagrams of the old process's connections reach it through the upgrade's link
//! (`src/server/quic/peer.rs`), so a download in progress finishes; new connections are the
//! new process's. Skipped when the HTTP/3 clients are not installed (`h3_support::Clients`).

mod common;
mod h3_support;
mod tls_support;

use common::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BIG: usize = 50 << 20;

/// Sends SIGTERM to the process a binary upgrade started, when the test ends.
struct Upgraded(i32);

impl Drop for Upgraded {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the spate the test's upgrade started.
        unsafe { libc::kill(self.0, libc::SIGTERM) };
    }
}

/// Waits for the old process's "binary upgrade: new process N serves" line and the one after it,
/// "shutting down" (it drains); returns N.
fn new_pid(s: &Spate) -> i32 {
    let (mut line, mut draining) = (None, false);
    let end = std::time::Instant::now() + Duration::from_secs(60);
    while !(line.is_some() && draining) {
        assert!(std::time::Instant::now() < end, "no upgrade: {line:?}");
        for l in s.stderr_lines() {
            draining |= l.contains("shutting down");
            if l.contains("binary upgrade: new process") {
                line = Some(l);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let line = line.unwrap_or_default();
    line.split("new process ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {line:?}"))
}

/// An aioquic download of 50 MB is held after 4 MB (the client neither reads nor sends) while
/// spate upgrades; once the new process serves, the client goes on: every packet it sends
/// from then on is read by the new process, which passes it to the old one, and the download
/// finishes byte-exact. A new connection meanwhile gets a path only the new process's
/// configuration has, and a second SIGUSR2 is refused while the old process lives; the old
/// process exits once its download is done, long before `shutdown-timeout`, after which the
/// new process can be upgraded in turn.
#[test]
fn an_http3_download_goes_on_across_a_binary_upgrade() {
    let Some(clients) = h3_support::Clients::find() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    h3_support::write_pattern_file(&dir.path().join("docs/big"), BIG);
    let want = h3_support::sha256_file(&dir.path().join("docs/big"));
    let mut h3 = h3_support::H3Server::start(
        dir,
        "num-threads: 2\nshutdown-timeout: 300\n",
        h3_support::DOCS_SITE,
    );
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/h3/h3client.py");
    let mut download = Command::new(clients.python())
        .args([script, "--hold-at", "4194304", &h3.url("/big")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(download.stdout.take().unwrap()).lines();
    let held = out.next().expect("a line from the client").unwrap();
    assert!(held.starts_with("held\t"), "{held}");

    // The new process's configuration has a path the old one's has not.
    let yaml = std::fs::read_to_string(h3.dir().join("spate.yaml")).unwrap();
    let added = "      /new:\n        respond: {status: 200, body: new process}\n";
    std::fs::write(
        h3.dir().join("spate.yaml"),
        format!("{}\n{added}", yaml.trim_end()),
    )
    .unwrap();
    signal(&h3.s.child, libc::SIGUSR2);
    let new = Upgraded(new_pid(&h3.s));

    let fresh = clients.aioquic(&[&h3.url("/new")]);
    assert_eq!(fresh.exit, 0, "{fresh}");
    assert_eq!(fresh.field("response", "status"), "200", "{fresh}");
    assert_eq!(fresh.field("response", "len"), "11", "{fresh}");

    // Two processes at most: while the old one holds the download, the new one refuses to be
    // replaced (their connection IDs would share a tag bit).
    // SAFETY: kill(2) on the spate the test's upgrade started.
    unsafe { libc::kill(new.0, libc::SIGUSR2) };
    let refused = wait_line(&h3.s, "binary upgrade failed");
    assert!(refused.contains("still drains"), "{refused}");

    download.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let rest: Vec<String> = out.map(|l| l.unwrap()).collect();
    let status = download.wait().unwrap();
    let response = rest
        .iter()
        .find(|l| l.starts_with("response\t"))
        .unwrap_or_else(|| panic!("no response line: {rest:?}"));
    assert!(status.success(), "{rest:?}");
    assert!(!response.contains("error="), "{response}");
    assert!(response.contains("status=200"), "{response}");
    assert!(response.contains(&format!("len={BIG}")), "{response}");
    assert!(response.contains(&format!("sha256={want}")), "{response}");

    // Its last connection done, the old process exits (well before shutdown-timeout).
    let old = wait_timeout(&mut h3.s.child, Duration::from_secs(120)).expect("old spate exits");
    assert!(old.success(), "{old}");
    let mut after = Vec::new();
    // The new process sees the link end, and may be upgraded in turn: the next process takes
    // the first one's tag bit again and serves.
    let end = std::time::Instant::now() + Duration::from_secs(60);
    while !after
        .iter()
        .any(|l: &String| l.contains("no longer passed"))
    {
        assert!(std::time::Instant::now() < end, "{after:?}");
        after.extend(h3.s.stderr_lines());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !after.iter().any(|l| l.contains("shutdown-timeout reached")),
        "{after:?}"
    );
    // SAFETY: kill(2) on the spate the test's upgrade started.
    unsafe { libc::kill(new.0, libc::SIGUSR2) };
    let _third = Upgraded(new_pid(&h3.s));
    let again = clients.aioquic(&[&h3.url("/new")]);
    assert_eq!(again.field("response", "status"), "200", "{again}");
}

/// Waits for a log line naming `needle`, keeping none of the others.
fn wait_line(s: &Spate, needle: &str) -> String {
    let end = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(l) = s.stderr_lines().into_iter().find(|l| l.contains(needle)) {
            return l;
        }
        assert!(
            std::time::Instant::now() < end,
            "no log line naming {needle:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stateless resets keep their tokens across a reload that starts a new worker generation and
/// a binary upgrade: the key is the
/// process's (`src/server/quic/secret.rs`), handed to the new process. A packet for a
/// connection ID of the first process (process bit 0), nobody's, gets a reset from it before
/// the upgrade, and from the new process once the old one has exited: the same token, so a
/// client of a connection the old process had would recognise it and reconnect at once.
#[test]
fn stateless_resets_keep_their_token_across_a_new_generation_and_a_binary_upgrade() {
    let dir = tempfile::tempdir().unwrap();
    tls_support::cert(dir.path(), "a", "localhost", false);
    let conf = |threads: usize| {
        format!(
            "
num-threads: {threads}
hosts:
  localhost:
    listen:
      host: 127.0.0.1
      port: 0
      type: quic
      ssl:
        certificate-file: a.crt
        key-file: a.key
    paths:
      /:
        respond: {{status: 200, body: ok}}
"
        )
    };
    let mut s = Spate::start_in(&conf(2), dir);
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    // A short-header packet of 100 bytes for an 8-byte connection ID of tag 0x015a (process
    // bit 0: the first process's), which no endpoint holds.
    let cid = [0x01, 0x5a, 0x17, 0x99, 0x03, 0x42, 0x61, 0x7e];
    let mut packet = vec![0x40];
    packet.extend_from_slice(&cid);
    packet.resize(100, 0x33);
    // The token is the reset's last 16 bytes, derived from the connection ID.
    let reset = || -> Vec<u8> {
        // quinn sends at most one reset per 20 ms per endpoint: ask again until one comes.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut buf = [0u8; 2048];
        loop {
            assert!(std::time::Instant::now() < deadline, "no stateless reset");
            sock.send_to(&packet, s.addr).unwrap();
            if let Ok((len, _)) = sock.recv_from(&mut buf) {
                assert!((21..100).contains(&len), "{len}");
                return buf[len - 16..len].to_vec();
            }
        }
    };
    let before = reset();

    // Fewer threads: a new worker generation, with endpoints of its own.
    let yaml = std::fs::read_to_string(s.path().join("spate.yaml")).unwrap();
    // `port: 0` again is the same listener: its sockets are kept.
    std::fs::write(s.path().join("spate.yaml"), conf(1)).unwrap();
    assert!(yaml.contains("num-threads: 2"), "{yaml}");
    signal(&s.child, libc::SIGHUP);
    let lines = s.log_lines_naming("reloaded", 1);
    assert!(
        lines.len() == 1 && lines[0].contains("new worker generation"),
        "{lines:?}"
    );
    assert_eq!(reset(), before, "after a reload");

    signal(&s.child, libc::SIGUSR2);
    let _new = Upgraded(new_pid(&s));
    // With no connection to drain, the old process exits; the new one answers alone.
    let old = wait_timeout(&mut s.child, Duration::from_secs(60)).expect("old spate exits");
    assert!(old.success(), "{old}");
    assert_eq!(reset(), before, "after a binary upgrade");
}

/// The long-header packet types of a datagram's coalesced packets (RFC 9000 17.2: 0 Initial,
/// 1 0-RTT, 2 Handshake, 3 Retry), as far as they can be read.
fn long_header_types(mut d: &[u8]) -> Vec<u8> {
    fn varint(d: &[u8]) -> Option<(usize, usize)> {
        let first = *d.first()?;
        let len = 1usize << (first >> 6);
        let mut v = u64::from(first & 0x3f);
        for b in d.get(1..len)? {
            v = v << 8 | u64::from(*b);
        }
        Some((usize::try_from(v).ok()?, len))
    }
    let mut types = Vec::new();
    while let Some(&first) = d.first() {
        if first & 0x80 == 0 {
            break;
        }
        let kind = (first >> 4) & 3;
        types.push(kind);
        if kind == 3 {
            break;
        }
        let parsed = (|| {
            let mut at = 5;
            let dcid = usize::from(*d.get(at)?);
            at += 1 + dcid;
            let scid = usize::from(*d.get(at)?);
            at += 1 + scid;
            if kind == 0 {
                let (token, n) = varint(d.get(at..)?)?;
                at += n + token;
            }
            let (length, n) = varint(d.get(at..)?)?;
            Some(at + n + length)
        })();
        match parsed {
            Some(end) if end <= d.len() => d = &d[end..],
            _ => break,
        }
    }
    types
}

/// A Retry token issued by the old process is accepted by the new one: the Retry token key is
/// the process's and a binary upgrade hands it over. A client (quinn-proto's, driven by hand
/// over a UDP socket) gets a Retry from the first process; the upgrade happens and the first
/// process exits; the client's Initial with the token then gets the new process's handshake
/// (a Handshake packet), not a refusal (a new Retry: without the handed-over key, it was).
#[test]
fn a_retry_token_of_the_old_process_is_accepted_by_the_new_one() {
    let dir = tempfile::tempdir().unwrap();
    tls_support::cert(dir.path(), "a", "localhost", false);
    let mut s = Spate::start_in(
        "
num-threads: 1
hosts:
  localhost:
    listen:
      host: 127.0.0.1
      port: 0
      type: quic
      ssl:
        certificate-file: a.crt
        key-file: a.key
      quic: {retry: ON}
    paths:
      /:
        respond: {status: 200, body: ok}
",
        dir,
    );
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        // Only the server's first answer is looked at, never its certificate.
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let crypto = quinn_proto::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
    let mut endpoint = quinn_proto::Endpoint::new(
        std::sync::Arc::new(quinn_proto::EndpointConfig::default()),
        None,
        true,
        None,
    );
    let now = std::time::Instant::now();
    let (_, mut conn) = endpoint
        .connect(
            now,
            quinn_proto::ClientConfig::new(std::sync::Arc::new(crypto)),
            s.addr,
            "localhost",
        )
        .unwrap();
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut out = Vec::new();
    let t = conn.poll_transmit(now, 1, &mut out).expect("an Initial");
    let initial = out[..t.size].to_vec();
    let mut buf = [0u8; 4096];
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let retry = loop {
        assert!(std::time::Instant::now() < deadline, "no Retry");
        sock.send_to(&initial, s.addr).unwrap();
        if let Ok((len, _)) = sock.recv_from(&mut buf) {
            if long_header_types(&buf[..len]) == [3] {
                break buf[..len].to_vec();
            }
        }
    };

    signal(&s.child, libc::SIGUSR2);
    let _new = Upgraded(new_pid(&s));
    let old = wait_timeout(&mut s.child, Duration::from_secs(60)).expect("old spate exits");
    assert!(old.success(), "{old}");

    let now = std::time::Instant::now();
    let mut scratch = Vec::new();
    match endpoint.handle(
        now,
        s.addr,
        None,
        None,
        bytes::BytesMut::from(&retry[..]),
        &mut scratch,
    ) {
        Some(quinn_proto::DatagramEvent::ConnectionEvent(_, event)) => conn.handle_event(event),
        _ => panic!("the client did not take the Retry"),
    }
    out.clear();
    let t = conn
        .poll_transmit(now, 1, &mut out)
        .expect("an Initial with the token");
    let answered = out[..t.size].to_vec();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    sock.send_to(&answered, s.addr).unwrap();
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "no handshake: {seen:?}"
        );
        let Ok((len, _)) = sock.recv_from(&mut buf) else {
            // Lost on the way, either way: the client sends it again.
            sock.send_to(&answered, s.addr).unwrap();
            continue;
        };
        let types = long_header_types(&buf[..len]);
        if types.contains(&2) {
            break;
        }
        // A token quinn cannot open is answered with a new Retry (or a close).
        assert!(!types.contains(&3), "the token was refused: {types:?}");
        seen.push((len, types));
    }
}

/// Accepts any server certificate: the hand-driven client below checks what the server does
/// with its packets, not who the server is.
#[derive(Debug)]
struct AnyCert(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A QUIC client driven by hand (quinn-proto's) over one UDP socket, so a test decides when
/// each of its flights goes out.
struct HandClient {
    endpoint: quinn_proto::Endpoint,
    conn: quinn_proto::Connection,
    sock: std::net::UdpSocket,
    server: std::net::SocketAddr,
}

impl HandClient {
    fn connect(server: std::net::SocketAddr) -> HandClient {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyCert(provider)))
            .with_no_client_auth();
        tls.alpn_protocols = vec![b"h3".to_vec()];
        let crypto = quinn_proto::crypto::rustls::QuicClientConfig::try_from(tls).unwrap();
        let mut endpoint = quinn_proto::Endpoint::new(
            Arc::new(quinn_proto::EndpointConfig::default()),
            None,
            true,
            None,
        );
        let (_, conn) = endpoint
            .connect(
                Instant::now(),
                quinn_proto::ClientConfig::new(Arc::new(crypto)),
                server,
                "localhost",
            )
            .unwrap();
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        HandClient {
            endpoint,
            conn,
            sock,
            server,
        }
    }

    /// Sends what the connection has to send now.
    fn flush(&mut self) {
        let mut buf = Vec::new();
        loop {
            buf.clear();
            let Some(t) = self.conn.poll_transmit(Instant::now(), 1, &mut buf) else {
                return;
            };
            self.sock.send_to(&buf[..t.size], self.server).unwrap();
        }
    }

    /// Reads one datagram (waiting 50 ms at most) and hands it to the connection.
    fn receive(&mut self) -> bool {
        let mut buf = [0u8; 65536];
        let Ok((len, from)) = self.sock.recv_from(&mut buf) else {
            return false;
        };
        let mut scratch = Vec::new();
        let now = Instant::now();
        if let Some(quinn_proto::DatagramEvent::ConnectionEvent(_, ev)) = self.endpoint.handle(
            now,
            from,
            None,
            None,
            bytes::BytesMut::from(&buf[..len]),
            &mut scratch,
        ) {
            self.conn.handle_event(ev);
        }
        while let Some(ev) = self.conn.poll_endpoint_events() {
            let _ = self
                .endpoint
                .handle_event(quinn_proto::ConnectionHandle(0), ev);
        }
        true
    }
}

/// A GET of `path` as an HTTP/3 HEADERS frame, its fields in QPACK's static table (no
/// dynamic table, so no encoder stream is needed).
fn h3_get(path: &str) -> Vec<u8> {
    let mut block = vec![0x00, 0x00]; // Required Insert Count 0, Base 0
    block.extend_from_slice(&[0xd1, 0xd7]); // :method GET, :scheme https
                                            // :path, a literal value with the static name reference 1.
    block.push(0x51);
    block.push(u8::try_from(path.len()).unwrap());
    block.extend_from_slice(path.as_bytes());
    // :authority, the static name 0.
    block.push(0x50);
    block.push(9);
    block.extend_from_slice(b"localhost");
    let mut frame = vec![0x01, u8::try_from(block.len()).unwrap()];
    frame.extend_from_slice(&block);
    frame
}

/// A handshake caught by a binary upgrade: the client's first Initial reaches the old process,
/// which answers with its whole first flight; then the upgrade happens and the old process
/// drains (it stops reading the sockets), and only then does the client send its second
/// flight (an Initial acknowledging ours, its Handshake Finished, a GET in 1-RTT). The new
/// process reads it: the Initial is addressed to the old process's connection ID, not to one
/// the client chose (it does not open with that ID's Initial keys), so the datagram goes over
/// the upgrade's link like the rest; the old process completes the handshake (a handshake
/// under way is not cut by the drain) and answers the GET. The new process counts what it
/// passed on its metrics page.
#[test]
fn a_handshake_begun_before_a_binary_upgrade_completes_across_it() {
    let Some((h3, _new)) = handshake_across(|h3| {
        signal(&h3.s.child, libc::SIGUSR2);
        Some(Upgraded(new_pid(&h3.s)))
    }) else {
        return;
    };
    // The new process passed the client's datagrams to the old one.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, text) = curl_status(&[&h3.url("/metrics")]);
        let sent = text
            .lines()
            .find_map(|l| {
                l.strip_prefix("spate_quic_upgrade_forwarded_total{direction=\"sent\"} ")?
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or(0);
        if sent > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The same with a reload that starts a new worker generation (more threads): the draining
/// generation stops reading the sockets, the new one passes it the client's second flight.
#[test]
fn a_handshake_begun_before_a_reload_into_a_new_generation_completes_across_it() {
    handshake_across(|h3| {
        let yaml = std::fs::read_to_string(h3.dir().join("spate.yaml")).unwrap();
        assert!(yaml.contains("num-threads: 1\n"), "{yaml}");
        std::fs::write(
            h3.dir().join("spate.yaml"),
            yaml.replace("num-threads: 1\n", "num-threads: 2\n"),
        )
        .unwrap();
        signal(&h3.s.child, libc::SIGHUP);
        let lines = h3.s.log_lines_naming("reloaded", 1);
        assert!(
            lines.len() == 1 && lines[0].contains("new worker generation"),
            "{lines:?}"
        );
        None
    });
}

/// Starts a handshake with spate, lets `switch` hand its sockets over (returning what must
/// live until the end), then completes the handshake and a GET; returns the server and what
/// `switch` returned, or `None` under h2o.
fn handshake_across(
    switch: impl FnOnce(&h3_support::H3Server) -> Option<Upgraded>,
) -> Option<(h3_support::H3Server, Option<Upgraded>)> {
    let dir = tempfile::tempdir().unwrap();
    let site = "hosts:\n  default:\n    paths:\n      /metrics:\n        metrics: ON\n      /:\n        respond: {status: 200, body: old or new}\n";
    let h3 = h3_support::H3Server::start_with(
        dir,
        "  quic: {retry: OFF}\n",
        "num-threads: 1\nshutdown-timeout: 120\n",
        site,
    );
    if h3.is_h2o {
        return None;
    }
    let server = std::net::SocketAddr::from(([127, 0, 0, 1], h3.port));
    let mut client = HandClient::connect(server);
    client.flush();
    // The old process's first flight, up to its Finished: the client is then connected on
    // its side, and says nothing yet.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "no first flight from the server");
        client.receive();
        match client.conn.poll() {
            Some(quinn_proto::Event::Connected) => break,
            Some(quinn_proto::Event::ConnectionLost { reason }) => panic!("{reason}"),
            _ => {}
        }
    }
    let stream = client
        .conn
        .streams()
        .open(quinn_proto::Dir::Bi)
        .expect("a request stream");
    let get = h3_get("/");
    let mut send = client.conn.send_stream(stream);
    assert_eq!(send.write(&get).unwrap(), get.len());
    send.finish().unwrap();

    let new = switch(&h3);

    // The second flight goes out now, to the new process or generation.
    client.flush();
    let mut response = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        assert!(
            Instant::now() < deadline,
            "no answer across the upgrade: {response:?}"
        );
        client.receive();
        client.conn.handle_timeout(Instant::now());
        while let Some(ev) = client.conn.poll() {
            if let quinn_proto::Event::ConnectionLost { reason } = ev {
                panic!("connection lost: {reason} (got {response:?})");
            }
        }
        let mut recv = client.conn.recv_stream(stream);
        if let Ok(mut chunks) = recv.read(true) {
            let mut finished = false;
            loop {
                match chunks.next(usize::MAX) {
                    Ok(Some(c)) => response.extend_from_slice(&c.bytes),
                    Ok(None) => {
                        finished = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
            let _ = chunks.finalize();
            if finished {
                break response;
            }
        }
        client.flush();
    };
    // HEADERS (with :status 200 from the static table), then the body in one DATA frame.
    assert_eq!(done.first(), Some(&0x01), "{done:?}");
    assert!(done.ends_with(b"\x00\x0aold or new"), "{done:?}");
    let (at, headers_len) = match done[1] >> 6 {
        0 => (2, usize::from(done[1])),
        _ => (
            3,
            usize::from(u16::from_be_bytes([done[1] & 0x3f, done[2]])),
        ),
    };
    // After the field section prefix, the first field: :status 200 (static index 25).
    assert_eq!(done.get(at + 2), Some(&0xd9), "{done:?}");
    assert!(at + headers_len < done.len(), "{done:?}");

    Some((h3, new))
}
