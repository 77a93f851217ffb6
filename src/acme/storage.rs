//! The `storage` directory: `account.json` (the account's URL and key, instant-acme's
//! credentials) and, per host, `NAME.crt` (the chain, PEM) and `NAME.key` (PKCS#8 PEM).
//! Files are written whole to a temporary name and renamed, keys and the account readable by
//! the owner only, so that a crash or a full disk never leaves half a file in use.

use rustls::sign::CertifiedKey;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub struct Storage {
    dir: PathBuf,
}

impl Storage {
    /// The directory, created (owner only) if missing.
    pub fn open(dir: &Path) -> Result<Storage, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("storage {}: {e}", dir.display()))?;
        Ok(Storage {
            dir: dir.to_path_buf(),
        })
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
        let tmp = path.with_extension("tmp");
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
