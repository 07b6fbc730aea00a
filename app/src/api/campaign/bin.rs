//! The campaign recycle bin: delete (draft, sent or cancelled only), restore, and the list of
//! what is in the bin and when the leader purges it. Scoped to the signed-in org, audited.

use leptos::prelude::*;

use crate::error::AppError;

#[cfg(feature = "ssr")]
use crate::db::{audit, campaign};
#[cfg(feature = "ssr")]
use crate::domain::CampaignId;
pub use crate::model::Binned;

#[server(endpoint = "campaign_bin")]
pub async fn campaign_bin() -> Result<Vec<Binned>, AppError> {
    let days = crate::api::api_config().campaign_bin_days;
    let (me, pool) = crate::api::signed_in().await?;
    let mut conn = pool.acquire().await?;
    Ok(campaign::bin::list(&mut conn, me.org_id, days).await?)
}

#[server(endpoint = "delete_campaign")]
pub async fn delete_campaign(id: i64) -> Result<String, AppError> {
    use crate::db::campaign::bin::BinError;
    let (me, pool) = crate::api::signed_in_to_act().await?;
    let mut tx = pool.begin().await?;
    match campaign::bin::delete(&mut tx, me.org(), CampaignId(id)).await {
        Ok(()) => {}
        Err(BinError::NotFound) => return Err(AppError::NotFound),
        Err(BinError::NotDeletable(status)) => {
            return Err(AppError::Conflict(format!(
                "Only a draft, sent or cancelled campaign can be deleted; this one is {status} (cancel it first)."
            )))
        }
        Err(BinError::Db(e)) => return Err(e.into()),
    }
    audited(
        &mut tx,
        me.org_id,
        me.user_id,
        crate::domain::AuditAction::CampaignDelete,
        id,
    )
    .await?;
    tx.commit().await?;
    leptos_axum::redirect("/campaigns/bin");
    Ok("Moved to the recycle bin.".into())
}

#[server(endpoint = "restore_campaign")]
pub async fn restore_campaign(id: i64) -> Result<String, AppError> {
    let (me, pool) = crate::api::signed_in_to_act().await?;
    let mut tx = pool.begin().await?;
    if !campaign::bin::restore(&mut tx, me.org(), CampaignId(id)).await? {
        return Err(AppError::NotFound);
    }
    audited(
        &mut tx,
        me.org_id,
        me.user_id,
        crate::domain::AuditAction::CampaignRestore,
        id,
    )
    .await?;
    tx.commit().await?;
    Ok("Restored.".into())
}

#[cfg(feature = "ssr")]
async fn audited(
    tx: &mut sqlx::PgConnection,
    org_id: i64,
    actor: i64,
    action: crate::domain::AuditAction,
    id: i64,
) -> Result<(), AppError> {
    audit::record(
        tx,
        audit::Entry {
            org_id,
            actor_id: Some(actor),
            api_token_id: None,
            action,
            object_type: "campaign",
            object_id: Some(id.to_string()),
            before: None,
            after: None,
        },
    )
    .await?;
    Ok(())
}
