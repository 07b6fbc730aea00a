//! Who owns the cluster: an exclusive `flock` on `<data-dir>/embedded-pg.lock`, whose file
//! names the owner's pid. A guest keeps trying the lock and takes over when the owner is gone.

use std::fs::{File, OpenOptions};
use std::io::{Seek, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};

use super::init::not_writable;
use super::{EmbeddedPg, PgError};

impl EmbeddedPg {
    /// Takes ownership with `lock` held; on failure the lock is released again, so another
    /// process can try.
    pub(super) async fn become_owner(&mut self, mut lock: Flock<File>) -> Result<(), PgError> {
        lock.set_len(0)
            .and_then(|_| lock.rewind())
            .and_then(|_| writeln!(lock, "{}", std::process::id()))
            .map_err(PgError::io("cannot write the lock file"))?;
        *self.lock.lock().await = Some(lock);
        let result = self.start_as_owner().await;
        if result.is_err() {
            *self.lock.lock().await = None;
        }
        result
    }

    /// A guest keeps trying the lock; when the owner is gone it becomes the owner, so the
    /// cluster outlives any one process.
    pub(super) fn spawn_takeover(&self, lock_path: PathBuf) -> tokio::task::JoinHandle<()> {
        let mut me = EmbeddedPg {
            cluster: self.cluster.clone(),
            run_as: self.run_as,
            options: self.options,
            lock: self.lock.clone(),
            takeover: None,
        };
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(2)).await;
                let Ok(file) = open_lock(&lock_path, &lock_path) else {
                    continue;
                };
                if let Ok(lock) = Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                    match me.become_owner(lock).await {
                        Ok(()) => {
                            tracing::info!(
                                "took over the embedded PostgreSQL from a stopped owner"
                            );
                            return;
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "could not take over the embedded PostgreSQL; will retry")
                        }
                    }
                }
            }
        })
    }
}

pub(super) fn open_lock(lock_path: &Path, data_dir: &Path) -> Result<File, PgError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(lock_path)
        .map_err(|e| not_writable(data_dir, e))
}
