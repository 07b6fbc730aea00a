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
