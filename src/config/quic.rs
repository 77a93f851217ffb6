//! HTTP/3 over QUIC: the listen's `quic:` mapping and the global `http3-*` directives.
//!
//! h2o's names and defaults: `http3-idle-timeout` (30 s), `http3-input-window-size`
//! (16 MiB), `http3-graceful-shutdown-timeout` (0 = no limit of its own), `http3-gso` (ON),
//! `max-quic-connections`; in `quic:`, `retry` (OFF), `amp-limit` (3),
//! `max-streams-bidi` (100), `max-udp-payload-size` (1472), `ecn` (ON),
//! `max-initial-handshake-packets` (1000). spate's own: `retry: auto` (the default: Retry once
//! `retry-threshold` handshakes are under way, or `retry-rate` began in the last second),
//! `http3-qpack-max-table-capacity` and `http3-qpack-blocked-streams` (what the client's
//! QPACK encoder may use; the request field section is bounded by `max-request-field-section-size`),
//! `http3-max-streams-uni` (the peer's unidirectional streams), `http3-0rtt` (OFF),
//! `http3-0rtt-methods` (GET, HEAD, OPTIONS: answered before the handshake completes; the
//! others wait for it), `http3-alt-svc` (ON).

use super::value::Ctx;
use super::yaml::Node;
use std::time::Duration;

/// `listen.quic.retry`: when a new connection's address is validated with a Retry first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// `OFF`: never.
    Off,
    /// `ON`: always (h2o's `retry: ON`).
    On,
    /// `auto` (spate, the default): while `retry-threshold` handshakes or more are under way
    /// in the process (a flood of Initial packets from forged addresses keeps them there).
    Auto,
}

/// The listen's `quic:` mapping (also implied by `type: quic`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuicConf {
    /// `retry`: when to validate a client's address with a Retry packet first.
    pub retry: Retry,
    /// `retry-threshold` (spate, default 128): with `retry: auto`, the handshakes under way
    /// (connections not yet validated) past which new ones get a Retry.
    pub retry_threshold: u32,
    /// `retry-rate` (spate, default 1000, 0: none): with `retry: auto`, the handshakes begun
    /// in the current second past which new ones get a Retry.
    pub retry_rate: u32,
    /// `max-initial-handshake-packets` (h2o's, default 1000): a connection that has sent more
    /// packets than this before its handshake completed is dropped.
    pub max_initial_handshake_packets: u64,
    /// `amp-limit`: before the address is validated, send at most this many times what the
    /// client sent (RFC 9000 section 8.1).
    pub amp_limit: u32,
    /// `max-streams-bidi`: concurrent client request streams per connection.
    pub max_streams_bidi: u32,
    /// `max-udp-payload-size`: the largest UDP payload we accept and send.
    pub max_udp_payload_size: u16,
    /// `ecn`: use ECN signals for congestion control.
    pub ecn: bool,
}

impl Default for QuicConf {
    fn default() -> Self {
        QuicConf {
            retry: Retry::Auto,
            retry_threshold: 128,
            retry_rate: 1000,
            max_initial_handshake_packets: 1000,
            amp_limit: 3,
            max_streams_bidi: 100,
            max_udp_payload_size: 1472,
            ecn: true,
        }
    }
}

/// The largest `http3-data-frame-size`: what one stalled stream may pin stays bounded.
const MAX_DATA_FRAME_SIZE: u32 = 256 * 1024;

/// The global `http3-*` directives and `max-quic-connections`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Http3 {
    /// `http3-idle-timeout` (seconds, default 30).
    pub idle_timeout: Duration,
    /// `http3-input-window-size` (default 16777216): a request stream's receive window; the
    /// connection's is twice it.
    pub input_window_size: u32,
    /// `http3-graceful-shutdown-timeout` (seconds, default 0 = only `shutdown-timeout`).
    pub graceful_shutdown_timeout: Duration,
    /// `http3-gso` (default ON): send batches of packets with one segmentation-offload call.
    pub gso: bool,
    /// `http3-data-frame-size` (spate, default 16384): the largest DATA frame payload of a
    /// response body we have whole (a file, fixed bytes): what one read of a file not held in
    /// memory fills, and what a stream whose client stopped reading may hold beyond quinn's
    /// send window.
    pub data_frame_size: u32,
    /// `max-quic-connections` (default 1024): QUIC connections across all workers,
    /// handshakes included.
    pub max_connections: usize,
    /// `http3-qpack-max-table-capacity` (spate, default 4096): SETTINGS_QPACK_MAX_TABLE_CAPACITY.
    pub qpack_max_table_capacity: u32,
    /// `http3-qpack-blocked-streams` (spate, default 16): SETTINGS_QPACK_BLOCKED_STREAMS.
    pub qpack_blocked_streams: u32,
    /// `http3-max-streams-uni` (spate, default 10): unidirectional streams the client may
    /// open (control, QPACK and the ones we ignore).
    pub max_streams_uni: u32,
    /// `http3-0rtt` (spate, default OFF): accept early data (replayable requests).
    pub early_data: bool,
    /// `http3-0rtt-methods` (spate, default GET, HEAD, OPTIONS): the methods answered while
    /// the handshake is still under way (RFC 8470: requests that are safe to replay); a
    /// request of another method that came in early data waits for the handshake.
    pub early_data_methods: Vec<String>,
    /// `http3-alt-svc` (spate, default ON): HTTP/1.1 and HTTP/2 responses on a TLS port that
    /// also has a QUIC listener carry `Alt-Svc: h3=":PORT"`, as h2o sends.
    pub alt_svc: bool,
}

impl Default for Http3 {
    fn default() -> Self {
        Http3 {
            idle_timeout: Duration::from_secs(30),
            input_window_size: 16_777_216,
            graceful_shutdown_timeout: Duration::ZERO,
            gso: true,
            data_frame_size: 16384,
            max_connections: 1024,
            qpack_max_table_capacity: 4096,
            qpack_blocked_streams: 16,
            max_streams_uni: 10,
            early_data: false,
            early_data_methods: vec!["GET".into(), "HEAD".into(), "OPTIONS".into()],
            alt_svc: true,
        }
    }
}

/// Applies one global HTTP/3 directive. Returns false when `name` is not one of them.
pub(super) fn apply(ctx: &mut Ctx, name: &str, v: &Node, c: &mut Http3) -> bool {
    match name {
        "http3-idle-timeout" => set(&mut c.idle_timeout, ctx.seconds(name, v)),
        "http3-input-window-size" => {
            // QUIC flow control credit is a varint; below one packet's worth is useless.
            match ctx.int::<u32>(name, v, 1500) {
                Some(n) if n <= 0x7fff_ffff => c.input_window_size = n,
                Some(_) => ctx.error(v.line, format!("{name} must be at most 2147483647")),
                None => {}
            }
        }
        "http3-graceful-shutdown-timeout" => {
            set(&mut c.graceful_shutdown_timeout, ctx.seconds(name, v))
        }
        "http3-gso" => set(&mut c.gso, ctx.bool(name, v)),
        "http3-data-frame-size" => match ctx.int::<u32>(name, v, 1024) {
            Some(n) if n <= MAX_DATA_FRAME_SIZE => c.data_frame_size = n,
            Some(_) => ctx.error(
                v.line,
                format!("{name} must be at most {MAX_DATA_FRAME_SIZE}"),
            ),
            None => {}
        },
        "max-quic-connections" => set(&mut c.max_connections, ctx.int(name, v, 1)),
        "http3-qpack-max-table-capacity" => {
            set(&mut c.qpack_max_table_capacity, ctx.int(name, v, 0))
        }
        "http3-qpack-blocked-streams" => set(&mut c.qpack_blocked_streams, ctx.int(name, v, 0)),
        // Control and two QPACK streams at least.
        "http3-max-streams-uni" => set(&mut c.max_streams_uni, ctx.int(name, v, 3)),
        "http3-0rtt" => set(&mut c.early_data, ctx.bool(name, v)),
        "http3-0rtt-methods" => {
            if let Some(list) = ctx.strings(name, v) {
                match list.iter().find(|m| !is_token(m)) {
                    Some(bad) => ctx.error(v.line, format!("{name}: {bad:?} is not a method name")),
                    None => c.early_data_methods = list,
                }
            }
        }
        "http3-alt-svc" => set(&mut c.alt_svc, ctx.bool(name, v)),
        _ => return false,
    }
    true
}

/// h2o's `quic:` keys that spate does not implement.
const NOT_SUPPORTED_YET: &[&str] = &[
    "jumpstart-default",
    "jumpstart-max",
    "pacing",
    "qpack-decoder-table-capacity",
    "qpack-encoder-table-capacity",
    "qpack-encoder-refine",
    "respect-app-limited",
    "sndbuf",
    "rcvbuf",
];

const KEYS: &[&str] = &[
    "retry",
    "retry-threshold",
    "retry-rate",
    "max-initial-handshake-packets",
    "amp-limit",
    "max-streams-bidi",
    "max-udp-payload-size",
    "ecn",
];

/// Reads a listen's `quic:` mapping.
pub(super) fn parse(ctx: &mut Ctx, v: &Node) -> Option<QuicConf> {
    let entries = ctx.map("listen.quic", v)?;
    let before = ctx.errors.len();
    let mut relevant = Vec::with_capacity(entries.len());
    for (k, val) in entries {
        match k.as_str() {
            Some(key) if NOT_SUPPORTED_YET.contains(&key) => {
                ctx.error(k.line, format!("listen.quic.{key} is not supported yet"))
            }
            Some(key @ "handshake-timeout-rtt-multiplier") => {
                // h2o (quicly) gives up a handshake after this many round trips (400).
                if ctx
                    .int::<u32>(&format!("listen.quic.{key}"), val, 1)
                    .is_some()
                {
                    ctx.warn(
                        k.line,
                        format!(
                            "listen.quic.{key}: accepted and not used: a QUIC handshake ends with \
                             http3-idle-timeout (quinn's idle timer runs from the first packet), \
                             not after a number of round trips"
                        ),
                    );
                }
            }
            _ => relevant.push((k.clone(), val.clone())),
        }
    }
    let mut q = QuicConf::default();
    for (key, val) in ctx.known_keys("listen.quic", &relevant, KEYS) {
        let name = format!("listen.quic.{key}");
        match key {
            "retry" => match (val.as_str(), val.as_bool()) {
                (Some(s), _) if s.eq_ignore_ascii_case("auto") => q.retry = Retry::Auto,
                (_, Some(true)) => q.retry = Retry::On,
                (_, Some(false)) => q.retry = Retry::Off,
                _ => ctx.error(
                    val.line,
                    format!(
                        "{name} expects ON, OFF or auto, got {}",
                        super::value::show(val)
                    ),
                ),
            },
            "retry-threshold" => set(&mut q.retry_threshold, ctx.int(&name, val, 0)),
            "retry-rate" => set(&mut q.retry_rate, ctx.int(&name, val, 0)),
            // A handshake sends a few packets at least (Initial, Handshake, their repeats).
            "max-initial-handshake-packets" => {
                set(&mut q.max_initial_handshake_packets, ctx.int(&name, val, 2))
            }
            // quinn enforces the RFC's factor of 3; a lower one is met by validating first.
            "amp-limit" => match ctx.int::<u32>(&name, val, 1) {
                Some(n) if n <= 3 => q.amp_limit = n,
                Some(_) => ctx.error(val.line, format!("{name} must be at most 3")),
                None => {}
            },
            "max-streams-bidi" => set(&mut q.max_streams_bidi, ctx.int(&name, val, 1)),
            // RFC 9000 section 18.2: 1200 is the smallest allowed.
            "max-udp-payload-size" => match ctx.int::<u16>(&name, val, 1200) {
                Some(n) if n <= 65527 => q.max_udp_payload_size = n,
                Some(_) => ctx.error(val.line, format!("{name} must be at most 65527")),
                None => {}
            },
            _ => set(&mut q.ecn, ctx.bool(&name, val)),
        }
    }
    (ctx.errors.len() == before).then_some(q)
}

/// A method name as RFC 9110 allows it: a token.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::load::tests::{errors, ok, with_cert};
    use crate::config::ListenKind;

    #[test]
    fn quic_listen_forms_and_globals() {
        let c = ok(&with_cert(
            "\
http3-idle-timeout: 5
http3-gso: OFF
http3-data-frame-size: 65536
max-quic-connections: 7
listen: &l
  port: 8443
  ssl: {certificate-file: $CRT, key-file: $KEY}
listen:
  <<: *l
  type: quic
listen:
  port: 9443
  ssl: {certificate-file: $CRT, key-file: $KEY}
  quic: {retry: ON, amp-limit: 2, max-streams-bidi: 10, max-udp-payload-size: 1350}
hosts:
  default:
    paths:
      /:
        respond: {}
",
        ));
        let kinds: Vec<(u16, &ListenKind)> = c
            .listeners
            .iter()
            .map(|l| (l.addr.port(), &l.kind))
            .collect();
        assert_eq!(
            kinds,
            [
                (8443, &ListenKind::Tcp),
                (8443, &ListenKind::Quic),
                (9443, &ListenKind::Quic)
            ]
        );
        assert_eq!(c.listeners[0].quic, None);
        assert_eq!(c.listeners[1].quic, Some(QuicConf::default()));
        assert_eq!(
            c.listeners[2].quic,
            Some(QuicConf {
                retry: Retry::On,
                retry_threshold: 128,
                retry_rate: 1000,
                max_initial_handshake_packets: 1000,
                amp_limit: 2,
                max_streams_bidi: 10,
                max_udp_payload_size: 1350,
                ecn: true,
            })
        );
        assert_eq!(c.http3.idle_timeout, Duration::from_secs(5));
        assert!(!c.http3.gso);
        assert_eq!(c.http3.data_frame_size, 65536);
        assert_eq!(c.http3.max_connections, 7);
        assert_eq!(c.http3.input_window_size, 16_777_216);
    }

    #[test]
    fn bad_quic_keys_are_errors_with_their_line() {
        let e = errors(&with_cert(
            "\
listen:
  port: 8443
  ssl: {certificate-file: $CRT, key-file: $KEY}
  quic:
    retyr: ON
    pacing: ON
    amp-limit: 4
    max-udp-payload-size: 1000
    max-initial-handshake-packets: 1
http3-input-window-size: 10
http3-data-frame-size: 1000000
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
                "t.yaml:6: listen.quic.pacing is not supported yet",
                "t.yaml:5: unknown key retyr in listen.quic (did you mean retry?)",
                "t.yaml:7: listen.quic.amp-limit must be at most 3",
                "t.yaml:8: listen.quic.max-udp-payload-size expects an integer >= 1200, got \"1000\"",
                "t.yaml:9: listen.quic.max-initial-handshake-packets expects an integer >= 2, got \"1\"",
                "t.yaml:10: http3-input-window-size expects an integer >= 1500, got \"10\"",
                "t.yaml:11: http3-data-frame-size must be at most 262144",
            ]
        );
    }

    #[test]
    fn retry_auto_with_its_threshold_and_the_early_data_methods() {
        let c = ok(&with_cert(
            "\
http3-0rtt: ON
http3-0rtt-methods: [GET, PROPFIND]
listen:
  port: 8443
  ssl: {certificate-file: $CRT, key-file: $KEY}
  quic: {retry: auto, retry-threshold: 10, retry-rate: 50, max-initial-handshake-packets: 20}
listen:
  port: 9443
  ssl: {certificate-file: $CRT, key-file: $KEY}
  quic: {retry: OFF}
hosts:
  default:
    paths:
      /:
        respond: {}
",
        ));
        let q = c.listeners[0].quic.as_ref().expect("quic");
        assert_eq!((q.retry, q.retry_threshold), (Retry::Auto, 10));
        assert_eq!((q.retry_rate, q.max_initial_handshake_packets), (50, 20));
        assert_eq!(
            c.listeners[1].quic.as_ref().map(|q| q.retry),
            Some(Retry::Off)
        );
        assert!(c.http3.early_data);
        assert_eq!(c.http3.early_data_methods, ["GET", "PROPFIND"]);
        assert_eq!(QuicConf::default().retry, Retry::Auto);
        let e = errors(&with_cert(
            "\
http3-0rtt-methods: [GET, 'BAD METHOD']
listen:
  port: 8443
  ssl: {certificate-file: $CRT, key-file: $KEY}
  quic: {retry: sometimes}
hosts:
  default:
    paths:
      /:
        respond: {}
",
        ));
        assert_eq!(e.len(), 2, "{e:?}");
        assert!(
            e[0].starts_with("t.yaml:1: http3-0rtt-methods: \"BAD METHOD\""),
            "{e:?}"
        );
        assert_eq!(
            e[1],
            "t.yaml:5: listen.quic.retry expects ON, OFF or auto, got \"sometimes\""
        );
    }

    #[test]
    fn handshake_timeout_rtt_multiplier_is_accepted_with_a_warning() {
        let c = ok(&with_cert(
            "\
listen:
  port: 8443
  ssl: {certificate-file: $CRT, key-file: $KEY}
  quic:
    handshake-timeout-rtt-multiplier: 400
hosts:
  default:
    paths:
      /:
        respond: {}
",
        ));
        assert_eq!(c.listeners[0].quic, Some(QuicConf::default()));
        let w: Vec<String> = c.warnings.iter().map(|w| w.to_string()).collect();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains(
                ":5: listen.quic.handshake-timeout-rtt-multiplier: accepted and not used"
            ),
            "{w:?}"
        );
    }
}
