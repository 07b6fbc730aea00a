//! Odd input at the edge, over real HTTP on a real PostgreSQL: a NUL character, a year
//! PostgreSQL cannot place in the organisation's time zone, a value of 100 KB. Each is refused
//! before it reaches a statement, by the one rule of `app::domain::input`, with a 4xx that names
//! the field and quotes at most a short excerpt of the value; nothing is written.

use app::api::campaign::edit::NewCampaign;
use app::api::campaign::Campaigns;
use app::api::deliveries::{CapturedMessage, RetryDelivery};
use app::api::digests::SaveDigestSchedule;
use app::api::feedback::{CreateWebhookEndpoint, RevokeWebhookEndpoint, SaveBounceDomain};
use app::api::suppressions::{AddSuppressions, RemoveSuppression, Suppressions};
use app::domain::{ApiScope, Role};
use reqwest::StatusCode;
use sqlx::PgPool;

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::rest::{send, token};
use crate::support::test_app::{json, spawn_app, TestApp};

/// An app over a fresh database and its org's owner, signed in.
async fn owner_app() -> (PgPool, TestApp, reqwest::Client) {
    let pool = test_db().await;
    let alpha = TestOrg::with_roles(&pool, "alpha", &[Role::Owner]).await;
    let app = spawn_app(pool.clone()).await;
    let c = alpha.owner().signed_in(&app).await;
    (pool, app, c)
}

/// Every row a refused call could have written (or changed), as text.
async fn written(pool: &PgPool) -> String {
    let mut all = String::new();
    for table in [
        "audit_log",
        "orgs",
        "campaigns",
        "campaign_lists",
        "deliveries",
        "suppressions",
        "webhook_endpoints",
        "subscribers",
        "list_members",
    ] {
        let sql = format!(
            "select coalesce(string_agg(t::text, E'\\n' order by t::text), '') from {table} t"
        );
        let rows: String = sqlx::query_scalar(sql.as_str())
            .fetch_one(pool)
            .await
            .unwrap();
        all.push_str(table);
        all.push_str(&rows);
    }
    all
}

/// A server function's refusal of odd input: 422, a short answer, its message starting with
/// the field's name, and no NUL quoted back.
fn refused(call: &str, status: StatusCode, body: &str, field: &str) {
    assert_eq!(status, 422, "{call}: {body}");
    assert!(body.len() < 1_000, "{call}: a {} byte answer", body.len());
    assert!(
        !body.contains("\\u0000"),
        "{call} quotes the NUL back: {body}"
    );
    let message = json(body)["Invalid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.starts_with(&format!("{field}: ")),
        "{call} should name {field}: {message}"
    );
}

#[tokio::test]
async fn a_nul_in_a_job_id_an_address_an_endpoint_or_a_time_zone_is_a_422_naming_the_field_and_writes_nothing(
) {
    let (pool, app, c) = owner_app().await;
    let (status, body) = app
        .call_fn(
            &c,
            AddSuppressions {
                addresses: "ann@example.org".into(),
            },
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let create = CreateWebhookEndpoint {
        source: "generic".into(),
        signing_key: String::new(),
        topic_arn: String::new(),
        certificate: String::new(),
    };
    let (status, body) = app.call_fn(&c, create).await;
    assert_eq!(status, 200, "{body}");
    let path = json(&body)["path"].as_str().unwrap().to_owned();
    let endpoint = path.rsplit('/').next().unwrap().to_owned();
    let before = written(&pool).await;

    let job_id = "campaign:1:\u{0}2".to_string();
    let (s, b) = app
        .call_fn(
            &c,
            CapturedMessage {
                job_id: job_id.clone(),
            },
        )
        .await;
    refused("captured_message", s, &b, "Job id");
    let (s, b) = app.call_fn(&c, RetryDelivery { job_id }).await;
    refused("retry_delivery", s, &b, "Job id");
    let (s, b) = app
        .call_fn(
            &c,
            RemoveSuppression {
                email: "ann@\u{0}example.org".into(),
            },
        )
        .await;
    refused("remove_suppression", s, &b, "E-mail address");
    let (s, b) = app
        .call_fn(
            &c,
            RevokeWebhookEndpoint {
                id: format!("{}\u{0}{}", &endpoint[..4], &endpoint[4..]),
            },
        )
        .await;
    refused("revoke_webhook_endpoint", s, &b, "Endpoint");
    let (s, b) = app
        .call_fn(
            &c,
            SaveDigestSchedule {
                weekday: 1,
                hour: 9,
                timezone: "Europe/\u{0}Berlin".into(),
            },
        )
        .await;
    refused("digest_schedule", s, &b, "Time zone");

    assert_eq!(written(&pool).await, before, "a refused call wrote nothing");
}

#[tokio::test]
async fn a_year_postgresql_cannot_place_in_the_orgs_zone_is_a_422_naming_the_field_and_writes_nothing(
) {
    let (pool, app, c) = owner_app().await;
    let (status, body) = app
        .call_fn(
            &c,
            NewCampaign {
                name: "Launch".into(),
            },
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let id = json(&body).as_i64().expect("a campaign id").to_string();
    let before = written(&pool).await;

    // Posted as a form: the `+` must arrive as itself.
    for schedule in ["+12345-01-01T00:00", "-0044-03-15T12:00"] {
        let (s, b) = app
            .call_with(
                &c,
                "save_campaign",
                &[
                    ("id", id.as_str()),
                    ("version", "1"),
                    ("name", "Launch"),
                    ("subject", "Hello"),
                    ("body", "Hi"),
                    ("format", "markdown"),
                    ("schedule", schedule),
                ],
            )
            .await;
        refused(
            &format!("save_campaign {schedule}"),
            s,
            &b,
            "Scheduled time",
        );
        assert!(b.contains("out of range"), "{schedule}: {b}");
    }
    let (s, b) = app
        .call_fn(
            &c,
            Suppressions {
                q: None,
                after: Some("-5000-01-01T00:00:00|x".into()),
            },
        )
        .await;
    refused("suppressions", s, &b, "Page");

    assert_eq!(written(&pool).await, before, "a refused call wrote nothing");
}

#[tokio::test]
async fn a_value_of_100_kb_is_refused_naming_the_field_in_a_short_answer_and_writes_nothing() {
    let (pool, app, c) = owner_app().await;
    let before = written(&pool).await;
    let long = "x".repeat(100 * 1024);

    let (s, b) = app
        .call_fn(
            &c,
            Campaigns {
                status: long.clone(),
            },
        )
        .await;
    refused("campaigns", s, &b, "Status");
    let (s, b) = app.call_fn(&c, SaveBounceDomain { domain: long }).await;
    refused("save_bounce_domain", s, &b, "Bounce domain");

    assert_eq!(written(&pool).await, before, "a refused call wrote nothing");
}

#[tokio::test]
async fn ordinary_values_pass_the_same_rule() {
    let (pool, app, c) = owner_app().await;
    let (status, body) = app
        .call_fn(
            &c,
            AddSuppressions {
                addresses: "ann@example.org".into(),
            },
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = app
        .call_fn(
            &c,
            SaveDigestSchedule {
                weekday: 2,
                hour: 8,
                timezone: "Europe/Paris".into(),
            },
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let zone: String = sqlx::query_scalar("select timezone from orgs")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(zone, "Europe/Paris");
    let (status, body) = app
        .call_fn(
            &c,
            Suppressions {
                q: None,
                after: Some("2999-01-01T00:00:00.000000|zzz".into()),
            },
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body)["rows"][0]["email"], "ann@example.org", "{body}");
    let (status, body) = app
        .call_fn(
            &c,
            RemoveSuppression {
                email: "Ann@Example.org".into(),
            },
        )
        .await;
    assert_eq!(status, 200, "{body}");

    let (_, body) = app
        .call_fn(
            &c,
            NewCampaign {
                name: "Launch".into(),
            },
        )
        .await;
    let id = json(&body).as_i64().expect("a campaign id").to_string();
    let (status, body) = app
        .call_with(
            &c,
            "save_campaign",
            &[
                ("id", id.as_str()),
                ("version", "1"),
                ("name", "Launch"),
                ("subject", "Hello"),
                ("body", "Hi"),
                ("format", "markdown"),
                ("schedule", "9999-12-31T23:59"),
            ],
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = app
        .call_fn(
            &c,
            Campaigns {
                status: "draft".into(),
            },
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(json(&body).as_array().map(Vec::len), Some(1), "{body}");
}

#[tokio::test]
async fn a_nul_in_a_subscribers_email_or_name_through_the_api_is_a_422_problem_naming_the_field() {
    let pool = test_db().await;
    let acme = TestOrg::with_roles(&pool, "acme", &[Role::Owner]).await;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let t = token(&app, &owner, "crm", &[ApiScope::SubscribersWrite]).await;
    let before = written(&pool).await;

    for (body, field) in [
        (
            serde_json::json!({ "email": "ann\u{0}@example.org", "name": "Ann" }),
            "email",
        ),
        (
            serde_json::json!({ "email": "ann@example.org", "name": "A\u{0}nn" }),
            "name",
        ),
    ] {
        let (status, _, problem) =
            send(&app, "POST", "/api/v1/subscribers", Some(&t), Some(&body)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
        assert_eq!(problem["status"], 422, "{problem}");
        assert_eq!(
            problem["errors"][0]["pointer"],
            format!("#/{field}"),
            "{problem}"
        );
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(detail.starts_with(&format!("{field}: ")), "{problem}");
        assert!(
            !problem.to_string().contains("\\u0000"),
            "the NUL is quoted back: {problem}"
        );
    }

    // A value the body's schema refuses is quoted by the parser: cut short all the same.
    let body = serde_json::json!({ "email": "ann@example.org", "status": "x".repeat(100 * 1024) });
    let (status, _, problem) =
        send(&app, "POST", "/api/v1/subscribers", Some(&t), Some(&body)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{problem}");
    let size = problem.to_string().len();
    assert!(size < 5_000, "a {size} byte problem");

    assert_eq!(written(&pool).await, before, "a refused call wrote nothing");
}
