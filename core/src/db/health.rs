use sqlx::PgPool;

use crate::domain::ReplicationReading;

/// The database answers a query.
pub async fn ping(pool: &PgPool) -> sqlx::Result<()> {
    sqlx::query("select 1").execute(pool).await.map(|_| ())
}

/// Whether this connection reaches a primary that takes writes (not a standby in recovery, not
/// a session made read-only).
pub async fn writable(conn: &mut sqlx::PgConnection) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "select not pg_is_in_recovery() and current_setting('transaction_read_only') = 'off'",
    )
    .fetch_one(conn)
    .await
}

/// Sets `settings` (name, value) for the rest of this session, in one round trip.
pub async fn set_session(
    conn: &mut sqlx::PgConnection,
    settings: &[(&str, &str)],
) -> sqlx::Result<()> {
    let (names, values): (Vec<&str>, Vec<&str>) = settings.iter().copied().unzip();
    sqlx::query("select set_config(n, v, false) from unnest($1::text[], $2::text[]) s(n, v)")
        .bind(names)
        .bind(values)
        .execute(conn)
        .await?;
    Ok(())
}

/// The server process serving this connection now. Not kept as a prepared statement: it is
/// asked of connections that may pass through a pooler mixing sessions up.
pub async fn server_process(conn: &mut sqlx::PgConnection) -> sqlx::Result<i32> {
    sqlx::query_scalar("select pg_backend_pid()")
        .persistent(false)
        .fetch_one(conn)
        .await
}

/// What the primary reports of its replication, as Mailroom's own sessions see it. A role
/// outside `pg_monitor` sees each standby's row with its state hidden (null): counted apart.
/// A base backup in progress and a logical subscriber are not standbys.
pub async fn replication(pool: &PgPool) -> sqlx::Result<ReplicationReading> {
    let (synchronous_commit, synchronous_standby_names, standbys, synchronous_standbys, hidden) =
        sqlx::query_as::<_, (String, String, i64, i64, i64)>(
            "select current_setting('synchronous_commit'),
                    current_setting('synchronous_standby_names'),
                    count(r.pid),
                    count(*) filter (where r.sync_state in ('sync', 'quorum')),
                    count(r.pid) filter (where r.sync_state is null)
             from (select 1) one
             left join pg_stat_replication r
               on r.state is distinct from 'backup'
              and r.pid not in (select s.active_pid from pg_replication_slots s
                                where s.slot_type = 'logical' and s.active_pid is not null)",
        )
        .fetch_one(pool)
        .await?;
    Ok(ReplicationReading {
        synchronous_commit,
        synchronous_standby_names,
        standbys,
        synchronous_standbys,
        hidden,
    })
}
