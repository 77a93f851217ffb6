//! The compressed body: pulls the original body a piece at a time and yields what the encoder
//! makes of it, so memory per response stays bounded whatever the body's size.

use super::encoder::{Encoder, Op};
use super::Coding;
use crate::http::body::Next;
use crate::http::{Body, BodyError, BodySource, BodyStream, Frame, Side, Trailers};
use bytes::Bytes;
use std::task::{Context, Poll};

/// Input taken from the source at a time (a file is read this much per `pread`).
const IN_CHUNK: usize = 32 * 1024;

/// Output gathered before it is handed on: enough for large writes, small enough that a slow
/// client holds little per response.
const OUT_TARGET: usize = 16 * 1024;

/// The original body, read piece by piece.
enum Source {
    /// Known (in memory or a file range): pulled `IN_CHUNK` at a time, shared when in memory,
    /// else read into `buf` (a file is never read whole).
    Known { body: BodySource, buf: Vec<u8> },
    /// Produced over time (a proxied response).
    Stream(Box<dyn BodyStream>),
    /// Nothing (an empty body).
    Empty,
}

/// What the source gave.
enum Input {
    Data(Bytes),
    /// Nothing now; the source will wake the task.
    Pending,
    End(Option<Trailers>),
    Failed(BodyError),
}

impl Source {
    fn next(&mut self, cx: &mut Context<'_>) -> Input {
        match self {
            Source::Empty => Input::End(None),
            Source::Known { body, .. } if body.remaining() == 0 => Input::End(None),
            Source::Known { body, buf } => {
                if let Some(b) = body.take_bytes(IN_CHUNK, 1) {
                    return Input::Data(b);
                }
                buf.clear();
                match body.fill(buf, IN_CHUNK) {
                    Ok(_) => Input::Data(Bytes::copy_from_slice(buf)),
                    Err(e) => Input::Failed(BodyError::new(Side::Internal, format!("read: {e}"))),
                }
            }
            Source::Stream(s) => match s.poll_frame(cx) {
                Poll::Pending => Input::Pending,
                Poll::Ready(None) => Input::End(None),
                Poll::Ready(Some(Ok(Frame::Data(b)))) => Input::Data(b),
                Poll::Ready(Some(Ok(Frame::Trailers(t)))) => Input::End(Some(t)),
                Poll::Ready(Some(Err(e))) => Input::Failed(e),
            },
        }
    }
}

enum State {
    /// Encoding; the encoder is made on the first poll, so a response nobody reads costs none.
    Running(Option<Encoder>),
    /// The compressed bytes are all out; the trailers come next.
    Trailers(Trailers),
    Done,
}

/// A body compressed as it is pulled.
pub struct CompressedBody {
    source: Source,
    coding: Coding,
    level: u32,
    /// The original length, when known: sizes the encoder's window.
    size: Option<u64>,
    state: State,
    /// Input was given since the last flush.
    unflushed: bool,
}

impl CompressedBody {
    /// Wraps `body` (not empty, not multipart: the filter checked).
    pub fn new(body: Body, coding: Coding, level: u32) -> Option<CompressedBody> {
        let size = body.known_len();
        let source = match body {
            Body::Stream(s) => Source::Stream(s.stream),
            Body::Empty | Body::Parts(_) => return None,
            known => match BodySource::new(known) {
                Some(body) => Source::Known {
                    body,
                    buf: Vec::new(),
                },
                None => Source::Empty,
            },
        };
        Some(CompressedBody {
            source,
            coding,
            level,
            size,
            state: State::Running(None),
            unflushed: false,
        })
    }

    fn fail(&mut self, reason: String) -> Poll<Next> {
        self.state = State::Done;
        Poll::Ready(Some(Err(BodyError::new(Side::Internal, reason))))
    }
}

impl BodyStream for CompressedBody {
    fn poll_frame(&mut self, cx: &mut Context<'_>) -> Poll<Next> {
        let encoder = match &mut self.state {
            State::Running(e) => e,
            State::Trailers(_) => {
                let State::Trailers(t) = std::mem::replace(&mut self.state, State::Done) else {
                    return Poll::Ready(None);
                };
                return Poll::Ready(Some(Ok(Frame::Trailers(t))));
            }
            State::Done => return Poll::Ready(None),
        };
        let enc = match encoder {
            Some(e) => e,
            None => match Encoder::new(self.coding, self.level, self.size) {
                Ok(e) => encoder.insert(e),
                Err(reason) => return self.fail(reason),
            },
        };
        let mut out = Vec::new();
        loop {
            let result = match self.source.next(cx) {
                Input::Data(b) => {
                    self.unflushed |= !b.is_empty();
                    enc.encode(&b, Op::Process, &mut out)
                }
                // The source pauses (a backend between events): what was given so far goes
                // out now rather than waiting in the encoder.
                Input::Pending => {
                    if self.unflushed {
                        self.unflushed = false;
                        if let Err(reason) = enc.encode(&[], Op::Flush, &mut out) {
                            return self.fail(reason);
                        }
                    }
                    if out.is_empty() {
                        return Poll::Pending;
                    }
                    return Poll::Ready(Some(Ok(Frame::Data(out.into()))));
                }
                Input::End(trailers) => {
                    if let Err(reason) = enc.encode(&[], Op::Finish, &mut out) {
                        return self.fail(reason);
                    }
                    // Dropping the encoder now frees its tables before the last bytes go out.
                    self.state = trailers.map_or(State::Done, State::Trailers);
                    return Poll::Ready(Some(Ok(Frame::Data(out.into()))));
                }
                Input::Failed(e) => {
                    self.state = State::Done;
                    return Poll::Ready(Some(Err(e)));
                }
            };
            if let Err(reason) = result {
                return self.fail(reason);
            }
            if out.len() >= OUT_TARGET {
                return Poll::Ready(Some(Ok(Frame::Data(out.into()))));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{FileRange, OpenFile, StreamBody};
    use std::collections::VecDeque;
    use std::io::{Read, Write};
    use std::rc::Rc;
    use std::task::Waker;

    fn poll(b: &mut CompressedBody) -> Poll<Next> {
        b.poll_frame(&mut Context::from_waker(Waker::noop()))
    }

    /// Polls until the end; `Pending` counts as a pause of the source (no waker needed).
    fn drain(b: &mut CompressedBody) -> (Vec<Bytes>, Option<Trailers>) {
        let mut chunks = Vec::new();
        for _ in 0..100_000 {
            match poll(b) {
                Poll::Ready(Some(Ok(Frame::Data(d)))) => chunks.push(d),
                Poll::Ready(Some(Ok(Frame::Trailers(t)))) => {
                    assert!(matches!(poll(b), Poll::Ready(None)));
                    return (chunks, Some(t));
                }
                Poll::Ready(None) => return (chunks, None),
                Poll::Ready(Some(Err(e))) => panic!("{e}"),
                Poll::Pending => {}
            }
        }
        panic!("no end");
    }

    fn gunzip(chunks: &[Bytes]) -> Vec<u8> {
        let all: Vec<u8> = chunks.concat();
        let mut out = Vec::new();
        let r = flate2::read::GzDecoder::new(&all[..]).read_to_end(&mut out);
        assert!(r.is_ok(), "{r:?}");
        out
    }

    fn text(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| b"abcdefghij klmnop\n"[(i * 7 + i / 97) % 18])
            .collect()
    }

    /// A stream that gives its pieces, pausing once between each.
    struct Paced {
        items: VecDeque<Option<Frame>>,
    }

    impl BodyStream for Paced {
        fn poll_frame(&mut self, _cx: &mut Context<'_>) -> Poll<Next> {
            match self.items.pop_front() {
                Some(None) => Poll::Pending,
                Some(Some(f)) => Poll::Ready(Some(Ok(f))),
                None => Poll::Ready(None),
            }
        }
    }

    #[test]
    fn bytes_come_out_in_bounded_pieces() {
        // Letters in a pseudo-random order: `text` is so regular that zlib packs a MiB of it
        // into less than one output piece.
        let mut x = 1u32;
        let data: Vec<u8> = (0..1 << 20)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                b'a' + (x >> 16) as u8 % 26
            })
            .collect();
        let body = Body::Bytes(Bytes::from(data.clone()));
        let Some(mut b) = CompressedBody::new(body, Coding::Gzip, 1) else {
            panic!("not wrapped");
        };
        let (chunks, trailers) = drain(&mut b);
        assert!(trailers.is_none());
        assert!(chunks.len() > 1);
        // One input piece's output at most past the target.
        assert!(chunks.iter().all(|c| c.len() < OUT_TARGET + 2 * IN_CHUNK));
        assert_eq!(gunzip(&chunks), data);
    }

    #[test]
    fn a_file_is_read_a_piece_at_a_time() {
        let data = text(200_000);
        let mut f = match tempfile::tempfile() {
            Ok(f) => f,
            Err(e) => panic!("{e}"),
        };
        assert!(f.write_all(&data).is_ok());
        let open = Rc::new(OpenFile::new(
            f,
            data.len() as u64,
            std::time::SystemTime::now(),
            None,
        ));
        let range = FileRange {
            file: open,
            offset: 1000,
            len: 150_000,
        };
        let Some(mut b) = CompressedBody::new(Body::File(range), Coding::Gzip, 6) else {
            panic!("not wrapped");
        };
        let (chunks, _) = drain(&mut b);
        assert_eq!(gunzip(&chunks), &data[1000..151_000]);
    }

    #[test]
    fn a_file_shorter_than_its_range_fails_the_body() {
        let mut f = match tempfile::tempfile() {
            Ok(f) => f,
            Err(e) => panic!("{e}"),
        };
        assert!(f.write_all(&text(1000)).is_ok());
        let open = Rc::new(OpenFile::new(f, 1000, std::time::SystemTime::now(), None));
        let range = FileRange {
            file: open,
            offset: 500,
            len: 4000,
        };
        let Some(mut b) = CompressedBody::new(Body::File(range), Coding::Gzip, 6) else {
            panic!("not wrapped");
        };
        let failed = (0..10).find_map(|_| match poll(&mut b) {
            Poll::Ready(Some(Err(e))) => Some(e),
            _ => None,
        });
        assert!(failed.is_some_and(|e| e.side == Side::Internal));
        assert!(matches!(poll(&mut b), Poll::Ready(None)));
    }

    #[test]
    fn an_empty_body_compresses_to_an_empty_stream() {
        let Some(mut b) = CompressedBody::new(Body::Bytes(Bytes::new()), Coding::Gzip, 6) else {
            panic!("not wrapped");
        };
        let (chunks, trailers) = drain(&mut b);
        assert!(trailers.is_none());
        assert!(gunzip(&chunks).is_empty());
    }

    #[test]
    fn a_paused_stream_is_flushed_and_trailers_follow() {
        let items = VecDeque::from([
            Some(Frame::Data(Bytes::from_static(b"data: one\n\n"))),
            None,
            None,
            Some(Frame::Data(Bytes::from_static(b"data: two\n\n"))),
            Some(Frame::Trailers(vec![(
                Bytes::from_static(b"x-sum"),
                Bytes::from_static(b"1"),
            )])),
        ]);
        let body = Body::Stream(StreamBody {
            len: None,
            stream: Box::new(Paced { items }),
        });
        let Some(mut b) = CompressedBody::new(body, Coding::Gzip, 6) else {
            panic!("not wrapped");
        };
        // The pause flushes the first event: it decodes on its own.
        let first = match poll(&mut b) {
            Poll::Ready(Some(Ok(Frame::Data(d)))) => d,
            other => panic!("{other:?}"),
        };
        let mut d = flate2::read::GzDecoder::new(&first[..]);
        let mut buf = [0u8; 64];
        let n = d.read(&mut buf).unwrap_or(0);
        assert_eq!(&buf[..n], b"data: one\n\n");
        // Nothing new during the second pause: no empty frame.
        assert!(poll(&mut b).is_pending());
        let (rest, trailers) = drain(&mut b);
        let mut all = vec![first];
        all.extend(rest);
        assert_eq!(gunzip(&all), b"data: one\n\ndata: two\n\n");
        assert_eq!(trailers.map(|t| t.len()), Some(1));
    }

    #[test]
    fn a_failing_source_fails_the_body() {
        struct Broken;
        impl BodyStream for Broken {
            fn poll_frame(&mut self, _cx: &mut Context<'_>) -> Poll<Next> {
                Poll::Ready(Some(Err(BodyError::new(Side::Upstream, "gone"))))
            }
        }
        let body = Body::Stream(StreamBody {
            len: None,
            stream: Box::new(Broken),
        });
        let Some(mut b) = CompressedBody::new(body, Coding::Br, 1) else {
            panic!("not wrapped");
        };
        assert!(matches!(poll(&mut b), Poll::Ready(Some(Err(e))) if e.side == Side::Upstream));
        assert!(matches!(poll(&mut b), Poll::Ready(None)));
    }
}
