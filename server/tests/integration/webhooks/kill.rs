//! Events out under SIGKILL: `mailroom worker` processes send a campaign and its webhooks while
//! a random one is killed every few seconds. Every outcome the database committed reaches the
//! endpoint at least once, and the endpoint hears of no state the database did not commit.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use app::domain::WebhookEventType;
use nix::sys::signal::Signal;

use super::receiver::{Act, Receiver};
use crate::campaign::campaign_processes::{close, kill_until_sent, setup, start, worker_args};
use crate::support::procs::wait_until;

#[test]
fn sigkilled_workers_report_every_committed_outcome_and_nothing_else() {
    // CI runs a small campaign; bench/webhooks-kill.sh runs 50,000 with the same code and checks.
    let recipients: usize = std::env::var("WEBHOOK_KILL_RECIPIENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let (rt, pool, url, org, id, n) = setup(recipients);
    // One answer in ten is a 503, so retries run through the kills too.
    let receiver = rt.block_on(Receiver::start(|_, _| {
        if rand::random::<u8>() < 26 {
            Act::status(503)
        } else {
            Act::ok()
        }
    }));
    let endpoint = rt.block_on(async {
        let owner: i64 =
            sqlx::query_scalar("select id from users where org_id = $1 order by id limit 1")
                .bind(org)
                .fetch_one(&pool)
                .await
                .unwrap();
        let mut conn = pool.acquire().await.unwrap();
        app::db::webhooks_out::create(
            &mut conn,
            org,
            Some(owner),
            &receiver.url("/events"),
            &[
                WebhookEventType::MessageDelivered,
                WebhookEventType::MessageFailed,
                WebhookEventType::MessageUnknown,
                WebhookEventType::CampaignSent,
            ],
            &app::webhook::new_secret(),
            app::domain::webhook::WEBHOOK_MAX_IN_FLIGHT,
        )
        .await
        .unwrap()
    });
    let extra = ["--webhook-allow-private", "--webhook-timeout-seconds", "5"];
    let sink = kill_until_sent(&rt, &pool, &url, org, id, n, &extra, 1, &[]);
    // The last worker finishes the webhooks the killed ones left.
    let dir = crate::support::helpers::data_dir();
    let mut last = start(
        "webhooks-last",
        dir.path(),
        &worker_args(&sink, &extra),
        &url,
    );
    let pending = || -> i64 {
        rt.block_on(
            sqlx::query_scalar(
                "select count(*) from webhook_out_messages where endpoint_id = $1 and status = 'pending'",
            )
            .bind(endpoint)
            .fetch_one(&pool),
        )
        .unwrap()
    };
    // Retries of 503s back off (5 s, 10 s, 20 s …): one event in ten is refused, so among a few
    // thousand events one refused five times running (155 s of back-off) turns up in a few runs
    // in a hundred, six times (315 s) in a few in a thousand. A large run needs longer still.
    let patience = (n as u64 / 100).max(600);
    wait_until("every webhook delivered", patience, || pending() == 0);
    last.signal(Signal::SIGTERM);
    last.wait_exit(60);

    let committed: BTreeMap<String, (String, i32)> = rt
        .block_on(
            sqlx::query_as::<_, (String, String, i32)>(
                "select job_id, status, attempt from deliveries
                 where campaign_id = $1 and status in ('delivered', 'failed', 'unknown')",
            )
            .bind(id)
            .fetch_all(&pool),
        )
        .unwrap()
        .into_iter()
        .map(|(j, s, a)| (j, (s, a)))
        .collect();
    assert!(
        committed.len() >= n / 2,
        "the campaign was sent: {}",
        committed.len()
    );
    let mut heard: BTreeSet<(String, String, i64)> = BTreeSet::new();
    let mut ids: BTreeMap<(String, String, i64), BTreeSet<String>> = BTreeMap::new();
    let mut sent = BTreeSet::new();
    for g in receiver.requests() {
        let body: serde_json::Value = serde_json::from_str(&g.body).unwrap();
        if body["type"] == "campaign.sent" {
            super::events_out::assert_documented(&body);
            assert_eq!(body["data"]["campaign_id"], id);
            sent.insert(g.id().to_owned());
            continue;
        }
        let job = body["data"]["job_id"].as_str().unwrap().to_owned();
        let kind = body["type"]
            .as_str()
            .unwrap()
            .trim_start_matches("message.")
            .to_owned();
        let attempt = body["data"]["attempt"].as_i64().unwrap();
        let key = (job.clone(), kind.clone(), attempt);
        ids.entry(key.clone())
            .or_default()
            .insert(g.id().to_owned());
        // Nothing is reported that the database does not hold.
        assert_eq!(
            committed
                .get(&job)
                .map(|(s, a)| (s.as_str(), i64::from(*a))),
            Some((kind.as_str(), attempt)),
            "{job} was reported {kind} (attempt {attempt})"
        );
        if g.answered.is_some_and(|s| s == 200) {
            heard.insert(key);
        }
    }
    for (job, (status, attempt)) in &committed {
        assert!(
            heard.contains(&(job.clone(), status.clone(), i64::from(*attempt))),
            "{job} is {status} but its event never reached the endpoint"
        );
    }
    assert_eq!(sent.len(), 1, "the campaign's end is one event");
    assert!(
        ids.values().all(|i| i.len() == 1),
        "one webhook-id per event, however often it was sent"
    );
    let requests = receiver.requests().len();
    eprintln!(
        "{} outcomes over {recipients} recipients: {requests} webhook requests, {} events",
        committed.len(),
        heard.len()
    );
    drop(sink);
    std::thread::sleep(Duration::from_millis(10));
    close(rt, pool);
}
