use sqlx::migrate::{MigrateError, Migrator};
use sqlx::PgPool;

/// The migrations of this build, embedded in the binary.
pub fn migrator() -> Migrator {
    sqlx::migrate!("../migrations")
}

/// Applies pending migrations. sqlx serialises concurrent runs with an advisory lock held on one
/// connection for the whole run, so several replicas starting at once apply each migration once.
///
/// `strict` (the `migrate` command) refuses a database that has migrations this build does not
/// know; `serve` and `worker` tolerate them, so an older replica keeps running during a rolling
/// upgrade (schema changes are expand/contract, so the old code still fits the new schema).
pub async fn run(pool: &PgPool, strict: bool) -> Result<(), MigrateError> {
    let mut migrator = migrator();
    migrator.set_ignore_missing(!strict);
    migrator.run(pool).await
}
