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
    pub kind: String,
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
