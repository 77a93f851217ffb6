//! Protocol-neutral request and response types, the Date cache and the Handler trait.

pub mod date;
pub mod request;
pub mod response;

pub use request::{Method, Request, Version};
pub use response::{Body, FileRange, OpenFile, Response};

/// Something that answers requests: a file handler, a fixed response, a redirect, a proxy.
///
/// Handlers are built per worker thread from the configuration, so they may keep per-worker
/// state (an open-file cache) in `RefCell`s without locks; they are never shared across threads.
pub trait Handler {
    /// Produce the response for `req`. Must not block for long: file handlers do `open`/`fstat`
    /// and read small files, nothing slower.
    fn handle(&self, req: &Request) -> Response;
}

/// The value of one hexadecimal digit (percent-encoding, chunk sizes).
pub fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}
