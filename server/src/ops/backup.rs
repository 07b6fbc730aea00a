//! `mailroom backup` and `mailroom restore`: the embedded cluster's database to and from a
//! pg_dump custom-format file, with the cluster's own PostgreSQL version of pg_dump/pg_restore.
//!
//! A restore never leaves a half-loaded database under the live name: pg_restore fills a new
//! scratch database, and only when it finished without error is that database renamed into
//! place, in the same transaction that renames the old one away. Any failure before the swap
//! drops the scratch database and leaves the old one as it was.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use sqlx::{ConnectOptions, Connection};

use crate::cli::{BackupArgs, Cli, RestoreArgs};
use crate::embedded_pg::{self, one_line, EmbeddedPg, DATABASE};

/// Scratch databases of a restore in progress, and the old database between swap and drop.
const SCRATCH_PREFIX: &str = "mailroom_restore_";
const RETIRED_PREFIX: &str = "mailroom_replaced_";

fn refuse_external(cli: &Cli, what: &str) -> anyhow::Result<()> {
    if cli.database_url().is_some() {
        bail!("`mailroom {what}` works on the embedded database only, and DATABASE_URL is set: use pg_dump -Fc / pg_restore against that database (docs/operations.md, \"Backup and restore\")");
    }
    Ok(())
}

pub async fn backup(cli: &Cli, args: &BackupArgs) -> anyhow::Result<()> {
    refuse_external(cli, "backup")?;
    if !embedded_pg::exists(&cli.data_dir) {
        bail!(
            "there is no embedded database under {} (nothing to back up): check --data-dir / MAILROOM_DATA_DIR",
            cli.data_dir.display()
        );
    }
    let dir = match args.out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        bail!(
            "cannot write {}: the directory {} does not exist",
            args.out.display(),
            dir.display()
        );
    }
    let pg_dump = embedded_pg::tool(&cli.data_dir, "pg_dump")?;
    // Written beside the target and renamed once complete: a failed or interrupted dump never
    // replaces a good backup with a partial one.
    let mut partial = args.out.clone().into_os_string();
    partial.push(format!(".partial-{}", std::process::id()));
    let partial = PathBuf::from(partial);
    // Created here, owner-only, before pg_dump fills it: the dump holds password hashes and the
    // signing keys kept in the database.
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .with_context(|| format!("cannot write {}", partial.display()))?;
    let pg = match EmbeddedPg::open(&cli.data_dir, embedded_pg::Options::default()).await {
        Ok(pg) => pg,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e.into());
        }
    };
    let mut cmd = tokio::process::Command::new(&pg_dump);
    cmd.args(pg.libpq_args(DATABASE))
        .args(["--format=custom", "--file"])
        .arg(&partial);
    let dumped = run_tool(cmd, "pg_dump").await;
    let stopped = pg.shutdown().await;
    if let Err(e) = dumped {
        let _ = std::fs::remove_file(&partial);
        return Err(e.context("the backup failed"));
    }
    std::fs::rename(&partial, &args.out).with_context(|| {
        format!(
            "cannot move the backup into place at {}",
            args.out.display()
        )
    })?;
    stopped?;
    let size = std::fs::metadata(&args.out).map(|m| m.len()).unwrap_or(0);
    println!(
        "backed up the embedded database of {} to {} ({size} bytes)",
        cli.data_dir.display(),
        args.out.display()
    );
    Ok(())
}

pub async fn restore(cli: &Cli, args: &RestoreArgs) -> anyhow::Result<()> {
    refuse_external(cli, "restore")?;
    let pg_restore = embedded_pg::tool(&cli.data_dir, "pg_restore")?;
    check_archive(&pg_restore, &args.from).await?;
    let pg = EmbeddedPg::open(&cli.data_dir, embedded_pg::Options::default()).await?;
    let result = restore_into(&pg, &pg_restore, cli, args).await;
    let stopped = pg.shutdown().await;
    result?;
    stopped?;
    println!(
        "restored {} into the embedded database of {}; start mailroom as usual (it applies any newer migrations at start)",
        args.from.display(),
        cli.data_dir.display()
    );
    Ok(())
}

/// Refuses a missing file or anything that is not a readable custom-format dump, before the
/// database is touched.
async fn check_archive(pg_restore: &Path, file: &Path) -> anyhow::Result<()> {
    let mut magic = [0u8; 5];
    std::fs::File::open(file)
        .and_then(|mut f| f.read_exact(&mut magic))
        .map_err(|e| anyhow!("cannot read the backup {}: {e}", file.display()))?;
    if &magic != b"PGDMP" {
        bail!(
            "{} is not a Mailroom backup (not a pg_dump custom-format archive)",
            file.display()
        );
    }
    let mut cmd = tokio::process::Command::new(pg_restore);
    cmd.arg("--list").arg(file);
    run_tool(cmd, "pg_restore --list")
        .await
        .with_context(|| format!("{} is not a readable backup", file.display()))
}

async fn restore_into(
    pg: &EmbeddedPg,
    pg_restore: &Path,
    cli: &Cli,
    args: &RestoreArgs,
) -> anyhow::Result<()> {
    if !pg.owned().await {
        let owner =
            std::fs::read_to_string(cli.data_dir.join("embedded-pg.lock")).unwrap_or_default();
        bail!(
            "another mailroom process (pid {}) is using the data directory {}: stop every mailroom process on it before restoring",
            owner.trim(),
            cli.data_dir.display()
        );
    }
    // Statement logging off: a slow DROP DATABASE must not add a warning to the one-line output.
    let mut admin = pg
        .connect_options("postgres")
        .disable_statement_logging()
        .connect()
        .await?;
    // We own the cluster, so no other restore runs: any scratch or retired database left here
    // is from an interrupted one.
    for prefix in [SCRATCH_PREFIX, RETIRED_PREFIX] {
        for name in app::db::cluster::databases_with_prefix(&mut admin, prefix).await? {
            app::db::cluster::drop_database_if_exists(&mut admin, &name).await?;
        }
    }
    let mut live = pg
        .connect_options(DATABASE)
        .disable_statement_logging()
        .connect()
        .await?;
    let full = app::db::cluster::tables_with_rows(&mut live).await?;
    live.close().await?;
    if !full.is_empty() && !args.force {
        bail!(
            "the database in {} already holds data (tables {}): restore into a fresh --data-dir, or pass --force to replace it",
            cli.data_dir.display(),
            full.join(", ")
        );
    }
    let scratch = format!("{SCRATCH_PREFIX}{}", std::process::id());
    app::db::cluster::create_database(&mut admin, &scratch).await?;
    let mut cmd = tokio::process::Command::new(pg_restore);
    // No owners or grants: the embedded cluster has one role, and a dump taken from an external
    // database (other role names) restores too.
    cmd.args(pg.libpq_args(&scratch))
        .args(["--exit-on-error", "--no-owner", "--no-acl"])
        .arg(&args.from);
    if let Err(e) = run_tool(cmd, "pg_restore").await {
        let _ = app::db::cluster::drop_database_if_exists(&mut admin, &scratch).await;
        return Err(e.context("the restore failed and the database is unchanged"));
    }
    let retired = format!("{RETIRED_PREFIX}{}", std::process::id());
    if let Err(e) = app::db::cluster::swap_databases(&mut admin, DATABASE, &scratch, &retired).await
    {
        let _ = app::db::cluster::drop_database_if_exists(&mut admin, &scratch).await;
        return Err(anyhow!(e).context("cannot put the restored database in place (is a client still connected?); the database is unchanged"));
    }
    app::db::cluster::drop_database_if_exists(&mut admin, &retired).await?;
    admin.close().await?;
    Ok(())
}

/// Runs a PostgreSQL client tool; a failure is one line with its stderr.
async fn run_tool(mut cmd: tokio::process::Command, what: &str) -> anyhow::Result<()> {
    // Our arguments say where to connect; the caller's libpq settings must not redirect it.
    for var in [
        "PGSERVICE",
        "PGOPTIONS",
        "PGSSLMODE",
        "PGDATABASE",
        "PGUSER",
    ] {
        cmd.env_remove(var);
    }
    let out = cmd
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| anyhow!("cannot run {what}: {e}"))?;
    if !out.status.success() {
        bail!("{what}: {}", one_line(&out.stderr));
    }
    Ok(())
}
