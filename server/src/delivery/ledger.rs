//! Group commit of everything the connections write: body-start marks and outcomes. Every
//! connection must record "body started" before it writes a body (so a crash reads as
//! `unknown`, never as a silent resend) and should record each outcome as soon as it has it (so
//! a crash or a stuck connection turns as few accepted messages as possible into `unknown`). One
//! statement per message would cap the engine at the database's commit rate, so requests from
//! all connections queue here and are written together: while one commit is in flight, the next
//! group gathers.

use std::collections::HashSet;

use anyhow::Context;
use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};

use app::db::deliveries::{self, Outcome};
use app::domain::EmailAddress;

use super::send::HARD_BOUNCE;

/// One outcome to record.
pub struct Result {
    pub job_id: String,
    pub attempt: i32,
    pub org_id: i64,
    pub recipient: String,
    pub outcome: Outcome,
}

type MarkReply = oneshot::Sender<std::result::Result<bool, String>>;

enum Request {
    Mark(String, i32, MarkReply),
    Record(Result, oneshot::Sender<std::result::Result<(), String>>),
}

/// A handle to the committer task; cheap to clone.
#[derive(Clone)]
pub struct Ledger {
    queue: mpsc::UnboundedSender<Request>,
}

/// Resolves when an outcome is committed.
pub type Recorded = oneshot::Receiver<std::result::Result<(), String>>;

const STOPPED: &str = "the delivery ledger committer stopped";

impl Ledger {
    /// Starts the committer; it ends when every handle is dropped.
    pub fn start(pool: PgPool) -> Self {
        let (queue, rx) = mpsc::unbounded_channel();
        tokio::spawn(commit_loop(pool, rx));
        Ledger { queue }
    }

    /// Records that this attempt's body is about to be written. `Ok(false)`: the claim was lost
    /// (reaped meanwhile) and the body must not be sent; `Err`: the mark could not be written.
    pub async fn mark(&self, job_id: &str, attempt: i32) -> std::result::Result<bool, String> {
        let (tx, rx) = oneshot::channel();
        self.queue
            .send(Request::Mark(job_id.to_string(), attempt, tx))
            .map_err(|_| STOPPED.to_string())?;
        rx.await.map_err(|_| STOPPED.to_string())?
    }

    /// Queues an outcome for the next group commit; await the receiver to know it is written.
    pub fn record(&self, result: Result) -> Recorded {
        let (tx, rx) = oneshot::channel();
        if let Err(mpsc::error::SendError(Request::Record(_, tx))) =
            self.queue.send(Request::Record(result, tx))
        {
            let _ = tx.send(Err(STOPPED.to_string()));
        }
        rx
    }
}

async fn commit_loop(pool: PgPool, mut rx: mpsc::UnboundedReceiver<Request>) {
    while let Some(first) = rx.recv().await {
        let mut marks = Vec::new();
        let mut results = Vec::new();
        let mut next = Some(first);
        while let Some(request) = next.take().or_else(|| rx.try_recv().ok()) {
            match request {
                Request::Mark(job, attempt, reply) => marks.push((job, attempt, reply)),
                Request::Record(result, reply) => results.push((result, reply)),
            }
        }
        // One transaction, one commit, for everything gathered: fewer round trips and WAL
        // flushes per message, which is what bounds the engine.
        let (batch, replies): (Vec<Result>, Vec<_>) = results.into_iter().unzip();
        let held: Vec<(String, i32)> = marks.iter().map(|(j, a, _)| (j.clone(), *a)).collect();
        match write(&pool, &held, batch).await {
            Ok(marked) => {
                let marked: HashSet<String> = marked.into_iter().collect();
                for (job, _, reply) in marks {
                    let _ = reply.send(Ok(marked.contains(&job)));
                }
                for reply in replies {
                    let _ = reply.send(Ok(()));
                }
            }
            Err(e) => {
                let error = format!("could not write to the delivery ledger: {e:#}");
                for (_, _, reply) in marks {
                    let _ = reply.send(Err(error.clone()));
                }
                for reply in replies {
                    let _ = reply.send(Err(error.clone()));
                }
            }
        }
    }
}

/// Body-start marks, outcomes (fenced, one statement, progress slots in the same statement)
/// and the suppressions of hard bounces, in one transaction. Returns the jobs marked.
async fn write(
    pool: &PgPool,
    marks: &[(String, i32)],
    batch: Vec<Result>,
) -> anyhow::Result<Vec<String>> {
    let mut tx = pool.begin().await?;
    let marked = if marks.is_empty() {
        Vec::new()
    } else {
        deliveries::mark_body_started(&mut tx, marks).await?
    };
    for r in &batch {
        let hard_bounce =
            matches!(&r.outcome, Outcome::Failed { reply } if reply.starts_with(HARD_BOUNCE));
        if let (true, Ok(email)) = (hard_bounce, EmailAddress::parse(&r.recipient)) {
            let source = format!("delivery {}", r.job_id);
            app::db::audience::suppress(&mut tx, r.org_id, &email, "hard_bounce", &source).await?;
        }
    }
    let rows: Vec<(String, i32, Outcome)> = batch
        .into_iter()
        .map(|r| (r.job_id, r.attempt, r.outcome))
        .collect();
    if !rows.is_empty() {
        deliveries::record(&mut tx, &rows).await?;
    }
    tx.commit()
        .await
        .context("committing to the delivery ledger")?;
    Ok(marked)
}
