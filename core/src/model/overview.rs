use serde::{Deserialize, Serialize};

/// One line of the recent-activity list.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct RecentAction {
    pub action: String,
    pub object_type: String,
    pub actor: Option<String>,
    pub at: String,
}

/// What the Overview page shows for the signed-in user's organisation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(sqlx::FromRow))]
pub struct Overview {
    pub org_name: String,
    pub timezone: String,
    pub digest_weekday: i16,
    pub digest_hour: i16,
    pub subscribers: i64,
    pub confirmed: i64,
    pub lists: i64,
    pub suppressions: i64,
    pub campaigns_draft: i64,
    pub campaigns_in_review: i64,
    pub campaigns_active: i64,
    pub campaigns_sent: i64,
    pub delivered_7d: i64,
    pub failed_7d: i64,
    pub unknown_open: i64,
    pub queued_now: i64,
    pub last_digest: Option<String>,
    pub workers_alive: i64,
    /// Webhook endpoints Mailroom turned off after a day of failures.
    pub webhooks_turned_off: i64,
    /// Read by its own query.
    #[cfg_attr(feature = "ssr", sqlx(skip))]
    pub recent: Vec<RecentAction>,
}
