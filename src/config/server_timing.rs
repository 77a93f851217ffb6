//! `server-timing: ON | OFF | ENFORCE` (h2o 2.3): the `Server-Timing` header, and trailer
//! where the transport allows one.

use super::value::{show, Ctx};
use super::yaml::Node;

/// `server-timing` in effect for a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ServerTiming {
    /// No header (the default): the path's handler is not wrapped, so it costs nothing.
    #[default]
    Off,
    /// The header; the trailer over HTTP/2 and HTTP/3, and over HTTP/1.1 when the answer
    /// is chunked anyway.
    On,
    /// As `On`, and an HTTP/1.1 answer is made chunked so that it has the trailer too.
    Enforce,
}

/// Reads the directive's value; `None` after reporting a bad one.
pub(super) fn parse(ctx: &mut Ctx, v: &Node) -> Option<ServerTiming> {
    if let Some(on) = v.as_bool() {
        return Some(if on {
            ServerTiming::On
        } else {
            ServerTiming::Off
        });
    }
    if v.as_str()
        .is_some_and(|s| s.eq_ignore_ascii_case("enforce"))
    {
        return Some(ServerTiming::Enforce);
    }
    ctx.error(
        v.line,
        format!("server-timing expects ON, OFF or ENFORCE, got {}", show(v)),
    );
    None
}
