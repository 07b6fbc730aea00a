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
use std::time::Instant;

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

/// Watches the breaker until the process ends: on each opening, publishes it, probes after
/// growing pauses, pauses the campaigns once the outage lasts, and on a good probe closes the
/// circuit and resumes them.
pub async fn warden(pool: PgPool, breaker: Breaker, target: Target, relay: String) {
    let policy = breaker.0.policy;
    // When the relay began failing; kept while it closes on probation and reopens.
    let mut outage: Option<Instant> = None;
    loop {
        breaker.0.opened.notified().await;
        let (failures, why, trips) = {
            let rules = breaker.rules();
            if !rules.is_open() {
                continue;
            }
            let why = rules.last_failure().unwrap_or(RelayFailure::Unreachable);
            (rules.failures(), why, rules.trips())
        };
        if trips <= 1 {
            outage = Some(Instant::now());
        }
        let started = *outage.get_or_insert_with(Instant::now);
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
            if started.elapsed() >= policy.pause_campaigns_after {
                let reason = format!(
                    "Paused by Mailroom: the mail relay failed {failures} times in a row ({}). \
                     Sending resumes by itself once the relay answers again.",
                    why.describe()
                );
                match app::db::relay_health::pause_campaigns(&pool, &reason).await {
                    Ok(paused) if !paused.is_empty() => {
                        tracing::warn!(
                            relay,
                            campaigns = paused.len(),
                            "campaigns paused: the relay keeps failing"
                        )
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "cannot pause the campaigns"),
                }
            }
            if probe(&target).await {
                breaker.rules().close(&policy);
                tracing::info!(relay, "the relay answers again: sending resumes");
                if let Err(e) = app::db::relay_health::healed(&pool, &relay).await {
                    tracing::warn!(error = %e, "cannot record the relay's state");
                }
                match app::db::relay_health::resume_campaigns(&pool).await {
                    Ok(resumed) if !resumed.is_empty() => {
                        tracing::info!(relay, campaigns = resumed.len(), "campaigns resumed")
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "cannot resume the campaigns"),
                }
                break;
            }
            failed_probes = failed_probes.saturating_add(1);
        }
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
