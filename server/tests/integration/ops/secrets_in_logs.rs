//! The check behind "secrets are never logged" can fail: `scripts/scan-test-logs` catches a
//! canary that a real `mailroom` process printed, in each encoding, and refuses a run with
//! nothing to check. And the canary database password is really checked by the test cluster.

use std::path::Path;
use std::process::{Command, Stdio};

use sqlx::ConnectOptions;

const SCAN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/scan-test-logs");

/// Runs the scanner on `dir` (and `extra` files); returns (passed, its stderr).
fn scan(dir: &Path, extra: &[&Path]) -> (bool, String) {
    let out = Command::new(SCAN).arg(dir).args(extra).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A log directory like a finished run's, with made-up canaries (not this run's: what this
/// test plants must not trip the real scan): one recorded line per kind and encoding, and clean
/// logs.
fn finished_run(dir: &Path) -> [(&'static str, String); 6] {
    let canaries = [
        ("smtp-password", "canary:smtp:selftest1".to_string()),
        ("imap-password", "canary-imap-selftest1".to_string()),
        ("api-token", "mrk_selftest1".to_string()),
        ("db-password", "canary:db:selftest1".to_string()),
        ("unsubscribe-key", "canary:hmac:selftest1".to_string()),
        ("user-password", "canary:user:selftest1".to_string()),
    ];
    let mut lines = String::new();
    for (kind, value) in &canaries {
        for (encoding, form) in crate::support::canary::encodings(kind, value) {
            lines.push_str(&format!("{kind}\t{encoding}\t{form}\n"));
        }
    }
    std::fs::write(dir.join("canaries"), lines).unwrap();
    for log in [
        "in-process.log",
        "test-cluster.postgres.log",
        "t.worker.0.log",
    ] {
        std::fs::write(dir.join(log), "nothing secret here\n").unwrap();
    }
    canaries
}

#[test]
fn the_scan_catches_a_canary_a_mailroom_process_printed() {
    let dir = tempfile::tempdir().unwrap();
    let canaries = finished_run(dir.path());
    let (passed, said) = scan(dir.path(), &[]);
    assert!(passed, "a clean run passes: {said}");

    // clap echoes a value it cannot parse: a real process writing a secret to its log.
    let log = dir.path().join("t.leaky.0.log");
    let status = Command::new(crate::support::helpers::mailroom_bin())
        .args(["serve", "--listen", &canaries[0].1])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(&log).unwrap())
        .status()
        .unwrap();
    assert!(!status.success());
    let (passed, said) = scan(dir.path(), &[]);
    assert!(!passed, "the leak is caught");
    assert!(
        said.contains("smtp-password canary (raw)") && said.contains("t.leaky.0.log"),
        "names the kind and the file: {said}"
    );
    assert!(
        !said.contains(&canaries[0].1),
        "without repeating it: {said}"
    );
    std::fs::remove_file(&log).unwrap();

    // Every recorded encoding of every kind, in a log or in an extra file (the cargo output).
    let cargo_output = dir.path().join("cargo-test.out");
    for (kind, value) in &canaries {
        for (encoding, form) in crate::support::canary::encodings(kind, value) {
            for (file, extra) in [
                (dir.path().join("in-process.log"), None),
                (cargo_output.clone(), Some(cargo_output.as_path())),
            ] {
                std::fs::write(&file, format!("… {form} …\n")).unwrap();
                let (passed, said) = scan(dir.path(), extra.as_slice());
                assert!(!passed, "{kind} ({encoding}) in {} missed", file.display());
                assert!(
                    said.contains(&format!("{kind} canary ({encoding})")),
                    "{said}"
                );
                std::fs::write(&file, "clean\n").unwrap();
            }
        }
    }
    let (passed, said) = scan(dir.path(), &[&cargo_output]);
    assert!(passed, "clean again: {said}");
}

#[test]
fn the_scan_refuses_a_run_with_nothing_to_check() {
    let dir = tempfile::tempdir().unwrap();
    let (passed, said) = scan(dir.path(), &[]);
    assert!(
        !passed && said.contains("no canaries"),
        "empty directory: {said}"
    );

    finished_run(dir.path());
    std::fs::remove_file(dir.path().join("t.worker.0.log")).unwrap();
    let (passed, said) = scan(dir.path(), &[]);
    assert!(!passed && said.contains("no process log"), "{said}");

    finished_run(dir.path());
    let canaries = std::fs::read_to_string(dir.path().join("canaries")).unwrap();
    let without_db: String = canaries
        .lines()
        .filter(|l| !l.starts_with("db-password"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(dir.path().join("canaries"), without_db).unwrap();
    let (passed, said) = scan(dir.path(), &[]);
    assert!(
        !passed && said.contains("db-password canary was never handed out"),
        "{said}"
    );

    finished_run(dir.path());
    let (passed, said) = scan(dir.path(), &[&dir.path().join("missing.out")]);
    assert!(!passed && said.contains("does not exist"), "{said}");
}

/// The suite's database URLs carry the canary password, and the cluster checks it: a wrong one
/// is refused, so the password cannot be silently unused.
#[tokio::test]
async fn the_test_database_refuses_a_wrong_password() {
    let (pool, url) = crate::support::helpers::empty_db_with_url().await;
    let password = crate::support::canary::db_password();
    let encoded = crate::support::canary::percent(&password);
    assert!(url.contains(&encoded), "the URL carries the canary");
    let right: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    right.connect().await.expect("the canary password logs in");
    let wrong = url.replace(&encoded, "wrong");
    let wrong: sqlx::postgres::PgConnectOptions = wrong.parse().unwrap();
    let Err(refused) = wrong.connect().await else {
        panic!("a wrong password logged in");
    };
    assert!(
        refused
            .to_string()
            .contains("password authentication failed"),
        "{refused}"
    );
    pool.close().await;
}
