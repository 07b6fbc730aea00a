/// The campaign recycle bin: delete, restore, and when the leader purges each.
pub mod bin;
/// The campaign editor and its workflow transitions, each an audited compare-and-set.
pub mod edit;
/// Test sends of a campaign's content to a few typed-in addresses.
pub mod test_send;

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

#[cfg(feature = "ssr")]
use crate::db::campaign;
#[cfg(feature = "ssr")]
use crate::domain::CampaignId;
pub use crate::model::CampaignSummary;

/// The signed-in organisation's campaigns, all or those in `status`.
#[server(endpoint = "campaigns")]
pub async fn campaigns(
    #[server(default)] status: String,
) -> Result<Vec<CampaignSummary>, AppError> {
    let status = match status.as_str() {
        "" => None,
        s => Some(s.parse::<crate::domain::CampaignStatus>().map_err(|_| {
            AppError::Invalid(format!(
                "Status: {:?} is not a campaign status.",
                crate::domain::input::excerpt(s)
            ))
        })?),
    };
    let (me, pool) = crate::api::signed_in().await?;
    let mut conn = pool.acquire().await?;
    Ok(campaign::list(&mut conn, me.org_id, status).await?)
}

/// A campaign page: what it is and where its sending stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CampaignWithProgress {
    pub id: i64,
    pub name: String,
    pub subject: String,
    pub progress: crate::domain::progress::Progress,
    /// What relays reported back about its delivered messages (verified reports only).
    pub bounces: crate::domain::BounceCounts,
    /// Why it paused itself, if it ever did (kept after a resume).
    pub pause_reason: Option<String>,
    /// Clicks per tracked link (empty unless the org tracks clicks and someone clicked).
    pub links: Vec<crate::model::LinkClicks>,
    /// Fetches of the open-tracking pixel (all zero unless the org tracks opens).
    pub opens: crate::model::Opens,
}

/// One of the signed-in organisation's campaigns; another org's is `NotFound`.
#[server(endpoint = "campaign_detail")]
pub async fn campaign_detail(id: i64) -> Result<CampaignWithProgress, AppError> {
    let (me, pool) = crate::api::signed_in().await?;
    let mut conn = pool.acquire().await?;
    let s = campaign::live::snapshot(&mut conn, me.org(), CampaignId(id))
        .await?
        .ok_or(AppError::NotFound)?;
    let progress = s.progress();
    // Delivered is the progress reading's, so the relay-reports card and the live panel never
    // show two figures for one thing.
    let bounces = crate::domain::BounceCounts {
        delivered: progress.delivered,
        ..crate::db::reports::campaign_counts(&mut conn, me.org_id, id).await?
    };
    let links = crate::db::clicks::per_link(&mut conn, me.org_id, id).await?;
    let opens = crate::db::clicks::opens(&mut conn, me.org_id, id).await?;
    Ok(CampaignWithProgress {
        links,
        opens,
        id: s.id,
        progress,
        bounces,
        pause_reason: s.pause_reason,
        name: s.name,
        subject: s.subject,
    })
}
