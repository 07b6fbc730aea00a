//! Tracked links: `<base64url(job id, newline, target)>.<base64url(tag)>`, signed so that the
//! redirect goes only where the mail's own link went (never an open redirect: the target is
//! inside the signed token), for the delivery it was sent in. A link in an old message keeps
//! working. And which clicks are a machine's: scanners and prefetchers that follow every link.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::Mac;

use crate::signing::Purpose;

/// Bytes of the tag kept in a link (128 bits: links stay short enough for every client).
const TAG_BYTES: usize = 16;

/// The token of `target` in delivery `job_id`.
pub fn token(key: &[u8], job_id: &str, target: &str) -> String {
    let payload = URL_SAFE_NO_PAD.encode(format!("{job_id}\n{target}"));
    let mut mac = Purpose::Click.mac(key);
    mac.update(payload.as_bytes());
    let tag = mac.finalize().into_bytes();
    format!("{payload}.{}", URL_SAFE_NO_PAD.encode(&tag[..TAG_BYTES]))
}

/// The (job id, target) of a genuine token, the tag compared in constant time; `None` for
/// anything forged, altered or cut.
pub fn verify(key: &[u8], token: &str) -> Option<(String, String)> {
    let (payload, tag) = token.split_once('.')?;
    let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
    if tag.len() != TAG_BYTES {
        return None;
    }
    let mut mac = Purpose::Click.mac(key);
    mac.update(payload.as_bytes());
    mac.verify_truncated_left(&tag).ok()?;
    let text = String::from_utf8(URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
    let (job, target) = text.split_once('\n')?;
    Some((job.to_owned(), target.to_owned()))
}

/// The token of delivery `job_id`'s open-tracking pixel: a token without a target, so it never
/// redirects and a link's token never counts as an open.
pub fn open_token(key: &[u8], job_id: &str) -> String {
    token(key, job_id, "")
}

/// The job id of a genuine pixel token; `None` for a link's token or anything forged.
pub fn verify_open(key: &[u8], token: &str) -> Option<String> {
    verify(key, token)
        .filter(|(_, target)| target.is_empty())
        .map(|(job, _)| job)
}

/// The (job id, target) of a genuine link token; `None` for a pixel's token or anything forged.
pub fn verify_link(key: &[u8], token: &str) -> Option<(String, String)> {
    verify(key, token).filter(|(_, target)| trackable(target))
}

/// Whether a link is one to track: http(s) only (not `mailto:`, not an anchor).
pub fn trackable(href: &str) -> bool {
    let h = href.trim_start().to_ascii_lowercase();
    h.starts_with("https://") || h.starts_with("http://")
}

/// A click within this many seconds of the message's delivery is a scanner's: no person opens
/// a message and follows a link that fast, and security gateways do it on arrival.
pub const SCANNER_SECONDS: f64 = 10.0;

/// A request that is a machine's by its own account: a `HEAD` (prefetchers check links without
/// following them) or a user agent naming a known link scanner or a library.
pub fn scanner_request(method_is_head: bool, user_agent: Option<&str>) -> bool {
    const MARKS: [&str; 16] = [
        "barracuda",
        "mimecast",
        "proofpoint",
        "safelinks",
        "symantec",
        "trendmicro",
        "forcepoint",
        "cisco",
        "bot",
        "crawler",
        "spider",
        "preview",
        "curl/",
        "python-",
        "go-http-client",
        "wget",
    ];
    if method_is_head {
        return true;
    }
    let Some(ua) = user_agent else {
        return true;
    };
    let ua = ua.to_ascii_lowercase();
    ua.is_empty() || MARKS.iter().any(|m| ua.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn a_token_leads_only_where_it_was_made_for() {
        let t = token(KEY, "c:1:2", "https://example.com/pricing?a=1&b=2");
        assert_eq!(
            verify(KEY, &t),
            Some(("c:1:2".into(), "https://example.com/pricing?a=1&b=2".into()))
        );
        assert!(t
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)));
        // Another target under the same tag, another key, a cut tag: refused.
        let (_, tag) = t.split_once('.').unwrap();
        let other = format!(
            "{}.{tag}",
            URL_SAFE_NO_PAD.encode("c:1:2\nhttps://evil.example/")
        );
        assert_eq!(verify(KEY, &other), None);
        assert_eq!(verify(b"another key, just as long as it", &t), None);
        assert_eq!(verify(KEY, &t[..t.len() - 2]), None);
        assert_eq!(verify(KEY, "nothing"), None);
        assert_eq!(verify(KEY, ""), None);
        // A pixel's token opens nothing and a link's token is no open.
        let open = open_token(KEY, "c:1:2");
        assert_eq!(verify_open(KEY, &open), Some("c:1:2".into()));
        assert_eq!(verify_link(KEY, &open), None);
        assert_eq!(verify_open(KEY, &t), None);
        assert!(verify_link(KEY, &t).is_some());
    }

    #[test]
    fn machines_say_so() {
        assert!(scanner_request(true, Some("Mozilla/5.0")));
        assert!(scanner_request(false, None));
        assert!(scanner_request(
            false,
            Some("Mozilla/5.0 (compatible; Barracuda Sentinel)")
        ));
        assert!(scanner_request(false, Some("python-requests/2.31")));
        assert!(!scanner_request(
            false,
            Some("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/131.0 Safari/537.36")
        ));
        assert!(trackable("https://example.com"));
        assert!(trackable("  HTTP://example.com"));
        assert!(!trackable("mailto:a@example.com"));
        assert!(!trackable("#top"));
    }
}
