//! What the dashboard knows about one delivery: its state (DESIGN "State machines"), its kind,
//! and the position in the newest-first list a page ends at.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

use super::{
    AutomationId, CampaignId, DigestSendId, EnrolmentId, JobId, NoticeId, SignupId, SubscriberId,
    TxMessageId, UserId,
};

text_enum! {
    /// The state of one message (`deliveries.status`).
    pub enum DeliveryStatus ("a delivery status") {
        Queued = "queued",
        Sending = "sending",
        Delivered = "delivered",
        Failed = "failed",
        Unknown = "unknown",
        Suppressed = "suppressed",
        Cancelled = "cancelled",
    }
}

impl DeliveryStatus {
    /// Only an admin retries, and only these: failed (a final SMTP refusal) and unknown (the
    /// body may have arrived; never retried automatically, DESIGN guarantee 9). The SQL of the
    /// retry repeats this list in its `WHERE` as the compare-and-set.
    pub fn retryable(self) -> bool {
        matches!(self, DeliveryStatus::Failed | DeliveryStatus::Unknown)
    }

    /// Retrying it may send the recipient a second copy.
    pub fn may_have_arrived(self) -> bool {
        self == DeliveryStatus::Unknown
    }
}

text_enum! {
    /// What a message is (`deliveries.kind`), in the delivery worker's priority order.
    pub enum DeliveryKind ("a delivery kind") {
        Test = "test",
        Digest = "digest",
        Campaign = "campaign",
        /// A set-password link: an invitation or a password reset.
        Invite = "invite",
        /// Mail the sending SaaS asked for through the API (`POST /api/v1/messages`).
        Transactional = "transactional",
        /// A sign-up's double opt-in mail, carrying its confirm link.
        Confirm = "confirm",
        /// Mailroom's own notice to an org's owner about their account (an event webhook
        /// endpoint it turned off).
        Notice = "notice",
        /// One step's mail of an automation, to one subscriber.
        Automation = "automation",
    }
}

impl DeliveryKind {
    /// Any suppression stops it, an unsubscribe too: campaign content (tests of it included)
    /// and automations' mail.
    /// The other kinds (a digest to an org's admin, account mail, transactional mail such as
    /// a receipt, a sign-up's confirmation) are stopped only by a hard bounce or a complaint:
    /// unsubscribing from a newsletter is not refusing one's receipts, and someone who left
    /// may sign up again.
    pub fn stopped_by_any_suppression(self) -> bool {
        matches!(
            self,
            DeliveryKind::Campaign | DeliveryKind::Test | DeliveryKind::Automation
        )
    }

    /// The kinds [`stopped_by_any_suppression`](Self::stopped_by_any_suppression), as stored.
    pub fn stopped_by_any_suppression_names() -> Vec<&'static str> {
        DeliveryKind::ALL
            .into_iter()
            .filter(|k| k.stopped_by_any_suppression())
            .map(DeliveryKind::as_str)
            .collect()
    }

    /// Its message carries a credential (a set-password or confirm link): nobody but its recipient may
    /// read it, so the dashboard never opens a captured copy, whoever asks.
    pub fn carries_credential(self) -> bool {
        matches!(self, DeliveryKind::Invite | DeliveryKind::Confirm)
    }
}

/// What a delivery's message is made from besides its job id: one variant per kind, each with
/// just the rows that kind reads (stored as the delivery's nullable reference columns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reference {
    /// A campaign's approved content `version`, to one subscriber.
    Campaign {
        campaign: CampaignId,
        version: i32,
        subscriber: SubscriberId,
    },
    /// A try-out of a campaign's content `version`: never counted in, or waiting for, the
    /// campaign's sending (so its row's `campaign_id` stays empty).
    Test { campaign: CampaignId, version: i32 },
    /// One admin's copy of an org's weekly digest.
    Digest { send: DigestSendId, user: UserId },
    /// A set-password link for a user.
    Invite { user: UserId },
    /// Mail the sending SaaS asked for through the API.
    Transactional { message: TxMessageId },
    /// A sign-up's double opt-in mail.
    Confirm {
        signup: SignupId,
        subscriber: SubscriberId,
    },
    /// One owner's copy of an account notice.
    Notice { notice: NoticeId, user: UserId },
    /// A mail step of an automation; the step's index is in the job id.
    Automation {
        automation: AutomationId,
        enrolment: EnrolmentId,
        subscriber: SubscriberId,
    },
}

/// A [`Reference`] as the delivery row's columns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReferenceColumns {
    pub campaign_id: Option<CampaignId>,
    pub content_version: Option<i32>,
    pub subscriber_id: Option<SubscriberId>,
    pub digest_send_id: Option<DigestSendId>,
    pub user_id: Option<UserId>,
    pub tx_message_id: Option<TxMessageId>,
    pub signup_id: Option<SignupId>,
    pub notice_id: Option<NoticeId>,
    pub automation_id: Option<AutomationId>,
    pub enrolment_id: Option<EnrolmentId>,
}

impl Reference {
    pub fn kind(&self) -> DeliveryKind {
        match self {
            Reference::Campaign { .. } => DeliveryKind::Campaign,
            Reference::Test { .. } => DeliveryKind::Test,
            Reference::Digest { .. } => DeliveryKind::Digest,
            Reference::Invite { .. } => DeliveryKind::Invite,
            Reference::Transactional { .. } => DeliveryKind::Transactional,
            Reference::Confirm { .. } => DeliveryKind::Confirm,
            Reference::Notice { .. } => DeliveryKind::Notice,
            Reference::Automation { .. } => DeliveryKind::Automation,
        }
    }

    /// The campaign whose content the message shows: a campaign message's own, or the one a
    /// test tries out.
    pub fn content_campaign(&self) -> Option<CampaignId> {
        match *self {
            Reference::Campaign { campaign, .. } | Reference::Test { campaign, .. } => {
                Some(campaign)
            }
            _ => None,
        }
    }

    /// The subscriber the message is to, when it is to one.
    pub fn subscriber(&self) -> Option<SubscriberId> {
        match *self {
            Reference::Campaign { subscriber, .. }
            | Reference::Confirm { subscriber, .. }
            | Reference::Automation { subscriber, .. } => Some(subscriber),
            _ => None,
        }
    }

    pub fn columns(&self) -> ReferenceColumns {
        let none = ReferenceColumns::default();
        match *self {
            Reference::Campaign {
                campaign,
                version,
                subscriber,
            } => ReferenceColumns {
                campaign_id: Some(campaign),
                content_version: Some(version),
                subscriber_id: Some(subscriber),
                ..none
            },
            Reference::Test { version, .. } => ReferenceColumns {
                content_version: Some(version),
                ..none
            },
            Reference::Digest { send, user } => ReferenceColumns {
                digest_send_id: Some(send),
                user_id: Some(user),
                ..none
            },
            Reference::Invite { user } => ReferenceColumns {
                user_id: Some(user),
                ..none
            },
            Reference::Transactional { message } => ReferenceColumns {
                tx_message_id: Some(message),
                ..none
            },
            Reference::Confirm { signup, subscriber } => ReferenceColumns {
                signup_id: Some(signup),
                subscriber_id: Some(subscriber),
                ..none
            },
            Reference::Notice { notice, user } => ReferenceColumns {
                notice_id: Some(notice),
                user_id: Some(user),
                ..none
            },
            Reference::Automation {
                automation,
                enrolment,
                subscriber,
            } => ReferenceColumns {
                automation_id: Some(automation),
                enrolment_id: Some(enrolment),
                subscriber_id: Some(subscriber),
                ..none
            },
        }
    }

    /// A test message's reference: all of it is in its job id (`None` for another kind's).
    pub fn of_test(job: &JobId) -> Option<Self> {
        match *job {
            JobId::Test {
                campaign_id,
                content_version,
                ..
            } => Some(Reference::Test {
                campaign: CampaignId(campaign_id),
                version: content_version,
            }),
            _ => None,
        }
    }

    /// Reads the reference back from a row's kind and columns; a test's campaign is the one
    /// its job id names. `None` when a column its kind needs is empty.
    pub fn from_columns(kind: DeliveryKind, c: ReferenceColumns, job: &JobId) -> Option<Self> {
        Some(match kind {
            DeliveryKind::Campaign => Reference::Campaign {
                campaign: c.campaign_id?,
                version: c.content_version?,
                subscriber: c.subscriber_id?,
            },
            DeliveryKind::Test => Reference::of_test(job)?,
            DeliveryKind::Digest => Reference::Digest {
                send: c.digest_send_id?,
                user: c.user_id?,
            },
            DeliveryKind::Invite => Reference::Invite { user: c.user_id? },
            DeliveryKind::Transactional => Reference::Transactional {
                message: c.tx_message_id?,
            },
            DeliveryKind::Confirm => Reference::Confirm {
                signup: c.signup_id?,
                subscriber: c.subscriber_id?,
            },
            DeliveryKind::Notice => Reference::Notice {
                notice: c.notice_id?,
                user: c.user_id?,
            },
            DeliveryKind::Automation => Reference::Automation {
                automation: c.automation_id?,
                enrolment: c.enrolment_id?,
                subscriber: c.subscriber_id?,
            },
        })
    }
}

/// Where a page of the newest-first delivery list ended: the last row's `(created_at, job_id)`.
/// The next page starts strictly after it, so rows inserted meanwhile never shift a page and
/// none is shown twice. Written into URLs as `<microseconds since 1970>~<job id>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryCursor {
    pub created_at: DateTime<Utc>,
    pub job_id: String,
}

impl fmt::Display for DeliveryCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}~{}", self.created_at.timestamp_micros(), self.job_id)
    }
}

impl FromStr for DeliveryCursor {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("“{}” is not a page position", super::input::excerpt(s));
        // The microseconds never contain '~'; the job id may.
        let (micros, job_id) = s.split_once('~').ok_or_else(bad)?;
        let micros: i64 = micros.parse().map_err(|_| bad())?;
        let created_at = DateTime::from_timestamp_micros(micros).ok_or_else(bad)?;
        // Years 1 to 9999 only: PostgreSQL refuses timestamps far outside them, as an error.
        if !(1..=9999).contains(&chrono::Datelike::year(&created_at))
            || job_id.is_empty()
            || job_id.chars().any(char::is_control)
        {
            return Err(bad());
        }
        Ok(DeliveryCursor {
            created_at,
            job_id: job_id.to_owned(),
        })
    }
}

/// Why an attempt failed for good: the decision travels as this, the relay's reply only as
/// text to show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    /// The relay refused the message for good (5xx).
    Refused,
    /// The relay said the mailbox does not exist: the address is suppressed too.
    HardBounce,
    /// Every attempt the backoff allows was turned away for now.
    GaveUp,
    /// The message could not be built (a bad address, no content): no attempt would change it.
    Unsendable,
}

impl Failure {
    /// The reply as the Deliveries page and the API show it.
    pub fn shown(self, reply: &str) -> std::borrow::Cow<'_, str> {
        match self {
            Failure::HardBounce => format!("hard bounce: {reply}").into(),
            Failure::Refused | Failure::GaveUp | Failure::Unsendable => reply.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reference_reads_back_from_its_columns() {
        let test = JobId::Test {
            campaign_id: 3,
            content_version: 2,
            token: "t".into(),
            email_lower: "a@example.org".into(),
        };
        let refs = [
            Reference::Campaign {
                campaign: CampaignId(3),
                version: 2,
                subscriber: SubscriberId(9),
            },
            Reference::Test {
                campaign: CampaignId(3),
                version: 2,
            },
            Reference::Digest {
                send: DigestSendId(4),
                user: UserId(5),
            },
            Reference::Invite { user: UserId(5) },
            Reference::Transactional {
                message: TxMessageId(6),
            },
            Reference::Confirm {
                signup: SignupId(7),
                subscriber: SubscriberId(9),
            },
            Reference::Notice {
                notice: NoticeId(8),
                user: UserId(5),
            },
            Reference::Automation {
                automation: AutomationId(10),
                enrolment: EnrolmentId(11),
                subscriber: SubscriberId(9),
            },
        ];
        for r in refs {
            assert_eq!(
                Reference::from_columns(r.kind(), r.columns(), &test),
                Some(r)
            );
        }
        // A test's campaign never lands in the column that counts it into its campaign.
        assert_eq!(refs[1].columns().campaign_id, None);
        // A campaign row without its subscriber is not a reference.
        let mut broken = refs[0].columns();
        broken.subscriber_id = None;
        assert_eq!(
            Reference::from_columns(DeliveryKind::Campaign, broken, &test),
            None
        );
    }

    #[test]
    fn statuses_and_kinds_round_trip_and_reject_unknown_names() {
        for s in DeliveryStatus::ALL {
            assert_eq!(s.as_str().parse::<DeliveryStatus>().unwrap(), s);
        }
        for k in DeliveryKind::ALL {
            assert_eq!(k.as_str().parse::<DeliveryKind>().unwrap(), k);
        }
        assert!("lost"
            .parse::<DeliveryStatus>()
            .unwrap_err()
            .contains("lost"));
        assert!("sms".parse::<DeliveryKind>().unwrap_err().contains("sms"));
    }

    #[test]
    fn only_failed_and_unknown_are_retryable() {
        let retryable: Vec<_> = DeliveryStatus::ALL
            .into_iter()
            .filter(|s| s.retryable())
            .collect();
        assert_eq!(retryable, [DeliveryStatus::Failed, DeliveryStatus::Unknown]);
        assert!(DeliveryStatus::Unknown.may_have_arrived());
        assert!(!DeliveryStatus::Failed.may_have_arrived());
    }

    #[test]
    fn cursor_round_trips_with_microseconds_and_odd_job_ids() {
        let c = DeliveryCursor {
            created_at: DateTime::from_timestamp_micros(1_790_000_000_123_456).unwrap(),
            job_id: "test:1:1:t:a~b@x.org".into(),
        };
        assert_eq!(c.to_string().parse::<DeliveryCursor>().unwrap(), c);
        for bad in [
            "",
            "12",
            "x~job",
            "12~",
            "~job",
            "-9223372036854775808~job",
            "9223372036854775807~job",
            "12~jo\0b",
        ] {
            assert!(bad.parse::<DeliveryCursor>().is_err(), "{bad}");
        }
    }
}
