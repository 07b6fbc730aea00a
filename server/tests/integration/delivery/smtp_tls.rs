//! A real relay is one setting: STARTTLS and implicit TLS on our own TCP_NODELAY socket, AUTH,
//! an operator-supplied CA, and never a message in clear when TLS was asked for. The relay's
//! password is the run's canary (see `canary`).

use std::path::Path;
use std::time::Duration;

use lettre::Address;
use mailroom::smtp::{BodyOutcome, Connection, Security, Target};

use crate::support::canary::{smtp_password, SMTP_USER};
use crate::support::org::TestOrg;
use testkit::{SinkOptions, SmtpSink, Tls};

/// A self-signed certificate for `localhost`: (certificate PEM, key PEM) files in `dir`.
fn self_signed(dir: &Path) -> (String, String) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let status = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
        ])
        .args(["-addext", "subjectAltName=DNS:localhost"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl");
    assert!(status.success());
    (cert.to_string_lossy().into(), key.to_string_lossy().into())
}

/// A submission-port relay: STARTTLS (self-signed) and AUTH PLAIN required.
fn starttls_relay(cert: &str, key: &str) -> SmtpSink {
    SmtpSink::start_with(SinkOptions {
        tls: Tls::StartTls(Tls::acceptor(Path::new(cert), Path::new(key))),
        auth: Some((SMTP_USER.into(), smtp_password())),
        ..SinkOptions::default()
    })
}

/// Every body the relay accepted, concatenated.
fn received(relay: &SmtpSink) -> String {
    relay.messages().into_iter().map(|m| m.data).collect()
}

fn target(port: u16, security: Security, password: &str, ca: Option<&str>) -> Target {
    let mut t = Target::plain("localhost", port, "mailroom.test", Duration::from_secs(5));
    t.security = security;
    t.credentials = Some((SMTP_USER.into(), password.into()));
    t.ca_pem = ca.map(|c| std::fs::read(c).unwrap());
    t
}

const BODY: &[u8] = b"Subject: hi\r\nMessage-ID: <tls.1@x.org>\r\n\r\nHello over TLS\r\n";

async fn send_one(t: &Target) -> Result<BodyOutcome, String> {
    let mut c = Connection::open(t).await.map_err(|r| {
        assert!(
            !r.permanent,
            "a setup failure is never final for the message: {r:?}"
        );
        r.reply
    })?;
    let from: Address = "news@acme.example".parse().unwrap();
    c.prepare(
        &from,
        &"bob@example.org".parse().unwrap(),
        mailroom::smtp::Needs::default(),
    )
    .await
    .map_err(|r| r.reply)?;
    let outcome = c.body(BODY).await;
    c.quit().await;
    Ok(outcome)
}

#[tokio::test]
async fn starttls_with_auth_delivers_and_refuses_wrong_passwords_and_untrusted_servers() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path());
    let relay = starttls_relay(&cert, &key);
    let port = relay.addr.port();

    let ok = send_one(&target(
        port,
        Security::StartTls,
        &smtp_password(),
        Some(&cert),
    ))
    .await;
    assert!(matches!(ok, Ok(BodyOutcome::Accepted(_))), "{ok:?}");
    assert!(received(&relay).contains("Hello over TLS"));

    let wrong = send_one(&target(port, Security::StartTls, "wrong-pw", Some(&cert)))
        .await
        .unwrap_err();
    assert!(wrong.contains("authentication as ann"), "{wrong}");
    assert!(
        !wrong.contains("wrong-pw"),
        "the password is never shown: {wrong}"
    );

    // Without the operator's CA the self-signed certificate is not trusted: nothing is sent.
    let untrusted = send_one(&target(port, Security::StartTls, &smtp_password(), None))
        .await
        .unwrap_err();
    assert!(untrusted.contains("STARTTLS"), "{untrusted}");
    let all = received(&relay);
    assert_eq!(
        all.matches("Hello over TLS").count(),
        1,
        "only the first message got through"
    );
}

#[tokio::test]
async fn starttls_required_but_not_offered_sends_nothing_in_clear() {
    let sink = SmtpSink::start();
    let mut t = Target::plain(
        "127.0.0.1",
        sink.addr.port(),
        "mailroom.test",
        Duration::from_secs(5),
    );
    t.security = Security::StartTls;
    let e = Connection::open(&t).await.err().expect("refused");
    assert!(!e.permanent && e.reply.contains("STARTTLS"), "{e:?}");
    assert!(sink.messages().is_empty());
}

#[tokio::test]
async fn implicit_tls_delivers_over_our_own_socket() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path());
    let sink = SmtpSink::start_with(SinkOptions {
        tls: Tls::Implicit(Tls::acceptor(Path::new(&cert), Path::new(&key))),
        ..SinkOptions::default()
    });
    let port = sink.addr.port();
    let mut t = target(port, Security::Tls, "unused", Some(&cert));
    t.credentials = None;
    let ok = send_one(&t).await;
    assert!(matches!(ok, Ok(BodyOutcome::Accepted(_))), "{ok:?}");
    assert_eq!(sink.accepted(), vec!["bob@example.org".to_string()]);
}

/// The relay as an operator configures it (one MAILROOM_SMTP_URL carrying the password, and a
/// CA file) in a real worker process logging at debug: the mail arrives over STARTTLS with
/// AUTH, and this log, like every log of the suite, is scanned for the password afterwards.
#[test]
fn a_worker_process_delivers_through_an_authenticating_relay_given_one_url() {
    use crate::support::procs::{wait_until, Proc};
    use nix::sys::signal::Signal;

    let rt = tokio::runtime::Runtime::new().unwrap();
    let (pool, url) = rt.block_on(crate::support::helpers::migrated_db_with_url());
    rt.block_on(async {
        let relay = TestOrg::with_roles(&pool, "relay", &[]).await;
        let org = relay.id.0;
        let to = ["bob@example.org".to_string()];
        crate::support::helpers::enqueue_test_mail_to(&pool, org, "relay", &to).await;
    });
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed(dir.path());
    let relay = starttls_relay(&cert, &key);
    let port = relay.addr.port();
    let smtp = crate::support::canary::smtp_url("localhost", port, "tls=starttls");
    let data = crate::support::helpers::data_dir();
    let env = [
        ("DATABASE_URL", url.as_str()),
        ("MAILROOM_SMTP_URL", &smtp),
        ("MAILROOM_SMTP_CA_FILE", &cert),
        ("RUST_LOG", "debug"),
    ];
    let mut worker = Proc::start_with_env("relay-worker", data.path(), &["worker"], &env);
    wait_until("the relay to receive the mail", 60, || {
        !relay.messages().is_empty()
    });
    worker.signal(Signal::SIGTERM);
    assert!(worker.wait_exit(30).success(), "{}", worker.log_text());
    assert!(worker.log_text().contains("delivery worker started"));
}
