//! Where mail goes: host, port, transport security and credentials, from flags or one
//! `MAILROOM_SMTP_URL` (`smtp://user:pass@host:587?tls=starttls`, `smtps://…:465`). The password
//! never appears in `Debug` output or in an error message.

use std::time::Duration;

use super::service_url::{Schemes, Security};

#[derive(Clone)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub hello_name: String,
    pub timeout: Duration,
    pub security: Security,
    /// (user, password) for AUTH PLAIN/LOGIN.
    pub credentials: Option<(String, String)>,
    /// Extra CA certificates (PEM) to trust besides the system's, for a private relay.
    pub ca_pem: Option<Vec<u8>>,
    /// Messages one connection carries before it is replaced (None: no limit).
    pub max_messages: Option<u32>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("security", &self.security)
            .field("user", &self.credentials.as_ref().map(|(u, _)| u))
            .field("password", &self.credentials.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Target {
    /// A plain connection without credentials (a local relay or a test sink).
    pub fn plain(host: impl Into<String>, port: u16, hello_name: &str, timeout: Duration) -> Self {
        Target {
            host: host.into(),
            port,
            hello_name: hello_name.into(),
            timeout,
            security: Security::Plain,
            credentials: None,
            ca_pem: None,
            max_messages: None,
        }
    }

    /// Parses `smtp://[user:pass@]host[:port][?tls=starttls|none]` or
    /// `smtps://[user:pass@]host[:port]`. Errors say what is wrong, never echoing the password.
    pub fn from_url(raw: &str, hello_name: &str, timeout: Duration) -> Result<Self, String> {
        let u = Schemes {
            setting: "MAILROOM_SMTP_URL",
            clear: ("smtp", Security::Plain, 25),
            tls: ("smtps", 465),
        }
        .parse(raw)?;
        let credentials = match (u.user, u.password) {
            (user, None) if user.is_empty() => None,
            (user, Some(pass)) => Some((user, pass)),
            (_, None) => {
                return Err(
                    "MAILROOM_SMTP_URL has a user but no password (smtp://user:password@host)"
                        .into(),
                )
            }
        };
        if credentials.is_some() && u.security == Security::Plain && !u.clear_text_asked {
            return Err("MAILROOM_SMTP_URL would send the password in clear text: add ?tls=starttls, use smtps://, or say ?tls=none to allow it".into());
        }
        Ok(Target {
            host: u.host,
            port: u.port,
            hello_name: hello_name.into(),
            timeout,
            security: u.security,
            credentials,
            ca_pem: None,
            max_messages: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(5);

    #[test]
    fn urls_give_security_port_and_decoded_credentials() {
        let t = Target::from_url("smtp://u:pw@relay.example.com?tls=none", "me", T).unwrap();
        assert_eq!(
            t.security,
            Security::Plain,
            "clear text only when asked for"
        );
        let t = Target::from_url("smtp://relay.example.com", "me", T).unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.security),
            ("relay.example.com", 25, Security::Plain)
        );
        assert!(t.credentials.is_none());
        let t = Target::from_url(
            "smtp://ann%40acme.example:p%40ss%3Aw@mx.example:587?tls=starttls",
            "me",
            T,
        )
        .unwrap();
        assert_eq!((t.port, t.security), (587, Security::StartTls));
        assert_eq!(
            t.credentials,
            Some(("ann@acme.example".into(), "p@ss:w".into()))
        );
        let t = Target::from_url("smtps://u:pw@mx.example", "me", T).unwrap();
        assert_eq!((t.port, t.security), (465, Security::Tls));
    }

    #[test]
    fn bad_urls_are_refused_by_name_without_the_password() {
        for (url, says) in [
            ("http://u:hunter2@x", "smtp:// or smtps://"),
            ("smtp://u:hunter2@x?tls=maybe", "tls=maybe"),
            ("smtps://u:hunter2@x?tls=starttls", "tls=starttls"),
            ("smtp://user@x", "no password"),
            ("smtp://u:hunter2@x", "in clear text"),
            ("smtp://", "no host"),
            ("not a url hunter2", "not a valid URL"),
        ] {
            let e = Target::from_url(url, "me", T).unwrap_err();
            assert!(e.contains(says), "{url}: {e}");
            assert!(!e.contains("hunter2"), "{url}: {e}");
        }
    }

    #[test]
    fn debug_output_never_shows_the_password() {
        let t = Target::from_url("smtp://u:hunter2@x:587?tls=starttls", "me", T).unwrap();
        let shown = format!("{t:?}");
        assert!(
            shown.contains("redacted") && !shown.contains("hunter2"),
            "{shown}"
        );
    }
}
