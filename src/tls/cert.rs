//! Certificate chains and private keys from PEM files, checked the way an operator needs at
//! start (and at `-t`): the files exist and parse, the key matches the certificate, and the
//! certificate has not expired.

use rustls::crypto::aws_lc_rs;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Loads a PEM certificate chain (end-entity first) and its PEM private key (PKCS#8, PKCS#1
/// or SEC1; RSA, ECDSA or Ed25519). The error says which file is at fault and why.
pub fn load(cert_file: &Path, key_file: &Path) -> Result<CertifiedKey, CertError> {
    let chain = load_chain(cert_file)?;
    let key_der = PrivateKeyDer::from_pem_file(key_file).map_err(|e| match e {
        pem::Error::NoItemsFound => CertError::Key(format!(
            "{}: no private key (PKCS#8, PKCS#1 or SEC1 PEM) found",
            key_file.display()
        )),
        e => CertError::Key(format!("{}: {}", key_file.display(), pem_error(e))),
    })?;
    let provider = aws_lc_rs::default_provider();
    let key = provider
        .key_provider
        .load_private_key(key_der)
        .map_err(|e| {
            CertError::Key(format!(
                "{}: unsupported private key: {e}",
                key_file.display()
            ))
        })?;
    let certified = CertifiedKey::new(chain, key);
    // Both the key's public half and the certificate's are known for every key type we load,
    // so "unknown" is as much a failure as a mismatch here.
    if let Err(e) = certified.keys_match() {
        return Err(CertError::Key(format!(
            "{} does not match the certificate in {}: {e}",
            key_file.display(),
            cert_file.display()
        )));
    }
    Ok(certified)
}

/// Why a certificate or key could not be used; the variant says which file directive to blame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CertError {
    Certificate(String),
    Key(String),
}

impl std::fmt::Display for CertError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CertError::Certificate(m) | CertError::Key(m) => f.write_str(m),
        }
    }
}

/// The `notAfter` time of a DER certificate, or `None` if it cannot be read.
///
/// A minimal walk of the X.509 structure to `tbsCertificate.validity` rather than a full
/// parser dependency: rustls-webpki checks validity only while verifying a chain against a
/// trust anchor, which a server loading its own certificate does not have.
pub fn not_after(cert: &[u8]) -> Option<SystemTime> {
    validity(cert).map(|(_, not_after)| not_after)
}

/// The `notBefore` and `notAfter` times of a DER certificate (ACME renews at a share of the
/// lifetime between them), or `None` if they cannot be read.
pub fn validity(cert: &[u8]) -> Option<(SystemTime, SystemTime)> {
    let (tag, cert_body, _) = der_tlv(cert)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, tbs, _) = der_tlv(cert_body)?;
    if tag != 0x30 {
        return None;
    }
    let mut rest = tbs;
    // Optional [0] EXPLICIT version.
    let (tag, _, after) = der_tlv(rest)?;
    if tag == 0xa0 {
        rest = after;
    }
    // serialNumber, signature, issuer.
    for expected in [0x02, 0x30, 0x30] {
        let (tag, _, after) = der_tlv(rest)?;
        if tag != expected {
            return None;
        }
        rest = after;
    }
    let (tag, validity, _) = der_tlv(rest)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, time, after_not_before) = der_tlv(validity)?;
    let not_before = parse_time(tag, time)?;
    let (tag, time, _) = der_tlv(after_not_before)?;
    Some((not_before, parse_time(tag, time)?))
}

/// The parts of a DER certificate that name it to its CA's renewal information (ARI, RFC
/// 9773 §4.1): the `keyIdentifier` of its Authority Key Identifier extension and the content
/// octets of its serial number. `None` when it has no such extension or does not parse.
pub fn ari_parts(cert: &[u8]) -> Option<(&[u8], &[u8])> {
    let (_, cert_body, _) = der_tlv(cert)?;
    let (_, tbs, _) = der_tlv(cert_body)?;
    let mut rest = tbs;
    let (tag, _, after) = der_tlv(rest)?;
    if tag == 0xa0 {
        rest = after;
    }
    let (tag, serial, after) = der_tlv(rest)?;
    if tag != 0x02 {
        return None;
    }
    rest = after;
    // signature, issuer, validity, subject, subjectPublicKeyInfo.
    for _ in 0..5 {
        rest = der_tlv(rest)?.2;
    }
    while !rest.is_empty() {
        let (tag, body, after) = der_tlv(rest)?;
        rest = after;
        if tag != 0xa3 {
            continue;
        }
        let (_, mut extensions, _) = der_tlv(body)?;
        while !extensions.is_empty() {
            let (_, extension, after) = der_tlv(extensions)?;
            extensions = after;
            let (tag, oid, mut value) = der_tlv(extension)?;
            // id-ce-authorityKeyIdentifier, 2.5.29.35.
            if tag != 0x06 || oid != [0x55, 0x1d, 0x23] {
                continue;
            }
            let (mut tag, mut octets, after) = der_tlv(value)?;
            if tag == 0x01 {
                value = after;
                (tag, octets, _) = der_tlv(value)?;
            }
            if tag != 0x04 {
                return None;
            }
            let (_, aki, _) = der_tlv(octets)?;
            let (tag, key_id, _) = der_tlv(aki)?;
            return (tag == 0x80).then_some((key_id, serial));
        }
    }
    None
}

fn load_chain(cert_file: &Path) -> Result<Vec<CertificateDer<'static>>, CertError> {
    let bad = |m: String| CertError::Certificate(format!("{}: {m}", cert_file.display()));
    let iter = CertificateDer::pem_file_iter(cert_file).map_err(|e| bad(pem_error(e)))?;
    let chain = iter
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(pem_error(e)))?;
    let Some(leaf) = chain.first() else {
        return Err(bad("no certificate (PEM) found".into()));
    };
    match not_after(leaf) {
        Some(t) if t < SystemTime::now() => {
            return Err(bad(format!(
                "the certificate expired on {}",
                httpdate::fmt_http_date(t)
            )))
        }
        Some(_) => {}
        None => return Err(bad("the certificate is not valid X.509 DER".into())),
    }
    Ok(chain)
}

fn pem_error(e: pem::Error) -> String {
    match e {
        pem::Error::Io(e) => format!("cannot read: {e}"),
        e => format!("not valid PEM: {e}"),
    }
}

/// Splits one DER tag-length-value off the front: (tag, value, rest).
fn der_tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let mut len = 0usize;
        for &b in &rest[..n] {
            len = (len << 8) | usize::from(b);
        }
        rest = &rest[n..];
        len
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// UTCTime (`YYMMDDHHMMSSZ`, tag 0x17) or GeneralizedTime (`YYYYMMDDHHMMSSZ`, tag 0x18), UTC.
fn parse_time(tag: u8, text: &[u8]) -> Option<SystemTime> {
    let digits = text.strip_suffix(b"Z")?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let num = |s: &[u8]| s.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    let (year, rest) = match (tag, digits.len()) {
        (0x17, 12) => {
            // RFC 5280 4.1.2.5.1: YY >= 50 is 19YY.
            let yy = num(&digits[..2]);
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &digits[2..])
        }
        (0x18, 14) => (num(&digits[..4]), &digits[4..]),
        _ => return None,
    };
    let (month, day) = (num(&rest[0..2]), num(&rest[2..4]));
    let (h, m, s) = (num(&rest[4..6]), num(&rest[6..8]), num(&rest[8..10]));
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || h > 23 || m > 59 || s > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day)?;
    let secs = days.checked_mul(86_400)? + h * 3600 + m * 60 + s;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (years before 1970 are not needed).
fn days_from_civil(year: u64, month: u64, day: u64) -> Option<u64> {
    if year < 1970 {
        return None;
    }
    // Count from March so the leap day is the last day of the year.
    let (y, m) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era_days = y * 365 + y / 4 - y / 100 + y / 400;
    let day_of_year = (153 * m + 2) / 5 + day - 1;
    // 719468 = days from 0000-03-01 to 1970-01-01 in this count.
    (era_days + day_of_year).checked_sub(719_468)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(t: SystemTime) -> u64 {
        t.duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    }

    #[test]
    fn der_times() {
        assert_eq!(parse_time(0x17, b"700101000000Z").map(secs), Some(0));
        // 2000-02-29 12:00:00 (a leap day in a century leap year).
        assert_eq!(
            parse_time(0x17, b"000229120000Z").map(secs),
            Some(951_825_600)
        );
        assert_eq!(
            parse_time(0x18, b"20380119031408Z").map(secs),
            Some(2_147_483_648)
        );
        assert_eq!(
            parse_time(0x17, b"991231235959Z").map(secs),
            Some(946_684_799)
        );
        assert_eq!(parse_time(0x17, b"991231235959"), None);
        assert_eq!(parse_time(0x17, b"20380119031408Z"), None);
        assert_eq!(parse_time(0x18, b"20381319031408Z"), None);
    }

    #[test]
    fn der_lengths() {
        assert_eq!(
            der_tlv(&[0x02, 0x01, 0x05, 0xff]),
            Some((2, &[5u8][..], &[0xffu8][..]))
        );
        let long = [&[0x04, 0x81, 0x03][..], &[1, 2, 3]].concat();
        assert_eq!(der_tlv(&long), Some((4, &[1u8, 2, 3][..], &[][..])));
        assert_eq!(der_tlv(&[0x04, 0x05, 1]), None);
        assert_eq!(der_tlv(&[0x04, 0x80]), None);
        assert_eq!(der_tlv(&[0x04]), None);
    }

    #[test]
    fn ari_parts_of_an_issued_certificate() {
        let ca_key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let mut ca =
            rcgen::CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("{e}"));
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let key_id = ca.key_identifier(&ca_key);
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = rcgen::KeyPair::generate().unwrap_or_else(|e| panic!("{e}"));
        let mut leaf = rcgen::CertificateParams::new(vec!["a.test".to_owned()])
            .unwrap_or_else(|e| panic!("{e}"));
        leaf.serial_number = Some(rcgen::SerialNumber::from_slice(&[0x01, 0x02, 0x03]));
        leaf.use_authority_key_identifier_extension = true;
        let cert = leaf
            .signed_by(&key, &issuer)
            .unwrap_or_else(|e| panic!("{e}"));
        let (aki, serial) = ari_parts(cert.der()).unwrap_or_else(|| panic!("no AKI"));
        assert_eq!(aki, &key_id[..]);
        assert_eq!(serial, &[0x01, 0x02, 0x03]);
        // Self-signed, without the extension: no identifier.
        let own = rcgen::CertificateParams::new(vec!["a.test".to_owned()])
            .and_then(|p| p.self_signed(&key))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ari_parts(own.der()), None);
    }
}
