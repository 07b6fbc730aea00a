//! The generic webhook, signed as Standard Webhooks sign (https://www.standardwebhooks.com/):
//! HMAC-SHA256 over `<webhook-id>.<webhook-timestamp>.<body>` with the endpoint's `whsec_` key,
//! any of the space-separated `v1,<base64>` signatures, a 5-minute window. The body:
//! `{"events": [{"id", "type", "recipient", "message_id"?, "status"?, "diagnostic"?,
//! "occurred_at"?}]}` with `type` one of `hard_bounce`, `soft_bounce`, `complaint`,
//! `unsubscribe`.

use base64::Engine;
use hmac::Mac;
use serde::Deserialize;

use super::{event, fresh, malformed, recipient, Refused, Verified};
use crate::domain::EventKind;

/// Seconds a signature stays good either side of the database's clock.
pub const WINDOW: i64 = 300;

/// The headers that carry the signature.
pub struct Signed<'a> {
    pub id: Option<&'a str>,
    pub timestamp: Option<&'a str>,
    pub signature: Option<&'a str>,
}

#[derive(Deserialize)]
struct Body {
    events: Vec<Event>,
}

#[derive(Deserialize)]
struct Event {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    recipient: Option<String>,
    message_id: Option<String>,
    status: Option<String>,
    diagnostic: Option<String>,
    occurred_at: Option<String>,
}

/// The key of a `whsec_<base64>` secret.
pub fn key(secret: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(secret.strip_prefix("whsec_")?)
        .ok()
}

/// The `v1,<base64>` signature of `body` under `secret` (what a sender puts in the header).
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
    let mut mac = super::hmac_sha256(&key(secret)?);
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    let sig = mac.finalize().into_bytes();
    Some(format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(sig)
    ))
}

/// Verifies and parses one request of `org_id`'s endpoint; `now` is the database's clock in
/// unix seconds. Event ids are the sender's, prefixed with the org (they are unique only to it).
pub fn verify(
    secret: &str,
    org_id: i64,
    headers: Signed<'_>,
    body: &[u8],
    now: i64,
) -> Result<Verified, Refused> {
    let unsigned = || {
        Refused::Unauthenticated(
            "The request is not signed: send webhook-id, webhook-timestamp and webhook-signature."
                .into(),
        )
    };
    let (id, ts, sigs) = match (headers.id, headers.timestamp, headers.signature) {
        (Some(i), Some(t), Some(s)) => (i, t, s),
        _ => return Err(unsigned()),
    };
    let ts: i64 = ts.trim().parse().map_err(|_| {
        Refused::Unauthenticated(format!("webhook-timestamp “{ts}” is not unix seconds."))
    })?;
    if !fresh(ts, now, WINDOW) {
        return Err(Refused::Unauthenticated(format!(
            "webhook-timestamp {ts} is more than {WINDOW} s away from the server's clock."
        )));
    }
    let key = key(secret).ok_or_else(|| {
        Refused::Unauthenticated("The endpoint's key is not a whsec_ key.".into())
    })?;
    let good = sigs.split_whitespace().any(|s| {
        let Some(b64) = s.strip_prefix("v1,") else {
            return false;
        };
        let Ok(given) = base64::engine::general_purpose::STANDARD.decode(b64) else {
            return false;
        };
        let mut mac = super::hmac_sha256(&key);
        mac.update(format!("{id}.{ts}.").as_bytes());
        mac.update(body);
        // verify_slice compares in constant time.
        mac.verify_slice(&given).is_ok()
    });
    if !good {
        return Err(Refused::Unauthenticated(
            "webhook-signature does not match the body and the endpoint's key.".into(),
        ));
    }
    let parsed: Body = serde_json::from_slice(body).map_err(malformed)?;
    let mut events = Vec::with_capacity(parsed.events.len());
    for e in parsed.events {
        let kind: EventKind = e.kind.parse().map_err(malformed)?;
        if e.id.is_empty() || e.id.len() > 200 {
            return Err(malformed("an event id must have 1 to 200 characters"));
        }
        events.push(event(
            format!("{org_id}:{}", e.id),
            kind,
            recipient(e.recipient.as_deref())?,
            e.message_id.as_deref(),
            e.status.as_deref(),
            e.diagnostic.as_deref(),
            e.occurred_at.as_deref(),
        ));
    }
    Ok(Verified {
        events,
        nonce: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const BODY: &[u8] = br#"{"events":[{"id":"e1","type":"hard_bounce","recipient":"Ann@Example.org","message_id":"<campaign.7.42@m.example>","status":"5.1.1","diagnostic":"550 5.1.1 no such user"}]}"#;

    fn headers<'a>(sig: &'a str, ts: &'a str) -> Signed<'a> {
        Signed {
            id: Some("msg_1"),
            timestamp: Some(ts),
            signature: Some(sig),
        }
    }

    #[test]
    fn a_signed_body_verifies_and_every_change_is_refused() {
        let sig = sign(SECRET, "msg_1", 1_700_000_000, BODY).unwrap();
        let v = verify(SECRET, 7, headers(&sig, "1700000000"), BODY, 1_700_000_100).unwrap();
        assert_eq!(v.events.len(), 1);
        let e = &v.events[0];
        assert_eq!((e.id.as_str(), e.kind), ("7:e1", EventKind::HardBounce));
        assert_eq!(
            e.recipient.as_ref().map(|r| r.lower()),
            Some("ann@example.org")
        );
        assert_eq!(e.job_id().unwrap().to_string(), "campaign:7:42");
        // Another key among several signatures is fine; a tampered body, a stale or future
        // timestamp, another key alone, or no signature is not.
        let other = sign(
            "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAA",
            "msg_1",
            1_700_000_000,
            BODY,
        )
        .unwrap();
        let both = format!("{other} {sig}");
        assert!(verify(SECRET, 7, headers(&both, "1700000000"), BODY, 1_700_000_000).is_ok());
        let mut tampered = BODY.to_vec();
        tampered[40] ^= 1;
        for (h, body, now) in [
            (headers(&sig, "1700000000"), &tampered[..], 1_700_000_000),
            (headers(&sig, "1700000000"), BODY, 1_700_000_301),
            (headers(&sig, "1700000000"), BODY, 1_699_999_699),
            (headers(&other, "1700000000"), BODY, 1_700_000_000),
            (headers(&sig, "1700000001"), BODY, 1_700_000_000),
            (
                Signed {
                    id: None,
                    timestamp: None,
                    signature: None,
                },
                BODY,
                1_700_000_000,
            ),
        ] {
            let r = verify(SECRET, 7, h, body, now).unwrap_err();
            assert_eq!(r.status(), 401, "{r}");
        }
    }

    #[test]
    fn a_signed_but_wrong_body_is_a_400_naming_it() {
        for (body, says) in [
            (&b"[]"[..], "not understood"),
            (
                br#"{"events":[{"id":"x","type":"opened","recipient":"a@b.org"}]}"#,
                "opened",
            ),
            (
                br#"{"events":[{"id":"x","type":"complaint","recipient":"nope"}]}"#,
                "nope",
            ),
            (
                br#"{"events":[{"id":"","type":"complaint","recipient":"a@b.org"}]}"#,
                "event id",
            ),
        ] {
            let sig = sign(SECRET, "msg_1", 5, body).unwrap();
            let r = verify(SECRET, 1, headers(&sig, "5"), body, 5).unwrap_err();
            assert_eq!(r.status(), 400);
            assert!(r.to_string().contains(says), "{r}");
        }
    }
}
