//! Every campaign state change is one compare-and-set: an `UPDATE … WHERE status = any(<the
//! states the transition allows>) RETURNING`. Zero rows means someone else changed it first (or
//! the change makes no sense from there): the caller gets the state it found, never a silent
//! overwrite (DESIGN guarantee 4, "State machines").

use sqlx::PgConnection;

use crate::domain::{CampaignId, CampaignStatus, OrgId, Transition, TransitionError, UserId};

#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// Not allowed from the state it is in; `by` says who approved it and when, once it was.
    #[error("{error}{}", by.as_ref().map(|(who, at)| format!(" (approved by {who} at {at})")).unwrap_or_default())]
    Refused {
        error: TransitionError,
        by: Option<(String, String)>,
    },
    /// The approver was shown another content version than the one submitted now.
    #[error("this campaign changed since you opened it (you saw version {seen}, it is now version {now}): review it again before approving")]
    Stale { seen: i32, now: i32 },
    /// Four eyes: the author and the last editor cannot approve (unless the org allows it).
    #[error("you wrote or last edited this campaign: another admin must approve it")]
    FourEyes,
    #[error("no such campaign")]
    NotFound,
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

impl From<TransitionError> for ChangeError {
    fn from(error: TransitionError) -> Self {
        ChangeError::Refused { error, by: None }
    }
}

/// Why a compare-and-set found nothing to change, read after the fact: the state now (and who
/// approved it, when), a stale version, or four eyes.
async fn refusal(
    conn: &mut PgConnection,
    org_id: OrgId,
    id: CampaignId,
    t: Transition,
    approval: Option<(UserId, i32)>,
) -> ChangeError {
    /// The campaign as it is now, and who approved it when.
    #[derive(sqlx::FromRow)]
    struct Now {
        status: CampaignStatus,
        content_version: i32,
        author_id: UserId,
        last_editor_id: UserId,
        approver: Option<String>,
        approved_at: Option<String>,
    }
    let current: Result<Option<Now>, _> = sqlx::query_as(
        "select c.status, c.content_version, c.author_id, c.last_editor_id, p.name as approver,
                to_char(c.approved_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as approved_at
         from campaigns c join orgs o on o.id = c.org_id
         left join users p on p.org_id = c.org_id and p.id = c.approver_id
         where c.org_id = $1 and c.id = $2 and c.deleted_at is null",
    )
    .bind(org_id)
    .bind(id)
    .fetch_optional(conn)
    .await;
    let now = match current {
        Err(e) => return ChangeError::Db(e),
        Ok(None) => return ChangeError::NotFound,
        Ok(Some(now)) => now,
    };
    let current = now.status;
    if let (Some((me, seen)), CampaignStatus::Submitted) = (approval, current) {
        if seen != now.content_version {
            return ChangeError::Stale {
                seen,
                now: now.content_version,
            };
        }
        if me == now.author_id || me == now.last_editor_id {
            return ChangeError::FourEyes;
        }
    }
    ChangeError::Refused {
        error: TransitionError {
            transition: t,
            current,
        },
        // Who approved it matters to a refused approval ("already approved by …"), not to others.
        by: now
            .approver
            .zip(now.approved_at)
            .filter(|_| t == Transition::Approve),
    }
}

fn from_states(t: Transition) -> Vec<&'static str> {
    t.from().iter().map(|s| s.as_str()).collect()
}

/// Submit, reject, pause, resume, cancel: a plain compare-and-set of the status.
pub async fn change(
    conn: &mut PgConnection,
    org_id: OrgId,
    id: CampaignId,
    t: Transition,
) -> Result<(), ChangeError> {
    let done: Option<i64> = sqlx::query_scalar(
        "update campaigns set status = $4, relay_pause_reason = null,
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
        None => Err(refusal(conn, org_id, id, t, None).await),
    }
}

/// Pauses a sending campaign by itself, for `reason` (its bounce or complaint rate), audited
/// with no actor. Once per campaign: an admin who resumes it has overruled the rates, and the
/// reason stays on record. `false` when it was not sending or had paused itself before.
pub async fn auto_pause(
    conn: &mut PgConnection,
    org_id: OrgId,
    id: CampaignId,
    reason: &str,
) -> sqlx::Result<bool> {
    let done: Option<i64> = sqlx::query_scalar(
        "update campaigns set status = 'paused', pause_reason = $3
         where org_id = $1 and id = $2 and status = 'sending' and pause_reason is null
         returning id",
    )
    .bind(org_id)
    .bind(id)
    .bind(reason)
    .fetch_optional(&mut *conn)
    .await?;
    if done.is_none() {
        return Ok(false);
    }
    crate::db::audit::record(
        conn,
        crate::db::audit::Entry {
            org_id: org_id.0,
            actor_id: None,
            api_token_id: None,
            action: crate::domain::AuditAction::CampaignAutoPause,
            object_type: "campaign",
            object_id: Some(id.to_string()),
            before: Some(serde_json::json!({ "status": "sending" })),
            after: Some(serde_json::json!({ "status": "paused", "reason": reason })),
        },
    )
    .await?;
    Ok(true)
}

/// Sends a submitted campaign back to its author's draft with the reviewer's reason.
pub async fn reject(
    conn: &mut PgConnection,
    org_id: OrgId,
    id: CampaignId,
    reason: &str,
) -> Result<(), ChangeError> {
    let done: Option<i64> = sqlx::query_scalar(
        "update campaigns set status = 'draft', rejection_reason = $3, submitted_at = null
         where org_id = $1 and id = $2 and status = 'submitted' and deleted_at is null
         returning id",
    )
    .bind(org_id)
    .bind(id)
    .bind(reason)
    .fetch_optional(&mut *conn)
    .await?;
    match done {
        Some(_) => Ok(()),
        None => Err(refusal(conn, org_id, id, Transition::Reject, None).await),
    }
}

/// Approves the exact content version the approver was shown, to go out at the campaign's
/// schedule (or now: "send now" stores `now()`). Four eyes: the approver is neither the author
/// nor the last editor, unless the org allows self-approval; then the campaign is marked
/// `self_approved` and `Ok(true)` says so (for the audit log). Wakes the campaign workers.
pub async fn approve(
    conn: &mut PgConnection,
    org_id: OrgId,
    id: CampaignId,
    approver: UserId,
    shown_version: i32,
) -> Result<bool, ChangeError> {
    let done: Option<bool> = sqlx::query_scalar(
        "update campaigns c set status = 'approved', approver_id = $3, approved_at = now(),
                approved_version = c.content_version, scheduled_for = coalesce(c.scheduled_for, now()),
                self_approved = ($3 = c.author_id or $3 = c.last_editor_id)
         from orgs o
         where o.id = c.org_id and c.org_id = $1 and c.id = $2 and c.status = 'submitted'
           and c.content_version = $4 and c.deleted_at is null
           and (($3 <> c.author_id and $3 <> c.last_editor_id) or o.allow_self_approval)
         returning c.self_approved",
    )
    .bind(org_id)
    .bind(id)
    .bind(approver)
    .bind(shown_version)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(self_approved) = done else {
        return Err(refusal(
            conn,
            org_id,
            id,
            Transition::Approve,
            Some((approver, shown_version)),
        )
        .await);
    };
    // The segments are sent as they are now, whatever later edits make of them.
    sqlx::query(
        "update campaign_segments cs set version = s.version from segments s
         where cs.org_id = $1 and cs.campaign_id = $2 and s.org_id = cs.org_id and s.id = cs.segment_id",
    )
    .bind(org_id)
    .bind(id)
    .execute(&mut *conn)
    .await?;
    sqlx::query("select pg_notify('mailroom_campaign_approved', $1::text)")
        .bind(id)
        .execute(conn)
        .await?;
    Ok(self_approved)
}

/// Records the recipient count the approver was shown (the estimate in the approval's
/// transaction), for the campaign page to set beside the count materialised at the start.
pub async fn record_estimate(
    conn: &mut PgConnection,
    org_id: OrgId,
    id: CampaignId,
    estimate: i64,
) -> sqlx::Result<()> {
    sqlx::query("update campaigns set approved_estimate = $3 where org_id = $1 and id = $2")
        .bind(org_id)
        .bind(id)
        .bind(estimate)
        .execute(conn)
        .await
        .map(drop)
}

/// A campaign of an organisation.
#[derive(sqlx::FromRow, Clone, Copy, Debug, PartialEq, Eq)]
pub struct OrgCampaign {
    pub org_id: OrgId,
    pub id: CampaignId,
}

/// Approved campaigns whose time has come, oldest first: candidates for [`start`].
pub async fn due(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<OrgCampaign>> {
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
pub async fn start(conn: &mut PgConnection, id: CampaignId) -> sqlx::Result<bool> {
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
pub async fn materialized(
    conn: &mut PgConnection,
    id: CampaignId,
    recipients: i64,
) -> sqlx::Result<()> {
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
pub async fn finish_done(conn: &mut PgConnection) -> sqlx::Result<Vec<CampaignId>> {
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
pub async fn notify_progress(
    pool: &sqlx::PgPool,
    channel: &str,
    ids: &[CampaignId],
) -> sqlx::Result<()> {
    sqlx::query("select pg_notify($1, id::text) from unnest($2::bigint[]) id")
        .bind(channel)
        .bind(ids)
        .execute(pool)
        .await?;
    Ok(())
}
