//! A mail service's URL, read the same way for the relay (`smtp[s]://`) and the bounce mailbox
//! (`imap[s]://`): the scheme gives the security and the default port, `?tls=` may change the
//! clear-text scheme's security, and the user, password and path are percent-decoded. Errors
//! name the setting and never echo the password.

/// How a connection to a mail service is secured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Security {
    /// No TLS (a local relay, a test sink).
    Plain,
    /// Plain connect, then STARTTLS before anything else; refused if the server does not offer it.
    StartTls,
    /// TLS from the first byte (SMTPS on 465, IMAPS on 993).
    Tls,
}

/// One service's two schemes: the clear-text one (with the security it means when `?tls=` is
/// left out) and the TLS one, each with its default port.
pub struct Schemes {
    /// The setting's name, as errors show it (`MAILROOM_SMTP_URL`).
    pub setting: &'static str,
    pub clear: (&'static str, Security, u16),
    pub tls: (&'static str, u16),
}

/// A URL as read, before each service's rules for credentials.
pub struct ServiceUrl {
    pub host: String,
    pub port: u16,
    pub security: Security,
    /// `?tls=none` was said: clear text on purpose.
    pub clear_text_asked: bool,
    /// Empty when the URL names none.
    pub user: String,
    pub password: Option<String>,
    /// The path without its leading `/`.
    pub path: String,
}

impl Schemes {
    pub fn parse(&self, raw: &str) -> Result<ServiceUrl, String> {
        let what = self.setting;
        let (clear, clear_security, clear_port) = self.clear;
        let (tls, tls_port) = self.tls;
        let url =
            url::Url::parse(raw.trim()).map_err(|e| format!("{what} is not a valid URL ({e})"))?;
        let (scheme_security, default_port) = match url.scheme() {
            s if s == clear => (clear_security, clear_port),
            s if s == tls => (Security::Tls, tls_port),
            other => {
                return Err(format!(
                    "{what} must start with {clear}:// or {tls}://, not {other}://"
                ))
            }
        };
        let tls_param = url.query_pairs().find(|(k, _)| k == "tls");
        let clear_text_asked = tls_param.as_ref().is_some_and(|(_, v)| v == "none");
        let security = match tls_param {
            None => scheme_security,
            Some((_, v)) => match (scheme_security, v.as_ref()) {
                (Security::Tls, "tls") => Security::Tls,
                (Security::Plain | Security::StartTls, "starttls") => Security::StartTls,
                (Security::Plain | Security::StartTls, "none") => Security::Plain,
                _ => {
                    let default = if clear_security == Security::StartTls {
                        ", the default,"
                    } else {
                        ""
                    };
                    return Err(format!(
                        "{what}: tls={v} is not understood ({clear}:// takes tls=starttls{default} or tls=none; {tls}:// is always TLS)"
                    ));
                }
            },
        };
        // An IPv6 literal comes bracketed; a socket address wants it bare.
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or(format!("{what} names no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let decode = |s: &str, part: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(|c| c.into_owned())
                .map_err(|_| format!("{what}: the {part} is not valid UTF-8 once decoded"))
        };
        Ok(ServiceUrl {
            host,
            port: url.port().unwrap_or(default_port),
            security,
            clear_text_asked,
            user: decode(url.username(), "user")?,
            password: url.password().map(|p| decode(p, "password")).transpose()?,
            path: decode(url.path().trim_start_matches('/'), "path")?,
        })
    }
}
