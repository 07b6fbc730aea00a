//! The live progress stream of a campaign page, over real HTTP against a real database: a full
//! reading on connect, a new one when any replica notifies, a periodic re-read when a
//! notification is lost, tenancy, and an end at shutdown.

use std::time::Duration;

use app::domain::progress::Progress;
use app::domain::Role;

use crate::support::helpers::test_db;
use crate::support::org::TestOrg;
use crate::support::test_app::{client, spawn_app, TestApp};

/// Reads server-sent events from a streaming response.
struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    /// The next `progress` event's reading; `None` when the stream ended. Panics after `secs`.
    async fn next(&mut self, secs: u64) -> Option<Progress> {
        tokio::time::timeout(Duration::from_secs(secs), async {
            loop {
                if let Some(end) = self.buffer.find("\n\n") {
                    let event: String = self.buffer.drain(..end + 2).collect();
                    let data = event.lines().find_map(|l| l.strip_prefix("data: "));
                    if event.lines().any(|l| l == "event: progress") {
                        return Some(serde_json::from_str(data.unwrap()).unwrap());
                    }
                    continue; // a heartbeat comment
                }
                let chunk = self.response.chunk().await.unwrap()?;
                self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no progress event within {secs}s"))
    }
}

async fn open(c: &reqwest::Client, app: &TestApp, id: i64) -> reqwest::Response {
    c.get(format!("{}/api/campaigns/{id}/progress", app.base))
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_campaign_page_streams_every_replicas_progress_and_rereads_when_a_notification_is_lost() {
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let others = TestOrg::with_roles(&pool, "other", &[Role::Owner]).await;
    let (lists, _) = acme.audience(30).await;
    let id = acme.campaign().to(&lists).approved().await.0;
    mailroom::workers::campaign::start_due(&pool).await.unwrap();
    let app = spawn_app(pool.clone()).await;

    // Not signed in: refused; another organisation's campaign looks missing.
    let anonymous = client(&app);
    assert_eq!(open(&anonymous, &app, id).await.status(), 401);
    let stranger = others.owner().signed_in(&app).await;
    assert_eq!(open(&stranger, &app, id).await.status(), 404);

    let c = acme.admin(0).signed_in(&app).await;
    let response = open(&c, &app, id).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let mut events = Events {
        response,
        buffer: String::new(),
    };
    // A full reading on connect.
    let first = events.next(5).await.unwrap();
    assert_eq!(
        (first.status.as_str(), first.total, first.queued),
        ("sending", 30, 30)
    );

    // Another replica hands recipients off and notifies after its commit (as its notifier
    // does): the page hears of it before any periodic re-read (every 5 s) could have run.
    let h = app::db::campaign::sends::hand_off(&pool, 10, 0, 8)
        .await
        .unwrap();
    assert_eq!(h.handed_off, 10);
    app::db::campaign::states::notify_progress(
        &pool,
        mailroom::workers::progress::CHANNEL,
        &[app::domain::CampaignId(id)],
    )
    .await
    .unwrap();
    let moved = events.next(3).await.unwrap();
    assert_eq!((moved.queued, moved.in_flight()), (20, 10));
    assert!(moved.at_ms >= first.at_ms);

    // A change whose notification was lost still reaches the page, by the periodic re-read.
    sqlx::query("update progress_slots set delivered = delivered + 4 where campaign_id = $1 and slot = (select min(slot) from progress_slots where campaign_id = $1)")
        .bind(id)
        .execute(&pool)
        .await
        .unwrap();
    let reread = events.next(8).await.unwrap();
    assert_eq!(reread.delivered, 4);

    // The replica's LISTEN connection is killed: it reconnects, and notifications reach the
    // page again (well before the next periodic re-read).
    let killed: i64 = sqlx::query_scalar(
        "select count(*) from (select pg_terminate_backend(pid) from pg_stat_activity
         where datname = current_database() and query ilike 'listen%') t",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(killed, 1, "one LISTEN connection per replica");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let listening = loop {
        let n: i64 = sqlx::query_scalar(
            "select count(*) from pg_stat_activity where datname = current_database() and query ilike 'listen%'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if n == 1 || std::time::Instant::now() > deadline {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(listening, 1, "the listener came back");
    // Drain what the reconnect's re-read may have sent, then a notified change arrives promptly.
    let h = app::db::campaign::sends::hand_off(&pool, 5, 0, 8)
        .await
        .unwrap();
    assert_eq!(h.handed_off, 5);
    app::db::campaign::states::notify_progress(
        &pool,
        mailroom::workers::progress::CHANNEL,
        &[app::domain::CampaignId(id)],
    )
    .await
    .unwrap();
    let after = events.next(3).await.unwrap();
    assert_eq!(after.queued, 15, "{after:?}");

    // A server shutting down ends the stream instead of waiting for the browser.
    app.stop.send(true).unwrap();
    assert_eq!(events.next(5).await, None);
}

/// One session holds at most `MAX_STREAMS_PER_SESSION` streams on a replica (429 past it, with
/// Retry-After); closing one frees its place, and another session is not affected.
#[tokio::test]
async fn a_session_holds_a_bounded_number_of_progress_streams() {
    use mailroom::http::progress_stream::MAX_STREAMS_PER_SESSION;
    let pool = test_db().await;
    let acme = TestOrg::new(&pool, "acme").await;
    let (lists, _) = acme.audience(3).await;
    let id = acme.campaign().to(&lists).approved().await.0;
    let app = spawn_app(pool.clone()).await;
    let c = acme.admin(0).signed_in(&app).await;
    let mut held = Vec::new();
    for _ in 0..MAX_STREAMS_PER_SESSION {
        let r = open(&c, &app, id).await;
        assert_eq!(r.status(), 200);
        held.push(r);
    }
    let refused = open(&c, &app, id).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(refused.headers()["retry-after"], "30");
    assert!(refused
        .text()
        .await
        .unwrap()
        .contains("live progress views open"));
    // Another session of the same org is counted on its own.
    let other = acme.owner().signed_in(&app).await;
    let r = open(&other, &app, id).await;
    assert_eq!(r.status(), 200);
    // A closed stream frees its place (once the server notices the connection is gone).
    drop(held.pop());
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let r = open(&c, &app, id).await;
        if r.status() == 200 {
            break;
        }
        assert_eq!(r.status(), 429);
        assert!(
            std::time::Instant::now() < deadline,
            "the closed stream's place never came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
