//! What a TLS listener's files hold: its certificates with their keys and OCSP responses, and
//! the roots of `client-ca-file` (and that its `dh-file` exists), read from the paths its
//! [`TlsConf`] names. A problem is an error at the line that names the file.

use super::cert::{self, CertError};
use super::client;
use crate::config::{ConfigError, PathAt, TlsConf};
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;
use std::sync::Arc;

/// The keys and roots of one TLS listener.
#[derive(Debug)]
pub struct Keys {
    /// Per identity of the [`TlsConf`], in its order: the certificates with their keys.
    pub identities: Vec<Vec<Arc<CertifiedKey>>>,
    /// The roots of `client-ca-file`.
    pub client_ca: Option<Arc<RootCertStore>>,
}

impl Keys {
    /// Reads every file `tls` names; every problem is returned, not just the first.
    pub fn load(tls: &TlsConf) -> Result<Keys, Vec<ConfigError>> {
        let mut errors = Vec::new();
        let client_ca = tls.client_ca.as_ref().and_then(|file| {
            client::load_roots(&file.path)
                .map_err(|e| errors.push(error(file, format!("listen.ssl.client-ca-file: {e}"))))
                .ok()
                .map(Arc::new)
        });
        if let Some(file) = &tls.dh_file {
            if let Err(e) = std::fs::metadata(&file.path) {
                let path = file.path.display();
                errors.push(error(file, format!("listen.ssl.dh-file: {path}: {e}")));
            }
        }
        let mut identities = Vec::with_capacity(tls.identities.len());
        for identity in &tls.identities {
            let mut keys = Vec::with_capacity(identity.keys.len());
            for pair in &identity.keys {
                match cert::load(&pair.certificate.path, &pair.key.path) {
                    Ok(k) => keys.push(k),
                    Err(e) => {
                        let file = match e {
                            CertError::Certificate(_) => &pair.certificate,
                            CertError::Key(_) => &pair.key,
                        };
                        errors.push(error(file, e.to_string()));
                    }
                }
            }
            if let Some(file) = &identity.ocsp_response {
                match ocsp_response(file) {
                    Ok(der) => {
                        for k in &mut keys {
                            k.ocsp = Some(der.clone());
                        }
                    }
                    Err(e) => errors.push(e),
                }
            }
            identities.push(keys.into_iter().map(Arc::new).collect());
        }
        match errors.is_empty() {
            true => Ok(Keys {
                identities,
                client_ca,
            }),
            false => Err(errors),
        }
    }
}

/// `ocsp-response-file`: a DER OCSP response, stapled as it is.
fn ocsp_response(file: &PathAt) -> Result<Vec<u8>, ConfigError> {
    let path = file.path.display();
    match std::fs::read(&file.path) {
        Ok(der) if !der.is_empty() => Ok(der),
        Ok(_) => Err(error(file, format!("{path}: the OCSP response is empty"))),
        Err(e) => Err(error(file, format!("{path}: cannot read: {e}"))),
    }
}

fn error(file: &PathAt, message: String) -> ConfigError {
    ConfigError {
        at: file.at.clone(),
        message,
    }
}
