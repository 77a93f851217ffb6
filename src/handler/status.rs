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
    fn handle(&self, req: &Request) -> Answer {
        if let Some(show) = req.query().and_then(show_list) {
            return Answer::Now(body(
                sections(&Sections::of(show), req),
                "application/json; charset=utf-8",
            ));
        }
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
        tls_early_data_json(&mut j);
        Answer::Now(body(j, "application/json; charset=utf-8"))
    }
}

/// The sections h2o's `?show=a,b,...` names that spate has.
struct Sections {
    main: bool,
    events: bool,
    ssl: bool,
    requests: bool,
}

impl Sections {
    fn of(list: &[u8]) -> Sections {
        let has = |name: &[u8]| list.split(|&b| b == b',').any(|t| t.trim_ascii() == name);
        Sections {
            main: has(b"main"),
            events: has(b"events"),
            ssl: has(b"ssl"),
            requests: has(b"requests"),
        }
    }
}

/// The value of `show=` in a query, if it has one.
fn show_list(query: &[u8]) -> Option<&[u8]> {
    query
        .split(|&b| b == b'&')
        .find_map(|p| p.strip_prefix(b"show="))
}

/// The JSON of the sections asked for by `?show=` (h2o's names: `main`, `events`, `ssl`,
/// `requests`; others are h2o's internals and give nothing), in one object.
fn sections(show: &Sections, req: &Request) -> String {
    let mut fields: Vec<String> = Vec::new();
    if show.main || show.events || show.ssl {
        let (s, info, started) = metrics::total();
        if show.main {
            let now = SystemTime::now();
            let uptime = started
                .and_then(|t| now.duration_since(t).ok())
                .map_or(0, |d| d.as_secs());
            fields.push(format!(
                "\"server-version\": \"{}\",\n \"current-time\": \"{}\",\n \"restart-time\": \"{}\",\n \"uptime\": {uptime},\n \"generation\": {},\n \"connections\": {},\n \"max-connections\": {},\n \"listeners\": {},\n \"worker-threads\": {}",
                env!("CARGO_PKG_VERSION"),
                httpdate::fmt_http_date(now),
                started.map_or(String::new(), httpdate::fmt_http_date),
                info.generation,
                s.open.iter().sum::<u64>(),
                info.max_connections,
                info.listeners,
                info.worker_threads,
            ));
        }
        if show.events {
            let class = |c: usize| s.requests.iter().map(|p| p[c]).sum::<u64>();
            fields.push(format!(
                "\"status.1xx\": {},\n \"status.2xx\": {},\n \"status.3xx\": {},\n \"status.4xx\": {},\n \"status.5xx\": {}",
                class(0),
                class(1),
                class(2),
                class(3),
                class(4),
            ));
        }
        if show.ssl {
            fields.push(format!(
                "\"ssl.handshake.full\": {},\n \"ssl.handshake.resume\": {},\n \"ssl.errors\": {}",
                s.handshakes[0], s.handshakes[1], s.handshakes[2],
            ));
        }
    }
    if show.requests {
        fields.push(requests_json(req));
    }
    let mut j = String::from("{\n ");
    j.push_str(&fields.join(",\n "));
    j.push_str("\n}\n");
    j
}

/// h2o's `"requests": [...]`: the requests in flight on every worker, this one first (as
/// h2o, which lists the status request itself), then the others oldest first.
fn requests_json(req: &Request) -> String {
    let mut listed = vec![metrics::in_flight::describe(req)];
    listed.extend(metrics::in_flight::all());
    let mut j = String::from("\"requests\": [");
    for (i, e) in listed.iter().enumerate() {
        let opt = |s: &str| {
            if s.is_empty() {
                "null".to_owned()
            } else {
                format!("\"{}\"", json_escape(s))
            }
        };
        let _ = write!(
            j,
            "{}\n  {{\"host\": \"{}\", \"at\": \"{}\", \"method\": \"{}\", \"path\": \"{}\", \"query\": {}, \"protocol\": \"{}\", \"referer\": {}, \"user-agent\": {}, \"authority\": {}, \"state\": \"{}\"}}",
            if i == 0 { "" } else { "," },
            e.peer.ip(),
            at(e.at),
            json_escape(&e.method),
            json_escape(&e.path),
            if e.query.is_empty() { "null".to_owned() } else { format!("\"?{}\"", json_escape(&e.query)) },
            e.protocol,
            opt(&e.referer),
            opt(&e.user_agent),
            opt(&e.authority),
            e.phase.as_str(),
        );
    }
    j.push_str("\n ]");
    j
}

/// h2o's `at` of a request (`%Y%m%dT%H%M%S.usec%z`), in UTC.
fn at(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, dd) = civil_from_days(days as i64);
    format!(
        "{y:04}{m:02}{dd:02}T{:02}{:02}{:02}.{:06}+0000",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_micros()
    )
}

/// Year, month and day of a count of days since 1970-01-01 (the proleptic Gregorian
/// calendar, by 400-year eras of 146097 days).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
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
        ",\n \"quic\": {{\"connections\": {}, \"accepted\": {}, \"handshakes\": {}, \"0rtt-accepted\": {}, \"0rtt-refused\": {}, \"retries-sent\": {}, \"handshaking\": {}, \"handshake-packets-exceeded\": {}, \"early-requests-held\": {}, \"too-early-retried\": {}, \"migrations\": {}, \"stateless-resets-sent\": {}, \"forwarded-datagrams\": {}, \"upgrade-forwarded-sent\": {}, \"upgrade-forwarded-received\": {}, \"packets-sent\": {}, \"packets-lost\": {}, \"secret-handover-failures\": {}}}\n}}\n",
        s.open[metrics::Transport::Quic as usize],
        s.accepted[metrics::Transport::Quic as usize],
        q.handshakes,
        a.zero_rtt_accepted,
        a.zero_rtt_refused,
        a.retries_sent,
        a.handshaking,
        a.handshake_packets_exceeded,
        a.early_requests_held,
        a.too_early_retried,
        q.migrations,
        q.stateless_resets,
        q.forwarded,
        a.upgrade_sent,
        a.upgrade_received,
        q.sent_packets,
        q.lost_packets,
        metrics::quic_secret::handover_failures(),
    );
}

/// spate's addition: `"tls-early-data": {"accepted", "refused", "requests-held", "too-early-retried"}`, TLS 1.3 early data over
/// TCP (`metrics::tls_early_data`), before the closing brace.
fn tls_early_data_json(j: &mut String) {
    let e = metrics::tls_early_data::snapshot();
    j.truncate(j.trim_end().trim_end_matches('}').trim_end().len());
    let _ = write!(
        j,
        ",\n \"tls-early-data\": {{\"accepted\": {}, \"refused\": {}, \"requests-held\": {}, \"too-early-retried\": {}}}\n}}\n",
        e.accepted, e.refused, e.held, e.too_early_retried,
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
