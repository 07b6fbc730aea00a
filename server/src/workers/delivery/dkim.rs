//! DKIM signing per org. Each org's key is parsed once per batch (parsing checks the whole RSA
//! key, which costs far more than hashing one message); every message of the org is then
//! signed at render time, so captured `.eml` files carry the same signature SMTP would.
//!
//! mail-auth canonicalizes and builds the signature over the message exactly as it will be sent;
//! the RSA operation itself is OpenSSL's (constant-time, blinded, and several times faster than
//! the pure-Rust `rsa` crate, whose private-key operations leak timing: RUSTSEC-2023-0071).

use std::collections::HashMap;

use mail_auth::common::crypto::{Algorithm, CryptoError, Sha256, SigningKey};
use mail_auth::common::headers::{HeaderWriter, Writable};
use mail_auth::dkim::{Canonicalization, DkimSigner, Done};
use openssl::hash::MessageDigest;
use openssl::pkey::{Id, PKey, Private};

use app::db::delivery::Sender;

/// Headers the signature covers: what a reader sees and trusts (From, Subject, Date, To,
/// Reply-To), the message's identity, how its body is to be read (a relay that rewrote
/// Content-Type or Content-Transfer-Encoding could change what the body shows), and the
/// one-click unsubscribe pair, which receivers honour only when signed (RFC 8058 §4). A listed
/// header the message lacks is signed as absent, so nobody can add it later without breaking
/// the signature; From, To and Subject are listed twice for the same reason (RFC 6376 §8.15:
/// a second From put above the signed one would otherwise be what a reader sees).
const SIGNED_HEADERS: [&str; 14] = [
    "From",
    "From",
    "To",
    "To",
    "Subject",
    "Subject",
    "Date",
    "Message-ID",
    "Reply-To",
    "MIME-Version",
    "Content-Type",
    "Content-Transfer-Encoding",
    "List-Unsubscribe",
    "List-Unsubscribe-Post",
];

/// An org's signer: its domain, selector and RSA key, with the headers and canonicalization
/// above, and its Ed25519 key under a second selector when it has one (dual signing, RFC 8463).
pub struct Signer {
    rsa: DkimSigner<OpensslRsa, Done>,
    ed25519: Option<DkimSigner<OpensslEd25519, Done>>,
}

impl Signer {
    /// The `DKIM-Signature` header lines (each CRLF-terminated) for `message`, to be put in
    /// front of it: the RSA signature first, for verifiers that read only the first one.
    pub fn header_for(&self, message: &[u8]) -> Result<String, String> {
        let failed = |e: mail_auth::Error| format!("DKIM signing failed: {e}");
        let mut headers = self.rsa.sign(message).map_err(failed)?.to_header();
        if let Some(ed25519) = &self.ed25519 {
            headers.push_str(&ed25519.sign(message).map_err(failed)?.to_header());
        }
        Ok(headers)
    }
}

/// An RSA private key whose signatures OpenSSL computes; mail-auth hands it the canonicalized
/// headers.
pub struct OpensslRsa(PKey<Private>);

impl SigningKey for OpensslRsa {
    type Hasher = Sha256;

    fn sign(&self, input: impl Writable) -> mail_auth::Result<Vec<u8>> {
        let mut signer =
            openssl::sign::Signer::new(MessageDigest::sha256(), &self.0).map_err(library)?;
        signer.update(&canonical(input)).map_err(library)?;
        signer.sign_to_vec().map_err(library)
    }

    fn algorithm(&self) -> Algorithm {
        Algorithm::RsaSha256
    }
}

/// An Ed25519 private key whose signatures OpenSSL computes. RFC 8463 §3: ed25519-sha256 signs
/// the SHA-256 digest of the canonicalized headers with PureEdDSA.
pub struct OpensslEd25519(PKey<Private>);

impl SigningKey for OpensslEd25519 {
    type Hasher = Sha256;

    fn sign(&self, input: impl Writable) -> mail_auth::Result<Vec<u8>> {
        let digest = openssl::sha::sha256(&canonical(input));
        openssl::sign::Signer::new_without_digest(&self.0)
            .and_then(|mut signer| signer.sign_oneshot_to_vec(&digest))
            .map_err(library)
    }

    fn algorithm(&self) -> Algorithm {
        Algorithm::Ed25519Sha256
    }
}

/// The canonicalized headers mail-auth hands a key to sign.
fn canonical(input: impl Writable) -> Vec<u8> {
    let mut canonical = Vec::with_capacity(1024);
    input.write(&mut canonical);
    canonical
}

fn library(e: openssl::error::ErrorStack) -> mail_auth::Error {
    mail_auth::Error::Crypto(CryptoError::Library(e.to_string()))
}

/// The signer of each org of a batch that has signing enabled, or why its key cannot be used
/// (its messages then fail with that reason instead of going out unsigned).
pub struct Signers(HashMap<i64, Result<Signer, String>>);

impl Signers {
    pub fn load<'a>(senders: impl IntoIterator<Item = &'a Sender>) -> Self {
        let configs = senders
            .into_iter()
            .filter_map(|s| Some((s.org_id, signer(s)?)))
            .inspect(|(org_id, c)| {
                if let Err(e) = c {
                    tracing::warn!(org_id, error = %e, "the organisation's DKIM key cannot be used");
                }
            })
            .collect();
        Signers(configs)
    }

    /// The org's signer: `Ok(None)` when it does not sign.
    pub fn for_org(&self, org_id: i64) -> Result<Option<&Signer>, &str> {
        match self.0.get(&org_id) {
            None => Ok(None),
            Some(Ok(signer)) => Ok(Some(signer)),
            Some(Err(e)) => Err(e),
        }
    }
}

/// None: signing is off for the org.
fn signer(s: &Sender) -> Option<Result<Signer, String>> {
    let (domain, selector, pem) = (
        s.dkim_domain.as_ref()?,
        s.dkim_selector.as_ref()?,
        s.dkim_private_key_pem.as_ref()?,
    );
    // PKCS#1 or PKCS#8; the error names the parse failure, never the key's content.
    let key = match PKey::private_key_from_pem(pem.trim().as_bytes()) {
        Ok(key) if key.rsa().is_ok() => key,
        Ok(_) => return Some(Err("the DKIM private key is not an RSA key".into())),
        Err(_) => return Some(Err("the DKIM private key does not parse".into())),
    };
    let ed25519 = match (&s.dkim_ed25519_selector, &s.dkim_ed25519_private_key_pem) {
        (Some(selector), Some(pem)) => match PKey::private_key_from_pem(pem.trim().as_bytes()) {
            Ok(key) if key.id() == Id::ED25519 => Some(configure(
                DkimSigner::from_key(OpensslEd25519(key)),
                domain,
                selector,
            )),
            _ => return Some(Err("the Ed25519 DKIM private key does not parse".into())),
        },
        _ => None,
    };
    Some(Ok(Signer {
        rsa: configure(DkimSigner::from_key(OpensslRsa(key)), domain, selector),
        ed25519,
    }))
}

/// Both keys sign the same headers the same way. Relaxed canonicalization for both headers and
/// body: it survives the whitespace and header folding changes that relays make (simple header
/// canonicalization breaks on any refolding).
fn configure<K: SigningKey>(
    signer: DkimSigner<K, mail_auth::dkim::NeedDomain>,
    domain: &str,
    selector: &str,
) -> DkimSigner<K, Done> {
    signer
        .domain(domain)
        .selector(selector)
        .headers(SIGNED_HEADERS)
        .header_canonicalization(Canonicalization::Relaxed)
        .body_canonicalization(Canonicalization::Relaxed)
}
