//! PostgreSQL servers of a test's own, on loopback TCP ports: a primary and streaming standbys
//! made by `pg_basebackup`, for failovers. Apart from the suite's shared cluster, since a test
//! kills them. Trust authentication on loopback only; stopped and removed when dropped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sqlx::PgPool;

use crate::support::helpers::free_port;

pub const DATABASE: &str = "mailroom";

pub struct PgServer {
    /// Holds the data directory, the socket and the server log.
    dir: tempfile::TempDir,
    pub port: u16,
    /// The data directory is a file system of its own, unmounted when dropped.
    mounted: bool,
}

/// How a standby's commits are waited for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Replication {
    /// The primary names the standby in `synchronous_standby_names`.
    Synchronous,
    Asynchronous,
}

const STANDBY_NAME: &str = "standby1";

impl PgServer {
    /// A new primary with a `mailroom` database, ready for a standby (`Synchronous`: its
    /// commits wait for the standby named by [`PgServer::standby_of`]).
    pub fn primary(replication: Replication) -> PgServer {
        PgServer::create(replication, None)
    }

    /// A primary (no standby) whose data directory is a tmpfs of `megabytes`, to be filled
    /// by [`PgServer::fill_disk`]. Its WAL is on the machine's disk, as on a server whose WAL
    /// has a volume of its own: PostgreSQL stops altogether when it cannot write WAL (a
    /// restart, tested elsewhere), while a full data disk fails the statements that need room.
    /// Mounting takes root.
    pub fn primary_on_small_disk(megabytes: u32) -> PgServer {
        PgServer::create(Replication::Asynchronous, Some(megabytes))
    }

    fn create(replication: Replication, small_disk: Option<u32>) -> PgServer {
        let mut server = PgServer::empty();
        let data = server.data();
        let mut initdb = as_db_user("initdb");
        if let Some(megabytes) = small_disk {
            assert!(
                nix::unistd::Uid::effective().is_root(),
                "a test of a full disk mounts a tmpfs: run it as root (CI does)"
            );
            std::fs::create_dir(&data).unwrap();
            run(Command::new("mount")
                .args([
                    "-t",
                    "tmpfs",
                    "-o",
                    &format!("size={megabytes}m,mode=0700"),
                    "tmpfs",
                ])
                .arg(&data));
            server.mounted = true;
            crate::support::helpers::after_exit(&format!(
                "{} -D {} -m immediate stop >/dev/null 2>&1; umount -l {}",
                as_db_user_line("pg_ctl"),
                data.display(),
                data.display()
            ));
            run(Command::new("chown").arg("postgres:").arg(&data));
            initdb.arg("--waldir").arg(server.dir.path().join("wal"));
        }
        run(initdb
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "-D"])
            .arg(&data));
        append(
            &data.join("postgresql.conf"),
            &format!(
                "listen_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
                 wal_level = replica\nmax_wal_senders = 5\nfsync = off\nfull_page_writes = off\n\
                 max_connections = 200\n",
                server.dir.path().display()
            ),
        );
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhost all all 127.0.0.1/32 trust\n\
             host replication all 127.0.0.1/32 trust\n",
        )
        .unwrap();
        server.start();
        server.psql(&format!("create database {DATABASE}"));
        // Only now: from here each commit waits for the standby.
        if replication == Replication::Synchronous {
            server.psql(&format!(
                "alter system set synchronous_standby_names = '{STANDBY_NAME}'"
            ));
            server.psql("select pg_reload_conf()");
        }
        server
    }

    /// A streaming standby of `primary`, copied by `pg_basebackup` and started, streaming
    /// through `via` (a port that forwards to the primary) when given; waits until it streams
    /// (and, for a synchronous primary, until it is the synchronous one).
    pub async fn standby_of(primary: &PgServer, via: Option<u16>) -> PgServer {
        let mut server = PgServer::empty();
        let data = server.data();
        run(as_db_user("pg_basebackup")
            .args([
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-X",
                "stream",
                "-R",
                "-p",
            ])
            .arg(primary.port.to_string())
            .arg("-D")
            .arg(&data));
        // Later lines win: its own socket, the name the primary waits for, and no
        // standby of its own to wait for once promoted (the copied settings name one; a
        // failover tool clears them as it promotes).
        append(
            &data.join("postgresql.auto.conf"),
            &format!(
                "unix_socket_directories = '{}'\nsynchronous_standby_names = ''\n\
                 primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name={STANDBY_NAME}'\n",
                server.dir.path().display(),
                via.unwrap_or(primary.port)
            ),
        );
        server.start();
        let pool = primary.pool().await;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let streaming: i64 = sqlx::query_scalar(
                "select count(*) from pg_stat_replication where state = 'streaming'
                   and (sync_state = 'sync' or current_setting('synchronous_standby_names') = '')",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
            if streaming == 1 {
                break;
            }
            assert!(Instant::now() < deadline, "the standby never streamed");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        pool.close().await;
        server
    }

    /// Fills the data directory's file system to the last byte.
    pub fn fill_disk(&self) {
        let filler = self.data().join("filler");
        let out = Command::new("dd")
            .args(["if=/dev/zero", "bs=1M"])
            .arg(format!("of={}", filler.display()))
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("No space left on device"),
            "the disk did not fill: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Frees what [`PgServer::fill_disk`] took.
    pub fn free_disk(&self) {
        std::fs::remove_file(self.data().join("filler")).unwrap();
    }

    /// A URL reaching this server's `mailroom` database over TCP.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{DATABASE}", self.port)
    }

    /// A pool to this server's `mailroom` database.
    pub async fn pool(&self) -> PgPool {
        PgPool::connect(&self.url()).await.unwrap()
    }

    /// The machine is lost: the postmaster and every backend SIGKILLed at once (the postmaster
    /// stopped first, so that it cannot restart its children in between).
    pub fn kill(&self) {
        let pid = self.postmaster_pid();
        run(Command::new("kill").args(["-STOP", &pid]));
        let _ = Command::new("pkill").args(["-KILL", "-P", &pid]).status();
        run(Command::new("kill").args(["-KILL", &pid]));
    }

    /// Promotes this standby to primary; returns once it takes writes.
    pub fn promote(&self) {
        run(as_db_user("pg_ctl")
            .args(["-w", "-t", "60", "promote", "-D"])
            .arg(self.data()));
    }

    /// Starts the server on a free port; another on a port found free but taken since (a
    /// race with any other socket of the machine) means another port.
    fn start(&mut self) {
        for _ in 0..5 {
            let started = as_db_user("pg_ctl")
                .args(["-w", "-t", "60", "start", "-D"])
                .arg(self.data())
                .arg("-o")
                .arg(format!("-p {}", self.port))
                .arg("-l")
                .arg(self.dir.path().join("server.log"))
                .stdin(Stdio::null())
                .output()
                .unwrap();
            if started.status.success() {
                return;
            }
            self.port = free_port();
        }
        panic!(
            "PostgreSQL did not start:\n{}",
            std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
        );
    }

    fn psql(&self, sql: &str) {
        run(as_db_user("psql")
            .args([
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-c",
                sql,
                "-p",
            ])
            .arg(self.port.to_string()));
    }

    fn postmaster_pid(&self) -> String {
        let pid = std::fs::read_to_string(self.data().join("postmaster.pid")).unwrap();
        pid.lines().next().unwrap().trim().to_string()
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn empty() -> PgServer {
        let dir = tempfile::Builder::new()
            .prefix("mrpg")
            .tempdir_in("/tmp")
            .unwrap();
        if nix::unistd::Uid::effective().is_root() {
            run(Command::new("chown").arg("postgres:").arg(dir.path()));
        }
        // A test process that dies (a panic, a kill) must not leave a server behind.
        crate::support::helpers::after_exit(&format!(
            "{} -D {}/data -m immediate stop >/dev/null 2>&1; rm -rf {}",
            as_db_user_line("pg_ctl"),
            dir.path().display(),
            dir.path().display()
        ));
        PgServer {
            dir,
            port: free_port(),
            mounted: false,
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        let _ = as_db_user("pg_ctl")
            .args(["-m", "immediate", "stop", "-D"])
            .arg(self.data())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if self.mounted {
            let _ = Command::new("umount").arg(self.data()).status();
        }
    }
}

/// A PostgreSQL program, run as `postgres` when the test runs as root (PostgreSQL refuses
/// root).
fn as_db_user(program: &str) -> Command {
    let path = bin_dir().join(program);
    if nix::unistd::Uid::effective().is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(path);
        c
    } else {
        Command::new(path)
    }
}

/// [`as_db_user`] as a shell command line.
fn as_db_user_line(program: &str) -> String {
    let path = bin_dir().join(program);
    match nix::unistd::Uid::effective().is_root() {
        true => format!("runuser -u postgres -- {}", path.display()),
        false => path.display().to_string(),
    }
}

/// The newest installed PostgreSQL's programs.
fn bin_dir() -> PathBuf {
    let mut majors: Vec<u32> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is installed (scripts/setup)")
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    majors.sort();
    let major = majors.last().expect("a PostgreSQL major version");
    PathBuf::from(format!("/usr/lib/postgresql/{major}/bin"))
}

fn run(c: &mut Command) {
    let out = c.stdin(Stdio::null()).output().unwrap();
    assert!(
        out.status.success(),
        "{c:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn append(file: &Path, text: &str) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(file).unwrap();
    f.write_all(text.as_bytes()).unwrap();
}
