//! Passwords and session tokens (server only).

use argon2::password_hash::{
    rand_core::OsRng, PasswordHash, PasswordHasher, PasswordVerifier, SaltString,
};
use argon2::Argon2;
use base64::Engine;
use sha2::{Digest, Sha256};

pub const SESSION_COOKIE: &str = "mailroom_session";
/// Sessions last a working week; signing in again makes a new one.
pub const SESSION_TTL_SECONDS: i64 = 7 * 24 * 3600;

pub fn hash_password(password: &str) -> Result<String, argon2::password_hash::Error> {
    let salt = SaltString::generate(&mut OsRng);
    Ok(Argon2::default()
        .hash_password(password.as_bytes(), &salt)?
        .to_string())
}

/// Stored instead of a hash while a user has no password: invited and not yet accepted, or
/// reset by an owner and not yet set again. Never a valid hash, so nothing verifies against it.
pub const NO_PASSWORD_INVITED: &str = "!invited";
pub const NO_PASSWORD_RESET: &str = "!reset";

/// Verifies a password against a stored hash. With no usable stored hash (unknown address, or
/// a user without a password yet) it still verifies against a fixed hash, so a wrong address
/// costs the same time as a wrong password.
pub fn verify_password(stored: Option<&str>, password: &str) -> bool {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let dummy = DUMMY.get_or_init(|| hash_password("not-a-password").unwrap_or_default());
    let (hash, real) = match stored {
        Some(h) if !h.starts_with('!') => (h, true),
        _ => (dummy.as_str(), false),
    };
    let ok = PasswordHash::new(hash)
        .map(|parsed| {
            Argon2::default()
                .verify_password(password.as_bytes(), &parsed)
                .is_ok()
        })
        .unwrap_or(false);
    ok && real
}

/// A fresh session token (256 random bits, URL-safe) for the cookie.
pub fn new_session_token() -> String {
    let bytes: [u8; 32] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A token naming one opening of a dialog (96 random bits, URL-safe): a job keyed by it is
/// queued once however often that dialog is submitted.
pub fn dialog_token() -> String {
    let bytes: [u8; 12] = rand::random();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// What the database stores instead of the token: a leaked table grants no session.
pub fn hash_token(token: &str) -> Vec<u8> {
    Sha256::digest(token.as_bytes()).to_vec()
}

/// The session token from a request's `Cookie` headers, if any.
pub fn token_from_headers(headers: &http::HeaderMap) -> Option<String> {
    cookie(headers, SESSION_COOKIE)
}

/// The signed-in user of a request, by its session cookie: the one lookup behind server
/// functions (`api::signed_in`) and plain routes (`SignedIn` in the server) alike. `None`
/// without a cookie, or for an expired or unknown session.
pub async fn session_user(
    pool: &sqlx::PgPool,
    headers: &http::HeaderMap,
) -> sqlx::Result<Option<crate::model::CurrentUser>> {
    match token_from_headers(headers) {
        Some(token) => crate::db::sessions::lookup(pool, &hash_token(&token)).await,
        None => Ok(None),
    }
}

/// The value of cookie `name` in a request's `Cookie` headers, if any.
pub fn cookie(headers: &http::HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, value)| value.to_owned())
}

/// `Set-Cookie` value for a session (`None` clears it). `secure` when served over HTTPS.
pub fn session_cookie(token: Option<&str>, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    match token {
        Some(t) => format!("{SESSION_COOKIE}={t}; Path=/; HttpOnly; SameSite=Lax; Max-Age={SESSION_TTL_SECONDS}{secure}"),
        None => format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0{secure}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_round_trip_and_unknown_user_never_verifies() {
        let h = hash_password("correct horse").unwrap();
        assert!(verify_password(Some(&h), "correct horse"));
        assert!(!verify_password(Some(&h), "wrong"));
        assert!(!verify_password(None, "not-a-password"));
        assert!(!verify_password(Some("garbage"), "x"));
        assert!(!verify_password(
            Some(NO_PASSWORD_INVITED),
            "not-a-password"
        ));
    }

    #[test]
    fn tokens_are_unique_and_found_among_other_cookies() {
        let a = new_session_token();
        assert_ne!(a, new_session_token());
        assert_eq!(hash_token(&a).len(), 32);
        let mut h = http::HeaderMap::new();
        h.append(
            http::header::COOKIE,
            format!("x=1; {SESSION_COOKIE}={a}; y=2").parse().unwrap(),
        );
        assert_eq!(token_from_headers(&h).as_deref(), Some(a.as_str()));
        assert!(session_cookie(Some(&a), true).contains("HttpOnly; SameSite=Lax"));
        assert!(session_cookie(None, false).contains("Max-Age=0"));
    }
}
