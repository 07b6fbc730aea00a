use std::str::FromStr;
use std::time::Duration;

use anyhow::anyhow;
use app::domain::Durability;
use futures::FutureExt;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};

use crate::embedded_pg::{self, EmbeddedPg};

/// The database this process works against, and the embedded cluster behind it if any.
pub struct Database {
    pub pool: PgPool,
    embedded: Option<EmbeddedPg>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Migrations {
    /// `mailroom migrate`: refuse migrations this build does not know.
    Strict,
    /// `serve`, `worker`: apply ours, tolerate newer ones (rolling upgrades).
    Tolerant,
}

/// Where the database is.
pub struct Location {
    /// `DATABASE_URL`, when given.
    pub url: Option<String>,
    /// Holds the embedded cluster when there is no URL.
    pub data_dir: std::path::PathBuf,
}

impl Database {
    /// The URL's database when given, else the embedded cluster under the data directory; then
    /// applies migrations.
    pub async fn open(at: &Location, migrations: Migrations) -> anyhow::Result<Self> {
        let (connecting, embedded) = match &at.url {
            // The URL may hold a password: errors name the variable, never its value.
            Some(url) => {
                let hosts = parse_url(url)?;
                (connect_primary(hosts).boxed(), None)
            }
            None => {
                let pg = EmbeddedPg::open(&at.data_dir, embedded_pg::Options::default()).await?;
                (
                    connect(pg.connect_options(embedded_pg::DATABASE)).boxed(),
                    Some(pg),
                )
            }
        };
        let pool = match connecting.await {
            Ok(pool) => pool,
            Err(e) => {
                let what = match embedded {
                    Some(pg) => {
                        let _ = pg.shutdown().await;
                        "cannot connect to the embedded PostgreSQL"
                    }
                    // A refusal of Mailroom's own says what is wrong already.
                    None if e.downcast_ref::<sqlx::Error>().is_none() => return Err(e),
                    None => "cannot connect to the database at DATABASE_URL (is it running and reachable, are the credentials right?)",
                };
                return Err(e.context(what));
            }
        };
        let db = Database { pool, embedded };
        if let Err(e) = db.migrate(migrations).await {
            // Never leave an unowned postmaster behind a failed start.
            let _ = db.close().await;
            return Err(e);
        }
        Ok(db)
    }

    pub async fn migrate(&self, mode: Migrations) -> anyhow::Result<()> {
        app::db::migrate::run(&self.pool, mode == Migrations::Strict)
            .await
            .map_err(|e| anyhow!("migrations failed: {e}"))
    }

    /// Closes the pool, then stops the embedded cluster if this process owns it.
    pub async fn close(self) -> anyhow::Result<()> {
        self.pool.close().await;
        if let Some(pg) = self.embedded {
            pg.shutdown().await?;
        }
        Ok(())
    }
}

/// The hosts `DATABASE_URL` names, in its order: one, or several in libpq's form
/// (`postgres://user@a:5432,b:5432/db?target_session_attrs=read-write`), each with the URL's
/// credentials, database and parameters.
pub fn parse_url(url: &str) -> anyhow::Result<Vec<PgConnectOptions>> {
    let invalid = |why: String| {
        anyhow!("DATABASE_URL is not a valid postgres:// URL ({why}); fix it or unset it to use the embedded database")
    };
    let Some((scheme, rest)) = url
        .split_once("://")
        .filter(|(s, _)| *s == "postgres" || *s == "postgresql")
    else {
        return Err(invalid(
            "it must start with postgres:// or postgresql://".into(),
        ));
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => authority.split_at(at + 1),
        None => ("", authority),
    };
    let tail = session_attrs_checked(tail).map_err(invalid)?;
    let hosts: Vec<&str> = hosts.split(',').collect();
    if hosts.len() > 1 && hosts.iter().any(|h| h.is_empty()) {
        return Err(invalid("its list of hosts has an empty entry".into()));
    }
    hosts
        .into_iter()
        .map(|host| {
            PgConnectOptions::from_str(&format!("{scheme}://{userinfo}{host}{tail}"))
                .map_err(|e| invalid(e.to_string()))
        })
        .collect()
}

/// The URL's path and query without `target_session_attrs`, which Mailroom applies itself:
/// it always needs the writable primary, so only `read-write` (libpq's meaning for several
/// hosts) and `primary` are accepted.
fn session_attrs_checked(tail: &str) -> Result<String, String> {
    let Some((path, query)) = tail.split_once('?') else {
        return Ok(tail.to_string());
    };
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("target_session_attrs", "read-write" | "primary")) => {}
            Some(("target_session_attrs", other)) => {
                return Err(format!(
                    "target_session_attrs={other}: Mailroom writes, so it always connects to the \
                     writable primary; use read-write or leave it out"
                ))
            }
            _ => kept.push(pair),
        }
    }
    Ok(match kept.is_empty() {
        true => path.to_string(),
        false => format!("{path}?{}", kept.join("&")),
    })
}

/// A pool of Mailroom's connections to the database `options` names, with its session settings.
pub async fn connect(options: PgConnectOptions) -> anyhow::Result<PgPool> {
    Ok(pool_options(20, &[]).connect_with(startup(options)).await?)
}

/// How long a host of several may take to answer whether it is the primary.
const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// How often a pool checks that it still reaches the primary.
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// How often the replication's durability is read again (and logged when it changed).
const DURABILITY_EVERY: Duration = Duration::from_secs(60);

/// A pool to whichever of `hosts` is the writable primary, kept there: a connection is only
/// ever opened to a host that takes writes, and a task moves the pool to the new primary after
/// a failover (checked every second; while no host takes writes, connections fail, and the
/// workers back off as for a database restart). Logs the replication's durability at start
/// and whenever it changes.
pub async fn connect_primary(hosts: Vec<PgConnectOptions>) -> anyhow::Result<PgPool> {
    let hosts: Vec<PgConnectOptions> = hosts.into_iter().map(startup).collect();
    let primary = match hosts.as_slice() {
        [one] => {
            // A connection error keeps its own words (the caller says what to check).
            let mut conn = one.connect().await?;
            let writable = app::db::health::writable(&mut conn).await?;
            let _ = conn.close().await;
            anyhow::ensure!(
                writable,
                "the database at DATABASE_URL ({}:{}) is a read-only standby: Mailroom writes, so \
                 give it the primary, or every host in libpq's form \
                 (postgres://user@primary,standby/db) to follow a failover",
                one.get_host(),
                one.get_port()
            );
            one.clone()
        }
        _ => {
            let (found, refusals) = find_primary(&hosts).await;
            found.ok_or_else(|| {
                anyhow!(
                    "none of the {} hosts in DATABASE_URL is a writable primary ({})",
                    hosts.len(),
                    refusals.join("; ")
                )
            })?
        }
    };
    refuse_shared_sessions(&primary).await?;
    let pool = pool_options(20, &[]).connect_with(primary).await?;
    tokio::spawn(watch(pool.clone(), hosts));
    Ok(pool)
}

/// Pool options whose every new connection runs with [`SESSION`] and `extra` settings and must
/// reach a writable primary (a standby's is refused, and the pool tries again within its
/// acquire timeout).
fn pool_options(
    max_connections: u32,
    extra: &'static [(&'static str, &'static str)],
) -> PgPoolOptions {
    let settings: Vec<(&str, &str)> = SESSION.iter().chain(extra).copied().collect();
    let settings = std::sync::Arc::new(settings);
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .after_connect(move |conn, _| {
            let settings = settings.clone();
            Box::pin(async move {
                app::db::health::set_session(conn, &settings).await?;
                match app::db::health::writable(conn).await? {
                    true => Ok(()),
                    false => Err(sqlx::Error::Configuration(
                        "the database is a read-only standby, not the primary".into(),
                    )),
                }
            })
        })
}

/// Refuses a pooler that hands one server session to several clients (pgbouncer in
/// transaction or statement mode): Mailroom keeps state in its sessions (prepared statements,
/// the settings above, `LISTEN` for live progress), which such a pooler mixes up or drops.
/// Two connections held at once are asked for their server process: directly, or through a
/// pool in session mode, they never share one; a transaction pool reuses the idle one at once.
async fn refuse_shared_sessions(host: &PgConnectOptions) -> anyhow::Result<()> {
    let (mut a, mut b) = (host.connect().await?, host.connect().await?);
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push((
            app::db::health::server_process(&mut a).await?,
            app::db::health::server_process(&mut b).await?,
        ));
    }
    let _ = a.close().await;
    let _ = b.close().await;
    // Each connection kept its own server process throughout, and they differ.
    let (first_a, first_b) = seen[0];
    if first_a != first_b && seen.iter().all(|&pair| pair == (first_a, first_b)) {
        return Ok(());
    }
    Err(anyhow!(
        "DATABASE_URL reaches PostgreSQL through a connection pooler in transaction or \
         statement mode (two of Mailroom's connections were served by one server session): \
         Mailroom keeps state in its sessions (prepared statements, settings, LISTEN for live \
         progress), so connect it to PostgreSQL directly or through a pool in session mode \
         (pgbouncer: pool_mode = session)"
    ))
}

/// The first of `hosts` that is a writable primary, and why each one before it was not.
async fn find_primary(hosts: &[PgConnectOptions]) -> (Option<PgConnectOptions>, Vec<String>) {
    let mut refusals = Vec::new();
    for host in hosts {
        let name = format!("{}:{}", host.get_host(), host.get_port());
        let probe = async {
            let mut conn = host.connect().await?;
            let writable = app::db::health::writable(&mut conn).await;
            let _ = conn.close().await;
            writable
        };
        match tokio::time::timeout(PROBE_TIMEOUT, probe).await {
            Ok(Ok(true)) => return (Some(host.clone()), refusals),
            Ok(Ok(false)) => refusals.push(format!("{name} is a read-only standby")),
            // The error may name the host, never the password.
            Ok(Err(e)) => refusals.push(format!("{name}: {e}")),
            Err(_) => refusals.push(format!("{name} did not answer")),
        }
    }
    (None, refusals)
}

/// Keeps `pool` on the primary among `hosts` until the pool is closed, and reads the
/// durability of its commits now and then.
async fn watch(pool: PgPool, hosts: Vec<PgConnectOptions>) {
    let mut durability = None;
    // None: due now (an instant a minute back could precede the boot of a machine just up).
    let mut durability_read: Option<tokio::time::Instant> = None;
    while !pool.is_closed() {
        if durability_read.is_none_or(|at| at.elapsed() >= DURABILITY_EVERY) {
            durability_read = Some(tokio::time::Instant::now());
            // Bounded: a primary cut off mid-statement must not stop the watch.
            let reading =
                tokio::time::timeout(PROBE_TIMEOUT, app::db::health::replication(&pool)).await;
            if let Ok(Ok(reading)) = reading {
                durability = log_durability(durability, &reading);
            }
        }
        tokio::time::sleep(WATCH_EVERY).await;
        if hosts.len() < 2 || on_primary(&pool).await {
            continue;
        }
        if let (Some(primary), _) = find_primary(&hosts).await {
            if !same_host(&primary, &pool.connect_options()) {
                tracing::warn!(
                    host = %primary.get_host(),
                    port = primary.get_port(),
                    "the database's primary moved: new connections go to this host"
                );
                pool.set_connect_options(primary);
                // Now, not in a minute: a failover is when the durability matters.
                durability_read = None;
            }
        }
    }
}

fn same_host(a: &PgConnectOptions, b: &PgConnectOptions) -> bool {
    a.get_host() == b.get_host() && a.get_port() == b.get_port()
}

/// Whether the pool's connections reach the writable primary now. One that cannot be had in
/// time counts as no: a partitioned primary looks like a busy one, and telling them apart is
/// left to the probe of every host that follows (a pool that is only busy finds the same host
/// and stays).
async fn on_primary(pool: &PgPool) -> bool {
    let check = async {
        let mut conn = pool.acquire().await?;
        app::db::health::writable(&mut conn).await
    };
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, check).await,
        Ok(Ok(true))
    )
}

/// Logs the durability when it differs from `before` (a warning when it carries one); returns
/// it.
fn log_durability(
    before: Option<Durability>,
    reading: &app::domain::ReplicationReading,
) -> Option<Durability> {
    let now = Durability::of(reading);
    if before != Some(now) {
        match now.warning() {
            Some(warning) => {
                tracing::warn!(durability = %now, standbys = reading.standbys, "{warning}")
            }
            None => {
                tracing::info!(durability = %now, standbys = reading.standbys, "{}", now.describe())
            }
        }
    }
    Some(now)
}

/// Every connection runs without PostgreSQL's JIT compiler. Mailroom's statements are short
/// and run many times; JIT pays off only for statements that run for seconds, and its
/// thresholds are plan costs: a statement whose estimate is inflated (a `generate_series`
/// planned at its default 1,000 rows per org) crossed them and spent 784 ms of an 856 ms
/// execution compiling, at every tick. The segment counts, the longest statements Mailroom
/// runs, measured the same with it on or off (docs/lab-notes/benchmarks.md).
///
/// The server also gives up on a client that stopped answering, so that a process cut off
/// from the database (a partition, a frozen connection) cannot hold row locks forever and
/// stop the others from taking its claims back once its lease runs out: a session idle inside
/// a transaction for a minute is ended (no Mailroom transaction waits on anything but the
/// database), and over TCP, keepalives and a send timeout end a session whose client is gone
/// within about a minute.
///
/// They are set once the connection is open, not sent as startup options, which a pooler in
/// front of PostgreSQL (pgbouncer) refuses or drops.
const SESSION: &[(&str, &str)] = &[
    ("jit", "off"),
    ("idle_in_transaction_session_timeout", "60s"),
    ("tcp_keepalives_idle", "30"),
    ("tcp_keepalives_interval", "10"),
    ("tcp_keepalives_count", "3"),
    ("tcp_user_timeout", "60000"),
];

/// Added to [`SESSION`] on the pool of [`generic_plans_pool`].
const GENERIC_PLANS: &[(&str, &str)] = &[("plan_cache_mode", "force_generic_plan")];

/// What Mailroom's connections ask for at start-up: nothing a pooler would refuse (sqlx's
/// default `extra_float_digits` is one; Mailroom reads floats in binary, and PostgreSQL's own
/// default already prints them exactly).
fn startup(options: PgConnectOptions) -> PgConnectOptions {
    options
        .log_statements(tracing::log::LevelFilter::Debug)
        .extra_float_digits(None)
}

/// A small pool beside `pool`, to the same database, for statements run thousands of times a
/// second with only their arrays changing (the delivery ledger's marks and outcomes, the
/// feeders' claims and lookups). PostgreSQL would otherwise plan each execution again: with an
/// array parameter, every custom plan looks cheaper than the generic one, and planning cost
/// more CPU than executing (docs/lab-notes/benchmarks.md, 2026-11-30 and 2026-12-03).
/// It follows `pool` to a new primary after a failover.
pub fn generic_plans_pool(pool: &PgPool, max_connections: u32) -> PgPool {
    let follower = pool_options(max_connections, GENERIC_PLANS)
        .connect_lazy_with((*pool.connect_options()).clone());
    let (leader, follows) = (pool.clone(), follower.clone());
    tokio::spawn(async move {
        while !follows.is_closed() && !leader.is_closed() {
            tokio::time::sleep(WATCH_EVERY).await;
            let to = leader.connect_options();
            if !same_host(&to, &follows.connect_options()) {
                follows.set_connect_options((*to).clone());
            }
        }
    });
    follower
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(url: &str) -> Vec<(String, u16, String)> {
        parse_url(url)
            .unwrap()
            .iter()
            .map(|o| {
                (
                    o.get_host().to_string(),
                    o.get_port(),
                    o.get_database().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn several_hosts_share_the_credentials_database_and_parameters() {
        let found =
            hosts("postgres://u:p%40ss@a:5433,b,[::1]:6000/db?sslmode=disable&target_session_attrs=read-write");
        assert_eq!(
            found[..2],
            [
                ("a".into(), 5433, "db".into()),
                ("b".into(), 5432, "db".into()),
            ]
        );
        assert!(
            found[2].0.contains("::1") && found[2].1 == 6000,
            "{found:?}"
        );
        let one = parse_url("postgresql://u:secret@h:5/x?application_name=m").unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].get_username(), "u");
        assert_eq!(
            hosts("postgres://h/x?target_session_attrs=primary").len(),
            1
        );
    }

    #[test]
    fn a_url_mailroom_cannot_write_through_is_refused_without_its_password() {
        for (url, says) in [
            ("mysql://u:secret@h/x", "must start with postgres://"),
            ("postgres://u:secret@a,,b/x", "empty entry"),
            (
                "postgres://u:secret@a,b/x?target_session_attrs=read-only",
                "target_session_attrs=read-only",
            ),
            (
                "postgres://u:secret@a/x?target_session_attrs=prefer-standby",
                "use read-write",
            ),
        ] {
            let e = parse_url(url).unwrap_err().to_string();
            assert!(e.contains(says), "{url}: {e}");
            assert!(e.contains("DATABASE_URL"), "{e}");
            assert!(!e.contains("secret"), "{e}");
        }
    }
}
