//! `/api/v1/segments`: saved, versioned filters over the organisation's subscribers (create,
//! read, change, delete), how many they match now, and who (keyset pages). A definition is
//! the same JSON tree the dashboard's builder makes (`domain::segment::Group`); a node at
//! fault is named by its pointer (`#/definition/children/2/name`), and a node naming another
//! organisation's list or campaign is a 404 naming it.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use app::db::segment::{self, DeleteError, Saved, StoreError};
use app::domain::segment::Group;
use app::domain::{ApiScope, OrgId};
use app::segments::SaveError;

use super::{Body, Id, Problem, QueryOf, RestState, Token};

pub fn routes() -> OpenApiRouter<RestState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(one, update, remove))
        .routes(routes!(count))
        .routes(routes!(members))
}

/// A saved segment.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Segment {
    pub id: i64,
    pub name: String,
    /// Bumped by every change of the definition.
    pub version: i32,
    /// The tree of conditions: `{"op": "all"|"any"|"none", "children": [...]}`.
    #[schema(value_type = Object)]
    pub definition: serde_json::Value,
    /// RFC 3339, UTC.
    pub updated_at: String,
}

impl From<Saved> for Segment {
    fn from(s: Saved) -> Self {
        Segment {
            id: s.id,
            name: s.name,
            version: s.version,
            definition: serde_json::to_value(&s.definition.0).unwrap_or_default(),
            updated_at: s.updated_at,
        }
    }
}

/// A segment to save.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SegmentInput {
    /// 1 to 200 characters, unique in the organisation.
    pub name: String,
    /// The tree of conditions (see `Segment.definition`).
    #[schema(value_type = Object)]
    pub definition: serde_json::Value,
    /// On a change: the version it was read at; a segment changed since is a 409.
    pub version: Option<i32>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SegmentList {
    pub data: Vec<Segment>,
}

/// How many subscribers a segment matches now (erased ones never).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SegmentCount {
    pub count: i64,
    /// The version counted.
    pub version: i32,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SegmentMember {
    pub id: i64,
    pub email: String,
    pub name: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MemberPage {
    pub data: Vec<SegmentMember>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next_after: Option<i64>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct MemberQuery {
    /// Start after this subscriber id (the `next_after` of the previous page).
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// Rows per page, 1 to 1000 (100 when left out).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
}

/// The organisation's segments, by name.
#[utoipa::path(
    get,
    path = "/segments",
    tag = "segments",
    responses((status = 200, description = "The segments.", body = SegmentList)),
    security(("token" = ["segments:read"]))
)]
async fn list(token: Token, State(pool): State<PgPool>) -> Result<Json<SegmentList>, Problem> {
    token.require(ApiScope::SegmentsRead)?;
    let mut conn = pool.acquire().await?;
    let rows = segment::list(&mut conn, OrgId(token.org_id())).await?;
    Ok(Json(SegmentList {
        data: rows.into_iter().map(Segment::from).collect(),
    }))
}

/// Saves a new segment.
#[utoipa::path(
    post,
    path = "/segments",
    tag = "segments",
    request_body = SegmentInput,
    responses(
        (status = 201, description = "Saved.", body = Segment),
        (status = 400, description = "The body is not JSON.", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "A node names a list or campaign that is not the organisation's.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Another segment has this name.", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is over 2 MiB.", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not sent as JSON (Content-Type: application/json).", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The name or a node of the definition at fault, named.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["segments:write"]))
)]
async fn create(
    token: Token,
    State(pool): State<PgPool>,
    Body(input): Body<SegmentInput>,
) -> Result<(StatusCode, Json<Segment>), Problem> {
    token.require(ApiScope::SegmentsWrite)?;
    let saved = save(&token, &pool, None, &input).await?;
    Ok((StatusCode::CREATED, Json(saved)))
}

/// One segment.
#[utoipa::path(
    get,
    path = "/segments/{id}",
    tag = "segments",
    params(("id" = i64, Path, description = "The segment's id.")),
    responses(
        (status = 200, description = "The segment.", body = Segment),
        (status = 404, description = "No such segment in this organisation.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["segments:read"]))
)]
async fn one(
    token: Token,
    State(pool): State<PgPool>,
    Id(id): Id<i64>,
) -> Result<Json<Segment>, Problem> {
    token.require(ApiScope::SegmentsRead)?;
    let mut conn = pool.acquire().await?;
    let s = found(&mut conn, OrgId(token.org_id()), id).await?;
    Ok(Json(s.into()))
}

/// Renames a segment or changes its definition (a new version).
#[utoipa::path(
    put,
    path = "/segments/{id}",
    tag = "segments",
    params(("id" = i64, Path, description = "The segment's id.")),
    request_body = SegmentInput,
    responses(
        (status = 200, description = "Saved.", body = Segment),
        (status = 400, description = "The body is not JSON.", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such segment, or a node names a list or campaign that is not the organisation's.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Another segment has this name, or the segment changed since `version`.", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is over 2 MiB.", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not sent as JSON (Content-Type: application/json).", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The name or a node of the definition at fault, named.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["segments:write"]))
)]
async fn update(
    token: Token,
    State(pool): State<PgPool>,
    Id(id): Id<i64>,
    Body(input): Body<SegmentInput>,
) -> Result<Json<Segment>, Problem> {
    token.require(ApiScope::SegmentsWrite)?;
    Ok(Json(save(&token, &pool, Some(id), &input).await?))
}

/// Deletes a segment no campaign still to be sent uses.
#[utoipa::path(
    delete,
    path = "/segments/{id}",
    tag = "segments",
    params(("id" = i64, Path, description = "The segment's id.")),
    responses(
        (status = 204, description = "Deleted."),
        (status = 404, description = "No such segment in this organisation.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Campaigns still to be sent use it (named).", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["segments:write"]))
)]
async fn remove(
    token: Token,
    State(pool): State<PgPool>,
    Id(id): Id<i64>,
) -> Result<StatusCode, Problem> {
    token.require(ApiScope::SegmentsWrite)?;
    let mut tx = pool.begin().await?;
    match segment::delete(&mut tx, OrgId(token.org_id()), id).await {
        Ok(()) => {}
        Err(DeleteError::NotFound) => return Err(Problem::not_found("segment")),
        Err(DeleteError::InUse(names)) => {
            return Err(Problem::new(
                StatusCode::CONFLICT,
                format!(
                    "Campaigns still to be sent or live automations use this segment: {}.",
                    names.join(", ")
                ),
            ))
        }
        Err(DeleteError::Db(e)) => return Err(e.into()),
    }
    token
        .audit(
            &mut tx,
            app::domain::AuditAction::SegmentDelete,
            "segment",
            Some(id.to_string()),
            None,
            None,
        )
        .await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// How many of the organisation's subscribers the segment matches now.
#[utoipa::path(
    get,
    path = "/segments/{id}/count",
    tag = "segments",
    params(("id" = i64, Path, description = "The segment's id.")),
    responses(
        (status = 200, description = "The count.", body = SegmentCount),
        (status = 404, description = "No such segment in this organisation.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["segments:read"]))
)]
async fn count(
    token: Token,
    State(pool): State<PgPool>,
    Id(id): Id<i64>,
) -> Result<Json<SegmentCount>, Problem> {
    token.require(ApiScope::SegmentsRead)?;
    let org = OrgId(token.org_id());
    let mut conn = pool.acquire().await?;
    let s = found(&mut conn, org, id).await?;
    let clock = segment::clock(&mut conn, org, None).await?;
    let count = segment::count(&mut conn, org, &s.definition.0, &clock).await?;
    Ok(Json(SegmentCount {
        count,
        version: s.version,
    }))
}

/// The subscribers the segment matches now, a page at a time in id order.
#[utoipa::path(
    get,
    path = "/segments/{id}/members",
    tag = "segments",
    params(("id" = i64, Path, description = "The segment's id."), MemberQuery),
    responses(
        (status = 200, description = "A page of members.", body = MemberPage),
        (status = 400, description = "A query parameter that does not parse.", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such segment in this organisation.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A query parameter out of range.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["segments:read"]))
)]
async fn members(
    token: Token,
    State(pool): State<PgPool>,
    Id(id): Id<i64>,
    QueryOf(q): QueryOf<MemberQuery>,
) -> Result<Json<MemberPage>, Problem> {
    token.require(ApiScope::SegmentsRead)?;
    let limit = super::page_size(q.limit, q.after)?;
    let org = OrgId(token.org_id());
    let mut conn = pool.acquire().await?;
    let s = found(&mut conn, org, id).await?;
    let clock = segment::clock(&mut conn, org, None).await?;
    let page = segment::members(
        &mut conn,
        org,
        &s.definition.0,
        &clock,
        q.after.unwrap_or(0),
        limit,
    )
    .await?;
    Ok(Json(MemberPage {
        data: page
            .rows
            .into_iter()
            .map(|m| SegmentMember {
                id: m.id,
                email: m.email,
                name: m.name,
            })
            .collect(),
        next_after: page.next,
    }))
}

/// The org's segment `id`, or the 404 every route answers for another org's or a deleted one.
async fn found(conn: &mut sqlx::PgConnection, org: OrgId, id: i64) -> Result<Saved, Problem> {
    segment::get(conn, org, id)
        .await?
        .ok_or_else(|| Problem::not_found("segment"))
}

/// Checks and saves, audited under the token; the problems name what was wrong.
async fn save(
    token: &Token,
    pool: &PgPool,
    id: Option<i64>,
    input: &SegmentInput,
) -> Result<Segment, Problem> {
    let definition: Group = serde_json::from_value(input.definition.clone()).map_err(|e| {
        Problem::field(
            "#/definition",
            format!("definition: not a segment tree: {e}."),
        )
    })?;
    let org = OrgId(token.org_id());
    let mut tx = pool.begin().await?;
    let (id, version) =
        app::segments::save(&mut tx, org, id, input.version, &input.name, &definition)
            .await
            .map_err(|e| match e {
                SaveError::Name(why) => Problem::field("#/name", format!("name: {why}")),
                SaveError::Tree(t) => {
                    Problem::field(&t.pointer("#/definition"), format!("definition.{t}."))
                }
                SaveError::Unknown(path) => Problem {
                    errors: vec![super::FieldError {
                        pointer: app::domain::segment::TreeError {
                            path: path.clone(),
                            fault: String::new(),
                        }
                        .pointer("#/definition"),
                        detail: format!(
                            "definition.{path}: no such list or campaign in this organisation."
                        ),
                    }],
                    ..Problem::new(
                        StatusCode::NOT_FOUND,
                        format!(
                            "definition.{path}: no such list or campaign in this organisation."
                        ),
                    )
                },
                SaveError::Store(StoreError::NotFound) => Problem::not_found("segment"),
                SaveError::Store(StoreError::Taken) => Problem::field(
                    "#/name",
                    "name: another segment of this organisation has it.",
                )
                .with_status(StatusCode::CONFLICT),
                SaveError::Store(StoreError::Moved(v)) => Problem::field(
                    "#/version",
                    format!("version: the segment changed meanwhile; it is at version {v} now."),
                )
                .with_status(StatusCode::CONFLICT),
                SaveError::Store(StoreError::Db(e)) => e.into(),
            })?;
    token
        .audit(
            &mut tx,
            app::domain::AuditAction::SegmentSave,
            "segment",
            Some(id.to_string()),
            None,
            Some(serde_json::json!({"name": input.name, "version": version})),
        )
        .await?;
    let saved = segment::get(&mut tx, org, id).await?;
    tx.commit().await?;
    saved
        .map(Segment::from)
        .ok_or_else(|| Problem::internal("a saved segment is not there"))
}
