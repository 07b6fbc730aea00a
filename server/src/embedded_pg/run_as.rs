use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use nix::unistd::{chown, Gid, Uid, User};

use super::PgError;

/// Who runs PostgreSQL: the current user, or the `postgres` system user when we are root
/// (PostgreSQL refuses to run as root, and it should).
#[derive(Clone, Copy, Debug)]
pub struct RunAs {
    pub uid: Uid,
    pub gid: Gid,
    pub dropped: bool,
}

impl RunAs {
    pub fn detect() -> Result<Self, PgError> {
        if !Uid::effective().is_root() {
            return Ok(RunAs {
                uid: Uid::effective(),
                gid: Gid::effective(),
                dropped: false,
            });
        }
        let user = User::from_name("postgres")
            .ok()
            .flatten()
            .ok_or_else(|| PgError::Binaries("running as root, but there is no `postgres` system user to run the database as: install the PostgreSQL server package (it creates one), or run mailroom as an ordinary user".into()))?;
        Ok(RunAs {
            uid: user.uid,
            gid: user.gid,
            dropped: true,
        })
    }

    /// A command for the database user, started in `cwd` (initdb and pg_ctl re-enter their
    /// starting directory, which the database user may not be allowed to, e.g. /root).
    pub fn command(&self, program: &Path, cwd: &Path) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(program);
        cmd.current_dir(cwd);
        if self.dropped {
            cmd.uid(self.uid.as_raw()).gid(self.gid.as_raw());
        }
        // Our own process group: a Ctrl-C meant for mailroom must not reach the postmaster
        // before mailroom stops it cleanly.
        cmd.process_group(0);
        cmd
    }

    /// Makes `dir` (created by us) the database user's, mode 0700 as PostgreSQL requires.
    pub fn own(&self, dir: &Path) -> Result<(), PgError> {
        let what = format!("cannot prepare {}", dir.display());
        if self.dropped {
            chown(dir, Some(self.uid), Some(self.gid))
                .map_err(|e| PgError::io(what.clone())(e.into()))?;
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(PgError::io(what))
    }
}
