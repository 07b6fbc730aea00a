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
//! transaction; outcomes are off the critical path, so their committer may also wait a few
//! milliseconds for more (`outcome_gather`): a statement's fixed cost (opening the table's
//! indexes, the count trigger, the commit) is then shared by more rows.
//!
//! A group's marks are one database row. The ledger remembers which group each marked attempt
//! belongs to and deletes the row with the outcome that completes it, once every other outcome
//! of the group is committed; a row whose writer dies first is swept by the leader.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// The mark groups this process wrote whose outcomes are not all committed yet.
#[derive(Default)]
struct Groups {
    /// The group of each marked attempt without a committed outcome.
    of: HashMap<(String, i32), i64>,
    /// How many attempts of each group have no committed outcome.
    open: HashMap<i64, usize>,
}

type Shared = Arc<Mutex<Groups>>;

fn lock(groups: &Shared) -> std::sync::MutexGuard<'_, Groups> {
    // The maps stay consistent whatever a panicking holder did: each update is one insert or
    // one removal.
    groups
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Groups {
    /// The groups whose every remaining attempt is in `batch` (outcomes about to be written).
    fn completed_by(&self, batch: &[Result]) -> Vec<i64> {
        let mut in_batch: HashMap<i64, usize> = HashMap::new();
        for r in batch {
            if let Some(group) = self.of.get(&(r.job_id.clone(), r.attempt)) {
                *in_batch.entry(*group).or_default() += 1;
            }
        }
        in_batch
            .into_iter()
            .filter(|(group, n)| self.open.get(group) == Some(n))
            .map(|(group, _)| group)
            .collect()
    }

    /// Forgets the attempts of `batch`, whose outcomes are committed.
    fn committed(&mut self, batch: &[Result]) {
        for r in batch {
            let Some(group) = self.of.remove(&(r.job_id.clone(), r.attempt)) else {
                continue;
            };
            if let Some(n) = self.open.get_mut(&group) {
                *n -= 1;
                if *n == 0 {
                    self.open.remove(&group);
                }
            }
        }
    }

    /// Forgets the groups holding any attempt of `batch`, whose outcomes could not be written:
    /// those attempts stay `sending` until reaped, their marks must outlive them, and the
    /// leader's sweep deletes the rows once none is in flight. Keeps the maps from growing
    /// through a database outage.
    fn abandoned(&mut self, batch: &[Result]) {
        let lost: HashSet<i64> = batch
            .iter()
            .filter_map(|r| self.of.get(&(r.job_id.clone(), r.attempt)).copied())
            .collect();
        if lost.is_empty() {
            return;
        }
        self.of.retain(|_, group| !lost.contains(group));
        self.open.retain(|group, _| !lost.contains(group));
    }
}

/// Resolves when an outcome is committed.
pub type Recorded = oneshot::Receiver<std::result::Result<(), String>>;

const STOPPED: &str = "the delivery ledger committer stopped";

impl Ledger {
    /// Starts the committers; they end when every handle is dropped.
    pub fn start(pool: PgPool, outcome_gather: Duration) -> Self {
        let (marks, mark_rx) = mpsc::unbounded_channel();
        let (results, result_rx) = mpsc::unbounded_channel();
        let groups = Shared::default();
        let marking = groups.clone();
        tokio::spawn(group_commit(
            pool.clone(),
            mark_rx,
            Duration::ZERO,
            move |pool, held| write_marks(pool, held, marking.clone()),
        ));
        tokio::spawn(group_commit(
            pool,
            result_rx,
            outcome_gather,
            move |pool, batch| write_results(pool, batch, groups.clone()),
        ));
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
const RETRY_AFTER: [Duration; 3] = [
    Duration::from_millis(100),
    Duration::from_millis(500),
    Duration::from_secs(2),
];

/// Most items one write takes.
const MAX_GROUP: usize = 2048;

/// Takes whatever is queued, and whatever else arrives within `gather` of the first item,
/// writes it with one call of `write` (which answers per item), and repeats; a write that still
/// fails after the retries fails every item of its group.
async fn group_commit<I, T, F, Fut>(
    pool: PgPool,
    mut rx: mpsc::UnboundedReceiver<(I, Reply<T>)>,
    gather: Duration,
    write: F,
) where
    I: Clone,
    T: Clone,
    F: Fn(PgPool, Vec<I>) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Vec<T>>>,
{
    while let Some(first) = rx.recv().await {
        let until = tokio::time::Instant::now() + gather;
        let mut group = vec![first];
        while group.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(next) => group.push(next),
                Err(_) if gather.is_zero() => break,
                Err(_) => match tokio::time::timeout_at(until, rx.recv()).await {
                    Ok(Some(next)) => group.push(next),
                    // Closed (the last group is written now) or gathered long enough.
                    Ok(None) | Err(_) => break,
                },
            }
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
async fn write_marks(
    pool: PgPool,
    held: Vec<(String, i32)>,
    groups: Shared,
) -> anyhow::Result<Vec<bool>> {
    let mut conn = pool.acquire().await?;
    let written = app::db::delivery::mark_body_started(&mut conn, &held)
        .await
        .context("marking bodies as started")?;
    // By attempt: an expired attempt of a job and its re-claimed successor may both be here.
    let marked: HashSet<(String, i32)> = written.attempts.into_iter().collect();
    if let Some(group) = written.group {
        let mut g = lock(&groups);
        for attempt in &marked {
            g.of.insert(attempt.clone(), group);
        }
        g.open.insert(group, marked.len());
    }
    Ok(held.iter().map(|held| marked.contains(held)).collect())
}

/// Outcomes (fenced, one statement, progress slots in the same statement) and the
/// suppressions of hard bounces, in one transaction.
async fn write_results(
    pool: PgPool,
    batch: Vec<Result>,
    groups: Shared,
) -> anyhow::Result<Vec<()>> {
    let finished_marks = lock(&groups).completed_by(&batch);
    let written = write_outcomes(&pool, &batch, &finished_marks).await;
    match &written {
        Ok(()) => lock(&groups).committed(&batch),
        Err(_) => lock(&groups).abandoned(&batch),
    }
    written.map(|()| vec![(); batch.len()])
}

async fn write_outcomes(
    pool: &PgPool,
    batch: &[Result],
    finished_marks: &[i64],
) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    for r in batch {
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
    let rows: Vec<(String, i32, Outcome)> = batch
        .iter()
        .map(|r| (r.job_id.clone(), r.attempt, r.outcome.clone()))
        .collect();
    app::db::delivery::record(&mut tx, &rows, finished_marks)
        .await
        .context("writing delivery outcomes")?;
    tx.commit().await.context("recording delivery outcomes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(job: &str, attempt: i32) -> Result {
        Result {
            job_id: job.into(),
            attempt,
            org_id: 1,
            recipient: "r@example.org".into(),
            outcome: Outcome::Delivered {
                reply: "250 ok".into(),
            },
        }
    }

    fn groups(marks: &[(&str, i32, i64)]) -> Groups {
        let mut g = Groups::default();
        for (job, attempt, group) in marks {
            g.of.insert((job.to_string(), *attempt), *group);
            *g.open.entry(*group).or_default() += 1;
        }
        g
    }

    #[test]
    fn a_group_completes_only_with_the_batch_holding_all_its_uncommitted_attempts() {
        let mut g = groups(&[("a", 1, 7), ("b", 1, 7), ("c", 2, 8)]);
        // Half of group 7, and an attempt that was never marked (or of another attempt number).
        let first = [result("a", 1), result("c", 1), result("z", 1)];
        assert!(g.completed_by(&first).is_empty());
        g.committed(&first);
        assert_eq!(g.open.get(&7), Some(&1));
        assert_eq!(g.open.get(&8), Some(&1));
        // The rest of 7 and all of 8.
        let second = [result("b", 1), result("c", 2)];
        let mut done = g.completed_by(&second);
        done.sort();
        assert_eq!(done, vec![7, 8]);
        g.committed(&second);
        assert!(g.of.is_empty() && g.open.is_empty());
    }

    #[test]
    fn a_batch_not_committed_completes_nothing_for_the_next_one() {
        let g = groups(&[("a", 1, 7), ("b", 1, 7)]);
        // The batch with "a" failed: `committed` was never called, so "b" alone is not enough.
        assert!(g.completed_by(&[result("a", 1)]).is_empty());
        assert!(g.completed_by(&[result("b", 1)]).is_empty());
        assert_eq!(g.completed_by(&[result("a", 1), result("b", 1)]), vec![7]);
    }

    #[test]
    fn a_batch_that_could_not_be_written_leaves_its_groups_to_the_sweep() {
        let mut g = groups(&[("a", 1, 7), ("b", 1, 7), ("c", 1, 8)]);
        g.abandoned(&[result("a", 1)]);
        // Group 7 is never deleted by this process (b's outcome alone must not delete a's
        // mark), and nothing of it is kept; group 8 is untouched.
        assert!(g.completed_by(&[result("b", 1)]).is_empty());
        assert!(!g.open.contains_key(&7) && !g.of.values().any(|group| *group == 7));
        assert_eq!(g.completed_by(&[result("c", 1)]), vec![8]);
    }
}
