use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use mailroom::embedded_pg::{EmbeddedPg, Options};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, PgPool};

const TEMPLATE: &str = "mailroom_template";

/// The one cluster of this test run, started on first use, stopped by a watchdog when the test
/// process exits (Rust tests have no global teardown).
struct Cluster {
    options: PgConnectOptions,
    socket_dir: PathBuf,
}

static CLUSTER: OnceLock<Cluster> = OnceLock::new();
static NEXT_DB: AtomicU32 = AtomicU32::new(0);

fn cluster() -> &'static Cluster {
    CLUSTER.get_or_init(|| {
        // Its own thread and runtime: the cluster outlives every test's runtime.
        std::thread::spawn(start_cluster)
            .join()
            .expect("cluster start panicked")
    })
}

fn start_cluster() -> Cluster {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let dir = tempfile::Builder::new()
            .prefix("mrt")
            .tempdir_in("/tmp")
            .unwrap()
            .keep();
        let pg = EmbeddedPg::open(&dir, Options { fast: true })
            .await
            .expect("start test cluster");
        let server_log = keep_server_log(pg.cluster_dir());
        spawn_watchdog(pg.cluster_dir(), &dir, server_log);
        let admin = pg.connect_options("postgres");
        let mut conn = admin.connect().await.unwrap();
        let options = require_password(pg.cluster_dir(), &mut conn, admin).await;
        app::db::cluster::create_database_if_missing(&mut conn, TEMPLATE)
            .await
            .unwrap();
        let template = PgPool::connect_with(options.clone().database(TEMPLATE))
            .await
            .unwrap();
        app::db::migrate::run(&template, true).await.unwrap();
        template.close().await;
        let socket_dir = pg.cluster_dir().to_path_buf();
        std::mem::forget(pg); // stopped by the watchdog
        Cluster {
            options,
            socket_dir,
        }
    })
}

/// Everything the suite does in the database goes through a role that must give the canary
/// password (scram-sha-256 on the socket; the cluster's own superuser stays on trust for
/// setup); returns that role's connection options. Waits until a wrong password is refused, so
/// the password is known to be checked, not just carried.
async fn require_password(
    cluster: &Path,
    admin_conn: &mut sqlx::PgConnection,
    admin: PgConnectOptions,
) -> PgConnectOptions {
    use crate::support::canary::{db_password, DB_USER};
    app::db::cluster::create_superuser_with_password(admin_conn, DB_USER, &db_password())
        .await
        .unwrap();
    let hba = cluster.join("pg_hba.conf");
    let rules = std::fs::read_to_string(&hba).unwrap();
    std::fs::write(&hba, format!("local all {DB_USER} scram-sha-256\n{rules}")).unwrap();
    app::db::cluster::reload_config(admin_conn).await.unwrap();
    let with = |password: &str| admin.clone().username(DB_USER).password(password);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while with("wrong").connect().await.is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "pg_hba.conf not applied"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    with(&db_password())
}

/// The test cluster's server log, hard-linked into the run's log directory so it outlives the
/// cluster; where a link is impossible (another file system) the watchdog copies it at exit.
fn keep_server_log(cluster: &Path) -> Option<PathBuf> {
    let kept = crate::support::canary::log_dir().join("test-cluster.postgres.log");
    match std::fs::hard_link(cluster.join("server.log"), &kept) {
        Ok(()) => None,
        Err(_) => Some(kept),
    }
}

/// Stops the cluster and removes its directory once this test process is gone (copying the
/// server log to `copy_log` first when given).
fn spawn_watchdog(cluster: &Path, dir: &Path, copy_log: Option<PathBuf>) {
    let pg_ctl = pg_ctl_path(cluster);
    let as_db_user = if nix::unistd::Uid::effective().is_root() {
        "runuser -u postgres -- "
    } else {
        ""
    };
    let copy = copy_log.map_or(String::new(), |to| {
        format!(
            "cp {} {}; ",
            cluster.join("server.log").display(),
            to.display()
        )
    });
    after_exit(&format!(
        "{as_db_user}{} -D {} -m immediate stop >/dev/null 2>&1; {copy}rm -rf {}",
        pg_ctl.display(),
        cluster.display(),
        dir.display()
    ));
}

/// Runs the shell command `then` once this test process is gone (Rust tests have no global
/// teardown): a shell outlives the process, waits for it to go, then runs it.
pub fn after_exit(then: &str) {
    let script = format!(
        "while [ -d /proc/{} ]; do sleep 0.5; done; {then}",
        std::process::id()
    );
    // Deliberately never waited for: it must outlive this process.
    #[allow(clippy::zombie_processes)]
    let _ = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn a shell to run after this process");
}

pub fn pg_ctl_path(cluster: &Path) -> PathBuf {
    let major = std::fs::read_to_string(cluster.join("PG_VERSION")).unwrap();
    PathBuf::from(format!("/usr/lib/postgresql/{}/bin/pg_ctl", major.trim()))
}

/// A fresh, migrated database for one test.
pub async fn test_db() -> PgPool {
    let c = cluster();
    let name = format!(
        "t_{}_{}",
        std::process::id(),
        NEXT_DB.fetch_add(1, Ordering::SeqCst)
    );
    let mut conn = c.options.clone().connect().await.unwrap();
    app::db::cluster::create_database_from(&mut conn, &name, TEMPLATE)
        .await
        .unwrap();
    PgPool::connect_with(c.options.clone().database(&name))
        .await
        .unwrap()
}

/// A migrated database and a URL that reaches it, for tests that start `mailroom` processes.
pub async fn migrated_db_with_url() -> (PgPool, String) {
    let (pool, url) = empty_db_with_url().await;
    app::db::migrate::run(&pool, true).await.unwrap();
    (pool, url)
}

/// Queues one test mail per address (job `test:1:1:<dialog>:<address>`) in one transaction;
/// returns the job ids in order.
pub async fn enqueue_test_mail_to(
    pool: &PgPool,
    org: i64,
    dialog: &str,
    addresses: &[String],
) -> Vec<String> {
    use app::db::delivery::enqueue;
    use app::domain::{EmailAddress, JobId};
    let mut tx = pool.begin().await.unwrap();
    let mut jobs = Vec::with_capacity(addresses.len());
    for a in addresses {
        let to = EmailAddress::parse(a).unwrap();
        let job = JobId::test(1, 1, dialog, &to).unwrap();
        assert!(
            enqueue(&mut tx, crate::support::fixtures::test_mail(&job, org, &to))
                .await
                .unwrap()
        );
        jobs.push(job.to_string());
    }
    tx.commit().await.unwrap();
    jobs
}

/// An empty database (no migrations) for migration tests.
pub async fn empty_db() -> PgPool {
    let (pool, _) = empty_db_with_url().await;
    pool
}

/// An empty database and a `postgres://` URL that reaches it (through the cluster's socket).
pub async fn empty_db_with_url() -> (PgPool, String) {
    let c = cluster();
    let name = format!(
        "e_{}_{}",
        std::process::id(),
        NEXT_DB.fetch_add(1, Ordering::SeqCst)
    );
    let mut conn = c.options.clone().connect().await.unwrap();
    app::db::cluster::create_database_if_missing(&mut conn, &name)
        .await
        .unwrap();
    let url = crate::support::canary::db_url(&name, &c.socket_dir);
    (
        PgPool::connect_with(c.options.clone().database(&name))
            .await
            .unwrap(),
        url,
    )
}

/// An organisation with one user per given role; returns (org id, [(user id, email, password)]).
pub async fn org_with_users(
    pool: &PgPool,
    slug: &str,
    roles: &[app::domain::Role],
) -> (i64, Vec<(i64, String, String)>) {
    let mut tx = pool.begin().await.unwrap();
    let org = app::db::orgs::create(
        &mut tx,
        app::db::orgs::NewOrg {
            name: slug,
            slug,
            timezone: "Europe/Berlin",
            from_name: slug,
            from_address: "news@example.org",
        },
    )
    .await
    .unwrap();
    let mut users = Vec::new();
    for (i, role) in roles.iter().enumerate() {
        let email = format!("{}{i}@{slug}.example", role.as_str());
        let password = crate::support::canary::user_password(slug, i);
        let hash = app::auth::hash_password(&password).unwrap();
        let addr = app::domain::EmailAddress::parse(&email).unwrap();
        let id = app::db::user::create(
            &mut tx,
            app::db::user::NewUser {
                org_id: org,
                email: &addr,
                name: &email,
                role: *role,
                password_hash: &hash,
            },
        )
        .await
        .unwrap();
        users.push((id, email, password));
    }
    tx.commit().await.unwrap();
    (org, users)
}

/// The `mailroom` binary built for this test run.
pub fn mailroom_bin() -> &'static str {
    env!("CARGO_BIN_EXE_mailroom")
}

/// A scratch data directory under /tmp (short: the unix socket path has a length limit).
pub fn data_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("mrd")
        .tempdir_in("/tmp")
        .unwrap()
}

/// A draft campaign with no target lists, in the caller's transaction.
pub async fn draft(conn: &mut sqlx::PgConnection, org_id: i64, author_id: i64, name: &str) -> i64 {
    let d = app::db::campaign::NewDraft {
        org_id,
        author_id,
        name,
        subject: "s",
        body: "b",
        list_ids: &[],
    };
    app::db::campaign::create_draft(conn, d).await.unwrap()
}

/// The unsubscribe signing keys of in-process apps and workers (the canary key, as every
/// spawned `mailroom` gets through MAILROOM_UNSUBSCRIBE_KEYS).
pub fn test_keys() -> app::unsubscribe::Keys {
    app::unsubscribe::Keys::new(vec![crate::support::canary::unsubscribe_key()]).unwrap()
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
