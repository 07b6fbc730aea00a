//! SendGrid's signed Event Webhook (https://www.twilio.com/docs/sendgrid/for-developers/tracking-events/getting-started-event-webhook-security-features):
//! `X-Twilio-Email-Event-Webhook-Signature` is the base64 of a DER ECDSA (P-256, SHA-256)
//! signature over `timestamp || body`, checked with the verification key from SendGrid's Mail
//! Settings (base64 DER SubjectPublicKeyInfo). SendGrid documents no window; ten minutes of the
//! database's clock are allowed. The body is an array of events, each with its `sg_event_id`.

use base64::Engine;
use openssl::hash::MessageDigest;
use openssl::pkey::PKey;
use openssl::sign::Verifier;
use serde::Deserialize;

use super::{event, fresh, malformed, recipient, Refused, Verified};
use crate::domain::{EventKind, FeedbackReport};

/// Seconds a signature stays good either side of the database's clock.
pub const WINDOW: i64 = 600;

#[derive(Deserialize)]
struct Event {
    email: Option<String>,
    event: String,
    #[serde(rename = "type")]
    bounce_type: Option<String>,
    status: Option<String>,
    reason: Option<String>,
    sg_event_id: Option<String>,
    #[serde(rename = "smtp-id")]
    smtp_id: Option<String>,
    /// `<X-Message-Id>.filter…`: the part before the first dot is what SendGrid's 250 reply
    /// named (`queued as <X-Message-Id>`).
    sg_message_id: Option<String>,
    timestamp: Option<i64>,
}

/// Is `key` a verification key SendGrid could have shown (base64 DER of a public key)?
pub fn valid_key(key: &str) -> bool {
    base64::engine::general_purpose::STANDARD
        .decode(key.trim())
        .ok()
        .is_some_and(|der| PKey::public_key_from_der(&der).is_ok())
}

fn kind(e: &Event) -> Option<EventKind> {
    match (
        e.event.as_str(),
        e.bounce_type.as_deref(),
        e.reason.as_deref(),
    ) {
        ("bounce", Some("blocked"), _) => Some(EventKind::SoftBounce),
        ("bounce", _, _) => Some(EventKind::HardBounce),
        ("dropped", _, Some("Bounced Address" | "Invalid")) => Some(EventKind::HardBounce),
        ("dropped", _, Some("Spam Reporting Address")) => Some(EventKind::Complaint),
        ("dropped", _, Some("Unsubscribed Address")) => Some(EventKind::Unsubscribe),
        ("spamreport", _, _) => Some(EventKind::Complaint),
        ("unsubscribe" | "group_unsubscribe", _, _) => Some(EventKind::Unsubscribe),
        _ => None,
    }
}

/// Verifies and parses one request; `now` is the database's clock in unix seconds.
pub fn verify(
    key: &str,
    signature: Option<&str>,
    timestamp: Option<&str>,
    body: &[u8],
    now: i64,
) -> Result<Verified, Refused> {
    let (Some(signature), Some(timestamp)) = (signature, timestamp) else {
        return Err(Refused::Unauthenticated(
            "The request is not signed: send the X-Twilio-Email-Event-Webhook-Signature and -Timestamp headers."
                .into(),
        ));
    };
    let ts: i64 = timestamp.trim().parse().map_err(|_| {
        Refused::Unauthenticated(format!(
            "The webhook timestamp “{timestamp}” is not unix seconds."
        ))
    })?;
    if !fresh(ts, now, WINDOW) {
        return Err(Refused::Unauthenticated(format!(
            "The webhook timestamp {ts} is more than {WINDOW} s away from the server's clock."
        )));
    }
    let b64 = base64::engine::general_purpose::STANDARD;
    let bad = || {
        Refused::Unauthenticated(
            "The signature does not match the body and the endpoint's verification key.".into(),
        )
    };
    let der = b64.decode(key.trim()).map_err(|_| bad())?;
    let sig = b64.decode(signature.trim()).map_err(|_| bad())?;
    let good = (|| -> Result<bool, openssl::error::ErrorStack> {
        let pkey = PKey::public_key_from_der(&der)?;
        let mut v = Verifier::new(MessageDigest::sha256(), &pkey)?;
        v.update(timestamp.as_bytes())?;
        v.update(body)?;
        v.verify(&sig)
    })()
    .unwrap_or(false);
    if !good {
        return Err(bad());
    }
    let parsed: Vec<Event> = serde_json::from_slice(body).map_err(malformed)?;
    let mut events = Vec::new();
    for e in &parsed {
        let Some(kind) = kind(e) else { continue };
        let id = e
            .sg_event_id
            .as_deref()
            .filter(|i| !i.is_empty() && i.len() <= 200)
            .ok_or_else(|| malformed("an event has no sg_event_id"))?;
        let occurred = e.timestamp.map(|t| t.to_string());
        let mut ev = event(
            id.to_string(),
            kind,
            recipient(e.email.as_deref())?,
            e.smtp_id.as_deref(),
            e.status.as_deref(),
            e.reason.as_deref(),
            occurred.as_deref(),
        );
        ev.relay_id = FeedbackReport::field(
            e.sg_message_id.as_deref().and_then(|m| m.split('.').next()),
            200,
        );
        events.push(ev);
    }
    Ok(Verified {
        events,
        nonce: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use openssl::ec::{EcGroup, EcKey};
    use openssl::nid::Nid;
    use openssl::sign::Signer;

    /// SendGrid's own test vector (sendgrid-java `EventWebhookTest`).
    const KEY: &str = "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEEDr2LjtURuePQzplybdC+u4CwrqDqBaWjcMMsTbhdbcwHBcepxo7yAQGhHPTnlvFYPAZFceEu/1FwCM/QmGUhA==";
    const SIG: &str = "MEUCIQCtIHJeH93Y+qpYeWrySphQgpNGNr/U+UyUlBkU6n7RAwIgJTz2C+8a8xonZGi6BpSzoQsbVRamr2nlxFDWYNH2j/0=";
    const BODY: &[u8] =
        br#"{"category":"example_payload","event":"test_event","message_id":"message_id"}"#;

    #[test]
    fn sendgrids_own_vector_verifies_and_another_timestamp_does_not() {
        assert!(valid_key(KEY) && !valid_key("bm9wZQ=="));
        // Its body is one object, not the array events arrive in: past the signature, a 400.
        let r = verify(KEY, Some(SIG), Some("1588788367"), BODY, 1_588_788_367).unwrap_err();
        assert_eq!(r.status(), 400, "{r}");
        let r = verify(KEY, Some(SIG), Some("1388788367"), BODY, 1_388_788_367).unwrap_err();
        assert_eq!(r.status(), 401, "{r}");
        let r = verify(KEY, Some(SIG), Some("1588788367"), BODY, 1_588_789_000).unwrap_err();
        assert!(r.to_string().contains("away from"), "{r}");
        assert_eq!(verify(KEY, None, None, BODY, 0).unwrap_err().status(), 401);
    }

    #[test]
    fn events_we_sign_map_to_kinds_and_others_are_skipped() {
        let ec =
            EcKey::generate(&EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).unwrap()).unwrap();
        let pkey = PKey::from_ec_key(ec).unwrap();
        let key =
            base64::engine::general_purpose::STANDARD.encode(pkey.public_key_to_der().unwrap());
        let body = br#"[{"email":"a@example.org","event":"bounce","type":"bounce","status":"5.1.1","reason":"550 5.1.1 gone","sg_event_id":"e1","smtp-id":"<campaign.7.42@m.example>","timestamp":100},
{"email":"b@example.org","event":"bounce","type":"blocked","status":"4.0.0","sg_event_id":"e2"},
{"email":"c@example.org","event":"spamreport","sg_event_id":"e3"},
{"email":"d@example.org","event":"dropped","reason":"Unsubscribed Address","sg_event_id":"e4"},
{"email":"e@example.org","event":"delivered","sg_event_id":"e5"}]
"#;
        let mut s = Signer::new(MessageDigest::sha256(), &pkey).unwrap();
        s.update(b"100").unwrap();
        s.update(body).unwrap();
        let sig = base64::engine::general_purpose::STANDARD.encode(s.sign_to_vec().unwrap());
        let v = verify(&key, Some(&sig), Some("100"), body, 100).unwrap();
        let kinds: Vec<(&str, EventKind)> =
            v.events.iter().map(|e| (e.id.as_str(), e.kind)).collect();
        assert_eq!(
            kinds,
            [
                ("e1", EventKind::HardBounce),
                ("e2", EventKind::SoftBounce),
                ("e3", EventKind::Complaint),
                ("e4", EventKind::Unsubscribe)
            ]
        );
        assert_eq!(v.events[0].job_id().unwrap().to_string(), "campaign:7:42");
        let mut tampered = body.to_vec();
        tampered[10] ^= 1;
        assert_eq!(
            verify(&key, Some(&sig), Some("100"), &tampered, 100)
                .unwrap_err()
                .status(),
            401
        );
    }
}
