//! The delivery queue (DESIGN "Who owns what", guarantees 7–9): one row per message keyed by
//! its deterministic job id. Every state change here is a compare-and-set on the expected state.
//!
//! A claim does not write that wide, many-indexed row: it takes the message off the narrow
//! `delivery_queue` and records its next attempt number in a `delivery_claims` row, which is
//! also the lease. The delivery row stays `queued` at the previous attempt until the attempt's
//! outcome, so every write for an attempt `a` (mark, outcome, give-back) is fenced by
//! `(status = 'queued', attempt = a - 1)` and moves the row to `a`. An attempt taken back
//! unsent burns its number (the row moves to `a` and re-enters the queue), so a number never
//! names two claims and a straggler's late write never matches the next one. In flight means
//! `queued` and not in the queue; the Deliveries page shows that as `sending`.

/// The dashboard's view of the queue: counts, list, retry.
pub mod admin;

use std::sync::LazyLock;

use sqlx::postgres::PgRow;
use sqlx::{PgConnection, PgPool, Row};

use crate::db::campaign::slots::bump_changed;
use crate::db::leader::{self, Lease};
use crate::domain::{
    DeliveryKind, EmailAddress, Failure, JobId, OrgId, Reference, ReferenceColumns,
};

/// A message to queue: its job id, recipient and typed references (never a rendered body).
pub struct NewDelivery<'a> {
    pub job: &'a JobId,
    pub org: OrgId,
    pub recipient: &'a EmailAddress,
    /// Must be of the job's kind.
    pub reference: Reference,
}

/// Queues a message inside the caller's transaction. The same job twice stores one row:
/// returns false when it was already queued (or sent).
pub async fn enqueue(conn: &mut PgConnection, d: NewDelivery<'_>) -> sqlx::Result<bool> {
    debug_assert_eq!(d.job.kind(), d.reference.kind().as_str(), "{}", d.job);
    let c = d.reference.columns();
    let r = sqlx::query(
        "insert into deliveries (job_id, org_id, kind, priority, recipient, email_lower,
                                 campaign_id, content_version, subscriber_id, digest_send_id, user_id,
                                 tx_message_id, signup_id, notice_id, automation_id, enrolment_id)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
         on conflict (job_id) do nothing",
    )
    .bind(d.job.to_string())
    .bind(d.org)
    .bind(d.job.kind())
    .bind(d.job.priority())
    .bind(d.recipient.as_str())
    .bind(d.recipient.lower())
    .bind(c.campaign_id)
    .bind(c.content_version)
    .bind(c.subscriber_id)
    .bind(c.digest_send_id)
    .bind(c.user_id)
    .bind(c.tx_message_id)
    .bind(c.signup_id)
    .bind(c.notice_id)
    .bind(c.automation_id)
    .bind(c.enrolment_id)
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// One automation step's message, for [`enqueue_automation_mail`].
pub struct AutomationMail {
    pub job: JobId,
    pub org: OrgId,
    pub recipient: EmailAddress,
    pub automation: crate::domain::AutomationId,
    pub enrolment: crate::domain::EnrolmentId,
    pub subscriber: crate::domain::SubscriberId,
}

/// Queues many automation messages in one statement inside the caller's transaction (as
/// [`enqueue`] does each: the same job twice stores one row), so the queue's statement
/// triggers run once for the batch.
pub async fn enqueue_automation_mail(
    conn: &mut PgConnection,
    mails: &[AutomationMail],
) -> sqlx::Result<u64> {
    if mails.is_empty() {
        return Ok(0);
    }
    let jobs: Vec<String> = mails.iter().map(|m| m.job.to_string()).collect();
    let orgs: Vec<OrgId> = mails.iter().map(|m| m.org).collect();
    let recipients: Vec<&str> = mails.iter().map(|m| m.recipient.as_str()).collect();
    let lowers: Vec<&str> = mails.iter().map(|m| m.recipient.lower()).collect();
    let automations: Vec<crate::domain::AutomationId> =
        mails.iter().map(|m| m.automation).collect();
    let enrolments: Vec<crate::domain::EnrolmentId> = mails.iter().map(|m| m.enrolment).collect();
    let subscribers: Vec<crate::domain::SubscriberId> =
        mails.iter().map(|m| m.subscriber).collect();
    let priority = mails[0].job.priority();
    let r = sqlx::query(
        "insert into deliveries (job_id, org_id, kind, priority, recipient, email_lower,
                                 automation_id, enrolment_id, subscriber_id)
         select job_id, org_id, $8, $9, recipient, email_lower, automation_id, enrolment_id, subscriber_id
         from unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[])
              as t(job_id, org_id, recipient, email_lower, automation_id, enrolment_id, subscriber_id)
         order by job_id
         on conflict (job_id) do nothing",
    )
    .bind(&jobs)
    .bind(&orgs)
    .bind(&recipients)
    .bind(&lowers)
    .bind(&automations)
    .bind(&enrolments)
    .bind(&subscribers)
    .bind(DeliveryKind::Automation)
    .bind(priority)
    .execute(conn)
    .await?;
    Ok(r.rows_affected())
}

/// Takes the queued, unclaimed mail of the org's `enrolments` off the queue, cancelled with
/// `why` (a message a claim took is in flight: its mark or outcome decides it).
pub async fn cancel_automation_mail(
    conn: &mut PgConnection,
    org: OrgId,
    enrolments: &[i64],
    why: &str,
) -> sqlx::Result<u64> {
    if enrolments.is_empty() {
        return Ok(0);
    }
    let r = sqlx::query(
        "with unsent as (
             delete from delivery_queue q using deliveries d
             where q.job_id = d.job_id and d.org_id = $1 and d.enrolment_id = any($2)
               and d.status = 'queued'
             returning q.job_id
         )
         update deliveries set status = 'cancelled', finished_at = now(), updated_at = now(),
                               last_error = $3
         where job_id in (select job_id from unsent)",
    )
    .bind(org)
    .bind(enrolments)
    .bind(why)
    .execute(conn)
    .await?;
    Ok(r.rows_affected())
}

/// A delivery this worker now holds: send it while its claim's lease holds, report with `attempt`.
/// Decoded once, from the claim's row: a row that does not decode never reaches a sender
/// ([`claim`] fails it).
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The claim row (its lease) this message came with.
    pub claim_id: i64,
    pub job: JobId,
    pub org: OrgId,
    pub recipient: EmailAddress,
    pub attempt: i32,
    pub reference: Reference,
}

impl Claimed {
    pub fn kind(&self) -> DeliveryKind {
        self.reference.kind()
    }

    /// The job id as stored, the key of marks and outcomes.
    pub fn job_id(&self) -> String {
        self.job.to_string()
    }
}

impl<'r> sqlx::FromRow<'r, PgRow> for Claimed {
    fn from_row(row: &'r PgRow) -> sqlx::Result<Self> {
        fn bad(column: &str, e: impl Into<sqlx::error::BoxDynError>) -> sqlx::Error {
            sqlx::Error::ColumnDecode {
                index: column.into(),
                source: e.into(),
            }
        }
        let job: JobId = row
            .try_get::<&str, _>("job_id")?
            .parse()
            .map_err(|e| bad("job_id", e))?;
        let recipient = EmailAddress::parse(row.try_get::<&str, _>("recipient")?)
            .map_err(|e| bad("recipient", e))?;
        let kind: DeliveryKind = row.try_get("kind")?;
        let columns = ReferenceColumns {
            campaign_id: row.try_get("campaign_id")?,
            content_version: row.try_get("content_version")?,
            subscriber_id: row.try_get("subscriber_id")?,
            digest_send_id: row.try_get("digest_send_id")?,
            user_id: row.try_get("user_id")?,
            tx_message_id: row.try_get("tx_message_id")?,
            signup_id: row.try_get("signup_id")?,
            notice_id: row.try_get("notice_id")?,
            automation_id: row.try_get("automation_id")?,
            enrolment_id: row.try_get("enrolment_id")?,
        };
        let reference = Reference::from_columns(kind, columns, &job)
            .filter(|r| r.kind().as_str() == job.kind())
            .ok_or_else(|| bad("kind", format!("a {kind} delivery without its references")))?;
        Ok(Claimed {
            claim_id: row.try_get("claim_id")?,
            job,
            org: row.try_get("org_id")?,
            recipient,
            attempt: row.try_get("attempt")?,
            reference,
        })
    }
}

/// The one rule of which suppressions stop a delivery, as a subquery for `exists (…)` over the
/// delivery row `$row` (with `org_id`, `email_lower`, `kind`): campaign and test mail are blocked
/// by any suppression of the address, the other kinds only by a hard bounce or complaint. `$kinds`
/// binds `DeliveryKind::stopped_by_any_suppression_names()`, `$reasons`
/// `SuppressionReason::stopping_all_mail()`.
///
/// `offset 0` keeps it a per-row probe of the suppressions' primary key: without it PostgreSQL
/// may turn the `exists` into a hash join that reads the org's whole suppression list for every
/// claim (with a generic plan it expects thousands of rows; 53 ms a claim against 200,000
/// suppressions, 0.4 ms with the probe).
macro_rules! blocks {
    ($row:literal, $kinds:literal, $reasons:literal) => {
        concat!(
            "select 1 from suppressions s where s.org_id = ",
            $row,
            ".org_id and s.email_lower = ",
            $row,
            ".email_lower and (",
            $row,
            ".kind = any(",
            $kinds,
            ") or s.reason = any(",
            $reasons,
            ")) offset 0"
        )
    };
}

/// Claims up to `limit` due deliveries in one short statement (its own transaction): they
/// leave the queue, and one claim row records `holder`, the lease and each one's next attempt
/// number (the delivery rows are not written).
///
/// Fairness: the distinct (priority, org, campaign) groups of due mail are found by a loose index
/// scan, campaign groups only while their campaign is `sending` (or `sent`, for a retry an admin
/// asked for). Priority is strict (test > digest > campaign); campaign groups each get an equal
/// share and the batch is filled round-robin, so one big campaign cannot starve another org or
/// another campaign. Queue rows other workers hold are skipped, never waited for.
///
/// Suppression is re-checked here, before any network call: campaign and test mail are blocked
/// by any suppression, the other kinds only by a hard bounce or complaint
/// (`DeliveryKind::stopped_by_any_suppression`, `SuppressionReason::stops_all_mail`). Those become
/// `suppressed`, counted in the campaign's progress slots in the same statement, as does a
/// message whose person was erased (its address is a hash now) whatever its kind.
pub async fn claim(
    pool: &PgPool,
    limit: i64,
    lease_seconds: f64,
    holder: &str,
) -> sqlx::Result<Vec<Claimed>> {
    let rows = sqlx::query(&CLAIM)
        .bind(limit)
        .bind(lease_seconds)
        .bind(holder)
        .bind(DeliveryKind::stopped_by_any_suppression_names())
        .bind(crate::domain::SuppressionReason::stopping_all_mail())
        .fetch_all(pool)
        .await?;
    let mut claimed = Vec::with_capacity(rows.len());
    let mut undecodable = Vec::new();
    for row in &rows {
        match <Claimed as sqlx::FromRow<PgRow>>::from_row(row) {
            Ok(c) => claimed.push(c),
            // Only a row written around `enqueue` can get here. Failing it for good keeps it
            // from coming back with every lease and holding up the mail claimed beside it.
            Err(e) => {
                let job: String = row.try_get("job_id")?;
                tracing::error!(job_id = %job, error = %e, "a claimed delivery does not decode");
                let reply = format!("the delivery's row cannot be read: {e}");
                let failure = Failure::Unsendable;
                undecodable.push((
                    job,
                    row.try_get("attempt")?,
                    Outcome::Failed { failure, reply },
                ));
            }
        }
    }
    if !undecodable.is_empty() {
        record(&mut *pool.acquire().await?, &undecodable, &[]).await?;
    }
    Ok(claimed)
}

/// [`claim`]'s statement. Parameters: `$1` the batch (bigint), `$2` the lease in seconds
/// (float8), `$3` the holder, `$4` and `$5` the suppression rule's kinds and reasons (text[]).
/// Public so that a test can pin its plan.
pub static CLAIM: LazyLock<String> = LazyLock::new(|| {
    format!(
        "with recursive walk (priority, org_id, campaign_key) as (
             (select priority, org_id, campaign_key from delivery_queue
              where next_attempt_at <= now()
              order by priority, org_id, campaign_key limit 1)
             union all
             select n.priority, n.org_id, n.campaign_key from walk w
             cross join lateral (
                 select priority, org_id, campaign_key from delivery_queue
                 where next_attempt_at <= now()
                   and (priority, org_id, campaign_key) > (w.priority, w.org_id, w.campaign_key)
                 order by priority, org_id, campaign_key limit 1) n
         ),
         eligible as (
             select w.* from walk w
             left join campaigns c on c.org_id = w.org_id and c.id = w.campaign_key
             -- `sent`: a delivery an admin retried after the campaign finished. An automation's
             -- group (minus its id) is always eligible: stopping it takes its mail off the queue.
             where w.campaign_key <= 0 or c.status in ('sending', 'sent')
             limit 256
         ),
         -- Strict priority; within one priority a random pick, so that no org or campaign is
         -- starved when there are more groups than the batch has room for.
         chosen as (select * from eligible order by priority, random() limit $1),
         -- Each priority's groups share the whole batch equally: at most 3 × the batch is locked.
         share as (
             select priority, greatest(1, ceil($1::float8 / count(*)))::int as n
             from chosen group by priority
         ),
         picked as (
             select p.*, g.org_id as g_org, g.campaign_key as g_campaign
             from chosen g join share on share.priority = g.priority
             cross join lateral (
                 select q.job_id, q.priority, q.next_attempt_at
                 from delivery_queue q
                 where q.next_attempt_at <= now()
                   and q.priority = g.priority and q.org_id = g.org_id and q.campaign_key = g.campaign_key
                 order by q.next_attempt_at
                 limit share.n
                 for update of q skip locked) p
         ),
         -- Round-robin: each group's first row, then each group's second, …
         due as (
             select * from (
                 select picked.*, row_number() over (partition by priority, g_org, g_campaign order by next_attempt_at) as turn
                 from picked) ranked
             order by priority, turn
             limit $1
         ),
         -- Off the queue: from here the claim row below holds them. An entry whose delivery is
         -- no longer `queued` (its campaign was cancelled) is dropped with them. Rows are found
         -- by key lists (`= any(array(…))`), never joined: the planner cannot know the batch's
         -- size through the walk and would hash the whole queue (or the whole of `deliveries`)
         -- for a few dozen rows, a second per claim with a million queued.
         taken as (delete from delivery_queue q where q.job_id = any(array(select job_id from due))),
         found as (
             select d.* from deliveries d
             where d.job_id = any(array(select job_id from due)) and d.status = 'queued'
         ),
         -- An erased address gets nothing more, whatever the kind.
         blocked as (
             select r.job_id from found r
             where starts_with(r.email_lower, '{erased}') or exists ({blocks})
         ),
         changed as (
             update deliveries d
             set status = 'suppressed', attempt = d.attempt + 1, finished_at = now(), updated_at = now(),
                 last_error = 'suppressed when claimed'
             where d.job_id = any(array(select job_id from blocked))
             returning d.org_id, d.campaign_id, d.status
         ),
         {bump},
         claimed as (select * from found where job_id not in (select job_id from blocked)),
         held as (
             insert into delivery_claims (holder, lease_until, job_ids, attempts)
             select $3, now() + make_interval(secs => $2), array_agg(job_id), array_agg(attempt + 1)
             from claimed having count(*) > 0
             returning id
         )
         -- In the walk's round-robin order (both sides are the batch: no estimate matters).
         select (select id from held) as claim_id, c.job_id, c.org_id, c.kind, c.recipient,
                c.attempt + 1 as attempt, c.campaign_id, c.content_version, c.subscriber_id,
                c.digest_send_id, c.user_id, c.tx_message_id, c.signup_id, c.notice_id,
                c.automation_id, c.enrolment_id
         from claimed c join due u on u.job_id = c.job_id
         order by u.priority, u.turn",
        bump = bump_changed!(),
        blocks = blocks!("r", "$4", "$5"),
        erased = crate::domain::ERASED_PREFIX,
    )
});

/// Records, for every message of a group, that its body is about to be written (one statement
/// for the group: the caller group-commits the marks of all its connections). From then on a
/// crash makes the delivery `unknown`, never a silent resend. Returns the attempts marked: a
/// missing one lost its claim (reaped) and must not be sent. A campaign message whose campaign
/// was paused or cancelled since the claim is given back to the queue instead (attempt burned):
/// after a pause commits, each connection sends at most the messages it had marked. A message
/// whose address was suppressed since the claim (by the rule of [`claim`]), or whose person was
/// erased since, becomes `suppressed` here, counted in its campaign's progress: an opt-out or an
/// erasure that commits before the mark always wins.
///
/// The group's marks are one row of `delivery_mark_groups` (the attempts as arrays), not a row
/// per message and not a change of the wide, many-indexed `deliveries` row: the delivery rows
/// are only share-locked, which is what orders a mark against a reaper or a shutdown taking the
/// claim back (see [`give_back`]). The row is deleted with the last of its outcomes
/// ([`record`]) or, when its writer is gone, by [`sweep_marks`].
pub async fn mark_body_started(
    conn: &mut PgConnection,
    held: &[(String, i32)],
) -> sqlx::Result<Marked> {
    Ok(mark_and_record(conn, held, &[], &[]).await?.0)
}

/// The marks one statement wrote: the group's row, and the attempts it holds (the ones whose
/// claim still held). Attempts, not jobs: one process may hold an expired attempt of a job and
/// its re-claimed successor at once, and only the one the row is at may be sent.
#[derive(Debug, Default)]
pub struct Marked {
    pub group: Option<i64>,
    pub attempts: Vec<(String, i32)>,
}

/// The one rule of "in flight", as the rows of a row `$row` holding attempts as arrays
/// (`job_ids`, `attempts`: a mark group or a claim) that are still in flight: `x(job_id,
/// attempt)` joined to their delivery `d`, still `queued` at the attempt before.
macro_rules! in_flight_of {
    ($row:literal) => {
        concat!(
            "unnest(",
            $row,
            ".job_ids, ",
            $row,
            ".attempts) as x(job_id, attempt)
             join deliveries d on d.job_id = x.job_id and d.attempt = x.attempt - 1
             where d.status = 'queued'"
        )
    };
}
pub(crate) use in_flight_of;

/// A condition on `$row` ([`in_flight_of`]): none of its attempts is still in flight.
macro_rules! none_in_flight {
    ($row:literal) => {
        concat!("not exists (select 1 from ", in_flight_of!($row), ")")
    };
}

/// Deletes the mark groups none of whose attempts is still in flight (a writer that died or
/// stopped before recording them all). An attempt number is never reused, so a finished
/// attempt's mark can never count again. Rows a writer is deleting right now are skipped.
pub async fn sweep_marks(pool: &PgPool) -> sqlx::Result<u64> {
    Ok(sqlx::query(concat!(
        "delete from delivery_mark_groups where id in (
             select m.id from delivery_mark_groups m where ",
        none_in_flight!("m"),
        " for update skip locked)"
    ))
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
    /// Final: why, and the server's reply (or what went wrong) to show.
    Failed {
        failure: crate::domain::Failure,
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

/// Writes a batch of outcomes in one statement, fenced: a row taken back meanwhile (its attempt
/// burned, or `unknown`) is left alone. Deletes the mark groups in
/// `finished_marks`, whose every other attempt has its outcome already committed. Returns the
/// rows written.
pub async fn record(
    conn: &mut PgConnection,
    results: &[(String, i32, Outcome)],
    finished_marks: &[i64],
) -> sqlx::Result<u64> {
    Ok(mark_and_record(conn, &[], results, finished_marks).await?.1)
}

/// A row of [`mark_and_record`]: the outcomes written, and one marked attempt with its group
/// (none when nothing was marked).
type WrittenRow = (i64, Option<i64>, Option<String>, Option<i32>);

/// [`mark_body_started`] for `held` and [`record`] for `results` in one statement: one
/// statement's fixed cost and one commit where a busy worker would pay two. The rows are
/// disjoint: an attempt's outcome is only known after its mark was answered. Returns the marks
/// and the number of outcomes written.
pub async fn mark_and_record(
    conn: &mut PgConnection,
    held: &[(String, i32)],
    results: &[(String, i32, Outcome)],
    finished_marks: &[i64],
) -> sqlx::Result<(Marked, u64)> {
    let (held_jobs, held_attempts): (Vec<&str>, Vec<i32>) =
        held.iter().map(|(j, a)| (j.as_str(), *a)).unzip();
    let mut jobs = Vec::new();
    let mut attempts = Vec::new();
    let mut statuses = Vec::new();
    let mut texts = Vec::new();
    let mut delays = Vec::new();
    let mut relay_ids = Vec::new();
    for (job, attempt, outcome) in results {
        let (status, text, delay) = match outcome {
            Outcome::Delivered { reply } => ("delivered", reply.as_str().into(), 0.0),
            Outcome::Failed { failure, reply } => ("failed", failure.shown(reply), 0.0),
            Outcome::Unknown { error } => ("unknown", error.as_str().into(), 0.0),
            Outcome::Retry {
                error,
                after_seconds,
            } => ("queued", error.as_str().into(), *after_seconds),
        };
        jobs.push(job.as_str());
        attempts.push(*attempt);
        statuses.push(status);
        texts.push(text);
        delays.push(delay);
        relay_ids.push(match outcome {
            Outcome::Delivered { reply } => crate::domain::relay_id(reply),
            _ => None,
        });
    }
    let rows: Vec<WrittenRow> = sqlx::query_as(&MARK_AND_RECORD)
        .bind(&held_jobs)
        .bind(&held_attempts)
        .bind(crate::domain::DeliveryKind::stopped_by_any_suppression_names())
        .bind(crate::domain::SuppressionReason::stopping_all_mail())
        .bind(&jobs)
        .bind(&attempts)
        .bind(&statuses)
        .bind(texts.iter().map(|t| t.as_ref()).collect::<Vec<&str>>())
        .bind(&delays)
        .bind(&relay_ids)
        .bind(finished_marks)
        .fetch_all(conn)
        .await?;
    let written = rows.first().map_or(0, |(n, ..)| *n as u64);
    let marked = Marked {
        group: rows.iter().find_map(|(_, id, ..)| *id),
        attempts: rows
            .into_iter()
            .filter_map(|(_, _, job, attempt)| Some((job?, attempt?)))
            .collect(),
    };
    Ok((marked, written))
}

/// [`mark_and_record`]'s statement. Parameters: `$1`, `$2` the attempts to mark (text[],
/// int[]), `$3`, `$4` the suppression rule's kinds and reasons (text[]), `$5`…`$10` the
/// outcomes (job ids, attempts, statuses, texts as text[]/int[]/text[]/text[], delays float8[],
/// relay ids text[]), `$11` the finished mark groups (bigint[]). Public so that a test can pin
/// its plan.
pub static MARK_AND_RECORD: LazyLock<String> = LazyLock::new(|| {
    format!(
        "with finished as (
             update deliveries d
             set status = r.status, attempt = r.attempt, updated_at = now(),
                 smtp_reply = case when r.status in ('delivered', 'failed') then r.text else d.smtp_reply end,
                 last_error = case when r.status in ('queued', 'unknown') then r.text else d.last_error end,
                 next_attempt_at = case when r.status = 'queued' then now() + make_interval(secs => r.delay) else d.next_attempt_at end,
                 finished_at = case when r.status = 'queued' then null else now() end,
                 relay_id = coalesce(r.relay_id, d.relay_id)
             from unnest($5::text[], $6::int[], $7::text[], $8::text[], $9::float8[], $10::text[])
                  as r(job_id, attempt, status, text, delay, relay_id)
             where d.job_id = r.job_id and d.status = 'queued' and d.attempt = r.attempt - 1
             returning d.org_id, d.campaign_id, d.status
         ),
         -- Every attempt of these groups is over: their marks have done their work.
         unmarked as (delete from delivery_mark_groups where id = any($11::bigint[])),
         held as (select * from unnest($1::text[], $2::int[]) as h(job_id, attempt)),
         -- One pass over the rows still ours, share-locked against a concurrent give-back until
         -- this mark commits, deciding for each whether its campaign stopped or its address
         -- was suppressed since the claim.
         live as (
             select d.job_id, h.attempt,
                    coalesce(c.status not in ('sending', 'sent'), false) as stopped,
                    (starts_with(d.email_lower, '{erased}') or exists ({blocks})) as blocked
             from deliveries d
             join held h on d.job_id = h.job_id and d.attempt = h.attempt - 1
             left join campaigns c on c.id = d.campaign_id
             where d.status = 'queued'
             for share of d
         ),
         stopped as (
             update deliveries d set attempt = l.attempt, updated_at = now()
             from live l
             where l.stopped and d.job_id = l.job_id and d.status = 'queued' and d.attempt = l.attempt - 1
         ),
         suppressed as (
             update deliveries d
             set status = 'suppressed', attempt = l.attempt, finished_at = now(), updated_at = now(),
                 last_error = 'suppressed before the body was sent'
             from live l
             where l.blocked and not l.stopped and d.job_id = l.job_id and d.status = 'queued'
               and d.attempt = l.attempt - 1
             returning d.org_id, d.campaign_id, d.status
         ),
         changed as (select * from finished union all select * from suppressed),
         {bump},
         grouped as (
             insert into delivery_mark_groups (job_ids, attempts)
             select array_agg(job_id), array_agg(attempt) from live
             where not stopped and not blocked
             having count(*) > 0
             returning id, job_ids, attempts
         )
         -- One row even when nothing was marked, for the count of outcomes written.
         select (select count(*) from finished), m.id, m.job_id, m.attempt
         from (values (1)) as one
         left join (select g.id, x.job_id, x.attempt
                    from grouped g cross join lateral unnest(g.job_ids, g.attempts) as x(job_id, attempt)) m
           on true",
        blocks = blocks!("d", "$3", "$4"),
        erased = crate::domain::ERASED_PREFIX,
        bump = bump_changed!(),
    )
});

/// Reaps claims whose lease ran out (their worker died or hung): an attempt that had not
/// started its body goes back to the queue (its attempt number burned, so a straggler's late
/// write can never match the next claim); one that had becomes `unknown`, never retried by
/// itself. Then deletes the marks and claims no attempt in flight needs any more.
/// A leader job, fenced by its lease; idempotent, so an overlapping leader does no harm.
/// Returns what it took back; a pass that yielded to a ledger write ([`give_back`]) fails
/// with [`is_lock_timeout`] and is retried at the next one.
pub async fn reap_expired(pool: &PgPool, lease: &Lease) -> sqlx::Result<TakenBack> {
    let mut tx = pool.begin().await?;
    let sql = format!(
        "select id from delivery_claims where lease_until < now() and {}
         order by id for update skip locked",
        leader::FENCE
    );
    let claims: Vec<(i64,)> = leader::fenced(&sql, lease).fetch_all(&mut *tx).await?;
    let claims: Vec<i64> = claims.into_iter().map(|(c,)| c).collect();
    let counts = give_back(
        &mut tx,
        &claims,
        "worker lost before sending; requeued",
        "worker lost while the body was in flight",
    )
    .await?;
    tx.commit().await?;
    sweep_marks(pool).await?;
    sweep_claims(pool).await?;
    Ok(counts)
}

/// Whether `e` is a statement that gave up waiting for a lock (`lock_timeout`): the reaper
/// yielding to a ledger write, to be retried, not a failure.
pub fn is_lock_timeout(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|code| code == "55P03")
}

/// Deletes the claims none of whose attempts is still in flight.
async fn sweep_claims(pool: &PgPool) -> sqlx::Result<u64> {
    Ok(sqlx::query(concat!(
        "delete from delivery_claims where id in (
             select c.id from delivery_claims c where ",
        none_in_flight!("c"),
        " for update skip locked)"
    ))
    .execute(pool)
    .await?
    .rows_affected())
}

/// A stopping process gives back what it holds: claims whose body had not started go back to
/// the queue at once; ones in flight become `unknown`, since their reply will never be read.
/// Returns what it took back.
pub async fn release_held(pool: &PgPool, holder: &str) -> sqlx::Result<TakenBack> {
    let mut tx = pool.begin().await?;
    let claims: Vec<i64> = sqlx::query_scalar(
        "select id from delivery_claims where holder = $1 order by id for update",
    )
    .bind(holder)
    .fetch_all(&mut *tx)
    .await?;
    let counts = give_back(
        &mut tx,
        &claims,
        "released at shutdown before sending",
        "shutdown while the body was in flight",
    )
    .await?;
    tx.commit().await?;
    Ok(counts)
}

/// The one rule for taking claims back (reaper, shutdown), for the claim rows the caller has
/// just deleted in this transaction: each of their attempts still in flight with no body-start
/// mark returns to the queue (attempt burned), a marked one becomes `unknown`; counted in the
/// campaigns' progress slots. Returns what it took back. The texts are constants of this
/// module, never input.
///
/// Why two statements: locking the rows first waits for any mark being written on them (it
/// holds them share-locked until it commits), and this statement's fresh snapshot then sees
/// every committed mark. A mark that comes later finds the attempt burned and is refused.
///
/// Rows are locked in job-id order, but a ledger write locks its marks and outcomes in
/// whatever order its plan meets them, so the two can wait on each other (a live but slow
/// process whose lease ran out, or a shutdown's last write). The give-back therefore waits for
/// each row at most half of PostgreSQL's `deadlock_timeout` and gives up, in the usual case
/// before the deadlock check would pick a victim: the write, whose outcomes would otherwise be
/// lost to `unknown`, goes on, and the caller tries again later. (The limit is per wait: a
/// give-back that first waited long on other rows may still close a cycle late.) Runs in the
/// caller's transaction, which the local setting needs.
async fn give_back(
    tx: &mut PgConnection,
    claims: &[i64],
    requeued: &str,
    in_flight: &str,
) -> sqlx::Result<TakenBack> {
    if claims.is_empty() {
        return Ok(TakenBack::default());
    }
    sqlx::query(
        "select set_config('lock_timeout',
             greatest(1, extract(epoch from current_setting('deadlock_timeout')::interval) * 500)::int || 'ms',
             true)",
    )
    .execute(&mut *tx)
    .await?;
    let held: Vec<(String, i32)> = sqlx::query_as(concat!(
        "select d.job_id, x.attempt from delivery_claims c cross join lateral ",
        in_flight_of!("c"),
        " and c.id = any($1) order by d.job_id for update of d"
    ))
    .bind(claims)
    .fetch_all(&mut *tx)
    .await?;
    let (jobs, attempts): (Vec<String>, Vec<i32>) = held.into_iter().unzip();
    let sql = format!(
        "with h as (select * from unnest($1::text[], $2::int[]) as h(job_id, attempt)),
         marked as (
             select m.job_id from delivery_marks m
             join h on m.job_id = h.job_id and m.attempt = h.attempt
         ),
         changed as (
             update deliveries d
             set status = case when d.job_id in (select job_id from marked) then 'unknown' else 'queued' end,
                 attempt = h.attempt,
                 last_error = case when d.job_id in (select job_id from marked) then '{in_flight}' else '{requeued}' end,
                 finished_at = case when d.job_id in (select job_id from marked) then now() end,
                 updated_at = now()
             from h
             where d.job_id = h.job_id and d.status = 'queued' and d.attempt = h.attempt - 1
             returning d.org_id, d.campaign_id, d.status
         ),
         gone as (delete from delivery_claims where id = any($3)),
         {bump}
         select count(*) filter (where status = 'queued') as requeued,
                count(*) filter (where status = 'unknown') as unknown
         from changed",
        bump = bump_changed!()
    );
    sqlx::query_as(&sql)
        .bind(&jobs)
        .bind(&attempts)
        .bind(claims)
        .fetch_one(tx)
        .await
}

/// What a reaper pass or a shutdown took back: attempts returned to the queue, and attempts in
/// flight (their body started) made `unknown`.
#[derive(sqlx::FromRow, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TakenBack {
    pub requeued: i64,
    pub unknown: i64,
}

/// Extends the leases of the claims `holder` still works on (`held`: their ids), one row per
/// claim: a live process keeps its claims however slow its SMTP server. A claim it no longer
/// works on, and a dead or stopped process's, runs out. First deletes the holder's other claims
/// that have nothing left in flight (checked row by row: a message whose outcome could not be
/// written keeps its claim until the reaper takes it back). Claim rows another transaction holds
/// right now (a reaper) are skipped, not waited for. Returns the claims extended.
pub async fn extend_leases(
    pool: &PgPool,
    holder: &str,
    held: &[i64],
    lease_seconds: f64,
) -> sqlx::Result<Vec<i64>> {
    sqlx::query(concat!(
        "delete from delivery_claims where id in (
             select c.id from delivery_claims c
             where c.holder = $1 and c.id <> all($2) and ",
        none_in_flight!("c"),
        " for update skip locked)"
    ))
    .bind(holder)
    .bind(held)
    .execute(pool)
    .await?;
    sqlx::query_scalar(
        "update delivery_claims set lease_until = now() + make_interval(secs => $2)
         where id in (select id from delivery_claims
                      where holder = $1 and id = any($3)
                      for update skip locked)
         returning id",
    )
    .bind(holder)
    .bind(lease_seconds)
    .bind(held)
    .fetch_all(pool)
    .await
}

/// Retention (a leader job): message details (SMTP replies, errors) of deliveries finished more
/// than `days` ago are cleared, in batches; the ledger row keeps its job id, state and times.
pub async fn trim_details(
    pool: &PgPool,
    lease: &Lease,
    days: f64,
    batch: i64,
) -> sqlx::Result<u64> {
    let sql = format!(
        "update deliveries set smtp_reply = null, last_error = null
         where job_id in (select job_id from deliveries
                          where finished_at < now() - make_interval(secs => $4)
                            and (smtp_reply is not null or last_error is not null)
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

/// The sender identity of an organisation (From, Reply-To, envelope sender and, when signing
/// is on, its DKIM key), for rendering. Its `Debug` leaves the private keys out.
#[derive(sqlx::FromRow, Clone)]
pub struct Sender {
    pub org_id: i64,
    pub from_name: String,
    pub from_address: String,
    pub reply_to: Option<String>,
    /// The SMTP envelope sender (None: the From address).
    pub return_path: Option<String>,
    /// VERP envelope senders at this domain, when set (they take the Return-Path's place).
    pub bounce_domain: Option<String>,
    /// Set only while signing is enabled.
    pub dkim_domain: Option<String>,
    pub dkim_selector: Option<String>,
    pub dkim_private_key_pem: Option<String>,
    /// The Ed25519 key that signs beside the RSA one (RFC 8463), when the org has one.
    pub dkim_ed25519_selector: Option<String>,
    pub dkim_ed25519_private_key_pem: Option<String>,
    /// Links in campaign mail become tracked redirects.
    pub click_tracking: bool,
    /// Campaign HTML carries an open-tracking pixel.
    pub open_tracking: bool,
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("org_id", &self.org_id)
            .field("from_name", &self.from_name)
            .field("from_address", &self.from_address)
            .field("reply_to", &self.reply_to)
            .field("return_path", &self.return_path)
            .field("bounce_domain", &self.bounce_domain)
            .field("dkim_domain", &self.dkim_domain)
            .field("dkim_selector", &self.dkim_selector)
            .field("dkim_ed25519_selector", &self.dkim_ed25519_selector)
            .field("click_tracking", &self.click_tracking)
            .field("open_tracking", &self.open_tracking)
            .finish_non_exhaustive()
    }
}

/// The sender identities of every org of a batch, in one query.
pub async fn senders(pool: &PgPool, org_ids: &[i64]) -> sqlx::Result<Vec<Sender>> {
    sqlx::query_as(
        "select o.id as org_id, o.from_name, o.from_address, o.reply_to, o.return_path, o.bounce_domain,
                k.domain as dkim_domain, k.selector as dkim_selector,
                k.private_key_pem as dkim_private_key_pem,
                k.ed25519_selector as dkim_ed25519_selector,
                k.ed25519_private_key_pem as dkim_ed25519_private_key_pem,
                o.click_tracking, o.open_tracking
         from orgs o left join org_dkim k on k.org_id = o.id and k.enabled
         where o.id = any($1)",
    )
    .bind(org_ids)
    .fetch_all(pool)
    .await
}
