//! The IMAP bounce poller's cursor per mailbox: which UIDs of which UIDVALIDITY are recorded.

use sqlx::{PgConnection, PgPool};

/// Where a mailbox was read up to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct Cursor {
    pub uid_validity: i64,
    pub last_uid: i64,
}

pub async fn get(pool: &PgPool, mailbox: &str) -> sqlx::Result<Option<Cursor>> {
    sqlx::query_as("select uid_validity, last_uid from imap_cursors where mailbox = $1")
        .bind(mailbox)
        .fetch_optional(pool)
        .await
}

/// Moves the cursor from `prev` (as read, `None` when there was none) to `next`, in the
/// caller's transaction. `false`: another poller moved it first, and nothing was written.
pub async fn advance(
    conn: &mut PgConnection,
    mailbox: &str,
    prev: Option<Cursor>,
    next: Cursor,
) -> sqlx::Result<bool> {
    let moved: Option<i32> = sqlx::query_scalar(
        "insert into imap_cursors as c (mailbox, uid_validity, last_uid)
         values ($1, $2, $3)
         on conflict (mailbox) do update
         set uid_validity = excluded.uid_validity, last_uid = excluded.last_uid, updated_at = now()
         where c.uid_validity = $4 and c.last_uid = $5
         returning 1",
    )
    .bind(mailbox)
    .bind(next.uid_validity)
    .bind(next.last_uid)
    .bind(prev.map(|p| p.uid_validity))
    .bind(prev.map(|p| p.last_uid))
    .fetch_optional(conn)
    .await?;
    Ok(moved.is_some())
}
