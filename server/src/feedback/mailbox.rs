//! The bounce mailbox over IMAP (`--bounce-imap`, off by default), for operators who cannot take
//! inbound SMTP: DSNs and ARF complaints delivered to a mailbox are read, attributed and
//! recorded exactly like the SMTP listener's (`crate::feedback::attribution`).
//!
//! One replica polls at a time (a lease, so replicas do not all log in), and correctness does
//! not rest on it: each message is recorded in one transaction together with a compare-and-set
//! of the mailbox's cursor (UIDVALIDITY, last UID), and only after that commits is the message
//! flagged `\Deleted` (and expunged at the end of the pass). A crash between the commit and the
//! flag leaves the message unseen behind the cursor, and the next pass reads it again; one
//! before the expunge leaves it deleted behind the cursor, and the next pass expunges it. A lost
//! cursor or a new UIDVALIDITY re-reads everything. Every re-read dedupes on the events' ids. A message that is not for one of our bounce addresses,
//! or too large, is flagged `\Seen` and left where it is.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use async_imap::{Client, Session};
use futures::TryStreamExt;
use sqlx::PgPool;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use app::bounce::mailed::{self, MAX_REPORT_BYTES};
use app::db::imap_cursor::{self, Cursor};

use crate::feedback::attribution::BounceMail;
use crate::ops::shutdown::Shutdown;
use crate::smtp::service_url::Schemes;

/// The lease that makes one replica the poller.
pub const LEASE: &str = "bounce-imap";

pub use crate::smtp::Security;

/// The mailbox to read, from `imap[s]://user:password@host[:port]/<folder>[?tls=starttls|none]`.
#[derive(Clone)]
pub struct Mailbox {
    pub host: String,
    pub port: u16,
    pub security: Security,
    pub user: String,
    pub password: String,
    /// The folder read (`INBOX` when the URL names none).
    pub folder: String,
    /// Extra CA certificate (PEM) to trust besides the system's.
    pub ca_pem: Option<Vec<u8>>,
}

impl fmt::Debug for Mailbox {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mailbox")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("security", &self.security)
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .field("folder", &self.folder)
            .finish()
    }
}

impl Mailbox {
    /// Parses the URL. Errors say what is wrong and never echo the password.
    pub fn from_url(raw: &str) -> Result<Self, String> {
        let u = Schemes {
            setting: "MAILROOM_BOUNCE_IMAP",
            clear: ("imap", Security::StartTls, 143),
            tls: ("imaps", 993),
        }
        .parse(raw)?;
        let password = match u.password {
            Some(p) if !u.user.is_empty() => p,
            _ => {
                return Err(
                    "MAILROOM_BOUNCE_IMAP needs a user and a password (imaps://user:password@host/INBOX)"
                        .into(),
                )
            }
        };
        Ok(Mailbox {
            host: u.host,
            port: u.port,
            security: u.security,
            user: u.user,
            password,
            folder: if u.path.is_empty() {
                "INBOX".into()
            } else {
                u.path
            },
            ca_pem: None,
        })
    }

    /// The cursor's key: the mailbox without its password.
    pub fn key(&self) -> String {
        format!(
            "imap://{}@{}:{}/{}",
            self.user, self.host, self.port, self.folder
        )
    }
}

/// How the poller runs.
#[derive(Clone, Debug)]
pub struct Config {
    pub mailbox: Mailbox,
    /// Between passes.
    pub every: Duration,
    /// Any one IMAP step (connect, a command, a batch of bodies) may take this long.
    pub timeout: Duration,
}

/// What one pass did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pass {
    /// Messages past the cursor that this pass took a decision on.
    pub read: usize,
    /// Of those, reports for one of our bounce addresses: recorded, then deleted.
    pub reports: usize,
    /// Events new to the ledger.
    pub new_events: usize,
    /// Messages left in the mailbox (flagged seen): not for us, too large, or no message.
    pub left: usize,
    /// Another poller moved the cursor under this one, which stopped.
    pub overtaken: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum PollError {
    #[error("cannot reach the IMAP server {0}: {1}")]
    Connect(String, io::Error),
    #[error("TLS with the IMAP server failed: {0}")]
    Tls(String),
    #[error("the IMAP server refused the login of {0}: {1}")]
    Login(String, String),
    #[error("IMAP: {0}")]
    Imap(#[from] async_imap::error::Error),
    #[error("the IMAP server did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the mailbox {0} has no UIDVALIDITY (the server keeps no UIDs)")]
    NoUidValidity(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Polls while this process holds the poller's lease, until shutdown.
pub async fn run(pool: PgPool, cfg: Config, holder: String, shutdown: Shutdown) {
    // Long enough for a slow pass; a pass that outlives it is still safe (the cursor's CAS).
    let lease_seconds = (cfg.every.as_secs_f64() * 3.0).max(60.0);
    let mut mail = BounceMail::new(pool.clone());
    let mut held = None;
    tracing::info!(mailbox = %cfg.mailbox.key(), every = ?cfg.every, "bounce mailbox poller started");
    loop {
        match app::db::leader::acquire(&pool, LEASE, &holder, lease_seconds).await {
            Ok(Some(lease)) => {
                held = Some(lease);
                match poll_once(&pool, &cfg, &mut mail, &shutdown).await {
                    Ok(p) if p.read > 0 => tracing::info!(
                        read = p.read,
                        reports = p.reports,
                        new_events = p.new_events,
                        left = p.left,
                        "bounce mailbox read"
                    ),
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot read the bounce mailbox; will retry")
                    }
                }
            }
            Ok(None) => held = None,
            Err(e) => tracing::warn!(error = %e, "cannot take the bounce mailbox lease"),
        }
        tokio::select! {
            _ = shutdown.requested() => break,
            _ = tokio::time::sleep(cfg.every) => {}
        }
    }
    // Another replica takes over at once instead of after the lease runs out.
    if let Some(lease) = held {
        if let Err(e) = app::db::leader::release(&pool, &lease).await {
            tracing::warn!(error = %e, "could not give up the bounce mailbox lease; it will expire");
        }
    }
}

/// Bodies fetched per IMAP command (and at most this many bytes of them, but one message).
const FETCH_MESSAGES: usize = 50;
const FETCH_BYTES: u64 = 16 * 1024 * 1024;

/// One pass: everything past the cursor, in UID order. A shutdown request ends it between two
/// messages.
pub async fn poll_once(
    pool: &PgPool,
    cfg: &Config,
    mail: &mut BounceMail,
    shutdown: &Shutdown,
) -> Result<Pass, PollError> {
    let t = cfg.timeout;
    let mut session = within(t, login(&cfg.mailbox, t)).await??;
    let result = read_mailbox(pool, cfg, mail, &mut session, shutdown).await;
    // A clean goodbye; the pass's outcome does not depend on it.
    let _ = tokio::time::timeout(t, session.logout()).await;
    result
}

async fn read_mailbox(
    pool: &PgPool,
    cfg: &Config,
    mail: &mut BounceMail,
    session: &mut Session<Conn>,
    shutdown: &Shutdown,
) -> Result<Pass, PollError> {
    let t = cfg.timeout;
    let key = cfg.mailbox.key();
    let selected = within(t, session.select(&cfg.mailbox.folder)).await??;
    let validity = i64::from(
        selected
            .uid_validity
            .ok_or_else(|| PollError::NoUidValidity(cfg.mailbox.folder.clone()))?,
    );
    let prev = imap_cursor::get(pool, &key).await?;
    let from = match prev {
        Some(c) if c.uid_validity == validity => c.last_uid,
        Some(c) => {
            tracing::warn!(mailbox = %key, old = c.uid_validity, new = validity, "the mailbox's UIDVALIDITY changed: reading it all again (recorded reports dedupe)");
            0
        }
        None => 0,
    };
    let mut reader = Reader {
        pool,
        mail,
        session,
        t,
        key,
        validity,
        prev,
        pass: Pass::default(),
        deleted: Vec::new(),
    };
    if selected.exists > 0 {
        // Recorded, but never flagged (a crash came between the commit and the flag; every
        // flag we set includes \Seen): read again, which dedupes, and flag them now. Flagged
        // deleted but not expunged (a crash before the pass's end): expunged with this pass's.
        if from > 0 {
            let flagged = within(
                t,
                reader.session.uid_search(format!("UID 1:{from} DELETED")),
            )
            .await??;
            reader
                .deleted
                .extend(flagged.into_iter().filter(|u| i64::from(*u) <= from));
            let mut behind: Vec<u32> =
                within(t, reader.session.uid_search(format!("UID 1:{from} UNSEEN")))
                    .await??
                    .into_iter()
                    .filter(|u| i64::from(*u) <= from)
                    .collect();
            behind.sort_unstable();
            let sizes = reader.sizes(&uid_set(&behind), 0).await?;
            reader.read(&sizes, false, shutdown).await?;
        }
        if !reader.pass.overtaken && !shutdown.is_requested() {
            // "n:*" always names the highest UID, even below n: keep only what is past the
            // cursor.
            let sizes = reader.sizes(&format!("{}:*", from + 1), from).await?;
            reader.read(&sizes, true, shutdown).await?;
        }
    }
    let Reader {
        session,
        pass,
        deleted,
        ..
    } = reader;
    finish(session, t, deleted, pass).await
}

/// One pass over one selected mailbox.
struct Reader<'a> {
    pool: &'a PgPool,
    mail: &'a mut BounceMail,
    session: &'a mut Session<Conn>,
    t: Duration,
    key: String,
    validity: i64,
    /// The cursor as this pass last read or wrote it.
    prev: Option<Cursor>,
    pass: Pass,
    deleted: Vec<u32>,
}

impl Reader<'_> {
    /// (UID, size) of the messages in `set` with a UID above `above`, in UID order.
    async fn sizes(&mut self, set: &str, above: i64) -> Result<Vec<(u32, u64)>, PollError> {
        if set.is_empty() {
            return Ok(Vec::new());
        }
        let mut sizes: Vec<(u32, u64)> = within(
            self.t,
            self.session
                .uid_fetch(set, "(UID RFC822.SIZE)")
                .await?
                .try_collect::<Vec<_>>(),
        )
        .await??
        .into_iter()
        .filter_map(|f| Some((f.uid?, u64::from(f.size.unwrap_or(0)))))
        .filter(|(uid, _)| i64::from(*uid) > above)
        .collect();
        sizes.sort_unstable();
        Ok(sizes)
    }

    /// Reads the messages in batches; each is recorded in its own transaction (with the
    /// cursor's compare-and-set when `advance`) and flagged after it commits.
    async fn read(
        &mut self,
        sizes: &[(u32, u64)],
        advance: bool,
        shutdown: &Shutdown,
    ) -> Result<(), PollError> {
        let mut at = 0;
        while at < sizes.len() {
            // The next batch: up to FETCH_MESSAGES bodies and FETCH_BYTES, but at least one; a
            // message over the size limit is not fetched at all.
            let mut end = at;
            let mut bytes = 0;
            while end < sizes.len()
                && end - at < FETCH_MESSAGES
                && (end == at || bytes + sizes[end].1 <= FETCH_BYTES)
            {
                bytes += sizes[end].1;
                end += 1;
            }
            let wanted: Vec<u32> = sizes[at..end]
                .iter()
                .filter(|(_, size)| *size <= MAX_REPORT_BYTES as u64)
                .map(|(uid, _)| *uid)
                .collect();
            let mut bodies: Vec<(u32, Vec<u8>)> = if wanted.is_empty() {
                Vec::new()
            } else {
                within(
                    self.t,
                    self.session
                        .uid_fetch(uid_set(&wanted), "(UID BODY.PEEK[])")
                        .await?
                        .try_collect::<Vec<_>>(),
                )
                .await??
                .into_iter()
                .filter_map(|f| Some((f.uid?, f.body().unwrap_or_default().to_vec())))
                .collect()
            };
            bodies.sort_unstable_by_key(|(uid, _)| *uid);
            for &(uid, _) in &sizes[at..end] {
                if shutdown.is_requested() {
                    return Ok(());
                }
                let raw = bodies
                    .binary_search_by_key(&uid, |(u, _)| *u)
                    .ok()
                    .map(|i| std::mem::take(&mut bodies[i].1));
                if !self.one(uid, raw.as_deref(), advance).await? {
                    self.pass.overtaken = true;
                    tracing::info!(mailbox = %self.key, "another poller is reading the bounce mailbox: stopping this pass");
                    return Ok(());
                }
            }
            at = end;
        }
        Ok(())
    }

    /// Records one message, then flags it. `false`: another poller moved the cursor first, and
    /// nothing was written.
    async fn one(
        &mut self,
        uid: u32,
        raw: Option<&[u8]>,
        advance: bool,
    ) -> Result<bool, PollError> {
        let mut tx = self.pool.begin().await?;
        let outcome = match raw {
            Some(raw) => take(self.mail, &mut tx, raw).await?,
            None => Taken::Left,
        };
        if advance {
            let next = Cursor {
                uid_validity: self.validity,
                last_uid: i64::from(uid),
            };
            if !imap_cursor::advance(&mut tx, &self.key, self.prev, next).await? {
                tx.rollback().await?;
                return Ok(false);
            }
            self.prev = Some(next);
        }
        tx.commit().await?;
        self.pass.read += 1;
        // Only now, after the commit, is the message marked: a crash before this line leaves
        // it unseen behind the cursor, and the next pass reads it again (and dedupes).
        let flags = match outcome {
            Taken::Report(new) => {
                self.pass.reports += 1;
                self.pass.new_events += new;
                self.deleted.push(uid);
                "+FLAGS.SILENT (\\Seen \\Deleted)"
            }
            Taken::Left => {
                self.pass.left += 1;
                "+FLAGS.SILENT (\\Seen)"
            }
        };
        within(
            self.t,
            self.session
                .uid_store(uid.to_string(), flags)
                .await?
                .try_collect::<Vec<_>>(),
        )
        .await??;
        Ok(true)
    }
}

/// Removes the messages this pass deleted (only those, where the server can say so).
async fn finish(
    session: &mut Session<Conn>,
    t: Duration,
    deleted: Vec<u32>,
    pass: Pass,
) -> Result<Pass, PollError> {
    if deleted.is_empty() {
        return Ok(pass);
    }
    let uidplus = within(t, session.capabilities()).await??.has_str("UIDPLUS");
    if uidplus {
        within(
            t,
            session
                .uid_expunge(uid_set(&deleted))
                .await?
                .try_collect::<Vec<_>>(),
        )
        .await??;
    } else {
        within(t, session.expunge().await?.try_collect::<Vec<_>>()).await??;
    }
    Ok(pass)
}

enum Taken {
    /// A report for one of our bounce addresses, recorded: how many events were new.
    Report(usize),
    /// Not ours, or not a message: left in the mailbox.
    Left,
}

/// Records one message if it is for one of our bounce addresses (the first the headers name
/// that verifies).
async fn take(
    mail: &mut BounceMail,
    tx: &mut sqlx::PgConnection,
    raw: &[u8],
) -> sqlx::Result<Taken> {
    for address in mailed::delivered_to(raw) {
        let Ok(r) = mail.recipient(&address).await? else {
            continue;
        };
        let Some(report) = BounceMail::parse(raw, &r).await else {
            return Ok(Taken::Left);
        };
        return Ok(Taken::Report(mail.record(tx, &r, &report).await?));
    }
    Ok(Taken::Left)
}

/// `1,2,5` for a set of UIDs (sorted runs would be shorter; batches are small).
fn uid_set(uids: &[u32]) -> String {
    uids.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

async fn within<F: std::future::Future>(t: Duration, f: F) -> Result<F::Output, PollError> {
    tokio::time::timeout(t, f)
        .await
        .map_err(|_| PollError::Timeout(t))
}

/// Connects (TLS as configured), reads the greeting and logs in.
async fn login(m: &Mailbox, t: Duration) -> Result<Session<Conn>, PollError> {
    let at = format!("{}:{}", m.host, m.port);
    let tcp = TcpStream::connect((m.host.as_str(), m.port))
        .await
        .map_err(|e| PollError::Connect(at.clone(), e))?;
    let conn = match m.security {
        Security::Tls => Conn::Tls(Box::new(tls(m, tcp).await?)),
        Security::Plain | Security::StartTls => Conn::Plain(tcp),
    };
    let mut client = Client::new(conn);
    let greeting = within(t, client.read_response()).await?;
    greeting
        .map_err(|e| PollError::Connect(at.clone(), e))?
        .ok_or_else(|| PollError::Connect(at.clone(), io::ErrorKind::UnexpectedEof.into()))?;
    if m.security == Security::StartTls {
        client.run_command_and_check_ok("STARTTLS", None).await?;
        let Conn::Plain(tcp) = client.into_inner() else {
            return Err(PollError::Tls("STARTTLS on a TLS connection".into()));
        };
        // No greeting follows STARTTLS.
        client = Client::new(Conn::Tls(Box::new(tls(m, tcp).await?)));
    }
    client
        .login(&m.user, &m.password)
        .await
        .map_err(|(e, _)| PollError::Login(m.user.clone(), e.to_string()))
}

async fn tls(
    m: &Mailbox,
    tcp: TcpStream,
) -> Result<tokio_native_tls::TlsStream<TcpStream>, PollError> {
    let mut builder = native_tls::TlsConnector::builder();
    if let Some(pem) = &m.ca_pem {
        let ca = native_tls::Certificate::from_pem(pem).map_err(|e| {
            PollError::Tls(format!("the IMAP CA file is not a PEM certificate: {e}"))
        })?;
        builder.add_root_certificate(ca);
    }
    let connector = builder.build().map_err(|e| PollError::Tls(e.to_string()))?;
    tokio_native_tls::TlsConnector::from(connector)
        .connect(&m.host, tcp)
        .await
        .map_err(|e| PollError::Tls(format!("handshake with {} failed: {e}", m.host)))
}

/// The IMAP connection: plain TCP, or TLS over it.
#[derive(Debug)]
pub enum Conn {
    Plain(TcpStream),
    Tls(Box<tokio_native_tls::TlsStream<TcpStream>>),
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_the_mailbox_and_never_echo_the_password() {
        let m = Mailbox::from_url("imaps://bounces%40acme:p%40ss@imap.acme.test/Bounces").unwrap();
        assert_eq!(
            (m.host.as_str(), m.port, m.security),
            ("imap.acme.test", 993, Security::Tls)
        );
        assert_eq!(
            (m.user.as_str(), m.password.as_str()),
            ("bounces@acme", "p@ss")
        );
        assert_eq!(m.folder, "Bounces");
        assert_eq!(m.key(), "imap://bounces@acme@imap.acme.test:993/Bounces");
        assert!(!format!("{m:?}").contains("p@ss"));

        let m = Mailbox::from_url("imap://u:pw@127.0.0.1:1143?tls=none").unwrap();
        assert_eq!((m.port, m.security), (1143, Security::Plain));
        assert_eq!(m.folder, "INBOX");
        let m = Mailbox::from_url("imap://u:pw@mail.test").unwrap();
        assert_eq!((m.port, m.security), (143, Security::StartTls));

        for (bad, says) in [
            ("pop3://u:pw@h", "imap:// or imaps://"),
            ("imap://h/INBOX", "user and a password"),
            ("imap://u@h/INBOX", "user and a password"),
            ("imaps://u:pw@h?tls=none", "tls=none is not understood"),
            ("not a url", "not a valid URL"),
        ] {
            let e = Mailbox::from_url(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(!e.contains("pw"), "{bad}: {e}");
        }
    }

    #[test]
    fn uid_sets_list_every_uid() {
        assert_eq!(uid_set(&[3, 4, 9]), "3,4,9");
    }
}
