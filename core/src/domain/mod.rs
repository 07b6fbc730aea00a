//! Domain types: each invariant of DESIGN.md that can live in a type lives here, parsed once at
//! the edge. Compiled for the server and the browser alike; on the server the state enums also
//! read and write themselves as the text columns that hold them (`stored_as_text!`).

/// Reads and writes an enum with `as_str` and `FromStr` as a PostgreSQL `text` value (the
/// column's `check` constraint lists the same words), so rows carry the enum, not a string.
macro_rules! stored_as_text {
    ($t:ty) => {
        #[cfg(feature = "ssr")]
        impl sqlx::Type<sqlx::Postgres> for $t {
            fn type_info() -> sqlx::postgres::PgTypeInfo {
                <&str as sqlx::Type<sqlx::Postgres>>::type_info()
            }
            fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
                <&str as sqlx::Type<sqlx::Postgres>>::compatible(ty)
            }
        }
        #[cfg(feature = "ssr")]
        impl sqlx::postgres::PgHasArrayType for $t {
            fn array_type_info() -> sqlx::postgres::PgTypeInfo {
                <&str as sqlx::postgres::PgHasArrayType>::array_type_info()
            }
        }
        #[cfg(feature = "ssr")]
        impl<'r> sqlx::Decode<'r, sqlx::Postgres> for $t {
            fn decode(
                value: sqlx::postgres::PgValueRef<'r>,
            ) -> Result<Self, sqlx::error::BoxDynError> {
                let text = <&str as sqlx::Decode<sqlx::Postgres>>::decode(value)?;
                text.parse::<$t>().map_err(Into::into)
            }
        }
        #[cfg(feature = "ssr")]
        impl sqlx::Encode<'_, sqlx::Postgres> for $t {
            fn encode_by_ref(
                &self,
                buf: &mut sqlx::postgres::PgArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <&str as sqlx::Encode<sqlx::Postgres>>::encode_by_ref(&self.as_str(), buf)
            }
        }
    };
}

/// An enum stored as text, declared with each variant's stored name: `ALL`, `as_str`,
/// `Display`, `FromStr` (whose error names the value and what was expected) and the text
/// mapping above, from one list.
macro_rules! text_enum {
    (
        $(#[$meta:meta])*
        pub enum $t:ident ($what:literal) {
            $($(#[$vmeta:meta])* $v:ident = $s:literal),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum $t {
            $($(#[$vmeta])* #[serde(rename = $s)] $v),+
        }

        impl $t {
            pub const ALL: [$t; [$($s),+].len()] = [$($t::$v),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($t::$v => $s),+
                }
            }
        }

        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::ALL.iter().copied().find(|v| v.as_str() == s).ok_or_else(|| {
                    let known: Vec<&str> = Self::ALL.iter().map(|v| v.as_str()).collect();
                    format!(
                        "{:?} is not {} (one of {}).",
                        crate::domain::input::excerpt(s),
                        $what,
                        known.join(", ")
                    )
                })
            }
        }

        stored_as_text!($t);
    };
}

/// What an API token may do.
mod api_scope;
/// Subscriber statuses, names of people and lists, and checking one imported CSV row.
pub mod audience;
/// The audit log's actions.
mod audit;
/// Automations: lifecycle mail in steps, each taken once per person.
pub mod automation;
/// When to retry a temporary failure: exponential, capped, with jitter.
mod backoff;
/// What relays report after the conversation (bounces, complaints), and what each one does.
mod bounce;
/// Campaign states and their legal transitions, body formats and content.
mod campaign;
/// A delivery's state and kind, and where a newest-first page ends.
mod delivery;
/// DKIM signing domains and selectors, checked as DNS host name labels.
mod dkim;
/// What a failover of the database can cost.
mod durability;
/// `EmailAddress`: the one place its comparison form `email_lower` is computed.
mod email;
/// Events the SaaS reports about its people, and its own ids for them.
pub mod event;
/// Row ids as types (`OrgId`, `CampaignId`, …).
mod ids;
/// The edge's rule for every text and time a request brings: no NUL, no control character in a
/// line, a length limit, years PostgreSQL can place, and refusals that name the field.
pub mod input;
/// `JobId`: a message's deterministic identity, the base of its `Message-ID`.
mod job_id;
/// What a set-password link is for: an invitation or a reset.
mod link;
/// How failed sign-ins slow down and then lock further attempts.
pub mod login_throttle;
/// What Mailroom itself tells an org's owners about their account, by mail.
pub mod notice;
/// An organisation's identity as typed at creation (CLI or first-run page), checked once.
pub mod org;
/// A campaign's progress as pages show it, with the send rate and ETA.
pub mod progress;
/// A relay's circuit breaker: what counts against a relay, when to stop and when to probe.
pub mod relay;
/// A user's role within their organisation.
mod role;
/// A segment's definition: one typed tree of conditions.
pub mod segment;
/// What a one-line name typed by a person may not hold.
pub mod text;
/// Events out: what an endpoint subscribes to, and what an attempt's answer means.
pub mod webhook;
/// `WeekKey`: a digest's dedupe key, an ISO week or a forced resend's `manual-…` key.
mod week_key;

pub use api_scope::ApiScope;
pub use audience::{
    CsvColumns, CsvRow, ImportStatus, SeenRows, SubscriberStatus, SuppressionReason,
};
pub use audit::AuditAction;
pub use backoff::Backoff;
pub use bounce::{
    relay_id, BounceCounts, BouncePolicy, EventEffect, EventKind, EventSource, FeedbackReport,
    MatchedBy, MAX_DIAGNOSTIC,
};
pub use campaign::{BodyFormat, CampaignContent, CampaignStatus, Transition, TransitionError};
pub use delivery::{
    DeliveryCursor, DeliveryKind, DeliveryStatus, Failure, Reference, ReferenceColumns,
};
pub use dkim::{DkimDomain, DkimNameError, DkimSelector};
pub use durability::{DatabaseStatus, Durability, ReplicationReading, WriteTrouble, WritesFailing};
#[cfg(feature = "ssr")]
pub use email::erased_form;
pub use email::{is_erased, sentence, EmailAddress, EmailError, ERASED_PREFIX};
pub use ids::{
    AutomationId, CampaignId, DigestSendId, EnrolmentId, NoticeId, OrgId, SignupId, SubscriberId,
    TxMessageId, UserId,
};
#[cfg(feature = "ssr")]
pub(crate) use job_id::{campaign_job_sql, digest_job_sql};
pub use job_id::{idempotency_key, JobId, JobIdError, IDEMPOTENCY_KEY_MAX};
pub use link::LinkPurpose;
pub use notice::Notice;
pub use role::Role;
pub use webhook::{WebhookEventType, WebhookStatus};
pub use week_key::{DigestKind, WeekKey, WeekKeyError};
