//! Every campaign state change is one compare-and-set: an `UPDATE … WHERE status = any(<the
//! states the transition allows>) RETURNING`. Zero rows means someone else changed it first (or
//! the change makes no sense from there): the caller gets the state it found, never a silent
//! overwrite (DESIGN guarantee 4, "State machines").

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

use crate::domain::{CampaignStatus, Transition, TransitionError};

#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    #[error(transparent)]
    Refused(#[from] TransitionError),
    #[error("no such campaign")]
    NotFound,
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// The status now, for the refusal message (or `NotFound`).
async fn refusal(conn: &mut PgConnection, org_id: i64, id: i64, t: Transition) -> ChangeError {
    let current: Result<Option<String>, _> = sqlx::query_scalar(
        "select status from campaigns where org_id = $1 and id = $2 and deleted_at is null",
    )
    .bind(org_id)
    .bind(id)
    .fetch_optional(conn)
    .await;
    match current {
        Err(e) => ChangeError::Db(e),
        Ok(None) => ChangeError::NotFound,
        Ok(Some(s)) => match s.parse::<CampaignStatus>() {
            Ok(current) => TransitionError {
                transition: t,
                current,
            }
            .into(),
            Err(e) => ChangeError::Db(sqlx::Error::Decode(e.into())),
        },
    }
}

fn from_states(t: Transition) -> Vec<&'static str> {
    t.from().iter().map(|s| s.as_str()).collect()
}

/// Submit, reject, pause, resume, cancel: a plain compare-and-set of the status.
pub async fn change(
    conn: &mut PgConnection,
    org_id: i64,
    id: i64,
    t: Transition,
) -> Result<(), ChangeError> {
    let done: Option<i64> = sqlx::query_scalar(
        "update campaigns set status = $4,
                submitted_at = case when $4 = 'submitted' then now() else submitted_at end
         where org_id = $1 and id = $2 and status = any($3) and deleted_at is null
         returning id",
    )
    .bind(org_id)
    .bind(id)
    .bind(from_states(t))
    .bind(t.to().as_str())
    .fetch_optional(&mut *conn)
    .await?;
    match done {
        Some(_) => Ok(()),
        None => Err(refusal(conn, org_id, id, t).await),
    }
}

/// Approves the exact content version the approver was shown, to go out at `scheduled_for`
/// (or now). Four eyes are enforced by the table's constraint. Wakes the campaign workers.
pub async fn approve(
    conn: &mut PgConnection,
    org_id: i64,
    id: i64,
    approver: i64,
    shown_version: i32,
    scheduled_for: Option<DateTime<Utc>>,
) -> Result<(), ChangeError> {
    let done: Option<i64> = sqlx::query_scalar(
        "update campaigns set status = 'approved', approver_id = $3, approved_at = now(),
                approved_version = content_version, scheduled_for = coalesce($5, now())
         where org_id = $1 and id = $2 and status = 'submitted' and content_version = $4
         returning id",
    )
    .bind(org_id)
    .bind(id)
    .bind(approver)
    .bind(shown_version)
    .bind(scheduled_for)
    .fetch_optional(&mut *conn)
    .await?;
    if done.is_none() {
        return Err(refusal(conn, org_id, id, Transition::Approve).await);
    }
    sqlx::query("select pg_notify('mailroom_campaign_approved', $1::text)")
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}

/// Approved campaigns whose time has come, oldest first: candidates for [`start`].
pub async fn due(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<(i64, i64)>> {
    sqlx::query_as(
        "select org_id, id from campaigns
         where status = 'approved' and scheduled_for <= now() and deleted_at is null
         order by scheduled_for, id limit $1",
    )
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// The start compare-and-set (guarantee 4): exactly one worker gets `true`; the caller
/// materialises the recipients in the same transaction. A campaign another worker is starting
/// right now is skipped (`SKIP LOCKED`), not waited for: its materialisation can take many
/// seconds, and the losers have other campaigns to hand off meanwhile.
pub async fn start(conn: &mut PgConnection, id: i64) -> sqlx::Result<bool> {
    let won: Option<i64> = sqlx::query_scalar(
        "update campaigns set status = 'sending', started_at = now()
         where id = (select id from campaigns
                     where id = $1 and status = 'approved' and scheduled_for <= now()
                     for update skip locked)
           and status = 'approved'
         returning id",
    )
    .bind(id)
    .fetch_optional(conn)
    .await?;
    Ok(won.is_some())
}

/// Records that the recipients exist (`materialized_at`, how many); a campaign with none is
/// sent at once.
pub async fn materialized(conn: &mut PgConnection, id: i64, recipients: i64) -> sqlx::Result<()> {
    sqlx::query(
        "update campaigns set materialized_at = now(), recipients_total = $2,
                status = case when $2 = 0 then 'sent' else status end,
                finished_at = case when $2 = 0 then now() else finished_at end
         where id = $1 and status = 'sending'",
    )
    .bind(id)
    .bind(recipients)
    .execute(conn)
    .await?;
    Ok(())
}

/// Moves every sending campaign with nothing left to do (no queued send, no queued or sending
/// delivery) to `sent`, by compare-and-set; any replica may run it. Returns their ids.
pub async fn finish_done(conn: &mut PgConnection) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar(
        "update campaigns c set status = 'sent', finished_at = now()
         where c.status = 'sending' and c.materialized_at is not null
           and not exists (select 1 from sends s where s.campaign_id = c.id and s.status = 'queued')
           and not exists (select 1 from deliveries d where d.campaign_id = c.id and d.status in ('queued', 'sending'))
         returning c.id",
    )
    .fetch_all(conn)
    .await
}

/// Whether any campaign is sending (the worker polls faster then).
pub async fn any_sending(conn: &mut PgConnection) -> sqlx::Result<bool> {
    sqlx::query_scalar("select exists (select 1 from campaigns where status = 'sending')")
        .fetch_one(conn)
        .await
}

/// Announces that these campaigns' progress moved (one notification per campaign).
pub async fn notify_progress(pool: &sqlx::PgPool, channel: &str, ids: &[i64]) -> sqlx::Result<()> {
    sqlx::query("select pg_notify($1, id::text) from unnest($2::bigint[]) id")
        .bind(channel)
        .bind(ids)
        .execute(pool)
        .await?;
    Ok(())
}
