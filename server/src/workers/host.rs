use std::path::PathBuf;
use std::time::Duration;

use sqlx::PgPool;

use app::db::delivery::TakenBack;

use crate::ops::shutdown::Shutdown;
use crate::workers::delivery::Transport;

/// Which command hosts the workers (recorded with the heartbeat).
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    Serve,
    Worker,
}

impl Mode {
    fn as_str(self) -> &'static str {
        match self {
            Mode::Serve => "serve",
            Mode::Worker => "worker",
        }
    }
}

/// A name for this process, unique across replicas and restarts.
pub fn process_id() -> String {
    let host = hostname();
    format!(
        "{host}:{}:{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".into())
}

/// What the worker host runs, settled from the command line before it starts.
pub struct Plan {
    /// Between heartbeats (and session housekeeping).
    pub heartbeat: Duration,
    pub campaign: crate::workers::campaign::Config,
    pub leader: crate::workers::leader::Config,
    /// Between digest ticks.
    pub digest_tick: Duration,
    /// A pinned clock for the digest ticker (tests only).
    pub digest_now: Option<chrono::DateTime<chrono::Utc>>,
    /// How long a shutdown waits for the delivery batch in hand.
    pub shutdown_grace: Duration,
    pub delivery: crate::workers::delivery::Config,
    /// Where mail goes when no SMTP server is configured; the leader prunes it.
    pub captured_dir: PathBuf,
    /// The bounce mailbox to poll over IMAP, if any.
    pub bounce_imap: Option<crate::feedback::mailbox::Config>,
    /// Events out to the orgs' webhook endpoints.
    pub webhooks: crate::workers::webhooks::Config,
    pub automations: crate::workers::automations::Config,
}

/// Runs the worker host until shutdown: a heartbeat every few seconds (database clock), session
/// housekeeping, the leader elector and the delivery worker (SMTP, or capture into
/// `captured_dir`), the digest ticker, the campaign worker and the progress notifier.
pub async fn run(pool: PgPool, plan: Plan, mode: Mode, shutdown: Shutdown) {
    let Plan {
        heartbeat,
        campaign,
        leader,
        digest_tick,
        digest_now,
        shutdown_grace: grace,
        delivery: cfg,
        captured_dir,
        bounce_imap,
        webhooks,
        automations,
    } = plan;
    let id = process_id();
    let host = hostname();
    let pid = std::process::id() as i32;
    let version = env!("CARGO_PKG_VERSION");
    let mut tick = tokio::time::interval(heartbeat);
    let lease_seconds = cfg.lease_seconds;
    let mut renew = tokio::time::interval(Duration::from_secs_f64(lease_seconds / 3.0));
    if matches!(cfg.transport, Transport::Smtp(_)) && cfg.links.public_url.contains("://localhost")
    {
        tracing::warn!(public_url = %cfg.links.public_url, "unsubscribe links in real mail will point at localhost: set --public-url / MAILROOM_PUBLIC_URL");
    }
    match &cfg.transport {
        Transport::Smtp(t) => {
            tracing::info!(smtp = %format!("{}:{}", t.host, t.port), connections = cfg.connections, "delivery worker started")
        }
        Transport::Capture(dir) => {
            tracing::info!(dir = %dir.display(), "no SMTP server configured (--smtp-host): capturing mail to files")
        }
    }
    let notifier = cfg.progress.clone();
    let held = cfg.held.clone();
    let progress = tokio::spawn(notifier.clone().run(pool.clone(), shutdown.clone()));
    let campaigns = tokio::spawn(crate::workers::campaign::run(
        pool.clone(),
        campaign,
        notifier,
        shutdown.clone(),
    ));
    let mut delivery = tokio::spawn(
        crate::workers::delivery::Worker::new(pool.clone(), cfg, id.clone()).run(shutdown.clone()),
    );
    let leader = tokio::spawn(crate::workers::leader::run(
        pool.clone(),
        leader,
        id.clone(),
        captured_dir,
        shutdown.clone(),
    ));
    let digests = tokio::spawn(crate::workers::digest::run(
        pool.clone(),
        digest_tick,
        digest_now,
        shutdown.clone(),
    ));
    let bounces = bounce_imap.map(|c| {
        tokio::spawn(crate::feedback::mailbox::run(
            pool.clone(),
            c,
            id.clone(),
            shutdown.clone(),
        ))
    });
    let hooks = tokio::spawn(crate::workers::webhooks::run(
        pool.clone(),
        webhooks,
        id.clone(),
        shutdown.clone(),
    ));
    let steps = tokio::spawn(crate::workers::automations::run(
        pool.clone(),
        automations,
        shutdown.clone(),
    ));
    tracing::info!(process = %id, mode = mode.as_str(), "worker host started");
    loop {
        tokio::select! {
            _ = shutdown.requested() => break,
            _ = renew.tick() => {
                // While this process lives, its claims do not expire under a slow SMTP server.
                let in_flight = held.claims();
                let asked = std::time::Instant::now();
                match app::db::delivery::extend_leases(&pool, &id, &in_flight, lease_seconds).await {
                    Ok(extended) => held.renewed(&extended, asked),
                    Err(e) => tracing::warn!(error = %e, "could not extend delivery leases; will retry"),
                }
            }
            _ = tick.tick() => {
                if let Err(e) = app::db::heartbeat::beat(&pool, &id, &host, pid, mode.as_str(), version).await {
                    tracing::warn!(error = %e, "heartbeat failed; will retry");
                }
                if let Err(e) = app::db::sessions::purge_expired(&pool).await {
                    tracing::warn!(error = %e, "session purge failed");
                }
            }
        }
    }
    // Stop claiming, let the batch in hand finish within the timeout, then give back whatever
    // is still held: unsent claims are requeued at once, bodies in flight become `unknown`.
    if tokio::time::timeout(grace, &mut delivery).await.is_err() {
        tracing::warn!(
            seconds = grace.as_secs(),
            "the delivery batch did not finish in time; releasing it"
        );
        delivery.abort();
        let _ = delivery.await; // wait until it is really gone before releasing its rows
    }
    // A release that gave way to a ledger write still finishing is tried again, briefly.
    let mut released = app::db::delivery::release_held(&pool, &id).await;
    for _ in 0..2 {
        match &released {
            Err(e) if app::db::delivery::is_lock_timeout(e) => {
                released = app::db::delivery::release_held(&pool, &id).await;
            }
            _ => break,
        }
    }
    match released {
        Ok(t) if t == TakenBack::default() => {}
        Ok(TakenBack { requeued, unknown }) => {
            tracing::info!(requeued, unknown, "released held deliveries")
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not release held deliveries; their leases will expire")
        }
    }
    let _ = leader.await;
    if let Some(b) = bounces {
        let _ = b.await;
    }
    let _ = digests.await;
    let _ = hooks.await;
    let _ = steps.await;
    let _ = campaigns.await;
    let _ = progress.await;
    if let Err(e) = app::db::heartbeat::remove(&pool, &id).await {
        tracing::warn!(error = %e, "could not remove the heartbeat row");
    }
    tracing::info!(process = %id, "worker host stopped");
}
