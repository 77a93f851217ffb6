//! Apache's `$apr1$` hash (htpasswd's default): the MD5-based crypt of FreeBSD with Apache's
//! magic string, 1,000 rounds. Built on the `md-5` crate's digest.

use md5::{Digest, Md5};

const MAGIC: &[u8] = b"$apr1$";
/// crypt's base-64 alphabet.
const ITOA64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Whether `password` gives `hash` (`$apr1$SALT$DIGEST`).
pub fn verify(password: &[u8], hash: &str) -> bool {
    let Some(rest) = hash.as_bytes().strip_prefix(MAGIC) else {
        return false;
    };
    let Some(dollar) = rest.iter().position(|&b| b == b'$') else {
        return false;
    };
    let salt = &rest[..dollar.min(8)];
    let want = &rest[dollar + 1..];
    let got = digest(password, salt);
    super::same(&got, want)
}

/// The 22 characters after the salt.
fn digest(pw: &[u8], salt: &[u8]) -> Vec<u8> {
    let alt = Md5::new()
        .chain_update(pw)
        .chain_update(salt)
        .chain_update(pw)
        .finalize();
    let mut ctx = Md5::new()
        .chain_update(pw)
        .chain_update(MAGIC)
        .chain_update(salt);
    let mut left = pw.len();
    while left > 0 {
        let n = left.min(16);
        ctx.update(&alt[..n]);
        left -= n;
    }
    // The bits of the length pick, lowest first, a zero byte (bit set) or the first byte.
    let mut bits = pw.len();
    while bits > 0 {
        if bits & 1 == 1 {
            ctx.update([0u8]);
        } else {
            ctx.update(&pw[..1]);
        }
        bits >>= 1;
    }
    let mut sum = ctx.finalize();
    for round in 0..1000 {
        let mut c = Md5::new();
        if round % 2 == 1 {
            c.update(pw);
        } else {
            c.update(sum);
        }
        if round % 3 != 0 {
            c.update(salt);
        }
        if round % 7 != 0 {
            c.update(pw);
        }
        if round % 2 == 1 {
            c.update(sum);
        } else {
            c.update(pw);
        }
        sum = c.finalize();
    }
    let mut out = Vec::with_capacity(22);
    let mut put = |v: u32, n: usize| {
        let mut v = v;
        for _ in 0..n {
            out.push(ITOA64[(v & 0x3f) as usize]);
            v >>= 6;
        }
    };
    let b = |i: usize| u32::from(sum[i]);
    for (x, y, z) in [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)] {
        put(b(x) << 16 | b(y) << 8 | b(z), 4);
    }
    put(b(11), 2);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_written_by_htpasswd_verify() {
        // `htpasswd -nbm alice secret`.
        let h = "$apr1$rAFlN/eG$3.S8re52e90EBspIH1/PM.";
        assert!(verify(b"secret", h));
        assert!(!verify(b"secreT", h));
        assert!(!verify(b"", h));
        assert!(!verify(b"secret", "$apr1$rAFlN/eG"));
        assert!(!verify(b"secret", "$1$rAFlN/eG$3.S8re52e90EBspIH1/PM."));
    }
}
