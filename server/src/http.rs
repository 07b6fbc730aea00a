use axum::body::Body;
use axum::extract::{FromRef, State};
use axum::http::{header, Method, Request, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use leptos::prelude::*;
use leptos_axum::{generate_route_list, LeptosRoutes};
use sqlx::PgPool;

use app::api::ApiConfig;
use app::{shell, App};

#[derive(Clone)]
pub struct AppState {
    pub leptos_options: LeptosOptions,
    pub pool: PgPool,
    /// Verifies the tokens of unsubscribe links.
    pub unsubscribe_keys: app::unsubscribe::Keys,
    /// Fans the replica's progress notifications out to open campaign pages.
    pub progress: crate::progress_stream::Hub,
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}

impl FromRef<AppState> for PgPool {
    fn from_ref(state: &AppState) -> Self {
        state.pool.clone()
    }
}

/// The whole HTTP surface: health probes, server functions and pages, static files, and the
/// public unsubscribe endpoints (outside the same-origin check: they are authenticated by their
/// signed token, and mail clients post to them from nowhere).
pub fn router(state: AppState, api: ApiConfig) -> Router {
    let unsubscribe =
        crate::unsubscribe::routes(state.pool.clone(), state.unsubscribe_keys.clone());
    let routes = generate_route_list(App);
    let context = {
        let pool = state.pool.clone();
        move || {
            provide_context(pool.clone());
            provide_context(api.clone());
            provide_context(app::api::RequestUser::default());
        }
    };
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(crate::metrics::handler))
        // An event stream: no request timeout may ever apply to it (by design).
        .route(
            "/api/campaigns/{id}/progress",
            get(crate::progress_stream::handler),
        )
        .merge(crate::audience_io::routes())
        .leptos_routes_with_context(&state, routes, context, {
            let options = state.leptos_options.clone();
            move || shell(options.clone())
        })
        .fallback(leptos_axum::file_and_error_handler::<AppState, _>(shell))
        .layer(middleware::from_fn(same_origin_writes))
        .with_state(state)
        .merge(unsubscribe)
}

/// Ready when the database answers.
async fn readyz(State(pool): State<PgPool>) -> Response {
    match app::db::health::ping(&pool).await {
        Ok(()) => (StatusCode::OK, "ready").into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "readiness check failed");
            (StatusCode::SERVICE_UNAVAILABLE, "database unavailable").into_response()
        }
    }
}

/// CSRF protection for every state-changing request: browsers always send `Origin` (and
/// `Sec-Fetch-Site`) on cross-site POSTs, so a write is accepted only from our own origin. This
/// covers server functions called by the hydrated app and plain form posts before the wasm has
/// loaded; the session cookie is also `SameSite=Lax`.
async fn same_origin_writes(req: Request<Body>, next: Next) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) || is_same_origin(&req)
    {
        return next.run(req).await;
    }
    tracing::warn!(path = %req.uri().path(), "cross-site write refused");
    (StatusCode::FORBIDDEN, "Cross-site request refused.").into_response()
}

fn is_same_origin(req: &Request<Body>) -> bool {
    let h = req.headers();
    let header_str = |name: &str| h.get(name).and_then(|v| v.to_str().ok());
    if let Some(origin) = header_str(header::ORIGIN.as_str()) {
        // "null" (sandboxed frames, some redirects) is never our origin. Behind a reverse proxy
        // the public host arrives as X-Forwarded-Host; a cross-site page cannot set that header
        // on a victim's request without a CORS preflight, which we never grant.
        let Some((_, authority)) = origin.split_once("://") else {
            return false;
        };
        return [
            header_str(header::HOST.as_str()),
            header_str("x-forwarded-host"),
        ]
        .contains(&Some(authority));
    }
    match h.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        Some(site) => site == "same-origin" || site == "none",
        // Neither header: not a browser (curl, scripts), which cannot carry a victim's cookie.
        None => true,
    }
}
