//! An automation's versions and its life: a draft is edited in place until it is approved;
//! editing an approved automation makes a new version, which goes live only when approved (the
//! people already enrolled finish on theirs). Approval needs an admin other than the version's
//! editor unless the org allows self-approval (then it is marked).

use sqlx::types::Json;
use sqlx::PgConnection;

use crate::domain::automation::{AutomationStatus, Definition, Trigger};
use crate::domain::{OrgId, UserId};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("no such automation")]
    NotFound,
    #[error("the name is taken")]
    Taken,
    /// A stopped automation is never changed again.
    #[error("the automation was stopped")]
    Stopped,
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

fn taken(e: sqlx::Error) -> StoreError {
    match &e {
        sqlx::Error::Database(d) if d.constraint() == Some("automations_name") => StoreError::Taken,
        _ => StoreError::Db(e),
    }
}

/// The first field of `d` naming a list or segment that is not the org's (a deleted
/// segment is no longer anyone's).
pub async fn foreign_reference(
    conn: &mut PgConnection,
    org: OrgId,
    d: &Definition,
) -> sqlx::Result<Option<String>> {
    if let Trigger::SegmentEntered { segment_id, .. } = d.trigger {
        if segment_version(&mut *conn, org, segment_id)
            .await?
            .is_none()
        {
            return Ok(Some("trigger.segment_id".into()));
        }
    }
    // A branch's condition may name campaigns too: the segments' own check, per branch.
    for (path, g) in d.conditions() {
        if let Some(p) = crate::db::segment::foreign_reference(&mut *conn, org, g).await? {
            return Ok(Some(format!("{path}.{p}")));
        }
    }
    let lists = d.lists();
    if lists.is_empty() {
        return Ok(None);
    }
    let ids: Vec<i64> = lists.iter().map(|(_, l)| *l).collect();
    let ours: Vec<i64> = sqlx::query_scalar(
        "select coalesce(array_agg(id), '{}') from lists where org_id = $1 and id = any($2)",
    )
    .bind(org)
    .bind(&ids)
    .fetch_one(conn)
    .await?;
    Ok(lists
        .into_iter()
        .find(|(_, l)| !ours.contains(l))
        .map(|(p, _)| p))
}

/// The current version of the org's segment `id`, unless it was deleted.
async fn segment_version(
    conn: &mut PgConnection,
    org: OrgId,
    id: i64,
) -> sqlx::Result<Option<i32>> {
    sqlx::query_scalar(
        "select version from segments where org_id = $1 and id = $2 and deleted_at is null",
    )
    .bind(org)
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// `d` as it is saved: a segment trigger names the segment's version now, whatever the caller
/// sent, so approving this automation version approves that segment version too.
async fn pinned(
    conn: &mut PgConnection,
    org: OrgId,
    d: &Definition,
) -> Result<Definition, StoreError> {
    let mut d = d.clone();
    if let Trigger::SegmentEntered {
        segment_id,
        version,
    } = &mut d.trigger
    {
        *version = Some(
            segment_version(conn, org, *segment_id)
                .await?
                .ok_or(StoreError::NotFound)?,
        );
    }
    Ok(d)
}

/// A new draft (version 1); the caller checked the definition and its references.
pub async fn create(
    conn: &mut PgConnection,
    org: OrgId,
    name: &str,
    d: &Definition,
    editor: UserId,
) -> Result<i64, StoreError> {
    let d = &pinned(&mut *conn, org, d).await?;
    sqlx::query_scalar(
        "with a as (insert into automations (org_id, name) values ($1, $2) returning id, org_id),
              v as (insert into automation_versions (org_id, automation_id, version, definition, editor_id)
                    select org_id, id, 1, $3, $4 from a)
         select id from a",
    )
    .bind(org)
    .bind(name)
    .bind(Json(d))
    .bind(editor)
    .fetch_one(conn)
    .await
    .map_err(taken)
}

/// Renames the automation and saves `d` as a new version, waiting for approval. Every save
/// is a version of its own and a version never changes once written, so what an approver
/// approves (by its number) is exactly what they were shown. Returns that version.
pub async fn update(
    conn: &mut PgConnection,
    org: OrgId,
    id: i64,
    name: &str,
    d: &Definition,
    editor: UserId,
) -> Result<i32, StoreError> {
    let row: Option<(AutomationStatus, i32)> = sqlx::query_as(
        "select status, draft_version from automations
         where org_id = $1 and id = $2 for update",
    )
    .bind(org)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((status, draft)) = row else {
        return Err(StoreError::NotFound);
    };
    if status == AutomationStatus::Stopped {
        return Err(StoreError::Stopped);
    }
    let d = &pinned(&mut *conn, org, d).await?;
    let version = draft + 1;
    sqlx::query(
        "insert into automation_versions (org_id, automation_id, version, definition, editor_id)
         values ($1, $2, $3, $4, $5)",
    )
    .bind(org)
    .bind(id)
    .bind(version)
    .bind(Json(d))
    .bind(editor)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "update automations set name = $3, draft_version = $4 where org_id = $1 and id = $2",
    )
    .bind(org)
    .bind(id)
    .bind(name)
    .bind(version)
    .execute(&mut *conn)
    .await
    .map_err(taken)?;
    Ok(version)
}

#[derive(Debug, thiserror::Error)]
pub enum ApproveError {
    #[error("no such automation")]
    NotFound,
    /// The version shown to the approver is no longer the one waiting (it was edited since).
    #[error("the automation changed meanwhile")]
    Moved,
    #[error("nothing waits for approval")]
    NothingWaiting,
    /// Four eyes: the approver wrote the automation or this version, and the org does not
    /// allow self-approval.
    #[error("approve someone else's edit")]
    OwnEdit,
    #[error("the automation was stopped")]
    Stopped,
    /// The segment that triggers it was deleted after the version was saved.
    #[error("its segment was deleted")]
    SegmentGone,
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Approved {
    pub version: i32,
    /// The approver edited it themselves (the org allows that, and the audit log says so).
    pub self_approved: bool,
    /// It was a draft and is now active.
    pub activated: bool,
}

/// Approves `version` (the one the approver was shown) and makes it live: triggers enrol on
/// it from this commit on; people already enrolled finish on their own version.
pub async fn approve(
    conn: &mut PgConnection,
    org: OrgId,
    id: i64,
    version: i32,
    approver: UserId,
    allow_self: bool,
) -> Result<Approved, ApproveError> {
    let row: Option<(AutomationStatus, Option<i32>, i32)> = sqlx::query_as(
        "select status, live_version, draft_version from automations
         where org_id = $1 and id = $2 for update",
    )
    .bind(org)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((status, live, draft)) = row else {
        return Err(ApproveError::NotFound);
    };
    if status == AutomationStatus::Stopped {
        return Err(ApproveError::Stopped);
    }
    if live == Some(draft) {
        return Err(ApproveError::NothingWaiting);
    }
    if version != draft {
        return Err(ApproveError::Moved);
    }
    // As for a campaign: neither its author (the first version's editor) nor this version's.
    let (editor, author, definition): (UserId, UserId, Json<Definition>) = sqlx::query_as(
        "select v.editor_id, first.editor_id, v.definition
         from automation_versions v
         join automation_versions first on first.automation_id = v.automation_id and first.version = 1
         where v.org_id = $1 and v.automation_id = $2 and v.version = $3",
    )
    .bind(org)
    .bind(id)
    .bind(version)
    .fetch_one(&mut *conn)
    .await?;
    let self_approved = editor == approver || author == approver;
    if self_approved && !allow_self {
        return Err(ApproveError::OwnEdit);
    }
    let d = definition.0;
    let (list, event, segment) = match &d.trigger {
        Trigger::ListJoined { list_id } => (Some(*list_id), None, None),
        Trigger::Event { name, .. } => (None, Some(name.as_str()), None),
        Trigger::SegmentEntered { segment_id, .. } => (None, None, Some(*segment_id)),
        Trigger::Api | Trigger::Date { .. } => (None, None, None),
    };
    if let Some(segment) = segment {
        // Held shared until commit: a segment delete (which locks its row) waits, then sees
        // this automation live and refuses; one that committed first leaves nothing to hold.
        let still: Option<i64> = sqlx::query_scalar(
            "select id from segments where org_id = $1 and id = $2 and deleted_at is null
             for share",
        )
        .bind(org)
        .bind(segment)
        .fetch_optional(&mut *conn)
        .await?;
        if still.is_none() {
            return Err(ApproveError::SegmentGone);
        }
    }
    sqlx::query(
        "update automation_versions set approver_id = $4, approved_at = now(), self_approved = $5
         where org_id = $1 and automation_id = $2 and version = $3",
    )
    .bind(org)
    .bind(id)
    .bind(version)
    .bind(approver)
    .bind(self_approved)
    .execute(&mut *conn)
    .await?;
    let activated = status == AutomationStatus::Draft;
    sqlx::query(
        "update automations
         set live_version = $3, trigger_kind = $4, trigger_list_id = $5, trigger_event = $6,
             trigger_segment_id = $8, reentry = $7,
             status = case when status = 'draft' then 'active' else status end
         where org_id = $1 and id = $2",
    )
    .bind(org)
    .bind(id)
    .bind(version)
    .bind(d.trigger.kind())
    .bind(list)
    .bind(event)
    .bind(d.reentry)
    .bind(segment)
    .execute(&mut *conn)
    .await?;
    Ok(Approved {
        version,
        self_approved,
        activated,
    })
}

/// What an admin does to a live automation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// No step is taken until resumed (triggers still enrol, so nobody is missed).
    Pause,
    Resume,
    /// Ends every enrolment and takes its unsent mail off the queue; for good.
    Stop,
}

/// Applies `c`; returns the status before and after, or `None` when the change does not apply
/// to the automation's status (resuming one that is not paused, stopping a draft).
pub async fn set_status(
    conn: &mut PgConnection,
    org: OrgId,
    id: i64,
    c: Control,
) -> Result<Option<(AutomationStatus, AutomationStatus)>, StoreError> {
    let (from, to) = match c {
        Control::Pause => (vec![AutomationStatus::Active], AutomationStatus::Paused),
        Control::Resume => (vec![AutomationStatus::Paused], AutomationStatus::Active),
        Control::Stop => (
            vec![AutomationStatus::Active, AutomationStatus::Paused],
            AutomationStatus::Stopped,
        ),
    };
    let before: Option<AutomationStatus> = sqlx::query_scalar(
        "select status from automations where org_id = $1 and id = $2 for update",
    )
    .bind(org)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(before) = before else {
        return Err(StoreError::NotFound);
    };
    if !from.contains(&before) {
        return Ok(None);
    }
    sqlx::query("update automations set status = $3 where org_id = $1 and id = $2")
        .bind(org)
        .bind(id)
        .bind(to)
        .execute(&mut *conn)
        .await?;
    if c == Control::Stop {
        sqlx::query(
            "update enrolments set state = 'stopped', exit_reason = 'stopped', ended_at = now()
             where org_id = $1 and automation_id = $2 and state = 'active'",
        )
        .bind(org)
        .bind(id)
        .execute(&mut *conn)
        .await?;
        // Every enrolment's mail not yet claimed, ended now or before.
        let all: Vec<i64> = sqlx::query_scalar(
            "select distinct enrolment_id from deliveries
             where org_id = $1 and automation_id = $2 and status = 'queued'",
        )
        .bind(org)
        .bind(id)
        .fetch_all(&mut *conn)
        .await?;
        crate::db::delivery::cancel_automation_mail(conn, org, &all, "the automation was stopped")
            .await?;
    }
    Ok(Some((before, to)))
}
