//! spate: a web server and reverse proxy configured in h2o's YAML dialect.
//!
//! Data flows one way: socket -> protocol codec -> [`http::Request`] -> host/path routing
//! ([`handler::Router`]) -> handler -> [`http::Response`] -> protocol codec -> socket.
//! Handlers never see which protocol carried a request; codecs never see which handler answered.
//!
//! Every system call that needs `unsafe` is in [`sys`], behind a safe function; the rest of
//! the crate has none. Outside tests, no `unwrap` or `expect` either: a value a peer can
//! shape becomes an error, never a panic (clippy enforces it below).

#![deny(unsafe_code)]
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod acme;
pub mod cache;
pub mod config;
pub mod fleet;
pub mod handler;
pub mod http;
pub mod log;
pub mod metrics;
pub mod proto;
pub mod server;
#[allow(unsafe_code)]
pub mod sys;
pub mod tls;
pub mod upstream;
