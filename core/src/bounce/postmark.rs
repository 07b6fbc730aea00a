//! Postmark's bounce and spam-complaint webhooks (https://postmarkapp.com/developer/webhooks/webhooks-overview).
//! Postmark signs nothing: the endpoint's secret is in the URL path or is the basic-auth
//! password, compared in constant time. Its `MessageID` is Postmark's own, so events are
//! matched by recipient. The id kept is `<RecordType>:<ID>`.

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{event, malformed, recipient, Refused, Verified};
use crate::domain::EventKind;

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Record {
    record_type: String,
    #[serde(rename = "ID")]
    id: serde_json::Value,
    type_code: Option<i64>,
    email: Option<String>,
    details: Option<String>,
    description: Option<String>,
    bounced_at: Option<String>,
}

/// Is `presented` the endpoint's secret? Both are hashed first, so the comparison takes the
/// same time whatever they hold.
pub fn authentic(secret: &str, presented: Option<&str>) -> bool {
    let Some(p) = presented else {
        return false;
    };
    let (a, b) = (
        Sha256::digest(secret.as_bytes()),
        Sha256::digest(p.as_bytes()),
    );
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// The kind a bounce's `TypeCode` stands for (postmark.js `BounceTypeCode`); `None`: kept
/// nowhere (auto-replies, opens, challenges, …).
fn bounce_kind(code: i64) -> Option<EventKind> {
    match code {
        1 | 100000 => Some(EventKind::HardBounce),
        2 | 256 | 512 | 4096 | 100006 | 100009 => Some(EventKind::SoftBounce),
        16 => Some(EventKind::Unsubscribe),
        100001 => Some(EventKind::Complaint),
        _ => None,
    }
}

/// Verifies `presented` and parses the body.
pub fn verify(secret: &str, presented: Option<&str>, body: &[u8]) -> Result<Verified, Refused> {
    if !authentic(secret, presented) {
        return Err(Refused::Unauthenticated(
            "The Postmark webhook's secret is missing or wrong.".into(),
        ));
    }
    let r: Record = serde_json::from_slice(body).map_err(malformed)?;
    let kind = match r.record_type.as_str() {
        "SpamComplaint" => Some(EventKind::Complaint),
        "Bounce" => r.type_code.and_then(bounce_kind),
        _ => None,
    };
    let Some(kind) = kind else {
        return Ok(Verified::default());
    };
    let id = match &r.id {
        serde_json::Value::Number(n) => n.to_string(),
        serde_json::Value::String(s) if !s.is_empty() && s.len() <= 100 => s.clone(),
        _ => return Err(malformed("ID must be a number")),
    };
    let diagnostic = r.details.as_deref().or(r.description.as_deref());
    let e = event(
        format!("{}:{id}", r.record_type),
        kind,
        recipient(r.email.as_deref())?,
        None,
        None,
        diagnostic,
        r.bounced_at.as_deref(),
    );
    Ok(Verified {
        events: vec![e],
        nonce: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNCE: &[u8] = br#"{"RecordType":"Bounce","ID":4323372036854775807,"Type":"HardBounce","TypeCode":1,"MessageID":"883953f4-6105-42a2-a16a-77a8eac79483","Email":"zaphod@example.com","BouncedAt":"2019-11-05T16:33:54.9070259Z","Details":"smtp;550 5.1.1 The email account that you tried to reach does not exist"}"#;

    #[test]
    fn the_secret_decides_and_type_codes_map_to_kinds() {
        assert!(verify("s3cret", Some("s3cret"), BOUNCE).is_ok());
        for wrong in [None, Some(""), Some("s3cre"), Some("s3cret ")] {
            assert_eq!(verify("s3cret", wrong, BOUNCE).unwrap_err().status(), 401);
        }
        let v = verify("s", Some("s"), BOUNCE).unwrap();
        let e = &v.events[0];
        assert_eq!(
            (e.id.as_str(), e.kind),
            ("Bounce:4323372036854775807", EventKind::HardBounce)
        );
        assert!(e.diagnostic.as_deref().unwrap().contains("5.1.1"));
        let text = std::str::from_utf8(BOUNCE).unwrap();
        for (code, kind) in [
            ("2", Some(EventKind::SoftBounce)),
            ("100001", Some(EventKind::Complaint)),
            ("4", None),
        ] {
            let b = text.replace("\"TypeCode\":1", &format!("\"TypeCode\":{code}"));
            let v = verify("s", Some("s"), b.as_bytes()).unwrap();
            assert_eq!(v.events.first().map(|e| e.kind), kind, "{code}");
        }
        let complaint = text.replace("\"Bounce\"", "\"SpamComplaint\"");
        let v = verify("s", Some("s"), complaint.as_bytes()).unwrap();
        assert_eq!(v.events[0].kind, EventKind::Complaint);
        assert!(v.events[0].id.starts_with("SpamComplaint:"));
        assert_eq!(verify("s", Some("s"), b"{}").unwrap_err().status(), 400);
    }
}
