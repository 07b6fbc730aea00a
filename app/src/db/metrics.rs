//! What `/metrics` reads from the database at scrape time: the same figures from any replica.

use sqlx::PgPool;

#[derive(Debug, Default)]
pub struct Snapshot {
    /// Deliveries by status, every org.
    pub by_status: Vec<(String, i64)>,
    /// Queued deliveries by kind (test, digest, campaign).
    pub queued_by_kind: Vec<(String, i64)>,
    /// Age of the oldest delivery that is due and still queued (0 when none).
    pub oldest_queued_seconds: f64,
    /// The leader lease's current epoch (0 before any election).
    pub leader_epoch: i64,
}

pub async fn snapshot(pool: &PgPool) -> sqlx::Result<Snapshot> {
    let by_status = sqlx::query_as("select status, count(*) from deliveries group by status")
        .fetch_all(pool)
        .await?;
    let queued_by_kind = sqlx::query_as(
        "select kind, count(*) from deliveries where status = 'queued' group by kind",
    )
    .fetch_all(pool)
    .await?;
    let (oldest_queued_seconds, leader_epoch): (f64, i64) = sqlx::query_as(
        "select coalesce(extract(epoch from now() - (select min(next_attempt_at) from deliveries
                                                     where status = 'queued' and next_attempt_at <= now())), 0)::float8,
                coalesce((select epoch from leader_lease where name = 'leader'), 0)",
    )
    .fetch_one(pool)
    .await?;
    Ok(Snapshot {
        by_status,
        queued_by_kind,
        oldest_queued_seconds,
        leader_epoch,
    })
}
