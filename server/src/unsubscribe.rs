//! Public unsubscribe endpoints (RFC 8058). `POST /u/{token}` is the one-click unsubscribe mail
//! clients send (`List-Unsubscribe=One-Click`) and also what the confirmation page's button
//! posts: it writes a suppression and answers 200. `GET /u/{token}` only shows that
//! confirmation page: link scanners and prefetchers follow GETs, so a GET never unsubscribes.
//! Exempt from the dashboard's same-origin check by design; the HMAC token is the credential.

use anyhow::{anyhow, Context};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use base64::Engine;
use sqlx::PgPool;

use app::unsubscribe::{Claim, Keys};

/// The secret's name in the `secrets` table when no keys are configured.
const SECRET: &str = "unsubscribe_hmac";

/// The signing keys: `MAILROOM_UNSUBSCRIBE_KEYS` (comma-separated base64, newest first) when
/// given, else generated once and stored in the database so every replica shares them.
pub async fn load_keys(pool: &PgPool, configured: Option<&str>) -> anyhow::Result<Keys> {
    let keys = match configured.map(str::trim).filter(|s| !s.is_empty()) {
        Some(list) => list
            .split(',')
            .map(|k| base64::engine::general_purpose::STANDARD.decode(k.trim()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| {
                anyhow!("MAILROOM_UNSUBSCRIBE_KEYS must be comma-separated base64 keys")
            })?,
        None => {
            let fresh: [u8; 32] = rand::random();
            app::db::secrets::ensure(pool, SECRET, &fresh)
                .await
                .context("reading the unsubscribe signing key")?
        }
    };
    Keys::new(keys).ok_or_else(|| {
        anyhow!(
            "every unsubscribe key must be at least {} bytes",
            app::unsubscribe::MIN_KEY_LEN
        )
    })
}

/// The link in a campaign message's `List-Unsubscribe` header and footer.
pub fn link(public_url: &str, keys: &Keys, claim: Claim) -> String {
    format!(
        "{}/u/{}",
        public_url.trim_end_matches('/'),
        keys.sign(claim)
    )
}

#[derive(Clone)]
struct Unsubscribe {
    pool: PgPool,
    keys: Keys,
}

pub fn routes(pool: PgPool, keys: Keys) -> Router {
    Router::new()
        .route("/u/{token}", get(confirm_page).post(unsubscribe))
        .with_state(Unsubscribe { pool, keys })
}

async fn confirm_page(State(s): State<Unsubscribe>, Path(token): Path<String>) -> Response {
    let Some(claim) = s.keys.verify(&token) else {
        return invalid();
    };
    let target = async {
        let mut conn = s.pool.acquire().await?;
        app::db::audience::unsubscribe_target(&mut conn, claim.org_id, claim.subscriber_id).await
    };
    match target.await {
        Ok(Some((org, email))) => page(
            StatusCode::OK,
            "Unsubscribe",
            &format!(
                "<p>Stop all mailing-list mail from <strong>{}</strong> to <strong>{}</strong>?</p>
                 <form method=\"post\"><button type=\"submit\">Unsubscribe</button></form>",
                html_escape::encode_text(&org),
                html_escape::encode_text(&email)
            ),
        ),
        Ok(None) => invalid(),
        Err(e) => unavailable(e),
    }
}

async fn unsubscribe(State(s): State<Unsubscribe>, Path(token): Path<String>) -> Response {
    let Some(claim) = s.keys.verify(&token) else {
        return invalid();
    };
    let source = format!("unsubscribe link, campaign {}", claim.campaign_id);
    let done = async {
        let mut conn = s.pool.acquire().await?;
        app::db::audience::suppress_subscriber(
            &mut conn,
            claim.org_id,
            claim.subscriber_id,
            "unsubscribed",
            &source,
        )
        .await
    };
    match done.await {
        // Already suppressed is a success too: the person asked for it, and has it.
        Ok(Some(_)) => page(
            StatusCode::OK,
            "Unsubscribed",
            "<p>You are unsubscribed and will get no more mailing-list mail from us.</p>",
        ),
        Ok(None) => invalid(),
        Err(e) => unavailable(e),
    }
}

fn invalid() -> Response {
    page(
        StatusCode::NOT_FOUND,
        "Link not valid",
        "<p>This unsubscribe link is not valid. Please use the link from the message itself.</p>",
    )
}

fn unavailable(e: sqlx::Error) -> Response {
    tracing::error!(error = %e, "unsubscribe failed");
    page(
        StatusCode::SERVICE_UNAVAILABLE,
        "Try again",
        "<p>We could not record this right now. Please try again in a minute.</p>",
    )
}

fn page(status: StatusCode, title: &str, body: &str) -> Response {
    let html = format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title}</title></head>\
         <body style=\"font-family: system-ui, sans-serif; max-width: 32rem; margin: 4rem auto; padding: 0 1rem\">\
         <h1>{title}</h1>{body}</body></html>"
    );
    (status, Html(html)).into_response()
}
