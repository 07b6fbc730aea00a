//! Amazon SES notifications through SNS (https://docs.aws.amazon.com/sns/latest/dg/sns-verify-signature-of-message.html).
//! SNS signs a canonical string of the message's fields with the key of a certificate it names
//! by URL. This server fetches nothing: the owner pins the certificate (PEM) and the topic ARN
//! when creating the endpoint, so a message is taken only if its `SigningCertURL` is an SNS
//! URL, its signature verifies against the pinned certificate, its `TopicArn` is the pinned one
//! and its `Timestamp` is within an hour. `SubscriptionConfirmation` carries the URL the owner
//! opens to confirm; a `Notification` carries SES's bounce or complaint as JSON text.

use base64::Engine;
use openssl::hash::MessageDigest;
use openssl::sign::Verifier;
use openssl::x509::X509;
use serde::{Deserialize, Serialize};

use super::{event, fresh, malformed, recipient, Refused, Verified};
use crate::domain::{EventKind, FeedbackReport};

/// Seconds a message stays good either side of the database's clock (SNS retries for at most
/// an hour by default).
pub const WINDOW: i64 = 3600;

/// What the owner pins for an SNS endpoint (kept as the endpoint's secret, JSON).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pinned {
    pub topic_arn: String,
    pub certificate_pem: String,
}

impl Pinned {
    /// Checks what the owner pasted: a topic ARN and a PEM certificate with a public key.
    pub fn new(topic_arn: &str, certificate_pem: &str) -> Result<Pinned, String> {
        let topic_arn = topic_arn.trim();
        if !topic_arn.starts_with("arn:aws") || topic_arn.split(':').count() != 6 {
            return Err(format!(
                "SNS topic ARN: “{topic_arn}” is not a topic ARN (arn:aws:sns:<region>:<account>:<topic>)."
            ));
        }
        X509::from_pem(certificate_pem.trim().as_bytes())
            .and_then(|c| c.public_key())
            .map_err(|_| {
                "SNS signing certificate: paste the PEM certificate (-----BEGIN CERTIFICATE-----) the topic signs with.".to_string()
            })?;
        Ok(Pinned {
            topic_arn: topic_arn.to_string(),
            certificate_pem: certificate_pem.trim().to_string(),
        })
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Envelope {
    #[serde(rename = "Type")]
    kind: String,
    message_id: String,
    topic_arn: String,
    subject: Option<String>,
    message: String,
    timestamp: String,
    signature_version: String,
    signature: String,
    #[serde(rename = "SigningCertURL")]
    signing_cert_url: String,
    token: Option<String>,
    #[serde(rename = "SubscribeURL")]
    subscribe_url: Option<String>,
}

/// What a verified SNS message asks for.
#[derive(Debug)]
pub enum Sns {
    /// Events to record.
    Events(Verified),
    /// The subscription's confirmation: the owner opens this URL to start deliveries.
    Confirm { subscribe_url: String },
    /// Anything else SNS sends (an unsubscribe confirmation): nothing to do.
    Nothing,
}

/// The canonical string SNS signs: `name\nvalue\n` for the fields of the message's type, in
/// byte order of their names (`Subject` only when present).
fn string_to_sign(e: &Envelope) -> Option<String> {
    let mut fields: Vec<(&str, &str)> = vec![
        ("Message", &e.message),
        ("MessageId", &e.message_id),
        ("Timestamp", &e.timestamp),
        ("TopicArn", &e.topic_arn),
        ("Type", &e.kind),
    ];
    match e.kind.as_str() {
        "Notification" => {
            if let Some(s) = &e.subject {
                fields.push(("Subject", s));
            }
        }
        "SubscriptionConfirmation" | "UnsubscribeConfirmation" => {
            fields.push(("SubscribeURL", e.subscribe_url.as_deref()?));
            fields.push(("Token", e.token.as_deref()?));
        }
        _ => return None,
    }
    fields.sort_by(|a, b| a.0.cmp(b.0));
    Some(fields.iter().map(|(k, v)| format!("{k}\n{v}\n")).collect())
}

/// Is `url` an https URL of an SNS host (`sns.<region>.amazonaws.com[.cn]`)? The host ends at
/// the first `/`, `?` or `#`; user info or a port (`@`, `:`) is not a host character here.
fn sns_url(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("https://") else {
        return false;
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    host.starts_with("sns.")
        && (host.ends_with(".amazonaws.com") || host.ends_with(".amazonaws.com.cn"))
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-')
}

/// The canonical string, signed by `key` (what SNS does; the tests sign with their own).
pub fn sign(key: &openssl::pkey::PKeyRef<openssl::pkey::Private>, body: &[u8]) -> Option<String> {
    let e: Envelope = serde_json::from_slice(body).ok()?;
    let mut s = openssl::sign::Signer::new(MessageDigest::sha256(), key).ok()?;
    s.update(string_to_sign(&e)?.as_bytes()).ok()?;
    Some(base64::engine::general_purpose::STANDARD.encode(s.sign_to_vec().ok()?))
}

/// Verifies one SNS message against the pinned certificate and topic; `now` is the database's
/// clock in unix seconds.
pub fn verify(pinned: &str, body: &[u8], now: i64) -> Result<Sns, Refused> {
    let unsigned =
        |why: &str| Refused::Unauthenticated(format!("The SNS message is refused: {why}."));
    let pinned: Pinned = serde_json::from_str(pinned)
        .map_err(|_| unsigned("the endpoint has no pinned certificate"))?;
    let e: Envelope = serde_json::from_slice(body)
        .map_err(|_| malformed("not an SNS message (raw message delivery must be off)"))?;
    if !sns_url(&e.signing_cert_url) {
        return Err(unsigned("SigningCertURL is not an SNS address"));
    }
    if e.topic_arn != pinned.topic_arn {
        return Err(unsigned("it comes from another topic than the pinned one"));
    }
    let digest = match e.signature_version.as_str() {
        "1" => MessageDigest::sha1(),
        "2" => MessageDigest::sha256(),
        v => return Err(malformed(format!("SignatureVersion {v} is not 1 or 2"))),
    };
    let canonical = string_to_sign(&e)
        .ok_or_else(|| malformed(format!("type {} is not an SNS message type", e.kind)))?;
    let sig = base64::engine::general_purpose::STANDARD
        .decode(e.signature.trim())
        .map_err(|_| unsigned("the signature is not base64"))?;
    let good = (|| -> Result<bool, openssl::error::ErrorStack> {
        let key = X509::from_pem(pinned.certificate_pem.as_bytes())?.public_key()?;
        let mut v = Verifier::new(digest, &key)?;
        v.update(canonical.as_bytes())?;
        v.verify(&sig)
    })()
    .unwrap_or(false);
    if !good {
        return Err(unsigned(
            "the signature does not match the pinned certificate",
        ));
    }
    let at = chrono::DateTime::parse_from_rfc3339(&e.timestamp)
        .map_err(|_| malformed("Timestamp is not an ISO 8601 time"))?
        .timestamp();
    if !fresh(at, now, WINDOW) {
        return Err(unsigned(
            "its Timestamp is more than an hour away from the server's clock",
        ));
    }
    match e.kind.as_str() {
        "SubscriptionConfirmation" => Ok(Sns::Confirm {
            subscribe_url: e
                .subscribe_url
                .filter(|u| sns_url(u))
                .ok_or_else(|| malformed("SubscribeURL is not an SNS address"))?,
        }),
        "Notification" => Ok(Sns::Events(Verified {
            events: ses_events(&e.message)?,
            nonce: None,
        })),
        _ => Ok(Sns::Nothing),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SesMessage {
    notification_type: Option<String>,
    event_type: Option<String>,
    bounce: Option<Bounce>,
    complaint: Option<Complaint>,
    mail: Option<Mail>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Bounce {
    bounce_type: String,
    feedback_id: String,
    bounced_recipients: Vec<Recipient>,
    timestamp: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Complaint {
    feedback_id: String,
    complained_recipients: Vec<Recipient>,
    complaint_feedback_type: Option<String>,
    timestamp: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Recipient {
    email_address: String,
    status: Option<String>,
    diagnostic_code: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Mail {
    common_headers: Option<CommonHeaders>,
    /// What SES "returned to you when you sent the message": its 250 reply names it.
    message_id: Option<String>,
    /// The envelope sender: our VERP address when the org has a bounce domain.
    source: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CommonHeaders {
    message_id: Option<String>,
}

/// SES's bounce or complaint, one event per recipient (`<feedbackId>:<address>`).
fn ses_events(message: &str) -> Result<Vec<FeedbackReport>, Refused> {
    let m: SesMessage = serde_json::from_str(message).map_err(malformed)?;
    let (message_id, relay_id, envelope_from) = match m.mail {
        Some(mail) => (
            mail.common_headers.and_then(|h| h.message_id),
            mail.message_id,
            mail.source,
        ),
        None => (None, None, None),
    };
    let with_ids = |mut e: FeedbackReport| {
        e.relay_id = FeedbackReport::field(relay_id.as_deref(), 200);
        e.envelope_from = FeedbackReport::field(envelope_from.as_deref(), 320);
        e
    };
    let kind = m.notification_type.or(m.event_type).unwrap_or_default();
    let mut out = Vec::new();
    match (kind.as_str(), m.bounce, m.complaint) {
        ("Bounce", Some(b), _) => {
            let k = if b.bounce_type == "Permanent" {
                EventKind::HardBounce
            } else {
                EventKind::SoftBounce
            };
            for r in b.bounced_recipients {
                out.push(with_ids(event(
                    format!("{}:{}", b.feedback_id, r.email_address.to_lowercase()),
                    k,
                    recipient(Some(&r.email_address))?,
                    message_id.as_deref(),
                    r.status.as_deref(),
                    r.diagnostic_code.as_deref(),
                    b.timestamp.as_deref(),
                )));
            }
        }
        ("Complaint", _, Some(c)) if c.complaint_feedback_type.as_deref() != Some("not-spam") => {
            for r in c.complained_recipients {
                out.push(with_ids(event(
                    format!("{}:{}", c.feedback_id, r.email_address.to_lowercase()),
                    EventKind::Complaint,
                    recipient(Some(&r.email_address))?,
                    message_id.as_deref(),
                    None,
                    c.complaint_feedback_type.as_deref(),
                    c.timestamp.as_deref(),
                )));
            }
        }
        _ => {}
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use openssl::asn1::Asn1Time;
    use openssl::pkey::PKey;
    use openssl::rsa::Rsa;
    use openssl::x509::X509Builder;

    /// A self-signed certificate standing in for SNS's, and its key.
    fn certificate() -> (String, PKey<openssl::pkey::Private>) {
        let key = PKey::from_rsa(Rsa::generate(2048).unwrap()).unwrap();
        let mut b = X509Builder::new().unwrap();
        b.set_version(2).unwrap();
        b.set_pubkey(&key).unwrap();
        b.set_not_before(&Asn1Time::days_from_now(0).unwrap())
            .unwrap();
        b.set_not_after(&Asn1Time::days_from_now(1).unwrap())
            .unwrap();
        b.sign(&key, MessageDigest::sha256()).unwrap();
        let pem = String::from_utf8(b.build().to_pem().unwrap()).unwrap();
        (pem, key)
    }

    const TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:ses-bounces";

    fn message(kind: &str, extra: serde_json::Value, inner: &str) -> serde_json::Value {
        let mut m = serde_json::json!({
            "Type": kind, "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324", "TopicArn": TOPIC,
            "Message": inner, "Timestamp": "2026-12-01T10:04:00.000Z", "SignatureVersion": "2",
            "Signature": "", "SigningCertURL": "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem",
        });
        for (k, v) in extra.as_object().unwrap() {
            m[k] = v.clone();
        }
        m
    }

    fn signed(key: &PKey<openssl::pkey::Private>, mut m: serde_json::Value) -> Vec<u8> {
        let sig = sign(key, &serde_json::to_vec(&m).unwrap()).unwrap();
        m["Signature"] = sig.into();
        serde_json::to_vec(&m).unwrap()
    }

    const NOW: i64 = 1_796_119_440; // 2026-12-01T10:04:00Z

    #[test]
    fn a_pinned_bounce_notification_verifies_and_each_recipient_is_an_event() {
        let (pem, key) = certificate();
        let pinned = serde_json::to_string(&Pinned::new(TOPIC, &pem).unwrap()).unwrap();
        let inner = r#"{"notificationType":"Bounce","bounce":{"bounceType":"Permanent","bounceSubType":"General","feedbackId":"0100-abc","bouncedRecipients":[{"emailAddress":"Jane@Example.com","status":"5.1.1","diagnosticCode":"smtp; 550 5.1.1 user unknown"},{"emailAddress":"joe@example.com","status":"5.1.1"}]},"mail":{"messageId":"0100018c-000000","commonHeaders":{"messageId":"<campaign.7.42@m.example>"}}}"#;
        let body = signed(
            &key,
            message(
                "Notification",
                serde_json::json!({"Subject": "Bounce\n\"x\""}),
                inner,
            ),
        );
        let Sns::Events(v) = verify(&pinned, &body, NOW + 60).unwrap() else {
            panic!("not events")
        };
        let ids: Vec<&str> = v.events.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(
            ids,
            ["0100-abc:jane@example.com", "0100-abc:joe@example.com"]
        );
        assert_eq!(v.events[0].kind, EventKind::HardBounce);
        assert_eq!(v.events[0].job_id().unwrap().to_string(), "campaign:7:42");
        // Tampered, another topic, a stale timestamp, a foreign certificate URL, another key.
        let mut tampered: serde_json::Value = serde_json::from_slice(&body).unwrap();
        tampered["Message"] = inner.replace("Permanent", "Transient").into();
        let (_, other_key) = certificate();
        let foreign_url = message(
            "Notification",
            serde_json::json!({"SigningCertURL": "https://evil.example/sns.pem"}),
            inner,
        );
        let other_topic = message(
            "Notification",
            serde_json::json!({"TopicArn": "arn:aws:sns:us-east-1:999999999999:x"}),
            inner,
        );
        for (what, b, now) in [
            ("tampered", serde_json::to_vec(&tampered).unwrap(), NOW),
            ("stale", body.clone(), NOW + 3601),
            ("foreign URL", signed(&key, foreign_url), NOW),
            ("other topic", signed(&key, other_topic), NOW),
            (
                "other key",
                signed(
                    &other_key,
                    message("Notification", serde_json::json!({}), inner),
                ),
                NOW,
            ),
        ] {
            assert_eq!(
                verify(&pinned, &b, now).unwrap_err().status(),
                401,
                "{what}"
            );
        }
    }

    #[test]
    fn only_sns_hosts_sign() {
        for good in [
            "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-x.pem",
            "https://sns.cn-north-1.amazonaws.com.cn/x.pem",
        ] {
            assert!(sns_url(good), "{good}");
        }
        for bad in [
            "http://sns.us-east-1.amazonaws.com/x.pem",
            "https://sns.us-east-1.amazonaws.com.evil.example/x.pem",
            "https://evil.example/sns.us-east-1.amazonaws.com",
            "https://sns.x.amazonaws.com@evil.example/x.pem",
            "https://sns.x.amazonaws.com:8443/x.pem",
        ] {
            assert!(!sns_url(bad), "{bad}");
        }
    }

    #[test]
    fn the_confirmation_carries_its_url_and_complaints_skip_not_spam() {
        let (pem, key) = certificate();
        let pinned = serde_json::to_string(&Pinned::new(TOPIC, &pem).unwrap()).unwrap();
        let url =
            "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn=x&Token=t";
        let confirm = message(
            "SubscriptionConfirmation",
            serde_json::json!({"Token": "t", "SubscribeURL": url}),
            "You have chosen to subscribe",
        );
        match verify(&pinned, &signed(&key, confirm), NOW).unwrap() {
            Sns::Confirm { subscribe_url } => assert_eq!(subscribe_url, url),
            other => panic!("{other:?}"),
        }
        let complaint = r#"{"notificationType":"Complaint","complaint":{"feedbackId":"0100-c","complainedRecipients":[{"emailAddress":"r@example.com"}],"complaintFeedbackType":"abuse"},"mail":{}}"#;
        let Sns::Events(v) = verify(
            &pinned,
            &signed(
                &key,
                message("Notification", serde_json::json!({}), complaint),
            ),
            NOW,
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(v.events[0].kind, EventKind::Complaint);
        let not_spam = complaint.replace("abuse", "not-spam");
        let Sns::Events(v) = verify(
            &pinned,
            &signed(
                &key,
                message("Notification", serde_json::json!({}), &not_spam),
            ),
            NOW,
        )
        .unwrap() else {
            panic!()
        };
        assert!(v.events.is_empty());
        assert!(Pinned::new("arn:aws:sns:x", &pem)
            .unwrap_err()
            .contains("topic ARN"));
        assert!(Pinned::new(TOPIC, "nope").unwrap_err().contains("PEM"));
    }
}
