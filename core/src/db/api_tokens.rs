//! API tokens: created (only the hash kept), listed, revoked, and looked up by the hash of the
//! token a request presents.

use sqlx::{PgConnection, PgPool};

use crate::domain::ApiScope;
use crate::model::ApiToken;

/// Who an API request is: the token and its org, with what it may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub token_id: i64,
    pub org_id: i64,
    pub scopes: Vec<ApiScope>,
}

pub async fn create(
    conn: &mut PgConnection,
    org_id: i64,
    created_by: i64,
    name: &str,
    token_hash: &[u8],
    scopes: &[ApiScope],
) -> sqlx::Result<i64> {
    let words: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
    sqlx::query_scalar(
        "insert into api_tokens (org_id, created_by, name, token_hash, scopes)
         values ($1, $2, $3, $4, $5) returning id",
    )
    .bind(org_id)
    .bind(created_by)
    .bind(name)
    .bind(token_hash)
    .bind(&words)
    .fetch_one(conn)
    .await
}

/// The org's tokens, newest first (revoked ones too: they are the audit trail's subjects).
pub async fn list(conn: &mut PgConnection, org_id: i64) -> sqlx::Result<Vec<ApiToken>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        id: i64,
        name: String,
        scopes: Vec<String>,
        created: String,
        created_by: Option<String>,
        last_used: Option<String>,
        revoked: bool,
    }
    let rows: Vec<Row> = sqlx::query_as(
        "select t.id, t.name, t.scopes,
                to_char(t.created_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as created,
                u.name as created_by,
                to_char(t.last_used_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as last_used,
                t.revoked_at is not null as revoked
         from api_tokens t join orgs o on o.id = t.org_id
         left join users u on u.id = t.created_by and u.org_id = t.org_id
         where t.org_id = $1 order by t.id desc limit 200",
    )
    .bind(org_id)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| ApiToken {
            id: r.id,
            name: r.name,
            // The column's check admits only known words.
            scopes: r.scopes.iter().filter_map(|s| s.parse().ok()).collect(),
            created: r.created,
            created_by: r.created_by,
            last_used: r.last_used,
            revoked: r.revoked,
        })
        .collect())
}

/// Revokes one of the org's live tokens; its name, or `None` when there is no such live token
/// (another org's id included).
pub async fn revoke(conn: &mut PgConnection, org_id: i64, id: i64) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar(
        "update api_tokens set revoked_at = now()
         where org_id = $1 and id = $2 and revoked_at is null
         returning name",
    )
    .bind(org_id)
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// The live token whose hash this is. Its last use is recorded at most once a minute, so a
/// busy client does not write a row version per request.
pub async fn caller(pool: &PgPool, token_hash: &[u8]) -> sqlx::Result<Option<Caller>> {
    let row: Option<(i64, i64, Vec<String>, bool)> = sqlx::query_as(
        "select id, org_id, scopes,
                last_used_at is null or last_used_at < now() - interval '1 minute' as stale
         from api_tokens where token_hash = $1 and revoked_at is null",
    )
    .bind(token_hash)
    .fetch_optional(pool)
    .await?;
    let Some((token_id, org_id, scopes, stale)) = row else {
        return Ok(None);
    };
    if stale {
        sqlx::query("update api_tokens set last_used_at = now() where id = $1")
            .bind(token_id)
            .execute(pool)
            .await?;
    }
    Ok(Some(Caller {
        token_id,
        org_id,
        scopes: scopes.iter().filter_map(|s| s.parse().ok()).collect(),
    }))
}
