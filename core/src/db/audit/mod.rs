//! The audit log: an entry is written inside the transaction of the action it records, so both
//! commit or neither; `log` reads it back for the dashboard.

/// Reading the audit log, keyset-paginated.
pub mod log;

use serde_json::Value;
use sqlx::PgConnection;

use crate::domain::AuditAction;
use crate::model::CurrentUser;

/// One audit entry: who did what to which object, with before/after where there is one.
pub struct Entry<'a> {
    pub org_id: i64,
    pub actor_id: Option<i64>,
    /// The API token an action was taken with (no user behind it).
    pub api_token_id: Option<i64>,
    pub action: AuditAction,
    pub object_type: &'a str,
    pub object_id: Option<String>,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

impl<'a> Entry<'a> {
    /// An action Mailroom took by itself, or a person outside the dashboard did through a
    /// signed link (no user, no token).
    pub fn system(
        org_id: i64,
        action: AuditAction,
        object_type: &'a str,
        object_id: Option<String>,
    ) -> Self {
        Entry {
            org_id,
            actor_id: None,
            api_token_id: None,
            action,
            object_type,
            object_id,
            before: None,
            after: None,
        }
    }

    /// An action of the signed-in `me` in their organisation, with nothing before or after
    /// (fill those in with struct update syntax).
    pub fn by(
        me: &CurrentUser,
        action: AuditAction,
        object_type: &'a str,
        object_id: Option<String>,
    ) -> Self {
        Entry {
            org_id: me.org_id,
            actor_id: Some(me.user_id),
            api_token_id: None,
            action,
            object_type,
            object_id,
            before: None,
            after: None,
        }
    }
}

impl<'a> Entry<'a> {
    /// An action taken through the API with token `token_id` of `org_id`.
    pub fn by_token(
        org_id: i64,
        token_id: i64,
        action: AuditAction,
        object_type: &'a str,
        object_id: Option<String>,
    ) -> Self {
        Entry {
            org_id,
            actor_id: None,
            api_token_id: Some(token_id),
            action,
            object_type,
            object_id,
            before: None,
            after: None,
        }
    }
}

/// Records that `me` changed their organisation's own settings (`before` → `after`); in the
/// caller's transaction, like [`record`].
pub async fn org_setting(
    conn: &mut PgConnection,
    me: &CurrentUser,
    action: AuditAction,
    before: impl Into<Option<Value>>,
    after: impl Into<Option<Value>>,
) -> sqlx::Result<()> {
    record(
        conn,
        Entry {
            before: before.into(),
            after: after.into(),
            ..Entry::by(me, action, "org", Some(me.org_id.to_string()))
        },
    )
    .await
}

/// Records that `me` changed one setting of their org (`{key: before}` → `{key: after}`),
/// when it did change; in the caller's transaction, like [`record`].
pub async fn setting_changed<T: serde::Serialize + PartialEq>(
    conn: &mut PgConnection,
    me: &CurrentUser,
    action: AuditAction,
    key: &str,
    before: T,
    after: T,
) -> sqlx::Result<()> {
    if before == after {
        return Ok(());
    }
    let one = |v: T| {
        let mut m = serde_json::Map::new();
        m.insert(
            key.to_owned(),
            serde_json::to_value(v).unwrap_or(Value::Null),
        );
        Value::Object(m)
    };
    org_setting(conn, me, action, one(before), one(after)).await
}

/// Written inside the caller's transaction, so an action and its audit row commit together.
pub async fn record(conn: &mut PgConnection, e: Entry<'_>) -> sqlx::Result<()> {
    sqlx::query(
        "insert into audit_log (org_id, actor_id, api_token_id, action, object_type, object_id, before, after)
         values ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(e.org_id)
    .bind(e.actor_id)
    .bind(e.api_token_id)
    .bind(e.action)
    .bind(e.object_type)
    .bind(e.object_id)
    .bind(e.before)
    .bind(e.after)
    .execute(conn)
    .await?;
    Ok(())
}
