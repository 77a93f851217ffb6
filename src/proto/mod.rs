//! Sans-IO protocol codecs: they consume and produce bytes, never touch a socket or a clock.

pub mod h1;
pub mod h2;
