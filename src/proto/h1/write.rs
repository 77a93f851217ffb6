//! Response serialization: status line, header fields, and chunk framing.

use crate::http::clock::Date;
use crate::http::response::reason;
use bytes::Bytes;

/// How a response body is delimited on the wire (RFC 9112 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BodyLength {
    /// `Content-Length`.
    Known(u64),
    /// `Transfer-Encoding: chunked`: length unknown, for an HTTP/1.1 client.
    #[default]
    Chunked,
    /// No framing field, the body ends when the connection closes: length unknown, for an
    /// HTTP/1.0 client, which knows no chunked coding. The head says `Connection: close`.
    UntilClose,
}

/// What the codec needs to frame a response head.
pub struct ResponseHead<'a> {
    pub status: u16,
    pub headers: &'a [(Bytes, Bytes)],
    pub body: BodyLength,
    pub keep_alive: bool,
    /// A preformatted `Server: name\r\n` line, or empty.
    pub server_line: &'a [u8],
    /// The Date to write, read by the caller; `None` when `headers` carry their own (a
    /// proxied response).
    pub date: Option<&'a Date>,
}

/// Appends the response head to `out`; returns the number of bytes written.
/// Content-Length is omitted for statuses that have no body (1xx, 204, 304).
pub fn write_head(out: &mut Vec<u8>, head: &ResponseHead<'_>) -> usize {
    let start = out.len();
    write_status_line(out, head.status);
    out.extend_from_slice(head.server_line);
    if let Some(date) = head.date {
        out.extend_from_slice(b"Date: ");
        out.extend_from_slice(&date.text);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(if head.keep_alive {
        b"Connection: keep-alive\r\n"
    } else {
        b"Connection: close\r\n"
    });
    for (name, value) in head.headers {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    let bodiless = head.status < 200 || head.status == 204 || head.status == 304;
    if !bodiless {
        match head.body {
            BodyLength::Known(n) => {
                out.extend_from_slice(b"Content-Length: ");
                out.extend_from_slice(itoa(n, &mut [0; 20]));
                out.extend_from_slice(b"\r\n");
            }
            BodyLength::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
            BodyLength::UntilClose => {}
        }
    }
    out.extend_from_slice(b"\r\n");
    out.len() - start
}

/// The head of a `101 Switching Protocols` that starts a tunnel: `Connection: upgrade`
/// (`headers` carry `Upgrade`), no framing, since what follows is the new protocol.
pub fn write_switching_head(
    out: &mut Vec<u8>,
    server_line: &[u8],
    headers: &[(Bytes, Bytes)],
) -> usize {
    let start = out.len();
    write_status_line(out, 101);
    out.extend_from_slice(server_line);
    out.extend_from_slice(b"Connection: upgrade\r\n");
    write_fields(out, headers);
    out.extend_from_slice(b"\r\n");
    out.len() - start
}

/// The head of a CONNECT's `2xx`: from its end on, the tunnel's bytes (no framing, RFC 9110
/// section 9.3.6). Returns the bytes written.
pub fn write_tunnel_head(
    out: &mut Vec<u8>,
    status: u16,
    server_line: &[u8],
    headers: &[(Bytes, Bytes)],
) -> usize {
    let start = out.len();
    write_status_line(out, status);
    out.extend_from_slice(server_line);
    write_fields(out, headers);
    out.extend_from_slice(b"\r\n");
    out.len() - start
}

/// The interim response sent before reading a body the client is waiting to send.
pub fn write_continue(out: &mut Vec<u8>) {
    out.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
}

/// An interim response (103 Early Hints, 102) ahead of the final one: status line and
/// fields, no body. Returns the bytes written.
pub fn write_interim(out: &mut Vec<u8>, status: u16, fields: &[(Bytes, Bytes)]) -> usize {
    let start = out.len();
    write_status_line(out, status);
    write_fields(out, fields);
    out.extend_from_slice(b"\r\n");
    out.len() - start
}

/// Frames one chunk of a chunked body; an empty `data` writes the last chunk.
pub fn write_chunk(out: &mut Vec<u8>, data: &[u8]) {
    if data.is_empty() {
        out.extend_from_slice(b"0\r\n\r\n");
        return;
    }
    write_chunk_size(out, data.len());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// The line before a chunk's data (`1f4\r\n`), for senders that write the data separately;
/// the data must be followed by CR LF.
pub fn write_chunk_size(out: &mut Vec<u8>, len: usize) {
    let mut hex = [0u8; 16];
    let mut n = len;
    let mut i = hex.len();
    loop {
        i -= 1;
        hex[i] = b"0123456789abcdef"[n & 15];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&hex[i..]);
    out.extend_from_slice(b"\r\n");
}

/// The last chunk with a trailer section.
pub fn write_last_chunk(out: &mut Vec<u8>, trailers: &[(Bytes, Bytes)]) {
    out.extend_from_slice(b"0\r\n");
    write_fields(out, trailers);
    out.extend_from_slice(b"\r\n");
}

/// `Name: value` lines.
fn write_fields(out: &mut Vec<u8>, fields: &[(Bytes, Bytes)]) {
    for (name, value) in fields {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
}

fn write_status_line(out: &mut Vec<u8>, status: u16) {
    match status {
        200 => out.extend_from_slice(b"HTTP/1.1 200 OK\r\n"),
        304 => out.extend_from_slice(b"HTTP/1.1 304 Not Modified\r\n"),
        404 => out.extend_from_slice(b"HTTP/1.1 404 Not Found\r\n"),
        _ => {
            out.extend_from_slice(b"HTTP/1.1 ");
            out.extend_from_slice(itoa(u64::from(status), &mut [0; 20]));
            out.push(b' ');
            out.extend_from_slice(reason(status).as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// `n` in decimal, written at the end of `buf`.
pub fn itoa(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    &buf[i..]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head_text(status: u16, len: Option<u64>, keep_alive: bool) -> String {
        head_framed(
            status,
            len.map_or(BodyLength::Chunked, BodyLength::Known),
            keep_alive,
        )
    }

    fn head_framed(status: u16, body: BodyLength, keep_alive: bool) -> String {
        let headers = [(
            Bytes::from_static(b"Content-Type"),
            Bytes::from_static(b"text/plain"),
        )];
        let mut out = Vec::new();
        let n = write_head(
            &mut out,
            &ResponseHead {
                status,
                headers: &headers,
                body,
                keep_alive,
                server_line: b"Server: bench\r\n",
                date: Some(&Date::at(784_111_777)),
            },
        );
        assert_eq!(n, out.len());
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn writes_a_keep_alive_head() {
        let t = head_text(200, Some(2), true);
        assert!(
            t.starts_with("HTTP/1.1 200 OK\r\nServer: bench\r\nDate: "),
            "{t}"
        );
        assert!(t.ends_with(
            " GMT\r\nConnection: keep-alive\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n"
        ), "{t}");
    }

    #[test]
    fn framing_depends_on_status_and_length() {
        assert!(head_text(304, Some(10), true)
            .find("Content-Length")
            .is_none());
        assert!(head_text(204, Some(0), true)
            .find("Content-Length")
            .is_none());
        assert!(head_text(200, None, false).contains("Transfer-Encoding: chunked\r\n"));
        assert!(head_text(200, None, false).contains("Connection: close\r\n"));
        assert!(head_text(416, Some(0), true).starts_with("HTTP/1.1 416 Range Not Satisfiable\r\n"));
        assert!(head_text(200, Some(1234567), true).contains("Content-Length: 1234567\r\n"));
    }

    #[test]
    fn a_body_until_close_has_no_framing_field() {
        let t = head_framed(200, BodyLength::UntilClose, false);
        assert!(!t.contains("Transfer-Encoding"), "{t}");
        assert!(!t.contains("Content-Length"), "{t}");
        assert!(t.contains("Connection: close\r\n"), "{t}");
        assert!(t.ends_with("Content-Type: text/plain\r\n\r\n"), "{t}");
    }

    #[test]
    fn frames_chunks() {
        let mut out = Vec::new();
        write_chunk(&mut out, &[b'x'; 26]);
        write_chunk(&mut out, b"");
        assert_eq!(
            out,
            [&b"1a\r\n"[..], &[b'x'; 26], b"\r\n0\r\n\r\n"].concat()
        );
    }

    #[test]
    fn frames_trailers() {
        let mut out = Vec::new();
        write_chunk_size(&mut out, 4096);
        write_last_chunk(
            &mut out,
            &[(Bytes::from_static(b"X-Sum"), Bytes::from_static(b"7"))],
        );
        assert_eq!(out, b"1000\r\n0\r\nX-Sum: 7\r\n\r\n");
    }
}
