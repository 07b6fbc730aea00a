//! The delivery engine while a long `pg_dump` runs: one `mailroom worker` sending into Postfix's
//! smtp-sink from a queue kept full by a feeder, measured for a window without a dump, then for
//! a window of the same length while `pg_dump --format=custom` (what `mailroom backup` runs)
//! holds its snapshot open (its output read slowly, as a dump of a big database to a slow disk
//! is), then for a window after it. A dump's snapshot holds back vacuum: every row version the
//! engine replaces in the queue tables stays until it ends.
//!
//! Prints each window's rate, the dump's against the one without (the goal is 0.8 or more), and
//! the queue tables' dead row versions and sizes at the end of each window.
//!
//! Usage: long_transaction_bench <mailroom binary> [seconds per window=600] [connections=8]

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use sqlx::PgPool;

use mailroom::embedded_pg::{self, EmbeddedPg};

#[path = "support/mod.rs"]
mod support;

/// The feeder tops the queue up whenever fewer than this many deliveries wait.
const LOW_WATER: i64 = 50_000;
const TOP_UP: usize = 10_000;
const QUEUE_TABLES: &str =
    "'deliveries', 'delivery_queue', 'delivery_claims', 'delivery_counts', 'delivery_marks', 'delivery_mark_groups', 'delivery_events'";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let bin = args.get(1).context(
        "usage: long_transaction_bench <mailroom binary> [seconds per window] [connections]",
    )?;
    let window = Duration::from_secs(args.get(2).map_or(Ok(600), |s| s.parse())?);
    let connections: usize = args.get(3).map_or(Ok(8), |s| s.parse())?;
    let sink = support::Sink::start()?;
    let data = tempfile::Builder::new()
        .prefix("mrbench")
        .tempdir_in("/tmp")?;
    let pg = EmbeddedPg::open(data.path(), embedded_pg::Options::default()).await?;
    let pool = mailroom::ops::database::connect(pg.connect_options(embedded_pg::DATABASE)).await?;
    app::db::migrate::run(&pool, true).await?;
    let org = app::db::orgs::create(
        &mut *pool.acquire().await?,
        app::db::orgs::NewOrg {
            name: "bench",
            slug: "bench",
            timezone: "UTC",
            from_name: "Bench",
            from_address: "news@bench.example",
        },
    )
    .await?;
    println!(
        "windows of {} s, {connections} connections, smtp-sink 127.0.0.1:{}",
        window.as_secs(),
        sink.port
    );

    let feeding = Arc::new(AtomicBool::new(true));
    let feeder = tokio::spawn(feed(pool.clone(), org, feeding.clone()));
    while queued(&pool).await? < LOW_WATER {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut worker = Command::new(bin)
        .args(["worker", "--data-dir"])
        .arg(data.path())
        .args([
            "--smtp-host",
            "127.0.0.1",
            "--smtp-port",
            &sink.port.to_string(),
        ])
        .args(["--smtp-connections", &connections.to_string()])
        .env(
            "RUST_LOG",
            std::env::var("BENCH_WORKER_LOG").unwrap_or("warn".into()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(
            "/tmp/long-transaction-bench-worker.log",
        )?))
        .spawn()?;
    // Warm: the first seconds (connections, plans, the first claims) belong to no window.
    tokio::time::sleep(Duration::from_secs(10)).await;

    let without = measure(&pool, "without a dump", window).await?;
    let dump = Dump::start(&pg, data.path())?;
    let with = measure(&pool, "while pg_dump holds its snapshot", window).await?;
    let dumped = dump.finish()?;
    println!("  the dump: {dumped} bytes, complete");
    let after = measure(
        &pool,
        "after the dump",
        window.min(Duration::from_secs(120)),
    )
    .await?;
    println!(
        "rate while the dump ran ÷ rate without: {:.2} (after it: {:.2})",
        with / without,
        after / without
    );

    feeding.store(false, Ordering::Relaxed);
    feeder.await??;
    support::stop(&mut worker)?;
    pool.close().await;
    pg.shutdown().await?;
    Ok(())
}

/// Messages delivered in a window of `length` from now, per second; then the queue tables'
/// dead row versions and sizes.
async fn measure(pool: &PgPool, name: &str, length: Duration) -> anyhow::Result<f64> {
    let (before, started) = (delivered(pool).await?, Instant::now());
    let mut running: std::collections::HashMap<String, u64> = Default::default();
    let mut samples = 0u64;
    // Where the database's time goes: the statements seen running, sampled every 100 ms.
    while started.elapsed() < length {
        let active: Vec<String> = sqlx::query_scalar(
            "select left(regexp_replace(query, '\\s+', ' ', 'g'), 90) from pg_stat_activity
              where state = 'active' and backend_type = 'client backend' and pid <> pg_backend_pid()",
        )
        .fetch_all(pool)
        .await?;
        samples += 1;
        for q in active {
            *running.entry(q).or_default() += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rate = (delivered(pool).await? - before) as f64 / started.elapsed().as_secs_f64();
    println!("{name}: {rate:.0} msg/s over {} s", length.as_secs());
    let mut running: Vec<(String, u64)> = running.into_iter().collect();
    running.sort_by_key(|r| std::cmp::Reverse(r.1));
    for (q, n) in running.iter().take(6) {
        println!(
            "  running in {:.0} % of samples: {q}",
            100.0 * *n as f64 / samples as f64
        );
    }
    let tables: Vec<(String, i64, i64, i64)> = sqlx::query_as(&format!(
        "select relname::text, n_live_tup, n_dead_tup, pg_total_relation_size(relid)
           from pg_stat_user_tables where relname in ({QUEUE_TABLES}) order by relname"
    ))
    .fetch_all(pool)
    .await?;
    for (table, live, dead, bytes) in tables {
        println!(
            "  {table}: {live} live, {dead} dead row versions, {:.1} MB",
            bytes as f64 / 1e6
        );
    }
    Ok(rate)
}

async fn delivered(pool: &PgPool) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        "select coalesce(sum(n), 0)::bigint from delivery_counts where status = 'delivered'",
    )
    .fetch_one(pool)
    .await?)
}

async fn queued(pool: &PgPool) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(
        "select coalesce(sum(n), 0)::bigint from delivery_counts where status = 'queued'",
    )
    .fetch_one(pool)
    .await?)
}

/// Keeps at least [`LOW_WATER`] deliveries queued, through the product's own enqueue.
async fn feed(pool: PgPool, org: i64, feeding: Arc<AtomicBool>) -> anyhow::Result<()> {
    let mut next = 0usize;
    while feeding.load(Ordering::Relaxed) {
        // Not often: the counts' rows are summed, dead versions and all, while a dump runs.
        if queued(&pool).await? >= LOW_WATER {
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        let mut tx = pool.begin().await?;
        for _ in 0..TOP_UP {
            support::enqueue_bench_mail(&mut tx, org, next).await?;
            next += 1;
        }
        tx.commit().await?;
    }
    Ok(())
}

/// `pg_dump --format=custom` of the database, its output read a few bytes a second until
/// [`Dump::finish`], so that it holds its snapshot as a dump of a big database does.
struct Dump {
    child: std::process::Child,
    slow: Arc<AtomicBool>,
    reader: std::thread::JoinHandle<std::io::Result<u64>>,
}

impl Dump {
    fn start(pg: &EmbeddedPg, data: &std::path::Path) -> anyhow::Result<Dump> {
        let mut child = Command::new(embedded_pg::tool(data, "pg_dump")?)
            .args(pg.libpq_args(embedded_pg::DATABASE))
            .arg("--format=custom")
            .stdout(Stdio::piped())
            .spawn()?;
        let mut out = child.stdout.take().context("pg_dump's output")?;
        let slow = Arc::new(AtomicBool::new(true));
        let slowly = slow.clone();
        let reader = std::thread::spawn(move || {
            use std::io::Read;
            let (mut buf, mut total) = (vec![0u8; 64 * 1024], 0u64);
            loop {
                let chunk = if slowly.load(Ordering::Relaxed) {
                    16
                } else {
                    buf.len()
                };
                let n = out.read(&mut buf[..chunk])?;
                if n == 0 {
                    return Ok(total);
                }
                total += n as u64;
                if slowly.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        });
        Ok(Dump {
            child,
            slow,
            reader,
        })
    }

    /// Reads the rest at full speed; the dump's size in bytes.
    fn finish(mut self) -> anyhow::Result<u64> {
        self.slow.store(false, Ordering::Relaxed);
        let total = self
            .reader
            .join()
            .map_err(|_| anyhow::anyhow!("the dump's reader panicked"))??;
        let status = self.child.wait()?;
        anyhow::ensure!(status.success(), "pg_dump failed: {status}");
        Ok(total)
    }
}
