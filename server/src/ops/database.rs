use std::str::FromStr;
use std::time::Duration;

use anyhow::anyhow;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgPool};

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
        let (options, embedded) = match &at.url {
            // The URL may hold a password: errors name the variable, never its value.
            Some(url) => (parse_url(url)?, None),
            None => {
                let pg = EmbeddedPg::open(&at.data_dir, embedded_pg::Options::default()).await?;
                (pg.connect_options(embedded_pg::DATABASE), Some(pg))
            }
        };
        let pool = match connect(options).await {
            Ok(pool) => pool,
            Err(e) => {
                let what = match embedded {
                    Some(pg) => {
                        let _ = pg.shutdown().await;
                        "cannot connect to the embedded PostgreSQL"
                    }
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

fn parse_url(url: &str) -> anyhow::Result<PgConnectOptions> {
    let invalid = |why: String| {
        anyhow!("DATABASE_URL is not a valid postgres:// URL ({why}); fix it or unset it to use the embedded database")
    };
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(invalid(
            "it must start with postgres:// or postgresql://".into(),
        ));
    }
    PgConnectOptions::from_str(url).map_err(|e| invalid(e.to_string()))
}

/// A pool of Mailroom's connections to the database `options` names, with its session settings.
pub async fn connect(options: PgConnectOptions) -> anyhow::Result<PgPool> {
    Ok(PgPoolOptions::new()
        .max_connections(20)
        .acquire_timeout(Duration::from_secs(10))
        .connect_with(session_settings(options).log_statements(tracing::log::LevelFilter::Debug))
        .await?)
}

/// Every connection runs without PostgreSQL's JIT compiler. Mailroom's statements are short
/// and run many times; JIT pays off only for statements that run for seconds, and its
/// thresholds are plan costs: a statement whose estimate is inflated (a `generate_series`
/// planned at its default 1,000 rows per org) crossed them and spent 784 ms of an 856 ms
/// execution compiling, at every tick. The segment counts, the longest statements Mailroom
/// runs, measured the same with it on or off (docs/lab-notes/benchmarks.md).
fn session_settings(options: PgConnectOptions) -> PgConnectOptions {
    options.options([("jit", "off")])
}

/// A small pool beside `pool`, to the same database, for statements run thousands of times a
/// second with only their arrays changing (the delivery ledger's marks and outcomes, the
/// feeders' claims and lookups). PostgreSQL would otherwise plan each execution again: with an
/// array parameter, every custom plan looks cheaper than the generic one, and planning cost
/// more CPU than executing (docs/lab-notes/benchmarks.md, 2026-11-30 and 2026-12-03).
pub fn generic_plans_pool(pool: &PgPool, max_connections: u32) -> PgPool {
    let options = (*pool.connect_options())
        .clone()
        .options([("plan_cache_mode", "force_generic_plan")]);
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .connect_lazy_with(options)
}
