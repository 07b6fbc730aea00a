//! After a plain form post fails, leptos redirects back with the error in the URL
//! (`?__path=<function>&__err=<error>`) and the page shows it; left alone, anyone could send a
//! link that makes the dashboard (or its sign-in page) show their words as its own. The server
//! signs the redirects it issues (`__sig`, over the error and a random value it gives that
//! browser in a short-lived cookie) and a page shows only an error it signed for the browser
//! asking, so even a genuine error link (which may quote what its sender typed) shows nothing
//! when sent to someone else.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The query parameters leptos uses for the error, and ours for its signature.
pub const PATH_PARAM: &str = "__path";
pub const ERROR_PARAM: &str = "__err";
pub const SIGNATURE_PARAM: &str = "__sig";

/// The cookie holding the browser's random value (not a credential: it only ties an error to
/// the browser it was reported to).
pub const COOKIE: &str = "mailroom_form_error";
/// How long an error link stays showable, in seconds.
pub const COOKIE_SECONDS: u32 = 600;

fn mac(key: &[u8], browser: &str, path: &str, error: &str) -> Hmac<Sha256> {
    // The context before each part; none of the three can hold a newline (a cookie value, a
    // URL path, base64).
    let purpose = crate::signing::Purpose::ActionError;
    let mut mac = purpose.mac(key);
    mac.update(browser.as_bytes());
    for part in [path, error] {
        mac.update(purpose.context());
        mac.update(part.as_bytes());
    }
    mac
}

/// A fresh random value for a browser's cookie.
pub fn browser_value() -> String {
    URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>())
}

/// The signature of `error` from function `path`, for the browser whose cookie holds `browser`.
pub fn sign(key: &[u8], browser: &str, path: &str, error: &str) -> String {
    URL_SAFE_NO_PAD.encode(mac(key, browser, path, error).finalize().into_bytes())
}

/// Whether `signature` is ours for this error and this browser.
pub fn verify(key: &[u8], browser: &str, path: &str, error: &str, signature: &str) -> bool {
    let Ok(sig) = URL_SAFE_NO_PAD.decode(signature) else {
        return false;
    };
    // An empty value is no browser's: it would let a link work in every browser without one.
    // verify_slice compares in constant time.
    !browser.is_empty() && mac(key, browser, path, error).verify_slice(&sig).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_holds_only_for_its_error_function_and_browser() {
        let key = [7u8; 32];
        let sig = sign(&key, "s1", "/api/login", "ZXJy");
        assert!(verify(&key, "s1", "/api/login", "ZXJy", &sig));
        assert!(!verify(&key, "s2", "/api/login", "ZXJy", &sig));
        assert!(!verify(&key, "", "/api/login", "ZXJy", &sig));
        assert!(!verify(&key, "s1", "/api/logout", "ZXJy", &sig));
        assert!(!verify(&key, "s1", "/api/login", "ZXJz", &sig));
        assert!(!verify(&[8u8; 32], "s1", "/api/login", "ZXJy", &sig));
        assert!(!verify(&key, "s1", "/api/login", "ZXJy", "not base64!"));
        let unbound = sign(&key, "", "/api/login", "ZXJy");
        assert!(!verify(&key, "", "/api/login", "ZXJy", &unbound));
        assert_ne!(browser_value(), browser_value());
    }
}
