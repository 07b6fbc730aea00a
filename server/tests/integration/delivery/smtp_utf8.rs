//! Internationalized mail on the wire: an address that is not ASCII goes out with `SMTPUTF8`
//! (and `BODY=8BITMIME`) declared on MAIL FROM, to a sink that, like Postfix with
//! `strict_smtputf8 = yes`, refuses it otherwise; a relay that does not offer `SMTPUTF8` fails
//! that one message permanently, saying why, and the others go on; display names and subjects
//! are RFC 2047-encoded, so an ASCII address needs nothing.

use app::domain::Role;
use mailroom::workers::delivery::Worker;
use sqlx::PgPool;
use testkit::{SinkOptions, SmtpSink};

use crate::support::fixtures::config;
use crate::support::helpers::{enqueue_test_mail_to, test_db};
use crate::support::org::TestOrg;

const UNICODE: &str = "jörg@example.org";
const ASCII: &str = "ann@example.org";

/// An org whose display name is not ASCII, with test mail queued to both recipients; sends it
/// all through `sink` and returns each delivery's (recipient, status, reply).
async fn send_both(pool: &PgPool, sink: &SmtpSink) -> Vec<(String, String, String)> {
    let acme = TestOrg::with_roles(pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    sqlx::query("update orgs set from_name = 'Zoë''s Café' where id = $1")
        .bind(org)
        .execute(pool)
        .await
        .unwrap();
    enqueue_test_mail_to(pool, org, "utf8", &[UNICODE.to_string(), ASCII.to_string()]).await;
    let mut worker = Worker::new(pool.clone(), config(sink), "utf8");
    while worker.drain().await.unwrap() > 0 {}
    sqlx::query_as(
        "select recipient, status, coalesce(smtp_reply, last_error, '') from deliveries order by recipient",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_unicode_address_is_sent_with_smtputf8_and_an_ascii_one_with_nothing_declared() {
    let pool = test_db().await;
    let sink = SmtpSink::start();
    let states = send_both(&pool, &sink).await;
    assert!(
        states.iter().all(|(_, status, _)| status == "delivered"),
        "{states:?}"
    );
    let got = sink.messages();
    let unicode = got.iter().find(|m| m.to == [UNICODE]).expect("arrived");
    let words: Vec<&str> = unicode.mail_parameters.split_whitespace().collect();
    assert!(words.contains(&"SMTPUTF8"), "{}", unicode.mail_parameters);
    assert!(
        words.contains(&"BODY=8BITMIME"),
        "{}",
        unicode.mail_parameters
    );
    assert!(
        unicode.data.contains("To: jörg@example.org"),
        "{}",
        unicode.data
    );

    let ascii = got.iter().find(|m| m.to == [ASCII]).expect("arrived");
    assert_eq!(ascii.mail_parameters, "", "nothing to declare");
    assert!(ascii.data.is_ascii(), "{}", ascii.data);
    // The display name travels RFC 2047-encoded.
    let from = ascii
        .data
        .lines()
        .find(|l| l.starts_with("From: "))
        .unwrap();
    assert!(from.contains("=?utf-8?"), "{from}");
}

#[tokio::test]
async fn a_relay_without_smtputf8_fails_the_unicode_address_permanently_and_sends_the_rest() {
    let pool = test_db().await;
    let sink = SmtpSink::start_with(SinkOptions {
        without_smtputf8: true,
        ..SinkOptions::default()
    });
    let states = send_both(&pool, &sink).await;
    let by = |to: &str| states.iter().find(|s| s.0 == to).unwrap().clone();
    let (_, status, reply) = by(UNICODE);
    assert_eq!(
        status, "failed",
        "final: every attempt meets the same relay"
    );
    assert!(
        reply.contains("the relay does not support SMTPUTF8"),
        "{reply}"
    );
    assert_eq!(by(ASCII).1, "delivered");
    assert_eq!(
        sink.messages()
            .iter()
            .map(|m| m.to.clone())
            .collect::<Vec<_>>(),
        vec![vec![ASCII.to_string()]]
    );
}
