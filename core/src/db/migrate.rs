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

#[cfg(test)]
mod tests {
    /// Every migration's SHA-384, as it landed. sqlx refuses to start against a database that
    /// applied a migration whose file has changed since, so a landed migration is never edited:
    /// a change of schema is a new migration. A new migration adds its line here.
    const LANDED: &str = include_str!("migrations.sha384");

    #[test]
    fn landed_migrations_are_never_edited_and_new_ones_are_pinned() {
        let pinned: Vec<(i64, &str)> = LANDED
            .lines()
            .map(|line| {
                let (version, sum) = line.split_once(' ').expect("`<version> <sha384>` lines");
                (version.parse().expect("a version number"), sum)
            })
            .collect();
        let migrator = super::migrator();
        let built: Vec<(i64, String)> = migrator
            .iter()
            .map(|m| {
                let sum: String = m.checksum.iter().map(|b| format!("{b:02x}")).collect();
                (m.version, sum)
            })
            .collect();
        for (version, sum) in &built {
            match pinned.iter().find(|(v, _)| v == version) {
                Some((_, landed)) => assert_eq!(
                    landed, sum,
                    "migration {version} changed after it landed: restore it and put the change in a new migration"
                ),
                None => panic!(
                    "migration {version} is not pinned: add `{version} {sum}` to core/src/db/migrations.sha384"
                ),
            }
        }
        for (version, _) in &pinned {
            assert!(
                built.iter().any(|(v, _)| v == version),
                "migration {version} landed and is gone: a landed migration is never removed"
            );
        }
    }
}
