//! Sans-IO HTTP/1.x codec: request heads are parsed from bytes (on httparse) with the
//! framing checks RFC 9112 asks of a server; responses are serialized into a buffer.
//! Nothing here touches a socket or a clock. See `LIFECYCLE.md` for how a connection uses it.

mod chunked;
mod client;
mod framing;
mod parse;
mod parse_memo;
mod write;

pub use chunked::{ChunkedDecoder, Decoded};
pub use client::{
    parse_response_head, write_request_head, MalformedResponse, ParsedResponseHead, RequestFraming,
    RequestHead, ResponseFraming, MAX_RESPONSE_FIELDS,
};
pub use parse::{parse_head, BodyFraming, Head, HeadLimits, MAX_FIELDS};
pub use parse_memo::ParseMemo;
pub use write::{
    itoa, write_chunk, write_chunk_size, write_continue, write_head, write_interim,
    write_last_chunk, write_switching_head, write_tunnel_head, BodyLength, ResponseHead,
};

/// Why a request was rejected. Each maps to the status the client gets; after any of these the
/// connection is closed, since the framing of what follows cannot be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Malformed request: 400, with what was wrong.
    BadRequest(&'static str),
    /// The request target is longer than the limit: 414.
    TargetTooLong,
    /// The header section is larger than the limit or has too many fields: 431.
    HeadTooLarge,
    /// A transfer coding we do not implement: 501.
    NotImplemented(&'static str),
    /// An `Expect` other than `100-continue`: 417.
    ExpectationFailed,
    /// Not HTTP/1.0 or HTTP/1.1: 505.
    VersionNotSupported,
    /// The declared body exceeds `limit-request-body`: 413.
    BodyTooLarge,
}

impl Error {
    pub fn status(self) -> u16 {
        match self {
            Error::BadRequest(_) => 400,
            Error::TargetTooLong => 414,
            Error::HeadTooLarge => 431,
            Error::NotImplemented(_) => 501,
            Error::ExpectationFailed => 417,
            Error::VersionNotSupported => 505,
            Error::BodyTooLarge => 413,
        }
    }

    /// A short reason for the error log.
    pub fn reason(self) -> &'static str {
        match self {
            Error::BadRequest(r) | Error::NotImplemented(r) => r,
            Error::TargetTooLong => "request target too long",
            Error::HeadTooLarge => "request header section too large",
            Error::ExpectationFailed => "unsupported Expect",
            Error::VersionNotSupported => "unsupported HTTP version",
            Error::BodyTooLarge => "request body too large",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cheap stand-in for the fuzz target that runs in every `cargo test`: random and
    /// mutated requests must parse or fail, never panic, and ranges must stay in bounds.
    #[test]
    fn random_input_never_panics() {
        let limits = HeadLimits {
            head_size: 512,
            target_size: 128,
            fields: 8,
            body_size: 1 << 20,
        };
        let seed = b"POST /a?b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n";
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let mut input = seed.to_vec();
            for _ in 0..(next() % 6) {
                let pos = (next() as usize) % input.len();
                match next() % 3 {
                    0 => input[pos] = next() as u8,
                    1 => input.insert(pos, next() as u8),
                    _ => {
                        input.remove(pos);
                    }
                }
            }
            if let Ok(Some(head)) = parse_head(&input, &limits) {
                assert!(head.len <= input.len() && head.target.end <= head.len);
                let mut dec = ChunkedDecoder::new(64);
                let mut rest = &input[head.len..];
                while let Ok(d) = dec.decode(rest) {
                    assert!(d.consumed <= rest.len() && d.data.end <= rest.len());
                    if d.done || d.consumed == 0 {
                        break;
                    }
                    rest = &rest[d.consumed..];
                }
            }
        }
    }

    /// The same for response heads and chunked bodies as the upstream client reads them.
    #[test]
    fn random_responses_never_panic() {
        let seed = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX: y\r\n\r\n5\r\nhello\r\n0\r\nT: 1\r\n\r\n";
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let mut input = seed.to_vec();
            for _ in 0..(next() % 6) {
                let pos = (next() as usize) % input.len();
                match next() % 3 {
                    0 => input[pos] = next() as u8,
                    1 => input.insert(pos, next() as u8),
                    _ => {
                        input.remove(pos);
                    }
                }
            }
            if let Ok(Some(head)) = parse_response_head(&input, false, 512, 128) {
                assert!(head.len <= input.len());
                assert!(head
                    .fields
                    .iter()
                    .all(|(n, v)| n.end <= head.len && v.end <= head.len));
                let mut dec = ChunkedDecoder::new(64);
                let mut rest = &input[head.len..];
                while let Ok(d) = dec.decode(rest) {
                    assert!(d.consumed <= rest.len() && d.data.end <= rest.len());
                    if d.done || d.consumed == 0 {
                        let _ = dec.take_trailers();
                        break;
                    }
                    rest = &rest[d.consumed..];
                }
            }
        }
    }
}
