//! Relay webhooks, verified and parsed (pure: no database, no clock but the one passed in).
//! Each provider's check runs over the exact bytes received, before anything is parsed; a
//! refusal names what was wrong and writes nothing.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::domain::{EmailAddress, EventKind, FeedbackReport, MAX_DIAGNOSTIC};

/// Standard Webhooks (`webhook-id`, `webhook-timestamp`, `webhook-signature`).
pub mod generic;
/// Reports mailed to the bounce domain: DSNs, ARF complaints, common non-standard bounces.
pub mod mailed;
/// Mailgun: HMAC of timestamp and token, each token taken once.
pub mod mailgun;
/// Postmark: a shared secret in the URL or as basic auth.
pub mod postmark;
/// SendGrid's signed Event Webhook: ECDSA over timestamp and body.
pub mod sendgrid;
/// Amazon SES through SNS: the signing certificate and topic pinned by the owner.
pub mod ses;

/// Why a webhook request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// No signature or credentials, a wrong one, or one outside the time window (401).
    #[error("{0}")]
    Unauthenticated(String),
    /// Signed, but not a body this endpoint can take (400).
    #[error("{0}")]
    Malformed(String),
}

impl Refused {
    pub fn status(&self) -> u16 {
        match self {
            Refused::Unauthenticated(_) => 401,
            Refused::Malformed(_) => 400,
        }
    }
}

/// What a verified request carries: its events, and (Mailgun) the nonce to take once.
#[derive(Debug, Default)]
pub struct Verified {
    pub events: Vec<FeedbackReport>,
    pub nonce: Option<Nonce>,
}

/// A one-time value of the request and the hash of the body it came with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nonce {
    pub value: String,
    pub body_sha256: Vec<u8>,
}

pub(crate) fn hmac_sha256(key: &[u8]) -> Hmac<Sha256> {
    <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes a key of any length")
}

/// Is `at` (unix seconds) within `window` seconds of `now`, either way?
pub(crate) fn fresh(at: i64, now: i64, window: i64) -> bool {
    (now - at).abs() <= window
}

pub(crate) fn malformed(what: impl std::fmt::Display) -> Refused {
    Refused::Malformed(format!("The webhook body is not understood: {what}."))
}

/// A recipient address as a relay reported it.
pub(crate) fn recipient(raw: Option<&str>) -> Result<EmailAddress, Refused> {
    let raw = raw.ok_or_else(|| malformed("an event has no recipient"))?;
    EmailAddress::parse(raw).map_err(malformed)
}

/// An event, its text fields cut to what is kept.
pub(crate) fn event(
    id: String,
    kind: EventKind,
    recipient: EmailAddress,
    message_id: Option<&str>,
    status: Option<&str>,
    diagnostic: Option<&str>,
    occurred_at: Option<&str>,
) -> FeedbackReport {
    FeedbackReport {
        id,
        kind,
        recipient: Some(recipient),
        message_id: FeedbackReport::field(message_id, 998),
        relay_id: None,
        envelope_from: None,
        status: FeedbackReport::field(status, 32),
        diagnostic: FeedbackReport::field(diagnostic, MAX_DIAGNOSTIC),
        occurred_at: FeedbackReport::field(occurred_at, 64),
    }
}

#[cfg(test)]
mod never_panics {
    use rand::{Rng, SeedableRng};

    use super::{generic, mailgun, postmark};

    const SEEDS: [&[u8]; 3] = [
        br#"{"events":[{"id":"e1","type":"hard_bounce","recipient":"a@b.org","message_id":"<campaign.1.2@x.org>","status":"5.1.1"}]}"#,
        br#"{"signature":{"timestamp":"100","token":"tttt","signature":"00"},"event-data":{"id":"x","event":"failed","severity":"permanent","recipient":"a@b.org","timestamp":100.0,"delivery-status":{"code":550,"message":"5.1.1 gone"},"message":{"headers":{"message-id":"campaign.1.2@x.org"}}}}"#,
        br#"{"RecordType":"Bounce","ID":1,"TypeCode":1,"Email":"a@b.org","Details":"x"}"#,
    ];

    /// A seed cut, with bytes flipped, duplicated or replaced by random ones.
    fn mutate(rng: &mut rand::rngs::StdRng, seed: &[u8]) -> Vec<u8> {
        let mut b = seed.to_vec();
        match rng.gen_range(0..4) {
            0 => b.truncate(rng.gen_range(0..=b.len())),
            1 => {
                for _ in 0..rng.gen_range(1..8) {
                    let i = rng.gen_range(0..b.len());
                    b[i] = rng.gen();
                }
            }
            2 => {
                let i = rng.gen_range(0..b.len());
                let tail = b[i..].to_vec();
                b.extend_from_slice(&tail);
            }
            _ => b = (0..rng.gen_range(0..200)).map(|_| rng.gen()).collect(),
        }
        b
    }

    /// Every verifier answers (events or a refusal) for any input, signed or not: the
    /// signature is checked first, so the signed cases reach the parsers with garbage.
    #[test]
    fn no_input_makes_a_verifier_panic() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x6d61_696c);
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        for _ in 0..20_000 {
            let seed = SEEDS[rng.gen_range(0..SEEDS.len())];
            let body = mutate(&mut rng, seed);
            let sig = generic::sign(secret, "m", 100, &body).unwrap();
            let signed = generic::Signed {
                id: Some("m"),
                timestamp: Some("100"),
                signature: Some(&sig),
            };
            let _ = generic::verify(secret, 1, signed, &body, 100);
            let _ = mailgun::verify("k", &body, 100);
            let _ = postmark::verify("s", Some("s"), &body);
            let text = String::from_utf8_lossy(&body);
            let _ = crate::domain::JobId::from_message_id(&text);
        }
    }
}
