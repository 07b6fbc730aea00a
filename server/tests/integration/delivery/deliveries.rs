//! The delivery queue's database guarantees, raced and faulted on a real PostgreSQL.

use std::collections::HashSet;
use std::time::Duration;

use app::db::delivery::{NewDelivery, Outcome};
use app::domain::{CampaignId, DigestSendId, EmailAddress, JobId, OrgId, Reference, Role, UserId};
use sqlx::PgPool;

use crate::support::fixtures::{campaign_deliveries, test_mail};
use crate::support::helpers::test_db;
use crate::support::org::TestOrg;

async fn enqueue_test_mail(pool: &PgPool, org: i64, n: usize) -> Vec<String> {
    let addresses: Vec<String> = (0..n).map(|i| format!("r{i}@example.org")).collect();
    crate::support::helpers::enqueue_test_mail_to(pool, org, "dlg", &addresses).await
}

/// A campaign in `status` with one subscriber, and its queued delivery.
async fn campaign_delivery(
    pool: &PgPool,
    org: i64,
    author: i64,
    status: &str,
    email: &str,
) -> String {
    campaign_deliveries(pool, org, author, status, &[email.to_string()])
        .await
        .1
        .remove(0)
}

/// Leadership for the reaper (a leader job).
async fn lead(pool: &PgPool) -> app::db::leader::Lease {
    app::db::leader::acquire(pool, "leader", "test", 60.0)
        .await
        .unwrap()
        .expect("nobody else leads in this database")
}

/// One reaper pass as the leader: (requeued, made unknown).
async fn reap(pool: &PgPool) -> (i64, i64) {
    let t = app::db::delivery::reap_expired(pool, &lead(pool).await)
        .await
        .unwrap();
    (t.requeued, t.unknown)
}

/// The state a delivery shows and the attempt it is at: one in flight (`queued` in the table,
/// off the queue) shows `sending` at the attempt its claim holds.
async fn status_of(pool: &PgPool, job: &str) -> (String, i32) {
    sqlx::query_as(
        "select case when sending then 'sending' else status end, attempt + sending::int
         from (select d.status, d.attempt,
                      d.status = 'queued'
                        and not exists (select 1 from delivery_queue q where q.job_id = d.job_id) as sending
               from deliveries d where d.job_id = $1) d",
    )
    .bind(job)
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn expire_leases(pool: &PgPool) {
    sqlx::query("update delivery_claims set lease_until = now() - interval '1 second'")
        .execute(pool)
        .await
        .unwrap();
}

#[tokio::test]
async fn enqueueing_the_same_job_twice_stores_one_row() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let to = EmailAddress::parse("a@example.org").unwrap();
    let job = JobId::test(1, 1, "dlg", &to).unwrap();
    let mut conn = pool.acquire().await.unwrap();
    let d = || test_mail(&job, org, &to);
    assert!(app::db::delivery::enqueue(&mut conn, d()).await.unwrap());
    assert!(!app::db::delivery::enqueue(&mut conn, d()).await.unwrap());
    let n: i64 = sqlx::query_scalar("select count(*) from deliveries")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n, 1);
}

#[tokio::test]
async fn a_claimed_row_that_does_not_decode_fails_for_good_and_holds_up_nothing() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let mut conn = pool.acquire().await.unwrap();
    let mut jobs = Vec::new();
    for to in ["good@example.org", "bad@example.org"] {
        let to = EmailAddress::parse(to).unwrap();
        let job = JobId::test(1, 1, "dlg", &to).unwrap();
        assert!(
            app::db::delivery::enqueue(&mut conn, test_mail(&job, org, &to))
                .await
                .unwrap()
        );
        jobs.push(job.to_string());
    }
    // A row written around `enqueue`: its recipient is no address.
    sqlx::query("update deliveries set recipient = 'not an address' where job_id = $1")
        .bind(&jobs[1])
        .execute(&pool)
        .await
        .unwrap();
    let claimed = app::db::delivery::claim(&pool, 10, 60.0, "t")
        .await
        .unwrap();
    assert_eq!(
        claimed.iter().map(|c| c.job_id()).collect::<Vec<_>>(),
        vec![jobs[0].clone()],
        "the good row still comes"
    );
    assert_eq!(claimed[0].recipient.as_str(), "good@example.org");
    assert_eq!(
        status_of(&pool, &jobs[1]).await,
        ("failed".to_string(), 1),
        "failed for good, not left to come back with every lease"
    );
    let reply: String = sqlx::query_scalar("select smtp_reply from deliveries where job_id = $1")
        .bind(&jobs[1])
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(reply.contains("cannot be read"), "{reply}");
}

/// An invitation (account mail, which an unsubscribe or a manual suppression does not stop)
/// queued to an address that is also a subscriber's: (org, subscriber, job).
async fn invite_to_a_subscriber(pool: &PgPool) -> (i64, i64, JobId) {
    let acme = TestOrg::with_roles(pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let email = EmailAddress::parse("Gone@Example.org").unwrap();
    let subscriber: i64 = sqlx::query_scalar(
        "insert into subscribers (org_id, email, email_lower) values ($1, $2, $3) returning id",
    )
    .bind(org)
    .bind(email.as_str())
    .bind(email.lower())
    .fetch_one(pool)
    .await
    .unwrap();
    let job = JobId::Invite {
        org_id: org,
        user_id: acme.owner().id.0,
        token_id: 1,
    };
    let mut conn = pool.acquire().await.unwrap();
    let invite = NewDelivery {
        job: &job,
        org: OrgId(org),
        recipient: &email,
        reference: Reference::Invite {
            user: acme.owner().id,
        },
    };
    assert!(app::db::delivery::enqueue(&mut conn, invite).await.unwrap());
    (org, subscriber, job)
}

#[tokio::test]
async fn mail_of_any_kind_to_an_erased_person_is_suppressed_when_claimed() {
    let pool = test_db().await;
    let (org, subscriber, job) = invite_to_a_subscriber(&pool).await;
    let mut conn = pool.acquire().await.unwrap();
    app::db::subscribers::erase(&mut conn, org, subscriber)
        .await
        .unwrap()
        .expect("erased");
    let claimed = app::db::delivery::claim(&pool, 10, 60.0, "t")
        .await
        .unwrap();
    assert!(claimed.is_empty(), "{claimed:?}");
    assert_eq!(
        status_of(&pool, &job.to_string()).await,
        ("suppressed".to_string(), 1)
    );
}

#[tokio::test]
async fn an_erasure_between_the_claim_and_the_mark_stops_the_body() {
    let pool = test_db().await;
    let (org, subscriber, job) = invite_to_a_subscriber(&pool).await;
    let claimed = app::db::delivery::claim(&pool, 10, 60.0, "t")
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "claimed before the erasure");
    let mut conn = pool.acquire().await.unwrap();
    app::db::subscribers::erase(&mut conn, org, subscriber)
        .await
        .unwrap()
        .expect("erased");
    let held = [(claimed[0].job_id(), claimed[0].attempt)];
    let marked = app::db::delivery::mark_body_started(&mut conn, &held)
        .await
        .unwrap();
    assert!(marked.attempts.is_empty(), "the body may not start");
    assert_eq!(
        status_of(&pool, &job.to_string()).await,
        ("suppressed".to_string(), 1)
    );
}

#[tokio::test]
async fn racing_claimers_take_disjoint_batches_and_lose_nothing() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let all: HashSet<String> = enqueue_test_mail(&pool, org, 400)
        .await
        .into_iter()
        .collect();
    let workers: Vec<_> = (0..6)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut mine = Vec::new();
                loop {
                    let batch = app::db::delivery::claim(&pool, 20, 60.0, "t")
                        .await
                        .unwrap();
                    if batch.is_empty() {
                        return mine;
                    }
                    assert!(batch.iter().all(|c| c.attempt == 1));
                    mine.extend(batch.into_iter().map(|c| c.job_id()));
                }
            })
        })
        .collect();
    let mut seen = HashSet::new();
    let mut total = 0;
    for w in workers {
        for job in w.await.unwrap() {
            total += 1;
            assert!(seen.insert(job.clone()), "{job} claimed twice");
        }
    }
    assert_eq!(total, 400);
    assert_eq!(seen, all, "every delivery claimed exactly once");
}

#[tokio::test]
async fn claims_follow_priority_and_skip_campaigns_that_are_not_sending() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let sending =
        campaign_delivery(&pool, org, acme.owner().id.0, "sending", "c1@example.org").await;
    let paused = campaign_delivery(&pool, org, acme.owner().id.0, "paused", "c2@example.org").await;
    let test = enqueue_test_mail(&pool, org, 1).await.remove(0);
    let first = app::db::delivery::claim(&pool, 1, 60.0, "t").await.unwrap();
    assert_eq!(first[0].job_id(), test, "test mail first");
    let rest: Vec<String> = app::db::delivery::claim(&pool, 10, 60.0, "t")
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.job_id())
        .collect();
    assert_eq!(rest, vec![sending]);
    assert_eq!(
        status_of(&pool, &paused).await,
        ("queued".into(), 0),
        "a paused campaign's mail waits"
    );
}

#[tokio::test]
async fn suppression_is_rechecked_at_claim_with_the_per_kind_rule() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let campaign =
        campaign_delivery(&pool, org, acme.owner().id.0, "sending", "Gone@Example.org").await;
    let tests = enqueue_test_mail(&pool, org, 2).await; // r0@, r1@
    let mut conn = pool.acquire().await.unwrap();
    // A digest to an admin who also unsubscribed from the newsletter.
    let (digest_send,): (i64,) = sqlx::query_as(
        "insert into digest_sends (org_id, week_key, kind, covers_week, scheduled_at, period_start, period_end)
         values ($1, '2026-W48', 'scheduled', '2026-W48', now(), now() - interval '7 days', now()) returning id",
    )
    .bind(org)
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    let admin = EmailAddress::parse("admin@example.org").unwrap();
    let digest = JobId::Digest {
        org_id: org,
        week_key: "2026-W48".parse().unwrap(),
        user_id: acme.owner().id.0,
    };
    app::db::delivery::enqueue(
        &mut conn,
        NewDelivery {
            job: &digest,
            org: OrgId(org),
            recipient: &admin,
            reference: Reference::Digest {
                send: DigestSendId(digest_send),
                user: UserId(acme.owner().id.0),
            },
        },
    )
    .await
    .unwrap();
    for (email, reason) in [
        ("admin@example.org", "unsubscribed"),
        ("gone@example.org", "unsubscribed"),
        ("R0@example.org", "unsubscribed"),
        ("r1@example.org", "hard_bounce"),
    ] {
        app::db::audience::suppress(
            &mut conn,
            org,
            &EmailAddress::parse(email).unwrap(),
            reason.parse().unwrap(),
            "test",
        )
        .await
        .unwrap();
    }
    let mut claimed: Vec<String> = app::db::delivery::claim(&pool, 10, 60.0, "t")
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.job_id())
        .collect();
    claimed.sort();
    assert_eq!(
        claimed,
        vec![digest.to_string()],
        "an unsubscribe does not block a digest to an admin"
    );
    assert_eq!(
        status_of(&pool, &campaign).await.0,
        "suppressed",
        "campaign mail: any suppression"
    );
    assert_eq!(
        status_of(&pool, &tests[0]).await.0,
        "suppressed",
        "a test of campaign content: any suppression, an unsubscribe too"
    );
    assert_eq!(status_of(&pool, &tests[1]).await.0, "suppressed");
}

#[tokio::test]
async fn a_reaped_and_reclaimed_delivery_ignores_the_slow_workers_late_result() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let job = enqueue_test_mail(&pool, org, 1).await.remove(0);
    let slow = app::db::delivery::claim(&pool, 1, 60.0, "t")
        .await
        .unwrap()
        .remove(0);
    expire_leases(&pool).await;
    assert_eq!(reap(&pool).await, (1, 0));
    let fresh = app::db::delivery::claim(&pool, 1, 60.0, "t")
        .await
        .unwrap()
        .remove(0);
    assert_eq!((slow.attempt, fresh.attempt), (1, 2));
    let late = app::db::delivery::record(
        &mut pool.acquire().await.unwrap(),
        &[(
            job.clone(),
            slow.attempt,
            Outcome::Failed {
                failure: app::domain::Failure::Refused,
                reply: "550 late".into(),
            },
        )],
        &[],
    )
    .await
    .unwrap();
    assert_eq!(late, 0, "fenced: the old attempt writes nothing");
    let ok = app::db::delivery::record(
        &mut pool.acquire().await.unwrap(),
        &[(
            job.clone(),
            fresh.attempt,
            Outcome::Delivered {
                reply: "250 ok".into(),
            },
        )],
        &[],
    )
    .await
    .unwrap();
    assert_eq!(ok, 1);
    assert_eq!(status_of(&pool, &job).await, ("delivered".into(), 2));
}

#[tokio::test]
async fn the_reaper_requeues_unstarted_mail_and_marks_started_mail_unknown() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    enqueue_test_mail(&pool, org, 2).await;
    let held = app::db::delivery::claim(&pool, 2, 60.0, "t").await.unwrap();
    let started = &held[0];
    assert_eq!(
        app::db::delivery::mark_body_started(
            &mut pool.acquire().await.unwrap(),
            &[(started.job_id(), started.attempt)]
        )
        .await
        .unwrap()
        .attempts
        .len(),
        1
    );
    assert_eq!(reap(&pool).await, (0, 0), "live leases are left alone");
    expire_leases(&pool).await;
    assert_eq!(reap(&pool).await, (1, 1));
    assert_eq!(status_of(&pool, &started.job_id()).await.0, "unknown");
    assert_eq!(status_of(&pool, &held[1].job_id()).await.0, "queued");
    // Unknown is never retried by itself: only the requeued one comes back.
    let again: Vec<String> = app::db::delivery::claim(&pool, 10, 60.0, "t")
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.job_id())
        .collect();
    assert_eq!(again, vec![held[1].job_id()]);
}

/// Sessions of this test's database waiting for a lock.
async fn lock_waiters(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "select count(*) from pg_stat_activity
         where datname = current_database() and wait_event_type = 'Lock'",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

async fn wait_for_lock_waiters(pool: &PgPool, n: i64) {
    for _ in 0..500 {
        if lock_waiters(pool).await >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never saw {n} sessions waiting for a lock");
}

/// The reaper locks in job-id order; a ledger write locks its marks' rows, then its outcomes'
/// rows. When a live but slow process's lease runs out while it writes, the two can wait on
/// each other. The reaper must be the one that gives way, or the write fails and its delivered
/// mail reads `unknown`.
#[tokio::test]
async fn the_reaper_gives_way_to_a_ledger_write_that_waits_on_it() {
    // The reaper waits at most half of `deadlock_timeout` for a row, and the interleaving below
    // must be in place within that: a longer timeout, so that a busy machine is never too slow.
    let pool = {
        let pool = test_db().await;
        sqlx::query(
            "do $$ begin execute format('alter database %I set deadlock_timeout = %L',
                                        current_database(), '8s'); end $$",
        )
        .execute(&pool)
        .await
        .unwrap();
        let options = (*pool.connect_options()).clone();
        pool.close().await;
        sqlx::PgPool::connect_with(options).await.unwrap()
    };
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    enqueue_test_mail(&pool, org, 2).await;
    let mut held = app::db::delivery::claim(&pool, 2, 60.0, "slow")
        .await
        .unwrap();
    held.sort_by_key(|c| c.job_id());
    let (sent, next) = (&held[0], &held[1]);
    let marked = app::db::delivery::mark_body_started(
        &mut pool.acquire().await.unwrap(),
        &[(sent.job_id(), sent.attempt)],
    )
    .await
    .unwrap();
    assert_eq!(marked.attempts.len(), 1);
    expire_leases(&pool).await;

    // Something else holds the first row, so that the reaper, which locks it first, waits.
    let mut other = pool.begin().await.unwrap();
    sqlx::query("select 1 from deliveries where job_id = $1 for update")
        .bind(sent.job_id())
        .execute(&mut *other)
        .await
        .unwrap();
    let reaper = tokio::spawn({
        let pool = pool.clone();
        async move { app::db::delivery::reap_expired(&pool, &lead(&pool).await).await }
    });
    wait_for_lock_waiters(&pool, 1).await;
    // The slow process writes the first message's outcome and the next one's mark: it locks
    // the second row for the mark and waits for the first behind the reaper.
    let outcome = vec![(
        sent.job_id(),
        sent.attempt,
        Outcome::Delivered {
            reply: "250 2.0.0 Ok: queued as 1".into(),
        },
    )];
    let mark = vec![(next.job_id(), next.attempt)];
    let ledger = tokio::spawn({
        let pool = pool.clone();
        async move {
            let mut conn = pool.acquire().await.unwrap();
            app::db::delivery::mark_and_record(&mut conn, &mark, &outcome, &[]).await
        }
    });
    wait_for_lock_waiters(&pool, 2).await;
    // The first row comes free: the reaper takes it and waits for the second, which the
    // ledger holds while it waits for the first.
    other.commit().await.unwrap();

    let (marked, written) = ledger
        .await
        .unwrap()
        .expect("the ledger write is never the one aborted");
    assert_eq!((marked.attempts.len(), written), (1, 1));
    let reaped = reaper.await.unwrap();
    assert!(
        reaped
            .as_ref()
            .is_err_and(app::db::delivery::is_lock_timeout),
        "the reaper gave up waiting: {reaped:?}"
    );
    assert_eq!(status_of(&pool, &sent.job_id()).await.0, "delivered");
    // The next pass takes back what is still in flight: the marked one, as `unknown`.
    assert_eq!(reap(&pool).await, (0, 1));
    assert_eq!(status_of(&pool, &next.job_id()).await.0, "unknown");
}

#[tokio::test]
async fn a_retry_waits_for_its_backoff() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let job = enqueue_test_mail(&pool, org, 1).await.remove(0);
    let c = app::db::delivery::claim(&pool, 1, 60.0, "t")
        .await
        .unwrap()
        .remove(0);
    let retry = Outcome::Retry {
        error: "451 try later".into(),
        after_seconds: 300.0,
    };
    assert_eq!(
        app::db::delivery::record(
            &mut pool.acquire().await.unwrap(),
            &[(job.clone(), c.attempt, retry)],
            &[],
        )
        .await
        .unwrap(),
        1
    );
    assert_eq!(status_of(&pool, &job).await, ("queued".into(), 1));
    assert!(
        app::db::delivery::claim(&pool, 1, 60.0, "t")
            .await
            .unwrap()
            .is_empty(),
        "not before its time"
    );
    sqlx::query("update deliveries set next_attempt_at = now() where job_id = $1")
        .bind(&job)
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(
        app::db::delivery::claim(&pool, 1, 60.0, "t").await.unwrap()[0].attempt,
        2
    );
}

#[tokio::test]
async fn claims_share_a_batch_round_robin_across_orgs_and_campaigns() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let other = TestOrg::with_roles(&pool, "other", &[Role::Owner]).await;
    let emails = |prefix: &str, n: usize| -> Vec<String> {
        (0..n).map(|i| format!("{prefix}{i}@example.org")).collect()
    };
    // A big campaign queued first must not starve a small one, nor another org's mail.
    let (big, _) =
        campaign_deliveries(&pool, org, acme.owner().id.0, "sending", &emails("big", 60)).await;
    let (small, _) = campaign_deliveries(
        &pool,
        org,
        acme.owner().id.0,
        "sending",
        &emails("small", 5),
    )
    .await;
    enqueue_test_mail(&pool, other.id.0, 5).await;
    let batch = app::db::delivery::claim(&pool, 12, 60.0, "t")
        .await
        .unwrap();
    let count =
        |f: &dyn Fn(&app::db::delivery::Claimed) -> bool| batch.iter().filter(|c| f(c)).count();
    assert_eq!(batch.len(), 12);
    assert_eq!(
        count(&|c| c.org == other.id),
        5,
        "test mail first, all of it"
    );
    let of = |id: i64| move |c: &app::db::delivery::Claimed| matches!(c.reference, Reference::Campaign { campaign, .. } if campaign == CampaignId(id));
    let (b, s) = (count(&of(big)), count(&of(small)));
    assert_eq!(b + s, 7);
    assert!(
        (3..=4).contains(&b) && (3..=4).contains(&s),
        "campaigns take turns: {b} + {s}"
    );
}

async fn progress(pool: &PgPool, campaign: i64) -> (i64, i64, i64, i64) {
    sqlx::query_as(
        "select coalesce(sum(delivered), 0)::int8, coalesce(sum(failed), 0)::int8,
                coalesce(sum(unknown), 0)::int8, coalesce(sum(suppressed), 0)::int8
         from progress_slots where campaign_id = $1",
    )
    .bind(campaign)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn progress_slots_move_in_the_same_statement_as_each_result() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let emails: Vec<String> = (0..5).map(|i| format!("p{i}@example.org")).collect();
    let (cid, _) = campaign_deliveries(&pool, org, acme.owner().id.0, "sending", &emails).await;
    let mut conn = pool.acquire().await.unwrap();
    app::db::audience::suppress(
        &mut conn,
        org,
        &EmailAddress::parse("p0@example.org").unwrap(),
        app::domain::SuppressionReason::Unsubscribed,
        "test",
    )
    .await
    .unwrap();
    let held = app::db::delivery::claim(&pool, 10, 60.0, "t")
        .await
        .unwrap();
    assert_eq!(held.len(), 4, "the suppressed one is not claimed");
    let outcome = |i: usize, o: Outcome| (held[i].job_id(), held[i].attempt, o);
    let results = [
        outcome(
            0,
            Outcome::Delivered {
                reply: "250 ok".into(),
            },
        ),
        outcome(
            1,
            Outcome::Failed {
                failure: app::domain::Failure::Refused,
                reply: "550 no".into(),
            },
        ),
        outcome(
            2,
            Outcome::Unknown {
                error: "lost".into(),
            },
        ),
    ];
    assert_eq!(
        app::db::delivery::record(&mut conn, &results, &[])
            .await
            .unwrap(),
        3
    );
    assert_eq!(progress(&pool, cid).await, (1, 1, 1, 1));
    // A late duplicate write is fenced out and counts nothing.
    assert_eq!(
        app::db::delivery::record(&mut conn, &results[..1], &[])
            .await
            .unwrap(),
        0
    );
    // The reaper's verdict counts too: the last one's body had started.
    app::db::delivery::mark_body_started(
        &mut pool.acquire().await.unwrap(),
        &[(held[3].job_id(), held[3].attempt)],
    )
    .await
    .unwrap();
    expire_leases(&pool).await;
    assert_eq!(reap(&pool).await, (0, 1));
    assert_eq!(progress(&pool, cid).await, (1, 1, 2, 1));
    let (terminal,): (i64,) = sqlx::query_as(
        "select count(*) from deliveries where campaign_id = $1 and status in ('delivered', 'failed', 'unknown', 'suppressed')",
    )
    .bind(cid)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(terminal, 5, "the slots agree with count(*)");

    // An admin retries the unknown one after the campaign finished: the counts let go of it,
    // and the worker takes it although the campaign is no longer `sending`.
    sqlx::query("update campaigns set status = 'sent' where id = $1")
        .bind(cid)
        .execute(&pool)
        .await
        .unwrap();
    let actor = app::db::delivery::admin::Actor {
        user_id: acme.owner().id.0,
        name: "Owner",
    };
    let retried = app::db::delivery::admin::retry(&mut conn, org, &held[3].job_id(), actor)
        .await
        .unwrap();
    assert!(matches!(
        retried,
        app::db::delivery::admin::Retry::Retried { .. }
    ));
    assert_eq!(progress(&pool, cid).await, (1, 1, 1, 1));
    let again = app::db::delivery::claim(&pool, 10, 60.0, "t")
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].job_id(), held[3].job_id());
}

#[tokio::test]
async fn a_stopping_process_releases_exactly_its_own_claims() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    enqueue_test_mail(&pool, org, 4).await;
    let mine = app::db::delivery::claim(&pool, 2, 60.0, "me")
        .await
        .unwrap();
    let theirs = app::db::delivery::claim(&pool, 2, 60.0, "them")
        .await
        .unwrap();
    app::db::delivery::mark_body_started(
        &mut pool.acquire().await.unwrap(),
        &[(mine[0].job_id(), mine[0].attempt)],
    )
    .await
    .unwrap();
    assert_eq!(
        app::db::delivery::release_held(&pool, "me").await.unwrap(),
        app::db::delivery::TakenBack {
            requeued: 1,
            unknown: 1
        }
    );
    assert_eq!(
        status_of(&pool, &mine[0].job_id()).await,
        ("unknown".into(), 1)
    );
    assert_eq!(
        status_of(&pool, &mine[1].job_id()).await,
        ("queued".into(), 1),
        "requeued; its attempt number is never reused"
    );
    for c in &theirs {
        assert_eq!(
            status_of(&pool, &c.job_id()).await.0,
            "sending",
            "another process's claims stay"
        );
    }
}

#[tokio::test]
async fn a_live_process_extends_only_the_leases_of_claims_it_is_still_working_on() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    enqueue_test_mail(&pool, org, 3).await;
    let mine = app::db::delivery::claim(&pool, 2, 60.0, "me")
        .await
        .unwrap();
    let theirs = app::db::delivery::claim(&pool, 1, 60.0, "them")
        .await
        .unwrap();
    expire_leases(&pool).await;
    // mine[1] was abandoned (its outcome could not be written): no longer held. A lease is
    // one per claim, so it lives as long as its claim holds another message in flight.
    let in_flight = vec![mine[0].claim_id];
    assert_eq!(
        app::db::delivery::extend_leases(&pool, "me", &in_flight, 60.0)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        app::db::delivery::extend_leases(&pool, "them", &in_flight, 60.0)
            .await
            .unwrap()
            .len(),
        0,
        "another holder cannot extend my claim"
    );
    assert_eq!(
        reap(&pool).await,
        (1, 0),
        "the silent process's claim is reaped"
    );
    assert_eq!(status_of(&pool, &mine[0].job_id()).await.0, "sending");
    assert_eq!(status_of(&pool, &mine[1].job_id()).await.0, "sending");
    assert_eq!(
        status_of(&pool, &theirs[0].job_id()).await,
        ("queued".into(), 1)
    );
    // mine[0] finishes; nothing of the claim is held any more, so it is neither extended nor
    // deleted (mine[1] is still in flight), runs out, and the reaper takes mine[1] back.
    let mut conn = pool.acquire().await.unwrap();
    let done = Outcome::Delivered {
        reply: "250 ok".into(),
    };
    app::db::delivery::record(&mut conn, &[(mine[0].job_id(), mine[0].attempt, done)], &[])
        .await
        .unwrap();
    assert_eq!(
        app::db::delivery::extend_leases(&pool, "me", &[], 60.0)
            .await
            .unwrap()
            .len(),
        0
    );
    assert_eq!(claims(&pool).await, 1, "the claim still holds mine[1]");
    expire_leases(&pool).await;
    assert_eq!(reap(&pool).await, (1, 0));
    assert_eq!(status_of(&pool, &mine[0].job_id()).await.0, "delivered");
    assert_eq!(
        status_of(&pool, &mine[1].job_id()).await,
        ("queued".into(), 1)
    );
    assert_eq!(claims(&pool).await, 0);
}

async fn claims(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from delivery_claims")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The lease renewal never waits for a lock on a claim: a reaper taking the claim back holds
/// it, and the renewal must not wait behind it (nor take locks in another order than it).
#[tokio::test]
async fn extending_leases_skips_claims_another_transaction_holds_instead_of_waiting() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    enqueue_test_mail(&pool, org, 2).await;
    let mut mine = app::db::delivery::claim(&pool, 1, 60.0, "me")
        .await
        .unwrap();
    mine.extend(
        app::db::delivery::claim(&pool, 1, 60.0, "me")
            .await
            .unwrap(),
    );
    expire_leases(&pool).await;
    let in_flight: Vec<i64> = mine.iter().map(|c| c.claim_id).collect();
    // Another transaction (a reaper) holds the first claim's row.
    let mut finishing = pool.begin().await.unwrap();
    sqlx::query("select 1 from delivery_claims where id = $1 for update")
        .bind(mine[0].claim_id)
        .execute(&mut *finishing)
        .await
        .unwrap();
    let extended = tokio::time::timeout(
        Duration::from_secs(5),
        app::db::delivery::extend_leases(&pool, "me", &in_flight, 60.0),
    )
    .await
    .expect("the renewal waited for a locked claim")
    .unwrap();
    assert_eq!(extended.len(), 1, "only the claim nobody holds");
    finishing.rollback().await.unwrap();
    let expired: i64 =
        sqlx::query_scalar("select count(*) from delivery_claims where lease_until < now()")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        expired, 1,
        "the skipped row is extended at the next renewal, not now"
    );
    assert_eq!(
        app::db::delivery::extend_leases(&pool, "me", &in_flight, 60.0)
            .await
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn a_hard_bounce_upgrades_an_unsubscribe_and_nothing_downgrades_it() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let mut conn = pool.acquire().await.unwrap();
    let ann = EmailAddress::parse("ann@example.org").unwrap();
    let reason = |pool: PgPool| async move {
        let (r,): (String,) = sqlx::query_as("select reason from suppressions")
            .fetch_one(&pool)
            .await
            .unwrap();
        r
    };
    let suppress = app::db::audience::suppress;
    assert!(suppress(
        &mut conn,
        org,
        &ann,
        app::domain::SuppressionReason::Unsubscribed,
        "link"
    )
    .await
    .unwrap());
    assert!(suppress(
        &mut conn,
        org,
        &ann,
        app::domain::SuppressionReason::HardBounce,
        "delivery"
    )
    .await
    .unwrap());
    assert_eq!(
        reason(pool.clone()).await,
        "hard_bounce",
        "now digests stop too"
    );
    assert!(!suppress(
        &mut conn,
        org,
        &ann,
        app::domain::SuppressionReason::Unsubscribed,
        "link"
    )
    .await
    .unwrap());
    assert!(!suppress(
        &mut conn,
        org,
        &ann,
        app::domain::SuppressionReason::Complaint,
        "fbl"
    )
    .await
    .unwrap());
    assert_eq!(reason(pool.clone()).await, "hard_bounce");
}

#[tokio::test]
async fn an_opt_out_committed_after_the_claim_wins_at_the_body_start_mark() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let emails: Vec<String> = (0..2).map(|i| format!("m{i}@example.org")).collect();
    let (cid, _) = campaign_deliveries(&pool, org, acme.owner().id.0, "sending", &emails).await;
    // Account mail (an invitation): an unsubscribe does not stop it, a hard bounce does.
    let invite_to = ["m0@example.org", "m1@example.org", "t2@example.org"];
    let mut conn = pool.acquire().await.unwrap();
    for (i, to) in invite_to.iter().enumerate() {
        let job = JobId::Invite {
            org_id: org,
            user_id: acme.owner().id.0,
            token_id: i as i64 + 1,
        };
        let email = EmailAddress::parse(to).unwrap();
        let invite = NewDelivery {
            job: &job,
            org: OrgId(org),
            recipient: &email,
            reference: Reference::Invite {
                user: UserId(acme.owner().id.0),
            },
        };
        assert!(app::db::delivery::enqueue(&mut conn, invite).await.unwrap());
    }
    let held = app::db::delivery::claim(&pool, 10, 60.0, "t")
        .await
        .unwrap();
    assert_eq!(held.len(), 5, "nothing was suppressed when claimed");
    for (to, reason) in [
        (
            "m0@example.org",
            app::domain::SuppressionReason::Unsubscribed,
        ),
        ("t2@example.org", app::domain::SuppressionReason::HardBounce),
    ] {
        app::db::audience::suppress(
            &mut conn,
            org,
            &EmailAddress::parse(to).unwrap(),
            reason,
            "test",
        )
        .await
        .unwrap();
    }
    let all: Vec<(String, i32)> = held.iter().map(|c| (c.job_id(), c.attempt)).collect();
    let marked: HashSet<String> = app::db::delivery::mark_body_started(&mut conn, &all)
        .await
        .unwrap()
        .attempts
        .into_iter()
        .map(|(job, _)| job)
        .collect();
    let job_to =
        |c: &app::db::delivery::Claimed| (c.kind().as_str(), c.recipient.as_str().to_string());
    let mut suppressed = Vec::new();
    for c in &held {
        let (status, _) = status_of(&pool, &c.job_id()).await;
        if marked.contains(&c.job_id()) {
            assert_eq!(status, "sending");
        } else {
            assert_eq!(status, "suppressed", "{:?}", job_to(c));
            suppressed.push(job_to(c));
        }
    }
    suppressed.sort();
    assert_eq!(
        suppressed,
        vec![
            ("campaign", "m0@example.org".to_string()),
            ("invite", "t2@example.org".to_string()),
        ],
        "the unsubscribed campaign recipient and the hard-bounced invitation; \
         account mail to the unsubscribed address still goes"
    );
    assert_eq!(
        progress(&pool, cid).await,
        (0, 0, 0, 1),
        "counted in the campaign's progress"
    );
    // Its late outcome is fenced out: the opt-out stands.
    let m0 = held
        .iter()
        .find(|c| c.kind().as_str() == "campaign" && c.recipient.as_str() == "m0@example.org")
        .unwrap();
    let late = app::db::delivery::record(
        &mut conn,
        &[(
            m0.job_id(),
            m0.attempt,
            Outcome::Delivered {
                reply: "250 ok".into(),
            },
        )],
        &[],
    )
    .await
    .unwrap();
    assert_eq!(late, 0);
}

async fn mark_groups(pool: &PgPool) -> Vec<(i64, i64)> {
    sqlx::query_as("select id, cardinality(job_ids)::bigint from delivery_mark_groups order by id")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn one_statement_records_outcomes_and_marks_other_attempts_and_both_are_counted() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    enqueue_test_mail(&pool, org, 4).await;
    let held = app::db::delivery::claim(&pool, 4, 60.0, "t").await.unwrap();
    assert_eq!(held.len(), 4);
    let attempt = |c: &app::db::delivery::Claimed| (c.job_id(), c.attempt);
    let delivered = |c: &app::db::delivery::Claimed| {
        (
            c.job_id(),
            c.attempt,
            Outcome::Delivered {
                reply: "250 ok".into(),
            },
        )
    };
    let mut conn = pool.acquire().await.unwrap();
    let first: Vec<_> = held[..2].iter().map(attempt).collect();
    let group = app::db::delivery::mark_body_started(&mut conn, &first)
        .await
        .unwrap()
        .group
        .expect("a group row");
    // The fourth address opts out after its claim, before its mark.
    sqlx::query(
        "insert into suppressions (org_id, email_lower, reason) values ($1, $2, 'unsubscribed')",
    )
    .bind(org)
    .bind(held[3].recipient.lower())
    .execute(&pool)
    .await
    .unwrap();

    // The first two bodies were accepted; the next two are about to be written.
    let next: Vec<_> = held[2..].iter().map(attempt).collect();
    let (marked, written) = app::db::delivery::mark_and_record(
        &mut conn,
        &next,
        &[delivered(&held[0]), delivered(&held[1])],
        &[group],
    )
    .await
    .unwrap();
    assert_eq!(written, 2);
    assert_eq!(
        marked.attempts,
        vec![attempt(&held[2])],
        "the opted-out one is not marked"
    );
    let new_group = marked.group.expect("a group row for the new mark");
    assert_eq!(
        mark_groups(&pool).await,
        vec![(new_group, 1)],
        "the finished group went with its last outcomes"
    );
    let mut statuses = Vec::new();
    for c in &held {
        statuses.push(status_of(&pool, &c.job_id()).await.0);
    }
    assert_eq!(
        statuses,
        ["delivered", "delivered", "sending", "suppressed"]
    );
    // The counts behind /metrics saw both kinds of change made by the one statement.
    let counts: Vec<(String, i64)> = sqlx::query_as(
        "select status, sum(n)::bigint from delivery_counts where kind = 'test'
         group by status having sum(n) <> 0 order by status",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        counts,
        vec![
            ("delivered".to_string(), 2),
            // In flight is still `queued` in the table: a claim does not write the row.
            ("queued".to_string(), 1),
            ("suppressed".to_string(), 1)
        ]
    );
}

#[tokio::test]
async fn a_groups_marks_are_one_row_deleted_with_its_last_outcome_or_swept_once_none_is_in_flight()
{
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    enqueue_test_mail(&pool, org, 5).await;
    let held = app::db::delivery::claim(&pool, 5, 60.0, "t").await.unwrap();
    assert_eq!(held.len(), 5);
    let attempt = |c: &app::db::delivery::Claimed| (c.job_id(), c.attempt);
    let delivered = |c: &app::db::delivery::Claimed| {
        (
            c.job_id(),
            c.attempt,
            Outcome::Delivered {
                reply: "250 ok".into(),
            },
        )
    };
    let mut conn = pool.acquire().await.unwrap();

    // Three marks written together: one row holding all three.
    let first: Vec<_> = held[..3].iter().map(attempt).collect();
    let marked = app::db::delivery::mark_body_started(&mut conn, &first)
        .await
        .unwrap();
    assert_eq!(marked.attempts.len(), 3);
    let group = marked.group.expect("a group row");
    assert_eq!(mark_groups(&pool).await, vec![(group, 3)]);
    // A mark that holds nothing (its claim is gone) writes no row.
    let none = app::db::delivery::mark_body_started(&mut conn, &[("no-such-job".into(), 1)])
        .await
        .unwrap();
    assert_eq!((none.group, none.attempts.len()), (None, 0));

    // The group outlives its first outcomes and goes with the last.
    let written =
        app::db::delivery::record(&mut conn, &[delivered(&held[0]), delivered(&held[1])], &[])
            .await
            .unwrap();
    assert_eq!(written, 2);
    assert_eq!(mark_groups(&pool).await, vec![(group, 3)]);
    app::db::delivery::record(&mut conn, &[delivered(&held[2])], &[group])
        .await
        .unwrap();
    assert_eq!(mark_groups(&pool).await, vec![]);

    // A writer that died: its group stays while an attempt of it is in flight (the reaper
    // needs the mark to call it unknown), and is swept once none is.
    let second: Vec<_> = held[3..].iter().map(attempt).collect();
    let orphan = app::db::delivery::mark_body_started(&mut conn, &second)
        .await
        .unwrap()
        .group
        .expect("a group row");
    app::db::delivery::record(&mut conn, &[delivered(&held[3])], &[])
        .await
        .unwrap();
    assert_eq!(app::db::delivery::sweep_marks(&pool).await.unwrap(), 0);
    assert_eq!(mark_groups(&pool).await, vec![(orphan, 2)]);
    expire_leases(&pool).await;
    assert_eq!(reap(&pool).await, (0, 1));
    assert_eq!(status_of(&pool, &held[4].job_id()).await.0, "unknown");
    assert_eq!(mark_groups(&pool).await, vec![], "swept by the reaper");
}

/// A process may hold an attempt whose lease ran out (reaped and re-claimed meanwhile) beside
/// its successor, and mark both in one group commit: only the attempt the row is at is marked,
/// so the body goes out once.
#[tokio::test]
async fn of_an_expired_attempt_and_its_successor_marked_together_only_the_current_one_is_marked() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    enqueue_test_mail(&pool, org, 1).await;
    let first = app::db::delivery::claim(&pool, 1, 60.0, "t").await.unwrap();
    expire_leases(&pool).await;
    assert_eq!(reap(&pool).await, (1, 0));
    let second = app::db::delivery::claim(&pool, 1, 60.0, "t").await.unwrap();
    let (old, new) = (&first[0], &second[0]);
    assert_eq!(
        (&old.job_id(), old.attempt + 1),
        (&new.job_id(), new.attempt)
    );

    let both = [(old.job_id(), old.attempt), (new.job_id(), new.attempt)];
    let marked = app::db::delivery::mark_body_started(&mut pool.acquire().await.unwrap(), &both)
        .await
        .unwrap();
    assert_eq!(marked.attempts, vec![(new.job_id(), new.attempt)]);
    assert_eq!(mark_groups(&pool).await.len(), 1);
}

/// The suppression rule's parameters as SQL literals, as the statements' callers bind them.
fn suppression_rule() -> String {
    let literal = |names: Vec<&str>| format!("array['{}']", names.join("', '"));
    format!(
        "{}, {}",
        literal(app::domain::DeliveryKind::stopped_by_any_suppression_names()),
        literal(app::domain::SuppressionReason::stopping_all_mail())
    )
}

/// What the plan of `statement`, executed as a generic plan (as a prepared statement is after
/// its first executions), did with `suppressions`: the rows its nodes on the table returned and
/// the times they ran, each summed, and the plan.
async fn suppression_reads(
    conn: &mut sqlx::PgConnection,
    types: &str,
    statement: &str,
    args: &str,
) -> (f64, f64, String) {
    relation_reads(conn, types, statement, args, "suppressions").await
}

/// What the plan of `statement`, executed as a generic plan, did with `relation`: the rows its
/// nodes on the table returned and the times they ran, each summed, and the plan.
async fn relation_reads(
    conn: &mut sqlx::PgConnection,
    types: &str,
    statement: &str,
    args: &str,
    relation: &str,
) -> (f64, f64, String) {
    use sqlx::Connection;
    let mut tx = conn.begin().await.unwrap();
    for sql in [
        "set local plan_cache_mode = force_generic_plan".to_string(),
        format!("prepare pinned ({types}) as {statement}"),
    ] {
        sqlx::query(&sql).execute(&mut *tx).await.unwrap();
    }
    let (plan,): (serde_json::Value,) = sqlx::query_as(&format!(
        "explain (analyze, format json) execute pinned({args})"
    ))
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    // A prepared statement outlives the transaction.
    sqlx::query("deallocate pinned")
        .execute(&mut *conn)
        .await
        .unwrap();
    fn walk(node: &serde_json::Value, relation: &str, read: &mut f64, runs: &mut f64) {
        if node["Relation Name"] == relation {
            let loops = node["Actual Loops"].as_f64().unwrap();
            *read += node["Actual Rows"].as_f64().unwrap() * loops;
            *runs += loops;
        }
        for child in node["Plans"].as_array().into_iter().flatten() {
            walk(child, relation, read, runs);
        }
    }
    let (mut read, mut runs) = (0.0, 0.0);
    walk(&plan[0]["Plan"], relation, &mut read, &mut runs);
    (read, runs, serde_json::to_string_pretty(&plan).unwrap())
}

/// The claim and the body-start mark re-check each message against the org's suppressions.
/// That must stay a probe per message: a plan that reads the whole list costs every claim in
/// proportion to the org's opt-outs. (On this data PostgreSQL 15 chooses the probe even without
/// the statements' `offset 0` fence, so this pins the outcome rather than the fence.)
#[tokio::test]
async fn a_long_suppression_list_is_probed_per_message_not_read_per_claim_or_mark() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let due = enqueue_test_mail(&pool, org, 300).await;
    // A long queue too: with it, the generic plan's estimates favour reading the whole list
    // once and hash-joining it.
    sqlx::query(
        "insert into deliveries (job_id, org_id, kind, priority, recipient, email_lower)
         select 'bulk:' || g, $1, 'test', 0, 'bulk' || g || '@example.org', 'bulk' || g || '@example.org'
         from generate_series(1, 50000) g",
    )
    .bind(org)
    .execute(&pool)
    .await
    .unwrap();
    // Opt-outs of other addresses: none of them is queued, so no probe finds a row.
    sqlx::query(
        "insert into suppressions (org_id, email_lower, reason)
         select $1, 'gone' || g || '@example.org', 'unsubscribed' from generate_series(1, 200000) g",
    )
    .bind(org)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("analyze suppressions")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("analyze deliveries, delivery_queue")
        .execute(&pool)
        .await
        .unwrap();
    let rule = suppression_rule();
    let mut conn = pool.acquire().await.unwrap();
    let (read, probes, plan) = suppression_reads(
        &mut conn,
        "bigint, float8, text, text[], text[]",
        &app::db::delivery::CLAIM,
        &format!("100, 60, 'plan', {rule}"),
    )
    .await;
    assert_eq!(read, 0.0, "the claim read the suppression list:\n{plan}");
    assert_eq!(probes, 100.0, "one probe a claimed message:\n{plan}");
    assert_eq!(
        status_of(&pool, &due[0]).await.0,
        "queued",
        "the plan's claim was rolled back"
    );

    // The body-start mark of 100 claimed messages.
    let claimed = app::db::delivery::claim(&pool, 100, 60.0, "t")
        .await
        .unwrap();
    assert_eq!(claimed.len(), 100);
    let jobs: Vec<String> = claimed
        .iter()
        .map(|c| format!("'{}'", c.job_id()))
        .collect();
    let attempts: Vec<String> = claimed.iter().map(|c| c.attempt.to_string()).collect();
    let (read, probes, plan) = suppression_reads(
        &mut conn,
        "text[], int[], text[], text[], text[], int[], text[], text[], float8[], text[], bigint[]",
        &app::db::delivery::MARK_AND_RECORD,
        &format!(
            "array[{}], array[{}], {rule}, '{{}}', '{{}}', '{{}}', '{{}}', '{{}}', '{{}}', '{{}}'",
            jobs.join(", "),
            attempts.join(", ")
        ),
    )
    .await;
    assert_eq!(read, 0.0, "the mark read the suppression list:\n{plan}");
    assert_eq!(probes, 100.0, "one probe a marked message:\n{plan}");
}

/// A claim finds its batch by key whatever the planner guesses about its size: with 50,000
/// messages due in one group (an automation's mail, all due at once) a claim of 100 reads about
/// its 100 rows of the queue and of `deliveries`, suppressed ones included. A hash join over the
/// whole queue made every claim cost a second with a million queued.
#[tokio::test]
async fn a_claim_reads_its_batch_not_the_whole_queue() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    // The batch: 100 messages due first, every tenth to a suppressed address. Behind them in
    // the same group, 50,000 more due later (copies of the first's references).
    let addresses: Vec<String> = (1..=100).map(|i| format!("r{i}@example.org")).collect();
    let batch = crate::support::helpers::enqueue_test_mail_to(&pool, org, "dlg", &addresses).await;
    sqlx::query(
        "update deliveries d set next_attempt_at = timestamptz '2026-01-01 00:00Z' + j.n * interval '1 second'
         from unnest($1::text[]) with ordinality j(job_id, n) where d.job_id = j.job_id",
    )
    .bind(&batch)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "insert into deliveries (job_id, org_id, kind, priority, recipient, email_lower, campaign_id, content_version)
         select 'bulk:' || g, org_id, kind, priority, 'bulk' || g || '@example.org', 'bulk' || g || '@example.org',
                campaign_id, content_version
         from deliveries, generate_series(1, 50000) g where job_id = $1",
    )
    .bind(&batch[0])
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "insert into suppressions (org_id, email_lower, reason)
         select $1, 'r' || g || '@example.org', 'unsubscribed' from generate_series(10, 100, 10) g",
    )
    .bind(org)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("analyze deliveries, delivery_queue, suppressions")
        .execute(&pool)
        .await
        .unwrap();
    let args = format!("100, 60, 'plan', {}", suppression_rule());
    let types = "bigint, float8, text, text[], text[]";
    let mut conn = pool.acquire().await.unwrap();
    for table in ["delivery_queue", "deliveries"] {
        let (read, _, plan) =
            relation_reads(&mut conn, types, &app::db::delivery::CLAIM, &args, table).await;
        assert!(
            read <= 500.0,
            "a claim of 100 read {read} rows of {table}:\n{plan}"
        );
    }
    // The plans' claims were rolled back; the real one takes the same batch.
    let claimed = app::db::delivery::claim(&pool, 100, 60.0, "t")
        .await
        .unwrap();
    let jobs: Vec<String> = claimed.iter().map(|c| c.job_id()).collect();
    let kept: Vec<String> = (1..=100)
        .filter(|i| i % 10 != 0)
        .map(|i| batch[i - 1].clone())
        .collect();
    assert_eq!(
        jobs, kept,
        "the oldest 100 but the suppressed, oldest first"
    );
    assert_eq!(status_of(&pool, &batch[9]).await.0, "suppressed");
    assert_eq!(status_of(&pool, "bulk:1").await.0, "queued");
}

/// A claim leaves the delivery row `queued` (in flight, off the queue), so cancelling its
/// campaign must not finish it under its body: the sweep cancels only what is still in the
/// queue. The message marked before the cancel keeps its outcome; the one claimed but not yet
/// marked is given back by its mark (the campaign stopped) and cancelled by the next sweep.
#[tokio::test]
async fn cancelling_a_campaign_never_cancels_a_message_in_flight() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let emails: Vec<String> = (0..3).map(|i| format!("c{i}@example.org")).collect();
    let (cid, jobs) = campaign_deliveries(&pool, org, acme.owner().id.0, "sending", &emails).await;
    let held = app::db::delivery::claim(&pool, 2, 60.0, "me")
        .await
        .unwrap();
    assert_eq!(held.len(), 2);
    let mut conn = pool.acquire().await.unwrap();
    let first = vec![(held[0].job_id(), held[0].attempt)];
    let marked = app::db::delivery::mark_body_started(&mut conn, &first)
        .await
        .unwrap();
    assert_eq!(marked.attempts, first);
    sqlx::query("update campaigns set status = 'cancelled' where id = $1")
        .bind(cid)
        .execute(&pool)
        .await
        .unwrap();
    let sweep = || app::db::campaign::sends::sweep_cancelled(&pool, 100);
    assert_eq!(sweep().await.unwrap(), 1, "only the one still in the queue");
    assert_eq!(sweep().await.unwrap(), 0);
    let done = Outcome::Delivered {
        reply: "250 ok".into(),
    };
    let written =
        app::db::delivery::record(&mut conn, &[(held[0].job_id(), held[0].attempt, done)], &[])
            .await
            .unwrap();
    assert_eq!(written, 1, "the body that went out keeps its outcome");
    let second = vec![(held[1].job_id(), held[1].attempt)];
    let refused = app::db::delivery::mark_body_started(&mut conn, &second)
        .await
        .unwrap();
    assert!(
        refused.attempts.is_empty(),
        "a stopped campaign's message is not sent"
    );
    assert_eq!(
        status_of(&pool, &held[1].job_id()).await,
        ("queued".into(), 1)
    );
    assert_eq!(sweep().await.unwrap(), 1, "given back, then cancelled");
    let mut statuses = Vec::new();
    for job in &jobs {
        statuses.push(status_of(&pool, job).await.0);
    }
    statuses.sort();
    assert_eq!(statuses, ["cancelled", "cancelled", "delivered"]);
    let queued: i64 = sqlx::query_scalar("select count(*) from delivery_queue")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(queued, 0);
}
