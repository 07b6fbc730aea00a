//! The organisation's own settings: its sender identity (From name and address, Reply-To).

use sqlx::PgConnection;

#[derive(sqlx::FromRow, Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Sender {
    pub from_name: String,
    pub from_address: String,
    pub reply_to: Option<String>,
    pub timezone: String,
}

pub async fn sender(conn: &mut PgConnection, org_id: i64) -> sqlx::Result<Sender> {
    sqlx::query_as("select from_name, from_address, reply_to, timezone from orgs where id = $1")
        .bind(org_id)
        .fetch_one(conn)
        .await
}

/// Saves the sender identity; returns what it was (read under the row lock, so the audit
/// row's "before" is exactly what this change replaced).
pub async fn save_sender(
    conn: &mut PgConnection,
    org_id: i64,
    from_name: &str,
    from_address: &str,
    reply_to: Option<&str>,
) -> sqlx::Result<Sender> {
    sqlx::query_as(
        "update orgs o set from_name = $2, from_address = $3, reply_to = $4
         from (select id, from_name, from_address, reply_to, timezone from orgs where id = $1 for update) old
         where o.id = old.id
         returning old.from_name, old.from_address, old.reply_to, old.timezone",
    )
    .bind(org_id)
    .bind(from_name)
    .bind(from_address)
    .bind(reply_to)
    .fetch_one(conn)
    .await
}

/// Whether an admin may approve a campaign they wrote or last edited (four eyes off).
pub async fn allows_self_approval(conn: &mut PgConnection, org_id: i64) -> sqlx::Result<bool> {
    sqlx::query_scalar("select allow_self_approval from orgs where id = $1")
        .bind(org_id)
        .fetch_one(conn)
        .await
}

/// Sets it; returns what it was (read under the row lock, for the audit row).
pub async fn set_self_approval(
    conn: &mut PgConnection,
    org_id: i64,
    allow: bool,
) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "update orgs o set allow_self_approval = $2
         from (select id, allow_self_approval from orgs where id = $1 for update) old
         where o.id = old.id
         returning old.allow_self_approval",
    )
    .bind(org_id)
    .bind(allow)
    .fetch_one(conn)
    .await
}
