//! The campaign engine as real `mailroom worker` processes on one database and one SMTP server:
//! SIGKILLed mid-campaign again and again, paused, and cut off from the database.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use app::domain::{JobId, Transition};
use nix::sys::signal::Signal;
use sqlx::PgPool;

use crate::support::org::TestOrg;
use crate::support::procs::{wait_until, Proc};
use testkit::SmtpSink;

pub(crate) const CONNECTIONS: usize = 4;
pub(crate) const BATCH: usize = 20;

pub(crate) fn worker_args(sink: &SmtpSink, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "worker",
        "--smtp-host",
        "127.0.0.1",
        "--smtp-port",
        &sink.addr.port().to_string(),
        "--smtp-connections",
        &CONNECTIONS.to_string(),
        "--delivery-batch",
        &BATCH.to_string(),
        "--delivery-lease-seconds",
        "2",
        "--heartbeat-seconds",
        "1",
        "--leader-lease-seconds",
        "2",
        "--campaign-tick-seconds",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

pub(crate) fn start(name: &str, dir: &std::path::Path, args: &[String], url: &str) -> Proc {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Proc::start_with_env(name, dir, &args, &[("DATABASE_URL", url)])
}

pub(crate) fn campaign_status(rt: &tokio::runtime::Runtime, pool: &PgPool, id: i64) -> String {
    rt.block_on(
        sqlx::query_scalar("select status from campaigns where id = $1")
            .bind(id)
            .fetch_one(pool),
    )
    .unwrap()
}

/// How many `unknown` deliveries a run may end with: in all, and of those never sent.
pub(crate) struct Allowed {
    pub unknown: usize,
    pub never_arrived: usize,
}

/// Everything the database says against everything the sink got.
pub(crate) fn reconcile(
    rt: &tokio::runtime::Runtime,
    pool: &PgPool,
    org: i64,
    id: i64,
    recipients: usize,
    sink: &SmtpSink,
    allowed: Allowed,
) -> usize {
    let got = sink.messages();
    let ids: HashSet<String> = got.iter().map(|m| m.message_id()).collect();
    assert_eq!(
        ids.len(),
        got.len(),
        "a message reached the SMTP server twice"
    );
    let mut per_address: HashMap<String, usize> = HashMap::new();
    for m in &got {
        *per_address.entry(m.to[0].to_lowercase()).or_default() += 1;
    }
    assert!(
        per_address.values().all(|&k| k == 1),
        "an address got the campaign twice"
    );
    let rows: Vec<(String, String)> = rt
        .block_on(
            sqlx::query_as("select job_id, status from deliveries where campaign_id = $1")
                .bind(id)
                .fetch_all(pool),
        )
        .unwrap();
    let (mut unknown, mut unsent) = (0, 0);
    for (job, status) in &rows {
        let mid = format!(
            "Message-ID: {}",
            // No --message-id-domain: the org's From domain (news@example.org).
            job.parse::<JobId>().unwrap().message_id("example.org")
        );
        match status.as_str() {
            "delivered" => assert!(ids.contains(&mid), "{job} is delivered but never arrived"),
            "unknown" => {
                unknown += 1;
                unsent += usize::from(!ids.contains(&mid));
            }
            other => assert!(!ids.contains(&mid), "{job} is {other} but arrived"),
        }
    }
    // Two windows: a message marked but never sent (bounded by the marks ahead per connection)
    // and one that arrived while its outcome was still on its way to the database.
    eprintln!("{unknown} unknown, {unsent} of them never arrived");
    assert!(
        unknown <= allowed.unknown,
        "{unknown} unknown > {}",
        allowed.unknown
    );
    assert!(
        unsent <= allowed.never_arrived,
        "{unsent} unknown never arrived > {}",
        allowed.never_arrived
    );
    // Nobody skipped: one send per address, each handed off with exactly one delivery, each
    // delivery finished, and every recipient either delivered or (on purpose) unknown.
    let (sends, handed_off, with_one_delivery, open_deliveries): (i64, i64, i64, i64) = rt
        .block_on(
            sqlx::query_as(
                "select (select count(*) from sends where campaign_id = $1),
                        (select count(*) from sends where campaign_id = $1 and status = 'handed_off'),
                        (select count(*) from sends s where s.campaign_id = $1 and s.status = 'handed_off'
                           and (select count(*) from deliveries d where d.job_id = s.job_id) = 1),
                        (select count(*) from deliveries where campaign_id = $1 and status in ('queued', 'sending'))",
            )
            .bind(id)
            .fetch_one(pool),
        )
        .unwrap();
    assert_eq!(sends as usize, recipients, "one send per distinct address");
    assert_eq!(handed_off as usize, recipients, "every send handed off");
    assert_eq!(
        with_one_delivery, handed_off,
        "each with exactly one delivery"
    );
    assert_eq!(rows.len(), recipients, "no other delivery");
    assert_eq!(open_deliveries, 0, "every delivery finished");
    let delivered = rows.iter().filter(|(_, s)| s == "delivered").count();
    assert_eq!(
        delivered + unknown,
        recipients,
        "delivered or unknown, nothing else"
    );
    let open: i64 = rt
        .block_on(
            sqlx::query_scalar(
                "select count(*) from sends where campaign_id = $1 and status = 'queued'",
            )
            .bind(id)
            .fetch_one(pool),
        )
        .unwrap();
    assert_eq!(open, 0, "every send reached a terminal state");
    let (slots, counted) = rt.block_on(async {
        let mut c = pool.acquire().await.unwrap();
        let (org, id) = (app::domain::OrgId(org), app::domain::CampaignId(id));
        let slots = app::db::campaign::slots::progress(&mut c, org, id)
            .await
            .unwrap();
        (
            slots,
            app::db::campaign::slots::counted(&mut c, id).await.unwrap(),
        )
    });
    assert_eq!(slots, counted, "counter slots vs count(*)");
    eprintln!(
        "campaign tally: {} rows, {} at the sink, {unknown} unknown, {counted:?}",
        rows.len(),
        got.len()
    );
    unknown
}

/// Waits for the leader's reconcile of the finished campaign (workers still running) and
/// asserts the counter slots were already exact: kills, reaps and retries moved them right.
pub(crate) fn slots_were_exact(rt: &tokio::runtime::Runtime, pool: &PgPool, id: i64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let detail = loop {
        let found: Option<String> = rt
            .block_on(
                sqlx::query_scalar(
                    "select detail from leader_log where action = 'reconcile' and detail like $1",
                )
                .bind(format!("campaign={id} %"))
                .fetch_optional(pool),
            )
            .unwrap();
        if let Some(d) = found {
            break d;
        }
        assert!(
            Instant::now() < deadline,
            "the leader never reconciled the campaign"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(detail.contains("slots_differed=false"), "{detail}");
}

/// What the database and the workers say, for a campaign that did not finish.
pub(crate) fn report(
    rt: &tokio::runtime::Runtime,
    pool: &PgPool,
    id: i64,
    procs: &[Proc],
) -> String {
    let rows: Vec<(String, String, i64)> = rt
        .block_on(
            sqlx::query_as(
                "select 'send', status, count(*) from sends where campaign_id = $1 group by status
                 union all
                 select 'delivery', status || ' body_started=' || exists (
                            select 1 from delivery_marks m where m.job_id = d.job_id and m.attempt >= d.attempt)::text
                        || ' in_queue=' || exists (
                            select 1 from delivery_queue q where q.job_id = d.job_id)::text, count(*)
                 from deliveries d where campaign_id = $1 group by 1, 2",
            )
            .bind(id)
            .fetch_all(pool),
        )
        .unwrap_or_default();
    let mut out = format!("{rows:?}\n");
    for p in procs {
        let log = p.log_text();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        out.push_str(&format!("--- {}\n", p.log.display()));
        for line in tail.into_iter().rev() {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// A runtime, a pool, its URL, the org, an approved campaign and its distinct addresses.
pub(crate) fn setup(
    recipients: usize,
) -> (tokio::runtime::Runtime, PgPool, String, i64, i64, usize) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (pool, url) = rt.block_on(crate::support::helpers::migrated_db_with_url());
    let (org, id, n) = rt.block_on(async {
        let acme = TestOrg::new(&pool, "acme").await;
        let org = acme.id.0;
        let (lists, n) = acme.audience(recipients).await;
        (
            org,
            acme.campaign()
                .to(&lists)
                .body("Hello {{ name }}")
                .approved()
                .await
                .0,
            n,
        )
    });
    (rt, pool, url, org, id, n)
}

/// Guarantee 9: three workers, a random one SIGKILLed every few seconds and restarted,
/// until the campaign is sent; nobody gets it twice and nothing is lost.
#[test]
fn sigkill_a_random_worker_every_few_seconds_and_nobody_gets_the_campaign_twice() {
    let recipients: usize = std::env::var("CAMPAIGN_KILL_RECIPIENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    kill_again_and_again(recipients, &[], 1);
}

/// The same with each connection marking 5 messages ahead, and outcomes gathered for 20 ms
/// before each write: still nobody twice, and a killed worker leaves at most 5 never-sent
/// messages per connection `unknown` (the documented window).
#[test]
fn sigkill_with_marks_ahead_leaves_at_most_k_unknown_per_connection_and_no_duplicate() {
    let extra = [
        "--delivery-marks-ahead",
        "5",
        "--delivery-outcome-gather-ms",
        "20",
    ];
    kill_again_and_again(3000, &extra, 5);
}

/// Three workers (with `extra` arguments, marking `ahead` messages at a time) send a campaign of
/// `recipients`; a random one is SIGKILLed every 1.5 s and restarted until it is sent. Then
/// everything is reconciled. Per kill, at most `ahead` messages per connection are `unknown`
/// without having been sent, and at most a batch more arrived before their outcome was written.
fn kill_again_and_again(recipients: usize, extra: &[&str], ahead: usize) {
    let (rt, pool, url, org, id, n) = setup(recipients);
    let sink = kill_until_sent(&rt, &pool, &url, org, id, n, extra, ahead, &[]);
    drop(sink);
    close(rt, pool);
}

/// A campaign to a segment (the pro plan: every other subscriber row, case variants
/// included), its workers SIGKILLed from their first moments (the start's materialisation is
/// where the segment is evaluated) and on through the sending: each matching address gets
/// one message, and no other address any.
#[test]
fn sigkill_during_materialisation_and_sending_of_a_segment_campaign() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (pool, url) = rt.block_on(crate::support::helpers::migrated_db_with_url());
    let (org, id, n) = rt.block_on(async {
        let acme = TestOrg::new(&pool, "acme").await;
        let org = acme.id;
        acme.audience(4000).await;
        sqlx::query(
            "update subscribers set attributes = case when id % 2 = 0 then '{\"plan\": \"pro\"}'::jsonb
                                                      else '{}'::jsonb end
             where org_id = $1",
        )
        .bind(org)
        .execute(&pool)
        .await
        .unwrap();
        let def: app::domain::segment::Group = serde_json::from_value(serde_json::json!(
            {"op": "all", "children": [
                {"type": "attribute", "name": "plan", "test": {"op": "text_equals", "value": "pro"}}]}
        ))
        .unwrap();
        let mut c = pool.acquire().await.unwrap();
        let (pro, _) = app::segments::save(&mut c, org, None, None, "Pro", &def)
            .await
            .unwrap();
        let n: i64 = sqlx::query_scalar(
            "select count(distinct email_lower) from subscribers
             where org_id = $1 and attributes ->> 'plan' = 'pro'",
        )
        .bind(org)
        .fetch_one(&mut *c)
        .await
        .unwrap();
        let id = acme.campaign().and_segments(&[pro]).body("Hello {{ name }}").approved().await;
        (org.0, id.0, n as usize)
    });
    assert!(n > 1500 && n < 4000, "{n}");
    // Kills 0.2 s, 0.4 s, 0.6 s in (the start), then every 1.5 s.
    let sink = kill_until_sent(&rt, &pool, &url, org, id, n, &[], 1, &[200, 200, 200]);
    let pro: std::collections::HashSet<String> = rt
        .block_on(
            sqlx::query_scalar::<_, String>(
                "select email_lower from subscribers where org_id = $1 and attributes ->> 'plan' = 'pro'",
            )
            .bind(org)
            .fetch_all(&pool),
        )
        .unwrap()
        .into_iter()
        .collect();
    for m in sink.messages() {
        assert!(
            pro.contains(&m.to[0].to_lowercase()),
            "{} is not in the segment but got the campaign",
            m.to[0]
        );
    }
    close(rt, pool);
}

/// Three workers send campaign `id` while a random one is SIGKILLed (first after each of
/// `first_ms`, then every 1.5 s) and restarted until it is sent; then everything is
/// reconciled against the `n` distinct addresses it must reach. Returns the SMTP sink.
#[allow(clippy::too_many_arguments)]
pub(crate) fn kill_until_sent(
    rt: &tokio::runtime::Runtime,
    pool: &PgPool,
    url: &str,
    org: i64,
    id: i64,
    n: usize,
    extra: &[&str],
    ahead: usize,
    first_ms: &[u64],
) -> SmtpSink {
    let (rt, pool, url) = (rt, pool, url);
    let recipients = n;
    let sink = SmtpSink::start();
    let dir = crate::support::helpers::data_dir();
    let args = worker_args(&sink, extra);
    let mut procs: Vec<Proc> = (0..3)
        .map(|i| start(&format!("w{i}"), dir.path(), &args, url))
        .collect();
    let mut kills = 0;
    let deadline = Instant::now() + Duration::from_secs(300);
    while campaign_status(rt, pool, id) != "sent" {
        assert!(Instant::now() < deadline, "the campaign did not finish");
        let pause = first_ms.get(kills).copied().unwrap_or(1500);
        std::thread::sleep(Duration::from_millis(pause));
        if campaign_status(rt, pool, id) == "sent" {
            break;
        }
        let victim = rand::random::<usize>() % procs.len();
        procs[victim].signal(Signal::SIGKILL);
        procs[victim].wait_exit(10);
        kills += 1;
        procs[victim] = start(&format!("k{kills}"), dir.path(), &args, url);
    }
    slots_were_exact(rt, pool, id);
    for mut p in procs {
        p.signal(Signal::SIGTERM);
        p.wait_exit(60);
    }
    assert!(
        kills >= 2,
        "the campaign finished before the workers were killed: make it bigger"
    );
    let never_arrived = kills * CONNECTIONS * ahead;
    let allowed = Allowed {
        unknown: never_arrived + kills * BATCH,
        never_arrived,
    };
    let unknown = reconcile(rt, pool, org, id, n, &sink, allowed);
    eprintln!(
        "{kills} kills over {recipients} recipients ({CONNECTIONS} connections per worker, {extra:?}): \
         {unknown} unknown, {:.1} per kill",
        unknown as f64 / kills as f64
    );
    sink
}

/// Closes the pool inside the runtime (its connections need one to shut down).
pub(crate) fn close(rt: tokio::runtime::Runtime, pool: PgPool) {
    rt.block_on(async move {
        pool.close().await;
        drop(pool);
    });
}

/// Pause mid-campaign for 30 s with two workers: at most one message per connection arrives
/// after the pause committed, none during the rest of it; resume finishes without a duplicate.
#[test]
fn a_pause_stops_the_campaign_within_one_message_per_connection_and_resume_finishes_it() {
    let (rt, pool, url, org, id, n) = setup(3000);
    let sink = SmtpSink::start();
    let dir = crate::support::helpers::data_dir();
    // A rate limit keeps the campaign running long enough to pause it in the middle.
    let args = worker_args(&sink, &["--smtp-rate-per-second", "400"]);
    let procs: Vec<Proc> = (0..2)
        .map(|i| start(&format!("w{i}"), dir.path(), &args, &url))
        .collect();
    wait_until("a third of the campaign", 60, || {
        sink.messages().len() >= 1000
    });
    let change = |t: Transition| {
        rt.block_on(async {
            let mut c = pool.acquire().await.unwrap();
            app::db::campaign::states::change(
                &mut c,
                app::domain::OrgId(org),
                app::domain::CampaignId(id),
                t,
            )
            .await
            .unwrap();
        })
    };
    change(Transition::Pause);
    let at_pause = sink.messages().len();
    std::thread::sleep(Duration::from_secs(2));
    let settled = sink.messages().len();
    assert!(
        settled - at_pause <= 2 * CONNECTIONS,
        "{} arrived after the pause",
        settled - at_pause
    );
    std::thread::sleep(Duration::from_secs(28));
    assert_eq!(
        sink.messages().len(),
        settled,
        "mail arrived during the pause"
    );
    assert_eq!(campaign_status(&rt, &pool, id), "paused");
    change(Transition::Resume);
    wait_until("the campaign to finish", 120, || {
        campaign_status(&rt, &pool, id) == "sent"
    });
    slots_were_exact(&rt, &pool, id);
    for mut p in procs {
        p.signal(Signal::SIGTERM);
        p.wait_exit(60);
    }
    assert_eq!(sink.messages().len(), 3000);
    let none = Allowed {
        unknown: 0,
        never_arrived: 0,
    };
    reconcile(&rt, &pool, org, id, n, &sink, none);
    close(rt, pool);
}

/// The database kills every worker connection mid-campaign: the workers reconnect and finish.
#[test]
fn workers_whose_database_connections_are_terminated_reconnect_and_finish_without_duplicates() {
    let (rt, pool, url, org, id, n) = setup(3000);
    let sink = SmtpSink::start();
    let dir = crate::support::helpers::data_dir();
    let args = worker_args(&sink, &["--smtp-rate-per-second", "600"]);
    let procs: Vec<Proc> = (0..2)
        .map(|i| start(&format!("w{i}"), dir.path(), &args, &url))
        .collect();
    for target in [500, 1500] {
        wait_until("more of the campaign", 60, || {
            sink.messages().len() >= target
        });
        let killed: i64 = rt
            .block_on(
                sqlx::query_scalar(
                    "select count(*) from (select pg_terminate_backend(pid) from pg_stat_activity
                     where datname = current_database() and pid <> pg_backend_pid()) t",
                )
                .fetch_one(&pool),
            )
            .unwrap();
        assert!(killed > 0);
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    while campaign_status(&rt, &pool, id) != "sent" {
        if Instant::now() > deadline {
            panic!(
                "the campaign did not finish:\n{}",
                report(&rt, &pool, id, &procs)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    slots_were_exact(&rt, &pool, id);
    for mut p in procs {
        p.signal(Signal::SIGTERM);
        p.wait_exit(60);
    }
    // A connection cut after a body can leave that message `unknown`, never sent twice.
    let bound = 2 * 2 * (CONNECTIONS + BATCH);
    let allowed = Allowed {
        unknown: bound,
        never_arrived: bound,
    };
    reconcile(&rt, &pool, org, id, n, &sink, allowed);
    close(rt, pool);
}
