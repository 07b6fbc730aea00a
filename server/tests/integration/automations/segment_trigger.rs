//! The "entered a segment" trigger: switching it on enrols nobody who already matched; a scan
//! enrols who entered since the last one, once, however many replicas scan at once; leaving
//! and matching again is another entry (per the re-entry rule); the segment version is the
//! one the approved automation version named; another org's segment is not found; a live
//! automation's segment cannot be deleted.

use app::db::automation;
use app::db::segment::DeleteError;
use app::domain::segment::Group;
use app::domain::{OrgId, Role};
use chrono::{DateTime, Duration, Utc};
use serde_json::json;
use sqlx::PgPool;

use super::{definition, live, people, run_all};
use crate::support::helpers::test_db;
use crate::support::org::TestOrg;

fn plan_is(plans: &[&str]) -> Group {
    let children: Vec<serde_json::Value> = plans
        .iter()
        .map(|p| json!({"type": "attribute", "name": "plan", "test": {"op": "text_equals", "value": p}}))
        .collect();
    serde_json::from_value(json!({"op": "any", "children": children})).unwrap()
}

async fn set_plan(pool: &PgPool, subscriber: i64, plan: &str) {
    sqlx::query(
        "update subscribers set attributes = jsonb_build_object('plan', $2::text) where id = $1",
    )
    .bind(subscriber)
    .bind(plan)
    .execute(pool)
    .await
    .unwrap();
}

/// (subscriber, occurrence) of the automation's enrolments, in that order.
async fn enrolled(pool: &PgPool, automation: i64) -> Vec<(i64, String)> {
    sqlx::query_as(
        "select subscriber_id, occurrence from enrolments where automation_id = $1
         order by subscriber_id, id",
    )
    .bind(automation)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The scan interval the tests' scans are made at (the worker's default).
const EVERY: std::time::Duration = std::time::Duration::from_secs(60);

/// Twenty scans at once, as twenty replicas would run them; returns the enrolments made.
async fn scan(pool: &PgPool, now: DateTime<Utc>) -> u64 {
    let scans: Vec<_> = (0..20)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(
                async move { automation::enrol_by_segments(&pool, Some(now), EVERY).await },
            )
        })
        .collect();
    let mut made = 0;
    for s in scans {
        made += s.await.unwrap().unwrap();
    }
    made
}

#[tokio::test]
async fn entering_a_segment_enrols_once_per_entry_and_switching_on_enrols_nobody_already_in() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner, Role::Admin, Role::Admin]).await;
    let org = acme.id;
    let (owner, admin, second) = (acme.owner().id, acme.admin(0).id, acme.admin(1).id);
    let segment = {
        let mut c = pool.acquire().await.unwrap();
        app::db::segment::create(&mut c, org, "Pro", &plan_is(&["pro"]))
            .await
            .unwrap()
    };
    let ids = people(&pool, org, "s", 7).await;
    // Already in the segment before the automations go live.
    set_plan(&pool, ids[0], "pro").await;
    set_plan(&pool, ids[1], "pro").await;
    let def = |reentry: &str| {
        definition(json!({
            "trigger": {"type": "segment_entered", "segment_id": segment},
            "reentry": reentry,
            "steps": [{"type": "email", "subject": "Welcome to {{ event.segment_id }}", "body": "x"}]
        }))
    };
    let each = live(&pool, org, "Each time", &def("per_trigger"), owner, admin).await;
    let once = live(&pool, org, "Once", &def("once"), owner, admin).await;
    // The saved version names the segment's version, whatever the caller sent.
    let pinned: serde_json::Value = sqlx::query_scalar(
        "select definition -> 'trigger' from automation_versions where automation_id = $1",
    )
    .bind(each)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        pinned,
        json!({"type": "segment_entered", "segment_id": segment, "version": 1})
    );

    let t0: DateTime<Utc> = "2031-01-06T10:00:00Z".parse().unwrap();
    assert_eq!(scan(&pool, t0).await, 0, "switching on enrols nobody");
    assert!(enrolled(&pool, each).await.is_empty());

    // One enters; one matches but is not confirmed; twenty scans at once enrol the first once.
    set_plan(&pool, ids[2], "pro").await;
    set_plan(&pool, ids[3], "pro").await;
    sqlx::query("update subscribers set status = 'unconfirmed' where id = $1")
        .bind(ids[3])
        .execute(&pool)
        .await
        .unwrap();
    // Scanned less than half an interval ago (by any replica): not scanned again yet.
    assert_eq!(scan(&pool, t0 + Duration::seconds(20)).await, 0);
    assert!(enrolled(&pool, each).await.is_empty());
    assert_eq!(scan(&pool, t0 + Duration::minutes(1)).await, 2);
    let first = enrolled(&pool, each).await;
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0].0, ids[2]);
    assert!(first[0].1.starts_with("segment:"), "{first:?}");
    assert_eq!(enrolled(&pool, once).await, vec![(ids[2], String::new())]);
    let context: serde_json::Value =
        sqlx::query_scalar("select context from enrolments where automation_id = $1")
            .bind(each)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(context, json!({"segment_id": segment}));
    // Nothing changed: nobody enters.
    assert_eq!(scan(&pool, t0 + Duration::minutes(2)).await, 0);

    // ids[2] leaves and comes back; ids[0], in from the start, leaves and comes back too.
    set_plan(&pool, ids[2], "free").await;
    set_plan(&pool, ids[0], "free").await;
    assert_eq!(scan(&pool, t0 + Duration::minutes(3)).await, 0);
    set_plan(&pool, ids[2], "pro").await;
    set_plan(&pool, ids[0], "pro").await;
    // Per entry: both again; once ever: only ids[0], never enrolled before.
    assert_eq!(scan(&pool, t0 + Duration::minutes(4)).await, 3);
    let again: Vec<i64> = enrolled(&pool, each).await.iter().map(|e| e.0).collect();
    assert_eq!(again, vec![ids[0], ids[2], ids[2]]);
    let once_in: Vec<i64> = enrolled(&pool, once).await.iter().map(|e| e.0).collect();
    assert_eq!(once_in, vec![ids[0], ids[2]]);

    // The segment is edited (pro or team): the live automation version still reads version 1.
    {
        let mut c = pool.acquire().await.unwrap();
        app::db::segment::update(
            &mut c,
            org,
            segment,
            "Pro",
            &plan_is(&["pro", "team"]),
            None,
        )
        .await
        .unwrap();
    }
    set_plan(&pool, ids[4], "team").await;
    assert_eq!(scan(&pool, t0 + Duration::minutes(5)).await, 0);
    // A new automation version, approved, names segment version 2; its first scan only notes
    // who matches (ids[4] is not enrolled); who enters after is, on that version.
    {
        let mut c = pool.acquire().await.unwrap();
        let v = automation::update(&mut c, org, each, "Each time", &def("per_trigger"), admin)
            .await
            .unwrap();
        assert_eq!(v, 2);
        automation::approve(&mut c, org, each, v, second, false)
            .await
            .unwrap();
    }
    assert_eq!(scan(&pool, t0 + Duration::minutes(6)).await, 0);
    set_plan(&pool, ids[5], "team").await;
    assert_eq!(scan(&pool, t0 + Duration::minutes(7)).await, 1);
    let last: (i64, i32) = sqlx::query_as(
        "select subscriber_id, version from enrolments where automation_id = $1
         order by id desc limit 1",
    )
    .bind(each)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(last, (ids[5], 2));

    // Every enrolment's mail goes out once.
    run_all(&pool, t0 + Duration::minutes(8), 3).await;
    for a in [each, once] {
        let (enrolments, mails, distinct): (i64, i64, i64) = sqlx::query_as(
            "select (select count(*) from enrolments where automation_id = $1),
                    count(*), count(distinct job_id)
             from deliveries where automation_id = $1",
        )
        .bind(a)
        .fetch_one(&pool)
        .await
        .unwrap();
        assert_eq!((mails, distinct), (enrolments, enrolments));
    }

    // A live automation's segment is not deleted.
    {
        let mut c = pool.acquire().await.unwrap();
        match app::db::segment::delete(&mut c, org, segment).await {
            Err(DeleteError::InUse(names)) => {
                assert_eq!(names, ["automation Each time", "automation Once"])
            }
            other => panic!("deleted a live automation's segment: {other:?}"),
        }
    }

    // A draft's segment may be deleted (nothing is live on it), and then the draft cannot be
    // approved: it would go live on a segment that is gone.
    {
        let mut c = pool.acquire().await.unwrap();
        let doomed = app::db::segment::create(&mut c, org, "Doomed", &plan_is(&["team"]))
            .await
            .unwrap();
        let d = definition(json!({
            "trigger": {"type": "segment_entered", "segment_id": doomed},
            "reentry": "once",
            "steps": [{"type": "exit"}]
        }));
        let draft = automation::create(&mut c, org, "On a doomed segment", &d, owner)
            .await
            .unwrap();
        app::db::segment::delete(&mut c, org, doomed).await.unwrap();
        assert!(matches!(
            automation::approve(&mut c, org, draft, 1, second, false).await,
            Err(automation::ApproveError::SegmentGone)
        ));
        let status: String =
            sqlx::query_scalar("select status::text from automations where id = $1")
                .bind(draft)
                .fetch_one(&pool)
                .await
                .unwrap();
        assert_eq!(status, "draft");
    }

    // Another org's segment is not found, on the reference check and on save.
    let globex = TestOrg::new(&pool, "globex").await;
    let theirs = {
        let mut c = pool.acquire().await.unwrap();
        app::db::segment::create(&mut c, globex.id, "Theirs", &plan_is(&["pro"]))
            .await
            .unwrap()
    };
    let foreign = definition(json!({
        "trigger": {"type": "segment_entered", "segment_id": theirs},
        "reentry": "once",
        "steps": [{"type": "exit"}]
    }));
    let mut c = pool.acquire().await.unwrap();
    assert_eq!(
        automation::foreign_reference(&mut c, org, &foreign)
            .await
            .unwrap()
            .as_deref(),
        Some("trigger.segment_id")
    );
    assert!(matches!(
        automation::create(&mut c, OrgId(org.0), "Foreign", &foreign, owner).await,
        Err(automation::StoreError::NotFound)
    ));
}
