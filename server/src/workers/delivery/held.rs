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
    /// Each claim granted and not yet let go.
    claims: HashMap<i64, Lease>,
}

#[derive(Debug)]
struct Lease {
    /// When the claim or its latest renewal was asked for; `None`: never known, so never
    /// trusted.
    asked: Option<Instant>,
    /// Its jobs held now; at 0 the claim is let go.
    jobs: usize,
}

impl Held {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `claims` were granted by a statement sent at `asked`; [`Held::hold`] follows at once.
    pub fn granted(&self, claims: &[i64], asked: Instant) {
        let mut state = self.state();
        for id in claims {
            state.claims.entry(*id).or_insert(Lease {
                asked: Some(asked),
                jobs: 0,
            });
        }
    }

    /// The renewal of `claims`, sent at `asked`, succeeded. Claims let go meanwhile stay gone.
    pub fn renewed(&self, claims: &[i64], asked: Instant) {
        let mut state = self.state();
        for id in claims {
            if let Some(lease) = state.claims.get_mut(id) {
                lease.asked = Some(lease.asked.map_or(asked, |at| at.max(asked)));
            }
        }
    }

    /// Registers `batch` until the returned guard is dropped (on success or on any error).
    pub fn hold(&self, batch: &[Claimed]) -> Guard {
        let jobs: Vec<(String, i32, i64)> = batch
            .iter()
            .map(|c| (c.job.to_string(), c.attempt, c.claim_id))
            .collect();
        self.hold_jobs(&jobs)
    }

    fn hold_jobs(&self, batch: &[(String, i32, i64)]) -> Guard {
        let mut state = self.state();
        for (job, attempt, claim) in batch {
            // A job claimed again (after a reap) replaces its older attempt, whose guard then
            // lets go of nothing.
            if let Some((_, before)) = state.jobs.insert(job.clone(), (*attempt, *claim)) {
                state.let_go(before);
            }
            state
                .claims
                .entry(*claim)
                .or_insert(Lease {
                    asked: None,
                    jobs: 0,
                })
                .jobs += 1;
        }
        Guard {
            held: self.clone(),
            jobs: batch.iter().map(|(j, a, _)| (j.clone(), *a)).collect(),
        }
    }

    /// The claims with a message in flight now.
    pub fn claims(&self) -> Vec<i64> {
        let state = self.state();
        let mut ids: Vec<i64> = state
            .claims
            .iter()
            .filter(|(_, l)| l.jobs > 0)
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Whether `claim`'s lease of `lease` surely still holds. A claim this process does not
    /// hold, or whose grant it never recorded, does not.
    pub fn lease_holds(&self, claim: i64, lease: Duration) -> bool {
        self.state()
            .claims
            .get(&claim)
            .and_then(|l| l.asked)
            .is_some_and(|asked| asked.elapsed() < lease)
    }
}

impl State {
    /// One job of `claim` is no longer held.
    fn let_go(&mut self, claim: i64) {
        if let Some(lease) = self.claims.get_mut(&claim) {
            lease.jobs = lease.jobs.saturating_sub(1);
            if lease.jobs == 0 {
                self.claims.remove(&claim);
            }
        }
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
            if let Some(&(a, claim)) = state.jobs.get(job) {
                if a == *attempt {
                    state.jobs.remove(job);
                    state.let_go(claim);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_holds_for_its_length_from_when_it_was_last_asked_for() {
        let held = Held::default();
        let lease = Duration::from_secs(5);
        let start = Instant::now();
        held.granted(&[1], start);
        let _guard = held.hold_jobs(&[("a".into(), 1, 1), ("b".into(), 1, 1)]);
        assert!(held.lease_holds(1, lease));
        assert!(!held.lease_holds(1, Duration::ZERO), "its time is up");
        held.renewed(&[1], Instant::now());
        assert!(held.lease_holds(1, lease));
        // An older renewal's answer that comes late changes nothing.
        held.renewed(&[1], start);
        assert!(held.lease_holds(1, lease));
        assert_eq!(held.claims(), vec![1]);
    }

    #[test]
    fn a_claim_never_granted_or_let_go_does_not_hold() {
        let held = Held::default();
        let guard = held.hold_jobs(&[("a".into(), 1, 7)]);
        assert!(
            !held.lease_holds(7, Duration::from_secs(60)),
            "never granted"
        );
        drop(guard);
        held.granted(&[8], Instant::now());
        let a = held.hold_jobs(&[("a".into(), 1, 8)]);
        let b = held.hold_jobs(&[("b".into(), 1, 8)]);
        drop(a);
        assert!(held.lease_holds(8, Duration::from_secs(60)), "b still held");
        drop(b);
        assert!(!held.lease_holds(8, Duration::from_secs(60)), "let go");
        held.renewed(&[8], Instant::now());
        assert!(held.claims().is_empty(), "a renewal does not bring it back");
    }

    #[test]
    fn a_job_claimed_again_moves_to_its_new_claim() {
        let held = Held::default();
        let now = Instant::now();
        held.granted(&[1], now);
        let old = held.hold_jobs(&[("a".into(), 1, 1)]);
        held.granted(&[2], now);
        let new = held.hold_jobs(&[("a".into(), 2, 2)]);
        assert_eq!(held.claims(), vec![2], "the old claim holds nothing now");
        drop(old);
        assert_eq!(held.claims(), vec![2], "the old guard lets go of nothing");
        drop(new);
        assert!(held.claims().is_empty());
    }
}
