//! Soak test: three `mailroom serve` replicas (workers on) on one data directory — the
//! first owns the embedded PostgreSQL cluster, the others join it through its socket — all
//! sending to one SMTP sink in this process (the suite's `testkit` sink), under one global rate
//! limit, for a fixed duration:
//!
//! - a campaign of `recipients` subscribers, approved and due when the replicas start;
//! - `orgs` organisations (one admin each; the campaign's org is one of them) whose weekly
//!   digest is due at the same moment (the replicas' first digest tick claims them);
//! - `dashboards` signed-in clients, spread over the replicas, each holding the campaign's live
//!   progress stream open and reloading the campaign page, the overview and the deliveries page
//!   every few seconds (latencies, non-2xx answers, dropped streams);
//! - every 10 s: each replica's RSS, the PostgreSQL cluster's total PSS, what the sink has, the
//!   delivery queue.
//!
//! Then (once everything is sent, or after a drain period) the replicas are stopped and the run is
//! reconciled: no Message-ID twice at the sink; every recipient and every digest in a terminal
//! state; delivered ⊆ sink ⊆ delivered ∪ unknown; the campaign's counters equal `count(*)`;
//! memory flat; no ERROR or panic in any replica's log (WARNs are listed). A summary table; the process exits
//! non-zero when a check fails.
//!
//! Some recipients exercise the other terminal states: every 1,000th subscriber is suppressed
//! before the start (left out when the campaign materialises), every 2,000th has a `bounce…` address the sink refuses with
//! 550 5.1.1 at RCPT (→ `failed`, and the address becomes suppressed).
//!
//! Run through `bench/soak.sh`. Usage: soak <mailroom binary> <site root> [seconds=600]
//! [recipients=200000] [orgs=10000] [dashboards=50]. Environment: `SOAK_RATE` (messages/s;
//! default: all the mail spread over the duration), `SOAK_DRAIN_SECONDS` (default: the larger of
//! 120 s and half the duration), `SOAK_RSS_LIMIT_PCT` (default 20), `SOAK_KEEP=1` keeps the data
//! directory and logs.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use sqlx::PgPool;
use testkit::{Record, SinkOptions, SmtpSink};

use app::db::campaign::edit::Audience;
use mailroom::embedded_pg::{self, EmbeddedPg};

#[path = "support/mod.rs"]
mod support;
use support::{free_port, processes, stop};

const EMAIL: &str = "owner@soak.example";
const PASSWORD: &str = "soak-password-1234";
const MESSAGE_ID_DOMAIN: &str = "mailroom.invalid";
const REPLICAS: usize = 3;
const SAMPLE_EVERY: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// /proc

fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn pss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Pss:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The PostgreSQL cluster: (total PSS KiB of the postmaster and its children, CPU seconds of
/// the postmaster, its live backends and the ones it reaped).
fn postgres_usage(postmaster: u32) -> (u64, f64) {
    let procs = processes();
    let mut pss = pss_kib(postmaster);
    let mut ticks = 0;
    for p in &procs {
        if p.0 == postmaster {
            ticks += p.2 + p.3;
        } else if p.1 == postmaster {
            pss += pss_kib(p.0);
            ticks += p.2;
        }
    }
    (pss, ticks as f64 / 100.0)
}

fn cpu_seconds(pid: u32) -> f64 {
    processes()
        .iter()
        .find(|p| p.0 == pid)
        .map_or(0.0, |p| p.2 as f64 / 100.0)
}

// ---------------------------------------------------------------------------------------------
// Seeding

struct Seeded {
    campaign: i64,
    recipients: i64,
    suppressed: i64,
    bounces: i64,
    digest_recipients: i64,
}

async fn seed(pool: &PgPool, recipients: i64, orgs: i64) -> anyhow::Result<Seeded> {
    use app::db::{lists, orgs as org_db};
    use app::domain::{EmailAddress, Role};
    let mut conn = pool.acquire().await?;
    let org = org_db::create(
        &mut conn,
        org_db::NewOrg {
            name: "Soak",
            slug: "soak",
            timezone: "UTC",
            from_name: "Soak",
            from_address: "news@soak.example",
        },
    )
    .await?;
    let hash = app::auth::hash_password(PASSWORD)?;
    let owner = app::db::user::create(
        &mut conn,
        app::db::user::NewUser {
            org_id: org,
            email: &EmailAddress::parse(EMAIL)?,
            name: "Owner",
            role: Role::Owner,
            password_hash: &hash,
        },
    )
    .await?;
    // The approver (four eyes); a viewer, so the campaign's org gets one digest like the others.
    let approver = app::db::user::create(
        &mut conn,
        app::db::user::NewUser {
            org_id: org,
            email: &EmailAddress::parse("approver@soak.example")?,
            name: "Approver",
            role: Role::Viewer,
            password_hash: "x",
        },
    )
    .await?;
    let list = lists::create(&mut conn, org, "everyone")
        .await?
        .context("the list exists")?;
    drop(conn);
    // The other orgs, one admin each, through the product's functions, 500 to a transaction.
    // Every org's digest is due from the current hour (UTC) on, for 24 hours.
    let now = chrono::Utc::now();
    let due = app::db::digest::admin::Schedule {
        weekday: chrono::Datelike::weekday(&now).number_from_monday() as i16,
        hour: chrono::Timelike::hour(&now) as i16,
        timezone: "UTC".into(),
    };
    let mut all_orgs = vec![org];
    for chunk in (2..=orgs).collect::<Vec<_>>().chunks(500) {
        let mut tx = pool.begin().await?;
        for i in chunk {
            let (name, slug, from) = (
                format!("Org {i}"),
                format!("org-{i}"),
                format!("news@org{i}.example"),
            );
            let new = org_db::NewOrg {
                name: &name,
                slug: &slug,
                timezone: "UTC",
                from_name: &name,
                from_address: &from,
            };
            let id = org_db::create(&mut tx, new).await?;
            let admin = app::db::user::NewUser {
                org_id: id,
                email: &EmailAddress::parse(&format!("admin@{slug}.example"))?,
                name: "Admin",
                role: Role::Admin,
                password_hash: "x",
            };
            app::db::user::create(&mut tx, admin).await?;
            all_orgs.push(id);
        }
        tx.commit().await?;
    }
    let mut tx = pool.begin().await?;
    for id in &all_orgs {
        app::db::digest::admin::save_schedule(&mut tx, *id, &due).await?;
    }
    tx.commit().await?;
    // The campaign's audience, imported as the CSV import does; every 2,000th a `bounce…`
    // address the sink refuses, every 1,000th (from the 3rd) suppressed by hand beforehand.
    let people: Vec<(String, String)> = (1..=recipients)
        .map(|i| {
            let local = if i % 2000 == 7 { "bounce" } else { "s" };
            (format!("{local}{i}@example.org"), format!("Person {i}"))
        })
        .collect();
    support::import(pool, org, list, &people).await?;
    let suppressed = people
        .iter()
        .enumerate()
        .filter(|(k, _)| (*k as i64 + 1) % 1000 == 3)
        .map(|(_, (e, _))| EmailAddress::parse(e))
        .collect::<Result<Vec<_>, _>>()?;
    let mut tx = pool.begin().await?;
    app::db::audience::suppress_many(&mut tx, org, &suppressed, "soak").await?;
    tx.commit().await?;
    let body = "Dear {{ name }}, this is the soak campaign.";
    let campaign = support::approved_campaign(
        pool,
        org,
        (owner, approver),
        &Audience::of_lists(&[list]),
        "Soak",
        body,
        false,
    )
    .await?;
    for table in [
        "orgs",
        "users",
        "subscribers",
        "list_members",
        "suppressions",
    ] {
        sqlx::raw_sql(&format!("vacuum analyze {table}"))
            .execute(pool)
            .await?;
    }
    let (suppressed, bounces): (i64, i64) = sqlx::query_as(
        "select count(*) filter (where exists (select 1 from suppressions x where x.org_id = s.org_id and x.email_lower = s.email_lower)),
                count(*) filter (where email_lower like 'bounce%')
         from subscribers s where org_id = $1",
    )
    .bind(org)
    .fetch_one(pool)
    .await?;
    let digest_recipients: i64 = sqlx::query_scalar(
        "select count(*) from users where weekly_digest and role in ('owner', 'admin')",
    )
    .fetch_one(pool)
    .await?;
    Ok(Seeded {
        campaign,
        recipients,
        suppressed,
        bounces,
        digest_recipients,
    })
}

// ---------------------------------------------------------------------------------------------
// Replicas

struct Replica {
    port: u16,
    child: Child,
    log: PathBuf,
}

fn serve(
    bin: &str,
    data: &Path,
    site: &str,
    sink: u16,
    rate: f64,
    log: PathBuf,
) -> anyhow::Result<Replica> {
    let port = free_port()?;
    let child = Command::new(bin)
        .args([
            "serve",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(data)
        .args(["--site-root", site, "--log-format", "json"])
        .args(["--smtp-host", "127.0.0.1", "--smtp-port", &sink.to_string()])
        .args(["--smtp-rate-per-second", &format!("{rate:.2}")])
        .args(["--message-id-domain", MESSAGE_ID_DOMAIN])
        // The default log level (info): the soak reads every WARN and ERROR.
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log)?))
        .spawn()?;
    Ok(Replica { port, child, log })
}

// ---------------------------------------------------------------------------------------------
// Dashboards

const PAGES: [&str; 3] = ["campaign page", "overview", "deliveries"];

#[derive(Default)]
struct Dash {
    latencies: Mutex<BTreeMap<&'static str, Vec<Duration>>>,
    /// "what: status or error" → count.
    failures: Mutex<BTreeMap<String, u64>>,
    stream_first: Mutex<Vec<Duration>>,
    stream_events: AtomicU64,
    stream_drops: AtomicU64,
}

impl Dash {
    fn fail(&self, what: String) {
        *self.failures.lock().unwrap().entry(what).or_default() += 1;
    }
}

/// Holds the campaign's progress stream open, reopening it if it ends, until `stop`.
async fn hold_stream(c: reqwest::Client, url: String, dash: Arc<Dash>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        let mut r = match c.get(&url).send().await {
            Ok(r) if r.status().is_success() => r,
            Ok(r) => {
                dash.fail(format!("progress stream: {}", r.status()));
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            Err(e) => {
                dash.fail(format!("progress stream: {e}"));
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let mut first = true;
        while let Ok(Some(chunk)) = r.chunk().await {
            let k = String::from_utf8_lossy(&chunk)
                .matches("event: progress")
                .count() as u64;
            if first && k > 0 {
                dash.stream_first.lock().unwrap().push(t.elapsed());
                first = false;
            }
            dash.stream_events.fetch_add(k, Ordering::Relaxed);
        }
        if !stop.load(Ordering::Relaxed) {
            dash.stream_drops.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// Reloads the three pages every 3–6 s until `stop`.
async fn reload_pages(
    c: reqwest::Client,
    origin: String,
    campaign: i64,
    dash: Arc<Dash>,
    stop: Arc<AtomicBool>,
) {
    let urls = [
        format!("{origin}/campaigns/{campaign}"),
        format!("{origin}/"),
        format!("{origin}/deliveries"),
    ];
    // Spread the clients' cycles.
    tokio::time::sleep(Duration::from_millis(rand::random::<u64>() % 3000)).await;
    while !stop.load(Ordering::Relaxed) {
        for (what, url) in PAGES.iter().zip(&urls) {
            let t = Instant::now();
            let outcome = async {
                let r = c.get(url).timeout(Duration::from_secs(60)).send().await?;
                let status = r.status();
                r.bytes().await?;
                anyhow::Ok(status)
            }
            .await;
            match outcome {
                Ok(s) if s.is_success() => dash
                    .latencies
                    .lock()
                    .unwrap()
                    .entry(what)
                    .or_default()
                    .push(t.elapsed()),
                Ok(s) => dash.fail(format!("{what}: {s}")),
                Err(e) => dash.fail(format!("{what}: {e}")),
            }
        }
        tokio::time::sleep(Duration::from_millis(3000 + rand::random::<u64>() % 3000)).await;
    }
}

fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let k = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[k].as_secs_f64() * 1000.0
}

// ---------------------------------------------------------------------------------------------
// Sampling

#[derive(Clone, Debug)]
struct Sample {
    t: f64,
    rss: [u64; REPLICAS],
    pg_pss: u64,
    at_sink: u64,
    queued: i64,
    sending: i64,
}

fn median(mut xs: Vec<u64>) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort();
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2] as f64
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) as f64 / 2.0
    }
}

async fn queue(pool: &PgPool) -> (i64, i64) {
    sqlx::query_as(
        // In the queue, and in flight: `queued` rows a claim took off the queue (one snapshot).
        "with q as (select count(*) as n from delivery_queue)
         select q.n, (select coalesce(sum(n), 0)::bigint from delivery_counts where status = 'queued') - q.n
         from q",
    )
    .fetch_one(pool)
    .await
    .unwrap_or((-1, -1))
}

/// Everything sent: the campaign finished, every org's digest claimed, no delivery queued or
/// in flight.
async fn all_done(pool: &PgPool, campaign: i64, orgs: i64) -> anyhow::Result<bool> {
    let (status, claimed, open): (String, i64, i64) = sqlx::query_as(
        "select (select status from campaigns where id = $1),
                (select count(*) from digest_sends),
                (select coalesce(sum(n), 0)::bigint from delivery_counts where status = 'queued')",
    )
    .bind(campaign)
    .fetch_one(pool)
    .await?;
    Ok(status == "sent" && claimed >= orgs && open == 0)
}

// ---------------------------------------------------------------------------------------------
// Logs

#[derive(Default)]
struct LogFindings {
    lines: u64,
    /// level → message → count
    by_level: BTreeMap<String, BTreeMap<String, u64>>,
    panics: Vec<String>,
}

fn read_log(path: &Path) -> LogFindings {
    let mut f = LogFindings::default();
    let Ok(text) = std::fs::read_to_string(path) else {
        f.panics.push(format!("cannot read {}", path.display()));
        return f;
    };
    for line in text.lines() {
        f.lines += 1;
        if line.contains("panicked") {
            f.panics.push(line.to_owned());
        }
        match serde_json::from_str::<serde_json::Value>(line) {
            Ok(v) => {
                let level = v["level"].as_str().unwrap_or("?").to_owned();
                if level == "ERROR" || level == "WARN" {
                    let fields = &v["fields"];
                    let mut msg = fields["message"].as_str().unwrap_or("").to_owned();
                    // Grouped by message, error and statement summary (not by timings).
                    for k in ["error", "summary"] {
                        if let Some(x) = fields[k].as_str() {
                            let x: String = x.chars().take(160).collect();
                            msg.push_str(&format!(" {k}={x}"));
                        }
                    }
                    let target = v["target"].as_str().unwrap_or("");
                    *f.by_level
                        .entry(level)
                        .or_default()
                        .entry(format!("{target}: {msg}"))
                        .or_default() += 1;
                }
            }
            Err(_) => {
                // Not a log record (a panic message, a backtrace): count it as an error line.
                *f.by_level
                    .entry("UNSTRUCTURED".into())
                    .or_default()
                    .entry(line.chars().take(200).collect())
                    .or_default() += 1;
            }
        }
    }
    f
}

// ---------------------------------------------------------------------------------------------

struct Checks(Vec<(String, bool, String)>);

impl Checks {
    /// Prints the table of checks; returns how many failed.
    fn print(&self) -> usize {
        println!("\n| check | result | detail |");
        println!("| --- | --- | --- |");
        let mut failed = 0;
        for (what, ok, detail) in &self.0 {
            println!(
                "| {what} | {} | {detail} |",
                if *ok { "ok" } else { "FAILED" }
            );
            failed += usize::from(!ok);
        }
        failed
    }

    fn add(&mut self, what: impl Into<String>, ok: bool, detail: impl Into<String>) {
        self.0.push((what.into(), ok, detail.into()));
    }
}

fn mib(kib: f64) -> f64 {
    kib / 1024.0
}

/// The soak's parameters: the command line and the `SOAK_*` environment.
struct Plan {
    bin: String,
    site: String,
    seconds: u64,
    recipients: i64,
    orgs: i64,
    dashboards: usize,
    /// After the duration, how long sending may go on before the soak gives up.
    drain: Duration,
    /// Replica RSS growth, warm-up to end, above which the soak fails.
    rss_limit_pct: f64,
    /// Keep the data directory.
    keep: bool,
}

impl Plan {
    fn from_args() -> anyhow::Result<Plan> {
        let args: Vec<String> = std::env::args().collect();
        let usage =
            "usage: soak <mailroom binary> <site root> [seconds] [recipients] [orgs] [dashboards]";
        let env_f64 = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<f64>().ok());
        let seconds: u64 = args.get(3).map_or(Ok(600), |s| s.parse())?;
        let plan = Plan {
            bin: args.get(1).context(usage)?.clone(),
            site: args.get(2).context(usage)?.clone(),
            seconds,
            recipients: args.get(4).map_or(Ok(200_000), |s| s.parse())?,
            orgs: args.get(5).map_or(Ok(10_000), |s| s.parse())?,
            dashboards: args.get(6).map_or(Ok(50), |s| s.parse())?,
            drain: Duration::from_secs_f64(
                env_f64("SOAK_DRAIN_SECONDS").unwrap_or((seconds as f64 / 2.0).max(120.0)),
            ),
            rss_limit_pct: env_f64("SOAK_RSS_LIMIT_PCT").unwrap_or(20.0),
            keep: std::env::var("SOAK_KEEP").is_ok_and(|v| v == "1"),
        };
        if plan.seconds < 30 || plan.orgs < 1 || plan.recipients < 1 {
            bail!("at least 30 seconds, 1 org and 1 recipient");
        }
        Ok(plan)
    }

    fn duration(&self) -> Duration {
        Duration::from_secs(self.seconds)
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let plan = Plan::from_args()?;
    let data = tempfile::Builder::new()
        .prefix("mrsoak")
        .tempdir_in("/tmp")?;
    let logs = data.path().join("logs");
    std::fs::create_dir_all(&logs)?;
    println!(
        "soak: {} s, {} recipients, {} orgs, {} dashboards, {REPLICAS} replicas; data in {}",
        plan.seconds,
        plan.recipients,
        plan.orgs,
        plan.dashboards,
        data.path().display()
    );

    let t = Instant::now();
    let seeded = seed_cluster(data.path(), plan.recipients, plan.orgs).await?;
    let total = seeded.recipients - seeded.suppressed + seeded.digest_recipients;
    let rate = std::env::var("SOAK_RATE")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(total as f64 / plan.seconds as f64);
    println!(
        "seeded in {:.1} s: campaign {} to {} subscribers ({} suppressed beforehand, {} bouncing), {} orgs with {} digest recipients; {total} messages to send at {rate:.1}/s (global limit)",
        t.elapsed().as_secs_f64(),
        seeded.campaign,
        seeded.recipients,
        seeded.suppressed,
        seeded.bounces,
        plan.orgs,
        seeded.digest_recipients,
    );

    // The suite's sink, keeping only Message-ID counts: it refuses `bounce…` recipients with
    // 550 5.1.1 at RCPT and accepts everyone else.
    let sink = SmtpSink::start_with(SinkOptions {
        record: Record::IdsOnly,
        ..SinkOptions::default()
    });
    let sink_port = sink.addr.port();
    let started = Instant::now();
    let mut replicas = start_replicas(&plan, data.path(), &logs, sink_port, rate).await?;
    let pids: Vec<u32> = replicas.iter().map(|r| r.child.id()).collect();
    let guest = EmbeddedPg::open(data.path(), embedded_pg::Options::default()).await?;
    let pool =
        mailroom::ops::database::connect(guest.connect_options(embedded_pg::DATABASE)).await?;
    let postmaster = support::postmaster_pid(data.path())?;
    let cpu_before: Vec<f64> = pids.iter().map(|p| cpu_seconds(*p)).collect();
    let pg_cpu_before = postgres_usage(postmaster).1;

    let watched = Watched {
        pool: &pool,
        pids: &pids,
        postmaster,
        sink: &sink,
        campaign: seeded.campaign,
        started,
    };
    let outcome = drive(&plan, &mut replicas, &watched).await;

    let cpu: Vec<f64> = pids
        .iter()
        .zip(&cpu_before)
        .map(|(p, b)| cpu_seconds(*p) - b)
        .collect();
    let pg_cpu = postgres_usage(postmaster).1 - pg_cpu_before;
    let wall = started.elapsed().as_secs_f64();
    // This process leaves the cluster (as a guest it would take it over when the owner stops),
    // then the replicas stop: the guests first, the owner last (it stops the cluster).
    pool.close().await;
    guest.shutdown().await?;
    let mut exits = Vec::new();
    for r in replicas.iter_mut().rev() {
        exits.push(stop(&mut r.child)?);
    }
    exits.reverse();
    let run = outcome?;

    // Reconcile, as the cluster's owner again.
    let pg = EmbeddedPg::open(data.path(), embedded_pg::Options::default()).await?;
    let pool = mailroom::ops::database::connect(pg.connect_options(embedded_pg::DATABASE)).await?;
    let mut checks = Checks(Vec::new());
    let report = reconcile(&pool, &seeded, plan.orgs, &sink, &mut checks).await;
    pool.close().await;
    pg.shutdown().await?;
    let report = report?;

    println!("\n==== soak summary ====");
    println!(
        "command: soak {} {} {} {}; rate limit {rate:.1} messages/s; wall {wall:.0} s",
        plan.seconds, plan.recipients, plan.orgs, plan.dashboards
    );
    match run.done_at {
        Some(d) => println!("everything sent after {:.0} s", d.as_secs_f64()),
        None => println!("NOT everything sent after {:.0} s", wall),
    }
    checks.add(
        "everything sent within duration + drain",
        run.done_at.is_some(),
        run.done_at
            .map_or("no".into(), |d| format!("{:.0} s", d.as_secs_f64())),
    );
    println!("{report}");
    report_throughput(&run.samples);
    report_memory(&plan, &run.samples, &cpu, pg_cpu, &mut checks);
    report_dashboards(&plan, &run.dash, &mut checks);
    report_logs(&replicas, &exits, &mut checks);
    let failed = checks.print();
    if plan.keep {
        let kept = data.keep();
        println!("kept {}", kept.display());
    }
    if failed > 0 {
        bail!("{failed} check(s) failed");
    }
    println!("all checks passed");
    Ok(())
}

/// Seeds the cluster as its owner, then stops it: the first replica will own it.
async fn seed_cluster(data: &Path, recipients: i64, orgs: i64) -> anyhow::Result<Seeded> {
    let pg = EmbeddedPg::open(data, embedded_pg::Options::default()).await?;
    let pool = mailroom::ops::database::connect(pg.connect_options(embedded_pg::DATABASE)).await?;
    app::db::migrate::run(&pool, true).await?;
    let s = seed(&pool, recipients, orgs).await?;
    pool.close().await;
    pg.shutdown().await?;
    Ok(s)
}

/// The replicas, started one after another: the first owns the cluster and starts it before
/// the others join.
async fn start_replicas(
    plan: &Plan,
    data: &Path,
    logs: &Path,
    sink_port: u16,
    rate: f64,
) -> anyhow::Result<Vec<Replica>> {
    let started = Instant::now();
    let mut replicas = Vec::new();
    for k in 0..REPLICAS {
        let r = serve(
            &plan.bin,
            data,
            &plan.site,
            sink_port,
            rate,
            logs.join(format!("replica-{}.log", k + 1)),
        )?;
        support::ready(
            &format!("http://127.0.0.1:{}", r.port),
            Duration::from_secs(90),
        )
        .await?;
        replicas.push(r);
    }
    println!(
        "{REPLICAS} replicas ready in {:.1} s on ports {:?}",
        started.elapsed().as_secs_f64(),
        replicas.iter().map(|r| r.port).collect::<Vec<_>>()
    );
    Ok(replicas)
}

/// What the soak watches while it runs.
struct Watched<'a> {
    pool: &'a PgPool,
    pids: &'a [u32],
    postmaster: u32,
    sink: &'a SmtpSink,
    campaign: i64,
    started: Instant,
}

/// What a run measured.
struct Run {
    dash: Arc<Dash>,
    samples: Vec<Sample>,
    /// When everything was sent, if it was.
    done_at: Option<Duration>,
}

/// Opens the dashboards, then samples every 10 s until the duration is over, and after it until
/// everything is sent or the drain period is over.
async fn drive(plan: &Plan, replicas: &mut [Replica], w: &Watched<'_>) -> anyhow::Result<Run> {
    // Dashboards: signed in one after another (the sign-in throttle counts concurrent
    // attempts), client k on replica k % 3.
    let dash = Arc::new(Dash::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for k in 0..plan.dashboards {
        let port = replicas[k % REPLICAS].port;
        let origin = format!("http://127.0.0.1:{port}");
        let c = support::signed_in(&origin, EMAIL, PASSWORD).await?;
        tasks.push(tokio::spawn(hold_stream(
            c.clone(),
            format!("{origin}/api/campaigns/{}/progress", w.campaign),
            dash.clone(),
            stop.clone(),
        )));
        tasks.push(tokio::spawn(reload_pages(
            c,
            origin,
            w.campaign,
            dash.clone(),
            stop.clone(),
        )));
    }
    println!(
        "{} dashboards signed in and open at {:.1} s",
        plan.dashboards,
        w.started.elapsed().as_secs_f64()
    );
    let duration = plan.duration();
    let mut samples: Vec<Sample> = Vec::new();
    let mut done_at = None;
    let mut dashboards_stopped = false;
    loop {
        let t = w.started.elapsed();
        let s = sample(w, t).await;
        samples.push(s);
        for r in replicas.iter_mut() {
            if let Some(status) = r.child.try_wait()? {
                bail!(
                    "the replica on port {} exited during the soak: {status}",
                    r.port
                );
            }
        }
        if done_at.is_none() && all_done(w.pool, w.campaign, plan.orgs).await? {
            done_at = Some(w.started.elapsed());
            println!(
                "everything sent at {:.0} s",
                w.started.elapsed().as_secs_f64()
            );
        }
        if t >= duration && !dashboards_stopped {
            stop.store(true, Ordering::Relaxed);
            dashboards_stopped = true;
        }
        if t >= duration && (done_at.is_some() || t >= duration + plan.drain) {
            break;
        }
        let next = SAMPLE_EVERY * samples.len() as u32;
        tokio::time::sleep(
            next.saturating_sub(w.started.elapsed())
                .max(Duration::from_millis(10)),
        )
        .await;
    }
    for t in &tasks {
        t.abort();
    }
    Ok(Run {
        dash,
        samples,
        done_at,
    })
}

/// One sample of the replicas' memory, PostgreSQL's, the sink and the queue, printed.
async fn sample(w: &Watched<'_>, t: Duration) -> Sample {
    let mut rss = [0; REPLICAS];
    for (k, pid) in w.pids.iter().enumerate() {
        rss[k] = status_kib(*pid, "VmRSS:").unwrap_or(0);
    }
    let (queued, sending) = queue(w.pool).await;
    let s = Sample {
        t: t.as_secs_f64(),
        rss,
        pg_pss: postgres_usage(w.postmaster).0,
        at_sink: w.sink.accepted_count(),
        queued,
        sending,
    };
    println!(
        "t={:>5.0}s  RSS MiB {}  PostgreSQL PSS {:.0} MiB  at sink {:>7}  queued {:>6}  sending {:>4}  load {}",
        s.t,
        s.rss.iter().map(|r| format!("{:>5.1}", mib(*r as f64))).collect::<Vec<_>>().join(" "),
        mib(s.pg_pss as f64),
        s.at_sink,
        s.queued,
        s.sending,
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().split_whitespace().next().unwrap_or(""),
    );
    s
}

/// Sink arrivals per second, minute by minute.
fn report_throughput(samples: &[Sample]) {
    let per_minute: Vec<String> = samples
        .iter()
        .step_by(6)
        .collect::<Vec<_>>()
        .windows(2)
        .map(|w| {
            format!(
                "{:.0}",
                (w[1].at_sink - w[0].at_sink) as f64 / (w[1].t - w[0].t)
            )
        })
        .collect();
    println!(
        "sink arrivals per second, minute by minute: {}",
        per_minute.join(", ")
    );
}

/// Memory after warm-up against the end, per replica (checked) and for PostgreSQL (shown).
fn report_memory(plan: &Plan, samples: &[Sample], cpu: &[f64], pg_cpu: f64, checks: &mut Checks) {
    let rss_limit_pct = plan.rss_limit_pct;
    let w = (plan.seconds as f64 / 5.0).min(60.0);
    let window = |from: f64, to: f64, f: &dyn Fn(&Sample) -> u64| {
        median(
            samples
                .iter()
                .filter(|s| s.t >= from - 0.5 && s.t < to - 0.5)
                .map(f)
                .collect(),
        )
    };
    let end = plan.seconds as f64;
    println!(
        "\nmemory: median of [{:.0} s, {:.0} s) (after warm-up) vs median of [{:.0} s, {:.0} s] (the end); fail above +{rss_limit_pct}%",
        w,
        2.0 * w,
        end - w,
        end
    );
    println!("| process | RSS first sample | warm-up median | end median | growth | CPU s |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (k, cpu_k) in cpu.iter().enumerate() {
        let early = window(w, 2.0 * w, &|s| s.rss[k]);
        let late = window(end - w, end + 1.0, &|s| s.rss[k]);
        let growth = (late - early) / early * 100.0;
        println!(
            "| replica {} | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:+.1} % | {:.0} |",
            k + 1,
            mib(samples.first().map_or(0, |s| s.rss[k]) as f64),
            mib(early),
            mib(late),
            growth,
            cpu_k
        );
        checks.add(
            format!("replica {} memory flat", k + 1),
            growth <= rss_limit_pct,
            format!("{:.1} → {:.1} MiB ({growth:+.1} %)", mib(early), mib(late)),
        );
    }
    let early = window(w, 2.0 * w, &|s| s.pg_pss);
    let late = window(end - w, end + 1.0, &|s| s.pg_pss);
    println!(
        "| PostgreSQL (PSS, all processes) | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:+.1} % (not checked) | {:.0} |",
        mib(samples.first().map_or(0, |s| s.pg_pss) as f64),
        mib(early),
        mib(late),
        (late - early) / early * 100.0,
        pg_cpu
    );
}

/// The dashboards' latencies and failures, and the progress streams.
fn report_dashboards(plan: &Plan, dash: &Dash, checks: &mut Checks) {
    println!("\ndashboards ({} clients):", plan.dashboards);
    println!("| request | count | p50 | p99 | max |");
    println!("| --- | --- | --- | --- | --- |");
    for (what, mut xs) in std::mem::take(&mut *dash.latencies.lock().unwrap()) {
        xs.sort();
        println!(
            "| {what} | {} | {:.1} ms | {:.1} ms | {:.1} ms |",
            xs.len(),
            percentile_ms(&xs, 0.5),
            percentile_ms(&xs, 0.99),
            percentile_ms(&xs, 1.0)
        );
    }
    let mut first = dash.stream_first.lock().unwrap().clone();
    first.sort();
    println!(
        "| progress stream: connect → first reading | {} | {:.1} ms | {:.1} ms | {:.1} ms |",
        first.len(),
        percentile_ms(&first, 0.5),
        percentile_ms(&first, 0.99),
        percentile_ms(&first, 1.0)
    );
    println!(
        "progress events read: {}; streams that ended before the stop: {}",
        dash.stream_events.load(Ordering::Relaxed),
        dash.stream_drops.load(Ordering::Relaxed)
    );
    let failures = dash.failures.lock().unwrap().clone();
    for (what, n) in &failures {
        println!("  non-2xx / error: {what} × {n}");
    }
    checks.add(
        "dashboards: no non-2xx or failed request",
        failures.is_empty(),
        format!("{} kinds", failures.len()),
    );
    checks.add(
        "progress streams stayed open",
        dash.stream_drops.load(Ordering::Relaxed) == 0,
        format!("{} ended early", dash.stream_drops.load(Ordering::Relaxed)),
    );
}

/// Each replica's log (no ERROR, no panic) and its exit on SIGTERM (clean).
fn report_logs(replicas: &[Replica], exits: &[std::process::ExitStatus], checks: &mut Checks) {
    println!("\nlogs:");
    for (k, (r, exit)) in replicas.iter().zip(exits).enumerate() {
        let f = read_log(&r.log);
        let count = |lvl: &str| f.by_level.get(lvl).map_or(0, |m| m.values().sum::<u64>());
        println!(
            "replica {} ({} lines): ERROR {}, WARN {}, unstructured {}, panics {}; exit {exit}",
            k + 1,
            f.lines,
            count("ERROR"),
            count("WARN"),
            count("UNSTRUCTURED"),
            f.panics.len(),
        );
        for (lvl, msgs) in &f.by_level {
            for (m, n) in msgs.iter().take(15) {
                println!("  {lvl} × {n}: {m}");
            }
        }
        checks.add(
            format!("replica {}: no ERROR or panic in the log", k + 1),
            count("ERROR") == 0 && f.panics.is_empty() && count("UNSTRUCTURED") == 0,
            format!("{} ERROR, {} WARN", count("ERROR"), count("WARN")),
        );
        checks.add(
            format!("replica {}: clean exit on SIGTERM", k + 1),
            exit.success(),
            exit.to_string(),
        );
    }
}

/// The database against the sink, after the replicas have stopped.
async fn reconcile(
    pool: &PgPool,
    seeded: &Seeded,
    orgs: i64,
    sink: &SmtpSink,
    checks: &mut Checks,
) -> anyhow::Result<String> {
    use std::fmt::Write;
    let mut out = String::new();
    let campaign = seeded.campaign;
    let ids = sink.ids();
    let dupes: Vec<(&String, &u32)> = ids.iter().filter(|(_, n)| **n > 1).collect();
    writeln!(
        out,
        "sink: {} messages accepted, {} distinct Message-IDs, {} without one, {} RCPT refused (bounce…), {} connections",
        sink.accepted_count(),
        ids.len(),
        sink.without_id(),
        sink.refused_rcpt(),
        sink.connections()
    )?;
    checks.add(
        "no Message-ID twice at the sink",
        dupes.is_empty(),
        format!(
            "{} duplicated{}",
            dupes.len(),
            dupes
                .iter()
                .take(5)
                .map(|(id, n)| format!(" {id}×{n}"))
                .collect::<String>()
        ),
    );
    checks.add(
        "every message at the sink has a Message-ID",
        sink.without_id() == 0,
        sink.without_id().to_string(),
    );

    // Sends and deliveries by status.
    let sends: Vec<(String, i64)> = sqlx::query_as(
        "select status, count(*) from sends where campaign_id = $1 group by 1 order by 1",
    )
    .bind(campaign)
    .fetch_all(pool)
    .await?;
    let deliveries: Vec<(String, String, i64)> =
        sqlx::query_as("select kind, status, count(*) from deliveries group by 1, 2 order by 1, 2")
            .fetch_all(pool)
            .await?;
    let get = |kind: &str, status: &str| {
        deliveries
            .iter()
            .find(|d| d.0 == kind && d.1 == status)
            .map_or(0, |d| d.2)
    };
    let send = |status: &str| sends.iter().find(|s| s.0 == status).map_or(0, |s| s.1);
    writeln!(out, "campaign sends: {sends:?}")?;
    writeln!(out, "\n| deliveries | delivered | failed | unknown | suppressed | cancelled | queued | sending |")?;
    writeln!(out, "| --- | --- | --- | --- | --- | --- | --- | --- |")?;
    for kind in ["campaign", "digest"] {
        writeln!(
            out,
            "| {kind} | {} | {} | {} | {} | {} | {} | {} |",
            get(kind, "delivered"),
            get(kind, "failed"),
            get(kind, "unknown"),
            get(kind, "suppressed"),
            get(kind, "cancelled"),
            get(kind, "queued"),
            get(kind, "sending")
        )?;
    }
    let open: i64 = deliveries
        .iter()
        .filter(|d| d.1 == "queued" || d.1 == "sending")
        .map(|d| d.2)
        .sum();
    checks.add(
        "no delivery left queued or sending",
        open == 0,
        open.to_string(),
    );
    // Materialisation leaves suppressed addresses out (opt-out first); a suppression that
    // arrives later is caught at claim time (a `suppressed` send or delivery).
    let total_sends: i64 = sends.iter().map(|s| s.1).sum();
    let (missing, missing_suppressed, suppressed_sent): (i64, i64, i64) = sqlx::query_as(
        "select count(*) filter (where x.id is null),
                count(*) filter (where x.id is null and sup.email_lower is not null),
                count(*) filter (where sup.email_lower is not null and d.status in ('delivered', 'unknown', 'failed'))
         from subscribers s
         left join sends x on x.campaign_id = $1 and x.subscriber_id = s.id
         left join suppressions sup on sup.org_id = s.org_id and sup.email_lower = s.email_lower and sup.source = 'soak'
         left join deliveries d on d.job_id = x.job_id
         where s.org_id = (select org_id from campaigns where id = $1)",
    )
    .bind(campaign)
    .fetch_one(pool)
    .await?;
    checks.add(
        "every recipient has one send (or was left out as suppressed), none queued",
        total_sends + missing == seeded.recipients
            && missing == missing_suppressed
            && send("queued") == 0,
        format!(
            "{total_sends} sends, {missing} left out ({missing_suppressed} of them suppressed), {} queued",
            send("queued")
        ),
    );
    checks.add(
        "pre-suppressed recipients never sent",
        suppressed_sent == 0
            && missing_suppressed + send("suppressed") + get("campaign", "suppressed")
                == seeded.suppressed,
        format!(
            "{missing_suppressed} left out + {} sends + {} deliveries suppressed of {}; {suppressed_sent} sent",
            send("suppressed"),
            get("campaign", "suppressed"),
            seeded.suppressed
        ),
    );
    let campaign_terminal: i64 = ["delivered", "failed", "unknown", "suppressed", "cancelled"]
        .iter()
        .map(|s| get("campaign", s))
        .sum();
    checks.add(
        "every handed-off recipient has one delivery in a terminal state",
        campaign_terminal == send("handed_off"),
        format!(
            "{campaign_terminal} terminal deliveries, {} handed off",
            send("handed_off")
        ),
    );
    let orphans: i64 = sqlx::query_scalar(
        "select count(*) from sends s where s.campaign_id = $1 and s.status = 'handed_off'
           and not exists (select 1 from deliveries d where d.job_id = s.job_id)",
    )
    .bind(campaign)
    .fetch_one(pool)
    .await?;
    checks.add(
        "no handed-off send without its delivery",
        orphans == 0,
        orphans.to_string(),
    );
    checks.add(
        "bounces failed (550 5.1.1)",
        get("campaign", "failed") == seeded.bounces,
        format!(
            "{} failed, {} expected",
            get("campaign", "failed"),
            seeded.bounces
        ),
    );
    let (digest_weeks, scheduled, digest_users, digest_rows): (i64, i64, i64, i64) =
        sqlx::query_as(
            "select (select count(*) from digest_sends),
                    (select count(*) from digest_sends where kind = 'scheduled'),
                    (select count(distinct user_id) from deliveries where kind = 'digest'),
                    (select count(*) from deliveries where kind = 'digest')",
        )
        .fetch_one(pool)
        .await?;
    writeln!(
        out,
        "digests: {digest_weeks} weeks claimed ({scheduled} scheduled) for {orgs} orgs; {digest_rows} digest deliveries to {digest_users} users ({} expected)",
        seeded.digest_recipients
    )?;
    checks.add(
        "one scheduled digest week per org",
        digest_weeks == orgs && scheduled == orgs,
        format!("{digest_weeks} weeks, {scheduled} scheduled"),
    );
    checks.add(
        "one digest per admin",
        digest_rows == seeded.digest_recipients && digest_users == seeded.digest_recipients,
        format!("{digest_rows} deliveries, {digest_users} users"),
    );
    let digest_terminal: i64 = ["delivered", "failed", "unknown", "suppressed", "cancelled"]
        .iter()
        .map(|s| get("digest", s))
        .sum();
    checks.add(
        "every digest in a terminal state",
        digest_terminal == digest_rows,
        format!("{digest_terminal} of {digest_rows}"),
    );

    // Delivered ⊆ sink ⊆ delivered ∪ unknown, by Message-ID.
    let rows: Vec<(String, String)> = sqlx::query_as("select job_id, status from deliveries")
        .fetch_all(pool)
        .await?;
    let mut by_id: HashMap<String, &str> = HashMap::with_capacity(rows.len());
    let mut bad_jobs = 0;
    for (job, status) in &rows {
        match job.parse::<app::domain::JobId>() {
            Ok(j) => {
                by_id.insert(j.message_id(MESSAGE_ID_DOMAIN), status);
            }
            Err(_) => bad_jobs += 1,
        }
    }
    let delivered_missing = by_id
        .iter()
        .filter(|(id, s)| **s == "delivered" && !ids.contains_key(*id))
        .count();
    let mut arrived_unknown = 0;
    let mut stray = 0;
    for id in ids.keys() {
        match by_id.get(id) {
            Some(&"delivered") => {}
            Some(&"unknown") => arrived_unknown += 1,
            _ => stray += 1,
        }
    }
    let unknown_total = get("campaign", "unknown") + get("digest", "unknown");
    writeln!(
        out,
        "by Message-ID: delivered but not at the sink {delivered_missing}; at the sink but neither delivered nor unknown {stray}; unknown {unknown_total} ({arrived_unknown} of them arrived)"
    )?;
    checks.add(
        "delivered ⊆ sink",
        delivered_missing == 0 && bad_jobs == 0,
        format!("{delivered_missing} missing"),
    );
    checks.add(
        "sink ⊆ delivered ∪ unknown",
        stray == 0,
        format!("{stray} stray"),
    );

    // The campaign's counters (what the dashboard shows) against count(*).
    let (status, c_delivered, c_failed, c_unknown): (String, i64, i64, i64) = sqlx::query_as(
        "select c.status, coalesce(sum(p.delivered), 0)::bigint, coalesce(sum(p.failed), 0)::bigint,
                coalesce(sum(p.unknown), 0)::bigint
         from campaigns c left join progress_slots p on p.campaign_id = c.id
         where c.id = $1 group by c.status",
    )
    .bind(campaign)
    .fetch_one(pool)
    .await?;
    checks.add(
        "campaign sent, counters = count(*)",
        status == "sent"
            && c_delivered == get("campaign", "delivered")
            && c_failed == get("campaign", "failed")
            && c_unknown == get("campaign", "unknown"),
        format!(
            "{status}; counters delivered {c_delivered}, failed {c_failed}, unknown {c_unknown}"
        ),
    );
    Ok(out)
}
