use std::time::Duration;

use nix::sys::signal::Signal;
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection};

use crate::support::helpers::data_dir;
use crate::support::procs::{
    free_listen_address, postmaster_pid, start_serve, wait_postmaster_gone, Proc,
};

/// Counts live worker heartbeats through the embedded cluster's socket.
fn heartbeats(dir: &std::path::Path) -> i64 {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let opts = PgConnectOptions::new()
            .socket(dir.join("postgres"))
            .port(5432)
            .username("mailroom")
            .database("mailroom");
        let mut c = opts.connect().await.unwrap();
        let n: i64 = sqlx::query_scalar("select count(*) from worker_heartbeats")
            .fetch_one(&mut c)
            .await
            .unwrap();
        c.close().await.unwrap();
        n
    })
}

#[test]
fn a_second_process_shares_the_cluster_and_takes_it_over_when_the_owner_stops() {
    let dir = data_dir();
    let mut owner = Proc::start("owner", dir.path(), &["worker", "--heartbeat-seconds", "1"]);
    owner.wait_log("worker host started", 120);
    let pg = postmaster_pid(dir.path()).expect("owner started a postmaster");

    let mut guest = Proc::start("guest", dir.path(), &["worker", "--heartbeat-seconds", "1"]);
    guest.wait_log("owned by another mailroom process", 60);
    guest.wait_log("worker host started", 60);
    assert_eq!(
        postmaster_pid(dir.path()),
        Some(pg),
        "the guest started no second cluster"
    );
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        heartbeats(dir.path()),
        2,
        "both processes work against the one cluster"
    );

    owner.signal(Signal::SIGTERM);
    assert!(owner.wait_exit(60).success(), "{}", owner.log_text());
    assert!(owner.log_text().contains("embedded PostgreSQL stopped"));
    guest.wait_log("took over the embedded PostgreSQL", 30);
    assert!(
        postmaster_pid(dir.path()).is_some(),
        "the new owner restarted the cluster"
    );

    guest.signal(Signal::SIGTERM);
    assert!(guest.wait_exit(60).success(), "{}", guest.log_text());
    wait_postmaster_gone(dir.path(), 30);
}

#[test]
fn a_start_after_sigkill_adopts_the_orphaned_postmaster() {
    let dir = data_dir();
    let mut first = Proc::start("first", dir.path(), &["worker"]);
    first.wait_log("worker host started", 120);
    let pg = postmaster_pid(dir.path()).unwrap();
    first.signal(Signal::SIGKILL);
    first.wait_exit(10);
    assert_eq!(
        postmaster_pid(dir.path()),
        Some(pg),
        "the postmaster outlives its killed owner"
    );

    let mut second = Proc::start("second", dir.path(), &["worker"]);
    second.wait_log("adopting the running PostgreSQL", 60);
    second.wait_log("worker host started", 60);
    assert_eq!(postmaster_pid(dir.path()), Some(pg));
    second.signal(Signal::SIGTERM);
    assert!(second.wait_exit(60).success());
    wait_postmaster_gone(dir.path(), 30);
}

#[test]
fn sigterm_to_serve_stops_the_http_server_and_the_embedded_cluster() {
    let dir = data_dir();
    let listen = free_listen_address();
    let mut serve = start_serve("serve", dir.path(), &listen, &[]);
    serve.wait_log("Mailroom is ready at", 120);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let status = rt.block_on(async {
        reqwest::get(format!("http://{listen}/readyz"))
            .await
            .unwrap()
            .status()
    });
    assert_eq!(status, 200);
    let pg = postmaster_pid(dir.path()).expect("serve owns a running cluster");

    // A worker on the same data directory is a guest of serve's cluster.
    let mut worker = Proc::start("worker", dir.path(), &["worker"]);
    worker.wait_log("owned by another mailroom process", 60);
    worker.wait_log("worker host started", 60);
    assert_eq!(postmaster_pid(dir.path()), Some(pg));
    worker.signal(Signal::SIGTERM);
    assert!(worker.wait_exit(60).success(), "{}", worker.log_text());
    assert_eq!(
        postmaster_pid(dir.path()),
        Some(pg),
        "a guest leaves the cluster running"
    );

    serve.signal(Signal::SIGTERM);
    assert!(serve.wait_exit(60).success(), "{}", serve.log_text());
    wait_postmaster_gone(dir.path(), 30);
    assert!(
        std::net::TcpStream::connect(&listen).is_err(),
        "port released"
    );
}

#[test]
fn a_start_after_owner_and_postmaster_were_killed_restarts_the_cluster() {
    let dir = data_dir();
    let mut first = Proc::start("first", dir.path(), &["worker"]);
    first.wait_log("worker host started", 120);
    let pg = postmaster_pid(dir.path()).unwrap();
    first.signal(Signal::SIGKILL);
    first.wait_exit(10);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pg), Signal::SIGKILL).unwrap();
    wait_postmaster_gone(dir.path(), 30);
    assert!(
        dir.path().join("postgres/postmaster.pid").exists(),
        "a stale pid file is left behind"
    );

    let mut second = Proc::start(
        "second",
        dir.path(),
        &["worker", "--heartbeat-seconds", "1"],
    );
    second.wait_log("worker host started", 120);
    assert!(
        second.log_text().contains("embedded PostgreSQL started"),
        "{}",
        second.log_text()
    );
    let restarted = postmaster_pid(dir.path()).expect("a new postmaster runs");
    assert_ne!(restarted, pg);
    second.signal(Signal::SIGTERM);
    assert!(second.wait_exit(60).success());
    wait_postmaster_gone(dir.path(), 30);
}
