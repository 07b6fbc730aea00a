//! `mailroom --version` names the version and the commit the binary was built from.

use crate::support::procs::run;

#[test]
fn version_names_the_package_version_and_the_build_commit() {
    let (status, stdout, _) = run(&["--version"], &[]);
    assert!(status.success());
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned());
    assert_eq!(
        stdout.trim(),
        format!("mailroom {} (commit {commit})", env!("CARGO_PKG_VERSION"))
    );
}
