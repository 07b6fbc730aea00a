//! The dashboard under load, with the big campaign's sends in the database: p50/p99 of the
//! campaign page and of opening its progress stream at 50 concurrent clients, and the time a
//! progress change takes to reach a stream open on another replica.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::support;
use sqlx::PgPool;

/// The owner who signs in to the dashboard.
pub const EMAIL: &str = "a@bench.example";
pub const PASSWORD: &str = "bench-password-1234";
const CLIENTS: usize = 50;

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let k = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[k].as_secs_f64() * 1000.0
}

fn report(what: &str, mut samples: Vec<Duration>, wall: Option<Duration>) {
    samples.sort();
    let rate = wall.map_or(String::new(), |w| {
        format!(", {:.0} requests/s", samples.len() as f64 / w.as_secs_f64())
    });
    println!(
        "{what}: {} samples, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms{rate}",
        samples.len(),
        percentile(&samples, 0.5),
        percentile(&samples, 0.99),
        percentile(&samples, 1.0),
    );
}

/// A `mailroom serve` replica on the bench's cluster: (port, process).
fn serve(bin: &str, data: &Path) -> anyhow::Result<(u16, Child)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let child = Command::new(bin)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(data)
        .args(["--site-root", "target/site"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(format!(
            "/tmp/bench-serve-{port}.log"
        ))?))
        .spawn()?;
    Ok((port, child))
}

/// Reads a stream until a `progress` event whose data satisfies `done`.
async fn until_event(
    r: &mut reqwest::Response,
    buf: &mut String,
    done: impl Fn(&str) -> bool,
) -> anyhow::Result<()> {
    loop {
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            if let Some(data) = event.lines().find_map(|l| l.strip_prefix("data: ")) {
                if done(data) {
                    return Ok(());
                }
            }
        }
        let chunk = r.chunk().await?.context("the stream ended")?;
        buf.push_str(std::str::from_utf8(&chunk)?);
    }
}

pub async fn measure(
    bin: &str,
    data: &Path,
    pool: &PgPool,
    org: i64,
    campaign: i64,
) -> anyhow::Result<()> {
    use app::domain::Transition;
    let email = EMAIL;
    // Paused: the replicas' own workers must not send it (and skew the later phases) while the
    // dashboard is measured; its page and stream are the same.
    support::transition(pool, org, campaign, Transition::Pause).await?;
    let (port_a, mut a) = serve(bin, data)?;
    let (port_b, mut b) = serve(bin, data)?;
    let (origin_a, origin_b) = (
        format!("http://127.0.0.1:{port_a}"),
        format!("http://127.0.0.1:{port_b}"),
    );
    support::ready(&origin_a, Duration::from_secs(60)).await?;
    support::ready(&origin_b, Duration::from_secs(60)).await?;
    let outcome = async {
        // (1) The campaign page, server-rendered, 50 clients for 15 s.
        let page = format!("http://127.0.0.1:{port_a}/campaigns/{campaign}");
        let started = Instant::now();
        let mut clients = Vec::new();
        for _ in 0..CLIENTS {
            let c = support::signed_in(&origin_a, email, PASSWORD).await?;
            let page = page.clone();
            clients.push(tokio::spawn(async move {
                let mut samples = Vec::new();
                while started.elapsed() < Duration::from_secs(15) {
                    let t = Instant::now();
                    let r = c.get(&page).send().await?;
                    if !r.status().is_success() {
                        bail!("campaign page: {}", r.status());
                    }
                    r.bytes().await?;
                    samples.push(t.elapsed());
                }
                anyhow::Ok(samples)
            }));
        }
        let mut samples = Vec::new();
        for c in clients {
            samples.extend(c.await??);
        }
        report(
            "campaign page (GET, 50 clients, 15 s)",
            samples,
            Some(started.elapsed()),
        );

        // (2) Opening the progress stream until its first reading, 50 clients at once, twice.
        let stream = format!("http://127.0.0.1:{port_a}/api/campaigns/{campaign}/progress");
        let mut samples = Vec::new();
        let mut open = Vec::new();
        for _ in 0..2 {
            let mut tasks = Vec::new();
            for _ in 0..CLIENTS {
                let c = support::signed_in(&origin_a, email, PASSWORD).await?;
                let stream = stream.clone();
                tasks.push(tokio::spawn(async move {
                    let t = Instant::now();
                    let mut r = c.get(&stream).send().await?;
                    let mut buf = String::new();
                    until_event(&mut r, &mut buf, |_| true).await?;
                    anyhow::Ok((t.elapsed(), r))
                }));
            }
            for t in tasks {
                let (d, r) = t.await??;
                samples.push(d);
                open.push(r);
            }
        }
        report("progress stream, connect to first reading (50 clients × 2)", samples, None);

        // (3) A change made through another replica's database connection reaches a stream
        // open on replica B: 20 times.
        let c = support::signed_in(&origin_b, email, PASSWORD).await?;
        let mut r = c
            .get(format!("http://127.0.0.1:{port_b}/api/campaigns/{campaign}/progress"))
            .send()
            .await?;
        let mut buf = String::new();
        until_event(&mut r, &mut buf, |_| true).await?;
        // The stimulus is a counter move the bench makes itself (a failed slot +1, undone
        // afterwards): the measure is the notification's path to another replica's stream,
        // and no real outcome can be produced twenty times on demand.
        let mut samples = Vec::new();
        for k in 1..=20i64 {
            let base: i64 = sqlx::query_scalar(
                "select coalesce(sum(failed), 0)::bigint from progress_slots where campaign_id = $1",
            )
            .bind(campaign)
            .fetch_one(pool)
            .await?;
            let t = Instant::now();
            sqlx::query(
                "insert into progress_slots as p (org_id, campaign_id, slot, failed)
                 select org_id, id, 15, 1 from campaigns where id = $1
                 on conflict (campaign_id, slot) do update set failed = p.failed + 1",
            )
            .bind(campaign)
            .execute(pool)
            .await?;
            app::db::campaign::states::notify_progress(pool, "mailroom_progress", &[app::domain::CampaignId(campaign)]).await?;
            let want = format!("\"failed\":{}", base + 1);
            until_event(&mut r, &mut buf, |d| d.contains(&want)).await?;
            samples.push(t.elapsed());
            let _ = k;
        }
        report("progress change → stream on another replica (20 changes)", samples, None);
        drop(open);
        // Undo the bench's counter moves.
        sqlx::query("update progress_slots set failed = failed - 20 where campaign_id = $1 and slot = 15")
            .bind(campaign)
            .execute(pool)
            .await?;
        anyhow::Ok(())
    }
    .await;
    support::transition(pool, org, campaign, app::domain::Transition::Resume).await?;
    for child in [&mut a, &mut b] {
        support::stop(child)?;
    }
    outcome
}
