//! Mailgun's webhooks (https://documentation.mailgun.com/docs/mailgun/user-manual/webhooks/securing-webhooks):
//! `signature.signature` is the hex HMAC-SHA256 of `timestamp || token` under the webhook
//! signing key. It does not cover `event-data`, so each token is taken once (the caller stores
//! the [`Nonce`]) and the timestamp must be within an hour. Event ids are unique to Mailgun for
//! a day only, so the id kept is `<id>:<UTC date>`.

use hmac::Mac;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{event, fresh, malformed, recipient, Nonce, Refused, Verified};
use crate::domain::EventKind;

/// Seconds a signature stays good either side of the database's clock.
pub const WINDOW: i64 = 3600;

#[derive(Deserialize)]
struct Body {
    signature: Option<Signature>,
    #[serde(rename = "event-data")]
    event_data: Option<EventData>,
}

#[derive(Deserialize)]
struct Signature {
    timestamp: String,
    token: String,
    signature: String,
}

#[derive(Deserialize)]
struct EventData {
    id: String,
    event: String,
    severity: Option<String>,
    recipient: Option<String>,
    timestamp: Option<f64>,
    #[serde(rename = "delivery-status")]
    delivery_status: Option<DeliveryStatus>,
    message: Option<Message>,
}

#[derive(Deserialize)]
struct DeliveryStatus {
    code: Option<serde_json::Value>,
    message: Option<String>,
    description: Option<String>,
    #[serde(rename = "enhanced-code")]
    enhanced_code: Option<String>,
}

#[derive(Deserialize)]
struct Message {
    headers: Option<Headers>,
}

#[derive(Deserialize)]
struct Headers {
    #[serde(rename = "message-id")]
    message_id: Option<String>,
}

/// The hex signature of `timestamp || token` under `key` (what Mailgun sends).
pub fn sign(key: &str, timestamp: &str, token: &str) -> String {
    let mut mac = super::hmac_sha256(key.as_bytes());
    mac.update(timestamp.as_bytes());
    mac.update(token.as_bytes());
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Verifies and parses one request; `now` is the database's clock in unix seconds. Events
/// Mailgun sends that are not bounces, complaints or unsubscribes carry nothing to keep.
pub fn verify(key: &str, body: &[u8], now: i64) -> Result<Verified, Refused> {
    let parsed: Body = serde_json::from_slice(body).map_err(|_| {
        Refused::Unauthenticated("The request carries no Mailgun signature.".into())
    })?;
    let sig = parsed.signature.ok_or_else(|| {
        Refused::Unauthenticated("The request carries no Mailgun signature.".into())
    })?;
    let ts: i64 = sig.timestamp.trim().parse().map_err(|_| {
        Refused::Unauthenticated(format!(
            "signature.timestamp “{}” is not unix seconds.",
            sig.timestamp
        ))
    })?;
    if !fresh(ts, now, WINDOW) {
        return Err(Refused::Unauthenticated(format!(
            "signature.timestamp {ts} is more than an hour away from the server's clock."
        )));
    }
    let given = unhex(&sig.signature).unwrap_or_default();
    let mut mac = super::hmac_sha256(key.as_bytes());
    mac.update(sig.timestamp.as_bytes());
    mac.update(sig.token.as_bytes());
    // verify_slice compares in constant time.
    if mac.verify_slice(&given).is_err() {
        return Err(Refused::Unauthenticated(
            "signature.signature does not match the endpoint's signing key.".into(),
        ));
    }
    let nonce = Some(Nonce {
        value: sig.token,
        body_sha256: Sha256::digest(body).to_vec(),
    });
    let data = parsed
        .event_data
        .ok_or_else(|| malformed("there is no event-data"))?;
    let kind = match (data.event.as_str(), data.severity.as_deref()) {
        ("failed", Some("permanent")) => EventKind::HardBounce,
        ("failed", _) => EventKind::SoftBounce,
        ("complained", _) => EventKind::Complaint,
        ("unsubscribed", _) => EventKind::Unsubscribe,
        _ => {
            return Ok(Verified {
                events: Vec::new(),
                nonce,
            })
        }
    };
    let at = data.timestamp.unwrap_or(ts as f64);
    let day = chrono::DateTime::from_timestamp(at as i64, 0)
        .map(|d| d.format("%Y-%m-%d").to_string())
        .ok_or_else(|| malformed("event-data.timestamp is not a time"))?;
    if data.id.is_empty() || data.id.len() > 200 {
        return Err(malformed("event-data.id must have 1 to 200 characters"));
    }
    let status = data.delivery_status.as_ref();
    let code = status.and_then(|s| s.enhanced_code.clone()).or_else(|| {
        // "5.1.1 …" at the start of the message, as Mailgun often reports it.
        let m = status?.message.as_deref()?;
        let first = m.split_whitespace().next()?;
        (first.split('.').count() == 3 && first.chars().all(|c| c.is_ascii_digit() || c == '.'))
            .then(|| first.to_string())
    });
    let diagnostic = status.map(|s| {
        let code = s.code.as_ref().map(|c| c.to_string()).unwrap_or_default();
        let text = s
            .message
            .clone()
            .or_else(|| s.description.clone())
            .unwrap_or_default();
        format!("{code} {text}")
    });
    // Mailgun gives the header's value without its angle brackets.
    let message_id = data.message.and_then(|m| m.headers?.message_id).map(|m| {
        format!(
            "<{}>",
            m.trim().trim_start_matches('<').trim_end_matches('>')
        )
    });
    let e = event(
        format!("{}:{day}", data.id),
        kind,
        recipient(data.recipient.as_deref())?,
        message_id.as_deref(),
        code.as_deref(),
        diagnostic.as_deref(),
        Some(&at.to_string()),
    );
    Ok(Verified {
        events: vec![e],
        nonce,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "key-3ax6xnjp29jd6fds4gc373sgvjxteol0";

    fn body(ts: &str, token: &str, sig: &str, event: &str) -> Vec<u8> {
        format!(
            r#"{{"signature":{{"timestamp":"{ts}","token":"{token}","signature":"{sig}"}},"event-data":{event}}}"#
        )
        .into_bytes()
    }

    const FAILED: &str = r#"{"id":"hTWCTD81RtiDN-...","event":"failed","severity":"permanent","reason":"bounce","recipient":"ann@example.org","timestamp":1700000000.5,"delivery-status":{"code":550,"message":"5.1.1 The email account that you tried to reach does not exist"},"message":{"headers":{"message-id":"campaign.7.42@m.example"}}}"#;

    #[test]
    fn a_signed_failure_is_a_hard_bounce_with_its_code_and_a_nonce() {
        let token = "a".repeat(50);
        let sig = sign(KEY, "1700000000", &token);
        let b = body("1700000000", &token, &sig, FAILED);
        let v = verify(KEY, &b, 1_700_000_100).unwrap();
        let e = &v.events[0];
        assert_eq!(e.kind, EventKind::HardBounce);
        assert_eq!(e.id, "hTWCTD81RtiDN-...:2023-11-14");
        assert_eq!(e.status.as_deref(), Some("5.1.1"));
        assert!(e.diagnostic.as_deref().unwrap().starts_with("550 5.1.1"));
        assert_eq!(e.job_id().unwrap().to_string(), "campaign:7:42");
        assert_eq!(v.nonce.unwrap().value, token);
        // Temporary is soft; delivered carries nothing but is still signed (its nonce kept).
        let soft = FAILED.replace("permanent", "temporary");
        let b = body("1700000000", &token, &sig, &soft);
        assert_eq!(
            verify(KEY, &b, 1_700_000_000).unwrap().events[0].kind,
            EventKind::SoftBounce
        );
        let delivered = FAILED.replace("\"failed\"", "\"delivered\"");
        let b = body("1700000000", &token, &sig, &delivered);
        let v = verify(KEY, &b, 1_700_000_000).unwrap();
        assert!(v.events.is_empty() && v.nonce.is_some());
    }

    #[test]
    fn a_wrong_key_a_stale_timestamp_or_no_signature_is_refused() {
        let token = "b".repeat(50);
        let sig = sign(KEY, "1700000000", &token);
        for (b, now) in [
            (
                body(
                    "1700000000",
                    &token,
                    &sign("other", "1700000000", &token),
                    FAILED,
                ),
                1_700_000_000,
            ),
            (body("1700000000", &token, &sig, FAILED), 1_700_003_601),
            (body("1700000001", &token, &sig, FAILED), 1_700_000_000),
            (body("1700000000", &token, "zz", FAILED), 1_700_000_000),
            (br#"{"event-data":{}}"#.to_vec(), 1_700_000_000),
            (b"not json".to_vec(), 1_700_000_000),
        ] {
            let r = verify(KEY, &b, now).unwrap_err();
            assert_eq!(r.status(), 401, "{r}");
        }
    }
}
