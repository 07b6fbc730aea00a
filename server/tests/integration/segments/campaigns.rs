//! Campaigns sent to segments: the audience is lists and segments minus the excluded ones,
//! under the rules campaigns have (confirmed only, never suppressed, one message per address);
//! the segment is read at the version frozen at approval; the count the approver was shown is
//! the number materialised unless the data changed in between, and the page says which.

use std::collections::BTreeSet;

use app::api::campaign::edit::{CampaignAction, CampaignSheet};
use app::domain::segment::Group;
use app::domain::{CampaignId, OrgId, Role, Transition};
use serde_json::json;

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::test_app::{json, spawn_app};

fn group(v: serde_json::Value) -> Group {
    serde_json::from_value(v).unwrap()
}

async fn segment(pool: &sqlx::PgPool, org: OrgId, name: &str, def: &Group) -> i64 {
    let mut c = pool.acquire().await.unwrap();
    app::segments::save(&mut c, org, None, None, name, def)
        .await
        .unwrap()
        .0
}

/// The addresses the campaign must reach, worked out here from the raw rows: members of
/// `list` or subscribers with `plan = pro`, minus members of `excluded` and those who did
/// `invited`; confirmed, not erased, not suppressed; one per address.
async fn expected(pool: &sqlx::PgPool, org: OrgId, list: i64, excluded: i64) -> BTreeSet<String> {
    let rows: Vec<(i64, String, String, Option<String>, bool, bool)> = sqlx::query_as(
        "select s.id, s.email_lower, s.status, s.attributes ->> 'plan', s.erased_at is not null,
                exists (select 1 from suppressions x where x.org_id = s.org_id and x.email_lower = s.email_lower)
         from subscribers s where s.org_id = $1",
    )
    .bind(org)
    .fetch_all(pool)
    .await
    .unwrap();
    let members: Vec<(i64, i64)> =
        sqlx::query_as("select list_id, subscriber_id from list_members where org_id = $1")
            .bind(org)
            .fetch_all(pool)
            .await
            .unwrap();
    let invited: BTreeSet<i64> = sqlx::query_scalar::<_, i64>(
        "select subscriber_id from events where org_id = $1 and name = 'invited'",
    )
    .bind(org)
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .collect();
    let on = |l: i64, s: i64| members.contains(&(l, s));
    rows.into_iter()
        .filter(|(id, _, status, plan, erased, suppressed)| {
            status == "confirmed"
                && !erased
                && !suppressed
                && (on(list, *id) || plan.as_deref() == Some("pro"))
                && !on(excluded, *id)
                && !invited.contains(id)
        })
        .map(|r| r.1)
        .collect()
}

#[tokio::test]
async fn a_campaign_to_a_segment_and_a_list_minus_exclusions_reaches_each_matching_address_once() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id;
    let (lists, _) = acme.audience(300).await;
    // Every third row is on the pro plan (case variants included), some did "invited", some
    // are unconfirmed or suppressed.
    sqlx::query(
        "update subscribers set attributes = case when id % 3 = 0 then '{\"plan\": \"pro\"}'::jsonb
                                                  else '{\"plan\": \"free\"}'::jsonb end,
                                status = case when id % 17 = 0 then 'unconfirmed' else status end
         where org_id = $1",
    )
    .bind(org)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "insert into events (org_id, key, subscriber_id, name, occurred_at)
         select org_id, 'i' || id, id, 'invited', now() from subscribers where org_id = $1 and id % 5 = 0",
    )
    .bind(org)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query(
        "insert into suppressions (org_id, email_lower, reason, source)
         select org_id, email_lower, 'manual', 'test' from subscribers where org_id = $1 and id % 11 = 0
         on conflict do nothing",
    )
    .bind(org)
    .execute(&pool)
    .await
    .unwrap();
    let pro = segment(
        &pool,
        org,
        "Pro",
        &group(json!({"op": "all", "children": [
            {"type": "attribute", "name": "plan", "test": {"op": "text_equals", "value": "pro"}}]})),
    )
    .await;
    let inviters = segment(
        &pool,
        org,
        "Inviters",
        &group(json!({"op": "all", "children": [{"type": "event", "name": "invited"}]})),
    )
    .await;
    let want = expected(&pool, org, lists[0], lists[2]).await;
    assert!(want.len() > 20, "{}", want.len());
    let id = acme
        .campaign()
        .to(&lists[..1])
        .and_segments(&[pro])
        .excluding(&lists[2..3], &[inviters])
        .approved()
        .await;
    let estimate = {
        let mut c = pool.acquire().await.unwrap();
        app::db::campaign::edit::estimate(&mut c, org, id)
            .await
            .unwrap()
    };
    assert_eq!(estimate as usize, want.len());

    // After approval the segment changes: the campaign goes to the version approved.
    {
        let mut c = pool.acquire().await.unwrap();
        app::segments::save(
            &mut c,
            org,
            Some(pro),
            None,
            "Pro",
            &group(json!({"op": "any", "children": []})),
        )
        .await
        .unwrap();
    }
    let started = mailroom::workers::campaign::start_due(&pool).await.unwrap();
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].recipients as usize, want.len());
    let sent: Vec<String> = sqlx::query_scalar(
        "select email_lower from sends where campaign_id = $1 order by email_lower",
    )
    .bind(id)
    .fetch_all(&pool)
    .await
    .unwrap();
    let distinct: BTreeSet<String> = sent.iter().cloned().collect();
    assert_eq!(distinct.len(), sent.len(), "one send per address");
    assert_eq!(distinct, want);
}

#[tokio::test]
async fn the_page_says_when_the_materialised_count_differs_from_the_one_approved() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner, Role::Admin]).await;
    let org = acme.id;
    let app = spawn_app(pool.clone()).await;
    acme.audience(20).await;
    sqlx::query("update subscribers set attributes = '{\"plan\": \"pro\"}' where org_id = $1")
        .bind(org)
        .execute(&pool)
        .await
        .unwrap();
    let pro = segment(
        &pool,
        org,
        "Pro",
        &group(json!({"op": "all", "children": [
            {"type": "attribute", "name": "plan", "test": {"op": "text_equals", "value": "pro"}}]})),
    )
    .await;
    let draft = {
        let mut c = pool.acquire().await.unwrap();
        let id = crate::support::helpers::draft(&mut c, org.0, acme.owner().id.0, "Launch").await;
        app::db::campaign::edit::set_audience(
            &mut c,
            org,
            CampaignId(id),
            &app::db::campaign::edit::Audience {
                segments: vec![pro],
                ..Default::default()
            },
        )
        .await
        .unwrap();
        id
    };
    let owner = acme.owner().signed_in(&app).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let act = |verb: Transition| CampaignAction {
        id: draft,
        verb,
        version: 1,
        reason: String::new(),
    };
    let (s, b) = app.call_fn(&owner, act(Transition::Submit)).await;
    assert_eq!(s, 200, "{b}");
    let (s, b) = app.call_fn(&admin, act(Transition::Approve)).await;
    assert_eq!(s, 200, "{b}");
    let shown: Option<i64> =
        sqlx::query_scalar("select approved_estimate from campaigns where id = $1")
            .bind(draft)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(shown, Some(20));
    // Three people leave the pro plan before the start.
    sqlx::query(
        "update subscribers set attributes = '{}'
         where org_id = $1 and email_lower in ('p1@example.org', 'p2@example.org', 'p3@example.org')",
    )
    .bind(org)
    .execute(&pool)
    .await
    .unwrap();
    mailroom::workers::campaign::start_due(&pool).await.unwrap();
    let (s, b) = app.call_fn(&owner, CampaignSheet { id: draft }).await;
    assert_eq!(s, 200, "{b}");
    let sheet = json(&b);
    assert_eq!(sheet["estimate"], 17, "{sheet}");
    assert_eq!(sheet["approved_estimate_differs"], 20, "{sheet}");
    let html = app.get_html(&owner, &format!("/campaigns/{draft}")).await;
    assert!(
        html.contains("Approved for 20 recipients; 17 were chosen at the start"),
        "{html}"
    );
}
