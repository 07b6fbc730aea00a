//! Group commit of everything the connections write: body-start marks and outcomes. Every
//! connection must record "body started" before it writes a body (so a crash reads as
//! `unknown`, never as a silent resend) and should record each outcome as soon as it has it (so
//! a crash or a stuck connection turns as few accepted messages as possible into `unknown`). One
//! statement per message would cap the engine at the database's commit rate, so requests from
//! all connections queue here and are written together: while one write is in flight, the next
//! group gathers.
//!
//! One committer writes both, in one statement: the marks waiting and every outcome waiting
//! with them. A mark is on its message's critical path (the body waits for it), so it is written
//! as soon as the previous write ends; outcomes are not, so when no mark is waiting they wait up
//! to `outcome_gather` for one to ride with, and are written alone after that. A busy worker
//! thus pays one statement and one commit for both, instead of one each.
//!
//! A group's marks are one database row. The ledger remembers which group each marked attempt
//! belongs to and deletes the row with the outcome that completes it, once every other outcome
//! of the group is committed; a row whose writer dies first is swept by the leader.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use anyhow::Context;
use sqlx::pool::PoolConnection;
use sqlx::{Connection, PgConnection, PgPool, Postgres};
use tokio::sync::{mpsc, oneshot};

use app::db::delivery::Outcome;
use app::domain::{EmailAddress, OrgId};

/// One outcome to record.
#[derive(Clone)]
pub struct Result {
    pub job_id: String,
    pub attempt: i32,
    pub org: OrgId,
    pub recipient: EmailAddress,
    pub outcome: Outcome,
}

impl Result {
    pub fn of(c: &app::db::delivery::Claimed, outcome: Outcome) -> Self {
        Result {
            job_id: c.job.to_string(),
            attempt: c.attempt,
            org: c.org,
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

/// A mark on its way to the database ([`Ledger::request_mark`]).
pub struct Marking(oneshot::Receiver<std::result::Result<bool, String>>);

impl Marking {
    /// As [`Ledger::mark`] answers.
    pub async fn answer(self) -> std::result::Result<bool, String> {
        self.0.await.map_err(|_| STOPPED.to_string())?
    }
}

/// Resolves when an outcome is committed.
pub type Recorded = oneshot::Receiver<std::result::Result<(), String>>;

const STOPPED: &str = "the delivery ledger committer stopped";

impl Ledger {
    /// Starts the committer; it ends when every handle is dropped, after writing what is queued.
    pub fn start(pool: PgPool, outcome_gather: Duration) -> Self {
        let (marks, mark_rx) = mpsc::unbounded_channel();
        let (results, result_rx) = mpsc::unbounded_channel();
        tokio::spawn(commit(
            pool,
            Queues {
                marks: mark_rx,
                results: result_rx,
            },
            outcome_gather,
        ));
        Ledger { marks, results }
    }

    /// Records that this attempt's body is about to be written. `Ok(false)`: the claim was lost
    /// (reaped meanwhile) and the body must not be sent; `Err`: the mark could not be written.
    pub async fn mark(&self, job_id: &str, attempt: i32) -> std::result::Result<bool, String> {
        self.request_mark(job_id, attempt).answer().await
    }

    /// Queues a mark for the next group commit at once (not when first awaited, as an `async`
    /// call would), so that a connection can ask for its next messages' marks while it sends.
    pub fn request_mark(&self, job_id: &str, attempt: i32) -> Marking {
        let (tx, rx) = oneshot::channel();
        if let Err(mpsc::error::SendError((_, tx))) =
            self.marks.send(((job_id.to_string(), attempt), tx))
        {
            let _ = tx.send(Err(STOPPED.to_string()));
        }
        Marking(rx)
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

/// Most marks, and most outcomes, one write takes.
const MAX_GROUP: usize = 2048;

type MarkRequest = ((String, i32), Reply<bool>);
type ResultRequest = (Result, Reply<()>);

/// What the connections have asked for; a queue closes once every handle is dropped.
struct Queues {
    marks: mpsc::UnboundedReceiver<MarkRequest>,
    results: mpsc::UnboundedReceiver<ResultRequest>,
}

/// One write's worth of requests.
#[derive(Default)]
struct Group {
    marks: Vec<MarkRequest>,
    results: Vec<ResultRequest>,
}

impl Group {
    /// Takes whatever is queued now, up to the group's limits.
    fn take_queued(&mut self, q: &mut Queues) {
        while self.marks.len() < MAX_GROUP {
            match q.marks.try_recv() {
                Ok(m) => self.marks.push(m),
                Err(_) => break,
            }
        }
        while self.results.len() < MAX_GROUP {
            match q.results.try_recv() {
                Ok(r) => self.results.push(r),
                Err(_) => break,
            }
        }
    }
}

/// Waits for the next request, then gathers a group: every mark and outcome queued, and, when
/// there is no mark, whatever arrives within `gather` (a mark ends the wait at once). `None`
/// once both queues are closed and empty.
async fn gather_group(q: &mut Queues, gather: Duration) -> Option<Group> {
    let mut group = Group::default();
    tokio::select! {
        biased;
        Some(m) = q.marks.recv() => group.marks.push(m),
        Some(r) = q.results.recv() => group.results.push(r),
        else => return None,
    }
    group.take_queued(q);
    if group.marks.is_empty() && !gather.is_zero() {
        let until = tokio::time::Instant::now() + gather;
        while group.results.len() < MAX_GROUP {
            tokio::select! {
                biased;
                Some(m) = q.marks.recv() => {
                    group.marks.push(m);
                    break;
                }
                Some(r) = q.results.recv() => group.results.push(r),
                _ = tokio::time::sleep_until(until) => break,
                // Both closed: write the last group now.
                else => break,
            }
        }
        group.take_queued(q);
    }
    Some(group)
}

/// The committer: gathers a group, writes it with one statement (retrying a failed write),
/// answers every request of it, and repeats; a write that still fails after the retries fails
/// every request of its group.
async fn commit(pool: PgPool, mut q: Queues, gather: Duration) {
    let mut groups = Groups::default();
    let mut kept = None;
    while let Some(group) = gather_group(&mut q, gather).await {
        let (marks, mark_replies): (Vec<(String, i32)>, Vec<Reply<bool>>) =
            group.marks.into_iter().unzip();
        let (results, result_replies): (Vec<Result>, Vec<Reply<()>>) =
            group.results.into_iter().unzip();
        let t = std::time::Instant::now();
        let mut written = write(&pool, &mut kept, &marks, &results, &mut groups).await;
        for pause in RETRY_AFTER {
            let Err(e) = &written else { break };
            let trouble = crate::workers::note_write(&written).map_or("", |t| t.describe());
            tracing::warn!(error = %format!("{e:#}"), trouble, "delivery ledger write failed; retrying");
            tokio::time::sleep(pause).await;
            written = write(&pool, &mut kept, &marks, &results, &mut groups).await;
        }
        crate::workers::note_write(&written);
        tracing::debug!(
            marks = marks.len(),
            outcomes = results.len(),
            us = t.elapsed().as_micros() as u64,
            "ledger group"
        );
        match written {
            Ok(answers) => {
                for (reply, answer) in mark_replies.into_iter().zip(answers) {
                    let _ = reply.send(Ok(answer));
                }
                for reply in result_replies {
                    let _ = reply.send(Ok(()));
                }
            }
            Err(e) => {
                let error = format!("could not write to the delivery ledger: {e:#}");
                for reply in mark_replies {
                    let _ = reply.send(Err(error.clone()));
                }
                for reply in result_replies {
                    let _ = reply.send(Err(error.clone()));
                }
            }
        }
    }
}

/// One statement for the group (in a transaction with the suppressions of hard bounces, when
/// there are any); answers, per mark, whether the claim still held.
///
/// The committer keeps one connection (`kept`) from write to write: sqlx pings a connection
/// when the pool hands it out and again when it is given back, two round trips for a one-
/// statement write. After a failed write the connection goes back to the pool, whose ping on
/// return closes it if it is broken, and the next write takes another.
async fn write(
    pool: &PgPool,
    kept: &mut Option<PoolConnection<Postgres>>,
    held: &[(String, i32)],
    batch: &[Result],
    groups: &mut Groups,
) -> anyhow::Result<Vec<bool>> {
    let finished_marks = groups.completed_by(batch);
    let written = async {
        let conn = match kept.take() {
            Some(conn) => conn,
            None => pool.acquire().await?,
        };
        write_group(kept.insert(conn), held, batch, &finished_marks).await
    }
    .await;
    if written.is_err() {
        *kept = None;
    }
    match &written {
        Ok(marked) => {
            groups.committed(batch);
            if let Some(group) = marked.group {
                // By attempt: an expired attempt of a job and its re-claimed successor may
                // both be here.
                for attempt in &marked.attempts {
                    groups.of.insert(attempt.clone(), group);
                }
                groups.open.insert(group, marked.attempts.len());
            }
        }
        Err(_) => groups.abandoned(batch),
    }
    let marked: HashSet<(String, i32)> = written?.attempts.into_iter().collect();
    Ok(held.iter().map(|held| marked.contains(held)).collect())
}

async fn write_group(
    conn: &mut PgConnection,
    held: &[(String, i32)],
    batch: &[Result],
    finished_marks: &[i64],
) -> anyhow::Result<app::db::delivery::Marked> {
    let rows: Vec<(String, i32, Outcome)> = batch
        .iter()
        .map(|r| (r.job_id.clone(), r.attempt, r.outcome.clone()))
        .collect();
    let bounced: Vec<&Result> = batch
        .iter()
        .filter(|r| {
            matches!(
                &r.outcome,
                Outcome::Failed {
                    failure: app::domain::Failure::HardBounce,
                    ..
                }
            )
        })
        .collect();
    if bounced.is_empty() {
        let (marked, _) = app::db::delivery::mark_and_record(conn, held, &rows, finished_marks)
            .await
            .context("writing body-start marks and delivery outcomes")?;
        return Ok(marked);
    }
    let mut tx = conn.begin().await?;
    for r in bounced {
        let source = format!("delivery {}", r.job_id);
        app::db::audience::suppress(
            &mut tx,
            r.org.0,
            &r.recipient,
            app::domain::SuppressionReason::HardBounce,
            &source,
        )
        .await
        .context("suppressing a hard bounce")?;
    }
    let (marked, _) = app::db::delivery::mark_and_record(&mut tx, held, &rows, finished_marks)
        .await
        .context("writing body-start marks and delivery outcomes")?;
    tx.commit().await.context("recording delivery outcomes")?;
    Ok(marked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(job: &str, attempt: i32) -> Result {
        Result {
            job_id: job.into(),
            attempt,
            org: OrgId(1),
            recipient: EmailAddress::parse("r@example.org").unwrap(),
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
