//! QUIC: one UDP socket per worker and QUIC listener, a `quinn_proto::Endpoint` per socket,
//! driven by one task of the worker's LocalSet (`endpoint.rs`); HTTP/3 on top is
//! `server/h3.rs`. How packets find the worker that owns their connection, and what
//! migration and reload do, is in LIFECYCLE.md beside this file.

mod batch;
mod early;
mod endpoint;
mod initial;
mod peer;
mod route;
mod secret;
mod socket;
mod unpad;

pub(crate) use endpoint::serve;
pub(crate) use socket::{bind, bind_fresh};

/// What a binary upgrade (`server/upgrade.rs`) sets up for QUIC: the processes' opposite tag
/// bits, the link that passes each one's datagrams to the other, and the process's secret
/// (stateless reset and Retry token keys) the new process keeps.
pub(crate) mod upgrade_link {
    pub(crate) use super::peer::{install, linked, pair};
    pub(crate) use super::route::{process_bit, set_process_bit, PROCESS_BIT};
    pub(crate) use super::secret::{
        hand_over as hand_over_secret, load as load_secret, SECRET_FD_ENV,
    };
}

// For the `quic_unpad` fuzz target.
pub use unpad::padding_start;

use crate::config::{Config, Listen, QuicConf};
use quinn_proto::crypto::rustls::QuicServerConfig;
use quinn_proto::{
    EndpointConfig, IdleTimeout, MtuDiscoveryConfig, ServerConfig, TransportConfig, VarInt,
};
use std::sync::Arc;

/// A QUIC listener's settings for one generation of workers, built once and shared by its
/// workers: one TLS configuration, and the process's Retry token key (`secret.rs`), so a
/// token issued by one worker, generation or upgraded process is accepted by all.
#[derive(Clone)]
pub(crate) struct Settings {
    pub server: Arc<ServerConfig>,
    /// The listener, to find its server configuration after a reload in place
    /// (`Routing::quic_server`).
    pub listener: crate::server::routing::ListenKey,
    pub quic: QuicConf,
    /// The listen's port, for `Alt-Svc` and requests' local address.
    pub port: u16,
}

impl Settings {
    /// Builds the QUIC server configuration of listener `l` (which has `tls` and `quic`) on
    /// `crypto`, the TLS configuration `prepare` made of its `ssl`.
    pub fn new(
        config: &Config,
        l: &Listen,
        crypto: Option<Arc<QuicServerConfig>>,
    ) -> Result<Settings, String> {
        let (Some(crypto), Some(quic)) = (crypto, &l.quic) else {
            return Err(format!("{}: a quic listen needs ssl", l.at));
        };
        // Client packets reach quinn without their trailing padding (`unpad.rs`).
        let mut server = ServerConfig::new(unpad::wrap(crypto), secret::token_key());
        server.transport_config(Arc::new(transport(config, quic)));
        // Connections past `max-quic-connections` are refused before quinn keeps state.
        server.max_incoming(config.http3.max_connections.min(1 << 16));
        server.incoming_buffer_size(64 * 1024);
        server.incoming_buffer_size_total(16 << 20);
        Ok(Settings {
            server: Arc::new(server),
            listener: crate::server::routing::ListenKey::of(l),
            quic: quic.clone(),
            port: l.addr.port(),
        })
    }
}

/// The transport parameters of our connections.
fn transport(config: &Config, quic: &QuicConf) -> TransportConfig {
    let h3 = &config.http3;
    let mut t = TransportConfig::default();
    t.max_concurrent_bidi_streams(VarInt::from_u32(quic.max_streams_bidi));
    t.max_concurrent_uni_streams(VarInt::from_u32(h3.max_streams_uni));
    let idle = u64::try_from(h3.idle_timeout.as_millis()).unwrap_or(u64::MAX);
    t.max_idle_timeout(
        (idle > 0)
            .then(|| IdleTimeout::try_from(h3.idle_timeout).ok())
            .flatten(),
    );
    // A request stream may have a window of unread body; the connection, two of them (as
    // `http2-input-window-size`), so one stalled stream does not starve the others.
    t.stream_receive_window(VarInt::from_u32(h3.input_window_size));
    t.receive_window(VarInt::from_u64(2 * u64::from(h3.input_window_size)).unwrap_or(VarInt::MAX));
    // Response bytes quinn holds for one connection (sent, not yet acknowledged, or waiting
    // for the client's flow control): what a client that does not read can pin.
    t.send_window(4 << 20);
    t.enable_segmentation_offload(h3.gso);
    // Streams are sent one after the other rather than round-robin: a response goes out in
    // as few packets and STREAM frames as it can (fewer frames to track and acknowledge),
    // and the first requested finishes first.
    t.send_fairness(false);
    // No unreliable datagrams in HTTP/3 without the extension.
    t.datagram_receive_buffer_size(None);
    t.initial_mtu(1200.max(quic.max_udp_payload_size.min(1452)));
    // Raised above h2o's default, `max-udp-payload-size` is also what path MTU discovery
    // (RFC 8899) probes up to: bigger packets where the path carries them (loopback, jumbo
    // frames) mean fewer packets to build, encrypt, acknowledge and track per response. At
    // the default, quinn's own bound (1452, the initial size) stands: probing for 20 more
    // bytes would cost probes on every connection and buy nothing measurable.
    if quic.max_udp_payload_size > QuicConf::default().max_udp_payload_size {
        let mut mtud = MtuDiscoveryConfig::default();
        mtud.upper_bound(quic.max_udp_payload_size);
        t.mtu_discovery_config(Some(mtud));
    }
    t
}

/// The endpoint settings of the endpoint registered as `tag`: connection IDs that name it,
/// the payload size, and the process's stateless reset key (`secret.rs`).
fn endpoint_config(quic: &QuicConf, tag: u16) -> EndpointConfig {
    let mut c = EndpointConfig::new(secret::reset_key());
    c.cid_generator(move || Box::new(route::TaggedCids::new(tag)));
    let _ = c.max_udp_payload_size(quic.max_udp_payload_size);
    c
}
