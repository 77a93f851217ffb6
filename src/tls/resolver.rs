//! Chooses a certificate by the client's SNI name: h2o attaches an `ssl` listen to a host, so
//! each host's certificate is served for its name; an unknown or absent name gets the first.

use crate::config::Identity;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug)]
pub struct SniResolver {
    /// Each identity's keys (several when a host has, say, RSA and ECDSA certificates).
    identities: Vec<Vec<Arc<CertifiedKey>>>,
    /// Lowercased exact names -> identity index.
    exact: HashMap<String, usize>,
    /// `*.example.com` stored as `.example.com` -> identity index, in configuration order.
    wildcards: Vec<(String, usize)>,
}

impl SniResolver {
    /// The first identity is the default. The first identity that names a host wins. `keys`
    /// holds each identity's certificates, in the same order.
    pub fn new(
        identities: &[Identity],
        keys: &[Vec<Arc<CertifiedKey>>],
    ) -> Result<SniResolver, String> {
        if keys.iter().all(Vec::is_empty) {
            return Err("no certificate configured".into());
        }
        let mut exact = HashMap::new();
        let mut wildcards: Vec<(String, usize)> = Vec::new();
        for (i, id) in identities.iter().enumerate() {
            for name in &id.names {
                let name = name.to_ascii_lowercase();
                match name.strip_prefix('*') {
                    Some(suffix) if suffix.starts_with('.') => {
                        if !wildcards.iter().any(|(s, _)| s == suffix) {
                            wildcards.push((suffix.to_owned(), i));
                        }
                    }
                    _ => {
                        exact.entry(name).or_insert(i);
                    }
                }
            }
        }
        Ok(SniResolver {
            identities: keys.to_vec(),
            exact,
            wildcards,
        })
    }

    /// The identity index for an SNI name, falling back to the first identity.
    fn index(&self, sni: Option<&str>) -> usize {
        let Some(name) = sni else { return 0 };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if let Some(&i) = self.exact.get(&name) {
            return i;
        }
        // A wildcard covers exactly one label.
        if let Some(dot) = name.find('.') {
            let suffix = &name[dot..];
            if dot > 0 {
                if let Some((_, i)) = self.wildcards.iter().find(|(s, _)| s == suffix) {
                    return *i;
                }
            }
        }
        0
    }
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let keys = self
            .identities
            .get(self.index(hello.server_name()))
            .filter(|k| !k.is_empty())
            .or_else(|| self.identities.iter().find(|k| !k.is_empty()))?;
        let schemes = hello.signature_schemes();
        keys.iter()
            .find(|k| k.key.choose_scheme(schemes).is_some())
            .or_else(|| keys.first())
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Location;

    fn identity(names: &[&str], n: u8) -> (Identity, Vec<Arc<CertifiedKey>>) {
        // A distinguishable key: the certificate bytes carry the index.
        let key = aws_key();
        let identity = Identity {
            names: names.iter().map(|s| s.to_string()).collect(),
            keys: Vec::new(),
            ocsp_response: None,
            at: Location {
                file: Arc::from("t"),
                line: 1,
            },
        };
        let keys = vec![Arc::new(CertifiedKey::new(
            vec![rustls_pki_types::CertificateDer::from(vec![n])],
            key,
        ))];
        (identity, keys)
    }

    fn resolver(
        identities: Vec<(Identity, Vec<Arc<CertifiedKey>>)>,
    ) -> Result<SniResolver, String> {
        let (identities, keys): (Vec<_>, Vec<_>) = identities.into_iter().unzip();
        SniResolver::new(&identities, &keys)
    }

    fn aws_key() -> Arc<dyn rustls::sign::SigningKey> {
        let pair = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let der = rustls_pki_types::PrivateKeyDer::Pkcs8(pair.serialize_der().into());
        rustls::crypto::aws_lc_rs::default_provider()
            .key_provider
            .load_private_key(der)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn exact_wildcard_and_default() {
        let r = resolver(vec![
            identity(&[], 0),
            identity(&["a.example"], 1),
            identity(&["*.b.example"], 2),
            identity(&["a.example", "x.b.example"], 3),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.index(Some("a.example")), 1);
        assert_eq!(r.index(Some("A.Example.")), 1);
        assert_eq!(r.index(Some("w.b.example")), 2);
        // An exact name beats a wildcard; a wildcard covers one label only.
        assert_eq!(r.index(Some("x.b.example")), 3);
        assert_eq!(r.index(Some("b.example")), 0);
        assert_eq!(r.index(Some("v.w.b.example")), 0);
        assert_eq!(r.index(Some("other.example")), 0);
        assert_eq!(r.index(None), 0);
        assert!(SniResolver::new(&[], &[]).is_err());
    }
}
