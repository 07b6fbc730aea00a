//! What every request handler may use, built once at start: the database, the site, the
//! replica's progress fan-out and how the server meets the outside. Handlers take only the part
//! they need (`State<PgPool>`, `State<Hub>`, …), so no handler module depends on the router.

use axum::extract::FromRef;
use leptos::prelude::LeptosOptions;
use sqlx::PgPool;
use std::time::Duration;

use crate::http::progress_stream::Hub;

#[derive(Clone)]
pub struct AppState {
    pub leptos_options: LeptosOptions,
    pub pool: PgPool,
    /// Verifies the tokens of unsubscribe links.
    pub unsubscribe_keys: app::unsubscribe::Keys,
    /// Fans the replica's progress notifications out to open campaign pages.
    pub progress: Hub,
    pub edge: Edge,
    /// Serve the site built into the executable (`site_assets`) instead of `site_root`.
    pub embedded_site: bool,
}

/// How the server meets the outside: who the client is, how long a request may take.
#[derive(Clone, Debug)]
pub struct Edge {
    /// Believe a reverse proxy's `X-Forwarded-For` and `X-Forwarded-Proto` (see `client_addr`).
    pub trust_proxy: bool,
    /// Time to answer a request (the first byte of the response): 408 after it.
    pub request_timeout: Duration,
    /// What a connection may hold before its request is in (`listen`).
    pub listen: crate::http::listen::Limits,
    /// The host names a request may be addressed to (lowercase, no port), against DNS
    /// rebinding; empty: any.
    pub allowed_hosts: Vec<String>,
    /// A scrape of `/metrics` must carry `Authorization: Bearer <it>`; None: open.
    pub metrics_token: Option<crate::ops::secret::Secret>,
    /// How fast one API token may call `/api/v1`.
    pub api_limits: crate::rest::Limits,
    /// How many sign-ups one client IP may send (`/s/<list>`).
    pub signup_limits: crate::http::signup::Limits,
}

impl Default for Edge {
    fn default() -> Self {
        Edge {
            trust_proxy: false,
            request_timeout: Duration::from_secs(30),
            listen: crate::http::listen::Limits::default(),
            allowed_hosts: Vec::new(),
            metrics_token: None,
            api_limits: crate::rest::Limits::default(),
            signup_limits: crate::http::signup::Limits::default(),
        }
    }
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}

impl FromRef<AppState> for Edge {
    fn from_ref(state: &AppState) -> Self {
        state.edge.clone()
    }
}

impl FromRef<AppState> for PgPool {
    fn from_ref(state: &AppState) -> Self {
        state.pool.clone()
    }
}

impl FromRef<AppState> for Hub {
    fn from_ref(state: &AppState) -> Self {
        state.progress.clone()
    }
}
