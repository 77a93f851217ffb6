//! Sans-IO protocol codecs: they consume and produce bytes, never touch a socket or a clock.
// Peer input must never panic: outside tests, no unwrap or expect here.

pub mod fastcgi;
pub mod h1;
pub mod h2;
pub mod h3;
pub mod request_head;
