//! Running the cluster through `pg_ctl` as the database user: start (or adopt a running
//! postmaster), wait until it answers, create the app's database.

use std::path::Path;
use std::time::Duration;

use sqlx::{ConnectOptions, Connection};

use super::init::ensure_cluster;
use super::{binaries, EmbeddedPg, PgError, DATABASE};

impl EmbeddedPg {
    pub(super) async fn start_as_owner(&mut self) -> Result<(), PgError> {
        ensure_cluster(&self.cluster, &self.run_as, self.options).await?;
        let bin = binaries::find(Some(&self.major()?))?;
        if self.running(&bin).await? {
            tracing::info!(cluster = %self.cluster.display(), "adopting the running PostgreSQL of a previous owner");
            if self
                .wait_ready("postgres", Duration::from_secs(15))
                .await
                .is_err()
            {
                // A stale pid file or a postmaster shutting down: start it properly.
                tracing::warn!("the adopted PostgreSQL does not answer; starting it");
                self.start(&bin).await?;
            }
        } else {
            self.start(&bin).await?;
        }
        self.wait_ready("postgres", Duration::from_secs(60)).await?;
        self.create_database().await
    }

    pub(super) fn major(&self) -> Result<String, PgError> {
        std::fs::read_to_string(self.cluster.join("PG_VERSION"))
            .map(|s| s.trim().to_owned())
            .map_err(|e| {
                PgError::DataDir(format!(
                    "{} is not a PostgreSQL cluster (PG_VERSION: {e})",
                    self.cluster.display()
                ))
            })
    }

    pub(super) async fn running(&self, bin: &Path) -> Result<bool, PgError> {
        let status = self
            .run_as
            .command(&bin.join("pg_ctl"), self.cwd())
            .arg("-D")
            .arg(&self.cluster)
            .arg("status")
            .output()
            .await
            .map_err(PgError::spawn("pg_ctl status"))?;
        Ok(status.status.success())
    }

    pub(super) async fn start(&self, bin: &Path) -> Result<(), PgError> {
        let log = self.cluster.join("server.log");
        let out = self
            .run_as
            .command(&bin.join("pg_ctl"), self.cwd())
            .arg("-D")
            .arg(&self.cluster)
            .arg("-l")
            .arg(&log)
            // The socket directory is given at every start (not frozen in postgresql.conf), so a
            // moved data directory still works. pg_ctl hands -o to a shell: quote it.
            .arg("-o")
            .arg(format!(
                "-k {}",
                shell_quote(&self.cluster.to_string_lossy())
            ))
            .args(["-w", "-t", "60", "-s", "start"])
            .output()
            .await
            .map_err(PgError::spawn("pg_ctl start"))?;
        if !out.status.success() {
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(5).collect();
            return Err(PgError::NotStarted {
                tail: tail.into_iter().rev().collect::<Vec<_>>().join(" | "),
                log,
            });
        }
        tracing::info!(cluster = %self.cluster.display(), "embedded PostgreSQL started");
        Ok(())
    }

    pub(super) async fn wait_ready(&self, database: &str, limit: Duration) -> Result<(), PgError> {
        let deadline = tokio::time::Instant::now() + limit;
        let opts = self.connect_options(database).disable_statement_logging();
        loop {
            match opts.connect().await {
                Ok(c) => {
                    let _ = c.close().await;
                    return Ok(());
                }
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(PgError::NotReady(e))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    pub(super) async fn create_database(&self) -> Result<(), PgError> {
        let mut conn = self
            .connect_options("postgres")
            .connect()
            .await
            .map_err(PgError::NotReady)?;
        app::db::cluster::create_database_if_missing(&mut conn, DATABASE)
            .await
            .map_err(PgError::CreateDatabase)
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// A tool's stderr as one line (errors print as one line).
pub fn one_line(stderr: &[u8]) -> String {
    String::from_utf8_lossy(stderr)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" | ")
}
