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
