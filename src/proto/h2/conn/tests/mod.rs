//! Deterministic tests of the connection state machine: bytes in, frames out, virtual time.
//! `Peer` plays the client; the tests are split by topic.

use super::*;
use crate::http::Body;
use crate::http::Method;
use crate::proto::h2::hpack::{Decoder, Encoder};
use crate::proto::h2::RunBuffer;
use crate::proto::request_head::valid_field;
use headers_cache::indexed_exchange;
use streamed::{data, headers_frame, streamed};

mod buffers;
mod frames;
mod headers_cache;
mod park;
mod repeat;
mod states;
mod streamed;

struct Peer {
    conn: Connection,
    enc: Encoder,
    dec: Decoder,
    now: Instant,
    /// The worker's run buffer, lent to each `recv`.
    runs: RunBuffer,
}

type Frames = Vec<(Head, Vec<u8>)>;

impl Peer {
    fn new(cfg: Settings, client_settings: &[(u16, u32)]) -> Peer {
        let now = Instant::now();
        let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let mut p = Peer {
            conn: Connection::new(cfg, addr, addr, now),
            enc: Encoder::default(),
            dec: Decoder::new(4096, 1 << 20),
            now,
            runs: RunBuffer::default(),
        };
        p.conn.set_now(
            &crate::http::clock::with_now(|d| *d),
            crate::http::clock::coarse_ns(),
        );
        let mut b = frame::PREFACE.to_vec();
        frame::put_settings(&mut b, client_settings);
        p.feed(&b);
        p
    }

    /// Gives the connection `b`, all of it: a `recv` that pauses is called again at once,
    /// with no request answered in between.
    fn feed(&mut self, b: &[u8]) {
        let mut input = BytesMut::from(b);
        self.conn.recv(&mut input, self.now, &mut self.runs);
        while self.conn.recv_paused() && !input.is_empty() && self.conn.closed().is_none() {
            self.conn.recv(&mut input, self.now, &mut self.runs);
        }
        assert!(input.is_empty() || self.conn.closed().is_some());
    }

    /// Answers every request with `body`, pulls output, returns the frames.
    fn turn(&mut self, body: &'static [u8]) -> Frames {
        while let Some((id, _req)) = self.conn.next_request() {
            let mut r = Response::new(200);
            r.body = Body::Bytes(Bytes::from_static(body));
            self.conn.respond(id, r);
        }
        self.conn.fill(self.now);
        let out = self.conn.output_parts().to_vec();
        self.conn.clear_output();
        parse(&out)
    }

    fn get(&mut self, id: u32, path: &str, end_stream: bool) -> Vec<u8> {
        let mut block = Vec::new();
        self.enc.encode(
            [
                (&b":method"[..], &b"GET"[..]),
                (b":scheme", b"http"),
                (b":authority", b"example.com"),
                (b":path", path.as_bytes()),
            ],
            &mut block,
        );
        let mut out = Vec::new();
        let flags = flag::END_HEADERS | if end_stream { flag::END_STREAM } else { 0 };
        frame::put_head(&mut out, block.len(), kind::HEADERS, flags, id);
        out.extend_from_slice(&block);
        out
    }

    /// The ETag of a response header block (decoded: the decoder follows the table).
    fn etag_of(&mut self, block: &[u8]) -> Vec<u8> {
        let fields = self.fields_of(block);
        fields.into_iter().find(|(n, _)| n == b"etag").unwrap().1
    }

    fn status_of(&mut self, block: &[u8]) -> Vec<u8> {
        self.fields_of(block).swap_remove(0).1
    }
}

fn parse(mut b: &[u8]) -> Frames {
    let mut v = Vec::new();
    while b.len() >= 9 {
        let h = Head::parse(b[..9].try_into().unwrap());
        let end = 9 + h.len as usize;
        v.push((h, b[9..end].to_vec()));
        b = &b[end..];
    }
    v
}

fn goaway_code(frames: &Frames) -> Option<u32> {
    frames
        .iter()
        .find(|(h, _)| h.kind == kind::GOAWAY)
        .map(|(_, p)| u32::from_be_bytes([p[4], p[5], p[6], p[7]]))
}

fn kinds(frames: &Frames) -> Vec<(u8, u32)> {
    frames.iter().map(|(h, _)| (h.kind, h.stream)).collect()
}
