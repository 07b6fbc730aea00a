use app::domain::{EmailAddress, Role};

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;

#[tokio::test]
async fn composite_keys_refuse_rows_that_mix_two_organisations() {
    let pool = test_db().await;
    let alpha = TestOrg::with_roles(&pool, "alpha", &[Role::Owner]).await;
    let org_a = alpha.id.0;
    let beta = TestOrg::with_roles(&pool, "beta", &[Role::Owner]).await;
    let org_b = beta.id.0;
    let mut tx = pool.begin().await.unwrap();
    let list_a = app::db::audience::create_list(&mut tx, org_a, "A list")
        .await
        .unwrap();
    let sub_b = app::db::audience::insert_subscribers(
        &mut tx,
        org_b,
        &[(EmailAddress::parse("b@b.org").unwrap(), String::new())],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();

    let mut conn = pool.acquire().await.unwrap();
    // Org A's list with org B's subscriber, under either org id: both refused by the database.
    for org in [org_a, org_b] {
        let err = app::db::audience::add_members(&mut conn, org, list_a, &sub_b)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("foreign key"), "{err}");
    }
}

#[tokio::test]
async fn time_zones_are_checked_against_postgresql() {
    let pool = test_db().await;
    assert!(app::db::orgs::is_valid_timezone(&pool, "Europe/Berlin")
        .await
        .unwrap());
    assert!(
        !app::db::orgs::is_valid_timezone(&pool, "Mars/Olympus_Mons")
            .await
            .unwrap()
    );
    let mut conn = pool.acquire().await.unwrap();
    let err = app::db::orgs::create(
        &mut conn,
        app::db::orgs::NewOrg {
            name: "X",
            slug: "x",
            timezone: "Mars/Olympus_Mons",
            from_name: "X",
            from_address: "x@x.org",
        },
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("Mars/Olympus_Mons"), "{err}");
    // Changing a zone is checked too (the check runs once per statement, on changed zones).
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let set = |tz: &'static str| {
        sqlx::query("update orgs set timezone = $2 where id = $1")
            .bind(org)
            .bind(tz)
    };
    let err = set("Mars/Olympus_Mons")
        .execute(&mut *conn)
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("unknown time zone Mars/Olympus_Mons"),
        "{err}"
    );
    set("Asia/Kathmandu").execute(&mut *conn).await.unwrap();
}

#[tokio::test]
async fn one_login_per_address_whatever_its_case() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let mut conn = pool.acquire().await.unwrap();
    let first = EmailAddress::parse("Sam@Acme.example").unwrap();
    let again = EmailAddress::parse("sam@ACME.example").unwrap();
    app::db::user::create(
        &mut conn,
        app::db::user::NewUser {
            org_id: org,
            email: &first,
            name: "Sam",
            role: Role::Admin,
            password_hash: "h",
        },
    )
    .await
    .unwrap();
    let err = app::db::user::create(
        &mut conn,
        app::db::user::NewUser {
            org_id: org,
            email: &again,
            name: "Sam",
            role: Role::Admin,
            password_hash: "h",
        },
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("sam@ACME.example"), "{err}");
}

#[tokio::test]
async fn case_variant_subscribers_coexist_but_share_their_lower_form() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let mut tx = pool.begin().await.unwrap();
    let people: Vec<_> = ["Ann@Example.org", "ann@example.ORG", "Ann@Example.org"]
        .iter()
        .map(|e| (EmailAddress::parse(e).unwrap(), String::new()))
        .collect();
    let ids = app::db::audience::insert_subscribers(&mut tx, org, &people)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(ids.len(), 2, "exact duplicate skipped, case variant kept");
    let lowers: Vec<String> = sqlx::query_scalar("select distinct email_lower from subscribers")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(lowers, vec!["ann@example.org".to_string()]);
}

#[tokio::test]
async fn campaign_and_delivery_invariants_are_enforced_by_the_schema() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let mut tx = pool.begin().await.unwrap();
    let cid = crate::support::helpers::draft(&mut tx, org, acme.owner().id.0, "C").await;
    tx.commit().await.unwrap();
    // approved without a schedule
    let e = sqlx::query("update campaigns set status = 'approved' where id = $1")
        .bind(cid)
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(
        e.to_string().contains("campaigns_scheduled_once_approved")
            || e.to_string().contains("campaigns_approval_recorded"),
        "{e}"
    );
    // a campaign delivery without its typed references
    let e = sqlx::query("insert into deliveries (job_id, org_id, kind, priority, recipient, email_lower) values ('campaign:1:1', $1, 'campaign', 2, 'a@b.org', 'a@b.org')")
        .bind(org)
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("deliveries_campaign_refs"), "{e}");
    // a malformed digest week key
    let e = sqlx::query(
        "insert into digest_sends (org_id, week_key, kind, covers_week, scheduled_at, period_start, period_end)
         values ($1, '2026-28', 'scheduled', '2026-W28', now(), now(), now())",
    )
    .bind(org)
    .execute(&pool)
    .await
    .unwrap_err();
    assert!(e.to_string().contains("week_key"), "{e}");
    // a manual resend key cannot occupy a scheduled week's slot (nor the reverse)
    let e = sqlx::query(
        "insert into digest_sends (org_id, week_key, kind, covers_week, scheduled_at, period_start, period_end)
         values ($1, '2026-W28', 'manual', '2026-W28', now(), now(), now())",
    )
    .bind(org)
    .execute(&pool)
    .await
    .unwrap_err();
    assert!(e.to_string().contains("digest_sends_manual_key"), "{e}");
}

#[tokio::test]
async fn four_eyes_is_enforced_by_the_schema_unless_self_approval_is_marked() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let org = acme.id.0;
    let mut tx = pool.begin().await.unwrap();
    let cid = crate::support::helpers::draft(&mut tx, org, acme.owner().id.0, "C").await;
    tx.commit().await.unwrap();
    let approve = "update campaigns set status = 'approved', approver_id = author_id, approved_at = now(), approved_version = 1,
                   scheduled_for = now(), self_approved = $2 where id = $1";
    let e = sqlx::query(approve)
        .bind(cid)
        .bind(false)
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("campaigns_four_eyes"), "{e}");
    sqlx::query(approve)
        .bind(cid)
        .bind(true)
        .execute(&pool)
        .await
        .expect("marked self-approval is allowed");
}
