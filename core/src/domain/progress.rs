//! A campaign's progress as pages show it, and the send rate and ETA derived from readings.
//! Shared by the server (which sends readings) and the browser (which keeps a minute of them).

use serde::{Deserialize, Serialize};

/// One reading of a campaign's counter slots, stamped with the database clock.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub status: crate::domain::CampaignStatus,
    /// Recipients materialised (0 before the campaign started).
    pub total: i64,
    pub queued: i64,
    pub delivered: i64,
    pub failed: i64,
    pub unknown: i64,
    pub suppressed: i64,
    pub cancelled: i64,
    /// Database time of the reading, milliseconds since the epoch.
    pub at_ms: i64,
    /// When sending started and when it ended (sent, or cancelled), milliseconds since the
    /// epoch, and the same in the org's time zone for people (`YYYY-MM-DD HH:MM`).
    #[serde(default)]
    pub started_ms: Option<i64>,
    #[serde(default)]
    pub finished_ms: Option<i64>,
    #[serde(default)]
    pub started: Option<String>,
    #[serde(default)]
    pub finished: Option<String>,
}

/// What a campaign page shows of a reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Draft, submitted or approved: nothing to count yet.
    NotStarted,
    /// Sending or paused: the live bar, the current rate and the ETA.
    Sending,
    /// Sent or cancelled: a summary of the whole send.
    Finished,
}

/// A finished send in figures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// From start to end, in seconds (None when either end is unknown).
    pub duration_seconds: Option<i64>,
    /// Messages that reached the SMTP conversation (delivered, failed, unknown) per second
    /// over the whole send.
    pub average_rate: Option<f64>,
}

impl Progress {
    /// Recipients in a final state.
    pub fn done(&self) -> i64 {
        self.delivered + self.failed + self.unknown + self.suppressed + self.cancelled
    }

    /// Handed to the delivery queue and not finished yet.
    pub fn in_flight(&self) -> i64 {
        (self.total - self.queued - self.done()).max(0)
    }

    /// Queued or in flight.
    pub fn remaining(&self) -> i64 {
        self.total.saturating_sub(self.done()).max(0)
    }

    /// Which view of the campaign this reading calls for.
    pub fn phase(&self) -> Phase {
        use crate::domain::CampaignStatus as S;
        match self.status {
            S::Sending | S::Paused => Phase::Sending,
            S::Sent | S::Cancelled => Phase::Finished,
            S::Draft | S::Submitted | S::Approved => Phase::NotStarted,
        }
    }

    /// The whole send in figures (meaningful once [`Phase::Finished`]).
    pub fn summary(&self) -> Summary {
        let duration_ms = match (self.started_ms, self.finished_ms) {
            (Some(s), Some(f)) if f >= s => Some(f - s),
            _ => None,
        };
        let attempted = self.delivered + self.failed + self.unknown;
        Summary {
            duration_seconds: duration_ms.map(|ms| (ms + 999) / 1000),
            average_rate: duration_ms
                .filter(|&ms| ms >= 1_000)
                .map(|ms| attempted as f64 * 1_000.0 / ms as f64),
        }
    }

    /// `part` as a percentage of the total, for a bar segment's width.
    pub fn percent(&self, part: i64) -> f64 {
        if self.total <= 0 {
            0.0
        } else {
            (part as f64 * 100.0 / self.total as f64).clamp(0.0, 100.0)
        }
    }
}

/// Readings kept for the rate: a minute for the current rate, more for the chart.
pub const RATE_WINDOW_MS: i64 = 60_000;
pub const HISTORY_MS: i64 = 15 * 60_000;

/// Adds a reading to `history` (oldest first), dropping readings older than [`HISTORY_MS`] and
/// a reading that is not newer than the last one (a replica's clock reading out of order).
pub fn record(history: &mut Vec<(i64, i64)>, p: &Progress) {
    if history.last().is_some_and(|&(at, _)| at >= p.at_ms) {
        return;
    }
    history.push((p.at_ms, p.done()));
    let oldest = p.at_ms - HISTORY_MS;
    history.retain(|&(at, _)| at >= oldest);
}

/// Messages per second over the last minute of `history`, or `None` before two readings at
/// least a second apart exist.
pub fn rate(history: &[(i64, i64)]) -> Option<f64> {
    let &(last_at, last_done) = history.last()?;
    let &(first_at, first_done) = history
        .iter()
        .find(|&&(at, _)| at >= last_at - RATE_WINDOW_MS)?;
    let span = last_at - first_at;
    (span >= 1_000).then(|| (last_done - first_done).max(0) as f64 * 1_000.0 / span as f64)
}

/// Seconds until the rest is sent at `rate`, or `None` when nothing moves.
pub fn eta_seconds(p: &Progress, rate: Option<f64>) -> Option<i64> {
    match rate {
        Some(r) if r > 0.0 && p.remaining() > 0 => Some((p.remaining() as f64 / r).ceil() as i64),
        _ => None,
    }
}

/// "3 h 05 min", "4 min 10 s", "12 s".
pub fn human_duration(seconds: i64) -> String {
    let (h, m, s) = (seconds / 3600, seconds % 3600 / 60, seconds % 60);
    if h > 0 {
        format!("{h} h {m:02} min")
    } else if m > 0 {
        format!("{m} min {s:02} s")
    } else {
        format!("{s} s")
    }
}

/// The send rate between consecutive readings, for the chart: (time, messages/s).
pub fn rate_series(history: &[(i64, i64)]) -> Vec<(i64, f64)> {
    history
        .windows(2)
        .filter(|w| w[1].0 > w[0].0)
        .map(|w| {
            let per_s = (w[1].1 - w[0].1).max(0) as f64 * 1_000.0 / (w[1].0 - w[0].0) as f64;
            (w[1].0, per_s)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::CampaignStatus;

    #[test]
    fn the_phase_follows_the_status_and_a_finished_send_is_summed_up_whole() {
        let mut p = Progress {
            status: CampaignStatus::Draft,
            ..Progress::default()
        };
        assert_eq!(p.phase(), Phase::NotStarted);
        p.status = CampaignStatus::Approved;
        assert_eq!(p.phase(), Phase::NotStarted);
        p.status = CampaignStatus::Paused;
        assert_eq!(p.phase(), Phase::Sending);
        p.status = CampaignStatus::Cancelled;
        assert_eq!(p.phase(), Phase::Finished);
        p.status = CampaignStatus::Sent;
        assert_eq!(p.phase(), Phase::Finished);
        assert_eq!(
            p.summary(),
            Summary {
                duration_seconds: None,
                average_rate: None
            }
        );
        p.delivered = 1_150;
        p.failed = 40;
        p.unknown = 10;
        p.suppressed = 300;
        p.started_ms = Some(1_000_000);
        p.finished_ms = Some(1_000_000 + 240_000);
        let s = p.summary();
        assert_eq!(s.duration_seconds, Some(240));
        // 1,200 attempted over 4 minutes; suppressed ones never reached SMTP.
        assert_eq!(s.average_rate, Some(5.0));
    }

    fn at(ms: i64, done: i64) -> Progress {
        Progress {
            status: CampaignStatus::Sending,
            total: 1_000,
            delivered: done,
            at_ms: ms,
            ..Progress::default()
        }
    }

    #[test]
    fn segments_add_up_to_the_total() {
        let p = Progress {
            total: 100,
            queued: 40,
            delivered: 30,
            failed: 5,
            unknown: 1,
            suppressed: 4,
            ..Progress::default()
        };
        assert_eq!(p.done(), 40);
        assert_eq!(p.in_flight(), 20);
        assert_eq!(p.queued + p.in_flight() + p.done(), p.total);
        assert_eq!(p.remaining(), 60);
        assert_eq!(p.percent(30), 30.0);
        assert_eq!(Progress::default().percent(5), 0.0, "no total yet");
    }

    #[test]
    fn the_rate_covers_the_last_minute_only() {
        let mut h = Vec::new();
        record(&mut h, &at(0, 0));
        assert_eq!(rate(&h), None, "one reading is no rate");
        record(&mut h, &at(10_000, 5_000 / 10));
        // 500 in 10 s.
        assert_eq!(rate(&h), Some(50.0));
        record(&mut h, &at(70_000, 500 + 600));
        // The first reading left the minute: 600 over the last 60 s.
        assert_eq!(rate(&h), Some(10.0));
        assert_eq!(eta_seconds(&at(70_000, 700), Some(10.0)), Some(30));
        assert_eq!(eta_seconds(&at(70_000, 900), None), None);
    }

    #[test]
    fn out_of_order_readings_are_ignored_and_history_is_bounded() {
        let mut h = Vec::new();
        record(&mut h, &at(5_000, 10));
        record(&mut h, &at(4_000, 5));
        record(&mut h, &at(5_000, 12));
        assert_eq!(h, vec![(5_000, 10)]);
        for k in 1..=2_000 {
            record(&mut h, &at(5_000 + k * 1_000, 10 + k));
        }
        assert!(h.len() as i64 <= HISTORY_MS / 1_000 + 1, "{}", h.len());
        assert_eq!(rate_series(&h).last().map(|r| r.1), Some(1.0));
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_duration(12), "12 s");
        assert_eq!(human_duration(250), "4 min 10 s");
        assert_eq!(human_duration(11_100), "3 h 05 min");
    }
}
