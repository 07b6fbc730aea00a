//! The workers every replica runs against the one database, each safe beside any number of
//! copies of itself: the host that starts and stops them, the leader's singleton jobs, the
//! digest ticker, the campaign worker, progress notifications, the delivery engine and the webhook sender.

/// The automation step runner (every replica).
pub mod automations;
/// The campaign worker: start, materialise, hand off, sweep, finish.
pub mod campaign;
/// The delivery worker: claim, render, send stage by stage, record fenced.
pub mod delivery;
/// The digest ticker (every replica).
pub mod digest;
/// The worker host: heartbeat, leader jobs, digest ticker, campaign and delivery workers.
pub mod host;
/// Leader election and the singleton jobs (reaper, retention), fenced by epoch.
pub mod leader;
/// Debounced progress notifications (NOTIFY after commit).
pub mod progress;
/// Events out: signed webhook requests, retried, per-endpoint limited.
pub mod webhooks;

/// Notes how a worker's write to the database went, for the dashboard's database status;
/// returns, for a failure, the database's own trouble behind it (a full disk, say) to log.
pub(crate) fn note_write<T>(written: &anyhow::Result<T>) -> Option<app::domain::WriteTrouble> {
    match written {
        Ok(_) => {
            app::db::health::note_write_success();
            None
        }
        Err(e) => e
            .chain()
            .find_map(|cause| cause.downcast_ref::<sqlx::Error>())
            .and_then(app::db::health::note_write_failure),
    }
}
