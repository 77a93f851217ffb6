//! The TLS 1.3 key schedule's HKDF on HMAC keys that are prepared once.
//!
//! aws-lc-rs keeps an extracted secret as its inputs and runs HKDF-Extract again on every
//! expansion, and each expansion sets its HMAC key up anew (two hash blocks). A handshake
//! expands about twenty labels from a handful of secrets: here the secret is extracted once
//! and its HMAC key prepared once (`hmac::Key` holds the hash states after the key pads),
//! so an expansion costs its own blocks only. The results are the same bytes (RFC 5869; the
//! tests compare both against each other and a test vector); `super::suites` puts it in the
//! TLS 1.3 suites.

use aws_lc_rs::hmac;
use rustls::crypto::hash::HashAlgorithm;
use rustls::crypto::hmac::Tag;
use rustls::crypto::tls13::{Hkdf, HkdfExpander, OkmBlock, OutputLengthError};

/// The prepared HKDF over `hash`: SHA-384 for `SHA384`, SHA-256 for every other (the TLS 1.3
/// suites use no other hash).
pub fn for_hash(hash: HashAlgorithm) -> &'static dyn Hkdf {
    match hash {
        HashAlgorithm::SHA384 => &HKDF_SHA384,
        _ => &HKDF_SHA256,
    }
}

static HKDF_SHA256: PreparedHkdf = PreparedHkdf(&hmac::HMAC_SHA256);
static HKDF_SHA384: PreparedHkdf = PreparedHkdf(&hmac::HMAC_SHA384);

/// HKDF (RFC 5869) with HMAC over the algorithm's hash. An extracted secret is kept as its
/// prepared HMAC key, the only allocation per secret.
struct PreparedHkdf(&'static hmac::Algorithm);

impl PreparedHkdf {
    fn len(&self) -> usize {
        self.0.digest_algorithm().output_len()
    }

    fn expander(&self, prk: &[u8]) -> Box<dyn HkdfExpander> {
        Box::new(PreparedExpander(hmac::Key::new(*self.0, prk)))
    }
}

impl Hkdf for PreparedHkdf {
    fn extract_from_zero_ikm(&self, salt: Option<&[u8]>) -> Box<dyn HkdfExpander> {
        let zeroes = [0u8; Tag::MAX_LEN];
        self.extract_from_secret(salt, &zeroes[..self.len()])
    }

    fn extract_from_secret(&self, salt: Option<&[u8]>, secret: &[u8]) -> Box<dyn HkdfExpander> {
        // No salt is a string of zeroes as long as the hash (RFC 5869 section 2.2).
        let zeroes = [0u8; Tag::MAX_LEN];
        let salt = salt.unwrap_or(&zeroes[..self.len()]);
        // rustls' `Tag` clears itself when dropped.
        let prk = Tag::new(hmac::sign(&hmac::Key::new(*self.0, salt), secret).as_ref());
        self.expander(prk.as_ref())
    }

    fn expander_for_okm(&self, okm: &OkmBlock) -> Box<dyn HkdfExpander> {
        self.expander(okm.as_ref())
    }

    fn hmac_sign(&self, key: &OkmBlock, message: &[u8]) -> Tag {
        Tag::new(hmac::sign(&hmac::Key::new(*self.0, key.as_ref()), message).as_ref())
    }
}

/// HKDF-Expand from a secret's prepared HMAC key.
struct PreparedExpander(hmac::Key);

impl PreparedExpander {
    /// T(i) = HMAC(PRK, T(i-1) | info | i), concatenated into `out` (at most 255 blocks).
    fn expand_into(&self, info: &[&[u8]], out: &mut [u8]) {
        let mut previous: Option<Tag> = None;
        for (i, chunk) in out.chunks_mut(self.hash_len()).enumerate() {
            let mut ctx = hmac::Context::with_key(&self.0);
            if let Some(t) = &previous {
                ctx.update(t.as_ref());
            }
            for part in info {
                ctx.update(part);
            }
            // `i` < 255: the callers bound the output's length.
            ctx.update(&[(i + 1) as u8]);
            let t = Tag::new(ctx.sign().as_ref());
            chunk.copy_from_slice(&t.as_ref()[..chunk.len()]);
            previous = Some(t);
        }
    }
}

impl HkdfExpander for PreparedExpander {
    fn expand_slice(&self, info: &[&[u8]], output: &mut [u8]) -> Result<(), OutputLengthError> {
        if output.len() > 255 * self.hash_len() {
            return Err(OutputLengthError);
        }
        self.expand_into(info, output);
        Ok(())
    }

    fn expand_block(&self, info: &[&[u8]]) -> OkmBlock {
        let mut block = [0u8; Tag::MAX_LEN];
        let block = &mut block[..self.hash_len()];
        self.expand_into(info, block);
        OkmBlock::new(block)
    }

    fn hash_len(&self) -> usize {
        self.0.algorithm().digest_algorithm().output_len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 5869 test case 1 (SHA-256): the PRK's expansion.
    #[test]
    fn rfc5869_case_1() {
        let ikm = hex("0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b");
        let salt = hex("000102030405060708090a0b0c");
        let info = hex("f0f1f2f3f4f5f6f7f8f9");
        let mut okm = [0u8; 42];
        HKDF_SHA256
            .extract_from_secret(Some(&salt), &ikm)
            .expand_slice(&[&info], &mut okm)
            .unwrap();
        let want = hex(
            "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865",
        );
        assert_eq!(&okm[..], &want[..]);
    }

    /// Every operation of the key schedule gives aws-lc-rs' own bytes, for both hashes.
    #[test]
    fn same_bytes_as_aws_lc_rs() {
        use rustls::crypto::aws_lc_rs::cipher_suite as aws_lc;
        use rustls::SupportedCipherSuite;
        for theirs in [
            aws_lc::TLS13_AES_128_GCM_SHA256,
            aws_lc::TLS13_AES_256_GCM_SHA384,
        ] {
            let SupportedCipherSuite::Tls13(theirs) = theirs else {
                panic!("not a TLS 1.3 suite")
            };
            let ours = for_hash(theirs.common.hash_provider.algorithm());
            let (a, b) = (ours, theirs.hkdf_provider);
            let salt = [7u8; 48];
            let secret = [9u8; 32];
            let info: [&[u8]; 3] = [b"tls13 ", b"c hs traffic", &[1, 2, 3]];
            let pairs = [
                (a.extract_from_zero_ikm(None), b.extract_from_zero_ikm(None)),
                (
                    a.extract_from_zero_ikm(Some(&salt)),
                    b.extract_from_zero_ikm(Some(&salt)),
                ),
                (
                    a.extract_from_secret(Some(&salt[..32]), &secret),
                    b.extract_from_secret(Some(&salt[..32]), &secret),
                ),
                (
                    a.extract_from_secret(None, &secret),
                    b.extract_from_secret(None, &secret),
                ),
            ];
            for (x, y) in pairs {
                assert_eq!(x.hash_len(), y.hash_len());
                let (bx, by) = (x.expand_block(&info), y.expand_block(&info));
                assert_eq!(bx.as_ref(), by.as_ref());
                let (mut sx, mut sy) = ([0u8; 100], [0u8; 100]);
                x.expand_slice(&info, &mut sx).unwrap();
                y.expand_slice(&info, &mut sy).unwrap();
                assert_eq!(sx, sy);
                let mut longest = vec![0u8; 255 * x.hash_len()];
                x.expand_slice(&info, &mut longest).unwrap();
                longest.push(0);
                assert!(x.expand_slice(&info, &mut longest).is_err());
                assert!(y.expand_slice(&info, &mut longest).is_err());
                let okm = OkmBlock::new(bx.as_ref());
                let (ex, ey) = (a.expander_for_okm(&okm), b.expander_for_okm(&okm));
                assert_eq!(
                    ex.expand_block(&info).as_ref(),
                    ey.expand_block(&info).as_ref()
                );
                assert_eq!(
                    a.hmac_sign(&okm, b"finished").as_ref(),
                    b.hmac_sign(&okm, b"finished").as_ref()
                );
            }
        }
    }
}
