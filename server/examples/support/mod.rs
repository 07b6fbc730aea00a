//! What the benches share: orgs, users, lists and campaigns made through the product's own
//! database functions (the sign-up, the CSV import's batch insert, the approval compare-and-set,
//! the state machine's transitions), Postfix's
//! `smtp-sink` as the receiving server, free ports, an API replica and its readiness, a signed-in dashboard client,
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

/// CPU seconds used so far by `replica`, and by the PostgreSQL cluster (the postmaster, its live
/// backends and the ones it has reaped). /proc counts in USER_HZ, always 100 on Linux.
pub fn cpu_seconds(replica: u32, postmaster: u32) -> (f64, f64) {
    let procs = processes();
    let own = |pid: u32| procs.iter().find(|p| p.0 == pid).map_or(0, |p| p.2);
    let reaped = procs.iter().find(|p| p.0 == postmaster).map_or(0, |p| p.3);
    let backends: u64 = procs
        .iter()
        .filter(|p| p.1 == postmaster)
        .map(|p| p.2)
        .sum();
    (
        own(replica) as f64 / 100.0,
        (own(postmaster) + reaped + backends) as f64 / 100.0,
    )
}

/// The pid of the embedded cluster's postmaster under the data directory `data`.
pub fn postmaster_pid(data: &std::path::Path) -> anyhow::Result<u32> {
    Ok(
        std::fs::read_to_string(data.join("postgres").join("postmaster.pid"))?
            .lines()
            .next()
            .context("an empty postmaster.pid")?
            .trim()
            .parse()?,
    )
}

/// The process's peak resident set (VmHWM), KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
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

/// A campaign to `audience` by `author`, submitted through the product's own steps (a draft,
/// a save, the submission): (id, the version to approve). Due now or, when `later`, in a year.
/// Subject "Hello {{ name }}".
pub async fn submitted_campaign(
    pool: &sqlx::PgPool,
    org: i64,
    author: i64,
    audience: &app::db::campaign::edit::Audience,
    name: &str,
    body: &str,
    later: bool,
) -> anyhow::Result<(i64, i32)> {
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
        list_ids: &audience.lists,
    };
    let id = campaign::create_draft(&mut tx, draft).await?;
    let mut version = 1;
    // A draft holds lists only: segments and exclusions take the editor's save.
    let lists_only = audience.segments.is_empty()
        && audience.excluded_lists.is_empty()
        && audience.excluded_segments.is_empty();
    if later || !lists_only {
        let next_year = later.then(|| {
            (chrono::Utc::now() + chrono::Duration::days(365))
                .format("%Y-%m-%dT%H:%M")
                .to_string()
        });
        let changes = edit::Changes {
            name,
            subject,
            body,
            body_format: BodyFormat::Markdown,
            audience,
            scheduled_local: next_year.as_deref(),
        };
        version = edit::save(
            &mut tx,
            app::domain::OrgId(org),
            app::domain::CampaignId(id),
            app::domain::UserId(author),
            version,
            &changes,
        )
        .await?;
    }
    states::change(
        &mut tx,
        app::domain::OrgId(org),
        app::domain::CampaignId(id),
        Transition::Submit,
    )
    .await?;
    tx.commit().await?;
    Ok((id, version))
}

/// The approval compare-and-set on the version shown, by `approver`.
pub async fn approve(
    pool: &sqlx::PgPool,
    org: i64,
    id: i64,
    approver: i64,
    version: i32,
) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    // A refusal is an error; `Ok` says whether it was a self-approval (never here).
    app::db::campaign::states::approve(
        &mut tx,
        app::domain::OrgId(org),
        app::domain::CampaignId(id),
        app::domain::UserId(approver),
        version,
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// [`submitted_campaign`], then approved by `approver`.
pub async fn approved_campaign(
    pool: &sqlx::PgPool,
    org: i64,
    (author, approver): (i64, i64),
    audience: &app::db::campaign::edit::Audience,
    name: &str,
    body: &str,
    later: bool,
) -> anyhow::Result<i64> {
    let (id, version) = submitted_campaign(pool, org, author, audience, name, body, later).await?;
    approve(pool, org, id, approver, version).await?;
    Ok(id)
}

/// An org (UTC) with an owner who signs in with `password` and a second admin (the approver):
/// (org, (owner, admin)).
pub async fn org_with_admins(
    pool: &sqlx::PgPool,
    slug: &str,
    owner_email: &str,
    password: &str,
) -> anyhow::Result<(i64, (i64, i64))> {
    use app::db::{orgs, user};
    use app::domain::{EmailAddress, Role};
    let mut tx = pool.begin().await?;
    let from = format!("news@{slug}.example");
    let org = orgs::create(
        &mut tx,
        orgs::NewOrg {
            name: slug,
            slug,
            timezone: "UTC",
            from_name: slug,
            from_address: &from,
        },
    )
    .await?;
    let hash = app::auth::hash_password(password)?;
    let second = format!("admin@{slug}.example");
    let mut ids = Vec::new();
    for (email, role, hash) in [
        (owner_email, Role::Owner, hash.as_str()),
        (second.as_str(), Role::Admin, "x"),
    ] {
        let new = user::NewUser {
            org_id: org,
            email: &EmailAddress::parse(email)?,
            name: role.as_str(),
            role,
            password_hash: hash,
        };
        ids.push(user::create(&mut tx, new).await?);
    }
    tx.commit().await?;
    Ok((org, (ids[0], ids[1])))
}

/// Rows the CSV import takes per statement.
const IMPORT_BATCH: usize = 1000;

/// `mailroom serve --no-workers` on `data` (the API's own cost, not the delivery engine's),
/// with no rate limit, its log in `log`: (the process, its origin).
pub fn api_replica(
    bin: &str,
    data: &std::path::Path,
    site: &std::path::Path,
    log: &str,
) -> anyhow::Result<(Child, String)> {
    let port = free_port()?;
    let child = Command::new(bin)
        .args([
            "serve",
            "--no-workers",
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--data-dir",
        ])
        .arg(data)
        .arg("--site-root")
        .arg(site)
        .args(["--api-rate-per-second", "1000000", "--api-burst", "1000000"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(log)?))
        .spawn()?;
    Ok((child, format!("http://127.0.0.1:{port}")))
}

/// An API token of `org` with every scope, made by `owner`, whose secret is `token`.
pub async fn api_token(
    pool: &sqlx::PgPool,
    org: i64,
    owner: i64,
    token: &str,
) -> anyhow::Result<()> {
    let mut conn = pool.acquire().await?;
    app::db::api_tokens::create(
        &mut conn,
        org,
        owner,
        "bench",
        &app::auth::hash_token(token),
        &app::domain::ApiScope::ALL,
    )
    .await?;
    Ok(())
}

/// A new list named `name`.
pub async fn list(pool: &sqlx::PgPool, org: i64, name: &str) -> anyhow::Result<i64> {
    let mut conn = pool.acquire().await?;
    app::db::lists::create(&mut conn, org, name)
        .await?
        .with_context(|| format!("a list called {name} exists already"))
}

/// Puts `people` (address, name) on `list` as a CSV import does: its batch insert, one
/// transaction. An address spelled as an existing subscriber's joins the list; another
/// spelling is a new subscriber, as in an import.
pub async fn import(
    pool: &sqlx::PgPool,
    org: i64,
    list: i64,
    people: &[(String, String)],
) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    for chunk in people.chunks(IMPORT_BATCH) {
        let rows = chunk
            .iter()
            .map(|(e, n)| {
                Ok(app::domain::CsvRow {
                    email: app::domain::EmailAddress::parse(e)?,
                    name: n.clone(),
                    external_id: None,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        app::db::imports::insert_batch(&mut tx, org, list, &rows).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// A campaign transition (pause, resume, cancel) through the state machine's compare-and-set.
pub async fn transition(
    pool: &sqlx::PgPool,
    org: i64,
    id: i64,
    t: app::domain::Transition,
) -> anyhow::Result<()> {
    let mut tx = pool.begin().await?;
    app::db::campaign::states::change(
        &mut tx,
        app::domain::OrgId(org),
        app::domain::CampaignId(id),
        t,
    )
    .await
    .map_err(|e| anyhow::anyhow!("campaign {id}: {t:?} refused: {e:?}"))?;
    tx.commit().await?;
    Ok(())
}

/// Queues the bench's test message `i` (to `e{i}@example.org`) for `org`, through the product's
/// own enqueue.
pub async fn enqueue_bench_mail(
    conn: &mut sqlx::PgConnection,
    org: i64,
    i: usize,
) -> anyhow::Result<()> {
    use app::domain::{CampaignId, EmailAddress, JobId, OrgId, Reference};
    let to = EmailAddress::parse(&format!("e{i}@example.org"))?;
    let job = JobId::test(org, 1, "bench", &to)?;
    let d = app::db::delivery::NewDelivery {
        job: &job,
        org: OrgId(org),
        recipient: &to,
        reference: Reference::Test {
            campaign: CampaignId(org),
            version: 1,
        },
    };
    app::db::delivery::enqueue(conn, d).await?;
    Ok(())
}
