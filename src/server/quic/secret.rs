//! The process's QUIC secret: 64 random bytes from which every endpoint's stateless reset key
//! and every generation's Retry token key are derived. One per process, not per endpoint, so
//! that after a reload (new endpoints) or a binary upgrade (a new process, which inherits the
//! secret through a pipe named in `SECRET_FD_ENV`) a stateless reset for a connection of an
//! endpoint that has gone carries the token the client holds (it reconnects at once rather
//! than at its idle timeout), and a Retry token issued by one worker or process is accepted
//! by any other. Never logged; the bytes are zeroed when dropped.

use aws_lc_rs::{aead, hkdf, hmac};
use quinn_proto::crypto::{AeadKey, CryptoError, HandshakeTokenKey, HmacKey};
use std::io::Read;
use std::os::fd::RawFd;
use std::sync::{Arc, OnceLock};
use zeroize::Zeroizing;

/// Bytes of the secret.
pub const LEN: usize = 64;

/// Names the descriptor of a pipe holding the secret of the process that started us.
pub const SECRET_FD_ENV: &str = "SPATE_QUIC_SECRET_FD";

struct Keys {
    secret: Zeroizing<[u8; LEN]>,
    reset: Arc<ResetKey>,
    token: Arc<TokenKey>,
}

static KEYS: OnceLock<Keys> = OnceLock::new();

fn keys() -> &'static Keys {
    KEYS.get_or_init(|| Keys::new(inherited().unwrap_or_else(fresh)))
}

/// The stateless reset key of every endpoint of the process.
pub fn reset_key() -> Arc<dyn HmacKey> {
    keys().reset.clone()
}

/// The Retry token key of every QUIC listener of the process.
pub fn token_key() -> Arc<dyn HandshakeTokenKey> {
    keys().token.clone()
}

/// Takes the secret now (the inherited one, if a binary upgrade started us): its pipe is
/// read and closed even when the configuration no longer has a QUIC listener.
pub fn load() {
    keys();
}

/// Writes the secret into a new pipe and returns its read end, for the process a binary
/// upgrade starts (a pipe holds 64 bytes without a reader).
pub fn hand_over() -> std::io::Result<std::os::fd::OwnedFd> {
    let (read_end, write_end) = crate::sys::file::pipe()?;
    std::io::Write::write_all(&mut std::fs::File::from(write_end), &keys().secret[..])?;
    Ok(read_end)
}

impl Keys {
    fn new(secret: Zeroizing<[u8; LEN]>) -> Keys {
        // Separate keys for separate uses, each an HKDF extraction with its own salt.
        let reset = hkdf::Salt::new(hkdf::HKDF_SHA256, b"spate quic stateless reset")
            .extract(&secret[..])
            .expand(&[], hmac::HMAC_SHA256)
            .map(hmac::Key::from);
        // `expand` fails only for an output longer than 255 hashes; never for one key.
        let reset = reset.unwrap_or_else(|_| hmac::Key::new(hmac::HMAC_SHA256, &secret[..]));
        let token =
            hkdf::Salt::new(hkdf::HKDF_SHA256, b"spate quic retry token").extract(&secret[..]);
        Keys {
            secret,
            reset: Arc::new(ResetKey(reset)),
            token: Arc::new(TokenKey(token)),
        }
    }
}

/// 64 bytes from the system's secure random source.
fn fresh() -> Zeroizing<[u8; LEN]> {
    let mut s = Zeroizing::new([0u8; LEN]);
    if aws_lc_rs::rand::fill(&mut s[..]).is_err() {
        // Never seen (getrandom failing); quinn's own default key would fail the same way.
        tracing::error!("QUIC: no secure random bytes for the stateless reset and token keys");
    }
    s
}

/// The secret the process that started us handed over, if it did. A failure is logged and
/// counted (`spate_quic_secret_handover_failures_total`), and a fresh secret made.
fn inherited() -> Option<Zeroizing<[u8; LEN]>> {
    let spec = std::env::var(SECRET_FD_ENV).ok()?;
    let read = || -> Result<Zeroizing<[u8; LEN]>, String> {
        let fd: RawFd = spec.parse().map_err(|_| format!("cannot read {spec:?}"))?;
        let pipe = crate::sys::process::adopt_inherited(fd)
            .map_err(|e| format!("descriptor {fd}: {e}"))?;
        read_secret(&mut std::fs::File::from(pipe)).map_err(|e| format!("descriptor {fd}: {e}"))
    };
    match read() {
        Ok(s) => Some(s),
        Err(e) => {
            crate::metrics::quic_secret::handover_failed();
            tracing::warn!(
                "{SECRET_FD_ENV}: {e}: a fresh QUIC secret (the previous process's \
                 connections get stateless resets their clients do not recognise)"
            );
            None
        }
    }
}

/// Reads the secret from the pipe. What is transient is tried again: a read interrupted by a
/// signal, and one that gave fewer bytes than asked (the rest follows). The pipe's end
/// before all of it came is not: the previous process wrote no more.
fn read_secret(pipe: &mut impl Read) -> std::io::Result<Zeroizing<[u8; LEN]>> {
    let mut s = Zeroizing::new([0u8; LEN]);
    let mut got = 0;
    while got < LEN {
        match pipe.read(&mut s[got..]) {
            Ok(0) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!("the pipe ended after {got} of {LEN} bytes"),
                ))
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(s)
}

struct ResetKey(hmac::Key);

impl HmacKey for ResetKey {
    fn sign(&self, data: &[u8], out: &mut [u8]) {
        let tag = hmac::sign(&self.0, data);
        let n = out.len().min(tag.as_ref().len());
        out[..n].copy_from_slice(&tag.as_ref()[..n]);
    }

    fn signature_len(&self) -> usize {
        hmac::HMAC_SHA256.digest_algorithm().output_len()
    }

    fn verify(&self, data: &[u8], signature: &[u8]) -> Result<(), CryptoError> {
        hmac::verify(&self.0, data, signature).map_err(|_| CryptoError)
    }
}

struct TokenKey(hkdf::Prk);

/// The key of one token, derived from the token key and the token's random bytes.
struct TokenAead(Option<aead::LessSafeKey>);

impl HandshakeTokenKey for TokenKey {
    fn aead_from_hkdf(&self, random_bytes: &[u8]) -> Box<dyn AeadKey> {
        let mut key = Zeroizing::new([0u8; 32]);
        let info = [random_bytes];
        let made = self
            .0
            .expand(&info, hkdf::HKDF_SHA256)
            .and_then(|okm| okm.fill(&mut key[..]))
            .ok()
            .and_then(|()| aead::UnboundKey::new(&aead::AES_256_GCM, &key[..]).ok())
            .map(aead::LessSafeKey::new);
        // Without a key (never seen) tokens are neither made nor accepted.
        Box::new(TokenAead(made))
    }
}

impl AeadKey for TokenAead {
    fn seal(&self, data: &mut Vec<u8>, additional_data: &[u8]) -> Result<(), CryptoError> {
        let key = self.0.as_ref().ok_or(CryptoError)?;
        // Each token has a key of its own (fresh random bytes): a fixed nonce is safe.
        let nonce = aead::Nonce::assume_unique_for_key([0u8; 12]);
        key.seal_in_place_append_tag(nonce, aead::Aad::from(additional_data), data)
            .map_err(|_| CryptoError)
    }

    fn open<'a>(
        &self,
        data: &'a mut [u8],
        additional_data: &[u8],
    ) -> Result<&'a mut [u8], CryptoError> {
        let key = self.0.as_ref().ok_or(CryptoError)?;
        let nonce = aead::Nonce::assume_unique_for_key([0u8; 12]);
        key.open_in_place(nonce, aead::Aad::from(additional_data), data)
            .map_err(|_| CryptoError)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pipe as a signal and the kernel may present it: reads interrupted, or cut short.
    struct Choppy {
        data: Vec<u8>,
        at: usize,
        calls: usize,
    }

    impl Read for Choppy {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.calls += 1;
            if self.calls % 2 == 1 {
                return Err(std::io::ErrorKind::Interrupted.into());
            }
            let n = buf.len().min(7).min(self.data.len() - self.at);
            buf[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    #[test]
    fn interrupted_and_short_reads_are_tried_again() {
        let data: Vec<u8> = (0..LEN as u8).collect();
        let mut pipe = Choppy {
            data: data.clone(),
            at: 0,
            calls: 0,
        };
        let s = read_secret(&mut pipe).expect("the whole secret");
        assert_eq!(&s[..], &data[..]);
        assert!(pipe.calls > 2 * LEN / 7, "{}", pipe.calls);
    }

    #[test]
    fn a_pipe_that_ends_early_is_a_failure() {
        let mut pipe = Choppy {
            data: vec![1; 10],
            at: 0,
            calls: 0,
        };
        let e = read_secret(&mut pipe).expect_err("short");
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
        assert!(e.to_string().contains("after 10 of 64 bytes"), "{e}");
    }

    #[test]
    fn the_same_secret_gives_the_same_keys() {
        let secret = || Zeroizing::new([7u8; LEN]);
        let (a, b) = (Keys::new(secret()), Keys::new(secret()));
        let (mut x, mut y) = ([0u8; 32], [0u8; 32]);
        a.reset.sign(b"cid", &mut x);
        b.reset.sign(b"cid", &mut y);
        assert_eq!(x, y);
        assert!(b.reset.verify(b"cid", &x).is_ok());
        let mut sealed = b"token".to_vec();
        a.token
            .aead_from_hkdf(b"rand")
            .seal(&mut sealed, b"ad")
            .unwrap();
        let opened = b
            .token
            .aead_from_hkdf(b"rand")
            .open(&mut sealed, b"ad")
            .unwrap();
        assert_eq!(opened, b"token");
        let other = Keys::new(Zeroizing::new([8u8; LEN]));
        let mut z = [0u8; 32];
        other.reset.sign(b"cid", &mut z);
        assert_ne!(x, z);
    }
}
