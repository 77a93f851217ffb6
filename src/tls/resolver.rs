//! Chooses a certificate by the client's SNI name: h2o attaches an `ssl` listen to a host, so
//! each host's certificate is served for its name; an unknown or absent name gets the first.
//! A host whose certificate ACME manages has it looked up in [`super::managed`] at each
//! handshake, so that a renewal is used with no restart.

use crate::config::Identity;
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use std::collections::HashMap;
use std::sync::Arc;

/// Where an identity's certificate comes from.
#[derive(Debug)]
enum Source {
    /// Its own files.
    Files,
    /// ACME, kept under this name in [`super::managed`].
    Acme(String),
    /// ACME on demand (a `*.DOMAIN` host): one certificate per name, kept under the name.
    OnDemand,
}

/// What an ACME identity answers a handshake with.
enum AcmeAnswer {
    Key(Arc<CertifiedKey>),
    /// No certificate: the handshake fails (rustls sends the alert).
    Refuse,
    /// The files' certificates.
    Files,
}

#[derive(Debug)]
pub struct SniResolver {
    /// Each identity's keys (several when a host has, say, RSA and ECDSA certificates).
    identities: Vec<Vec<Arc<CertifiedKey>>>,
    /// Lowercased exact names -> identity index.
    exact: HashMap<String, usize>,
    /// `*.example.com` stored as `.example.com` -> identity index, in configuration order.
    wildcards: Vec<(String, usize)>,
    /// Per identity: where its certificate comes from.
    managed: Vec<Source>,
    /// Whether any identity is ACME's: only then is a TLS-ALPN-01 handshake answered.
    acme: bool,
}

impl SniResolver {
    /// The first identity is the default. The first identity that names a host wins. `keys`
    /// holds each identity's certificates, in the same order.
    pub fn new(
        identities: &[Identity],
        keys: &[Vec<Arc<CertifiedKey>>],
    ) -> Result<SniResolver, String> {
        let managed: Vec<Source> = identities
            .iter()
            .map(|id| match id.names.first() {
                Some(n) if id.acme && n.starts_with('*') => Source::OnDemand,
                Some(n) if id.acme => Source::Acme(n.clone()),
                _ => Source::Files,
            })
            .collect();
        let acme = managed.iter().any(|m| !matches!(m, Source::Files));
        if keys.iter().all(Vec::is_empty) && !acme {
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
            managed,
            acme,
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
        let index = self.index(hello.server_name());
        if self.acme {
            match self.resolve_acme(&hello, index) {
                AcmeAnswer::Key(k) => return Some(k),
                AcmeAnswer::Refuse => return None,
                AcmeAnswer::Files => {}
            }
        }
        let keys = self
            .identities
            .get(index)
            .filter(|k| !k.is_empty())
            .or_else(|| self.identities.iter().find(|k| !k.is_empty()))?;
        let schemes = hello.signature_schemes();
        keys.iter()
            .find(|k| k.key.choose_scheme(schemes).is_some())
            .or_else(|| keys.first())
            .cloned()
    }
}

impl SniResolver {
    /// A TLS-ALPN-01 handshake's challenge certificate, or the ACME certificate of the
    /// identity `index` (for an on-demand identity, the one of the client's name).
    fn resolve_acme(&self, hello: &ClientHello<'_>, index: usize) -> AcmeAnswer {
        let found = |k: Option<Arc<CertifiedKey>>| match k {
            Some(k) => AcmeAnswer::Key(k),
            None => AcmeAnswer::Refuse,
        };
        let challenge = hello
            .alpn()
            .is_some_and(|mut protocols| protocols.any(|p| p == super::managed::ACME_TLS_ALPN));
        if challenge {
            // RFC 8737 §3: only the challenge certificate, or no handshake at all.
            return found(hello.server_name().and_then(super::managed::alpn_challenge));
        }
        match self.managed.get(index) {
            Some(Source::OnDemand) => {
                // Issued at the name's first handshake (`acme::on_demand`), or refused.
                let name = hello
                    .server_name()
                    .map(|n| n.trim_end_matches('.').to_ascii_lowercase());
                return found(name.as_deref().and_then(super::managed::cert));
            }
            Some(Source::Acme(name)) => {
                if let Some(k) = super::managed::cert(name) {
                    return AcmeAnswer::Key(k);
                }
            }
            _ => {}
        }
        // Not issued yet (or a name of another identity's): any ACME certificate there is
        // serves as the default, as the first identity's would.
        if !self.identities.iter().any(|k| !k.is_empty()) {
            return found(self.managed.iter().find_map(|m| match m {
                Source::Acme(n) => super::managed::cert(n),
                _ => None,
            }));
        }
        AcmeAnswer::Files
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
            acme: false,
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
