//! The dashboard's automation functions over HTTP: a draft saved and shown, approved only by
//! a second admin, edited live into a version that waits, paused, resumed and stopped, each
//! change audited; bad input named, never a 500.

use app::api::automations::{
    ApproveAutomation, AutomationSheet, ControlAutomation, PreviewAutomationMail, SaveAutomation,
};
use app::domain::Role;
use serde_json::json;

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::test_app::spawn_app;

#[tokio::test]
async fn a_draft_is_saved_approved_by_a_second_admin_edited_live_paused_and_stopped() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner, Role::Admin]).await;
    let list = acme.list("Newsletter").await;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let def = json!({
        "trigger": {"type": "list_joined", "list_id": list}, "reentry": "once",
        "steps": [{"type": "email", "subject": "Welcome {{ name }}", "body": "Hi {{ event.order }}"}]
    });
    let save = |id: i64, definition: &serde_json::Value| SaveAutomation {
        id,
        name: "Welcome".into(),
        definition: definition.to_string(),
    };
    // Faults are named, not 500s.
    let (s, body) = app
        .call_fn(
            &admin,
            save(
                0,
                &json!({"trigger": {"type": "api"}, "reentry": "once", "steps": []}),
            ),
        )
        .await;
    assert_eq!(s, 422, "{body}");
    assert!(body.contains("steps"), "{body}");
    let (s, body) = app.call_fn(&admin, save(0, &json!({"nonsense": 1}))).await;
    assert_eq!(s, 422, "{body}");
    let (s, body) = app.call_fn(&admin, save(0, &def)).await;
    assert_eq!(s, 200, "{body}");
    let id: i64 = sqlx::query_scalar("select id from automations where org_id = $1")
        .bind(acme.id)
        .fetch_one(&pool)
        .await
        .unwrap();
    // The admin who wrote it cannot approve it; the owner can.
    let (s, body) = app
        .call_fn(&admin, ApproveAutomation { id, version: 1 })
        .await;
    assert_eq!(s, 409, "{body}");
    let (s, body) = app
        .call_fn(&owner, ApproveAutomation { id, version: 1 })
        .await;
    assert_eq!(s, 200, "{body}");
    assert!(body.contains("live"), "{body}");
    // A live edit is a new version, waiting; the sheet shows it and who wrote it.
    let mut v2 = def.clone();
    v2["steps"][0]["subject"] = json!("Welcome aboard");
    let (s, body) = app.call_fn(&admin, save(id, &v2)).await;
    assert_eq!(s, 200, "{body}");
    let (s, body) = app.call_fn(&owner, AutomationSheet { id }).await;
    assert_eq!(s, 200, "{body}");
    let sheet: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(sheet["draft_version"], 2);
    assert_eq!(sheet["live_version"], 1);
    assert_eq!(sheet["may_approve"], true);
    assert_eq!(sheet["definition"]["steps"][0]["subject"], "Welcome aboard");
    // A mail step's preview renders the sample fields; a template fault is named.
    let (s, body) = app
        .call_fn(
            &owner,
            PreviewAutomationMail {
                definition: def.to_string(),
                step: 0,
            },
        )
        .await;
    assert_eq!(s, 200, "{body}");
    assert!(
        body.contains("Welcome Sample Person") && body.contains("A-1001"),
        "{body}"
    );
    let mut broken = def.clone();
    broken["steps"][0]["body"] = json!("{{ attributes.missing.deeper }}");
    let (s, body) = app
        .call_fn(
            &owner,
            PreviewAutomationMail {
                definition: broken.to_string(),
                step: 0,
            },
        )
        .await;
    assert_eq!(s, 422, "{body}");
    // Pause, resume, stop; resuming what is not paused is a conflict.
    for (action, want) in [
        ("pause", 200),
        ("pause", 409),
        ("resume", 200),
        ("stop", 200),
        ("resume", 409),
        ("fly", 422),
    ] {
        let (s, body) = app
            .call_fn(
                &owner,
                ControlAutomation {
                    id,
                    action: action.into(),
                },
            )
            .await;
        assert_eq!(s, want, "{action}: {body}");
    }
    let (s, body) = app.call_fn(&admin, save(id, &def)).await;
    assert_eq!(s, 409, "a stopped automation is never changed: {body}");
    // A segment trigger: the org's own segment is saved with its version; another org's is
    // not found.
    let empty: app::domain::segment::Group =
        serde_json::from_value(json!({"op": "all", "children": []})).unwrap();
    let globex = TestOrg::new(&pool, "globex").await;
    let mut c = pool.acquire().await.unwrap();
    let ours = app::db::segment::create(&mut c, acme.id, "Ours", &empty)
        .await
        .unwrap();
    let theirs = app::db::segment::create(&mut c, globex.id, "Theirs", &empty)
        .await
        .unwrap();
    drop(c);
    let by_segment = |segment: i64| SaveAutomation {
        id: 0,
        name: format!("Entered {segment}"),
        definition: json!({
            "trigger": {"type": "segment_entered", "segment_id": segment, "version": 99},
            "reentry": "once", "steps": [{"type": "exit"}]
        })
        .to_string(),
    };
    let (s, body) = app.call_fn(&admin, by_segment(theirs)).await;
    assert_eq!(s, 404, "{body}");
    let (s, body) = app.call_fn(&admin, by_segment(ours)).await;
    assert_eq!(s, 200, "{body}");
    let saved: i64 = body.trim().parse().unwrap();
    let (s, body) = app.call_fn(&admin, AutomationSheet { id: saved }).await;
    assert_eq!(s, 200, "{body}");
    let sheet: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(sheet["definition"]["trigger"]["version"], 1, "{body}");
    assert!(sheet["segments"].to_string().contains("Ours"), "{body}");
    assert!(!sheet["segments"].to_string().contains("Theirs"), "{body}");
    let actions: Vec<String> = sqlx::query_scalar(
        "select action from audit_log where org_id = $1 and object_type = 'automation' order by id",
    )
    .bind(acme.id)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        actions,
        [
            "automation.create",
            "automation.approve",
            "automation.edit",
            "automation.pause",
            "automation.resume",
            "automation.stop",
            "automation.create"
        ]
    );
}
