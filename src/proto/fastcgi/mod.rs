//! FastCGI 1.0 (the responder role), sans-IO: the records a web server sends
//! (BEGIN_REQUEST, PARAMS, STDIN), the records it receives (STDOUT, STDERR, END_REQUEST) and
//! the CGI response head at the start of STDOUT (`Status:`, `Location:`, header fields).
//!
//! Every record is an 8-byte header (version 1, type, request id, content length, padding
//! length, reserved) and at most 65535 bytes of content; one connection carries one request
//! at a time here (id 1), and with `FCGI_KEEP_CONN` the application leaves it open after
//! END_REQUEST for the next.
// Peer input must never panic: outside tests, no unwrap or expect here.

pub mod cgi;
#[cfg(test)]
mod tests;

use bytes::{Buf, BufMut, Bytes, BytesMut};

pub const VERSION: u8 = 1;
pub const HEADER_LEN: usize = 8;
/// The largest content one record carries.
pub const MAX_CONTENT: usize = 0xffff;
/// The one request id used on a connection (requests are not multiplexed).
pub const REQUEST_ID: u16 = 1;

pub const BEGIN_REQUEST: u8 = 1;
pub const ABORT_REQUEST: u8 = 2;
pub const END_REQUEST: u8 = 3;
pub const PARAMS: u8 = 4;
pub const STDIN: u8 = 5;
pub const STDOUT: u8 = 6;
pub const STDERR: u8 = 7;
pub const GET_VALUES_RESULT: u8 = 10;
pub const UNKNOWN_TYPE: u8 = 11;

const RESPONDER: u16 = 1;
const KEEP_CONN: u8 = 1;

/// Appends one record header for `len` bytes of content (no padding).
fn put_header(out: &mut BytesMut, kind: u8, len: usize) {
    out.put_u8(VERSION);
    out.put_u8(kind);
    out.put_u16(REQUEST_ID);
    out.put_u16(len as u16);
    out.put_u8(0);
    out.put_u8(0);
}

/// Appends BEGIN_REQUEST for the responder role; `keep_conn` asks the application to keep the
/// connection open after the request.
pub fn begin_request(out: &mut BytesMut, keep_conn: bool) {
    put_header(out, BEGIN_REQUEST, 8);
    out.put_u16(RESPONDER);
    out.put_u8(if keep_conn { KEEP_CONN } else { 0 });
    out.put_bytes(0, 5);
}

/// Appends `data` as records of `kind` (STDIN, PARAMS), split at the record size. Empty
/// `data` appends nothing: the empty record that ends a stream is [`end_stream`].
pub fn stream_records(out: &mut BytesMut, kind: u8, data: &[u8]) {
    for chunk in data.chunks(MAX_CONTENT) {
        put_header(out, kind, chunk.len());
        out.extend_from_slice(chunk);
    }
}

/// Appends the empty record that ends the PARAMS or STDIN stream.
pub fn end_stream(out: &mut BytesMut, kind: u8) {
    put_header(out, kind, 0);
}

/// Appends the header of one record of `kind` whose `len` bytes of content the caller sends
/// next (a request body piece sent without copying). `len` must be at most [`MAX_CONTENT`].
pub fn record_header(kind: u8, len: usize) -> [u8; HEADER_LEN] {
    let len = len.min(MAX_CONTENT) as u16;
    let [hi, lo] = len.to_be_bytes();
    let [id_hi, id_lo] = REQUEST_ID.to_be_bytes();
    [VERSION, kind, id_hi, id_lo, hi, lo, 0, 0]
}

/// The name-value pairs of PARAMS, encoded as the protocol lays them out (lengths of one
/// byte below 128, else four bytes with the top bit set).
#[derive(Default)]
pub struct Params {
    buf: BytesMut,
}

impl Params {
    pub fn with_capacity(n: usize) -> Params {
        Params {
            buf: BytesMut::with_capacity(n),
        }
    }

    pub fn push(&mut self, name: &[u8], value: &[u8]) {
        put_len(&mut self.buf, name.len());
        put_len(&mut self.buf, value.len());
        self.buf.extend_from_slice(name);
        self.buf.extend_from_slice(value);
    }

    /// `HTTP_` and the field name upper-cased with `-` as `_` (CGI's meta-variable).
    pub fn push_http(&mut self, field: &[u8], value: &[u8]) {
        put_len(&mut self.buf, field.len() + 5);
        put_len(&mut self.buf, value.len());
        self.buf.extend_from_slice(b"HTTP_");
        self.buf.extend(field.iter().map(|&b| match b {
            b'-' => b'_',
            b => b.to_ascii_uppercase(),
        }));
        self.buf.extend_from_slice(value);
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }
}

fn put_len(out: &mut BytesMut, len: usize) {
    if len < 128 {
        out.put_u8(len as u8);
    } else {
        out.put_u32((len as u32) | 0x8000_0000);
    }
}

/// Reads name-value pairs back (a GET_VALUES_RESULT, and the tests).
pub fn parse_params(mut data: &[u8]) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
    fn len(data: &mut &[u8]) -> Option<usize> {
        let first = *data.first()?;
        if first < 128 {
            data.advance(1);
            return Some(usize::from(first));
        }
        let b: [u8; 4] = data.get(..4)?.try_into().ok()?;
        data.advance(4);
        Some((u32::from_be_bytes(b) & 0x7fff_ffff) as usize)
    }
    let mut out = Vec::new();
    while !data.is_empty() {
        let n = len(&mut data)?;
        let v = len(&mut data)?;
        let name = data.get(..n)?.to_vec();
        let value = data.get(n..n.checked_add(v)?)?.to_vec();
        data.advance(n + v);
        out.push((name, value));
    }
    Some(out)
}

/// One record received from the application.
#[derive(Debug, PartialEq, Eq)]
pub enum Record {
    Stdout(Bytes),
    Stderr(Bytes),
    /// END_REQUEST: the application's exit status and protocol status (0: request complete).
    End {
        app_status: u32,
        protocol_status: u8,
    },
    /// A management record (request id 0) or one for another request: ignored.
    Other,
}

/// Why the application's bytes are not FastCGI.
#[derive(Debug, PartialEq, Eq)]
pub enum RecordError {
    Version(u8),
    /// A record type a responder never receives.
    Type(u8),
    /// END_REQUEST with other than 8 bytes of content.
    BadEnd,
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::Version(v) => write!(f, "record version {v}, expected 1"),
            RecordError::Type(t) => write!(f, "unexpected record type {t}"),
            RecordError::BadEnd => f.write_str("malformed END_REQUEST record"),
        }
    }
}

/// Takes the next whole record from the front of `buf`: `Ok(None)` until it is all in. A
/// record is at most 8 + 65535 + 255 bytes, so that bounds what a caller buffers.
pub fn next_record(buf: &mut BytesMut) -> Result<Option<Record>, RecordError> {
    let Some(head) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    if head[0] != VERSION {
        return Err(RecordError::Version(head[0]));
    }
    let kind = head[1];
    let id = u16::from_be_bytes([head[2], head[3]]);
    let len = usize::from(u16::from_be_bytes([head[4], head[5]]));
    let padding = usize::from(head[6]);
    if buf.len() < HEADER_LEN + len + padding {
        return Ok(None);
    }
    buf.advance(HEADER_LEN);
    let content = buf.split_to(len).freeze();
    buf.advance(padding);
    if id != REQUEST_ID {
        return Ok(Some(Record::Other));
    }
    Ok(Some(match kind {
        STDOUT => Record::Stdout(content),
        STDERR => Record::Stderr(content),
        END_REQUEST => {
            let b: [u8; 8] = content
                .get(..)
                .and_then(|c| c.try_into().ok())
                .ok_or(RecordError::BadEnd)?;
            Record::End {
                app_status: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
                protocol_status: b[4],
            }
        }
        GET_VALUES_RESULT | UNKNOWN_TYPE => Record::Other,
        t => return Err(RecordError::Type(t)),
    }))
}

/// The most bytes [`next_record`] may need buffered for one record.
pub const MAX_RECORD: usize = HEADER_LEN + MAX_CONTENT + 255;
