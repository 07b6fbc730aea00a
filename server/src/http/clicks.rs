//! `/c/<token>`: a tracked link. A genuine token (signed for its delivery and its target)
//! records the click and redirects to the target it carries; anything else is a 404 that
//! records nothing, so no one can make Mailroom redirect elsewhere. A link whose delivery is
//! gone (purged) still leads where it did.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use sqlx::PgPool;
use tokio::sync::OnceCell;

use crate::http::plain::public_page as page;

#[derive(Clone)]
struct Clicks {
    pool: PgPool,
    /// The signing key, read from the database at the first click.
    key: Arc<OnceCell<Vec<u8>>>,
}

pub fn routes(pool: PgPool) -> Router {
    Router::new()
        .route("/c/{token}", get(click))
        .with_state(Clicks {
            pool,
            key: Arc::new(OnceCell::new()),
        })
}

/// GET and HEAD (axum answers HEAD with the GET handler; a HEAD is a prefetcher's).
async fn click(
    State(s): State<Clicks>,
    method: Method,
    headers: HeaderMap,
    Path(token): Path<String>,
) -> Response {
    let key = match s
        .key
        .get_or_try_init(|| app::signing::Purpose::Click.key(&s.pool))
        .await
    {
        Ok(k) => k,
        Err(e) => {
            tracing::error!(error = %e, "cannot read the click-tracking key");
            return page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Try again",
                "<p>This link cannot be followed right now. Please try again in a minute.</p>",
            );
        }
    };
    let Some((job, target)) = app::click::verify(key, &token) else {
        return invalid();
    };
    let Ok(location) = HeaderValue::from_str(&target) else {
        return invalid();
    };
    let agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    let scanner = app::click::scanner_request(method == Method::HEAD, agent);
    if let Err(e) =
        app::db::clicks::record(&s.pool, &job, &target, scanner, app::click::SCANNER_SECONDS).await
    {
        // The reader still gets where the link goes; only the count misses one.
        tracing::warn!(error = %e, "a click could not be recorded");
    }
    (
        StatusCode::FOUND,
        [
            (header::LOCATION, location),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
        ],
    )
        .into_response()
}

fn invalid() -> Response {
    page(
        StatusCode::NOT_FOUND,
        "Link not valid",
        "<p>This link is not valid. Please use the link from the message itself.</p>",
    )
}
