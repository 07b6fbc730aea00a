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

impl Handler for Recorder {
    fn data_start(&mut self, _domain: &str, from: &str, _is8bit: bool, to: &[String]) -> Response {
        self.current = Some(Received {
            from: from.to_owned(),
            to: to.to_vec(),
            data: String::new(),
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
        if let Some(m) = self.current.take() {
            self.received.lock().unwrap().push(m);
        }
        response::OK
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
            .with_num_threads(4)
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
