//! The key of a "Resend now" dialog: `<unix seconds>-<nonce>.<signature>`. The server issues it
//! when it renders the dialog (the seconds by the database clock, a random nonce, so two dialogs
//! of the same second get two keys) and signs it for the org and the admin it was shown to, so a
//! key no dialog issued, or another admin's, is refused. It becomes the resend's week key
//! `manual-<unix seconds>-<nonce>`: submitting the same dialog twice sends once.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::domain::WeekKey;

/// The MAC over what a key vouches for: this org, this admin, this week key.
fn mac(key: &[u8], org_id: i64, user_id: i64, week_key: &WeekKey) -> Hmac<Sha256> {
    let mut mac = crate::signing::Purpose::DigestResend.mac(key);
    mac.update(format!("{org_id}:{user_id}:{week_key}").as_bytes());
    mac
}

/// A fresh key for a dialog shown to `user_id` of `org_id` at `unix_seconds`.
pub fn issue(key: &[u8], org_id: i64, user_id: i64, unix_seconds: i64) -> String {
    let week_key = WeekKey::manual(unix_seconds, rand::random());
    let sig = URL_SAFE_NO_PAD.encode(mac(key, org_id, user_id, &week_key).finalize().into_bytes());
    // "manual-<s>-<nonce>" → "<s>-<nonce>.<sig>" (the signature's alphabet has '-', not '.')
    let bare = week_key.to_string();
    format!("{}.{sig}", bare.trim_start_matches("manual-"))
}

/// The week key a dialog's key stands for, if this server issued it to this admin of this org.
pub fn verify(key: &[u8], org_id: i64, user_id: i64, dialog_key: &str) -> Option<WeekKey> {
    let (bare, sig) = dialog_key.split_once('.')?;
    let week_key: WeekKey = format!("manual-{bare}").parse().ok()?;
    if !matches!(week_key, WeekKey::Manual { nonce: Some(_), .. }) {
        return None;
    }
    let sig = URL_SAFE_NO_PAD.decode(sig).ok()?;
    // verify_slice compares in constant time.
    mac(key, org_id, user_id, &week_key)
        .verify_slice(&sig)
        .ok()?;
    Some(week_key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_issued_keys_verify_and_only_for_their_org_and_admin() {
        let k = b"0123456789abcdef0123456789abcdef";
        let a = issue(k, 1, 7, 1_800_000_000);
        let b = issue(k, 1, 7, 1_800_000_000);
        assert_ne!(a, b, "two dialogs of the same second get two keys");
        let wa = verify(k, 1, 7, &a).unwrap();
        assert!(wa.to_string().starts_with("manual-1800000000-"), "{wa}");
        assert_ne!(Some(wa), verify(k, 1, 7, &b));
        assert_eq!(verify(k, 2, 7, &a), None, "another org");
        assert_eq!(verify(k, 1, 8, &a), None, "another admin");
        assert_eq!(verify(b"another key", 1, 7, &a), None);
        let (bare, _) = a.split_once('.').unwrap();
        for forged in [
            "1800000000".to_string(),
            bare.to_string(),
            format!("{bare}."),
            format!("{bare}.AAAA"),
            a.replacen("1800000000", "1800000001", 1),
            String::new(),
        ] {
            assert_eq!(verify(k, 1, 7, &forged), None, "{forged}");
        }
    }
}
