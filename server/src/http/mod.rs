//! The HTTP edge: the router (this file: dashboard, server functions, REST, public pages,
//! health, the CSRF guard), and beside it what every request passes through or may use.

/// Only errors this server signed show on a page after a plain form post.
pub mod action_errors;
/// CSV import into a list (streamed, in the background) and export.
pub mod audience_io;
/// Tracked links: verify, record the click, redirect to the signed target.
pub mod clicks;
/// The client's address and scheme, from the peer or a trusted reverse proxy.
pub mod client_addr;
/// Accepting connections: a request-head timeout and a cap per client address.
pub mod listen;
/// Prometheus `/metrics`.
pub mod metrics;
/// The plain routes' signed-in user and plain-text refusals.
pub mod plain;
/// Live campaign progress for browsers: one LISTEN per replica fanned out as server-sent events.
pub mod progress_stream;
/// Content-Security-Policy (with the page's nonce) and the other security headers.
pub mod security_headers;
/// Public sign-up with double opt-in: the list's page, embedded forms, the confirm link.
pub mod signup;
/// The dashboard's built files inside the release executable.
pub mod site_assets;
/// What every request handler may use (the database, the site, the progress fan-out, the edge).
pub mod state;
/// Public one-click unsubscribe (RFC 8058) and its signing keys.
pub mod unsubscribe;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, Method, Request, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use leptos::prelude::*;
use leptos_axum::{generate_route_list, AxumRouteListing, LeptosRoutes};
use sqlx::PgPool;
use std::time::Duration;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

use app::api::ApiConfig;
use app::{shell, App};

use crate::ops::shutdown::Shutdown;
pub use state::{AppState, Edge};

/// The largest request body but a CSV import's: server function arguments and forms, the
/// largest of which is a pasted list of addresses.
pub const MAX_REQUEST_BYTES: usize = 2 * 1024 * 1024;
/// Time for a CSV import's upload (up to 64 MB from a slow link).
pub const IMPORT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// A body limit (413 past it) and a timeout (408) on every route of `router`.
pub fn bounded<S: Clone + Send + Sync + 'static>(
    router: Router<S>,
    max_bytes: usize,
    timeout: Duration,
) -> Router<S> {
    timed(router.layer(RequestBodyLimitLayer::new(max_bytes)), timeout)
}

/// A timeout (408) on every route of `router`, for a router that sets its own body limits.
pub fn timed<S: Clone + Send + Sync + 'static>(router: Router<S>, timeout: Duration) -> Router<S> {
    router.layer(TimeoutLayer::with_status_code(
        StatusCode::REQUEST_TIMEOUT,
        timeout,
    ))
}

/// What one replica's HTTP side is made of. [`build`] wires it, the same way for
/// `mailroom serve` and for the tests.
pub struct Settings {
    pub pool: PgPool,
    /// Where the site's files are (ignored when `embedded_site`).
    pub site_root: String,
    /// Serve the site built into the executable.
    pub embedded_site: bool,
    /// `cargo leptos watch`'s development mode (the live-reload client); never in production.
    pub dev: bool,
    pub unsubscribe_keys: app::unsubscribe::Keys,
    pub edge: Edge,
    pub api: ApiConfig,
}

/// The router of a replica listening on `addr`, with its progress listener started (the
/// listener, and every open progress stream, end when `shutdown` is requested).
pub fn build(settings: Settings, addr: std::net::SocketAddr, shutdown: Shutdown) -> Router {
    let leptos_options = LeptosOptions::builder()
        .output_name("mailroom")
        .site_root(settings.site_root)
        .site_pkg_dir("pkg")
        .site_addr(addr)
        .env(if settings.dev {
            leptos::config::Env::DEV
        } else {
            leptos::config::Env::PROD
        })
        .build();
    let progress = crate::http::progress_stream::Hub::new(shutdown);
    tokio::spawn(progress.clone().listen(settings.pool.clone()));
    router(
        AppState {
            leptos_options,
            pool: settings.pool,
            unsubscribe_keys: settings.unsubscribe_keys,
            progress,
            edge: settings.edge,
            embedded_site: settings.embedded_site,
        },
        settings.api,
    )
}

/// The whole HTTP surface: health probes, server functions and pages, static files, and the
/// public unsubscribe endpoints, relay webhooks and the REST API (outside the same-origin check
/// and the session: they are authenticated by a signed token, the relay's signature or an API
/// token, and are called from nowhere). Every route has a body limit and a
/// timeout but the progress stream (an event stream, open as long as the page) and the CSV
/// import (its own 64 MB limit and a long timeout); every response has the security headers.
fn router(state: AppState, api: ApiConfig) -> Router {
    let edge = state.edge.clone();
    let dev = state.leptos_options.env == leptos::config::Env::DEV;
    let unsubscribe =
        crate::http::unsubscribe::routes(state.pool.clone(), state.unsubscribe_keys.clone());
    let hooks = crate::feedback::webhooks::routes(state.pool.clone());
    let clicks = crate::http::clicks::routes(state.pool.clone());
    let signup = crate::http::signup::routes(state.pool.clone(), edge.signup_limits);
    // The API's erasure removes captured copies, as the dashboard's does: it needs the settings.
    let rest = crate::rest::routes(crate::rest::RestState {
        pool: state.pool.clone(),
        limits: edge.api_limits,
    })
    .layer(axum::Extension(api.clone()));
    let routes = route_list();
    let context = {
        let pool = state.pool.clone();
        let figures = app::api::figures::Figures::default();
        move || {
            provide_context(pool.clone());
            provide_context(figures.clone());
            provide_context(api.clone());
            provide_context(app::api::RequestUser::default());
            crate::http::security_headers::provide_page_policy(dev);
        }
    };
    let pages = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(crate::http::metrics::handler))
        .merge(crate::http::audience_io::export_routes())
        .leptos_routes_with_context(&state, routes, context.clone(), {
            let options = state.leptos_options.clone();
            move || shell(options.clone())
        });
    // Anything else is a site file or the app's "not found" page.
    let pages = if state.embedded_site {
        let not_found = leptos_axum::render_app_to_stream_with_context(context, {
            let options = state.leptos_options.clone();
            move || shell(options.clone())
        });
        pages.fallback(move |req: Request<Body>| {
            let not_found = not_found.clone();
            async move {
                match crate::http::site_assets::response(
                    req.method(),
                    req.uri().path(),
                    req.headers(),
                ) {
                    Some(file) => file,
                    None => not_found(req).await,
                }
            }
        })
    } else {
        pages.fallback(leptos_axum::file_and_error_handler_with_context::<
            AppState,
            _,
        >(context, shell))
    };
    let app = bounded(pages, MAX_REQUEST_BYTES, edge.request_timeout)
        .merge(bounded(
            crate::http::audience_io::import_routes(),
            crate::http::audience_io::MAX_IMPORT_BYTES + 64 * 1024,
            IMPORT_TIMEOUT,
        ))
        .route(
            "/api/campaigns/{id}/progress",
            get(crate::http::progress_stream::handler),
        )
        .layer(middleware::from_fn(same_origin_writes))
        .layer(middleware::from_fn(refusal_status))
        .layer(middleware::from_fn(page_redirects))
        .layer(middleware::from_fn_with_state(
            state.pool.clone(),
            signed_in_pages,
        ))
        .layer(middleware::from_fn_with_state(
            state.pool.clone(),
            crate::http::action_errors::layer,
        ))
        .with_state(state)
        .merge(bounded(
            unsubscribe,
            MAX_REQUEST_BYTES,
            edge.request_timeout,
        ))
        .merge(bounded(
            hooks,
            crate::feedback::webhooks::MAX_BODY_BYTES,
            edge.request_timeout,
        ))
        // The API limits each route's body itself (the bulk upsert takes more than the rest):
        // a limit here would be met first and override it.
        .merge(timed(rest, edge.request_timeout))
        .merge(bounded(signup, MAX_REQUEST_BYTES, edge.request_timeout))
        .merge(bounded(clicks, MAX_REQUEST_BYTES, edge.request_timeout))
        .layer(middleware::from_fn_with_state(
            edge.trust_proxy,
            crate::http::client_addr::layer,
        ))
        .layer(middleware::from_fn_with_state(edge.clone(), known_host))
        // Every error under /api/v1 is a problem document, whichever layer answered it (the
        // method router's 405, a body limit's 413, the timeout's 408, the host check's 421).
        .layer(middleware::from_fn(crate::rest::problem_answers))
        // Outermost, so what it logs is the answer the client got (a server function's refusal
        // is a 4xx by then, not the 500 leptos first gives it) and a timeout names its route.
        // A span per request, named by its route (never the raw path: invitation and
        // unsubscribe links carry tokens), so every line logged while serving it says where.
        .layer(
            tower_http::trace::TraceLayer::new_for_http().make_span_with(|req: &Request<Body>| {
                let route = req
                    .extensions()
                    .get::<axum::extract::MatchedPath>()
                    .map(|p| p.as_str().to_owned())
                    .unwrap_or_else(|| "(site file or not found)".to_owned());
                tracing::info_span!("request", method = %req.method(), route)
            }),
        );
    crate::http::security_headers::apply(app, dev)
}

/// The app's routes, generated once per process. Generating them suppresses resource loads
/// process-wide (leptos' `SuppressResourceLoad`, leptos-rs/leptos#4773): a page whose resource
/// first polled while another router was being built waited forever (a 408 after the request
/// timeout). Production builds one router; the test suite builds one per test, concurrently with
/// other tests' pages.
fn route_list() -> Vec<AxumRouteListing> {
    static ROUTES: std::sync::OnceLock<Vec<AxumRouteListing>> = std::sync::OnceLock::new();
    ROUTES.get_or_init(|| generate_route_list(App)).clone()
}

/// A page on another name that resolves to us (DNS rebinding) must not be able to read or drive
/// the dashboard: a request must name one of our hosts. Health probes, which load balancers
/// address by IP, are exempt.
async fn known_host(State(edge): State<Edge>, req: Request<Body>, next: Next) -> Response {
    if edge.allowed_hosts.is_empty() || matches!(req.uri().path(), "/healthz" | "/readyz") {
        return next.run(req).await;
    }
    let h = req.headers();
    let named = edge
        .trust_proxy
        .then(|| h.get("x-forwarded-host"))
        .flatten()
        .or_else(|| h.get(header::HOST))
        .and_then(|v| v.to_str().ok())
        .or_else(|| req.uri().host())
        .unwrap_or_default();
    let host = host_name(named);
    if edge.allowed_hosts.contains(&host) {
        return next.run(req).await;
    }
    (
        StatusCode::MISDIRECTED_REQUEST,
        "This server does not answer for that host name: use its configured address (--public-url, --allowed-hosts).",
    )
        .into_response()
}

/// `Host: Example.org:3000` → `example.org`; `[::1]:3000` → `::1`.
pub fn host_name(authority: &str) -> String {
    let authority = authority.trim().rsplit('@').next().unwrap_or_default();
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        authority.split(':').next().unwrap_or_default()
    };
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// leptos answers every server-function error 500; a refusal (not signed in, forbidden, not
/// found, invalid, conflict, throttled) gets its own status here, read from the error the body
/// carries. Only `/api/` answers are looked at, and only 500s.
async fn refusal_status(req: Request<Body>, next: Next) -> Response {
    let server_fn = req.uri().path().starts_with("/api/");
    let res = next.run(req).await;
    if !server_fn || res.status() != StatusCode::INTERNAL_SERVER_ERROR {
        return res;
    }
    let (mut parts, body) = res.into_parts();
    // An error body is one short JSON value (its message is cut to
    // `app::domain::input::MESSAGE_MAX_CHARS`); anything longer is not one of ours, and is
    // answered as the unexpected, not as an empty 500.
    let Ok(bytes) = axum::body::to_bytes(body, 64 * 1024).await else {
        tracing::error!("a server function's error answer is over 64 KiB");
        let internal = serde_json::to_vec(&app::error::AppError::Internal).unwrap_or_default();
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            [(header::CONTENT_TYPE, "application/json")],
            internal,
        )
            .into_response();
    };
    if let Ok(e) = serde_json::from_slice::<app::error::AppError>(&bytes) {
        parts.status = StatusCode::from_u16(e.status()).unwrap_or(parts.status);
    }
    Response::from_parts(parts, Body::from(bytes))
}

/// A signed-in page asked for without a live session is sent to /login before anything
/// renders: a real redirect for every client, whatever the page would have done. With one, the
/// user found rides along in the request, so the page's server functions do not look again.
async fn signed_in_pages(
    State(pool): State<PgPool>,
    mut req: Request<Body>,
    next: Next,
) -> Response {
    if req.method() != Method::GET || !app::pages::layout::is_signed_in_page(req.uri().path()) {
        return next.run(req).await;
    }
    match app::auth::session_user(&pool, req.headers()).await {
        Ok(Some(me)) => {
            req.extensions_mut().insert(app::api::KnownUser(me));
            next.run(req).await
        }
        Ok(None) => (StatusCode::FOUND, [(header::LOCATION, "/login")]).into_response(),
        Err(e) => {
            tracing::warn!(error = %e, "session lookup failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "The database is not answering: please try again shortly.",
            )
                .into_response()
        }
    }
}

/// A page that redirects (a signed-out browser sent to /login) is a redirect for every
/// client: leptos always sets the `Location`, but the 302 only when the request said it accepts
/// HTML, and a client that did not (curl, a probe) would get a 200 page saying "Please sign in.".
async fn page_redirects(req: Request<Body>, next: Next) -> Response {
    let page = req.method() == Method::GET && !req.uri().path().starts_with("/api/");
    let mut res = next.run(req).await;
    if page && res.status() == StatusCode::OK && res.headers().contains_key(header::LOCATION) {
        *res.status_mut() = StatusCode::FOUND;
    }
    res
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
