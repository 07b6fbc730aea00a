//! The event ledger. A relay's report is matched to one delivery of the endpoint's org and
//! inserted under `UNIQUE (source, provider_event_id)`: the insert is the check, so a webhook
//! delivered any number of times, at once or later, writes one row, and only the insert that
//! returned it applies the effect (a suppression through [`audience::suppress_all`], or a
//! soft bounce counted). Everything runs in the caller's transaction.

use sqlx::{PgConnection, PgPool};

use crate::db::audience;
use crate::domain::{
    BouncePolicy, EventEffect, EventKind, EventSource, JobId, MatchedBy, RelayEvent,
    SuppressionReason,
};

/// A webhook endpoint: where one org's relay posts.
#[derive(sqlx::FromRow, Debug, Clone)]
pub struct Endpoint {
    pub id: String,
    pub org_id: i64,
    pub source: EventSource,
    pub secret: String,
}

/// The live (not revoked) endpoint with this id.
pub async fn endpoint(pool: &PgPool, id: &str) -> sqlx::Result<Option<Endpoint>> {
    sqlx::query_as(
        "select id, org_id, source, secret from webhook_endpoints where id = $1 and revoked_at is null",
    )
    .bind(id)
    .fetch_optional(pool)
    .await
}

/// The database's clock, unix seconds: the one clock signature windows are checked against.
pub async fn now_unix(conn: &mut PgConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar("select extract(epoch from now())::bigint")
        .fetch_one(conn)
        .await
}

/// What taking a one-time value found.
#[derive(Debug, PartialEq, Eq)]
pub enum NonceTaken {
    /// First use.
    Fresh,
    /// Used before with the same body: a retry, already handled.
    Retry,
    /// Used before with another body: a replay.
    Replayed,
}

/// Takes `nonce` for `source` once (its first body's hash kept); answers for later uses
/// whether they are a retry of the same body.
pub async fn take_nonce(
    conn: &mut PgConnection,
    source: EventSource,
    nonce: &str,
    body_sha256: &[u8],
) -> sqlx::Result<NonceTaken> {
    // A concurrent first use holds its row until it commits: this insert waits for it, then
    // finds the row (a retry or a replay) or, if that one rolled back, takes it.
    let taken: Option<bool> = sqlx::query_scalar(
        "insert into webhook_nonces (source, nonce, body_sha256) values ($1, $2, $3)
         on conflict (source, nonce) do nothing
         returning true",
    )
    .bind(source)
    .bind(nonce)
    .bind(body_sha256)
    .fetch_optional(&mut *conn)
    .await?;
    if taken.is_some() {
        return Ok(NonceTaken::Fresh);
    }
    let first: Vec<u8> = sqlx::query_scalar(
        "select body_sha256 from webhook_nonces where source = $1 and nonce = $2",
    )
    .bind(source)
    .bind(nonce)
    .fetch_one(&mut *conn)
    .await?;
    Ok(if first == body_sha256 {
        NonceTaken::Retry
    } else {
        NonceTaken::Replayed
    })
}

/// Nonces older than every signature window are forgotten.
pub async fn forget_nonces(pool: &PgPool) -> sqlx::Result<u64> {
    Ok(
        sqlx::query("delete from webhook_nonces where seen_at < now() - interval '2 hours'")
            .execute(pool)
            .await?
            .rows_affected(),
    )
}

/// The org's soft-bounce rule.
pub async fn policy(conn: &mut PgConnection, org_id: i64) -> sqlx::Result<BouncePolicy> {
    let (soft_threshold, soft_days): (i32, i32) =
        sqlx::query_as("select soft_bounce_threshold, soft_bounce_days from orgs where id = $1")
            .bind(org_id)
            .fetch_one(conn)
            .await?;
    Ok(BouncePolicy {
        soft_threshold,
        soft_days,
    })
}

/// Replaces the org's soft-bounce rule; returns the one it had.
pub async fn save_policy(
    conn: &mut PgConnection,
    org_id: i64,
    p: BouncePolicy,
) -> sqlx::Result<BouncePolicy> {
    let (soft_threshold, soft_days): (i32, i32) = sqlx::query_as(
        "update orgs o set soft_bounce_threshold = $2, soft_bounce_days = $3
         from (select soft_bounce_threshold as t, soft_bounce_days as d from orgs where id = $1 for update) old
         where o.id = $1
         returning old.t, old.d",
    )
    .bind(org_id)
    .bind(p.soft_threshold)
    .bind(p.soft_days)
    .fetch_one(conn)
    .await?;
    Ok(BouncePolicy {
        soft_threshold,
        soft_days,
    })
}

/// An event the org may not record: its Message-ID names another org's delivery.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("event {0} names a message of another organisation")]
    OtherOrg(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// What recording one event did; `None` from [`record`] when it was recorded before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    pub job_id: Option<String>,
    pub matched_by: MatchedBy,
    pub effect: EventEffect,
}

/// The delivery an event is about: the job its Message-ID names, when that job is the org's;
/// else the org's latest delivered message to the address; else none (kept as unmatched).
async fn matching(
    conn: &mut PgConnection,
    org_id: i64,
    e: &RelayEvent,
) -> Result<(Option<String>, MatchedBy), RecordError> {
    if let Some(job) = e.job_id().as_ref().map(JobId::to_string) {
        let owner: Option<i64> =
            sqlx::query_scalar("select org_id from deliveries where job_id = $1")
                .bind(&job)
                .fetch_optional(&mut *conn)
                .await?;
        match owner {
            Some(o) if o == org_id => return Ok((Some(job), MatchedBy::MessageId)),
            Some(_) => return Err(RecordError::OtherOrg(e.id.clone())),
            None => {}
        }
    }
    let job: Option<String> = sqlx::query_scalar(
        "select job_id from deliveries
         where org_id = $1 and email_lower = $2 and status = 'delivered'
         order by finished_at desc limit 1",
    )
    .bind(org_id)
    .bind(e.recipient.lower())
    .fetch_optional(&mut *conn)
    .await?;
    let by = if job.is_some() {
        MatchedBy::Recipient
    } else {
        MatchedBy::None
    };
    Ok((job, by))
}

/// Records one event of `org_id` from `source` and applies its effect, once.
pub async fn record(
    conn: &mut PgConnection,
    org_id: i64,
    source: EventSource,
    policy: BouncePolicy,
    e: &RelayEvent,
) -> Result<Option<Recorded>, RecordError> {
    let (job_id, matched_by) = matching(conn, org_id, e).await?;
    let lower = e.recipient.lower();
    let id: Option<i64> = sqlx::query_scalar(
        "insert into delivery_events (org_id, source, provider_event_id, kind, job_id, matched_by,
                                      email_lower, status, diagnostic, effect, occurred_at)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'none', $10)
         on conflict (source, provider_event_id) do nothing
         returning id",
    )
    .bind(org_id)
    .bind(source)
    .bind(&e.id)
    .bind(e.kind)
    .bind(&job_id)
    .bind(matched_by)
    .bind(lower)
    .bind(&e.status)
    .bind(&e.diagnostic)
    .bind(&e.occurred_at)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(id) = id else {
        return Ok(None);
    };
    let why = format!(
        "{source} {}",
        e.status.as_deref().unwrap_or(e.kind.as_str())
    );
    let reason = match e.kind.suppresses_at_once() {
        Some(r) => Some(r),
        None if e.kind == EventKind::SoftBounce => {
            soft_bounces_reached(conn, org_id, lower, policy)
                .await?
                .then_some(SuppressionReason::SoftBounce)
        }
        None => None,
    };
    let effect = match reason {
        Some(r) => {
            let written = audience::suppress_all(conn, org_id, &[lower], r, &why).await?;
            if written.is_empty() {
                EventEffect::None
            } else {
                EventEffect::Suppressed
            }
        }
        None if e.kind == EventKind::SoftBounce => EventEffect::Counted,
        None => EventEffect::None,
    };
    sqlx::query("update delivery_events set effect = $2 where id = $1")
        .bind(id)
        .bind(effect)
        .execute(&mut *conn)
        .await?;
    Ok(Some(Recorded {
        job_id,
        matched_by,
        effect,
    }))
}

/// Has the address now had the policy's number of soft bounces within its window? Serialised
/// per address (a transaction lock): two concurrent bounces cannot both count one short.
async fn soft_bounces_reached(
    conn: &mut PgConnection,
    org_id: i64,
    email_lower: &str,
    policy: BouncePolicy,
) -> sqlx::Result<bool> {
    sqlx::query("select pg_advisory_xact_lock(hashtextextended($1::text || ':' || $2, 0))")
        .bind(org_id)
        .bind(email_lower)
        .execute(&mut *conn)
        .await?;
    let n: i64 = sqlx::query_scalar(
        "select count(*) from delivery_events
         where org_id = $1 and email_lower = $2 and kind = 'soft_bounce'
           and received_at > now() - make_interval(days => $3)",
    )
    .bind(org_id)
    .bind(email_lower)
    .bind(policy.soft_days)
    .fetch_one(conn)
    .await?;
    Ok(policy.soft_suppresses(n))
}

/// The org's webhook endpoints, newest first (never their secrets).
pub async fn endpoints(
    conn: &mut PgConnection,
    org_id: i64,
) -> sqlx::Result<Vec<crate::model::WebhookEndpoint>> {
    sqlx::query_as(
        "select e.id, e.source, to_char(e.created_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as created,
                e.revoked_at is not null as revoked, e.subscribe_url
         from webhook_endpoints e join orgs o on o.id = e.org_id
         where e.org_id = $1 order by e.created_at desc, e.id limit 100",
    )
    .bind(org_id)
    .fetch_all(conn)
    .await
}

pub async fn create_endpoint(
    conn: &mut PgConnection,
    org_id: i64,
    id: &str,
    source: EventSource,
    secret: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "insert into webhook_endpoints (id, org_id, source, secret) values ($1, $2, $3, $4)",
    )
    .bind(id)
    .bind(org_id)
    .bind(source)
    .bind(secret)
    .execute(conn)
    .await
    .map(drop)
}

/// Keeps the URL that confirms an SNS subscription, for the owner to open.
pub async fn set_subscribe_url(conn: &mut PgConnection, id: &str, url: &str) -> sqlx::Result<()> {
    sqlx::query("update webhook_endpoints set subscribe_url = $2 where id = $1")
        .bind(id)
        .bind(url)
        .execute(conn)
        .await
        .map(drop)
}

/// Revokes the org's live endpoint `id`; returns its source (`None`: no such live endpoint).
pub async fn revoke_endpoint(
    conn: &mut PgConnection,
    org_id: i64,
    id: &str,
) -> sqlx::Result<Option<EventSource>> {
    sqlx::query_scalar(
        "update webhook_endpoints set revoked_at = now()
         where org_id = $1 and id = $2 and revoked_at is null
         returning source",
    )
    .bind(org_id)
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// The org's latest events (only the unmatched ones, when asked), newest first.
pub async fn recent(
    conn: &mut PgConnection,
    org_id: i64,
    unmatched_only: bool,
) -> sqlx::Result<Vec<crate::model::RelayEventRow>> {
    sqlx::query_as(
        "select e.source, e.kind, e.email_lower as recipient, e.job_id, e.matched_by, e.effect,
                coalesce(e.status, '') as status, coalesce(e.diagnostic, '') as diagnostic,
                to_char(e.received_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as received
         from delivery_events e join orgs o on o.id = e.org_id
         where e.org_id = $1 and (not $2 or e.job_id is null)
         order by e.received_at desc, e.id desc limit 100",
    )
    .bind(org_id)
    .bind(unmatched_only)
    .fetch_all(conn)
    .await
}
