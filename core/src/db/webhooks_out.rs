//! Events out: an org's webhook endpoints, and the (endpoint, event) rows the triggers of
//! `20261216000100_webhooks_out.sql` write in the transaction of the change they report. Workers
//! claim due rows with leases on the database clock, at most `max_in_flight` per endpoint across
//! every replica, and record each attempt.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};

use crate::db::leader::{self, Lease};
use crate::domain::{WebhookEventType, WebhookStatus};
use crate::model::{EventAttempt, EventEndpoint};

pub async fn create(
    conn: &mut PgConnection,
    org_id: i64,
    created_by: Option<i64>,
    url: &str,
    types: &[WebhookEventType],
    secret: &str,
    max_in_flight: i32,
) -> sqlx::Result<i64> {
    let words: Vec<&str> = types.iter().map(|t| t.as_str()).collect();
    sqlx::query_scalar(
        "insert into webhook_out_endpoints (org_id, created_by, url, event_types, secret,
                                            max_in_flight)
         values ($1, $2, $3, $4, $5, $6) returning id",
    )
    .bind(org_id)
    .bind(created_by)
    .bind(url)
    .bind(&words)
    .bind(secret)
    .bind(max_in_flight)
    .fetch_one(conn)
    .await
}

/// The org's endpoints with what each has pending, delivered and failed.
pub async fn list(conn: &mut PgConnection, org_id: i64) -> sqlx::Result<Vec<EventEndpoint>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        id: i64,
        url: String,
        event_types: Vec<String>,
        enabled: bool,
        max_in_flight: i32,
        disabled_reason: Option<String>,
        failing_since: Option<String>,
        rotating_until: Option<String>,
        created: String,
        pending: i64,
        delivered: i64,
        failed: i64,
    }
    let rows: Vec<Row> = sqlx::query_as(
        "select e.id, e.url, e.event_types, e.enabled, e.max_in_flight, e.disabled_reason,
                to_char(e.failing_since at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as failing_since,
                to_char(e.previous_secret_until at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as rotating_until,
                to_char(e.created_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as created,
                coalesce(c.pending, 0) as pending, coalesce(c.delivered, 0) as delivered,
                coalesce(c.failed, 0) as failed
         from webhook_out_endpoints e join orgs o on o.id = e.org_id
         left join lateral (
             select count(*) filter (where status = 'pending') as pending,
                    count(*) filter (where status = 'delivered') as delivered,
                    count(*) filter (where status = 'failed') as failed
             from webhook_out_messages m where m.endpoint_id = e.id) c on true
         where e.org_id = $1 order by e.id limit 100",
    )
    .bind(org_id)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| EventEndpoint {
            id: r.id,
            url: r.url,
            event_types: r
                .event_types
                .iter()
                .filter_map(|t| t.parse().ok())
                .collect(),
            enabled: r.enabled,
            max_in_flight: r.max_in_flight,
            disabled_reason: r.disabled_reason,
            failing_since: r.failing_since,
            rotating_until: r.rotating_until,
            created: r.created,
            pending: r.pending,
            delivered: r.delivered,
            failed: r.failed,
        })
        .collect())
}

/// Turns an endpoint on (its failing run forgotten, what waited for it sent) or off. `None`:
/// not the org's.
pub async fn set_enabled(
    conn: &mut PgConnection,
    org_id: i64,
    id: i64,
    enabled: bool,
) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar(
        "update webhook_out_endpoints set enabled = $3, disabled_reason = null, failing_since = null
         where org_id = $1 and id = $2 returning url",
    )
    .bind(org_id)
    .bind(id)
    .bind(enabled)
    .fetch_optional(conn)
    .await
}

/// Deletes an endpoint with its messages and attempts. `None`: not the org's.
pub async fn delete(conn: &mut PgConnection, org_id: i64, id: i64) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar(
        "delete from webhook_out_endpoints where org_id = $1 and id = $2 returning url",
    )
    .bind(org_id)
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// A new secret signs from now on; the current one keeps signing beside it for `overlap`.
/// `None`: not the org's.
pub async fn rotate(
    conn: &mut PgConnection,
    org_id: i64,
    id: i64,
    secret: &str,
    overlap: Duration,
) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar(
        "update webhook_out_endpoints
         set previous_secret = secret, secret = $3,
             previous_secret_until = now() + make_interval(secs => $4)
         where org_id = $1 and id = $2 returning url",
    )
    .bind(org_id)
    .bind(id)
    .bind(secret)
    .bind(overlap.as_secs_f64())
    .fetch_optional(conn)
    .await
}

/// Queues a `webhook.test` event for one endpoint, whatever it subscribed to. `None`: not the
/// org's.
pub async fn send_test(
    conn: &mut PgConnection,
    org_id: i64,
    id: i64,
) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar(
        "insert into webhook_out_messages (id, org_id, endpoint_id, event_type, payload)
         select 'msg_' || md5(e.id || ':webhook.test:' || gen_random_uuid()), e.org_id, e.id,
                'webhook.test',
                jsonb_build_object('type', 'webhook.test', 'timestamp', webhook_time(now()),
                                   'data', jsonb_build_object('endpoint_id', e.id))
         from webhook_out_endpoints e where e.org_id = $1 and e.id = $2
         returning id",
    )
    .bind(org_id)
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// What a replay came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replayed {
    /// Queued again, for this endpoint.
    Queued(i64),
    /// Still waiting to be sent (or being sent): queuing it again would send it twice.
    Pending,
    /// Not the org's.
    NotFound,
}

/// Sends one of the org's finished events again, under the same `webhook-id`, with three more
/// days of retries.
pub async fn replay(
    conn: &mut PgConnection,
    org_id: i64,
    message_id: &str,
) -> sqlx::Result<Replayed> {
    let row: Option<Option<i64>> = sqlx::query_scalar(
        "with m as (select id, status from webhook_out_messages
                    where org_id = $1 and id = $2 for update),
              q as (update webhook_out_messages w
                    set status = 'pending', next_attempt_at = now(), retrying_since = now(),
                        finished_at = null, lease_until = null, holder = null
                    from m where w.id = m.id and m.status <> 'pending'
                    returning w.endpoint_id)
         select (select endpoint_id from q) from m",
    )
    .bind(org_id)
    .bind(message_id)
    .fetch_optional(conn)
    .await?;
    Ok(match row {
        None => Replayed::NotFound,
        Some(Some(endpoint)) => Replayed::Queued(endpoint),
        Some(None) => Replayed::Pending,
    })
}

/// Forgets an erased address in the org's events, sent or not: its `recipient` or `email` field
/// goes, and a clicked link that names it (as written or percent-encoded), so neither the page
/// nor a later attempt shows it; the event keeps its ids.
pub async fn forget(conn: &mut PgConnection, org_id: i64, email_lower: &str) -> sqlx::Result<u64> {
    sqlx::query(
        "update webhook_out_messages
         set payload = jsonb_set(payload, '{data}',
                                 (payload -> 'data') - 'recipient' - 'email' - 'diagnostic' - 'url'
                                 || '{\"erased\": true}')
         where org_id = $1
           and (lower(payload -> 'data' ->> 'recipient') = $2
                or payload -> 'data' ->> 'email' = $2
                or strpos(lower(payload -> 'data' ->> 'url'), $2) > 0
                or strpos(lower(payload -> 'data' ->> 'url'), replace($2, '@', '%40')) > 0)",
    )
    .bind(org_id)
    .bind(email_lower)
    .execute(conn)
    .await
    .map(|r| r.rows_affected())
}

/// An endpoint's latest attempts, newest first. Empty for another org's endpoint.
pub async fn attempts(
    conn: &mut PgConnection,
    org_id: i64,
    endpoint_id: i64,
    limit: i64,
) -> sqlx::Result<Vec<EventAttempt>> {
    sqlx::query_as(
        "select a.message_id, m.event_type, m.status, a.attempt,
                to_char(a.at at time zone o.timezone, 'YYYY-MM-DD HH24:MI:SS') as at,
                a.http_status, a.latency_ms, a.error, a.response
         from webhook_out_attempts a
         join webhook_out_messages m on m.id = a.message_id
         join orgs o on o.id = a.org_id
         where a.org_id = $1 and a.endpoint_id = $2
         order by a.id desc limit $3",
    )
    .bind(org_id)
    .bind(endpoint_id)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// One event claimed for one attempt, with what it takes to send and sign it.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct Claimed {
    pub id: String,
    pub org_id: i64,
    pub endpoint_id: i64,
    pub event_type: WebhookEventType,
    /// The body, byte for byte the same on every attempt.
    pub body: String,
    pub attempt: i32,
    pub retrying_since: DateTime<Utc>,
    pub url: String,
    pub secret: String,
    /// Signs too while a rotation overlaps.
    pub previous_secret: Option<String>,
}

/// Claims up to `limit` due events for `holder` for `lease`, never more in flight per endpoint
/// than its `max_in_flight` (the endpoint's row is locked while its room is counted, so
/// replicas claiming at once share it), nor more than `share` of one endpoint's for this
/// holder (a few slow endpoints then cannot take every request slot a process has and starve
/// the others' events), oldest first per endpoint.
pub async fn claim(
    pool: &PgPool,
    holder: &str,
    now: Option<DateTime<Utc>>,
    (limit, share): (i64, i64),
    lease: Duration,
) -> sqlx::Result<Vec<Claimed>> {
    sqlx::query_as(
        "with t as (select coalesce($1::timestamptz, now()) as now),
         -- Endpoints with something due, each found by one probe of its own index: never a
         -- read of every pending row (a slow endpoint may have a day's worth waiting).
         ep as (
             select e.id, e.max_in_flight from webhook_out_endpoints e, t
             where e.enabled
               and exists (select 1 from webhook_out_messages m
                           where m.endpoint_id = e.id and m.status = 'pending'
                             and m.next_attempt_at <= t.now
                             and (m.lease_until is null or m.lease_until <= t.now))
             for no key update of e skip locked
         ),
         picked as (
             select p.id from ep, t,
             -- What is in flight: the few rows holding a lease.
             lateral (select count(*) as busy, count(*) filter (where f.holder = $3) as mine
                      from webhook_out_messages f
                      where f.endpoint_id = ep.id and f.status = 'pending'
                        and f.lease_until > t.now) b,
             lateral (select m.id from webhook_out_messages m
                      where m.endpoint_id = ep.id and m.status = 'pending'
                        and m.next_attempt_at <= t.now
                        and (m.lease_until is null or m.lease_until <= t.now)
                      order by m.next_attempt_at
                      limit greatest(least(ep.max_in_flight - b.busy, $5 - b.mine), 0)
                      for update of m skip locked) p
             limit $2
         )
         update webhook_out_messages w
         set lease_until = t.now + make_interval(secs => $4), holder = $3,
             attempts = w.attempts + 1
         from picked, t, webhook_out_endpoints e
         where w.id = picked.id and e.id = w.endpoint_id
         returning w.id, w.org_id, w.endpoint_id, w.event_type, w.payload::text as body,
                   w.attempts as attempt, w.retrying_since, e.url, e.secret,
                   case when e.previous_secret_until > t.now then e.previous_secret end
                       as previous_secret",
    )
    .bind(now)
    .bind(limit)
    .bind(holder)
    .bind(lease.as_secs_f64())
    .bind(share)
    .fetch_all(pool)
    .await
}

/// What one attempt came to.
#[derive(Clone, Debug, PartialEq)]
pub struct Attempted {
    /// `Pending` with a delay: try again then.
    pub next: WebhookStatus,
    pub retry_in: Duration,
    pub http_status: Option<u16>,
    pub latency_ms: i32,
    pub error: Option<String>,
    pub response: Option<String>,
}

/// How long retries go on, and how long an endpoint may fail before it is disabled.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub disable_after: Duration,
    pub give_up_after: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            disable_after: crate::domain::webhook::WEBHOOK_DISABLE_AFTER,
            give_up_after: crate::domain::webhook::WEBHOOK_GIVE_UP_AFTER,
        }
    }
}

/// Records a batch of attempts in one transaction, each only if its claim is still this
/// holder's (a lease that ran out and was taken by another worker is that worker's now): the
/// event's next state, the attempt's row, and each endpoint's health (a success in the batch
/// ends a failing run; a failing run of `disable_after` disables the endpoint, and its owners
/// are sent an account notice in the same transaction). A retry due after `give_up_after` of
/// retrying is a failure. Returns how many were written (the others were no longer ours).
pub async fn record(
    pool: &PgPool,
    holder: &str,
    now: Option<DateTime<Utc>>,
    attempts: &[(Claimed, Attempted)],
    limits: Limits,
) -> sqlx::Result<u64> {
    let Limits {
        disable_after,
        give_up_after,
    } = limits;
    let mut ids = Vec::with_capacity(attempts.len());
    let mut numbers = Vec::with_capacity(attempts.len());
    let mut next = Vec::with_capacity(attempts.len());
    let mut retry_in = Vec::with_capacity(attempts.len());
    let mut http_status = Vec::with_capacity(attempts.len());
    let mut latency = Vec::with_capacity(attempts.len());
    let mut error = Vec::with_capacity(attempts.len());
    let mut response = Vec::with_capacity(attempts.len());
    for (c, a) in attempts {
        ids.push(c.id.as_str());
        numbers.push(c.attempt);
        next.push(a.next.as_str());
        retry_in.push(a.retry_in.as_secs_f64());
        http_status.push(a.http_status.map(i32::from));
        latency.push(a.latency_ms);
        error.push(a.error.as_deref());
        response.push(a.response.as_deref());
    }
    let mut tx = pool.begin().await?;
    // The batch's endpoints, locked in one order first: two replicas' batches touching the
    // same endpoints then wait for each other instead of deadlocking.
    sqlx::query(
        "select e.id from webhook_out_endpoints e
         where e.id in (select endpoint_id from webhook_out_messages where id = any($1))
         order by e.id for no key update",
    )
    .bind(&ids)
    .execute(&mut *tx)
    .await?;
    let (written, off_orgs, off_urls, off_since): (i64, Vec<i64>, Vec<String>, Vec<DateTime<Utc>>) =
        sqlx::query_as(
            "with t as (select coalesce($1::timestamptz, now()) as now),
         i as (
             select * from unnest($2::text[], $3::int[], $4::text[], $5::float8[], $6::int[],
                                  $7::int[], $8::text[], $9::text[])
                 as i(id, attempt, next, retry_in, http_status, latency_ms, error, response)
         ),
         -- A retry past the three days is a failure.
         d as (
             select i.*, case when i.next = 'pending'
                                   and w.retrying_since <= t.now - make_interval(secs => $12)
                              then 'failed' else i.next end as settled
             from i join webhook_out_messages w on w.id = i.id, t
         ),
         m as (
             update webhook_out_messages w
             set status = d.settled,
                 next_attempt_at = case when d.settled = 'pending'
                                        then t.now + make_interval(secs => d.retry_in)
                                        else w.next_attempt_at end,
                 finished_at = case when d.settled = 'pending' then null else t.now end,
                 lease_until = null, holder = null
             from t, d
             where w.id = d.id and w.holder = $10 and w.attempts = d.attempt
             returning w.id, w.attempts as attempt, w.org_id, w.endpoint_id
         ),
         a as (
             insert into webhook_out_attempts
                 (org_id, endpoint_id, message_id, attempt, at, http_status, latency_ms, error,
                  response)
             select m.org_id, m.endpoint_id, m.id, d.attempt, t.now, d.http_status,
                    d.latency_ms, left(d.error, 500), left(d.response, 1000)
             from m join d on d.id = m.id and d.attempt = m.attempt, t
         ),
         -- Each endpoint of the batch: did any of its attempts succeed?
         h as (
             select m.endpoint_id, bool_or(d.next = 'delivered') as ok
             from m join d on d.id = m.id and d.attempt = m.attempt group by m.endpoint_id
         ),
         e as (
             update webhook_out_endpoints e
             set failing_since = case when h.ok then null else coalesce(e.failing_since, t.now) end,
                 enabled = h.ok or e.failing_since is null
                           or e.failing_since > t.now - make_interval(secs => $11),
                 disabled_reason = case
                     when not h.ok and e.failing_since <= t.now - make_interval(secs => $11)
                     then 'Every attempt failed for a day: Mailroom turned it off.'
                     else e.disabled_reason end
             from h, t
             where e.id = h.endpoint_id and e.enabled
               and case when h.ok then e.failing_since is not null
                        else e.failing_since is null
                             or e.failing_since <= t.now - make_interval(secs => $11) end
             returning e.org_id, e.url, e.failing_since, e.enabled
         ),
         off as (select * from e where not e.enabled)
         select (select count(*) from m),
                array(select org_id from off order by org_id, url, failing_since),
                array(select url from off order by org_id, url, failing_since),
                array(select failing_since from off order by org_id, url, failing_since)",
        )
        .bind(now)
        .bind(&ids)
        .bind(&numbers)
        .bind(&next)
        .bind(&retry_in)
        .bind(&http_status)
        .bind(&latency)
        .bind(&error)
        .bind(&response)
        .bind(holder)
        .bind(disable_after.as_secs_f64())
        .bind(give_up_after.as_secs_f64())
        .fetch_one(&mut *tx)
        .await?;
    for ((org_id, url), since) in off_orgs.iter().zip(&off_urls).zip(&off_since) {
        crate::db::notices::send_to_owners(
            &mut tx,
            *org_id,
            &crate::domain::Notice::endpoint_turned_off(url, *since),
        )
        .await?;
    }
    tx.commit().await?;
    Ok(written.unsigned_abs())
}

/// Retention (the leader, fenced): settled events older than `days` go, with their attempts.
pub async fn trim(pool: &PgPool, lease: &Lease, days: f64, batch: i64) -> sqlx::Result<u64> {
    let sql = format!(
        "delete from webhook_out_messages
         where id in (select id from webhook_out_messages
                      where status <> 'pending'
                        and finished_at < now() - make_interval(secs => $4)
                      limit $5)
           and {}",
        leader::FENCE
    );
    Ok(leader::fenced_rows(&sql, lease)
        .bind(days * 86_400.0)
        .bind(batch)
        .execute(pool)
        .await?
        .rows_affected())
}

/// Gives back what `holder` still has in flight (a shutdown): due again at once, the attempt
/// not counted.
pub async fn release(pool: &PgPool, holder: &str) -> sqlx::Result<u64> {
    sqlx::query(
        "update webhook_out_messages set lease_until = null, holder = null, attempts = attempts - 1
         where holder = $1 and status = 'pending'",
    )
    .bind(holder)
    .execute(pool)
    .await
    .map(|r| r.rows_affected())
}
