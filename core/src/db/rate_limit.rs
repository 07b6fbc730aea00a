//! Rate limits global across replicas: a token bucket row per key (an SMTP server, taken from
//! per batch; an API token, per request; a client IP on the sign-up pages) refilled by the
//! database clock.

use sqlx::PgPool;

/// Creates or re-configures a server's bucket (starting full).
pub async fn configure(
    pool: &PgPool,
    server: &str,
    capacity: f64,
    per_second: f64,
) -> sqlx::Result<()> {
    sqlx::query(
        "insert into rate_buckets (server, tokens, capacity, refill_per_second) values ($1, $2, $2, $3)
         on conflict (server) do update set capacity = $2, refill_per_second = $3, tokens = least(rate_buckets.tokens, $2)",
    )
    .bind(server)
    .bind(capacity)
    .bind(per_second)
    .execute(pool)
    .await?;
    Ok(())
}

/// Makes sure `key`'s bucket exists with this shape (full when new); an existing one keeps its
/// level and takes a changed shape. Without a write when nothing changed.
pub async fn ensure(pool: &PgPool, key: &str, capacity: f64, per_second: f64) -> sqlx::Result<()> {
    sqlx::query(
        "insert into rate_buckets as b (server, tokens, capacity, refill_per_second) values ($1, $2, $2, $3)
         on conflict (server) do update set capacity = $2, refill_per_second = $3, tokens = least(b.tokens, $2)
         where b.capacity <> $2 or b.refill_per_second <> $3",
    )
    .bind(key)
    .bind(capacity)
    .bind(per_second)
    .execute(pool)
    .await?;
    Ok(())
}

/// Takes up to `want` whole tokens; returns how many were granted (0 when empty). Concurrent
/// takers serialise on the row lock and each sees the others' takes, so no more is granted than
/// the bucket holds. Time only moves forward (`greatest`), even for a transaction that started
/// before the last refill.
pub async fn take(pool: &PgPool, server: &str, want: i32) -> sqlx::Result<i32> {
    let granted: Option<i32> = sqlx::query_scalar(
        "with cur as (
             select server,
                    least(capacity, tokens + greatest(0, extract(epoch from now() - refilled_at)) * refill_per_second) as avail
             from rate_buckets where server = $1
             for update
         ),
         g as (select server, avail, least(floor(avail)::int, $2) as granted from cur)
         update rate_buckets b
         set tokens = g.avail - g.granted, refilled_at = greatest(b.refilled_at, now())
         from g where b.server = g.server
         returning g.granted",
    )
    .bind(server)
    .bind(want.max(0))
    .fetch_optional(pool)
    .await?;
    Ok(granted.unwrap_or(0))
}

/// Returns tokens taken but not used (the claim found less mail than the bucket allowed), so a
/// short queue does not lower the real rate below the configured one.
pub async fn give_back(pool: &PgPool, server: &str, unused: i32) -> sqlx::Result<()> {
    sqlx::query("update rate_buckets set tokens = least(capacity, tokens + $2) where server = $1")
        .bind(server)
        .bind(unused as f64)
        .execute(pool)
        .await?;
    Ok(())
}

/// Deletes the buckets of API tokens and sign-up IPs that have refilled to capacity: such a
/// bucket is what `ensure` makes anew, so nothing changes for its key, and bots from many
/// addresses do not leave a row each forever. (SMTP servers' buckets stay: their senders take
/// without ensuring first.)
pub async fn forget_full(pool: &PgPool) -> sqlx::Result<u64> {
    sqlx::query(
        "delete from rate_buckets
         where (server like 'signup-ip:%' or server like 'api-token:%')
           and tokens + extract(epoch from now() - refilled_at) * refill_per_second >= capacity",
    )
    .execute(pool)
    .await
    .map(|r| r.rows_affected())
}
