//! The claims this process is working on right now. Only these have their leases extended
//! (one lease per claim): a claim abandoned by a failed round (a lookup cut off from the
//! database, a dropped future) falls out of the registry once none of its messages is held, its
//! lease runs out and the reaper takes back what it still holds, instead of a live process
//! keeping it in flight forever.
//!
//! It also knows, on this process's clock, until when each lease surely holds: from the moment
//! the claim or its latest renewal was asked for (the database starts the lease later, at the
//! statement), plus the lease. A process cut off from the database cannot renew, so it stops
//! starting bodies once that passes: what it holds may have been taken back already.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use app::db::delivery::Claimed;

#[derive(Clone, Debug, Default)]
pub struct Held(Arc<Mutex<State>>);

#[derive(Debug, Default)]
struct State {
    /// Each held job's attempt and claim.
    jobs: HashMap<String, (i32, i64)>,
    /// When each held claim's lease was last asked for (claimed or renewed).
    asked: HashMap<i64, Instant>,
}

impl Held {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers `batch` until the returned guard is dropped (on success or on any error).
    pub fn hold(&self, batch: &[Claimed]) -> Guard {
        let mut state = self.state();
        for c in batch {
            state
                .jobs
                .insert(c.job.to_string(), (c.attempt, c.claim_id));
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
        let state = self.state();
        let mut ids: Vec<i64> = state.jobs.values().map(|(_, claim)| *claim).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// `claims` were granted, or renewed, by a statement sent at `asked`.
    pub fn leased(&self, claims: &[i64], asked: Instant) {
        let mut state = self.state();
        for id in claims {
            let at = state.asked.entry(*id).or_insert(asked);
            *at = (*at).max(asked);
        }
    }

    /// Whether `claim`'s lease of `lease` surely still holds. A claim this process never
    /// recorded (none is sent without being recorded) counts as holding.
    pub fn lease_holds(&self, claim: i64, lease: Duration) -> bool {
        self.state()
            .asked
            .get(&claim)
            .is_none_or(|asked| asked.elapsed() < lease)
    }
}

pub struct Guard {
    held: Held,
    jobs: Vec<(String, i32)>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let mut state = self.held.state();
        for (job, attempt) in &self.jobs {
            // A later claim of the same job (after a reap) has a higher attempt: keep it.
            if state.jobs.get(job).map(|(a, _)| a) == Some(attempt) {
                state.jobs.remove(job);
            }
        }
        let State { jobs, asked } = &mut *state;
        asked.retain(|claim, _| jobs.values().any(|(_, c)| c == claim));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_holds_for_its_length_from_when_it_was_last_asked_for() {
        let held = Held::default();
        let lease = Duration::from_secs(5);
        let long_ago = Instant::now() - Duration::from_secs(10);
        held.leased(&[1], long_ago);
        assert!(!held.lease_holds(1, lease));
        assert!(held.lease_holds(1, Duration::from_secs(60)));
        held.leased(&[1], Instant::now());
        assert!(held.lease_holds(1, lease));
        // An older renewal's answer that comes late changes nothing.
        held.leased(&[1], long_ago);
        assert!(held.lease_holds(1, lease));
        assert!(held.lease_holds(2, Duration::ZERO), "never recorded");
    }
}
