//! One home for the HMAC-SHA256 tags Mailroom signs. Each purpose names its key (a random
//! secret kept in the database, made once and shared by every replica) and its context,
//! written into every tag first, so a tag made for one purpose never verifies as another's.
//! The token formats built on these tags are their modules' (`verp`, `password_token`, …).

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// What a tag vouches for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// "This envelope sender is ours, for this delivery" (`verp`).
    Verp,
    /// "The server issued this forced-resend dialog to this admin" (`resend_key`).
    DigestResend,
    /// "This set-password link belongs to this invitation or reset" (`password_token`).
    PasswordToken,
    /// Sign-up confirm links and proof-of-work challenges (`signup`): each call names its own
    /// context after this one's.
    Signup,
    /// "This server reported this error to this browser" (`action_error`).
    ActionError,
    /// One-click unsubscribe links (`unsubscribe`): keys from the operator or the database.
    Unsubscribe,
    /// "This tracked link in this delivery leads there" (`click`).
    Click,
}

impl Purpose {
    /// The `secrets` row holding this purpose's key.
    pub const fn secret(self) -> &'static str {
        match self {
            Purpose::Verp => "verp_hmac",
            Purpose::DigestResend => "digest_resend_hmac",
            Purpose::PasswordToken => "password_token_hmac",
            Purpose::Signup => "signup_hmac",
            Purpose::ActionError => "action_error_hmac",
            Purpose::Unsubscribe => "unsubscribe_hmac",
            Purpose::Click => "click_hmac",
        }
    }

    /// Domain separation: written into every tag before what it vouches for.
    pub const fn context(self) -> &'static [u8] {
        match self {
            Purpose::Verp => b"mailroom-verp-v1:",
            Purpose::DigestResend => b"mailroom-digest-resend-v1:",
            Purpose::PasswordToken => b"mailroom-password-token-v1:",
            Purpose::Signup => b"",
            Purpose::ActionError => b"mailroom-action-error-v1\n",
            Purpose::Unsubscribe => b"mailroom-unsubscribe-v1:",
            Purpose::Click => b"mailroom-click-v1:",
        }
    }

    /// The key, read (or created) from the database.
    pub async fn key(self, pool: &sqlx::PgPool) -> sqlx::Result<Vec<u8>> {
        crate::db::secrets::signing_key(pool, self.secret()).await
    }

    /// A tag under `key` with this purpose's context already written: the caller adds what it
    /// vouches for.
    pub fn mac(self, key: &[u8]) -> Hmac<Sha256> {
        // HMAC takes keys of any length; `new_from_slice` cannot fail for it.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
            .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
        mac.update(self.context());
        mac
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_purpose_has_its_own_key_and_context() {
        let all = [
            Purpose::Verp,
            Purpose::DigestResend,
            Purpose::PasswordToken,
            Purpose::Signup,
            Purpose::ActionError,
            Purpose::Unsubscribe,
            Purpose::Click,
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a.secret(), b.secret());
                assert_ne!(a.context(), b.context());
            }
        }
    }
}
