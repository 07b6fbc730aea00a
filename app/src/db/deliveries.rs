//! The delivery queue (DESIGN "Who owns what", guarantees 7–9): one row per message keyed by
//! its deterministic job id. Every state change here is a compare-and-set on the expected state,
//! and every result write is fenced by `(status = 'sending', attempt)`.

use sqlx::{PgConnection, PgPool};

use crate::domain::{EmailAddress, JobId};

/// A message to queue: its job id, recipient and typed references (never a rendered body).
pub struct NewDelivery<'a> {
    pub job: &'a JobId,
    pub org_id: i64,
    pub recipient: &'a EmailAddress,
    pub campaign_id: Option<i64>,
    pub content_version: Option<i32>,
    pub subscriber_id: Option<i64>,
    pub digest_send_id: Option<i64>,
    pub user_id: Option<i64>,
}

impl<'a> NewDelivery<'a> {
    /// A message with no typed references beyond its job id (test mail).
    pub fn plain(job: &'a JobId, org_id: i64, recipient: &'a EmailAddress) -> Self {
        NewDelivery {
            job,
            org_id,
            recipient,
            campaign_id: None,
            content_version: None,
            subscriber_id: None,
            digest_send_id: None,
            user_id: None,
        }
    }
}

/// Queues a message inside the caller's transaction. The same job twice stores one row:
/// returns false when it was already queued (or sent).
pub async fn enqueue(conn: &mut PgConnection, d: NewDelivery<'_>) -> sqlx::Result<bool> {
    let r = sqlx::query(
        "insert into deliveries (job_id, org_id, kind, priority, recipient, email_lower,
                                 campaign_id, content_version, subscriber_id, digest_send_id, user_id)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
         on conflict (job_id) do nothing",
    )
    .bind(d.job.to_string())
    .bind(d.org_id)
    .bind(d.job.kind())
    .bind(d.job.priority())
    .bind(d.recipient.as_str())
    .bind(d.recipient.lower())
    .bind(d.campaign_id)
    .bind(d.content_version)
    .bind(d.subscriber_id)
    .bind(d.digest_send_id)
    .bind(d.user_id)
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// A delivery this worker now holds: send it before `lease_until`, report with `attempt`.
#[derive(sqlx::FromRow, Debug, Clone)]
pub struct Claimed {
    pub job_id: String,
    pub org_id: i64,
    pub kind: String,
    pub recipient: String,
    pub attempt: i32,
    pub campaign_id: Option<i64>,
    pub content_version: Option<i32>,
    pub subscriber_id: Option<i64>,
    pub digest_send_id: Option<i64>,
    pub user_id: Option<i64>,
}

/// Claims up to `limit` due deliveries in one short statement (its own transaction):
/// test > digest > campaign, campaign mail only while its campaign is `sending`, rows other
/// workers hold skipped (never waited for). Suppression is re-checked here, before any network
/// call: campaign mail is blocked by any suppression, digest and test mail only by a hard bounce
/// or complaint; those become `suppressed`. The rest become `sending` with a lease and the next
/// attempt number.
pub async fn claim(pool: &PgPool, limit: i64, lease_seconds: f64) -> sqlx::Result<Vec<Claimed>> {
    sqlx::query_as(
        "with due as (
             select d.job_id, d.org_id, d.kind, d.email_lower
             from deliveries d
             left join campaigns c on c.org_id = d.org_id and c.id = d.campaign_id
             where d.status = 'queued' and d.next_attempt_at <= now()
               and (d.kind <> 'campaign' or c.status = 'sending')
             order by d.priority, d.next_attempt_at
             limit $1
             for update of d skip locked
         ),
         blocked as (
             select due.job_id from due
             join suppressions s on s.org_id = due.org_id and s.email_lower = due.email_lower
             where due.kind = 'campaign' or s.reason in ('hard_bounce', 'complaint')
         ),
         suppressed as (
             update deliveries d
             set status = 'suppressed', finished_at = now(), updated_at = now(), last_error = 'suppressed when claimed'
             from blocked b where d.job_id = b.job_id
             returning d.job_id
         )
         update deliveries d
         set status = 'sending', attempt = d.attempt + 1, body_started_at = null,
             lease_until = now() + make_interval(secs => $2), updated_at = now()
         from due
         where d.job_id = due.job_id and due.job_id not in (select job_id from blocked)
         returning d.job_id, d.org_id, d.kind, d.recipient, d.attempt, d.campaign_id,
                   d.content_version, d.subscriber_id, d.digest_send_id, d.user_id",
    )
    .bind(limit)
    .bind(lease_seconds)
    .fetch_all(pool)
    .await
}

/// Records, for a batch, that the message body is about to be written (group commit). From
/// then on a crash makes the delivery `unknown`, never a silent resend.
pub async fn mark_body_started(pool: &PgPool, held: &[(String, i32)]) -> sqlx::Result<u64> {
    let (jobs, attempts): (Vec<&str>, Vec<i32>) =
        held.iter().map(|(j, a)| (j.as_str(), *a)).unzip();
    Ok(sqlx::query(
        "update deliveries d set body_started_at = now(), updated_at = now()
         from unnest($1::text[], $2::int[]) as h(job_id, attempt)
         where d.job_id = h.job_id and d.status = 'sending' and d.attempt = h.attempt",
    )
    .bind(&jobs)
    .bind(&attempts)
    .execute(pool)
    .await?
    .rows_affected())
}

/// The outcome of one attempt.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Delivered {
        reply: String,
    },
    /// 5xx: final, with the server's reply.
    Failed {
        reply: String,
    },
    /// The body may have reached the server without its reply being recorded.
    Unknown {
        error: String,
    },
    /// Not delivered, try again at the given delay (seconds, backoff chosen by the caller).
    Retry {
        error: String,
        after_seconds: f64,
    },
}

/// Writes a batch of outcomes in one statement, fenced: a row reaped and re-claimed meanwhile
/// (other attempt, or no longer `sending`) is left alone. Returns the rows written.
pub async fn record(
    conn: &mut PgConnection,
    results: &[(String, i32, Outcome)],
) -> sqlx::Result<u64> {
    let mut jobs = Vec::new();
    let mut attempts = Vec::new();
    let mut statuses = Vec::new();
    let mut texts = Vec::new();
    let mut delays = Vec::new();
    for (job, attempt, outcome) in results {
        let (status, text, delay) = match outcome {
            Outcome::Delivered { reply } => ("delivered", reply.as_str(), 0.0),
            Outcome::Failed { reply } => ("failed", reply.as_str(), 0.0),
            Outcome::Unknown { error } => ("unknown", error.as_str(), 0.0),
            Outcome::Retry {
                error,
                after_seconds,
            } => ("queued", error.as_str(), *after_seconds),
        };
        jobs.push(job.as_str());
        attempts.push(*attempt);
        statuses.push(status);
        texts.push(text);
        delays.push(delay);
    }
    Ok(sqlx::query(
        "update deliveries d
         set status = r.status, lease_until = null, updated_at = now(),
             smtp_reply = case when r.status in ('delivered', 'failed') then r.text else d.smtp_reply end,
             last_error = case when r.status in ('queued', 'unknown') then r.text else d.last_error end,
             next_attempt_at = case when r.status = 'queued' then now() + make_interval(secs => r.delay) else d.next_attempt_at end,
             finished_at = case when r.status = 'queued' then null else now() end
         from unnest($1::text[], $2::int[], $3::text[], $4::text[], $5::float8[]) as r(job_id, attempt, status, text, delay)
         where d.job_id = r.job_id and d.status = 'sending' and d.attempt = r.attempt",
    )
    .bind(&jobs)
    .bind(&attempts)
    .bind(&statuses)
    .bind(&texts)
    .bind(&delays)
    .execute(conn)
    .await?
    .rows_affected())
}

/// Reaps deliveries whose lease ran out (their worker died or hung): one that had not started
/// its body goes back to the queue; one that had becomes `unknown`, never retried by itself.
/// Returns (requeued, unknown). Idempotent: any replica may run it.
pub async fn reap_expired(pool: &PgPool) -> sqlx::Result<(i64, i64)> {
    sqlx::query_as(
        "with reaped as (
             update deliveries
             set status = case when body_started_at is null then 'queued' else 'unknown' end,
                 last_error = case when body_started_at is null then 'worker lost before sending; requeued'
                                   else 'worker lost while the body was in flight' end,
                 finished_at = case when body_started_at is null then null else now() end,
                 lease_until = null, updated_at = now()
             where status = 'sending' and lease_until < now()
             returning status
         )
         select count(*) filter (where status = 'queued'), count(*) filter (where status = 'unknown') from reaped",
    )
    .fetch_one(pool)
    .await
}

/// The sender identity of an organisation (From and Reply-To), for rendering.
#[derive(sqlx::FromRow, Clone, Debug)]
pub struct Sender {
    pub from_name: String,
    pub from_address: String,
    pub reply_to: Option<String>,
}

pub async fn sender(pool: &PgPool, org_id: i64) -> sqlx::Result<Sender> {
    sqlx::query_as("select from_name, from_address, reply_to from orgs where id = $1")
        .bind(org_id)
        .fetch_one(pool)
        .await
}
