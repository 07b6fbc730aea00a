use sqlx::{PgConnection, PgPool};

use crate::db::{audit, user};
use crate::domain::{EmailAddress, Role};

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

/// The first owner of a new organisation.
pub struct NewOwner<'a> {
    pub email: &'a EmailAddress,
    pub name: &'a str,
    pub password_hash: &'a str,
}

/// Why an organisation could not be made; the field names what the caller typed wrong.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("{1}")]
    Field(SetupField, String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// What was wrong in a refused [`create_with_owner`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetupField {
    Slug,
    Timezone,
    OwnerEmail,
}

/// An organisation and its first owner, audited, in the caller's transaction (a refusal leaves
/// neither, once the caller rolls back). `via` says how (`cli`, `first-run page`).
pub async fn create_with_owner(
    conn: &mut PgConnection,
    org: NewOrg<'_>,
    owner: NewOwner<'_>,
    via: &str,
) -> Result<(i64, i64), SetupError> {
    let (slug, name, timezone) = (org.slug, org.name, org.timezone);
    let org_id = create(&mut *conn, org).await.map_err(|e| match e {
        OrgError::BadTimezone(_) => SetupError::Field(SetupField::Timezone, e.to_string()),
        OrgError::SlugTaken(_) => SetupError::Field(SetupField::Slug, e.to_string()),
        OrgError::Db(e) => SetupError::Db(e),
    })?;
    let user = user::NewUser {
        org_id,
        email: owner.email,
        name: owner.name,
        role: Role::Owner,
        password_hash: owner.password_hash,
    };
    let user_id = user::create(&mut *conn, user).await.map_err(|e| match e {
        user::CreateUserError::EmailTaken(_) => {
            SetupError::Field(SetupField::OwnerEmail, e.to_string())
        }
        user::CreateUserError::Db(e) => SetupError::Db(e),
    })?;
    audit::record(
        &mut *conn,
        audit::Entry {
            org_id,
            actor_id: Some(user_id),
            api_token_id: None,
            action: crate::domain::AuditAction::OrgAdd,
            object_type: "org",
            object_id: Some(org_id.to_string()),
            before: None,
            after: Some(serde_json::json!({
                "slug": slug, "name": name, "timezone": timezone,
                "owner": owner.email.as_str(), "via": via,
            })),
        },
    )
    .await?;
    Ok((org_id, user_id))
}

/// No organisation exists yet: the dashboard offers the first-run page.
pub async fn none_exist(pool: &PgPool) -> sqlx::Result<bool> {
    sqlx::query_scalar("select not exists (select 1 from orgs)")
        .fetch_one(pool)
        .await
}
