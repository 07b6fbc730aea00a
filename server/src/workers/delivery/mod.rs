//! The delivery worker: claims due deliveries, renders each at send time, sends it stage by
//! stage over a few connections kept open while there is mail, and records every outcome fenced by
//! its attempt. It runs in every `serve` / `worker` process; the database arbitrates between
//! them.

/// A claimed batch and what its renderers read, loaded once per batch.
mod batch;
/// The relay's circuit breaker: stop, probe, pause and resume campaigns.
mod breaker;
/// DKIM signing: each org's key parsed once per batch, each message signed when rendered.
mod confirm;
mod dkim;
/// The claims this process is working on: the only ones whose leases are extended.
mod held;
/// Set-password mail (`invite:` jobs), its link derived from the job id.
mod invite;
/// Group commit of every connection's body-start marks and outcomes.
mod ledger;
/// The steady state: feeders claim ahead, connections send, a settler lets claims go.
mod pipeline;
/// One renderer per kind, building each message at send time.
mod render;
/// Sending one claimed delivery and classifying its outcome exactly.
mod send;
/// Click tracking: links of campaign HTML wrapped in signed redirects.
mod tracking;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sqlx::PgPool;

use app::domain::Backoff;

use crate::ops::shutdown::Shutdown;
use crate::smtp::{Connection, Target};
use breaker::Breaker;
pub use held::Held;
use ledger::Ledger;
pub use render::Links;
use send::send_one;

/// Where messages go.
#[derive(Clone, Debug)]
pub enum Transport {
    /// A real SMTP server.
    Smtp(Target),
    /// No SMTP configured: `.eml` files under this directory, readable in the dashboard.
    Capture(PathBuf),
}

#[derive(Clone, Debug)]
pub struct Config {
    pub transport: Transport,
    /// Parallel SMTP connections per process.
    pub connections: usize,
    /// Deliveries claimed per round (never more than can start promptly).
    pub batch: i64,
    /// How long a claim is held before the reaper may take it back.
    pub lease_seconds: f64,
    /// Pause when the queue is empty.
    pub idle: Duration,
    pub backoff: Backoff,
    /// Domain part of every Message-ID; None: the org's From domain.
    pub message_id_domain: Option<String>,
    /// Messages per second allowed to this SMTP server across all replicas (None: no limit).
    pub rate_per_second: Option<f64>,
    /// Public address and signing keys for the links inside messages.
    pub links: Links,
    /// Announces campaigns whose progress moved (after their outcomes committed).
    pub progress: crate::workers::progress::Notifier,
    /// The claims in flight, whose leases this process extends.
    pub held: Held,
    /// When the relay counts as failing, and how its probes and campaign pauses go.
    pub breaker: app::domain::relay::BreakerPolicy,
    /// Messages a connection marks "body started" ahead of their bodies. 1: each is marked just
    /// before its body (exact). K > 1: a window of K messages per connection whose marks are
    /// written while the ones before them are sent; a connection killed mid-way leaves at most
    /// K messages `unknown` that were never sent, and a pause, a cancel or an opt-out committed
    /// after the mark lets at most K more go out.
    pub marks_ahead: usize,
    /// How long the outcome committer waits for more outcomes after the first of a group
    /// (outcomes are off the messages' path; a crash in this window leaves the messages
    /// `unknown`, as one during the write itself does).
    pub outcome_gather: Duration,
}

impl Config {
    /// The rate-limit bucket's key: one bucket per SMTP server, shared by every replica.
    fn bucket(&self) -> String {
        match &self.transport {
            Transport::Smtp(t) => format!("{}:{}", t.host, t.port),
            Transport::Capture(_) => "capture".into(),
        }
    }
}

/// One process's delivery worker: its claims are marked with `holder`. A worker process runs
/// it until shutdown; tests and tools drain the queue through the very same pipeline.
pub struct Worker {
    engine: Arc<Engine>,
    /// The breaker's warden, stopped with the worker.
    warden: Option<tokio::task::JoinHandle<()>>,
}

/// What the pipeline's tasks share.
struct Engine {
    pool: PgPool,
    /// The feeders' claims and lookups: the same few statements many times a second, planned
    /// once (a custom plan per claim cost more than a claim's share of any row).
    feed: PgPool,
    cfg: Config,
    holder: String,
    ledger: Ledger,
    breaker: Breaker,
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(warden) = self.warden.take() {
            warden.abort();
        }
    }
}

impl Worker {
    pub fn new(pool: PgPool, cfg: Config, holder: impl Into<String>) -> Self {
        let ledger = Ledger::start(
            crate::ops::database::generic_plans_pool(&pool, 4),
            cfg.outcome_gather,
        );
        let breaker = Breaker::new(cfg.breaker);
        // Captured mail has no relay to fail.
        let warden = match &cfg.transport {
            Transport::Smtp(target) => Some(tokio::spawn(breaker::warden(
                pool.clone(),
                breaker.clone(),
                target.clone(),
                cfg.bucket(),
            ))),
            Transport::Capture(_) => None,
        };
        let engine = Engine {
            feed: crate::ops::database::generic_plans_pool(&pool, 4),
            pool,
            cfg,
            holder: holder.into(),
            ledger,
            breaker,
        };
        Worker {
            engine: Arc::new(engine),
            warden,
        }
    }

    /// Runs until shutdown: feeders claim batches ahead of the connections, which each take
    /// the next claimed message as soon as they are free (see `pipeline`).
    pub async fn run(self, shutdown: Shutdown) {
        let w = &self.engine;
        if let Some(rate) = w.cfg.rate_per_second {
            // A one-second burst; every replica configures the same bucket. Retried: a database
            // blip at start must not leave this process without a delivery worker.
            while let Err(e) =
                app::db::rate_limit::configure(&w.pool, &w.cfg.bucket(), rate.max(1.0), rate).await
            {
                tracing::warn!(error = %e, "cannot set up the SMTP rate limit yet; retrying");
                tokio::select! {
                    _ = shutdown.requested() => return,
                    _ = tokio::time::sleep(std::time::Duration::from_secs(2)) => {}
                }
            }
        }
        // Until shutdown, nothing ends the pipeline with an error.
        let _ = pipeline::run(w.clone(), Until::Shutdown, shutdown).await;
    }

    /// The same pipeline until what is due is done: claims until a claim comes back empty (or
    /// the relay's circuit is open), sends everything claimed and returns once every outcome is
    /// committed; the first claim or ledger failure ends it with that error. Returns how many
    /// deliveries were claimed. Its connections are closed at the end.
    pub async fn drain(&mut self) -> anyhow::Result<usize> {
        let (_keep, never) = Shutdown::manual();
        pipeline::run(self.engine.clone(), Until::Drained, never).await
    }
}

/// How long the pipeline runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Until {
    /// Until shutdown: a worker process.
    Shutdown,
    /// Until nothing more is due: tests and tools.
    Drained,
}

/// QUIT on every open connection of `connections`, concurrently; leaves them all closed.
async fn quit_all(connections: &mut [Option<Connection>]) {
    let open = connections.iter_mut().filter_map(Option::take);
    futures::future::join_all(open.map(Connection::quit)).await;
}
