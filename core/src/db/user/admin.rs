//! Managing an organisation's users: the list, roles, disabling, and the state a set-password
//! link starts from. Every statement is scoped by the org id.

use sqlx::PgConnection;

use crate::domain::Role;

#[derive(sqlx::FromRow, Debug, Clone)]
pub struct UserRow {
    pub id: i64,
    pub name: String,
    pub email: String,
    pub role: crate::domain::Role,
    pub disabled: bool,
    /// `invited` or `reset` while the user has no password, else None.
    pub awaiting: Option<String>,
    /// In the org's time zone.
    pub created: String,
}

/// The org's users, owners first, then by name.
pub async fn list(conn: &mut PgConnection, org_id: i64) -> sqlx::Result<Vec<UserRow>> {
    sqlx::query_as(
        "select u.id, u.name, u.email, u.role, u.disabled,
                case u.password_hash when $2 then 'invited' when $3 then 'reset' end as awaiting,
                to_char(u.created_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as created
         from users u join orgs o on o.id = u.org_id
         where u.org_id = $1
         order by array_position(array['owner', 'admin', 'viewer'], u.role), lower(u.name), u.id",
    )
    .bind(org_id)
    .bind(crate::auth::NO_PASSWORD_INVITED)
    .bind(crate::auth::NO_PASSWORD_RESET)
    .fetch_all(conn)
    .await
}

/// One user as a change sees it.
#[derive(sqlx::FromRow, Debug, Clone)]
pub struct Target {
    pub id: i64,
    pub name: String,
    pub email: String,
    pub role: crate::domain::Role,
    pub disabled: bool,
    /// Invited and has not set a password yet.
    pub invited: bool,
}

/// Locks the user `user_id` of the org together with every active owner of the org (in id
/// order, in one statement, so two owners changing each other cannot deadlock) and returns
/// the user and how many *other* active owners there are. None: no such user in this org.
pub async fn lock_with_owners(
    conn: &mut PgConnection,
    org_id: i64,
    user_id: i64,
) -> sqlx::Result<Option<(Target, usize)>> {
    let rows: Vec<Target> = sqlx::query_as(
        "select id, name, email, role, disabled, password_hash = $3 as invited from users
         where org_id = $1 and (id = $2 or (role = 'owner' and not disabled))
         order by id for update",
    )
    .bind(org_id)
    .bind(user_id)
    .bind(crate::auth::NO_PASSWORD_INVITED)
    .fetch_all(conn)
    .await?;
    let others = rows
        .iter()
        .filter(|r| r.id != user_id && r.role == crate::domain::Role::Owner && !r.disabled)
        .count();
    Ok(rows
        .into_iter()
        .find(|r| r.id == user_id)
        .map(|t| (t, others)))
}

pub async fn set_role(
    conn: &mut PgConnection,
    org_id: i64,
    user_id: i64,
    role: Role,
) -> sqlx::Result<()> {
    sqlx::query("update users set role = $3 where org_id = $1 and id = $2")
        .bind(org_id)
        .bind(user_id)
        .bind(role.as_str())
        .execute(conn)
        .await?;
    Ok(())
}

/// Disables or enables a user; disabling also ends every session they have.
pub async fn set_disabled(
    conn: &mut PgConnection,
    org_id: i64,
    user_id: i64,
    disabled: bool,
) -> sqlx::Result<()> {
    sqlx::query("update users set disabled = $3 where org_id = $1 and id = $2")
        .bind(org_id)
        .bind(user_id)
        .bind(disabled)
        .execute(&mut *conn)
        .await?;
    if disabled {
        end_sessions(conn, org_id, user_id).await?;
    }
    Ok(())
}

/// Ends every session of a user; returns how many there were.
pub async fn end_sessions(conn: &mut PgConnection, org_id: i64, user_id: i64) -> sqlx::Result<u64> {
    Ok(
        sqlx::query("delete from sessions where org_id = $1 and user_id = $2")
            .bind(org_id)
            .bind(user_id)
            .execute(conn)
            .await?
            .rows_affected(),
    )
}

/// Replaces the user's password hash (a real one, or a `NO_PASSWORD_*` marker) and ends
/// their sessions: whoever knew the old password is signed out everywhere.
pub async fn replace_password(
    conn: &mut PgConnection,
    org_id: i64,
    user_id: i64,
    password_hash: &str,
) -> sqlx::Result<()> {
    sqlx::query("update users set password_hash = $3 where org_id = $1 and id = $2")
        .bind(org_id)
        .bind(user_id)
        .bind(password_hash)
        .execute(&mut *conn)
        .await?;
    end_sessions(conn, org_id, user_id).await?;
    Ok(())
}

pub async fn set_name(
    conn: &mut PgConnection,
    org_id: i64,
    user_id: i64,
    name: &str,
) -> sqlx::Result<()> {
    sqlx::query("update users set name = $3 where org_id = $1 and id = $2")
        .bind(org_id)
        .bind(user_id)
        .bind(name)
        .execute(conn)
        .await?;
    Ok(())
}

/// The user of this org with this address (compared by `email_lower`), if any.
pub async fn find_by_email(
    conn: &mut PgConnection,
    org_id: i64,
    email_lower: &str,
) -> sqlx::Result<Option<UserRow>> {
    sqlx::query_as(
        "select u.id, u.name, u.email, u.role, u.disabled,
                case u.password_hash when $3 then 'invited' when $4 then 'reset' end as awaiting,
                to_char(u.created_at at time zone o.timezone, 'YYYY-MM-DD HH24:MI') as created
         from users u join orgs o on o.id = u.org_id
         where u.org_id = $1 and u.email_lower = $2",
    )
    .bind(org_id)
    .bind(email_lower)
    .bind(crate::auth::NO_PASSWORD_INVITED)
    .bind(crate::auth::NO_PASSWORD_RESET)
    .fetch_optional(conn)
    .await
}
