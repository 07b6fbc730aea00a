//! The report ledger's statements (table `delivery_events`): webhook endpoints and their
//! one-time tokens, the org's feedback policy and bounce domain, the deliveries a report may be about, and the ledger row
//! itself under `UNIQUE (org_id, source, provider_event_id)`. What a report does (which delivery
//! it is about, whether it proves itself, what it suppresses, counts or pauses) is decided in
//! [`crate::feedback`]. Everything runs in the caller's transaction.

use sqlx::{PgConnection, PgPool};

use crate::domain::{
    BounceCounts, BouncePolicy, EventEffect, EventSource, FeedbackReport, JobId, MatchedBy,
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

/// Takes `nonce` for the org's `source` once (its first body's hash kept); answers for later
/// uses whether they are a retry of the same body. Per org: another org's endpoint taking the
/// same value first must not turn this org's genuine request into a "replay".
pub async fn take_nonce(
    conn: &mut PgConnection,
    org_id: i64,
    source: EventSource,
    nonce: &str,
    body_sha256: &[u8],
) -> sqlx::Result<NonceTaken> {
    // A concurrent first use holds its row until it commits: this insert waits for it, then
    // finds the row (a retry or a replay) or, if that one rolled back, takes it.
    let taken: Option<bool> = sqlx::query_scalar(
        "insert into webhook_nonces (org_id, source, nonce, body_sha256) values ($4, $1, $2, $3)
         on conflict (org_id, source, nonce) do nothing
         returning true",
    )
    .bind(source)
    .bind(nonce)
    .bind(body_sha256)
    .bind(org_id)
    .fetch_optional(&mut *conn)
    .await?;
    if taken.is_some() {
        return Ok(NonceTaken::Fresh);
    }
    let first: Vec<u8> = sqlx::query_scalar(
        "select body_sha256 from webhook_nonces where org_id = $3 and source = $1 and nonce = $2",
    )
    .bind(source)
    .bind(nonce)
    .bind(org_id)
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
    let p: PolicyRow = sqlx::query_as(&format!("select {POLICY} from orgs where id = $1"))
        .bind(org_id)
        .fetch_one(conn)
        .await?;
    Ok(p.into())
}

const POLICY: &str = "soft_bounce_threshold, soft_bounce_days, pause_bounce_pct, \
                      pause_complaint_pct, pause_min_delivered";

#[derive(sqlx::FromRow)]
struct PolicyRow {
    soft_bounce_threshold: i32,
    soft_bounce_days: i32,
    pause_bounce_pct: f64,
    pause_complaint_pct: f64,
    pause_min_delivered: i32,
}

impl From<PolicyRow> for BouncePolicy {
    fn from(p: PolicyRow) -> Self {
        BouncePolicy {
            soft_threshold: p.soft_bounce_threshold,
            soft_days: p.soft_bounce_days,
            pause_bounce_pct: p.pause_bounce_pct,
            pause_complaint_pct: p.pause_complaint_pct,
            pause_min_delivered: p.pause_min_delivered,
        }
    }
}

/// The org's bounce domain: VERP envelope senders when set.
pub async fn bounce_domain(conn: &mut PgConnection, org_id: i64) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar("select bounce_domain from orgs where id = $1")
        .bind(org_id)
        .fetch_one(conn)
        .await
}

/// Another org has the bounce domain already.
#[derive(Debug, thiserror::Error)]
pub enum DomainError {
    #[error("the bounce domain belongs to another organisation")]
    Taken,
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Sets (or, with `None`, clears) the org's bounce domain; returns the one it had.
pub async fn save_bounce_domain(
    conn: &mut PgConnection,
    org_id: i64,
    domain: Option<&str>,
) -> Result<Option<String>, DomainError> {
    let before = sqlx::query_scalar("select bounce_domain from orgs where id = $1 for update")
        .bind(org_id)
        .fetch_one(&mut *conn)
        .await?;
    let saved = sqlx::query("update orgs set bounce_domain = $2 where id = $1")
        .bind(org_id)
        .bind(domain)
        .execute(&mut *conn)
        .await;
    match saved {
        Err(sqlx::Error::Database(d)) if d.is_unique_violation() => Err(DomainError::Taken),
        Err(e) => Err(e.into()),
        Ok(_) => Ok(before),
    }
}

/// The org whose bounce domain `domain` is (lowercase), with its rules.
pub async fn org_of_bounce_domain(
    pool: &PgPool,
    domain: &str,
) -> sqlx::Result<Option<(i64, BouncePolicy)>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        id: i64,
        #[sqlx(flatten)]
        policy: PolicyRow,
    }
    let row: Option<Row> = sqlx::query_as(&format!(
        "select id, {POLICY} from orgs where bounce_domain = $1"
    ))
    .bind(domain)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|r| (r.id, r.policy.into())))
}

/// Replaces the org's soft-bounce rule; returns the one it had.
pub async fn save_policy(
    conn: &mut PgConnection,
    org_id: i64,
    p: BouncePolicy,
) -> sqlx::Result<BouncePolicy> {
    let before: BouncePolicy = sqlx::query_as::<_, PolicyRow>(&format!(
        "select {POLICY} from orgs where id = $1 for update"
    ))
    .bind(org_id)
    .fetch_one(&mut *conn)
    .await?
    .into();
    sqlx::query(
        "update orgs set soft_bounce_threshold = $2, soft_bounce_days = $3, pause_bounce_pct = $4,
                         pause_complaint_pct = $5, pause_min_delivered = $6
         where id = $1",
    )
    .bind(org_id)
    .bind(p.soft_threshold)
    .bind(p.soft_days)
    .bind(p.pause_bounce_pct)
    .bind(p.pause_complaint_pct)
    .bind(p.pause_min_delivered)
    .execute(conn)
    .await?;
    Ok(before)
}

/// A delivery a report may be about, as the feedback use case reads it.
#[derive(sqlx::FromRow, Debug, Clone)]
pub struct Reported {
    pub job_id: String,
    pub org_id: i64,
    pub email_lower: String,
    pub campaign_id: Option<i64>,
}

const REPORTED: &str = "select job_id, org_id, email_lower, campaign_id from deliveries";

/// The org's delivery `job`.
pub async fn delivery_of_org(
    conn: &mut PgConnection,
    org_id: i64,
    job: &JobId,
) -> sqlx::Result<Option<Reported>> {
    sqlx::query_as(&format!("{REPORTED} where job_id = $1 and org_id = $2"))
        .bind(job.to_string())
        .bind(org_id)
        .fetch_optional(conn)
        .await
}

/// The delivery `job`, whichever org's it is (the caller decides what another org's means).
pub async fn delivery_of_any_org(
    conn: &mut PgConnection,
    job: &JobId,
) -> sqlx::Result<Option<Reported>> {
    sqlx::query_as(&format!("{REPORTED} where job_id = $1"))
        .bind(job.to_string())
        .fetch_optional(conn)
        .await
}

/// The latest delivered test message of a campaign's content version to `email_lower` (a test
/// job's id ends in the address it went to).
pub async fn delivered_test(
    conn: &mut PgConnection,
    org_id: i64,
    email_lower: &str,
    campaign_id: i64,
    content_version: i32,
) -> sqlx::Result<Option<Reported>> {
    sqlx::query_as(&format!(
        "{REPORTED} where org_id = $1 and email_lower = $2 and status = 'delivered'
           and kind = 'test' and job_id like 'test:' || $3 || ':' || $4 || ':%'
         order by finished_at desc limit 1"
    ))
    .bind(org_id)
    .bind(email_lower)
    .bind(campaign_id)
    .bind(content_version)
    .fetch_optional(conn)
    .await
}

/// The org's latest delivery the relay named `relay_id` in its 250 reply.
pub async fn delivery_by_relay_id(
    conn: &mut PgConnection,
    org_id: i64,
    relay_id: &str,
) -> sqlx::Result<Option<Reported>> {
    sqlx::query_as(&format!(
        "{REPORTED} where org_id = $1 and relay_id = $2 order by finished_at desc limit 1"
    ))
    .bind(org_id)
    .bind(relay_id)
    .fetch_optional(conn)
    .await
}

/// The org's latest delivered message to `email_lower`.
pub async fn latest_delivered_to(
    conn: &mut PgConnection,
    org_id: i64,
    email_lower: &str,
) -> sqlx::Result<Option<Reported>> {
    sqlx::query_as(&format!(
        "{REPORTED} where org_id = $1 and email_lower = $2 and status = 'delivered'
         order by finished_at desc limit 1"
    ))
    .bind(org_id)
    .bind(email_lower)
    .fetch_optional(conn)
    .await
}

/// Whether the org holds the person behind `hashed` (an address's erased form) erased: the
/// erasure suppressed the hash, and no live subscriber of the address `lower` came back since.
pub async fn holds_erased(
    conn: &mut PgConnection,
    org_id: i64,
    hashed: &str,
    lower: &str,
) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "select exists (select 1 from suppressions where org_id = $1 and email_lower = $2)
            and not exists (select 1 from subscribers
                            where org_id = $1 and email_lower = $3 and erased_at is null)",
    )
    .bind(org_id)
    .bind(hashed)
    .bind(lower)
    .fetch_one(conn)
    .await
}

/// One event as the ledger keeps it.
pub struct NewReport<'a> {
    pub org_id: i64,
    pub source: EventSource,
    pub event: &'a FeedbackReport,
    pub delivery: Option<&'a Reported>,
    pub matched_by: MatchedBy,
    /// The comparison form (or erased form) of the address it is about.
    pub email_lower: &'a str,
    /// Kept only when the address is not erased (a diagnostic often quotes it).
    pub diagnostic: Option<&'a str>,
    pub verified: bool,
}

/// Inserts the event under the ledger's unique key with no effect yet: its id, or `None` when
/// the org recorded it before (the insert is the check).
pub async fn insert(conn: &mut PgConnection, n: &NewReport<'_>) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "insert into delivery_events (org_id, source, provider_event_id, kind, job_id, matched_by,
                                      email_lower, status, diagnostic, effect, occurred_at,
                                      verified, campaign_id)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'none', $10, $11, $12)
         on conflict (org_id, source, provider_event_id) do nothing
         returning id",
    )
    .bind(n.org_id)
    .bind(n.source)
    .bind(&n.event.id)
    .bind(n.event.kind)
    .bind(n.delivery.map(|d| &d.job_id))
    .bind(n.matched_by)
    .bind(n.email_lower)
    .bind(&n.event.status)
    .bind(n.diagnostic)
    .bind(&n.event.occurred_at)
    .bind(n.verified)
    .bind(n.delivery.and_then(|d| d.campaign_id))
    .fetch_optional(conn)
    .await
}

/// Records what event `id` did.
pub async fn set_effect(conn: &mut PgConnection, id: i64, effect: EventEffect) -> sqlx::Result<()> {
    sqlx::query("update delivery_events set effect = $2 where id = $1")
        .bind(id)
        .bind(effect)
        .execute(conn)
        .await
        .map(drop)
}

/// Takes one campaign's reports one at a time until the transaction ends: each count then sees
/// every report committed before it.
pub async fn lock_campaign_reports(conn: &mut PgConnection, campaign_id: i64) -> sqlx::Result<()> {
    sqlx::query("select pg_advisory_xact_lock(hashtextextended('campaign-reports:' || $1, 0))")
        .bind(campaign_id)
        .execute(conn)
        .await
        .map(drop)
}

/// A campaign's delivered messages and the verified bounces and complaints reported for them.
pub async fn campaign_counts(
    conn: &mut PgConnection,
    org_id: i64,
    campaign_id: i64,
) -> sqlx::Result<BounceCounts> {
    let (delivered, hard_bounces, soft_bounces, complaints): (i64, i64, i64, i64) = sqlx::query_as(
        "select (select coalesce(sum(delivered), 0)::bigint from progress_slots
                     where org_id = $1 and campaign_id = $2),
                    count(*) filter (where kind = 'hard_bounce'),
                    count(*) filter (where kind = 'soft_bounce'),
                    count(*) filter (where kind = 'complaint')
             from delivery_events where campaign_id = $2 and org_id = $1 and verified",
    )
    .bind(org_id)
    .bind(campaign_id)
    .fetch_one(conn)
    .await?;
    Ok(BounceCounts {
        delivered,
        hard_bounces,
        soft_bounces,
        complaints,
    })
}

/// The address's soft bounces within the last `days`, this one included. Serialised per address
/// until the transaction ends (a transaction lock): two concurrent bounces cannot both count one
/// short.
pub async fn soft_bounces_within(
    conn: &mut PgConnection,
    org_id: i64,
    email_lower: &str,
    days: i32,
) -> sqlx::Result<i64> {
    sqlx::query("select pg_advisory_xact_lock(hashtextextended($1::text || ':' || $2, 0))")
        .bind(org_id)
        .bind(email_lower)
        .execute(&mut *conn)
        .await?;
    sqlx::query_scalar(
        "select count(*) from delivery_events
         where org_id = $1 and email_lower = $2 and kind = 'soft_bounce'
           and received_at > now() - make_interval(days => $3)",
    )
    .bind(org_id)
    .bind(email_lower)
    .bind(days)
    .fetch_one(conn)
    .await
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
) -> sqlx::Result<Vec<crate::model::FeedbackEventRow>> {
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
