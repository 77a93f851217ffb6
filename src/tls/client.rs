//! The client side of TLS, for `https://` backends: the rustls `ClientConfig` of a proxied
//! path, built once when the configuration is prepared (`proxy.ssl.*`), shared by every worker.
//!
//! Two configurations share one session cache: one offers only `http/1.1` in ALPN, the other
//! `h2` first (for the share of requests `proxy.http2.ratio` sends over HTTP/2), so that a
//! connection meant for HTTP/1.1 is never upgraded behind the proxy's back.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ClientSessionMemoryCache, Resumption};
use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use std::path::Path;
use std::sync::Arc;

/// Where Debian (and most distributions) keep the system's trusted roots: the default
/// `proxy.ssl.cafile` (h2o uses the Mozilla bundle it ships, which is the same list).
pub const SYSTEM_CA_FILE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The TLS client of a backend, built once by the server's `prepare` and shared by every
/// worker.
#[derive(Clone)]
pub struct TlsClient(pub Arc<ClientTls>);

impl std::fmt::Debug for TlsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TlsClient({:?})", self.0.server_name)
    }
}

/// The same configuration, not merely an equal one (rustls' has no equality).
impl PartialEq for TlsClient {
    fn eq(&self, other: &TlsClient) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for TlsClient {}

/// How a path talks TLS to its backend.
pub struct ClientTls {
    /// ALPN `http/1.1` only.
    pub http1: Arc<ClientConfig>,
    /// ALPN `h2`, then `http/1.1` (a backend that does not speak h2 picks the latter).
    pub http2: Arc<ClientConfig>,
    /// The URL's host: sent as SNI and checked against the certificate.
    pub server_name: ServerName<'static>,
}

/// `proxy.ssl.*` as the configuration gives them.
pub struct ClientOptions {
    /// `None`: `proxy.ssl.verify-peer: OFF`.
    pub roots: Option<Arc<RootCertStore>>,
    /// Entries of the session cache; `None`: `proxy.ssl.session-cache: OFF`.
    pub session_cache: Option<usize>,
}

impl ClientTls {
    pub fn new(host: &str, opts: &ClientOptions) -> Result<ClientTls, String> {
        let server_name = ServerName::try_from(host.to_owned())
            .map_err(|e| format!("\"{host}\" cannot be a TLS server name: {e}"))?;
        let provider = Arc::new(super::suites::tuned_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("no usable TLS configuration: {e}"))?;
        let mut config = match &opts.roots {
            Some(roots) => builder
                .with_root_certificates(roots.clone())
                .with_no_client_auth(),
            None => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerify(provider)))
                .with_no_client_auth(),
        };
        config.resumption = match opts.session_cache {
            Some(n) => Resumption::store(Arc::new(ClientSessionMemoryCache::new(n))),
            None => Resumption::disabled(),
        };
        let mut http1 = config.clone();
        http1.alpn_protocols = vec![b"http/1.1".to_vec()];
        let mut http2 = config;
        http2.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(ClientTls {
            http1: Arc::new(http1),
            http2: Arc::new(http2),
            server_name,
        })
    }
}

/// Reads the trusted roots of `proxy.ssl.cafile` (PEM, one or more certificates).
pub fn load_roots(path: &Path) -> Result<RootCertStore, String> {
    let bad = |m: String| format!("{}: {m}", path.display());
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|e| match e {
            rustls_pki_types::pem::Error::Io(e) => bad(format!("cannot read: {e}")),
            e => bad(format!("not valid PEM: {e}")),
        })?;
    if certs.is_empty() {
        return Err(bad("no certificate (PEM) found".into()));
    }
    let mut roots = RootCertStore::empty();
    let (_, rejected) = roots.add_parsable_certificates(certs);
    if roots.is_empty() {
        return Err(bad(format!(
            "none of its {rejected} certificate(s) can be a trust anchor"
        )));
    }
    Ok(roots)
}

/// `proxy.ssl.verify-peer: OFF`: any certificate is accepted, but the handshake signatures are
/// still checked (the connection is encrypted to whoever holds the key it presents).
#[derive(Debug)]
struct NoVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
