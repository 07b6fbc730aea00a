//! Generated secrets shared by every replica: created once (the first replica to ask wins the
//! insert), then read by all. Values never leave this module except to their user.

use sqlx::PgPool;

/// The versions of secret `name`, newest first; when there is none yet, `fresh` becomes
/// version 1 (a race between replicas keeps exactly one).
pub async fn ensure(pool: &PgPool, name: &str, fresh: &[u8]) -> sqlx::Result<Vec<Vec<u8>>> {
    sqlx::query(
        "insert into secrets (name, version, value) values ($1, 1, $2)
         on conflict (name, version) do nothing",
    )
    .bind(name)
    .bind(fresh)
    .execute(pool)
    .await?;
    sqlx::query_scalar("select value from secrets where name = $1 order by version desc")
        .bind(name)
        .fetch_all(pool)
        .await
}

/// A 32-byte signing key named `name`: the newest version, generated on first use.
pub async fn signing_key(pool: &PgPool, name: &str) -> sqlx::Result<Vec<u8>> {
    let fresh: [u8; 32] = rand::random();
    let versions = ensure(pool, name, &fresh).await?;
    // `ensure` inserted version 1 when there was none, so there is always one.
    Ok(versions.into_iter().next().unwrap_or(fresh.to_vec()))
}

/// Uses up the one-time secret `name` if `value` is it: the delete is the check, so of racing
/// callers with the right value exactly one gets `true` (the others wait, then find nothing).
pub async fn take(conn: &mut sqlx::PgConnection, name: &str, value: &[u8]) -> sqlx::Result<bool> {
    let deleted = sqlx::query("delete from secrets where name = $1 and value = $2")
        .bind(name)
        .bind(value)
        .execute(conn)
        .await?;
    Ok(deleted.rows_affected() > 0)
}
