//! `mailroom demo`, `user add` and `user password` against the embedded cluster, as an operator
//! runs them.

use crate::helpers::data_dir;
use crate::procs::run;

#[test]
fn demo_prints_logins_once_and_user_commands_manage_logins() {
    let dir = data_dir();
    let data = dir.path().to_str().unwrap();
    let (status, stdout, stderr) = run(&["demo", "--data-dir", data], &[]);
    assert!(status.success(), "{stderr}");
    let olivia = stdout
        .lines()
        .find(|l| l.contains("olivia@acme.example"))
        .expect("olivia's login is printed");
    let fields: Vec<&str> = olivia.split_whitespace().collect();
    assert_eq!(&fields[..3], &["acme", "owner", "olivia@acme.example"]);
    assert_eq!(fields[3].len(), 16, "a generated password");

    let (status, again, _) = run(&["demo", "--data-dir", data], &[]);
    assert!(status.success());
    assert!(
        again.contains("exist already") && !again.contains(fields[3]),
        "passwords are shown once: {again}"
    );

    let add = [
        "user",
        "add",
        "--data-dir",
        data,
        "--org",
        "acme",
        "--email",
        "Nia@Acme.example",
        "--name",
        "Nia",
        "--role",
        "viewer",
    ];
    let (status, out, stderr) = run(&add, &[]);
    assert!(status.success(), "{stderr}");
    assert!(
        out.contains("added Nia@Acme.example (viewer) to acme; password (shown once): "),
        "{out}"
    );
    let (status, _, stderr) = run(&add, &[]);
    assert!(!status.success());
    assert!(stderr.contains("already exists"), "{stderr}");
    let (status, _, stderr) = run(
        &[
            "user",
            "add",
            "--data-dir",
            data,
            "--org",
            "nope",
            "--email",
            "x@y.org",
            "--name",
            "X",
        ],
        &[],
    );
    assert!(!status.success());
    assert!(
        stderr.contains("--org: there is no organisation with the short name “nope”"),
        "{stderr}"
    );
    let (status, _, stderr) = run(
        &[
            "user",
            "add",
            "--data-dir",
            data,
            "--org",
            "acme",
            "--email",
            "x@y.org",
            "--name",
            "X",
            "--role",
            "root",
        ],
        &[],
    );
    assert!(!status.success());
    assert!(stderr.contains("--role: unknown role “root”"), "{stderr}");

    let (status, out, stderr) = run(
        &[
            "user",
            "password",
            "--data-dir",
            data,
            "--email",
            "olivia@acme.example",
        ],
        &[],
    );
    assert!(status.success(), "{stderr}");
    assert!(
        out.contains("new password for olivia@acme.example (shown once): ")
            && !out.contains(fields[3]),
        "{out}"
    );
    crate::procs::wait_postmaster_gone(dir.path(), 30);
}
