//! `/api/v1/subscribers`: upsert by address (one, or up to [`BULK_MAX`] in one request with an
//! answer per row), read, page through, update, delete, erase; `/api/v1/lists` and list
//! membership. Writes are audited under the token, like an admin's change in the dashboard.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use app::db::subscriber_api::{self, ApiSubscriber, Upsert};
use app::db::subscribers::{self as dashboard, Removal};
use app::domain::audience::person_name;
use app::domain::{ApiScope, EmailAddress, SubscriberStatus};

use super::{Body, FieldError, Id, Problem, QueryOf, RestState, Token};

/// The most rows one bulk request may carry.
pub const BULK_MAX: usize = 10_000;
/// The largest body of a bulk request: [`BULK_MAX`] rows of about 1.6 KB each on average
/// (an address, a name and a realistic attributes object are 300 to 600 bytes), where every
/// other API request takes [`crate::http::MAX_REQUEST_BYTES`].
pub const BULK_MAX_BYTES: usize = 16 * 1024 * 1024;
/// The largest attributes object of one subscriber, as JSON.
const ATTRIBUTES_MAX_BYTES: usize = 16 * 1024;

/// The routes but the bulk upsert, which has a body limit of its own ([`bulk_routes`]).
pub fn routes() -> OpenApiRouter<RestState> {
    OpenApiRouter::new()
        .routes(routes!(list, upsert))
        .routes(routes!(one, update, remove))
        .routes(routes!(erase))
        .routes(routes!(lists))
        .routes(routes!(join, leave))
        .routes(routes!(signup))
}

/// The bulk upsert alone: ten thousand rows with attributes are more than the 2 MiB every
/// other request may send, so the API's router gives it [`BULK_MAX_BYTES`] instead.
pub fn bulk_routes() -> OpenApiRouter<RestState> {
    OpenApiRouter::new().routes(routes!(bulk))
}

/// A subscriber of the organisation.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Subscriber {
    pub id: i64,
    pub email: String,
    pub name: String,
    /// The sending SaaS's own id for them, unique in the organisation, when it gave one.
    pub external_id: Option<String>,
    /// `confirmed`, `unconfirmed` (no campaign reaches them) or `blocklisted`.
    #[schema(value_type = String)]
    pub status: SubscriberStatus,
    /// The caller's own data about them (a JSON object), available to templates.
    #[schema(value_type = Object)]
    pub attributes: serde_json::Value,
    /// The ids of the lists they are on.
    pub list_ids: Vec<i64>,
    /// Their personal data was erased: the address and name are gone.
    pub erased: bool,
    /// RFC 3339, UTC.
    pub created_at: String,
    pub updated_at: String,
}

impl From<ApiSubscriber> for Subscriber {
    fn from(s: ApiSubscriber) -> Self {
        Subscriber {
            id: s.id,
            email: s.email,
            name: s.name,
            external_id: s.external_id,
            status: s.status,
            attributes: s.attributes.0,
            list_ids: s.list_ids,
            erased: s.erased,
            created_at: s.created_at,
            updated_at: s.updated_at,
        }
    }
}

/// A subscriber to create or update, by address. Fields left out keep what an existing
/// subscriber has.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscriberInput {
    pub email: String,
    pub name: Option<String>,
    /// The SaaS's own id for them (1 to 200 characters), unique in the organisation: events
    /// may name them by it.
    pub external_id: Option<String>,
    /// `confirmed`, `unconfirmed` or `blocklisted`.
    #[schema(value_type = Option<String>)]
    pub status: Option<SubscriberStatus>,
    /// Merged into the existing attributes key by key.
    #[schema(value_type = Option<Object>)]
    pub attributes: Option<serde_json::Value>,
    /// Lists to add them to (they stay on the lists they are on).
    #[serde(default)]
    pub list_ids: Vec<i64>,
}

/// What to change of a subscriber; fields left out stay as they are.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubscriberPatch {
    pub name: Option<String>,
    /// The SaaS's own id for them, unique in the organisation.
    pub external_id: Option<String>,
    /// `confirmed`, `unconfirmed` or `blocklisted`.
    #[schema(value_type = Option<String>)]
    pub status: Option<SubscriberStatus>,
    /// Merged into the existing attributes key by key.
    #[schema(value_type = Option<Object>)]
    pub attributes: Option<serde_json::Value>,
    /// When given, exactly the lists they are on afterwards.
    pub list_ids: Option<Vec<i64>>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Start after this subscriber id (the `next_after` of the previous page).
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// Rows per page, 1 to 1000 (100 when left out).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
    /// Only the members of this list.
    #[param(minimum = 1)]
    pub list_id: Option<i64>,
    /// Only this address (compared in lower case).
    pub email: Option<String>,
    /// Only the subscriber with this external id.
    pub external_id: Option<String>,
}

/// A page of subscribers in id order.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SubscriberPage {
    pub data: Vec<Subscriber>,
    /// Pass as `after` for the next page; absent on the last page.
    pub next_after: Option<i64>,
}

/// The org's subscribers, a page at a time (keyset pagination: pages never shift or repeat
/// while subscribers are added).
#[utoipa::path(
    get,
    path = "/subscribers",
    tag = "subscribers",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of subscribers.", body = SubscriberPage),
        (status = 400, description = "A query parameter that does not parse.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A query parameter out of range.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["subscribers:read"]))
)]
async fn list(
    token: Token,
    State(pool): State<PgPool>,
    QueryOf(q): QueryOf<ListQuery>,
) -> Result<Json<SubscriberPage>, Problem> {
    token.require(ApiScope::SubscribersRead)?;
    let limit = super::page_size(q.limit, q.after)?;
    if q.list_id.is_some_and(|l| l < 1) {
        return Err(Problem::field(
            "list_id",
            "list_id: a list id is 1 or more.",
        ));
    }
    let email = match q.email.as_deref() {
        Some(e) => Some(address(e, "email")?.lower().to_owned()),
        None => None,
    };
    let external = match q.external_id.as_deref() {
        Some(x) => Some(
            app::domain::event::external_id("external_id", x)
                .map_err(|e| Problem::field("external_id", format!("{e}.")))?,
        ),
        None => None,
    };
    let mut conn = pool.acquire().await?;
    let page = subscriber_api::page(
        &mut conn,
        token.org_id(),
        subscriber_api::Filter {
            after: q.after.unwrap_or(0),
            list_id: q.list_id,
            email_lower: email.as_deref(),
            external_id: external.as_deref(),
        },
        limit,
    )
    .await?;
    Ok(Json(SubscriberPage {
        data: page.rows.into_iter().map(Subscriber::from).collect(),
        next_after: page.next,
    }))
}

/// Creates a subscriber, or updates the one with this address (same spelling).
#[utoipa::path(
    post,
    path = "/subscribers",
    tag = "subscribers",
    request_body = SubscriberInput,
    responses(
        (status = 201, description = "Created.", body = Subscriber),
        (status = 200, description = "The address was a subscriber already: updated.", body = Subscriber),
        (status = 400, description = "The body is not JSON.", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is over 2 MiB.", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not sent as JSON (Content-Type: application/json).", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field at fault, named.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["subscribers:write"]))
)]
async fn upsert(
    token: Token,
    State(pool): State<PgPool>,
    Body(input): Body<SubscriberInput>,
) -> Result<(StatusCode, Json<Subscriber>), Problem> {
    token.require(ApiScope::SubscribersWrite)?;
    let row = checked(&input).map_err(|e| Problem::field(&e.pointer, e.detail))?;
    let org_id = token.org_id();
    let mut tx = pool.begin().await?;
    lists_are_ours(&mut tx, org_id, &input.list_ids, "#/list_ids").await?;
    let done = subscriber_api::upsert(&mut tx, org_id, &[row.upsert(&input.list_ids)]).await?;
    let Some(done) = done.first().copied() else {
        return Err(Problem::internal("an upsert of one row answered none"));
    };
    let action = if done.created {
        app::domain::AuditAction::SubscriberAdd
    } else {
        app::domain::AuditAction::SubscriberEdit
    };
    token
        .audit(
            &mut tx,
            action,
            "subscriber",
            Some(done.id.to_string()),
            None,
            Some(serde_json::json!({
                "email": row.email.as_str(), "name": row.name, "status": row.status,
                "external_id": row.external_id,
                "lists": input.list_ids,
            })),
        )
        .await?;
    let s = subscriber_api::get(&mut tx, org_id, done.id).await?;
    tx.commit().await?;
    let s = s.ok_or_else(|| Problem::internal("an upserted subscriber is not there"))?;
    let status = if done.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(s.into())))
}

/// Up to 10,000 subscribers to create or update in one request.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BulkInput {
    pub subscribers: Vec<SubscriberInput>,
}

/// What a bulk request did with each row: the rows without an error were written, in one
/// transaction; the rows with one were left out.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct BulkResult {
    pub created: usize,
    pub updated: usize,
    /// For each row of the request, in order: the subscriber's id, or null for a refused row.
    pub ids: Vec<Option<i64>>,
    /// The refused rows, each named by a pointer such as `#/subscribers/12/email`.
    pub errors: Vec<FieldError>,
}

/// Creates or updates up to 10,000 subscribers by address in one request. Each row is
/// checked on its own; a refused row is reported by its index and the others are written.
#[utoipa::path(
    post,
    path = "/subscribers/bulk",
    tag = "subscribers",
    request_body = BulkInput,
    responses(
        (status = 200, description = "Every acceptable row written; the others named.", body = BulkResult),
        (status = 400, description = "The body is not JSON.", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is over 16 MiB.", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not sent as JSON (Content-Type: application/json).", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "Too many rows, or a list that is not the organisation's.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["subscribers:write"]))
)]
async fn bulk(
    token: Token,
    State(pool): State<PgPool>,
    Body(input): Body<BulkInput>,
) -> Result<Json<BulkResult>, Problem> {
    token.require(ApiScope::SubscribersWrite)?;
    let rows = &input.subscribers;
    if rows.len() > BULK_MAX {
        return Err(Problem::field(
            "#/subscribers",
            format!(
                "A bulk request carries at most {BULK_MAX} subscribers; this one has {}.",
                rows.len()
            ),
        ));
    }
    let mut errors = Vec::new();
    let mut accepted: Vec<(usize, Checked)> = Vec::with_capacity(rows.len());
    let mut seen = std::collections::HashMap::with_capacity(rows.len());
    for (i, input) in rows.iter().enumerate() {
        match checked(input) {
            Ok(row) => match seen.entry(row.email.as_str().to_owned()) {
                std::collections::hash_map::Entry::Occupied(first) => errors.push(FieldError {
                    pointer: format!("#/subscribers/{i}/email"),
                    detail: format!(
                        "email: {} is also row {} of this request; send each address once.",
                        row.email.as_str(),
                        first.get()
                    ),
                }),
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(i);
                    accepted.push((i, row));
                }
            },
            Err(e) => errors.push(FieldError {
                pointer: format!("#/subscribers/{i}{}", &e.pointer[1..]),
                detail: e.detail,
            }),
        }
    }
    let org_id = token.org_id();
    // The lists every row names are checked at once; a row naming another org's is refused.
    let mut all_lists: Vec<i64> = rows.iter().flat_map(|r| r.list_ids.clone()).collect();
    all_lists.sort_unstable();
    all_lists.dedup();
    let mut tx = pool.begin().await?;
    let foreign = subscriber_api::foreign_lists(&mut tx, org_id, &all_lists).await?;
    if !foreign.is_empty() {
        accepted.retain(|(i, _)| {
            let bad = rows[*i].list_ids.iter().find(|l| foreign.contains(l));
            if let Some(l) = bad {
                errors.push(FieldError {
                    pointer: format!("#/subscribers/{i}/list_ids"),
                    detail: format!("list_ids: there is no list {l} in this organisation."),
                });
            }
            bad.is_none()
        });
    }
    let claimed: Vec<(&str, &str)> = accepted
        .iter()
        .filter_map(|(_, r)| r.external_id.as_deref().map(|x| (r.email.as_str(), x)))
        .collect();
    let taken = subscriber_api::external_ids_taken(&mut tx, org_id, &claimed).await?;
    if !taken.is_empty() {
        accepted.retain(|(i, row)| {
            let held = row.external_id.is_some() && taken.iter().any(|t| t == row.email.as_str());
            if held {
                errors.push(FieldError {
                    pointer: format!("#/subscribers/{i}/external_id"),
                    detail: "external_id: another subscriber of this organisation has it.".into(),
                });
            }
            !held
        });
    }
    // An external id names one person: a second row giving it to someone is refused.
    let mut external_seen = std::collections::HashMap::new();
    accepted.retain(|(i, row)| {
        let Some(x) = &row.external_id else {
            return true;
        };
        match external_seen.entry(x.clone()) {
            std::collections::hash_map::Entry::Occupied(first) => {
                errors.push(FieldError {
                    pointer: format!("#/subscribers/{i}/external_id"),
                    detail: format!(
                        "external_id: also given by row {} of this request; an external id names one subscriber.",
                        first.get()
                    ),
                });
                false
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(*i);
                true
            }
        }
    });
    let batch: Vec<Upsert<'_>> = accepted
        .iter()
        .map(|(i, row)| row.upsert(&rows[*i].list_ids))
        .collect();
    let done = subscriber_api::upsert(&mut tx, org_id, &batch).await?;
    let mut ids = vec![None; rows.len()];
    let (mut created, mut updated) = (0, 0);
    for ((i, _), d) in accepted.iter().zip(done) {
        ids[*i] = Some(d.id);
        if d.created {
            created += 1;
        } else {
            updated += 1;
        }
    }
    token
        .audit(
            &mut tx,
            app::domain::AuditAction::SubscriberBulkUpsert,
            "subscriber",
            None,
            None,
            Some(serde_json::json!({
                "created": created, "updated": updated, "refused": errors.len(),
            })),
        )
        .await?;
    tx.commit().await?;
    errors.sort_by_key(|e| row_of(&e.pointer));
    Ok(Json(BulkResult {
        created,
        updated,
        ids,
        errors,
    }))
}

/// The row index in a `#/subscribers/<i>/…` pointer, for ordering the errors.
fn row_of(pointer: &str) -> usize {
    pointer
        .split('/')
        .nth(2)
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX)
}

/// One subscriber of the organisation.
#[utoipa::path(
    get,
    path = "/subscribers/{id}",
    tag = "subscribers",
    params(("id" = i64, Path, description = "The subscriber's id.")),
    responses(
        (status = 200, description = "The subscriber.", body = Subscriber),
        (status = 404, description = "No such subscriber in this organisation.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["subscribers:read"]))
)]
async fn one(
    token: Token,
    State(pool): State<PgPool>,
    Id(id): Id<i64>,
) -> Result<Json<Subscriber>, Problem> {
    token.require(ApiScope::SubscribersRead)?;
    let mut conn = pool.acquire().await?;
    let s = subscriber_api::get(&mut conn, token.org_id(), id)
        .await?
        .ok_or_else(|| Problem::not_found("subscriber"))?;
    Ok(Json(s.into()))
}

/// Changes a subscriber's name, status, attributes or lists.
#[utoipa::path(
    patch,
    path = "/subscribers/{id}",
    tag = "subscribers",
    params(("id" = i64, Path, description = "The subscriber's id.")),
    request_body = SubscriberPatch,
    responses(
        (status = 200, description = "Changed.", body = Subscriber),
        (status = 400, description = "The body is not JSON.", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is over 2 MiB.", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not sent as JSON (Content-Type: application/json).", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such subscriber in this organisation.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Their personal data was erased.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field at fault, named.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["subscribers:write"]))
)]
async fn update(
    token: Token,
    State(pool): State<PgPool>,
    Id(id): Id<i64>,
    Body(patch): Body<SubscriberPatch>,
) -> Result<Json<Subscriber>, Problem> {
    token.require(ApiScope::SubscribersWrite)?;
    let name = match &patch.name {
        Some(n) => Some(person_name(n).map_err(|e| Problem::field("#/name", e))?),
        None => None,
    };
    if let Some(a) = &patch.attributes {
        attributes(a).map_err(|e| Problem::field("#/attributes", e))?;
    }
    let external = match &patch.external_id {
        Some(x) => Some(
            app::domain::event::external_id("external_id", x)
                .map_err(|e| Problem::field("#/external_id", format!("{e}.")))?,
        ),
        None => None,
    };
    let org_id = token.org_id();
    let mut tx = pool.begin().await?;
    let before = subscriber_api::get(&mut tx, org_id, id)
        .await?
        .ok_or_else(|| Problem::not_found("subscriber"))?;
    if before.erased {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            "This subscriber's personal data was erased: there is nothing left to change.",
        ));
    }
    if let Some(lists) = &patch.list_ids {
        lists_are_ours(&mut tx, org_id, lists, "#/list_ids").await?;
    }
    subscriber_api::patch(
        &mut tx,
        org_id,
        id,
        subscriber_api::Change {
            name: name.as_deref(),
            external_id: external.as_deref(),
            status: patch.status,
            attributes: patch.attributes.as_ref(),
        },
    )
    .await?;
    if let Some(lists) = &patch.list_ids {
        dashboard::set_lists(&mut tx, org_id, id, lists).await?;
    }
    token
        .audit(
            &mut tx,
            app::domain::AuditAction::SubscriberEdit,
            "subscriber",
            Some(id.to_string()),
            Some(serde_json::json!({
                "name": before.name, "status": before.status, "lists": before.list_ids,
            })),
            Some(serde_json::json!({
                "name": name, "external_id": external, "status": patch.status,
                "lists": patch.list_ids,
            })),
        )
        .await?;
    let after = subscriber_api::get(&mut tx, org_id, id).await?;
    tx.commit().await?;
    let after = after.ok_or_else(|| Problem::not_found("subscriber"))?;
    Ok(Json(after.into()))
}

/// Deletes a subscriber no campaign has reached; one with a history must be erased instead.
#[utoipa::path(
    delete,
    path = "/subscribers/{id}",
    tag = "subscribers",
    params(("id" = i64, Path, description = "The subscriber's id.")),
    responses(
        (status = 204, description = "Deleted."),
        (status = 404, description = "No such subscriber in this organisation.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Mail was sent to them: erase them instead.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["subscribers:write"]))
)]
async fn remove(
    token: Token,
    State(pool): State<PgPool>,
    Id(id): Id<i64>,
) -> Result<StatusCode, Problem> {
    token.require(ApiScope::SubscribersWrite)?;
    let org_id = token.org_id();
    let mut tx = pool.begin().await?;
    let before = subscriber_api::get(&mut tx, org_id, id)
        .await?
        .ok_or_else(|| Problem::not_found("subscriber"))?;
    match dashboard::remove(&mut tx, org_id, id).await? {
        Removal::Removed => {}
        Removal::NotFound => return Err(Problem::not_found("subscriber")),
        Removal::HasHistory => {
            return Err(Problem::new(
                StatusCode::CONFLICT,
                "Mail has been sent to this subscriber and their history keeps them: erase them instead (POST /api/v1/subscribers/{id}/erase).",
            ))
        }
    }
    token
        .audit(
            &mut tx,
            app::domain::AuditAction::SubscriberRemove,
            "subscriber",
            Some(id.to_string()),
            Some(serde_json::json!({ "email": before.email, "name": before.name })),
            None,
        )
        .await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The outcome of an erasure.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Erased {
    /// Subscriber rows erased: every spelling of the address in the organisation.
    pub subscribers: i64,
}

/// Erases a subscriber's personal data (every spelling of the address): the address becomes a
/// hash everywhere, names, attributes and opt-in IPs go, the audit log's entries about them are
/// scrubbed, the captured copies of their messages are removed, and the address stays
/// suppressed.
#[utoipa::path(
    post,
    path = "/subscribers/{id}/erase",
    tag = "subscribers",
    params(("id" = i64, Path, description = "The subscriber's id.")),
    responses(
        (status = 200, description = "Erased.", body = Erased),
        (status = 404, description = "No such subscriber in this organisation.", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Erased already.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["subscribers:write"]))
)]
async fn erase(
    token: Token,
    State(pool): State<PgPool>,
    api: Option<axum::Extension<app::api::ApiConfig>>,
    Id(id): Id<i64>,
) -> Result<Json<Erased>, Problem> {
    use app::erasure::{erase, EraseError};
    token.require(ApiScope::SubscribersWrite)?;
    let by = token.entry(
        app::domain::AuditAction::SubscriberErase,
        "subscriber",
        Some(id.to_string()),
    );
    let captured = api.and_then(|a| a.0.captured_dir);
    match erase(&pool, id, by, captured.as_deref()).await {
        Ok(erasure) => Ok(Json(Erased {
            subscribers: erasure.subscribers,
        })),
        Err(EraseError::NotFound) => Err(Problem::not_found("subscriber")),
        Err(EraseError::Already) => Err(Problem::new(
            StatusCode::CONFLICT,
            "This subscriber was erased already.",
        )),
        Err(EraseError::Db(e)) => Err(e.into()),
    }
}

/// A list of the organisation.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct List {
    pub id: i64,
    pub name: String,
    pub members: i64,
}

/// The organisation's lists.
#[utoipa::path(
    get,
    path = "/lists",
    tag = "lists",
    responses((status = 200, description = "Every list, by name.", body = [List])),
    security(("token" = ["subscribers:read"]))
)]
async fn lists(token: Token, State(pool): State<PgPool>) -> Result<Json<Vec<List>>, Problem> {
    token.require(ApiScope::SubscribersRead)?;
    let mut conn = pool.acquire().await?;
    let rows = app::db::lists::all(&mut conn, token.org_id()).await?;
    Ok(Json(
        rows.into_iter()
            .map(|l| List {
                id: l.id,
                name: l.name,
                members: l.members,
            })
            .collect(),
    ))
}

/// Adds a subscriber to a list.
#[utoipa::path(
    put,
    path = "/lists/{list_id}/members/{subscriber_id}",
    tag = "lists",
    params(
        ("list_id" = i64, Path, description = "The list's id."),
        ("subscriber_id" = i64, Path, description = "The subscriber's id."),
    ),
    responses(
        (status = 201, description = "Added."),
        (status = 200, description = "A member already."),
        (status = 404, description = "No such list or subscriber in this organisation.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["subscribers:write"]))
)]
async fn join(
    token: Token,
    State(pool): State<PgPool>,
    Id((list_id, subscriber_id)): Id<(i64, i64)>,
) -> Result<StatusCode, Problem> {
    token.require(ApiScope::SubscribersWrite)?;
    let org_id = token.org_id();
    let mut tx = pool.begin().await?;
    if app::db::lists::name(&mut tx, org_id, list_id)
        .await?
        .is_none()
    {
        return Err(Problem::not_found("list"));
    }
    if !subscriber_api::live(&mut tx, org_id, subscriber_id).await? {
        return Err(Problem::not_found("subscriber"));
    }
    let added = subscriber_api::join(&mut tx, org_id, list_id, subscriber_id).await?;
    if added {
        token
            .audit(
                &mut tx,
                app::domain::AuditAction::SubscriberJoin,
                "subscriber",
                Some(subscriber_id.to_string()),
                None,
                Some(serde_json::json!({ "list": list_id })),
            )
            .await?;
    }
    tx.commit().await?;
    Ok(if added {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    })
}

/// Removes a subscriber from a list.
#[utoipa::path(
    delete,
    path = "/lists/{list_id}/members/{subscriber_id}",
    tag = "lists",
    params(
        ("list_id" = i64, Path, description = "The list's id."),
        ("subscriber_id" = i64, Path, description = "The subscriber's id."),
    ),
    responses(
        (status = 204, description = "Removed."),
        (status = 404, description = "Not a member, or no such list or subscriber in this organisation.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["subscribers:write"]))
)]
async fn leave(
    token: Token,
    State(pool): State<PgPool>,
    Id((list_id, subscriber_id)): Id<(i64, i64)>,
) -> Result<StatusCode, Problem> {
    token.require(ApiScope::SubscribersWrite)?;
    let org_id = token.org_id();
    let mut tx = pool.begin().await?;
    if !subscriber_api::leave(&mut tx, org_id, list_id, subscriber_id).await? {
        return Err(Problem::not_found("membership"));
    }
    token
        .audit(
            &mut tx,
            app::domain::AuditAction::SubscriberLeave,
            "subscriber",
            Some(subscriber_id.to_string()),
            Some(serde_json::json!({ "list": list_id })),
            None,
        )
        .await?;
    tx.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Someone to ask for a confirmation (double opt-in).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignupInput {
    pub email: String,
    pub name: Option<String>,
}

/// A pending sign-up: the confirmation mail is queued (once, however often it is asked for).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct SignupResult {
    pub signup_id: i64,
    pub subscriber_id: i64,
    /// This request queued the mail (false: an earlier one did, and it is still pending).
    pub queued: bool,
}

/// Signs an address up to a list with double opt-in: a new address becomes an unconfirmed
/// subscriber (in no campaign's audience) and is sent a confirm link; they join the list when
/// they click it. A suppressed address is re-subscribed only by that click.
#[utoipa::path(
    post,
    path = "/lists/{list_id}/signups",
    tag = "lists",
    params(("list_id" = i64, Path, description = "The list's id.")),
    request_body = SignupInput,
    responses(
        (status = 202, description = "The confirmation mail is queued.", body = SignupResult),
        (status = 400, description = "The body is not JSON.", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is over 2 MiB.", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not sent as JSON (Content-Type: application/json).", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such list in this organisation.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field at fault, named.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["subscribers:write"]))
)]
async fn signup(
    token: Token,
    State(pool): State<PgPool>,
    Id(list_id): Id<i64>,
    Body(input): Body<SignupInput>,
) -> Result<(StatusCode, Json<SignupResult>), Problem> {
    token.require(ApiScope::SubscribersWrite)?;
    let email = address(&input.email, "#/email")?;
    let name = person_name(input.name.as_deref().unwrap_or(""))
        .map_err(|e| Problem::field("#/name", format!("name: {e}")))?;
    let org_id = token.org_id();
    let mut tx = pool.begin().await?;
    if app::db::lists::name(&mut tx, org_id, list_id)
        .await?
        .is_none()
    {
        return Err(Problem::not_found("list"));
    }
    let r = app::db::signup::request(
        &mut tx,
        org_id,
        list_id,
        &email,
        &name,
        app::db::signup::Source::Api,
        None,
    )
    .await?;
    if r.queued {
        token
            .audit(
                &mut tx,
                app::domain::AuditAction::SubscriberSignup,
                "subscriber",
                Some(r.subscriber_id.to_string()),
                None,
                Some(serde_json::json!({ "list": list_id, "signup": r.signup_id })),
            )
            .await?;
    }
    tx.commit().await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(SignupResult {
            signup_id: r.signup_id,
            subscriber_id: r.subscriber_id,
            queued: r.queued,
        }),
    ))
}

/// A row that passed its checks.
struct Checked {
    email: EmailAddress,
    name: Option<String>,
    external_id: Option<String>,
    status: Option<SubscriberStatus>,
    attributes: Option<serde_json::Value>,
}

impl Checked {
    fn upsert<'a>(&'a self, list_ids: &'a [i64]) -> Upsert<'a> {
        Upsert {
            email: &self.email,
            name: self.name.as_deref(),
            external_id: self.external_id.as_deref(),
            status: self.status,
            attributes: self.attributes.as_ref(),
            list_ids,
        }
    }
}

/// Checks one input row; the error's pointer is relative to the row (`#/email`).
fn checked(input: &SubscriberInput) -> Result<Checked, FieldError> {
    let fail = |field: &str, detail: String| FieldError {
        pointer: format!("#/{field}"),
        detail: format!("{field}: {detail}"),
    };
    // The edge's rule first, so a NUL is refused as such (and never quoted back).
    app::domain::input::line_input("email", input.email.trim(), 254).map_err(|e| FieldError {
        pointer: "#/email".into(),
        detail: format!("{e}."),
    })?;
    let email = EmailAddress::parse(&input.email).map_err(|e| fail("email", format!("{e}.")))?;
    let name = match &input.name {
        Some(n) => Some(person_name(n).map_err(|e| fail("name", e))?),
        None => None,
    };
    if let Some(a) = &input.attributes {
        attributes(a).map_err(|e| fail("attributes", e))?;
    }
    let external_id = match &input.external_id {
        Some(x) => Some(
            app::domain::event::external_id("external_id", x).map_err(|e| FieldError {
                pointer: "#/external_id".into(),
                detail: format!("{e}."),
            })?,
        ),
        None => None,
    };
    Ok(Checked {
        email,
        name,
        external_id,
        status: input.status,
        attributes: input.attributes.clone(),
    })
}

fn attributes(a: &serde_json::Value) -> Result<(), String> {
    if !a.is_object() {
        return Err("must be a JSON object.".into());
    }
    if let Err(p) = super::storable("#/attributes", a) {
        return Err(p.detail.trim_start_matches("attributes: ").to_owned());
    }
    let size = serde_json::to_vec(a).map(|v| v.len()).unwrap_or(usize::MAX);
    if size > ATTRIBUTES_MAX_BYTES {
        return Err(format!(
            "too large ({size} bytes as JSON; at most {ATTRIBUTES_MAX_BYTES})."
        ));
    }
    Ok(())
}

fn address(raw: &str, field: &str) -> Result<EmailAddress, Problem> {
    let name = field.trim_start_matches("#/");
    EmailAddress::parse(raw).map_err(|e| Problem::field(field, format!("{name}: {e}.")))
}

/// Refuses (422, naming `pointer`) list ids that are not the org's.
async fn lists_are_ours(
    conn: &mut sqlx::PgConnection,
    org_id: i64,
    list_ids: &[i64],
    pointer: &str,
) -> Result<(), Problem> {
    if list_ids.is_empty() {
        return Ok(());
    }
    let foreign = subscriber_api::foreign_lists(conn, org_id, list_ids).await?;
    match foreign.first() {
        None => Ok(()),
        Some(l) => Err(Problem::field(
            pointer,
            format!("list_ids: there is no list {l} in this organisation."),
        )),
    }
}
