//! Set-password links (`password_tokens`): issued for an invitation or a reset, redeemed once.
//! The table holds the token's SHA-256, never the token (see `crate::password_token`).

use sqlx::PgConnection;

use crate::domain::LinkPurpose;

/// Issues a new link for a user, retiring any older unused one (only the newest link works).
/// Returns the new row's id; the caller derives the token from it and stores its hash with
/// [`set_hash`] in the same transaction.
pub async fn issue(
    conn: &mut PgConnection,
    org_id: i64,
    user_id: i64,
    purpose: LinkPurpose,
    created_by: i64,
) -> sqlx::Result<i64> {
    sqlx::query(
        "update password_tokens set used_at = now()
         where org_id = $1 and user_id = $2 and used_at is null",
    )
    .bind(org_id)
    .bind(user_id)
    .execute(&mut *conn)
    .await?;
    sqlx::query_scalar(
        "insert into password_tokens (org_id, user_id, purpose, created_by, expires_at)
         values ($1, $2, $3, $4, now() + make_interval(days => $5)) returning id",
    )
    .bind(org_id)
    .bind(user_id)
    .bind(purpose)
    .bind(created_by)
    .bind(crate::password_token::TTL_DAYS as i32)
    .fetch_one(conn)
    .await
}

pub async fn set_hash(
    conn: &mut PgConnection,
    org_id: i64,
    id: i64,
    token_hash: &[u8],
) -> sqlx::Result<()> {
    sqlx::query("update password_tokens set token_hash = $3 where org_id = $1 and id = $2")
        .bind(org_id)
        .bind(id)
        .bind(token_hash)
        .execute(conn)
        .await?;
    Ok(())
}

/// What the set-password page shows for a live link.
#[derive(sqlx::FromRow, Debug, Clone)]
pub struct Pending {
    pub purpose: LinkPurpose,
    pub email: String,
    pub name: String,
    pub org_name: String,
    /// In the org's time zone.
    pub expires: String,
}

/// A live link: unused, unexpired, its user not disabled. None for anything else.
pub async fn peek(conn: &mut PgConnection, token_hash: &[u8]) -> sqlx::Result<Option<Pending>> {
    sqlx::query_as(
        "select t.purpose, u.email, u.name, o.name as org_name,
                to_char(t.expires_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') || ' (' || o.timezone || ')' as expires
         from password_tokens t
         join users u on u.org_id = t.org_id and u.id = t.user_id
         join orgs o on o.id = t.org_id
         where t.token_hash = $1 and t.used_at is null and t.expires_at > now() and not u.disabled",
    )
    .bind(token_hash)
    .fetch_optional(conn)
    .await
}

#[derive(sqlx::FromRow, Debug, Clone)]
pub struct Redeemed {
    pub id: i64,
    pub org_id: i64,
    pub user_id: i64,
    pub purpose: LinkPurpose,
}

/// Uses a live link, once: a compare-and-set on `used_at is null`, so two submissions of the
/// same link (or a race) redeem it exactly once.
pub async fn redeem(conn: &mut PgConnection, token_hash: &[u8]) -> sqlx::Result<Option<Redeemed>> {
    sqlx::query_as(
        "update password_tokens t set used_at = now()
         from users u
         where t.token_hash = $1 and t.used_at is null and t.expires_at > now()
           and u.org_id = t.org_id and u.id = t.user_id and not u.disabled
         returning t.id, t.org_id, t.user_id, t.purpose",
    )
    .bind(token_hash)
    .fetch_optional(conn)
    .await
}

/// What the delivery worker needs to write a set-password message.
#[derive(sqlx::FromRow, Debug, Clone)]
pub struct MailFacts {
    pub id: i64,
    pub org_id: i64,
    pub user_id: i64,
    pub purpose: LinkPurpose,
    pub user_name: String,
    pub org_name: String,
    /// In the org's time zone, with the zone's name.
    pub expires: String,
    /// Unused and unexpired: a retired link is not worth sending.
    pub live: bool,
}

/// The links `(org id, token id)` of a batch, in one query.
pub async fn mail_facts(
    conn: &mut PgConnection,
    refs: &[(i64, i64)],
) -> sqlx::Result<Vec<MailFacts>> {
    let (orgs, ids): (Vec<i64>, Vec<i64>) = refs.iter().copied().unzip();
    sqlx::query_as(
        "select t.id, t.org_id, t.user_id, t.purpose, u.name as user_name, o.name as org_name,
                to_char(t.expires_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') || ' (' || o.timezone || ')' as expires,
                (t.used_at is null and t.expires_at > now()) as live
         from password_tokens t
         join users u on u.org_id = t.org_id and u.id = t.user_id
         join orgs o on o.id = t.org_id
         where (t.org_id, t.id) in (select * from unnest($1::bigint[], $2::bigint[]))",
    )
    .bind(orgs)
    .bind(ids)
    .fetch_all(conn)
    .await
}
