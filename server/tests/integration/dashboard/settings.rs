//! Settings over real HTTP on a real PostgreSQL: the sender identity, user management (invite
//! through the delivery engine, the set-password link, roles, disabling, resets, the last
//! owner), and the audit log page.

use app::api::audit_log::AuditLogPage;
use app::api::campaign::edit::{CampaignAction, NewCampaign, SaveCampaign};
use app::api::deliveries::{CapturedMessage, DeliveriesPage};
use app::api::invites::InviteInfo;
use app::api::overview::GetOverview;
use app::api::settings::{SaveApprovalPolicy, SaveEventRetention, SaveSender, SettingsView};
use app::api::users::{InviteUser, ResetPassword, SetUserDisabled, SetUserRole, UsersView};
use app::domain::{JobId, Role};
use reqwest::StatusCode;
use serde_json::Value;
use sqlx::PgPool;

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::test_app::{client, json, spawn_app, TestApp};

/// The error variant and message of a refused call (`{"Invalid": "…"}` → ("Invalid", "…")).
/// The answer's status is the refusal's own (a 4xx, never 500).
fn refusal(status: StatusCode, body: &str) -> (String, String) {
    let (kind, message) = match json(body) {
        Value::String(s) => (s, String::new()),
        Value::Object(m) => {
            let (k, v) = m.into_iter().next().unwrap();
            (k, v.as_str().unwrap_or_default().to_owned())
        }
        other => panic!("{other}"),
    };
    let want = match kind.as_str() {
        "NotSignedIn" => 401,
        "Forbidden" => 403,
        "NotFound" => 404,
        "Conflict" => 409,
        "Invalid" => 422,
        other => panic!("not a refusal: {other} {body}"),
    };
    assert_eq!(status.as_u16(), want, "{body}");
    (kind, message)
}

async fn audit_rows(pool: &PgPool, org: i64, action: &str) -> Vec<(Option<Value>, Option<Value>)> {
    sqlx::query_as(
        "select before, after from audit_log where org_id = $1 and action = $2 order by id",
    )
    .bind(org)
    .bind(action)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The invite deliveries queued for `email`: (job id, priority, user id).
async fn invite_jobs(pool: &PgPool, email: &str) -> Vec<(String, i16, Option<i64>)> {
    sqlx::query_as(
        "select job_id, priority, user_id from deliveries where kind = 'invite' and email_lower = lower($1) order by created_at, job_id",
    )
    .bind(email)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The raw token of the link an `invite:` job carries (what the recipient finds in the mail).
async fn token_of(pool: &PgPool, job_id: &str) -> String {
    let key = app::signing::Purpose::PasswordToken
        .key(pool)
        .await
        .unwrap();
    app::password_token::token(&key, &job_id.parse::<JobId>().unwrap())
}

async fn accept(app: &TestApp, token: &str, name: &str, password: &str) -> (StatusCode, String) {
    let c = client(app);
    let r = c
        .post(format!("{}/api/accept_invite", app.base))
        .form(&[("token", token), ("name", name), ("password", password)])
        .send()
        .await
        .unwrap();
    let cookie = r.headers().get("set-cookie").is_some();
    let status = r.status();
    let body = r.text().await.unwrap();
    if status.is_success() || status.is_redirection() {
        assert!(cookie, "setting the password signs the user in");
    }
    (status, body)
}

async fn can_login(app: &TestApp, email: &str, password: &str) -> bool {
    let r = app.login(&client(app), email, password).await;
    r.headers().get("set-cookie").is_some()
}

#[tokio::test]
async fn the_sender_identity_is_owner_only_validated_field_by_field_and_audited() {
    let pool = test_db().await;
    let roles = [Role::Owner, Role::Admin, Role::Viewer, Role::Viewer];
    let acme = TestOrg::with_roles(&pool, "acme", &roles).await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let viewer = acme.users[2].signed_in(&app).await;
    let save = |c: &reqwest::Client, name: &str, from: &str, reply: &str| {
        let sender = SaveSender {
            from_name: name.into(),
            from_address: from.into(),
            reply_to: reply.into(),
        };
        let (app, c) = (&app, c.clone());
        async move { app.call_fn(&c, sender).await }
    };

    // Everyone reads it; only the owner may change it.
    let (status, body) = app.call_fn(&viewer, SettingsView {}).await;
    assert_eq!(status, 200, "{body}");
    let s = json(&body);
    assert_eq!(
        (s["from_address"].as_str(), s["timezone"].as_str()),
        (Some("news@example.org"), Some("Europe/Berlin"))
    );
    assert_eq!(s["can_manage"], false);
    for c in [&admin, &viewer] {
        let (status, body) = save(c, "Acme", "hello@acme.example", "").await;
        assert_eq!(refusal(status, &body).0, "Forbidden");
    }

    // Each bad field is refused, naming it; nothing is written.
    for (name, from, reply, field) in [
        ("", "hello@acme.example", "", "From name"),
        ("Acme", "not an address", "", "From address"),
        ("Acme", "hello@acme.example", "nope@", "Reply-To"),
        (
            "Acme\r\nBcc: x@evil.example",
            "hello@acme.example",
            "",
            "From name",
        ),
        (&"x".repeat(201), "hello@acme.example", "", "From name"),
    ] {
        let (status, body) = save(&owner, name, from, reply).await;
        let (kind, message) = refusal(status, &body);
        assert_eq!(kind, "Invalid", "{body}");
        assert!(message.starts_with(field), "{field}: {message}");
    }
    assert!(audit_rows(&pool, org, "settings.sender").await.is_empty());

    let (status, body) = save(
        &owner,
        " Acme News ",
        "Hello@Acme.example",
        "replies@acme.example",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (name, from, reply): (String, String, Option<String>) =
        sqlx::query_as("select from_name, from_address, reply_to from orgs where id = $1")
            .bind(org)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        (name.as_str(), from.as_str(), reply.as_deref()),
        (
            "Acme News",
            "Hello@Acme.example",
            Some("replies@acme.example")
        )
    );
    let rows = audit_rows(&pool, org, "settings.sender").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0].0.as_ref().unwrap()["from_address"],
        "news@example.org"
    );
    assert_eq!(
        rows[0].1.as_ref().unwrap()["from_address"],
        "Hello@Acme.example"
    );
    assert_eq!(
        rows[0].1.as_ref().unwrap()["reply_to"],
        "replies@acme.example"
    );

    // An empty Reply-To clears it.
    let (status, _) = save(&owner, "Acme", "hello@acme.example", "  ").await;
    assert_eq!(status, 200);
    let reply: Option<String> = sqlx::query_scalar("select reply_to from orgs where id = $1")
        .bind(org)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(reply, None);
}

#[tokio::test]
async fn an_invite_is_one_user_and_one_invite_delivery_and_its_link_sets_a_password_once() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    let other = TestOrg::with_roles(&pool, "other", &[Role::Owner]).await;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let invite = |c: &reqwest::Client, email: &str, role: &str| {
        let invite = InviteUser {
            email: email.into(),
            name: String::new(),
            role: role.into(),
        };
        let (app, c) = (&app, c.clone());
        async move { app.call_fn(&c, invite).await }
    };

    let (status, body) = invite(&admin, "new@acme.example", "admin").await;
    assert_eq!(
        refusal(status, &body).0,
        "Forbidden",
        "admins do not manage users"
    );
    let (status, body) = invite(&owner, "new@", "admin").await;
    assert!(
        refusal(status, &body).1.starts_with("E-mail address"),
        "{body}"
    );
    let (status, body) = invite(&owner, "new@acme.example", "root").await;
    assert!(refusal(status, &body).1.starts_with("Role"), "{body}");

    // Sent twice (a double click, or two tabs): one user, one delivery, and the second says why.
    let (first, second) = tokio::join!(
        invite(&owner, "New@acme.example", "admin"),
        invite(&owner, "new@ACME.example", "admin")
    );
    let (ok, refused) = if first.0 == 200 {
        (first, second)
    } else {
        (second, first)
    };
    assert_eq!(ok.0, 200, "{}", ok.1);
    // Whichever request won, its spelling of the address is the one stored.
    let sent = json(&ok.1).as_str().unwrap().to_owned();
    let spelled = sent
        .strip_prefix("Invitation sent to ")
        .and_then(|r| r.strip_suffix('.'))
        .unwrap()
        .to_owned();
    assert_eq!(spelled.to_lowercase(), "new@acme.example");
    let (kind, message) = refusal(refused.0, &refused.1);
    assert_eq!(kind, "Conflict");
    assert!(
        message.contains("already invited") || message.contains("already"),
        "{message}"
    );
    let (status, body) = invite(&owner, "new@acme.example", "viewer").await;
    let (_, message) = refusal(status, &body);
    assert!(
        message.contains("was already invited") && message.contains("nothing was sent again"),
        "{message}"
    );
    let users: Vec<(i64, String)> =
        sqlx::query_as("select id, role from users where email_lower = 'new@acme.example'")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(users.len(), 1);
    let (new_id, role) = users[0].clone();
    assert_eq!(role, "admin");
    let jobs = invite_jobs(&pool, "new@acme.example").await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let (job, priority, user_id) = jobs[0].clone();
    assert!(job.starts_with(&format!("invite:{org}:{new_id}:")), "{job}");
    assert_eq!((priority, user_id), (0, Some(new_id)));
    let (_, after) = audit_rows(&pool, org, "user.invite").await.remove(0);
    assert_eq!(after.unwrap()["role"], "admin");

    // Another organisation's login cannot be invited, and the refusal does not say whose it is.
    let (status, body) = invite(&owner, &other.owner().email, "viewer").await;
    let (_, message) = refusal(status, &body);
    assert_eq!(
        message,
        format!(
            "{} already has a Mailroom login, so it cannot be invited.",
            other.owner().email
        )
    );

    // The list shows the pending invitation; the invitee cannot sign in yet.
    let (_, body) = app.call_fn(&admin, UsersView {}).await;
    let listed = json(&body)["users"].as_array().unwrap().clone();
    let entry = listed
        .iter()
        .find(|x| x["email"] == spelled.as_str())
        .unwrap();
    assert_eq!(entry["awaiting"], "invited");
    assert!(!can_login(&app, "new@acme.example", "!invited").await);

    // Only the token's hash is stored; the link works with the token itself.
    let token = token_of(&pool, &job).await;
    let stored: Vec<u8> =
        sqlx::query_scalar("select token_hash from password_tokens where user_id = $1")
            .bind(new_id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(stored, app::auth::hash_token(&token));
    let c = client(&app);
    let (status, body) = app
        .call_fn(
            &c,
            InviteInfo {
                token: token.to_string(),
            },
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (
            json(&body)["email"].as_str(),
            json(&body)["purpose"].as_str()
        ),
        (Some(spelled.as_str()), Some("invite"))
    );
    let (status, body) = app
        .call_fn(
            &c,
            InviteInfo {
                token: "forged".into(),
            },
        )
        .await;
    assert!(refusal(status, &body)
        .1
        .contains("expired or was already used"));

    let (status, body) = accept(&app, &token, "Nina New", "short").await;
    assert!(refusal(status, &body).1.starts_with("Password"), "{body}");
    let (status, body) = accept(&app, &token, "Nina New", "a-long-enough-password").await;
    assert!(
        status.is_success() || status.is_redirection(),
        "{status}: {body}"
    );
    assert!(can_login(&app, "new@acme.example", "a-long-enough-password").await);
    let name: String = sqlx::query_scalar("select name from users where id = $1")
        .bind(new_id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(name, "Nina New");

    // Used once: the same link again is refused, and the password stays.
    let (status, body) = accept(&app, &token, "Mallory", "another-long-password").await;
    assert!(
        refusal(status, &body)
            .1
            .contains("expired or was already used"),
        "{body}"
    );
    assert!(can_login(&app, "new@acme.example", "a-long-enough-password").await);
    assert!(!can_login(&app, "new@acme.example", "another-long-password").await);
    assert_eq!(audit_rows(&pool, org, "user.accept_invite").await.len(), 1);

    // An expired link is dead too.
    let (status, _) = app.call_fn(&owner, ResetPassword { user_id: new_id }).await;
    assert_eq!(status, 200);
    let jobs = invite_jobs(&pool, "new@acme.example").await;
    let token = token_of(&pool, &jobs[1].0).await;
    sqlx::query("update password_tokens set expires_at = now() - interval '1 second' where user_id = $1 and used_at is null")
        .bind(new_id)
        .execute(&pool)
        .await
        .unwrap();
    let (status, body) = accept(&app, &token, "", "yet-another-password").await;
    assert!(refusal(status, &body).1.contains("expired"), "{body}");
}

#[tokio::test]
async fn disabling_ends_sessions_and_blocks_login_and_the_last_owner_is_kept() {
    let pool = test_db().await;
    let roles = [Role::Owner, Role::Admin, Role::Viewer, Role::Viewer];
    let acme = TestOrg::with_roles(&pool, "acme", &roles).await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let viewer = acme.users[2].signed_in(&app).await;
    let (owner_id, admin_id) = (acme.owner().id.0, acme.admin(0).id.0);
    let disable = |c: &reqwest::Client, user_id: i64, disabled: bool| {
        let (app, c) = (&app, c.clone());
        async move { app.call_fn(&c, SetUserDisabled { user_id, disabled }).await }
    };
    let set_role = |c: &reqwest::Client, user_id: i64, role: &str| {
        let change = SetUserRole {
            user_id,
            role: role.into(),
        };
        let (app, c) = (&app, c.clone());
        async move { app.call_fn(&c, change).await }
    };

    for c in [&admin, &viewer] {
        let (status, body) = disable(c, owner_id, true).await;
        assert_eq!(refusal(status, &body).0, "Forbidden");
        let (status, body) = set_role(c, admin_id, "owner").await;
        assert_eq!(refusal(status, &body).0, "Forbidden");
        let (status, body) = app.call_fn(c, ResetPassword { user_id: owner_id }).await;
        assert_eq!(refusal(status, &body).0, "Forbidden");
    }

    // Disabled: the open session ends at once, and the password no longer signs in.
    let (status, body) = disable(&owner, admin_id, true).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = app.call_fn(&admin, GetOverview {}).await;
    assert_eq!(refusal(status, &body).0, "NotSignedIn");
    let sessions: i64 = sqlx::query_scalar("select count(*) from sessions where user_id = $1")
        .bind(acme.admin(0).id.0)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(sessions, 0);
    assert!(!can_login(&app, &acme.admin(0).email, &acme.admin(0).password).await);
    let (before, after) = audit_rows(&pool, org, "user.disable").await.remove(0);
    assert_eq!(
        (
            before.unwrap()["disabled"].clone(),
            after.unwrap()["disabled"].clone()
        ),
        (Value::from(false), Value::from(true))
    );
    // Enabled again: the same password works.
    let (status, _) = disable(&owner, admin_id, false).await;
    assert_eq!(status, 200);
    assert!(can_login(&app, &acme.admin(0).email, &acme.admin(0).password).await);

    // The last active owner can be neither demoted nor disabled, even by themselves.
    for (status, body) in [
        set_role(&owner, owner_id, "admin").await,
        disable(&owner, owner_id, true).await,
    ] {
        let (kind, message) = refusal(status, &body);
        assert_eq!(kind, "Conflict");
        assert!(message.contains("last active owner"), "{message}");
    }
    // With a second owner, the first may step down; then the second is the last.
    let (status, body) = set_role(&owner, admin_id, "owner").await;
    assert_eq!(
        (status.as_u16(), json(&body)),
        (
            200,
            Value::from(format!("{} is now owner.", acme.admin(0).email))
        )
    );
    let (status, body) = set_role(&owner, owner_id, "viewer").await;
    assert_eq!(status, 200, "{body}");
    let second = acme.admin(0).signed_in(&app).await;
    let (status, body) = disable(&second, admin_id, true).await;
    assert!(refusal(status, &body).1.contains("last active owner"));
    let roles = audit_rows(&pool, org, "user.role").await;
    assert_eq!(roles.len(), 2);
    assert_eq!(roles[1].0.as_ref().unwrap()["role"], "owner");
    assert_eq!(roles[1].1.as_ref().unwrap()["role"], "viewer");
}

#[tokio::test]
async fn two_owners_demoting_each_other_at_once_leave_one_owner() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner, Role::Owner]).await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let a = acme.owner().signed_in(&app).await;
    let b = acme.users[1].signed_in(&app).await;
    let demote = |user_id: i64| SetUserRole {
        user_id,
        role: "admin".into(),
    };
    let (ra, rb) = tokio::join!(
        app.call_fn(&a, demote(acme.users[1].id.0)),
        app.call_fn(&b, demote(acme.owner().id.0))
    );
    let owners: i64 = sqlx::query_scalar(
        "select count(*) from users where org_id = $1 and role = 'owner' and not disabled",
    )
    .bind(org)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(owners, 1, "{ra:?} {rb:?}");
}

#[tokio::test]
async fn a_reset_ends_the_old_password_and_sessions_and_its_link_sets_a_new_one() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let admin_id = acme.admin(0).id.0;

    let (status, body) = app
        .call_fn(&owner, ResetPassword { user_id: admin_id })
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(json(&body)
        .as_str()
        .unwrap()
        .contains("old password no longer works"));
    // Decided: an owner's reset takes effect at once (the password may be known to someone else).
    assert!(!can_login(&app, &acme.admin(0).email, &acme.admin(0).password).await);
    let (status, body) = app.call_fn(&admin, GetOverview {}).await;
    assert_eq!(refusal(status, &body).0, "NotSignedIn");
    let jobs = invite_jobs(&pool, &acme.admin(0).email).await;
    assert_eq!(jobs.len(), 1);
    let token = token_of(&pool, &jobs[0].0).await;
    let c = client(&app);
    let (_, body) = app
        .call_fn(
            &c,
            InviteInfo {
                token: token.to_string(),
            },
        )
        .await;
    assert_eq!(json(&body)["purpose"], "reset");
    let (_, body) = app.call_fn(&owner, UsersView {}).await;
    let listed = json(&body)["users"].clone();
    let entry = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == admin_id)
        .unwrap()
        .clone();
    assert_eq!(entry["awaiting"], "reset");

    // A second reset retires the first link.
    let (status, _) = app
        .call_fn(&owner, ResetPassword { user_id: admin_id })
        .await;
    assert_eq!(status, 200);
    let jobs = invite_jobs(&pool, &acme.admin(0).email).await;
    assert_eq!(jobs.len(), 2);
    let (status, body) = accept(&app, &token, "", "the-first-links-password").await;
    assert!(
        refusal(status, &body)
            .1
            .contains("expired or was already used"),
        "{body}"
    );
    let newest = token_of(&pool, &jobs[1].0).await;
    // A link of a user who was disabled since does not work while they are disabled.
    let disable = |disabled: bool| {
        let (app, owner) = (&app, &owner);
        let change = SetUserDisabled {
            user_id: admin_id,
            disabled,
        };
        async move { app.call_fn(owner, change).await }
    };
    assert_eq!(disable(true).await.0, 200);
    let (status, body) = accept(&app, &newest, "", "the-new-password-123").await;
    assert!(
        refusal(status, &body)
            .1
            .contains("expired or was already used"),
        "{body}"
    );
    assert_eq!(disable(false).await.0, 200);
    let (status, body) = accept(&app, &newest, "", "the-new-password-123").await;
    assert!(status.is_success() || status.is_redirection(), "{body}");
    assert!(can_login(&app, &acme.admin(0).email, "the-new-password-123").await);
    assert!(!can_login(&app, &acme.admin(0).email, &acme.admin(0).password).await);
    assert_eq!(audit_rows(&pool, org, "user.reset_password").await.len(), 2);
    assert_eq!(audit_rows(&pool, org, "user.set_password").await.len(), 1);
}

#[tokio::test]
async fn the_audit_log_lists_the_orgs_entries_filtered_and_a_page_at_a_time() {
    let pool = test_db().await;
    let roles = [Role::Owner, Role::Admin, Role::Viewer, Role::Viewer];
    let acme = TestOrg::with_roles(&pool, "acme", &roles).await;
    let org = acme.id.0;
    let other = TestOrg::with_roles(&pool, "other", &[Role::Owner]).await;
    let other_org = other.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let viewer = acme.users[2].signed_in(&app).await;
    let admin_id = acme.admin(0).id.0.to_string();
    for role in ["viewer", "admin"] {
        let change = SetUserRole {
            user_id: acme.admin(0).id.0,
            role: role.into(),
        };
        app.call_fn(&owner, change).await;
    }
    let sender = SaveSender {
        from_name: "Acme".into(),
        from_address: "a@acme.example".into(),
        reply_to: String::new(),
    };
    app.call_fn(&owner, sender).await;
    let mut tx = pool.begin().await.unwrap();
    for i in 0..60 {
        let (o, actor) = if i % 2 == 0 {
            (org, Some(acme.admin(0).id.0))
        } else {
            (other_org, None)
        };
        app::db::audit::record(
            &mut tx,
            app::db::audit::Entry {
                org_id: o,
                actor_id: actor,
                api_token_id: None,
                action: app::domain::AuditAction::DemoSeed,
                object_type: "thing",
                object_id: Some(i.to_string()),
                before: None,
                after: Some(serde_json::json!({ "i": i })),
            },
        )
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
    let page = |action: &str, actor: &str, before: &str| {
        let (action, actor, before) = (action.to_owned(), actor.to_owned(), before.to_owned());
        let (app, viewer) = (&app, &viewer);
        async move {
            let query = AuditLogPage {
                action: Some(action),
                actor: Some(actor),
                before: Some(before),
            };
            let (status, body) = app.call_fn(viewer, query).await;
            assert_eq!(status, 200, "viewers read the log: {body}");
            json(&body)
        }
    };

    // Filtered by action: both role changes, newest first, with who and before/after.
    let p = page("user.role", "", "").await;
    let rows = p["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["actor"], acme.owner().email.as_str());
    assert!(rows[0]["before"].as_str().unwrap().contains("\"viewer\""));
    assert!(rows[0]["after"].as_str().unwrap().contains("\"admin\""));
    assert!(p["actions"]
        .as_array()
        .unwrap()
        .contains(&Value::from("settings.sender")));

    // Filtered by user: the admin's 30 bulk entries (only this org's), in pages of 50.
    let p = page("", &admin_id, "").await;
    assert_eq!(p["rows"].as_array().unwrap().len(), 30);
    assert!(p["next"].is_null());

    // Unfiltered: 33 entries of this org → one page; in pages the keyset never repeats a row.
    let all = page("", "", "").await;
    assert_eq!(all["rows"].as_array().unwrap().len(), 33);
    let bulk = page("demo.seed", "", "").await;
    let first: Vec<i64> = bulk["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(first.len(), 30);
    let mid = first[9].to_string();
    let rest = page("demo.seed", "", &mid).await;
    let ids: Vec<i64> = rest["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, first[10..].to_vec());

    let query = AuditLogPage {
        action: None,
        actor: Some("x".into()),
        before: None,
    };
    let (status, body) = app.call_fn(&viewer, query).await;
    assert!(refusal(status, &body).1.contains("not a valid user"));
}

#[tokio::test]
async fn the_delivery_worker_sends_an_invite_with_its_link_and_never_a_retired_one() {
    use mailroom::workers::delivery::Worker;
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let (status, body) = app
        .call_fn(
            &owner,
            InviteUser {
                email: "ivy@example.org".into(),
                name: "Ivy".into(),
                role: "viewer".into(),
            },
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // Two resets of the admin before any worker runs: only the newest link is worth sending.
    for _ in 0..2 {
        let (status, _) = app
            .call_fn(
                &owner,
                ResetPassword {
                    user_id: acme.admin(0).id.0,
                },
            )
            .await;
        assert_eq!(status, 200);
    }

    let sink = testkit::SmtpSink::start();
    let mut worker = Worker::new(pool.clone(), crate::support::fixtures::config(&sink), "w");
    while worker.drain().await.unwrap() > 0 {}

    let got = sink.messages();
    assert_eq!(got.len(), 2, "the invitation and the newest reset");
    let invite_job = invite_jobs(&pool, "ivy@example.org").await.remove(0).0;
    let link = format!(
        "http://mailroom.test/invite/{}",
        token_of(&pool, &invite_job).await
    );
    let ivy = got.iter().find(|m| m.to == ["ivy@example.org"]).unwrap();
    assert_eq!(ivy.from, "news@example.org");
    assert!(
        ivy.data
            .contains("Subject: You are invited to acme on Mailroom"),
        "{}",
        ivy.data
    );
    assert!(
        ivy.data.contains(&link),
        "the link is in the message: {}",
        ivy.data
    );
    assert!(ivy.message_id().contains("invite."), "{}", ivy.message_id());
    let resets = invite_jobs(&pool, &acme.admin(0).email).await;
    let newest = format!(
        "http://mailroom.test/invite/{}",
        token_of(&pool, &resets[1].0).await
    );
    let reset = got
        .iter()
        .find(|m| m.to == [acme.admin(0).email.clone()])
        .unwrap();
    assert!(reset
        .data
        .contains("Subject: Set a new Mailroom password for acme"));
    assert!(reset.data.contains(&newest));

    let states: Vec<(String, String, Option<String>)> = sqlx::query_as(
        "select job_id, status, coalesce(smtp_reply, last_error) from deliveries where org_id = $1 and kind = 'invite' order by created_at, job_id",
    )
    .bind(org)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(states.len(), 3);
    assert_eq!(states[0].1, "delivered");
    assert_eq!(states[2].1, "delivered");
    assert_eq!(states[1].1, "failed", "the retired link was not sent");
    assert!(
        states[1]
            .2
            .as_deref()
            .unwrap_or_default()
            .contains("replaced"),
        "{:?}",
        states[1]
    );
}

#[tokio::test]
async fn the_pages_render_on_the_server_so_their_forms_work_before_the_wasm_loads() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner, Role::Viewer]).await;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let viewer = acme.users[1].signed_in(&app).await;
    let get = |c: &reqwest::Client, path: &str| {
        let (c, url) = (c.clone(), format!("{}{path}", app.base));
        async move { c.get(url).send().await.unwrap().text().await.unwrap() }
    };
    let page = get(&owner, "/settings").await;
    for needle in [
        "id=\"sender-form\"",
        "news@example.org",
        "Europe/Berlin",
        "id=\"invite-form\"",
        "data-test=\"change-role\"",
    ] {
        assert!(page.contains(needle), "{needle} in the owner's page");
    }
    let page = get(&viewer, "/settings").await;
    assert!(page.contains("Only an owner can change the sender identity."));
    assert!(!page.contains("id=\"invite-form\"") && !page.contains("data-test=\"change-role\""));
    let (status, _) = app
        .call_fn(
            &owner,
            InviteUser {
                email: "pat@acme.example".into(),
                name: "Pat <b>Bold</b>".into(),
                role: "viewer".into(),
            },
        )
        .await;
    assert_eq!(status, 200);
    let page = get(&viewer, "/settings/audit").await;
    assert!(
        page.contains("data-action=\"user.invite\""),
        "the audit log is server-rendered"
    );
    assert!(!page.contains("<b>Bold</b>"), "names are escaped");

    let job = invite_jobs(&pool, "pat@acme.example").await.remove(0).0;
    let token = token_of(&pool, &job).await;
    let page = get(&client(&app), &format!("/invite/{token}")).await;
    assert!(
        page.contains("pat@acme.example") && page.contains("id=\"accept-form\""),
        "{page}"
    );
    let page = get(&client(&app), "/invite/not-a-real-token").await;
    assert!(page.contains("expired or was already used"));
}

#[tokio::test]
async fn self_approval_is_off_by_default_and_only_an_owner_turns_it_on_which_lets_an_author_approve(
) {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    let (lists, _) = acme.audience(5).await;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let view = json(&app.call_fn(&owner, SettingsView {}).await.1);
    assert_eq!(view["allow_self_approval"], false);

    // The admin writes and submits a campaign; four eyes refuse their own approval.
    let (_, body) = app
        .call_fn(
            &admin,
            NewCampaign {
                name: "Mine".into(),
            },
        )
        .await;
    let id = json(&body).as_i64().unwrap();
    let edit = SaveCampaign {
        id,
        version: 1,
        name: "Mine".into(),
        subject: "Hi".into(),
        body: "x".into(),
        format: String::new(),
        lists: vec![lists[0]],
        excluded_lists: vec![],
        segments: vec![],
        excluded_segments: vec![],
        schedule: String::new(),
    };
    let (status, body) = app.call_fn(&admin, edit).await;
    assert_eq!(status, 200, "{body}");
    let act = |verb: &'static str| {
        let action = CampaignAction {
            id,
            verb: app::domain::Transition::from_verb(verb).unwrap(),
            version: 2,
            reason: String::new(),
        };
        let (app, admin) = (&app, &admin);
        async move { app.call_fn(admin, action).await.1 }
    };
    assert_eq!(json(&act("submit").await), "Campaign submitted.");
    assert!(json(&act("approve").await)["Conflict"].is_string());

    // Only an owner changes the policy; turning it on is audited.
    let (status, body) = app
        .call_fn(
            &admin,
            SaveApprovalPolicy {
                allow_self_approval: Some("on".into()),
            },
        )
        .await;
    assert_eq!(refusal(status, &body).0, "Forbidden");
    let (status, body) = app
        .call_fn(
            &owner,
            SaveApprovalPolicy {
                allow_self_approval: Some("on".into()),
            },
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        json(&app.call_fn(&owner, SettingsView {}).await.1)["allow_self_approval"],
        true
    );
    let rows = audit_rows(&pool, org, "settings.approval").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].1.as_ref().unwrap()["allow_self_approval"], true);

    // Now the author may approve, and it is marked.
    assert_eq!(json(&act("approve").await), "Campaign approved.");
    let marked: bool = sqlx::query_scalar("select self_approved from campaigns where id = $1")
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(marked);
    // Unchecked (the field absent, as a browser sends it): four eyes again.
    let unchecked = SaveApprovalPolicy {
        allow_self_approval: None,
    };
    let (status, _) = app.call_fn(&owner, unchecked).await;
    assert_eq!(status, 200);
    assert_eq!(
        json(&app.call_fn(&owner, SettingsView {}).await.1)["allow_self_approval"],
        false
    );
}

/// How long events are kept: an owner's setting (audited), the number checked and named, the
/// retention job's column changed only by a valid one.
#[tokio::test]
async fn an_owner_sets_how_long_events_are_kept() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let kept = || async {
        sqlx::query_scalar::<_, i32>("select event_retention_days from orgs where id = $1")
            .bind(org)
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    let save = |days: &str| SaveEventRetention {
        event_retention_days: days.into(),
    };
    assert_eq!(
        json(&app.call_fn(&owner, SettingsView {}).await.1)["event_retention_days"],
        400
    );
    let (status, body) = app.call_fn(&admin, save("30")).await;
    assert_eq!(refusal(status, &body).0, "Forbidden");
    for bad in ["0", "3651", "-5", "thirty", "", "30.5"] {
        let (status, body) = app.call_fn(&owner, save(bad)).await;
        let (kind, message) = refusal(status, &body);
        assert_eq!(kind, "Invalid", "{bad:?}: {body}");
        assert!(
            message.starts_with("Keep events: ") && message.contains("1 to 3650"),
            "{bad:?}: {message}"
        );
    }
    assert_eq!(kept().await, 400, "nothing half-written");
    let (status, body) = app.call_fn(&owner, save(" 30 ")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(kept().await, 30);
    assert_eq!(
        json(&app.call_fn(&admin, SettingsView {}).await.1)["event_retention_days"],
        30
    );
    let rows = audit_rows(&pool, org, "settings.event_retention").await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].0.as_ref().unwrap()["event_retention_days"], 400);
    assert_eq!(rows[0].1.as_ref().unwrap()["event_retention_days"], 30);
}

/// Captured account mail signs in as its recipient, so no dashboard user reads it: a viewer
/// who could open a new owner's captured invitation (or a reset) would become that owner.
#[tokio::test]
async fn captured_invitations_and_resets_are_readable_by_no_dashboard_user() {
    use mailroom::workers::delivery::Worker;
    let pool = test_db().await;
    let roles = [Role::Owner, Role::Admin, Role::Viewer, Role::Viewer];
    let acme = TestOrg::with_roles(&pool, "acme", &roles).await;
    let org = acme.id.0;
    let dir = tempfile::tempdir().unwrap();
    let app =
        crate::support::test_app::spawn_app_capturing(pool.clone(), Some(dir.path().to_owned()))
            .await;
    let owner = acme.owner().signed_in(&app).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let viewer = acme.users[2].signed_in(&app).await;
    let (status, body) = app
        .call_fn(
            &owner,
            InviteUser {
                email: "boss@acme.example".into(),
                name: "Boss".into(),
                role: "owner".into(),
            },
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = app
        .call_fn(
            &owner,
            ResetPassword {
                user_id: acme.users[3].id.0,
            },
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let mut worker = Worker::new(
        pool.clone(),
        crate::support::fixtures::config_for_capture(dir.path().to_owned()),
        "w",
    );
    while worker.drain().await.unwrap() > 0 {}

    let invite = invite_jobs(&pool, "boss@acme.example").await.remove(0).0;
    let reset = invite_jobs(&pool, &acme.users[3].email).await.remove(0).0;
    for job in [&invite, &reset] {
        // The copy exists on disk, with its live link: the operator can hand it over.
        let token = token_of(&pool, job).await;
        let file = std::fs::read_to_string(app::capture::path_for(dir.path(), org, job)).unwrap();
        assert!(file.contains(&token), "captured with its link");
        for c in [&owner, &admin, &viewer] {
            let (_, body) = app
                .call_fn(
                    c,
                    CapturedMessage {
                        job_id: job.to_string(),
                    },
                )
                .await;
            assert_eq!(json(&body), Value::from("NotFound"), "{body}");
            assert!(!body.contains(&token));
            let page = c
                .get(format!("{}/deliveries/message", app.base))
                .query(&[("job", job.as_str())])
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            assert!(!page.contains(&token), "the message page shows no link");
            let query = DeliveriesPage {
                status: None,
                kind: Some("invite".into()),
                recipient: None,
                after: None,
            };
            let (status, body) = app.call_fn(c, query).await;
            assert_eq!(status, 200, "{body}");
            let rows = json(&body)["rows"].as_array().unwrap().clone();
            assert_eq!(rows.len(), 2, "listed, with their states: {body}");
            assert!(rows
                .iter()
                .all(|r| r["status"] == "delivered" && r["captured"] == false));
        }
    }
}
