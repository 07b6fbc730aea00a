use sqlx::PgPool;

/// Registers or refreshes this process's heartbeat row (database clock).
pub async fn beat(
    pool: &PgPool,
    process_id: &str,
    hostname: &str,
    pid: i32,
    mode: &str,
    version: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "insert into worker_heartbeats (process_id, hostname, pid, mode, version)
         values ($1, $2, $3, $4, $5)
         on conflict (process_id) do update set beat_at = now()",
    )
    .bind(process_id)
    .bind(hostname)
    .bind(pid)
    .bind(mode)
    .bind(version)
    .execute(pool)
    .await?;
    Ok(())
}

/// Removes this process's row on a clean shutdown.
pub async fn remove(pool: &PgPool, process_id: &str) -> sqlx::Result<()> {
    sqlx::query("delete from worker_heartbeats where process_id = $1")
        .bind(process_id)
        .execute(pool)
        .await?;
    Ok(())
}
