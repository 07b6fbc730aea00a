use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CampaignSummary {
    pub id: i64,
    pub name: String,
    pub status: String,
    pub content_version: i32,
    pub author: String,
    pub updated: String,
    pub total: i64,
    pub done: i64,
}

/// The signed-in organisation's campaigns, all or those in `status`.
#[server(endpoint = "campaigns")]
pub async fn campaigns(
    #[server(default)] status: String,
) -> Result<Vec<CampaignSummary>, AppError> {
    let status = match status.as_str() {
        "" => None,
        s => Some(
            s.parse::<crate::domain::CampaignStatus>()
                .map_err(|_| AppError::Invalid(format!("{s:?} is not a campaign status.")))?,
        ),
    };
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    let rows = crate::db::campaigns::list(&mut conn, me.org_id, status.map(|s| s.as_str())).await?;
    Ok(rows
        .into_iter()
        .map(|r| CampaignSummary {
            id: r.id,
            name: r.name,
            status: r.status,
            content_version: r.content_version,
            author: r.author,
            updated: r.updated,
            total: r.total,
            done: r.done,
        })
        .collect())
}

/// A campaign page: what it is and where its sending stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CampaignWithProgress {
    pub id: i64,
    pub name: String,
    pub subject: String,
    pub progress: crate::domain::progress::Progress,
}

/// One of the signed-in organisation's campaigns; another org's is `NotFound`.
#[server(endpoint = "campaign_detail")]
pub async fn campaign_detail(id: i64) -> Result<CampaignWithProgress, AppError> {
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    let s = crate::db::campaign_progress::snapshot(&mut conn, me.org_id, id)
        .await?
        .ok_or(AppError::NotFound)?;
    Ok(CampaignWithProgress {
        id: s.id,
        progress: s.progress(),
        name: s.name,
        subject: s.subject,
    })
}
