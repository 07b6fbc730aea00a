//! The Audience page's lists: with member counts; created, renamed and deleted by admins
//! (audited); imports into a list, with their progress and per-row errors.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ListRow {
    pub id: i64,
    pub name: String,
    pub members: i64,
    pub created: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ListsView {
    pub lists: Vec<ListRow>,
    pub can_act: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RowError {
    /// The row's line in the file (the header is line 1).
    pub row: i64,
    pub error: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImportView {
    pub id: i64,
    pub list_id: i64,
    pub list_name: String,
    pub file_name: String,
    /// `running`, `done`, `failed`, or `interrupted` (running, but its progress stopped: the
    /// server stopped during it, and it imported nothing).
    pub status: String,
    pub rows_read: i64,
    pub created_subscribers: i64,
    pub added_members: i64,
    pub error_count: i64,
    /// The first errors (at most [`ERRORS_KEPT`]).
    pub errors: Vec<RowError>,
    pub message: Option<String>,
    pub started: String,
}

/// How many per-row errors an import keeps to show.
pub const ERRORS_KEPT: usize = 200;
/// Seconds without progress after which a running import is reported as interrupted.
pub const STALLED_AFTER_SECONDS: f64 = 60.0;

#[server(endpoint = "lists")]
pub async fn lists() -> Result<ListsView, AppError> {
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    let lists = crate::db::lists::all(&mut conn, me.org_id)
        .await?
        .into_iter()
        .map(|l| ListRow {
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
        "list.create",
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
        "list.rename",
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
        "list.delete",
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

#[server(endpoint = "import_status")]
pub async fn import_status(id: i64) -> Result<ImportView, AppError> {
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    let i = crate::db::imports::get(&mut conn, me.org_id, id)
        .await?
        .ok_or(AppError::NotFound)?;
    let errors: Vec<RowError> = i
        .errors
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| {
                    Some(RowError {
                        row: e.get("row")?.as_i64()?,
                        error: e.get("error")?.as_str()?.to_owned(),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let status = if i.status == "running" && i.idle_seconds > STALLED_AFTER_SECONDS {
        "interrupted".to_string()
    } else {
        i.status
    };
    Ok(ImportView {
        id: i.id,
        list_id: i.list_id,
        list_name: i.list_name,
        file_name: i.file_name,
        status,
        rows_read: i.rows_read,
        created_subscribers: i.created_subscribers,
        added_members: i.added_members,
        error_count: i.error_count,
        errors,
        message: i.message,
        started: i.started,
    })
}

/// The audit row of a list change.
#[cfg(feature = "ssr")]
async fn audit(
    conn: &mut sqlx::PgConnection,
    me: &super::CurrentUser,
    action: &str,
    id: i64,
    before: Option<serde_json::Value>,
    after: Option<serde_json::Value>,
) -> Result<(), AppError> {
    crate::db::audit::record(
        conn,
        crate::db::audit::Entry {
            before,
            after,
            ..crate::db::audit::Entry::by(me, action, "list", Some(id.to_string()))
        },
    )
    .await?;
    Ok(())
}
