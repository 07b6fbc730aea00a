//! The Audience page's subscribers: a keyset-paginated list with search by address, status and
//! list; one subscriber with their lists and history; add, edit, remove, and erase personal
//! data. Scoped to the signed-in user's org; admins act, viewers read; every change audited.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use crate::db::audit;
use crate::error::AppError;

/// Rows per page of the list.
pub const PAGE_SIZE: i64 = 50;

pub use crate::model::{Reached, SubscriberProfile, SubscriberRow};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ListOption {
    pub id: i64,
    pub name: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubscriberPage {
    pub rows: Vec<SubscriberRow>,
    /// The `before` of the next page, when there is one.
    pub next: Option<i64>,
    /// The org's lists, for the filter and the add form.
    pub lists: Vec<ListOption>,
    pub can_act: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SubscriberDetail {
    #[serde(flatten)]
    pub subscriber: SubscriberProfile,
    /// Every list of the org, checked where they are a member.
    pub lists: Vec<(ListOption, bool)>,
    pub history: Vec<Reached>,
    /// Their latest events, newest first.
    pub events: Vec<crate::model::TimelineEvent>,
    /// Their automations, newest enrolment first.
    pub automations: Vec<crate::model::Enrolled>,
    pub can_act: bool,
}

/// How many events a subscriber's timeline shows.
pub const EVENTS_SHOWN: i64 = 100;

/// How many campaigns a subscriber's history shows.
pub const HISTORY_SHOWN: i64 = 100;

#[server(endpoint = "subscribers")]
pub async fn subscribers(
    q: Option<String>,
    status: Option<String>,
    list: Option<String>,
    before: Option<String>,
) -> Result<SubscriberPage, AppError> {
    use crate::db::{
        lists,
        subscribers::{self, Filter},
    };
    use crate::domain::SubscriberStatus;
    let (me, pool) = super::signed_in().await?;
    let search = super::filter("Search", q)?.map(|s| s.to_lowercase());
    let status = super::filter("Status", status)?
        .map(|s| s.parse::<SubscriberStatus>())
        .transpose()
        .map_err(AppError::Invalid)?;
    let number = |v: Option<String>, what: &str| {
        super::filter(what, v)?
            .map(|s| s.parse::<i64>())
            .transpose()
            .map_err(|_| AppError::Invalid(format!("The {what} is not a number.")))
    };
    let list_id = number(list, "list")?;
    let before = number(before, "page")?;
    let mut conn = pool.acquire().await?;
    let filter = Filter {
        search: search.as_deref(),
        status: status.map(|s| s.as_str()),
        list_id,
        before,
    };
    let crate::db::Page { rows, next } =
        subscribers::page(&mut conn, me.org_id, &filter, PAGE_SIZE).await?;
    let lists = lists::all(&mut conn, me.org_id)
        .await?
        .into_iter()
        .map(|l| ListOption {
            id: l.id,
            name: l.name,
        })
        .collect();
    Ok(SubscriberPage {
        rows,
        next,
        lists,
        can_act: me.role.can_act(),
    })
}

#[server(endpoint = "subscriber")]
pub async fn subscriber(id: i64) -> Result<SubscriberDetail, AppError> {
    use crate::db::{lists, subscribers};
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    let d = subscribers::detail(&mut conn, me.org_id, id)
        .await?
        .ok_or(AppError::NotFound)?;
    let lists = lists::all(&mut conn, me.org_id)
        .await?
        .into_iter()
        .map(|l| {
            let member = d.list_ids.contains(&l.id);
            (
                ListOption {
                    id: l.id,
                    name: l.name,
                },
                member,
            )
        })
        .collect();
    let history = subscribers::history(&mut conn, me.org_id, id, HISTORY_SHOWN).await?;
    let events = crate::db::events::timeline(
        &mut conn,
        me.org(),
        crate::domain::SubscriberId(id),
        EVENTS_SHOWN,
    )
    .await?;
    let automations = crate::db::automation::of_subscriber(
        &mut conn,
        me.org(),
        crate::domain::SubscriberId(id),
        EVENTS_SHOWN,
    )
    .await?;
    Ok(SubscriberDetail {
        subscriber: d,
        lists,
        history,
        events,
        automations,
        can_act: me.role.can_act(),
    })
}

/// Adds a subscriber (confirmed) to the chosen lists; the browser goes on to their page.
#[server(endpoint = "add_subscriber")]
pub async fn add_subscriber(
    email: String,
    #[server(default)] name: String,
    #[server(default)] lists: Vec<i64>,
) -> Result<i64, AppError> {
    use crate::db::subscribers;
    use crate::domain::{audience::person_name, EmailAddress};
    let (me, pool) = super::signed_in_to_act().await?;
    let email = EmailAddress::parse(&email)
        .map_err(|e| AppError::Invalid(super::sentence(&e.to_string())))?;
    let name = person_name(&name).map_err(AppError::Invalid)?;
    let mut tx = pool.begin().await?;
    let id = subscribers::add(&mut tx, me.org_id, &email, &name)
        .await?
        .ok_or_else(|| {
            AppError::Conflict(format!("{} is a subscriber already.", email.as_str()))
        })?;
    subscribers::set_lists(&mut tx, me.org_id, id, &lists).await?;
    audit::record(
        &mut tx,
        audit::Entry {
            before: None,
            after: Some(
                serde_json::json!({ "email": email.as_str(), "name": name, "lists": lists }),
            ),
            ..audit::Entry::by(
                &me,
                crate::domain::AuditAction::SubscriberAdd,
                "subscriber",
                Some(id.to_string()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    leptos_axum::redirect(&format!("/audience/subscribers/{id}"));
    Ok(id)
}

#[server(endpoint = "save_subscriber")]
pub async fn save_subscriber(
    id: i64,
    #[server(default)] name: String,
    status: String,
    #[server(default)] lists: Vec<i64>,
) -> Result<String, AppError> {
    use crate::db::subscribers;
    use crate::domain::{audience::person_name, SubscriberStatus};
    let (me, pool) = super::signed_in_to_act().await?;
    let name = person_name(&name).map_err(AppError::Invalid)?;
    let status: SubscriberStatus = status.parse().map_err(AppError::Invalid)?;
    let mut tx = pool.begin().await?;
    let before = subscribers::detail(&mut tx, me.org_id, id)
        .await?
        .ok_or(AppError::NotFound)?;
    if before.erased.is_some() {
        return Err(AppError::Conflict(
            "This subscriber's personal data was erased: there is nothing left to edit.".into(),
        ));
    }
    subscribers::update(&mut tx, me.org_id, id, &name, status.as_str(), &lists).await?;
    audit::record(
        &mut tx,
        audit::Entry {
            before: Some(serde_json::json!({
                "name": before.name, "status": before.status, "lists": before.list_ids,
            })),
            after: Some(
                serde_json::json!({ "name": name, "status": status.as_str(), "lists": lists }),
            ),
            ..audit::Entry::by(
                &me,
                crate::domain::AuditAction::SubscriberEdit,
                "subscriber",
                Some(id.to_string()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    Ok("Saved.".into())
}

/// Deletes a subscriber nobody has mailed yet; one with a history must be erased instead.
#[server(endpoint = "remove_subscriber")]
pub async fn remove_subscriber(id: i64) -> Result<String, AppError> {
    use crate::db::subscribers::{self, Removal};
    let (me, pool) = super::signed_in_to_act().await?;
    let mut tx = pool.begin().await?;
    let before = subscribers::detail(&mut tx, me.org_id, id)
        .await?
        .ok_or(AppError::NotFound)?;
    match subscribers::remove(&mut tx, me.org_id, id).await? {
        Removal::Removed => {}
        Removal::NotFound => return Err(AppError::NotFound),
        Removal::HasHistory => {
            return Err(AppError::Conflict(
                "Campaigns have been sent to this subscriber, and their history keeps them: erase their personal data instead.".into(),
            ))
        }
    }
    audit::record(
        &mut tx,
        audit::Entry {
            before: Some(serde_json::json!({ "email": before.email, "name": before.name })),
            after: None,
            ..audit::Entry::by(
                &me,
                crate::domain::AuditAction::SubscriberRemove,
                "subscriber",
                Some(id.to_string()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    leptos_axum::redirect("/audience");
    Ok(format!("{} was removed.", before.email))
}

/// Erases a subscriber's personal data (and that of every other spelling of the same address);
/// the address stays suppressed so it is never mailed again. The audit entry does not repeat
/// the address (and the earlier entries about them are scrubbed). Once committed, the captured
/// copies of the messages to them are removed.
#[server(endpoint = "erase_subscriber")]
pub async fn erase_subscriber(id: i64) -> Result<String, AppError> {
    use crate::erasure::{erase, EraseError};
    let (me, pool) = super::signed_in_to_act().await?;
    let by = audit::Entry::by(
        &me,
        crate::domain::AuditAction::SubscriberErase,
        "subscriber",
        Some(id.to_string()),
    );
    let captured = super::api_config().captured_dir;
    let erasure = match erase(&pool, id, by, captured.as_deref()).await {
        Ok(e) => e,
        Err(EraseError::NotFound) => return Err(AppError::NotFound),
        Err(EraseError::Already) => {
            return Err(AppError::Conflict(
                "This subscriber was erased already.".into(),
            ))
        }
        Err(EraseError::Db(e)) => return Err(e.into()),
    };
    let rows = erasure.subscribers;
    let erased = erasure.email;
    let variants = if rows > 1 {
        format!(" (with {} other spellings of the address)", rows - 1)
    } else {
        String::new()
    };
    Ok(format!(
        "{erased}'s personal data was erased{variants}; the address stays suppressed."
    ))
}
