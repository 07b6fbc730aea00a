//! The edge of `app::action_error`: signs the error redirects leptos issues after a failed plain
//! form post, and removes from a page request an error this server did not sign, before the
//! page reads it.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderValue, Method, Request, Uri};
use axum::middleware::Next;
use axum::response::Response;
use sqlx::PgPool;

use app::action_error::{self, ERROR_PARAM, PATH_PARAM, SIGNATURE_PARAM};

pub async fn layer(State(pool): State<PgPool>, mut req: Request<Body>, next: Next) -> Response {
    if let Some((pairs, claim)) = reported_error(&req) {
        let vouched = match app::signing::Purpose::ActionError.key(&pool).await {
            Ok(key) => action_error::verify(
                &key,
                &claim.browser,
                &claim.path,
                &claim.error,
                &claim.signature,
            ),
            Err(e) => {
                tracing::warn!(error = %e, "action error key unavailable");
                false
            }
        };
        if !vouched {
            strip_error(req.uri_mut(), &pairs);
        }
    }
    let mut res = next.run(req).await;
    if res.status().is_redirection() {
        let browser = action_error::browser_value();
        let location = res
            .headers()
            .get(header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .map(str::to_owned);
        let signed = match location {
            Some(l) => sign_location(&pool, &browser, &l).await,
            None => None,
        };
        if let Some(signed) = signed {
            res.headers_mut().insert(header::LOCATION, signed);
            let cookie = format!(
                "{}={browser}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}",
                action_error::COOKIE,
                action_error::COOKIE_SECONDS
            );
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                res.headers_mut().append(header::SET_COOKIE, v);
            }
        }
    }
    res
}

/// What a page request says about an error to show.
struct Claim {
    browser: String,
    path: String,
    error: String,
    signature: String,
}

/// A page request's query parameters and its error claim, when it carries an error.
fn reported_error(req: &Request<Body>) -> Option<(Vec<(String, String)>, Claim)> {
    if req.method() != Method::GET {
        return None;
    }
    let pairs: Vec<(String, String)> = url::form_urlencoded::parse(req.uri().query()?.as_bytes())
        .into_owned()
        .collect();
    let param = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let claim = Claim {
        browser: app::auth::cookie(req.headers(), action_error::COOKIE).unwrap_or_default(),
        error: param(ERROR_PARAM)?,
        path: param(PATH_PARAM).unwrap_or_default(),
        signature: param(SIGNATURE_PARAM).unwrap_or_default(),
    };
    Some((pairs, claim))
}

/// `uri` without the error parameters (its other parameters kept, in order).
fn strip_error(uri: &mut Uri, pairs: &[(String, String)]) {
    let kept: Vec<&(String, String)> = pairs
        .iter()
        .filter(|(k, _)| ![ERROR_PARAM, PATH_PARAM, SIGNATURE_PARAM].contains(&k.as_str()))
        .collect();
    let mut path_and_query = uri.path().to_owned();
    if !kept.is_empty() {
        path_and_query.push('?');
        path_and_query.push_str(
            &url::form_urlencoded::Serializer::new(String::new())
                .extend_pairs(kept)
                .finish(),
        );
    }
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = path_and_query.parse().ok();
    if let Ok(stripped) = Uri::from_parts(parts) {
        *uri = stripped;
    }
}

/// The redirect's `Location` with `__sig` added, when it carries an error.
async fn sign_location(pool: &PgPool, browser: &str, location: &str) -> Option<HeaderValue> {
    let mut url = url::Url::parse(location).ok()?;
    let (path, error) = {
        let mut path = None;
        let mut error = None;
        for (k, v) in url.query_pairs() {
            match k.as_ref() {
                PATH_PARAM => path = Some(v.into_owned()),
                ERROR_PARAM => error = Some(v.into_owned()),
                _ => {}
            }
        }
        (path.unwrap_or_default(), error?)
    };
    let key = match app::signing::Purpose::ActionError.key(pool).await {
        Ok(k) => k,
        Err(e) => {
            tracing::warn!(error = %e, "action error key unavailable");
            return None;
        }
    };
    let signature = action_error::sign(&key, browser, &path, &error);
    url.query_pairs_mut()
        .append_pair(SIGNATURE_PARAM, &signature);
    HeaderValue::from_str(url.as_str()).ok()
}
