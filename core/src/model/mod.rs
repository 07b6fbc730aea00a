//! What the dashboard shows, one type each: `db` reads these rows and `api` hands them to the
//! pages unchanged. Wasm-safe (the browser decodes them); on the server they read straight from
//! a query (`FromRow`), so there is no second, mirrored struct to keep in step.

/// The Overview page's figures.
pub mod overview;

/// A recipient a campaign did not reach for sure, as the campaign page lists them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct Problem {
    pub job_id: String,
    pub recipient: String,
    /// `failed` (with the server's reply) or `unknown` (the connection broke after the body
    /// started).
    pub status: crate::domain::DeliveryStatus,
    pub reason: String,
}

use serde::{Deserialize, Serialize};

use crate::domain::Role;

/// The signed-in user, as every server function and page sees them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct CurrentUser {
    pub user_id: i64,
    pub org_id: i64,
    pub name: String,
    pub email: String,
    pub role: Role,
    pub org_name: String,
}

impl CurrentUser {
    /// The user's organisation, as the type scoped statements take.
    pub fn org(&self) -> crate::domain::OrgId {
        crate::domain::OrgId(self.org_id)
    }

    pub fn user(&self) -> crate::domain::UserId {
        crate::domain::UserId(self.user_id)
    }
}

/// One line of the audit log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct AuditEntry {
    pub id: i64,
    /// In the org's time zone.
    pub at: String,
    /// None: done by the system (a worker, the CLI) or by a user since removed.
    pub actor: Option<String>,
    pub action: String,
    pub object_type: String,
    pub object_id: Option<String>,
    /// Compact JSON.
    pub before: Option<String>,
    pub after: Option<String>,
}

/// A campaign as the campaign list shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct CampaignSummary {
    pub id: i64,
    pub name: String,
    pub status: crate::domain::CampaignStatus,
    pub content_version: i32,
    pub author: String,
    /// Last change, in the org's time zone.
    pub updated: String,
    /// Recipients materialised (0 before the start).
    pub total: i64,
    /// Recipients in a final state, from the counter slots.
    pub done: i64,
}

/// A subscriber as the Audience list shows them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct SubscriberRow {
    pub id: i64,
    pub email: String,
    pub name: String,
    pub status: crate::domain::SubscriberStatus,
    pub erased: bool,
    /// Why the address is suppressed, when it is.
    pub suppressed: Option<crate::domain::SuppressionReason>,
    /// How many lists they are on.
    pub lists: i64,
    /// In the org's time zone.
    pub created: String,
}

/// One digest of the org's history (scheduled, manual or skipped), with who it went to.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct HistoryEntry {
    pub id: i64,
    pub week_key: String,
    pub kind: crate::domain::DigestKind,
    pub covers_week: String,
    /// In the org's time zone.
    pub scheduled_at: String,
    pub created_at: String,
    pub triggered_by: Option<String>,
    pub only_me: bool,
    pub recipient_count: i32,
    /// (recipient, delivery status); read by its own query.
    #[cfg_attr(feature = "ssr", sqlx(skip))]
    pub recipients: Vec<(String, String)>,
}

/// A CSV import as its page shows it: progress while it runs, then what it did.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct Import {
    pub id: i64,
    pub list_id: i64,
    pub list_name: String,
    pub file_name: String,
    pub status: crate::domain::ImportStatus,
    pub rows_read: i64,
    pub created_subscribers: i64,
    pub added_members: i64,
    pub error_count: i64,
    /// The first rows refused (at most `db::imports::ERRORS_KEPT`).
    #[cfg_attr(feature = "ssr", sqlx(json))]
    pub errors: Vec<RowError>,
    pub message: Option<String>,
    /// In the org's time zone.
    pub started: String,
}

/// A row of an imported file that was refused, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowError {
    /// The row's line in the file (the header is line 1).
    pub row: i64,
    pub error: String,
}

/// One subscriber as their page shows them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct SubscriberProfile {
    pub id: i64,
    pub email: String,
    pub name: String,
    /// The sending SaaS's own id for them, when it gave one.
    pub external_id: Option<String>,
    pub status: crate::domain::SubscriberStatus,
    /// When their personal data was erased, in the org's time zone.
    pub erased: Option<String>,
    pub created: String,
    /// Why the address is suppressed, when it is; with the suppression's source and date.
    pub suppression: Option<crate::domain::SuppressionReason>,
    pub suppression_source: Option<String>,
    pub suppressed_at: Option<String>,
    /// The lists they are on.
    pub list_ids: Vec<i64>,
    /// How they opted in (`dashboard`, `import`, `api`, `signup`; none before this was kept),
    /// from where and when (the org's time zone), and when and from where they confirmed.
    pub optin_source: Option<String>,
    pub optin_ip: Option<String>,
    pub optin_at: Option<String>,
    pub confirmed_ip: Option<String>,
    pub confirmed_at: Option<String>,
}

/// One event the SaaS reported about a subscriber, as their timeline shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct TimelineEvent {
    pub id: i64,
    pub name: String,
    /// The properties as compact JSON (`{}` when none).
    pub properties: String,
    /// When it happened, in the org's time zone.
    pub at: String,
}

/// A campaign that reached (or tried to reach) a subscriber, and how.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct Reached {
    pub campaign_id: i64,
    pub campaign: String,
    /// The delivery's state, or the send's when it never became a delivery (`sends.status`).
    pub status: String,
    pub detail: Option<String>,
    /// In the org's time zone.
    pub at: String,
}

/// One of a subscriber's ways through an automation, as their page shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct Enrolled {
    pub automation_id: i64,
    pub automation: String,
    /// "active", "completed", "exited (goal)", …
    pub state: String,
    /// The next step (or where they left).
    pub step: i32,
    /// In the org's time zone.
    pub enrolled: String,
    /// Its mails by state: "2 delivered, 1 queued".
    pub mails: String,
}

/// A campaign in the recycle bin.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct Binned {
    pub id: i64,
    pub name: String,
    pub status: crate::domain::CampaignStatus,
    /// `YYYY-MM-DD HH:MI`, org time zone.
    pub deleted: String,
    /// When the leader purges it, same format.
    pub purged_after: String,
}

/// An API token as Settings lists it (the token itself is shown once, at creation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiToken {
    pub id: i64,
    pub name: String,
    pub scopes: Vec<crate::domain::ApiScope>,
    pub created: String,
    /// The user who created it (`None` once that user is gone).
    pub created_by: Option<String>,
    pub last_used: Option<String>,
    pub revoked: bool,
}

/// A webhook endpoint as Settings lists it (its secret is shown once, at creation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct WebhookEndpoint {
    pub id: String,
    pub source: crate::domain::EventSource,
    pub created: String,
    pub revoked: bool,
    /// SES through SNS: the URL to open to confirm the topic's subscription (the server
    /// fetches nothing itself).
    pub subscribe_url: Option<String>,
}

/// An endpoint the org's events are sent to, as Settings › Event webhooks lists it (its secret
/// is shown once, at creation or rotation).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventEndpoint {
    pub id: i64,
    pub url: String,
    pub event_types: Vec<crate::domain::WebhookEventType>,
    pub enabled: bool,
    /// Requests in flight to it at most, across every replica.
    pub max_in_flight: i32,
    /// Why Mailroom disabled it (`None` when an owner did, or it is enabled).
    pub disabled_reason: Option<String>,
    /// Every attempt since then has failed (`YYYY-MM-DD HH:MI`, org time zone).
    pub failing_since: Option<String>,
    /// The previous secret still signs until then (a rotation's overlap).
    pub rotating_until: Option<String>,
    pub created: String,
    pub pending: i64,
    pub delivered: i64,
    pub failed: i64,
}

/// A campaign's opens, as its page counts them (unreliable: clients block images or fetch them
/// all on arrival).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct Opens {
    /// People's fetches of the pixel.
    pub opens: i64,
    /// Distinct people who opened.
    pub people: i64,
    /// Fetches by machines (scanners, prefetchers, a fetch within seconds of delivery).
    pub machines: i64,
}

/// One link of a campaign, as its page counts the clicks on it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct LinkClicks {
    pub url: String,
    /// People's clicks (scanners' apart).
    pub clicks: i64,
    /// Distinct people who clicked.
    pub people: i64,
    /// Clicks by link scanners and prefetchers.
    pub scanners: i64,
}

/// One attempt to deliver an event to an endpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct EventAttempt {
    /// The `webhook-id`, the same on every attempt of one event.
    pub message_id: String,
    pub event_type: crate::domain::WebhookEventType,
    /// Where the event stands now.
    pub status: crate::domain::WebhookStatus,
    pub attempt: i32,
    pub at: String,
    pub http_status: Option<i32>,
    pub latency_ms: i32,
    pub error: Option<String>,
    /// The start of the receiver's answer.
    pub response: Option<String>,
}

/// One event a relay reported, as the relay events list shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct FeedbackEventRow {
    pub source: crate::domain::EventSource,
    pub kind: crate::domain::EventKind,
    pub recipient: String,
    /// `None`: unmatched (no delivery of the org was found for it).
    pub job_id: Option<String>,
    pub matched_by: crate::domain::MatchedBy,
    pub effect: crate::domain::EventEffect,
    pub status: String,
    pub diagnostic: String,
    pub received: String,
}
