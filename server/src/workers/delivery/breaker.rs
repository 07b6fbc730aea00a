//! The relay's circuit breaker at run time. Every connection of the process reports what each
//! attempt said about the relay (`observe`); after the policy's number of unknown outcomes or
//! connection failures in a row the circuit opens: feeders stop claiming, messages already
//! claimed are given back, and a warden task probes the relay after growing pauses. Once the
//! relay has been failing for the policy's while, the campaigns sending through it are paused
//! (with the reason on their page and in the audit log); a probe that succeeds closes the circuit
//! and resumes exactly those campaigns. The warden also publishes the relay's state for the
//! dashboard.
//!
//! A probe is a fresh connection that greets, negotiates and authenticates like a real one. A
//! relay that greets but then drops bodies passes it: the circuit then closes on probation, and
//! the first failure reopens it with the next, longer pause, so such a relay costs at most one
//! `unknown` per connection per probe.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio::sync::Notify;

use app::domain::relay::{Breaker as Rules, BreakerPolicy, RelayFailure, Signal};

use crate::smtp::{Connection, Target};

/// A handle shared by the connections, the feeders and the warden; cheap to clone.
#[derive(Clone)]
pub struct Breaker(Arc<Inner>);

struct Inner {
    policy: BreakerPolicy,
    rules: Mutex<Rules>,
    opened: Notify,
}

impl Breaker {
    pub fn new(policy: BreakerPolicy) -> Self {
        Breaker(Arc::new(Inner {
            policy,
            rules: Mutex::new(Rules::default()),
            opened: Notify::new(),
        }))
    }

    fn rules(&self) -> MutexGuard<'_, Rules> {
        // The rules are plain counters: a panic elsewhere cannot leave them inconsistent.
        self.0.rules.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_open(&self) -> bool {
        self.rules().is_open()
    }

    /// Takes what one attempt said about the relay; wakes the warden when it opens the circuit.
    pub fn observe(&self, signal: Signal) {
        if self.rules().observe(&self.0.policy, signal) {
            self.0.opened.notify_one();
        }
    }
}

/// How often a closed breaker looks for campaigns some breaker paused and nobody resumed (its
/// process was restarted mid-outage, or a write failed), and resumes them if a probe succeeds.
const RECOVER_EVERY: Duration = Duration::from_secs(60);

/// Watches the breaker until the process ends: on each opening, publishes it, probes after
/// growing pauses, pauses the campaigns once the outage lasts, and on a good probe closes the
/// circuit and resumes them. While closed, it recovers what an earlier outage left paused (at
/// start, then every [`RECOVER_EVERY`]).
pub async fn warden(pool: PgPool, breaker: Breaker, target: Target, relay: String) {
    let policy = breaker.0.policy;
    let mut recover_in = Duration::ZERO;
    loop {
        tokio::select! {
            _ = breaker.0.opened.notified() => {}
            _ = tokio::time::sleep(recover_in) => {
                recover_in = RECOVER_EVERY;
                recover(&pool, &breaker, &target, &relay).await;
                continue;
            }
        }
        let (failures, why, trips) = {
            let rules = breaker.rules();
            if !rules.is_open() {
                continue;
            }
            let why = rules.last_failure().unwrap_or(RelayFailure::Unreachable);
            (rules.failures(), why, rules.trips())
        };
        // Each outage has its own clock: one failure long after a recovery does not inherit the
        // last outage's time and pause every campaign at once.
        let started = Instant::now();
        // Once per outage, so an admin who resumes a campaign meanwhile is not overruled.
        let mut paused = false;
        tracing::warn!(
            relay,
            failures,
            reason = why.describe(),
            "the relay is failing: sending to it stops until a probe succeeds"
        );
        let mut failed_probes = 0u32;
        loop {
            let pause = policy.pause(trips.saturating_sub(1).saturating_add(failed_probes));
            let published = app::db::relay_health::opened(
                &pool,
                &relay,
                failures as i32,
                failed_probes as i32,
                pause.as_secs_f64(),
                why,
            )
            .await;
            if let Err(e) = published {
                tracing::warn!(error = %e, "cannot record the relay's state");
            }
            tokio::time::sleep(pause).await;
            if !paused && started.elapsed() >= policy.pause_campaigns_after {
                let reason = format!(
                    "Paused by Mailroom: the mail relay failed {failures} times in a row ({}). \
                     Sending resumes by itself once the relay answers again.",
                    why.describe()
                );
                match app::db::relay_health::pause_campaigns(&pool, &reason).await {
                    Ok(done) => {
                        paused = true;
                        if !done.is_empty() {
                            tracing::warn!(
                                relay,
                                campaigns = done.len(),
                                "campaigns paused: the relay keeps failing"
                            )
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "cannot pause the campaigns"),
                }
            }
            if probe(&target).await {
                breaker.rules().close(&policy);
                tracing::info!(relay, "the relay answers again: sending resumes");
                heal(&pool, &relay).await;
                break;
            }
            failed_probes = failed_probes.saturating_add(1);
        }
    }
}

/// The relay answers: its state says so, and the campaigns a breaker paused resume (a failure
/// here is retried by the next [`recover`]).
async fn heal(pool: &PgPool, relay: &str) {
    if let Err(e) = app::db::relay_health::healed(pool, relay).await {
        tracing::warn!(error = %e, "cannot record the relay's state");
    }
    match app::db::relay_health::resume_campaigns(pool).await {
        Ok(resumed) if !resumed.is_empty() => {
            tracing::info!(relay, campaigns = resumed.len(), "campaigns resumed")
        }
        Ok(_) => {}
        Err(e) => tracing::warn!(error = %e, "cannot resume the campaigns"),
    }
}

/// With the circuit closed: if campaigns are still paused by a breaker, or the relay is still
/// shown failing, and a probe succeeds, heal.
async fn recover(pool: &PgPool, breaker: &Breaker, target: &Target, relay: &str) {
    if breaker.is_open() {
        return;
    }
    match app::db::relay_health::left_failing(pool, relay).await {
        Ok(true) => {}
        Ok(false) => return,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the relay's state");
            return;
        }
    }
    if probe(target).await && !breaker.is_open() {
        heal(pool, relay).await;
    }
}

/// A connection that greets, negotiates and authenticates, then says goodbye.
async fn probe(target: &Target) -> bool {
    match Connection::open(target).await {
        Ok(conn) => {
            conn.quit().await;
            true
        }
        Err(refusal) => {
            tracing::debug!(reply = refusal.reply, "relay probe failed");
            false
        }
    }
}
