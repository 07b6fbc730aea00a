//! DKIM signing per org. Each org's key is parsed once per batch (parsing checks the whole RSA
//! key, which costs far more than hashing one message); every message of the org is then
//! signed at render time, so captured `.eml` files carry the same signature SMTP would.

use std::collections::HashMap;

use lettre::message::dkim::{
    DkimCanonicalization, DkimCanonicalizationType, DkimConfig, DkimSigningAlgorithm,
    DkimSigningKey,
};
use lettre::message::header::HeaderName;

use app::db::delivery::Sender;

/// Headers the signature covers: what a reader sees and trusts (From, Subject, Date, To,
/// Reply-To), the message's identity, and the one-click unsubscribe pair, which receivers
/// honour only when signed (RFC 8058 §4). A listed header the message lacks is signed as
/// absent, so nobody can add it later without breaking the signature. Not Content-Type nor
/// Content-Transfer-Encoding: lettre writes a MIME body's own headers with the body, where its
/// signer does not see them, so it would sign them as absent and every multipart message would
/// fail verification (the sender_auth integration test checks this).
const SIGNED_HEADERS: [&str; 9] = [
    "From",
    "To",
    "Subject",
    "Date",
    "Message-ID",
    "Reply-To",
    "MIME-Version",
    "List-Unsubscribe",
    "List-Unsubscribe-Post",
];

/// The signing configuration of each org of a batch that has signing enabled, or why its key
/// cannot be used (its messages then fail with that reason instead of going out unsigned).
pub struct Signers(HashMap<i64, Result<DkimConfig, String>>);

impl Signers {
    pub fn load<'a>(senders: impl IntoIterator<Item = &'a Sender>) -> Self {
        let configs = senders
            .into_iter()
            .filter_map(|s| Some((s.org_id, config(s)?)))
            .inspect(|(org_id, c)| {
                if let Err(e) = c {
                    tracing::warn!(org_id, error = %e, "the organisation's DKIM key cannot be used");
                }
            })
            .collect();
        Signers(configs)
    }

    /// The org's signer: `Ok(None)` when it does not sign.
    pub fn for_org(&self, org_id: i64) -> Result<Option<&DkimConfig>, &str> {
        match self.0.get(&org_id) {
            None => Ok(None),
            Some(Ok(config)) => Ok(Some(config)),
            Some(Err(e)) => Err(e),
        }
    }
}

/// None: signing is off for the org.
fn config(s: &Sender) -> Option<Result<DkimConfig, String>> {
    let (domain, selector, pem) = (
        s.dkim_domain.as_ref()?,
        s.dkim_selector.as_ref()?,
        s.dkim_private_key_pem.as_ref()?,
    );
    let key = match DkimSigningKey::new(pem, DkimSigningAlgorithm::Rsa) {
        Ok(key) => key,
        // The error names the parse failure, never the key's content.
        Err(e) => return Some(Err(format!("the DKIM private key does not parse: {e}"))),
    };
    // Relaxed for both: it survives the whitespace and header folding changes that relays make
    // (simple header canonicalization breaks on any refolding).
    let relaxed = DkimCanonicalization {
        header: DkimCanonicalizationType::Relaxed,
        body: DkimCanonicalizationType::Relaxed,
    };
    let headers = SIGNED_HEADERS
        .iter()
        .map(|h| HeaderName::new_from_ascii_str(h))
        .collect();
    Some(Ok(DkimConfig::new(
        selector.clone(),
        domain.clone(),
        key,
        headers,
        relaxed,
    )))
}
