//! A raw HTTP/2 client over a plain socket, and the floods the attack tests (tests/h2_attacks.rs)
//! and the soak (tests/soak.rs) send with it. Each flood is answered by a GOAWAY with
//! ENHANCE_YOUR_CALM under the limits those tests configure.

use super::Spate;
use spate::proto::h2::frame::{self, flag, kind, Head};
use spate::proto::h2::hpack::Encoder;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A raw HTTP/2 client: writes hand-made frames, reads frames back.
pub struct Raw {
    pub s: TcpStream,
    pub enc: Encoder,
    pub rbuf: Vec<u8>,
}

impl Raw {
    pub fn connect(spate: &Spate, settings: &[(u16, u32)]) -> Raw {
        Raw::connect_to(spate.addr, settings)
    }

    pub fn connect_to(addr: SocketAddr, settings: &[(u16, u32)]) -> Raw {
        let mut s = TcpStream::connect(addr).expect("connect");
        // Generous: a loaded machine may be slow to answer; no test reads until this timeout
        // to see that nothing comes.
        s.set_read_timeout(Some(Duration::from_secs(20))).ok();
        let mut out = frame::PREFACE.to_vec();
        frame::put_settings(&mut out, settings);
        s.write_all(&out).expect("preface");
        Raw {
            s,
            enc: Encoder::default(),
            rbuf: Vec::new(),
        }
    }

    /// Sends; a server that already closed makes this fail, which floods ignore.
    pub fn send(&mut self, b: &[u8]) -> bool {
        self.s.write_all(b).is_ok()
    }

    /// A GET for `path` as a HEADERS frame.
    pub fn get(&mut self, stream: u32, path: &str, end_stream: bool, out: &mut Vec<u8>) {
        let mut block = Vec::new();
        self.enc.encode(
            [
                (&b":method"[..], &b"GET"[..]),
                (b":scheme", b"http"),
                (b":authority", b"localhost"),
                (b":path", path.as_bytes()),
            ],
            &mut block,
        );
        let flags = flag::END_HEADERS | if end_stream { flag::END_STREAM } else { 0 };
        frame::put_head(out, block.len(), kind::HEADERS, flags, stream);
        out.extend_from_slice(&block);
    }

    /// The next frame, or `None` at end of stream or after the read timeout.
    pub fn frame(&mut self) -> Option<(Head, Vec<u8>)> {
        loop {
            if self.rbuf.len() >= 9 {
                let head = Head::parse(self.rbuf[..9].try_into().unwrap());
                let total = 9 + head.len as usize;
                if self.rbuf.len() >= total {
                    let payload = self.rbuf[9..total].to_vec();
                    self.rbuf.drain(..total);
                    return Some((head, payload));
                }
            }
            let mut buf = [0u8; 65536];
            match self.s.read(&mut buf) {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.rbuf.extend_from_slice(&buf[..n]),
            }
        }
    }

    /// Reads until a GOAWAY and returns its error code.
    pub fn goaway(&mut self) -> Option<u32> {
        while let Some((h, p)) = self.frame() {
            if h.kind == kind::GOAWAY {
                return Some(u32::from_be_bytes([p[4], p[5], p[6], p[7]]));
            }
        }
        None
    }
}

/// Rapid reset (CVE-2023-44487): streams opened and cancelled at once, 5,000 of them.
pub fn rapid_reset(raw: &mut Raw) {
    stream_flood(raw, true, |out, id| {
        frame::put_rst_stream(out, id, frame::Reason::CANCEL)
    });
}

/// "MadeYouReset": each stream is made invalid after opening (WINDOW_UPDATE of 0), so the
/// server must reset it; those resets count against the same budget.
pub fn made_you_reset(raw: &mut Raw) {
    stream_flood(raw, false, |out, id| {
        frame::put_head(out, 4, kind::WINDOW_UPDATE, 0, id);
        out.extend_from_slice(&[0, 0, 0, 0]);
    });
}

/// Opens 5,000 streams in batches of 100, each followed by what `then` writes for it.
fn stream_flood(raw: &mut Raw, end_stream: bool, then: fn(&mut Vec<u8>, u32)) {
    let mut id = 1;
    for _ in 0..50 {
        let mut out = Vec::new();
        for _ in 0..100 {
            raw.get(id, "/big.bin", end_stream, &mut out);
            then(&mut out, id);
            id += 2;
        }
        if !raw.send(&out) {
            break;
        }
    }
}

/// A header block that never ends: CONTINUATION frames full of literal fields.
pub fn continuation_flood(raw: &mut Raw) {
    let mut out = Vec::new();
    raw.get(1, "/6b.txt", true, &mut out);
    out[4] &= !flag::END_HEADERS;
    raw.send(&out);
    // Literal headers without indexing, forever.
    let mut piece = Vec::new();
    frame::put_head(&mut piece, 16_000, kind::CONTINUATION, 0, 1);
    for _ in 0..1000 {
        piece.extend_from_slice(&[0x00, 0x01, b'a', 0x0c]);
        piece.extend_from_slice(b"xxxxxxxxxxxx");
    }
    for _ in 0..100 {
        if !raw.send(&piece) {
            break;
        }
    }
}

/// A header block continued by 10,000 empty CONTINUATION frames.
pub fn empty_continuation_flood(raw: &mut Raw) {
    let mut out = Vec::new();
    raw.get(1, "/6b.txt", true, &mut out);
    out[4] &= !flag::END_HEADERS;
    for _ in 0..10_000 {
        frame::put_head(&mut out, 0, kind::CONTINUATION, 0, 1);
    }
    raw.send(&out);
}

/// A flood by name.
pub type Flood = (&'static str, fn(&mut Raw));

/// The floods that the default limits (and `http2-max-resets-per-second: 100`) stop.
pub const FLOODS: [Flood; 4] = [
    ("rapid reset", rapid_reset),
    ("made you reset", made_you_reset),
    ("continuation", continuation_flood),
    ("empty continuation", empty_continuation_flood),
];
