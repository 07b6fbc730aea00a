//! An SMTP server on an ephemeral port that accepts mail and records it, with refusals and
//! faults scripted by the recipient's local part (trailing digits ignored, so `bounce42@`
//! behaves as `bounce@`):
//!
//! | local part           | behaviour                                              |
//! |----------------------|--------------------------------------------------------|
//! | `bounce`, `nouser`   | 550 5.1.1 at RCPT (a hard bounce)                       |
//! | `later`, `rcpt4xx`   | 451 4.3.0 at RCPT                                       |
//! | `perm`               | 554 5.7.1 at RCPT (relay access denied)                 |
//! | `dropearly`          | connection closed at RCPT, no reply                     |
//! | `spam`               | 554 5.7.1 after the body                                |
//! | `data4xx`            | 452 4.3.1 after the body                                |
//! | `droplate`           | connection closed after the body, no reply              |
//! | `hang`               | body taken, never answered                              |
//!
//! Everyone else is accepted. A refused message leaves the connection usable, as on a real
//! server. Like Postfix with `strict_smtputf8 = yes`, a non-ASCII address is refused (553 5.6.7)
//! unless MAIL FROM declared `SMTPUTF8`, which the sink offers unless told otherwise. The sink runs on its own thread and runtime, so sync and async tests start it alike.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use base64::Engine;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};

/// One accepted message.
#[derive(Clone, Debug)]
pub struct Received {
    pub from: String,
    pub to: Vec<String>,
    /// The parameters of its MAIL FROM command (`SMTPUTF8 BODY=8BITMIME`), as sent.
    pub mail_parameters: String,
    /// The message as it arrived, dot-stuffing undone, line ends kept.
    pub data: String,
    /// When the body was accepted.
    pub at: Instant,
}

impl Received {
    /// The Message-ID header line (each message must have one).
    pub fn message_id(&self) -> String {
        self.data
            .lines()
            .find(|l| l.starts_with("Message-ID:"))
            .expect("a Message-ID header")
            .to_owned()
    }
}

/// How much of each accepted message is kept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Record {
    /// Every message whole (the tests).
    #[default]
    Messages,
    /// Only how often each Message-ID arrived (a soak of hundreds of thousands).
    IdsOnly,
}

/// Transport security the sink offers.
#[derive(Clone, Default)]
pub enum Tls {
    #[default]
    None,
    /// Plain connect, `STARTTLS` advertised and honoured.
    StartTls(tokio_native_tls::TlsAcceptor),
    /// TLS from the first byte (port 465 style).
    Implicit(tokio_native_tls::TlsAcceptor),
}

impl Tls {
    /// An acceptor for a PEM certificate and PKCS#8 key.
    pub fn acceptor(cert: &Path, key: &Path) -> tokio_native_tls::TlsAcceptor {
        let identity = native_tls::Identity::from_pkcs8(
            &std::fs::read(cert).expect("the certificate"),
            &std::fs::read(key).expect("the key"),
        )
        .expect("a PEM certificate and PKCS#8 key");
        native_tls::TlsAcceptor::new(identity)
            .expect("a TLS acceptor")
            .into()
    }
}

#[derive(Clone, Default)]
pub struct SinkOptions {
    pub record: Record,
    pub tls: Tls,
    /// When set, `AUTH PLAIN` with this (user, password) is required before `MAIL`.
    pub auth: Option<(String, String)>,
    /// `SMTPUTF8` is not offered (nor accepted), as on a relay that lacks it.
    pub without_smtputf8: bool,
    /// While set, every body is read and the connection closed without a reply (a relay that
    /// misbehaves for everyone); flip it during a test.
    pub drop_after_body: Arc<std::sync::atomic::AtomicBool>,
    /// `PIPELINING` is not offered, as on an old relay.
    pub without_pipelining: bool,
    /// Replies wait this long, once per burst: a client's pipelined commands are answered
    /// together, as over a network with this round-trip time (a distant relay).
    pub reply_delay: Option<std::time::Duration>,
}

#[derive(Default)]
struct Tally {
    messages: Mutex<Vec<Received>>,
    ids: Mutex<HashMap<String, u32>>,
    accepted: AtomicU64,
    without_id: AtomicU64,
    refused_rcpt: AtomicU64,
    connections: AtomicU64,
    pipelined: AtomicU64,
}

#[derive(Clone)]
pub struct SmtpSink {
    pub addr: SocketAddr,
    tally: Arc<Tally>,
}

impl SmtpSink {
    /// Plain SMTP, every message recorded.
    pub fn start() -> SmtpSink {
        SmtpSink::start_with(SinkOptions::default())
    }

    pub fn start_with(options: SinkOptions) -> SmtpSink {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let addr = listener.local_addr().expect("a bound address");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking socket");
        let tally = Arc::new(Tally::default());
        let t = tally.clone();
        let options = Arc::new(options);
        std::thread::Builder::new()
            .name("smtp-sink".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("the sink's runtime");
                rt.block_on(serve(listener, options, t));
            })
            .expect("the sink's thread");
        SmtpSink { addr, tally }
    }

    /// Every accepted message, in order (empty under [`Record::IdsOnly`]).
    pub fn messages(&self) -> Vec<Received> {
        self.tally.messages.lock().unwrap().clone()
    }

    /// The recipients of every accepted message, in order.
    pub fn accepted(&self) -> Vec<String> {
        self.messages().into_iter().flat_map(|m| m.to).collect()
    }

    /// Message-ID header value → how many times it arrived.
    pub fn ids(&self) -> HashMap<String, u32> {
        self.tally.ids.lock().unwrap().clone()
    }

    pub fn accepted_count(&self) -> u64 {
        self.tally.accepted.load(Ordering::Relaxed)
    }

    pub fn without_id(&self) -> u64 {
        self.tally.without_id.load(Ordering::Relaxed)
    }

    /// Recipients refused at RCPT by the script.
    pub fn refused_rcpt(&self) -> u64 {
        self.tally.refused_rcpt.load(Ordering::Relaxed)
    }

    pub fn connections(&self) -> u64 {
        self.tally.connections.load(Ordering::Relaxed)
    }

    /// MAIL commands that arrived with the next command already behind them (pipelined).
    pub fn pipelined(&self) -> u64 {
        self.tally.pipelined.load(Ordering::Relaxed)
    }
}

async fn serve(listener: std::net::TcpListener, options: Arc<SinkOptions>, tally: Arc<Tally>) {
    let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
    while let Ok((sock, _)) = listener.accept().await {
        tally.connections.fetch_add(1, Ordering::Relaxed);
        let _ = sock.set_nodelay(true);
        let (options, tally) = (options.clone(), tally.clone());
        tokio::spawn(async move {
            match &options.tls {
                Tls::Implicit(acceptor) => {
                    if let Ok(tls) = acceptor.accept(sock).await {
                        session(Box::new(tls), true, &options, &tally).await;
                    }
                }
                _ => session(Box::new(sock), false, &options, &tally).await,
            }
        });
    }
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// What the script does with one recipient.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Script {
    Accept,
    Refuse(&'static str),
    DropAtRcpt,
    RefuseBody(&'static str),
    DropAfterBody,
    Hang,
}

fn script(address: &str) -> Script {
    let local = address.split('@').next().unwrap_or_default();
    match local.trim_end_matches(|c: char| c.is_ascii_digit()) {
        "bounce" | "nouser" => Script::Refuse("550 5.1.1 no such user\r\n"),
        "later" | "rcpt4xx" => Script::Refuse("451 4.3.0 try again later\r\n"),
        "perm" => Script::Refuse("554 5.7.1 relay access denied\r\n"),
        "dropearly" => Script::DropAtRcpt,
        "spam" => Script::RefuseBody("554 5.7.1 message rejected as spam\r\n"),
        "data4xx" => Script::RefuseBody("452 4.3.1 insufficient system storage\r\n"),
        "droplate" => Script::DropAfterBody,
        "hang" => Script::Hang,
        _ => Script::Accept,
    }
}

/// What follows the path of a MAIL or RCPT line: its parameters.
fn parameters_of(line: &str) -> String {
    line.split_once('>')
        .map_or("", |(_, rest)| rest.trim())
        .to_owned()
}

/// The address between `<` and `>` of a MAIL or RCPT line.
fn path_of(line: &str) -> String {
    line.split(['<', '>']).nth(1).unwrap_or_default().to_owned()
}

/// One SMTP session; `secure` once TLS is up.
async fn session(stream: Box<dyn Io>, mut secure: bool, options: &SinkOptions, tally: &Tally) {
    let mut io = BufReader::new(stream);
    if answer(&mut io, options, b"220 sink.test ESMTP\r\n")
        .await
        .is_err()
    {
        return;
    }
    let mut authed = options.auth.is_none();
    let mut from = String::new();
    let mut parameters = String::new();
    let mut to: Vec<String> = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        match io.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line).trim_end().to_owned();
        let verb = text
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_ascii_uppercase();
        let reply: String = match verb.as_str() {
            "EHLO" => {
                let mut r = String::from("250-sink.test\r\n250-8BITMIME\r\n");
                if !options.without_smtputf8 {
                    r.push_str("250-SMTPUTF8\r\n");
                }
                if matches!(options.tls, Tls::StartTls(_)) && !secure {
                    r.push_str("250-STARTTLS\r\n");
                }
                if options.auth.is_some() {
                    r.push_str("250-AUTH PLAIN\r\n");
                }
                if !options.without_pipelining {
                    r.push_str("250-PIPELINING\r\n");
                }
                r.push_str("250 ENHANCEDSTATUSCODES\r\n");
                r
            }
            "HELO" => "250 sink.test\r\n".into(),
            "STARTTLS" => match &options.tls {
                Tls::StartTls(acceptor) if !secure => {
                    if io.write_all(b"220 2.0.0 ready for TLS\r\n").await.is_err() {
                        return;
                    }
                    let Ok(tls) = acceptor.accept(io.into_inner()).await else {
                        return;
                    };
                    io = BufReader::new(Box::new(tls));
                    secure = true;
                    (from, parameters, to) = (String::new(), String::new(), Vec::new());
                    continue;
                }
                _ => "502 5.5.1 STARTTLS not offered\r\n".into(),
            },
            "AUTH" => match &options.auth {
                Some(expected) => {
                    let mut words = text.split_whitespace().skip(1);
                    let mechanism = words.next().unwrap_or_default().to_ascii_uppercase();
                    let mut blob = words.next().map(str::to_owned);
                    if mechanism == "PLAIN" && blob.is_none() {
                        if io.write_all(b"334 \r\n").await.is_err() {
                            return;
                        }
                        let mut next = String::new();
                        if io.read_line(&mut next).await.unwrap_or(0) == 0 {
                            return;
                        }
                        blob = Some(next.trim().to_owned());
                    }
                    let decoded = blob
                        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                        .unwrap_or_default();
                    let parts: Vec<&[u8]> = decoded.split(|b| *b == 0).collect();
                    let good = mechanism == "PLAIN"
                        && parts.len() == 3
                        && parts[1] == expected.0.as_bytes()
                        && parts[2] == expected.1.as_bytes();
                    if good {
                        authed = true;
                        "235 2.7.0 authenticated\r\n".into()
                    } else {
                        "535 5.7.8 authentication credentials invalid\r\n".into()
                    }
                }
                None => "502 5.5.1 AUTH not offered\r\n".into(),
            },
            "MAIL" if !authed => "530 5.7.0 authentication required\r\n".into(),
            "MAIL" => {
                if !io.buffer().is_empty() {
                    tally.pipelined.fetch_add(1, Ordering::Relaxed);
                }
                let declared = parameters_of(&text);
                let utf8 = declared
                    .split_whitespace()
                    .any(|p| p.eq_ignore_ascii_case("SMTPUTF8"));
                if utf8 && options.without_smtputf8 {
                    "555 5.5.4 SMTPUTF8 not supported\r\n".into()
                } else if !utf8 && !path_of(&text).is_ascii() {
                    "553 5.6.7 Must declare SMTPUTF8 to send unicode address\r\n".into()
                } else {
                    (from, parameters) = (path_of(&text), declared);
                    to.clear();
                    "250 2.1.0 ok\r\n".into()
                }
            }
            "RCPT"
                if !path_of(&text).is_ascii()
                    && !parameters
                        .split_whitespace()
                        .any(|p| p.eq_ignore_ascii_case("SMTPUTF8")) =>
            {
                "553 5.6.7 Must declare SMTPUTF8 to send unicode address\r\n".into()
            }
            "RCPT" => {
                let rcpt = path_of(&text);
                match script(&rcpt) {
                    Script::Refuse(r) => {
                        tally.refused_rcpt.fetch_add(1, Ordering::Relaxed);
                        r.into()
                    }
                    Script::DropAtRcpt => return,
                    _ => {
                        to.push(rcpt);
                        "250 2.1.5 ok\r\n".into()
                    }
                }
            }
            "DATA" if to.is_empty() => "554 5.5.1 no valid recipients\r\n".into(),
            "DATA" => {
                if answer(&mut io, options, b"354 end with <CRLF>.<CRLF>\r\n")
                    .await
                    .is_err()
                {
                    return;
                }
                let Some(data) = read_body(&mut io).await else {
                    return;
                };
                if options.drop_after_body.load(Ordering::SeqCst) {
                    return;
                }
                let worst = to
                    .iter()
                    .map(|t| script(t))
                    .find(|s| *s != Script::Accept)
                    .unwrap_or(Script::Accept);
                let reply = match worst {
                    Script::RefuseBody(r) => r.into(),
                    Script::DropAfterBody => return,
                    Script::Hang => {
                        std::future::pending::<()>().await;
                        return;
                    }
                    _ => {
                        let n = record(tally, options.record, (&from, &parameters), &to, data);
                        // The way Postfix names its queue id: what a relay's webhook refers to.
                        format!("250 2.0.0 Ok: queued as SINK{n:08X}\r\n")
                    }
                };
                to.clear();
                reply
            }
            "RSET" => {
                (from, parameters, to) = (String::new(), String::new(), Vec::new());
                "250 2.0.0 ok\r\n".into()
            }
            "NOOP" => "250 2.0.0 ok\r\n".into(),
            "QUIT" => {
                let _ = io.write_all(b"221 2.0.0 bye\r\n").await;
                return;
            }
            _ => "502 5.5.2 command not recognised\r\n".into(),
        };
        if answer(&mut io, options, reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Writes a reply, after the configured delay unless more pipelined input is already waiting
/// (its reply follows at once, as the server answered the burst together).
async fn answer(
    io: &mut BufReader<Box<dyn Io>>,
    options: &SinkOptions,
    text: &[u8],
) -> std::io::Result<()> {
    if let Some(delay) = options.reply_delay {
        if io.buffer().is_empty() {
            tokio::time::sleep(delay).await;
        }
    }
    io.write_all(text).await
}

/// The body up to the lone `.` line, dot-stuffing undone; `None` if the peer went away.
async fn read_body(io: &mut BufReader<Box<dyn Io>>) -> Option<String> {
    let mut data = Vec::new();
    let mut line = Vec::new();
    loop {
        line.clear();
        if io.read_until(b'\n', &mut line).await.ok()? == 0 {
            return None;
        }
        if line == b".\r\n" || line == b".\n" {
            return Some(String::from_utf8_lossy(&data).into_owned());
        }
        let unstuffed = if line.starts_with(b"..") {
            &line[1..]
        } else {
            &line[..]
        };
        data.extend_from_slice(unstuffed);
    }
}

/// Keeps an accepted message; returns its number (from 1).
fn record(
    tally: &Tally,
    how: Record,
    (from, mail_parameters): (&str, &str),
    to: &[String],
    data: String,
) -> u64 {
    let n = tally.accepted.fetch_add(1, Ordering::Relaxed) + 1;
    let id = data
        .split("\r\n\r\n")
        .next()
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("message-id")
                .then(|| value.trim().to_owned())
        });
    match id {
        Some(id) => *tally.ids.lock().unwrap().entry(id).or_default() += 1,
        None => {
            tally.without_id.fetch_add(1, Ordering::Relaxed);
        }
    }
    if how == Record::Messages {
        tally.messages.lock().unwrap().push(Received {
            from: from.to_owned(),
            mail_parameters: mail_parameters.to_owned(),
            to: to.to_vec(),
            data,
            at: Instant::now(),
        });
    }
    n
}
