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
        /// Our Message-ID, which names the job.
        MessageId = "message_id",
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
pub struct RelayEvent {
    /// The provider's own id for the event: unique per source.
    pub id: String,
    pub kind: EventKind,
    pub recipient: EmailAddress,
    /// The Message-ID header of the reported message, when the relay gives it back.
    pub message_id: Option<String>,
    /// The enhanced status code (`5.1.1`), when given.
    pub status: Option<String>,
    /// The relay's diagnostic text, as given (cut to 2,000 characters).
    pub diagnostic: Option<String>,
    /// When the provider says it happened, as it wrote it.
    pub occurred_at: Option<String>,
}

/// The longest diagnostic kept.
pub const MAX_DIAGNOSTIC: usize = 2000;

impl RelayEvent {
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

/// An org's rule for soft bounces: suppress after `soft_threshold` within `soft_days` days.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BouncePolicy {
    pub soft_threshold: i32,
    pub soft_days: i32,
}

impl Default for BouncePolicy {
    fn default() -> Self {
        BouncePolicy {
            soft_threshold: 3,
            soft_days: 30,
        }
    }
}

impl BouncePolicy {
    /// Checks a policy as typed in Settings.
    pub fn new(soft_threshold: i32, soft_days: i32) -> Result<BouncePolicy, String> {
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
        Ok(BouncePolicy {
            soft_threshold,
            soft_days,
        })
    }

    /// Does the `count`th soft bounce within the window suppress the address?
    pub fn soft_suppresses(self, count: i64) -> bool {
        count >= i64::from(self.soft_threshold)
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
        assert!(BouncePolicy::new(0, 30)
            .unwrap_err()
            .contains("between 1 and 100"));
        assert!(BouncePolicy::new(3, 366)
            .unwrap_err()
            .contains("between 1 and 365"));
        assert_eq!(BouncePolicy::new(3, 30), Ok(p));
    }

    #[test]
    fn fields_are_trimmed_cut_and_empty_is_none() {
        assert_eq!(RelayEvent::field(Some("  "), 10), None);
        assert_eq!(RelayEvent::field(Some(" ab "), 10), Some("ab".into()));
        assert_eq!(RelayEvent::field(Some("äöüß"), 2), Some("äö".into()));
    }
}
