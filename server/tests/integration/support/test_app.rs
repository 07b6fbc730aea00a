//! The real router on a real socket (port 0) over a test database, and a browser-like client.

use std::path::PathBuf;

use reqwest::{redirect, StatusCode};
use sqlx::PgPool;

/// Every test's app serves from one multi-threaded runtime, as `mailroom serve` does, rather
/// than from its test's own single-threaded one.
static SERVERS: std::sync::LazyLock<tokio::runtime::Runtime> = std::sync::LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("test-servers")
        .enable_all()
        .build()
        .unwrap()
});

pub struct TestApp {
    pub base: String,
    pub pool: PgPool,
    /// Shuts the app's background tasks (the progress listener, open streams) down when sent
    /// `true` or dropped.
    pub stop: tokio::sync::watch::Sender<bool>,
}

pub async fn spawn_app(pool: PgPool) -> TestApp {
    spawn_app_capturing(pool, None).await
}

/// The app reading captured mail from `captured_dir`.
pub async fn spawn_app_capturing(pool: PgPool, captured_dir: Option<PathBuf>) -> TestApp {
    let api = app::api::ApiConfig {
        captured_dir,
        ..api_config()
    };
    spawn_app_with(pool, api, mailroom::http::Edge::default()).await
}

/// The server functions' settings the tests run with (no captured mail).
pub fn api_config() -> app::api::ApiConfig {
    app::api::ApiConfig {
        secure_cookies: false,
        captured_dir: None,
        campaign_bin_days: 30.0,
        public_url: "http://mailroom.test".into(),
    }
}

fn settings(
    pool: PgPool,
    api: app::api::ApiConfig,
    edge: mailroom::http::Edge,
) -> mailroom::http::Settings {
    mailroom::http::Settings {
        pool,
        site_root: "target/site".into(),
        embedded_site: false,
        dev: false,
        unsubscribe_keys: crate::support::helpers::test_keys(),
        edge,
        api,
    }
}

/// A router over `pool` with the default settings, built and not served; its background tasks
/// stop when it is dropped.
pub fn build_router(pool: PgPool) -> axum::Router {
    let _in_servers = SERVERS.enter();
    let (_stop, shutdown) = mailroom::ops::shutdown::Shutdown::manual();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 9));
    mailroom::http::build(
        settings(pool, api_config(), mailroom::http::Edge::default()),
        addr,
        shutdown,
    )
}

/// The app with its own settings (secure cookies, trusted proxy, request timeout).
pub async fn spawn_app_with(
    pool: PgPool,
    api: app::api::ApiConfig,
    edge: mailroom::http::Edge,
) -> TestApp {
    let std_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std_listener.set_nonblocking(true).unwrap();
    let addr = std_listener.local_addr().unwrap();
    let _in_servers = SERVERS.enter();
    let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
    let (stop, shutdown) = mailroom::ops::shutdown::Shutdown::manual();
    let limits = edge.listen;
    let router = mailroom::http::build(settings(pool.clone(), api, edge), addr, shutdown.clone());
    SERVERS.spawn(mailroom::http::listen::serve(
        listener, router, limits, shutdown,
    ));
    TestApp {
        base: format!("http://{addr}"),
        pool,
        stop,
    }
}

/// A browser-like client signed in as `email`.
pub async fn signed_in(app: &TestApp, email: &str, password: &str) -> reqwest::Client {
    let c = client(app);
    let r = app.login(&c, email, password).await;
    assert!(r.headers().get("set-cookie").is_some(), "login failed");
    c
}

/// A server function's JSON answer (or the panic says what came instead).
pub fn json(body: &str) -> serde_json::Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

/// A browser-like client: keeps cookies, does not follow redirects, sends our Origin.
pub fn client(app: &TestApp) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("origin", app.base.parse().unwrap());
    reqwest::Client::builder()
        .cookie_store(true)
        .redirect(redirect::Policy::none())
        .default_headers(headers)
        .build()
        .unwrap()
}

/// The text of the element marked `data-test="<name>"` (its first text node).
pub fn marked(html: &str, name: &str) -> Option<String> {
    let at = html.find(&format!("data-test=\"{name}\""))?;
    let rest = &html[at..];
    let text = &rest[rest.find('>')? + 1..];
    Some(text[..text.find('<')?].to_string())
}

impl TestApp {
    /// A page as the server renders it for `c` (asserted 200).
    pub async fn get_html(&self, c: &reqwest::Client, path: &str) -> String {
        let r = c.get(format!("{}{path}", self.base)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
        r.text().await.unwrap()
    }

    pub async fn login(
        &self,
        c: &reqwest::Client,
        email: &str,
        password: &str,
    ) -> reqwest::Response {
        c.post(format!("{}/api/login", self.base))
            .form(&[("email", email), ("password", password)])
            .send()
            .await
            .unwrap()
    }

    /// Calls a server function with its typed arguments (the struct its `#[server]` macro
    /// makes), form-encoded as the browser posts them: a renamed endpoint or argument is a
    /// compile error, not a silently different request. Malformed input is sent with
    /// [`TestApp::call_with`].
    pub async fn call_fn<F>(&self, c: &reqwest::Client, args: F) -> (StatusCode, String)
    where
        F: leptos::server_fn::ServerFn + serde::Serialize,
    {
        let r = c
            .post(format!("{}{}", self.base, F::PATH))
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(serde_qs::to_string(&args).unwrap())
            .send()
            .await
            .unwrap();
        (r.status(), r.text().await.unwrap())
    }

    /// Posts raw form fields to a server function's endpoint: for input the typed struct
    /// cannot express (malformed values, the editor's checkbox positions) and for tables of
    /// refusals that run over many endpoints.
    pub async fn call_with(
        &self,
        c: &reqwest::Client,
        endpoint: &str,
        args: &[(&str, &str)],
    ) -> (StatusCode, String) {
        let r = c
            .post(format!("{}/api/{endpoint}", self.base))
            .form(args)
            .send()
            .await
            .unwrap();
        (r.status(), r.text().await.unwrap())
    }

    /// A campaign "Launch" created by `c` and saved once (version 2) as Markdown with this
    /// subject, body and lists: its id and editor sheet.
    pub async fn markdown_draft(
        &self,
        c: &reqwest::Client,
        subject: &str,
        body: &str,
        lists: Vec<i64>,
    ) -> (i64, serde_json::Value) {
        use app::api::campaign::edit::{CampaignSheet, NewCampaign, SaveCampaign};
        let name = "Launch".to_string();
        let (_, created) = self.call_fn(c, NewCampaign { name: name.clone() }).await;
        let id = json(&created).as_i64().expect("a campaign id");
        let edit = SaveCampaign {
            id,
            version: 1,
            name,
            subject: subject.into(),
            body: body.into(),
            format: "markdown".into(),
            lists,
            excluded_lists: vec![],
            segments: vec![],
            excluded_segments: vec![],
            schedule: String::new(),
        };
        let (status, saved) = self.call_fn(c, edit).await;
        assert_eq!(status, 200, "{saved}");
        (id, json(&self.call_fn(c, CampaignSheet { id }).await.1))
    }
}
