//! Decimal number formatting into a line buffer, without `fmt` machinery.

pub(crate) fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Left-padded with `pad` to at least `width` characters.
pub(crate) fn push_u64_padded(out: &mut Vec<u8>, n: u64, width: usize, pad: u8) {
    let start = out.len();
    push_u64(out, n);
    let len = out.len() - start;
    if len < width {
        out.splice(start..start, std::iter::repeat_n(pad, width - len));
    }
}

/// `u128` durations clamp rather than wrap (only reachable with absurd clocks).
pub(crate) fn saturate(n: u128) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_pads() {
        let mut v = Vec::new();
        push_u64_padded(&mut v, 7, 3, b'0');
        v.push(b' ');
        push_u64_padded(&mut v, 1234, 3, b'0');
        v.push(b' ');
        push_u64_padded(&mut v, 5, 2, b' ');
        v.push(b' ');
        push_u64(&mut v, 0);
        v.push(b' ');
        push_u64(&mut v, u64::MAX);
        assert_eq!(v, b"007 1234  5 0 18446744073709551615");
        assert_eq!(saturate(u128::MAX), u64::MAX);
    }
}
