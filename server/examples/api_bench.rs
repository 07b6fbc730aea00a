//! The REST API against one `mailroom serve` (release) on its embedded PostgreSQL:
//! - bulk upsert: `rows` new subscribers in requests of 10,000 (then the same rows again, as
//!   updates), subscribers/s, beside the CSV import of the same number of rows through the
//!   dashboard's upload endpoint (the peer the issue names);
//! - transactional mail: `requests` sends from `clients` concurrent clients, each with its own
//!   Idempotency-Key (p50/p99/max to the 201), then the same requests again (each key
//!   repeated: p50/p99/max to the 200), and every message checked to be queued once.
//!
//! Besides wall-clock rates, the replica's and PostgreSQL's CPU per 1,000.
//!
//! Run through `bench/api.sh`. Usage: api_bench <mailroom binary> [rows=100000]
//! [requests=5000] [clients=50] [bulk_clients=1] (bulk requests sent that many at a time)

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use mailroom::embedded_pg::{self, EmbeddedPg};

#[path = "support/mod.rs"]
mod support;

const TOKEN: &str = "mrk_benchbenchbenchbenchbenchbenchbenchbench";

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

/// Sends the `requests` transactional messages (keys `{prefix}-{i}`) from `clients` clients;
/// every answer must have `want` status. Returns each request's latency and the wall time.
async fn send_all(
    url: &str,
    prefix: &str,
    requests: usize,
    clients: usize,
    want: u16,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(clients)
        .build()?;
    let started = Instant::now();
    let workers = (0..clients).map(|_| {
        let (next, client, url, prefix) = (
            next.clone(),
            client.clone(),
            url.to_string(),
            prefix.to_string(),
        );
        tokio::spawn(async move {
            let mut took = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= requests {
                    return anyhow::Ok(took);
                }
                let body = serde_json::json!({
                    "template": "receipt", "to": format!("buyer{i}@example.org"),
                    "data": {"name": format!("Buyer {i}"), "order": i, "total": "12.50 EUR"},
                });
                let t = Instant::now();
                let r = client
                    .post(&url)
                    .bearer_auth(TOKEN)
                    .header("idempotency-key", format!("{prefix}-{i}"))
                    .header("content-type", "application/json")
                    .body(body.to_string())
                    .send()
                    .await?;
                let status = r.status().as_u16();
                let text = r.text().await?;
                took.push(t.elapsed());
                if status != want {
                    bail!("a send was answered {status}, not {want}: {text}");
                }
            }
        })
    });
    let mut all = Vec::with_capacity(requests);
    for w in futures::future::join_all(workers).await {
        all.extend(w??);
    }
    let wall = started.elapsed();
    all.sort();
    Ok((all, wall))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let bin = args
        .get(1)
        .context("usage: api_bench <mailroom binary> [rows] [requests] [clients] [bulk_clients]")?;
    let rows: usize = args.get(2).map_or(Ok(100_000), |s| s.parse())?;
    let requests: usize = args.get(3).map_or(Ok(5_000), |s| s.parse())?;
    let clients: usize = args.get(4).map_or(Ok(50), |s| s.parse())?;
    let bulk_clients: usize = args.get(5).map_or(Ok(1), |s| s.parse())?;
    let data = tempfile::Builder::new()
        .prefix("mrapibench")
        .tempdir_in("/tmp")?;
    let pg = EmbeddedPg::open(data.path(), embedded_pg::Options::default()).await?;
    let pool = mailroom::ops::database::connect(pg.connect_options(embedded_pg::DATABASE)).await?;
    app::db::migrate::run(&pool, true).await?;
    let (org, (owner, _)) =
        support::org_with_admins(&pool, "bench", "a@bench.example", "x-password-1").await?;
    let list = support::list(&pool, org, "API bench").await?;
    let import_list = support::list(&pool, org, "CSV bench").await?;
    support::api_token(&pool, org, owner, TOKEN).await?;
    {
        let mut tx = pool.begin().await?;
        let saved = app::db::transactional::save(
            &mut tx,
            org,
            None,
            &app::db::transactional::Draft {
                name: "receipt",
                subject: "Your receipt for order {{ order }}",
                body_text: "Hello {{ name }},\n\nwe received {{ total }} for order {{ order }}. Thank you.\n",
                body_html: Some("<p>Hello {{ name }},</p><p>we received <b>{{ total }}</b> for order {{ order }}.</p>"),
                sample_data: &serde_json::json!({}),
                author_id: owner,
            },
        )
        .await?;
        if !matches!(saved, app::db::transactional::Saved::Version(_, 1)) {
            bail!("the template was not created");
        }
        tx.commit().await?;
    }
    let postmaster = support::postmaster_pid(data.path())?;
    let (mut replica, origin) = support::api_replica(
        bin,
        data.path(),
        std::path::Path::new("target/site"),
        "/tmp/bench-api-serve.log",
    )?;
    let outcome = async {
        support::ready(&origin, Duration::from_secs(60)).await?;
        let client = reqwest::Client::new();
        for (round, offset) in [("created", 0), ("updated", 0)] {
            let before = support::cpu_seconds(replica.id(), postmaster);
            let started = Instant::now();
            let all: Vec<usize> = (0..rows).collect();
            let sends = all.chunks(10_000).map(|chunk| {
                let client = client.clone();
                let origin = origin.clone();
                async move {
                    let body = serde_json::json!({ "subscribers": chunk.iter().map(|i| serde_json::json!({
                        "email": format!("s{}@bench.example", i + offset), "name": format!("Subscriber {i}"),
                        "attributes": {"plan": "pro", "seats": i % 50}, "list_ids": [list],
                    })).collect::<Vec<_>>() });
                    let r = client
                        .post(format!("{origin}/api/v1/subscribers/bulk"))
                        .bearer_auth(TOKEN)
                        .header("content-type", "application/json")
                        .body(body.to_string())
                        .send()
                        .await?;
                    let status = r.status();
                    let answer: serde_json::Value = serde_json::from_str(&r.text().await?)?;
                    if !status.is_success() || answer[round].as_u64() != Some(chunk.len() as u64) {
                        bail!(
                            "bulk upsert answered {status}: {}",
                            answer.to_string().chars().take(300).collect::<String>()
                        );
                    }
                    Ok(())
                }
            });
            use futures::StreamExt;
            let mut sending = futures::stream::iter(sends).buffer_unordered(bulk_clients.max(1));
            while let Some(done) = sending.next().await {
                done?;
            }
            let took = started.elapsed();
            let after = support::cpu_seconds(replica.id(), postmaster);
            let per = |c: f64| c * 1000.0 * 1000.0 / rows as f64;
            println!(
                "bulk upsert, {round}: {rows} subscribers in requests of 10,000, {bulk_clients} at a time: {:.0} subscribers/s; CPU ms per 1,000: replica {:.0}, PostgreSQL {:.0}",
                rows as f64 / took.as_secs_f64(),
                per(after.0 - before.0),
                per(after.1 - before.1),
            );
        }
        // The peer: the CSV import of as many rows through the dashboard's upload endpoint.
        let browser = support::signed_in(&origin, "a@bench.example", "x-password-1").await?;
        let mut csv = String::from("email,name\n");
        for i in 0..rows {
            csv.push_str(&format!("c{i}@bench.example,Imported {i}\n"));
        }
        let started = Instant::now();
        let form = reqwest::multipart::Form::new().part(
            "file",
            reqwest::multipart::Part::bytes(csv.into_bytes()).file_name("bench.csv"),
        );
        let r = browser
            .post(format!("{origin}/api/lists/{import_list}/import"))
            .header("origin", &origin)
            .multipart(form)
            .send()
            .await?;
        // A plain form post: answered with a redirect to the import's progress page.
        if !(r.status().is_success() || r.status().is_redirection()) {
            bail!("the CSV import answered {}", r.status());
        }
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            let done: Option<i64> = sqlx::query_scalar(
                "select created_subscribers from imports where list_id = $1 and status = 'done'",
            )
            .bind(import_list)
            .fetch_optional(&pool)
            .await?;
            if done == Some(rows as i64) {
                break;
            }
            if Instant::now() > deadline {
                bail!("the CSV import did not finish");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        println!(
            "CSV import (the peer), created: {rows} rows: {:.0} subscribers/s",
            rows as f64 / started.elapsed().as_secs_f64()
        );

        let url = format!("{origin}/api/v1/messages");
        for (round, want) in [("new key", 201), ("repeated key", 200)] {
            let before = support::cpu_seconds(replica.id(), postmaster);
            let (took, wall) = send_all(&url, "order", requests, clients, want).await?;
            let after = support::cpu_seconds(replica.id(), postmaster);
            let per = |c: f64| c * 1000.0 * 1000.0 / requests as f64;
            println!(
                "POST /messages, {round}: {requests} requests from {clients} clients: {:.0} requests/s; to the {want}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; CPU ms per 1,000: replica {:.0}, PostgreSQL {:.0}",
                requests as f64 / wall.as_secs_f64(),
                percentile(&took, 0.5),
                percentile(&took, 0.99),
                percentile(&took, 1.0),
                per(after.0 - before.0),
                per(after.1 - before.1),
            );
        }
        let (messages, deliveries, distinct): (i64, i64, i64) = sqlx::query_as(
            "select (select count(*) from tx_messages), (select count(*) from deliveries where kind = 'transactional'),
                    (select count(distinct job_id) from deliveries where kind = 'transactional')",
        )
        .fetch_one(&pool)
        .await?;
        if (messages, deliveries, distinct) != (requests as i64, requests as i64, requests as i64) {
            bail!("{requests} keys made {messages} messages and {deliveries} deliveries");
        }
        println!(
            "checked: {requests} keys, {messages} messages, {deliveries} deliveries, each once"
        );
        anyhow::Ok(())
    };
    let result = outcome.await;
    let stopped = support::stop(&mut replica).map(drop);
    pool.close().await;
    pg.shutdown().await?;
    result.and(stopped)
}
