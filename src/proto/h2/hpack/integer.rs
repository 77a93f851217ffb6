//! HPACK integers (RFC 7541 section 5.1): an N-bit prefix, then 7 bits per continuation byte.

use super::DecodeError;

/// Largest value we accept. Every HPACK integer is an index, a string length or a table size,
/// and none of those is meaningful past 32 bits.
const MAX_VALUE: u64 = u32::MAX as u64;
/// Continuation bytes that fit `MAX_VALUE` (5 x 7 = 35 bits); more is an overflow even if the
/// extra bytes are zero, which bounds the work per integer.
const MAX_CONTINUATIONS: u32 = 5;

/// Decodes an integer with a `prefix`-bit prefix (1..=8) starting at `block[*pos]`, and
/// advances `*pos` past it.
pub fn decode(block: &[u8], pos: &mut usize, prefix: u8) -> Result<usize, DecodeError> {
    let mask = prefix_mask(prefix);
    let first = *block.get(*pos).ok_or(DecodeError::Truncated)? & mask;
    *pos += 1;
    if first < mask {
        return Ok(first as usize);
    }
    let mut value = mask as u64;
    let mut shift = 0u32;
    loop {
        if shift / 7 >= MAX_CONTINUATIONS {
            return Err(DecodeError::IntegerOverflow);
        }
        let b = *block.get(*pos).ok_or(DecodeError::Truncated)?;
        *pos += 1;
        value += ((b & 0x7f) as u64) << shift;
        if value > MAX_VALUE {
            return Err(DecodeError::IntegerOverflow);
        }
        if b & 0x80 == 0 {
            return usize::try_from(value).map_err(|_| DecodeError::IntegerOverflow);
        }
        shift += 7;
    }
}

/// Appends `value` with a `prefix`-bit prefix; `flags` supplies the bits above the prefix.
pub fn encode(value: usize, prefix: u8, flags: u8, dst: &mut impl bytes::BufMut) {
    let mask = prefix_mask(prefix);
    if value < mask as usize {
        dst.put_u8(flags | value as u8);
        return;
    }
    dst.put_u8(flags | mask);
    let mut rest = value - mask as usize;
    while rest >= 0x80 {
        dst.put_u8(0x80 | (rest & 0x7f) as u8);
        rest >>= 7;
    }
    dst.put_u8(rest as u8);
}

fn prefix_mask(prefix: u8) -> u8 {
    debug_assert!((1..=8).contains(&prefix));
    (0xffu16 >> (8 - prefix as u16)) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(value: usize, prefix: u8) -> Vec<u8> {
        let mut wire = Vec::new();
        encode(value, prefix, 0, &mut wire);
        let mut pos = 0;
        assert_eq!(decode(&wire, &mut pos, prefix), Ok(value));
        assert_eq!(pos, wire.len());
        wire
    }

    #[test]
    fn rfc_examples() {
        // C.1.1: 10 with a 5-bit prefix; C.1.2: 1337 with a 5-bit prefix; C.1.3: 42 at 8 bits.
        assert_eq!(round_trip(10, 5), [0x0a]);
        assert_eq!(round_trip(1337, 5), [0x1f, 0x9a, 0x0a]);
        assert_eq!(round_trip(42, 8), [0x2a]);
    }

    #[test]
    fn boundaries() {
        for prefix in 1..=8 {
            for v in [
                0,
                1,
                126,
                127,
                128,
                254,
                255,
                256,
                16383,
                16384,
                u32::MAX as usize,
            ] {
                round_trip(v, prefix);
            }
        }
        // The flag bits above the prefix are preserved and ignored by the decoder.
        let mut wire = Vec::new();
        encode(3, 6, 0x40, &mut wire);
        assert_eq!(wire, [0x43]);
        let mut pos = 0;
        assert_eq!(decode(&[0xc3], &mut pos, 6), Ok(3));
    }

    #[test]
    fn truncated() {
        let mut pos = 0;
        assert_eq!(decode(&[], &mut pos, 5), Err(DecodeError::Truncated));
        let mut pos = 0;
        assert_eq!(decode(&[0x1f], &mut pos, 5), Err(DecodeError::Truncated));
        let mut pos = 0;
        assert_eq!(
            decode(&[0x1f, 0x80, 0x80], &mut pos, 5),
            Err(DecodeError::Truncated)
        );
    }

    #[test]
    fn overflow() {
        // 2^32 - 1 + 1 via a 5-bit prefix.
        let mut wire = Vec::new();
        encode(u32::MAX as usize, 5, 0, &mut wire);
        let mut pos = 0;
        assert_eq!(decode(&wire, &mut pos, 5), Ok(u32::MAX as usize));
        let big = [0x1f, 0xff, 0xff, 0xff, 0xff, 0x0f];
        let mut pos = 0;
        assert_eq!(decode(&big, &mut pos, 5), Err(DecodeError::IntegerOverflow));
        // Endless zero continuations are cut off too.
        let zeros = [0x1f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
        let mut pos = 0;
        assert_eq!(
            decode(&zeros, &mut pos, 5),
            Err(DecodeError::IntegerOverflow)
        );
        // Would overflow a u64 if unchecked.
        let huge = [0x7f; 1]
            .iter()
            .chain([0xff; 12].iter())
            .copied()
            .collect::<Vec<_>>();
        let mut pos = 0;
        assert_eq!(
            decode(&huge, &mut pos, 7),
            Err(DecodeError::IntegerOverflow)
        );
    }
}
