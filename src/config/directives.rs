//! The directive table: every name spate knows, the levels where it may be written, and the
//! h2o directives that are recognised but not supported yet.

use super::value::{suggest, Ctx};
use super::yaml::Node;

/// The scope a mapping's directives are read in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Level {
    Global,
    Host,
    Path,
}

impl Level {
    fn bit(self) -> u8 {
        match self {
            Level::Global => G,
            Level::Host => H,
            Level::Path => P,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Level::Global => "global",
            Level::Host => "host",
            Level::Path => "path",
        }
    }
}

/// Reads the key of one directive entry. Returns its name when the directive exists and may be
/// used at `level`; otherwise records the error (unknown with a hint, misplaced, or not
/// supported yet) and returns `None`.
pub(super) fn check<'a>(ctx: &mut Ctx, key: &'a Node, level: Level) -> Option<&'a str> {
    let Some(name) = key.as_str() else {
        ctx.error(key.line, "a directive name must be a string");
        return None;
    };
    let levels = DIRECTIVES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, levels)| *levels)
        .or_else(|| levels_of_tuning(name));
    if let Some(levels) = levels {
        if levels & level.bit() == 0 {
            ctx.error(
                key.line,
                format!(
                    "directive {name} cannot be used at the {} level",
                    level.name()
                ),
            );
            return None;
        }
        return Some(name);
    }
    if is_not_supported_yet(name) {
        ctx.error(key.line, format!("{name} is not supported yet"));
        return None;
    }
    let known = DIRECTIVES
        .iter()
        .map(|(n, _)| *n)
        .chain(NOT_SUPPORTED_YET.iter().copied())
        .chain(TUNING.iter().map(|(n, _, _)| *n));
    let hint = suggest(name, known)
        .map(|s| format!(" (did you mean {s}?)"))
        .unwrap_or_default();
    ctx.error(key.line, format!("unknown directive {name}{hint}"));
    None
}

const G: u8 = 1;
const H: u8 = 2;
const P: u8 = 4;
const ALL: u8 = G | H | P;

/// Supported directives and where they may appear.
const DIRECTIVES: &[(&str, u8)] = &[
    // Structure.
    ("hosts", G),
    ("paths", H),
    ("strict-match", H),
    ("listen", G | H),
    // Server-wide settings.
    ("num-threads", G),
    ("max-connections", G),
    ("server-name", G),
    ("send-server-name", G),
    ("error-log", G),
    ("error-log.emit-request-errors", ALL),
    ("pid-file", G),
    ("tcp-fastopen", G),
    ("file.memory-cache-size", G),
    ("file.memory-cache-max-file-size", G),
    ("user", G),
    ("num-name-resolution-threads", G),
    ("temp-buffer-path", G),
    ("limit-request-body", G),
    ("shutdown-timeout", G),
    ("send-timeout", G),
    // TLS.
    ("handshake-timeout", G),
    ("ssl-session-resumption", G),
    ("neverbleed", G),
    ("acme", G),
    // HTTP/1.
    ("http1-request-timeout", G),
    ("http1-request-io-timeout", G),
    ("http1-keepalive-timeout", G),
    ("http1-idle-park-delay", G),
    ("http1-lane", G),
    ("http1-upgrade-to-http2", G),
    ("max-request-head-size", G),
    ("max-request-field-section-size", G),
    ("max-request-target-size", G),
    ("max-request-headers", G),
    ("max-pipelined-requests", G),
    // HTTP/2.
    ("http2-max-concurrent-requests-per-connection", G),
    ("http2-max-streams", G),
    ("http2-input-window-size", G),
    ("http2-idle-timeout", G),
    ("http2-graceful-shutdown-timeout", G),
    ("http2-header-timeout", G),
    ("http2-max-resets-per-second", G),
    ("http2-max-control-frames-per-second", G),
    ("http2-max-write-size", G),
    // HTTP/3 (config/quic.rs).
    ("http3-idle-timeout", G),
    ("http3-input-window-size", G),
    ("http3-graceful-shutdown-timeout", G),
    ("http3-gso", G),
    ("http3-data-frame-size", G),
    ("max-quic-connections", G),
    ("http3-qpack-max-table-capacity", G),
    ("http3-qpack-blocked-streams", G),
    ("http3-max-streams-uni", G),
    ("http3-0rtt", G),
    ("http3-0rtt-methods", G),
    ("http3-alt-svc", G),
    // Handlers.
    ("file.dir", P),
    ("file.file", P),
    ("respond", P),
    ("redirect", P),
    ("proxy.reverse.url", P),
    ("proxy.connect", P),
    ("status", P),
    ("metrics", P),
    ("readiness", P),
    // Inherited options.
    ("file.index", ALL),
    ("file.mime.addtypes", ALL),
    ("file.mime.settypes", ALL),
    ("file.mime.removetypes", ALL),
    ("file.mime.setdefaulttype", ALL),
    ("file.send-gzip", ALL),
    ("file.etag", ALL),
    ("file.dirlisting", ALL),
    ("file.send-compressed", ALL),
    ("file.custom-handler", ALL),
    ("server-timing", ALL),
    ("reproxy", ALL),
    ("throttle-response", ALL),
    ("max-delegations", ALL),
    // FastCGI (config/fastcgi.rs).
    ("fastcgi.connect", P),
    ("fastcgi.spawn", P),
    ("fastcgi.timeout.io", ALL),
    ("fastcgi.timeout.keepalive", ALL),
    ("fastcgi.max-connections", ALL),
    ("fastcgi.document_root", ALL),
    ("fastcgi.send-delegated-uri", ALL),
    ("fastcgi.max-request-buffer", ALL),
    ("fastcgi.max-response-head-size", ALL),
    ("header.add", ALL),
    ("header.append", ALL),
    ("header.merge", ALL),
    ("header.set", ALL),
    ("header.setifempty", ALL),
    ("header.unset", ALL),
    ("header.unsetunless", ALL),
    ("access-log", ALL),
    ("expires", ALL),
    // h2o's HTTP/2 push and reprioritisation, which spate does not do: OFF only.
    ("http2-push-preload", ALL),
    ("http2-allow-cross-origin-push", ALL),
    ("http2-casper", G | H),
    ("http2-reprioritize-blocking-assets", G | H),
    ("send-informational", G),
    // h2o's place for YAML anchors: it does nothing itself.
    ("stash", ALL),
    ("error-doc", ALL),
    ("compress", ALL),
    ("compress-minimum-size", ALL),
    ("gzip", ALL),
    // The edge (config/edge.rs): spate's names, h2o does these with mruby.
    ("access", ALL),
    ("basic-auth", ALL),
    ("auth-request", ALL),
    ("limit-req-zones", G),
    ("limit-req", ALL),
    ("limit-conn-zones", G),
    ("limit-conn", ALL),
    ("real-ip.from", ALL),
    ("real-ip.header", ALL),
    ("real-ip.recursive", ALL),
    // Reverse proxy options. h2o takes the emit-*, preserve-x-forwarded-proto and expect
    // switches at the global level only; spate takes them at every level.
    ("proxy.preserve-host", ALL),
    ("proxy.emit-x-forwarded-headers", ALL),
    ("proxy.emit-via-header", ALL),
    ("proxy.emit-missing-date-header", ALL),
    ("proxy.preserve-x-forwarded-proto", ALL),
    ("proxy.header.add", ALL),
    ("proxy.header.append", ALL),
    ("proxy.header.merge", ALL),
    ("proxy.header.set", ALL),
    ("proxy.header.setifempty", ALL),
    ("proxy.header.unset", ALL),
    ("proxy.header.unsetunless", ALL),
    ("proxy.header.cookie.unset", ALL),
    ("proxy.header.cookie.unsetunless", ALL),
    ("proxy.timeout.connect", ALL),
    ("proxy.timeout.first_byte", ALL),
    ("proxy.timeout.io", ALL),
    ("proxy.timeout.keepalive", ALL),
    ("proxy.keepalive", ALL),
    ("proxy.max-buffer-size", ALL),
    ("proxy.expect", ALL),
    ("proxy.tunnel", ALL),
    ("proxy.websocket", ALL),
    ("proxy.websocket.timeout", ALL),
    ("proxy.forward.close-connection", ALL),
    ("proxy.max-idle-connections", ALL),
    ("proxy.max-connections", ALL),
    ("proxy.queue.max", ALL),
    ("proxy.queue.timeout", ALL),
    ("proxy.max-response-head-size", ALL),
    ("proxy.max-response-headers", ALL),
    ("proxy.max-informational-responses", ALL),
    ("proxy.proxy-protocol", ALL),
    ("proxy.max-fails", ALL),
    ("proxy.fail-timeout", ALL),
    ("proxy.health-check", ALL),
    ("proxy.ssl.verify-peer", ALL),
    ("proxy.ssl.cafile", ALL),
    ("proxy.ssl.session-cache", ALL),
    ("proxy.http2.ratio", ALL),
    ("proxy.http2.max-concurrent-streams", ALL),
    // h2o registers this spelling too.
    ("proxy.http2.max-concurrent_streams", ALL),
    ("proxy.http2.force-cleartext", ALL),
    ("proxy.cache", ALL),
    ("proxy.connect.emit-proxy-status", ALL),
    ("proxy.connect.proxy-status", ALL),
    ("proxy.proxy-status.identity", G),
    ("proxy-status.identity", G),
];

/// h2o directives that only tune h2o itself (`internals.rs` accepts them with a warning): name,
/// the levels where h2o takes them, and what spate does instead.
pub(super) const TUNING: &[(&str, u8, &str)] = &[
    (
        "proxy.zerocopy",
        G,
        "spate's proxy passes bodies through its own buffers, without splice pipes",
    ),
    (
        "max-spare-pipes",
        G,
        "spate keeps no pipes: it does not splice",
    ),
    (
        "proxy.max-spare-pipes",
        G | H | P,
        "spate keeps no pipes: it does not splice",
    ),
    (
        "ssl-offload",
        G,
        "spate encrypts TLS in user space with rustls; it does not hand connections to kernel TLS (the tls ULP)",
    ),
    (
        "neverbleed-offload",
        G,
        "spate's private keys stay in the server process (rustls, no neverbleed): there is nothing to offload",
    ),
    (
        "file.io_uring",
        G | H | P,
        "spate reads files with sendfile and pread on its workers, not io_uring",
    ),
    (
        "io_uring-batch-size",
        G,
        "spate does not use io_uring",
    ),
    (
        "num-quic-threads",
        G,
        "HTTP/3 runs on the num-threads workers",
    ),
    (
        "num-ocsp-updaters",
        G,
        "spate does not fetch OCSP responses (ocsp-response-file staples one)",
    ),
    (
        "http2-latency-optimization-min-rtt",
        G,
        "spate sizes HTTP/2 writes by http2-max-write-size, not by the TCP window",
    ),
    (
        "http2-latency-optimization-max-additional-delay",
        G,
        "spate sizes HTTP/2 writes by http2-max-write-size, not by the TCP window",
    ),
    (
        "http2-latency-optimization-max-cwnd",
        G,
        "spate sizes HTTP/2 writes by http2-max-write-size, not by the TCP window",
    ),
    (
        "http2-dos-delay",
        G,
        "spate closes an abusive HTTP/2 connection at once (http2-max-resets-per-second, http2-max-control-frames-per-second)",
    ),
    (
        "tcp-reuseport",
        G,
        "spate's workers share each listening socket",
    ),
    (
        "temp-buffer-threshold",
        G,
        "spate streams request bodies and writes no temporary files",
    ),
    (
        "capabilities",
        G,
        "spate keeps no capabilities once it switches to user",
    ),
    (
        "crash-handler",
        G,
        "spate runs no crash handler; a panic's message goes to the error log",
    ),
    (
        "crash-handler.wait-pipe-close",
        G,
        "spate runs no crash handler",
    ),
    (
        "soft-connection-limit",
        G,
        "spate closes idle connections by their timeouts and refuses new ones at max-connections",
    ),
    (
        "soft-connection-limit.min-age",
        G,
        "spate closes idle connections by their timeouts and refuses new ones at max-connections",
    ),
    (
        "duration-stats",
        G,
        "spate's status and metrics handlers report their own counters",
    ),
    (
        "h2olog",
        H,
        "h2o's tracer; spate logs through RUST_LOG and error-log",
    ),
    (
        "http2-debug-state",
        H,
        "spate has no HTTP/2 state dump",
    ),
    (
        "proxy.happy-eyeballs.connection-attempt-delay",
        G | H | P,
        "spate connects to a backend's addresses one after another",
    ),
    (
        "proxy.happy-eyeballs.name-resolution-delay",
        G | H | P,
        "spate connects to a backend's addresses one after another",
    ),
    (
        "quic-nodes",
        G,
        "spate does not forward QUIC packets between the nodes of a cluster",
    ),
    (
        "http2-max-concurrent-streaming-requests-per-connection",
        G,
        "request bodies of an HTTP/2 connection all stream at once, within http2-max-concurrent-requests-per-connection",
    ),
    (
        "http3-max-concurrent-streaming-requests-per-connection",
        G,
        "request bodies of an HTTP/3 connection all stream at once, within its stream limit",
    ),
    (
        "proxy.http3.ratio",
        G | H | P,
        "spate does not speak HTTP/3 to backends: requests go over HTTP/1.1, or HTTP/2 by proxy.http2.ratio",
    ),
    (
        "proxy.connect.masque-draft-03",
        G | H | P,
        "spate has no CONNECT-UDP; proxy.connect tunnels TCP only",
    ),
    (
        "proxy.http3.ecn",
        G | H | P,
        "spate does not speak HTTP/3 to backends",
    ),
];

/// The levels where `name` may be written, when it is one of [`TUNING`].
fn levels_of_tuning(name: &str) -> Option<u8> {
    TUNING
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, levels, _)| *levels)
}

/// h2o directives that later work will implement; today they are an error naming them.
const NOT_SUPPORTED_YET: &[&str] = &[
    "setenv",
    "unsetenv",
    "mruby.handler",
    "mruby.handler-file",
    // h2o's proxy directives spate does not have yet. Named one by one (not `proxy.*`), so a
    // misspelt supported one gets a hint rather than "not supported yet".
    "proxy.connect-udp",
];

/// Checks a directive of h2o's that asks for something spate never does (HTTP/2 server push,
/// reprioritising CSS and JavaScript): OFF, what spate does anyway, is accepted; anything else
/// is an error saying why. Also reads `send-informational` (global only, by the table), which
/// every proxy below takes. Returns false when `name` is not one of them.
pub(super) fn off_only(ctx: &mut Ctx, name: &str, v: &Node) -> bool {
    if name == "send-informational" {
        // h2o's values; the mode is copied into every proxy's settings.
        match v.as_str() {
            Some("except-h1") => ctx.send_informational = super::SendInformational::ExceptH1,
            Some("none") => ctx.send_informational = super::SendInformational::None,
            Some("all") => ctx.send_informational = super::SendInformational::All,
            _ => ctx.error(
                v.line,
                format!(
                    "send-informational expects except-h1, none or all, got {}",
                    super::value::show(v)
                ),
            ),
        }
        return true;
    }
    let why = match name {
        "http2-push-preload" | "http2-allow-cross-origin-push" | "http2-casper" => {
            "spate does not push (browsers have dropped HTTP/2 server push)"
        }
        "http2-reprioritize-blocking-assets" => {
            "spate follows the client's priorities (RFC 9218 urgency)"
        }
        _ => return false,
    };
    if ctx.bool(name, v) == Some(true) {
        ctx.error(v.line, format!("{name}: only OFF is supported: {why}"));
    }
    true
}

/// The names above, and every `proxy.ssl.*`, `proxy.http2.*`, `proxy.http3.*` and `mruby.*`
/// directive, are h2o's and not supported yet.
fn is_not_supported_yet(name: &str) -> bool {
    NOT_SUPPORTED_YET.contains(&name)
        || name.starts_with("proxy.ssl.")
        || name.starts_with("proxy.http2.")
        || name.starts_with("proxy.http3.")
        || name.starts_with("mruby.")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::yaml::{NodeKind, Scalar};

    fn key(name: &str) -> Node {
        Node {
            line: 7,
            kind: NodeKind::Scalar(Scalar {
                value: name.into(),
                quoted: false,
            }),
        }
    }

    fn run(name: &str, level: Level) -> (Option<String>, Vec<String>) {
        let mut ctx = Ctx::new("t.yaml");
        let k = key(name);
        let r = check(&mut ctx, &k, level).map(str::to_owned);
        (r, ctx.errors.iter().map(|e| e.to_string()).collect())
    }

    #[test]
    fn known_directive_at_its_level() {
        assert_eq!(run("file.dir", Level::Path).0.as_deref(), Some("file.dir"));
        assert_eq!(run("listen", Level::Host).0.as_deref(), Some("listen"));
    }

    #[test]
    fn misplaced_directive() {
        let (r, e) = run("num-threads", Level::Host);
        assert_eq!(r, None);
        assert_eq!(
            e,
            vec!["t.yaml:7: directive num-threads cannot be used at the host level"]
        );
        let (_, e) = run("file.dir", Level::Global);
        assert!(e[0].contains("cannot be used at the global level"));
    }

    #[test]
    fn unknown_directive_with_hint() {
        let (_, e) = run("file.dri", Level::Path);
        assert_eq!(
            e,
            vec!["t.yaml:7: unknown directive file.dri (did you mean file.dir?)"]
        );
        let (_, e) = run("frobnicate", Level::Path);
        assert_eq!(e, vec!["t.yaml:7: unknown directive frobnicate"]);
    }

    #[test]
    fn directives_that_tune_h2o_internals_are_known_at_h2o_levels() {
        assert_eq!(
            run("proxy.zerocopy", Level::Global).0.as_deref(),
            Some("proxy.zerocopy")
        );
        assert_eq!(
            run("file.io_uring", Level::Path).0.as_deref(),
            Some("file.io_uring")
        );
        let (_, e) = run("ssl-offload", Level::Path);
        assert_eq!(
            e,
            vec!["t.yaml:7: directive ssl-offload cannot be used at the path level"]
        );
        let (_, e) = run("io_uring-batch-siz", Level::Global);
        assert_eq!(
            e,
            vec!["t.yaml:7: unknown directive io_uring-batch-siz (did you mean io_uring-batch-size?)"]
        );
    }

    #[test]
    fn not_supported_yet() {
        for name in [
            "proxy.ssl.anything",
            "proxy.http2.anything",
            "proxy.connect-udp",
        ] {
            let (r, e) = run(name, Level::Path);
            assert_eq!(r, None);
            assert_eq!(e, vec![format!("t.yaml:7: {name} is not supported yet")]);
        }
    }

    #[test]
    fn proxy_directives_and_their_levels() {
        assert_eq!(
            run("proxy.reverse.url", Level::Path).0.as_deref(),
            Some("proxy.reverse.url")
        );
        let (_, e) = run("proxy.reverse.url", Level::Host);
        assert_eq!(
            e,
            vec!["t.yaml:7: directive proxy.reverse.url cannot be used at the host level"]
        );
        for level in [Level::Global, Level::Host, Level::Path] {
            for name in [
                "proxy.keepalive",
                "proxy.timeout.io",
                "proxy.header.unsetunless",
                "proxy.ssl.verify-peer",
                "proxy.http2.ratio",
            ] {
                assert_eq!(run(name, level).0.as_deref(), Some(name), "{name}");
            }
        }
        // A misspelt proxy directive is unknown, with a hint, not "not supported yet".
        let (_, e) = run("proxy.timeout.ioo", Level::Path);
        assert_eq!(
            e,
            vec!["t.yaml:7: unknown directive proxy.timeout.ioo (did you mean proxy.timeout.io?)"]
        );
        let (_, e) = run("proxy.tunel", Level::Path);
        assert_eq!(
            e,
            vec!["t.yaml:7: unknown directive proxy.tunel (did you mean proxy.tunnel?)"]
        );
    }
}
