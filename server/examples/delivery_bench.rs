//! Delivery throughput benchmark: on this machine, in one run,
//! (1) the raw ceiling — Mailroom's SMTP client alone (same stage-by-stage code, same
//!     TCP_NODELAY sockets, same concurrency) blasting Postfix `smtp-sink`, no database;
//! (2) the delivery engine — a real `mailroom worker` process draining N queued deliveries from
//!     the embedded PostgreSQL (fsync on, as in production) into the same sink.
//! and, in the same run, the two peers the engine is judged against:
//! (3) Postfix's `smtp-source` at the same connection count into the same sink, before the engine
//!     and again after it (the machine's speed drifts; the two readings bracket the ratio);
//! (4) graphile-worker (npm) working through the same number of no-op jobs, batched, on the same
//!     PostgreSQL cluster: its database CPU per job against the engine's per message.
//! Prints messages/s, CPU per message of every process, the ratios, and the worker's peak RSS.
//!
//! Run through `bench/delivery.sh` (builds release, installs graphile-worker, then runs this).
//! Usage: delivery_bench <mailroom binary> [messages=100000] [connections=8] [batch=200] [orgs=1]
//! BENCH_DKIM=1 signs every message the engine sends (BENCH_DKIM=ed25519: RSA and Ed25519); BENCH_MARKS_AHEAD=K sets the worker's
//! `--delivery-marks-ahead`; BENCH_GRAPHILE_CONCURRENCY (128) is graphile-worker's. BENCH_REPLY_DELAY_MS=20 replaces Postfix's
//! sink by one that answers each burst of commands after that delay (a distant relay; the
//! testkit sink, in this process, so no sink CPU is printed). The worker inherits this
//! process's environment, so any `MAILROOM_*` setting (`MAILROOM_DELIVERY_OUTCOME_GATHER_MS=5`)
//! reaches it. BENCH_SUPPRESSIONS=N gives every org N suppressed addresses (none of them queued),
//! as an org with a long opt-out list has: the claim and the body-start mark re-check each
//! message's address against that list. BENCH_PG_SET=name=value[;name=value…] sets PostgreSQL
//! settings for the run (`synchronous_commit=off` prices the commit's flush; a diagnostic, never
//! production). With `session_preload_libraries=auto_explain;auto_explain.log_min_duration=0;
//! auto_explain.log_analyze=on;auto_explain.log_triggers=on;auto_explain.sample_rate=0.01` a
//! sample of the statements' plans, with the time of each statement trigger, is kept in
//! /tmp/bench-postgres.log.
//! BENCH_PROBE=1 times, on a connection of its own, a bare round trip (`select 1`) and a one-row
//! autocommit insert, every 5 ms, for a second before the engine starts and throughout its run:
//! the floor under each ledger write, on an idle machine and beside the engine.
//! BENCH_WEBHOOKS=1 gives every org an enabled webhook endpoint for every message event (a
//! receiver in this process answering 200): the engine's rate then includes writing each
//! outcome's event, the sender delivers them beside it, and afterwards every event is sent once
//! more with the sender alone, for its events per second and PostgreSQL CPU per event.
//! BENCH_WEBHOOK_IN_FLIGHT=N sets every endpoint's requests in flight (the product's default
//! unless set).
//! BENCH_WEBHOOKS=slow (2 orgs or more) gives the first org's endpoint a receiver that answers
//! each request after 2 s: the mail must finish, and every other org's events reach their
//! receiver, while that endpoint still has most of its events waiting (checked as ordering;
//! the figures say by how much).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use lettre::Address;

use mailroom::embedded_pg::{self, EmbeddedPg};
use mailroom::smtp::{BodyOutcome, Connection, Target};

#[path = "support/mod.rs"]
mod support;
use support::Sink;

/// The raw ceiling: `connections` tasks, each its own connection, `messages` in all.
async fn raw(port: u16, connections: usize, messages: usize) -> anyhow::Result<f64> {
    let target = Target::plain("127.0.0.1", port, "bench.local", Duration::from_secs(30));
    let from: Address = "news@bench.example".parse()?;
    let started = Instant::now();
    let per = messages / connections;
    let tasks = (0..connections).map(|c| {
        let (target, from) = (target.clone(), from.clone());
        tokio::spawn(async move {
            let mut conn = Connection::open(&target).await.map_err(|r| anyhow::anyhow!(r.reply))?;
            for i in 0..per {
                let to: Address = format!("r{c}x{i}@example.org").parse()?;
                let body = format!(
                    "From: news@bench.example\r\nTo: {to}\r\nMessage-ID: <raw.{c}.{i}@bench.example>\r\nSubject: Mailroom test message\r\n\r\nThis is a test message from Mailroom.\r\n"
                );
                conn.prepare(&from, &to, mailroom::smtp::Needs::default()).await.map_err(|r| anyhow::anyhow!(r.reply))?;
                match conn.body(body.as_bytes()).await {
                    BodyOutcome::Accepted(_) => {}
                    other => bail!("raw send failed: {other:?}"),
                }
            }
            conn.quit().await;
            anyhow::Ok(())
        })
    });
    for t in futures::future::join_all(tasks).await {
        t??;
    }
    Ok((per * connections) as f64 / started.elapsed().as_secs_f64())
}

/// Postfix's `smtp-source`: `connections` sessions, `messages` in all, each session kept open
/// across its messages (`-d`). Returns (messages/s, its CPU seconds).
fn smtp_source(port: u16, connections: usize, messages: usize) -> anyhow::Result<(f64, f64)> {
    let started = Instant::now();
    let out = Command::new("bash")
        .args([
            "-c",
            "TIMEFORMAT='%U %S'; time smtp-source \"$@\" >/dev/null",
            "smtp-source",
        ])
        .args([
            "-d",
            "-s",
            &connections.to_string(),
            "-m",
            &messages.to_string(),
        ])
        .args(["-f", "news@bench.example", "-t", "r@example.org"])
        .arg(format!("127.0.0.1:{port}"))
        .output()
        .context("running Postfix smtp-source")?;
    let rate = messages as f64 / started.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "smtp-source failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let times = String::from_utf8_lossy(&out.stderr);
    let cpu = times
        .split_whitespace()
        .filter_map(|t| t.parse::<f64>().ok())
        .sum();
    Ok((rate, cpu))
}

/// graphile-worker on a database of the same cluster: `jobs` no-op jobs queued (not measured),
/// then worked through by `concurrency` batched workers. Returns (jobs/s, PostgreSQL CPU
/// seconds, node's CPU seconds).
async fn graphile(
    pool: &sqlx::PgPool,
    pg: &EmbeddedPg,
    jobs: usize,
    concurrency: usize,
) -> anyhow::Result<(f64, f64, f64)> {
    sqlx::query("drop database if exists graphile")
        .execute(pool)
        .await?;
    sqlx::query("create database graphile")
        .execute(pool)
        .await?;
    // libpq's -h/-p/-U/-d as a URL for node's pg client (through the cluster's socket).
    let args: Vec<String> = pg
        .libpq_args("graphile")
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let [_, host, _, port, _, user, _, db] = args.as_slice() else {
        bail!("unexpected libpq arguments {args:?}");
    };
    let url = format!("postgresql://{user}@/{db}?host={host}&port={port}");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../bench/graphile/run.mjs");
    let t = Instant::now();
    let prepare = Command::new("node")
        .args([script, "prepare", &url, &jobs.to_string()])
        .status()
        .context("running node (bench/graphile)")?;
    if !prepare.success() {
        bail!("graphile-worker's preparation failed");
    }
    println!(
        "graphile-worker: schema and {jobs} jobs queued in {:.1}s (not measured)",
        t.elapsed().as_secs_f64()
    );
    let pg_cpu = PgCpu::start();
    let out = Command::new("node")
        .args([script, "work", &url, &concurrency.to_string(), "1"])
        .output()?;
    let pg_cpu = pg_cpu.stop();
    let line = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "graphile-worker failed: {line} {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let field = |name: &str| -> anyhow::Result<f64> {
        line.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
            .with_context(|| format!("graphile-worker printed no {name}: {line}"))
    };
    let done = field("jobs")?;
    Ok((done / field("seconds")?, pg_cpu, field("cpu_us")? / 1e6))
}

/// CPU seconds (user + system) a process has used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the parenthesised command name and the state: ppid, pgrp, session, tty,
    // tpgid, flags, 4 fault counts, utime, stime. (Dropping the state by failing to parse it, as
    // this once did, shifted every index by one and read stime + cutime.)
    let rest = stat.rsplit_once(") ").map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    (f.get(10).unwrap_or(&0.0) + f.get(11).unwrap_or(&0.0)) / 100.0
}

/// CPU seconds used so far by each `postgres` process on the machine (the bench's cluster).
fn postgres_cpu() -> std::collections::HashMap<u32, f64> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "postgres")
        })
        .map(|pid| (pid, cpu_seconds(pid)))
        .collect()
}

/// PostgreSQL's CPU from now on, including backends that exit meanwhile (a client's
/// connections closing at its end): sampled every 20 ms by a thread until [`PgCpu::stop`].
struct PgCpu {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    sampler: std::thread::JoinHandle<f64>,
}

impl PgCpu {
    fn start() -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let sampler = std::thread::spawn(move || {
            let start = postgres_cpu();
            let mut last = start.clone();
            loop {
                let done = flag.load(std::sync::atomic::Ordering::SeqCst);
                last.extend(postgres_cpu());
                if done {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            last.iter()
                .map(|(pid, cpu)| cpu - start.get(pid).unwrap_or(&0.0))
                .sum()
        });
        PgCpu { stop, sampler }
    }

    /// The CPU seconds used since `start`.
    fn stop(self) -> f64 {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.sampler.join().unwrap_or(0.0)
    }
}

/// Round trips timed by [`probe`]: (bare, one-row commit), in microseconds.
type Probed = (Vec<u64>, Vec<u64>);

/// Times a bare round trip and a one-row autocommit insert on `conn`, every 5 ms, until `stop`.
async fn probe(
    mut conn: sqlx::PgConnection,
    stop: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<(sqlx::PgConnection, Probed)> {
    let (mut bare, mut commit) = (Vec::new(), Vec::new());
    while !*stop.borrow() {
        let t = Instant::now();
        sqlx::query("select 1").execute(&mut conn).await?;
        bare.push(t.elapsed().as_micros() as u64);
        let t = Instant::now();
        sqlx::query("insert into bench_probe default values")
            .execute(&mut conn)
            .await?;
        commit.push(t.elapsed().as_micros() as u64);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok((conn, (bare, commit)))
}

fn print_probed(when: &str, (bare, commit): &mut Probed) {
    let pct = |v: &mut Vec<u64>, p: usize| {
        v.sort_unstable();
        v.get(v.len().saturating_sub(1) * p / 100)
            .copied()
            .unwrap_or(0)
    };
    println!(
        "  probe {when}: select 1 median {} us p90 {} us; one-row commit median {} us p90 {} us ({} samples)",
        pct(bare, 50),
        pct(bare, 90),
        pct(commit, 50),
        pct(commit, 90),
        commit.len()
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let bin = args.get(1).context(
        "usage: delivery_bench <mailroom binary> [messages] [connections] [batch] [orgs]",
    )?;
    let messages: usize = args.get(2).map_or(Ok(100_000), |s| s.parse())?;
    let connections: usize = args.get(3).map_or(Ok(8), |s| s.parse())?;
    let batch: usize = args.get(4).map_or(Ok(200), |s| s.parse())?;
    let orgs: usize = args.get(5).map_or(Ok(1), |s| s.parse())?;
    let delay = std::env::var("BENCH_REPLY_DELAY_MS")
        .ok()
        .map(|ms| ms.parse().map(Duration::from_millis))
        .transpose()?;
    // Postfix's sink in its own process, or (with a reply delay) the testkit's in this one.
    let (postfix, delayed) = match delay {
        None => (Some(Sink::start()?), None),
        Some(d) => {
            let options = testkit::smtp_sink::SinkOptions {
                record: testkit::smtp_sink::Record::IdsOnly,
                reply_delay: Some(d),
                ..Default::default()
            };
            (
                None,
                Some(testkit::smtp_sink::SmtpSink::start_with(options)),
            )
        }
    };
    let port = match (&postfix, &delayed) {
        (Some(s), _) => s.port,
        (_, Some(s)) => s.addr.port(),
        _ => bail!("no sink"),
    };
    let sink_pid = postfix.as_ref().map(Sink::pid);
    let sink_cpu = || sink_pid.map_or(0.0, cpu_seconds);
    let sink_name = match delay {
        None => "postfix smtp-sink".to_string(),
        Some(d) => format!("testkit sink answering after {} ms", d.as_millis()),
    };
    println!("messages={messages} connections={connections} batch={batch} orgs={orgs} sink={sink_name} 127.0.0.1:{port}");
    let per = |cpu: f64| cpu * 1e6 / messages as f64;

    let (sink_before, client_cpu) = (sink_cpu(), cpu_seconds(std::process::id()));
    let raw_rate = raw(port, connections, messages).await?;
    println!("raw ceiling (Mailroom's SMTP client alone, no database): {raw_rate:.0} msg/s");
    println!(
        "  CPU per message: client {:.0} us, smtp-sink {:.0} us",
        per(cpu_seconds(std::process::id()) - client_cpu),
        per(sink_cpu() - sink_before)
    );
    let sink_before = sink_cpu();
    let (source_rate, source_cpu) = smtp_source(port, connections, messages)?;
    println!("peer: Postfix smtp-source -d -s {connections}: {source_rate:.0} msg/s");
    println!(
        "  CPU per message: smtp-source {:.0} us, smtp-sink {:.0} us",
        per(source_cpu),
        per(sink_cpu() - sink_before)
    );

    let data = tempfile::Builder::new()
        .prefix("mrbench")
        .tempdir_in("/tmp")?;
    let mut pg = EmbeddedPg::open(data.path(), embedded_pg::Options::default()).await?;
    let mut pool =
        mailroom::ops::database::connect(pg.connect_options(embedded_pg::DATABASE)).await?;
    // BENCH_PG_STATEMENTS=1: where PostgreSQL's time goes, statement by statement, at the end.
    let statements = flag("BENCH_PG_STATEMENTS");
    if statements {
        sqlx::query("alter system set shared_preload_libraries = 'pg_stat_statements'")
            .execute(&pool)
            .await?;
        pool.close().await;
        pg.shutdown().await?;
        pg = EmbeddedPg::open(data.path(), embedded_pg::Options::default()).await?;
        pool = mailroom::ops::database::connect(pg.connect_options(embedded_pg::DATABASE)).await?;
        sqlx::query("create extension if not exists pg_stat_statements")
            .execute(&pool)
            .await?;
        // Planning too: a statement re-planned for every call would show here.
        sqlx::query("alter system set pg_stat_statements.track_planning = on")
            .execute(&pool)
            .await?;
        sqlx::query("select pg_reload_conf()")
            .execute(&pool)
            .await?;
    }
    app::db::migrate::run(&pool, true).await?;
    // BENCH_WITHOUT_DELIVERY_COUNTS=1: the engine without the triggers that keep /metrics'
    // counts, to price them (the same run's other figures are the comparison).
    if flag("BENCH_WITHOUT_DELIVERY_COUNTS") {
        for t in ["insert", "update", "delete"] {
            sqlx::query(&format!(
                "drop trigger deliveries_counted_{t} on deliveries"
            ))
            .execute(&pool)
            .await?;
        }
        println!("delivery_counts triggers dropped");
    }
    // BENCH_PG_SET="name=value[;name=value…]": PostgreSQL settings for the run, to take a cost
    // apart (for example synchronous_commit=off prices the commit's WAL flush; never a
    // production setting: a body-start mark must be durable before the body leaves). auto_explain's
    // settings need its module loaded in the session that sets them.
    let settings = std::env::var("BENCH_PG_SET").unwrap_or_default();
    let mut admin = pool.acquire().await?;
    if settings.contains("auto_explain.") {
        sqlx::query("load 'auto_explain'")
            .execute(&mut *admin)
            .await?;
    }
    for setting in settings.split(';').filter(|s| !s.trim().is_empty()) {
        let (name, value) = setting
            .trim()
            .split_once('=')
            .context("BENCH_PG_SET takes name=value[;name=value…]")?;
        sqlx::query(&format!("alter system set {name} = '{value}'"))
            .execute(&mut *admin)
            .await?;
        println!("PostgreSQL setting for this run: {name} = {value}");
    }
    if !settings.is_empty() {
        sqlx::query("select pg_reload_conf()")
            .execute(&mut *admin)
            .await?;
    }
    drop(admin);
    // The queue is spread over `orgs` organisations (one claim group each).
    let mut org_ids = Vec::new();
    for i in 0..orgs {
        let slug = format!("bench{i}");
        let new_org = app::db::orgs::NewOrg {
            name: &slug,
            slug: &slug,
            timezone: "UTC",
            from_name: "Bench",
            from_address: "news@bench.example",
        };
        org_ids.push(app::db::orgs::create(&mut *pool.acquire().await?, new_org).await?);
    }
    // BENCH_DKIM=1: every org signs with a fresh RSA-2048 key (the engine's cost of signing is
    // this run's rate against an unsigned run's).
    if flag("BENCH_DKIM") {
        let key = app::dkim_key::DkimKey::generate()?;
        let (pem, public) = (key.to_pkcs1_pem()?, key.public_key_base64()?);
        let mut conn = pool.acquire().await?;
        for org in &org_ids {
            app::db::settings::replace_dkim_key(
                &mut conn,
                *org,
                "bench.example",
                "mr",
                &pem,
                &public,
            )
            .await?;
            app::db::settings::set_dkim_enabled(&mut conn, *org, true).await?;
        }
        // BENCH_DKIM=ed25519: an Ed25519 signature beside the RSA one (dual signing).
        if std::env::var("BENCH_DKIM").as_deref() == Ok("ed25519") {
            let ed = app::dkim_key::Ed25519DkimKey::generate()?;
            for org in &org_ids {
                let key = (
                    "mre",
                    ed.private_key_pem.as_str(),
                    ed.public_key_base64.as_str(),
                );
                app::db::settings::set_dkim_ed25519_key(&mut conn, *org, Some(key)).await?;
            }
            println!("DKIM: every message dual-signed (rsa-sha256 2048-bit and ed25519-sha256)");
        } else {
            println!("DKIM: every message signed (rsa-sha256, 2048-bit key)");
        }
    }
    let suppressions: i64 = std::env::var("BENCH_SUPPRESSIONS").map_or(Ok(0), |n| n.parse())?;
    if suppressions > 0 {
        for org in &org_ids {
            sqlx::query(
                "insert into suppressions (org_id, email_lower, reason)
                 select $1, 'gone' || i || '@example.net', 'unsubscribed' from generate_series(1, $2) i",
            )
            .bind(org)
            .bind(suppressions)
            .execute(&pool)
            .await?;
        }
        sqlx::query("analyze suppressions").execute(&pool).await?;
        println!("{suppressions} suppressed addresses per org");
    }
    let slow_hook = std::env::var("BENCH_WEBHOOKS").as_deref() == Ok("slow");
    if slow_hook && org_ids.len() < 2 {
        bail!("BENCH_WEBHOOKS=slow needs 2 orgs or more");
    }
    let hooks = if flag("BENCH_WEBHOOKS") {
        let received = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = received.clone();
        let app = axum::Router::new()
            .route(
                "/hook",
                axum::routing::post(move || {
                    let counter = counter.clone();
                    async move {
                        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        "ok"
                    }
                }),
            )
            .route(
                "/slow",
                axum::routing::post(|| async {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    "ok"
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let url = format!("{base}/hook");
        tokio::spawn(async move { axum::serve(listener, app).await });
        let in_flight: i32 = std::env::var("BENCH_WEBHOOK_IN_FLIGHT")
            .map_or(Ok(app::domain::webhook::WEBHOOK_MAX_IN_FLIGHT), |n| {
                n.parse()
            })?;
        let mut conn = pool.acquire().await?;
        for (i, org) in org_ids.iter().enumerate() {
            let url = if slow_hook && i == 0 {
                format!("{base}/slow")
            } else {
                url.clone()
            };
            app::db::webhooks_out::create(
                &mut conn,
                *org,
                None,
                &url,
                &[
                    app::domain::WebhookEventType::MessageDelivered,
                    app::domain::WebhookEventType::MessageFailed,
                    app::domain::WebhookEventType::MessageUnknown,
                ],
                &app::webhook::new_secret(),
                in_flight,
            )
            .await?;
        }
        println!("webhooks: every org has an endpoint for every message event ({url})");
        Some(received)
    } else {
        None
    };
    let t0 = Instant::now();
    let mut tx = pool.begin().await?;
    for i in 0..messages {
        support::enqueue_bench_mail(&mut tx, org_ids[i % org_ids.len()], i).await?;
    }
    tx.commit().await?;
    println!(
        "queued {messages} deliveries in {:.1}s (not measured)",
        t0.elapsed().as_secs_f64()
    );

    if statements {
        sqlx::query("select pg_stat_statements_reset()")
            .execute(&pool)
            .await?;
    }
    // BENCH_PROBE=1: the round trips' floor, idle for a second, then beside the engine.
    let probing = if flag("BENCH_PROBE") {
        sqlx::query("create table if not exists bench_probe (id bigserial primary key)")
            .execute(&pool)
            .await?;
        let conn = pool.acquire().await?.detach();
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let idle = tokio::spawn(probe(conn, stopped));
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.send(true)?;
        let (conn, mut idle) = idle.await??;
        print_probed("idle", &mut idle);
        let (stop, stopped) = tokio::sync::watch::channel(false);
        Some((stop, tokio::spawn(probe(conn, stopped))))
    } else {
        None
    };
    let (sink_before, pg_cpu) = (sink_cpu(), PgCpu::start());
    let started = Instant::now();
    let mut worker = Command::new(bin)
        .args(["worker", "--data-dir"])
        .arg(data.path())
        .args(["--smtp-host", "127.0.0.1", "--smtp-port", &port.to_string()])
        .args(["--smtp-connections", &connections.to_string()])
        .args(["--delivery-batch", &batch.to_string()])
        .args(
            hooks
                .as_ref()
                .map_or(&[][..], |_| &["--webhook-allow-private"][..]),
        )
        // BENCH_MARKS_AHEAD=K: one body-start mark per K messages per connection.
        .args(
            std::env::var("BENCH_MARKS_AHEAD")
                .map(|k| vec!["--delivery-marks-ahead".to_string(), k])
                .unwrap_or_default(),
        )
        // BENCH_WORKER_LOG=mailroom::workers::delivery=debug logs each claim and ledger group with
        // its duration (to /tmp/bench-worker.log).
        .env(
            "RUST_LOG",
            std::env::var("BENCH_WORKER_LOG").unwrap_or("warn".into()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create("/tmp/bench-worker.log")?))
        .spawn()?;
    let mut peak = 0;
    let (worker_cpu, engine_pg_cpu) = loop {
        // Whether anything is left, not how much: counting 100k rows every 50 ms would take
        // a fifth of a core from the engine it measures. In flight counts as `queued` (a claim
        // does not write the delivery row).
        let open: bool = sqlx::query_scalar(if flag("BENCH_WITHOUT_DELIVERY_COUNTS") {
            // Without the counts: what is queued or held by a claim with an attempt open.
            "select exists (select 1 from delivery_queue)
                 or exists (select 1 from delivery_claims c
                            cross join lateral unnest(c.job_ids, c.attempts) as x(job_id, attempt)
                            join deliveries d on d.job_id = x.job_id and d.attempt = x.attempt - 1
                            where d.status = 'queued')"
        } else {
            "select coalesce(sum(n), 0) > 0 from delivery_counts where status = 'queued'"
        })
        .fetch_one(&pool)
        .await?;
        peak = peak.max(support::peak_rss_kib(worker.id()).unwrap_or(0));
        if !open {
            let (worker_cpu, engine_pg_cpu) = (cpu_seconds(worker.id()), pg_cpu.stop());
            println!(
                "  CPU per message: worker {:.0} us, PostgreSQL {:.0} us, smtp-sink {:.0} us",
                per(worker_cpu),
                per(engine_pg_cpu),
                per(sink_cpu() - sink_before)
            );
            break (worker_cpu, engine_pg_cpu);
        }
        if let Some(status) = worker.try_wait()? {
            bail!("the worker exited early: {status}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let elapsed = started.elapsed().as_secs_f64();
    if slow_hook {
        slow_endpoint_held_only_its_own(&pool, org_ids[0], started, elapsed).await?;
    }
    if let Some(received) = &hooks {
        webhooks_caught_up(&pool, received, started, elapsed).await?;
    }
    if let Some((stop, beside)) = probing {
        stop.send(true)?;
        let (_, mut beside) = beside.await??;
        print_probed("beside the engine", &mut beside);
    }
    support::stop(&mut worker)?;
    let (delivered, other): (i64, i64) = sqlx::query_as(
        "select count(*) filter (where status = 'delivered'), count(*) filter (where status <> 'delivered') from deliveries",
    )
    .fetch_one(&pool)
    .await?;
    let engine_rate = delivered as f64 / elapsed;
    println!(
        "delivery engine (mailroom worker, embedded PostgreSQL): {delivered} delivered, {other} other, in {elapsed:.1}s = {engine_rate:.0} msg/s"
    );
    // The peer again, right after the engine: this machine's speed drifts within a sitting,
    // and the ratio is only as steady as its denominator, so both readings bracket it.
    let (source_after, _) = smtp_source(port, connections, messages)?;
    println!(
        "peer again after the engine: Postfix smtp-source -d -s {connections}: {source_after:.0} msg/s"
    );
    println!(
        "engine / raw ceiling: {:.0}%; engine / smtp-source: {:.2}x ({:.2}x against the later run); worker CPU / smtp-source CPU: {:.1}x",
        100.0 * engine_rate / raw_rate,
        engine_rate / source_rate,
        engine_rate / source_after,
        worker_cpu / source_cpu.max(f64::EPSILON)
    );
    println!("worker peak RSS: {:.1} MiB", peak as f64 / 1024.0);
    if hooks.is_some() {
        webhooks_alone(bin, data.path(), &pool).await?;
    }
    if statements {
        let top: Vec<(f64, f64, i64, i64, String)> = sqlx::query_as(
            "select total_exec_time, total_plan_time, calls, rows, left(regexp_replace(query, '\\s+', ' ', 'g'), 110)
             from pg_stat_statements order by total_exec_time + total_plan_time desc limit 12",
        )
        .fetch_all(&pool)
        .await?;
        println!("PostgreSQL time by statement (exec ms, plan ms, calls, rows):");
        for (exec, plan, calls, rows, query) in top {
            println!("  {exec:8.0} {plan:6.0} {calls:7} {rows:7}  {query}");
        }
    }
    // BENCH_GRAPHILE=0 skips the queue peer (a quick look at the engine alone).
    if std::env::var("BENCH_GRAPHILE").as_deref() != Ok("0") {
        // Its best on this machine: concurrency 8 → ~4k jobs/s, 64 → 13k, 128 → 16k.
        let concurrency: usize =
            std::env::var("BENCH_GRAPHILE_CONCURRENCY").map_or(Ok(128), |c| c.parse())?;
        let (rate, g_pg, g_node) = graphile(&pool, &pg, messages, concurrency).await?;
        println!("peer: graphile-worker 0.17.3, {messages} no-op jobs, concurrency {concurrency} (local queue 10x), batched: {rate:.0} jobs/s");
        println!(
            "  CPU per job: node {:.0} us, PostgreSQL {:.0} us",
            per(g_node),
            per(g_pg)
        );
        println!(
            "engine PostgreSQL CPU per message / graphile's per job: {:.1}x",
            engine_pg_cpu / g_pg.max(f64::EPSILON)
        );
    }
    pool.close().await;
    let log = pg.cluster_dir().join("server.log");
    pg.shutdown().await?;
    // The cluster goes with its temporary directory; its log (auto_explain's plans) stays.
    if settings.contains("auto_explain.") {
        std::fs::copy(log, "/tmp/bench-postgres.log")?;
        println!("PostgreSQL's log (auto_explain's plans): /tmp/bench-postgres.log");
    }
    if other > 0 {
        bail!("{other} deliveries did not end delivered");
    }
    Ok(())
}

/// A switch of the environment: set, and neither empty nor "0".
async fn webhooks_pending(pool: &sqlx::PgPool) -> anyhow::Result<bool> {
    Ok(sqlx::query_scalar(
        "select exists (select 1 from webhook_out_messages m
                        join webhook_out_endpoints e on e.id = m.endpoint_id
                        where m.status = 'pending' and e.enabled)",
    )
    .fetch_one(pool)
    .await?)
}

/// Waits for the sender (beside the engine) to deliver every event, and says how far behind
/// the last message it finished.
async fn webhooks_caught_up(
    pool: &sqlx::PgPool,
    received: &std::sync::atomic::AtomicU64,
    started: Instant,
    engine: f64,
) -> anyhow::Result<()> {
    while webhooks_pending(pool).await? {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let done = started.elapsed().as_secs_f64();
    let events: i64 = sqlx::query_scalar("select count(*) from webhook_out_messages")
        .fetch_one(pool)
        .await?;
    println!(
        "webhooks beside the engine: {events} events, {} requests received, the last {:.1}s after the last message ({:.0} events/s over the run)",
        received.load(std::sync::atomic::Ordering::Relaxed),
        done - engine,
        events as f64 / done
    );
    Ok(())
}

/// The slow endpoint (the first org's) against the mail and the other orgs' endpoints: when the
/// mail had finished, and again when every other endpoint had caught up, the slow one must
/// still have had events waiting; it is then turned off, so the rest of the run measures the
/// others.
async fn slow_endpoint_held_only_its_own(
    pool: &sqlx::PgPool,
    slow_org: i64,
    started: Instant,
    engine: f64,
) -> anyhow::Result<()> {
    let slow_state = || async {
        let (done, total): (i64, i64) = sqlx::query_as(
            "select count(*) filter (where status <> 'pending'), count(*)
             from webhook_out_messages where org_id = $1",
        )
        .bind(slow_org)
        .fetch_one(pool)
        .await?;
        anyhow::Ok((done, total))
    };
    let (at_mail_end, total) = slow_state().await?;
    if at_mail_end >= total {
        bail!(
            "the slow endpoint had nothing left when the mail finished: the check proves nothing"
        );
    }
    println!(
        "slow endpoint (2 s an answer): {at_mail_end} of its {total} events done when the last message was ({engine:.1}s): the mail did not wait for it"
    );
    loop {
        let others_pending: bool = sqlx::query_scalar(
            "select exists (select 1 from webhook_out_messages
                            where status = 'pending' and org_id <> $1)",
        )
        .bind(slow_org)
        .fetch_one(pool)
        .await?;
        if !others_pending {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let others_done = started.elapsed().as_secs_f64();
    let (at_others_end, _) = slow_state().await?;
    if at_others_end >= total {
        bail!("the slow endpoint finished before the others: ordering not shown");
    }
    println!(
        "every other org's events delivered {:.1}s after the last message, the slow endpoint then at {at_others_end} of {total}: it held up no one else",
        others_done - engine
    );
    sqlx::query("update webhook_out_endpoints set enabled = false where org_id = $1")
        .bind(slow_org)
        .execute(pool)
        .await?;
    Ok(())
}

/// Every event sent once more with the webhook sender alone: its events per second, its CPU
/// and PostgreSQL's per event.
async fn webhooks_alone(
    bin: &str,
    data: &std::path::Path,
    pool: &sqlx::PgPool,
) -> anyhow::Result<()> {
    let events = sqlx::query(
        "update webhook_out_messages set status = 'pending', next_attempt_at = now(),
                retrying_since = now(), finished_at = null
         where endpoint_id in (select id from webhook_out_endpoints where enabled)",
    )
    .execute(pool)
    .await?
    .rows_affected();
    let pg = PgCpu::start();
    let started = Instant::now();
    let mut worker = Command::new(bin)
        .args(["worker", "--data-dir"])
        .arg(data)
        .arg("--webhook-allow-private")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(
            "/tmp/bench-worker-webhooks.log",
        )?))
        .spawn()?;
    while webhooks_pending(pool).await? {
        if let Some(status) = worker.try_wait()? {
            bail!("the worker exited early: {status}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let (worker_cpu, pg_cpu) = (cpu_seconds(worker.id()), pg.stop());
    support::stop(&mut worker)?;
    let per = |cpu: f64| cpu * 1e6 / events as f64;
    println!(
        "webhooks alone: {events} events in {elapsed:.1}s = {:.0} events/s; CPU per event: worker {:.0} us, PostgreSQL {:.0} us (the worker's start included)",
        events as f64 / elapsed,
        per(worker_cpu),
        per(pg_cpu)
    );
    Ok(())
}

fn flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}
