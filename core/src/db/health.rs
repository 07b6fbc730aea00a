use sqlx::PgPool;

/// The database answers a query.
pub async fn ping(pool: &PgPool) -> sqlx::Result<()> {
    sqlx::query("select 1").execute(pool).await.map(|_| ())
}
