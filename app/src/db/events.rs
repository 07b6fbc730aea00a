//! The event ledger. A relay's report is matched to one delivery of the endpoint's org and
//! inserted under `UNIQUE (org_id, source, provider_event_id)`: the insert is the check, so a webhook
//! delivered any number of times, at once or later, writes one row, and only the insert that
//! returned it applies the effect (a suppression through [`audience::suppress_all`], or a
//! soft bounce counted). Everything runs in the caller's transaction.

use sqlx::{PgConnection, PgPool};

use crate::db::audience;
use crate::domain::{
    is_erased, BounceCounts, BouncePolicy, EmailAddress, EventEffect, EventKind, EventSource,
    MatchedBy, RelayEvent, SuppressionReason,
};
use crate::verp::{self, VerpRef};

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
    /// The event proved its origin (a signed webhook, or our token in a mailed report).
    pub verified: bool,
    /// Why the event's campaign paused itself, when this event made it.
    pub paused: Option<String>,
}

/// Where events are taken in: the org they are for, how they came, and its rules.
pub struct Intake<'a> {
    pub org_id: i64,
    pub source: EventSource,
    pub policy: BouncePolicy,
    /// The VERP key, to read tokens in envelope senders.
    pub verp_key: Option<&'a [u8]>,
    /// The channel proves the sender (a signed webhook); a mailed report proves itself only by
    /// our token, and changes nothing without it.
    pub signed: bool,
}

/// The delivery an event is about.
#[derive(sqlx::FromRow)]
struct Found {
    job_id: String,
    org_id: i64,
    email_lower: String,
    campaign_id: Option<i64>,
}

const FOUND: &str = "select job_id, org_id, email_lower, campaign_id from deliveries";

/// The delivery an event is about, and how it was found, in this order: the job our signed
/// VERP token names; the job its Message-ID names, when that job is the org's; the message the
/// relay named in its 250 reply; else the org's latest delivered message to the address; else
/// none (kept as unmatched).
///
/// A token vouches for its own delivery's recipient and nobody else: a report that came
/// through it but names another address is kept as unmatched (and, unsigned, changes nothing),
/// so one received message cannot be used to suppress or count against anyone else.
async fn matching(
    conn: &mut PgConnection,
    cx: &Intake<'_>,
    e: &RelayEvent,
    lower: Option<&str>,
) -> Result<(Option<Found>, MatchedBy), RecordError> {
    let org_id = cx.org_id;
    let token = cx
        .verp_key
        .zip(e.envelope_from.as_deref())
        .and_then(|(key, from)| verp::verify_address(key, org_id, from));
    match token {
        Some(VerpRef::Job(job)) => {
            let found: Option<Found> =
                sqlx::query_as(&format!("{FOUND} where job_id = $1 and org_id = $2"))
                    .bind(job.to_string())
                    .bind(org_id)
                    .fetch_optional(&mut *conn)
                    .await?;
            return Ok(vouched(found, lower, e));
        }
        Some(VerpRef::Test {
            campaign_id,
            content_version,
        }) => {
            // A test job's id ends in the address it went to: the report's recipient picks it.
            let found: Option<Found> = match lower {
                Some(lower) => {
                    sqlx::query_as(&format!(
                        "{FOUND} where org_id = $1 and email_lower = $2 and status = 'delivered'
                           and kind = 'test' and job_id like 'test:' || $3 || ':' || $4 || ':%'
                         order by finished_at desc limit 1"
                    ))
                    .bind(org_id)
                    .bind(lower)
                    .bind(campaign_id)
                    .bind(content_version)
                    .fetch_optional(&mut *conn)
                    .await?
                }
                None => None,
            };
            return Ok(vouched(found, lower, e));
        }
        None => {}
    }
    if let Some(job) = e.job_id() {
        let found: Option<Found> = sqlx::query_as(&format!("{FOUND} where job_id = $1"))
            .bind(job.to_string())
            .fetch_optional(&mut *conn)
            .await?;
        match found {
            Some(f) if f.org_id == org_id => return Ok((Some(f), MatchedBy::MessageId)),
            Some(_) => return Err(RecordError::OtherOrg(e.id.clone())),
            None => {}
        }
    }
    if let Some(relay_id) = &e.relay_id {
        let found: Option<Found> = sqlx::query_as(&format!(
            "{FOUND} where org_id = $1 and relay_id = $2 order by finished_at desc limit 1"
        ))
        .bind(org_id)
        .bind(relay_id)
        .fetch_optional(&mut *conn)
        .await?;
        if found.is_some() {
            return Ok((found, MatchedBy::RelayId));
        }
    }
    let found: Option<Found> = match lower {
        Some(lower) => {
            sqlx::query_as(&format!(
                "{FOUND} where org_id = $1 and email_lower = $2 and status = 'delivered'
                 order by finished_at desc limit 1"
            ))
            .bind(org_id)
            .bind(lower)
            .fetch_optional(&mut *conn)
            .await?
        }
        None => None,
    };
    let by = if found.is_some() {
        MatchedBy::Recipient
    } else {
        MatchedBy::None
    };
    Ok((found, by))
}

/// What a genuine token proves about the report that came through it: the delivery it names,
/// when that delivery still exists and went to the address the report names (in either of
/// its stored forms). A token without its delivery (a purged campaign's, a test sent to
/// someone else) or naming another address proves nothing: the report is unmatched.
fn vouched(
    found: Option<Found>,
    lower: Option<&str>,
    e: &RelayEvent,
) -> (Option<Found>, MatchedBy) {
    match found {
        Some(f)
            if lower.is_none_or(|l| l == f.email_lower)
                || e.recipient
                    .as_ref()
                    .is_some_and(|r| r.lower() == f.email_lower) =>
        {
            (Some(f), MatchedBy::Token)
        }
        _ => (None, MatchedBy::None),
    }
}

/// Records one event of `cx.org_id` and applies its effect, once. `Ok(None)`: recorded before,
/// or a mailed report that names nobody (no address, no token).
pub async fn record(
    conn: &mut PgConnection,
    cx: &Intake<'_>,
    e: &RelayEvent,
) -> Result<Option<Recorded>, RecordError> {
    // An erased person's rows hold the hash of their address: an event about them is matched,
    // and kept, by that hash, and never writes the address back.
    let named = match &e.recipient {
        Some(r) => Some(erased_or_clear(conn, cx.org_id, r).await?),
        None => None,
    };
    let (found, matched_by) = matching(conn, cx, e, named.as_deref()).await?;
    let verified = cx.signed || matched_by == MatchedBy::Token;
    let lower = match (named, &found) {
        (Some(named), _) => named,
        (None, Some(f)) => f.email_lower.clone(),
        (None, None) => return Ok(None),
    };
    let erased = is_erased(&lower);
    let job_id = found.as_ref().map(|f| f.job_id.clone());
    let campaign_id = found.as_ref().and_then(|f| f.campaign_id);
    let id: Option<i64> = sqlx::query_scalar(
        "insert into delivery_events (org_id, source, provider_event_id, kind, job_id, matched_by,
                                      email_lower, status, diagnostic, effect, occurred_at,
                                      verified, campaign_id)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'none', $10, $11, $12)
         on conflict (org_id, source, provider_event_id) do nothing
         returning id",
    )
    .bind(cx.org_id)
    .bind(cx.source)
    .bind(&e.id)
    .bind(e.kind)
    .bind(&job_id)
    .bind(matched_by)
    .bind(&lower)
    .bind(&e.status)
    // A diagnostic often quotes the address: an erased one keeps none.
    .bind(if erased { None } else { e.diagnostic.as_ref() })
    .bind(&e.occurred_at)
    .bind(verified)
    .bind(campaign_id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(id) = id else {
        return Ok(None);
    };
    let mut recorded = Recorded {
        job_id,
        matched_by,
        effect: EventEffect::None,
        verified,
        paused: None,
    };
    if !verified {
        return Ok(Some(recorded));
    }
    let why = format!(
        "{} {}",
        cx.source,
        e.status.as_deref().unwrap_or(e.kind.as_str())
    );
    let reason = match e.kind.suppresses_at_once() {
        Some(r) => Some(r),
        None if e.kind == EventKind::SoftBounce => {
            soft_bounces_reached(conn, cx.org_id, &lower, cx.policy)
                .await?
                .then_some(SuppressionReason::SoftBounce)
        }
        None => None,
    };
    recorded.effect = match reason {
        Some(r) => {
            let written =
                audience::suppress_all(conn, cx.org_id, &[lower.as_str()], r, &why).await?;
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
        .bind(recorded.effect)
        .execute(&mut *conn)
        .await?;
    if let (Some(campaign), EventKind::HardBounce | EventKind::Complaint) = (campaign_id, e.kind) {
        // One campaign's reports are counted one at a time: each count then sees every report
        // committed before it, so concurrent ones cannot all stay one short of the limit.
        sqlx::query("select pg_advisory_xact_lock(hashtextextended('campaign-reports:' || $1, 0))")
            .bind(campaign)
            .execute(&mut *conn)
            .await?;
        let counts = campaign_counts(conn, cx.org_id, campaign).await?;
        if let Some(reason) = cx.policy.pause_reason(counts) {
            if crate::db::campaign::states::auto_pause(conn, cx.org_id, campaign, &reason).await? {
                recorded.paused = Some(reason);
            }
        }
    }
    Ok(Some(recorded))
}

/// The form an event about `r` is matched and kept under: the hash of the address while the
/// org holds that person erased (the hash is suppressed by the erasure, and no subscriber of
/// the address has come back since), else the address, so a person who came back is
/// suppressed, counted and matched by their address again.
async fn erased_or_clear(
    conn: &mut PgConnection,
    org_id: i64,
    r: &EmailAddress,
) -> sqlx::Result<String> {
    let hashed = r.erased_form();
    let erased: bool = sqlx::query_scalar(
        "select exists (select 1 from suppressions where org_id = $1 and email_lower = $2)
            and not exists (select 1 from subscribers
                            where org_id = $1 and email_lower = $3 and erased_at is null)",
    )
    .bind(org_id)
    .bind(&hashed)
    .bind(r.lower())
    .fetch_one(conn)
    .await?;
    Ok(if erased { hashed } else { r.lower().to_owned() })
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
