use std::path::{Path, PathBuf};

use super::PgError;

const INSTALL_HINT: &str =
    "install the PostgreSQL server (Debian/Ubuntu: apt-get install postgresql-15) \
     or set DATABASE_URL to an existing database";

/// The directory holding `initdb`, `pg_ctl` and `postgres` for `major` (the cluster's
/// `PG_VERSION`), or for the newest installed major when there is no cluster yet.
pub fn find(major: Option<&str>) -> Result<PathBuf, PgError> {
    // Where distributions install one directory per major version; overridable for unusual
    // installs (and for tests of the "not installed" path).
    let root_buf = std::env::var_os("MAILROOM_PG_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/lib/postgresql"));
    let root = root_buf.as_path();
    let complete = |dir: &Path| {
        ["initdb", "pg_ctl", "postgres"]
            .iter()
            .all(|b| dir.join(b).is_file())
    };
    match major {
        Some(m) => {
            let dir = root.join(m).join("bin");
            if complete(&dir) {
                return Ok(dir);
            }
            if let Some(dir) = on_path().filter(|d| version_of(d).as_deref() == Some(m)) {
                return Ok(dir);
            }
            Err(PgError::Binaries(format!(
                "the cluster was made by PostgreSQL {m}, but its server binaries were not found \
                 under {} or on PATH: install PostgreSQL {m} (Debian/Ubuntu: apt-get install postgresql-{m})",
                dir.display()
            )))
        }
        None => {
            let mut majors: Vec<(u32, PathBuf)> = std::fs::read_dir(root)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
                .filter(|(_, dir)| complete(dir))
                .collect();
            majors.sort();
            majors
                .pop()
                .map(|(_, d)| d)
                .or_else(on_path)
                .ok_or_else(|| PgError::Binaries(format!("PostgreSQL server binaries (initdb, pg_ctl, postgres) not found under {}/*/bin or on PATH: {INSTALL_HINT}", root.display())))
        }
    }
}

/// A directory on PATH with all three binaries.
fn on_path() -> Option<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .find(|d| {
            ["initdb", "pg_ctl", "postgres"]
                .iter()
                .all(|b| d.join(b).is_file())
        })
}

/// The major version `postgres --version` reports ("postgres (PostgreSQL) 15.18" → "15").
fn version_of(dir: &Path) -> Option<String> {
    let out = std::process::Command::new(dir.join("postgres"))
        .arg("--version")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let version = text.split_whitespace().last()?;
    Some(version.split('.').next()?.to_owned())
}
