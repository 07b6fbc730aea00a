//! The delivery worker: claims due deliveries, renders each at send time, sends it stage by
//! stage over a few connections kept open across rounds, and records every outcome fenced by
//! its attempt. It runs in every `serve` / `worker` process; the database arbitrates between
//! them.

mod dkim;
mod held;
mod invite;
mod ledger;
mod render;
mod send;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use sqlx::PgPool;

use app::campaign_render::Compiled;
use app::db::deliveries::{self, Claimed, Sender};
use app::db::digests::Content as DigestContent;
use app::domain::Backoff;

use crate::shutdown::Shutdown;
use crate::smtp::{Connection, Target};
pub use held::Held;
use ledger::Ledger;
use render::Inputs;
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
    /// Domain part of every Message-ID.
    pub message_id_domain: String,
    /// Messages per second allowed to this SMTP server across all replicas (None: no limit).
    pub rate_per_second: Option<f64>,
    /// Public address and signing keys for the links inside messages.
    pub links: Links,
    /// Announces campaigns whose progress moved (after their outcomes committed).
    pub progress: crate::progress::Notifier,
    /// The claims in flight, whose leases this process extends.
    pub held: Held,
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

/// One process's delivery worker: its claims are marked with `holder`, and its SMTP
/// connections stay open from one round to the next while there is mail to send.
pub struct Worker {
    pool: PgPool,
    cfg: Config,
    holder: String,
    ledger: Ledger,
    connections: Vec<Option<Connection>>,
}

impl Worker {
    pub fn new(pool: PgPool, cfg: Config, holder: impl Into<String>) -> Self {
        let ledger = Ledger::start(pool.clone());
        let connections = (0..cfg.connections.max(1)).map(|_| None).collect();
        Worker {
            pool,
            cfg,
            holder: holder.into(),
            ledger,
            connections,
        }
    }

    /// Runs until shutdown: one lane per connection, each claiming its own share of the batch
    /// and sending it, so a slow connection never holds the others back (no round barrier).
    /// Every lane shares the ledger, whose group commits cover all of them.
    pub async fn run(self, shutdown: Shutdown) {
        if let Some(rate) = self.cfg.rate_per_second {
            // A one-second burst; every replica configures the same bucket. Retried: a database
            // blip at start must not leave this process without a delivery worker.
            while let Err(e) =
                app::db::rate_limit::configure(&self.pool, &self.cfg.bucket(), rate.max(1.0), rate)
                    .await
            {
                tracing::warn!(error = %e, "cannot set up the SMTP rate limit yet; retrying");
                tokio::select! {
                    _ = shutdown.requested() => return,
                    _ = tokio::time::sleep(std::time::Duration::from_secs(2)) => {}
                }
            }
        }
        let share = (self.cfg.batch / self.connections.len() as i64).max(1);
        let lanes = (0..self.connections.len()).map(|_| lane(&self, share, shutdown.clone()));
        futures::future::join_all(lanes).await;
    }

    /// One round over every connection: claim a batch, send it, record the outcomes. Returns
    /// how many deliveries were claimed.
    pub async fn round(&mut self) -> anyhow::Result<usize> {
        let (pool, cfg, holder, ledger) = (&self.pool, &self.cfg, &self.holder, &self.ledger);
        claim_and_send(pool, cfg, holder, ledger, cfg.batch, &mut self.connections).await
    }

    /// Says goodbye on every open connection.
    pub async fn close(&mut self) {
        quit_all(&mut self.connections).await;
    }
}

/// QUIT on every open connection of `connections`, concurrently; leaves them all closed.
async fn quit_all(connections: &mut [Option<Connection>]) {
    let open = connections.iter_mut().filter_map(Option::take);
    futures::future::join_all(open.map(Connection::quit)).await;
}

/// One connection's loop: claim `share`, send, record; pause when there is nothing to send.
async fn lane(w: &Worker, share: i64, shutdown: Shutdown) {
    let mut conn = [None];
    while !shutdown.is_requested() {
        let claimed = claim_and_send(&w.pool, &w.cfg, &w.holder, &w.ledger, share, &mut conn)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(error = %format!("{e:#}"), "delivery round failed; retrying");
                0
            });
        if claimed == 0 {
            tokio::select! {
                _ = shutdown.requested() => break,
                _ = tokio::time::sleep(w.cfg.idle) => {}
            }
        }
    }
    quit_all(&mut conn).await;
}

/// Takes from the rate limit, claims up to `limit`, and sends the batch spread over
/// `connections` (each chunk concurrently, in order on its connection).
async fn claim_and_send(
    pool: &PgPool,
    cfg: &Config,
    holder: &str,
    ledger: &Ledger,
    limit: i64,
    connections: &mut [Option<Connection>],
) -> anyhow::Result<usize> {
    let allowed = match cfg.rate_per_second {
        Some(_) => app::db::rate_limit::take(pool, &cfg.bucket(), limit as i32).await? as i64,
        None => limit,
    };
    if allowed == 0 {
        return Ok(0);
    }
    let t = std::time::Instant::now();
    let batch = deliveries::claim(pool, allowed, cfg.lease_seconds, holder)
        .await
        .context("claiming deliveries")?;
    tracing::debug!(
        n = batch.len(),
        us = t.elapsed().as_micros() as u64,
        "claim"
    );
    // Held until this function returns, whatever happens: an abandoned claim's lease runs out.
    let _in_flight = cfg.held.hold(&batch);
    if batch.is_empty() {
        // Nothing to send: do not hold idle connections open on the server.
        quit_all(connections).await;
        return Ok(0);
    }
    // What the renderers read, once per batch and in two queries: each org's sender (with its
    // DKIM key, parsed once here), each campaign's content.
    let mut org_ids: Vec<i64> = batch.iter().map(|c| c.org_id).collect();
    org_ids.sort_unstable();
    org_ids.dedup();
    let senders: HashMap<i64, Sender> = deliveries::senders(pool, &org_ids)
        .await?
        .into_iter()
        .map(|s| (s.org_id, s))
        .collect();
    let mut refs: Vec<(i64, i64)> = batch
        .iter()
        .filter_map(|c| Some((c.org_id, c.content_campaign()?)))
        .collect();
    refs.sort_unstable();
    refs.dedup();
    // Each campaign's templates compile once per batch; one that does not compile fails its
    // messages at render time (final, with the reason), not the batch.
    // Keyed by (org, campaign): a test job names its campaign by id alone.
    let mut campaigns: HashMap<(i64, i64), Compiled> = HashMap::new();
    let mut names: HashMap<i64, String> = HashMap::new();
    if !refs.is_empty() {
        let mut conn = pool.acquire().await?;
        for k in app::db::campaigns::contents(&mut conn, &refs).await? {
            match Compiled::new(&k) {
                Ok(compiled) => {
                    campaigns.insert((k.org_id, k.id), compiled);
                }
                Err(e) => {
                    tracing::warn!(campaign = k.id, error = %e, "campaign templates do not compile")
                }
            }
        }
        let subscribers: Vec<(i64, i64)> = batch
            .iter()
            .filter_map(|c| Some((c.org_id, c.subscriber_id?)))
            .collect();
        names = app::db::audience::subscriber_names(&mut conn, &subscribers)
            .await?
            .into_iter()
            .collect();
    }
    let mut digest_refs: Vec<(i64, i64)> = batch
        .iter()
        .filter_map(|c| Some((c.org_id, c.digest_send_id?)))
        .collect();
    digest_refs.sort_unstable();
    digest_refs.dedup();
    let digests: HashMap<i64, DigestContent> = if digest_refs.is_empty() {
        HashMap::new()
    } else {
        let mut conn = pool.acquire().await?;
        app::db::digests::contents(&mut conn, &digest_refs)
            .await?
            .into_iter()
            .map(|d| (d.id, d))
            .collect()
    };
    let invites = invite::Invites::load(pool, &batch).await?;
    let signers = dkim::Signers::load(senders.values());
    let looked_up = Lookups {
        senders: &senders,
        signers: &signers,
        campaigns: &campaigns,
        names: &names,
        digests: &digests,
        invites: &invites,
    };
    let per_connection = batch.len().div_ceil(connections.len().max(1));
    let chunks = batch
        .chunks(per_connection)
        .zip(connections.iter_mut())
        .map(|(chunk, conn)| send_chunk(cfg, ledger, &looked_up, chunk, conn));
    // Every chunk runs concurrently on its own connection; outcomes are group-committed.
    for done in futures::future::join_all(chunks).await {
        done?;
    }
    // Every outcome of the batch is committed: the campaigns' progress moved.
    let campaign_ids: Vec<i64> = refs.iter().map(|r| r.1).collect();
    cfg.progress.touch(&campaign_ids);
    Ok(batch.len())
}

/// What the renderers read, loaded once per batch.
struct Lookups<'a> {
    senders: &'a HashMap<i64, Sender>,
    signers: &'a dkim::Signers,
    campaigns: &'a HashMap<(i64, i64), Compiled>,
    names: &'a HashMap<i64, String>,
    digests: &'a HashMap<i64, DigestContent>,
    invites: &'a invite::Invites,
}

/// Sends a chunk in order over one connection (reconnecting after a broken one), handing each
/// outcome to the ledger as soon as it is known; returns once all of them are committed.
async fn send_chunk(
    cfg: &Config,
    ledger: &Ledger,
    looked_up: &Lookups<'_>,
    chunk: &[Claimed],
    conn: &mut Option<Connection>,
) -> anyhow::Result<()> {
    let mut recorded = Vec::with_capacity(chunk.len());
    for c in chunk {
        let cx = Inputs {
            message_id_domain: &cfg.message_id_domain,
            links: &cfg.links,
            sender: looked_up.senders.get(&c.org_id),
            campaign: c
                .content_campaign()
                .and_then(|id| looked_up.campaigns.get(&(c.org_id, id))),
            subscriber_name: c
                .subscriber_id
                .and_then(|id| looked_up.names.get(&id))
                .map(String::as_str),
            digest: c.digest_send_id.and_then(|id| looked_up.digests.get(&id)),
            invites: looked_up.invites,
            dkim: looked_up.signers.for_org(c.org_id),
        };
        let outcome = send_one(cfg, ledger, &cx, c, conn).await;
        recorded.push(ledger.record(ledger::Result {
            job_id: c.job_id.clone(),
            attempt: c.attempt,
            org_id: c.org_id,
            recipient: c.recipient.clone(),
            outcome,
        }));
    }
    for r in recorded {
        r.await
            .map_err(|_| anyhow::anyhow!("the delivery ledger committer stopped"))?
            .map_err(|e| anyhow::anyhow!(e))?;
    }
    Ok(())
}
