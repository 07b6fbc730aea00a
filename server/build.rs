//! Records the git commit this binary is built from, for `mailroom --version`.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git(&["rev-parse", "--short", "HEAD"]);
    if commit.is_some() {
        // Rebuild when HEAD moves: HEAD itself (branch switch, detached checkout) and the ref
        // it points to (a commit on the branch). `--git-path` resolves both for worktrees too.
        // Only existing files: a missing path would make cargo rerun this on every build.
        let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
        watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
        for name in watched {
            if let Some(path) = git(&["rev-parse", "--git-path", &name]).map(PathBuf::from) {
                if path.is_file() {
                    println!("cargo:rerun-if-changed={}", path.display());
                }
            }
        }
    }
    println!(
        "cargo:rustc-env=MAILROOM_BUILD_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
}
