use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecentAction {
    pub action: String,
    pub object_type: String,
    pub actor: Option<String>,
    pub at: String,
}

/// What the Overview page shows for the signed-in user's organisation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
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
    pub recent: Vec<RecentAction>,
}

#[server(endpoint = "overview")]
pub async fn get_overview() -> Result<Overview, AppError> {
    let figures = super::figures::figures();
    let (me, pool) = super::signed_in().await?;
    figures
        .overview
        .get(me.org_id, async {
            Ok(crate::db::overview::for_org(&pool, me.org_id).await?)
        })
        .await
}
