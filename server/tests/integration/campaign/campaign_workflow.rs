//! The campaign workflow over HTTP, as the dashboard calls it: create, edit (each save bumps the
//! version; a submitted campaign goes back to draft), four-eyes approval of the exact version
//! shown, refusals that say who changed it first, reject with a reason, pause/resume/cancel,
//! the audit log, and tenancy.

use app::api::campaign::bin::{CampaignBin, DeleteCampaign, RestoreCampaign};
use app::api::campaign::edit::{
    CampaignAction, CampaignSheet, CloneCampaign, NewCampaign, SaveCampaign,
};
use app::api::campaign::Campaigns;
use app::domain::{Role, Transition};
use serde_json::Value;

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::test_app::{json, spawn_app, TestApp};

/// The error a server function answered, as the browser shows it.
fn conflict(body: &str) -> String {
    json(body)["Conflict"]
        .as_str()
        .unwrap_or_else(|| panic!("not a conflict: {body}"))
        .to_string()
}

async fn act(app: &TestApp, c: &reqwest::Client, id: i64, verb: &str, version: i32) -> String {
    let action = CampaignAction {
        id,
        verb: Transition::from_verb(verb).unwrap(),
        version,
        reason: String::new(),
    };
    app.call_fn(c, action).await.1
}

async fn sheet(app: &TestApp, c: &reqwest::Client, id: i64) -> Value {
    let (status, body) = app.call_fn(c, CampaignSheet { id }).await;
    assert_eq!(status, 200, "{body}");
    json(&body)
}

#[tokio::test]
async fn four_eyes_approve_the_exact_version_shown_and_every_refusal_says_why() {
    let pool = test_db().await;
    let roles = [
        Role::Owner,
        Role::Admin,
        Role::Admin,
        Role::Admin,
        Role::Viewer,
    ];
    let acme = TestOrg::with_roles(&pool, "acme", &roles).await;
    let org = acme.id.0;
    let (lists, n) = acme.audience(40).await;
    let app = spawn_app(pool.clone()).await;
    let (a, b, c) = (
        acme.admin(0).signed_in(&app).await,
        acme.admin(1).signed_in(&app).await,
        acme.admin(2).signed_in(&app).await,
    );

    // A creates a draft and fills it in (two of the three lists, checked as the form sends them).
    let (status, body) = app
        .call_fn(
            &a,
            NewCampaign {
                name: "  Launch <b>day</b> ".into(),
            },
        )
        .await;
    assert!(status.is_success() || status.is_redirection(), "{body}");
    let id = json(&body).as_i64().unwrap();
    let save = |version: i32, subject: &str, schedule: &str| SaveCampaign {
        id,
        version,
        name: "Launch <b>day</b>".into(),
        subject: subject.into(),
        body: "Dear {{ name }}, we launch.".into(),
        format: String::new(),
        lists: vec![lists[0], lists[2]],
        excluded_lists: vec![],
        segments: vec![],
        excluded_segments: vec![],
        schedule: schedule.into(),
    };
    // The first save as the editor's form encodes it: the checked boxes keep their positions.
    let (l0, l2) = (lists[0].to_string(), lists[2].to_string());
    let form = [
        ("id", id.to_string()),
        ("version", "1".to_string()),
        ("name", "Launch <b>day</b>".to_string()),
        ("subject", "Hello {{ name }}".to_string()),
        ("body", "Dear {{ name }}, we launch.".to_string()),
        ("lists[0]", l0),
        ("lists[2]", l2),
        ("schedule", String::new()),
    ];
    let args: Vec<(&str, &str)> = form.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, body) = app.call_with(&a, "save_campaign", &args).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body), "Saved (version 2).");
    // Saving over a version someone else replaced is refused.
    let (_, body) = app.call_fn(&a, save(1, "Hello {{ name }}", "")).await;
    assert!(
        conflict(&body).contains("version 2 now, you had 1"),
        "{body}"
    );
    // A schedule in the past is refused, naming it.
    let past = save(2, "Hello {{ name }}", "2001-01-01T09:00");
    let (_, body) = app.call_fn(&a, past).await;
    assert!(
        json(&body)["Invalid"]
            .as_str()
            .unwrap()
            .contains("in the past"),
        "{body}"
    );

    let s = sheet(&app, &a, id).await;
    assert_eq!(
        (s["status"].as_str(), s["version"].as_i64()),
        (Some("draft"), Some(2))
    );
    let chosen: Vec<bool> = s["lists"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["chosen"].as_bool().unwrap())
        .collect();
    assert_eq!(chosen.iter().filter(|c| **c).count(), 2);
    let estimate = s["estimate"].as_i64().unwrap();
    assert!(estimate > 0 && estimate <= n as i64);
    let preview = &s["preview"]["Ok"];
    assert!(
        preview["subject"].as_str().unwrap().starts_with("Hello "),
        "{s}"
    );
    assert!(
        preview["text"].as_str().unwrap().starts_with("Dear "),
        "rendered for a real recipient"
    );

    assert_eq!(
        json(&act(&app, &a, id, "submit", 2).await),
        "Campaign submitted."
    );
    // The author cannot approve it.
    assert!(conflict(&act(&app, &a, id, "approve", 2).await).contains("another admin must approve"));
    // B edits it: back to draft, version 3; B submits it and, as last editor, cannot approve.
    let (_, body) = app.call_fn(&b, save(2, "Hi {{ name }}", "")).await;
    assert_eq!(json(&body), "Saved (version 3).");
    assert_eq!(sheet(&app, &b, id).await["status"], "draft");
    assert_eq!(
        json(&act(&app, &b, id, "submit", 3).await),
        "Campaign submitted."
    );
    assert!(conflict(&act(&app, &b, id, "approve", 3).await).contains("another admin must approve"));
    // C, shown version 2 in an old dialog, is refused clearly; on version 3 C approves.
    assert!(conflict(&act(&app, &c, id, "approve", 2).await)
        .contains("you saw version 2, it is now version 3"));
    assert_eq!(
        json(&act(&app, &c, id, "approve", 3).await),
        "Campaign approved."
    );
    // A double click (or A arriving late) says who approved it first.
    let again = conflict(&act(&app, &c, id, "approve", 3).await);
    assert!(
        again.starts_with("Already approved by admin3@acme.example at "),
        "{again}"
    );
    // Content is frozen from approval on.
    let (_, body) = app.call_fn(&a, save(2, "Hi {{ name }}", "")).await;
    assert!(conflict(&body).contains("is approved"), "{body}");
    let (approved_version, self_approved): (i32, bool) =
        sqlx::query_as("select approved_version, self_approved from campaigns where id = $1")
            .bind(id)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!((approved_version, self_approved), (3, false));

    // Illegal transitions name the state; cancel works from approved.
    assert_eq!(
        conflict(&act(&app, &a, id, "pause", 3).await),
        "Cannot pause this campaign: it is approved (only a sending campaign can be paused)."
    );
    assert_eq!(
        json(&act(&app, &a, id, "cancel", 3).await),
        "Campaign cancelled."
    );

    // The audit log has every step, by whom.
    let steps: Vec<(String, String)> = sqlx::query_as(
        "select a.action, u.email from audit_log a join users u on u.id = a.actor_id
         where a.org_id = $1 and a.object_type = 'campaign' and a.object_id = $2 order by a.id",
    )
    .bind(org)
    .bind(id.to_string())
    .fetch_all(&pool)
    .await
    .unwrap();
    let actions: Vec<&str> = steps.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(
        actions,
        [
            "campaign.create",
            "campaign.edit",
            "campaign.submit",
            "campaign.edit",
            "campaign.submit",
            "campaign.approve",
            "campaign.cancel"
        ]
    );
    assert_eq!(steps[5].1, "admin3@acme.example");

    // A clone of the cancelled campaign is a fresh draft by whoever cloned it, same content.
    let (_, body) = app.call_fn(&b, CloneCampaign { id }).await;
    let copy = json(&body).as_i64().unwrap();
    let s = sheet(&app, &b, copy).await;
    assert_eq!(
        (
            s["name"].as_str(),
            s["status"].as_str(),
            s["version"].as_i64(),
            s["subject"].as_str()
        ),
        (
            Some("Copy of Launch <b>day</b>"),
            Some("draft"),
            Some(1),
            Some("Hi {{ name }}")
        )
    );
    let author: i64 = sqlx::query_scalar("select author_id from campaigns where id = $1")
        .bind(copy)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(
        author,
        acme.admin(1).id.0,
        "the one who cloned it is its author"
    );
    assert_eq!(s["estimate"].as_i64(), Some(estimate));
}

#[tokio::test]
async fn rejecting_needs_a_reason_approval_to_nobody_is_refused_and_self_approval_is_marked() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let (_, body) = app
        .call_fn(
            &owner,
            NewCampaign {
                name: "Empty".into(),
            },
        )
        .await;
    let id = json(&body).as_i64().unwrap();
    assert_eq!(
        json(&act(&app, &owner, id, "submit", 1).await),
        "Campaign submitted."
    );
    // No list: nobody to send to.
    assert!(conflict(&act(&app, &admin, id, "approve", 1).await).contains("would reach nobody"));
    let still: String = sqlx::query_scalar("select status from campaigns where id = $1")
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(still, "submitted", "the refused approval was rolled back");
    // A missing campaign and another org's are not found, not "would reach nobody".
    let intruders = TestOrg::with_roles(&pool, "intruders", &[Role::Admin]).await;
    let intruder = intruders.admin(0).signed_in(&app).await;
    for (c, target) in [(&admin, id + 1000), (&intruder, id)] {
        assert_eq!(
            json(&act(&app, c, target, "approve", 1).await),
            Value::from("NotFound")
        );
    }
    let reject = |reason: &'static str| {
        let action = CampaignAction {
            id,
            verb: Transition::Reject,
            version: 1,
            reason: reason.into(),
        };
        let (app, admin) = (&app, &admin);
        async move { app.call_fn(admin, action).await.1 }
    };
    assert!(json(&reject("  ").await)["Invalid"]
        .as_str()
        .unwrap()
        .contains("Say why"));
    assert_eq!(
        json(&reject("Add a list, please.").await),
        "Campaign rejected."
    );
    let s = sheet(&app, &owner, id).await;
    assert_eq!(
        (s["status"].as_str(), s["rejection_reason"].as_str()),
        (Some("draft"), Some("Add a list, please."))
    );

    // A one-person org may allow self-approval: it is marked on the campaign and in the log.
    let (lists, _) = acme.audience(5).await;
    sqlx::query("update orgs set allow_self_approval = true where id = $1")
        .bind(org)
        .execute(&pool)
        .await
        .unwrap();
    let solo = SaveCampaign {
        id,
        version: 1,
        name: "Solo".into(),
        subject: "S".into(),
        body: "B".into(),
        format: String::new(),
        lists: vec![lists[0]],
        excluded_lists: vec![],
        segments: vec![],
        excluded_segments: vec![],
        schedule: String::new(),
    };
    let (_, body) = app.call_fn(&owner, solo).await;
    assert_eq!(json(&body), "Saved (version 2).");
    assert_eq!(
        json(&act(&app, &owner, id, "submit", 2).await),
        "Campaign submitted."
    );
    assert_eq!(
        json(&act(&app, &owner, id, "approve", 2).await),
        "Campaign approved."
    );
    let marked: (bool, Value) = sqlx::query_as(
        "select c.self_approved, a.after from campaigns c join audit_log a on a.object_id = c.id::text and a.action = 'campaign.approve'
         where c.id = $1",
    )
    .bind(id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(
        (marked.0, &marked.1["self_approved"]),
        (true, &Value::Bool(true))
    );
}

#[tokio::test]
async fn another_orgs_campaign_is_not_found_and_a_viewer_cannot_act() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner, Role::Viewer]).await;
    let other = TestOrg::with_roles(&pool, "other", &[Role::Owner]).await;
    let (their_lists, _) = other.audience(3).await;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let viewer = acme.users[1].signed_in(&app).await;
    let stranger = other.owner().signed_in(&app).await;
    let (_, body) = app
        .call_fn(
            &owner,
            NewCampaign {
                name: "Ours".into(),
            },
        )
        .await;
    let id = json(&body).as_i64().unwrap();
    let (_, body) = app.call_fn(&stranger, CampaignSheet { id }).await;
    assert_eq!(json(&body), "NotFound");
    assert_eq!(
        json(&act(&app, &stranger, id, "submit", 1).await),
        "NotFound"
    );
    let bare = |lists: Vec<i64>| SaveCampaign {
        id,
        version: 1,
        name: "x".into(),
        subject: String::new(),
        body: String::new(),
        format: String::new(),
        lists,
        excluded_lists: vec![],
        segments: vec![],
        excluded_segments: vec![],
        schedule: String::new(),
    };
    let (_, body) = app.call_fn(&stranger, bare(vec![])).await;
    assert_eq!(json(&body), "NotFound");
    // Nor can a list of another org be targeted.
    let (_, body) = app.call_fn(&owner, bare(vec![their_lists[0]])).await;
    assert_eq!(json(&body), "NotFound");
    assert_eq!(
        json(&act(&app, &viewer, id, "submit", 1).await),
        "Forbidden"
    );
    let (_, body) = app.call_fn(&viewer, CloneCampaign { id }).await;
    assert_eq!(json(&body), "Forbidden");
    let (_, body) = app.call_fn(&stranger, CloneCampaign { id }).await;
    assert_eq!(json(&body), "NotFound");
    let (_, body) = app
        .call_fn(
            &viewer,
            NewCampaign {
                name: "Mine".into(),
            },
        )
        .await;
    assert_eq!(json(&body), "Forbidden");
    // The viewer still reads it.
    assert_eq!(sheet(&app, &viewer, id).await["status"], "draft");
    let status: String = sqlx::query_scalar("select status from campaigns where id = $1")
        .bind(id)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(status, "draft", "nothing changed");
    assert_eq!(sheet(&app, &owner, id).await["version"], 1, "nothing saved");
}

#[tokio::test]
async fn a_sending_campaign_pauses_and_resumes_once_and_lists_the_recipients_not_reached() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Admin, Role::Admin]).await;
    let org = acme.id.0;
    let (lists, _) = acme.audience(10).await;
    let id = crate::support::fixtures::approved(
        &pool,
        org,
        acme.admin(0).id.0,
        acme.admin(1).id.0,
        &app::db::campaign::edit::Audience::of_lists(&lists),
        "Hi",
    )
    .await;
    mailroom::workers::campaign::start_due(&pool).await.unwrap();
    app::db::campaign::sends::hand_off(&pool, 100, 0, 8)
        .await
        .unwrap();
    let app = spawn_app(pool.clone()).await;
    let b = acme.admin(1).signed_in(&app).await;
    // The list filters by state and shows progress from the counter slots.
    let listed = |status: &str| Campaigns {
        status: status.into(),
    };
    let (_, body) = app.call_fn(&b, listed("sending")).await;
    let rows = json(&body);
    assert_eq!(rows.as_array().unwrap().len(), 1, "{rows}");
    assert_eq!(
        (rows[0]["id"].as_i64(), rows[0]["total"].as_i64()),
        (Some(id), Some(10))
    );
    let (_, body) = app.call_fn(&b, listed("draft")).await;
    assert_eq!(json(&body), serde_json::json!([]));
    let (_, body) = app.call_fn(&b, listed("bogus")).await;
    assert!(json(&body)["Invalid"]
        .as_str()
        .unwrap()
        .contains("\"bogus\" is not"));
    assert_eq!(
        json(&act(&app, &b, id, "pause", 1).await),
        "Campaign paused."
    );
    assert_eq!(
        conflict(&act(&app, &b, id, "pause", 1).await),
        "Cannot pause this campaign: it is paused (only a sending campaign can be paused).",
        "a double click pauses once"
    );
    assert_eq!(
        json(&act(&app, &b, id, "resume", 1).await),
        "Campaign resumed."
    );
    assert!(conflict(&act(&app, &b, id, "resume", 1).await).contains("it is sending"));

    // Two recipients were not reached for sure: the page lists them with the reason.
    sqlx::query(
        "with two as (select job_id, row_number() over (order by job_id) as k from deliveries
                      where campaign_id = $1 order by job_id limit 2)
         update deliveries d set status = case when two.k = 1 then 'failed' else 'unknown' end,
                smtp_reply = case when two.k = 1 then '550 5.1.1 <x>: no such user' end,
                last_error = case when two.k = 2 then 'connection lost after the body started' end,
                finished_at = now()
         from two where d.job_id = two.job_id",
    )
    .bind(id)
    .execute(&pool)
    .await
    .unwrap();
    let s = sheet(&app, &b, id).await;
    let problems = s["problems"].as_array().unwrap();
    let mut seen: Vec<(&str, &str)> = problems
        .iter()
        .map(|p| (p["status"].as_str().unwrap(), p["reason"].as_str().unwrap()))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("failed", "550 5.1.1 <x>: no such user"),
            ("unknown", "connection lost after the body started")
        ]
    );
}

#[tokio::test]
async fn a_deleted_campaign_waits_in_the_bin_and_can_be_restored_but_a_sending_one_cannot_be_deleted(
) {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Admin, Role::Admin]).await;
    let org = acme.id.0;
    let (lists, _) = acme.audience(5).await;
    let sending = crate::support::fixtures::approved(
        &pool,
        org,
        acme.admin(0).id.0,
        acme.admin(1).id.0,
        &app::db::campaign::edit::Audience::of_lists(&lists),
        "Hi",
    )
    .await;
    mailroom::workers::campaign::start_due(&pool).await.unwrap();
    let app = spawn_app(pool.clone()).await;
    let a = acme.admin(0).signed_in(&app).await;
    let (_, body) = app
        .call_fn(
            &a,
            NewCampaign {
                name: "Scrap".into(),
            },
        )
        .await;
    let draft = json(&body).as_i64().unwrap();

    let (_, body) = app.call_fn(&a, DeleteCampaign { id: sending }).await;
    assert_eq!(
        conflict(&body),
        "Only a draft, sent or cancelled campaign can be deleted; this one is sending (cancel it first)."
    );
    let (status, body) = app.call_fn(&a, DeleteCampaign { id: draft }).await;
    assert!(status.is_success() || status.is_redirection(), "{body}");
    let (_, body) = app
        .call_fn(
            &a,
            Campaigns {
                status: String::new(),
            },
        )
        .await;
    assert!(
        !body.contains("Scrap"),
        "a deleted campaign leaves the list: {body}"
    );
    let (_, body) = app.call_fn(&a, CampaignSheet { id: draft }).await;
    assert_eq!(json(&body), "NotFound");
    let (_, body) = app.call_fn(&a, CampaignBin {}).await;
    let bin = json(&body);
    assert_eq!(bin.as_array().unwrap().len(), 1);
    assert_eq!(
        (bin[0]["id"].as_i64(), bin[0]["name"].as_str()),
        (Some(draft), Some("Scrap"))
    );
    // Deleting again: it is not there to delete.
    let (_, body) = app.call_fn(&a, DeleteCampaign { id: draft }).await;
    assert_eq!(json(&body), "NotFound");

    let (_, body) = app.call_fn(&a, RestoreCampaign { id: draft }).await;
    assert_eq!(json(&body), "Restored.");
    assert_eq!(sheet(&app, &a, draft).await["status"], "draft");
    let (_, body) = app.call_fn(&a, CampaignBin {}).await;
    assert_eq!(json(&body), serde_json::json!([]));
}
