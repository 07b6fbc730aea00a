//! Settings: the organisation's sender identity. Everyone reads it; only an owner changes it.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::AppError;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SettingsData {
    pub from_name: String,
    pub from_address: String,
    /// Empty when replies go to the From address.
    pub reply_to: String,
    pub timezone: String,
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
    Ok(SettingsData {
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
    use crate::db::{audit, settings};
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
    if from_name.chars().any(char::is_control) {
        return Err(AppError::Invalid(
            "From name: line breaks and control characters are not allowed.".into(),
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
    audit::record(
        &mut tx,
        audit::Entry {
            org_id: me.org_id,
            actor_id: Some(me.user_id),
            action: "settings.sender",
            object_type: "org",
            object_id: Some(me.org_id.to_string()),
            before: Some(serde_json::json!({
                "from_name": old.from_name, "from_address": old.from_address, "reply_to": old.reply_to,
            })),
            after: Some(serde_json::json!({
                "from_name": from_name, "from_address": from_address.as_str(),
                "reply_to": reply_to.as_ref().map(EmailAddress::as_str),
            })),
        },
    )
    .await?;
    tx.commit().await?;
    Ok("Sender identity saved.".into())
}
