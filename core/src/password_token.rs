//! Set-password links (invitations and resets). The link's token is derived, not stored:
//! HMAC-SHA256 of the delivery's job id (`invite:<org>:<user>:<token id>`) under a secret shared
//! by every replica. So the delivery worker can rebuild the link when it renders the message
//! (deliveries carry references, never bodies or credentials), while the database keeps only
//! the token's SHA-256 (looked up like a session) and the job id shown on the Deliveries page
//! grants nothing.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::Mac;

use crate::domain::JobId;

/// How long a link stays valid.
pub const TTL_DAYS: i64 = 7;

/// The token of the link sent by `job` (URL-safe, 43 characters).
pub fn token(key: &[u8], job: &JobId) -> String {
    let mut mac = crate::signing::Purpose::PasswordToken.mac(key);
    mac.update(job.to_string().as_bytes());
    URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
}

/// The page that sets the password.
pub fn link(public_url: &str, token: &str) -> String {
    format!("{}/invite/{token}", public_url.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_differ_per_job_and_key_and_are_url_safe() {
        let job = |t| JobId::Invite {
            org_id: 1,
            user_id: 2,
            token_id: t,
        };
        let a = token(b"0123456789abcdef", &job(1));
        assert_eq!(a, token(b"0123456789abcdef", &job(1)));
        assert_ne!(a, token(b"0123456789abcdef", &job(2)));
        assert_ne!(a, token(b"0123456789abcdeX", &job(1)));
        assert_eq!(a.len(), 43);
        assert!(a
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(
            link("https://m.example/", &a),
            format!("https://m.example/invite/{a}")
        );
    }
}
