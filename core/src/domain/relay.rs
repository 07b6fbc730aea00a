//! A relay's circuit breaker, as rules: which outcomes count against the relay, when the circuit
//! opens, how long it waits before each probe, and when the campaigns sending through it pause.
//! The delivery worker holds one per process and acts on its verdicts.

use std::time::Duration;

text_enum! {
    /// What the dashboard shows of a relay (`relay_health.state`).
    pub enum RelayState ("a relay state") {
        /// It answers: mail flows.
        Healthy = "healthy",
        /// It failed too often in a row: nothing is sent to it until a probe succeeds.
        Open = "open",
    }
}

text_enum! {
    /// Why a relay counts as failing, in words fit for the dashboard (the raw error, which may
    /// name hosts and addresses, stays in the log).
    pub enum RelayFailure ("a relay failure") {
        /// It took a message's body and gave no final reply: the message is `unknown`.
        NoReplyAfterBody = "no_reply_after_body",
        /// It could not be reached or stopped answering before a body.
        Unreachable = "unreachable",
    }
}

impl RelayFailure {
    pub fn describe(self) -> &'static str {
        match self {
            RelayFailure::NoReplyAfterBody => "it takes messages without confirming them",
            RelayFailure::Unreachable => "connections to it fail or go unanswered",
        }
    }
}

/// The breaker's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerPolicy {
    /// Failures in a row (unknown outcomes, connection failures) that open the circuit.
    pub failures: u32,
    /// The pause before the first probe; each failed probe doubles it, up to `max_pause`.
    pub first_pause: Duration,
    pub max_pause: Duration,
    /// The campaigns sending through the relay pause once it has been open this long.
    pub pause_campaigns_after: Duration,
}

impl Default for BreakerPolicy {
    fn default() -> Self {
        BreakerPolicy {
            failures: 10,
            first_pause: Duration::from_secs(5),
            max_pause: Duration::from_secs(300),
            pause_campaigns_after: Duration::from_secs(120),
        }
    }
}

impl BreakerPolicy {
    /// The pause before the probe that follows `failed_probes` failed ones.
    pub fn pause(&self, failed_probes: u32) -> Duration {
        let doubled = self
            .first_pause
            .saturating_mul(2u32.saturating_pow(failed_probes.min(20)));
        doubled.min(self.max_pause.max(self.first_pause))
    }
}

/// What one sending attempt says about the relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// The relay answered (accepted or refused, 2xx to 5xx): it works.
    Answered,
    Failed(RelayFailure),
    /// The relay was not asked (the message could not be built, the circuit was open).
    None,
}

/// Counts failures in a row; opens at the policy's threshold. A circuit closed by a probe is on
/// probation until the relay has answered as many times as the threshold: meanwhile one failure
/// reopens it, and the pauses keep growing (`trips`), so a relay that greets but drops bodies
/// costs one message per connection per probe, not the threshold each time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Breaker {
    in_a_row: u32,
    open: bool,
    last: Option<RelayFailure>,
    /// Answers still needed before probation ends.
    probation: u32,
    /// Openings since the relay last proved healthy.
    trips: u32,
}

impl Breaker {
    pub fn is_open(&self) -> bool {
        self.open
    }

    pub fn failures(&self) -> u32 {
        self.in_a_row
    }

    pub fn last_failure(&self) -> Option<RelayFailure> {
        self.last
    }

    /// Openings since the relay last proved healthy (1 on the first).
    pub fn trips(&self) -> u32 {
        self.trips
    }

    /// Takes one signal; true when it opened the circuit (the caller starts probing).
    pub fn observe(&mut self, policy: &BreakerPolicy, signal: Signal) -> bool {
        match signal {
            Signal::None => false,
            // Answers after the circuit opened (messages already in flight) do not close it:
            // only a probe does, so the pauses and the campaigns' state stay in one hand.
            Signal::Answered => {
                if !self.open {
                    self.in_a_row = 0;
                    self.probation = self.probation.saturating_sub(1);
                    if self.probation == 0 {
                        self.trips = 0;
                    }
                }
                false
            }
            Signal::Failed(why) => {
                self.in_a_row = self.in_a_row.saturating_add(1);
                self.last = Some(why);
                let threshold = if self.probation > 0 {
                    1
                } else {
                    policy.failures.max(1)
                };
                if !self.open && self.in_a_row >= threshold {
                    self.open = true;
                    self.trips = self.trips.saturating_add(1);
                    return true;
                }
                false
            }
        }
    }

    /// A probe succeeded: mail flows again, on probation.
    pub fn close(&mut self, policy: &BreakerPolicy) {
        self.open = false;
        self.in_a_row = 0;
        self.probation = policy.failures.max(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> BreakerPolicy {
        BreakerPolicy {
            failures: 3,
            first_pause: Duration::from_secs(1),
            max_pause: Duration::from_secs(5),
            pause_campaigns_after: Duration::from_secs(10),
        }
    }

    #[test]
    fn opens_after_the_threshold_of_failures_in_a_row_and_an_answer_resets_the_count() {
        let (p, mut b) = (policy(), Breaker::default());
        let fail = Signal::Failed(RelayFailure::NoReplyAfterBody);
        assert!(!b.observe(&p, fail));
        assert!(!b.observe(&p, fail));
        assert!(!b.observe(&p, Signal::Answered), "an answer resets");
        assert!(
            !b.observe(&p, Signal::None),
            "nothing asked, nothing learnt"
        );
        assert!(!b.observe(&p, fail));
        assert!(!b.observe(&p, fail));
        assert!(b.observe(&p, fail), "the third in a row opens");
        assert!(b.is_open());
        assert!(!b.observe(&p, fail), "opens once");
        assert!(!b.observe(&p, Signal::Answered));
        assert!(b.is_open(), "only a probe closes it");
        assert_eq!(b.last_failure(), Some(RelayFailure::NoReplyAfterBody));
        assert_eq!(b.trips(), 1);
        b.close(&p);
        assert!(!b.is_open());
        assert_eq!(b.failures(), 0);
    }

    #[test]
    fn on_probation_one_failure_reopens_and_the_trips_count_until_the_relay_proves_healthy() {
        let (p, mut b) = (policy(), Breaker::default());
        let fail = Signal::Failed(RelayFailure::Unreachable);
        for _ in 0..3 {
            b.observe(&p, fail);
        }
        b.close(&p);
        assert!(b.observe(&p, fail), "one failure on probation reopens");
        assert_eq!(b.trips(), 2, "the next pause is longer");
        b.close(&p);
        for _ in 0..3 {
            assert!(!b.observe(&p, Signal::Answered));
        }
        assert_eq!(b.trips(), 0, "proved healthy: the pauses start over");
        assert!(
            !b.observe(&p, fail),
            "off probation the threshold applies again"
        );
        assert!(!b.observe(&p, fail));
        assert!(b.observe(&p, fail));
        assert_eq!(b.trips(), 1);
    }

    #[test]
    fn pauses_double_up_to_the_maximum() {
        let p = policy();
        let secs: Vec<u64> = (0..5).map(|n| p.pause(n).as_secs()).collect();
        assert_eq!(secs, vec![1, 2, 4, 5, 5]);
        assert_eq!(p.pause(u32::MAX).as_secs(), 5);
    }
}
