//! Group commit of body-start marks. Every connection must record "body started" before it
//! writes a body (so a crash reads as `unknown`, never as a silent resend), but one UPDATE per
//! message would cap the engine at the database's commit rate. Marks from all connections are
//! queued here and written together: while one UPDATE commits, the next group gathers.

use std::collections::HashSet;

use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};

type Reply = oneshot::Sender<Result<bool, String>>;

/// A handle to the committer task; cheap to clone.
#[derive(Clone)]
pub struct BodyMarks {
    queue: mpsc::UnboundedSender<(String, i32, Reply)>,
}

impl BodyMarks {
    /// Starts the committer; it ends when every handle is dropped.
    pub fn start(pool: PgPool) -> Self {
        let (queue, rx) = mpsc::unbounded_channel();
        tokio::spawn(commit_loop(pool, rx));
        BodyMarks { queue }
    }

    /// Records that this attempt's body is about to be written. `Ok(false)`: the claim was lost
    /// (reaped meanwhile) and the body must not be sent; `Err`: the mark could not be written.
    pub async fn mark(&self, job_id: &str, attempt: i32) -> Result<bool, String> {
        let (tx, rx) = oneshot::channel();
        self.queue
            .send((job_id.to_string(), attempt, tx))
            .map_err(|_| "the body-mark committer stopped".to_string())?;
        rx.await
            .map_err(|_| "the body-mark committer stopped".to_string())?
    }
}

async fn commit_loop(pool: PgPool, mut rx: mpsc::UnboundedReceiver<(String, i32, Reply)>) {
    while let Some(first) = rx.recv().await {
        let mut group = vec![first];
        while let Ok(next) = rx.try_recv() {
            group.push(next);
        }
        let held: Vec<(String, i32)> = group.iter().map(|(j, a, _)| (j.clone(), *a)).collect();
        match app::db::deliveries::mark_body_started(&pool, &held).await {
            Ok(marked) => {
                let marked: HashSet<String> = marked.into_iter().collect();
                for (job, _, reply) in group {
                    let _ = reply.send(Ok(marked.contains(&job)));
                }
            }
            Err(e) => {
                let error = format!("could not record the body start: {e}");
                for (_, _, reply) in group {
                    let _ = reply.send(Err(error.clone()));
                }
            }
        }
    }
}
