use super::{EmailAddress, JobId, SuppressionReason};

text_enum! {
    /// Who reported an event (`delivery_events.source`, `webhook_endpoints.source`).
    pub enum EventSource ("an event source") {
        /// Any relay, signed the Standard Webhooks way.
        Generic = "generic",
        Mailgun = "mailgun",
        Postmark = "postmark",
        SendGrid = "sendgrid",
        /// Amazon SES, through an SNS topic.
        Ses = "ses",
        /// A delivery status notification (RFC 3464, or a common non-standard bounce) mailed
        /// to the bounce domain.
        Dsn = "dsn",
        /// A feedback-loop complaint (RFC 5965 ARF) mailed to the bounce domain.
        Arf = "arf",
    }
}

text_enum! {
    /// What a relay reported about a message after accepting it.
    pub enum EventKind ("an event kind") {
        /// The address does not exist (5.1.x, or the relay's permanent class).
        HardBounce = "hard_bounce",
        /// A temporary failure the relay gave up on, or a block.
        SoftBounce = "soft_bounce",
        /// The recipient reported the mail as spam.
        Complaint = "complaint",
        /// The recipient unsubscribed through the relay's own link.
        Unsubscribe = "unsubscribe",
    }
}

text_enum! {
    /// How an event found its delivery.
    pub enum MatchedBy ("a match") {
        /// Our signed VERP token in the envelope sender: names the job, and proves it.
        Token = "token",
        /// Our Message-ID, which names the job.
        MessageId = "message_id",
        /// The id the relay gave the message in its 250 reply.
        RelayId = "relay_id",
        /// The org's latest delivered message to the address.
        Recipient = "recipient",
        /// No delivery of the org: kept as unmatched.
        None = "none",
    }
}

text_enum! {
    /// What recording an event did.
    pub enum EventEffect ("an event effect") {
        /// The address is suppressed now (it may have been already, for a weaker reason).
        Suppressed = "suppressed",
        /// A soft bounce below the threshold: counted, nothing else.
        Counted = "counted",
        /// Nothing new (the address was suppressed for this reason or a stronger one).
        None = "none",
    }
}

impl EventSource {
    /// Sources that post webhooks (the others are mailed to the bounce domain).
    pub const WEBHOOKS: [EventSource; 5] = [
        EventSource::Generic,
        EventSource::Mailgun,
        EventSource::Postmark,
        EventSource::SendGrid,
        EventSource::Ses,
    ];

    pub fn is_webhook(self) -> bool {
        Self::WEBHOOKS.contains(&self)
    }
}

impl EventKind {
    /// The suppression the event writes at once. Hard bounces and complaints stop all mail
    /// (digests and account mail too); a relay's unsubscribe is an unsubscribe; a soft bounce
    /// writes nothing until [`BouncePolicy::soft_suppresses`] says so.
    pub fn suppresses_at_once(self) -> Option<SuppressionReason> {
        match self {
            EventKind::HardBounce => Some(SuppressionReason::HardBounce),
            EventKind::Complaint => Some(SuppressionReason::Complaint),
            EventKind::Unsubscribe => Some(SuppressionReason::Unsubscribed),
            EventKind::SoftBounce => None,
        }
    }
}

/// One event as a relay reported it, checked and normalised, before it is matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedbackReport {
    /// The provider's own id for the event: unique per source.
    pub id: String,
    pub kind: EventKind,
    /// Who the report is about. A webhook always says; a mailed bounce in a non-standard shape
    /// may not, and then its VERP token's delivery says.
    pub recipient: Option<EmailAddress>,
    /// The Message-ID header of the reported message, when the relay gives it back.
    pub message_id: Option<String>,
    /// The relay's own id of the message (what its 250 reply named), when it gives it.
    pub relay_id: Option<String>,
    /// The reported message's envelope sender: our VERP address, when the org has a bounce
    /// domain (its token names the job, and proves it).
    pub envelope_from: Option<String>,
    /// The enhanced status code (`5.1.1`), when given.
    pub status: Option<String>,
    /// The relay's diagnostic text, as given (cut to 2,000 characters).
    pub diagnostic: Option<String>,
    /// When the provider says it happened, as it wrote it.
    pub occurred_at: Option<String>,
}

/// The message id a relay named in its 250 reply to our DATA, if it named one: `queued as
/// <id>` (Postfix, SendGrid and most MTAs) or `Ok <id>` (Amazon SES). Its later webhook names
/// the message by this id.
pub fn relay_id(reply: &str) -> Option<String> {
    let id_like = |w: &str| {
        let w = w.trim_matches(|c: char| {
            matches!(c, '<' | '>' | '(' | ')' | '.' | ',' | ';' | '[' | ']')
        });
        (w.len() >= 6
            && w.len() <= 200
            && w.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b)))
        .then(|| w.to_owned())
    };
    let lower = reply.to_ascii_lowercase();
    if let Some(at) = lower.find("queued as ") {
        return reply[at + 10..].split_whitespace().next().and_then(id_like);
    }
    let mut words = reply.split_whitespace();
    let first = words.next()?;
    if !first.starts_with("250") {
        return None;
    }
    let mut word = words.next()?;
    // An enhanced status code (2.0.0) may come first.
    if word.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        word = words.next()?;
    }
    if !word.eq_ignore_ascii_case("ok") {
        return None;
    }
    // SES: `250 Ok 0100018c…-000000`; a bare word like `Ok queued` is no id.
    words
        .next()
        .and_then(id_like)
        .filter(|w| w.len() >= 16 && w.bytes().any(|b| b.is_ascii_digit()))
}

/// The longest diagnostic kept.
pub const MAX_DIAGNOSTIC: usize = 2000;

impl FeedbackReport {
    /// The job the Message-ID names, if it is one of ours.
    pub fn job_id(&self) -> Option<JobId> {
        self.message_id.as_deref().and_then(JobId::from_message_id)
    }

    /// Text as kept: trimmed, at most `max` characters, `None` when empty.
    pub fn field(text: Option<&str>, max: usize) -> Option<String> {
        let t = text?.trim();
        (!t.is_empty()).then(|| t.chars().take(max).collect())
    }
}

/// An org's rules for what relays report: soft bounces suppress after `soft_threshold` within
/// `soft_days` days; a sending campaign pauses itself once it has delivered
/// `pause_min_delivered` messages and its hard bounces or complaints reach these percentages.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BouncePolicy {
    pub soft_threshold: i32,
    pub soft_days: i32,
    pub pause_bounce_pct: f64,
    pub pause_complaint_pct: f64,
    pub pause_min_delivered: i32,
}

impl Default for BouncePolicy {
    fn default() -> Self {
        BouncePolicy {
            soft_threshold: 3,
            soft_days: 30,
            pause_bounce_pct: 5.0,
            pause_complaint_pct: 0.1,
            pause_min_delivered: 500,
        }
    }
}

/// What a campaign's relays have reported so far, against what it delivered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BounceCounts {
    pub delivered: i64,
    pub hard_bounces: i64,
    pub soft_bounces: i64,
    pub complaints: i64,
}

impl BounceCounts {
    /// Percent of delivered, `None` before anything was delivered.
    pub fn pct(part: i64, delivered: i64) -> Option<f64> {
        (delivered > 0).then(|| part as f64 * 100.0 / delivered as f64)
    }

    pub fn bounce_pct(&self) -> Option<f64> {
        Self::pct(self.hard_bounces, self.delivered)
    }

    pub fn complaint_pct(&self) -> Option<f64> {
        Self::pct(self.complaints, self.delivered)
    }
}

impl BouncePolicy {
    /// Checks a policy as typed in Settings.
    pub fn new(
        soft_threshold: i32,
        soft_days: i32,
        pause_bounce_pct: f64,
        pause_complaint_pct: f64,
        pause_min_delivered: i32,
    ) -> Result<BouncePolicy, String> {
        if !(1..=100).contains(&soft_threshold) {
            return Err(format!(
                "Soft bounces before suppressing: {soft_threshold} is not between 1 and 100."
            ));
        }
        if !(1..=365).contains(&soft_days) {
            return Err(format!(
                "Soft-bounce window: {soft_days} days is not between 1 and 365."
            ));
        }
        for (what, pct) in [
            ("Bounce rate that pauses a campaign", pause_bounce_pct),
            ("Complaint rate that pauses a campaign", pause_complaint_pct),
        ] {
            if !(pct > 0.0 && pct <= 100.0) {
                return Err(format!("{what}: {pct} % is not above 0 and at most 100."));
            }
        }
        if !(1..=100_000_000).contains(&pause_min_delivered) {
            return Err(format!(
                "Delivered messages before a campaign can pause itself: {pause_min_delivered} is not between 1 and 100,000,000."
            ));
        }
        Ok(BouncePolicy {
            soft_threshold,
            soft_days,
            pause_bounce_pct,
            pause_complaint_pct,
            pause_min_delivered,
        })
    }

    /// Does the `count`th soft bounce within the window suppress the address?
    pub fn soft_suppresses(self, count: i64) -> bool {
        count >= i64::from(self.soft_threshold)
    }

    /// Why a sending campaign with these counts must pause itself, if it must.
    pub fn pause_reason(self, c: BounceCounts) -> Option<String> {
        if c.delivered < i64::from(self.pause_min_delivered) {
            return None;
        }
        let over = |pct: Option<f64>, limit: f64| pct.filter(|p| *p >= limit);
        if let Some(p) = over(c.bounce_pct(), self.pause_bounce_pct) {
            return Some(format!(
                "Paused itself: {} hard bounces in {} delivered ({p:.1} %, the limit is {} %).",
                c.hard_bounces, c.delivered, self.pause_bounce_pct
            ));
        }
        over(c.complaint_pct(), self.pause_complaint_pct).map(|p| {
            format!(
                "Paused itself: {} complaints in {} delivered ({p:.2} %, the limit is {} %).",
                c.complaints, c.delivered, self.pause_complaint_pct
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hard_bounces_and_complaints_stop_all_mail_at_once() {
        for k in EventKind::ALL {
            let r = k.suppresses_at_once();
            assert_eq!(
                r.is_some_and(SuppressionReason::stops_all_mail),
                matches!(k, EventKind::HardBounce | EventKind::Complaint),
                "{k}"
            );
        }
        assert_eq!(EventKind::SoftBounce.suppresses_at_once(), None);
    }

    #[test]
    fn the_soft_bounce_rule_and_its_bounds() {
        let p = BouncePolicy::default();
        assert!(!p.soft_suppresses(2) && p.soft_suppresses(3));
        let new = |t, d, b, c, m| BouncePolicy::new(t, d, b, c, m);
        assert!(new(0, 30, 5.0, 0.1, 500)
            .unwrap_err()
            .contains("between 1 and 100"));
        assert!(new(3, 366, 5.0, 0.1, 500)
            .unwrap_err()
            .contains("between 1 and 365"));
        assert!(new(3, 30, 0.0, 0.1, 500)
            .unwrap_err()
            .starts_with("Bounce rate"));
        assert!(new(3, 30, 5.0, f64::NAN, 500)
            .unwrap_err()
            .starts_with("Complaint rate"));
        assert!(new(3, 30, 5.0, 0.1, 0)
            .unwrap_err()
            .contains("Delivered messages"));
        assert_eq!(new(3, 30, 5.0, 0.1, 500), Ok(p));
    }

    #[test]
    fn a_campaign_pauses_at_either_rate_once_it_delivered_enough() {
        let p = BouncePolicy::default();
        let c = |delivered, hard_bounces, complaints| BounceCounts {
            delivered,
            hard_bounces,
            soft_bounces: 0,
            complaints,
        };
        assert_eq!(p.pause_reason(c(499, 499, 499)), None, "too few delivered");
        assert_eq!(p.pause_reason(c(1000, 49, 0)), None);
        let r = p.pause_reason(c(1000, 50, 0)).unwrap();
        assert!(
            r.contains("50 hard bounces in 1000 delivered (5.0 %"),
            "{r}"
        );
        assert_eq!(p.pause_reason(c(1000, 0, 0)), None);
        let r = p.pause_reason(c(1000, 0, 1)).unwrap();
        assert!(r.contains("1 complaints in 1000 delivered (0.10 %"), "{r}");
        assert_eq!(BounceCounts::pct(1, 0), None);
    }

    #[test]
    fn the_relay_id_comes_from_the_common_250_replies_and_nothing_else() {
        let cases = [
            ("250 2.0.0 Ok: queued as 4XbQ2k1rTqz9", Some("4XbQ2k1rTqz9")),
            (
                "250 Ok: queued as AbCdEf123.filterdrecv-7d8",
                Some("AbCdEf123.filterdrecv-7d8"),
            ),
            (
                "250 Ok 0100018c2f5e9a1b-8d0f1a2b-3c4d-4e5f-9a8b-7c6d5e4f3a2b-000000",
                Some("0100018c2f5e9a1b-8d0f1a2b-3c4d-4e5f-9a8b-7c6d5e4f3a2b-000000"),
            ),
            (
                "250 2.0.0 OK 1700000000 a1b2c3d4e5f6g7h8i9.123 - gsmtp",
                None,
            ),
            ("250 OK id=1r2s3t-0004AB-CD", None),
            ("250 Great success", None),
            ("250 Ok", None),
            ("", None),
        ];
        for (reply, want) in cases {
            assert_eq!(relay_id(reply).as_deref(), want, "{reply}");
        }
    }

    #[test]
    fn fields_are_trimmed_cut_and_empty_is_none() {
        assert_eq!(FeedbackReport::field(Some("  "), 10), None);
        assert_eq!(FeedbackReport::field(Some(" ab "), 10), Some("ab".into()));
        assert_eq!(FeedbackReport::field(Some("äöüß"), 2), Some("äö".into()));
    }
}
