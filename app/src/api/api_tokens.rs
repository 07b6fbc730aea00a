//! Settings › API tokens: what the SaaS's own code calls `/api/v1` with. Everyone reads the
//! list; only an owner creates or revokes, each audited. A token is shown once, when created:
//! the database keeps only its SHA-256.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use crate::db::{api_tokens, audit};
use crate::error::AppError;
use crate::model::ApiToken;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ApiTokensData {
    pub tokens: Vec<ApiToken>,
    /// The signed-in user is an owner.
    pub can_manage: bool,
}

/// A new token, shown once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CreatedToken {
    pub id: i64,
    pub name: String,
    pub token: String,
}

/// What every token starts with, so a leaked one is recognisable (secret scanners, logs).
pub const TOKEN_PREFIX: &str = "mrk_";

#[server(endpoint = "api_tokens")]
pub async fn api_tokens() -> Result<ApiTokensData, AppError> {
    let (me, pool) = super::signed_in().await?;
    let mut conn = pool.acquire().await?;
    Ok(ApiTokensData {
        tokens: api_tokens::list(&mut conn, me.org_id).await?,
        can_manage: me.role.manages_org(),
    })
}

/// Creates a token named `name` with `scopes` (owner only, audited); answers it once.
#[server(endpoint = "create_api_token")]
pub async fn create_api_token(
    name: String,
    #[server(default)] scopes: Vec<String>,
) -> Result<CreatedToken, AppError> {
    use crate::domain::text::{hidden_control, hidden_control_message};
    use crate::domain::ApiScope;
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let name = name.trim();
    if name.is_empty() || name.chars().count() > 100 {
        return Err(AppError::Invalid(
            "Name: say what the token is for, in 1 to 100 characters.".into(),
        ));
    }
    if name.chars().any(hidden_control) {
        return Err(AppError::Invalid(hidden_control_message("Name")));
    }
    let scopes =
        ApiScope::parse_list(&scopes).map_err(|e| AppError::Invalid(format!("Scopes: {e}")))?;
    let token = format!("{TOKEN_PREFIX}{}", crate::auth::new_session_token());
    let mut tx = pool.begin().await?;
    let id = api_tokens::create(
        &mut tx,
        me.org_id,
        me.user_id,
        name,
        &crate::auth::hash_token(&token),
        &scopes,
    )
    .await?;
    audit::record(
        &mut tx,
        audit::Entry {
            after: Some(serde_json::json!({ "name": name, "scopes": scopes })),
            ..audit::Entry::by(
                &me,
                crate::domain::AuditAction::ApiTokenCreate,
                "api_token",
                Some(id.to_string()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    Ok(CreatedToken {
        id,
        name: name.to_owned(),
        token,
    })
}

/// Revokes one of the org's tokens (owner only, audited): its next request is refused.
#[server(endpoint = "revoke_api_token")]
pub async fn revoke_api_token(id: i64) -> Result<String, AppError> {
    let (me, pool) = super::signed_in().await?;
    if !me.role.manages_org() {
        return Err(AppError::Forbidden);
    }
    let mut tx = pool.begin().await?;
    let name = api_tokens::revoke(&mut tx, me.org_id, id)
        .await?
        .ok_or(AppError::NotFound)?;
    audit::record(
        &mut tx,
        audit::Entry {
            before: Some(serde_json::json!({ "name": name })),
            ..audit::Entry::by(
                &me,
                crate::domain::AuditAction::ApiTokenRevoke,
                "api_token",
                Some(id.to_string()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    Ok(format!("The token “{name}” is revoked."))
}
