//! The Digests page's server functions: the schedule, admins' opt-ins, the history with each
//! recipient's delivery, a preview, and the forced resend. Each is scoped to the signed-in
//! user's organisation.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use crate::db::{audit, digest};
use crate::error::AppError;

/// How many digests the history shows.
pub const HISTORY_ROWS: i64 = 30;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DigestAdmin {
    pub user_id: i64,
    pub name: String,
    pub email: String,
    pub role: crate::domain::Role,
    pub weekly_digest: bool,
    /// The signed-in user may change this admin's opt-in.
    pub can_toggle: bool,
}

pub use crate::model::HistoryEntry;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DigestsData {
    pub weekday: i16,
    pub hour: i16,
    pub timezone: String,
    /// Owners and admins edit the schedule and resend.
    pub can_act: bool,
    pub me: i64,
    pub admins: Vec<DigestAdmin>,
    pub history: Vec<HistoryEntry>,
    pub this_week: String,
    pub this_week_at: String,
    /// `scheduled` or `skipped` once this week's slot was claimed; `None` before.
    pub this_week_claimed: Option<crate::domain::DigestKind>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Preview {
    pub subject: String,
    pub html: String,
    pub text: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResendConfirmation {
    /// Issued for this dialog and signed for this admin (`resend_key`); its resend's week key
    /// is `manual-<unix seconds>-<nonce>`.
    pub key: String,
    pub this_week: String,
    pub this_week_at: String,
    /// This week's scheduled digest has not gone out yet (it will, at its time).
    pub scheduled_pending: bool,
    /// This week's scheduled digest was skipped: its window passed while no replica ran.
    pub scheduled_skipped: bool,
    /// Opted-in admins who would receive it.
    pub recipients: usize,
}

/// Everything the Digests page shows.
#[server(endpoint = "digests")]
pub async fn digests_view() -> Result<DigestsData, AppError> {
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    let schedule = digest::admin::schedule(&mut conn, me.org_id).await?;
    let week = digest::this_week(&mut conn, me.org_id)
        .await?
        .ok_or(AppError::NotFound)?;
    let admins = digest::admin::admins(&mut conn, me.org_id)
        .await?
        .into_iter()
        .map(|a| DigestAdmin {
            can_toggle: me.role.may_set_digest_opt_in(me.user_id, a.id),
            user_id: a.id,
            name: a.name,
            email: a.email,
            role: a.role,
            weekly_digest: a.weekly_digest,
        })
        .collect();
    let rows = digest::admin::history(&mut conn, me.org_id, HISTORY_ROWS).await?;
    let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
    let recipients = digest::admin::recipients(&mut conn, me.org_id, &ids).await?;
    let history = rows
        .into_iter()
        .map(|mut r| {
            r.recipients = recipients
                .iter()
                .filter(|x| x.digest_send_id == r.id)
                .map(|x| (x.recipient.clone(), x.status.clone()))
                .collect();
            r
        })
        .collect();
    Ok(DigestsData {
        weekday: schedule.weekday,
        hour: schedule.hour,
        timezone: schedule.timezone,
        can_act: me.role.can_act(),
        me: me.user_id,
        admins,
        history,
        this_week: week.week_key,
        this_week_at: week.scheduled_local,
        this_week_claimed: week.claimed_as,
    })
}

/// Turns one admin's weekly digest on or off (their own; an owner anyone's), with an audit row.
#[server(endpoint = "digest_opt_in")]
pub async fn set_digest_opt_in(user_id: i64, enabled: bool) -> Result<String, AppError> {
    let (me, pool) = super::signed_in().await?;
    if !me.role.may_set_digest_opt_in(me.user_id, user_id) {
        return Err(AppError::Forbidden);
    }
    let mut tx = pool.begin().await?;
    let before = digest::admin::set_opt_in(&mut tx, me.org_id, user_id, enabled)
        .await?
        .ok_or(AppError::NotFound)?;
    audit::record(
        &mut tx,
        audit::Entry {
            before: Some(serde_json::json!({ "weekly_digest": before })),
            after: Some(serde_json::json!({ "weekly_digest": enabled })),
            ..audit::Entry::by(
                &me,
                crate::domain::AuditAction::DigestOptIn,
                "user",
                Some(user_id.to_string()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    Ok(if enabled {
        "Weekly digest turned on.".into()
    } else {
        "Weekly digest turned off.".into()
    })
}

/// Saves the org's digest schedule; the time zone must be one of PostgreSQL's.
#[server(endpoint = "digest_schedule")]
pub async fn save_digest_schedule(
    weekday: i16,
    hour: i16,
    timezone: String,
) -> Result<String, AppError> {
    use crate::db::orgs;
    let (me, pool) = super::signed_in_to_act().await?;
    if !(1..=7).contains(&weekday) {
        return Err(AppError::Invalid(format!(
            "The weekday must be 1 (Monday) to 7 (Sunday), not {weekday}."
        )));
    }
    if !(0..=23).contains(&hour) {
        return Err(AppError::Invalid(format!(
            "The hour must be 0 to 23, not {hour}."
        )));
    }
    let timezone =
        crate::domain::input::line_input("Time zone", timezone.trim(), super::TIMEZONE_MAX)?
            .to_owned();
    if !orgs::is_valid_timezone(&pool, &timezone).await? {
        return Err(AppError::Invalid(format!(
            "Time zone: “{}” is not a time zone PostgreSQL knows; use a name such as Europe/Paris or America/New_York.",
            crate::domain::input::excerpt(&timezone)
        )));
    }
    let new = digest::admin::Schedule {
        weekday,
        hour,
        timezone,
    };
    let mut tx = pool.begin().await?;
    let old = digest::admin::save_schedule(&mut tx, me.org_id, &new).await?;
    let json = |s: &digest::admin::Schedule| serde_json::json!({ "weekday": s.weekday, "hour": s.hour, "timezone": s.timezone });
    audit::org_setting(
        &mut tx,
        &me,
        crate::domain::AuditAction::DigestSchedule,
        json(&old),
        json(&new),
    )
    .await?;
    tx.commit().await?;
    Ok("Schedule saved.".into())
}

/// This week's digest as it would be sent.
#[server(endpoint = "digest_preview")]
pub async fn digest_preview() -> Result<Preview, AppError> {
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    let content = crate::digest::preview(&mut conn, me.org_id, crate::digest::Templates::builtin())
        .await
        .map_err(internal)?
        .ok_or(AppError::NotFound)?;
    Ok(Preview {
        subject: content.subject,
        html: content.html,
        text: content.text,
    })
}

/// Opens the resend confirmation: issues its key from the database clock.
#[server(endpoint = "digest_resend_dialog")]
pub async fn resend_dialog() -> Result<ResendConfirmation, AppError> {
    let (me, pool) = super::signed_in_to_act().await?;
    let signing = crate::signing::Purpose::DigestResend.key(&pool).await?;
    let mut conn = pool.acquire().await?;
    let issued = digest::issue_manual_key(&mut conn).await?;
    let key = crate::resend_key::issue(&signing, me.org_id, me.user_id, issued);
    let week = digest::this_week(&mut conn, me.org_id)
        .await?
        .ok_or(AppError::NotFound)?;
    let recipients = digest::admin::admins(&mut conn, me.org_id)
        .await?
        .iter()
        .filter(|a| a.weekly_digest)
        .count();
    Ok(ResendConfirmation {
        key,
        scheduled_pending: week.claimed_as.is_none(),
        scheduled_skipped: week.claimed_as == Some(crate::domain::DigestKind::Skipped),
        this_week: week.week_key,
        this_week_at: week.scheduled_local,
        recipients,
    })
}

/// Sends the digest now under the dialog's key (a second submission of the same dialog sends
/// nothing more), then returns to the Digests page. `only_me` is a checkbox: present when ticked.
#[server(endpoint = "digest_resend")]
pub async fn resend_digest(key: String, only_me: Option<String>) -> Result<String, AppError> {
    use crate::digest::{resend, Resent, Templates};
    let (me, pool) = super::signed_in_to_act().await?;
    let signing = crate::signing::Purpose::DigestResend.key(&pool).await?;
    let key = crate::resend_key::verify(&signing, me.org_id, me.user_id, key.trim()).ok_or_else(
        || {
            AppError::Invalid(
                "This confirmation was not issued to you by Mailroom: open “Resend now” again."
                    .into(),
            )
        },
    )?;
    let outcome = resend(
        &pool,
        me.org_id,
        me.user_id,
        key,
        only_me.is_some(),
        None,
        Templates::builtin(),
    )
    .await
    .map_err(internal)?;
    let again = |why: &str| format!("{why} Open “Resend now” again.");
    let message = match outcome {
        Resent::Sent { recipients, .. } => format!("Digest sent to {recipients} recipient(s)."),
        Resent::AlreadySent { .. } => "This digest was already sent from this dialog.".into(),
        Resent::TakenByAnother => {
            return Err(AppError::Conflict(again(
                "This confirmation was already used with the other “only me” choice.",
            )))
        }
        Resent::Expired => {
            return Err(AppError::Expired(again(
                "This confirmation has expired (they last 15 minutes).",
            )))
        }
        Resent::Future => {
            return Err(AppError::Invalid(again(
                "This confirmation is dated in the future: the database clock went back.",
            )))
        }
    };
    leptos_axum::redirect("/digests");
    Ok(message)
}

#[cfg(feature = "ssr")]
fn internal(e: crate::digest::BuildError) -> AppError {
    match e {
        crate::digest::BuildError::Db(e) => e.into(),
        other => {
            tracing::error!(error = %other, "building a digest failed");
            AppError::Internal
        }
    }
}
