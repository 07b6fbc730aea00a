//! pgbouncer between Mailroom and PostgreSQL: in session mode Mailroom works through it (with
//! pgbouncer's default settings, its sessions' settings intact, a campaign sent by two worker
//! processes exactly once); in transaction mode, which mixes sessions up, Mailroom refuses to
//! start and says what to do.

use crate::campaign::campaign_processes::{
    campaign_status, reconcile, report, slots_were_exact, start, worker_args, Allowed,
};
use crate::support::org::TestOrg;
use crate::support::pg_servers::{PgServer, Replication};
use crate::support::pgbouncer::{Pgbouncer, PoolMode};
use crate::support::procs::run;
use nix::sys::signal::Signal;
use std::time::{Duration, Instant};
use testkit::SmtpSink;

#[test]
fn a_pool_in_transaction_mode_is_refused_at_start_with_what_to_do() {
    let db = PgServer::primary(Replication::Asynchronous);
    let bouncer = Pgbouncer::start(&db, PoolMode::Transaction);
    let (status, _, stderr) = run(&["migrate"], &[("DATABASE_URL", &bouncer.url())]);
    assert!(!status.success(), "{stderr}");
    for says in [
        "connection pooler in transaction or statement mode",
        "pool_mode = session",
    ] {
        assert!(stderr.contains(says), "{stderr}");
    }
    assert!(!stderr.contains("are the credentials right"), "{stderr}");
    // Refused before anything was written.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pool = rt.block_on(db.pool());
    let tables: i64 = rt
        .block_on(
            sqlx::query_scalar("select count(*) from pg_tables where schemaname = 'public'")
                .fetch_one(&pool),
        )
        .unwrap();
    assert_eq!(tables, 0);
}

#[test]
fn a_campaign_goes_out_exactly_once_through_a_pool_in_session_mode() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let db = PgServer::primary(Replication::Asynchronous);
    let bouncer = Pgbouncer::start(&db, PoolMode::Session);
    let pool = rt.block_on(db.pool());
    rt.block_on(app::db::migrate::run(&pool, true)).unwrap();

    // Mailroom's session settings hold through the pool (startup options would be refused).
    rt.block_on(async {
        let hosts = mailroom::ops::database::parse_url(&bouncer.url()).unwrap();
        let through = mailroom::ops::database::connect_primary(hosts)
            .await
            .unwrap();
        let generic = mailroom::ops::database::generic_plans_pool(&through, 1);
        for (pool, setting, value) in [
            (&through, "jit", "off"),
            (&through, "idle_in_transaction_session_timeout", "1min"),
            (&generic, "plan_cache_mode", "force_generic_plan"),
        ] {
            let got: String = sqlx::query_scalar(&format!("show {setting}"))
                .fetch_one(pool)
                .await
                .unwrap();
            assert_eq!(got, value, "{setting}");
        }
        generic.close().await;
        through.close().await;
    });

    let acme = rt.block_on(TestOrg::new(&pool, "acme"));
    let (id, n) = rt.block_on(acme.approved_campaign_to_audience(1000));
    let id = id.0;
    let sink = SmtpSink::start();
    let dir = crate::support::helpers::data_dir();
    let args = worker_args(&sink, &[]);
    let procs: Vec<_> = (0..2)
        .map(|i| start(&format!("w{i}"), dir.path(), &args, &bouncer.url()))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(180);
    while campaign_status(&rt, &pool, id) != "sent" {
        if Instant::now() > deadline {
            panic!(
                "the campaign did not finish through pgbouncer:\n{}\npgbouncer:\n{}",
                report(&rt, &pool, id, &procs),
                bouncer.log()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    slots_were_exact(&rt, &pool, id);
    for mut p in procs {
        p.signal(Signal::SIGTERM);
        p.wait_exit(60);
        let log = p.log_text();
        assert!(!log.contains("ERROR"), "{log}");
    }
    let allowed = Allowed {
        unknown: 0,
        never_arrived: 0,
    };
    reconcile(&rt, &pool, acme.id.0, id, n, &sink, allowed);
    rt.block_on(pool.close());
}
