//! The connection's limits and settings.

use super::DEFAULT_MAX_WRITE;
use crate::proto::h2::output;
use bytes::Bytes;
use std::time::Duration;

/// The connection's limits and settings, from the configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// SETTINGS_MAX_CONCURRENT_STREAMS we advertise and enforce (REFUSED_STREAM above it).
    pub max_streams: u32,
    /// Requests handed to handlers at once; the rest wait in order.
    pub max_concurrent_requests: u32,
    /// Per-stream receive window (SETTINGS_INITIAL_WINDOW_SIZE); the connection window is
    /// raised to the same size.
    pub input_window: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE: decoded header bytes (+32 per field) per request.
    pub max_header_list: usize,
    /// Header fields per request.
    pub max_header_fields: usize,
    /// Request body bytes per stream (413 above it).
    pub max_request_body: u64,
    /// Close a connection with no stream and no frame received for this long.
    pub idle_timeout: Duration,
    /// A header block (HEADERS and its CONTINUATIONs) must be complete within this.
    pub header_timeout: Duration,
    /// Close when response data has been blocked by a zero window for this long.
    pub stall_timeout: Duration,
    /// Stream resets per second (either side's) before the connection is closed with
    /// ENHANCE_YOUR_CALM: Rapid Reset and MadeYouReset.
    pub max_resets_per_second: u32,
    /// Frames per second that cost us work but carry no request (SETTINGS, PING, PRIORITY,
    /// empty DATA or CONTINUATION, tiny WINDOW_UPDATEs) before ENHANCE_YOUR_CALM.
    pub max_control_frames_per_second: u32,
    /// Whole answers (HEADERS and a body that fits one DATA frame) are built into the output
    /// until it holds this much; then it is written. Streamed bodies stop earlier, at
    /// [`super::OUTPUT_HIGH_WATER`] or this, whichever is less.
    pub max_write: usize,
    /// The `server` response header, if sent.
    pub server_name: Option<Bytes>,
    /// An `alt-svc` value sent on every response (`h3=":PORT"`), if any.
    pub alt_svc: Option<Bytes>,
    pub secure: bool,
    /// Advertise SETTINGS_ENABLE_CONNECT_PROTOCOL and accept extended CONNECT (RFC 8441);
    /// without it `:protocol` makes a request malformed.
    pub enable_connect_protocol: bool,
    /// A DATA payload in memory of this many bytes or more is spliced into the output
    /// ([`super::Connection::output_parts`]) instead of copied into its buffer.
    pub splice_min: usize,
    /// A DATA payload of a file not held in memory of this many bytes or more is spliced into
    /// the output as a range of the file, which the writer sends with `sendfile`, instead of
    /// read into the buffer. Only a writer to a plain socket can: `usize::MAX` (the default)
    /// turns it off, as for TLS.
    pub sendfile_min: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_streams: 100,
            max_concurrent_requests: 100,
            input_window: 16 * 1024 * 1024,
            max_header_list: 64 * 1024,
            max_header_fields: 100,
            max_request_body: 1 << 30,
            idle_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            stall_timeout: Duration::from_secs(60),
            max_resets_per_second: 200,
            max_control_frames_per_second: 1000,
            max_write: DEFAULT_MAX_WRITE,
            server_name: None,
            alt_svc: None,
            secure: false,
            enable_connect_protocol: false,
            splice_min: output::SPLICE_MIN,
            sendfile_min: usize::MAX,
        }
    }
}
