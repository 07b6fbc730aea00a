//! The database moves: a primary and a streaming standby of the test's own, `mailroom worker`
//! processes on a URL naming both hosts, the primary SIGKILLed mid-campaign and the standby
//! promoted. With a synchronous standby nothing the workers acted on is lost, so nobody gets
//! the campaign twice; with an asynchronous one the workers warned before the failover, and
//! what happened is recorded.
//!
//! A connection that freezes (a partition, a half-open TCP connection) costs its worker its
//! claims, never a duplicate.
//!
//! The campaign's size is `FAILOVER_RECIPIENTS` (CI: 6,000; `bench/failover.sh`: 30,000).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use app::domain::Durability;
use nix::sys::signal::Signal;
use sqlx::PgPool;

use crate::campaign::campaign_processes::{
    campaign_status, reconcile, report, slots_were_exact, start, worker_args, Allowed, BATCH,
    CONNECTIONS,
};
use crate::support::freezer::Freezer;
use crate::support::org::TestOrg;
use crate::support::pg_servers::{PgServer, Replication, DATABASE};
use crate::support::procs::{wait_until, Proc};
use crate::support::test_app::spawn_app;
use testkit::SmtpSink;

const WORKERS: usize = 3;

fn recipients() -> usize {
    std::env::var("FAILOVER_RECIPIENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6000)
}

#[test]
fn a_synchronous_standby_takes_over_mid_campaign_and_nobody_gets_it_twice() {
    fail_over_mid_campaign(Replication::Synchronous);
}

#[test]
fn an_asynchronous_standby_is_warned_about_before_it_takes_over() {
    fail_over_mid_campaign(Replication::Asynchronous);
}

/// What the dashboard and `/metrics` say of the durability, read from the primary.
async fn shown(pool: &PgPool, org: &TestOrg) -> (String, String) {
    let app = spawn_app(pool.clone()).await;
    let c = org.owner().signed_in(&app).await;
    let page = app.get_html(&c, "/deliveries").await;
    let metrics = reqwest::get(format!("{}/metrics", app.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    (page, metrics)
}

fn fail_over_mid_campaign(replication: Replication) {
    let n = recipients();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let primary = PgServer::primary(replication);
    // The asynchronous standby streams through a proxy that freezes before the primary dies:
    // it falls behind, as one over a slow network or under load does.
    let replication_path = (replication == Replication::Asynchronous)
        .then(|| Freezer::start(([127, 0, 0, 1], primary.port).into()));
    let standby = rt.block_on(PgServer::standby_of(
        &primary,
        replication_path.as_ref().map(|p| p.addr.port()),
    ));
    let pool = rt.block_on(primary.pool());
    rt.block_on(app::db::migrate::run(&pool, true)).unwrap();

    // The durability the primary reports, as Mailroom judges it and shows it.
    let reading = rt.block_on(app::db::health::replication(&pool)).unwrap();
    let expected = match replication {
        Replication::Synchronous => Durability::Synchronous,
        Replication::Asynchronous => Durability::Asynchronous,
    };
    assert_eq!(Durability::of(&reading), expected, "{reading:?}");
    let acme = rt.block_on(TestOrg::new(&pool, "acme"));
    let (page, metrics) = rt.block_on(shown(&pool, &acme));
    assert!(
        page.contains(&format!(r#"data-state="{expected}""#)),
        "{page}"
    );
    assert_eq!(
        page.contains("may be sent a second time"),
        replication == Replication::Asynchronous,
        "{page}"
    );
    assert!(
        metrics.contains(&format!(
            "mailroom_database_durability{{state=\"{expected}\"}} 1"
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("mailroom_database_standbys 1"),
        "{metrics}"
    );

    // A URL naming the standby first: Mailroom connects to the primary behind it.
    let both = |first: &PgServer, second: &PgServer| {
        format!(
            "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/{DATABASE}?target_session_attrs=read-write",
            first.port, second.port
        )
    };
    rt.block_on(async {
        let hosts = mailroom::ops::database::parse_url(&both(&standby, &primary)).unwrap();
        let found = mailroom::ops::database::connect_primary(hosts)
            .await
            .unwrap();
        let port: i32 = sqlx::query_scalar("select inet_server_port()")
            .fetch_one(&found)
            .await
            .unwrap();
        assert_eq!(port, i32::from(primary.port));
        found.close().await;
        // The standby alone is refused at once, saying so.
        let alone = mailroom::ops::database::parse_url(&standby.url()).unwrap();
        let refused = mailroom::ops::database::connect_primary(alone)
            .await
            .unwrap_err()
            .to_string();
        assert!(refused.contains("is a read-only standby"), "{refused}");
    });

    let id = rt.block_on(acme.approved_campaign_to_audience(n)).0 .0;
    let sink = SmtpSink::start();
    let dir = crate::support::helpers::data_dir();
    let args = worker_args(&sink, &[]);
    let url = both(&primary, &standby);
    let mut procs: Vec<Proc> = (0..WORKERS)
        .map(|i| start(&format!("w{i}"), dir.path(), &args, &url))
        .collect();
    // Each worker said what a failover would cost before it happened.
    let said = match replication {
        Replication::Synchronous => "durability=synchronous",
        Replication::Asynchronous => "the database's standbys are asynchronous",
    };
    for p in &mut procs {
        p.wait_log(said, 60);
    }

    wait_until("a quarter of the campaign", 120, || {
        sink.messages().len() >= n / 4
    });
    let mut behind = 0;
    if let Some(path) = &replication_path {
        let cut = sink.messages().len();
        path.freeze();
        std::thread::sleep(Duration::from_secs(1));
        behind = sink.messages().len() - cut;
    }
    primary.kill();
    let killed = Instant::now();
    let at_kill = sink.messages().len();
    // A while with no primary at all: the workers must wait, not crash.
    std::thread::sleep(Duration::from_secs(2));
    let before_promotion = sink.messages().len();
    standby.promote();
    let promoted = killed.elapsed();
    wait_until("mail sent through the new primary", 120, || {
        sink.messages().len() > before_promotion
    });
    let first_after = killed.elapsed();
    drop(pool);
    let pool = rt.block_on(standby.pool());
    let deadline = Instant::now() + Duration::from_secs(300);
    while campaign_status(&rt, &pool, id) != "sent" {
        if Instant::now() > deadline {
            panic!(
                "the campaign did not finish on the new primary:\n{}",
                report(&rt, &pool, id, &procs)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for p in &mut procs {
        assert!(
            p.child.try_wait().unwrap().is_none(),
            "a worker exited during the failover:\n{}",
            p.log_text()
        );
        p.wait_log("the database's primary moved", 30);
    }
    slots_were_exact(&rt, &pool, id);
    for mut p in procs {
        p.signal(Signal::SIGTERM);
        p.wait_exit(60);
    }
    eprintln!(
        "failover ({replication:?}, {n} recipients, {WORKERS} workers): {at_kill} sent at the kill, \
         {} more during the 2 s without a primary, promoted {:.1} s after the kill, first message \
         through the new primary {:.1} s after the kill",
        before_promotion - at_kill,
        promoted.as_secs_f64(),
        first_after.as_secs_f64()
    );
    match replication {
        // The loss of the primary is, to each worker, a loss of its connections: bounded as a
        // process kill is, per worker.
        Replication::Synchronous => {
            let never_arrived = WORKERS * CONNECTIONS;
            let allowed = Allowed {
                unknown: never_arrived + WORKERS * BATCH,
                never_arrived,
            };
            let unknown = reconcile(&rt, &pool, acme.id.0, id, n, &sink, allowed);
            eprintln!("failover (synchronous): {unknown} unknown");
        }
        // Recorded, not asserted: commits the standby never got can send a message again.
        Replication::Asynchronous => {
            let mut per_address: HashMap<String, usize> = HashMap::new();
            for m in sink.messages() {
                *per_address.entry(m.to[0].to_lowercase()).or_default() += 1;
            }
            let twice = per_address.values().filter(|&&k| k > 1).count();
            // A mark the standby got whose reply the kill lost is `unknown`, never sent: the
            // bound of the synchronous case.
            let missing = n - per_address.len();
            assert!(
                missing <= WORKERS * CONNECTIONS,
                "{missing} addresses never got the campaign"
            );
            eprintln!(
                "failover (asynchronous, the standby cut off 1 s before the kill while {behind} \
                 messages arrived): {twice} of {n} addresses got the campaign more than once"
            );
        }
    }
    rt.block_on(pool.close());
    drop(standby);
    drop(primary);
}

/// Two workers, one of them reaching the database through a proxy that freezes (accepts,
/// forwards nothing, never closes) for three times the delivery lease: the other worker takes
/// the frozen one's claims back and goes on, nothing is sent twice, and the frozen worker
/// sends again once the proxy thaws.
#[test]
fn a_worker_whose_database_connection_freezes_loses_its_claims_and_recovers_when_it_thaws() {
    let lease = 2; // worker_args' --delivery-lease-seconds
    let rt = tokio::runtime::Runtime::new().unwrap();
    let db = PgServer::primary(Replication::Asynchronous);
    let pool = rt.block_on(db.pool());
    rt.block_on(app::db::migrate::run(&pool, true)).unwrap();
    let acme = rt.block_on(TestOrg::new(&pool, "acme"));
    let (id, n) = rt.block_on(acme.approved_campaign_to_audience(3000));
    let proxy = Freezer::start(([127, 0, 0, 1], db.port).into());
    let sink = SmtpSink::start();
    let dir = crate::support::helpers::data_dir();
    let args = worker_args(&sink, &["--smtp-rate-per-second", "200"]);
    let through_proxy = format!("postgres://postgres@{}/{DATABASE}", proxy.addr);
    let mut procs = vec![
        start("frozen", dir.path(), &args, &through_proxy),
        start("direct", dir.path(), &args, &db.url()),
    ];
    let frozen_holder = format!("%:{}:%", procs[0].child.id());
    let held_by_frozen = |pool: &PgPool| -> i64 {
        rt.block_on(
            sqlx::query_scalar(
                "select count(*) from delivery_claims c where c.holder like $1
                   and exists (select 1 from unnest(c.job_ids, c.attempts) x(job_id, attempt)
                               join deliveries d on d.job_id = x.job_id and d.attempt = x.attempt - 1
                               where d.status = 'queued')",
            )
            .bind(&frozen_holder)
            .fetch_one(pool),
        )
        .unwrap()
    };
    // Frozen while it holds mail.
    wait_until(
        "the proxied worker holding claims mid-campaign",
        120,
        || sink.messages().len() >= n / 5 && held_by_frozen(&pool) > 0,
    );
    proxy.freeze();
    let frozen_at = Instant::now();
    let at_freeze = sink.messages().len();
    wait_until("the frozen worker's claims taken back", 150, || {
        held_by_frozen(&pool) == 0
    });
    let taken_back = frozen_at.elapsed();
    assert!(
        sink.messages().len() > at_freeze,
        "the other worker went on sending"
    );
    // The other worker stops (giving back what it holds): the rest of the campaign can only
    // go through the frozen one once it thaws.
    procs[1].signal(Signal::SIGTERM);
    procs[1].wait_exit(60);
    std::thread::sleep(Duration::from_secs(3 * lease).saturating_sub(frozen_at.elapsed()));
    let frozen_for = frozen_at.elapsed();
    proxy.thaw();
    let at_thaw = sink.messages().len();
    let deadline = Instant::now() + Duration::from_secs(180);
    while campaign_status(&rt, &pool, id.0) != "sent" {
        if Instant::now() > deadline {
            panic!(
                "the thawed worker did not finish the campaign:\n{}",
                report(&rt, &pool, id.0, &procs)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let thawed_sent = sink.messages().len() - at_thaw;
    assert!(
        thawed_sent > 0,
        "the campaign was sent before the thaw: make it bigger"
    );
    assert!(
        procs[0].child.try_wait().unwrap().is_none(),
        "the frozen worker exited:\n{}",
        procs[0].log_text()
    );
    slots_were_exact(&rt, &pool, id.0);
    procs[0].signal(Signal::SIGTERM);
    procs[0].wait_exit(60);
    // The frozen worker lost what it held, as a killed one does.
    let never_arrived = CONNECTIONS;
    let allowed = Allowed {
        unknown: never_arrived + BATCH,
        never_arrived,
    };
    let unknown = reconcile(&rt, &pool, acme.id.0, id.0, n, &sink, allowed);
    eprintln!(
        "frozen database connection: claims taken back {:.1} s into a {:.1} s freeze \
         (lease {lease} s), {thawed_sent} sent after the thaw by the thawed worker alone, {unknown} unknown",
        taken_back.as_secs_f64(),
        frozen_for.as_secs_f64()
    );
    rt.block_on(pool.close());
}
