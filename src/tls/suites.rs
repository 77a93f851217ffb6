//! The cipher suites offered: rustls' aws-lc-rs suites, with two parts replaced where another
//! is faster and gives the same bytes.
//!
//! - TLS 1.3's key schedule runs on HMAC keys prepared once ([`super::hkdf`]).
//! - AES-GCM records are sealed and opened by ring on CPUs with VAES and VPCLMULQDQ but
//!   without AVX-512 (AMD Zen 3, Intel Alder Lake and later client parts): ring has an AVX2
//!   implementation that uses them, aws-lc only an AVX-512 one, and falls back to AES-NI
//!   there. On this project's bench machine (AMD EPYC, Zen 3) ring seals a 16 KiB record in
//!   0.20 ns per byte against aws-lc's 0.34-0.43. Elsewhere aws-lc's AEAD stays: without
//!   VAES both run the same AES-NI code, and with AVX-512 aws-lc's is the wider one.
//!
//! Hashes, signatures, key exchange and the TLS 1.2 PRF stay aws-lc-rs' own.

use super::hkdf;
use rustls::crypto::{aws_lc_rs, ring, CipherSuiteCommon, CryptoProvider};
use rustls::{CipherSuite, SupportedCipherSuite, Tls12CipherSuite, Tls13CipherSuite};
use std::sync::LazyLock;

/// `suite` (one of aws-lc-rs' suites) with this module's replacements, or `suite` itself when
/// none applies.
pub fn tuned(suite: SupportedCipherSuite) -> SupportedCipherSuite {
    TUNED
        .iter()
        .find(|s| s.suite() == suite.suite())
        .copied()
        .unwrap_or(suite)
}

/// aws-lc-rs' default provider with its suites tuned.
pub fn tuned_provider() -> CryptoProvider {
    let base = aws_lc_rs::default_provider();
    CryptoProvider {
        cipher_suites: base.cipher_suites.iter().map(|s| tuned(*s)).collect(),
        ..base
    }
}

/// Every aws-lc-rs suite, tuned: built once, and kept for the process's life because rustls
/// holds suites by `'static` reference.
static TUNED: LazyLock<Vec<SupportedCipherSuite>> = LazyLock::new(|| {
    let ring_gcm = ring_gcm_is_faster();
    aws_lc_rs::ALL_CIPHER_SUITES
        .iter()
        .map(|s| build(*s, ring_gcm))
        .collect()
});

fn build(base: SupportedCipherSuite, ring_gcm: bool) -> SupportedCipherSuite {
    let gcm = if ring_gcm {
        ring_aes_gcm(base.suite())
    } else {
        None
    };
    match (base, gcm) {
        (SupportedCipherSuite::Tls13(s), gcm) => {
            let (aead_alg, quic) = match gcm {
                Some(SupportedCipherSuite::Tls13(r)) => (r.aead_alg, r.quic),
                _ => (s.aead_alg, s.quic),
            };
            SupportedCipherSuite::Tls13(Box::leak(Box::new(Tls13CipherSuite {
                common: common(&s.common),
                hkdf_provider: hkdf::for_hash(s.common.hash_provider.algorithm()),
                aead_alg,
                quic,
            })))
        }
        (SupportedCipherSuite::Tls12(s), Some(SupportedCipherSuite::Tls12(r))) => {
            SupportedCipherSuite::Tls12(Box::leak(Box::new(Tls12CipherSuite {
                common: common(&s.common),
                prf_provider: s.prf_provider,
                kx: s.kx,
                sign: s.sign,
                aead_alg: r.aead_alg,
            })))
        }
        (base, _) => base,
    }
}

fn common(c: &CipherSuiteCommon) -> CipherSuiteCommon {
    CipherSuiteCommon {
        suite: c.suite,
        hash_provider: c.hash_provider,
        confidentiality_limit: c.confidentiality_limit,
    }
}

/// ring's suite of the same name when it is an AES-GCM one.
fn ring_aes_gcm(suite: CipherSuite) -> Option<SupportedCipherSuite> {
    if !AES_GCM.contains(&suite) {
        return None;
    }
    ring::ALL_CIPHER_SUITES
        .iter()
        .find(|s| s.suite() == suite)
        .copied()
}

const AES_GCM: [CipherSuite; 6] = [
    CipherSuite::TLS13_AES_128_GCM_SHA256,
    CipherSuite::TLS13_AES_256_GCM_SHA384,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
];

/// Whether this CPU runs ring's VAES/AVX2 AES-GCM and not aws-lc's AVX-512 one.
#[cfg(target_arch = "x86_64")]
fn ring_gcm_is_faster() -> bool {
    let vaes = std::is_x86_feature_detected!("vaes")
        && std::is_x86_feature_detected!("vpclmulqdq")
        && std::is_x86_feature_detected!("avx2");
    let avx512 = std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512bw")
        && std::is_x86_feature_detected!("avx512vl");
    vaes && !avx512
}

#[cfg(not(target_arch = "x86_64"))]
fn ring_gcm_is_faster() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::crypto::cipher::{
        AeadKey, InboundOpaqueMessage, Iv, OutboundChunks, OutboundPlainMessage,
    };
    use rustls::{ContentType, ProtocolVersion};

    /// A key of `len` bytes (16 or 32), the same each call: rustls makes keys of other
    /// lengths than 32 only through its key schedule.
    fn key(len: usize) -> AeadKey {
        use rustls::crypto::aws_lc_rs::cipher_suite as aws_lc;
        let suite = match len {
            16 => aws_lc::TLS13_AES_128_GCM_SHA256,
            _ => aws_lc::TLS13_AES_256_GCM_SHA384,
        };
        let SupportedCipherSuite::Tls13(s) = suite else {
            panic!("not a TLS 1.3 suite")
        };
        let secret = s.hkdf_provider.extract_from_secret(None, &[0x42; 32]);
        let key = rustls::internal::derive_traffic_key(&*secret, s.aead_alg);
        assert_eq!(key.as_ref().len(), len);
        key
    }

    fn key_len(suite: SupportedCipherSuite) -> usize {
        match suite {
            SupportedCipherSuite::Tls13(s) => s.aead_alg.key_len(),
            SupportedCipherSuite::Tls12(s) => s.aead_alg.key_block_shape().enc_key_len,
        }
    }

    /// The record a suite's encrypter makes of `payload`.
    fn seal(suite: SupportedCipherSuite, payload: &[u8], seq: u64) -> Vec<u8> {
        let key = key(key_len(suite));
        let mut e = match suite {
            SupportedCipherSuite::Tls13(s) => s.aead_alg.encrypter(key, Iv::new([7; 12])),
            SupportedCipherSuite::Tls12(s) => {
                let shape = s.aead_alg.key_block_shape();
                let extra = &[9; 8][..shape.explicit_nonce_len];
                s.aead_alg
                    .encrypter(key, &[7; 12][..shape.fixed_iv_len], extra)
            }
        };
        let plain = OutboundPlainMessage {
            typ: ContentType::ApplicationData,
            version: ProtocolVersion::TLSv1_2,
            payload: OutboundChunks::Single(payload),
        };
        e.encrypt(plain, seq).unwrap().encode()
    }

    /// The payload a suite's decrypter opens from `record`.
    fn open(suite: SupportedCipherSuite, record: &[u8], seq: u64) -> Vec<u8> {
        let key = key(key_len(suite));
        let mut d = match suite {
            SupportedCipherSuite::Tls13(s) => s.aead_alg.decrypter(key, Iv::new([7; 12])),
            SupportedCipherSuite::Tls12(s) => {
                let shape = s.aead_alg.key_block_shape();
                s.aead_alg.decrypter(key, &[7; 12][..shape.fixed_iv_len])
            }
        };
        let mut record = record.to_vec();
        let msg = InboundOpaqueMessage::new(
            ContentType::ApplicationData,
            ProtocolVersion::TLSv1_2,
            &mut record[5..],
        );
        d.decrypt(msg, seq).unwrap().payload.to_vec()
    }

    /// Every tuned suite seals the bytes aws-lc-rs' own does, and each opens the other's.
    #[test]
    fn same_records_as_aws_lc_rs() {
        let payload: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
        for &theirs in aws_lc_rs::ALL_CIPHER_SUITES {
            let ours = tuned(theirs);
            assert_eq!(ours.suite(), theirs.suite());
            for (len, seq) in [(0, 0), (6, 1), (100, 2), (5000, u64::MAX - 1)] {
                let a = seal(ours, &payload[..len], seq);
                let b = seal(theirs, &payload[..len], seq);
                assert_eq!(a, b, "{:?}, {len} bytes", ours.suite());
                assert_eq!(open(theirs, &a, seq), &payload[..len]);
                assert_eq!(open(ours, &b, seq), &payload[..len]);
            }
        }
    }

    /// ring's AEAD is taken for the AES-GCM suites exactly when the CPU check says so, and
    /// nothing else changes but the TLS 1.3 key schedule.
    #[test]
    fn only_the_named_parts_change() {
        let ring_gcm = ring_gcm_is_faster();
        for &theirs in aws_lc_rs::ALL_CIPHER_SUITES {
            let id = theirs.suite();
            let from_ring = ring_gcm && AES_GCM.contains(&id);
            match (tuned(theirs), theirs, ring_aes_gcm(id)) {
                (SupportedCipherSuite::Tls13(o), SupportedCipherSuite::Tls13(t), r) => {
                    assert!(!std::ptr::addr_eq(o.hkdf_provider, t.hkdf_provider));
                    let want = match r {
                        Some(SupportedCipherSuite::Tls13(r)) if from_ring => r.aead_alg,
                        _ => t.aead_alg,
                    };
                    assert!(std::ptr::addr_eq(o.aead_alg, want), "{id:?}");
                    assert_eq!(o.quic.is_some(), t.quic.is_some());
                }
                (SupportedCipherSuite::Tls12(o), SupportedCipherSuite::Tls12(t), r) => {
                    assert!(std::ptr::addr_eq(o.prf_provider, t.prf_provider));
                    match r {
                        Some(SupportedCipherSuite::Tls12(r)) if from_ring => {
                            assert!(std::ptr::addr_eq(o.aead_alg, r.aead_alg))
                        }
                        _ => assert!(std::ptr::eq(o, t), "{id:?}"),
                    }
                }
                _ => panic!("the version of {id:?} changed"),
            }
        }
    }
}
