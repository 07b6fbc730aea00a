//! The database's disk fills mid-campaign (its data directory is a small tmpfs of the test's
//! own): the workers' claims and marks fail, they back off and say why in the log and on the
//! dashboard, nothing is sent without its mark, nobody gets the campaign twice, and once space
//! is freed sending resumes by itself and the campaign finishes.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::campaign::campaign_processes::{
    campaign_status, reconcile, report, slots_were_exact, worker_args, Allowed, BATCH, CONNECTIONS,
};
use crate::support::org::TestOrg;
use crate::support::pg_servers::PgServer;
use crate::support::procs::{free_listen_address, stub_site, wait_until, Proc};
use crate::support::test_app::{signed_in, TestApp};
use testkit::SmtpSink;

const FAILING: &str = r#"data-test="database-writes-failing""#;

#[test]
fn a_full_database_disk_stops_sending_until_space_is_freed_and_nothing_goes_out_unmarked() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let db = PgServer::primary_on_small_disk(200);
    let pool = rt.block_on(db.pool());
    rt.block_on(app::db::migrate::run(&pool, true)).unwrap();
    let acme = rt.block_on(TestOrg::new(&pool, "acme"));
    let (id, n) = rt.block_on(acme.approved_campaign_to_audience(3000));
    let id = id.0;

    let sink = SmtpSink::start();
    let dir = crate::support::helpers::data_dir();
    let listen = free_listen_address();
    let site = stub_site(dir.path());
    let mut args = worker_args(&sink, &["--smtp-rate-per-second", "100"]);
    args[0] = "serve".into();
    args.extend([
        "--listen".into(),
        listen.clone(),
        "--site-root".into(),
        site,
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut serve =
        Proc::start_with_env("serve", dir.path(), &args, &[("DATABASE_URL", &db.url())]);
    serve.wait_log("Mailroom is ready", 60);
    // Signed in before the disk fills (a sign-in writes its session).
    let dashboard = TestApp {
        base: format!("http://{listen}"),
        pool: pool.clone(),
        stop: tokio::sync::watch::channel(false).0,
    };
    let owner = &acme.owner();
    let c = rt.block_on(signed_in(&dashboard, &owner.email, &owner.password));
    let page = || rt.block_on(dashboard.get_html(&c, "/deliveries"));
    assert!(!page().contains(FAILING));

    wait_until("a fifth of the campaign sent", 120, || {
        sink.messages().len() >= n / 5
    });
    db.fill_disk();
    let filled_at = sink.messages().len();
    serve.wait_log("the database's disk is full", 60);
    // Sending stops: nothing more reaches the relay for longer than a lease.
    let last = std::cell::Cell::new((sink.messages().len(), Instant::now()));
    wait_until("sending to stop on the full disk", 120, || {
        let now = sink.messages().len();
        if now != last.get().0 {
            last.set((now, Instant::now()));
        }
        last.get().1.elapsed() > Duration::from_secs(5)
    });
    let stopped_at = sink.messages().len();
    assert!(
        stopped_at < n,
        "the campaign finished before the disk filled: make it bigger"
    );
    let shown = page();
    assert!(shown.contains(FAILING), "{shown}");
    assert!(shown.contains(r#"data-trouble="disk_full""#), "{shown}");
    assert!(
        shown.contains("the database&#x27;s disk is full")
            || shown.contains("the database's disk is full"),
        "{shown}"
    );
    let metrics = rt
        .block_on(async {
            reqwest::get(format!("{}/metrics", dashboard.base))
                .await?
                .text()
                .await
        })
        .unwrap();
    assert!(
        metrics.contains("mailroom_database_writes_failing{trouble=\"disk_full\"} 1"),
        "{metrics}"
    );
    // Backing off, not crashing: the same process, still up.
    assert!(
        serve.child.try_wait().unwrap().is_none(),
        "{}",
        serve.log_text()
    );

    db.free_disk();
    let freed = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(240);
    while campaign_status(&rt, &pool, id) != "sent" {
        if Instant::now() > deadline {
            panic!(
                "the campaign did not finish once space was freed:\n{}",
                report(&rt, &pool, id, std::slice::from_ref(&serve))
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let resumed_in = freed.elapsed();
    assert!(!page().contains(FAILING), "the alert outlived the trouble");
    assert!(
        serve.child.try_wait().unwrap().is_none(),
        "{}",
        serve.log_text()
    );
    slots_were_exact(&rt, &pool, id);
    serve.signal(Signal::SIGTERM);
    serve.wait_exit(60);
    // Outcomes whose write failed for good are left to the lease, as a killed worker's are.
    let allowed = Allowed {
        unknown: CONNECTIONS + BATCH,
        never_arrived: CONNECTIONS,
    };
    let unknown = reconcile(&rt, &pool, acme.id.0, id, n, &sink, allowed);
    eprintln!(
        "full disk: {filled_at} sent when it filled, {stopped_at} when sending stopped, the \
         campaign finished {:.1} s after space was freed, {unknown} unknown",
        resumed_in.as_secs_f64()
    );
    rt.block_on(pool.close());
}
