//! The webhook sender (every replica): claims due events with leases, POSTs each to its endpoint
//! signed the Standard Webhooks way, and records the attempts as they finish, whatever has
//! gathered in one transaction. Requests run concurrently, at most `concurrency` per process,
//! a quarter of them per endpoint, and the endpoint's `max_in_flight` across replicas, so a
//! slow endpoint holds only its own share and never the mail or another org's events. Only public
//! addresses are called unless the operator allows private ones; redirects are not followed;
//! answers are read up to a bound.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::PgPool;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinSet;

use app::db::webhooks_out::{self, Attempted, Claimed, Limits};
use app::domain::webhook::{retry_after, verdict, Verdict, WEBHOOK_BACKOFF};
use app::domain::Backoff;
use app::domain::WebhookStatus;

use crate::ops::shutdown::Shutdown;

#[derive(Clone, Debug)]
pub struct Config {
    pub allow_private: bool,
    pub timeout: Duration,
    /// Requests in flight in this process.
    pub concurrency: usize,
    /// Between looks for due events while none are in flight.
    pub poll: Duration,
    pub limits: Limits,
    /// When to try again after a failed attempt without a `Retry-After`.
    pub backoff: Backoff,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            allow_private: false,
            timeout: Duration::from_secs(10),
            concurrency: 32,
            poll: Duration::from_millis(250),
            limits: Limits::default(),
            backoff: WEBHOOK_BACKOFF,
        }
    }
}

/// The start of an answer kept with its attempt.
const RESPONSE_BYTES: usize = 1000;

/// Attempts recorded in one statement at most.
const RECORD_BATCH: usize = 256;

pub async fn run(pool: PgPool, cfg: Config, holder: String, shutdown: Shutdown) {
    let client = match client(&cfg) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the webhook client; no webhooks are sent by this process");
            return;
        }
    };
    // The lease outlives a request's whole budget (a timed-out one included) with room.
    let lease = cfg.timeout * 3 + Duration::from_secs(30);
    // Finished attempts go to one recorder, which writes whatever has gathered in one
    // transaction: a commit per batch, not per event. Their leases hold until then, so the
    // claim loop looks again when a batch is recorded.
    let (done, gathered) = mpsc::unbounded_channel::<(Claimed, Attempted)>();
    let recorded = Arc::new(Notify::new());
    let recorder = tokio::spawn(record_loop(
        pool.clone(),
        holder.clone(),
        cfg.limits,
        gathered,
        recorded.clone(),
    ));
    // One endpoint's share of this process's requests: slow endpoints fill at most their
    // shares, and the rest stay free for the others.
    let share = (cfg.concurrency / 4).max(1) as i64;
    let mut in_flight: JoinSet<()> = JoinSet::new();
    loop {
        if shutdown.is_requested() {
            break;
        }
        if recorder.is_finished() {
            // Attempts could no longer be recorded: sending more would only repeat them.
            tracing::error!("the webhook recorder stopped; this process sends no more webhooks");
            break;
        }
        while in_flight.try_join_next().is_some() {}
        let room = cfg.concurrency.saturating_sub(in_flight.len());
        let mut claimed = Vec::new();
        if room > 0 {
            match webhooks_out::claim(&pool, &holder, None, (room as i64, share), lease).await {
                Ok(c) => claimed = c,
                Err(e) => tracing::warn!(error = %e, "cannot claim webhook events; will retry"),
            }
        }
        for c in claimed {
            let (client, cfg, done) = (client.clone(), cfg.clone(), done.clone());
            in_flight.spawn(async move {
                let outcome = attempt(&client, &cfg, &c).await;
                // Without the recorder (it stopped) the attempt is unrecorded: its lease ends
                // and it is sent again, as after a crash.
                let _ = done.send((c, outcome));
            });
        }
        tokio::select! {
            _ = shutdown.requested() => break,
            // A batch recorded: its endpoints have room again.
            _ = recorded.notified() => {}
            // Events that came due meanwhile, for endpoints with room.
            _ = tokio::time::sleep(cfg.poll) => {}
        }
    }
    // What is in flight finishes (each within its timeout) and is recorded.
    while in_flight.join_next().await.is_some() {}
    drop(done);
    if let Err(e) = recorder.await {
        tracing::warn!(error = %e, "the webhook recorder stopped abnormally; unrecorded attempts are sent again when their leases end");
    }
    if let Err(e) = webhooks_out::release(&pool, &holder).await {
        tracing::warn!(error = %e, "could not give back webhook claims; their leases will expire");
    }
}

/// Records finished attempts as they gather, each batch in one transaction, until every
/// sender of attempts is gone.
async fn record_loop(
    pool: PgPool,
    holder: String,
    limits: Limits,
    mut gathered: mpsc::UnboundedReceiver<(Claimed, Attempted)>,
    recorded: Arc<Notify>,
) {
    let mut batch = Vec::with_capacity(RECORD_BATCH);
    while gathered.recv_many(&mut batch, RECORD_BATCH).await > 0 {
        let written = match webhooks_out::record(&pool, &holder, None, &batch, limits).await {
            Ok(n) => n,
            // One bad moment must not cost the whole batch a second delivery: each on its own.
            Err(e) => {
                tracing::warn!(events = batch.len(), error = %e, "cannot record a batch of webhook attempts; recording them one by one");
                let mut n = 0;
                for one in batch.chunks(1) {
                    match webhooks_out::record(&pool, &holder, None, one, limits).await {
                        Ok(w) => n += w,
                        Err(e) => {
                            tracing::warn!(id = %one[0].0.id, error = %e, "cannot record a webhook attempt; it is sent again when its lease ends")
                        }
                    }
                }
                n
            }
        };
        if written < batch.len() as u64 {
            tracing::info!(
                not_ours = batch.len() as u64 - written,
                "webhook attempts not recorded: their claims were taken back (or the write failed); they are sent again"
            );
        }
        batch.clear();
        recorded.notify_one();
    }
}

fn client(cfg: &Config) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(cfg.timeout)
        .connect_timeout(cfg.timeout)
        .no_proxy()
        .user_agent(concat!("Mailroom-Webhooks/", env!("CARGO_PKG_VERSION")))
        .dns_resolver(Arc::new(PublicOnly {
            allow_private: cfg.allow_private,
        }))
        .build()
}

/// One attempt: sign, POST, read the start of the answer, judge it.
async fn attempt(client: &reqwest::Client, cfg: &Config, c: &Claimed) -> Attempted {
    let started = Instant::now();
    let elapsed = |s: Instant| i32::try_from(s.elapsed().as_millis()).unwrap_or(i32::MAX);
    let judged = |status: Option<u16>, after: Option<Duration>, error: Option<String>, response| {
        let (next, retry_in) = match verdict(
            &cfg.backoff,
            status,
            after,
            c.attempt,
            rand::random::<f64>(),
        ) {
            Verdict::Delivered => (WebhookStatus::Delivered, Duration::ZERO),
            Verdict::Retry(d) => (WebhookStatus::Pending, d),
            Verdict::Refused => (WebhookStatus::Failed, Duration::ZERO),
        };
        Attempted {
            next,
            retry_in,
            http_status: status,
            latency_ms: elapsed(started),
            error,
            response,
        }
    };
    if let Err(refusal) = literal_address_allowed(&c.url, cfg.allow_private) {
        return Attempted {
            next: WebhookStatus::Failed,
            ..judged(None, None, Some(refusal), None)
        };
    }
    let timestamp = chrono::Utc::now().timestamp();
    let mut secrets = vec![c.secret.as_str()];
    secrets.extend(c.previous_secret.as_deref());
    let signature = app::webhook::signature(&secrets, &c.id, timestamp, c.body.as_bytes());
    let sent = client
        .post(&c.url)
        .header("content-type", "application/json")
        .header("webhook-id", &c.id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .body(c.body.clone())
        .send()
        .await;
    let mut response = match sent {
        Ok(r) => r,
        Err(e) => return judged(None, None, Some(describe(&e)), None),
    };
    let status = response.status().as_u16();
    let after = response
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| retry_after(v, chrono::Utc::now()));
    let mut body = Vec::new();
    // The status decides; the answer's start is only shown. A body that stops midway is kept
    // as far as it came.
    while body.len() < RESPONSE_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    body.truncate(RESPONSE_BYTES);
    let text = String::from_utf8_lossy(&body).replace('\0', "");
    judged(
        Some(status),
        after,
        None,
        (!text.is_empty()).then_some(text),
    )
}

/// A URL whose host is an address literal never reaches the resolver: judged here.
fn literal_address_allowed(url: &str, allow_private: bool) -> Result<(), String> {
    let host = url::Url::parse(url)
        .ok()
        .and_then(|u| u.host().map(|h| h.to_owned()));
    let ip = match host {
        Some(url::Host::Ipv4(v4)) => std::net::IpAddr::V4(v4),
        Some(url::Host::Ipv6(v6)) => std::net::IpAddr::V6(v6),
        _ => return Ok(()),
    };
    if allow_private || app::webhook::is_public(ip) {
        Ok(())
    } else {
        Err(format!(
            "{ip} is not a public address (the operator allows private ones with --webhook-allow-private)"
        ))
    }
}

/// What went wrong, in a line, without the URL (it is on the endpoint already).
fn describe(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else if e.is_body() || e.is_decode() {
        "the answer broke off"
    } else {
        "the request failed"
    };
    let mut source: Option<&dyn std::error::Error> = std::error::Error::source(e);
    let mut cause = None;
    while let Some(s) = source {
        cause = Some(s.to_string());
        source = s.source();
    }
    match cause {
        Some(c) => format!("{kind}: {c}"),
        None => kind.to_owned(),
    }
}

/// Resolves host names to their public addresses only (unless allowed): the address checked is
/// the address connected to, so a name cannot be re-pointed between a check and the request.
struct PublicOnly {
    allow_private: bool,
}

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = all
                .iter()
                .copied()
                .filter(|a| allow_private || app::webhook::is_public(a.ip()))
                .collect();
            if allowed.is_empty() {
                let why: Box<dyn std::error::Error + Send + Sync> = if all.is_empty() {
                    format!("{host} has no address").into()
                } else {
                    format!("{host} resolves only to addresses that are not public (the operator allows private ones with --webhook-allow-private)").into()
                };
                return Err(why);
            }
            let addrs: reqwest::dns::Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}
