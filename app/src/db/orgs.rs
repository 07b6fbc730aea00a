use sqlx::{PgConnection, PgPool};

pub struct NewOrg<'a> {
    pub name: &'a str,
    pub slug: &'a str,
    pub timezone: &'a str,
    pub from_name: &'a str,
    pub from_address: &'a str,
}

#[derive(Debug, thiserror::Error)]
pub enum OrgError {
    #[error("“{0}” is not a time zone PostgreSQL knows (use a name such as Europe/Berlin or UTC)")]
    BadTimezone(String),
    #[error("an organisation with the short name “{0}” already exists")]
    SlugTaken(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Is `tz` in PostgreSQL's own time zone list (the one the digest SQL uses)?
pub async fn is_valid_timezone(pool: &PgPool, tz: &str) -> sqlx::Result<bool> {
    sqlx::query_scalar("select mailroom_valid_timezone($1)")
        .bind(tz)
        .fetch_one(pool)
        .await
}

pub async fn create(conn: &mut PgConnection, o: NewOrg<'_>) -> Result<i64, OrgError> {
    sqlx::query_scalar(
        "insert into orgs (name, slug, timezone, from_name, from_address)
         values ($1, $2, $3, $4, $5) returning id",
    )
    .bind(o.name)
    .bind(o.slug)
    .bind(o.timezone)
    .bind(o.from_name)
    .bind(o.from_address)
    .fetch_one(conn)
    .await
    .map_err(|e| match &e {
        sqlx::Error::Database(d) if d.constraint() == Some("orgs_timezone_check") => {
            OrgError::BadTimezone(o.timezone.into())
        }
        sqlx::Error::Database(d) if d.constraint() == Some("orgs_slug_key") => {
            OrgError::SlugTaken(o.slug.into())
        }
        _ => OrgError::Db(e),
    })
}

pub async fn id_by_slug(pool: &PgPool, slug: &str) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar("select id from orgs where slug = $1")
        .bind(slug)
        .fetch_optional(pool)
        .await
}
