//! Public unsubscribe endpoints (RFC 8058). `POST /u/{token}` is the one-click unsubscribe mail
//! clients send (`List-Unsubscribe=One-Click`) and also what the confirmation page's button
//! posts: it writes a suppression and answers 200. `GET /u/{token}` only shows that
//! confirmation page: link scanners and prefetchers follow GETs, so a GET never unsubscribes.
//! Exempt from the dashboard's same-origin check by design; the HMAC token is the credential.
//! The confirmation page is also the subscriber's preference page: `POST /u/{token}/lists`
//! takes them off the lists they uncheck (never onto one) without unsubscribing from the rest.

use crate::http::plain::public_page as page;
use anyhow::{anyhow, Context};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use base64::Engine;
use sqlx::PgPool;

use app::unsubscribe::{Claim, Keys};

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
            app::db::secrets::ensure(pool, app::signing::Purpose::Unsubscribe.secret(), &fresh)
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
        .route("/u/{token}/lists", post(preferences))
        .with_state(Unsubscribe { pool, keys })
}

async fn confirm_page(State(s): State<Unsubscribe>, Path(token): Path<String>) -> Response {
    let Some(claim) = s.keys.verify(&token) else {
        return invalid();
    };
    let target = async {
        let mut conn = s.pool.acquire().await?;
        let who =
            app::db::audience::unsubscribe_target(&mut conn, claim.org_id, claim.subscriber_id)
                .await?;
        let lists =
            app::db::audience::member_lists(&mut conn, claim.org_id, claim.subscriber_id).await?;
        Ok::<_, sqlx::Error>(who.map(|w| (w, lists)))
    };
    match target.await {
        Ok(Some(((org, email), lists))) => {
            let (org, email) = (
                html_escape::encode_text(&org),
                html_escape::encode_text(&email),
            );
            let mut body = format!(
                "<p>Stop all mailing-list mail from <strong>{org}</strong> to <strong>{email}</strong>?</p>
                 <form method=\"post\"><button type=\"submit\" id=\"unsubscribe\">Unsubscribe from everything</button></form>"
            );
            if !lists.is_empty() {
                let boxes: String = lists
                    .iter()
                    .map(|(id, name)| {
                        format!(
                            "<label style=\"display:block\"><input type=\"checkbox\" name=\"keep\" value=\"{id}\" checked> {}</label>",
                            html_escape::encode_text(name)
                        )
                    })
                    .collect();
                body.push_str(&format!(
                    "<h2>Or choose your lists</h2>
                     <p>Uncheck the lists you no longer want; you stay on the others.</p>
                     <form method=\"post\" action=\"/u/{token}/lists\">{boxes}
                     <p><button type=\"submit\" id=\"save-lists\">Save my lists</button></p></form>",
                    token = html_escape::encode_double_quoted_attribute(&token),
                ));
            }
            page(StatusCode::OK, "Your subscription", &body)
        }
        Ok(None) => invalid(),
        Err(e) => unavailable(e),
    }
}

/// The preference form: `keep` repeated, one per list to stay on.
async fn preferences(
    State(s): State<Unsubscribe>,
    Path(token): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let Some(claim) = s.keys.verify(&token) else {
        return invalid();
    };
    let keep: Vec<i64> = url::form_urlencoded::parse(&body)
        .filter(|(k, _)| k == "keep")
        .filter_map(|(_, v)| v.parse().ok())
        .collect();
    let done = async {
        let mut tx = s.pool.begin().await?;
        if app::db::audience::unsubscribe_target(&mut tx, claim.org_id, claim.subscriber_id)
            .await?
            .is_none()
        {
            return Ok(None);
        }
        let left =
            app::db::audience::leave_lists(&mut tx, claim.org_id, claim.subscriber_id, &keep)
                .await?;
        if !left.is_empty() {
            app::db::audit::record(
                &mut tx,
                app::db::audit::Entry {
                    org_id: claim.org_id,
                    actor_id: None,
                    api_token_id: None,
                    action: app::domain::AuditAction::SubscriberPreferences,
                    object_type: "subscriber",
                    object_id: Some(claim.subscriber_id.to_string()),
                    before: None,
                    after: Some(serde_json::json!({ "left": left, "by": "preference page" })),
                },
            )
            .await?;
        }
        tx.commit().await?;
        Ok::<_, sqlx::Error>(Some(left))
    };
    match done.await {
        Ok(Some(left)) if left.is_empty() => page(
            StatusCode::OK,
            "Saved",
            "<p>Nothing changed: you stay on all your lists.</p>",
        ),
        Ok(Some(left)) => page(
            StatusCode::OK,
            "Saved",
            &format!(
                "<p>You are off {}. You stay on your other lists.</p>",
                html_escape::encode_text(&left.join(", "))
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
    let source = format!("unsubscribe link, {}", claim.from);
    let done = async {
        let mut conn = s.pool.acquire().await?;
        app::db::audience::suppress_subscriber(
            &mut conn,
            claim.org_id,
            claim.subscriber_id,
            app::domain::SuppressionReason::Unsubscribed,
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
