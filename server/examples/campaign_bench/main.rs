//! Campaign engine benchmark, on this machine and in one run:
//! (1) materialising a campaign over 3 overlapping lists (`campaign::start_due`: the start
//!     compare-and-set and the `INSERT … SELECT DISTINCT ON` in one transaction), and the same
//!     statement run bare through `psql` for the ratio;
//! (2) claim + hand-off throughput (recipients/s) for batch sizes 20, 100 and 500 with one and
//!     two concurrent workers;
//! (3) end to end: a campaign through real `mailroom worker` processes into Postfix `smtp-sink`
//!     (recipients/s) with the worker's peak RSS, for a small and a large campaign.
//!
//! Run through `bench/campaign.sh`. Usage: campaign_bench <mailroom binary> [recipients=1000000]
//! [e2e=100000]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sqlx::PgPool;

use app::db::campaign::edit::Audience;
use app::domain::Transition;
use mailroom::embedded_pg::{self, EmbeddedPg};

mod dashboard;
#[path = "../support/mod.rs"]
mod support;

/// `n` subscribers on three lists, imported as the CSV import does: each on list i % 3, every
/// 4th also on the next list; every 10th has a second, upper-cased row on the third list (a
/// case-variant duplicate).
async fn audience(pool: &PgPool, org: i64, prefix: &str, n: i64) -> anyhow::Result<Vec<i64>> {
    let person = |i: i64| (format!("{prefix}{i}@example.org"), format!("Person {i}"));
    let mut on: [Vec<(String, String)>; 3] = Default::default();
    for i in 0..n {
        on[(i % 3) as usize].push(person(i));
        if i % 4 == 0 {
            on[((i + 1) % 3) as usize].push(person(i));
        }
    }
    for i in (0..n).step_by(10) {
        let upper = format!("{prefix}{i}").to_uppercase();
        on[2].push((format!("{upper}@EXAMPLE.org"), format!("Variant {i}")));
    }
    let mut lists = Vec::new();
    for (k, people) in on.iter().enumerate() {
        let list = support::list(pool, org, &format!("{prefix}-{k}")).await?;
        support::import(pool, org, list, people).await?;
        lists.push(list);
    }
    sqlx::raw_sql("analyze subscribers; analyze list_members")
        .execute(pool)
        .await?;
    Ok(lists)
}

async fn campaign(
    pool: &PgPool,
    org: i64,
    users: (i64, i64),
    lists: &[i64],
    later: bool,
) -> anyhow::Result<i64> {
    let body = "Dear {{ name }}, this is the bench campaign.";
    support::approved_campaign(
        pool,
        org,
        users,
        &Audience::of_lists(lists),
        "Bench",
        body,
        later,
    )
    .await
}

/// Rewinds a sending campaign's hand-off so the next measure starts from the same queue: its
/// deliveries deleted, its sends queued again. The product never does this (it would send
/// twice), so it is the bench's own statement; the campaign's state is left to the product.
async fn reset(pool: &PgPool, id: i64) -> anyhow::Result<()> {
    sqlx::raw_sql(&format!(
        "delete from deliveries where campaign_id = {id};
         update sends set status = 'queued' where campaign_id = {id} and status <> 'queued';
         delete from progress_slots where campaign_id = {id};"
    ))
    .execute(pool)
    .await?;
    // VACUUM cannot run in the implicit transaction of a multi-statement string.
    for table in ["sends", "deliveries"] {
        sqlx::raw_sql(&format!("vacuum analyze {table}"))
            .execute(pool)
            .await?;
    }
    Ok(())
}

async fn queued_sends(pool: &PgPool, id: i64) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        "select count(*) from sends where campaign_id = $1 and status = 'queued'",
    )
    .bind(id)
    .fetch_one(pool)
    .await?)
}

/// Hands off a whole campaign with `workers` concurrent loops of `batch`: recipients/s.
async fn hand_off_rate(pool: &PgPool, id: i64, batch: i64, workers: usize) -> anyhow::Result<f64> {
    reset(pool, id).await?;
    let total = queued_sends(pool, id).await?;
    let started = Instant::now();
    let loops = (0..workers).map(|_| {
        let pool = pool.clone();
        tokio::spawn(async move {
            loop {
                let h = app::db::campaign::sends::hand_off(&pool, batch, 0, 8).await?;
                if h.handed_off + h.suppressed == 0 {
                    return anyhow::Ok(());
                }
            }
        })
    });
    for l in futures::future::join_all(loops).await {
        l??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    if queued_sends(pool, id).await? != 0 {
        bail!("hand-off left queued sends");
    }
    Ok(total as f64 / elapsed)
}

/// A campaign through a `mailroom worker` into smtp-sink: (recipients/s, peak RSS KiB).
async fn end_to_end(
    bin: &str,
    data: &std::path::Path,
    pool: &PgPool,
    id: i64,
    sink_port: u16,
    limit: Duration,
) -> anyhow::Result<(f64, u64, i64)> {
    let mut worker = Command::new(bin)
        .args(["worker", "--data-dir"])
        .arg(data)
        .args([
            "--smtp-host",
            "127.0.0.1",
            "--smtp-port",
            &sink_port.to_string(),
        ])
        .args([
            "--smtp-connections",
            "8",
            "--delivery-batch",
            "200",
            "--campaign-batch",
            "500",
        ])
        .args(["--campaign-watermark", "2000"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(
            "/tmp/bench-campaign-worker.log",
        )?))
        .spawn()?;
    let started = Instant::now();
    let mut peak = 0;
    loop {
        peak = peak.max(support::peak_rss_kib(worker.id()).unwrap_or(0));
        let status: String = sqlx::query_scalar("select status from campaigns where id = $1")
            .bind(id)
            .fetch_one(pool)
            .await?;
        if status == "sent" || started.elapsed() > limit {
            break;
        }
        if let Some(s) = worker.try_wait()? {
            bail!("the worker exited early: {s}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    support::stop(&mut worker)?;
    let delivered: i64 = sqlx::query_scalar(
        "select count(*) from deliveries where campaign_id = $1 and status = 'delivered'",
    )
    .bind(id)
    .fetch_one(pool)
    .await?;
    Ok((delivered as f64 / elapsed, peak, delivered))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let bin = args
        .get(1)
        .context("usage: campaign_bench <mailroom binary> [recipients] [e2e]")?;
    let big: i64 = args.get(2).map_or(Ok(1_000_000), |s| s.parse())?;
    let e2e: i64 = args.get(3).map_or(Ok(100_000), |s| s.parse())?;
    let data = tempfile::Builder::new()
        .prefix("mrcbench")
        .tempdir_in("/tmp")?;
    let pg = EmbeddedPg::open(data.path(), embedded_pg::Options::default()).await?;
    let pool = mailroom::ops::database::connect(pg.connect_options(embedded_pg::DATABASE)).await?;
    app::db::migrate::run(&pool, true).await?;
    let (org, users) =
        support::org_with_admins(&pool, "bench", dashboard::EMAIL, dashboard::PASSWORD).await?;

    // (1) Materialisation.
    let t = Instant::now();
    let big_lists = audience(&pool, org, "m", big).await?;
    println!("seeded {big} addresses (+{} case variants) on 3 overlapping lists in {:.1}s (not measured)", big / 10, t.elapsed().as_secs_f64());
    let big_id = campaign(&pool, org, users, &big_lists, false).await?;
    let t = Instant::now();
    let started = mailroom::workers::campaign::start_due(&pool).await?;
    let engine = t.elapsed().as_secs_f64();
    println!("materialise (start + INSERT … SELECT DISTINCT ON, one transaction): {:?} recipients in {engine:.2}s", started);
    // The same rows by a hand-written statement over the lists, bare, in psql (rolled back),
    // for the ratio.
    let bare_id = campaign(&pool, org, users, &big_lists, true).await?;
    let sql = BARE_MATERIALISE_SQL
        .replace("$1", &org.to_string())
        .replace("$2", &bare_id.to_string());
    let socket = data.path().join("postgres");
    let t = Instant::now();
    let out = Command::new("psql")
        .args(["-h"])
        .arg(&socket)
        .args([
            "-U",
            "mailroom",
            "-d",
            embedded_pg::DATABASE,
            "-v",
            "ON_ERROR_STOP=1",
            "-q",
            "-c",
        ])
        .arg(format!("begin; {sql}; rollback;"))
        .stdout(Stdio::null())
        .status();
    let bare = t.elapsed().as_secs_f64();
    match out {
        Ok(s) if s.success() => println!(
            "  the same statement bare in psql (rolled back): {bare:.2}s → engine/bare {:.2}",
            engine / bare
        ),
        other => println!("  psql run failed ({other:?}); no ratio"),
    }

    // (1b) The dashboard with these 1,000,000 sends in the database.
    if std::env::var("BENCH_DASHBOARD").map_or(true, |v| v != "0") {
        dashboard::measure(bin, data.path(), &pool, org, big_id).await?;
    }

    // Park the big campaign: the next steps measure another one alone.
    support::transition(&pool, org, big_id, Transition::Pause).await?;

    // (2) Hand-off throughput, over a campaign of `e2e` recipients (no watermark: nothing
    // drains the delivery queue here).
    let lists = audience(&pool, org, "h", e2e).await?;
    let id = campaign(&pool, org, users, &lists, false).await?;
    mailroom::workers::campaign::start_due(&pool).await?;
    for batch in [20, 100, 500] {
        for workers in [1, 2] {
            let rate = hand_off_rate(&pool, id, batch, workers).await?;
            println!("hand-off: batch {batch:>3}, {workers} worker(s): {rate:>8.0} recipients/s");
        }
    }

    // (3) End to end into smtp-sink, with the worker's peak RSS.
    let sink = support::Sink::start()?;
    let port = sink.port;
    reset(&pool, id).await?;
    let (rate, peak, n) =
        end_to_end(bin, data.path(), &pool, id, port, Duration::from_secs(900)).await?;
    println!(
        "end to end, {n} recipients: {rate:.0} recipients/s, worker peak RSS {:.1} MiB",
        peak as f64 / 1024.0
    );
    // A small campaign, for the worker's RSS at 10,000 recipients.
    let small_lists = audience(&pool, org, "s", 10_000).await?;
    let small = campaign(&pool, org, users, &small_lists, false).await?;
    mailroom::workers::campaign::start_due(&pool).await?;
    let (rate, peak, n) = end_to_end(
        bin,
        data.path(),
        &pool,
        small,
        port,
        Duration::from_secs(300),
    )
    .await?;
    println!(
        "end to end, {n} recipients: {rate:.0} recipients/s, worker peak RSS {:.1} MiB",
        peak as f64 / 1024.0
    );
    support::transition(&pool, org, big_id, Transition::Resume).await?;
    let (rate, peak, n) = end_to_end(
        bin,
        data.path(),
        &pool,
        big_id,
        port,
        Duration::from_secs(60),
    )
    .await?;
    println!("the {big}-recipient campaign for 60 s: {n} delivered, {rate:.0} recipients/s, worker peak RSS {:.1} MiB", peak as f64 / 1024.0);
    drop(sink);
    pool.close().await;
    pg.shutdown().await?;
    Ok(())
}

/// What materialising a list audience costs at the least: the statement written by hand for
/// lists alone ($1 org, $2 campaign), the engine's own being built for lists and segments.
const BARE_MATERIALISE_SQL: &str = "with added as (
         insert into sends (org_id, campaign_id, subscriber_id, email_lower, job_id)
         select distinct on (s.email_lower) s.org_id, $2::bigint, s.id, s.email_lower,
                'campaign:' || $2::bigint || ':' || s.id
         from campaign_lists cl
         join list_members lm on lm.org_id = cl.org_id and lm.list_id = cl.list_id
         join subscribers s on s.org_id = lm.org_id and s.id = lm.subscriber_id
         where cl.org_id = $1 and cl.campaign_id = $2::bigint
           and s.status = 'confirmed' and s.erased_at is null
           and not exists (select 1 from suppressions x
                           where x.org_id = s.org_id and x.email_lower = s.email_lower)
         order by s.email_lower, s.created_at, s.id
         on conflict do nothing
         returning 1
     )
     select count(*) from added";
