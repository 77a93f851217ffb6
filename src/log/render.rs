//! Turns a compiled format and a [`LogRecord`] into one log line.

use super::format::{Compiled, Piece};
use super::num::{push_u64, push_u64_padded, saturate};
use super::time::{push_time, Calendar};
use super::{Escape, LogRecord};
use std::net::IpAddr;

/// The protocol's name as OpenSSL (and so h2o) logs it.
fn tls_version_name(v: rustls::ProtocolVersion) -> &'static [u8] {
    match v {
        rustls::ProtocolVersion::TLSv1_3 => b"TLSv1.3",
        rustls::ProtocolVersion::TLSv1_2 => b"TLSv1.2",
        _ => b"unknown",
    }
}

/// The suite's OpenSSL name, as h2o logs it (the names `cipher-suite` takes).
fn suite_name(suite: rustls::CipherSuite) -> Option<&'static [u8]> {
    crate::config::TLS13_SUITES
        .iter()
        .chain(crate::config::TLS12_SUITES)
        .find(|(_, s)| *s == suite)
        .map(|(name, _)| name.as_bytes())
}

/// The suite's key length: 128 for AES-128, 256 for AES-256 and ChaCha20.
fn suite_bits(suite: rustls::CipherSuite) -> Option<u64> {
    use rustls::CipherSuite as S;
    match suite {
        S::TLS13_AES_128_GCM_SHA256
        | S::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256
        | S::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => Some(128),
        S::TLS13_AES_256_GCM_SHA384
        | S::TLS13_CHACHA20_POLY1305_SHA256
        | S::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384
        | S::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384
        | S::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        | S::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => Some(256),
        _ => None,
    }
}

/// Appends one line, with its `\n`, to `out`.
pub(crate) fn render(
    format: &Compiled,
    rec: &LogRecord<'_>,
    calendar: &mut Calendar,
    out: &mut Vec<u8>,
) {
    let req = rec.req;
    let mut o = Out {
        out,
        escape: format.escape,
        skip_quote: false,
    };
    for (piece, &alone) in format.pieces.iter().zip(&format.quoted_alone) {
        if let Piece::Literal(text) = piece {
            // The closing quote around a value written as a bare `null`.
            let text = if std::mem::take(&mut o.skip_quote) {
                &text[1..]
            } else {
                &text[..]
            };
            o.out.extend_from_slice(text);
            continue;
        }
        let out = &mut *o.out;
        match piece {
            Piece::Literal(_) => {}
            Piece::LocalAddr => push_ip(out, req.local.ip()),
            Piece::RemoteAddr => push_ip(out, req.peer.ip()),
            Piece::LocalPort => push_u64(out, req.local.port().into()),
            Piece::RemotePort => push_u64(out, req.peer.port().into()),
            // A dash is not a JSON number.
            Piece::BodyBytesClf if rec.body_bytes == 0 && o.escape == Escape::Apache => {
                out.push(b'-')
            }
            Piece::BodyBytesClf | Piece::BodyBytes => push_u64(out, rec.body_bytes),
            Piece::TotalBytes => push_u64(out, rec.total_bytes),
            Piece::Protocol => out.extend_from_slice(req.version.as_str().as_bytes()),
            Piece::Dash => o.missing(alone),
            Piece::Method => o.escaped(req.method.as_bytes()),
            Piece::Query => {
                if let Some(q) = req.query() {
                    out.push(b'?');
                    o.escaped(q);
                }
            }
            Piece::RequestLine => {
                o.escaped(req.method.as_bytes());
                o.out.push(b' ');
                o.escaped(req.target());
                o.out.push(b' ');
                o.out.extend_from_slice(req.version.as_str().as_bytes());
            }
            Piece::Status => push_u64(out, rec.status.into()),
            Piece::Path => o.escaped(req.path()),
            Piece::Authority => o.field(req.authority(), alone),
            Piece::Time(f) => push_time(out, f, rec.received_at, calendar),
            Piece::DurationMicros => push_u64(out, saturate(rec.duration.as_micros())),
            Piece::DurationFrac => {
                push_u64(out, rec.duration.as_secs());
                out.push(b'.');
                push_u64_padded(out, rec.duration.subsec_micros().into(), 6, b'0');
            }
            Piece::DurationMillis => push_u64(out, saturate(rec.duration.as_millis())),
            Piece::DurationSecs => push_u64(out, rec.duration.as_secs()),
            Piece::TlsVersion => o.field(rec.tls.map(|t| tls_version_name(t.version)), alone),
            Piece::TlsResumed => match rec.tls {
                Some(t) => out.push(if t.resumed { b'1' } else { b'0' }),
                None => o.missing(alone),
            },
            Piece::TlsCipher => o.field(rec.tls.and_then(|t| suite_name(t.suite)), alone),
            Piece::TlsCipherBits => match rec.tls.and_then(|t| suite_bits(t.suite)) {
                Some(bits) => push_u64(out, bits),
                None => o.missing(alone),
            },
            Piece::Http2StreamId => match rec.stream_id {
                Some(id) => push_u64(out, id.into()),
                None => o.missing(alone),
            },
            Piece::RequestHeader(name) => o.field(req.header(name), alone),
            Piece::ResponseHeader(name) => {
                let value = rec
                    .resp_headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(name))
                    .map(|(_, v)| &v[..]);
                o.field(value, alone);
            }
        }
    }
    o.out.push(b'\n');
}

/// The line being written, with how values are escaped.
struct Out<'o> {
    out: &'o mut Vec<u8>,
    escape: Escape,
    /// A missing value was written as a bare `null`: the next literal's quote is dropped.
    skip_quote: bool,
}

impl Out<'_> {
    /// A value that may be absent or empty. Apache's style prints `-` for both; in JSON an
    /// empty value is an empty string and an absent one `null`.
    fn field(&mut self, value: Option<&[u8]>, alone: bool) {
        match (value, self.escape) {
            (Some(v), Escape::Json) => self.escaped(v),
            (Some(v), Escape::Apache) if !v.is_empty() => self.escaped(v),
            _ => self.missing(alone),
        }
    }

    /// An absent value: `-`, or `null` in JSON; `alone` between quotes (`"%{referer}i"`),
    /// those quotes are dropped so the value is JSON's null, not the string "null".
    fn missing(&mut self, alone: bool) {
        match self.escape {
            Escape::Apache => self.out.push(b'-'),
            Escape::Json => {
                if alone {
                    self.out.pop();
                    self.skip_quote = true;
                }
                self.out.extend_from_slice(b"null");
            }
        }
    }

    fn escaped(&mut self, v: &[u8]) {
        push_escaped(self.out, v, self.escape);
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Copies `v`, escaping bytes outside printable ASCII, `"` and `\`, so that a line stays one
/// line and quoted fields stay parseable: Apache's style writes them as `\xNN`; JSON's writes
/// `\"`, `\\` and `\u00NN` (so any bytes make valid JSON, as h2o's `escape: json`).
fn push_escaped(out: &mut Vec<u8>, v: &[u8], escape: Escape) {
    let mut rest = v;
    while let Some(i) = rest.iter().position(|&b| needs_escape(b)) {
        out.extend_from_slice(&rest[..i]);
        let b = rest[i];
        let (hi, lo) = (HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]);
        match escape {
            Escape::Apache => out.extend_from_slice(&[b'\\', b'x', hi, lo]),
            Escape::Json if b == b'"' || b == b'\\' => out.extend_from_slice(&[b'\\', b]),
            Escape::Json => out.extend_from_slice(&[b'\\', b'u', b'0', b'0', hi, lo]),
        }
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
        push_escaped(&mut v, b"a\"b\\c\nd\x7f\xff\te ~", Escape::Apache);
        assert_eq!(v, b"a\\x22b\\x5cc\\x0ad\\x7f\\xff\\x09e ~");
    }

    #[test]
    fn json_escapes_keep_any_bytes_valid_json() {
        let mut v = Vec::new();
        push_escaped(&mut v, b"a\"b\\c\nd\x7f\xff\te ~", Escape::Json);
        assert_eq!(v, b"a\\\"b\\\\c\\u000ad\\u007f\\u00ff\\u0009e ~");
    }
}
