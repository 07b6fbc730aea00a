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

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The databases whose name starts with `prefix` (leftovers of an interrupted restore).
pub async fn databases_with_prefix(
    conn: &mut PgConnection,
    prefix: &str,
) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar("select datname from pg_database where starts_with(datname, $1)")
        .bind(prefix)
        .fetch_all(conn)
        .await
}

pub async fn create_database(conn: &mut PgConnection, name: &str) -> sqlx::Result<()> {
    sqlx::query(&format!("create database {}", quote(name)))
        .execute(conn)
        .await
        .map(|_| ())
}

pub async fn drop_database_if_exists(conn: &mut PgConnection, name: &str) -> sqlx::Result<()> {
    sqlx::query(&format!("drop database if exists {}", quote(name)))
        .execute(conn)
        .await
        .map(|_| ())
}

/// Puts `incoming` in the place of `live` in one transaction (renames are transactional): the
/// live name always holds either the old or the new database, never neither. The old one is
/// kept as `retired` for the caller to drop.
pub async fn swap_databases(
    conn: &mut PgConnection,
    live: &str,
    incoming: &str,
    retired: &str,
) -> sqlx::Result<()> {
    let mut tx = sqlx::Connection::begin(conn).await?;
    sqlx::query(&format!(
        "alter database {} rename to {}",
        quote(live),
        quote(retired)
    ))
    .execute(&mut *tx)
    .await?;
    sqlx::query(&format!(
        "alter database {} rename to {}",
        quote(incoming),
        quote(live)
    ))
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// The tables of the connected database that hold at least one row, the migrations ledger
/// aside (a migrated but unused database counts as empty).
pub async fn tables_with_rows(conn: &mut PgConnection) -> sqlx::Result<Vec<String>> {
    let tables: Vec<(String, String)> = sqlx::query_as(
        "select schemaname::text, tablename::text from pg_tables
          where schemaname not in ('pg_catalog', 'information_schema')
            and tablename <> '_sqlx_migrations'
          order by 1, 2",
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut full = Vec::new();
    for (schema, table) in tables {
        let any: bool = sqlx::query_scalar(&format!(
            "select exists (select 1 from {}.{})",
            quote(&schema),
            quote(&table)
        ))
        .fetch_one(&mut *conn)
        .await?;
        if any {
            full.push(table);
        }
    }
    Ok(full)
}

/// Creates a superuser that logs in with `password` (tests: the canary database password).
/// Role DDL takes no bind parameters, so the password is quoted as a literal.
pub async fn create_superuser_with_password(
    conn: &mut PgConnection,
    name: &str,
    password: &str,
) -> sqlx::Result<()> {
    let literal = format!("'{}'", password.replace('\'', "''"));
    sqlx::query(&format!(
        "create role {} login superuser password {literal}",
        quote(name)
    ))
    .execute(conn)
    .await
    .map(|_| ())
}

/// Makes the server re-read its configuration files (pg_hba.conf) for new connections.
pub async fn reload_config(conn: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::query("select pg_reload_conf()")
        .execute(conn)
        .await
        .map(|_| ())
}
