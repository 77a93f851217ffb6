//! The `storage` directory: `account.json` (the account's URL and key, instant-acme's
//! credentials) and, per host, `NAME.crt` (the chain, PEM) and `NAME.key` (PKCS#8 PEM).
//! Files are written whole to a temporary name and renamed, keys and the account readable by
//! the owner only, so that a crash or a full disk never leaves half a file in use.
//!
//! Several processes may share one storage (a fleet): `NAME.lock`, made with `O_EXCL`, says
//! one of them is ordering for NAME; the others wait and then take the stored certificate.
//! HTTP-01 tokens are put in `http-01/` too, so that whichever process the CA reaches
//! answers.

use rustls::sign::CertifiedKey;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub struct Storage {
    dir: PathBuf,
}

/// How long an order may hold the lock before another process takes it over.
const STALE_LOCK: std::time::Duration = std::time::Duration::from_secs(600);

/// The fleet's lock on one name, released when dropped.
pub struct Lock {
    path: PathBuf,
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Storage {
    /// The directory, created (owner only) if missing.
    pub fn open(dir: &Path) -> Result<Storage, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("storage {}: {e}", dir.display()))?;
        Ok(Storage {
            dir: dir.to_path_buf(),
        })
    }

    /// The tokens of HTTP-01 challenges under way, by any process of the fleet.
    pub fn http01_dir(&self) -> PathBuf {
        self.dir.join("http-01")
    }

    pub fn put_token(&self, token: &str, key_authorization: &str) -> Result<(), String> {
        let dir = self.http01_dir();
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        self.write(&dir.join(token), key_authorization.as_bytes())
    }

    /// Takes the fleet's lock for ordering `name`: `None` while another process holds it.
    /// A lock older than [`STALE_LOCK`] was left by a process that died, and is taken over.
    pub fn lock(&self, name: &str) -> Result<Option<Lock>, String> {
        let path = self.dir.join(format!("{name}.lock"));
        for _ in 0..2 {
            let made = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path);
            match made {
                Ok(mut f) => {
                    let _ = writeln!(f, "{}", std::process::id());
                    return Ok(Some(Lock { path }));
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let age = std::fs::metadata(&path)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok());
                    match age {
                        Some(age) if age > STALE_LOCK => {
                            tracing::warn!(
                                "acme: {}: left by a process that stopped; taken over",
                                path.display()
                            );
                            let _ = std::fs::remove_file(&path);
                        }
                        _ => return Ok(None),
                    }
                }
                Err(e) => return Err(format!("cannot lock {}: {e}", path.display())),
            }
        }
        Ok(None)
    }

    pub fn account_path(&self) -> PathBuf {
        self.dir.join("account.json")
    }

    /// The stored account credentials; `Ok(None)` when there are none yet.
    pub fn account(&self) -> Result<Option<instant_acme::AccountCredentials>, String> {
        let path = self.account_path();
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| format!("{}: not an account file: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    pub fn save_account(
        &self,
        credentials: &instant_acme::AccountCredentials,
    ) -> Result<(), String> {
        let json = serde_json::to_vec_pretty(credentials).map_err(|e| e.to_string())?;
        self.write(&self.account_path(), &json)
    }

    fn cert_paths(&self, name: &str) -> (PathBuf, PathBuf) {
        (
            self.dir.join(format!("{name}.crt")),
            self.dir.join(format!("{name}.key")),
        )
    }

    /// The names that have a certificate stored.
    pub fn names(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        entries
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter_map(|f| f.strip_suffix(".crt").map(str::to_owned))
            .collect()
    }

    /// The stored certificate of host `name`, if there is a usable one.
    pub fn cert(&self, name: &str) -> Option<CertifiedKey> {
        let (crt, key) = self.cert_paths(name);
        if !crt.exists() {
            return None;
        }
        match crate::tls::cert::load(&crt, &key) {
            Ok(k) => Some(k),
            Err(e) => {
                tracing::warn!("acme: {name}: the stored certificate is not used: {e}");
                None
            }
        }
    }

    /// Stores a new certificate: the key first, then the chain, each whole.
    pub fn save_cert(&self, name: &str, chain_pem: &str, key_pem: &str) -> Result<(), String> {
        let (crt, key) = self.cert_paths(name);
        self.write(&key, key_pem.as_bytes())?;
        self.write(&crt, chain_pem.as_bytes())
    }

    fn write(&self, path: &Path, bytes: &[u8]) -> Result<(), String> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let result = (|| {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)
        })();
        result.map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("cannot write {}: {e}", path.display())
        })
    }
}
