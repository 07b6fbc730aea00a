//! Click redirects: one `mailroom serve --no-workers` (release) on the embedded PostgreSQL,
//! `rate` requests a second for `seconds`, open loop (each request leaves at its own time,
//! whether or not the ones before it were answered), each a person's click on a tracked link
//! of one of `people` delivered campaign messages: verify, record, redirect. Prints the
//! latency's p50, p99 and max, the rate reached, the replica's and PostgreSQL's CPU per click,
//! and checks every click was recorded once.
//!
//! Run through `bench/clicks.sh`. Usage: click_bench <mailroom binary> [rate=500] [seconds=10]
//! [people=10000]

use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use app::db::delivery::NewDelivery;
use app::domain::{CampaignId, EmailAddress, JobId, OrgId, Reference, SubscriberId};
use mailroom::embedded_pg::{self, EmbeddedPg};

#[path = "support/mod.rs"]
mod support;

const BROWSER: &str =
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/131.0 Safari/537.36";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let bin = args
        .get(1)
        .context("usage: click_bench <mailroom binary> [rate] [seconds] [people]")?;
    let rate: u64 = args.get(2).map_or(Ok(500), |s| s.parse())?;
    let seconds: u64 = args.get(3).map_or(Ok(10), |s| s.parse())?;
    let people: usize = args.get(4).map_or(Ok(10_000), |s| s.parse())?;
    let data = tempfile::Builder::new()
        .prefix("mrclick")
        .tempdir_in("/tmp")?;
    let pg = EmbeddedPg::open(data.path(), embedded_pg::Options::default()).await?;
    let pool = mailroom::ops::database::connect(pg.connect_options(embedded_pg::DATABASE)).await?;
    app::db::migrate::run(&pool, true).await?;
    let (org, (author, approver)) =
        support::org_with_admins(&pool, "bench", "a@bench.example", "x-password-1").await?;

    // `people` subscribers, one delivered message of a sent campaign each.
    let t = Instant::now();
    let list = support::list(&pool, org, "all").await?;
    let audience = app::db::campaign::edit::Audience {
        lists: vec![list],
        ..Default::default()
    };
    let campaign = support::approved_campaign(
        &pool,
        org,
        (author, approver),
        &audience,
        "Launch",
        "Hi",
        false,
    )
    .await?;
    let key = app::signing::Purpose::Click.key(&pool).await?;
    let mut tx = pool.begin().await?;
    let rows: Vec<(EmailAddress, String)> = (0..people)
        .map(|i| {
            Ok((
                EmailAddress::parse(&format!("p{i}@example.org"))?,
                String::new(),
            ))
        })
        .collect::<anyhow::Result<_>>()?;
    let ids = app::db::audience::insert_subscribers(&mut tx, org, &rows).await?;
    let mut tokens = Vec::with_capacity(people);
    for ((to, _), id) in rows.iter().zip(&ids) {
        let job = JobId::Campaign {
            campaign_id: campaign,
            subscriber_id: *id,
        };
        app::db::delivery::enqueue(
            &mut tx,
            NewDelivery {
                job: &job,
                org: OrgId(org),
                recipient: to,
                reference: Reference::Campaign {
                    campaign: CampaignId(campaign),
                    version: 1,
                    subscriber: SubscriberId(*id),
                },
            },
        )
        .await?;
        tokens.push(app::click::token(
            &key,
            &job.to_string(),
            &format!("https://example.com/pricing?ref={id}"),
        ));
    }
    // Delivered an hour ago: every click is a person's.
    sqlx::query(
        "update deliveries set status = 'delivered', attempt = 1, finished_at = now() - interval '1 hour'
         where campaign_id = $1",
    )
    .bind(campaign)
    .execute(&mut *tx)
    .await?;
    sqlx::query("delete from delivery_queue")
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    sqlx::query("analyze").execute(&pool).await?;
    println!(
        "seeded {people} delivered campaign messages in {:.1}s (not measured)",
        t.elapsed().as_secs_f64()
    );

    let site = data.path().join("site");
    std::fs::create_dir_all(site.join("pkg"))?;
    for f in ["mailroom.js", "mailroom.wasm", "mailroom.css"] {
        std::fs::write(site.join("pkg").join(f), "")?;
    }
    let postmaster = support::postmaster_pid(data.path())?;
    let (mut replica, origin) =
        support::api_replica(bin, data.path(), &site, "/tmp/bench-clicks-serve.log")?;
    let outcome = async {
        support::ready(&origin, Duration::from_secs(60)).await?;
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(BROWSER)
            .pool_max_idle_per_host(256)
            .build()?;
        // Warm the connections and the replica's key.
        for t in tokens.iter().take(50) {
            http.get(format!("{origin}/c/{t}")).send().await?;
        }
        let before_clicks: i64 = sqlx::query_scalar("select count(*) from link_clicks")
            .fetch_one(&pool)
            .await?;
        let total = (rate * seconds) as usize;
        let cpu_before = support::cpu_seconds(replica.id(), postmaster);
        let started = Instant::now();
        let mut tasks = Vec::with_capacity(total);
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        for i in 0..total {
            tick.tick().await;
            let url = format!("{origin}/c/{}", tokens[i % tokens.len()]);
            let http = http.clone();
            tasks.push(tokio::spawn(async move {
                let sent = Instant::now();
                let r = http.get(url).send().await;
                (sent.elapsed(), r.map(|r| r.status().as_u16()).unwrap_or(0))
            }));
        }
        let mut latencies = Vec::with_capacity(total);
        let mut wrong = 0;
        for t in tasks {
            let (took, status) = t.await?;
            if status != 302 {
                wrong += 1;
            }
            latencies.push(took);
        }
        let wall = started.elapsed().as_secs_f64();
        let cpu_after = support::cpu_seconds(replica.id(), postmaster);
        latencies.sort();
        let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
        let per = |c: f64| c * 1e6 / total as f64;
        println!(
            "click redirects, {rate}/s offered for {seconds}s: {total} in {wall:.1}s ({:.0}/s); p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {wrong} not a 302",
            total as f64 / wall,
            at(0.50).as_secs_f64() * 1e3,
            at(0.99).as_secs_f64() * 1e3,
            latencies[latencies.len() - 1].as_secs_f64() * 1e3,
        );
        println!(
            "  CPU per click: replica {:.0} us, PostgreSQL {:.0} us",
            per(cpu_after.0 - cpu_before.0),
            per(cpu_after.1 - cpu_before.1)
        );
        let after_clicks: i64 = sqlx::query_scalar("select count(*) from link_clicks")
            .fetch_one(&pool)
            .await?;
        if (after_clicks - before_clicks) as usize != total - wrong {
            bail!(
                "{} clicks recorded for {} redirects",
                after_clicks - before_clicks,
                total - wrong
            );
        }
        println!("  every redirect recorded once: {} clicks", after_clicks - before_clicks);
        anyhow::Ok(())
    }
    .await;
    let stopped = support::stop(&mut replica).map(drop);
    pool.close().await;
    pg.shutdown().await?;
    outcome.and(stopped)
}
