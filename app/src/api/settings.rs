//! Settings: the organisation's sender identity, its approval policy (four eyes, unless the
//! owner allows self-approval) and how long it keeps the SaaS's events. Everyone reads them;
//! only an owner changes them.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use crate::db::audit;
use crate::error::AppError;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SettingsData {
    pub from_name: String,
    pub from_address: String,
    /// Empty when replies go to the From address.
    pub reply_to: String,
    pub timezone: String,
    /// An admin may approve a campaign they wrote or last edited (marked in the audit log).
    pub allow_self_approval: bool,
    /// How many days events are kept (by when they happened).
    pub event_retention_days: i32,
    /// Automation mail waits through these local hours (`22-07`); empty: none.
    pub quiet_hours: String,
    /// The signed-in user is an owner: may change settings and manage users.
    pub can_manage: bool,
}

/// The longest From name accepted (characters).
pub const MAX_FROM_NAME: usize = 200;

#[server(endpoint = "settings")]
pub async fn settings_view() -> Result<SettingsData, AppError> {
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    let s = crate::db::settings::sender(&mut conn, me.org_id).await?;
    let allow_self_approval =
        crate::db::settings::allows_self_approval(&mut conn, me.org_id).await?;
    let event_retention_days =
        crate::db::events::retention_days(&mut conn, crate::domain::OrgId(me.org_id)).await?;
    let quiet_hours = crate::db::settings::quiet_hours(&mut conn, me.org_id)
        .await?
        .unwrap_or_default();
    Ok(SettingsData {
        allow_self_approval,
        event_retention_days,
        quiet_hours,
        from_name: s.from_name,
        from_address: s.from_address,
        reply_to: s.reply_to.unwrap_or_default(),
        timezone: s.timezone,
        can_manage: me.role.manages_org(),
    })
}

/// Saves the sender identity (owner only). Each field is validated and a refusal names it;
/// an empty Reply-To means replies go to the From address.
#[server(endpoint = "save_sender")]
pub async fn save_sender(
    from_name: String,
    from_address: String,
    reply_to: String,
) -> Result<String, AppError> {
    use crate::db::settings;
    use crate::domain::EmailAddress;
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let from_name = from_name.trim();
    if from_name.is_empty() {
        return Err(AppError::Invalid(
            "From name: enter the name recipients see.".into(),
        ));
    }
    if from_name.chars().count() > MAX_FROM_NAME {
        return Err(AppError::Invalid(format!(
            "From name: use at most {MAX_FROM_NAME} characters."
        )));
    }
    if from_name.chars().any(crate::domain::text::hidden_control) {
        return Err(AppError::Invalid(
            crate::domain::text::hidden_control_message("From name"),
        ));
    }
    let from_address = EmailAddress::parse(&from_address)
        .map_err(|e| AppError::Invalid(format!("From address: {e}.")))?;
    let reply_to = match reply_to.trim() {
        "" => None,
        r => {
            Some(EmailAddress::parse(r).map_err(|e| AppError::Invalid(format!("Reply-To: {e}.")))?)
        }
    };
    let mut tx = pool.begin().await?;
    let old = settings::save_sender(
        &mut tx,
        me.org_id,
        from_name,
        from_address.as_str(),
        reply_to.as_ref().map(EmailAddress::as_str),
    )
    .await?;
    audit::org_setting(
        &mut tx,
        &me,
        crate::domain::AuditAction::SettingsSender,
        serde_json::json!({
            "from_name": old.from_name, "from_address": old.from_address, "reply_to": old.reply_to,
        }),
        serde_json::json!({
            "from_name": from_name, "from_address": from_address.as_str(),
            "reply_to": reply_to.as_ref().map(EmailAddress::as_str),
        }),
    )
    .await?;
    tx.commit().await?;
    Ok("Sender identity saved.".into())
}

/// Turns four-eyes approval off or back on for the org (owner only). Off by default; each
/// self-approval is marked on the campaign and in the audit log.
#[server(endpoint = "save_approval_policy")]
pub async fn save_approval_policy(
    #[server(default)] allow_self_approval: Option<String>,
) -> Result<String, AppError> {
    use crate::db::settings;
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    // A checkbox: present ("on") when checked, absent when not.
    let allow = allow_self_approval.is_some_and(|v| !v.is_empty() && v != "false");
    let mut tx = pool.begin().await?;
    let before = settings::set_self_approval(&mut tx, me.org_id, allow).await?;
    audit::setting_changed(
        &mut tx,
        &me,
        crate::domain::AuditAction::SettingsApproval,
        "allow_self_approval",
        before,
        allow,
    )
    .await?;
    tx.commit().await?;
    Ok(if allow {
        "Admins may now approve their own campaigns; each such approval is marked.".into()
    } else {
        "Four eyes: a campaign is approved by an admin who neither wrote nor last edited it.".into()
    })
}

/// How many days the org keeps the events its SaaS posts (owner only); older ones are deleted
/// by the leader's retention job on its next pass.
#[server(endpoint = "save_event_retention")]
pub async fn save_event_retention(event_retention_days: String) -> Result<String, AppError> {
    use crate::db::settings;
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let days = crate::domain::event::retention_days("Keep events", &event_retention_days)?;
    let mut tx = pool.begin().await?;
    let before = settings::set_event_retention_days(&mut tx, me.org_id, days).await?;
    audit::setting_changed(
        &mut tx,
        &me,
        crate::domain::AuditAction::SettingsEventRetention,
        "event_retention_days",
        before,
        days,
    )
    .await?;
    tx.commit().await?;
    Ok(format!(
        "Events are kept for {days} days after they happened; older ones are deleted within the hour."
    ))
}

/// The org's quiet hours for automation mail (owner only): `22-07`, or empty for none.
#[server(endpoint = "save_quiet_hours")]
pub async fn save_quiet_hours(quiet_hours: String) -> Result<String, AppError> {
    use crate::db::settings;
    use crate::domain::automation::QuietHours;
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let hours = QuietHours::parse("Quiet hours", &quiet_hours)?;
    let mut tx = pool.begin().await?;
    let before = settings::set_quiet_hours(&mut tx, me.org_id, hours).await?;
    audit::setting_changed(
        &mut tx,
        &me,
        crate::domain::AuditAction::SettingsQuietHours,
        "quiet_hours",
        before,
        hours.map(|h| h.to_string()),
    )
    .await?;
    tx.commit().await?;
    Ok(match hours {
        Some(h) => format!(
            "Automation mail that comes due from {:02}:00 to {:02}:00 (the organisation's time) waits until {:02}:00.",
            h.start, h.end, h.end
        ),
        None => "Automation mail goes out at any hour.".into(),
    })
}
