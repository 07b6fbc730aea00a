//! Settings › Users: everyone sees who belongs to the organisation; an owner invites users,
//! changes roles, disables and enables them, and sends password reset links. Invitations and
//! resets are mail, so they go through the delivery engine (`invite:` jobs).

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use crate::db::{audit, user};
use crate::domain::Role;
use crate::error::AppError;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserEntry {
    pub id: i64,
    pub name: String,
    pub email: String,
    pub role: Role,
    pub disabled: bool,
    /// `invited` or `reset` while the user has no password (their link is out).
    pub awaiting: Option<String>,
    /// When the user was added, in the org's time zone.
    pub created: String,
    pub is_me: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UsersData {
    pub users: Vec<UserEntry>,
    /// The signed-in user is an owner.
    pub can_manage: bool,
}

/// The longest user name accepted (characters).
pub const MAX_NAME: usize = 200;

#[server(endpoint = "users")]
pub async fn users_view() -> Result<UsersData, AppError> {
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    let users = user::admin::list(&mut conn, me.org_id)
        .await?
        .into_iter()
        .map(|u| UserEntry {
            role: u.role,
            is_me: u.id == me.user_id,
            id: u.id,
            name: u.name,
            email: u.email,
            disabled: u.disabled,
            awaiting: u.awaiting,
            created: u.created,
        })
        .collect();
    Ok(UsersData {
        users,
        can_manage: me.role.manages_org(),
    })
}

/// Invites a user by address (owner only): creates them with the chosen role and no usable
/// password, and queues the invitation with its set-password link. An address that already
/// has a login is refused, saying so (a double-submitted form therefore creates one user).
#[server(endpoint = "invite_user")]
pub async fn invite_user(email: String, name: String, role: String) -> Result<String, AppError> {
    use crate::domain::EmailAddress;
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let email = EmailAddress::parse(&email)
        .map_err(|e| AppError::Invalid(format!("E-mail address: {e}.")))?;
    let role: Role = role
        .parse()
        .map_err(|e| AppError::Invalid(format!("Role: {e}.")))?;
    let name = valid_name(&name)?.unwrap_or_else(|| {
        // Until they choose one on the set-password page.
        email
            .as_str()
            .split('@')
            .next()
            .unwrap_or_default()
            .to_owned()
    });
    let key = crate::signing::Purpose::PasswordToken.key(&pool).await?;
    let mut tx = pool.begin().await?;
    let created = user::create(
        &mut tx,
        user::NewUser {
            org_id: me.org_id,
            email: &email,
            name: &name,
            role,
            password_hash: crate::auth::NO_PASSWORD_INVITED,
        },
    )
    .await;
    let user_id = match created {
        Ok(id) => id,
        Err(user::CreateUserError::EmailTaken(_)) => {
            drop(tx);
            let mut conn = pool.acquire().await?;
            let ours = user::admin::find_by_email(&mut conn, me.org_id, email.lower()).await?;
            return Err(AppError::Conflict(match ours {
                Some(u) if u.awaiting.as_deref() == Some("invited") => format!(
                    "{} was already invited (on {}); nothing was sent again. To send a new link, use “Send new link” in the list.",
                    u.email, u.created
                ),
                Some(u) => format!("{} is already a user of this organisation.", u.email),
                // Logins are unique across organisations; say no more about whose it is.
                None => format!("{email} already has a Mailroom login, so it cannot be invited."),
            }));
        }
        Err(user::CreateUserError::Db(e)) => return Err(e.into()),
    };
    send_link(
        &mut tx,
        &key,
        me.org_id,
        me.user_id,
        user_id,
        &email,
        crate::domain::LinkPurpose::Invite,
    )
    .await?;
    audit::record(
        &mut tx,
        audit::Entry {
            before: None,
            after: Some(serde_json::json!({ "email": email.as_str(), "name": name, "role": role })),
            ..audit::Entry::by(
                &me,
                crate::domain::AuditAction::UserInvite,
                "user",
                Some(user_id.to_string()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    Ok(format!("Invitation sent to {email}."))
}

/// Changes a user's role (owner only). The last active owner cannot be demoted.
#[server(endpoint = "set_user_role")]
pub async fn set_user_role(user_id: i64, role: String) -> Result<String, AppError> {
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let role: Role = role
        .parse()
        .map_err(|e| AppError::Invalid(format!("Role: {e}.")))?;
    let mut tx = pool.begin().await?;
    let (user, other_owners) = user::admin::lock_with_owners(&mut tx, me.org_id, user_id)
        .await?
        .ok_or(AppError::NotFound)?;
    if user.role == role {
        return Ok(format!("{} is already {role}.", user.name));
    }
    if user.role == Role::Owner && !user.disabled && other_owners == 0 {
        return Err(last_owner(&user.name));
    }
    user::admin::set_role(&mut tx, me.org_id, user_id, role).await?;
    audit::record(
        &mut tx,
        audit::Entry {
            before: Some(serde_json::json!({ "email": user.email, "role": user.role.as_str() })),
            after: Some(serde_json::json!({ "email": user.email, "role": role })),
            ..audit::Entry::by(
                &me,
                crate::domain::AuditAction::UserRole,
                "user",
                Some(user_id.to_string()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    Ok(format!("{} is now {role}.", user.name))
}

/// Disables a user (their sessions end at once and they cannot sign in) or enables them again
/// (owner only). The last active owner cannot be disabled.
#[server(endpoint = "set_user_disabled")]
pub async fn set_user_disabled(user_id: i64, disabled: bool) -> Result<String, AppError> {
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let mut tx = pool.begin().await?;
    let (user, other_owners) = user::admin::lock_with_owners(&mut tx, me.org_id, user_id)
        .await?
        .ok_or(AppError::NotFound)?;
    let done = |u: &str| {
        if disabled {
            format!("{u} is disabled: signed out everywhere, and cannot sign in.")
        } else {
            format!("{u} is enabled again.")
        }
    };
    if user.disabled == disabled {
        return Ok(done(&user.name));
    }
    if disabled && user.role == Role::Owner && other_owners == 0 {
        return Err(last_owner(&user.name));
    }
    user::admin::set_disabled(&mut tx, me.org_id, user_id, disabled).await?;
    audit::record(
        &mut tx,
        audit::Entry {
            before: Some(serde_json::json!({ "email": user.email, "disabled": user.disabled })),
            after: Some(serde_json::json!({ "email": user.email, "disabled": disabled })),
            ..audit::Entry::by(
                &me,
                if disabled {
                    crate::domain::AuditAction::UserDisable
                } else {
                    crate::domain::AuditAction::UserEnable
                },
                "user",
                Some(user_id.to_string()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    Ok(done(&user.name))
}

/// Sends a user a new set-password link (owner only). For a user who never accepted their
/// invitation it is a new invitation; otherwise a reset: the old password stops working at
/// once and every session of theirs ends (an owner resets a password because it is forgotten
/// or may be known to someone else; keeping it valid until the new one is set would leave that
/// door open). Any earlier link stops working.
#[server(endpoint = "reset_password")]
pub async fn reset_password(user_id: i64) -> Result<String, AppError> {
    use crate::domain::EmailAddress;
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let key = crate::signing::Purpose::PasswordToken.key(&pool).await?;
    let mut tx = pool.begin().await?;
    let (user, _) = user::admin::lock_with_owners(&mut tx, me.org_id, user_id)
        .await?
        .ok_or(AppError::NotFound)?;
    if user.disabled {
        return Err(AppError::Conflict(format!(
            "{} is disabled; enable them first.",
            user.name
        )));
    }
    let email = EmailAddress::parse(&user.email).map_err(|e| {
        tracing::error!(user_id, error = %e, "a stored user address does not parse");
        AppError::Internal
    })?;
    let purpose = if user.invited {
        crate::domain::LinkPurpose::Invite
    } else {
        crate::domain::LinkPurpose::Reset
    };
    if !user.invited {
        user::admin::replace_password(&mut tx, me.org_id, user_id, crate::auth::NO_PASSWORD_RESET)
            .await?;
    }
    send_link(
        &mut tx, &key, me.org_id, me.user_id, user_id, &email, purpose,
    )
    .await?;
    audit::record(
        &mut tx,
        audit::Entry {
            before: None,
            after: Some(serde_json::json!({ "email": user.email, "link": purpose })),
            ..audit::Entry::by(
                &me,
                if user.invited {
                    crate::domain::AuditAction::UserReinvite
                } else {
                    crate::domain::AuditAction::UserResetPassword
                },
                "user",
                Some(user_id.to_string()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    Ok(if user.invited {
        format!("A new invitation was sent to {email}; the earlier link no longer works.")
    } else {
        format!(
            "A password reset link was sent to {email}. Their old password no longer works and they were signed out everywhere."
        )
    })
}

/// A user name as typed: trimmed; None when empty.
pub fn valid_name(name: &str) -> Result<Option<String>, AppError> {
    let name = name.trim();
    if name.chars().count() > MAX_NAME {
        return Err(AppError::Invalid(format!(
            "Name: use at most {MAX_NAME} characters."
        )));
    }
    if name.chars().any(crate::domain::text::hidden_control) {
        return Err(AppError::Invalid(
            crate::domain::text::hidden_control_message("Name"),
        ));
    }
    Ok(Some(name.to_owned()).filter(|n| !n.is_empty()))
}

#[cfg(feature = "ssr")]
fn last_owner(name: &str) -> AppError {
    AppError::Conflict(format!(
        "{name} is the organisation's last active owner: make another user owner first."
    ))
}

/// Issues a set-password link for the user (retiring older ones) and queues the message that
/// carries it, in the caller's transaction.
#[cfg(feature = "ssr")]
async fn send_link(
    conn: &mut sqlx::PgConnection,
    key: &[u8],
    org_id: i64,
    actor_id: i64,
    user_id: i64,
    email: &crate::domain::EmailAddress,
    purpose: crate::domain::LinkPurpose,
) -> Result<(), AppError> {
    use crate::db::delivery::{enqueue, NewDelivery};
    use crate::db::password_tokens;
    use crate::domain::{JobId, OrgId, Reference, UserId};
    let token_id = password_tokens::issue(conn, org_id, user_id, purpose, actor_id).await?;
    let job = JobId::Invite {
        org_id,
        user_id,
        token_id,
    };
    let token = crate::password_token::token(key, &job);
    password_tokens::set_hash(conn, org_id, token_id, &crate::auth::hash_token(&token)).await?;
    enqueue(
        conn,
        NewDelivery {
            job: &job,
            org: OrgId(org_id),
            recipient: email,
            reference: Reference::Invite {
                user: UserId(user_id),
            },
        },
    )
    .await?;
    Ok(())
}
