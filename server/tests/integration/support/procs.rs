//! Running the real `mailroom` binary as a child process, its output captured to a file in the
//! run's log directory (scanned for leaked secrets after the suite). Every process gets the
//! canary unsubscribe key unless a test sets its own.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::support::canary::unsubscribe_keys_env;
use crate::support::helpers::mailroom_bin;

/// The instant every worker process's digest ticker reads (scripts/e2e pins the same one).
pub const DIGEST_NOW: &str = "2026-07-01T12:00:00Z";

pub struct Proc {
    pub child: Child,
    pub log: PathBuf,
}

impl Proc {
    /// Starts `mailroom <args>` on `data_dir`, logging to `<test>.<name>.<n>.log` in the log
    /// directory.
    pub fn start(name: &str, data_dir: &Path, args: &[&str]) -> Proc {
        Self::start_with_env(name, data_dir, args, &[])
    }

    pub fn start_with_env(
        name: &str,
        data_dir: &Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Proc {
        let log = crate::support::canary::log_file(name);
        let file = std::fs::File::create(&log).unwrap();
        let child = Command::new(mailroom_bin())
            .args(args)
            .arg("--data-dir")
            .arg(data_dir)
            .env_remove("DATABASE_URL")
            .env_remove("MAILROOM_DATABASE_URL")
            .env("RUST_LOG", "info")
            .env("MAILROOM_UNSUBSCRIBE_KEYS", unsubscribe_keys_env())
            // The workers' digest ticker reads a fixed Wednesday noon (UTC), when no org with
            // the default Monday 09:00 schedule is due in any zone: a test's mail never
            // depends on the day it runs.
            .env("MAILROOM_ALLOW_FAKE_CLOCK", "1")
            .env("MAILROOM_DIGEST_NOW", DIGEST_NOW)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .unwrap();
        Proc { child, log }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log contains `needle`; panics with the log after `secs`.
    pub fn wait_log(&mut self, needle: &str, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if self.log_text().contains(needle) {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "mailroom exited ({status}) before logging {needle:?}:\n{}",
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("no {needle:?} within {secs}s:\n{}", self.log_text());
    }

    pub fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), sig).unwrap();
    }

    pub fn wait_exit(&mut self, secs: u64) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("mailroom did not exit within {secs}s:\n{}", self.log_text());
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `done` until it holds; panics naming `what` after `secs`.
pub fn wait_until(what: &str, secs: u64, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `mailroom <args>` to completion with extra environment; returns (status, stdout,
/// stderr), which are also written to a log file (named for the subcommand: the arguments
/// themselves may hold a secret).
pub fn run(args: &[&str], env: &[(&str, &str)]) -> (ExitStatus, String, String) {
    let mut cmd = Command::new(mailroom_bin());
    // Only warnings and the final error: each failure must be one line on its own.
    cmd.args(args)
        .env_remove("DATABASE_URL")
        .env_remove("MAILROOM_DATABASE_URL")
        .env("RUST_LOG", "warn")
        .env("MAILROOM_UNSUBSCRIBE_KEYS", unsubscribe_keys_env())
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    let what: String = args
        .first()
        .map_or("run", |a| a)
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .take(20)
        .collect();
    std::fs::write(
        crate::support::canary::log_file(&format!("run-{what}")),
        format!("{}\n--- stdout\n{stdout}--- stderr\n{stderr}", out.status),
    )
    .unwrap();
    (out.status, stdout, stderr)
}

/// The postmaster's pid while one runs on the cluster of `data_dir`.
pub fn postmaster_pid(data_dir: &Path) -> Option<i32> {
    let text = std::fs::read_to_string(data_dir.join("postgres/postmaster.pid")).ok()?;
    let pid: i32 = text.lines().next()?.trim().parse().ok()?;
    Path::new(&format!("/proc/{pid}")).exists().then_some(pid)
}

/// Waits until no postmaster runs on the cluster of `data_dir`.
pub fn wait_postmaster_gone(data_dir: &Path, secs: u64) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while postmaster_pid(data_dir).is_some() {
        assert!(
            Instant::now() < deadline,
            "postmaster still running after {secs}s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A free port on 127.0.0.1 (bound and let go: nothing else here takes it meanwhile).
pub fn free_listen_address() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

/// `mailroom serve` on `listen` with `extra` flags, serving a stub site made under `data_dir`
/// (the pages' HTML, without the wasm these tests do not need).
pub fn start_serve(name: &str, data_dir: &Path, listen: &str, extra: &[&str]) -> Proc {
    let site = stub_site(data_dir);
    let mut args = vec!["serve", "--listen", listen, "--site-root", &site];
    args.extend_from_slice(extra);
    Proc::start(name, data_dir, &args)
}

/// A stub site under `data_dir` for `serve --site-root`: the pages' HTML without the wasm.
pub fn stub_site(data_dir: &Path) -> String {
    let site = data_dir.join("site");
    std::fs::create_dir_all(site.join("pkg")).unwrap();
    std::fs::write(site.join("pkg/mailroom.js"), "").unwrap();
    site.to_str().unwrap().to_owned()
}
