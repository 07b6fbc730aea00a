//! Group commit of everything the connections write: body-start marks and outcomes. Every
//! connection must record "body started" before it writes a body (so a crash reads as
//! `unknown`, never as a silent resend) and should record each outcome as soon as it has it (so
//! a crash or a stuck connection turns as few accepted messages as possible into `unknown`). One
//! statement per message would cap the engine at the database's commit rate, so requests from
//! all connections queue here and are written together: while one write is in flight, the next
//! group gathers.
//!
//! Marks and outcomes have a committer each. A mark is on every message's critical path (the
//! body waits for it), so it is one autocommitted statement that never queues behind an outcome
//! transaction; outcomes are off the critical path.

use std::collections::HashSet;

use anyhow::Context;
use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};

use app::db::delivery::Outcome;
use app::domain::EmailAddress;

use super::send::HARD_BOUNCE;

/// One outcome to record.
#[derive(Clone)]
pub struct Result {
    pub job_id: String,
    pub attempt: i32,
    pub org_id: i64,
    pub recipient: String,
    pub outcome: Outcome,
}

impl Result {
    pub fn of(c: &app::db::delivery::Claimed, outcome: Outcome) -> Self {
        Result {
            job_id: c.job_id.clone(),
            attempt: c.attempt,
            org_id: c.org_id,
            recipient: c.recipient.clone(),
            outcome,
        }
    }
}

type Reply<T> = oneshot::Sender<std::result::Result<T, String>>;

/// A handle to the committer tasks; cheap to clone.
#[derive(Clone)]
pub struct Ledger {
    marks: mpsc::UnboundedSender<((String, i32), Reply<bool>)>,
    results: mpsc::UnboundedSender<(Result, Reply<()>)>,
}

/// Resolves when an outcome is committed.
pub type Recorded = oneshot::Receiver<std::result::Result<(), String>>;

const STOPPED: &str = "the delivery ledger committer stopped";

impl Ledger {
    /// Starts the committers; they end when every handle is dropped.
    pub fn start(pool: PgPool) -> Self {
        let (marks, mark_rx) = mpsc::unbounded_channel();
        let (results, result_rx) = mpsc::unbounded_channel();
        tokio::spawn(group_commit(pool.clone(), mark_rx, write_marks));
        tokio::spawn(group_commit(pool, result_rx, write_results));
        Ledger { marks, results }
    }

    /// Records that this attempt's body is about to be written. `Ok(false)`: the claim was lost
    /// (reaped meanwhile) and the body must not be sent; `Err`: the mark could not be written.
    pub async fn mark(&self, job_id: &str, attempt: i32) -> std::result::Result<bool, String> {
        let (tx, rx) = oneshot::channel();
        self.marks
            .send(((job_id.to_string(), attempt), tx))
            .map_err(|_| STOPPED.to_string())?;
        rx.await.map_err(|_| STOPPED.to_string())?
    }

    /// Marks several attempts at once (they join the same group commit). Answers per attempt,
    /// in order, as [`Ledger::mark`] does.
    pub async fn mark_all(&self, held: &[(&str, i32)]) -> Vec<std::result::Result<bool, String>> {
        futures::future::join_all(held.iter().map(|(job, attempt)| self.mark(job, *attempt))).await
    }

    /// Queues an outcome for the next group commit; await the receiver to know it is written.
    pub fn record(&self, result: Result) -> Recorded {
        let (tx, rx) = oneshot::channel();
        if let Err(mpsc::error::SendError((_, tx))) = self.results.send((result, tx)) {
            let _ = tx.send(Err(STOPPED.to_string()));
        }
        rx
    }
}

/// Pauses before the retries of a failed group write (a dropped connection, a failover, a
/// deadlock): every write is fenced and idempotent, so repeating one is safe.
const RETRY_AFTER: [std::time::Duration; 3] = [
    std::time::Duration::from_millis(100),
    std::time::Duration::from_millis(500),
    std::time::Duration::from_secs(2),
];

/// Takes whatever is queued, writes it with one call of `write` (which answers per item), and
/// repeats; a write that still fails after the retries fails every item of its group.
async fn group_commit<I, T, F, Fut>(
    pool: PgPool,
    mut rx: mpsc::UnboundedReceiver<(I, Reply<T>)>,
    write: F,
) where
    I: Clone,
    T: Clone,
    F: Fn(PgPool, Vec<I>) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Vec<T>>>,
{
    while let Some(first) = rx.recv().await {
        let mut group = vec![first];
        while let Ok(next) = rx.try_recv() {
            group.push(next);
        }
        let (items, replies): (Vec<I>, Vec<Reply<T>>) = group.into_iter().unzip();
        let t = std::time::Instant::now();
        let n = items.len();
        let mut written = write(pool.clone(), items.clone()).await;
        for pause in RETRY_AFTER {
            let Err(e) = &written else { break };
            tracing::warn!(error = %format!("{e:#}"), "delivery ledger write failed; retrying");
            tokio::time::sleep(pause).await;
            written = write(pool.clone(), items.clone()).await;
        }
        tracing::debug!(n, us = t.elapsed().as_micros() as u64, "ledger group");
        match written {
            Ok(answers) => {
                for (reply, answer) in replies.into_iter().zip(answers) {
                    let _ = reply.send(Ok(answer));
                }
            }
            Err(e) => {
                let error = format!("could not write to the delivery ledger: {e:#}");
                for reply in replies {
                    let _ = reply.send(Err(error.clone()));
                }
            }
        }
    }
}

/// One statement for the group; answers, per mark, whether the claim still held.
async fn write_marks(pool: PgPool, held: Vec<(String, i32)>) -> anyhow::Result<Vec<bool>> {
    let mut conn = pool.acquire().await?;
    let marked: HashSet<String> = app::db::delivery::mark_body_started(&mut conn, &held)
        .await
        .context("marking bodies as started")?
        .into_iter()
        .collect();
    Ok(held.iter().map(|(job, _)| marked.contains(job)).collect())
}

/// Outcomes (fenced, one statement, progress slots in the same statement) and the
/// suppressions of hard bounces, in one transaction.
async fn write_results(pool: PgPool, batch: Vec<Result>) -> anyhow::Result<Vec<()>> {
    let mut tx = pool.begin().await?;
    for r in &batch {
        let hard_bounce =
            matches!(&r.outcome, Outcome::Failed { reply } if reply.starts_with(HARD_BOUNCE));
        if let (true, Ok(email)) = (hard_bounce, EmailAddress::parse(&r.recipient)) {
            let source = format!("delivery {}", r.job_id);
            app::db::audience::suppress(
                &mut tx,
                r.org_id,
                &email,
                app::domain::SuppressionReason::HardBounce,
                &source,
            )
            .await
            .context("suppressing a hard bounce")?;
        }
    }
    let n = batch.len();
    let rows: Vec<(String, i32, Outcome)> = batch
        .into_iter()
        .map(|r| (r.job_id, r.attempt, r.outcome))
        .collect();
    app::db::delivery::record(&mut tx, &rows)
        .await
        .context("writing delivery outcomes")?;
    tx.commit().await.context("recording delivery outcomes")?;
    Ok(vec![(); n])
}
