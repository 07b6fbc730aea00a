//! A real IMAP server for a test: Debian's Dovecot, started as the test's own child on a free
//! loopback port with a config of its own (rootless: as the current user, or as the `dovecot`
//! system user when the suite runs as root, as CI does). One user, `bounces`, whose password is
//! the run's IMAP canary; its log is copied into the run's log directory when it stops, and
//! scanned for that canary there (the run's directory may be closed to the `dovecot` user).
//! The test fills the mailbox the way mail arrives, by IMAP APPEND.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_imap::Session;
use futures::TryStreamExt;
use nix::unistd::{chown, Gid, Uid, User};
use tokio::net::TcpStream;

use crate::support::helpers::free_port;

use crate::support::canary::{imap_password, log_file, percent};

const DOVECOT: &str = "/usr/sbin/dovecot";
pub const USER: &str = "bounces";

pub struct Dovecot {
    child: Child,
    pub port: u16,
    dir: tempfile::TempDir,
}

impl Dovecot {
    pub fn start() -> Dovecot {
        assert!(
            Path::new(DOVECOT).exists(),
            "{DOVECOT} is missing: scripts/setup installs dovecot-imapd"
        );
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // Root runs it as `dovecot` (it may not run mail processes as root); anyone else as
        // themselves.
        let (uid, gid, name) = if Uid::effective().is_root() {
            let u = User::from_name("dovecot")
                .unwrap()
                .expect("a `dovecot` system user (the dovecot-core package makes one)");
            (u.uid, u.gid, u.name)
        } else {
            let u = User::from_uid(Uid::effective()).unwrap().unwrap();
            (u.uid, Gid::effective(), u.name)
        };
        let port = free_port();
        let log = d.join("dovecot.log");
        for sub in ["run", "state", "mail", "home"] {
            std::fs::create_dir(d.join(sub)).unwrap();
        }
        let conf = format!(
            "protocols = imap\n\
             listen = 127.0.0.1\n\
             base_dir = {d}/run\n\
             state_dir = {d}/state\n\
             log_path = {log}\n\
             ssl = no\n\
             disable_plaintext_auth = no\n\
             auth_mechanisms = plain login\n\
             default_internal_user = {name}\n\
             default_internal_group = {name}\n\
             default_login_user = {name}\n\
             first_valid_uid = 1\n\
             first_valid_gid = 1\n\
             mail_location = maildir:{d}/mail/%u\n\
             service anvil {{\n  chroot =\n}}\n\
             service stats {{\n  chroot =\n}}\n\
             service imap-login {{\n  chroot =\n  \
               inet_listener imap {{\n    address = 127.0.0.1\n    port = {port}\n  }}\n  \
               inet_listener imaps {{\n    port = 0\n  }}\n}}\n\
             passdb {{\n  driver = passwd-file\n  args = scheme=PLAIN username_format=%u {d}/users\n}}\n\
             userdb {{\n  driver = static\n  args = uid={uid} gid={gid} home={d}/home/%u\n}}\n",
            d = d.display(),
            log = log.display(),
        );
        std::fs::write(d.join("dovecot.conf"), conf).unwrap();
        std::fs::write(
            d.join("users"),
            format!("{USER}:{{PLAIN}}{}\n", imap_password()),
        )
        .unwrap();
        // Created by us, so Dovecot (maybe another user) must be given it.
        std::fs::write(&log, "").unwrap();
        for p in std::iter::once(d.to_path_buf())
            .chain(["run", "state", "mail", "home", "users", "dovecot.conf"].map(|s| d.join(s)))
            .chain(std::iter::once(log.clone()))
        {
            chown(&p, Some(uid), Some(gid)).unwrap();
        }
        let mut cmd = Command::new(DOVECOT);
        cmd.arg("-F")
            .arg("-c")
            .arg(d.join("dovecot.conf"))
            .current_dir(d)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if Uid::effective().is_root() {
            cmd.uid(uid.as_raw()).gid(gid.as_raw());
        }
        let child = cmd.spawn().expect("start dovecot");
        let mut server = Dovecot { child, port, dir };
        server.wait_ready(&log);
        server
    }

    fn wait_ready(&mut self, log: &Path) {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                use std::io::Read;
                let mut buf = [0u8; 4];
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                if s.read_exact(&mut buf).is_ok() && &buf == b"* OK" {
                    return;
                }
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "dovecot exited ({status}):\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "dovecot did not greet within 15 s:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `--bounce-imap` for `folder`, in clear text (the test server has no TLS).
    pub fn url(&self, folder: &str) -> String {
        format!(
            "imap://{USER}:{}@127.0.0.1:{}/{folder}?tls=none",
            percent(&imap_password()),
            self.port
        )
    }

    /// A logged-in client, as a mail server delivering into the mailbox would be.
    pub async fn client(&self) -> Client {
        let tcp = TcpStream::connect(("127.0.0.1", self.port)).await.unwrap();
        let mut c = async_imap::Client::new(tcp);
        c.read_response().await.unwrap().unwrap();
        Client(
            c.login(USER, imap_password())
                .await
                .map_err(|(e, _)| e)
                .unwrap(),
        )
    }
}

impl Drop for Dovecot {
    fn drop(&mut self) {
        // SIGTERM: the master stops its children itself.
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut stopped = false;
        while !stopped && Instant::now() < deadline {
            stopped = matches!(self.child.try_wait(), Ok(Some(_)));
            if !stopped {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if !stopped {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // Into the run's log directory, for the scan.
        let _ = std::fs::copy(self.dir.path().join("dovecot.log"), log_file("dovecot"));
    }
}

pub struct Client(pub Session<TcpStream>);

impl Client {
    pub async fn create(&mut self, folder: &str) {
        self.0.create(folder).await.unwrap();
    }

    pub async fn delete(&mut self, folder: &str) {
        self.0.delete(folder).await.unwrap();
    }

    /// Delivers one message into `folder`.
    pub async fn append(&mut self, folder: &str, raw: &str) {
        self.0
            .append(folder, None, None, raw.as_bytes())
            .await
            .unwrap();
    }

    /// (UID, flags) of every message in `folder`, in UID order.
    pub async fn messages(&mut self, folder: &str) -> Vec<(u32, Vec<String>)> {
        let mb = self.0.select(folder).await.unwrap();
        if mb.exists == 0 {
            return Vec::new();
        }
        let mut out: Vec<(u32, Vec<String>)> = self
            .0
            .uid_fetch("1:*", "(UID FLAGS)")
            .await
            .unwrap()
            .try_collect::<Vec<_>>()
            .await
            .unwrap()
            .into_iter()
            .map(|f| {
                (
                    f.uid.unwrap(),
                    f.flags().map(|fl| format!("{fl:?}")).collect(),
                )
            })
            .collect();
        out.sort();
        out
    }

    pub async fn uid_validity(&mut self, folder: &str) -> u32 {
        self.0.select(folder).await.unwrap().uid_validity.unwrap()
    }
}
