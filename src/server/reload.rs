//! What a reload can change in place and what needs a new worker generation.
//!
//! A worker's routing (hosts, paths, handlers, their logs and checks), the Server line and
//! the limits a connection reads per request can be swapped between two requests of a
//! connection. What a worker set up once, or a connection agreed on at its start, cannot:
//! the worker threads, the accept loops of the listeners, the parking of idle connections,
//! the QUIC endpoints. `in_place_blocker` names the first such change: such a reload starts a
//! new worker generation and the old one drains, the reload's log line saying why. Any other
//! reload is applied in place (`Generation::apply_in_place`, `worker::apply_in_place`; see
//! `LIFECYCLE.md`, "Reload in place").

use crate::config::{Config, Listen};

/// Why a reload cannot apply `new` to the running workers of `old`: `None` when it can.
pub(super) fn in_place_blocker(old: &Config, new: &Config) -> Option<String> {
    let (threads_old, threads_new) = (old.num_threads.max(1), new.num_threads.max(1));
    if threads_old != threads_new {
        return Some(format!(
            "num-threads changed from {threads_old} to {threads_new}"
        ));
    }
    for l in &old.listeners {
        match new.listeners.iter().find(|n| same_address(l, n)) {
            None => return Some(format!("listen {} removed", describe(l))),
            Some(n) if !same_listener(l, n) => {
                return Some(format!("listen {} changed ({})", describe(n), n.at))
            }
            Some(_) => {}
        }
    }
    if let Some(n) =
        (new.listeners.iter()).find(|n| !old.listeners.iter().any(|l| same_address(l, n)))
    {
        return Some(format!("listen {} added ({})", describe(n), n.at));
    }
    // Whether idle connections park or wait in the lane is the worker's set-up.
    let (h1_old, h1_new) = (&old.http1, &new.http1);
    if h1_old.lane != h1_new.lane
        || h1_old.idle_park_delay != h1_new.idle_park_delay
        || h1_old.keepalive_timeout != h1_new.keepalive_timeout
    {
        return Some("http1-lane, http1-idle-park-delay or http1-keepalive-timeout changed".into());
    }
    // The QUIC endpoints were built with these.
    if old.http3 != new.http3 {
        return Some("an http3 directive changed".into());
    }
    // Whether a worker counts requests (and publishes its counters) is set up at its start.
    if old.wants_metrics() != new.wants_metrics() {
        return Some("a status or metrics handler was added or removed".into());
    }
    None
}

/// The same listen entry: a reload keeps its sockets (a socket file's mode may differ).
fn same_address(a: &Listen, b: &Listen) -> bool {
    let path = |l: &Listen| l.unix.as_ref().map(|u| u.path.clone());
    a.addr == b.addr && a.kind == b.kind && path(a) == path(b)
}

/// What an accept loop of `a` was set up with is the same for `b`. Certificates may differ:
/// the acceptor is swapped. The hosts served and the socket options (set on the kept socket
/// by the reload itself) may differ too.
fn same_listener(a: &Listen, b: &Listen) -> bool {
    a.tls.is_some() == b.tls.is_some()
        && a.quic == b.quic
        && a.proxy_protocol == b.proxy_protocol
        && a.proxy_protocol_from == b.proxy_protocol_from
}

fn describe(l: &Listen) -> String {
    match &l.unix {
        Some(u) => format!("unix:{}", u.path.display()),
        None => l.addr.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(extra: &str, paths: &str) -> Config {
        let yaml = format!(
            "num-threads: 2\n{extra}listen: {{host: 127.0.0.1, port: 8080}}\nhosts:\n  default:\n    paths:\n{paths}"
        );
        crate::config::load_str(&yaml, "spate.yaml").unwrap()
    }

    const ONE_PATH: &str = "      /:\n        respond: {status: 200, body: a}\n";
    const TWO_PATHS: &str = "      /:\n        respond: {status: 200, body: a}\n      /new:\n        respond: {status: 200, body: b}\n";

    #[test]
    fn paths_and_server_name_change_in_place() {
        let old = conf("", ONE_PATH);
        let new = conf("server-name: other\n", TWO_PATHS);
        assert_eq!(in_place_blocker(&old, &new), None);
    }

    #[test]
    fn thread_count_needs_a_new_generation() {
        let old = conf("", ONE_PATH);
        let new = Config {
            num_threads: 3,
            ..conf("", ONE_PATH)
        };
        let why = in_place_blocker(&old, &new).unwrap();
        assert!(why.contains("num-threads changed from 2 to 3"), "{why}");
    }

    #[test]
    fn a_listener_removed_or_added_needs_a_new_generation() {
        let old = conf("", ONE_PATH);
        let mut new = conf("", ONE_PATH);
        new.listeners[0].addr.set_port(8081);
        let why = in_place_blocker(&old, &new).unwrap();
        assert!(why.contains("listen 127.0.0.1:8080 removed"), "{why}");
        let why = in_place_blocker(&new, &{
            let mut both = new.clone();
            both.listeners.push(old.listeners[0].clone());
            both
        })
        .unwrap();
        assert!(why.contains("listen 127.0.0.1:8080 added"), "{why}");
    }

    #[test]
    fn proxy_protocol_or_parking_changed_needs_a_new_generation() {
        let old = conf("", ONE_PATH);
        let mut new = conf("", ONE_PATH);
        new.listeners[0].proxy_protocol = true;
        let why = in_place_blocker(&old, &new).unwrap();
        assert!(why.contains("listen 127.0.0.1:8080 changed"), "{why}");
        let new = conf("http1-lane: OFF\n", ONE_PATH);
        assert!(in_place_blocker(&old, &new).is_some());
    }
}
