//! Sender authentication per org, end to end: the owner sets a DKIM key and a Return-Path over
//! HTTP; the delivery worker signs what it sends (to the SMTP sink and to captured files) and
//! uses the Return-Path as MAIL FROM. Signatures are checked by an independent verifier
//! (mail-auth) against the DNS record the settings page tells the owner to publish, served
//! from a cache this test fills (no network DNS).

use app::api::campaign::test_send::SendTest;
use app::api::sender_auth::{
    AddDkimEd25519Key, RemoveDkimEd25519Key, SaveDkimKey, SaveReturnPath, SenderAuthView,
    SetDkimEnabled,
};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::Instant;

use app::domain::Role;
use mail_auth::common::parse::TxtRecordParser;
use mail_auth::common::resolver::ToFqdn;
use mail_auth::common::verify::DomainKey;
use mail_auth::hickory_resolver::config::{ResolverConfig, ResolverOpts};
use mail_auth::{
    AuthenticatedMessage, DkimResult, MessageAuthenticator, Parameters, ResolverCache, Txt,
};
use mailroom::workers::delivery::Worker;
use serde_json::Value;
use sqlx::PgPool;

use crate::support::fixtures::{config, config_for_capture};
use crate::support::helpers::{enqueue_test_mail_to, test_db};
use crate::support::org::TestOrg;
use crate::support::test_app::{json, marked, spawn_app, TestApp};
use testkit::SmtpSink;

/// DNS as published: TXT records by name, nothing else (a miss is an error, never a query).
struct PublishedDns(Mutex<HashMap<Box<str>, Txt>>);

impl ResolverCache<Box<str>, Txt> for PublishedDns {
    fn get<Q>(&self, name: &Q) -> Option<Txt>
    where
        Box<str>: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.lock().unwrap().get(name).cloned()
    }
    fn remove<Q>(&self, name: &Q) -> Option<Txt>
    where
        Box<str>: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.0.lock().unwrap().remove(name)
    }
    fn insert(&self, key: Box<str>, value: Txt, _: Instant) {
        self.0.lock().unwrap().insert(key, value);
    }
}

/// The verifier's verdicts on every DKIM-Signature of `message`, with `name` publishing `value`.
async fn verify(message: &str, name: &str, value: &str) -> Vec<DkimResult> {
    verify_with(message, &[(name, value)]).await
}

/// [`verify`] with several records published: (name, value) pairs.
async fn verify_with(message: &str, records: &[(&str, &str)]) -> Vec<DkimResult> {
    let dns = PublishedDns(Mutex::new(HashMap::new()));
    for (name, value) in records {
        let key = DomainKey::parse(value.as_bytes()).expect("the published record parses");
        dns.insert(name.to_fqdn(), Txt::from(key), Instant::now());
    }
    // No name servers: anything not in `dns` fails instead of leaving the machine.
    let verifier = MessageAuthenticator::new(
        ResolverConfig::from_name_servers(vec![]),
        ResolverOpts::default(),
    )
    .unwrap();
    let parsed = AuthenticatedMessage::parse(message.as_bytes()).expect("a parseable message");
    verifier
        .verify_dkim(Parameters::new(&parsed).with_txt_cache(&dns))
        .await
        .into_iter()
        .map(|o| o.result().clone())
        .collect()
}

/// The second, independent verifier: dkimpy (Debian's python3-dkim, by Debian's own Python),
/// answering its one DNS query with `value`. True when every signature verifies.
fn dkimpy_verifies(message: &str, value: &str) -> bool {
    use std::io::Write;
    let script = "import sys, dkim\n\
                  rec = sys.argv[1].encode()\n\
                  msg = sys.stdin.buffer.read()\n\
                  sys.exit(0 if dkim.verify(msg, dnsfunc=lambda name, timeout=5: rec) else 1)\n";
    let mut child = std::process::Command::new("/usr/bin/python3")
        .args(["-c", script, value])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("/usr/bin/python3 with python3-dkim (scripts/setup installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(message.as_bytes())
        .unwrap();
    child.wait().unwrap().success()
}

/// dkimpy's verdict on the `index`th DKIM-Signature of `message` (0: the topmost), with each
/// (name, value) of `records` published. Its Ed25519 support is PyNaCl (Debian's python3-nacl).
fn dkimpy_verifies_signature(message: &str, index: usize, records: &[(&str, &str)]) -> bool {
    use std::io::Write;
    let script = "import sys, dkim\n\
                  recs = dict(zip(sys.argv[2::2], sys.argv[3::2]))\n\
                  def dns(name, timeout=5):\n\
                  \x20   name = name.decode() if isinstance(name, bytes) else name\n\
                  \x20   return recs.get(name.rstrip('.'), '').encode() or None\n\
                  msg = sys.stdin.buffer.read()\n\
                  sys.exit(0 if dkim.DKIM(msg).verify(idx=int(sys.argv[1]), dnsfunc=dns) else 1)\n";
    let mut args = vec![index.to_string()];
    for (name, value) in records {
        args.extend([name.to_string(), value.to_string()]);
    }
    let mut child = std::process::Command::new("/usr/bin/python3")
        .args(["-c", script])
        .args(&args)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect(
            "/usr/bin/python3 with python3-dkim and python3-nacl (scripts/setup installs them)",
        );
    child
        .stdin
        .take()
        .unwrap()
        .write_all(message.as_bytes())
        .unwrap();
    child.wait().unwrap().success()
}

/// The owner's client, with DKIM set up over HTTP (generated key, enabled); returns the DNS
/// record (name, value) the settings page shows.
async fn enable_dkim(app: &TestApp, owner: &reqwest::Client) -> (String, String) {
    let key = SaveDkimKey {
        domain: "Example.org".into(),
        selector: "mr2026".into(),
        private_key: String::new(),
    };
    let (status, body) = app.call_fn(owner, key).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = app.call_fn(owner, SetDkimEnabled { enabled: true }).await;
    assert_eq!(status, 200, "{body}");
    let view = json(&app.call_fn(owner, SenderAuthView {}).await.1);
    let dkim = &view["dkim"];
    assert_eq!(
        (dkim["enabled"].as_bool(), dkim["aligned"].as_bool()),
        (Some(true), Some(true))
    );
    (
        dkim["record_name"].as_str().unwrap().to_owned(),
        dkim["record_value"].as_str().unwrap().to_owned(),
    )
}

/// Queues a test of a Markdown campaign (text + HTML, a non-ASCII subject) to `to`.
async fn queue_campaign_test(app: &TestApp, admin: &reqwest::Client, to: &str) {
    let body = "# News\n\n*Big* day, with trailing spaces   \n\nBye.";
    let (id, sheet) = app
        .markdown_draft(admin, "Grüße, {{ name }}", body, vec![])
        .await;
    let test = SendTest {
        id,
        version: 2,
        token: sheet["test_token"].as_str().unwrap().to_string(),
        addresses: to.into(),
    };
    let (status, body) = app.call_fn(admin, test).await;
    assert_eq!(status, 200, "{body}");
}

/// The message with the first occurrence of `from` replaced by `to` (which must be there).
fn altered(message: &str, from: &str, to: &str) -> String {
    assert!(message.contains(from), "{from} not in {message}");
    message.replacen(from, to, 1)
}

#[tokio::test]
async fn dkim_signed_mail_verifies_against_the_published_record_and_fails_once_altered() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let (name, value) = enable_dkim(&app, &owner).await;
    assert_eq!(name, "mr2026._domainkey.example.org");
    assert!(value.starts_with("v=DKIM1; k=rsa; p="), "{value}");

    // A plain test message (sent before any campaign exists: its job names campaign 1), then a
    // test of a campaign.
    let sink = SmtpSink::start();
    let mut worker = Worker::new(pool.clone(), config(&sink), "dkim");
    enqueue_test_mail_to(&pool, org, "dkim", &["plain@example.com".to_string()]).await;
    while worker.drain().await.unwrap() > 0 {}
    queue_campaign_test(&app, &admin, "rich@example.com").await;
    while worker.drain().await.unwrap() > 0 {}
    let got = sink.messages();
    let states: Vec<(String, String, Option<String>)> =
        sqlx::query_as("select job_id, status, coalesce(smtp_reply, last_error) from deliveries")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(got.len(), 2, "both messages arrived: {states:?}");

    for m in &got {
        let data = &m.data;
        assert!(
            data.contains("DKIM-Signature: v=1; a=rsa-sha256; s=mr2026; d=example.org;"),
            "{data}"
        );
        assert_eq!(
            verify(data, &name, &value).await,
            vec![DkimResult::Pass],
            "{data}"
        );
        assert!(dkimpy_verifies(data, &value), "dkimpy refuses: {data}");
        // How the body is to be read is signed too: a relay that rewrites it breaks the
        // signature.
        let retyped = altered(data, "Content-Type: ", "Content-Type: text/x-");
        assert!(matches!(
            verify(&retyped, &name, &value).await.as_slice(),
            [DkimResult::Fail(_)]
        ));
        assert!(!dkimpy_verifies(&retyped, &value));
        // The body changed in transit: the body hash no longer matches.
        let body_at = data.find("\r\n\r\n").unwrap() + 4;
        let (head, body) = data.split_at(body_at);
        let tampered = format!("{head}{}", altered(body, "e", "E"));
        assert_ne!(
            verify(&tampered, &name, &value).await,
            vec![DkimResult::Pass]
        );
        // A signed header changed: the signature no longer verifies.
        let tampered = altered(data, "To: ", "To: x");
        assert!(matches!(
            verify(&tampered, &name, &value).await.as_slice(),
            [DkimResult::Fail(_)]
        ));
        assert!(!dkimpy_verifies(&tampered, &value));
        // A second From put above the signed one (what most readers show) breaks it too.
        let prepended = data.replacen(
            "\r\nFrom: ",
            "\r\nFrom: Mallory <m@evil.example>\r\nFrom: ",
            1,
        );
        assert!(matches!(
            verify(&prepended, &name, &value).await.as_slice(),
            [DkimResult::Fail(_)]
        ));
        assert!(!dkimpy_verifies(&prepended, &value));
        // Another key published under the name: the signature does not verify with it.
        let other = app::dkim_key::DkimKey::generate()
            .unwrap()
            .dns_value()
            .unwrap();
        assert!(matches!(
            verify(data, &name, &other).await.as_slice(),
            [DkimResult::Fail(_)]
        ));
    }
    let rich = got.iter().find(|m| m.to == ["rich@example.com"]).unwrap();
    assert!(rich.data.contains("multipart/alternative"), "{}", rich.data);

    // Signing off: the next message goes out unsigned.
    let (status, body) = app.call_fn(&owner, SetDkimEnabled { enabled: false }).await;
    assert_eq!(status, 200, "{body}");
    queue_campaign_test(&app, &admin, "off@example.com").await;
    while worker.drain().await.unwrap() > 0 {}
    let off = sink
        .messages()
        .into_iter()
        .find(|m| m.to == ["off@example.com"])
        .unwrap();
    assert!(!off.data.contains("DKIM-Signature"), "{}", off.data);
}

#[tokio::test]
async fn an_ed25519_key_signs_beside_the_rsa_key_and_each_signature_verifies_against_its_record() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let add = |selector: &str| AddDkimEd25519Key {
        selector: selector.into(),
    };
    let rsa_key = |domain: &str, selector: &str| SaveDkimKey {
        domain: domain.into(),
        selector: selector.into(),
        private_key: String::new(),
    };

    // It signs for the RSA key's domain, so it needs that key first.
    let (status, body) = app.call_fn(&owner, add("mr2026e")).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("RSA key first"), "{body}");
    let (rsa_name, rsa_value) = enable_dkim(&app, &owner).await;
    // One DNS name holds one key: the selectors differ, whichever key is saved second.
    let (status, body) = app.call_fn(&owner, add("mr2026")).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("the RSA key's selector"), "{body}");
    let (status, _) = app.call_fn(&admin, add("mr2026e")).await;
    assert_eq!(status, 403, "owners only");
    let (status, body) = app.call_fn(&owner, add("mr2026e")).await;
    assert_eq!(status, 200, "{body}");
    // Rotation needs a second name: the first one publishes the key in use.
    let (status, body) = app.call_fn(&owner, add("mr2026e")).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("needs a new selector"), "{body}");
    let (status, body) = app.call_fn(&owner, rsa_key("example.org", "mr2026e")).await;
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("the Ed25519 key's selector"), "{body}");

    let view = json(&app.call_fn(&owner, SenderAuthView {}).await.1);
    let ed = &view["dkim"]["ed25519"];
    let (ed_name, ed_value) = (
        ed["record_name"].as_str().unwrap().to_owned(),
        ed["record_value"].as_str().unwrap().to_owned(),
    );
    assert_eq!(ed_name, "mr2026e._domainkey.example.org");
    assert!(ed_value.starts_with("v=DKIM1; k=ed25519; p="), "{ed_value}");
    assert!(!view.to_string().contains("PRIVATE KEY"), "{view}");
    // The settings page shows the record to publish.
    let page = app.get_html(&owner, "/settings").await;
    assert_eq!(
        marked(&page, "dkim-ed25519-record-name").as_deref(),
        Some(ed_name.as_str())
    );
    assert_eq!(
        marked(&page, "dkim-ed25519-record-value").as_deref(),
        Some(ed_value.as_str())
    );
    let both = [
        (rsa_name.as_str(), rsa_value.as_str()),
        (ed_name.as_str(), ed_value.as_str()),
    ];

    let sink = SmtpSink::start();
    let mut worker = Worker::new(pool.clone(), config(&sink), "ed25519");
    queue_campaign_test(&app, &admin, "dual@example.com").await;
    while worker.drain().await.unwrap() > 0 {}
    let got = sink.messages();
    assert_eq!(got.len(), 1);
    let data = &got[0].data;
    let rsa_at = data.find("DKIM-Signature: v=1; a=rsa-sha256; s=mr2026; d=example.org;");
    let ed_at = data.find("DKIM-Signature: v=1; a=ed25519-sha256; s=mr2026e; d=example.org;");
    assert!(rsa_at.is_some() && ed_at.is_some(), "{data}");
    assert!(rsa_at < ed_at, "the RSA signature comes first: {data}");
    assert_eq!(
        verify_with(data, &both).await,
        vec![DkimResult::Pass, DkimResult::Pass],
        "{data}"
    );
    assert!(
        dkimpy_verifies_signature(data, 0, &both),
        "dkimpy, RSA: {data}"
    );
    assert!(
        dkimpy_verifies_signature(data, 1, &both),
        "dkimpy, Ed25519: {data}"
    );
    // Each signature stands on its own record: with only the RSA one published, the Ed25519
    // signature cannot verify and the RSA one still does.
    let rsa_only = verify_with(data, &both[..1]).await;
    assert_eq!(rsa_only[0], DkimResult::Pass);
    assert_ne!(rsa_only[1], DkimResult::Pass);
    // Another Ed25519 key under the name: refused.
    let other = app::dkim_key::ed25519_dns_value(
        &app::dkim_key::Ed25519DkimKey::generate()
            .unwrap()
            .public_key_base64,
    );
    let swapped = [both[0], (ed_name.as_str(), other.as_str())];
    assert!(!dkimpy_verifies_signature(data, 1, &swapped));
    assert!(matches!(
        verify_with(data, &swapped).await.as_slice(),
        [DkimResult::Pass, DkimResult::Fail(_)]
    ));
    // A signed header changed: both fail.
    let tampered = altered(data, "To: ", "To: x");
    assert!(matches!(
        verify_with(&tampered, &both).await.as_slice(),
        [DkimResult::Fail(_), DkimResult::Fail(_)]
    ));
    assert!(!dkimpy_verifies_signature(&tampered, 1, &both));

    // Removed: the RSA signature alone again.
    let (status, body) = app.call_fn(&owner, RemoveDkimEd25519Key {}).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = app.call_fn(&owner, RemoveDkimEd25519Key {}).await;
    assert_eq!(status, 422, "{body}");
    queue_campaign_test(&app, &admin, "single@example.com").await;
    while worker.drain().await.unwrap() > 0 {}
    let single = sink
        .messages()
        .into_iter()
        .find(|m| m.to == ["single@example.com"])
        .unwrap();
    assert_eq!(
        single.data.matches("DKIM-Signature:").count(),
        1,
        "{}",
        single.data
    );
    assert_eq!(
        verify(&single.data, &rsa_name, &rsa_value).await,
        vec![DkimResult::Pass]
    );

    let audited: Vec<(Option<Value>, Option<Value>)> = sqlx::query_as(
        "select before, after from audit_log where org_id = $1 and action = 'settings.dkim_ed25519_key' order by id",
    )
    .bind(org)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(audited.len(), 2, "{audited:?}");
    assert_eq!(audited[0].0, None);
    assert_eq!(audited[0].1.as_ref().unwrap()["selector"], "mr2026e");
    assert_eq!(audited[1].0, audited[0].1);
    assert_eq!(audited[1].1, None);
    assert!(!format!("{audited:?}").contains("PRIVATE"));

    // An RSA key for another domain takes the Ed25519 key with it (it signed for the old one).
    let (status, body) = app.call_fn(&owner, add("mr2027e")).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = app.call_fn(&owner, rsa_key("example.org", "mr2027")).await;
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains("Ed25519"), "{body}");
    let view = json(&app.call_fn(&owner, SenderAuthView {}).await.1);
    assert_eq!(view["dkim"]["ed25519"]["selector"], "mr2027e", "{view}");
    let (status, body) = app.call_fn(&owner, rsa_key("example.net", "mr2028")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("The Ed25519 key is removed"), "{body}");
    let view = json(&app.call_fn(&owner, SenderAuthView {}).await.1);
    assert!(view["dkim"]["ed25519"].is_null(), "{view}");
    let last: (Option<Value>, Option<Value>) = sqlx::query_as(
        "select before, after from audit_log where org_id = $1 and action = 'settings.dkim_ed25519_key' order by id desc limit 1",
    )
    .bind(org)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(last.0.unwrap()["selector"], "mr2027e");
    assert_eq!(last.1, None);
}

#[tokio::test]
async fn captured_mail_is_signed_too() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let (name, value) = enable_dkim(&app, &owner).await;
    let jobs = enqueue_test_mail_to(&pool, org, "cap", &["cap@example.com".to_string()]).await;
    let dir = tempfile::tempdir().unwrap();
    let mut worker = Worker::new(pool.clone(), config_for_capture(dir.path().into()), "cap");
    while worker.drain().await.unwrap() > 0 {}
    let reply: String = sqlx::query_scalar("select smtp_reply from deliveries")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(reply.starts_with("captured as "), "{reply}");
    let file = app::capture::path_for(dir.path(), org, &jobs[0]);
    let eml = std::fs::read_to_string(file).unwrap();
    assert_eq!(
        verify(&eml, &name, &value).await,
        vec![DkimResult::Pass],
        "{eml}"
    );
}

#[tokio::test]
async fn the_return_path_is_the_envelope_sender_and_defaults_to_the_from_address() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let sink = SmtpSink::start();
    let mut worker = Worker::new(pool.clone(), config(&sink), "rp");

    enqueue_test_mail_to(&pool, org, "before", &["a@example.com".to_string()]).await;
    while worker.drain().await.unwrap() > 0 {}
    let (status, body) = app
        .call_fn(
            &owner,
            SaveReturnPath {
                return_path: " Bounces@Example.org ".into(),
            },
        )
        .await;
    assert_eq!(status, 200, "{body}");
    enqueue_test_mail_to(&pool, org, "after", &["b@example.com".to_string()]).await;
    while worker.drain().await.unwrap() > 0 {}

    let got = sink.messages();
    let envelope = |to: &str| {
        let m = got.iter().find(|m| m.to == [to]).unwrap();
        (
            m.from.clone(),
            m.data.contains("From: acme <news@example.org>"),
        )
    };
    assert_eq!(envelope("a@example.com"), ("news@example.org".into(), true));
    assert_eq!(
        envelope("b@example.com"),
        ("Bounces@Example.org".into(), true)
    );
    assert!(
        !got.iter().any(|m| m.data.contains("Return-Path")),
        "the receiving server adds Return-Path, not the sender"
    );
}

async fn audit_rows(pool: &PgPool, org: i64) -> Vec<(String, Option<Value>, Option<Value>)> {
    sqlx::query_as(
        "select action, before, after from audit_log
         where org_id = $1 and action in ('settings.dkim_key', 'settings.dkim', 'settings.return_path')
         order by id",
    )
    .bind(org)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn sender_auth_settings_are_owner_only_validated_audited_and_never_return_the_key() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner, Role::Admin, Role::Viewer]).await;
    let org = acme.id.0;
    let beta = TestOrg::with_roles(&pool, "beta", &[Role::Owner]).await;
    let other_org = beta.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let viewer = acme.users[2].signed_in(&app).await;
    let key = app::dkim_key::DkimKey::generate().unwrap();
    let pem = key.to_pkcs1_pem().unwrap();
    // Every response of this test, to search for the key afterwards.
    let mut responses = Vec::new();

    // Everyone reads; nobody but the owner changes anything.
    let (status, body) = app.call_fn(&viewer, SenderAuthView {}).await;
    assert_eq!(status, 200, "{body}");
    let view = json(&body);
    assert_eq!(
        (view["dkim"].is_null(), view["can_manage"].as_bool()),
        (true, Some(false))
    );
    for c in [&admin, &viewer] {
        for (endpoint, args) in [
            (
                "save_dkim_key",
                vec![
                    ("domain", "example.org"),
                    ("selector", "s1"),
                    ("private_key", pem.as_str()),
                ],
            ),
            ("set_dkim_enabled", vec![("enabled", "true")]),
            ("save_return_path", vec![("return_path", "b@example.org")]),
        ] {
            let (status, body) = app.call_with(c, endpoint, &args).await;
            assert_eq!(
                (status.as_u16(), json(&body)),
                (403, Value::from("Forbidden")),
                "{endpoint}"
            );
            responses.push(body);
        }
    }

    // Bad input is refused naming the field; nothing is written.
    for (domain, selector, private_key, field) in [
        ("example", "s1", "", "DKIM domain"),
        ("exa mple.org", "s1", "", "DKIM domain"),
        ("example.org", "", "", "DKIM selector"),
        ("example.org", "s_1", "", "DKIM selector"),
        (
            "example.org",
            "s1",
            "-----BEGIN RSA PRIVATE KEY-----\nnope\n-----END RSA PRIVATE KEY-----",
            "DKIM private key",
        ),
        ("example.org", "s1", "hello", "DKIM private key"),
    ] {
        let key = SaveDkimKey {
            domain: domain.into(),
            selector: selector.into(),
            private_key: private_key.into(),
        };
        let (status, body) = app.call_fn(&owner, key).await;
        assert_eq!(status, 422, "{body}");
        let message = json(&body)["Invalid"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            message.starts_with(&format!("{field}: ")),
            "{field}: {body}"
        );
    }
    let (_, body) = app.call_fn(&owner, SetDkimEnabled { enabled: true }).await;
    assert_eq!(
        json(&body)["Invalid"],
        "DKIM: generate or paste a key first."
    );
    let (_, body) = app
        .call_fn(
            &owner,
            SaveReturnPath {
                return_path: "bounces@".into(),
            },
        )
        .await;
    assert!(
        json(&body)["Invalid"]
            .as_str()
            .unwrap()
            .starts_with("Return-Path: "),
        "{body}"
    );
    assert!(audit_rows(&pool, org).await.is_empty());

    // The pasted key is stored (PKCS#1) and its public half shown; signing starts off.
    let pasted = SaveDkimKey {
        domain: "example.org".into(),
        selector: "s1".into(),
        private_key: format!("\n{pem}\n"),
    };
    let (status, body) = app.call_fn(&owner, pasted).await;
    assert_eq!(status, 200, "{body}");
    responses.push(body);
    let (status, body) = app.call_fn(&owner, SenderAuthView {}).await;
    assert_eq!(status, 200, "{body}");
    let view = json(&body);
    assert_eq!(view["dkim"]["record_value"], key.dns_value().unwrap());
    assert_eq!(view["dkim"]["enabled"], false);
    responses.push(body);
    let stored: String =
        sqlx::query_scalar("select private_key_pem from org_dkim where org_id = $1")
            .bind(org)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(stored.trim(), pem.trim());
    // Enable, set a Return-Path, then generate a fresh key (signing goes off again).
    for (endpoint, args) in [
        ("set_dkim_enabled", vec![("enabled", "true")]),
        (
            "save_return_path",
            vec![("return_path", "bounces@example.org")],
        ),
        (
            "save_dkim_key",
            vec![
                ("domain", "example.org"),
                ("selector", "s2"),
                ("private_key", ""),
            ],
        ),
        ("save_return_path", vec![("return_path", "")]),
    ] {
        let (status, body) = app.call_with(&owner, endpoint, &args).await;
        assert_eq!(status, 200, "{endpoint}: {body}");
        responses.push(body);
    }
    let view = json(&app.call_fn(&owner, SenderAuthView {}).await.1);
    assert_eq!(
        (
            view["dkim"]["selector"].as_str(),
            view["dkim"]["enabled"].as_bool()
        ),
        (Some("s2"), Some(false))
    );
    assert_ne!(view["dkim"]["record_value"], key.dns_value().unwrap());
    assert_eq!(view["return_path"], "");

    // The page (rendered on the server) shows the record to publish and the forms to the owner,
    // and neither the forms nor the key to a viewer.
    let page = |c: &reqwest::Client| {
        let (c, url) = (c.clone(), format!("{}/settings", app.base));
        async move { c.get(url).send().await.unwrap().text().await.unwrap() }
    };
    let owners_page = page(&owner).await;
    for needle in [
        "id=\"dkim-key-form\"",
        "id=\"return-path-form\"",
        "s2._domainkey.example.org",
        "Enable signing",
    ] {
        assert!(owners_page.contains(needle), "{needle} in the owner's page");
    }
    let viewers_page = page(&viewer).await;
    assert!(viewers_page.contains("s2._domainkey.example.org"));
    assert!(!viewers_page.contains("id=\"dkim-key-form\""));
    // (The pages show a PEM header as the textarea's placeholder: checked by key lines below.)
    let pages = [owners_page, viewers_page];

    let rows = audit_rows(&pool, org).await;
    let actions: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(
        actions,
        [
            "settings.dkim_key",
            "settings.dkim",
            "settings.return_path",
            "settings.dkim_key",
            "settings.return_path"
        ]
    );
    assert_eq!(rows[0].1, None, "no key before");
    assert_eq!(rows[0].2.as_ref().unwrap()["source"], "pasted");
    assert_eq!(rows[3].1.as_ref().unwrap()["enabled"], true);
    assert_eq!(rows[3].2.as_ref().unwrap()["source"], "generated");
    assert_eq!(rows[3].2.as_ref().unwrap()["selector"], "s2");
    assert_eq!(
        rows[2].2.as_ref().unwrap()["return_path"],
        "bounces@example.org"
    );
    // Only the owner's org changed.
    let (keys, return_path): (i64, Option<String>) = sqlx::query_as(
        "select (select count(*) from org_dkim where org_id = $1), return_path from orgs where id = $1",
    )
    .bind(other_org)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((keys, return_path), (0, None));

    // No response and no audit row carries any part of either private key. (A PEM line that is
    // part of the public key is modulus, which the DNS record publishes anyway.)
    let (stored, public): (String, String) =
        sqlx::query_as("select private_key_pem, public_key from org_dkim where org_id = $1")
            .bind(org)
            .fetch_one(&pool)
            .await
            .unwrap();
    let publics = [key.public_key_base64().unwrap(), public];
    let secret_lines: Vec<&str> = [pem.as_str(), stored.as_str()]
        .into_iter()
        .flat_map(str::lines)
        .filter(|l| !l.starts_with("-----") && !publics.iter().any(|p| p.contains(l)))
        .collect();
    assert!(secret_lines.len() > 20, "{secret_lines:?}");
    let audit: Vec<String> = rows
        .iter()
        .map(|r| format!("{:?} {:?}", r.1, r.2))
        .collect();
    for text in responses.iter().chain(&audit) {
        assert!(!text.contains("PRIVATE KEY"), "{text}");
    }
    for text in responses.iter().chain(&audit).chain(&pages) {
        for line in &secret_lines {
            assert!(!text.contains(line), "a private key line leaked: {text}");
        }
    }
}
