//! `status: ON` (h2o's JSON status), `metrics: ON` (Prometheus text format) and
//! `readiness: ON` (200 while serving, 503 once this worker drains or the server stops).

mod prometheus;

use crate::http::{Answer, Body, Handler, Request, Response};
use crate::metrics;
use bytes::Bytes;
use std::fmt::Write as _;
use std::time::SystemTime;

/// h2o's `status` handler, as far as it applies: the server's shape and request counters.
pub struct StatusHandler;

impl Handler for StatusHandler {
    fn handle(&self, _req: &Request) -> Answer {
        let (s, info, started) = metrics::total();
        let now = SystemTime::now();
        let uptime = started
            .and_then(|t| now.duration_since(t).ok())
            .map_or(0, |d| d.as_secs());
        let mut j = String::with_capacity(1024);
        let _ = write!(
            j,
            "{{\n \"server-version\": \"{}\",\n \"current-time\": \"{}\",\n \"restart-time\": \"{}\",\n \"uptime\": {uptime},\n \"generation\": {},\n \"connections\": {},\n \"max-connections\": {},\n \"listeners\": {},\n \"worker-threads\": {}",
            env!("CARGO_PKG_VERSION"),
            httpdate::fmt_http_date(now),
            started.map_or(String::new(), httpdate::fmt_http_date),
            info.generation,
            s.open.iter().sum::<u64>(),
            info.max_connections,
            info.listeners,
            info.worker_threads,
        );
        // h2o's `status.*` counters (from its "events" and "requests" sections).
        let classes: Vec<u64> = (0..5)
            .map(|c| s.requests.iter().map(|p| p[c]).sum())
            .collect();
        let _ = write!(
            j,
            ",\n \"requests\": {},\n \"status.1xx\": {},\n \"status.2xx\": {},\n \"status.3xx\": {},\n \"status.4xx\": {},\n \"status.5xx\": {},\n \"ssl.handshake.full\": {},\n \"ssl.handshake.resume\": {},\n \"ssl.errors\": {}\n}}\n",
            classes.iter().sum::<u64>(),
            classes[0],
            classes[1],
            classes[2],
            classes[3],
            classes[4],
            s.handshakes[0],
            s.handshakes[1],
            s.handshakes[2],
        );
        acme_json(&mut j);
        quic_json(&mut j, &s);
        Answer::Now(body(j, "application/json; charset=utf-8"))
    }
}

/// spate's addition when `acme` manages certificates: `"acme": [{name, not-after,
/// last-attempt, last-error, issued, failed}]`, before the closing brace.
fn acme_json(j: &mut String) {
    let certs = crate::tls::managed::status();
    if certs.is_empty() {
        return;
    }
    j.truncate(j.trim_end().trim_end_matches('}').trim_end().len());
    j.push_str(",\n \"acme\": [");
    let date = |t: Option<SystemTime>| t.map_or(String::new(), httpdate::fmt_http_date);
    for (i, (name, c)) in certs.iter().enumerate() {
        let _ = write!(
            j,
            "{}\n  {{\"name\": \"{}\", \"not-after\": \"{}\", \"last-attempt\": \"{}\", \"last-error\": {}, \"issued\": {}, \"failed\": {}}}",
            if i == 0 { "" } else { "," },
            json_escape(name),
            date(c.not_after),
            date(c.last_attempt),
            c.last_error
                .as_deref()
                .map_or("null".to_owned(), |e| format!("\"{}\"", json_escape(e))),
            c.issued,
            c.failed,
        );
    }
    j.push_str("\n ]\n}\n");
}

/// spate's addition: `"quic": {...}`, QUIC's connection events (`metrics::quic`) and what
/// the endpoints decided about new connections and early data (`metrics::quic_admission`),
/// before the closing brace.
fn quic_json(j: &mut String, s: &metrics::Snapshot) {
    let q = &s.quic;
    let a = metrics::quic_admission::snapshot();
    j.truncate(j.trim_end().trim_end_matches('}').trim_end().len());
    let _ = write!(
        j,
        ",\n \"quic\": {{\"connections\": {}, \"accepted\": {}, \"handshakes\": {}, \"0rtt-accepted\": {}, \"0rtt-refused\": {}, \"retries-sent\": {}, \"handshaking\": {}, \"early-requests-held\": {}, \"too-early-retried\": {}, \"migrations\": {}, \"stateless-resets-sent\": {}, \"forwarded-datagrams\": {}, \"packets-sent\": {}, \"packets-lost\": {}}}\n}}\n",
        s.open[metrics::Transport::Quic as usize],
        s.accepted[metrics::Transport::Quic as usize],
        q.handshakes,
        a.zero_rtt_accepted,
        a.zero_rtt_refused,
        a.retries_sent,
        a.handshaking,
        a.early_requests_held,
        a.too_early_retried,
        q.migrations,
        q.stateless_resets,
        q.forwarded,
        q.sent_packets,
        q.lost_packets,
    );
}

fn json_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// The Prometheus endpoint (spate's `metrics` directive).
pub struct MetricsHandler;

impl Handler for MetricsHandler {
    fn handle(&self, _req: &Request) -> Answer {
        let (s, _, _) = metrics::total();
        Answer::Now(body(
            prometheus::render(&s),
            "text/plain; version=0.0.4; charset=utf-8",
        ))
    }
}

/// For a load balancer or a Kubernetes readiness probe: 503 as soon as this worker drains,
/// so traffic moves elsewhere while in-flight requests finish.
pub struct ReadinessHandler;

impl Handler for ReadinessHandler {
    fn handle(&self, _req: &Request) -> Answer {
        let resp = if metrics::draining() {
            body("draining\n".into(), "text/plain")
        } else {
            body("ready\n".into(), "text/plain")
        };
        Answer::Now(Response {
            status: if metrics::draining() { 503 } else { 200 },
            ..resp
        })
    }
}

fn body(text: String, content_type: &'static str) -> Response {
    Response {
        status: 200,
        headers: vec![
            (
                Bytes::from_static(b"Content-Type"),
                Bytes::from_static(content_type.as_bytes()),
            ),
            (
                Bytes::from_static(b"Cache-Control"),
                Bytes::from_static(b"no-store"),
            ),
        ]
        .into(),
        body: Body::Bytes(Bytes::from(text)),
    }
}
