//! The embedded default: a private PostgreSQL cluster under `<data-dir>/postgres`, reached only
//! through a unix socket inside that directory (no TCP port, so clusters never clash).
//!
//! One process owns it, decided by an exclusive `flock` on `<data-dir>/embedded-pg.lock` (the
//! file names the owner's pid). The owner creates, starts and, on shutdown, stops the cluster.
//! Any other `mailroom` on the same data directory connects through the socket and takes over
//! ownership if the owner goes away. The kernel drops the lock of a SIGKILLed owner, so the next
//! start adopts the orphaned postmaster (or starts the cluster if it died too).

/// Finding `initdb`, `pg_ctl` and `postgres` for the cluster's major version.
mod binaries;
/// Starting, adopting and readying the cluster through `pg_ctl`.
mod control;
/// Checking the data directory and creating the cluster (initdb).
mod init;
/// The lock that makes one process the cluster's owner, and a guest's takeover.
mod ownership;
/// Who runs PostgreSQL: the current user, or `postgres` when we are root.
mod run_as;

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};
use sqlx::postgres::PgConnectOptions;
use tokio::sync::Mutex;

pub use control::one_line;
use run_as::RunAs;

/// The socket file is `.s.PGSQL.<PORT>` in the cluster directory; nothing listens on TCP.
const PORT: u16 = 5432;
const SUPERUSER: &str = "mailroom";
pub const DATABASE: &str = "mailroom";

/// Why the embedded cluster could not be used. The ones an operator fixes (binaries missing, a
/// data directory that cannot hold a cluster) say what to do; the others keep the error they
/// come from.
#[derive(Debug, thiserror::Error)]
pub enum PgError {
    /// PostgreSQL's programs are missing or unusable; the text says what to install.
    #[error("{0}")]
    Binaries(String),
    /// The data directory cannot hold a cluster; the text says why and what to do.
    #[error("{0}")]
    DataDir(String),
    /// A file operation on the data directory or the cluster failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A PostgreSQL program could not be started at all.
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: &'static str,
        #[source]
        source: std::io::Error,
    },
    /// A PostgreSQL program ran and failed: its own words.
    #[error("{program} failed: {stderr}")]
    Failed {
        program: &'static str,
        stderr: String,
    },
    /// The server did not start; the last lines of its log.
    #[error("PostgreSQL did not start (log {}): {tail}", log.display())]
    NotStarted { log: PathBuf, tail: String },
    #[error("the embedded PostgreSQL did not become ready: {0}")]
    NotReady(#[source] sqlx::Error),
    #[error("the embedded PostgreSQL did not become ready: the owner of the cluster (pid {owner}) holds the lock but its database does not answer")]
    OwnerSilent { owner: String },
    #[error("cannot create the database {DATABASE}: {0}")]
    CreateDatabase(#[source] sqlx::Error),
}

impl PgError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> PgError {
        let what = what.into();
        move |source| PgError::Io { what, source }
    }

    pub(crate) fn spawn(program: &'static str) -> impl FnOnce(std::io::Error) -> PgError {
        move |source| PgError::Spawn { program, source }
    }
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// No fsync and no synchronous commit: for throwaway test clusters only.
    pub fast: bool,
}

pub struct EmbeddedPg {
    cluster: PathBuf,
    run_as: RunAs,
    options: Options,
    /// Held while this process owns the cluster.
    lock: Arc<Mutex<Option<Flock<File>>>>,
    takeover: Option<tokio::task::JoinHandle<()>>,
}

impl EmbeddedPg {
    /// Opens (creating on first use) the cluster under `data_dir` and waits until it accepts
    /// connections, as its owner or as a guest of the process that owns it.
    pub async fn open(data_dir: &Path, options: Options) -> Result<Self, PgError> {
        let data_dir = init::prepare_data_dir(data_dir)?;
        let cluster = data_dir.join("postgres");
        let socket = cluster.join(format!(".s.PGSQL.{PORT}"));
        if socket.as_os_str().len() > 100 {
            return Err(PgError::DataDir(format!(
                "the data directory path {} is too long for PostgreSQL's unix socket (at most about 80 characters): choose a shorter --data-dir",
                data_dir.display()
            )));
        }
        let run_as = RunAs::detect()?;
        if run_as.dropped {
            init::check_traversable(&data_dir)?;
        }
        let lock_path = data_dir.join("embedded-pg.lock");
        let mut pg = EmbeddedPg {
            cluster,
            run_as,
            options,
            lock: Arc::new(Mutex::new(None)),
            takeover: None,
        };
        // Owner if the lock is free; else a guest once the owner's database answers. A guest
        // keeps retrying the lock meanwhile, so a start that overlaps the owner's shutdown
        // becomes the new owner instead of failing.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let file = ownership::open_lock(&lock_path, &data_dir)?;
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => {
                    pg.become_owner(lock).await?;
                    return Ok(pg);
                }
                Err((mut file, _)) => {
                    let mut owner = String::new();
                    let _ = file.read_to_string(&mut owner);
                    if pg
                        .wait_ready(DATABASE, Duration::from_secs(2))
                        .await
                        .is_ok()
                    {
                        tracing::info!(owner_pid = owner.trim(), "embedded PostgreSQL is owned by another mailroom process; connecting through its socket");
                        pg.takeover = Some(pg.spawn_takeover(lock_path));
                        return Ok(pg);
                    }
                    if tokio::time::Instant::now() >= deadline {
                        return Err(PgError::OwnerSilent {
                            owner: owner.trim().to_owned(),
                        });
                    }
                }
            }
        }
    }

    /// Connection options for `database` through the cluster's socket.
    pub fn connect_options(&self, database: &str) -> PgConnectOptions {
        PgConnectOptions::new()
            .socket(&self.cluster)
            .port(PORT)
            .username(SUPERUSER)
            .database(database)
    }

    pub fn cluster_dir(&self) -> &Path {
        &self.cluster
    }

    /// libpq arguments (`pg_dump`, `pg_restore`) that reach `database` through the socket.
    pub fn libpq_args(&self, database: &str) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = vec!["-h".into(), self.cluster.clone().into()];
        for a in ["-p", &PORT.to_string(), "-U", SUPERUSER, "-d", database] {
            args.push(a.into());
        }
        args
    }

    /// Whether this process owns the cluster (no other `mailroom` process is using it).
    pub async fn owned(&self) -> bool {
        self.lock.lock().await.is_some()
    }

    /// The data directory: where the database user's commands start.
    fn cwd(&self) -> &Path {
        self.cluster.parent().unwrap_or(Path::new("/"))
    }

    /// Stops the cluster if this process owns it (a guest leaves it running for the owner).
    pub async fn shutdown(mut self) -> Result<(), PgError> {
        if let Some(t) = self.takeover.take() {
            t.abort();
        }
        let mut lock = self.lock.lock().await;
        if lock.is_none() {
            return Ok(());
        }
        let bin = binaries::find(Some(&self.major()?))?;
        let out = self
            .run_as
            .command(&bin.join("pg_ctl"), self.cwd())
            .arg("-D")
            .arg(&self.cluster)
            .args(["-m", "fast", "-w", "-t", "60", "-s", "stop"])
            .output()
            .await
            .map_err(PgError::spawn("pg_ctl stop"))?;
        *lock = None;
        if !out.status.success() {
            return Err(PgError::Failed {
                program: "pg_ctl stop",
                stderr: one_line(&out.stderr),
            });
        }
        tracing::info!("embedded PostgreSQL stopped");
        Ok(())
    }
}

/// Whether `data_dir` holds an embedded cluster (without creating or starting anything).
pub fn exists(data_dir: &Path) -> bool {
    data_dir.join("postgres").join("PG_VERSION").is_file()
}

/// A client tool (`pg_dump`, `pg_restore`) of the same PostgreSQL as the cluster under
/// `data_dir` (or of the newest installed one when there is no cluster yet): a dump is read and
/// written by the version that runs the cluster.
pub fn tool(data_dir: &Path, name: &str) -> Result<PathBuf, PgError> {
    let major = std::fs::read_to_string(data_dir.join("postgres").join("PG_VERSION"))
        .ok()
        .map(|s| s.trim().to_owned());
    let path = binaries::find(major.as_deref())?.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(PgError::Binaries(format!(
            "{} not found: install the PostgreSQL client tools of the same version (Debian/Ubuntu: postgresql-client-{})",
            path.display(),
            major.as_deref().unwrap_or("<major>")
        )))
    }
}
