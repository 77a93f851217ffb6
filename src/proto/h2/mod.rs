//! HTTP/2 (RFC 9113). The framing engine comes later; for now this holds HPACK (RFC 7541),
//! the header compression both directions of a connection use.

pub mod hpack;
