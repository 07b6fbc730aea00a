//! Login throttling: how failed sign-ins slow down and then lock further attempts.
//!
//! Failures are counted in three scopes, keyed by what was typed (never by user id, so an
//! unknown address is throttled exactly like a real one and the answers reveal nothing):
//!
//! - **pair** (address + client IP): the first few failures are free, then each failure locks
//!   that pair for twice as long as the last (2 s, 4 s, 8 s … capped at 15 minutes). This is what
//!   a person mistyping sees, and what slows down one attacker guessing one password.
//! - **ip** (client IP, every address): a larger allowance, then the same doubling capped at
//!   30 minutes. Stops one source spraying a password across many accounts.
//! - **account** (address, every IP): stops a guessing campaign spread over many IPs. Its lock
//!   applies only to IPs that failed on this address in the last 15 minutes: a correct password
//!   from anywhere else still gets in, so an attacker cannot lock the real user out, and the real
//!   user who mistyped during an attack waits at most 15 minutes after their last try.
//!
//! Every lock is capped, and a counter is forgotten after an hour without failures, so nothing
//! locks anyone out for ever. A locked attempt is refused before the password is checked and is
//! not counted (hammering a lock does not lengthen it). A successful sign-in clears its pair.

use chrono::{DateTime, Duration, Utc};

/// How one scope's failures turn into locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Failures allowed before the first lock.
    pub free: i32,
    /// The first lock; each further failure doubles it.
    pub base_seconds: i64,
    /// No lock is longer than this.
    pub cap_seconds: i64,
    /// Counting starts again after this long without a failure (longer than `cap_seconds`, so a
    /// lock that ran out does not hand back the free allowance).
    pub forget_seconds: i64,
}

pub const PAIR: Rule = Rule {
    free: 3,
    base_seconds: 2,
    cap_seconds: 15 * 60,
    forget_seconds: 3600,
};
pub const IP: Rule = Rule {
    free: 20,
    base_seconds: 4,
    cap_seconds: 30 * 60,
    forget_seconds: 3600,
};
pub const ACCOUNT: Rule = Rule {
    free: 10,
    base_seconds: 4,
    cap_seconds: 15 * 60,
    forget_seconds: 3600,
};
/// Under an account lock, an IP whose last failure on that address is older than this passes.
pub const ACCOUNT_LOCK_SPARES_AFTER_SECONDS: i64 = 15 * 60;

/// One scope's stored count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counter {
    pub failures: i32,
    pub last_failure_at: DateTime<Utc>,
}

impl Rule {
    /// Failures that still count at `now`.
    pub fn live_failures(&self, c: Counter, now: DateTime<Utc>) -> i32 {
        if c.failures <= 0 || now - c.last_failure_at >= Duration::seconds(self.forget_seconds) {
            0
        } else {
            c.failures
        }
    }

    /// The count to store after one more failure at `now`.
    pub fn after_failure(&self, c: Counter, now: DateTime<Utc>) -> i32 {
        self.live_failures(c, now).saturating_add(1)
    }

    /// Until when this counter locks, if it does at `now`.
    pub fn locked_until(&self, c: Counter, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let over = self.live_failures(c, now) - self.free;
        if over <= 0 {
            return None;
        }
        let seconds = self
            .base_seconds
            .saturating_mul(1i64 << (over - 1).min(40))
            .min(self.cap_seconds);
        let until = c.last_failure_at + Duration::seconds(seconds);
        (until > now).then_some(until)
    }
}

/// The three counters of one attempt (a scope never seen before counts zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counters {
    pub pair: Counter,
    pub ip: Counter,
    pub account: Counter,
}

/// Whether an attempt may check its password.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// Refused; try again in this many seconds (at least 1).
    Locked {
        seconds: i64,
    },
}

impl Counters {
    pub fn verdict(&self, now: DateTime<Utc>) -> Verdict {
        let pair_failed_lately = PAIR.live_failures(self.pair, now) > 0
            && now - self.pair.last_failure_at
                < Duration::seconds(ACCOUNT_LOCK_SPARES_AFTER_SECONDS);
        let account = if pair_failed_lately {
            ACCOUNT.locked_until(self.account, now)
        } else {
            None
        };
        let until = [
            PAIR.locked_until(self.pair, now),
            IP.locked_until(self.ip, now),
            account,
        ]
        .into_iter()
        .flatten()
        .max();
        match until {
            Some(until) => Verdict::Locked {
                seconds: ((until - now).num_milliseconds() + 999) / 1000,
            },
            None => Verdict::Allowed,
        }
    }
}

/// Counters idle this long are deleted (well past every `forget_seconds`: nothing changes).
pub const SWEEP_AFTER_SECONDS: i64 = 24 * 3600;

/// The three counter keys of one attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    pub pair: String,
    pub ip: String,
    pub account: String,
}

impl Keys {
    /// `address` as stored (`EmailAddress::lower`), `ip` from [`ip_key`].
    pub fn new(address: &str, ip: &str) -> Keys {
        Keys {
            pair: format!("{address} {ip}"),
            ip: ip.to_owned(),
            account: address.to_owned(),
        }
    }
}

/// The message a locked attempt gets: the same whether or not the address exists.
pub fn locked_message(seconds: i64) -> String {
    let wait = if seconds <= 90 {
        let s = seconds.max(1);
        format!("{s} second{}", if s == 1 { "" } else { "s" })
    } else {
        let m = (seconds + 59) / 60;
        format!("{m} minutes")
    };
    format!("Too many failed sign-in attempts. Try again in {wait}.")
}

/// The IP a throttle counts by: IPv6 clients by their /64 (one subscriber's whole network, which
/// an attacker could otherwise rotate through), IPv4-mapped addresses as IPv4.
pub fn ip_key(ip: std::net::IpAddr) -> String {
    use std::net::IpAddr;
    match ip {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => {
                let s = v6.segments();
                format!("{:x}:{:x}:{:x}:{:x}::/64", s[0], s[1], s[2], s[3])
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + s, 0).unwrap()
    }

    fn c(failures: i32, at: i64) -> Counter {
        Counter {
            failures,
            last_failure_at: t(at),
        }
    }

    #[test]
    fn free_failures_then_doubling_locks_capped() {
        assert_eq!(PAIR.locked_until(c(3, 0), t(0)), None);
        assert_eq!(PAIR.locked_until(c(4, 0), t(0)), Some(t(2)));
        assert_eq!(PAIR.locked_until(c(5, 0), t(0)), Some(t(4)));
        assert_eq!(PAIR.locked_until(c(8, 0), t(0)), Some(t(32)));
        assert_eq!(PAIR.locked_until(c(30, 0), t(0)), Some(t(15 * 60)));
        assert_eq!(PAIR.locked_until(c(i32::MAX, 0), t(0)), Some(t(15 * 60)));
        // A lock runs out; the count goes on (the next failure locks for longer) until forgotten.
        assert_eq!(PAIR.locked_until(c(5, 0), t(4)), None);
        assert_eq!(PAIR.after_failure(c(5, 0), t(4)), 6);
        assert_eq!(PAIR.after_failure(c(30, 0), t(3600)), 1);
    }

    #[test]
    fn account_lock_spares_ips_that_did_not_fail_lately() {
        let now = t(100);
        let clean = Counters {
            pair: c(0, 100),
            ip: c(0, 100),
            account: c(50, 99),
        };
        assert_eq!(clean.verdict(now), Verdict::Allowed);
        let failed = Counters {
            pair: c(1, 90),
            ..clean
        };
        assert!(matches!(failed.verdict(now), Verdict::Locked { .. }));
        let failed_long_ago = Counters {
            pair: c(1, 100 - ACCOUNT_LOCK_SPARES_AFTER_SECONDS),
            ..clean
        };
        assert_eq!(failed_long_ago.verdict(now), Verdict::Allowed);
    }

    #[test]
    fn the_longest_lock_wins() {
        let v = Counters {
            pair: c(4, 0),
            ip: c(25, 0),
            account: c(0, 0),
        }
        .verdict(t(1));
        assert_eq!(
            v,
            Verdict::Locked {
                seconds: (IP.base_seconds << 4) - 1
            }
        );
    }

    #[test]
    fn messages_and_ip_keys() {
        assert_eq!(
            locked_message(1),
            "Too many failed sign-in attempts. Try again in 1 second."
        );
        assert!(locked_message(600).ends_with("in 10 minutes."));
        assert_eq!(ip_key("10.1.2.3".parse().unwrap()), "10.1.2.3");
        assert_eq!(ip_key("::ffff:10.1.2.3".parse().unwrap()), "10.1.2.3");
        assert_eq!(
            ip_key("2001:db8:1:2:3:4:5:6".parse().unwrap()),
            "2001:db8:1:2::/64"
        );
    }
}
