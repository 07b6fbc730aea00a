//! The digest ticker in process: content built from the week's figures, one delivery per
//! opted-in admin, zero-recipient weeks, a bad org isolated, forced resends, and the worker
//! sending a digest as text + HTML.

use app::digest::{resend, tick, Resent, Templates, CHUNK, MANUAL_KEY_MAX_AGE_SECONDS};
use app::domain::{JobId, Role, WeekKey};
use chrono::{DateTime, TimeZone, Utc};
use sqlx::PgPool;

use crate::support::helpers::{draft, enqueue_test_mail_to, test_db};
use crate::support::org::TestOrg;

/// Monday 2026-11-30 09:30 in Berlin: the default slot (Monday 09:00) has just passed.
fn monday() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 30, 8, 30, 0).unwrap()
}

fn in_week() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 25, 10, 0, 0).unwrap()
}

/// An org with an owner, two admins (the second opted out) and a viewer, and a week with a
/// campaign, new subscribers, suppressions and an unknown delivery.
async fn busy_org(pool: &PgPool, slug: &str) -> TestOrg {
    let roles = [Role::Owner, Role::Admin, Role::Admin, Role::Viewer];
    let org_a = TestOrg::with_roles(pool, slug, &roles).await;
    let org = org_a.id.0;
    let mut c = pool.acquire().await.unwrap();
    let exec = |sql: &'static str| sqlx::query(sql);
    exec("update users set weekly_digest = false where id = $1")
        .bind(org_a.admin(1).id.0)
        .execute(&mut *c)
        .await
        .unwrap();
    let campaign = draft(&mut c, org, org_a.owner().id.0, "Launch <b>week</b>").await;
    exec(
        "update campaigns set status = 'sent', scheduled_for = $2, approver_id = $3, approved_at = $2,
                approved_version = 1, started_at = $2, finished_at = $2 where id = $1",
    )
    .bind(campaign)
    .bind(in_week())
    .bind(org_a.admin(0).id.0)
    .execute(&mut *c)
    .await
    .unwrap();
    exec("insert into progress_slots (org_id, campaign_id, slot, delivered, failed, unknown) values ($1, $2, 0, 3, 1, 0), ($1, $2, 1, 2, 0, 1)")
        .bind(org)
        .bind(campaign)
        .execute(&mut *c)
        .await
        .unwrap();
    exec("insert into subscribers (org_id, email, email_lower, created_at) values ($1, 'a@x.org', 'a@x.org', $2), ($1, 'b@x.org', 'b@x.org', $2), ($1, 'old@x.org', 'old@x.org', $2 - interval '30 days')")
        .bind(org)
        .bind(in_week())
        .execute(&mut *c)
        .await
        .unwrap();
    exec("insert into suppressions (org_id, email_lower, reason, created_at) values ($1, 'a@x.org', 'unsubscribed', $2), ($1, 'z@x.org', 'hard_bounce', $2)")
        .bind(org)
        .bind(in_week())
        .execute(&mut *c)
        .await
        .unwrap();
    // Relay reports: two bounces and a complaint in the week; an unverified complaint and one
    // of the week before do not count.
    exec("insert into delivery_events (org_id, source, provider_event_id, kind, matched_by, email_lower, effect, verified, received_at)
          values ($1, 'dsn', $3 || '1', 'hard_bounce', 'token', 'z@x.org', 'suppressed', true, $2),
                 ($1, 'ses', $3 || '2', 'hard_bounce', 'recipient', 'y@x.org', 'suppressed', true, $2),
                 ($1, 'arf', $3 || '3', 'complaint', 'token', 'w@x.org', 'suppressed', true, $2),
                 ($1, 'arf', $3 || '4', 'complaint', 'none', 'v@x.org', 'none', false, $2),
                 ($1, 'dsn', $3 || '5', 'hard_bounce', 'token', 'u@x.org', 'suppressed', true, $2 - interval '8 days')")
        .bind(org)
        .bind(in_week())
        .bind(slug.to_string())
        .execute(&mut *c)
        .await
        .unwrap();
    drop(c);
    let jobs = enqueue_test_mail_to(pool, org, "wk", &["lost@x.org".to_string()]).await;
    sqlx::query("update deliveries set status = 'unknown', finished_at = $2 where job_id = $1")
        .bind(&jobs[0])
        .bind(in_week())
        .execute(pool)
        .await
        .unwrap();
    org_a
}

async fn digest_jobs(pool: &PgPool, org: i64) -> Vec<(String, String)> {
    sqlx::query_as(
        "select job_id, recipient from deliveries where org_id = $1 and kind = 'digest' order by recipient",
    )
    .bind(org)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_tick_reports_the_week_and_queues_one_digest_per_opted_in_admin() {
    let pool = test_db().await;
    let acme = busy_org(&pool, "acme").await;
    let org = acme.id.0;

    let report = tick(&pool, Some(monday()), CHUNK, Templates::builtin())
        .await
        .unwrap();
    assert_eq!(
        (report.claimed, report.skipped, report.recipients),
        (1, 0, 2)
    );
    assert!(report.failed_orgs.is_empty());

    // Opt-out first: the owner and the opted-in admin; not the opted-out admin, not the viewer.
    let jobs = digest_jobs(&pool, org).await;
    let recipients: Vec<&str> = jobs.iter().map(|j| j.1.as_str()).collect();
    assert_eq!(
        recipients,
        vec![acme.admin(0).email.as_str(), acme.owner().email.as_str()]
    );
    for (job, _) in &jobs {
        match job.parse::<JobId>().unwrap() {
            JobId::Digest {
                org_id, week_key, ..
            } => assert_eq!(
                (org_id, week_key.to_string()),
                (org, "2026-W49".to_string())
            ),
            other => panic!("not a digest job: {other:?}"),
        }
    }

    let (subject, html, text, count): (String, String, String, i32) = sqlx::query_as(
        "select subject, content_html, content_text, recipient_count from digest_sends where org_id = $1",
    )
    .bind(org)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(count, 2);
    assert_eq!(subject, "Weekly digest for acme: 23 Nov – 30 Nov 2026");
    for expected in [
        "Mon 23 Nov 2026 09:00 – Mon 30 Nov 2026 09:00 (Europe/Berlin)",
        "Campaigns sent: 1",
        "Launch <b>week</b> (sent): 5 delivered, 1 failed, 1 unknown, 0 suppressed",
        "Subscribers gained: 2",
        "Addresses suppressed: 2",
        "hard_bounce: 1",
        "unsubscribed: 1",
        "Deliveries needing attention: 1 (1 unknown, 0 failed)",
        "Reported by relays: 2 bounces, 0 soft bounces, 1 complaints",
    ] {
        assert!(text.contains(expected), "{expected:?} not in:\n{text}");
    }
    assert!(
        html.contains("Launch &lt;b&gt;week&lt;&#x2f;b&gt;"),
        "HTML is escaped:\n{html}"
    );
    assert!(!html.contains("<b>week"));

    // The next tick (and the next hour's) finds the week claimed: nothing new.
    let again = tick(
        &pool,
        Some(monday() + chrono::Duration::hours(1)),
        CHUNK,
        Templates::builtin(),
    )
    .await
    .unwrap();
    assert_eq!((again.claimed, again.recipients), (0, 0));
    assert_eq!(digest_jobs(&pool, org).await.len(), 2);
}

#[tokio::test]
async fn an_org_without_opted_in_admins_claims_its_week_with_zero_recipients_and_a_quiet_digest() {
    let pool = test_db().await;
    let quiet = TestOrg::with_roles(&pool, "quiet", &[Role::Owner, Role::Viewer]).await;
    let org = quiet.id.0;
    sqlx::query("update users set weekly_digest = false where org_id = $1")
        .bind(org)
        .execute(&pool)
        .await
        .unwrap();
    let report = tick(&pool, Some(monday()), CHUNK, Templates::builtin())
        .await
        .unwrap();
    assert_eq!((report.claimed, report.recipients), (1, 0));
    let (kind, count, text): (String, i32, String) = sqlx::query_as(
        "select kind, recipient_count, content_text from digest_sends where org_id = $1",
    )
    .bind(org)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((kind.as_str(), count), ("scheduled", 0));
    assert!(text.contains("A quiet week"), "{text}");
    assert!(digest_jobs(&pool, org).await.is_empty());
}

#[tokio::test]
async fn an_org_whose_digest_cannot_be_built_does_not_stop_the_others() {
    let pool = test_db().await;
    let good1 = TestOrg::with_roles(&pool, "good1", &[Role::Owner]).await;
    let broken = TestOrg::with_roles(&pool, "broken", &[Role::Owner]).await;
    let bad = broken.id.0;
    let good2 = TestOrg::with_roles(&pool, "good2", &[Role::Owner]).await;
    // A template that fails for one org only (an undefined function is an error).
    let failing = Templates::new(
        "{% if org_name == 'broken' %}{{ explode() }}{% endif %}ok",
        "ok",
    )
    .unwrap();
    let report = tick(&pool, Some(monday()), CHUNK, &failing).await.unwrap();
    assert_eq!(report.failed_orgs, vec![bad]);
    assert_eq!((report.claimed, report.recipients), (2, 2));
    for org in [good1.id.0, good2.id.0] {
        assert_eq!(digest_jobs(&pool, org).await.len(), 1);
    }
    // The bad org claimed nothing (its build rolled back) and is built by the next tick.
    assert!(digest_jobs(&pool, bad).await.is_empty());
    let next = tick(&pool, Some(monday()), CHUNK, Templates::builtin())
        .await
        .unwrap();
    assert_eq!((next.claimed, next.recipients), (1, 1));
    assert_eq!(digest_jobs(&pool, bad).await.len(), 1);
}

#[tokio::test]
async fn a_monday_resend_sends_once_per_dialog_refuses_stale_keys_and_blocks_no_scheduled_week() {
    let pool = test_db().await;
    let acme = busy_org(&pool, "acme").await;
    let org = acme.id.0;
    let (owner, opted_out) = (acme.owner().id.0, acme.admin(1).id.0);
    let t = Templates::builtin();
    // Monday 2026-11-30 10:00 in Berlin, an hour after the slot, before any tick ran.
    let at = Utc.with_ymd_and_hms(2026, 11, 30, 9, 0, 0).unwrap();
    // Dialog keys as the server issues them: the second they were shown, and a nonce.
    let dialog = |seconds: i64, nonce: u64| WeekKey::manual(seconds, nonce);
    let key = dialog(at.timestamp(), 1);
    let send = |user: i64, key: &WeekKey, only_me: bool| {
        resend(&pool, org, user, key.clone(), only_me, Some(at), t)
    };

    let first = send(owner, &key, false).await.unwrap();
    let Resent::Sent { id, recipients } = first else {
        panic!("{first:?}")
    };
    assert_eq!(recipients, 2, "opt-outs are respected");
    // The same dialog submitted again: the same resend, nothing new.
    assert_eq!(
        send(owner, &key, false).await.unwrap(),
        Resent::AlreadySent { id }
    );
    // The same key under another choice is told, not silently merged.
    assert_eq!(
        send(opted_out, &key, true).await.unwrap(),
        Resent::TakenByAnother
    );
    assert_eq!(digest_jobs(&pool, org).await.len(), 2);
    let manual_key = key.to_string();
    assert!(digest_jobs(&pool, org)
        .await
        .iter()
        .all(|j| j.0.contains(&format!(":{manual_key}:"))));
    // Too old, or from the future: refused, nothing stored.
    let stale = dialog(at.timestamp() - MANUAL_KEY_MAX_AGE_SECONDS - 5, 3);
    assert_eq!(send(owner, &stale, false).await.unwrap(), Resent::Expired);
    let future = dialog(at.timestamp() + 120, 4);
    assert_eq!(send(owner, &future, false).await.unwrap(), Resent::Future);

    // "Only me" goes to the admin who asked, even one who opted out of the weekly digest.
    let key2 = dialog(at.timestamp() - 1, 5);
    let Resent::Sent { recipients, .. } = send(opted_out, &key2, true).await.unwrap() else {
        panic!("only-me resend refused")
    };
    assert_eq!(recipients, 1);
    let (covers, who, only_me, audit): (String, i64, bool, i64) = sqlx::query_as(
        "select d.covers_week, d.triggered_by, d.only_me,
                (select count(*) from audit_log a where a.action = 'digest.resend' and a.object_id = d.id::text and a.actor_id = d.triggered_by)
         from digest_sends d where d.week_key = $1",
    )
    .bind(key2.to_string())
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (covers.as_str(), who, only_me, audit),
        ("2026-W49", opted_out, true, 1)
    );

    // This week's scheduled digest still goes out after the Monday resends, and so does the
    // next week's.
    let report = tick(&pool, Some(at + chrono::Duration::minutes(30)), CHUNK, t)
        .await
        .unwrap();
    assert_eq!((report.claimed, report.recipients), (1, 2));
    let next_monday = Utc.with_ymd_and_hms(2026, 12, 7, 8, 30, 0).unwrap();
    let report = tick(&pool, Some(next_monday), CHUNK, t).await.unwrap();
    assert_eq!((report.claimed, report.recipients), (1, 2));
    let weeks: Vec<(String, String)> = sqlx::query_as(
        "select kind, covers_week from digest_sends where org_id = $1 order by kind, covers_week",
    )
    .bind(org)
    .fetch_all(&pool)
    .await
    .unwrap();
    let want = [
        ("manual", "2026-W49"),
        ("manual", "2026-W49"),
        ("scheduled", "2026-W49"),
        ("scheduled", "2026-W50"),
    ];
    assert_eq!(weeks, want.map(|(k, w)| (k.to_string(), w.to_string())));

    // Another dialog opened in the same second as the first has its own key: it sends too.
    let same_second = dialog(at.timestamp(), 2);
    assert!(matches!(
        send(owner, &same_second, false).await.unwrap(),
        Resent::Sent { recipients: 2, .. }
    ));
}

#[tokio::test]
async fn an_org_failing_on_the_database_is_narrowed_down_and_the_rest_of_its_chunk_is_sent() {
    let pool = test_db().await;
    let mut orgs = Vec::new();
    for slug in ["a", "b", "c", "d", "e"] {
        orgs.push(TestOrg::with_roles(&pool, slug, &[Role::Owner]).await.id.0);
    }
    let bad = orgs[3];
    // A statement error for one org only: its deliveries cannot be written.
    sqlx::raw_sql(&format!(
        "create function refuse_org() returns trigger language plpgsql as $$
         begin if new.org_id = {bad} then raise exception 'org {bad} refused'; end if; return new; end $$;
         create trigger refuse_org before insert on deliveries for each row execute function refuse_org();"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let report = tick(&pool, Some(monday()), CHUNK, Templates::builtin())
        .await
        .unwrap();
    assert_eq!(report.failed_orgs, vec![bad]);
    assert_eq!((report.claimed, report.recipients), (4, 4));
    let claimed: Vec<i64> = sqlx::query_scalar("select org_id from digest_sends order by org_id")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(claimed, [orgs[0], orgs[1], orgs[2], orgs[4]]);
}

#[tokio::test]
async fn the_worker_sends_a_digest_as_text_and_html_with_its_own_message_id() {
    use mailroom::workers::delivery::Worker;
    let pool = test_db().await;
    let acme = busy_org(&pool, "acme").await;
    let org = acme.id.0;
    tick(&pool, Some(monday()), CHUNK, Templates::builtin())
        .await
        .unwrap();
    sqlx::query("delete from deliveries where kind = 'test'")
        .execute(&pool)
        .await
        .unwrap();
    let sink = testkit::SmtpSink::start();
    let mut worker = Worker::new(
        pool.clone(),
        crate::support::fixtures::config(&sink),
        "digest",
    );
    while worker.drain().await.unwrap() > 0 {}
    let got = sink.messages();
    assert_eq!(got.len(), 2);
    let owner = got
        .iter()
        .find(|m| m.to == [acme.owner().email.clone()])
        .expect("the owner's digest");
    assert!(
        owner.data.contains("Subject: Weekly digest for acme"),
        "{}",
        owner.data
    );
    assert!(owner.data.contains("multipart/alternative"));
    assert!(
        owner.data.contains("Content-Type: text/plain")
            && owner.data.contains("Content-Type: text/html")
    );
    let job = JobId::Digest {
        org_id: org,
        week_key: "2026-W49".parse().unwrap(),
        user_id: acme.owner().id.0,
    };
    assert!(
        owner.message_id().contains(&job.message_id("acme.example")),
        "{}",
        owner.message_id()
    );
    let delivered: i64 = sqlx::query_scalar(
        "select count(*) from deliveries where kind = 'digest' and status = 'delivered'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(delivered, 2);
}
