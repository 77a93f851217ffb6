//! Big bodies made on the fly: a deterministic byte pattern of any length, and a streaming
//! 64-bit hash to compare what went in with what came out without keeping either whole.
#![allow(dead_code)]

use std::io::Read;
use std::sync::OnceLock;

/// The pattern repeats every PERIOD bytes: a prime, so a piece that arrives at the wrong
/// offset (frames or chunks of any power-of-two size swapped, lost or doubled) changes the hash.
const PERIOD: usize = 65_521;
/// The longest piece `fill` copies at once.
const PIECE: usize = 64 * 1024;

fn block() -> &'static [u8] {
    static BLOCK: OnceLock<Vec<u8>> = OnceLock::new();
    BLOCK.get_or_init(|| {
        // xorshift64: cheap and far from periodic within the period.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut b: Vec<u8> = (0..PERIOD)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        // One period plus the start of the next, so any piece up to PIECE is one slice.
        for i in 0..PIECE {
            b.push(b[i % PERIOD]);
        }
        b
    })
}

/// Writes the pattern bytes at `offset..offset + out.len()` into `out`.
pub fn fill(mut offset: u64, out: &mut [u8]) {
    let block = block();
    let mut done = 0;
    while done < out.len() {
        let start = (offset % PERIOD as u64) as usize;
        let n = (out.len() - done).min(PIECE);
        out[done..done + n].copy_from_slice(&block[start..start + n]);
        done += n;
        offset += n as u64;
    }
}

/// `len` bytes of the pattern as a reader (for a request body, a response body or a file).
pub struct Pattern {
    offset: u64,
    len: u64,
}

impl Pattern {
    pub fn new(len: u64) -> Pattern {
        Pattern { offset: 0, len }
    }
}

impl Read for Pattern {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = (self.len - self.offset).min(buf.len() as u64) as usize;
        fill(self.offset, &mut buf[..n]);
        self.offset += n as u64;
        Ok(n)
    }
}

/// An order-sensitive 64-bit hash fed in pieces of any size (FNV-style over 8-byte words:
/// not cryptographic, enough to tell a reordered, short or corrupted body from the original).
#[derive(Clone)]
pub struct Hash64 {
    h: u64,
    carry: [u8; 8],
    carried: usize,
    len: u64,
}

impl Default for Hash64 {
    fn default() -> Self {
        Hash64 {
            h: 0xCBF2_9CE4_8422_2325,
            carry: [0; 8],
            carried: 0,
            len: 0,
        }
    }
}

impl Hash64 {
    pub fn new() -> Hash64 {
        Hash64::default()
    }

    fn mix(&mut self, w: u64) {
        self.h = (self.h ^ w)
            .wrapping_mul(0x0000_0100_0000_01B3)
            .rotate_left(29);
    }

    pub fn update(&mut self, mut data: &[u8]) {
        self.len += data.len() as u64;
        if self.carried > 0 {
            let n = (8 - self.carried).min(data.len());
            self.carry[self.carried..self.carried + n].copy_from_slice(&data[..n]);
            self.carried += n;
            data = &data[n..];
            if self.carried < 8 {
                return;
            }
            self.mix(u64::from_le_bytes(self.carry));
            self.carried = 0;
        }
        let words = data.chunks_exact(8);
        let rest = words.remainder();
        for w in words {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            self.mix(u64::from_le_bytes(b));
        }
        self.carry[..rest.len()].copy_from_slice(rest);
        self.carried = rest.len();
    }

    /// Bytes hashed so far.
    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn finish(&self) -> u64 {
        let mut last = self.clone();
        let mut tail = [0u8; 8];
        tail[..self.carried].copy_from_slice(&self.carry[..self.carried]);
        last.mix(u64::from_le_bytes(tail));
        last.mix(self.len);
        last.h
    }
}

/// The hash of the first `len` bytes of the pattern.
pub fn pattern_hash(len: u64) -> u64 {
    hash_reader(&mut Pattern::new(len)).1
}

/// Reads `r` to its end: (bytes, hash).
pub fn hash_reader(r: &mut dyn Read) -> (u64, u64) {
    let mut h = Hash64::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => h.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    (h.len(), h.finish())
}
