//! Session ticket keys that rotate: every `lifetime` a fresh random key starts encrypting new
//! tickets, and the previous one is kept for one more period so recent tickets still resume.

use rustls::crypto::aws_lc_rs::Ticketer;
use rustls::server::ProducesTickets;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct Rotating {
    lifetime: Duration,
    keys: RwLock<Keys>,
}

#[derive(Debug)]
struct Keys {
    current: Arc<dyn ProducesTickets>,
    previous: Option<Arc<dyn ProducesTickets>>,
    rotate_at: Instant,
}

impl Rotating {
    pub fn new(lifetime: Duration) -> Result<Arc<Rotating>, String> {
        Ok(Arc::new(Rotating {
            lifetime,
            keys: RwLock::new(Keys {
                current: fresh_key()?,
                previous: None,
                rotate_at: Instant::now() + lifetime,
            }),
        }))
    }

    /// Rotates when `now` is past the rotation time. A poisoned lock or a failed key
    /// generation keeps the current key (logged) rather than failing handshakes.
    fn rotate_if_due(&self, now: Instant) {
        let due = match self.keys.read() {
            Ok(k) => now >= k.rotate_at,
            Err(_) => false,
        };
        if !due {
            return;
        }
        let Ok(mut k) = self.keys.write() else {
            return;
        };
        // Another thread may have rotated while we waited for the lock.
        if now < k.rotate_at {
            return;
        }
        match fresh_key() {
            Ok(next) => {
                k.previous = Some(std::mem::replace(&mut k.current, next));
                k.rotate_at = now + self.lifetime;
            }
            Err(e) => tracing::warn!("session ticket key rotation failed: {e}"),
        }
    }

    fn encrypt_at(&self, plain: &[u8], now: Instant) -> Option<Vec<u8>> {
        self.rotate_if_due(now);
        self.keys.read().ok()?.current.encrypt(plain)
    }

    fn decrypt_at(&self, cipher: &[u8], now: Instant) -> Option<Vec<u8>> {
        self.rotate_if_due(now);
        let k = self.keys.read().ok()?;
        k.current
            .decrypt(cipher)
            .or_else(|| k.previous.as_ref()?.decrypt(cipher))
    }
}

impl ProducesTickets for Rotating {
    fn enabled(&self) -> bool {
        true
    }

    /// Seconds a client may keep a ticket: one rotation period (it stays decryptable for up
    /// to two).
    fn lifetime(&self) -> u32 {
        u32::try_from(self.lifetime.as_secs()).unwrap_or(u32::MAX)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.encrypt_at(plain, Instant::now())
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.decrypt_at(cipher, Instant::now())
    }
}

/// A ticket key from rustls' RFC 5077 construction (AES-256-CBC + HMAC-SHA256, random keys).
fn fresh_key() -> Result<Arc<dyn ProducesTickets>, String> {
    Ticketer::new().map_err(|e| format!("cannot make a session ticket key: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn previous_key_survives_one_rotation_only() {
        let t = match Rotating::new(Duration::from_secs(60)) {
            Ok(t) => t,
            Err(e) => panic!("{e}"),
        };
        let start = Instant::now();
        let ticket = t.encrypt_at(b"session", start).unwrap_or_default();
        assert!(!ticket.is_empty());
        assert_eq!(
            t.decrypt_at(&ticket, start).as_deref(),
            Some(&b"session"[..])
        );
        // One rotation: new tickets use a new key, the old ticket still resumes.
        let later = start + Duration::from_secs(61);
        let newer = t.encrypt_at(b"session", later).unwrap_or_default();
        assert_ne!(newer, ticket);
        assert_eq!(
            t.decrypt_at(&ticket, later).as_deref(),
            Some(&b"session"[..])
        );
        // A second rotation retires the first key.
        let much_later = later + Duration::from_secs(61);
        assert_eq!(t.decrypt_at(&ticket, much_later), None);
        assert_eq!(
            t.decrypt_at(&newer, much_later).as_deref(),
            Some(&b"session"[..])
        );
        assert_eq!(t.lifetime(), 60);
        assert_eq!(t.decrypt_at(b"garbage", much_later), None);
    }
}
