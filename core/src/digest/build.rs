//! Building claimed digests inside the claim's transaction: figures, content, deliveries. A tick
//! claims due orgs chunk by chunk; a forced resend claims its own key. Either way the claim, the
//! stored content and the enqueued deliveries commit together or not at all.

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

use super::Templates;
use crate::db::digest::figures::Period;
use crate::db::digest::{ClaimedWeek, ManualClaim, ManualRequest};
use crate::db::{audit, digest};
use crate::domain::{DigestKind, WeekKey};

/// Orgs per chunk of a tick (one transaction each).
pub const CHUNK: i64 = 1000;
/// A forced resend's dialog stays valid this long (guarantee 2).
pub const MANUAL_KEY_MAX_AGE_SECONDS: i64 = 15 * 60;

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Db(#[from] sqlx::Error),
    #[error("rendering the digest of org {org_id} failed: {source}")]
    Render {
        org_id: i64,
        #[source]
        source: minijinja::Error,
    },
}

/// What one tick did, over every chunk.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TickReport {
    /// Weeks claimed and built (scheduled digests).
    pub claimed: u64,
    /// Weeks recorded as skipped (the 24-hour window was missed).
    pub skipped: u64,
    /// Deliveries enqueued.
    pub recipients: i64,
    /// Orgs whose digest could not be built this tick (logged; the next tick tries again).
    pub failed_orgs: Vec<i64>,
}

/// Renders, stores and enqueues the digests just claimed (skipped weeks excepted) in the
/// caller's transaction. Returns the number of deliveries enqueued.
pub async fn build(
    conn: &mut PgConnection,
    claims: &[ClaimedWeek],
    templates: &Templates,
) -> Result<i64, BuildError> {
    let to_build: Vec<&ClaimedWeek> = claims
        .iter()
        .filter(|c| c.kind != DigestKind::Skipped)
        .collect();
    if to_build.is_empty() {
        return Ok(0);
    }
    let periods: Vec<Period> = to_build
        .iter()
        .map(|c| Period {
            key: c.id,
            org_id: c.org_id,
            start: c.period_start,
            end: c.period_end,
        })
        .collect();
    let t = std::time::Instant::now();
    let figures = digest::figures::figures(&mut *conn, &periods).await?;
    let figures_us = t.elapsed().as_micros() as u64;
    let contents = figures
        .iter()
        .map(|f| {
            templates
                .render(f.key, f)
                .map_err(|source| BuildError::Render {
                    org_id: f.org_id,
                    source,
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let render_us = t.elapsed().as_micros() as u64 - figures_us;
    digest::store_contents(&mut *conn, &contents).await?;
    let store_us = t.elapsed().as_micros() as u64 - figures_us - render_us;
    let ids: Vec<i64> = to_build.iter().map(|c| c.id).collect();
    let queued = digest::enqueue_recipients(conn, &ids).await?;
    tracing::debug!(
        digests = ids.len(),
        queued,
        figures_us,
        render_us,
        store_us,
        enqueue_us = t.elapsed().as_micros() as u64 - figures_us - render_us - store_us,
        "digests built"
    );
    Ok(queued)
}

/// One chunk in one transaction: claim the due weeks of `org_ids`, build them, commit.
async fn run_chunk(
    pool: &PgPool,
    now: Option<DateTime<Utc>>,
    org_ids: &[i64],
    templates: &Templates,
) -> Result<(u64, u64, i64), BuildError> {
    let t = std::time::Instant::now();
    let mut tx = pool.begin().await?;
    let claims = digest::claim_due_weeks(&mut tx, now, org_ids).await?;
    let claim_us = t.elapsed().as_micros() as u64;
    let recipients = build(&mut tx, &claims, templates).await?;
    tx.commit().await?;
    tracing::debug!(
        orgs = org_ids.len(),
        claims = claims.len(),
        claim_us,
        total_us = t.elapsed().as_micros() as u64,
        "digest chunk committed"
    );
    let skipped = claims
        .iter()
        .filter(|c| c.kind == DigestKind::Skipped)
        .count() as u64;
    Ok((claims.len() as u64 - skipped, skipped, recipients))
}

/// One tick of the digest ticker: every org that is due, chunk by chunk
/// ([`digest::org_chunk`]). `now` replaces the database clock in tests. An org whose digest
/// cannot be built is found (a render error names it; a statement error is narrowed down by
/// halving the chunk), left out, logged and retried by the next tick, while the rest of its
/// chunk goes on. Losing the database ends the tick.
pub async fn tick(
    pool: &PgPool,
    now: Option<DateTime<Utc>>,
    chunk: i64,
    templates: &Templates,
) -> sqlx::Result<TickReport> {
    let mut report = TickReport::default();
    let mut after = None;
    loop {
        let due = {
            let mut conn = pool.acquire().await?;
            digest::org_chunk(&mut conn, now, after, chunk).await?
        };
        let Some(&last) = due.last() else {
            return Ok(report);
        };
        after = Some(last);
        let ids: Vec<i64> = due.iter().map(|d| d.id).collect();
        let mut pending = vec![ids];
        while let Some(mut part) = pending.pop() {
            match run_chunk(pool, now, &part, templates).await {
                Ok((claimed, skipped, recipients)) => {
                    report.claimed += claimed;
                    report.skipped += skipped;
                    report.recipients += recipients;
                }
                Err(BuildError::Render { org_id, source }) => {
                    tracing::error!(org_id, error = %source, "cannot build this org's digest; the rest of its chunk goes on");
                    report.failed_orgs.push(org_id);
                    part.retain(|&id| id != org_id);
                    if !part.is_empty() {
                        pending.push(part);
                    }
                }
                Err(BuildError::Db(sqlx::Error::Database(e))) if part.len() > 1 => {
                    tracing::warn!(error = %e, orgs = part.len(), "a digest chunk failed; retrying it in halves to find the org");
                    let right = part.split_off(part.len() / 2);
                    pending.push(right);
                    pending.push(part);
                }
                Err(BuildError::Db(sqlx::Error::Database(e))) => {
                    tracing::error!(org_id = part[0], error = %e, "cannot build this org's digest; the next tick retries it");
                    report.failed_orgs.push(part[0]);
                }
                Err(BuildError::Db(e)) => return Err(e),
            }
        }
    }
}

/// What a forced resend did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resent {
    Sent {
        id: i64,
        recipients: i64,
    },
    /// The same dialog was submitted before: nothing new was sent.
    AlreadySent {
        id: i64,
    },
    /// The same dialog was submitted before with the other "only me" choice: nothing more sent.
    TakenByAnother,
    /// The dialog's key is older than 15 minutes.
    Expired,
    /// The dialog's key is from the future by the database clock.
    Future,
}

/// A forced resend by `user_id` under the dialog's `key` (a verified `manual-…` week key):
/// claims it, builds it and records it in the audit log, in one transaction. `now` replaces the
/// database clock in tests.
pub async fn resend(
    pool: &PgPool,
    org_id: i64,
    user_id: i64,
    key: WeekKey,
    only_me: bool,
    now: Option<DateTime<Utc>>,
    templates: &Templates,
) -> Result<Resent, BuildError> {
    let mut tx = pool.begin().await?;
    let request = ManualRequest {
        org_id,
        key,
        max_age_seconds: MANUAL_KEY_MAX_AGE_SECONDS,
        triggered_by: user_id,
        only_me,
        now,
    };
    let claimed = match digest::claim_manual(&mut tx, request).await? {
        ManualClaim::Claimed(c) => c,
        ManualClaim::AlreadySent { id } => return Ok(Resent::AlreadySent { id }),
        ManualClaim::TakenByAnother => return Ok(Resent::TakenByAnother),
        ManualClaim::Expired => return Ok(Resent::Expired),
        ManualClaim::Future => return Ok(Resent::Future),
    };
    let recipients = build(&mut tx, std::slice::from_ref(&claimed), templates).await?;
    audit::record(
        &mut tx,
        audit::Entry {
            org_id,
            actor_id: Some(user_id),
            api_token_id: None,
            action: crate::domain::AuditAction::DigestResend,
            object_type: "digest_send",
            object_id: Some(claimed.id.to_string()),
            before: None,
            after: Some(serde_json::json!({
                "week_key": claimed.week_key,
                "only_me": only_me,
                "recipients": recipients,
            })),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(Resent::Sent {
        id: claimed.id,
        recipients,
    })
}

/// This week's digest of an org as it would be sent (the figures of the 7 days before this
/// week's slot), without claiming anything. `None` for an unknown org.
pub async fn preview(
    conn: &mut PgConnection,
    org_id: i64,
    templates: &Templates,
) -> Result<Option<digest::StoredContent>, BuildError> {
    let Some(week) = digest::this_week(&mut *conn, org_id).await? else {
        return Ok(None);
    };
    let period = Period {
        key: 0,
        org_id,
        start: week.period_start,
        end: week.period_end,
    };
    let figures = digest::figures::figures(conn, &[period]).await?;
    figures
        .first()
        .map(|f| {
            templates
                .render(0, f)
                .map_err(|source| BuildError::Render { org_id, source })
        })
        .transpose()
}
