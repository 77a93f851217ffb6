//! HTTP/2 (RFC 9113), sans-IO: the frame codec ([`frame`]), HPACK ([`hpack`]), streams
//! ([`stream`]) and the connection state machine ([`conn`]). The socket side is
//! `server::h2`; the client side of a connection to a backend is [`client`] (driven by
//! `upstream::h2`). See `LIFECYCLE.md` for the states and where each transition happens.

pub mod client;
pub mod conn;
pub mod flow;
pub mod frame;
pub mod hpack;
pub mod output;
#[cfg(test)]
mod pair_tests;
mod ready;
mod runs;
pub mod stream;
mod table;

pub use conn::{Closed, Connection, Parked, Released, Settings, TurnBuffers, DEFAULT_MAX_WRITE};
pub use output::OutputParts;
pub use runs::RunBuffer;
