//! One order (RFC 8555 §7.4): every name of a host, each authorization answered by the first
//! challenge of `challenges` the CA offers, then the CSR and the certificate chain.

use crate::config::{AcmeChallenge, AcmeKeyType};
use crate::tls::managed;
use instant_acme::{
    Account, AuthorizationStatus, CertificateIdentifier, ChallengeType, Identifier, NewOrder,
    OrderStatus, RetryPolicy,
};
use rcgen::{CertificateParams, CustomExtension, KeyPair};
use rustls::sign::CertifiedKey;
use std::sync::Arc;
use std::time::Duration;

/// A certificate just issued: its chain and key in PEM, as stored.
pub struct Issued {
    pub chain_pem: String,
    pub key_pem: String,
}

/// How long the CA may take to validate and to issue.
const POLL: RetryPolicy = RetryPolicy::new()
    .initial_delay(Duration::from_millis(100))
    .backoff(1.5)
    .timeout(Duration::from_secs(90));

/// Orders a certificate for `names` (the first is the host's).
pub async fn issue(
    storage: &super::storage::Storage,
    account: &Account,
    names: &[String],
    challenges: &[AcmeChallenge],
    key_type: AcmeKeyType,
    replaces: Option<CertificateIdentifier<'static>>,
) -> Result<Issued, String> {
    let identifiers: Vec<Identifier> = names.iter().cloned().map(Identifier::Dns).collect();
    let made = match replaces {
        Some(id) => {
            let made = account
                .new_order(&NewOrder::new(&identifiers).replaces(id))
                .await;
            if let Ok(order) = &made {
                tracing::info!(
                    "acme: {}: renewal order replaces the certificate in use ({})",
                    names[0],
                    order.url()
                );
            }
            match made {
                // RFC 9773 §5: a CA may refuse `replaces` (the certificate was replaced
                // already, by another process of a fleet say); an order without it still
                // renews.
                Err(e) => {
                    tracing::info!(
                        "acme: {}: order with replaces refused ({e}); ordering without it",
                        names[0]
                    );
                    account.new_order(&NewOrder::new(&identifiers)).await
                }
                ok => ok,
            }
        }
        None => account.new_order(&NewOrder::new(&identifiers)).await,
    };
    let mut order = made.map_err(|e| format!("new order: {e}"))?;
    let mut answered = Answered {
        tokens: Vec::new(),
        alpn: Vec::new(),
        dir: storage.http01_dir(),
    };
    let mut authorizations = order.authorizations();
    while let Some(authz) = authorizations.next().await {
        let mut authz = authz.map_err(|e| format!("authorization: {e}"))?;
        match authz.status {
            AuthorizationStatus::Pending => {}
            AuthorizationStatus::Valid => continue,
            other => return Err(format!("authorization is {other:?}")),
        }
        let name = match authz.identifier().identifier {
            Identifier::Dns(name) => name.clone(),
            other => return Err(format!("unexpected identifier {other:?}")),
        };
        let offered: Vec<ChallengeType> =
            authz.challenges.iter().map(|c| c.r#type.clone()).collect();
        let Some(kind) = challenges
            .iter()
            .find(|c| offered.contains(&challenge_type(**c)))
        else {
            return Err(format!(
                "{name}: the CA offers none of the configured challenges"
            ));
        };
        let Some(mut challenge) = authz.challenge(challenge_type(*kind)) else {
            return Err(format!("{name}: the {} challenge vanished", kind.name()));
        };
        let key_authorization = challenge.key_authorization();
        match kind {
            AcmeChallenge::Http01 => {
                let token = &challenge.token;
                managed::set_http01(token, Some(key_authorization.as_str().to_owned()));
                answered.tokens.push(token.clone());
                // For the other processes of a fleet, which the CA may reach instead.
                if let Err(e) = storage.put_token(token, key_authorization.as_str()) {
                    tracing::warn!("acme: {name}: {e}");
                }
            }
            AcmeChallenge::TlsAlpn01 => {
                let cert = alpn_certificate(&name, key_authorization.digest().as_ref())?;
                managed::set_alpn_challenge(&name, Some(Arc::new(cert)));
                answered.alpn.push(name.clone());
            }
        }
        tracing::info!("acme: {name}: answering {}", kind.name());
        challenge
            .set_ready()
            .await
            .map_err(|e| format!("{name}: {}: {e}", kind.name()))?;
    }
    let status = order
        .poll_ready(&POLL)
        .await
        .map_err(|e| format!("validation: {e}"))?;
    if status != OrderStatus::Ready {
        return Err(format!("the order is {status:?} after validation"));
    }
    drop(answered);
    let key = match key_type {
        AcmeKeyType::EcdsaP256 => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256),
        AcmeKeyType::Rsa2048 => KeyPair::generate_for(&rcgen::PKCS_RSA_SHA256),
    }
    .map_err(|e| format!("key generation: {e}"))?;
    let params = CertificateParams::new(names.to_vec()).map_err(|e| format!("CSR: {e}"))?;
    let csr = params
        .serialize_request(&key)
        .map_err(|e| format!("CSR: {e}"))?;
    order
        .finalize_csr(csr.der())
        .await
        .map_err(|e| format!("finalize: {e}"))?;
    let chain_pem = order
        .poll_certificate(&POLL)
        .await
        .map_err(|e| format!("certificate: {e}"))?;
    Ok(Issued {
        chain_pem,
        key_pem: key.serialize_pem(),
    })
}

fn challenge_type(c: AcmeChallenge) -> ChallengeType {
    match c {
        AcmeChallenge::Http01 => ChallengeType::Http01,
        AcmeChallenge::TlsAlpn01 => ChallengeType::TlsAlpn01,
    }
}

/// The answers put up for the CA, taken down however the order ends.
struct Answered {
    tokens: Vec<String>,
    alpn: Vec<String>,
    /// The storage's `http-01/`.
    dir: std::path::PathBuf,
}

impl Drop for Answered {
    fn drop(&mut self) {
        for token in &self.tokens {
            managed::set_http01(token, None);
            let _ = std::fs::remove_file(self.dir.join(token));
        }
        for name in &self.alpn {
            managed::set_alpn_challenge(name, None);
        }
    }
}

/// RFC 8737 §3: a self-signed certificate for `name` with the critical acmeIdentifier
/// extension holding the SHA-256 of the key authorization.
fn alpn_certificate(name: &str, digest: &[u8]) -> Result<CertifiedKey, String> {
    let key = KeyPair::generate().map_err(|e| format!("tls-alpn-01 key: {e}"))?;
    let mut params =
        CertificateParams::new(vec![name.to_owned()]).map_err(|e| format!("tls-alpn-01: {e}"))?;
    params.custom_extensions = vec![CustomExtension::new_acme_identifier(digest)];
    let cert = params
        .self_signed(&key)
        .map_err(|e| format!("tls-alpn-01 certificate: {e}"))?;
    let der = rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let signing = rustls::crypto::aws_lc_rs::default_provider()
        .key_provider
        .load_private_key(der)
        .map_err(|e| format!("tls-alpn-01 key: {e}"))?;
    Ok(CertifiedKey::new(vec![cert.der().clone()], signing))
}
