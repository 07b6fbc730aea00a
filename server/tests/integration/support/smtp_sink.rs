//! An in-process SMTP server for mail tests (mailin-embedded on an ephemeral port), recording
//! every message it accepts.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};

use mailin_embedded::{response, Handler, Response, Server};

#[derive(Clone, Debug)]
pub struct Received {
    pub from: String,
    pub to: Vec<String>,
    pub data: String,
    /// When the body was accepted.
    pub at: std::time::Instant,
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

#[derive(Clone)]
pub struct SmtpSink {
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Vec<Received>>>,
}

#[derive(Clone)]
struct Recorder {
    received: Arc<Mutex<Vec<Received>>>,
    current: Option<Received>,
}

/// Scripted refusals, chosen by the recipient's local part: `bounce@` 550 5.1.1 at RCPT,
/// `later@` 451 at RCPT, `spam@` 554 5.7.1 after the body.
impl Handler for Recorder {
    fn rcpt(&mut self, to: &str) -> Response {
        if to.starts_with("bounce@") {
            Response::custom(550, "5.1.1 no such user".into())
        } else if to.starts_with("later@") {
            Response::custom(451, "4.3.0 try again later".into())
        } else {
            response::OK
        }
    }

    fn data_start(&mut self, _domain: &str, from: &str, _is8bit: bool, to: &[String]) -> Response {
        self.current = Some(Received {
            from: from.to_owned(),
            to: to.to_vec(),
            data: String::new(),
            at: std::time::Instant::now(),
        });
        response::OK
    }

    fn data(&mut self, buf: &[u8]) -> std::io::Result<()> {
        if let Some(m) = self.current.as_mut() {
            m.data.push_str(&String::from_utf8_lossy(buf));
        }
        Ok(())
    }

    fn data_end(&mut self) -> Response {
        match self.current.take() {
            Some(m) if m.to.iter().any(|t| t.starts_with("spam@")) => {
                Response::custom(554, "5.7.1 message rejected as spam".into())
            }
            Some(mut m) => {
                m.at = std::time::Instant::now();
                self.received.lock().unwrap().push(m);
                response::OK
            }
            None => response::OK,
        }
    }

    fn helo(&mut self, _ip: IpAddr, _domain: &str) -> Response {
        response::OK
    }
}

impl SmtpSink {
    pub fn start() -> SmtpSink {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let mut server = Server::new(Recorder {
            received: received.clone(),
            current: None,
        });
        server
            .with_name("sink.test")
            .with_num_threads(32)
            .with_tcp_listener(listener);
        std::thread::spawn(move || {
            let _ = server.serve();
        });
        SmtpSink { addr, received }
    }

    pub fn messages(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

#[tokio::test]
async fn the_sink_receives_what_lettre_sends_with_a_job_derived_message_id() {
    use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
    let sink = SmtpSink::start();
    let job: app::domain::JobId = "campaign:7:42".parse().unwrap();
    let message = Message::builder()
        .from("Acme <news@acme.example>".parse().unwrap())
        .to("ann@example.org".parse().unwrap())
        .message_id(Some(job.message_id("acme.example")))
        .subject("Hello")
        .body("Hi Ann".to_string())
        .unwrap();
    let smtp = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(sink.addr.ip().to_string())
        .port(sink.addr.port())
        .build();
    smtp.send(message).await.unwrap();
    let got = sink.messages();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].to, vec!["ann@example.org".to_string()]);
    assert_eq!(got[0].from, "news@acme.example");
    assert!(
        got[0]
            .data
            .contains("Message-ID: <campaign.7.42@acme.example>"),
        "{}",
        got[0].data
    );
}

mod staged {
    use std::time::Duration;

    use lettre::Address;
    use mailroom::smtp::{BodyOutcome, Connection, Target};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    use super::SmtpSink;

    fn target(addr: std::net::SocketAddr) -> Target {
        Target::plain(
            addr.ip().to_string(),
            addr.port(),
            "mailroom.test",
            Duration::from_secs(2),
        )
    }

    fn addr(s: &str) -> Address {
        s.parse().unwrap()
    }

    const BODY: &[u8] = b"Subject: hi\r\nMessage-ID: <t.1@x.org>\r\n\r\nHello\r\n";

    #[tokio::test]
    async fn every_stage_is_classified_exactly_on_one_reused_connection() {
        let sink = SmtpSink::start();
        let mut c = Connection::open(&target(sink.addr)).await.unwrap();
        let from = addr("news@acme.example");

        c.prepare(&from, &addr("ann@example.org")).await.unwrap();
        assert!(matches!(c.body(BODY).await, BodyOutcome::Accepted(r) if r.starts_with("250")));

        let bounce = c
            .prepare(&from, &addr("bounce@example.org"))
            .await
            .unwrap_err();
        assert!(bounce.permanent && bounce.hard_bounce, "{bounce:?}");
        assert!(bounce.reply.contains("5.1.1 no such user"), "{bounce:?}");
        assert!(c.ready().await, "the connection carries the next message");

        let later = c
            .prepare(&from, &addr("later@example.org"))
            .await
            .unwrap_err();
        assert!(!later.permanent && !later.hard_bounce, "{later:?}");

        c.prepare(&from, &addr("spam@example.org")).await.unwrap();
        match c.body(BODY).await {
            BodyOutcome::Refused(r) => assert!(
                r.permanent && !r.hard_bounce && r.reply.contains("5.7.1"),
                "{r:?}"
            ),
            other => panic!("{other:?}"),
        }
        // mailin (the sink) stops answering after refusing a body; a real server would not.
        // A new connection carries on.
        let mut c = Connection::open(&target(sink.addr)).await.unwrap();
        c.prepare(&from, &addr("bob@example.org")).await.unwrap();
        assert!(matches!(c.body(BODY).await, BodyOutcome::Accepted(_)));
        c.quit().await;
        let got: Vec<Vec<String>> = sink.messages().into_iter().map(|m| m.to).collect();
        assert_eq!(
            got,
            vec![
                vec!["ann@example.org".to_string()],
                vec!["bob@example.org".to_string()]
            ]
        );
    }

    #[tokio::test]
    async fn nobody_listening_is_a_retryable_refusal() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let e = Connection::open(&target(port))
            .await
            .err()
            .expect("refused");
        assert!(!e.permanent && e.reply.contains("cannot connect"), "{e:?}");
    }

    /// A server that takes the body and vanishes without a reply: the outcome is unknown.
    #[tokio::test]
    async fn a_lost_reply_after_the_body_is_unknown_not_retryable() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let at = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (sock, _) = listener.accept().await.unwrap();
            let (r, mut w) = sock.into_split();
            let mut lines = BufReader::new(r).lines();
            w.write_all(b"220 fake ESMTP\r\n").await.unwrap();
            let mut in_body = false;
            while let Ok(Some(line)) = lines.next_line().await {
                if in_body {
                    if line == "." {
                        return; // the body is in, the reply never comes
                    }
                    continue;
                }
                let reply: &[u8] = match &line[..4.min(line.len())] {
                    "EHLO" => b"250 fake\r\n",
                    "DATA" => {
                        in_body = true;
                        b"354 go ahead\r\n"
                    }
                    _ => b"250 ok\r\n",
                };
                w.write_all(reply).await.unwrap();
            }
        });
        let mut c = Connection::open(&target(at)).await.unwrap();
        c.prepare(&addr("a@x.org"), &addr("b@y.org")).await.unwrap();
        assert!(matches!(c.body(BODY).await, BodyOutcome::Unknown(_)));
    }
}
