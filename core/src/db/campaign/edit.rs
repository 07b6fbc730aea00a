//! A campaign's content while it is a draft: read it for the editor, save it (a compare-and-set
//! on the content version, which each save bumps), estimate its recipients, and pick a real
//! recipient for the preview. Content changes only in `draft`; saving a `submitted` campaign
//! sends it back to `draft` (the approval must be asked for again).

use sqlx::PgConnection;

use super::audience;
use crate::domain::{BodyFormat, CampaignStatus};
use crate::domain::{CampaignId, OrgId, UserId};

#[derive(sqlx::FromRow, Clone, Debug, PartialEq, Eq)]
pub struct Editable {
    pub id: i64,
    pub name: String,
    pub subject: String,
    pub body: String,
    pub body_format: BodyFormat,
    pub status: CampaignStatus,
    pub content_version: i32,
    /// The lists sent to, and those whose members are left out.
    pub list_ids: Vec<i64>,
    pub excluded_list_ids: Vec<i64>,
    /// The segments sent to, and those whose matches are left out.
    pub segment_ids: Vec<i64>,
    pub excluded_segment_ids: Vec<i64>,
    /// `YYYY-MM-DDTHH:MM` in the org's time zone; `None`: as soon as approved.
    pub scheduled_local: Option<String>,
    pub timezone: String,
    pub author: String,
    pub last_editor: String,
    pub author_id: i64,
    pub last_editor_id: i64,
    pub approver: Option<String>,
    /// `YYYY-MM-DD HH:MI` in the org's time zone.
    pub approved_at: Option<String>,
    pub rejection_reason: Option<String>,
    /// Recipients materialised at the start (`None` before it).
    pub recipients_total: Option<i64>,
    /// The count the approver was shown.
    pub approved_estimate: Option<i64>,
}

pub async fn load(
    conn: &mut PgConnection,
    org_id: OrgId,
    id: CampaignId,
) -> sqlx::Result<Option<Editable>> {
    sqlx::query_as(
        "select c.id, c.name, c.subject, c.body, c.body_format, c.status, c.content_version,
                coalesce((select array_agg(cl.list_id order by cl.list_id) from campaign_lists cl
                          where cl.org_id = c.org_id and cl.campaign_id = c.id and not cl.exclude),
                         '{}') as list_ids,
                coalesce((select array_agg(cl.list_id order by cl.list_id) from campaign_lists cl
                          where cl.org_id = c.org_id and cl.campaign_id = c.id and cl.exclude),
                         '{}') as excluded_list_ids,
                coalesce((select array_agg(cs.segment_id order by cs.segment_id) from campaign_segments cs
                          where cs.org_id = c.org_id and cs.campaign_id = c.id and not cs.exclude),
                         '{}') as segment_ids,
                coalesce((select array_agg(cs.segment_id order by cs.segment_id) from campaign_segments cs
                          where cs.org_id = c.org_id and cs.campaign_id = c.id and cs.exclude),
                         '{}') as excluded_segment_ids,
                to_char(c.scheduled_for at time zone o.timezone, 'YYYY-MM-DD\"T\"HH24:MI') as scheduled_local,
                o.timezone, a.name as author, e.name as last_editor, c.author_id, c.last_editor_id,
                p.name as approver,
                to_char(c.approved_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as approved_at,
                c.rejection_reason, c.recipients_total, c.approved_estimate
         from campaigns c
         join orgs o on o.id = c.org_id
         join users a on a.org_id = c.org_id and a.id = c.author_id
         join users e on e.org_id = c.org_id and e.id = c.last_editor_id
         left join users p on p.org_id = c.org_id and p.id = c.approver_id
         where c.org_id = $1 and c.id = $2 and c.deleted_at is null",
    )
    .bind(org_id)
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// What an editor saves.
pub struct Changes<'a> {
    pub name: &'a str,
    pub subject: &'a str,
    pub body: &'a str,
    pub body_format: BodyFormat,
    pub audience: &'a Audience,
    /// `YYYY-MM-DDTHH:MM` in the org's time zone; `None`: as soon as approved.
    pub scheduled_local: Option<&'a str>,
}

/// The lists and segments a campaign sends to, and those it leaves out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Audience {
    pub lists: Vec<i64>,
    pub excluded_lists: Vec<i64>,
    pub segments: Vec<i64>,
    pub excluded_segments: Vec<i64>,
}

impl Audience {
    /// Sends to these lists, excluding nothing.
    pub fn of_lists(lists: &[i64]) -> Audience {
        Audience {
            lists: lists.to_vec(),
            ..Audience::default()
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// The version or the state moved since the editor loaded it: (status, version) now.
    #[error("the campaign changed meanwhile")]
    Moved {
        status: CampaignStatus,
        version: i32,
    },
    #[error("the campaign does not exist")]
    NotFound,
    /// A target list or segment is not this org's.
    #[error("unknown list or segment")]
    UnknownList,
    #[error("the scheduled time is in the past")]
    PastSchedule,
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Saves `changes` over version `seen` (compare-and-set), from `draft` or `submitted` (which
/// goes back to `draft`), and replaces the target lists. Returns the new content version.
pub async fn save(
    conn: &mut PgConnection,
    org_id: OrgId,
    id: CampaignId,
    editor: UserId,
    seen: i32,
    changes: &Changes<'_>,
) -> Result<i32, SaveError> {
    let a = changes.audience;
    let lists: Vec<i64> = a.lists.iter().chain(&a.excluded_lists).copied().collect();
    let segments: Vec<i64> = a
        .segments
        .iter()
        .chain(&a.excluded_segments)
        .copied()
        .collect();
    let lists_ok: bool = sqlx::query_scalar(
        "select (select count(*) from lists where org_id = $1 and id = any($2)) = cardinality($2::bigint[])
            and (select count(*) from segments where org_id = $1 and id = any($3) and deleted_at is null)
                = cardinality($3::bigint[])",
    )
    .bind(org_id)
    .bind(&lists)
    .bind(&segments)
    .fetch_one(&mut *conn)
    .await?;
    if !lists_ok {
        return Err(SaveError::UnknownList);
    }
    let saved: Option<(i32, bool)> = sqlx::query_as(
        "with o as (select timezone from orgs where id = $1),
         at as (select ($9::timestamp at time zone o.timezone) as t from o)
         update campaigns c set name = $5, subject = $6, body = $7, body_format = $8,
                scheduled_for = (select t from at), status = 'draft', submitted_at = null,
                content_version = c.content_version + 1, last_editor_id = $3
         where c.org_id = $1 and c.id = $2 and c.content_version = $4
           and c.status = any($10) and c.deleted_at is null
           and ($9 is null or (select t from at) > now())
         returning c.content_version, true",
    )
    .bind(org_id)
    .bind(id)
    .bind(editor)
    .bind(seen)
    .bind(changes.name)
    .bind(changes.subject)
    .bind(changes.body)
    .bind(changes.body_format)
    .bind(changes.scheduled_local.map(|s| s.replace('T', " ")))
    .bind(CampaignStatus::CONTENT_EDITABLE.map(CampaignStatus::as_str))
    .fetch_optional(&mut *conn)
    .await?;
    let Some((version, _)) = saved else {
        let now: Option<(CampaignStatus, i32, bool)> = sqlx::query_as(
            "select c.status, c.content_version,
                    $3::text is not null and ($3::timestamp at time zone o.timezone) <= now()
             from campaigns c join orgs o on o.id = c.org_id
             where c.org_id = $1 and c.id = $2 and c.deleted_at is null",
        )
        .bind(org_id)
        .bind(id)
        .bind(changes.scheduled_local.map(|s| s.replace('T', " ")))
        .fetch_optional(&mut *conn)
        .await?;
        return Err(match now {
            None => SaveError::NotFound,
            Some((status, version, past))
                if past && version == seen && status.content_editable() =>
            {
                SaveError::PastSchedule
            }
            Some((status, version, _)) => SaveError::Moved { status, version },
        });
    };
    set_audience(conn, org_id, id, a).await?;
    Ok(version)
}

/// Replaces a campaign's lists and segments (the caller checked they are the org's; the
/// segments' versions are frozen at approval).
pub async fn set_audience(
    conn: &mut PgConnection,
    org_id: OrgId,
    id: CampaignId,
    a: &Audience,
) -> sqlx::Result<()> {
    sqlx::query(
        "with l as (delete from campaign_lists where org_id = $1 and campaign_id = $2)
         delete from campaign_segments where org_id = $1 and campaign_id = $2",
    )
    .bind(org_id)
    .bind(id)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "with l as (
             insert into campaign_lists (org_id, campaign_id, list_id, exclude)
             select $1, $2, l, false from unnest($3::bigint[]) as l
             union all
             select $1, $2, l, true from unnest($4::bigint[]) as l
             on conflict do nothing
         )
         insert into campaign_segments (org_id, campaign_id, segment_id, exclude)
         select $1, $2, g, false from unnest($5::bigint[]) as g
         union all
         select $1, $2, g, true from unnest($6::bigint[]) as g
         on conflict do nothing",
    )
    .bind(org_id)
    .bind(id)
    .bind(&a.lists)
    .bind(&a.excluded_lists)
    .bind(&a.segments)
    .bind(&a.excluded_segments)
    .execute(conn)
    .await?;
    Ok(())
}

/// The content version of a campaign that is not in the recycle bin.
pub async fn content_version(
    conn: &mut PgConnection,
    org_id: OrgId,
    id: CampaignId,
) -> sqlx::Result<Option<i32>> {
    sqlx::query_scalar(
        "select content_version from campaigns where org_id = $1 and id = $2 and deleted_at is null",
    )
    .bind(org_id)
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// Recipients the campaign would reach now: distinct addresses of its audience.
pub async fn estimate(conn: &mut PgConnection, org_id: OrgId, id: CampaignId) -> sqlx::Result<i64> {
    let targets = audience::targets(conn, org_id, id).await?;
    let clock = crate::db::segment::clock(conn, org_id, None).await?;
    let mut qb = sqlx::QueryBuilder::new("select count(distinct s.email_lower)");
    audience::push_from(&mut qb, org_id, &targets, &clock);
    let mut tx = crate::db::segment::roomy(conn).await?;
    let n = qb
        .build_query_scalar()
        .persistent(false)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(n)
}

/// A real recipient for the preview.
#[derive(sqlx::FromRow, Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub email: String,
}

/// The first address of the campaign's audience, so an approver never sees the campaign
/// addressed to someone it will not reach.
pub async fn sample_recipient(
    conn: &mut PgConnection,
    org_id: OrgId,
    id: CampaignId,
) -> sqlx::Result<Option<Sample>> {
    let targets = audience::targets(conn, org_id, id).await?;
    let clock = crate::db::segment::clock(conn, org_id, None).await?;
    let mut qb = sqlx::QueryBuilder::new("select s.name, s.email");
    audience::push_from(&mut qb, org_id, &targets, &clock);
    qb.push(" order by s.email_lower limit 1");
    let mut tx = crate::db::segment::roomy(conn).await?;
    let sample = qb
        .build_query_as()
        .persistent(false)
        .fetch_optional(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(sample)
}

/// A new draft by `author` with the content and target lists of `source` (any state), named
/// "Copy of …" (cut to the name limit). `None` when `source` is not this org's.
pub async fn clone_draft(
    conn: &mut PgConnection,
    org_id: OrgId,
    source: CampaignId,
    author: UserId,
) -> sqlx::Result<Option<i64>> {
    let id: Option<i64> = sqlx::query_scalar(
        "insert into campaigns (org_id, name, subject, body, body_format, author_id, last_editor_id)
         select org_id, left('Copy of ' || name, 200), subject, body, body_format, $3, $3
         from campaigns where org_id = $1 and id = $2 and deleted_at is null
         returning id",
    )
    .bind(org_id)
    .bind(source)
    .bind(author)
    .fetch_optional(&mut *conn)
    .await?;
    if let Some(id) = id {
        sqlx::query(
            "with l as (
                 insert into campaign_lists (org_id, campaign_id, list_id, exclude)
                 select org_id, $3, list_id, exclude from campaign_lists
                 where org_id = $1 and campaign_id = $2
             )
             insert into campaign_segments (org_id, campaign_id, segment_id, exclude)
             select cs.org_id, $3, cs.segment_id, cs.exclude from campaign_segments cs
             join segments s on s.org_id = cs.org_id and s.id = cs.segment_id and s.deleted_at is null
             where cs.org_id = $1 and cs.campaign_id = $2",
        )
        .bind(org_id)
        .bind(source)
        .bind(id)
        .execute(conn)
        .await?;
    }
    Ok(id)
}
