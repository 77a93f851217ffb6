//! Test certificates made with rcgen, written as PEM files.

use std::path::{Path, PathBuf};

/// A self-signed certificate for `names`, valid now (or expired when `expired`), and its key,
/// written as `{stem}.crt` and `{stem}.key` in `dir`.
pub fn write(dir: &Path, stem: &str, names: &[&str], expired: bool) -> (PathBuf, PathBuf) {
    let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("key: {e}"));
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = rcgen::CertificateParams::new(names).unwrap_or_else(|e| panic!("params: {e}"));
    if expired {
        params.not_before = rcgen::date_time_ymd(2000, 1, 1);
        params.not_after = rcgen::date_time_ymd(2001, 1, 1);
    }
    let cert = params
        .self_signed(&key)
        .unwrap_or_else(|e| panic!("sign: {e}"));
    let (c, k) = (
        dir.join(format!("{stem}.crt")),
        dir.join(format!("{stem}.key")),
    );
    std::fs::write(&c, cert.pem()).unwrap_or_else(|e| panic!("write: {e}"));
    std::fs::write(&k, key.serialize_pem()).unwrap_or_else(|e| panic!("write: {e}"));
    (c, k)
}
