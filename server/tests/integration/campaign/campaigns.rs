//! The campaign engine in process, on a real PostgreSQL and a real SMTP server: one start per
//! campaign, idempotent materialisation, the claim-time suppression re-check after a pause,
//! cancel, and counter slots that equal `count(*)`.

use std::collections::HashMap;

use app::db::audience;
use app::domain::{EmailAddress, Transition};
use mailroom::workers::campaign;
use mailroom::workers::delivery::Worker;
use mailroom::workers::progress::Notifier;
use sqlx::PgPool;

use crate::support::fixtures::{cfg, run_to_end, status};
use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use testkit::SmtpSink;

async fn slots_equal_counts(pool: &PgPool, org: i64, id: i64) {
    let (org, id) = (app::domain::OrgId(org), app::domain::CampaignId(id));
    let mut c = pool.acquire().await.unwrap();
    let slots = app::db::campaign::slots::progress(&mut c, org, id)
        .await
        .unwrap();
    let counted = app::db::campaign::slots::counted(&mut c, id).await.unwrap();
    assert_eq!(slots, counted, "counter slots vs count(*)");
}

#[tokio::test]
async fn a_campaign_being_started_is_passed_by_other_workers_not_waited_for() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    let (lists, n) = acme.audience(50).await;
    let cid = acme.campaign().to(&lists).approved().await;
    let id = cid.0;
    // The winner holds its start uncommitted, as during a long materialisation.
    let mut winner = pool.begin().await.unwrap();
    assert!(app::db::campaign::states::start(&mut winner, cid)
        .await
        .unwrap());
    let others = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        campaign::start_due(&pool),
    )
    .await
    .expect("another worker waited for the winner's transaction")
    .unwrap();
    assert!(others.is_empty(), "{others:?}");
    assert_eq!(
        app::db::campaign::sends::materialise(&mut winner, acme.id, cid)
            .await
            .unwrap(),
        n as i64
    );
    app::db::campaign::states::materialized(&mut winner, cid, n as i64)
        .await
        .unwrap();
    winner.commit().await.unwrap();
    assert!(
        campaign::start_due(&pool).await.unwrap().is_empty(),
        "started once"
    );
    slots_equal_counts(&pool, org, id).await;
}

#[tokio::test]
async fn two_racing_workers_start_a_campaign_once_and_build_one_send_per_address() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    let (lists, n) = acme.audience(500).await;
    let cid = acme.campaign().to(&lists).approved().await;
    let id = cid.0;
    // The oldest row wins, not the lowest id: this variant was added later but dates earlier.
    sqlx::query("update subscribers set created_at = now() - interval '1 day' where email = 'P20@EXAMPLE.org'")
        .execute(&pool)
        .await
        .unwrap();
    let racers = (0..2).map(|_| {
        let pool = pool.clone();
        tokio::spawn(async move { campaign::start_due(&pool).await.unwrap() })
    });
    let started: Vec<campaign::Started> = futures::future::join_all(racers)
        .await
        .into_iter()
        .flat_map(|r| r.unwrap())
        .collect();
    assert_eq!(
        started,
        vec![campaign::Started {
            campaign: cid,
            recipients: n as i64
        }],
        "one start, one materialisation"
    );
    let (rows, distinct): (i64, i64) = sqlx::query_as(
        "select count(*), count(distinct email_lower) from sends where campaign_id = $1",
    )
    .bind(id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((rows, distinct), (n as i64, n as i64));
    // The oldest row of a case-variant pair was chosen.
    let chosen: String = sqlx::query_scalar(
        "select s.email from sends x join subscribers s on s.id = x.subscriber_id where x.campaign_id = $1 and x.email_lower = 'p10@example.org'",
    )
    .bind(id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(chosen, "p10@example.org");
    let chosen: String = sqlx::query_scalar(
        "select s.email from sends x join subscribers s on s.id = x.subscriber_id where x.campaign_id = $1 and x.email_lower = 'p20@example.org'",
    )
    .bind(id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(chosen, "P20@EXAMPLE.org", "the row created first is chosen");

    // Rerun after the chosen row left its lists and a new case variant joined: nothing new.
    // (Not deleting the subscriber row: a send's foreign key keeps a row that was sent to, so
    // leaving every list is the deletion this schema allows.)
    sqlx::query("delete from list_members where subscriber_id = (select id from subscribers where email = 'p10@example.org')")
        .execute(&pool)
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    let newcomer = audience::insert_subscribers(
        &mut tx,
        org,
        &[(
            EmailAddress::parse("p10@Example.ORG").unwrap(),
            "New".into(),
        )],
    )
    .await
    .unwrap();
    audience::add_members(&mut tx, org, lists[0], &newcomer)
        .await
        .unwrap();
    assert_eq!(
        app::db::campaign::sends::materialise(&mut tx, acme.id, cid)
            .await
            .unwrap(),
        0
    );
    tx.commit().await.unwrap();
    slots_equal_counts(&pool, org, id).await;
}

#[tokio::test]
async fn a_campaign_without_recipients_is_sent_at_once() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let empty = acme.list("empty").await;
    let cid = acme.campaign().to(&[empty]).approved().await;
    let id = cid.0;
    assert_eq!(
        campaign::start_due(&pool).await.unwrap(),
        vec![campaign::Started {
            campaign: cid,
            recipients: 0
        }]
    );
    assert_eq!(status(&pool, id).await, "sent");
}

#[tokio::test]
async fn an_address_suppressed_while_paused_never_arrives_and_resume_finishes_the_rest() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    let (lists, n) = acme.audience(200).await;
    let cid = acme
        .campaign()
        .to(&lists)
        .body("Dear {{ name }}, see {{ unsubscribe_url }}")
        .approved()
        .await;
    let id = cid.0;
    let sink = SmtpSink::start();
    campaign::start_due(&pool).await.unwrap();
    app::db::campaign::sends::hand_off(&pool, 20, 1000, 8)
        .await
        .unwrap();
    let mut c = pool.acquire().await.unwrap();
    app::db::campaign::states::change(&mut c, acme.id, cid, Transition::Pause)
        .await
        .unwrap();
    // Pausing twice is refused, naming the state.
    let again = app::db::campaign::states::change(&mut c, acme.id, cid, Transition::Pause)
        .await
        .unwrap_err();
    assert!(again.to_string().contains("it is paused"), "{again}");
    let victim: String = sqlx::query_scalar(
        "select email_lower from sends where campaign_id = $1 and status = 'queued' order by id desc limit 1",
    )
    .bind(id)
    .fetch_one(&mut *c)
    .await
    .unwrap();
    audience::suppress(
        &mut c,
        org,
        &EmailAddress::parse(&victim).unwrap(),
        app::domain::SuppressionReason::Unsubscribed,
        "test",
    )
    .await
    .unwrap();
    // While paused, the delivery worker takes nothing of this campaign.
    let mut worker = Worker::new(
        pool.clone(),
        crate::support::fixtures::config(&sink),
        "paused",
    );
    assert_eq!(worker.drain().await.unwrap(), 0);
    assert!(sink.messages().is_empty());
    app::db::campaign::states::change(&mut c, acme.id, cid, Transition::Resume)
        .await
        .unwrap();
    drop(c);
    run_to_end(&pool, id, &sink).await;

    assert_eq!(status(&pool, id).await, "sent");
    let got = sink.messages();
    assert_eq!(got.len(), n - 1);
    assert!(
        got.iter().all(|m| m.to[0].to_lowercase() != victim),
        "the suppressed address got mail"
    );
    let mut per_address: HashMap<String, usize> = HashMap::new();
    for m in &got {
        *per_address.entry(m.to[0].to_lowercase()).or_default() += 1;
    }
    assert!(
        per_address.values().all(|&k| k == 1),
        "an address got two messages"
    );
    // Per-recipient fields were filled in.
    let one = got.iter().find(|m| m.to[0] == "p7@example.org").unwrap();
    assert!(
        one.data.contains("Subject: Hello Person 7")
            && one
                .data
                .contains("Dear Person 7, see http://mailroom.test/"),
        "{}",
        one.data
    );
    slots_equal_counts(&pool, org, id).await;
}

#[tokio::test]
async fn after_a_cancel_nothing_queued_is_sent_and_the_counts_add_up() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    let (lists, n) = acme.audience(300).await;
    let cid = acme.campaign().to(&lists).approved().await;
    let id = cid.0;
    let sink = SmtpSink::start();
    campaign::start_due(&pool).await.unwrap();
    app::db::campaign::sends::hand_off(&pool, 40, 1000, 8)
        .await
        .unwrap();
    let mut worker = Worker::new(pool.clone(), crate::support::fixtures::config(&sink), "c");
    worker.drain().await.unwrap();
    let mut c = pool.acquire().await.unwrap();
    app::db::campaign::states::change(&mut c, acme.id, cid, Transition::Cancel)
        .await
        .unwrap();
    drop(c);
    let sent_before = sink.messages().len();
    assert!(sent_before > 0 && sent_before < n);
    let notifier = Notifier::default();
    for _ in 0..5 {
        campaign::round(&pool, &cfg(), &notifier).await.unwrap();
        while worker.drain().await.unwrap() > 0 {}
    }
    assert_eq!(
        sink.messages().len(),
        sent_before,
        "nothing was sent after the cancel"
    );
    assert_eq!(status(&pool, id).await, "cancelled");
    let mut c = pool.acquire().await.unwrap();
    let p = app::db::campaign::slots::counted(&mut c, cid)
        .await
        .unwrap();
    assert_eq!(p.queued, 0);
    assert_eq!(p.delivered as usize, sent_before);
    assert_eq!((p.delivered + p.cancelled) as usize, n, "{p:?}");
    slots_equal_counts(&pool, org, id).await;
}

#[tokio::test]
async fn the_leader_reconciles_a_finished_campaigns_slots_once() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    let (lists, n) = acme.audience(50).await;
    let cid = acme.campaign().to(&lists).approved().await;
    let id = cid.0;
    let sink = SmtpSink::start();
    run_to_end(&pool, id, &sink).await;
    // Damage the slots as a lost increment would, then let the leader's job run.
    sqlx::query("update progress_slots set delivered = delivered + 7 where campaign_id = $1 and slot = (select min(slot) from progress_slots where campaign_id = $1)")
        .bind(id)
        .execute(&pool)
        .await
        .unwrap();
    let lease = app::db::leader::acquire(&pool, "leader", "me", 30.0)
        .await
        .unwrap()
        .unwrap();
    let mut c = pool.acquire().await.unwrap();
    assert_eq!(
        app::db::campaign::slots::to_reconcile(&mut c, 10)
            .await
            .unwrap(),
        vec![cid]
    );
    // A change to a delivery and its slot (as an operator's retry makes) is in flight while
    // the reconcile runs, and commits after it read the rows: its increment must survive.
    let mut other = pool.begin().await.unwrap();
    sqlx::query("update deliveries set status = 'failed' where job_id = (select job_id from deliveries where campaign_id = $1 and status = 'delivered' order by job_id limit 1)")
        .bind(id)
        .execute(&mut *other)
        .await
        .unwrap();
    sqlx::query("update progress_slots set delivered = delivered - 1, failed = failed + 1 where campaign_id = $1 and slot = (select min(slot) from progress_slots where campaign_id = $1)")
        .bind(id)
        .execute(&mut *other)
        .await
        .unwrap();
    let reconciling = tokio::spawn({
        let pool = pool.clone();
        async move {
            let mut tx = pool.begin().await.unwrap();
            let r = app::db::campaign::slots::reconcile(&mut tx, cid, &lease)
                .await
                .unwrap();
            tx.commit().await.unwrap();
            r
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    other.commit().await.unwrap();
    let (before, after) = reconciling.await.unwrap().unwrap();
    assert_eq!(
        (before.delivered - after.delivered, after.delivered as usize),
        (7, n),
        "read before the other change committed"
    );
    slots_equal_counts(&pool, org, id).await;
    assert!(
        app::db::campaign::slots::to_reconcile(&mut c, 10)
            .await
            .unwrap()
            .is_empty(),
        "once"
    );
}

#[tokio::test]
async fn the_leader_purges_campaigns_binned_longer_than_the_retention_with_their_records() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    let (lists, n) = acme.audience(30).await;
    let old_id = acme.campaign().to(&lists).approved().await;
    let old = old_id.0;
    let sink = SmtpSink::start();
    run_to_end(&pool, old, &sink).await;
    let mut tx = pool.begin().await.unwrap();
    let recent =
        crate::support::helpers::draft(&mut tx, org, acme.owner().id.0, "Deleted yesterday").await;
    app::db::campaign::bin::delete(&mut tx, acme.id, old_id)
        .await
        .unwrap();
    let recent_id = app::domain::CampaignId(recent);
    app::db::campaign::bin::delete(&mut tx, acme.id, recent_id)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    for (id, age) in [(old, "31 days"), (recent, "1 day")] {
        sqlx::query("update campaigns set deleted_at = now() - $2::interval where id = $1")
            .bind(id)
            .bind(age)
            .execute(&pool)
            .await
            .unwrap();
    }
    let rows = |id: i64| {
        let pool = pool.clone();
        async move {
            sqlx::query_as::<_, (i64, i64, i64)>(
                "select (select count(*) from campaigns where id = $1),
                        (select count(*) from sends where campaign_id = $1),
                        (select count(*) from deliveries where campaign_id = $1)",
            )
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    assert_eq!(rows(old).await, (1, n as i64, n as i64));

    // A leader whose lease another replica took over purges nothing.
    let stale = app::db::leader::acquire(&pool, "leader", "old", 30.0)
        .await
        .unwrap()
        .unwrap();
    sqlx::query("update leader_lease set expires_at = now() - interval '1 second'")
        .execute(&pool)
        .await
        .unwrap();
    let lease = app::db::leader::acquire(&pool, "leader", "me", 30.0)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        app::db::campaign::bin::purge(&pool, &stale, 30.0, 7)
            .await
            .unwrap(),
        0
    );
    // In batches of 7 until nothing is left.
    let mut steps = 0;
    while app::db::campaign::bin::purge(&pool, &lease, 30.0, 7)
        .await
        .unwrap()
        > 0
    {
        steps += 1;
        assert!(steps < 100, "the purge does not end");
    }
    assert!(steps >= 5, "batched: {steps} steps");
    assert_eq!(rows(old).await, (0, 0, 0), "purged with its records");
    assert_eq!(rows(recent).await.0, 1, "a day in the bin is kept");
}
