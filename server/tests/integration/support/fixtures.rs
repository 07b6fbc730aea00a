//! Fixtures several test modules share: a campaign's audience and its approval, campaign
//! deliveries in a given state, the delivery worker's test configurations, running a campaign to
//! its end, and the check of a command's one-line error.

use std::time::Duration;

use app::db::audience;
use app::db::delivery::NewDelivery;
use app::domain::{
    Backoff, CampaignId, EmailAddress, JobId, OrgId, Reference, SubscriberId, Transition,
};
use mailroom::smtp::Target;
use mailroom::workers::campaign::{self, Config as CampaignConfig};
use mailroom::workers::delivery::{Config, Links, Transport, Worker};
use mailroom::workers::progress::Notifier;
use sqlx::PgPool;

use testkit::SmtpSink;

/// `n` subscribers over three overlapping lists; every 10th address also exists as a second,
/// upper-cased subscriber row on another list. Returns (list ids, distinct addresses).
pub(crate) async fn audience_of(pool: &PgPool, org: i64, n: usize) -> (Vec<i64>, usize) {
    let mut tx = pool.begin().await.unwrap();
    let mut lists = Vec::new();
    for name in ["news", "product", "events"] {
        lists.push(audience::create_list(&mut tx, org, name).await.unwrap());
    }
    let people: Vec<(EmailAddress, String)> = (0..n)
        .map(|i| {
            (
                EmailAddress::parse(&format!("p{i}@example.org")).unwrap(),
                format!("Person {i}"),
            )
        })
        .collect();
    let ids = audience::insert_subscribers(&mut tx, org, &people)
        .await
        .unwrap();
    let variants: Vec<(EmailAddress, String)> = (0..n)
        .step_by(10)
        .map(|i| {
            (
                EmailAddress::parse(&format!("P{i}@EXAMPLE.org")).unwrap(),
                format!("Variant {i}"),
            )
        })
        .collect();
    let variant_ids = audience::insert_subscribers(&mut tx, org, &variants)
        .await
        .unwrap();
    for (i, id) in ids.iter().enumerate() {
        audience::add_members(&mut tx, org, lists[i % 3], &[*id])
            .await
            .unwrap();
        if i % 4 == 0 {
            audience::add_members(&mut tx, org, lists[(i + 1) % 3], &[*id])
                .await
                .unwrap();
        }
    }
    for (k, id) in variant_ids.iter().enumerate() {
        audience::add_members(&mut tx, org, lists[(k + 2) % 3], &[*id])
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    (lists, n)
}

/// A campaign to `lists` with `body`, submitted by `author` and approved by `approver` to go
/// out now (the tuple form of [`crate::support::org::TestOrg::campaign`]).
pub(crate) async fn approved(
    pool: &PgPool,
    org: i64,
    author: i64,
    approver: i64,
    audience: &app::db::campaign::edit::Audience,
    body: &str,
) -> i64 {
    let mut tx = pool.begin().await.unwrap();
    let id = app::db::campaign::create_draft(
        &mut tx,
        app::db::campaign::NewDraft {
            org_id: org,
            author_id: author,
            name: "Launch",
            subject: "Hello {{ name }}",
            body,
            list_ids: &[],
        },
    )
    .await
    .unwrap();
    let (org, id) = (app::domain::OrgId(org), app::domain::CampaignId(id));
    app::db::campaign::edit::set_audience(&mut tx, org, id, audience)
        .await
        .unwrap();
    app::db::campaign::states::change(&mut tx, org, id, Transition::Submit)
        .await
        .unwrap();
    let approver = app::domain::UserId(approver);
    app::db::campaign::states::approve(&mut tx, org, id, approver, 1)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    id.0
}

/// The campaign worker's test configuration: small batches, a one-second tick.
pub(crate) fn cfg() -> CampaignConfig {
    CampaignConfig {
        tick: Duration::from_secs(1),
        batch: 20,
        watermark: 200,
    }
}

/// A campaign's status, read straight from its row.
pub(crate) async fn status(pool: &PgPool, id: i64) -> String {
    sqlx::query_scalar("select status from campaigns where id = $1")
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Campaign rounds and delivery rounds in turn until the campaign leaves `sending`.
pub(crate) async fn run_to_end(pool: &PgPool, id: i64, sink: &SmtpSink) {
    let mut worker = Worker::new(pool.clone(), config(sink), "inproc");
    let notifier = Notifier::default();
    for _ in 0..2000 {
        campaign::round(pool, &cfg(), &notifier).await.unwrap();
        if status(pool, id).await != "sending" {
            return;
        }
        worker.drain().await.unwrap();
    }
    panic!("campaign {id} did not finish");
}

/// A campaign in `status` with these subscribers, and their queued deliveries in order.
pub(crate) async fn campaign_deliveries(
    pool: &PgPool,
    org: i64,
    author: i64,
    status: &str,
    emails: &[String],
) -> (i64, Vec<String>) {
    let mut tx = pool.begin().await.unwrap();
    let rows: Vec<(EmailAddress, String)> = emails
        .iter()
        .map(|e| (EmailAddress::parse(e).unwrap(), String::new()))
        .collect();
    let subs = app::db::audience::insert_subscribers(&mut tx, org, &rows)
        .await
        .unwrap();
    let cid = crate::support::helpers::draft(&mut tx, org, author, "C").await;
    sqlx::query(
        "update campaigns set status = $2, scheduled_for = now(), approver_id = author_id, approved_at = now(),
                approved_version = 1, self_approved = true where id = $1",
    )
    .bind(cid)
    .bind(status)
    .execute(&mut *tx)
    .await
    .unwrap();
    let mut jobs = Vec::new();
    for ((to, _), sub) in rows.iter().zip(subs) {
        let job = JobId::Campaign {
            campaign_id: cid,
            subscriber_id: sub,
        };
        let d = NewDelivery {
            job: &job,
            org: OrgId(org),
            recipient: to,
            reference: Reference::Campaign {
                campaign: CampaignId(cid),
                version: 1,
                subscriber: SubscriberId(sub),
            },
        };
        app::db::delivery::enqueue(&mut tx, d).await.unwrap();
        jobs.push(job.to_string());
    }
    tx.commit().await.unwrap();
    (cid, jobs)
}

/// The test configuration, sending to `sink`.
pub(crate) fn config(sink: &SmtpSink) -> Config {
    Config {
        transport: Transport::Smtp(Target::plain(
            sink.addr.ip().to_string(),
            sink.addr.port(),
            "mailroom.test",
            Duration::from_secs(5),
        )),
        connections: 4,
        batch: 20,
        ..config_for_capture(std::path::PathBuf::new())
    }
}

/// The delivery worker's test configuration, capturing mail into `dir`.
pub(crate) fn config_for_capture(dir: std::path::PathBuf) -> Config {
    Config {
        transport: Transport::Capture(dir),
        connections: 3,
        batch: 10,
        lease_seconds: 60.0,
        idle: Duration::from_millis(20),
        backoff: Backoff::default(),
        message_id_domain: Some("acme.example".into()),
        rate_per_second: None,
        links: Links {
            public_url: "http://mailroom.test".into(),
            keys: crate::support::helpers::test_keys(),
        },
        progress: Default::default(),
        held: Default::default(),
        breaker: Default::default(),
        marks_ahead: 1,
        outcome_gather: std::time::Duration::ZERO,
    }
}

/// stderr has exactly one line (the error), which contains every needle.
pub(crate) fn one_line_naming(stderr: &str, needles: &[&str]) {
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line, got:\n{stderr}");
    for n in needles {
        assert!(lines[0].contains(n), "{n:?} missing from: {}", lines[0]);
    }
}

/// Test mails to `<local>@<domain>` in the given states; returns their job ids.
pub(crate) async fn test_mail_in_states(
    pool: &PgPool,
    org: i64,
    domain: &str,
    rows: &[(&str, app::domain::DeliveryStatus, Option<&str>)],
) -> Vec<String> {
    let mut tx = pool.begin().await.unwrap();
    let mut ids = Vec::new();
    for (local, status, reply) in rows {
        let to = EmailAddress::parse(&format!("{local}@{domain}")).unwrap();
        let job = JobId::test(1, 1, &format!("t{org}"), &to).unwrap();
        let d = app::db::demo::DemoDelivery {
            job: &job,
            recipient: &to,
            status: *status,
            attempt: 1,
            last_error: (*status == app::domain::DeliveryStatus::Unknown)
                .then_some("lost in flight"),
            smtp_reply: *reply,
        };
        app::db::demo::delivery(&mut tx, org, d).await.unwrap();
        ids.push(job.to_string());
    }
    tx.commit().await.unwrap();
    ids
}

/// A test message to queue.
pub fn test_mail<'a>(job: &'a JobId, org: i64, to: &'a EmailAddress) -> NewDelivery<'a> {
    NewDelivery {
        job,
        org: OrgId(org),
        recipient: to,
        reference: Reference::of_test(job).expect("a test job"),
    }
}
