//! Settings › Relays: where relays post bounces and complaints (webhook endpoints), the
//! soft-bounce rule, and the events they reported. Everyone reads; only an owner changes them,
//! each change audited.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use crate::db::{audit, reports};
use crate::domain::BouncePolicy;
use crate::error::AppError;
use crate::model::{FeedbackEventRow, WebhookEndpoint};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FeedbackSettingsData {
    pub policy: BouncePolicy,
    /// Where VERP envelope senders point (None: the Return-Path or From address is used).
    pub bounce_domain: Option<String>,
    pub endpoints: Vec<WebhookEndpoint>,
    /// The signed-in user is an owner.
    pub can_manage: bool,
}

/// A new endpoint: its path (under the server's public URL) and its secret, shown once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CreatedEndpoint {
    pub path: String,
    /// For Mailgun and SendGrid, `None` (the owner pasted their key); otherwise the generated
    /// secret the relay must be given.
    pub secret: Option<String>,
}

#[server(endpoint = "feedback_settings")]
pub async fn feedback_settings() -> Result<FeedbackSettingsData, AppError> {
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    Ok(FeedbackSettingsData {
        policy: reports::policy(&mut conn, me.org_id).await?,
        bounce_domain: reports::bounce_domain(&mut conn, me.org_id).await?,
        endpoints: reports::endpoints(&mut conn, me.org_id).await?,
        can_manage: me.role.manages_org(),
    })
}

/// Creates a webhook endpoint for `source` (owner only). Mailgun and SendGrid decide their own
/// keys, so the owner pastes them; the other sources get a generated secret, shown once.
#[server(endpoint = "create_webhook_endpoint")]
pub async fn create_webhook_endpoint(
    source: String,
    #[server(default)] signing_key: String,
    #[server(default)] topic_arn: String,
    #[server(default)] certificate: String,
) -> Result<CreatedEndpoint, AppError> {
    use crate::domain::EventSource;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    use base64::Engine;
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let source: EventSource = source
        .parse()
        .map_err(|e: String| AppError::Invalid(format!("Relay: {e}")))?;
    if !source.is_webhook() {
        return Err(AppError::Invalid(format!(
            "Relay: {source} reports are mailed to the bounce domain, not posted to a webhook."
        )));
    }
    let id = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 18]>());
    let (secret, shown) = match source {
        EventSource::Mailgun => {
            let key =
                crate::domain::input::line_input("Mailgun signing key", signing_key.trim(), 200)?;
            if key.len() < 16 || key.len() > 200 || key.chars().any(char::is_whitespace) {
                return Err(AppError::Invalid(
                    "Mailgun signing key: paste the HTTP webhook signing key from Mailgun's dashboard (16 to 200 characters, no spaces)."
                        .into(),
                ));
            }
            (key.to_owned(), None)
        }
        EventSource::Ses => {
            crate::domain::input::line_input("SNS topic ARN", topic_arn.trim(), 256)?;
            let pinned = crate::bounce::ses::Pinned::new(&topic_arn, &certificate)
                .map_err(AppError::Invalid)?;
            (
                serde_json::to_string(&pinned).map_err(|_| AppError::Internal)?,
                None,
            )
        }
        EventSource::SendGrid => {
            let key = signing_key.trim();
            if !crate::bounce::sendgrid::valid_key(key) {
                return Err(AppError::Invalid(
                    "SendGrid verification key: paste the public key of the signed Event Webhook (Mail Settings), in base64."
                        .into(),
                ));
            }
            (key.to_owned(), None)
        }
        EventSource::Generic => {
            let s = format!("whsec_{}", STANDARD.encode(rand::random::<[u8; 24]>()));
            (s.clone(), Some(s))
        }
        EventSource::Postmark => {
            let s = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 24]>());
            (s.clone(), Some(s))
        }
        EventSource::Dsn | EventSource::Arf => return Err(AppError::Internal),
    };
    let mut tx = pool.begin().await?;
    reports::create_endpoint(&mut tx, me.org_id, &id, source, &secret).await?;
    audit::record(
        &mut tx,
        audit::Entry {
            after: Some(serde_json::json!({ "source": source })),
            ..audit::Entry::by(
                &me,
                crate::domain::AuditAction::WebhookCreate,
                "webhook_endpoint",
                Some(id.clone()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    Ok(CreatedEndpoint {
        path: format!("/hooks/v1/{source}/{id}"),
        secret: shown,
    })
}

/// Revokes one of the org's endpoints (owner only): its relay's next post is a 404.
#[server(endpoint = "revoke_webhook_endpoint")]
pub async fn revoke_webhook_endpoint(id: String) -> Result<String, AppError> {
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    // Ids are 24 characters of base64; anything far longer names none.
    crate::domain::input::line_input("Endpoint", id.trim(), 100)?;
    let mut tx = pool.begin().await?;
    let source = reports::revoke_endpoint(&mut tx, me.org_id, id.trim())
        .await?
        .ok_or(AppError::NotFound)?;
    audit::record(
        &mut tx,
        audit::Entry {
            before: Some(serde_json::json!({ "source": source })),
            ..audit::Entry::by(
                &me,
                crate::domain::AuditAction::WebhookRevoke,
                "webhook_endpoint",
                Some(id.trim().into()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    Ok(format!("The {source} endpoint is revoked."))
}

/// Saves the org's rules (owner only): suppress after `soft_threshold` soft bounces within
/// `soft_days` days; a sending campaign pauses itself at `pause_bounce_pct` % hard bounces or
/// `pause_complaint_pct` % complaints once it delivered `pause_min_delivered`.
#[server(endpoint = "save_bounce_policy")]
pub async fn save_bounce_policy(
    soft_threshold: i32,
    soft_days: i32,
    pause_bounce_pct: f64,
    pause_complaint_pct: f64,
    pause_min_delivered: i32,
) -> Result<String, AppError> {
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let p = BouncePolicy::new(
        soft_threshold,
        soft_days,
        pause_bounce_pct,
        pause_complaint_pct,
        pause_min_delivered,
    )
    .map_err(AppError::Invalid)?;
    let mut tx = pool.begin().await?;
    let before = reports::save_policy(&mut tx, me.org_id, p).await?;
    audit::org_setting(
        &mut tx,
        &me,
        crate::domain::AuditAction::SettingsBouncePolicy,
        serde_json::to_value(before).ok(),
        serde_json::to_value(p).ok(),
    )
    .await?;
    tx.commit().await?;
    Ok(format!(
        "Soft bounces suppress after {} within {} days; a campaign pauses itself at {} % bounces or {} % complaints once it delivered {}.",
        p.soft_threshold, p.soft_days, p.pause_bounce_pct, p.pause_complaint_pct, p.pause_min_delivered
    ))
}

/// Sets the org's bounce domain (owner only; empty clears it). Mail then goes out with VERP
/// envelope senders at it, so the domain's MX must reach a `--bounce-listen` replica.
#[server(endpoint = "save_bounce_domain")]
pub async fn save_bounce_domain(domain: String) -> Result<String, AppError> {
    use crate::domain::DkimDomain;
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let domain = match crate::domain::input::line_input("Bounce domain", domain.trim(), 253)? {
        "" => None,
        d => Some(
            DkimDomain::parse(d).map_err(|e| AppError::Invalid(format!("Bounce domain: {e}.")))?,
        ),
    };
    let new = domain.as_ref().map(DkimDomain::as_str);
    let mut tx = pool.begin().await?;
    let before = reports::save_bounce_domain(&mut tx, me.org_id, new)
        .await
        .map_err(|e| match e {
            reports::DomainError::Taken => AppError::Conflict(
                "Bounce domain: another organisation uses it already; each org needs its own."
                    .into(),
            ),
            reports::DomainError::Db(e) => e.into(),
        })?;
    audit::setting_changed(
        &mut tx,
        &me,
        crate::domain::AuditAction::SettingsBounceDomain,
        "bounce_domain",
        before,
        new.map(str::to_owned),
    )
    .await?;
    tx.commit().await?;
    Ok(match new {
        Some(d) => format!("Bounces now come back to VERP addresses at {d}."),
        None => "No bounce domain: bounces go to the Return-Path.".into(),
    })
}

/// The org's latest relay events; only the unmatched ones when `unmatched` is set.
#[server(endpoint = "feedback_events")]
pub async fn feedback_events(
    #[server(default)] unmatched: bool,
) -> Result<Vec<FeedbackEventRow>, AppError> {
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    Ok(reports::recent(&mut conn, me.org_id, unmatched).await?)
}
