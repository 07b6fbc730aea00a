//! Progress notifications: campaigns whose counts moved are collected per process and
//! announced with `NOTIFY mailroom_progress` at most every [`EVERY`], after the changes
//! committed (never inside a claim transaction). Listeners re-read the counter slots; a lost
//! notification only delays a page until its periodic re-read.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::PgPool;

use app::domain::CampaignId;

use crate::ops::shutdown::Shutdown;

pub const CHANNEL: &str = "mailroom_progress";
const EVERY: Duration = Duration::from_millis(500);

/// A cheap, cloneable handle: `touch` marks campaigns, the flusher task announces them.
#[derive(Clone, Default, Debug)]
pub struct Notifier {
    pending: Arc<Mutex<BTreeSet<CampaignId>>>,
}

impl Notifier {
    pub fn touch(&self, campaigns: &[CampaignId]) {
        if campaigns.is_empty() {
            return;
        }
        if let Ok(mut p) = self.pending.lock() {
            p.extend(campaigns.iter().copied());
        }
    }

    fn take(&self) -> Vec<CampaignId> {
        match self.pending.lock() {
            Ok(mut p) => std::mem::take(&mut *p).into_iter().collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Announces what was touched, every [`EVERY`], until shutdown.
    pub async fn run(self, pool: PgPool, shutdown: Shutdown) {
        let mut every = tokio::time::interval(EVERY);
        loop {
            tokio::select! {
                _ = shutdown.requested() => return,
                _ = every.tick() => {}
            }
            let ids = self.take();
            if ids.is_empty() {
                continue;
            }
            if let Err(e) = app::db::campaign::states::notify_progress(&pool, CHANNEL, &ids).await {
                tracing::debug!(error = %e, "progress notification failed (pages re-read anyway)");
            }
        }
    }
}
