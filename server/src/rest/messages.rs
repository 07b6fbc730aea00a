//! `/api/v1/messages`: transactional mail, exactly once. The request's `Idempotency-Key`
//! becomes the delivery's job id (`tx:<org>:<key>`), so the same request sent again, at once
//! or a day later, finds the message the first one queued and answers the same body (201
//! the first time, 200 after). The same key with another payload is a 409. The message is
//! made from one of the org's templates and the request's data when the request is accepted.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use app::db::transactional::{self, NewMessage};
use app::domain::{idempotency_key, ApiScope, EmailAddress, JobId};
use app::tx_render::{self, Source};

use super::{Body, Id, Problem, RestState, Token};

/// The largest `data` object of one request, as JSON.
const DATA_MAX_BYTES: usize = 64 * 1024;

pub fn routes() -> OpenApiRouter<RestState> {
    OpenApiRouter::new()
        .routes(routes!(send))
        .routes(routes!(one))
}

/// A message to send.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SendInput {
    /// The template's name (Templates in the dashboard).
    pub template: String,
    /// The recipient's address.
    pub to: String,
    /// What the template's fields are filled in from (a JSON object); `email` is the
    /// recipient unless the data sets it.
    #[serde(default = "empty_object")]
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(Default::default())
}

/// A queued message, as every request with its key is answered.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct Message {
    /// `tx:<org>:<Idempotency-Key>`: the delivery's job id.
    pub id: String,
    pub template: String,
    pub template_version: i32,
    pub to: String,
    /// When the first request was accepted (RFC 3339, UTC).
    pub created_at: String,
}

impl From<transactional::Message> for Message {
    fn from(m: transactional::Message) -> Self {
        Message {
            id: m.job_id,
            template: m.template,
            template_version: m.template_version,
            to: m.recipient,
            created_at: m.created_at,
        }
    }
}

/// Sends a message made from a template, exactly once per `Idempotency-Key`.
#[utoipa::path(
    post,
    path = "/messages",
    tag = "messages",
    params(("Idempotency-Key" = String, Header, pattern = "^[!-~]{1,200}$", description = "Your identity for this message (1 to 200 visible ASCII characters): a retry with the same key never sends a second message.")),
    request_body = SendInput,
    responses(
        (status = 201, description = "Queued.", body = Message),
        (status = 200, description = "This key's message was queued already, by the same request: the same answer.", body = Message),
        (status = 400, description = "No Idempotency-Key, or the body is not JSON.", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "The body is over 2 MiB.", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "The body is not sent as JSON (Content-Type: application/json).", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "This key was used with another request.", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field at fault, named: the address, the template, or data the template needs.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["messages:send"]))
)]
async fn send(
    token: Token,
    State(pool): State<PgPool>,
    headers: HeaderMap,
    Body(input): Body<SendInput>,
) -> Result<(StatusCode, Json<Message>), Problem> {
    token.require(ApiScope::MessagesSend)?;
    let key = headers
        .get("idempotency-key")
        .ok_or_else(|| {
            Problem::new(
                StatusCode::BAD_REQUEST,
                "Send an Idempotency-Key header: it makes a retry safe.",
            )
        })?
        .to_str()
        .map_err(|_| Problem::field("Idempotency-Key", "The Idempotency-Key is not ASCII."))?;
    let key = idempotency_key(key).map_err(|e| Problem::field("Idempotency-Key", e))?;
    let fingerprint =
        tx_render::fingerprint(&serde_json::to_value(&input).map_err(Problem::internal)?);
    let org_id = token.org_id();
    let mut tx = pool.begin().await?;
    // A retry finds its message before anything else is looked at.
    if let Some(m) = transactional::by_key(&mut tx, org_id, key).await? {
        return same(m, &fingerprint);
    }
    let to =
        EmailAddress::parse(&input.to).map_err(|e| Problem::field("#/to", format!("to: {e}.")))?;
    if !input.data.is_object() {
        return Err(Problem::field("#/data", "data: must be a JSON object."));
    }
    super::storable("#/data", &input.data)?;
    let size = serde_json::to_vec(&input.data)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if size > DATA_MAX_BYTES {
        return Err(Problem::field(
            "#/data",
            format!("data: too large ({size} bytes as JSON; at most {DATA_MAX_BYTES})."),
        ));
    }
    // A name no template can have names none (and never reaches the database).
    let plausible = app::domain::text::template_name(&input.template);
    let found = if plausible {
        transactional::template_by_name(&mut tx, org_id, &input.template).await?
    } else {
        None
    };
    let template = found.ok_or_else(|| {
        Problem::field(
            "#/template",
            format!(
                "template: there is no template named {:?} in this organisation.",
                app::domain::input::excerpt(&input.template)
            ),
        )
    })?;
    let rendered = tx_render::render(
        &Source {
            subject: &template.subject,
            text: &template.body_text,
            html: template.body_html.as_deref(),
        },
        to.as_str(),
        &input.data,
    )
    .map_err(|e| {
        Problem::field(
            "#/data",
            format!(
                "The template {} (version {}) does not render with this data: {e}.",
                template.name, template.version
            ),
        )
    })?;
    let created = transactional::create(
        &mut tx,
        org_id,
        &NewMessage {
            key,
            request_hash: &fingerprint,
            template_id: template.id,
            template_version: template.version,
            recipient: &to,
            data: &input.data,
            subject: &rendered.subject,
            body_text: &rendered.text,
            body_html: rendered.html.as_deref(),
            api_token_id: token.0.token_id,
        },
    )
    .await?;
    let m = transactional::by_key(&mut tx, org_id, key)
        .await?
        .ok_or_else(|| Problem::internal("a message recorded under a key is not found by it"))?;
    if created.is_none() {
        // A concurrent request with this key committed first: its answer is ours.
        return same(m, &fingerprint);
    }
    tx.commit().await?;
    Ok((StatusCode::CREATED, Json(m.into())))
}

/// The answer to a request whose key has a message already: that message, or a 409 when the
/// key was used with another request.
fn same(
    m: transactional::Message,
    fingerprint: &[u8],
) -> Result<(StatusCode, Json<Message>), Problem> {
    if m.request_hash != fingerprint {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            format!(
                "The Idempotency-Key was used with another request (message {}): use a new key for a new message.",
                m.job_id
            ),
        ));
    }
    Ok((StatusCode::OK, Json(m.into())))
}

/// A message and where its delivery stands.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct MessageState {
    #[serde(flatten)]
    pub message: Message,
    /// `queued`, `sending`, `delivered`, `failed`, `unknown` (the relay may have it: never
    /// sent again by itself), `suppressed` (a hard bounce or complaint) or `cancelled`.
    pub status: String,
    /// The SMTP server's last reply, if any.
    pub smtp_reply: Option<String>,
}

/// A transactional message by its id (`tx:<org>:<key>`, as the send answered).
#[utoipa::path(
    get,
    path = "/messages/{id}",
    tag = "messages",
    params(("id" = String, Path, pattern = "^tx:[0-9]+:[!-~]{1,200}$", description = "The message's id, `tx:<org>:<Idempotency-Key>` (percent-encoded).")),
    responses(
        (status = 200, description = "The message and its delivery's state.", body = MessageState),
        (status = 404, description = "No such message in this organisation.", body = Problem, content_type = "application/problem+json"),
    ),
    security(("token" = ["messages:send"]))
)]
async fn one(
    token: Token,
    State(pool): State<PgPool>,
    Id(id): Id<String>,
) -> Result<Json<MessageState>, Problem> {
    token.require(ApiScope::MessagesSend)?;
    let org_id = token.org_id();
    let key = match id.parse::<JobId>() {
        Ok(JobId::Transactional { org_id: o, key }) if o == org_id => key,
        _ => return Err(Problem::not_found("message")),
    };
    let mut conn = pool.acquire().await?;
    let m = transactional::by_key(&mut conn, org_id, &key)
        .await?
        .ok_or_else(|| Problem::not_found("message"))?;
    let d = app::db::delivery::admin::find(&mut conn, org_id, &m.job_id)
        .await?
        .ok_or_else(|| Problem::not_found("message"))?;
    Ok(Json(MessageState {
        message: m.into(),
        status: d.status.to_string(),
        smtp_reply: d.smtp_reply,
    }))
}
