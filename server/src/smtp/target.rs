//! Where mail goes: host, port, transport security and credentials, from flags or one
//! `MAILROOM_SMTP_URL` (`smtp://user:pass@host:587?tls=starttls`, `smtps://…:465`). The password
//! never appears in `Debug` output or in an error message.

use std::time::Duration;

/// How the connection is secured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Security {
    /// No TLS (a local relay, a test sink).
    Plain,
    /// Plain connect, then STARTTLS before anything else; refused if the server does not offer it.
    StartTls,
    /// TLS from the first byte (SMTPS, usually port 465).
    Tls,
}

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
        let url = url::Url::parse(raw.trim())
            .map_err(|e| format!("MAILROOM_SMTP_URL is not a valid URL ({e})"))?;
        let (security, default_port) = match url.scheme() {
            "smtp" => (Security::Plain, 25),
            "smtps" => (Security::Tls, 465),
            other => {
                return Err(format!(
                    "MAILROOM_SMTP_URL must start with smtp:// or smtps://, not {other}://"
                ))
            }
        };
        let tls_param = url.query_pairs().find(|(k, _)| k == "tls");
        let clear_text_allowed = tls_param.as_ref().is_some_and(|(_, v)| v == "none");
        let security = match tls_param {
            None => security,
            Some((_, v)) => match (security, v.as_ref()) {
                (Security::Plain, "starttls") => Security::StartTls,
                (Security::Plain, "none") => Security::Plain,
                (Security::Tls, "tls") => Security::Tls,
                _ => {
                    return Err(format!(
                        "MAILROOM_SMTP_URL: tls={v} is not understood (smtp:// takes tls=starttls or tls=none; smtps:// is always TLS)"
                    ))
                }
            },
        };
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or("MAILROOM_SMTP_URL names no host")?
            .to_string();
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(|c| c.into_owned())
                .map_err(|_| {
                    "MAILROOM_SMTP_URL: the user or password is not valid UTF-8 once decoded"
                        .to_string()
                })
        };
        let credentials = match (url.username(), url.password()) {
            ("", None) => None,
            (user, Some(pass)) => Some((decode(user)?, decode(pass)?)),
            (_, None) => {
                return Err(
                    "MAILROOM_SMTP_URL has a user but no password (smtp://user:password@host)"
                        .into(),
                )
            }
        };
        if credentials.is_some() && security == Security::Plain && !clear_text_allowed {
            return Err("MAILROOM_SMTP_URL would send the password in clear text: add ?tls=starttls, use smtps://, or say ?tls=none to allow it".into());
        }
        Ok(Target {
            host,
            port: url.port().unwrap_or(default_port),
            hello_name: hello_name.into(),
            timeout,
            security,
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
