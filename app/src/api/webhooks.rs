//! Settings › Event webhooks: the endpoints the org's events are sent to. Everyone reads them
//! and their attempts; only an owner adds, turns on or off, rotates, deletes, replays or sends a
//! test, each audited. A secret is shown once, when made.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use crate::db::{audit, webhooks_out};
use crate::error::AppError;
use crate::model::{EventAttempt, EventEndpoint};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EndpointsData {
    pub endpoints: Vec<EventEndpoint>,
    /// The latest attempts of each endpoint, in the order of `endpoints`.
    pub attempts: Vec<Vec<EventAttempt>>,
    /// The signed-in user is an owner.
    pub can_manage: bool,
    /// Links in campaign mail are tracked.
    pub click_tracking: bool,
    /// Campaign HTML carries an open-tracking pixel.
    pub open_tracking: bool,
}

/// A secret, shown once (a new endpoint's, or a rotation's).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ShownSecret {
    pub id: i64,
    pub url: String,
    pub secret: String,
}

/// Attempts listed per endpoint.
#[cfg(feature = "ssr")]
const RECENT_ATTEMPTS: i64 = 20;

#[server(endpoint = "event_endpoints")]
pub async fn event_endpoints() -> Result<EndpointsData, AppError> {
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    let endpoints = webhooks_out::list(&mut conn, me.org_id).await?;
    let mut attempts = Vec::with_capacity(endpoints.len());
    for e in &endpoints {
        attempts.push(webhooks_out::attempts(&mut conn, me.org_id, e.id, RECENT_ATTEMPTS).await?);
    }
    Ok(EndpointsData {
        endpoints,
        attempts,
        can_manage: me.role.manages_org(),
        click_tracking: crate::db::settings::click_tracking(&mut conn, me.org_id).await?,
        open_tracking: crate::db::settings::open_tracking(&mut conn, me.org_id).await?,
    })
}

/// Adds an endpoint for `event_types` (owner only, audited); answers its secret once.
#[server(endpoint = "create_event_endpoint")]
pub async fn create_event_endpoint(
    url: String,
    #[server(default)] event_types: Vec<String>,
    #[server(default)] max_in_flight: Option<i32>,
) -> Result<ShownSecret, AppError> {
    use crate::domain::WebhookEventType;
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let url = crate::webhook::check_url(&url).map_err(AppError::Invalid)?;
    let mut types = Vec::new();
    for t in &event_types {
        let t: WebhookEventType = t
            .parse()
            .map_err(|e| AppError::Invalid(format!("Events: {e}")))?;
        if !types.contains(&t) {
            types.push(t);
        }
    }
    if types.is_empty() {
        return Err(AppError::Invalid(
            "Events: choose at least one event to send.".into(),
        ));
    }
    let max_in_flight = crate::domain::webhook::max_in_flight(
        max_in_flight.unwrap_or(crate::domain::webhook::WEBHOOK_MAX_IN_FLIGHT),
    )
    .map_err(AppError::Invalid)?;
    let secret = crate::webhook::new_secret();
    let mut tx = pool.begin().await?;
    let id = webhooks_out::create(
        &mut tx,
        me.org_id,
        Some(me.user_id),
        url.as_str(),
        &types,
        &secret,
        max_in_flight,
    )
    .await?;
    let words: Vec<&str> = types.iter().map(|t| t.as_str()).collect();
    audit::record(
        &mut tx,
        audit::Entry {
            after: Some(serde_json::json!({
                "url": url.as_str(), "events": words, "max_in_flight": max_in_flight
            })),
            ..entry(&me, crate::domain::AuditAction::EndpointCreate, id)
        },
    )
    .await?;
    tx.commit().await?;
    Ok(ShownSecret {
        id,
        url: url.to_string(),
        secret,
    })
}

/// Turns an endpoint on or off (owner only, audited). Turning it on forgets its failing run
/// and sends what waited for it.
#[server(endpoint = "set_event_endpoint_enabled")]
pub async fn set_event_endpoint_enabled(id: i64, enabled: bool) -> Result<String, AppError> {
    use crate::domain::AuditAction;
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let mut tx = pool.begin().await?;
    let url = webhooks_out::set_enabled(&mut tx, me.org_id, id, enabled)
        .await?
        .ok_or(AppError::NotFound)?;
    let action = if enabled {
        AuditAction::EndpointEnable
    } else {
        AuditAction::EndpointDisable
    };
    audit::record(&mut tx, entry(&me, action, id)).await?;
    tx.commit().await?;
    Ok(if enabled {
        format!("{url} is on: what waited for it is sent now.")
    } else {
        format!("{url} is off: its events wait until it is turned on again.")
    })
}

/// A new secret for an endpoint (owner only, audited), shown once; the old one keeps signing
/// beside it for a day.
#[server(endpoint = "rotate_event_endpoint")]
pub async fn rotate_event_endpoint(id: i64) -> Result<ShownSecret, AppError> {
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let secret = crate::webhook::new_secret();
    let mut tx = pool.begin().await?;
    let url = webhooks_out::rotate(
        &mut tx,
        me.org_id,
        id,
        &secret,
        crate::domain::webhook::WEBHOOK_ROTATION_OVERLAP,
    )
    .await?
    .ok_or(AppError::NotFound)?;
    audit::record(
        &mut tx,
        entry(&me, crate::domain::AuditAction::EndpointRotate, id),
    )
    .await?;
    tx.commit().await?;
    Ok(ShownSecret { id, url, secret })
}

/// Deletes an endpoint with its queued events and attempts (owner only, audited).
#[server(endpoint = "delete_event_endpoint")]
pub async fn delete_event_endpoint(id: i64) -> Result<String, AppError> {
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let mut tx = pool.begin().await?;
    let url = webhooks_out::delete(&mut tx, me.org_id, id)
        .await?
        .ok_or(AppError::NotFound)?;
    audit::record(
        &mut tx,
        audit::Entry {
            before: Some(serde_json::json!({ "url": url })),
            ..entry(&me, crate::domain::AuditAction::EndpointDelete, id)
        },
    )
    .await?;
    tx.commit().await?;
    Ok(format!("{url} is deleted."))
}

/// Queues a `webhook.test` event for an endpoint (owner only, audited).
#[server(endpoint = "test_event_endpoint")]
pub async fn test_event_endpoint(id: i64) -> Result<String, AppError> {
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let mut tx = pool.begin().await?;
    let message = webhooks_out::send_test(&mut tx, me.org_id, id)
        .await?
        .ok_or(AppError::NotFound)?;
    audit::record(
        &mut tx,
        audit::Entry {
            after: Some(serde_json::json!({ "webhook_id": message })),
            ..entry(&me, crate::domain::AuditAction::EndpointTest, id)
        },
    )
    .await?;
    tx.commit().await?;
    Ok(format!("A test event ({message}) is on its way."))
}

/// Sends one event again under its `webhook-id` (owner only, audited).
#[server(endpoint = "replay_event")]
pub async fn replay_event(message_id: String) -> Result<String, AppError> {
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    if message_id.len() > 100 {
        return Err(AppError::NotFound);
    }
    let mut tx = pool.begin().await?;
    let endpoint = match webhooks_out::replay(&mut tx, me.org_id, &message_id).await? {
        webhooks_out::Replayed::Queued(endpoint) => endpoint,
        webhooks_out::Replayed::NotFound => return Err(AppError::NotFound),
        webhooks_out::Replayed::Pending => {
            return Err(AppError::Conflict(format!(
                "{message_id} has not been delivered or given up on yet: it is already on its way."
            )))
        }
    };
    audit::record(
        &mut tx,
        audit::Entry {
            after: Some(serde_json::json!({ "webhook_id": message_id })),
            ..entry(&me, crate::domain::AuditAction::EndpointReplay, endpoint)
        },
    )
    .await?;
    tx.commit().await?;
    Ok(format!("{message_id} is sent again."))
}

/// Turns click tracking on or off for the org's campaign mail (owner only, audited). Mail
/// already sent keeps the links it was sent with.
#[server(endpoint = "save_click_tracking")]
pub async fn save_click_tracking(enabled: bool) -> Result<String, AppError> {
    switch_tracking(Tracking::Clicks, enabled).await?;
    Ok(if enabled {
        "Click tracking is on: links in campaign mail sent from now on are counted.".into()
    } else {
        "Click tracking is off: links in campaign mail sent from now on go straight to their target."
            .into()
    })
}

/// Turns open tracking (a pixel in campaign HTML) on or off (owner only, audited).
#[server(endpoint = "save_open_tracking")]
pub async fn save_open_tracking(enabled: bool) -> Result<String, AppError> {
    switch_tracking(Tracking::Opens, enabled).await?;
    Ok(if enabled {
        "Open tracking is on: campaign mail sent from now on carries a pixel.".into()
    } else {
        "Open tracking is off: campaign mail sent from now on carries no pixel.".into()
    })
}

#[cfg(feature = "ssr")]
enum Tracking {
    Clicks,
    Opens,
}

/// One of the two tracking switches, swapped and audited in one transaction.
#[cfg(feature = "ssr")]
async fn switch_tracking(which: Tracking, enabled: bool) -> Result<(), AppError> {
    use crate::db::settings;
    use crate::domain::AuditAction;
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let mut tx = pool.begin().await?;
    let (before, action, field) = match which {
        Tracking::Clicks => (
            settings::set_click_tracking(&mut tx, me.org_id, enabled).await?,
            AuditAction::SettingsClickTracking,
            "click_tracking",
        ),
        Tracking::Opens => (
            settings::set_open_tracking(&mut tx, me.org_id, enabled).await?,
            AuditAction::SettingsOpenTracking,
            "open_tracking",
        ),
    };
    audit::setting_changed(&mut tx, &me, action, field, before, enabled).await?;
    tx.commit().await?;
    Ok(())
}

#[cfg(feature = "ssr")]
fn entry(
    me: &crate::model::CurrentUser,
    action: crate::domain::AuditAction,
    id: i64,
) -> audit::Entry<'static> {
    audit::Entry::by(me, action, "webhook_endpoint", Some(id.to_string()))
}
