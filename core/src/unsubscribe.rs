//! Unsubscribe tokens for campaign and automation mail (RFC 8058 one-click). A token names the
//! org, the subscriber and the campaign or automation that sent it, signed with HMAC-SHA256; it never expires (a link in an old
//! message must keep working). Verification accepts any key of a list, so keys can be rotated:
//! sign with the newest, keep the old ones until their mail is forgotten.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// What a token vouches for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    pub org_id: i64,
    pub subscriber_id: i64,
    pub from: Origin,
}

/// The mail an unsubscribe link was in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Written as its bare id (as every token made before automations existed).
    Campaign(i64),
    /// Written as `a<id>`.
    Automation(i64),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::Campaign(id) => write!(f, "campaign {id}"),
            Origin::Automation(id) => write!(f, "automation {id}"),
        }
    }
}

impl Origin {
    fn token_part(self) -> String {
        match self {
            Origin::Campaign(id) => id.to_string(),
            Origin::Automation(id) => format!("a{id}"),
        }
    }

    fn from_token_part(s: &str) -> Option<Self> {
        match s.strip_prefix('a') {
            Some(id) => id.parse().ok().map(Origin::Automation),
            None => s.parse().ok().map(Origin::Campaign),
        }
    }
}

/// The signing keys, newest first. Never printed.
#[derive(Clone)]
pub struct Keys(std::sync::Arc<Vec<Vec<u8>>>);

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Keys({} keys, redacted)", self.0.len())
    }
}

/// The shortest key accepted (bytes).
pub const MIN_KEY_LEN: usize = 16;

impl Keys {
    /// `None` when there is no key or one is shorter than [`MIN_KEY_LEN`].
    pub fn new(newest_first: Vec<Vec<u8>>) -> Option<Self> {
        let ok = !newest_first.is_empty() && newest_first.iter().all(|k| k.len() >= MIN_KEY_LEN);
        ok.then(|| Keys(std::sync::Arc::new(newest_first)))
    }

    fn mac(key: &[u8], payload: &str) -> Hmac<Sha256> {
        let mut mac = crate::signing::Purpose::Unsubscribe.mac(key);
        mac.update(payload.as_bytes());
        mac
    }

    /// `<org>.<subscriber>.<campaign or a<automation>>.<signature>`: URL-safe, no padding.
    pub fn sign(&self, c: Claim) -> String {
        let payload = format!("{}.{}.{}", c.org_id, c.subscriber_id, c.from.token_part());
        let tag = Self::mac(&self.0[0], &payload).finalize().into_bytes();
        format!("{payload}.{}", URL_SAFE_NO_PAD.encode(tag))
    }

    /// The claim of a genuine token (signed by any of the keys), compared in constant time.
    pub fn verify(&self, token: &str) -> Option<Claim> {
        let (payload, tag) = token.rsplit_once('.')?;
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        let mut parts = payload.split('.');
        let claim = Claim {
            org_id: parts.next()?.parse().ok()?,
            subscriber_id: parts.next()?.parse().ok()?,
            from: Origin::from_token_part(parts.next()?)?,
        };
        if parts.next().is_some() {
            return None;
        }
        self.0
            .iter()
            .any(|key| Self::mac(key, payload).verify_slice(&tag).is_ok())
            .then_some(claim)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLAIM: Claim = Claim {
        org_id: 3,
        subscriber_id: 42,
        from: Origin::Campaign(7),
    };

    fn keys(ks: &[&[u8]]) -> Keys {
        Keys::new(ks.iter().map(|k| k.to_vec()).collect()).unwrap()
    }

    #[test]
    fn a_signed_token_verifies_and_a_tampered_one_does_not() {
        let k = keys(&[b"0123456789abcdef-new"]);
        let token = k.sign(CLAIM);
        assert!(token.starts_with("3.42.7."));
        assert_eq!(k.verify(&token), Some(CLAIM));
        let other_sub = token.replacen("3.42.", "3.43.", 1);
        assert_eq!(k.verify(&other_sub), None, "the ids are signed");
        assert_eq!(k.verify(&format!("{token}A")), None);
        assert_eq!(k.verify("3.42.7"), None);
        assert_eq!(k.verify("3.42.7.8.xyz"), None);
        assert_eq!(k.verify(""), None);
        // An automation's token says so, and cannot be read as a campaign's.
        let a = Claim {
            from: Origin::Automation(7),
            ..CLAIM
        };
        let token = k.sign(a);
        assert!(token.starts_with("3.42.a7."));
        assert_eq!(k.verify(&token), Some(a));
        assert_eq!(k.verify(&token.replacen(".a7.", ".7.", 1)), None);
    }

    #[test]
    fn old_keys_still_verify_after_rotation_and_new_tokens_use_the_newest() {
        let old = keys(&[b"0123456789abcdef-old"]);
        let rotated = keys(&[b"0123456789abcdef-new", b"0123456789abcdef-old"]);
        let old_token = old.sign(CLAIM);
        assert_eq!(rotated.verify(&old_token), Some(CLAIM));
        let new_token = rotated.sign(CLAIM);
        assert_ne!(new_token, old_token);
        assert_eq!(old.verify(&new_token), None, "signed with the newest key");
        assert_eq!(keys(&[b"0123456789abcdef-xxx"]).verify(&old_token), None);
    }

    #[test]
    fn short_or_missing_keys_are_refused_and_never_printed() {
        assert!(Keys::new(vec![]).is_none());
        assert!(Keys::new(vec![b"short".to_vec()]).is_none());
        let k = keys(&[b"0123456789abcdef-secret"]);
        assert!(!format!("{k:?}").contains("secret"));
    }
}
