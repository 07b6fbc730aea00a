//! The delivery worker: claims due deliveries, renders each at send time, sends it stage by
//! stage over a few reused connections, and records every outcome fenced by its attempt.
//! It runs in every `serve` / `worker` process; the database arbitrates between them.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use lettre::message::{header::ContentType, Mailbox, Message};
use lettre::Address;
use sqlx::PgPool;

use app::db::deliveries::{self, Claimed, Outcome, Sender};
use app::domain::{Backoff, EmailAddress, JobId};

use crate::shutdown::Shutdown;
use crate::smtp::{BodyOutcome, Connection, Refusal, Target};

#[derive(Clone, Debug)]
pub struct Config {
    pub target: Target,
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
}

impl Config {
    /// The rate-limit bucket's key: one bucket per SMTP server, shared by every replica.
    fn bucket(&self) -> String {
        format!("{}:{}", self.target.host, self.target.port)
    }
}

/// Runs rounds until shutdown.
pub async fn run(pool: PgPool, cfg: Config, shutdown: Shutdown) {
    if let Some(rate) = cfg.rate_per_second {
        // A one-second burst; every replica configures the same bucket.
        if let Err(e) =
            app::db::rate_limit::configure(&pool, &cfg.bucket(), rate.max(1.0), rate).await
        {
            tracing::error!(error = %e, "cannot set up the SMTP rate limit; delivery worker not started");
            return;
        }
    }
    while !shutdown.is_requested() {
        let claimed = match round(&pool, &cfg).await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "delivery round failed; retrying");
                0
            }
        };
        if claimed == 0 {
            tokio::select! {
                _ = shutdown.requested() => break,
                _ = tokio::time::sleep(cfg.idle) => {}
            }
        }
    }
}

/// One round: reap expired leases, claim a batch, send it, record the outcomes. Returns how
/// many deliveries were claimed.
pub async fn round(pool: &PgPool, cfg: &Config) -> anyhow::Result<usize> {
    deliveries::reap_expired(pool)
        .await
        .context("reaping expired leases")?;
    let allowed = match cfg.rate_per_second {
        Some(_) => app::db::rate_limit::take(pool, &cfg.bucket(), cfg.batch as i32).await? as i64,
        None => cfg.batch,
    };
    if allowed == 0 {
        return Ok(0);
    }
    let batch = deliveries::claim(pool, allowed, cfg.lease_seconds)
        .await
        .context("claiming deliveries")?;
    if batch.is_empty() {
        return Ok(0);
    }
    let mut senders = HashMap::new();
    for c in &batch {
        if let std::collections::hash_map::Entry::Vacant(slot) = senders.entry(c.org_id) {
            slot.insert(deliveries::sender(pool, c.org_id).await?);
        }
    }
    let per_connection = batch.len().div_ceil(cfg.connections.max(1));
    let chunks = batch
        .chunks(per_connection)
        .map(|chunk| send_chunk(pool, cfg, &senders, chunk));
    // Every chunk runs concurrently on its own connection and records its own outcomes.
    for done in futures::future::join_all(chunks).await {
        done?;
    }
    Ok(batch.len())
}

/// Writes a chunk's outcomes (fenced) and the suppressions of its hard bounces in one
/// transaction, as soon as the chunk is done: the sooner a result is recorded, the fewer
/// accepted messages a crash can turn into `unknown`.
async fn record(pool: &PgPool, chunk: &[Claimed], outcomes: Vec<Outcome>) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    for (c, outcome) in chunk.iter().zip(&outcomes) {
        let hard_bounce =
            matches!(outcome, Outcome::Failed { reply } if reply.starts_with(HARD_BOUNCE));
        if let (true, Ok(email)) = (hard_bounce, EmailAddress::parse(&c.recipient)) {
            let source = format!("delivery {}", c.job_id);
            app::db::audience::suppress(&mut tx, c.org_id, &email, "hard_bounce", &source).await?;
        }
    }
    let results: Vec<(String, i32, Outcome)> = chunk
        .iter()
        .zip(outcomes)
        .map(|(c, o)| (c.job_id.clone(), c.attempt, o))
        .collect();
    deliveries::record(&mut tx, &results).await?;
    tx.commit().await.context("recording delivery outcomes")
}

/// Prefix of a failure reply that also suppresses the address.
const HARD_BOUNCE: &str = "hard bounce: ";

/// Sends a chunk in order over one connection, reconnecting after a broken one, then records
/// its outcomes.
async fn send_chunk(
    pool: &PgPool,
    cfg: &Config,
    senders: &HashMap<i64, Sender>,
    chunk: &[Claimed],
) -> anyhow::Result<()> {
    let mut conn: Option<Connection> = None;
    let mut outcomes = Vec::with_capacity(chunk.len());
    for c in chunk {
        outcomes.push(send_one(pool, cfg, senders, c, &mut conn).await);
    }
    if let Some(conn) = conn {
        conn.quit().await;
    }
    record(pool, chunk, outcomes).await
}

async fn send_one(
    pool: &PgPool,
    cfg: &Config,
    senders: &HashMap<i64, Sender>,
    c: &Claimed,
    conn: &mut Option<Connection>,
) -> Outcome {
    let rendered = match render(cfg, senders.get(&c.org_id), c) {
        Ok(r) => r,
        Err(e) => return retry_or_fail(cfg, c.attempt, format!("cannot render: {e}")),
    };
    if conn.as_ref().is_none_or(Connection::is_broken) {
        match Connection::open(&cfg.target).await {
            Ok(opened) => *conn = Some(opened),
            Err(refusal) => return refused(cfg, c.attempt, refusal),
        }
    }
    let Some(smtp) = conn.as_mut() else {
        return retry_or_fail(cfg, c.attempt, "no connection".into());
    };
    if let Err(refusal) = smtp.prepare(&rendered.from, &rendered.to).await {
        return refused(cfg, c.attempt, refusal);
    }
    // From here a crash must read as "may have been sent": record it before the body goes out.
    // If that write fails, the body is not sent and the message is retried.
    match deliveries::mark_body_started(pool, &[(c.job_id.clone(), c.attempt)]).await {
        Ok(1) => {}
        Ok(_) => {
            *conn = None; // our claim was reaped meanwhile: abandon this transaction
            return retry_or_fail(cfg, c.attempt, "lease lost before the body".into());
        }
        Err(e) => {
            *conn = None;
            return retry_or_fail(
                cfg,
                c.attempt,
                format!("could not record the body start: {e}"),
            );
        }
    }
    match smtp.body(&rendered.bytes).await {
        BodyOutcome::Accepted(reply) => Outcome::Delivered { reply },
        BodyOutcome::Refused(refusal) => refused(cfg, c.attempt, refusal),
        BodyOutcome::Unknown(error) => {
            *conn = None;
            Outcome::Unknown { error }
        }
    }
}

fn refused(cfg: &Config, attempt: i32, r: Refusal) -> Outcome {
    match (r.permanent, r.hard_bounce) {
        (true, true) => Outcome::Failed {
            reply: format!("{HARD_BOUNCE}{}", r.reply),
        },
        (true, false) => Outcome::Failed { reply: r.reply },
        (false, _) => retry_or_fail(cfg, attempt, r.reply),
    }
}

fn retry_or_fail(cfg: &Config, attempt: i32, error: String) -> Outcome {
    match cfg.backoff.delay(attempt, rand::random::<f64>()) {
        Some(after) => Outcome::Retry {
            error,
            after_seconds: after.as_secs_f64(),
        },
        None => Outcome::Failed {
            reply: format!("gave up after {attempt} attempts: {error}"),
        },
    }
}

struct Rendered {
    from: Address,
    to: Address,
    bytes: Vec<u8>,
}

/// One renderer per kind; test mail now, digest and campaign mail arrive with their engines.
fn render(cfg: &Config, sender: Option<&Sender>, c: &Claimed) -> anyhow::Result<Rendered> {
    let sender = sender.context("no sender identity for the organisation")?;
    let job: JobId = c.job_id.parse()?;
    let from: Address = sender.from_address.parse()?;
    let to: Address = c.recipient.parse()?;
    let (subject, body) = match &job {
        JobId::Test { .. } => (
            "Mailroom test message".to_string(),
            format!("This is a test message from Mailroom.\n\n{}\n", c.job_id),
        ),
        other => anyhow::bail!("no renderer for {} mail yet", other.kind()),
    };
    let mut builder = Message::builder()
        .from(Mailbox::new(Some(sender.from_name.clone()), from.clone()))
        .to(Mailbox::new(None, to.clone()))
        .message_id(Some(job.message_id(&cfg.message_id_domain)))
        .subject(subject)
        .header(ContentType::TEXT_PLAIN);
    if let Some(reply_to) = &sender.reply_to {
        builder = builder.reply_to(reply_to.parse()?);
    }
    Ok(Rendered {
        from,
        to,
        bytes: builder.body(body)?.formatted(),
    })
}
