//! Server-wide protocol directives: HTTP/1 timeouts, HTTP/2 settings and request limits.
//!
//! Units follow h2o (its `config_timeout` reads whole seconds): `http1-request-timeout`,
//! `http1-request-io-timeout`, `http2-idle-timeout` and `http2-graceful-shutdown-timeout` are
//! seconds.
//! spate's own timeouts (`http1-keepalive-timeout`, `send-timeout`, `shutdown-timeout`) are
//! seconds; `http1-idle-park-delay` (spate) is milliseconds, as the finer HTTP/1 timeout.

use super::value::Ctx;
use super::yaml::Node;
use super::Config;
use std::time::Duration;

/// Applies one protocol or limit directive. Returns false when `name` is not one of them.
pub(super) fn apply(ctx: &mut Ctx, name: &str, v: &Node, c: &mut Config) -> bool {
    match name {
        "http1-request-timeout" => set(&mut c.http1.request_timeout, ctx.seconds(name, v)),
        "http1-request-io-timeout" => set(&mut c.http1.request_io_timeout, ctx.seconds(name, v)),
        "http1-keepalive-timeout" => set(&mut c.http1.keepalive_timeout, ctx.seconds(name, v)),
        "send-timeout" => set(&mut c.http1.send_timeout, ctx.seconds(name, v)),
        "http1-idle-park-delay" => {
            let delay = match v.as_str() {
                Some("OFF") => Some(Duration::ZERO),
                _ => ctx.millis(name, v),
            };
            set(&mut c.http1.idle_park_delay, delay)
        }
        "http1-lane" => set(&mut c.http1.lane, ctx.bool(name, v)),
        "http1-upgrade-to-http2" => set(&mut c.http1.upgrade_to_http2, ctx.bool(name, v)),
        "http2-max-concurrent-requests-per-connection" => set(
            &mut c.http2.max_concurrent_requests_per_connection,
            ctx.int(name, v, 1),
        ),
        "http2-max-streams" => set(&mut c.http2.max_streams, ctx.int(name, v, 1)),
        "http2-input-window-size" => {
            // RFC 9113 6.9.1: a flow-control window is at most 2^31-1; below 65535 is useless.
            match ctx.int::<u32>(name, v, 65_535) {
                Some(n) if n <= 0x7fff_ffff => c.http2.input_window_size = n,
                Some(_) => ctx.error(v.line, format!("{name} must be at most 2147483647")),
                None => {}
            }
        }
        "http2-idle-timeout" => set(&mut c.http2.idle_timeout, ctx.seconds(name, v)),
        "http2-graceful-shutdown-timeout" => {
            set(&mut c.http2.graceful_shutdown_timeout, ctx.seconds(name, v))
        }
        "http2-header-timeout" => set(&mut c.http2.header_timeout, ctx.seconds(name, v)),
        "http2-max-resets-per-second" => {
            set(&mut c.http2.max_resets_per_second, ctx.int(name, v, 1))
        }
        "http2-max-control-frames-per-second" => set(
            &mut c.http2.max_control_frames_per_second,
            ctx.int(name, v, 1),
        ),
        // At least one DATA frame of the default size.
        "http2-max-write-size" => set(&mut c.http2.max_write_size, ctx.int(name, v, 16_384)),
        "limit-request-body" => set(&mut c.limits.request_body, ctx.uint(name, v, 0)),
        "max-request-head-size" => set(&mut c.limits.request_head, ctx.int(name, v, 256)),
        "max-request-field-section-size" => {
            set(&mut c.limits.request_field_section, ctx.int(name, v, 256))
        }
        "max-request-target-size" => set(&mut c.limits.request_target, ctx.int(name, v, 1)),
        "max-request-headers" => set(&mut c.limits.request_headers, ctx.int(name, v, 1)),
        "max-pipelined-requests" => set(&mut c.limits.pipelined_requests, ctx.int(name, v, 1)),
        _ => return false,
    }
    true
}

fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}
