//! What the plain routes (CSV import and export, the progress stream) share with each other and
//! with the server functions: the signed-in user, found by the same lookup
//! (`app::auth::session_user`), and refusals that answer as plain text with their status,
//! never internals.

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use sqlx::PgPool;

use app::api::CurrentUser;
use app::error::AppError;

/// A refusal or a failure, as a plain-text answer: what was wrong for the caller's mistakes,
/// one generic line (and a log entry) for the unexpected.
#[derive(Debug)]
pub struct Refusal {
    status: StatusCode,
    message: String,
}

impl Refusal {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Refusal {
            status,
            message: message.into(),
        }
    }

    /// The unexpected: logged here with `what` failed, answered without its text.
    pub fn internal(what: &str, e: impl std::fmt::Display) -> Self {
        tracing::error!(error = %e, "{what} failed");
        AppError::Internal.into()
    }
}

impl From<AppError> for Refusal {
    fn from(e: AppError) -> Self {
        let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        Refusal::new(status, e.to_string())
    }
}

impl From<sqlx::Error> for Refusal {
    fn from(e: sqlx::Error) -> Self {
        match e {
            // The database is away (restarting, failing over): the caller may simply retry,
            // as a browser's EventSource does by itself.
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => {
                tracing::warn!(error = %e, "database unavailable");
                Refusal::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "The database is not answering: please try again shortly.",
                )
            }
            // AppError's conversion logs it and keeps its text out of the answer.
            other => AppError::from(other).into(),
        }
    }
}

impl From<std::io::Error> for Refusal {
    fn from(e: std::io::Error) -> Self {
        Refusal::internal("file input/output", e)
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        (
            self.status,
            [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
            self.message,
        )
            .into_response()
    }
}

/// The signed-in user of the request (401 without a live session).
pub struct SignedIn(pub CurrentUser);

impl<S> FromRequestParts<S> for SignedIn
where
    S: Send + Sync,
    PgPool: FromRef<S>,
{
    type Rejection = Refusal;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Refusal> {
        let pool = PgPool::from_ref(state);
        match app::auth::session_user(&pool, &parts.headers).await? {
            Some(me) => Ok(SignedIn(me)),
            None => Err(AppError::NotSignedIn.into()),
        }
    }
}

/// A public page (unsubscribing, signing up): plain HTML, no script of the dashboard's. The
/// title is escaped here; `body` is HTML the caller escaped.
pub fn public_page(status: StatusCode, title: &str, body: &str) -> Response {
    let title = html_escape::encode_text(title);
    let html = format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title></head>\
         <body style=\"font-family: system-ui, sans-serif; max-width: 32rem; margin: 4rem auto; padding: 0 1rem\">\
         <h1>{title}</h1>{body}</body></html>"
    );
    (status, axum::response::Html(html)).into_response()
}
