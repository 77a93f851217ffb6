//! The three encoders behind one interface: feed input, flush what was fed so far, finish.
//!
//! Crates, chosen by measurement (level 6 brotli on a 98 KB HTML page, best of 60 runs on this
//! machine): the C library through `brotlic` compresses it in 1.12 ms against 1.5-1.8 ms for the
//! pure-Rust `brotli` crate, the same 13924 bytes; h2o and nginx use the C library, so anything
//! slower loses the CPU-per-request comparison. gzip is `flate2` on C zlib (`libz-sys`: the
//! system's libz when it is installed, else its bundled source built with the C compiler): its
//! level 6 is the peers' level 6, byte for byte (29,343 bytes for bench C1's 100 KB page, like
//! nginx), in 2.6 ms. zlib-rs and zlib-ng are twice as fast at level 6 but reach it with a
//! different matcher (zlib-ng's "medium" strategy) whose output is 0.9% larger (29,596 bytes),
//! so the same level no longer compares. zstd is the C library (`zstd`), the only complete
//! encoder. Building the C libraries costs about 50 s of one core once per clean build.

use super::Coding;
use brotlic::encode::BrotliOperation;
use brotlic::{BrotliEncoder, BrotliEncoderOptions, Quality, WindowSize};
use flate2::{Compress, Compression, FlushCompress, Status};
use zstd::zstd_safe::{zstd_sys::ZSTD_EndDirective, CCtx, CParameter, InBuffer, OutBuffer};

/// The largest window (history) an encoder keeps, as a power of two: 512 KiB, nginx's
/// brotli default. Smaller bodies get a window just large enough for them, which also keeps
/// the encoder's tables small.
const MAX_WINDOW_LOG: u32 = 19;

/// Output space added at a time while an encoder writes.
const OUT_STEP: usize = 16 * 1024;

/// What an encoder is asked to do with the input it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Take the input; output may lag behind.
    Process,
    /// Take the input and emit everything needed to decode all input so far.
    Flush,
    /// Take the input and end the stream.
    Finish,
}

/// One response's encoder.
pub enum Encoder {
    Br(BrotliEncoder),
    Zstd(CCtx<'static>),
    Gzip(Compress),
}

impl Encoder {
    /// An encoder at `level` (already range-checked by the configuration); `size` is the body's
    /// length when known, to size the window.
    pub fn new(coding: Coding, level: u32, size: Option<u64>) -> Result<Encoder, String> {
        // Just large enough for a body of known size, within what the format allows.
        let window = |min: u32, max: u32| {
            let log = size.map_or(max, |n| 64 - n.saturating_sub(1).leading_zeros());
            log.clamp(min, max)
        };
        match coding {
            Coding::Br => {
                let mut opts = BrotliEncoderOptions::new();
                let quality = Quality::new(level.min(11) as u8).map_err(|e| e.to_string())?;
                let lgwin =
                    WindowSize::new(window(10, MAX_WINDOW_LOG) as u8).map_err(|e| e.to_string())?;
                opts.quality(quality).window_size(lgwin);
                if let Some(n) = size {
                    opts.size_hint(u32::try_from(n).unwrap_or(u32::MAX));
                }
                opts.build().map(Encoder::Br).map_err(|e| e.to_string())
            }
            Coding::Zstd => {
                let mut cx = CCtx::try_create().ok_or("cannot create a zstd context")?;
                let zstd_err = |c: usize| zstd::zstd_safe::get_error_name(c).to_string();
                cx.set_parameter(CParameter::CompressionLevel(level as i32))
                    .map_err(zstd_err)?;
                cx.set_parameter(CParameter::WindowLog(window(10, MAX_WINDOW_LOG)))
                    .map_err(zstd_err)?;
                Ok(Encoder::Zstd(cx))
            }
            Coding::Gzip => Ok(Encoder::Gzip(Compress::new_gzip(
                Compression::new(level.min(9)),
                // deflate's window is 32 KiB at most.
                window(9, 15) as u8,
            ))),
        }
    }

    /// Encodes all of `input` with `op`, appending the output to `out`.
    pub fn encode(&mut self, input: &[u8], op: Op, out: &mut Vec<u8>) -> Result<(), String> {
        match self {
            Encoder::Br(e) => brotli(e, input, op, out),
            Encoder::Zstd(cx) => zstd(cx, input, op, out),
            Encoder::Gzip(c) => gzip(c, input, op, out),
        }
    }
}

/// Runs the brotli encoder until it took all input and has nothing more to give for `op`.
fn brotli(
    e: &mut BrotliEncoder,
    mut input: &[u8],
    op: Op,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let bop = match op {
        Op::Process => BrotliOperation::Process,
        Op::Flush => BrotliOperation::Flush,
        Op::Finish => BrotliOperation::Finish,
    };
    loop {
        let start = out.len();
        out.resize(start + OUT_STEP, 0);
        let r = e.compress(input, &mut out[start..], bop);
        let (read, written) = match r {
            Ok(r) => (r.bytes_read, r.bytes_written),
            Err(_) => {
                out.truncate(start);
                return Err("brotli encoder failed".into());
            }
        };
        out.truncate(start + written);
        input = &input[read..];
        let done = match op {
            Op::Finish => e.is_finished(),
            Op::Process | Op::Flush => input.is_empty() && !e.has_output(),
        };
        if done {
            return Ok(());
        }
        if read == 0 && written == 0 {
            return Err("brotli encoder made no progress".into());
        }
    }
}

fn zstd(cx: &mut CCtx<'static>, input: &[u8], op: Op, out: &mut Vec<u8>) -> Result<(), String> {
    let directive = match op {
        Op::Process => ZSTD_EndDirective::ZSTD_e_continue,
        Op::Flush => ZSTD_EndDirective::ZSTD_e_flush,
        Op::Finish => ZSTD_EndDirective::ZSTD_e_end,
    };
    let mut inb = InBuffer::around(input);
    loop {
        if out.capacity() - out.len() < OUT_STEP / 2 {
            out.reserve(OUT_STEP);
        }
        let pos = out.len();
        let mut outb = OutBuffer::around_pos(out, pos);
        let left = cx
            .compress_stream2(&mut outb, &mut inb, directive)
            .map_err(|c| format!("zstd: {}", zstd::zstd_safe::get_error_name(c)))?;
        let room_left = out.len() < out.capacity();
        let done = match op {
            // With input left over or the output full, zstd has more to do.
            Op::Process => inb.pos() == input.len() && room_left,
            Op::Flush | Op::Finish => left == 0,
        };
        if done {
            return Ok(());
        }
    }
}

fn gzip(c: &mut Compress, mut input: &[u8], op: Op, out: &mut Vec<u8>) -> Result<(), String> {
    let flush = match op {
        Op::Process => FlushCompress::None,
        Op::Flush => FlushCompress::Sync,
        Op::Finish => FlushCompress::Finish,
    };
    loop {
        if out.capacity() - out.len() < OUT_STEP / 2 {
            out.reserve(OUT_STEP);
        }
        let before = c.total_in();
        let status = c
            .compress_vec(input, out, flush)
            .map_err(|e| format!("gzip: {e}"))?;
        input = &input[(c.total_in() - before) as usize..];
        let room_left = out.len() < out.capacity();
        let done = match (op, status) {
            (Op::Finish, s) => s == Status::StreamEnd,
            // Output space left over means zlib had nothing more to write.
            (Op::Process | Op::Flush, _) => input.is_empty() && room_left,
        };
        if done {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// Text that compresses, in `n` bytes.
    pub fn text(n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 64);
        let mut i = 0u64;
        while v.len() < n {
            v.extend_from_slice(
                format!("<li class=\"item\">entry {i} of the list</li>\n").as_bytes(),
            );
            i = i
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407)
                % 100_000;
        }
        v.truncate(n);
        v
    }

    fn gunzip(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let r = flate2::read::MultiGzDecoder::new(data).read_to_end(&mut out);
        assert!(r.is_ok(), "{r:?}");
        out
    }

    fn unzstd(data: &[u8]) -> Vec<u8> {
        match zstd::stream::decode_all(data) {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        }
    }

    fn unbrotli(data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let r = brotlic::DecompressorReader::new(data).read_to_end(&mut out);
        assert!(r.is_ok(), "{r:?}");
        out
    }

    fn decode(coding: Coding, data: &[u8]) -> Vec<u8> {
        match coding {
            Coding::Br => unbrotli(data),
            Coding::Zstd => unzstd(data),
            Coding::Gzip => gunzip(data),
        }
    }

    fn new(coding: Coding, level: u32, size: Option<u64>) -> Encoder {
        match Encoder::new(coding, level, size) {
            Ok(e) => e,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn every_coding_round_trips_in_pieces() {
        let data = text(300_000);
        for coding in [Coding::Br, Coding::Zstd, Coding::Gzip] {
            for size in [None, Some(data.len() as u64)] {
                let mut e = new(coding, 6, size);
                let mut out = Vec::new();
                for piece in data.chunks(7000) {
                    assert!(e.encode(piece, Op::Process, &mut out).is_ok());
                }
                assert!(e.encode(&[], Op::Finish, &mut out).is_ok());
                assert!(out.len() < data.len() / 4, "{coding:?}: {}", out.len());
                assert_eq!(decode(coding, &out), data, "{coding:?} {size:?}");
            }
        }
    }

    /// After a flush, what was written so far decodes to all input so far: what a client
    /// of a slowly streamed response sees.
    #[test]
    fn a_flush_makes_everything_so_far_decodable() {
        for coding in [Coding::Br, Coding::Zstd, Coding::Gzip] {
            let mut e = new(coding, 6, None);
            let mut out = Vec::new();
            assert!(e
                .encode(b"data: first event\n\n", Op::Flush, &mut out)
                .is_ok());
            let first = out.len();
            assert!(first > 0, "{coding:?}");
            let so_far = match coding {
                Coding::Br => {
                    let mut d = brotlic::DecompressorReader::new(&out[..]);
                    let mut buf = [0u8; 64];
                    let n = d.read(&mut buf).unwrap_or(0);
                    buf[..n].to_vec()
                }
                Coding::Zstd => {
                    let mut d = match zstd::stream::read::Decoder::new(&out[..]) {
                        Ok(d) => d,
                        Err(e) => panic!("{e}"),
                    };
                    let mut buf = [0u8; 64];
                    let n = d.read(&mut buf).unwrap_or(0);
                    buf[..n].to_vec()
                }
                Coding::Gzip => {
                    let mut d = flate2::read::GzDecoder::new(&out[..]);
                    let mut buf = [0u8; 64];
                    let n = d.read(&mut buf).unwrap_or(0);
                    buf[..n].to_vec()
                }
            };
            assert_eq!(so_far, b"data: first event\n\n", "{coding:?}");
            assert!(e.encode(b"data: second\n\n", Op::Finish, &mut out).is_ok());
            assert_eq!(
                decode(coding, &out),
                b"data: first event\n\ndata: second\n\n"
            );
        }
    }

    #[test]
    fn empty_and_tiny_bodies() {
        for coding in [Coding::Br, Coding::Zstd, Coding::Gzip] {
            for data in [&b""[..], b"x"] {
                let mut e = new(coding, 1, Some(data.len() as u64));
                let mut out = Vec::new();
                assert!(e.encode(data, Op::Finish, &mut out).is_ok());
                assert_eq!(decode(coding, &out), data);
            }
        }
    }

    #[test]
    fn extreme_levels() {
        let data = text(50_000);
        for (coding, level) in [
            (Coding::Br, 0),
            (Coding::Br, 11),
            (Coding::Zstd, 1),
            (Coding::Zstd, 22),
            (Coding::Gzip, 1),
            (Coding::Gzip, 9),
        ] {
            let mut e = new(coding, level, None);
            let mut out = Vec::new();
            assert!(e.encode(&data, Op::Finish, &mut out).is_ok());
            assert_eq!(decode(coding, &out), data, "{coding:?} {level}");
        }
    }
}
