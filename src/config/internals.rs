//! h2o directives that only tune how h2o itself works (its threads, pipes, io_uring, key
//! process, kernel TLS): an h2o configuration that sets them runs on spate unchanged, and
//! `spate -t` (and a start) warns once for each, saying what spate does instead. Set to OFF,
//! which asks for what spate does anyway, they pass without a word.

use super::directives::{G, H, P};
use super::value::Ctx;
use super::yaml::Node;

/// Name, the levels where h2o takes it, and what spate does instead.
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
        "proxy.http3.ecn",
        G | H | P,
        "spate does not speak HTTP/3 to backends",
    ),
];

/// The levels where `name` may be written, when it is one of [`TUNING`].
pub(super) fn levels(name: &str) -> Option<u8> {
    TUNING
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, levels, _)| *levels)
}

/// Accepts one of [`TUNING`] with a warning (none for OFF). Returns false when `name` is not
/// one of them.
pub(super) fn apply(ctx: &mut Ctx, name: &str, v: &Node) -> bool {
    let Some((_, _, instead)) = TUNING.iter().find(|(n, _, _)| *n == name) else {
        return false;
    };
    if v.as_bool() != Some(false) {
        ctx.warn(
            v.line,
            format!("{name} tunes h2o's internals and is ignored: {instead}"),
        );
    }
    true
}
