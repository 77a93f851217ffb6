//! A worker's HTTP/2 connection settings (`H2Settings`), built from the configuration once
//! and shared by its connections.

use crate::config::Config;
use crate::proto::h2::{RunBuffer, Settings};
use bytes::Bytes;
use std::cell::RefCell;
use std::sync::Arc;

/// A worker's connection settings, shared by its connections, and its run buffer.
pub(crate) struct H2Settings {
    /// The worker's buffer for runs of repeated answers, lent to each `recv`: one a worker,
    /// as the worker runs one connection's turn at a time.
    pub(crate) runs: RefCell<RunBuffer>,
    plain: Arc<Settings>,
    secure: Arc<Settings>,
    /// Ports that also have a QUIC listener: their settings carry `alt-svc` (plain, secure).
    alt_svc: Vec<(u16, [Arc<Settings>; 2])>,
}

impl H2Settings {
    /// `alt_svc`: the `alt-svc` value of each port that has one.
    pub fn new(config: &Config, alt_svc: &[(u16, bytes::Bytes)]) -> H2Settings {
        let plain = settings(config);
        let secure = Settings {
            secure: true,
            // rustls encrypts from memory: a file range would have to be read anyway.
            sendfile_min: usize::MAX,
            ..plain.clone()
        };
        let alt_svc = alt_svc
            .iter()
            .map(|(port, value)| {
                let with = |s: &Settings| {
                    Arc::new(Settings {
                        alt_svc: Some(value.clone()),
                        ..s.clone()
                    })
                };
                (*port, [with(&plain), with(&secure)])
            })
            .collect();
        H2Settings {
            runs: RefCell::default(),
            plain: Arc::new(plain),
            secure: Arc::new(secure),
            alt_svc,
        }
    }

    /// The shared settings for a connection on local `port`.
    pub(crate) fn for_connection(&self, secure: bool, port: u16) -> Arc<Settings> {
        if let Some((_, both)) = self.alt_svc.iter().find(|(p, _)| *p == port) {
            return both[usize::from(secure)].clone();
        }
        if secure {
            self.secure.clone()
        } else {
            self.plain.clone()
        }
    }
}

/// The connection settings for this configuration.
fn settings(config: &Config) -> Settings {
    let h2 = &config.http2;
    Settings {
        max_streams: h2.max_streams,
        max_concurrent_requests: h2.max_concurrent_requests_per_connection,
        input_window: h2.input_window_size,
        max_header_list: config.limits.request_field_section,
        max_header_fields: config.limits.request_headers,
        max_request_body: config.limits.request_body,
        idle_timeout: h2.idle_timeout,
        header_timeout: h2.header_timeout,
        stall_timeout: config.http1.send_timeout,
        max_resets_per_second: h2.max_resets_per_second,
        max_control_frames_per_second: h2.max_control_frames_per_second,
        max_write: h2.max_write_size,
        server_name: config
            .send_server_name
            .then(|| Bytes::from(config.server_name.clone())),
        alt_svc: None,
        secure: false,
        enable_connect_protocol: config.has_tunnel(),
        splice_min: crate::proto::h2::output::SPLICE_MIN,
        // Off: on a quiet machine the file ranges (sendfile under TCP_CORK) cost more kernel
        // time than the copies they save on h2c with mixed sizes (session 28, docs/bench-log.md).
        sendfile_min: usize::MAX,
    }
}
