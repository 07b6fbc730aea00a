//! Making a cluster: the data directory checked (writable, enterable by the database user),
//! and initdb run into a scratch directory that is renamed into place only when complete.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::run_as::RunAs;
use super::{binaries, one_line, Options, PgError, PORT, SUPERUSER};

pub(super) fn not_writable(dir: &Path, e: std::io::Error) -> PgError {
    PgError::DataDir(format!(
        "the data directory {} is not writable ({e}): choose another with --data-dir or MAILROOM_DATA_DIR",
        dir.display()
    ))
}

pub(super) fn prepare_data_dir(dir: &Path) -> Result<PathBuf, PgError> {
    std::fs::create_dir_all(dir).map_err(|e| not_writable(dir, e))?;
    let dir = dir.canonicalize().map_err(|e| not_writable(dir, e))?;
    let probe = dir.join(".write-test");
    File::create(&probe).map_err(|e| not_writable(&dir, e))?;
    let _ = std::fs::remove_file(probe);
    Ok(dir)
}

/// When PostgreSQL runs as another user, it must be able to enter every directory above its
/// cluster. We open up the data directory itself; a closed ancestor is the operator's call.
pub(super) fn check_traversable(data_dir: &Path) -> Result<(), PgError> {
    let meta = std::fs::metadata(data_dir)
        .map_err(PgError::io(format!("cannot read {}", data_dir.display())))?;
    let mode = meta.permissions().mode();
    if mode & 0o001 == 0 {
        std::fs::set_permissions(data_dir, std::fs::Permissions::from_mode(mode | 0o011))
            .map_err(|e| not_writable(data_dir, e))?;
    }
    for dir in data_dir.ancestors().skip(1) {
        let mode = std::fs::metadata(dir)
            .map(|m| m.permissions().mode())
            .unwrap_or(0o755);
        if mode & 0o001 == 0 {
            return Err(PgError::DataDir(format!(
                "PostgreSQL runs as the `postgres` user, which cannot enter {}: choose a data directory elsewhere (e.g. /var/lib/mailroom) or run `chmod o+x {}`",
                dir.display(),
                dir.display()
            )));
        }
    }
    Ok(())
}

/// Creates the cluster on first use. initdb writes into a scratch directory that is renamed
/// into place only when complete, so a failed first run never leaves a broken cluster behind.
pub(super) async fn ensure_cluster(
    cluster: &Path,
    run_as: &RunAs,
    options: Options,
) -> Result<(), PgError> {
    if cluster.join("PG_VERSION").is_file() {
        return Ok(());
    }
    let parent = cluster.parent().unwrap_or(Path::new("."));
    remove_dead_scratch_dirs(parent).map_err(PgError::io("cannot remove an unfinished initdb"))?;
    // Named for our pid: an initdb orphaned by a killed mailroom may still be writing its own.
    let scratch = parent.join(format!("postgres.initdb.{}", std::process::id()));
    if cluster.exists() {
        // A directory without PG_VERSION is not a cluster we made; never delete it silently.
        return Err(PgError::DataDir(format!(
            "{} exists but is not a PostgreSQL cluster: move it away and start again",
            cluster.display()
        )));
    }
    let bin = binaries::find(None)?;
    std::fs::create_dir(&scratch).map_err(PgError::io("cannot create the cluster directory"))?;
    run_as.own(&scratch)?;
    tracing::info!(cluster = %cluster.display(), bin = %bin.display(), "creating the embedded PostgreSQL cluster");
    let mut cmd = run_as.command(&bin.join("initdb"), parent);
    cmd.arg("-D").arg(&scratch).args([
        "-U",
        SUPERUSER,
        "--auth=trust",
        "-E",
        "UTF8",
        "--no-locale",
    ]);
    if options.fast {
        cmd.arg("--no-sync");
    }
    let out = cmd.output().await.map_err(PgError::spawn("initdb"))?;
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&scratch);
        return Err(PgError::Failed {
            program: "initdb",
            stderr: one_line(&out.stderr),
        });
    }
    // Only reachable through the socket inside the cluster directory (mode 0700).
    let mut conf =
        format!("\n# mailroom\nlisten_addresses = ''\nport = {PORT}\nmax_connections = 200\n");
    if options.fast {
        conf.push_str("fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n");
    }
    OpenOptions::new()
        .append(true)
        .open(scratch.join("postgresql.conf"))
        .and_then(|mut f| f.write_all(conf.as_bytes()))
        .map_err(PgError::io("cannot write postgresql.conf"))?;
    std::fs::rename(&scratch, cluster)
        .map_err(PgError::io("cannot move the new cluster into place"))
}

/// Removes `postgres.initdb.<pid>` directories whose process is gone (a killed first start).
fn remove_dead_scratch_dirs(parent: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(parent)?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("postgres.initdb."))
        else {
            continue;
        };
        let alive = pid
            .parse::<u32>()
            .is_ok_and(|p| p != std::process::id() && Path::new(&format!("/proc/{p}")).exists());
        if !alive {
            std::fs::remove_dir_all(entry.path())?;
        }
    }
    Ok(())
}
