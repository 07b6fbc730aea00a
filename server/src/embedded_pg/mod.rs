//! The embedded default: a private PostgreSQL cluster under `<data-dir>/postgres`, reached only
//! through a unix socket inside that directory (no TCP port, so clusters never clash).
//!
//! One process owns it, decided by an exclusive `flock` on `<data-dir>/embedded-pg.lock` (the
//! file names the owner's pid). The owner creates, starts and, on shutdown, stops the cluster.
//! Any other `mailroom` on the same data directory connects through the socket and takes over
//! ownership if the owner goes away. The kernel drops the lock of a SIGKILLed owner, so the next
//! start adopts the orphaned postmaster (or starts the cluster if it died too).

mod binaries;
mod run_as;

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};
use tokio::sync::Mutex;

use run_as::RunAs;

/// The socket file is `.s.PGSQL.<PORT>` in the cluster directory; nothing listens on TCP.
const PORT: u16 = 5432;
const SUPERUSER: &str = "mailroom";
pub const DATABASE: &str = "mailroom";

#[derive(Debug, thiserror::Error)]
pub enum PgError {
    #[error("{0}")]
    Binaries(String),
    #[error("{0}")]
    DataDir(String),
    #[error("{0}")]
    Io(String),
    #[error("{0}")]
    Command(String),
    #[error("the embedded PostgreSQL did not become ready: {0}")]
    NotReady(String),
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
        let data_dir = prepare_data_dir(data_dir)?;
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
            check_traversable(&data_dir)?;
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
            let file = open_lock(&lock_path, &data_dir)?;
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
                        return Err(PgError::NotReady(format!(
                            "the owner of the cluster (pid {}) holds the lock but its database does not answer",
                            owner.trim()
                        )));
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
            .map_err(|e| PgError::Command(format!("cannot run pg_ctl stop: {e}")))?;
        *lock = None;
        if !out.status.success() {
            return Err(PgError::Command(format!(
                "pg_ctl stop failed: {}",
                one_line(&out.stderr)
            )));
        }
        tracing::info!("embedded PostgreSQL stopped");
        Ok(())
    }

    /// Takes ownership with `lock` held; on failure the lock is released again, so another
    /// process can try.
    async fn become_owner(&mut self, mut lock: Flock<File>) -> Result<(), PgError> {
        lock.set_len(0)
            .and_then(|_| lock.rewind())
            .and_then(|_| writeln!(lock, "{}", std::process::id()))
            .map_err(|e| PgError::Io(format!("cannot write the lock file: {e}")))?;
        *self.lock.lock().await = Some(lock);
        let result = self.start_as_owner().await;
        if result.is_err() {
            *self.lock.lock().await = None;
        }
        result
    }

    async fn start_as_owner(&mut self) -> Result<(), PgError> {
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

    fn major(&self) -> Result<String, PgError> {
        std::fs::read_to_string(self.cluster.join("PG_VERSION"))
            .map(|s| s.trim().to_owned())
            .map_err(|e| {
                PgError::DataDir(format!(
                    "{} is not a PostgreSQL cluster (PG_VERSION: {e})",
                    self.cluster.display()
                ))
            })
    }

    async fn running(&self, bin: &Path) -> Result<bool, PgError> {
        let status = self
            .run_as
            .command(&bin.join("pg_ctl"), self.cwd())
            .arg("-D")
            .arg(&self.cluster)
            .arg("status")
            .output()
            .await
            .map_err(|e| PgError::Command(format!("cannot run pg_ctl status: {e}")))?;
        Ok(status.status.success())
    }

    async fn start(&self, bin: &Path) -> Result<(), PgError> {
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
            .map_err(|e| PgError::Command(format!("cannot run pg_ctl start: {e}")))?;
        if !out.status.success() {
            let tail = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(5).collect();
            return Err(PgError::Command(format!(
                "PostgreSQL did not start (log {}): {}",
                log.display(),
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            )));
        }
        tracing::info!(cluster = %self.cluster.display(), "embedded PostgreSQL started");
        Ok(())
    }

    async fn wait_ready(&self, database: &str, limit: Duration) -> Result<(), PgError> {
        let deadline = tokio::time::Instant::now() + limit;
        let opts = self.connect_options(database).disable_statement_logging();
        loop {
            match opts.connect().await {
                Ok(c) => {
                    let _ = c.close().await;
                    return Ok(());
                }
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    return Err(PgError::NotReady(e.to_string()))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    async fn create_database(&self) -> Result<(), PgError> {
        let mut conn = self
            .connect_options("postgres")
            .connect()
            .await
            .map_err(|e| PgError::NotReady(e.to_string()))?;
        app::db::cluster::create_database_if_missing(&mut conn, DATABASE)
            .await
            .map_err(|e| PgError::Command(format!("cannot create the database {DATABASE}: {e}")))
    }

    /// A guest keeps trying the lock; when the owner is gone it becomes the owner, so the
    /// cluster outlives any one process.
    fn spawn_takeover(&self, lock_path: PathBuf) -> tokio::task::JoinHandle<()> {
        let mut me = EmbeddedPg {
            cluster: self.cluster.clone(),
            run_as: self.run_as,
            options: self.options,
            lock: self.lock.clone(),
            takeover: None,
        };
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(2)).await;
                let Ok(file) = open_lock(&lock_path, &lock_path) else {
                    continue;
                };
                if let Ok(lock) = Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                    match me.become_owner(lock).await {
                        Ok(()) => {
                            tracing::info!(
                                "took over the embedded PostgreSQL from a stopped owner"
                            );
                            return;
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "could not take over the embedded PostgreSQL; will retry")
                        }
                    }
                }
            }
        })
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

fn open_lock(lock_path: &Path, data_dir: &Path) -> Result<File, PgError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(lock_path)
        .map_err(|e| not_writable(data_dir, e))
}

fn not_writable(dir: &Path, e: std::io::Error) -> PgError {
    PgError::DataDir(format!(
        "the data directory {} is not writable ({e}): choose another with --data-dir or MAILROOM_DATA_DIR",
        dir.display()
    ))
}

fn prepare_data_dir(dir: &Path) -> Result<PathBuf, PgError> {
    std::fs::create_dir_all(dir).map_err(|e| not_writable(dir, e))?;
    let dir = dir.canonicalize().map_err(|e| not_writable(dir, e))?;
    let probe = dir.join(".write-test");
    File::create(&probe).map_err(|e| not_writable(&dir, e))?;
    let _ = std::fs::remove_file(probe);
    Ok(dir)
}

/// When PostgreSQL runs as another user, it must be able to enter every directory above its
/// cluster. We open up the data directory itself; a closed ancestor is the operator's call.
fn check_traversable(data_dir: &Path) -> Result<(), PgError> {
    let meta = std::fs::metadata(data_dir).map_err(|e| PgError::DataDir(e.to_string()))?;
    let mode = meta.permissions().mode();
    if mode & 0o001 == 0 {
        std::fs::set_permissions(data_dir, std::fs::Permissions::from_mode(mode | 0o011))
            .map_err(|e| not_writable(data_dir, e))?;
    }
    for dir in data_dir.ancestors().skip(1) {
        let mode = std::fs::metadata(dir)
            .map(|m| m.permissions().mode())
            .unwrap_or(0o755);
        if mode & 0o001 == 0 {
            return Err(PgError::DataDir(format!(
                "PostgreSQL runs as the `postgres` user, which cannot enter {}: choose a data directory elsewhere (e.g. /var/lib/mailroom) or run `chmod o+x {}`",
                dir.display(),
                dir.display()
            )));
        }
    }
    Ok(())
}

/// Creates the cluster on first use. initdb writes into a scratch directory that is renamed
/// into place only when complete, so a failed first run never leaves a broken cluster behind.
async fn ensure_cluster(cluster: &Path, run_as: &RunAs, options: Options) -> Result<(), PgError> {
    if cluster.join("PG_VERSION").is_file() {
        return Ok(());
    }
    let parent = cluster.parent().unwrap_or(Path::new("."));
    let io = |what: &str, e: std::io::Error| PgError::Io(format!("{what}: {e}"));
    remove_dead_scratch_dirs(parent).map_err(|e| io("cannot remove an unfinished initdb", e))?;
    // Named for our pid: an initdb orphaned by a killed mailroom may still be writing its own.
    let scratch = parent.join(format!("postgres.initdb.{}", std::process::id()));
    if cluster.exists() {
        // A directory without PG_VERSION is not a cluster we made; never delete it silently.
        return Err(PgError::DataDir(format!(
            "{} exists but is not a PostgreSQL cluster: move it away and start again",
            cluster.display()
        )));
    }
    let bin = binaries::find(None)?;
    std::fs::create_dir(&scratch).map_err(|e| io("cannot create the cluster directory", e))?;
    run_as.own(&scratch)?;
    tracing::info!(cluster = %cluster.display(), bin = %bin.display(), "creating the embedded PostgreSQL cluster");
    let mut cmd = run_as.command(&bin.join("initdb"), parent);
    cmd.arg("-D").arg(&scratch).args([
        "-U",
        SUPERUSER,
        "--auth=trust",
        "-E",
        "UTF8",
        "--no-locale",
    ]);
    if options.fast {
        cmd.arg("--no-sync");
    }
    let out = cmd
        .output()
        .await
        .map_err(|e| PgError::Command(format!("cannot run initdb: {e}")))?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&scratch);
        return Err(PgError::Command(format!(
            "initdb failed: {}",
            one_line(&out.stderr)
        )));
    }
    // Only reachable through the socket inside the cluster directory (mode 0700).
    let mut conf =
        format!("\n# mailroom\nlisten_addresses = ''\nport = {PORT}\nmax_connections = 200\n");
    if options.fast {
        conf.push_str("fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n");
    }
    OpenOptions::new()
        .append(true)
        .open(scratch.join("postgresql.conf"))
        .and_then(|mut f| f.write_all(conf.as_bytes()))
        .map_err(|e| io("cannot write postgresql.conf", e))?;
    std::fs::rename(&scratch, cluster).map_err(|e| io("cannot move the new cluster into place", e))
}

/// Removes `postgres.initdb.<pid>` directories whose process is gone (a killed first start).
fn remove_dead_scratch_dirs(parent: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(parent)?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("postgres.initdb."))
        else {
            continue;
        };
        let alive = pid
            .parse::<u32>()
            .is_ok_and(|p| p != std::process::id() && Path::new(&format!("/proc/{p}")).exists());
        if !alive {
            std::fs::remove_dir_all(entry.path())?;
        }
    }
    Ok(())
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
