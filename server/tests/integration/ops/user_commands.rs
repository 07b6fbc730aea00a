//! `mailroom demo`, `user add` and `user password` against the embedded cluster, as an operator
//! runs them.

use crate::support::helpers::data_dir;
use crate::support::procs::run;

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
    assert!(
        stderr.contains(r#"--role: "root" is not a role (one of owner, admin, viewer)"#),
        "{stderr}"
    );

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
    crate::support::procs::wait_postmaster_gone(dir.path(), 30);
}

/// `mailroom org add` makes an organisation and its first owner in one step (no SQL), refuses
/// bad input naming the flag, and leaves nothing behind when it refuses.
#[test]
fn org_add_creates_an_organisation_with_its_first_owner_or_nothing() {
    let dir = data_dir();
    let data = dir.path().to_str().unwrap();
    let org_add = |slug: &str, tz: &str, owner: &str| {
        run(
            &[
                "org",
                "add",
                "--data-dir",
                data,
                "--slug",
                slug,
                "--name",
                "Globex Corp",
                "--timezone",
                tz,
                "--from-address",
                "news@globex.example",
                "--owner-email",
                owner,
                "--owner-name",
                "Gina",
            ],
            &[],
        )
    };
    let (status, out, stderr) = org_add("globex", "Europe/Berlin", "gina@globex.example");
    assert!(status.success(), "{stderr}");
    assert!(
        out.contains(
            "created globex (Globex Corp) with owner gina@globex.example; password (shown once): "
        ),
        "{out}"
    );
    let password = out.trim().rsplit(' ').next().unwrap();
    assert_eq!(password.len(), 16, "{out}");
    // The org exists: a user can be added to it; its owner exists: the address is taken.
    let (status, _, stderr) = run(
        &[
            "user",
            "add",
            "--data-dir",
            data,
            "--org",
            "globex",
            "--email",
            "vic@globex.example",
            "--name",
            "Vic",
            "--role",
            "viewer",
        ],
        &[],
    );
    assert!(status.success(), "{stderr}");
    for (slug, tz, owner, flag) in [
        ("globex", "UTC", "other@globex.example", "--slug"),
        ("Bad Slug", "UTC", "x@initech.example", "--slug"),
        ("initech", "Mars/Olympus", "x@initech.example", "--timezone"),
        ("initech", "UTC", "not-an-address", "--owner-email"),
        ("initech", "UTC", "gina@globex.example", "--owner-email"),
    ] {
        let (status, _, stderr) = org_add(slug, tz, owner);
        assert!(!status.success(), "{slug} {tz} {owner}");
        assert!(stderr.contains(flag), "{flag}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    }
    // None of the refused ones left an organisation behind.
    let (status, _, stderr) = run(
        &[
            "user",
            "add",
            "--data-dir",
            data,
            "--org",
            "initech",
            "--email",
            "y@initech.example",
            "--name",
            "Y",
        ],
        &[],
    );
    assert!(!status.success());
    assert!(stderr.contains("no organisation"), "{stderr}");
}
