//! An org's lists: with member counts, created, renamed and deleted by its admins.

use sqlx::PgConnection;

#[derive(sqlx::FromRow, Debug, Clone)]
pub struct ListRow {
    pub id: i64,
    pub name: String,
    pub members: i64,
    pub created: String,
    /// Its public sign-up page is /s/<signup_key>.
    pub signup_key: String,
}

pub async fn all(conn: &mut PgConnection, org_id: i64) -> sqlx::Result<Vec<ListRow>> {
    sqlx::query_as(
        "select l.id, l.name, l.signup_key,
                (select count(*) from list_members m where m.list_id = l.id) as members,
                to_char(l.created_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as created
         from lists l join orgs o on o.id = l.org_id
         where l.org_id = $1 order by l.name, l.id",
    )
    .bind(org_id)
    .fetch_all(conn)
    .await
}

/// The list's name, when it is the org's.
pub async fn name(conn: &mut PgConnection, org_id: i64, id: i64) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar("select name from lists where org_id = $1 and id = $2")
        .bind(org_id)
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// `None`: the org has a list of that name already.
pub async fn create(conn: &mut PgConnection, org_id: i64, name: &str) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "insert into lists (org_id, name) values ($1, $2)
         on conflict (org_id, name) do nothing returning id",
    )
    .bind(org_id)
    .bind(name)
    .fetch_optional(conn)
    .await
}

pub enum Renamed {
    Done { before: String },
    NotFound,
    Taken,
}

/// The list's name, its row locked until the transaction ends (None: no such list in the org).
async fn lock_name(conn: &mut PgConnection, org_id: i64, id: i64) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar("select name from lists where org_id = $1 and id = $2 for update")
        .bind(org_id)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await
}

pub async fn rename(
    conn: &mut PgConnection,
    org_id: i64,
    id: i64,
    name: &str,
) -> sqlx::Result<Renamed> {
    let Some(before) = lock_name(conn, org_id, id).await? else {
        return Ok(Renamed::NotFound);
    };
    let taken: bool = sqlx::query_scalar(
        "select exists (select 1 from lists where org_id = $1 and name = $2 and id <> $3)",
    )
    .bind(org_id)
    .bind(name)
    .bind(id)
    .fetch_one(&mut *conn)
    .await?;
    if taken {
        return Ok(Renamed::Taken);
    }
    sqlx::query("update lists set name = $3 where org_id = $1 and id = $2")
        .bind(org_id)
        .bind(id)
        .bind(name)
        .execute(conn)
        .await?;
    Ok(Renamed::Done { before })
}

pub enum Deleted {
    Done {
        name: String,
        members: i64,
    },
    NotFound,
    /// Campaigns not yet finished target it (their names).
    InUse(Vec<String>),
}

/// Deletes a list and its memberships (the subscribers stay). Refused while a campaign that
/// has not finished targets it; finished campaigns forget it (their recipients were
/// materialised when they started).
pub async fn delete(conn: &mut PgConnection, org_id: i64, id: i64) -> sqlx::Result<Deleted> {
    let Some(name) = lock_name(conn, org_id, id).await? else {
        return Ok(Deleted::NotFound);
    };
    let users: Vec<String> = sqlx::query_scalar(
        "select c.name from campaign_lists cl join campaigns c on c.org_id = cl.org_id and c.id = cl.campaign_id
         where cl.org_id = $1 and cl.list_id = $2
           and c.status not in ('sent', 'cancelled') and c.deleted_at is null
         order by c.id",
    )
    .bind(org_id)
    .bind(id)
    .fetch_all(&mut *conn)
    .await?;
    if !users.is_empty() {
        return Ok(Deleted::InUse(users));
    }
    let members: i64 = sqlx::query_scalar(
        "with unlinked as (delete from campaign_lists where org_id = $1 and list_id = $2),
              gone as (delete from list_members where org_id = $1 and list_id = $2 returning 1),
              l as (delete from lists where org_id = $1 and id = $2)
         select count(*) from gone",
    )
    .bind(org_id)
    .bind(id)
    .fetch_one(conn)
    .await?;
    Ok(Deleted::Done { name, members })
}
