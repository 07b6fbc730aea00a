//! `/api/v1/suppressions/{email}`: is the address suppressed, suppress it, lift it. Adding and
//! lifting are audited under the token, like an admin's change in the dashboard.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use app::db::{audience, audit, suppression_admin};
use app::domain::{ApiScope, EmailAddress, SuppressionReason};

use super::{Problem, RestState, Token};

pub fn routes() -> OpenApiRouter<RestState> {
    OpenApiRouter::new().routes(routes!(check, add, lift))
}

/// An address's standing on the suppression list.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Suppression {
    /// The address as compared (lowercase).
    pub email: String,
    pub suppressed: bool,
    /// Why (`unsubscribed`, `hard_bounce`, `soft_bounce`, `complaint`, `manual`, `import`).
    pub reason: Option<String>,
    /// Who or what suppressed it.
    pub source: Option<String>,
    /// Since when (RFC 3339, UTC).
    pub since: Option<String>,
}

fn address(raw: &str) -> Result<EmailAddress, Problem> {
    EmailAddress::parse(raw).map_err(|e| Problem::field("email", format!("email: {e}.")))
}

async fn standing(
    pool: &PgPool,
    org_id: i64,
    email: &EmailAddress,
) -> Result<Suppression, Problem> {
    let mut conn = pool.acquire().await?;
    let row = suppression_admin::one(&mut conn, org_id, email.lower()).await?;
    Ok(Suppression {
        email: email.lower().to_owned(),
        suppressed: row.is_some(),
        reason: row.as_ref().map(|r| r.0.clone()),
        source: row.as_ref().map(|r| r.1.clone()),
        since: row.map(|r| r.2),
    })
}

/// Whether the address is suppressed (campaign mail is never sent to it).
#[utoipa::path(
    get,
    path = "/suppressions/{email}",
    tag = "suppressions",
    params(("email" = String, Path, pattern = "^[^@]+@[^@]+$", description = "The e-mail address.")),
    responses(
        (status = 200, description = "The address's standing.", body = Suppression),
        (status = 422, description = "Not an e-mail address.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["suppressions:read"]))
)]
async fn check(
    token: Token,
    State(pool): State<PgPool>,
    Path(email): Path<String>,
) -> Result<Json<Suppression>, Problem> {
    token.require(ApiScope::SuppressionsRead)?;
    let email = address(&email)?;
    Ok(Json(standing(&pool, token.org_id(), &email).await?))
}

/// Suppresses the address (reason `manual`). An address suppressed already keeps its reason.
#[utoipa::path(
    put,
    path = "/suppressions/{email}",
    tag = "suppressions",
    params(("email" = String, Path, pattern = "^[^@]+@[^@]+$", description = "The e-mail address.")),
    responses(
        (status = 201, description = "Suppressed now.", body = Suppression),
        (status = 200, description = "It was suppressed already.", body = Suppression),
        (status = 422, description = "Not an e-mail address.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["suppressions:write"]))
)]
async fn add(
    token: Token,
    State(pool): State<PgPool>,
    Path(email): Path<String>,
) -> Result<(StatusCode, Json<Suppression>), Problem> {
    token.require(ApiScope::SuppressionsWrite)?;
    let email = address(&email)?;
    let org_id = token.org_id();
    let mut tx = pool.begin().await?;
    let source = format!("API token {}", token.0.token_id);
    let new =
        audience::suppress(&mut tx, org_id, &email, SuppressionReason::Manual, &source).await?;
    if new {
        audit::record(
            &mut tx,
            audit::Entry {
                after: Some(serde_json::json!({ "addresses": [email.lower()] })),
                ..audit::Entry::by_token(
                    org_id,
                    token.0.token_id,
                    app::domain::AuditAction::SuppressionAdd,
                    "suppression",
                    None,
                )
            },
        )
        .await?;
    }
    tx.commit().await?;
    let status = if new {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(standing(&pool, org_id, &email).await?)))
}

/// Lifts the address's suppression: it may be mailed again.
#[utoipa::path(
    delete,
    path = "/suppressions/{email}",
    tag = "suppressions",
    params(("email" = String, Path, pattern = "^[^@]+@[^@]+$", description = "The e-mail address.")),
    responses(
        (status = 204, description = "Lifted."),
        (status = 404, description = "The address is not suppressed.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Not an e-mail address.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["suppressions:write"]))
)]
async fn lift(
    token: Token,
    State(pool): State<PgPool>,
    Path(email): Path<String>,
) -> Result<StatusCode, Problem> {
    token.require(ApiScope::SuppressionsWrite)?;
    let email = address(&email)?;
    let org_id = token.org_id();
    let mut tx = pool.begin().await?;
    let reason = suppression_admin::remove(&mut tx, org_id, email.lower())
        .await?
        .ok_or_else(|| Problem::not_found("suppression"))?;
    audit::record(
        &mut tx,
        audit::Entry {
            before: Some(serde_json::json!({ "reason": reason })),
            ..audit::Entry::by_token(
                org_id,
                token.0.token_id,
                app::domain::AuditAction::SuppressionRemove,
                "suppression",
                Some(email.lower().to_owned()),
            )
        },
    )
    .await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}
