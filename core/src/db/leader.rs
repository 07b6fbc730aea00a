//! Leadership (guarantee 11): one lease row per role, timed by the database clock. The epoch
//! is a fencing token: every leader write carries [`Lease`] and is applied only while that exact
//! epoch still holds an unexpired lease, so a leader that stalled past its lease (GC pause,
//! SIGSTOP, lost network) cannot write after another replica took over.

use sqlx::PgPool;

/// A lease this process holds (as far as it knows).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    pub name: String,
    pub holder: String,
    pub epoch: i64,
}

/// Acquires the lease, or renews it when we still hold it. A new holder (or a holder whose lease
/// ran out meanwhile) gets the next epoch. `None`: someone else holds a live lease.
pub async fn acquire(
    pool: &PgPool,
    name: &str,
    holder: &str,
    ttl_seconds: f64,
) -> sqlx::Result<Option<Lease>> {
    let epoch: Option<i64> = sqlx::query_scalar(
        "insert into leader_lease as l (name, holder, epoch, expires_at)
         values ($1, $2, 1, now() + make_interval(secs => $3))
         on conflict (name) do update
         set epoch = case when l.holder = excluded.holder and l.expires_at > now() then l.epoch else l.epoch + 1 end,
             holder = excluded.holder,
             expires_at = excluded.expires_at
         where l.holder = excluded.holder or l.expires_at <= now()
         returning epoch",
    )
    .bind(name)
    .bind(holder)
    .bind(ttl_seconds)
    .fetch_optional(pool)
    .await?;
    Ok(epoch.map(|epoch| Lease {
        name: name.to_string(),
        holder: holder.to_string(),
        epoch,
    }))
}

/// Gives the lease up (clean shutdown) so another replica need not wait for it to expire.
pub async fn release(pool: &PgPool, lease: &Lease) -> sqlx::Result<()> {
    sqlx::query(
        "update leader_lease set expires_at = now()
         where name = $1 and holder = $2 and epoch = $3 and expires_at > now()",
    )
    .bind(&lease.name)
    .bind(&lease.holder)
    .bind(lease.epoch)
    .execute(pool)
    .await?;
    Ok(())
}

/// The fence: a condition true only while the lease bound as `$1`–`$3` is current. A fenced
/// statement is always started with [`fenced`] (or [`fenced_rows`]), which binds those three
/// first, so its own parameters are `$4` on: there is no position to get wrong.
pub(crate) const FENCE: &str =
    "exists (select 1 from leader_lease fence where fence.name = $1 and fence.holder = $2
             and fence.epoch = $3 and fence.expires_at > now())";

type Args = sqlx::postgres::PgArguments;

/// A fenced statement returning rows, with the lease bound.
pub(crate) fn fenced<'q, O>(
    sql: &'q str,
    lease: &'q Lease,
) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, Args>
where
    O: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>,
{
    sqlx::query_as(sql)
        .bind(&lease.name)
        .bind(&lease.holder)
        .bind(lease.epoch)
}

/// A fenced statement whose rows affected is its answer, with the lease bound.
pub(crate) fn fenced_rows<'q>(
    sql: &'q str,
    lease: &'q Lease,
) -> sqlx::query::Query<'q, sqlx::Postgres, Args> {
    sqlx::query(sql)
        .bind(&lease.name)
        .bind(&lease.holder)
        .bind(lease.epoch)
}

/// Records a leader action under the fence. `false`: the lease is no longer ours and nothing
/// was written.
pub async fn log_action(
    pool: &PgPool,
    lease: &Lease,
    action: &str,
    detail: &str,
) -> sqlx::Result<bool> {
    let sql = format!(
        "insert into leader_log (name, holder, epoch, action, detail)
         select $1, $2, $3, $4, $5 where {FENCE}
         returning id"
    );
    let row: Option<(i64,)> = fenced(&sql, lease)
        .bind(action)
        .bind(detail)
        .fetch_optional(pool)
        .await?;
    Ok(row.is_some())
}

/// One logged leader action, for operators and tests.
#[derive(sqlx::FromRow, Debug, Clone)]
pub struct Action {
    pub epoch: i64,
    pub holder: String,
    pub action: String,
    pub at: chrono::DateTime<chrono::Utc>,
}

pub async fn actions(pool: &PgPool, name: &str) -> sqlx::Result<Vec<Action>> {
    sqlx::query_as("select epoch, holder, action, at from leader_log where name = $1 order by id")
        .bind(name)
        .fetch_all(pool)
        .await
}

/// Retention for the leader log itself: rows older than `days`.
pub async fn trim_log(pool: &PgPool, lease: &Lease, days: f64) -> sqlx::Result<u64> {
    let sql =
        format!("delete from leader_log where at < now() - make_interval(secs => $4) and {FENCE}");
    let done = fenced_rows(&sql, lease)
        .bind(days * 86_400.0)
        .execute(pool)
        .await?;
    Ok(done.rows_affected())
}
