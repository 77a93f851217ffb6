//! What a configuration decides for a worker's requests (`Routing`): the router (hosts,
//! paths, handlers, their logs and checks), the Server and Alt-Svc lines, the request-head
//! limits, the HTTP/2 settings and the TLS acceptors of the listeners. A reload in place
//! builds a new one on each worker and swaps it in (`WorkerCtx::swap_routing`): the next
//! request of every connection routes by it, while answers in progress keep the one they
//! started with (a `LaterAnswer` owns its `Rc<Routing>`).

use super::h2_settings::H2Settings;
use super::prepare::Prepared;
use crate::config::{Config, Listen, ListenKind};
use crate::handler::Router;
use crate::log::AccessLog;
use crate::proto::h1::HeadLimits;
use std::cell::RefCell;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use tokio_rustls::TlsAcceptor;

/// A worker's configuration-driven state, swapped whole by a reload in place.
pub(crate) struct Routing {
    pub config: Arc<Config>,
    pub router: Router,
    /// `Server: NAME\r\n`, or empty when `send-server-name` is OFF.
    server_line: Vec<u8>,
    /// The Server line followed by `Alt-Svc: h3=":PORT"\r\n`, for each TCP port that has a
    /// QUIC listener on the same port number (`http3-alt-svc`); usually empty.
    alt_svc_lines: Vec<(u16, Vec<u8>)>,
    pub head_limits: HeadLimits,
    /// HTTP/2 connection settings from the configuration.
    pub h2: H2Settings,
    /// What new connections' handshakes take, by listener.
    handshakes: Handshakes,
    /// The access logs the router writes to, for the worker's flusher.
    pub logs: Vec<Rc<RefCell<AccessLog>>>,
}

/// A listener as an accept loop knows it across reloads: its address (or socket file).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ListenKey {
    addr: SocketAddr,
    kind: ListenKind,
    unix: Option<PathBuf>,
}

impl ListenKey {
    pub fn of(l: &Listen) -> ListenKey {
        ListenKey {
            addr: l.addr,
            kind: l.kind.clone(),
            unix: l.unix.as_ref().map(|u| u.path.clone()),
        }
    }
}

impl Routing {
    /// Builds the routing of `config` on this worker. `pool`: the idle backend connections
    /// to keep (the previous routing's, on a reload in place).
    pub fn build(
        config: Arc<Config>,
        prepared: &Prepared,
        handshakes: Handshakes,
        pool: Option<Rc<crate::upstream::Pool>>,
    ) -> Routing {
        let mut logs = Vec::new();
        let (tls_clients, formats) = (&prepared.upstream_tls, &prepared.access_log_formats);
        let router = match pool {
            Some(pool) => Router::with_pool(&config, tls_clients, formats, &mut logs, pool),
            None => Router::new(&config, tls_clients, formats, &mut logs),
        };
        let server_line = if config.send_server_name {
            format!("Server: {}\r\n", config.server_name).into_bytes()
        } else {
            Vec::new()
        };
        let alt_svc = alt_svc_values(&config);
        let h2 = H2Settings::new(&config, &alt_svc);
        let head_limits = HeadLimits {
            head_size: config.limits.request_head,
            target_size: config.limits.request_target,
            fields: config.limits.request_headers,
            body_size: config.limits.request_body,
        };
        let alt_svc_lines = alt_svc
            .iter()
            .map(|(port, v)| {
                let mut line = server_line.clone();
                line.extend_from_slice(b"Alt-Svc: ");
                line.extend_from_slice(v);
                line.extend_from_slice(b"\r\n");
                (*port, line)
            })
            .collect();
        Routing {
            config,
            router,
            server_line,
            alt_svc_lines,
            head_limits,
            h2,
            handshakes,
            logs,
        }
    }

    /// The Server line for a response on local `port`, with `Alt-Svc` when a QUIC listener
    /// shares the port. Preformatted: no allocation per response.
    #[inline(always)]
    pub fn server_line(&self, port: u16) -> &[u8] {
        if self.alt_svc_lines.is_empty() {
            return &self.server_line;
        }
        self.alt_svc_lines
            .iter()
            .find(|(p, _)| *p == port)
            .map_or(&self.server_line[..], |(_, l)| &l[..])
    }

    /// The TLS acceptor of the listener `key` (`None`: plain, or no longer configured).
    pub fn acceptor(&self, key: &ListenKey) -> Option<TlsAcceptor> {
        self.handshakes.tls.get(self.listener(key)?)?.clone()
    }

    /// The QUIC server configuration of the listener `key`.
    pub fn quic_server(&self, key: &ListenKey) -> Option<Arc<quinn_proto::ServerConfig>> {
        self.handshakes.quic.get(self.listener(key)?)?.clone()
    }

    fn listener(&self, key: &ListenKey) -> Option<usize> {
        (self.config.listeners.iter()).position(|l| ListenKey::of(l) == *key)
    }
}

/// What new connections' handshakes take, by listener (in `config.listeners`' order): a TLS
/// acceptor, or a QUIC server configuration. One per listener, shared by the workers so that
/// sessions resume (and Retry tokens hold) whichever worker takes the next connection.
/// `prepare` built their TLS configurations, so a reload reads the certificates and keys
/// again.
#[derive(Clone)]
pub(crate) struct Handshakes {
    tls: Arc<[Option<TlsAcceptor>]>,
    quic: Arc<[Option<Arc<quinn_proto::ServerConfig>>]>,
}

impl Handshakes {
    /// `quic`: the QUIC server configuration of each listener (`None` for the others).
    pub fn new(
        config: &Config,
        prepared: &Prepared,
        quic: impl Iterator<Item = Option<Arc<quinn_proto::ServerConfig>>>,
    ) -> Handshakes {
        let prepared_tls = prepared.tls.iter();
        let tls = (config.listeners.iter().zip(prepared_tls))
            .map(|(l, tls)| match l.kind {
                ListenKind::Quic => None,
                _ => tls.clone().map(TlsAcceptor::from),
            })
            .collect();
        let quic = quic.collect();
        Handshakes { tls, quic }
    }
}

/// `h3=":PORT"` for every port with both a TCP and a QUIC listener (as h2o advertises).
fn alt_svc_values(config: &Config) -> Vec<(u16, bytes::Bytes)> {
    if !config.http3.alt_svc {
        return Vec::new();
    }
    let mut out: Vec<(u16, bytes::Bytes)> = Vec::new();
    for q in config
        .listeners
        .iter()
        .filter(|l| l.kind == ListenKind::Quic)
    {
        let port = q.addr.port();
        let tcp = config
            .listeners
            .iter()
            .any(|l| l.kind == ListenKind::Tcp && l.addr.port() == port);
        if tcp && port != 0 && !out.iter().any(|(p, _)| *p == port) {
            out.push((port, bytes::Bytes::from(format!("h3=\":{port}\""))));
        }
    }
    out
}
