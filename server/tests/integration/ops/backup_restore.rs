//! `mailroom backup` and `mailroom restore` of the embedded database, as an operator runs them:
//! the restored copy holds the same rows, and a restore that must not happen changes nothing.

use std::path::Path;

use mailroom::embedded_pg::{EmbeddedPg, Options};
use sqlx::{ConnectOptions, Connection};

use crate::support::fixtures::one_line_naming;
use crate::support::helpers::data_dir;
use nix::sys::signal::Signal;

use crate::support::procs::{run, wait_postmaster_gone, Proc};

/// Every table's row count and md5 of its rows in a stable order, every sequence's position,
/// and the names of all databases: equal fingerprints mean equal contents.
fn fingerprint(dir: &Path) -> Vec<String> {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let out = rt.block_on(async {
        let pg = EmbeddedPg::open(dir, Options::default())
            .await
            .unwrap_or_else(|e| panic!("fingerprint: opening {}: {e}", dir.display()));
        let mut c = pg
            .connect_options("mailroom")
            .connect()
            .await
            .unwrap_or_else(|e| panic!("fingerprint: connecting: {e}"));
        let tables: Vec<String> = sqlx::query_scalar(
            "select tablename::text from pg_tables where schemaname = 'public' order by 1",
        )
        .fetch_all(&mut c)
        .await
        .unwrap();
        let mut out = Vec::new();
        for t in tables {
            let (n, md5): (i64, String) = sqlx::query_as(&format!(
                "select count(*), md5(coalesce(string_agg(r::text, E'\\n' order by r::text), '')) from \"{t}\" r"
            ))
            .fetch_one(&mut c)
            .await
            .unwrap();
            out.push(format!("{t} {n} {md5}"));
        }
        let seqs: Vec<(String, Option<i64>)> = sqlx::query_as(
            "select sequencename::text, last_value from pg_sequences order by 1",
        )
        .fetch_all(&mut c)
        .await
        .unwrap();
        out.extend(seqs.into_iter().map(|(s, v)| format!("seq {s} {v:?}")));
        let dbs: Vec<String> = sqlx::query_scalar(
            "select datname::text from pg_database where not datistemplate order by 1",
        )
        .fetch_all(&mut c)
        .await
        .unwrap();
        out.push(format!("databases {}", dbs.join(",")));
        c.close().await.unwrap();
        pg.shutdown()
            .await
            .unwrap_or_else(|e| panic!("fingerprint: stopping the cluster: {e}"));
        out
    });
    wait_postmaster_gone(dir, 30);
    out
}

fn rows_of<'a>(fp: &'a [String], table: &str) -> &'a str {
    fp.iter()
        .find(|l| l.starts_with(&format!("{table} ")))
        .map(|l| l.split(' ').nth(1).unwrap())
        .unwrap_or("missing")
}

#[test]
fn a_backup_restored_into_a_fresh_data_dir_holds_the_same_data() {
    let source = data_dir();
    let src = source.path().to_str().unwrap();
    let (status, _, stderr) = run(&["demo", "--data-dir", src], &[]);
    assert!(status.success(), "{stderr}");
    let files = data_dir();
    let file = files.path().join("mailroom.dump");
    let file_s = file.to_str().unwrap();
    let (status, stdout, stderr) = run(&["backup", "--data-dir", src, "--out", file_s], &[]);
    assert!(status.success(), "{stderr}");
    assert!(
        stdout.contains("backed up the embedded database"),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read_dir(files.path()).unwrap().count(),
        1,
        "only the finished backup, no partial file"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600,
        "the backup holds password hashes and keys: owner only"
    );

    let target = data_dir();
    let dst = target.path().join("fresh");
    let dst_s = dst.to_str().unwrap();
    let (status, stdout, stderr) = run(&["restore", "--data-dir", dst_s, "--from", file_s], &[]);
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains("restored"), "{stdout}");

    let want = fingerprint(source.path());
    assert_ne!(
        rows_of(&want, "orgs"),
        "0",
        "the demo seeded data: {want:?}"
    );
    assert_ne!(rows_of(&want, "users"), "0");
    assert_eq!(fingerprint(&dst), want);

    // --force replaces a database that has diverged since.
    let add = [
        "user",
        "add",
        "--data-dir",
        dst_s,
        "--org",
        "acme",
        "--email",
        "late@acme.example",
        "--name",
        "Late",
    ];
    let (status, _, stderr) = run(&add, &[]);
    assert!(status.success(), "{stderr}");
    assert_ne!(fingerprint(&dst), want);
    let (status, _, stderr) = run(
        &["restore", "--data-dir", dst_s, "--from", file_s, "--force"],
        &[],
    );
    assert!(status.success(), "{stderr}");
    assert_eq!(fingerprint(&dst), want, "restored again, no scratch left");
}

#[test]
fn a_restore_that_must_not_happen_says_why_in_one_line_and_changes_nothing() {
    let dir = data_dir();
    let d = dir.path().to_str().unwrap();
    let (status, _, stderr) = run(&["demo", "--data-dir", d], &[]);
    assert!(status.success(), "{stderr}");
    let files = data_dir();
    let dump = files.path().join("good.dump");
    let (status, _, stderr) = run(
        &["backup", "--data-dir", d, "--out", dump.to_str().unwrap()],
        &[],
    );
    assert!(status.success(), "{stderr}");
    let before = fingerprint(dir.path());

    // Over a database that holds data, without --force.
    let (status, _, stderr) = run(
        &["restore", "--data-dir", d, "--from", dump.to_str().unwrap()],
        &[],
    );
    assert!(!status.success());
    one_line_naming(
        &stderr,
        &["already holds data", "orgs", "--force", "fresh --data-dir"],
    );

    assert_eq!(
        fingerprint(dir.path()),
        before,
        "the refusal changed nothing"
    );

    // While another mailroom process uses the data directory, even with --force.
    let mut worker = Proc::start("worker", dir.path(), &["worker"]);
    worker.wait_log("worker host started", 120);
    let (status, _, stderr) = run(
        &[
            "restore",
            "--data-dir",
            d,
            "--from",
            dump.to_str().unwrap(),
            "--force",
        ],
        &[],
    );
    assert!(!status.success());
    one_line_naming(
        &stderr,
        &["another mailroom process", "stop every mailroom process"],
    );
    worker.signal(Signal::SIGTERM);
    assert!(worker.wait_exit(60).success(), "{}", worker.log_text());
    wait_postmaster_gone(dir.path(), 30);
    // The worker wrote its own rows (heartbeat, leader lease): the new reference.
    let before = fingerprint(dir.path());

    // A missing file, a file that is not a dump, a truncated dump (even with --force).
    let missing = files.path().join("missing.dump");
    let (status, _, stderr) = run(
        &[
            "restore",
            "--data-dir",
            d,
            "--from",
            missing.to_str().unwrap(),
        ],
        &[],
    );
    assert!(!status.success());
    one_line_naming(
        &stderr,
        &["cannot read the backup", "missing.dump", "No such file"],
    );
    let text = files.path().join("notes.txt");
    std::fs::write(&text, "not a database dump\n").unwrap();
    let (status, _, stderr) = run(
        &[
            "restore",
            "--data-dir",
            d,
            "--from",
            text.to_str().unwrap(),
            "--force",
        ],
        &[],
    );
    assert!(!status.success());
    one_line_naming(&stderr, &["notes.txt", "is not a Mailroom backup"]);
    let bytes = std::fs::read(&dump).unwrap();
    let cut = files.path().join("cut.dump");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let (status, _, stderr) = run(
        &[
            "restore",
            "--data-dir",
            d,
            "--from",
            cut.to_str().unwrap(),
            "--force",
        ],
        &[],
    );
    assert!(!status.success());
    one_line_naming(&stderr, &["pg_restore"]);

    // An external database: pointed to pg_dump, the password never echoed.
    let password = crate::support::canary::db_password();
    let url = format!(
        "postgres://u:{}@127.0.0.1:1/x",
        crate::support::canary::percent(&password)
    );
    let url = [("DATABASE_URL", url.as_str())];
    for args in [
        vec!["backup", "--data-dir", d, "--out", "x.dump"],
        vec!["restore", "--data-dir", d, "--from", dump.to_str().unwrap()],
    ] {
        let (status, _, stderr) = run(&args, &url);
        assert!(!status.success());
        one_line_naming(
            &stderr,
            &["embedded database only", "DATABASE_URL", "pg_dump"],
        );
        assert!(!stderr.contains(&password), "{stderr}");
    }
    // Nothing to back up.
    let empty = data_dir();
    let (status, _, stderr) = run(
        &[
            "backup",
            "--data-dir",
            empty.path().to_str().unwrap(),
            "--out",
            "x.dump",
        ],
        &[],
    );
    assert!(!status.success());
    one_line_naming(&stderr, &["no embedded database", "--data-dir"]);

    assert_eq!(fingerprint(dir.path()), before, "nothing changed");
}
