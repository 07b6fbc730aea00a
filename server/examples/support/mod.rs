//! What the benches share: campaigns approved through the product's own steps, Postfix's
//! `smtp-sink` as the receiving server, free ports, a replica's readiness, a signed-in dashboard client,
//! stopping a process, and the CPU counters of every process. Included by each bench with
//! `#[path]` (cargo builds no example from a directory without a `main.rs`); each bench uses
//! its own part of it.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// Postfix's `smtp-sink` on a free port (every bench sends into the same receiver, so their
/// figures compare); stopped when dropped.
pub struct Sink {
    child: Child,
    pub port: u16,
}

impl Sink {
    pub fn start() -> anyhow::Result<Sink> {
        let port = free_port()?;
        let child = Command::new("smtp-sink")
            .args(["-u", "nobody", &format!("127.0.0.1:{port}"), "1024"])
            .stdout(Stdio::null())
            .spawn()
            .context("starting Postfix smtp-sink (apt-get install postfix)")?;
        let sink = Sink { child, port };
        for _ in 0..100 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Ok(sink);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        bail!("smtp-sink did not listen on {port}")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Waits until the replica at `origin` answers `/readyz`.
pub async fn ready(origin: &str, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Ok(r) = reqwest::get(format!("{origin}/readyz")).await {
            if r.status().is_success() {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("the replica at {origin} did not become ready")
}

/// A client signed in to the dashboard at `origin`, sending `Origin` as a browser does (the
/// same-origin check on writes).
pub async fn signed_in(
    origin: &str,
    email: &str,
    password: &str,
) -> anyhow::Result<reqwest::Client> {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("origin", origin.parse()?);
    let c = reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .default_headers(headers)
        .build()?;
    let r = c
        .post(format!("{origin}/api/login"))
        .form(&[("email", email), ("password", password)])
        .send()
        .await?;
    if r.headers().get("set-cookie").is_none() {
        bail!("sign-in at {origin} failed: {}", r.status());
    }
    Ok(c)
}

/// SIGTERM, then the exit status (at once if it has already exited).
pub fn stop(child: &mut Child) -> anyhow::Result<std::process::ExitStatus> {
    if let Some(status) = child.try_wait()? {
        return Ok(status);
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )?;
    Ok(child.wait()?)
}

/// (pid, ppid, own CPU ticks, waited-for children's CPU ticks) of every process.
pub fn processes() -> Vec<(u32, u32, u64, u64)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name (which may hold spaces) and the state: ppid, pgrp,
        // session, tty, tpgid, flags, 4 fault counts, utime, stime, cutime, cstime.
        let f: Vec<u64> = stat
            .rsplit_once(") ")?
            .1
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        Some((
            pid,
            *f.first()? as u32,
            f.get(10)? + f.get(11)?,
            f.get(12)? + f.get(13)?,
        ))
    })
    .collect()
}

/// A campaign to `lists` by `author`, approved by `approver` through the product's own steps
/// (a draft, the submission, the approval compare-and-set on the version shown), due now or,
/// when `later`, in a year. Subject "Hello {{ name }}".
pub async fn approved_campaign(
    pool: &sqlx::PgPool,
    org: i64,
    (author, approver): (i64, i64),
    lists: &[i64],
    name: &str,
    body: &str,
    later: bool,
) -> anyhow::Result<i64> {
    use app::db::campaign::{self, edit, states};
    use app::domain::{BodyFormat, Transition};
    let subject = "Hello {{ name }}";
    let mut tx = pool.begin().await?;
    let draft = campaign::NewDraft {
        org_id: org,
        author_id: author,
        name,
        subject,
        body,
        list_ids: lists,
    };
    let id = campaign::create_draft(&mut tx, draft).await?;
    let mut version = 1;
    if later {
        let next_year = (chrono::Utc::now() + chrono::Duration::days(365))
            .format("%Y-%m-%dT%H:%M")
            .to_string();
        let changes = edit::Changes {
            name,
            subject,
            body,
            body_format: BodyFormat::Markdown,
            list_ids: lists,
            scheduled_local: Some(&next_year),
        };
        version = edit::save(&mut tx, org, id, author, version, &changes).await?;
    }
    states::change(&mut tx, org, id, Transition::Submit).await?;
    // A refusal is an error; `Ok` says whether it was a self-approval (never here).
    states::approve(&mut tx, org, id, approver, version).await?;
    tx.commit().await?;
    Ok(id)
}
