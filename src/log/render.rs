//! Turns a compiled format and a [`LogRecord`] into one log line.

use super::format::Piece;
use super::num::{push_u64, push_u64_padded, saturate};
use super::time::{push_time, Clock};
use super::LogRecord;
use std::net::IpAddr;

/// Appends one line, with its `\n`, to `out`.
pub(crate) fn render(pieces: &[Piece], rec: &LogRecord<'_>, clock: &mut Clock, out: &mut Vec<u8>) {
    let req = rec.req;
    for piece in pieces {
        match piece {
            Piece::Literal(text) => out.extend_from_slice(text),
            Piece::LocalAddr => push_ip(out, req.local.ip()),
            Piece::RemoteAddr => push_ip(out, req.peer.ip()),
            Piece::LocalPort => push_u64(out, req.local.port().into()),
            Piece::RemotePort => push_u64(out, req.peer.port().into()),
            Piece::BodyBytesClf if rec.body_bytes == 0 => out.push(b'-'),
            Piece::BodyBytesClf | Piece::BodyBytes => push_u64(out, rec.body_bytes),
            Piece::TotalBytes => push_u64(out, rec.total_bytes),
            Piece::Protocol => out.extend_from_slice(req.version.as_str().as_bytes()),
            Piece::Dash => out.push(b'-'),
            Piece::Method => push_escaped(out, req.method.as_bytes()),
            Piece::Query => {
                if let Some(q) = req.query() {
                    out.push(b'?');
                    push_escaped(out, q);
                }
            }
            Piece::RequestLine => {
                push_escaped(out, req.method.as_bytes());
                out.push(b' ');
                push_escaped(out, req.target());
                out.push(b' ');
                out.extend_from_slice(req.version.as_str().as_bytes());
            }
            Piece::Status => push_u64(out, rec.status.into()),
            Piece::Path => push_escaped(out, req.path()),
            Piece::Authority => push_field(out, req.authority()),
            Piece::Time(f) => push_time(out, f, rec.received_at, clock),
            Piece::DurationMicros => push_u64(out, saturate(rec.duration.as_micros())),
            Piece::DurationFrac => {
                push_u64(out, rec.duration.as_secs());
                out.push(b'.');
                push_u64_padded(out, rec.duration.subsec_micros().into(), 6, b'0');
            }
            Piece::DurationMillis => push_u64(out, saturate(rec.duration.as_millis())),
            Piece::DurationSecs => push_u64(out, rec.duration.as_secs()),
            Piece::RequestHeader(name) => push_field(out, req.header(name)),
            Piece::ResponseHeader(name) => {
                let value = rec
                    .resp_headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
                    .map(|(_, v)| &v[..]);
                push_field(out, value);
            }
        }
    }
    out.push(b'\n');
}

/// A value that may be absent: `-` when missing or empty, as Apache prints it.
fn push_field(out: &mut Vec<u8>, value: Option<&[u8]>) {
    match value {
        Some(v) if !v.is_empty() => push_escaped(out, v),
        _ => out.push(b'-'),
    }
}

/// Copies `v`, writing bytes outside printable ASCII, `"` and `\` as `\xNN` so that a line
/// stays one line and quoted fields stay parseable.
fn push_escaped(out: &mut Vec<u8>, v: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut rest = v;
    while let Some(i) = rest.iter().position(|&b| needs_escape(b)) {
        out.extend_from_slice(&rest[..i]);
        let b = rest[i];
        out.extend_from_slice(&[
            b'\\',
            b'x',
            HEX[usize::from(b >> 4)],
            HEX[usize::from(b & 15)],
        ]);
        rest = &rest[i + 1..];
    }
    out.extend_from_slice(rest);
}

fn needs_escape(b: u8) -> bool {
    !(0x20..0x7f).contains(&b) || b == b'"' || b == b'\\'
}

fn push_ip(out: &mut Vec<u8>, ip: IpAddr) {
    use std::io::Write;
    // A dual-stack listener reports IPv4 clients as `::ffff:a.b.c.d`; log them as IPv4.
    let _ = write!(out, "{}", ip.to_canonical());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_quotes_backslashes_and_control_bytes() {
        let mut v = Vec::new();
        push_escaped(&mut v, b"a\"b\\c\nd\x7f\xff\te ~");
        assert_eq!(v, b"a\\x22b\\x5cc\\x0ad\\x7f\\xff\\x09e ~");
    }
}
