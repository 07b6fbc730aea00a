//! The Audience page's lists: with member counts; created, renamed and deleted by admins
//! (audited); imports into a list, with their progress and per-row errors.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use crate::db::audit;
use crate::error::AppError;
pub use crate::model::Import;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ListRow {
    pub id: i64,
    pub name: String,
    pub members: i64,
    pub created: String,
    /// The public sign-up page (double opt-in).
    pub signup_url: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ListsView {
    pub lists: Vec<ListRow>,
    pub can_act: bool,
}

#[server(endpoint = "lists")]
pub async fn lists() -> Result<ListsView, AppError> {
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    let public_url = super::api_config().public_url;
    let lists = crate::db::lists::all(&mut conn, me.org_id)
        .await?
        .into_iter()
        .map(|l| ListRow {
            signup_url: format!("{}/s/{}", public_url.trim_end_matches('/'), l.signup_key),
            id: l.id,
            name: l.name,
            members: l.members,
            created: l.created,
        })
        .collect();
    Ok(ListsView {
        lists,
        can_act: me.role.can_act(),
    })
}

#[server(endpoint = "create_list")]
pub async fn create_list(name: String) -> Result<String, AppError> {
    use crate::db::lists;
    let (me, pool) = super::signed_in_to_act().await?;
    let name = crate::domain::audience::list_name(&name).map_err(AppError::Invalid)?;
    let mut tx = pool.begin().await?;
    let id = lists::create(&mut tx, me.org_id, &name)
        .await?
        .ok_or_else(|| AppError::Conflict(format!("There is a list named {name:?} already.")))?;
    audit(
        &mut tx,
        &me,
        crate::domain::AuditAction::ListCreate,
        id,
        None,
        Some(serde_json::json!({ "name": name })),
    )
    .await?;
    tx.commit().await?;
    Ok(format!("List {name:?} created."))
}

#[server(endpoint = "rename_list")]
pub async fn rename_list(id: i64, name: String) -> Result<String, AppError> {
    use crate::db::lists::{self, Renamed};
    let (me, pool) = super::signed_in_to_act().await?;
    let name = crate::domain::audience::list_name(&name).map_err(AppError::Invalid)?;
    let mut tx = pool.begin().await?;
    let before = match lists::rename(&mut tx, me.org_id, id, &name).await? {
        Renamed::Done { before } => before,
        Renamed::NotFound => return Err(AppError::NotFound),
        Renamed::Taken => {
            return Err(AppError::Conflict(format!(
                "There is a list named {name:?} already."
            )))
        }
    };
    audit(
        &mut tx,
        &me,
        crate::domain::AuditAction::ListRename,
        id,
        Some(serde_json::json!({ "name": before })),
        Some(serde_json::json!({ "name": name })),
    )
    .await?;
    tx.commit().await?;
    Ok(format!("Renamed to {name:?}."))
}

#[server(endpoint = "delete_list")]
pub async fn delete_list(id: i64) -> Result<String, AppError> {
    use crate::db::lists::{self, Deleted};
    let (me, pool) = super::signed_in_to_act().await?;
    let mut tx = pool.begin().await?;
    let (name, members) = match lists::delete(&mut tx, me.org_id, id).await? {
        Deleted::Done { name, members } => (name, members),
        Deleted::NotFound => return Err(AppError::NotFound),
        Deleted::InUse(campaigns) => {
            return Err(AppError::Conflict(format!(
            "Campaigns that have not finished send to this list ({}): take it out of them first.",
            campaigns.join(", ")
        )))
        }
    };
    audit(
        &mut tx,
        &me,
        crate::domain::AuditAction::ListDelete,
        id,
        Some(serde_json::json!({ "name": name, "members": members })),
        None,
    )
    .await?;
    tx.commit().await?;
    Ok(format!(
        "List {name:?} deleted; its {members} members are still subscribers."
    ))
}

/// One import, as its page shows it (refreshed every second while it runs).
#[server(endpoint = "import_status")]
pub async fn import_status(id: i64) -> Result<Import, AppError> {
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    crate::db::imports::get(&mut conn, me.org_id, id)
        .await?
        .ok_or(AppError::NotFound)
}

/// The audit row of a list change.
#[cfg(feature = "ssr")]
async fn audit(
    conn: &mut sqlx::PgConnection,
    me: &super::CurrentUser,
    action: crate::domain::AuditAction,
    id: i64,
    before: Option<serde_json::Value>,
    after: Option<serde_json::Value>,
) -> Result<(), AppError> {
    audit::record(
        conn,
        audit::Entry {
            before,
            after,
            ..audit::Entry::by(me, action, "list", Some(id.to_string()))
        },
    )
    .await?;
    Ok(())
}
