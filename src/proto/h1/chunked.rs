//! Decoder for the chunked transfer coding (RFC 9112 7.1), of request bodies and of the
//! responses the upstream client reads.

use super::Error;
use crate::http::{hex_value, Trailers};
use bytes::Bytes;
use std::ops::Range;

/// The longest chunk-size line (size plus extensions) accepted.
const MAX_SIZE_LINE: usize = 1024;

/// Incremental decoder: feed it what has arrived, it reports how much it consumed and where the
/// data bytes are. It keeps no data bytes; it keeps the trailer section (bounded by
/// `max_trailers`) so that it can be forwarded ([`ChunkedDecoder::take_trailers`]).
#[derive(Debug)]
pub struct ChunkedDecoder {
    state: State,
    /// Bytes of the current size line, extensions or trailer section seen so far.
    line_len: usize,
    /// Limit on the trailer section (the head size limit).
    max_trailers: usize,
    trailer_len: usize,
    /// The trailer lines as received; empty (and unallocated) when there are none.
    trailer_bytes: Vec<u8>,
    /// The parsed trailer fields, once the body is done.
    trailers: Option<Trailers>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading hex digits of a chunk size; holds the value so far and whether any digit came.
    Size(u64, bool),
    /// After the size: extensions up to CR LF.
    Extension(u64),
    /// Expecting LF after the size line's CR.
    SizeLf(u64),
    Data(u64),
    DataCr,
    DataLf,
    /// At the start of a trailer line (or the final empty line).
    TrailerStart,
    /// Inside a trailer line.
    Trailer,
    TrailerLf,
    /// The final CR seen, expecting LF.
    EndLf,
    Done,
}

/// The result of one [`ChunkedDecoder::decode`] call.
#[derive(Debug, PartialEq, Eq)]
pub struct Decoded {
    /// Bytes of the input used (framing and data).
    pub consumed: usize,
    /// Where in the input the data bytes of this step are (empty when none).
    pub data: Range<usize>,
    /// The last chunk and the trailers have been read.
    pub done: bool,
}

impl ChunkedDecoder {
    pub fn new(max_trailers: usize) -> ChunkedDecoder {
        ChunkedDecoder {
            state: State::Size(0, false),
            line_len: 0,
            max_trailers,
            trailer_len: 0,
            trailer_bytes: Vec::new(),
            trailers: None,
        }
    }

    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The trailer fields, once `done` was reported; `None` when there were none (or they
    /// were taken already).
    pub fn take_trailers(&mut self) -> Option<Trailers> {
        self.trailers.take()
    }

    /// Consumes framing from `buf` up to and including at most one run of data bytes.
    /// Call again with the rest until `consumed` is 0 or `done`.
    pub fn decode(&mut self, buf: &[u8]) -> Result<Decoded, Error> {
        let mut i = 0;
        while i < buf.len() {
            let b = buf[i];
            match self.state {
                State::Size(n, any) => {
                    if let Some(d) = hex_value(b) {
                        let n = n
                            .checked_mul(16)
                            .and_then(|n| n.checked_add(u64::from(d)))
                            .ok_or(Error::BadRequest("chunk size overflows"))?;
                        self.state = State::Size(n, true);
                    } else if !any {
                        return Err(Error::BadRequest("invalid chunk size"));
                    } else if b == b'\r' {
                        self.state = State::SizeLf(n);
                    } else if b == b';' || b == b' ' || b == b'\t' {
                        self.state = State::Extension(n);
                    } else {
                        return Err(Error::BadRequest("invalid chunk size"));
                    }
                    self.count_line()?;
                }
                State::Extension(n) => {
                    if b == b'\r' {
                        self.state = State::SizeLf(n);
                    } else if b == b'\n' || b == 0 {
                        return Err(Error::BadRequest("invalid chunk extension"));
                    }
                    self.count_line()?;
                }
                State::SizeLf(n) => {
                    if b != b'\n' {
                        return Err(Error::BadRequest("bare CR in chunk size line"));
                    }
                    self.line_len = 0;
                    self.state = if n == 0 {
                        State::TrailerStart
                    } else {
                        State::Data(n)
                    };
                }
                State::Data(n) => {
                    let take = usize::try_from(n).unwrap_or(usize::MAX).min(buf.len() - i);
                    let left = n - take as u64;
                    self.state = if left == 0 {
                        State::DataCr
                    } else {
                        State::Data(left)
                    };
                    return Ok(Decoded {
                        consumed: i + take,
                        data: i..i + take,
                        done: false,
                    });
                }
                State::DataCr => {
                    if b != b'\r' {
                        return Err(Error::BadRequest("chunk data longer than its size"));
                    }
                    self.state = State::DataLf;
                }
                State::DataLf => {
                    if b != b'\n' {
                        return Err(Error::BadRequest("bare CR after chunk data"));
                    }
                    self.state = State::Size(0, false);
                }
                State::TrailerStart => {
                    self.count_trailer()?;
                    self.state = if b == b'\r' {
                        State::EndLf
                    } else {
                        self.trailer_bytes.push(b);
                        State::Trailer
                    };
                }
                State::Trailer => {
                    self.count_trailer()?;
                    if b == b'\r' {
                        self.state = State::TrailerLf;
                    } else if b == b'\n' || b == 0 {
                        return Err(Error::BadRequest("invalid trailer field"));
                    }
                    self.trailer_bytes.push(b);
                }
                State::TrailerLf => {
                    if b != b'\n' {
                        return Err(Error::BadRequest("bare CR in trailer field"));
                    }
                    self.trailer_bytes.push(b);
                    self.state = State::TrailerStart;
                }
                State::EndLf => {
                    if b != b'\n' {
                        return Err(Error::BadRequest("bare CR at the end of a chunked body"));
                    }
                    self.parse_trailers()?;
                    self.state = State::Done;
                    return Ok(Decoded {
                        consumed: i + 1,
                        data: 0..0,
                        done: true,
                    });
                }
                State::Done => break,
            }
            i += 1;
        }
        Ok(Decoded {
            consumed: i,
            data: 0..0,
            done: self.state == State::Done,
        })
    }

    /// Parses the trailer lines collected (each ends in CR LF) into fields.
    fn parse_trailers(&mut self) -> Result<(), Error> {
        if self.trailer_bytes.is_empty() {
            return Ok(());
        }
        let mut section = std::mem::take(&mut self.trailer_bytes);
        section.extend_from_slice(b"\r\n");
        let lines = memchr::memchr_iter(b'\n', &section).count();
        let mut slots = vec![httparse::EMPTY_HEADER; lines];
        let fields = match httparse::parse_headers(&section, &mut slots) {
            Ok(httparse::Status::Complete((_, fields))) => fields,
            _ => return Err(Error::BadRequest("invalid trailer field")),
        };
        let ranges: Vec<_> = fields
            .iter()
            .map(|h| {
                (
                    range_in(&section, h.name.as_bytes()),
                    range_in(&section, h.value),
                )
            })
            .collect();
        let section = Bytes::from(section);
        self.trailers = Some(
            ranges
                .into_iter()
                .map(|(n, v)| (section.slice(n), section.slice(v)))
                .collect(),
        );
        Ok(())
    }

    fn count_line(&mut self) -> Result<(), Error> {
        self.line_len += 1;
        if self.line_len > MAX_SIZE_LINE {
            return Err(Error::BadRequest("chunk size line too long"));
        }
        Ok(())
    }

    fn count_trailer(&mut self) -> Result<(), Error> {
        self.trailer_len += 1;
        if self.trailer_len > self.max_trailers {
            return Err(Error::HeadTooLarge);
        }
        Ok(())
    }
}

/// Where `part` (a subslice of `whole`) lies in `whole`.
fn range_in(whole: &[u8], part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - whole.as_ptr() as usize;
    start..start + part.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` in pieces of `step` bytes; returns the data and the bytes left over.
    fn decode_all(input: &[u8], step: usize) -> Result<(Vec<u8>, usize), Error> {
        let mut d = ChunkedDecoder::new(1024);
        let mut data = Vec::new();
        let mut pos = 0;
        let mut avail = step.min(input.len());
        loop {
            let r = d.decode(&input[pos..avail])?;
            data.extend_from_slice(&input[pos..avail][r.data.clone()]);
            pos += r.consumed;
            if r.done {
                return Ok((data, input.len() - pos));
            }
            if r.consumed == 0 {
                if avail == input.len() {
                    return Err(Error::BadRequest("truncated"));
                }
                avail = (avail + step).min(input.len());
            }
        }
    }

    #[test]
    fn decodes_in_any_split() {
        let body = b"5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-T: 1\r\n\r\nGET";
        for step in 1..body.len() {
            let (data, left) = decode_all(body, step).unwrap();
            assert_eq!(data, b"hello world", "step {step}");
            assert_eq!(left, 3, "step {step}");
        }
    }

    #[test]
    fn keeps_the_trailers_in_any_split() {
        let body = b"3\r\nabc\r\n0\r\nX-Checksum: 42\r\nX-B:  two words \r\n\r\n";
        for step in 1..=body.len() {
            let mut d = ChunkedDecoder::new(1024);
            let mut pos = 0;
            let mut avail = step;
            loop {
                let r = d.decode(&body[pos..avail]).unwrap();
                pos += r.consumed;
                if r.done {
                    break;
                }
                if r.consumed == 0 {
                    avail = (avail + step).min(body.len());
                }
            }
            let t = d.take_trailers().expect("trailers");
            assert_eq!(
                t,
                vec![
                    (Bytes::from_static(b"X-Checksum"), Bytes::from_static(b"42")),
                    (Bytes::from_static(b"X-B"), Bytes::from_static(b"two words")),
                ],
                "step {step}"
            );
            assert_eq!(d.take_trailers(), None);
        }
    }

    #[test]
    fn no_trailers_means_none() {
        let mut d = ChunkedDecoder::new(1024);
        assert!(d.decode(b"0\r\n\r\n").unwrap().done);
        assert_eq!(d.take_trailers(), None);
    }

    #[test]
    fn rejects_malformed_trailers() {
        for bad in [&b"0\r\nNo colon\r\n\r\n"[..], b"0\r\n: empty name\r\n\r\n"] {
            let mut d = ChunkedDecoder::new(1024);
            assert!(d.decode(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn rejects_malformed_chunks() {
        for bad in [
            &b"x\r\n"[..],
            b"5\r\nhelloXX\r\n0\r\n\r\n",
            b"5\nhello\r\n0\r\n\r\n",
            b"fffffffffffffffff\r\n",
            b"\r\n",
            b"0\r\nX: y\r\r\n",
        ] {
            assert!(
                decode_all(bad, 64).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn limits_trailers_and_size_lines() {
        let mut long_ext = b"1;".to_vec();
        long_ext.extend(std::iter::repeat_n(b'a', 2000));
        assert!(decode_all(&long_ext, 4096).is_err());
        let mut d = ChunkedDecoder::new(10);
        let e = d.decode(b"0\r\nX-Long-Trailer: value\r\n\r\n").unwrap_err();
        assert_eq!(e, Error::HeadTooLarge);
    }
}
