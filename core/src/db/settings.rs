//! The organisation's own settings: its sender identity (From name and address, Reply-To), its
//! envelope sender (Return-Path) and its DKIM key.

use sqlx::{PgConnection, Postgres};

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
    read(conn, org_id, Column::AllowSelfApproval).await
}

/// Sets it; returns what it was (read under the row lock, for the audit row).
pub async fn set_self_approval(
    conn: &mut PgConnection,
    org_id: i64,
    allow: bool,
) -> sqlx::Result<bool> {
    swap(conn, org_id, Column::AllowSelfApproval, allow).await
}

/// Sets how many days the org keeps events; returns what it was (for the audit row). The
/// retention job reads it on its next pass.
pub async fn set_event_retention_days(
    conn: &mut PgConnection,
    org_id: i64,
    days: i32,
) -> sqlx::Result<i32> {
    swap(conn, org_id, Column::EventRetentionDays, days).await
}

/// Whether the org rewrites links in its campaign mail into tracked redirects.
pub async fn click_tracking(conn: &mut PgConnection, org_id: i64) -> sqlx::Result<bool> {
    read(conn, org_id, Column::ClickTracking).await
}

/// Turns it on or off; returns what it was (read under the row lock, for the audit row).
pub async fn set_click_tracking(
    conn: &mut PgConnection,
    org_id: i64,
    on: bool,
) -> sqlx::Result<bool> {
    swap(conn, org_id, Column::ClickTracking, on).await
}

/// Whether the org's campaign HTML carries an open-tracking pixel (a separate opt-in).
pub async fn open_tracking(conn: &mut PgConnection, org_id: i64) -> sqlx::Result<bool> {
    read(conn, org_id, Column::OpenTracking).await
}

/// Turns it on or off; returns what it was (read under the row lock, for the audit row).
pub async fn set_open_tracking(
    conn: &mut PgConnection,
    org_id: i64,
    on: bool,
) -> sqlx::Result<bool> {
    swap(conn, org_id, Column::OpenTracking, on).await
}

/// The org's quiet hours for automation mail (`22-07`), if any.
pub async fn quiet_hours(conn: &mut PgConnection, org_id: i64) -> sqlx::Result<Option<String>> {
    read(conn, org_id, Column::QuietHours).await
}

/// Sets them (`None`: none); returns what they were (for the audit row).
pub async fn set_quiet_hours(
    conn: &mut PgConnection,
    org_id: i64,
    hours: Option<crate::domain::automation::QuietHours>,
) -> sqlx::Result<Option<String>> {
    swap(
        conn,
        org_id,
        Column::QuietHours,
        hours.map(|h| h.to_string()),
    )
    .await
}

/// The settings that are one column of `orgs` each, read and swapped alike.
#[derive(Clone, Copy)]
enum Column {
    AllowSelfApproval,
    ClickTracking,
    EventRetentionDays,
    OpenTracking,
    QuietHours,
    ReturnPath,
}

impl Column {
    fn name(self) -> &'static str {
        match self {
            Column::AllowSelfApproval => "allow_self_approval",
            Column::ClickTracking => "click_tracking",
            Column::EventRetentionDays => "event_retention_days",
            Column::OpenTracking => "open_tracking",
            Column::QuietHours => "quiet_hours",
            Column::ReturnPath => "return_path",
        }
    }
}

async fn read<T>(conn: &mut PgConnection, org_id: i64, c: Column) -> sqlx::Result<T>
where
    T: for<'r> sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres> + Send + Unpin,
{
    sqlx::query_scalar(&format!("select {} from orgs where id = $1", c.name()))
        .bind(org_id)
        .fetch_one(conn)
        .await
}

/// Sets the column; returns what it held, read under the row lock.
async fn swap<T>(conn: &mut PgConnection, org_id: i64, c: Column, value: T) -> sqlx::Result<T>
where
    T: for<'r> sqlx::Decode<'r, Postgres>
        + for<'q> sqlx::Encode<'q, Postgres>
        + sqlx::Type<Postgres>
        + Send
        + Unpin,
{
    let col = c.name();
    sqlx::query_scalar(&format!(
        "update orgs o set {col} = $2
         from (select id, {col} from orgs where id = $1 for update) old
         where o.id = old.id
         returning old.{col}"
    ))
    .bind(org_id)
    .bind(value)
    .fetch_one(conn)
    .await
}

/// The org's DKIM key as pages see it: everything but the private key.
#[derive(sqlx::FromRow, Debug, Clone, PartialEq, Eq)]
pub struct DkimPublic {
    pub domain: String,
    pub selector: String,
    pub public_key: String,
    pub enabled: bool,
    pub updated_at: chrono::DateTime<chrono::Utc>,
    /// The Ed25519 key signing beside the RSA one, when the org has one.
    pub ed25519_selector: Option<String>,
    pub ed25519_public_key: Option<String>,
}

impl DkimPublic {
    /// The Ed25519 key's (selector, public key), when the org has one.
    pub fn ed25519_key(&self) -> Option<(&str, &str)> {
        Some((
            self.ed25519_selector.as_deref()?,
            self.ed25519_public_key.as_deref()?,
        ))
    }
}

/// The columns of [`DkimPublic`].
const DKIM_PUBLIC: &str =
    "domain, selector, public_key, enabled, updated_at, ed25519_selector, ed25519_public_key";

pub async fn dkim(conn: &mut PgConnection, org_id: i64) -> sqlx::Result<Option<DkimPublic>> {
    sqlx::query_as(&format!(
        "select {DKIM_PUBLIC} from org_dkim where org_id = $1"
    ))
    .bind(org_id)
    .fetch_optional(conn)
    .await
}

/// The current key under a row lock (None: the org has none yet), for the audit row's "before"
/// of a change made in the same transaction.
pub async fn lock_dkim(conn: &mut PgConnection, org_id: i64) -> sqlx::Result<Option<DkimPublic>> {
    sqlx::query_as(&format!(
        "select {DKIM_PUBLIC} from org_dkim where org_id = $1 for update"
    ))
    .bind(org_id)
    .fetch_optional(conn)
    .await
}

/// A new key (generated or pasted) with its domain and selector, replacing any earlier one.
/// Signing is off until the owner enables it: the new public key is not in DNS yet.
pub async fn replace_dkim_key(
    conn: &mut PgConnection,
    org_id: i64,
    domain: &str,
    selector: &str,
    private_key_pem: &str,
    public_key: &str,
) -> sqlx::Result<()> {
    sqlx::query(
        "insert into org_dkim (org_id, domain, selector, private_key_pem, public_key)
         values ($1, $2, $3, $4, $5)
         on conflict (org_id) do update set domain = excluded.domain, selector = excluded.selector,
             private_key_pem = excluded.private_key_pem, public_key = excluded.public_key,
             enabled = false, updated_at = now()",
    )
    .bind(org_id)
    .bind(domain)
    .bind(selector)
    .bind(private_key_pem)
    .bind(public_key)
    .execute(conn)
    .await
    .map(drop)
}

/// Sets (or, with None, removes) the Ed25519 key that signs beside the RSA key: (selector,
/// PKCS#8 PEM, public key). The caller holds the row's lock ([`lock_dkim`]) and has checked
/// that the org has an RSA key under another selector.
pub async fn set_dkim_ed25519_key(
    conn: &mut PgConnection,
    org_id: i64,
    key: Option<(&str, &str, &str)>,
) -> sqlx::Result<()> {
    let (selector, pem, public_key) =
        key.map_or((None, None, None), |(s, p, k)| (Some(s), Some(p), Some(k)));
    sqlx::query(
        "update org_dkim set ed25519_selector = $2, ed25519_private_key_pem = $3,
             ed25519_public_key = $4, updated_at = now()
         where org_id = $1",
    )
    .bind(org_id)
    .bind(selector)
    .bind(pem)
    .bind(public_key)
    .execute(conn)
    .await
    .map(drop)
}

/// Turns signing on or off; returns what it was, or None when the org has no key.
pub async fn set_dkim_enabled(
    conn: &mut PgConnection,
    org_id: i64,
    enabled: bool,
) -> sqlx::Result<Option<bool>> {
    sqlx::query_scalar(
        "update org_dkim k set enabled = $2, updated_at = now()
         from (select org_id, enabled from org_dkim where org_id = $1 for update) old
         where k.org_id = old.org_id
         returning old.enabled",
    )
    .bind(org_id)
    .bind(enabled)
    .fetch_optional(conn)
    .await
}

/// The envelope sender (None: the From address).
pub async fn return_path(conn: &mut PgConnection, org_id: i64) -> sqlx::Result<Option<String>> {
    read(conn, org_id, Column::ReturnPath).await
}

/// Sets it; returns what it was (read under the row lock, for the audit row).
pub async fn save_return_path(
    conn: &mut PgConnection,
    org_id: i64,
    return_path: Option<&str>,
) -> sqlx::Result<Option<String>> {
    swap(
        conn,
        org_id,
        Column::ReturnPath,
        return_path.map(str::to_owned),
    )
    .await
}
