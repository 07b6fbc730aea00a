//! `/c/<token>`: a tracked link. A genuine token (signed for its delivery and its target)
//! records the click and redirects to the target it carries; anything else is a 404 that
//! records nothing, so no one can make Mailroom redirect elsewhere. A link whose delivery is
//! gone (purged) still leads where it did. `/o/<token>`: the open-tracking pixel, a token
//! signed for its delivery alone; a genuine one records an open and answers a transparent GIF.

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
        .route("/o/{token}", get(open))
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
    let key = match s.key().await {
        Ok(k) => k,
        Err(unavailable) => return unavailable,
    };
    let Some((job, target)) = app::click::verify_link(key, &token) else {
        return invalid();
    };
    let Ok(location) = HeaderValue::from_str(&target) else {
        return invalid();
    };
    let scanner = machine(&method, &headers);
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

/// GET and HEAD of the pixel. Always the same image, never cached, so each open is a request.
async fn open(
    State(s): State<Clicks>,
    method: Method,
    headers: HeaderMap,
    Path(token): Path<String>,
) -> Response {
    let key = match s.key().await {
        Ok(k) => k,
        Err(unavailable) => return unavailable,
    };
    let Some(job) = app::click::verify_open(key, &token) else {
        return invalid();
    };
    let scanner = machine(&method, &headers);
    if let Err(e) =
        app::db::clicks::record_open(&s.pool, &job, scanner, app::click::SCANNER_SECONDS).await
    {
        tracing::warn!(error = %e, "an open could not be recorded");
    }
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, HeaderValue::from_static("image/gif")),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
            (
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            ),
        ],
        PIXEL,
    )
        .into_response()
}

/// A 1×1 transparent GIF.
const PIXEL: &[u8] = &[
    0x47, 0x49, 0x46, 0x38, 0x39, 0x61, 0x01, 0x00, 0x01, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xff, 0xff, 0xff, 0x21, 0xf9, 0x04, 0x01, 0x00, 0x00, 0x00, 0x00, 0x2c, 0x00, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x01, 0x00, 0x00, 0x02, 0x02, 0x44, 0x01, 0x00, 0x3b,
];

impl Clicks {
    /// The signing key, read from the database once; a page asking to try again without it.
    async fn key(&self) -> Result<&Vec<u8>, Response> {
        self.key
            .get_or_try_init(|| app::signing::Purpose::Click.key(&self.pool))
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "cannot read the click-tracking key");
                page(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Try again",
                    "<p>This link cannot be followed right now. Please try again in a minute.</p>",
                )
            })
    }
}

/// A request that is a machine's by its own account (a HEAD, a scanner's user agent).
fn machine(method: &Method, headers: &HeaderMap) -> bool {
    let agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok());
    app::click::scanner_request(method == Method::HEAD, agent)
}

fn invalid() -> Response {
    page(
        StatusCode::NOT_FOUND,
        "Link not valid",
        "<p>This link is not valid. Please use the link from the message itself.</p>",
    )
}
