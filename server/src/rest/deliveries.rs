//! `/api/v1/deliveries/{job_id}`: one message's state, looked up by its job id (for
//! transactional mail, the id the send request answered with).

use axum::extract::{Path, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use app::db::delivery::admin;
use app::domain::ApiScope;

use super::{Problem, RestState, Token};

pub fn routes() -> OpenApiRouter<RestState> {
    OpenApiRouter::new().routes(routes!(one))
}

/// One message and where it stands.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Delivery {
    pub job_id: String,
    /// `test`, `digest`, `campaign`, `invite`, `transactional`, `confirm` or `notice`.
    pub kind: String,
    pub recipient: String,
    /// `queued`, `sending`, `delivered`, `failed`, `unknown`, `suppressed` or `cancelled`.
    pub status: String,
    /// The SMTP server's last reply, if any.
    pub smtp_reply: Option<String>,
}

/// One delivery of the organisation, by its job id.
#[utoipa::path(
    get,
    path = "/deliveries/{job_id}",
    tag = "deliveries",
    params(("job_id" = String, Path, pattern = "^(campaign|digest|test|invite|tx|confirm|notice):.+$", description = "The delivery's job id, e.g. `campaign:12:345`.")),
    responses(
        (status = 200, description = "The delivery.", body = Delivery),
        (status = 404, description = "No such delivery in this organisation.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["deliveries:read"]))
)]
async fn one(
    token: Token,
    State(pool): State<PgPool>,
    Path(job_id): Path<String>,
) -> Result<Json<Delivery>, Problem> {
    token.require(ApiScope::DeliveriesRead)?;
    // Only a well-formed job id can name a delivery.
    if job_id.parse::<app::domain::JobId>().is_err() {
        return Err(Problem::not_found("delivery"));
    }
    let mut conn = pool.acquire().await?;
    let d = admin::find(&mut conn, token.org_id(), &job_id)
        .await?
        .ok_or_else(|| Problem::not_found("delivery"))?;
    Ok(Json(Delivery {
        job_id: d.job_id,
        kind: d.kind.to_string(),
        recipient: d.recipient,
        status: d.status.to_string(),
        smtp_reply: d.smtp_reply,
    }))
}
