//! The claims this process is working on right now. Only these have their leases extended
//! (one lease per claim): a claim abandoned by a failed round (a lookup cut off from the
//! database, a dropped future) falls out of the registry once none of its messages is held, its
//! lease runs out and the reaper takes back what it still holds, instead of a live process
//! keeping it in flight forever.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use app::db::delivery::Claimed;

#[derive(Clone, Debug, Default)]
pub struct Held(Arc<Mutex<HashMap<String, (i32, i64)>>>);

impl Held {
    /// Registers `batch` until the returned guard is dropped (on success or on any error).
    pub fn hold(&self, batch: &[Claimed]) -> Guard {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        for c in batch {
            map.insert(c.job.to_string(), (c.attempt, c.claim_id));
        }
        Guard {
            held: self.clone(),
            jobs: batch
                .iter()
                .map(|c| (c.job.to_string(), c.attempt))
                .collect(),
        }
    }

    /// The claims with a message in flight now.
    pub fn claims(&self) -> Vec<i64> {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut ids: Vec<i64> = map.values().map(|(_, claim)| *claim).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }
}

pub struct Guard {
    held: Held,
    jobs: Vec<(String, i32)>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let mut map = self.held.0.lock().unwrap_or_else(PoisonError::into_inner);
        for (job, attempt) in &self.jobs {
            // A later claim of the same job (after a reap) has a higher attempt: keep it.
            if map.get(job).map(|(a, _)| a) == Some(attempt) {
                map.remove(job);
            }
        }
    }
}
