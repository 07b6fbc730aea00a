//! SMTP sending, stage by stage (MAIL, RCPT, DATA, then the body), so that every failure is
//! classified exactly: anything before the body means "not delivered" (retry on 4xx, connect
//! errors and timeouts; final on 5xx; a 5.1.x reply is a hard bounce), while a failure after the
//! body started means the message may have arrived: `unknown`, never retried by itself.
//!
//! Sockets are our own with TCP_NODELAY: lettre writes the end-of-data marker as a separate
//! small write, which Nagle's algorithm and delayed ACKs turn into ~40 ms per message.

/// A mail service's URL (`smtp[s]://`, `imap[s]://`), read one way for both.
pub mod service_url;
/// Where mail goes (host, port, security, credentials), from flags or `MAILROOM_SMTP_URL`.
mod target;
/// Implicit TLS and STARTTLS on our own TCP_NODELAY socket.
mod tls;

use std::time::Duration;

use lettre::address::Address;
use lettre::transport::smtp::authentication::{Credentials, Mechanism};
use lettre::transport::smtp::client::{AsyncSmtpConnection, AsyncTokioStream};
use lettre::transport::smtp::commands::{Data, Ehlo, Mail, Rcpt, Rset};
use lettre::transport::smtp::extension::{ClientId, Extension, MailBodyParameter, MailParameter};
use lettre::transport::smtp::response::Severity;

pub use service_url::Security;
pub use target::Target;

/// A refusal before the body: the message was not delivered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// 5xx: do not try again.
    pub permanent: bool,
    /// 5.1.x (bad mailbox): also suppress the address.
    pub hard_bounce: bool,
    /// The server's reply, or the network error.
    pub reply: String,
    /// The server said it (an SMTP reply); false for a network error or a timeout, which count
    /// against the relay's health.
    pub answered: bool,
}

/// How a body ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BodyOutcome {
    /// 2xx after the body: delivered, with the server's reply.
    Accepted(String),
    /// The server answered the body with 4xx/5xx: it did not take the message.
    Refused(Refusal),
    /// No reply (connection lost, timeout): the message may or may not have arrived.
    Unknown(String),
}

impl Refusal {
    /// A step that got no reply in time: the socket is not trusted again.
    fn timed_out() -> Self {
        Refusal {
            permanent: false,
            hard_bounce: false,
            reply: "the server did not answer in time".into(),
            answered: false,
        }
    }

    /// A refusal of anything but the recipient (MAIL, DATA) says nothing about the address.
    fn not_the_recipient(self) -> Self {
        Refusal {
            hard_bounce: false,
            ..self
        }
    }

    fn from_error(e: &lettre::transport::smtp::Error) -> Self {
        let text = e.to_string();
        match e.status() {
            Some(code) => {
                // As the server said it ("554 5.7.1 …"), not lettre's "permanent error (554): …".
                let said = text.split_once("): ").map_or(text.as_str(), |(_, m)| m);
                let reply = format!("{code} {said}");
                let permanent = code.severity == Severity::PermanentNegativeCompletion;
                Refusal {
                    permanent,
                    hard_bounce: permanent && is_bad_mailbox(&reply),
                    reply,
                    answered: true,
                }
            }
            // Connect errors, timeouts, a dropped connection before the body: try again later.
            None => Refusal {
                permanent: false,
                hard_bounce: false,
                reply: text,
                answered: false,
            },
        }
    }
}

/// A reply whose enhanced status code (RFC 3463, right after the basic code) says the
/// recipient's address is bad: 5.1.1 mailbox, 5.1.2 system, 5.1.3 syntax, 5.1.6 moved, 5.1.10
/// null MX. Not 5.1.7/5.1.8 (the *sender's* address) and not a number elsewhere in the text.
fn is_bad_mailbox(reply: &str) -> bool {
    let mut words = reply.split_whitespace();
    let (Some(code), Some(enhanced)) = (words.next(), words.next()) else {
        return false;
    };
    code.parse::<u16>().is_ok_and(|c| (500..600).contains(&c))
        && matches!(
            enhanced.trim_end_matches([',', ';', ':']),
            "5.1.1" | "5.1.2" | "5.1.3" | "5.1.6" | "5.1.10"
        )
}

/// What a message asks of the server beyond plain 7-bit SMTP, and so what MAIL FROM announces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// An address or a header is not ASCII (RFC 6531/6532): `SMTPUTF8`.
    pub smtputf8: bool,
    /// Some byte of the message is not 7-bit (RFC 6152): `BODY=8BITMIME`.
    pub eight_bit: bool,
}

impl Needs {
    /// Display names and subjects are RFC 2047-encoded by the builder, bodies are
    /// quoted-printable or base64; what stays 8-bit is an internationalized address, in the
    /// envelope and in the header fields that carry it.
    pub fn of(from: &Address, to: &Address, message: &[u8]) -> Self {
        let head_end = message
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or(message.len());
        Needs {
            smtputf8: !AsRef::<str>::as_ref(from).is_ascii()
                || !AsRef::<str>::as_ref(to).is_ascii()
                || !message[..head_end].is_ascii(),
            eight_bit: !message.is_ascii(),
        }
    }

    /// MAIL FROM's parameters on a server offering `offered`, or why the message cannot go
    /// through it at all (a permanent refusal: another attempt meets the same server).
    fn parameters(
        self,
        offered: &lettre::transport::smtp::extension::ServerInfo,
    ) -> Result<Vec<MailParameter>, Refusal> {
        let lacking = |what: &str, why: &str| Refusal {
            permanent: true,
            hard_bounce: false,
            reply: format!("the relay does not support {what}, which this message needs ({why})"),
            answered: true,
        };
        let mut parameters = Vec::new();
        if self.smtputf8 {
            if !offered.supports_feature(Extension::SmtpUtfEight) {
                return Err(lacking("SMTPUTF8", "an address or header is not ASCII"));
            }
            parameters.push(MailParameter::SmtpUtfEight);
        }
        if self.eight_bit {
            if !offered.supports_feature(Extension::EightBitMime) {
                return Err(lacking("8BITMIME", "the message is not 7-bit"));
            }
            parameters.push(MailParameter::Body(MailBodyParameter::EightBitMime));
        }
        Ok(parameters)
    }
}

/// One open SMTP connection.
pub struct Connection {
    inner: AsyncSmtpConnection,
    /// The server offers PIPELINING (RFC 2920): MAIL, RCPT and DATA go out in one write.
    pipelining: bool,
    /// Messages this connection has carried, and how many it may (`Target::max_messages`).
    carried: u32,
    max_messages: Option<u32>,
    timeout: Duration,
    last_used: std::time::Instant,
    /// A step failed without an SMTP reply (I/O error, timeout): the socket is not trusted again.
    lost: bool,
}

/// A connection idle longer than this is probed (NOOP) before it carries a message: servers
/// drop idle clients, and a dead socket found at MAIL would cost the message an attempt.
const PROBE_AFTER_IDLE: Duration = Duration::from_secs(2);

impl Connection {
    /// Connects (TCP_NODELAY) and greets the server.
    pub async fn open(target: &Target) -> Result<Self, Refusal> {
        let not_reached = |reply: String| Refusal {
            permanent: false,
            hard_bounce: false,
            reply,
            answered: false,
        };
        let connect = tokio::net::TcpStream::connect((target.host.as_str(), target.port));
        let stream = tokio::time::timeout(target.timeout, connect)
            .await
            .map_err(|_| {
                not_reached(format!(
                    "connect to {}:{} timed out",
                    target.host, target.port
                ))
            })?
            .map_err(|e| {
                not_reached(format!(
                    "cannot connect to {}:{}: {e}",
                    target.host, target.port
                ))
            })?;
        stream
            .set_nodelay(true)
            .map_err(|e| not_reached(e.to_string()))?;
        let hello = ClientId::Domain(target.hello_name.clone());
        // Everything here is about the server or our configuration, never about one message:
        // every failure is "not delivered, try again later".
        let setup = async {
            let socket: Box<dyn AsyncTokioStream> = match target.security {
                Security::Tls => Box::new(tls::connect(stream, target).await?),
                Security::Plain | Security::StartTls => Box::new(stream),
            };
            let mut inner = AsyncSmtpConnection::connect_with_transport(socket, &hello)
                .await
                .map_err(|e| format!("greeting: {e}"))?;
            if target.security == Security::StartTls {
                // lettre refuses when the server does not offer STARTTLS: never send in clear.
                let params = tls::starttls_parameters(target)?;
                inner
                    .starttls(params, &hello)
                    .await
                    .map_err(|e| format!("STARTTLS: {e}"))?;
            }
            // lettre keeps only the extensions it uses; PIPELINING is read from our own EHLO
            // (before AUTH, which a new EHLO may reset), one round trip per connection.
            let ehlo = inner
                .command(Ehlo::new(hello.clone()))
                .await
                .map_err(|e| format!("EHLO: {e}"))?;
            let pipelining = offers_pipelining(ehlo.message());
            if let Some((user, password)) = &target.credentials {
                let credentials = Credentials::new(user.clone(), password.clone());
                inner
                    .auth(&[Mechanism::Plain, Mechanism::Login], &credentials)
                    .await
                    .map_err(|e| format!("authentication as {user}: {e}"))?;
            }
            Ok::<_, String>((inner, pipelining))
        };
        let (inner, pipelining) = tokio::time::timeout(target.timeout, setup)
            .await
            .map_err(|_| not_reached("the server did not greet in time".into()))?
            .map_err(not_reached)?;
        Ok(Connection {
            inner,
            pipelining,
            carried: 0,
            max_messages: target.max_messages,
            timeout: target.timeout,
            last_used: std::time::Instant::now(),
            lost: false,
        })
    }

    /// MAIL (with the parameters `needs` calls for), RCPT and DATA: on `Ok` the server waits
    /// for the body. Any error here means the message was not delivered.
    pub async fn prepare(
        &mut self,
        from: &Address,
        to: &Address,
        needs: Needs,
    ) -> Result<(), Refusal> {
        let parameters = needs.parameters(self.inner.server_info())?;
        let mail = Mail::new(Some(from.clone()), parameters);
        let rcpt = Rcpt::new(to.clone(), vec![]);
        self.carried += 1;
        if self.pipelining {
            return self.prepare_pipelined(mail, rcpt).await;
        }
        self.step(mail).await.map_err(Refusal::not_the_recipient)?;
        let rest = match self.step(rcpt).await {
            Ok(()) => self.step(Data).await.map_err(Refusal::not_the_recipient),
            Err(e) => Err(e),
        };
        if rest.is_err() && !self.lost && !self.inner.has_broken() {
            // Close the open transaction so the connection can carry the next message.
            let _ = self.step(Rset).await;
        }
        rest
    }

    /// MAIL, RCPT and DATA in one write, then their three replies in order (RFC 2920). The
    /// first refusal is the message's; a server that still opens DATA after one is not trusted
    /// with the connection again (it would take whatever came next as a body).
    async fn prepare_pipelined(&mut self, mail: Mail, rcpt: Rcpt) -> Result<(), Refusal> {
        self.last_used = std::time::Instant::now();
        let burst = format!("{mail}{rcpt}{Data}");
        let inner = &mut self.inner;
        let replies = async {
            let mail = inner.command(burst).await;
            let rcpt = inner.read_response().await;
            let data = inner.read_response().await;
            (mail, rcpt, data)
        };
        let Ok((mail, rcpt, data)) = tokio::time::timeout(self.timeout, replies).await else {
            self.lost = true;
            return Err(Refusal::timed_out());
        };
        let network = [&mail, &rcpt, &data]
            .into_iter()
            .find_map(|r| r.as_ref().err().filter(|e| e.status().is_none()));
        if let Some(e) = network {
            self.lost = true;
            return Err(Refusal::from_error(e));
        }
        let opened = data_opened(&data);
        let refusal = match (mail, rcpt, data) {
            (Ok(_), Ok(_), Ok(_)) => return Ok(()),
            (Err(e), _, _) => Refusal::from_error(&e).not_the_recipient(),
            (_, Err(e), _) => Refusal::from_error(&e),
            (_, _, Err(e)) => Refusal::from_error(&e).not_the_recipient(),
        };
        if opened {
            self.lost = true;
        } else if !self.inner.has_broken() {
            let _ = self.step(Rset).await;
        }
        Err(refusal)
    }

    /// Whether this (reused) connection can carry the next message.
    pub async fn ready(&mut self) -> bool {
        if self.lost || self.inner.has_broken() {
            return false;
        }
        if self.max_messages.is_some_and(|max| self.carried >= max) {
            return false;
        }
        if self.last_used.elapsed() < PROBE_AFTER_IDLE {
            return true;
        }
        self.last_used = std::time::Instant::now();
        matches!(
            tokio::time::timeout(self.timeout, self.inner.test_connected()).await,
            Ok(true)
        )
    }

    async fn step<C: std::fmt::Display>(&mut self, command: C) -> Result<(), Refusal> {
        self.last_used = std::time::Instant::now();
        match tokio::time::timeout(self.timeout, self.inner.command(command)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => {
                self.lost |= e.status().is_none();
                Err(Refusal::from_error(&e))
            }
            Err(_) => {
                self.lost = true;
                Err(Refusal::timed_out())
            }
        }
    }

    /// Writes the body and reads the final reply. Call it only after recording that the body
    /// started: from here on a lost reply is `Unknown`.
    pub async fn body(&mut self, message: &[u8]) -> BodyOutcome {
        // One write for the body and its end marker (lettre writes them apart: a second send,
        // and a second wake-up of the server, per message). lettre writes only whole strings.
        let sent = match String::from_utf8(data_stuffed(message)) {
            Ok(stuffed) => tokio::time::timeout(self.timeout, self.inner.command(stuffed)).await,
            Err(_) => tokio::time::timeout(self.timeout, self.inner.message(message)).await,
        };
        match sent {
            Ok(Ok(response)) => BodyOutcome::Accepted(format!(
                "{} {}",
                response.code(),
                response.message().collect::<Vec<_>>().join(" ")
            )),
            Ok(Err(e)) if e.status().is_some() => BodyOutcome::Refused(Refusal::from_error(&e)),
            Ok(Err(e)) => BodyOutcome::Unknown(format!("no reply after the body: {e}")),
            Err(_) => BodyOutcome::Unknown("no reply after the body in time".into()),
        }
    }

    pub async fn quit(mut self) {
        let _ = tokio::time::timeout(self.timeout, self.inner.quit()).await;
    }
}

/// The body as DATA carries it (RFC 5321 4.5.2): a line starting with a dot gets a second
/// one, and the end marker follows (after a line break the message may lack).
fn data_stuffed(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(message.len() + message.len() / 64 + 5);
    let mut line_start = true;
    for &b in message {
        if line_start && b == b'.' {
            out.push(b'.');
        }
        out.push(b);
        line_start = b == b'\n';
    }
    if !message.ends_with(b"\r\n") {
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b".\r\n");
    out
}

/// Whether an EHLO reply's lines offer PIPELINING (a keyword line after the greeting, any case).
fn offers_pipelining<'a>(lines: impl Iterator<Item = &'a str>) -> bool {
    lines.skip(1).any(|l| {
        l.split_whitespace()
            .next()
            .is_some_and(|k| k.eq_ignore_ascii_case("PIPELINING"))
    })
}

/// Whether DATA's reply opened the body (354).
fn data_opened(
    reply: &Result<lettre::transport::smtp::response::Response, lettre::transport::smtp::Error>,
) -> bool {
    matches!(reply, Ok(r) if r.code().severity == Severity::PositiveIntermediate)
}

#[cfg(test)]
mod tests {
    use super::{data_stuffed, is_bad_mailbox, offers_pipelining};

    #[test]
    fn a_body_is_dot_stuffed_and_ends_with_one_marker() {
        assert_eq!(
            data_stuffed(b".top\r\nmid.dle\r\n..two\r\n.\r\nend\r\n"),
            b"..top\r\nmid.dle\r\n...two\r\n..\r\nend\r\n.\r\n"
        );
        assert_eq!(data_stuffed(b"no final break"), b"no final break\r\n.\r\n");
        assert_eq!(data_stuffed(b""), b"\r\n.\r\n");
    }

    #[test]
    fn pipelining_is_a_keyword_of_the_ehlo_reply() {
        assert!(offers_pipelining(
            ["sink.test", "8BITMIME", "PIPELINING"].into_iter()
        ));
        assert!(offers_pipelining(["mx", "pipelining"].into_iter()));
        assert!(!offers_pipelining(
            ["mx", "8BITMIME", "X-NOPIPELINING"].into_iter()
        ));
        assert!(!offers_pipelining(
            ["PIPELINING.example greets you"].into_iter()
        ));
    }

    #[test]
    fn hard_bounces_are_bad_recipient_enhanced_codes_in_place() {
        assert!(is_bad_mailbox(
            "550 5.1.1 <x@y.org>: Recipient address rejected"
        ));
        assert!(is_bad_mailbox("550 5.1.10 RESOLVER.ADR.RecipientNotFound"));
        assert!(is_bad_mailbox("553 5.1.3 bad address syntax"));
        assert!(!is_bad_mailbox("554 5.7.1 spam detected"));
        assert!(!is_bad_mailbox("552 message too large 5.3.4"));
        assert!(!is_bad_mailbox("550 mailbox unavailable"));
        assert!(!is_bad_mailbox("553 5.1.8 sender domain does not exist"));
        assert!(!is_bad_mailbox("550 5.7.1 blocked [5.1.2.3]"));
        assert!(!is_bad_mailbox("450 5.1.1 try later"), "not permanent");
    }
}
