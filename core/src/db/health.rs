use sqlx::PgPool;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use crate::domain::{ReplicationReading, WriteTrouble, WritesFailing};

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

/// Whether this process's last write to the database failed for a cause of the database's own
/// (the fast path of every successful write), and since when and why.
static FAILING: AtomicBool = AtomicBool::new(false);
static TROUBLE: Mutex<Option<WritesFailing>> = Mutex::new(None);

/// The database's own trouble behind `e`, if that is why it failed.
pub fn trouble_of(e: &sqlx::Error) -> Option<WriteTrouble> {
    match e {
        sqlx::Error::Database(e) => WriteTrouble::of_sqlstate(e.code().as_deref()?),
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Tls(_) => {
            Some(WriteTrouble::Unreachable)
        }
        _ => None,
    }
}

/// Records that a worker's write failed with `e` (kept from the first failure of a run of
/// them); returns the database's trouble behind it, if any.
pub fn note_write_failure(e: &sqlx::Error) -> Option<WriteTrouble> {
    let trouble = trouble_of(e)?;
    let mut noted = TROUBLE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if noted.is_none_or(|n| n.trouble != trouble) {
        *noted = Some(WritesFailing {
            trouble,
            since: chrono::Utc::now(),
        });
    }
    FAILING.store(true, Ordering::Release);
    Some(trouble)
}

/// Records that a worker's write succeeded: the trouble, if any, is over.
pub fn note_write_success() {
    if FAILING.swap(false, Ordering::AcqRel) {
        *TROUBLE
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
    }
}

/// Why this process's workers cannot write to the database now, if they cannot.
pub fn writes_failing() -> Option<WritesFailing> {
    *TROUBLE
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
