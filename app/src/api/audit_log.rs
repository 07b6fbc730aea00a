//! Settings › Audit log: who did what, when, with before and after. Everyone in the org may
//! read it (viewers included); nobody changes it.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use crate::db::{audit, user};
use crate::error::AppError;

/// Entries per page.
pub const PAGE_SIZE: i64 = 50;

pub use crate::model::AuditEntry;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AuditPage {
    pub rows: Vec<AuditEntry>,
    /// The `before` of the next page, when there is one.
    pub next: Option<i64>,
    /// Every action in the org's log, for the filter.
    pub actions: Vec<String>,
    /// (user id, name) of the org's users, for the filter.
    pub users: Vec<(i64, String)>,
    pub timezone: String,
}

/// One page of the org's audit log, newest first; each filter optional (empty = none).
#[server(endpoint = "audit_log")]
pub async fn audit_log_page(
    action: Option<String>,
    actor: Option<String>,
    before: Option<String>,
) -> Result<AuditPage, AppError> {
    use crate::db::settings;
    let (me, pool) = super::signed_in().await?;
    let id = |s: Option<String>, what: &str| {
        super::filter(what, s)?
            .map(|s| {
                s.parse::<i64>().map_err(|_| {
                    AppError::Invalid(format!(
                        "“{}” is not a valid {what}.",
                        crate::domain::input::excerpt(&s)
                    ))
                })
            })
            .transpose()
    };
    let action = super::filter("Action", action)?;
    let actor_id = id(actor, "user")?;
    let before_id = id(before, "page position")?;
    let mut conn = pool.acquire().await?;
    let page = audit::log::list(
        &mut conn,
        me.org_id,
        &audit::log::Filter {
            action: action.as_deref(),
            actor_id,
            before_id,
        },
        PAGE_SIZE,
    )
    .await?;
    let actions = audit::log::actions(&mut conn, me.org_id).await?;
    let users = user::admin::list(&mut conn, me.org_id)
        .await?
        .into_iter()
        .map(|u| (u.id, u.name))
        .collect();
    let timezone = settings::sender(&mut conn, me.org_id).await?.timezone;
    Ok(AuditPage {
        rows: page.rows,
        next: page.next,
        actions,
        users,
        timezone,
    })
}
