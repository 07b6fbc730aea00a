//! The step engine in process, on the injected clock: several runners race over one database,
//! triggers arrive many times at once, and people unsubscribe, are paused, stopped, or meet a
//! new version mid-flight.

use std::collections::BTreeMap;

use app::db::automation::{self, ApproveError, Control};
use app::db::events::NewEvent;
use app::domain::SubscriberId;
use chrono::{DateTime, Duration, Utc};
use serde_json::json;

use super::{definition, live, people, run_all};
use crate::support::helpers::test_db;
use crate::support::org::TestOrg;

fn at(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

/// (enrolment, step) → how many deliveries, for the automation's mail.
async fn mails(pool: &sqlx::PgPool, automation: i64) -> BTreeMap<(i64, i32), i64> {
    sqlx::query_as::<_, (String, i64)>(
        "select job_id, count(*) over (partition by job_id) from deliveries
         where kind = 'automation' and automation_id = $1",
    )
    .bind(automation)
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .map(|(job, n)| {
        let parts: Vec<&str> = job.split(':').collect();
        ((parts[2].parse().unwrap(), parts[3].parse().unwrap()), n)
    })
    .collect()
}

async fn states(pool: &sqlx::PgPool, automation: i64) -> BTreeMap<String, i64> {
    sqlx::query_as::<_, (String, i64)>(
        "select state || coalesce(':' || exit_reason, ''), count(*) from enrolments
         where automation_id = $1 group by 1",
    )
    .bind(automation)
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .collect()
}

fn series(list: i64) -> serde_json::Value {
    json!({
        "trigger": {"type": "list_joined", "list_id": list},
        "reentry": "once",
        "steps": [
            {"type": "email", "subject": "Welcome {{ name }}", "body": "Hello {{ attributes.plan | default('friend') }}"},
            {"type": "wait", "days": 2},
            {"type": "email", "subject": "Day 2", "body": "Tips"},
            {"type": "wait", "days": 5},
            {"type": "email", "subject": "Day 7", "body": "More"}
        ]
    })
}

#[tokio::test]
async fn a_welcome_series_takes_each_step_once_on_the_injected_clock_with_four_runners() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id;
    let list = acme.list("Newsletter").await;
    let id = live(
        &pool,
        org,
        "Welcome",
        &definition(series(list)),
        acme.owner().id,
        acme.admin(0).id,
    )
    .await;
    let ids = people(&pool, org, "w", 200).await;
    // Joining the list enrols, in the joining transaction, whichever path joined.
    let mut tx = pool.begin().await.unwrap();
    app::db::audience::add_members(&mut tx, org.0, list, &ids)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        states(&pool, id).await,
        BTreeMap::from([("active".into(), 200)])
    );
    // Leaving and joining again does not enrol again ("once").
    sqlx::query("delete from list_members where list_id = $1 and subscriber_id = any($2)")
        .bind(list)
        .bind(&ids[..50])
        .execute(&pool)
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    app::db::audience::add_members(&mut tx, org.0, list, &ids[..50])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let enrolled: i64 =
        sqlx::query_scalar("select count(*) from enrolments where automation_id = $1")
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(enrolled, 200);

    let t0 = at("2031-01-06T10:00:00Z");
    assert_eq!(run_all(&pool, t0, 4).await, 200);
    let m = mails(&pool, id).await;
    assert_eq!(m.len(), 200);
    assert!(m.iter().all(|((_, step), n)| *step == 0 && *n == 1));
    // Nothing is due a day later; the second mail two days after the first.
    assert_eq!(run_all(&pool, t0 + Duration::days(1), 4).await, 0);
    assert_eq!(run_all(&pool, t0 + Duration::days(2), 4).await, 200);
    assert_eq!(run_all(&pool, t0 + Duration::days(2), 4).await, 0);
    assert_eq!(run_all(&pool, t0 + Duration::days(7), 4).await, 200);
    let m = mails(&pool, id).await;
    assert_eq!(m.len(), 600, "three mails each");
    assert!(m.values().all(|n| *n == 1));
    for e in m.keys().map(|(e, _)| *e) {
        for step in [0, 2, 4] {
            assert!(m.contains_key(&(e, step)), "enrolment {e} step {step}");
        }
    }
    assert_eq!(
        states(&pool, id).await,
        BTreeMap::from([("completed".into(), 200)])
    );
    let counts = automation::step_counts(&mut pool.acquire().await.unwrap(), org, id)
        .await
        .unwrap();
    let sent: i64 = counts
        .iter()
        .filter(|c| c.outcome.map(|o| o.as_str()) == Some("sent"))
        .map(|c| c.n)
        .sum();
    assert_eq!(sent, 600);
}

#[tokio::test]
async fn the_same_trigger_twenty_times_at_once_is_one_enrolment() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id;
    let list = acme.list("Trial").await;
    let by_list = live(
        &pool,
        org,
        "By list",
        &definition(series(list)),
        acme.owner().id,
        acme.admin(0).id,
    )
    .await;
    let per_event = live(
        &pool,
        org,
        "Per order",
        &definition(json!({
            "trigger": {"type": "event", "name": "ordered",
                        "property": {"name": "total", "test": {"op": "number_greater", "value": 10}}},
            "reentry": "per_trigger",
            "steps": [{"type": "email", "subject": "Thanks for order {{ event.order }}", "body": "x"}]
        })),
        acme.owner().id,
        acme.admin(0).id,
    )
    .await;
    let ids = people(&pool, org, "t", 2).await;
    let (ann, bob) = (SubscriberId(ids[0]), SubscriberId(ids[1]));
    // The same list join twenty times at once.
    let joins: Vec<_> = (0..20)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut tx = pool.begin().await.unwrap();
                app::db::audience::add_members(&mut tx, org.0, list, &[ann.0])
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
            })
        })
        .collect();
    for j in joins {
        j.await.unwrap();
    }
    // The same event twenty times at once, and two other orders (one under the threshold).
    let post = |key: &'static str, total: i64, who: SubscriberId| {
        let pool = pool.clone();
        tokio::spawn(async move {
            let props = json!({"order": key, "total": total});
            let mut tx = pool.begin().await.unwrap();
            app::db::events::insert(
                &mut tx,
                org,
                &[NewEvent {
                    key,
                    subscriber: who,
                    name: "ordered",
                    properties: &props,
                    occurred_at: Utc::now(),
                }],
            )
            .await
            .unwrap();
            tx.commit().await.unwrap();
        })
    };
    let mut posts: Vec<_> = (0..20).map(|_| post("order-1", 50, bob)).collect();
    posts.push(post("order-2", 70, bob));
    posts.push(post("order-3", 5, bob));
    for p in posts {
        p.await.unwrap();
    }
    let count = |a: i64| {
        let pool = pool.clone();
        async move {
            sqlx::query_as::<_, (i64, String)>(
                "select subscriber_id, occurrence from enrolments where automation_id = $1 order by occurrence",
            )
            .bind(a)
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    assert_eq!(count(by_list).await, vec![(ann.0, String::new())]);
    assert_eq!(
        count(per_event).await,
        vec![
            (bob.0, "event:order-1".to_owned()),
            (bob.0, "event:order-2".to_owned())
        ]
    );
    // The API's enrolment, twenty times at once under one key: one enrolment, one answer.
    let api = live(
        &pool,
        org,
        "By API",
        &definition(json!({
            "trigger": {"type": "api"}, "reentry": "per_trigger",
            "steps": [{"type": "email", "subject": "Hi", "body": "x"}]
        })),
        acme.owner().id,
        acme.admin(0).id,
    )
    .await;
    let calls: Vec<_> = (0..20)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let mut tx = pool.begin().await.unwrap();
                let e = automation::enrol(&mut tx, org, api, ann, "signup-7", &json!({}))
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
                e
            })
        })
        .collect();
    let mut answers = Vec::new();
    for c in calls {
        answers.push(c.await.unwrap());
    }
    assert_eq!(answers.iter().filter(|e| e.new).count(), 1);
    assert!(answers.iter().all(|e| e.id == answers[0].id));
    // The order's properties personalise its mail.
    run_all(&pool, Utc::now() + Duration::minutes(1), 3).await;
    let mail = automation::mail_contents(
        &mut pool.acquire().await.unwrap(),
        &sqlx::query_as::<_, (i64, i64, i32)>(
            "select org_id, enrolment_id, 0 from deliveries where automation_id = $1",
        )
        .bind(per_event)
        .fetch_all(&pool)
        .await
        .unwrap(),
    )
    .await
    .unwrap();
    let mut orders: Vec<String> = mail
        .iter()
        .map(|m| m.context["order"].as_str().unwrap().to_owned())
        .collect();
    orders.sort();
    assert_eq!(orders, ["order-1", "order-2"]);
}

#[tokio::test]
async fn an_unsubscribe_or_suppression_during_a_wait_stops_every_later_mail() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id;
    let list = acme.list("News").await;
    let id = live(
        &pool,
        org,
        "Series",
        &definition(series(list)),
        acme.owner().id,
        acme.admin(0).id,
    )
    .await;
    let ids = people(&pool, org, "u", 3).await;
    let mut tx = pool.begin().await.unwrap();
    app::db::audience::add_members(&mut tx, org.0, list, &ids)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let t0 = at("2031-01-06T10:00:00Z");
    run_all(&pool, t0, 2).await;
    // During the wait: one unsubscribes (a suppression of their address), one bounces hard.
    let mut c = pool.acquire().await.unwrap();
    app::db::audience::suppress_subscriber(
        &mut c,
        org.0,
        ids[0],
        app::domain::SuppressionReason::Unsubscribed,
        "test",
    )
    .await
    .unwrap();
    app::db::audience::suppress_subscriber(
        &mut c,
        org.0,
        ids[1],
        app::domain::SuppressionReason::HardBounce,
        "test",
    )
    .await
    .unwrap();
    // Each run is at the clock it is given: the last wait starts from the second mail.
    run_all(&pool, t0 + Duration::days(30), 2).await;
    run_all(&pool, t0 + Duration::days(60), 2).await;
    let by_person: BTreeMap<i64, Vec<i32>> = sqlx::query_as::<_, (i64, Vec<i32>)>(
        "select e.subscriber_id, array_agg(split_part(d.job_id, ':', 4)::int order by d.job_id)
         from deliveries d join enrolments e on e.id = d.enrolment_id
         where d.automation_id = $1 group by 1",
    )
    .bind(id)
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .collect();
    assert_eq!(by_person[&ids[0]], vec![0]);
    assert_eq!(by_person[&ids[1]], vec![0]);
    assert_eq!(by_person[&ids[2]], vec![0, 2, 4]);
    assert_eq!(
        states(&pool, id).await,
        BTreeMap::from([("completed".into(), 1), ("exited:unsubscribed".into(), 2)])
    );
    // The step they would have taken says why it was not.
    let skipped: Vec<(i32, String)> = sqlx::query_as(
        "select step, detail from enrolment_steps where automation_id = $1 and outcome = 'skipped'",
    )
    .bind(id)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        skipped,
        vec![(2, "unsubscribed".into()), (2, "unsubscribed".into())]
    );
}

#[tokio::test]
async fn pause_holds_everyone_resume_goes_on_stop_ends_all_and_takes_unsent_mail_back() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id;
    let list = acme.list("News").await;
    let id = live(
        &pool,
        org,
        "Series",
        &definition(series(list)),
        acme.owner().id,
        acme.admin(0).id,
    )
    .await;
    let ids = people(&pool, org, "p", 10).await;
    let mut c = pool.acquire().await.unwrap();
    assert!(automation::set_status(&mut c, org, id, Control::Pause)
        .await
        .unwrap()
        .is_some());
    // Paused: people still enrol (nobody is missed), but no step is taken.
    let mut tx = pool.begin().await.unwrap();
    app::db::audience::add_members(&mut tx, org.0, list, &ids)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let t0 = at("2031-01-06T10:00:00Z");
    assert_eq!(run_all(&pool, t0, 2).await, 0);
    assert_eq!(
        states(&pool, id).await,
        BTreeMap::from([("active".into(), 10)])
    );
    assert!(automation::set_status(&mut c, org, id, Control::Resume)
        .await
        .unwrap()
        .is_some());
    assert!(
        automation::set_status(&mut c, org, id, Control::Resume)
            .await
            .unwrap()
            .is_none(),
        "resuming an active automation changes nothing"
    );
    assert_eq!(run_all(&pool, t0, 2).await, 10);
    assert_eq!(mails(&pool, id).await.len(), 10);
    // Stop: every enrolment ends, and mail not yet claimed is taken off the queue.
    automation::set_status(&mut c, org, id, Control::Stop)
        .await
        .unwrap();
    assert_eq!(
        states(&pool, id).await,
        BTreeMap::from([("stopped:stopped".into(), 10)])
    );
    let (cancelled, queued): (i64, i64) = sqlx::query_as(
        "select count(*) filter (where status = 'cancelled'),
                (select count(*) from delivery_queue q join deliveries d using (job_id) where d.automation_id = $1)
         from deliveries where automation_id = $1",
    )
    .bind(id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((cancelled, queued), (10, 0));
    assert_eq!(run_all(&pool, t0 + Duration::days(30), 2).await, 0);
    // A stopped automation enrols nobody and is never approved again.
    let more = people(&pool, org, "late", 1).await;
    let mut tx = pool.begin().await.unwrap();
    app::db::audience::add_members(&mut tx, org.0, list, &more)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(states(&pool, id).await.values().sum::<i64>(), 10);
    assert!(matches!(
        automation::approve(&mut c, org, id, 1, acme.admin(0).id, true).await,
        Err(ApproveError::Stopped)
    ));
}

#[tokio::test]
async fn four_eyes_and_a_version_edit_mid_flight_leave_the_enrolled_on_theirs() {
    use app::domain::Role;
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner, Role::Admin, Role::Admin]).await;
    let org = acme.id;
    let (owner, admin) = (acme.owner().id, acme.admin(0).id);
    let list = acme.list("News").await;
    let mut c = pool.acquire().await.unwrap();
    let id = automation::create(&mut c, org, "Series", &definition(series(list)), owner)
        .await
        .unwrap();
    // Nobody approves their own edit unless the org allows it.
    assert!(matches!(
        automation::approve(&mut c, org, id, 1, owner, false).await,
        Err(ApproveError::OwnEdit)
    ));
    // A draft enrols nobody.
    let ids = people(&pool, org, "v", 4).await;
    let mut tx = pool.begin().await.unwrap();
    app::db::audience::add_members(&mut tx, org.0, list, &ids[..2])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(states(&pool, id).await.is_empty());
    automation::approve(&mut c, org, id, 1, admin, false)
        .await
        .unwrap();
    sqlx::query("delete from list_members where list_id = $1")
        .bind(list)
        .execute(&pool)
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    app::db::audience::add_members(&mut tx, org.0, list, &ids[..2])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let t0 = at("2031-01-06T10:00:00Z");
    run_all(&pool, t0, 2).await;
    // The admin edits the live series: a new version, not live until the owner approves it.
    let mut v2 = series(list);
    v2["steps"][2]["subject"] = json!("Day 2, version 2");
    let version = automation::update(&mut c, org, id, "Series", &definition(v2), admin)
        .await
        .unwrap();
    assert_eq!(version, 2);
    assert!(matches!(
        automation::approve(&mut c, org, id, 2, admin, false).await,
        Err(ApproveError::OwnEdit)
    ));
    assert!(matches!(
        automation::approve(&mut c, org, id, 1, owner, false).await,
        Err(ApproveError::Moved)
    ));
    // An edit saved after the approver opened version 2 is a version of its own: approving 2
    // approves what they saw, never the later text.
    let mut v3 = series(list);
    v3["steps"][2]["subject"] = json!("Day 2, sneaked in");
    assert_eq!(
        automation::update(&mut c, org, id, "Series", &definition(v3), admin)
            .await
            .unwrap(),
        3
    );
    assert!(matches!(
        automation::approve(&mut c, org, id, 2, acme.admin(1).id, false).await,
        Err(ApproveError::Moved)
    ));
    let mut v4 = series(list);
    v4["steps"][2]["subject"] = json!("Day 2, version 2");
    assert_eq!(
        automation::update(&mut c, org, id, "Series", &definition(v4), admin)
            .await
            .unwrap(),
        4
    );
    // Nor its author, as for a campaign: a third admin approves.
    assert!(matches!(
        automation::approve(&mut c, org, id, 4, owner, false).await,
        Err(ApproveError::OwnEdit)
    ));
    automation::approve(&mut c, org, id, 4, acme.admin(1).id, false)
        .await
        .unwrap();
    // Newcomers enrol on version 2; the first two finish on version 1.
    let mut tx = pool.begin().await.unwrap();
    app::db::audience::add_members(&mut tx, org.0, list, &ids[2..])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    run_all(&pool, t0, 2).await;
    run_all(&pool, t0 + Duration::days(3), 2).await;
    let subjects: BTreeMap<i64, String> = {
        let refs: Vec<(i64, i64, i32)> = sqlx::query_as(
            "select org_id, enrolment_id, 2 from deliveries where automation_id = $1 and job_id like '%:2'",
        )
        .bind(id)
        .fetch_all(&pool)
        .await
        .unwrap();
        let by_enrolment: BTreeMap<i64, i64> = sqlx::query_as::<_, (i64, i64)>(
            "select id, subscriber_id from enrolments where automation_id = $1",
        )
        .bind(id)
        .fetch_all(&pool)
        .await
        .unwrap()
        .into_iter()
        .collect();
        automation::mail_contents(&mut c, &refs)
            .await
            .unwrap()
            .into_iter()
            .map(|m| (by_enrolment[&m.enrolment_id], m.subject))
            .collect()
    };
    assert_eq!(subjects.len(), 4);
    for (i, who) in ids.iter().enumerate() {
        let want = if i < 2 { "Day 2" } else { "Day 2, version 2" };
        assert_eq!(subjects[who], want, "subscriber {i}");
    }
}

#[tokio::test]
async fn waits_until_an_hour_cross_both_hemispheres_daylight_changes_as_documented() {
    let pool = test_db().await;
    // The org is in UTC; each subscriber's own zone is an attribute.
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id;
    sqlx::query("update orgs set timezone = 'UTC' where id = $1")
        .bind(org)
        .execute(&pool)
        .await
        .unwrap();
    let id = live(
        &pool,
        org,
        "Sunday 2am",
        &definition(json!({
            "trigger": {"type": "api"}, "reentry": "per_trigger",
            "steps": [
                {"type": "wait_until", "weekday": "sunday", "hour": 2},
                {"type": "email", "subject": "Sunday", "body": "x"}
            ]
        })),
        acme.owner().id,
        acme.admin(0).id,
    )
    .await;
    // (zone, reached at, the documented instant)
    let cases = [
        // Berlin springs forward at 02:00 on 2027-03-28: 02:00 does not exist, and is read as
        // the clock before the change reads it (02:00 CET, 03:00 CEST).
        (
            "Europe/Berlin",
            "2027-03-27T12:00:00Z",
            "2027-03-28T01:00:00Z",
        ),
        // Berlin falls back on 2027-10-31: 02:00 happens twice; the later one.
        (
            "Europe/Berlin",
            "2027-10-30T12:00:00Z",
            "2027-10-31T01:00:00Z",
        ),
        // Sydney falls back on 2027-04-04 (02:00 twice; the later one, AEST).
        (
            "Australia/Sydney",
            "2027-04-02T12:00:00Z",
            "2027-04-03T16:00:00Z",
        ),
        // Sydney springs forward on 2027-10-03 (02:00 does not exist: 02:00 AEST).
        (
            "Australia/Sydney",
            "2027-10-01T12:00:00Z",
            "2027-10-02T16:00:00Z",
        ),
        // A zone nobody knows: the org's (UTC).
        (
            "Mars/Olympus_Mons",
            "2027-03-27T12:00:00Z",
            "2027-03-28T02:00:00Z",
        ),
        // Reached on Sunday after 02:00: next week's Sunday.
        ("UTC", "2027-03-28T03:00:00Z", "2027-04-04T02:00:00Z"),
    ];
    let ids = people(&pool, org, "z", cases.len()).await;
    let mut c = pool.acquire().await.unwrap();
    for (i, (zone, reached, want)) in cases.iter().enumerate() {
        sqlx::query("update subscribers set attributes = jsonb_build_object('timezone', $2::text) where id = $1")
            .bind(ids[i])
            .bind(zone)
            .execute(&pool)
            .await
            .unwrap();
        let e = automation::enrol(
            &mut c,
            org,
            id,
            SubscriberId(ids[i]),
            &format!("k{i}"),
            &json!({}),
        )
        .await
        .unwrap();
        // Only this one is due at `reached` (the others wait further on, or later).
        sqlx::query("update enrolments set due_at = $2 where id = $1")
            .bind(e.id)
            .bind(at(reached))
            .execute(&pool)
            .await
            .unwrap();
        app::db::automation::run_due(&pool, Some(at(reached)), 10)
            .await
            .unwrap();
        let due: DateTime<Utc> = sqlx::query_scalar("select due_at from enrolments where id = $1")
            .bind(e.id)
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(due, at(want), "{zone} reached at {reached}");
        // A second later nothing is sent; at the instant, the mail is queued once.
        let before = at(want) - Duration::seconds(1);
        app::db::automation::run_due(&pool, Some(before), 10)
            .await
            .unwrap();
        let queued = |pool: sqlx::PgPool| async move {
            sqlx::query_scalar::<_, i64>("select count(*) from deliveries where enrolment_id = $1")
                .bind(e.id)
                .fetch_one(&pool)
                .await
                .unwrap()
        };
        assert_eq!(queued(pool.clone()).await, 0);
        // A runner that comes late (a missed window) sends once, late: never twice.
        app::db::automation::run_due(&pool, Some(at(want) + Duration::hours(5)), 10)
            .await
            .unwrap();
        app::db::automation::run_due(&pool, Some(at(want) + Duration::hours(6)), 10)
            .await
            .unwrap();
        assert_eq!(queued(pool.clone()).await, 1);
    }
}

#[tokio::test]
async fn a_mail_due_in_quiet_hours_waits_untaken_until_they_end() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id;
    sqlx::query("update orgs set timezone = 'Europe/Berlin' where id = $1")
        .bind(org)
        .execute(&pool)
        .await
        .unwrap();
    let mut c = pool.acquire().await.unwrap();
    app::db::settings::set_quiet_hours(
        &mut c,
        org.0,
        app::domain::automation::QuietHours::parse("q", "22-07").unwrap(),
    )
    .await
    .unwrap();
    let id = live(
        &pool,
        org,
        "Night",
        &definition(json!({
            "trigger": {"type": "api"}, "reentry": "per_trigger",
            "steps": [
                {"type": "set_attribute", "name": "seen", "value": true},
                {"type": "email", "subject": "Hi", "body": "x"}
            ]
        })),
        acme.owner().id,
        acme.admin(0).id,
    )
    .await;
    let ids = people(&pool, org, "q", 1).await;
    let e = automation::enrol(&mut c, org, id, SubscriberId(ids[0]), "k", &json!({}))
        .await
        .unwrap();
    // 23:30 in Berlin (22:30 UTC in January): the attribute is set, the mail waits for 07:00.
    app::db::automation::run_due(&pool, Some(at("2031-01-06T22:30:00Z")), 10)
        .await
        .unwrap();
    let (step, due): (i32, DateTime<Utc>) =
        sqlx::query_as("select step, due_at from enrolments where id = $1")
            .bind(e.id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!((step, due), (1, at("2031-01-07T06:00:00Z")));
    let taken: Vec<i32> =
        sqlx::query_scalar("select step from enrolment_steps where enrolment_id = $1")
            .bind(e.id)
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(taken, vec![0], "the mail step is not taken while it waits");
    app::db::automation::run_due(&pool, Some(at("2031-01-07T05:59:00Z")), 10)
        .await
        .unwrap();
    assert!(mails(&pool, id).await.is_empty());
    app::db::automation::run_due(&pool, Some(at("2031-01-07T06:00:00Z")), 10)
        .await
        .unwrap();
    assert_eq!(mails(&pool, id).await.len(), 1);
}

#[tokio::test]
async fn enrolments_and_their_ends_are_events_out_in_the_same_transaction_as_documented() {
    use app::domain::WebhookEventType as T;
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id;
    let mut c = pool.acquire().await.unwrap();
    let endpoint = app::db::webhooks_out::create(
        &mut c,
        org.0,
        Some(acme.owner().id.0),
        "https://hooks.example.com/automations",
        &[
            T::AutomationEnrolled,
            T::AutomationCompleted,
            T::AutomationExited,
        ],
        &app::webhook::new_secret(),
        app::domain::webhook::WEBHOOK_MAX_IN_FLIGHT,
    )
    .await
    .unwrap();
    let id = live(
        &pool,
        org,
        "Trial",
        &definition(json!({
            "trigger": {"type": "api"}, "reentry": "per_trigger",
            "goal": {"event": "upgraded"},
            "steps": [
                {"type": "email", "subject": "Hi", "body": "x"},
                {"type": "wait", "days": 1},
                {"type": "email", "subject": "Still there?", "body": "x"}
            ]
        })),
        acme.owner().id,
        acme.admin(0).id,
    )
    .await;
    let ids = people(&pool, org, "h", 2).await;
    for (i, who) in ids.iter().enumerate() {
        automation::enrol(
            &mut c,
            org,
            id,
            SubscriberId(*who),
            &format!("t{i}"),
            &json!({}),
        )
        .await
        .unwrap();
    }
    let t0 = at("2031-01-06T10:00:00Z");
    run_all(&pool, t0, 2).await;
    // The second one upgrades: they leave at their next step (the goal), the first completes.
    let props = json!({});
    app::db::events::insert(
        &mut c,
        org,
        &[NewEvent {
            key: "up-1",
            subscriber: SubscriberId(ids[1]),
            name: "upgraded",
            properties: &props,
            occurred_at: Utc::now() + Duration::seconds(1),
        }],
    )
    .await
    .unwrap();
    run_all(&pool, t0 + Duration::days(2), 2).await;
    let events: Vec<(String, serde_json::Value)> = sqlx::query_as(
        "select event_type, payload from webhook_out_messages where endpoint_id = $1 order by event_type, id",
    )
    .bind(endpoint)
    .fetch_all(&pool)
    .await
    .unwrap();
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "automation.completed",
            "automation.enrolled",
            "automation.enrolled",
            "automation.exited"
        ]
    );
    for (_, body) in &events {
        crate::webhooks::events_out::assert_documented(body);
        assert_eq!(body["data"]["automation_id"], id);
    }
    let exited = &events[3].1["data"];
    assert_eq!(
        (exited["reason"].as_str(), exited["subscriber_id"].as_i64()),
        (Some("goal"), Some(ids[1]))
    );
    // Running again reports nothing twice.
    run_all(&pool, t0 + Duration::days(9), 2).await;
    let again: i64 =
        sqlx::query_scalar("select count(*) from webhook_out_messages where endpoint_id = $1")
            .bind(endpoint)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(again, 4);
}

#[tokio::test]
async fn a_date_trigger_fires_on_its_day_catches_up_a_missed_one_and_never_twice() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id;
    sqlx::query("update orgs set timezone = 'UTC' where id = $1")
        .bind(org)
        .execute(&pool)
        .await
        .unwrap();
    let before_trial = live(
        &pool,
        org,
        "Trial ends in 3 days",
        &definition(json!({
            "trigger": {"type": "date", "attribute": "trial_ends", "offset_days": -3},
            "reentry": "per_trigger",
            "steps": [{"type": "email", "subject": "Your trial ends on {{ event.date }}", "body": "x"}]
        })),
        acme.owner().id,
        acme.admin(0).id,
    )
    .await;
    let anniversary = live(
        &pool,
        org,
        "Anniversary",
        &definition(json!({
            "trigger": {"type": "date", "attribute": "joined", "yearly": true},
            "reentry": "per_trigger",
            "steps": [{"type": "email", "subject": "Happy anniversary", "body": "x"}]
        })),
        acme.owner().id,
        acme.admin(0).id,
    )
    .await;
    let ids = people(&pool, org, "d", 7).await;
    let attrs = [
        json!({"trial_ends": "2031-01-09"}),           // fires 2031-01-06
        json!({"trial_ends": "2031-01-10T12:00:00Z"}), // fires 2031-01-07
        json!({"trial_ends": "2031-01-08"}),           // fired 2031-01-05: caught up
        json!({"trial_ends": "2030-12-01"}),           // long past: never
        json!({"trial_ends": "not a date", "joined": 2020}),
        json!({"joined": "2020-01-06"}), // every 6 January
        json!({"joined": "2024-02-29"}), // 28 February in 2031
    ];
    for (id, a) in ids.iter().zip(&attrs) {
        sqlx::query("update subscribers set attributes = $2 where id = $1")
            .bind(id)
            .bind(a)
            .execute(&pool)
            .await
            .unwrap();
    }
    let enrolled = |a: i64| {
        let pool = pool.clone();
        async move {
            sqlx::query_as::<_, (i64, String)>(
                "select subscriber_id, occurrence from enrolments where automation_id = $1 order by occurrence, subscriber_id",
            )
            .bind(a)
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    let on = |day: &str| at(&format!("{day}T10:00:00Z"));
    for _ in 0..2 {
        automation::enrol_by_dates(&pool, Some(on("2031-01-06")))
            .await
            .unwrap();
    }
    assert_eq!(
        enrolled(before_trial).await,
        vec![
            (ids[2], "date:2031-01-05".to_owned()),
            (ids[0], "date:2031-01-06".to_owned())
        ]
    );
    assert_eq!(
        enrolled(anniversary).await,
        vec![(ids[5], "date:2031-01-06".to_owned())]
    );
    automation::enrol_by_dates(&pool, Some(on("2031-01-07")))
        .await
        .unwrap();
    assert_eq!(enrolled(before_trial).await.len(), 3);
    automation::enrol_by_dates(&pool, Some(on("2031-02-28")))
        .await
        .unwrap();
    assert_eq!(
        enrolled(anniversary).await,
        vec![
            (ids[5], "date:2031-01-06".to_owned()),
            (ids[6], "date:2031-02-28".to_owned())
        ]
    );
    // The date reaches the mail as {{ event.date }}.
    run_all(&pool, on("2031-03-01"), 2).await;
    let mail = automation::mail_contents(
        &mut pool.acquire().await.unwrap(),
        &sqlx::query_as::<_, (i64, i64, i32)>(
            "select org_id, enrolment_id, 0 from deliveries where automation_id = $1",
        )
        .bind(before_trial)
        .fetch_all(&pool)
        .await
        .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(mail.len(), 3);
    assert!(mail
        .iter()
        .all(|m| m.context["date"].as_str().unwrap().starts_with("2031-01-")));

    // One automation the database refuses to enrol anyone in (an operator's rule) fails its
    // own scan only: the automations after it in the pass still enrol.
    sqlx::query(&format!(
        "alter table enrolments add constraint operators_rule
         check (automation_id <> {before_trial}) not valid"
    ))
    .execute(&pool)
    .await
    .unwrap();
    for (id, a) in [
        (ids[3], json!({"trial_ends": "2032-01-09"})),
        (ids[4], json!({"joined": "2021-01-06"})),
    ] {
        sqlx::query("update subscribers set attributes = $2 where id = $1")
            .bind(id)
            .bind(a)
            .execute(&pool)
            .await
            .unwrap();
    }
    assert!(
        before_trial < anniversary,
        "the refused one is scanned first"
    );
    automation::enrol_by_dates(&pool, Some(on("2032-01-06")))
        .await
        .unwrap();
    assert_eq!(enrolled(before_trial).await.len(), 3);
    assert!(enrolled(anniversary)
        .await
        .contains(&(ids[4], "date:2032-01-06".to_owned())));
}

#[tokio::test]
async fn only_confirmed_subscribers_are_enrolled_and_one_blocklisted_meanwhile_leaves() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id;
    let list = acme.list("News").await;
    let id = live(
        &pool,
        org,
        "Series",
        &definition(series(list)),
        acme.owner().id,
        acme.admin(0).id,
    )
    .await;
    let ids = people(&pool, org, "c", 3).await;
    sqlx::query("update subscribers set status = 'unconfirmed' where id = $1")
        .bind(ids[0])
        .execute(&pool)
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    app::db::audience::add_members(&mut tx, org.0, list, &ids)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let enrolled: Vec<i64> = sqlx::query_scalar(
        "select subscriber_id from enrolments where automation_id = $1 order by subscriber_id",
    )
    .bind(id)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        enrolled,
        ids[1..].to_vec(),
        "the unconfirmed one is not enrolled"
    );
    let mut c = pool.acquire().await.unwrap();
    assert!(matches!(
        automation::enrol(&mut c, org, id, SubscriberId(ids[0]), "k", &json!({})).await,
        Err(automation::EnrolError::NotConfirmed)
    ));
    let t0 = at("2031-01-06T10:00:00Z");
    run_all(&pool, t0, 2).await;
    sqlx::query("update subscribers set status = 'blocklisted' where id = $1")
        .bind(ids[1])
        .execute(&pool)
        .await
        .unwrap();
    run_all(&pool, t0 + Duration::days(30), 2).await;
    run_all(&pool, t0 + Duration::days(60), 2).await;
    assert_eq!(
        states(&pool, id).await,
        BTreeMap::from([("completed".into(), 1), ("exited:unsubscribed".into(), 1)])
    );
}

/// A step the database refuses for one person (here a constraint of the operator's) fails
/// their batch; it is taken again one person at a time: they leave (`failed`, the step
/// recorded as skipped), everyone else in the batch goes on, and nothing is sent twice.
#[tokio::test]
async fn a_step_the_database_refuses_for_one_person_ends_theirs_and_strands_nobody_else() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id;
    let list = acme.list("News").await;
    let id = live(
        &pool,
        org,
        "Flagged",
        &definition(json!({
            "trigger": {"type": "list_joined", "list_id": list},
            "reentry": "once",
            "steps": [
                {"type": "email", "subject": "Welcome", "body": "x"},
                {"type": "wait", "days": 1},
                {"type": "set_attribute", "name": "vip", "value": true},
                {"type": "email", "subject": "You are a VIP", "body": "x"}
            ]
        })),
        acme.owner().id,
        acme.admin(0).id,
    )
    .await;
    let ids = people(&pool, org, "f", 30).await;
    let poison = ids[17];
    sqlx::query(&format!(
        "alter table subscribers add constraint operators_rule
         check (id <> {poison} or not attributes ? 'vip')"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let mut tx = pool.begin().await.unwrap();
    app::db::audience::add_members(&mut tx, org.0, list, &ids)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // One runner, one batch of everyone at each instant; the second claim's batch meets the
    // refused step; then a later claim again.
    let t0 = at("2031-01-06T10:00:00Z");
    run_all(&pool, t0, 1).await;
    run_all(&pool, t0 + Duration::days(1) + Duration::minutes(1), 1).await;
    run_all(&pool, t0 + Duration::days(2), 1).await;
    assert_eq!(
        states(&pool, id).await,
        BTreeMap::from([("completed".into(), 29), ("exited:failed".into(), 1)])
    );
    let taken: Vec<(i32, String, String)> = sqlx::query_as(
        "select st.step, st.outcome, st.detail from enrolment_steps st
         join enrolments e on e.id = st.enrolment_id
         where e.automation_id = $1 and e.subscriber_id = $2 order by st.step",
    )
    .bind(id)
    .bind(poison)
    .fetch_all(&pool)
    .await
    .unwrap();
    let outcomes: Vec<(i32, &str)> = taken.iter().map(|t| (t.0, t.1.as_str())).collect();
    assert_eq!(outcomes, [(0, "sent"), (1, "waited"), (2, "skipped")]);
    assert!(taken[2].2.contains("refused"), "{}", taken[2].2);
    // The others got both mails, the one who failed the first only, each once.
    let per_person: Vec<(i64, i64)> = sqlx::query_as(
        "select subscriber_id, count(*) from deliveries where automation_id = $1
         group by subscriber_id order by subscriber_id",
    )
    .bind(id)
    .fetch_all(&pool)
    .await
    .unwrap();
    let want: Vec<(i64, i64)> = ids
        .iter()
        .map(|s| (*s, if *s == poison { 1 } else { 2 }))
        .collect();
    assert_eq!(per_person, want);
    assert!(mails(&pool, id).await.values().all(|n| *n == 1));
}

/// A branch on "did the event since they were enrolled" tells an invitation made before the
/// enrolment from one made after; the lists the steps name gain and lose the person; the
/// condition is refused in a saved segment, which has no enrolment.
#[tokio::test]
async fn a_branch_counts_events_since_enrolment_and_list_steps_move_people() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id;
    let (engaged, trial) = (acme.list("Engaged").await, acme.list("Trial").await);
    let invited = json!({"op": "all", "children": [
        {"type": "event", "name": "invited", "since_enrolment": true}
    ]});
    let a = live(
        &pool,
        org,
        "Invite nudge",
        &definition(json!({
            "trigger": {"type": "api"},
            "reentry": "once",
            "steps": [
                {"type": "branch", "condition": invited, "else": {"go_to": 3}},
                {"type": "add_to_list", "list_id": engaged},
                {"type": "exit"},
                {"type": "remove_from_list", "list_id": trial}
            ]
        })),
        acme.owner().id,
        acme.admin(0).id,
    )
    .await;
    let ids = people(&pool, org, "b", 3).await;
    let (ann, bob, cat) = (ids[0], ids[1], ids[2]);
    let mut tx = pool.begin().await.unwrap();
    app::db::audience::add_members(&mut tx, org.0, trial, &ids)
        .await
        .unwrap();
    let mut enrolled_at = BTreeMap::new();
    for id in ids.iter().copied() {
        let e = automation::enrol(&mut tx, org, a, SubscriberId(id), "k", &json!({}))
            .await
            .unwrap();
        let t: DateTime<Utc> =
            sqlx::query_scalar("select enrolled_at from enrolments where id = $1")
                .bind(e.id)
                .fetch_one(&mut *tx)
                .await
                .unwrap();
        enrolled_at.insert(id, t);
    }
    // Ann was invited the day before her enrolment, Bob a minute after his, Cat never.
    let props = json!({});
    for (key, who, when) in [
        ("i1", ann, enrolled_at[&ann] - Duration::days(1)),
        ("i2", bob, enrolled_at[&bob] + Duration::minutes(1)),
    ] {
        app::db::events::insert(
            &mut tx,
            org,
            &[NewEvent {
                key,
                subscriber: SubscriberId(who),
                name: "invited",
                properties: &props,
                occurred_at: when,
            }],
        )
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
    run_all(&pool, enrolled_at[&cat] + Duration::hours(1), 3).await;

    let ends: BTreeMap<i64, (String, Option<String>)> = sqlx::query_as::<_, (i64, String, Option<String>)>(
        "select subscriber_id, state::text, exit_reason::text from enrolments where automation_id = $1",
    )
    .bind(a)
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .map(|(s, st, r)| (s, (st, r)))
    .collect();
    assert_eq!(ends[&bob], ("exited".to_owned(), Some("step".to_owned())));
    assert_eq!(ends[&ann], ("completed".to_owned(), None));
    assert_eq!(ends[&cat], ("completed".to_owned(), None));
    let branched: BTreeMap<i64, String> = sqlx::query_as(
        "select e.subscriber_id, s.detail from enrolment_steps s
         join enrolments e on e.id = s.enrolment_id
         where s.automation_id = $1 and s.step = 0",
    )
    .bind(a)
    .fetch_all(&pool)
    .await
    .unwrap()
    .into_iter()
    .collect();
    assert_eq!(
        branched,
        BTreeMap::from([
            (ann, "else".into()),
            (bob, "then".into()),
            (cat, "else".into())
        ])
    );
    let members = |list: i64| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "select subscriber_id from list_members where list_id = $1 order by 1",
            )
            .bind(list)
            .fetch_all(&pool)
            .await
            .unwrap()
        }
    };
    assert_eq!(members(engaged).await, vec![bob]);
    assert_eq!(
        members(trial).await,
        vec![bob],
        "the others left the trial list"
    );

    // A saved segment has no enrolment to count from.
    let g: app::domain::segment::Group = serde_json::from_value(invited).unwrap();
    let refused = g.check().unwrap_err();
    assert!(refused.path.ends_with("since_enrolment"), "{refused:?}");
}

/// An automation's mail queued before the address was suppressed is not sent: the delivery
/// engine checks suppressions again when it claims the message, as for any bulk mail.
#[tokio::test]
async fn automation_mail_queued_before_a_suppression_is_suppressed_at_the_claim() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id;
    let a = live(
        &pool,
        org,
        "Hello",
        &definition(json!({
            "trigger": {"type": "api"},
            "reentry": "once",
            "steps": [{"type": "email", "subject": "Hello", "body": "x"}]
        })),
        acme.owner().id,
        acme.admin(0).id,
    )
    .await;
    let ids = people(&pool, org, "q", 2).await;
    let mut c = pool.acquire().await.unwrap();
    for id in &ids {
        automation::enrol(&mut c, org, a, SubscriberId(*id), "k", &json!({}))
            .await
            .unwrap();
    }
    run_all(&pool, Utc::now() + Duration::minutes(1), 2).await;
    assert_eq!(mails(&pool, a).await.len(), 2, "both queued");
    app::db::audience::suppress_all(
        &mut c,
        org.0,
        &["q0@example.org"],
        app::domain::SuppressionReason::Manual,
        "test",
    )
    .await
    .unwrap();
    let sink = testkit::SmtpSink::start();
    mailroom::workers::delivery::Worker::new(
        pool.clone(),
        crate::support::fixtures::config(&sink),
        "inproc",
    )
    .drain()
    .await
    .unwrap();
    let outcomes: BTreeMap<i64, String> =
        sqlx::query_as("select subscriber_id, status from deliveries where automation_id = $1")
            .bind(a)
            .fetch_all(&pool)
            .await
            .unwrap()
            .into_iter()
            .collect();
    assert_eq!(outcomes[&ids[0]], "suppressed");
    assert_eq!(outcomes[&ids[1]], "delivered");
    let to: Vec<String> = sink.messages().iter().flat_map(|m| m.to.clone()).collect();
    assert_eq!(to, ["q1@example.org"]);
}
