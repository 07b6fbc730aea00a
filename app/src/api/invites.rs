//! The public set-password page (`/invite/<token>`): no session, the link's token is the
//! credential. Used for invitations and for resets; a link works once and expires.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use crate::db::{audit, user};
use crate::error::AppError;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InviteLink {
    pub purpose: crate::domain::LinkPurpose,
    pub email: String,
    pub name: String,
    pub org_name: String,
    /// When the link stops working, in the org's time zone.
    pub expires: String,
}

/// The shortest password accepted (characters), as for `mailroom user add`.
pub const MIN_PASSWORD: usize = 10;

/// A password a person chose (at least [`MIN_PASSWORD`], at most 1,000 characters), hashed.
/// Argon2 is deliberately slow: off the async workers.
#[cfg(feature = "ssr")]
pub(super) async fn new_password_hash(password: String) -> Result<String, AppError> {
    let length = password.chars().count();
    if length < MIN_PASSWORD {
        return Err(AppError::Invalid(format!(
            "Password: use at least {MIN_PASSWORD} characters."
        )));
    }
    if length > 1000 {
        return Err(AppError::Invalid(
            "Password: use at most 1,000 characters.".into(),
        ));
    }
    tokio::task::spawn_blocking(move || crate::auth::hash_password(&password))
        .await
        .map_err(|_| AppError::Internal)?
        .map_err(|e| {
            tracing::error!(error = %e, "cannot hash a password");
            AppError::Internal
        })
}

#[cfg(feature = "ssr")]
const DEAD_LINK: &str = "This link has expired or was already used. Ask an owner of your organisation to send you a new one.";

/// What a live link is for; a dead one (used, expired, replaced, unknown) says so.
#[server(endpoint = "invite_info")]
pub async fn invite_info(token: String) -> Result<InviteLink, AppError> {
    let pool = super::pool()?;
    let mut conn = pool.acquire().await?;
    let p = crate::db::password_tokens::peek(&mut conn, &crate::auth::hash_token(&token))
        .await?
        .ok_or_else(|| AppError::Invalid(DEAD_LINK.into()))?;
    Ok(InviteLink {
        purpose: p.purpose,
        email: p.email,
        name: p.name,
        org_name: p.org_name,
        expires: p.expires,
    })
}

/// Sets the password (and, optionally, the name) through a live link, using it up; then signs
/// the user in. Their earlier sessions, if any, end.
#[server(endpoint = "accept_invite")]
pub async fn accept_invite(token: String, name: String, password: String) -> Result<(), AppError> {
    use crate::auth;
    use crate::db::password_tokens;
    let pool = super::pool()?;
    let name = super::users::valid_name(&name)?;
    let hash = new_password_hash(password).await?;
    let mut tx = pool.begin().await?;
    let link = password_tokens::redeem(&mut tx, &auth::hash_token(&token))
        .await?
        .ok_or_else(|| AppError::Invalid(DEAD_LINK.into()))?;
    user::admin::replace_password(&mut tx, link.org_id, link.user_id, &hash).await?;
    if let Some(name) = &name {
        user::admin::set_name(&mut tx, link.org_id, link.user_id, name).await?;
    }
    audit::record(
        &mut tx,
        audit::Entry {
            org_id: link.org_id,
            actor_id: Some(link.user_id),
            api_token_id: None,
            action: if link.purpose == crate::domain::LinkPurpose::Invite {
                crate::domain::AuditAction::UserAcceptInvite
            } else {
                crate::domain::AuditAction::UserSetPassword
            },
            object_type: "user",
            object_id: Some(link.user_id.to_string()),
            before: None,
            after: Some(serde_json::json!({ "link": link.id, "name": name })),
        },
    )
    .await?;
    tx.commit().await?;
    super::auth::start_session(&pool, link.org_id, link.user_id).await
}
