//! Relay webhooks: `POST /hooks/v1/<source>/<endpoint id>` (Postmark may put its secret in a
//! further path segment, or send it as the basic-auth password). The endpoint names the org;
//! the body is verified over its exact bytes by the provider's rule (`app::bounce`), then every
//! event is recorded in one transaction and the answer is 200 only after it commits. A relay
//! that retries (they all do) gets 200 again and nothing is written twice. Refusals are 4xx
//! naming what was wrong, and write nothing.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use base64::Engine;
use sqlx::PgPool;

use app::bounce::ses::Sns;
use app::bounce::{self, generic, Verified};
use app::db::reports::{self, NonceTaken};
use app::domain::EventSource;
use app::feedback::{self, RecordError};

use crate::http::plain::Refusal;

/// The largest webhook body taken (a SendGrid-style batch of a thousand events fits).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

pub fn routes(pool: PgPool) -> Router {
    Router::new()
        .route("/hooks/v1/{source}/{endpoint}", post(receive))
        .route(
            "/hooks/v1/{source}/{endpoint}/{secret}",
            post(receive_with_secret),
        )
        .with_state(pool)
}

/// What a relay is told: how many events the request carried and how many were new.
#[derive(serde::Serialize)]
pub struct Answer {
    pub events: usize,
    pub new: usize,
}

async fn receive(
    State(pool): State<PgPool>,
    Path((source, endpoint)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Answer>, Refusal> {
    let secret = basic_auth_password(&headers);
    handle(
        &pool,
        &source,
        &endpoint,
        secret.as_deref(),
        &headers,
        &body,
    )
    .await
}

async fn receive_with_secret(
    State(pool): State<PgPool>,
    Path((source, endpoint, secret)): Path<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Json<Answer>, Refusal> {
    handle(&pool, &source, &endpoint, Some(&secret), &headers, &body).await
}

/// The password of an `Authorization: Basic` header.
fn basic_auth_password(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let pair = String::from_utf8(decoded).ok()?;
    Some(pair.split_once(':')?.1.to_owned())
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn refused(e: bounce::Refused) -> Refusal {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
    Refusal::new(status, e.to_string())
}

async fn handle(
    pool: &PgPool,
    source: &str,
    endpoint: &str,
    presented: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Json<Answer>, Refusal> {
    let not_found = || Refusal::new(StatusCode::NOT_FOUND, "No such webhook endpoint.");
    let source: EventSource = source
        .parse()
        .ok()
        .filter(|s: &EventSource| s.is_webhook())
        .ok_or_else(not_found)?;
    let ep = reports::endpoint(pool, endpoint)
        .await?
        .filter(|e| e.source == source)
        .ok_or_else(not_found)?;
    let mut tx = pool.begin().await?;
    let now = reports::now_unix(&mut tx).await?;
    let Verified {
        events: batch,
        nonce,
    } = match source {
        EventSource::Generic => generic::verify(
            &ep.secret,
            ep.org_id,
            generic::Signed {
                id: header_str(headers, "webhook-id"),
                timestamp: header_str(headers, "webhook-timestamp"),
                signature: header_str(headers, "webhook-signature"),
            },
            body,
            now,
        ),
        EventSource::Mailgun => bounce::mailgun::verify(&ep.secret, body, now),
        EventSource::Postmark => bounce::postmark::verify(&ep.secret, presented, body),
        EventSource::Ses => match bounce::ses::verify(&ep.secret, body, now).map_err(refused)? {
            Sns::Events(v) => Ok(v),
            Sns::Confirm { subscribe_url } => {
                reports::set_subscribe_url(&mut tx, &ep.id, &subscribe_url).await?;
                tx.commit().await?;
                tracing::info!(
                    org = ep.org_id,
                    "SNS subscription confirmation kept for the owner"
                );
                return Ok(Json(Answer { events: 0, new: 0 }));
            }
            Sns::Nothing => return Ok(Json(Answer { events: 0, new: 0 })),
        },
        EventSource::SendGrid => bounce::sendgrid::verify(
            &ep.secret,
            header_str(headers, "x-twilio-email-event-webhook-signature"),
            header_str(headers, "x-twilio-email-event-webhook-timestamp"),
            body,
            now,
        ),
        // Mailed reports have no endpoint (refused above).
        EventSource::Dsn | EventSource::Arf => return Err(not_found()),
    }
    .map_err(refused)?;
    if let Some(n) = &nonce {
        match reports::take_nonce(&mut tx, ep.org_id, source, &n.value, &n.body_sha256).await? {
            NonceTaken::Fresh => {}
            NonceTaken::Retry => {
                tx.commit().await?;
                return Ok(Json(Answer {
                    events: batch.len(),
                    new: 0,
                }));
            }
            NonceTaken::Replayed => return Err(Refusal::new(
                StatusCode::CONFLICT,
                "This signature's token was used before with another body: a replay is refused.",
            )),
        }
    }
    let policy = reports::policy(&mut tx, ep.org_id).await?;
    // Only SES says which envelope sender it used; the key is read only then.
    let verp_key = match batch.iter().any(|e| e.envelope_from.is_some()) {
        true => Some(app::signing::Purpose::Verp.key(pool).await?),
        false => None,
    };
    let cx = feedback::Intake {
        org_id: ep.org_id,
        source,
        policy,
        verp_key: verp_key.as_deref(),
        signed: true,
    };
    let mut new = 0;
    for e in &batch {
        match feedback::record(&mut tx, &cx, e).await {
            Ok(Some(_)) => new += 1,
            Ok(None) => {}
            // The whole request rolls back: nothing of it is written.
            Err(RecordError::OtherOrg(id)) => {
                return Err(Refusal::new(
                    StatusCode::CONFLICT,
                    format!(
                        "Event {id} names a message this endpoint's organisation did not send."
                    ),
                ))
            }
            Err(RecordError::Db(e)) => return Err(e.into()),
        }
    }
    tx.commit().await?;
    if new > 0 {
        tracing::info!(org = ep.org_id, %source, events = batch.len(), new, "relay events recorded");
    }
    Ok(Json(Answer {
        events: batch.len(),
        new,
    }))
}
