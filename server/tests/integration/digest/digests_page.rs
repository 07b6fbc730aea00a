//! The Digests page's server functions over real HTTP on a real PostgreSQL: opt-in rights and
//! tenancy, schedule validation, and the forced resend's dialog key.

use app::api::digests::{
    DigestPreview, DigestsView, ResendDialog, ResendDigest, SaveDigestSchedule, SetDigestOptIn,
};
use app::domain::Role;
use serde_json::Value;
use sqlx::PgPool;

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::test_app::{json, spawn_app};

async fn opted_in(pool: &PgPool, user: i64) -> bool {
    sqlx::query_scalar("select weekly_digest from users where id = $1")
        .bind(user)
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn admins_change_their_own_opt_in_owners_anyones_and_another_orgs_user_is_not_found() {
    let pool = test_db().await;
    let roles = [Role::Owner, Role::Admin, Role::Admin, Role::Viewer];
    let acme = TestOrg::with_roles(&pool, "acme", &roles).await;
    let other = TestOrg::with_roles(&pool, "other", &[Role::Owner]).await;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let viewer = acme.users[3].signed_in(&app).await;
    let set = |c: &reqwest::Client, user_id: i64, enabled: bool| {
        let (app, c) = (&app, c.clone());
        async move { app.call_fn(&c, SetDigestOptIn { user_id, enabled }).await }
    };

    // The page lists owners and admins (not the viewer), with who may toggle whom.
    let (status, body) = app.call_fn(&admin, DigestsView {}).await;
    assert_eq!(status, 200, "{body}");
    let admins = json(&body)["admins"].as_array().unwrap().clone();
    assert_eq!(admins.len(), 3, "{body}");
    let toggles: Vec<bool> = admins
        .iter()
        .map(|a| a["can_toggle"].as_bool().unwrap())
        .collect();
    assert_eq!(
        toggles.iter().filter(|t| **t).count(),
        1,
        "an admin toggles only their own"
    );

    // An admin: their own, yes; another admin's, no.
    assert_eq!(set(&admin, acme.admin(0).id.0, false).await.0, 200);
    assert!(!opted_in(&pool, acme.admin(0).id.0).await);
    let (status, body) = set(&admin, acme.admin(1).id.0, false).await;
    assert_eq!(
        (status.as_u16(), json(&body)),
        (403, Value::from("Forbidden"))
    );
    assert!(opted_in(&pool, acme.admin(1).id.0).await);
    // A viewer changes nothing, not even their own.
    let (_, body) = set(&viewer, acme.users[3].id.0, false).await;
    assert_eq!(json(&body), Value::from("Forbidden"));
    // An owner: anyone's in the org; another org's user looks missing.
    assert_eq!(set(&owner, acme.admin(1).id.0, false).await.0, 200);
    assert!(!opted_in(&pool, acme.admin(1).id.0).await);
    let (_, body) = set(&owner, other.owner().id.0, false).await;
    assert_eq!(json(&body), Value::from("NotFound"));
    assert!(opted_in(&pool, other.owner().id.0).await);
    // The viewer is no digest recipient, so it cannot be toggled into one either.
    let (_, body) = set(&owner, acme.users[3].id.0, true).await;
    assert_eq!(json(&body), Value::from("NotFound"));

    let audits: i64 =
        sqlx::query_scalar("select count(*) from audit_log where action = 'digest.opt_in'")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(audits, 2);
}

#[tokio::test]
async fn the_schedule_is_validated_and_saved() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner, Role::Viewer]).await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let save = |weekday: i16, hour: i16, tz: &'static str| {
        let schedule = SaveDigestSchedule {
            weekday,
            hour,
            timezone: tz.into(),
        };
        let (app, c) = (&app, owner.clone());
        async move { app.call_fn(&c, schedule).await.1 }
    };
    assert!(save(1, 9, "Mars/Olympus_Mons")
        .await
        .contains("“Mars/Olympus_Mons” is not a time zone"));
    assert!(save(8, 9, "UTC")
        .await
        .contains("The weekday must be 1 (Monday) to 7 (Sunday), not 8"));
    assert!(save(1, 24, "UTC")
        .await
        .contains("The hour must be 0 to 23, not 24"));
    let saved: (i16, i16, String) =
        sqlx::query_as("select digest_weekday, digest_hour, timezone from orgs where id = $1")
            .bind(org)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        saved,
        (1, 9, "Europe/Berlin".into()),
        "nothing saved by a refusal"
    );
    assert_eq!(
        json(&save(5, 17, "Asia/Kathmandu").await),
        Value::from("Schedule saved.")
    );
    let saved: (i16, i16, String) =
        sqlx::query_as("select digest_weekday, digest_hour, timezone from orgs where id = $1")
            .bind(org)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(saved, (5, 17, "Asia/Kathmandu".into()));
    let viewer = acme.users[1].signed_in(&app).await;
    let schedule = SaveDigestSchedule {
        weekday: 2,
        hour: 3,
        timezone: "UTC".into(),
    };
    let (_, body) = app.call_fn(&viewer, schedule).await;
    assert_eq!(json(&body), Value::from("Forbidden"));
}

#[tokio::test]
async fn a_resend_dialog_submitted_twice_sends_once_and_a_forged_old_key_is_refused() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner, Role::Admin, Role::Viewer]).await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;

    let (status, body) = app.call_fn(&owner, ResendDialog {}).await;
    assert_eq!(status, 200, "{body}");
    let dialog = json(&body);
    assert_eq!(
        dialog["scheduled_pending"], true,
        "nothing went out this week yet: warn"
    );
    assert_eq!(dialog["recipients"], 2);
    let key = dialog["key"].as_str().unwrap().to_string();
    let resend = |key: &str, only_me: Option<&str>| ResendDigest {
        key: key.into(),
        only_me: only_me.map(Into::into),
    };
    for _ in 0..2 {
        let (status, body) = app.call_fn(&owner, resend(&key, None)).await;
        assert!(
            status.is_success() || status.is_redirection(),
            "{status}: {body}"
        );
    }
    let (manual, deliveries): (i64, i64) = sqlx::query_as(
        "select (select count(*) from digest_sends where org_id = $1 and kind = 'manual'),
                (select count(*) from deliveries where org_id = $1 and kind = 'digest')",
    )
    .bind(org)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((manual, deliveries), (1, 2));

    // Only keys the server issued, to this admin, are taken; an issued one expires.
    let issued: i64 = key.split('-').next().unwrap().parse().unwrap();
    let signing = app::signing::Purpose::DigestResend
        .key(&pool)
        .await
        .unwrap();
    let old = app::resend_key::issue(&signing, org, acme.owner().id.0, issued - 16 * 60);
    let (status, body) = app.call_fn(&owner, resend(&old, Some("on"))).await;
    assert_eq!(status, 410, "{body}");
    assert!(body.contains("This confirmation has expired"), "{body}");
    let (bare, _) = key.split_once('.').unwrap();
    let (secs, _) = bare.split_once('-').unwrap();
    for forged in [
        secs.to_string(),
        format!("{secs}-00000000000000ff.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
        app::resend_key::issue(&signing, org, acme.admin(0).id.0, issued),
    ] {
        let (status, body) = app.call_fn(&owner, resend(&forged, None)).await;
        assert_eq!(status, 422, "{forged}: {body}");
        assert!(body.contains("not issued to you"), "{body}");
    }
    // Two dialogs opened at once get two keys, and each sends.
    let (_, a) = app.call_fn(&owner, ResendDialog {}).await;
    let (_, b) = app.call_fn(&owner, ResendDialog {}).await;
    let (a, b) = (json(&a)["key"].clone(), json(&b)["key"].clone());
    assert_ne!(a, b);
    for k in [a, b] {
        let (status, body) = app.call_fn(&owner, resend(k.as_str().unwrap(), None)).await;
        assert!(
            status.is_success() || status.is_redirection(),
            "{status}: {body}"
        );
    }
    let viewer = acme.users[2].signed_in(&app).await;
    let (_, body) = app.call_fn(&viewer, ResendDialog {}).await;
    assert_eq!(json(&body), Value::from("Forbidden"));
    let (_, body) = app.call_fn(&viewer, resend(&key, None)).await;
    assert_eq!(json(&body), Value::from("Forbidden"));

    // The page's history shows the resend, who did it, and each recipient's delivery.
    let (_, body) = app.call_fn(&owner, DigestsView {}).await;
    let history = json(&body)["history"].clone();
    assert_eq!(history.as_array().unwrap().len(), 3, "{body}");
    assert_eq!(history[0]["kind"], "manual");
    assert_eq!(history[0]["triggered_by"], acme.owner().email.as_str());
    assert_eq!(history[0]["recipients"].as_array().unwrap().len(), 2);

    let (status, body) = app.call_fn(&owner, DigestPreview {}).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        json(&body)["text"]
            .as_str()
            .unwrap()
            .contains("Weekly digest for acme"),
        "{body}"
    );
}
