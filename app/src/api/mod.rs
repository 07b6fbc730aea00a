//! Server functions: the dashboard's whole API. Each one starts from [`current_user`] (or is
//! the login itself), so every read and write is scoped to the signed-in user's organisation.

/// Settings › API tokens: created by an owner, shown once, revoked, audited.
pub mod api_tokens;
/// Settings › Audit log: who did what, when, with before and after (read only).
pub mod audit_log;
/// Signing in (throttled) and out, and who is signed in.
pub mod auth;
/// Automations: the list, one automation's builder sheet, counts and people, save, approval,
/// pause / resume / stop, and a mail step's preview.
pub mod automations;
/// Campaigns: the list, one campaign, its editor and workflow, test sends, the bin.
pub mod campaign;
/// The Deliveries page: counts, the list, an admin's retry, captured messages.
pub mod deliveries;
/// The Digests page: schedule, admins' opt-ins, history, preview and forced resend.
pub mod digests;
/// Feedback: the webhook endpoints relays post bounce reports to, the soft-bounce rule and the
/// reports received (the Settings › Relays page).
pub mod feedback;
/// Costly dashboard figures: computed once for concurrent requests, cached by cost (server only).
#[cfg(feature = "ssr")]
pub mod figures;
/// The public set-password page for invitations and resets; the link is the credential.
pub mod invites;
/// The Audience page's lists, and CSV imports into them with their progress.
pub mod lists;
/// The Overview page's figures of the signed-in organisation.
pub mod overview;
/// Segments: the list with counts, the builder's sheet, live previews, save and delete.
pub mod segments;
/// Sender authentication: the org's DKIM key and envelope sender (owners change them).
pub mod sender_auth;
/// Settings: the sender identity and the approval policy (owners change them).
pub mod settings;
/// The first-run page: the first organisation and its owner, behind the setup token.
pub mod setup;
/// The Audience page's subscribers: search, one subscriber, changes and erasure.
pub mod subscribers;
/// The Audience page's suppression list: search, add one or many, remove.
pub mod suppressions;
/// Transactional templates: list, edit (each save a new version), preview.
pub mod templates;
/// Settings › Users: the org's users, invitations, roles, disabling and password resets.
pub mod users;
/// Settings › Event webhooks: endpoints, their attempts, test events and replays.
pub mod webhooks;

pub use crate::model::CurrentUser;

#[cfg(feature = "ssr")]
pub use server_side::*;

#[cfg(feature = "ssr")]
mod server_side {
    use leptos::prelude::use_context;
    use sqlx::PgPool;

    use super::CurrentUser;
    use crate::error::AppError;

    /// Settings the server functions need, provided by the server as context.
    #[derive(Clone, Debug)]
    pub struct ApiConfig {
        /// Mark cookies `Secure` (the dashboard is served over HTTPS).
        pub secure_cookies: bool,
        /// Where the delivery worker captures mail when no SMTP server is configured.
        pub captured_dir: Option<std::path::PathBuf>,
        /// Days a deleted campaign stays in the recycle bin (the leader purges it then).
        pub campaign_bin_days: f64,
        /// Where people reach this Mailroom (links in mail, sign-up pages and their embeds).
        pub public_url: String,
    }

    /// Where a request came from, as the router's client layer found it: the peer address, or
    /// what the trusted proxy said. Login throttling counts by `ip`.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Client {
        pub ip: Option<std::net::IpAddr>,
        /// The browser reached us over HTTPS (said by a trusted proxy).
        pub https: bool,
    }

    /// The longest list filter (longer than any address or name).
    pub const FILTER_MAX: usize = 500;
    /// The longest time zone name accepted (the longest of PostgreSQL's is 32).
    pub const TIMEZONE_MAX: usize = 100;

    /// A list filter as a GET form sends it: trimmed, empty meaning "no filter"; otherwise one
    /// line by the edge's rule ([`crate::domain::input::line_input`]), refused naming the
    /// filter before it reaches a statement.
    pub fn filter(field: &str, value: Option<String>) -> Result<Option<String>, AppError> {
        let Some(v) = value.map(|s| s.trim().to_owned()).filter(|s| !s.is_empty()) else {
            return Ok(None);
        };
        crate::domain::input::line_input(field, &v, FILTER_MAX)?;
        Ok(Some(v))
    }

    pub fn client() -> Client {
        use_context::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<Client>().copied())
            .unwrap_or_default()
    }

    /// Cookies are `Secure` with `--secure-cookies`, or when a trusted proxy says HTTPS.
    pub fn secure_cookies() -> bool {
        api_config().secure_cookies || client().https
    }

    /// The database pool, provided by the server as context.
    pub fn pool() -> Result<PgPool, AppError> {
        use_context::<PgPool>().ok_or_else(|| {
            tracing::error!("no database pool in context");
            AppError::Internal
        })
    }

    pub fn api_config() -> ApiConfig {
        use_context::<ApiConfig>().unwrap_or(ApiConfig {
            secure_cookies: false,
            captured_dir: None,
            campaign_bin_days: 30.0,
            public_url: String::new(),
        })
    }

    pub use crate::domain::sentence;

    /// The signed-in user of this request, or `NotSignedIn`. The one way server functions learn
    /// who is asking and which organisation's rows they may touch.
    pub async fn current_user() -> Result<CurrentUser, AppError> {
        Ok(signed_in().await?.0)
    }

    /// The signed-in user of one request, looked up once however many server functions its
    /// page render calls (the server provides a fresh one per request).
    #[derive(Clone, Default)]
    pub struct RequestUser(std::sync::Arc<tokio::sync::OnceCell<Option<CurrentUser>>>);

    /// The signed-in user the server already found for this request (in its extensions: a
    /// signed-in page is checked before it renders), so its render does not look again.
    #[derive(Clone, Debug)]
    pub struct KnownUser(pub CurrentUser);

    /// The signed-in user, if their role may change things (`Forbidden` otherwise: viewers
    /// only look), and the database pool. Every state-changing server function starts here.
    pub async fn signed_in_to_act() -> Result<(CurrentUser, PgPool), AppError> {
        let (me, pool) = signed_in().await?;
        if !me.role.can_act() {
            return Err(AppError::Forbidden);
        }
        Ok((me, pool))
    }

    /// The signed-in user and the database pool. Everything is taken from the request's context
    /// before the first await: a resource fetched while a page renders on the server may outlive
    /// its reactive owner, and a context read after an await would then find nothing.
    pub async fn signed_in() -> Result<(CurrentUser, PgPool), AppError> {
        let parts = use_context::<http::request::Parts>().ok_or(AppError::NotSignedIn)?;
        let pool = pool()?;
        if let Some(KnownUser(me)) = parts.extensions.get::<KnownUser>() {
            return Ok((me.clone(), pool));
        }
        let cache = use_context::<RequestUser>().unwrap_or_default();
        let me = cache
            .0
            .get_or_try_init(|| crate::auth::session_user(&pool, &parts.headers))
            .await?
            .clone()
            .ok_or(AppError::NotSignedIn)?;
        Ok((me, pool))
    }
}
