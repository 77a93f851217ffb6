//! HTTP/2 frames (RFC 9113 section 4 and 6): decoding with every per-frame validation, and
//! encoding into a caller's buffer. Sans-IO: bytes in, typed frames or error codes out.
//!
//! Decoding checks what can be checked from one frame alone (lengths, stream id zero or not,
//! padding, setting values). What needs connection state (stream states, windows) is checked
//! by the connection.

use std::fmt;

/// The fixed frame header length.
pub const HEADER_LEN: usize = 9;
/// SETTINGS_MAX_FRAME_SIZE's initial value and lower bound.
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 16_384;
/// SETTINGS_MAX_FRAME_SIZE's upper bound.
pub const MAX_MAX_FRAME_SIZE: u32 = (1 << 24) - 1;
/// The largest flow-control window (2^31-1).
pub const MAX_WINDOW: u32 = 0x7fff_ffff;
/// Flow-control windows start at this size.
pub const DEFAULT_WINDOW: u32 = 65_535;
/// The client connection preface.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
    /// RFC 9218 section 7.1.
    pub const PRIORITY_UPDATE: u8 = 0x10;
}

pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
    /// RFC 8441 section 3: extended CONNECT (`:protocol`) is accepted.
    pub const ENABLE_CONNECT_PROTOCOL: u16 = 0x8;
    /// RFC 9218 section 2.1.
    pub const NO_RFC7540_PRIORITIES: u16 = 0x9;
}

/// An HTTP/2 error code (RFC 9113 section 7).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Reason(pub u32);

impl Reason {
    pub const NO_ERROR: Reason = Reason(0x0);
    pub const PROTOCOL_ERROR: Reason = Reason(0x1);
    pub const INTERNAL_ERROR: Reason = Reason(0x2);
    pub const FLOW_CONTROL_ERROR: Reason = Reason(0x3);
    pub const SETTINGS_TIMEOUT: Reason = Reason(0x4);
    pub const STREAM_CLOSED: Reason = Reason(0x5);
    pub const FRAME_SIZE_ERROR: Reason = Reason(0x6);
    pub const REFUSED_STREAM: Reason = Reason(0x7);
    pub const CANCEL: Reason = Reason(0x8);
    pub const COMPRESSION_ERROR: Reason = Reason(0x9);
    pub const CONNECT_ERROR: Reason = Reason(0xa);
    pub const ENHANCE_YOUR_CALM: Reason = Reason(0xb);
    pub const INADEQUATE_SECURITY: Reason = Reason(0xc);
    pub const HTTP_1_1_REQUIRED: Reason = Reason(0xd);

    pub fn name(self) -> &'static str {
        const NAMES: [&str; 14] = [
            "NO_ERROR",
            "PROTOCOL_ERROR",
            "INTERNAL_ERROR",
            "FLOW_CONTROL_ERROR",
            "SETTINGS_TIMEOUT",
            "STREAM_CLOSED",
            "FRAME_SIZE_ERROR",
            "REFUSED_STREAM",
            "CANCEL",
            "COMPRESSION_ERROR",
            "CONNECT_ERROR",
            "ENHANCE_YOUR_CALM",
            "INADEQUATE_SECURITY",
            "HTTP_1_1_REQUIRED",
        ];
        NAMES.get(self.0 as usize).copied().unwrap_or("UNKNOWN")
    }
}

impl fmt::Debug for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What is wrong with a frame: the whole connection, or one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    Connection(Reason),
    Stream(u32, Reason),
}

/// The nine-byte frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub len: u32,
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
}

impl Head {
    #[inline]
    pub fn parse(b: &[u8; HEADER_LEN]) -> Head {
        // The first eight bytes read as one word: the length, type, flags and the stream
        // id's first three bytes.
        let w = u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        Head {
            len: (w >> 40) as u32,
            kind: (w >> 32) as u8,
            flags: (w >> 24) as u8,
            // The reserved bit is ignored on receipt (section 4.1).
            stream: ((w as u32) << 8 | u32::from(b[8])) & MAX_WINDOW,
        }
    }
}

/// An RFC 7540 priority block (section 6.3). Only the self-dependency check uses it; spate
/// schedules by RFC 9218 priorities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dependency {
    pub stream: u32,
    pub exclusive: bool,
    pub weight: u8,
}

/// One decoded frame; payloads borrow the input.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    Data {
        stream: u32,
        end_stream: bool,
        data: &'a [u8],
        /// The whole payload length including padding: what flow control counts.
        flow_len: u32,
    },
    Headers {
        stream: u32,
        end_stream: bool,
        end_headers: bool,
        dependency: Option<Dependency>,
        block: &'a [u8],
    },
    Priority {
        stream: u32,
        dependency: Dependency,
    },
    RstStream {
        stream: u32,
        reason: Reason,
    },
    Settings {
        ack: bool,
        settings: Settings<'a>,
    },
    Ping {
        ack: bool,
        data: [u8; 8],
    },
    GoAway {
        last_stream: u32,
        reason: Reason,
    },
    WindowUpdate {
        stream: u32,
        increment: u32,
    },
    Continuation {
        stream: u32,
        end_headers: bool,
        block: &'a [u8],
    },
    PriorityUpdate {
        stream: u32,
        field: &'a [u8],
    },
    /// A type we do not know, or PUSH_PROMISE's like that only matter to a client: ignored.
    Unknown {
        kind: u8,
    },
}

/// The settings of a SETTINGS frame, validated when decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings<'a>(&'a [u8]);

impl<'a> Settings<'a> {
    pub fn iter(&self) -> impl Iterator<Item = (u16, u32)> + 'a {
        self.0.chunks_exact(6).map(|c| {
            (
                u16::from_be_bytes([c[0], c[1]]),
                u32::from_be_bytes([c[2], c[3], c[4], c[5]]),
            )
        })
    }
}

/// Decodes the frame at the start of `buf` whose header is `head` and whose payload is
/// complete (`buf.len() >= HEADER_LEN + head.len`). `max_frame_size` is our
/// SETTINGS_MAX_FRAME_SIZE.
pub fn decode(head: Head, payload: &[u8], max_frame_size: u32) -> Result<Frame<'_>, FrameError> {
    use FrameError::{Connection as Conn, Stream};
    let id = head.stream;
    if head.len > max_frame_size {
        return Err(Conn(Reason::FRAME_SIZE_ERROR));
    }
    match head.kind {
        kind::DATA => {
            if id == 0 {
                return Err(Conn(Reason::PROTOCOL_ERROR));
            }
            let data = unpad(head.flags, payload)?;
            Ok(Frame::Data {
                stream: id,
                end_stream: head.flags & flag::END_STREAM != 0,
                data,
                flow_len: head.len,
            })
        }
        kind::HEADERS => {
            if id == 0 {
                return Err(Conn(Reason::PROTOCOL_ERROR));
            }
            let mut block = unpad(head.flags, payload)?;
            let dependency = if head.flags & flag::PRIORITY != 0 {
                let (dep, rest) = split_dependency(block).ok_or(Conn(Reason::FRAME_SIZE_ERROR))?;
                block = rest;
                Some(dep)
            } else {
                None
            };
            if dependency.is_some_and(|d| d.stream == id) {
                return Err(Stream(id, Reason::PROTOCOL_ERROR));
            }
            Ok(Frame::Headers {
                stream: id,
                end_stream: head.flags & flag::END_STREAM != 0,
                end_headers: head.flags & flag::END_HEADERS != 0,
                dependency,
                block,
            })
        }
        kind::PRIORITY => {
            if id == 0 {
                return Err(Conn(Reason::PROTOCOL_ERROR));
            }
            if payload.len() != 5 {
                return Err(Stream(id, Reason::FRAME_SIZE_ERROR));
            }
            let (dependency, _) =
                split_dependency(payload).ok_or(Conn(Reason::FRAME_SIZE_ERROR))?;
            if dependency.stream == id {
                return Err(Stream(id, Reason::PROTOCOL_ERROR));
            }
            Ok(Frame::Priority {
                stream: id,
                dependency,
            })
        }
        kind::RST_STREAM => {
            if payload.len() != 4 {
                return Err(Conn(Reason::FRAME_SIZE_ERROR));
            }
            if id == 0 {
                return Err(Conn(Reason::PROTOCOL_ERROR));
            }
            Ok(Frame::RstStream {
                stream: id,
                reason: Reason(be32(payload)),
            })
        }
        kind::SETTINGS => {
            if id != 0 {
                return Err(Conn(Reason::PROTOCOL_ERROR));
            }
            let ack = head.flags & flag::ACK != 0;
            if (ack && !payload.is_empty()) || payload.len() % 6 != 0 {
                return Err(Conn(Reason::FRAME_SIZE_ERROR));
            }
            let settings = Settings(payload);
            for (sid, value) in settings.iter() {
                validate_setting(sid, value)?;
            }
            Ok(Frame::Settings { ack, settings })
        }
        kind::PUSH_PROMISE => {
            // A client never pushes (section 8.4).
            Err(Conn(Reason::PROTOCOL_ERROR))
        }
        kind::PING => {
            if id != 0 {
                return Err(Conn(Reason::PROTOCOL_ERROR));
            }
            let data: [u8; 8] = payload
                .try_into()
                .map_err(|_| Conn(Reason::FRAME_SIZE_ERROR))?;
            Ok(Frame::Ping {
                ack: head.flags & flag::ACK != 0,
                data,
            })
        }
        kind::GOAWAY => {
            if id != 0 {
                return Err(Conn(Reason::PROTOCOL_ERROR));
            }
            if payload.len() < 8 {
                return Err(Conn(Reason::FRAME_SIZE_ERROR));
            }
            Ok(Frame::GoAway {
                last_stream: be32(payload) & MAX_WINDOW,
                reason: Reason(be32(&payload[4..])),
            })
        }
        kind::WINDOW_UPDATE => {
            if payload.len() != 4 {
                return Err(Conn(Reason::FRAME_SIZE_ERROR));
            }
            let increment = be32(payload) & MAX_WINDOW;
            if increment == 0 {
                return Err(if id == 0 {
                    Conn(Reason::PROTOCOL_ERROR)
                } else {
                    Stream(id, Reason::PROTOCOL_ERROR)
                });
            }
            Ok(Frame::WindowUpdate {
                stream: id,
                increment,
            })
        }
        kind::CONTINUATION => {
            if id == 0 {
                return Err(Conn(Reason::PROTOCOL_ERROR));
            }
            Ok(Frame::Continuation {
                stream: id,
                end_headers: head.flags & flag::END_HEADERS != 0,
                block: payload,
            })
        }
        kind::PRIORITY_UPDATE => {
            if id != 0 {
                return Err(Conn(Reason::PROTOCOL_ERROR));
            }
            if payload.len() < 4 {
                return Err(Conn(Reason::FRAME_SIZE_ERROR));
            }
            Ok(Frame::PriorityUpdate {
                stream: be32(payload) & MAX_WINDOW,
                field: &payload[4..],
            })
        }
        other => Ok(Frame::Unknown { kind: other }),
    }
}

/// Writes a frame header.
pub fn put_head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    debug_assert!(len <= MAX_MAX_FRAME_SIZE as usize);
    let l = (len as u32).to_be_bytes();
    let s = stream.to_be_bytes();
    out.extend_from_slice(&[l[1], l[2], l[3], kind, flags, s[0], s[1], s[2], s[3]]);
}

/// Overwrites the length field of a frame header written at `at` (for frames whose payload
/// is written after the header).
pub fn patch_len(out: &mut [u8], at: usize, len: usize) {
    let l = (len as u32).to_be_bytes();
    out[at..at + 3].copy_from_slice(&l[1..]);
}

pub fn put_settings(out: &mut Vec<u8>, settings: &[(u16, u32)]) {
    put_head(out, settings.len() * 6, kind::SETTINGS, 0, 0);
    for (id, v) in settings {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&v.to_be_bytes());
    }
}

pub fn put_settings_ack(out: &mut Vec<u8>) {
    put_head(out, 0, kind::SETTINGS, flag::ACK, 0);
}

pub fn put_ping(out: &mut Vec<u8>, ack: bool, data: &[u8; 8]) {
    put_head(out, 8, kind::PING, if ack { flag::ACK } else { 0 }, 0);
    out.extend_from_slice(data);
}

pub fn put_window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    put_head(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

pub fn put_rst_stream(out: &mut Vec<u8>, stream: u32, reason: Reason) {
    put_head(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&reason.0.to_be_bytes());
}

pub fn put_goaway(out: &mut Vec<u8>, last_stream: u32, reason: Reason) {
    put_head(out, 8, kind::GOAWAY, 0, 0);
    out.extend_from_slice(&last_stream.to_be_bytes());
    out.extend_from_slice(&reason.0.to_be_bytes());
}

fn validate_setting(id: u16, value: u32) -> Result<(), FrameError> {
    let bad = match id {
        setting::ENABLE_PUSH => value > 1,
        setting::INITIAL_WINDOW_SIZE => {
            if value > MAX_WINDOW {
                return Err(FrameError::Connection(Reason::FLOW_CONTROL_ERROR));
            }
            false
        }
        setting::MAX_FRAME_SIZE => !(DEFAULT_MAX_FRAME_SIZE..=MAX_MAX_FRAME_SIZE).contains(&value),
        setting::NO_RFC7540_PRIORITIES => value > 1,
        _ => false,
    };
    if bad {
        Err(FrameError::Connection(Reason::PROTOCOL_ERROR))
    } else {
        Ok(())
    }
}

/// Strips padding (section 6.1): a pad length as long as the rest is a PROTOCOL_ERROR.
fn unpad(flags: u8, payload: &[u8]) -> Result<&[u8], FrameError> {
    if flags & flag::PADDED == 0 {
        return Ok(payload);
    }
    let (&pad, rest) = payload
        .split_first()
        .ok_or(FrameError::Connection(Reason::FRAME_SIZE_ERROR))?;
    let pad = pad as usize;
    if pad >= payload.len() {
        return Err(FrameError::Connection(Reason::PROTOCOL_ERROR));
    }
    Ok(&rest[..rest.len() - pad])
}

fn split_dependency(b: &[u8]) -> Option<(Dependency, &[u8])> {
    if b.len() < 5 {
        return None;
    }
    let raw = be32(b);
    Some((
        Dependency {
            stream: raw & MAX_WINDOW,
            exclusive: raw & 0x8000_0000 != 0,
            weight: b[4],
        },
        &b[5..],
    ))
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        put_head(&mut v, payload.len(), kind, flags, stream);
        v.extend_from_slice(payload);
        v
    }

    fn dec(bytes: &[u8]) -> Result<Frame<'_>, FrameError> {
        let head = Head::parse(bytes[..9].try_into().unwrap());
        decode(head, &bytes[9..], DEFAULT_MAX_FRAME_SIZE)
    }

    #[test]
    fn head_round_trips_and_ignores_reserved_bit() {
        let mut v = Vec::new();
        put_head(&mut v, 0x012345, kind::HEADERS, 0x25, 7);
        v[5] |= 0x80;
        let h = Head::parse(v[..9].try_into().unwrap());
        assert_eq!(
            h,
            Head {
                len: 0x012345,
                kind: kind::HEADERS,
                flags: 0x25,
                stream: 7
            }
        );
    }

    #[test]
    fn data_padding_is_stripped_and_counted() {
        let f = frame(
            kind::DATA,
            flag::PADDED | flag::END_STREAM,
            1,
            b"\x03abc\0\0\0",
        );
        assert_eq!(
            dec(&f),
            Ok(Frame::Data {
                stream: 1,
                end_stream: true,
                data: b"abc",
                flow_len: 7
            })
        );
        let bad = frame(kind::DATA, flag::PADDED, 1, b"\x03ab");
        assert_eq!(
            dec(&bad),
            Err(FrameError::Connection(Reason::PROTOCOL_ERROR))
        );
    }

    #[test]
    fn stream_zero_rules() {
        for k in [
            kind::DATA,
            kind::HEADERS,
            kind::PRIORITY,
            kind::CONTINUATION,
        ] {
            let payload: &[u8] = if k == kind::PRIORITY { &[0; 5] } else { b"" };
            assert_eq!(
                dec(&frame(k, 0, 0, payload)),
                Err(FrameError::Connection(Reason::PROTOCOL_ERROR)),
                "kind {k}"
            );
        }
        assert_eq!(
            dec(&frame(kind::PING, 0, 1, &[0; 8])),
            Err(FrameError::Connection(Reason::PROTOCOL_ERROR))
        );
        assert_eq!(
            dec(&frame(kind::SETTINGS, 0, 3, b"")),
            Err(FrameError::Connection(Reason::PROTOCOL_ERROR))
        );
    }

    #[test]
    fn length_rules() {
        use FrameError::*;
        assert_eq!(
            dec(&frame(kind::PING, 0, 0, &[0; 7])),
            Err(Connection(Reason::FRAME_SIZE_ERROR))
        );
        assert_eq!(
            dec(&frame(kind::PRIORITY, 0, 3, &[0; 4])),
            Err(Stream(3, Reason::FRAME_SIZE_ERROR))
        );
        assert_eq!(
            dec(&frame(kind::RST_STREAM, 0, 3, &[0; 5])),
            Err(Connection(Reason::FRAME_SIZE_ERROR))
        );
        assert_eq!(
            dec(&frame(kind::SETTINGS, 0, 0, &[0; 5])),
            Err(Connection(Reason::FRAME_SIZE_ERROR))
        );
        assert_eq!(
            dec(&frame(kind::SETTINGS, flag::ACK, 0, &[0; 6])),
            Err(Connection(Reason::FRAME_SIZE_ERROR))
        );
        assert_eq!(
            dec(&frame(kind::WINDOW_UPDATE, 0, 0, &[0; 3])),
            Err(Connection(Reason::FRAME_SIZE_ERROR))
        );
        let big = vec![0u8; DEFAULT_MAX_FRAME_SIZE as usize + 1];
        assert_eq!(
            dec(&frame(kind::DATA, 0, 1, &big)),
            Err(Connection(Reason::FRAME_SIZE_ERROR))
        );
    }

    #[test]
    fn settings_values_are_validated() {
        use FrameError::*;
        let s = |id: u16, v: u32| {
            let mut p = id.to_be_bytes().to_vec();
            p.extend_from_slice(&v.to_be_bytes());
            frame(kind::SETTINGS, 0, 0, &p)
        };
        assert_eq!(
            dec(&s(setting::ENABLE_PUSH, 2)),
            Err(Connection(Reason::PROTOCOL_ERROR))
        );
        assert_eq!(
            dec(&s(setting::INITIAL_WINDOW_SIZE, 1 << 31)),
            Err(Connection(Reason::FLOW_CONTROL_ERROR))
        );
        assert_eq!(
            dec(&s(setting::MAX_FRAME_SIZE, 16_383)),
            Err(Connection(Reason::PROTOCOL_ERROR))
        );
        assert_eq!(
            dec(&s(setting::MAX_FRAME_SIZE, 1 << 24)),
            Err(Connection(Reason::PROTOCOL_ERROR))
        );
        let f = s(0xff, 12);
        match dec(&f) {
            Ok(Frame::Settings {
                ack: false,
                settings,
            }) => {
                assert_eq!(settings.iter().collect::<Vec<_>>(), vec![(0xff, 12)])
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn window_update_zero_increment() {
        use FrameError::*;
        assert_eq!(
            dec(&frame(kind::WINDOW_UPDATE, 0, 0, &[0; 4])),
            Err(Connection(Reason::PROTOCOL_ERROR))
        );
        assert_eq!(
            dec(&frame(kind::WINDOW_UPDATE, 0, 5, &[0; 4])),
            Err(Stream(5, Reason::PROTOCOL_ERROR))
        );
        assert_eq!(
            dec(&frame(kind::WINDOW_UPDATE, 0, 5, &[0x80, 0, 0, 9])),
            Ok(Frame::WindowUpdate {
                stream: 5,
                increment: 9
            })
        );
    }

    #[test]
    fn headers_with_priority_and_self_dependency() {
        let f = frame(
            kind::HEADERS,
            flag::PRIORITY | flag::END_HEADERS,
            3,
            &[0x80, 0, 0, 1, 15, 0x82],
        );
        assert_eq!(
            dec(&f),
            Ok(Frame::Headers {
                stream: 3,
                end_stream: false,
                end_headers: true,
                dependency: Some(Dependency {
                    stream: 1,
                    exclusive: true,
                    weight: 15
                }),
                block: &[0x82]
            })
        );
        let own = frame(kind::HEADERS, flag::PRIORITY, 3, &[0, 0, 0, 3, 15]);
        assert_eq!(
            dec(&own),
            Err(FrameError::Stream(3, Reason::PROTOCOL_ERROR))
        );
    }

    #[test]
    fn unknown_frames_pass_and_push_promise_is_refused() {
        assert_eq!(
            dec(&frame(0xfe, 0xff, 0, b"xyz")),
            Ok(Frame::Unknown { kind: 0xfe })
        );
        assert_eq!(
            dec(&frame(kind::PUSH_PROMISE, 0, 1, &[0; 4])),
            Err(FrameError::Connection(Reason::PROTOCOL_ERROR))
        );
    }
}
