//! Worker throughput with 0 and with N open progress streams. One `mailroom serve`
//! (dashboard and workers in one process, as most installs run it) sends a campaign to Postfix's
//! `smtp-sink`; during the "streams" runs, N clients hold its progress stream open on that same
//! replica and read every event. After an uncounted warm-up, runs alternate (0, N, 0, N, …) so
//! that a growing deliveries table does not favour either side. Besides messages/s (wall clock,
//! sensitive to anything else on the machine), each run reports the CPU the replica and
//! PostgreSQL spent per 1,000 messages.
//!
//! Run through `bench/progress-streams.sh`. Usage: progress_streams_bench <mailroom binary>
//! [recipients=30000] [streams=100] [rounds=2]

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sqlx::PgPool;

use app::db::campaign::edit::Audience;
use mailroom::embedded_pg::{self, EmbeddedPg};

#[path = "support/mod.rs"]
mod support;
use support::free_port;

const EMAIL: &str = "a@bench.example";
const PASSWORD: &str = "bench-password-1234";

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_default()
}

/// An org with two admins (a signs in) and one list of `n` subscribers, imported as the CSV
/// import does: (org, (a, b), list).
async fn seed(pool: &PgPool, n: i64) -> anyhow::Result<(i64, (i64, i64), i64)> {
    let (org, users) = support::org_with_admins(pool, "bench", EMAIL, PASSWORD).await?;
    let list = support::list(pool, org, "everyone").await?;
    let people: Vec<(String, String)> = (1..=n)
        .map(|i| (format!("p{i}@example.org"), format!("Person {i}")))
        .collect();
    support::import(pool, org, list, &people).await?;
    Ok((org, users, list))
}

/// A campaign to `list`, submitted (streams open on it before it is approved and starts):
/// (id, the version to approve).
async fn campaign(pool: &PgPool, org: i64, author: i64, list: i64) -> anyhow::Result<(i64, i32)> {
    let body = "Dear {{ name }}, this is the bench campaign.";
    support::submitted_campaign(
        pool,
        org,
        author,
        &Audience::of_lists(&[list]),
        "Bench",
        body,
        false,
    )
    .await
}

/// `mailroom serve` on the bench's cluster, sending to the sink with campaign_bench's tuning.
fn serve(bin: &str, data: &Path, port: u16, sink: u16) -> anyhow::Result<Child> {
    Ok(Command::new(bin)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(data)
        .args(["--site-root", "target/site"])
        .args(["--smtp-host", "127.0.0.1", "--smtp-port", &sink.to_string()])
        .args(["--smtp-connections", "8", "--delivery-batch", "200"])
        .args(["--campaign-batch", "500", "--campaign-watermark", "2000"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(
            "/tmp/bench-progress-streams-serve.log",
        )?))
        .spawn()?)
}

/// Opens `n` progress streams (each waits for its first reading) and reads them in the
/// background, counting `progress` events into `events`.
async fn open_streams(
    c: &reqwest::Client,
    url: &str,
    n: usize,
    events: Arc<AtomicU64>,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut readers = Vec::new();
    for _ in 0..n {
        let mut r = c.get(url).send().await?;
        if !r.status().is_success() {
            bail!("progress stream: {}", r.status());
        }
        let first = r.chunk().await?.context("the stream ended at once")?;
        if !String::from_utf8_lossy(&first).contains("event: progress") {
            bail!("the stream's first chunk was not a reading");
        }
        let events = events.clone();
        readers.push(tokio::spawn(async move {
            while let Ok(Some(chunk)) = r.chunk().await {
                let k = String::from_utf8_lossy(&chunk)
                    .matches("event: progress")
                    .count();
                events.fetch_add(k as u64, Ordering::Relaxed);
            }
        }));
    }
    Ok(readers)
}

/// Approves the submitted campaign (due at once) and waits until it is sent: (delivered,
/// messages/s from the campaign's start to its last delivery, both by the database clock).
async fn run(
    pool: &PgPool,
    org: i64,
    approver: i64,
    (id, version): (i64, i32),
    limit: Duration,
) -> anyhow::Result<(i64, f64)> {
    support::approve(pool, org, id, approver, version).await?;
    app::db::campaign::states::notify_progress(
        pool,
        "mailroom_campaign_approved",
        &[app::domain::CampaignId(id)],
    )
    .await?;
    let started = Instant::now();
    loop {
        let status: String = sqlx::query_scalar("select status from campaigns where id = $1")
            .bind(id)
            .fetch_one(pool)
            .await?;
        if status == "sent" {
            break;
        }
        if started.elapsed() > limit {
            bail!("campaign {id} not sent after {limit:?} (status {status})");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (delivered, seconds): (i64, f64) = sqlx::query_as(
        "select count(*), extract(epoch from max(d.finished_at) - c.started_at)::float8
         from deliveries d join campaigns c on c.id = d.campaign_id
         where d.campaign_id = $1 and d.status = 'delivered'
         group by c.started_at",
    )
    .bind(id)
    .fetch_one(pool)
    .await?;
    Ok((delivered, delivered as f64 / seconds))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let bin = args.get(1).context(
        "usage: progress_streams_bench <mailroom binary> [recipients] [streams] [rounds]",
    )?;
    let recipients: i64 = args.get(2).map_or(Ok(30_000), |s| s.parse())?;
    let streams: usize = args.get(3).map_or(Ok(100), |s| s.parse())?;
    let rounds: usize = args.get(4).map_or(Ok(2), |s| s.parse())?;
    let data = tempfile::Builder::new()
        .prefix("mrpsbench")
        .tempdir_in("/tmp")?;
    let pg = EmbeddedPg::open(data.path(), embedded_pg::Options::default()).await?;
    let pool = mailroom::ops::database::connect(pg.connect_options(embedded_pg::DATABASE)).await?;
    app::db::migrate::run(&pool, true).await?;
    let (org, users, list) = seed(&pool, recipients).await?;
    let sink = support::Sink::start()?;
    let sink_port = sink.port;
    let port = free_port()?;
    let postmaster = support::postmaster_pid(data.path())?;
    let mut replica = serve(bin, data.path(), port, sink_port)?;
    let origin = format!("http://127.0.0.1:{port}");
    let outcome = async {
        support::ready(&origin, Duration::from_secs(60)).await?;
        let client = support::signed_in(&origin, EMAIL, PASSWORD).await?;
        // A first campaign warms the caches (the list, the plans); it is not counted.
        let c = campaign(&pool, org, users.0, list).await?;
        let (n, rate) = run(&pool, org, users.1, c, Duration::from_secs(600)).await?;
        println!("warm-up, no stream: {n} delivered, {rate:.0} messages/s (not counted)");
        // (open streams, messages/s, replica CPU ms and PostgreSQL CPU ms per 1,000 messages)
        let mut figures: Vec<(usize, [f64; 3])> = Vec::new();
        for round in 1..=rounds {
            // Either side goes first in every other round (autovacuum of the last run's rows and
            // other work on the machine would otherwise weigh on one side).
            let order = if round % 2 == 1 { [0, streams] } else { [streams, 0] };
            for open in order {
                let c = campaign(&pool, org, users.0, list).await?;
                let id = c.0;
                let events = Arc::new(AtomicU64::new(0));
                let url = format!("{origin}/api/campaigns/{id}/progress");
                let readers = open_streams(&client, &url, open, events.clone()).await?;
                let before = support::cpu_seconds(replica.id(), postmaster);
                let (n, rate) = run(&pool, org, users.1, c, Duration::from_secs(600)).await?;
                let after = support::cpu_seconds(replica.id(), postmaster);
                // Let the streams take the final reading before they are counted and closed.
                tokio::time::sleep(Duration::from_millis(500)).await;
                for r in &readers {
                    r.abort();
                }
                let per_k = |s: f64| s * 1000.0 * 1000.0 / n as f64;
                println!(
                    "round {round}, {open:>3} open progress streams: {n} delivered, {rate:>6.0} messages/s; CPU ms per 1,000 messages: replica {:.0}, PostgreSQL {:.0}; {} progress events read; load {}",
                    per_k(after.0 - before.0),
                    per_k(after.1 - before.1),
                    events.load(Ordering::Relaxed),
                    load_average(),
                );
                figures.push((
                    open,
                    [rate, per_k(after.0 - before.0), per_k(after.1 - before.1)],
                ));
            }
        }
        let median = |open: usize, k: usize| {
            let mut xs: Vec<f64> = figures
                .iter()
                .filter(|(o, _)| *o == open)
                .map(|(_, f)| f[k])
                .collect();
            xs.sort_by(f64::total_cmp);
            match xs.len() {
                0 => f64::NAN,
                n if n % 2 == 1 => xs[n / 2],
                n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
            }
        };
        for open in [0, streams] {
            println!(
                "median of {rounds} runs, {open:>3} open progress streams: {:.0} messages/s; CPU ms per 1,000 messages: replica {:.0}, PostgreSQL {:.0}",
                median(open, 0),
                median(open, 1),
                median(open, 2),
            );
        }
        anyhow::Ok(())
    }
    .await;
    let stopped = support::stop(&mut replica).map(drop);
    pool.close().await;
    pg.shutdown().await?;
    outcome.and(stopped)
}
