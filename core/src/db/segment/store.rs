//! Saved segments: named per org (case-insensitively unique among those not deleted),
//! versioned (each change of the definition is a new version, every version kept, so a
//! campaign approved against one is sent to that one), deleted softly and only when no
//! campaign still to be sent uses them. Every statement is scoped by the org.

use sqlx::types::Json;
use sqlx::PgConnection;

use crate::domain::segment::Group;
use crate::domain::{CampaignId, OrgId};

/// A saved segment.
#[derive(sqlx::FromRow, Debug, Clone)]
pub struct Saved {
    pub id: i64,
    pub name: String,
    pub version: i32,
    pub definition: Json<Group>,
    /// RFC 3339, UTC.
    pub updated_at: String,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("no such segment")]
    NotFound,
    /// Another segment of the org has this name.
    #[error("the name is taken")]
    Taken,
    /// The segment changed since the caller read it: its version now.
    #[error("the segment changed meanwhile")]
    Moved(i32),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

fn taken(e: sqlx::Error) -> StoreError {
    match &e {
        sqlx::Error::Database(d) if d.constraint() == Some("segments_name") => StoreError::Taken,
        _ => StoreError::Db(e),
    }
}

const COLUMNS: &str = "id, name, version, definition,
    to_char(updated_at at time zone 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') as updated_at";

/// The first node of `g` naming a list or campaign that is not the org's, by its path.
pub async fn foreign_reference(
    conn: &mut PgConnection,
    org: OrgId,
    g: &Group,
) -> sqlx::Result<Option<String>> {
    let lists = g.lists();
    let campaigns = g.campaigns();
    if lists.is_empty() && campaigns.is_empty() {
        return Ok(None);
    }
    let list_ids: Vec<i64> = lists.iter().map(|(_, l)| *l).collect();
    let campaign_ids: Vec<CampaignId> = campaigns.iter().map(|(_, c)| *c).collect();
    let (lists_ours, campaigns_ours): (Vec<i64>, Vec<i64>) = sqlx::query_as(
        "select coalesce((select array_agg(id) from lists where org_id = $1 and id = any($2)), '{}'),
                coalesce((select array_agg(id) from campaigns
                          where org_id = $1 and id = any($3) and deleted_at is null), '{}')",
    )
    .bind(org)
    .bind(&list_ids)
    .bind(&campaign_ids)
    .fetch_one(conn)
    .await?;
    let list = lists
        .into_iter()
        .find(|(_, l)| !lists_ours.contains(l))
        .map(|(p, _)| format!("{p}.list_id"));
    let campaign = campaigns
        .into_iter()
        .find(|(_, c)| !campaigns_ours.contains(&c.0))
        .map(|(p, _)| format!("{p}.campaign_id"));
    Ok(list.or(campaign))
}

/// Saves a new segment (version 1); the caller checked the tree and its references.
pub async fn create(
    conn: &mut PgConnection,
    org: OrgId,
    name: &str,
    definition: &Group,
) -> Result<i64, StoreError> {
    let id: i64 = sqlx::query_scalar(
        "with s as (insert into segments (org_id, name, definition) values ($1, $2, $3)
                    returning id, org_id, definition),
              v as (insert into segment_versions (org_id, segment_id, version, definition)
                    select org_id, id, 1, definition from s)
         select id from s",
    )
    .bind(org)
    .bind(name)
    .bind(Json(definition))
    .fetch_one(conn)
    .await
    .map_err(taken)?;
    Ok(id)
}

/// Renames a segment and, when the definition differs, makes it a new version. With
/// `expected` (the version the caller read), a segment changed meanwhile is `Moved`. Returns
/// the version now.
pub async fn update(
    conn: &mut PgConnection,
    org: OrgId,
    id: i64,
    name: &str,
    definition: &Group,
    expected: Option<i32>,
) -> Result<i32, StoreError> {
    let now: Option<(i32, Json<Group>)> = sqlx::query_as(
        "select version, definition from segments
         where org_id = $1 and id = $2 and deleted_at is null for update",
    )
    .bind(org)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((version, Json(current))) = now else {
        return Err(StoreError::NotFound);
    };
    if expected.is_some_and(|e| e != version) {
        return Err(StoreError::Moved(version));
    }
    let next = if current == *definition {
        version
    } else {
        version + 1
    };
    sqlx::query(
        "with s as (update segments set name = $3, definition = $4, version = $5
                    where org_id = $1 and id = $2)
         insert into segment_versions (org_id, segment_id, version, definition)
         select $1, $2, $5, $4 where $5 <> $6
         on conflict do nothing",
    )
    .bind(org)
    .bind(id)
    .bind(name)
    .bind(Json(definition))
    .bind(next)
    .bind(version)
    .execute(conn)
    .await
    .map_err(taken)?;
    Ok(next)
}

pub async fn get(conn: &mut PgConnection, org: OrgId, id: i64) -> sqlx::Result<Option<Saved>> {
    sqlx::query_as(&format!(
        "select {COLUMNS} from segments where org_id = $1 and id = $2 and deleted_at is null"
    ))
    .bind(org)
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// The org's segments by name.
pub async fn list(conn: &mut PgConnection, org: OrgId) -> sqlx::Result<Vec<Saved>> {
    sqlx::query_as(&format!(
        "select {COLUMNS} from segments where org_id = $1 and deleted_at is null
         order by lower(name), id"
    ))
    .bind(org)
    .fetch_all(conn)
    .await
}

/// One version of a segment's definition (deleted segments' too: a campaign approved against
/// it still reads it).
pub async fn definition_at(
    conn: &mut PgConnection,
    org: OrgId,
    id: i64,
    version: i32,
) -> sqlx::Result<Option<Group>> {
    let d: Option<Json<Group>> = sqlx::query_scalar(
        "select definition from segment_versions
         where org_id = $1 and segment_id = $2 and version = $3",
    )
    .bind(org)
    .bind(id)
    .bind(version)
    .fetch_optional(conn)
    .await?;
    Ok(d.map(|Json(g)| g))
}

#[derive(Debug, thiserror::Error)]
pub enum DeleteError {
    #[error("no such segment")]
    NotFound,
    /// Campaigns not yet sent target it, or live automations are triggered by it: their
    /// names (an automation's prefixed `automation `).
    #[error("the segment is in use")]
    InUse(Vec<String>),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Deletes a segment no campaign still to be sent (draft to paused) targets and no live
/// automation is triggered by.
pub async fn delete(conn: &mut PgConnection, org: OrgId, id: i64) -> Result<(), DeleteError> {
    let found: Option<i64> = sqlx::query_scalar(
        "select id from segments where org_id = $1 and id = $2 and deleted_at is null for update",
    )
    .bind(org)
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?;
    if found.is_none() {
        return Err(DeleteError::NotFound);
    }
    let users: Vec<String> = sqlx::query_scalar(
        "select c.name from campaign_segments cs
         join campaigns c on c.org_id = cs.org_id and c.id = cs.campaign_id
         where cs.org_id = $1 and cs.segment_id = $2 and c.deleted_at is null
           and c.status in ('draft', 'submitted', 'approved', 'sending', 'paused')
         union all
         select 'automation ' || a.name from automations a
         where a.org_id = $1 and a.trigger_segment_id = $2 and a.trigger_kind = 'segment_entered'
           and a.status in ('active', 'paused')
         order by 1",
    )
    .bind(org)
    .bind(id)
    .fetch_all(&mut *conn)
    .await?;
    if !users.is_empty() {
        return Err(DeleteError::InUse(users));
    }
    sqlx::query("update segments set deleted_at = now() where org_id = $1 and id = $2")
        .bind(org)
        .bind(id)
        .execute(conn)
        .await?;
    Ok(())
}
