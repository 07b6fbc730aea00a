//! The delivery worker's steady state, with claiming off the connections' path:
//!
//! - **feeders** claim batches ahead of the connections. A feeder claims only when the hand-off
//!   queue has room for its whole share, so at most `batch` claimed messages ever wait: what is
//!   claimed starts promptly, and a crash strands at most that many until their lease runs out.
//! - **connections** each take the next waiting message as soon as they are free, send it, and
//!   hand its outcome to the ledger without waiting for the commit.
//! - a **settler** waits for each outcome's group commit, then lets go of the claim (its lease
//!   is no longer extended) and announces the campaign's progress.
//!
//! Only the body-start mark stays on a message's path: the body is never written before the
//! mark is committed (guarantee 9).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Mutex};
use tokio::task::JoinSet;

use app::db::delivery::Claimed;
use app::domain::CampaignId;

use super::batch::{self, Loaded};
use super::held::Guard;
use super::ledger::{self, Marking, Recorded};
use super::send::{after_mark, Mark};
use super::{quit_all, send_one, Engine, Until};
use crate::ops::shutdown::Shutdown;
use app::domain::relay::Signal;

/// Claims in flight at once: one is claimed while the other's messages are being sent.
const FEEDERS: usize = 2;

/// A claimed message waiting for a connection.
struct Job {
    claimed: Claimed,
    loaded: Arc<Loaded>,
    held: Guard,
}

/// An outcome on its way to the database.
struct Settling {
    recorded: Recorded,
    campaign: Option<CampaignId>,
    held: Guard,
}

type Jobs = Arc<Mutex<mpsc::Receiver<Job>>>;

/// One run of the pipeline: the engine, how long it runs, and what a drain reports.
struct Run {
    engine: Arc<Engine>,
    until: Until,
    claimed: AtomicUsize,
    /// A drain's first failure (claiming, or recording an outcome).
    failed: std::sync::Mutex<Option<String>>,
}

impl std::ops::Deref for Run {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.engine
    }
}

impl Run {
    fn drained(&self) -> bool {
        self.until == Until::Drained
    }

    /// Keeps a drain's first failure; a worker process logs and goes on.
    fn fail(&self, error: String) {
        if let Ok(mut failed) = self.failed.lock() {
            failed.get_or_insert(error);
        }
    }
}

/// Runs until shutdown, or with [`Until::Drained`] until nothing more is due; returns how many
/// deliveries were claimed. Every task lives in one `JoinSet`: if this future is dropped (the
/// host gave up waiting), they are all aborted with it. Whatever is still claimed then is given
/// back by the host (`release_held`); a message can only go out after its body-start mark
/// committed on a row still `sending`, so nothing given back is ever sent by a straggler.
pub(super) async fn run(
    engine: Arc<Engine>,
    until: Until,
    shutdown: Shutdown,
) -> anyhow::Result<usize> {
    let w = Arc::new(Run {
        engine,
        until,
        claimed: AtomicUsize::new(0),
        failed: std::sync::Mutex::new(None),
    });
    let capacity = (w.cfg.batch.max(1) as usize).max(FEEDERS);
    let (to_send, waiting) = mpsc::channel::<Job>(capacity);
    let waiting: Jobs = Arc::new(Mutex::new(waiting));
    let (settle, settling) = mpsc::unbounded_channel::<Settling>();
    let mut tasks = JoinSet::new();
    for _ in 0..FEEDERS {
        let share = capacity / FEEDERS;
        tasks.spawn(feed(w.clone(), to_send.clone(), share, shutdown.clone()));
    }
    drop(to_send);
    for _ in 0..w.cfg.connections.max(1) {
        tasks.spawn(connection(
            w.clone(),
            waiting.clone(),
            settle.clone(),
            shutdown.clone(),
        ));
    }
    drop(settle);
    tasks.spawn(settler(w.clone(), settling));
    while let Some(done) = tasks.join_next().await {
        if let Err(e) = done {
            tracing::warn!(error = %e, "a delivery task ended abnormally");
            w.fail(format!("a delivery task ended abnormally: {e}"));
        }
    }
    let failed = w.failed.lock().ok().and_then(|mut f| f.take());
    match failed {
        Some(e) if w.drained() => Err(anyhow::anyhow!(e)),
        _ => Ok(w.claimed.load(Ordering::Relaxed)),
    }
}

/// Claims `share` messages whenever the hand-off queue has room for all of them; a drain's
/// feeder stops at the first empty claim.
async fn feed(w: Arc<Run>, to_send: mpsc::Sender<Job>, share: usize, shutdown: Shutdown) {
    while !shutdown.is_requested() {
        // The relay's circuit is open: claim nothing until a probe closes it.
        if w.breaker.is_open() {
            if !waited(&w, &shutdown).await {
                break;
            }
            continue;
        }
        let room = tokio::select! {
            _ = shutdown.requested() => break,
            room = to_send.reserve_many(share) => match room {
                Ok(room) => room,
                Err(_) => break,
            },
        };
        // It may have opened while this feeder waited for room.
        if w.breaker.is_open() {
            drop(room);
            continue;
        }
        let claimed = claim(&w, share).await;
        let trouble = crate::workers::note_write(&claimed);
        let claimed = match claimed {
            Ok(claimed) => claimed,
            Err(e) if w.drained() => {
                w.fail(format!("{e:#}"));
                break;
            }
            Err(e) => {
                let trouble = trouble.map_or("", |t| t.describe());
                tracing::warn!(error = %format!("{e:#}"), trouble, "claiming deliveries failed; retrying");
                Vec::new()
            }
        };
        w.claimed.fetch_add(claimed.len(), Ordering::Relaxed);
        if claimed.is_empty() {
            drop(room);
            if !waited(&w, &shutdown).await {
                break;
            }
            continue;
        }
        for (slot, job) in room.zip(claimed) {
            slot.send(job);
        }
    }
}

/// Nothing to claim now: a drain is over (false), a worker waits `idle` before it claims
/// again (true) unless shutdown comes first (false).
async fn waited(w: &Run, shutdown: &Shutdown) -> bool {
    if w.drained() {
        return false;
    }
    tokio::select! {
        _ = shutdown.requested() => false,
        _ = tokio::time::sleep(w.cfg.idle) => true,
    }
}

/// One claim and its lookups. Each message is held (its lease extended) from here until its
/// outcome is committed; if the lookups fail, the claims are let go and their leases run out.
async fn claim(w: &Engine, limit: usize) -> anyhow::Result<Vec<Job>> {
    let claimed = batch::claim(&w.feed, &w.cfg, &w.holder, limit as i64).await?;
    let held: Vec<Guard> = claimed
        .iter()
        .map(|c| w.cfg.held.hold(std::slice::from_ref(c)))
        .collect();
    if claimed.is_empty() {
        return Ok(Vec::new());
    }
    let loaded = Arc::new(Loaded::load(&w.feed, &claimed).await?);
    Ok(claimed
        .into_iter()
        .zip(held)
        .map(|(claimed, held)| Job {
            claimed,
            loaded: loaded.clone(),
            held,
        })
        .collect())
}

enum Next {
    /// The next messages for this connection (at least one).
    Jobs(Vec<Job>),
    /// Nothing to send for a while.
    Idle,
    /// The feeders have stopped.
    Closed,
}

/// Waits for the next message, then takes up to `up_to` in all of those already waiting.
async fn next(waiting: &Jobs, idle: Duration, up_to: usize) -> Next {
    let take = async {
        let mut queue = waiting.lock().await;
        let first = queue.recv().await?;
        let mut jobs = vec![first];
        jobs.extend(waiting_now(&mut queue, up_to.saturating_sub(1)));
        Some(jobs)
    };
    match tokio::time::timeout(idle, take).await {
        Ok(Some(jobs)) => Next::Jobs(jobs),
        Ok(None) => Next::Closed,
        Err(_) => Next::Idle,
    }
}

/// One SMTP connection: sends whatever is waiting, until shutdown (the messages in hand are
/// finished first). An idle connection is closed on the server's side too.
///
/// With `marks_ahead` K > 1 the connection keeps a window of up to K messages taken and not yet
/// sent, each with its body-start mark asked for as it entered the window: while one message is
/// sent, the marks of the next ones are being written, and each message sent makes room for
/// one more. A message whose mark is refused is not sent. So a connection killed at any point
/// leaves at most K never-sent messages marked (`unknown`), and it waits for a mark only when
/// the database is slower than K − 1 messages' worth of SMTP. While the relay's circuit is
/// open the window is not refilled: what it holds is given back unsent, and marking more would
/// only burn their attempts.
async fn connection(
    w: Arc<Run>,
    waiting: Jobs,
    settle: mpsc::UnboundedSender<Settling>,
    shutdown: Shutdown,
) {
    let mut conn = [None];
    let ahead = w.cfg.marks_ahead.max(1);
    let mut window: VecDeque<(Job, Option<Marking>)> = VecDeque::with_capacity(ahead);
    loop {
        if window.is_empty() {
            let jobs = tokio::select! {
                biased;
                _ = shutdown.requested() => break,
                next = next(&waiting, w.cfg.idle, ahead) => match next {
                    Next::Jobs(jobs) => jobs,
                    Next::Idle => {
                        quit_all(&mut conn).await;
                        continue;
                    }
                    Next::Closed => break,
                },
            };
            window.extend(jobs.into_iter().map(|job| enter(&w, ahead, job)));
        }
        let Some((job, marking)) = window.pop_front() else {
            continue;
        };
        let c = &job.claimed;
        let mark = match marking {
            None => Ok(Mark::AtBody),
            Some(marking) => {
                after_mark(&w.cfg, c.attempt, marking.answer().await).map(|()| Mark::Ahead)
            }
        };
        let (outcome, signal) = match mark {
            Ok(mark) => {
                let cx = job.loaded.inputs(&w.cfg, c);
                let conn = &mut conn[0];
                send_one(&w.cfg, &w.ledger, &w.breaker, &cx, c, conn, mark).await
            }
            Err(not_sent) => (not_sent, Signal::None),
        };
        w.breaker.observe(signal);
        let recorded = w.ledger.record(ledger::Result::of(c, outcome));
        let campaign = c.reference.content_campaign();
        // The settler outlives every connection; if it is gone, so is the process.
        let _ = settle.send(Settling {
            recorded,
            campaign,
            held: job.held,
        });
        // That message is done: its place in the window goes to the next one waiting, if any
        // (never waited for: an empty window waits above). A stopping process takes no more.
        if ahead > 1 && !shutdown.is_requested() && !w.breaker.is_open() {
            if let Ok(mut queue) = waiting.try_lock() {
                let room = ahead.saturating_sub(window.len());
                window.extend(waiting_now(&mut queue, room).map(|job| enter(&w, ahead, job)));
            }
        }
    }
    quit_all(&mut conn).await;
}

/// Up to `n` of the messages waiting right now, never waiting for one.
fn waiting_now(queue: &mut mpsc::Receiver<Job>, n: usize) -> impl Iterator<Item = Job> + '_ {
    std::iter::from_fn(|| queue.try_recv().ok()).take(n)
}

/// A message entering a connection's window: its mark is asked for now when marks go ahead.
fn enter(w: &Engine, ahead: usize, job: Job) -> (Job, Option<Marking>) {
    let marking = (ahead > 1).then(|| {
        w.ledger
            .request_mark(&job.claimed.job_id(), job.claimed.attempt)
    });
    (job, marking)
}

/// Waits for outcomes to commit, in the order they were handed over; then the claim is let go
/// and the campaign's progress announced. Ends when every connection has ended and the last
/// outcome is written, so the host releases nothing whose outcome is still on its way.
async fn settler(w: Arc<Run>, mut settling: mpsc::UnboundedReceiver<Settling>) {
    while let Some(s) = settling.recv().await {
        match s.recorded.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "a delivery outcome was not recorded; its lease will run out");
                w.fail(e);
            }
            Err(_) => {
                tracing::warn!("the delivery ledger stopped before an outcome was recorded");
                w.fail("the delivery ledger committer stopped".into());
            }
        }
        if let Some(campaign) = s.campaign {
            w.cfg.progress.touch(&[campaign]);
        }
        drop(s.held);
    }
}
