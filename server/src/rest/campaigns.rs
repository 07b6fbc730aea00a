//! `/api/v1/campaigns`: the organisation's campaigns with their status and sending progress,
//! read only (campaigns are written, approved and sent from the dashboard).

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use app::db::campaign::{self, ApiCampaign};
use app::domain::{ApiScope, CampaignStatus};

use super::{Id, Problem, QueryOf, RestState, Token};

pub fn routes() -> OpenApiRouter<RestState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(one))
}

/// How far a campaign's sending has come: every recipient is counted in exactly one figure.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Progress {
    /// Recipients chosen when sending started (null before).
    pub total: Option<i64>,
    /// Not yet in a final state.
    pub queued: i64,
    pub delivered: i64,
    pub failed: i64,
    /// The relay may or may not have taken it: never sent again automatically.
    pub unknown: i64,
    pub suppressed: i64,
    pub cancelled: i64,
}

/// A campaign and where its sending stands.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Campaign {
    pub id: i64,
    pub name: String,
    /// `draft`, `submitted`, `approved`, `sending`, `paused`, `sent` or `cancelled`.
    #[schema(value_type = String)]
    pub status: CampaignStatus,
    pub content_version: i32,
    /// Why it was paused, when it is.
    pub pause_reason: Option<String>,
    pub progress: Progress,
    /// RFC 3339, UTC.
    pub created_at: String,
    pub scheduled_for: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
}

impl From<ApiCampaign> for Campaign {
    fn from(c: ApiCampaign) -> Self {
        Campaign {
            id: c.id,
            name: c.name,
            status: c.status,
            content_version: c.content_version,
            pause_reason: c.pause_reason,
            progress: Progress {
                total: c.recipients_total,
                queued: c.queued,
                delivered: c.delivered,
                failed: c.failed,
                unknown: c.unknown,
                suppressed: c.suppressed,
                cancelled: c.cancelled,
            },
            created_at: c.created_at,
            scheduled_for: c.scheduled_for,
            started_at: c.started_at,
            finished_at: c.finished_at,
        }
    }
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Start after this campaign id (the `next_after` of the previous page).
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// Rows per page, 1 to 1000 (100 when left out).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
    /// Only campaigns in this status.
    pub status: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct CampaignPage {
    pub data: Vec<Campaign>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next_after: Option<i64>,
}

/// The organisation's campaigns in id order, a page at a time.
#[utoipa::path(
    get,
    path = "/campaigns",
    tag = "campaigns",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of campaigns.", body = CampaignPage),
        (status = 400, description = "A query parameter that does not parse.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A query parameter out of range.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["campaigns:read"]))
)]
async fn list(
    token: Token,
    State(pool): State<PgPool>,
    QueryOf(q): QueryOf<ListQuery>,
) -> Result<Json<CampaignPage>, Problem> {
    token.require(ApiScope::CampaignsRead)?;
    let limit = super::page_size(q.limit, q.after)?;
    let status = match q.status.as_deref() {
        Some(s) => Some(
            s.parse::<CampaignStatus>()
                .map_err(|e| Problem::field("status", format!("status: {e}.")))?,
        ),
        None => None,
    };
    let mut conn = pool.acquire().await?;
    let page = campaign::api_page(
        &mut conn,
        token.org_id(),
        q.after.unwrap_or(0),
        None,
        status,
        limit,
    )
    .await?;
    Ok(Json(CampaignPage {
        data: page.rows.into_iter().map(Campaign::from).collect(),
        next_after: page.next,
    }))
}

/// One campaign and its progress.
#[utoipa::path(
    get,
    path = "/campaigns/{id}",
    tag = "campaigns",
    params(("id" = i64, Path, description = "The campaign's id.")),
    responses(
        (status = 200, description = "The campaign.", body = Campaign),
        (status = 404, description = "No such campaign in this organisation.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["campaigns:read"]))
)]
async fn one(
    token: Token,
    State(pool): State<PgPool>,
    Id(id): Id<i64>,
) -> Result<Json<Campaign>, Problem> {
    token.require(ApiScope::CampaignsRead)?;
    let mut conn = pool.acquire().await?;
    let page = campaign::api_page(&mut conn, token.org_id(), 0, Some(id), None, 1).await?;
    let c = page
        .rows
        .into_iter()
        .next()
        .ok_or_else(|| Problem::not_found("campaign"))?;
    Ok(Json(c.into()))
}
