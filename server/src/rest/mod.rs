//! The REST API at `/api/v1`, for the sending SaaS's own code. Every request carries an org's
//! API token (`Authorization: Bearer mrk_…`): the token names the org, so every read and write
//! is that org's and another org's object is a 404. Each endpoint needs a scope of the token;
//! requests are rate-limited per token by a token bucket in PostgreSQL (shared by every
//! replica), answering 429 with `Retry-After`. Errors are RFC 9457 problem documents naming
//! the field at fault. The OpenAPI document at `/api/v1/openapi.json` is generated from these
//! handlers (utoipa), so it cannot drift from them.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, FromRef, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use serde::Serialize;
use sqlx::PgPool;
use tower_http::limit::RequestBodyLimitLayer;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};
use utoipa_axum::router::OpenApiRouter;

use app::db::api_tokens::{self, Caller};
use app::domain::ApiScope;

/// Automations: what they are, who is in them, enrol and remove people.
pub mod automations;
/// Campaigns with their status and progress (read only).
pub mod campaigns;
/// One delivery by its job id.
pub mod deliveries;
/// The SaaS's events about its people, exactly once per event id.
pub mod events;
/// Transactional mail, exactly once per Idempotency-Key.
pub mod messages;
/// Saved segments: their definitions, counts and members.
pub mod segments;
/// Subscribers (one at a time and in bulk), lists and membership.
pub mod subscribers;
/// The suppression list: check, add, remove.
pub mod suppressions;
/// The events sent to webhook endpoints, as the document's `webhooks`.
pub mod webhooks_doc;

/// How fast one token may call: a bucket of `burst` requests refilled at `per_second`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Limits {
    pub per_second: f64,
    pub burst: f64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            per_second: 20.0,
            burst: 100.0,
        }
    }
}

#[derive(Clone)]
pub struct RestState {
    pub pool: PgPool,
    pub limits: Limits,
}

impl FromRef<RestState> for PgPool {
    fn from_ref(s: &RestState) -> Self {
        s.pool.clone()
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Mailroom API",
        version = "1",
        description = "The sending SaaS's API: its subscribers, its suppression list, its mail. Every request is authenticated by one of the organisation's API tokens (Settings › API tokens) and acts on that organisation only."
    ),
    modifiers(&BearerToken),
    components(schemas(Problem, FieldError)),
    security(("token" = []))
)]
struct ApiDoc;

struct BearerToken;

impl Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "token",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("An API token of the organisation (`mrk_…`)."))
                    .build(),
            ),
        );
    }
}

/// The API's routes (under `/api/v1`, state still to be given) and the OpenAPI document made
/// from the same handlers.
fn parts() -> (Router<RestState>, utoipa::openapi::OpenApi) {
    // Each route gets its body limit here, and nothing outside sets another: a limit layered
    // around this router would be met first and refuse the bulk upsert's larger body.
    let ordinary = suppressions::routes()
        .merge(deliveries::routes())
        .merge(subscribers::routes())
        .merge(campaigns::routes())
        .merge(messages::routes())
        .merge(segments::routes())
        .merge(automations::routes());
    let (router, mut doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .nest(
            "/api/v1",
            body_limit(ordinary, crate::http::MAX_REQUEST_BYTES).merge(body_limit(
                subscribers::bulk_routes().merge(events::routes()),
                subscribers::BULK_MAX_BYTES,
            )),
        )
        .split_for_parts();
    common_refusals(&mut doc);
    webhooks_doc::describe(&mut doc);
    (router, doc)
}

/// Bodies of up to `max_bytes` on every route of `router`, 413 past it: refused from the
/// `Content-Length` before the body is read, or when a chunked body reaches the limit; and the
/// JSON extractor reads up to the same figure (axum's own default, 2 MB, would otherwise hold).
/// The refusal is a problem document naming the limit.
fn body_limit(router: OpenApiRouter<RestState>, max_bytes: usize) -> OpenApiRouter<RestState> {
    router
        .layer(RequestBodyLimitLayer::new(max_bytes))
        .layer(DefaultBodyLimit::max(max_bytes))
        .layer(axum::middleware::map_response(move |res: Response| async move {
            if res.status() != StatusCode::PAYLOAD_TOO_LARGE {
                return res;
            }
            Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "The body is too large: this endpoint takes at most {} MiB ({max_bytes} bytes).",
                    max_bytes / (1024 * 1024)
                ),
            )
            .into_response()
        }))
}

/// Whether `path` is the API's, whose every error is a problem document.
pub fn is_api_path(path: &str) -> bool {
    path == "/api/v1" || path.starts_with("/api/v1/")
}

/// Makes every error answered under `/api/v1` an RFC 9457 problem document, whoever made it.
/// The handlers and their extractors answer problems already; this catches what answers
/// before them or around them: axum's method router (405 with an empty body; its `Allow`
/// header is kept), the timeout (408, empty) and the host
/// check (421). An answer that is a problem document already, a success, and every answer
/// outside the API pass untouched.
pub async fn problem_answers(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if !is_api_path(req.uri().path()) {
        return next.run(req).await;
    }
    let res = next.run(req).await;
    let status = res.status();
    let is_problem = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/problem+json"));
    if !(status.is_client_error() || status.is_server_error()) || is_problem {
        return res;
    }
    let plain = res
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/plain"));
    let (mut parts, body) = res.into_parts();
    let detail = match status.as_u16() {
        405 => "This endpoint does not take that method: the Allow header lists the ones it takes \
             (see /api/v1/openapi.json)."
            .to_owned(),
        415 => "Send the body as JSON (Content-Type: application/json).".to_owned(),
        408 => "The request was not received and answered in time: please retry.".to_owned(),
        // Another layer's refusal in plain text (the host check's) says why in its own words.
        _ => match axum::body::to_bytes(body, 4096).await {
            Ok(text) if plain && !text.trim_ascii().is_empty() => {
                String::from_utf8_lossy(text.trim_ascii()).into_owned()
            }
            _ => format!("{}.", status.canonical_reason().unwrap_or("Refused")),
        },
    };
    // The answer's own headers stay (Allow, Retry-After); those of the body it had go.
    parts.headers.remove(header::CONTENT_TYPE);
    parts.headers.remove(header::CONTENT_LENGTH);
    let (problem, body) = Problem::new(status, detail).into_response().into_parts();
    parts.headers.extend(problem.headers);
    Response::from_parts(parts, body)
}

/// What every endpoint may answer besides its own responses, said once and added to each
/// operation of the document: the `Token` extractor and `Token::require` answer them all.
fn common_refusals(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    const REFUSALS: [(&str, &str); 3] = [
        ("401", "No token, or an unknown or revoked one."),
        ("403", "The token lacks the endpoint's scope."),
        ("429", "Too many requests from this token: see Retry-After."),
    ];
    for item in doc.paths.paths.values_mut() {
        let ops = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ];
        for op in ops.into_iter().flatten() {
            for (code, text) in REFUSALS {
                op.responses
                    .responses
                    .entry(code.into())
                    .or_insert_with(|| {
                        ResponseBuilder::new()
                            .description(text)
                            .content(
                                "application/problem+json",
                                ContentBuilder::new()
                                    .schema(Some(Ref::from_schema_name("Problem")))
                                    .build(),
                            )
                            .build()
                            .into()
                    });
            }
        }
    }
}

/// The OpenAPI document, as `/api/v1/openapi.json` serves it.
pub fn openapi() -> utoipa::openapi::OpenApi {
    parts().1
}

/// The API's routes, ready to merge into the server's router.
pub fn routes(state: RestState) -> Router {
    let (router, doc) = parts();
    let json: Arc<str> = match doc.to_json() {
        Ok(j) => j.into(),
        // Serialising a document built from types cannot fail; an empty one if it did.
        Err(_) => "{}".into(),
    };
    router
        .route(
            "/api/v1/openapi.json",
            get(move || {
                let json = json.clone();
                async move {
                    (
                        [(header::CONTENT_TYPE, "application/json")],
                        json.to_string(),
                    )
                }
            }),
        )
        // Unknown paths under the API answer as the API does, not with the dashboard's page.
        .route(
            "/api/v1/{*path}",
            any(|| async {
                Problem::new(
                    StatusCode::NOT_FOUND,
                    "No such endpoint: see /api/v1/openapi.json.",
                )
            }),
        )
        .with_state(state)
}

/// A field the request got wrong, as RFC 9457 extension `errors` lists them.
#[derive(Clone, Debug, Serialize, serde::Deserialize, ToSchema)]
pub struct FieldError {
    /// A JSON pointer to the field (`#/email`), or the parameter's name for path and query
    /// parameters.
    pub pointer: String,
    pub detail: String,
}

/// An error, as `application/problem+json` (RFC 9457).
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Problem {
    /// Always `about:blank`: the status says what kind of problem it is.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub title: String,
    pub status: u16,
    /// What was wrong, for the person reading the client's log.
    pub detail: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<FieldError>,
    #[serde(skip)]
    retry_after: Option<u64>,
    #[serde(skip)]
    challenge: bool,
}

impl Problem {
    /// `detail` is cut to `app::domain::input::MESSAGE_MAX_CHARS`: a refusal that quotes what
    /// it was sent (a parser's message) never carries a whole input back.
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        let detail: String = detail.into();
        Problem {
            kind: "about:blank",
            title: status.canonical_reason().unwrap_or("Error").to_owned(),
            status: status.as_u16(),
            detail: app::domain::input::capped(&detail).into_owned(),
            errors: Vec::new(),
            retry_after: None,
            challenge: false,
        }
    }

    /// A 422 naming the field at fault.
    pub fn field(pointer: &str, detail: impl Into<String>) -> Self {
        let detail: String = detail.into();
        Problem {
            errors: vec![FieldError {
                pointer: pointer.to_owned(),
                detail: app::domain::input::capped(&detail).into_owned(),
            }],
            ..Problem::new(StatusCode::UNPROCESSABLE_ENTITY, detail)
        }
    }

    /// The same problem under another status (a field at fault that is a conflict, 409).
    pub fn with_status(self, status: StatusCode) -> Self {
        Problem {
            title: status.canonical_reason().unwrap_or("Error").to_owned(),
            status: status.as_u16(),
            ..self
        }
    }

    pub fn not_found(what: &str) -> Self {
        Problem::new(StatusCode::NOT_FOUND, format!("No such {what}."))
    }

    /// The unexpected: logged here, answered without its text.
    pub fn internal(e: impl std::fmt::Display) -> Self {
        tracing::error!(error = %e, "API request failed");
        Problem::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "Something went wrong on our side; it has been logged. Please retry.",
        )
    }

    fn unauthorized(detail: &str) -> Self {
        Problem {
            challenge: true,
            ..Problem::new(StatusCode::UNAUTHORIZED, detail)
        }
    }
}

impl From<sqlx::Error> for Problem {
    fn from(e: sqlx::Error) -> Self {
        match e {
            // The database is away: the client may simply retry.
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
                tracing::warn!(error = %e, "database unavailable");
                Problem {
                    retry_after: Some(5),
                    ..Problem::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "The database is not answering: please retry shortly.",
                    )
                }
            }
            // Two writers gave one external id to two people at once: the index refereed.
            sqlx::Error::Database(d) if d.constraint() == Some("subscribers_external_id") => {
                Problem::field(
                    "#/external_id",
                    "external_id: another subscriber of this organisation has it.",
                )
                .with_status(StatusCode::CONFLICT)
            }
            other => Problem::internal(other),
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_string(&self).unwrap_or_default();
        let mut r = (
            status,
            [(header::CONTENT_TYPE, "application/problem+json")],
            body,
        )
            .into_response();
        if let Some(secs) = self.retry_after {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.challenge {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"mailroom\""),
            );
        }
        r
    }
}

/// Rows per page unless the request asks for fewer (or more, up to [`PAGE_MAX`]).
pub const PAGE_DEFAULT: i64 = 100;
pub const PAGE_MAX: i64 = 1000;

/// A keyset page's size from its query (`limit`, 1 to [`PAGE_MAX`]), its `after` checked too:
/// ids are never negative.
pub fn page_size(limit: Option<i64>, after: Option<i64>) -> Result<i64, Problem> {
    let limit = limit.unwrap_or(PAGE_DEFAULT);
    if !(1..=PAGE_MAX).contains(&limit) {
        return Err(Problem::field(
            "limit",
            format!("limit must be between 1 and {PAGE_MAX}."),
        ));
    }
    if after.is_some_and(|a| a < 0) {
        return Err(Problem::field("after", "after: ids are 0 or more."));
    }
    Ok(limit)
}

/// Refuses (422, naming the field) a JSON value PostgreSQL's `jsonb` cannot store and give
/// back as it came, by the edge's rule ([`app::domain::input::json_input`]).
pub fn storable(pointer: &str, v: &serde_json::Value) -> Result<(), Problem> {
    app::domain::input::json_input(pointer.trim_start_matches("#/"), v)
        .map_err(|e| Problem::field(pointer, format!("{e}.")))
}

/// A JSON request body whose refusals are problem documents: 415 without a JSON content type,
/// 400 when it is not JSON, 422 naming the field when it does not fit the schema.
pub struct Body<T>(pub T);

impl<S, T> axum::extract::FromRequest<S> for Body<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Problem;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Problem> {
        use axum::extract::rejection::JsonRejection;
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Body(v)),
            Err(JsonRejection::JsonDataError(e)) => {
                // serde names the field and the line and column: the caller's own input.
                let why = std::error::Error::source(&e)
                    .map(ToString::to_string)
                    .unwrap_or_else(|| e.body_text());
                Err(Problem::field(
                    "#/",
                    format!("The body does not fit the schema: {why}."),
                ))
            }
            Err(JsonRejection::MissingJsonContentType(_)) => Err(Problem::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "Send the body as JSON (Content-Type: application/json).",
            )),
            Err(JsonRejection::BytesRejection(_)) => Err(Problem::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "The body is too large or could not be read.",
            )),
            Err(e) => Err(Problem::new(
                StatusCode::BAD_REQUEST,
                format!("The body is not JSON: {}.", e.body_text()),
            )),
        }
    }
}

/// Query parameters whose refusals are problem documents (400 naming what did not parse).
pub struct QueryOf<T>(pub T);

impl<S, T> FromRequestParts<S> for QueryOf<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| QueryOf(q.0))
            .map_err(|e| Problem::new(StatusCode::BAD_REQUEST, e.body_text()))
    }
}

/// A numeric path parameter whose refusal is a problem document: a path that names no
/// object of the right shape names none at all (404).
pub struct Id<T>(pub T);

impl<S, T> FromRequestParts<S> for Id<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Id(p.0))
            .map_err(|_| {
                Problem::new(
                    StatusCode::NOT_FOUND,
                    "No such object: the path's id is not one.",
                )
            })
    }
}

/// The token behind a request, authenticated and within its rate.
pub struct Token(pub Caller);

impl Token {
    /// Refuses the request (403, naming the scope) unless the token has `scope`.
    pub fn require(&self, scope: ApiScope) -> Result<(), Problem> {
        if self.0.scopes.contains(&scope) {
            Ok(())
        } else {
            Err(Problem::new(
                StatusCode::FORBIDDEN,
                format!("This token lacks the scope {scope}."),
            ))
        }
    }

    pub fn org_id(&self) -> i64 {
        self.0.org_id
    }

    /// Records an action taken with this token in the audit log, in the action's transaction.
    pub async fn audit(
        &self,
        conn: &mut sqlx::PgConnection,
        action: app::domain::AuditAction,
        object_type: &str,
        object_id: Option<String>,
        before: Option<serde_json::Value>,
        after: Option<serde_json::Value>,
    ) -> sqlx::Result<()> {
        app::db::audit::record(
            conn,
            app::db::audit::Entry {
                before,
                after,
                ..self.entry(action, object_type, object_id)
            },
        )
        .await
    }

    /// An audit entry of an action taken with this token, its before and after left empty.
    pub fn entry<'a>(
        &self,
        action: app::domain::AuditAction,
        object_type: &'a str,
        object_id: Option<String>,
    ) -> app::db::audit::Entry<'a> {
        app::db::audit::Entry::by_token(
            self.org_id(),
            self.0.token_id,
            action,
            object_type,
            object_id,
        )
    }
}

impl FromRequestParts<RestState> for Token {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &RestState) -> Result<Self, Problem> {
        let presented = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                Problem::unauthorized("Send an API token: Authorization: Bearer <token>.")
            })?;
        let caller = api_tokens::caller(&state.pool, &app::auth::hash_token(presented))
            .await?
            .ok_or_else(|| Problem::unauthorized("This API token is unknown or revoked."))?;
        let key = format!("api-token:{}", caller.token_id);
        let limits = state.limits;
        app::db::rate_limit::ensure(&state.pool, &key, limits.burst, limits.per_second).await?;
        if app::db::rate_limit::take(&state.pool, &key, 1).await? < 1 {
            return Err(Problem {
                retry_after: Some((1.0 / limits.per_second).ceil().max(1.0) as u64),
                ..Problem::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    format!(
                        "Too many requests: this token may make {} a second (bursts of {}).",
                        limits.per_second, limits.burst
                    ),
                )
            });
        }
        Ok(Token(caller))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_operation_documents_its_scope_and_the_common_refusals() {
        let doc = serde_json::to_value(super::openapi()).unwrap();
        assert_eq!(doc["openapi"], "3.1.0");
        let paths = doc["paths"].as_object().unwrap();
        assert!(paths.keys().all(|p| p.starts_with("/api/v1/")), "{paths:?}");
        for (path, item) in paths {
            for (method, op) in item.as_object().unwrap() {
                for code in ["401", "403", "429"] {
                    assert!(op["responses"][code].is_object(), "{method} {path}: {code}");
                }
                assert_eq!(op["security"][0]["token"].as_array().map(Vec::len), Some(1));
                // A body can be too large or not JSON: each endpoint that takes one says so.
                if op.get("requestBody").is_some() {
                    for code in ["413", "415"] {
                        assert!(
                            op["responses"][code]["content"]["application/problem+json"]
                                .is_object(),
                            "{method} {path}: {code}"
                        );
                    }
                }
            }
        }
        assert_eq!(
            doc["components"]["securitySchemes"]["token"]["scheme"],
            "bearer"
        );
    }

    #[test]
    fn only_the_api_paths_are_the_apis() {
        assert!(super::is_api_path("/api/v1/subscribers") && super::is_api_path("/api/v1"));
        assert!(!super::is_api_path("/api/v1x") && !super::is_api_path("/api/login"));
    }
}
