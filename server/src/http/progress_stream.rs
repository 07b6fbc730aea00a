//! Live campaign progress for browsers (server-sent events). One `LISTEN mailroom_progress`
//! connection per replica feeds a broadcast channel; every open page subscribes to it. Workers
//! on any replica `NOTIFY` after their changes commit, so a page sees them within the notifier's
//! debounce. A page gets a full reading on connect, a re-read whenever its campaign is notified,
//! after the listener reconnects (notifications may have been lost meanwhile), and every
//! [`REREAD`] regardless, so a lost notification never freezes it; a comment line every
//! [`HEARTBEAT`] keeps proxies from closing an idle stream. The browser's `EventSource`
//! reconnects by itself after a server restart and gets a fresh full reading.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::broadcast;

use crate::http::plain::{Refusal, SignedIn};
use crate::ops::shutdown::Shutdown;
use app::domain::progress::Progress;
use app::domain::{CampaignId, OrgId};
use app::error::AppError;

const REREAD: Duration = Duration::from_secs(5);
const HEARTBEAT: Duration = Duration::from_secs(15);
/// Pause before the listener connects again after losing its connection.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);
/// The most streams one session may hold open on a replica: each holds a connection and
/// re-reads the database every [`REREAD`], so one signed-in script must not open thousands.
/// Generous for a person: a dozen campaign tabs is already a lot.
pub const MAX_STREAMS_PER_SESSION: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Signal {
    /// This campaign's progress moved.
    Campaign(i64),
    /// Notifications may have been missed: every page re-reads.
    Resync,
}

/// The replica's fan-out of progress notifications; cheap to clone.
#[derive(Clone)]
pub struct Hub {
    tx: broadcast::Sender<Signal>,
    shutdown: Shutdown,
    /// Open streams per session (by the session token's hash).
    open: Arc<Mutex<HashMap<Vec<u8>, usize>>>,
}

/// One open stream counted against its session; uncounted when the stream ends.
struct Slot {
    open: Arc<Mutex<HashMap<Vec<u8>, usize>>>,
    session: Vec<u8>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.session) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.session);
            }
        }
    }
}

impl Hub {
    /// A hub whose streams end when `shutdown` is requested (so a graceful stop is not held
    /// open by browsers). Start [`Hub::listen`] to feed it.
    pub fn new(shutdown: Shutdown) -> Self {
        let (tx, _) = broadcast::channel(1024);
        Hub {
            tx,
            shutdown,
            open: Arc::default(),
        }
    }

    /// A slot for one more stream of `session`, unless it holds [`MAX_STREAMS_PER_SESSION`].
    fn take_slot(&self, session: Vec<u8>) -> Option<Slot> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(session.clone()).or_insert(0);
        if *n >= MAX_STREAMS_PER_SESSION {
            return None;
        }
        *n += 1;
        Some(Slot {
            open: self.open.clone(),
            session,
        })
    }

    /// Holds the replica's one `LISTEN` connection until shutdown, reconnecting when it drops.
    pub async fn listen(self, pool: PgPool) {
        let mut first = true;
        while !self.shutdown.is_requested() {
            match listener(&pool).await {
                Ok(mut l) => {
                    if !first {
                        let _ = self.tx.send(Signal::Resync);
                    }
                    first = false;
                    loop {
                        tokio::select! {
                            _ = self.shutdown.requested() => return,
                            n = l.try_recv() => match n {
                                Ok(Some(n)) => {
                                    if let Ok(id) = n.payload().parse::<i64>() {
                                        let _ = self.tx.send(Signal::Campaign(id));
                                    }
                                }
                                // The connection dropped: notifications may be lost.
                                Ok(None) => {
                                    let _ = self.tx.send(Signal::Resync);
                                }
                                Err(e) => {
                                    tracing::warn!(error = %e, "progress listener lost; reconnecting");
                                    break;
                                }
                            }
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot listen for progress; retrying"),
            }
            tokio::select! {
                _ = self.shutdown.requested() => return,
                _ = tokio::time::sleep(RECONNECT_AFTER) => {}
            }
        }
    }
}

async fn listener(pool: &PgPool) -> sqlx::Result<PgListener> {
    let mut l = PgListener::connect_with(pool).await?;
    l.listen(crate::workers::progress::CHANNEL).await?;
    Ok(l)
}

/// `GET /api/campaigns/{id}/progress`: the signed-in user's campaign as an event stream of
/// `progress` events (JSON [`Progress`]). Not signed in: 401; another org's campaign: 404.
pub async fn handler(
    State(pool): State<PgPool>,
    State(hub): State<Hub>,
    SignedIn(me): SignedIn,
    Path(id): Path<i64>,
    headers: HeaderMap,
) -> Result<Response, Refusal> {
    let org_id = me.org_id;
    let first = read(&pool, org_id, id).await?.ok_or(AppError::NotFound)?;
    // SignedIn found a live session, so the request carries its token.
    let session = app::auth::token_from_headers(&headers)
        .map(|t| app::auth::hash_token(&t))
        .ok_or(AppError::NotSignedIn)?;
    let Some(slot) = hub.take_slot(session) else {
        return Ok((
            StatusCode::TOO_MANY_REQUESTS,
            [(axum::http::header::RETRY_AFTER, "30")],
            format!(
                "This browser already has {MAX_STREAMS_PER_SESSION} live progress views open: close some tabs."
            ),
        )
            .into_response());
    };
    let watch = Watch {
        _slot: slot,
        pool,
        org_id,
        id,
        rx: hub.tx.subscribe(),
        shutdown: hub.shutdown.clone(),
        last: None,
        pending: Some(first),
        reread: tokio::time::interval_at(tokio::time::Instant::now() + REREAD, REREAD),
    };
    let events = futures::stream::unfold(watch, |mut w| async move {
        let p = w.next().await?;
        let event = Event::default().event("progress").json_data(&p).ok()?;
        Some((Ok::<_, Infallible>(event), w))
    });
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::new().interval(HEARTBEAT))
        .into_response())
}

async fn read(pool: &PgPool, org_id: i64, id: i64) -> sqlx::Result<Option<Progress>> {
    let mut conn = pool.acquire().await?;
    Ok(
        app::db::campaign::live::snapshot(&mut conn, OrgId(org_id), CampaignId(id))
            .await?
            .map(|s| s.progress()),
    )
}

/// One page's subscription.
struct Watch {
    _slot: Slot,
    pool: PgPool,
    org_id: i64,
    id: i64,
    rx: broadcast::Receiver<Signal>,
    shutdown: Shutdown,
    last: Option<Progress>,
    pending: Option<Progress>,
    reread: tokio::time::Interval,
}

impl Watch {
    /// The next reading that differs from the last one sent (the database clock aside); `None`
    /// ends the stream (shutdown, or the campaign is gone).
    async fn next(&mut self) -> Option<Progress> {
        loop {
            if let Some(p) = self.pending.take() {
                let same = self.last.as_ref().is_some_and(|l| {
                    Progress {
                        at_ms: p.at_ms,
                        ..l.clone()
                    } == p
                });
                if !same {
                    self.last = Some(p.clone());
                    return Some(p);
                }
            }
            let wanted = tokio::select! {
                _ = self.shutdown.requested() => return None,
                _ = self.reread.tick() => true,
                s = self.rx.recv() => match s {
                    Ok(Signal::Campaign(c)) => c == self.id,
                    Ok(Signal::Resync) | Err(broadcast::error::RecvError::Lagged(_)) => true,
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
            };
            if wanted {
                match read(&self.pool, self.org_id, self.id).await {
                    Ok(Some(p)) => self.pending = Some(p),
                    Ok(None) => return None,
                    // The database is away: keep the stream (heartbeats go on) and try again.
                    Err(e) => tracing::debug!(error = %e, "progress re-read failed"),
                }
            }
        }
    }
}
