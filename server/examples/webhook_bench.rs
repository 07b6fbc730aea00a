//! Relay webhook intake: events recorded per second by one `mailroom serve`, posted by
//! `concurrency` clients as the generic relay (Standard Webhooks signatures), first one event
//! per request, then `batch` events per request. Each event is a hard bounce naming one of the
//! org's delivered messages by its Message-ID, so every request runs the whole path: verify,
//! match, insert, suppress, commit. Besides events/s (wall clock), the replica's and
//! PostgreSQL's CPU per 1,000 events; afterwards every event is checked to be recorded once.
//!
//! Then the same number of DSNs mailed over SMTP to the replica's `--bounce-listen` from 20
//! connections, each to its message's VERP envelope sender: parsed, matched by the token,
//! recorded and suppressed before the 250.
//!
//! Run through `bench/webhooks.sh`. Usage: webhook_bench <mailroom binary> [events=20000]
//! [batch=100] [concurrency=16]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sqlx::PgPool;

use app::domain::{DeliveryStatus, EmailAddress, EventSource, JobId};
use mailroom::embedded_pg::{self, EmbeddedPg};

#[path = "support/mod.rs"]
mod support;
use support::free_port;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const ENDPOINT: &str = "bench-endpoint-0001";
const BOUNCE_DOMAIN: &str = "bounce.bench.example";
const DSN_CONNECTIONS: usize = 20;

/// `n` delivered messages of one org (the product's demo path): their job ids.
async fn seed(pool: &PgPool, org: i64, n: usize) -> anyhow::Result<Vec<JobId>> {
    let mut tx = pool.begin().await?;
    let mut jobs = Vec::with_capacity(n);
    for i in 0..n {
        let to = EmailAddress::parse(&format!("p{i}@example.org"))?;
        let job = JobId::test(1, 1, "bench", &to)?;
        let d = app::db::demo::DemoDelivery {
            job: &job,
            recipient: &to,
            status: DeliveryStatus::Delivered,
            attempt: 1,
            last_error: None,
            smtp_reply: Some("250 2.0.0 queued"),
        };
        app::db::demo::delivery(&mut tx, org, d).await?;
        jobs.push(job);
    }
    app::db::reports::create_endpoint(&mut tx, org, ENDPOINT, EventSource::Generic, SECRET).await?;
    tx.commit().await?;
    Ok(jobs)
}

/// Posts `requests` (each a list of job indexes) with `concurrency` clients; the database
/// clock signs them. Returns the wall time.
async fn post_all(
    url: &str,
    pool: &PgPool,
    jobs: Arc<Vec<JobId>>,
    requests: Vec<Vec<usize>>,
    concurrency: usize,
    round: &str,
) -> anyhow::Result<Duration> {
    let now: i64 = sqlx::query_scalar("select extract(epoch from now())::bigint")
        .fetch_one(pool)
        .await?;
    let queue = Arc::new(std::sync::Mutex::new(requests));
    let client = reqwest::Client::new();
    let started = Instant::now();
    let workers = (0..concurrency).map(|_| {
        let (queue, jobs, client, url, round) = (
            queue.clone(),
            jobs.clone(),
            client.clone(),
            url.to_string(),
            round.to_string(),
        );
        tokio::spawn(async move {
            loop {
                let Some(batch) = queue.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.pop()
                else {
                    return anyhow::Ok(());
                };
                let events: Vec<serde_json::Value> = batch
                    .iter()
                    .map(|&i| {
                        serde_json::json!({
                            "id": format!("{round}-{i}"), "type": "hard_bounce",
                            "recipient": format!("p{i}@example.org"),
                            "message_id": jobs[i].message_id("bench.example"),
                            "status": "5.1.1", "diagnostic": "550 5.1.1 no such user",
                        })
                    })
                    .collect();
                let body = serde_json::to_vec(&serde_json::json!({ "events": events }))?;
                let id = format!("{round}-{}", batch[0]);
                let sig = app::bounce::generic::sign(SECRET, &id, now, &body).context("signing")?;
                let r = client
                    .post(&url)
                    .header("webhook-id", id)
                    .header("webhook-timestamp", now.to_string())
                    .header("webhook-signature", sig)
                    .body(body)
                    .send()
                    .await?;
                if !r.status().is_success() {
                    bail!("{}: {}", r.status(), r.text().await?);
                }
            }
        })
    });
    for w in futures::future::join_all(workers).await {
        w??;
    }
    Ok(started.elapsed())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let bin = args
        .get(1)
        .context("usage: webhook_bench <mailroom binary> [events] [batch] [concurrency]")?;
    let events: usize = args.get(2).map_or(Ok(20_000), |s| s.parse())?;
    let batch: usize = args.get(3).map_or(Ok(100), |s| s.parse())?;
    let concurrency: usize = args.get(4).map_or(Ok(16), |s| s.parse())?;
    let data = tempfile::Builder::new()
        .prefix("mrwhbench")
        .tempdir_in("/tmp")?;
    let pg = EmbeddedPg::open(data.path(), embedded_pg::Options::default()).await?;
    let pool = mailroom::ops::database::connect(pg.connect_options(embedded_pg::DATABASE)).await?;
    app::db::migrate::run(&pool, true).await?;
    let (org, _) =
        support::org_with_admins(&pool, "bench", "a@bench.example", "x-password-1").await?;
    let t = Instant::now();
    // Three rounds of `events` distinct events, each naming a distinct delivery.
    let jobs = Arc::new(seed(&pool, org, events * 3).await?);
    {
        let mut conn = pool.acquire().await?;
        app::db::reports::save_bounce_domain(&mut conn, org, Some(BOUNCE_DOMAIN)).await?;
    }
    println!(
        "seeded {} delivered messages in {:.1}s (not measured)",
        events * 3,
        t.elapsed().as_secs_f64()
    );
    let postmaster = support::postmaster_pid(data.path())?;
    let port = free_port()?;
    let smtp_port = free_port()?;
    let mut replica = Command::new(bin)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--bounce-listen",
            &format!("127.0.0.1:{smtp_port}"),
            "--data-dir",
        ])
        .arg(data.path())
        .args(["--site-root", "target/site"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(
            "/tmp/bench-webhooks-serve.log",
        )?))
        .spawn()?;
    let origin = format!("http://127.0.0.1:{port}");
    let url = format!("{origin}/hooks/v1/generic/{ENDPOINT}");
    let outcome = async {
        support::ready(&origin, Duration::from_secs(60)).await?;
        for (round, per_request, range) in [
            ("single", 1, 0..events),
            ("batched", batch, events..events * 2),
        ] {
            let indexes: Vec<usize> = range.collect();
            let requests: Vec<Vec<usize>> = indexes.chunks(per_request).map(<[usize]>::to_vec).collect();
            let n = requests.len();
            let before = support::cpu_seconds(replica.id(), postmaster);
            let took = post_all(&url, &pool, jobs.clone(), requests, concurrency, round).await?;
            let after = support::cpu_seconds(replica.id(), postmaster);
            let per = |c: f64| c * 1000.0 * 1000.0 / events as f64;
            println!(
                "{round:>7}: {events} events in {n} requests of {per_request}, {concurrency} clients: {:.0} events/s, {:.0} requests/s; CPU ms per 1,000 events: replica {:.0}, PostgreSQL {:.0}",
                events as f64 / took.as_secs_f64(),
                n as f64 / took.as_secs_f64(),
                per(after.0 - before.0),
                per(after.1 - before.1),
            );
        }
        let key = app::signing::Purpose::Verp.key(&pool).await?;
        let mail: Vec<(String, String)> = (events * 2..events * 3)
            .map(|i| {
                let rcpt = app::verp::address(&key, org, &jobs[i], BOUNCE_DOMAIN)
                    .context("a VERP address")?;
                let report = testkit::reports::dsn(&format!("bench-{i}"), &rcpt, &format!("p{i}@example.org"), "5.1.1", None);
                anyhow::Ok((rcpt, report))
            })
            .collect::<anyhow::Result<_>>()?;
        let addr: std::net::SocketAddr = format!("127.0.0.1:{smtp_port}").parse()?;
        let before = support::cpu_seconds(replica.id(), postmaster);
        let started = Instant::now();
        let senders = (0..DSN_CONNECTIONS).map(|k| {
            let part: Vec<(String, String)> = mail.iter().skip(k).step_by(DSN_CONNECTIONS).cloned().collect();
            tokio::spawn(async move {
                let mut c = testkit::ReportClient::connect(addr).await?;
                for (rcpt, data) in &part {
                    let codes = c.send(rcpt, data).await?;
                    if codes != (250, 250) {
                        bail!("a DSN was answered {codes:?}");
                    }
                }
                c.quit().await?;
                anyhow::Ok(())
            })
        });
        for s in futures::future::join_all(senders).await {
            s??;
        }
        let took = started.elapsed();
        let after = support::cpu_seconds(replica.id(), postmaster);
        let per = |c: f64| c * 1000.0 * 1000.0 / events as f64;
        println!(
            " mailed: {events} DSNs over SMTP, {DSN_CONNECTIONS} connections: {:.0} DSNs/s; CPU ms per 1,000 DSNs: replica {:.0}, PostgreSQL {:.0}",
            events as f64 / took.as_secs_f64(),
            per(after.0 - before.0),
            per(after.1 - before.1),
        );
        let (recorded, distinct, suppressed): (i64, i64, i64) = sqlx::query_as(
            "select (select count(*) from delivery_events), (select count(distinct job_id) from delivery_events),
                    (select count(*) from suppressions where reason = 'hard_bounce')",
        )
        .fetch_one(&pool)
        .await?;
        println!("recorded {recorded} events for {distinct} deliveries; {suppressed} addresses suppressed");
        if recorded != (events * 3) as i64 || distinct != recorded || suppressed != recorded {
            bail!("every event should be recorded once, each on its own delivery");
        }
        anyhow::Ok(())
    }
    .await;
    let stopped = support::stop(&mut replica).map(drop);
    pool.close().await;
    pg.shutdown().await?;
    outcome.and(stopped)
}
