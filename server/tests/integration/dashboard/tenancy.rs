//! Tenant isolation over every server function, enumerated from the registry (a new server
//! function without a case here fails the test): for a user of org A, org B's objects are
//! not found and org B's rows never appear; a viewer cannot act.

use app::domain::Role;
use serde_json::Value;

use crate::support::helpers::{draft, enqueue_test_mail_to, test_db};
use crate::support::org::TestOrg;
use crate::support::test_app::{client, spawn_app, TestApp};

/// One org's objects, by id.
struct Objects {
    campaign: String,
    job: String,
    user: String,
    subscriber: String,
    list: String,
    import: String,
    suppressed: String,
    endpoint: String,
    api_token: String,
    template: String,
    segment: String,
    automation: String,
    event_endpoint: String,
    event_message: String,
}

/// How an endpoint is checked.
enum Case {
    /// No session needed, by design.
    Public,
    /// Reads the signed-in org only (no object id): org B's marker never appears.
    Scoped(Vec<(&'static str, String)>),
    /// Takes an object id; `acts`: changes something (a viewer is refused).
    Object {
        args: fn(&Objects) -> Vec<(&'static str, String)>,
        acts: bool,
    },
    /// Changes the signed-in org with no object id: only a viewer's refusal to check.
    ActsOnOwnOrg(Vec<(&'static str, String)>),
}

fn case(endpoint: &str) -> Option<Case> {
    let id = |o: &Objects| vec![("id", o.campaign.clone())];
    let job = |o: &Objects| vec![("job_id", o.job.clone())];
    Some(match endpoint {
        "login" | "logout" => Case::Public,
        "me"
        | "overview"
        | "campaigns"
        | "deliveries"
        | "delivery_counts"
        | "digests"
        | "digest_preview"
        | "digest_resend_dialog"
        | "campaign_bin"
        | "subscribers"
        | "lists"
        | "suppressions"
        | "settings"
        | "sender_auth"
        | "users"
        | "audit_log"
        | "feedback_settings"
        | "relay_health"
        | "database_status" => Case::Scoped(vec![]),
        "feedback_events" => Case::Scoped(vec![("unmatched", "false".into())]),
        "api_tokens" | "templates" | "segments" | "automations" => Case::Scoped(vec![]),
        "automation_sheet" => Case::Object {
            args: |o| vec![("id", o.automation.clone())],
            acts: false,
        },
        "save_automation" => Case::Object {
            args: |o| {
                vec![
                    ("id", o.automation.clone()),
                    ("name", "Taken over".into()),
                    (
                        "definition",
                        r#"{"trigger":{"type":"api"},"reentry":"once","steps":[{"type":"exit"}]}"#
                            .into(),
                    ),
                ]
            },
            acts: true,
        },
        "approve_automation" => Case::Object {
            args: |o| vec![("id", o.automation.clone()), ("version", "1".into())],
            acts: true,
        },
        "control_automation" => Case::Object {
            args: |o| vec![("id", o.automation.clone()), ("action", "stop".into())],
            acts: true,
        },
        // A definition naming another org's list is that list not found (the preview reads no
        // object but the definition; its list is checked when saved).
        "preview_automation_mail" => Case::Scoped(vec![
            (
                "definition",
                r#"{"trigger":{"type":"api"},"reentry":"once","steps":[{"type":"email","subject":"Hi","body":"x"}]}"#
                    .into(),
            ),
            ("step", "0".into()),
        ]),
        "segment_sheet" => Case::Object {
            args: |o| vec![("id", o.segment.clone())],
            acts: false,
        },
        // A tree naming another org's list is that list not found.
        "preview_segment" => Case::Object {
            args: |o| {
                vec![(
                    "definition",
                    format!(
                        r#"{{"op":"all","children":[{{"type":"list","list_id":{}}}]}}"#,
                        o.list
                    ),
                )]
            },
            acts: false,
        },
        "save_segment" => Case::Object {
            args: |o| {
                vec![
                    ("id", o.segment.clone()),
                    ("version", "1".into()),
                    ("name", "Taken over".into()),
                    ("definition", r#"{"op":"all","children":[]}"#.into()),
                ]
            },
            acts: true,
        },
        "delete_segment" => Case::Object {
            args: |o| vec![("id", o.segment.clone())],
            acts: true,
        },
        "template" => Case::Object {
            args: |o| vec![("id", o.template.clone())],
            acts: false,
        },
        "save_template" => Case::Object {
            args: |o| {
                vec![
                    ("id", o.template.clone()),
                    ("expected_version", "1".into()),
                    ("name", "receipt".into()),
                    ("subject", "Changed".into()),
                    ("body_text", "Changed".into()),
                ]
            },
            acts: true,
        },
        "create_api_token" => Case::ActsOnOwnOrg(vec![
            ("name", "mine".into()),
            ("scopes[0]", "subscribers:read".into()),
        ]),
        "revoke_api_token" => Case::Object {
            args: |o| vec![("id", o.api_token.clone())],
            acts: true,
        },
        "event_endpoints" => Case::Scoped(vec![]),
        "create_event_endpoint" => Case::ActsOnOwnOrg(vec![
            ("url", "https://mine.example.org/hook".into()),
            ("event_types[0]", "message.failed".into()),
        ]),
        "set_event_endpoint_enabled" => Case::Object {
            args: |o| {
                vec![
                    ("id", o.event_endpoint.clone()),
                    ("enabled", "false".into()),
                ]
            },
            acts: true,
        },
        "rotate_event_endpoint" | "delete_event_endpoint" | "test_event_endpoint" => Case::Object {
            args: |o| vec![("id", o.event_endpoint.clone())],
            acts: true,
        },
        "replay_event" => Case::Object {
            args: |o| vec![("message_id", o.event_message.clone())],
            acts: true,
        },
        "revoke_webhook_endpoint" => Case::Object {
            args: |o| vec![("id", o.endpoint.clone())],
            acts: true,
        },
        "create_webhook_endpoint" => Case::ActsOnOwnOrg(vec![("source", "generic".into())]),
        "save_bounce_policy" => Case::ActsOnOwnOrg(vec![
            ("soft_threshold", "3".into()),
            ("soft_days", "30".into()),
            ("pause_bounce_pct", "4".into()),
            ("pause_complaint_pct", "0.2".into()),
            ("pause_min_delivered", "300".into()),
        ]),
        "save_bounce_domain" => Case::ActsOnOwnOrg(vec![("domain", "bounces.tenancy.test".into())]),
        // The set-password page: the link's token is the credential, no session.
        "invite_info" | "accept_invite" => Case::Public,
        // The first-run page: no session exists yet; it acts only while no organisation does
        // and with the one-time token (tests/integration/first_run.rs).
        "setup_needed" | "first_run_setup" => Case::Public,
        "set_user_role" => Case::Object {
            args: |o| vec![("user_id", o.user.clone()), ("role", "admin".into())],
            acts: true,
        },
        "set_user_disabled" => Case::Object {
            args: |o| vec![("user_id", o.user.clone()), ("disabled", "true".into())],
            acts: true,
        },
        "reset_password" => Case::Object {
            args: |o| vec![("user_id", o.user.clone())],
            acts: true,
        },
        "save_sender" => Case::ActsOnOwnOrg(vec![
            ("from_name", "Taken over".into()),
            ("from_address", "x@example.org".into()),
            ("reply_to", "".into()),
        ]),
        "save_dkim_key" => Case::ActsOnOwnOrg(vec![
            ("domain", "example.org".into()),
            ("selector", "taken".into()),
            ("private_key", "".into()),
        ]),
        "set_dkim_enabled" => Case::ActsOnOwnOrg(vec![("enabled", "true".into())]),
        "add_dkim_ed25519_key" => Case::ActsOnOwnOrg(vec![("selector", "taken2".into())]),
        "remove_dkim_ed25519_key" => Case::ActsOnOwnOrg(vec![]),
        "save_return_path" => Case::ActsOnOwnOrg(vec![("return_path", "x@example.org".into())]),
        "save_approval_policy" => Case::ActsOnOwnOrg(vec![("allow_self_approval", "on".into())]),
        "save_event_retention" => Case::ActsOnOwnOrg(vec![("event_retention_days", "7".into())]),
        "save_click_tracking" => Case::ActsOnOwnOrg(vec![("enabled", "true".into())]),
        "save_open_tracking" => Case::ActsOnOwnOrg(vec![("enabled", "true".into())]),
        "invite_user" => Case::ActsOnOwnOrg(vec![
            ("email", "intruder@example.org".into()),
            ("name", "".into()),
            ("role", "owner".into()),
        ]),
        "campaign_detail" | "campaign_sheet" => Case::Object {
            args: id,
            acts: false,
        },
        "captured_message" => Case::Object {
            args: job,
            acts: false,
        },
        "clone_campaign" | "delete_campaign" | "restore_campaign" => Case::Object {
            args: id,
            acts: true,
        },
        "retry_delivery" => Case::Object {
            args: job,
            acts: true,
        },
        "campaign_action" => Case::Object {
            args: |o| {
                vec![
                    ("id", o.campaign.clone()),
                    ("verb", "submit".into()),
                    ("version", "1".into()),
                ]
            },
            acts: true,
        },
        "save_campaign" => Case::Object {
            args: |o| {
                vec![
                    ("id", o.campaign.clone()),
                    ("version", "1".into()),
                    ("name", "Taken over".into()),
                    ("subject", "".into()),
                    ("body", "".into()),
                ]
            },
            acts: true,
        },
        "campaign_test" => Case::Object {
            args: |o| {
                vec![
                    ("id", o.campaign.clone()),
                    ("version", "1".into()),
                    ("token", "t".into()),
                    ("addresses", "x@example.com".into()),
                ]
            },
            acts: true,
        },
        "subscriber" => Case::Object {
            args: |o| vec![("id", o.subscriber.clone())],
            acts: false,
        },
        "import_status" => Case::Object {
            args: |o| vec![("id", o.import.clone())],
            acts: false,
        },
        "save_subscriber" => Case::Object {
            args: |o| {
                vec![
                    ("id", o.subscriber.clone()),
                    ("name", "Taken over".into()),
                    ("status", "blocklisted".into()),
                ]
            },
            acts: true,
        },
        "remove_subscriber" | "erase_subscriber" => Case::Object {
            args: |o| vec![("id", o.subscriber.clone())],
            acts: true,
        },
        "rename_list" => Case::Object {
            args: |o| vec![("id", o.list.clone()), ("name", "Taken over".into())],
            acts: true,
        },
        "delete_list" => Case::Object {
            args: |o| vec![("id", o.list.clone())],
            acts: true,
        },
        "remove_suppression" => Case::Object {
            args: |o| vec![("email", o.suppressed.clone())],
            acts: true,
        },
        "add_subscriber" => Case::ActsOnOwnOrg(vec![("email", "new@example.org".into())]),
        "create_list" => Case::ActsOnOwnOrg(vec![("name", "Mine".into())]),
        "add_suppressions" => Case::ActsOnOwnOrg(vec![("addresses", "x@example.org".into())]),
        "digest_opt_in" => Case::Object {
            args: |o| vec![("user_id", o.user.clone()), ("enabled", "false".into())],
            acts: true,
        },
        "new_campaign" => Case::ActsOnOwnOrg(vec![("name", "Mine".into())]),
        "save_quiet_hours" => Case::ActsOnOwnOrg(vec![("quiet_hours", "22-07".into())]),
        "digest_schedule" => Case::ActsOnOwnOrg(vec![
            ("weekday", "1".into()),
            ("hour", "9".into()),
            ("timezone", "UTC".into()),
        ]),
        "digest_resend" => Case::ActsOnOwnOrg(vec![("key", "1".into())]),
        _ => return None,
    })
}

/// A digest of an org's campaigns, subscribers, lists, memberships and suppressions.
const ORG_ROWS: &str = "select md5(concat_ws('|',
        (select string_agg(c::text, ',' order by c.id) from campaigns c where c.org_id = $1),
        (select string_agg(s::text, ',' order by s.id) from subscribers s where s.org_id = $1),
        (select string_agg(l::text, ',' order by l.id) from lists l where l.org_id = $1),
        (select string_agg(m::text, ',' order by m.list_id, m.subscriber_id) from list_members m where m.org_id = $1),
        (select string_agg(x::text, ',' order by x.email_lower) from suppressions x where x.org_id = $1),
        (select string_agg(w::text, ',' order by w.id) from webhook_endpoints w where w.org_id = $1),
        (select string_agg(t::text, ',' order by t.id) from api_tokens t where t.org_id = $1),
        (select string_agg(t::text, ',' order by t.id) from tx_templates t where t.org_id = $1),
        (select string_agg(e::text, ',' order by e.id) from delivery_events e where e.org_id = $1),
        (select string_agg(g::text, ',' order by g.id) from segments g where g.org_id = $1),
        (select string_agg(a::text, ',' order by a.id) from automations a where a.org_id = $1),
        (select string_agg(v::text, ',' order by v.automation_id, v.version) from automation_versions v where v.org_id = $1),
        (select string_agg(w::text, ',' order by w.id) from webhook_out_endpoints w where w.org_id = $1),
        (select string_agg(m::text, ',' order by m.id) from webhook_out_messages m where m.org_id = $1),
        (select row(soft_bounce_threshold, soft_bounce_days, pause_bounce_pct, pause_complaint_pct,
                    pause_min_delivered, bounce_domain)::text from orgs where id = $1)))";

/// An org's subscriber (on a list), list, import and suppressed address, named by `marker`.
async fn audience_objects(
    pool: &sqlx::PgPool,
    org: i64,
    user: i64,
    marker: &str,
) -> (String, String, String, String) {
    use app::db::{audience, imports};
    use app::domain::EmailAddress;
    let mut tx = pool.begin().await.unwrap();
    let list = audience::create_list(&mut tx, org, &format!("{marker} list"))
        .await
        .unwrap();
    let email = EmailAddress::parse(&format!("{marker}-person@example.org")).unwrap();
    let ids = audience::insert_subscribers(&mut tx, org, &[(email, format!("{marker} person"))])
        .await
        .unwrap();
    audience::add_members(&mut tx, org, list, &ids)
        .await
        .unwrap();
    let suppressed = EmailAddress::parse(&format!("{marker}-gone@example.org")).unwrap();
    audience::suppress(
        &mut tx,
        org,
        &suppressed,
        app::domain::SuppressionReason::Manual,
        marker,
    )
    .await
    .unwrap();
    let import = imports::start(&mut tx, org, list, user, &format!("{marker}.csv"))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    (
        ids[0].to_string(),
        list.to_string(),
        import.to_string(),
        suppressed.lower().to_string(),
    )
}

/// An org's webhook endpoint and one unmatched relay event naming `marker`; the endpoint's id.
async fn relay_objects(pool: &sqlx::PgPool, org: i64, marker: &str) -> String {
    use app::db::reports;
    use app::domain::{BouncePolicy, EmailAddress, EventKind, EventSource, FeedbackReport};
    let id = format!("{marker}-endpoint-id");
    let mut tx = pool.begin().await.unwrap();
    reports::create_endpoint(&mut tx, org, &id, EventSource::Generic, "whsec_AAAA")
        .await
        .unwrap();
    let e = FeedbackReport {
        id: format!("{org}:{marker}"),
        kind: EventKind::SoftBounce,
        recipient: Some(EmailAddress::parse(&format!("{marker}-bounced@example.org")).unwrap()),
        message_id: None,
        relay_id: None,
        envelope_from: None,
        status: Some("4.2.2".into()),
        diagnostic: Some(format!("{marker} mailbox full")),
        occurred_at: None,
    };
    let cx = app::feedback::Intake {
        org_id: org,
        source: EventSource::Generic,
        policy: BouncePolicy::default(),
        verp_key: None,
        signed: true,
    };
    app::feedback::record(&mut tx, &cx, &e).await.unwrap();
    tx.commit().await.unwrap();
    id
}

async fn call(
    app: &TestApp,
    c: &reqwest::Client,
    endpoint: &str,
    args: &[(&'static str, String)],
) -> String {
    let args: Vec<(&str, &str)> = args.iter().map(|(k, v)| (*k, v.as_str())).collect();
    app.call_with(c, endpoint, &args).await.1
}

#[tokio::test]
async fn every_server_function_keeps_to_the_signed_in_org_and_viewers_cannot_act() {
    let pool = test_db().await;
    let alpha = TestOrg::with_roles(&pool, "alpha", &[Role::Owner, Role::Viewer]).await;
    let org_a = alpha.id.0;
    let beta = TestOrg::with_roles(&pool, "beta", &[Role::Owner]).await;
    let org_b = beta.id.0;
    let mut objects = Vec::new();
    for (org, author, marker) in [
        (org_a, alpha.owner().id.0, "alpha-marker"),
        (org_b, beta.owner().id.0, "beta-secret-marker"),
    ] {
        let mut tx = pool.begin().await.unwrap();
        let campaign = draft(&mut tx, org, author, marker).await;
        tx.commit().await.unwrap();
        let jobs =
            enqueue_test_mail_to(&pool, org, "dlg", &[format!("{marker}@example.org")]).await;
        sqlx::query("update deliveries set status = 'failed', smtp_reply = '550 5.7.1 no' where job_id = $1")
            .bind(&jobs[0])
            .execute(&pool)
            .await
            .unwrap();
        let (subscriber, list, import, suppressed) =
            audience_objects(&pool, org, author, marker).await;
        let endpoint = relay_objects(&pool, org, marker).await;
        let mut tx = pool.begin().await.unwrap();
        let api_token = app::db::api_tokens::create(
            &mut tx,
            org,
            author,
            &format!("{marker} token"),
            &app::auth::hash_token(&format!("mrk_{marker}")),
            &[app::domain::ApiScope::SubscribersRead],
        )
        .await
        .unwrap();
        let template = match app::db::transactional::save(
            &mut tx,
            org,
            None,
            &app::db::transactional::Draft {
                name: "receipt",
                subject: &format!("Receipt from {marker}"),
                body_text: "Thanks.",
                body_html: None,
                sample_data: &serde_json::json!({}),
                author_id: author,
            },
        )
        .await
        .unwrap()
        {
            app::db::transactional::Saved::Version(id, _) => id,
            _ => panic!("the template was not saved"),
        };
        let segment = app::db::segment::create(
            &mut tx,
            app::domain::OrgId(org),
            &format!("{marker} segment"),
            &app::domain::segment::Group {
                op: app::domain::segment::GroupOp::All,
                children: Vec::new(),
            },
        )
        .await
        .unwrap();
        let automation = app::db::automation::create(
            &mut tx,
            app::domain::OrgId(org),
            &format!("{marker} automation"),
            &serde_json::from_value(serde_json::json!({
                "trigger": {"type": "api"}, "reentry": "once",
                "steps": [{"type": "email", "subject": format!("{marker} hello"), "body": "x"}]
            }))
            .unwrap(),
            app::domain::UserId(author),
        )
        .await
        .unwrap();
        let event_endpoint = app::db::webhooks_out::create(
            &mut tx,
            org,
            Some(author),
            &format!("https://{marker}.example.org/hook"),
            &[app::domain::WebhookEventType::MessageFailed],
            &app::webhook::new_secret(),
            app::domain::webhook::WEBHOOK_MAX_IN_FLIGHT,
        )
        .await
        .unwrap();
        let event_message = app::db::webhooks_out::send_test(&mut tx, org, event_endpoint)
            .await
            .unwrap()
            .unwrap();
        tx.commit().await.unwrap();
        objects.push(Objects {
            event_endpoint: event_endpoint.to_string(),
            event_message,
            segment: segment.to_string(),
            automation: automation.to_string(),
            template: template.to_string(),
            campaign: campaign.to_string(),
            job: jobs[0].clone(),
            user: author.to_string(),
            subscriber,
            list,
            import,
            suppressed,
            endpoint,
            api_token: api_token.to_string(),
        });
    }
    let (ours, theirs) = (&objects[0], &objects[1]);
    let app = spawn_app(pool.clone()).await;
    let owner = client(&app);
    app.login(&owner, &alpha.owner().email, &alpha.owner().password)
        .await;
    let viewer = client(&app);
    app.login(&viewer, &alpha.users[1].email, &alpha.users[1].password)
        .await;
    let before: String = sqlx::query_scalar(ORG_ROWS)
        .bind(org_b)
        .fetch_one(&pool)
        .await
        .unwrap();

    let mut endpoints: Vec<String> = leptos::server_fn::axum::server_fn_paths()
        .map(|(path, _)| path.trim_start_matches("/api/").to_string())
        .collect();
    endpoints.sort();
    endpoints.dedup();
    assert!(
        endpoints.len() >= 20,
        "the registry was read: {endpoints:?}"
    );
    let mut checked = Vec::new();
    for endpoint in &endpoints {
        let Some(case) = case(endpoint) else {
            panic!(
                "server function {endpoint:?} has no tenancy case in tests/integration/tenancy.rs"
            );
        };
        match case {
            Case::Public => {}
            Case::Scoped(args) => {
                let body = call(&app, &owner, endpoint, &args).await;
                assert!(!body.contains("beta"), "{endpoint} shows org B: {body}");
            }
            Case::Object { args, acts } => {
                let body = call(&app, &owner, endpoint, &args(theirs)).await;
                assert_eq!(
                    serde_json::from_str::<Value>(&body).ok(),
                    Some(Value::from("NotFound")),
                    "{endpoint} with org B's object: {body}"
                );
                if acts {
                    let body = call(&app, &viewer, endpoint, &args(ours)).await;
                    assert_eq!(
                        serde_json::from_str::<Value>(&body).ok(),
                        Some(Value::from("Forbidden")),
                        "{endpoint} by a viewer: {body}"
                    );
                }
            }
            Case::ActsOnOwnOrg(args) => {
                let body = call(&app, &viewer, endpoint, &args).await;
                assert_eq!(
                    serde_json::from_str::<Value>(&body).ok(),
                    Some(Value::from("Forbidden")),
                    "{endpoint} by a viewer: {body}"
                );
            }
        }
        checked.push(endpoint.as_str());
    }
    // Org B's rows are as they were.
    let after: String = sqlx::query_scalar(ORG_ROWS)
        .bind(org_b)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(before, after, "org B's campaigns or audience changed");
    let b_delivery: String = sqlx::query_scalar("select status from deliveries where job_id = $1")
        .bind(&theirs.job)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(b_delivery, "failed", "org B's delivery was not retried");
    let (role, disabled, hash): (String, bool, String) =
        sqlx::query_as("select role, disabled, password_hash from users where id = $1")
            .bind(theirs.user.parse::<i64>().unwrap())
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        (role.as_str(), disabled),
        ("owner", false),
        "org B's owner was not changed"
    );
    assert!(
        !hash.starts_with('!'),
        "org B's owner's password was not reset"
    );
    eprintln!(
        "tenancy checked for {} server functions: {checked:?}",
        checked.len()
    );
}
