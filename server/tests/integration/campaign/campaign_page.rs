//! The campaign page as the server renders it, in each phase of a send: a note before it
//! starts (no empty live panel), the live bar with the rate, ETA and a chart with its scale
//! while it sends, and a summary of the whole send once it is sent.

use app::api::campaign::edit::{CampaignAction, NewCampaign};
use app::api::campaign::CampaignDetail;

use crate::support::fixtures::run_to_end;
use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::test_app::{json, marked, spawn_app, TestApp};
use testkit::SmtpSink;

async fn page(app: &TestApp, c: &reqwest::Client, id: i64) -> String {
    app.get_html(c, &format!("/campaigns/{id}")).await
}

#[tokio::test]
async fn the_campaign_page_shows_each_phase_of_a_send_as_it_is() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let org = acme.id.0;
    sqlx::query("update orgs set timezone = 'UTC' where id = $1")
        .bind(org)
        .execute(&pool)
        .await
        .unwrap();
    let (lists, _) = acme.audience(6).await;
    let app = spawn_app(pool.clone()).await;
    let admin = acme.admin(0).signed_in(&app).await;

    // A draft: a note, no live panel, no rate.
    let (_, body) = app
        .call_fn(
            &admin,
            NewCampaign {
                name: "Draft one".into(),
            },
        )
        .await;
    let draft = json(&body).as_i64().unwrap();
    let html = page(&app, &admin, draft).await;
    assert!(marked(&html, "not-started")
        .unwrap()
        .contains("Not sent yet"));
    for absent in ["progress-bar", "rate", "eta", "rate-chart", "send-summary"] {
        assert!(marked(&html, absent).is_none(), "a draft shows {absent}");
    }

    // Sending: the bar, the current rate and ETA, and a chart with both scales.
    let id = acme.campaign().to(&lists).approved().await.0;
    mailroom::workers::campaign::start_due(&pool).await.unwrap();
    let html = page(&app, &admin, id).await;
    assert!(marked(&html, "not-started").is_none());
    assert_eq!(
        marked(&html, "progress-summary").unwrap(),
        "0 of 6 recipients done"
    );
    for present in ["progress-bar", "rate", "eta", "rate-chart", "time-axis"] {
        assert!(
            html.contains(&format!("data-test=\"{present}\"")),
            "no {present}"
        );
    }
    assert_eq!(marked(&html, "rate-axis-top").unwrap(), "0.0 msg/s");
    assert!(html.contains("0 msg/s") && html.contains(">now<"));
    assert!(marked(&html, "send-summary").is_none());

    // Sent: the whole send summed up; no instantaneous rate or ETA any more.
    let sink = SmtpSink::start();
    run_to_end(&pool, id, &sink).await;
    sqlx::query(
        "update campaigns set started_at = '2026-07-01T10:00:00Z', finished_at = '2026-07-01T10:00:03Z'
         where id = $1",
    )
    .bind(id)
    .execute(&pool)
    .await
    .unwrap();
    let html = page(&app, &admin, id).await;
    assert_eq!(
        marked(&html, "progress-summary").unwrap(),
        "6 of 6 recipients done"
    );
    assert_eq!(marked(&html, "count-delivered").unwrap(), "6");
    assert_eq!(marked(&html, "started").unwrap(), "2026-07-01 10:00");
    assert_eq!(marked(&html, "finished").unwrap(), "2026-07-01 10:00");
    assert_eq!(marked(&html, "duration").unwrap(), "3 s");
    assert_eq!(marked(&html, "average-rate").unwrap(), "2.0 msg/s");
    for absent in ["rate", "eta", "rate-chart", "not-started"] {
        assert!(
            marked(&html, absent).is_none(),
            "a sent campaign shows {absent}"
        );
    }
}

/// After a campaign went through its workflow (submitted by its author, approved by another
/// admin) and sent N messages, its page shows one delivered figure: the relay-reports card's is
/// the live panel's, N. (That the card follows the panel while a page stays open, and that an
/// action's flash goes once the campaign moves on, is the browser tests' `progress` and
/// `workflow` specs.)
#[tokio::test]
async fn a_sent_campaign_shows_one_delivered_figure() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let (lists, _) = acme.audience(7).await;
    let app = spawn_app(pool.clone()).await;
    let owner = acme.owner().signed_in(&app).await;
    let admin = acme.admin(0).signed_in(&app).await;
    let (id, _) = app
        .markdown_draft(&owner, "Hello {{ name }}", "Dear {{ name }}, news.", lists)
        .await;
    let act = |verb: &str| CampaignAction {
        id,
        verb: app::domain::Transition::from_verb(verb).unwrap(),
        version: 2,
        reason: String::new(),
    };
    let (_, body) = app.call_fn(&owner, act("submit")).await;
    assert_eq!(json(&body), "Campaign submitted.");
    let (_, body) = app.call_fn(&admin, act("approve")).await;
    assert_eq!(json(&body), "Campaign approved.");
    mailroom::workers::campaign::start_due(&pool).await.unwrap();
    let sink = SmtpSink::start();
    run_to_end(&pool, id, &sink).await;

    let n: i64 = sqlx::query_scalar(
        "select count(*) from deliveries where campaign_id = $1 and kind = 'campaign' and status = 'delivered'",
    )
    .bind(id)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(n > 0);
    let n = n.to_string();
    let html = page(&app, &owner, id).await;
    assert_eq!(marked(&html, "campaign-status").as_deref(), Some("sent"));
    assert_eq!(
        marked(&html, "count-delivered").as_deref(),
        Some(n.as_str())
    );
    assert_eq!(
        marked(&html, "reports-delivered").as_deref(),
        Some(n.as_str()),
        "the card's delivered figure is the live panel's"
    );

    // The page's data says the same: one delivered figure.
    let (status, body) = app.call_fn(&owner, CampaignDetail { id }).await;
    assert_eq!(status, 200, "{body}");
    let d = json(&body);
    assert_eq!(d["bounces"]["delivered"], d["progress"]["delivered"], "{d}");
    assert_eq!(d["progress"]["delivered"].to_string(), n, "{d}");
}
