//! DKIM private keys (server only): generated here or pasted by the owner, checked once when
//! saved, stored as PKCS#1 PEM (what the signer reads with OpenSSL), and shown to nobody: only the
//! public half leaves the server, as the DNS record to publish.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use rsa::pkcs1::{DecodeRsaPrivateKey, EncodeRsaPrivateKey, LineEnding};
use rsa::pkcs8::{DecodePrivateKey, EncodePublicKey};
use rsa::traits::PublicKeyParts;
use rsa::RsaPrivateKey;
use sha2::{Digest, Sha256};

/// An RSA key fit for DKIM signing.
pub struct DkimKey(RsaPrivateKey);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DkimKeyError {
    #[error("it is not an RSA private key in PEM form (“-----BEGIN RSA PRIVATE KEY-----” or “-----BEGIN PRIVATE KEY-----”)")]
    NotPem,
    #[error("it is a {0}-bit key; use one of {MIN_BITS} to {MAX_BITS} bits ({GENERATED_BITS} recommended)")]
    Size(usize),
    #[error("it cannot be written back as PEM")]
    Encode,
}

/// Generated keys: RSA 2048, what RFC 8301 recommends and every receiver accepts.
pub const GENERATED_BITS: usize = 2048;
/// RFC 8301: verifiers refuse keys under 1024 bits.
const MIN_BITS: usize = 1024;
/// Larger keys cost much more per signature and no longer fit a DNS TXT record comfortably.
const MAX_BITS: usize = 4096;

impl DkimKey {
    /// A fresh key. Takes a noticeable fraction of a second: call it off the async executor.
    pub fn generate() -> Result<Self, rsa::Error> {
        RsaPrivateKey::new(&mut rand::rngs::OsRng, GENERATED_BITS).map(Self)
    }

    /// A pasted key: PKCS#1 (`BEGIN RSA PRIVATE KEY`, as `openssl genrsa` wrote it) or PKCS#8
    /// (`BEGIN PRIVATE KEY`, as `openssl genpkey` writes it).
    pub fn parse_pem(pem: &str) -> Result<Self, DkimKeyError> {
        let pem = pem.trim();
        let key = RsaPrivateKey::from_pkcs1_pem(pem)
            .or_else(|_| RsaPrivateKey::from_pkcs8_pem(pem))
            .map_err(|_| DkimKeyError::NotPem)?;
        let bits = key.size() * 8;
        if !(MIN_BITS..=MAX_BITS).contains(&bits) {
            return Err(DkimKeyError::Size(bits));
        }
        Ok(Self(key))
    }

    /// The form stored and handed to the signer.
    pub fn to_pkcs1_pem(&self) -> Result<String, DkimKeyError> {
        self.0
            .to_pkcs1_pem(LineEnding::LF)
            .map(|pem| pem.to_string())
            .map_err(|_| DkimKeyError::Encode)
    }

    /// The public key as DKIM's `p=` wants it: base64 of the DER SubjectPublicKeyInfo.
    pub fn public_key_base64(&self) -> Result<String, DkimKeyError> {
        let der = self
            .0
            .to_public_key()
            .to_public_key_der()
            .map_err(|_| DkimKeyError::Encode)?;
        Ok(STANDARD.encode(der.as_bytes()))
    }

    /// The TXT record's value to publish at `<selector>._domainkey.<domain>`.
    pub fn dns_value(&self) -> Result<String, DkimKeyError> {
        Ok(dns_value(&self.public_key_base64()?))
    }

    /// See [`fingerprint`].
    pub fn fingerprint(&self) -> Result<String, DkimKeyError> {
        Ok(fingerprint(&self.public_key_base64()?))
    }
}

/// The TXT record's value for a public key (`p=`, base64 DER).
pub fn dns_value(public_key_base64: &str) -> String {
    format!("v=DKIM1; k=rsa; p={public_key_base64}")
}

/// A short fingerprint of a public key (`p=`; SHA-256, first 16 hex digits), for the audit
/// log: it tells keys apart without recording either half.
pub fn fingerprint(public_key_base64: &str) -> String {
    Sha256::digest(public_key_base64.as_bytes())[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsa::pkcs8::EncodePrivateKey;

    #[test]
    fn generated_keys_round_trip_through_both_pem_forms() {
        let key = DkimKey::generate().unwrap();
        let pkcs1 = key.to_pkcs1_pem().unwrap();
        assert!(pkcs1.starts_with("-----BEGIN RSA PRIVATE KEY-----"));
        let again = DkimKey::parse_pem(&pkcs1).unwrap();
        assert_eq!(again.dns_value().unwrap(), key.dns_value().unwrap());
        let pkcs8 = key.0.to_pkcs8_pem(LineEnding::CRLF).unwrap();
        let from8 = DkimKey::parse_pem(&format!("\n{}\n", pkcs8.as_str())).unwrap();
        assert_eq!(from8.fingerprint().unwrap(), key.fingerprint().unwrap());
        let value = key.dns_value().unwrap();
        assert!(value.starts_with("v=DKIM1; k=rsa; p=MIIBIjAN"), "{value}");
    }

    #[test]
    fn anything_else_is_refused_with_why() {
        assert_eq!(
            DkimKey::parse_pem("not a key").err(),
            Some(DkimKeyError::NotPem)
        );
        let truncated =
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----";
        assert_eq!(
            DkimKey::parse_pem(truncated).err(),
            Some(DkimKeyError::NotPem)
        );
        let small = RsaPrivateKey::new(&mut rand::rngs::OsRng, 512).unwrap();
        let pem = small.to_pkcs1_pem(LineEnding::LF).unwrap();
        assert_eq!(
            DkimKey::parse_pem(&pem).err(),
            Some(DkimKeyError::Size(512))
        );
    }
}
