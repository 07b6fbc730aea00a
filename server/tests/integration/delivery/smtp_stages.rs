//! The SMTP conversation itself, against the shared sink: a job-derived Message-ID arrives
//! intact, every stage of a reused connection is classified, and a lost reply after the body is
//! `unknown`, never retryable.

use testkit::SmtpSink;

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

    use testkit::{SinkOptions, SmtpSink};

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
    async fn every_stage_is_classified_exactly_on_one_reused_connection_pipelined() {
        let sink = SmtpSink::start();
        stages(&sink).await;
        assert_eq!(sink.pipelined(), 5, "MAIL, RCPT and DATA in one write");
    }

    #[tokio::test]
    async fn every_stage_is_classified_exactly_on_a_server_without_pipelining() {
        let sink = SmtpSink::start_with(SinkOptions {
            without_pipelining: true,
            ..SinkOptions::default()
        });
        stages(&sink).await;
        assert_eq!(sink.pipelined(), 0, "one command at a time");
    }

    #[tokio::test]
    async fn a_connection_carries_at_most_its_maximum_of_messages() {
        let sink = SmtpSink::start();
        let mut t = target(sink.addr);
        t.max_messages = Some(2);
        let mut c = Connection::open(&t).await.unwrap();
        let from = addr("news@acme.example");
        for to in ["ann@example.org", "bob@example.org"] {
            assert!(c.ready().await);
            c.prepare(&from, &addr(to), mailroom::smtp::Needs::default())
                .await
                .unwrap();
            assert!(matches!(c.body(BODY).await, BodyOutcome::Accepted(_)));
        }
        assert!(!c.ready().await, "two carried: replace it");
    }

    /// Five messages over one connection: delivered, hard bounce at RCPT, 4xx at RCPT, refused
    /// body, delivered; each classified exactly, the connection reused throughout.
    async fn stages(sink: &SmtpSink) {
        let mut c = Connection::open(&target(sink.addr)).await.unwrap();
        let from = addr("news@acme.example");

        c.prepare(
            &from,
            &addr("ann@example.org"),
            mailroom::smtp::Needs::default(),
        )
        .await
        .unwrap();
        assert!(matches!(c.body(BODY).await, BodyOutcome::Accepted(r) if r.starts_with("250")));

        let bounce = c
            .prepare(
                &from,
                &addr("bounce@example.org"),
                mailroom::smtp::Needs::default(),
            )
            .await
            .unwrap_err();
        assert!(bounce.permanent && bounce.hard_bounce, "{bounce:?}");
        assert!(bounce.reply.contains("5.1.1 no such user"), "{bounce:?}");
        assert!(c.ready().await, "the connection carries the next message");

        let later = c
            .prepare(
                &from,
                &addr("later@example.org"),
                mailroom::smtp::Needs::default(),
            )
            .await
            .unwrap_err();
        assert!(!later.permanent && !later.hard_bounce, "{later:?}");

        c.prepare(
            &from,
            &addr("spam@example.org"),
            mailroom::smtp::Needs::default(),
        )
        .await
        .unwrap();
        match c.body(BODY).await {
            BodyOutcome::Refused(r) => assert!(
                r.permanent && !r.hard_bounce && r.reply.contains("5.7.1"),
                "{r:?}"
            ),
            other => panic!("{other:?}"),
        }
        // A refused body leaves the connection usable for the next message.
        assert!(c.ready().await);
        c.prepare(
            &from,
            &addr("bob@example.org"),
            mailroom::smtp::Needs::default(),
        )
        .await
        .unwrap();
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
        let sink = SmtpSink::start();
        let mut c = Connection::open(&target(sink.addr)).await.unwrap();
        c.prepare(
            &addr("a@x.org"),
            &addr("droplate@y.org"),
            mailroom::smtp::Needs::default(),
        )
        .await
        .unwrap();
        assert!(matches!(c.body(BODY).await, BodyOutcome::Unknown(_)));
        assert!(sink.messages().is_empty(), "nothing was acknowledged");
    }
}
