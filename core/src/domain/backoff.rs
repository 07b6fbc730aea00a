use std::time::Duration;

/// When to try a temporarily failed delivery again: exponential (base · 2^(attempt−1)), capped,
/// with jitter so that a burst of failures does not come back as a burst. `jitter` is a random
/// number in [0, 1) supplied by the caller (keeps this pure and testable); the delay lands in
/// [½·d, d]. `None` once `attempt` reached `max_attempts`: the failure is final.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
    pub max_attempts: i32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_secs(30),
            cap: Duration::from_secs(6 * 3600),
            max_attempts: 8,
        }
    }
}

impl Backoff {
    pub fn delay(&self, attempt: i32, jitter: f64) -> Option<Duration> {
        if attempt >= self.max_attempts {
            return None;
        }
        let exp = 2f64.powi(attempt.clamp(1, 62) - 1);
        let full = (self.base.as_secs_f64() * exp).min(self.cap.as_secs_f64());
        Some(Duration::from_secs_f64(
            full * (0.5 + 0.5 * jitter.clamp(0.0, 1.0)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_exponentially_within_jitter_bounds_and_caps() {
        let b = Backoff {
            base: Duration::from_secs(10),
            cap: Duration::from_secs(100),
            max_attempts: 10,
        };
        assert_eq!(b.delay(1, 1.0), Some(Duration::from_secs(10)));
        assert_eq!(b.delay(1, 0.0), Some(Duration::from_secs(5)));
        assert_eq!(b.delay(3, 1.0), Some(Duration::from_secs(40)));
        assert_eq!(b.delay(9, 1.0), Some(Duration::from_secs(100)), "capped");
        for attempt in 1..10 {
            for j in [0.0, 0.3, 0.999] {
                let d = b.delay(attempt, j).unwrap();
                assert!(
                    d >= Duration::from_secs(5) && d <= Duration::from_secs(100),
                    "{attempt} {j} {d:?}"
                );
            }
        }
    }

    #[test]
    fn gives_up_after_max_attempts() {
        let b = Backoff::default();
        assert!(b.delay(b.max_attempts - 1, 0.5).is_some());
        assert_eq!(b.delay(b.max_attempts, 0.5), None);
    }
}
