//! The system calls, behind small safe functions: the one place of the crate where `unsafe`
//! is allowed (`lib.rs` denies it everywhere else). Each function takes Rust types (a
//! `RawFd`, a `&CStr`, a slice), returns `std::io::Result` with errno as the error where the
//! call can fail, and costs what the call costs: those on a per-request path are `#[inline]`
//! and allocate nothing.
//!
//! A `RawFd` argument may name any descriptor: the kernel checks it, so a wrong one is an
//! error or the wrong socket, never memory unsafety. Functions that take a descriptor over
//! (`process::adopt_inherited`, `reactor::register`) say why they may.
//!
//! This module is the bottom of the crate: it imports nothing else of it.

// Every `unsafe` block here says why it is sound.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod account;
pub mod buf;
pub mod epoll;
pub mod file;
pub mod memory;
pub mod process;
pub mod random;
pub mod reactor;
pub mod socket;
pub mod time;
