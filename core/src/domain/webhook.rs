use std::time::Duration;

use super::Backoff;

text_enum! {
    /// What an endpoint can subscribe to (the `type` of each body; the schema is in
    /// `docs/webhooks.md`, version 1).
    pub enum WebhookEventType ("a webhook event type") {
        MessageDelivered = "message.delivered",
        MessageFailed = "message.failed",
        MessageUnknown = "message.unknown",
        MessageBounced = "message.bounced",
        MessageComplained = "message.complained",
        SubscriberUnsubscribed = "subscriber.unsubscribed",
        SubscriberSuppressed = "subscriber.suppressed",
        SubscriberConfirmed = "subscriber.confirmed",
        SubscriberErased = "subscriber.erased",
        CampaignSent = "campaign.sent",
        CampaignPaused = "campaign.paused",
        LinkClicked = "link.clicked",
        AutomationEnrolled = "automation.enrolled",
        AutomationCompleted = "automation.completed",
        AutomationExited = "automation.exited",
        SegmentEntered = "segment.entered",
        SegmentLeft = "segment.left",
        WebhookTest = "webhook.test",
    }
}

impl WebhookEventType {
    pub fn describe(self) -> &'static str {
        match self {
            Self::MessageDelivered => "the relay accepted a message",
            Self::MessageFailed => "a message failed for good",
            Self::MessageUnknown => "a message's outcome cannot be known",
            Self::MessageBounced => "a relay reported a bounce",
            Self::MessageComplained => "a recipient complained",
            Self::SubscriberUnsubscribed => "someone unsubscribed",
            Self::SubscriberSuppressed => {
                "an address was suppressed (bounce, complaint, admin, import)"
            }
            Self::SubscriberConfirmed => "a sign-up was confirmed",
            Self::SubscriberErased => "a subscriber was erased",
            Self::CampaignSent => "a campaign finished sending",
            Self::CampaignPaused => "a campaign paused",
            Self::LinkClicked => "someone followed a tracked link (with click tracking on)",
            Self::AutomationEnrolled => "someone was enrolled in an automation",
            Self::AutomationCompleted => "someone took every step of an automation",
            Self::AutomationExited => {
                "someone left an automation early (goal, unsubscribe, branch, removal, stop)"
            }
            Self::SegmentEntered => "someone came to match a saved segment (learnt by a scan)",
            Self::SegmentLeft => "someone no longer matches a saved segment (learnt by a scan)",
            Self::WebhookTest => "the test button",
        }
    }
}

text_enum! {
    /// Where one (endpoint, event) row stands.
    pub enum WebhookStatus ("a webhook message status") {
        Pending = "pending",
        Delivered = "delivered",
        Failed = "failed",
    }
}

/// Requests in flight to one endpoint across every replica, unless its owner chose otherwise.
pub const WEBHOOK_MAX_IN_FLIGHT: i32 = 16;
/// The most an owner may choose (each process sends at most `--webhook-concurrency` anyway).
pub const WEBHOOK_MAX_IN_FLIGHT_LIMIT: i32 = 64;

/// Checks an owner's choice of requests in flight for an endpoint.
pub fn max_in_flight(n: i32) -> Result<i32, String> {
    if (1..=WEBHOOK_MAX_IN_FLIGHT_LIMIT).contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "Requests at once: from 1 to {WEBHOOK_MAX_IN_FLIGHT_LIMIT}, not {n}."
        ))
    }
}

/// A message is retried for this long after the event, then failed.
pub const WEBHOOK_GIVE_UP_AFTER: Duration = Duration::from_secs(3 * 24 * 3600);
/// An endpoint whose attempts have all failed for this long is disabled.
pub const WEBHOOK_DISABLE_AFTER: Duration = Duration::from_secs(24 * 3600);
/// After a rotation, the previous secret signs too for this long.
pub const WEBHOOK_ROTATION_OVERLAP: Duration = Duration::from_secs(24 * 3600);

/// 5 s, 10 s, 20 s … capped at an hour, with jitter; the three days decide when to stop.
pub const WEBHOOK_BACKOFF: Backoff = Backoff {
    base: Duration::from_secs(5),
    cap: Duration::from_secs(3600),
    max_attempts: i32::MAX,
};
/// A `Retry-After` is honoured up to this.
const RETRY_AFTER_CAP: Duration = Duration::from_secs(6 * 3600);

/// What one attempt's answer means.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Verdict {
    Delivered,
    /// Try again after this (timeouts, connection errors, 408, 429, 5xx).
    Retry(Duration),
    /// Never again: the receiver refused it (other 4xx) or answered with a redirect, which is
    /// not followed.
    Refused,
}

/// The verdict on an answer (`None`: no answer at all). `retry_after` is the receiver's
/// `Retry-After` already read; `schedule` is [`WEBHOOK_BACKOFF`] but in tests; `jitter` in
/// [0, 1).
pub fn verdict(
    schedule: &Backoff,
    http_status: Option<u16>,
    retry_after: Option<Duration>,
    attempt: i32,
    jitter: f64,
) -> Verdict {
    let backoff = || schedule.delay(attempt, jitter).unwrap_or(schedule.cap);
    match http_status {
        Some(s) if (200..300).contains(&s) => Verdict::Delivered,
        Some(408 | 429) | Some(500..=599) => Verdict::Retry(
            retry_after
                .map(|d| d.min(RETRY_AFTER_CAP))
                .unwrap_or_else(backoff),
        ),
        None => Verdict::Retry(backoff()),
        Some(_) => Verdict::Refused,
    }
}

/// A `Retry-After` value: delay-seconds or an HTTP date, read against `now`.
pub fn retry_after(value: &str, now: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    (at.with_timezone(&chrono::Utc) - now).to_std().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_at_once_are_bounded_with_a_reason() {
        assert_eq!(max_in_flight(WEBHOOK_MAX_IN_FLIGHT), Ok(16));
        assert_eq!(max_in_flight(1), Ok(1));
        assert!(max_in_flight(0).unwrap_err().contains("from 1 to 64"));
        assert!(max_in_flight(65).is_err());
    }

    #[test]
    fn answers_are_judged_as_the_contract_says() {
        assert_eq!(
            verdict(&WEBHOOK_BACKOFF, Some(200), None, 1, 0.5),
            Verdict::Delivered
        );
        assert_eq!(
            verdict(&WEBHOOK_BACKOFF, Some(204), None, 1, 0.5),
            Verdict::Delivered
        );
        for refused in [301, 302, 400, 401, 403, 404, 410, 422] {
            assert_eq!(
                verdict(&WEBHOOK_BACKOFF, Some(refused), None, 1, 0.5),
                Verdict::Refused,
                "{refused}"
            );
        }
        for again in [408, 429, 500, 502, 503, 504] {
            assert!(
                matches!(
                    verdict(&WEBHOOK_BACKOFF, Some(again), None, 1, 0.5),
                    Verdict::Retry(_)
                ),
                "{again}"
            );
        }
        assert!(matches!(
            verdict(&WEBHOOK_BACKOFF, None, None, 1, 0.5),
            Verdict::Retry(_)
        ));
        assert_eq!(
            verdict(
                &WEBHOOK_BACKOFF,
                Some(429),
                Some(Duration::from_secs(7)),
                1,
                0.5
            ),
            Verdict::Retry(Duration::from_secs(7))
        );
        assert_eq!(
            verdict(
                &WEBHOOK_BACKOFF,
                Some(503),
                Some(Duration::from_secs(99_999)),
                1,
                0.5
            ),
            Verdict::Retry(RETRY_AFTER_CAP)
        );
        assert_eq!(
            verdict(&WEBHOOK_BACKOFF, None, None, 40, 1.0),
            Verdict::Retry(Duration::from_secs(3600)),
            "capped"
        );
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-05T10:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        assert_eq!(retry_after(" 120 ", now), Some(Duration::from_secs(120)));
        assert_eq!(
            retry_after("Sat, 05 Dec 2026 10:01:30 GMT", now),
            Some(Duration::from_secs(90))
        );
        assert_eq!(retry_after("Sat, 05 Dec 2026 09:00:00 GMT", now), None);
        assert_eq!(retry_after("soon", now), None);
    }
}
