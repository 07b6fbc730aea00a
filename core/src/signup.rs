//! Public sign-up's two signed artefacts, both under one secret shared by every replica:
//! - the confirm link of a sign-up (`<org>.<sign-up id>.<tag>`), derived from its job id, so
//!   the delivery worker rebuilds it when it renders the mail and nothing secret is stored;
//! - the proof-of-work challenge a sign-up form must solve (`<seconds>.<nonce>.<bits>.<tag>`):
//!   SHA-256 of `<challenge>:<answer>` must start with `bits` zero bits. Issued by the server
//!   for one list, valid for an hour, spent once (the caller records it). No third party.

use hmac::Mac;
use sha2::{Digest, Sha256};

/// Leading zero bits a proof of work must find: about 65,000 hashes, a second or two of a
/// browser's time, and a real cost per submission for a bot.
pub const POW_BITS: u32 = 16;

/// How long a challenge may be answered, in seconds.
pub const POW_TTL_SECONDS: i64 = 3600;

fn tag(key: &[u8], context: &str, message: &str) -> String {
    let mut mac = crate::signing::Purpose::Signup.mac(key);
    mac.update(context.as_bytes());
    mac.update(message.as_bytes());
    mac.finalize()
        .into_bytes()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Constant-time comparison of two tags.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// The confirm token of sign-up `signup_id` of `org_id`.
pub fn confirm_token(key: &[u8], org_id: i64, signup_id: i64) -> String {
    let m = format!("{org_id}.{signup_id}");
    format!("{m}.{}", tag(key, "mailroom-signup-confirm-v1:", &m))
}

/// The (org, sign-up) a genuine confirm token names.
pub fn verify_confirm(key: &[u8], token: &str) -> Option<(i64, i64)> {
    let (m, t) = token.rsplit_once('.')?;
    let (org, id) = m.split_once('.')?;
    let (org, id) = (org.parse().ok()?, id.parse().ok()?);
    same(
        t,
        &tag(key, "mailroom-signup-confirm-v1:", &format!("{org}.{id}")),
    )
    .then_some((org, id))
}

/// The page that confirms.
pub fn confirm_link(public_url: &str, token: &str) -> String {
    format!("{}/s/confirm/{token}", public_url.trim_end_matches('/'))
}

/// A new challenge for the sign-up form of the list with `list_key`, issued at `now` (Unix
/// seconds) with a random `nonce`.
pub fn challenge(key: &[u8], list_key: &str, now: i64, nonce: u64) -> String {
    let m = format!("{now}.{nonce:016x}.{POW_BITS}");
    format!(
        "{m}.{}",
        tag(key, &format!("mailroom-pow-v1:{list_key}:"), &m)
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PowError {
    /// Not one of ours for this list, or altered.
    Forged,
    /// Older than [`POW_TTL_SECONDS`] (or from the future).
    Expired,
    /// The answer does not give enough zero bits.
    Unsolved,
}

/// Checks an answer to a challenge (not whether it was spent: the caller records that).
pub fn verify_pow(
    key: &[u8],
    list_key: &str,
    challenge: &str,
    answer: &str,
    now: i64,
) -> Result<(), PowError> {
    let (m, t) = challenge.rsplit_once('.').ok_or(PowError::Forged)?;
    if !same(t, &tag(key, &format!("mailroom-pow-v1:{list_key}:"), m)) {
        return Err(PowError::Forged);
    }
    let mut parts = m.split('.');
    let issued: i64 = parts
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or(PowError::Forged)?;
    let bits: u32 = parts
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or(PowError::Forged)?;
    if now - issued > POW_TTL_SECONDS || issued - now > 60 {
        return Err(PowError::Expired);
    }
    if answer.is_empty() || answer.len() > 20 || !answer.bytes().all(|b| b.is_ascii_digit()) {
        return Err(PowError::Unsolved);
    }
    if zero_bits(&Sha256::digest(format!("{challenge}:{answer}").as_bytes())) < bits {
        return Err(PowError::Unsolved);
    }
    Ok(())
}

fn zero_bits(hash: &[u8]) -> u32 {
    let mut n = 0;
    for b in hash {
        if *b == 0 {
            n += 8;
        } else {
            return n + b.leading_zeros();
        }
    }
    n
}

/// Finds an answer to `challenge` (what the page's script does; for tests and tools).
pub fn solve(challenge: &str) -> String {
    let bits: u32 = challenge
        .split('.')
        .nth(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(POW_BITS);
    (0u64..)
        .map(|n| n.to_string())
        .find(|a| zero_bits(&Sha256::digest(format!("{challenge}:{a}").as_bytes())) >= bits)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn confirm_tokens_verify_only_as_issued() {
        let t = confirm_token(KEY, 3, 41);
        assert_eq!(verify_confirm(KEY, &t), Some((3, 41)));
        assert_eq!(verify_confirm(b"another key", &t), None);
        assert_eq!(verify_confirm(KEY, &t.replacen("3.41", "3.42", 1)), None);
        assert_eq!(verify_confirm(KEY, "3.41"), None);
    }

    #[test]
    fn a_challenge_is_solved_once_for_its_list_within_its_hour() {
        let c = challenge(KEY, "list-a", 1_000_000, 7);
        let a = solve(&c);
        assert_eq!(verify_pow(KEY, "list-a", &c, &a, 1_000_010), Ok(()));
        assert_eq!(
            verify_pow(KEY, "list-b", &c, &a, 1_000_010),
            Err(PowError::Forged)
        );
        assert_eq!(
            verify_pow(KEY, "list-a", &c, &a, 1_000_000 + POW_TTL_SECONDS + 1),
            Err(PowError::Expired)
        );
        let wrong = (0u64..)
            .map(|n| n.to_string())
            .find(|n| verify_pow(KEY, "list-a", &c, n, 1_000_010).is_err())
            .unwrap();
        assert_eq!(
            verify_pow(KEY, "list-a", &c, &wrong, 1_000_010),
            Err(PowError::Unsolved)
        );
        let easier = c.replacen(".16.", ".1.", 1);
        assert_eq!(
            verify_pow(KEY, "list-a", &easier, "0", 1_000_010),
            Err(PowError::Forged)
        );
    }
}
