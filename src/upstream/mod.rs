//! The client side of the proxy: HTTP/1.1 (`h1`) and HTTP/2 (`h2`) to backends over TCP,
//! TLS or Unix sockets, with a per-worker connection pool; lists of backends (`balance`)
//! with their health (`health`); tunnels (`tunnel`).
//!
//! [`send`] is polled by the client connection's own task (no task per request): it takes a
//! pooled connection or opens one, sends the request head and streams the request body while
//! it reads the response head, then resolves to a [`Response`](crate::http::Response) whose
//! body is a stream the client's codec pulls, so a slow client slows the reads from the
//! backend. Dropping the future or the body cancels the exchange; a connection goes back to
//! the pool only when clean: whole request sent, whole response read, keep-alive allowed.
//!
//! Errors say which side failed ([`Side`](crate::http::Side)), as Pingora's do: 502 when the
//! backend cannot be reached or answers malformed, 504 when it does not answer in time.
//!
//! The modules run one way, each importing only those below it:
//!
//! ```text
//! balance            a list of backends: the choice of one, and the next when it fails
//! dispatch           one try of a backend: HTTP/2 for its share, else HTTP/1.1
//! h1 | h2 | tunnel   the exchange over each (h1 on request / response, h2 on h2_conn)
//! connect            a pooled connection or a new one
//! pool               idle connections, shared HTTP/2 connections (h2_conn), caps (cap)
//! fastcgi            the FastCGI client and its pool, beside them (on conn)
//! backend, errors, lease, fields, timer, read_arena, conn, proxy_line: leaves
//! ```
// Peer input must never panic: outside tests, no unwrap or expect here.

mod backend;
mod balance;
mod cap;
mod conn;
mod connect;
mod dispatch;
mod errors;
mod fastcgi;
mod fields;
mod h1;
mod h2;
mod h2_conn;
mod health;
mod lease;
mod pool;
mod probe;
mod proxy_line;
mod read_arena;
mod request;
mod response;
#[cfg(test)]
pub(crate) mod tests;
mod timer;
mod tunnel;

pub use backend::{tls_client, Backend, Http2, UpstreamRequest};
pub use balance::{open_tunnel_balanced, send_balanced, Group, TargetFor};
pub use dispatch::send;
pub use errors::UpstreamError;
pub use fastcgi::{
    exchange as fastcgi_exchange, log_failure as log_fastcgi_failure, FastcgiAnswer, FastcgiError,
    FastcgiPool, FastcgiTarget,
};
pub use fields::is_forbidden_trailer;
pub use h1::EXPECT_WAIT;
pub use health::{backend_health, Board};
pub use pool::{Pool, PoolKey};
pub use tunnel::{open_connect, ConnectError};
pub use tunnel::{open_tunnel, TunnelRequest};
