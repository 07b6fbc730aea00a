use sqlx::PgPool;

use crate::model::CurrentUser;

/// Stores a new server-side session; the cookie carries the token, the table only its hash.
pub async fn create(
    pool: &PgPool,
    token_hash: &[u8],
    org_id: i64,
    user_id: i64,
    ttl_seconds: i64,
) -> sqlx::Result<()> {
    sqlx::query(
        "insert into sessions (token_hash, org_id, user_id, expires_at)
         values ($1, $2, $3, now() + make_interval(secs => $4))",
    )
    .bind(token_hash)
    .bind(org_id)
    .bind(user_id)
    .bind(ttl_seconds as f64)
    .execute(pool)
    .await?;
    Ok(())
}

/// The signed-in user of a live session: expired sessions and disabled users are nobody.
pub async fn lookup(pool: &PgPool, token_hash: &[u8]) -> sqlx::Result<Option<CurrentUser>> {
    sqlx::query_as(
        "select u.id as user_id, u.org_id, u.name, u.email, u.role, o.name as org_name
         from sessions s
         join users u on u.org_id = s.org_id and u.id = s.user_id
         join orgs o on o.id = u.org_id
         where s.token_hash = $1 and s.expires_at > now() and not u.disabled",
    )
    .bind(token_hash)
    .fetch_optional(pool)
    .await
}

pub async fn delete(pool: &PgPool, token_hash: &[u8]) -> sqlx::Result<()> {
    sqlx::query("delete from sessions where token_hash = $1")
        .bind(token_hash)
        .execute(pool)
        .await?;
    Ok(())
}

/// Housekeeping: drops expired sessions (idempotent; any replica may run it).
pub async fn purge_expired(pool: &PgPool) -> sqlx::Result<u64> {
    Ok(
        sqlx::query("delete from sessions where expires_at <= now()")
            .execute(pool)
            .await?
            .rows_affected(),
    )
}
