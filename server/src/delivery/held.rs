//! The claims this process is working on right now. Only these have their leases extended: a
//! claim abandoned by a failed round (a lookup cut off from the database, a dropped future)
//! falls out of the registry, its lease runs out and the reaper takes it back, instead of a
//! live process keeping it `sending` forever.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use app::db::delivery::Claimed;

#[derive(Clone, Debug, Default)]
pub struct Held(Arc<Mutex<HashMap<String, i32>>>);

impl Held {
    /// Registers `batch` until the returned guard is dropped (on success or on any error).
    pub fn hold(&self, batch: &[Claimed]) -> Guard {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        for c in batch {
            map.insert(c.job_id.clone(), c.attempt);
        }
        Guard {
            held: self.clone(),
            jobs: batch
                .iter()
                .map(|c| (c.job_id.clone(), c.attempt))
                .collect(),
        }
    }

    /// The `(job_id, attempt)` pairs in flight now.
    pub fn snapshot(&self) -> Vec<(String, i32)> {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        map.iter().map(|(j, a)| (j.clone(), *a)).collect()
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
            if map.get(job) == Some(attempt) {
                map.remove(job);
            }
        }
    }
}
