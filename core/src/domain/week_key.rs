use chrono::{Datelike, NaiveDate};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The dedupe key of a `digest_sends` row: either the ISO week of the organisation's local date
/// (`2026-W28`; ISO week-year, so 2027-01-01 is `2026-W53`) for the scheduled digest, or
/// `manual-<unix-seconds>-<nonce>` for a forced resend, which can never collide with a scheduled
/// week; the random nonce (16 hex digits) makes two dialogs opened in the same second two keys.
/// Resends recorded before nonces existed read as `manual-<unix-seconds>`.
///
/// The database computes scheduled keys (`to_char(local_date, 'IYYY-"W"IW')`, one clock); this
/// type parses and validates them, and computes them for tests and previews.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum WeekKey {
    Scheduled {
        iso_year: i32,
        week: u32,
    },
    Manual {
        unix_seconds: i64,
        nonce: Option<u64>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("“{0}” is not a week key (expected YYYY-Www such as 2026-W28, or manual-<unix seconds>-<nonce>)")]
pub struct WeekKeyError(pub String);

impl WeekKey {
    /// The scheduled key of the ISO week containing `date`.
    pub fn of_date(date: NaiveDate) -> Self {
        let w = date.iso_week();
        WeekKey::Scheduled {
            iso_year: w.year(),
            week: w.week(),
        }
    }

    pub fn manual(unix_seconds: i64, nonce: u64) -> Self {
        WeekKey::Manual {
            unix_seconds,
            nonce: Some(nonce),
        }
    }

    pub fn is_manual(&self) -> bool {
        matches!(self, WeekKey::Manual { .. })
    }
}

impl fmt::Display for WeekKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WeekKey::Scheduled { iso_year, week } => write!(f, "{iso_year:04}-W{week:02}"),
            WeekKey::Manual {
                unix_seconds,
                nonce: Some(n),
            } => write!(f, "manual-{unix_seconds}-{n:016x}"),
            WeekKey::Manual {
                unix_seconds,
                nonce: None,
            } => write!(f, "manual-{unix_seconds}"),
        }
    }
}

impl FromStr for WeekKey {
    type Err = WeekKeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || WeekKeyError(s.to_owned());
        if let Some(rest) = s.strip_prefix("manual-") {
            let (ts, nonce) = match rest.split_once('-') {
                Some((ts, n)) => (ts, Some(n)),
                None => (rest, None),
            };
            // Canonical forms only, so the stored key and the parsed one print alike.
            if ts.is_empty()
                || !ts.bytes().all(|b| b.is_ascii_digit())
                || (ts.len() > 1 && ts.starts_with('0'))
            {
                return Err(bad());
            }
            let nonce = match nonce {
                None => None,
                Some(n)
                    if n.len() == 16
                        && n.bytes()
                            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
                {
                    Some(u64::from_str_radix(n, 16).map_err(|_| bad())?)
                }
                Some(_) => return Err(bad()),
            };
            return Ok(WeekKey::Manual {
                unix_seconds: ts.parse().map_err(|_| bad())?,
                nonce,
            });
        }
        let (year, week) = s.split_once("-W").ok_or_else(bad)?;
        if year.len() != 4
            || week.len() != 2
            || !(year.bytes().chain(week.bytes())).all(|b| b.is_ascii_digit())
        {
            return Err(bad());
        }
        let iso_year: i32 = year.parse().map_err(|_| bad())?;
        let week: u32 = week.parse().map_err(|_| bad())?;
        // Week 53 exists only in long ISO years: the 28th of December is always in the last week.
        let last_week = NaiveDate::from_ymd_opt(iso_year, 12, 28)
            .ok_or_else(bad)?
            .iso_week()
            .week();
        if week == 0 || week > last_week {
            return Err(bad());
        }
        Ok(WeekKey::Scheduled { iso_year, week })
    }
}

impl TryFrom<String> for WeekKey {
    type Error = WeekKeyError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

impl From<WeekKey> for String {
    fn from(value: WeekKey) -> Self {
        value.to_string()
    }
}

text_enum! {
    /// How a digest came to be (`digest_sends.kind`).
    pub enum DigestKind ("a digest kind") {
        /// The weekly one, claimed within its 24-hour window.
        Scheduled = "scheduled",
        /// An admin's resend.
        Manual = "manual",
        /// The weekly one whose window had passed when it was claimed: recorded, never sent.
        Skipped = "skipped",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(y: i32, m: u32, d: u32) -> String {
        WeekKey::of_date(NaiveDate::from_ymd_opt(y, m, d).unwrap()).to_string()
    }

    #[test]
    fn iso_week_year_vectors() {
        assert_eq!(key(2025, 12, 29), "2026-W01");
        assert_eq!(key(2027, 1, 1), "2026-W53");
        assert_eq!(key(2027, 1, 3), "2026-W53");
        assert_eq!(key(2027, 1, 4), "2027-W01");
        assert_eq!(key(2021, 1, 3), "2020-W53");
        assert_eq!(key(2026, 7, 10), "2026-W28");
    }

    #[test]
    fn parses_what_it_prints() {
        for s in [
            "2026-W01",
            "2026-W53",
            "2020-W53",
            "manual-1767225600",
            "manual-0",
            "manual-1767225600-00000000000000ff",
            "manual-1767225600-ffffffffffffffff",
        ] {
            assert_eq!(s.parse::<WeekKey>().unwrap().to_string(), s);
        }
        assert!("manual-1767225600".parse::<WeekKey>().unwrap().is_manual());
    }

    #[test]
    fn rejects_impossible_or_malformed_keys() {
        // 2025 has 52 ISO weeks, so W53 does not exist.
        for s in [
            "2025-W53",
            "2026-W00",
            "2026-W54",
            "2026-W1",
            "26-W01",
            "2026W01",
            "manual-",
            "manual--5",
            "manual-12a",
            "manual-007",
            "manual-1767225600-",
            "manual-1767225600-FF",
            "manual-1767225600-00000000000000FF",
            "manual-1767225600-0000000000000000-1",
            "",
        ] {
            let err = s.parse::<WeekKey>().unwrap_err();
            assert!(err.to_string().contains(&format!("“{s}”")), "{s}");
        }
    }

    #[test]
    fn manual_keys_never_look_like_scheduled_ones() {
        let m = WeekKey::manual(1_767_225_600, u64::MAX).to_string();
        assert!(!m.contains("-W"), "{m}");
        assert_eq!(m, "manual-1767225600-ffffffffffffffff");
        assert_ne!(
            WeekKey::manual(1_767_225_600, 1),
            WeekKey::manual(1_767_225_600, 2),
            "two dialogs of one second: two keys"
        );
    }
}
