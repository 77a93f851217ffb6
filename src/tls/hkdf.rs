//! The TLS 1.3 key schedule's HKDF on HMAC keys that are prepared once.
//!
//! aws-lc-rs keeps an extracted secret as its inputs and runs HKDF-Extract again on every
//! expansion, and each expansion sets its HMAC key up anew (two hash blocks). A handshake
//! expands about twenty labels from a handful of secrets: here the secret is extracted once
//! and its HMAC key prepared once (`hmac::Key` holds the hash states after the key pads),
//! so an expansion costs its own blocks only. The results are the same bytes (RFC 5869; the
//! tests compare both against each other and a test vector), the suites' AEADs, hashes and
//! QUIC keys are aws-lc-rs' own.

use aws_lc_rs::hmac;
use rustls::crypto::aws_lc_rs::cipher_suite as aws_lc;
use rustls::crypto::hmac::Tag;
use rustls::crypto::tls13::{Hkdf, HkdfExpander, OkmBlock, OutputLengthError};
use rustls::{CipherSuiteCommon, SupportedCipherSuite, Tls13CipherSuite};
use std::sync::LazyLock;

/// `suite` with its HKDF replaced by one on prepared HMAC keys when it is one of aws-lc-rs'
/// TLS 1.3 suites; any other suite as it is.
pub fn prepared(suite: SupportedCipherSuite) -> SupportedCipherSuite {
    let SupportedCipherSuite::Tls13(base) = suite else {
        return suite;
    };
    let slot = PREPARED_IDS
        .iter()
        .position(|id| *id == base.common.suite)
        .and_then(|i| PREPARED[i].as_ref());
    match slot {
        Some(s) => SupportedCipherSuite::Tls13(s),
        None => suite,
    }
}

/// The aws-lc-rs TLS 1.3 suites that get a prepared HKDF, in `PREPARED`'s order, with it.
const PREPARED_IDS: [rustls::CipherSuite; 3] = [
    rustls::CipherSuite::TLS13_AES_128_GCM_SHA256,
    rustls::CipherSuite::TLS13_AES_256_GCM_SHA384,
    rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
];

static PREPARED: [LazyLock<Option<Tls13CipherSuite>>; 3] = [
    LazyLock::new(|| with_hkdf(aws_lc::TLS13_AES_128_GCM_SHA256, &HKDF_SHA256)),
    LazyLock::new(|| with_hkdf(aws_lc::TLS13_AES_256_GCM_SHA384, &HKDF_SHA384)),
    LazyLock::new(|| with_hkdf(aws_lc::TLS13_CHACHA20_POLY1305_SHA256, &HKDF_SHA256)),
];

static HKDF_SHA256: PreparedHkdf = PreparedHkdf(&hmac::HMAC_SHA256);
static HKDF_SHA384: PreparedHkdf = PreparedHkdf(&hmac::HMAC_SHA384);

/// aws-lc-rs' TLS 1.3 suite `base` with `hkdf` (`None` for a TLS 1.2 suite).
fn with_hkdf(base: SupportedCipherSuite, hkdf: &'static dyn Hkdf) -> Option<Tls13CipherSuite> {
    let SupportedCipherSuite::Tls13(base) = base else {
        return None;
    };
    Some(Tls13CipherSuite {
        common: CipherSuiteCommon {
            suite: base.common.suite,
            hash_provider: base.common.hash_provider,
            confidentiality_limit: base.common.confidentiality_limit,
        },
        hkdf_provider: hkdf,
        aead_alg: base.aead_alg,
        quic: base.quic,
    })
}

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
        for i in 0..3 {
            let ours = PREPARED[i].as_ref().unwrap();
            let theirs = match rustls::crypto::aws_lc_rs::ALL_CIPHER_SUITES
                .iter()
                .find(|s| s.suite() == PREPARED_IDS[i])
            {
                Some(SupportedCipherSuite::Tls13(s)) => *s,
                _ => panic!("aws-lc-rs has {:?}", PREPARED_IDS[i]),
            };
            assert_eq!(ours.common.suite, theirs.common.suite);
            let (a, b) = (ours.hkdf_provider, theirs.hkdf_provider);
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

    #[test]
    fn only_tls13_suites_change() {
        for s in rustls::crypto::aws_lc_rs::ALL_CIPHER_SUITES {
            let p = prepared(*s);
            assert_eq!(p.suite(), s.suite());
            match (p, s) {
                (SupportedCipherSuite::Tls13(p), SupportedCipherSuite::Tls13(s)) => {
                    assert!(!std::ptr::addr_eq(p.hkdf_provider, s.hkdf_provider))
                }
                (SupportedCipherSuite::Tls12(p), SupportedCipherSuite::Tls12(s)) => {
                    assert!(std::ptr::eq(p, *s))
                }
                _ => panic!("the version changed"),
            }
        }
    }
}
