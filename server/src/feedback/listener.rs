//! The bounce mailbox in the binary (`--bounce-listen`, off by default): an SMTP listener that
//! takes mail only for the orgs' bounce domains. RCPT TO must be a genuine VERP address of the
//! domain's org (checked without the database but for the domain's owner), or its `fbl@` or
//! `postmaster@` (feedback loops, and RFC 5321's must-accept); anything else is refused before
//! DATA. At the final dot the report is parsed (`app::bounce::mailed`), its events recorded in
//! one transaction, and the answer is 250 only after that commits: a crash before it leaves the
//! sending MTA to retry, and the retry dedupes on the event ids. Any number of replicas may
//! listen behind one MX. The SMTP syntax is `smtp-proto`'s (sans-IO); the loop is ours.
//!
//! No client can hold the listener: one client address (an IPv6 client by its /64, counted as
//! the HTTP listener counts them) holds at most `per_client` of its `max_connections`
//! sessions, and a connection over either limit is answered `421` at once and closed instead
//! of waiting for a place (a sending MTA retries later, or tries another MX).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use smtp_proto::request::receiver::{DataReceiver, DummyDataReceiver, RequestReceiver};
use smtp_proto::{Error as SmtpError, Request};
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use app::bounce::mailed::MAX_REPORT_BYTES;

use crate::feedback::attribution::{BounceMail, Recipient};
use crate::http::listen::Counts;
use crate::ops::shutdown::Shutdown;

/// [`Config::max_connections`]'s default (`--bounce-max-connections`).
pub const MAX_CONNECTIONS: usize = 256;
/// [`Config::per_client`]'s default (`--bounce-max-connections-per-client`): well below
/// [`MAX_CONNECTIONS`], so that it takes many addresses to fill the listener.
pub const PER_CLIENT: usize = 32;
/// [`Config::idle`]'s default in seconds (`--bounce-idle-seconds`): RFC 5321 §4.5.3.2.7's
/// five minutes a server waits for the next command.
pub const IDLE_SECONDS: u64 = 300;

/// The answer to a connection over its client's cap.
const TOO_MANY_FROM_CLIENT: &str = "421 4.7.0 Too many connections from your address\r\n";
/// The answer to a connection when every place is taken.
const TOO_BUSY: &str = "421 4.3.2 Too busy, try again later\r\n";
/// How long a refused connection may take to accept its `421`.
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(5);

/// How the listener runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// The name in the greeting and EHLO reply.
    pub hostname: String,
    /// Connections served at once; more are answered `421` and closed.
    pub max_connections: usize,
    /// Connections one client address (an IPv6 client: its /64) may hold at once; more are
    /// answered `421` and closed. 0: no cap (every connection from one relay in front).
    pub per_client: usize,
    /// A connection silent this long (for its first command, between commands, within a
    /// message) is closed.
    pub idle: Duration,
    /// The largest message taken.
    pub max_size: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            hostname: "mailroom".into(),
            max_connections: MAX_CONNECTIONS,
            per_client: PER_CLIENT,
            idle: Duration::from_secs(IDLE_SECONDS),
            max_size: MAX_REPORT_BYTES,
        }
    }
}

/// Accepts connections until shutdown; each is served on its own task. A connection over its
/// client's cap, or over the listener's, is answered `421` and closed; it never waits for a
/// place, so the accept loop always runs and no one client's idle connections keep another
/// sender from its greeting.
pub async fn serve(listener: TcpListener, pool: PgPool, cfg: Config, shutdown: Shutdown) {
    let slots = Arc::new(Semaphore::new(
        cfg.max_connections.clamp(1, Semaphore::MAX_PERMITS),
    ));
    let counts = Counts::default();
    let cfg = Arc::new(cfg);
    // Warned once per run of refusals, not once per connection.
    let (mut capped_logged, mut busy_logged) = (false, false);
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.requested() => break,
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors (or a transient error): wait instead of spinning.
                    tracing::warn!(error = %e, "bounce intake cannot accept");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Some(slot) = counts.take(peer.ip(), cfg.per_client) else {
            if !capped_logged {
                tracing::warn!(client = %peer.ip(), cap = cfg.per_client,
                    "a client holds the most bounce intake connections allowed; refusing its new ones");
                capped_logged = true;
            }
            refuse(stream, TOO_MANY_FROM_CLIENT);
            continue;
        };
        capped_logged = false;
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            drop(slot);
            if !busy_logged {
                tracing::warn!(
                    max = cfg.max_connections,
                    "bounce intake serves the most connections allowed; refusing new ones"
                );
                busy_logged = true;
            }
            refuse(stream, TOO_BUSY);
            continue;
        };
        busy_logged = false;
        let (pool, cfg) = (pool.clone(), cfg.clone());
        tokio::spawn(async move {
            if let Err(e) = Session::new(pool, &cfg, peer).run(stream).await {
                tracing::debug!(%peer, error = %e, "bounce intake connection ended");
            }
            drop(permit);
            drop(slot);
        });
    }
}

/// Answers `reply` and closes, on a task of its own: a peer slow to take the line holds neither
/// the accept loop nor a place, and is dropped after [`REFUSAL_TIMEOUT`].
fn refuse(mut stream: TcpStream, reply: &'static str) {
    tokio::spawn(async move {
        let _ = tokio::time::timeout(REFUSAL_TIMEOUT, async {
            if stream.write_all(reply.as_bytes()).await.is_ok() {
                let _ = stream.shutdown().await;
            }
        })
        .await;
    });
}

struct Session<'a> {
    pool: PgPool,
    mail: BounceMail,
    cfg: &'a Config,
    peer: SocketAddr,
    mail_from: Option<String>,
    rcpts: Vec<Recipient>,
}

enum Step {
    Reply(String),
    Data,
    Quit,
}

impl<'a> Session<'a> {
    fn new(pool: PgPool, cfg: &'a Config, peer: SocketAddr) -> Self {
        Session {
            mail: BounceMail::new(pool.clone()),
            pool,
            cfg,
            peer,
            mail_from: None,
            rcpts: Vec::new(),
        }
    }

    async fn read(&self, stream: &mut TcpStream, buf: &mut [u8]) -> std::io::Result<usize> {
        match tokio::time::timeout(self.cfg.idle, stream.read(buf)).await {
            Ok(r) => r,
            Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
        }
    }

    async fn run(mut self, mut stream: TcpStream) -> std::io::Result<()> {
        let greeting = format!("220 {} ESMTP Mailroom bounce intake\r\n", self.cfg.hostname);
        stream.write_all(greeting.as_bytes()).await?;
        let mut requests = RequestReceiver::default();
        let mut chunk = vec![0u8; 16 * 1024];
        // Bytes read but not yet consumed (pipelined commands, or a body's first bytes).
        let mut pending: Vec<u8> = Vec::new();
        loop {
            if pending.is_empty() {
                let n = self.read(&mut stream, &mut chunk).await?;
                if n == 0 {
                    return Ok(());
                }
                pending.extend_from_slice(&chunk[..n]);
            }
            let mut replies = String::new();
            let mut iter = pending.iter();
            let mut data = false;
            let mut quit = false;
            loop {
                let before = iter.as_slice().len();
                match requests.ingest(&mut iter) {
                    Ok(req) => match self.command(req.into_owned()).await {
                        Step::Reply(r) => replies.push_str(&r),
                        Step::Data => {
                            data = true;
                            break;
                        }
                        Step::Quit => {
                            quit = true;
                            break;
                        }
                    },
                    Err(SmtpError::NeedsMoreData { .. }) => break,
                    Err(e) => {
                        replies.push_str(&refusal(&e));
                        // A refusal that consumed nothing would be met again: drop the input.
                        if iter.as_slice().len() == before {
                            iter = [].iter();
                            break;
                        }
                    }
                }
            }
            let rest = iter.as_slice().to_vec();
            pending = rest;
            if quit {
                replies.push_str("221 2.0.0 Bye\r\n");
                stream.write_all(replies.as_bytes()).await?;
                return Ok(());
            }
            if data {
                replies.push_str("354 End data with <CR><LF>.<CR><LF>\r\n");
                stream.write_all(replies.as_bytes()).await?;
                let body = self.body(&mut stream, &mut chunk, &mut pending).await?;
                let reply = match body {
                    Some(raw) => self.deliver(&raw).await,
                    None => format!(
                        "552 5.3.4 Message larger than {} bytes: refused\r\n",
                        self.cfg.max_size
                    ),
                };
                self.mail_from = None;
                self.rcpts.clear();
                stream.write_all(reply.as_bytes()).await?;
                continue;
            }
            if !replies.is_empty() {
                stream.write_all(replies.as_bytes()).await?;
            }
        }
    }

    /// Reads a body up to its final dot; `None` when it was larger than the limit (read to its
    /// end and dropped).
    async fn body(
        &self,
        stream: &mut TcpStream,
        chunk: &mut [u8],
        pending: &mut Vec<u8>,
    ) -> std::io::Result<Option<Vec<u8>>> {
        let mut data = DataReceiver::new();
        let mut body = Vec::new();
        // The body starts a line: a first line of "." ends an empty body, and a leading dot is
        // unstuffed (the receiver otherwise starts as if mid-line).
        data.ingest(&mut b"\r\n".iter(), &mut body);
        body.clear();
        loop {
            let mut iter = pending.iter();
            let done = data.ingest(&mut iter, &mut body);
            *pending = iter.as_slice().to_vec();
            if done {
                return Ok(Some(body));
            }
            if body.len() > self.cfg.max_size {
                let mut dummy = DummyDataReceiver::new_data(&data);
                loop {
                    let n = self.read(stream, chunk).await?;
                    if n == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                    let mut iter = chunk[..n].iter();
                    if dummy.ingest(&mut iter) {
                        *pending = iter.as_slice().to_vec();
                        return Ok(None);
                    }
                }
            }
            let n = self.read(stream, chunk).await?;
            if n == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            pending.extend_from_slice(&chunk[..n]);
        }
    }

    async fn command(&mut self, req: Request<String>) -> Step {
        let reply = match req {
            Request::Ehlo { .. } => {
                self.mail_from = None;
                self.rcpts.clear();
                format!(
                    "250-{}\r\n250-PIPELINING\r\n250-8BITMIME\r\n250-ENHANCEDSTATUSCODES\r\n250 SIZE {}\r\n",
                    self.cfg.hostname, self.cfg.max_size
                )
            }
            Request::Helo { .. } | Request::Lhlo { .. } => format!("250 {}\r\n", self.cfg.hostname),
            Request::Mail { from } => {
                if from.size > self.cfg.max_size {
                    "552 5.3.4 Message too large\r\n".into()
                } else {
                    // DSNs come from the null sender; anything else may report too.
                    self.mail_from = Some(from.address);
                    self.rcpts.clear();
                    "250 2.1.0 Ok\r\n".into()
                }
            }
            Request::Rcpt { to } => match self.mail_from {
                None => "503 5.5.1 MAIL first\r\n".into(),
                Some(_) => self.rcpt(&to.address).await,
            },
            Request::Data => {
                if self.rcpts.is_empty() {
                    "503 5.5.1 No valid recipients\r\n".into()
                } else {
                    return Step::Data;
                }
            }
            Request::Rset => {
                self.mail_from = None;
                self.rcpts.clear();
                "250 2.0.0 Ok\r\n".into()
            }
            Request::Noop { .. } => "250 2.0.0 Ok\r\n".into(),
            Request::Quit => return Step::Quit,
            Request::StartTls => "454 4.7.0 TLS not available\r\n".into(),
            Request::Vrfy { .. } => "252 2.5.2 Cannot verify\r\n".into(),
            _ => "502 5.5.1 Command not implemented\r\n".into(),
        };
        Step::Reply(reply)
    }

    async fn rcpt(&mut self, address: &str) -> String {
        match self.mail.recipient(address).await {
            Ok(Ok(r)) => {
                self.rcpts.push(r);
                "250 2.1.5 Ok\r\n".into()
            }
            Ok(Err(no)) => no.smtp_reply().into(),
            Err(e) => {
                tracing::warn!(error = %e, "bounce intake cannot check a recipient");
                "451 4.3.0 Try again later\r\n".into()
            }
        }
    }

    /// Parses and records the message for every recipient; the reply is 250 only once every
    /// event is committed.
    async fn deliver(&mut self, raw: &[u8]) -> String {
        let mut total = 0;
        let rcpts = std::mem::take(&mut self.rcpts);
        for r in &rcpts {
            let Some(report) = BounceMail::parse(raw, r).await else {
                return "554 5.6.0 Not a message\r\n".into();
            };
            match self.record(r, &report).await {
                Ok(n) => total += n,
                Err(e) => {
                    tracing::warn!(error = %e, peer = %self.peer, "bounce intake cannot record a report");
                    return "451 4.3.0 Try again later\r\n".into();
                }
            }
        }
        format!("250 2.0.0 Ok: {total} new events\r\n")
    }

    async fn record(
        &mut self,
        r: &Recipient,
        report: &app::bounce::mailed::Mailed,
    ) -> sqlx::Result<usize> {
        let mut tx = self.pool.begin().await?;
        let new = self.mail.record(&mut tx, r, report).await?;
        tx.commit().await?;
        Ok(new)
    }
}

fn refusal(e: &SmtpError) -> String {
    match e {
        SmtpError::UnknownCommand => "500 5.5.2 Unknown command\r\n".into(),
        SmtpError::InvalidSenderAddress => "501 5.1.7 Bad sender address\r\n".into(),
        SmtpError::InvalidRecipientAddress => "501 5.1.3 Bad recipient address\r\n".into(),
        SmtpError::ResponseTooLong => "500 5.5.6 Line too long\r\n".into(),
        SmtpError::SyntaxError { syntax } => format!("501 5.5.4 Syntax: {syntax}\r\n"),
        SmtpError::InvalidParameter { param } => format!("501 5.5.4 Bad parameter {param}\r\n"),
        SmtpError::UnsupportedParameter { param } => {
            format!("504 5.5.4 Unsupported parameter {param}\r\n")
        }
        _ => "500 5.5.1 Error\r\n".into(),
    }
}
