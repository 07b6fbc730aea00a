use leptos::prelude::*;

use super::CurrentUser;
use crate::error::AppError;

/// Who is signed in (None on the login page or after the session ended).
#[server(endpoint = "me")]
pub async fn me() -> Result<Option<CurrentUser>, AppError> {
    match super::current_user().await {
        Ok(u) => Ok(Some(u)),
        Err(AppError::NotSignedIn) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(feature = "ssr")]
const WRONG_LOGIN: &str = "Wrong e-mail address or password.";

/// Signs in: on success sets the session cookie and sends the browser to the Overview.
///
/// Throttled (see `domain::login_throttle`): a locked attempt is refused before its password is
/// checked, with the wait in the message and a `Retry-After` header. Whatever the address, known
/// or not, the answers and the time they take are the same: an unknown address is counted like a
/// real one and still pays for one Argon2 verification.
#[server(endpoint = "login")]
pub async fn login(email: String, password: String) -> Result<(), AppError> {
    use crate::domain::login_throttle::{self, Keys, Verdict};
    use crate::{auth, db, domain::EmailAddress};
    let email = EmailAddress::parse(&email)
        .map_err(|e| AppError::Invalid(format!("Enter your e-mail address: {e}.")))?;
    let pool = super::pool()?;
    let response = expect_context::<leptos_axum::ResponseOptions>();
    // Without a known peer (never so behind `mailroom serve`) all such requests share one count.
    let ip = super::client()
        .ip
        .map(login_throttle::ip_key)
        .unwrap_or_else(|| "unknown".into());
    let keys = Keys::new(email.lower(), &ip);
    if let Verdict::Locked { seconds } = db::login_throttle::begin_attempt(&pool, &keys).await? {
        if let Ok(v) = http::HeaderValue::from_str(&seconds.to_string()) {
            response.insert_header(http::header::RETRY_AFTER, v);
        }
        return Err(AppError::Throttled(login_throttle::locked_message(seconds)));
    }
    let row = db::user::find_for_login(&pool, &email).await?;
    let stored = row.as_ref().map(|r| r.password_hash.clone());
    // Argon2 is deliberately slow and takes ~19 MiB: off the async workers, a few at a time.
    static VERIFYING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(4);
    let _permit = VERIFYING.acquire().await.map_err(|_| AppError::Internal)?;
    let ok =
        tokio::task::spawn_blocking(move || auth::verify_password(stored.as_deref(), &password))
            .await
            .map_err(|_| AppError::Internal)?;
    let row = match row {
        Some(r) if ok && !r.disabled => r,
        _ => {
            // The failure is already counted; old counters go while we are here.
            if let Err(e) =
                db::login_throttle::sweep(&pool, login_throttle::SWEEP_AFTER_SECONDS, 100).await
            {
                tracing::warn!(error = %e, "login throttle sweep failed");
            }
            return Err(AppError::Invalid(WRONG_LOGIN.into()));
        }
    };
    db::login_throttle::record_success(&pool, &keys).await?;
    start_session(&pool, row.org_id, row.id).await
}

/// Signs out: ends the server-side session and clears the cookie.
#[server(endpoint = "logout")]
pub async fn logout() -> Result<(), AppError> {
    use crate::{auth, db};
    let secure = super::secure_cookies();
    if let Some(parts) = use_context::<http::request::Parts>() {
        if let Some(token) = auth::token_from_headers(&parts.headers) {
            db::sessions::delete(&super::pool()?, &auth::hash_token(&token)).await?;
        }
    }
    set_cookie(&auth::session_cookie(None, secure))?;
    leptos_axum::redirect("/login");
    Ok(())
}

/// Signs `user_id` of `org_id` in: a new server-side session and its cookie, then home.
#[cfg(feature = "ssr")]
pub(super) async fn start_session(
    pool: &sqlx::PgPool,
    org_id: i64,
    user_id: i64,
) -> Result<(), AppError> {
    use crate::auth;
    let token = auth::new_session_token();
    crate::db::sessions::create(
        pool,
        &auth::hash_token(&token),
        org_id,
        user_id,
        auth::SESSION_TTL_SECONDS,
    )
    .await?;
    set_cookie(&auth::session_cookie(Some(&token), super::secure_cookies()))?;
    leptos_axum::redirect("/");
    Ok(())
}

/// Adds a `Set-Cookie` header to the server function's response.
#[cfg(feature = "ssr")]
pub(super) fn set_cookie(value: &str) -> Result<(), AppError> {
    let response = expect_context::<leptos_axum::ResponseOptions>();
    let value = http::HeaderValue::from_str(value).map_err(|_| AppError::Internal)?;
    response.append_header(http::header::SET_COOKIE, value);
    Ok(())
}
