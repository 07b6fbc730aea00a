//! Users: sign-in lookups, creating a user, passwords; `admin` is the owner's administration.

/// The owner's user administration: roles, names, passwords.
pub mod admin;

use sqlx::{PgConnection, PgPool};

use crate::domain::{EmailAddress, Role};

pub struct NewUser<'a> {
    pub org_id: i64,
    pub email: &'a EmailAddress,
    pub name: &'a str,
    pub role: Role,
    pub password_hash: &'a str,
}

#[derive(Debug, thiserror::Error)]
pub enum CreateUserError {
    #[error("a user with the address {0} already exists")]
    EmailTaken(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

pub async fn create(conn: &mut PgConnection, u: NewUser<'_>) -> Result<i64, CreateUserError> {
    sqlx::query_scalar(
        "insert into users (org_id, email, email_lower, name, role, password_hash)
         values ($1, $2, $3, $4, $5, $6) returning id",
    )
    .bind(u.org_id)
    .bind(u.email.as_str())
    .bind(u.email.lower())
    .bind(u.name)
    .bind(u.role.as_str())
    .bind(u.password_hash)
    .fetch_one(conn)
    .await
    .map_err(|e| match &e {
        sqlx::Error::Database(d) if d.constraint() == Some("users_email_lower_key") => {
            CreateUserError::EmailTaken(u.email.to_string())
        }
        _ => CreateUserError::Db(e),
    })
}

#[derive(sqlx::FromRow)]
pub struct LoginRow {
    pub id: i64,
    pub org_id: i64,
    pub password_hash: String,
    pub disabled: bool,
}

pub async fn find_for_login(pool: &PgPool, email: &EmailAddress) -> sqlx::Result<Option<LoginRow>> {
    sqlx::query_as("select id, org_id, password_hash, disabled from users where email_lower = $1")
        .bind(email.lower())
        .fetch_optional(pool)
        .await
}

/// Replaces a user's password hash (by address) and ends their sessions, in one statement;
/// false when there is no such user.
pub async fn set_password(
    pool: &PgPool,
    email: &EmailAddress,
    password_hash: &str,
) -> sqlx::Result<bool> {
    let changed: Option<i64> = sqlx::query_scalar(
        "with u as (update users set password_hash = $2 where email_lower = $1 returning org_id, id),
              gone as (delete from sessions s using u where s.org_id = u.org_id and s.user_id = u.id)
         select id from u",
    )
    .bind(email.lower())
    .bind(password_hash)
    .fetch_optional(pool)
    .await?;
    Ok(changed.is_some())
}
