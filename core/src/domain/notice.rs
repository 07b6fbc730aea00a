//! Account notices: mail Mailroom sends an org's owners when it changed something of theirs on
//! its own (turned off an event webhook endpoint). Plain text, written once when the change
//! commits; the link to the page concerned is added when sent (the public URL is the process's).

use chrono::{DateTime, Utc};

/// One notice's fixed text and the dashboard page it points to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    pub subject: String,
    pub body: String,
    /// A dashboard path, `/…`.
    pub path: &'static str,
}

impl Notice {
    /// Mailroom turned off an event webhook endpoint whose every attempt failed since
    /// `failing_since`. The URL is named without its query, which may hold a token.
    pub fn endpoint_turned_off(url: &str, failing_since: DateTime<Utc>) -> Self {
        let url = match url.split_once('?') {
            Some((base, _)) => format!("{base}?…"),
            None => url.to_owned(),
        };
        Notice {
            subject: "Mailroom turned off an event webhook endpoint".into(),
            body: format!(
                "Every attempt to deliver events to\n\n    {url}\n\n\
                 has failed since {} UTC, so Mailroom turned the endpoint off.\n\n\
                 Events that were waiting for it are kept and are sent when you turn it\n\
                 back on; events that happen while it is off are not recorded for it.\n\
                 The endpoint's page shows its recent attempts and what the receiver\n\
                 answered:\n",
                failing_since.format("%Y-%m-%d %H:%M")
            ),
            path: "/settings/webhooks",
        }
    }
}

/// A notice's message as sent: its text, then the address of its page.
pub fn sent_text(body: &str, path: &str, public_url: &str) -> String {
    format!("{body}\n{}{path}\n", public_url.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turned_off_endpoint_is_named_with_when_and_where_to_look() {
        let at = DateTime::parse_from_rfc3339("2026-12-04T09:30:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let n = Notice::endpoint_turned_off("https://hooks.example.com/in", at);
        let text = sent_text(&n.body, n.path, "https://mail.example.org/");
        assert!(text.contains("https://hooks.example.com/in"), "{text}");
        assert!(text.contains("2026-12-04 09:30 UTC"), "{text}");
        assert!(
            text.ends_with("\nhttps://mail.example.org/settings/webhooks\n"),
            "{text}"
        );
        let secret = Notice::endpoint_turned_off("https://h.example/in?token=s3cret", at);
        assert!(!secret.body.contains("s3cret"), "{}", secret.body);
        assert!(secret.body.contains("https://h.example/in?…"));
    }
}
