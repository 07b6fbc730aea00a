//! Automation benchmark, on this machine and in one run:
//! (1) enrolling `n` people: imported (the CSV import's batch insert), they join a list that
//!     triggers a live automation in one statement, beside the same join into lists that
//!     trigger nothing (before and after): enrolments/s and PostgreSQL CPU per enrolment;
//! (2) the campaign materialisation of the same people (`campaign::start_due`), for the ratio;
//! (3) their first step (a wait) taken by `runners` concurrent step runners; then the clock
//!     moved past the wait, so `n` waits end at the same instant: mail steps dispatched per
//!     second, PostgreSQL CPU per step, and the delay from the due instant to the 50th / 99th
//!     percentile's message queued for the delivery engine; with `MAILROOM_BIN`, a real
//!     `mailroom worker` process sends the mail into Postfix's `smtp-sink` while the steps are
//!     taken, and the delay to the 50th / 99th percentile's delivery is printed too (a claim
//!     comes before its delivery: an upper bound of the delay to the claim).
//!
//! Run through `bench/automations.sh`. Usage: automation_bench [people=1000000] [runners=2]
//! [batch=500]

use std::time::Instant;

use anyhow::{ensure, Context};
use sqlx::PgPool;

use app::db::campaign::edit::Audience;
use app::domain::automation::Definition;
use app::domain::{OrgId, UserId};
use mailroom::embedded_pg::{self, EmbeddedPg};

#[path = "support/mod.rs"]
mod support;

async fn timed_import(
    pool: &PgPool,
    org: i64,
    list: i64,
    people: &[(String, String)],
    postmaster: u32,
) -> anyhow::Result<(f64, f64)> {
    let cpu = support::cpu_seconds(std::process::id(), postmaster).1;
    let t = Instant::now();
    support::import(pool, org, list, people).await?;
    Ok((
        t.elapsed().as_secs_f64(),
        support::cpu_seconds(std::process::id(), postmaster).1 - cpu,
    ))
}

/// Runs due steps at `now` from `runners` concurrent loops until none is due: (enrolments
/// moved, seconds, PostgreSQL CPU seconds).
async fn run_steps(
    pool: &PgPool,
    now: chrono::DateTime<chrono::Utc>,
    runners: usize,
    batch: i64,
    postmaster: u32,
) -> anyhow::Result<(usize, f64, f64)> {
    let cpu = support::cpu_seconds(std::process::id(), postmaster).1;
    let t = Instant::now();
    let loops = (0..runners).map(|_| {
        let pool = pool.clone();
        tokio::spawn(async move {
            let mut moved = 0;
            loop {
                let n = app::db::automation::run_due(&pool, Some(now), batch).await?;
                if n == 0 {
                    return anyhow::Ok(moved);
                }
                moved += n;
            }
        })
    });
    let mut moved = 0;
    for l in futures::future::join_all(loops).await {
        moved += l??;
    }
    Ok((
        moved,
        t.elapsed().as_secs_f64(),
        support::cpu_seconds(std::process::id(), postmaster).1 - cpu,
    ))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map_or(Ok(1_000_000), |s| s.parse())?;
    let runners: usize = args.get(2).map_or(Ok(2), |s| s.parse())?;
    let batch: i64 = args.get(3).map_or(Ok(500), |s| s.parse())?;
    let data = tempfile::Builder::new()
        .prefix("mrabench")
        .tempdir_in("/tmp")?;
    let pg = EmbeddedPg::open(data.path(), embedded_pg::Options::default()).await?;
    let pool = mailroom::ops::database::connect(pg.connect_options(embedded_pg::DATABASE)).await?;
    app::db::migrate::run(&pool, true).await?;
    let postmaster = support::postmaster_pid(data.path())?;
    let (org, users) =
        support::org_with_admins(&pool, "bench", "owner@bench.example", "bench-password-1").await?;
    let people = |prefix: &str| -> Vec<(String, String)> {
        (0..n)
            .map(|i| (format!("{prefix}{i}@example.org"), format!("Person {i}")))
            .collect()
    };

    // (1) The people arrive by a list import; then they join three lists by one statement each
    // (what an import does for people already there): two lists nothing listens to, before
    // and after, and between them the list a live automation is triggered by. The join alone
    // is the baseline; the difference is what enrolling costs.
    let plain = support::list(&pool, org, "plain").await?;
    let welcome = support::list(&pool, org, "welcome").await?;
    let def: Definition = serde_json::from_value(serde_json::json!({
        "trigger": {"type": "list_joined", "list_id": welcome},
        "reentry": "once",
        "steps": [
            {"type": "wait", "days": 1},
            {"type": "email", "subject": "Welcome {{ name }}", "body": "Hello"}
        ]
    }))?;
    let automation = {
        let mut c = pool.acquire().await?;
        let id = app::db::automation::create(&mut c, OrgId(org), "Welcome", &def, UserId(users.0))
            .await?;
        app::db::automation::approve(&mut c, OrgId(org), id, 1, UserId(users.1), false).await?;
        id
    };
    let (import_s, import_cpu) = timed_import(&pool, org, plain, &people("a"), postmaster).await?;
    println!("list import of {n} new people (the CSV import's batch insert, one transaction): {import_s:.2}s, PostgreSQL CPU {import_cpu:.2}s");
    // VACUUM cannot run in the implicit transaction of a multi-statement string.
    for table in ["subscribers", "list_members"] {
        sqlx::raw_sql(&format!("vacuum analyze {table}"))
            .execute(&pool)
            .await?;
    }
    let join = |list: i64| {
        let pool = pool.clone();
        async move {
            let cpu = support::cpu_seconds(std::process::id(), postmaster).1;
            let t = Instant::now();
            sqlx::query(
                "insert into list_members (org_id, list_id, subscriber_id)
                 select org_id, $2, subscriber_id from list_members where list_id = $1
                 order by subscriber_id",
            )
            .bind(plain)
            .bind(list)
            .execute(&pool)
            .await?;
            anyhow::Ok((
                t.elapsed().as_secs_f64(),
                support::cpu_seconds(std::process::id(), postmaster).1 - cpu,
            ))
        }
    };
    let before = support::list(&pool, org, "before").await?;
    let after = support::list(&pool, org, "after").await?;
    let (b_s, b_cpu) = join(before).await?;
    let (enrol_s, enrol_cpu) = join(welcome).await?;
    let (a_s, a_cpu) = join(after).await?;
    let (plain_s, plain_cpu) = ((b_s + a_s) / 2.0, (b_cpu + a_cpu) / 2.0);
    let enrolled: i64 =
        sqlx::query_scalar("select count(*) from enrolments where automation_id = $1")
            .bind(automation)
            .fetch_one(&pool)
            .await?;
    ensure!(enrolled as usize == n, "{enrolled} enrolled of {n}");
    let marginal = (enrol_s - plain_s).max(1e-3);
    println!(
        "{n} people join a list nothing listens to: {b_s:.2}s before, {a_s:.2}s after (PostgreSQL CPU {plain_cpu:.2}s); \
         the list that triggers the automation: {enrol_s:.2}s (PostgreSQL CPU {enrol_cpu:.2}s) \
         → {:.0} joins+enrolments/s, {:.0} enrolments/s for the enrolling alone ({:.2}s more), \
         PostgreSQL CPU {:.1} µs per enrolment",
        n as f64 / enrol_s,
        n as f64 / marginal,
        enrol_s - plain_s,
        (enrol_cpu - plain_cpu).max(0.0) / n as f64 * 1e6,
    );
    sqlx::raw_sql("analyze enrolments; analyze subscribers; analyze list_members")
        .execute(&pool)
        .await?;

    // (2) The campaign materialisation of the same people.
    let campaign = support::approved_campaign(
        &pool,
        org,
        users,
        &Audience::of_lists(&[welcome]),
        "Bench",
        "Hello",
        false,
    )
    .await?;
    let cpu = support::cpu_seconds(std::process::id(), postmaster).1;
    let t = Instant::now();
    let started = mailroom::workers::campaign::start_due(&pool).await?;
    let materialise = t.elapsed().as_secs_f64();
    let mat_cpu = support::cpu_seconds(std::process::id(), postmaster).1 - cpu;
    let recipients: i64 = sqlx::query_scalar("select count(*) from sends where campaign_id = $1")
        .bind(campaign)
        .fetch_one(&pool)
        .await?;
    println!(
        "campaign materialisation of the same people ({started:?} started): {recipients} recipients in {materialise:.2}s \
         → {:.0} recipients/s, PostgreSQL CPU {:.1} µs per recipient",
        recipients as f64 / materialise,
        mat_cpu / recipients.max(1) as f64 * 1e6
    );
    println!(
        "ratio to the materialisation: joins+enrolments/s {:.2}, enrolling alone {:.2}",
        (n as f64 / enrol_s) / (recipients as f64 / materialise),
        (n as f64 / marginal) / (recipients as f64 / materialise),
    );
    // The campaign's deliveries are not this bench's: cancel it so they never compete.
    support::transition(&pool, org, campaign, app::domain::Transition::Cancel)
        .await
        .context("cancelling the bench campaign")?;

    // (3) The first step (a wait) for everyone, then every wait ending at one instant.
    let t0: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("select now()").fetch_one(&pool).await?;
    let (moved, secs, cpu) = run_steps(&pool, t0, runners, batch, postmaster).await?;
    ensure!(moved == n, "{moved} took their first step of {n}");
    println!(
        "first step (a wait) for {n} people, {runners} runners, batch {batch}: {secs:.2}s → {:.0} steps/s, PostgreSQL CPU {:.1} µs per step",
        n as f64 / secs,
        cpu / n as f64 * 1e6
    );
    sqlx::raw_sql("vacuum analyze enrolments")
        .execute(&pool)
        .await?;
    let due = t0 + chrono::Duration::days(1) + chrono::Duration::seconds(1);
    // The delivery engine, when asked for: a worker process of its own on this cluster (its
    // step runner keeps the real clock, a day before these waits end, so it takes no step).
    let sender = match std::env::var("MAILROOM_BIN") {
        Ok(bin) => {
            let sink = support::Sink::start()?;
            let worker = std::process::Command::new(bin)
                .args(["worker", "--data-dir"])
                .arg(data.path())
                .args([
                    "--smtp-host",
                    "127.0.0.1",
                    "--smtp-port",
                    &sink.port.to_string(),
                ])
                .env("RUST_LOG", "warn")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::from(std::fs::File::create(
                    "/tmp/automation-bench-worker.log",
                )?))
                .spawn()?;
            Some((sink, worker))
        }
        Err(_) => None,
    };
    let start: chrono::DateTime<chrono::Utc> = sqlx::query_scalar("select clock_timestamp()")
        .fetch_one(&pool)
        .await?;
    let (moved, secs, cpu) = run_steps(&pool, due, runners, batch, postmaster).await?;
    ensure!(moved == n, "{moved} took their mail step of {n}");
    let (p50, p99, queued): (f64, f64, i64) = sqlx::query_as(
        "select extract(epoch from percentile_cont(0.5) within group (order by created_at - $2))::float8,
                extract(epoch from percentile_cont(0.99) within group (order by created_at - $2))::float8,
                count(*)
         from deliveries where automation_id = $1",
    )
    .bind(automation)
    .bind(start)
    .fetch_one(&pool)
    .await?;
    ensure!(queued as usize == n, "{queued} mails queued of {n}");
    println!(
        "{n} waits ending at one instant, {runners} runners, batch {batch}: {secs:.2}s → {:.0} mail steps/s, \
         PostgreSQL CPU {:.1} µs per step; due instant → message queued: p50 {p50:.1}s, p99 {p99:.1}s",
        n as f64 / secs,
        cpu / n as f64 * 1e6
    );
    if let Some((_sink, mut worker)) = sender {
        let open = || async {
            sqlx::query_scalar::<_, bool>(
                "select exists (select 1 from deliveries
                                where automation_id = $1 and status in ('queued', 'sending'))",
            )
            .bind(automation)
            .fetch_one(&pool)
            .await
        };
        while open().await? {
            ensure!(
                worker.try_wait()?.is_none(),
                "the worker stopped: see /tmp/automation-bench-worker.log"
            );
            tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        }
        support::stop(&mut worker)?;
        let (p50, p99, delivered, last): (f64, f64, i64, f64) = sqlx::query_as(
            "select extract(epoch from percentile_cont(0.5) within group (order by finished_at - $2))::float8,
                    extract(epoch from percentile_cont(0.99) within group (order by finished_at - $2))::float8,
                    count(*) filter (where status = 'delivered'),
                    extract(epoch from max(finished_at) - $2)::float8
             from deliveries where automation_id = $1",
        )
        .bind(automation)
        .bind(start)
        .fetch_one(&pool)
        .await?;
        ensure!(delivered as usize == n, "{delivered} delivered of {n}");
        println!(
            "the same mail sent by a `mailroom worker` process beside the step runners: {delivered} delivered, \
             the last {last:.1}s after the due instant ({:.0} msg/s); due instant → message delivered \
             (after its claim): p50 {p50:.1}s, p99 {p99:.1}s",
            delivered as f64 / last
        );
    }
    pool.close().await;
    pg.shutdown().await?;
    Ok(())
}
