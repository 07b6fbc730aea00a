//! The Audience page's suppression list: search; add one address or many (pasted, one per
//! line or comma-separated); remove with confirmation. A suppression takes effect for campaigns
//! already sending: the delivery worker re-checks it when it claims each message.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use crate::db::audit;
use crate::error::AppError;

pub const PAGE_SIZE: i64 = 50;
/// The most addresses one "add" takes.
pub const MAX_ADDED: usize = 1000;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SuppressionRow {
    pub email: String,
    pub reason: crate::domain::SuppressionReason,
    pub source: String,
    pub created: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SuppressionPage {
    pub rows: Vec<SuppressionRow>,
    pub next: Option<String>,
    pub can_act: bool,
}

#[server(endpoint = "suppressions")]
pub async fn suppressions(
    q: Option<String>,
    after: Option<String>,
) -> Result<SuppressionPage, AppError> {
    let (me, pool) = super::signed_in().await?;
    let search = super::filter("Search", q)?.map(|s| s.to_lowercase());
    let after = super::filter("Page", after)?;
    // `<created_at, UTC>|<email>`, the time written back as the database wrote it.
    let cursor = match &after {
        Some(c) => {
            let (at, email) = c
                .split_once('|')
                .ok_or_else(|| AppError::Invalid("Page: the page link is not valid.".into()))?;
            let at = crate::domain::input::time_input("Page", at, "%Y-%m-%dT%H:%M:%S%.f")?;
            Some((at.format("%Y-%m-%dT%H:%M:%S%.6f").to_string(), email))
        }
        None => None,
    };
    let mut conn = pool.acquire().await?;
    let crate::db::Page { rows, next } = crate::db::suppression_admin::page(
        &mut conn,
        me.org_id,
        search.as_deref(),
        cursor.as_ref().map(|(at, email)| (at.as_str(), *email)),
        PAGE_SIZE,
    )
    .await?;
    Ok(SuppressionPage {
        rows: rows
            .into_iter()
            .map(|r| SuppressionRow {
                email: r.email,
                reason: r.reason,
                source: r.source,
                created: r.created,
            })
            .collect(),
        next,
        can_act: me.role.can_act(),
    })
}

/// Suppresses the addresses given (reason `manual`, source: who added them). An address
/// suppressed already keeps its reason.
#[server(endpoint = "add_suppressions")]
pub async fn add_suppressions(addresses: String) -> Result<String, AppError> {
    use crate::db::audience;
    use crate::domain::EmailAddress;
    let (me, pool) = super::signed_in_to_act().await?;
    let list = EmailAddress::parse_list(&addresses, MAX_ADDED).map_err(AppError::Invalid)?;
    let mut tx = pool.begin().await?;
    let added =
        audience::suppress_many(&mut tx, me.org_id, &list, &format!("added by {}", me.email))
            .await?;
    if !added.is_empty() {
        audit::record(
            &mut tx,
            audit::Entry {
                before: None,
                after: Some(serde_json::json!({ "addresses": added })),
                ..audit::Entry::by(
                    &me,
                    crate::domain::AuditAction::SuppressionAdd,
                    "suppression",
                    None,
                )
            },
        )
        .await?;
    }
    tx.commit().await?;
    Ok(match (added.len(), list.len() - added.len()) {
        (n, 0) => format!("{n} suppressed."),
        (n, k) => format!("{n} suppressed; {k} already were."),
    })
}

#[server(endpoint = "remove_suppression")]
pub async fn remove_suppression(email: String) -> Result<String, AppError> {
    use crate::db::suppression_admin;
    let (me, pool) = super::signed_in_to_act().await?;
    // Not parsed: a stored suppression is removable as it is stored, whatever it holds.
    let lower =
        crate::domain::input::line_input("E-mail address", email.trim(), 254)?.to_lowercase();
    let mut tx = pool.begin().await?;
    let reason = suppression_admin::remove(&mut tx, me.org_id, &lower)
        .await?
        .ok_or(AppError::NotFound)?;
    audit::record(
        &mut tx,
        audit::Entry {
            before: Some(serde_json::json!({ "reason": reason })),
            after: None,
            ..audit::Entry::by(
                &me,
                crate::domain::AuditAction::SuppressionRemove,
                "suppression",
                Some(lower.clone()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    Ok(format!("{lower} may be mailed again."))
}
