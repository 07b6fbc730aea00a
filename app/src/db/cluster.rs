use sqlx::PgConnection;

/// Creates `name` unless it exists; a concurrent creator winning the race is fine.
pub async fn create_database_if_missing(conn: &mut PgConnection, name: &str) -> sqlx::Result<()> {
    let exists: bool =
        sqlx::query_scalar("select exists (select 1 from pg_database where datname = $1)")
            .bind(name)
            .fetch_one(&mut *conn)
            .await?;
    if exists {
        return Ok(());
    }
    let quoted = format!("\"{}\"", name.replace('"', "\"\""));
    match sqlx::query(&format!("create database {quoted}"))
        .execute(conn)
        .await
    {
        Err(sqlx::Error::Database(d)) if d.code().as_deref() == Some("42P04") => Ok(()),
        other => other.map(|_| ()),
    }
}

/// Creates a database as a copy of `template` (tests: one fresh database per test in ~50 ms).
pub async fn create_database_from(
    conn: &mut PgConnection,
    name: &str,
    template: &str,
) -> sqlx::Result<()> {
    let q = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    sqlx::query(&format!(
        "create database {} template {}",
        q(name),
        q(template)
    ))
    .execute(conn)
    .await
    .map(|_| ())
}
