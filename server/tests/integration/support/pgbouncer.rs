//! A pgbouncer of the test's own in front of a [`PgServer`], in the pool mode the test asks
//! for, with pgbouncer's defaults otherwise (no startup parameter ignored).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::helpers::free_port;
use crate::support::pg_servers::{PgServer, DATABASE};

pub struct Pgbouncer {
    dir: tempfile::TempDir,
    child: Child,
    pub port: u16,
}

#[derive(Clone, Copy, Debug)]
pub enum PoolMode {
    Session,
    Transaction,
}

impl Pgbouncer {
    pub fn start(server: &PgServer, mode: PoolMode) -> Pgbouncer {
        let dir = tempfile::Builder::new()
            .prefix("mrpgb")
            .tempdir_in("/tmp")
            .unwrap();
        let port = free_port();
        let mode = match mode {
            PoolMode::Session => "session",
            PoolMode::Transaction => "transaction",
        };
        let ini = dir.path().join("pgbouncer.ini");
        std::fs::write(dir.path().join("users.txt"), "\"postgres\" \"\"\n").unwrap();
        std::fs::write(
            &ini,
            format!(
                "[databases]\n{DATABASE} = host=127.0.0.1 port={} dbname={DATABASE}\n\
                 [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
                 unix_socket_dir =\nauth_type = trust\nauth_file = {}/users.txt\n\
                 pool_mode = {mode}\ndefault_pool_size = 40\nmax_client_conn = 200\n\
                 logfile = {}/pgbouncer.log\n",
                server.port,
                dir.path().display(),
                dir.path().display()
            ),
        )
        .unwrap();
        // pgbouncer refuses to run as root.
        let mut c = if nix::unistd::Uid::effective().is_root() {
            Command::new("chown")
                .args(["-R", "postgres:"])
                .arg(dir.path())
                .status()
                .unwrap();
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", "pgbouncer"]);
            c
        } else {
            Command::new("pgbouncer")
        };
        let child = c
            .arg(&ini)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pgbouncer is installed (scripts/setup)");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "pgbouncer did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        Pgbouncer { dir, child, port }
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{DATABASE}", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for Pgbouncer {
    fn drop(&mut self) {
        // runuser passes the signal on to pgbouncer.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let _ = self.child.wait();
    }
}
