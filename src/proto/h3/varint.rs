//! QUIC variable-length integers (RFC 9000 section 16): the two high bits of the first byte
//! give the length (1, 2, 4 or 8 bytes), the rest is the value, big-endian.

use bytes::BufMut;

/// The largest value a varint holds (2^62 - 1).
pub const MAX: u64 = (1 << 62) - 1;

/// Decodes the varint at the start of `buf`: `Some((value, bytes used))`, or `None` if `buf`
/// ends before it does. Non-minimal encodings are accepted, as RFC 9000 allows.
#[inline]
pub fn decode(buf: &[u8]) -> Option<(u64, usize)> {
    let first = *buf.first()?;
    let len = 1usize << (first >> 6);
    let bytes = buf.get(..len)?;
    let mut v = u64::from(first & 0x3f);
    for &b in &bytes[1..] {
        v = (v << 8) | u64::from(b);
    }
    Some((v, len))
}

/// Bytes [`encode`] writes for `v`.
#[inline]
pub fn len(v: u64) -> usize {
    match v {
        0..=63 => 1,
        64..=16383 => 2,
        16384..=1_073_741_823 => 4,
        _ => 8,
    }
}

/// Appends `v` in its shortest form. Values above [`MAX`] are clamped to it (no caller
/// produces one: lengths and ids are far smaller).
#[inline]
pub fn encode(v: u64, out: &mut impl BufMut) {
    let v = v.min(MAX);
    match len(v) {
        1 => out.put_u8(v as u8),
        2 => out.put_u16(0x4000 | v as u16),
        4 => out.put_u32(0x8000_0000 | v as u32),
        _ => out.put_u64(0xc000_0000_0000_0000 | v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc9000_examples() {
        // RFC 9000 Appendix A.1.
        let cases: [(&[u8], u64); 4] = [
            (
                &[0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c],
                151_288_809_941_952_652,
            ),
            (&[0x9d, 0x7f, 0x3e, 0x7d], 494_878_333),
            (&[0x7b, 0xbd], 15_293),
            (&[0x25], 37),
        ];
        for (wire, value) in cases {
            assert_eq!(decode(wire), Some((value, wire.len())));
            let mut out = Vec::new();
            encode(value, &mut out);
            assert_eq!(out, wire);
        }
        // A non-minimal 37.
        assert_eq!(decode(&[0x40, 0x25]), Some((37, 2)));
    }

    #[test]
    fn boundaries_and_truncation() {
        for v in [0, 63, 64, 16383, 16384, 1_073_741_823, 1_073_741_824, MAX] {
            let mut out = Vec::new();
            encode(v, &mut out);
            assert_eq!(out.len(), len(v));
            assert_eq!(decode(&out), Some((v, out.len())));
            for cut in 0..out.len() {
                assert_eq!(decode(&out[..cut]), None);
            }
        }
    }
}
