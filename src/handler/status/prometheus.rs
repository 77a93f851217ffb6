//! The Prometheus text exposition format (version 0.0.4) of the server's counters: the
//! label names of `metrics`' indices, HTTP/2 error codes by name and backend health.

use crate::fleet;
use crate::metrics::Snapshot;
use crate::proto::h2::frame::Reason;
use crate::upstream;
use std::fmt::Write as _;

/// Labels of `metrics::Proto`, by its values.
const PROTOS: [&str; 3] = ["http/1.1", "h2", "h3"];
/// Labels of `metrics::Transport`, by its values.
const TRANSPORTS: [&str; 3] = ["tcp", "tls", "quic"];
/// Labels of `metrics::Handshake`, by its values.
const HANDSHAKES: [&str; 3] = ["full", "resumed", "failed"];
/// Labels of `metrics::Direction`, by its values.
const DIRECTIONS: [&str; 2] = ["sent", "received"];

/// `metrics::BUCKETS_US` in seconds: the histogram's `le` labels; +Inf is implied.
const BUCKETS: [f64; 10] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 2.5,
];

/// `spate_fleet_store_*`: the memcached and Redis a fleet shares (ticket keys, session cache,
/// limit counters), each store once it has been used.
fn fleet_stores(o: &mut String) {
    let used: Vec<(&str, fleet::Stats)> = fleet::Store::ALL
        .iter()
        .map(|s| (s.name(), fleet::stats(*s)))
        .filter(|(_, st)| st.up.is_some())
        .collect();
    if used.is_empty() {
        return;
    }
    let _ = writeln!(
        o,
        "# HELP spate_fleet_store_operations_total Operations on a shared store, by kind (reads, writes)."
    );
    let _ = writeln!(o, "# TYPE spate_fleet_store_operations_total counter");
    for (name, st) in &used {
        for (op, n) in [("get", st.gets), ("set", st.sets)] {
            let _ = writeln!(
                o,
                "spate_fleet_store_operations_total{{store=\"{name}\",op=\"{op}\"}} {n}"
            );
        }
    }
    let _ = writeln!(
        o,
        "# HELP spate_fleet_store_errors_total Operations on a shared store that failed (down, slow, garbage)."
    );
    let _ = writeln!(o, "# TYPE spate_fleet_store_errors_total counter");
    for (name, st) in &used {
        let _ = writeln!(
            o,
            "spate_fleet_store_errors_total{{store=\"{name}\"}} {}",
            st.errors
        );
    }
    let _ = writeln!(
        o,
        "# HELP spate_fleet_store_seconds_total Time spent in operations on a shared store."
    );
    let _ = writeln!(o, "# TYPE spate_fleet_store_seconds_total counter");
    for (name, st) in &used {
        let _ = writeln!(
            o,
            "spate_fleet_store_seconds_total{{store=\"{name}\"}} {}",
            st.micros as f64 / 1e6
        );
    }
    let _ = writeln!(
        o,
        "# HELP spate_fleet_store_up Whether the last operation on a shared store succeeded."
    );
    let _ = writeln!(o, "# TYPE spate_fleet_store_up gauge");
    for (name, st) in &used {
        let _ = writeln!(
            o,
            "spate_fleet_store_up{{store=\"{name}\"}} {}",
            u8::from(st.up == Some(true))
        );
    }
}

/// The Prometheus text exposition format (version 0.0.4).
pub fn render(s: &Snapshot) -> String {
    let mut o = String::with_capacity(4096);
    let _ = writeln!(
        o,
        "# HELP spate_requests_total Requests answered, by protocol and status class."
    );
    let _ = writeln!(o, "# TYPE spate_requests_total counter");
    for (p, classes) in s.requests.iter().enumerate() {
        for (c, n) in classes.iter().enumerate() {
            let _ = writeln!(
                o,
                "spate_requests_total{{protocol=\"{}\",status=\"{}xx\"}} {n}",
                PROTOS[p],
                c + 1
            );
        }
    }
    counter(
        &mut o,
        "spate_received_bytes_total",
        "Request bytes received (HTTP/1.1: heads and bodies as framed; HTTP/2: every frame read).",
        s.bytes_in,
    );
    counter(
        &mut o,
        "spate_sent_bytes_total",
        "Response bytes sent, heads included.",
        s.bytes_out,
    );
    counter(
        &mut o,
        "spate_connection_panics_total",
        "Connections closed because their handling panicked (a bug: see the error log).",
        s.panics,
    );
    let _ = writeln!(
        o,
        "# HELP spate_connections Open connections, by transport."
    );
    let _ = writeln!(o, "# TYPE spate_connections gauge");
    for (t, n) in s.open.iter().enumerate() {
        let _ = writeln!(
            o,
            "spate_connections{{transport=\"{}\"}} {n}",
            TRANSPORTS[t]
        );
    }
    let _ = writeln!(
        o,
        "# HELP spate_connections_accepted_total Connections accepted, by transport."
    );
    let _ = writeln!(o, "# TYPE spate_connections_accepted_total counter");
    for (t, n) in s.accepted.iter().enumerate() {
        let _ = writeln!(
            o,
            "spate_connections_accepted_total{{transport=\"{}\"}} {n}",
            TRANSPORTS[t]
        );
    }
    let _ = writeln!(
        o,
        "# HELP spate_connections_by_protocol Open connections, by protocol (once known: after TLS and ALPN)."
    );
    let _ = writeln!(o, "# TYPE spate_connections_by_protocol gauge");
    for (p, n) in s.open_proto.iter().enumerate() {
        let _ = writeln!(
            o,
            "spate_connections_by_protocol{{protocol=\"{}\"}} {n}",
            PROTOS[p]
        );
    }
    let _ = writeln!(
        o,
        "# HELP spate_proxy_tunnels_total Proxy tunnels (WebSocket and other upgrades) opened."
    );
    let _ = writeln!(o, "# TYPE spate_proxy_tunnels_total counter");
    let _ = writeln!(o, "spate_proxy_tunnels_total {}", s.tunnels[0]);
    let _ = writeln!(o, "# HELP spate_proxy_tunnels_open Proxy tunnels open now.");
    let _ = writeln!(o, "# TYPE spate_proxy_tunnels_open gauge");
    let _ = writeln!(o, "spate_proxy_tunnels_open {}", s.tunnels[1]);
    let _ = writeln!(
        o,
        "# HELP spate_http2_resets_total HTTP/2 RST_STREAM frames, by direction and error code."
    );
    let _ = writeln!(o, "# TYPE spate_http2_resets_total counter");
    for (d, codes) in s.resets.iter().enumerate() {
        for (c, n) in codes.iter().enumerate().filter(|(_, n)| **n > 0) {
            let _ = writeln!(
                o,
                "spate_http2_resets_total{{direction=\"{}\",code=\"{}\"}} {n}",
                DIRECTIONS[d],
                Reason(c as u32).name()
            );
        }
    }
    let _ = writeln!(
        o,
        "# HELP spate_http2_goaways_total HTTP/2 GOAWAY frames, by direction, error code and cause."
    );
    let _ = writeln!(o, "# TYPE spate_http2_goaways_total counter");
    for g in &s.goaways {
        let _ = writeln!(
            o,
            "spate_http2_goaways_total{{direction=\"{}\",code=\"{}\",cause=\"{}\"}} {}",
            DIRECTIONS[g.direction as usize],
            Reason(g.code).name(),
            label(g.cause),
            g.count
        );
    }
    let _ = writeln!(
        o,
        "# HELP spate_tls_handshakes_total TLS handshakes, by outcome."
    );
    let _ = writeln!(o, "# TYPE spate_tls_handshakes_total counter");
    for (h, n) in s.handshakes.iter().enumerate() {
        let _ = writeln!(
            o,
            "spate_tls_handshakes_total{{result=\"{}\"}} {n}",
            HANDSHAKES[h]
        );
    }
    let _ = writeln!(
        o,
        "# HELP spate_request_duration_seconds Time from request head to the end of the response."
    );
    let _ = writeln!(o, "# TYPE spate_request_duration_seconds histogram");
    let mut cumulative = 0;
    for (i, n) in s.duration.iter().enumerate() {
        cumulative += n;
        let le = BUCKETS.get(i).map_or("+Inf".to_string(), |b| b.to_string());
        let _ = writeln!(
            o,
            "spate_request_duration_seconds_bucket{{le=\"{le}\"}} {cumulative}"
        );
    }
    let _ = writeln!(
        o,
        "spate_request_duration_seconds_sum {}",
        s.duration_sum_us as f64 / 1e6
    );
    let _ = writeln!(o, "spate_request_duration_seconds_count {cumulative}");
    fleet_stores(&mut o);
    let health = upstream::backend_health();
    if !health.is_empty() {
        let _ = writeln!(
            o,
            "# HELP spate_backend_up Whether a backend of a list or with a health check is in service (1) or taken out by its checks (0)."
        );
        let _ = writeln!(o, "# TYPE spate_backend_up gauge");
        for (name, up) in &health {
            let _ = writeln!(
                o,
                "spate_backend_up{{backend=\"{}\"}} {}",
                label(name),
                u8::from(*up)
            );
        }
    }
    if !s.backends.is_empty() {
        let _ = writeln!(
            o,
            "# HELP spate_backend_requests_total Proxied requests, by backend."
        );
        let _ = writeln!(o, "# TYPE spate_backend_requests_total counter");
        for (name, n, _) in &s.backends {
            let _ = writeln!(
                o,
                "spate_backend_requests_total{{backend=\"{}\"}} {n}",
                label(name)
            );
        }
        let _ = writeln!(
            o,
            "# HELP spate_backend_errors_total Proxied requests the backend failed (502, 504)."
        );
        let _ = writeln!(o, "# TYPE spate_backend_errors_total counter");
        for (name, _, e) in &s.backends {
            let _ = writeln!(
                o,
                "spate_backend_errors_total{{backend=\"{}\"}} {e}",
                label(name)
            );
        }
    }
    cache_metrics(&mut o);
    acme_metrics(&mut o);
    quic_metrics(&mut o, &s.quic);
    tls_early_data_metrics(&mut o);
    o
}

/// TLS 1.3 early data over TCP (`metrics::tls_early_data`), beside QUIC's 0-RTT.
fn tls_early_data_metrics(o: &mut String) {
    let e = crate::metrics::tls_early_data::snapshot();
    counter(
        o,
        "spate_tls_early_data_accepted_total",
        "TLS handshakes over TCP whose early data (0-RTT) was accepted.",
        e.accepted,
    );
    counter(
        o,
        "spate_tls_early_data_refused_total",
        "TLS handshakes over TCP whose offered early data (0-RTT) was refused.",
        e.refused,
    );
    counter(
        o,
        "spate_tls_early_requests_held_total",
        "Requests received in TLS early data over TCP and held until the handshake completed.",
        e.held,
    );
    counter(
        o,
        "spate_tls_too_early_retried_total",
        "Requests received in TLS early data over TCP, answered 425 Too Early and routed again after the handshake.",
        e.too_early_retried,
    );
}

/// The certificates `acme` manages, by name, and on-demand's refusals.
fn acme_metrics(o: &mut String) {
    if let Some(refusals) = crate::acme::on_demand::refusals() {
        let _ = writeln!(
            o,
            "# HELP spate_acme_on_demand_refused_total Handshakes that got no on-demand certificate, by why: the ask service refused the name, a bound (orders-per-minute, max-certificates), a failure."
        );
        let _ = writeln!(o, "# TYPE spate_acme_on_demand_refused_total counter");
        for (reason, n) in refusals {
            let _ = writeln!(
                o,
                "spate_acme_on_demand_refused_total{{reason=\"{reason}\"}} {n}"
            );
        }
    }
    let certs = crate::tls::managed::status();
    if certs.is_empty() {
        return;
    }
    let unix = |t: Option<std::time::SystemTime>| {
        t.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs())
    };
    let _ = writeln!(o, "# HELP spate_acme_certificate_expiry_seconds The notAfter of the certificate in use (Unix time; 0: none yet).");
    let _ = writeln!(o, "# TYPE spate_acme_certificate_expiry_seconds gauge");
    for (name, c) in &certs {
        let _ = writeln!(
            o,
            "spate_acme_certificate_expiry_seconds{{name=\"{}\"}} {}",
            label(name),
            unix(c.not_after)
        );
    }
    let _ = writeln!(o, "# HELP spate_acme_last_attempt_seconds When the last order ended (Unix time; 0: none yet).");
    let _ = writeln!(o, "# TYPE spate_acme_last_attempt_seconds gauge");
    for (name, c) in &certs {
        let _ = writeln!(
            o,
            "spate_acme_last_attempt_seconds{{name=\"{}\"}} {}",
            label(name),
            unix(c.last_attempt)
        );
    }
    let _ = writeln!(
        o,
        "# HELP spate_acme_orders_total Orders that ended, by result."
    );
    let _ = writeln!(o, "# TYPE spate_acme_orders_total counter");
    for (name, c) in &certs {
        let name = label(name);
        let _ = writeln!(
            o,
            "spate_acme_orders_total{{name=\"{name}\",result=\"issued\"}} {}",
            c.issued
        );
        let _ = writeln!(
            o,
            "spate_acme_orders_total{{name=\"{name}\",result=\"failed\"}} {}",
            c.failed
        );
    }
}

/// `proxy.cache` stores, by the `file:line` of their directive.
fn cache_metrics(o: &mut String) {
    use std::sync::atomic::Ordering::Relaxed;
    let stores = crate::cache::store::all();
    if stores.is_empty() {
        return;
    }
    type Read = fn(&crate::cache::Store) -> u64;
    let series: [(&str, &str, &str, Read); 18] = [
        (
            "spate_cache_hits_total",
            "counter",
            "Answers from the store, those given again from a memo among them.",
            |s| s.counts.hits.load(Relaxed) + s.counts.repeated.load(Relaxed),
        ),
        (
            "spate_cache_hits_repeated_total",
            "counter",
            "Fresh hits given again from a connection's or worker's memo of the answer.",
            |s| s.counts.repeated.load(Relaxed),
        ),
        (
            "spate_cache_misses_total",
            "counter",
            "Requests that went to the backend (no entry, no variant, stale or not usable).",
            |s| s.counts.misses.load(Relaxed),
        ),
        (
            "spate_cache_revalidated_total",
            "counter",
            "Stale entries the backend said were unchanged (304).",
            |s| s.counts.revalidated.load(Relaxed),
        ),
        (
            "spate_cache_collapsed_total",
            "counter",
            "Misses that waited for another request's fetch of the same key.",
            |s| s.counts.collapsed.load(Relaxed),
        ),
        (
            "spate_cache_stale_total",
            "counter",
            "Stale entries answered (stale-while-revalidate, stale-if-error).",
            |s| s.counts.stale.load(Relaxed),
        ),
        (
            "spate_cache_purged_total",
            "counter",
            "Responses dropped by PURGE requests.",
            |s| s.counts.purged.load(Relaxed),
        ),
        (
            "spate_cache_stored_total",
            "counter",
            "Responses stored.",
            |s| s.counts.stored.load(Relaxed),
        ),
        (
            "spate_cache_evicted_total",
            "counter",
            "Responses evicted to stay within the budget.",
            |s| s.counts.evicted.load(Relaxed),
        ),
        (
            "spate_cache_stored_bytes_total",
            "counter",
            "Bytes of the responses stored.",
            |s| s.counts.stored_bytes.load(Relaxed),
        ),
        (
            "spate_cache_evicted_bytes_total",
            "counter",
            "Bytes of the responses evicted.",
            |s| s.counts.evicted_bytes.load(Relaxed),
        ),
        (
            "spate_cache_bytes",
            "gauge",
            "Bytes held now (charged against proxy.cache's memory).",
            |s| s.bytes() as u64,
        ),
        ("spate_cache_entries", "gauge", "Responses held now.", |s| {
            s.len() as u64
        }),
        (
            "spate_cache_disk_reads_total",
            "counter",
            "Memory misses answered from a file of the disk store.",
            |s| s.disk.as_ref().map_or(0, |d| d.counts.reads.load(Relaxed)),
        ),
        (
            "spate_cache_disk_corrupt_total",
            "counter",
            "Files of the disk store dropped as not whole or not spate's.",
            |s| {
                s.disk
                    .as_ref()
                    .map_or(0, |d| d.counts.corrupt.load(Relaxed))
            },
        ),
        (
            "spate_cache_disk_write_errors_total",
            "counter",
            "Writes to the disk store that failed (nothing is left of them).",
            |s| s.disk.as_ref().map_or(0, |d| d.counts.failed.load(Relaxed)),
        ),
        (
            "spate_cache_disk_bytes",
            "gauge",
            "Bytes of the disk store's files (charged against proxy.cache.disk.max-size).",
            |s| s.disk.as_ref().map_or(0, |d| d.bytes()),
        ),
        (
            "spate_cache_disk_entries",
            "gauge",
            "Files of the disk store.",
            |s| s.disk.as_ref().map_or(0, |d| d.len() as u64),
        ),
    ];
    for (name, kind, help, read) in series {
        let _ = writeln!(o, "# HELP {name} {help}");
        let _ = writeln!(o, "# TYPE {name} {kind}");
        for (at, store) in &stores {
            let _ = writeln!(o, "{name}{{cache=\"{}\"}} {}", label(at), read(store));
        }
    }
}

/// `spate_quic_*`: QUIC's connection events (`metrics::quic`) and the endpoints' decisions
/// on new connections and early data (`metrics::quic_admission`); open and accepted QUIC
/// connections are `spate_connections{transport="quic"}` and its `_accepted_total`.
fn quic_metrics(o: &mut String, q: &crate::metrics::quic::Counters) {
    let a = crate::metrics::quic_admission::snapshot();
    let rows: [(&str, &str, u64); 13] = [
        (
            "spate_quic_handshakes_total",
            "QUIC handshakes completed.",
            q.handshakes,
        ),
        (
            "spate_quic_0rtt_accepted_total",
            "QUIC handshakes whose 0-RTT early data was accepted.",
            a.zero_rtt_accepted,
        ),
        (
            "spate_quic_0rtt_refused_total",
            "QUIC handshakes whose offered 0-RTT early data was refused.",
            a.zero_rtt_refused,
        ),
        (
            "spate_quic_retries_sent_total",
            "Retry packets sent to validate a new client's address.",
            a.retries_sent,
        ),
        (
            "spate_quic_initial_handshake_packets_exceeded_total",
            "QUIC connections dropped for sending more than max-initial-handshake-packets packets before their handshake completed.",
            a.handshake_packets_exceeded,
        ),
        (
            "spate_quic_early_requests_held_total",
            "Requests received in 0-RTT early data and held until the handshake completed.",
            a.early_requests_held,
        ),
        (
            "spate_quic_too_early_retried_total",
            "Early requests answered 425 Too Early and routed again after the handshake.",
            a.too_early_retried,
        ),
        (
            "spate_quic_migrations_total",
            "QUIC connections moved to a new client address (NAT rebinding, migration).",
            q.migrations,
        ),
        (
            "spate_quic_stateless_resets_sent_total",
            "Stateless resets sent for packets of unknown connections.",
            q.stateless_resets,
        ),
        (
            "spate_quic_forwarded_datagrams_total",
            "Datagrams read by one worker and passed to the worker owning their connection.",
            q.forwarded,
        ),
        (
            "spate_quic_sent_packets_total",
            "Packets sent by QUIC connections that ended.",
            q.sent_packets,
        ),
        (
            "spate_quic_lost_packets_total",
            "Packets declared lost by QUIC connections that ended.",
            q.lost_packets,
        ),
        (
            "spate_quic_secret_handover_failures_total",
            "Binary upgrades whose QUIC secret could not be taken over (a fresh one was made).",
            crate::metrics::quic_secret::handover_failures(),
        ),
    ];
    for (name, help, v) in rows {
        counter(o, name, help, v);
    }
    let name = "spate_quic_upgrade_forwarded_total";
    let _ = writeln!(
        o,
        "# HELP {name} Datagrams passed between the two processes of a binary upgrade (their connections' owner)."
    );
    let _ = writeln!(o, "# TYPE {name} counter");
    let _ = writeln!(o, "{name}{{direction=\"sent\"}} {}", a.upgrade_sent);
    let _ = writeln!(o, "{name}{{direction=\"received\"}} {}", a.upgrade_received);
    let name = "spate_quic_handshakes_in_progress";
    let _ = writeln!(
        o,
        "# HELP {name} QUIC handshakes under way now (what retry: auto watches)."
    );
    let _ = writeln!(o, "# TYPE {name} gauge");
    let _ = writeln!(o, "{name} {}", a.handshaking);
}

fn counter(o: &mut String, name: &str, help: &str, v: u64) {
    let _ = writeln!(o, "# HELP {name} {help}");
    let _ = writeln!(o, "# TYPE {name} counter");
    let _ = writeln!(o, "{name} {v}");
}

/// A label value escaped as the text format asks (backslash, quote, newline).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_labels_are_the_counting_bounds_in_seconds() {
        for (s, us) in BUCKETS.iter().zip(crate::metrics::BUCKETS_US) {
            assert_eq!((s * 1e6).round() as u64, us);
        }
    }
}
